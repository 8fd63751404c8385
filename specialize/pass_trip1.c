/*
 * trip1: loops of constant trip count 0 or 1 vanish.
 *
 * Requires: a verified, folded kernel (bounds that can be constant are).
 * Gives: a FOR whose bounds are constants and that runs 0 times is
 * deleted; one that runs once is replaced by its body, spliced into the
 * enclosing block, with every use of the loop variable replaced by the
 * begin constant.  The loop variable is declared by the FOR, so it has no
 * use outside the body and no DECL to remove; it stays in k->vars unused.
 * Run ks_pass_fold afterwards: the substituted constants fold further.
 *
 * Two walks: the first rewrites the loops and records the variables to
 * replace, the second replaces their uses (the body was walked before its
 * FOR, post-order, so uses cannot be replaced in the same walk).
 */
#include "specialize.h"

#include <stdlib.h>

typedef struct {
	ks_expr_t **subst;      /* per var: constant replacing it, or NULL */
	int any;
} trip1_t;

/* 0, 1, or 2 meaning "more than one"; bounds are constants. */
static int trip_count(int64_t begin, int64_t end, int64_t step)
{
	int64_t span;

	if (begin >= end)
		return 0;
	if (__builtin_sub_overflow(end, begin, &span))
		return 2;       /* span > INT64_MAX >= step */
	return span <= step ? 1 : 2;
}

static ks_stmt_t *trip1_stmt(void *ctx, ks_ir_kernel_t *k, ks_stmt_t *s,
    int in_lanes)
{
	trip1_t *t = ctx;

	(void)in_lanes;
	if (s->kind == KS_S_BLOCK) {
		ks_ir_splice(k, s);
		return s;
	}
	if (s->kind != KS_S_FOR || s->a->kind != KS_X_CONST ||
	    s->b->kind != KS_X_CONST)
		return s;
	switch (trip_count(s->a->i, s->b->i, s->step)) {
	case 0:
		return NULL;
	case 1:
		t->subst[s->var] = s->a;
		t->any = 1;
		return s->body;
	default:
		return s;
	}
}

static ks_expr_t *subst_expr(void *ctx, ks_ir_kernel_t *k, ks_expr_t *e,
    int in_lanes)
{
	trip1_t *t = ctx;

	(void)in_lanes;
	if (e->kind == KS_X_VAR && t->subst[e->var] != NULL)
		return ks_x_i64(k, t->subst[e->var]->i);
	return e;
}

void ks_pass_trip1(ks_ir_kernel_t *k)
{
	trip1_t t = { 0 };
	ks_ir_visitor_t loops = { &t, NULL, trip1_stmt };
	ks_ir_visitor_t uses = { &t, subst_expr, NULL };

	if (k->nvars == 0)
		return;
	t.subst = ks_arena_alloc(k->arena, (size_t)k->nvars *
	    sizeof(*t.subst));
	ks_ir_walk(k, &loops);
	if (t.any)
		ks_ir_walk(k, &uses);
}
