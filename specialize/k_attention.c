/*
 * attention_decode, attention_prefill, attention_paged: one builder.
 * attention_decode is described here; prefill and paged compute each of
 * their causal query rows exactly as a decode row over its own positions
 * (see "forms" below and docs/kernels.md), so the three share every line
 * of the arithmetic.
 *
 * attention_decode: one query token per sequence, against a KV cache.
 *
 *   o[b][h] = sum_p softmax_p(dot(q[b][h], k[b][p][kvh]) * scale)
 *             * v[b][p][kvh],   p < n = clamp(lens[b], 0, S),
 *   kvh = h / (Hq / Hkv)        (grouped-query attention; Hkv = Hq is MHA)
 *
 * Dims, in declared order: B, Hq, Hkv, D, S.  Parameters, in ABI order:
 * q[B][Hq][D] (read), k[B][S][Hkv][D] (read), v[B][S][Hkv][D] (read),
 * lens[B] (int32, read), o[B][Hq][D] (write), the dynamic dims, then the
 * f32 scalar scale.  q, k, v, o are in the request dtype; loads convert
 * exactly to f32, all arithmetic is f32, o is rounded once at its store.
 *
 * Canonical order (the definition; docs/kernels.md states it in full).
 * Positions [0, n) form chunks of CH = 64: chunk c is [64c, min(64c + 64,
 * n)).  Per chunk, in increasing p: s_p = reduce_sum(lane dot) * scale,
 * where lane l accumulates the d = l (mod 32) in increasing d as fma(q, k,
 * acc) from 0.0 (docs/kernels.md); m_c = max(m_c, s_p) from -inf.
 * Then, in increasing p: e_p = exp(s_p - m_c), l_c = l_c + e_p from 0.0,
 * a_c[d] = fma(e_p, v_p[d], a_c[d]) from 0.0.  Chunks merge left to
 * right: chunk 0 gives (m, l, a); chunk c > 0: m' = max(m, m_c), f =
 * exp(m - m'), g = exp(m_c - m'), l = l*f + l_c*g, a[d] = a[d]*f +
 * a_c[d]*g (two products, then the sum; no fma), m = m'.  o[d] = a[d] /
 * l (IEEE division); n = 0 gives o = 0.  max is the IR's (fmaxf, -0 <
 * +0), exp the IR's (kspec's own sequence, docs/ir.md), so the result is
 * the same bits on every backend.
 *
 * Chunk partials depend on nothing but their chunk, so a GPU schedule may
 * compute them in parallel (split-KV) and merge them in the same chain
 * with the same bits.  Here a work-group computes its chunks in sequence.
 * The scores of the current chunk go to a local array (64 floats per head)
 * and the chunk maxima to another; lane 0 stores them, a barrier publishes
 * them, the exp phase turns the scores into e_p in place in the lanes
 * (vectorized on the cpu), a second barrier publishes those to the e/V
 * pass, and a third at the end of the chunk keeps the next chunk's stores
 * from overtaking the readers of this one.
 *
 * Shapes the kernel cannot serve.  check() rejects a constant D > 512 and
 * constant Hq, Hkv with Hq % Hkv != 0.  With dynamic dims the kernel
 * tests the same at run time (ok = Hkv >= 1 && Hq % Hkv == 0 && D <=
 * 512): where it fails, the work-group reads nothing of k, v and writes
 * nothing (o keeps what it held).  Divisions use max(., 1) so that no
 * shape divides by zero.
 *
 * Variants, all with the arithmetic above (so the same bits as general):
 *   general   any dims; one work-group per (b, h), grid B*Hq; the lanes
 *             loop over d; a and a_c live in local arrays of 512 floats.
 *   head_dim  D is the constant 64, 128 or 256; grid B*Hq; q, a and a_c
 *             are D/32 lane variables per lane, the d loops unrolled.
 *   gqa       D as head_dim, and Hq, Hkv constants with G = Hq/Hkv in
 *             2..8 and G*D <= 1024; one work-group per (b, kvh), grid
 *             B*Hkv, computes the G query heads of the group: each k and v
 *             element is loaded once and used G times.
 * attention_decode has no non-exact variant: mode "fast" selects what
 * "exact" selects.
 */
#include "specialize.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum {
	NLANES = 32,
	CH = 64,                /* KV positions per chunk */
	D_MAX = 512,            /* head dim limit (local accumulators) */
	G_MAX = 8,              /* query heads per KV head, gqa */
	GD_MAX = 1024,          /* G * D limit of gqa (lane registers) */
	J_MAX = 8,              /* D / 32 of the fixed-D variants */
};

/*
 * The three kernels of this file share the builder; a form says which
 * one a spec is for and where each of its dims sits in the declared order
 * (-1: the kernel has no such dim).
 *
 *   decode    B, Hq, Hkv, D, S: one query row, k[B][S][Hkv][D].
 *   prefill   B, T, Hq, Hkv, D, S, Sc: T causal query rows per sequence,
 *             k[B][Sc][Hkv][D] (the strided layout: rows of Sc positions,
 *             lengths clamped to S <= Sc).
 *   paged     B, T, Hq, Hkv, D, BS, MB, NB: T causal query rows, k in NB
 *             blocks of [BS][Hkv][D], block_table[B][MB] (int32) naming
 *             the block of positions [BS i, BS i + BS) of sequence b.
 */
typedef enum { FORM_DECODE, FORM_PREFILL, FORM_PAGED } form_kind_t;

typedef struct {
	form_kind_t kind;
	const char *name;
	const char *const *dims;
	int b, t, hq, hkv, d, s, sc, bs, mb, nb;
} attn_form_t;

static const char *const decode_dims[] = { "B", "Hq", "Hkv", "D", "S" };
static const char *const prefill_dims[] = { "B", "T", "Hq", "Hkv", "D", "S",
    "Sc" };
static const char *const paged_dims[] = { "B", "T", "Hq", "Hkv", "D", "BS",
    "MB", "NB" };

static const attn_form_t forms[] = {
	{ FORM_DECODE, "attention_decode", decode_dims,
	    0, -1, 1, 2, 3, 4, -1, -1, -1, -1 },
	{ FORM_PREFILL, "attention_prefill", prefill_dims,
	    0, 1, 2, 3, 4, 5, 6, -1, -1, -1 },
	{ FORM_PAGED, "attention_paged", paged_dims,
	    0, 1, 2, 3, 4, -1, -1, 5, 6, 7 },
};

static const attn_form_t *form_of(const ks_spec_t *spec)
{
	size_t i;

	for (i = 0; i < sizeof forms / sizeof forms[0]; i++)
		if (strcmp(spec->def->name, forms[i].name) == 0)
			return &forms[i];
	return &forms[0];
}

static const char *const attn_variants[] = { "general", "head_dim", "gqa" };
#define GUARD_HEAD_DIM "D is the constant 64, 128 or 256"
#define GUARD_GQA "D is the constant 64, 128 or 256, Hq and Hkv are " \
	"constants, G = Hq / Hkv in 2..8 and G * D <= 1024"
static const char *const attn_guards[] = {
	"any B, Hq, Hkv, D, S, constant or dynamic; D <= 512",
	GUARD_HEAD_DIM, GUARD_GQA,
};
static const char *const rows_guards[] = {
	"any dims, constant or dynamic; D <= 512", GUARD_HEAD_DIM, GUARD_GQA,
};

/* Probes that select head_dim and gqa (0: dynamic). */
static const int64_t attn_probes[][KS_MAX_DIMS] = {
	{ 0, 0, 0, 128, 0 },            /* head_dim */
	{ 0, 32, 8, 128, 0 },           /* gqa, G = 4 */
};
static const int64_t prefill_probes[][KS_MAX_DIMS] = {
	{ 0, 0, 0, 0, 128, 0, 0 },      /* head_dim */
	{ 0, 4, 32, 8, 128, 0, 0 },     /* gqa, G = 4, a verify width */
};
static const int64_t paged_probes[][KS_MAX_DIMS] = {
	{ 0, 0, 0, 0, 128, 16, 0, 0 },  /* head_dim */
	{ 0, 1, 32, 8, 128, 16, 0, 0 }, /* gqa, G = 4, decode */
};

static int is_fixed_d(const ks_dim_t *d)
{
	return d->is_const && (d->value == 64 || d->value == 128 ||
	    d->value == 256);
}

/* G of the gqa variant, or 0 where its guard does not hold. */
static int64_t gqa_group(const ks_spec_t *spec)
{
	const attn_form_t *f = form_of(spec);
	const ks_dim_t *hq = &spec->dims[f->hq], *hkv = &spec->dims[f->hkv];
	const ks_dim_t *d = &spec->dims[f->d];
	int64_t g;

	if (!is_fixed_d(d) || !hq->is_const || !hkv->is_const ||
	    hkv->value < 1 || hq->value % hkv->value != 0)
		return 0;
	g = hq->value / hkv->value;
	return g >= 2 && g <= G_MAX && g * d->value <= GD_MAX ? g : 0;
}

static const char *attn_select(const ks_spec_t *spec)
{
	if (gqa_group(spec) != 0)
		return "gqa";
	return is_fixed_d(&spec->dims[form_of(spec)->d]) ? "head_dim" :
	    "general";
}

/* Elements of a buffer whose dims (indices into the spec, NDIM of them)
 * are all constant, overflow-checked; a dynamic dim leaves the size to
 * the launch. */
static int check_buffer(const ks_spec_t *spec, const char *buf,
    const int *dims, int ndim, char *err, size_t errlen)
{
	char names[64] = "";
	int64_t n = 1;
	int i;

	for (i = 0; i < ndim; i++)
		if (!spec->dims[dims[i]].is_const)
			return KS_OK;
	for (i = 0; i < ndim; i++)
		if (ks_mul_overflow(n, spec->dims[dims[i]].value, &n) ||
		    n > KS_MAX_ELEMS)
			break;
	if (i == ndim)
		return KS_OK;
	for (i = 0; i < ndim; i++)
		snprintf(names + strlen(names), sizeof names - strlen(names),
		    "%s%s", i ? "*" : "", spec->def->dims[dims[i]]);
	if (err != NULL && errlen > 0)
		snprintf(err, errlen, "buffer %s of %s elements exceeds the "
		    "limit of %lld", buf, names, (long long)KS_MAX_ELEMS);
	return KS_E_TOO_LARGE;
}

static int attn_check(const ks_spec_t *spec, char *err, size_t errlen)
{
	const attn_form_t *f = form_of(spec);
	const ks_dim_t *hq = &spec->dims[f->hq], *hkv = &spec->dims[f->hkv];
	const ks_dim_t *d = &spec->dims[f->d];
	int qdims[4], kvdims[4], btdims[2], nq = 0, rc;

	if (d->is_const && d->value > D_MAX) {
		if (err != NULL && errlen > 0)
			snprintf(err, errlen, "D must be <= %d for "
			    "%s (got %lld)", D_MAX, f->name,
			    (long long)d->value);
		return KS_E_TOO_LARGE;
	}
	if (hq->is_const && hkv->is_const && hq->value % hkv->value != 0) {
		if (err != NULL && errlen > 0)
			snprintf(err, errlen, "Hq must be a multiple of Hkv "
			    "(got Hq = %lld, Hkv = %lld)", (long long)hq->value,
			    (long long)hkv->value);
		return KS_E_BAD_SHAPE;
	}
	if (f->kind == FORM_PREFILL && spec->dims[f->s].is_const &&
	    spec->dims[f->sc].is_const &&
	    spec->dims[f->s].value > spec->dims[f->sc].value) {
		if (err != NULL && errlen > 0)
			snprintf(err, errlen, "S must be <= Sc (got S = %lld, "
			    "Sc = %lld)", (long long)spec->dims[f->s].value,
			    (long long)spec->dims[f->sc].value);
		return KS_E_BAD_SHAPE;
	}
	qdims[nq++] = f->b;
	if (f->t >= 0)
		qdims[nq++] = f->t;
	qdims[nq++] = f->hq;
	qdims[nq++] = f->d;
	kvdims[0] = f->kind == FORM_PAGED ? f->nb : f->b;
	kvdims[1] = f->kind == FORM_PAGED ? f->bs : f->kind == FORM_PREFILL ?
	    f->sc : f->s;
	kvdims[2] = f->hkv;
	kvdims[3] = f->d;
	btdims[0] = f->b;
	btdims[1] = f->mb;
	rc = check_buffer(spec, "q", qdims, nq, err, errlen);
	rc = rc ? rc : check_buffer(spec, "k", kvdims, 4, err, errlen);
	rc = rc ? rc : check_buffer(spec, "v", kvdims, 4, err, errlen);
	if (f->kind == FORM_PAGED)
		rc = rc ? rc : check_buffer(spec, "block_table", btdims, 2,
		    err, errlen);
	return rc ? rc : check_buffer(spec, "o", qdims, nq, err, errlen);
}

/* ---- the builder ---- */

typedef struct {
	ks_ir_kernel_t *k;
	form_kind_t form;
	int q, kc, vc, bt, lens, o;             /* buffers (bt: paged) */
	int B, Hq, Hkv, D, S, scale;            /* scalars */
	int T, Sc, BS, MB, NB;                  /* prefill, paged */
	int b;          /* uniform: the sequence */
	int nh;         /* query heads per work-group: 1, or G (gqa) */
	int nj;         /* D / 32 lanes variables per head; 0: general */
	int sc;         /* local: scores of the chunk, CH per head */
	int mcl;        /* local: the chunk maxima mc, one per head */
	int la, lac;    /* locals a, a_c (general) */
	int qo[G_MAX];  /* uniform: offset of head g's row of q and o */
	int kvo;        /* uniform: offset of k/v at position 0 */
	int n, dn, c0, cend;
	int m[G_MAX], l[G_MAX], mc[G_MAX], lc[G_MAX];
	int qv[G_MAX][J_MAX], a[G_MAX][J_MAX], ac[G_MAX][J_MAX];
} attn_t;

static ks_expr_t *c64(attn_t *t, int64_t v)
{
	return ks_x_i64(t->k, v);
}

static ks_expr_t *f32c(attn_t *t, float v)
{
	return ks_x_f32(t->k, v);
}

static ks_expr_t *par(attn_t *t, int p)
{
	return ks_x_param(t->k, p);
}

static ks_expr_t *var(attn_t *t, int v)
{
	return ks_x_var(t->k, v);
}

static ks_expr_t *bin(attn_t *t, ks_binop_t op, ks_expr_t *a, ks_expr_t *b)
{
	return ks_x_bin(t->k, op, a, b);
}

static ks_expr_t *add(attn_t *t, ks_expr_t *a, ks_expr_t *b)
{
	return bin(t, KS_OP_ADD, a, b);
}

static ks_expr_t *mul(attn_t *t, ks_expr_t *a, ks_expr_t *b)
{
	return bin(t, KS_OP_MUL, a, b);
}

static ks_expr_t *expf_of(attn_t *t, ks_expr_t *a)
{
	return ks_x_un(t->k, KS_UN_EXP, a);
}

/* max(Hkv, 1): a divisor that is never 0. */
static ks_expr_t *hkv1(attn_t *t)
{
	return bin(t, KS_OP_MAX, par(t, t->Hkv), c64(t, 1));
}

/* ok = Hkv >= 1 && Hq % max(Hkv, 1) == 0 && D <= 512: whether the shape is
 * served.  A fresh tree per use, so that constants that passed check()
 * fold it to true and it vanishes. */
static ks_expr_t *ok_expr(attn_t *t)
{
	ks_expr_t *ok;

	ok = bin(t, KS_OP_AND, bin(t, KS_OP_LE, c64(t, 1), par(t, t->Hkv)),
	    bin(t, KS_OP_EQ, bin(t, KS_OP_REM, par(t, t->Hq), hkv1(t)),
	    c64(t, 0)));
	ok = bin(t, KS_OP_AND, ok, bin(t, KS_OP_LE, par(t, t->D),
	    c64(t, D_MAX)));
	if (t->form == FORM_PREFILL)
		ok = bin(t, KS_OP_AND, ok, bin(t, KS_OP_LE, par(t, t->S),
		    par(t, t->Sc)));
	if (t->form == FORM_PAGED)
		ok = bin(t, KS_OP_AND, ok, bin(t, KS_OP_AND, bin(t, KS_OP_LE,
		    c64(t, 1), par(t, t->NB)), bin(t, KS_OP_LE, c64(t, 1),
		    par(t, t->BS))));
	return ok;
}

/* G = max(Hq / max(Hkv, 1), 1), a fresh tree. */
static ks_expr_t *group_expr(attn_t *t)
{
	return bin(t, KS_OP_MAX, bin(t, KS_OP_DIV, par(t, t->Hq), hkv1(t)),
	    c64(t, 1));
}

static int decl(attn_t *t, ks_stmt_t *block, const char *name, ks_ty_t ty,
    ks_var_scope_t scope, ks_expr_t *init)
{
	int v = ks_ir_var(t->k, name, ty, scope);

	ks_s_append(t->k, block, ks_s_decl(t->k, v, init));
	return v;
}

/* Declares "<pfx><g>" (or "<pfx><g>_<j>" with J >= 0) in BLOCK. */
static int decl_gj(attn_t *t, ks_stmt_t *block, const char *pfx, int g,
    int j, ks_ty_t ty, ks_var_scope_t scope, ks_expr_t *init)
{
	char name[32];

	if (j < 0)
		snprintf(name, sizeof name, "%s%d", pfx, g);
	else
		snprintf(name, sizeof name, "%s%d_%d", pfx, g, j);
	return decl(t, block, name, ty, scope, init);
}

static void assign(attn_t *t, ks_stmt_t *block, int v, ks_expr_t *e)
{
	ks_s_append(t->k, block, ks_s_assign(t->k, v, e));
}

/* Appends a LANES statement to BLOCK and returns its body. */
static ks_stmt_t *lanes(attn_t *t, ks_stmt_t *block)
{
	ks_stmt_t *s = ks_s_lanes(t->k);

	ks_s_append(t->k, block, s);
	return s->body;
}

/* general: appends "for d = lane to dn step 32" to BLOCK (inside LANES);
 * sets *D to the loop's lane variable and returns its body. */
static ks_stmt_t *d_loop(attn_t *t, ks_stmt_t *block, const char *name,
    int *d)
{
	ks_stmt_t *s;

	*d = ks_ir_var(t->k, name, KS_TY_I64, KS_VAR_LANE);
	s = ks_s_for(t->k, *d, ks_x_lane(t->k), var(t, t->dn), NLANES);
	ks_s_append(t->k, block, s);
	return s->body;
}

/* Element d = 32j + lane (fixed D) of the k or v row at uniform offset
 * ROW (a variable). */
static ks_expr_t *kv_elem(attn_t *t, int buf, int row, int j)
{
	return ks_x_load(t->k, buf, add(t, var(t, row), add(t,
	    c64(t, (int64_t)NLANES * j), ks_x_lane(t->k))));
}

/* Offset of position P (a variable) in k and v.  Paged: the row BS of
 * block block_table[b][p / BS], the block clamped to [0, NB) so that no
 * table entry reads outside k, v. */
static ks_expr_t *pos_off(attn_t *t, int p)
{
	ks_ir_kernel_t *k = t->k;
	ks_expr_t *blk, *row;

	if (t->form != FORM_PAGED)
		return add(t, var(t, t->kvo), mul(t, var(t, p), mul(t,
		    par(t, t->Hkv), par(t, t->D))));
	blk = ks_x_cast(k, KS_TY_I64, ks_x_load(k, t->bt, add(t, mul(t,
	    var(t, t->b), par(t, t->MB)), bin(t, KS_OP_DIV, var(t, p),
	    par(t, t->BS)))));
	blk = bin(t, KS_OP_MIN, bin(t, KS_OP_MAX, blk, c64(t, 0)),
	    bin(t, KS_OP_SUB, par(t, t->NB), c64(t, 1)));
	row = add(t, mul(t, blk, par(t, t->BS)), bin(t, KS_OP_REM,
	    var(t, p), par(t, t->BS)));
	return add(t, var(t, t->kvo), mul(t, row, mul(t, par(t, t->Hkv),
	    par(t, t->D))));
}

/* Index of head g's score of position P in the local array sc. */
static ks_expr_t *sc_index(attn_t *t, int g, int p)
{
	return add(t, c64(t, (int64_t)CH * g), bin(t, KS_OP_SUB, var(t, p),
	    var(t, t->c0)));
}

/*
 * The score pass of one chunk, appended to BLOCK: for p in [c0, cend),
 * each head's s = reduce_sum(lane dot) * scale goes to sc and into the
 * running max mc.
 */
static void score_pass(attn_t *t, ks_stmt_t *block)
{
	ks_ir_kernel_t *k = t->k;
	ks_stmt_t *loop, *body, *lb, *first;
	int p, ko, s[G_MAX], sp[G_MAX], g, j, d, kv;

	p = ks_ir_var(k, "p", KS_TY_I64, KS_VAR_UNIFORM);
	loop = ks_s_for(k, p, var(t, t->c0), var(t, t->cend), 1);
	ks_s_append(k, block, loop);
	body = loop->body;
	ko = decl(t, body, "ko", KS_TY_I64, KS_VAR_UNIFORM, pos_off(t, p));
	for (g = 0; g < t->nh; g++)
		s[g] = decl_gj(t, body, "s", g, -1, KS_TY_F32, KS_VAR_LANE,
		    f32c(t, 0.0f));
	lb = lanes(t, body);
	if (t->nj == 0) {
		lb = d_loop(t, lb, "ds", &d);
		assign(t, lb, s[0], ks_x_fma(k, ks_x_load(k, t->q,
		    add(t, var(t, t->qo[0]), var(t, d))), ks_x_load(k, t->kc,
		    add(t, var(t, ko), var(t, d))), var(t, s[0])));
	} else {
		for (j = 0; j < t->nj; j++) {
			kv = decl_gj(t, lb, "kv", j, -1, KS_TY_F32,
			    KS_VAR_LANE, kv_elem(t, t->kc, ko, j));
			for (g = 0; g < t->nh; g++)
				assign(t, lb, s[g], ks_x_fma(k,
				    var(t, t->qv[g][j]), var(t, kv),
				    var(t, s[g])));
		}
	}
	for (g = 0; g < t->nh; g++)
		sp[g] = decl_gj(t, body, "sp", g, -1, KS_TY_F32,
		    KS_VAR_UNIFORM, mul(t, ks_x_reduce(k, KS_RED_SUM, s[g]),
		    par(t, t->scale)));
	lb = lanes(t, body);
	first = ks_s_if(k, bin(t, KS_OP_EQ, ks_x_lane(k), c64(t, 0)));
	ks_s_append(k, lb, first);
	for (g = 0; g < t->nh; g++)
		ks_s_append(k, first->body, ks_s_lstore(k, t->sc,
		    sc_index(t, g, p), var(t, sp[g])));
	for (g = 0; g < t->nh; g++)
		assign(t, body, t->mc[g], bin(t, KS_OP_MAX, var(t, t->mc[g]),
		    var(t, sp[g])));
	/* The chunk maxima, for the exp phase. */
	lb = lanes(t, block);
	first = ks_s_if(k, bin(t, KS_OP_EQ, ks_x_lane(k), c64(t, 0)));
	ks_s_append(k, lb, first);
	for (g = 0; g < t->nh; g++)
		ks_s_append(k, first->body, ks_s_lstore(k, t->mcl,
		    c64(t, g), var(t, t->mc[g])));
}

/*
 * The exp phase of one chunk, appended to BLOCK (after the barrier that
 * publishes sc and mcl): sc[i] = exp(sc[i] - mc) in place, so that the
 * exps run in the lanes (vectorized on the cpu) instead of once per
 * position in uniform code.  A loop over the 2G slots of 32 entries (lane
 * l of slot j takes entry 32j + l: head j / 2, position c0 + 32 (j % 2) +
 * l); the chunk maxima come from the local array mcl, so that the loop
 * body is one exp whatever G (the unroll pass unrolls it up to 8 slots;
 * 16 inlined exps make GCC refuse to inline ksh_expf).  Each lane reads
 * and writes only its own entries.  Entries past cend (a short last
 * chunk) hold scores of no position (stale or never stored); their exps
 * are computed and never read.
 */
static void exp_phase(attn_t *t, ks_stmt_t *block)
{
	ks_ir_kernel_t *k = t->k;
	ks_stmt_t *loop, *lb;
	int j;

	j = ks_ir_var(k, "j", KS_TY_I64, KS_VAR_UNIFORM);
	loop = ks_s_for(k, j, c64(t, 0), c64(t, (int64_t)t->nh * CH / NLANES),
	    1);
	ks_s_append(k, block, loop);
	lb = lanes(t, loop->body);
	ks_s_append(k, lb, ks_s_lstore(k, t->sc, add(t, mul(t, var(t, j),
	    c64(t, NLANES)), ks_x_lane(k)), expf_of(t, bin(t, KS_OP_SUB,
	    ks_x_lload(k, t->sc, add(t, mul(t, var(t, j), c64(t, NLANES)),
	    ks_x_lane(k))), ks_x_lload(k, t->mcl, bin(t, KS_OP_DIV,
	    var(t, j), c64(t, CH / NLANES)))))));
}

/*
 * The e/V pass of one chunk, appended to BLOCK (after the barrier that
 * publishes sc): for p in [c0, cend), e = exp(s_p - mc), lc += e, a_c[d]
 * = fma(e, v_p[d], a_c[d]).  lc and a_c were set to 0.0 by the caller.
 */
static void ev_pass(attn_t *t, ks_stmt_t *block)
{
	ks_ir_kernel_t *k = t->k;
	ks_stmt_t *loop, *body, *lb;
	int p, vo, e[G_MAX], g, j, d, vv;

	p = ks_ir_var(k, "pv", KS_TY_I64, KS_VAR_UNIFORM);
	loop = ks_s_for(k, p, var(t, t->c0), var(t, t->cend), 1);
	ks_s_append(k, block, loop);
	body = loop->body;
	vo = decl(t, body, "vo", KS_TY_I64, KS_VAR_UNIFORM, pos_off(t, p));
	for (g = 0; g < t->nh; g++) {
		e[g] = decl_gj(t, body, "e", g, -1, KS_TY_F32, KS_VAR_UNIFORM,
		    ks_x_lload(k, t->sc, sc_index(t, g, p)));
		assign(t, body, t->lc[g], add(t, var(t, t->lc[g]),
		    var(t, e[g])));
	}
	lb = lanes(t, body);
	if (t->nj == 0) {
		lb = d_loop(t, lb, "dv", &d);
		ks_s_append(k, lb, ks_s_lstore(k, t->lac, var(t, d),
		    ks_x_fma(k, var(t, e[0]), ks_x_load(k, t->vc,
		    add(t, var(t, vo), var(t, d))), ks_x_lload(k, t->lac,
		    var(t, d)))));
		return;
	}
	for (j = 0; j < t->nj; j++) {
		vv = decl_gj(t, lb, "vv", j, -1, KS_TY_F32, KS_VAR_LANE,
		    kv_elem(t, t->vc, vo, j));
		for (g = 0; g < t->nh; g++)
			assign(t, lb, t->ac[g][j], ks_x_fma(k, var(t, e[g]),
			    var(t, vv), var(t, t->ac[g][j])));
	}
}

/*
 * The merge of the chunk into the state, appended to BLOCK: chunk 0 is
 * copied, a later chunk merged (see the header).  No barrier or reduction
 * inside, so the uniform IF is safe on every backend.
 */
static void merge(attn_t *t, ks_stmt_t *block)
{
	ks_ir_kernel_t *k = t->k;
	ks_stmt_t *cond, *first, *later, *lb;
	int mn[G_MAX], f[G_MAX], gg[G_MAX], g, j, d;

	/* 0 < c0, not c0 == 0: clang warns about `if ((a == b))`, the
	 * emitter's parentheses, on every PoCL build. */
	cond = ks_s_if(k, bin(t, KS_OP_LT, c64(t, 0), var(t, t->c0)));
	cond->orelse = ks_s_block(k);
	first = cond->orelse;
	later = cond->body;
	ks_s_append(k, block, cond);
	for (g = 0; g < t->nh; g++) {
		assign(t, first, t->m[g], var(t, t->mc[g]));
		assign(t, first, t->l[g], var(t, t->lc[g]));
	}
	lb = lanes(t, first);
	if (t->nj == 0) {
		lb = d_loop(t, lb, "dc", &d);
		ks_s_append(k, lb, ks_s_lstore(k, t->la, var(t, d),
		    ks_x_lload(k, t->lac, var(t, d))));
	} else {
		for (g = 0; g < t->nh; g++)
			for (j = 0; j < t->nj; j++)
				assign(t, lb, t->a[g][j],
				    var(t, t->ac[g][j]));
	}

	for (g = 0; g < t->nh; g++) {
		mn[g] = decl_gj(t, later, "mn", g, -1, KS_TY_F32,
		    KS_VAR_UNIFORM, bin(t, KS_OP_MAX, var(t, t->m[g]),
		    var(t, t->mc[g])));
		f[g] = decl_gj(t, later, "f", g, -1, KS_TY_F32,
		    KS_VAR_UNIFORM, expf_of(t, bin(t, KS_OP_SUB,
		    var(t, t->m[g]), var(t, mn[g]))));
		gg[g] = decl_gj(t, later, "g", g, -1, KS_TY_F32,
		    KS_VAR_UNIFORM, expf_of(t, bin(t, KS_OP_SUB,
		    var(t, t->mc[g]), var(t, mn[g]))));
		assign(t, later, t->l[g], add(t, mul(t,
		    var(t, t->l[g]), var(t, f[g])), mul(t, var(t, t->lc[g]),
		    var(t, gg[g]))));
	}
	lb = lanes(t, later);
	if (t->nj == 0) {
		lb = d_loop(t, lb, "dm", &d);
		ks_s_append(k, lb, ks_s_lstore(k, t->la, var(t, d), add(t,
		    mul(t, ks_x_lload(k, t->la, var(t, d)), var(t, f[0])),
		    mul(t, ks_x_lload(k, t->lac, var(t, d)), var(t, gg[0])))));
	} else {
		for (g = 0; g < t->nh; g++)
			for (j = 0; j < t->nj; j++)
				assign(t, lb, t->a[g][j], add(t, mul(t,
				    var(t, t->a[g][j]), var(t, f[g])), mul(t,
				    var(t, t->ac[g][j]), var(t, gg[g]))));
	}
	for (g = 0; g < t->nh; g++)
		assign(t, later, t->m[g], var(t, mn[g]));
}

/* The stores of o, appended to BLOCK: a / l where n > 0, else 0.0; nothing
 * where the shape is not served (ok false). */
static void store_out(attn_t *t, ks_stmt_t *block)
{
	ks_ir_kernel_t *k = t->k;
	ks_stmt_t *okif, *lb, *has;
	int g, j, d;
	ks_expr_t *idx;

	okif = ks_s_if(k, ok_expr(t));
	ks_s_append(k, block, okif);
	lb = lanes(t, okif->body);
	if (t->nj == 0) {
		lb = d_loop(t, lb, "dout", &d);
		has = ks_s_if(k, bin(t, KS_OP_LT, c64(t, 0), var(t, t->n)));
		has->orelse = ks_s_block(k);
		ks_s_append(k, lb, has);
		ks_s_append(k, has->body, ks_s_store(k, t->o, add(t,
		    var(t, t->qo[0]), var(t, d)), bin(t, KS_OP_DIV,
		    ks_x_lload(k, t->la, var(t, d)), var(t, t->l[0]))));
		ks_s_append(k, has->orelse, ks_s_store(k, t->o, add(t,
		    var(t, t->qo[0]), var(t, d)), f32c(t, 0.0f)));
		return;
	}
	has = ks_s_if(k, bin(t, KS_OP_LT, c64(t, 0), var(t, t->n)));
	has->orelse = ks_s_block(k);
	ks_s_append(k, lb, has);
	for (g = 0; g < t->nh; g++)
		for (j = 0; j < t->nj; j++) {
			idx = add(t, var(t, t->qo[g]), add(t,
			    c64(t, (int64_t)NLANES * j), ks_x_lane(k)));
			ks_s_append(k, has->body, ks_s_store(k, t->o, idx,
			    bin(t, KS_OP_DIV, var(t, t->a[g][j]),
			    var(t, t->l[g]))));
			idx = add(t, var(t, t->qo[g]), add(t,
			    c64(t, (int64_t)NLANES * j), ks_x_lane(k)));
			ks_s_append(k, has->orelse, ks_s_store(k, t->o, idx,
			    f32c(t, 0.0f)));
		}
}

/*
 * The grid and work-group coordinates of prefill and paged: one group per
 * (b, t, h), or per (b, t, kvh) for gqa, t the query row, fastest last.
 */
static void rows_prologue(attn_t *t, int gqa, int *b, int *row, int *h0,
    int *kvh)
{
	ks_ir_kernel_t *k = t->k;
	ks_stmt_t *body = k->body;
	int heads = gqa ? t->Hkv : t->Hq;

	k->grid = mul(t, mul(t, par(t, t->B), par(t, t->T)),
	    par(t, heads));
	*b = decl(t, body, "b", KS_TY_I64, KS_VAR_UNIFORM, bin(t, KS_OP_DIV,
	    ks_x_group(k), mul(t, par(t, t->T), par(t, heads))));
	*row = decl(t, body, "t", KS_TY_I64, KS_VAR_UNIFORM, bin(t,
	    KS_OP_REM, bin(t, KS_OP_DIV, ks_x_group(k), par(t, heads)),
	    par(t, t->T)));
	if (gqa) {
		*kvh = decl(t, body, "kvh", KS_TY_I64, KS_VAR_UNIFORM, bin(t,
		    KS_OP_REM, ks_x_group(k), par(t, t->Hkv)));
		*h0 = decl(t, body, "h0", KS_TY_I64, KS_VAR_UNIFORM,
		    mul(t, var(t, *kvh), group_expr(t)));
		return;
	}
	*h0 = decl(t, body, "h", KS_TY_I64, KS_VAR_UNIFORM, bin(t,
	    KS_OP_REM, ks_x_group(k), par(t, t->Hq)));
	*kvh = decl(t, body, "kvh", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(t, KS_OP_DIV, var(t, *h0), group_expr(t)));
}

/*
 * The prologue: grid, work-group coordinates, n, ok, offsets, q in lane
 * variables (fixed D) and the state (m, l, a).
 */
static void prologue(attn_t *t, int gqa)
{
	ks_ir_kernel_t *k = t->k;
	ks_stmt_t *body = k->body, *lb;
	ks_expr_t *nclamp;
	int b, h0, kvh, g, j, d, row = -1;

	if (t->form != FORM_DECODE) {
		rows_prologue(t, gqa, &b, &row, &h0, &kvh);
	} else if (gqa) {
		k->grid = mul(t, par(t, t->B), par(t, t->Hkv));
		b = decl(t, body, "b", KS_TY_I64, KS_VAR_UNIFORM, bin(t,
		    KS_OP_DIV, ks_x_group(k), par(t, t->Hkv)));
		kvh = decl(t, body, "kvh", KS_TY_I64, KS_VAR_UNIFORM, bin(t,
		    KS_OP_REM, ks_x_group(k), par(t, t->Hkv)));
		h0 = decl(t, body, "h0", KS_TY_I64, KS_VAR_UNIFORM,
		    mul(t, var(t, kvh), group_expr(t)));
	} else {
		k->grid = mul(t, par(t, t->B), par(t, t->Hq));
		b = decl(t, body, "b", KS_TY_I64, KS_VAR_UNIFORM, bin(t,
		    KS_OP_DIV, ks_x_group(k), par(t, t->Hq)));
		h0 = decl(t, body, "h", KS_TY_I64, KS_VAR_UNIFORM, bin(t,
		    KS_OP_REM, ks_x_group(k), par(t, t->Hq)));
		kvh = decl(t, body, "kvh", KS_TY_I64, KS_VAR_UNIFORM,
		    bin(t, KS_OP_DIV, var(t, h0), group_expr(t)));
	}
	/* n = clamp(lens[b], 0, S), 0 where the shape is not served; the
	 * causal rows: n = max(n - T + t + 1, 0), where row t sits at
	 * position n - T + t and sees the positions up to it. */
	t->b = b;
	nclamp = bin(t, KS_OP_MIN, bin(t, KS_OP_MAX, ks_x_cast(k, KS_TY_I64,
	    ks_x_load(k, t->lens, var(t, b))), c64(t, 0)),
	    t->form == FORM_PAGED ? mul(t, par(t, t->MB), par(t, t->BS)) :
	    par(t, t->S));
	if (t->form != FORM_DECODE)
		nclamp = bin(t, KS_OP_MAX, add(t, bin(t, KS_OP_SUB, nclamp,
		    par(t, t->T)), add(t, var(t, row), c64(t, 1))),
		    c64(t, 0));
	t->n = decl(t, body, "n", KS_TY_I64, KS_VAR_UNIFORM,
	    ks_x_select(k, ok_expr(t), nclamp, c64(t, 0)));
	if (t->nj == 0)
		t->dn = decl(t, body, "dn", KS_TY_I64, KS_VAR_UNIFORM,
		    ks_x_select(k, ok_expr(t), par(t, t->D), c64(t, 0)));
	for (g = 0; g < t->nh; g++)
		t->qo[g] = decl_gj(t, body, "qo", g, -1, KS_TY_I64,
		    KS_VAR_UNIFORM, mul(t, add(t, mul(t, row < 0 ?
		    var(t, b) : add(t, mul(t, var(t, b), par(t, t->T)),
		    var(t, row)), par(t, t->Hq)), add(t, var(t, h0),
		    c64(t, g))), par(t, t->D)));
	if (t->form == FORM_PAGED)
		t->kvo = decl(t, body, "kvo", KS_TY_I64, KS_VAR_UNIFORM,
		    mul(t, var(t, kvh), par(t, t->D)));
	else
		t->kvo = decl(t, body, "kvo", KS_TY_I64, KS_VAR_UNIFORM,
		    mul(t, add(t, mul(t, mul(t, var(t, b), par(t,
		    t->form == FORM_PREFILL ? t->Sc : t->S)), par(t, t->Hkv)),
		    var(t, kvh)), par(t, t->D)));
	for (g = 0; g < t->nh; g++) {
		t->m[g] = decl_gj(t, body, "m", g, -1, KS_TY_F32,
		    KS_VAR_UNIFORM, f32c(t, -INFINITY));
		t->l[g] = decl_gj(t, body, "l", g, -1, KS_TY_F32,
		    KS_VAR_UNIFORM, f32c(t, 0.0f));
	}
	if (t->nj == 0) {
		/* a = 0 so that n = 0 reads nothing undefined. */
		lb = lanes(t, body);
		lb = d_loop(t, lb, "d0", &d);
		ks_s_append(k, lb, ks_s_lstore(k, t->la, var(t, d),
		    f32c(t, 0.0f)));
		return;
	}
	for (g = 0; g < t->nh; g++)
		for (j = 0; j < t->nj; j++) {
			t->qv[g][j] = decl_gj(t, body, "q", g, j, KS_TY_F32,
			    KS_VAR_LANE, NULL);
			t->a[g][j] = decl_gj(t, body, "a", g, j, KS_TY_F32,
			    KS_VAR_LANE, f32c(t, 0.0f));
		}
	lb = lanes(t, body);
	for (g = 0; g < t->nh; g++)
		for (j = 0; j < t->nj; j++)
			assign(t, lb, t->qv[g][j], ks_x_load(k, t->q, add(t,
			    var(t, t->qo[g]), add(t, c64(t, (int64_t)NLANES *
			    j), ks_x_lane(k)))));
}

/* The extents of prefill's and paged's buffers (decode's are declared
 * with the other kernels'). */
static void buffer_dims(attn_t *t)
{
	const char *kv = t->form == FORM_PAGED ? "NB,BS,Hkv,D" : "B,Sc,Hkv,D";

	ks_ir_buffer_dims(t->k, t->q, "B,T,Hq,D");
	ks_ir_buffer_dims(t->k, t->kc, kv);
	ks_ir_buffer_dims(t->k, t->vc, kv);
	if (t->form == FORM_PAGED)
		ks_ir_buffer_dims(t->k, t->bt, "B,MB");
	ks_ir_buffer_dims(t->k, t->lens, "B");
	ks_ir_buffer_dims(t->k, t->o, "B,T,Hq,D");
}

static ks_ir_kernel_t *attn_build(const ks_spec_t *spec, const char *variant)
{
	attn_t t;
	ks_ir_kernel_t *k;
	ks_stmt_t *body, *chunk, *cb, *lb;
	int gqa = 0, g, j, d;
	int64_t nh = 1, nj = 0;
	const attn_form_t *f = form_of(spec);

	if (strcmp(variant, "gqa") == 0) {
		nh = gqa_group(spec);
		if (nh == 0)
			return NULL;
		gqa = 1;
		nj = spec->dims[f->d].value / NLANES;
	} else if (strcmp(variant, "head_dim") == 0) {
		if (!is_fixed_d(&spec->dims[f->d]))
			return NULL;
		nj = spec->dims[f->d].value / NLANES;
	} else if (strcmp(variant, "general") != 0) {
		return NULL;
	}
	memset(&t, 0, sizeof t);
	k = ks_ir_new(f->name, variant, NLANES);
	t.k = k;
	t.form = f->kind;
	t.nh = (int)nh;
	t.nj = (int)nj;
	t.q = ks_ir_buffer(k, "q", spec->dtype, KS_ACCESS_READ);
	t.kc = ks_ir_buffer(k, "k", spec->dtype, KS_ACCESS_READ);
	t.vc = ks_ir_buffer(k, "v", spec->dtype, KS_ACCESS_READ);
	if (f->kind == FORM_PAGED)
		t.bt = ks_ir_buffer_i32(k, "block_table", KS_ACCESS_READ);
	t.lens = ks_ir_buffer_i32(k, "lens", KS_ACCESS_READ);
	t.o = ks_ir_buffer(k, "o", spec->dtype, KS_ACCESS_WRITE);
	ks_ir_buffer_dims(k, t.q, "B,Hq,D");
	ks_ir_buffer_dims(k, t.kc, "B,S,Hkv,D");
	ks_ir_buffer_dims(k, t.vc, "B,S,Hkv,D");
	ks_ir_buffer_dims(k, t.lens, "B");
	ks_ir_buffer_dims(k, t.o, "B,Hq,D");
	t.B = ks_ir_scalar(k, "B", KS_TY_I64);
	if (f->kind != FORM_DECODE)
		t.T = ks_ir_scalar(k, "T", KS_TY_I64);
	t.Hq = ks_ir_scalar(k, "Hq", KS_TY_I64);
	t.Hkv = ks_ir_scalar(k, "Hkv", KS_TY_I64);
	t.D = ks_ir_scalar(k, "D", KS_TY_I64);
	if (f->kind == FORM_PAGED) {
		t.BS = ks_ir_scalar(k, "BS", KS_TY_I64);
		t.MB = ks_ir_scalar(k, "MB", KS_TY_I64);
		t.NB = ks_ir_scalar(k, "NB", KS_TY_I64);
	} else {
		t.S = ks_ir_scalar(k, "S", KS_TY_I64);
	}
	if (f->kind == FORM_PREFILL)
		t.Sc = ks_ir_scalar(k, "Sc", KS_TY_I64);
	t.scale = ks_ir_scalar(k, "scale", KS_TY_F32);
	t.sc = ks_ir_local(k, "sc", CH * nh);
	t.mcl = ks_ir_local(k, "mcl", nh);
	if (nj == 0) {
		t.la = ks_ir_local(k, "a", D_MAX);
		t.lac = ks_ir_local(k, "ac", D_MAX);
	}
	if (f->kind != FORM_DECODE)
		buffer_dims(&t);
	body = k->body;
	prologue(&t, gqa);

	/* for c0 = 0 to n step 64: one chunk [c0, cend). */
	t.c0 = ks_ir_var(k, "c0", KS_TY_I64, KS_VAR_UNIFORM);
	chunk = ks_s_for(k, t.c0, c64(&t, 0), var(&t, t.n), CH);
	ks_s_append(k, body, chunk);
	cb = chunk->body;
	t.cend = decl(&t, cb, "cend", KS_TY_I64, KS_VAR_UNIFORM, bin(&t,
	    KS_OP_MIN, add(&t, var(&t, t.c0), c64(&t, CH)), var(&t, t.n)));
	for (g = 0; g < t.nh; g++) {
		t.mc[g] = decl_gj(&t, cb, "mc", g, -1, KS_TY_F32,
		    KS_VAR_UNIFORM, f32c(&t, -INFINITY));
		t.lc[g] = decl_gj(&t, cb, "lc", g, -1, KS_TY_F32,
		    KS_VAR_UNIFORM, f32c(&t, 0.0f));
		for (j = 0; j < t.nj; j++)
			t.ac[g][j] = decl_gj(&t, cb, "ac", g, j, KS_TY_F32,
			    KS_VAR_LANE, f32c(&t, 0.0f));
	}
	if (nj == 0) {
		lb = lanes(&t, cb);
		lb = d_loop(&t, lb, "dz", &d);
		ks_s_append(k, lb, ks_s_lstore(k, t.lac, var(&t, d),
		    f32c(&t, 0.0f)));
	}
	score_pass(&t, cb);
	ks_s_append(k, cb, ks_s_barrier(k));    /* sc stored -> read */
	exp_phase(&t, cb);
	ks_s_append(k, cb, ks_s_barrier(k));    /* e stored -> read */
	ev_pass(&t, cb);
	merge(&t, cb);
	ks_s_append(k, cb, ks_s_barrier(k));    /* sc read -> next stores */
	store_out(&t, body);
	return k;
}

const ks_kernel_def_t ks_kernel_attention_decode = {
	.name = "attention_decode",
	.summary = "o[b][h] = softmax_p(q[b][h] . k[b][p][h/G] * scale) "
	    "v[b][p][h/G] over p < clamp(lens[b], 0, S), G = Hq/Hkv; one "
	    "query token per sequence",
	.version = 1,
	.dims = decode_dims,
	.ndims = 5,
	.variants = attn_variants,
	.nvariants = 3,
	.select = attn_select,
	.guards = attn_guards,
	.check = attn_check,
	.build = attn_build,
	.probes = attn_probes,
	.nprobes = 2,
};

/* A kernel of query rows (T) of this builder: DIMS_, N dims, PROBES_. */
#define ROWS_KERNEL(name_, summary_, dims_, n, probes_) { \
	.name = name_, .summary = summary_, .version = 1, .dims = dims_, \
	.ndims = n, .variants = attn_variants, .nvariants = 3, \
	.select = attn_select, .guards = rows_guards, .check = attn_check, \
	.build = attn_build, .probes = probes_, .nprobes = 2, \
}

const ks_kernel_def_t ks_kernel_attention_prefill = ROWS_KERNEL(
    "attention_prefill", "causal attention of T query rows per sequence, "
    "row t at position n-T+t of n = clamp(lens[b], 0, S), over k, v of "
    "[B][Sc][Hkv][D] (rows of Sc positions); T = 1 is decode, a constant "
    "T of 2..8 a verify step", prefill_dims, 7, prefill_probes);

const ks_kernel_def_t ks_kernel_attention_paged = ROWS_KERNEL(
    "attention_paged", "attention_prefill over a paged KV cache: k, v of "
    "[NB][BS][Hkv][D], block_table[B][MB] names the block of each BS "
    "positions, n = clamp(lens[b], 0, MB*BS); T = 1 is decode",
    paged_dims, 8, paged_probes);
