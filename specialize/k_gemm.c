/*
 * gemm: y[m][n] = sum_k x[m][k] * W[n][k], for m < M, n < N.
 *
 * x is MxK, W is NxK, y is MxN, row-major, all in the request dtype, except
 * W when the request names a weight dtype (wdtype f16 or bf16 with dtype
 * f32): W is then loaded in its own dtype, 2 bytes an element, and
 * converted exactly to f32, so the result is the f32 gemm's on the widened
 * weights, bit for bit.
 * Parameters, in ABI order: x (read), W (read), y (write), M, N, K (i64).
 *
 * Canonical order (part of this definition; docs/kernels.md): lane l of
 * 32 accumulates the k with k % 32 == l in increasing k, acc = fma(x, W,
 * acc) in f32 from 0.0; the lanes combine with KS_X_REDUCE sum; the result
 * is stored once, converted to the dtype round-to-nearest-even.
 *
 * Schedule (changes no arithmetic): a work-group computes RB = 4 consecutive
 * outputs n0..n0+3 of one row m, with 4 lane accumulators in one shared k loop,
 * so each x element is loaded once per lane and used 4 times; general computes
 * them for MB = 4 rows at once (a 4 x 4 tile, 16 accumulators: each W element
 * is also used 4 times).  The hot lane loop has no branch: a row past N - 1 is
 * clamped to N - 1 for loads (a duplicate, harmless computation) and only the
 * store is guarded by n < N.  k runs in full chunks of 32 (k0 up to K - K % 32,
 * no guard in LANES) and then one guarded tail chunk, under `if K % 32 != 0`,
 * which folds away when K is a constant multiple of 32.
 *
 * Variants: `general` (any M, N, K, constant or dynamic), grid ((M + 3) / 4) *
 * ((N + 3) / 4), m0 = group / ((N + 3) / 4) * 4, n0 = group % ((N + 3) / 4) *
 * 4, always the 4 x 4 tile: rows past M - 1 are clamped to M - 1 for loads like
 * W's and only their stores are guarded, so no branch surrounds a reduction;
 * `gemv_m1` (guard: M is the constant 1), grid (N + 7) / 8, n0 = group * 8, one
 * row, RB_M1 = 8 outputs with 8 accumulators (measured 1.07-1.67x general at
 * M = 1, which computes 4 rows there; 8 outputs instead of 4 took bf16
 * weights from 13.7-17.6 to 18.0-20.6 GB/s on an AMD EPYC, Zen 4, where
 * 4 rows of W in flight did not keep enough loads outstanding, and left
 * f32 as it was); `small_m` (guard: M is a constant in 2..3, a narrow
 * speculative-decoding verify step; wider ones run general's tile), grid (N +
 * 3) / 4, n0 = group * 4, and the work-group computes the RB outputs for all M
 * rows (M * RB lane accumulators); `blocked` (guard: M is a constant of 8 or
 * more: prefill), grid ceil(M / 8) * ceil(N / 8) in bands (build_blocked),
 * an 8 x 8 macro tile per work-group of 16 lanes, k in blocks of KB.  All
 * four do the same arithmetic per output, so they agree bit for bit.  With
 * f32, f16 or bf16 weights mode "fast" selects exactly what "exact"
 * selects; with a block format it selects `fast` (build_fast), whose x
 * is in q8_0 blocks and whose arithmetic is another contract
 * (docs/kernels.md, "gemm's fast mode").
 */
#include "k_quant.h"

#include <stdio.h>
#include <string.h>

enum {
	NLANES = 32,
	RB = 4,         /* output columns (rows of W) per work-group */
	MB = 4,         /* rows of x per work-group (general) */
	TILE_MAX = 4,   /* the most rows of one tile (MB, small_m's M) */
	SMALL_M_MAX = 3,        /* measured: a loss beside general at 8, 16 */
	/* blocked (measured, bench/kernels): a macro tile of SM x SN
	 * sub-tiles of SR rows of x by SC rows of W, k in blocks of KB,
	 * bands of BAND macro rows.  4 x 6 and 6 x 4 sub-tiles and a 16 x 8
	 * macro tile measured the same at M = 512 and compile slower; KB =
	 * 512 measured slower (the block's rows no longer fit L1). */
	SR = 4, SC = 4,
	SM = 2, SN = 2, KB = 256, BAND = 8,
	BM_MAX = SR * SM, BN_MAX = SC * SN,
	BLOCKED_M_MIN = 8,      /* one macro tile of rows; 1.2x general at 8 */
	RB_M1 = 8,              /* gemv_m1: rows of W per work-group */
	/* fast: rows of W per work-group, sharing the x side of each pair
	 * (its codes, sums and scales); 16 measured 1.2x 8 (bench/ggml,
	 * q4_0 and q8_0, one thread). */
	RB_F = 16,
	QX_B = 34,              /* bytes of a q8_0 block of x (fast) */
	/* fast: W's prefetch.  Where a group's RB_F rows are at most
	 * PF_GROUP bytes (K = 4096 in any of the formats), the next group's
	 * bytes in address order, one group ahead, into the second-level
	 * cache: its rows are short, so a per-row stream ends soon after
	 * the hardware has learnt it.  Otherwise each row's bytes PF_F
	 * ahead (PF_F8 for q8_0) into the first level, q4_k's not at all.
	 * Measured on examples/llama 8b2l decode, one thread, whose weights
	 * stream from DRAM, ms of kernels a token: this took q4_0 from 33.8
	 * (per row everywhere) to 26.4, q4_k from 35.6 (none) to 27.4, q8_0
	 * from 43.2 to 42.3; the group prefetch at K = 14336 too made that
	 * product slower (q4_0 5.0 to 5.6, q4_k 5.2 to 5.9, q8_0 8.0 to
	 * 10.2), hence the bound.  The per-row distances, measured on the
	 * whole decode (an earlier kernel): q4_0 43.0 ms/token
	 * without, 34.8 at 256 (35.1 at 384, 36.8 at 512, 41.3 at 1024);
	 * q8_0 51.8 without, 44.2 at 256, 43.8 at 384; q4_k 36.3 either way
	 * at 256, 37.6 at 384. */
	PF_GROUP = 72 * 1024,
	PF_F = 256,
	PF_F8 = 384,
	/* gemv_m1: the k loop's unroll hint (CUDA's #pragma unroll), so
	 * that 4 chunks' loads are in flight at once.  Measured on an H200
	 * (bench/gpu/run.sh), bf16 N=14336 K=4096: 0.75-0.76 of a device
	 * copy's bandwidth (two runs) against 0.61 with NVRTC's own choice
	 * (2 chunks; 8 and 16: 0.68-0.69, 0.73); f32 and N=57344 K=8192
	 * unchanged (0.96-1.04 f32, 0.77-0.81 bf16).  A change of it changes
	 * the printed IR, which the fingerprint hashes at gemm_probes. */
	UNROLL_M1 = 4,
	ROW_MAX = 8,            /* the most rows of W of build_row */
};

static const char *const gemm_dims[] = { "M", "N", "K" };
enum { DIM_M, DIM_N, DIM_K };

static const char *const gemm_variants[] = {
	"general", "gemv_m1", "small_m", "blocked", "fast" };
static const char *const gemm_guards[] = {
	"any M, N, K, constant or dynamic",
	"M is the constant 1",
	"M is a constant in 2..3",
	"M is a constant of 8 or more",
	"mode fast with a block-format wdtype (x in q8_0 blocks), any M",
};

_Static_assert(SMALL_M_MAX <= TILE_MAX && MB <= TILE_MAX && RB <= ROW_MAX &&
    RB_M1 <= ROW_MAX,
    "a tile holds TILE_MAX rows at most, build_row ROW_MAX rows of W");

/* Whether M is a constant that small_m serves. */
static int is_small_m(const ks_dim_t *m)
{
	return m->is_const && m->value >= 2 && m->value <= SMALL_M_MAX;
}

/* Beyond the common probes (every dim at one value, where M = 1 comes
 * only with K = 1 and so no k loop): each selected variant at a shape of
 * a real model, so that the fingerprint hashes their k loops, unroll
 * hints included (0: dynamic). */
static const int64_t gemm_probes[][KS_MAX_DIMS] = {
	{ 1, 4096, 4096 },      /* gemv_m1 */
	{ 1, 0, 0 },            /* gemv_m1, N and K dynamic */
	{ 3, 4096, 4100 },      /* small_m, with the K tail */
	{ 512, 4096, 4096 },    /* blocked */
};

/* Whether SPEC asks for the fast mode's kernel: mode fast and W in a
 * block format. */
static int is_fast(const ks_spec_t *spec)
{
	return spec->mode == KS_MODE_FAST && ks_dtype_block(spec->wdtype,
	    NULL, NULL);
}

static const char *gemm_select(const ks_spec_t *spec)
{
	const ks_dim_t *m = &spec->dims[DIM_M];

	if (is_fast(spec))
		return "fast";
	if (m->is_const && m->value == 1)
		return "gemv_m1";
	if (m->is_const && m->value >= BLOCKED_M_MIN)
		return "blocked";
	return is_small_m(m) ? "small_m" : "general";
}

/* Elements of a ROWS x COLS buffer when both dims are constant. */
static int check_buffer(const ks_spec_t *spec, const char *buf, int rows,
    int cols, char *err, size_t errlen)
{
	const ks_dim_t *r = &spec->dims[rows], *c = &spec->dims[cols];
	int64_t n;

	if (!r->is_const || !c->is_const)
		return KS_OK;
	if (!ks_mul_overflow(r->value, c->value, &n) && n <= KS_MAX_ELEMS)
		return KS_OK;
	if (err != NULL && errlen > 0)
		snprintf(err, errlen, "buffer %s of %s*%s = %lld*%lld "
		    "elements exceeds the limit of %lld", buf, r->name,
		    c->name, (long long)r->value, (long long)c->value,
		    (long long)KS_MAX_ELEMS);
	return KS_E_TOO_LARGE;
}

static int gemm_check(const ks_spec_t *spec, char *err, size_t errlen)
{
	int rc = check_buffer(spec, "x", DIM_M, DIM_K, err, errlen);

	/* A block format tiles each row of W: K is a constant multiple of
	 * the block (the row's bytes are then known). */
	rc = rc ? rc : ks_quant_check(spec, DIM_K, err, errlen);

	rc = rc ? rc : check_buffer(spec, "W", DIM_N, DIM_K, err, errlen);
	return rc ? rc : check_buffer(spec, "y", DIM_M, DIM_N, err, errlen);
}

/* ---- the builder ---- */

typedef struct {
	ks_ir_kernel_t *k;
	int x, W, y, M, N, K;   /* parameters */
	ks_quant_t q;           /* W in a block format (qk != 0) */
	ks_dtype_t wq;          /* that format, or KS_DTYPE_F32 */
	int qk, qb;             /* weights and bytes of one of its blocks */
	/* A chunk's decode factors, per row of W (wq_hoist), while its
	 * LANES are built; nhq 0 elsewhere. */
	struct wq { int wo, base, d, dm, sh; } hq[ROW_MAX];  /* q4_k: d is
				   d sc, dm -(dmin m) */
	/* q4k_loop's pair of sub-blocks in one LANES: the second's factors
	 * and k0 (paired 1 while its chunk is built). */
	struct wq hq2[ROW_MAX];
	int paired, k0b;
	int nhq, hq_off;        /* rows; the lanes' first index in a block */
	int q4sel;              /* q4_0: read both halves' bytes (q4_inside) */
	int alt;                /* building chunk_lanes' second LANES */
	char sfx[8];            /* q4k_loop: the chunk's names' suffix */
	int serial;             /* names of the hoisted variables */
} gemm_t;

static ks_expr_t *c64(gemm_t *g, int64_t v)
{
	return ks_x_i64(g->k, v);
}

static ks_expr_t *par(gemm_t *g, int p)
{
	return ks_x_param(g->k, p);
}

static ks_expr_t *var(gemm_t *g, int v)
{
	return ks_x_var(g->k, v);
}

static ks_expr_t *bin(gemm_t *g, ks_binop_t op, ks_expr_t *a, ks_expr_t *b)
{
	return ks_x_bin(g->k, op, a, b);
}

/* K - K % 32: the end of the full chunks.  A fresh tree per use. */
static ks_expr_t *k_main(gemm_t *g)
{
	return bin(g, KS_OP_SUB, par(g, g->K),
	    bin(g, KS_OP_REM, par(g, g->K), c64(g, NLANES)));
}

static int decl(gemm_t *g, ks_stmt_t *block, const char *name, ks_ty_t t,
    ks_var_scope_t scope, ks_expr_t *init)
{
	int v = ks_ir_var(g->k, name, t, scope);

	ks_s_append(g->k, block, ks_s_decl(g->k, v, init));
	return v;
}

/* Appends to BLOCK a uniform i64 variable NAME = E. */
static int ulet(gemm_t *g, ks_stmt_t *block, const char *name, ks_expr_t *e)
{
	return decl(g, block, name, KS_TY_I64, KS_VAR_UNIFORM, e);
}

/* ---- W's values ---- */

static ks_expr_t *i32c(gemm_t *g, int64_t v)
{
	return ks_quant_i32(&g->q, v);
}

/* The byte of W at WO + OFF (OFF a fresh i64 tree), as i32 0..255. */
static ks_expr_t *wbyte(gemm_t *g, int wo, ks_expr_t *off)
{
	return ks_quant_byte(&g->q, wo, off);
}

/*
 * The f32 value of W[row][k], K_VAR the lane variable k and WO the uniform
 * variable of the row's start: a load of W[wo + k], or for a block format
 * the exact decode of k_quant.h.
 */
static ks_expr_t *wvalue(gemm_t *g, int wo, int k_var)
{
	if (g->qk)
		return ks_quant_value(&g->q, wo, k_var);
	return ks_x_load(g->k, g->W, bin(g, KS_OP_ADD, var(g, wo),
	    var(g, k_var)));
}

/*
 * A chunk's decode, hoisted.  In the main k loops a chunk of 32 lanes is
 * k = k0 + OFF + lane with k0 a multiple of 32 (OFF 0, or 16 in blocked's
 * second half), so the chunk lies in one block of 32 (q8_0, q4_0) or one
 * sub-block of 32 (q4_k): its scale (and q4_k's scale, min and nibble
 * half) are uniform.  wq_hoist declares them in BLOCK, before the chunk's
 * LANES, for the rows WO[0..n); wvalue_hoisted then reads each lane's
 * code bytes, contiguous in lane order.  The values are wvalue's, by the
 * same operations in the same order.
 */
static void wq_hoist(gemm_t *g, ks_stmt_t *block, int k0, int n,
    const int *wo, int off)
{
	ks_ir_kernel_t *k = g->k;
	char name[32];
	int r, sb = -1;

	g->nhq = n;
	g->hq_off = off;
	if (g->wq == KS_DTYPE_Q4_K) {
		snprintf(name, sizeof name, "qs%d", g->serial);
		sb = ulet(g, block, name, bin(g, KS_OP_DIV, bin(g, KS_OP_REM,
		    var(g, k0), c64(g, 256)), c64(g, 32)));
	}
	for (r = 0; r < n; r++) {
		struct wq *q = &g->hq[r];
		ks_expr_t *sc, *m;

		q->wo = wo[r];
		snprintf(name, sizeof name, "qb%d_%d", g->serial, r);
		q->base = ulet(g, block, name, bin(g, KS_OP_ADD, var(g, wo[r]),
		    bin(g, KS_OP_MUL, bin(g, KS_OP_DIV, var(g, k0),
		    c64(g, g->qk)), c64(g, g->qb))));
		snprintf(name, sizeof name, "qd%d_%d", g->serial, r);
		q->d = decl(g, block, name, KS_TY_F32, KS_VAR_UNIFORM,
		    ks_quant_f16(&g->q, q->base, 0));
		if (g->wq != KS_DTYPE_Q4_K)
			continue;
		/* The sub-block's scale and min, multiplied into d and
		 * dmin (both products exact). */
		sc = ks_quant_q4k_scale(&g->q, q->base, sb, 0);
		m = ks_quant_q4k_scale(&g->q, q->base, sb, 1);
		snprintf(name, sizeof name, "qds%d_%d", g->serial, r);
		q->d = decl(g, block, name, KS_TY_F32, KS_VAR_UNIFORM, bin(g,
		    KS_OP_MUL, var(g, q->d), sc));
		snprintf(name, sizeof name, "qm%d_%d", g->serial, r);
		q->dm = decl(g, block, name, KS_TY_F32, KS_VAR_UNIFORM,
		    ks_x_un(k, KS_UN_NEG, bin(g, KS_OP_MUL,
		    ks_quant_f16(&g->q, q->base, 2), m)));
		/* The code bytes of the sub-block pair, and the nibble. */
		snprintf(name, sizeof name, "qc%d_%d", g->serial, r);
		q->base = ulet(g, block, name, bin(g, KS_OP_ADD, bin(g,
		    KS_OP_ADD, var(g, q->base), c64(g, 16)), bin(g, KS_OP_MUL,
		    bin(g, KS_OP_DIV, var(g, sb), c64(g, 2)), c64(g, 32))));
		snprintf(name, sizeof name, "qh%d_%d", g->serial, r);
		q->sh = decl(g, block, name, KS_TY_I32, KS_VAR_UNIFORM,
		    ks_x_cast(k, KS_TY_I32, bin(g, KS_OP_MUL, bin(g,
		    KS_OP_REM, var(g, sb), c64(g, 2)), c64(g, 4))));
	}
	g->serial++;
}

/* The lane's weight of hoisted row Q: the lane's index in the block is
 * i = hq_off + lane.  q4_0 first appends to BLOCK its nibble as a lane
 * variable: lanes i < 16 take the low nibble of byte 2 + i, the others the
 * high nibble of byte 2 + i - 16, each read under its branch of an IF, so
 * both reads are contiguous in lane order and in the block (the cpu
 * backend vectorizes them as masked loads; a select of two reads would
 * read past the block and be a gather). */
static ks_expr_t *wvalue_hoisted(gemm_t *g, ks_stmt_t *block,
    const struct wq *q)
{
	ks_ir_kernel_t *k = g->k;
	ks_expr_t *b;
	ks_stmt_t *half;
	char name[32];
	int qn;

#define LI() bin(g, KS_OP_ADD, c64(g, g->hq_off), ks_x_lane(k))
	switch (g->wq) {
	case KS_DTYPE_Q8_0:
		b = wbyte(g, q->base, bin(g, KS_OP_ADD, c64(g, 2), LI()));
		return bin(g, KS_OP_MUL, var(g, q->d), ks_x_cast(k, KS_TY_F32,
		    bin(g, KS_OP_SUB, bin(g, KS_OP_BXOR, b, i32c(g, 128)),
		    i32c(g, 128))));
	case KS_DTYPE_Q4_0:
		if (k->nlanes == 16 || g->q4sel) {
			/* Lanes i < 16: the low nibble of byte 2 + i; the
			 * others the high nibble of byte 2 + i - 16.  With 16
			 * lanes one half is all of them; with 32 both bytes are
			 * read, contiguous in lane order (q4_inside holds). */
			ks_expr_t *lo = bin(g, KS_OP_BAND, wbyte(g, q->base,
			    bin(g, KS_OP_ADD, c64(g, 2), LI())), i32c(g, 15));
			ks_expr_t *hi = bin(g, KS_OP_SHR, wbyte(g, q->base,
			    bin(g, KS_OP_ADD, c64(g, 2 - 16), LI())), i32c(g, 4));

			if (k->nlanes == 16) {
				b = g->hq_off < 16 ? lo : hi;
			} else {
				/* m = -(i / 16), all ones for the high half;
				 * lo ^ ((lo ^ hi) & m) is (i < 16 ? lo : hi) by
				 * bit operations, which the cpu backend
				 * vectorizes (a select on the lane it did not). */
				ks_expr_t *m = bin(g, KS_OP_SUB, i32c(g, 0),
				    ks_x_cast(k, KS_TY_I32, bin(g, KS_OP_SHR,
				    LI(), c64(g, 4))));
				ks_expr_t *lo2 = bin(g, KS_OP_BAND, wbyte(g,
				    q->base, bin(g, KS_OP_ADD, c64(g, 2), LI())),
				    i32c(g, 15));

				b = bin(g, KS_OP_BXOR, lo2, bin(g, KS_OP_BAND,
				    bin(g, KS_OP_BXOR, lo, hi), m));
			}
			return bin(g, KS_OP_MUL, var(g, q->d), ks_x_cast(k,
			    KS_TY_F32, bin(g, KS_OP_SUB, b, i32c(g, 8))));
		}
		snprintf(name, sizeof name, "qn%d", g->serial++);
		qn = decl(g, block, name, KS_TY_I32, KS_VAR_LANE, NULL);
		half = ks_s_if(k, bin(g, KS_OP_LT, LI(), c64(g, 16)));
		ks_s_append(k, block, half);
		ks_s_append(k, half->body, ks_s_assign(k, qn, bin(g,
		    KS_OP_BAND, wbyte(g, q->base, bin(g, KS_OP_ADD, c64(g, 2),
		    LI())), i32c(g, 15))));
		half->orelse = ks_s_block(k);
		ks_s_append(k, half->orelse, ks_s_assign(k, qn, bin(g,
		    KS_OP_SHR, wbyte(g, q->base, bin(g, KS_OP_ADD,
		    c64(g, 2 - 16), LI())), i32c(g, 4))));
		return bin(g, KS_OP_MUL, var(g, q->d), ks_x_cast(k, KS_TY_F32,
		    bin(g, KS_OP_SUB, var(g, qn), i32c(g, 8))));
	default:                /* q4_k */
		b = bin(g, KS_OP_BAND, bin(g, KS_OP_SHR, wbyte(g, q->base,
		    LI()), var(g, q->sh)), i32c(g, 15));
		/* (d sc) q - dmin m as fma(q, d sc, -(dmin m)): the
		 * product is exact, so the one rounding is the
		 * subtraction's, as in k_quant.h's order. */
		return ks_x_fma(k, ks_x_cast(k, KS_TY_F32, b), var(g, q->d),
		    var(g, q->dm));
	}
#undef LI
}

/*
 * q4_0, 32 lanes: whether every hoisted row's block lies 14 bytes or more
 * from the start of W and 34 or more from its end, so that reading bytes
 * 2 + i and 2 + i - 16 for every lane i stays in W (wvalue_hoisted's
 * select form).  Only the first and the last block of W can fail it.
 */
static ks_expr_t *q4_inside(gemm_t *g)
{
	ks_expr_t *in = NULL, *e;
	int r;

	for (r = 0; r < g->nhq; r++) {
		e = bin(g, KS_OP_AND, bin(g, KS_OP_LE, c64(g, 14),
		    var(g, g->hq[r].base)), bin(g, KS_OP_LE, bin(g, KS_OP_ADD,
		    var(g, g->hq[r].base), c64(g, 34)), bin(g, KS_OP_MUL,
		    par(g, g->N), bin(g, KS_OP_MUL, bin(g, KS_OP_DIV,
		    par(g, g->K), c64(g, 32)), c64(g, 18)))));
		in = in ? bin(g, KS_OP_AND, in, e) : e;
	}
	return in;
}

/*
 * Appends to BLOCK a chunk's LANES and returns its body: for q4_0 with 32
 * lanes two of them, under IF (q4_inside) the select form and in the else
 * branch the IF form; MAKE then fills each body (called once per body,
 * g->q4sel telling which).
 */
static ks_stmt_t *chunk_lanes(gemm_t *g, ks_stmt_t *block,
    void (*make)(gemm_t *, ks_stmt_t *, void *), void *arg)
{
	ks_ir_kernel_t *k = g->k;
	ks_stmt_t *lanes = ks_s_lanes(k), *in;

	if (!(g->nhq && g->wq == KS_DTYPE_Q4_0 && k->nlanes == 32)) {
		ks_s_append(k, block, lanes);
		make(g, lanes->body, arg);
		return lanes;
	}
	in = ks_s_if(k, q4_inside(g));
	ks_s_append(k, block, in);
	ks_s_append(k, in->body, lanes);
	g->q4sel = 1;
	make(g, lanes->body, arg);
	g->q4sel = 0;
	in->orelse = ks_s_block(k);
	lanes = ks_s_lanes(k);
	ks_s_append(k, in->orelse, lanes);
	g->alt = 1;             /* its lane variables get other names */
	make(g, lanes->body, arg);
	g->alt = 0;
	return lanes;
}

/* W's value for row WO at lane variable K_VAR: hoisted when the current
 * chunk has its factors, else wvalue. */
static ks_expr_t *wval(gemm_t *g, ks_stmt_t *block, int wo, int k_var)
{
	int r;

	for (r = 0; r < g->nhq; r++)
		if (g->hq[r].wo == wo)
			return wvalue_hoisted(g, block, &g->hq[r]);
	return wvalue(g, wo, k_var);
}

/*
 * Appends to BLOCK, inside LANES, the accumulation of element K_VAR (a lane
 * variable) for the NW rows of W: xv = x[xo + k]; acc[r] = fma(xv,
 * W[wo[r] + k], acc[r]).  XO < 0 means the x row offset is 0 (gemv_m1).
 */
/* x[xo + k] for the lane variable K_VAR (XO < 0: offset 0). */
static ks_expr_t *x_at(gemm_t *g, int xo, int k_var)
{
	ks_expr_t *xi = var(g, k_var);

	if (xo >= 0)
		xi = bin(g, KS_OP_ADD, var(g, xo), xi);
	return ks_x_load(g->k, g->x, xi);
}

static void accumulate(gemm_t *g, ks_stmt_t *block, const char *xname,
    int k_var, int xo, int nw, const int *wo, const int *acc)
{
	int r, xv;

	xv = decl(g, block, xname, KS_TY_F32, KS_VAR_LANE, x_at(g, xo, k_var));
	for (r = 0; r < nw; r++) {
		ks_expr_t *w = wval(g, block, wo[r], k_var);

		ks_s_append(g->k, block, ks_s_assign(g->k, acc[r],
		    ks_x_fma(g->k, var(g, xv), w, var(g, acc[r]))));
	}
}

/*
 * Appends to BLOCK, inside LANES, the accumulation of element K_VAR (a lane
 * variable) for M rows of x and NW (at most 8) rows of W: wv[r] =
 * W[wo[r] + k] once, then per row m xv = x[xo[m] + k] (x[m * K + k] when
 * XO is NULL) and acc[m * NW + r] = fma(xv, wv[r], acc[m * NW + r]), the
 * operands in the order of accumulate().  PFX names the lane variables
 * ("v" in the main loop, "t" in the tail).
 */
static void accumulate_rows(gemm_t *g, ks_stmt_t *block, const char *pfx,
    int k_var, int64_t M, int nw, const int *xo, const int *wo,
    const int *acc)
{
	char name[32];
	int r, wv[8], xv;
	int64_t m;
	ks_expr_t *xi;

	for (r = 0; r < nw; r++) {
		snprintf(name, sizeof name, "w%s%d", pfx, r);
		wv[r] = decl(g, block, name, KS_TY_F32, KS_VAR_LANE,
		    wval(g, block, wo[r], k_var));
	}
	for (m = 0; m < M; m++) {
		snprintf(name, sizeof name, "x%s%d", pfx, (int)m);
		xi = xo != NULL ? var(g, xo[m]) : bin(g, KS_OP_MUL, c64(g, m),
		    par(g, g->K));
		xv = decl(g, block, name, KS_TY_F32, KS_VAR_LANE,
		    ks_x_load(g->k, g->x, bin(g, KS_OP_ADD, xi,
		    var(g, k_var))));
		for (r = 0; r < nw; r++)
			ks_s_append(g->k, block, ks_s_assign(g->k,
			    acc[m * nw + r], ks_x_fma(g->k, var(g, xv),
			    var(g, wv[r]), var(g, acc[m * nw + r]))));
	}
}

/*
 * q4_k's main k loop, for the rows WO[0..n): per super-block of 256
 * weights (kb) each row's d and dmin are decoded once, then its 8
 * sub-blocks run in pairs, k0 = kb + 64 p and k0 + 32: one LANES per
 * pair, whose lanes take sub-block 2p's weight (the low nibbles of the
 * pair's 32 code bytes) and then 2p+1's (the high nibbles of the same
 * bytes), so each code byte is read once.  The scales and mins are
 * decoded from the constant bytes of each sub-block.  Every lane still
 * takes its k in increasing order, so the arithmetic is the plain loop's
 * (the decode's values are k_quant.h's).  MAKE appends a chunk's
 * accumulation to a LANES body (row_chunk, tile_chunk), reading the
 * chunk's k0 from *K0.
 */
static void q4k_loop(gemm_t *g, ks_stmt_t *block, int n, const int *wo,
    void (*make)(gemm_t *, ks_stmt_t *, void *), void *arg, int *k0)
{
	ks_ir_kernel_t *k = g->k;
	ks_stmt_t *loop, *lanes;
	int kb, r, s, k0s[2], base[ROW_MAX], d[ROW_MAX], dmin[ROW_MAX];
	int qc[ROW_MAX];
	struct wq pair[2][ROW_MAX];
	char name[32];

	kb = ks_ir_var(k, "qkb", KS_TY_I64, KS_VAR_UNIFORM);
	loop = ks_s_for(k, kb, c64(g, 0), k_main(g), 256);
	ks_s_append(k, block, loop);
	for (r = 0; r < n; r++) {
		snprintf(name, sizeof name, "qsb%d", r);
		base[r] = ulet(g, loop->body, name, bin(g, KS_OP_ADD,
		    var(g, wo[r]), bin(g, KS_OP_MUL, bin(g, KS_OP_DIV,
		    var(g, kb), c64(g, 256)), c64(g, 144))));
		snprintf(name, sizeof name, "qd%d", r);
		d[r] = decl(g, loop->body, name, KS_TY_F32, KS_VAR_UNIFORM,
		    ks_quant_f16(&g->q, base[r], 0));
		snprintf(name, sizeof name, "qdmin%d", r);
		dmin[r] = decl(g, loop->body, name, KS_TY_F32, KS_VAR_UNIFORM,
		    ks_quant_f16(&g->q, base[r], 2));
	}
	for (s = 0; s < 8; s++) {
		snprintf(name, sizeof name, "qk0_%d", s);
		k0s[s % 2] = ulet(g, loop->body, name, bin(g, KS_OP_ADD,
		    var(g, kb), c64(g, 32 * s)));
		for (r = 0; r < n; r++) {
			struct wq *q = &pair[s % 2][r];

			q->wo = wo[r];
			snprintf(name, sizeof name, "qds%d_%d", s, r);
			q->d = decl(g, loop->body, name, KS_TY_F32,
			    KS_VAR_UNIFORM, bin(g, KS_OP_MUL, var(g, d[r]),
			    ks_quant_q4k_scale_at(&g->q, base[r], s, 0)));
			snprintf(name, sizeof name, "qm%d_%d", s, r);
			q->dm = decl(g, loop->body, name, KS_TY_F32,
			    KS_VAR_UNIFORM, ks_x_un(k, KS_UN_NEG, bin(g,
			    KS_OP_MUL, var(g, dmin[r]),
			    ks_quant_q4k_scale_at(&g->q, base[r], s, 1))));
			if (s % 2 == 0) {
				snprintf(name, sizeof name, "qc%d_%d", s / 2,
				    r);
				qc[r] = ulet(g, loop->body, name, bin(g,
				    KS_OP_ADD, var(g, base[r]),
				    c64(g, 16 + s / 2 * 32)));
			}
			q->base = qc[r];
			snprintf(name, sizeof name, "qh%d_%d", s, r);
			q->sh = decl(g, loop->body, name, KS_TY_I32,
			    KS_VAR_UNIFORM, i32c(g, s % 2 * 4));
		}
		if (s % 2 == 0)
			continue;
		/* The pair's LANES: sub-block s - 1, then s. */
		lanes = ks_s_lanes(k);
		ks_s_append(k, loop->body, lanes);
		memcpy(g->hq, pair[0], sizeof(pair[0][0]) * (size_t)n);
		memcpy(g->hq2, pair[1], sizeof(pair[1][0]) * (size_t)n);
		g->nhq = n;
		g->hq_off = 0;
		g->paired = 1;
		*k0 = k0s[0];
		g->k0b = k0s[1];
		snprintf(g->sfx, sizeof g->sfx, "_s%d", s - 1);
		make(g, lanes->body, arg);
		g->sfx[0] = '\0';
		g->paired = 0;
		g->nhq = 0;
	}
}

/* One main-loop chunk of build_row (for chunk_lanes): k = k0 + lane. */
struct row_chunk {
	int k0, xo, nw;
	const int *wo, *acc;
};

static void row_chunk(gemm_t *g, ks_stmt_t *body, void *arg)
{
	const struct row_chunk *c = arg;
	char kn[16], xn[16];
	int kv, kv2, xv, xv2, r;

	snprintf(kn, sizeof kn, "%s%s", g->alt ? "kb" : "k", g->sfx);
	snprintf(xn, sizeof xn, "%s%s", g->alt ? "xvb" : "xv", g->sfx);
	kv = decl(g, body, kn, KS_TY_I64, KS_VAR_LANE, bin(g, KS_OP_ADD,
	    var(g, c->k0), ks_x_lane(g->k)));
	if (!g->paired) {
		accumulate(g, body, xn, kv, c->xo, c->nw, c->wo, c->acc);
		return;
	}
	/* q4_k's pair: per row, the first sub-block's weight and then the
	 * second's (k0b), each lane's k still in increasing order; the row's
	 * code bytes are read once for both. */
	snprintf(kn, sizeof kn, "%s%sb", g->alt ? "kb" : "k", g->sfx);
	kv2 = decl(g, body, kn, KS_TY_I64, KS_VAR_LANE, bin(g, KS_OP_ADD,
	    var(g, g->k0b), ks_x_lane(g->k)));
	xv = decl(g, body, xn, KS_TY_F32, KS_VAR_LANE, x_at(g, c->xo, kv));
	snprintf(xn, sizeof xn, "%s%sb", g->alt ? "xvb" : "xv", g->sfx);
	xv2 = decl(g, body, xn, KS_TY_F32, KS_VAR_LANE, x_at(g, c->xo, kv2));
	for (r = 0; r < c->nw; r++) {
		ks_s_append(g->k, body, ks_s_assign(g->k, c->acc[r],
		    ks_x_fma(g->k, var(g, xv), wvalue_hoisted(g, body,
		    &g->hq[r]), var(g, c->acc[r]))));
		ks_s_append(g->k, body, ks_s_assign(g->k, c->acc[r],
		    ks_x_fma(g->k, var(g, xv2), wvalue_hoisted(g, body,
		    &g->hq2[r]), var(g, c->acc[r]))));
	}
}

/* One main-loop chunk of build_tile: k = k0 + lane. */
struct tile_chunk {
	int k0;
	int64_t rows;
	const int *xo, *wo, *acc;
};

static void tile_chunk(gemm_t *g, ks_stmt_t *body, void *arg)
{
	const struct tile_chunk *c = arg;
	char kn[16], pfx[16];
	int kv, t;

	/* q4_k's pair: the first sub-block's chunk, then the second's. */
	for (t = 0; t < 1 + g->paired; t++) {
		if (t == 1)
			memcpy(g->hq, g->hq2, sizeof(g->hq));
		snprintf(kn, sizeof kn, "%s%s%s", g->alt ? "tkb" : "tk",
		    g->sfx, t ? "b" : "");
		snprintf(pfx, sizeof pfx, "%s%s%s", g->alt ? "vb" : "v",
		    g->sfx, t ? "b" : "");
		kv = decl(g, body, kn, KS_TY_I64, KS_VAR_LANE, bin(g,
		    KS_OP_ADD, var(g, t ? g->k0b : c->k0), ks_x_lane(g->k)));
		accumulate_rows(g, body, pfx, kv, c->rows, RB, c->xo, c->wo,
		    c->acc);
	}
}

/*
 * Appends to BLOCK the computation of the NW outputs n0..n0+NW-1 of one
 * row: the lane accumulators, the k loop (full chunks, then the guarded
 * tail), and one store per output y[yo + r] for n0 + r < N.  XO is the
 * uniform variable of the row's offset into x, or -1 for offset 0
 * (gemv_m1); WO the clamped row offsets into W.
 */
static void build_row(gemm_t *g, ks_stmt_t *block, int n0, int xo, int yo,
    int nw, const int *wo)
{
	ks_ir_kernel_t *k = g->k;
	ks_stmt_t *loop, *lanes, *tail, *guard;
	int acc[ROW_MAX], k0, kt, r;
	char name[16];

	for (r = 0; r < nw; r++) {
		snprintf(name, sizeof name, "acc%d", r);
		acc[r] = decl(g, block, name, KS_TY_F32, KS_VAR_LANE,
		    ks_x_f32(k, 0.0f));
	}

	/* Full chunks: k = k0 + lane < K - K % 32, no guard. */
	if (g->wq == KS_DTYPE_Q4_K) {
		struct row_chunk c = { -1, xo, nw, wo, acc };

		q4k_loop(g, block, nw, wo, row_chunk, &c, &c.k0);
	} else {
		struct row_chunk c = { -1, xo, nw, wo, acc };

		k0 = ks_ir_var(k, "k0", KS_TY_I64, KS_VAR_UNIFORM);
		loop = ks_s_for(k, k0, c64(g, 0), k_main(g), NLANES);
		loop->unroll = UNROLL_M1;  /* build_row is gemv_m1's alone */
		ks_s_append(k, block, loop);
		if (g->qk)
			wq_hoist(g, loop->body, k0, nw, wo, 0);
		c.k0 = k0;
		chunk_lanes(g, loop->body, row_chunk, &c);
		g->nhq = 0;
	}

	/* Tail chunk: k = K - K % 32 + lane, guarded by k < K. */
	tail = ks_s_if(k, bin(g, KS_OP_NE, bin(g, KS_OP_REM, par(g, g->K),
	    c64(g, NLANES)), c64(g, 0)));
	ks_s_append(k, block, tail);
	lanes = ks_s_lanes(k);
	ks_s_append(k, tail->body, lanes);
	kt = decl(g, lanes->body, "kt", KS_TY_I64, KS_VAR_LANE,
	    bin(g, KS_OP_ADD, k_main(g), ks_x_lane(k)));
	guard = ks_s_if(k, bin(g, KS_OP_LT, var(g, kt), par(g, g->K)));
	ks_s_append(k, lanes->body, guard);
	accumulate(g, guard->body, "xt", kt, xo, nw, wo, acc);

	/* One store per output, converted to the dtype there. */
	for (r = 0; r < nw; r++) {
		guard = ks_s_if(k, bin(g, KS_OP_LT, bin(g, KS_OP_ADD,
		    var(g, n0), c64(g, r)), par(g, g->N)));
		ks_s_append(k, block, guard);
		ks_s_append(k, guard->body, ks_s_store(k, g->y,
		    bin(g, KS_OP_ADD, var(g, yo), c64(g, r)),
		    ks_x_reduce(k, KS_RED_SUM, acc[r])));
	}
}

/*
 * Appends to BLOCK the ROWS x RB tile of outputs (rows m0..m0+ROWS-1,
 * columns n0..n0+3): per lane and chunk each W element is loaded once and
 * used for the ROWS rows, each x element once and used for the RB rows of
 * W (accumulate_rows, the same operand order as accumulate()).  M0 is the
 * uniform variable of the first row and XO those of the rows' offsets
 * into x, clamped to the last row like W's (a row past M - 1 recomputes
 * row M - 1, harmless, and only its store is guarded by m0 + i < M); or
 * M0 -1 and XO NULL for rows 0..ROWS-1, all present (small_m).  No branch
 * surrounds a reduction: PoCL 3.1 drops stores after work-group
 * reductions inside branches and loops of constant bounds.
 */
static void build_tile(gemm_t *g, ks_stmt_t *block, int64_t rows, int m0,
    int n0, const int *xo, const int *wo)
{
	ks_ir_kernel_t *k = g->k;
	ks_stmt_t *loop, *lanes, *tail, *guard;
	int acc[TILE_MAX * RB], k0, kt, r, i;
	ks_expr_t *row;
	char name[32];

	for (i = 0; i < rows; i++)
		for (r = 0; r < RB; r++) {
			snprintf(name, sizeof name, "tacc%d_%d", i, r);
			acc[i * RB + r] = decl(g, block, name, KS_TY_F32,
			    KS_VAR_LANE, ks_x_f32(k, 0.0f));
		}
	if (g->wq == KS_DTYPE_Q4_K) {
		struct tile_chunk c = { -1, rows, xo, wo, acc };

		q4k_loop(g, block, RB, wo, tile_chunk, &c, &c.k0);
	} else {
		struct tile_chunk c = { -1, rows, xo, wo, acc };

		k0 = ks_ir_var(k, "tk0", KS_TY_I64, KS_VAR_UNIFORM);
		loop = ks_s_for(k, k0, c64(g, 0), k_main(g), NLANES);
		ks_s_append(k, block, loop);
		if (g->qk)
			wq_hoist(g, loop->body, k0, RB, wo, 0);
		c.k0 = k0;
		chunk_lanes(g, loop->body, tile_chunk, &c);
		g->nhq = 0;
	}

	tail = ks_s_if(k, bin(g, KS_OP_NE, bin(g, KS_OP_REM, par(g, g->K),
	    c64(g, NLANES)), c64(g, 0)));
	ks_s_append(k, block, tail);
	lanes = ks_s_lanes(k);
	ks_s_append(k, tail->body, lanes);
	kt = decl(g, lanes->body, "tkt", KS_TY_I64, KS_VAR_LANE,
	    bin(g, KS_OP_ADD, k_main(g), ks_x_lane(k)));
	guard = ks_s_if(k, bin(g, KS_OP_LT, var(g, kt), par(g, g->K)));
	ks_s_append(k, lanes->body, guard);
	accumulate_rows(g, guard->body, "t", kt, rows, RB, xo, wo, acc);

	/* y[(m0 + i) * N + n0 + r] for n0 + r < N and m0 + i < M, one guard
	 * per output (the emitters evaluate a store's reduction before its
	 * guard, outside any branch). */
	for (r = 0; r < RB; r++)
		for (i = 0; i < rows; i++) {
			ks_expr_t *in = bin(g, KS_OP_LT, bin(g, KS_OP_ADD,
			    var(g, n0), c64(g, r)), par(g, g->N));

			row = m0 >= 0 ? bin(g, KS_OP_ADD, var(g, m0),
			    c64(g, i)) : c64(g, i);
			if (m0 >= 0)
				in = bin(g, KS_OP_AND, in, bin(g, KS_OP_LT,
				    bin(g, KS_OP_ADD, var(g, m0), c64(g, i)),
				    par(g, g->M)));
			guard = ks_s_if(k, in);
			ks_s_append(k, block, guard);
			ks_s_append(k, guard->body, ks_s_store(k, g->y,
			    bin(g, KS_OP_ADD, bin(g, KS_OP_ADD,
			    bin(g, KS_OP_MUL, row, par(g, g->N)),
			    var(g, n0)), c64(g, r)), ks_x_reduce(k,
			    KS_RED_SUM, acc[i * RB + r])));
		}
}

/*
 * Declares PFX0 .. PFX<n-1> in BLOCK, the offsets into a row-major buffer
 * of K columns of rows base + i, each clamped to the last row, ROWS - 1
 * (see the header): OUT[i] = min(base + i, ROWS - 1) * K.  ROWS is the
 * parameter M (x) or N (W).
 */
static void decl_rows(gemm_t *g, ks_stmt_t *block, const char *pfx, int base,
    int n, int rows, int *out)
{
	char name[16];
	int i;

	for (i = 0; i < n; i++) {
		snprintf(name, sizeof name, "%s%d", pfx, i);
		/* A row of W in a block format is K / qk blocks. */
		out[i] = decl(g, block, name, KS_TY_I64, KS_VAR_UNIFORM,
		    bin(g, KS_OP_MUL, bin(g, KS_OP_MIN, bin(g, KS_OP_ADD,
		    var(g, base), c64(g, i)), bin(g, KS_OP_SUB,
		    par(g, rows), c64(g, 1))), rows == g->N && g->qk ?
		    ks_quant_row_bytes(&g->q, par(g, g->K)) : par(g, g->K)));
	}
}


/* Sub-tile (SI, SJ) of a macro tile BN wide: its 4 row offsets into x
 * (SXO), into W (SWO) and its 16 accumulators (SACC, row-major) out of
 * the macro tile's XO, WO and ACC. */
static void sub_sets(int si, int sj, int64_t BN, const int *xo,
    const int *wo, const int *acc, int *sxo, int *swo, int *sacc)
{
	int i, j;

	for (i = 0; i < SR; i++)
		sxo[i] = xo[si * SR + i];
	for (j = 0; j < SC; j++)
		swo[j] = wo[sj * SC + j];
	for (i = 0; i < SR; i++)
		for (j = 0; j < SC; j++)
			sacc[i * SC + j] = acc[(si * SR + i) * BN + sj * SC +
			    j];
}

/*
 * blocked: a work-group of 16 lanes computes the BM x BN macro tile at
 * (m0, n0) as SM x SN sub-tiles of 4 x 4.  Canonical lane l of an output
 * is accumulator a of lane l (l < 16) or b of lane l - 16: one 16-wide
 * vector each, so a sub-tile's 16 accumulators and its operands fit the
 * registers of an AVX-512 CPU, where 32-lane ones (two vectors each) do
 * not.  k runs in blocks of KB; per block every sub-tile runs the block's
 * chunks for its a lanes (k = k0 + lane) and then its b lanes (k = k0 +
 * 16 + lane), so the block's BM rows of x and BN rows of W are loaded
 * from memory once and then reused from the first-level cache by all
 * sub-tiles.  The tail chunk runs once, both halves.  Every lane still
 * accumulates its k in increasing order, and a = a + b followed by a
 * 16-lane reduction is the 32-lane tree (its first level is lane l plus
 * lane l + 16, in that order), so the result is general's, bit for bit.
 * Groups run in bands of BAND macro rows: inside a band the macro row
 * varies fastest, so consecutive groups share W's macro column and the
 * band's rows of x stay in the second-level cache while W streams past
 * once per band.  M is a constant (the guard), so mtn and the last
 * band's size fold.
 */
static void build_blocked(gemm_t *g, ks_stmt_t *body, int64_t M)
{
	ks_ir_kernel_t *k = g->k;
	const int64_t BM = SR * SM, BN = SC * SN, mtn = (M + BM - 1) / BM;
	int xo[BM_MAX], wo[BN_MAX], acc[2][BM_MAX * BN_MAX], sxo[SR], swo[SC],
	    sacc[SR * SC];
	int ntn, band, nbin, within, mt, nt, m0, n0, kb, k0, kt, i, j, si, sj;
	int h;
	ks_stmt_t *kloop, *loop, *lanes, *tail, *guard, *sums;
	char name[48], pfx[48];

	ntn = ulet(g, body, "ntn", bin(g, KS_OP_DIV, bin(g, KS_OP_ADD,
	    par(g, g->N), c64(g, BN - 1)), c64(g, BN)));
	k->grid = bin(g, KS_OP_MUL, c64(g, mtn), bin(g, KS_OP_DIV,
	    bin(g, KS_OP_ADD, par(g, g->N), c64(g, BN - 1)), c64(g, BN)));
	band = ulet(g, body, "band", bin(g, KS_OP_DIV, ks_x_group(k),
	    bin(g, KS_OP_MUL, c64(g, BAND), var(g, ntn))));
	nbin = ulet(g, body, "nbin", bin(g, KS_OP_MIN, c64(g, BAND),
	    bin(g, KS_OP_SUB, c64(g, mtn), bin(g, KS_OP_MUL, var(g, band),
	    c64(g, BAND)))));
	within = ulet(g, body, "within", bin(g, KS_OP_SUB, ks_x_group(k),
	    bin(g, KS_OP_MUL, bin(g, KS_OP_MUL, var(g, band), c64(g, BAND)),
	    var(g, ntn))));
	nt = ulet(g, body, "nt", bin(g, KS_OP_DIV, var(g, within),
	    var(g, nbin)));
	mt = ulet(g, body, "mt", bin(g, KS_OP_ADD, bin(g, KS_OP_MUL,
	    var(g, band), c64(g, BAND)), bin(g, KS_OP_REM, var(g, within),
	    var(g, nbin))));
	m0 = ulet(g, body, "m0", bin(g, KS_OP_MUL, var(g, mt), c64(g, BM)));
	n0 = ulet(g, body, "n0", bin(g, KS_OP_MUL, var(g, nt), c64(g, BN)));
	decl_rows(g, body, "xo", m0, BM, g->M, xo);
	decl_rows(g, body, "wo", n0, BN, g->N, wo);
	for (h = 0; h < 2; h++)
		for (i = 0; i < BM; i++)
			for (j = 0; j < BN; j++) {
				snprintf(name, sizeof name, "acc%c%d_%d",
				    "ab"[h], i, j);
				acc[h][i * BN + j] = decl(g, body, name,
				    KS_TY_F32, KS_VAR_LANE, ks_x_f32(k, 0.0f));
			}

	/* for kb in [0, K - K % 32) step KB: per sub-tile and half h, the
	 * chunks k0 of [kb, min(kb + KB, K - K % 32)), k = k0 + 16h + lane. */
	kb = ks_ir_var(k, "kb", KS_TY_I64, KS_VAR_UNIFORM);
	kloop = ks_s_for(k, kb, c64(g, 0), k_main(g), KB);
	ks_s_append(k, body, kloop);
	for (si = 0; si < SM; si++)
		for (sj = 0; sj < SN; sj++)
			for (h = 0; h < 2; h++) {
				sub_sets(si, sj, BN, xo, wo, acc[h], sxo, swo,
				    sacc);
				snprintf(name, sizeof name, "k0%c%d_%d",
				    "ab"[h], si, sj);
				k0 = ks_ir_var(k, name, KS_TY_I64,
				    KS_VAR_UNIFORM);
				loop = ks_s_for(k, k0, var(g, kb), bin(g,
				    KS_OP_MIN, bin(g, KS_OP_ADD, var(g, kb),
				    c64(g, KB)), k_main(g)), NLANES);
				ks_s_append(k, kloop->body, loop);
				if (g->qk)
					wq_hoist(g, loop->body, k0, SC, swo,
					    16 * h);
				lanes = ks_s_lanes(k);
				ks_s_append(k, loop->body, lanes);
				snprintf(name, sizeof name, "k%c%d_%d",
				    "ab"[h], si, sj);
				kt = decl(g, lanes->body, name, KS_TY_I64,
				    KS_VAR_LANE, bin(g, KS_OP_ADD, bin(g,
				    KS_OP_ADD, var(g, k0), c64(g, 16 * h)),
				    ks_x_lane(k)));
				snprintf(pfx, sizeof pfx, "v%c%d_%d_", "ab"[h],
				    si, sj);
				accumulate_rows(g, lanes->body, pfx, kt, SR,
				    SC, sxo, swo, sacc);
				g->nhq = 0;
			}

	/* The tail chunk, once for the whole tile. */
	tail = ks_s_if(k, bin(g, KS_OP_NE, bin(g, KS_OP_REM, par(g, g->K),
	    c64(g, NLANES)), c64(g, 0)));
	ks_s_append(k, body, tail);
	for (h = 0; h < 2; h++) {
		lanes = ks_s_lanes(k);
		ks_s_append(k, tail->body, lanes);
		snprintf(name, sizeof name, "kt%c", "ab"[h]);
		kt = decl(g, lanes->body, name, KS_TY_I64, KS_VAR_LANE,
		    bin(g, KS_OP_ADD, bin(g, KS_OP_ADD, k_main(g),
		    c64(g, 16 * h)), ks_x_lane(k)));
		guard = ks_s_if(k, bin(g, KS_OP_LT, var(g, kt), par(g, g->K)));
		ks_s_append(k, lanes->body, guard);
		for (si = 0; si < SM; si++)
			for (sj = 0; sj < SN; sj++) {
				sub_sets(si, sj, BN, xo, wo, acc[h], sxo, swo,
				    sacc);
				snprintf(pfx, sizeof pfx, "t%c%d_%d_", "ab"[h],
				    si, sj);
				accumulate_rows(g, guard->body, pfx, kt, SR,
				    SC, sxo, swo, sacc);
			}
	}

	/* The tree's first level, lane l + lane l + 16 of the 32 canonical
	 * lanes, then the 16-lane tree; one guarded store per output. */
	sums = ks_s_lanes(k);
	ks_s_append(k, body, sums);
	for (i = 0; i < BM * BN; i++)
		ks_s_append(k, sums->body, ks_s_assign(k, acc[0][i], bin(g,
		    KS_OP_ADD, var(g, acc[0][i]), var(g, acc[1][i]))));
	for (j = 0; j < BN; j++)
		for (i = 0; i < BM; i++) {
			guard = ks_s_if(k, bin(g, KS_OP_AND, bin(g, KS_OP_LT,
			    bin(g, KS_OP_ADD, var(g, n0), c64(g, j)),
			    par(g, g->N)), bin(g, KS_OP_LT, bin(g, KS_OP_ADD,
			    var(g, m0), c64(g, i)), c64(g, M))));
			ks_s_append(k, body, guard);
			ks_s_append(k, guard->body, ks_s_store(k, g->y,
			    bin(g, KS_OP_ADD, bin(g, KS_OP_MUL, bin(g,
			    KS_OP_ADD, var(g, m0), c64(g, i)), par(g, g->N)),
			    bin(g, KS_OP_ADD, var(g, n0), c64(g, j))),
			    ks_x_reduce(k, KS_RED_SUM, acc[0][i * BN + j])));
		}
}

/* min(I, the last byte of W): a prefetch's index within W. */
static ks_expr_t *w_within(gemm_t *g, ks_expr_t *i)
{
	return bin(g, KS_OP_MIN, i, bin(g, KS_OP_SUB, bin(g, KS_OP_MUL,
	    par(g, g->N), ks_quant_row_bytes(&g->q, par(g, g->K))),
	    c64(g, 1)));
}

/*
 * fast (mode fast, W in a block format): x comes in q8_0 blocks (the
 * bytes kspec_quantize writes), and each output is a sum of block dot
 * products (KS_X_QDOT, k_quant.h) in 16 lanes: lane l accumulates from
 * 0.0, by fma in increasing pair order, the lane's part of each pair of
 * blocks (q4_k: per super-block its min term, then its sub-blocks 2p,
 * 2p+1) and of a last single block when K / 32 is odd; then the
 * canonical reduction of
 * the 16 lanes (strides 8, 4, 2, 1) and one store.  Grid M * ceil(N /
 * RB_F): group = m * ceil(N / RB_F) + the column block, RB_F rows of W
 * per group, clamped to N - 1 for loads like gemv_m1's; the next group's
 * bytes or each row's a few hundred ahead are prefetched (PF_GROUP; a
 * hint: no value changes).
 */
static ks_ir_kernel_t *build_fast(const ks_spec_t *spec)
{
	gemm_t g = { 0 };
	ks_quant_t xq;
	ks_ir_kernel_t *k;
	ks_stmt_t *body, *loop, *lanes, *guard;
	int64_t K = spec->dims[DIM_K].value, nblk = K / NLANES, rowb, step, c;
	int nb, m, n0, xo, yo, it, xp, wo[RB_F], wp[RB_F], acc[RB_F], r, p;
	int far;
	char name[16];

	k = ks_ir_new("gemm", "fast", NLANES / 2);
	g.k = k;
	g.wq = spec->wdtype;
	ks_dtype_block(spec->wdtype, &g.qk, &g.qb);
	rowb = K / g.qk * g.qb;
	step = RB_F * (g.wq == KS_DTYPE_Q4_K ? g.qb : 2 * g.qb);
	far = RB_F * rowb <= PF_GROUP;
	ks_quant_buffer(&xq, k, "x", KS_DTYPE_Q8_0, "M", "K");
	g.x = xq.W;
	ks_quant_buffer(&g.q, k, "W", spec->wdtype, "N", "K");
	g.W = g.q.W;
	g.y = ks_ir_buffer(k, "y", spec->dtype, KS_ACCESS_WRITE);
	ks_ir_buffer_dims(k, g.y, "M,N");
	g.M = ks_ir_scalar(k, "M", KS_TY_I64);
	g.N = ks_ir_scalar(k, "N", KS_TY_I64);
	g.K = ks_ir_scalar(k, "K", KS_TY_I64);
	body = k->body;
	nb = decl(&g, body, "nb", KS_TY_I64, KS_VAR_UNIFORM, bin(&g,
	    KS_OP_DIV, bin(&g, KS_OP_ADD, par(&g, g.N), c64(&g, RB_F - 1)),
	    c64(&g, RB_F)));
	k->grid = bin(&g, KS_OP_MUL, par(&g, g.M), bin(&g, KS_OP_DIV,
	    bin(&g, KS_OP_ADD, par(&g, g.N), c64(&g, RB_F - 1)),
	    c64(&g, RB_F)));
	m = ulet(&g, body, "m", bin(&g, KS_OP_DIV, ks_x_group(k),
	    var(&g, nb)));
	n0 = ulet(&g, body, "n0", bin(&g, KS_OP_MUL, bin(&g, KS_OP_REM,
	    ks_x_group(k), var(&g, nb)), c64(&g, RB_F)));
	xo = ulet(&g, body, "xo", bin(&g, KS_OP_MUL, var(&g, m),
	    c64(&g, nblk * QX_B)));
	yo = ulet(&g, body, "yo", bin(&g, KS_OP_ADD, bin(&g, KS_OP_MUL,
	    var(&g, m), par(&g, g.N)), var(&g, n0)));
	decl_rows(&g, body, "wo", n0, RB_F, g.N, wo);
	for (r = 0; r < RB_F; r++) {
		snprintf(name, sizeof name, "acc%d", r);
		acc[r] = decl(&g, body, name, KS_TY_F32, KS_VAR_LANE,
		    ks_x_f32(k, 0.0f));
	}

	/* The pairs: a super-block (4 pairs) or 2 blocks an iteration. */
	it = ks_ir_var(k, "kp", KS_TY_I64, KS_VAR_UNIFORM);
	loop = ks_s_for(k, it, c64(&g, 0), c64(&g, g.wq == KS_DTYPE_Q4_K ?
	    K / 256 : nblk / 2), 1);
	ks_s_append(k, body, loop);
	xp = ulet(&g, loop->body, "xp", bin(&g, KS_OP_ADD, var(&g, xo),
	    bin(&g, KS_OP_MUL, var(&g, it), c64(&g, g.wq == KS_DTYPE_Q4_K ?
	    8 * QX_B : 2 * QX_B))));
	for (r = 0; r < RB_F; r++) {
		snprintf(name, sizeof name, "wp%d", r);
		wp[r] = ulet(&g, loop->body, name, bin(&g, KS_OP_ADD,
		    var(&g, wo[r]), bin(&g, KS_OP_MUL, var(&g, it),
		    c64(&g, g.wq == KS_DTYPE_Q4_K ? g.qb : 2 * g.qb))));
		/* W's bytes PF_F ahead in the row, within W (not q4_k:
		 * measured no faster). */
		if (!far && g.wq != KS_DTYPE_Q4_K)
			ks_s_append(k, loop->body, ks_s_prefetch(k, g.W,
			    w_within(&g, bin(&g, KS_OP_ADD, var(&g, wp[r]),
			    c64(&g, g.wq == KS_DTYPE_Q8_0 ? PF_F8 : PF_F)))));
	}
	/* Or the next group's bytes, step a pass, whole lines. */
	for (c = 0; far && c < step; c += 64)
		ks_s_append(k, loop->body, ks_s_prefetch_l2(k, g.W,
		    w_within(&g, bin(&g, KS_OP_ADD, var(&g, wo[0]), bin(&g,
		    KS_OP_ADD, bin(&g, KS_OP_MUL, var(&g, it), c64(&g, step)),
		    c64(&g, RB_F * rowb + c))))));
	lanes = ks_s_lanes(k);
	ks_s_append(k, loop->body, lanes);
	for (r = 0; r < RB_F && g.wq == KS_DTYPE_Q4_K; r++)
		ks_s_append(k, lanes->body, ks_s_assign(k, acc[r],
		    ks_quant_qdot(&g.q, g.x, 4, wp[r], 0, xp, 0, acc[r])));
	for (p = 0; p < (g.wq == KS_DTYPE_Q4_K ? 4 : 1); p++)
		for (r = 0; r < RB_F; r++)
			ks_s_append(k, lanes->body, ks_s_assign(k, acc[r],
			    ks_quant_qdot(&g.q, g.x, g.wq == KS_DTYPE_Q4_K ?
			    p : 2, wp[r], 0, xp, 2 * QX_B * p, acc[r])));

	/* The last block alone when K / 32 is odd (never for q4_k). */
	if (g.wq != KS_DTYPE_Q4_K && nblk % 2) {
		lanes = ks_s_lanes(k);
		ks_s_append(k, body, lanes);
		for (r = 0; r < RB_F; r++)
			ks_s_append(k, lanes->body, ks_s_assign(k, acc[r],
			    ks_quant_qdot(&g.q, g.x, 1, wo[r], (nblk - 1) *
			    g.qb, xo, (nblk - 1) * QX_B, acc[r])));
	}
	for (r = 0; r < RB_F; r++) {
		guard = ks_s_if(k, bin(&g, KS_OP_LT, bin(&g, KS_OP_ADD,
		    var(&g, n0), c64(&g, r)), par(&g, g.N)));
		ks_s_append(k, body, guard);
		ks_s_append(k, guard->body, ks_s_store(k, g.y,
		    bin(&g, KS_OP_ADD, var(&g, yo), c64(&g, r)),
		    ks_x_reduce(k, KS_RED_SUM, acc[r])));
	}
	return k;
}

static ks_ir_kernel_t *gemm_build(const ks_spec_t *spec, const char *variant)
{
	gemm_t g = { 0 };
	ks_ir_kernel_t *k;
	ks_stmt_t *body;
	int nb, m0, n0, yo, xo[MB], wo[ROW_MAX];
	enum { GENERAL, GEMV_M1, SMALL_M, BLOCKED } v;

	/* The fast mode's arithmetic is another (x in q8_0): only its own
	 * variant, which serves every shape. */
	if (is_fast(spec))
		return strcmp(variant, "fast") == 0 ? build_fast(spec) : NULL;
	if (strcmp(variant, "gemv_m1") == 0 && spec->dims[DIM_M].is_const &&
	    spec->dims[DIM_M].value == 1)
		v = GEMV_M1;
	else if (strcmp(variant, "general") == 0)
		v = GENERAL;
	else if (strcmp(variant, "small_m") == 0 &&
	    is_small_m(&spec->dims[DIM_M]))
		v = SMALL_M;
	else if (strcmp(variant, "blocked") == 0 &&
	    spec->dims[DIM_M].is_const &&
	    spec->dims[DIM_M].value >= BLOCKED_M_MIN)
		v = BLOCKED;
	else
		return NULL;
	k = ks_ir_new("gemm", variant, v == BLOCKED ? NLANES / 2 : NLANES);
	g.k = k;
	g.x = ks_ir_buffer(k, "x", spec->dtype, KS_ACCESS_READ);
	g.wq = KS_DTYPE_F32;
	if (ks_dtype_block(spec->wdtype, &g.qk, &g.qb)) {
		/* The bytes of N rows of K / qk blocks. */
		g.wq = spec->wdtype;
		ks_quant_buffer(&g.q, k, "W", spec->wdtype, "N", "K");
		g.W = g.q.W;
	} else {
		g.W = ks_ir_buffer(k, "W", spec->wdtype, KS_ACCESS_READ);
		ks_ir_buffer_dims(k, g.W, "N,K");
	}
	g.y = ks_ir_buffer(k, "y", spec->dtype, KS_ACCESS_WRITE);
	ks_ir_buffer_dims(k, g.x, "M,K");
	ks_ir_buffer_dims(k, g.y, "M,N");
	g.M = ks_ir_scalar(k, "M", KS_TY_I64);
	g.N = ks_ir_scalar(k, "N", KS_TY_I64);
	g.K = ks_ir_scalar(k, "K", KS_TY_I64);
	body = k->body;
	if (v == BLOCKED) {
		build_blocked(&g, body, spec->dims[DIM_M].value);
		return k;
	}
	if (v == SMALL_M) {
		/* small_m: ceil(N / RB) groups, all M rows in each. */
		k->grid = bin(&g, KS_OP_DIV, bin(&g, KS_OP_ADD, par(&g, g.N),
		    c64(&g, RB - 1)), c64(&g, RB));
		n0 = decl(&g, body, "n0", KS_TY_I64, KS_VAR_UNIFORM,
		    bin(&g, KS_OP_MUL, ks_x_group(k), c64(&g, RB)));
		decl_rows(&g, body, "wo", n0, RB, g.N, wo);
		build_tile(&g, body, spec->dims[DIM_M].value, -1, n0, NULL,
		    wo);
		return k;
	}
	if (v == GEMV_M1) {
		/* gemv_m1: ceil(N / RB_M1) groups, one row. */
		k->grid = bin(&g, KS_OP_DIV, bin(&g, KS_OP_ADD, par(&g, g.N),
		    c64(&g, RB_M1 - 1)), c64(&g, RB_M1));
		n0 = decl(&g, body, "n0", KS_TY_I64, KS_VAR_UNIFORM,
		    bin(&g, KS_OP_MUL, ks_x_group(k), c64(&g, RB_M1)));
		yo = decl(&g, body, "yo", KS_TY_I64, KS_VAR_UNIFORM,
		    var(&g, n0));
		decl_rows(&g, body, "wo", n0, RB_M1, g.N, wo);
		build_row(&g, body, n0, -1, yo, RB_M1, wo);
		return k;
	}

	/* general: ceil(M / MB) * ceil(N / RB) groups, group = mb * nb +
	 * the column block. */
	k->grid = bin(&g, KS_OP_MUL, bin(&g, KS_OP_DIV, bin(&g, KS_OP_ADD,
	    par(&g, g.M), c64(&g, MB - 1)), c64(&g, MB)), bin(&g, KS_OP_DIV,
	    bin(&g, KS_OP_ADD, par(&g, g.N), c64(&g, RB - 1)), c64(&g, RB)));
	nb = decl(&g, body, "nb", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&g, KS_OP_DIV, bin(&g, KS_OP_ADD, par(&g, g.N),
	    c64(&g, RB - 1)), c64(&g, RB)));
	m0 = decl(&g, body, "m0", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&g, KS_OP_MUL, bin(&g, KS_OP_DIV, ks_x_group(k), var(&g, nb)),
	    c64(&g, MB)));
	n0 = decl(&g, body, "n0", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&g, KS_OP_MUL, bin(&g, KS_OP_REM, ks_x_group(k),
	    var(&g, nb)), c64(&g, RB)));
	decl_rows(&g, body, "wo", n0, RB, g.N, wo);

	/* The rows' offsets into x, clamped to the last row. */
	decl_rows(&g, body, "xo", m0, MB, g.M, xo);
	build_tile(&g, body, MB, m0, n0, xo, wo);
	return k;
}

const ks_kernel_def_t ks_kernel_gemm = {
	.name = "gemm",
	.summary = "y[m][n] = sum_k x[m][k] * W[n][k]; x MxK, W NxK, y MxN, "
	    "row-major",
	.version = 10,          /* 8: the block formats q8_0, q4_0, q4_k;
				   9: mode fast's variant for them;
				   10: its prefetch of the next group */
	.probes = gemm_probes,
	.nprobes = (int)(sizeof gemm_probes / sizeof gemm_probes[0]),
	.dims = gemm_dims,
	.ndims = 3,
	.variants = gemm_variants,
	.nvariants = 5,
	.select = gemm_select,
	.guards = gemm_guards,
	.check = gemm_check,
	.build = gemm_build,
	.weights = "W",
	.wmix = KS_WMIX_NARROW,
	.wblocks = 1,
};
