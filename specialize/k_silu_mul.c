/*
 * silu_mul: y[t][j] = silu(g) * u with g = gu[t][j], u = gu[t][F + j],
 * for t < T, j < F (the gated MLP of SwiGLU models).
 *
 * gu is T x 2F (gate in columns [0, F), up in [F, 2F)), y is T x F, both
 * row-major in the request dtype.  Parameters, in ABI order: gu (read), y
 * (write), T, F (i64).
 *
 * Definition (the arithmetic, in this order, all f32): e = exp(-g)
 * (KS_UN_NEG then KS_UN_EXP), d = 1.0f + e, q = g / d (IEEE division),
 * y = q * u, stored once, converted to the dtype round-to-nearest-even.
 * exp is the backend's library function (cpu libm expf), so results are
 * bitwise per backend, not across backends (docs/kernels.md states the
 * measured OpenCL bound).
 *
 * Schedule (changes no arithmetic): a work-group handles a chunk of CHUNK
 * = 256 columns of one row, 8 per lane: step s in 0..7 (a constant loop
 * the unroll pass turns into 8 LANES phases) covers columns c0 + 32 s +
 * lane, so each phase is 32 consecutive elements (vectorizable lane loop on
 * CPUs, coalesced on GPUs).  Grid T * ((F + 255) / 256).  A full chunk runs
 * unguarded; the last chunk of a row, when F % 256 != 0, runs the same
 * steps guarded by column < F.  The choice is a uniform `if (F % 256 != 0
 * && F - c0 < 256)`, which folds to the unguarded path alone when F is a
 * constant multiple of 256: binding F is the fixed-width specialization,
 * so `general` is the only variant.
 */
#include "specialize.h"

#include <stdio.h>
#include <string.h>

enum {
	NLANES = 32,
	CHUNK = 256,    /* columns per work-group: 8 steps of 32 lanes */
};

static const char *const silu_dims[] = { "T", "F" };
enum { DIM_T, DIM_F };

static const char *const silu_variants[] = { "general" };
static const char *const silu_guards[] = {
	"any T, F, constant or dynamic",
};

/* Fingerprint probe beyond the common ones: a model's FFN width (43
 * chunks), decode and prefill. */
static const int64_t silu_probes[][KS_MAX_DIMS] = {
	{ 1, 11008 },
	{ 0, 11008 },
};

static const char *silu_select(const ks_spec_t *spec)
{
	(void)spec;
	return "general";
}

static int too_large(const char *buf, const char *dims, int64_t a,
    int64_t b, char *err, size_t errlen)
{
	if (err != NULL && errlen > 0)
		snprintf(err, errlen, "buffer %s of %s = %lld*%lld elements "
		    "exceeds the limit of %lld", buf, dims, (long long)a,
		    (long long)b, (long long)KS_MAX_ELEMS);
	return KS_E_TOO_LARGE;
}

static int silu_check(const ks_spec_t *spec, char *err, size_t errlen)
{
	const ks_dim_t *t = &spec->dims[DIM_T], *f = &spec->dims[DIM_F];
	int64_t f2, n;

	if (!t->is_const || !f->is_const)
		return KS_OK;
	if (ks_mul_overflow(f->value, 2, &f2) ||
	    ks_mul_overflow(t->value, f2, &n) || n > KS_MAX_ELEMS)
		return too_large("gu", "T*2F", t->value, f2, err, errlen);
	if (ks_mul_overflow(t->value, f->value, &n) || n > KS_MAX_ELEMS)
		return too_large("y", "T*F", t->value, f->value, err, errlen);
	return KS_OK;
}

/* ---- the builder ---- */

typedef struct {
	ks_ir_kernel_t *k;
	int gu, y, T, F;        /* parameters */
	int c0, go, yo;         /* uniform: chunk start, row offsets */
} silu_t;

static ks_expr_t *c64(silu_t *s, int64_t v)
{
	return ks_x_i64(s->k, v);
}

static ks_expr_t *par(silu_t *s, int p)
{
	return ks_x_param(s->k, p);
}

static ks_expr_t *var(silu_t *s, int v)
{
	return ks_x_var(s->k, v);
}

static ks_expr_t *bin(silu_t *s, ks_binop_t op, ks_expr_t *a, ks_expr_t *b)
{
	return ks_x_bin(s->k, op, a, b);
}

/* (F + 255) / 256, the chunks per row; a fresh tree per use. */
static ks_expr_t *nchunks(silu_t *s)
{
	return bin(s, KS_OP_DIV, bin(s, KS_OP_ADD, par(s, s->F),
	    c64(s, CHUNK - 1)), c64(s, CHUNK));
}

static int decl(silu_t *s, ks_stmt_t *block, const char *name, ks_ty_t t,
    ks_var_scope_t scope, ks_expr_t *init)
{
	int v = ks_ir_var(s->k, name, t, scope);

	ks_s_append(s->k, block, ks_s_decl(s->k, v, init));
	return v;
}

/*
 * Appends to BLOCK the 8 steps of a chunk: for s0 = 0 to 256 step 32,
 * lanes { j = s0 + lane; [if c0 + j < F] y[yo + j] = ... }.  SFX ("v"
 * full, "t" tail) names the variables.
 */
static void chunk(silu_t *s, ks_stmt_t *block, char sfx, int guarded)
{
	ks_ir_kernel_t *k = s->k;
	ks_stmt_t *loop, *lanes, *in;
	char name[8];
	int s0, j, g, u;

	snprintf(name, sizeof name, "s0%c", sfx);
	s0 = ks_ir_var(k, name, KS_TY_I64, KS_VAR_UNIFORM);
	loop = ks_s_for(k, s0, c64(s, 0), c64(s, CHUNK), NLANES);
	ks_s_append(k, block, loop);
	lanes = ks_s_lanes(k);
	ks_s_append(k, loop->body, lanes);
	snprintf(name, sizeof name, "j%c", sfx);
	j = decl(s, lanes->body, name, KS_TY_I64, KS_VAR_LANE,
	    bin(s, KS_OP_ADD, var(s, s0), ks_x_lane(k)));
	in = lanes;
	if (guarded) {
		in = ks_s_if(k, bin(s, KS_OP_LT, bin(s, KS_OP_ADD,
		    var(s, s->c0), var(s, j)), par(s, s->F)));
		ks_s_append(k, lanes->body, in);
	}
	snprintf(name, sizeof name, "g%c", sfx);
	g = decl(s, in->body, name, KS_TY_F32, KS_VAR_LANE, ks_x_load(k, s->gu,
	    bin(s, KS_OP_ADD, var(s, s->go), var(s, j))));
	snprintf(name, sizeof name, "u%c", sfx);
	u = decl(s, in->body, name, KS_TY_F32, KS_VAR_LANE, ks_x_load(k, s->gu,
	    bin(s, KS_OP_ADD, bin(s, KS_OP_ADD, var(s, s->go), par(s, s->F)),
	    var(s, j))));
	/* y = (g / (1.0f + exp(-g))) * u */
	ks_s_append(k, in->body, ks_s_store(k, s->y, bin(s, KS_OP_ADD,
	    var(s, s->yo), var(s, j)), bin(s, KS_OP_MUL, bin(s, KS_OP_DIV,
	    var(s, g), bin(s, KS_OP_ADD, ks_x_f32(k, 1.0f), ks_x_un(k,
	    KS_UN_EXP, ks_x_un(k, KS_UN_NEG, var(s, g))))), var(s, u))));
}

static ks_ir_kernel_t *silu_build(const ks_spec_t *spec, const char *variant)
{
	silu_t s = { 0 };
	ks_ir_kernel_t *k;
	ks_stmt_t *body, *tail;
	int t;

	(void)spec;
	if (strcmp(variant, "general") != 0)
		return NULL;
	k = ks_ir_new("silu_mul", variant, NLANES);
	s.k = k;
	s.gu = ks_ir_buffer(k, "gu", spec->dtype, KS_ACCESS_READ);
	s.y = ks_ir_buffer(k, "y", spec->dtype, KS_ACCESS_WRITE);
	ks_ir_buffer_dims(k, s.gu, "T,2*F");
	ks_ir_buffer_dims(k, s.y, "T,F");
	s.T = ks_ir_scalar(k, "T", KS_TY_I64);
	s.F = ks_ir_scalar(k, "F", KS_TY_I64);
	body = k->body;

	k->grid = bin(&s, KS_OP_MUL, par(&s, s.T), nchunks(&s));
	/* Chunk counts as fresh trees, not a variable, so that they fold
	 * once F is bound (to group and 0 when F <= 256). */
	t = decl(&s, body, "t", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&s, KS_OP_DIV, ks_x_group(k), nchunks(&s)));
	s.c0 = decl(&s, body, "c0", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&s, KS_OP_MUL, bin(&s, KS_OP_REM, ks_x_group(k),
	    nchunks(&s)), c64(&s, CHUNK)));
	s.go = decl(&s, body, "go", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&s, KS_OP_ADD, bin(&s, KS_OP_MUL, var(&s, t),
	    bin(&s, KS_OP_MUL, par(&s, s.F), c64(&s, 2))), var(&s, s.c0)));
	s.yo = decl(&s, body, "yo", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&s, KS_OP_ADD, bin(&s, KS_OP_MUL, var(&s, t), par(&s, s.F)),
	    var(&s, s.c0)));

	/* The last chunk of a row, when partial, is guarded; the others
	 * are not.  Folds to the unguarded chunk when F % 256 == 0. */
	tail = ks_s_if(k, bin(&s, KS_OP_AND,
	    bin(&s, KS_OP_NE, bin(&s, KS_OP_REM, par(&s, s.F),
	    c64(&s, CHUNK)), c64(&s, 0)),
	    bin(&s, KS_OP_LT, bin(&s, KS_OP_SUB, par(&s, s.F),
	    var(&s, s.c0)), c64(&s, CHUNK))));
	tail->orelse = ks_s_block(k);
	ks_s_append(k, body, tail);
	chunk(&s, tail->body, 't', 1);
	chunk(&s, tail->orelse, 'v', 0);
	return k;
}

const ks_kernel_def_t ks_kernel_silu_mul = {
	.name = "silu_mul",
	.summary = "y[t][j] = silu(gu[t][j]) * gu[t][F + j]; gu Tx2F (gate | "
	    "up), y TxF, row-major",
	.version = 1,
	.dims = silu_dims,
	.ndims = 2,
	.variants = silu_variants,
	.nvariants = 1,
	.select = silu_select,
	.guards = silu_guards,
	.check = silu_check,
	.build = silu_build,
	.probes = silu_probes,
	.nprobes = (int)(sizeof silu_probes / sizeof silu_probes[0]),
};
