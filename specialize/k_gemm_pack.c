/*
 * gemm_pack_x, gemm_pack_w: the lane-major panel layout of a row-major
 * R x K matrix that gemm_packed reads, x in panels of T = 8 rows
 * (gemm_pack_x) and W in panels of T = 32 (gemm_pack_w).
 *
 * With J = ceil(K / 32), out[((t * 32 + l) * J + j) * T + i] = in[(t * T +
 * i) * K + l + 32 j] for row t * T + i < R and column l + 32 j < K, and 0.0
 * elsewhere (the padding of the last panel and of the last column group),
 * for t < ceil(R / T), l < 32, j < J, i < T.  in and out are of the
 * request dtype; an element is loaded, converted exactly to f32 and
 * stored back in the dtype, so it keeps its value (a NaN stays NaN).
 * gemm_pack_w's in may also be W in a block format (wdtype q8_0, q4_0,
 * q4_k with dtype f32, K a constant multiple of the block): each weight
 * is then decoded exactly (k_quant.h) into the f32 panels, which
 * gemm_packed with f32 weights multiplies: gemm's bits on the quantized
 * W.  Parameters, in ABI order: in (read), out (write), R, K (i64).
 *
 * Schedule: a work-group per (panel t, column group j), grid ceil(R / T)
 * * ceil(K / 32): its T x 32 block of the matrix is read row by row (lane
 * = column: 32 consecutive elements) into a local tile, and after a
 * barrier written lane by lane l of the 32 (lane = row i < T: T
 * consecutive elements), so both the reads and the writes are
 * contiguous runs.  The load index is clamped into the matrix and a
 * select picks 0.0 outside it, so no index past the buffer is read.  No
 * arithmetic.  One variant each, `general`.
 */
#include "k_panel.h"
#include "k_quant.h"

#include <stdio.h>
#include <string.h>

enum { LANES32 = 32, T_X = 8, T_W = 32 };

static const char *const pp_dims[] = { "R", "K" };
enum { DIM_R, DIM_K };

static const char *const pp_variants[] = { "general" };
static const char *const pp_guards[] = {
	"any R, K, constant or dynamic",
};

static const char *pp_select(const ks_spec_t *spec)
{
	(void)spec;
	return "general";
}

static int check_x(const ks_spec_t *spec, char *err, size_t errlen)
{
	return ks_panel_check(&spec->dims[DIM_R], &spec->dims[DIM_K], T_X,
	    "out", err, errlen);
}

static int check_w(const ks_spec_t *spec, char *err, size_t errlen)
{
	int rc = ks_quant_check(spec, DIM_K, err, errlen);

	return rc ? rc : ks_panel_check(&spec->dims[DIM_R],
	    &spec->dims[DIM_K], T_W, "out", err, errlen);
}

/* The IR of kernel NAME packing into panels of TV rows. */
static ks_ir_kernel_t *pack_build(const ks_spec_t *spec, const char *variant,
    const char *name, int64_t TV)
{
	ks_ir_kernel_t *k;
	ks_stmt_t *body, *loop, *lanes, *guard, *cur;
	int in, out, R, K, J, t, j, i, l, tile, row, col, ok, v, qr, qc;
	char dims[64];
	ks_quant_t q = { 0 };

#define C(v) ks_x_i64(k, v)
#define P(p) ks_x_param(k, p)
#define V(x) ks_x_var(k, x)
#define B(op, a, b) ks_x_bin(k, KS_OP_##op, a, b)
#define LET(name, sc, ty, e) \
	(v = ks_ir_var(k, name, ty, sc), \
	 ks_s_append(k, cur, ks_s_decl(k, v, e)), v)

	if (strcmp(variant, "general") != 0)
		return NULL;
	k = ks_ir_new(name, variant, LANES32);
	if (ks_dtype_block(spec->wdtype, NULL, NULL)) {
		ks_quant_buffer(&q, k, "in", spec->wdtype, "R", "K");
		in = q.W;
	} else {
		in = ks_ir_buffer(k, "in", spec->dtype, KS_ACCESS_READ);
		ks_ir_buffer_dims(k, in, "R,K");
	}
	out = ks_ir_buffer(k, "out", spec->dtype, KS_ACCESS_WRITE);
	snprintf(dims, sizeof dims, "(R+%lld)/%lld,32,(K+31)/32,%lld",
	    (long long)TV - 1, (long long)TV, (long long)TV);
	ks_ir_buffer_dims(k, out, dims);
	R = ks_ir_scalar(k, "R", KS_TY_I64);
	K = ks_ir_scalar(k, "K", KS_TY_I64);
	tile = ks_ir_local(k, "tile", TV * LANES32);
	body = cur = k->body;
	J = LET("J", KS_VAR_UNIFORM, KS_TY_I64,
	    B(DIV, B(ADD, P(K), C(31)), C(32)));
	k->grid = B(MUL, B(DIV, B(ADD, P(R), C(TV - 1)), C(TV)),
	    B(DIV, B(ADD, P(K), C(31)), C(32)));
	t = LET("t", KS_VAR_UNIFORM, KS_TY_I64, B(DIV, ks_x_group(k), V(J)));
	j = LET("j", KS_VAR_UNIFORM, KS_TY_I64, B(REM, ks_x_group(k), V(J)));

	/* Phase 1: row t*T + i, columns 32 j + lane, into tile[i][lane]. */
	i = ks_ir_var(k, "i", KS_TY_I64, KS_VAR_UNIFORM);
	loop = ks_s_for(k, i, C(0), C(TV), 1);
	ks_s_append(k, body, loop);
	lanes = ks_s_lanes(k);
	ks_s_append(k, loop->body, lanes);
	cur = lanes->body;
	row = LET("row", KS_VAR_LANE, KS_TY_I64,
	    B(ADD, B(MUL, V(t), C(TV)), V(i)));
	col = LET("col", KS_VAR_LANE, KS_TY_I64,
	    B(ADD, B(MUL, C(32), V(j)), ks_x_lane(k)));
	ok = LET("ok", KS_VAR_LANE, KS_TY_BOOL,
	    B(AND, B(LT, V(row), P(R)), B(LT, V(col), P(K))));
	if (q.qk) {
		/* The clamped row's first byte and the clamped column. */
		qr = LET("qrow", KS_VAR_LANE, KS_TY_I64, B(MUL, B(MIN, V(row),
		    B(SUB, P(R), C(1))), ks_quant_row_bytes(&q, P(K))));
		qc = LET("qcol", KS_VAR_LANE, KS_TY_I64, B(MIN, V(col),
		    B(SUB, P(K), C(1))));
		ks_s_append(k, cur, ks_s_lstore(k, tile,
		    B(ADD, B(MUL, V(i), C(LANES32)), ks_x_lane(k)),
		    ks_x_select(k, V(ok), ks_quant_value(&q, qr, qc),
		    ks_x_f32(k, 0.0f))));
	} else {
		ks_s_append(k, cur, ks_s_lstore(k, tile,
		    B(ADD, B(MUL, V(i), C(LANES32)), ks_x_lane(k)),
		    ks_x_select(k, V(ok), ks_x_load(k, in, B(ADD, B(MUL,
		    B(MIN, V(row), B(SUB, P(R), C(1))), P(K)),
		    B(MIN, V(col), B(SUB, P(K), C(1))))),
		    ks_x_f32(k, 0.0f))));
	}
	ks_s_append(k, body, ks_s_barrier(k));

	/* Phase 2: per lane l of the 32, lane i < T writes tile[i][l] to
	 * its place: T consecutive elements. */
	l = ks_ir_var(k, "l", KS_TY_I64, KS_VAR_UNIFORM);
	loop = ks_s_for(k, l, C(0), C(LANES32), 1);
	ks_s_append(k, body, loop);
	lanes = ks_s_lanes(k);
	ks_s_append(k, loop->body, lanes);
	guard = ks_s_if(k, B(LT, ks_x_lane(k), C(TV)));
	ks_s_append(k, lanes->body, guard);
	ks_s_append(k, guard->body, ks_s_store(k, out,
	    B(ADD, B(MUL, B(ADD, B(MUL, B(ADD, B(MUL, V(t), C(LANES32)),
	    V(l)), V(J)), V(j)), C(TV)), ks_x_lane(k)),
	    ks_x_lload(k, tile, B(ADD, B(MUL, ks_x_lane(k), C(LANES32)),
	    V(l)))));
#undef C
#undef P
#undef V
#undef B
#undef LET
	return k;
}

static ks_ir_kernel_t *build_x(const ks_spec_t *spec, const char *variant)
{
	return pack_build(spec, variant, "gemm_pack_x", T_X);
}

static ks_ir_kernel_t *build_w(const ks_spec_t *spec, const char *variant)
{
	return pack_build(spec, variant, "gemm_pack_w", T_W);
}

const ks_kernel_def_t ks_kernel_gemm_pack_x = {
	.name = "gemm_pack_x",
	.summary = "gemm_packed's x: an RxK matrix in panels of 8 rows, "
	    "lane-major",
	.version = 1,
	.dims = pp_dims,
	.ndims = 2,
	.variants = pp_variants,
	.nvariants = 1,
	.select = pp_select,
	.guards = pp_guards,
	.check = check_x,
	.build = build_x,
};

const ks_kernel_def_t ks_kernel_gemm_pack_w = {
	.name = "gemm_pack_w",
	.summary = "gemm_packed's W: an RxK matrix in panels of 32 rows, "
	    "lane-major",
	.version = 2,           /* 2: from the block formats */
	.dims = pp_dims,
	.ndims = 2,
	.variants = pp_variants,
	.nvariants = 1,
	.select = pp_select,
	.guards = pp_guards,
	.check = check_w,
	.build = build_w,
	.weights = "in",
	.wblocks = 1,
};
