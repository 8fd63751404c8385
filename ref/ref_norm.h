/*
 * Plain-C references of the row kernels (rmsnorm, add_rmsnorm, softmax),
 * written from their definitions in docs/kernels.md, independent of the
 * IR: one row at a time, 32 lane partials over j = l (mod 32) in
 * increasing j, then the tree 16, 8, 4, 2, 1 (docs/kernels.md), every
 * f32 operation written out once in the documented order, loads and
 * stores through tests/ref.h.  Plus double-precision versions for sanity
 * bounds.  Header-only, like ref.h.
 *
 * These rely on C's own f32 arithmetic being IEEE without contraction:
 * the build is -std=c11, where GCC's default is -ffp-contract=off, and fma
 * is only ever fmaf.
 */
#ifndef KS_REF_NORM_H
#define KS_REF_NORM_H

#include <math.h>
#include <stdint.h>

#include "ref.h"

/* ---- the canonical reduction ---- */

/* max as the IR's KS_OP_MAX: a NaN operand is ignored, -0 < +0. */
static inline float ref_max(float a, float b)
{
	if (a != a)
		return b;
	if (b != b)
		return a;
	if (a == b)             /* equal, or zeros of either sign */
		return signbit(a) ? b : a;
	return a > b ? a : b;
}

/* The tree over 32 lane partials: v[l] = v[l] op v[l + s] for l < s, s =
 * 16, 8, 4, 2, 1; the result is v[0].  V is clobbered. */
static inline float ref_tree_sum(float *v)
{
	int l, s;

	for (s = 16; s >= 1; s /= 2)
		for (l = 0; l < s; l++)
			v[l] = v[l] + v[l + s];
	return v[0];
}

static inline float ref_tree_max(float *v)
{
	int l, s;

	for (s = 16; s >= 1; s /= 2)
		for (l = 0; l < s; l++)
			v[l] = ref_max(v[l], v[l + s]);
	return v[0];
}

/* ---- rmsnorm ---- */

/* 1 / sqrt(ss / f32(H) + eps) for row values v[0..H), ss the canonical
 * sum of squares (fmaf per lane from 0). */
static inline float ref_rms_inv(const float *v, int64_t H, float eps)
{
	float part[32], ss, mean, rms;
	int64_t j;
	int l;

	for (l = 0; l < 32; l++)
		part[l] = 0.0f;
	for (j = 0; j < H; j++)
		part[j % 32] = fmaf(v[j], v[j], part[j % 32]);
	ss = ref_tree_sum(part);
	mean = ss / (float)H;
	rms = sqrtf(mean + eps);
	return 1.0f / rms;
}

/*
 * y[r][j] = (x_j * inv) * w_j, inv = ref_rms_inv of row r; x, y RxH of
 * dtype DT, w H of WDT (the weight dtype: DT, or f16/bf16 beside an f32
 * DT).  ROW is scratch of H floats.
 */
static inline void ref_rmsnorm_mixed(const void *x, const void *w, void *y,
    int dt, int wdt, int64_t R, int64_t H, float eps, float *row)
{
	int64_t r, j;
	float inv, t;

	for (r = 0; r < R; r++) {
		for (j = 0; j < H; j++)
			row[j] = ref_load(x, dt, r * H + j);
		inv = ref_rms_inv(row, H, eps);
		for (j = 0; j < H; j++) {
			t = row[j] * inv;
			ref_store(y, dt, r * H + j, t * ref_load(w, wdt, j));
		}
	}
}

static inline void ref_rmsnorm(const void *x, const void *w, void *y,
    int dt, int64_t R, int64_t H, float eps, float *row)
{
	ref_rmsnorm_mixed(x, w, y, dt, dt, R, H, eps, row);
}

/* res := round(x + res) elementwise (f32 add, one rounding to DT), then y
 * := rmsnorm(res): the definition of add_rmsnorm; x, res, y of DT, w of
 * WDT. */
static inline void ref_add_rmsnorm_mixed(const void *x, void *res,
    const void *w, void *y, int dt, int wdt, int64_t R, int64_t H,
    float eps, float *row)
{
	int64_t i;

	for (i = 0; i < R * H; i++)
		ref_store(res, dt, i, ref_load(x, dt, i) +
		    ref_load(res, dt, i));
	ref_rmsnorm_mixed(res, w, y, dt, wdt, R, H, eps, row);
}

static inline void ref_add_rmsnorm(const void *x, void *res, const void *w,
    void *y, int dt, int64_t R, int64_t H, float eps, float *row)
{
	ref_add_rmsnorm_mixed(x, res, w, y, dt, dt, R, H, eps, row);
}

/* Double precision: y = x / sqrt(sum x^2 / H + eps) * w. */
static inline void ref_rmsnorm_f64_mixed(const void *x, const void *w,
    double *y, int dt, int wdt, int64_t R, int64_t H, float eps)
{
	int64_t r, j;
	double ss, v, inv;

	for (r = 0; r < R; r++) {
		ss = 0;
		for (j = 0; j < H; j++) {
			v = ref_load(x, dt, r * H + j);
			ss += v * v;
		}
		inv = 1.0 / sqrt(ss / (double)H + (double)eps);
		for (j = 0; j < H; j++)
			y[r * H + j] = (double)ref_load(x, dt, r * H + j) *
			    inv * ref_load(w, wdt, j);
	}
}

static inline void ref_rmsnorm_f64(const void *x, const void *w, double *y,
    int dt, int64_t R, int64_t H, float eps)
{
	ref_rmsnorm_f64_mixed(x, w, y, dt, dt, R, H, eps);
}

/* ---- softmax ---- */

/*
 * y[r][j] = e_j * (1 / s): m the canonical max (lane partials from -inf),
 * e_j = ref_expf(x_j - m) (kspec's exp, tests/ref.h), s the canonical
 * sum of
 * e_j with plain adds from 0.  ROW is scratch of L floats.
 */
static inline void ref_softmax(const void *x, void *y, int dt, int64_t R,
    int64_t L, float *row)
{
	float part[32], m, s, inv;
	int64_t r, j;
	int l;

	for (r = 0; r < R; r++) {
		for (l = 0; l < 32; l++)
			part[l] = -INFINITY;
		for (j = 0; j < L; j++)
			part[j % 32] = ref_max(part[j % 32],
			    ref_load(x, dt, r * L + j));
		m = ref_tree_max(part);
		for (l = 0; l < 32; l++)
			part[l] = 0.0f;
		for (j = 0; j < L; j++) {
			row[j] = ref_expf(ref_load(x, dt, r * L + j) - m);
			part[j % 32] = part[j % 32] + row[j];
		}
		s = ref_tree_sum(part);
		inv = 1.0f / s;
		for (j = 0; j < L; j++)
			ref_store(y, dt, r * L + j, row[j] * inv);
	}
}

/* Double precision: y = exp(x - max) / sum exp(x - max). */
static inline void ref_softmax_f64(const void *x, double *y, int dt,
    int64_t R, int64_t L)
{
	int64_t r, j;
	double m, s;

	for (r = 0; r < R; r++) {
		m = -INFINITY;
		for (j = 0; j < L; j++)
			m = fmax(m, ref_load(x, dt, r * L + j));
		s = 0;
		for (j = 0; j < L; j++) {
			y[r * L + j] = exp((double)ref_load(x, dt, r * L + j) -
			    m);
			s += y[r * L + j];
		}
		for (j = 0; j < L; j++)
			y[r * L + j] /= s;
	}
}

#endif
