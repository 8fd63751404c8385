/*
 * Private to specialize/: the row machinery shared by the row kernels
 * (k_rmsnorm.c: rmsnorm and add_rmsnorm; k_softmax.c), implemented in k_norm.c.
 *
 * A row kernel has two dims, R (rows) and a row length (H, or L for
 * softmax), declared in that order; one work-group of 32 lanes per row
 * (grid R).  Every pass over the row follows the canonical assignment of
 * the canonical order (docs/kernels.md): lane l handles the elements
 * j = l (mod 32) in increasing j, as full chunks of 32 (no guard) and then one tail chunk
 * under `if H % 32 != 0`, guarded by j < H, exactly like gemm's k loop.
 * Because every pass assigns element j to the same lane, a lane only ever
 * reads back what it stored itself (global or local memory), so passes
 * need no barrier for correctness; row_local puts one between the lanes
 * phases anyway, as the IR asks wherever a phase reads a local array.
 *
 * Variants of every row kernel: `general` (any dims, constant or dynamic)
 * and `row_local` (the row length is a constant <= KS_IR_LOCAL_MAX): the
 * row is kept in a local array so that it is loaded (or computed) once.
 */
#ifndef KS_K_NORM_H
#define KS_K_NORM_H

#include "specialize.h"

enum {
	KS_ROW_LANES = 32,
	KS_ROW_DIM_R = 0,       /* dims in declared order: R, then the length */
	KS_ROW_DIM_H = 1,
	KS_ROW_NPROBES = 3,
};

/* The builder state of one row kernel. */
typedef struct ks_row {
	ks_ir_kernel_t *k;
	int R, H;               /* scalar parameters: rows, row length */
	int ro;                 /* uniform i64: group * H, the row's offset */
	int row;                /* local array of the row (row_local), or -1 */
	int nphases;            /* passes so far, for unique names */
} ks_row_t;

/*
 * Appends to BLOCK (inside LANES) the work of one element: J is the lane
 * i64 variable holding the element's index in the row (0 .. H-1); names of
 * variables the callback declares must end in SFX (unique per call).
 */
typedef void (*ks_row_elem_fn)(ks_row_t *r, void *ctx, ks_stmt_t *block,
    int j, const char *sfx);

/* Variant names, guards and probes, shared by the row kernels.
 * ks_row_guards_h names the length H, ks_row_guards_l names L. */
extern const char *const ks_row_variants[2];
extern const char *const ks_row_guards_h[2];
extern const char *const ks_row_guards_l[2];
extern const int64_t ks_row_probes[KS_ROW_NPROBES][KS_MAX_DIMS];

/* "row_local" when the row length is a constant <= KS_IR_LOCAL_MAX, else
 * "general"; mode fast selects the same. */
const char *ks_row_select(const ks_spec_t *spec);
/* ks_row_select for f16 and bf16, "general" for f32 (rmsnorm and
 * add_rmsnorm, where an f32 row_local was measured slower). */
const char *ks_row_select_half(const ks_spec_t *spec);
/* For a build of VARIANT: 0 for "general", 1 for "row_local" when SPEC
 * is within its guard, -1 otherwise (the build returns NULL then). */
int ks_row_is_local(const ks_spec_t *spec, const char *variant);
/* Overflow-checked size of the R x H buffers (named by X) when both dims
 * are constant: KS_E_TOO_LARGE over KS_MAX_ELEMS. */
int ks_row_check(const ks_spec_t *spec, char *err, size_t errlen);

/*
 * Starts the body of K: R and H are its dim parameters; grid R; decl ro =
 * group * H.  LOCAL_N > 0 declares the local array `row` of that many
 * elements (row_local), 0 none.
 */
void ks_row_begin(ks_row_t *r, ks_ir_kernel_t *k, int R, int H,
    int64_t local_n);
/* Appends one pass over the row to the kernel's body: FN for every element
 * in full chunks, then in the guarded tail chunk. */
void ks_row_pass(ks_row_t *r, ks_row_elem_fn fn, void *ctx);
/* Declares variable NAME in BLOCK with INIT; returns its index. */
int ks_row_decl(ks_row_t *r, ks_stmt_t *block, const char *name, ks_ty_t t,
    ks_var_scope_t scope, ks_expr_t *init);
/* ro + j: the element's index in an R x H buffer (a fresh tree). */
ks_expr_t *ks_row_at(ks_row_t *r, int j);

/*
 * rmsnorm's arithmetic after the sum of squares, shared with add_rmsnorm
 * so that the two cannot drift apart.  ks_row_rms_inv appends, uniform:
 * ss = reduce_sum(ACC); mean = ss / f32(H); inv = 1.0 / sqrt(mean + EPS)
 * (EPS an f32 scalar parameter), and returns inv.  ks_row_rms_store
 * appends to BLOCK: y[ro + j] = (V * inv) * w[j], two roundings in
 * that order, no fma.
 */
int ks_row_rms_inv(ks_row_t *r, int acc, int eps);
void ks_row_rms_store(ks_row_t *r, ks_stmt_t *block, int j, ks_expr_t *v,
    int inv, int w, int y);

#endif
