/*
 * The library cases of the GPU check (bench/gpu/check.c), beside gemm's
 * own: each variant of every other kernel at a small shape, with constant
 * dims (consts bit i: dim i constant) and all dynamic, just outside the
 * guards.  tests/test_library.c runs the same cases on the cpu backend
 * against the same references, so the check's host side is tested where
 * no GPU is.
 */
#ifndef KS_BENCH_GPU_CASES_H
#define KS_BENCH_GPU_CASES_H

#include <stdint.h>

#include "../../specialize/specialize.h"

static const struct {
	const char *kernel, *variant;   /* variant NULL: the library's */
	int64_t dims[KS_MAX_DIMS];
	unsigned consts;
} gpu_cases[] = {
	{ "rmsnorm", NULL, { 3, 4096 }, 3 },
	{ "rmsnorm", "general", { 3, 4096 }, 3 },
	{ "rmsnorm", NULL, { 5, 4100 }, 0 },
	{ "add_rmsnorm", NULL, { 3, 4096 }, 3 },
	{ "add_rmsnorm", NULL, { 5, 100 }, 0 },
	{ "softmax", NULL, { 4, 2048 }, 3 },
	{ "softmax", NULL, { 3, 8193 }, 0 },
	{ "rope", NULL, { 1, 32, 128, 512 }, 15 },
	{ "rope", NULL, { 7, 8, 128, 512 }, 15 },
	{ "rope", NULL, { 5, 4, 96, 64 }, 0 },
	{ "silu_mul", NULL, { 1, 14336 }, 3 },
	{ "silu_mul", NULL, { 3, 1000 }, 0 },
	{ "attention_decode", NULL, { 2, 32, 8, 128, 300 }, 31 },
	{ "attention_decode", "head_dim", { 2, 32, 8, 128, 300 }, 31 },
	{ "attention_decode", "general", { 2, 32, 8, 128, 300 }, 31 },
	{ "attention_decode", NULL, { 2, 8, 2, 64, 129 }, 0 },
	{ "attention_decode", NULL, { 1, 4, 4, 96, 65 }, 31 },
	{ "embedding", NULL, { 1, 1000, 4096 }, 7 },
	{ "embedding", NULL, { 5, 300, 1000 }, 0 },
	{ "argmax", NULL, { 1, 32000 }, 3 },
	{ "argmax", NULL, { 3, 1001 }, 0 },
	{ "kv_append_rope", NULL, { 2, 1, 8, 128, 300, 512 }, 63 },
	{ "kv_append_rope", NULL, { 2, 3, 4, 96, 65, 64 }, 0 },
	/* B, T, Hq, Hkv, D, S, Sc: a verify step of 4, a prefill of 70 */
	{ "attention_prefill", NULL, { 2, 4, 32, 8, 128, 300, 320 }, 127 },
	{ "attention_prefill", "general", { 2, 4, 32, 8, 128, 300, 320 }, 127 },
	{ "attention_prefill", NULL, { 1, 70, 8, 2, 64, 130, 130 }, 0 },
	/* B, T, Hq, Hkv, D, BS, MB, NB: paged decode, a paged prefill */
	{ "attention_paged", NULL, { 2, 1, 32, 8, 128, 16, 20, 45 }, 255 },
	{ "attention_paged", NULL, { 2, 5, 8, 8, 64, 16, 9, 20 }, 0 },
	/* M, N, K: partial panels, a K tail, all dynamic; then constant,
	 * more than one group of 4 x panels */
	{ "gemm_packed", NULL, { 13, 37, 100 }, 0 },
	{ "gemm_packed", NULL, { 72, 256, 1000 }, 7 },
	{ "gemm_pack_x", NULL, { 13, 100 }, 0 },
	{ "gemm_pack_w", NULL, { 37, 4100 }, 3 },
};

#endif
