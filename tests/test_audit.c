/*
 * The key audit (server/audit.c, docs/operations.md): stored entries are
 * compiled again and compared.  Honest recompiles of every kernel on every
 * backend here match; the test build's planted codegen dependency
 * (KSPEC_TEST_PLANT_CODEGEN, build/tests/kspecd-plant) is caught, the
 * entries quarantined, the events kept and counted, and not raised again
 * in a loop; the comparison itself catches one changed byte.
 */
#include <criterion/criterion.h>
#include <inttypes.h>

#include "../server/audit.h"
#include "../specialize/specialize.h"
#include "e2e.h"

static e2e_daemon_t D;

static void down(void)
{
	e2e_cleanup(&D);
}

static void start(const char *program, const char *const *extra)
{
	D.program = program;
	cr_assert_eq(e2e_start(&D, extra), 0, "%s did not start", program);
}

/* A shape every kernel of the library takes: each dim at the first of
 * these values that the kernel validates. */
static int shape_of(const ks_kernel_def_t *def, char *out, size_t len)
{
	static const int64_t vals[] = { 32, 64, 128, 16 };
	size_t v;
	int i;

	for (v = 0; v < sizeof vals / sizeof *vals; v++) {
		ks_dim_t dims[KS_MAX_DIMS];
		ks_spec_t spec;
		char err[256];
		size_t used = 0;

		for (i = 0; i < def->ndims; i++) {
			dims[i].name = def->dims[i];
			dims[i].is_const = 1;
			dims[i].value = vals[v];
			used += snprintf(out + used, len - used, "%s\"%s\":%"
			    PRId64, i ? "," : "", def->dims[i], vals[v]);
		}
		if (ks_kernel_validate(def, KS_DTYPE_F32, KS_MODE_EXACT, dims,
		    def->ndims, &spec, err, sizeof err) == KS_OK)
			return 0;
	}
	return -1;
}

/* Whether the daemon's hello lists BACKEND as available. */
static int available(const char *backend)
{
	int yes = e2e_backend_available(D.sock, backend);

	cr_assert_geq(yes, 0, "no hello");
	return yes;
}

/* Gets every kernel of the library on BACKEND (TARGET "auto" or an
 * explicit one), at most MAX kernels; returns how many are stored. */
static int get_kernels(const char *backend, const char *target, int max)
{
	const ks_kernel_def_t *const *all;
	char shape[512], req[1024];
	e2e_reply_t r;
	int i, n, got = 0;

	all = ks_kernels(&n);
	for (i = 0; i < n && got < max; i++) {
		cr_assert_eq(shape_of(all[i], shape, sizeof shape), 0,
		    "no test shape for %s", all[i]->name);
		snprintf(req, sizeof req, "{\"op\":\"get\",\"kernel\":\"%s\","
		    "\"backend\":\"%s\",\"target\":\"%s\",\"dtype\":\"f32\","
		    "\"shape\":{%s},\"return\":\"meta\"}", all[i]->name,
		    backend, target, shape);
		cr_assert_eq(e2e_call(D.sock, req, &r), 0);
		cr_assert(e2e_ok(&r), "get %s on %s: %s", all[i]->name,
		    backend, cJSON_PrintUnformatted(r.h));
		e2e_reply_free(&r);
		got++;
	}
	return got;
}

/* Every kernel in every dtype at 2 shapes on BACKEND (TARGET), warmed. */
static int warm(const e2e_daemon_t *d, const char *backend,
    const char *target)
{
	char msg[512];
	int n = e2e_warm_library(d->sock, backend, target, 2, msg, sizeof msg);

	cr_assert_geq(n, 0, "%s", msg);
	return n;
}

/* Runs an audit op (FIELDS) and returns its reply (caller frees). */
static void audit(const char *fields, e2e_reply_t *r)
{
	char req[256];

	snprintf(req, sizeof req, "{\"op\":\"audit\",%s}", fields);
	cr_assert_eq(e2e_call(D.sock, req, r), 0);
	cr_assert(e2e_ok(r), "audit: %s", cJSON_PrintUnformatted(r->h));
}

/* The N stored entries all match; then D restarts with the planted
 * codegen dependency (KSPEC_TEST_PLANT_CODEGEN=PLANT) and audits them
 * all again: that reply in R (caller frees). */
static void audit_planted(int n, const char *plant,
    const char *const *extra, e2e_reply_t *r)
{
	audit("\"all\":true", r);
	cr_assert_eq(e2e_num(r->h, "matched"), n);
	e2e_reply_free(r);
	cr_assert_eq(e2e_stop(&D), 0);
	setenv("KSPEC_TEST_PLANT_CODEGEN", plant, 1);
	start("tests/kspecd-plant", extra);
	unsetenv("KSPEC_TEST_PLANT_CODEGEN");
	audit("\"all\":true", r);
}

static double audit_stat(const char *name)
{
	e2e_reply_t r;
	double v;

	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"stats\"}", &r), 0);
	v = e2e_num(cJSON_GetObjectItemCaseSensitive(r.h, "audit"), name);
	e2e_reply_free(&r);
	return v;
}

Test(audit, honest_recompiles_of_every_kernel_and_backend_match,
    .fini = down, .timeout = 600)
{
	const char *const extra[] = { "--workers", "2", "--audit-interval",
	    "0", NULL };
	e2e_reply_t r;
	int n = 0, backends = 1;

	/* Every kernel in every dtype at 2 shapes on each backend, each
	 * compiled, then compiled again by the audit (bench/audit does it at
	 * 8 shapes: about 500). */
	start("kspecd", extra);
	n += warm(&D, "cpu", "auto");
	if (available("opencl")) {
		n += warm(&D, "opencl", "auto");
		backends++;
	} else {
		cr_log_info("opencl is not available here: not audited");
	}
	if (available("cuda")) {
		n += warm(&D, "cuda", "sm_80");
		backends++;
	} else {
		cr_log_info("NVRTC is not available here: cuda not audited");
	}
	cr_assert_geq(n, 42 * backends, "only %d specs", n);
	audit("\"all\":true", &r);
	cr_assert_eq(e2e_num(r.h, "audited"), n);
	cr_assert_eq(e2e_num(r.h, "matched"), n, "%s",
	    cJSON_PrintUnformatted(r.h));
	cr_assert_eq(e2e_num(r.h, "mismatched"), 0);
	cr_log_info("%d honest recompiles, all matched", n);
	e2e_reply_free(&r);
	cr_assert_eq(audit_stat("mismatched"), 0);
	cr_assert_eq(audit_stat("matched"), n);
	/* --kernel takes that kernel's entries only. */
	audit("\"kernel\":\"gemm\"", &r);
	cr_assert_geq(e2e_num(r.h, "audited"), 1);
	cr_assert_lt(e2e_num(r.h, "audited"), n);
	e2e_reply_free(&r);
}

Test(audit, the_audit_catches_a_planted_key_omission_and_quarantines,
    .fini = down, .timeout = 600)
{
	const char *const extra[] = { "--workers", "2", "--audit-interval",
	    "0", NULL };
	const cJSON *e;
	e2e_reply_t r;
	int n = 0, i;

	/* Stored by honest compiles... */
	start("tests/kspecd-plant", extra);
	n += get_kernels("cpu", "auto", 3);
	if (available("opencl"))
		n += get_kernels("opencl", "auto", 1);
	if (available("cuda"))
		n += get_kernels("cuda", "sm_80", 1);
	/* ...then the environment, which no key names, changes the code. */
	audit_planted(n, "1", extra, &r);
	cr_assert_eq(e2e_num(r.h, "audited"), n);
	cr_assert_eq(e2e_num(r.h, "mismatched"), n, "%s",
	    cJSON_PrintUnformatted(r.h));
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(r.h,
	    "mismatches"))
		cr_assert(strstr(cJSON_GetObjectItemCaseSensitive(e,
		    "differs")->valuestring, "entry"));
	e2e_reply_free(&r);
	cr_assert_eq(audit_stat("mismatched"), n);
	cr_assert_eq(audit_stat("quarantined"), n);

	/* Quarantined: nothing is served from the store any more... */
	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"list\"}", &r), 0);
	cr_assert_eq(e2e_num(r.h, "total"), 0, "%s",
	    cJSON_PrintUnformatted(r.h));
	e2e_reply_free(&r);
	/* ...and the events keep both identities and both sums. */
	audit("\"report\":true", &r);
	cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r.h,
	    "events")), n);
	i = 0;
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(r.h,
	    "events")) {
		const char *comp = cJSON_GetObjectItemCaseSensitive(e,
		    "compiler")->valuestring;
		const char *by = cJSON_GetObjectItemCaseSensitive(e,
		    "auditor")->valuestring;

		cr_assert(comp[0] && strstr(by, "worker pid") &&
		    strstr(by, comp), "%s / %s", comp, by);
		cr_assert_gt(e2e_num(e, "bytes"), 0);
		cr_assert_str_neq(cJSON_GetObjectItemCaseSensitive(e,
		    "stored")->valuestring, "");
		i++;
	}
	cr_assert_eq(i, n);
	e2e_reply_free(&r);

	/* Asked for again, the entries are compiled again (with the plant)
	 * and stored; an audit leaves them alone for a day instead of
	 * alarming in a loop. */
	get_kernels("cpu", "auto", 3);
	audit("\"all\":true", &r);
	cr_assert_eq(e2e_num(r.h, "audited"), 0);
	cr_assert_eq(e2e_num(cJSON_GetObjectItemCaseSensitive(r.h,
	    "skipped"), "quiet"), 3);
	e2e_reply_free(&r);
	cr_assert_eq(audit_stat("mismatched"), n);
}

/* On OpenCL, whose binaries differ between honest compiles, the audit
 * compares the hash of the emitted source (the reply's codegen): a planted
 * change of the kernel's body alone, which no reply field shows, is
 * caught there. */
Test(audit, an_opencl_body_change_is_caught_by_its_codegen,
    .fini = down, .timeout = 600)
{
	const char *const extra[] = { "--workers", "2", "--audit-interval",
	    "0", NULL };
	const cJSON *e;
	e2e_reply_t r;
	int n;

	start("tests/kspecd-plant", extra);
	if (!available("opencl")) {
		cr_skip_test("opencl is not available here");
		return;
	}
	n = get_kernels("opencl", "auto", 16);
	audit_planted(n, "body", extra, &r);
	/* The kernels with a local variable, which the plant renames
	 * (softmax and attention_decode today). */
	cr_assert_geq(e2e_num(r.h, "mismatched"), 2, "%s",
	    cJSON_PrintUnformatted(r.h));
	cr_assert_eq(e2e_num(r.h, "mismatched") + e2e_num(r.h, "matched"), n);
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(r.h,
	    "mismatches"))
		cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(e,
		    "differs")->valuestring, "codegen");
	e2e_reply_free(&r);
}

Test(audit, the_sampler_audits_in_the_background_when_idle,
    .fini = down, .timeout = 240)
{
	const char *const extra[] = { "--workers", "2", "--audit-interval",
	    "1", NULL };
	int i;

	start("kspecd", extra);
	get_kernels("cpu", "auto", 2);
	/* An entry a second, each a compile: seconds on a quiet machine,
	 * and the deadline is for a sampler that never runs (it once took
	 * more than 10 s on a loaded one). */
	for (i = 0; i < 1200 && audit_stat("audited") < 2; i++)
		usleep(100000);
	cr_assert_geq(audit_stat("audited"), 2);
	cr_assert_eq(audit_stat("mismatched"), 0);
	cr_assert_gt(audit_stat("compile_ms_total"), 0);
}

Test(audit, the_request_needs_one_of_all_kernel_or_report, .fini = down)
{
	const char *const extra[] = { "--workers", "1", "--audit-interval",
	    "0", NULL };
	e2e_reply_t r;

	start("kspecd", extra);
	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"audit\"}", &r), 0);
	cr_assert_str_eq(e2e_code(&r), "E_BAD_REQUEST");
	e2e_reply_free(&r);
	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"audit\",\"all\":true,"
	    "\"report\":true}", &r), 0);
	cr_assert_str_eq(e2e_code(&r), "E_BAD_REQUEST");
	e2e_reply_free(&r);
	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"audit\",\"kernel\":"
	    "\"nope\"}", &r), 0);
	cr_assert_str_eq(e2e_code(&r), "E_UNKNOWN_KERNEL");
	e2e_reply_free(&r);
	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"audit\",\"backend\":"
	    "\"cpu\"}", &r), 0);
	cr_assert_str_eq(e2e_code(&r), "E_UNKNOWN_FIELD");
	e2e_reply_free(&r);
}

/* ---- the comparison, on its own ---- */

static ks_artifact_t *artifact(const uint8_t *bytes, size_t len,
    const char *entry)
{
	char meta[512], hex[KS_HASH_HEX];
	ks_hash_t key, sum;

	memset(&key, 7, sizeof key);
	ks_hash(bytes, len, &sum);
	ks_hash_hex(&sum, hex);
	snprintf(meta, sizeof meta, "\"key\":\"00\",\"artifact\":\"%s\","
	    "\"kernel\":\"gemm\",\"variant\":\"gemv_m1\",\"format\":\"so\","
	    "\"entry\":\"%s\",\"bytes\":%zu,\"guard\":{\"M\":1},\"dynamic\":"
	    "[],\"params\":[{\"name\":\"x\"}],\"launch\":{\"groups\":4},"
	    "\"compile_ms\":%d.5", hex, entry, len, (int)len);
	return ks_artifact_new(&key, meta, bytes, len);
}

Test(audit, the_comparison_catches_one_changed_byte)
{
	uint8_t bytes[4096];
	ks_artifact_t *a, *b, *c;
	char differs[128];
	size_t i;

	for (i = 0; i < sizeof bytes; i++)
		bytes[i] = (uint8_t)(i * 31 + 7);
	a = artifact(bytes, sizeof bytes, "ks_gemm_gemv_m1");
	b = artifact(bytes, sizeof bytes, "ks_gemm_gemv_m1");
	cr_assert_eq(ks_audit_compare(a, &b->sum, b->meta, b->meta_len, 1,
	    differs, sizeof differs), 0, "%s", differs);
	bytes[1234] ^= 0x10;
	c = artifact(bytes, sizeof bytes, "ks_gemm_gemv_m1");
	cr_assert_eq(ks_audit_compare(a, &c->sum, c->meta, c->meta_len, 1,
	    differs, sizeof differs), 1);
	cr_assert_str_eq(differs, "artifact");
	/* A backend whose bytes are not deterministic (opencl) compares
	 * the description only. */
	cr_assert_eq(ks_audit_compare(a, &c->sum, c->meta, c->meta_len, 0,
	    differs, sizeof differs), 0, "%s", differs);
	ks_artifact_unref(b);
	b = artifact(bytes, sizeof bytes, "ks_gemm_gemv_m1_planted");
	cr_assert_eq(ks_audit_compare(a, &b->sum, b->meta, b->meta_len, 0,
	    differs, sizeof differs), 1);
	cr_assert_str_eq(differs, "entry");
	ks_artifact_unref(a);
	ks_artifact_unref(b);
	ks_artifact_unref(c);
}
