/*
 * Private to specialize/: the IR of the documented decode of a weight in
 * a block format (docs/kernels.md, "Quantized weight formats"), shared by
 * the kernels that take one (k_gemm.c, k_embedding.c), so that the codec
 * is written once in IR.  Implemented in k_quant.c.
 *
 * Every expression returned is a fresh tree.  The decode is exact in f32:
 *   q8_0  d * f32(q), q the int8 at byte 2 + j % 32 of the block;
 *   q4_0  d * f32(q - 8), q the low nibble of byte 2 + j % 16 for
 *         j % 32 < 16, else its high nibble;
 *   q4_k  (d * f32(sc)) * f32(q) - dmin * f32(m), sc and m sub-block
 *         s = j % 256 / 32's 6-bit scale and min, q the low nibble of byte
 *         16 + s / 2 * 32 + j % 32 for an even s, else the high one; every
 *         product is exact, only the subtraction rounds.
 */
#ifndef KS_K_QUANT_H
#define KS_K_QUANT_H

#include "specialize.h"

typedef struct {
	ks_ir_kernel_t *k;
	int W;                  /* the byte buffer (ks_ir_buffer_bytes) */
	ks_dtype_t fmt;         /* KS_DTYPE_Q8_0 .. */
	int qk, qb;             /* weights and bytes of a block */
} ks_quant_t;

/* Declares buffer NAME of format FMT in K (a byte buffer whose dtype says
 * the format, dims "ROWS,COLS/qk*qb": bytes) and fills Q.  FMT must be a
 * block format. */
void ks_quant_buffer(ks_quant_t *q, ks_ir_kernel_t *k, const char *name,
    ks_dtype_t fmt, const char *rows, const char *cols);

/* The bytes of a row of COLS weights (COLS an i64 expression tree, which
 * this takes): COLS / qk * qb. */
ks_expr_t *ks_quant_row_bytes(const ks_quant_t *q, ks_expr_t *cols);

/* The byte of W at uniform variable BASE + OFF (OFF an i64 tree), as an
 * i32 0..255. */
ks_expr_t *ks_quant_byte(const ks_quant_t *q, int base, ks_expr_t *off);

/* The f16 at bytes BASE + AT, BASE + AT + 1 (little-endian), as f32. */
ks_expr_t *ks_quant_f16(const ks_quant_t *q, int base, int64_t at);

/* The i32 constant V. */
ks_expr_t *ks_quant_i32(const ks_quant_t *q, int64_t v);

/* The f32 value of weight J (an i64 variable) of the row whose bytes
 * start at ROW (an i64 variable). */
ks_expr_t *ks_quant_value(const ks_quant_t *q, int row, int j);

/* q4_k: the f32 6-bit scale (MIN 0) or min (MIN 1) of sub-block SB (an
 * i64 variable, 0..7) of the block at BASE. */
ks_expr_t *ks_quant_q4k_scale(const ks_quant_t *q, int base, int sb,
    int min);

/* ks_quant_q4k_scale for the constant sub-block S (0..7). */
ks_expr_t *ks_quant_q4k_scale_at(const ks_quant_t *q, int base, int s,
    int min);

/*
 * The fast mode's KS_X_QDOT (specialize.h) of W (Q) and x (byte buffer
 * X, q8_0) for a pair of blocks, accumulated into the f32 lane variable
 * ACC: W's bytes from variable WV + WADD, x's from XV + XADD; I blocks
 * (1, 2), or for q4_k the pair (0..3) of the super-block at WV (WADD 0)
 * or 4, the super-block's min term (x's offset its super-block's).  Its
 * value, in each lane l of 16, with h = l / 8 the block and g = l % 8
 * its group of 4 weights (q4_k: the sub-block 2 I + h), P = the sum of
 * the 4 products w x (i32, exact), dx and dw the blocks' f16 scales:
 *   q8_0, q4_0  fma(dx * dw, f32(P), acc), dx * dw and P 0 in an absent
 *               block's lanes;
 *   q4_k pair   fma(dx * (d * sc), f32(P), acc);
 *   q4_k min    lanes s < 8: fma(dx_s * ((-dmin) * m_s), f32(T_s), acc),
 *               T_s the sum of x block s's 32 codes; lanes 8..15 acc.
 */
ks_expr_t *ks_quant_qdot(const ks_quant_t *q, int X, int64_t i, int wv,
    int64_t wadd, int xv, int64_t xadd, int acc);

/* Checks that a row of weights in SPEC's wdtype (when a block format)
 * tiles into blocks: the dim COL is a constant multiple of the block.
 * KS_E_BAD_SHAPE naming the format and its block otherwise. */
int ks_quant_check(const ks_spec_t *spec, int col, char *err,
    size_t errlen);

#endif
