/*
 * Quantized weights in gemm (docs/kernels.md, "Quantized weight formats"):
 * W in q8_0, q4_0 or q4_k with dtype f32, every variant, on the cpu
 * backend and on OpenCL (PoCL here):
 *
 *   - bit for bit the plain-C reference: ref/ref_quant.h's decoder (written
 *     from the documented codec) and ref_gemm's canonical order in f32;
 *   - bit for bit the plain f32 kernel of the same variant run on the
 *     decoded weights (the contract: decode exactly, then gemm);
 *   - every variant bit for bit `general` at the same shape;
 *   - within a float64 bound of the exact sum of the decoded weights.
 *
 * The checker is shown to catch each planted decoder bug of
 * ref_quant.h (nibble order, scale dtype, q4_k's 6-bit unpacking, a block
 * boundary, a tail).  Validation (K a constant multiple of the block,
 * dtype f32 only, names) and the IR's byte buffer are checked without a
 * compile.
 */
#include "cl.h"
#include "kern.h"

static int plant;
#define REF_QUANT_PLANT(p) (plant == (p))
#include "../ref/ref_quant.h"
#include "qblocks.h"

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(quant, .init = setup, .timeout = 300);

static const ks_dtype_t fmts[] = { KS_DTYPE_Q8_0, KS_DTYPE_Q4_0,
	KS_DTYPE_Q4_K };
static const char *const variants[] = { "general", "gemv_m1", "small_m",
	"blocked" };
static const int64_t var_m[] = { 5, 1, 3, 9 };

enum { N = 37, K = 512 };

#define ref_fmt qb_ref_fmt
#define put_f16 qb_put_f16
#define ndiff qb_ndiff

/* The IR of gemm's VARIANT with weights WDT at M x N x K, all constant. */
static ks_ir_kernel_t *gemm_ir(const char *variant, ks_dtype_t wdt,
    int64_t M)
{
	ks_dim_t dims[3] = { { "M", 1, M }, { "N", 1, N }, { "K", 1, K } };
	ks_spec_t spec;
	ks_ir_kernel_t *k = NULL;
	char err[512];

	cr_assert_eq(ks_kernel_validate_mixed(&ks_kernel_gemm, KS_DTYPE_F32,
	    wdt, KS_MODE_EXACT, dims, 3, &spec, err, sizeof err), KS_OK, "%s",
	    err);
	cr_assert_eq(ks_specialize_variant(&spec, variant, &k, err,
	    sizeof err), KS_OK, "%s: %s", variant, err);
	return k;
}

/* N rows of K weights of format F (qblocks.h). */
static uint8_t *weights(ks_dtype_t f, uint64_t seed)
{
	return qb_blocks(ref_fmt(f), N, K, seed);
}

static void inputs(float *x, int64_t n, uint64_t seed)
{
	int64_t i;

	for (i = 0; i < n; i++) {
		uint64_t r = gpu_rng(&seed);

		x[i] = ldexpf((float)(int32_t)(r >> 40) / 8388608.0f,
		    (int)(r % 13) - 6);
	}
}

/* Runs gemm K on x, W (WBYTES bytes) into y, on ENV or the cpu. */
static void run(clenv_t *env, ks_ir_kernel_t *k, float *x, void *w,
    size_t wbytes, float *y, int64_t M)
{
	kt_buf_t bufs[3] = { { "x", x, (size_t)(M * K * 4) },
		{ "W", w, wbytes }, { "y", y, (size_t)(M * N * 4) } };
	kt_val_t vals[3] = { { "M", M, 0 }, { "N", N, 0 }, { "K", K, 0 } };
	kt_args_t a;
	kt_prog_t p;

	kt_bind(&a, k, bufs, 3, vals, 3);
	kt_prog_open(&p, k, env);
	kt_prog_run(&p, a.args);
	kt_prog_close(&p);
}

/* y of the reference: the decoded weights, then ref_gemm in f32. */
static void reference(ks_dtype_t f, const uint8_t *w, const float *x,
    float *wf, float *y, int64_t M)
{
	ref_dequant_rows(ref_fmt(f), w, N, K, wf);
	ref_gemm(x, wf, y, KS_DTYPE_F32, M, N, K);
}

/* Every variant x format on ENV (or the cpu): the reference, the f32
 * kernel on the decoded weights (cpu), general, and the f64 bound. */
static void every_variant(clenv_t *env)
{
	const char *be = env ? "opencl" : "cpu";
	float *x = malloc(9 * K * 4), *wf = malloc(N * K * 4);
	float y[9 * N], want[9 * N], yf[9 * N], gen[9 * N];
	size_t fi, vi;

	inputs(x, 9 * K, 5);
	for (fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
		uint8_t *w = weights(fmts[fi], 17 + fi);
		size_t wbytes = (size_t)(N * ref_qrow_bytes(ref_fmt(fmts[fi]),
		    K));

		for (vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
			int64_t M = var_m[vi], i, n;
			char who[64];

			snprintf(who, sizeof who, "%s %s %s", be, variants[vi],
			    ks_dtype_name(fmts[fi]));
			memset(y, 0xa5, sizeof y);
			run(env, gemm_ir(variants[vi], fmts[fi], M), x, w,
			    wbytes, y, M);
			reference(fmts[fi], w, x, wf, want, M);
			cr_assert_eq(ndiff(who, y, want, M * N), 0,
			    "%s: not the reference", who);
			/* general at this variant's M. */
			memset(gen, 0xa5, sizeof gen);
			run(env, gemm_ir("general", fmts[fi], M), x, w, wbytes,
			    gen, M);
			cr_assert_eq(ndiff(who, y, gen, M * N), 0,
			    "%s: not general", who);
			/* The plain f32 kernel on the decoded weights. */
			if (env == NULL) {
				memset(yf, 0xa5, sizeof yf);
				run(NULL, gemm_ir(variants[vi], KS_DTYPE_F32,
				    M), x, wf, (size_t)(N * K * 4), yf, M);
				cr_assert_eq(ndiff(who, y, yf, M * N), 0,
				    "%s: not the f32 kernel on decoded weights",
				    who);
			}
			/* Within (K + 2) u of sum |x w| of the f64 sum. */
			for (n = 0; n < M * N; n++) {
				double s = 0, a = 0;

				for (i = 0; i < K; i++) {
					double p = (double)x[n / N * K + i] *
					    wf[n % N * K + i];

					s += p;
					a += fabs(p);
				}
				cr_assert_leq(fabs(y[n] - s), (K + 2) *
				    ldexp(1, -24) * a + 1e-300, "%s: y[%lld] "
				    "beyond the bound", who, (long long)n);
			}
		}
		free(w);
	}
	free(x);
	free(wf);
}

Test(quant, every_gemm_variant_and_format_on_cpu_is_the_reference)
{
	every_variant(NULL);
}

/*
 * The cpu backend lowers these kernels' lanes two ways: explicit 512-bit
 * vectors on AVX-512 targets (jit/cpu_vec.c), the lane loop that GCC
 * vectorizes elsewhere.  Each variant x format is the reference by both
 * (the test above runs the machine's own target; this one x86-64-v3's
 * loop, and x86-64-v4's vectors where the machine has AVX-512), and the
 * decode variant, gemv_m1, takes the vectors on x86-64-v4 and not on
 * x86-64-v3.
 */
Test(quant, the_vector_and_the_loop_lowering_are_each_the_reference)
{
	static const char *const targets[] = { "x86-64-v3", "x86-64-v4" };
	float *x = malloc(9 * K * 4), *wf = malloc(N * K * 4);
	float y[9 * N], want[9 * N];
	char native[KS_MAX_NAME], err[512];
	size_t fi, vi, t;
	int v4;

	cr_assert_eq(ks_backend_cpu.resolve_target("auto", native,
	    sizeof native, err, sizeof err), KS_OK, "%s", err);
	v4 = strcmp(native, "x86-64-v4") == 0;
	if (!v4)
		cr_log_warn("no AVX-512 here (%s): the vector lowering is "
		    "compiled and checked for inline asm, not run", native);
	inputs(x, 9 * K, 6);
	for (fi = 0; fi < sizeof fmts / sizeof fmts[0]; fi++) {
		uint8_t *w = weights(fmts[fi], 31 + fi);
		size_t wbytes = (size_t)(N * ref_qrow_bytes(ref_fmt(fmts[fi]),
		    K));

		for (vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
			int64_t M = var_m[vi];

			reference(fmts[fi], w, x, wf, want, M);
			for (t = 0; t < 2; t++) {
				ks_ir_kernel_t *k = gemm_ir(variants[vi],
				    fmts[fi], M);
				kt_buf_t bufs[3] = { { "x", x, (size_t)(M * K *
				    4) }, { "W", w, wbytes }, { "y", y,
				    (size_t)(M * N * 4) } };
				kt_val_t vals[3] = { { "M", M, 0 },
					{ "N", N, 0 }, { "K", K, 0 } };
				gpu_cpu_build_t b;
				kt_args_t a;
				char who[64];

				snprintf(who, sizeof who, "%s %s %s",
				    targets[t], variants[vi],
				    ks_dtype_name(fmts[fi]));
				if (strcmp(variants[vi], "gemv_m1") == 0)
					cr_assert_eq(gpu_cpu_asm_has(k,
					    targets[t], "#APP"), t == 1, "%s: vector "
					    "lanes %s", who, t ? "not used" :
					    "used");
				if (t == 0 || v4) {
					memset(y, 0xa5, sizeof y);
					kt_bind(&a, k, bufs, 3, vals, 3);
					gpu_cpu_build_at(k, targets[t], &b);
					gpu_cpu_launch(k, b.fn, a.args);
					gpu_cpu_build_close(&b);
					cr_assert_eq(ndiff(who, y, want, M * N),
					    0, "%s: not the reference", who);
				}
				ks_ir_free(k);
			}
		}
		free(w);
	}
	free(x);
	free(wf);
}

Test(quant, every_gemm_variant_and_format_on_opencl_is_the_reference)
{
	clenv_t e;

	env_open(&e);
	every_variant(&e);
	env_close(&e);
}

/* Each planted decoder bug changes the reference of some format, and the
 * kernel's output then differs from it: the checker catches it. */
Test(quant, the_checker_catches_each_planted_decoder_bug)
{
	float *x = malloc(K * 4), *wf = malloc(N * K * 4);
	float y[3][N], want[N];
	size_t fi;
	int p;

	inputs(x, K, 7);
	for (fi = 0; fi < 3; fi++) {
		uint8_t *w = weights(fmts[fi], 31 + fi);

		run(NULL, gemm_ir("gemv_m1", fmts[fi], 1), x, w,
		    (size_t)(N * ref_qrow_bytes(ref_fmt(fmts[fi]), K)), y[fi],
		    1);
		free(w);
	}
	for (p = REF_PLANT_NONE + 1; p < REF_PLANT_N; p++) {
		int64_t caught = 0;

		for (fi = 0; fi < 3; fi++) {
			uint8_t *w = weights(fmts[fi], 31 + fi);

			if (p == REF_PLANT_NIBBLE_SWAP &&
			    fmts[fi] == KS_DTYPE_Q8_0)
				continue;       /* no nibbles */
			if (p == REF_PLANT_Q4K_SCALE_BITS &&
			    fmts[fi] != KS_DTYPE_Q4_K)
				continue;
			memset(wf, 0, N * K * 4);
			plant = p;
			reference(fmts[fi], w, x, wf, want, 1);
			plant = REF_PLANT_NONE;
			caught = ndiff(NULL, y[fi], want, N);
			cr_assert_gt(caught, 0, "plant %d in %s not caught", p,
			    ks_dtype_name(fmts[fi]));
			free(w);
		}
	}
	free(x);
	free(wf);
}

/* embedding from a quantized table: every valid id's row is the decoded
 * row, bit for bit, an id outside [0, V) a row of zeros; H = 512 (full
 * chunks) and, for the formats of 32, H = 96 (a guarded tail chunk). */
static void embedding_on(clenv_t *env)
{
	enum { T = 6, V = 7 };
	static const int32_t ids[T] = { 3, 0, -1, 6, 7, 3 };
	size_t fi;
	int hi;

	for (fi = 0; fi < 3; fi++)
		for (hi = 0; hi < 2; hi++) {
			int64_t H = hi ? 96 : 512, t, j;
			int rf = ref_fmt(fmts[fi]);
			ks_dim_t dims[3] = { { "T", 1, T }, { "V", 1, V },
				{ "H", 1, H } };
			size_t tb = (size_t)(V * ref_qrow_bytes(rf, H));
			uint8_t *tab = malloc(tb);
			float *y = malloc((size_t)(T * H * 4)), *row =
			    malloc((size_t)H * 4);
			uint64_t sd = 3 + fi;
			kt_buf_t bufs[3] = { { "ids", (void *)ids, sizeof ids },
				{ "table", tab, tb },
				{ "y", y, (size_t)(T * H * 4) } };
			kt_val_t vals[3] = { { "T", T, 0 }, { "V", V, 0 },
				{ "H", H, 0 } };
			ks_spec_t spec;
			ks_ir_kernel_t *k;
			kt_args_t a;
			kt_prog_t p;
			char err[512];

			if (hi && rf == REF_Q4_K)
				continue;       /* 96 is no super-block */
			for (j = 0; j < (int64_t)tb; j++)
				tab[j] = (uint8_t)gpu_rng(&sd);
			for (j = 0; j < (int64_t)tb; j += ref_qblock_bytes(rf))
				put_f16(tab + j, &sd, 3, 20);
			cr_assert_eq(ks_kernel_validate_mixed(
			    &ks_kernel_embedding, KS_DTYPE_F32, fmts[fi],
			    KS_MODE_EXACT, dims, 3, &spec, err, sizeof err),
			    KS_OK, "%s", err);
			cr_assert_eq(ks_specialize(&spec, &k, err, sizeof err),
			    KS_OK, "%s", err);
			memset(y, 0xa5, (size_t)(T * H * 4));
			kt_bind(&a, k, bufs, 3, vals, 3);
			kt_prog_open(&p, k, env);
			kt_prog_run(&p, a.args);
			kt_prog_close(&p);
			for (t = 0; t < T; t++) {
				if (ids[t] >= 0 && ids[t] < V)
					ref_dequant_row(rf, tab + ids[t] *
					    ref_qrow_bytes(rf, H), H, row);
				else
					memset(row, 0, (size_t)H * 4);
				cr_assert_eq(ndiff(ks_dtype_name(fmts[fi]),
				    y + t * H, row, H), 0, "%s: embedding "
				    "%s H=%lld token %lld", env ? "opencl" :
				    "cpu", ks_dtype_name(fmts[fi]),
				    (long long)H, (long long)t);
			}
			free(tab);
			free(y);
			free(row);
		}
}

Test(quant, embedding_rows_are_the_decoded_rows_on_cpu_and_opencl)
{
	clenv_t e;

	embedding_on(NULL);
	env_open(&e);
	embedding_on(&e);
	env_close(&e);
}

/* The IR of a kernel KERNEL at DTYPE, WDT, dims all constant. */
static ks_ir_kernel_t *ir_of(const ks_kernel_def_t *def, ks_dtype_t wdt,
    const int64_t *v)
{
	ks_dim_t dims[KS_MAX_DIMS];
	ks_spec_t spec;
	ks_ir_kernel_t *k;
	char err[512];
	int i;

	for (i = 0; i < def->ndims; i++)
		dims[i] = (ks_dim_t){ def->dims[i], 1, v[i] };
	cr_assert_eq(ks_kernel_validate_mixed(def, KS_DTYPE_F32, wdt,
	    KS_MODE_EXACT, dims, def->ndims, &spec, err, sizeof err), KS_OK,
	    "%s: %s", def->name, err);
	cr_assert_eq(ks_specialize(&spec, &k, err, sizeof err), KS_OK, "%s",
	    err);
	return k;
}

/* Prefill: gemm_pack_w decodes a quantized W into f32 panels, bit for bit
 * the panels of the decoded f32 W, and gemm_packed on them gives the
 * quantized gemm's bits (blocked, the prefill variant). */
static void prefill_on(clenv_t *env)
{
	enum { M = 9 };
	const int64_t pw_dims[2] = { N, K }, px_dims[2] = { M, K },
	    gp_dims[3] = { M, N, K };
	size_t pw = (size_t)((N + 31) / 32 * 32 * 32 * (K / 32)) * 4;
	size_t px = (size_t)((M + 7) / 8 * 8 * 32 * (K / 32)) * 4;
	float *x = malloc(M * K * 4), *wf = malloc(N * K * 4);
	float *wp = malloc(pw), *wpf = malloc(pw), *xp = malloc(px);
	float y[M * N], want[M * N];
	size_t fi;

	inputs(x, M * K, 9);
	for (fi = 0; fi < 3; fi++) {
		uint8_t *w = weights(fmts[fi], 51 + fi);
		size_t wb = (size_t)(N * ref_qrow_bytes(ref_fmt(fmts[fi]), K));
		kt_buf_t b[5] = { { "in", w, wb }, { "out", wp, pw } };
		kt_val_t v[3] = { { "R", N, 0 }, { "K", K, 0 } };
		kt_args_t a;
		kt_prog_t p;

		memset(wp, 0xa5, pw);
		kt_prog_open(&p, ir_of(&ks_kernel_gemm_pack_w, fmts[fi],
		    pw_dims), env);
		kt_bind(&a, p.k, b, 2, v, 2);
		kt_prog_run(&p, a.args);
		kt_prog_close(&p);
		ref_dequant_rows(ref_fmt(fmts[fi]), w, N, K, wf);
		b[0] = (kt_buf_t){ "in", wf, (size_t)(N * K * 4) };
		b[1] = (kt_buf_t){ "out", wpf, pw };
		kt_prog_open(&p, ir_of(&ks_kernel_gemm_pack_w, KS_DTYPE_F32,
		    pw_dims), env);
		kt_bind(&a, p.k, b, 2, v, 2);
		kt_prog_run(&p, a.args);
		kt_prog_close(&p);
		cr_assert_eq(ndiff("pack_w", wp, wpf, (int64_t)(pw / 4)), 0,
		    "%s: gemm_pack_w of %s is not the decoded panels",
		    env ? "opencl" : "cpu", ks_dtype_name(fmts[fi]));
		/* x's panels, then gemm_packed on both. */
		b[0] = (kt_buf_t){ "in", x, (size_t)(M * K * 4) };
		b[1] = (kt_buf_t){ "out", xp, px };
		v[0] = (kt_val_t){ "R", M, 0 };
		kt_prog_open(&p, ir_of(&ks_kernel_gemm_pack_x, KS_DTYPE_F32,
		    px_dims), env);
		kt_bind(&a, p.k, b, 2, v, 2);
		kt_prog_run(&p, a.args);
		kt_prog_close(&p);
		b[0] = (kt_buf_t){ "xp", xp, px };
		b[1] = (kt_buf_t){ "Wp", wp, pw };
		b[2] = (kt_buf_t){ "y", y, sizeof y };
		v[0] = (kt_val_t){ "M", M, 0 };
		v[1] = (kt_val_t){ "N", N, 0 };
		v[2] = (kt_val_t){ "K", K, 0 };
		kt_prog_open(&p, ir_of(&ks_kernel_gemm_packed, KS_DTYPE_F32,
		    gp_dims), env);
		kt_bind(&a, p.k, b, 3, v, 3);
		kt_prog_run(&p, a.args);
		kt_prog_close(&p);
		reference(fmts[fi], w, x, wf, want, M);
		cr_assert_eq(ndiff("gemm_packed", y, want, M * N), 0,
		    "%s: prefill of %s is not the quantized gemm",
		    env ? "opencl" : "cpu", ks_dtype_name(fmts[fi]));
		free(w);
	}
	free(x); free(wf); free(wp); free(wpf); free(xp);
}

Test(quant, prefill_packs_the_decoded_weights_on_cpu_and_opencl)
{
	clenv_t e;

	prefill_on(NULL);
	env_open(&e);
	prefill_on(&e);
	env_close(&e);
}

Test(quant, validation_names_the_block_and_the_ir_reads_bytes)
{
	ks_dim_t dims[3] = { { "M", 1, 1 }, { "N", 1, 64 }, { "K", 1, 96 } };
	ks_spec_t spec;
	ks_ir_kernel_t *k;
	ks_dtype_t d;
	ks_buf_t b;
	char err[512];

	/* K = 96: three q8_0 blocks, not a q4_k super-block. */
	cr_assert_eq(ks_kernel_validate_mixed(&ks_kernel_gemm, KS_DTYPE_F32,
	    KS_DTYPE_Q8_0, KS_MODE_EXACT, dims, 3, &spec, err, sizeof err),
	    KS_OK, "%s", err);
	cr_assert_eq(ks_kernel_validate_mixed(&ks_kernel_gemm, KS_DTYPE_F32,
	    KS_DTYPE_Q4_K, KS_MODE_EXACT, dims, 3, &spec, err, sizeof err),
	    KS_E_BAD_SHAPE);
	cr_assert(strstr(err, "q4_k") && strstr(err, "256"), "%s", err);
	dims[2].value = 100;
	cr_assert_eq(ks_kernel_validate_mixed(&ks_kernel_gemm, KS_DTYPE_F32,
	    KS_DTYPE_Q4_0, KS_MODE_EXACT, dims, 3, &spec, err, sizeof err),
	    KS_E_BAD_SHAPE);
	cr_assert(strstr(err, "block of 32"), "%s", err);
	dims[2] = (ks_dim_t){ "K", 0, 0 };
	cr_assert_eq(ks_kernel_validate_mixed(&ks_kernel_gemm, KS_DTYPE_F32,
	    KS_DTYPE_Q4_0, KS_MODE_EXACT, dims, 3, &spec, err, sizeof err),
	    KS_E_BAD_SHAPE);
	cr_assert(strstr(err, "K is dynamic"), "%s", err);
	/* Only with dtype f32, only for kernels that take blocks. */
	dims[2] = (ks_dim_t){ "K", 1, 64 };
	cr_assert_eq(ks_kernel_validate_mixed(&ks_kernel_gemm, KS_DTYPE_F16,
	    KS_DTYPE_Q8_0, KS_MODE_EXACT, dims, 3, &spec, err, sizeof err),
	    KS_E_BAD_DTYPE);
	cr_assert(!ks_kernel_wdtype_ok(&ks_kernel_rmsnorm, KS_DTYPE_F32,
	    KS_DTYPE_Q8_0));
	cr_assert_eq(ks_dtype_parse("q6_k", &d), KS_E_BAD_DTYPE);
	cr_assert_eq(ks_dtype_parse("q4_k", &d), KS_OK);
	cr_assert_eq(d, KS_DTYPE_Q4_K);

	/* W is a byte buffer of the format, its dims in bytes. */
	cr_assert_eq(ks_kernel_validate_mixed(&ks_kernel_gemm, KS_DTYPE_F32,
	    KS_DTYPE_Q4_0, KS_MODE_EXACT, dims, 3, &spec, err, sizeof err),
	    KS_OK, "%s", err);
	cr_assert_eq(ks_specialize(&spec, &k, err, sizeof err), KS_OK, "%s",
	    err);
	ks_buf_init(&b);
	cr_assert_eq(ks_ir_print(k, &b), KS_OK);
	cr_assert(strstr(b.data, "param 1 W buffer q4_0 read dims N,K/32*18\n"),
	    "%s", b.data);
	ks_buf_close(&b);
	ks_ir_free(k);
}
