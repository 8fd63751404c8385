/*
 * examples/llama: a reference engine on libkspec.  A Llama-style decoder
 * (RMSNorm, grouped-query attention with rotary positions, a SwiGLU MLP,
 * untied output weights) built from a named config and seeded random
 * weights, run entirely through kernels served by kspecd:
 *
 *   embedding -> per layer: [rmsnorm | add_rmsnorm] -> gemm q, k, v ->
 *   kv_append_rope (k rotated into the cache, v copied) and rope (q) ->
 *   attention_prefill (T rows, causal, against the cache of capacity
 *   Sc = max_seq) -> gemm o -> add_rmsnorm (the residual) -> gemm of
 *   [gate | up] (one gemm, N = 2F) -> silu_mul -> gemm down ->
 *   add_rmsnorm (the next layer's, or the final norm) -> gemm logits
 *   (the last row) -> argmax.
 *
 * Start-up asks for every kernel of every phase (prefill at T = the prompt
 * length, decode at T = 1, verify at T = W) in ONE pipelined
 * kspec_get_many and loads each artifact once.  With --general every dim
 * of every request is dynamic, so the daemon serves its general variants
 * and the dims travel as arguments: the gate compares the two bit for bit.
 *
 * Backends: cpu (kspec_cpu_load, every call through the size-checked
 * kspec_cpu_call on --threads threads), opencl (the artifact's clbin
 * through the OpenCL ICD, arguments in the reply's params order, global
 * size launch.groups * launch.lanes) and cuda (cubins for the device's
 * sm_XY through the driver API, libcuda.so.1 loaded with dlopen: a grid
 * of launch.groups blocks of launch.lanes threads on the default stream).
 *
 * Weights: f32, or with --bf16 (--wdtype bf16) or --wdtype f16 the weights
 * of gemm, the norms and the embedding table in bf16 or f16 (requests
 * with that wdtype; activations, the
 * residual stream, the KV cache and the rope table stay f32), or with
 * --wdtype q8_0|q4_0|q4_k every 2-D weight (each gemm's, the embedding
 * table, the output projection) quantized by kspec_quantize, the norms
 * f32: gemm and embedding requests with that wdtype, the prefill's
 * panels packed from them in f32 (gemm_pack_w decodes).  A q4_k weight
 * whose rows are not a multiple of 256 long is stored in q8_0, as
 * llama.cpp's quantizer falls back.
 *
 * --mode fast (with block-format weights only; default exact): every
 * row-major gemm (decode's, verify's and the logits'; the prefill's with
 * --unpacked or --general) is requested in gemm's mode fast, whose x is
 * q8_0 blocks: before the call the engine quantizes its f32 rows with
 * kspec_quantize (llama.cpp's quantize_row_q8_0_ref bytes), once per
 * distinct x (q, k and v share theirs), on the host (OpenCL and CUDA read
 * x back and write the blocks), and passes the blocks as x.  Whether a
 * gemm takes x so is read from its reply's params, not assumed.  The
 * default packed prefill has no fast form and stays exact (gemm_packed
 * on f32 panels): the fast variant re-reads W per row, 2.4x to 4x as
 * slow over the 8b2l config's 512-token prompt (docs/benchmarks.md).
 * llama.cpp quantizes x so for every product with q8_0 and q4_0
 * weights, prompt included: with --unpacked the engine's logits follow
 * its own (tests/test_llama.c).
 *
 * --reference runs a float64 model of the same weights instead (no
 * daemon; reference.c, which also describes the dump, --dump FILE).
 *
 * --save-gguf FILE writes the model as a GGUF file and --load-gguf FILE
 * runs one instead of the seeded weights, of the config its keys give
 * unless --config names one to check it against (model_gguf.c); the seeded
 * weights are model.c's, the kinds of call and their dims kinds.c's.
 */
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "../../include/kspec.h"
#include "../cu_driver.h"
#include "../../ref/ref.h"
#include "kinds.h"
#include "model.h"
#include "options.h"

#define MAX_PARAMS 16

/*
 * Zeroed memory for a big buffer (the caches, the packed weights, the
 * activations of a long prompt), its pages faulted in at once
 * (MAP_POPULATE) rather than one at a time by a pack's scattered first
 * writes (transparent huge pages measured slower to fault here).
 */
enum { BIG_BYTES = 4 << 20 };

static void *big_alloc(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE |
	    MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	if (p == MAP_FAILED)
		die("mmap of %zu bytes: %s", bytes, strerror(errno));
	return p;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- a loaded kernel ---- */

enum { P_BUF, P_I64, P_F32 };

typedef struct {
	char name[16];
	int kind;
} param_t;

typedef struct {
	char key[512];          /* the request, to share one artifact */
	char variant[32];
	kspec_cpu_kernel_t *cpu;
	cl_program prog;
	cl_kernel clk;
	void *cumod, *cufn;     /* cuda: CUmodule, CUfunction */
	param_t params[MAX_PARAMS];
	int nparams;
	char groups[256];       /* launch.groups: a number or an expression */
	int64_t lanes;
	int xq8;                /* its x is q8_0 blocks (gemm's fast mode) */
} kern_t;

typedef struct {
	model_t *m;
	const opts_t *o;
	kspec_client_t *client;
	/* opencl */
	cl_context ctx;
	cl_command_queue queue;
	cl_device_id dev;
	/* cuda: the device's primary context and its sm_XY */
	int cudev;
	void *cuctx;
	char sm[16];
	/* the kernels: kern[phase][kind] points into loaded */
	kern_t *loaded;
	int nloaded;
	kern_t *kern[NPHASES][NKINDS];
	int64_t width[NPHASES]; /* T of each phase (0: not used) */
	int packed;             /* prefill through gemm_packed */
	/* activations, for the widest phase */
	buf_t ids, pos, pos1, lens, res, h, q, k, v, att, tmp, gu, act, hl,
	    logits, next, cs, xp;
	/* --mode fast: the q8_0 blocks of the last gemm's x (xq), and on a
	 * device the host's copies of x and of its blocks (x_host, xq_host)
	 * that kspec_quantize reads and writes */
	buf_t xq;
	float *x_host;
	void *xq_host;
	buf_t *kc, *vc;         /* the model's caches, per layer */
	buf_t *dkc, *dvc;       /* the draft's (--verify) */
	float *host_logits;
	int32_t *host_next;
	/* --profile: per phase and kind, the time in its calls (each call
	 * waited for) and their count; the forward passes of each phase.
	 * Index NPHASES is start-up (the weights' packs), one pass. */
	double prof_ms[NPHASES + 1][NKINDS];
	long prof_calls[NPHASES + 1][NKINDS], prof_passes[NPHASES + 1];
	int prof_phase;         /* the phase of the pass in progress */
} engine_t;

/* ---- the CUDA driver, loaded at run time (cu_driver.h) ---- */

static void cu_check(cu_result_t r, const char *what)
{
	const char *s = NULL;

	if (r == 0)
		return;
	if (cu.GetErrorString != NULL)
		cu.GetErrorString(r, &s);
	die("%s: %s (CUresult %d)", what, s ? s : "?", r);
}

/* Loads the driver, or dies saying why (no libcuda.so.1: no driver). */
static void cu_load(void)
{
	const char *why = cu_driver_load();

	if (why != NULL)
		die("%s", why);
}

/* Device 0's primary context, current on this thread, and its target. */
static void cu_open(engine_t *e)
{
	int major = 0, minor = 0;

	cu_load();
	cu_check(cu.Init(0), "cuInit (no CUDA device?)");
	cu_check(cu.DeviceGet(&e->cudev, 0), "cuDeviceGet");
	cu_check(cu.DeviceGetAttribute(&major, CU_CC_MAJOR, e->cudev),
	    "cuDeviceGetAttribute");
	cu_check(cu.DeviceGetAttribute(&minor, CU_CC_MINOR, e->cudev),
	    "cuDeviceGetAttribute");
	cu_check(cu.PrimaryCtxRetain(&e->cuctx, e->cudev),
	    "cuDevicePrimaryCtxRetain");
	cu_check(cu.CtxSetCurrent(e->cuctx), "cuCtxSetCurrent");
	snprintf(e->sm, sizeof e->sm, "sm_%d%d", major, minor);
}

/* 1 when buffers live on a device (opencl, cuda), not in host memory. */
static int on_device(const engine_t *e)
{
	return e->o->opencl || e->o->cuda;
}

/* ---- buffers on either backend ---- */

static void buf_init(engine_t *e, buf_t *b, size_t bytes, const char *dtype,
    void *data)
{
	cl_int rc;

	memset(b, 0, sizeof *b);
	b->bytes = bytes;
	b->dtype = dtype;
	if (e->o->cuda) {
		cu_check(cu.MemAlloc(&b->dptr, bytes), "cuMemAlloc");
		if (data != NULL)
			cu_check(cu.MemcpyHtoD(b->dptr, data, bytes),
			    "cuMemcpyHtoD");
		else
			cu_check(cu.MemsetD8(b->dptr, 0, bytes), "cuMemsetD8");
		return;
	}
	if (!e->o->opencl) {
		if (data != NULL) {
			b->host = data;   /* borrowed: the caller keeps it */
		} else if (bytes >= BIG_BYTES) {
			b->host = big_alloc(bytes);
			b->owned = 2;
		} else {
			b->host = xcalloc(1, bytes);
			b->owned = 1;
		}
		return;
	}
	b->mem = clCreateBuffer(e->ctx, CL_MEM_READ_WRITE |
	    (data ? CL_MEM_COPY_HOST_PTR : 0), bytes, data, &rc);
	if (b->mem == NULL)
		die("clCreateBuffer of %zu bytes: %d", bytes, rc);
	if (data == NULL) {
		void *zero = xcalloc(1, bytes);

		rc = clEnqueueWriteBuffer(e->queue, b->mem, CL_TRUE, 0, bytes,
		    zero, 0, NULL, NULL);
		free(zero);
		if (rc != CL_SUCCESS)
			die("clEnqueueWriteBuffer: %d", rc);
	}
}

static void buf_close(buf_t *b)
{
	if (b->owned == 1)
		free(b->host);
	else if (b->owned == 2)
		munmap(b->host, b->bytes);
	if (b->mem)
		clReleaseMemObject(b->mem);
	if (b->dptr)
		cu.MemFree(b->dptr);
	memset(b, 0, sizeof *b);
}

static void buf_write(engine_t *e, buf_t *b, const void *src, size_t bytes)
{
	cl_int rc;

	if (e->o->cuda) {
		cu_check(cu.MemcpyHtoD(b->dptr, src, bytes), "cuMemcpyHtoD");
		return;
	}
	if (!e->o->opencl) {
		memcpy(b->host, src, bytes);
		return;
	}
	rc = clEnqueueWriteBuffer(e->queue, b->mem, CL_TRUE, 0, bytes, src, 0,
	    NULL, NULL);
	if (rc != CL_SUCCESS)
		die("clEnqueueWriteBuffer: %d", rc);
}

static void buf_read(engine_t *e, buf_t *b, void *dst, size_t bytes)
{
	cl_int rc;

	if (e->o->cuda) {
		cu_check(cu.MemcpyDtoH(dst, b->dptr, bytes), "cuMemcpyDtoH");
		return;
	}
	if (!e->o->opencl) {
		memcpy(dst, b->host, bytes);
		return;
	}
	rc = clEnqueueReadBuffer(e->queue, b->mem, CL_TRUE, 0, bytes, dst, 0,
	    NULL, NULL);
	if (rc != CL_SUCCESS)
		die("clEnqueueReadBuffer: %d", rc);
}

static void buf_copy(engine_t *e, buf_t *dst, buf_t *src, size_t off,
    size_t bytes)
{
	cl_int rc;

	if (e->o->cuda) {
		cu_check(cu.MemcpyDtoD(dst->dptr, src->dptr + off, bytes),
		    "cuMemcpyDtoD");
		return;
	}
	if (!e->o->opencl) {
		memcpy(dst->host, (char *)src->host + off, bytes);
		return;
	}
	rc = clEnqueueCopyBuffer(e->queue, src->mem, dst->mem, off, 0, bytes,
	    0, NULL, NULL);
	if (rc != CL_SUCCESS)
		die("clEnqueueCopyBuffer: %d", rc);
}

/* ---- start-up: one get_many, each artifact loaded once ---- */

/* The wdtype of KIND's requests: bf16 or f16 for the weighted kinds in
 * those modes; with quantized weights, the format of the weight it reads (gemm,
 * embedding, gemm_pack_w), the norms' and the packed panels' f32; NULL
 * for f32. */
static const char *kind_wdtype(const model_t *m, int kind)
{
	int64_t v[MAX_DIMS];

	if (m->half)
		return kinds[kind].weighted ? m->half : NULL;
	if (!m->wq)
		return NULL;
	dims_of(&m->c, kind, 1, v);
	switch (kind) {
	case K_EMBED: case K_GEMM_Q: case K_GEMM_KV: case K_GEMM_O:
	case K_GEMM_GU: case K_GEMM_DOWN: case K_LOGITS:
		return model_fmt_for(m->wq, v[2]);
	case K_PACK_WQ: case K_PACK_WKV: case K_PACK_WO: case K_PACK_WGU:
	case K_PACK_WD:
		return model_fmt_for(m->wq, v[1]);
	default:
		return NULL;
	}
}

/* The dim of KIND that stays constant under --general: a quantized
 * weight's row length (its format needs it constant), or -1. */
static int fixed_dim(const model_t *m, int kind)
{
	if (!m->wq || !kind_wdtype(m, kind))
		return -1;
	return kinds[kind].packed == 2 ? 1 : 2;     /* K, or H */
}

/* Whether KIND's requests ask for gemm's fast mode: --mode fast, a
 * row-major gemm (gemm_packed, the packed prefill's, has no fast form),
 * its weight in a block format. */
static int kind_fast(const engine_t *e, int kind)
{
	const char *w = kind_wdtype(e->m, kind);

	return e->o->fast && kinds[kind].kernel != NULL &&
	    strcmp(kinds[kind].kernel, "gemm") == 0 && w != NULL &&
	    kspec_quant_block(w, NULL, NULL) == KSPEC_OK;
}

static void spec_key(const engine_t *e, int kind, int64_t T, char *key,
    size_t len)
{
	int64_t v[MAX_DIMS];
	size_t off;
	int i;

	dims_of(&e->m->c, kind, T, v);
	off = (size_t)snprintf(key, len, "%s", kinds[kind].kernel);
	for (i = 0; i < kinds[kind].ndims && off < len; i++)
		off += (size_t)snprintf(key + off, len - off, " %s=%" PRId64,
		    kinds[kind].dims[i], e->o->general &&
		    i != fixed_dim(e->m, kind) ? (int64_t)-1 : v[i]);
	if (kinds[kind].packed == 2 && e->m->half && off < len)
		off += (size_t)snprintf(key + off, len - off, " %s",
		    e->m->half);
	if (kind_wdtype(e->m, kind) && off < len)
		off += (size_t)snprintf(key + off, len - off, " w=%s",
		    kind_wdtype(e->m, kind));
	if (kind_fast(e, kind) && off < len)
		snprintf(key + off, len - off, " fast");
}

static void parse_meta(kern_t *k, const kspec_artifact_t *a)
{
	cJSON *m = cJSON_ParseWithLength(a->meta, a->meta_len);
	const cJSON *p, *launch, *g;

	if (m == NULL)
		die("%s: the reply is not JSON", a->kernel);
	snprintf(k->variant, sizeof k->variant, "%s", a->variant);
	cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(m, "params")) {
		const char *name = cJSON_GetStringValue(
		    cJSON_GetObjectItemCaseSensitive(p, "name"));
		const char *kind = cJSON_GetStringValue(
		    cJSON_GetObjectItemCaseSensitive(p, "kind"));
		const char *dt = cJSON_GetStringValue(
		    cJSON_GetObjectItemCaseSensitive(p, "dtype"));
		param_t *q = &k->params[k->nparams];

		if (!name || !kind || !dt || k->nparams == MAX_PARAMS)
			die("%s: malformed params", a->kernel);
		snprintf(q->name, sizeof q->name, "%s", name);
		q->kind = strcmp(kind, "buffer") == 0 ? P_BUF :
		    strcmp(dt, "i64") == 0 ? P_I64 : P_F32;
		if (strcmp(name, "x") == 0 && strcmp(dt, "q8_0") == 0)
			k->xq8 = 1;
		k->nparams++;
	}
	launch = cJSON_GetObjectItemCaseSensitive(m, "launch");
	g = cJSON_GetObjectItemCaseSensitive(launch, "groups");
	if (cJSON_IsNumber(g))
		snprintf(k->groups, sizeof k->groups, "%.0f", g->valuedouble);
	else if (cJSON_IsString(g))
		snprintf(k->groups, sizeof k->groups, "%s", g->valuestring);
	else
		die("%s: no launch.groups", a->kernel);
	g = cJSON_GetObjectItemCaseSensitive(launch, "lanes");
	k->lanes = cJSON_IsNumber(g) ? (int64_t)g->valuedouble : 32;
	cJSON_Delete(m);
}

static void load_cl(engine_t *e, kern_t *k, const kspec_artifact_t *a)
{
	const unsigned char *bytes = a->bytes;
	size_t len = a->len;
	cl_int rc, status;

	k->prog = clCreateProgramWithBinary(e->ctx, 1, &e->dev, &len, &bytes,
	    &status, &rc);
	if (k->prog == NULL)
		die("%s: clCreateProgramWithBinary: %d/%d", a->entry, rc,
		    status);
	rc = clBuildProgram(k->prog, 1, &e->dev, NULL, NULL, NULL);
	if (rc != CL_SUCCESS)
		die("%s: clBuildProgram: %d", a->entry, rc);
	k->clk = clCreateKernel(k->prog, a->entry, &rc);
	if (k->clk == NULL)
		die("%s: clCreateKernel: %d", a->entry, rc);
}

/* A cubin (or PTX, given a NUL) loaded into the current context. */
static void load_cu(kern_t *k, const kspec_artifact_t *a)
{
	char *image = xcalloc(1, a->len + 1);

	memcpy(image, a->bytes, a->len);
	cu_check(cu.ModuleLoadData(&k->cumod, image), "cuModuleLoadData");
	free(image);
	cu_check(cu.ModuleGetFunction(&k->cufn, k->cumod, a->entry),
	    "cuModuleGetFunction");
}

static void engine_load(engine_t *e)
{
	enum { MAXREQ = NPHASES * NKINDS };
	kspec_get_spec_t specs[MAXREQ];
	kspec_dim_t shape[MAXREQ][MAX_DIMS];
	const char *dyn[MAXREQ][MAX_DIMS];
	int fd;
	kspec_artifact_t *arts[MAXREQ];
	int errs[MAXREQ], fast[MAXREQ], ph, kind, i, n = 0, rc;
	char key[512], err[512];
	double t0, t1;

	memset(specs, 0, sizeof specs);
	e->loaded = xcalloc(MAXREQ, sizeof *e->loaded);
	for (ph = 0; ph < NPHASES; ph++)
	for (kind = 0; kind < NKINDS && e->width[ph]; kind++) {
		int64_t T = e->width[ph], v[MAX_DIMS];
		int d;

		/* Prefill takes the logits of its last row only: decode's. */
		if (ph == PH_PREFILL && (kind == K_LOGITS || kind == K_ARGMAX))
			continue;
		if (kinds[kind].kernel == NULL)         /* K_QUANT_X */
			continue;
		/* Packed prefill: the packs and gemm_packed instead of the
		 * row-major gemms; no other phase packs. */
		if (kinds[kind].packed && !(ph == PH_PREFILL && e->packed))
			continue;
		if (ph == PH_PREFILL && e->packed && kind >= K_GEMM_Q &&
		    kind <= K_GEMM_DOWN)
			continue;
		spec_key(e, kind, T, key, sizeof key);
		for (i = 0; i < n; i++)
			if (strcmp(e->loaded[i].key, key) == 0)
				break;
		e->kern[ph][kind] = &e->loaded[i];
		if (i < n)
			continue;
		snprintf(e->loaded[n].key, sizeof e->loaded[n].key, "%s", key);
		dims_of(&e->m->c, kind, T, v);
		for (d = 0; d < kinds[kind].ndims; d++) {
			shape[n][d].name = kinds[kind].dims[d];
			shape[n][d].value = v[d];
		}
		specs[n].kernel = kinds[kind].kernel;
		specs[n].backend = e->o->cuda ? "cuda" : e->o->opencl ?
		    "opencl" : "cpu";
		if (e->o->cuda) {
			specs[n].target = e->sm;
			specs[n].format = "cubin";
		} else if (e->o->target) {
			specs[n].target = e->o->target;
		}
		specs[n].dtype = kinds[kind].packed == 2 && e->m->half ?
		    e->m->half : "f32";
		specs[n].wdtype = kind_wdtype(e->m, kind);
		fast[n] = kind_fast(e, kind);
		specs[n].mode = fast[n] ? "fast" : NULL;
		fd = fixed_dim(e->m, kind);
		if (e->o->general && fd >= 0) {
			/* The row length constant, the rest dynamic. */
			int nd = 0;

			for (d = 0; d < kinds[kind].ndims; d++)
				if (d != fd)
					dyn[n][nd++] = kinds[kind].dims[d];
			shape[n][0] = shape[n][fd];
			specs[n].shape = shape[n];
			specs[n].nshape = 1;
			specs[n].dynamic = dyn[n];
			specs[n].ndynamic = (size_t)nd;
		} else if (e->o->general) {
			specs[n].dynamic = kinds[kind].dims;
			specs[n].ndynamic = (size_t)kinds[kind].ndims;
		} else {
			specs[n].shape = shape[n];
			specs[n].nshape = (size_t)kinds[kind].ndims;
		}
		n++;
	}
	e->kern[PH_PREFILL][K_LOGITS] = e->kern[PH_DECODE][K_LOGITS];
	e->kern[PH_PREFILL][K_ARGMAX] = e->kern[PH_DECODE][K_ARGMAX];
	e->nloaded = n;
	t0 = now_ms();
	rc = kspec_get_many(e->client, specs, (size_t)n, arts, errs);
	if (rc != 0) {
		for (i = 0; i < n; i++)
			if (errs[i] != 0)
				fprintf(stderr, "llama: get %s: %s\n",
				    e->loaded[i].key, kspec_err_name(errs[i]));
		die("get_many: %s: %s", kspec_err_name(rc),
		    kspec_last_error(e->client, NULL));
	}
	t1 = now_ms();
	for (i = 0; i < n; i++) {
		kern_t *k = &e->loaded[i];

		parse_meta(k, arts[i]);
		/* The fast mode's x is q8_0 blocks: what the reply says, not
		 * what the request hoped, decides what call() passes. */
		if (k->xq8 != fast[i])
			die("%s: the daemon's %s variant takes x in %s", k->key,
			    k->variant, k->xq8 ? "q8_0 blocks, unasked" :
			    "f32, not q8_0 blocks: no fast mode");
		if (e->o->opencl)
			load_cl(e, k, arts[i]);
		else if (e->o->cuda)
			load_cu(k, arts[i]);
		else if (kspec_cpu_load(arts[i], &k->cpu, NULL, err,
		    sizeof err) != 0)
			die("load %s: %s", k->key, err);
		if (!e->o->quiet)
			fprintf(stderr, "llama: %-60s %-10s %s\n", k->key,
			    k->variant, arts[i]->source);
		kspec_artifact_free(arts[i]);
	}
	if (!e->o->quiet)
		fprintf(stderr, "llama: %d kernels in one get_many, %.1f ms\n",
		    n, t1 - t0);
}

/* ---- one call ---- */

/* --profile: a call of KIND that began at T0 (ms), in the pass in
 * progress. */
static void profiled(engine_t *e, int kind, double t0)
{
	e->prof_ms[e->prof_phase][kind] += now_ms() - t0;
	e->prof_calls[e->prof_phase][kind]++;
	if (e->prof_phase == NPHASES)
		e->prof_passes[NPHASES] = 1;
}

typedef struct {
	const char *name;
	buf_t *buf;
} bind_t;

#define BIND(n, b) { n, b }

/*
 * Calls the kernel of KIND in phase PH for T rows, its arguments in the
 * reply's params order: each buffer bound by name from BINDS, each
 * dynamic dim from dims_of, the f32 scalar (eps or scale) SCALAR.  On the
 * cpu through kspec_cpu_call, which checks every buffer against the
 * reply's dims and dtype before it runs; on OpenCL enqueued in order on
 * the one queue (read back by the blocking reads of forward).
 */
static void call(engine_t *e, int ph, int kind, int64_t T,
    const bind_t *binds, int nbinds, float scalar)
{
	const kern_t *k = e->kern[ph][kind];
	int64_t dimv[MAX_DIMS];
	kspec_arg_t args[MAX_PARAMS];
	buf_t *bufs[MAX_PARAMS] = { 0 };
	char err[512];
	double t0;
	int i, j;

	dims_of(&e->m->c, kind, T, dimv);
	for (i = 0; i < k->nparams; i++) {
		const param_t *p = &k->params[i];

		if (p->kind == P_BUF) {
			for (j = 0; j < nbinds; j++)
				if (strcmp(binds[j].name, p->name) == 0)
					break;
			if (j == nbinds)
				die("%s: no buffer for %s", k->key, p->name);
			bufs[i] = binds[j].buf;
			args[i] = kspec_arg_typed(bufs[i]->host,
			    bufs[i]->bytes, bufs[i]->dtype);
		} else if (p->kind == P_I64) {
			for (j = 0; j < kinds[kind].ndims; j++)
				if (strcmp(kinds[kind].dims[j], p->name) == 0)
					break;
			if (j == kinds[kind].ndims)
				die("%s: unknown dim %s", k->key, p->name);
			args[i] = kspec_arg_i64(dimv[j]);
		} else {
			args[i] = kspec_arg_f32(scalar);   /* eps or scale */
		}
	}
	t0 = e->o->profile ? now_ms() : 0;
	if (!on_device(e)) {
		if (kspec_cpu_call(k->cpu, args, (size_t)k->nparams,
		    e->o->threads, err, sizeof err) != 0)
			die("%s: %s", k->key, err);
	} else if (e->o->cuda) {
		void *ptrs[MAX_PARAMS];
		int64_t groups = launch_groups(k->groups, kind, dimv);

		for (i = 0; i < k->nparams; i++)
			ptrs[i] = k->params[i].kind == P_BUF ?
			    (void *)&bufs[i]->dptr : k->params[i].kind ==
			    P_I64 ? (void *)&args[i].i64 : (void *)&args[i].f32;
		if (groups > 0x7fffffff)
			die("%s: %lld work-groups, past CUDA's grid", k->key,
			    (long long)groups);
		if (groups > 0)
			cu_check(cu.LaunchKernel(k->cufn, (unsigned)groups, 1,
			    1, (unsigned)k->lanes, 1, 1, 0, NULL, ptrs, NULL),
			    k->key);
		if (e->o->profile)
			cu_check(cu.CtxSynchronize(), k->key);
	} else {
		size_t local = (size_t)k->lanes, global;
		cl_int rc = CL_SUCCESS;

		global = (size_t)launch_groups(k->groups, kind, dimv) * local;
		for (i = 0; i < k->nparams && rc == CL_SUCCESS; i++) {
			if (k->params[i].kind == P_BUF) {
				rc = clSetKernelArg(k->clk, (cl_uint)i,
				    sizeof(cl_mem), &bufs[i]->mem);
			} else if (k->params[i].kind == P_I64) {
				cl_long v = args[i].i64;

				rc = clSetKernelArg(k->clk, (cl_uint)i,
				    sizeof v, &v);
			} else {
				cl_float v = args[i].f32;

				rc = clSetKernelArg(k->clk, (cl_uint)i,
				    sizeof v, &v);
			}
		}
		if (rc != CL_SUCCESS)
			die("%s: clSetKernelArg %d: %d", k->key, i, rc);
		if (global > 0)
			rc = clEnqueueNDRangeKernel(e->queue, k->clk, 1, NULL,
			    &global, &local, 0, NULL, NULL);
		if (rc != CL_SUCCESS)
			die("%s: clEnqueueNDRangeKernel: %d", k->key, rc);
		if (e->o->profile && clFinish(e->queue) != CL_SUCCESS)
			die("%s: clFinish failed", k->key);
	}
	if (e->o->profile)
		profiled(e, kind, t0);
}

/*
 * --profile: per phase, each kind's time per forward pass (its calls
 * summed, each waited for), its calls per pass and its share of the
 * phase's kernel time, the largest first; over every pass of the run
 * (the first and the --trials).  To stderr.
 */
static void profile_print(const engine_t *e)
{
	static const char *const phase[NPHASES + 1] = { "prefill", "decode",
	    "verify", "start-up" };
	int ph, i, j, order[NKINDS], n;
	int nt = e->o->threads ? e->o->threads : kspec_cpu_threads();
	double sum;

	if (on_device(e))
		fprintf(stderr, "llama: profile (%s): ", e->o->cuda ? "cuda" :
		    "opencl");
	else
		fprintf(stderr, "llama: profile (cpu, %d thread%s): ", nt,
		    nt > 1 ? "s" : "");
	fprintf(stderr, "ms per forward pass, calls per pass, share of the "
	    "phase's kernel time\n");
	for (ph = 0; ph <= NPHASES; ph++) {
		if (e->prof_passes[ph] == 0)
			continue;
		for (i = n = 0, sum = 0; i < NKINDS; i++)
			if (e->prof_calls[ph][i] > 0) {
				order[n++] = i;
				sum += e->prof_ms[ph][i];
			}
		for (i = 1; i < n; i++)         /* by time, largest first */
			for (j = i; j > 0 && e->prof_ms[ph][order[j]] >
			    e->prof_ms[ph][order[j - 1]]; j--) {
				int x = order[j];

				order[j] = order[j - 1];
				order[j - 1] = x;
			}
		fprintf(stderr, "  %s, %ld pass%s: %.2f ms of kernels per "
		    "pass\n", phase[ph], e->prof_passes[ph],
		    e->prof_passes[ph] == 1 ? "" : "es",
		    sum / (double)e->prof_passes[ph]);
		for (i = 0; i < n; i++) {
			int kd = order[i];

			fprintf(stderr, "    %-22s %10.3f ms %6.1f calls "
			    "%5.1f%%\n", kinds[kd].label, e->prof_ms[ph][kd] /
			    (double)e->prof_passes[ph],
			    (double)e->prof_calls[ph][kd] /
			    (double)e->prof_passes[ph], sum > 0 ? 100 *
			    e->prof_ms[ph][kd] / sum : 0.0);
		}
	}
}

/* ---- packed prefill ---- */

/* Packs W (N x K, the weights' dtype) with the pack kind KIND into P,
 * gemm_packed's panels of 32 rows. */
static void pack_weight(engine_t *e, int kind, tensor_t *w, buf_t *p)
{
	int64_t v[MAX_DIMS];
	size_t es = e->m->half ? 2 : 4;

	dims_of(&e->m->c, kind, e->width[PH_PREFILL], v);
	buf_init(e, p, (size_t)ref_panel_elems(v[0], v[1], PANEL_W) * es,
	    e->m->half ? e->m->half : "f32", NULL);
	{
		bind_t b[] = { BIND("in", &w->b), BIND("out", p) };

		call(e, PH_PREFILL, kind, e->width[PH_PREFILL], b, 2, 0);
	}
}

/* Every gemm weight of every layer into its panels, once at start-up:
 * the prefill's gemm_packed reads these; decode and verify read the
 * row-major weights. */
static void pack_weights(engine_t *e)
{
	double t0 = now_ms();
	int l;

	for (l = 0; l < e->m->c.layers; l++) {
		layer_t *y = &e->m->layer[l];

		pack_weight(e, K_PACK_WQ, &y->wq, &y->pq);
		pack_weight(e, K_PACK_WKV, &y->wk, &y->pk);
		pack_weight(e, K_PACK_WKV, &y->wv, &y->pv);
		pack_weight(e, K_PACK_WO, &y->wo, &y->po);
		pack_weight(e, K_PACK_WGU, &y->wgu, &y->pgu);
		pack_weight(e, K_PACK_WD, &y->wd, &y->pd);
	}
	if (e->o->opencl)
		clFinish(e->queue);
	if (e->o->cuda)
		cu_check(cu.CtxSynchronize(), "cuCtxSynchronize");
	if (!e->o->quiet)
		fprintf(stderr, "llama: gemm weights packed into panels, "
		    "%.1f ms\n", now_ms() - t0);
}

/* The gemm_packed kind of a row-major gemm kind (K_GEMM_Q..K_GEMM_DOWN
 * and K_GP_Q..K_GP_DOWN are in the same order). */
static int packed_kind(int gemm_kind)
{
	return gemm_kind - K_GEMM_Q + K_GP_Q;
}

/* The gemm_pack_x kind of a gemm kind's x: rows of H for q, k, v and
 * gate-up, of Dq for o, of F for down. */
static int x_pack_kind(int gemm_kind)
{
	return gemm_kind == K_GEMM_O ? K_PACK_XQ : gemm_kind == K_GEMM_DOWN ?
	    K_PACK_XF : K_PACK_XH;
}

/*
 * --mode fast: the T rows of x (each the K of the gemm KIND) quantized
 * into q8_0 blocks in e->xq by kspec_quantize, on the host (llama.cpp's
 * quantize_row_q8_0_ref's bytes): on a device x is read back and its
 * blocks written to the device's e->xq.  Dies, saying why, on a row
 * kspec_quantize refuses (a NaN or infinite activation, or one of
 * magnitude 8.3e6 or more).
 */
static void quantize_x(engine_t *e, int kind, int64_t T, buf_t *x)
{
	int64_t v[MAX_DIMS];
	const float *src = x->host;
	void *dst = e->xq.host;
	size_t bytes = 0;
	double t0 = e->o->profile ? now_ms() : 0;
	char err[512];

	dims_of(&e->m->c, kind, T, v);          /* M, N, K */
	if (kspec_quant_size("q8_0", (size_t)T, (size_t)v[2], &bytes, err,
	    sizeof err) != 0 || bytes > e->xq.bytes)
		die("%s: %" PRId64 " rows of x to q8_0: %s", kinds[kind].label,
		    T, bytes ? "past the buffer" : err);
	if (on_device(e)) {
		buf_read(e, x, e->x_host, (size_t)(T * v[2]) * sizeof(float));
		src = e->x_host;
		dst = e->xq_host;
	}
	if (kspec_quantize("q8_0", src, (size_t)T, (size_t)v[2], dst, bytes,
	    err, sizeof err) != 0)
		die("%s: x to q8_0: %s", kinds[kind].label, err);
	if (on_device(e))
		buf_write(e, &e->xq, dst, bytes);
	if (e->o->profile)
		profiled(e, K_QUANT_X, t0);
}

/*
 * y = x W^T for T rows with the gemm of KIND (K_GEMM_* or K_LOGITS) in
 * phase PH: the row-major gemm, or at a packed prefill gemm_packed on
 * W's panels WP, after packing x into e->xp; a fast-mode gemm (its reply
 * takes x in q8_0 blocks) after quantizing x into e->xq.  FRESH: x is
 * not the previous call's x (0: e->xp or e->xq holds its panels or
 * blocks already, from the previous call on the same x: k and v after q).
 */
static void linear(engine_t *e, int ph, int64_t T, int kind, int fresh,
    buf_t *x, tensor_t *w, buf_t *wp, buf_t *y)
{
	if (ph == PH_PREFILL && e->packed) {
		bind_t bp[] = { BIND("in", x), BIND("out", &e->xp) };
		bind_t b[] = { BIND("xp", &e->xp), BIND("Wp", wp),
		    BIND("y", y) };

		if (fresh)
			call(e, ph, x_pack_kind(kind), T, bp, 2, 0);
		call(e, ph, packed_kind(kind), T, b, 3, 0);
		return;
	}
	if (e->kern[ph][kind]->xq8) {
		bind_t b[] = { BIND("x", &e->xq), BIND("W", &w->b),
		    BIND("y", y) };

		if (fresh)
			quantize_x(e, kind, T, x);
		call(e, ph, kind, T, b, 3, 0);
		return;
	}
	{
		bind_t b[] = { BIND("x", x), BIND("W", &w->b), BIND("y", y) };

		call(e, ph, kind, T, b, 3, 0);
	}
}

static void tensor_upload(engine_t *e, tensor_t *t)
{
	uint16_t *w;
	int64_t i;

	/* The engine reads its buffers only: a quantized or 16-bit weight's
	 * f32 values (what the float64 reference reads) go. */
	if (t->fmt) {
		buf_init(e, &t->b, t->qbytes, t->fmt, t->q);
		free(t->f);
		t->f = NULL;
		return;
	}
	if (!e->m->half) {
		buf_init(e, &t->b, (size_t)t->n * 4, "f32", t->f);
		return;
	}
	w = xcalloc((size_t)t->n, 2);
	for (i = 0; i < t->n; i++)
		w[i] = model_f32_to_half(e->m->half, t->f[i]);
	free(t->f);
	t->f = NULL;
	buf_init(e, &t->b, (size_t)t->n * 2, e->m->half, w);
	if (on_device(e))
		free(w);                /* copied to the device */
	else
		t->b.owned = 1;         /* the cpu buffer is w itself */
}

/* ---- the engine ---- */

static void cl_open(engine_t *e)
{
	cl_platform_id plats[8];
	cl_uint np = 0, i, nd;
	cl_int rc;

	if (clGetPlatformIDs(8, plats, &np) != CL_SUCCESS || np == 0)
		die("no OpenCL platform");
	for (i = 0; i < np; i++)
		if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 1, &e->dev,
		    &nd) == CL_SUCCESS && nd > 0)
			break;
	if (i == np)
		die("no OpenCL device");
	e->ctx = clCreateContext(NULL, 1, &e->dev, NULL, NULL, &rc);
	if (e->ctx == NULL)
		die("clCreateContext: %d", rc);
	e->queue = clCreateCommandQueue(e->ctx, e->dev, 0, &rc);
	if (e->queue == NULL)
		die("clCreateCommandQueue: %d", rc);
}

static void engine_open(engine_t *e, model_t *m, const opts_t *o)
{
	const config_t *c = &m->c;
	const size_t H = (size_t)c->hidden, Dq = (size_t)c->hq * c->hd,
	    Dkv = (size_t)c->hkv * c->hd, F = (size_t)c->ffn,
	    V = (size_t)c->vocab;
	const size_t Kmax = F > H ? (F > Dq ? F : Dq) : (H > Dq ? H : Dq);
	size_t T, kv = (size_t)c->max_seq * Dkv * 4;
	tensor_t *t[3 + 8 * 64];
	int l, rc, i, nt;

	memset(e, 0, sizeof *e);
	e->m = m;
	e->o = o;
	e->prof_phase = NPHASES;        /* start-up, until the first pass */
	e->width[PH_PREFILL] = o->prompt;
	e->width[PH_DECODE] = 1;
	e->width[PH_VERIFY] = o->verify;
	e->packed = !o->general && !o->unpacked;
	T = (size_t)(o->prompt > o->verify ? o->prompt : o->verify);
	/* A daemon started just before may not listen yet: 10 s of tries. */
	for (i = 0; i < 100; i++) {
		rc = kspec_connect(o->socket, &e->client);
		if (rc != KSPEC_E_CONNECT || i == 99)
			break;
		kspec_close(e->client);
		nanosleep(&(struct timespec){ 0, 100000000 }, NULL);
	}
	if (rc != 0)
		die("connect: %s", kspec_last_error(e->client, NULL));
	if (o->opencl)
		cl_open(e);
	if (o->cuda)
		cu_open(e);
	engine_load(e);
	nt = model_tensors(m, t);
	for (i = 0; i < nt; i++)
		tensor_upload(e, t[i]);
	if (e->packed)
		pack_weights(e);
	buf_init(e, &e->cs, (size_t)c->max_seq * c->hd * 4, "f32", m->cs);
	buf_init(e, &e->ids, T * 4, "i32", NULL);
	buf_init(e, &e->pos, T * 4, "i32", NULL);
	buf_init(e, &e->pos1, 4, "i32", NULL);
	buf_init(e, &e->lens, 4, "i32", NULL);
	buf_init(e, &e->res, T * H * 4, "f32", NULL);
	buf_init(e, &e->h, T * H * 4, "f32", NULL);
	buf_init(e, &e->q, T * Dq * 4, "f32", NULL);
	buf_init(e, &e->k, T * Dkv * 4, "f32", NULL);
	buf_init(e, &e->v, T * Dkv * 4, "f32", NULL);
	buf_init(e, &e->att, T * Dq * 4, "f32", NULL);
	buf_init(e, &e->tmp, T * H * 4, "f32", NULL);
	buf_init(e, &e->gu, T * 2 * F * 4, "f32", NULL);
	buf_init(e, &e->act, T * F * 4, "f32", NULL);
	buf_init(e, &e->hl, T * H * 4, "f32", NULL);
	buf_init(e, &e->logits, T * V * 4, "f32", NULL);
	buf_init(e, &e->next, T * 4, "i32", NULL);
	if (e->packed)
		buf_init(e, &e->xp, (size_t)ref_panel_elems((int64_t)T,
		    (int64_t)Kmax, PANEL_X) * 4, "f32", NULL);
	if (o->fast) {
		size_t qb = 0;
		char err[256];

		/* Every gemm's K is a multiple of its weight's block. */
		if (kspec_quant_size("q8_0", T, Kmax, &qb, err, sizeof err))
			die("x in q8_0: %s", err);
		buf_init(e, &e->xq, qb, "q8_0", NULL);
		if (on_device(e)) {
			e->x_host = xcalloc(T * Kmax, sizeof(float));
			e->xq_host = xcalloc(1, qb);
		}
	}
	e->kc = xcalloc((size_t)c->layers, sizeof *e->kc);
	e->vc = xcalloc((size_t)c->layers, sizeof *e->vc);
	e->dkc = xcalloc((size_t)c->layers, sizeof *e->dkc);
	e->dvc = xcalloc((size_t)c->layers, sizeof *e->dvc);
	for (l = 0; l < c->layers; l++) {
		buf_init(e, &e->kc[l], kv, "f32", NULL);
		buf_init(e, &e->vc[l], kv, "f32", NULL);
		if (o->verify && l < o->draft_layers) {
			buf_init(e, &e->dkc[l], kv, "f32", NULL);
			buf_init(e, &e->dvc[l], kv, "f32", NULL);
		}
	}
	e->host_logits = xcalloc(T * V, sizeof(float));
	e->host_next = xcalloc(T, sizeof(int32_t));
}

static void engine_close(engine_t *e)
{
	model_t *m = e->m;
	tensor_t *t[3 + 8 * 64];
	int i, l, nt = model_tensors(m, t);

	for (i = 0; i < e->nloaded; i++) {
		if (e->loaded[i].cpu)
			kspec_cpu_unload(e->loaded[i].cpu);
		if (e->loaded[i].clk)
			clReleaseKernel(e->loaded[i].clk);
		if (e->loaded[i].prog)
			clReleaseProgram(e->loaded[i].prog);
		if (e->loaded[i].cumod)
			cu.ModuleUnload(e->loaded[i].cumod);
	}
	free(e->loaded);
	buf_t *bufs[] = { &e->ids, &e->pos, &e->pos1, &e->lens, &e->res,
	    &e->h, &e->q, &e->k, &e->v, &e->att, &e->tmp, &e->gu, &e->act,
	    &e->hl, &e->logits, &e->next, &e->cs, &e->xp, &e->xq };
	for (i = 0; i < (int)(sizeof bufs / sizeof bufs[0]); i++)
		buf_close(bufs[i]);
	for (i = 0; i < nt; i++)
		buf_close(&t[i]->b);
	for (l = 0; l < m->c.layers; l++) {
		layer_t *y = &m->layer[l];
		buf_t *p[] = { &y->pq, &y->pk, &y->pv, &y->po, &y->pgu,
		    &y->pd };

		for (i = 0; i < (int)(sizeof p / sizeof p[0]); i++)
			buf_close(p[i]);
		buf_close(&e->kc[l]);
		buf_close(&e->vc[l]);
		buf_close(&e->dkc[l]);
		buf_close(&e->dvc[l]);
	}
	free(e->kc);
	free(e->vc);
	free(e->dkc);
	free(e->dvc);
	free(e->host_logits);
	free(e->host_next);
	free(e->x_host);
	free(e->xq_host);
	if (e->queue)
		clReleaseCommandQueue(e->queue);
	if (e->ctx)
		clReleaseContext(e->ctx);
	if (e->cuctx)
		cu.PrimaryCtxRelease(e->cudev);
	kspec_close(e->client);
}

/*
 * Runs the T tokens IDS at positions START .. START+T-1 (phase PH, whose
 * width is T) through the first NLAYERS layers and the head, appending
 * their keys and values to the caches KC, VC; leaves the logits of the
 * last NL rows (NL is 1, or T for a verify) in host_logits and their
 * greedy picks in host_next.  The draft is the model cut to its first
 * layers, with caches of its own.
 */
static void forward(engine_t *e, int ph, const int32_t *ids, int T,
    int start, int NL, int nlayers, buf_t *kc, buf_t *vc)
{
	model_t *m = e->m;
	const config_t *c = &m->c;
	int32_t pos[1024], one;
	const float scale = 1.0f / sqrtf((float)c->hd);
	int l, t, lph = NL == 1 ? PH_DECODE : ph;

	if (T > (int)(sizeof pos / sizeof pos[0]) || start + T > c->max_seq)
		die("%d tokens at %d do not fit", T, start);
	e->prof_phase = ph;
	e->prof_passes[ph]++;
	for (t = 0; t < T; t++)
		pos[t] = start + t;
	buf_write(e, &e->ids, ids, (size_t)T * 4);
	buf_write(e, &e->pos, pos, (size_t)T * 4);
	one = start;
	buf_write(e, &e->pos1, &one, 4);
	one = start + T;
	buf_write(e, &e->lens, &one, 4);
	{
		bind_t b[] = { BIND("ids", &e->ids),
		    BIND("table", &m->embed.b), BIND("y", &e->res) };
		call(e, ph, K_EMBED, T, b, 3, 0);
	}
	for (l = 0; l < nlayers; l++) {
		layer_t *y = &m->layer[l];
		tensor_t *next = l + 1 < nlayers ?
		    &m->layer[l + 1].attn_norm : &m->final_norm;

		if (l == 0) {
			bind_t b[] = { BIND("x", &e->res),
			    BIND("w", &y->attn_norm.b),
			    BIND("y", &e->h) };
			call(e, ph, K_RMSNORM, T, b, 3, e->m->c.rms_eps);
		}
		/* q, k, v read the same h: packed (or quantized) once. */
		linear(e, ph, T, K_GEMM_Q, 1, &e->h, &y->wq, &y->pq, &e->q);
		linear(e, ph, T, K_GEMM_KV, 0, &e->h, &y->wk, &y->pk, &e->k);
		linear(e, ph, T, K_GEMM_KV, 0, &e->h, &y->wv, &y->pv, &e->v);
		{
			bind_t ba[] = { BIND("k", &e->k), BIND("v", &e->v),
			    BIND("pos", &e->pos1), BIND("cs", &e->cs),
			    BIND("k_cache", &kc[l]),
			    BIND("v_cache", &vc[l]) };
			bind_t br[] = { BIND("x", &e->q), BIND("pos", &e->pos),
			    BIND("cs", &e->cs) };
			bind_t bt[] = { BIND("q", &e->q), BIND("k", &kc[l]),
			    BIND("v", &vc[l]), BIND("lens", &e->lens),
			    BIND("o", &e->att) };
			call(e, ph, K_KV_ROPE, T, ba, 6, 0);
			call(e, ph, K_ROPE, T, br, 3, 0);
			call(e, ph, K_ATTN, T, bt, 5, scale);
		}
		{
			bind_t bn[] = { BIND("x", &e->tmp),
			    BIND("res", &e->res),
			    BIND("w", &y->ffn_norm.b),
			    BIND("y", &e->h) };
			bind_t bs[] = { BIND("gu", &e->gu),
			    BIND("y", &e->act) };
			bind_t bn2[] = { BIND("x", &e->tmp),
			    BIND("res", &e->res),
			    BIND("w", &next->b), BIND("y", &e->h) };
			linear(e, ph, T, K_GEMM_O, 1, &e->att, &y->wo, &y->po,
			    &e->tmp);
			call(e, ph, K_ADD_RMSNORM, T, bn, 4,
			    e->m->c.rms_eps);
			linear(e, ph, T, K_GEMM_GU, 1, &e->h, &y->wgu, &y->pgu,
			    &e->gu);
			call(e, ph, K_SILU, T, bs, 2, 0);
			linear(e, ph, T, K_GEMM_DOWN, 1, &e->act, &y->wd,
			    &y->pd, &e->tmp);
			call(e, ph, K_ADD_RMSNORM, T, bn2, 4,
			    e->m->c.rms_eps);
		}
	}
	buf_copy(e, &e->hl, &e->h, (size_t)(T - NL) * c->hidden * 4,
	    (size_t)NL * c->hidden * 4);
	linear(e, lph, NL, K_LOGITS, 1, &e->hl, &m->wout, NULL, &e->logits);
	{
		bind_t bm[] = { BIND("x", &e->logits), BIND("idx", &e->next) };

		call(e, lph, K_ARGMAX, NL, bm, 2, 0);
	}
	buf_read(e, &e->logits, e->host_logits, (size_t)NL * c->vocab * 4);
	buf_read(e, &e->next, e->host_next, (size_t)NL * 4);
}

/*
 * Greedy speculative decoding from toks[0] (the prefill's pick): per
 * round the draft (the first draft_layers layers, its own caches) decodes
 * W - 1 proposals after the last committed token; one verify step runs
 * the last token and the proposals, T = W rows, through the model; the
 * proposals are accepted while each equals the model's pick of the row
 * before it, and the model's pick after the last accepted one is
 * committed too.  Every row of the verify computes what a decode step at
 * its position would (each kernel's rows are independent and in the same
 * order), so the committed tokens and logits are greedy decode's, bit for
 * bit (the gate checks it).  Stale cache rows past a rejection are
 * overwritten by the next round before any length reaches them.
 */
static void speculate(engine_t *e, const int32_t *prompt, int32_t *toks,
    float *logits)
{
	const opts_t *o = e->o;
	const int V = e->m->c.vocab, W = o->verify, DL = o->draft_layers;
	int32_t cand[64];
	int ns = 1, rounds = 0, accepted = 0, i, a;

	forward(e, PH_PREFILL, prompt, o->prompt, 0, 1, DL, e->dkc, e->dvc);
	while (ns < o->steps) {
		const int n = o->prompt + ns - 1;     /* position of cand[0] */

		cand[0] = toks[ns - 1];
		for (i = 1; i < W; i++) {
			forward(e, PH_DECODE, &cand[i - 1], 1, n + i - 1, 1, DL,
			    e->dkc, e->dvc);
			cand[i] = e->host_next[0];
		}
		forward(e, PH_VERIFY, cand, W, n, W, e->m->c.layers, e->kc,
		    e->vc);
		for (a = 0; a < W - 1 && cand[a + 1] == e->host_next[a]; a++)
			;
		for (i = 0; i <= a && ns < o->steps; i++, ns++) {
			toks[ns] = e->host_next[i];
			memcpy(logits + (size_t)ns * V, e->host_logits +
			    (size_t)i * V, (size_t)V * sizeof(float));
		}
		/* The draft's cache lacks the last proposal when all pass
		 * (after the commit: the draft's step reuses host_next). */
		if (a == W - 1 && ns < o->steps)
			forward(e, PH_DECODE, &cand[W - 1], 1, n + W - 1, 1, DL,
			    e->dkc, e->dvc);
		rounds++;
		accepted += a;
	}
	if (!o->quiet)
		fprintf(stderr, "llama: verify W=%d: %d rounds, %.2f of %d "
		    "proposals accepted per round\n", W, rounds, rounds ?
		    (double)accepted / rounds : 0.0, W - 1);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * --trials N: N more runs of the prefill and the greedy decode after the
 * first (which is the warm-up); prints one line, "timing prefill_ms MED
 * MIN MAX decode_ms MED MIN MAX", per-token decode time over steps 1 ..
 * steps-1, for bench/llama to read.
 */
static void time_trials(engine_t *e, const int32_t *prompt, int32_t *toks)
{
	const opts_t *o = e->o;
	double pre[64], dec[64], t0, t1;
	int n = o->trials < 64 ? o->trials : 64, t, s, L = e->m->c.layers;

	for (t = 0; t < n; t++) {
		t0 = now_ms();
		forward(e, PH_PREFILL, prompt, o->prompt, 0, 1, L, e->kc, e->vc);
		t1 = now_ms();
		pre[t] = t1 - t0;
		for (s = 1; s < o->steps; s++)
			forward(e, PH_DECODE, &toks[s - 1], 1, o->prompt + s - 1,
			    1, L, e->kc, e->vc);
		dec[t] = o->steps > 1 ? (now_ms() - t1) / (o->steps - 1) : 0;
	}
	qsort(pre, (size_t)n, sizeof pre[0], cmp_double);
	qsort(dec, (size_t)n, sizeof dec[0], cmp_double);
	printf("timing prefill_ms %.3f %.3f %.3f decode_ms %.4f %.4f %.4f\n",
	    pre[n / 2], pre[0], pre[n - 1], dec[n / 2], dec[0], dec[n - 1]);
	fflush(stdout);
}

static int run_engine(model_t *m, const opts_t *o)
{
	const int V = m->c.vocab;
	int32_t prompt[1024], *toks;
	float *logits;
	double t0, t1, t2;
	int s, L = m->c.layers;
	engine_t e;

	if (o->prompt < 1 || o->prompt > 1024 || o->steps < 1 ||
	    o->prompt + o->steps + o->verify > m->c.max_seq)
		die("prompt %d + steps %d (+ verify %d) must fit max_seq %d",
		    o->prompt, o->steps, o->verify, m->c.max_seq);
	toks = xcalloc((size_t)o->steps + 1, 4);
	logits = xcalloc((size_t)(o->steps + 1) * V, sizeof(float));
	model_prompt(o->seed, o->prompt, V, prompt);
	engine_open(&e, m, o);
	t0 = now_ms();
	forward(&e, PH_PREFILL, prompt, o->prompt, 0, 1, L, e.kc, e.vc);
	t1 = now_ms();
	toks[0] = e.host_next[0];
	memcpy(logits, e.host_logits, (size_t)V * sizeof(float));
	if (o->verify)
		speculate(&e, prompt, toks, logits);
	for (s = 1; s < o->steps && !o->verify; s++) {
		forward(&e, PH_DECODE, &toks[s - 1], 1, o->prompt + s - 1, 1, L,
		    e.kc, e.vc);
		toks[s] = e.host_next[0];
		memcpy(logits + (size_t)s * V, e.host_logits,
		    (size_t)V * sizeof(float));
	}
	t2 = now_ms();
	for (s = 0; s < o->steps && !o->quiet; s++)
		printf("%d%c", toks[s], s + 1 < o->steps ? ' ' : '\n');
	if (!o->quiet)
		fprintf(stderr, "llama: prefill %d tokens %.2f ms, decode %.3f "
		    "ms/token\n", o->prompt, t1 - t0, o->steps > 1 ?
		    (t2 - t1) / (o->steps - 1) : 0.0);
	if (o->dump)
		dump_write(o->dump, V, 4, o->steps, toks, logits);
	if (o->trials > 0)
		time_trials(&e, prompt, toks);
	if (o->profile)
		profile_print(&e);
	engine_close(&e);
	free(toks);
	free(logits);
	return 0;
}

int main(int argc, char **argv)
{
	opts_t o;
	model_t m;
	int rc;

	opts_parse(&o, argc, argv);
	if (o.load) {
		model_load_gguf(&m, o.cfg, o.load);
		o.cfg = &m.c;
		if (o.fast && !m.wq)
			die("%s: %s", o.load, opts_fast_needs);
	}
	if (o.prompt < 0)
		o.prompt = o.cfg->prompt;
	if (o.steps < 0)
		o.steps = o.cfg->steps;
	if (o.cfg->layers > 64)
		die("at most 64 layers");
	if (o.draft_layers == 0)
		o.draft_layers = 1;
	if (o.draft_layers < 1 || o.draft_layers > o.cfg->layers)
		die("--draft-layers must be 1..%d", o.cfg->layers);
	if (o.threads < 0 || o.threads > KSPEC_MAX_THREADS)
		die("--threads must be 0..%d", KSPEC_MAX_THREADS);
	if (!o.load)
		model_init(&m, o.cfg, o.half, o.wq, o.seed);
	if (o.save)
		model_save_gguf(&m, o.save);
	if (!o.quiet)
		fprintf(stderr, "llama: config %s: hidden %d, %d layers, %d/%d "
		    "heads of %d, ffn %d, vocab %d, max_seq %d, %s weights, "
		    "mode %s\n", o.cfg->name, o.cfg->hidden, o.cfg->layers,
		    o.cfg->hq, o.cfg->hkv, o.cfg->hd, o.cfg->ffn,
		    o.cfg->vocab, o.cfg->max_seq, m.wq ? m.wq : m.half ?
		    m.half : "f32", o.mode);
	if (o.reference) {
		ref_opts_t r = { o.prompt, o.steps, o.seed, o.quiet, o.follow,
		    o.dump };

		rc = ref_run(&m, &r);
	} else {
		rc = run_engine(&m, &o);
	}
	model_free(&m);
	return rc;
}
