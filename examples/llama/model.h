/*
 * examples/llama's model: its config, its weights (f32 values and the
 * engine's buffers), shared by llama.c (the engine), model.c (the seeded
 * weights), reference.c (the float64 reference) and model_gguf.c (the
 * model as a GGUF file).
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
	float rms_eps;          /* every norm's epsilon */
	double rope_theta;      /* the rope's base */
} config_t;

/* A weight: its values as f32 (rounded to bf16 or f16 in those modes: what the
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
	const char *half;       /* "bf16" or "f16": 16-bit weights, else NULL */
	const char *wq;         /* --wdtype's block format, or NULL */
	tensor_t embed, final_norm, wout;
	layer_t *layer;
	float *cs;              /* rope table, max_seq x hd: cos | sin */
	uint64_t rng;           /* xorshift64* state while the weights fill */
} model_t;

/* model.c: print "llama: " and the message to stderr and exit 1; calloc
 * that dies when out of memory. */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2),
    noreturn));
void *xcalloc(size_t n, size_t size);

/* model.c: the block format of a weight with rows of K under --wdtype
 * WQ: WQ, but q8_0 for q4_k when K is not a multiple of 256 (llama.cpp's
 * fallback). */
const char *model_fmt_for(const char *wq, int64_t k);

/* model.c: M's rope table for its config (theta 10000, half-split
 * pairs, f32). */
void model_rope_table(model_t *m);

/* model.c: M with config C and seeded weights (SEED): f32, rounded to
 * HALF ("bf16" or "f16"; the gemms' weights, the norms, the embedding),
 * or every 2-D weight quantized to block format WQ (its
 * f32 values their exact decode); its rope table.  model_tensors puts
 * every weight of M into OUT (room for 3 + 8 * layers) and returns the
 * count; model_free frees what M holds. */
void model_init(model_t *m, const config_t *c, const char *half,
    const char *wq, uint64_t seed);
int model_tensors(model_t *m, tensor_t **out);
void model_free(model_t *m);

/* model.c: a 16-bit weight H of dtype HALF ("bf16" or "f16") as f32,
 * exactly, and F rounded to one (to nearest, ties to even). */
float model_half_to_f32(const char *half, uint16_t h);
uint16_t model_f32_to_half(const char *half, float f);

/* model.c: the prompt of N tokens of a vocab of V for SEED: P[0..N). */
void model_prompt(int seed, int n, int vocab, int32_t *p);

/* reference.c: M run by the float64 reference from the prompt of SEED
 * (PROMPT tokens), STEPS greedy steps or the tokens of the dump FOLLOW,
 * the picks printed unless QUIET, the dump written to DUMP if not NULL.
 * Returns 0. */
typedef struct {
	int prompt, steps, seed, quiet;
	const char *follow, *dump;
} ref_opts_t;

int ref_run(const model_t *m, const ref_opts_t *o);

/* reference.c: the dump at PATH of STEPS steps of V logits of ELEM bytes
 * each (4: f32, 8: double) with their tokens TOKS. */
void dump_write(const char *path, int V, int elem, int steps,
    const int32_t *toks, const void *logits);

/* model_gguf.c: M as a GGUF file at PATH (llama's tensor names and keys,
 * each weight in its stored format), and M read from one, checked
 * against config C, or with C NULL of the config the file's keys give
 * (named "file": max_seq the file's context length, at most 2048; the
 * defaults of --prompt and --steps 8 and 16): the weights' format is the
 * file's (f32, bf16, f16, or a block format with q4_k's q8_0 fallback, as
 * --wdtype would make them), and the norm epsilon and rope base the file
 * gives (else 1e-5 and 10000); a tensor the engine does not read is
 * refused by name.  Both die with the reason on any failure. */
void model_save_gguf(const model_t *m, const char *path);
void model_load_gguf(model_t *m, const config_t *c, const char *path);

#endif
