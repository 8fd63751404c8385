/*
 * bind: a scalar parameter becomes a constant.
 *
 * Requires: PARAM is an unbound i64 scalar.  Gives: no KS_X_PARAM of it is
 * left (grid included); the parameter stays in k->params with bound = 1 and
 * its value, so printers and the reply can still name it, but it is no
 * longer an argument of the entry.  Run ks_pass_fold afterwards to fold the
 * constants it creates.
 */
#include "specialize.h"

#include <assert.h>

typedef struct {
	int param;
	int64_t value;
} bind_t;

static ks_expr_t *bind_expr(void *ctx, ks_ir_kernel_t *k, ks_expr_t *e,
    int in_lanes)
{
	const bind_t *b = ctx;

	(void)in_lanes;
	if (e->kind == KS_X_PARAM && e->param == b->param)
		return ks_x_i64(k, b->value);
	return e;
}

void ks_pass_bind(ks_ir_kernel_t *k, int param, int64_t value)
{
	bind_t b = { param, value };
	ks_ir_visitor_t v = { &b, bind_expr, NULL };

	assert(param >= 0 && param < k->nparams);
	assert(k->params[param].kind == KS_PARAM_SCALAR);
	assert(k->params[param].type == KS_TY_I64);
	assert(!k->params[param].bound);
	ks_ir_walk(k, &v);
	k->params[param].bound = 1;
	k->params[param].value = value;
}
