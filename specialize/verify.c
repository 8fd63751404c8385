/*
 * verify: the IR verifier.  Runs after every pass in debug builds and on
 * every kernel a builder returns (ks_pass_run), so a pass or builder bug is
 * caught at the pass that made it, not in a backend.
 *
 * Rules (the model of specialize.h):
 *   - every expression's type is the one its kind and operands give, and
 *     operand slots a kind does not use are NULL;
 *   - a variable is declared exactly once (DECL, or FOR for its loop var)
 *     and used only after its declaration, inside the block that declares
 *     it (a FOR's variable: inside its body);
 *   - LANES do not nest; KS_X_LANE appears only inside LANES; lane
 *     variables are read and assigned only inside LANES (a DECL of one may
 *     stand outside with a uniform initializer); uniform variables are not
 *     declared or assigned inside LANES; KS_X_REDUCE stands only outside
 *     LANES, over a lane variable, and only in kernels of 32 lanes (the
 *     canonical tree has strides 16..1);
 *   - a FOR's variable is i64, uniform outside LANES and lane inside, and
 *     its step is positive;
 *   - unary math: neg and abs of i64 or f32, sqrt and exp of f32 only,
 *     the result of the operand's type;
 *   - loads read a buffer with the read bit, stores write a buffer with the
 *     write bit, indices are i64, loaded and stored values of the buffer's
 *     type (f32, or i32 for an i32 buffer, whose dtype is f32, unused);
 *   - i32 in variables, loads, stores, select, comparisons, casts to and
 *     from i64 and f32, and + - * & | ^ << >> (no / %, min, max or
 *     reduce); & | ^ << >> on i64 or i32 only; f16bits of i32 gives f32;
 *   - a byte buffer is an i32 buffer that is read-only, of plain bytes
 *     (dtype f32, printed u8) or of a block format (so that its printed
 *     dtype never reads as an element buffer's);
 *   - scalar parameter uses are of unbound parameters (ks_pass_bind
 *     replaces every use of the ones it binds);
 *   - the grid is an i64 expression of constants, scalar parameters and
 *     + - * / % only, so ks_ir_print_c_expr can always print it for the
 *     reply's launch;
 *   - local arrays have 1..KS_IR_LOCAL_MAX elements; local loads and
 *     stores have i64 indices, within the array when constant, f32
 *     values; local stores stand inside LANES; a barrier stands outside
 *     LANES and outside any IF (PoCL hangs on barriers under uniform IFs
 *     of different conditions; see jit/emit_c.c);
 *   - parameter, variable and local array names are distinct C
 *     identifiers, none of them reserved (ks_ir_name_reserved: a word of
 *     the text form, a C, CUDA or OpenCL keyword or builtin, a prefix of
 *     the code generators).
 *
 * The verifier walks with ks_ir_walk_enter and rewrites nothing: every
 * callback returns the node it was given.  It keeps the node or
 * declaration it is checking (`cur`), and the first failure records it
 * for ks_ir_verify_at, which the parser turns into a line and column.
 */
#include "specialize.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	const ks_ir_kernel_t *k;
	char *err;
	size_t errlen;
	int failed;
	int nomem;
	int in_body;            /* 0 while the grid is walked */
	int has_reduce;
	int if_depth;           /* IFs open around the current statement */
	unsigned char *declared; /* per var: declared somewhere already */
	unsigned char *visible;  /* per var: in scope now */
	int *stack;             /* visible vars in declaration order */
	int nstack;
	int *marks;             /* stack heights at each open scope */
	int nmarks;
	int marks_cap;
	ks_ir_site_t cur;       /* what is being checked */
	ks_ir_site_t *site;     /* where the first failure was, or NULL */
} verifier_t;

static const ks_ir_site_t no_site = { NULL, NULL, -1, -1, -1 };

/* Now checking statement S (or, with S NULL, expression E). */
static void at_node(verifier_t *v, const ks_stmt_t *s, const ks_expr_t *e)
{
	v->cur = no_site;
	v->cur.stmt = s;
	v->cur.expr = e;
}

static void fail(verifier_t *v, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void fail(verifier_t *v, const char *fmt, ...)
{
	va_list ap;

	if (v->failed++)
		return;
	if (v->site != NULL)
		*v->site = v->cur;
	if (v->err == NULL || v->errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(v->err, v->errlen, fmt, ap);
	va_end(ap);
}

static const char *vname(verifier_t *v, int var)
{
	return var >= 0 && var < v->k->nvars ? v->k->vars[var].name : "?";
}

static int var_ok(verifier_t *v, int var, const char *what)
{
	if (var >= 0 && var < v->k->nvars)
		return 1;
	fail(v, "%s: variable index %d out of range", what, var);
	return 0;
}

static const ks_ir_param_t *param_of(verifier_t *v, int param,
    const char *what)
{
	if (param >= 0 && param < v->k->nparams)
		return &v->k->params[param];
	fail(v, "%s: parameter index %d out of range", what, param);
	return NULL;
}

/* ---- scopes ---- */

static void open_scope(verifier_t *v)
{
	if (v->nmarks == v->marks_cap) {
		int cap = v->marks_cap ? v->marks_cap * 2 : 16;
		int *p = realloc(v->marks, (size_t)cap * sizeof(*p));

		if (p == NULL) {
			v->nomem = 1;
			fail(v, "out of memory");
			return;
		}
		v->marks = p;
		v->marks_cap = cap;
	}
	v->marks[v->nmarks++] = v->nstack;
}

static void close_scope(verifier_t *v)
{
	int mark;

	if (v->nmarks == 0)
		return;         /* open_scope failed; already reported */
	mark = v->marks[--v->nmarks];
	while (v->nstack > mark)
		v->visible[v->stack[--v->nstack]] = 0;
}

static void declare(verifier_t *v, int var)
{
	if (!var_ok(v, var, "declaration"))
		return;
	if (v->declared[var]) {
		fail(v, "variable %s declared twice", vname(v, var));
		return;
	}
	v->declared[var] = 1;
	v->visible[var] = 1;
	v->stack[v->nstack++] = var;    /* at most nvars pushes */
}

static int visible(verifier_t *v, int var, const char *what)
{
	if (!var_ok(v, var, what))
		return 0;
	if (v->visible[var])
		return 1;
	fail(v, "%s: variable %s used %s", what, vname(v, var),
	    v->declared[var] ? "outside the block that declares it" :
	    "before its declaration");
	return 0;
}

/* ---- expressions ---- */

static int is_arith(ks_ty_t t)
{
	return t == KS_TY_I64 || t == KS_TY_F32;
}

/* Types a cast converts between (i32 is not arithmetic in the sense of
 * is_arith: no division, min, max or reduce computes in it). */
static int is_num(ks_ty_t t)
{
	return is_arith(t) || t == KS_TY_I32;
}

/* Operand slots: exactly the first N of a, b, c are set. */
static int operands(verifier_t *v, const ks_expr_t *e, int n)
{
	const ks_expr_t *slot[3] = { e->a, e->b, e->c };
	int i;

	/* The common case in one test (every node of every pass). */
	if ((e->a != NULL) == (n > 0) && (e->b != NULL) == (n > 1) &&
	    (e->c != NULL) == (n > 2))
		return 1;
	for (i = 0; i < 3; i++) {
		if ((i < n) != (slot[i] != NULL)) {
			fail(v, "expression of kind %d: operand %c %s", e->kind,
			    'a' + i, i < n ? "missing" : "stray");
			return 0;
		}
	}
	return 1;
}

static void expect_type(verifier_t *v, const ks_expr_t *e, ks_ty_t t,
    const char *what)
{
	if (e->type != t)
		fail(v, "%s: type %s, expected %s", what, ks_ty_name(e->type),
		    ks_ty_name(t));
}

/* Whether E reads no lane index and no lane variable. */
static int lane_free(const verifier_t *v, const ks_expr_t *e)
{
	if (e == NULL)
		return 1;
	if (e->kind == KS_X_LANE || (e->kind == KS_X_VAR && e->var >= 0 &&
	    e->var < v->k->nvars && v->k->vars[e->var].scope == KS_VAR_LANE))
		return 0;
	return lane_free(v, e->a) && lane_free(v, e->b) && lane_free(v, e->c);
}

/* KS_X_QDOT (specialize.h): in a LANES of 16, W a byte buffer of a block
 * format, x one of q8_0, the count or pair in range, the term f32, the
 * offsets uniform i64. */
static void check_qdot(verifier_t *v, const ks_expr_t *e, int in_lanes)
{
	const ks_ir_param_t *w, *x;

	if (!operands(v, e, 3))
		return;
	w = param_of(v, e->param, "qdot");
	x = param_of(v, e->param2, "qdot");
	if (w == NULL || x == NULL)
		return;
	if (!in_lanes || v->k->nlanes != 16)
		fail(v, "qdot outside a LANES of 16 lanes");
	if (w->kind != KS_PARAM_BUFFER || !w->bytes ||
	    (w->dtype != KS_DTYPE_Q8_0 && w->dtype != KS_DTYPE_Q4_0 &&
	    w->dtype != KS_DTYPE_Q4_K))
		fail(v, "qdot of %s, which is not a block-format buffer",
		    w->name);
	if (x->kind != KS_PARAM_BUFFER || !x->bytes ||
	    x->dtype != KS_DTYPE_Q8_0)
		fail(v, "qdot of %s, which is not a q8_0 buffer", x->name);
	if (w->dtype == KS_DTYPE_Q4_K ? e->i < 0 || e->i > 4 :
	    e->i < 1 || e->i > 2)
		fail(v, "qdot of %lld blocks or pair", (long long)e->i);
	expect_type(v, e->a, KS_TY_F32, "qdot term");
	expect_type(v, e->b, KS_TY_I64, "qdot offset");
	expect_type(v, e->c, KS_TY_I64, "qdot offset");
	if (!lane_free(v, e->b) || !lane_free(v, e->c))
		fail(v, "qdot offset that reads a lane");
	expect_type(v, e, KS_TY_F32, "qdot");
}

static void check_bin(verifier_t *v, const ks_expr_t *e)
{
	ks_ty_t ta = e->a->type, tb = e->b->type;
	ks_ty_t want;

	if (e->op < 0 || e->op >= KS_OP_COUNT) {
		fail(v, "binary operator %d unknown", e->op);
		return;
	}
	if (ta != tb) {
		fail(v, "binary operator %d: operand types %s and %s differ",
		    e->op, ks_ty_name(ta), ks_ty_name(tb));
		return;
	}
	switch (e->op) {
	case KS_OP_REM:
		if (ta != KS_TY_I64)
			fail(v, "%%: operands are %s, expected i64",
			    ks_ty_name(ta));
		want = ta;
		break;
	case KS_OP_ADD: case KS_OP_SUB: case KS_OP_MUL:
		if (!is_num(ta))
			fail(v, "arithmetic on %s", ks_ty_name(ta));
		want = ta;
		break;
	case KS_OP_DIV: case KS_OP_MIN: case KS_OP_MAX:
		if (!is_arith(ta))
			fail(v, "arithmetic on %s", ks_ty_name(ta));
		want = ta;
		break;
	case KS_OP_BAND: case KS_OP_BOR: case KS_OP_BXOR: case KS_OP_SHL:
	case KS_OP_SHR:
		if (ta != KS_TY_I64 && ta != KS_TY_I32)
			fail(v, "bit operator on %s", ks_ty_name(ta));
		want = ta;
		break;
	case KS_OP_LT: case KS_OP_LE:
		if (!is_num(ta))
			fail(v, "ordering comparison of %s", ks_ty_name(ta));
		want = KS_TY_BOOL;
		break;
	case KS_OP_EQ: case KS_OP_NE:
		want = KS_TY_BOOL;
		break;
	default: /* AND, OR */
		if (ta != KS_TY_BOOL)
			fail(v, "logical operator on %s", ks_ty_name(ta));
		want = KS_TY_BOOL;
		break;
	}
	expect_type(v, e, want, "binary expression");
}

static void check_grid_expr(verifier_t *v, const ks_expr_t *e)
{
	switch (e->kind) {
	case KS_X_CONST: case KS_X_PARAM:
		break;
	case KS_X_BIN:
		if (e->op <= KS_OP_REM)
			break;
		/* fall through */
	default:
		fail(v, "grid: expression of kind %d is not allowed (only "
		    "constants, scalar parameters and + - * / %%)", e->kind);
	}
}

/* A local array access: the array exists, the index is i64 and, when
 * constant, within the array. */
static int local_access(verifier_t *v, int local, const ks_expr_t *index,
    const char *what)
{
	const ks_ir_local_t *l;

	if (local < 0 || local >= v->k->nlocals) {
		fail(v, "%s: local array index %d out of range", what, local);
		return 0;
	}
	l = &v->k->locals[local];
	if (index == NULL) {
		fail(v, "%s of %s: missing index", what, l->name);
		return 0;
	}
	expect_type(v, index, KS_TY_I64, what);
	if (index->kind == KS_X_CONST && index->type == KS_TY_I64 &&
	    (index->i < 0 || index->i >= l->nelems))
		fail(v, "%s: %s[%lld] out of bounds (%lld elements)", what,
		    l->name, (long long)index->i, (long long)l->nelems);
	return 1;
}

static ks_expr_t *check_expr(void *ctx, ks_ir_kernel_t *k, ks_expr_t *e,
    int in_lanes)
{
	verifier_t *v = ctx;
	const ks_ir_param_t *p;
	ks_ty_t t;

	(void)k;
	at_node(v, NULL, e);
	if (!v->in_body)
		check_grid_expr(v, e);
	switch (e->kind) {
	case KS_X_CONST:
		if (operands(v, e, 0) && e->type != KS_TY_BOOL &&
		    !is_arith(e->type))
			fail(v, "constant of unknown type %d", e->type);
		break;
	case KS_X_PARAM:
		if (!operands(v, e, 0))
			break;
		p = param_of(v, e->param, "parameter use");
		if (p == NULL)
			break;
		if (p->kind != KS_PARAM_SCALAR)
			fail(v, "buffer %s used as a value", p->name);
		else if (p->bound)
			fail(v, "use of bound parameter %s left", p->name);
		else
			expect_type(v, e, p->type, p->name);
		break;
	case KS_X_VAR:
		if (!operands(v, e, 0) || !visible(v, e->var, "read"))
			break;
		expect_type(v, e, v->k->vars[e->var].type, vname(v, e->var));
		if (v->k->vars[e->var].scope == KS_VAR_LANE && !in_lanes)
			fail(v, "lane variable %s read outside LANES",
			    vname(v, e->var));
		break;
	case KS_X_GROUP:
		if (operands(v, e, 0))
			expect_type(v, e, KS_TY_I64, "group");
		break;
	case KS_X_LANE:
		if (operands(v, e, 0))
			expect_type(v, e, KS_TY_I64, "lane");
		if (!in_lanes)
			fail(v, "lane index used outside LANES");
		break;
	case KS_X_BIN:
		if (operands(v, e, 2))
			check_bin(v, e);
		break;
	case KS_X_FMA:
		if (!operands(v, e, 3))
			break;
		if (e->a->type != KS_TY_F32 || e->b->type != KS_TY_F32 ||
		    e->c->type != KS_TY_F32)
			fail(v, "fma of non-f32 operands");
		expect_type(v, e, KS_TY_F32, "fma");
		break;
	case KS_X_CAST:
		if (!operands(v, e, 1))
			break;
		t = e->a->type;
		if (!(t == e->type || (is_num(t) && is_num(e->type)) ||
		    (t == KS_TY_BOOL && e->type == KS_TY_I64)))
			fail(v, "cast from %s to %s", ks_ty_name(t),
			    ks_ty_name(e->type));
		break;
	case KS_X_LOAD:
		if (!operands(v, e, 1))
			break;
		p = param_of(v, e->param, "load");
		if (p == NULL)
			break;
		if (p->kind != KS_PARAM_BUFFER ||
		    !(p->access & KS_ACCESS_READ))
			fail(v, "load from %s, which is not a readable buffer",
			    p->name);
		expect_type(v, e->a, KS_TY_I64, "load index");
		expect_type(v, e, p->type, "load");
		break;
	case KS_X_SELECT:
		if (!operands(v, e, 3))
			break;
		expect_type(v, e->a, KS_TY_BOOL, "select condition");
		if (e->b->type != e->c->type)
			fail(v, "select of %s and %s", ks_ty_name(e->b->type),
			    ks_ty_name(e->c->type));
		expect_type(v, e, e->b->type, "select");
		break;
	case KS_X_REDUCE:
		v->has_reduce = 1;
		if (!operands(v, e, 0) || !visible(v, e->var, "reduce"))
			break;
		if (in_lanes)
			fail(v, "reduce of %s inside LANES", vname(v, e->var));
		if (v->k->vars[e->var].scope != KS_VAR_LANE)
			fail(v, "reduce of uniform variable %s",
			    vname(v, e->var));
		if (!is_arith(v->k->vars[e->var].type))
			fail(v, "reduce of %s variable %s",
			    ks_ty_name(v->k->vars[e->var].type),
			    vname(v, e->var));
		expect_type(v, e, v->k->vars[e->var].type, "reduce");
		break;
	case KS_X_QDOT:
		check_qdot(v, e, in_lanes);
		break;
	case KS_X_LLOAD:
		if (operands(v, e, 1) && local_access(v, e->param, e->a,
		    "local load"))
			expect_type(v, e, KS_TY_F32, "local load");
		break;
	case KS_X_UN:
		if (!operands(v, e, 1))
			break;
		if (e->un < 0 || e->un >= KS_UN_COUNT) {
			fail(v, "unary operator %d unknown", e->un);
			break;
		}
		t = e->a->type;
		if (e->un == KS_UN_F16 ? t != KS_TY_I32 :
		    (e->un == KS_UN_SQRT || e->un == KS_UN_EXP) ?
		    t != KS_TY_F32 : !is_arith(t))
			fail(v, "%s of %s", ks_unop_name(e->un),
			    ks_ty_name(t));
		expect_type(v, e, e->un == KS_UN_F16 ? KS_TY_F32 : t,
		    ks_unop_name(e->un));
		break;
	default:
		fail(v, "expression kind %d unknown", e->kind);
		break;
	}
	return e;
}

/* ---- statements ---- */

static void check_slots(verifier_t *v, const ks_stmt_t *s)
{
	int has_body = s->kind == KS_S_FOR || s->kind == KS_S_IF ||
	    s->kind == KS_S_LANES;

	if (has_body && (s->body == NULL || s->body->kind != KS_S_BLOCK))
		fail(v, "statement of kind %d: body is not a block", s->kind);
	if (!has_body && s->body != NULL)
		fail(v, "statement of kind %d: stray body", s->kind);
	if (s->orelse != NULL && (s->kind != KS_S_IF ||
	    s->orelse->kind != KS_S_BLOCK))
		fail(v, "statement of kind %d: bad else block", s->kind);
}

/* Called after the statement's own expressions, before its blocks. */
static void enter_stmt(void *ctx, ks_ir_kernel_t *k, ks_stmt_t *s,
    int in_lanes)
{
	verifier_t *v = ctx;

	(void)k;
	at_node(v, s, NULL);
	v->in_body = 1;
	check_slots(v, s);
	if (s->kind == KS_S_IF)
		v->if_depth++;
	if (s->kind == KS_S_BLOCK) {
		open_scope(v);
	} else if (s->kind == KS_S_FOR) {
		open_scope(v);
		if (s->a == NULL || s->b == NULL)
			fail(v, "for: missing bound");
		else if (s->a->type != KS_TY_I64 || s->b->type != KS_TY_I64)
			fail(v, "for: bounds are not i64");
		if (s->step <= 0)
			fail(v, "for: step %lld is not positive",
			    (long long)s->step);
		if (s->unroll != 0 && (s->unroll < 2 ||
		    s->unroll > KS_IR_UNROLL_MAX))
			fail(v, "for: unroll hint %d is not 0 or 2..%d",
			    s->unroll, KS_IR_UNROLL_MAX);
		if (!var_ok(v, s->var, "for"))
			return;
		if (v->k->vars[s->var].type != KS_TY_I64)
			fail(v, "for: loop variable %s is not i64",
			    vname(v, s->var));
		if ((v->k->vars[s->var].scope == KS_VAR_LANE) != !!in_lanes)
			fail(v, "for: loop variable %s is %s but the loop is "
			    "%s LANES", vname(v, s->var), in_lanes ?
			    "uniform" : "lane", in_lanes ? "inside" :
			    "outside");
		declare(v, s->var);
	}
}

static ks_stmt_t *check_stmt(void *ctx, ks_ir_kernel_t *k, ks_stmt_t *s,
    int in_lanes)
{
	verifier_t *v = ctx;
	const ks_ir_param_t *p;
	const ks_ir_var_t *var;

	(void)k;
	at_node(v, s, NULL);
	switch (s->kind) {
	case KS_S_BLOCK:
	case KS_S_FOR:
		close_scope(v);
		break;
	case KS_S_DECL:
		if (!var_ok(v, s->var, "decl"))
			break;
		var = &v->k->vars[s->var];
		if (s->a != NULL && s->a->type != var->type)
			fail(v, "decl %s: initializer is %s, variable is %s",
			    var->name, ks_ty_name(s->a->type),
			    ks_ty_name(var->type));
		if (var->scope == KS_VAR_UNIFORM && in_lanes)
			fail(v, "uniform variable %s declared inside LANES",
			    var->name);
		declare(v, s->var);
		break;
	case KS_S_ASSIGN:
		if (s->a == NULL) {
			fail(v, "assign: missing value");
			break;
		}
		if (!visible(v, s->var, "assign"))
			break;
		var = &v->k->vars[s->var];
		if (s->a->type != var->type)
			fail(v, "assign %s: value is %s, variable is %s",
			    var->name, ks_ty_name(s->a->type),
			    ks_ty_name(var->type));
		if (var->scope == KS_VAR_UNIFORM && in_lanes)
			fail(v, "uniform variable %s assigned inside LANES",
			    var->name);
		if (var->scope == KS_VAR_LANE && !in_lanes)
			fail(v, "lane variable %s assigned outside LANES",
			    var->name);
		break;
	case KS_S_STORE:
		p = param_of(v, s->param, "store");
		if (p == NULL)
			break;
		if (p->kind != KS_PARAM_BUFFER ||
		    !(p->access & KS_ACCESS_WRITE))
			fail(v, "store to %s, which is not a writable buffer",
			    p->name);
		if (s->a == NULL || s->b == NULL) {
			fail(v, "store to %s: missing operand", p->name);
			break;
		}
		expect_type(v, s->a, KS_TY_I64, "store index");
		expect_type(v, s->b, p->type, "stored value");
		break;
	case KS_S_LSTORE:
		if (!in_lanes)
			fail(v, "local store outside LANES");
		if (local_access(v, s->param, s->a, "local store")) {
			if (s->b == NULL)
				fail(v, "local store: missing value");
			else
				expect_type(v, s->b, KS_TY_F32,
				    "local stored value");
		}
		break;
	case KS_S_BARRIER:
		if (in_lanes)
			fail(v, "barrier inside LANES");
		if (v->if_depth > 0)
			fail(v, "barrier inside IF");
		if (s->a != NULL || s->b != NULL)
			fail(v, "barrier with operands");
		break;
	case KS_S_PREFETCH:
		if (in_lanes)
			fail(v, "prefetch inside LANES");
		p = param_of(v, s->param, "prefetch");
		if (p == NULL)
			break;
		if (p->kind != KS_PARAM_BUFFER ||
		    !(p->access & KS_ACCESS_READ))
			fail(v, "prefetch of %s, which is not a readable "
			    "buffer", p->name);
		if (s->level != 1 && s->level != 2)
			fail(v, "prefetch of %s: cache level %d (1 or 2)",
			    p->name, s->level);
		if (s->a == NULL || s->b != NULL)
			fail(v, "prefetch of %s: needs one index", p->name);
		else
			expect_type(v, s->a, KS_TY_I64, "prefetch index");
		break;
	case KS_S_IF:
		v->if_depth--;
		if (s->a == NULL)
			fail(v, "if: missing condition");
		else
			expect_type(v, s->a, KS_TY_BOOL, "if condition");
		break;
	case KS_S_LANES:
		if (in_lanes)
			fail(v, "nested LANES");
		break;
	default:
		fail(v, "statement kind %d unknown", s->kind);
		break;
	}
	return s;
}

/* ---- names and the whole kernel ---- */

static int is_ident(const char *s)
{
	size_t i;

	if (s == NULL || !(*s == '_' || (*s >= 'a' && *s <= 'z') ||
	    (*s >= 'A' && *s <= 'Z')))
		return 0;
	for (i = 1; s[i]; i++)
		if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') ||
		    (s[i] >= 'A' && s[i] <= 'Z') ||
		    (s[i] >= '0' && s[i] <= '9')))
			return 0;
	return ks_ir_name_reserved(s, i) == NULL;
}

/* Names in one numbering: params, then vars, then locals. */
static void at_name(verifier_t *v, int i)
{
	const ks_ir_kernel_t *k = v->k;

	v->cur = no_site;
	if (i < k->nparams)
		v->cur.param = i;
	else if (i < k->nparams + k->nvars)
		v->cur.var = i - k->nparams;
	else
		v->cur.local = i - k->nparams - k->nvars;
}

static const char *name_at(const ks_ir_kernel_t *k, int i)
{
	if (i < k->nparams)
		return k->params[i].name;
	if (i < k->nparams + k->nvars)
		return k->vars[i - k->nparams].name;
	return k->locals[i - k->nparams - k->nvars].name;
}

/* A declared name and its index (name_at's). */
typedef struct {
	const char *name;
	int i;
} named_t;

static int cmp_names(const void *a, const void *b)
{
	const named_t *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : (x->i > y->i) - (x->i < y->i);
}

static void check_decls(verifier_t *v)
{
	const ks_ir_kernel_t *k = v->k;
	int i, j, n = k->nparams + k->nvars + k->nlocals;
	named_t *names;

	v->cur = no_site;
	if (k->nlanes < 1 || k->nlanes > 1024)
		fail(v, "nlanes %d out of range", k->nlanes);
	for (i = 0; i < k->nparams; i++) {
		const ks_ir_param_t *p = &k->params[i];

		at_name(v, i);
		if (p->kind == KS_PARAM_BUFFER) {
			if ((p->type != KS_TY_F32 && p->type != KS_TY_I32) ||
			    p->dtype < 0 || p->dtype >= KS_DTYPE_ALL ||
			    (p->dtype >= KS_DTYPE_COUNT && !p->bytes) ||
			    (p->type == KS_TY_I32 && !p->bytes &&
			    p->dtype != KS_DTYPE_F32) || p->bound ||
			    !(p->access & (KS_ACCESS_READ | KS_ACCESS_WRITE)) ||
			    (p->bytes && (p->type != KS_TY_I32 ||
			    p->access != KS_ACCESS_READ ||
			    (p->dtype != KS_DTYPE_F32 &&
			    p->dtype < KS_DTYPE_COUNT))))
				fail(v, "buffer %s: bad type, dtype, access "
				    "or binding", p->name);
		} else if (p->kind == KS_PARAM_SCALAR) {
			if (!is_arith(p->type) ||
			    (p->bound && p->type != KS_TY_I64))
				fail(v, "scalar %s: bad type or binding",
				    p->name);
		} else {
			fail(v, "parameter %d: unknown kind", i);
		}
	}
	for (i = 0; i < k->nlocals; i++) {
		at_name(v, k->nparams + k->nvars + i);
		if (k->locals[i].nelems < 1 ||
		    k->locals[i].nelems > KS_IR_LOCAL_MAX)
			fail(v, "local array %s: %lld elements, expected 1..%d",
			    k->locals[i].name, (long long)k->locals[i].nelems,
			    KS_IR_LOCAL_MAX);
	}
	for (i = 0; i < k->nvars; i++) {
		at_name(v, k->nparams + i);
		if ((k->vars[i].scope != KS_VAR_UNIFORM &&
		    k->vars[i].scope != KS_VAR_LANE) ||
		    (k->vars[i].type != KS_TY_BOOL &&
		    !is_num(k->vars[i].type)))
			fail(v, "variable %s: bad scope or type",
			    k->vars[i].name);
	}
	for (i = 0; i < n; i++) {
		at_name(v, i);
		if (!is_ident(name_at(k, i)))
			fail(v, "name \"%s\" is not a usable identifier",
			    name_at(k, i) ? name_at(k, i) : "(null)");
	}
	/* Each name once: sorted by name, then by index, a name used twice
	 * sits beside itself, its later use second (an unrolled kernel has
	 * hundreds of names; comparing every pair cost the fingerprints of
	 * the library most of their time).  Without the memory for the
	 * copy, every pair is compared. */
	names = malloc((size_t)(n > 0 ? n : 1) * sizeof *names);
	for (i = 0; names && i < n; i++) {
		names[i].name = name_at(k, i) ? name_at(k, i) : "";
		names[i].i = i;
	}
	if (names) {
		qsort(names, (size_t)n, sizeof *names, cmp_names);
		for (i = 1; i < n; i++)
			if (names[i].name[0] &&
			    strcmp(names[i].name, names[i - 1].name) == 0) {
				at_name(v, names[i].i);
				fail(v, "name %s used twice", names[i].name);
			}
		free(names);
		return;
	}
	for (i = 0; i < n; i++)
		for (j = 0; j < i; j++)
			if (name_at(k, i) && name_at(k, j) &&
			    strcmp(name_at(k, i), name_at(k, j)) == 0) {
				at_name(v, i);
				fail(v, "name %s used twice", name_at(k, i));
			}
}

int ks_ir_verify(const ks_ir_kernel_t *k, char *err, size_t errlen)
{
	return ks_ir_verify_at(k, NULL, err, errlen);
}

int ks_ir_verify_at(const ks_ir_kernel_t *k, ks_ir_site_t *site, char *err,
    size_t errlen)
{
	verifier_t v = { .k = k, .err = err, .errlen = errlen, .cur = no_site,
	    .site = site };
	ks_ir_visitor_t vis = { &v, check_expr, check_stmt };
	size_t nv = (size_t)(k->nvars > 0 ? k->nvars : 1);

	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (site != NULL)
		*site = no_site;
	check_decls(&v);
	v.cur = no_site;
	if (k->grid == NULL || k->body == NULL ||
	    k->body->kind != KS_S_BLOCK)
		fail(&v, "kernel without a grid or a body block");
	if (v.failed)
		goto out;
	v.declared = calloc(nv, 1);
	v.visible = calloc(nv, 1);
	v.stack = calloc(nv, sizeof(*v.stack));
	if (v.declared == NULL || v.visible == NULL || v.stack == NULL) {
		v.nomem = 1;
		fail(&v, "out of memory");
		goto out;
	}
	/* Every callback returns its node, so the walk changes nothing. */
	ks_ir_walk_enter((ks_ir_kernel_t *)k, &vis, enter_stmt);
	at_node(&v, NULL, k->grid);
	if (k->grid->type != KS_TY_I64)
		fail(&v, "grid is %s, expected i64",
		    ks_ty_name(k->grid->type));
	v.cur = no_site;
	if (v.has_reduce && (k->nlanes & (k->nlanes - 1)) != 0)
		fail(&v, "reduce needs a power of two lanes, kernel has %d",
		    k->nlanes);
out:
	free(v.declared);
	free(v.visible);
	free(v.stack);
	free(v.marks);
	if (v.nomem)
		return KS_E_NOMEM;
	return v.failed ? KS_E_INTERNAL : KS_OK;
}
