/*
 * The request decoder (proto.h, ks_request_parse) on any header.
 *
 * Checks, besides the sanitizers': the code is OK or one of the error
 * table's; a refusal's message is one line of printable ASCII (it is
 * echoed to the client), only the id and op survive it, and the error
 * reply made of it is a JSON object with that id, code and message; what
 * was accepted is within its limits; and a get, explain or warm item that
 * normalizes (keys.h) has a canonical get-spec (ks_get_spec_json, what
 * misses and manifests replay) that parses and normalizes again to the
 * same key.
 */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "fuzz.h"

static void check_message(const char *err, size_t errlen)
{
	size_t i;

	KS_FUZZ_CHECK(memchr(err, '\0', errlen) != NULL);
	for (i = 0; err[i]; i++)
		KS_FUZZ_CHECK(err[i] >= 0x20 && err[i] < 0x7f);
}

/* The error reply of a refused request says what the parse said. */
static void check_reply(const ks_request_t *r, int rc, const char *err)
{
	const cJSON *id, *ok, *e, *code, *msg;
	ks_buf_t b;
	cJSON *j;

	ks_buf_init(&b);
	KS_FUZZ_CHECK(ks_reply_error(&b, r->has_id, r->id, rc, err) == KS_OK);
	j = cJSON_ParseWithLength(b.data, b.len);
	KS_FUZZ_CHECK(cJSON_IsObject(j));
	id = cJSON_GetObjectItemCaseSensitive(j, "id");
	ok = cJSON_GetObjectItemCaseSensitive(j, "ok");
	e = cJSON_GetObjectItemCaseSensitive(j, "error");
	code = cJSON_GetObjectItemCaseSensitive(e, "code");
	msg = cJSON_GetObjectItemCaseSensitive(e, "message");
	KS_FUZZ_CHECK(r->has_id ? cJSON_IsNumber(id) &&
	    id->valuedouble == (double)r->id : id == NULL);
	KS_FUZZ_CHECK(cJSON_IsFalse(ok));
	KS_FUZZ_CHECK(cJSON_IsString(code) &&
	    strcmp(code->valuestring, ks_err_name(rc)) == 0);
	KS_FUZZ_CHECK(cJSON_IsString(msg) && strcmp(msg->valuestring,
	    err[0] ? err : ks_strerror(rc)) == 0);
	cJSON_Delete(j);
	ks_buf_close(&b);
}

static int is_token(const char *s, size_t cap)
{
	size_t n = strnlen(s, cap);

	if (n == cap)
		return 0;
	for (; *s; s++)
		if (*s <= 0x20 || *s >= 0x7f)
			return 0;
	return 1;
}

static void check_get(const ks_get_req_t *g)
{
	KS_FUZZ_CHECK(g->nshape >= 0 && g->nshape <= KS_MAX_DIMS);
	KS_FUZZ_CHECK(g->ndynamic >= 0 && g->ndynamic <= KS_MAX_DIMS);
	KS_FUZZ_CHECK(is_token(g->kernel, sizeof g->kernel) &&
	    is_token(g->backend, sizeof g->backend) &&
	    is_token(g->target, sizeof g->target) &&
	    is_token(g->dtype, sizeof g->dtype) &&
	    is_token(g->wdtype, sizeof g->wdtype) &&
	    is_token(g->format, sizeof g->format));
	KS_FUZZ_CHECK(strcmp(g->mode, "exact") == 0 ||
	    strcmp(g->mode, "fast") == 0);
}

/* A get that normalizes: its canonical spec is the same get. */
static void check_spec_round_trip(const ks_get_req_t *req)
{
	ks_keys_t *keys = ks_fuzz_keys();
	ks_request_t again;
	ks_buf_t spec, hdr;
	ks_get_t g, g2;
	char err[512];
	int rc;

	if (ks_keys_normalize(keys, req, &g, err, sizeof err) != KS_OK)
		return;
	ks_buf_init(&spec);
	ks_buf_init(&hdr);
	KS_FUZZ_CHECK(ks_get_spec_json(&g, &spec) == KS_OK);
	KS_FUZZ_CHECK(spec.data[0] == '{' && spec.data[1] == '"');
	KS_FUZZ_CHECK(ks_buf_printf(&hdr, "{\"op\":\"get\",%s",
	    spec.data + 1) == KS_OK);
	rc = ks_request_parse(hdr.data, hdr.len, &again, err, sizeof err);
	if (rc != KS_OK)
		fprintf(stderr, "fuzz: %s: %s\n", hdr.data, err);
	KS_FUZZ_CHECK(rc == KS_OK && again.op == KS_OP_GET);
	rc = ks_keys_normalize(keys, &again.get, &g2, err, sizeof err);
	if (rc != KS_OK)
		fprintf(stderr, "fuzz: %s: %s\n", hdr.data, err);
	KS_FUZZ_CHECK(rc == KS_OK);
	KS_FUZZ_CHECK(memcmp(g.key.b, g2.key.b, KS_HASH_BYTES) == 0);
	ks_request_close(&again);
	ks_buf_close(&spec);
	ks_buf_close(&hdr);
}

KS_FUZZ_TARGET(request)
{
	char err[512];
	ks_request_t r;
	int rc, i;

	rc = ks_request_parse((const char *)data, size, &r, err, sizeof err);
	KS_FUZZ_CHECK(rc == KS_OK || strcmp(ks_err_name(rc), "E_UNKNOWN"));
	KS_FUZZ_CHECK((unsigned)r.op <= KS_OP_COUNT_);
	if (rc != KS_OK) {
		check_message(err, sizeof err);
		KS_FUZZ_CHECK(r.items == NULL && r.item_errs == NULL &&
		    r.path == NULL && r.nitems == 0);
		check_reply(&r, rc, err);
		return 0;
	}
	KS_FUZZ_CHECK(r.op < KS_OP_COUNT_);
	KS_FUZZ_CHECK(!r.has_id || r.id <= (1ull << 53));
	if (r.op == KS_OP_GET || r.op == KS_OP_EXPLAIN) {
		check_get(&r.get);
		check_spec_round_trip(&r.get);
	}
	KS_FUZZ_CHECK(r.nitems >= 0 && r.nitems <= KS_MAX_WARM_ITEMS);
	for (i = 0; i < r.nitems; i++) {
		if (r.item_errs && r.item_errs[i].code != KS_OK) {
			check_message(r.item_errs[i].msg,
			    sizeof r.item_errs[i].msg);
			continue;
		}
		check_get(&r.items[i]);
		check_spec_round_trip(&r.items[i]);
	}
	if (r.op == KS_OP_IMPORT)
		KS_FUZZ_CHECK(r.path && r.path[0] == '/' &&
		    strlen(r.path) <= KS_MAX_PATH);
	if (r.op == KS_OP_LIST)
		KS_FUZZ_CHECK(r.filter.limit >= 1 &&
		    r.filter.limit <= KS_LIST_MAX_LIMIT);
	ks_request_close(&r);
	return 0;
}
