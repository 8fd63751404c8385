/*
 * jit: the opencl backend, run here on PoCL's CPU device.
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
#include <pthread.h>

#include "cl.h"
#include "../ref/ref.h"

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

/* ---- hand-built kernels against the cpu backend ---- */

/* Runs K on OpenCL, into the write buffers of ARGS, and on the cpu
 * backend, into fresh copies of them: CPU gets ARGS with those copies
 * (free them with free_copies). */
static void run_both(clenv_t *e, const ks_ir_kernel_t *k, gpu_arg_t *args,
    int nargs, gpu_arg_t *cpu)
{
	clprog_t p;
	int i;

	for (i = 0; i < nargs; i++) {
		cpu[i] = args[i];
		if (k->params[i].kind == KS_PARAM_BUFFER &&
		    (k->params[i].access & KS_ACCESS_WRITE)) {
			cpu[i].data = malloc(args[i].bytes);
			memcpy(cpu[i].data, args[i].data, args[i].bytes);
		}
	}
	prog_compile(e, k, &p);
	run_cl(e, k, &p, args);
	prog_close(&p);
	gpu_run_cpu(k, cpu);
}

static void free_copies(gpu_arg_t *args, gpu_arg_t *cpu, int nargs)
{
	int i;

	for (i = 0; i < nargs; i++)
		if (cpu[i].data != args[i].data)
			free(cpu[i].data);
}

Test(opencl, loads_of_every_f16_and_bf16_pattern_equal_cpu_and_ref)
{
	ks_dtype_t dts[2] = { KS_DTYPE_F16, KS_DTYPE_BF16 };
	uint16_t *src = malloc(65536 * 2);
	int64_t n = 65536;
	clenv_t e;
	int d, i;

	env_open(&e);
	for (i = 0; i < 65536; i++)
		src[i] = (uint16_t)i;
	for (d = 0; d < 2; d++) {
		ks_ir_kernel_t *k = gpu_copy_kernel(dts[d], KS_DTYPE_F32);
		float *dst = calloc(65536, 4), *cl = dst, *cpu;
		gpu_arg_t args[3] = { { src, 65536 * 2 }, { dst, 65536 * 4 },
			{ &n, 8 } }, c[3];

		run_both(&e, k, args, 3, c);
		cpu = c[1].data;
		cr_assert_eq(memcmp(cl, cpu, 65536 * 4), 0, "%s loads differ "
		    "from cpu", ks_dtype_name(dts[d]));
		for (i = 0; i < 65536; i++) {
			float want = ref_load(src, (int)dts[d], i);

			cr_assert(gpu_bits(cl[i]) == gpu_bits(want) ||
			    (want != want && cl[i] != cl[i] &&
			    (gpu_bits(cl[i]) & 0xffbfffff) ==
			    (gpu_bits(want) & 0xffbfffff)),
			    "%s 0x%04x: 0x%08x want 0x%08x",
			    ks_dtype_name(dts[d]), i, gpu_bits(cl[i]),
			    gpu_bits(want));
		}
		free_copies(args, c, 3);
		free(dst);
		ks_ir_free(k);
	}
	free(src);
	env_close(&e);
}

/*
 * Unary math.  sqrt (correctly rounded on both: the program is built with
 * -cl-fp32-correctly-rounded-divide-sqrt), neg and abs are bitwise equal
 * to the cpu backend and to the C reference over zeros, subnormals,
 * negatives, Inf and NaN; so is exp, which is kspec's own (docs/ir.md,
 * ref/ref.h ref_expf), not the OpenCL library's.
 */
Test(opencl, sqrt_neg_abs_exp_bitwise_equal_cpu_and_ref)
{
	static const ks_unop_t ops[] = { KS_UN_SQRT, KS_UN_NEG, KS_UN_ABS,
		KS_UN_EXP };
	enum { N = 1 << 16 };
	float *x = malloc(N * 4), *y = malloc(N * 4), *cpu;
	int64_t n = N;
	clenv_t e;
	size_t o;
	int i;

	env_open(&e);
	gpu_un_inputs(x, N, 21);
	for (o = 0; o < sizeof ops / sizeof ops[0]; o++) {
		ks_ir_kernel_t *k = gpu_un_kernel(ops[o]);
		gpu_arg_t args[3] = { { x, N * 4 }, { y, N * 4 }, { &n, 8 } };
		gpu_arg_t c[3];

		memset(y, 0, N * 4);
		run_both(&e, k, args, 3, c);
		cpu = c[1].data;
		for (i = 0; i < N; i++) {
			volatile float xi = x[i];
			float want;
			int nan_ok;

			want = ops[o] == KS_UN_SQRT ? sqrtf(xi) :
			    ops[o] == KS_UN_NEG ? -xi : ops[o] == KS_UN_ABS ?
			    fabsf(xi) : ref_expf(xi);
			/* sqrt of a negative: any NaN (the default NaN's
			 * sign is the device's); exp(NaN): x + x. */
			nan_ok = (ops[o] == KS_UN_SQRT || ops[o] == KS_UN_EXP) &&
			    isnan(want) &&
			    isnan(y[i]) && isnan(cpu[i]);
			cr_assert(nan_ok || (gpu_bits(y[i]) == gpu_bits(want) &&
			    gpu_bits(cpu[i]) == gpu_bits(want)),
			    "%s(0x%08x): cl 0x%08x cpu 0x%08x want 0x%08x",
			    ks_unop_name(ops[o]), gpu_bits(x[i]),
			    gpu_bits(y[i]), gpu_bits(cpu[i]), gpu_bits(want));
		}
		free_copies(args, c, 3);
		ks_ir_free(k);
	}
	free(x);
	free(y);
	env_close(&e);
}

/* i32 buffers and casts: bitwise the cpu backend and the C reference. */
Test(opencl, i32_buffers_and_casts_equal_cpu_and_ref)
{
	enum { N = 4096 };
	int32_t *P = malloc(N * 4), *yi = calloc(N, 4), *zi = calloc(N, 4);
	float *X = malloc(N * 4), *yf = calloc(N, 4), *ye = calloc(N, 4);
	int64_t n = N;
	ks_ir_kernel_t *k = gpu_i32_kernel();
	gpu_arg_t args[7] = { { P, N * 4 }, { X, N * 4 }, { yf, N * 4 },
		{ yi, N * 4 }, { zi, N * 4 }, { ye, N * 4 }, { &n, 8 } }, c[7];
	clenv_t e;

	env_open(&e);
	gpu_i32_inputs(P, X, N, 4);
	run_both(&e, k, args, 7, c);
	gpu_i32_check("opencl", P, X, yf, yi, zi, ye, N);
	gpu_i32_check("cpu", P, X, c[2].data, c[3].data, c[4].data, c[5].data,
	    N);
	free_copies(args, c, 7);
	ks_ir_free(k);
	env_close(&e);
	free(P); free(yi); free(zi); free(X); free(yf); free(ye);
}

/* An unrolled kernel (LANES phases from a uniform loop, copies of a lane
 * loop, fresh lane variables, a reduce) runs bitwise as the cpu backend
 * and as the loop form on OpenCL. */
Test(opencl, unrolled_kernel_equals_cpu_and_the_loop_form)
{
	enum { G = 16, NX = G * 384 };
	float *x = malloc(NX * 4), w[96], y0[G], y1[G], *cpu;
	int64_t g = G;
	ks_ir_kernel_t *k0 = gpu_unroll_kernel(), *k1 = gpu_unroll_kernel();
	gpu_arg_t a0[4] = { { x, NX * 4 }, { w, sizeof w }, { y0, sizeof y0 },
		{ &g, 8 } };
	gpu_arg_t a1[4] = { { x, NX * 4 }, { w, sizeof w }, { y1, sizeof y1 },
		{ &g, 8 } }, c[4];
	char err[512];
	clprog_t p;
	clenv_t e;

	gpu_adversarial(x, NX, 9);
	gpu_adversarial(w, 96, 10);
	cr_assert_eq(ks_pass_run(k1, err, sizeof err), KS_OK, "%s", err);
	env_open(&e);
	prog_compile(&e, k0, &p);
	run_cl(&e, k0, &p, a0);
	prog_close(&p);
	run_both(&e, k1, a1, 4, c);
	cpu = c[2].data;
	cr_assert_eq(memcmp(y0, y1, sizeof y0), 0, "unrolled differs on cl");
	cr_assert_eq(memcmp(y1, cpu, sizeof y1), 0, "cl differs from cpu");
	free_copies(a1, c, 4);
	ks_ir_free(k0);
	ks_ir_free(k1);
	env_close(&e);
	free(x);
}

/* Local arrays and barriers: values pass between work-items of a group;
 * bitwise the cpu backend and the C reference. */
Test(opencl, local_arrays_and_barriers_equal_cpu_and_ref)
{
	enum { N = 2048 };
	float *x = malloc(N * 4), *y = calloc(N, 4);
	int64_t n = N;
	ks_ir_kernel_t *k = gpu_local_kernel();
	gpu_arg_t args[3] = { { x, N * 4 }, { y, N * 4 }, { &n, 8 } }, c[3];
	char *src;
	clenv_t e;

	cr_assert_eq(ks_pass_run(k, NULL, 0), KS_OK);
	src = gpu_source(&ks_backend_opencl, k);
	cr_assert(strstr(src, "__local float l_s[32];") != NULL, "%s", src);
	cr_assert(strstr(src, "barrier(CLK_LOCAL_MEM_FENCE);") != NULL, "%s",
	    src);
	free(src);
	gpu_adversarial(x, N, 14);
	env_open(&e);
	run_both(&e, k, args, 3, c);
	gpu_local_check("opencl", x, y, N);
	gpu_local_check("cpu", x, c[1].data, N);
	free_copies(args, c, 3);
	ks_ir_free(k);
	env_close(&e);
	free(x);
	free(y);
}

/* f32 patterns for the store conversions: every upper half with low halves
 * around the bf16 ties, the f16 midpoints and their neighbours, random. */
static uint32_t *store_patterns(int64_t *count)
{
	static const uint32_t lows[] = { 0x0000, 0x0001, 0x7fff, 0x8000,
		0x8001, 0xffff, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000 };
	int64_t cap = 65536 * 11 + 65536 * 4 + 65536, n = 0;
	uint32_t *p = malloc((size_t)cap * 4), h, l;
	uint64_t s = 42;

	for (h = 0; h < 65536; h++)
		for (l = 0; l < sizeof lows / sizeof lows[0]; l++)
			p[n++] = h << 16 | lows[l];
	for (h = 0; h < 65536; h++) {   /* f16 halfway cases and neighbours */
		uint32_t f = ref_f32_bits(ref_f16_to_f32((uint16_t)h));

		p[n++] = f + 0x1000;
		p[n++] = f + 0x0fff;
		p[n++] = f + 0x1001;
		p[n++] = f - 1;
	}
	while (n < cap)
		p[n++] = (uint32_t)gpu_rng(&s);
	*count = n;
	return p;
}

Test(opencl, stores_round_to_nearest_even_like_cpu_and_ref)
{
	ks_dtype_t dts[2] = { KS_DTYPE_F16, KS_DTYPE_BF16 };
	int64_t n, i;
	uint32_t *src = store_patterns(&n);
	clenv_t e;
	int d;

	env_open(&e);
	cr_assert_eq(n % 32, 0);
	for (d = 0; d < 2; d++) {
		ks_ir_kernel_t *k = gpu_copy_kernel(KS_DTYPE_F32, dts[d]);
		uint16_t *dst = calloc((size_t)n, 2), *cl = dst, *cpu;
		gpu_arg_t args[3] = { { src, (size_t)n * 4 },
			{ dst, (size_t)n * 2 }, { &n, 8 } }, c[3];
		int64_t bad = 0;

		run_both(&e, k, args, 3, c);
		cpu = c[1].data;
		cr_assert_eq(memcmp(cl, cpu, (size_t)n * 2), 0, "%s stores "
		    "differ from cpu", ks_dtype_name(dts[d]));
		for (i = 0; i < n; i++) {
			float f = ref_bits_f32(src[i]);
			uint16_t want = dts[d] == KS_DTYPE_F16 ?
			    ref_f32_to_f16(f) : ref_f32_to_bf16(f);

			if (cl[i] != want && bad++ < 3)
				cr_log_error("%s 0x%08x: 0x%04x want 0x%04x",
				    ks_dtype_name(dts[d]), src[i], cl[i], want);
		}
		cr_assert_eq(bad, 0, "%lld of %lld stores off ref.h",
		    (long long)bad, (long long)n);
		free_copies(args, c, 3);
		free(dst);
		ks_ir_free(k);
	}
	free(src);
	env_close(&e);
}

/* One reduction kernel over G groups of adversarial data (f32 sums: every
 * order rounds differently; max: NaN, signed zeros and -Inf mixed in; i64:
 * integers): OpenCL equals cpu bit for bit. */
static void check_reduce(clenv_t *e, int nlanes, ks_redop_t op, ks_ty_t t)
{
	static const float special[] = { -0.0f, 0.0f, NAN, -INFINITY };
	enum { G = 512 };
	int64_t groups = G, n = (int64_t)G * nlanes, i;
	float *x = malloc(sizeof(float) * (size_t)n), y[G], *cpu;
	ks_ir_kernel_t *k = gpu_reduce_kernel(nlanes, op, t);
	gpu_arg_t args[3] = { { x, sizeof(float) * (size_t)n },
		{ y, sizeof y }, { &groups, 8 } }, c[3];
	uint64_t s = 3;

	gpu_adversarial(x, (size_t)n, 7 + (uint64_t)nlanes);
	for (i = 0; i < n; i++) {
		if (t == KS_TY_I64)
			x[i] = truncf(x[i] * 1e3f);
		else if (op == KS_RED_MAX && gpu_rng(&s) % 4 == 0)
			x[i] = special[(s >> 8) % 4];
	}
	memset(y, 0, sizeof y);
	run_both(e, k, args, 3, c);
	cpu = c[1].data;
	for (i = 0; i < G; i++)
		cr_assert(gpu_bits(y[i]) == gpu_bits(cpu[i]) ||
		    (y[i] != y[i] && cpu[i] != cpu[i]), "%s %s %d lanes group "
		    "%lld: %a, cpu %a", op == KS_RED_MAX ? "max" : "sum",
		    ks_ty_name(t), nlanes, (long long)i, y[i], cpu[i]);
	free_copies(args, c, 3);
	ks_ir_free(k);
	free(x);
}

/* The canonical tree (f32 sum), the max tree with NaN and signed zeros,
 * and i64 sum and max, for 32 and fewer lanes. */
Test(opencl, reductions_follow_the_canonical_tree_like_cpu)
{
	static const int lanes[3] = { 32, 8, 1 };
	clenv_t e;
	int o, t, l;

	env_open(&e);
	for (o = 0; o < 2; o++)
		for (t = 0; t < 2; t++)
			for (l = 0; l < 3; l++)
				check_reduce(&e, lanes[l], o ? KS_RED_MAX :
				    KS_RED_SUM, t ? KS_TY_I64 : KS_TY_F32);
	env_close(&e);
}

/*
 * min/max (NaN ignored, -0 < +0), fma (one rounding), mul+add (two: no
 * contraction), IEEE division, casts and select, element-wise on special
 * and random values: OpenCL equals cpu bit for bit (NaN results compare
 * as NaN: payloads of arithmetic NaNs are the hardware's).
 */
Test(opencl, elementwise_arithmetic_equals_cpu)
{
	static const float vals[] = { NAN, -NAN, 0.0f, -0.0f, 1.0f, -1.0f,
		INFINITY, -INFINITY, 0x1p-149f, 3.5f, 0x1p-126f,
		-0x1.fffffep127f };
	enum { NV = sizeof vals / sizeof vals[0], N = 4096 };
	ks_ir_kernel_t *k = gpu_elementwise_kernel();
	float *in[GPU_EW_IN], *out[GPU_EW_OUT], *cl[GPU_EW_OUT], *cpu;
	gpu_arg_t args[GPU_EW_IN + GPU_EW_OUT + 1];
	gpu_arg_t c[GPU_EW_IN + GPU_EW_OUT + 1];
	int64_t n = N;
	uint64_t s = 5;
	clenv_t e;
	int i, j, fused = 0;

	env_open(&e);
	for (j = 0; j < GPU_EW_IN; j++)
		in[j] = malloc(sizeof(float) * N);
	for (i = 0; i < N; i++) {
		float a = (float)((double)(gpu_rng(&s) >> 11) * 0x1p-53);
		float b = (float)((double)(gpu_rng(&s) >> 11) * 0x1p-53);

		in[0][i] = a * 1000.0f - 500.0f;
		in[1][i] = b * 3.0f - 1.0f;
		in[2][i] = -in[0][i] * in[1][i];    /* exposes a*b's rounding */
		if (i < NV * NV) {              /* every pair of specials */
			in[0][i] = vals[i % NV];
			in[1][i] = vals[i / NV];
		}
	}
	for (j = 0; j < GPU_EW_IN; j++)
		args[j] = (gpu_arg_t){ in[j], sizeof(float) * N };
	for (j = 0; j < GPU_EW_OUT; j++) {
		out[j] = calloc(N, sizeof(float));
		args[GPU_EW_IN + j] = (gpu_arg_t){ out[j], sizeof(float) * N };
	}
	args[GPU_EW_IN + GPU_EW_OUT] = (gpu_arg_t){ &n, 8 };
	run_both(&e, k, args, GPU_EW_IN + GPU_EW_OUT + 1, c);
	for (j = 0; j < GPU_EW_OUT; j++) {
		cl[j] = out[j];
		cpu = c[GPU_EW_IN + j].data;
		for (i = 0; i < N; i++) {
			/* f32 -> i64 of NaN, Inf or out of range is undefined
			 * (the IR's kernels never do it). */
			if ((j == 5 || j == 6) && !(fabsf(in[0][i]) < 1024.0f))
				continue;
			cr_assert(gpu_bits(cl[j][i]) == gpu_bits(cpu[i]) ||
			    (cl[j][i] != cl[j][i] && cpu[i] != cpu[i]),
			    "output %d, element %d (a=%a b=%a c=%a): %a, "
			    "cpu %a", j, i, in[0][i], in[1][i], in[2][i],
			    cl[j][i], cpu[i]);
		}
	}
	free_copies(args, c, GPU_EW_IN + GPU_EW_OUT + 1);
	/* The data tell fma from mul+add, so "no contraction" is tested. */
	for (i = NV * NV; i < N; i++)
		fused += gpu_bits(cl[2][i]) != gpu_bits(cl[3][i]);
	cr_assert_gt(fused, N / 4, "fma and mul+add agree on %d of %d", N -
	    fused, N);
	/* min/max of the specials: exactly ref semantics. */
	for (i = 0; i < NV * NV; i++) {
		float a = in[0][i], b = in[1][i];

		if (a != a && b != b)
			continue;
		if (a == b) {
			cr_assert_eq(gpu_bits(cl[0][i]),
			    gpu_bits(a) | gpu_bits(b));
			cr_assert_eq(gpu_bits(cl[1][i]),
			    gpu_bits(a) & gpu_bits(b));
		} else {
			cr_assert_eq(gpu_bits(cl[0][i]), gpu_bits(a != a ? b :
			    b != b ? a : a < b ? a : b), "min(%a, %a)", a, b);
			cr_assert_eq(gpu_bits(cl[1][i]), gpu_bits(a != a ? b :
			    b != b ? a : a > b ? a : b), "max(%a, %a)", a, b);
		}
	}
	for (j = 0; j < GPU_EW_IN; j++)
		free(in[j]);
	for (j = 0; j < GPU_EW_OUT; j++)
		free(out[j]);
	ks_ir_free(k);
	env_close(&e);
}

Test(opencl, uniform_integer_code_and_constants_equal_cpu)
{
	ks_ir_kernel_t *k = gpu_int_kernel();
	float y[GPU_INT_OUT], *cl = y, *cpu;
	int64_t a = -7, b = 2, big = (1 << 24) + 1;
	float f = -2.5f;
	gpu_arg_t args[5] = { { y, sizeof y }, { &a, 8 }, { &b, 8 },
		{ &f, 4 }, { &big, 8 } }, c[5];
	static const float want[12] = { -3, -1, -7, 2, -2, 16777216.0f,
		16777220.0f, 10, 20, 1, 1, 0 };
	clenv_t e;
	int i;

	env_open(&e);
	memset(y, 0, sizeof y);
	run_both(&e, k, args, 5, c);
	cpu = c[0].data;
	cr_assert_eq(memcmp(cl, cpu, sizeof y), 0);
	for (i = 0; i < 12; i++)
		cr_assert_eq(cl[i], want[i], "case %d: %g", i, cl[i]);
	cr_assert_eq(gpu_bits(cl[15]), 0x7fc12345u, "NaN payload of a "
	    "constant");
	free_copies(args, c, 5);
	ks_ir_free(k);
	env_close(&e);
}

/* ---- golden source, determinism, a planted bug ---- */

Test(opencl, emitted_source_matches_golden_files)
{
	size_t i;
	ks_dtype_t d;

	for (i = 0; i < sizeof golden_shapes / sizeof *golden_shapes; i++)
		for (d = 0; d < KS_DTYPE_COUNT; d++) {
			const char *v = golden_shapes[i].variant;
			ks_ir_kernel_t *k = gpu_gemm_ir(v, d,
			    golden_shapes[i].M, golden_shapes[i].N,
			    golden_shapes[i].K);
			char name[64], *src = gpu_source(&ks_backend_opencl, k);

			snprintf(name, sizeof name, "gemm_%s_%s.cl", v,
			    ks_dtype_name(d));
			gpu_check_golden(src, name);
			free(src);
			ks_ir_free(k);
		}
}

Test(opencl, emitted_source_and_identity_are_deterministic)
{
	ks_ir_kernel_t *a = gpu_gemm_ir("small_m", KS_DTYPE_F16, 3, 0, 4100);
	ks_ir_kernel_t *b = gpu_gemm_ir("small_m", KS_DTYPE_F16, 3, 0, 4100);
	char *sa = gpu_source(&ks_backend_opencl, a);
	char *sb = gpu_source(&ks_backend_opencl, b);
	char t[KS_MAX_NAME], err[512];
	ks_buf_t ia, ib;

	cr_assert_str_eq(sa, sb);
	cr_assert(strstr(sa, "#pragma OPENCL FP_CONTRACT OFF\n") != NULL);
	free(sa);
	free(sb);
	ks_ir_free(a);
	ks_ir_free(b);
	if (ks_backend_opencl.available(err, sizeof err) != KS_OK)
		cr_skip_test("no OpenCL device for the identity: %s", err);
	cr_assert_eq(ks_backend_opencl.resolve_target("auto", t, sizeof t,
	    err, sizeof err), KS_OK);
	ks_buf_init(&ia);
	ks_buf_init(&ib);
	cr_assert_eq(ks_backend_opencl.identity(t, &ia), KS_OK);
	cr_assert_eq(ks_backend_opencl.identity(t, &ib), KS_OK);
	cr_assert_str_eq(ia.data, ib.data);
	cr_assert(strstr(ia.data, "-cl-fp32-correctly-rounded-divide-sqrt"));
	cr_assert(strstr(ia.data, "driver "), "%s", ia.data);
	cr_assert(strstr(ia.data, "device "), "%s", ia.data);
	cr_assert(strstr(ia.data, "emit-c "), "%s", ia.data);
	cr_log_info("target %s identity: %s", t, ia.data);
	ks_buf_close(&ia);
	ks_buf_close(&ib);
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
	ks_ir_kernel_t *k;
	ks_jit_artifact_t a;

	cr_assert_eq(ks_backend_find("opencl"), &ks_backend_opencl);
	cr_assert_str_eq(ks_backend_opencl.default_format, "clbin");
	cr_assert_eq(ks_backend_opencl.check_format("clbin"), KS_OK);
	cr_assert_eq(ks_backend_opencl.check_format("ptx"), KS_E_BAD_FORMAT);
	cr_assert_eq(ks_backend_opencl.check_format(NULL), KS_E_BAD_FORMAT);
	if (ks_backend_opencl.available(err, sizeof err) != KS_OK)
		cr_skip_test("no OpenCL device: %s", err);
	cr_assert_eq(ks_backend_opencl.resolve_target("auto", t, sizeof t,
	    err, sizeof err), KS_OK, "%s", err);
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
	k = gpu_copy_kernel(KS_DTYPE_F32, KS_DTYPE_F32);
	cr_assert_eq(ks_backend_opencl.compile(k, t, "ptx", &a, err,
	    sizeof err), KS_E_BAD_FORMAT);
	cr_assert_eq(ks_backend_opencl.compile(k, "auto", "clbin", &a, err,
	    sizeof err), KS_E_BAD_TARGET);
	ks_ir_free(k);
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

/* Criterion runs each test in its own process, so the ICD loader here
 * sees only the empty vendor directory. */
Test(opencl, no_platform_means_unavailable_with_a_reason)
{
	char err[512] = "", t[KS_MAX_NAME];
	ks_ir_kernel_t *k = gpu_copy_kernel(KS_DTYPE_F32, KS_DTYPE_F32);
	ks_jit_artifact_t a;

	setenv("OCL_ICD_VENDORS", "/nonexistent-kspec-vendors", 1);
	cr_assert_eq(ks_backend_opencl.available(err, sizeof err),
	    KS_E_BACKEND_UNAVAILABLE);
	cr_assert(strstr(err, "no OpenCL platform") != NULL, "%s", err);
	cr_assert_eq(ks_backend_opencl.resolve_target("auto", t, sizeof t, err,
	    sizeof err), KS_E_BACKEND_UNAVAILABLE);
	cr_assert_eq(ks_backend_opencl.compile(k, "pocl:cpu-0", "clbin", &a,
	    err, sizeof err), KS_E_BACKEND_UNAVAILABLE);
	/* cpu is untouched. */
	cr_assert_eq(ks_backend_cpu.available(err, sizeof err), KS_OK);
	ks_ir_free(k);
}

Test(opencl, invalid_ir_is_refused_before_the_driver)
{
	ks_ir_kernel_t *k = ks_ir_new("bad", "t", 32);
	int y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int v = ks_ir_var(k, "v", KS_TY_F32, KS_VAR_LANE);
	ks_buf_t s;
	char err[512];

	k->grid = ks_x_i64(k, 1);
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_i64(k, 0),
	    ks_x_var(k, v)));
	ks_buf_init(&s);
	cr_assert_eq(ks_backend_opencl.source(k, &s, err, sizeof err),
	    KS_E_COMPILE);
	cr_assert(strstr(err, "'v'") != NULL, "%s", err);
	ks_buf_close(&s);
	ks_ir_free(k);
	k = ks_ir_new("bad", "t", 24);
	ks_buf_init(&s);
	cr_assert_eq(ks_backend_opencl.source(k, &s, err, sizeof err),
	    KS_E_UNSUPPORTED);
	ks_buf_close(&s);
	ks_ir_free(k);
}

/* ---- threads ---- */

typedef struct {
	const ks_ir_kernel_t *k;
	const char *target;
	ks_jit_artifact_t a;
	int rc;
} job_t;

static void *compile_job(void *p)
{
	job_t *j = p;
	char err[512];

	j->rc = ks_backend_opencl.compile(j->k, j->target, "clbin", &j->a,
	    err, sizeof err);
	return NULL;
}

/* Each compile has its own context and program: concurrent compiles all
 * succeed, and each binary runs. */
Test(opencl, concurrent_compiles_are_safe)
{
	ks_ir_kernel_t *k = gpu_copy_kernel(KS_DTYPE_F32, KS_DTYPE_BF16);
	float src[64];
	uint16_t dst[64];
	int64_t n = 64, i;
	gpu_arg_t args[3] = { { src, sizeof src }, { dst, sizeof dst },
		{ &n, 8 } };
	pthread_t t[3];
	job_t j[3];
	clprog_t p;
	clenv_t e;

	env_open(&e);
	for (i = 0; i < 64; i++)
		src[i] = (float)i * 0.37f;
	for (i = 0; i < 3; i++) {
		j[i].k = k;
		j[i].target = e.target;
		cr_assert_eq(pthread_create(&t[i], NULL, compile_job, &j[i]),
		    0);
	}
	for (i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	for (i = 0; i < 3; i++) {
		cr_assert_eq(j[i].rc, KS_OK);
		memset(dst, 0, sizeof dst);
		prog_from_binary(&e, &j[i].a, k->entry, &p);
		run_cl(&e, k, &p, args);
		prog_close(&p);
		cr_assert_eq(dst[63], ref_f32_to_bf16(src[63]));
		ks_jit_artifact_close(&j[i].a);
	}
	ks_ir_free(k);
	env_close(&e);
}
