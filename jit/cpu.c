/*
 * cpu: the libgccjit backend.  IR -> gccjit calls -> shared object bytes.
 *
 * Artifact ABI (docs/backends.md):
 *
 *   void ENTRY(void **params, uint64_t group_begin, uint64_t group_end);
 *
 * params[i] points to the value of the i-th *unbound* parameter in
 * declaration order: for a buffer to its data pointer, for an i64 scalar to
 * an int64_t, for an f32 scalar to a float.  The entry unpacks them once,
 * then runs the body for every work-group g in [group_begin, group_end).
 *
 * Lowering of the execution model (specialize.h):
 *   - uniform variables are plain locals; KS_X_GROUP is the loop counter;
 *   - a LANES statement is `for (lane = 0; lane < nlanes; lane++) body`;
 *   - a lane variable is a local array v[nlanes], read as v[lane].  A loop
 *     over a local float[32] with fmaf is what GCC vectorizes into packed
 *     FMAs; 32 separate scalars would stay scalar (docs/backends.md);
 *   - KS_X_REDUCE is the canonical tree t[l] = v[l] op v[l + s] for
 *     s = nlanes/2 .. 1, fully unrolled, in that order; result t[0] (an
 *     f32 sum of 32 lanes does its 16-, 8- and 4-wide levels as vector
 *     adds, reduce_sum32);
 *   - loads and stores convert between the storage dtype and f32 through
 *     small always-inline helpers written with integer bit operations, so
 *     they are exact, independent of the FP environment's rounding of
 *     subnormals where possible, and vectorizable (no branches).
 *
 * Numerics: -ffp-contract=off keeps every a*b+c as two roundings; fma only
 * where the IR says KS_X_FMA (__builtin_fmaf).  Nothing that reassociates
 * or assumes finite math is ever passed.  The conversions assume the
 * default rounding mode (round-to-nearest-even), as all of kspec does.
 *
 * Thread safety: every compile builds its own gccjit context and its own
 * temporary directory; libgccjit serializes the compile step internally.
 * The only global state is the compiler's build name for the identity,
 * set once under pthread_once (cpu_target.c, with the targets, the
 * options and the step that writes the compiled bytes).
 */
#include "cpu_lower.h"
#include "helpers.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libgccjit.h>

/* ---- lowering state ---- */


static void fail(lower_t *L, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void fail(lower_t *L, const char *fmt, ...)
{
	va_list ap;

	if (L->rc != KS_OK)
		return;                 /* keep the first error */
	L->rc = KS_E_COMPILE;
	if (L->err != NULL && L->errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(L->err, L->errlen, fmt, ap);
		va_end(ap);
	}
}

static const char *name(lower_t *L, const char *prefix, char *buf,
    size_t len)
{
	snprintf(buf, len, "%s%d", prefix, L->serial++);
	return buf;
}

static gcc_jit_lvalue *local(lower_t *L, gcc_jit_type *t, const char *pfx)
{
	char buf[32];

	return gcc_jit_function_new_local(L->fn, NULL, t,
	    name(L, pfx, buf, sizeof(buf)));
}

gcc_jit_lvalue *ks_cpu_local(lower_t *L, gcc_jit_type *t, const char *pfx)
{
	return local(L, t, pfx);
}

static gcc_jit_block *block(lower_t *L, const char *pfx)
{
	char buf[32];

	return gcc_jit_function_new_block(L->fn, name(L, pfx, buf,
	    sizeof(buf)));
}

static gcc_jit_rvalue *rv(gcc_jit_lvalue *lv)
{
	return gcc_jit_lvalue_as_rvalue(lv);
}

static void assign(lower_t *L, gcc_jit_lvalue *lv, gcc_jit_rvalue *v)
{
	gcc_jit_block_add_assignment(L->blk, NULL, lv, v);
}

/* A new local of type T set to V in the current block. */
static gcc_jit_rvalue *let(lower_t *L, gcc_jit_type *t, gcc_jit_rvalue *v)
{
	gcc_jit_lvalue *lv = local(L, t, "t");

	assign(L, lv, v);
	return rv(lv);
}

static gcc_jit_rvalue *cint(lower_t *L, gcc_jit_type *t, long v)
{
	return gcc_jit_context_new_rvalue_from_long(L->ctx, t, v);
}

static gcc_jit_rvalue *op(lower_t *L, enum gcc_jit_binary_op o,
    gcc_jit_type *t, gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
	return gcc_jit_context_new_binary_op(L->ctx, NULL, o, t, a, b);
}

static gcc_jit_rvalue *cmp(lower_t *L, enum gcc_jit_comparison c,
    gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
	return gcc_jit_context_new_comparison(L->ctx, NULL, c, a, b);
}

static gcc_jit_rvalue *cast(lower_t *L, gcc_jit_rvalue *v, gcc_jit_type *t)
{
	return gcc_jit_context_new_cast(L->ctx, NULL, v, t);
}

static gcc_jit_rvalue *bitcast(lower_t *L, gcc_jit_rvalue *v,
    gcc_jit_type *t)
{
	return gcc_jit_context_new_bitcast(L->ctx, NULL, v, t);
}

/*
 * Branch-free select of integers of type T: b ^ ((a ^ b) & -(T)c).
 * gccjit 12 has no conditional expression; blocks would do, but a mask is
 * certain to if-convert and vectorize inside the lane loop.
 */
static gcc_jit_rvalue *sel(lower_t *L, gcc_jit_type *t, gcc_jit_rvalue *c,
    gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
	gcc_jit_rvalue *m = gcc_jit_context_new_unary_op(L->ctx, NULL,
	    GCC_JIT_UNARY_OP_MINUS, t, cast(L, c, t));

	return op(L, GCC_JIT_BINARY_OP_BITWISE_XOR, t, b,
	    op(L, GCC_JIT_BINARY_OP_BITWISE_AND, t,
	    op(L, GCC_JIT_BINARY_OP_BITWISE_XOR, t, a, b), m));
}

static gcc_jit_rvalue *f32c(lower_t *L, float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	/* NaN payloads would not survive the double of
	 * new_rvalue_from_double; the bit pattern does, and folds. */
	if (f != f)
		return bitcast(L, cint(L, L->t_u32, (long)u), L->t_f32);
	return gcc_jit_context_new_rvalue_from_double(L->ctx, L->t_f32, f);
}

/* ---- helpers: helpers.c's programs, always inlined ---- */

static gcc_jit_rvalue *call(lower_t *L, int h, int n, gcc_jit_rvalue *a,
    gcc_jit_rvalue *b);

static gcc_jit_type *prog_ty(lower_t *L, int t)
{
	switch (t) {
	case KSH_U16: return L->t_u16;
	case KSH_U32: return L->t_u32;
	case KSH_I32: return L->t_i32;
	case KSH_I64: return L->t_i64;
	case KSH_F32: return L->t_f32;
	}
	return L->t_bool;
}

/* gccjit's operation for each arithmetic, bitwise and comparison op. */
static const int prog_binop[] = {
	[KSH_ADD] = GCC_JIT_BINARY_OP_PLUS,
	[KSH_SUB] = GCC_JIT_BINARY_OP_MINUS,
	[KSH_MUL] = GCC_JIT_BINARY_OP_MULT,
	[KSH_DIV] = GCC_JIT_BINARY_OP_DIVIDE,
	[KSH_AND] = GCC_JIT_BINARY_OP_BITWISE_AND,
	[KSH_OR] = GCC_JIT_BINARY_OP_BITWISE_OR,
	[KSH_XOR] = GCC_JIT_BINARY_OP_BITWISE_XOR,
	[KSH_SHL] = GCC_JIT_BINARY_OP_LSHIFT,
	[KSH_SHR] = GCC_JIT_BINARY_OP_RSHIFT,
};
static const int prog_cmp[] = {
	[KSH_EQ] = GCC_JIT_COMPARISON_EQ,
	[KSH_NE] = GCC_JIT_COMPARISON_NE,
	[KSH_LT] = GCC_JIT_COMPARISON_LT,
	[KSH_GT] = GCC_JIT_COMPARISON_GT,
	[KSH_GE] = GCC_JIT_COMPARISON_GE,
};

/*
 * Helper H as an always-inline function: its program, one local per
 * value.  Selects are sel()'s masks, so the helper if-converts and
 * vectorizes inside lane loops.  Helper names start with "ksh_", which no
 * entry ("ks_<kernel>_<variant>") can collide with.
 */
static void build_helper(lower_t *L, int h)
{
	ksh_prog_t p;
	gcc_jit_param *ps[2];
	gcc_jit_rvalue *v[KSH_MAX_INS], *fa[3];
	gcc_jit_type *t;
	int i;

	ksh_build((ksh_id_t)h, &p);
	for (i = 0; i < p.nargs; i++)
		ps[i] = gcc_jit_context_new_param(L->ctx, NULL,
		    prog_ty(L, p.arg), i ? "b" : "a");
	L->fn = gcc_jit_context_new_function(L->ctx, NULL,
	    GCC_JIT_FUNCTION_ALWAYS_INLINE, prog_ty(L, p.ret), p.name,
	    p.nargs, ps, 0);
	L->blk = gcc_jit_function_new_block(L->fn, "entry");
	for (i = 0; i < p.nins; i++) {
		const ksh_ins_t *in = &p.ins[i];
		gcc_jit_rvalue *a = in->a >= 0 ? v[in->a] : NULL;
		gcc_jit_rvalue *b = in->b >= 0 ? v[in->b] : NULL;
		gcc_jit_rvalue *c = in->c >= 0 ? v[in->c] : NULL;
		float f;
		uint32_t u;

		t = prog_ty(L, in->ty);
		switch ((ksh_op_t)in->op) {
		case KSH_ARG:
			v[i] = gcc_jit_param_as_rvalue(ps[in->imm]);
			continue;
		case KSH_CONST:
			if (in->ty == KSH_F32) {
				u = (uint32_t)in->imm;
				memcpy(&f, &u, sizeof f);
				v[i] = f32c(L, f);
			} else {
				v[i] = cint(L, t, (long)in->imm);
			}
			continue;
		case KSH_CVT:
			v[i] = let(L, t, cast(L, a, t));
			continue;
		case KSH_BITS:
			v[i] = let(L, t, bitcast(L, a, t));
			continue;
		case KSH_ADD: case KSH_SUB: case KSH_MUL: case KSH_DIV:
		case KSH_AND: case KSH_OR: case KSH_XOR: case KSH_SHL:
		case KSH_SHR:
			v[i] = let(L, t, op(L,
			    (enum gcc_jit_binary_op)prog_binop[in->op], t, a,
			    b));
			continue;
		case KSH_FMA:
			fa[0] = a;
			fa[1] = b;
			fa[2] = c;
			v[i] = let(L, t, gcc_jit_context_new_call(L->ctx, NULL,
			    L->fmaf, 3, fa));
			continue;
		case KSH_EQ: case KSH_NE: case KSH_LT: case KSH_GT:
		case KSH_GE:
			v[i] = cmp(L, (enum gcc_jit_comparison)prog_cmp[in->op],
			    a, b);
			continue;
		case KSH_SEL:
			v[i] = let(L, t, sel(L, t, a, b, c));
			continue;
		case KSH_CALL:
			v[i] = let(L, t, call(L, (int)in->imm, b ? 2 : 1, a, b));
			continue;
		case KSH_RET:
			gcc_jit_block_end_with_return(L->blk, NULL, a);
			continue;
		}
	}
}

/* The helper H, built on first use (the set built depends only on the IR,
 * so output stays deterministic). */
static gcc_jit_function *helper(lower_t *L, int h)
{
	gcc_jit_function *fn = L->fn;
	gcc_jit_block *blk = L->blk;

	if (L->helper[h] != NULL)
		return L->helper[h];
	build_helper(L, h);
	L->helper[h] = L->fn;
	L->fn = fn;
	L->blk = blk;
	return L->helper[h];
}

static gcc_jit_rvalue *call(lower_t *L, int h, int n, gcc_jit_rvalue *a,
    gcc_jit_rvalue *b)
{
	gcc_jit_rvalue *args[2] = { a, b };

	return gcc_jit_context_new_call(L->ctx, NULL, helper(L, h), n, args);
}

/* ---- expressions ---- */

static gcc_jit_type *ty(lower_t *L, ks_ty_t t)
{
	switch (t) {
	case KS_TY_BOOL: return L->t_bool;
	case KS_TY_I64: return L->t_i64;
	case KS_TY_F32: return L->t_f32;
	case KS_TY_I32: return L->t_i32;
	}
	return L->t_i64;
}

/* The element type buffer P holds in memory. */
static gcc_jit_type *elem_ty(lower_t *L, const ks_ir_param_t *p)
{
	if (p->bytes)
		return L->t_u8;
	if (p->type == KS_TY_I32)
		return L->t_i32;
	return p->dtype == KS_DTYPE_F32 ? L->t_f32 : L->t_u16;
}

/* The lvalue of variable VAR at the current point: the local, or the
 * current lane's element of the lane array. */
static gcc_jit_lvalue *var_lv(lower_t *L, int var)
{
	if (L->k->vars[var].scope == KS_VAR_UNIFORM)
		return L->var[var];
	if (L->lane == NULL) {
		fail(L, "lane variable '%s' used outside LANES",
		    L->k->vars[var].name);
		return L->var[var];
	}
	return gcc_jit_context_new_array_access(L->ctx, NULL,
	    rv(L->var[var]), rv(L->lane));
}

static gcc_jit_rvalue *lx(lower_t *L, const ks_expr_t *e);

static gcc_jit_rvalue *combine(lower_t *L, int is_max, ks_ty_t t,
    gcc_jit_rvalue *a, gcc_jit_rvalue *b)
{
	if (!is_max)
		return op(L, GCC_JIT_BINARY_OP_PLUS, ty(L, t), a, b);
	if (t == KS_TY_F32)
		return call(L, KSH_FMAX, 2, a, b);
	return call(L, KSH_IMAX, 2, a, b);
}

/*
 * KS_X_REDUCE: the canonical order, statement by statement in the current
 * block: t[l] = v[l] op v[l + n/2] for l < n/2, then t[l] = t[l] op
 * t[l + s] for s = n/4 .. 1.  No loop is left for GCC to reorder, and
 * -ffp-contract=off with no -ffast-math means it may not reassociate.
 */
/*
 * The f32 sum tree over 32 lanes with vector operations for the levels of
 * 16, 8 and 4 (t[l] = v[l] + v[l + s] for l < s is one element-wise add of
 * two s-wide vectors: the same additions, each correctly rounded, so the
 * same bits), then scalar for 2 and 1.  The lane array is read and written
 * through under-aligned vector types (unaligned loads and stores).  A
 * REDUCE per position is hot in attention_decode; the scalar tree was about
 * half of its time.
 */
static gcc_jit_rvalue *reduce_sum32(lower_t *L, gcc_jit_rvalue *src)
{
	gcc_jit_type *f = L->t_f32;
	gcc_jit_lvalue *tmp = local(L, gcc_jit_context_new_array_type(L->ctx,
	    NULL, f, 16), "red");
	gcc_jit_rvalue *x, *y;
	int s;

	for (s = 16; s >= 4; s /= 2) {
		gcc_jit_type *vt = gcc_jit_type_get_aligned(
		    gcc_jit_type_get_vector(f, (size_t)s), 4);
		gcc_jit_type *vp = gcc_jit_type_get_pointer(vt);

#define VEC_AT_(arr, i) gcc_jit_rvalue_dereference(gcc_jit_context_new_cast( \
	L->ctx, NULL, gcc_jit_lvalue_get_address( \
	gcc_jit_context_new_array_access(L->ctx, NULL, (arr), \
	cint(L, L->t_i64, (i))), NULL), vp), NULL)
		x = rv(VEC_AT_(src, 0));
		y = rv(VEC_AT_(src, s));
		assign(L, VEC_AT_(rv(tmp), 0),
		    op(L, GCC_JIT_BINARY_OP_PLUS, vt, x, y));
#undef VEC_AT_
		src = rv(tmp);
	}
	for (s = 2; s >= 1; s /= 2) {
		int l;

		for (l = 0; l < s; l++) {
			x = rv(gcc_jit_context_new_array_access(L->ctx, NULL,
			    src, cint(L, L->t_i64, l)));
			y = rv(gcc_jit_context_new_array_access(L->ctx, NULL,
			    src, cint(L, L->t_i64, l + s)));
			assign(L, gcc_jit_context_new_array_access(L->ctx,
			    NULL, rv(tmp), cint(L, L->t_i64, l)),
			    op(L, GCC_JIT_BINARY_OP_PLUS, f, x, y));
		}
	}
	return rv(gcc_jit_context_new_array_access(L->ctx, NULL, rv(tmp),
	    cint(L, L->t_i64, 0)));
}

static gcc_jit_rvalue *lower_reduce(lower_t *L, const ks_expr_t *e)
{
	const ks_ir_var_t *v = &L->k->vars[e->var];
	int n = L->k->nlanes, s, l, is_max = e->red == KS_RED_MAX;
	gcc_jit_type *t = ty(L, v->type);
	gcc_jit_lvalue *tmp;
	gcc_jit_rvalue *src = rv(L->var[e->var]);

	if (v->scope != KS_VAR_LANE || L->lane != NULL) {
		fail(L, "REDUCE of '%s' %s", v->name, L->lane ?
		    "inside LANES" : "of a uniform variable");
		return cint(L, L->t_i64, 0);
	}
	if (v->type == KS_TY_BOOL) {
		fail(L, "REDUCE of bool variable '%s'", v->name);
		return cint(L, L->t_i64, 0);
	}
	if (n == 1)
		return rv(gcc_jit_context_new_array_access(L->ctx, NULL, src,
		    cint(L, L->t_i64, 0)));
	if (n == 32 && !is_max && v->type == KS_TY_F32)
		return reduce_sum32(L, src);
	tmp = local(L, gcc_jit_context_new_array_type(L->ctx, NULL, t, n / 2),
	    "red");
	for (s = n / 2; s >= 1; s /= 2) {
		for (l = 0; l < s; l++) {
			gcc_jit_rvalue *x = rv(gcc_jit_context_new_array_access(
			    L->ctx, NULL, src, cint(L, L->t_i64, l)));
			gcc_jit_rvalue *y = rv(gcc_jit_context_new_array_access(
			    L->ctx, NULL, src, cint(L, L->t_i64, l + s)));

			assign(L, gcc_jit_context_new_array_access(L->ctx,
			    NULL, rv(tmp), cint(L, L->t_i64, l)),
			    combine(L, is_max, v->type, x, y));
		}
		src = rv(tmp);
	}
	return rv(gcc_jit_context_new_array_access(L->ctx, NULL, rv(tmp),
	    cint(L, L->t_i64, 0)));
}

/*
 * KS_X_SELECT evaluates only the chosen operand (an operand may be a load
 * that is out of bounds when not chosen, e.g. a K tail), through blocks
 * and a temporary; GCC if-converts this into masked loads in lane loops.
 */
static gcc_jit_rvalue *lower_select(lower_t *L, const ks_expr_t *e)
{
	gcc_jit_lvalue *tmp = local(L, ty(L, e->type), "sel");
	gcc_jit_block *bt = block(L, "sel_t"), *bf = block(L, "sel_f");
	gcc_jit_block *join = block(L, "sel_j");

	gcc_jit_block_end_with_conditional(L->blk, NULL, lx(L, e->a), bt, bf);
	L->blk = bt;
	assign(L, tmp, lx(L, e->b));
	gcc_jit_block_end_with_jump(L->blk, NULL, join);
	L->blk = bf;
	assign(L, tmp, lx(L, e->c));
	gcc_jit_block_end_with_jump(L->blk, NULL, join);
	L->blk = join;
	return rv(tmp);
}

static gcc_jit_rvalue *lower_bin(lower_t *L, const ks_expr_t *e)
{
	static const enum gcc_jit_binary_op arith[] = {
		[KS_OP_ADD] = GCC_JIT_BINARY_OP_PLUS,
		[KS_OP_SUB] = GCC_JIT_BINARY_OP_MINUS,
		[KS_OP_MUL] = GCC_JIT_BINARY_OP_MULT,
		[KS_OP_DIV] = GCC_JIT_BINARY_OP_DIVIDE,
		[KS_OP_REM] = GCC_JIT_BINARY_OP_MODULO,
	};
	static const enum gcc_jit_binary_op bits[] = {
		[KS_OP_BAND] = GCC_JIT_BINARY_OP_BITWISE_AND,
		[KS_OP_BOR] = GCC_JIT_BINARY_OP_BITWISE_OR,
		[KS_OP_BXOR] = GCC_JIT_BINARY_OP_BITWISE_XOR,
		[KS_OP_SHL] = GCC_JIT_BINARY_OP_LSHIFT,
		[KS_OP_SHR] = GCC_JIT_BINARY_OP_RSHIFT,
	};
	static const enum gcc_jit_comparison cmps[] = {
		[KS_OP_LT] = GCC_JIT_COMPARISON_LT,
		[KS_OP_LE] = GCC_JIT_COMPARISON_LE,
		[KS_OP_EQ] = GCC_JIT_COMPARISON_EQ,
		[KS_OP_NE] = GCC_JIT_COMPARISON_NE,
	};
	ks_ty_t t = e->a->type;
	gcc_jit_rvalue *a, *b;

	if (e->a->type != e->b->type) {
		fail(L, "binary op on %s and %s", ks_ty_name(e->a->type),
		    ks_ty_name(e->b->type));
		return cint(L, L->t_i64, 0);
	}
	a = lx(L, e->a);
	b = lx(L, e->b);
	switch (e->op) {
	case KS_OP_ADD: case KS_OP_SUB: case KS_OP_MUL: case KS_OP_DIV:
	case KS_OP_REM:
		/* i64 DIVIDE/MODULO are C's: truncating toward zero. */
		if (t == KS_TY_BOOL || (t == KS_TY_F32 && e->op == KS_OP_REM))
			break;
		return op(L, arith[e->op], ty(L, t), a, b);
	case KS_OP_MIN: case KS_OP_MAX:
		if (t == KS_TY_F32)
			return call(L, e->op == KS_OP_MIN ? KSH_FMIN : KSH_FMAX, 2,
			    a, b);
		if (t == KS_TY_I64)
			return call(L, e->op == KS_OP_MIN ? KSH_IMIN : KSH_IMAX, 2,
			    a, b);
		break;
	case KS_OP_LT: case KS_OP_LE: case KS_OP_EQ: case KS_OP_NE:
		return cmp(L, cmps[e->op], a, b);
	case KS_OP_BAND: case KS_OP_BOR: case KS_OP_BXOR: case KS_OP_SHL:
	case KS_OP_SHR:
		/* On signed types: GCC's >> is arithmetic. */
		if (t != KS_TY_I64 && t != KS_TY_I32)
			break;
		return op(L, bits[e->op], ty(L, t), a, b);
	case KS_OP_AND: case KS_OP_OR:
		/* Both operands are pure: the non-short-circuit form keeps the
		 * lane loop free of branches. */
		if (t != KS_TY_BOOL)
			break;
		return op(L, e->op == KS_OP_AND ?
		    GCC_JIT_BINARY_OP_BITWISE_AND :
		    GCC_JIT_BINARY_OP_BITWISE_OR, L->t_bool, a, b);
	case KS_OP_COUNT:
		break;
	}
	fail(L, "binary op %d on %s is not supported", (int)e->op,
	    ks_ty_name(t));
	return a;
}

static gcc_jit_rvalue *lower_cast(lower_t *L, const ks_expr_t *e)
{
	gcc_jit_rvalue *a = lx(L, e->a);
	ks_ty_t from = e->a->type, to = e->type;

	if (from == to)
		return a;
	if (to == KS_TY_BOOL)
		return cmp(L, GCC_JIT_COMPARISON_NE, a, from == KS_TY_F32 ?
		    f32c(L, 0.0f) : cint(L, L->t_i64, 0));
	if (from == KS_TY_BOOL && to == KS_TY_F32)
		a = cast(L, a, L->t_i64);
	/* i64 and i32 -> f32 round to nearest even (cvtsi2ss in the default
	 * MXCSR); f32 -> i64 and i32 truncate, as in C; i64 -> i32 keeps
	 * the low 32 bits (GCC's conversion), i32 -> i64 sign-extends. */
	return cast(L, a, ty(L, to));
}

static gcc_jit_rvalue *lower_load(lower_t *L, const ks_expr_t *e)
{
	const ks_ir_param_t *p = &L->k->params[e->param];
	gcc_jit_rvalue *x;

	if (p->kind != KS_PARAM_BUFFER || L->param[e->param] == NULL) {
		fail(L, "load from '%s', which is not a buffer", p->name);
		return f32c(L, 0.0f);
	}
	x = rv(gcc_jit_context_new_array_access(L->ctx, NULL,
	    rv(L->param[e->param]), lx(L, e->a)));
	if (p->bytes)
		return cast(L, x, L->t_i32);   /* zero-extends: 0..255 */
	if (p->type == KS_TY_I32)
		return x;
	switch (p->dtype) {
	case KS_DTYPE_F16: return call(L, KSH_F16_TO_F32, 1, x, NULL);
	case KS_DTYPE_BF16: return call(L, KSH_BF16_TO_F32, 1, x, NULL);
	default: return x;
	}
}

/*
 * KS_X_UN.  sqrt is __builtin_sqrtf: sqrtss, correctly rounded (without
 * -fno-math-errno GCC adds a call to sqrtf for negative operands only, to
 * set errno; the value is the same NaN class).  abs is __builtin_fabsf
 * (a sign-bit mask) on f32 and GCC's ABS on i64; neg is unary minus (a
 * sign-bit flip on f32).  exp is kspec's own (ksh_expf, above), bitwise
 * equal on every backend.
 */
static gcc_jit_rvalue *lower_un(lower_t *L, const ks_expr_t *e)
{
	gcc_jit_rvalue *a = lx(L, e->a);
	gcc_jit_type *t = ty(L, e->type);
	int f = e->type == KS_TY_F32;

	switch (e->un) {
	case KS_UN_NEG:
		if (f || e->type == KS_TY_I64)
			return gcc_jit_context_new_unary_op(L->ctx, NULL,
			    GCC_JIT_UNARY_OP_MINUS, t, a);
		break;
	case KS_UN_ABS:
		if (f)
			return gcc_jit_context_new_call(L->ctx, NULL, L->fabsf,
			    1, &a);
		if (e->type == KS_TY_I64)
			return gcc_jit_context_new_unary_op(L->ctx, NULL,
			    GCC_JIT_UNARY_OP_ABS, t, a);
		break;
	case KS_UN_SQRT:
		if (f)
			return gcc_jit_context_new_call(L->ctx, NULL, L->sqrtf,
			    1, &a);
		break;
	case KS_UN_EXP:
		if (f)
			return call(L, KSH_EXP, 1, a, NULL);
		break;
	case KS_UN_F16:
		if (e->a->type == KS_TY_I32)
			return call(L, KSH_F16_TO_F32, 1, cast(L, a, L->t_u16),
			    NULL);
		break;
	case KS_UN_COUNT:
		break;
	}
	fail(L, "unary op %d on %s is not supported", (int)e->un,
	    ks_ty_name(e->type));
	return a;
}

static gcc_jit_rvalue *lx(lower_t *L, const ks_expr_t *e)
{
	const ks_ir_param_t *p;

	switch (e->kind) {
	case KS_X_CONST:
		if (e->type == KS_TY_F32)
			return f32c(L, e->f);
		if (e->type == KS_TY_BOOL)
			return cast(L, cint(L, L->t_i32, e->i != 0), L->t_bool);
		return cint(L, L->t_i64, (long)e->i);
	case KS_X_PARAM:
		p = &L->k->params[e->param];
		if (p->kind != KS_PARAM_SCALAR)
			break;
		if (p->bound) {
			if (p->type == KS_TY_I64)
				return cint(L, L->t_i64, (long)p->value);
			break;
		}
		return rv(L->param[e->param]);
	case KS_X_VAR:
		return rv(var_lv(L, e->var));
	case KS_X_GROUP:
		return rv(L->group);
	case KS_X_LANE:
		if (L->lane == NULL)
			break;
		return rv(L->lane);
	case KS_X_BIN:
		return lower_bin(L, e);
	case KS_X_FMA: {
		gcc_jit_rvalue *args[3] = {
			lx(L, e->a), lx(L, e->b), lx(L, e->c)
		};

		return gcc_jit_context_new_call(L->ctx, NULL, L->fmaf, 3,
		    args);
	}
	case KS_X_CAST:
		return lower_cast(L, e);
	case KS_X_LOAD:
		return lower_load(L, e);
	case KS_X_SELECT:
		return lower_select(L, e);
	case KS_X_REDUCE:
		return lower_reduce(L, e);
	case KS_X_UN:
		return lower_un(L, e);
	case KS_X_QDOT:
		return lx(L, e->a);     /* its plain IR (cpu_vec.c: native) */
	case KS_X_LLOAD:
		return rv(gcc_jit_context_new_array_access(L->ctx, NULL,
		    rv(L->local[e->param]), lx(L, e->a)));
	}
	fail(L, "expression kind %d is not valid here", (int)e->kind);
	return cint(L, ty(L, e->type), 0);
}

gcc_jit_rvalue *ks_cpu_lx(lower_t *L, const ks_expr_t *e)
{
	return lx(L, e);
}


/* ---- statements ---- */

static void ls(lower_t *L, const ks_stmt_t *s);

static void lower_block(lower_t *L, const ks_stmt_t *b)
{
	int i;

	if (b == NULL)
		return;
	for (i = 0; i < b->nitems && L->rc == KS_OK; i++)
		ls(L, b->items[i]);
}

/* for (lv = begin; lv < end; lv += step) body, with END re-evaluated each
 * trip as in C (it is pure; GCC hoists it).  END NULL means the constant N. */
static void loop(lower_t *L, gcc_jit_lvalue *lv, gcc_jit_rvalue *begin,
    const ks_expr_t *end, int64_t n, int64_t step, const ks_stmt_t *body)
{
	gcc_jit_block *head = block(L, "for_h"), *bb = block(L, "for_b");
	gcc_jit_block *after = block(L, "for_x");

	assign(L, lv, begin);
	gcc_jit_block_end_with_jump(L->blk, NULL, head);
	L->blk = head;
	gcc_jit_block_end_with_conditional(L->blk, NULL,
	    cmp(L, GCC_JIT_COMPARISON_LT, rv(lv),
	    end ? lx(L, end) : cint(L, L->t_i64, (long)n)), bb, after);
	L->blk = bb;
	lower_block(L, body);
	gcc_jit_block_add_assignment_op(L->blk, NULL, lv,
	    GCC_JIT_BINARY_OP_PLUS, cint(L, L->t_i64, (long)step));
	gcc_jit_block_end_with_jump(L->blk, NULL, head);
	L->blk = after;
}

/* Runs a fresh lane loop around BODY (a LANES statement). */
static void lanes(lower_t *L, const ks_stmt_t *body)
{
	gcc_jit_lvalue *lane = local(L, L->t_i64, "lane");

	if (L->lane != NULL) {
		fail(L, "nested LANES");
		return;
	}
	if (ks_cpu_vec_lanes(L, body))
		return;
	L->lane = lane;
	loop(L, lane, cint(L, L->t_i64, 0), NULL, L->k->nlanes, 1, body);
	L->lane = NULL;
}

/* Uniform variables are written only in uniform code (specialize.h); the
 * verifier checks it too, but a lane loop would silently keep the last
 * lane's value, so the backend refuses rather than miscompile. */
static int uniform_write_in_lanes(lower_t *L, int var)
{
	if (L->k->vars[var].scope != KS_VAR_UNIFORM || L->lane == NULL)
		return 0;
	fail(L, "uniform '%s' written inside LANES", L->k->vars[var].name);
	return 1;
}

static void lower_decl(lower_t *L, const ks_stmt_t *s)
{
	const ks_ir_var_t *v = &L->k->vars[s->var];
	gcc_jit_block *head, *bb, *after;
	gcc_jit_lvalue *l;
	gcc_jit_rvalue *init;

	if (s->a == NULL || uniform_write_in_lanes(L, s->var))
		return;
	if (v->scope == KS_VAR_UNIFORM || L->lane != NULL) {
		assign(L, var_lv(L, s->var), lx(L, s->a));
		return;
	}
	/* A lane variable declared in uniform code: every lane gets the
	 * uniform initializer, evaluated once. */
	init = let(L, ty(L, v->type), lx(L, s->a));
	if (ks_cpu_vec_fill(L, s->var, init))
		return;
	l = local(L, L->t_i64, "fill");
	head = block(L, "fill_h");
	bb = block(L, "fill_b");
	after = block(L, "fill_x");
	assign(L, l, cint(L, L->t_i64, 0));
	gcc_jit_block_end_with_jump(L->blk, NULL, head);
	L->blk = head;
	gcc_jit_block_end_with_conditional(L->blk, NULL,
	    cmp(L, GCC_JIT_COMPARISON_LT, rv(l),
	    cint(L, L->t_i64, L->k->nlanes)), bb, after);
	L->blk = bb;
	assign(L, gcc_jit_context_new_array_access(L->ctx, NULL,
	    rv(L->var[s->var]), rv(l)), init);
	gcc_jit_block_add_assignment_op(L->blk, NULL, l,
	    GCC_JIT_BINARY_OP_PLUS, cint(L, L->t_i64, 1));
	gcc_jit_block_end_with_jump(L->blk, NULL, head);
	L->blk = after;
}

static void lower_store(lower_t *L, const ks_stmt_t *s)
{
	const ks_ir_param_t *p = &L->k->params[s->param];
	gcc_jit_lvalue *dst;
	gcc_jit_rvalue *v;

	if (p->kind != KS_PARAM_BUFFER || L->param[s->param] == NULL) {
		fail(L, "store to '%s', which is not a buffer", p->name);
		return;
	}
	dst = gcc_jit_context_new_array_access(L->ctx, NULL,
	    rv(L->param[s->param]), lx(L, s->a));
	v = lx(L, s->b);
	switch (p->type == KS_TY_I32 ? KS_DTYPE_F32 : p->dtype) {
	case KS_DTYPE_F16: v = call(L, KSH_F32_TO_F16, 1, v, NULL); break;
	case KS_DTYPE_BF16: v = call(L, KSH_F32_TO_BF16, 1, v, NULL); break;
	default: break;
	}
	assign(L, dst, v);
}

/* __builtin_prefetch(&p[index], 0 (read), 3 (keep in every level: a
 * prefetcht0) or, level 2, 2 (prefetcht1, not into the first)). */
static void lower_prefetch(lower_t *L, const ks_stmt_t *s)
{
	gcc_jit_rvalue *args[3];

	if (L->param[s->param] == NULL) {
		fail(L, "prefetch of '%s', which is not a buffer",
		    L->k->params[s->param].name);
		return;
	}
	args[0] = gcc_jit_context_new_cast(L->ctx, NULL,
	    gcc_jit_lvalue_get_address(gcc_jit_context_new_array_access(
	    L->ctx, NULL, rv(L->param[s->param]), lx(L, s->a)), NULL),
	    L->t_cvoidp);
	args[1] = gcc_jit_context_zero(L->ctx, L->t_int);
	args[2] = gcc_jit_context_new_rvalue_from_int(L->ctx, L->t_int,
	    s->level == 2 ? 2 : 3);
	gcc_jit_block_add_eval(L->blk, NULL, gcc_jit_context_new_call(L->ctx,
	    NULL, L->prefetch, 3, args));
}

static void lower_if(lower_t *L, const ks_stmt_t *s)
{
	gcc_jit_block *bt = block(L, "if_t"), *join = block(L, "if_j");
	gcc_jit_block *bf = s->orelse ? block(L, "if_f") : join;

	gcc_jit_block_end_with_conditional(L->blk, NULL, lx(L, s->a), bt, bf);
	L->blk = bt;
	lower_block(L, s->body);
	gcc_jit_block_end_with_jump(L->blk, NULL, join);
	if (s->orelse) {
		L->blk = bf;
		lower_block(L, s->orelse);
		gcc_jit_block_end_with_jump(L->blk, NULL, join);
	}
	L->blk = join;
}

static void ls(lower_t *L, const ks_stmt_t *s)
{
	switch (s->kind) {
	case KS_S_BLOCK:
		lower_block(L, s);
		return;
	case KS_S_DECL:
		lower_decl(L, s);
		return;
	case KS_S_ASSIGN:
		if (uniform_write_in_lanes(L, s->var))
			return;
		assign(L, var_lv(L, s->var), lx(L, s->a));
		return;
	case KS_S_STORE:
		lower_store(L, s);
		return;
	case KS_S_FOR:
		if (L->k->vars[s->var].type != KS_TY_I64 || s->step <= 0) {
			fail(L, "FOR over '%s' needs an i64 variable and a "
			    "positive step", L->k->vars[s->var].name);
			return;
		}
		if (uniform_write_in_lanes(L, s->var))
			return;
		loop(L, var_lv(L, s->var), lx(L, s->a), s->b, 0, s->step,
		    s->body);
		return;
	case KS_S_IF:
		lower_if(L, s);
		return;
	case KS_S_LANES:
		lanes(L, s->body);
		return;
	case KS_S_LSTORE:
		assign(L, gcc_jit_context_new_array_access(L->ctx, NULL,
		    rv(L->local[s->param]), lx(L, s->a)), lx(L, s->b));
		return;
	case KS_S_BARRIER:
		return;         /* LANES phases already run one after another */
	case KS_S_PREFETCH:
		lower_prefetch(L, s);
		return;
	}
	fail(L, "statement kind %d is not valid", (int)s->kind);
}

/* ---- the entry ---- */

static void lower_entry(lower_t *L)
{
	const ks_ir_kernel_t *k = L->k;
	gcc_jit_param *ps[3];
	gcc_jit_rvalue *params, *gb, *ge;
	gcc_jit_lvalue *g;
	gcc_jit_block *head, *body, *done;
	int i, slot = 0;

	ps[0] = gcc_jit_context_new_param(L->ctx, NULL,
	    gcc_jit_type_get_pointer(L->t_voidp), "params");
	ps[1] = gcc_jit_context_new_param(L->ctx, NULL, L->t_u64,
	    "group_begin");
	ps[2] = gcc_jit_context_new_param(L->ctx, NULL, L->t_u64,
	    "group_end");
	L->fn = gcc_jit_context_new_function(L->ctx, NULL,
	    GCC_JIT_FUNCTION_EXPORTED, L->t_void, k->entry, 3, ps, 0);
	L->blk = gcc_jit_function_new_block(L->fn, "entry");
	params = gcc_jit_param_as_rvalue(ps[0]);
	gb = gcc_jit_param_as_rvalue(ps[1]);
	ge = gcc_jit_param_as_rvalue(ps[2]);

	/* Unpack the unbound parameters once, in declaration order. */
	for (i = 0; i < k->nparams; i++) {
		const ks_ir_param_t *p = &k->params[i];
		gcc_jit_type *t = p->kind == KS_PARAM_BUFFER ?
		    gcc_jit_type_get_pointer(elem_ty(L, p)) :
		    ty(L, p->type);
		gcc_jit_rvalue *addr;

		if (p->kind == KS_PARAM_SCALAR && p->bound)
			continue;
		addr = rv(gcc_jit_context_new_array_access(L->ctx, NULL,
		    params, cint(L, L->t_i32, slot++)));
		L->param[i] = local(L, t, "p");
		assign(L, L->param[i], rv(gcc_jit_rvalue_dereference(
		    cast(L, addr, gcc_jit_type_get_pointer(t)), NULL)));
	}

	/* Variables: locals, lane variables arrays of nlanes, aligned so the
	 * vectorizer needs no peeling. */
	for (i = 0; i < k->nvars; i++) {
		gcc_jit_type *t = ty(L, k->vars[i].type);

		if (k->vars[i].scope == KS_VAR_LANE) {
			t = gcc_jit_context_new_array_type(L->ctx, NULL, t,
			    k->nlanes);
			L->var[i] = local(L, t, "v");
			gcc_jit_lvalue_set_alignment(L->var[i], 64);
		} else {
			L->var[i] = local(L, t, "u");
		}
	}

	/* Local arrays: one stack array each, reused by every work-group of
	 * the call (their contents are undefined at a group's start).  Lanes
	 * run one LANES phase after another, so a barrier is a no-op. */
	for (i = 0; i < k->nlocals; i++)
		L->local[i] = local(L, gcc_jit_context_new_array_type(L->ctx,
		    NULL, L->t_f32, (int)k->locals[i].nelems), "l");

	/* for (g = group_begin; g < group_end; g++) body */
	g = local(L, L->t_u64, "g");
	L->group = local(L, L->t_i64, "group");
	head = block(L, "group_h");
	body = block(L, "group_b");
	done = block(L, "done");
	assign(L, g, gb);
	gcc_jit_block_end_with_jump(L->blk, NULL, head);
	gcc_jit_block_end_with_conditional(head, NULL,
	    cmp(L, GCC_JIT_COMPARISON_LT, rv(g), ge), body, done);
	L->blk = body;
	assign(L, L->group, cast(L, rv(g), L->t_i64));
	lower_block(L, k->body);
	gcc_jit_block_add_assignment_op(L->blk, NULL, g,
	    GCC_JIT_BINARY_OP_PLUS, cint(L, L->t_u64, 1));
	gcc_jit_block_end_with_jump(L->blk, NULL, head);
	gcc_jit_block_end_with_void_return(done, NULL);
}

/* ---- compile ---- */

static int is_pow2(int n)
{
	return n > 0 && (n & (n - 1)) == 0;
}

static int build(gcc_jit_context *ctx, const ks_ir_kernel_t *k,
    const char *target, char *err, size_t errlen)
{
	lower_t L;
	memset(&L, 0, sizeof(L));
	L.ctx = ctx;
	L.k = k;
	L.err = err;
	L.errlen = errlen;
	L.t_void = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_VOID);
	L.t_bool = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_BOOL);
	L.t_i64 = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_INT64_T);
	L.t_u64 = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_UINT64_T);
	L.t_i32 = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_INT32_T);
	L.t_u32 = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_UINT32_T);
	L.t_u16 = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_UINT16_T);
	L.t_u8 = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_UINT8_T);
	L.t_f32 = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_FLOAT);
	L.t_voidp = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_VOID_PTR);
	L.t_cvoidp = gcc_jit_type_get_pointer(gcc_jit_type_get_const(
	    L.t_void));
	L.t_int = gcc_jit_context_get_type(ctx, GCC_JIT_TYPE_INT);
	L.prefetch = gcc_jit_context_get_builtin_function(ctx,
	    "__builtin_prefetch");
	L.fmaf = gcc_jit_context_get_builtin_function(ctx, "__builtin_fmaf");
	L.vec = ks_cpu_vec_target(target) && ks_cpu_vec_kernel(k);
	L.vnni = ks_cpu_vnni_target(target);
	L.sqrtf = gcc_jit_context_get_builtin_function(ctx,
	    "__builtin_sqrtf");
	L.fabsf = gcc_jit_context_get_builtin_function(ctx,
	    "__builtin_fabsf");
	L.var = calloc((size_t)k->nvars + 1, sizeof(*L.var));
	L.param = calloc((size_t)k->nparams + 1, sizeof(*L.param));
	L.local = calloc((size_t)k->nlocals + 1, sizeof(*L.local));
	if (L.var == NULL || L.param == NULL || L.local == NULL) {
		free(L.var);
		free(L.param);
		free(L.local);
		ks_set_err(err, errlen, "out of memory");
		return KS_E_NOMEM;
	}

	/* Quiet by default: errors come back through
	 * gcc_jit_context_get_first_error, not stderr of the daemon. */
	gcc_jit_context_set_bool_print_errors_to_stderr(ctx, 0);
	/* Also sets -O3 for the int option, which gccjit passes first;
	 * cpu_opts repeats it so the identity shows it. */
	gcc_jit_context_set_int_option(ctx,
	    GCC_JIT_INT_OPTION_OPTIMIZATION_LEVEL, 3);
	ks_cpu_options(ctx, target);

	lower_entry(&L);
	free(L.var);
	free(L.param);
	free(L.local);
	return L.rc;
}

static int compile_kind(const ks_ir_kernel_t *k, const char *target,
    enum gcc_jit_output_kind kind, uint8_t **bytes, size_t *len,
    char *err, size_t errlen)
{
	gcc_jit_context *ctx;
	const char *gerr;
	int rc;

	if (!ks_cpu_target_known(target)) {
		ks_set_err(err, errlen, "cpu target '%.*s' is not resolved",
		    KS_MAX_NAME, target);
		return KS_E_BAD_TARGET;
	}
	if (!is_pow2(k->nlanes)) {
		ks_set_err(err, errlen, "nlanes %d is not a power of two",
		    k->nlanes);
		return KS_E_UNSUPPORTED;
	}
	ctx = gcc_jit_context_acquire();
	if (ctx == NULL) {
		ks_set_err(err, errlen, "gcc_jit_context_acquire failed");
		return KS_E_NOMEM;
	}
	rc = build(ctx, k, target, err, errlen);
	if (rc == KS_OK && (gerr = gcc_jit_context_get_first_error(ctx))) {
		ks_set_err(err, errlen, "libgccjit: %s", gerr);
		rc = KS_E_COMPILE;
	}
	if (rc == KS_OK)
		rc = ks_cpu_emit(ctx, kind, bytes, len, err, errlen);
	gcc_jit_context_release(ctx);
	return rc;
}

static int cpu_compile(const ks_ir_kernel_t *k, const char *target,
    const char *format, ks_jit_artifact_t *out, char *err, size_t errlen)
{
	uint64_t t0 = ks_now_ns();
	int rc;

	memset(out, 0, sizeof(*out));
	if (ks_cpu_check_format(format) != KS_OK) {
		ks_set_err(err, errlen, "cpu backend produces format 'so' only");
		return KS_E_BAD_FORMAT;
	}
	rc = compile_kind(k, target, GCC_JIT_OUTPUT_KIND_DYNAMIC_LIBRARY,
	    &out->bytes, &out->len, err, errlen);
	if (rc != KS_OK)
		return rc;
	memcpy(out->format, "so", 3);
	out->compile_ms = (double)(ks_now_ns() - t0) / 1e6;
	return KS_OK;
}

int ks_jit_cpu_assembly(const ks_ir_kernel_t *k, const char *target,
    ks_buf_t *out, char *err, size_t errlen)
{
	uint8_t *bytes = NULL;
	size_t len = 0;
	int rc;

	rc = compile_kind(k, target, GCC_JIT_OUTPUT_KIND_ASSEMBLER, &bytes,
	    &len, err, errlen);
	if (rc == KS_OK)
		rc = ks_buf_append(out, bytes, len);
	free(bytes);
	return rc;
}

int ks_jit_cpu_call(const ks_ir_kernel_t *k, ks_jit_cpu_entry_t fn,
    ks_jit_arg_t *args)
{
	void *params[KS_JIT_MAX_ARGS], *ptrs[KS_JIT_MAX_ARGS];
	int64_t groups;
	int i, np = 0;

	if (k->nparams > KS_JIT_MAX_ARGS ||
	    ks_jit_groups(k, args, &groups) != KS_OK)
		return KS_E_INVAL;
	for (i = 0; i < k->nparams; i++) {
		const ks_ir_param_t *p = &k->params[i];

		if (p->kind == KS_PARAM_SCALAR && p->bound)
			continue;
		if (p->kind == KS_PARAM_BUFFER) {
			ptrs[i] = args[i].data;
			params[np++] = &ptrs[i];
		} else {
			params[np++] = args[i].data;
		}
	}
	fn(params, 0, (uint64_t)groups);
	return KS_OK;
}

/* Loads A and calls its entry over its whole grid. */
static int cpu_run(const ks_ir_kernel_t *k, const char *target,
    const ks_jit_artifact_t *a, ks_jit_arg_t *args, char *err,
    size_t errlen)
{
	ks_jit_cpu_entry_t fn;
	ks_jit_cpu_lib_t *lib;
	int rc;

	(void)target;
	rc = ks_jit_cpu_load(a->bytes, a->len, k->entry, &lib, &fn, err,
	    errlen);
	if (rc != KS_OK)
		return rc;
	rc = ks_jit_cpu_call(k, fn, args);
	if (rc != KS_OK)
		ks_set_err(err, errlen, "%s.%s: the grid cannot be evaluated",
		    k->name, k->variant);
	ks_jit_cpu_unload(lib);
	return rc;
}

const ks_backend_t ks_backend_cpu = {
	.name = "cpu",
	.default_format = "so",
	.same_bytes = 1,
	.available = ks_cpu_available,
	.resolve_target = ks_cpu_resolve_target,
	.check_format = ks_cpu_check_format,
	.identity = ks_cpu_identity,
	.compile = cpu_compile,
	.targets = ks_cpu_list_targets,
	.run = cpu_run,
};
