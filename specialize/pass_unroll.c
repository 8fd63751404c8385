/*
 * unroll: FOR loops with constant bounds and a trip count of 2..8 become
 * that many copies of their body.
 *
 * Requires: a verified, folded kernel (trip1 has removed trip 0 and 1).
 * Gives: a verified kernel with the same results, bit for bit: the copies
 * run the same statements in the same order as the iterations did, so no
 * arithmetic is reordered.
 *
 * Copy i is the body with every use of the loop variable replaced by the
 * constant begin + i * step.  Each variable the body declares (a DECL, or
 * the variable of a nested FOR) gets a fresh variable per copy ("acc" ->
 * "acc_u1"), because a variable is declared once per kernel; uses inside
 * the copy follow.  The copies replace the FOR as one BLOCK, which the
 * enclosing block splices (names are unique, so splicing never changes
 * meaning).  The original loop and body variables stay in k->vars unused.
 *
 * The walk is post-order, so inner loops are unrolled before the loop that
 * contains them and the copies of an outer loop are of the unrolled inner
 * body.  Loops of any body are unrolled, LANES included: a FOR outside
 * LANES whose body holds a LANES becomes consecutive LANES phases, which
 * is what the iterations were.
 *
 * The walker rewrites nodes in place, so the copy itself is a recursion
 * here over the generic operand and block slots (no switch on kinds but
 * for the ones that bind or name variables).  Run ks_pass_fold afterwards:
 * the substituted constants fold further.
 *
 * A budget bounds what unrolling makes: a loop stays a loop when its
 * copies would take the kernel past the text form's limits on statements,
 * expression nodes or variables (base/limits.h).  Nested loops multiply
 * (eight levels of 8 trips are 16 million copies of the innermost body),
 * and a kernel read from text must cost its author an error or a slower
 * kernel, never the worker's memory.  The library's kernels stay far
 * below the budget: none of them is unrolled any differently.
 */
#include "specialize.h"

#include <stdio.h>
#include <string.h>

enum { UNROLL_MAX = 8 };

/* The kernel's size as unrolling goes (post-order: inner loops first). */
typedef struct {
	int64_t stmts, exprs;
} budget_t;

typedef struct {
	int loop_var;           /* replaced by `value` */
	int64_t value;
	int *map;               /* per var: its fresh copy, or -1 */
	int nmap;               /* vars when the copy began */
	int copy;               /* copy number, for names */
} clone_t;

/* A fresh variable like VAR, named "<name>_u<copy>" made unique among
 * the parameters, variables and local arrays. */
static int fresh_var(ks_ir_kernel_t *k, int var, int copy)
{
	char name[256];
	int i, n, taken;

	for (n = copy;; n += UNROLL_MAX) {
		snprintf(name, sizeof name, "%s_u%d", k->vars[var].name, n);
		taken = 0;
		for (i = 0; i < k->nparams && !taken; i++)
			taken = strcmp(k->params[i].name, name) == 0;
		for (i = 0; i < k->nvars && !taken; i++)
			taken = strcmp(k->vars[i].name, name) == 0;
		for (i = 0; i < k->nlocals && !taken; i++)
			taken = strcmp(k->locals[i].name, name) == 0;
		if (!taken)
			break;
	}
	return ks_ir_var(k, name, k->vars[var].type, k->vars[var].scope);
}

static int mapped(const clone_t *c, int var)
{
	return var >= 0 && var < c->nmap && c->map[var] >= 0 ? c->map[var] :
	    var;
}

static ks_expr_t *clone_expr(ks_ir_kernel_t *k, clone_t *c,
    const ks_expr_t *e)
{
	ks_expr_t *n;

	if (e == NULL)
		return NULL;
	if (e->kind == KS_X_VAR && e->var == c->loop_var)
		return ks_x_i64(k, c->value);
	n = ks_arena_alloc(k->arena, sizeof(*n));
	*n = *e;
	n->a = clone_expr(k, c, e->a);
	n->b = clone_expr(k, c, e->b);
	n->c = clone_expr(k, c, e->c);
	if (e->kind == KS_X_VAR || e->kind == KS_X_REDUCE)
		n->var = mapped(c, e->var);
	return n;
}

static ks_stmt_t *clone_stmt(ks_ir_kernel_t *k, clone_t *c,
    const ks_stmt_t *s)
{
	ks_stmt_t *n;
	int i;

	if (s == NULL)
		return NULL;
	n = ks_arena_alloc(k->arena, sizeof(*n));
	*n = *s;
	/* Expressions first: a DECL's initializer sees the old binding. */
	n->a = clone_expr(k, c, s->a);
	n->b = clone_expr(k, c, s->b);
	if ((s->kind == KS_S_DECL || s->kind == KS_S_FOR) && s->var >= 0 &&
	    s->var < c->nmap)
		c->map[s->var] = fresh_var(k, s->var, c->copy);
	if (s->kind == KS_S_DECL || s->kind == KS_S_FOR ||
	    s->kind == KS_S_ASSIGN)
		n->var = mapped(c, s->var);
	n->body = clone_stmt(k, c, s->body);
	n->orelse = clone_stmt(k, c, s->orelse);
	if (s->kind == KS_S_BLOCK) {
		n->items = ks_arena_alloc(k->arena, (size_t)(s->nitems > 0 ?
		    s->nitems : 1) * sizeof(*n->items));
		for (i = 0; i < s->nitems; i++)
			n->items[i] = clone_stmt(k, c, s->items[i]);
		n->cap = s->nitems;
	}
	return n;
}

static int64_t count_exprs(const ks_expr_t *e)
{
	return e == NULL ? 0 : 1 + count_exprs(e->a) + count_exprs(e->b) +
	    count_exprs(e->c);
}

/* Adds the statements, expression nodes and declared variables of S. */
static void count(const ks_stmt_t *s, budget_t *b, int64_t *decls)
{
	int i;

	if (s == NULL)
		return;
	b->stmts++;
	b->exprs += count_exprs(s->a) + count_exprs(s->b);
	*decls += s->kind == KS_S_DECL || s->kind == KS_S_FOR;
	count(s->body, b, decls);
	count(s->orelse, b, decls);
	for (i = 0; s->kind == KS_S_BLOCK && i < s->nitems; i++)
		count(s->items[i], b, decls);
}

/* Whether N copies of BODY in place of its loop keep the kernel within
 * the budget; if so, the budget takes them. */
static int fits(budget_t *b, const ks_ir_kernel_t *k, const ks_stmt_t *body,
    int n)
{
	budget_t one = { 0, 0 };
	int64_t decls = 0;

	count(body, &one, &decls);
	if (b->stmts + (n - 1) * one.stmts > KS_IR_MAX_STMTS ||
	    b->exprs + (n - 1) * one.exprs > KS_IR_MAX_EXPRS ||
	    k->nvars + n * decls > KS_IR_MAX_VARS)
		return 0;
	b->stmts += (n - 1) * one.stmts;
	b->exprs += (n - 1) * one.exprs;
	return 1;
}

/* Trip count of a FOR with constant bounds, or -1 when above UNROLL_MAX. */
static int trips(int64_t begin, int64_t end, int64_t step)
{
	int64_t span;

	if (begin >= end)
		return 0;
	if (__builtin_sub_overflow(end, begin, &span) ||
	    span > step * (int64_t)UNROLL_MAX)
		return -1;
	return (int)((span + step - 1) / step);
}

static ks_stmt_t *unroll_stmt(void *ctx, ks_ir_kernel_t *k, ks_stmt_t *s,
    int in_lanes)
{
	budget_t *b = ctx;
	ks_stmt_t *out;
	clone_t c;
	int n, i, j;

	(void)in_lanes;
	if (s->kind == KS_S_BLOCK) {
		ks_ir_splice(k, s);
		return s;
	}
	if (s->kind != KS_S_FOR || s->a->kind != KS_X_CONST ||
	    s->b->kind != KS_X_CONST || s->step > INT64_MAX / UNROLL_MAX)
		return s;
	n = trips(s->a->i, s->b->i, s->step);
	if (n < 2 || !fits(b, k, s->body, n))
		return s;       /* trip1's cases, too long, or too big */
	out = ks_s_block(k);
	c.loop_var = s->var;
	c.nmap = k->nvars;
	c.map = ks_arena_alloc(k->arena, (size_t)(c.nmap > 0 ? c.nmap : 1) *
	    sizeof(*c.map));
	for (i = 0; i < n; i++) {
		for (j = 0; j < c.nmap; j++)
			c.map[j] = -1;
		c.value = s->a->i + (int64_t)i * s->step;
		c.copy = i;
		ks_s_append(k, out, clone_stmt(k, &c, s->body));
	}
	ks_ir_splice(k, out);
	return out;
}

void ks_pass_unroll(ks_ir_kernel_t *k)
{
	budget_t b = { 0, 0 };
	int64_t decls = 0;
	ks_ir_visitor_t v = { &b, NULL, unroll_stmt };

	count(k->body, &b, &decls);
	ks_ir_walk(k, &v);
}
