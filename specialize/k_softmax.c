/*
 * softmax: y[r][j] = exp(x[r][j] - max_j x[r][j]) / sum_j exp(...), for
 * r < R, j < L.
 *
 * x and y are RxL, row-major, in the request dtype.  Parameters, in ABI
 * order: x (read), y (write), R, L (i64).
 *
 * Arithmetic (part of this definition), per row, in f32 from loads that
 * convert exactly: m = canonical max (lane l takes m_l = max(m_l, x_j)
 * over j = l (mod 32) in increasing j from -inf, then the tree 16, 8, 4,
 * 2, 1 with max, which ignores NaN and orders -0 < +0); e_j = exp(x_j - m)
 * (KS_UN_EXP: the backend's exp); s = canonical sum of e_j with plain
 * adds (acc = acc + e_j from 0.0, then the tree); inv = 1.0 / s (IEEE);
 * y_j = e_j * inv, stored once, round-to-nearest-even.
 *
 * exp is not bitwise across backends (docs/backends.md): the cpu backend
 * calls libm expf, so its result is bitwise a plain C reference with
 * expf; OpenCL and CUDA are within a per-kernel bound of it
 * (docs/kernels.md).  On one backend every variant gives the same bits.
 *
 * Schedule (k_norm.h): one work-group per row, three passes (max, exp and
 * sum, scale and store).  `general` (any R, L) loads x in every pass and
 * computes exp twice (in the sum pass and in the store pass: the same
 * function of the same operand, so the same value); `row_local` (L a
 * constant <= 4096) keeps x in the local array `row` during the max pass
 * and replaces it by e_j in the sum pass, so x is read once and exp is
 * computed once per element.  Mode "fast" selects what "exact" selects.
 */
#include "k_norm.h"

#include <math.h>
#include <stdio.h>

static const char *const softmax_dims[] = { "R", "L" };

typedef struct {
	int x, y;               /* parameters */
	int mx, m, acc, inv;    /* lane max, row max, lane sum, 1/sum */
} softmax_t;

/* Pass 1: xv = x[ro + j] (row[j] = xv for row_local); mx = max(mx, xv). */
static void row_max(ks_row_t *r, void *ctx, ks_stmt_t *block, int j,
    const char *sfx)
{
	softmax_t *s = ctx;
	ks_ir_kernel_t *k = r->k;
	char name[16];
	int xv;

	snprintf(name, sizeof name, "xv%s", sfx);
	xv = ks_row_decl(r, block, name, KS_TY_F32, KS_VAR_LANE,
	    ks_x_load(k, s->x, ks_row_at(r, j)));
	if (r->row >= 0)
		ks_s_append(k, block, ks_s_lstore(k, r->row, ks_x_var(k, j),
		    ks_x_var(k, xv)));
	ks_s_append(k, block, ks_s_assign(k, s->mx, ks_x_bin(k, KS_OP_MAX,
	    ks_x_var(k, s->mx), ks_x_var(k, xv))));
}

/* exp(x_j - m), x_j from x or from row. */
static ks_expr_t *exp_of(ks_row_t *r, softmax_t *s, int j)
{
	ks_ir_kernel_t *k = r->k;

	return ks_x_un(k, KS_UN_EXP, ks_x_bin(k, KS_OP_SUB, r->row >= 0 ?
	    ks_x_lload(k, r->row, ks_x_var(k, j)) :
	    ks_x_load(k, s->x, ks_row_at(r, j)), ks_x_var(k, s->m)));
}

/* Pass 2: ev = exp(x_j - m) (row[j] = ev for row_local); acc = acc + ev. */
static void exp_sum(ks_row_t *r, void *ctx, ks_stmt_t *block, int j,
    const char *sfx)
{
	softmax_t *s = ctx;
	ks_ir_kernel_t *k = r->k;
	char name[16];
	int ev;

	snprintf(name, sizeof name, "ev%s", sfx);
	ev = ks_row_decl(r, block, name, KS_TY_F32, KS_VAR_LANE,
	    exp_of(r, s, j));
	if (r->row >= 0)
		ks_s_append(k, block, ks_s_lstore(k, r->row, ks_x_var(k, j),
		    ks_x_var(k, ev)));
	ks_s_append(k, block, ks_s_assign(k, s->acc, ks_x_bin(k, KS_OP_ADD,
	    ks_x_var(k, s->acc), ks_x_var(k, ev))));
}

/* Pass 3: y[ro + j] = e_j * inv, e_j recomputed or from row. */
static void scale(ks_row_t *r, void *ctx, ks_stmt_t *block, int j,
    const char *sfx)
{
	softmax_t *s = ctx;
	ks_ir_kernel_t *k = r->k;

	(void)sfx;
	ks_s_append(k, block, ks_s_store(k, s->y, ks_row_at(r, j),
	    ks_x_bin(k, KS_OP_MUL, r->row >= 0 ?
	    ks_x_lload(k, r->row, ks_x_var(k, j)) : exp_of(r, s, j),
	    ks_x_var(k, s->inv))));
}

static ks_ir_kernel_t *softmax_build(const ks_spec_t *spec,
    const char *variant)
{
	int local = ks_row_is_local(spec, variant);
	softmax_t s;
	ks_row_t r;
	ks_ir_kernel_t *k;
	int R, L, sum;

	if (local < 0)
		return NULL;
	k = ks_ir_new("softmax", variant, KS_ROW_LANES);
	s.x = ks_ir_buffer(k, "x", spec->dtype, KS_ACCESS_READ);
	s.y = ks_ir_buffer(k, "y", spec->dtype, KS_ACCESS_WRITE);
	ks_ir_buffer_dims(k, s.x, "R,L");
	ks_ir_buffer_dims(k, s.y, "R,L");
	R = ks_ir_scalar(k, "R", KS_TY_I64);
	L = ks_ir_scalar(k, "L", KS_TY_I64);
	ks_row_begin(&r, k, R, L, local ?
	    spec->dims[KS_ROW_DIM_H].value : 0);

	s.mx = ks_row_decl(&r, k->body, "mx", KS_TY_F32, KS_VAR_LANE,
	    ks_x_f32(k, -INFINITY));
	ks_row_pass(&r, row_max, &s);
	s.m = ks_row_decl(&r, k->body, "m", KS_TY_F32, KS_VAR_UNIFORM,
	    ks_x_reduce(k, KS_RED_MAX, s.mx));
	if (local)
		ks_s_append(k, k->body, ks_s_barrier(k));

	s.acc = ks_row_decl(&r, k->body, "acc", KS_TY_F32, KS_VAR_LANE,
	    ks_x_f32(k, 0.0f));
	ks_row_pass(&r, exp_sum, &s);
	sum = ks_row_decl(&r, k->body, "s", KS_TY_F32, KS_VAR_UNIFORM,
	    ks_x_reduce(k, KS_RED_SUM, s.acc));
	s.inv = ks_row_decl(&r, k->body, "inv", KS_TY_F32, KS_VAR_UNIFORM,
	    ks_x_bin(k, KS_OP_DIV, ks_x_f32(k, 1.0f), ks_x_var(k, sum)));
	if (local)
		ks_s_append(k, k->body, ks_s_barrier(k));
	ks_row_pass(&r, scale, &s);
	return k;
}

const ks_kernel_def_t ks_kernel_softmax = {
	.name = "softmax",
	.summary = "y[r][j] = exp(x[r][j] - max_j x[r]) / sum_j exp(x[r][j] - "
	    "max_j x[r]); x, y RxL, row-major",
	.version = 1,
	.dims = softmax_dims,
	.ndims = 2,
	.variants = ks_row_variants,
	.nvariants = 2,
	.select = ks_row_select,
	.guards = ks_row_guards_l,
	.check = ks_row_check,
	.build = softmax_build,
	.probes = ks_row_probes,
	.nprobes = KS_ROW_NPROBES,
};
