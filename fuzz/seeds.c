/*
 * Writes the seed corpus of the fuzz targets, fuzz/corpus/TARGET/NAME
 * (`make fuzz-corpus`; the files are committed).  Real examples, made by
 * the project's own code where it makes them: request headers as clients
 * send them, header pairs for the fast path, HTTP request heads, entries
 * and bundles sealed with the fuzzers' key, and the values a node puts in
 * Redis for the corpus's key at the fuzzers' clock (fuzz.h), so that they
 * verify when the targets read them, and the text of every variant of
 * every library kernel, built and specialized.
 *
 * Usage: fuzz-seeds DIR (the corpus folder, fuzz/corpus).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>
#include <sodium.h>

#include "../examples/llama/gguf.h"
#include "../server/fleetval.h"
#include "../server/lookup.h"
#include "../server/remote.h"
#include "../specialize/specialize.h"
#include "fuzz.h"

static const char *root;
static int written;

static void put(const char *target, const char *name, const void *p,
    size_t n)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", root, target);
	if (mkdir(path, 0755) != 0 && errno != EEXIST) {
		perror(path);
		exit(1);
	}
	snprintf(path, sizeof path, "%s/%s/%s", root, target, name);
	f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
	written++;
}

static void puts_to(const char *target, const char *name, const char *s)
{
	put(target, name, s, strlen(s));
}

/* ---- request headers ---- */

#define GEMV "\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\"," \
	"\"shape\":{\"M\":1,\"N\":4096,\"K\":4096}"

static const struct {
	const char *name, *header;
} requests[] = {
	{ "ping", "{\"op\":\"ping\",\"id\":1}" },
	{ "hello", "{\"op\":\"hello\",\"id\":2}" },
	{ "get", "{\"op\":\"get\",\"id\":3," GEMV "}" },
	{ "get-every-field", "{\"id\":4,\"op\":\"get\",\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"target\":\"x86-64\",\"format\":\"so\","
	    "\"dtype\":\"bf16\",\"wdtype\":\"bf16\",\"mode\":\"fast\","
	    "\"return\":\"meta\",\"shape\":{\"N\":64,\"K\":64},"
	    "\"dynamic\":[\"M\"],\"deployment\":\"llama-8b\"}" },
	{ "get-rmsnorm", "{\"kernel\":\"rmsnorm\",\"op\":\"get\","
	    "\"dtype\":\"f16\",\"backend\":\"cpu\",\"shape\":{\"H\":128},"
	    "\"dynamic\":[\"R\"],\"mode\":\"fast\"}" },
	{ "get-opencl", "{\"op\":\"get\",\"kernel\":\"softmax\","
	    "\"backend\":\"opencl\",\"dtype\":\"f32\","
	    "\"shape\":{\"R\":2,\"L\":32}}" },
	{ "get-spaces", " { \"op\" : \"get\" , \"kernel\" : \"gemm\" , "
	    "\"backend\" : \"cpu\" , \"dtype\" : \"f32\" , \"shape\" : "
	    "{ \"M\" : 1 , \"N\" : 64 , \"K\" : 64 } }\n" },
	{ "explain", "{\"op\":\"explain\",\"id\":5," GEMV "}" },
	{ "stats", "{\"op\":\"stats\"}" },
	{ "kernels", "{\"op\":\"kernels\"}" },
	{ "list", "{\"op\":\"list\",\"kernel\":\"gemm\",\"backend\":\"cpu\","
	    "\"target\":\"auto\",\"offset\":10,\"limit\":50}" },
	{ "evict-key", "{\"op\":\"evict\",\"key\":\"0123abcd\"}" },
	{ "evict-stale", "{\"op\":\"evict\",\"stale\":true,"
	    "\"dry_run\":true}" },
	{ "evict-all", "{\"op\":\"evict\",\"all\":true}" },
	{ "warm", "{\"op\":\"warm\",\"id\":6,\"progress\":true,\"items\":["
	    "{" GEMV "},{\"kernel\":\"rmsnorm\",\"backend\":\"cpu\","
	    "\"dtype\":\"f32\",\"shape\":{\"R\":4,\"H\":4096}},"
	    "{\"kernel\":\"gemm\"},7]}" },
	{ "misses", "{\"op\":\"misses\",\"deployment\":\"llama-8b\"}" },
	{ "cancel", "{\"op\":\"cancel\",\"id\":7,\"request\":6}" },
	{ "import", "{\"op\":\"import\",\"path\":\"/srv/kspec/b.kspec\"}" },
	{ "ready-items", "{\"op\":\"ready\",\"items\":[{" GEMV "}]}" },
	{ "ready-deployment", "{\"op\":\"ready\",\"deployment\":\"l8\"}" },
	{ "deploy", "{\"op\":\"deploy\",\"name\":\"l8\",\"items\":[{" GEMV
	    "}]}" },
	{ "undeploy", "{\"op\":\"undeploy\",\"name\":\"l8\"}" },
	{ "deployments", "{\"op\":\"deployments\"}" },
	{ "audit", "{\"op\":\"audit\",\"kernel\":\"gemm\"}" },
	{ "audit-report", "{\"op\":\"audit\",\"report\":true}" },
	{ "canary", "{\"op\":\"canary\",\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"status\":true}" },
	{ "bad-duplicate", "{\"op\":\"ping\",\"id\":9,\"a\":{\"b\":1,"
	    "\"b\":2}}" },
	{ "bad-nul-escape", "{\"op\":\"ping\",\"id\\u0000x\":1}" },
	{ "bad-deep", "{\"op\":\"ping\",\"x\":[[[[[1]]]]]}" },
	{ "bad-shape", "{\"op\":\"get\",\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1.5}}" },
	{ "bad-trailing", "{\"op\":\"ping\"} {}" },
	{ "bad-id", "{\"op\":\"ping\",\"id\":9007199254740994}" },
};

/* ---- fast path pairs: A, a NUL, B ---- */

static const struct {
	const char *name, *a, *b;
} pairs[] = {
	/* B is A with another id: a hit. */
	{ "same-get-new-id", "{\"id\":1,\"op\":\"get\"," GEMV "}",
	    "{\"id\":2,\"op\":\"get\"," GEMV "}" },
	{ "id-last", "{\"op\":\"get\"," GEMV ",\"id\":10}",
	    "{\"op\":\"get\"," GEMV ",\"id\":9007199254740992}" },
	{ "no-id", "{\"op\":\"get\"," GEMV "}", "{\"op\":\"get\"," GEMV "}" },
	{ "meta", "{\"id\":1,\"op\":\"get\"," GEMV ",\"return\":\"meta\"}",
	    "{\"id\":3,\"op\":\"get\"," GEMV ",\"return\":\"meta\"}" },
	{ "deployment", "{\"id\":1,\"op\":\"get\"," GEMV
	    ",\"deployment\":\"l8\"}", "{\"id\":2,\"op\":\"get\"," GEMV
	    ",\"deployment\":\"l8\"}" },
	/* B differs after the id: a miss, and the full parse answers. */
	{ "other-dtype", "{\"id\":1,\"op\":\"get\"," GEMV "}",
	    "{\"id\":2,\"op\":\"get\",\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"bf16\","
	    "\"shape\":{\"M\":1,\"N\":4096,\"K\":4096}}" },
	{ "other-op", "{\"id\":1,\"op\":\"get\"," GEMV "}",
	    "{\"id\":2,\"op\":\"explain\"," GEMV "}" },
	/* Ids the scan must not take out. */
	{ "escaped-id", "{\"i\\u0064\":1,\"op\":\"get\"," GEMV "}",
	    "{\"i\\u0064\":2,\"op\":\"get\"," GEMV "}" },
	{ "leading-zero", "{\"id\":1,\"op\":\"get\"," GEMV "}",
	    "{\"id\":01,\"op\":\"get\"," GEMV "}" },
	{ "nested-id", "{\"op\":\"get\",\"shape\":{\"id\":1},"
	    "\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\"}",
	    "{\"op\":\"get\",\"shape\":{\"id\":2},\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\"}" },
	{ "id-as-value", "{\"op\":\"get\",\"kernel\":\"id\"}",
	    "{\"op\":\"get\",\"kernel\":\"id\"}" },
	{ "duplicate-id", "{\"id\":1,\"id\":1,\"op\":\"get\"," GEMV "}",
	    "{\"id\":2,\"id\":1,\"op\":\"get\"," GEMV "}" },
};

/* ---- HTTP request heads ---- */

static const struct {
	const char *name, *head;
} heads[] = {
	{ "metrics", "GET /metrics HTTP/1.1\r\nHost: localhost:9464\r\n"
	    "User-Agent: Prometheus/2.42.0\r\nAccept: text/plain\r\n\r\n" },
	{ "stats-query", "GET /api/stats?t=1 HTTP/1.1\r\n"
	    "Host: 127.0.0.1:9464\r\n\r\n" },
	{ "dashboard-head", "HEAD / HTTP/1.0\r\nHost: [::1]:9464\r\n\r\n" },
	{ "post", "POST /metrics HTTP/1.1\r\nHost: localhost\r\n"
	    "Content-Length: 3\r\n\r\nx=1" },
	{ "http2", "GET / HTTP/2.0\r\nHost: localhost\r\n\r\n" },
	{ "rebound-host", "GET /api/stats HTTP/1.1\r\n"
	    "Host: rebound.example:9464\r\n\r\n" },
	{ "no-host", "GET /metrics HTTP/1.1\r\nAccept: */*\r\n\r\n" },
	{ "host-spaces", "GET /metrics HTTP/1.1\r\nhOsT: \t127.9.9.9 \r\n"
	    "\r\n" },
	{ "not-http", "hello\r\n\r\n" },
	{ "unfinished", "GET /metrics HTTP/1.1\r\nHost: localhost\r\n" },
	{ "pipelined", "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n"
	    "GET /nowhere HTTP/1.1\r\n\r\n" },
};

/* ---- entries, bundles and Redis values ---- */

/* An artifact's metadata as the daemon writes it (ks_lookup_meta) for a
 * cpu gemv whose bytes are BYTES, under KEY. */
static void artifact_meta(const ks_hash_t *key, const uint8_t *bytes,
    size_t len, ks_buf_t *meta)
{
	static const char hdr[] = "{\"op\":\"get\"," GEMV "}";
	ks_job_out_t o;
	ks_request_t r;
	ks_hash_t sum;
	ks_get_t g;
	char err[512];

	if (ks_request_parse(hdr, strlen(hdr), &r, err, sizeof err) ||
	    ks_keys_normalize(ks_fuzz_keys(), &r.get, &g, err, sizeof err)) {
		fprintf(stderr, "fuzz-seeds: %s\n", err);
		exit(1);
	}
	g.key = *key;
	memset(&o, 0, sizeof o);
	o.len = len;
	snprintf(o.format, sizeof o.format, "so");
	snprintf(o.variant, sizeof o.variant, "gemv_m1");
	snprintf(o.entry, sizeof o.entry, "ks_gemm_gemv_m1");
	o.params = "[{\"name\":\"x\",\"kind\":\"buffer\"}]";
	o.launch = "{\"groups\":512}";
	o.compile_ms = 12.5;
	ks_hash(bytes, len, &sum);
	ks_lookup_meta(meta, &g, &o, &sum);
}

static void seal(const ks_hash_t *key, const ks_buf_t *meta,
    const uint8_t *bytes, size_t len, ks_buf_t *out)
{
	if (ks_entry_seal(ks_fuzz_fleet_secret(), key, meta->data, meta->len,
	    bytes, len, out) != KS_OK) {
		fprintf(stderr, "fuzz-seeds: cannot seal\n");
		exit(1);
	}
}

static void entries(void)
{
	static const uint8_t so[] = "\x7f" "ELF\x02\x01\x01 a gemv";
	ks_buf_t meta, e1, e2, b, empty;
	ks_hash_t k1, k2;

	memset(k1.b, 0x11, sizeof k1.b);
	memset(k2.b, 0x22, sizeof k2.b);
	ks_buf_init(&meta);
	ks_buf_init(&e1);
	ks_buf_init(&e2);
	ks_buf_init(&b);
	ks_buf_init(&empty);
	artifact_meta(&k1, so, sizeof so - 1, &meta);
	seal(&k1, &meta, so, sizeof so - 1, &e1);
	put("entry", "entry", e1.data, e1.len);
	seal(&k2, &empty, NULL, 0, &e2);
	put("entry", "entry-empty", e2.data, e2.len);
	ks_bundle_begin(&b, 2);
	ks_bundle_add(&b, &e1);
	ks_bundle_add(&b, &e2);
	put("entry", "bundle", b.data, b.len);
	b.len = 0;
	ks_bundle_begin(&b, 0);
	put("entry", "bundle-empty", b.data, b.len);
	ks_buf_close(&meta);
	ks_buf_close(&e1);
	ks_buf_close(&e2);
	ks_buf_close(&b);
	ks_buf_close(&empty);
}

/* A failure marker or lease of KIND for KEY made at NOW_MS, as
 * lease.c's fleet_seal makes them. */
static void value(const char *name, const ks_hash_t *key, const char *kind,
    double now_ms, uint64_t ttl_ms, cJSON *more, const char *token)
{
	ks_buf_t v;

	ks_buf_init(&v);
	if (ks_fleet_value_seal(ks_fuzz_fleet_secret(), key, kind,
	    "fuzz-node/1", now_ms, ttl_ms, more, &v) != KS_OK) {
		fprintf(stderr, "fuzz-seeds: cannot seal a %s\n", kind);
		exit(1);
	}
	if (token)
		ks_buf_printf(&v, ":%s", token);
	put("redis", name, v.data, v.len);
	ks_buf_close(&v);
}

static cJSON *compile_error(int code)
{
	cJSON *m = cJSON_CreateObject();

	cJSON_AddNumberToObject(m, "code", code);
	cJSON_AddStringToObject(m, "message", "gemm.c:12: error: 'x' "
	    "undeclared");
	return m;
}

static void redis_values(void)
{
	/* What the redis target seals an artifact's metadata over. */
	static const uint8_t fuzz_bytes[] = "\x7f" "ELF fuzz";
	static const uint8_t so[] = "\x7f" "ELF\x02\x01\x01 a gemv";
	ks_hash_t key, other;
	ks_buf_t meta, e;
	char *text;
	cJSON *m;

	ks_fuzz_value_key(&key);
	memset(other.b, 0x33, sizeof other.b);
	ks_buf_init(&meta);
	ks_buf_init(&e);
	artifact_meta(&key, so, sizeof so - 1, &meta);
	seal(&key, &meta, so, sizeof so - 1, &e);
	put("redis", "artifact", e.data, e.len);
	e.len = 0;
	seal(&other, &meta, so, sizeof so - 1, &e);
	put("redis", "artifact-other-key", e.data, e.len);
	/* The metadata alone, which the target seals over its own bytes. */
	meta.len = 0;
	artifact_meta(&key, fuzz_bytes, sizeof fuzz_bytes - 1, &meta);
	put("redis", "artifact-meta", meta.data, meta.len);

	value("fail", &key, "fail", KS_FUZZ_NOW_MS, KS_LEASE_FAIL_TTL_MS,
	    compile_error(KS_E_COMPILE), NULL);
	value("fail-timeout", &key, "fail", KS_FUZZ_NOW_MS,
	    KS_LEASE_FAIL_TTL_MS, compile_error(KS_E_COMPILE_TIMEOUT), NULL);
	value("fail-other-key", &other, "fail", KS_FUZZ_NOW_MS,
	    KS_LEASE_FAIL_TTL_MS, compile_error(KS_E_COMPILE), NULL);
	value("lease", &key, "lease", KS_FUZZ_NOW_MS, KS_LEASE_TTL_MS, NULL,
	    "42");
	value("lease-expired", &key, "lease", KS_FUZZ_NOW_MS - 60000,
	    KS_LEASE_TTL_MS, NULL, "43");
	value("lease-too-long", &key, "lease", KS_FUZZ_NOW_MS,
	    10 * KS_LEASE_TTL_MS, NULL, "44");
	value("lease-as-fail", &key, "fail", KS_FUZZ_NOW_MS, KS_LEASE_TTL_MS,
	    NULL, "45");
	/* A marker's metadata alone, which the target seals itself. */
	m = compile_error(KS_E_COMPILE);
	cJSON_AddStringToObject(m, "kspec", "fail");
	cJSON_AddStringToObject(m, "node", "fuzz-node/1");
	cJSON_AddNumberToObject(m, "expires_ms", KS_FUZZ_NOW_MS + 1000);
	text = cJSON_PrintUnformatted(m);
	puts_to("redis", "fail-meta", text);
	free(text);
	cJSON_Delete(m);
	puts_to("redis", "lease-meta", "{\"kspec\":\"lease\",\"node\":"
	    "\"fuzz-node/1\",\"expires_ms\":1800000009000}");
	ks_buf_close(&meta);
	ks_buf_close(&e);
}

/* ---- GGUF files ---- */

/* A model-like file (architecture, sizes, a vocabulary, tensors of every
 * type the reader takes) at ALIGNMENT, with NT of its tensors. */
static void gguf_file(const char *name, uint32_t alignment, int nt,
    uint32_t version)
{
	static const char *const vocab[] = { "<unk>", "<s>", "</s>", "a" };
	static const uint64_t dims[][2] = { { 64, 2 }, { 32, 3 }, { 256, 1 },
		{ 8, 2 }, { 4, 4 }, { 2, 1 } };
	static const uint32_t types[] = { GF_T_Q8_0, GF_T_Q4_0, GF_T_Q4_K,
		GF_T_F16, GF_T_BF16, GF_T_F32 };
	static const char *const names[] = { "blk.0.attn_q.weight",
		"blk.0.ffn_down.weight", "token_embd.weight",
		"output_norm.weight", "blk.0.attn_norm.weight", "rope_freqs" };
	static uint8_t data[6][1024];
	gf_writer_t *w = gf_writer_new(alignment);
	uint32_t ctx = 64, layers = 1;
	float eps = 1e-5f;
	char *out = NULL, err[256];
	size_t n = 0, i, j;
	FILE *m = open_memstream(&out, &n);
	int ok = w && m;

	ok = ok && !gf_add_kv_str(w, "general.architecture", "llama");
	ok = ok && !gf_add_kv(w, "llama.context_length", GF_U32, &ctx);
	ok = ok && !gf_add_kv(w, "llama.block_count", GF_U32, &layers);
	ok = ok && !gf_add_kv(w, "llama.attention.layer_norm_rms_epsilon",
	    GF_F32, &eps);
	ok = ok && !gf_add_kv_arr(w, "tokenizer.ggml.tokens", GF_STR, vocab,
	    4);
	for (i = 0; ok && i < (size_t)nt; i++) {
		int be, bb;
		uint64_t bytes;

		gf_type_block(types[i], &be, &bb);
		bytes = dims[i][0] / (uint64_t)be * (uint64_t)bb * dims[i][1];
		for (j = 0; j < bytes; j++)
			data[i][j] = (uint8_t)(j * 29 + i * 7 + 1);
		ok = !gf_add_tensor(w, names[i], types[i], 2, dims[i], data[i],
		    bytes);
	}
	ok = ok && gf_write(w, m, err, sizeof err) == 0;
	if (m)
		ok = fclose(m) == 0 && ok;
	if (!ok || n < 8) {
		fprintf(stderr, "fuzz-seeds: cannot write a GGUF file\n");
		exit(1);
	}
	out[4] = (char)version;
	put("gguf", name, out, n);
	free(out);
	gf_writer_free(w);
}

static void gguf_files(void)
{
	gguf_file("model", 32, 6, 3);
	gguf_file("model-align64", 64, 6, 3);
	gguf_file("model-v2", 32, 3, 2);
	gguf_file("metadata-only", 32, 0, 3);
}

/* ---- kernel texts ---- */

static void ir_text(const char *name, const ks_ir_kernel_t *k)
{
	ks_buf_t b;

	ks_buf_init(&b);
	if (ks_ir_print(k, &b) != KS_OK) {
		fprintf(stderr, "fuzz-seeds: cannot print %s\n", name);
		exit(1);
	}
	put("irtext", name, b.data, b.len);
	ks_buf_close(&b);
}

/* Each variant of DEF at the first probe and dtype that it applies to
 * (the element dtypes in mode exact, then block-format weights in mode
 * fast), built and specialized. */
static void ir_texts_of(const ks_kernel_def_t *def)
{
	int64_t probes[64][KS_MAX_DIMS];
	int np = ks_kernel_probes(def, probes, 64), v, c, p, d, j;

	for (v = 0; v < def->nvariants; v++)
		for (c = 0; c < KS_DTYPE_ALL * np; c++) {
			ks_dim_t dims[KS_MAX_DIMS];
			ks_ir_kernel_t *k;
			ks_spec_t spec;
			char err[256], name[160];
			int block;

			p = c % np;
			d = c / np;
			block = d >= KS_DTYPE_COUNT;
			if (block && !def->wblocks)
				continue;
			for (j = 0; j < def->ndims; j++)
				dims[j] = (ks_dim_t){ def->dims[j],
				    probes[p][j] != 0, probes[p][j] };
			if (ks_kernel_validate_mixed(def, block ?
			    KS_DTYPE_F32 : (ks_dtype_t)d, (ks_dtype_t)d, block ?
			    KS_MODE_FAST : KS_MODE_EXACT, dims, def->ndims,
			    &spec, err, sizeof err) != KS_OK ||
			    ks_specialize_variant(&spec, def->variants[v], &k,
			    err, sizeof err) != KS_OK)
				continue;
			snprintf(name, sizeof name, "%s.%s.specialized",
			    def->name, def->variants[v]);
			ir_text(name, k);
			ks_ir_free(k);
			k = def->build(&spec, def->variants[v]);
			snprintf(name, sizeof name, "%s.%s.built", def->name,
			    def->variants[v]);
			ir_text(name, k);
			ks_ir_free(k);
			break;
		}
}

static void ir_texts(void)
{
	const ks_kernel_def_t *const *lib;
	int i, n;

	lib = ks_kernels(&n);
	for (i = 0; i < n; i++)
		ir_texts_of(lib[i]);
}

int main(int argc, char **argv)
{
	size_t i;
	char buf[8192];

	if (argc != 2) {
		fprintf(stderr, "usage: fuzz-seeds DIR\n");
		return 2;
	}
	root = argv[1];
	if (mkdir(root, 0755) != 0 && errno != EEXIST) {
		perror(root);
		return 1;
	}
	for (i = 0; i < sizeof requests / sizeof requests[0]; i++)
		puts_to("request", requests[i].name, requests[i].header);
	for (i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
		size_t na = strlen(pairs[i].a), nb = strlen(pairs[i].b);

		memcpy(buf, pairs[i].a, na);
		buf[na] = '\0';
		memcpy(buf + na + 1, pairs[i].b, nb);
		put("fastpath", pairs[i].name, buf, na + 1 + nb);
	}
	for (i = 0; i < sizeof heads / sizeof heads[0]; i++)
		puts_to("http", heads[i].name, heads[i].head);
	entries();
	redis_values();
	gguf_files();
	ir_texts();
	printf("fuzz-seeds: %d files in %s\n", written, root);
	return 0;
}
