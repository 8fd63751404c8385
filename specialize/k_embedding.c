/*
 * embedding: y[t][j] = table[ids[t]][j] for t < T, j < H; zeros for an id
 * outside [0, V).
 *
 * ids is T int32, table is V x H, y is T x H, row-major.  table is of the
 * request's wdtype: the dtype, f16/bf16 with dtype f32, or a block format
 * (q8_0, q4_0, q4_k, with H a constant multiple of the block), whose
 * weights are decoded by k_quant.h.  Parameters, in ABI order: ids (i32,
 * read), table (read), y (write), T, V, H (i64).
 *
 * Definition (docs/kernels.md): each element is loaded (converted exactly
 * to f32) and stored once, round-to-nearest-even to y's dtype: between
 * equal dtypes that is the value itself (a NaN stays NaN, quieted), from a
 * narrower table an exact widening.  An id outside [0, V) gives a row of
 * +0.0 and reads nothing outside the table: the load address is row 0's
 * (V >= 1) and a select picks 0.0, so no id reaches memory unchecked.
 *
 * Schedule (changes no value): a work-group copies a chunk of CHUNK = 256
 * columns of one token, 8 steps of 32 lanes (columns c0 + 32 s + lane),
 * grid T * ((H + 255) / 256), as silu_mul.  A full chunk runs unguarded;
 * the last chunk of a row, when H % 256 != 0, is guarded by column < H.
 * One variant, `general`: binding H is the fixed-width specialization
 * (with H a multiple of 256 the guard folds away, with H <= 256 the chunk
 * index folds to 0).
 */
#include "k_quant.h"
#include "k_rope.h"

#include <stdio.h>
#include <string.h>

enum {
	NLANES = 32,
	CHUNK = 256,    /* columns per work-group: 8 steps of 32 lanes */
};

static const char *const emb_dims[] = { "T", "V", "H" };
enum { DIM_T, DIM_V, DIM_H };

static const char *const emb_variants[] = { "general" };
static const char *const emb_guards[] = {
	"any T, V, H, constant or dynamic",
};

/* Beyond the common probes: a model's table, decode and prefill. */
static const int64_t emb_probes[][KS_MAX_DIMS] = {
	{ 1, 128256, 4096 },
	{ 0, 32000, 4096 },
};

static const char *emb_select(const ks_spec_t *spec)
{
	(void)spec;
	return "general";
}

static int emb_check(const ks_spec_t *spec, char *err, size_t errlen)
{
	static const int table_dims[] = { DIM_V, DIM_H };
	static const int y_dims[] = { DIM_T, DIM_H };
	int rc;

	rc = ks_check_buffer(spec, "table", table_dims, 2, err, errlen);
	rc = rc ? rc : ks_quant_check(spec, DIM_H, err, errlen);
	return rc ? rc : ks_check_buffer(spec, "y", y_dims, 2, err, errlen);
}

/* ---- the builder ---- */

typedef struct {
	ks_ir_kernel_t *k;
	int table, y, H;        /* parameters */
	int c0, so, yo, ok;     /* uniform: chunk start, offsets, id valid */
	ks_quant_t q;           /* a table in a block format (q.qk != 0): so
	                           is then its row's first byte */
} emb_t;

static ks_expr_t *c64(emb_t *e, int64_t v)
{
	return ks_x_i64(e->k, v);
}

static ks_expr_t *bin(emb_t *e, ks_binop_t op, ks_expr_t *a, ks_expr_t *b)
{
	return ks_x_bin(e->k, op, a, b);
}

/* (H + 255) / 256, the chunks per row; a fresh tree per use. */
static ks_expr_t *nchunks(emb_t *e)
{
	return bin(e, KS_OP_DIV, bin(e, KS_OP_ADD, ks_x_param(e->k, e->H),
	    c64(e, CHUNK - 1)), c64(e, CHUNK));
}

static int decl(emb_t *e, ks_stmt_t *block, const char *name, ks_ty_t t,
    ks_var_scope_t scope, ks_expr_t *init)
{
	int v = ks_ir_var(e->k, name, t, scope);

	ks_s_append(e->k, block, ks_s_decl(e->k, v, init));
	return v;
}

/*
 * Appends to BLOCK the 8 steps of a chunk: for s0 = 0 to 256 step 32,
 * lanes { j = s0 + lane; [if c0 + j < H] y[yo + j] = ok != 0 ?
 * table[so + j] : 0.0 }.  SFX ("v" full, "t" tail) names the variables.
 */
static void chunk(emb_t *e, ks_stmt_t *block, char sfx, int guarded)
{
	ks_ir_kernel_t *k = e->k;
	ks_stmt_t *loop, *lanes, *in;
	char name[8];
	int s0, j, col = -1;

	snprintf(name, sizeof name, "s0%c", sfx);
	s0 = ks_ir_var(k, name, KS_TY_I64, KS_VAR_UNIFORM);
	loop = ks_s_for(k, s0, c64(e, 0), c64(e, CHUNK), NLANES);
	ks_s_append(k, block, loop);
	lanes = ks_s_lanes(k);
	ks_s_append(k, loop->body, lanes);
	snprintf(name, sizeof name, "j%c", sfx);
	j = decl(e, lanes->body, name, KS_TY_I64, KS_VAR_LANE,
	    bin(e, KS_OP_ADD, ks_x_var(k, s0), ks_x_lane(k)));
	if (e->q.qk) {
		/* The weight's column in its row, for the decode. */
		snprintf(name, sizeof name, "col%c", sfx);
		col = decl(e, lanes->body, name, KS_TY_I64, KS_VAR_LANE,
		    bin(e, KS_OP_ADD, ks_x_var(k, e->c0), ks_x_var(k, j)));
	}
	in = lanes;
	if (guarded) {
		in = ks_s_if(k, bin(e, KS_OP_LT, bin(e, KS_OP_ADD,
		    ks_x_var(k, e->c0), ks_x_var(k, j)), ks_x_param(k, e->H)));
		ks_s_append(k, lanes->body, in);
	}
	ks_s_append(k, in->body, ks_s_store(k, e->y, bin(e, KS_OP_ADD,
	    ks_x_var(k, e->yo), ks_x_var(k, j)), ks_x_select(k,
	    bin(e, KS_OP_NE, ks_x_var(k, e->ok), c64(e, 0)),
	    e->q.qk ? ks_quant_value(&e->q, e->so, col) :
	    ks_x_load(k, e->table, bin(e, KS_OP_ADD, ks_x_var(k, e->so),
	    ks_x_var(k, j))), ks_x_f32(k, 0.0f))));
}

static ks_ir_kernel_t *emb_build(const ks_spec_t *spec, const char *variant)
{
	emb_t e = { 0 };
	ks_ir_kernel_t *k;
	ks_stmt_t *body, *tail;
	int ids, T, V, t, id;

	if (strcmp(variant, "general") != 0)
		return NULL;
	k = ks_ir_new("embedding", variant, NLANES);
	e.k = k;
	ids = ks_ir_buffer_i32(k, "ids", KS_ACCESS_READ);
	if (ks_dtype_block(spec->wdtype, NULL, NULL)) {
		ks_quant_buffer(&e.q, k, "table", spec->wdtype, "V", "H");
		e.table = e.q.W;
	} else {
		e.table = ks_ir_buffer(k, "table", spec->wdtype,
		    KS_ACCESS_READ);
		ks_ir_buffer_dims(k, e.table, "V,H");
	}
	e.y = ks_ir_buffer(k, "y", spec->dtype, KS_ACCESS_WRITE);
	T = ks_ir_scalar(k, "T", KS_TY_I64);
	V = ks_ir_scalar(k, "V", KS_TY_I64);
	e.H = ks_ir_scalar(k, "H", KS_TY_I64);
	ks_ir_buffer_dims(k, ids, "T");
	ks_ir_buffer_dims(k, e.y, "T,H");
	body = k->body;

	k->grid = bin(&e, KS_OP_MUL, ks_x_param(k, T), nchunks(&e));
	t = decl(&e, body, "t", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&e, KS_OP_DIV, ks_x_group(k), nchunks(&e)));
	e.c0 = decl(&e, body, "c0", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&e, KS_OP_MUL, bin(&e, KS_OP_REM, ks_x_group(k),
	    nchunks(&e)), c64(&e, CHUNK)));
	id = decl(&e, body, "id", KS_TY_I64, KS_VAR_UNIFORM,
	    ks_x_cast(k, KS_TY_I64, ks_x_load(k, ids, ks_x_var(k, t))));
	e.ok = decl(&e, body, "ok", KS_TY_I64, KS_VAR_UNIFORM, ks_x_select(k,
	    bin(&e, KS_OP_AND, bin(&e, KS_OP_LE, c64(&e, 0), ks_x_var(k, id)),
	    bin(&e, KS_OP_LT, ks_x_var(k, id), ks_x_param(k, V))),
	    c64(&e, 1), c64(&e, 0)));
	/* Row 0 stands in for an invalid id: a real address, never used.
	 * A block-format row starts at its first byte; the decode takes
	 * the column. */
	e.so = decl(&e, body, "so", KS_TY_I64, KS_VAR_UNIFORM, e.q.qk ?
	    bin(&e, KS_OP_MUL, bin(&e, KS_OP_MUL, ks_x_var(k, id),
	    ks_x_var(k, e.ok)), ks_quant_row_bytes(&e.q,
	    ks_x_param(k, e.H))) :
	    bin(&e, KS_OP_ADD, bin(&e, KS_OP_MUL, bin(&e, KS_OP_MUL,
	    ks_x_var(k, id), ks_x_var(k, e.ok)), ks_x_param(k, e.H)),
	    ks_x_var(k, e.c0)));
	e.yo = decl(&e, body, "yo", KS_TY_I64, KS_VAR_UNIFORM,
	    bin(&e, KS_OP_ADD, bin(&e, KS_OP_MUL, ks_x_var(k, t),
	    ks_x_param(k, e.H)), ks_x_var(k, e.c0)));

	tail = ks_s_if(k, bin(&e, KS_OP_AND,
	    bin(&e, KS_OP_NE, bin(&e, KS_OP_REM, ks_x_param(k, e.H),
	    c64(&e, CHUNK)), c64(&e, 0)),
	    bin(&e, KS_OP_LT, bin(&e, KS_OP_SUB, ks_x_param(k, e.H),
	    ks_x_var(k, e.c0)), c64(&e, CHUNK))));
	tail->orelse = ks_s_block(k);
	ks_s_append(k, body, tail);
	chunk(&e, tail->body, 't', 1);
	chunk(&e, tail->orelse, 'v', 0);
	return k;
}

const ks_kernel_def_t ks_kernel_embedding = {
	.name = "embedding",
	.summary = "y[t] = table[ids[t]] (a row of zeros for an id outside "
	    "[0, V)); ids T int32, table VxH, y TxH",
	.version = 2,           /* 2: the block formats q8_0, q4_0, q4_k */
	.dims = emb_dims,
	.ndims = 3,
	.variants = emb_variants,
	.nvariants = 1,
	.select = emb_select,
	.guards = emb_guards,
	.check = emb_check,
	.build = emb_build,
	.probes = emb_probes,
	.nprobes = (int)(sizeof emb_probes / sizeof emb_probes[0]),
	.weights = "table",
	.wmix = KS_WMIX_NARROW,
	.wblocks = 1,
};
