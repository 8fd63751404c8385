/*
 * The gemm IR computes gemm in the canonical order: a small interpreter of
 * the IR runs each variant on small shapes, bit for bit against a plain-C
 * reference of the canonical order (and the variants against each other),
 * and the checker fails a reference of another order.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../specialize/specialize.h"
#include "../ref/ref.h"
#include "spec.h"

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(specialize, .init = setup);

/* ---- the IR computes gemm in the canonical order ---- */

/*
 * A reference interpreter of the IR for f32 buffers: enough to run the gemm
 * variants on small shapes and compare their bits with a plain-C
 * reference.  Loads and stores are bounds-checked, and every store is
 * counted, so a clamp or guard mistake shows up.
 */
typedef union {
	int64_t i;
	float f;
} val_t;

enum { MAXV = 256, MAXP = 8 };

typedef struct {
	const ks_ir_kernel_t *k;
	float *buf[MAXP];
	int64_t len[MAXP];
	int *stores;            /* per element of the written buffer */
	int64_t scalar[MAXP];
	int64_t group;
	val_t uni[MAXV];
	val_t lane[MAXV][32];
} interp_t;

static val_t ev(interp_t *in, const ks_expr_t *e, int lane);

static val_t bin_i64(ks_binop_t op, int64_t a, int64_t b)
{
	val_t r;

	switch (op) {
	case KS_OP_ADD: r.i = a + b; break;
	case KS_OP_SUB: r.i = a - b; break;
	case KS_OP_MUL: r.i = a * b; break;
	case KS_OP_DIV: r.i = a / b; break;
	case KS_OP_REM: r.i = a % b; break;
	case KS_OP_MIN: r.i = a < b ? a : b; break;
	case KS_OP_MAX: r.i = a > b ? a : b; break;
	case KS_OP_LT: r.i = a < b; break;
	case KS_OP_LE: r.i = a <= b; break;
	case KS_OP_EQ: r.i = a == b; break;
	case KS_OP_NE: r.i = a != b; break;
	case KS_OP_AND: r.i = a && b; break;
	case KS_OP_OR: r.i = a || b; break;
	case KS_OP_BAND: r.i = a & b; break;
	case KS_OP_BOR: r.i = a | b; break;
	case KS_OP_BXOR: r.i = a ^ b; break;
	case KS_OP_SHL: r.i = (int64_t)((uint64_t)a << b); break;
	case KS_OP_SHR: r.i = a >> b; break;
	default: cr_assert_fail("op %d", op);
	}
	return r;
}

static val_t bin_f32(ks_binop_t op, float a, float b)
{
	val_t r;

	switch (op) {
	case KS_OP_ADD: r.f = a + b; break;
	case KS_OP_SUB: r.f = a - b; break;
	case KS_OP_MUL: r.f = a * b; break;
	case KS_OP_DIV: r.f = a / b; break;
	case KS_OP_MIN: r.f = fminf(a, b); break;
	case KS_OP_MAX: r.f = fmaxf(a, b); break;
	case KS_OP_LT: r.i = a < b; break;
	case KS_OP_LE: r.i = a <= b; break;
	case KS_OP_EQ: r.i = a == b; break;
	case KS_OP_NE: r.i = a != b; break;
	default: cr_assert_fail("op %d", op);
	}
	return r;
}

static float reduce_tree(const val_t *v, ks_redop_t red)
{
	float t[32];
	int s, l;

	for (l = 0; l < 32; l++)
		t[l] = v[l].f;
	for (s = 16; s > 0; s /= 2)
		for (l = 0; l < s; l++)
			t[l] = red == KS_RED_SUM ? t[l] + t[l + s] :
			    fmaxf(t[l], t[l + s]);
	return t[0];
}

static val_t ev(interp_t *in, const ks_expr_t *e, int lane)
{
	const ks_ir_kernel_t *k = in->k;
	val_t r = { 0 }, a, b, c;

	switch (e->kind) {
	case KS_X_CONST:
		if (e->type == KS_TY_F32)
			r.f = e->f;
		else
			r.i = e->i;
		return r;
	case KS_X_PARAM:
		r.i = in->scalar[e->param];
		return r;
	case KS_X_VAR:
		if (k->vars[e->var].scope == KS_VAR_LANE) {
			cr_assert_geq(lane, 0);
			return in->lane[e->var][lane];
		}
		return in->uni[e->var];
	case KS_X_GROUP:
		r.i = in->group;
		return r;
	case KS_X_LANE:
		r.i = lane;
		return r;
	case KS_X_BIN:
		a = ev(in, e->a, lane);
		b = ev(in, e->b, lane);
		return e->a->type == KS_TY_F32 ? bin_f32(e->op, a.f, b.f) :
		    bin_i64(e->op, a.i, b.i);
	case KS_X_FMA:
		a = ev(in, e->a, lane);
		b = ev(in, e->b, lane);
		c = ev(in, e->c, lane);
		r.f = fmaf(a.f, b.f, c.f);
		return r;
	case KS_X_CAST:
		a = ev(in, e->a, lane);
		if (e->type == KS_TY_F32 && e->a->type != KS_TY_F32)
			r.f = (float)a.i;
		else if (e->type == KS_TY_I64 && e->a->type == KS_TY_F32)
			r.i = (int64_t)a.f;
		else
			r = a;
		return r;
	case KS_X_LOAD:
		a = ev(in, e->a, lane);
		cr_assert(a.i >= 0 && a.i < in->len[e->param],
		    "load %s[%lld] out of bounds", k->params[e->param].name,
		    (long long)a.i);
		r.f = in->buf[e->param][a.i];
		return r;
	case KS_X_SELECT:
		return ev(in, e->a, lane).i ? ev(in, e->b, lane) :
		    ev(in, e->c, lane);
	case KS_X_REDUCE:
		r.f = reduce_tree(in->lane[e->var], e->red);
		return r;
	case KS_X_UN:
		a = ev(in, e->a, lane);
		if (e->type == KS_TY_I64) {
			r.i = e->un == KS_UN_NEG ? -a.i : a.i < 0 ? -a.i : a.i;
			return r;
		}
		switch (e->un) {
		case KS_UN_NEG: r.f = -a.f; break;
		case KS_UN_ABS: r.f = fabsf(a.f); break;
		case KS_UN_SQRT: r.f = sqrtf(a.f); break;
		case KS_UN_EXP: r.f = expf(a.f); break;
		case KS_UN_F16: r.f = ref_f16_to_f32((uint16_t)a.i); break;
		case KS_UN_COUNT: cr_assert_fail("unop");
		}
		return r;
	case KS_X_QDOT:
		return ev(in, e->a, lane);
	case KS_X_LLOAD:
		break;          /* gemm has no local arrays */
	}
	cr_assert_fail("expr kind %d", e->kind);
	return r;
}

static void set_var(interp_t *in, int var, val_t v, int lane)
{
	int l;

	if (in->k->vars[var].scope == KS_VAR_UNIFORM)
		in->uni[var] = v;
	else if (lane >= 0)
		in->lane[var][lane] = v;
	else
		for (l = 0; l < 32; l++)
			in->lane[var][l] = v;
}

static void exec(interp_t *in, const ks_stmt_t *s, int lane)
{
	val_t v, idx;
	int i, l;

	switch (s->kind) {
	case KS_S_BLOCK:
		for (i = 0; i < s->nitems; i++)
			exec(in, s->items[i], lane);
		break;
	case KS_S_DECL:
		if (s->a != NULL)
			set_var(in, s->var, ev(in, s->a, lane), lane);
		break;
	case KS_S_ASSIGN:
		set_var(in, s->var, ev(in, s->a, lane), lane);
		break;
	case KS_S_STORE:
		idx = ev(in, s->a, lane);
		v = ev(in, s->b, lane);
		cr_assert(idx.i >= 0 && idx.i < in->len[s->param],
		    "store out of bounds: %lld", (long long)idx.i);
		in->buf[s->param][idx.i] = v.f;
		in->stores[idx.i]++;
		break;
	case KS_S_FOR:
		for (v = ev(in, s->a, lane); v.i < ev(in, s->b, lane).i;
		    v.i += s->step) {
			set_var(in, s->var, v, lane);
			exec(in, s->body, lane);
		}
		break;
	case KS_S_IF:
		if (ev(in, s->a, lane).i)
			exec(in, s->body, lane);
		else if (s->orelse != NULL)
			exec(in, s->orelse, lane);
		break;
	case KS_S_LANES:
		for (l = 0; l < in->k->nlanes; l++)
			exec(in, s->body, l);
		break;
	case KS_S_PREFETCH:             /* a hint: no value changes */
		idx = ev(in, s->a, lane);
		cr_assert(idx.i >= 0 && idx.i < in->len[s->param],
		    "prefetch out of bounds: %lld", (long long)idx.i);
		break;
	case KS_S_LSTORE:
	case KS_S_BARRIER:
		cr_assert_fail("gemm has no local arrays");
	}
}

/* Runs gemm IR K on x (MxK) and W (NxK) into y (MxN); M, N, K given for
 * the dynamic ones. */
static void run_gemm(const ks_ir_kernel_t *k, int64_t m, int64_t n,
    int64_t kk, float *x, float *w, float *y)
{
	interp_t *in = calloc(1, sizeof(*in));
	int64_t grid, g, i;

	cr_assert_not_null(in);
	cr_assert_leq(k->nvars, MAXV);
	in->k = k;
	in->buf[0] = x;
	in->len[0] = m * kk;
	in->buf[1] = w;
	in->len[1] = n * kk;
	in->buf[2] = y;
	in->len[2] = m * n;
	in->scalar[3] = m;
	in->scalar[4] = n;
	in->scalar[5] = kk;
	in->stores = calloc((size_t)(m * n), sizeof(int));
	grid = ev(in, k->grid, -1).i;
	for (g = 0; g < grid; g++) {
		in->group = g;
		exec(in, k->body, -1);
	}
	for (i = 0; i < m * n; i++)
		cr_assert_eq(in->stores[i], 1, "y[%lld] stored %d times",
		    (long long)i, in->stores[i]);
	free(in->stores);
	free(in);
}

/* The canonical order (docs/kernels.md), in plain C. */
static void ref_canonical(int64_t m, int64_t n, int64_t kk, const float *x,
    const float *w, float *y)
{
	int64_t i, j, p;

	for (i = 0; i < m; i++)
		for (j = 0; j < n; j++) {
			val_t acc[32];

			for (p = 0; p < 32; p++)
				acc[p].f = 0.0f;
			for (p = 0; p < kk; p++)
				acc[p % 32].f = fmaf(x[i * kk + p],
				    w[j * kk + p], acc[p % 32].f);
			y[i * n + j] = reduce_tree(acc, KS_RED_SUM);
		}
}

/* A planted bug: the sequential order. */
static void ref_sequential(int64_t m, int64_t n, int64_t kk,
    const float *x, const float *w, float *y)
{
	int64_t i, j, p;

	for (i = 0; i < m; i++)
		for (j = 0; j < n; j++) {
			float acc = 0.0f;

			for (p = 0; p < kk; p++)
				acc = fmaf(x[i * kk + p], w[j * kk + p], acc);
			y[i * n + j] = acc;
		}
}

static float *random_floats(int64_t n, uint32_t seed)
{
	float *p = malloc((size_t)n * sizeof(float));
	int64_t i;

	cr_assert_not_null(p);
	for (i = 0; i < n; i++) {
		seed = seed * 1664525u + 1013904223u;
		p[i] = (float)((int32_t)(seed >> 8) - (1 << 23)) / 1048576.0f;
	}
	return p;
}

/* Runs the specialization of (m, n, k) given as constants where CONST
 * says, and compares its bits with the canonical reference. */
static void check_gemm_bits(int64_t m, int64_t n, int64_t kk, int consts)
{
	float *x = random_floats(m * kk, 1), *w = random_floats(n * kk, 2);
	float *y = calloc((size_t)(m * n), sizeof(float));
	float *ref = calloc((size_t)(m * n), sizeof(float));
	ks_ir_kernel_t *k = gemm(KS_DTYPE_F32, consts & 1 ? m : DYN,
	    consts & 2 ? n : DYN, consts & 4 ? kk : DYN);

	run_gemm(k, m, n, kk, x, w, y);
	ref_canonical(m, n, kk, x, w, ref);
	cr_assert(memcmp(y, ref, (size_t)(m * n) * sizeof(float)) == 0,
	    "gemm %s M=%lld N=%lld K=%lld (consts %d) differs from the "
	    "canonical reference", k->variant, (long long)m, (long long)n,
	    (long long)kk, consts);
	ks_ir_free(k);
	free(x);
	free(w);
	free(y);
	free(ref);
}

Test(specialize, gemm_ir_matches_canonical_reference_bitwise)
{
	static const int64_t shapes[][3] = {
		{ 1, 9, 100 }, { 3, 7, 70 }, { 2, 8, 64 }, { 1, 1, 1 },
		{ 4, 5, 31 }, { 1, 4, 32 }, { 2, 13, 129 },
	};
	size_t i;
	int consts;

	for (i = 0; i < sizeof shapes / sizeof *shapes; i++)
		for (consts = 0; consts < 8; consts++)
			check_gemm_bits(shapes[i][0], shapes[i][1],
			    shapes[i][2], consts);
}

Test(specialize, gemv_m1_and_general_agree_bitwise)
{
	const int64_t n = 11, kk = 97;
	float *x = random_floats(kk, 3), *w = random_floats(n * kk, 4);
	float y1[11], yg[11];
	ks_spec_t spec;
	ks_ir_kernel_t *m1 = gemm(KS_DTYPE_F32, 1, n, kk), *g;
	char err[256];

	cr_assert_eq(gemm_spec(KS_DTYPE_F32, KS_MODE_EXACT, DYN, n, kk, &spec,
	    err, sizeof err), KS_OK);
	cr_assert_eq(ks_specialize(&spec, &g, err, sizeof err), KS_OK);
	cr_assert_str_eq(m1->variant, "gemv_m1");
	cr_assert_str_eq(g->variant, "general");
	run_gemm(m1, 1, n, kk, x, w, y1);
	run_gemm(g, 1, n, kk, x, w, yg);
	cr_assert(memcmp(y1, yg, sizeof y1) == 0);
	ks_ir_free(m1);
	ks_ir_free(g);
	free(x);
	free(w);
}

/* small_m does the arithmetic of general for every output: the same bits
 * at M = 2 and M = 3, with both K tails and a partial row block, and its
 * loads and stores stay in bounds (the interpreter checks them). */
Test(specialize, small_m_and_general_agree_bitwise)
{
	static const int64_t shapes[][3] = {
		{ 2, 11, 97 }, { 3, 5, 70 }, { 2, 1, 31 }, { 3, 9, 64 },
	};
	size_t i;

	for (i = 0; i < sizeof shapes / sizeof *shapes; i++) {
		int64_t m = shapes[i][0], n = shapes[i][1], kk = shapes[i][2];
		float *x = random_floats(m * kk, 7), *w = random_floats(n * kk,
		    8);
		float *ys = calloc((size_t)(m * n), sizeof(float));
		float *yg = calloc((size_t)(m * n), sizeof(float));
		ks_ir_kernel_t *s = gemm(KS_DTYPE_F32, m, n, kk);
		ks_ir_kernel_t *sd = gemm(KS_DTYPE_F32, m, DYN, DYN);
		ks_ir_kernel_t *g = gemm(KS_DTYPE_F32, DYN, n, kk);

		cr_assert_str_eq(s->variant, "small_m");
		cr_assert_str_eq(sd->variant, "small_m");
		cr_assert_str_eq(g->variant, "general");
		run_gemm(g, m, n, kk, x, w, yg);
		run_gemm(s, m, n, kk, x, w, ys);
		cr_assert(memcmp(ys, yg, sizeof(float) * (size_t)(m * n)) == 0,
		    "M=%lld N=%lld K=%lld", (long long)m, (long long)n,
		    (long long)kk);
		memset(ys, 0, sizeof(float) * (size_t)(m * n));
		run_gemm(sd, m, n, kk, x, w, ys);
		cr_assert(memcmp(ys, yg, sizeof(float) * (size_t)(m * n)) == 0);
		ks_ir_free(s);
		ks_ir_free(sd);
		ks_ir_free(g);
		free(x);
		free(w);
		free(ys);
		free(yg);
	}
}

Test(specialize, bitwise_checker_catches_a_sequential_order_reference)
{
	const int64_t m = 2, n = 6, kk = 200;
	float *x = random_floats(m * kk, 5), *w = random_floats(n * kk, 6);
	float y[12], ref[12];
	ks_ir_kernel_t *k = gemm(KS_DTYPE_F32, DYN, DYN, DYN);

	run_gemm(k, m, n, kk, x, w, y);
	ref_sequential(m, n, kk, x, w, ref);
	cr_assert(memcmp(y, ref, sizeof y) != 0,
	    "the planted reference went unnoticed");
	ks_ir_free(k);
	free(x);
	free(w);
}
