/*
 * Plain-C references for the kernel library, written straight from the
 * definitions in docs/kernels.md and independent of the IR: the canonical
 * reduction order (docs/kernels.md) and the storage conversions.
 * Header-only so tests and benchmarks share one copy.
 */
#ifndef KS_REF_H
#define KS_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- storage conversions ---- */

static inline float ref_bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static inline uint32_t ref_f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static inline float ref_bf16_to_f32(uint16_t h)
{
	return ref_bits_f32((uint32_t)h << 16);
}

/* Round-to-nearest-even; NaN stays a quiet NaN with its sign. */
static inline uint16_t ref_f32_to_bf16(float f)
{
	uint32_t u = ref_f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x0040u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static inline float ref_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	int exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ffu;
	float v;

	if (exp == 0x1f)
		return ref_bits_f32(sign | 0x7f800000u | (man << 13));
	if (exp == 0)
		v = ldexpf((float)man, -24);
	else
		v = ldexpf((float)(man | 0x400u), exp - 25);
	return sign ? -v : v;
}

/* Round-to-nearest-even through double, which holds every f32 exactly and
 * makes the rounding of the f16 grid explicit. */
static inline uint16_t ref_f32_to_f16(float f)
{
	uint32_t u = ref_f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	double a = fabs((double)f), q, fl, r;
	int e;

	if (f != f)
		return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
	if (a >= 65520.0)         /* rounds to Inf */
		return (uint16_t)(sign | 0x7c00u);
	if (a < ldexp(1.0, -14)) { /* subnormal grid: steps of 2^-24 */
		q = a * ldexp(1.0, 24);
	} else {
		frexp(a, &e);     /* a = m * 2^e, m in [0.5, 1) */
		q = a * ldexp(1.0, 11 - e); /* 11 significant bits */
	}
	fl = floor(q);
	r = q - fl;
	if (r > 0.5 || (r == 0.5 && fmod(fl, 2.0) == 1.0))
		fl += 1.0;
	if (a < ldexp(1.0, -14))
		return (uint16_t)(sign | (uint16_t)fl);
	/* fl in [1024, 2048]; 2048 carries into the exponent. */
	{
		double v = fl * ldexp(1.0, e - 11);
		int ee;

		frexp(v, &ee);
		if (ee - 1 + 15 >= 31)
			return (uint16_t)(sign | 0x7c00u);
		return (uint16_t)(sign | (uint16_t)((ee - 1 + 15) << 10) |
		    (uint16_t)(((uint64_t)(v * ldexp(1.0, 11 - ee))) & 0x3ffu));
	}
}

/* dtype codes as in base.h: 0 f32, 1 f16, 2 bf16. */
static inline float ref_load(const void *buf, int dtype, int64_t i)
{
	if (dtype == 0)
		return ((const float *)buf)[i];
	if (dtype == 1)
		return ref_f16_to_f32(((const uint16_t *)buf)[i]);
	return ref_bf16_to_f32(((const uint16_t *)buf)[i]);
}

static inline void ref_store(void *buf, int dtype, int64_t i, float v)
{
	if (dtype == 0)
		((float *)buf)[i] = v;
	else if (dtype == 1)
		((uint16_t *)buf)[i] = ref_f32_to_f16(v);
	else
		((uint16_t *)buf)[i] = ref_f32_to_bf16(v);
}

/* ---- exp ---- */

/*
 * kspec's exp (docs/ir.md): every backend computes exactly this sequence
 * of IEEE f32 operations, so exp is bitwise equal across backends and
 * vectorizes on CPUs.  The argument is clamped to [-104, 89] (NaN to
 * -104, harmlessly: the result is selected away), split as x = k ln2 + r
 * with k = rint(x log2 e) (by the 1.5 * 2^23 trick) and ln2 in two parts;
 * e^r by a degree-7 polynomial (Cephes expf) in Horner form with fma; the
 * scale 2^k applied as two exact powers of two 2^(k/2) 2^(k - k/2), so a
 * subnormal result is rounded once.  NaN gives a quiet NaN, x > 88.7228394
 * gives +Inf, x < -103.972084 gives +0.  Within 2 ulp of e^x (tests).
 */
static inline float ref_pow2i(int32_t k)        /* k in [-126, 127] */
{
	return ref_bits_f32((uint32_t)(k + 127) << 23);
}

static inline float ref_expf(float x)
{
	volatile float t;       /* no contraction, no reassociation */
	float xc, kf, r, p, z, y;
	int32_t k, k1;

	xc = x < -104.0f ? -104.0f : x;
	xc = xc > 89.0f ? 89.0f : xc;
	xc = x != x ? -104.0f : xc;
	t = xc * 1.44269502f;
	t = t + 12582912.0f;
	kf = t - 12582912.0f;
	r = fmaf(kf, -0.693145752f, xc);
	r = fmaf(kf, -1.42860677e-6f, r);
	p = fmaf(1.9875691500e-4f, r, 1.3981999507e-3f);
	p = fmaf(p, r, 8.3334519073e-3f);
	p = fmaf(p, r, 4.1665795894e-2f);
	p = fmaf(p, r, 1.6666665459e-1f);
	p = fmaf(p, r, 5.0000001201e-1f);
	t = r * r;
	z = t;
	p = fmaf(p, z, r);
	t = p + 1.0f;
	p = t;
	k = (int32_t)kf;
	k1 = k / 2;
	t = p * ref_pow2i(k1);
	y = t * ref_pow2i(k - k1);
	if (x != x)
		return x + x;
	if (x > 88.7228394f)
		return ref_bits_f32(0x7f800000u);
	if (x < -103.972084f)
		return 0.0f;
	return y;
}

/* ---- canonical reduction ---- */

/* Lane l accumulates a[j]*b[j] for j = l (mod 32) in increasing j with
 * fmaf; the lanes combine in the tree 16, 8, 4, 2, 1.  A is of dtype ADT,
 * B of BDT, each element converted exactly to f32 (mixed precision: the
 * same order whatever the dtypes). */
static inline float ref_dot_mixed(const void *a, int64_t ao, int adt,
    const void *b, int64_t bo, int bdt, int64_t n)
{
	float v[32];
	int64_t j;
	int l, s;

	for (l = 0; l < 32; l++)
		v[l] = 0.0f;
	for (j = 0; j < n; j++)
		v[j % 32] = fmaf(ref_load(a, adt, ao + j),
		    ref_load(b, bdt, bo + j), v[j % 32]);
	for (s = 16; s >= 1; s /= 2)
		for (l = 0; l < s; l++)
			v[l] = v[l] + v[l + s];
	return v[0];
}

static inline float ref_dot_canonical(const void *a, int64_t ao,
    const void *b, int64_t bo, int dtype, int64_t n)
{
	return ref_dot_mixed(a, ao, dtype, b, bo, dtype, n);
}

/* y[m][n] = sum_k x[m][k] W[n][k], canonical order, one rounding; x and
 * y of DTYPE, W of WDTYPE (docs/kernels.md, "Mixed precision"). */
static inline void ref_gemm_mixed(const void *x, const void *w, void *y,
    int dtype, int wdtype, int64_t M, int64_t N, int64_t K)
{
	int64_t m, n;

	for (m = 0; m < M; m++)
		for (n = 0; n < N; n++)
			ref_store(y, dtype, m * N + n, ref_dot_mixed(x, m * K,
			    dtype, w, n * K, wdtype, K));
}

static inline void ref_gemm(const void *x, const void *w, void *y, int dtype,
    int64_t M, int64_t N, int64_t K)
{
	ref_gemm_mixed(x, w, y, dtype, dtype, M, N, K);
}

/* Elements of the panel layout (gemm_pack_x/w, gemm_packed) of an R x K
 * matrix in panels of T rows: ceil(R / T) * T * 32 * ceil(K / 32). */
static inline int64_t ref_panel_elems(int64_t R, int64_t K, int64_t T)
{
	return (R + T - 1) / T * T * 32 * ((K + 31) / 32);
}

/* Index of row r, column c in that layout: element (t, l, j, i) at
 * ((t * 32 + l) * J + j) * T + i is row t * T + i, column l + 32 j. */
static inline int64_t ref_panel_at(int64_t r, int64_t c, int64_t K,
    int64_t T)
{
	return ((r / T * 32 + c % 32) * ((K + 31) / 32) + c / 32) * T + r % T;
}

/* gemm_pack_x (T = 8) and gemm_pack_w (T = 32) by their definition:
 * IN's R x K elements at their panel
 * places, 0.0 in the padding. */
static inline void ref_pack_panels(const void *in, void *out, int dtype,
    int64_t R, int64_t K, int64_t T)
{
	int64_t n = ref_panel_elems(R, K, T), i, r, c;

	for (i = 0; i < n; i++)
		ref_store(out, dtype, i, 0.0f);
	for (r = 0; r < R; r++)
		for (c = 0; c < K; c++)
			ref_store(out, dtype, ref_panel_at(r, c, K, T),
			    ref_load(in, dtype, r * K + c));
}

/* The inverse of ref_pack_panels: the R x K row-major matrix OUT of the
 * panels IN (the padding is not read). */
static inline void ref_unpack_panels(const void *in, void *out, int dtype,
    int64_t R, int64_t K, int64_t T)
{
	int64_t r, c;

	for (r = 0; r < R; r++)
		for (c = 0; c < K; c++)
			ref_store(out, dtype, r * K + c, ref_load(in, dtype,
			    ref_panel_at(r, c, K, T)));
}

/* gemm_packed by its definition: gemm (ref_gemm_mixed) on the row-major
 * x and W that XP (panels of 8 rows, DTYPE) and WP (panels of 32,
 * WDTYPE) hold. */
static inline void ref_gemm_packed(const void *xp, const void *wp, void *y,
    int dtype, int wdtype, int64_t M, int64_t N, int64_t K)
{
	void *x = malloc((size_t)(M * K) * 4), *w = malloc((size_t)(N * K) * 4);

	if (x == NULL || w == NULL)
		abort();
	ref_unpack_panels(xp, x, dtype, M, K, 8);
	ref_unpack_panels(wp, w, wdtype, N, K, 32);
	ref_gemm_mixed(x, w, y, dtype, wdtype, M, N, K);
	free(x);
	free(w);
}

/* Double-precision gemm for sanity checks of the canonical one. */
static inline void ref_gemm_f64_mixed(const void *x, const void *w,
    double *y, int dtype, int wdtype, int64_t M, int64_t N, int64_t K)
{
	int64_t m, n, k;

	for (m = 0; m < M; m++)
		for (n = 0; n < N; n++) {
			double s = 0;

			for (k = 0; k < K; k++)
				s += (double)ref_load(x, dtype, m * K + k) *
				    ref_load(w, wdtype, n * K + k);
			y[m * N + n] = s;
		}
}

static inline void ref_gemm_f64(const void *x, const void *w, double *y,
    int dtype, int64_t M, int64_t N, int64_t K)
{
	ref_gemm_f64_mixed(x, w, y, dtype, dtype, M, N, K);
}

/* Deterministic test data: xorshift64*, values in [-1, 1) stored in the
 * dtype. */
static inline uint64_t ref_rand(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1Dull;
}

static inline void ref_fill(void *buf, int dtype, int64_t n, uint64_t seed)
{
	uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
	int64_t i;

	for (i = 0; i < n; i++) {
		float v = (float)((double)(ref_rand(&s) >> 11) /
		    (double)(1ull << 53) * 2.0 - 1.0);

		ref_store(buf, dtype, i, v);
	}
}

#endif
