/*
 * dce: dead code elimination.
 *
 * Requires: a verified kernel.  Gives: a verified kernel with the same
 * stores, bit for bit.
 *
 *   - a DECL or ASSIGN of a variable that nothing reads (no KS_X_VAR and no
 *     KS_X_REDUCE of it anywhere but in its own DECLs and ASSIGNs, as in
 *     acc = acc + x) is deleted: expressions have no side
 *     effects (a load only reads), so dropping its value changes nothing;
 *   - statements left without effect are deleted: a FOR or LANES whose
 *     body is empty, an IF whose blocks are both empty (an empty else
 *     block goes first), an empty nested BLOCK.
 *
 * Stores are never removed.  Deleting an assignment removes the reads in
 * its value, which can make another variable dead, so the two walks
 * (count reads, delete) repeat until nothing changes.  A FOR's own
 * variable is kept with its loop: the loop is removed only when its body
 * is empty.  Dead variables stay in k->vars (indices are stable); the
 * backends declare what they lower.
 */
#include "specialize.h"

#include <string.h>

typedef struct {
	int *reads;             /* per var: number of reads */
	int changed;
} dce_t;

static ks_expr_t *count_expr(void *ctx, ks_ir_kernel_t *k, ks_expr_t *e,
    int in_lanes)
{
	dce_t *d = ctx;

	(void)in_lanes;
	if ((e->kind == KS_X_VAR || e->kind == KS_X_REDUCE) && e->var >= 0 &&
	    e->var < k->nvars)
		d->reads[e->var]++;
	return e;
}

/* Reads of VAR in E (generic over the operand slots). */
static int reads_of(const ks_expr_t *e, int var)
{
	if (e == NULL)
		return 0;
	return ((e->kind == KS_X_VAR || e->kind == KS_X_REDUCE) &&
	    e->var == var) + reads_of(e->a, var) + reads_of(e->b, var) +
	    reads_of(e->c, var);
}

/* A variable's reads in its own DECL or ASSIGN (acc = acc + x) do not
 * keep it alive. */
static ks_stmt_t *count_stmt(void *ctx, ks_ir_kernel_t *k, ks_stmt_t *s,
    int in_lanes)
{
	dce_t *d = ctx;

	(void)in_lanes;
	if ((s->kind == KS_S_DECL || s->kind == KS_S_ASSIGN) && s->var >= 0 &&
	    s->var < k->nvars)
		d->reads[s->var] -= reads_of(s->a, s->var);
	return s;
}

static int empty(const ks_stmt_t *b)
{
	return b == NULL || (b->kind == KS_S_BLOCK && b->nitems == 0);
}

static ks_stmt_t *dce_stmt(void *ctx, ks_ir_kernel_t *k, ks_stmt_t *s,
    int in_lanes)
{
	dce_t *d = ctx;

	(void)in_lanes;
	switch (s->kind) {
	case KS_S_DECL:
	case KS_S_ASSIGN:
		if (s->var >= 0 && s->var < k->nvars && d->reads[s->var] == 0)
			break;
		return s;
	case KS_S_FOR:
	case KS_S_LANES:
		if (empty(s->body))
			break;
		return s;
	case KS_S_IF:
		if (s->orelse != NULL && empty(s->orelse)) {
			s->orelse = NULL;
			d->changed = 1;
		}
		if (empty(s->body) && s->orelse == NULL)
			break;
		return s;
	case KS_S_BLOCK:
		ks_ir_splice(k, s);
		return s;
	default:
		return s;
	}
	d->changed = 1;
	return NULL;
}

void ks_pass_dce(ks_ir_kernel_t *k)
{
	dce_t d = { 0 };
	ks_ir_visitor_t count = { &d, count_expr, count_stmt };
	ks_ir_visitor_t del = { &d, NULL, dce_stmt };

	d.reads = ks_arena_alloc(k->arena, (size_t)(k->nvars > 0 ?
	    k->nvars : 1) * sizeof(*d.reads));
	do {
		memset(d.reads, 0, (size_t)(k->nvars > 0 ? k->nvars : 1) *
		    sizeof(*d.reads));
		d.changed = 0;
		ks_ir_walk(k, &count);
		ks_ir_walk(k, &del);
	} while (d.changed);
}
