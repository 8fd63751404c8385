/*
 * Plain-C references for rope and silu_mul, written from the definitions
 * in docs/kernels_rope.md (not from the IR), with ref.h's storage
 * conversions.  Header-only, like ref.h.
 *
 * The f32 references compute exactly the documented operations, one
 * statement each: tests are ISO C11 (-std=c11), where GCC does not
 * contract a*b+c into fma (-ffp-contract=off is the ISO default), and
 * x86-64 evaluates float in float (FLT_EVAL_METHOD 0).
 */
#ifndef KS_REF_ROPE_H
#define KS_REF_ROPE_H

#include <math.h>
#include <stdint.h>

#include "ref.h"

/* ---- rope ---- */

/*
 * In place on x (T*Hn*D elements of DTYPE), pos (T int32), cs (P*D of
 * CDT, the table's dtype: DTYPE, or f32 whatever DTYPE is: cos in columns [0, D/2), sin in [D/2, D)).  For each pair i <
 * D/2 (floor for an odd D: the last column stays), y0 = x0*c - x1*s and
 * y1 = x1*c + x0*s in f32, each rounded once to the dtype.  A position
 * outside [0, P) leaves its token unchanged.
 */
static inline void ref_rope_mixed(void *x, const int32_t *pos,
    const void *cs, int dtype, int cdt, int64_t T, int64_t Hn, int64_t D,
    int64_t P)
{
	int64_t t, h, i, half = D / 2;

	for (t = 0; t < T; t++) {
		int64_t p = pos[t];

		if (p < 0 || p >= P)
			continue;
		for (h = 0; h < Hn; h++) {
			int64_t o = (t * Hn + h) * D;

			for (i = 0; i < half; i++) {
				float c = ref_load(cs, cdt, p * D + i);
				float s = ref_load(cs, cdt, p * D + half + i);
				float x0 = ref_load(x, dtype, o + i);
				float x1 = ref_load(x, dtype, o + half + i);
				float x0c = x0 * c, x1s = x1 * s;
				float x1c = x1 * c, x0s = x0 * s;

				ref_store(x, dtype, o + i, x0c - x1s);
				ref_store(x, dtype, o + half + i, x1c + x0s);
			}
		}
	}
}

static inline void ref_rope(void *x, const int32_t *pos, const void *cs,
    int dtype, int64_t T, int64_t Hn, int64_t D, int64_t P)
{
	ref_rope_mixed(x, pos, cs, dtype, dtype, T, Hn, D, P);
}

/* The same rotation in double, unrounded: out[T*Hn*D] gets the exact
 * results of the loaded values (unchanged elements copied); cs of CDT. */
static inline void ref_rope_f64_mixed(const void *x, const int32_t *pos,
    const void *cs, int dtype, int cdt, int64_t T, int64_t Hn, int64_t D,
    int64_t P, double *out)
{
	int64_t t, h, i, half = D / 2, n = T * Hn * D;

	for (i = 0; i < n; i++)
		out[i] = ref_load(x, dtype, i);
	for (t = 0; t < T; t++) {
		int64_t p = pos[t];

		if (p < 0 || p >= P)
			continue;
		for (h = 0; h < Hn; h++) {
			int64_t o = (t * Hn + h) * D;

			for (i = 0; i < half; i++) {
				double c = ref_load(cs, cdt, p * D + i);
				double s = ref_load(cs, cdt, p * D + half + i);
				double x0 = ref_load(x, dtype, o + i);
				double x1 = ref_load(x, dtype, o + half + i);

				out[o + i] = x0 * c - x1 * s;
				out[o + half + i] = x1 * c + x0 * s;
			}
		}
	}
}

static inline void ref_rope_f64(const void *x, const int32_t *pos,
    const void *cs, int dtype, int64_t T, int64_t Hn, int64_t D, int64_t P,
    double *out)
{
	ref_rope_f64_mixed(x, pos, cs, dtype, dtype, T, Hn, D, P, out);
}

/* ---- silu_mul ---- */

/* y[t][j] = (g / (1.0f + exp(-g))) * u, g = gu[t][j], u = gu[t][F + j];
 * exp is kspec's (ref_expf, tests/ref.h), as on every backend. */
static inline void ref_silu_mul(const void *gu, void *y, int dtype,
    int64_t T, int64_t F)
{
	int64_t t, j;

	for (t = 0; t < T; t++)
		for (j = 0; j < F; j++) {
			float g = ref_load(gu, dtype, t * 2 * F + j);
			float u = ref_load(gu, dtype, t * 2 * F + F + j);
			float e = ref_expf(-g);
			float d = 1.0f + e;
			float q = g / d;

			ref_store(y, dtype, t * F + j, q * u);
		}
}

/* The same in double, unrounded. */
static inline void ref_silu_mul_f64(const void *gu, int dtype, int64_t T,
    int64_t F, double *out)
{
	int64_t t, j;

	for (t = 0; t < T; t++)
		for (j = 0; j < F; j++) {
			double g = ref_load(gu, dtype, t * 2 * F + j);
			double u = ref_load(gu, dtype, t * 2 * F + F + j);

			out[t * F + j] = g / (1.0 + exp(-g)) * u;
		}
}

#endif
