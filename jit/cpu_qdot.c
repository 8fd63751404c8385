/*
 * cpu_qdot: the fast mode's block dot product (KS_X_QDOT) natively, for
 * cpu_vec.c's 16-wide lanes on AVX-512 F and BW targets, with vpdpbusd
 * on those with AVX-512 VNNI.
 *
 * A QDOT's 16 lanes are one 512-bit vector: the pair's 64 weight codes
 * and 64 x codes side by side in bytes, lane l's 4 in bytes 4 l .. 4 l + 3,
 * so that the integer sums of 4 products are a vpmaddubsw (u8 x s8 to
 * pairs of i16) and a vpmaddwd against ones (to i32): exact, as no i16
 * saturates (a nibble is at most 15 and a q8_0 code at most 128 in
 * magnitude; 2 * 15 * 128 < 2^15).  q4_0's codes are nibbles minus 8, so
 * the nibbles multiply and 8 times the sum of x's 4 codes is subtracted;
 * its pair's 36 bytes come in one masked load and two word permutes give
 * the codes and the scales.  q8_0's signed codes go through i16 instead
 * (vpmovsxbw, vpmaddwd, then adjacent i32 pairs added: u8 x s8 could not
 * hold them).  The scales are f16 converted by vcvtph2ps.  q4_k's 6-bit
 * scales and mins are unpacked once per row and super-block into a
 * vector of 16 f32 (dx_s (d sc_s) and dx_s ((-dmin) m_s), x's scales
 * multiplied in there) that each pair permutes, and its min term takes
 * the sums of x's blocks, computed once per super-block.
 *
 * With AVX-512 VNNI (L->vnni) each sum of 4 is one vpdpbusd (u8 x s8
 * into i32, no intermediate rounding or saturation).  q4_0 and q4_k
 * mask their high nibbles in place rather than shift them: those lanes
 * multiply 16 q, so their i32 sums are 16 P, exact in f32 (|16 P| <
 * 2^17), and x's scales for those lanes, computed once for every row,
 * are over 16.  A scale is a product of f16 values (q4_k: the rounded
 * dx (d sc)), far above f32's subnormals, so dividing it by 16 is exact
 * and fma(s / 16, 16 P, acc) is fma(s, P, acc) bit for bit.  q4_0's
 * offset of 8 (128 for the high lanes) times x's sums is the vpdpbusd's
 * starting value.  q8_0's codes are signed on both sides: x's plus 128
 * multiply them, and a second vpdpbusd of 128s takes 128 times their sum
 * off.
 *
 * Every f32 operation is the plain IR's, one lane per element, in its
 * order (a product's operands may swap: IEEE multiplication commutes),
 * so the bits are the plain IR's; tests/test_k_fast.c checks each form
 * against the reference.
 *
 * Each step is one extended asm statement with register operands and
 * early-clobbered temporaries; GCC allocates and places them.  x's side
 * of a pair (its codes, their sums, its scales) is computed once per
 * LANES statement and reused for every row of W (the memo).
 */
#include "cpu_lower.h"

#include <stdio.h>
#include <string.h>

enum { VW = 16 };

typedef struct {
	lower_t *L;
	gcc_jit_type *vi, *vf;
} qc_t;

static gcc_jit_rvalue *rv(gcc_jit_lvalue *lv)
{
	return gcc_jit_lvalue_as_rvalue(lv);
}

/* The i32 vector of V[0..16). */
static gcc_jit_rvalue *ivec(qc_t *q, const int *v)
{
	gcc_jit_rvalue *el[VW];
	gcc_jit_lvalue *c = ks_cpu_local(q->L, q->vi, "vk");
	int i;

	for (i = 0; i < VW; i++)
		el[i] = gcc_jit_context_new_rvalue_from_int(q->L->ctx,
		    q->L->t_i32, v[i]);
	/* Through a local: a vector constant as an asm operand crashes
	 * libgccjit 12. */
	gcc_jit_block_add_assignment(q->L->blk, NULL, c,
	    gcc_jit_context_new_rvalue_from_vector(q->L->ctx, NULL, q->vi, VW,
	    el));
	return rv(c);
}

/* Every i32 lane V. */
static gcc_jit_rvalue *splat(qc_t *q, int v)
{
	int a[VW], i;

	for (i = 0; i < VW; i++)
		a[i] = v;
	return ivec(q, a);
}

/* The i32 vector of LO in lanes 0..3 and 8..11 (a q4_0 pair's low
 * nibbles), HI in 4..7 and 12..15 (its high ones). */
static gcc_jit_rvalue *hi_lanes(qc_t *q, int lo, int hi)
{
	int a[VW], i;

	for (i = 0; i < VW; i++)
		a[i] = i & 4 ? hi : lo;
	return ivec(q, a);
}

/* The bits of f32 1 and 1/16. */
enum { F32_ONE = 0x3f800000, F32_16TH = 0x3d800000 };

/*
 * asm TMPL with NOUT early-clobbered vector outputs (OUT[i], f32 where
 * the bit of FMASK is set, else i32), the first read and written when
 * INIT0 (its value before) is not NULL, then NIN inputs IN with
 * constraints IC, a letter each ('k': "Yk", a mask register).  Returns
 * the first output.
 */
static gcc_jit_rvalue *qasm(qc_t *q, const char *tmpl, int nout, int fmask,
    gcc_jit_rvalue *init0, gcc_jit_lvalue **out, int nin, const char *ic,
    gcc_jit_rvalue **in)
{
	gcc_jit_extended_asm *a;
	char c[2] = { 0, 0 };
	int i;

	/* The outputs first: libgccjit 12 replays its records in the order
	 * made, and crashes on an asm whose output local comes after it. */
	for (i = 0; i < nout; i++)
		out[i] = ks_cpu_local(q->L, fmask >> i & 1 ? q->vf : q->vi,
		    "vq");
	if (init0 != NULL)
		gcc_jit_block_add_assignment(q->L->blk, NULL, out[0], init0);
	a = gcc_jit_block_add_extended_asm(q->L->blk, NULL, tmpl);
	for (i = 0; i < nout; i++)
		gcc_jit_extended_asm_add_output_operand(a, NULL, i == 0 &&
		    init0 != NULL ? "+&v" : "=&v", out[i]);
	for (i = 0; i < nin; i++) {
		c[0] = ic[i];
		gcc_jit_extended_asm_add_input_operand(a, NULL, ic[i] == 'k' ?
		    "Yk" : c, in[i]);
	}
	return rv(out[0]);
}

/* Whether A and B are the same expression (the same operands). */
static int same_expr(const ks_expr_t *a, const ks_expr_t *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return a->kind == b->kind && a->type == b->type && a->op == b->op &&
	    a->param == b->param && a->var == b->var && a->i == b->i &&
	    a->un == b->un && same_expr(a->a, b->a) &&
	    same_expr(a->b, b->b) && same_expr(a->c, b->c);
}

/* The memo's entry of KIND for AT and SUB, or NULL. */
static gcc_jit_rvalue **memo_find(ks_qdot_memo_t *m, int kind,
    const ks_expr_t *at, int sub)
{
	int i;

	for (i = 0; i < m->n; i++)
		if (m->e[i].kind == kind && m->e[i].sub == sub &&
		    same_expr(m->e[i].at, at))
			return m->e[i].v;
	return NULL;
}

static gcc_jit_rvalue **memo_add(ks_qdot_memo_t *m, int kind,
    const ks_expr_t *at, int sub)
{
	if (m->n == KS_QDOT_MEMO)
		m->n = 0;       /* forget: recomputed, never wrong */
	m->e[m->n].kind = kind;
	m->e[m->n].sub = sub;
	m->e[m->n].at = at;
	return m->e[m->n++].v;
}

enum { MEMO_X, MEMO_Q4K, MEMO_DX, MEMO_TSUM };

/* E's offset into x less its constant: a q4_k pair's x offset is its
 * super-block's plus 68 p. */
static const ks_expr_t *sb_of(const ks_expr_t *c)
{
	return c->kind == KS_X_BIN && c->op == KS_OP_ADD &&
	    c->b->kind == KS_X_CONST ? c->a : c;
}

/*
 * x's side of the pair at XP + OFF (memo: AT, SUB): [0] its codes (block
 * 0 in bytes 0..31, block 1 in 32..63, zero when absent), [1] q4_0: 8
 * times each lane's sum of 4 codes (i32); q4_k: that sum (f32); q8_0:
 * block 1's codes as i16 ([0] then block 0's), [2] the scales dx per
 * lane (f32, 0 when absent; not q4_k's).
 */
static gcc_jit_rvalue **x_side(qc_t *q, ks_qdot_memo_t *m,
    const ks_expr_t *at, int sub, ks_dtype_t fmt, int two,
    gcc_jit_rvalue *xp, int off)
{
	gcc_jit_rvalue **v = memo_find(m, MEMO_X, at, sub), *in[3];
	gcc_jit_lvalue *out[2];
	char t[256];

	if (v != NULL)
		return v;
	v = memo_add(m, MEMO_X, at, sub);
	v[1] = v[2] = NULL;
	in[0] = xp;
	if (fmt == KS_DTYPE_Q8_0 && q->L->vnni) {
		/* The codes plus 128, as u8 (vpdpbusd's unsigned side). */
		if (two)
			snprintf(t, sizeof t, "vmovdqu32 %d(%%1), %%t0\n\t"
			    "vinserti64x4 $1, %d(%%1), %%g0, %%g0\n\t"
			    "vpxord %%2, %%g0, %%g0", off + 2, off + 36);
		else
			snprintf(t, sizeof t, "vmovdqu32 %d(%%1), %%t0\n\t"
			    "vpxord %%2, %%g0, %%g0", off + 2);
		in[1] = splat(q, (int)0x80808080u);
		v[0] = qasm(q, t, 1, 0, NULL, out, 2, "rv", in);
	} else if (fmt == KS_DTYPE_Q8_0) {
		snprintf(t, sizeof t, "vpmovsxbw %d(%%1), %%g0", off + 2);
		v[0] = qasm(q, t, 1, 0, NULL, out, 1, "r", in);
		snprintf(t, sizeof t, "vpmovsxbw %d(%%1), %%g0", off + 36);
		v[1] = two ? qasm(q, t, 1, 0, NULL, out, 1, "r", in) : NULL;
	} else {
		if (two)
			snprintf(t, sizeof t, "vmovdqu32 %d(%%1), %%t0\n\t"
			    "vinserti64x4 $1, %d(%%1), %%g0, %%g0", off + 2,
			    off + 36);
		else
			snprintf(t, sizeof t, "vmovdqu32 %d(%%1), %%t0",
			    off + 2);
		v[0] = qasm(q, t, 1, 0, NULL, out, 1, "r", in);
		in[0] = v[0];
		in[1] = splat(q, fmt == KS_DTYPE_Q4_0 ? 0x08080808 :
		    0x01010101);
		in[2] = splat(q, 0x00010001);
		/* VNNI, q4_0: minus 8 times the sum (lanes of low nibbles)
		 * or 128 times (high nibbles, which multiply as 16 q). */
		if (fmt == KS_DTYPE_Q4_0 && q->L->vnni) {
			in[1] = hi_lanes(q, 0x08080808, (int)0x80808080u);
			in[2] = splat(q, -1);
		}
		v[1] = qasm(q, fmt == KS_DTYPE_Q4_0 ?
		    "vpmaddubsw %1, %2, %0\n\tvpmaddwd %3, %0, %0" :
		    "vpmaddubsw %1, %2, %0\n\tvpmaddwd %3, %0, %0\n\t"
		    "vcvtdq2ps %0, %0", 1, fmt == KS_DTYPE_Q4_K, NULL, out, 3,
		    "vvv", in);
	}
	if (fmt == KS_DTYPE_Q4_K)
		return v;
	in[0] = xp;
	if (two)
		snprintf(t, sizeof t, "vpbroadcastw %d(%%2), %%x0\n\t"
		    "vpbroadcastw %d(%%2), %%x1\n\t"
		    "vinserti32x4 $1, %%x1, %%t0, %%t0\n\t"
		    "vcvtph2ps %%t0, %%g0", off, off + 34);
	else
		snprintf(t, sizeof t, "vpbroadcastw %d(%%2), %%x0\n\t"
		    "vcvtph2ps %%t0, %%g0", off);
	/* VNNI, q4_0: the high nibbles' lanes' scales over 16. */
	if (fmt == KS_DTYPE_Q4_0 && q->L->vnni) {
		strcat(t, "\n\tvmulps %3, %g0, %g0");
		in[1] = hi_lanes(q, F32_ONE, F32_16TH);
	}
	v[2] = qasm(q, t, 2, 1, NULL, out, fmt == KS_DTYPE_Q4_0 &&
	    q->L->vnni ? 2 : 1, "rv", in);
	return v;
}

/*
 * q4_k: x's scales dx_s of the 8 blocks of the super-block whose pair
 * e->i is at XP (e->i 4: the super-block itself), in lanes s and 8 + s
 * (f32), for every row (memo).
 */
static gcc_jit_rvalue *q4k_dx(qc_t *q, ks_qdot_memo_t *m, const ks_expr_t *e,
    gcc_jit_rvalue *xp)
{
	const ks_expr_t *at = sb_of(e->c);
	gcc_jit_rvalue **v = memo_find(m, MEMO_DX, at, 0), *in[2];
	gcc_jit_lvalue *out[1];
	char tmpl[512];
	int n = 0, s, base = e->i == 4 ? 0 : -68 * (int)e->i;

	if (v != NULL)
		return v[0];
	v = memo_add(m, MEMO_DX, at, 0);
	n += snprintf(tmpl + n, sizeof tmpl - (size_t)n,
	    "vpxord %%x0, %%x0, %%x0\n\t");
	for (s = 0; s < 8; s++)
		n += snprintf(tmpl + n, sizeof tmpl - (size_t)n,
		    "vpinsrw $%d, %d(%%1), %%x0, %%x0\n\t", s, base + 34 * s);
	n += snprintf(tmpl + n, sizeof tmpl - (size_t)n,
	    "vinserti32x4 $1, %%x0, %%t0, %%t0\n\tvcvtph2ps %%t0, %%g0");
	in[0] = xp;
	/* VNNI: the odd sub-blocks' (high nibbles', which multiply as 16
	 * q) over 16; not the min terms' lanes 8..15. */
	if (q->L->vnni) {
		int a[VW], i;

		for (i = 0; i < VW; i++)
			a[i] = i < 8 && i % 2 ? F32_16TH : F32_ONE;
		in[1] = ivec(q, a);
		snprintf(tmpl + n, sizeof tmpl - (size_t)n,
		    "\n\tvmulps %%2, %%g0, %%g0");
	}
	v[0] = qasm(q, tmpl, 1, 1, NULL, out, q->L->vnni ? 2 : 1, "rv", in);
	return v[0];
}

/* The 16 i32 lane values of a q4_k row's scale unpacking (below). */
static const int q4k_a[VW] = { 0, 1, 2, 3, 8, 9, 10, 11,
	4, 5, 6, 7, 8, 9, 10, 11 };
static const int q4k_b[VW] = { 0, 0, 0, 0, 0, 1, 2, 3,
	0, 0, 0, 0, 4, 5, 6, 7 };
static const int q4k_sh[VW] = { 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 4, 4, 4, 4 };
static const int q4k_ma[VW] = { 63, 63, 63, 63, 15, 15, 15, 15,
	63, 63, 63, 63, 15, 15, 15, 15 };
static const int q4k_mb[VW] = { 0, 0, 0, 0, 48, 48, 48, 48,
	0, 0, 0, 0, 48, 48, 48, 48 };

/*
 * q4_k: for the row whose super-block is at WP, each sub-block s's
 * factors in lane s, dx_s (d sc_s), and in lane 8 + s, dx_s ((-dmin)
 * m_s) (f32; the inner products exact, so these are the plain IR's
 * values): the 12 scale bytes widened to i32, lane l's 6-bit value
 * (a >> sh) & ma | (b >> 6 << 4) & mb from its bytes a and b (sc_s =
 * s[s] & 63 and m_s = s[s + 4] & 63 for s < 4; for s >= 4 the 4 bits of
 * s[s + 4] under the top 2 of s[s - 4], resp. s[s]), times [d, -dmin],
 * times DX (q4k_dx).
 */
static gcc_jit_rvalue *q4k_scales(qc_t *q, ks_qdot_memo_t *m,
    const ks_expr_t *e, gcc_jit_rvalue *wp, gcc_jit_rvalue *dx)
{
	gcc_jit_rvalue **v = memo_find(m, MEMO_Q4K, e->b, 0), *in[8];
	gcc_jit_lvalue *out[3];
	int neg[VW], i;

	if (v != NULL)
		return v[0];
	v = memo_add(m, MEMO_Q4K, e->b, 0);
	in[0] = wp;
	in[1] = ivec(q, q4k_a);
	in[2] = ivec(q, q4k_b);
	in[3] = ivec(q, q4k_sh);
	in[4] = ivec(q, q4k_ma);
	in[5] = ivec(q, q4k_mb);
	for (i = 0; i < VW; i++)
		neg[i] = i < 8 ? 0 : (int)0x80000000u;
	in[6] = ivec(q, neg);
	in[7] = dx;
	/* (b >> 6) << 4 & mb is (b >> 2) & mb: mb keeps bits 4, 5. */
	v[0] = qasm(q,
	    "vpmovzxbd 4(%3), %g1\n\t"
	    "vpermd %g1, %4, %g2\n\t"
	    "vpsrlvd %6, %g2, %g2\n\t"
	    "vpandd %7, %g2, %g2\n\t"
	    "vpermd %g1, %5, %g1\n\t"
	    "vpsrld $2, %g1, %g1\n\t"
	    "vpandd %8, %g1, %g1\n\t"
	    "vpord %g1, %g2, %g2\n\t"
	    "vcvtdq2ps %g2, %g2\n\t"
	    "vpbroadcastw (%3), %x0\n\t"
	    "vpbroadcastw 2(%3), %x1\n\t"
	    "vinserti32x4 $1, %x1, %t0, %t0\n\t"
	    "vcvtph2ps %t0, %g0\n\t"
	    "vpxord %9, %g0, %g0\n\t"
	    "vmulps %g2, %g0, %g0\n\t"
	    "vmulps %10, %g0, %g0", 3, 1, NULL, out, 8, "rvvvvvvv", in);
	return v[0];
}

/* The permute indices that add lanes 2 i and 2 i + 1 of two tables (i
 * < 8: the first's, else the second's): EVEN and its ODD partner. */
static void pair_idx(int *ev, int *od)
{
	int i;

	for (i = 0; i < VW; i++) {
		ev[i] = i < 8 ? 2 * i : 16 + 2 * (i - 8);
		od[i] = ev[i] + 1;
	}
}

/*
 * q4_k: the sum of each of the super-block's 8 x blocks' codes, at XP,
 * in lane s (f32; 0 in lanes 8..15), for every row (memo): the 4 pairs'
 * sums of 4 (x_side) added lane pair by lane pair in three steps (exact:
 * integers below 2^13).
 */
static gcc_jit_rvalue *q4k_tsum(qc_t *q, ks_qdot_memo_t *m,
    const ks_expr_t *e, gcc_jit_rvalue *xp)
{
	gcc_jit_rvalue **v = memo_find(m, MEMO_TSUM, e->c, 0), *in[6];
	gcc_jit_lvalue *out[3];
	int p, ev[VW], od[VW];

	if (v != NULL)
		return v[0];
	for (p = 0; p < 4; p++)
		in[p] = x_side(q, m, e->c, p, KS_DTYPE_Q4_K, 1, xp, 68 * p)[1];
	pair_idx(ev, od);
	in[4] = ivec(q, ev);
	in[5] = ivec(q, od);
	v = memo_add(m, MEMO_TSUM, e->c, 0);
	v[0] = qasm(q,
	    "vmovaps %3, %g1\n\tvpermt2ps %4, %7, %g1\n\t"
	    "vmovaps %3, %g2\n\tvpermt2ps %4, %8, %g2\n\t"
	    "vaddps %g2, %g1, %g1\n\t"
	    "vmovaps %5, %g2\n\tvpermt2ps %6, %7, %g2\n\t"
	    "vmovaps %5, %g0\n\tvpermt2ps %6, %8, %g0\n\t"
	    "vaddps %g0, %g2, %g2\n\t"
	    "vmovaps %g1, %g0\n\tvpermt2ps %g2, %7, %g0\n\t"
	    "vpermt2ps %g2, %8, %g1\n\tvaddps %g1, %g0, %g0\n\t"
	    "vpxord %g2, %g2, %g2\n\tvmovaps %g0, %g1\n\t"
	    "vpermt2ps %g2, %7, %g1\n\tvpermt2ps %g2, %8, %g0\n\t"
	    "vaddps %g1, %g0, %g0", 3, 7, NULL, out, 6, "vvvvvv", in);
	return v[0];
}

/* q4_k's min term of the super-block at WP (e->i 4): lane s < 8 gets
 * acc = fma(dx_s ((-dmin) m_s), T_s, acc), T_s block s's sum of x's
 * codes; lanes 8..15 fma(0, 0, acc). */
static gcc_jit_rvalue *q4k_min(qc_t *q, ks_qdot_memo_t *m,
    const ks_expr_t *e, gcc_jit_rvalue *wp, gcc_jit_rvalue *xp,
    gcc_jit_rvalue *acc)
{
	gcc_jit_rvalue *in[3];
	gcc_jit_lvalue *out[3];
	int idx[VW], i;

	for (i = 0; i < VW; i++)
		idx[i] = i < 8 ? 8 + i : 16;
	in[0] = q4k_scales(q, m, e, wp, q4k_dx(q, m, e, xp));
	in[1] = q4k_tsum(q, m, e, xp);
	in[2] = ivec(q, idx);
	return qasm(q, "vmovaps %3, %g1\n\tvpxord %g2, %g2, %g2\n\t"
	    "vpermt2ps %g2, %5, %g1\n\tvfmadd231ps %4, %g1, %g0", 3, 7, acc,
	    out, 3, "vvv", in);
}

gcc_jit_rvalue *ks_cpu_qdot(lower_t *L, ks_qdot_memo_t *m,
    const ks_expr_t *e, gcc_jit_rvalue *wp, gcc_jit_rvalue *xp,
    gcc_jit_rvalue *acc, gcc_jit_type *vi, gcc_jit_type *vf)
{
	qc_t q = { L, vi, vf };
	ks_dtype_t fmt = L->k->params[e->param].dtype;
	int two = fmt == KS_DTYPE_Q4_K || e->i == 2;
	gcc_jit_rvalue **x, *in[10];
	gcc_jit_lvalue *out[4];
	char tmpl[1024];
	int i, ev[VW], od[VW];
	/* The scales dw (f32) of the pair's blocks, or of the first. */
	const char *dw2 = fmt == KS_DTYPE_Q8_0 ?
	    "vpbroadcastw (%4), %x2\n\tvpbroadcastw 34(%4), %x3\n\t"
	    "vinserti32x4 $1, %x3, %t2, %t2\n\tvcvtph2ps %t2, %g2\n\t" :
	    "vpbroadcastw (%4), %x2\n\tvpbroadcastw 18(%4), %x3\n\t"
	    "vinserti32x4 $1, %x3, %t2, %t2\n\tvcvtph2ps %t2, %g2\n\t";
	const char *dw1 = "vpbroadcastw (%4), %x2\n\tvcvtph2ps %t2, %g2\n\t";

	if (fmt == KS_DTYPE_Q4_K && e->i == 4)
		return q4k_min(&q, m, e, wp, xp, acc);
	x = fmt == KS_DTYPE_Q4_K ? x_side(&q, m, sb_of(e->c), (int)e->i, fmt,
	    1, xp, 0) : x_side(&q, m, e->c, -1, fmt, two, xp, 0);
	/* Outputs: %0 the accumulator, %1 .. %3 temporaries; inputs from
	 * %4, W's pointer. */
	in[0] = wp;
	if (fmt == KS_DTYPE_Q4_0) {
		static const int shift[VW] = { 0, 0, 0, 0, 4, 0, 4, 0,
			0, 0, 0, 0, 4, 0, 4, 0 };
		int ic[VW], is[VW], w[32];

		/* One masked load of the pair's 36 bytes (18: one block; the
		 * rest reads as 0, and never faults), then two permutes of
		 * its 16-bit words: the codes as block 0's 16 bytes twice and
		 * block 1's twice (words 1..8, 10..17; 20 is a zero), and
		 * the scales dw0 x 8, dw1 x 8 (words 0, 9). */
		for (i = 0; i < 32; i++)
			w[i] = i < 16 ? 1 + i % 8 : two ? 10 + i % 8 : 20;
		for (i = 0; i < VW; i++) {
			ic[i] = w[2 * i] | w[2 * i + 1] << 16;
			is[i] = i < 4 ? 0 : i < 8 && two ? 9 | 9 << 16 :
			    20 | 20 << 16;
		}
		in[1] = x[0];
		in[2] = x[1];
		in[3] = x[2];
		in[4] = ivec(&q, shift);
		in[5] = splat(&q, 0x0f0f0f0f);
		in[6] = splat(&q, 0x00010001);
		in[7] = ivec(&q, ic);
		in[8] = ivec(&q, is);
		in[9] = gcc_jit_context_new_rvalue_from_long(L->ctx, L->t_u64,
		    two ? 0xfffffffffL : 0x3ffffL);
		/* VNNI: the low nibbles masked in lanes 0..3 and 8..11, the
		 * high ones (as 16 q) in the others, and one vpdpbusd onto
		 * x's minus 8 (128) times its sums: 16 P in the high lanes,
		 * which x's scales over 16 there undo exactly. */
		if (L->vnni) {
			in[4] = hi_lanes(&q, 0x0f0f0f0f, (int)0xf0f0f0f0u);
			in[5] = in[7];
			in[6] = in[8];
			in[7] = in[9];
			return qasm(&q,
			    "vmovdqu8 (%4), %g1%{%11%}%{z%}\n\t"
			    "vpermw %g1, %9, %g2\n\t"
			    "vpandd %8, %g2, %g2\n\t"
			    "vmovdqa64 %6, %g3\n\t"
			    "vpdpbusd %5, %g2, %g3\n\t"
			    "vcvtdq2ps %g3, %g3\n\t"
			    "vpermw %g1, %10, %g1\n\t"
			    "vcvtph2ps %t1, %g1\n\t"
			    "vmulps %7, %g1, %g1\n\t"
			    "vfmadd231ps %g3, %g1, %g0", 4, 1, acc, out, 8,
			    "rvvvvvvk", in);
		}
		return qasm(&q,
		    "vmovdqu8 (%3), %g1%{%12%}%{z%}\n\t"
		    "vpermw %g1, %10, %g2\n\t"
		    "vpsrlvq %7, %g2, %g2\n\t"
		    "vpandd %8, %g2, %g2\n\t"
		    "vpmaddubsw %4, %g2, %g2\n\t"
		    "vpmaddwd %9, %g2, %g2\n\t"
		    "vpsubd %5, %g2, %g2\n\t"
		    "vcvtdq2ps %g2, %g2\n\t"
		    "vpermw %g1, %11, %g1\n\t"
		    "vcvtph2ps %t1, %g1\n\t"
		    "vmulps %6, %g1, %g1\n\t"
		    "vfmadd231ps %g2, %g1, %g0", 3, 1, acc, out, 10,
		    "rvvvvvvvvk", in);
	}
	if (fmt == KS_DTYPE_Q8_0 && L->vnni) {
		/* VNNI: the codes as they are, two vpdpbusd from zero: with
		 * x's plus 128, then with 128s; the difference is P. */
		in[1] = x[0];
		in[2] = splat(&q, (int)0x80808080u);
		in[3] = x[2];
		snprintf(tmpl, sizeof tmpl,
		    "vmovdqu8 2(%%4), %%t1\n\t"
		    "%s"
		    "vpxord %%g2, %%g2, %%g2\n\t"
		    "vpdpbusd %%g1, %%5, %%g2\n\t"
		    "vpxord %%g3, %%g3, %%g3\n\t"
		    "vpdpbusd %%g1, %%6, %%g3\n\t"
		    "vpsubd %%g3, %%g2, %%g2\n\t"
		    "vcvtdq2ps %%g2, %%g1\n\t"
		    "%s"
		    "vmulps %%7, %%g2, %%g2\n\t"
		    "vfmadd231ps %%g1, %%g2, %%g0",
		    two ? "vinserti64x4 $1, 36(%4), %g1, %g1\n\t" : "",
		    two ? dw2 : dw1);
		return qasm(&q, tmpl, 4, 1, acc, out, 4, "rvvv", in);
	}
	if (fmt == KS_DTYPE_Q8_0) {
		/* Lane l < 8 adds block 0's i32 pairs 2 l, 2 l + 1; lane
		 * 8 + l block 1's (index 16 on: the second table). */
		pair_idx(ev, od);
		in[1] = x[0];
		in[2] = two ? x[1] : x[0];
		in[3] = x[2];
		in[4] = ivec(&q, ev);
		in[5] = ivec(&q, od);
		snprintf(tmpl, sizeof tmpl,
		    "vpmovsxbw 2(%%4), %%g1\n\t"
		    "vpmaddwd %%5, %%g1, %%g1\n\t"
		    "%s"
		    "vmovdqa64 %%g1, %%g3\n\t"
		    "vpermt2d %%g2, %%8, %%g3\n\t"
		    "vpermt2d %%g2, %%9, %%g1\n\t"
		    "vpaddd %%g1, %%g3, %%g1\n\t"
		    "vcvtdq2ps %%g1, %%g1\n\t"
		    "%s"
		    "vmulps %%7, %%g2, %%g2\n\t"
		    "vfmadd231ps %%g1, %%g2, %%g0",
		    two ? "vpmovsxbw 36(%4), %g2\n\t"
		    "vpmaddwd %6, %g2, %g2\n\t" : "vpxord %g2, %g2, %g2\n\t",
		    two ? dw2 : dw1);
		return qasm(&q, tmpl, 4, 1, acc, out, 6, "rvvvvv", in);
	}
	/* q4_k, pair p = e->i of the super-block at WP: sub-blocks 2 p
	 * (low nibbles of its 32 code bytes) and 2 p + 1 (high ones);
	 * acc = fma(dx d sc, P, acc). */
	{
		static const int shift[VW] = { 0, 0, 0, 0, 0, 0, 0, 0,
			4, 0, 4, 0, 4, 0, 4, 0 };
		int p = (int)e->i, ia[VW];

		for (i = 0; i < VW; i++)
			ia[i] = 2 * p + i / 8;
		in[1] = x[0];
		in[2] = q4k_scales(&q, m, e, wp, q4k_dx(&q, m, e, xp));
		in[3] = ivec(&q, ia);
		in[4] = ivec(&q, shift);
		if (L->vnni) {
			/* VNNI: the high nibbles as 16 q (the odd
			 * sub-blocks' scales are over 16: q4k_dx). */
			int mk[VW];

			for (i = 0; i < VW; i++)
				mk[i] = i < 8 ? 0x0f0f0f0f : (int)0xf0f0f0f0u;
			in[4] = ivec(&q, mk);
			snprintf(tmpl, sizeof tmpl,
			    "vbroadcasti64x4 %d(%%4), %%g1\n\t"
			    "vpandd %%8, %%g1, %%g1\n\t"
			    "vpxord %%g3, %%g3, %%g3\n\t"
			    "vpdpbusd %%5, %%g1, %%g3\n\t"
			    "vcvtdq2ps %%g3, %%g1\n\t"
			    "vpermps %%6, %%7, %%g2\n\t"
			    "vfmadd231ps %%g1, %%g2, %%g0", 16 + 32 * p);
			return qasm(&q, tmpl, 4, 15, acc, out, 5, "rvvvv", in);
		}
		in[5] = splat(&q, 0x0f0f0f0f);
		in[6] = splat(&q, 0x00010001);
		snprintf(tmpl, sizeof tmpl,
		    "vbroadcasti64x4 %d(%%4), %%g1\n\t"
		    "vpsrlvq %%8, %%g1, %%g1\n\t"
		    "vpandd %%9, %%g1, %%g1\n\t"
		    "vpmaddubsw %%5, %%g1, %%g1\n\t"
		    "vpmaddwd %%10, %%g1, %%g1\n\t"
		    "vcvtdq2ps %%g1, %%g1\n\t"
		    "vpermps %%6, %%7, %%g2\n\t"
		    "vfmadd231ps %%g1, %%g2, %%g0", 16 + 32 * p);
		return qasm(&q, tmpl, 4, 15, acc, out, 7, "rvvvvvv", in);
	}
}
