/*
 * rope: rotary position embedding, half-split, in place.
 *
 * x is T x Hn x D (tokens, heads, head dim), pos is T int32 positions, cs
 * is P x D: row p holds cos in columns [0, D/2) and sin in [D/2, D), in the
 * request dtype, or in f32 whatever the activation dtype when the request
 * names wdtype f32 (the table is rope's weight buffer; docs/kernels.md,
 * "Mixed precision"): its loads convert exactly either way, so the
 * arithmetic below does not change, only the table's precision.
 * Parameters, in ABI order: x (read and write), pos (i32,
 * read), cs (read), T, Hn, D, P (i64).
 *
 * Definition (the arithmetic; docs/kernels.md): for each token t, head h
 * and pair i < D/2, with p = pos[t], c = cs[p][i], s = cs[p][D/2 + i], x0 =
 * x[t][h][i], x1 = x[t][h][D/2 + i]:
 *
 *   y0 = x0 * c - x1 * s       (two f32 multiplies, then the subtraction)
 *   y1 = x1 * c + x0 * s       (two f32 multiplies, then the addition)
 *
 * each stored once in place, converted to the dtype round-to-nearest-even;
 * no fma.  A position outside [0, P) leaves the token's values unchanged
 * and reads no row of cs.  D must be even (check rejects an odd constant
 * D); with a dynamic odd D the pairs are i < floor(D/2), the last column
 * x[t][h][D-1] is left unchanged and cs is read at p*D + [0, 2*floor(D/2)),
 * so nothing outside the buffers is touched.
 *
 * Schedule (changes no arithmetic): one work-group per (t, h) row, grid
 * T * Hn; the row offset into x is group * D, since group = t * Hn + h.
 * Lane l handles the pairs i = l (mod 32): full chunks of 32 pairs (i0 up
 * to D/2 - (D/2) % 32, no guard in LANES), then one guarded tail chunk
 * under `if (D/2) % 32 != 0`.  Each lane loads x0 and x1 before it stores
 * either, and no other lane touches its pair, so in-place is race-free.
 * The position test is a uniform `if` around the whole row.
 *
 * With D bound to a constant the tail folds away when D/2 is a multiple
 * of 32 (D = 64, 128, 256), and the chunk loop (1, 2 or 4 trips) is
 * removed or unrolled by the passes: that IS the head-dim specialization,
 * so there is no separate variant for it.
 *
 * One variant, `general` (any T, Hn, D, P).  One-token decode (T = 1) is
 * served by binding T: a `decode` variant with grid Hn and p = pos[0] was
 * measured at 1.00x of general with T bound (bench/kernels, T=1, Hn=32,
 * D=128, bf16) and dropped.
 */
#include "k_rope.h"

#include <stdio.h>
#include <string.h>

enum { NLANES = KS_ROPE_LANES };

static const char *const rope_dims[] = { "T", "Hn", "D", "P" };
enum { DIM_T, DIM_HN, DIM_D, DIM_P };

static const char *const rope_variants[] = { "general" };
static const char *const rope_guards[] = {
	"any T, Hn, D, P, constant or dynamic",
};

/* Fingerprint probes, dims in declared order (0: dynamic): one-token
 * decode at a model's shape and with the rest dynamic, and the head dim
 * bound. */
static const int64_t rope_probes[][KS_MAX_DIMS] = {
	{ 1, 32, 128, 4096 },
	{ 1, 0, 0, 0 },
	{ 0, 0, 128, 0 },
	{ 8, 8, 96, 2048 },
};

static const char *rope_select(const ks_spec_t *spec)
{
	(void)spec;
	return "general";
}

/* k_rope.h */
int ks_check_buffer(const ks_spec_t *spec, const char *buf,
    const int *idx, int ndim, char *err, size_t errlen)
{
	char dims[64] = "", vals[96] = "";
	int64_t n = 1;
	int i, over = 0;
	size_t dl, vl;

	for (i = 0; i < ndim; i++)
		if (!spec->dims[idx[i]].is_const)
			return KS_OK;
	for (i = 0; i < ndim; i++)
		over |= ks_mul_overflow(n, spec->dims[idx[i]].value, &n);
	if (!over && n <= KS_MAX_ELEMS)
		return KS_OK;
	for (i = 0; i < ndim; i++) {
		dl = strlen(dims);
		vl = strlen(vals);
		snprintf(dims + dl, sizeof dims - dl, "%s%s", i ? "*" : "",
		    spec->dims[idx[i]].name);
		snprintf(vals + vl, sizeof vals - vl, "%s%lld", i ? "*" : "",
		    (long long)spec->dims[idx[i]].value);
	}
	if (err != NULL && errlen > 0)
		snprintf(err, errlen, "buffer %s of %s = %s elements exceeds "
		    "the limit of %lld", buf, dims, vals,
		    (long long)KS_MAX_ELEMS);
	return KS_E_TOO_LARGE;
}

static int rope_check(const ks_spec_t *spec, char *err, size_t errlen)
{
	static const int x_dims[] = { DIM_T, DIM_HN, DIM_D };
	static const int pos_dims[] = { DIM_T };
	static const int cs_dims[] = { DIM_P, DIM_D };
	const ks_dim_t *d = &spec->dims[DIM_D];
	int rc;

	if (d->is_const && d->value % 2 != 0) {
		if (err != NULL && errlen > 0)
			snprintf(err, errlen, "rope: D must be even (got "
			    "%lld): column i is rotated with column i + D/2",
			    (long long)d->value);
		return KS_E_BAD_SHAPE;
	}
	rc = ks_check_buffer(spec, "x", x_dims, 3, err, errlen);
	rc = rc ? rc : ks_check_buffer(spec, "pos", pos_dims, 1, err, errlen);
	return rc ? rc : ks_check_buffer(spec, "cs", cs_dims, 2, err, errlen);
}

/* ---- the row rotation (k_rope.h) ---- */

typedef struct {
	ks_ir_kernel_t *k;
	const ks_rope_row_t *row;
} rope_t;

static ks_expr_t *c64(rope_t *r, int64_t v)
{
	return ks_x_i64(r->k, v);
}

static ks_expr_t *var(rope_t *r, int v)
{
	return ks_x_var(r->k, v);
}

static ks_expr_t *bin(rope_t *r, ks_binop_t op, ks_expr_t *a, ks_expr_t *b)
{
	return ks_x_bin(r->k, op, a, b);
}

/* D / 2, the number of pairs; a fresh tree per use so that it folds once
 * D is bound (a variable would hide the constant from the fold pass). */
static ks_expr_t *half(rope_t *r)
{
	return bin(r, KS_OP_DIV, ks_x_param(r->k, r->row->D), c64(r, 2));
}

/* D/2 - (D/2) % 32: the end of the full chunks. */
static ks_expr_t *half_main(rope_t *r)
{
	return bin(r, KS_OP_SUB, half(r), bin(r, KS_OP_REM, half(r),
	    c64(r, NLANES)));
}

static int decl(rope_t *r, ks_stmt_t *block, const char *name, ks_ty_t t,
    ks_var_scope_t scope, ks_expr_t *init)
{
	int v = ks_ir_var(r->k, name, t, scope);

	ks_s_append(r->k, block, ks_s_decl(r->k, v, init));
	return v;
}

/* OFF + [D/2 +] I, a fresh tree: element I of a row's first or second
 * half. */
static ks_expr_t *at(rope_t *r, int off, int second, int i)
{
	ks_expr_t *o = var(r, off);

	if (second)
		o = bin(r, KS_OP_ADD, o, half(r));
	return bin(r, KS_OP_ADD, o, var(r, i));
}

/*
 * Appends to BLOCK, inside LANES, the rotation of pair I (a lane
 * variable); SFX ("v" main, "t" tail) names the lane variables.  Loads
 * first, then the two stores, in the order of the definition.
 */
static void rotate(rope_t *r, ks_stmt_t *block, char sfx, int i)
{
	const ks_rope_row_t *w = r->row;
	ks_ir_kernel_t *k = r->k;
	char name[8];
	int c, s, x0, x1;

	snprintf(name, sizeof name, "c%c", sfx);
	c = decl(r, block, name, KS_TY_F32, KS_VAR_LANE,
	    ks_x_load(k, w->cs, at(r, w->co, 0, i)));
	snprintf(name, sizeof name, "s%c", sfx);
	s = decl(r, block, name, KS_TY_F32, KS_VAR_LANE,
	    ks_x_load(k, w->cs, at(r, w->co, 1, i)));
	snprintf(name, sizeof name, "x0%c", sfx);
	x0 = decl(r, block, name, KS_TY_F32, KS_VAR_LANE,
	    ks_x_load(k, w->src, at(r, w->so, 0, i)));
	snprintf(name, sizeof name, "x1%c", sfx);
	x1 = decl(r, block, name, KS_TY_F32, KS_VAR_LANE,
	    ks_x_load(k, w->src, at(r, w->so, 1, i)));
	/* y0 = x0 * c - x1 * s */
	ks_s_append(k, block, ks_s_store(k, w->dst, at(r, w->dof, 0, i),
	    bin(r, KS_OP_SUB, bin(r, KS_OP_MUL, var(r, x0), var(r, c)),
	    bin(r, KS_OP_MUL, var(r, x1), var(r, s)))));
	/* y1 = x1 * c + x0 * s */
	ks_s_append(k, block, ks_s_store(k, w->dst, at(r, w->dof, 1, i),
	    bin(r, KS_OP_ADD, bin(r, KS_OP_MUL, var(r, x1), var(r, c)),
	    bin(r, KS_OP_MUL, var(r, x0), var(r, s)))));
}

void ks_rope_row(ks_ir_kernel_t *k, ks_stmt_t *block, const ks_rope_row_t *w)
{
	rope_t r = { k, w };
	ks_stmt_t *loop, *lanes, *tail, *guard;
	int i0, iv, it;

	/* Full chunks: i = i0 + lane < D/2 - (D/2) % 32, no guard. */
	i0 = ks_ir_var(k, "i0", KS_TY_I64, KS_VAR_UNIFORM);
	loop = ks_s_for(k, i0, c64(&r, 0), half_main(&r), NLANES);
	ks_s_append(k, block, loop);
	lanes = ks_s_lanes(k);
	ks_s_append(k, loop->body, lanes);
	iv = decl(&r, lanes->body, "i", KS_TY_I64, KS_VAR_LANE,
	    bin(&r, KS_OP_ADD, var(&r, i0), ks_x_lane(k)));
	rotate(&r, lanes->body, 'v', iv);

	/* Tail chunk: i = D/2 - (D/2) % 32 + lane, guarded by i < D/2. */
	tail = ks_s_if(k, bin(&r, KS_OP_NE, bin(&r, KS_OP_REM, half(&r),
	    c64(&r, NLANES)), c64(&r, 0)));
	ks_s_append(k, block, tail);
	lanes = ks_s_lanes(k);
	ks_s_append(k, tail->body, lanes);
	it = decl(&r, lanes->body, "it", KS_TY_I64, KS_VAR_LANE,
	    bin(&r, KS_OP_ADD, half_main(&r), ks_x_lane(k)));
	guard = ks_s_if(k, bin(&r, KS_OP_LT, var(&r, it), half(&r)));
	ks_s_append(k, lanes->body, guard);
	rotate(&r, guard->body, 't', it);
}

/* ---- the builder ---- */

static ks_ir_kernel_t *rope_build(const ks_spec_t *spec, const char *variant)
{
	ks_rope_row_t w;
	ks_ir_kernel_t *k;
	ks_stmt_t *valid;
	int x, pos, T, Hn, D, P, pv;

	if (strcmp(variant, "general") != 0)
		return NULL;
	k = ks_ir_new("rope", variant, NLANES);
	x = ks_ir_buffer(k, "x", spec->dtype,
	    KS_ACCESS_READ | KS_ACCESS_WRITE);
	pos = ks_ir_buffer_i32(k, "pos", KS_ACCESS_READ);
	w.cs = ks_ir_buffer(k, "cs", spec->wdtype, KS_ACCESS_READ);
	ks_ir_buffer_dims(k, x, "T,Hn,D");
	ks_ir_buffer_dims(k, pos, "T");
	ks_ir_buffer_dims(k, w.cs, "P,D");
	T = ks_ir_scalar(k, "T", KS_TY_I64);
	Hn = ks_ir_scalar(k, "Hn", KS_TY_I64);
	D = ks_ir_scalar(k, "D", KS_TY_I64);
	P = ks_ir_scalar(k, "P", KS_TY_I64);

	/* Work-group = one (t, h) row: group = t * Hn + h. */
	k->grid = ks_x_bin(k, KS_OP_MUL, ks_x_param(k, T), ks_x_param(k, Hn));
	pv = ks_ir_var(k, "p", KS_TY_I64, KS_VAR_UNIFORM);
	ks_s_append(k, k->body, ks_s_decl(k, pv, ks_x_cast(k, KS_TY_I64,
	    ks_x_load(k, pos, ks_x_bin(k, KS_OP_DIV, ks_x_group(k),
	    ks_x_param(k, Hn))))));
	valid = ks_s_if(k, ks_x_bin(k, KS_OP_AND,
	    ks_x_bin(k, KS_OP_LE, ks_x_i64(k, 0), ks_x_var(k, pv)),
	    ks_x_bin(k, KS_OP_LT, ks_x_var(k, pv), ks_x_param(k, P))));
	ks_s_append(k, k->body, valid);
	w.src = w.dst = x;
	w.D = D;
	w.so = w.dof = ks_ir_var(k, "xo", KS_TY_I64, KS_VAR_UNIFORM);
	ks_s_append(k, valid->body, ks_s_decl(k, w.so, ks_x_bin(k,
	    KS_OP_MUL, ks_x_group(k), ks_x_param(k, D))));
	w.co = ks_ir_var(k, "co", KS_TY_I64, KS_VAR_UNIFORM);
	ks_s_append(k, valid->body, ks_s_decl(k, w.co, ks_x_bin(k,
	    KS_OP_MUL, ks_x_var(k, pv), ks_x_param(k, D))));
	ks_rope_row(k, valid->body, &w);
	return k;
}

const ks_kernel_def_t ks_kernel_rope = {
	.name = "rope",
	.summary = "x[t][h] rotated in place by the angles of row pos[t] of "
	    "cs (cos | sin), half-split pairs (i, i + D/2)",
	.version = 1,
	.dims = rope_dims,
	.ndims = 4,
	.variants = rope_variants,
	.nvariants = 1,
	.select = rope_select,
	.guards = rope_guards,
	.check = rope_check,
	.build = rope_build,
	.probes = rope_probes,
	.nprobes = (int)(sizeof rope_probes / sizeof rope_probes[0]),
	.weights = "cs",
	.wmix = KS_WMIX_F32,
};
