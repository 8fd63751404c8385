/*
 * jit: the opencl backend, run here on PoCL's CPU device: the backend
 * conformance suite (conform.h, shared with test_cuda.c) and what only
 * OpenCL has.
 *
 * Every gemm variant x dtype is compiled by the backend (OpenCL C ->
 * clBuildProgram -> CL_PROGRAM_BINARIES), loaded back from the binary,
 * launched as groups * 32 work-items in work-groups of 32 with its
 * arguments in the order of the reply's params, and compared bit for bit
 * with ref/ref.h's canonical ref_gemm AND with the cpu backend's result
 * on the same inputs, across shapes including those just outside each
 * specialization (M = 1, 2, 16, 17; K = 4100; N = 1).  Hand-built kernels
 * check the conversions (every f16/bf16 pattern, the store rounding
 * cases), min/max with NaN and signed zeros, the reduction trees, fma
 * against mul+add, division and casts against the cpu backend.  Golden
 * files pin the emitted OpenCL C; a planted wrong reduction order is
 * caught by the numbers and by the golden file.
 *
 * PoCL compiles are slow (seconds per program): one program per variant
 * serves every shape through dynamic dims, and shapes stay small except
 * one M=1, N=K=4096 decode kernel.  Tests that need a device skip visibly
 * (cr_skip_test) where no OpenCL platform or device exists.
 */
#include "cl.h"
#include "conform.h"

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(opencl, .init = setup, .timeout = 600);

/* ---- gemm ---- */

static int64_t diff_elems(const void *a, const void *b, size_t es, int64_t n)
{
	int64_t i, bad = 0;

	for (i = 0; i < n; i++)
		bad += memcmp((const char *)a + i * es,
		    (const char *)b + i * es, es) != 0;
	return bad;
}

/* A compiled gemm program: its IR (dims dynamic except the ones baked),
 * built for OpenCL and for the cpu backend, each once for every shape it
 * runs. */
typedef struct {
	ks_ir_kernel_t *k;
	clprog_t cl;
	gpu_cpu_build_t cpu;
} gemm_prog_t;

/*
 * Runs gemm program G at (M, N, K) on OpenCL and on the cpu backend, and
 * checks both bit for bit against ref_gemm.
 */
static void check_gemm(clenv_t *e, gemm_prog_t *g, ks_dtype_t dt,
    int64_t M, int64_t N, int64_t K)
{
	size_t es = ks_dtype_size(dt);
	void *x = malloc(es * (size_t)(M * K));
	void *w = malloc(es * (size_t)(N * K));
	void *ycl = malloc(es * (size_t)(M * N));
	void *ycpu = malloc(es * (size_t)(M * N));
	void *want = malloc(es * (size_t)(M * N));
	int64_t dims[3] = { M, N, K }, bad;
	gpu_arg_t args[6];
	int i;

	ref_fill(x, (int)dt, M * K, (uint64_t)(M * 131 + N * 7 + K));
	ref_fill(w, (int)dt, N * K, (uint64_t)(M * 131 + N * 7 + K) + 1);
	ref_gemm(x, w, want, (int)dt, M, N, K);
	for (i = 0; i < 3; i++)
		args[3 + i] = (gpu_arg_t){ &dims[i], 8 };
	args[0] = (gpu_arg_t){ x, es * (size_t)(M * K) };
	args[1] = (gpu_arg_t){ w, es * (size_t)(N * K) };

	memset(ycl, 0xff, es * (size_t)(M * N));  /* NaN, never a result */
	args[2] = (gpu_arg_t){ ycl, es * (size_t)(M * N) };
	run_cl(e, g->k, &g->cl, args);
	memset(ycpu, 0xff, es * (size_t)(M * N));
	args[2] = (gpu_arg_t){ ycpu, es * (size_t)(M * N) };
	gpu_cpu_launch(g->k, g->cpu.fn, args);

	bad = diff_elems(ycl, want, es, M * N);
	cr_assert_eq(bad, 0, "opencl %s %s M=%lld N=%lld K=%lld: %lld outputs "
	    "off the canonical reference", g->k->variant, ks_dtype_name(dt),
	    (long long)M, (long long)N, (long long)K, (long long)bad);
	bad = diff_elems(ycpu, want, es, M * N);
	cr_assert_eq(bad, 0, "cpu %s %s M=%lld N=%lld K=%lld: %lld off",
	    g->k->variant, ks_dtype_name(dt), (long long)M, (long long)N,
	    (long long)K, (long long)bad);
	cr_assert_eq(memcmp(ycl, ycpu, es * (size_t)(M * N)), 0);
	free(x);
	free(w);
	free(ycl);
	free(ycpu);
	free(want);
}

static void gemm_prog(clenv_t *e, gemm_prog_t *g, const char *variant,
    ks_dtype_t dt, int64_t M, int64_t N, int64_t K)
{
	g->k = gpu_gemm_ir(variant, dt, M, N, K);
	prog_compile(e, g->k, &g->cl);
	gpu_cpu_build(g->k, &g->cpu);
}

static void gemm_prog_close(gemm_prog_t *g)
{
	prog_close(&g->cl);
	gpu_cpu_build_close(&g->cpu);
	ks_ir_free(g->k);
}

/*
 * Every variant for DT: `general` with M, N, K dynamic; `gemv_m1` (M = 1)
 * `small_m` at M = 2 and 3 and `blocked` at M = 9 and 136, each with N, K
 * dynamic; at shapes with
 * both K tails, N = 1 and partial row blocks, and M just outside each
 * specialization (1, 2, 3, 4, 17).
 */
static void check_gemm_dtype(ks_dtype_t dt)
{
	static const int64_t general_shapes[][3] = {
		{ 1, 5, 4100 }, { 2, 7, 64 }, { 4, 9, 100 }, { 17, 33, 64 },
		{ 3, 1, 4100 }, { 5, 37, 31 }, { 4, 1, 777 },
	};
	static const int64_t nk_shapes[][2] = {
		{ 5, 4100 }, { 1, 777 }, { 37, 31 }, { 8, 64 },
	};
	clenv_t e;
	gemm_prog_t g;
	size_t i;

	env_open(&e);
	gemm_prog(&e, &g, "general", dt, 0, 0, 0);
	for (i = 0; i < sizeof general_shapes / sizeof *general_shapes; i++)
		check_gemm(&e, &g, dt, general_shapes[i][0],
		    general_shapes[i][1], general_shapes[i][2]);
	gemm_prog_close(&g);

	gemm_prog(&e, &g, "gemv_m1", dt, 1, 0, 0);
	for (i = 0; i < sizeof nk_shapes / sizeof *nk_shapes; i++)
		check_gemm(&e, &g, dt, 1, nk_shapes[i][0], nk_shapes[i][1]);
	gemm_prog_close(&g);

	/* general with M bound: a constant 17 (four tiles and a partial
	 * one) and, forced, 1 (PoCL once dropped stores after reductions
	 * in loops of constant bounds: this caught it). */
	gemm_prog(&e, &g, "general", dt, 17, 0, 0);
	check_gemm(&e, &g, dt, 17, 33, 64);
	check_gemm(&e, &g, dt, 17, 5, 4100);
	gemm_prog_close(&g);
	gemm_prog(&e, &g, "general", dt, 1, 0, 0);
	check_gemm(&e, &g, dt, 1, 37, 4100);
	gemm_prog_close(&g);

	gemm_prog(&e, &g, "small_m", dt, 2, 0, 0);
	for (i = 0; i < sizeof nk_shapes / sizeof *nk_shapes; i++)
		check_gemm(&e, &g, dt, 2, nk_shapes[i][0], nk_shapes[i][1]);
	gemm_prog_close(&g);

	gemm_prog(&e, &g, "small_m", dt, 3, 0, 0);
	check_gemm(&e, &g, dt, 3, 5, 4100);
	check_gemm(&e, &g, dt, 3, 1, 100);
	gemm_prog_close(&g);

	/* blocked (16 lanes, macro tiles of 8 x 8 in bands of 8): M = 9 (a
	 * partial macro tile) and 136 (bands of 8, 8 and 1), N, K dynamic. */
	gemm_prog(&e, &g, "blocked", dt, 9, 0, 0);
	for (i = 0; i < sizeof nk_shapes / sizeof *nk_shapes; i++)
		check_gemm(&e, &g, dt, 9, nk_shapes[i][0], nk_shapes[i][1]);
	gemm_prog_close(&g);
	gemm_prog(&e, &g, "blocked", dt, 136, 0, 0);
	check_gemm(&e, &g, dt, 136, 20, 600);
	gemm_prog_close(&g);
	env_close(&e);
}

Test(opencl, gemm_f32_every_variant_is_bitwise_canonical_and_equals_cpu)
{
	check_gemm_dtype(KS_DTYPE_F32);
}

Test(opencl, gemm_f16_every_variant_is_bitwise_canonical_and_equals_cpu)
{
	check_gemm_dtype(KS_DTYPE_F16);
}

Test(opencl, gemm_bf16_every_variant_is_bitwise_canonical_and_equals_cpu)
{
	check_gemm_dtype(KS_DTYPE_BF16);
}

/* The decode kernel itself, every dim a constant. */
Test(opencl, gemv_m1_decode_4096_bf16_is_bitwise_canonical)
{
	clenv_t e;
	gemm_prog_t g;

	env_open(&e);
	gemm_prog(&e, &g, NULL, KS_DTYPE_BF16, 1, 4096, 4096);
	cr_assert_str_eq(g.k->variant, "gemv_m1");
	check_gemm(&e, &g, KS_DTYPE_BF16, 1, 4096, 4096);
	gemm_prog_close(&g);
	env_close(&e);
}

/* ---- the conformance suite (conform.h) on OpenCL ---- */

/* The device "auto" resolves to, or a visible skip. */
static void cl_target(char *out, size_t n)
{
	char err[512];

	if (ks_backend_opencl.available(err, sizeof err) != KS_OK)
		cr_skip_test("no OpenCL device: %s", err);
	cr_assert_eq(ks_backend_opencl.resolve_target("auto", out, n, err,
	    sizeof err), KS_OK, "%s", err);
}

/* The ICD loader of this process sees only an empty vendor directory. */
static void cl_hide(void)
{
	setenv("OCL_ICD_VENDORS", "/nonexistent-kspec-vendors", 1);
}

static void *cl_open(void)
{
	clenv_t *e = malloc(sizeof *e);

	cr_assert_not_null(e);
	env_open(e);
	return e;
}

static void cl_run(void *dev, const ks_ir_kernel_t *k, gpu_arg_t *args)
{
	clprog_t p;

	prog_compile(dev, k, &p);
	run_cl(dev, k, &p, args);
	prog_close(&p);
}

static void cl_close(void *dev)
{
	env_close(dev);
	free(dev);
}

static const conform_t C = {
	.be = &ks_backend_opencl,
	.golden_ext = "cl",
	.other_format = "ptx",
	.identity_has = { "-cl-fp32-correctly-rounded-divide-sqrt",
		"driver ", "device ", NULL },
	.max_lanes = 256,
	.target = cl_target,
	.hide = cl_hide,
	.hidden_says = "no OpenCL platform",
	.named_target = "pocl:cpu-0",
	.same_bytes = 0,
	.open = cl_open,
	.run = cl_run,
	.close = cl_close,
	.local_decl = "__local float l_s[32];",
	.barrier = "barrier(CLK_LOCAL_MEM_FENCE);",
};

CONFORM_DEVICE_TESTS(opencl, C)

/* ---- golden source, determinism, a planted bug ---- */

Test(opencl, emitted_source_matches_golden_files)
{
	conform_golden(&C);
}

Test(opencl, emitted_source_and_identity_are_deterministic)
{
	ks_ir_kernel_t *k = gpu_gemm_ir("small_m", KS_DTYPE_F16, 3, 0, 4100);
	char *src = gpu_source(&ks_backend_opencl, k), t[KS_MAX_NAME];
	ks_buf_t id;

	cr_assert(strstr(src, "#pragma OPENCL FP_CONTRACT OFF\n") != NULL);
	free(src);
	ks_ir_free(k);
	conform_deterministic(&C, t, sizeof t, &id);
	ks_buf_close(&id);
}

/* Rewrites the first stride of the emitted reduce tree from (l, l + 16) to
 * adjacent pairs (2l, 2l + 1): a plausible tree, but not the canonical
 * one. */
static char *mutate_tree(const char *src)
{
	size_t cap = strlen(src) + 1024, n = 0;
	char *out = malloc(cap), from[64], to[64];
	const char *p = src;
	int l, hits = 0;

	while (*p) {
		int matched = 0;

		for (l = 0; l < 16 && !matched; l++) {
			snprintf(from, sizeof from, "u[%d] = t[%d] + t[%d];", l,
			    l, l + 16);
			snprintf(to, sizeof to, "u[%d] = t[%d] + t[%d];", l,
			    2 * l, 2 * l + 1);
			if (strncmp(p, from, strlen(from)) == 0) {
				memcpy(out + n, to, strlen(to));
				n += strlen(to);
				p += strlen(from);
				matched = 1;
				hits++;
			}
		}
		if (!matched)
			out[n++] = *p++;
	}
	out[n] = '\0';
	cr_assert_eq(hits, 16, "the emitted tree has a new shape: update the "
	    "mutation");
	return out;
}

Test(opencl, a_mutated_reduction_order_is_caught)
{
	enum { G = 512 };
	ks_ir_kernel_t *k = gpu_reduce_kernel(32, KS_RED_SUM, KS_TY_F32);
	ks_ir_kernel_t *gm = gpu_gemm_ir("gemv_m1", KS_DTYPE_F32, 1, 4096,
	    4096);
	char *src = gpu_source(&ks_backend_opencl, k), *bad = mutate_tree(src);
	char *gsrc = gpu_source(&ks_backend_opencl, gm);
	char *gbad = mutate_tree(gsrc);
	float *x = malloc(sizeof(float) * G * 32), y[G], *cpu, *cl;
	int64_t groups = G;
	gpu_arg_t args[3] = { { x, sizeof(float) * G * 32 }, { y, sizeof y },
		{ &groups, 8 } }, a2[3];
	clprog_t p;
	clenv_t e;
	int i, differ = 0;

	/* By the golden file, without a device. */
	cr_assert_gt(gpu_golden_diff(gbad, "gemm_gemv_m1_f32.cl"), 0,
	    "the golden file does not see the mutated tree");
	cr_assert_eq(gpu_golden_diff(gsrc, "gemm_gemv_m1_f32.cl"), 0);
	free(gsrc);
	free(gbad);
	ks_ir_free(gm);

	/* By the numbers: the mutated source runs, and differs from cpu. */
	env_open(&e);
	gpu_adversarial(x, (size_t)G * 32, 7);
	prog_from_source(&e, bad, k->entry, &p);
	memcpy(a2, args, sizeof a2);
	run_cl(&e, k, &p, args);
	prog_close(&p);
	a2[1].data = cpu = malloc(sizeof y);
	gpu_run_cpu(k, a2);
	cl = y;
	for (i = 0; i < G; i++)
		differ += gpu_bits(cl[i]) != gpu_bits(cpu[i]);
	cr_assert_gt(differ, 0, "a wrong tree went unnoticed by the numbers");
	/* The unmutated source, built the same way, agrees. */
	prog_from_source(&e, src, k->entry, &p);
	run_cl(&e, k, &p, args);
	prog_close(&p);
	cr_assert_eq(memcmp(y, cpu, sizeof y), 0);
	free(cpu);
	free(src);
	free(bad);
	free(x);
	ks_ir_free(k);
	env_close(&e);
}

/* ---- targets, formats, availability ---- */

Test(opencl, targets_resolve_to_stable_device_names)
{
	char t[KS_MAX_NAME], t2[KS_MAX_NAME], err[512];

	cr_assert_str_eq(ks_backend_opencl.default_format, "clbin");
	conform_formats(&C);
	cl_target(t, sizeof t);
	cr_assert(strchr(t, ':') != NULL && strchr(t, '-') != NULL, "%s", t);
	/* The resolved name resolves to itself. */
	cr_assert_eq(ks_backend_opencl.resolve_target(t, t2, sizeof t2, err,
	    sizeof err), KS_OK, "%s", err);
	cr_assert_str_eq(t, t2);
	cr_assert_eq(ks_backend_opencl.resolve_target("nosuch:gpu-9", t2,
	    sizeof t2, err, sizeof err), KS_E_BAD_TARGET);
	cr_assert(strstr(err, t) != NULL, "the error lists %s: %s", t, err);
	cr_assert_eq(ks_backend_opencl.resolve_target("99:0", t2, sizeof t2,
	    err, sizeof err), KS_E_BAD_TARGET);
	cr_log_info("auto = %s", t);
}

Test(opencl, pocl_cpu_device_is_named_pocl_cpu_0)
{
	char t[KS_MAX_NAME], err[512];

	if (ks_backend_opencl.resolve_target("pocl:cpu-0", t, sizeof t, err,
	    sizeof err) != KS_OK)
		cr_skip_test("no PoCL CPU device: %s", err);
	cr_assert_str_eq(t, "pocl:cpu-0");
}

Test(opencl, no_platform_means_unavailable_with_a_reason)
{
	char t[KS_MAX_NAME], err[512];

	conform_unavailable(&C);
	cr_assert_eq(ks_backend_opencl.resolve_target("auto", t, sizeof t, err,
	    sizeof err), KS_E_BACKEND_UNAVAILABLE);
}

Test(opencl, invalid_ir_is_refused_before_the_driver)
{
	conform_invalid_ir(&C);
}

/* ---- threads ---- */

/* Each compile has its own context and program: concurrent compiles all
 * succeed, and each binary runs. */
Test(opencl, concurrent_compiles_are_safe)
{
	ks_ir_kernel_t *k = gpu_copy_kernel(KS_DTYPE_F32, KS_DTYPE_BF16);
	ks_jit_artifact_t a[CONFORM_THREADS];
	float src[64];
	uint16_t dst[64];
	int64_t n = 64, i;
	gpu_arg_t args[3] = { { src, sizeof src }, { dst, sizeof dst },
		{ &n, 8 } };
	clprog_t p;
	clenv_t e;

	env_open(&e);
	for (i = 0; i < 64; i++)
		src[i] = (float)i * 0.37f;
	conform_concurrent(&C, k, e.target, a);
	for (i = 0; i < CONFORM_THREADS; i++) {
		memset(dst, 0, sizeof dst);
		prog_from_binary(&e, &a[i], k->entry, &p);
		run_cl(&e, k, &p, args);
		prog_close(&p);
		cr_assert_eq(dst[63], ref_f32_to_bf16(src[63]));
		ks_jit_artifact_close(&a[i]);
	}
	ks_ir_free(k);
	env_close(&e);
}
