/*
 * The row machinery of the row kernels (rmsnorm, add_rmsnorm, softmax):
 * selection, size check, probes and the canonical pass over a row.  See
 * k_norm.h for the contract.
 */
#include "k_norm.h"

#include <stdio.h>
#include <string.h>

const char *const ks_row_variants[2] = { "general", "row_local" };
const char *const ks_row_guards_h[2] = {
	"any R, H, constant or dynamic",
	"H is a constant <= 4096 and the dtype is f16 or bf16",
};
const char *const ks_row_guards_l[2] = {
	"any R, L, constant or dynamic",
	"L is a constant <= 4096",
};

/* Beyond the common probes (every dim at one value): R dynamic with the
 * row length at the guard's edge and just past it, as servers ask. */
const int64_t ks_row_probes[KS_ROW_NPROBES][KS_MAX_DIMS] = {
	{ 0, KS_IR_LOCAL_MAX },
	{ 0, KS_IR_LOCAL_MAX + 1 },
	{ 0, 1 },
};

static int is_local_len(const ks_dim_t *h)
{
	return h->is_const && h->value >= 1 && h->value <= KS_IR_LOCAL_MAX;
}

const char *ks_row_select(const ks_spec_t *spec)
{
	return is_local_len(&spec->dims[KS_ROW_DIM_H]) ? "row_local" :
	    "general";
}

/* rmsnorm, add_rmsnorm: an f32 row needs no conversion, so the local copy
 * only adds stores and loads; measured 0.86-0.90x of general at R=512,
 * H=4096 f32, 1.04-1.10x in bf16 (docs/benchmarks.md). */
const char *ks_row_select_half(const ks_spec_t *spec)
{
	return spec->dtype == KS_DTYPE_F32 ? "general" : ks_row_select(spec);
}

int ks_row_is_local(const ks_spec_t *spec, const char *variant)
{
	if (strcmp(variant, "general") == 0)
		return 0;
	if (strcmp(variant, "row_local") == 0 &&
	    is_local_len(&spec->dims[KS_ROW_DIM_H]))
		return 1;
	return -1;
}

int ks_row_check(const ks_spec_t *spec, char *err, size_t errlen)
{
	const ks_dim_t *r = &spec->dims[KS_ROW_DIM_R];
	const ks_dim_t *h = &spec->dims[KS_ROW_DIM_H];
	int64_t n;

	if (!r->is_const || !h->is_const)
		return KS_OK;
	if (!ks_mul_overflow(r->value, h->value, &n) && n <= KS_MAX_ELEMS)
		return KS_OK;
	if (err != NULL && errlen > 0)
		snprintf(err, errlen, "buffer x of %s*%s = %lld*%lld elements "
		    "exceeds the limit of %lld", r->name, h->name,
		    (long long)r->value, (long long)h->value,
		    (long long)KS_MAX_ELEMS);
	return KS_E_TOO_LARGE;
}

/* ---- building ---- */

static ks_expr_t *par(ks_row_t *r, int p)
{
	return ks_x_param(r->k, p);
}

static ks_expr_t *bin(ks_row_t *r, ks_binop_t op, ks_expr_t *a,
    ks_expr_t *b)
{
	return ks_x_bin(r->k, op, a, b);
}

/* H - H % 32: the end of the full chunks.  A fresh tree per use. */
static ks_expr_t *h_main(ks_row_t *r)
{
	return bin(r, KS_OP_SUB, par(r, r->H), bin(r, KS_OP_REM, par(r, r->H),
	    ks_x_i64(r->k, KS_ROW_LANES)));
}

int ks_row_decl(ks_row_t *r, ks_stmt_t *block, const char *name, ks_ty_t t,
    ks_var_scope_t scope, ks_expr_t *init)
{
	int v = ks_ir_var(r->k, name, t, scope);

	ks_s_append(r->k, block, ks_s_decl(r->k, v, init));
	return v;
}

ks_expr_t *ks_row_at(ks_row_t *r, int j)
{
	return bin(r, KS_OP_ADD, ks_x_var(r->k, r->ro), ks_x_var(r->k, j));
}

void ks_row_begin(ks_row_t *r, ks_ir_kernel_t *k, int R, int H,
    int64_t local_n)
{
	memset(r, 0, sizeof(*r));
	r->k = k;
	r->R = R;
	r->H = H;
	k->grid = par(r, R);
	r->ro = ks_row_decl(r, k->body, "ro", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(r, KS_OP_MUL, ks_x_group(k), par(r, H)));
	r->row = local_n > 0 ? ks_ir_local(k, "row", local_n) : -1;
}

/*
 * for c<p> = 0 to H - H % 32 step 32 { lanes { decl j<p> = c<p> + lane;
 * FN } }; if (H % 32 != 0) { lanes { decl jt<p> = H - H % 32 + lane; if
 * (jt<p> < H) { FN } } }.  With a constant H the tail folds away for a
 * multiple of 32 and the loop for H < 32.
 */
void ks_row_pass(ks_row_t *r, ks_row_elem_fn fn, void *ctx)
{
	ks_ir_kernel_t *k = r->k;
	ks_stmt_t *loop, *lanes, *tail, *guard;
	char name[16], sfx[8];
	int c, j, jt;

	snprintf(sfx, sizeof sfx, "%c", 'a' + r->nphases);
	snprintf(name, sizeof name, "c%s", sfx);
	c = ks_ir_var(k, name, KS_TY_I64, KS_VAR_UNIFORM);
	loop = ks_s_for(k, c, ks_x_i64(k, 0), h_main(r), KS_ROW_LANES);
	ks_s_append(k, k->body, loop);
	lanes = ks_s_lanes(k);
	ks_s_append(k, loop->body, lanes);
	snprintf(name, sizeof name, "j%s", sfx);
	j = ks_row_decl(r, lanes->body, name, KS_TY_I64, KS_VAR_LANE,
	    bin(r, KS_OP_ADD, ks_x_var(k, c), ks_x_lane(k)));
	fn(r, ctx, lanes->body, j, sfx);

	tail = ks_s_if(k, bin(r, KS_OP_NE, bin(r, KS_OP_REM, par(r, r->H),
	    ks_x_i64(k, KS_ROW_LANES)), ks_x_i64(k, 0)));
	ks_s_append(k, k->body, tail);
	lanes = ks_s_lanes(k);
	ks_s_append(k, tail->body, lanes);
	snprintf(name, sizeof name, "jt%s", sfx);
	jt = ks_row_decl(r, lanes->body, name, KS_TY_I64, KS_VAR_LANE,
	    bin(r, KS_OP_ADD, h_main(r), ks_x_lane(k)));
	guard = ks_s_if(k, bin(r, KS_OP_LT, ks_x_var(k, jt), par(r, r->H)));
	ks_s_append(k, lanes->body, guard);
	snprintf(sfx, sizeof sfx, "%ct", 'a' + r->nphases);
	fn(r, ctx, guard->body, jt, sfx);
	r->nphases++;
}

/* ---- rmsnorm's arithmetic, shared with add_rmsnorm ---- */

int ks_row_rms_inv(ks_row_t *r, int acc, int eps)
{
	ks_ir_kernel_t *k = r->k;
	int ss, mean;

	ss = ks_row_decl(r, k->body, "ss", KS_TY_F32, KS_VAR_UNIFORM,
	    ks_x_reduce(k, KS_RED_SUM, acc));
	mean = ks_row_decl(r, k->body, "mean", KS_TY_F32, KS_VAR_UNIFORM,
	    bin(r, KS_OP_DIV, ks_x_var(k, ss), ks_x_cast(k, KS_TY_F32,
	    par(r, r->H))));
	return ks_row_decl(r, k->body, "inv", KS_TY_F32, KS_VAR_UNIFORM,
	    bin(r, KS_OP_DIV, ks_x_f32(k, 1.0f), ks_x_un(k, KS_UN_SQRT,
	    bin(r, KS_OP_ADD, ks_x_var(k, mean), par(r, eps)))));
}

void ks_row_rms_store(ks_row_t *r, ks_stmt_t *block, int j, ks_expr_t *v,
    int inv, int w, int y)
{
	ks_ir_kernel_t *k = r->k;

	ks_s_append(k, block, ks_s_store(k, y, ks_row_at(r, j),
	    bin(r, KS_OP_MUL, bin(r, KS_OP_MUL, v, ks_x_var(k, inv)),
	    ks_x_load(k, w, ks_x_var(k, j)))));
}
