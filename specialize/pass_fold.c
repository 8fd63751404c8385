/*
 * fold: constant folding and integer identities.
 *
 * Requires: a verified kernel.  Gives: a verified kernel with the same
 * results, bit for bit.
 *
 *   - i64 and bool operators over constants fold, except where the result
 *     is not representable: + - * << that overflow, shifts by a count
 *     outside [0, 64), / and % by zero or of INT64_MIN by -1 stay as they
 *     are, so folding never turns a defined program into a different one;
 *     i32 operators are not folded;
 *   - integer identities: x*1, 1*x, x+0, 0+x, x-0, x/1 -> x; x*0, 0*x,
 *     x%1 -> 0.  Dropping x is sound because expressions have no side
 *     effects (a load only reads);
 *   - bool identities: true&&x, x&&true, false||x, x||false -> x;
 *     false&&x, x&&false -> false; true||x, x||true -> true;
 *   - neg and abs of a constant (exact sign-bit operations; i64
 *     INT64_MIN stays);
 *   - select on a constant condition picks its operand;
 *   - IF on a constant condition becomes its taken block (or vanishes), and
 *     a block absorbs the blocks left in it (ks_ir_splice).
 *
 * f32 arithmetic is never folded or reassociated, not even over constants:
 * the numerical contract (docs/backends.md, "Numerics") is that the
 * backends compute exactly what the IR says, and host folding would make this compiler's
 * float environment part of every artifact.  Casts are not folded either,
 * nor sqrt and exp.
 */
#include "specialize.h"

#include <stdint.h>
#include <string.h>

static int is_i64(const ks_expr_t *e, int64_t v)
{
	return e->kind == KS_X_CONST && e->type == KS_TY_I64 && e->i == v;
}

static int is_bool(const ks_expr_t *e, int v)
{
	return e->kind == KS_X_CONST && e->type == KS_TY_BOOL &&
	    !!e->i == !!v;
}

static int is_const(const ks_expr_t *e)
{
	return e->kind == KS_X_CONST;
}

/* Folds an i64 operator over constants; returns 0 where it must not. */
static int fold_i64(ks_binop_t op, int64_t a, int64_t b, int64_t *out)
{
	switch (op) {
	case KS_OP_ADD: return !__builtin_add_overflow(a, b, out);
	case KS_OP_SUB: return !__builtin_sub_overflow(a, b, out);
	case KS_OP_MUL: return !__builtin_mul_overflow(a, b, out);
	case KS_OP_DIV:
	case KS_OP_REM:
		if (b == 0 || (a == INT64_MIN && b == -1))
			return 0;
		*out = op == KS_OP_DIV ? a / b : a % b;
		return 1;
	case KS_OP_BAND: *out = a & b; return 1;
	case KS_OP_BOR: *out = a | b; return 1;
	case KS_OP_BXOR: *out = a ^ b; return 1;
	case KS_OP_SHL:
		/* a << b is a * 2^b; it folds where that does not overflow. */
		if (b < 0 || b > 62)
			return 0;
		return !__builtin_mul_overflow(a, (int64_t)1 << b, out);
	case KS_OP_SHR:
		if (b < 0 || b > 63)
			return 0;
		*out = a >> b;  /* arithmetic on int64_t in GCC and clang */
		return 1;
	case KS_OP_MIN: *out = a < b ? a : b; return 1;
	case KS_OP_MAX: *out = a > b ? a : b; return 1;
	case KS_OP_LT: *out = a < b; return 1;
	case KS_OP_LE: *out = a <= b; return 1;
	case KS_OP_EQ: *out = a == b; return 1;
	case KS_OP_NE: *out = a != b; return 1;
	default: return 0;
	}
}

static int fold_bool(ks_binop_t op, int64_t a, int64_t b, int64_t *out)
{
	a = !!a;
	b = !!b;
	switch (op) {
	case KS_OP_AND: *out = a && b; return 1;
	case KS_OP_OR: *out = a || b; return 1;
	case KS_OP_EQ: *out = a == b; return 1;
	case KS_OP_NE: *out = a != b; return 1;
	default: return 0;
	}
}

static ks_expr_t *result(ks_ir_kernel_t *k, ks_ty_t t, int64_t v)
{
	return t == KS_TY_BOOL ? ks_x_bool(k, (int)v) : ks_x_i64(k, v);
}

static ks_expr_t *fold_bin(ks_ir_kernel_t *k, ks_expr_t *e)
{
	ks_expr_t *a = e->a, *b = e->b;
	int64_t v;

	if (a->type == KS_TY_I64) {
		if (is_const(a) && is_const(b) && fold_i64(e->op, a->i, b->i,
		    &v))
			return result(k, e->type, v);
		switch (e->op) {
		case KS_OP_ADD:
			if (is_i64(b, 0))
				return a;
			if (is_i64(a, 0))
				return b;
			break;
		case KS_OP_SUB:
			if (is_i64(b, 0))
				return a;
			break;
		case KS_OP_MUL:
			if (is_i64(b, 1))
				return a;
			if (is_i64(a, 1))
				return b;
			if (is_i64(a, 0) || is_i64(b, 0))
				return ks_x_i64(k, 0);
			break;
		case KS_OP_DIV:
			if (is_i64(b, 1))
				return a;
			break;
		case KS_OP_REM:
			if (is_i64(b, 1))
				return ks_x_i64(k, 0);
			break;
		default:
			break;
		}
	} else if (a->type == KS_TY_BOOL) {
		if (is_const(a) && is_const(b) && fold_bool(e->op, a->i, b->i,
		    &v))
			return result(k, e->type, v);
		if (e->op == KS_OP_AND) {
			if (is_bool(a, 1))
				return b;
			if (is_bool(b, 1))
				return a;
			if (is_bool(a, 0) || is_bool(b, 0))
				return ks_x_bool(k, 0);
		} else if (e->op == KS_OP_OR) {
			if (is_bool(a, 0))
				return b;
			if (is_bool(b, 0))
				return a;
			if (is_bool(a, 1) || is_bool(b, 1))
				return ks_x_bool(k, 1);
		}
	}
	return e;
}

/*
 * NEG and ABS of a constant fold: they are exact (a sign-bit operation on
 * f32, whatever the host's float environment), except i64 INT64_MIN,
 * which stays.  SQRT and EXP never fold (see the head comment).
 */
static ks_expr_t *fold_un(ks_ir_kernel_t *k, ks_expr_t *e)
{
	const ks_expr_t *a = e->a;
	uint32_t u;
	float f;

	if (a->kind != KS_X_CONST || (e->un != KS_UN_NEG && e->un != KS_UN_ABS))
		return e;
	if (a->type == KS_TY_I64) {
		if (a->i == INT64_MIN)
			return e;
		return ks_x_i64(k, e->un == KS_UN_NEG ? -a->i :
		    a->i < 0 ? -a->i : a->i);
	}
	if (a->type != KS_TY_F32)
		return e;
	memcpy(&u, &a->f, 4);
	u = e->un == KS_UN_NEG ? u ^ 0x80000000u : u & 0x7fffffffu;
	memcpy(&f, &u, 4);
	return ks_x_f32(k, f);
}

static ks_expr_t *fold_expr(void *ctx, ks_ir_kernel_t *k, ks_expr_t *e,
    int in_lanes)
{
	(void)ctx;
	(void)in_lanes;
	if (e->kind == KS_X_BIN)
		return fold_bin(k, e);
	if (e->kind == KS_X_UN)
		return fold_un(k, e);
	if (e->kind == KS_X_SELECT && e->a->kind == KS_X_CONST)
		return e->a->i ? e->b : e->c;
	return e;
}

static ks_stmt_t *fold_stmt(void *ctx, ks_ir_kernel_t *k, ks_stmt_t *s,
    int in_lanes)
{
	(void)ctx;
	(void)in_lanes;
	if (s->kind == KS_S_IF && s->a->kind == KS_X_CONST)
		return s->a->i ? s->body : s->orelse;
	if (s->kind == KS_S_BLOCK)
		ks_ir_splice(k, s);
	return s;
}

void ks_pass_fold(ks_ir_kernel_t *k)
{
	ks_ir_visitor_t v = { NULL, fold_expr, fold_stmt };

	ks_ir_walk(k, &v);
}
