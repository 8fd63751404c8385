/*
 * Test data in the block formats (q8_0, q4_0, q4_k), shared by the
 * quantized-kernel tests: random code bytes (every code value) with
 * finite scales over many binades, the first block's subnormal; and the
 * bitwise comparison of two f32 outputs.  Include after ref_quant.h and
 * gpu.h.
 */
#ifndef KS_TEST_QBLOCKS_H
#define KS_TEST_QBLOCKS_H

/* ref_quant.h's format of the block dtype F. */
static inline int qb_ref_fmt(ks_dtype_t f)
{
	return f == KS_DTYPE_Q8_0 ? REF_Q8_0 : f == KS_DTYPE_Q4_0 ? REF_Q4_0 :
	    REF_Q4_K;
}

/* An f16 of random sign with an exponent field in [lo, hi] (0: zero or
 * subnormal) at P, little-endian. */
static inline void qb_put_f16(uint8_t *p, uint64_t *s, int lo, int hi)
{
	uint64_t r = gpu_rng(s);
	unsigned e = (unsigned)(lo + (int)(r % (unsigned)(hi - lo + 1)));
	uint16_t h = (uint16_t)((r >> 16 & 0x8000) | e << 10 |
	    (r >> 32 & 0x3ff));

	p[0] = (uint8_t)h;
	p[1] = (uint8_t)(h >> 8);
}

/* ROWS rows of K weights in ref_quant.h's format RF, malloc'd: random
 * code bytes, finite scales over many binades (the first block's d
 * subnormal), dmin too for q4_k. */
static inline uint8_t *qb_blocks(int rf, int64_t rows, int64_t K,
    uint64_t seed)
{
	int64_t bb = ref_qblock_bytes(rf), nb = rows * (K / ref_qblock(rf));
	uint8_t *w = malloc((size_t)(nb * bb));
	uint64_t s = seed;
	int64_t i, b;

	for (i = 0; i < nb * bb; i++)
		w[i] = (uint8_t)gpu_rng(&s);
	for (b = 0; b < nb; b++) {
		qb_put_f16(w + b * bb, &s, b ? 5 : 0, b ? 17 : 0);
		if (rf == REF_Q4_K)
			qb_put_f16(w + b * bb + 2, &s, 4, 16);
	}
	return w;
}

/* Outputs of Y whose bits differ from WANT's, the first 3 logged under
 * WHO (NULL: quiet). */
static inline int64_t qb_ndiff(const char *who, const float *y,
    const float *want, int64_t n)
{
	int64_t i, bad = 0;

	for (i = 0; i < n; i++)
		if (gpu_bits(y[i]) != gpu_bits(want[i]) && bad++ < 3 && who)
			cr_log_error("%s: y[%lld] = %a, want %a", who,
			    (long long)i, (double)y[i], (double)want[i]);
	return bad;
}

#endif
