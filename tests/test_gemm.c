/*
 * gemm on the cpu backend: every variant against the plain-C canonical
 * reference of ref/ref.h (docs/kernels.md: 32 lanes, lane l
 * accumulates k = l (mod 32) in increasing k with fmaf, tree 16..1, one
 * round-to-nearest-even to the dtype), bit for bit, and against a double
 * precision reference within a stated bound (sanity of the reference
 * itself).  The bitwise checker is shown to catch a planted wrong order.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../jit/jit.h"
#include "../ref/ref.h"

/* ---- running a specialized gemm ---- */

typedef struct {
	int64_t M, N, K;
	int dyn_m, dyn_n, dyn_k;        /* passed as scalars, not baked */
} shape_t;

/* Value of the grid; VALS[p] is the value of param p. */
static int64_t eval(const ks_ir_kernel_t *k, const ks_expr_t *e,
    const int64_t *vals)
{
	int64_t v = 0;

	cr_assert_eq(ks_ir_eval_launch(k, e, vals, &v), KS_OK,
	    "grid not evaluable");
	return v;
}

/* Specializes gemm for SH and DT, compiles, runs it on x, W into y.
 * Returns the variant chosen (a static string of the kernel def). */
static const char *run_gemm(const shape_t *sh, ks_dtype_t dt, const void *x,
    const void *w, void *y)
{
	const ks_kernel_def_t *def = ks_kernel_find("gemm");
	ks_dim_t dims[3] = {
		{ "M", !sh->dyn_m, sh->M },
		{ "N", !sh->dyn_n, sh->N },
		{ "K", !sh->dyn_k, sh->K },
	};
	ks_spec_t spec;
	ks_ir_kernel_t *k;
	ks_jit_artifact_t a;
	ks_jit_cpu_lib_t *lib;
	ks_jit_cpu_entry_t fn;
	char target[KS_MAX_NAME], err[2048];
	void *params[8];
	int64_t vals[8] = { 0 };
	const char *variant;
	int i, np = 0;

	cr_assert_not_null(def, "no gemm kernel in the library");
	cr_assert_eq(ks_kernel_validate(def, dt, KS_MODE_EXACT, dims, 3,
	    &spec, err, sizeof(err)), KS_OK, "%s", err);
	variant = def->select(&spec);
	cr_assert_eq(ks_specialize(&spec, &k, err, sizeof(err)), KS_OK, "%s",
	    err);
	cr_assert_str_eq(k->variant, variant);
	cr_assert_eq(ks_backend_cpu.resolve_target("auto", target,
	    sizeof(target), err, sizeof(err)), KS_OK);
	cr_assert_eq(ks_backend_cpu.compile(k, target, "so", &a, err,
	    sizeof(err)), KS_OK, "%s", err);
	cr_assert_eq(ks_jit_cpu_load(a.bytes, a.len, k->entry, &lib, &fn,
	    err, sizeof(err)), KS_OK, "%s", err);

	/* Unbound parameters in declaration order: x, W, y, then the
	 * dynamic dims among M, N, K. */
	for (i = 0; i < k->nparams; i++) {
		const ks_ir_param_t *p = &k->params[i];

		if (p->kind == KS_PARAM_BUFFER) {
			params[np++] = strcmp(p->name, "x") == 0 ? (void *)&x :
			    strcmp(p->name, "W") == 0 ? (void *)&w : (void *)&y;
			continue;
		}
		if (p->bound)
			continue;
		vals[i] = strcmp(p->name, "M") == 0 ? sh->M :
		    strcmp(p->name, "N") == 0 ? sh->N : sh->K;
		params[np++] = &vals[i];
	}
	fn(params, 0, (uint64_t)eval(k, k->grid, vals));
	ks_jit_cpu_unload(lib);
	ks_jit_artifact_close(&a);
	ks_ir_free(k);
	return variant;
}

/* ---- the checkers ---- */

static uint32_t elem_bits(const void *y, ks_dtype_t dt, int64_t i)
{
	uint32_t u;

	if (dt == KS_DTYPE_F32) {
		memcpy(&u, (const float *)y + i, 4);
		return u;
	}
	return ((const uint16_t *)y)[i];
}

/* Count of outputs whose bits differ; the first few are logged. */
static int64_t bitwise_diff(const void *got, const void *want,
    ks_dtype_t dt, int64_t n)
{
	int64_t i, bad = 0;

	for (i = 0; i < n; i++)
		if (elem_bits(got, dt, i) != elem_bits(want, dt, i) &&
		    bad++ < 3)
			cr_log_info("y[%lld]: 0x%x, reference 0x%x",
			    (long long)i, elem_bits(got, dt, i),
			    elem_bits(want, dt, i));
	return bad;
}

/*
 * Sanity against double precision: |y - exact| <= 1.01 * K * 2^-24 *
 * sum_k |x_k w_k| (the classic bound for any order of K f32 fma/add steps)
 * + |exact| * u + 2^-24, where u is the unit roundoff of the store
 * (2^-24 f32, 2^-11 f16, 2^-8 bf16) and 2^-24 covers an f16 subnormal
 * result (absolute error up to 2^-25).
 */
static void check_f64(const void *x, const void *w, const void *y,
    ks_dtype_t dt, int64_t M, int64_t N, int64_t K)
{
	double u = dt == KS_DTYPE_F32 ? 0x1p-24 : dt == KS_DTYPE_F16 ?
	    0x1p-11 : 0x1p-8;
	double *exact = malloc(sizeof(double) * (size_t)(M * N));
	int64_t m, n, k;

	ref_gemm_f64(x, w, exact, dt, M, N, K);
	for (m = 0; m < M; m++)
		for (n = 0; n < N; n++) {
			double mag = 0, got, bound;

			for (k = 0; k < K; k++)
				mag += fabs((double)ref_load(x, dt, m * K + k) *
				    ref_load(w, dt, n * K + k));
			got = ref_load(y, dt, m * N + n);
			bound = 1.01 * (double)K * 0x1p-24 * mag +
			    fabs(exact[m * N + n]) * u + 0x1p-24;
			cr_assert_leq(fabs(got - exact[m * N + n]), bound,
			    "y[%lld][%lld] = %.9g, exact %.9g", (long long)m,
			    (long long)n, got, exact[m * N + n]);
		}
	free(exact);
}

/* A planted bug: the lanes summed sequentially instead of the tree. */
static void ref_gemm_sequential(const void *x, const void *w, void *y,
    ks_dtype_t dt, int64_t M, int64_t N, int64_t K)
{
	int64_t m, n, j;
	float v[32], s;
	int l;

	for (m = 0; m < M; m++)
		for (n = 0; n < N; n++) {
			memset(v, 0, sizeof(v));
			for (j = 0; j < K; j++)
				v[j % 32] = fmaf(ref_load(x, dt, m * K + j),
				    ref_load(w, dt, n * K + j), v[j % 32]);
			s = v[0];
			for (l = 1; l < 32; l++)
				s += v[l];
			ref_store(y, dt, m * N + n, s);
		}
}

typedef struct {
	void *x, *w, *y, *want;
} bufs_t;

static void bufs_init(bufs_t *b, ks_dtype_t dt, int64_t M, int64_t N,
    int64_t K, uint64_t seed)
{
	size_t es = ks_dtype_size(dt);

	b->x = malloc(es * (size_t)(M * K));
	b->w = malloc(es * (size_t)(N * K));
	b->y = malloc(es * (size_t)(M * N));
	b->want = malloc(es * (size_t)(M * N));
	ref_fill(b->x, dt, M * K, seed);
	ref_fill(b->w, dt, N * K, seed + 1);
	memset(b->y, 0xff, es * (size_t)(M * N));   /* NaN, never a result */
}

static void bufs_close(bufs_t *b)
{
	free(b->x);
	free(b->w);
	free(b->y);
	free(b->want);
}

/* Runs SH, checks bitwise against the canonical reference and against
 * double precision; returns the variant. */
static const char *check_shape(const shape_t *sh, ks_dtype_t dt)
{
	bufs_t b;
	const char *variant;
	int64_t bad;

	bufs_init(&b, dt, sh->M, sh->N, sh->K, (uint64_t)(sh->M * 131 +
	    sh->N * 7 + sh->K));
	variant = run_gemm(sh, dt, b.x, b.w, b.y);
	ref_gemm(b.x, b.w, b.want, dt, sh->M, sh->N, sh->K);
	bad = bitwise_diff(b.y, b.want, dt, sh->M * sh->N);
	cr_assert_eq(bad, 0, "%s %s M=%lld N=%lld K=%lld: %lld outputs off "
	    "the canonical reference", ks_dtype_name(dt), variant,
	    (long long)sh->M, (long long)sh->N, (long long)sh->K,
	    (long long)bad);
	check_f64(b.x, b.w, b.y, dt, sh->M, sh->N, sh->K);
	bufs_close(&b);
	return variant;
}

static const ks_dtype_t dtypes[] = {
	KS_DTYPE_F32, KS_DTYPE_F16, KS_DTYPE_BF16,
};

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(gemm, .init = setup, .timeout = 300);

/* ---- the cases ---- */

Test(gemm, gemv_m1_4096_is_bitwise_canonical)
{
	shape_t sh = { 1, 4096, 4096, 0, 0, 0 };
	size_t i;

	for (i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
		cr_assert_str_eq(check_shape(&sh, dtypes[i]), "gemv_m1");
}

Test(gemm, general_at_m1_equals_gemv_m1)
{
	shape_t m1 = { 1, 1000, 1030, 0, 0, 0 }, gen = m1;
	size_t i, es;
	bufs_t b;

	gen.dyn_m = 1;                  /* M only known at launch */
	for (i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++) {
		bufs_init(&b, dtypes[i], 1, m1.N, m1.K, 5);
		es = ks_dtype_size(dtypes[i]);
		cr_assert_str_eq(run_gemm(&m1, dtypes[i], b.x, b.w, b.want),
		    "gemv_m1");
		cr_assert_str_eq(run_gemm(&gen, dtypes[i], b.x, b.w, b.y),
		    "general");
		cr_assert_eq(memcmp(b.y, b.want, es * (size_t)m1.N), 0,
		    "%s: general differs from gemv_m1 at M=1",
		    ks_dtype_name(dtypes[i]));
		bufs_close(&b);
	}
}

Test(gemm, general_shapes_are_bitwise_canonical)
{
	static const shape_t shapes[] = {
		{ 2, 256, 4096, 0, 0, 0 },      /* small_m width */
		{ 4, 100, 300, 0, 0, 0 },       /* just past small_m */
		{ 7, 100, 300, 0, 0, 0 },       /* a tile and 3 rows */
		{ 3, 50, 4100, 0, 0, 0 },       /* K not a multiple of 32 */
		{ 4, 1, 777, 0, 0, 0 },         /* N = 1 */
		{ 3, 5, 64, 0, 0, 0 },          /* N = 5: a partial row block */
		{ 1, 5, 4100, 0, 0, 0 },        /* gemv_m1 with both tails */
		{ 5, 37, 1000, 1, 1, 1 },       /* all dynamic */
		{ 2, 9, 31, 0, 1, 0 },          /* K < 32, N dynamic */
	};
	size_t i, d;

	for (i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
		for (d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++)
			check_shape(&shapes[i], dtypes[d]);
}

/* blocked (constant M >= 8): partial macro tiles in M and N, a partial
 * band of macro rows, k blocks with and without a tail chunk, K below one
 * chunk, N and K dynamic; each bitwise the canonical reference. */
Test(gemm, blocked_shapes_are_bitwise_canonical)
{
	static const shape_t shapes[] = {
		{ 8, 8, 32, 0, 0, 0 },          /* one macro tile, one chunk */
		{ 16, 33, 4100, 0, 0, 0 },      /* K tail; N one past a tile */
		{ 40, 100, 300, 0, 0, 0 },      /* one partial band of 5 */
		{ 136, 20, 600, 0, 0, 0 },      /* bands of 8, 8 and 1 */
		{ 9, 37, 1000, 0, 1, 1 },       /* 1 row past a tile; N, K dyn */
		{ 64, 5, 31, 0, 0, 0 },         /* K < 32: the tail alone */
	};
	size_t i, d;

	for (i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
		for (d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++)
			cr_assert_str_eq(check_shape(&shapes[i], dtypes[d]),
			    "blocked", "M=%lld", (long long)shapes[i].M);
}

/* The bitwise checker is not vacuous: a reference that sums the lanes in
 * the wrong order is reported, on the very data the tests use. */
Test(gemm, checker_catches_a_wrong_reduction_order)
{
	shape_t sh = { 1, 4096, 4096, 0, 0, 0 };
	size_t i;
	bufs_t b;

	for (i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++) {
		bufs_init(&b, dtypes[i], 1, sh.N, sh.K, (uint64_t)(131 +
		    sh.N * 7 + sh.K));
		run_gemm(&sh, dtypes[i], b.x, b.w, b.y);
		ref_gemm_sequential(b.x, b.w, b.want, dtypes[i], 1, sh.N,
		    sh.K);
		cr_assert_gt(bitwise_diff(b.y, b.want, dtypes[i], sh.N), 0,
		    "%s: sequential lane sum not told apart",
		    ks_dtype_name(dtypes[i]));
		bufs_close(&b);
	}
}
