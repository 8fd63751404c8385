/*
 * examples/llama's model: its config, its weights (f32 values and the
 * engine's buffers), shared by llama.c (the engine, the float64
 * reference) and model_gguf.c (the model as a GGUF file).
 */
#ifndef KS_EXAMPLES_LLAMA_MODEL_H
#define KS_EXAMPLES_LLAMA_MODEL_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
	const char *name;
	int hidden, layers, hq, hkv, hd, ffn, vocab, max_seq;
	int prompt, steps;      /* defaults of --prompt, --steps */
} config_t;

/* A weight: its values as f32 (bf16-rounded in bf16 mode: what the
 * reference reads), the engine's buffer of it in the weights' dtype. */
typedef struct buf {
	void *host;             /* cpu: the data */
	cl_mem mem;             /* opencl */
	unsigned long long dptr; /* cuda: a CUdeviceptr */
	size_t bytes;
	const char *dtype;
	int owned;              /* 1: malloc'd; 2: mapped (big_alloc) */
} buf_t;

typedef struct {
	float *f;
	int64_t n;
	buf_t b;
	/* quantized: the format, its bytes, rows of k weights */
	const char *fmt;
	void *q;
	size_t qbytes;
	int64_t k;
} tensor_t;

typedef struct {
	tensor_t attn_norm, wq, wk, wv, wo, ffn_norm, wgu, wd;
	/* the gemm weights in gemm_packed's panels (packed prefill) */
	buf_t pq, pk, pv, po, pgu, pd;
} layer_t;

typedef struct {
	config_t c;
	int bf16;
	const char *wq;         /* --wdtype's block format, or NULL */
	tensor_t embed, final_norm, wout;
	layer_t *layer;
	float *cs;              /* rope table, max_seq x hd: cos | sin */
	uint64_t rng;           /* xorshift64* state while the weights fill */
} model_t;

/* llama.c: print "llama: " and the message to stderr and exit 1; calloc
 * that dies when out of memory. */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2),
    noreturn));
void *xcalloc(size_t n, size_t size);

/* llama.c: the block format of a weight with rows of K under --wdtype
 * WQ: WQ, but q8_0 for q4_k when K is not a multiple of 256 (llama.cpp's
 * fallback). */
const char *model_fmt_for(const char *wq, int64_t k);

/* llama.c: M's rope table for its config (theta 10000, half-split
 * pairs, f32). */
void model_rope_table(model_t *m);

/* model_gguf.c: M as a GGUF file at PATH (llama's tensor names and keys,
 * each weight in its stored format), and M read from one, checked
 * against config C: the weights' format is the file's (f32, bf16, or a
 * block format with q4_k's q8_0 fallback, as --wdtype would make them).
 * Both die with the reason on any failure. */
void model_save_gguf(const model_t *m, const char *path);
void model_load_gguf(model_t *m, const config_t *c, const char *path);

#endif
