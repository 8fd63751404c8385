/*
 * cpu_qdot: the fast mode's block dot product (KS_X_QDOT) natively, for
 * cpu_vec.c's 16-wide lanes on AVX-512 F and BW targets.
 *
 * A QDOT's 16 lanes are one 512-bit vector: the pair's 64 weight codes
 * and 64 x codes side by side in bytes, lane l's 4 in bytes 4 l .. 4 l + 3,
 * so that the integer sums of 4 products are a vpmaddubsw (u8 x s8 to
 * pairs of i16) and a vpmaddwd against ones (to i32): exact, as no i16
 * saturates (a nibble is at most 15 and a q8_0 code at most 128 in
 * magnitude; 2 * 15 * 128 < 2^15).  q4_0's codes are nibbles minus 8, so
 * the nibbles multiply and 8 times the sum of x's 4 codes is subtracted;
 * q8_0's signed codes go through i16 instead (vpmovsxbw, vpmaddwd, then
 * adjacent i32 pairs added: u8 x s8 could not hold them).  The scales
 * are f16 broadcasts converted by vcvtph2ps, q4_k's 6-bit scales and
 * mins unpacked once per row and super-block into a vector of 16 f32
 * (d sc and dmin m) that each pair permutes.  Every f32 operation is the
 * plain IR's, one lane per element, in its order (a product's operands
 * may swap: IEEE multiplication commutes), so the bits are the plain
 * IR's; tests/test_k_fast.c checks both against the reference.
 *
 * Each step is one extended asm statement with register operands and
 * early-clobbered temporaries; GCC allocates and places them.  x's side
 * of a pair (its codes, their sums, its scales) is computed once per
 * LANES statement and reused for every row of W (the memo).
 */
#include "cpu_lower.h"

#include <stdio.h>

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

/*
 * asm TMPL with NOUT early-clobbered vector outputs (OUT[i], f32 where
 * the bit of FMASK is set, else i32), the first read and written when
 * INIT0 (its value before) is not NULL, then NIN inputs IN with
 * constraints IC.  Returns the first output.
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
		gcc_jit_extended_asm_add_input_operand(a, NULL, c, in[i]);
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

/* The memo's entry of KIND for AT, or NULL. */
static gcc_jit_rvalue **memo_find(ks_qdot_memo_t *m, int kind,
    const ks_expr_t *at)
{
	int i;

	for (i = 0; i < m->n; i++)
		if (m->e[i].kind == kind && same_expr(m->e[i].at, at))
			return m->e[i].v;
	return NULL;
}

static gcc_jit_rvalue **memo_add(ks_qdot_memo_t *m, int kind,
    const ks_expr_t *at)
{
	if (m->n == KS_QDOT_MEMO)
		m->n = 0;       /* forget: recomputed, never wrong */
	m->e[m->n].kind = kind;
	m->e[m->n].at = at;
	return m->e[m->n++].v;
}

enum { MEMO_X, MEMO_Q4K };

/*
 * x's side of a pair at XP: [0] its codes (block 0 in bytes 0..31, block
 * 1 in 32..63, zero when absent), [1] q4_0: 8 times each lane's sum of 4
 * codes (i32); q4_k: that sum (f32); q8_0: block 1's codes as i16 ([0]
 * then block 0's), [2] the scales dx per lane (f32, 0 when absent).
 */
static gcc_jit_rvalue **x_side(qc_t *q, ks_qdot_memo_t *m,
    const ks_expr_t *e, ks_dtype_t fmt, int two, gcc_jit_rvalue *xp)
{
	gcc_jit_rvalue **v = memo_find(m, MEMO_X, e->c), *in[3];
	gcc_jit_lvalue *out[2];

	if (v != NULL)
		return v;
	v = memo_add(m, MEMO_X, e->c);
	in[0] = xp;
	if (fmt == KS_DTYPE_Q8_0) {
		v[0] = qasm(q, "vpmovsxbw 2(%1), %g0", 1, 0, NULL, out, 1, "r", in);
		v[1] = two ? qasm(q, "vpmovsxbw 36(%1), %g0", 1, 0, NULL, out, 1, "r",
		    in) : NULL;
	} else {
		v[0] = qasm(q, two ? "vmovdqu32 2(%1), %t0\n\t"
		    "vinserti64x4 $1, 36(%1), %g0, %g0" : "vmovdqu32 2(%1), %t0",
		    1, 0, NULL, out, 1, "r", in);
		in[0] = v[0];
		in[1] = splat(q, fmt == KS_DTYPE_Q4_0 ? 0x08080808 :
		    0x01010101);
		in[2] = splat(q, 0x00010001);
		v[1] = qasm(q, fmt == KS_DTYPE_Q4_0 ?
		    "vpmaddubsw %1, %2, %0\n\tvpmaddwd %3, %0, %0" :
		    "vpmaddubsw %1, %2, %0\n\tvpmaddwd %3, %0, %0\n\t"
		    "vcvtdq2ps %0, %0", 1, fmt == KS_DTYPE_Q4_K, NULL, out, 3,
		    "vvv", in);
	}
	in[0] = xp;
	v[2] = qasm(q, two ? "vpbroadcastw (%2), %x0\n\t"
	    "vpbroadcastw 34(%2), %x1\n\tvinserti32x4 $1, %x1, %t0, %t0\n\t"
	    "vcvtph2ps %t0, %g0" : "vpbroadcastw (%2), %x0\n\t"
	    "vcvtph2ps %t0, %g0", 2, 1, NULL, out, 1, "r", in);
	return v;
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
 * q4_k: the super-block at WP's d sc_s in lane s and (-dmin) m_s in lane
 * 8 + s (f32, exact products): the 12 scale bytes widened to i32, lane
 * l's value (a >> sh) & ma | (b >> 6 << 4) & mb from its bytes a and b
 * (sc_s = s[s] & 63 and m_s = s[s + 4] & 63 for s < 4; for s >= 4 the
 * 4 bits of s[s + 4] under the top 2 of s[s - 4], resp. s[s]).
 */
static gcc_jit_rvalue *q4k_scales(qc_t *q, ks_qdot_memo_t *m,
    const ks_expr_t *e, gcc_jit_rvalue *wp)
{
	gcc_jit_rvalue **v = memo_find(m, MEMO_Q4K, e->b), *in[7];
	gcc_jit_lvalue *out[3];
	int neg[VW], i;

	if (v != NULL)
		return v[0];
	v = memo_add(m, MEMO_Q4K, e->b);
	in[0] = wp;
	in[1] = ivec(q, q4k_a);
	in[2] = ivec(q, q4k_b);
	in[3] = ivec(q, q4k_sh);
	in[4] = ivec(q, q4k_ma);
	in[5] = ivec(q, q4k_mb);
	for (i = 0; i < VW; i++)
		neg[i] = i < 8 ? 0 : (int)0x80000000u;
	in[6] = ivec(q, neg);
	v[0] = qasm(q,
	    "vpmovzxbd 4(%3), %g1\n\t"
	    "vpermd %g1, %4, %g2\n\t"
	    "vpsrlvd %6, %g2, %g2\n\t"
	    "vpandd %7, %g2, %g2\n\t"
	    "vpermd %g1, %5, %g1\n\t"
	    "vpsrld $6, %g1, %g1\n\t"
	    "vpslld $4, %g1, %g1\n\t"
	    "vpandd %8, %g1, %g1\n\t"
	    "vpord %g1, %g2, %g2\n\t"
	    "vcvtdq2ps %g2, %g2\n\t"
	    "vpbroadcastw (%3), %x0\n\t"
	    "vpbroadcastw 2(%3), %x1\n\t"
	    "vinserti32x4 $1, %x1, %t0, %t0\n\t"
	    "vcvtph2ps %t0, %g0\n\t"
	    "vpxord %9, %g0, %g0\n\t"
	    "vmulps %g2, %g0, %g0", 3, 1, NULL, out, 7, "rvvvvvv", in);
	return v[0];
}

gcc_jit_rvalue *ks_cpu_qdot(lower_t *L, ks_qdot_memo_t *m,
    const ks_expr_t *e, gcc_jit_rvalue *wp, gcc_jit_rvalue *xp,
    gcc_jit_rvalue *acc, gcc_jit_type *vi, gcc_jit_type *vf)
{
	qc_t q = { L, vi, vf };
	ks_dtype_t fmt = L->k->params[e->param].dtype;
	int two = fmt == KS_DTYPE_Q4_K || e->i == 2;
	gcc_jit_rvalue **x = x_side(&q, m, e, fmt, two, xp), *in[10];
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

	/* Outputs: %0 the accumulator, %1 .. %3 temporaries; inputs from
	 * %4, W's pointer. */
	in[0] = wp;
	if (fmt == KS_DTYPE_Q4_0) {
		static const int shift[VW] = { 0, 0, 0, 0, 4, 0, 4, 0,
			0, 0, 0, 0, 4, 0, 4, 0 };

		in[1] = x[0];
		in[2] = x[1];
		in[3] = x[2];
		in[4] = ivec(&q, shift);
		in[5] = splat(&q, 0x0f0f0f0f);
		in[6] = splat(&q, 0x00010001);
		/* The nibbles: block 0's bytes in 128-bit lanes 0 and 1,
		 * block 1's in 2 and 3, lanes 1 and 3 shifted right by 4. */
		snprintf(tmpl, sizeof tmpl, "%s"
		    "vpsrlvq %%8, %%g1, %%g1\n\t"
		    "vpandd %%9, %%g1, %%g1\n\t"
		    "vpmaddubsw %%5, %%g1, %%g1\n\t"
		    "vpmaddwd %%10, %%g1, %%g1\n\t"
		    "vpsubd %%6, %%g1, %%g1\n\t"
		    "vcvtdq2ps %%g1, %%g1\n\t"
		    "%s"
		    "vmulps %%7, %%g2, %%g2\n\t"
		    "vfmadd231ps %%g1, %%g2, %%g0",
		    two ? "vbroadcasti32x4 2(%4), %t1\n\t"
		    "vbroadcasti32x4 20(%4), %t2\n\t"
		    "vinserti64x4 $1, %t2, %g1, %g1\n\t" :
		    "vbroadcasti32x4 2(%4), %t1\n\t", two ? dw2 : dw1);
		return qasm(&q, tmpl, 4, 1, acc, out, 7, "rvvvvvv", in);
	}
	if (fmt == KS_DTYPE_Q8_0) {
		/* Lane l < 8 adds block 0's i32 pairs 2 l, 2 l + 1; lane
		 * 8 + l block 1's (index 16 on: the second table). */
		for (i = 0; i < VW; i++) {
			ev[i] = i < 8 ? 2 * i : 16 + 2 * (i - 8);
			od[i] = ev[i] + 1;
		}
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
	 * acc = fma(dx d sc, P, fma(dx (-dmin) m, T, acc)). */
	{
		static const int shift[VW] = { 0, 0, 0, 0, 0, 0, 0, 0,
			4, 0, 4, 0, 4, 0, 4, 0 };
		int p = (int)e->i, ia[VW], ib[VW];

		for (i = 0; i < VW; i++) {
			ia[i] = 2 * p + i / 8;
			ib[i] = 8 + ia[i];
		}
		in[1] = x[0];
		in[2] = x[1];
		in[3] = x[2];
		in[4] = q4k_scales(&q, m, e, wp);
		in[5] = ivec(&q, ia);
		in[6] = ivec(&q, ib);
		in[7] = ivec(&q, shift);
		in[8] = splat(&q, 0x0f0f0f0f);
		in[9] = splat(&q, 0x00010001);
		snprintf(tmpl, sizeof tmpl,
		    "vbroadcasti64x4 %d(%%4), %%g1\n\t"
		    "vpsrlvq %%11, %%g1, %%g1\n\t"
		    "vpandd %%12, %%g1, %%g1\n\t"
		    "vpmaddubsw %%5, %%g1, %%g1\n\t"
		    "vpmaddwd %%13, %%g1, %%g1\n\t"
		    "vcvtdq2ps %%g1, %%g1\n\t"
		    "vpermps %%8, %%10, %%g3\n\t"
		    "vmulps %%7, %%g3, %%g3\n\t"
		    "vfmadd231ps %%6, %%g3, %%g0\n\t"
		    "vpermps %%8, %%9, %%g2\n\t"
		    "vmulps %%7, %%g2, %%g2\n\t"
		    "vfmadd231ps %%g1, %%g2, %%g0", 16 + 32 * p);
		return qasm(&q, tmpl, 4, 15, acc, out, 10, "rvvvvvvvvv", in);
	}
}
