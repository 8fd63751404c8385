/*
 * emit_c: IR -> CUDA C or OpenCL C text, one emitter for both dialects.
 * The model and the guarantees are in emit_c.h; the dialects live with
 * their backends (cuda.c, opencl.c).
 *
 * Layout of the text, in this order: a banner naming kernel, variant and
 * dialect; the dialect's prelude; the helpers the body uses, in a fixed
 * order; the reduction helpers the body uses, in a fixed order; the entry.
 * The body is written first into its own buffer, which tells which helpers
 * are used, then everything is assembled; the set of helpers depends only
 * on the IR, so the text is deterministic.
 *
 * Names: parameters are p_<name>, variables v_<name>, emitter temporaries
 * ks_t<N>, helpers ksh_<what>, and the thread's position ks_lane and
 * ks_group.  The prefixes keep IR names (unique C identifiers,
 * docs/ir.md) clear of C++, CUDA and OpenCL keywords and builtins.
 *
 * Every binary operation is parenthesized, so C precedence never decides
 * the IR's tree; C's conversions never do either: i64 literals carry the
 * dialect's 64-bit suffix, and every mixed-type operation is an explicit
 * IR cast.
 */
#include "emit_c.h"
#include "helpers.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	const ks_ir_kernel_t *k;
	const ks_c_dialect_t *d;
	ks_buf_t *out;          /* where put() writes */
	int depth;              /* indentation of the next line, in tabs */
	int in_lanes;
	unsigned used;          /* helpers, 1 << H_* */
	unsigned reduces;       /* reductions, 1 << KS_C_RED_* */
	int serial;             /* temporaries */
	int lanes_wrote_rw;     /* the current LANES stored to a buffer that
	                           the kernel also reads */
	const ks_expr_t **hoisted;  /* REDUCEs evaluated before their IF */
	int *hoisted_tmp;           /* ... into ks_t<this> */
	int nhoisted, hoisted_cap;
	int rc;
	char *err;
	size_t errlen;
} emit_t;

static void put(emit_t *E, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void put(emit_t *E, const char *fmt, ...)
{
	va_list ap;
	int rc;

	if (E->rc != KS_OK)
		return;
	va_start(ap, fmt);
	rc = ks_buf_vprintf(E->out, fmt, ap);
	va_end(ap);
	if (rc != KS_OK) {
		E->rc = rc;
		if (E->err != NULL && E->errlen > 0)
			snprintf(E->err, E->errlen, "out of memory");
	}
}

static void fail(emit_t *E, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void fail(emit_t *E, const char *fmt, ...)
{
	va_list ap;

	if (E->rc != KS_OK)
		return;                 /* keep the first error */
	E->rc = KS_E_COMPILE;
	if (E->err != NULL && E->errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(E->err, E->errlen, fmt, ap);
		va_end(ap);
	}
}

/* Starts a new line at the current indentation. */
static void line(emit_t *E)
{
	int i;

	for (i = 0; i < E->depth; i++)
		put(E, "\t");
}

static const char *cty(ks_ty_t t)
{
	switch (t) {
	case KS_TY_BOOL: return "bool";
	case KS_TY_I64: return "ks_i64";
	case KS_TY_F32: return "float";
	case KS_TY_I32: return "int";   /* 32 bits in CUDA and OpenCL C */
	}
	return "?";
}

static const char *elem_cty(const ks_ir_param_t *p)
{
	if (p->bytes)
		return "unsigned char";
	if (p->type == KS_TY_I32)
		return "int";
	return p->dtype == KS_DTYPE_F32 ? "float" : "ks_u16";
}

/* ---- reductions ---- */

static void combine_add(ks_buf_t *out, const char *a, const char *b)
{
	ks_buf_printf(out, "%s + %s", a, b);
}

static void combine_fmax(ks_buf_t *out, const char *a, const char *b)
{
	ks_buf_printf(out, "ksh_fmaxf(%s, %s)", a, b);
}

static void combine_imax(ks_buf_t *out, const char *a, const char *b)
{
	ks_buf_printf(out, "ksh_imax(%s, %s)", a, b);
}

const ks_c_reduce_t ks_c_reduces[KS_C_RED_COUNT] = {
	[KS_C_RED_SUM_F32] = { .name = "ksh_reduce_sum_f32", .type = "float",
		.scratch = "ks_red_f32", .combine = combine_add },
	[KS_C_RED_MAX_F32] = { .name = "ksh_reduce_max_f32", .type = "float",
		.scratch = "ks_red_f32", .combine = combine_fmax },
	[KS_C_RED_SUM_I64] = { .name = "ksh_reduce_sum_i64", .type = "ks_i64",
		.scratch = "ks_red_i64", .combine = combine_add },
	[KS_C_RED_MAX_I64] = { .name = "ksh_reduce_max_i64", .type = "ks_i64",
		.scratch = "ks_red_i64", .combine = combine_imax },
};

/* ---- helpers: helpers.c's programs, as C ---- */

static void f32_const(emit_t *E, float f);
static void i64_const(emit_t *E, int64_t v);

static const char *prog_cty(int t)
{
	switch (t) {
	case KSH_U16: return "ks_u16";
	case KSH_U32: return "ks_u32";
	case KSH_I64: return "ks_i64";
	case KSH_F32: return "float";
	}
	return "int";           /* KSH_I32, KSH_BOOL */
}

static const char *const prog_op[] = {
	[KSH_ADD] = "+", [KSH_SUB] = "-", [KSH_MUL] = "*", [KSH_DIV] = "/",
	[KSH_AND] = "&", [KSH_OR] = "|", [KSH_XOR] = "^", [KSH_SHL] = "<<",
	[KSH_SHR] = ">>", [KSH_EQ] = "==", [KSH_NE] = "!=", [KSH_LT] = "<",
	[KSH_GT] = ">", [KSH_GE] = ">=",
};

/* Operand X of program P: a parameter, a constant, or a temporary. */
static void prog_operand(emit_t *E, const ksh_prog_t *p, int x)
{
	const ksh_ins_t *in = &p->ins[x];
	uint32_t u;
	float f;

	if (in->op == KSH_ARG) {
		put(E, "%s", in->imm ? "b" : "a");
	} else if (in->op != KSH_CONST) {
		put(E, "t%d", x);
	} else if (in->ty == KSH_F32) {
		u = (uint32_t)in->imm;
		memcpy(&f, &u, sizeof f);
		f32_const(E, f);
	} else if (in->ty == KSH_U32) {
		put(E, in->imm < 256 ? "%" PRIu32 "u" : "0x%" PRIx32 "u",
		    (uint32_t)in->imm);
	} else if (in->ty == KSH_I64) {
		i64_const(E, in->imm);
	} else {
		put(E, in->imm < 0 ? "(%" PRId64 ")" : "%" PRId64, in->imm);
	}
}

/*
 * Helper H: its program, one const temporary per value.  The selects of
 * the program are ?: here (the branch-free masks of cpu.c choose the same
 * value); every operation is parenthesized and typed by its temporary.
 */
static void helper(emit_t *E, int h)
{
	const ks_c_dialect_t *d = E->d;
	ksh_prog_t p;
	int i;

	ksh_build((ksh_id_t)h, &p);
	put(E, "/* %s. */\n%s%s %s(", p.doc, d->fn, prog_cty(p.ret), p.name);
	for (i = 0; i < p.nargs; i++)
		put(E, "%s%s %s", i ? ", " : "", prog_cty(p.arg), i ? "b" : "a");
	put(E, ")\n{\n");
	for (i = 0; i < p.nins; i++) {
		const ksh_ins_t *in = &p.ins[i];

		if (in->op == KSH_ARG || in->op == KSH_CONST)
			continue;
		if (in->op == KSH_RET) {
			put(E, "\treturn ");
			prog_operand(E, &p, in->a);
			put(E, ";\n");
			continue;
		}
		put(E, "\tconst %s t%d = ", prog_cty(in->ty), i);
		switch ((ksh_op_t)in->op) {
		case KSH_CVT:
			put(E, "(%s)", prog_cty(in->ty));
			prog_operand(E, &p, in->a);
			break;
		case KSH_BITS:
			put(E, "%s(", in->ty == KSH_F32 ? d->bits_f32 :
			    d->f32_bits);
			prog_operand(E, &p, in->a);
			put(E, ")");
			break;
		case KSH_FMA:
			put(E, "%s(", d->fma);
			prog_operand(E, &p, in->a);
			put(E, ", ");
			prog_operand(E, &p, in->b);
			put(E, ", ");
			prog_operand(E, &p, in->c);
			put(E, ")");
			break;
		case KSH_SEL:
			put(E, "(");
			prog_operand(E, &p, in->a);
			put(E, " ? ");
			prog_operand(E, &p, in->b);
			put(E, " : ");
			prog_operand(E, &p, in->c);
			put(E, ")");
			break;
		case KSH_CALL: {
			ksh_prog_t q;

			ksh_build((ksh_id_t)in->imm, &q);
			put(E, "%s(", q.name);
			prog_operand(E, &p, in->a);
			if (in->b >= 0) {
				put(E, ", ");
				prog_operand(E, &p, in->b);
			}
			put(E, ")");
			break;
		}
		default:
			put(E, "(");
			prog_operand(E, &p, in->a);
			put(E, " %s ", prog_op[in->op]);
			prog_operand(E, &p, in->b);
			put(E, ")");
			break;
		}
		put(E, ";\n");
	}
	put(E, "}\n\n");
}

/* Marks helper H used, with the helpers it calls. */
static void use(emit_t *E, int h)
{
	unsigned calls = ksh_calls((ksh_id_t)h);
	int c;

	E->used |= 1u << h;
	for (c = 0; c < KSH_COUNT; c++)
		if (calls & (1u << c))
			use(E, c);
}

/* ---- expressions ---- */

static void expr(emit_t *E, const ks_expr_t *e);

static void f32_const(emit_t *E, float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	/* Integral values print as themselves; every other value (fractions,
	 * subnormals, Inf, NaN with its payload) as its exact bit pattern. */
	if (f == f && fabsf(f) <= 16777216.0f && f == truncf(f))
		put(E, "%s%.1ff%s", u >> 31 ? "(" : "", f, u >> 31 ? ")" : "");
	else
		put(E, "%s(0x%08" PRIx32 "u)", E->d->bits_f32, u);
}

static void i64_const(emit_t *E, int64_t v)
{
	const char *s = E->d->i64_suffix;

	if (v == INT64_MIN)
		put(E, "(-9223372036854775807%s - 1%s)", s, s);
	else if (v < 0)
		put(E, "(%" PRId64 "%s)", v, s);
	else
		put(E, "%" PRId64 "%s", v, s);
}

static void var_ref(emit_t *E, int var)
{
	const ks_ir_var_t *v = &E->k->vars[var];

	if (v->scope == KS_VAR_LANE && !E->in_lanes)
		fail(E, "lane variable '%s' used outside LANES", v->name);
	put(E, "v_%s", v->name);
}

static void bin(emit_t *E, const ks_expr_t *e)
{
	static const char *const ops[KS_OP_COUNT] = {
		[KS_OP_ADD] = "+", [KS_OP_SUB] = "-", [KS_OP_MUL] = "*",
		[KS_OP_DIV] = "/", [KS_OP_REM] = "%",
		[KS_OP_LT] = "<", [KS_OP_LE] = "<=", [KS_OP_EQ] = "==",
		[KS_OP_NE] = "!=", [KS_OP_AND] = "&&", [KS_OP_OR] = "||",
		[KS_OP_BAND] = "&", [KS_OP_BOR] = "|", [KS_OP_BXOR] = "^",
		[KS_OP_SHL] = "<<", [KS_OP_SHR] = ">>",
	};
	ks_ty_t t = e->a->type;
	int h;

	if (e->a->type != e->b->type) {
		fail(E, "binary op on %s and %s", ks_ty_name(e->a->type),
		    ks_ty_name(e->b->type));
		return;
	}
	switch (e->op) {
	case KS_OP_ADD: case KS_OP_SUB: case KS_OP_MUL: case KS_OP_DIV:
	case KS_OP_REM:
		/* i64 / and % are C's: truncating toward zero. */
		if (t == KS_TY_BOOL || (t == KS_TY_F32 && e->op == KS_OP_REM))
			break;
		goto infix;
	case KS_OP_MIN: case KS_OP_MAX:
		if (t == KS_TY_BOOL)
			break;
		h = t == KS_TY_F32 ? (e->op == KS_OP_MIN ? KSH_FMIN : KSH_FMAX) :
		    (e->op == KS_OP_MIN ? KSH_IMIN : KSH_IMAX);
		use(E, h);
		put(E, "ksh_%s%s(", t == KS_TY_F32 ? "f" : "i",
		    e->op == KS_OP_MIN ? (t == KS_TY_F32 ? "minf" : "min") :
		    (t == KS_TY_F32 ? "maxf" : "max"));
		expr(E, e->a);
		put(E, ", ");
		expr(E, e->b);
		put(E, ")");
		return;
	case KS_OP_LT: case KS_OP_LE: case KS_OP_EQ: case KS_OP_NE:
		goto infix;
	case KS_OP_BAND: case KS_OP_BOR: case KS_OP_BXOR: case KS_OP_SHL:
	case KS_OP_SHR:
		/* On signed types, as the IR: >> is arithmetic in CUDA C and
		 * OpenCL C. */
		if (t != KS_TY_I64 && t != KS_TY_I32)
			break;
		goto infix;
	case KS_OP_AND: case KS_OP_OR:
		/* Both operands are pure, so short-circuiting changes no
		 * value (cpu.c evaluates both). */
		if (t != KS_TY_BOOL)
			break;
		goto infix;
	case KS_OP_COUNT:
		break;
	}
	fail(E, "binary op %d on %s is not supported", (int)e->op,
	    ks_ty_name(t));
	return;
infix:
	put(E, "(");
	expr(E, e->a);
	put(E, " %s ", ops[e->op]);
	expr(E, e->b);
	put(E, ")");
}

static void cast(emit_t *E, const ks_expr_t *e)
{
	ks_ty_t from = e->a->type, to = e->type;

	if (from == to) {
		expr(E, e->a);
		return;
	}
	if (to == KS_TY_BOOL) {
		put(E, "(");
		expr(E, e->a);
		if (from == KS_TY_F32)
			put(E, " != 0.0f)");
		else
			put(E, " != 0%s)", E->d->i64_suffix);
		return;
	}
	/*
	 * i32 goes through i64, which gives the same value: i32 -> i64 is
	 * exact, so i32 -> f32 is the one RNE rounding of i64 -> f32; f32 ->
	 * i32 in range is f32 -> i64 toward zero, then exact; i64 -> i32
	 * keeps the low 32 bits, as cpu.c.
	 */
	if (to == KS_TY_I32) {
		put(E, "((int)(");
		if (from == KS_TY_F32) {
			put(E, "%s(", E->d->f32_to_i64);
			expr(E, e->a);
			put(E, ")");
		} else {
			expr(E, e->a);
		}
		put(E, "))");
		return;
	}
	if (from == KS_TY_I32 && to == KS_TY_I64) {
		put(E, "((ks_i64)(");
		expr(E, e->a);
		put(E, "))");
		return;
	}
	if (to == KS_TY_I64) {
		/* From f32: toward zero, as C; from bool: 0 or 1. */
		put(E, "%s(", from == KS_TY_F32 ? E->d->f32_to_i64 :
		    "(ks_i64)");
		expr(E, e->a);
		put(E, ")");
		return;
	}
	/* To f32, round to nearest even; bool and i32 go through i64. */
	put(E, "%s(%s", E->d->i64_to_f32, from != KS_TY_I64 ? "(ks_i64)(" :
	    "");
	expr(E, e->a);
	put(E, "%s)", from != KS_TY_I64 ? ")" : "");
}

static void load(emit_t *E, const ks_expr_t *e)
{
	const ks_ir_param_t *p = &E->k->params[e->param];

	if (p->kind != KS_PARAM_BUFFER) {
		fail(E, "load from '%s', which is not a buffer", p->name);
		return;
	}
	if (p->bytes) {
		put(E, "((int)p_%s[", p->name);    /* zero-extends: 0..255 */
		expr(E, e->a);
		put(E, "])");
		return;
	}
	switch (p->dtype) {
	case KS_DTYPE_F16:
		use(E, KSH_F16_TO_F32);
		put(E, "ksh_f16_to_f32(");
		break;
	case KS_DTYPE_BF16:
		use(E, KSH_BF16_TO_F32);
		put(E, "ksh_bf16_to_f32(");
		break;
	default:
		put(E, "(");
		break;
	}
	put(E, "p_%s[", p->name);
	expr(E, e->a);
	put(E, "])");
}

static void reduce(emit_t *E, const ks_expr_t *e)
{
	const ks_ir_var_t *v = &E->k->vars[e->var];
	const ks_c_reduce_t *r;
	int which, i;

	for (i = 0; i < E->nhoisted; i++)
		if (E->hoisted[i] == e) {
			put(E, "ks_t%d", E->hoisted_tmp[i]);
			return;
		}
	if (v->scope != KS_VAR_LANE || E->in_lanes) {
		fail(E, "REDUCE of '%s' %s", v->name, E->in_lanes ?
		    "inside LANES" : "of a uniform variable");
		return;
	}
	if (v->type == KS_TY_BOOL) {
		fail(E, "REDUCE of bool variable '%s'", v->name);
		return;
	}
	which = v->type == KS_TY_F32 ?
	    (e->red == KS_RED_MAX ? KS_C_RED_MAX_F32 : KS_C_RED_SUM_F32) :
	    (e->red == KS_RED_MAX ? KS_C_RED_MAX_I64 : KS_C_RED_SUM_I64);
	if (which == KS_C_RED_MAX_F32)
		use(E, KSH_FMAX);
	if (which == KS_C_RED_MAX_I64)
		use(E, KSH_IMAX);
	E->reduces |= 1u << which;
	r = &ks_c_reduces[which];
	put(E, "%s(v_%s", r->name, v->name);
	if (E->rc == KS_OK && E->d->reduce_args != NULL)
		E->d->reduce_args(E->out, r);
	put(E, ")");
}

/* KS_X_UN: neg as "(-(a))" (never "--"), the dialect's functions for the
 * rest; i64 abs through a select, as no dialect has one 64-bit abs name. */
static void un(emit_t *E, const ks_expr_t *e)
{
	const char *fn = NULL;
	int f = e->type == KS_TY_F32;

	switch (e->un) {
	case KS_UN_NEG:
		if (f || e->type == KS_TY_I64) {
			put(E, "(-(");
			expr(E, e->a);
			put(E, "))");
			return;
		}
		break;
	case KS_UN_ABS:
		if (e->type == KS_TY_I64) {
			put(E, "ksh_iabs(");
			expr(E, e->a);
			put(E, ")");
			use(E, KSH_IABS);
			return;
		}
		fn = f ? E->d->fabs : NULL;
		break;
	case KS_UN_SQRT:
		fn = f ? E->d->sqrt : NULL;
		break;
	case KS_UN_EXP:
		if (f) {
			use(E, KSH_EXP);
			fn = "ksh_expf";
		}
		break;
	case KS_UN_F16:
		if (e->a->type == KS_TY_I32) {
			use(E, KSH_F16_TO_F32);
			put(E, "ksh_f16_to_f32((ks_u16)(");
			expr(E, e->a);
			put(E, "))");
			return;
		}
		break;
	case KS_UN_COUNT:
		break;
	}
	if (fn == NULL) {
		fail(E, "unary op %d on %s is not supported", (int)e->un,
		    ks_ty_name(e->type));
		return;
	}
	put(E, "%s(", fn);
	expr(E, e->a);
	put(E, ")");
}

static void expr(emit_t *E, const ks_expr_t *e)
{
	const ks_ir_param_t *p;

	if (E->rc != KS_OK)
		return;
	switch (e->kind) {
	case KS_X_CONST:
		if (e->type == KS_TY_F32)
			f32_const(E, e->f);
		else if (e->type == KS_TY_BOOL)
			put(E, "%s", e->i ? "true" : "false");
		else
			i64_const(E, e->i);
		return;
	case KS_X_PARAM:
		p = &E->k->params[e->param];
		if (p->kind != KS_PARAM_SCALAR)
			break;
		if (p->bound) {
			if (p->type != KS_TY_I64)
				break;
			i64_const(E, p->value);
			return;
		}
		put(E, "p_%s", p->name);
		return;
	case KS_X_VAR:
		var_ref(E, e->var);
		return;
	case KS_X_GROUP:
		put(E, "ks_group");
		return;
	case KS_X_LANE:
		if (!E->in_lanes)
			break;
		put(E, "ks_lane");
		return;
	case KS_X_BIN:
		bin(E, e);
		return;
	case KS_X_FMA:
		put(E, "%s(", E->d->fma);
		expr(E, e->a);
		put(E, ", ");
		expr(E, e->b);
		put(E, ", ");
		expr(E, e->c);
		put(E, ")");
		return;
	case KS_X_CAST:
		cast(E, e);
		return;
	case KS_X_LOAD:
		load(E, e);
		return;
	case KS_X_SELECT:
		/* ?: evaluates only the chosen operand, as cpu.c does (an
		 * operand may be a load that is out of bounds when not
		 * chosen). */
		put(E, "(");
		expr(E, e->a);
		put(E, " ? ");
		expr(E, e->b);
		put(E, " : ");
		expr(E, e->c);
		put(E, ")");
		return;
	case KS_X_REDUCE:
		reduce(E, e);
		return;
	case KS_X_UN:
		un(E, e);
		return;
	case KS_X_QDOT:
		expr(E, e->a);          /* its plain IR */
		return;
	case KS_X_LLOAD:
		put(E, "(l_%s[", E->k->locals[e->param].name);
		expr(E, e->a);
		put(E, "])");
		return;
	}
	fail(E, "expression kind %d is not valid here", (int)e->kind);
}

/* ---- statements ---- */

static void stmt(emit_t *E, const ks_stmt_t *s);

/*
 * Hoisting of reductions out of uniform IFs.  A REDUCE under a uniform IF
 * is evaluated just before the IF, into a temporary, when its lane
 * variable is not assigned anywhere inside the IF (then the value is the
 * same; REDUCE has no side effect, so evaluating it when the condition is
 * false changes nothing).  Barriers and shuffles then stand in straight-
 * line code: PoCL 3.1 hangs when barriers stand in two uniform IFs with
 * different conditions (reproduced with a 20-line kernel; gemm's guarded
 * stores are exactly that), and a warp stays converged by construction.
 * A REDUCE whose variable the IF assigns, or inside a FOR, stays where it
 * is: correct OpenCL and CUDA, which PoCL may still mishandle.
 */
static void mark_assigned(const ks_stmt_t *s, unsigned char *assigned)
{
	int i;

	if (s == NULL)
		return;
	switch (s->kind) {
	case KS_S_DECL: case KS_S_ASSIGN: case KS_S_FOR:
		assigned[s->var] = 1;
		break;
	default:
		break;
	}
	for (i = 0; s->kind == KS_S_BLOCK && i < s->nitems; i++)
		mark_assigned(s->items[i], assigned);
	mark_assigned(s->body, assigned);
	mark_assigned(s->orelse, assigned);
}

static int is_hoisted(emit_t *E, const ks_expr_t *e)
{
	int i;

	for (i = 0; i < E->nhoisted; i++)
		if (E->hoisted[i] == e)
			return 1;
	return 0;
}

/* Emits "const T ks_tN = reduce(v);" for each hoistable REDUCE in E. */
static void hoist_expr(emit_t *E, const ks_expr_t *e,
    const unsigned char *assigned)
{
	const ks_ir_var_t *v;
	int t;

	if (e == NULL || E->rc != KS_OK)
		return;
	hoist_expr(E, e->a, assigned);
	hoist_expr(E, e->b, assigned);
	hoist_expr(E, e->c, assigned);
	if (e->kind != KS_X_REDUCE || assigned[e->var] || is_hoisted(E, e))
		return;
	v = &E->k->vars[e->var];
	if (v->scope != KS_VAR_LANE || v->type == KS_TY_BOOL)
		return;                 /* reduce() reports it in place */
	if (E->nhoisted == E->hoisted_cap) {
		int cap = E->hoisted_cap ? 2 * E->hoisted_cap : 16;
		const ks_expr_t **h = realloc(E->hoisted, (size_t)cap *
		    sizeof(*h));
		int *tmp = h ? realloc(E->hoisted_tmp, (size_t)cap *
		    sizeof(*tmp)) : NULL;

		if (h != NULL)
			E->hoisted = h;
		if (tmp == NULL) {
			E->rc = KS_E_NOMEM;
			return;
		}
		E->hoisted_tmp = tmp;
		E->hoisted_cap = cap;
	}
	t = E->serial++;
	line(E);
	put(E, "const %s ks_t%d = ", cty(v->type), t);
	reduce(E, e);
	put(E, ";\n");
	E->hoisted[E->nhoisted] = e;
	E->hoisted_tmp[E->nhoisted++] = t;
}

/* Hoists from the uniform statements of S (not from FOR bodies, whose
 * REDUCEs may change per trip, nor from LANES, which has none). */
static void hoist_stmt(emit_t *E, const ks_stmt_t *s,
    const unsigned char *assigned)
{
	int i;

	if (s == NULL)
		return;
	switch (s->kind) {
	case KS_S_BLOCK:
		for (i = 0; i < s->nitems; i++)
			hoist_stmt(E, s->items[i], assigned);
		return;
	case KS_S_DECL: case KS_S_ASSIGN: case KS_S_STORE:
		hoist_expr(E, s->a, assigned);
		hoist_expr(E, s->b, assigned);
		return;
	case KS_S_IF:
		hoist_expr(E, s->a, assigned);
		hoist_stmt(E, s->body, assigned);
		hoist_stmt(E, s->orelse, assigned);
		return;
	case KS_S_FOR: case KS_S_LANES:
	case KS_S_LSTORE: case KS_S_BARRIER:    /* in LANES; not under IF */
	case KS_S_PREFETCH:                     /* not emitted */
		return;
	}
}

static void hoist_reduces(emit_t *E, const ks_stmt_t *s)
{
	unsigned char *assigned;

	if (E->in_lanes)
		return;
	assigned = calloc((size_t)E->k->nvars + 1, 1);
	if (assigned == NULL) {
		E->rc = KS_E_NOMEM;
		return;
	}
	mark_assigned(s->body, assigned);
	mark_assigned(s->orelse, assigned);
	hoist_stmt(E, s->body, assigned);
	hoist_stmt(E, s->orelse, assigned);
	free(assigned);
}

static void block_items(emit_t *E, const ks_stmt_t *b)
{
	int i;

	if (b == NULL)
		return;
	for (i = 0; i < b->nitems && E->rc == KS_OK; i++)
		stmt(E, b->items[i]);
}

/* "{", the items one level deeper, "}" at the current level; the caller
 * has written what precedes the brace. */
static void braced(emit_t *E, const ks_stmt_t *b)
{
	put(E, "{\n");
	E->depth++;
	block_items(E, b);
	E->depth--;
	line(E);
	put(E, "}");
}

/* The CPU runs uniform code once, so a uniform variable written per lane
 * would keep the last lane's value there and a thread's own here: refused
 * (the verifier rejects it too). */
static int uniform_write_in_lanes(emit_t *E, int var)
{
	if (E->k->vars[var].scope != KS_VAR_UNIFORM || !E->in_lanes)
		return 0;
	fail(E, "uniform '%s' written inside LANES", E->k->vars[var].name);
	return 1;
}

static int reads_buffer(const ks_ir_param_t *p)
{
	return (p->access & KS_ACCESS_READ) != 0;
}

static void store(emit_t *E, const ks_stmt_t *s)
{
	const ks_ir_param_t *p = &E->k->params[s->param];
	const char *conv = "";
	int t;

	if (p->kind != KS_PARAM_BUFFER) {
		fail(E, "store to '%s', which is not a buffer", p->name);
		return;
	}
	if (p->type == KS_TY_I32) {
		conv = "";
	} else if (p->dtype == KS_DTYPE_F16) {
		use(E, KSH_F32_TO_F16);
		conv = "ksh_f32_to_f16";
	} else if (p->dtype == KS_DTYPE_BF16) {
		use(E, KSH_F32_TO_BF16);
		conv = "ksh_f32_to_bf16";
	}
	if (E->in_lanes) {
		line(E);
		put(E, "p_%s[", p->name);
		expr(E, s->a);
		put(E, "] = %s(", conv);
		expr(E, s->b);
		put(E, ");\n");
		if (reads_buffer(p))
			E->lanes_wrote_rw = 1;
		return;
	}
	/* Uniform: every thread evaluates (a REDUCE needs them all), lane 0
	 * stores. */
	t = E->serial;
	E->serial += 2;
	line(E);
	put(E, "{\n");
	E->depth++;
	line(E);
	put(E, "const ks_i64 ks_t%d = ", t);
	expr(E, s->a);
	put(E, ";\n");
	line(E);
	put(E, "const %s ks_t%d = ", cty(p->type), t + 1);
	expr(E, s->b);
	put(E, ";\n\n");
	line(E);
	put(E, "if (ks_lane == 0)\n");
	line(E);
	put(E, "\tp_%s[ks_t%d] = %s(ks_t%d);\n", p->name, t, conv, t + 1);
	E->depth--;
	line(E);
	put(E, "}\n");
	if (reads_buffer(p)) {
		line(E);
		put(E, "%s\n", E->d->phase_sync);
	}
}

static void decl(emit_t *E, const ks_stmt_t *s)
{
	const ks_ir_var_t *v = &E->k->vars[s->var];

	if (s->a != NULL && uniform_write_in_lanes(E, s->var))
		return;
	/* A lane variable declared in uniform code with a uniform
	 * initializer: every thread sets its own register, so every lane
	 * receives the value. */
	line(E);
	put(E, "%s v_%s", cty(v->type), v->name);
	if (s->a != NULL) {
		put(E, " = ");
		expr(E, s->a);
	}
	put(E, ";\n");
}

static void loop(emit_t *E, const ks_stmt_t *s)
{
	const ks_ir_var_t *v = &E->k->vars[s->var];

	if (v->type != KS_TY_I64 || s->step <= 0) {
		fail(E, "FOR over '%s' needs an i64 variable and a positive "
		    "step", v->name);
		return;
	}
	if (uniform_write_in_lanes(E, s->var))
		return;
	if (v->scope == KS_VAR_LANE && !E->in_lanes) {
		fail(E, "FOR over lane variable '%s' outside LANES", v->name);
		return;
	}
	if (s->unroll != 0 && E->d->unroll != NULL) {
		line(E);
		put(E, E->d->unroll, s->unroll);
		put(E, "\n");
	}
	line(E);
	put(E, "for (ks_i64 v_%s = ", v->name);
	expr(E, s->a);
	put(E, "; v_%s < ", v->name);
	expr(E, s->b);
	put(E, "; v_%s += ", v->name);
	i64_const(E, s->step);
	put(E, ") ");
	braced(E, s->body);
	put(E, "\n");
}

static void lanes(emit_t *E, const ks_stmt_t *s)
{
	if (E->in_lanes) {
		fail(E, "nested LANES");
		return;
	}
	E->in_lanes = 1;
	E->lanes_wrote_rw = 0;
	line(E);
	put(E, "/* lanes: this thread is lane ks_lane */\n");
	line(E);
	braced(E, s->body);
	put(E, "\n");
	E->in_lanes = 0;
	if (E->lanes_wrote_rw) {
		line(E);
		put(E, "%s\n", E->d->phase_sync);
	}
}

static void stmt(emit_t *E, const ks_stmt_t *s)
{
	switch (s->kind) {
	case KS_S_BLOCK:
		line(E);
		braced(E, s);
		put(E, "\n");
		return;
	case KS_S_DECL:
		decl(E, s);
		return;
	case KS_S_ASSIGN:
		if (uniform_write_in_lanes(E, s->var))
			return;
		line(E);
		var_ref(E, s->var);
		put(E, " = ");
		expr(E, s->a);
		put(E, ";\n");
		return;
	case KS_S_STORE:
		store(E, s);
		return;
	case KS_S_FOR:
		loop(E, s);
		return;
	case KS_S_IF:
		hoist_reduces(E, s);
		line(E);
		put(E, "if (");
		expr(E, s->a);
		put(E, ") ");
		braced(E, s->body);
		if (s->orelse != NULL) {
			put(E, " else ");
			braced(E, s->orelse);
		}
		put(E, "\n");
		return;
	case KS_S_LANES:
		lanes(E, s);
		return;
	case KS_S_LSTORE:
		line(E);
		put(E, "l_%s[", E->k->locals[s->param].name);
		expr(E, s->a);
		put(E, "] = ");
		expr(E, s->b);
		put(E, ";\n");
		return;
	case KS_S_BARRIER:
		line(E);
		put(E, "%s\n", E->d->barrier);
		return;
	case KS_S_PREFETCH:
		return;         /* a CPU cache hint: GPUs have no use for it */
	}
	fail(E, "statement kind %d is not valid", (int)s->kind);
}

/* ---- the entry ---- */

static void signature(emit_t *E)
{
	const ks_ir_kernel_t *k = E->k;
	int i, first = 1;

	E->d->entry_head(E->out, k->nlanes);
	put(E, "%s(", k->entry);
	for (i = 0; i < k->nparams; i++) {
		const ks_ir_param_t *p = &k->params[i];

		if (p->kind == KS_PARAM_SCALAR && p->bound)
			continue;
		put(E, "%s\n\t", first ? "" : ",");
		first = 0;
		if (p->kind == KS_PARAM_SCALAR) {
			if (p->type != KS_TY_I64 && p->type != KS_TY_F32)
				fail(E, "scalar parameter '%s' of type %s",
				    p->name, ks_ty_name(p->type));
			put(E, "%s p_%s", cty(p->type), p->name);
		} else if (p->access == KS_ACCESS_READ) {
			/* Read-only: const and restrict (not written through
			 * any pointer during the launch), so loads may take
			 * the read-only path. */
			put(E, "%sconst %s *%s p_%s", E->d->global,
			    elem_cty(p), E->d->restrict_kw, p->name);
		} else {
			put(E, "%s%s *p_%s", E->d->global, elem_cty(p),
			    p->name);
		}
	}
	put(E, ")\n");
}

static int is_pow2(int n)
{
	return n > 0 && (n & (n - 1)) == 0;
}

int ks_jit_emit_c(const ks_ir_kernel_t *k, const ks_c_dialect_t *d,
    ks_buf_t *out, char *err, size_t errlen)
{
	emit_t E;
	ks_buf_t body;
	int h, r;

	if (!is_pow2(k->nlanes) || k->nlanes > d->max_lanes) {
		if (err != NULL && errlen > 0)
			snprintf(err, errlen, "nlanes %d: %s needs a power of "
			    "two up to %d", k->nlanes, d->name, d->max_lanes);
		return KS_E_UNSUPPORTED;
	}
	memset(&E, 0, sizeof(E));
	E.k = k;
	E.d = d;
	E.err = err;
	E.errlen = errlen;

	/* The body first: it tells which helpers are needed. */
	ks_buf_init(&body);
	E.out = &body;
	E.depth = 1;
	block_items(&E, k->body);

	E.out = out;
	E.depth = 0;
	put(&E, "/*\n * kspec %s.%s, %s, %d lanes per work-group.\n"
	    " * Generated from the kernel's IR; do not edit.\n */\n",
	    k->name, k->variant, d->name, k->nlanes);
	put(&E, "%s\n", d->prelude);
	for (h = 0; h < KSH_COUNT; h++)
		if (E.used & (1u << h))
			helper(&E, h);
	for (r = 0; r < KS_C_RED_COUNT; r++) {
		if (!(E.reduces & (1u << r)) || E.rc != KS_OK)
			continue;
		d->reduce_helper(out, d, &ks_c_reduces[r], k->nlanes);
		put(&E, "\n");
	}
	signature(&E);
	put(&E, "{\n");
	for (r = 0; r < KS_C_RED_COUNT && d->reduce_locals != NULL; r++) {
		/* One scratch per element type: the sum and the max share.
		 * First in the entry, as OpenCL wants its __local variables
		 * at kernel scope. */
		if (!(E.reduces & (1u << r)) ||
		    ((r == KS_C_RED_MAX_F32 &&
		    (E.reduces & (1u << KS_C_RED_SUM_F32))) ||
		    (r == KS_C_RED_MAX_I64 &&
		    (E.reduces & (1u << KS_C_RED_SUM_I64)))))
			continue;
		d->reduce_locals(out, &ks_c_reduces[r], k->nlanes);
	}
	/* Local arrays, at kernel scope too. */
	for (r = 0; r < k->nlocals; r++)
		put(&E, "\t%sfloat l_%s[%lld];\n", d->local_kw,
		    k->locals[r].name, (long long)k->locals[r].nelems);
	put(&E, "\tconst ks_i64 ks_lane = %s;\n"
	    "\tconst ks_i64 ks_group = %s;\n\n", d->lane, d->group);
	if (E.rc == KS_OK && ks_buf_append(out, body.data ? body.data : "",
	    body.len) != KS_OK)
		E.rc = KS_E_NOMEM;
	put(&E, "}\n");
	ks_buf_close(&body);
	free(E.hoisted);
	free(E.hoisted_tmp);
	return E.rc;
}
