/*
 * bench/gpu/check: runs kspec's cuda artifacts on a real GPU.
 *
 * Every gemm variant (general, gemv_m1, small_m, blocked) x dtype (f32,
 * f16, bf16) is specialized and compiled by the cuda backend itself
 * (NVRTC, linked in from the sources, for the device's own sm_XX), as PTX
 * and as cubin, loaded with the CUDA driver API (libcuda.so.1 through
 * dlopen, never linked), run on random data, and compared bit for bit
 * with the canonical reference of ref/ref.h; then each variant with W in
 * q8_0, q4_0 and q4_k (dtype f32), against the reference gemm of the
 * weights decoded by ref/ref_quant.h, and gemm's fast mode (x in q8_0
 * blocks) for each format against ref/ref_fast.h.  Then every other
 * kernel of
 * the library, each variant at small shapes with constant and dynamic
 * dims (cases.h), as cubin, against the plain-C references of
 * ref/kernels.h, bit for bit: kspec's exp is the same sequence of IEEE f32
 * operations on every backend, so kernels with exp are checked bitwise
 * too.
 *
 * Timing, with CUDA events (5 warm-up launches, 50 timed, median and
 * 10th/90th percentiles): the decode GEMV (gemv_m1; f32 and bf16; N=14336
 * K=4096 and N=57344 K=8192), rotating through copies of W of at least 1
 * GiB together (never in the L2), checked bitwise and timed beside a
 * device-to-device copy of W, cuBLAS and a Triton GEMV
 * (bench/gpu/gemv_ref.py, same shapes and rotation), then the same kernel
 * text with its k loop unrolled 2, 8 and 16 times instead of 4 (schedule
 * trials for the emitter, checked bitwise as well); then the decode set
 * of an 8B-class model (GEMVs, rmsnorm, rope, silu_mul, attention over
 * 2048 and 8192 positions, bf16) beside PyTorch
 * (bench/gpu/torch_ref.py), each also with every loop unrolled 4 times
 * (a schedule trial, timed only).  The
 * references' figures come from the file $KSPEC_TORCH_REF, written by
 * run.sh in the same run when torch and Triton are installed.
 *
 * One table on stdout.  Exit status: 0 all checks pass; 1 a mismatch or
 * an error; 2 no CUDA device (no driver or no GPU: the check is skipped).
 * Built and run by bench/gpu/run.sh; needs only gcc and the CUDA headers.
 */
#include <cuda.h>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../jit/jit.h"
#include "../../ref/ref.h"
#include "../../ref/layout.h"
#include "../../ref/ref_fast.h"
#include "cases.h"
#include "../../ref/kernels.h"

/* ---- the driver API, loaded at run time ---- */

static struct {
	__typeof__(&cuInit) Init;
	__typeof__(&cuDriverGetVersion) DriverGetVersion;
	__typeof__(&cuDeviceGetCount) DeviceGetCount;
	__typeof__(&cuDeviceGet) DeviceGet;
	__typeof__(&cuDeviceGetName) DeviceGetName;
	__typeof__(&cuDeviceGetAttribute) DeviceGetAttribute;
	__typeof__(&cuDevicePrimaryCtxRetain) PrimaryCtxRetain;
	__typeof__(&cuDevicePrimaryCtxRelease) PrimaryCtxRelease;
	__typeof__(&cuCtxSetCurrent) CtxSetCurrent;
	__typeof__(&cuCtxSynchronize) CtxSynchronize;
	__typeof__(&cuModuleLoadData) ModuleLoadData;
	__typeof__(&cuModuleUnload) ModuleUnload;
	__typeof__(&cuModuleGetFunction) ModuleGetFunction;
	__typeof__(&cuMemAlloc) MemAlloc;
	__typeof__(&cuMemFree) MemFree;
	__typeof__(&cuMemcpyHtoD) MemcpyHtoD;
	__typeof__(&cuMemcpyDtoH) MemcpyDtoH;
	__typeof__(&cuMemcpyDtoD) MemcpyDtoD;
	__typeof__(&cuMemsetD8) MemsetD8;
	__typeof__(&cuLaunchKernel) LaunchKernel;
	__typeof__(&cuEventCreate) EventCreate;
	__typeof__(&cuEventRecord) EventRecord;
	__typeof__(&cuEventSynchronize) EventSynchronize;
	__typeof__(&cuEventElapsedTime) EventElapsedTime;
	__typeof__(&cuEventDestroy) EventDestroy;
	__typeof__(&cuGetErrorString) GetErrorString;
} cu;

#define STR_(x) #x
#define STR(x) STR_(x)

/* The versioned name cuda.h maps NAME to ("cuMemAlloc_v2"), else NAME. */
static int load_sym(void *lib, void **slot, const char *versioned,
    const char *plain)
{
	*slot = dlsym(lib, versioned);
	if (*slot == NULL)
		*slot = dlsym(lib, plain);
	if (*slot == NULL)
		fprintf(stderr, "libcuda.so.1 lacks %s\n", versioned);
	return *slot != NULL;
}

#define LOAD(field, fn) load_sym(lib, (void **)&cu.field, STR(fn), #fn)

static int load_driver(char *why, size_t len)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);

	if (lib == NULL) {
		snprintf(why, len, "libcuda.so.1 cannot be loaded (%s)",
		    dlerror());
		return 0;
	}
	if (!(LOAD(Init, cuInit) &&
	    LOAD(DriverGetVersion, cuDriverGetVersion) &&
	    LOAD(DeviceGetCount, cuDeviceGetCount) &&
	    LOAD(DeviceGet, cuDeviceGet) &&
	    LOAD(DeviceGetName, cuDeviceGetName) &&
	    LOAD(DeviceGetAttribute, cuDeviceGetAttribute) &&
	    LOAD(PrimaryCtxRetain, cuDevicePrimaryCtxRetain) &&
	    LOAD(PrimaryCtxRelease, cuDevicePrimaryCtxRelease) &&
	    LOAD(CtxSetCurrent, cuCtxSetCurrent) &&
	    LOAD(CtxSynchronize, cuCtxSynchronize) &&
	    LOAD(ModuleLoadData, cuModuleLoadData) &&
	    LOAD(ModuleUnload, cuModuleUnload) &&
	    LOAD(ModuleGetFunction, cuModuleGetFunction) &&
	    LOAD(MemAlloc, cuMemAlloc) && LOAD(MemFree, cuMemFree) &&
	    LOAD(MemcpyHtoD, cuMemcpyHtoD) && LOAD(MemcpyDtoH, cuMemcpyDtoH) &&
	    LOAD(MemcpyDtoD, cuMemcpyDtoD) && LOAD(MemsetD8, cuMemsetD8) &&
	    LOAD(LaunchKernel, cuLaunchKernel) &&
	    LOAD(EventCreate, cuEventCreate) &&
	    LOAD(EventRecord, cuEventRecord) &&
	    LOAD(EventSynchronize, cuEventSynchronize) &&
	    LOAD(EventElapsedTime, cuEventElapsedTime) &&
	    LOAD(EventDestroy, cuEventDestroy) &&
	    LOAD(GetErrorString, cuGetErrorString))) {
		snprintf(why, len, "libcuda.so.1 is incomplete");
		return 0;
	}
	return 1;
}

static void die_cu(CUresult r, const char *what)
{
	const char *s = NULL;

	if (cu.GetErrorString != NULL)
		cu.GetErrorString(r, &s);
	fprintf(stderr, "check: %s: %s (%d)\n", what, s ? s : "?", (int)r);
	exit(1);
}

#define CU(call) do {                                                       \
		CUresult r_ = (call);                                       \
		if (r_ != CUDA_SUCCESS)                                     \
			die_cu(r_, #call);                                  \
	} while (0)

/* ---- kernels ---- */

/* The IR of DEF's VARIANT (NULL: selected) with dim i constant where bit
 * i of CONSTS is set. */
static ks_ir_kernel_t *kernel_ir(const ks_kernel_def_t *def,
    const char *variant, ks_dtype_t dt, const int64_t *v, unsigned consts)
{
	ks_dim_t dims[KS_MAX_DIMS];
	ks_ir_kernel_t *k = NULL;
	ks_spec_t spec;
	char err[512];
	int i;

	for (i = 0; i < def->ndims; i++)
		dims[i] = (ks_dim_t){ def->dims[i], (consts >> i) & 1, v[i] };
	if (ks_kernel_validate(def, dt, KS_MODE_EXACT, dims, def->ndims, &spec,
	    err, sizeof err) != KS_OK || ks_specialize_variant(&spec, variant,
	    &k, err, sizeof err) != KS_OK) {
		fprintf(stderr, "check: %s %s: %s\n", def->name, variant ?
		    variant : "(selected)", err);
		exit(1);
	}
	return k;
}

/* The specialized gemm IR of VARIANT (NULL: the library's choice); a dim
 * of 0 is dynamic. */
static ks_ir_kernel_t *gemm_ir(const char *variant, ks_dtype_t dt,
    int64_t M, int64_t N, int64_t K)
{
	const int64_t v[3] = { M, N, K };

	return kernel_ir(&ks_kernel_gemm, variant, dt, v, (M != 0) |
	    (N != 0) << 1 | (K != 0) << 2);
}

/* The grid; VALS[p] is the value of scalar parameter p. */
static int64_t grid_of(const ks_ir_kernel_t *k, const int64_t *vals)
{
	int64_t g;

	if (ks_ir_eval_launch(k, k->grid, vals, &g) != KS_OK) {
		fprintf(stderr, "check: %s.%s: grid not evaluable\n", k->name,
		    k->variant);
		exit(1);
	}
	return g;
}

typedef struct {
	CUmodule mod;
	CUfunction fn;
	ks_jit_artifact_t art;
} loaded_t;

/* Loads l->art (PTX or cubin) as a module and finds K's entry in it; a
 * load error is returned and the artifact freed. */
static CUresult load_art(const ks_ir_kernel_t *k, loaded_t *l)
{
	uint8_t *image;
	CUresult r;

	/* PTX artifacts are text without a NUL; the driver wants one. */
	image = malloc(l->art.len + 1);
	memcpy(image, l->art.bytes, l->art.len);
	image[l->art.len] = 0;
	r = cu.ModuleLoadData(&l->mod, image);
	free(image);
	if (r != CUDA_SUCCESS) {
		free(l->art.bytes);
		return r;
	}
	CU(cu.ModuleGetFunction(&l->fn, l->mod, k->entry));
	return CUDA_SUCCESS;
}

/* Compiles K and loads it; a load error (e.g. a driver older than the
 * PTX or cubin NVRTC makes) is returned, to be reported in the table. */
static CUresult load_kernel(const ks_ir_kernel_t *k, const char *target,
    const char *format, loaded_t *l)
{
	char err[8192];

	if (ks_backend_cuda.compile(k, target, format, &l->art, err,
	    sizeof err) != KS_OK) {
		fprintf(stderr, "check: compile %s %s %s: %s\n", k->entry,
		    target, format, err);
		exit(1);
	}
	return load_art(k, l);
}

static const char *cu_error(CUresult r)
{
	const char *s = NULL;

	cu.GetErrorString(r, &s);
	return s ? s : "unknown CUDA error";
}

static void unload_kernel(loaded_t *l)
{
	CU(cu.ModuleUnload(l->mod));
	free(l->art.bytes);
}

/* Launches K (function FN) on device buffers x, W, y with DIMS. */
static void launch(const ks_ir_kernel_t *k, CUfunction fn, CUdeviceptr *x,
    CUdeviceptr *w, CUdeviceptr *y, int64_t *dims)
{
	void *params[8];
	int64_t vals[6] = { 0, 0, 0, dims[0], dims[1], dims[2] };
	int i, n = 0;

	for (i = 0; i < k->nparams; i++) {
		const ks_ir_param_t *p = &k->params[i];

		if (p->kind == KS_PARAM_BUFFER)
			params[n++] = strcmp(p->name, "x") == 0 ? (void *)x :
			    strcmp(p->name, "W") == 0 ? (void *)w : (void *)y;
		else if (!p->bound)
			params[n++] = &dims[i - 3];
	}
	CU(cu.LaunchKernel(fn, (unsigned)grid_of(k, vals), 1, 1,
	    (unsigned)k->nlanes, 1, 1, 0, NULL, params, NULL));
}

/* ---- the table ---- */

static int mismatches;

static void row(const char *what, const char *format, const char *result,
    double us, double gbs)
{
	char t[32] = "-", g[32] = "-";

	if (us > 0) {
		snprintf(t, sizeof t, "%.2f", us);
		snprintf(g, sizeof g, "%.1f", gbs);
	}
	printf("%-46s %-6s %-36s %10s %9s\n", what, format, result, t, g);
}

/* Runs gemm K (WHAT names it) on host x, w into y, as PTX and as cubin,
 * each compared with WANT element by element (ES bytes each); one row of
 * the report per format. */
static void run_formats(const ks_ir_kernel_t *k, const char *target,
    const char *what, const void *x, size_t xb, const void *w, size_t wb,
    void *y, const void *want, size_t yb, size_t es, int64_t *dims)
{
	static const char *const formats[] = { "ptx", "cubin" };
	CUdeviceptr dx, dw, dy;
	char result[80];
	int64_t i, n = (int64_t)(yb / es);
	int f;

	CU(cu.MemAlloc(&dx, xb));
	CU(cu.MemAlloc(&dw, wb));
	CU(cu.MemAlloc(&dy, yb));
	CU(cu.MemcpyHtoD(dx, x, xb));
	CU(cu.MemcpyHtoD(dw, w, wb));
	for (f = 0; f < 2; f++) {
		loaded_t l;
		int64_t bad = 0;
		CUresult r = load_kernel(k, target, formats[f], &l);

		if (r != CUDA_SUCCESS) {
			snprintf(result, sizeof result, "LOAD: %.52s",
			    cu_error(r));
			mismatches++;
			row(what, formats[f], result, 0, 0);
			continue;
		}
		CU(cu.MemsetD8(dy, 0xff, yb));  /* NaN, never a result */
		launch(k, l.fn, &dx, &dw, &dy, dims);
		CU(cu.CtxSynchronize());
		CU(cu.MemcpyDtoH(y, dy, yb));
		for (i = 0; i < n; i++)
			bad += memcmp((char *)y + i * es, (const char *)want +
			    i * es, es) != 0;
		if (bad == 0)
			snprintf(result, sizeof result, "bitwise ok");
		else
			snprintf(result, sizeof result, "MISMATCH %lld/%lld",
			    (long long)bad, (long long)n);
		mismatches += bad != 0;
		row(what, formats[f], result, 0, 0);
		unload_kernel(&l);
	}
	CU(cu.MemFree(dx));
	CU(cu.MemFree(dw));
	CU(cu.MemFree(dy));
}

/* One correctness case: VARIANT at (M, N, K), dims constant where CONSTS
 * says (bit 0 M, 1 N, 2 K), as PTX and as cubin. */
static void check_case(const char *target, const char *variant,
    ks_dtype_t dt, int64_t M, int64_t N, int64_t K, int consts)
{
	size_t es = ks_dtype_size(dt);
	size_t xb = es * (size_t)(M * K), wb = es * (size_t)(N * K);
	size_t yb = es * (size_t)(M * N);
	void *x = malloc(xb), *w = malloc(wb), *y = malloc(yb);
	void *want = malloc(yb);
	int64_t dims[3] = { M, N, K };
	ks_ir_kernel_t *k;
	char what[128];

	k = gemm_ir(variant, dt, consts & 1 ? M : 0, consts & 2 ? N : 0,
	    consts & 4 ? K : 0);
	ref_fill(x, (int)dt, M * K, (uint64_t)(M * 131 + N * 7 + K));
	ref_fill(w, (int)dt, N * K, (uint64_t)(M * 131 + N * 7 + K) + 1);
	ref_gemm(x, w, want, (int)dt, M, N, K);
	snprintf(what, sizeof what, "%s %s M=%lld N=%lld K=%lld%s",
	    k->variant, ks_dtype_name(dt), (long long)M, (long long)N,
	    (long long)K, consts == 7 ? "" : " (dyn)");
	run_formats(k, target, what, x, xb, w, wb, y, want, yb, es, dims);
	ks_ir_free(k);
	free(x);
	free(w);
	free(y);
	free(want);
}

/* N bytes of blocks of ref_quant.h's format RF (q8_0 for x) at P from
 * the generator S: random bytes (every code), then each block's f16
 * scale (q4_k's dmin too) given an exponent field in 5..20 (4..16):
 * finite scales over many binades. */
static void fill_blocks(uint8_t *p, size_t n, int rf, uint64_t *s)
{
	int64_t bb = ref_qblock_bytes(rf), i;

	for (i = 0; i < (int64_t)n; i++) {
		*s = *s * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (uint8_t)(*s >> 56);
	}
	for (i = 0; i < (int64_t)n / bb; i++) {
		p[i * bb + 1] = (uint8_t)((p[i * bb + 1] & 0x83) |
		    (5 + i % 16) << 2);
		if (rf == REF_Q4_K)
			p[i * bb + 3] = (uint8_t)((p[i * bb + 3] & 0x83) |
			    (4 + i % 13) << 2);
	}
}

/* One quantized case: gemm's VARIANT with W in block format FMT (dtype
 * f32, every dim constant), against the reference gemm of the weights
 * decoded by ref/ref_quant.h. */
static void check_quant_case(const char *target, const char *variant,
    ks_dtype_t fmt, int64_t M, int64_t N, int64_t K)
{
	const int64_t v[3] = { M, N, K };
	int rf = fmt == KS_DTYPE_Q8_0 ? REF_Q8_0 : fmt == KS_DTYPE_Q4_0 ?
	    REF_Q4_0 : REF_Q4_K;
	int64_t i, dims[3] = { M, N, K };
	size_t xb = 4 * (size_t)(M * K), wb = (size_t)(N *
	    ref_qrow_bytes(rf, K)), yb = 4 * (size_t)(M * N);
	float *x = malloc(xb), *wf = malloc(4 * (size_t)(N * K));
	float *y = malloc(yb), *want = malloc(yb);
	uint8_t *w = malloc(wb);
	uint64_t s = (uint64_t)(M * 131 + N * 7 + K);
	ks_dim_t d3[3];
	ks_spec_t spec;
	ks_ir_kernel_t *k = NULL;
	char what[128], err[512];

	for (i = 0; i < 3; i++)
		d3[i] = (ks_dim_t){ ks_kernel_gemm.dims[i], 1, v[i] };
	if (ks_kernel_validate_mixed(&ks_kernel_gemm, KS_DTYPE_F32, fmt,
	    KS_MODE_EXACT, d3, 3, &spec, err, sizeof err) != KS_OK ||
	    ks_specialize_variant(&spec, variant, &k, err, sizeof err) !=
	    KS_OK) {
		fprintf(stderr, "check: gemm %s %s: %s\n", variant,
		    ks_dtype_name(fmt), err);
		exit(1);
	}
	ref_fill(x, (int)KS_DTYPE_F32, M * K, s);
	fill_blocks(w, wb, rf, &s);
	ref_dequant_rows(rf, w, N, K, wf);
	ref_gemm(x, wf, want, (int)KS_DTYPE_F32, M, N, K);
	snprintf(what, sizeof what, "%s f32/%s M=%lld N=%lld K=%lld",
	    k->variant, ks_dtype_name(fmt), (long long)M, (long long)N,
	    (long long)K);
	run_formats(k, target, what, x, xb, w, wb, y, want, yb, 4, dims);
	ks_ir_free(k);
	free(x);
	free(wf);
	free(w);
	free(y);
	free(want);
}

/* One case of gemm's fast mode: W in block format FMT, x in q8_0 blocks
 * (random bytes: every code, finite scales), every dim constant, against
 * ref/ref_fast.h. */
static void check_fast_case(const char *target, ks_dtype_t fmt, int64_t M,
    int64_t N, int64_t K)
{
	const int64_t v[3] = { M, N, K };
	int rf = fmt == KS_DTYPE_Q8_0 ? REF_Q8_0 : fmt == KS_DTYPE_Q4_0 ?
	    REF_Q4_0 : REF_Q4_K;
	int64_t i, dims[3] = { M, N, K };
	size_t xb = (size_t)(M * ref_qrow_bytes(REF_Q8_0, K)), wb = (size_t)(N *
	    ref_qrow_bytes(rf, K)), yb = 4 * (size_t)(M * N);
	uint8_t *x = malloc(xb), *w = malloc(wb);
	float *y = malloc(yb), *want = malloc(yb);
	uint64_t s = (uint64_t)(M * 191 + N * 5 + K);
	ks_dim_t d3[3];
	ks_spec_t spec;
	ks_ir_kernel_t *k = NULL;
	char what[128], err[512];

	for (i = 0; i < 3; i++)
		d3[i] = (ks_dim_t){ ks_kernel_gemm.dims[i], 1, v[i] };
	if (ks_kernel_validate_mixed(&ks_kernel_gemm, KS_DTYPE_F32, fmt,
	    KS_MODE_FAST, d3, 3, &spec, err, sizeof err) != KS_OK ||
	    ks_specialize(&spec, &k, err, sizeof err) != KS_OK) {
		fprintf(stderr, "check: gemm fast %s: %s\n",
		    ks_dtype_name(fmt), err);
		exit(1);
	}
	fill_blocks(x, xb, REF_Q8_0, &s);
	fill_blocks(w, wb, rf, &s);
	ref_gemm_fast(rf, x, w, want, M, N, K);
	snprintf(what, sizeof what, "fast q8_0/%s M=%lld N=%lld K=%lld",
	    ks_dtype_name(fmt), (long long)M, (long long)N, (long long)K);
	run_formats(k, target, what, x, xb, w, wb, y, want, yb, 4, dims);
	ks_ir_free(k);
	free(x);
	free(w);
	free(y);
	free(want);
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return x < y ? -1 : x > y;
}

enum { WARMUP = 5, RUNS = 50, NW_MAX = 32 };

/* Times WARMUP then RUNS calls of ONE(CTX, i), each between two events;
 * returns the median in microseconds and the 10th and 90th
 * percentiles. */
static double time_events(void (*one)(void *ctx, int i), void *ctx,
    double *p10, double *p90)
{
	float ms[RUNS];
	CUevent a, b;
	int i;

	CU(cu.EventCreate(&a, CU_EVENT_DEFAULT));
	CU(cu.EventCreate(&b, CU_EVENT_DEFAULT));
	for (i = -WARMUP; i < RUNS; i++) {
		CU(cu.EventRecord(a, NULL));
		one(ctx, i + WARMUP);
		CU(cu.EventRecord(b, NULL));
		CU(cu.EventSynchronize(b));
		if (i >= 0)
			CU(cu.EventElapsedTime(&ms[i], a, b));
	}
	CU(cu.EventDestroy(a));
	CU(cu.EventDestroy(b));
	qsort(ms, RUNS, sizeof ms[0], cmp_float);
	*p10 = ms[RUNS / 10] * 1e3;
	*p90 = ms[RUNS - 1 - RUNS / 10] * 1e3;
	return ms[RUNS / 2] * 1e3;
}

/* `TOOL NAME MEDIAN P10 P90` lines (bench/gpu/torch_ref.py,
 * gemv_ref.py), from the file $KSPEC_TORCH_REF: NAME's median for TOOL
 * ("torch", "cublas", "triton"); 0 when absent. */
static double ref_us(const char *tool, const char *name)
{
	const char *path = getenv("KSPEC_TORCH_REF");
	char line[256], t[16], n[64];
	double med, result = 0;
	FILE *f;

	if (path == NULL || (f = fopen(path, "r")) == NULL)
		return 0;
	while (fgets(line, sizeof line, f) != NULL)
		if (sscanf(line, "%15s %63s %lf", t, n, &med) == 3 &&
		    strcmp(t, tool) == 0 && strcmp(n, name) == 0)
			result = med;
	fclose(f);
	return result;
}

/* One decode GEMV launch (or copy, when COPY) on the I-th of the NW
 * copies of W. */
typedef struct {
	const ks_ir_kernel_t *k;
	CUfunction fn;
	CUdeviceptr dx, *dw, dy, dcopy;
	size_t wb;
	int64_t *dims;
	int nw, copy;
} gemv_run_t;

static void gemv_once(void *ctx, int i)
{
	gemv_run_t *g = ctx;
	CUdeviceptr w = g->dw[i % g->nw];

	if (g->copy)
		CU(cu.MemcpyDtoD(g->dcopy, w, g->wb));
	else
		launch(g->k, g->fn, &g->dx, &w, &g->dy, g->dims);
}

/* Compiles the CUDA C text SRC of K's entry and loads it, as
 * load_kernel does with the text the backend emits. */
static CUresult load_text(const ks_ir_kernel_t *k, const char *src,
    const char *target, loaded_t *l)
{
	char err[8192];
	CUresult r;

	if (ks_jit_cuda_compile_text(src, "schedule.cu", target, "cubin",
	    &l->art, err, sizeof err) != KS_OK) {
		printf("check: compile %s (edited): %.300s\n", k->entry, err);
		return CUDA_ERROR_INVALID_SOURCE;
	}
	r = load_art(k, l);
	if (r != CUDA_SUCCESS)
		printf("check: load %s (edited): %s\n", k->entry, cu_error(r));
	return r;
}

/*
 * K's emitted CUDA C with its loops' unroll hints replaced, in *OUT
 * (free it): every `#pragma unroll` line dropped, and `#pragma unroll U`
 * put before each loop over v_k0 (the gemm k loop), or with ALL before
 * every loop.  0 when no loop was hinted or the text came out as the
 * emitter gave it.  The pragma changes the schedule only: each lane still
 * adds its products in the same order.
 */
static int with_unroll(const ks_ir_kernel_t *k, int u, int all, char **out)
{
	char err[512];
	const char *p, *eol, *t;
	ks_buf_t src, o;
	int hinted = 0;

	ks_buf_init(&src);
	ks_buf_init(&o);
	if (ks_backend_cuda.source(k, &src, err, sizeof err) != KS_OK) {
		ks_buf_close(&src);
		return 0;
	}
	for (p = src.data; *p != '\0'; p = eol) {
		eol = strchr(p, '\n');
		eol = eol ? eol + 1 : p + strlen(p);
		for (t = p; *t == '\t'; t++)
			;
		if (strncmp(t, "#pragma unroll", 14) == 0)
			continue;
		if (strncmp(t, all ? "for (ks_i64 v_" : "for (ks_i64 v_k0 = ",
		    all ? 14 : 19) == 0) {
			ks_buf_printf(&o, "%.*s#pragma unroll %d\n",
			    (int)(t - p), p, u);     /* the loop's indent */
			hinted = 1;
		}
		ks_buf_printf(&o, "%.*s", (int)(eol - p), p);
	}
	/* Nothing to try when the text is what the emitter gave. */
	if (hinted && o.len == src.len && memcmp(o.data, src.data, o.len) == 0)
		hinted = 0;
	ks_buf_close(&src);
	*out = o.data;
	if (!hinted) {
		ks_buf_close(&o);
		*out = NULL;
	}
	return hinted;
}

/*
 * The decode GEMV: the selected variant (gemv_m1) at N x K in DT,
 * checked bit for bit against ref_gemm, timed while rotating through
 * copies of W (together at least 1 GiB, so W is never in L2), beside a
 * device-to-device copy of W and beside cuBLAS and Triton
 * (bench/gpu/gemv_ref.py, the same shapes and rotation).  Then, as
 * measurements of schedules for the cuda emitter, the same kernel text
 * with its k loop's unroll hint (4, k_gemm.c) replaced by each factor of
 * UNROLLS (0 ends the list).
 */
static void time_gemv(const char *target, ks_dtype_t dt, int64_t N,
    int64_t K, const int *unrolls)
{
	size_t es = ks_dtype_size(dt);
	size_t xb = es * (size_t)K, wb = es * (size_t)(N * K);
	size_t yb = es * (size_t)N, bytes = xb + wb + yb;
	void *x = malloc(xb), *w = malloc(wb), *y = malloc(yb);
	void *want = malloc(yb);
	int64_t dims[3] = { 1, N, K };
	CUdeviceptr dx, dw[NW_MAX], dy, dcopy;
	ks_ir_kernel_t *k = gemm_ir(NULL, dt, 1, N, K);
	int nw = (int)((((size_t)1 << 30) + wb - 1) / wb);
	double us, p10, p90, copy_gbs, cublas, triton;
	char what[128], result[128], name[64];
	gemv_run_t g;
	int j, u;

	nw = nw < 2 ? 2 : nw > NW_MAX ? NW_MAX : nw;
	ref_fill(x, (int)dt, K, 1);
	ref_fill(w, (int)dt, N * K, 2);
	ref_gemm(x, w, want, (int)dt, 1, N, K);
	CU(cu.MemAlloc(&dx, xb));
	CU(cu.MemAlloc(&dy, yb));
	CU(cu.MemAlloc(&dcopy, wb));
	CU(cu.MemcpyHtoD(dx, x, xb));
	for (j = 0; j < nw; j++) {
		CU(cu.MemAlloc(&dw[j], wb));
		if (j == 0)
			CU(cu.MemcpyHtoD(dw[0], w, wb));
		else
			CU(cu.MemcpyDtoD(dw[j], dw[0], wb));
	}
	g = (gemv_run_t){ k, NULL, dx, dw, dy, dcopy, wb, dims, nw, 1 };
	us = time_events(gemv_once, &g, &p10, &p90);
	copy_gbs = 2.0 * (double)wb / (us * 1e3);
	snprintf(what, sizeof what, "cuMemcpyDtoD %zu MiB (read + write)",
	    wb >> 20);
	snprintf(result, sizeof result, "p10/90 %.1f/%.1f, %d copies of W",
	    p10, p90, nw);
	row(what, "-", result, us, copy_gbs);

	snprintf(name, sizeof name, "gemv_%s_%lldx%lld", ks_dtype_name(dt),
	    (long long)N, (long long)K);
	cublas = ref_us("cublas", name);
	triton = ref_us("triton", name);
	for (u = -1; u < 0 || unrolls[u] != 0; u++) {
		char *src = NULL;
		loaded_t l;
		int64_t i, bad = 0;

		if (u >= 0 && !with_unroll(k, unrolls[u], 0, &src))
			break;
		if (src != NULL && load_text(k, src, target, &l) !=
		    CUDA_SUCCESS) {
			snprintf(what, sizeof what, "  same, k loop unrolled "
			    "x%d (trial)", unrolls[u]);
			row(what, "cubin", "not built (said above)", 0, 0);
			free(src);
			continue;
		}
		if (src == NULL)
			CU(load_kernel(k, target, "cubin", &l));
		free(src);
		g.fn = l.fn;
		g.copy = 0;
		CU(cu.MemsetD8(dy, 0xff, yb));
		us = time_events(gemv_once, &g, &p10, &p90);
		CU(cu.MemcpyDtoH(y, dy, yb));
		for (i = 0; i < N * (int64_t)es; i++)
			bad += ((uint8_t *)y)[i] != ((uint8_t *)want)[i];
		mismatches += bad != 0;
		if (u < 0)
			snprintf(what, sizeof what, "%s %s N=%lld K=%lld",
			    k->variant, ks_dtype_name(dt), (long long)N,
			    (long long)K);
		else
			snprintf(what, sizeof what, "  same, k loop unrolled "
			    "x%d (trial)", unrolls[u]);
		snprintf(result, sizeof result, "%s %.2f of copy",
		    bad ? "MISMATCH" : "bitwise ok",
		    (double)bytes / (us * 1e3) / copy_gbs);
		if (cublas > 0)
			snprintf(result + strlen(result), sizeof result -
			    strlen(result), ", cuBLAS %.2fx", cublas / us);
		if (triton > 0)
			snprintf(result + strlen(result), sizeof result -
			    strlen(result), ", Triton %.2fx", triton / us);
		row(what, "cubin", result, us, (double)bytes / (us * 1e3));
		unload_kernel(&l);
	}
	if (cublas > 0)
		row("  cuBLAS (PyTorch F.linear, same rotation)", "-", "",
		    cublas, (double)bytes / (cublas * 1e3));
	if (triton > 0)
		row("  Triton GEMV (bench/gpu/gemv_ref.py)", "-", "", triton,
		    (double)bytes / (triton * 1e3));
	for (j = 0; j < nw; j++)
		CU(cu.MemFree(dw[j]));
	CU(cu.MemFree(dx));
	CU(cu.MemFree(dy));
	CU(cu.MemFree(dcopy));
	ks_ir_free(k);
	free(x);
	free(w);
	free(y);
	free(want);
}

/* ---- every library kernel ---- */

/* Whether K calls exp (its rows say so: exp is checked bitwise too). */
static ks_expr_t *find_exp(void *ctx, ks_ir_kernel_t *k, ks_expr_t *e,
    int in_lanes)
{
	(void)k;
	(void)in_lanes;
	if (e->kind == KS_X_UN && e->un == KS_UN_EXP)
		*(int *)ctx = 1;
	return e;
}

static int uses_exp(ks_ir_kernel_t *k)
{
	int found = 0;
	ks_ir_visitor_t v = { &found, find_exp, NULL };

	ks_ir_walk(k, &v);
	return found;
}

/* Device copies of a case's buffers and its launch arguments. */
typedef struct {
	const ks_kernel_def_t *def;
	ks_ir_kernel_t *k;
	buf_t b[LAY_MAXB];
	int nb;
	CUdeviceptr dev[LAY_MAXB];
	size_t bytes[LAY_MAXB];
	void *params[16];
	CUdeviceptr ptr[16];
	int64_t i64[16];
	float f32[16];
	unsigned grid;
	CUfunction fn;          /* for kcase_once */
} kcase_t;

static void kcase_bind(kcase_t *c, const int64_t *v)
{
	int i, j, n = 0;

	for (i = 0; i < c->k->nparams; i++) {
		const ks_ir_param_t *p = &c->k->params[i];

		if (p->kind == KS_PARAM_BUFFER) {
			for (j = 0; j < c->nb; j++)
				if (strcmp(c->b[j].name, p->name) == 0)
					c->ptr[i] = c->dev[j];
			c->params[n++] = &c->ptr[i];
		} else if (p->bound) {
			continue;
		} else if (p->type == KS_TY_F32) {
			c->f32[i] = strcmp(p->name, "scale") == 0 ?
			    1.0f / sqrtf((float)dim(c->def, v, "D")) : 1e-5f;
			c->params[n++] = &c->f32[i];
		} else {
			c->i64[i] = dim(c->def, v, p->name);
			c->params[n++] = &c->i64[i];
		}
	}
	c->grid = (unsigned)grid_of(c->k, c->i64);
}

static void kcase_launch(kcase_t *c, CUfunction fn)
{
	if (c->grid > 0)
		CU(cu.LaunchKernel(fn, c->grid, 1, 1, (unsigned)c->k->nlanes,
		    1, 1, 0, NULL, c->params, NULL));
}

/* Distance of A from B in units of the dtype's last place (0 when the
 * bits are equal; large across a sign change or a NaN). */
static double ulps(const void *a, const void *b, ks_dtype_t dt, int64_t i)
{
	double x = ref_load(a, (int)dt, i), y = ref_load(b, (int)dt, i);
	int e;

	if (memcmp((const char *)a + i * (int64_t)ks_dtype_size(dt),
	    (const char *)b + i * (int64_t)ks_dtype_size(dt),
	    ks_dtype_size(dt)) == 0)
		return 0;
	if (x != x || y != y)
		return 1e30;
	frexp(y, &e);
	return fabs(x - y) / ldexp(1.0, e - (dt == KS_DTYPE_F32 ? 24 :
	    dt == KS_DTYPE_F16 ? 11 : 8));
}

/*
 * One case: DEF's VARIANT at dims V (constant where CONSTS), as cubin, on
 * small random data, against the plain-C reference of ref/kernels.h, bit
 * for bit; kernels with exp too (kspec's exp is one sequence of IEEE f32
 * operations on every backend, ref_expf), their rows saying "(exp)".  A
 * mismatch gives the largest distance in ulps.
 */
static void check_kernel(const char *target, const char *kernel,
    const char *variant, ks_dtype_t dt, const int64_t *v, unsigned consts)
{
	size_t es = ks_dtype_size(dt);
	void *want[LAY_MAXB] = { 0 };
	char what[160], result[80], dims[96];
	kcase_t c;
	loaded_t l;
	double worst = 0;
	int64_t bad = 0, total = 0, e;
	int i, o = 0, exp_used;
	CUresult r;

	memset(&c, 0, sizeof c);
	c.def = ks_kernel_find(kernel);
	if (c.def == NULL) {
		printf("check: %s is not in the library\n", kernel);
		mismatches++;
		return;
	}
	c.k = kernel_ir(c.def, variant, dt, v, consts);
	exp_used = uses_exp(c.k);
	c.nb = layout(c.def, v, c.b);
	lay_fill(c.def, v, c.b, c.nb, dt, 7);
	for (i = 0; i < c.nb; i++) {
		c.bytes[i] = lay_bytes(&c.b[i], es);
		CU(cu.MemAlloc(&c.dev[i], c.bytes[i] ? c.bytes[i] : 1));
		if (c.b[i].written)
			CU(cu.MemsetD8(c.dev[i], 0xff, c.bytes[i]));
		if (strcmp(c.b[i].name, "y") && strcmp(c.b[i].name, "o"))
			CU(cu.MemcpyHtoD(c.dev[i], c.b[i].data, c.bytes[i]));
	}
	kcase_bind(&c, v);
	ref_kernel(c.def, dt, v, c.b, c.nb);  /* in place on the host */
	for (i = 0; i < c.def->ndims; i++)
		o += snprintf(dims + o, sizeof dims - (size_t)o, "%s%s=%lld%s",
		    i ? "," : "", c.def->dims[i], (long long)v[i],
		    (consts >> i) & 1 ? "" : "*");
	snprintf(what, sizeof what, "%s.%s %s %s", kernel, c.k->variant,
	    ks_dtype_name(dt), dims);
	r = load_kernel(c.k, target, "cubin", &l);
	if (r != CUDA_SUCCESS) {
		snprintf(result, sizeof result, "LOAD: %.52s", cu_error(r));
		mismatches++;
		row(what, "cubin", result, 0, 0);
	} else {
		kcase_launch(&c, l.fn);
		CU(cu.CtxSynchronize());
		for (i = 0; i < c.nb; i++) {
			if (!c.b[i].written)
				continue;
			want[i] = malloc(c.bytes[i]);
			CU(cu.MemcpyDtoH(want[i], c.dev[i], c.bytes[i]));
			for (e = 0; e < c.b[i].elems; e++) {
				double u = ulps(want[i], c.b[i].data,
				    lay_cmp_dtype(&c.b[i], dt), e);

				bad += u != 0;
				worst = u > worst ? u : worst;
				total++;
			}
			free(want[i]);
		}
		if (bad == 0)
			snprintf(result, sizeof result, "bitwise ok%s",
			    exp_used ? " (exp)" : "");
		else
			snprintf(result, sizeof result, "MISMATCH %lld/%lld, "
			    "<= %.3g ulp%s", (long long)bad, (long long)total,
			    worst, exp_used ? " (exp)" : "");
		mismatches += bad != 0;
		row(what, "cubin", result, 0, 0);
		unload_kernel(&l);
	}
	for (i = 0; i < c.nb; i++) {
		CU(cu.MemFree(c.dev[i]));
		free(c.b[i].data);
	}
	ks_ir_free(c.k);
}

/* ---- the decode set, timed beside PyTorch ---- */

static void kcase_once(void *ctx, int i)
{
	kcase_t *c = ctx;

	(void)i;
	kcase_launch(c, c->fn);
}

/* Times the selected variant of KERNEL at the all-constant decode shape V
 * (bf16) with CUDA events, WARMUP then RUNS launches; prints it beside
 * PyTorch's figure for TORCH_NAME. */
static void time_kernel(const char *target, const char *kernel,
    const char *torch_name, const int64_t *v)
{
	kcase_t c;
	loaded_t l;
	double bytes, us, ref, p10, p90;
	char what[160], result[96], *src = NULL;
	int i;

	memset(&c, 0, sizeof c);
	c.def = ks_kernel_find(kernel);
	if (c.def == NULL)
		return;
	c.k = kernel_ir(c.def, NULL, KS_DTYPE_BF16, v, ~0u);
	c.nb = layout(c.def, v, c.b);
	lay_fill(c.def, v, c.b, c.nb, KS_DTYPE_BF16, 3);
	for (i = 0; i < c.nb; i++) {
		c.bytes[i] = lay_bytes(&c.b[i], 2);
		CU(cu.MemAlloc(&c.dev[i], c.bytes[i]));
		CU(cu.MemcpyHtoD(c.dev[i], c.b[i].data, c.bytes[i]));
	}
	kcase_bind(&c, v);
	CU(load_kernel(c.k, target, "cubin", &l));
	c.fn = l.fn;
	us = time_events(kcase_once, &c, &p10, &p90);
	bytes = moved(c.def, v, c.b, c.nb, 2);
	ref = ref_us("torch", torch_name);
	snprintf(what, sizeof what, "%s.%s bf16 (%s)", kernel, c.k->variant,
	    torch_name);
	if (ref > 0)
		snprintf(result, sizeof result, "p10/90 %.1f/%.1f torch %.2f: "
		    "%.2fx", p10, p90, ref, ref / us);
	else
		snprintf(result, sizeof result, "p10/90 %.1f/%.1f, no torch",
		    p10, p90);
	row(what, "cubin", result, us, bytes / (us * 1e3));
	unload_kernel(&l);
	/* A schedule trial for the emitter: every loop unrolled 4 times. */
	if (with_unroll(c.k, 4, 1, &src) &&
	    load_text(c.k, src, target, &l) == CUDA_SUCCESS) {
		c.fn = l.fn;
		us = time_events(kcase_once, &c, &p10, &p90);
		snprintf(result, sizeof result, "p10/90 %.1f/%.1f", p10, p90);
		row("  same, every loop unrolled x4 (trial)", "cubin", result,
		    us, bytes / (us * 1e3));
		unload_kernel(&l);
	} else if (src != NULL) {
		row("  same, every loop unrolled x4 (trial)", "cubin",
		    "not built (said above)", 0, 0);
	}
	free(src);
	for (i = 0; i < c.nb; i++) {
		CU(cu.MemFree(c.dev[i]));
		free(c.b[i].data);
	}
	ks_ir_free(c.k);
}

/* The decode set of an 8B-class model, bf16, timed beside PyTorch. */
static const struct {
	const char *kernel, *torch;
	int64_t dims[KS_MAX_DIMS];
} decode_set[] = {
	{ "gemm", "gemv", { 1, 4096, 4096 } },
	{ "gemm", "gemv_down", { 1, 4096, 14336 } },
	{ "rmsnorm", "rmsnorm", { 1, 4096 } },
	{ "rope", "rope", { 1, 32, 128, 8192 } },
	{ "silu_mul", "silu_mul", { 1, 14336 } },
	{ "attention_decode", "attention_2048", { 1, 32, 8, 128, 2048 } },
	{ "attention_decode", "attention_8192", { 1, 32, 8, 128, 8192 } },
};

/* The decode GEMVs timed beside cuBLAS and Triton (gemv_ref.py's
 * SHAPES), and the unroll factors tried on their k loop. */
static const struct {
	ks_dtype_t dt;
	int64_t N, K;
} gemv_shapes[] = {
	{ KS_DTYPE_F32, 14336, 4096 },
	{ KS_DTYPE_BF16, 14336, 4096 },
	{ KS_DTYPE_F32, 57344, 8192 },
	{ KS_DTYPE_BF16, 57344, 8192 },
};
static const int unroll_trials[] = { 2, 8, 16, 0 };

int main(void)
{
	static const ks_dtype_t dts[] = { KS_DTYPE_F32, KS_DTYPE_F16,
		KS_DTYPE_BF16 };
	char why[512], name[256], target[KS_MAX_NAME], err[1024];
	int count = 0, major = 0, minor = 0, drv = 0, sms = 0;
	ks_buf_t id;
	CUdevice dev;
	CUcontext ctx;
	size_t d, i;

	setvbuf(stdout, NULL, _IOLBF, 0);       /* rows as they come */
	if (!load_driver(why, sizeof why)) {
		printf("no CUDA device: %s\n", why);
		return 2;
	}
	if (cu.Init(0) != CUDA_SUCCESS ||
	    cu.DeviceGetCount(&count) != CUDA_SUCCESS || count < 1) {
		printf("no CUDA device: cuInit or cuDeviceGetCount found "
		    "none\n");
		return 2;
	}
	/* No ks_base_init: it only readies hashing, which the check does
	 * not use (it is built without libsodium). */
	if (ks_backend_cuda.available(err, sizeof err) != KS_OK) {
		fprintf(stderr, "check: the cuda backend is unavailable: %s\n",
		    err);
		return 1;
	}
	CU(cu.DeviceGet(&dev, 0));
	CU(cu.DeviceGetName(name, sizeof name, dev));
	CU(cu.DeviceGetAttribute(&major,
	    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
	CU(cu.DeviceGetAttribute(&minor,
	    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
	CU(cu.DriverGetVersion(&drv));
	CU(cu.DeviceGetAttribute(&sms,
	    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
	snprintf(why, sizeof why, "sm_%d%d", major, minor);
	if (ks_backend_cuda.resolve_target(why, target, sizeof target, err,
	    sizeof err) != KS_OK) {
		fprintf(stderr, "check: %s\n", err);
		return 1;
	}
	ks_buf_init(&id);
	ks_backend_cuda.identity(target, &id);
	printf("device: %s, %s, %d multiprocessors, driver API %d.%d\n"
	    "compiler: %s\n\n", name, target, sms, drv / 1000,
	    drv % 1000 / 10, id.data ? id.data : "?");
	ks_buf_close(&id);
	CU(cu.PrimaryCtxRetain(&ctx, dev));
	CU(cu.CtxSetCurrent(ctx));

	printf("%-46s %-6s %-36s %10s %9s\n", "check", "format", "result",
	    "median us", "GB/s");
	for (d = 0; d < sizeof dts / sizeof dts[0]; d++) {
		/* general: all dynamic, just outside each specialization,
		 * both K tails and N = 1; then all constant. */
		check_case(target, "general", dts[d], 1, 5, 4100, 0);
		check_case(target, "general", dts[d], 2, 7, 64, 0);
		check_case(target, "general", dts[d], 17, 33, 4100, 0);
		check_case(target, "general", dts[d], 3, 1, 31, 0);
		check_case(target, "general", dts[d], 17, 100, 4100, 7);
		check_case(target, "gemv_m1", dts[d], 1, 4096, 4096, 7);
		check_case(target, "gemv_m1", dts[d], 1, 37, 4100, 1);
		check_case(target, "small_m", dts[d], 2, 9, 4100, 1);
		check_case(target, "small_m", dts[d], 3, 33, 100, 1);
		check_case(target, "small_m", dts[d], 3, 4096, 4096, 7);
		check_case(target, "blocked", dts[d], 9, 37, 100, 1);
		check_case(target, "blocked", dts[d], 136, 20, 600, 7);
		/* A full band of macro tiles (136 x 20 above spans more
		 * than one); 512 x 4096 x 4096 took the f16 reference
		 * minutes on the host. */
		check_case(target, "blocked", dts[d], 64, 512, 4096, 7);
	}
	/* Quantized weights (q8_0, q4_0, q4_k), every variant, dtype f32:
	 * the decode shape and the first and last blocks of W (N small). */
	for (d = 0; d < 3; d++) {
		static const ks_dtype_t qf[] = { KS_DTYPE_Q8_0, KS_DTYPE_Q4_0,
			KS_DTYPE_Q4_K };

		check_quant_case(target, "gemv_m1", qf[d], 1, 4096, 4096);
		check_quant_case(target, "gemv_m1", qf[d], 1, 37, 512);
		check_quant_case(target, "general", qf[d], 5, 37, 512);
		check_quant_case(target, "small_m", qf[d], 3, 37, 512);
		check_quant_case(target, "blocked", qf[d], 64, 40, 512);
		/* The fast mode: decode, a partial group of rows, an odd
		 * count of blocks (not q4_k), a few rows. */
		check_fast_case(target, qf[d], 1, 4096, 4096);
		check_fast_case(target, qf[d], 1, 37, d == 2 ? 512 : 800);
		check_fast_case(target, qf[d], 3, 37, 512);
	}
	for (d = 0; d < sizeof dts / sizeof dts[0]; d++)
		for (i = 0; i < sizeof gpu_cases / sizeof gpu_cases[0]; i++)
			check_kernel(target, gpu_cases[i].kernel,
			    gpu_cases[i].variant, dts[d], gpu_cases[i].dims,
			    gpu_cases[i].consts);
	for (i = 0; i < sizeof gemv_shapes / sizeof gemv_shapes[0]; i++)
		time_gemv(target, gemv_shapes[i].dt, gemv_shapes[i].N,
		    gemv_shapes[i].K, unroll_trials);
	for (i = 0; i < sizeof decode_set / sizeof decode_set[0]; i++)
		time_kernel(target, decode_set[i].kernel,
		    decode_set[i].torch, decode_set[i].dims);
	printf("\nGB/s: bytes the launch must move / median time (GEMV: x, W "
	    "and y; copy: read + write).\n* marks a dynamic dim.  torch: "
	    "bench/gpu/torch_ref.py, cuBLAS and Triton: gemv_ref.py, in the "
	    "same run;\nNx = their time / kspec's time.\n");
	CU(cu.PrimaryCtxRelease(dev));
	if (mismatches > 0) {
		printf("%d check(s) MISMATCH\n", mismatches);
		return 1;
	}
	printf("all bitwise equal to ref/ref.h (quantized: ref/ref_quant.h; "
	    "fast mode: ref/ref_fast.h)\n");
	return 0;
}
