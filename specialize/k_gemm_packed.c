/*
 * gemm_packed: gemm's y[m][n] = sum_k x[m][k] * W[n][k] with x and W in
 * the lane-major panel layout gemm_pack_x and gemm_pack_w write
 * (docs/kernels.md, "gemm_packed"), for prefill on CPUs.
 *
 * xp holds x in panels of PM = 8 rows, Wp holds W in panels of PN = 32
 * rows: with J = ceil(K / 32), element (t, l, j, i) of a panel layout of
 * T rows, at ((t * 32 + l) * J + j) * T + i, is row t * T + i at column
 * l + 32 j.  So one canonical lane l of a panel is J consecutive groups of
 * T values.  y is M x N, row-major.  xp and y are of the request dtype,
 * Wp of the weight dtype (wdtype f16 or bf16 beside f32, as gemm's W).
 * Parameters, in ABI order: xp (read), Wp (read), y (write), M, N, K (i64).
 *
 * Canonical order: gemm's, bit for bit.  Lane l of 32 accumulates the k
 * with k % 32 == l in increasing k, acc = fma(x, W, acc) in f32 from 0.0;
 * the 32 lane sums combine in the tree with strides 16, 8, 4, 2, 1 (t[l]
 * = t[l] + t[l + s], lower lane on the left); the sum is stored once,
 * converted to the dtype round-to-nearest-even.
 *
 * Schedule (changes no arithmetic).  gemm's variants hold the 32 lanes of
 * one output side by side, so every x and W element is a vector operand
 * and the work per loaded byte is bounded by a tile of outputs that must
 * fit the registers twice over.  Here the work-group's 32 lanes are 32
 * columns n of one W panel, and the 32 canonical lanes run one after
 * another: for canonical lane l the group computes the PM x PN tile's
 * lane-l sums as a rank-1 update per k = l + 32 j: 8 values of x
 * (uniform: broadcasts) times one 32-wide vector of W, into 8
 * accumulators (16 AVX-512 registers).  That is the register tile of a
 * BLAS micro-kernel, and each k reads 8 + 32 elements that the panel
 * layouts make consecutive.  (12 rows, 24 accumulator registers beside 12
 * broadcasts, more than the 32 registers, measured 90 GFLOP/s against 120
 * at 8 rows.  With 16 lanes and two W vectors each, bf16 weights
 * vectorized at 256 bits.)
 * The canonical lanes run in the order of the tree's leaves (l = the
 * 5-bit reversal of i for i = 0..31: 0, 16, 8, 24, 4, ...), and after each
 * one its sums join the tree at once: a stack of 5 partial sums per output
 * (s0..s4), where leaf i pairs with the partials of its trailing one bits,
 * the stored (lower-lane) one on the left.  After i = 31 the accumulators
 * hold the root, which is stored under n < N and m < M.
 *
 * A work-group takes G = 4 x panels against one W panel; groups run W
 * panel major, so the groups of one W panel (32 x K: 512 KB at K = 4096
 * in f32) follow each other and read it from the second-level cache
 * while the x panels stream past.  Within a group a canonical lane's k
 * run in chunks of KC = 128: for each chunk the G x panels in turn run
 * it against W's chunk (16 KB in f32), which stays in the first-level cache,
 * the sums carried over between chunks in lane variables sv (the same
 * fmas in the same order).  Beside each rank-1 update the next x block is
 * prefetched (the next panel's chunk, else the lane's next chunk or the
 * next lane's first), and in the last panel W's next chunk: a lane of an
 * x panel is a separate 4 KB run at K = 4096, and the hardware
 * prefetchers stop at pages.  Measured at M = 512 (docs/kernels.md):
 * chunks took N = 4096, K = 14336 from 108 to 120 GFLOP/s, the
 * prefetches N = K = 4096 from 124 to 143 (an intrinsics model of this
 * loop); before them, bands of 8, 16, 32 and 64 x panels per W panel gave
 * 81, 97, 113 and 115 GFLOP/s at N = K = 4096 (all 64, W panel major, is
 * best), and G = 4 took the K = 14336 shape from 90 to 108 (G = 8: 113,
 * but a compile of 2.9 s instead of 1.0 s).  KC = 128 against 64 on an
 * AMD EPYC (Zen 4, 32 KB first-level cache), four interleaved runs of
 * the three prefill shapes: 98% of OpenBLAS's GFLOP/s on average against
 * 92% (256: 98%, 32: 86%); each chunk saves and reloads the 16
 * accumulator registers, so fewer chunks cost less.  Rows past M - 1
 * and columns past N - 1 are the panels' padding (the packs write zeros
 * there): computed, never stored.  One variant, `general`: any M, N, K,
 * constant or dynamic.
 */
#include "k_panel.h"

#include <stdio.h>
#include <string.h>

enum {
	LANES32 = 32,           /* canonical lanes */
	NL = 32,                /* work-group lanes: columns of a W panel */
	NV = 1,                 /* columns per lane */
	PM = 8,                 /* rows of an x panel */
	PN = NV * NL,           /* rows of a W panel */
	NACC = PM * NV,         /* accumulators per lane */
	LEVELS = 5,             /* log2(32): the tree's stack depth */
	G = 4,                  /* x panels per work-group (measured) */
	KC = 128,                /* k per lane chunk (measured) */
};

static const char *const gp_dims[] = { "M", "N", "K" };
enum { DIM_M, DIM_N, DIM_K };

static const char *const gp_variants[] = { "general" };
static const char *const gp_guards[] = {
	"any M, N, K, constant or dynamic",
};

static const char *gp_select(const ks_spec_t *spec)
{
	(void)spec;
	return "general";
}

static int gp_check(const ks_spec_t *spec, char *err, size_t errlen)
{
	const ks_dim_t *m = &spec->dims[DIM_M], *n = &spec->dims[DIM_N];
	int64_t e;
	int rc = ks_panel_check(m, &spec->dims[DIM_K], PM, "xp", err, errlen);

	rc = rc ? rc : ks_panel_check(n, &spec->dims[DIM_K], PN, "Wp", err,
	    errlen);
	if (rc || !m->is_const || !n->is_const)
		return rc;
	if (!ks_mul_overflow(m->value, n->value, &e) && e <= KS_MAX_ELEMS)
		return KS_OK;
	if (err != NULL && errlen > 0)
		snprintf(err, errlen, "buffer y of M*N = %lld*%lld elements "
		    "exceeds the limit of %lld", (long long)m->value,
		    (long long)n->value, (long long)KS_MAX_ELEMS);
	return KS_E_TOO_LARGE;
}

/* ---- the builder ---- */

typedef struct {
	ks_ir_kernel_t *k;
	int xp, Wp, y, M, N, K;
} gp_t;

static ks_expr_t *c64(gp_t *g, int64_t v)
{
	return ks_x_i64(g->k, v);
}

static ks_expr_t *par(gp_t *g, int p)
{
	return ks_x_param(g->k, p);
}

static ks_expr_t *var(gp_t *g, int v)
{
	return ks_x_var(g->k, v);
}

static ks_expr_t *bin(gp_t *g, ks_binop_t op, ks_expr_t *a, ks_expr_t *b)
{
	return ks_x_bin(g->k, op, a, b);
}

static ks_expr_t *add(gp_t *g, ks_expr_t *a, ks_expr_t *b)
{
	return bin(g, KS_OP_ADD, a, b);
}

static ks_expr_t *mul(gp_t *g, ks_expr_t *a, ks_expr_t *b)
{
	return bin(g, KS_OP_MUL, a, b);
}

static ks_expr_t *ceil_div(gp_t *g, ks_expr_t *a, int64_t b)
{
	return bin(g, KS_OP_DIV, add(g, a, c64(g, b - 1)), c64(g, b));
}

static int decl(gp_t *g, ks_stmt_t *block, const char *name, ks_ty_t t,
    ks_var_scope_t scope, ks_expr_t *init)
{
	int v = ks_ir_var(g->k, name, t, scope);

	ks_s_append(g->k, block, ks_s_decl(g->k, v, init));
	return v;
}

/* Bit q of the uniform i64 variable I: (i / 2^q) % 2, a fresh tree. */
static ks_expr_t *bit(gp_t *g, int i, int q)
{
	return bin(g, KS_OP_REM, bin(g, KS_OP_DIV, var(g, i),
	    c64(g, (int64_t)1 << q)), c64(g, 2));
}

/* A LANES statement appended to BLOCK; returns its body. */
static ks_stmt_t *lanes_in(gp_t *g, ks_stmt_t *block)
{
	ks_stmt_t *l = ks_s_lanes(g->k);

	ks_s_append(g->k, block, l);
	return l->body;
}

/* In LANES body B: dst[e] = src[e], a lane's NACC values. */
static void copy_all(gp_t *g, ks_stmt_t *b, const int *dst, const int *src)
{
	int e;

	for (e = 0; e < NACC; e++)
		ks_s_append(g->k, b, ks_s_assign(g->k, dst[e],
		    var(g, src[e])));
}

/* In LANES body B: acc[e] = s[e] + acc[e], the stored partial (lower
 * lanes) on the left. */
static void join(gp_t *g, ks_stmt_t *b, const int *acc, const int *s)
{
	int e;

	for (e = 0; e < NACC; e++)
		ks_s_append(g->k, b, ks_s_assign(g->k, acc[e],
		    add(g, var(g, s[e]), var(g, acc[e]))));
}

/* The guarded stores of the root: y[(m0 + r) * N + n0 + NL h + lane]. */
static void store_root(gp_t *g, ks_stmt_t *block, int m0, int n0,
    const int *acc)
{
	ks_ir_kernel_t *k = g->k;
	ks_stmt_t *b = lanes_in(g, block), *guard;
	int r, h, col;

	for (h = 0; h < NV; h++) {
		char name[64];

		snprintf(name, sizeof name, "col%d_%d", m0, h);
		col = decl(g, b, name, KS_TY_I64, KS_VAR_LANE, add(g,
		    add(g, var(g, n0), c64(g, NL * h)), ks_x_lane(k)));
		for (r = 0; r < PM; r++) {
			ks_expr_t *row = add(g, var(g, m0), c64(g, r));

			guard = ks_s_if(k, bin(g, KS_OP_AND,
			    bin(g, KS_OP_LT, var(g, col), par(g, g->N)),
			    bin(g, KS_OP_LT, row, par(g, g->M))));
			ks_s_append(k, b, guard);
			ks_s_append(k, guard->body, ks_s_store(k, g->y,
			    add(g, mul(g, add(g, var(g, m0), c64(g, r)),
			    par(g, g->N)), var(g, col)),
			    var(g, acc[r * NV + h])));
		}
	}
}

/*
 * Appends to BLOCK the join of the finished leaf I (its sums in ACC) into
 * the stack S: level q stores the value when bit q of i is 0, else adds
 * its stored partial on the left and goes up a level; past level 4 the
 * value is the root, stored.
 */
static void build_join(gp_t *g, ks_stmt_t *block, int i, int q, int m0,
    int n0, const int *acc, int (*s)[NACC])
{
	ks_stmt_t *is = ks_s_if(g->k, bin(g, KS_OP_EQ, bit(g, i, q),
	    c64(g, 0)));

	ks_s_append(g->k, block, is);
	copy_all(g, lanes_in(g, is->body), s[q], acc);
	is->orelse = ks_s_block(g->k);
	join(g, lanes_in(g, is->orelse), acc, s[q]);
	if (q + 1 < LEVELS)
		build_join(g, is->orelse, i, q + 1, m0, n0, acc, s);
	else
		store_root(g, is->orelse, m0, n0, acc);
}

/* The 5-bit reversal of the uniform i64 variable I: the tree's leaf I. */
static ks_expr_t *rev5(gp_t *g, int i)
{
	return add(g, add(g, add(g, add(g, mul(g, bit(g, i, 0), c64(g, 16)),
	    mul(g, bit(g, i, 1), c64(g, 8))), mul(g, bit(g, i, 2),
	    c64(g, 4))), mul(g, bit(g, i, 3), c64(g, 2))), bit(g, i, 4));
}

/* prefetch buffer P's element min(E, LAST) */
static void prefetch(gp_t *g, ks_stmt_t *block, int p, ks_expr_t *e,
    int last)
{
	ks_s_append(g->k, block, ks_s_prefetch(g->k, p, bin(g, KS_OP_MIN, e,
	    var(g, last))));
}

static ks_ir_kernel_t *gp_build(const ks_spec_t *spec, const char *variant)
{
	gp_t g = { 0 };
	ks_ir_kernel_t *k;
	ks_stmt_t *body, *leaf, *chunk, *jl, *b, *in, *first, *more;
	int J, tn, tg, p, t0, n0, wb, i, l, jn, wl, c0, c1, j, xl, xq, wq;
	int i1, ln, xlast, wlast, m0[G], xb[G];
	int xv[PM], acc[NACC], s[G][LEVELS][NACC], sv[G][NACC];
	int r, h, q, u;
	char name[64];

	if (strcmp(variant, "general") != 0)
		return NULL;
	k = ks_ir_new("gemm_packed", variant, NL);
	g.k = k;
	g.xp = ks_ir_buffer(k, "xp", spec->dtype, KS_ACCESS_READ);
	g.Wp = ks_ir_buffer(k, "Wp", spec->wdtype, KS_ACCESS_READ);
	g.y = ks_ir_buffer(k, "y", spec->dtype, KS_ACCESS_WRITE);
	ks_ir_buffer_dims(k, g.xp, "(M+7)/8,32,(K+31)/32,8");
	ks_ir_buffer_dims(k, g.Wp, "(N+31)/32,32,(K+31)/32,32");
	ks_ir_buffer_dims(k, g.y, "M,N");
	g.M = ks_ir_scalar(k, "M", KS_TY_I64);
	g.N = ks_ir_scalar(k, "N", KS_TY_I64);
	g.K = ks_ir_scalar(k, "K", KS_TY_I64);
	body = k->body;

	/* grid ceil(ceil(M / 8) / G) * ceil(N / 32), W panel major: group
	 * = p * tg + the group of G x panels t0 .. t0 + G - 1. */
	k->grid = mul(&g, ceil_div(&g, ceil_div(&g, par(&g, g.M), PM), G),
	    ceil_div(&g, par(&g, g.N), PN));
	J = decl(&g, body, "J", KS_TY_I64, KS_VAR_UNIFORM,
	    ceil_div(&g, par(&g, g.K), LANES32));
	tn = decl(&g, body, "tn", KS_TY_I64, KS_VAR_UNIFORM,
	    ceil_div(&g, par(&g, g.M), PM));
	tg = decl(&g, body, "tg", KS_TY_I64, KS_VAR_UNIFORM,
	    ceil_div(&g, var(&g, tn), G));
	p = decl(&g, body, "p", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&g, KS_OP_DIV, ks_x_group(k), var(&g, tg)));
	t0 = decl(&g, body, "t0", KS_TY_I64, KS_VAR_UNIFORM,
	    mul(&g, bin(&g, KS_OP_REM, ks_x_group(k), var(&g, tg)),
	    c64(&g, G)));
	n0 = decl(&g, body, "n0", KS_TY_I64, KS_VAR_UNIFORM,
	    mul(&g, var(&g, p), c64(&g, PN)));
	wb = decl(&g, body, "wb", KS_TY_I64, KS_VAR_UNIFORM,
	    mul(&g, mul(&g, var(&g, p), c64(&g, LANES32 * PN)), var(&g, J)));
	/* The last elements of xp and Wp: prefetches stay in the buffers. */
	xlast = decl(&g, body, "xlast", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&g, KS_OP_SUB, mul(&g, mul(&g, var(&g, tn), var(&g, J)),
	    c64(&g, LANES32 * PM)), c64(&g, 1)));
	wlast = decl(&g, body, "wlast", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&g, KS_OP_SUB, mul(&g, mul(&g, ceil_div(&g, par(&g, g.N),
	    PN), var(&g, J)), c64(&g, LANES32 * PN)), c64(&g, 1)));
	for (u = 0; u < G; u++) {
		snprintf(name, sizeof name, "m0_%d", u);
		m0[u] = decl(&g, body, name, KS_TY_I64, KS_VAR_UNIFORM,
		    mul(&g, add(&g, var(&g, t0), c64(&g, u)), c64(&g, PM)));
		snprintf(name, sizeof name, "xb%d", u);
		xb[u] = decl(&g, body, name, KS_TY_I64, KS_VAR_UNIFORM,
		    mul(&g, mul(&g, add(&g, var(&g, t0), c64(&g, u)),
		    c64(&g, LANES32 * PM)), var(&g, J)));
	}
	for (r = 0; r < PM; r++)
		for (h = 0; h < NV; h++) {
			snprintf(name, sizeof name, "acc%d_%d", r, h);
			acc[r * NV + h] = decl(&g, body, name, KS_TY_F32,
			    KS_VAR_LANE, ks_x_f32(k, 0.0f));
			for (u = 0; u < G; u++) {
				snprintf(name, sizeof name, "sv%d_%d_%d", u, r,
				    h);
				sv[u][r * NV + h] = decl(&g, body, name,
				    KS_TY_F32, KS_VAR_LANE, ks_x_f32(k, 0.0f));
				for (q = 0; q < LEVELS; q++) {
					snprintf(name, sizeof name,
					    "s%d_%d_%d_%d", u, q, r, h);
					s[u][q][r * NV + h] = decl(&g, body,
					    name, KS_TY_F32, KS_VAR_LANE,
					    ks_x_f32(k, 0.0f));
				}
			}
		}

	/* for i in 0..31: the leaf l = rev5(i), its jn = ceil((K - l) / 32)
	 * elements k = l + 32 j, W's lane l at wl; the next leaf ln, for
	 * the prefetches (after the last, leaf 0 again: the next group's
	 * first W block when it has the same W panel, and this group's own
	 * first x block, not the next group's: one block in 32 not
	 * prefetched). */
	i = ks_ir_var(k, "i", KS_TY_I64, KS_VAR_UNIFORM);
	leaf = ks_s_for(k, i, c64(&g, 0), c64(&g, LANES32), 1);
	ks_s_append(k, body, leaf);
	l = decl(&g, leaf->body, "l", KS_TY_I64, KS_VAR_UNIFORM, rev5(&g, i));
	i1 = decl(&g, leaf->body, "i1", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&g, KS_OP_REM, add(&g, var(&g, i), c64(&g, 1)),
	    c64(&g, LANES32)));
	ln = decl(&g, leaf->body, "ln", KS_TY_I64, KS_VAR_UNIFORM,
	    rev5(&g, i1));
	jn = decl(&g, leaf->body, "jn", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&g, KS_OP_DIV, add(&g, bin(&g, KS_OP_SUB, par(&g, g.K),
	    var(&g, l)), c64(&g, LANES32 - 1)), c64(&g, LANES32)));
	wl = decl(&g, leaf->body, "wl", KS_TY_I64, KS_VAR_UNIFORM,
	    add(&g, var(&g, wb), mul(&g, mul(&g, var(&g, l), var(&g, J)),
	    c64(&g, PN))));

	/* The lane's k in chunks of KC: each x panel of the group in turn
	 * runs the chunk against W's chunk, which stays in the first-level
	 * cache; the sums carry over in sv between chunks.  A lane without
	 * elements (K < 32) still has one, empty, chunk: its sums, 0.0,
	 * join the tree. */
	c0 = ks_ir_var(k, "c0", KS_TY_I64, KS_VAR_UNIFORM);
	chunk = ks_s_for(k, c0, c64(&g, 0), bin(&g, KS_OP_MAX, var(&g, jn),
	    c64(&g, 1)), KC);
	ks_s_append(k, leaf->body, chunk);
	c1 = decl(&g, chunk->body, "c1", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&g, KS_OP_MIN, add(&g, var(&g, c0), c64(&g, KC)),
	    var(&g, jn)));
	/* What follows this chunk: the lane's next chunk, or the next
	 * lane's first. */
	xq = decl(&g, chunk->body, "xq", KS_TY_I64, KS_VAR_UNIFORM,
	    add(&g, var(&g, xb[0]), ks_x_select(k, bin(&g, KS_OP_LT,
	    var(&g, c1), var(&g, jn)), add(&g, mul(&g, mul(&g, var(&g, l),
	    var(&g, J)), c64(&g, PM)), mul(&g, var(&g, c1), c64(&g, PM))),
	    mul(&g, mul(&g, var(&g, ln), var(&g, J)), c64(&g, PM)))));
	wq = decl(&g, chunk->body, "wq", KS_TY_I64, KS_VAR_UNIFORM,
	    ks_x_select(k, bin(&g, KS_OP_LT, var(&g, c1), var(&g, jn)),
	    add(&g, var(&g, wl), mul(&g, var(&g, c1), c64(&g, PN))),
	    add(&g, var(&g, wb), mul(&g, mul(&g, var(&g, ln), var(&g, J)),
	    c64(&g, PN)))));

	for (u = 0; u < G; u++) {
		int xn;

		in = ks_s_if(k, bin(&g, KS_OP_LT, add(&g, var(&g, t0),
		    c64(&g, u)), var(&g, tn)));
		ks_s_append(k, chunk->body, in);
		snprintf(name, sizeof name, "xl%d", u);
		xl = decl(&g, in->body, name, KS_TY_I64, KS_VAR_UNIFORM,
		    add(&g, var(&g, xb[u]), mul(&g, mul(&g, var(&g, l),
		    var(&g, J)), c64(&g, PM))));
		/* x's block after this one: the next panel's chunk, else
		 * xq. */
		snprintf(name, sizeof name, "xn%d", u);
		xn = decl(&g, in->body, name, KS_TY_I64, KS_VAR_UNIFORM,
		    u + 1 < G ? ks_x_select(k, bin(&g, KS_OP_LT, add(&g,
		    var(&g, t0), c64(&g, u + 1)), var(&g, tn)), add(&g,
		    add(&g, var(&g, xb[u + 1]), mul(&g, mul(&g, var(&g, l),
		    var(&g, J)), c64(&g, PM))), mul(&g, var(&g, c0),
		    c64(&g, PM))), var(&g, xq)) : var(&g, xq));
		first = ks_s_if(k, bin(&g, KS_OP_EQ, var(&g, c0),
		    c64(&g, 0)));
		ks_s_append(k, in->body, first);
		b = lanes_in(&g, first->body);
		for (r = 0; r < NACC; r++)
			ks_s_append(k, b, ks_s_assign(k, acc[r],
			    ks_x_f32(k, 0.0f)));
		first->orelse = ks_s_block(k);
		copy_all(&g, lanes_in(&g, first->orelse), acc, sv[u]);

		/* The rank-1 updates: x's 8 values uniform, W's vector;
		 * the next x block prefetched beside, and in the group's
		 * last panel W's next chunk. */
		snprintf(name, sizeof name, "j%d", u);
		j = ks_ir_var(k, name, KS_TY_I64, KS_VAR_UNIFORM);
		jl = ks_s_for(k, j, var(&g, c0), var(&g, c1), 1);
		ks_s_append(k, in->body, jl);
		for (r = 0; r < PM; r++) {
			snprintf(name, sizeof name, "xv%d_%d", u, r);
			xv[r] = decl(&g, jl->body, name, KS_TY_F32,
			    KS_VAR_UNIFORM, ks_x_load(k, g.xp, add(&g,
			    add(&g, var(&g, xl), mul(&g, var(&g, j),
			    c64(&g, PM))), c64(&g, r))));
		}
		prefetch(&g, jl->body, g.xp, add(&g, var(&g, xn), mul(&g,
		    bin(&g, KS_OP_SUB, var(&g, j), var(&g, c0)),
		    c64(&g, PM))), xlast);
		if (u == G - 1)
			for (h = 0; h < 2; h++)
				prefetch(&g, jl->body, g.Wp, add(&g, add(&g,
				    var(&g, wq), mul(&g, bin(&g, KS_OP_SUB,
				    var(&g, j), var(&g, c0)), c64(&g, PN))),
				    c64(&g, h * PN / 2)), wlast);
		/* W's element is loaded in each fma (the same load, which
		 * GCC merges), not into a lane variable: GCC turns a lane
		 * loop that only copies a load into a memcpy to the
		 * variable's array, which then keeps every accumulator of
		 * the loop in memory. */
		b = lanes_in(&g, jl->body);
		for (r = 0; r < PM; r++)
			for (h = 0; h < NV; h++)
				ks_s_append(k, b, ks_s_assign(k,
				    acc[r * NV + h], ks_x_fma(k,
				    var(&g, xv[r]), ks_x_load(k, g.Wp,
				    add(&g, add(&g, add(&g, var(&g, wl),
				    mul(&g, var(&g, j), c64(&g, PN))),
				    c64(&g, NL * h)), ks_x_lane(k))),
				    var(&g, acc[r * NV + h]))));
		more = ks_s_if(k, bin(&g, KS_OP_LT, var(&g, c1),
		    var(&g, jn)));
		ks_s_append(k, in->body, more);
		copy_all(&g, lanes_in(&g, more->body), sv[u], acc);
		more->orelse = ks_s_block(k);
		build_join(&g, more->orelse, i, 0, m0[u], n0, acc, s[u]);
	}
	return k;
}

const ks_kernel_def_t ks_kernel_gemm_packed = {
	.name = "gemm_packed",
	.summary = "gemm on panel-packed operands (x by gemm_pack_x, W by "
	    "gemm_pack_w); y MxN row-major",
	.version = 3,
	.dims = gp_dims,
	.ndims = 3,
	.variants = gp_variants,
	.nvariants = 1,
	.select = gp_select,
	.guards = gp_guards,
	.check = gp_check,
	.build = gp_build,
	.weights = "Wp",
	.wmix = KS_WMIX_NARROW,
};
