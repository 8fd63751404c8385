/*
 * Plain-C reference of gemm's fast mode (docs/kernels.md, "The fast
 * mode"), written from that section alone: x in q8_0 blocks, W in q8_0,
 * q4_0 or q4_k, each output a sum of integer dot products of groups of 4
 * weights, scaled per block and added by fma into 16 lane accumulators,
 * reduced by the canonical tree of 16.  Weights and codes are read through
 * ref_quant.h's byte positions; nothing is shared with the kernel's IR.
 *
 * Test plants, as in ref_quant.h: a test that defines REF_FAST_PLANT(p)
 * before including this header gets these defects switchable.
 */
#ifndef KS_REF_FAST_H
#define KS_REF_FAST_H

#include "ref_quant.h"

enum {
	REF_FAST_NONE,
	REF_FAST_GROUPS,        /* a lane's 4 weights strided, not adjacent */
	REF_FAST_SCALE_ORDER,   /* fma(dx, dw * P, acc), not fma(dx dw, P) */
	REF_FAST_LANE_HALF,     /* both blocks of a pair in lanes 0..7 */
	REF_FAST_ODD_TAIL,      /* the last block dropped when K / 32 is odd */
	REF_FAST_Q4K_MIN,       /* q4_k's min term added, not subtracted */
	REF_FAST_N
};

#ifndef REF_FAST_PLANT
#define REF_FAST_PLANT(p) 0
#endif

/* Code J (0..31) of the q8_0 block at B, as an int. */
static inline int ref_fast_x(const uint8_t *b, int j)
{
	return (int8_t)b[2 + j];
}

/* Weight code J (0..31) of block (q4_k: sub-block C of the super-block)
 * at B, as the int the integer dot multiplies: q8_0 the int8, q4_0 the
 * nibble minus 8, q4_k the nibble. */
static inline int ref_fast_w(int fmt, const uint8_t *b, int c, int j)
{
	if (fmt == REF_Q8_0)
		return (int8_t)b[2 + j];
	if (fmt == REF_Q4_0)
		return (j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4) - 8;
	return c % 2 ? b[16 + 32 * (c / 2) + j] >> 4 :
	    b[16 + 32 * (c / 2) + j] & 15;
}

/* The canonical tree of 16 lanes: strides 8, 4, 2, 1. */
static inline float ref_fast_reduce16(float *t)
{
	int s, l;

	for (s = 8; s >= 1; s /= 2)
		for (l = 0; l < s; l++)
			t[l] = t[l] + t[l + s];
	return t[0];
}

/* q4_k's min term of the super-block at WB, x's 8 blocks at XB: lane
 * s gets fma(dx_s ((-dmin) m_s), T_s, acc), T_s the sum of block s's
 * 32 codes. */
static inline void ref_fast_q4k_min(const uint8_t *xb, const uint8_t *wb,
    float *acc)
{
	float dmin = ref_qf16(wb + 2);
	int s, j, sc, m, T;

	if (!REF_FAST_PLANT(REF_FAST_Q4K_MIN))
		dmin = -dmin;
	for (s = 0; s < 8; s++) {
		for (T = 0, j = 0; j < 32; j++)
			T += ref_fast_x(xb + 34 * s, j);
		ref_q4k_scale_min(wb + 4, s, &sc, &m);
		acc[s] = fmaf(ref_qf16(xb + 34 * s) * (dmin * (float)m),
		    (float)T, acc[s]);
	}
}

/* One output: x's row XR (q8_0 bytes of K codes), W's row WR (FMT). */
static inline float ref_fast_dot(int fmt, const uint8_t *xr,
    const uint8_t *wr, int64_t k)
{
	float acc[16] = { 0 };
	int64_t nblk = k / 32, b;

	if (REF_FAST_PLANT(REF_FAST_ODD_TAIL) && nblk % 2)
		nblk--;
	for (b = 0; b < nblk; b++) {
		const uint8_t *xb = xr + b * 34, *wb;
		int c = (int)(b % 8), g, t;
		int h = fmt == REF_Q4_K ? c % 2 : (int)(b % 2);
		float dx = ref_qf16(xb);

		if (REF_FAST_PLANT(REF_FAST_LANE_HALF))
			h = 0;
		wb = fmt == REF_Q4_K ? wr + b / 8 * 144 :
		    wr + b * ref_qblock_bytes(fmt);
		if (fmt == REF_Q4_K && c == 0)
			ref_fast_q4k_min(xb, wb, acc);
		for (g = 0; g < 8; g++) {
			int P = 0;

			for (t = 0; t < 4; t++) {
				int j = REF_FAST_PLANT(REF_FAST_GROUPS) ?
				    g + 8 * t : 4 * g + t;

				P += ref_fast_w(fmt, wb, c, j) *
				    ref_fast_x(xb, j);
			}
			if (fmt == REF_Q4_K) {
				int sc, m;

				ref_q4k_scale_min(wb + 4, c, &sc, &m);
				acc[8 * h + g] = fmaf(dx * (ref_qf16(wb) *
				    (float)sc), (float)P, acc[8 * h + g]);
			} else if (REF_FAST_PLANT(REF_FAST_SCALE_ORDER)) {
				acc[8 * h + g] = fmaf(dx, ref_qf16(wb) *
				    (float)P, acc[8 * h + g]);
			} else {
				acc[8 * h + g] = fmaf(dx * ref_qf16(wb),
				    (float)P, acc[8 * h + g]);
			}
		}
	}
	return ref_fast_reduce16(acc);
}

/* y[m][n] (f32) of gemm's fast mode: XQ M rows of K codes in q8_0, W N
 * rows of K weights in FMT. */
static inline void ref_gemm_fast(int fmt, const void *xq, const void *w,
    float *y, int64_t M, int64_t N, int64_t k)
{
	int64_t m, n;

	for (m = 0; m < M; m++)
		for (n = 0; n < N; n++)
			y[m * N + n] = ref_fast_dot(fmt, (const uint8_t *)xq +
			    m * ref_qrow_bytes(REF_Q8_0, k),
			    (const uint8_t *)w + n * ref_qrow_bytes(fmt, k), k);
}

#endif
