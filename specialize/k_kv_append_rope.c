/*
 * kv_append_rope: this step's keys, rotated by rope at their positions,
 * and values, written into the KV cache.
 *
 * k and v are B x T x Hkv x D (T new tokens per sequence: 1 at decode),
 * pos is B int32 (the position of sequence b's first new token: token t
 * goes to position p = pos[b] + t), cs is P x D (rope's table: cos in
 * columns [0, D/2), sin in [D/2, D)), k_cache and v_cache are B x S x Hkv
 * x D (attention_decode's layout; S the capacity), all but pos of the
 * request dtype.  Parameters, in ABI order: k, v, pos (i32), cs (read),
 * k_cache, v_cache (write), B, T, Hkv, D, S, P (i64).
 *
 * Definition (docs/kernels.md): for each (b, t, h) with 0 <= p < S and
 * p < P, k_cache[b][p][h] = rope(k[b][t][h], cs[p]) with rope's arithmetic
 * word for word (k_rope.h builds both: y0 = x0*c - x1*s, y1 = x1*c + x0*s,
 * no fma, one rounding at the store), so the result is bitwise rope in
 * place followed by a copy; v_cache[b][p][h] = v[b][t][h] (load and store:
 * the value itself).  A token whose position is outside those ranges
 * writes nothing; no other slot of the caches is touched.  A constant D
 * must be even; a dynamic odd D copies k's last column unrotated, as rope
 * leaves it.
 *
 * Schedule (changes no value): one work-group per (b, t, h), grid B * T *
 * Hkv; group g = (b * T + t) * Hkv + h, so the source row is g * D.  The
 * key row is rope's row rotation (pairs in full chunks of 32 and a
 * guarded tail), the value row a copy in full chunks of 32 columns and a
 * guarded tail.  One variant, `general`: binding D is the head-dim
 * specialization (D = 64, 128, 256 leave no guard), T = 1 the decode one.
 */
#include "k_rope.h"

#include <stdio.h>
#include <string.h>

enum { NLANES = KS_ROPE_LANES };

static const char *const kv_dims[] = { "B", "T", "Hkv", "D", "S", "P" };
enum { DIM_B, DIM_T, DIM_HKV, DIM_D, DIM_S, DIM_P };

static const char *const kv_variants[] = { "general" };
static const char *const kv_guards[] = {
	"any B, T, Hkv, D, S, P, constant or dynamic; a constant D even",
};

/* Beyond the common probes (which are rejected for odd D): decode at a
 * model's shape, decode with the rest dynamic, the head dim bound. */
static const int64_t kv_probes[][KS_MAX_DIMS] = {
	{ 1, 1, 8, 128, 4096, 4096 },
	{ 0, 1, 0, 0, 0, 0 },
	{ 0, 0, 0, 128, 0, 0 },
	{ 2, 4, 8, 96, 2048, 2048 },
};

static const char *kv_select(const ks_spec_t *spec)
{
	(void)spec;
	return "general";
}

static int kv_check(const ks_spec_t *spec, char *err, size_t errlen)
{
	static const int step_dims[] = { DIM_B, DIM_T, DIM_HKV, DIM_D };
	static const int cache_dims[] = { DIM_B, DIM_S, DIM_HKV, DIM_D };
	static const int cs_dims[] = { DIM_P, DIM_D };
	const ks_dim_t *d = &spec->dims[DIM_D];
	int rc;

	if (d->is_const && d->value % 2 != 0) {
		if (err != NULL && errlen > 0)
			snprintf(err, errlen, "kv_append_rope: D must be even "
			    "(got %lld): column i is rotated with column "
			    "i + D/2", (long long)d->value);
		return KS_E_BAD_SHAPE;
	}
	rc = ks_check_buffer(spec, "k", step_dims, 4, err, errlen);
	rc = rc ? rc : ks_check_buffer(spec, "k_cache", cache_dims, 4, err,
	    errlen);
	return rc ? rc : ks_check_buffer(spec, "cs", cs_dims, 2, err, errlen);
}

/* ---- the builder ---- */

typedef struct {
	ks_ir_kernel_t *k;
	int v, vc, D;           /* parameters */
	int xo, ko;             /* uniform row offsets: step, cache */
} kv_t;

static ks_expr_t *c64(kv_t *s, int64_t v)
{
	return ks_x_i64(s->k, v);
}

static ks_expr_t *par(kv_t *s, int p)
{
	return ks_x_param(s->k, p);
}

static ks_expr_t *var(kv_t *s, int v)
{
	return ks_x_var(s->k, v);
}

static ks_expr_t *bin(kv_t *s, ks_binop_t op, ks_expr_t *a, ks_expr_t *b)
{
	return ks_x_bin(s->k, op, a, b);
}

static int decl(kv_t *s, ks_stmt_t *block, const char *name, ks_ty_t t,
    ks_var_scope_t scope, ks_expr_t *init)
{
	int v = ks_ir_var(s->k, name, t, scope);

	ks_s_append(s->k, block, ks_s_decl(s->k, v, init));
	return v;
}

/* v_cache[ko + d] = v[xo + d], inside LANES. */
static void copy(kv_t *s, ks_stmt_t *block, int d)
{
	ks_s_append(s->k, block, ks_s_store(s->k, s->vc, bin(s, KS_OP_ADD,
	    var(s, s->ko), var(s, d)), ks_x_load(s->k, s->v,
	    bin(s, KS_OP_ADD, var(s, s->xo), var(s, d)))));
}

/* D - D % 32: the end of the full chunks of the value row. */
static ks_expr_t *d_main(kv_t *s)
{
	return bin(s, KS_OP_SUB, par(s, s->D), bin(s, KS_OP_REM,
	    par(s, s->D), c64(s, NLANES)));
}

/* The value row: full chunks of 32 columns, then the guarded tail. */
static void copy_row(kv_t *s, ks_stmt_t *block)
{
	ks_ir_kernel_t *k = s->k;
	ks_stmt_t *loop, *lanes, *tail, *guard;
	int d0, dv, dt;

	d0 = ks_ir_var(k, "d0", KS_TY_I64, KS_VAR_UNIFORM);
	loop = ks_s_for(k, d0, c64(s, 0), d_main(s), NLANES);
	ks_s_append(k, block, loop);
	lanes = ks_s_lanes(k);
	ks_s_append(k, loop->body, lanes);
	dv = decl(s, lanes->body, "dv", KS_TY_I64, KS_VAR_LANE,
	    bin(s, KS_OP_ADD, var(s, d0), ks_x_lane(k)));
	copy(s, lanes->body, dv);

	tail = ks_s_if(k, bin(s, KS_OP_NE, bin(s, KS_OP_REM, par(s, s->D),
	    c64(s, NLANES)), c64(s, 0)));
	ks_s_append(k, block, tail);
	lanes = ks_s_lanes(k);
	ks_s_append(k, tail->body, lanes);
	dt = decl(s, lanes->body, "dt", KS_TY_I64, KS_VAR_LANE,
	    bin(s, KS_OP_ADD, d_main(s), ks_x_lane(k)));
	guard = ks_s_if(k, bin(s, KS_OP_LT, var(s, dt), par(s, s->D)));
	ks_s_append(k, lanes->body, guard);
	copy(s, guard->body, dt);
}

static ks_ir_kernel_t *kv_build(const ks_spec_t *spec, const char *variant)
{
	kv_t s = { 0 };
	ks_rope_row_t w;
	ks_ir_kernel_t *k;
	ks_stmt_t *body, *valid, *odd;
	int kb, pos, kc, B, T, Hkv, S, P, h, bt, b, p;

	if (strcmp(variant, "general") != 0)
		return NULL;
	k = ks_ir_new("kv_append_rope", variant, NLANES);
	s.k = k;
	kb = ks_ir_buffer(k, "k", spec->dtype, KS_ACCESS_READ);
	s.v = ks_ir_buffer(k, "v", spec->dtype, KS_ACCESS_READ);
	pos = ks_ir_buffer_i32(k, "pos", KS_ACCESS_READ);
	w.cs = ks_ir_buffer(k, "cs", spec->wdtype, KS_ACCESS_READ);
	kc = ks_ir_buffer(k, "k_cache", spec->dtype, KS_ACCESS_WRITE);
	s.vc = ks_ir_buffer(k, "v_cache", spec->dtype, KS_ACCESS_WRITE);
	B = ks_ir_scalar(k, "B", KS_TY_I64);
	T = ks_ir_scalar(k, "T", KS_TY_I64);
	Hkv = ks_ir_scalar(k, "Hkv", KS_TY_I64);
	s.D = ks_ir_scalar(k, "D", KS_TY_I64);
	S = ks_ir_scalar(k, "S", KS_TY_I64);
	P = ks_ir_scalar(k, "P", KS_TY_I64);
	ks_ir_buffer_dims(k, kb, "B,T,Hkv,D");
	ks_ir_buffer_dims(k, s.v, "B,T,Hkv,D");
	ks_ir_buffer_dims(k, pos, "B");
	ks_ir_buffer_dims(k, w.cs, "P,D");
	ks_ir_buffer_dims(k, kc, "B,S,Hkv,D");
	ks_ir_buffer_dims(k, s.vc, "B,S,Hkv,D");
	body = k->body;

	/* group = (b * T + t) * Hkv + h */
	k->grid = bin(&s, KS_OP_MUL, bin(&s, KS_OP_MUL, par(&s, B),
	    par(&s, T)), par(&s, Hkv));
	h = decl(&s, body, "h", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&s, KS_OP_REM, ks_x_group(k), par(&s, Hkv)));
	bt = decl(&s, body, "bt", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&s, KS_OP_DIV, ks_x_group(k), par(&s, Hkv)));
	b = decl(&s, body, "b", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&s, KS_OP_DIV, var(&s, bt), par(&s, T)));
	p = decl(&s, body, "p", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&s, KS_OP_ADD, ks_x_cast(k, KS_TY_I64, ks_x_load(k, pos,
	    var(&s, b))), bin(&s, KS_OP_REM, var(&s, bt), par(&s, T))));
	valid = ks_s_if(k, bin(&s, KS_OP_AND, bin(&s, KS_OP_AND,
	    bin(&s, KS_OP_LE, c64(&s, 0), var(&s, p)),
	    bin(&s, KS_OP_LT, var(&s, p), par(&s, S))),
	    bin(&s, KS_OP_LT, var(&s, p), par(&s, P))));
	ks_s_append(k, body, valid);
	s.xo = decl(&s, valid->body, "xo", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&s, KS_OP_MUL, ks_x_group(k), par(&s, s.D)));
	s.ko = decl(&s, valid->body, "ko", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&s, KS_OP_MUL, bin(&s, KS_OP_ADD, bin(&s, KS_OP_MUL,
	    bin(&s, KS_OP_ADD, bin(&s, KS_OP_MUL, var(&s, b), par(&s, S)),
	    var(&s, p)), par(&s, Hkv)), var(&s, h)), par(&s, s.D)));
	w.co = decl(&s, valid->body, "co", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&s, KS_OP_MUL, var(&s, p), par(&s, s.D)));
	w.src = kb;
	w.dst = kc;
	w.D = s.D;
	w.so = s.xo;
	w.dof = s.ko;
	ks_rope_row(k, valid->body, &w);

	/* A dynamic odd D: k's last column, unrotated (uniform store). */
	odd = ks_s_if(k, bin(&s, KS_OP_NE, bin(&s, KS_OP_REM, par(&s, s.D),
	    c64(&s, 2)), c64(&s, 0)));
	ks_s_append(k, valid->body, odd);
	ks_s_append(k, odd->body, ks_s_store(k, kc, bin(&s, KS_OP_SUB,
	    bin(&s, KS_OP_ADD, var(&s, s.ko), par(&s, s.D)), c64(&s, 1)),
	    ks_x_load(k, kb, bin(&s, KS_OP_SUB, bin(&s, KS_OP_ADD,
	    var(&s, s.xo), par(&s, s.D)), c64(&s, 1)))));
	copy_row(&s, valid->body);
	return k;
}

const ks_kernel_def_t ks_kernel_kv_append_rope = {
	.name = "kv_append_rope",
	.summary = "k_cache[b][pos[b]+t] = rope(k[b][t], cs[pos[b]+t]), "
	    "v_cache[b][pos[b]+t] = v[b][t]; caches BxSxHkvxD",
	.version = 1,
	.dims = kv_dims,
	.ndims = 6,
	.variants = kv_variants,
	.nvariants = 1,
	.select = kv_select,
	.guards = kv_guards,
	.check = kv_check,
	.build = kv_build,
	.probes = kv_probes,
	.nprobes = (int)(sizeof kv_probes / sizeof kv_probes[0]),
	.weights = "cs",
	.wmix = KS_WMIX_F32,
};
