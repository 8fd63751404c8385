/*
 * examples/llama's kernels: the kinds of call the engine makes, what each
 * asks kspecd for (kernel, dims in its order, whether it takes the
 * weights' dtype), and the dims of each for a config and a row count.
 * One kind is not a kernel: K_QUANT_X, libkspec's kspec_quantize of a
 * gemm's x into q8_0 blocks on the host before a fast-mode gemm, listed
 * so that --profile times it beside the kernels.
 */
#ifndef KS_EXAMPLES_LLAMA_KINDS_H
#define KS_EXAMPLES_LLAMA_KINDS_H

#include <stdint.h>

#include "model.h"

enum {
	K_EMBED, K_RMSNORM, K_ADD_RMSNORM, K_GEMM_Q, K_GEMM_KV, K_GEMM_O,
	K_GEMM_GU, K_GEMM_DOWN, K_LOGITS, K_KV_ROPE, K_ROPE, K_ATTN, K_SILU,
	K_ARGMAX,
	/* prefill on panel-packed operands: x's panels of T rows of H, Dq
	 * or F; each weight's panels (packed once, at start-up); gemm_packed
	 * per weight */
	K_PACK_XH, K_PACK_XQ, K_PACK_XF, K_PACK_WQ, K_PACK_WKV, K_PACK_WO,
	K_PACK_WGU, K_PACK_WD, K_GP_Q, K_GP_KV, K_GP_O, K_GP_GU, K_GP_DOWN,
	/* --mode fast: x quantized to q8_0 (kspec_quantize, no kernel) */
	K_QUANT_X,
	NKINDS
};

/* Rows of an x panel and of a W panel of gemm_packed (docs/kernels.md). */
enum { PANEL_X = 8, PANEL_W = 32 };

enum { PH_PREFILL, PH_DECODE, PH_VERIFY, NPHASES };

enum { MAX_DIMS = 8 };

typedef struct {
	const char *label;      /* what it computes, for --profile */
	const char *kernel;     /* NULL: not a kernel (K_QUANT_X) */
	int weighted;           /* takes the weights' dtype (wdtype) */
	int ndims;
	const char *dims[MAX_DIMS];     /* the kernel's dims, in its order */
	int packed;             /* 1: only with packed prefill; 2: and its
	                           dtype is the weights' (a weight's pack) */
} kind_t;

extern const kind_t kinds[NKINDS];

/* The dims of KIND for T rows of config C, in the kernel's order. */
void dims_of(const config_t *c, int kind, int64_t T, int64_t *v);

/* The reply's launch.groups GROUPS of a KIND call with dims DIMV: an
 * integer or a C expression of the dynamic dims (docs/protocol.md):
 * integers, dim names, + - * / % and parentheses, evaluated in int64 as
 * C does; dies on what it cannot evaluate.  libkspec evaluates it for
 * cpu calls; the OpenCL and CUDA launches evaluate it here. */
int64_t launch_groups(const char *groups, int kind, const int64_t *dimv);

#endif
