/*
 * walk: the one structural walker of the IR.
 *
 * Every pass, the verifier and the binder reach the nodes of a kernel only
 * through walk_stmt/walk_expr below, so a new node kind or a new child slot
 * is handled here once and nested blocks are never forgotten.
 *
 * Order (part of the contract, the verifier relies on it):
 *   1. the grid expression, with in_lanes = 0;
 *   2. the body, statement by statement.  For each statement: its own
 *      expressions (a, then b), each post-order; then `enter`; then its
 *      child blocks (body, then orelse); then the `stmt` callback.
 *
 * Expressions are generic over their operand slots (a, b, c): a kind that
 * does not use a slot leaves it NULL, so no switch on the kind is needed.
 * Expressions are trees: a node reached twice would be rewritten twice.
 *
 * A child block (body, orelse) stays a BLOCK whatever the callback returns:
 * NULL becomes an empty block (a NULL orelse stays NULL), another statement
 * is wrapped in a new block.  The kernel body likewise.
 */
#include "specialize.h"

#include <stddef.h>

typedef struct {
	ks_ir_kernel_t *k;
	const ks_ir_visitor_t *v;
	ks_ir_enter_fn enter;
} walker_t;

static ks_expr_t *walk_expr(walker_t *w, ks_expr_t *e, int in_lanes)
{
	if (e == NULL)
		return NULL;
	/* Most operands are leaves, whose three slots are NULL: tested
	 * here, not by a call each (every pass and the verifier walk). */
	if (e->a != NULL)
		e->a = walk_expr(w, e->a, in_lanes);
	if (e->b != NULL)
		e->b = walk_expr(w, e->b, in_lanes);
	if (e->c != NULL)
		e->c = walk_expr(w, e->c, in_lanes);
	if (w->v != NULL && w->v->expr != NULL)
		e = w->v->expr(w->v->ctx, w->k, e, in_lanes);
	return e;
}

static ks_stmt_t *walk_stmt(walker_t *w, ks_stmt_t *s, int in_lanes);

/* Walks a child block slot and keeps it a BLOCK. */
static ks_stmt_t *walk_block(walker_t *w, ks_stmt_t *b, int in_lanes)
{
	ks_stmt_t *r = walk_stmt(w, b, in_lanes);
	ks_stmt_t *nb;

	if (r != NULL && r->kind == KS_S_BLOCK)
		return r;
	nb = ks_s_block(w->k);
	if (r != NULL)
		ks_s_append(w->k, nb, r);
	return nb;
}

static ks_stmt_t *walk_stmt(walker_t *w, ks_stmt_t *s, int in_lanes)
{
	int inner = in_lanes || s->kind == KS_S_LANES;
	int i, n;

	s->a = walk_expr(w, s->a, in_lanes);
	s->b = walk_expr(w, s->b, in_lanes);
	if (w->enter != NULL)
		w->enter(w->v != NULL ? w->v->ctx : NULL, w->k, s, in_lanes);
	if (s->kind == KS_S_BLOCK) {
		for (i = 0, n = 0; i < s->nitems; i++) {
			ks_stmt_t *r = walk_stmt(w, s->items[i], in_lanes);

			if (r != NULL)
				s->items[n++] = r;
		}
		s->nitems = n;
	}
	if (s->body != NULL)
		s->body = walk_block(w, s->body, inner);
	if (s->orelse != NULL)
		s->orelse = walk_block(w, s->orelse, inner);
	if (w->v != NULL && w->v->stmt != NULL)
		s = w->v->stmt(w->v->ctx, w->k, s, in_lanes);
	return s;
}

void ks_ir_walk_enter(ks_ir_kernel_t *k, const ks_ir_visitor_t *v,
    ks_ir_enter_fn enter)
{
	walker_t w = { k, v, enter };

	k->grid = walk_expr(&w, k->grid, 0);
	k->body = walk_block(&w, k->body, 0);
}

void ks_ir_walk(ks_ir_kernel_t *k, const ks_ir_visitor_t *v)
{
	ks_ir_walk_enter(k, v, NULL);
}

void ks_ir_splice(ks_ir_kernel_t *k, ks_stmt_t *block)
{
	ks_stmt_t **items;
	int i, j, n = 0, any = 0;

	for (i = 0; i < block->nitems; i++) {
		if (block->items[i]->kind == KS_S_BLOCK) {
			n += block->items[i]->nitems;
			any = 1;
		} else {
			n++;
		}
	}
	if (!any)
		return;
	items = ks_arena_alloc(k->arena, (size_t)(n > 0 ? n : 1) *
	    sizeof(*items));
	for (i = 0, n = 0; i < block->nitems; i++) {
		ks_stmt_t *s = block->items[i];

		if (s->kind != KS_S_BLOCK) {
			items[n++] = s;
			continue;
		}
		for (j = 0; j < s->nitems; j++)
			items[n++] = s->items[j];
	}
	block->items = items;
	block->nitems = n;
	block->cap = n;
}
