/*
 * Known-answer canaries (docs/operations.md, "Canaries"): the cases cover
 * every variant, the comparison catches one ulp, every kernel's canary
 * passes on cpu (and OpenCL where a device is), and end to end with the
 * test build (tests/kspecd-plant): an identity change runs them before
 * anything of the new identity is compiled, a planted wrong reference
 * disables its kernel with E_CANARY until `kspec canary` passes, and no
 * canary runs without a change.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <cjson/cJSON.h>

#include "../exec/exec.h"
#include "../ref/ref.h"
#include "e2e.h"

#define SUFFIX " (canary test)"

static e2e_daemon_t d;

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
	memset(&d, 0, sizeof d);
}

static void down(void)
{
	unsetenv("KSPEC_TEST_PLANT_IDENTITY_SUFFIX");
	unsetenv("KSPEC_TEST_PLANT_CANARY");
	e2e_cleanup(&d);
}

TestSuite(canary, .init = setup, .fini = down, .timeout = 900);

/* ---- in this process ---- */

Test(canary, cases_select_every_variant_of_every_kernel)
{
	static const ks_dtype_t dts[] = { KS_DTYPE_F32, KS_DTYPE_F16,
	    KS_DTYPE_BF16 };
	const ks_kernel_def_t *const *all;
	const char *names[32];
	int i, v, t, j, n, nk;

	all = ks_kernels(&nk);
	for (i = 0; i < nk; i++) {
		cr_assert_gt(ks_canary_runs(all[i]), 0, "%s has no canary",
		    all[i]->name);
		for (v = 0; v < all[i]->nvariants; v++) {
			int seen = 0;

			for (t = 0; t < 3 && !seen; t++) {
				n = ks_canary_variants(all[i], dts[t], names,
				    32);
				for (j = 0; j < n; j++)
					seen |= strcmp(names[j],
					    all[i]->variants[v]) == 0;
			}
			cr_assert(seen, "no canary case of %s selects %s",
			    all[i]->name, all[i]->variants[v]);
		}
	}
}

Test(canary, comparison_catches_a_one_ulp_change)
{
	static const ks_dtype_t dts[] = { KS_DTYPE_F32, KS_DTYPE_F16,
	    KS_DTYPE_BF16 };
	uint8_t a[64 * 4], b[64 * 4];
	char detail[256];
	int t;

	for (t = 0; t < 3; t++) {
		size_t es = ks_dtype_size(dts[t]);

		ref_fill(a, (int)dts[t], 64, 3);
		memcpy(b, a, sizeof a);
		cr_assert_eq(ks_canary_diff(a, b, dts[t], 64, detail,
		    sizeof detail), -1);
		b[41 * es] ^= 1;             /* one ulp of element 41 */
		cr_assert_eq(ks_canary_diff(a, b, dts[t], 64, detail,
		    sizeof detail), 41, "%s", ks_dtype_name(dts[t]));
		cr_assert(strstr(detail, "[41] = 0x"), "%s", detail);
	}
}

/* The canary job of DEF on BE at "auto", as the daemon makes it. */
static void canary_job(ks_job_t *j, const ks_kernel_def_t *def,
    const ks_backend_t *be)
{
	ks_dim_t dims[KS_MAX_DIMS];
	char err[512];
	ks_buf_t id;
	int i;

	memset(j, 0, sizeof *j);
	for (i = 0; i < def->ndims; i++)
		dims[i] = (ks_dim_t){ def->dims[i], 0, 0 };
	cr_assert_eq(ks_kernel_validate(def, KS_DTYPE_F32, KS_MODE_EXACT, dims,
	    def->ndims, &j->spec, err, sizeof err), KS_OK, "%s", err);
	j->backend = be;
	cr_assert_eq(be->resolve_target("auto", j->target, sizeof j->target,
	    err, sizeof err), KS_OK, "%s", err);
	snprintf(j->format, sizeof j->format, "%s", be->default_format);
	ks_buf_init(&id);
	cr_assert_eq(ks_exec_identity(be, j->target, &id), KS_OK);
	snprintf(j->identity, sizeof j->identity, "%s", id.data);
	ks_buf_close(&id);
	j->fingerprint = *ks_kernel_fingerprint(def);
	j->codegen = KS_CODEGEN_VERSION;
	j->canary = 1;
}

static void every_canary_passes(const ks_backend_t *be)
{
	const ks_kernel_def_t *const *all;
	char summary[512], err[1024];
	double ms, total = 0;
	ks_job_t j;
	int i, nk;

	all = ks_kernels(&nk);
	for (i = 0; i < nk; i++) {
		canary_job(&j, all[i], be);
		cr_assert_eq(ks_canary_run(&j, summary, sizeof summary, &ms,
		    err, sizeof err), KS_OK, "%s on %s: %s", all[i]->name,
		    be->name, err);
		cr_log_info("%s canary of %s: %s", be->name, all[i]->name,
		    summary);
		/* A kernel that takes block formats runs them too. */
		if (all[i]->wblocks)
			cr_assert(strstr(summary, "f32/wq8_0 f32/wq4_0 "
			    "f32/wq4_k"), "%s: %s", all[i]->name, summary);
		/* gemm's fast mode among them. */
		if (all[i] == &ks_kernel_gemm)
			cr_assert(strstr(summary, " fast"), "%s", summary);
		total += ms;
	}
	cr_log_info("%s: every canary in %.0f ms", be->name, total);
}

Test(canary, every_kernel_passes_on_cpu)
{
	every_canary_passes(&ks_backend_cpu);
}

Test(canary, every_kernel_passes_on_opencl)
{
	char err[512];

	if (ks_backend_opencl.available(err, sizeof err) != KS_OK)
		cr_skip_test("no OpenCL device: %s", err);
	every_canary_passes(&ks_backend_opencl);
}

Test(canary, a_backend_that_cannot_run_is_unsupported)
{
	char summary[256], err[512];
	ks_job_t j;
	double ms;

	memset(&j, 0, sizeof j);
	j.backend = &ks_backend_cuda;
	j.spec.def = &ks_kernel_gemm;
	cr_assert_eq(ks_canary_run(&j, summary, sizeof summary, &ms, err,
	    sizeof err), KS_E_UNSUPPORTED);
	cr_assert(strstr(err, "cuda"), "%s", err);
}

/* ---- end to end, with the test build ---- */

static const char *const args[] = { "--workers", "2", NULL };

static void start(const char *suffix, const char *plant)
{
	if (suffix)
		setenv("KSPEC_TEST_PLANT_IDENTITY_SUFFIX", suffix, 1);
	else
		unsetenv("KSPEC_TEST_PLANT_IDENTITY_SUFFIX");
	if (plant)
		setenv("KSPEC_TEST_PLANT_CANARY", plant, 1);
	else
		unsetenv("KSPEC_TEST_PLANT_CANARY");
	cr_assert_eq(e2e_start_bin(&d, "tests/kspecd-plant", args), 0,
	    "kspecd-plant did not start (make build/tests/kspecd-plant)");
}

static void restart(const char *suffix, const char *plant)
{
	cr_assert_eq(e2e_stop(&d), 0);
	start(suffix, plant);
}

static int opencl_here(void)
{
	char err[512];

	return ks_backend_opencl.available(err, sizeof err) == KS_OK;
}

/* A get of KERNEL on BACKEND at a small shape. */
static void get_on(const char *backend, const char *kernel, e2e_reply_t *r)
{
	static const struct {
		const char *kernel, *shape;
	} shapes[] = {
		{ "gemm", "\"M\":1,\"N\":64,\"K\":64" },
		{ "rmsnorm", "\"R\":2,\"H\":64" },
		{ "softmax", "\"R\":2,\"L\":64" },
	};
	char req[512];
	size_t i;

	for (i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
		if (strcmp(shapes[i].kernel, kernel) == 0)
			break;
	cr_assert_lt(i, sizeof shapes / sizeof shapes[0]);
	snprintf(req, sizeof req, "{\"op\":\"get\",\"id\":1,\"kernel\":\"%s\","
	    "\"backend\":\"%s\",\"dtype\":\"f32\",\"shape\":{%s},"
	    "\"return\":\"meta\"}", kernel, backend, shapes[i].shape);
	cr_assert_eq(e2e_call(d.sock, req, r), 0);
}

static void get(const char *kernel, e2e_reply_t *r)
{
	get_on("cpu", kernel, r);
}

static void get_ok_on(const char *backend, const char *kernel)
{
	e2e_reply_t r;

	get_on(backend, kernel, &r);
	cr_assert(e2e_ok(&r), "get %s on %s: %s", kernel, backend,
	    e2e_code(&r));
	e2e_reply_free(&r);
}

static void get_ok(const char *kernel)
{
	get_ok_on("cpu", kernel);
}

/* The stats reply's canaries object (caller deletes the reply). */
static const cJSON *canaries(e2e_reply_t *r)
{
	cr_assert_eq(e2e_call(d.sock, "{\"op\":\"stats\"}", r), 0);
	return cJSON_GetObjectItemCaseSensitive(r->h, "canaries");
}

static const cJSON *backend_of(const cJSON *cs, const char *name)
{
	const cJSON *b;

	cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(cs, "backends"))
		if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
		    b, "backend")), name) == 0)
			return b;
	cr_assert_fail("no backend %s in the canaries", name);
	return NULL;
}

/* Waits until no canary is pending; the stats reply in R. */
static const cJSON *settled(e2e_reply_t *r)
{
	const cJSON *cs;
	int i;

	for (i = 0; i < 6000; i++) {
		cs = canaries(r);
		cr_assert_not_null(cs);
		if (e2e_num(cs, "pending") == 0)
			return cs;
		e2e_reply_free(r);
		usleep(100000);
	}
	cr_assert_fail("canaries still pending after 600 s");
	return NULL;
}

/* Every kernel of backend NAME in CS passed (or, with PLANT, that one
 * failed and is disabled). */
static void check_kernels(const cJSON *cs, const char *name,
    const char *plant)
{
	const cJSON *b = backend_of(cs, name), *k;
	int n = 0, nk;

	ks_kernels(&nk);
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
	    b, "state")), "upgrade");
	cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(b, "kernels")) {
		const char *kn = cJSON_GetStringValue(
		    cJSON_GetObjectItemCaseSensitive(k, "kernel"));
		const char *st = cJSON_GetStringValue(
		    cJSON_GetObjectItemCaseSensitive(k, "state"));
		int bad = plant && strcmp(plant, kn) == 0;

		cr_assert_str_eq(st, bad ? "failed" : "passed", "%s on %s: "
		    "%s", kn, name, cJSON_GetStringValue(
		    cJSON_GetObjectItemCaseSensitive(k, "detail")));
		cr_log_info("%s %s: %.0f ms", name, kn, e2e_num(k, "ms"));
		n++;
	}
	cr_assert_eq(n, nk, "%d of %d kernels have a canary on %s", n, nk,
	    name);
	cr_log_info("%s: the canaries of the start took %.0f ms", name,
	    e2e_num(b, "start_ms"));
}

Test(canary, without_an_identity_change_no_canary_runs)
{
	const cJSON *cs;
	e2e_reply_t r;

	start(NULL, NULL);
	get_ok("gemm");
	restart(NULL, NULL);
	get_ok("softmax");
	cs = canaries(&r);
	cr_assert_eq(e2e_num(cs, "passed"), 0);
	cr_assert_eq(e2e_num(cs, "pending"), 0);
	cr_assert_eq(e2e_num(cs, "disabled"), 0);
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
	    backend_of(cs, "cpu"), "state")), "current");
	e2e_reply_free(&r);
}

Test(canary, an_upgrade_runs_every_canary_before_compiling_and_serves)
{
	const cJSON *cs, *cuda;
	e2e_reply_t r;

	start(NULL, NULL);
	get_ok("gemm");
	if (opencl_here())
		get_ok_on("opencl", "gemm");
	restart(SUFFIX, NULL);
	/* A miss of the new identity waits for its canary, then compiles. */
	get_ok("softmax");
	get_ok("gemm");
	cs = settled(&r);
	check_kernels(cs, "cpu", NULL);
	if (opencl_here())
		check_kernels(cs, "opencl", NULL);
	cuda = backend_of(cs, "cuda");
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
	    cuda, "state")), "skipped");
	cr_assert_eq(e2e_num(cs, "disabled"), 0);
	e2e_reply_free(&r);
	/* The verdicts are kept: the next start runs none again. */
	restart(SUFFIX, NULL);
	cs = canaries(&r);
	cr_assert_eq(e2e_num(cs, "pending"), 0);
	cr_assert_eq(e2e_num(cs, "passed"), 0);
	e2e_reply_free(&r);
	get_ok("rmsnorm");
}

/* /metrics of the daemon, through curl on its unix socket. */
static char *metrics(const char *path)
{
	char cmd[600], *out = NULL;
	size_t cap = 0, n;
	FILE *p;

	snprintf(cmd, sizeof cmd, "curl -sS --max-time 10 --unix-socket "
	    "'%s' http://localhost/metrics", path);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = getdelim(&out, &cap, '\0', p);
	pclose(p);
	cr_assert_gt(n, 0, "no /metrics (is curl installed?)");
	return out;
}

Test(canary, a_failed_canary_disables_its_kernel_until_kspec_canary_passes)
{
	const char *more[] = { "--workers", "2", "--metrics-listen", NULL,
	    NULL };
	char mpath[400], cmd[900], *page;
	const cJSON *cs, *k;
	e2e_reply_t r;
	const char *msg;
	int rc;

	start(NULL, NULL);
	get_ok("gemm");
	cr_assert_eq(e2e_stop(&d), 0);
	snprintf(mpath, sizeof mpath, "%s/run/metrics.sock", d.dir);
	more[3] = mpath;
	setenv("KSPEC_TEST_PLANT_IDENTITY_SUFFIX", SUFFIX, 1);
	setenv("KSPEC_TEST_PLANT_CANARY", "rmsnorm", 1);
	cr_assert_eq(e2e_start_bin(&d, "tests/kspecd-plant", more), 0);

	get("rmsnorm", &r);
	cr_assert_str_eq(e2e_code(&r), "E_CANARY");
	msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(r.h, "error"), "message"));
	cr_log_info("%s", msg);
	cr_assert(strstr(msg, "kernel rmsnorm") && strstr(msg, "backend cpu")
	    && strstr(msg, SUFFIX), "the message names kernel, backend and "
	    "identity: %s", msg);
	e2e_reply_free(&r);
	get_ok("softmax");         /* the others serve */
	cs = settled(&r);
	check_kernels(cs, "cpu", "rmsnorm");
	cr_assert_geq(e2e_num(cs, "disabled"), 1);
	e2e_reply_free(&r);
	page = metrics(mpath);
	cr_assert(strstr(page, "kspec_canaries_total{backend=\"cpu\","
	    "result=\"failed\"} 1"), "%s", page);
	cr_assert(strstr(page, "kspec_kernels_disabled "), "%s", page);
	free(page);

	/* The plant gone, the verdict stays: still disabled. */
	restart(SUFFIX, NULL);
	get("rmsnorm", &r);
	cr_assert_str_eq(e2e_code(&r), "E_CANARY");
	e2e_reply_free(&r);
	/* kspec canary runs it again: it passes and serves. */
	snprintf(cmd, sizeof cmd, "KSPEC_SOCKET='%s' '%s/kspec' canary "
	    "--kernel rmsnorm --backend cpu --json > '%s/canary.json'",
	    d.sock, e2e_build_dir(), d.dir);
	rc = system(cmd);
	cr_assert_eq(rc, 0, "kspec canary: %d", rc);
	cs = canaries(&r);
	cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(
	    backend_of(cs, "cpu"), "kernels"))
		if (strcmp(cJSON_GetStringValue(
		    cJSON_GetObjectItemCaseSensitive(k, "kernel")),
		    "rmsnorm") == 0)
			break;
	cr_assert_not_null(k);
	cr_assert_eq(e2e_num(cs, "disabled"), 0);
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
	    k, "state")), "passed");
	e2e_reply_free(&r);
	get_ok("rmsnorm");
}
