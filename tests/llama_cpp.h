/*
 * llama.cpp's libllama, loaded at run time (dlopen) from the pinned npm
 * package of tests/ggml.h (the same directory as its libggml-base.so),
 * with its CPU backends: the engine the tests of examples/llama's GGUF
 * files and bench/llama run beside kspec.  Nothing of kspec links it.
 *
 * The package ships no header.  Only the functions called are declared
 * here, as llama.h declares them; its parameter structs are passed
 * through as its functions return them, so only their size is assumed
 * (at most 512 bytes), and the only fields written are the context's
 * first four (ks_llama_context), its attention's three where the pinned
 * version's defaults are found at their offsets (ks_llama_context with
 * f32 attention), and the quantizer's file type (int32 at byte 4, after
 * int32 nthread).
 */
#ifndef KS_TESTS_LLAMA_CPP_H
#define KS_TESTS_LLAMA_CPP_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ggml.h"

typedef struct {
	_Alignas(8) char b[512];
} ks_llparams_t;

typedef struct {                        /* llama.h's llama_batch */
	int32_t n_tokens;
	int32_t *token;
	float *embd;
	int32_t *pos;
	int32_t *n_seq_id;
	int32_t **seq_id;
	int8_t *logits;
} ks_llbatch_t;

typedef struct {
	void (*init)(void), (*fini)(void);
	ks_llparams_t (*defaults)(void);
	void *(*load)(const char *, ks_llparams_t);
	void (*mfree)(void *);
	int32_t (*n_embd)(const void *), (*n_layer)(const void *);
	int32_t (*n_head)(const void *), (*n_tokens)(const void *);
	const void *(*vocab)(const void *);
	ks_llparams_t (*qdefaults)(void);
	uint32_t (*quantize)(const char *, const char *,
	    const ks_llparams_t *);
	ks_llparams_t (*cdefaults)(void);
	void *(*new_ctx)(void *, ks_llparams_t);
	void (*free_ctx)(void *);
	float *(*logits)(void *, int32_t);
	void (*set_threads)(void *, int32_t, int32_t);
	int32_t (*n_threads)(void *), (*n_threads_batch)(void *);
	uint32_t (*n_ctx)(const void *), (*n_batch)(const void *);
	ks_llbatch_t (*batch_one)(int32_t *, int32_t);
	int32_t (*decode)(void *, ks_llbatch_t);
} ks_llama_t;

/* The CPU backend library ggml chose for this machine, from its log
 * ("" until a backend is loaded); every other log line is dropped. */
static char ks_llama_cpu_backend[512];

static void ks_llama_log(int level, const char *text, void *user)
{
	const char *p = strstr(text, "loaded CPU backend from ");

	(void)level;
	(void)user;
	if (p) {
		snprintf(ks_llama_cpu_backend, sizeof ks_llama_cpu_backend,
		    "%s", p + strlen("loaded CPU backend from "));
		ks_llama_cpu_backend[strcspn(ks_llama_cpu_backend, "\n")] = 0;
	}
}

/*
 * Loads libllama and its CPU backends and initializes it.  0; 1 when the
 * package is not installed; -1 when it is there but does not load or
 * lacks a function.  The reason is in ERR either way.
 */
static inline int ks_llama_open(ks_llama_t *L, char *err, size_t errlen)
{
	static const struct {
		const char *name;
		size_t off;
	} fns[] = {
#define F(field, sym) { sym, offsetof(ks_llama_t, field) }
		F(init, "llama_backend_init"), F(fini, "llama_backend_free"),
		F(defaults, "llama_model_default_params"),
		F(load, "llama_model_load_from_file"),
		F(mfree, "llama_model_free"),
		F(n_embd, "llama_model_n_embd"),
		F(n_layer, "llama_model_n_layer"),
		F(n_head, "llama_model_n_head"),
		F(vocab, "llama_model_get_vocab"),
		F(n_tokens, "llama_vocab_n_tokens"),
		F(qdefaults, "llama_model_quantize_default_params"),
		F(quantize, "llama_model_quantize"),
		F(cdefaults, "llama_context_default_params"),
		F(new_ctx, "llama_init_from_model"),
		F(free_ctx, "llama_free"),
		F(logits, "llama_get_logits_ith"),
		F(set_threads, "llama_set_n_threads"),
		F(n_threads, "llama_n_threads"),
		F(n_threads_batch, "llama_n_threads_batch"),
		F(n_ctx, "llama_n_ctx"), F(n_batch, "llama_n_batch"),
		F(batch_one, "llama_batch_get_one"),
		F(decode, "llama_decode"),
#undef F
	};
	char dir[1024], lib[1200], ggml[1200];
	void (*load_all)(const char *);
	void (*log_set)(void (*)(int, const char *, void *), void *);
	void *gl, *ll;
	size_t i;

	memset(L, 0, sizeof *L);
	snprintf(dir, sizeof dir, "%s", ks_ggml_path());
	*strrchr(dir, '/') = '\0';
	snprintf(lib, sizeof lib, "%s/libllama.v0.5.0.so", dir);
	snprintf(ggml, sizeof ggml, "%s/libggml.v0.5.0.so", dir);
	if (access(lib, F_OK) != 0) {
		snprintf(err, errlen, "llama.cpp is not installed (%s "
		    "missing): deploy/deps.sh --bench installs %s %s", lib,
		    KS_GGML_PACKAGE, KS_GGML_PACKAGE_VERSION);
		return 1;
	}
	gl = dlopen(ggml, RTLD_NOW | RTLD_GLOBAL);
	ll = gl ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
	if (ll == NULL) {
		snprintf(err, errlen, "%s", dlerror());
		return -1;
	}
	*(void **)&load_all = dlsym(gl, "ggml_backend_load_all_from_path");
	*(void **)&log_set = dlsym(ll, "llama_log_set");
	for (i = 0; i < sizeof fns / sizeof fns[0]; i++)
		if ((*(void **)((char *)L + fns[i].off) = dlsym(ll,
		    fns[i].name)) == NULL) {
			snprintf(err, errlen, "%s lacks %s", lib, fns[i].name);
			return -1;
		}
	if (!load_all || !log_set) {
		snprintf(err, errlen, "no ggml_backend_load_all_from_path "
		    "or llama_log_set in %s", dir);
		return -1;
	}
	log_set(ks_llama_log, NULL);
	load_all(dir);
	L->init();
	return 0;
}

/*
 * The pinned version's llama_context_params where its attention's dtype
 * is set: flash_attn_type at byte 52 (an enum, -1 auto, 0 off), type_k
 * and type_v at 104 and 108 (ggml types, 1 F16, 0 F32), after
 * defrag_thold (float, 84) and the eval callback and its data (two
 * pointers, 88 and 96).  ks_llama_f32_attention writes them only where
 * the defaults hold what that version's hold there.
 */
enum { KS_LL_FLASH_ATTN = 52, KS_LL_DEFRAG = 84, KS_LL_CB_EVAL = 88,
    KS_LL_TYPE_K = 104, KS_LL_TYPE_V = 108 };

/*
 * Sets C (the context defaults) to compute attention in f32, as
 * examples/llama does: the KV cache in f32 and flash attention off (with
 * it on, an f32 cache gave the f16 cache's logits, bit for bit, in
 * tests/test_llama.c's small model).  0; -1 when C is not the pinned
 * version's defaults there.
 */
static inline int ks_llama_f32_attention(ks_llparams_t *c)
{
	static const unsigned char nul[16];
	const int32_t f32 = 0, off = 0;
	int32_t fa, tk, tv;
	float defrag;

	memcpy(&fa, c->b + KS_LL_FLASH_ATTN, 4);
	memcpy(&defrag, c->b + KS_LL_DEFRAG, 4);
	memcpy(&tk, c->b + KS_LL_TYPE_K, 4);
	memcpy(&tv, c->b + KS_LL_TYPE_V, 4);
	if (fa != -1 || defrag != -1.0f || tk != 1 || tv != 1 ||
	    memcmp(c->b + KS_LL_CB_EVAL, nul, sizeof nul) != 0)
		return -1;
	memcpy(c->b + KS_LL_FLASH_ATTN, &off, 4);
	memcpy(c->b + KS_LL_TYPE_K, &f32, 4);
	memcpy(c->b + KS_LL_TYPE_V, &f32, 4);
	return 0;
}

/*
 * A context on MODEL for N_CTX positions, batches of up to N_BATCH tokens
 * (one micro-batch) and THREADS threads for decode and prefill, llama.h's
 * defaults otherwise (its KV cache in f16, flash attention chosen by
 * llama.cpp), or with F32_ATTENTION its attention in f32
 * (ks_llama_f32_attention), or NULL, also when the context does not
 * report what was asked or the defaults are not the pinned version's.
 * The struct's first four fields are uint32 n_ctx, n_batch, n_ubatch and
 * n_seq_max (the threads are set by llama_set_n_threads and read back).
 */
static inline void *ks_llama_context(const ks_llama_t *L, void *model,
    int n_ctx, int n_batch, int threads, int f32_attention)
{
	uint32_t v[4] = { (uint32_t)n_ctx, (uint32_t)n_batch,
	    (uint32_t)n_batch, 1 };
	ks_llparams_t c = L->cdefaults();
	void *ctx;

	memcpy(c.b, v, sizeof v);
	if (f32_attention && ks_llama_f32_attention(&c) != 0)
		return NULL;
	if ((ctx = L->new_ctx(model, c)) == NULL)
		return NULL;
	L->set_threads(ctx, threads, threads);
	if (L->n_threads(ctx) != threads || L->n_threads_batch(ctx) !=
	    threads || L->n_ctx(ctx) < (uint32_t)n_ctx || L->n_batch(ctx) !=
	    (uint32_t)n_batch) {
		L->free_ctx(ctx);
		return NULL;
	}
	return ctx;
}

#endif
