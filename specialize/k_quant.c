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

/* ---- the fast mode's block dot (KS_X_QDOT) ---- */

/* A pair's operands: W's bytes from var wv + wadd, x's from xv + xadd
 * (x a q8_0 byte buffer), I blocks or q4_k's pair. */
typedef struct {
	const ks_quant_t *q;
	int X, wv, xv;
	int64_t wadd, xadd, i;
} qd_t;

/* VAR + ADD, a fresh tree. */
static ks_expr_t *at_var(const ks_quant_t *q, int v, int64_t add)
{
	return add ? bin(q, KS_OP_ADD, var(q, v), c64(q, add)) : var(q, v);
}

/* The lane's block of the pair for its loads: lane / 8, or 0 when the
 * pair has one block (the absent block's lanes read the first's bytes
 * and give 0). */
static ks_expr_t *qd_h(const qd_t *d)
{
	if (d->q->fmt != KS_DTYPE_Q4_K && d->i == 1)
		return c64(d->q, 0);
	return bin(d->q, KS_OP_SHR, ks_x_lane(d->q->k), c64(d->q, 3));
}

/* The lane's group of 4 in its block, lane % 8. */
static ks_expr_t *qd_g(const qd_t *d)
{
	return bin(d->q, KS_OP_BAND, ks_x_lane(d->q->k), c64(d->q, 7));
}

/* x's block of the lane: xv + xadd + 34 h. */
static ks_expr_t *qd_xblock(const qd_t *d)
{
	return bin(d->q, KS_OP_ADD, at_var(d->q, d->xv, d->xadd),
	    bin(d->q, KS_OP_MUL, qd_h(d), c64(d->q, 34)));
}

/* W's block of the lane (q8_0, q4_0): wv + wadd + qb h. */
static ks_expr_t *qd_wblock(const qd_t *d)
{
	return bin(d->q, KS_OP_ADD, at_var(d->q, d->wv, d->wadd),
	    bin(d->q, KS_OP_MUL, qd_h(d), c64(d->q, d->q->qb)));
}

/* The byte of buffer P at BASE + OFF (fresh trees), i32 0..255. */
static ks_expr_t *qd_byte(const ks_quant_t *q, int p, ks_expr_t *base,
    int64_t off)
{
	return ks_x_load(q->k, p, off ? bin(q, KS_OP_ADD, base, c64(q, off)) :
	    base);
}

/* The int8 at BASE + OFF of P, (b ^ 128) - 128. */
static ks_expr_t *qd_int8(const ks_quant_t *q, int p, ks_expr_t *base,
    int64_t off)
{
	return bin(q, KS_OP_SUB, bin(q, KS_OP_BXOR, qd_byte(q, p, base, off),
	    ks_quant_i32(q, 128)), ks_quant_i32(q, 128));
}

/* The f16 at BASE(), BASE() + 1 of P, as f32; BASE builds fresh trees. */
static ks_expr_t *qd_f16(const qd_t *d, int p,
    ks_expr_t *(*base)(const qd_t *), int64_t off)
{
	const ks_quant_t *q = d->q;

	return ks_x_un(q->k, KS_UN_F16, bin(q, KS_OP_BOR, qd_byte(q, p,
	    base(d), off), bin(q, KS_OP_SHL, qd_byte(q, p, base(d), off + 1),
	    ks_quant_i32(q, 8))));
}

/* Code T (0..3) of the lane's group of 4 in x: the int8 at byte
 * 2 + 4 g + t of its block. */
static ks_expr_t *qd_x(const qd_t *d, int t)
{
	const ks_quant_t *q = d->q;

	return qd_int8(q, d->X, bin(q, KS_OP_ADD, qd_xblock(d), bin(q,
	    KS_OP_MUL, qd_g(d), c64(q, 4))), 2 + t);
}

/* Weight T of the lane's group of 4, as an i32: q8_0 the int8 at byte
 * 2 + 4 g + t; q4_0 element e = 4 g + t, the nibble e / 16 of byte
 * 2 + e % 16, minus 8; q4_k the nibble h of byte 16 + 32 pair + 4 g + t
 * of the super-block. */
static ks_expr_t *qd_w(const qd_t *d, int t)
{
	const ks_quant_t *q = d->q;
	ks_expr_t *b;

	switch (q->fmt) {
	case KS_DTYPE_Q8_0:
		return qd_int8(q, q->W, bin(q, KS_OP_ADD, qd_wblock(d), bin(q,
		    KS_OP_MUL, qd_g(d), c64(q, 4))), 2 + t);
	case KS_DTYPE_Q4_0:
		b = qd_byte(q, q->W, bin(q, KS_OP_ADD, qd_wblock(d), bin(q,
		    KS_OP_MUL, bin(q, KS_OP_BAND, qd_g(d), c64(q, 3)),
		    c64(q, 4))), 2 + t);
		return bin(q, KS_OP_SUB, bin(q, KS_OP_BAND, bin(q, KS_OP_SHR,
		    b, ks_x_cast(q->k, KS_TY_I32, bin(q, KS_OP_MUL, bin(q,
		    KS_OP_SHR, qd_g(d), c64(q, 2)), c64(q, 4)))),
		    ks_quant_i32(q, 15)), ks_quant_i32(q, 8));
	default:
		b = qd_byte(q, q->W, bin(q, KS_OP_ADD, at_var(q, d->wv,
		    d->wadd), bin(q, KS_OP_MUL, qd_g(d), c64(q, 4))),
		    16 + 32 * d->i + t);
		return bin(q, KS_OP_BAND, bin(q, KS_OP_SHR, b, ks_x_cast(q->k,
		    KS_TY_I32, bin(q, KS_OP_MUL, qd_h(d), c64(q, 4)))),
		    ks_quant_i32(q, 15));
	}
}

/* The sum over the lane's group of 4 of W[t] x[t] (WEIGHTS 1) or of x[t]
 * (WEIGHTS 0), in i32 (exact), in order t = 0..3. */
static ks_expr_t *qd_sum(const qd_t *d, int weights)
{
	const ks_quant_t *q = d->q;
	ks_expr_t *s = NULL, *p;
	int t;

	for (t = 0; t < 4; t++) {
		p = weights ? bin(q, KS_OP_MUL, qd_w(d, t), qd_x(d, t)) :
		    qd_x(d, t);
		s = s ? bin(q, KS_OP_ADD, s, p) : p;
	}
	return s;
}

/* q4_k: the f32 6-bit scale (MIN 0) or min of the lane's sub-block,
 * 2 pair + h. */
static ks_expr_t *qd_q4k_scale(const qd_t *d, int base, int min)
{
	const ks_quant_t *q = d->q;
	int s = 2 * (int)d->i;

	return ks_x_select(q->k, bin(q, KS_OP_EQ, qd_h(d), c64(q, 0)),
	    ks_quant_q4k_scale_at(q, base, s, min),
	    ks_quant_q4k_scale_at(q, base, s + 1, min));
}

static ks_expr_t *qd_wbase(const qd_t *d)
{
	return at_var(d->q, d->wv, d->wadd);
}

/* q4_k's min term (pair 4): the lane's sub-block s = lane % 8, its x
 * block at xv + xadd + 34 s. */
static ks_expr_t *qd_sblock(const qd_t *d)
{
	return bin(d->q, KS_OP_ADD, at_var(d->q, d->xv, d->xadd),
	    bin(d->q, KS_OP_MUL, qd_g(d), c64(d->q, 34)));
}

/* q4_k: lanes s < 8 fma(dx_s ((-dmin) m_s), f32(T_s), acc), T_s the sum
 * of x block s's 32 codes (i32, exact) and m_s sub-block s's 6-bit min;
 * lanes 8..15 acc. */
static ks_expr_t *q4k_min(const qd_t *d, int wsb, int acc)
{
	const ks_quant_t *q = d->q;
	ks_ir_kernel_t *k = q->k;
	ks_expr_t *t = NULL, *m = NULL, *b;
	int j, s;

	for (j = 0; j < 32; j++) {
		ks_expr_t *c = qd_int8(q, d->X, qd_sblock(d), 2 + j);

		t = t ? bin(q, KS_OP_ADD, t, c) : c;
	}
	for (s = 7; s >= 0; s--) {
		ks_expr_t *v = ks_quant_q4k_scale_at(q, wsb, s, 1);

		m = m ? ks_x_select(k, bin(q, KS_OP_EQ, qd_g(d), c64(q, s)), v,
		    m) : v;
	}
	b = bin(q, KS_OP_MUL, qd_f16(d, d->X, qd_sblock, 0), bin(q,
	    KS_OP_MUL, ks_x_un(k, KS_UN_NEG, ks_quant_f16(q, wsb, 2)), m));
	return ks_x_select(k, bin(q, KS_OP_LT, ks_x_lane(k), c64(q, 8)),
	    ks_x_fma(k, b, ks_x_cast(k, KS_TY_F32, t), var(q, acc)),
	    var(q, acc));
}

ks_expr_t *ks_quant_qdot(const ks_quant_t *q, int X, int64_t i, int wv,
    int64_t wadd, int xv, int64_t xadd, int acc)
{
	int wsb = wv;           /* q4_k: the super-block's start (wadd 0) */
	qd_t d = { q, X, wv, xv, wadd, xadd, i };
	ks_ir_kernel_t *k = q->k;
	ks_expr_t *dx = qd_f16(&d, X, qd_xblock, 0), *term, *c, *p;

	if (q->fmt == KS_DTYPE_Q4_K && i == 4) {
		term = q4k_min(&d, wsb, acc);
	} else if (q->fmt == KS_DTYPE_Q4_K) {
		/* fma(dx (d sc), P, acc). */
		ks_expr_t *a = bin(q, KS_OP_MUL, dx, bin(q, KS_OP_MUL,
		    ks_quant_f16(q, wsb, 0), qd_q4k_scale(&d, wsb, 0)));

		term = ks_x_fma(k, a, ks_x_cast(k, KS_TY_F32, qd_sum(&d, 1)),
		    var(q, acc));
	} else {
		/* fma(dx dw, P, acc); an absent block's lanes take 0 and 0. */
		c = bin(q, KS_OP_MUL, dx, qd_f16(&d, q->W, qd_wblock, 0));
		p = ks_x_cast(k, KS_TY_F32, qd_sum(&d, 1));
		if (i == 1) {
			c = ks_x_select(k, bin(q, KS_OP_LT, ks_x_lane(k),
			    c64(q, 8)), c, ks_x_f32(k, 0.0f));
			p = ks_x_select(k, bin(q, KS_OP_LT, ks_x_lane(k),
			    c64(q, 8)), p, ks_x_f32(k, 0.0f));
		}
		term = ks_x_fma(k, c, p, var(q, acc));
	}
	return ks_x_qdot(k, q->W, X, i, term, qd_wbase(&d), at_var(q, xv,
	    xadd));
}
