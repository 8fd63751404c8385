/*
 * jit: the cpu backend (libgccjit).  Small kernels built with the IR
 * builders are compiled, loaded from memory and run; results are compared
 * bit for bit with plain-C references written here, independently of the
 * backend's own conversion code.  Each checker is shown to fail once on a
 * planted wrong reference, so a pass means something.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <libgccjit.h>

#include "../jit/jit.h"
#include "gpu.h"
#include "jitkit.h"
#include "../ref/ref.h"

/* ---- plain-C references: storage conversions ---- */

static uint32_t ref_f16_load(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
	int ex = -14;

	if (e == 0x1f)
		return sign | 0x7f800000u | (m << 13);
	if (e != 0)
		return sign | ((e - 15 + 127) << 23) | (m << 13);
	if (m == 0)
		return sign;
	while (!(m & 0x400)) {          /* normalize the subnormal */
		m <<= 1;
		ex--;
	}
	return sign | ((uint32_t)(ex + 127) << 23) | ((m & 0x3ff) << 13);
}

static uint32_t ref_bf16_load(uint16_t h)
{
	return (uint32_t)h << 16;
}

/* Round Q + R / 2^SHIFT to nearest, ties to even (SHIFT 1..63). */
static uint64_t rne(uint64_t v, int shift)
{
	uint64_t q, r, half;

	if (shift >= 64)
		return 0;
	q = v >> shift;
	r = v & ((1ull << shift) - 1);
	half = 1ull << (shift - 1);
	if (r > half || (r == half && (q & 1)))
		q++;
	return q;
}

/* f32 -> f16 by integer arithmetic on the exact value m * 2^(e-150). */
static uint16_t ref_f16_store(uint32_t u)
{
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t a = u & 0x7fffffff, e = a >> 23, m = a & 0x7fffff;
	uint64_t q;

	if (a > 0x7f800000)
		return sign | 0x7e00 | ((a >> 13) & 0x3ff);
	if (a == 0x7f800000)
		return sign | 0x7c00;
	if (e == 0)
		return sign;            /* below 2^-126: rounds to zero */
	m |= 0x800000;
	if (e >= 113) {                 /* f16 normal range or overflow */
		q = rne(m, 13);         /* 11 significant bits, maybe 2048 */
		if (q == 0x800) {
			q = 0x400;
			e++;
		}
		if (e - 112 >= 31)
			return sign | 0x7c00;
		return (uint16_t)(sign | ((e - 112) << 10) | (q & 0x3ff));
	}
	/* f16 subnormal: units of 2^-24; value / 2^-24 = m * 2^(e-126). */
	q = rne(m, (int)(126 - e));
	return (uint16_t)(sign | q);    /* q == 0x400 is the min normal */
}

static uint16_t ref_bf16_store(uint32_t u)
{
	if ((u & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((u >> 16) | 0x40);
	return (uint16_t)rne(u, 16);    /* a carry is the correct rounding */
}

/* ---- conversion kernels ---- */

/* dst[i] = src[i] through f32, i = group * 32 + lane, grid = n / 32. */
static ks_ir_kernel_t *copy_kernel(ks_dtype_t from, ks_dtype_t to)
{
	ks_ir_kernel_t *k = ks_ir_new("copy", "t", 32);
	int src = ks_ir_buffer(k, "src", from, KS_ACCESS_READ);
	int dst = ks_ir_buffer(k, "dst", to, KS_ACCESS_WRITE);
	int n = ks_ir_scalar(k, "n", KS_TY_I64);
	ks_stmt_t *lanes = ks_s_lanes(k), *blk = lanes->body;

	k->grid = BIN(DIV, P(n), I(32));
	ADD(ks_s_store(k, dst, gidx(k), ks_x_load(k, src, gidx(k))));
	ks_s_append(k, k->body, lanes);
	return k;
}

static void run_copy(ks_dtype_t from, ks_dtype_t to, const void *src,
    void *dst, int64_t n)
{
	ks_ir_kernel_t *k = copy_kernel(from, to);
	loaded_t l;
	void *params[3] = { &src, &dst, &n };

	cr_assert_eq(n % 32, 0);
	compile_load(k, &l);
	l.fn(params, 0, (uint64_t)n / 32);
	ks_jit_cpu_unload(l.lib);
	ks_ir_free(k);
}

static void check_load_all_patterns(ks_dtype_t dt)
{
	uint16_t *src = malloc(65536 * 2);
	uint32_t *dst = malloc(65536 * 4), want;
	size_t bad = 0, i;

	for (i = 0; i < 65536; i++)
		src[i] = (uint16_t)i;
	memset(dst, 0xa5, 65536 * 4);
	run_copy(dt, KS_DTYPE_F32, src, dst, 65536);
	for (i = 0; i < 65536; i++) {
		want = dt == KS_DTYPE_F16 ? ref_f16_load((uint16_t)i) :
		    ref_bf16_load((uint16_t)i);
		if (dst[i] != want && bad++ < 5)
			cr_log_error("%s 0x%04zx: got 0x%08x want 0x%08x",
			    ks_dtype_name(dt), i, dst[i], want);
	}
	cr_assert_eq(bad, 0, "%zu of 65536 patterns wrong", bad);
	free(src);
	free(dst);
}

Test(jit, load_f16_all_patterns_exact)
{
	check_load_all_patterns(KS_DTYPE_F16);
}

Test(jit, load_bf16_all_patterns_exact)
{
	check_load_all_patterns(KS_DTYPE_BF16);
}

/*
 * f32 patterns for the store conversions: every upper half with a set of
 * low halves (bf16 ties and their neighbours), every f16 value, the
 * midpoints to its successor (f16 ties, subnormal ones and the overflow
 * boundary 65520 included) and their f32 neighbours, then random patterns.
 * Returns the count; the array has room for it (padded to 32).
 */
static uint32_t *store_patterns(size_t *count)
{
	static const uint32_t lows[] = {
		0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x0fff,
		0x1000, 0x1001, 0x1fff, 0x2000, 0x3000,
	};
	size_t cap = 65536 * 12 + 31744 * 2 * 5 + (1 << 20) + 64, n = 0, i;
	uint32_t *p = malloc(cap * 4), h, lo, hi, mid;
	uint64_t s = 42;

	for (i = 0; i < 65536; i++)
		for (h = 0; h < sizeof(lows) / sizeof(lows[0]); h++)
			p[n++] = (uint32_t)i << 16 | lows[h];
	for (h = 0; h < 0x7c00; h++) {
		lo = ref_f16_load((uint16_t)h);
		hi = h == 0x7bff ? 0x47800000 : ref_f16_load((uint16_t)(h + 1));
		mid = ref_f32_bits((ref_bits_f32(lo) + ref_bits_f32(hi)) / 2);  /* exact in f32 */
		for (i = 0; i < 2; i++) {
			uint32_t sg = i ? 0x80000000u : 0;

			p[n++] = sg | lo;
			p[n++] = sg | mid;
			p[n++] = sg | (mid - 1);
			p[n++] = sg | (mid + 1);
			p[n++] = sg | (lo + 1);
		}
	}
	for (i = 0; i < (1 << 20); i++)
		p[n++] = (uint32_t)rng(&s);
	while (n % 32)
		p[n++] = 0x7fc00001;
	*count = n;
	return p;
}

static void check_store(ks_dtype_t dt, int plant)
{
	size_t n, i, bad = 0;
	uint32_t *src = store_patterns(&n);
	uint16_t *dst = malloc(n * 2), want;

	run_copy(KS_DTYPE_F32, dt, src, dst, (int64_t)n);
	for (i = 0; i < n; i++) {
		want = dt == KS_DTYPE_F16 ? ref_f16_store(src[i]) :
		    ref_bf16_store(src[i]);
		if (plant)              /* truncation instead of RNE */
			want = dt == KS_DTYPE_BF16 ? src[i] >> 16 :
			    ref_f16_store(src[i] & ~0x1fffu);
		if (dst[i] != want && bad++ < 5 && !plant)
			cr_log_error("%s 0x%08x: got 0x%04x want 0x%04x",
			    ks_dtype_name(dt), src[i], dst[i], want);
	}
	if (plant)
		cr_assert_gt(bad, 0, "the planted reference was not caught");
	else
		cr_assert_eq(bad, 0, "%zu of %zu values wrong", bad, n);
	free(src);
	free(dst);
}

Test(jit, store_f16_rounds_to_nearest_even)
{
	check_store(KS_DTYPE_F16, 0);
}

Test(jit, store_bf16_rounds_to_nearest_even)
{
	check_store(KS_DTYPE_BF16, 0);
}

Test(jit, store_checker_catches_truncation)
{
	check_store(KS_DTYPE_BF16, 1);
	check_store(KS_DTYPE_F16, 1);
}

Test(jit, store_f32_keeps_every_pattern)
{
	size_t n;
	uint32_t *src = store_patterns(&n), *dst = malloc(n * 4);

	run_copy(KS_DTYPE_F32, KS_DTYPE_F32, src, dst, (int64_t)n);
	cr_assert_eq(memcmp(src, dst, n * 4), 0);
	free(src);
	free(dst);
}

/* ---- reductions ---- */

/* y[g] = reduce(op, v) with v[lane] = x[g * nlanes + lane]. */
static ks_ir_kernel_t *reduce_kernel(int nlanes, ks_redop_t op)
{
	ks_ir_kernel_t *k = ks_ir_new("red", "t", nlanes);
	int x = ks_ir_buffer(k, "x", KS_DTYPE_F32, KS_ACCESS_READ);
	int y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int g = ks_ir_scalar(k, "groups", KS_TY_I64);
	int v = ks_ir_var(k, "v", KS_TY_F32, KS_VAR_LANE);
	ks_stmt_t *lanes = ks_s_lanes(k), *blk = lanes->body;

	k->grid = P(g);
	ADD(ks_s_assign(k, v, ks_x_load(k, x, gidx(k))));
	blk = k->body;
	ADD(ks_s_decl(k, v, NULL));
	ADD(lanes);
	ADD(ks_s_store(k, y, ks_x_group(k), ks_x_reduce(k, op, v)));
	return k;
}

static float ref_tree(const float *v, int n)
{
	float t[64];
	int s, l;

	memcpy(t, v, (size_t)n * sizeof(float));
	for (s = n / 2; s >= 1; s /= 2)
		for (l = 0; l < s; l++)
			t[l] = t[l] + t[l + s];
	return t[0];
}

/* Planted wrong orders. */
static float ref_sequential(const float *v, int n)
{
	float s = v[0];
	int l;

	for (l = 1; l < n; l++)
		s += v[l];
	return s;
}

static float ref_tree_reversed(const float *v, int n)
{
	float t[64];
	int s, l;

	memcpy(t, v, (size_t)n * sizeof(float));
	for (s = 1; s < n; s *= 2)
		for (l = 0; l < n; l += 2 * s)
			t[l] = t[l] + t[l + s];
	return t[0];
}

/* Values over 60 binades with random signs: every order rounds
 * differently somewhere. */
static void adversarial(float *x, size_t n, uint64_t seed)
{
	size_t i;

	for (i = 0; i < n; i++) {
		uint64_t r = rng(&seed);

		x[i] = ldexpf(1.0f + (float)(r & 0xffffff) / 16777216.0f,
		    (int)((r >> 24) % 60) - 30) * ((r >> 40) & 1 ? -1 : 1);
	}
}

static void check_reduce_sum(int nlanes)
{
	enum { G = 1000 };
	int64_t groups = G;
	float *x = malloc(sizeof(float) * G * 64), y[G], want[G], seq[G];
	float rev[G];
	ks_ir_kernel_t *k = reduce_kernel(nlanes, KS_RED_SUM);
	void *params[3] = { &x, NULL, &groups };
	float *yp = y;
	loaded_t l;
	int g;

	params[1] = &yp;
	adversarial(x, (size_t)G * nlanes, 7);
	compile_load(k, &l);
	l.fn(params, 0, G);
	for (g = 0; g < G; g++) {
		want[g] = ref_tree(x + g * nlanes, nlanes);
		seq[g] = ref_sequential(x + g * nlanes, nlanes);
		rev[g] = ref_tree_reversed(x + g * nlanes, nlanes);
	}
	cr_assert_eq(mismatches(y, want, G), 0, "nlanes %d: %zu groups off "
	    "the canonical tree", nlanes, mismatches(y, want, G));
	if (nlanes > 2) {
		cr_assert_gt(mismatches(y, seq, G), 0,
		    "the data cannot tell a sequential sum from the tree");
		cr_assert_gt(mismatches(y, rev, G), 0,
		    "the data cannot tell a reversed tree from the tree");
	}
	ks_jit_cpu_unload(l.lib);
	ks_ir_free(k);
	free(x);
}

Test(jit, reduce_sum_is_the_canonical_tree)
{
	check_reduce_sum(32);
}

Test(jit, reduce_sum_tree_for_other_power_of_two_lanes)
{
	check_reduce_sum(8);
	check_reduce_sum(2);
	check_reduce_sum(1);
}

/* fmaxf semantics with -0 < +0 (the backend's documented choice). */
static float ref_fmax(float a, float b)
{
	if (a != a)
		return b;
	if (b != b)
		return a;
	if (a == b)
		return ref_bits_f32(ref_f32_bits(a) & ref_f32_bits(b));
	return a > b ? a : b;
}

static float ref_fmin(float a, float b)
{
	if (a != a)
		return b;
	if (b != b)
		return a;
	if (a == b)
		return ref_bits_f32(ref_f32_bits(a) | ref_f32_bits(b));
	return a < b ? a : b;
}

Test(jit, reduce_max_tree_ignores_nan_and_orders_zeros)
{
	enum { G = 256 };
	int64_t groups = G;
	float x[G * 32], y[G], want[G], t[32], *xp = x, *yp = y;
	ks_ir_kernel_t *k = reduce_kernel(32, KS_RED_MAX);
	void *params[3] = { &xp, &yp, &groups };
	static const float special[] = { -0.0f, 0.0f, NAN, -INFINITY };
	uint64_t s = 3;
	loaded_t l;
	int g, i, sp;

	adversarial(x, G * 32, 11);
	for (i = 0; i < G * 32; i++) {
		uint64_t r = rng(&s);

		if (r % 4 == 0)
			x[i] = special[(r >> 8) % 4];
	}
	for (i = 0; i < 32; i++)       /* one group of NaN only */
		x[i] = NAN;
	compile_load(k, &l);
	l.fn(params, 0, G);
	for (g = 0; g < G; g++) {
		memcpy(t, x + g * 32, sizeof(t));
		for (sp = 16; sp >= 1; sp /= 2)
			for (i = 0; i < sp; i++)
				t[i] = ref_fmax(t[i], t[i + sp]);
		want[g] = t[0];
	}
	cr_assert(y[0] != y[0], "max of NaNs is NaN");
	for (g = 1; g < G; g++)
		cr_assert_eq(ref_f32_bits(y[g]), ref_f32_bits(want[g]), "group %d", g);
	ks_jit_cpu_unload(l.lib);
	ks_ir_free(k);
}

/* ---- fma and contraction ---- */

/* y1 = fma(a, b, c); y2 = a * b + c (MUL then ADD), in LANES. */
static ks_ir_kernel_t *fma_kernel(void)
{
	ks_ir_kernel_t *k = ks_ir_new("fma", "t", 32);
	int a = ks_ir_buffer(k, "a", KS_DTYPE_F32, KS_ACCESS_READ);
	int b = ks_ir_buffer(k, "b", KS_DTYPE_F32, KS_ACCESS_READ);
	int c = ks_ir_buffer(k, "c", KS_DTYPE_F32, KS_ACCESS_READ);
	int y1 = ks_ir_buffer(k, "y1", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int y2 = ks_ir_buffer(k, "y2", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int n = ks_ir_scalar(k, "n", KS_TY_I64);
	ks_stmt_t *lanes = ks_s_lanes(k), *blk = lanes->body;

	k->grid = BIN(DIV, P(n), I(32));
	ADD(ks_s_store(k, y1, gidx(k), ks_x_fma(k, ks_x_load(k, a, gidx(k)),
	    ks_x_load(k, b, gidx(k)), ks_x_load(k, c, gidx(k)))));
	ADD(ks_s_store(k, y2, gidx(k), BIN(ADD, BIN(MUL,
	    ks_x_load(k, a, gidx(k)), ks_x_load(k, b, gidx(k))),
	    ks_x_load(k, c, gidx(k)))));
	ks_s_append(k, k->body, lanes);
	return k;
}

/* Separate roundings, whatever the compiler of this test would do. */
static float ref_mul_add(float a, float b, float c)
{
	volatile float p = a * b;

	return p + c;
}

Test(jit, fma_is_fused_and_mul_add_is_not_contracted)
{
	enum { N = 4096 };
	int64_t n = N;
	float a[N], b[N], c[N], y1[N], y2[N], w1[N], w2[N];
	float *pa = a, *pb = b, *pc = c, *p1 = y1, *p2 = y2;
	void *params[6] = { &pa, &pb, &pc, &p1, &p2, &n };
	ks_ir_kernel_t *k = fma_kernel();
	uint64_t s = 5;
	loaded_t l;
	int i;

	for (i = 0; i < N; i++) {
		a[i] = (float)((double)(rng(&s) >> 11) / 9007199254740992.0);
		b[i] = (float)((double)(rng(&s) >> 11) / 9007199254740992.0);
		c[i] = -a[i] * b[i];    /* exposes the rounding of a*b */
	}
	a[0] = b[0] = 1.0f + 0x1p-12f;  /* a*b = 1 + 2^-11 + 2^-24 */
	c[0] = -(1.0f + 0x1p-11f);
	compile_load(k, &l);
	l.fn(params, 0, N / 32);
	for (i = 0; i < N; i++) {
		w1[i] = fmaf(a[i], b[i], c[i]);
		w2[i] = ref_mul_add(a[i], b[i], c[i]);
	}
	cr_assert_eq(ref_f32_bits(y1[0]), ref_f32_bits(0x1p-24f));
	cr_assert_eq(ref_f32_bits(y2[0]), ref_f32_bits(0.0f));
	cr_assert_eq(mismatches(y1, w1, N), 0, "KS_X_FMA is not one rounding");
	cr_assert_eq(mismatches(y2, w2, N), 0, "a*b+c was contracted");
	cr_assert_gt(mismatches(w1, w2, N), N / 2,
	    "the data does not tell fma from mul+add");
	ks_jit_cpu_unload(l.lib);
	ks_ir_free(k);
}

/* ---- unary math ---- */

/* Runs gpu_un_kernel(OP) over X into Y (N elements) on the cpu backend. */
static void run_un(ks_unop_t op, const float *x, float *y, int64_t n)
{
	ks_ir_kernel_t *k = gpu_un_kernel(op);
	const float *px = x;
	float *py = y;
	void *params[3] = { &px, &py, &n };
	char err[512];
	loaded_t l;

	cr_assert_eq(ks_ir_verify(k, err, sizeof err), KS_OK, "%s", err);
	compile_load(k, &l);
	l.fn(params, 0, n / 32);
	ks_jit_cpu_unload(l.lib);
	ks_ir_free(k);
}

/* sqrt is correctly rounded: bitwise sqrtf (a correctly rounded libm
 * function by IEEE 754) over zeros, subnormals, negatives (NaN), Inf, NaN
 * and random patterns; neg and abs are exact sign-bit operations. */
Test(jit, sqrt_neg_abs_are_bitwise_the_c_reference)
{
	enum { N = 1 << 16 };
	float *x = malloc(N * 4), *y = malloc(N * 4);
	int i;

	gpu_un_inputs(x, N, 11);
	run_un(KS_UN_SQRT, x, y, N);
	for (i = 0; i < N; i++) {
		volatile float xi = x[i];
		float want = sqrtf(xi);

		cr_assert(ref_f32_bits(y[i]) == ref_f32_bits(want) || (isnan(y[i]) &&
		    isnan(want)), "sqrt(0x%08x) = 0x%08x, want 0x%08x",
		    ref_f32_bits(x[i]), ref_f32_bits(y[i]), ref_f32_bits(want));
	}
	cr_assert(isnan(y[3]) && ref_f32_bits(y[1]) == 0x80000000u &&
	    ref_f32_bits(y[11]) == 0x7f800000u);
	run_un(KS_UN_NEG, x, y, N);
	for (i = 0; i < N; i++)
		cr_assert_eq(ref_f32_bits(y[i]), ref_f32_bits(x[i]) ^ 0x80000000u,
		    "neg(0x%08x) = 0x%08x", ref_f32_bits(x[i]), ref_f32_bits(y[i]));
	run_un(KS_UN_ABS, x, y, N);
	for (i = 0; i < N; i++)
		cr_assert_eq(ref_f32_bits(y[i]), ref_f32_bits(x[i]) & 0x7fffffffu,
		    "abs(0x%08x) = 0x%08x", ref_f32_bits(x[i]), ref_f32_bits(y[i]));
	free(x);
	free(y);
}

/* exp is kspec's own (docs/ir.md): bitwise equal to ref/ref.h's
 * ref_expf, within 1.01 ulp of the double exp (over a sweep of every 7th
 * f32 pattern the worst is 1.008), Inf past the overflow bound, 0 far
 * below, NaN for NaN. */
Test(jit, exp_is_bitwise_ref_expf_and_within_1_01_ulp_of_double_exp)
{
	enum { N = 1 << 16 };
	float *x = malloc(N * 4), *y = malloc(N * 4);
	double worst = 0.0;
	int i;

	gpu_un_inputs(x, N, 12);
	for (i = 23; i < N; i += 2)     /* half of them in exp's range */
		x[i] = (float)((double)(gpu_rng(&(uint64_t){ (uint64_t)i }) >>
		    11) / 9007199254740992.0 * 200.0 - 100.0);
	run_un(KS_UN_EXP, x, y, N);
	for (i = 0; i < N; i++) {
		double d = gpu_ulps(y[i], exp((double)x[i]));
		float want = ref_expf(x[i]);

		cr_assert(ref_f32_bits(y[i]) == ref_f32_bits(want) || (isnan(y[i]) &&
		    isnan(want)), "exp(%a) = %a, ref_expf %a", (double)x[i],
		    (double)y[i], (double)want);
		cr_assert(d <= 1.01, "exp(%a) = %a, %.3f ulp", (double)x[i],
		    (double)y[i], d);
		if (d > worst)
			worst = d;
	}
	cr_assert(y[0] == 1.0f && isinf(y[11]) && y[12] == 0.0f);
	cr_assert_gt(worst, 0.0, "exp was exact everywhere: not tested");
	free(x);
	free(y);
}

/* ---- i32 ---- */

/* i32 buffers load and store int32; casts i32 <-> i64 <-> f32 round and
 * wrap as C does, over the int32 extremes and the f32 rounding ties. */
Test(jit, i32_buffers_and_casts_equal_the_c_reference)
{
	enum { N = 4096 };
	int32_t *P = malloc(N * 4), *yi = malloc(N * 4), *zi = malloc(N * 4);
	float *X = malloc(N * 4), *yf = malloc(N * 4), *ye = malloc(N * 4);
	int64_t n = N;
	void *params[7] = { &P, &X, &yf, &yi, &zi, &ye, &n };
	ks_ir_kernel_t *k = gpu_i32_kernel();
	char err[512];
	loaded_t l;

	cr_assert_eq(ks_ir_verify(k, err, sizeof err), KS_OK, "%s", err);
	gpu_i32_inputs(P, X, N, 3);
	compile_load(k, &l);
	l.fn(params, 0, N / 32);
	gpu_i32_check("cpu", P, X, yf, yi, zi, ye, N);
	cr_assert_eq(yf[6], 16777216.0f);       /* 2^24 + 1: tie to even */
	cr_assert_eq(yi[3], 0x7ffffffe);  /* 3 * INT32_MAX + 1, wrapped */
	ks_jit_cpu_unload(l.lib);
	ks_ir_free(k);
	free(P); free(yi); free(zi); free(X); free(yf); free(ye);
}

/* Byte buffers, f16bits and the bit operators: every byte, every f16
 * pattern, nibbles, 6-bit fields and shifts equal plain C. */
Test(jit, byte_buffers_and_bit_operators_equal_the_c_reference)
{
	enum { N = 65536 };
	uint8_t *B = malloc(N);
	int32_t *o[5];
	float *yh = malloc(N * 4);
	int64_t n = N;
	void *params[8];
	ks_ir_kernel_t *k = gpu_bytes_kernel();
	char err[512];
	loaded_t l;
	int i;

	for (i = 0; i < 5; i++)
		o[i] = calloc(N, 4);
	params[0] = &B;
	params[1] = &o[0];
	params[2] = &yh;
	for (i = 1; i < 5; i++)
		params[2 + i] = &o[i];
	params[7] = &n;
	cr_assert_eq(ks_ir_verify(k, err, sizeof err), KS_OK, "%s", err);
	gpu_bytes_in(B, N);
	compile_load(k, &l);
	l.fn(params, 0, N / 32);
	cr_assert_eq(gpu_bytes_bad("cpu", B, o[0], yh, o[1], o[2], o[3], o[4],
	    N), 0);
	ks_jit_cpu_unload(l.lib);
	ks_ir_free(k);
	/* The checker catches the classic decoder bugs: the two bytes of an
	 * f16 swapped, and the nibbles swapped. */
	for (i = 0; i < N; i++) {
		uint16_t h = (uint16_t)(B[i] << 8 | B[i >> 8]);

		yh[i] = ref_bits_f32(gpu_f16_bits(h));
		o[1][i] = ((B[i] & 15) - 8) * ((B[i] >> 4) + 1);
	}
	cr_assert_gt(gpu_bytes_bad(NULL, B, o[0], yh, o[1], o[2], o[3],
	    o[4], N), N);
	for (i = 0; i < 5; i++)
		free(o[i]);
	free(B);
	free(yh);
}

/* ---- unroll and dce keep the bits ---- */

Test(jit, unroll_and_dce_keep_results_bitwise)
{
	enum { G = 64, NX = G * 4 * 3 * 32 };
	float *x = malloc(NX * 4), w[96], y0[G], y1[G];
	float *px = x, *pw = w, *py;
	int64_t g = G;
	void *params[4] = { &px, &pw, &py, &g };
	ks_ir_kernel_t *k0 = gpu_unroll_kernel(), *k1 = gpu_unroll_kernel();
	char err[512];
	loaded_t l0, l1;
	ks_buf_t b;

	gpu_adversarial(x, NX, 7);
	gpu_adversarial(w, 96, 8);
	cr_assert_eq(ks_ir_verify(k0, err, sizeof err), KS_OK, "%s", err);
	cr_assert_eq(ks_pass_run(k1, err, sizeof err), KS_OK, "%s", err);
	ks_buf_init(&b);
	ks_ir_print(k1, &b);
	cr_assert(strstr(b.data, "for ") == NULL, "not unrolled:\n%s", b.data);
	cr_assert(strstr(b.data, "dead") == NULL ||
	    strstr(b.data, "decl dead") == NULL, "dead decl kept:\n%s", b.data);
	ks_buf_close(&b);
	compile_load(k0, &l0);
	compile_load(k1, &l1);
	py = y0;
	l0.fn(params, 0, G);
	py = y1;
	l1.fn(params, 0, G);
	cr_assert_eq(mismatches(y0, y1, G), 0, "unrolled kernel differs");
	ks_jit_cpu_unload(l0.lib);
	ks_jit_cpu_unload(l1.lib);
	ks_ir_free(k0);
	ks_ir_free(k1);
	free(x);
}

/*
 * y[i] = x[i] per group of 32, with a prefetch of x 64 elements ahead
 * (clamped to the last): a hint that changes no value, lowered to a
 * prefetch instruction on the cpu and left out of the GPU dialects.
 */
Test(jit, prefetch_is_a_hint)
{
	enum { G = 8, N = G * 32 };
	ks_ir_kernel_t *k = ks_ir_new("pf", "t", 32);
	int x = ks_ir_buffer(k, "x", KS_DTYPE_F32, KS_ACCESS_READ);
	int y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int n = ks_ir_scalar(k, "n", KS_TY_I64);
	ks_stmt_t *l = ks_s_lanes(k);
	float xs[N], ys[N];
	float *px = xs, *py = ys;
	int64_t nn = N;
	void *params[3] = { &px, &py, &nn };
	char err[512];
	loaded_t ld;
	ks_buf_t b;
	int i;

	k->grid = GBIN(DIV, GP(n), GI(32));
	ks_s_append(k, k->body, ks_s_prefetch(k, x, GBIN(MIN, GBIN(ADD,
	    GBIN(MUL, ks_x_group(k), GI(32)), GI(64)), GBIN(SUB, GP(n),
	    GI(1)))));
	ks_s_append(k, k->body, ks_s_prefetch_l2(k, x, GBIN(MIN, GBIN(ADD,
	    GBIN(MUL, ks_x_group(k), GI(32)), GI(256)), GBIN(SUB, GP(n),
	    GI(1)))));
	ks_s_append(k, l->body, ks_s_store(k, y, gpu_gidx(k),
	    ks_x_load(k, x, gpu_gidx(k))));
	ks_s_append(k, k->body, l);
	cr_assert_eq(ks_ir_verify(k, err, sizeof err), KS_OK, "%s", err);
	gpu_adversarial(xs, N, 3);
	memset(ys, 0, sizeof ys);
	compile_load(k, &ld);
	ld.fn(params, 0, G);
	cr_assert_eq(mismatches(xs, ys, N), 0, "a prefetch changed a value");
	ks_jit_cpu_unload(ld.lib);
	ks_buf_init(&b);
	cr_assert_eq(ks_jit_cpu_assembly(k, "x86-64-v4", &b, err,
	    sizeof(err)), KS_OK, "%s", err);
	cr_assert(strstr(b.data, "prefetcht0") != NULL, "no prefetch:\n%s",
	    b.data);
	cr_assert(strstr(b.data, "prefetcht1") != NULL,
	    "no second-level prefetch:\n%s", b.data);
	ks_buf_close(&b);
	for (i = 0; i < 2; i++) {
		const ks_backend_t *be = i ? &ks_backend_cuda :
		    &ks_backend_opencl;

		ks_buf_init(&b);
		cr_assert_eq(be->source(k, &b, err, sizeof err), KS_OK, "%s",
		    err);
		cr_assert(strstr(b.data, "prefetch") == NULL,
		    "%s emits the prefetch:\n%s", be->name, b.data);
		cr_assert(strstr(b.data, "x[") != NULL, "%s", b.data);
		ks_buf_close(&b);
	}
	ks_ir_free(k);
}

/* ---- local arrays ---- */

Test(jit, local_arrays_pass_values_between_lanes_across_barriers)
{
	enum { N = 2048 };
	float *x = malloc(N * 4), *y = calloc(N, 4);
	int64_t n = N;
	void *params[3] = { &x, &y, &n };
	ks_ir_kernel_t *k = gpu_local_kernel();
	char err[512];
	loaded_t l;

	cr_assert_eq(ks_pass_run(k, err, sizeof err), KS_OK, "%s", err);
	gpu_adversarial(x, N, 13);
	compile_load(k, &l);
	l.fn(params, 0, N / 32);
	gpu_local_check("cpu", x, y, N);
	ks_jit_cpu_unload(l.lib);
	ks_ir_free(k);
	free(x);
	free(y);
}

/* ---- a gemv, for partitions, targets and determinism ---- */

/*
 * y[n] = sum_k x[k] W[n*K + k], canonical order, one output per group;
 * full chunks of 32 then a guarded tail, dtype DT, N and K dynamic.
 */
static ks_ir_kernel_t *gemv_kernel(ks_dtype_t dt)
{
	ks_ir_kernel_t *k = ks_ir_new("gemv", "t", 32);
	int x = ks_ir_buffer(k, "x", dt, KS_ACCESS_READ);
	int W = ks_ir_buffer(k, "W", dt, KS_ACCESS_READ);
	int y = ks_ir_buffer(k, "y", dt, KS_ACCESS_WRITE);
	int N = ks_ir_scalar(k, "N", KS_TY_I64);
	int K = ks_ir_scalar(k, "K", KS_TY_I64);
	int acc = ks_ir_var(k, "acc", KS_TY_F32, KS_VAR_LANE);
	int kb = ks_ir_var(k, "kb", KS_TY_I64, KS_VAR_UNIFORM);
	int j = ks_ir_var(k, "j", KS_TY_I64, KS_VAR_LANE);
	ks_stmt_t *blk = k->body, *f, *ln, *iff;

	k->grid = P(N);
	ADD(ks_s_decl(k, acc, F(0.0f)));
	f = ks_s_for(k, kb, I(0), P(K), 32);
	ADD(f);
	ln = ks_s_lanes(k);
	ks_s_append(k, f->body, ln);
	blk = ln->body;
	ADD(ks_s_decl(k, j, BIN(ADD, V(kb), ks_x_lane(k))));
	iff = ks_s_if(k, BIN(LT, V(j), P(K)));
	ADD(iff);
	blk = iff->body;
	ADD(ks_s_assign(k, acc, ks_x_fma(k, ks_x_load(k, x, V(j)),
	    ks_x_load(k, W, BIN(ADD, BIN(MUL, ks_x_group(k), P(K)), V(j))),
	    V(acc))));
	blk = k->body;
	ADD(ks_s_store(k, y, ks_x_group(k), ks_x_reduce(k, KS_RED_SUM, acc)));
	return k;
}

static void ref_gemv(const float *x, const float *W, float *y, int64_t N,
    int64_t K)
{
	int64_t n, j;
	float v[32];

	for (n = 0; n < N; n++) {
		memset(v, 0, sizeof(v));
		for (j = 0; j < K; j++)
			v[j % 32] = fmaf(x[j], W[n * K + j], v[j % 32]);
		y[n] = ref_tree(v, 32);
	}
}

typedef struct {
	int64_t N, K;
	float *x, *W, *y;
	void *params[5];
} gemv_t;

static void gemv_init(gemv_t *g, int64_t N, int64_t K)
{
	uint64_t s = 99;
	int64_t i;

	g->N = N;
	g->K = K;
	g->x = malloc(sizeof(float) * K);
	g->W = malloc(sizeof(float) * N * K);
	g->y = calloc((size_t)N, sizeof(float));
	adversarial(g->x, (size_t)K, 1);
	for (i = 0; i < N * K; i++)
		g->W[i] = (float)((int64_t)(rng(&s) % 2001) - 1000) / 1000.0f;
	g->params[0] = &g->x;
	g->params[1] = &g->W;
	g->params[2] = &g->y;
	g->params[3] = &g->N;
	g->params[4] = &g->K;
}

static void gemv_close(gemv_t *g)
{
	free(g->x);
	free(g->W);
	free(g->y);
}

Test(jit, group_ranges_partition_the_launch)
{
	enum { N = 77, K = 1000 };
	ks_ir_kernel_t *k = gemv_kernel(KS_DTYPE_F32);
	float one[N], want[N];
	gemv_t g;
	loaded_t l;
	int64_t i;

	gemv_init(&g, N, K);
	compile_load(k, &l);
	l.fn(g.params, 0, N);
	memcpy(one, g.y, sizeof(one));
	ref_gemv(g.x, g.W, want, N, K);
	cr_assert_eq(mismatches(one, want, N), 0, "gemv differs from the "
	    "canonical reference");

	memset(g.y, 0, sizeof(one));
	l.fn(g.params, 40, N);          /* second half first */
	for (i = 0; i < 40; i++)
		cr_assert_eq(ref_f32_bits(g.y[i]), 0, "group %lld ran early",
		    (long long)i);
	l.fn(g.params, 0, 40);
	cr_assert_eq(memcmp(one, g.y, sizeof(one)), 0);

	memset(g.y, 0, sizeof(one));
	for (i = N - 1; i >= 0; i--)    /* one group per call */
		l.fn(g.params, (uint64_t)i, (uint64_t)i + 1);
	l.fn(g.params, 5, 5);           /* an empty range does nothing */
	cr_assert_eq(memcmp(one, g.y, sizeof(one)), 0);
	ks_jit_cpu_unload(l.lib);
	ks_ir_free(k);
	gemv_close(&g);
}

/* Every ISA level this CPU runs gives the same bits, since the IR fixes
 * the arithmetic (fmaf is a libm call below x86-64-v3). */
Test(jit, every_isa_level_gives_the_same_bits)
{
	static const char *const levels[] = {
		"x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4" };
	int runs[4];
	enum { N = 33, K = 517 };
	ks_ir_kernel_t *k = gemv_kernel(KS_DTYPE_F32);
	float want[N];
	gemv_t g;
	int i;

	__builtin_cpu_init();
	runs[0] = 1;
	runs[1] = __builtin_cpu_supports("x86-64-v2");
	runs[2] = __builtin_cpu_supports("x86-64-v3");
	runs[3] = __builtin_cpu_supports("x86-64-v4");
	gemv_init(&g, N, K);
	ref_gemv(g.x, g.W, want, N, K);
	for (i = 0; i < 4; i++) {
		loaded_t l;

		if (!runs[i])
			continue;
		memset(g.y, 0, sizeof(float) * N);
		compile_load_at(k, levels[i], &l);
		l.fn(g.params, 0, N);
		cr_assert_eq(mismatches(g.y, want, N), 0, "%s", levels[i]);
		ks_jit_cpu_unload(l.lib);
	}
	ks_ir_free(k);
	gemv_close(&g);
}

Test(jit, two_compiles_give_identical_bytes)
{
	ks_ir_kernel_t *k = gemv_kernel(KS_DTYPE_BF16);
	ks_jit_artifact_t a, b;
	char err[1024];

	cr_assert_eq(ks_backend_cpu.compile(k, "x86-64-v4", "so", &a, err,
	    sizeof(err)), KS_OK, "%s", err);
	cr_assert_eq(ks_backend_cpu.compile(k, "x86-64-v4", "so", &b, err,
	    sizeof(err)), KS_OK, "%s", err);
	cr_assert_eq(a.len, b.len);
	cr_assert_eq(memcmp(a.bytes, b.bytes, a.len), 0);
	cr_assert_gt(a.compile_ms, 0.0);
	ks_jit_artifact_close(&a);
	ks_jit_artifact_close(&b);
	ks_ir_free(k);
}

typedef struct {
	const ks_ir_kernel_t *k;
	ks_jit_artifact_t a;
	int rc;
} job_t;

static void *compile_job(void *p)
{
	job_t *j = p;
	char err[512];

	j->rc = ks_backend_cpu.compile(j->k, "x86-64-v3", "so", &j->a, err,
	    sizeof(err));
	return NULL;
}

Test(jit, concurrent_compiles_are_safe)
{
	ks_ir_kernel_t *k = gemv_kernel(KS_DTYPE_F16);
	job_t j[3];
	pthread_t t[3];
	int i;

	for (i = 0; i < 3; i++) {
		j[i].k = k;
		cr_assert_eq(pthread_create(&t[i], NULL, compile_job, &j[i]),
		    0);
	}
	for (i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	for (i = 0; i < 3; i++) {
		cr_assert_eq(j[i].rc, KS_OK);
		cr_assert_eq(j[i].a.len, j[0].a.len);
		cr_assert_eq(memcmp(j[i].a.bytes, j[0].a.bytes, j[0].a.len), 0);
	}
	for (i = 0; i < 3; i++)
		ks_jit_artifact_close(&j[i].a);
	ks_ir_free(k);
}

/* ---- parameters ---- */

/*
 * Params x (buffer), s (i64, bound to 3), alpha (f32), y (buffer), n (i64):
 * y[i] = x[i] * alpha + s + n.  The ABI passes only x, alpha, y, n.
 */
Test(jit, bound_parameters_leave_the_abi)
{
	ks_ir_kernel_t *k = ks_ir_new("abi", "t", 32);
	int x = ks_ir_buffer(k, "x", KS_DTYPE_F32, KS_ACCESS_READ);
	int s = ks_ir_scalar(k, "s", KS_TY_I64);
	int al = ks_ir_scalar(k, "alpha", KS_TY_F32);
	int y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int n = ks_ir_scalar(k, "n", KS_TY_I64);
	ks_stmt_t *lanes = ks_s_lanes(k), *blk = lanes->body;
	float xs[64], ys[64], *xp = xs, *yp = ys, alpha = 0.5f;
	int64_t nv = 1000;
	void *params[4] = { &xp, &alpha, &yp, &nv };
	loaded_t l;
	int i;

	k->grid = I(2);
	ADD(ks_s_store(k, y, gidx(k), BIN(ADD, BIN(ADD, BIN(MUL,
	    ks_x_load(k, x, gidx(k)), P(al)), ks_x_cast(k, KS_TY_F32, P(s))),
	    ks_x_cast(k, KS_TY_F32, P(n)))));
	ks_s_append(k, k->body, lanes);
	ks_pass_bind(k, s, 3);
	for (i = 0; i < 64; i++)
		xs[i] = (float)i;
	compile_load(k, &l);
	l.fn(params, 0, 2);
	for (i = 0; i < 64; i++)
		cr_assert_eq(ys[i], (float)i * 0.5f + 3.0f + 1000.0f,
		    "y[%d] = %g", i, ys[i]);
	ks_jit_cpu_unload(l.lib);
	ks_ir_free(k);
}

/* ---- integer ops, casts, min/max, select, control flow ---- */

/*
 * Uniform code, one group per case i: y[i] holds an i64 result cast to
 * f32 (exact for the small values used).  Inputs come through dynamic
 * scalars so nothing folds at compile time.
 */
Test(jit, integer_division_truncates_and_casts_round)
{
	ks_ir_kernel_t *k = ks_ir_new("ints", "t", 32);
	int y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int a = ks_ir_scalar(k, "a", KS_TY_I64);
	int b = ks_ir_scalar(k, "b", KS_TY_I64);
	int f = ks_ir_scalar(k, "f", KS_TY_F32);
	int big = ks_ir_scalar(k, "big", KS_TY_I64);
	ks_stmt_t *blk = k->body;
	int64_t av = -7, bv = 2, bigv = (1 << 24) + 1;
	float fv = -2.5f, out[12], *yp = out;
	void *params[5] = { &yp, &av, &bv, &fv, &bigv };
	loaded_t l;
	int i = 0;

#define OUT(e) ADD(ks_s_store(k, y, I(i++), (e)))
	OUT(ks_x_cast(k, KS_TY_F32, BIN(DIV, P(a), P(b))));          /* -3 */
	OUT(ks_x_cast(k, KS_TY_F32, BIN(REM, P(a), P(b))));          /* -1 */
	OUT(ks_x_cast(k, KS_TY_F32, BIN(MIN, P(a), P(b))));          /* -7 */
	OUT(ks_x_cast(k, KS_TY_F32, BIN(MAX, P(a), P(b))));          /* 2 */
	OUT(ks_x_cast(k, KS_TY_F32, ks_x_cast(k, KS_TY_I64, P(f)))); /* -2 */
	OUT(ks_x_cast(k, KS_TY_F32, P(big)));                  /* 2^24 RNE */
	OUT(ks_x_cast(k, KS_TY_F32, BIN(ADD, P(big), I(2))));  /* 2^24+4 */
	OUT(ks_x_select(k, BIN(LT, P(a), P(b)), F(10.0f), F(20.0f)));
	OUT(ks_x_select(k, BIN(AND, BIN(LT, P(b), P(a)), ks_x_bool(k, 1)),
	    F(10.0f), F(20.0f)));
	OUT(ks_x_cast(k, KS_TY_F32, ks_x_cast(k, KS_TY_BOOL, P(a))));  /* 1 */
	OUT(ks_x_cast(k, KS_TY_F32, BIN(OR, BIN(EQ, P(a), I(0)),
	    BIN(LE, P(b), I(2)))));                                  /* 1 */
	OUT(ks_x_cast(k, KS_TY_F32, BIN(NE, P(a), P(a))));           /* 0 */
#undef OUT
	compile_load(k, &l);
	l.fn(params, 0, 1);
	{
		const float want[12] = { -3, -1, -7, 2, -2, 16777216.0f,
			16777220.0f, 10, 20, 1, 1, 0 };

		for (i = 0; i < 12; i++)
			cr_assert_eq(out[i], want[i], "case %d: %g", i, out[i]);
	}
	ks_jit_cpu_unload(l.lib);
	ks_ir_free(k);
}

Test(jit, f32_min_max_follow_fminf_with_ordered_zeros)
{
	static const float vals[] = { NAN, -NAN, 0.0f, -0.0f, 1.0f, -1.0f,
		INFINITY, -INFINITY, 0x1p-149f, 3.5f };
	enum { NV = sizeof(vals) / sizeof(vals[0]), NP = 128 };
	ks_ir_kernel_t *k = ks_ir_new("minmax", "t", 32);
	int a = ks_ir_buffer(k, "a", KS_DTYPE_F32, KS_ACCESS_READ);
	int b = ks_ir_buffer(k, "b", KS_DTYPE_F32, KS_ACCESS_READ);
	int mn = ks_ir_buffer(k, "mn", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int mx = ks_ir_buffer(k, "mx", KS_DTYPE_F32, KS_ACCESS_WRITE);
	ks_stmt_t *lanes = ks_s_lanes(k), *blk = lanes->body;
	float av[NP], bv[NP], ymn[NP], ymx[NP];
	float *pa = av, *pb = bv, *p1 = ymn, *p2 = ymx;
	void *params[4] = { &pa, &pb, &p1, &p2 };
	loaded_t l;
	int i;

	k->grid = I(NP / 32);
	ADD(ks_s_store(k, mn, gidx(k), BIN(MIN, ks_x_load(k, a, gidx(k)),
	    ks_x_load(k, b, gidx(k)))));
	ADD(ks_s_store(k, mx, gidx(k), BIN(MAX, ks_x_load(k, a, gidx(k)),
	    ks_x_load(k, b, gidx(k)))));
	ks_s_append(k, k->body, lanes);
	for (i = 0; i < NP; i++) {
		av[i] = vals[i % NV];
		bv[i] = vals[(i / NV) % NV];
	}
	compile_load(k, &l);
	l.fn(params, 0, NP / 32);
	for (i = 0; i < NP; i++) {
		float wn = ref_fmin(av[i], bv[i]), wx = ref_fmax(av[i], bv[i]);

		if (wn != wn)
			cr_assert(ymn[i] != ymn[i], "min(%g,%g)", av[i], bv[i]);
		else
			cr_assert_eq(ref_f32_bits(ymn[i]), ref_f32_bits(wn), "min(%g,%g) = %g",
			    av[i], bv[i], ymn[i]);
		if (wx != wx)
			cr_assert(ymx[i] != ymx[i], "max(%g,%g)", av[i], bv[i]);
		else
			cr_assert_eq(ref_f32_bits(ymx[i]), ref_f32_bits(wx), "max(%g,%g) = %g",
			    av[i], bv[i], ymx[i]);
	}
	ks_jit_cpu_unload(l.lib);
	ks_ir_free(k);
}

/*
 * A lane variable declared in uniform code gets its initializer in every
 * lane; IF/else and FOR (lane counter, step 3) inside LANES:
 * y[lane] = 7 + sum_{i = lane; i < lane + 10; i += 3} i
 *           + (lane % 2 == 0 ? 100 : 200).
 */
Test(jit, lane_control_flow)
{
	ks_ir_kernel_t *k = ks_ir_new("flow", "t", 32);
	int y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int seven = ks_ir_scalar(k, "seven", KS_TY_F32);
	int v = ks_ir_var(k, "v", KS_TY_F32, KS_VAR_LANE);
	int it = ks_ir_var(k, "i", KS_TY_I64, KS_VAR_LANE);
	ks_stmt_t *blk = k->body, *lanes = ks_s_lanes(k), *f, *iff;
	float out[32], *yp = out, sv = 7.0f;
	void *params[2] = { &yp, &sv };
	loaded_t l;
	int lane, i;

	ADD(ks_s_decl(k, v, P(seven)));
	ADD(lanes);
	blk = lanes->body;
	f = ks_s_for(k, it, ks_x_lane(k), BIN(ADD, ks_x_lane(k), I(10)), 3);
	ADD(f);
	ks_s_append(k, f->body, ks_s_assign(k, v, BIN(ADD, V(v),
	    ks_x_cast(k, KS_TY_F32, V(it)))));
	iff = ks_s_if(k, BIN(EQ, BIN(REM, ks_x_lane(k), I(2)), I(0)));
	iff->orelse = ks_s_block(k);
	ADD(iff);
	ks_s_append(k, iff->body, ks_s_assign(k, v, BIN(ADD, V(v), F(100))));
	ks_s_append(k, iff->orelse, ks_s_assign(k, v, BIN(ADD, V(v),
	    F(200))));
	ADD(ks_s_store(k, y, ks_x_lane(k), V(v)));
	compile_load(k, &l);
	l.fn(params, 0, 1);
	for (lane = 0; lane < 32; lane++) {
		float want = 7.0f;

		for (i = lane; i < lane + 10; i += 3)
			want += (float)i;
		want += lane % 2 == 0 ? 100.0f : 200.0f;
		cr_assert_eq(out[lane], want, "lane %d: %g", lane, out[lane]);
	}
	ks_jit_cpu_unload(l.lib);
	ks_ir_free(k);
}

/* f32 constants reach the code with their exact bits. */
Test(jit, constants_are_exact)
{
	static const uint32_t pats[] = {
		0x80000000, 0x7f800000, 0xff800000, 0x7fc12345, 0xffa00001,
		0x00000001, 0x807fffff, 0x7f7fffff, 0x3f800001, 0x33800000,
	};
	enum { NC = sizeof(pats) / sizeof(pats[0]) };
	ks_ir_kernel_t *k = ks_ir_new("consts", "t", 32);
	int y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	ks_stmt_t *blk = k->body;
	uint32_t out[NC];
	void *yp = out, *params[1] = { &yp };
	loaded_t l;
	int i;

	for (i = 0; i < NC; i++)
		ADD(ks_s_store(k, y, I(i), F(ref_bits_f32(pats[i]))));
	compile_load(k, &l);
	l.fn(params, 0, 1);
	for (i = 0; i < NC; i++)
		cr_assert_eq(out[i], pats[i], "0x%08x became 0x%08x", pats[i],
		    out[i]);
	ks_jit_cpu_unload(l.lib);
	ks_ir_free(k);
}

/* ---- the backend table: targets, formats, identity, errors ---- */

Test(jit, backend_table)
{
	int n;
	const ks_backend_t *const *b = ks_backends(&n);
	char err[256];

	cr_assert_geq(n, 1);
	cr_assert_eq(b[0], &ks_backend_cpu);
	cr_assert_eq(ks_backend_find("cpu"), &ks_backend_cpu);
	cr_assert_null(ks_backend_find("tpu"));
	cr_assert_null(ks_backend_find(NULL));
	cr_assert_eq(ks_backend_cpu.available(err, sizeof(err)), KS_OK);
	cr_assert_eq(ks_backend_cpu.check_format("so"), KS_OK);
	cr_assert_eq(ks_backend_cpu.check_format("ptx"), KS_E_BAD_FORMAT);
	cr_assert_eq(ks_backend_cpu.check_format(NULL), KS_E_BAD_FORMAT);
}

Test(jit, auto_resolves_to_this_cpus_isa_level)
{
	char t[KS_MAX_NAME], err[512];
	const char *want = "x86-64";

	__builtin_cpu_init();
	if (__builtin_cpu_supports("x86-64-v4"))
		want = "x86-64-v4";
	else if (__builtin_cpu_supports("x86-64-v3"))
		want = "x86-64-v3";
	else if (__builtin_cpu_supports("x86-64-v2"))
		want = "x86-64-v2";
	cr_assert_eq(ks_backend_cpu.resolve_target("auto", t, sizeof(t), err,
	    sizeof(err)), KS_OK);
	cr_assert_str_eq(t, want);
	cr_assert_eq(ks_backend_cpu.resolve_target("znver3", t, sizeof(t),
	    err, sizeof(err)), KS_OK);
	cr_assert_str_eq(t, "znver3");
}

/* Every target the backend accepts (the list its error message gives) is
 * one the linked gcc knows: each compiles. */
Test(jit, every_accepted_target_compiles)
{
	char t[KS_MAX_NAME], err[1024], *list, *name, *save = NULL;
	ks_ir_kernel_t *k = gemv_kernel(KS_DTYPE_F16);
	ks_jit_artifact_t a;
	int n = 0;

	cr_assert_eq(ks_backend_cpu.resolve_target("?", t, sizeof(t), err,
	    sizeof(err)), KS_E_BAD_TARGET);
	list = strstr(err, "one of: ");
	cr_assert_not_null(list, "%s", err);
	for (name = strtok_r(list + 8, ", ", &save); name != NULL;
	    name = strtok_r(NULL, ", ", &save), n++) {
		cr_assert_eq(ks_backend_cpu.resolve_target(name, t, sizeof(t),
		    err, sizeof(err)), KS_OK, "%s", name);
		cr_assert_eq(ks_backend_cpu.compile(k, t, "so", &a, err,
		    sizeof(err)), KS_OK, "%s: %s", name, err);
		ks_jit_artifact_close(&a);
	}
	cr_assert_geq(n, 4);
	ks_ir_free(k);
}

Test(jit, invalid_target_is_rejected_with_the_accepted_list)
{
	char t[KS_MAX_NAME], err[512];
	ks_ir_kernel_t *k = gemv_kernel(KS_DTYPE_F32);
	ks_jit_artifact_t a;

	cr_assert_eq(ks_backend_cpu.resolve_target("native", t, sizeof(t),
	    err, sizeof(err)), KS_E_BAD_TARGET);
	cr_assert(strstr(err, "native") != NULL, "%s", err);
	cr_assert(strstr(err, "x86-64-v4") != NULL, "%s", err);
	cr_assert(strstr(err, "skylake-avx512") != NULL, "%s", err);
	cr_assert_eq(ks_backend_cpu.resolve_target("x86-64-v4 -O0", t,
	    sizeof(t), err, sizeof(err)), KS_E_BAD_TARGET);
	cr_assert_eq(ks_backend_cpu.compile(k, "native", "so", &a, err,
	    sizeof(err)), KS_E_BAD_TARGET);
	cr_assert_eq(ks_backend_cpu.compile(k, "x86-64-v4", "ptx", &a, err,
	    sizeof(err)), KS_E_BAD_FORMAT);
	ks_ir_free(k);
}

Test(jit, identity_names_version_march_and_options)
{
	ks_buf_t b, c;
	char v[64];

	ks_buf_init(&b);
	ks_buf_init(&c);
	cr_assert_eq(ks_backend_cpu.identity("x86-64-v4", &b), KS_OK);
	cr_assert_eq(ks_backend_cpu.identity("x86-64-v3", &c), KS_OK);
	snprintf(v, sizeof(v), "libgccjit %d.%d.%d", gcc_jit_version_major(),
	    gcc_jit_version_minor(), gcc_jit_version_patchlevel());
	cr_assert(strncmp(b.data, v, strlen(v)) == 0, "%s", b.data);
	cr_assert(strstr(b.data, "-march=x86-64-v4") != NULL, "%s", b.data);
	cr_assert(strstr(b.data, "-O3") != NULL, "%s", b.data);
	cr_assert(strstr(b.data, "-ffp-contract=off") != NULL, "%s", b.data);
	cr_assert_str_neq(b.data, c.data);
	cr_log_info("identity: %s", b.data);
	ks_buf_close(&b);
	ks_buf_close(&c);
}

Test(jit, invalid_ir_is_a_compile_error)
{
	ks_ir_kernel_t *k = ks_ir_new("bad", "t", 32);
	int y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int v = ks_ir_var(k, "v", KS_TY_F32, KS_VAR_LANE);
	ks_jit_artifact_t a;
	char err[512];

	/* A lane variable read in uniform code. */
	ks_s_append(k, k->body, ks_s_store(k, y, I(0), V(v)));
	cr_assert_eq(ks_backend_cpu.compile(k, "x86-64-v4", "so", &a, err,
	    sizeof(err)), KS_E_COMPILE);
	cr_assert(strstr(err, "'v'") != NULL, "%s", err);
	ks_ir_free(k);

	/* A uniform variable assigned per lane. */
	k = ks_ir_new("bad", "t", 32);
	v = ks_ir_var(k, "u", KS_TY_I64, KS_VAR_UNIFORM);
	{
		ks_stmt_t *lanes = ks_s_lanes(k);

		ks_s_append(k, k->body, ks_s_decl(k, v, I(0)));
		ks_s_append(k, k->body, lanes);
		ks_s_append(k, lanes->body, ks_s_assign(k, v, ks_x_lane(k)));
	}
	cr_assert_eq(ks_backend_cpu.compile(k, "x86-64-v4", "so", &a, err,
	    sizeof(err)), KS_E_COMPILE);
	cr_assert(strstr(err, "'u'") != NULL, "%s", err);
	ks_ir_free(k);

	k = ks_ir_new("bad", "t", 24);  /* the tree needs a power of two */
	cr_assert_eq(ks_backend_cpu.compile(k, "x86-64-v4", "so", &a, err,
	    sizeof(err)), KS_E_UNSUPPORTED);
	ks_ir_free(k);
}

Test(jit, load_rejects_garbage_and_missing_entries)
{
	ks_ir_kernel_t *k = gemv_kernel(KS_DTYPE_F32);
	ks_jit_artifact_t a;
	ks_jit_cpu_lib_t *lib;
	ks_jit_cpu_entry_t fn;
	char err[512];

	cr_assert_eq(ks_jit_cpu_load("not an ELF", 10, "x", &lib, &fn, err,
	    sizeof(err)), KS_E_IO);
	cr_assert_null(lib);
	cr_assert_eq(ks_backend_cpu.compile(k, "x86-64-v4", "so", &a, err,
	    sizeof(err)), KS_OK);
	cr_assert_eq(ks_jit_cpu_load(a.bytes, a.len, "ks_nope", &lib, &fn,
	    err, sizeof(err)), KS_E_NOT_FOUND);
	ks_jit_artifact_close(&a);
	ks_ir_free(k);
}

/* The lane loops are vectorized: packed FMAs in the gemv at x86-64-v4. */
Test(jit, lane_loops_vectorize)
{
	ks_ir_kernel_t *k = gemv_kernel(KS_DTYPE_BF16);
	ks_buf_t b;
	char err[512];

	ks_buf_init(&b);
	cr_assert_eq(ks_jit_cpu_assembly(k, "x86-64-v4", &b, err,
	    sizeof(err)), KS_OK, "%s", err);
	cr_assert(strstr(b.data, "vfmadd231ps") != NULL ||
	    strstr(b.data, "vfmadd132ps") != NULL ||
	    strstr(b.data, "vfmadd213ps") != NULL, "no packed fma");
	ks_buf_close(&b);
	ks_ir_free(k);
}
