/*
 * print: the canonical text form of the IR and the C form of launch
 * expressions.  The grammar is in docs/ir.md.
 *
 * The text is a pure function of the kernel: no addresses, no locale
 * (integers through PRId64, f32 constants exactly), so it can feed golden
 * tests and fingerprints.  The printer recurses itself rather than using
 * ks_ir_walk because it needs pre-order output with open and close braces;
 * it rewrites nothing.
 */
#include "specialize.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const binop_text[KS_OP_COUNT] = {
	[KS_OP_ADD] = "+", [KS_OP_SUB] = "-", [KS_OP_MUL] = "*",
	[KS_OP_DIV] = "/", [KS_OP_REM] = "%",
	[KS_OP_MIN] = "min", [KS_OP_MAX] = "max",
	[KS_OP_LT] = "<", [KS_OP_LE] = "<=", [KS_OP_EQ] = "==",
	[KS_OP_NE] = "!=", [KS_OP_AND] = "&&", [KS_OP_OR] = "||",
	[KS_OP_BAND] = "&", [KS_OP_BOR] = "|", [KS_OP_BXOR] = "^",
	[KS_OP_SHL] = "<<", [KS_OP_SHR] = ">>",
};

static const char *param_name(const ks_ir_kernel_t *k, int i)
{
	return i >= 0 && i < k->nparams ? k->params[i].name : "?param";
}

static const char *var_name(const ks_ir_kernel_t *k, int i)
{
	return i >= 0 && i < k->nvars ? k->vars[i].name : "?var";
}

/* A then B: the printer's most common pieces, without a format's cost
 * (the fingerprints print every kernel at every probe). */
static int put2(ks_buf_t *out, const char *a, const char *b)
{
	int rc = ks_buf_puts(out, a);

	return rc ? rc : ks_buf_puts(out, b);
}

/* V in decimal, as "%" PRId64 prints it. */
static int put_i64(ks_buf_t *out, int64_t v)
{
	char buf[24], *p = buf + sizeof buf;
	uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;

	*--p = '\0';
	do {
		*--p = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*--p = '-';
	return ks_buf_puts(out, p);
}

/*
 * f32 constants print exactly: small integral values as "%.1f" ("0.0",
 * "-1.0"), everything else as a C99 hex float.  Either form has a '.' or
 * a 'p' (or is inf/nan), so it never reads as an i64.  The parser checks
 * a constant's text against this one.
 */
void ks_ir_f32_text(float f, char out[KS_IR_F32_TEXT])
{
	if (isfinite(f) && f == truncf(f) && fabsf(f) <= 16777216.0f) {
		/* "%.1f" of an integral value, without a format (every
		 * kernel prints at every probe for the fingerprints): its
		 * digits and ".0", "-0.0" for negative zero. */
		char tmp[16], *p = tmp + sizeof tmp;
		int64_t v = (int64_t)f;
		uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;

		*--p = '\0';
		*--p = '0';
		*--p = '.';
		do {
			*--p = (char)('0' + u % 10);
			u /= 10;
		} while (u);
		if (signbit(f))
			*--p = '-';
		memcpy(out, p, (size_t)(tmp + sizeof tmp - p));
	} else if (isnan(f))
		snprintf(out, KS_IR_F32_TEXT, "nan");
	else if (isinf(f))
		snprintf(out, KS_IR_F32_TEXT, "%s", f < 0 ? "-inf" : "inf");
	else
		snprintf(out, KS_IR_F32_TEXT, "%a", (double)f);
}

static int print_f32(ks_buf_t *out, float f)
{
	char text[KS_IR_F32_TEXT];

	ks_ir_f32_text(f, text);
	return ks_buf_puts(out, text);
}

static int print_expr(const ks_ir_kernel_t *k, const ks_expr_t *e,
    ks_buf_t *out)
{
	int rc = 0;

	if (e == NULL)
		return ks_buf_puts(out, "<null>");
	switch (e->kind) {
	case KS_X_CONST:
		if (e->type == KS_TY_F32)
			return print_f32(out, e->f);
		if (e->type == KS_TY_BOOL)
			return ks_buf_puts(out, e->i ? "true" : "false");
		return put_i64(out, e->i);
	case KS_X_PARAM:
		return ks_buf_puts(out, param_name(k, e->param));
	case KS_X_VAR:
		return ks_buf_puts(out, var_name(k, e->var));
	case KS_X_GROUP:
		return ks_buf_puts(out, "group");
	case KS_X_LANE:
		return ks_buf_puts(out, "lane");
	case KS_X_BIN:
		if (e->op < 0 || e->op >= KS_OP_COUNT)
			return ks_buf_puts(out, "<bad op>");
		if (e->op == KS_OP_MIN || e->op == KS_OP_MAX) {
			rc = put2(out, binop_text[e->op], "(");
			rc = rc ? rc : print_expr(k, e->a, out);
			rc = rc ? rc : ks_buf_puts(out, ", ");
			rc = rc ? rc : print_expr(k, e->b, out);
			return rc ? rc : ks_buf_puts(out, ")");
		}
		rc = ks_buf_puts(out, "(");
		rc = rc ? rc : print_expr(k, e->a, out);
		rc = rc ? rc : put2(out, " ", binop_text[e->op]);
		rc = rc ? rc : ks_buf_puts(out, " ");
		rc = rc ? rc : print_expr(k, e->b, out);
		return rc ? rc : ks_buf_puts(out, ")");
	case KS_X_FMA:
		rc = ks_buf_puts(out, "fma(");
		rc = rc ? rc : print_expr(k, e->a, out);
		rc = rc ? rc : ks_buf_puts(out, ", ");
		rc = rc ? rc : print_expr(k, e->b, out);
		rc = rc ? rc : ks_buf_puts(out, ", ");
		rc = rc ? rc : print_expr(k, e->c, out);
		return rc ? rc : ks_buf_puts(out, ")");
	case KS_X_CAST:
		rc = put2(out, ks_ty_name(e->type), "(");
		rc = rc ? rc : print_expr(k, e->a, out);
		return rc ? rc : ks_buf_puts(out, ")");
	case KS_X_LOAD:
		rc = put2(out, param_name(k, e->param), "[");
		rc = rc ? rc : print_expr(k, e->a, out);
		return rc ? rc : ks_buf_puts(out, "]");
	case KS_X_SELECT:
		rc = ks_buf_puts(out, "select(");
		rc = rc ? rc : print_expr(k, e->a, out);
		rc = rc ? rc : ks_buf_puts(out, ", ");
		rc = rc ? rc : print_expr(k, e->b, out);
		rc = rc ? rc : ks_buf_puts(out, ", ");
		rc = rc ? rc : print_expr(k, e->c, out);
		return rc ? rc : ks_buf_puts(out, ")");
	case KS_X_REDUCE:
		return ks_buf_printf(out, "reduce_%s(%s)",
		    e->red == KS_RED_MAX ? "max" : "sum", var_name(k, e->var));
	case KS_X_LLOAD:
		rc = ks_buf_printf(out, "%s[", e->param >= 0 &&
		    e->param < k->nlocals ? k->locals[e->param].name :
		    "?local");
		rc = rc ? rc : print_expr(k, e->a, out);
		return rc ? rc : ks_buf_puts(out, "]");
	case KS_X_QDOT:
		/* The native form's operands, then the plain IR's term. */
		rc = ks_buf_printf(out, "qdot(%s, %s, %lld, ",
		    param_name(k, e->param), param_name(k, e->param2),
		    (long long)e->i);
		rc = rc ? rc : print_expr(k, e->b, out);
		rc = rc ? rc : ks_buf_puts(out, ", ");
		rc = rc ? rc : print_expr(k, e->c, out);
		rc = rc ? rc : ks_buf_puts(out, ") = ");
		return rc ? rc : print_expr(k, e->a, out);
	case KS_X_UN:
		rc = put2(out, ks_unop_name(e->un), "(");
		rc = rc ? rc : print_expr(k, e->a, out);
		return rc ? rc : ks_buf_puts(out, ")");
	}
	return ks_buf_puts(out, "<bad expr>");
}

static int indent(ks_buf_t *out, int depth)
{
	int rc = 0;

	while (!rc && depth-- > 0)
		rc = ks_buf_puts(out, "  ");
	return rc;
}

static int print_stmt(const ks_ir_kernel_t *k, const ks_stmt_t *s,
    int depth, ks_buf_t *out);

/* Prints "{\n", the items one deeper, and the closing brace at DEPTH (no
 * newline after it, so "} else {" can follow). */
static int print_block(const ks_ir_kernel_t *k, const ks_stmt_t *b,
    int depth, ks_buf_t *out)
{
	int i, rc = ks_buf_puts(out, "{\n");

	if (b != NULL && b->kind == KS_S_BLOCK) {
		for (i = 0; !rc && i < b->nitems; i++)
			rc = print_stmt(k, b->items[i], depth + 1, out);
	} else if (b != NULL) {
		rc = print_stmt(k, b, depth + 1, out);
	}
	rc = rc ? rc : indent(out, depth);
	return rc ? rc : ks_buf_puts(out, "}");
}

static int print_stmt(const ks_ir_kernel_t *k, const ks_stmt_t *s,
    int depth, ks_buf_t *out)
{
	int rc = indent(out, depth);

	if (rc)
		return rc;
	switch (s->kind) {
	case KS_S_BLOCK:
		rc = print_block(k, s, depth, out);
		break;
	case KS_S_DECL:
		rc = put2(out, "decl ", var_name(k, s->var));
		if (!rc && s->a != NULL) {
			rc = ks_buf_puts(out, " = ");
			rc = rc ? rc : print_expr(k, s->a, out);
		}
		break;
	case KS_S_ASSIGN:
		rc = put2(out, var_name(k, s->var), " = ");
		rc = rc ? rc : print_expr(k, s->a, out);
		break;
	case KS_S_STORE:
		rc = put2(out, param_name(k, s->param), "[");
		rc = rc ? rc : print_expr(k, s->a, out);
		rc = rc ? rc : ks_buf_puts(out, "] = ");
		rc = rc ? rc : print_expr(k, s->b, out);
		break;
	case KS_S_FOR:
		rc = put2(out, "for ", var_name(k, s->var));
		rc = rc ? rc : ks_buf_puts(out, " = ");
		rc = rc ? rc : print_expr(k, s->a, out);
		rc = rc ? rc : ks_buf_puts(out, " to ");
		rc = rc ? rc : print_expr(k, s->b, out);
		rc = rc ? rc : ks_buf_puts(out, " step ");
		rc = rc ? rc : put_i64(out, s->step);
		rc = rc ? rc : ks_buf_puts(out, " ");
		if (!rc && s->unroll != 0)
			rc = ks_buf_printf(out, "unroll %d ", s->unroll);
		rc = rc ? rc : print_block(k, s->body, depth, out);
		break;
	case KS_S_IF:
		rc = ks_buf_puts(out, "if ");
		rc = rc ? rc : print_expr(k, s->a, out);
		rc = rc ? rc : ks_buf_puts(out, " ");
		rc = rc ? rc : print_block(k, s->body, depth, out);
		if (!rc && s->orelse != NULL) {
			rc = ks_buf_puts(out, " else ");
			rc = rc ? rc : print_block(k, s->orelse, depth, out);
		}
		break;
	case KS_S_LANES:
		rc = ks_buf_puts(out, "lanes ");
		rc = rc ? rc : print_block(k, s->body, depth, out);
		break;
	case KS_S_LSTORE:
		rc = ks_buf_printf(out, "%s[", s->param >= 0 &&
		    s->param < k->nlocals ? k->locals[s->param].name :
		    "?local");
		rc = rc ? rc : print_expr(k, s->a, out);
		rc = rc ? rc : ks_buf_puts(out, "] = ");
		rc = rc ? rc : print_expr(k, s->b, out);
		break;
	case KS_S_BARRIER:
		rc = ks_buf_puts(out, "barrier");
		break;
	case KS_S_PREFETCH:     /* "prefetch[.l2] " and a load's text */
		rc = ks_buf_printf(out, "prefetch%s %s[", s->level == 2 ?
		    ".l2" : "", param_name(k, s->param));
		rc = rc ? rc : print_expr(k, s->a, out);
		rc = rc ? rc : ks_buf_puts(out, "]");
		break;
	default:
		rc = ks_buf_puts(out, "<bad stmt>");
		break;
	}
	return rc ? rc : ks_buf_puts(out, "\n");
}

static const char *access_text(int access)
{
	switch (access & (KS_ACCESS_READ | KS_ACCESS_WRITE)) {
	case KS_ACCESS_READ: return "read";
	case KS_ACCESS_WRITE: return "write";
	case KS_ACCESS_READ | KS_ACCESS_WRITE: return "readwrite";
	}
	return "none";
}

static int print_param(const ks_ir_kernel_t *k, int i, ks_buf_t *out)
{
	const ks_ir_param_t *p = &k->params[i];

	/* A buffer's dims are part of its contract (replies carry them), so
	 * they are part of the text that fingerprints hash. */
	if (p->kind == KS_PARAM_BUFFER)
		return ks_buf_printf(out, "param %d %s buffer %s %s%s%s\n", i,
		    p->name, p->bytes && p->dtype == KS_DTYPE_F32 ? "u8" :
		    p->type == KS_TY_I32 && !p->bytes ? "i32" :
		    ks_dtype_name(p->dtype), access_text(p->access),
		    p->dims ? " dims " : "", p->dims ? p->dims : "");
	if (p->bound)
		return ks_buf_printf(out, "param %d %s scalar %s bound %"
		    PRId64 "\n", i, p->name, ks_ty_name(p->type), p->value);
	return ks_buf_printf(out, "param %d %s scalar %s\n", i, p->name,
	    ks_ty_name(p->type));
}

int ks_ir_print(const ks_ir_kernel_t *k, ks_buf_t *out)
{
	int i, rc;

	rc = ks_buf_printf(out, "kernel %s variant %s entry %s nlanes %d\n",
	    k->name, k->variant, k->entry != NULL ? k->entry : "-",
	    k->nlanes);
	for (i = 0; !rc && i < k->nparams; i++)
		rc = print_param(k, i, out);
	for (i = 0; !rc && i < k->nlocals; i++)
		rc = ks_buf_printf(out, "local %d %s f32 %" PRId64 "\n", i,
		    k->locals[i].name, k->locals[i].nelems);
	for (i = 0; !rc && i < k->nvars; i++)
		rc = ks_buf_printf(out, "var %d %s %s %s\n", i,
		    k->vars[i].name,
		    k->vars[i].scope == KS_VAR_LANE ? "lane" : "uniform",
		    ks_ty_name(k->vars[i].type));
	rc = rc ? rc : ks_buf_puts(out, "grid ");
	rc = rc ? rc : print_expr(k, k->grid, out);
	rc = rc ? rc : ks_buf_puts(out, "\nbody ");
	rc = rc ? rc : print_block(k, k->body, 0, out);
	return rc ? rc : ks_buf_puts(out, "\n");
}

/* ---- C launch expressions ---- */

/* C precedence of the operators a launch expression may use. */
static int c_prec(const ks_expr_t *e)
{
	if (e->kind != KS_X_BIN)
		return 3;
	if (e->op == KS_OP_MUL || e->op == KS_OP_DIV || e->op == KS_OP_REM)
		return 2;
	return 1;
}

/*
 * Parenthesises an operand when C would otherwise group differently: a
 * left operand of lower precedence, a right operand of lower or equal
 * precedence (C is left-associative and integer * and / do not
 * reassociate), and a negative constant anywhere inside an operator.
 */
static int c_expr(const ks_ir_kernel_t *k, const ks_expr_t *e, int need,
    int right, ks_buf_t *out)
{
	const ks_ir_param_t *p;
	int prec, paren, rc;

	switch (e->kind) {
	case KS_X_CONST:
		if (e->type != KS_TY_I64)
			return KS_E_UNSUPPORTED;
		if (e->i < 0 && need > 0)
			return ks_buf_printf(out, "(%" PRId64 ")", e->i);
		return ks_buf_printf(out, "%" PRId64, e->i);
	case KS_X_PARAM:
		if (e->param < 0 || e->param >= k->nparams)
			return KS_E_INVAL;
		p = &k->params[e->param];
		if (p->kind != KS_PARAM_SCALAR || p->type != KS_TY_I64)
			return KS_E_UNSUPPORTED;
		if (p->bound)
			return c_expr(k, &(ks_expr_t){ .kind = KS_X_CONST,
			    .type = KS_TY_I64, .i = p->value }, need, right,
			    out);
		return ks_buf_puts(out, p->name);
	case KS_X_BIN:
		if (e->type != KS_TY_I64 || e->op > KS_OP_REM)
			return KS_E_UNSUPPORTED;
		prec = c_prec(e);
		paren = prec < need || (right && prec == need);
		rc = paren ? ks_buf_puts(out, "(") : 0;
		rc = rc ? rc : c_expr(k, e->a, prec, 0, out);
		rc = rc ? rc : ks_buf_puts(out, binop_text[e->op]);
		rc = rc ? rc : c_expr(k, e->b, prec, 1, out);
		return rc ? rc : paren ? ks_buf_puts(out, ")") : 0;
	default:
		return KS_E_UNSUPPORTED;
	}
}

/* Only i64 constants, unbound or bound i64 scalar params and + - * / %
 * print; anything else is KS_E_UNSUPPORTED (OUT may then hold a partial
 * text). */
int ks_ir_print_c_expr(const ks_ir_kernel_t *k, const ks_expr_t *e,
    ks_buf_t *out)
{
	return c_expr(k, e, 0, 0, out);
}

/* The value of a launch expression (the subset ks_ir_print_c_expr prints):
 * VALS[p] is the value of unbound i64 scalar parameter p. */
int ks_ir_eval_launch(const ks_ir_kernel_t *k, const ks_expr_t *e,
    const int64_t *vals, int64_t *out)
{
	const ks_ir_param_t *p;
	int64_t a, b;
	int rc;

	switch (e->kind) {
	case KS_X_CONST:
		if (e->type != KS_TY_I64)
			return KS_E_UNSUPPORTED;
		*out = e->i;
		return KS_OK;
	case KS_X_PARAM:
		if (e->param < 0 || e->param >= k->nparams)
			return KS_E_INVAL;
		p = &k->params[e->param];
		if (p->kind != KS_PARAM_SCALAR || p->type != KS_TY_I64)
			return KS_E_UNSUPPORTED;
		*out = p->bound ? p->value : vals[e->param];
		return KS_OK;
	case KS_X_BIN:
		if (e->type != KS_TY_I64 || e->op > KS_OP_REM)
			return KS_E_UNSUPPORTED;
		rc = ks_ir_eval_launch(k, e->a, vals, &a);
		rc = rc ? rc : ks_ir_eval_launch(k, e->b, vals, &b);
		if (rc != KS_OK)
			return rc;
		if ((e->op == KS_OP_DIV || e->op == KS_OP_REM) && b == 0)
			return KS_E_INVAL;
		switch (e->op) {
		case KS_OP_ADD: *out = a + b; break;
		case KS_OP_SUB: *out = a - b; break;
		case KS_OP_MUL: *out = a * b; break;
		case KS_OP_DIV: *out = a / b; break;
		default: *out = a % b; break;
		}
		return KS_OK;
	default:
		return KS_E_UNSUPPORTED;
	}
}
