/*
 * rmsnorm: y[r][j] = x[r][j] / sqrt(mean_j(x[r][j]^2) + eps) * w[j], for
 * r < R, j < H.
 *
 * x and y are RxH, w has H elements, row-major, all in the request dtype,
 * except w when the request names a weight dtype (wdtype f16 or bf16 with
 * dtype f32: an f32 residual stream with narrow weights); w's loads convert
 * exactly, so the arithmetic below is unchanged.
 * Parameters, in ABI order: x (read), w (read), y (write), R, H (i64), eps
 * (f32).
 *
 * Arithmetic (part of this definition), per row, in f32 from loads that
 * convert exactly: ss = canonical sum of fma(x_j, x_j, acc) (docs/kernels.md:
 * lane l accumulates j = l (mod 32) in increasing j from 0.0,
 * then the tree 16, 8, 4, 2, 1); mean = ss / f32(H) (H converted to
 * nearest even, IEEE division); inv = 1.0 / sqrt(mean + eps) (correctly
 * rounded square root and division); y_j = (x_j * inv) * w_j, two
 * multiplies in that order, no fma; each y_j stored once, converted to the
 * dtype round-to-nearest-even.
 *
 * Schedule (k_norm.h): one work-group of 32 lanes per row, grid R; two passes
 * over the row (sum of squares, then scale and store), each in full chunks of
 * 32 and a guarded tail chunk.  Variants: `general` (any R, H) loads x in both
 * passes; `row_local` (H a constant <= 4096, f16 or bf16) keeps x in the local
 * array `row` after the first pass, so x is read once.  Same arithmetic, so the
 * same bits.  No non-exact variant: mode "fast" selects what "exact" selects.
 *
 * add_rmsnorm, built by the same code: the residual add fused with rmsnorm.
 * For r < R, j < H: res[r][j] := x[r][j] + res[r][j] (stored in the dtype),
 * then y[r] := rmsnorm(res[r], w, eps) of the stored values.
 *
 * x, res and y are RxH, w has H elements, row-major, all in the request dtype
 * (w in the weight dtype, as rmsnorm's: res, the residual stream, stays f32).
 * Parameters, in ABI order: x (read), res (read and write), w (read), y
 * (write), R, H (i64), eps (f32).
 *
 * Arithmetic (part of this definition): h_j = x_j + res_j in f32 from exact
 * loads, stored into res[r][j] once, round-to-nearest-even; then res_j is
 * loaded back (so rmsnorm sees the rounded h) and exactly rmsnorm's arithmetic
 * follows: ss = canonical sum of fma(h_j, h_j, acc), mean = ss / f32(H), inv =
 * 1.0 / sqrt(mean + eps), y_j = (h_j * inv) * w_j.  Therefore add_rmsnorm(x,
 * res) gives, bit for bit, `res := round(x + res); y := rmsnorm(res)`.
 *
 * add_rmsnorm's schedule: one work-group per row, two passes; every pass gives
 * element j to lane j % 32, so a lane reads back only the res elements it
 * stored itself, in program order, and no barrier is needed between the store
 * and the load.  `general` reads res back in both passes; `row_local` (H a
 * constant <= 4096, f16 or bf16) keeps the rounded h in the local array `row`,
 * so the second pass reads no global input but w. Same arithmetic, so the same
 * bits.  Mode "fast" selects what "exact" selects.
 */
#include "k_norm.h"

#include <stdio.h>

static const char *const rms_dims[] = { "R", "H" };

typedef struct {
	int x, res, w, y, eps;  /* parameters (res: add_rmsnorm only, else
	                           -1) */
	int acc, inv;           /* lane sum of squares, uniform 1/rms */
} rms_t;

/*
 * Pass 1.  rmsnorm: xv = x[ro + j]; add_rmsnorm: res[ro + j] = x[ro + j] +
 * res[ro + j], then hv = res[ro + j], read back rounded.  Then row[j] =
 * the value for row_local, and acc = fma(v, v, acc).
 */
static void sum_squares(ks_row_t *r, void *ctx, ks_stmt_t *block, int j,
    const char *sfx)
{
	rms_t *n = ctx;
	ks_ir_kernel_t *k = r->k;
	int src = n->x, v;
	char name[16];

	if (n->res >= 0) {
		ks_s_append(k, block, ks_s_store(k, n->res, ks_row_at(r, j),
		    ks_x_bin(k, KS_OP_ADD, ks_x_load(k, n->x,
		    ks_row_at(r, j)), ks_x_load(k, n->res,
		    ks_row_at(r, j)))));
		src = n->res;
	}
	snprintf(name, sizeof name, "%s%s", n->res >= 0 ? "hv" : "xv", sfx);
	v = ks_row_decl(r, block, name, KS_TY_F32, KS_VAR_LANE,
	    ks_x_load(k, src, ks_row_at(r, j)));
	if (r->row >= 0)
		ks_s_append(k, block, ks_s_lstore(k, r->row, ks_x_var(k, j),
		    ks_x_var(k, v)));
	ks_s_append(k, block, ks_s_assign(k, n->acc, ks_x_fma(k,
	    ks_x_var(k, v), ks_x_var(k, v), ks_x_var(k, n->acc))));
}

/* Pass 2: y[ro + j] = (v_j * inv) * w[j], v_j from x (res for
 * add_rmsnorm) or from row. */
static void scale(ks_row_t *r, void *ctx, ks_stmt_t *block, int j,
    const char *sfx)
{
	rms_t *n = ctx;
	ks_ir_kernel_t *k = r->k;

	(void)sfx;
	ks_row_rms_store(r, block, j, r->row >= 0 ?
	    ks_x_lload(k, r->row, ks_x_var(k, j)) :
	    ks_x_load(k, n->res >= 0 ? n->res : n->x, ks_row_at(r, j)),
	    n->inv, n->w, n->y);
}

static ks_ir_kernel_t *build(const ks_spec_t *spec, const char *variant,
    const char *name, int add)
{
	int local = ks_row_is_local(spec, variant);
	rms_t n;
	ks_row_t r;
	ks_ir_kernel_t *k;
	int R, H;

	if (local < 0)
		return NULL;
	k = ks_ir_new(name, variant, KS_ROW_LANES);
	n.x = ks_ir_buffer(k, "x", spec->dtype, KS_ACCESS_READ);
	n.res = add ? ks_ir_buffer(k, "res", spec->dtype,
	    KS_ACCESS_READ | KS_ACCESS_WRITE) : -1;
	n.w = ks_ir_buffer(k, "w", spec->wdtype, KS_ACCESS_READ);
	n.y = ks_ir_buffer(k, "y", spec->dtype, KS_ACCESS_WRITE);
	ks_ir_buffer_dims(k, n.x, "R,H");
	if (add)
		ks_ir_buffer_dims(k, n.res, "R,H");
	ks_ir_buffer_dims(k, n.w, "H");
	ks_ir_buffer_dims(k, n.y, "R,H");
	R = ks_ir_scalar(k, "R", KS_TY_I64);
	H = ks_ir_scalar(k, "H", KS_TY_I64);
	n.eps = ks_ir_scalar(k, "eps", KS_TY_F32);
	ks_row_begin(&r, k, R, H, local ?
	    spec->dims[KS_ROW_DIM_H].value : 0);
	n.acc = ks_row_decl(&r, k->body, "acc", KS_TY_F32, KS_VAR_LANE,
	    ks_x_f32(k, 0.0f));
	ks_row_pass(&r, sum_squares, &n);
	n.inv = ks_row_rms_inv(&r, n.acc, n.eps);
	if (local)
		ks_s_append(k, k->body, ks_s_barrier(k));
	ks_row_pass(&r, scale, &n);
	return k;
}

static ks_ir_kernel_t *rmsnorm_build(const ks_spec_t *spec,
    const char *variant)
{
	return build(spec, variant, "rmsnorm", 0);
}

static ks_ir_kernel_t *add_rmsnorm_build(const ks_spec_t *spec,
    const char *variant)
{
	return build(spec, variant, "add_rmsnorm", 1);
}

const ks_kernel_def_t ks_kernel_rmsnorm = {
	.name = "rmsnorm",
	.summary = "y[r][j] = x[r][j] / sqrt(mean_j x[r][j]^2 + eps) * w[j]; "
	    "x, y RxH, w H, row-major",
	.version = 1,
	.dims = rms_dims,
	.ndims = 2,
	.variants = ks_row_variants,
	.nvariants = 2,
	.select = ks_row_select_half,
	.guards = ks_row_guards_h,
	.check = ks_row_check,
	.build = rmsnorm_build,
	.probes = ks_row_probes,
	.nprobes = KS_ROW_NPROBES,
	.weights = "w",
	.wmix = KS_WMIX_NARROW,
};

const ks_kernel_def_t ks_kernel_add_rmsnorm = {
	.name = "add_rmsnorm",
	.summary = "res[r][j] += x[r][j] (stored), then y = rmsnorm(res, w, "
	    "eps); x, res, y RxH, w H, row-major",
	.version = 1,
	.dims = rms_dims,
	.ndims = 2,
	.variants = ks_row_variants,
	.nvariants = 2,
	.select = ks_row_select_half,
	.guards = ks_row_guards_h,
	.check = ks_row_check,
	.build = add_rmsnorm_build,
	.probes = ks_row_probes,
	.nprobes = KS_ROW_NPROBES,
	.weights = "w",
	.wmix = KS_WMIX_NARROW,
};
