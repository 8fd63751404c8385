/*
 * Private to specialize/: rope's rotation of one row, shared by rope
 * (k_rope.c, in place) and kv_append_rope (k_kv_append_rope.c, from the
 * step's k into the cache), so that the two cannot drift apart: with the
 * same inputs they give the same bits by construction.  Implemented in
 * k_rope.c, with the buffer-size check both use.
 */
#ifndef KS_K_ROPE_H
#define KS_K_ROPE_H

#include "specialize.h"

enum { KS_ROPE_LANES = 32 };

/* One row of D elements to rotate: read from SRC at row offset SO, the
 * angles from CS at row offset CO, the results stored into DST at row
 * offset DO (SRC == DST, SO == DO for in place).  Buffers are parameter
 * indices, D the head-dim scalar parameter, SO, DO, CO uniform i64
 * variables. */
typedef struct {
	int src, dst, cs, D;
	int so, dof, co;
} ks_rope_row_t;

/*
 * Appends to BLOCK (uniform code) the rotation of the row's pairs i <
 * D/2: full chunks of 32 pairs (lane l takes i = l mod 32, no guard), then
 * one tail chunk under `if (D/2) % 32 != 0` guarded by i < D/2.  Per pair
 * c = cs[co+i], s = cs[co+D/2+i], x0 = src[so+i], x1 = src[so+D/2+i] are
 * loaded before either store; dst[do+i] = x0*c - x1*s, dst[do+D/2+i] =
 * x1*c + x0*s (two f32 multiplies, then the subtraction or addition; no
 * fma).  Declares the variables i0, i, it, cv, sv, x0v, x1v, ct, st, x0t,
 * x1t.
 */
void ks_rope_row(ks_ir_kernel_t *k, ks_stmt_t *block, const ks_rope_row_t *r);

/*
 * KS_E_TOO_LARGE (message naming BUF and its dims) when the buffer of the
 * product of the NDIM dims IDX (indices into SPEC's dims) has more than
 * KS_MAX_ELEMS elements, all of them constant (overflow-checked); KS_OK
 * otherwise, and whenever one of them is dynamic.
 */
int ks_check_buffer(const ks_spec_t *spec, const char *buf, const int *idx,
    int ndim, char *err, size_t errlen);

#endif
