/*
 * Tests of proto/ (frames, request parsing, error replies) and of the
 * client library against a fake daemon thread on a temporary socket.
 * End-to-end tests against the real kspecd live elsewhere.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../base/base.h"
#include "../include/kspec.h"
#include "../proto/proto.h"

/* ---- helpers ---- */

static char err[512];
static ks_request_t req;

static int parse_n(const char *s, size_t n)
{
	return ks_request_parse(s, n, &req, err, sizeof err);
}

static int parse(const char *s)
{
	return parse_n(s, strlen(s));
}

/* Every message: non-empty, one line, no trailing period. */
static void check_message(void)
{
	size_t n = strlen(err);

	cr_assert(n > 0, "empty error message");
	cr_assert(strchr(err, '\n') == NULL, "multi-line message: %s", err);
	cr_assert(err[n - 1] != '.', "message ends with a period: %s", err);
}

/* Parses S, expects CODE and a message that mentions WHAT (if not NULL). */
static void reject(const char *s, int code, const char *what)
{
	int rc = parse(s);

	cr_assert_eq(rc, code, "%s: got %s (%s), want %s", s, ks_err_name(rc),
	    err, ks_err_name(code));
	check_message();
	if (what)
		cr_assert(strstr(err, what), "%s: message '%s' lacks '%s'", s,
		    err, what);
}

static void ok_parse(const char *s)
{
	int rc = parse(s);

	cr_assert_eq(rc, KS_OK, "%s: got %s (%s)", s, ks_err_name(rc), err);
}

#define GET_PREFIX "{\"op\":\"get\",\"kernel\":\"gemm\",\"backend\":\"cpu\"," \
	"\"dtype\":\"f32\","

/* ---- frames ---- */

Test(frame, prefix_is_big_endian_and_round_trips)
{
	uint8_t p[KS_FRAME_PREFIX];
	uint32_t h = 0, pl = 0;

	ks_frame_prefix(p, 0x01020304u, 0xa0b0c0d0u);
	cr_assert_eq(p[0], 0x01);
	cr_assert_eq(p[3], 0x04);
	cr_assert_eq(p[4], 0xa0);
	cr_assert_eq(p[7], 0xd0);
	cr_assert_eq(ks_frame_peek(p, sizeof p, UINT32_MAX, UINT32_MAX, &h,
	    &pl), KS_OK);
	cr_assert_eq(h, 0x01020304u);
	cr_assert_eq(pl, 0xa0b0c0d0u);
}

Test(frame, short_prefix_needs_more_bytes)
{
	uint8_t p[KS_FRAME_PREFIX];
	uint32_t h, pl;
	size_t i;

	ks_frame_prefix(p, 10, 0);
	for (i = 0; i < KS_FRAME_PREFIX; i++)
		cr_assert_eq(ks_frame_peek(p, i, KS_MAX_HEADER, 0, &h, &pl), 1);
}

Test(frame, request_limits)
{
	uint8_t p[KS_FRAME_PREFIX];
	uint32_t h, pl;

	ks_frame_prefix(p, 1, 0);
	cr_assert_eq(ks_frame_peek(p, 8, KS_MAX_HEADER, 0, &h, &pl), KS_OK);
	ks_frame_prefix(p, KS_MAX_HEADER, 0);
	cr_assert_eq(ks_frame_peek(p, 8, KS_MAX_HEADER, 0, &h, &pl), KS_OK);
	cr_assert_eq(h, KS_MAX_HEADER);
	ks_frame_prefix(p, 0, 0);
	cr_assert_eq(ks_frame_peek(p, 8, KS_MAX_HEADER, 0, &h, &pl),
	    KS_E_BAD_FRAME);
	ks_frame_prefix(p, KS_MAX_HEADER + 1, 0);
	cr_assert_eq(ks_frame_peek(p, 8, KS_MAX_HEADER, 0, &h, &pl),
	    KS_E_TOO_LARGE);
	ks_frame_prefix(p, 10, 1);
	cr_assert_eq(ks_frame_peek(p, 8, KS_MAX_HEADER, 0, &h, &pl),
	    KS_E_BAD_FRAME);
}

Test(frame, four_gib_header_is_too_large)
{
	uint8_t p[KS_FRAME_PREFIX] = { 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0 };
	uint32_t h, pl;

	cr_assert_eq(ks_frame_peek(p, 8, KS_MAX_HEADER, 0, &h, &pl),
	    KS_E_TOO_LARGE);
}

Test(frame, garbage_prefix_is_rejected)
{
	const uint8_t *p = (const uint8_t *)"GET / HTTP/1.1\r\n";
	uint32_t h, pl;

	cr_assert_lt(ks_frame_peek(p, 16, KS_MAX_HEADER, 0, &h, &pl), 0);
}

Test(frame, reply_payload_limit)
{
	uint8_t p[KS_FRAME_PREFIX];
	uint32_t h, pl;

	ks_frame_prefix(p, 10, KS_MAX_REPLY_PAYLOAD);
	cr_assert_eq(ks_frame_peek(p, 8, KS_MAX_REPLY_HEADER,
	    KS_MAX_REPLY_PAYLOAD, &h, &pl), KS_OK);
	cr_assert_eq(pl, KS_MAX_REPLY_PAYLOAD);
	ks_frame_prefix(p, 10, KS_MAX_REPLY_PAYLOAD + 1);
	cr_assert_eq(ks_frame_peek(p, 8, KS_MAX_REPLY_HEADER,
	    KS_MAX_REPLY_PAYLOAD, &h, &pl), KS_E_TOO_LARGE);
}

/* ---- header bytes and JSON ---- */

Test(parse, garbage_header_is_bad_json)
{
	reject("\x01\x02\xff garbage", KS_E_BAD_JSON, NULL);
	reject("GET / HTTP/1.1", KS_E_BAD_JSON, NULL);
}

Test(parse, invalid_json_is_bad_json)
{
	reject("{\"op\":", KS_E_BAD_JSON, NULL);
	reject("{\"op\":\"ping\",}", KS_E_BAD_JSON, NULL);
	reject("{'op':'ping'}", KS_E_BAD_JSON, NULL);
	reject("{\"op\":\"ping\"} x", KS_E_BAD_JSON, NULL);
	reject("{\"op\":\"ping\"}{}", KS_E_BAD_JSON, NULL);
}

Test(parse, trailing_whitespace_is_fine)
{
	ok_parse(" {\"op\":\"ping\"}\n ");
}

Test(parse, nul_byte_in_header_is_rejected)
{
	static const char h[] = "{\"op\":\"ping\"}\0 trailing junk";

	static const char in_string[] = "{\"op\":\"pi\0ng\"}";
	static const char at_end[] = "{\"op\":\"ping\"}\0";

	cr_assert_eq(parse_n(h, sizeof h - 1), KS_E_BAD_JSON);
	check_message();
	cr_assert_eq(parse_n(in_string, sizeof in_string - 1), KS_E_BAD_JSON);
	cr_assert_eq(parse_n(at_end, sizeof at_end - 1), KS_E_BAD_JSON);
}

Test(parse, nul_escape_is_rejected)
{
	reject(GET_PREFIX "\"shape\":{}, \"target\":\"x\\u0000y\"}",
	    KS_E_BAD_JSON, NULL);
	reject("{\"op\":\"ping\",\"id\\u0000x\":1}", KS_E_BAD_JSON, NULL);
	/* An escaped backslash followed by u0000 is not a NUL. */
	cr_assert_neq(parse(GET_PREFIX "\"shape\":{},"
	    "\"target\":\"a\\\\u0000\"}"),
	    KS_E_BAD_JSON);
}

Test(parse, only_the_given_bytes_are_parsed)
{
	/* The bytes after LEN must not be read. */
	static const char h[] = "{\"op\":\"ping\"}, \"extra\":1}";

	cr_assert_eq(parse_n(h, 13), KS_OK, "%s", err);
	cr_assert_eq(parse_n(h, 12), KS_E_BAD_JSON);
}

Test(parse, empty_and_oversized_headers)
{
	char *big;

	cr_assert_eq(parse_n("", 0), KS_E_BAD_FRAME);
	big = malloc(KS_MAX_HEADER + 1);
	memset(big, ' ', KS_MAX_HEADER + 1);
	big[0] = '{';
	big[1] = '}';
	cr_assert_eq(parse_n(big, KS_MAX_HEADER + 1), KS_E_TOO_LARGE);
	free(big);
}

Test(parse, non_object_is_bad_json)
{
	reject("[\"ping\"]", KS_E_BAD_JSON, "object");
	reject("\"ping\"", KS_E_BAD_JSON, "object");
	reject("42", KS_E_BAD_JSON, "object");
	reject("null", KS_E_BAD_JSON, "object");
}

Test(parse, nesting_is_limited)
{
	/* Depth 4 passes the depth check (and fails on the unknown field). */
	reject("{\"op\":\"ping\",\"x\":{\"a\":{\"b\":{}}}}", KS_E_UNKNOWN_FIELD,
	    "'x'");
	reject("{\"op\":\"ping\",\"x\":{\"a\":{\"b\":{\"c\":{}}}}}",
	    KS_E_TOO_LARGE, "nesting");
	reject("{\"op\":\"ping\",\"x\":[[[[1]]]]}", KS_E_TOO_LARGE,
	    "nesting");
}

Test(parse, absurd_nesting_is_rejected_without_crashing)
{
	char h[4100];
	int i, rc;

	for (i = 0; i < 2000; i++)
		h[i] = '[';
	for (; i < 4000; i++)
		h[i] = ']';
	h[i] = '\0';
	rc = parse(h);
	cr_assert(rc == KS_E_BAD_JSON || rc == KS_E_TOO_LARGE);
}

/* ---- ops and fields ---- */

Test(parse, simple_ops)
{
	ok_parse("{\"op\":\"ping\"}");
	cr_assert_eq(req.op, KS_OP_PING);
	cr_assert_eq(req.has_id, 0);
	ok_parse("{\"op\":\"hello\",\"id\":3}");
	cr_assert_eq(req.op, KS_OP_HELLO);
	cr_assert_eq(req.has_id, 1);
	cr_assert_eq(req.id, 3);
	ok_parse("{\"id\":0,\"op\":\"stats\"}");
	cr_assert_eq(req.op, KS_OP_STATS);
	cr_assert_eq(req.has_id, 1);
	cr_assert_eq(req.id, 0);
}

Test(parse, op_names)
{
	cr_assert_str_eq(ks_op_name(KS_OP_PING), "ping");
	cr_assert_str_eq(ks_op_name(KS_OP_HELLO), "hello");
	cr_assert_str_eq(ks_op_name(KS_OP_GET), "get");
	cr_assert_str_eq(ks_op_name(KS_OP_STATS), "stats");
	cr_assert_str_eq(ks_op_name(KS_OP_COUNT_), "?");
}

Test(parse, unknown_op_is_named)
{
	reject("{\"op\":\"warm_all\"}", KS_E_UNKNOWN_OP, "warm_all");
	reject("{\"op\":\"PING\"}", KS_E_UNKNOWN_OP, "PING");
	reject("{\"op\":\"\"}", KS_E_UNKNOWN_OP, NULL);
}

Test(parse, missing_or_mistyped_op)
{
	reject("{}", KS_E_BAD_REQUEST, "'op'");
	reject("{\"id\":1}", KS_E_BAD_REQUEST, "'op'");
	reject("{\"OP\":\"ping\"}", KS_E_BAD_REQUEST, "'op'");
	reject("{\"op\":1}", KS_E_BAD_REQUEST, "'op'");
	reject("{\"op\":null}", KS_E_BAD_REQUEST, "'op'");
}

Test(parse, unknown_top_level_field_is_named)
{
	reject("{\"op\":\"ping\",\"verbose\":true}", KS_E_UNKNOWN_FIELD,
	    "'verbose'");
	reject("{\"op\":\"stats\",\"kernel\":\"gemm\"}", KS_E_UNKNOWN_FIELD,
	    "'kernel'");
	reject(GET_PREFIX "\"shape\":{},\"kernal\":\"gemv\"}",
	    KS_E_UNKNOWN_FIELD, "'kernal'");
	/* Lookups are case-sensitive: "Kernel" is not "kernel". */
	reject(GET_PREFIX "\"shape\":{},\"Kernel\":\"gemv\"}",
	    KS_E_UNKNOWN_FIELD, "'Kernel'");
}

Test(parse, unknown_field_echo_is_sanitized_and_bounded)
{
	char h[512], name[301];

	memset(name, 'x', 300);
	name[300] = '\0';
	snprintf(h, sizeof h, "{\"op\":\"ping\",\"%s\":1}", name);
	reject(h, KS_E_UNKNOWN_FIELD, "xxx...");
	cr_assert_lt(strlen(err), 200);
	reject("{\"op\":\"ping\",\"a\\nb\\u00e9\":1}", KS_E_UNKNOWN_FIELD,
	    "'a?b?" "?'");
}

Test(parse, duplicate_keys_at_top_level)
{
	reject("{\"op\":\"ping\",\"op\":\"get\"}", KS_E_DUPLICATE_KEY, "'op'");
	reject(GET_PREFIX "\"shape\":{},\"kernel\":\"gemv\"}",
	    KS_E_DUPLICATE_KEY, "'kernel'");
	reject(GET_PREFIX "\"shape\":{},\"shape\":{\"M\":1}}",
	    KS_E_DUPLICATE_KEY, "'shape'");
}

Test(parse, duplicate_keys_inside_shape)
{
	reject(GET_PREFIX "\"shape\":{\"M\":1,\"N\":2,\"M\":3}}",
	    KS_E_DUPLICATE_KEY, "'M' in 'shape'");
}

Test(parse, duplicate_keys_in_nested_unknown_objects)
{
	reject("{\"op\":\"ping\",\"x\":{\"a\":1,\"a\":2}}", KS_E_DUPLICATE_KEY,
	    "'a'");
}

Test(parse, duplicate_keys_in_large_objects)
{
	char h[4096];
	size_t n = 0;
	int i;

	n += (size_t)snprintf(h + n, sizeof h - n, "{\"op\":\"ping\"");
	for (i = 0; i < 100; i++)
		n += (size_t)snprintf(h + n, sizeof h - n, ",\"k%d\":1", i);
	n += (size_t)snprintf(h + n, sizeof h - n, ",\"k57\":2}");
	reject(h, KS_E_DUPLICATE_KEY, "'k57'");
	/* Without the duplicate, the first unknown field is reported. */
	n = 0;
	n += (size_t)snprintf(h + n, sizeof h - n, "{\"op\":\"ping\"");
	for (i = 0; i < 100; i++)
		n += (size_t)snprintf(h + n, sizeof h - n, ",\"k%d\":1", i);
	snprintf(h + n, sizeof h - n, "}");
	reject(h, KS_E_UNKNOWN_FIELD, "'k0'");
}

Test(parse, duplicate_id_is_not_echoed)
{
	reject("{\"id\":1,\"op\":\"ping\",\"id\":2}", KS_E_DUPLICATE_KEY,
	    "'id'");
	cr_assert_eq(req.has_id, 0);
}

/* ---- id ---- */

Test(parse, id_is_echoed_on_errors)
{
	reject("{\"id\":7,\"op\":\"nope\"}", KS_E_UNKNOWN_OP, "nope");
	cr_assert_eq(req.has_id, 1);
	cr_assert_eq(req.id, 7);
	/* Read first wherever it stands. */
	reject("{\"op\":\"get\",\"kernal\":1,\"id\":8}", KS_E_UNKNOWN_FIELD,
	    "kernal");
	cr_assert_eq(req.has_id, 1);
	cr_assert_eq(req.id, 8);
	reject("{\"op\":\"ping\",\"id\":9,\"a\":{\"b\":1,\"b\":2}}",
	    KS_E_DUPLICATE_KEY, "'b'");
	cr_assert_eq(req.has_id, 1);
	cr_assert_eq(req.id, 9);
	reject("{\"id\":10,\"op\":\"ping\",\"x\":[[[[]]]]}", KS_E_TOO_LARGE,
	    NULL);
	cr_assert_eq(req.id, 10);
	reject(GET_PREFIX "\"id\":11,\"shape\":{\"M\":1.5}}", KS_E_BAD_SHAPE,
	    "'M'");
	cr_assert_eq(req.id, 11);
}

Test(parse, id_range)
{
	ok_parse("{\"op\":\"ping\",\"id\":9007199254740992}");
	cr_assert_eq(req.id, 9007199254740992ull);
	reject("{\"op\":\"ping\",\"id\":9007199254740994}", KS_E_BAD_REQUEST,
	    "'id'");
	cr_assert_eq(req.has_id, 0);
	reject("{\"op\":\"ping\",\"id\":1e300}", KS_E_BAD_REQUEST, "'id'");
	reject("{\"op\":\"ping\",\"id\":-1}", KS_E_BAD_REQUEST, "'id'");
	reject("{\"op\":\"ping\",\"id\":1.5}", KS_E_BAD_REQUEST, "'id'");
	reject("{\"op\":\"ping\",\"id\":\"7\"}", KS_E_BAD_REQUEST, "'id'");
	reject("{\"op\":\"ping\",\"id\":null}", KS_E_BAD_REQUEST, "'id'");
	cr_assert_eq(req.has_id, 0);
}

/* ---- get ---- */

Test(parse, get_with_every_field)
{
	ok_parse("{\"op\":\"get\",\"id\":42,\"kernel\":\"gemm\","
	    "\"backend\":\"cuda\",\"target\":\"sm_90\",\"format\":\"cubin\","
	    "\"dtype\":\"bf16\",\"mode\":\"fast\","
	    "\"shape\":{\"N\":4096,\"K\":4096,\"M\":-1,\"B\":0},"
	    "\"dynamic\":[\"S\",\"T_2\"],\"return\":\"meta\"}");
	cr_assert_eq(req.op, KS_OP_GET);
	cr_assert_eq(req.id, 42);
	cr_assert_str_eq(req.get.kernel, "gemm");
	cr_assert_str_eq(req.get.backend, "cuda");
	cr_assert_str_eq(req.get.target, "sm_90");
	cr_assert_str_eq(req.get.format, "cubin");
	cr_assert_str_eq(req.get.dtype, "bf16");
	cr_assert_str_eq(req.get.mode, "fast");
	cr_assert_eq(req.get.nshape, 4);
	cr_assert_str_eq(req.get.shape[0].name, "N");
	cr_assert_eq(req.get.shape[0].value, 4096);
	cr_assert_str_eq(req.get.shape[1].name, "K");
	/* Negative and zero pass through: the daemon rejects them with the
	 * kernel's context. */
	cr_assert_str_eq(req.get.shape[2].name, "M");
	cr_assert_eq(req.get.shape[2].value, -1);
	cr_assert_eq(req.get.shape[3].value, 0);
	cr_assert_eq(req.get.ndynamic, 2);
	cr_assert_str_eq(req.get.dynamic[0], "S");
	cr_assert_str_eq(req.get.dynamic[1], "T_2");
	cr_assert_eq(req.get.meta_only, 1);
}

Test(parse, get_defaults)
{
	ok_parse(GET_PREFIX "\"shape\":{\"M\":1}}");
	cr_assert_eq(req.has_id, 0);
	cr_assert_str_eq(req.get.target, "auto");
	cr_assert_str_eq(req.get.format, "");
	cr_assert_str_eq(req.get.mode, "exact");
	cr_assert_eq(req.get.ndynamic, 0);
	cr_assert_eq(req.get.meta_only, 0);
	ok_parse(GET_PREFIX "\"shape\":{},\"format\":\"\",\"return\":"
	    "\"artifact\",\"mode\":\"exact\",\"dynamic\":[]}");
	cr_assert_str_eq(req.get.format, "");
	cr_assert_eq(req.get.meta_only, 0);
}

Test(parse, get_missing_required_fields)
{
	reject("{\"op\":\"get\",\"backend\":\"cpu\",\"dtype\":\"f32\","
	    "\"shape\":{}}", KS_E_BAD_REQUEST, "'kernel'");
	reject("{\"op\":\"get\",\"kernel\":\"gemm\",\"dtype\":\"f32\","
	    "\"shape\":{}}", KS_E_BAD_REQUEST, "'backend'");
	reject("{\"op\":\"get\",\"kernel\":\"gemm\",\"backend\":\"cpu\","
	    "\"shape\":{}}", KS_E_BAD_REQUEST, "'dtype'");
	reject(GET_PREFIX "\"mode\":\"exact\"}", KS_E_BAD_REQUEST, "'shape'");
}

Test(parse, get_wrong_types)
{
	reject(GET_PREFIX "\"shape\":{},\"target\":5}", KS_E_BAD_REQUEST,
	    "'target'");
	reject("{\"op\":\"get\",\"kernel\":[\"gemm\"],\"backend\":\"cpu\","
	    "\"dtype\":\"f32\",\"shape\":{}}", KS_E_BAD_REQUEST, "'kernel'");
	reject(GET_PREFIX "\"shape\":{},\"format\":null}", KS_E_BAD_REQUEST,
	    "'format'");
	reject(GET_PREFIX "\"shape\":[[\"M\",1]]}", KS_E_BAD_REQUEST,
	    "'shape'");
	reject(GET_PREFIX "\"shape\":{},\"dynamic\":\"M\"}", KS_E_BAD_REQUEST,
	    "'dynamic'");
	reject(GET_PREFIX "\"shape\":{},\"return\":\"bytes\"}",
	    KS_E_BAD_REQUEST, "'return'");
	reject(GET_PREFIX "\"shape\":{},\"return\":true}", KS_E_BAD_REQUEST,
	    "'return'");
	reject(GET_PREFIX "\"shape\":{},\"mode\":1}", KS_E_BAD_REQUEST,
	    "'mode'");
}

Test(parse, get_strings_must_be_printable_ascii)
{
	reject(GET_PREFIX "\"shape\":{},\"target\":\"sm 90\"}",
	    KS_E_BAD_REQUEST, "'target'");
	reject(GET_PREFIX "\"shape\":{},\"target\":\"sm_9\\u00e9\"}",
	    KS_E_BAD_REQUEST, "'target'");
	reject(GET_PREFIX "\"shape\":{},\"target\":\"\\t\"}",
	    KS_E_BAD_REQUEST, "'target'");
}

Test(parse, get_bad_mode)
{
	reject(GET_PREFIX "\"shape\":{},\"mode\":\"slow\"}", KS_E_BAD_MODE,
	    "'mode'");
	reject(GET_PREFIX "\"shape\":{},\"mode\":\"Exact\"}", KS_E_BAD_MODE,
	    "'mode'");
}

Test(parse, shape_values_must_be_int64_integers)
{
	reject(GET_PREFIX "\"shape\":{\"M\":1.5}}", KS_E_BAD_SHAPE, "'M'");
	reject(GET_PREFIX "\"shape\":{\"K\":1,\"M\":1e300}}", KS_E_BAD_SHAPE,
	    "'M'");
	reject(GET_PREFIX "\"shape\":{\"M\":-1e300}}", KS_E_BAD_SHAPE, "'M'");
	reject(GET_PREFIX "\"shape\":{\"M\":1e400}}", KS_E_BAD_SHAPE, "'M'");
	reject(GET_PREFIX "\"shape\":{\"M\":9223372036854775808}}",
	    KS_E_BAD_SHAPE, "'M'");
	reject(GET_PREFIX "\"shape\":{\"M\":\"12\"}}", KS_E_BAD_SHAPE, "'M'");
	reject(GET_PREFIX "\"shape\":{\"M\":true}}", KS_E_BAD_SHAPE, "'M'");
	reject(GET_PREFIX "\"shape\":{\"M\":null}}", KS_E_BAD_SHAPE, "'M'");
	reject(GET_PREFIX "\"shape\":{\"M\":[1]}}", KS_E_BAD_SHAPE, "'M'");
	reject(GET_PREFIX "\"shape\":{\"M\":{}}}", KS_E_BAD_SHAPE, "'M'");
	ok_parse(GET_PREFIX "\"shape\":{\"M\":4611686018427387904,"
	    "\"N\":-9223372036854775808,\"K\":1e3}}");
	cr_assert_eq(req.get.shape[0].value, 4611686018427387904ll);
	cr_assert_eq(req.get.shape[1].value, INT64_MIN);
	cr_assert_eq(req.get.shape[2].value, 1000);
}

Test(parse, shape_entry_count_is_limited)
{
	char h[1024];
	size_t n;
	int i;

	n = (size_t)snprintf(h, sizeof h, GET_PREFIX "\"shape\":{");
	for (i = 0; i < KS_MAX_DIMS; i++)
		n += (size_t)snprintf(h + n, sizeof h - n, "%s\"D%d\":%d",
		    i ? "," : "", i, i + 1);
	snprintf(h + n, sizeof h - n, "}}");
	ok_parse(h);
	cr_assert_eq(req.get.nshape, KS_MAX_DIMS);
	snprintf(h + n, sizeof h - n, ",\"X\":1}}");
	reject(h, KS_E_TOO_LARGE, "shape");
}

Test(parse, names_are_length_limited)
{
	char name[KS_MAX_NAME + 2], h[512];

	memset(name, 'a', KS_MAX_NAME);
	name[KS_MAX_NAME] = '\0';
	snprintf(h, sizeof h, "{\"op\":\"get\",\"kernel\":\"%s\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"%s\":1},"
	    "\"dynamic\":[\"b%s\"]}", name, name, name + 1);
	ok_parse(h);
	cr_assert_eq(strlen(req.get.kernel), KS_MAX_NAME);
	cr_assert_eq(strlen(req.get.shape[0].name), KS_MAX_NAME);
	cr_assert_eq(strlen(req.get.dynamic[0]), KS_MAX_NAME);

	name[KS_MAX_NAME] = 'a';
	name[KS_MAX_NAME + 1] = '\0';
	snprintf(h, sizeof h, "{\"op\":\"get\",\"kernel\":\"%s\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{}}", name);
	reject(h, KS_E_TOO_LARGE, "'kernel'");
	snprintf(h, sizeof h, GET_PREFIX "\"shape\":{},\"target\":\"%s\"}",
	    name);
	reject(h, KS_E_TOO_LARGE, "'target'");
	snprintf(h, sizeof h, GET_PREFIX "\"shape\":{\"%s\":1}}", name);
	reject(h, KS_E_TOO_LARGE, "shape entry");
	snprintf(h, sizeof h, GET_PREFIX "\"shape\":{},\"dynamic\":[\"%s\"]}",
	    name);
	reject(h, KS_E_TOO_LARGE, "dynamic entry");
}

Test(parse, shape_names_are_identifiers)
{
	reject(GET_PREFIX "\"shape\":{\"1M\":1}}", KS_E_BAD_SHAPE, "'1M'");
	reject(GET_PREFIX "\"shape\":{\"M-1\":1}}", KS_E_BAD_SHAPE, "'M-1'");
	reject(GET_PREFIX "\"shape\":{\"\":1}}", KS_E_BAD_SHAPE, "''");
	reject(GET_PREFIX "\"shape\":{\"M \":1}}", KS_E_BAD_SHAPE, "'M '");
	ok_parse(GET_PREFIX "\"shape\":{\"_m9\":1}}");
}

Test(parse, bad_dynamic_entries)
{
	reject(GET_PREFIX "\"shape\":{},\"dynamic\":[1]}", KS_E_BAD_SHAPE,
	    "dynamic entry 0");
	reject(GET_PREFIX "\"shape\":{},\"dynamic\":[\"M\",null]}",
	    KS_E_BAD_SHAPE, "dynamic entry 1");
	reject(GET_PREFIX "\"shape\":{},\"dynamic\":[\"\"]}", KS_E_BAD_SHAPE,
	    "dynamic entry ''");
	reject(GET_PREFIX "\"shape\":{},\"dynamic\":[\"a b\"]}",
	    KS_E_BAD_SHAPE, "'a b'");
	reject(GET_PREFIX "\"shape\":{},\"dynamic\":[[\"M\"]]}",
	    KS_E_BAD_SHAPE, "dynamic entry 0");
	reject(GET_PREFIX "\"shape\":{},\"dynamic\":[\"M\",\"M\"]}",
	    KS_E_BAD_SHAPE, "'M'");
	reject(GET_PREFIX "\"shape\":{\"M\":1},\"dynamic\":[\"M\"]}",
	    KS_E_BAD_SHAPE, "'M'");
}

Test(parse, dynamic_count_is_limited)
{
	char h[1024];
	size_t n;
	int i;

	n = (size_t)snprintf(h, sizeof h, GET_PREFIX "\"shape\":{},"
	    "\"dynamic\":[");
	for (i = 0; i <= KS_MAX_DIMS; i++)
		n += (size_t)snprintf(h + n, sizeof h - n, "%s\"D%d\"",
		    i ? "," : "", i);
	snprintf(h + n, sizeof h - n, "]}");
	reject(h, KS_E_TOO_LARGE, "dynamic");
}

/* A warm item the parser refuses is that item's error: the request and
 * the other items stand.  What concerns the request itself still fails
 * it. */
Test(parse, warm_item_errors_are_per_item)
{
	ok_parse("{\"op\":\"warm\",\"id\":4,\"progress\":true,\"items\":["
	    "{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\","
	    "\"shape\":{\"M\":1}},{\"kernel\":\"gemm\",\"shpe\":{}},7,"
	    "{\"kernel\":\"rope\",\"backend\":\"cpu\",\"dtype\":\"bf16\","
	    "\"shape\":{\"T\":1.5}},{\"kernel\":\"softmax\",\"backend\":"
	    "\"cpu\",\"dtype\":\"f16\",\"shape\":{}}]}");
	cr_assert_eq(req.op, KS_OP_WARM);
	cr_assert_eq(req.nitems, 5);
	cr_assert_eq(req.progress, 1);
	cr_assert_not_null(req.item_errs);
	cr_assert_eq(req.item_errs[0].code, KS_OK);
	cr_assert_eq(req.item_errs[1].code, KS_E_UNKNOWN_FIELD);
	cr_assert(strstr(req.item_errs[1].msg, "'shpe'") &&
	    !strstr(req.item_errs[1].msg, "items["), "%s",
	    req.item_errs[1].msg);
	cr_assert_eq(req.item_errs[2].code, KS_E_BAD_REQUEST);
	cr_assert_eq(req.item_errs[3].code, KS_E_BAD_SHAPE);
	cr_assert_eq(req.item_errs[4].code, KS_OK);
	cr_assert_str_eq(req.items[4].kernel, "softmax");
	cr_assert_str_eq(req.items[0].kernel, "gemm");
	ks_request_close(&req);

	ok_parse("{\"op\":\"warm\",\"items\":[{\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1}}]}");
	cr_assert_null(req.item_errs);
	cr_assert_eq(req.progress, 0);
	ks_request_close(&req);

	reject("{\"op\":\"warm\",\"items\":[],\"progress\":1}",
	    KS_E_BAD_REQUEST, "'progress'");
	reject("{\"op\":\"warm\",\"items\":{}}", KS_E_BAD_REQUEST, "'items'");
	reject("{\"op\":\"warm\",\"items\":[],\"force\":true}",
	    KS_E_UNKNOWN_FIELD, "'force'");
	reject("{\"op\":\"warm\",\"items\":[{\"shape\":{\"M\":1,\"M\":2}}]}",
	    KS_E_DUPLICATE_KEY, "'M'");
}

Test(parse, cancel_names_a_request)
{
	ok_parse("{\"op\":\"cancel\",\"id\":2,\"request\":7}");
	cr_assert_eq(req.op, KS_OP_CANCEL);
	cr_assert_eq(req.request, 7);
	cr_assert_str_eq(ks_op_name(KS_OP_CANCEL), "cancel");
	reject("{\"op\":\"cancel\",\"id\":2}", KS_E_BAD_REQUEST, "'request'");
	reject("{\"op\":\"cancel\",\"request\":-1}", KS_E_BAD_REQUEST,
	    "'request'");
	reject("{\"op\":\"cancel\",\"request\":\"7\"}", KS_E_BAD_REQUEST,
	    "'request'");
	reject("{\"op\":\"cancel\",\"request\":1,\"all\":true}",
	    KS_E_UNKNOWN_FIELD, "'all'");
}

/* evict --stale: "stale" alone or with "dry_run", never beside another
 * choice of what to evict, and "dry_run" only with it. */
Test(parse, evict_stale_and_dry_run)
{
	ok_parse("{\"op\":\"evict\",\"stale\":true}");
	cr_assert(req.filter.stale && !req.filter.dry_run);
	ok_parse("{\"op\":\"evict\",\"stale\":true,\"dry_run\":true}");
	cr_assert(req.filter.stale && req.filter.dry_run);
	ok_parse("{\"op\":\"evict\",\"all\":true,\"dry_run\":false}");
	cr_assert(req.filter.all && !req.filter.stale);
	reject("{\"op\":\"evict\",\"stale\":false}", KS_E_BAD_REQUEST,
	    "'stale'");
	reject("{\"op\":\"evict\",\"stale\":true,\"all\":true}",
	    KS_E_BAD_REQUEST, "exactly one");
	reject("{\"op\":\"evict\",\"stale\":true,\"kernel\":\"gemm\"}",
	    KS_E_BAD_REQUEST, "exactly one");
	reject("{\"op\":\"evict\",\"all\":true,\"dry_run\":true}",
	    KS_E_BAD_REQUEST, "'dry_run'");
	reject("{\"op\":\"evict\",\"stale\":true,\"dry_run\":1}",
	    KS_E_BAD_REQUEST, "'dry_run'");
	reject("{\"op\":\"list\",\"stale\":true}", KS_E_UNKNOWN_FIELD,
	    "'stale'");
}

/* A get's deployment: a name, a get's own field (not a get-spec's), and
 * misses of one deployment. */
Test(parse, a_get_declares_its_deployment)
{
	ok_parse("{\"op\":\"get\",\"kernel\":\"gemm\",\"backend\":\"cpu\","
	    "\"dtype\":\"f32\",\"shape\":{\"M\":1},\"deployment\":"
	    "\"llama-8b.v2\"}");
	cr_assert_str_eq(req.get.deployment, "llama-8b.v2");
	ok_parse("{\"op\":\"get\",\"kernel\":\"gemm\",\"backend\":\"cpu\","
	    "\"dtype\":\"f32\",\"shape\":{\"M\":1}}");
	cr_assert_str_eq(req.get.deployment, "");
	reject("{\"op\":\"get\",\"kernel\":\"gemm\",\"backend\":\"cpu\","
	    "\"dtype\":\"f32\",\"shape\":{\"M\":1},\"deployment\":\"a b\"}",
	    KS_E_BAD_REQUEST, "'deployment'");
	reject("{\"op\":\"get\",\"kernel\":\"gemm\",\"backend\":\"cpu\","
	    "\"dtype\":\"f32\",\"shape\":{\"M\":1},\"deployment\":7}",
	    KS_E_BAD_REQUEST, "'deployment'");
	reject("{\"op\":\"explain\",\"kernel\":\"gemm\",\"backend\":"
	    "\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1},\"deployment\":"
	    "\"a\"}", KS_E_UNKNOWN_FIELD, "'deployment'");
	ok_parse("{\"op\":\"warm\",\"items\":[{\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1},"
	    "\"deployment\":\"a\"}]}");
	cr_assert_not_null(req.item_errs);
	cr_assert_eq(req.item_errs[0].code, KS_E_UNKNOWN_FIELD);
	ks_request_close(&req);
	ok_parse("{\"op\":\"misses\",\"deployment\":\"llama\"}");
	cr_assert_str_eq(req.name, "llama");
	ok_parse("{\"op\":\"misses\"}");
	cr_assert_str_eq(req.name, "");
	reject("{\"op\":\"misses\",\"deployment\":\"\"}", KS_E_BAD_REQUEST,
	    "'deployment'");
	reject("{\"op\":\"misses\",\"name\":\"a\"}", KS_E_UNKNOWN_FIELD,
	    "'name'");
}

Test(parse, failure_clears_everything_but_the_id)
{
	reject("{\"op\":\"get\",\"id\":5,\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\","
	    "\"dtype\":\"f32\",\"shape\":{\"M\":1},\"bogus\":1}",
	    KS_E_UNKNOWN_FIELD, "'bogus'");
	cr_assert_eq(req.id, 5);
	cr_assert_str_eq(req.get.kernel, "");
	cr_assert_eq(req.get.nshape, 0);
}

/* ---- error replies ---- */

Test(reply, error_reply_with_and_without_id)
{
	ks_buf_t b;

	ks_buf_init(&b);
	cr_assert_eq(ks_reply_error(&b, 1, 9007199254740992ull,
	    KS_E_BAD_SHAPE, "shape entry 'M' must be \"positive\"\n"), KS_OK);
	cr_assert_str_eq(b.data, "{\"id\":9007199254740992,\"ok\":false,"
	    "\"error\":{\"code\":\"E_BAD_SHAPE\",\"message\":\"shape entry "
	    "'M' must be \\\"positive\\\"\\n\"}}");
	ks_buf_reset(&b);
	cr_assert_eq(ks_reply_error(&b, 0, 0, KS_E_BAD_FRAME, NULL), KS_OK);
	cr_assert_str_eq(b.data, "{\"ok\":false,\"error\":{\"code\":"
	    "\"E_BAD_FRAME\",\"message\":\"malformed frame\"}}");
	ks_buf_close(&b);
}

Test(reply, error_reply_is_a_parseable_reply)
{
	ks_buf_t b;

	/* The daemon's error reply is itself valid for our own parser's
	 * JSON rules (an object, no duplicates). */
	ks_buf_init(&b);
	ks_reply_error(&b, 1, 3, KS_E_UNKNOWN_OP, "unknown op 'x'");
	cr_assert_eq(parse_n(b.data, b.len), KS_E_BAD_REQUEST, "%s", err);
	cr_assert_eq(req.id, 3);
	ks_buf_close(&b);
}

/* ---- default socket ---- */

Test(socket, default_path_rules)
{
	char p[256], want[64];

	setenv("KSPEC_SOCKET", "/run/x.sock", 1);
	setenv("XDG_RUNTIME_DIR", "/run/user/7", 1);
	cr_assert_eq(kspec_default_socket(p, sizeof p), KSPEC_OK);
	cr_assert_str_eq(p, "/run/x.sock");
	setenv("KSPEC_SOCKET", "", 1);
	cr_assert_eq(kspec_default_socket(p, sizeof p), KSPEC_OK);
	cr_assert_str_eq(p, "/run/user/7/kspec/kspecd.sock");
	unsetenv("KSPEC_SOCKET");
	unsetenv("XDG_RUNTIME_DIR");
	cr_assert_eq(kspec_default_socket(p, sizeof p), KSPEC_OK);
	snprintf(want, sizeof want, "/tmp/kspec-%lu/kspecd.sock",
	    (unsigned long)getuid());
	cr_assert_str_eq(p, want);
	cr_assert_eq(kspec_default_socket(p, 5), KSPEC_E_TOO_LARGE);
}

/* ---- client library against a fake daemon ---- */

/* One canned reply.  HEADER is a printf format taking the request id (an
 * unsigned long long) once, or not at all. */
typedef struct {
	const char *header;
	const void *payload;
	uint32_t payload_len;
	uint32_t claim_payload;   /* if not 0: the payload_len sent instead */
	int hang_up;              /* close after this reply's prefix */
} canned_t;

#define FAKE_MAX 8

typedef struct {
	char dir[64];
	char path[108];
	int lfd;
	pthread_t thread;
	const canned_t *script;
	int nscript;
	int greet;                /* script[0] sent on accept, then close */
	/* What the fake saw: each request parsed by ks_request_parse. */
	ks_request_t seen[FAKE_MAX];
	int seen_rc[FAKE_MAX];
	int nseen;
} fake_t;

static int read_full(int fd, void *p, size_t n)
{
	char *q = p;
	ssize_t k;

	while (n) {
		k = read(fd, q, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		q += k;
		n -= (size_t)k;
	}
	return 0;
}

static int write_full(int fd, const void *p, size_t n)
{
	const char *q = p;
	ssize_t k;

	while (n) {
		k = send(fd, q, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		q += k;
		n -= (size_t)k;
	}
	return 0;
}

static void *fake_main(void *arg)
{
	fake_t *f = arg;
	uint8_t prefix[KS_FRAME_PREFIX];
	uint32_t hlen, plen;
	char header[KS_MAX_HEADER], reply[4096];
	int fd, i, n;

	fd = accept(f->lfd, NULL, NULL);
	if (fd < 0)
		return NULL;
	if (f->greet) {
		/* As kspecd refuses a peer: one id-less error, unread input,
		 * closed. */
		n = (int)strlen(f->script[0].header);
		ks_frame_prefix(prefix, (uint32_t)n, 0);
		if (write_full(fd, prefix, sizeof prefix) == 0)
			(void)write_full(fd, f->script[0].header, (size_t)n);
		close(fd);
		return NULL;
	}
	for (i = 0; i < f->nscript && i < FAKE_MAX; i++) {
		const canned_t *c = &f->script[i];

		if (read_full(fd, prefix, sizeof prefix) ||
		    ks_frame_peek(prefix, sizeof prefix, KS_MAX_HEADER, 0,
		    &hlen, &plen) || read_full(fd, header, hlen))
			break;
		f->seen_rc[i] = ks_request_parse(header, hlen, &f->seen[i],
		    NULL, 0);
		f->nseen++;
		n = snprintf(reply, sizeof reply, c->header,
		    (unsigned long long)f->seen[i].id);
		ks_frame_prefix(prefix, (uint32_t)n,
		    c->claim_payload ? c->claim_payload : c->payload_len);
		if (write_full(fd, prefix, sizeof prefix))
			break;
		if (c->hang_up)
			break;
		if (write_full(fd, reply, (size_t)n) ||
		    write_full(fd, c->payload, c->payload_len))
			break;
	}
	close(fd);
	return NULL;
}

static void fake_start_as(fake_t *f, const canned_t *script, int n,
    int greet)
{
	struct sockaddr_un sa;

	memset(f, 0, sizeof *f);
	f->greet = greet;
	snprintf(f->dir, sizeof f->dir, "/tmp/kspec-test-XXXXXX");
	cr_assert_not_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof f->path, "%s/s.sock", f->dir);
	f->script = script;
	f->nscript = n;
	f->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert_geq(f->lfd, 0);
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	strcpy(sa.sun_path, f->path);
	cr_assert_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof sa), 0);
	cr_assert_eq(listen(f->lfd, 4), 0);
	cr_assert_eq(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_start(fake_t *f, const canned_t *script, int n)
{
	fake_start_as(f, script, n, 0);
}

static void fake_stop(fake_t *f)
{
	pthread_join(f->thread, NULL);
	close(f->lfd);
	unlink(f->path);
	rmdir(f->dir);
}

static const uint8_t artifact_bytes[] = { 0x7f, 'E', 'L', 'F', 0, 1, 2, 0 };

/* BLAKE2b-256 of artifact_bytes (b2sum -l 256). */
#define ARTIFACT_HASH \
	"5a5e7c2d42d52bd6d5e9358532ce5523a3ec245cb32eb5508bf65c80c6d7f9a0"

#define GET_REPLY(hash) "{\"id\":%llu,\"ok\":true,\"key\":\"00ff\"," \
	"\"artifact\":\"" hash "\",\"source\":\"compiled\"," \
	"\"kernel\":\"gemm\",\"variant\":\"gemv_m1\",\"format\":\"so\"," \
	"\"entry\":\"ks_gemm\",\"bytes\":8,\"guard\":{\"M\":1}}"
#define GET_OK_HEADER GET_REPLY(ARTIFACT_HASH)

static const kspec_dim_t spec_shape[] = {
	{ "M", 1 }, { "N", 4096 }, { "K", -3 },
};
static const char *const spec_dynamic[] = { "B" };

static kspec_get_spec_t test_spec(void)
{
	kspec_get_spec_t s = {
		.kernel = "gemm", .backend = "cpu", .dtype = "bf16",
		.mode = "fast", .shape = spec_shape, .nshape = 3,
		.dynamic = spec_dynamic, .ndynamic = 1,
	};

	return s;
}

Test(client, get_reads_header_and_payload, .timeout = 10)
{
	static const canned_t script[] = {
		{ "{\"id\":%llu,\"ok\":true,\"pong\":true}", NULL, 0, 0, 0 },
		{ GET_OK_HEADER, artifact_bytes, sizeof artifact_bytes, 0, 0 },
		{ "{\"id\":%llu,\"ok\":true,\"requests\":{\"get\":2}}", NULL, 0,
		    0, 0 },
	};
	kspec_get_spec_t spec = test_spec();
	kspec_artifact_t *a = NULL;
	kspec_client_t *c = NULL;
	const char *code = NULL;
	char *stats = NULL;
	fake_t f;

	fake_start(&f, script, 3);
	cr_assert_eq(kspec_connect(f.path, &c), KSPEC_OK);
	cr_assert_str_eq(kspec_socket_path(c), f.path);
	cr_assert_eq(kspec_ping(c), KSPEC_OK);
	cr_assert_eq(kspec_get(c, &spec, &a), KSPEC_OK, "%s",
	    kspec_last_error(c, NULL));
	cr_assert_str_eq(kspec_last_error(c, &code), "");
	cr_assert_str_eq(code, "");
	cr_assert_eq(a->len, sizeof artifact_bytes);
	cr_assert_arr_eq(a->bytes, artifact_bytes, sizeof artifact_bytes);
	cr_assert_str_eq(a->key, "00ff");
	cr_assert_str_eq(a->artifact, ARTIFACT_HASH);
	cr_assert_str_eq(a->source, "compiled");
	cr_assert_str_eq(a->kernel, "gemm");
	cr_assert_str_eq(a->variant, "gemv_m1");
	cr_assert_str_eq(a->format, "so");
	cr_assert_str_eq(a->entry, "ks_gemm");
	cr_assert_eq(a->size, 8);
	cr_assert_eq(a->meta_len, strlen(a->meta));
	cr_assert(strstr(a->meta, "\"guard\":{\"M\":1}"));
	kspec_artifact_free(a);
	cr_assert_eq(kspec_stats(c, &stats), KSPEC_OK);
	cr_assert(strstr(stats, "\"requests\":{\"get\":2}"));
	kspec_free(stats);
	kspec_close(c);
	fake_stop(&f);

	/* The requests the library sent are valid for the daemon's parser
	 * and say what the spec said. */
	cr_assert_eq(f.nseen, 3);
	cr_assert_eq(f.seen_rc[0], KS_OK);
	cr_assert_eq(f.seen[0].op, KS_OP_PING);
	cr_assert_eq(f.seen_rc[1], KS_OK);
	cr_assert_eq(f.seen[1].op, KS_OP_GET);
	cr_assert_neq(f.seen[1].id, f.seen[0].id);
	cr_assert_str_eq(f.seen[1].get.kernel, "gemm");
	cr_assert_str_eq(f.seen[1].get.backend, "cpu");
	cr_assert_str_eq(f.seen[1].get.target, "auto");
	cr_assert_str_eq(f.seen[1].get.dtype, "bf16");
	cr_assert_str_eq(f.seen[1].get.mode, "fast");
	cr_assert_eq(f.seen[1].get.nshape, 3);
	cr_assert_eq(f.seen[1].get.shape[2].value, -3);
	cr_assert_eq(f.seen[1].get.ndynamic, 1);
	cr_assert_str_eq(f.seen[1].get.dynamic[0], "B");
	cr_assert_eq(f.seen[1].get.meta_only, 0);
	cr_assert_eq(f.seen[2].op, KS_OP_STATS);
}

Test(client, daemon_error_reaches_last_error, .timeout = 10)
{
	static const canned_t script[] = {
		{ "{\"id\":%llu,\"ok\":false,"
		    "\"error\":{\"code\":\"E_BAD_SHAPE\","
		    "\"message\":\"shape entry 'M' must be positive\"}}", NULL,
		    0, 0, 0 },
		{ "{\"id\":%llu,\"ok\":false,\"error\":{\"code\":\"E_FUTURE\","
		    "\"message\":\"a code from a newer daemon\"}}", NULL, 0, 0,
		    0 },
		/* An error reply to a request the daemon could not read has
		 * no id. */
		{ "{\"ok\":false,\"error\":{\"code\":\"E_BAD_JSON\","
		    "\"message\":\"header is not valid JSON\"}}", NULL, 0, 0,
		    0 },
		{ "{\"id\":%llu,\"ok\":true,\"pong\":true}", NULL, 0, 0, 0 },
	};
	kspec_get_spec_t spec = test_spec();
	kspec_artifact_t *a = (kspec_artifact_t *)&spec;
	kspec_client_t *c = NULL;
	const char *code = NULL, *msg;
	fake_t f;

	fake_start(&f, script, 4);
	cr_assert_eq(kspec_connect(f.path, &c), KSPEC_OK);
	cr_assert_eq(kspec_get(c, &spec, &a), KSPEC_E_BAD_SHAPE);
	cr_assert_null(a);
	msg = kspec_last_error(c, &code);
	cr_assert_str_eq(code, "E_BAD_SHAPE");
	cr_assert_str_eq(msg, "shape entry 'M' must be positive");
	cr_assert_eq(kspec_ping(c), KSPEC_E_INTERNAL);
	msg = kspec_last_error(c, &code);
	cr_assert_str_eq(code, "E_FUTURE");
	cr_assert_str_eq(msg, "a code from a newer daemon");
	cr_assert_eq(kspec_ping(c), KSPEC_E_BAD_JSON);
	/* The connection stays usable after error replies. */
	cr_assert_eq(kspec_ping(c), KSPEC_OK);
	msg = kspec_last_error(c, &code);
	cr_assert_str_eq(code, "");
	cr_assert_str_eq(msg, "");
	kspec_close(c);
	fake_stop(&f);
}

Test(client, meta_only_get_has_no_payload, .timeout = 10)
{
	static const canned_t script[] = {
		{ GET_OK_HEADER, NULL, 0, 0, 0 },
	};
	kspec_get_spec_t spec = test_spec();
	kspec_artifact_t *a = NULL;
	kspec_client_t *c = NULL;
	fake_t f;

	spec.meta_only = 1;
	fake_start(&f, script, 1);
	cr_assert_eq(kspec_connect(f.path, &c), KSPEC_OK);
	cr_assert_eq(kspec_get(c, &spec, &a), KSPEC_OK, "%s",
	    kspec_last_error(c, NULL));
	cr_assert_null(a->bytes);
	cr_assert_eq(a->len, 0);
	cr_assert_eq(a->size, 8);
	cr_assert_str_eq(a->variant, "gemv_m1");
	kspec_artifact_free(a);
	kspec_close(c);
	fake_stop(&f);
	cr_assert_eq(f.seen[0].get.meta_only, 1);
}

Test(client, payload_size_mismatch_is_a_protocol_error, .timeout = 10)
{
	static const canned_t script[] = {
		{ GET_OK_HEADER, artifact_bytes, 4, 0, 0 },
		{ "{\"id\":%llu,\"ok\":true,\"pong\":true}", NULL, 0, 0, 0 },
	};
	kspec_get_spec_t spec = test_spec();
	kspec_artifact_t *a = NULL;
	kspec_client_t *c = NULL;
	const char *code = NULL;
	fake_t f;

	fake_start(&f, script, 2);
	cr_assert_eq(kspec_connect(f.path, &c), KSPEC_OK);
	cr_assert_eq(kspec_get(c, &spec, &a), KSPEC_E_PROTO);
	cr_assert_null(a);
	kspec_last_error(c, &code);
	cr_assert_str_eq(code, "E_PROTO");
	/* The whole frame was read: the stream is still in step. */
	cr_assert_eq(kspec_ping(c), KSPEC_OK);
	kspec_close(c);
	fake_stop(&f);
}

Test(client, artifact_not_matching_its_hash_is_refused, .timeout = 10)
{
	static const uint8_t flipped[] = { 0x7f, 'E', 'L', 'F', 0, 1, 3, 0 };
	static const canned_t script[] = {
		{ GET_OK_HEADER, flipped, sizeof flipped, 0, 0 },
		{ GET_REPLY("not-a-hash"), artifact_bytes, 8, 0, 0 },
		{ GET_OK_HEADER, artifact_bytes, 8, 0, 0 },
	};
	kspec_get_spec_t spec = test_spec();
	kspec_artifact_t *a = NULL;
	kspec_client_t *c = NULL;
	const char *code = NULL;
	fake_t f;

	fake_start(&f, script, 3);
	cr_assert_eq(kspec_connect(f.path, &c), KSPEC_OK);
	cr_assert_eq(kspec_get(c, &spec, &a), KSPEC_E_CORRUPT);
	cr_assert_null(a);
	kspec_last_error(c, &code);
	cr_assert_str_eq(code, "E_CORRUPT");
	cr_assert_eq(kspec_get(c, &spec, &a), KSPEC_E_PROTO);
	cr_assert_eq(kspec_get(c, &spec, &a), KSPEC_OK);
	kspec_artifact_free(a);
	kspec_close(c);
	fake_stop(&f);
}

Test(client, unexpected_payload_is_drained_and_reported, .timeout = 10)
{
	static const canned_t script[] = {
		{ "{\"id\":%llu,\"ok\":true,\"pong\":true}", artifact_bytes, 8,
		    0, 0 },
		{ "{\"id\":%llu,\"ok\":true,\"pong\":true}", NULL, 0, 0, 0 },
	};
	kspec_client_t *c = NULL;
	fake_t f;

	fake_start(&f, script, 2);
	cr_assert_eq(kspec_connect(f.path, &c), KSPEC_OK);
	cr_assert_eq(kspec_ping(c), KSPEC_E_PROTO);
	cr_assert_eq(kspec_ping(c), KSPEC_OK);
	kspec_close(c);
	fake_stop(&f);
}

Test(client, wrong_reply_id_drops_the_connection, .timeout = 10)
{
	static const canned_t script[] = {
		{ "{\"id\":999,\"ok\":true,\"pong\":true}", NULL, 0, 0, 0 },
	};
	kspec_client_t *c = NULL;
	fake_t f;

	fake_start(&f, script, 1);
	cr_assert_eq(kspec_connect(f.path, &c), KSPEC_OK);
	cr_assert_eq(kspec_ping(c), KSPEC_E_PROTO);
	cr_assert_eq(kspec_ping(c), KSPEC_E_CONNECT);
	kspec_close(c);
	fake_stop(&f);
}

Test(client, daemon_hanging_up_mid_reply_is_a_connection_error, .timeout = 10)
{
	static const canned_t script[] = {
		{ GET_OK_HEADER, artifact_bytes, 8, 0, 1 },
	};
	kspec_get_spec_t spec = test_spec();
	kspec_artifact_t *a = NULL;
	kspec_client_t *c = NULL;
	const char *code = NULL, *msg;
	fake_t f;

	fake_start(&f, script, 1);
	cr_assert_eq(kspec_connect(f.path, &c), KSPEC_OK);
	cr_assert_eq(kspec_get(c, &spec, &a), KSPEC_E_CONNECT);
	msg = kspec_last_error(c, &code);
	cr_assert_str_eq(code, "E_CONNECT");
	cr_assert(strstr(msg, "closed"), "%s", msg);
	cr_assert_null(a);
	kspec_close(c);
	fake_stop(&f);
}

Test(client, oversized_reply_frame_is_refused, .timeout = 10)
{
	static const canned_t script[] = {
		{ GET_OK_HEADER, NULL, 0, KS_MAX_REPLY_PAYLOAD + 1u, 1 },
	};
	kspec_get_spec_t spec = test_spec();
	kspec_artifact_t *a = NULL;
	kspec_client_t *c = NULL;
	fake_t f;

	fake_start(&f, script, 1);
	cr_assert_eq(kspec_connect(f.path, &c), KSPEC_OK);
	cr_assert_eq(kspec_get(c, &spec, &a), KSPEC_E_PROTO);
	cr_assert(strstr(kspec_last_error(c, NULL), "limits"), "%s",
	    kspec_last_error(c, NULL));
	cr_assert_eq(kspec_ping(c), KSPEC_E_CONNECT);
	cr_assert(strstr(kspec_last_error(c, NULL), "not connected"), "%s",
	    kspec_last_error(c, NULL));
	kspec_close(c);
	fake_stop(&f);
}

Test(client, refusal_sent_before_close_is_read_after_a_failed_send,
    .timeout = 10)
{
	static const canned_t script[] = {
		{ "{\"ok\":false,\"error\":{\"code\":\"E_DENIED\","
		    "\"message\":\"uid 1234 may not use this kspecd\"}}", NULL,
		    0, 0, 0 },
	};
	kspec_client_t *c = NULL;
	const char *code = NULL, *msg;
	fake_t f;

	fake_start_as(&f, script, 1, 1);
	cr_assert_eq(kspec_connect(f.path, &c), KSPEC_OK);
	fake_stop(&f);          /* the refusal is written and the end closed */
	/* The request's send fails (EPIPE): the refusal is still read. */
	cr_assert_eq(kspec_ping(c), KSPEC_E_DENIED);
	msg = kspec_last_error(c, &code);
	cr_assert_str_eq(code, "E_DENIED");
	cr_assert(strstr(msg, "uid 1234 may not use"), "%s", msg);
	kspec_close(c);
}

/* kspec_set_deployment: every get from then on says it, and it parses
 * as the daemon's get field; a bad name is refused locally. */
Test(client, a_declared_deployment_goes_with_every_get, .timeout = 10)
{
	static const canned_t script[] = {
		{ GET_OK_HEADER, artifact_bytes, sizeof artifact_bytes, 0, 0 },
		{ GET_OK_HEADER, artifact_bytes, sizeof artifact_bytes, 0, 0 },
	};
	kspec_get_spec_t spec = test_spec();
	kspec_artifact_t *a = NULL;
	kspec_client_t *c = NULL;
	fake_t f;

	fake_start(&f, script, 2);
	cr_assert_eq(kspec_connect(f.path, &c), KSPEC_OK);
	cr_assert_eq(kspec_set_deployment(c, "a b"), KSPEC_E_INVAL);
	cr_assert_eq(kspec_set_deployment(c, "llama"), KSPEC_OK);
	cr_assert_eq(kspec_get(c, &spec, &a), KSPEC_OK, "%s",
	    kspec_last_error(c, NULL));
	kspec_artifact_free(a);
	cr_assert_eq(kspec_set_deployment(c, NULL), KSPEC_OK);
	cr_assert_eq(kspec_get(c, &spec, &a), KSPEC_OK, "%s",
	    kspec_last_error(c, NULL));
	kspec_artifact_free(a);
	kspec_close(c);
	fake_stop(&f);
	cr_assert_eq(f.nseen, 2);
	cr_assert_eq(f.seen_rc[0], KS_OK);
	cr_assert_str_eq(f.seen[0].get.deployment, "llama");
	cr_assert_str_eq(f.seen[0].get.kernel, "gemm");
	cr_assert_eq(f.seen_rc[1], KS_OK);
	cr_assert_str_eq(f.seen[1].get.deployment, "");
}

Test(client, connect_failure_explains_itself, .timeout = 10)
{
	kspec_client_t *c = NULL;
	const char *code = NULL, *msg;

	cr_assert_eq(kspec_connect("/nonexistent/kspec/s.sock", &c),
	    KSPEC_E_CONNECT);
	cr_assert_not_null(c);
	msg = kspec_last_error(c, &code);
	cr_assert_str_eq(code, "E_CONNECT");
	cr_assert(strstr(msg, "/nonexistent/kspec/s.sock"), "%s", msg);
	cr_assert(strstr(msg, "No such file"), "%s", msg);
	cr_assert_eq(kspec_ping(c), KSPEC_E_CONNECT);
	kspec_close(c);
}

Test(client, invalid_spec_is_refused_locally, .timeout = 10)
{
	kspec_get_spec_t spec = test_spec();
	kspec_artifact_t *a = NULL;
	kspec_client_t *c = NULL;

	kspec_connect("/nonexistent/kspec/s.sock", &c);
	spec.kernel = NULL;
	cr_assert_eq(kspec_get(c, &spec, &a), KSPEC_E_INVAL);
	cr_assert(strstr(kspec_last_error(c, NULL), "kernel"));
	cr_assert_eq(kspec_get(c, NULL, &a), KSPEC_E_INVAL);
	kspec_close(c);
}

Test(client, error_names, .timeout = 10)
{
	cr_assert_str_eq(kspec_err_name(KSPEC_E_BAD_SHAPE), "E_BAD_SHAPE");
	cr_assert_str_eq(kspec_err_name(KSPEC_OK), "OK");
	cr_assert_str_eq(kspec_strerror(KSPEC_E_CONNECT),
	    "cannot connect to kspecd");
}

/* ready: items as warm has them, each item's error its own; no
 * "progress" (ready sends no frames). */
Test(parse, ready_takes_items)
{
	ok_parse("{\"op\":\"ready\",\"id\":3,\"items\":[{\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1}},"
	    "{\"kernel\":\"gemm\",\"shpe\":{}}]}");
	cr_assert_eq(req.op, KS_OP_READY);
	cr_assert_eq(req.nitems, 2);
	cr_assert_not_null(req.item_errs);
	cr_assert_eq(req.item_errs[1].code, KS_E_UNKNOWN_FIELD);
	ks_request_close(&req);
	reject("{\"op\":\"ready\",\"items\":[],\"progress\":true}",
	    KS_E_UNKNOWN_FIELD, "'progress'");
	reject("{\"op\":\"ready\"}", KS_E_BAD_REQUEST, "'items'");
	reject("{\"op\":\"deploy\",\"name\":\"a\",\"items\":[]}",
	    KS_E_BAD_REQUEST, "at least one spec");
	reject("{\"op\":\"deploy\",\"name\":\"a b\",\"items\":[{}]}",
	    KS_E_BAD_REQUEST, "'name'");
	reject("{\"op\":\"undeploy\",\"name\":\"a\",\"items\":[]}",
	    KS_E_UNKNOWN_FIELD, "'items'");
	reject("{\"op\":\"ready\",\"items\":[],\"deployment\":\"a\"}",
	    KS_E_BAD_REQUEST, "not both");
	reject("{\"op\":\"import\",\"path\":\"relative/b.kspec\"}",
	    KS_E_BAD_REQUEST, "absolute");
	ok_parse("{\"op\":\"import\",\"path\":\"/srv/b.kspec\"}");
	cr_assert_str_eq(req.path, "/srv/b.kspec");
	ks_request_close(&req);
	cr_assert_null(req.path);
}
