/*
 * cpu_vec: LANES lowered as explicit 16-wide vectors, for the cpu backend.
 *
 * cpu.c lowers a LANES statement as a loop over the lanes and leaves the
 * vectors to GCC's loop vectorizer, which sizes a loop's vectors by its
 * narrowest element: a lane loop that reads one byte a lane (a quantized
 * weight's code) gets 32-byte vectors of bytes, so every f32 of the loop
 * is computed in 256-bit halves, the bytes widen to i32 in two steps
 * with extracts between them, and a gemv's 8 rows x 32 lanes of
 * accumulators no longer fit the registers (bench/ggml: the q8_0 decode
 * GEMV at 0.30 of a read loop's bandwidth, q4_0 at 0.10).
 *
 * Here each statement of the body is instead emitted for each half of 16
 * lanes in turn, with every lane value a 16-wide vector of the libgccjit
 * type system (f32 or i32: one 512-bit register), so the code is what the
 * IR says: a byte load is
 * one widening load of 16 bytes (vpmovzxbd, or vpmovsxbd for the q8_0
 * sign extension (b ^ 128) - 128), an i32 -> f32 conversion one
 * vcvtdq2ps, an fma one vfmadd231ps.  libgccjit 12 has vector arithmetic
 * and bit operations but no vector conversions or fma, so those three are
 * extended asm with register operands; GCC allocates the registers and
 * schedules around them.  Each operation is the scalar one per lane, with
 * the same rounding (the conversions and the fma are exact or correctly
 * rounded in both), so the result is bit for bit the lane loop's.
 *
 * The subset: a LANES body of declarations and assignments of lane
 * variables, stores of f32 and i32 at a contiguous index, and IFs whose
 * condition every lane of a half answers alike (q4_0's choice of nibble:
 * lane < 16), whose expressions are uniform subexpressions (cpu.c lowers
 * them), the lane index in affine indices (u + c + lane; with c a
 * multiple of 16, lane & 15, lane >> 4 and comparisons with a constant
 * are known per half), i32 and f32 arithmetic and bit operations, i32 ->
 * f32 conversions, fma, and loads of f32, i32 and byte buffers at a
 * contiguous index.  A value computed from a 4-bit field alone (x & 15,
 * a byte >> 4) and uniforms is kept as a table of its 16 values and the
 * field: the operations run once on the table, and its lanes are one
 * permute (vpermps, vpermd) of it, which is how a q4_0 or q4_k weight
 * costs a permute instead of its decode.  Anything else (a select, a
 * branch the lanes of a half take differently, a gather, f16 and bf16
 * loads) leaves the whole LANES statement to cpu.c's lane loop.  Lane
 * variables stay cpu.c's arrays of nlanes: a half is read and written as
 * one aligned vector at element 16 h, so a later LANES statement, vector
 * or loop, and KS_X_REDUCE see the same values; within the statement a
 * variable's value is also kept as computed (a table stays a table).
 *
 * Used for kernels that read a byte buffer (ks_cpu_vec_kernel) on targets
 * with AVX-512 F and BW (ks_cpu_vec_target); other kernels' lane loops
 * vectorize well and are left to GCC.  The body's analysis runs before
 * anything is emitted, so a statement outside the subset costs nothing.
 */
#include "cpu_lower.h"

#include <stdlib.h>
#include <string.h>

enum {
	VW = 16,                /* lanes of one vector */
	MEMO_MAX = 32,          /* byte loads remembered per half */
};

/* The value of an expression in one half of the lanes. */
typedef enum {
	VF_BAD,                 /* outside the subset */
	VF_U,                   /* uniform: one scalar for every lane */
	VF_A,                   /* i64 affine: u + c + j for lane 16 h + j */
	VF_V,                   /* a vector, lane j in element j */
	VF_T,                   /* a vector by table: lane j's value is
	                           element (idx[j] & 15) of the 16 in r */
} vkind_t;

typedef struct {
	vkind_t kind;
	gcc_jit_rvalue *r;      /* U: the scalar; V: the vector; A: u or NULL */
	int known;              /* U: the value is the constant c */
	int64_t c;              /* U: that constant; A: the offset */
	int var;                /* U, A: the variable that u reads (-1 none,
	                           -2 another expression): byte loads' memo */
	gcc_jit_rvalue *idx;    /* T: the i32 vector of indices */
	int iota;               /* T: r is 0, 1 .. 15 (i32), not yet built */
	int byte;               /* V: each element is in 0..255 */
} vform_t;

typedef struct {
	int param, var, sign;
	int64_t c;
	gcc_jit_rvalue *v;
} memo_t;

typedef struct {
	lower_t *L;
	int gen;                /* 0: analysis only, nothing is emitted */
	int h;                  /* the half: lanes 16 h .. 16 h + 15 */
	/* Per half: the forms of the lane variables this LANES statement
	 * has set so far (per var; VF_BAD where none), the byte loads
	 * emitted so far. */
	vform_t *i64[2];
	memo_t memo[2][MEMO_MAX];
	int nmemo[2];
	ks_qdot_memo_t qmemo;   /* cpu_qdot.c's (16 lanes: one half) */
	gcc_jit_type *vf, *vi, *vfu, *viu, *vb, *vl;
} vx_t;

static const char *const vec_targets[] = {
	"x86-64-v4", "skylake-avx512", "cascadelake", "icelake-server",
	"sapphirerapids",
};

int ks_cpu_vec_target(const char *target)
{
	size_t i;

	for (i = 0; i < sizeof(vec_targets) / sizeof(vec_targets[0]); i++)
		if (strcmp(target, vec_targets[i]) == 0)
			return 1;
	return 0;
}

int ks_cpu_vnni_target(const char *target)
{
	/* vec_targets from cascadelake on */
	return ks_cpu_vec_target(target) && strcmp(target, "x86-64-v4") &&
	    strcmp(target, "skylake-avx512");
}

int ks_cpu_vec_kernel(const ks_ir_kernel_t *k)
{
	int i;

	if (k->nlanes != VW && k->nlanes != 2 * VW)
		return 0;
	for (i = 0; i < k->nparams; i++)
		if (k->params[i].kind == KS_PARAM_BUFFER && k->params[i].bytes)
			return 1;
	return 0;
}

/* ---- small helpers ---- */

static gcc_jit_rvalue *rv(gcc_jit_lvalue *lv)
{
	return gcc_jit_lvalue_as_rvalue(lv);
}

static gcc_jit_rvalue *cint(vx_t *V, gcc_jit_type *t, int64_t v)
{
	return gcc_jit_context_new_rvalue_from_long(V->L->ctx, t, (long)v);
}

static gcc_jit_rvalue *binop(vx_t *V, enum gcc_jit_binary_op o,
    gcc_jit_type *t, gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
	return gcc_jit_context_new_binary_op(V->L->ctx, NULL, o, t, a, b);
}

static gcc_jit_type *scalar_ty(vx_t *V, ks_ty_t t)
{
	return t == KS_TY_F32 ? V->L->t_f32 : t == KS_TY_I32 ? V->L->t_i32 :
	    V->L->t_i64;
}

static gcc_jit_rvalue *let(vx_t *V, gcc_jit_type *t, gcc_jit_rvalue *v)
{
	gcc_jit_lvalue *lv = ks_cpu_local(V->L, t, "vt");

	gcc_jit_block_add_assignment(V->L->blk, NULL, lv, v);
	return rv(lv);
}

static vform_t bad(void)
{
	vform_t f = { VF_BAD, NULL, 0, 0, -1, NULL, 0, 0 };

	return f;
}

static vform_t uform(gcc_jit_rvalue *r, int known, int64_t c, int var)
{
	vform_t f = { VF_U, r, known, c, var, NULL, 0, 0 };

	return f;
}

static vform_t vform(gcc_jit_rvalue *r)
{
	vform_t f = { VF_V, r, 0, 0, -1, NULL, 0, 0 };

	return f;
}

/* Whether E reads no lane index and no lane variable. */
static int uniform(const ks_ir_kernel_t *k, const ks_expr_t *e)
{
	if (e == NULL)
		return 1;
	if (e->kind == KS_X_LANE)
		return 0;
	if (e->kind == KS_X_VAR && k->vars[e->var].scope == KS_VAR_LANE)
		return 0;
	return uniform(k, e->a) && uniform(k, e->b) && uniform(k, e->c);
}

/* An integer operation on constants, as the scalar lowering computes it
 * (i32 results truncated); 0 when it is not folded here. */
static int fold(ks_binop_t op, ks_ty_t t, int64_t a, int64_t b, int64_t *out)
{
	int64_t v;

	switch (op) {
	case KS_OP_ADD: v = (int64_t)((uint64_t)a + (uint64_t)b); break;
	case KS_OP_SUB: v = (int64_t)((uint64_t)a - (uint64_t)b); break;
	case KS_OP_MUL: v = (int64_t)((uint64_t)a * (uint64_t)b); break;
	case KS_OP_BAND: v = a & b; break;
	case KS_OP_BOR: v = a | b; break;
	case KS_OP_BXOR: v = a ^ b; break;
	case KS_OP_SHR:
		if (b < 0 || b > 31)
			return 0;
		v = a >> b;
		break;
	case KS_OP_LT: *out = a < b; return 1;
	case KS_OP_LE: *out = a <= b; return 1;
	case KS_OP_EQ: *out = a == b; return 1;
	case KS_OP_NE: *out = a != b; return 1;
	default:
		return 0;
	}
	*out = t == KS_TY_I32 ? (int64_t)(int32_t)(uint32_t)v : v;
	return 1;
}

/* The constant value of the uniform E, if it is one. */
static int known(const ks_ir_kernel_t *k, const ks_expr_t *e, int64_t *v)
{
	int64_t a, b;

	switch (e->kind) {
	case KS_X_CONST:
		if (e->type != KS_TY_I64 && e->type != KS_TY_I32)
			return 0;
		*v = e->i;
		return 1;
	case KS_X_PARAM:
		if (k->params[e->param].kind != KS_PARAM_SCALAR ||
		    !k->params[e->param].bound ||
		    k->params[e->param].type != KS_TY_I64)
			return 0;
		*v = k->params[e->param].value;
		return 1;
	case KS_X_CAST:
		if ((e->type != KS_TY_I32 && e->type != KS_TY_I64) ||
		    (e->a->type != KS_TY_I32 && e->a->type != KS_TY_I64) ||
		    !known(k, e->a, &a))
			return 0;
		*v = e->type == KS_TY_I32 ? (int64_t)(int32_t)(uint32_t)a : a;
		return 1;
	case KS_X_BIN:
		if ((e->type != KS_TY_I32 && e->type != KS_TY_I64) ||
		    !known(k, e->a, &a) || !known(k, e->b, &b))
			return 0;
		return fold(e->op, e->type, a, b, v);
	default:
		return 0;
	}
}

static void asm_op(vx_t *V, const char *tmpl, const char *oc,
    gcc_jit_lvalue *out, int n, const char *const *ic,
    gcc_jit_rvalue *const *in);

/* The table of a T form: 0 .. 15 when not yet built. */
static gcc_jit_rvalue *table(vx_t *V, const vform_t *f)
{
	gcc_jit_rvalue *el[VW];
	int i;

	if (!f->iota)
		return f->r;
	for (i = 0; i < VW; i++)
		el[i] = cint(V, V->L->t_i32, i);
	return gcc_jit_context_new_rvalue_from_vector(V->L->ctx, NULL, V->vi,
	    VW, el);
}

/* A T form's values: one permute (vpermps, vpermd) of its table by the
 * low 4 bits of its indices. */
static gcc_jit_rvalue *permute(vx_t *V, const vform_t *f, ks_ty_t t)
{
	static const char *const pc[] = { "v", "v" };
	gcc_jit_lvalue *out = ks_cpu_local(V->L, t == KS_TY_F32 ? V->vf :
	    V->vi, "vp");
	gcc_jit_rvalue *in[2];

	in[0] = f->idx;
	in[1] = table(V, f);
	asm_op(V, t == KS_TY_F32 ? "vpermps %2, %1, %0" : "vpermd %2, %1, %0",
	    "=v", out, 2, pc, in);
	return rv(out);
}

/* U as a vector of type VT (a broadcast), or V itself, or T's values. */
static gcc_jit_rvalue *vec(vx_t *V, const vform_t *f, ks_ty_t t)
{
	gcc_jit_type *st = scalar_ty(V, t), *vt = t == KS_TY_F32 ? V->vf :
	    V->vi;
	gcc_jit_rvalue *s, *el[VW];
	int i;

	if (f->kind == VF_V)
		return f->r;
	if (f->kind == VF_T)
		return permute(V, f, t);
	s = f->known ? cint(V, st, f->c) : let(V, st, f->r);
	for (i = 0; i < VW; i++)
		el[i] = s;
	return gcc_jit_context_new_rvalue_from_vector(V->L->ctx, NULL, vt, VW,
	    el);
}

/* The i64 index u + c of an affine form. */
static gcc_jit_rvalue *index_of(vx_t *V, const vform_t *a)
{
	gcc_jit_rvalue *c = cint(V, V->L->t_i64, a->c);

	return a->r ? binop(V, GCC_JIT_BINARY_OP_PLUS, V->L->t_i64, a->r, c) :
	    c;
}

/* *(T *)&P[INDEX], an lvalue of vector type T at element INDEX of the
 * array or pointer P. */
static gcc_jit_lvalue *vec_at(vx_t *V, gcc_jit_rvalue *p,
    gcc_jit_rvalue *index, gcc_jit_type *t)
{
	gcc_jit_context *c = V->L->ctx;

	return gcc_jit_rvalue_dereference(gcc_jit_context_new_cast(c, NULL,
	    gcc_jit_lvalue_get_address(gcc_jit_context_new_array_access(c,
	    NULL, p, index), NULL), gcc_jit_type_get_pointer(t)), NULL);
}

/* The half's vector of lane variable VAR (f32 or i32). */
static gcc_jit_lvalue *lane_half(vx_t *V, int var)
{
	return vec_at(V, rv(V->L->var[var]), cint(V, V->L->t_i64, VW * V->h),
	    V->L->k->vars[var].type == KS_TY_F32 ? V->vf : V->vi);
}

/* asm TEMPLATE with output OUT ("=v" or "+v") and inputs IN[0..n). */
static void asm_op(vx_t *V, const char *tmpl, const char *oc,
    gcc_jit_lvalue *out, int n, const char *const *ic,
    gcc_jit_rvalue *const *in)
{
	gcc_jit_extended_asm *a = gcc_jit_block_add_extended_asm(V->L->blk,
	    NULL, tmpl);
	int i;

	gcc_jit_extended_asm_add_output_operand(a, NULL, oc, out);
	for (i = 0; i < n; i++)
		gcc_jit_extended_asm_add_input_operand(a, NULL, ic[i], in[i]);
}

/* ---- expressions ---- */

static vform_t vx(vx_t *V, const ks_expr_t *e);
static vform_t vform(gcc_jit_rvalue *r);

/*
 * 16 bytes of byte buffer PARAM from the affine index IX, widened to i32:
 * zero-extended (vpmovzxbd), or SIGN-extended (vpmovsxbd).  Each distinct
 * load is emitted once per half.
 */
static vform_t byte_load(vx_t *V, int param, const vform_t *ix, int sign)
{
	static const char *const mc[] = { "m" };
	gcc_jit_lvalue *out;
	gcc_jit_rvalue *in;
	vform_t f = vform(NULL);
	int i;

	f.byte = !sign;
	if (!V->gen)
		return f;
	for (i = 0; i < V->nmemo[V->h] && ix->var != -2; i++) {
		const memo_t *m = &V->memo[V->h][i];

		if (m->param == param && m->var == ix->var && m->c == ix->c &&
		    m->sign == sign) {
			vform_t f = vform(m->v);

			f.byte = !sign;
			return f;
		}
	}
	out = ks_cpu_local(V->L, V->vi, "vb");
	in = rv(vec_at(V, rv(V->L->param[param]), index_of(V, ix), V->vb));
	asm_op(V, sign ? "vpmovsxbd %1, %0" : "vpmovzxbd %1, %0", "=v", out,
	    1, mc, &in);
	if (V->nmemo[V->h] < MEMO_MAX && ix->var != -2) {
		memo_t *m = &V->memo[V->h][V->nmemo[V->h]++];

		m->param = param;
		m->var = ix->var;
		m->c = ix->c;
		m->sign = sign;
		m->v = rv(out);
	}
	f.r = rv(out);
	return f;
}

/* A load at the contiguous index u + c + j: one vector. */
static vform_t load(vx_t *V, const ks_expr_t *e, int sign)
{
	const ks_ir_param_t *p = &V->L->k->params[e->param];
	vform_t ix = vx(V, e->a);
	gcc_jit_type *t;

	if (ix.kind != VF_A || p->kind != KS_PARAM_BUFFER ||
	    V->L->param[e->param] == NULL)
		return bad();
	if (p->bytes)
		return byte_load(V, e->param, &ix, sign);
	if (sign)
		return bad();
	if (p->type == KS_TY_I32)
		t = V->viu;
	else if (p->dtype == KS_DTYPE_F32)
		t = V->vfu;
	else
		return bad();           /* f16, bf16: cpu.c's loop */
	return vform(V->gen ? rv(vec_at(V, rv(V->L->param[e->param]),
	    index_of(V, &ix), t)) : NULL);
}

/* i64 on affine forms: the index arithmetic of a contiguous load. */
static vform_t affine(vx_t *V, const ks_expr_t *e, vform_t a, vform_t b)
{
	vform_t r;
	int64_t c, lo, hi;

	if (a.kind == VF_U && b.kind == VF_U) {
		if (a.known && b.known && fold(e->op, KS_TY_I64, a.c, b.c, &c))
			return uform(V->gen && e->type == KS_TY_I64 ?
			    cint(V, V->L->t_i64, c) : NULL, 1, c, -1);
		return bad();
	}
	if (e->op == KS_OP_ADD && a.kind == VF_U && b.kind == VF_A) {
		r = a;
		a = b;
		b = r;
	}
	if (a.kind != VF_A || b.kind != VF_U)
		return bad();
	r = a;
	switch (e->op) {
	case KS_OP_ADD:
	case KS_OP_SUB:
		if (b.known) {
			r.c = e->op == KS_OP_ADD ? a.c + b.c : a.c - b.c;
			return r;
		}
		if (e->op == KS_OP_SUB)
			return bad();
		if (a.r == NULL) {
			r.r = b.r;
			r.var = b.var >= 0 ? b.var : -2;
			return r;
		}
		r.r = V->gen ? binop(V, GCC_JIT_BINARY_OP_PLUS, V->L->t_i64,
		    a.r, b.r) : NULL;
		r.var = -2;
		return r;
	case KS_OP_LT:
	case KS_OP_LE:
	case KS_OP_EQ:
	case KS_OP_NE:
		/* A comparison that every lane of the half answers alike
		 * (q4_0's choice of nibble): a known bool. */
		if (a.r != NULL || !b.known)
			return bad();
		lo = a.c;
		hi = a.c + VW - 1;
		if ((e->op == KS_OP_LT && hi < b.c) ||
		    (e->op == KS_OP_LE && hi <= b.c))
			c = 1;
		else if ((e->op == KS_OP_LT && lo >= b.c) ||
		    (e->op == KS_OP_LE && lo > b.c))
			c = 0;
		else if ((e->op == KS_OP_EQ || e->op == KS_OP_NE) &&
		    (b.c < lo || b.c > hi))
			c = e->op == KS_OP_NE;
		else
			return bad();
		return uform(NULL, 1, c, -1);
	case KS_OP_SHR:
	case KS_OP_DIV:
	case KS_OP_BAND:
	case KS_OP_REM:
		/* (c + j) >> 4, / 16: c / 16; & 15, % 16: j, for c a
		 * multiple of 16 and no u. */
		if (a.r != NULL || !b.known || a.c < 0 || a.c % VW != 0)
			return bad();
		if ((e->op == KS_OP_SHR && b.c == 4) ||
		    (e->op == KS_OP_DIV && b.c == VW))
			return uform(V->gen ? cint(V, V->L->t_i64, a.c / VW) :
			    NULL, 1, a.c / VW, -1);
		if ((e->op == KS_OP_BAND && b.c == VW - 1) ||
		    (e->op == KS_OP_REM && b.c == VW)) {
			r.c = 0;
			return r;
		}
		return bad();
	default:
		return bad();
	}
}

/* Whether F and G are one value: the same vector, or tables of 0 .. 15
 * on the same indices.  (Analysis cannot tell: it says no.) */
static int same(const vform_t *f, const vform_t *g)
{
	if (f->r == NULL && f->idx == NULL)
		return 0;
	if (f->kind == VF_V && g->kind == VF_V)
		return f->r == g->r;
	return f->kind == VF_T && g->kind == VF_T && f->iota && g->iota &&
	    f->idx == g->idx;
}

/* (b ^ 128) - 128 on a byte load b: the byte as a signed one. */
static int is_sext(const ks_ir_kernel_t *k, const ks_expr_t *e)
{
	const ks_expr_t *x = e->a;
	int64_t v;

	return e->op == KS_OP_SUB && e->type == KS_TY_I32 &&
	    uniform(k, e->b) && known(k, e->b, &v) && v == 128 &&
	    x->kind == KS_X_BIN && x->op == KS_OP_BXOR &&
	    uniform(k, x->b) && known(k, x->b, &v) && v == 128 &&
	    x->a->kind == KS_X_LOAD && k->params[x->a->param].bytes;
}

static vform_t vbin(vx_t *V, const ks_expr_t *e)
{
	static const enum gcc_jit_binary_op ops[] = {
		[KS_OP_ADD] = GCC_JIT_BINARY_OP_PLUS,
		[KS_OP_SUB] = GCC_JIT_BINARY_OP_MINUS,
		[KS_OP_MUL] = GCC_JIT_BINARY_OP_MULT,
		[KS_OP_DIV] = GCC_JIT_BINARY_OP_DIVIDE,
		[KS_OP_BAND] = GCC_JIT_BINARY_OP_BITWISE_AND,
		[KS_OP_BOR] = GCC_JIT_BINARY_OP_BITWISE_OR,
		[KS_OP_BXOR] = GCC_JIT_BINARY_OP_BITWISE_XOR,
		[KS_OP_SHL] = GCC_JIT_BINARY_OP_LSHIFT,
		[KS_OP_SHR] = GCC_JIT_BINARY_OP_RSHIFT,
	};
	ks_ty_t t = e->a->type;
	vform_t a, b;
	int64_t c;

	if (t == KS_TY_I32 && is_sext(V->L->k, e))
		return load(V, e->a->a, 1);
	if (t == KS_TY_I32 && e->op == KS_OP_BXOR &&
	    e->b->kind == KS_X_BIN && e->b->op == KS_OP_BAND &&
	    e->b->a->kind == KS_X_BIN && e->b->a->op == KS_OP_BXOR) {
		/* o ^ ((p ^ q) & m), the select of q4_0's nibble: where the
		 * half makes m all ones and o is p, it is q. */
		vform_t m = vx(V, e->b->b), o, p, q;

		if (m.kind == VF_U && m.known && m.c == -1) {
			o = vx(V, e->a);
			p = vx(V, e->b->a->a);
			q = vx(V, e->b->a->b);
			if (same(&o, &p))
				return q;
		}
	}
	a = vx(V, e->a);
	b = vx(V, e->b);
	if (a.kind == VF_BAD || b.kind == VF_BAD || e->a->type != e->b->type)
		return bad();
	if (t == KS_TY_I64)
		return affine(V, e, a, b);
	if (t == KS_TY_I32) {
		if (e->op != KS_OP_ADD && e->op != KS_OP_SUB &&
		    e->op != KS_OP_MUL && e->op != KS_OP_BAND &&
		    e->op != KS_OP_BOR && e->op != KS_OP_BXOR &&
		    e->op != KS_OP_SHL && e->op != KS_OP_SHR)
			return bad();
	} else if (t != KS_TY_F32 || (e->op != KS_OP_ADD &&
	    e->op != KS_OP_SUB && e->op != KS_OP_MUL && e->op != KS_OP_DIV)) {
		return bad();
	}
	if (a.kind == VF_U && b.kind == VF_U) {
		if (a.known && b.known && fold(e->op, t, a.c, b.c, &c))
			return uform(V->gen ? cint(V, V->L->t_i32, c) : NULL,
			    1, c, -1);
		return uform(V->gen ? binop(V, ops[e->op], scalar_ty(V, t),
		    a.r, b.r) : NULL, 0, 0, -1);
	}
	/* A mask that a half makes constant (q4_0's lane select). */
	if (t == KS_TY_I32 && (a.kind == VF_U || b.kind == VF_U) &&
	    a.kind != VF_T && b.kind != VF_T) {
		const vform_t *u = a.kind == VF_U ? &a : &b;
		const vform_t *o = a.kind == VF_U ? &b : &a;

		if (u->known && u->c == 0 && e->op == KS_OP_BAND)
			return *u;
		if (u->known && u->c == 0 && (e->op == KS_OP_BOR ||
		    e->op == KS_OP_BXOR))
			return *o;
		if (u->known && u->c == -1 && e->op == KS_OP_BAND)
			return *o;
	}
	if (t == KS_TY_I32 && a.kind == VF_V && b.kind == VF_U && b.known) {
		/* A nibble: x & 15, and x >> s of a byte for s >= 4, take
		 * 16 values, so what is computed from them alone is a table
		 * of 16 (the lane's value at its index) and one permute. */
		if (e->op == KS_OP_SHR && b.c == 0)
			return a;
		if ((e->op == KS_OP_BAND && b.c == 15) ||
		    (e->op == KS_OP_SHR && a.byte && b.c >= 4 && b.c < 32)) {
			vform_t f = vform(NULL);

			f.kind = VF_T;
			f.iota = 1;
			if (V->gen)
				f.idx = e->op == KS_OP_BAND ? a.r : binop(V,
				    ops[e->op], V->vi, a.r, vec(V, &b, t));
			return f;
		}
	}
	if ((a.kind == VF_T && b.kind == VF_U) ||
	    (a.kind == VF_U && b.kind == VF_T)) {
		/* The operation on the table: each element is the lane's
		 * value by the same operation on the same operands. */
		vform_t f = a.kind == VF_T ? a : b;

		f.iota = 0;
		if (V->gen)
			f.r = a.kind == VF_T ? binop(V, ops[e->op],
			    t == KS_TY_F32 ? V->vf : V->vi, table(V, &a),
			    vec(V, &b, t)) : binop(V, ops[e->op],
			    t == KS_TY_F32 ? V->vf : V->vi, vec(V, &a, t),
			    table(V, &b));
		return f;
	}
	if (!V->gen)
		return vform(NULL);
	return vform(binop(V, ops[e->op], t == KS_TY_F32 ? V->vf : V->vi,
	    vec(V, &a, t), vec(V, &b, t)));
}

/* u8 pointer to byte buffer PARAM at the uniform offset F. */
static gcc_jit_rvalue *byte_ptr(vx_t *V, int param, const vform_t *f)
{
	return gcc_jit_lvalue_get_address(gcc_jit_context_new_array_access(
	    V->L->ctx, NULL, rv(V->L->param[param]), f->known ?
	    cint(V, V->L->t_i64, f->c) : f->r), NULL);
}

/* KS_X_QDOT natively (cpu_qdot.c), with its offsets uniform; its
 * accumulator is the innermost addend of its value's fmas (through a
 * select's second choice: lanes that keep it). */
static vform_t qdot(vx_t *V, const ks_expr_t *e)
{
	vform_t w = vx(V, e->b), x = vx(V, e->c), a;
	const ks_expr_t *acc = e->a;

	while (acc->kind == KS_X_FMA || acc->kind == KS_X_SELECT)
		acc = acc->c;
	a = vx(V, acc);
	if (w.kind != VF_U || x.kind != VF_U || V->L->k->nlanes != VW ||
	    (a.kind != VF_V && a.kind != VF_U) || acc->type != KS_TY_F32 ||
	    V->L->param[e->param] == NULL || V->L->param[e->param2] == NULL)
		return bad();
	if (!V->gen)
		return vform(NULL);
	return vform(ks_cpu_qdot(V->L, &V->qmemo, e, byte_ptr(V, e->param,
	    &w), byte_ptr(V, e->param2, &x), vec(V, &a, KS_TY_F32), V->vi,
	    V->vf));
}

static vform_t vx(vx_t *V, const ks_expr_t *e)
{
	const ks_ir_kernel_t *k = V->L->k;
	static const char *const cc[] = { "v" };
	static const char *const fc[] = { "v", "vm" };
	gcc_jit_lvalue *out;
	gcc_jit_rvalue *in[2];
	vform_t a, b, c;
	int64_t v;

	if (uniform(k, e)) {
		int is_known = known(k, e, &v);

		if (e->type == KS_TY_BOOL)
			return bad();
		return uform(V->gen ? ks_cpu_lx(V->L, e) : NULL, is_known,
		    is_known ? v : 0, e->kind == KS_X_VAR ? e->var : -1);
	}
	switch (e->kind) {
	case KS_X_LANE: {
		vform_t f = { VF_A, NULL, 0, (int64_t)VW * V->h, -1, NULL, 0,
			0 };

		return f;
	}
	case KS_X_VAR:
		if (e->type == KS_TY_I64 || V->i64[V->h][e->var].kind != VF_BAD)
			return V->i64[V->h][e->var];
		if (e->type != KS_TY_F32 && e->type != KS_TY_I32)
			return bad();
		return vform(V->gen ? rv(lane_half(V, e->var)) : NULL);
	case KS_X_BIN:
		return vbin(V, e);
	case KS_X_FMA:
		a = vx(V, e->a);
		b = vx(V, e->b);
		c = vx(V, e->c);
		if (a.kind == VF_BAD || b.kind == VF_BAD || c.kind == VF_BAD ||
		    a.kind == VF_A || b.kind == VF_A || c.kind == VF_A)
			return bad();
		if ((a.kind == VF_T) + (b.kind == VF_T) + (c.kind == VF_T) == 1 &&
		    a.kind != VF_V && b.kind != VF_V && c.kind != VF_V) {
			/* One table, the rest uniform (q4_k's weight): the
			 * fma on the table. */
			vform_t f = a.kind == VF_T ? a : b.kind == VF_T ? b : c;

			f.iota = 0;
			if (!V->gen)
				return f;
			out = ks_cpu_local(V->L, V->vf, "vf");
			gcc_jit_block_add_assignment(V->L->blk, NULL, out,
			    c.kind == VF_T ? table(V, &c) : vec(V, &c,
			    KS_TY_F32));
			in[0] = b.kind == VF_T ? table(V, &b) : vec(V, &b,
			    KS_TY_F32);
			in[1] = a.kind == VF_T ? table(V, &a) : vec(V, &a,
			    KS_TY_F32);
			asm_op(V, "vfmadd231ps %2, %1, %0", "+v", out, 2, fc, in);
			f.r = rv(out);
			return f;
		}
		if (!V->gen)
			return vform(NULL);
		/* acc = b * a + acc: the product is exact before the one
		 * rounding, so the operand order is the scalar fmaf's. */
		out = ks_cpu_local(V->L, V->vf, "vf");
		gcc_jit_block_add_assignment(V->L->blk, NULL, out,
		    vec(V, &c, KS_TY_F32));
		in[0] = vec(V, &b, KS_TY_F32);
		in[1] = vec(V, &a, KS_TY_F32);
		asm_op(V, "vfmadd231ps %2, %1, %0", "+v", out, 2, fc, in);
		return vform(rv(out));
	case KS_X_CAST:
		a = vx(V, e->a);
		if (a.kind == VF_U) {
			if (e->type == KS_TY_BOOL || e->a->type == KS_TY_BOOL)
				return bad();
			if (a.known && e->type != KS_TY_F32 &&
			    e->a->type != KS_TY_F32) {
				v = e->type == KS_TY_I32 ?
				    (int64_t)(int32_t)(uint32_t)a.c : a.c;
				return uform(V->gen ? cint(V, scalar_ty(V,
				    e->type), v) : NULL, 1, v, -1);
			}
			return uform(V->gen ? gcc_jit_context_new_cast(
			    V->L->ctx, NULL, a.r, scalar_ty(V, e->type)) :
			    NULL, 0, 0, -1);
		}
		if ((a.kind != VF_V && a.kind != VF_T) ||
		    e->a->type != KS_TY_I32 || e->type != KS_TY_F32)
			return bad();
		if (!V->gen)
			return a.kind == VF_T ? a : vform(NULL);
		/* A table converts as its 16 elements. */
		in[0] = a.kind == VF_T ? table(V, &a) : a.r;
		out = ks_cpu_local(V->L, V->vf, "vc");
		asm_op(V, "vcvtdq2ps %1, %0", "=v", out, 1, cc, in);
		if (a.kind == VF_T) {
			a.r = rv(out);
			a.iota = 0;
			return a;
		}
		return vform(rv(out));
	case KS_X_LOAD:
		return load(V, e, 0);
	case KS_X_QDOT:
		return qdot(V, e);
	default:
		return bad();
	}
}

/* ---- statements ---- */

/* An i64 lane variable's value in the half, written to its array (two
 * vectors of 8: dead stores when nothing reads the array, which GCC
 * removes) and remembered as the form F for reads in this LANES. */
static void set_i64(vx_t *V, int var, const vform_t *f)
{
	gcc_jit_type *ti = V->L->t_i64;
	gcc_jit_rvalue *el[VW / 2], *base;
	int i, q;

	V->i64[V->h][var] = *f;
	if (!V->gen)
		return;
	base = f->kind == VF_A ? index_of(V, f) : f->known ?
	    cint(V, ti, f->c) : f->r;
	base = let(V, ti, base);
	for (q = 0; q < 2; q++) {
		for (i = 0; i < VW / 2; i++)
			el[i] = f->kind == VF_A ? binop(V,
			    GCC_JIT_BINARY_OP_PLUS, ti, base,
			    cint(V, ti, q * VW / 2 + i)) : base;
		gcc_jit_block_add_assignment(V->L->blk, NULL, vec_at(V,
		    rv(V->L->var[var]), cint(V, ti, VW * V->h + q * VW / 2),
		    V->vl), gcc_jit_context_new_rvalue_from_vector(V->L->ctx,
		    NULL, V->vl, VW / 2, el));
	}
}

static int vstmt(vx_t *V, const ks_stmt_t *s);

static int vblock(vx_t *V, const ks_stmt_t *b)
{
	int i;

	for (i = 0; b != NULL && i < b->nitems; i++)
		if (!vstmt(V, b->items[i]))
			return 0;
	return 1;
}

static int vstmt(vx_t *V, const ks_stmt_t *s)
{
	const ks_ir_kernel_t *k = V->L->k;
	const ks_ir_param_t *p;
	vform_t f, ix;
	ks_ty_t t;

	switch (s->kind) {
	case KS_S_BLOCK:
		return vblock(V, s);
	case KS_S_DECL:
	case KS_S_ASSIGN:
		if (k->vars[s->var].scope != KS_VAR_LANE)
			return 0;
		if (s->a == NULL)
			return 1;
		t = k->vars[s->var].type;
		f = vx(V, s->a);
		if (t == KS_TY_I64) {
			if (f.kind != VF_A && f.kind != VF_U)
				return 0;
			set_i64(V, s->var, &f);
			return 1;
		}
		if ((t != KS_TY_F32 && t != KS_TY_I32) ||
		    (f.kind != VF_U && f.kind != VF_V && f.kind != VF_T))
			return 0;
		if (V->gen) {
			/* Its value now, for this LANES statement's reads (a
			 * table stays one), and in its array for the rest. */
			gcc_jit_type *vt = t == KS_TY_F32 ? V->vf : V->vi;

			if (f.kind == VF_T) {
				f.idx = let(V, V->vi, f.idx);
				f.r = let(V, vt, table(V, &f));
				f.iota = 0;
			} else if (f.kind == VF_V) {
				f.r = let(V, vt, f.r);
			} else {
				f.r = let(V, scalar_ty(V, t), f.known ?
				    cint(V, scalar_ty(V, t), f.c) : f.r);
				f.known = 0;
			}
			gcc_jit_block_add_assignment(V->L->blk, NULL,
			    lane_half(V, s->var), vec(V, &f, t));
		}
		f.var = -1;
		V->i64[V->h][s->var] = f;
		return 1;
	case KS_S_IF:
		/* Only a condition the half answers alike: its branch. */
		f = vx(V, s->a);
		if (f.kind != VF_U || !f.known)
			return 0;
		return vblock(V, f.c ? s->body : s->orelse);
	case KS_S_STORE:
		/* f32 and i32 elements at a contiguous index. */
		p = &k->params[s->param];
		t = p->type;
		if (p->kind != KS_PARAM_BUFFER || p->bytes ||
		    (t == KS_TY_F32 && p->dtype != KS_DTYPE_F32) ||
		    V->L->param[s->param] == NULL)
			return 0;
		ix = vx(V, s->a);
		f = vx(V, s->b);
		if (ix.kind != VF_A || (f.kind != VF_U && f.kind != VF_V &&
		    f.kind != VF_T))
			return 0;
		if (V->gen)
			gcc_jit_block_add_assignment(V->L->blk, NULL, vec_at(V,
			    rv(V->L->param[s->param]), index_of(V, &ix),
			    t == KS_TY_F32 ? V->vfu : V->viu), vec(V, &f, t));
		return 1;
	default:
		return 0;
	}
}

/*
 * The body's statements in order, each for every half before the next
 * (rather than the whole body per half): a value both halves use, such as
 * a row's broadcast scale, then lives across one statement, not across
 * the body, which keeps a gemv's 8 rows of accumulators in registers.
 */
static int vbody(vx_t *V, const ks_stmt_t *body)
{
	int i, h;

	for (i = 0; i < body->nitems; i++)
		for (h = 0; h < V->L->k->nlanes / VW; h++) {
			V->h = h;
			if (!vstmt(V, body->items[i]))
				return 0;
		}
	return 1;
}

int ks_cpu_vec_lanes(lower_t *L, const ks_stmt_t *body)
{
	const ks_ir_kernel_t *k = L->k;
	vx_t V;
	int pass, h, i, ok = 1;

	if (!L->vec || (k->nlanes != VW && k->nlanes != 2 * VW))
		return 0;
	memset(&V, 0, sizeof(V));
	V.L = L;
	V.i64[0] = calloc((size_t)k->nvars + 1, sizeof(*V.i64[0]));
	V.i64[1] = calloc((size_t)k->nvars + 1, sizeof(*V.i64[1]));
	V.vf = gcc_jit_type_get_vector(L->t_f32, VW);
	V.vi = gcc_jit_type_get_vector(L->t_i32, VW);
	V.vfu = gcc_jit_type_get_aligned(V.vf, 4);
	V.viu = gcc_jit_type_get_aligned(V.vi, 4);
	V.vb = gcc_jit_type_get_aligned(gcc_jit_type_get_vector(L->t_u8, VW),
	    1);
	V.vl = gcc_jit_type_get_vector(L->t_i64, VW / 2);
	/* The analysis of the body, then its code. */
	for (pass = 0; pass < 2 && ok && V.i64[0] && V.i64[1]; pass++) {
		V.gen = pass;
		V.qmemo.n = 0;
		for (h = 0; h < 2; h++) {
			V.nmemo[h] = 0;
			for (i = 0; i < k->nvars; i++)
				V.i64[h][i] = bad();
		}
		ok = vbody(&V, body);
	}
	ok = ok && V.i64[0] && V.i64[1];
	free(V.i64[0]);
	free(V.i64[1]);
	return ok;
}

int ks_cpu_vec_fill(lower_t *L, int var, gcc_jit_rvalue *init)
{
	const ks_ir_kernel_t *k = L->k;
	ks_ty_t t = k->vars[var].type;
	gcc_jit_rvalue *el[VW];
	gcc_jit_type *vt;
	vx_t V;
	int h, i;

	if (!L->vec || (k->nlanes != VW && k->nlanes != 2 * VW) ||
	    (t != KS_TY_F32 && t != KS_TY_I32))
		return 0;
	memset(&V, 0, sizeof(V));
	V.L = L;
	V.vf = gcc_jit_type_get_vector(L->t_f32, VW);
	V.vi = gcc_jit_type_get_vector(L->t_i32, VW);
	vt = t == KS_TY_F32 ? V.vf : V.vi;
	for (i = 0; i < VW; i++)
		el[i] = init;
	for (h = 0; h < k->nlanes / VW; h++) {
		V.h = h;
		gcc_jit_block_add_assignment(L->blk, NULL, lane_half(&V, var),
		    gcc_jit_context_new_rvalue_from_vector(L->ctx, NULL, vt,
		    VW, el));
	}
	return 1;
}
