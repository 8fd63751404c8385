/*
 * Request keys (server/key.c): every input that changes an artifact
 * changes the key; nothing else does; keys are stable.
 */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../exec/exec.h"
#include "../server/keys.h"

static ks_keys_t *S;

/* Keys as the daemon has them: fingerprints, and the compilers as a
 * worker's probe reports them (made here, in this process). */
static ks_keys_t *keys_new(void)
{
	ks_keys_t *k = aligned_alloc(_Alignof(ks_keys_t), sizeof *k);
	char err[256];
	ks_buf_t probe;

	cr_assert(k);
	cr_assert_eq(ks_keys_init(k), KS_OK);
	ks_buf_init(&probe);
	cr_assert_eq(ks_exec_probe(&probe), KS_OK);
	cr_assert_eq(ks_keys_load_probe(k, probe.data, err, sizeof err),
	    KS_OK, "%s", err);
	ks_buf_close(&probe);
	return k;
}

static void keys_free(ks_keys_t *k)
{
	ks_keys_close(k);
	free(k);
}

static void up(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
	S = keys_new();
}

static void down(void)
{
	keys_free(S);
}

TestSuite(key, .init = up, .fini = down, .timeout = 60);

/* The key of a get header (fields without op), as hex. */
static void key_of(const char *fields, char hex[KS_HASH_HEX])
{
	char json[1024], err[512];
	ks_request_t req;
	ks_get_t g;
	int rc;

	snprintf(json, sizeof json, "{\"op\":\"get\",%s}", fields);
	cr_assert_eq(ks_request_parse(json, strlen(json), &req, err,
	    sizeof err), KS_OK, "%s: %s", json, err);
	rc = ks_keys_normalize(S, &req.get, &g, err, sizeof err);
	cr_assert_eq(rc, KS_OK, "%s: %s", json, err);
	ks_hash_hex(&g.key, hex);
	ks_request_close(&req);
}

#define BASE "\"kernel\":\"gemm\",\"backend\":\"cpu\",\"target\":\"x86-64-v4\""

Test(key, same_request_same_key_whatever_the_order_id_or_return)
{
	char a[KS_HASH_HEX], b[KS_HASH_HEX];

	key_of(BASE ",\"dtype\":\"bf16\",\"shape\":{\"M\":1,\"N\":64,\"K\":32}",
	    a);
	key_of("\"id\":9,\"return\":\"meta\",\"shape\":{\"K\":32,\"N\":64,"
	    "\"M\":1},\"dtype\":\"bf16\"," BASE, b);
	cr_assert_str_eq(a, b);
}

/* Each variation of one artifact-changing input gives a key of its own. */
Test(key, every_output_affecting_input_changes_the_key)
{
	static const char *const variants[] = {
		BASE ",\"dtype\":\"bf16\",\"shape\":{\"M\":1,\"N\":64,\"K\":32}",
		BASE ",\"dtype\":\"f16\",\"shape\":{\"M\":1,\"N\":64,\"K\":32}",
		BASE ",\"dtype\":\"bf16\",\"shape\":{\"M\":1,\"N\":65,\"K\":32}",
		BASE ",\"dtype\":\"bf16\",\"shape\":{\"M\":2,\"N\":64,\"K\":32}",
		BASE ",\"dtype\":\"bf16\",\"mode\":\"fast\",\"shape\":{\"M\":1,"
		    "\"N\":64,\"K\":32}",
		BASE ",\"dtype\":\"bf16\",\"shape\":{\"N\":64,\"K\":32},"
		    "\"dynamic\":[\"M\"]",
		"\"kernel\":\"gemm\",\"backend\":\"cpu\",\"target\":"
		    "\"x86-64-v3\",\"dtype\":\"bf16\",\"shape\":{\"M\":1,"
		    "\"N\":64,\"K\":32}",
	};
	enum { N = sizeof variants / sizeof variants[0] };
	char keys[N][KS_HASH_HEX];
	int i, j;

	for (i = 0; i < N; i++)
		key_of(variants[i], keys[i]);
	for (i = 0; i < N; i++)
		for (j = i + 1; j < N; j++)
			cr_assert_str_neq(keys[i], keys[j],
			    "same key for\n%s\n%s", variants[i], variants[j]);
}

Test(key, cuda_arch_and_format_change_the_key)
{
	const ks_backend_t *cuda = ks_backend_find("cuda");
	char err[256], k[4][KS_HASH_HEX];
	int i, j;

	if (!cuda || cuda->available(err, sizeof err) != KS_OK)
		cr_skip_test("cuda backend unavailable here: %s", err);
	key_of("\"kernel\":\"gemm\",\"backend\":\"cuda\",\"target\":\"sm_80\","
	    "\"format\":\"ptx\",\"dtype\":\"f32\",\"shape\":{\"M\":1,\"N\":8,"
	    "\"K\":8}", k[0]);
	key_of("\"kernel\":\"gemm\",\"backend\":\"cuda\",\"target\":\"sm_90\","
	    "\"format\":\"ptx\",\"dtype\":\"f32\",\"shape\":{\"M\":1,\"N\":8,"
	    "\"K\":8}", k[1]);
	key_of("\"kernel\":\"gemm\",\"backend\":\"cuda\",\"target\":\"sm_90\","
	    "\"format\":\"cubin\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"N\":8,\"K\":8}", k[2]);
	key_of(BASE ",\"dtype\":\"f32\",\"shape\":{\"M\":1,\"N\":8,\"K\":8}",
	    k[3]);
	for (i = 0; i < 4; i++)
		for (j = i + 1; j < 4; j++)
			cr_assert_str_neq(k[i], k[j]);
}

/* Another compiler version (a different identity string for the same
 * backend and target) must not share keys with this one. */
Test(key, compiler_identity_changes_the_key)
{
	static const char req[] = "\"kernel\":\"gemm\",\"backend\":\"cpu\","
	    "\"target\":\"x86-64-v2\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"N\":8,\"K\":8}";
	char a[KS_HASH_HEX], b[KS_HASH_HEX];
	ks_ident_t *id;

	key_of(req, a);
	/* Replace the cached identity with one naming another compiler. */
	for (id = S->idents; id; id = id->next)
		if (strcmp(id->requested, "x86-64-v2") == 0)
			id->requested[0] = '\0';
	cr_assert_eq(ks_keys_ident_add(S, &ks_backend_cpu, "x86-64-v2",
	    "x86-64-v2", "libgccjit 13.1.0; -march=x86-64-v2 -O3 "
	    "-ffp-contract=off", NULL), KS_OK);
	key_of(req, b);
	cr_assert_str_neq(a, b);
}

/* Keys depend on the request and the code alone, not on process state:
 * two identity caches filled independently give the same key (the e2e
 * restart test checks the same across daemon runs). */
Test(key, keys_are_stable_across_runs)
{
	char a[KS_HASH_HEX], b[KS_HASH_HEX];
	ks_keys_t *fresh = keys_new();
	ks_keys_t *save = S;

	key_of(BASE ",\"dtype\":\"f32\",\"shape\":{\"M\":3,\"N\":8,\"K\":8}",
	    a);
	S = fresh;
	key_of(BASE ",\"dtype\":\"f32\",\"shape\":{\"M\":3,\"N\":8,\"K\":8}",
	    b);
	S = save;
	keys_free(fresh);
	cr_assert_str_eq(a, b);
}

/* E: an entry of the gemm at SHAPE (cpu, x86-64-v4, f32), filed under the
 * key the request FIELDS gets now and today's compiler. */
static ks_store_entry_t entry_of(const char *fields, const char *shape,
    char hex[KS_HASH_HEX])
{
	ks_store_entry_t e = { .kernel = "gemm", .variant = "general",
	    .backend = "cpu", .target = "x86-64-v4", .dtype = "f32",
	    .mode = "exact", .format = "so", .shape = shape };
	const ks_ident_t *id;

	key_of(fields, hex);
	cr_assert_eq(ks_hash_from_hex(hex, &e.key), KS_OK);
	for (id = S->idents; id; id = id->next)
		if (id->backend == &ks_backend_cpu &&
		    strcmp(id->target, "x86-64-v4") == 0)
			e.compiler = id->identity;
	cr_assert_not_null(e.compiler);
	return e;
}

static int check(const ks_store_entry_t *e, const char *want_why)
{
	const char *why = "";
	int v = ks_keys_check_entry(S, e, &why);

	if (want_why)
		cr_assert_str_eq(why, want_why);
	return v;
}

/* evict --stale's judgement of one stored entry: current when the key
 * its columns give now is its key, stale for a reason when it cannot be,
 * unchecked (kept) when its backend or target is not there now. */
Test(key, a_stored_entry_is_current_stale_or_unchecked)
{
	/* One column of the current entry changed, and what that makes it. */
	static const struct {
		size_t field;
		const char *value;
		int want;
		const char *why;
	} cases[] = {
#define F(name) offsetof(ks_store_entry_t, name)
		{ F(shape), "N=8,K=8,M=1", KS_KEYS_CURRENT, "" },
		{ F(kernel), "gemm_v0", KS_KEYS_STALE, "kernel" },
		{ F(shape), "M=0,N=8,K=8", KS_KEYS_STALE, "spec" },
		{ F(shape), "M=1,N=8", KS_KEYS_STALE, "spec" },
		{ F(dtype), "f64", KS_KEYS_STALE, "spec" },
		{ F(format), "ptx", KS_KEYS_STALE, "spec" },
		{ F(compiler), "libgccjit 11.0; -O3", KS_KEYS_CURRENT, "" },
		{ F(target), "x86-64-v9", KS_KEYS_UNCHECKED, "target" },
		{ F(backend), "tpu", KS_KEYS_UNCHECKED, "backend" },
#undef F
	};
	char hex[KS_HASH_HEX];
	ks_store_entry_t e, d;
	ks_binfo_t *cuda = NULL;
	size_t i;

	e = entry_of(BASE ",\"dtype\":\"f32\",\"shape\":{\"M\":1,\"N\":8,"
	    "\"K\":8}", "M=1,N=8,K=8", hex);
	cr_assert_eq(check(&e, NULL), KS_KEYS_CURRENT);
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *why = "";

		d = e;
		*(const char **)((char *)&d + cases[i].field) = cases[i].value;
		cr_assert_eq(ks_keys_check_entry(S, &d, &why), cases[i].want,
		    "case %zu", i);
		if (cases[i].want != KS_KEYS_CURRENT)
			cr_assert_str_eq(why, cases[i].why, "case %zu", i);
	}
	d = entry_of(BASE ",\"dtype\":\"f32\",\"shape\":{\"N\":8,\"K\":8},"
	    "\"dynamic\":[\"M\"]", "N=8,K=8,M=dyn", hex);
	cr_assert_eq(check(&d, NULL), KS_KEYS_CURRENT);
	d.shape = "N=8,K=8,M=1";
	cr_assert_eq(check(&d, "fingerprint"), KS_KEYS_STALE);
	/* Another key for the same columns and today's compiler: the
	 * definition changed.  With another compiler: that. */
	d = e;
	d.key.b[31] ^= 1;
	cr_assert_eq(check(&d, "fingerprint"), KS_KEYS_STALE);
	d.compiler = "libgccjit 11.0; -O3";
	cr_assert_eq(check(&d, "compiler"), KS_KEYS_STALE);

	/* A backend that is merely missing keeps its entries. */
	for (i = 0; i < (size_t)S->nbackends; i++)
		if (S->backends[i].backend == &ks_backend_cuda)
			cuda = &S->backends[i];
	cr_assert_not_null(cuda);
	d = e;
	d.backend = "cuda";
	d.target = "sm_90";
	d.format = "ptx";
	d.key.b[0] ^= 1;
	cuda->available = 0;            /* no NVRTC, say */
	cr_assert_eq(check(&d, "backend"), KS_KEYS_UNCHECKED);
}

/* The normalized get of a header (fields without op); KS_OK or its code. */
static int get_of(const char *fields, ks_get_t *g, char *err, size_t errlen)
{
	char json[1024];
	ks_request_t req;
	int rc;

	snprintf(json, sizeof json, "{\"op\":\"get\",%s}", fields);
	cr_assert_eq(ks_request_parse(json, strlen(json), &req, err, errlen),
	    KS_OK, "%s: %s", json, err);
	rc = ks_keys_normalize(S, &req.get, g, err, errlen);
	ks_request_close(&req);
	return rc;
}

#define GEMV ",\"shape\":{\"M\":1,\"N\":64,\"K\":32}"

/* wdtype absent and wdtype equal to dtype are one request (one key, one
 * canonical spec without wdtype); another wdtype is a key of its own and
 * is in the canonical spec; a pair the kernel does not take is refused. */
Test(key, wdtype_equal_to_dtype_is_the_plain_request_and_another_is_not)
{
	char a[KS_HASH_HEX], b[KS_HASH_HEX], c[KS_HASH_HEX], d[KS_HASH_HEX];
	char err[512];
	ks_get_t g;
	ks_buf_t o;

	key_of(BASE ",\"dtype\":\"f32\"" GEMV, a);
	key_of(BASE ",\"dtype\":\"f32\",\"wdtype\":\"f32\"" GEMV, b);
	key_of(BASE ",\"dtype\":\"f32\",\"wdtype\":\"bf16\"" GEMV, c);
	key_of(BASE ",\"dtype\":\"f32\",\"wdtype\":\"f16\"" GEMV, d);
	cr_assert_str_eq(a, b);
	cr_assert_str_neq(a, c);
	cr_assert_str_neq(a, d);
	cr_assert_str_neq(c, d);
	key_of(BASE ",\"dtype\":\"bf16\",\"wdtype\":\"bf16\"" GEMV, b);
	cr_assert_str_neq(b, c, "dtype bf16 is not f32 with bf16 weights");

	cr_assert_eq(get_of(BASE ",\"dtype\":\"f32\",\"wdtype\":\"f32\"" GEMV,
	    &g, err, sizeof err), KS_OK, "%s", err);
	ks_buf_init(&o);
	cr_assert_eq(ks_get_spec_json(&g, &o), KS_OK);
	cr_assert(strstr(o.data, "wdtype") == NULL, "%s", o.data);
	ks_buf_close(&o);
	cr_assert_eq(get_of(BASE ",\"dtype\":\"f32\",\"wdtype\":\"bf16\"" GEMV,
	    &g, err, sizeof err), KS_OK, "%s", err);
	cr_assert_eq(g.spec.wdtype, KS_DTYPE_BF16);
	ks_buf_init(&o);
	cr_assert_eq(ks_get_spec_json(&g, &o), KS_OK);
	cr_assert(strstr(o.data, "\"dtype\":\"f32\",\"wdtype\":\"bf16\"") !=
	    NULL, "%s", o.data);
	ks_buf_close(&o);

	cr_assert_eq(get_of(BASE ",\"dtype\":\"bf16\",\"wdtype\":\"f16\"" GEMV,
	    &g, err, sizeof err), KS_E_BAD_DTYPE);
	cr_assert(strstr(err, "wdtype") != NULL, "%s", err);
	cr_assert_eq(get_of(BASE ",\"dtype\":\"f32\",\"wdtype\":\"f8\"" GEMV,
	    &g, err, sizeof err), KS_E_BAD_DTYPE);
	cr_assert(strstr(err, "wdtype") != NULL, "%s", err);
	cr_assert_eq(get_of("\"kernel\":\"softmax\",\"backend\":\"cpu\","
	    "\"dtype\":\"f32\",\"wdtype\":\"bf16\",\"shape\":{\"R\":2,"
	    "\"L\":8}", &g, err, sizeof err), KS_E_BAD_DTYPE);
	cr_assert(strstr(err, "wdtype") != NULL, "%s", err);
}

/* A stored entry of a mixed request (its dtype column the request's
 * dtype, f32) is current: its key names the weight dtype it was made for,
 * and ks_keys_entry_get gives that one back. */
Test(key, a_stored_mixed_entry_is_current_with_its_wdtype)
{
	char hex[KS_HASH_HEX];
	ks_store_entry_t e;
	ks_get_t g;
	const char *why = "";

	e = entry_of(BASE ",\"dtype\":\"f32\",\"wdtype\":\"bf16\","
	    "\"shape\":{\"M\":1,\"N\":8,\"K\":8}", "M=1,N=8,K=8", hex);
	cr_assert_eq(check(&e, NULL), KS_KEYS_CURRENT);
	cr_assert_eq(ks_keys_entry_get(S, &e, &g, &why), KS_KEYS_CURRENT);
	cr_assert_eq(g.spec.wdtype, KS_DTYPE_BF16);
	e.key.b[0] ^= 1;
	cr_assert_eq(check(&e, "fingerprint"), KS_KEYS_STALE);
}
