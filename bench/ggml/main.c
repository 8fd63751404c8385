/*
 * bench/ggml: the decode GEMV of an 8B-class model's FFN projection (gemm,
 * M=1, N=14336, K=4096) with its weights in f32, bf16, q8_0, q4_0 and q4_k,
 * beside llama.cpp's own ggml_mul_mat on the same bytes, on one thread and
 * on two, with two references: a plain read loop over those bytes (the
 * memory's ceiling) and the exact mode's arithmetic written by hand (what
 * exact f32 arithmetic reaches here; "the exact C loop" below).
 *
 * The weights: one random f32 W (uniform in [-1, 1), a fixed generator),
 * rounded to bf16, or quantized by kspec_quantize (whose bytes are
 * llama.cpp's reference quantizer's; checked here against the package's
 * quantize_row_*_ref on every row).  Each format's bytes are in one buffer
 * that every candidate reads: kspec's kernel, ggml's mul_mat (its tensor's
 * data is that buffer, through ggml_backend_cpu_buffer_from_ptr), the
 * exact C loop and the read loop.  x is one f32 vector for all.
 *
 * kspec's kernel is compiled as kspecd serves it (ks_specialize with
 * every dim a constant, the cpu backend, exact mode: gemv_m1) and run on
 * the library's pool (kspec_cpu_launch) with 1 or 2 threads; the exact C
 * loop and the read loop run on the same pool.  For the block formats a
 * second kspec candidate is gemm's fast mode (variant fast: x in q8_0
 * blocks, integer block dot products, docs/kernels.md), whose every call
 * quantizes x with kspec_quantize first, as ggml's mul_mat quantizes x
 * on every call; its y is checked bitwise against ref/ref_fast.h and
 * compared with ggml's, which quantizes x the same way for q8_0 and q4_0
 * (q8_K blocks of 256 for q4_k).  ggml's is a graph of one
 * ggml_mul_mat on the package's CPU backend that ggml's own loader would
 * pick (the highest ggml_backend_score of the libggml-cpu-*.so beside
 * libggml-base.so; env KSPEC_GGML_CPU names one; env KSPEC_GGML_TARGET
 * names kspec's cpu target instead of auto, and for the fast candidate
 * instead of bench_fast_target's), computed with
 * ggml_graph_compute on a persistent ggml threadpool of 1 or 2 threads,
 * planned once.  The threadpool polls 0: its workers sleep on a condition
 * variable between graphs, as kspec's pool does, so that no spinning
 * worker steals a core from the candidate that runs next (ggml's default,
 * 50, spins for a long while after each graph).  Its weights are in
 * ggml's plain layouts: llama.cpp's model loader may put q4_0, q4_k and
 * q8_0 weights in the CPU backend's AMX or repacked (interleaved) buffer
 * types for other kernels, which this does not measure.
 *
 * Checks, before any timing: kspec's y on 1 and on 2 threads, and the
 * exact C loop's, are bitwise the reference (ref/ref_quant.h's decoder,
 * then ref_gemm's canonical order in f32), and kspec's is not once a byte
 * of W is changed (the check is not blind); ggml's y is compared with it
 * (ggml rounds x to bf16 for bf16 weights and quantizes it to 8 bits a
 * value for the block formats, so a difference is expected), and both
 * with the float64 sum over the same decoded weights.
 *
 * Timing: per format, every candidate on 1 and on 2 threads runs twice as
 * a warm-up, then ROUNDS rounds in which each runs for about TRIAL_NS
 * (calls repeated), in an order rotated each round.  Figures: GB/s of
 * weight bytes (x and y add 73 KB to 33-235 MB), median (min..max) over
 * the rounds; ratios to the read loop and to ggml, the median (min..max)
 * of the rounds' ratios.  On one thread every candidate runs on the
 * calling thread, so the figures are also given over that thread's CPU
 * time, which time lost to other processes on a shared machine does not
 * inflate (what they share, caches and memory, still counts).
 *
 * Usage: ggml [--check] [FORMAT...]: only those formats (default all);
 * --check: the checks without the timing.  ggml --asm FORMAT prints the
 * assembly of kspec's kernel, --asm-fast FORMAT of its fast mode's.
 * Without the package it measures kspec and the references alone and
 * says so.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/kspec.h"
#include "../../jit/jit.h"
#include "../../ref/ref_fast.h"
#include "../../tests/ggml.h"
#include "../bench.h"

#define ROUNDS 15
#define TRIAL_NS 25000000.0

enum { M = 1, N = 14336, K = 4096, NTHR = 2 };

static volatile uint64_t sink;
static int check_only;          /* --check: the outputs, no timing */

/* ---- the formats ---- */

/* ggml's type numbers (ggml.h, enum ggml_type): checked at load against
 * the package's ggml_type_name, block and type sizes. */
enum {
	GG_TYPE_F32 = 0, GG_TYPE_Q4_0 = 2, GG_TYPE_Q8_0 = 8, GG_TYPE_Q4_K = 12,
	GG_TYPE_BF16 = 30
};

typedef struct {
	const char *name;       /* kspec's wdtype */
	ks_dtype_t wdtype;
	int ggml_type;
	const char *ggml_name;  /* ggml_type_name */
	int block, block_bytes;
	int ref;                /* ref_quant.h's format (blocks only) */
	int gq;                 /* tests/ggml.h's format (blocks only) */
	/* A byte of row 0 and a mask that changes w[0] when xored into it
	 * (an f32's or bf16's sign, a block's first codes): the planted
	 * defect that the bitwise check must catch. */
	int plant_byte, plant_mask;
} format_t;

static const format_t formats[] = {
	{ .name = "f32", .wdtype = KS_DTYPE_F32, .ggml_type = GG_TYPE_F32,
	    .ggml_name = "f32", .block = 1, .block_bytes = 4, .ref = -1,
	    .gq = -1, .plant_byte = 3, .plant_mask = 0x80 },
	{ .name = "bf16", .wdtype = KS_DTYPE_BF16, .ggml_type = GG_TYPE_BF16,
	    .ggml_name = "bf16", .block = 1, .block_bytes = 2, .ref = -1,
	    .gq = -1, .plant_byte = 1, .plant_mask = 0x80 },
	{ .name = "q8_0", .wdtype = KS_DTYPE_Q8_0, .ggml_type = GG_TYPE_Q8_0,
	    .ggml_name = "q8_0", .block = 32, .block_bytes = 34,
	    .ref = REF_Q8_0, .gq = KS_GGML_Q8_0, .plant_byte = 2,
	    .plant_mask = 0x40 },
	{ .name = "q4_0", .wdtype = KS_DTYPE_Q4_0, .ggml_type = GG_TYPE_Q4_0,
	    .ggml_name = "q4_0", .block = 32, .block_bytes = 18,
	    .ref = REF_Q4_0, .gq = KS_GGML_Q4_0, .plant_byte = 2,
	    .plant_mask = 0x11 },
	{ .name = "q4_k", .wdtype = KS_DTYPE_Q4_K, .ggml_type = GG_TYPE_Q4_K,
	    .ggml_name = "q4_K", .block = 256, .block_bytes = 144,
	    .ref = REF_Q4_K, .gq = KS_GGML_Q4_K, .plant_byte = 16,
	    .plant_mask = 0x11 },
};
enum { NFORMATS = sizeof formats / sizeof formats[0] };

static size_t weight_bytes(const format_t *f)
{
	return (size_t)N * (size_t)(K / f->block) * (size_t)f->block_bytes;
}

/* ---- llama.cpp's ggml, declared as far as this file calls it ---- */

/*
 * The package ships no header: these are the declarations of ggml.h,
 * ggml-backend.h and ggml-cpu.h for the functions below, with the
 * structs this file passes by value or fills.  Pointers to ggml's own
 * structs stay opaque.
 */
struct ggml_context;
struct ggml_tensor;
struct ggml_cgraph;
struct ggml_backend_buffer;
struct ggml_threadpool;

struct gg_init_params {
	size_t mem_size;
	void *mem_buffer;
	bool no_alloc;
};

enum { GG_MAX_N_THREADS = 512 };

struct gg_threadpool_params {
	bool cpumask[GG_MAX_N_THREADS];
	int n_threads;
	int prio;
	uint32_t poll;
	bool strict_cpu;
	bool paused;
};

/*
 * ggml_cplan.  ggml_graph_plan returns it by value (through a pointer the
 * caller passes, as every struct this size), and this file touches only
 * work_size and work_data, whose places have not changed across ggml's
 * versions; the tail leaves room for fields a version adds at the end
 * (use_ref, in this one).
 */
struct gg_cplan {
	size_t work_size;
	uint8_t *work_data;
	int n_threads;
	struct ggml_threadpool *threadpool;
	void *abort_callback;
	void *abort_callback_data;
	unsigned char tail[64];
};

typedef struct {
	void *cpu;                      /* the CPU backend's handle */
	char cpu_path[PATH_MAX];
	/* libggml-base.so */
	struct ggml_context *(*init)(struct gg_init_params);
	void (*free)(struct ggml_context *);
	size_t (*tensor_overhead)(void);
	size_t (*graph_overhead)(void);
	struct ggml_tensor *(*new_tensor_2d)(struct ggml_context *, int,
	    int64_t, int64_t);
	struct ggml_tensor *(*mul_mat)(struct ggml_context *,
	    struct ggml_tensor *, struct ggml_tensor *);
	struct ggml_cgraph *(*new_graph)(struct ggml_context *);
	void (*build_forward_expand)(struct ggml_cgraph *,
	    struct ggml_tensor *);
	void *(*get_data)(const struct ggml_tensor *);
	struct ggml_backend_buffer *(*buffer_from_ptr)(void *, size_t);
	int (*tensor_alloc)(struct ggml_backend_buffer *, struct ggml_tensor *,
	    void *);
	void (*buffer_free)(struct ggml_backend_buffer *);
	const char *(*type_name)(int);
	size_t (*type_size)(int);
	int64_t (*blck_size)(int);
	void (*threadpool_params_init)(struct gg_threadpool_params *, int);
	/* the CPU backend */
	void (*cpu_init)(void);
	struct ggml_threadpool *(*threadpool_new)(
	    struct gg_threadpool_params *);
	void (*threadpool_free)(struct ggml_threadpool *);
	struct gg_cplan (*graph_plan)(const struct ggml_cgraph *, int,
	    struct ggml_threadpool *);
	int (*graph_compute)(struct ggml_cgraph *, struct gg_cplan *);
} gg_t;

/* Where each function comes from: an offsetof table. */
static const struct {
	const char *name;
	size_t off;
	int cpu;                        /* from the CPU backend */
} gg_syms[] = {
#define S(f, n) { n, offsetof(gg_t, f), 0 }
#define C(f, n) { n, offsetof(gg_t, f), 1 }
	S(init, "ggml_init"), S(free, "ggml_free"),
	S(tensor_overhead, "ggml_tensor_overhead"),
	S(graph_overhead, "ggml_graph_overhead"),
	S(new_tensor_2d, "ggml_new_tensor_2d"), S(mul_mat, "ggml_mul_mat"),
	S(new_graph, "ggml_new_graph"),
	S(build_forward_expand, "ggml_build_forward_expand"),
	S(get_data, "ggml_get_data"),
	S(buffer_from_ptr, "ggml_backend_cpu_buffer_from_ptr"),
	S(tensor_alloc, "ggml_backend_tensor_alloc"),
	S(buffer_free, "ggml_backend_buffer_free"),
	S(type_name, "ggml_type_name"), S(type_size, "ggml_type_size"),
	S(blck_size, "ggml_blck_size"),
	S(threadpool_params_init, "ggml_threadpool_params_init"),
	C(cpu_init, "ggml_cpu_init"), C(threadpool_new, "ggml_threadpool_new"),
	C(threadpool_free, "ggml_threadpool_free"),
	C(graph_plan, "ggml_graph_plan"),
	C(graph_compute, "ggml_graph_compute"),
#undef S
#undef C
};

/*
 * The CPU backend ggml's own loader would choose: of the libggml-cpu-*.so
 * in DIR, the one whose ggml_backend_score is highest (0: this CPU lacks
 * what it was built for).  Env KSPEC_GGML_CPU names one instead.  0, or
 * -1 with the reason in ERR.
 */
static int gg_pick_cpu(gg_t *g, const char *dir, char *err, size_t errlen)
{
	const char *env = getenv("KSPEC_GGML_CPU");
	DIR *d;
	struct dirent *e;
	int best = 0;

	if (env && *env) {
		g->cpu = dlopen(env, RTLD_NOW | RTLD_LOCAL);
		snprintf(g->cpu_path, sizeof g->cpu_path, "%s", env);
		if (!g->cpu)
			snprintf(err, errlen, "cannot load %.400s: %s", env,
			    dlerror());
		return g->cpu ? 0 : -1;
	}
	if (!(d = opendir(dir))) {
		snprintf(err, errlen, "cannot list %.400s", dir);
		return -1;
	}
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		char path[PATH_MAX];
		int (*score)(void);
		void *h;
		int s;

		if (strncmp(e->d_name, "libggml-cpu-", 12) || n < 4 ||
		    strcmp(e->d_name + n - 3, ".so"))
			continue;
		if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >=
		    (int)sizeof path || !(h = dlopen(path, RTLD_NOW |
		    RTLD_LOCAL)))
			continue;
		*(void **)&score = dlsym(h, "ggml_backend_score");
		s = score ? score() : 0;
		if (s > best) {
			if (g->cpu)
				dlclose(g->cpu);
			g->cpu = h;
			best = s;
			snprintf(g->cpu_path, sizeof g->cpu_path, "%s", path);
		} else {
			dlclose(h);
		}
	}
	closedir(d);
	if (!g->cpu)
		snprintf(err, errlen, "no libggml-cpu-*.so in %.400s suits "
		    "this CPU", dir);
	return g->cpu ? 0 : -1;
}

/* Loads the CPU backend beside BASE's library and every function of
 * gg_syms, and checks the type numbers above against the library. */
static int gg_open(gg_t *g, const ks_ggml_t *base, char *err, size_t errlen)
{
	char dir[PATH_MAX], *slash;
	size_t i;

	memset(g, 0, sizeof *g);
	snprintf(dir, sizeof dir, "%s", base->path);
	slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	else
		snprintf(dir, sizeof dir, ".");
	if (gg_pick_cpu(g, dir, err, errlen))
		return -1;
	for (i = 0; i < sizeof gg_syms / sizeof gg_syms[0]; i++) {
		void *f = dlsym(gg_syms[i].cpu ? g->cpu : base->handle,
		    gg_syms[i].name);

		if (!f) {
			snprintf(err, errlen, "%.400s lacks %s",
			    gg_syms[i].cpu ? g->cpu_path : base->path,
			    gg_syms[i].name);
			return -1;
		}
		memcpy((char *)g + gg_syms[i].off, &f, sizeof f);
	}
	for (i = 0; i < NFORMATS; i++) {
		const format_t *f = &formats[i];

		if (strcmp(g->type_name(f->ggml_type), f->ggml_name) ||
		    g->blck_size(f->ggml_type) != f->block ||
		    g->type_size(f->ggml_type) != (size_t)f->block_bytes) {
			snprintf(err, errlen, "ggml's type %d is not %s here",
			    f->ggml_type, f->ggml_name);
			return -1;
		}
	}
	g->cpu_init();
	return 0;
}

/* One mul_mat: y (N) = W (N x K, of the format) times x (K), the tensors'
 * data the caller's buffers. */
typedef struct {
	struct ggml_context *ctx;
	struct ggml_cgraph *graph;
	struct ggml_backend_buffer *buf[3];
	struct gg_cplan plan[NTHR + 1];   /* by thread count */
} gg_mm_t;

static int gg_mm_open(gg_t *g, gg_mm_t *mm, const format_t *f, void *w,
    float *x, float *y, struct ggml_threadpool *const *pools, char *err,
    size_t errlen)
{
	struct gg_init_params ip = { 0, NULL, true };
	struct ggml_tensor *t[3];
	void *data[3] = { w, x, y };
	size_t len[3] = { weight_bytes(f), (size_t)K * 4, (size_t)N * 4 };
	int i;

	memset(mm, 0, sizeof *mm);
	ip.mem_size = 4 * g->tensor_overhead() + g->graph_overhead();
	if (!(mm->ctx = g->init(ip))) {
		snprintf(err, errlen, "ggml_init failed");
		return -1;
	}
	t[0] = g->new_tensor_2d(mm->ctx, f->ggml_type, K, N);
	t[1] = g->new_tensor_2d(mm->ctx, GG_TYPE_F32, K, M);
	t[2] = g->mul_mat(mm->ctx, t[0], t[1]);
	mm->graph = g->new_graph(mm->ctx);
	g->build_forward_expand(mm->graph, t[2]);
	for (i = 0; i < 3; i++) {
		mm->buf[i] = g->buffer_from_ptr(data[i], len[i]);
		if (mm->buf[i])
			g->tensor_alloc(mm->buf[i], t[i], data[i]);
		if (!mm->buf[i] || g->get_data(t[i]) != data[i]) {
			snprintf(err, errlen, "ggml: tensor %d not bound to "
			    "its buffer", i);
			return -1;
		}
	}
	for (i = 1; i <= NTHR; i++) {
		mm->plan[i] = g->graph_plan(mm->graph, i, pools[i]);
		if (mm->plan[i].work_size &&
		    !(mm->plan[i].work_data = malloc(mm->plan[i].work_size))) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
	}
	return 0;
}

static void gg_mm_close(gg_t *g, gg_mm_t *mm)
{
	int i;

	for (i = 1; i <= NTHR; i++)
		free(mm->plan[i].work_data);
	for (i = 0; i < 3; i++)
		if (mm->buf[i])
			g->buffer_free(mm->buf[i]);
	if (mm->ctx)
		g->free(mm->ctx);
}

/* ---- kspec's kernel ---- */

typedef struct {
	ks_ir_kernel_t *k;
	ks_jit_cpu_lib_t *lib;
	ks_jit_cpu_entry_t fn;
	void *ptrs[3];
	void *params[3];
	uint64_t groups;
	char target[KS_MAX_NAME];
} prog_t;

/* Builds gemm for format F at M x N x K in MODE, every dim constant, as
 * kspecd serves it; its buffers are x (in mode fast x's q8_0 bytes), W,
 * y.  Exits on failure. */
static void prog_open(prog_t *p, const format_t *f, ks_mode_t mode, void *x,
    void *w, float *y)
{
	ks_dim_t dims[3] = { { "M", 1, M }, { "N", 1, N }, { "K", 1, K } };
	ks_spec_t spec;
	ks_jit_artifact_t a;
	char err[4096];
	int64_t i64[8] = { 0 }, groups;
	int i, np = 0;

	memset(p, 0, sizeof *p);
	if (ks_kernel_validate_mixed(&ks_kernel_gemm, KS_DTYPE_F32, f->wdtype,
	    mode, dims, 3, &spec, err, sizeof err) != KS_OK ||
	    ks_specialize_variant(&spec, NULL, &p->k, err, sizeof err) !=
	    KS_OK || ks_backend_cpu.resolve_target(getenv("KSPEC_GGML_TARGET") ?
	    getenv("KSPEC_GGML_TARGET") : mode == KS_MODE_FAST ?
	    bench_fast_target() : "auto", p->target,
	    sizeof p->target, err, sizeof err) != KS_OK ||
	    ks_backend_cpu.compile(p->k, p->target, "so", &a, err,
	    sizeof err) != KS_OK || ks_jit_cpu_load(a.bytes, a.len,
	    p->k->entry, &p->lib, &p->fn, err, sizeof err) != KS_OK) {
		fprintf(stderr, "ggml: gemm %s: %s\n", f->name, err);
		exit(1);
	}
	ks_jit_artifact_close(&a);
	for (i = 0; i < p->k->nparams; i++) {
		const ks_ir_param_t *pa = &p->k->params[i];

		if (pa->kind != KS_PARAM_BUFFER) {
			if (pa->bound)
				continue;
			fprintf(stderr, "ggml: gemm: dim %s not bound\n",
			    pa->name);
			exit(1);
		}
		if (np == 3) {
			fprintf(stderr, "ggml: gemm: more than 3 buffers\n");
			exit(1);
		}
		p->ptrs[np] = strcmp(pa->name, "x") == 0 ? (void *)x :
		    strcmp(pa->name, "W") == 0 ? w : (void *)y;
		p->params[np] = &p->ptrs[np];
		np++;
	}
	if (ks_ir_eval_launch(p->k, p->k->grid, i64, &groups) != KS_OK) {
		fprintf(stderr, "ggml: gemm: grid not evaluable\n");
		exit(1);
	}
	p->groups = (uint64_t)groups;
}

static void prog_close(prog_t *p)
{
	ks_jit_cpu_unload(p->lib);
	ks_ir_free(p->k);
}

/* ---- the exact arithmetic written by hand ---- */

/*
 * A ceiling for the exact mode: the same arithmetic as kspec's kernel
 * (each weight decoded exactly to its documented f32 value, then gemm's
 * canonical order: lane l of 32 accumulates the k with k % 32 == l by
 * fma from 0, the lanes summed in the tree 16, 8, 4, 2, 1) written with
 * AVX-512 intrinsics: a row's 32 lanes in two 16-lane registers, 8 rows
 * of W per work-group as gemv_m1, scales converted with F16C, q4_k's
 * scales decoded once per super-block, and q4_0's and q4_k's weights
 * taken from the 16 values of their block (sub-block) by a permute on
 * their codes.  Its y is checked bitwise against the reference before it
 * is timed.  It shows what exact f32 arithmetic reaches on this machine
 * (a lower bound of its ceiling); it is not a kspec kernel.  Without
 * AVX-512 (the benchmarks are built with -march=native) it is left
 * out.
 */
#if defined(__AVX512F__) && defined(__F16C__)
#include <immintrin.h>

#define HAVE_PROBE 1

enum { PROBE_ROWS = 8 };

typedef struct {
	const float *x;
	const uint8_t *w;
	float *y;
} probe_args_t;

/* q4_k's scales of a row's current super-block: w = fma(a[c], q, -b[c])
 * for sub-block c. */
typedef struct {
	float a[8], b[8];
} probe_scales_t;

static float probe_f16(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, 2);
	return _cvtsh_ss(h);
}

/* 16 bytes as 16 lanes. */
static __m512i probe_u8(const uint8_t *p)
{
	return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

/* Lanes 0..15 in A, 16..31 in B: the canonical tree. */
static float probe_reduce(__m512 a, __m512 b)
{
	__m512 s16 = _mm512_add_ps(a, b);
	__m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(s16),
	    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s16),
	    1)));
	__m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8),
	    _mm256_extractf128_ps(s8, 1));
	__m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));

	return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/* q4_k: the a and b of the 8 sub-blocks of the super-block at S;
 * docs/kernels.md allows one fma for (d * sc) * q - dmin * m, whose
 * products are exact. */
static void probe_q4k_scales(const uint8_t *blk, probe_scales_t *row)
{
	const uint8_t *s = blk + 4;
	float d = probe_f16(blk), dmin = probe_f16(blk + 2);
	int c;

	for (c = 0; c < 8; c++) {
		int sc = c < 4 ? s[c] & 63 : (s[c + 4] & 15) |
		    (s[c - 4] >> 6) << 4;
		int m = c < 4 ? s[c + 4] & 63 : (s[c + 4] >> 4) |
		    (s[c] >> 6) << 4;

		row->a[c] = d * (float)sc;
		row->b[c] = dmin * (float)m;
	}
}

/* Weights K..K+31 of the row at W in format FMT (formats[]' index):
 * lanes 0..15 into W0, 16..31 into W1. */
static inline __attribute__((always_inline)) void probe_decode(int fmt,
    const uint8_t *w, int k, const probe_scales_t *row, __m512 *w0,
    __m512 *w1)
{
	const __m512i m8 = _mm512_set1_epi32(-8), codes = _mm512_set_epi32(15,
	    14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
	const uint8_t *b;
	__m512i q;
	__m512 d, a, m;

	switch (fmt) {
	case 0:         /* f32 */
		*w0 = _mm512_loadu_ps((const float *)w + k);
		*w1 = _mm512_loadu_ps((const float *)w + k + 16);
		return;
	case 1:         /* bf16: the 16 bits become the top half */
		b = w + (size_t)k * 2;
		*w0 = _mm512_castsi512_ps(_mm512_slli_epi32(
		    _mm512_cvtepu16_epi32(_mm256_loadu_si256(
		    (const __m256i *)b)), 16));
		*w1 = _mm512_castsi512_ps(_mm512_slli_epi32(
		    _mm512_cvtepu16_epi32(_mm256_loadu_si256(
		    (const __m256i *)(b + 32))), 16));
		return;
	case 2:         /* q8_0: f32(q) * d, exact */
		b = w + (size_t)k / 32 * 34;
		d = _mm512_set1_ps(probe_f16(b));
		*w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
		    _mm_loadu_si128((const __m128i *)(b + 2)))), d);
		*w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
		    _mm_loadu_si128((const __m128i *)(b + 18)))), d);
		return;
	case 3:         /* q4_0: the 16 values f32(c - 8) * d (exact), each
			 * weight the one of its code; low nibbles first (the
			 * permute reads an index's low 4 bits) */
		b = w + (size_t)k / 32 * 18;
		d = _mm512_set1_ps(probe_f16(b));
		q = probe_u8(b + 2);
		d = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(codes,
		    m8)), d);
		*w0 = _mm512_permutexvar_ps(q, d);
		*w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), d);
		return;
	default:        /* q4_k: sub-block c's 16 values, as q4_0; the low
			 * nibbles if c is even */
		b = w + (size_t)k / 256 * 144 + 16 + 32 * (k % 256 / 64);
		a = _mm512_set1_ps(row->a[k % 256 / 32]);
		m = _mm512_set1_ps(row->b[k % 256 / 32]);
		d = _mm512_fmsub_ps(a, _mm512_cvtepi32_ps(codes), m);
		if (k % 64 == 0) {
			*w0 = _mm512_permutexvar_ps(probe_u8(b), d);
			*w1 = _mm512_permutexvar_ps(probe_u8(b + 16), d);
		} else {
			*w0 = _mm512_permutexvar_ps(_mm512_srli_epi32(
			    probe_u8(b), 4), d);
			*w1 = _mm512_permutexvar_ps(_mm512_srli_epi32(
			    probe_u8(b + 16), 4), d);
		}
		return;
	}
}

/* Work-groups [GB, GE) of PROBE_ROWS rows each, in format FMT.  The
 * rows' loop is unrolled so that the accumulators stay in registers. */
static inline __attribute__((always_inline)) void probe_groups(int fmt,
    void **params, uint64_t gb, uint64_t ge)
{
	const probe_args_t *p = params[0];
	const format_t *f = &formats[fmt];
	const size_t rb = (size_t)(K / f->block) * (size_t)f->block_bytes;
	probe_scales_t sc[PROBE_ROWS];
	uint64_t g;
	int r, k;

	for (g = gb; g < ge; g++) {
		const uint8_t *w = p->w + g * PROBE_ROWS * rb;
		__m512 acc[PROBE_ROWS][2];

#pragma GCC unroll 8
		for (r = 0; r < PROBE_ROWS; r++)
			acc[r][0] = acc[r][1] = _mm512_setzero_ps();
		for (k = 0; k < K; k += 32) {
			__m512 xa = _mm512_loadu_ps(p->x + k);
			__m512 xb = _mm512_loadu_ps(p->x + k + 16);

			if (fmt == 4 && k % 256 == 0)
				for (r = 0; r < PROBE_ROWS; r++)
					probe_q4k_scales(w + r * rb +
					    (size_t)k / 256 * 144, &sc[r]);
#pragma GCC unroll 8
			for (r = 0; r < PROBE_ROWS; r++) {
				__m512 w0, w1;

				probe_decode(fmt, w + r * rb, k, &sc[r], &w0,
				    &w1);
				acc[r][0] = _mm512_fmadd_ps(xa, w0, acc[r][0]);
				acc[r][1] = _mm512_fmadd_ps(xb, w1, acc[r][1]);
			}
		}
#pragma GCC unroll 8
		for (r = 0; r < PROBE_ROWS; r++)
			p->y[g * PROBE_ROWS + r] = probe_reduce(acc[r][0],
			    acc[r][1]);
	}
}

static void probe_f32(void **params, uint64_t gb, uint64_t ge)
{
	probe_groups(0, params, gb, ge);
}

static void probe_bf16(void **params, uint64_t gb, uint64_t ge)
{
	probe_groups(1, params, gb, ge);
}

static void probe_q8_0(void **params, uint64_t gb, uint64_t ge)
{
	probe_groups(2, params, gb, ge);
}

static void probe_q4_0(void **params, uint64_t gb, uint64_t ge)
{
	probe_groups(3, params, gb, ge);
}

static void probe_q4_k(void **params, uint64_t gb, uint64_t ge)
{
	probe_groups(4, params, gb, ge);
}

/* In the order of formats[]. */
static const kspec_cpu_entry_t probes[NFORMATS] = {
	probe_f32, probe_bf16, probe_q8_0, probe_q4_0, probe_q4_k
};
#else
#define HAVE_PROBE 0
#endif

/* ---- the read loop, split over the pool ---- */

enum { READ_CHUNKS = 64 };

typedef struct {
	const uint64_t *p;
	size_t words;
	uint64_t sums[READ_CHUNKS * 8];         /* a cache line per chunk */
} reader_t;

/* Chunks [B, E) of READ_CHUNKS equal ones (in whole iterations of
 * read_loop, 16 words; the last to the end). */
static void read_chunks(void **params, uint64_t b, uint64_t e)
{
	reader_t *r = params[0];
	size_t per = r->words / READ_CHUNKS / 16 * 16;
	size_t lo = b * per, hi = e == READ_CHUNKS ? r->words : e * per;

	r->sums[b * 8] = read_loop(r->p + lo, hi - lo);
}

/* ---- measuring ---- */

enum { CAND_KSPEC, CAND_FAST, CAND_GGML, CAND_PROBE, CAND_READ,
	NCAND_KIND };
static const char *const cand_names[NCAND_KIND] = {
	"kspec exact", "kspec fast", "ggml mul_mat", "exact C loop",
	"read loop"
};

/* A median and the min..max of one figure over the rounds. */
typedef struct {
	double med, lo, hi;
} stat_t;

typedef struct {
	int kind, threads;
	int reps;
	/* GB/s of weight bytes per round: over the wall clock, and over
	 * the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), which
	 * time lost to other processes does not inflate; the latter is the
	 * whole work's only on one thread. */
	double g[ROUNDS], gc[ROUNDS];
	stat_t wall, cpu;
} cand_t;

typedef struct {
	prog_t *prog;
	prog_t *fast;           /* mode fast (block formats), or NULL */
	const float *x;         /* what the fast candidate quantizes */
	uint8_t *xq;
	size_t xq_bytes;
	gg_t *gg;
	gg_mm_t *mm;
	reader_t *reader;
	kspec_cpu_entry_t probe;        /* NULL: none */
	void *probe_params[1];
} ctx_t;

static void run_once(const cand_t *c, ctx_t *x)
{
	void *rp[1] = { x->reader };

	switch (c->kind) {
	case CAND_KSPEC:
		kspec_cpu_launch((kspec_cpu_entry_t)x->prog->fn,
		    x->prog->params, x->prog->groups, c->threads);
		break;
	case CAND_FAST:
		/* x quantized on every call, as ggml's mul_mat does. */
		kspec_quantize("q8_0", x->x, 1, K, x->xq, x->xq_bytes, NULL, 0);
		kspec_cpu_launch((kspec_cpu_entry_t)x->fast->fn,
		    x->fast->params, x->fast->groups, c->threads);
		break;
	case CAND_GGML:
		x->gg->graph_compute(x->mm->graph, &x->mm->plan[c->threads]);
		break;
	case CAND_PROBE:
		kspec_cpu_launch(x->probe, x->probe_params, N / 8, c->threads);
		break;
	default:
		kspec_cpu_launch(read_chunks, rp, READ_CHUNKS, c->threads);
		sink += x->reader->sums[0];
		break;
	}
}

static uint64_t thread_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void stat_of(const double *v, stat_t *st)
{
	double s[ROUNDS];

	memcpy(s, v, sizeof s);
	st->med = bench_median(s, ROUNDS);
	st->lo = s[0];
	st->hi = s[ROUNDS - 1];
}

static void measure(cand_t *c, int n, ctx_t *x, double bytes)
{
	int r, i, k;

	for (i = 0; i < n; i++) {       /* warm-up and repetition count */
		uint64_t t0 = bench_ns();

		run_once(&c[i], x);
		run_once(&c[i], x);
		c[i].reps = (int)(TRIAL_NS / ((double)(bench_ns() - t0) / 2 +
		    1));
		if (c[i].reps < 1)
			c[i].reps = 1;
	}
	for (r = 0; r < ROUNDS; r++)
		for (k = 0; k < n; k++) {
			cand_t *ci = &c[(k + r) % n];
			uint64_t t0 = bench_ns(), c0 = thread_ns();

			for (i = 0; i < ci->reps; i++)
				run_once(ci, x);
			ci->gc[r] = bytes * ci->reps / (double)(thread_ns() -
			    c0);
			ci->g[r] = bytes * ci->reps / (double)(bench_ns() - t0);
		}
	for (i = 0; i < n; i++) {
		stat_of(c[i].g, &c[i].wall);
		stat_of(c[i].gc, &c[i].cpu);
	}
}

/* The median (and min..max) over the rounds of A's figure over B's in
 * the same round: steadier than a ratio of medians when the machine's
 * load drifts. */
static void round_ratio(const double *a, const double *b, stat_t *st)
{
	double v[ROUNDS];
	int i;

	for (i = 0; i < ROUNDS; i++)
		v[i] = a[i] / b[i];
	stat_of(v, st);
}

/* ---- the data ---- */

static uint64_t rng_state;

static uint64_t rng_next(void)      /* splitmix64 */
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void fill_uniform(float *v, size_t n, uint64_t seed)
{
	size_t i;

	rng_state = seed;
	for (i = 0; i < n; i++)
		v[i] = (float)((double)(rng_next() >> 11) * 0x1p-52 - 1.0);
}

static void *xalloc(size_t n)
{
	void *p = aligned_alloc(64, (n + 63) / 64 * 64);

	if (!p) {
		fprintf(stderr, "ggml: out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}

/* The largest |A - B| over the largest |B|. */
/* The largest |A - B| over the largest |B|; NaN when A has a value
 * that is not finite (a failed run leaves y's NaNs). */
static double rel_diff(const float *a, const double *b, int n)
{
	double d = 0, m = 0;
	int i;

	for (i = 0; i < n; i++) {
		if (!isfinite(a[i]))
			return NAN;
		d = fmax(d, fabs((double)a[i] - b[i]));
		m = fmax(m, fabs(b[i]));
	}
	return m > 0 ? d / m : d;
}

static int bitwise(const float *a, const float *b, int n)
{
	return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* ---- one format ---- */

/* Per candidate and thread count: its figure over the read loop's and
 * over ggml's (round_ratio). */
typedef struct {
	stat_t of_read[CAND_READ][NTHR + 1];    /* by kind, thread count */
	stat_t of_ggml[CAND_READ][NTHR + 1];
	stat_t cpu_of_read[CAND_READ];          /* one thread, CPU time */
	stat_t cpu_of_ggml[CAND_READ];
	int has_ggml, has_probe, exact, probe_exact;
	int has_fast, fast_exact;
} result_t;

/* A's ratio to REF (round_ratio; over the thread's CPU time if ON_CPU),
 * printed with SUFFIX and kept in OUT. */
static void print_ratio(const cand_t *a, const cand_t *ref, int on_cpu,
    const char *suffix, stat_t *out)
{
	round_ratio(on_cpu ? a->gc : a->g, on_cpu ? ref->gc : ref->g, out);
	printf("  %5.2f%s (%4.2f..%4.2f)", out->med, suffix, out->lo, out->hi);
}

/* The rows of C (N of them) and their ratios to the read loop and to
 * ggml of the same thread count, into RES: over the wall clock, or
 * (ON_CPU) over the calling thread's CPU time, one thread only. */
static void print_table(const cand_t *c, int n, int on_cpu, result_t *res)
{
	int i, j;

	printf("  %-3s %-13s %6s %15s %18s %20s\n", "thr", "candidate",
	    "GB/s", "(min..max)", "of read loop", "of ggml");
	for (i = 0; i < n; i++) {
		const cand_t *rd = NULL, *gm = NULL;
		const stat_t *st = on_cpu ? &c[i].cpu : &c[i].wall;

		if (on_cpu && c[i].threads != 1)
			continue;
		for (j = 0; j < n; j++) {
			if (c[j].threads == c[i].threads && c[j].kind ==
			    CAND_READ)
				rd = &c[j];
			if (c[j].threads == c[i].threads && c[j].kind ==
			    CAND_GGML)
				gm = &c[j];
		}
		printf("  %-3d %-13s %6.2f %6.2f..%-6.2f", c[i].threads,
		    cand_names[c[i].kind], st->med, st->lo, st->hi);
		if (c[i].kind != CAND_READ)
			print_ratio(&c[i], rd, on_cpu, "", on_cpu ?
			    &res->cpu_of_read[c[i].kind] :
			    &res->of_read[c[i].kind][c[i].threads]);
		if (c[i].kind != CAND_READ && c[i].kind != CAND_GGML && gm)
			print_ratio(&c[i], gm, on_cpu, "x", on_cpu ?
			    &res->cpu_of_ggml[c[i].kind] :
			    &res->of_ggml[c[i].kind][c[i].threads]);
		printf("\n");
	}
}

static void load_average(char *s, size_t n)
{
	double l[3];

	if (getloadavg(l, 3) == 3)
		snprintf(s, n, "%.2f %.2f %.2f", l[0], l[1], l[2]);
	else
		snprintf(s, n, "?");
}

static void bench_format(const format_t *f, const float *w32, const float *x,
    float *wdec, ks_ggml_t *base, gg_t *gg, struct ggml_threadpool **pools,
    result_t *res)
{
	size_t bytes = weight_bytes(f);
	uint8_t *w = xalloc(bytes);
	float *y = xalloc((size_t)N * 4), *yref = xalloc((size_t)N * 4);
	float *ys[CAND_READ][NTHR + 1];
	double *y64 = xalloc((size_t)N * sizeof *y64);
	double *yd = xalloc((size_t)N * sizeof *yd);
	const float *wref = wdec;
	reader_t *reader = xalloc(sizeof *reader);
	size_t xq_bytes = (size_t)(K / 32) * 34;
	uint8_t *xq = xalloc(xq_bytes);
	float *yfast = xalloc((size_t)N * 4);
	gg_mm_t mm;
	prog_t prog, fast;
	ctx_t cx;
	cand_t c[NCAND_KIND * NTHR];
	char err[512], load[64];
	int i, t, kind, nc = 0, same_bytes = -1, wdt_ref, caught;
#if HAVE_PROBE
	probe_args_t pa;
#else
	int pa;
#endif

	memset(res, 0, sizeof *res);
	/* The bytes, the same for every candidate. */
	if (f->wdtype == KS_DTYPE_F32) {
		memcpy(w, w32, bytes);
		wref = w32;
		wdt_ref = KS_DTYPE_F32;
	} else if (f->wdtype == KS_DTYPE_BF16) {
		for (i = 0; i < N * K; i++)
			((uint16_t *)w)[i] = ref_f32_to_bf16(w32[i]);
		wref = (const float *)w;
		wdt_ref = KS_DTYPE_BF16;
	} else {
		if (kspec_quantize(f->name, w32, N, K, w, bytes, err,
		    sizeof err) != 0) {
			fprintf(stderr, "ggml: quantize %s: %s\n", f->name,
			    err);
			exit(1);
		}
		ref_dequant_rows(f->ref, w, N, K, wdec);
		wdt_ref = KS_DTYPE_F32;
		if (base->handle) {     /* ggml's own quantizer, every row */
			size_t rb = bytes / N;
			uint8_t *row = xalloc(rb);

			same_bytes = 1;
			for (i = 0; i < N && same_bytes; i++) {
				base->quantize[f->gq](w32 + (size_t)i * K, row,
				    K);
				same_bytes = memcmp(row, w + (size_t)i * rb,
				    rb) == 0;
			}
			free(row);
		}
	}
	ref_gemm_mixed(x, wref, yref, KS_DTYPE_F32, wdt_ref, M, N, K);
	ref_gemm_f64_mixed(x, wref, y64, KS_DTYPE_F32, wdt_ref, M, N, K);

	prog_open(&prog, f, KS_MODE_EXACT, (float *)x, w, y);
	/* Mode fast: x in q8_0 blocks, kspec_quantize's bytes; its
	 * reference ref/ref_fast.h's sums over them. */
	res->has_fast = f->block > 1;
	if (res->has_fast) {
		prog_open(&fast, f, KS_MODE_FAST, xq, w, y);
		if (kspec_quantize("q8_0", x, 1, K, xq, xq_bytes, err,
		    sizeof err) != 0) {
			fprintf(stderr, "ggml: quantize x: %s\n", err);
			exit(1);
		}
		ref_gemm_fast(f->ref, xq, w, yfast, M, N, K);
	}
	res->has_ggml = gg->cpu != NULL;
	if (res->has_ggml && gg_mm_open(gg, &mm, f, w, (float *)x, y, pools,
	    err, sizeof err)) {
		fprintf(stderr, "ggml: %s: %s\n", f->name, err);
		exit(1);
	}
	reader->p = (const uint64_t *)w;
	reader->words = bytes / 8;
	cx = (ctx_t){ &prog, res->has_fast ? &fast : NULL, x, xq, xq_bytes,
		gg, &mm, reader, NULL, { &pa } };
#if HAVE_PROBE
	pa = (probe_args_t){ x, w, y };
	cx.probe = probes[f - formats];
#endif
	res->has_probe = cx.probe != NULL;

	/* The outputs, before any timing: each candidate once on 1 and on 2
	 * threads into y, which starts as NaNs each time. */
	res->exact = res->probe_exact = res->fast_exact = 1;
	for (t = 1; t <= NTHR; t++) {
		for (kind = 0; kind < CAND_READ; kind++) {
			cand_t one = { .kind = kind, .threads = t };

			ys[kind][t] = xalloc((size_t)N * 4);
			if ((kind == CAND_GGML && !res->has_ggml) ||
			    (kind == CAND_PROBE && !cx.probe) ||
			    (kind == CAND_FAST && !res->has_fast))
				continue;
			memset(y, 0xff, (size_t)N * 4);
			run_once(&one, &cx);
			memcpy(ys[kind][t], y, (size_t)N * 4);
		}
		res->exact &= bitwise(ys[CAND_KSPEC][t], yref, N);
		res->probe_exact &= !cx.probe || bitwise(ys[CAND_PROBE][t],
		    yref, N);
		res->fast_exact &= !res->has_fast || bitwise(ys[CAND_FAST][t],
		    yfast, N);
	}
	{
		cand_t one = { .kind = CAND_KSPEC, .threads = 1 };

		w[f->plant_byte] ^= (uint8_t)f->plant_mask;
		run_once(&one, &cx);
		w[f->plant_byte] ^= (uint8_t)f->plant_mask;
		caught = !bitwise(y, yref, N);
	}
	printf("%s: W %d x %d, %.2f MB (%.1f bits a weight), kspec %s on "
	    "%s\n", f->name, N, K, (double)bytes / 1e6, 8.0 * (double)bytes /
	    ((double)N * K), prog.k->variant, prog.target);
	if (same_bytes >= 0)
		printf("  bytes: kspec_quantize %s ggml's "
		    "quantize_row_%s_ref on all %d rows\n", same_bytes ?
		    "equals" : "DIFFERS FROM", f->ggml_name, N);
	printf("  y: kspec on 1 and 2 threads %s the reference (decoded W, "
	    "canonical f32 order)", res->exact ? "bitwise" : "DIFFERS FROM");
	if (cx.probe)
		printf("; the exact C loop %s", res->probe_exact ? "bitwise" :
		    "DIFFERS FROM IT");
	if (res->has_fast)
		printf("\n  y: kspec fast (x in q8_0; on %s) on 1 and 2 "
		    "threads %s its reference (ref/ref_fast.h)", fast.target,
		    res->fast_exact ? "bitwise" : "DIFFERS FROM");
	printf("\n  planted: with byte %d of W xored with 0x%02x, kspec's y "
	    "%s\n", f->plant_byte, f->plant_mask, caught ? "differs, as it "
	    "must" : "DOES NOT DIFFER: the check is blind");
	printf("  max |y - y64| / max |y64| (y64: the float64 sum over the "
	    "decoded W): kspec %.2e", rel_diff(ys[CAND_KSPEC][1], y64, N));
	if (res->has_ggml) {
		for (i = 0; i < N; i++)
			yd[i] = ys[CAND_KSPEC][1][i];
		printf(", ggml %.2e\n  ggml against kspec: max |dy| / max |y| "
		    "%.2e; ggml on 2 threads %s on 1", rel_diff(
		    ys[CAND_GGML][1], y64, N), rel_diff(ys[CAND_GGML][1], yd,
		    N), bitwise(ys[CAND_GGML][1], ys[CAND_GGML][2], N) ?
		    "bitwise as" : "differs from");
	}
	if (res->has_fast) {
		printf("\n  kspec fast: max |y - y64| / max |y64| %.2e",
		    rel_diff(ys[CAND_FAST][1], y64, N));
		if (res->has_ggml) {
			for (i = 0; i < N; i++)
				yd[i] = ys[CAND_FAST][1][i];
			printf("; ggml against kspec fast (both x in q8_0): "
			    "max |dy| / max |y| %.2e", rel_diff(
			    ys[CAND_GGML][1], yd, N));
		}
	}
	printf("\n");
	if (check_only)
		goto out;

	for (t = 1; t <= NTHR; t++) {
		for (kind = 0; kind < NCAND_KIND; kind++) {
			if ((kind == CAND_GGML && !res->has_ggml) ||
			    (kind == CAND_PROBE && !cx.probe) ||
			    (kind == CAND_FAST && !res->has_fast))
				continue;
			c[nc++] = (cand_t){ .kind = kind, .threads = t };
		}
	}
	load_average(load, sizeof load);
	measure(c, nc, &cx, (double)bytes);
	printf("  GB/s of weight bytes, median (min..max) of %d rounds, load "
	    "average before them %s; ratios: median (min..max) of the "
	    "rounds' ratios\n", ROUNDS, load);
	print_table(c, nc, 0, res);
	printf("  one thread, over the calling thread's CPU time (time lost "
	    "to other processes left out)\n");
	print_table(c, nc, 1, res);
out:
	printf("\n");
	fflush(stdout);
	if (res->has_ggml)
		gg_mm_close(gg, &mm);
	prog_close(&prog);
	if (res->has_fast)
		prog_close(&fast);
	free(xq);
	free(yfast);
	for (t = 1; t <= NTHR; t++)
		for (kind = 0; kind < CAND_READ; kind++)
			free(ys[kind][t]);
	free(reader);
	free(y64);
	free(yd);
	free(yref);
	free(y);
	free(w);
}

/* ---- the summary ---- */

/* The goals for the decode GEMV: on one thread, kspec's fraction
 * of the read loop (q8_0 0.85, q4_0 and q4_k 0.75, bf16 0.95; none for
 * f32); on 1 and 2 threads, at least ggml's speed for the block formats
 * (bf16's goal against ggml is for a fast mode, which gemm has not). */
static double goal_of_read(const format_t *f)
{
	return f->wdtype == KS_DTYPE_BF16 ? 0.95 : f->wdtype ==
	    KS_DTYPE_Q8_0 ? 0.85 : f->wdtype == KS_DTYPE_F32 ? 0 : 0.75;
}

/* One row of the summary: FMT's ratios RD (to the read loop) and GG (to
 * ggml), by candidate kind, and its goals on THREADS threads, for the
 * exact mode and for the fast one. */
static void summary_row(const format_t *f, const result_t *r, int threads,
    const char *clock, const stat_t *rd, const stat_t *gg)
{
	double goal = goal_of_read(f);
	int m;

	printf("%-6s %-3d %-5s %10.2f", f->name, threads, clock,
	    rd[CAND_KSPEC].med);
	if (r->has_fast)
		printf(" %10.2f", rd[CAND_FAST].med);
	else
		printf(" %10s", "-");
	if (r->has_ggml)
		printf(" %10.2f %9.2fx", rd[CAND_GGML].med, gg[CAND_KSPEC].med);
	else
		printf(" %10s %10s", "-", "-");
	if (r->has_ggml && r->has_fast)
		printf(" %9.2fx", gg[CAND_FAST].med);
	else
		printf(" %10s", "-");
	if (r->has_probe)
		printf(" %10.2f", rd[CAND_PROBE].med);
	else
		printf(" %10s", "-");
	printf(" ");
	for (m = 0; m < 1 + r->has_fast; m++) {
		int k = m ? CAND_FAST : CAND_KSPEC;

		if ((threads == 1 && goal > 0) || (r->has_ggml && f->block > 1))
			printf(" %s:", m ? "fast" : "exact");
		if (threads == 1 && goal > 0)
			printf(" read %s", rd[k].med >= goal ? "met" :
			    "MISSED");
		if (r->has_ggml && f->block > 1)
			printf(" ggml %s", gg[k].med >= 1.0 ? "met" :
			    "MISSED");
	}
	if (!r->exact || (r->has_fast && !r->fast_exact))
		printf(" NOT EXACT");
	printf("\n");
}

static void summary(const int *on, const result_t *res)
{
	size_t i;
	stat_t rd[CAND_READ], gg[CAND_READ];
	int t, k;

	printf("summary: medians of the rounds' ratios, over the wall clock "
	    "and (one thread) over the thread's CPU time; goals: on one "
	    "thread kspec >= 0.85 of the read loop for q8_0, 0.75 for q4_0 "
	    "and q4_k, 0.95 for bf16; >= 1.0x ggml on 1 and 2 threads for "
	    "q8_0, q4_0, q4_k; each for the exact mode and the fast one\n");
	printf("%-6s %-3s %-5s %10s %10s %10s %10s %10s %10s  %s\n", "format",
	    "thr", "clock", "exact/read", "fast/read", "ggml/read",
	    "exact/ggml", "fast/ggml", "loop/read", "goals");
	for (i = 0; i < NFORMATS; i++) {
		if (!on[i])
			continue;
		for (t = 1; t <= NTHR; t++) {
			for (k = 0; k < CAND_READ; k++) {
				rd[k] = res[i].of_read[k][t];
				gg[k] = res[i].of_ggml[k][t];
			}
			summary_row(&formats[i], &res[i], t, "wall", rd, gg);
			if (t == 1)
				summary_row(&formats[i], &res[i], t, "cpu",
				    res[i].cpu_of_read, res[i].cpu_of_ggml);
		}
	}
	printf("(loop: the exact C loop, the same arithmetic as kspec's "
	    "exact kernel written by hand; fast: mode fast, x quantized to "
	    "q8_0 by kspec_quantize on every call, as ggml quantizes it)\n");
}

/* Prints the assembly of kspec's kernel for format NAME (FAST: in mode
 * fast). */
static int print_asm(const char *name, int fast)
{
	const format_t *f = NULL;
	size_t i;
	prog_t p;
	ks_buf_t b;
	char err[4096];
	float dummy;

	for (i = 0; i < NFORMATS; i++)
		if (strcmp(formats[i].name, name) == 0)
			f = &formats[i];
	if (!f) {
		fprintf(stderr, "ggml: no format %s\n", name);
		return 2;
	}
	prog_open(&p, f, fast ? KS_MODE_FAST : KS_MODE_EXACT, &dummy, &dummy,
	    &dummy);
	ks_buf_init(&b);
	if (ks_jit_cpu_assembly(p.k, p.target, &b, err, sizeof err) !=
	    KS_OK) {
		fprintf(stderr, "ggml: %s\n", err);
		return 1;
	}
	fwrite(b.data, 1, b.len, stdout);
	ks_buf_close(&b);
	prog_close(&p);
	return 0;
}

int main(int argc, char **argv)
{
	ks_ggml_t base;
	gg_t gg;
	struct ggml_threadpool *pools[NTHR + 1] = { NULL };
	result_t res[NFORMATS];
	int on[NFORMATS], nsel = 0, t;
	float *w32, *x, *wdec;
	char err[1024], load[64];
	size_t i;

	if (ks_base_init() != KS_OK)
		return 1;
	if (argc == 3 && strcmp(argv[1], "--asm") == 0)
		return print_asm(argv[2], 0);
	if (argc == 3 && strcmp(argv[1], "--asm-fast") == 0)
		return print_asm(argv[2], 1);
	check_only = argc > 1 && strcmp(argv[1], "--check") == 0;
	argv += check_only;
	argc -= check_only;
	for (i = 0; i < NFORMATS; i++) {
		int j;

		on[i] = argc == 1;
		for (j = 1; j < argc; j++)
			on[i] |= strcmp(argv[j], formats[i].name) == 0;
		nsel += on[i];
	}
	if (nsel == 0) {
		fprintf(stderr, "usage: ggml [--check] [f32|bf16|q8_0|q4_0|"
		    "q4_k ...] | ggml --asm|--asm-fast FORMAT\n");
		return 2;
	}

	memset(&gg, 0, sizeof gg);
	if (ks_ggml_open(&base, err, sizeof err) || gg_open(&gg, &base, err,
	    sizeof err)) {
		printf("ggml: llama.cpp's ggml is not here (%s): its rows are "
		    "skipped; deploy/deps.sh --bench installs %s %s\n\n", err,
		    KS_GGML_PACKAGE, KS_GGML_PACKAGE_VERSION);
		if (gg.cpu)
			dlclose(gg.cpu);
		memset(&gg, 0, sizeof gg);
	} else {
		for (t = 1; t <= NTHR; t++) {
			struct gg_threadpool_params tp;

			gg.threadpool_params_init(&tp, t);
			tp.poll = 0;
			if (!(pools[t] = gg.threadpool_new(&tp))) {
				fprintf(stderr, "ggml: no threadpool\n");
				return 1;
			}
		}
	}

	load_average(load, sizeof load);
	printf("ggml: decode GEMV y = W x, M=%d N=%d K=%d, x f32, on 1 and %d "
	    "threads; load average %s\n", M, N, K, NTHR, load);
	if (gg.cpu)
		printf("ggml: %s %s, ggml %s (%s), CPU backend %s, "
		    "threadpool poll 0, plain layouts\n", KS_GGML_PACKAGE,
		    KS_GGML_PACKAGE_VERSION, KS_GGML_VERSION, KS_GGML_COMMIT,
		    strrchr(gg.cpu_path, '/') ? strrchr(gg.cpu_path, '/') + 1 :
		    gg.cpu_path);
	printf("\n");

	w32 = xalloc((size_t)N * K * 4);
	wdec = xalloc((size_t)N * K * 4);
	x = xalloc((size_t)K * 4);
	fill_uniform(w32, (size_t)N * K, 1);
	fill_uniform(x, K, 2);
	for (i = 0; i < NFORMATS; i++)
		if (on[i])
			bench_format(&formats[i], w32, x, wdec, &base, &gg,
			    pools, &res[i]);
	if (!check_only)
		summary(on, res);
	load_average(load, sizeof load);
	printf("load average after: %s\n", load);

	for (t = 1; t <= NTHR; t++)
		if (pools[t])
			gg.threadpool_free(pools[t]);
	free(w32);
	free(wdec);
	free(x);
	ks_ggml_close(&base);
	return 0;
}
