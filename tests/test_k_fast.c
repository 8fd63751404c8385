/*
 * gemm's fast mode (docs/kernels.md, "The fast mode"): mode "fast" with W
 * in q8_0, q4_0 or q4_k selects the variant `fast`, whose x comes in q8_0
 * blocks (kspec_quantize's bytes) and whose sums are integer dot
 * products of groups of 4, scaled per block, in 16 lanes:
 *
 *   - bit for bit the plain-C reference ref/ref_fast.h, written from the
 *     documented contract, on the cpu backend's vector lowering (x86-64-v4,
 *     where the machine has it), its lane loop (x86-64-v3) and OpenCL, at
 *     shapes with a partial group of rows, an odd count of blocks, M of
 *     1 and 3, and any code bytes (every x code from -128 to 127);
 *   - within a float64 bound of the exact sum over the decoded x and W;
 *   - the checker catches each defect planted in the reference;
 *   - selection and refusals: mode exact and f32 weights keep their
 *     variants, the fast kernel's x is a q8_0 byte buffer, no exact
 *     variant builds for a fast request;
 *   - the verifier refuses a qdot misused (x not q8_0, a pair out of
 *     range, a kernel not of 16 lanes).
 */
#include "cl.h"
#include "kern.h"

#include "../include/kspec.h"

static int plant;
#define REF_FAST_PLANT(p) (plant == (p))
#include "../ref/ref_fast.h"
#include "qblocks.h"

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(fast, .init = setup, .timeout = 300);

static const ks_dtype_t fmts[] = { KS_DTYPE_Q8_0, KS_DTYPE_Q4_0,
	KS_DTYPE_Q4_K };

enum { N = 37, MMAX = 3 };

/* Shapes: K with an odd count of blocks (q8_0, q4_0), with an odd count
 * of pairs (the loop takes 2 a trip), and of whole super-blocks, for M =
 * 1 and 3. */
static const int64_t shapes[][2] = { { 1, 96 }, { 3, 96 }, { 3, 192 },
	{ 1, 512 }, { 3, 512 } };

#define ref_fmt qb_ref_fmt
#define ndiff qb_ndiff

static int applies(ks_dtype_t f, int64_t K)
{
	return K % (f == KS_DTYPE_Q4_K ? 256 : 32) == 0;
}

/* gemm's spec for WDT at M x N x K in MODE. */
static void gemm_spec(ks_spec_t *spec, ks_dtype_t wdt, ks_mode_t mode,
    int64_t M, int64_t K)
{
	ks_dim_t dims[3] = { { "M", 1, M }, { "N", 1, N }, { "K", 1, K } };
	char err[512];

	cr_assert_eq(ks_kernel_validate_mixed(&ks_kernel_gemm, KS_DTYPE_F32,
	    wdt, mode, dims, 3, spec, err, sizeof err), KS_OK, "%s", err);
}

static ks_ir_kernel_t *fast_ir(ks_dtype_t wdt, int64_t M, int64_t K)
{
	ks_spec_t spec;
	ks_ir_kernel_t *k = NULL;
	char err[512];

	gemm_spec(&spec, wdt, KS_MODE_FAST, M, K);
	cr_assert_eq(ks_specialize(&spec, &k, err, sizeof err), KS_OK, "%s",
	    err);
	cr_assert_str_eq(k->variant, "fast");
	return k;
}

#define blocks qb_blocks

/* Runs the fast kernel K on XQ, W into Y, on ENV, or the cpu at TARGET
 * (NULL: the machine's), and frees K. */
static void run(clenv_t *env, const char *target, ks_ir_kernel_t *k,
    void *xq, void *w, int rf, float *y, int64_t M, int64_t K)
{
	kt_buf_t bufs[3] = {
		{ "x", xq, (size_t)(M * ref_qrow_bytes(REF_Q8_0, K)) },
		{ "W", w, (size_t)(N * ref_qrow_bytes(rf, K)) },
		{ "y", y, (size_t)(M * N * 4) } };
	kt_val_t vals[3] = { { "M", M, 0 }, { "N", N, 0 }, { "K", K, 0 } };
	kt_args_t a;
	kt_prog_t p;
	gpu_cpu_build_t b;

	kt_bind(&a, k, bufs, 3, vals, 3);
	if (target != NULL) {
		gpu_cpu_build_at(k, target, &b);
		gpu_cpu_launch(k, b.fn, a.args);
		gpu_cpu_build_close(&b);
		ks_ir_free(k);
		return;
	}
	kt_prog_open(&p, k, env);
	kt_prog_run(&p, a.args);
	kt_prog_close(&p);
}

/* Every format x shape on ENV or the cpu at TARGET is the reference. */
static void every_shape(clenv_t *env, const char *target)
{
	float y[MMAX * N], want[MMAX * N];
	size_t fi, si;

	for (fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++)
		for (si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
			int64_t M = shapes[si][0], K = shapes[si][1];
			int rf = ref_fmt(fmts[fi]);
			uint8_t *xq, *w;
			ks_ir_kernel_t *k;
			char who[96];

			if (!applies(fmts[fi], K))
				continue;
			xq = blocks(REF_Q8_0, M, K, 7 + si);
			w = blocks(rf, N, K, 19 + fi);
			snprintf(who, sizeof who, "%s %s M=%lld K=%lld",
			    env ? "opencl" : target ? target : "cpu",
			    ks_dtype_name(fmts[fi]), (long long)M,
			    (long long)K);
			k = fast_ir(fmts[fi], M, K);
			memset(y, 0xa5, sizeof y);
			run(env, target, k, xq, w, rf, y, M, K);
			ref_gemm_fast(rf, xq, w, want, M, N, K);
			cr_assert_eq(ndiff(who, y, want, M * N), 0,
			    "%s: not the reference", who);
			free(xq);
			free(w);
		}
}

Test(fast, every_format_and_shape_on_cpu_is_the_reference)
{
	every_shape(NULL, NULL);
}

/*
 * The cpu backend lowers the block dot three ways: natively on AVX-512
 * targets (jit/cpu_qdot.c), with vpdpbusd where the target has AVX-512
 * VNNI (sapphirerapids), and as its plain IR in the lane loop elsewhere.
 * Each is the reference; the fast kernel on x86-64-v4 has the native
 * form's asm without vpdpbusd, sapphirerapids' with it, and x86-64-v3's
 * has none.
 */
Test(fast, the_native_and_the_plain_lowering_are_each_the_reference)
{
	char native[KS_MAX_NAME], err[512];
	size_t fi;

	cr_assert_eq(ks_backend_cpu.resolve_target("auto", native,
	    sizeof native, err, sizeof err), KS_OK, "%s", err);
	every_shape(NULL, "x86-64-v3");
	if (strcmp(native, "x86-64-v4") == 0)
		every_shape(NULL, "x86-64-v4");
	else
		cr_log_warn("no AVX-512 here (%s): the native lowering is "
		    "compiled and checked for inline asm, not run", native);
	__builtin_cpu_init();
	if (strcmp(native, "x86-64-v4") == 0 &&
	    __builtin_cpu_supports("avx512vnni"))
		every_shape(NULL, "sapphirerapids");
	else
		cr_log_warn("no AVX-512 VNNI here: the vpdpbusd lowering is "
		    "compiled and checked for its instruction, not run");
	for (fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
		ks_ir_kernel_t *k = fast_ir(fmts[fi], 1, 512);

		cr_assert(gpu_cpu_asm_has(k, "x86-64-v4", "#APP"),
		    "%s: no native block dot on x86-64-v4",
		    ks_dtype_name(fmts[fi]));
		cr_assert(!gpu_cpu_asm_has(k, "x86-64-v4", "vpdpbusd"),
		    "%s: vpdpbusd on x86-64-v4", ks_dtype_name(fmts[fi]));
		cr_assert(gpu_cpu_asm_has(k, "sapphirerapids", "vpdpbusd"),
		    "%s: no vpdpbusd on sapphirerapids",
		    ks_dtype_name(fmts[fi]));
		cr_assert(!gpu_cpu_asm_has(k, "x86-64-v3", "#APP"),
		    "%s: asm on x86-64-v3", ks_dtype_name(fmts[fi]));
		ks_ir_free(k);
	}
}

Test(fast, every_format_and_shape_on_opencl_is_the_reference)
{
	clenv_t e;

	env_open(&e);
	every_shape(&e, NULL);
	env_close(&e);
}

/*
 * The pipeline an engine runs: x quantized by kspec_quantize, then the
 * fast kernel.  Within a float64 bound of the exact sum over the decoded
 * x and W: each block's term rounds twice (three times for q4_k) and the
 * sums of 16 lanes add one rounding per pair, so the bound is
 * (K / 16 + 8) u times the sum of the terms' magnitudes.
 */
Test(fast, quantized_x_gives_the_decoded_sum_within_the_bound)
{
	enum { M = 3, K = 1024 };
	float x[M * K], xd[M * K], *wd = malloc(N * K * 4), y[M * N];
	size_t xbytes = M * (K / 32) * 34, fi;
	uint8_t *xq = malloc(xbytes);
	uint64_t s = 3;
	char err[256];
	int64_t i, n, j;

	for (i = 0; i < M * K; i++)
		x[i] = ldexpf((float)(int32_t)(gpu_rng(&s) >> 40) / 8388608.0f,
		    (int)(i % 7) - 3);
	cr_assert_eq(kspec_quantize("q8_0", x, M, K, xq, xbytes, err,
	    sizeof err), KSPEC_OK, "%s", err);
	ref_dequant_rows(REF_Q8_0, xq, M, K, xd);
	for (fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
		int rf = ref_fmt(fmts[fi]);
		uint8_t *w = blocks(rf, N, K, 41 + fi);
		ks_ir_kernel_t *k = fast_ir(fmts[fi], M, K);

		ref_dequant_rows(rf, w, N, K, wd);
		run(NULL, NULL, k, xq, w, rf, y, M, K);
		for (n = 0; n < M * N; n++) {
			const uint8_t *wr = w + n % N * ref_qrow_bytes(rf, K);
			double e = 0, a = 0;

			for (j = 0; j < K; j++) {
				double p = (double)xd[n / N * K + j] *
				    wd[n % N * K + j];

				e += p;
				a += fabs(p);
				if (rf == REF_Q4_K) {
					/* The terms are d sc q and dmin m
					 * apart: bound by both. */
					const uint8_t *sb = wr + j / 256 * 144;
					int sc, m;

					ref_q4k_scale_min(sb + 4, (int)(j % 256 /
					    32), &sc, &m);
					a += fabs((double)xd[n / N * K + j]) *
					    (fabs((double)ref_qf16(sb) * sc * 15) +
					    fabs((double)ref_qf16(sb + 2) * m));
				}
			}
			cr_assert_leq(fabs(y[n] - e), (K / 16 + 8) *
			    ldexp(1, -24) * a + 1e-300, "%s: y[%lld] = %a, "
			    "exact %a", ks_dtype_name(fmts[fi]), (long long)n,
			    (double)y[n], e);
		}
		free(w);
	}
	free(wd);
	free(xq);
}

/* Each planted defect of the reference changes it for some format, and
 * the kernel's output then differs from it: the checker catches it. */
Test(fast, the_checker_catches_each_planted_defect)
{
	enum { M = 1, K = 800 };        /* 25 blocks: odd */
	float y[3][N], want[N];
	uint8_t *xq = blocks(REF_Q8_0, M, K, 5), *xq4 = blocks(REF_Q8_0, M,
	    768, 6);
	size_t fi;
	int p;

	for (fi = 0; fi < 3; fi++) {
		int rf = ref_fmt(fmts[fi]);
		int64_t k = fi == 2 ? 768 : K;
		uint8_t *w = blocks(rf, N, k, 61 + fi);
		ks_ir_kernel_t *kk = fast_ir(fmts[fi], M, k);

		run(NULL, NULL, kk, fi == 2 ? xq4 : xq, w, rf, y[fi], M, k);
		ref_gemm_fast(rf, fi == 2 ? xq4 : xq, w, want, M, N, k);
		cr_assert_eq(ndiff("unplanted", y[fi], want, N), 0);
		free(w);
	}
	for (p = REF_FAST_NONE + 1; p < REF_FAST_N; p++) {
		int64_t caught = 0;

		for (fi = 0; fi < 3; fi++) {
			int rf = ref_fmt(fmts[fi]);
			int64_t k = fi == 2 ? 768 : K;
			uint8_t *w = blocks(rf, N, k, 61 + fi);

			plant = p;
			ref_gemm_fast(rf, fi == 2 ? xq4 : xq, w, want, M, N, k);
			plant = REF_FAST_NONE;
			caught += ndiff(NULL, y[fi], want, N);
			free(w);
		}
		cr_assert_gt(caught, 0, "plant %d not caught", p);
	}
	free(xq);
	free(xq4);
}

/* Mode fast changes nothing for f32 weights, nor mode exact for block
 * weights; the fast kernel's x is q8_0 bytes; no exact variant builds
 * for a fast request, and fast builds for no exact one. */
Test(fast, selection_and_the_kernel_parameters)
{
	ks_spec_t spec;
	ks_ir_kernel_t *k = NULL;
	char err[256];
	int i, x = -1;

	gemm_spec(&spec, KS_DTYPE_F32, KS_MODE_FAST, 1, 512);
	cr_assert_str_eq(ks_kernel_gemm.select(&spec), "gemv_m1");
	gemm_spec(&spec, KS_DTYPE_Q4_0, KS_MODE_EXACT, 1, 512);
	cr_assert_str_eq(ks_kernel_gemm.select(&spec), "gemv_m1");
	cr_assert_eq(ks_specialize_variant(&spec, "fast", &k, err,
	    sizeof err), KS_E_UNSUPPORTED);
	gemm_spec(&spec, KS_DTYPE_Q4_0, KS_MODE_FAST, 9, 512);
	cr_assert_str_eq(ks_kernel_gemm.select(&spec), "fast");
	for (i = 0; i < 4; i++)
		cr_assert_eq(ks_specialize_variant(&spec,
		    ks_kernel_gemm.variants[i], &k, err, sizeof err),
		    KS_E_UNSUPPORTED, "%s", ks_kernel_gemm.variants[i]);
	k = fast_ir(KS_DTYPE_Q4_K, 2, 512);
	for (i = 0; i < k->nparams; i++)
		if (strcmp(k->params[i].name, "x") == 0)
			x = i;
	cr_assert_geq(x, 0);
	cr_assert(k->params[x].bytes);
	cr_assert_eq(k->params[x].dtype, KS_DTYPE_Q8_0);
	cr_assert_str_eq(k->params[x].dims, "M,K/32*34");
	ks_ir_free(k);
	/* K must tile the weight's block, as in mode exact. */
	{
		ks_dim_t dims[3] = { { "M", 1, 1 }, { "N", 1, N },
			{ "K", 1, 288 } };

		cr_assert_eq(ks_kernel_validate_mixed(&ks_kernel_gemm,
		    KS_DTYPE_F32, KS_DTYPE_Q4_K, KS_MODE_FAST, dims, 3, &spec,
		    err, sizeof err), KS_E_BAD_SHAPE);
		cr_assert(strstr(err, "256") != NULL, "%s", err);
	}
}

/* The first KS_X_QDOT under expression E or statement S, or NULL. */
static ks_expr_t *find_qdot_x(ks_expr_t *e)
{
	ks_expr_t *f;

	if (e == NULL || e->kind == KS_X_QDOT)
		return e;
	if ((f = find_qdot_x(e->a)) || (f = find_qdot_x(e->b)))
		return f;
	return find_qdot_x(e->c);
}

static ks_expr_t *find_qdot(ks_stmt_t *s)
{
	ks_expr_t *f;
	int i;

	if (s == NULL)
		return NULL;
	if ((f = find_qdot_x(s->a)) || (f = find_qdot_x(s->b)) ||
	    (f = find_qdot(s->body)) || (f = find_qdot(s->orelse)))
		return f;
	for (i = 0; s->kind == KS_S_BLOCK && i < s->nitems; i++)
		if ((f = find_qdot(s->items[i])))
			return f;
	return NULL;
}

/* The verifier holds a qdot to its rules (specialize/verify.c): each
 * misuse planted in a well-formed fast kernel is refused, by name. */
Test(fast, the_verifier_refuses_a_misused_qdot)
{
	ks_ir_kernel_t *k = fast_ir(KS_DTYPE_Q4_K, 1, 512);
	ks_expr_t *q = find_qdot(k->body);
	char err[512];
	int p2;
	int64_t i;

	cr_assert_not_null(q);
	cr_assert_eq(ks_ir_verify(k, err, sizeof err), KS_OK, "%s", err);
	p2 = q->param2;
	q->param2 = q->param;           /* x not q8_0 */
	cr_assert_eq(ks_ir_verify(k, err, sizeof err), KS_E_INTERNAL);
	cr_assert(strstr(err, "not a q8_0 buffer"), "%s", err);
	q->param2 = p2;
	i = q->i;
	q->i = 5;                       /* q4_k's pairs are 0..4 */
	cr_assert_eq(ks_ir_verify(k, err, sizeof err), KS_E_INTERNAL);
	cr_assert(strstr(err, "blocks or pair"), "%s", err);
	q->i = i;
	k->nlanes = 32;                 /* a qdot's lanes are 16 */
	cr_assert_eq(ks_ir_verify(k, err, sizeof err), KS_E_INTERNAL);
	cr_assert(strstr(err, "16 lanes"), "%s", err);
	ks_ir_free(k);
}
