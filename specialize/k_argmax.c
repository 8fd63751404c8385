/*
 * argmax: idx[r] = the lowest j with x[r][j] == max of the row's non-NaN
 * values, for r < R, j < N; -1 for a row with no non-NaN value.
 *
 * x is R x N, row-major, in the request dtype; idx is R int32.
 * Parameters, in ABI order: x (read), idx (i32, write), R, N (i64).
 *
 * Definition (docs/kernels.md): NaN is ignored; values compare as
 * numbers, so -0 and +0 tie and the lower index wins; -inf is a value (a
 * row of -inf gives 0).  No arithmetic: the result depends on no order,
 * so the lanes and the tree below give the definition's index exactly.
 *
 * Canonical order (the schedule, k_norm.h's row machinery): one work-group
 * of 32 lanes per row, grid R.  Lane l takes j = l (mod 32) in increasing
 * j and keeps (m_l, i_l), from (-inf, N): it takes (x_j, j) when x_j > m_l,
 * or x_j == m_l with i_l still N (the first -inf), so i_l is the lane's
 * lowest index of its maximum and a NaN never enters.  Then m = the tree
 * max of the m_l, and idx = the lowest i_l of the lanes with m_l == m,
 * as the tree max of -i_l (i64; N for none, stored as -1).
 *
 * One variant, `general`: binding N is the fixed-width specialization
 * (with N a multiple of 32 the tail folds away, with N <= 256 the chunk
 * loop unrolls), so no separate builder.  A split of one long row over
 * several work-groups (R = 1 at decode) needs a second launch to combine
 * the partials: not done.
 */
#include "k_norm.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const argmax_dims[] = { "R", "N" };
static const char *const argmax_variants[] = { "general" };
static const char *const argmax_guards[] = {
	"any R, N, constant or dynamic",
};

/* Beyond the common probes: decode over a vocabulary, rows dynamic. */
static const int64_t argmax_probes[][KS_MAX_DIMS] = {
	{ 1, 128256 },
	{ 0, 32000 },
};

static const char *argmax_select(const ks_spec_t *spec)
{
	(void)spec;
	return "general";
}

typedef struct {
	int x, m, i;            /* buffer; lane max and its index */
} argmax_t;

/* x_j > m_l || (x_j == m_l && i_l == N): a fresh tree per use. */
static ks_expr_t *takes(ks_row_t *r, const argmax_t *a, int xv)
{
	ks_ir_kernel_t *k = r->k;

	return ks_x_bin(k, KS_OP_OR,
	    ks_x_bin(k, KS_OP_LT, ks_x_var(k, a->m), ks_x_var(k, xv)),
	    ks_x_bin(k, KS_OP_AND,
	    ks_x_bin(k, KS_OP_EQ, ks_x_var(k, a->m), ks_x_var(k, xv)),
	    ks_x_bin(k, KS_OP_EQ, ks_x_var(k, a->i), ks_x_param(k, r->H))));
}

/* i_l, m_l := (j, x_j) where takes(); i_l first, as it reads m_l. */
static void take(ks_row_t *r, void *ctx, ks_stmt_t *block, int j,
    const char *sfx)
{
	argmax_t *a = ctx;
	ks_ir_kernel_t *k = r->k;
	char name[16];
	int xv;

	snprintf(name, sizeof name, "xv%s", sfx);
	xv = ks_row_decl(r, block, name, KS_TY_F32, KS_VAR_LANE,
	    ks_x_load(k, a->x, ks_row_at(r, j)));
	ks_s_append(k, block, ks_s_assign(k, a->i, ks_x_select(k,
	    takes(r, a, xv), ks_x_var(k, j), ks_x_var(k, a->i))));
	ks_s_append(k, block, ks_s_assign(k, a->m, ks_x_select(k,
	    ks_x_bin(k, KS_OP_EQ, ks_x_var(k, a->i), ks_x_var(k, j)),
	    ks_x_var(k, xv), ks_x_var(k, a->m))));
}

static ks_ir_kernel_t *argmax_build(const ks_spec_t *spec,
    const char *variant)
{
	ks_ir_kernel_t *k;
	ks_stmt_t *lanes;
	argmax_t a;
	ks_row_t r;
	int idx, R, N, m, neg, best;

	if (strcmp(variant, "general") != 0)
		return NULL;
	k = ks_ir_new("argmax", variant, KS_ROW_LANES);
	a.x = ks_ir_buffer(k, "x", spec->dtype, KS_ACCESS_READ);
	idx = ks_ir_buffer_i32(k, "idx", KS_ACCESS_WRITE);
	R = ks_ir_scalar(k, "R", KS_TY_I64);
	N = ks_ir_scalar(k, "N", KS_TY_I64);
	ks_ir_buffer_dims(k, a.x, "R,N");
	ks_ir_buffer_dims(k, idx, "R");
	ks_row_begin(&r, k, R, N, 0);

	a.m = ks_row_decl(&r, k->body, "ml", KS_TY_F32, KS_VAR_LANE,
	    ks_x_f32(k, -INFINITY));
	a.i = ks_row_decl(&r, k->body, "il", KS_TY_I64, KS_VAR_LANE,
	    ks_x_param(k, N));
	ks_row_pass(&r, take, &a);
	m = ks_row_decl(&r, k->body, "m", KS_TY_F32, KS_VAR_UNIFORM,
	    ks_x_reduce(k, KS_RED_MAX, a.m));
	neg = ks_row_decl(&r, k->body, "ni", KS_TY_I64, KS_VAR_LANE, NULL);
	lanes = ks_s_lanes(k);
	ks_s_append(k, k->body, lanes);
	ks_s_append(k, lanes->body, ks_s_assign(k, neg, ks_x_select(k,
	    ks_x_bin(k, KS_OP_EQ, ks_x_var(k, a.m), ks_x_var(k, m)),
	    ks_x_un(k, KS_UN_NEG, ks_x_var(k, a.i)),
	    ks_x_un(k, KS_UN_NEG, ks_x_param(k, N)))));
	best = ks_row_decl(&r, k->body, "best", KS_TY_I64, KS_VAR_UNIFORM,
	    ks_x_un(k, KS_UN_NEG, ks_x_reduce(k, KS_RED_MAX, neg)));
	ks_s_append(k, k->body, ks_s_store(k, idx, ks_x_group(k),
	    ks_x_cast(k, KS_TY_I32, ks_x_select(k, ks_x_bin(k, KS_OP_EQ,
	    ks_x_var(k, best), ks_x_param(k, N)), ks_x_i64(k, -1),
	    ks_x_var(k, best)))));
	return k;
}

const ks_kernel_def_t ks_kernel_argmax = {
	.name = "argmax",
	.summary = "idx[r] = lowest j with x[r][j] == max of the row (NaN "
	    "ignored, -1 if all NaN); x RxN, idx R int32",
	.version = 1,
	.dims = argmax_dims,
	.ndims = 2,
	.variants = argmax_variants,
	.nvariants = 1,
	.select = argmax_select,
	.guards = argmax_guards,
	.check = ks_row_check,
	.build = argmax_build,
	.probes = argmax_probes,
	.nprobes = (int)(sizeof argmax_probes / sizeof argmax_probes[0]),
};
