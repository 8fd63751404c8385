/*
 * Plain-C reference decoder of the quantized weight formats q8_0, q4_0 and
 * q4_k, written from docs/kernels.md ("Quantized weight formats") alone:
 * one weight at a time, from the documented byte positions, by the
 * documented operations, in their order.  It shares no code with
 * libkspec's codec (client/quant.c), so that each checks the other against
 * llama.cpp's golden vectors (tests/test_quant.c).  Kernel tests build
 * their references on it: weight (n, j) of a quantized W is
 * ref_dequant(fmt, W + n * ref_qrow_bytes(fmt, K), j).
 *
 * Test plants.  A test that defines REF_QUANT_PLANT(p) before including
 * this header (as an expression that is true when plant p is on) gets the
 * decoder with these defects switchable, to show that its checker catches
 * each (docs/kernels.md, "Checked against llama.cpp"); without it they
 * compile to nothing.
 */
#ifndef KS_REF_QUANT_H
#define KS_REF_QUANT_H

#include <stdint.h>
#include <string.h>

#include "ref.h"

enum { REF_Q8_0, REF_Q4_0, REF_Q4_K, REF_QFMT_N };

enum {
	REF_PLANT_NONE,
	REF_PLANT_NIBBLE_SWAP,    /* q4_0, q4_k: high nibble for low */
	REF_PLANT_SCALE_BF16,     /* d and dmin read as bf16, not f16 */
	REF_PLANT_Q4K_SCALE_BITS, /* m[4..7]'s top bits from s[c - 4] */
	REF_PLANT_BLOCK_BOUNDARY, /* weight j's scale from block (j-1)/B */
	REF_PLANT_TAIL,           /* a row's last block left out */
	REF_PLANT_N
};

#ifndef REF_QUANT_PLANT
#define REF_QUANT_PLANT(p) 0
#endif

static const char *const ref_qfmt_names[REF_QFMT_N] = {
	"q8_0", "q4_0", "q4_k"
};

/* REF_Q8_0.. for a format's name, -1 for anything else. */
static inline int ref_qfmt_of(const char *name)
{
	int f;

	for (f = 0; f < REF_QFMT_N; f++) {
		if (strcmp(name, ref_qfmt_names[f]) == 0)
			return f;
	}
	return -1;
}

/* Weights per block along K. */
static inline int64_t ref_qblock(int fmt)
{
	return fmt == REF_Q4_K ? 256 : 32;
}

/* Bytes per block. */
static inline int64_t ref_qblock_bytes(int fmt)
{
	return fmt == REF_Q8_0 ? 34 : fmt == REF_Q4_0 ? 18 : 144;
}

/* Bytes of one row of K weights (K a multiple of the block). */
static inline int64_t ref_qrow_bytes(int fmt, int64_t k)
{
	return k / ref_qblock(fmt) * ref_qblock_bytes(fmt);
}

/* The f16 at P (little-endian), as f32. */
static inline float ref_qf16(const uint8_t *p)
{
	uint16_t h = (uint16_t)(p[0] | p[1] << 8);

	if (REF_QUANT_PLANT(REF_PLANT_SCALE_BF16))
		return ref_bf16_to_f32(h);
	return ref_f16_to_f32(h);
}

/* q4_k: the 6-bit scale and min of sub-block C from the 12 bytes S. */
static inline void ref_q4k_scale_min(const uint8_t *s, int c, int *sc,
    int *m)
{
	if (c < 4) {
		*sc = s[c] & 63;
		*m = s[c + 4] & 63;
		return;
	}
	*sc = (s[c + 4] & 15) | ((s[c - 4] >> 6) << 4);
	*m = (s[c + 4] >> 4) | ((s[c] >> 6) << 4);
	if (REF_QUANT_PLANT(REF_PLANT_Q4K_SCALE_BITS))
		*m = (s[c + 4] >> 4) | ((s[c - 4] >> 6) << 4);
}

/* Weight J of the row whose bytes start at ROW. */
static inline float ref_dequant(int fmt, const void *row, int64_t j)
{
	const uint8_t *bytes = row;
	int64_t nb = ref_qblock(fmt), b = j / nb, i = j % nb, bs = b;
	const uint8_t *blk, *sblk;

	if (REF_QUANT_PLANT(REF_PLANT_BLOCK_BOUNDARY) && j > 0)
		bs = (j - 1) / nb;
	blk = bytes + b * ref_qblock_bytes(fmt);        /* the codes */
	sblk = bytes + bs * ref_qblock_bytes(fmt);      /* the scales */
	if (fmt == REF_Q8_0)
		return (float)(int8_t)blk[2 + i] * ref_qf16(sblk);
	if (fmt == REF_Q4_0) {
		int high = i >= 16, q;

		if (REF_QUANT_PLANT(REF_PLANT_NIBBLE_SWAP))
			high = !high;
		q = high ? blk[2 + i % 16] >> 4 : blk[2 + i % 16] & 15;
		return (float)(q - 8) * ref_qf16(sblk);
	}
	{
		int c = (int)(i / 32), t = (int)(i % 32), odd = c & 1, sc, m, q;
		uint8_t byte = blk[16 + 32 * (c / 2) + t];

		if (REF_QUANT_PLANT(REF_PLANT_NIBBLE_SWAP))
			odd = !odd;
		q = odd ? byte >> 4 : byte & 15;
		ref_q4k_scale_min(sblk + 4, c, &sc, &m);
		return (ref_qf16(sblk) * (float)sc) * (float)q -
		    ref_qf16(sblk + 2) * (float)m;
	}
}

/* The K weights of one row into OUT. */
static inline void ref_dequant_row(int fmt, const void *row, int64_t k,
    float *out)
{
	int64_t j;

	if (REF_QUANT_PLANT(REF_PLANT_TAIL))
		k -= ref_qblock(fmt);
	for (j = 0; j < k; j++)
		out[j] = ref_dequant(fmt, row, j);
}

/* ROWS rows of K weights, the rows' bytes back to back from SRC. */
static inline void ref_dequant_rows(int fmt, const void *src, int64_t rows,
    int64_t k, float *out)
{
	int64_t r;

	for (r = 0; r < rows; r++)
		ref_dequant_row(fmt, (const uint8_t *)src +
		    r * ref_qrow_bytes(fmt, k), k, out + r * k);
}

#endif
