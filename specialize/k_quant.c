/*
 * k_quant: the decode of a block-format weight in IR (k_quant.h).
 *
 * Positions are i64 trees built afresh for every use (an IR node has one
 * parent): a block's start is either a uniform variable (a caller that
 * hoists it) or row + j / qk * qb, and q4_k's sub-block either a variable
 * or j % 256 / 32.
 */
#include "k_quant.h"

#include <stdio.h>

/* Where a weight's block and sub-block are: variables, or from J. */
typedef struct {
	int row, j;             /* i64 variables (-1: unused) */
	int base, sb;           /* i64 variables, or -1: computed from j */
} at_t;

static ks_expr_t *c64(const ks_quant_t *q, int64_t v)
{
	return ks_x_i64(q->k, v);
}

static ks_expr_t *bin(const ks_quant_t *q, ks_binop_t op, ks_expr_t *a,
    ks_expr_t *b)
{
	return ks_x_bin(q->k, op, a, b);
}

static ks_expr_t *var(const ks_quant_t *q, int v)
{
	return ks_x_var(q->k, v);
}

ks_expr_t *ks_quant_i32(const ks_quant_t *q, int64_t v)
{
	return ks_x_cast(q->k, KS_TY_I32, c64(q, v));
}

void ks_quant_buffer(ks_quant_t *q, ks_ir_kernel_t *k, const char *name,
    ks_dtype_t fmt, const char *rows, const char *cols)
{
	char dims[96];

	q->k = k;
	q->fmt = fmt;
	ks_dtype_block(fmt, &q->qk, &q->qb);
	q->W = ks_ir_buffer_bytes(k, name);
	k->params[q->W].dtype = fmt;
	snprintf(dims, sizeof dims, "%s,%s/%d*%d", rows, cols, q->qk, q->qb);
	ks_ir_buffer_dims(k, q->W, dims);
}

ks_expr_t *ks_quant_row_bytes(const ks_quant_t *q, ks_expr_t *cols)
{
	return bin(q, KS_OP_MUL, bin(q, KS_OP_DIV, cols, c64(q, q->qk)),
	    c64(q, q->qb));
}

/* The byte at BASE + OFF, BASE a variable or (-1) row + j / qk * qb. */
static ks_expr_t *byte_at(const ks_quant_t *q, const at_t *a, ks_expr_t *off)
{
	ks_expr_t *base = a->base >= 0 ? var(q, a->base) : bin(q, KS_OP_ADD,
	    var(q, a->row), bin(q, KS_OP_MUL, bin(q, KS_OP_DIV,
	    var(q, a->j), c64(q, q->qk)), c64(q, q->qb)));

	return ks_x_load(q->k, q->W, bin(q, KS_OP_ADD, base, off));
}

ks_expr_t *ks_quant_byte(const ks_quant_t *q, int base, ks_expr_t *off)
{
	at_t a = { -1, -1, base, -1 };

	return byte_at(q, &a, off);
}

static ks_expr_t *f16_at(const ks_quant_t *q, const at_t *a, int64_t at)
{
	return ks_x_un(q->k, KS_UN_F16, bin(q, KS_OP_BOR, byte_at(q, a,
	    c64(q, at)), bin(q, KS_OP_SHL, byte_at(q, a, c64(q, at + 1)),
	    ks_quant_i32(q, 8))));
}

ks_expr_t *ks_quant_f16(const ks_quant_t *q, int base, int64_t at)
{
	at_t a = { -1, -1, base, -1 };

	return f16_at(q, &a, at);
}

/* q4_k's sub-block, 0..7. */
static ks_expr_t *sub8(const ks_quant_t *q, const at_t *a)
{
	if (a->sb >= 0)
		return var(q, a->sb);
	return bin(q, KS_OP_DIV, bin(q, KS_OP_REM, var(q, a->j), c64(q, 256)),
	    c64(q, 32));
}

/* q4_k: byte AT + s of the 12 packed scale bytes (at block offset 4). */
static ks_expr_t *scale_byte(const ks_quant_t *q, const at_t *a, int64_t at)
{
	return byte_at(q, a, bin(q, KS_OP_ADD, c64(q, 4 + at), sub8(q, a)));
}

/*
 * q4_k: sub-block s's 6-bit scale (MIN = 0) or min (MIN = 1), as f32:
 * for s < 4, the low 6 bits of byte s (scale) or s + 4 (min); for s >= 4,
 * the 4 bits of byte s + 4 (low nibble: scale, high: min) below the top 2
 * bits of byte s - 4 (scale) or s (min).  Both forms are computed (their
 * bytes lie in the block either way) and selected.
 */
static ks_expr_t *scale6(const ks_quant_t *q, const at_t *a, int min)
{
	ks_expr_t *lo = bin(q, KS_OP_BAND, scale_byte(q, a, min ? 4 : 0),
	    ks_quant_i32(q, 63));
	ks_expr_t *q4 = min ? bin(q, KS_OP_SHR, scale_byte(q, a, 4),
	    ks_quant_i32(q, 4)) : bin(q, KS_OP_BAND, scale_byte(q, a, 4),
	    ks_quant_i32(q, 15));
	ks_expr_t *hi = bin(q, KS_OP_BOR, q4, bin(q, KS_OP_SHL, bin(q,
	    KS_OP_SHR, scale_byte(q, a, min ? 0 : -4), ks_quant_i32(q, 6)),
	    ks_quant_i32(q, 4)));

	return ks_x_cast(q->k, KS_TY_F32, ks_x_select(q->k, bin(q, KS_OP_LT,
	    sub8(q, a), c64(q, 4)), lo, hi));
}

ks_expr_t *ks_quant_q4k_scale(const ks_quant_t *q, int base, int sb,
    int min)
{
	at_t a = { -1, -1, base, sb };

	return scale6(q, &a, min);
}

ks_expr_t *ks_quant_q4k_scale_at(const ks_quant_t *q, int base, int s,
    int min)
{
	at_t a = { -1, -1, base, -1 };
	ks_expr_t *v;

	/* scale6's two forms, the one of S chosen here. */
	if (s < 4)
		v = bin(q, KS_OP_BAND, byte_at(q, &a, c64(q, 4 + s +
		    (min ? 4 : 0))), ks_quant_i32(q, 63));
	else
		v = bin(q, KS_OP_BOR, min ? bin(q, KS_OP_SHR, byte_at(q, &a,
		    c64(q, 4 + s + 4)), ks_quant_i32(q, 4)) : bin(q,
		    KS_OP_BAND, byte_at(q, &a, c64(q, 4 + s + 4)),
		    ks_quant_i32(q, 15)), bin(q, KS_OP_SHL, bin(q, KS_OP_SHR,
		    byte_at(q, &a, c64(q, 4 + s - (min ? 0 : 4))),
		    ks_quant_i32(q, 6)), ks_quant_i32(q, 4)));
	return ks_x_cast(q->k, KS_TY_F32, v);
}

/* Weight j's index in its block of 32, or in q4_k's sub-block of 32. */
static ks_expr_t *in32(const ks_quant_t *q, const at_t *a)
{
	return bin(q, KS_OP_REM, var(q, a->j), c64(q, 32));
}

/* q4_k: the byte of weight j's nibble, 16 + s / 2 * 32 + j % 32. */
static ks_expr_t *q4k_code(const ks_quant_t *q, const at_t *a)
{
	return byte_at(q, a, bin(q, KS_OP_ADD, bin(q, KS_OP_ADD, c64(q, 16),
	    bin(q, KS_OP_MUL, bin(q, KS_OP_DIV, sub8(q, a), c64(q, 2)),
	    c64(q, 32))), in32(q, a)));
}

ks_expr_t *ks_quant_value(const ks_quant_t *q, int row, int j)
{
	ks_ir_kernel_t *k = q->k;
	at_t a = { row, j, -1, -1 };
	ks_expr_t *c;

	switch (q->fmt) {
	case KS_DTYPE_Q8_0:
		c = byte_at(q, &a, bin(q, KS_OP_ADD, c64(q, 2), in32(q, &a)));
		c = bin(q, KS_OP_SUB, bin(q, KS_OP_BXOR, c, ks_quant_i32(q,
		    128)), ks_quant_i32(q, 128));     /* the int8 */
		return bin(q, KS_OP_MUL, f16_at(q, &a, 0), ks_x_cast(k,
		    KS_TY_F32, c));
	case KS_DTYPE_Q4_0:
		c = ks_x_select(k, bin(q, KS_OP_LT, in32(q, &a), c64(q, 16)),
		    bin(q, KS_OP_BAND, byte_at(q, &a, bin(q, KS_OP_ADD,
		    c64(q, 2), bin(q, KS_OP_REM, var(q, j), c64(q, 16)))),
		    ks_quant_i32(q, 15)), bin(q, KS_OP_SHR, byte_at(q, &a,
		    bin(q, KS_OP_ADD, c64(q, 2), bin(q, KS_OP_REM, var(q, j),
		    c64(q, 16)))), ks_quant_i32(q, 4)));
		return bin(q, KS_OP_MUL, f16_at(q, &a, 0), ks_x_cast(k,
		    KS_TY_F32, bin(q, KS_OP_SUB, c, ks_quant_i32(q, 8))));
	default:                /* KS_DTYPE_Q4_K */
		c = ks_x_select(k, bin(q, KS_OP_EQ, bin(q, KS_OP_REM,
		    sub8(q, &a), c64(q, 2)), c64(q, 0)), bin(q, KS_OP_BAND,
		    q4k_code(q, &a), ks_quant_i32(q, 15)), bin(q, KS_OP_SHR,
		    q4k_code(q, &a), ks_quant_i32(q, 4)));
		return bin(q, KS_OP_SUB, bin(q, KS_OP_MUL, bin(q, KS_OP_MUL,
		    f16_at(q, &a, 0), scale6(q, &a, 0)), ks_x_cast(k,
		    KS_TY_F32, c)), bin(q, KS_OP_MUL, f16_at(q, &a, 2),
		    scale6(q, &a, 1)));
	}
}

int ks_quant_check(const ks_spec_t *spec, int col, char *err,
    size_t errlen)
{
	const ks_dim_t *c = &spec->dims[col];
	int qk;

	if (!ks_dtype_block(spec->wdtype, &qk, NULL) || (c->is_const &&
	    c->value % qk == 0))
		return KS_OK;
	if (err != NULL && errlen > 0 && c->is_const)
		snprintf(err, errlen, "wdtype %s needs %s a multiple of its "
		    "block of %d weights (%s = %lld)",
		    ks_dtype_name(spec->wdtype), c->name, qk, c->name,
		    (long long)c->value);
	else if (err != NULL && errlen > 0)
		snprintf(err, errlen, "wdtype %s needs %s constant, a "
		    "multiple of its block of %d weights (%s is dynamic)",
		    ks_dtype_name(spec->wdtype), c->name, qk, c->name);
	return KS_E_BAD_SHAPE;
}
