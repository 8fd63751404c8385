/*
 * cuda: IR -> CUDA C (emit_c.c) -> NVRTC -> PTX or cubin.
 *
 * NVRTC is loaded with dlopen at run time, never linked, so kspecd builds
 * and runs without CUDA; the backend then reports itself unavailable with
 * the list of what it tried.  Search order (docs/backends.md):
 *
 *   libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so.11.2, .11.1, .11.0 (the
 *   sonames of CUDA 13, 12 and 11, through the dynamic loader's path);
 *   then $KSPEC_NVRTC, a full path; then /usr/local/cuda/lib64/libnvrtc.so.
 *   KSPEC_NVRTC_DISABLE=1 skips everything but $KSPEC_NVRTC (to pin one
 *   library, or with a bogus path to simulate a machine without NVRTC).
 *
 * The library is loaded once per process (pthread_once) and never
 * unloaded.  NVRTC compiles separate programs concurrently, so compile
 * needs no lock; every nvrtcProgram is destroyed on every path.
 *
 * Targets are explicit "sm_XX" (the daemon needs no GPU, so there is
 * nothing to detect: "auto" is an error), checked against the archs this
 * NVRTC supports (nvrtcGetSupportedArchs, or a fixed list for NVRTC before
 * 11.2).  Formats: "ptx" (--gpu-architecture=compute_XX; text, without the
 * trailing NUL that nvrtcGetPTX writes) and "cubin"
 * (--gpu-architecture=sm_XX).
 *
 * Numerics (docs/backends.md): --fmad=false (no contraction of a*b+c),
 * --prec-div=true and --prec-sqrt=true (IEEE division and square root),
 * --ftz=false (subnormals kept).  fmaf only where the IR says KS_X_FMA.
 */
#include "emit_c.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the CUDA C dialect ---- */

static void cuda_entry_head(ks_buf_t *out, int nlanes)
{
	ks_buf_printf(out, "extern \"C\" __global__ void "
	    "__launch_bounds__(%d)\n", nlanes);
}

/*
 * The canonical tree with warp shuffles: at stride s, lane l < s gets
 * t[l] op t[l + s] (__shfl_down_sync reads lane l + s); lanes >= s compute
 * values nobody reads.  The operands keep cpu.c's order (t[l] first), so
 * even the choice between two NaN payloads agrees where the hardware
 * propagates payloads.  Lane 0's result goes to every lane.
 */
static void cuda_reduce_helper(ks_buf_t *out, const ks_c_dialect_t *d,
    const ks_c_reduce_t *r, int nlanes)
{
	unsigned mask = nlanes >= 32 ? 0xffffffffu : (1u << nlanes) - 1u;
	int s;

	ks_buf_printf(out, "/* The canonical tree over %d lanes: t[l] = t[l] "
	    "op t[l + s], s = %d .. 1. */\n"
	    "%s%s %s(%s v)\n{\n", nlanes, nlanes / 2, d->fn, r->type, r->name,
	    r->type);
	for (s = nlanes / 2; s >= 1; s /= 2) {
		char other[64];

		snprintf(other, sizeof(other),
		    "__shfl_down_sync(0x%08xu, v, %d)", mask, s);
		ks_buf_puts(out, "\tv = ");
		r->combine(out, "v", other);
		ks_buf_puts(out, ";\n");
	}
	ks_buf_printf(out, "\treturn __shfl_sync(0x%08xu, v, 0);\n}\n", mask);
}

static const ks_c_dialect_t cuda_dialect = {
	.name = "CUDA C",
	.prelude =
	    "/* Compiled with --fmad=false --prec-div=true --prec-sqrt=true "
	    "--ftz=false. */\n"
	    "typedef long long ks_i64;\n"
	    "typedef unsigned int ks_u32;\n"
	    "typedef unsigned short ks_u16;\n",
	.fn = "static __device__ __forceinline__ ",
	.entry_head = cuda_entry_head,
	.global = "",
	.restrict_kw = "__restrict__",
	.lane = "(ks_i64)threadIdx.x",
	.group = "(ks_i64)blockIdx.x",
	.i64_suffix = "LL",
	.f32_bits = "__float_as_uint",
	.bits_f32 = "__uint_as_float",
	.fma = "fmaf",
	.sqrt = "sqrtf",                /* --prec-sqrt=true: IEEE */
	.fabs = "fabsf",
	.i64_to_f32 = "__ll2float_rn",
	.f32_to_i64 = "__float2ll_rz",
	.max_lanes = 32,                /* one warp: the shuffle tree */
	.reduce_helper = cuda_reduce_helper,
	.phase_sync = "__syncthreads();",
	.local_kw = "__shared__ ",
	.barrier = "__syncthreads();",
	.unroll = "#pragma unroll %d",
};

/* ---- NVRTC, loaded at run time ---- */

/* The few declarations of nvrtc.h that kspec uses; the ABI is stable
 * across CUDA 11, 12 and 13. */
typedef int nvrtcResult;                        /* 0 is NVRTC_SUCCESS */
typedef struct _nvrtcProgram *nvrtcProgram;

typedef struct {
	void *handle;
	char path[256];                 /* what was loaded */
	const char *(*GetErrorString)(nvrtcResult);
	nvrtcResult (*Version)(int *, int *);
	nvrtcResult (*GetNumSupportedArchs)(int *);     /* optional */
	nvrtcResult (*GetSupportedArchs)(int *);        /* optional */
	nvrtcResult (*CreateProgram)(nvrtcProgram *, const char *,
	    const char *, int, const char *const *, const char *const *);
	nvrtcResult (*DestroyProgram)(nvrtcProgram *);
	nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char *const *);
	nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t *);
	nvrtcResult (*GetPTX)(nvrtcProgram, char *);
	nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t *);   /* 11.1+ */
	nvrtcResult (*GetCUBIN)(nvrtcProgram, char *);         /* 11.1+ */
	nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t *);
	nvrtcResult (*GetProgramLog)(nvrtcProgram, char *);
	int major, minor;
	int archs[64];                  /* supported sm_XX, ascending */
	int narchs;
} nvrtc_t;

static pthread_once_t nvrtc_once = PTHREAD_ONCE_INIT;
static nvrtc_t nvrtc;
static int nvrtc_ok;
static char nvrtc_why[512];         /* why it is unavailable */

static const char *const nvrtc_sonames[] = {
	"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2",
	"libnvrtc.so.11.1", "libnvrtc.so.11.0",
};
#define NVRTC_LAST_RESORT "/usr/local/cuda/lib64/libnvrtc.so"

/* Archs of NVRTC 11.0 and 11.1, which cannot be asked. */
static const int nvrtc_fixed_archs[] = {
	35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86,
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static void why_add(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void why_add(const char *fmt, ...)
{
	size_t n = strlen(nvrtc_why);
	va_list ap;

	if (n + 1 >= sizeof(nvrtc_why))
		return;
	va_start(ap, fmt);
	vsnprintf(nvrtc_why + n, sizeof(nvrtc_why) - n, fmt, ap);
	va_end(ap);
}

/* Resolves every entry point from an open handle; 0 if a required one is
 * missing (then *missing names it). */
static int nvrtc_resolve(void *h, nvrtc_t *n, const char **missing)
{
#define SYM(field, name, required) do {                                     \
		*(void **)&n->field = dlsym(h, name);                       \
		if (n->field == NULL && (required)) {                       \
			*missing = name;                                    \
			return 0;                                           \
		}                                                           \
	} while (0)
	SYM(GetErrorString, "nvrtcGetErrorString", 1);
	SYM(Version, "nvrtcVersion", 1);
	SYM(CreateProgram, "nvrtcCreateProgram", 1);
	SYM(DestroyProgram, "nvrtcDestroyProgram", 1);
	SYM(CompileProgram, "nvrtcCompileProgram", 1);
	SYM(GetPTXSize, "nvrtcGetPTXSize", 1);
	SYM(GetPTX, "nvrtcGetPTX", 1);
	SYM(GetProgramLogSize, "nvrtcGetProgramLogSize", 1);
	SYM(GetProgramLog, "nvrtcGetProgramLog", 1);
	SYM(GetCUBINSize, "nvrtcGetCUBINSize", 0);
	SYM(GetCUBIN, "nvrtcGetCUBIN", 0);
	SYM(GetNumSupportedArchs, "nvrtcGetNumSupportedArchs", 0);
	SYM(GetSupportedArchs, "nvrtcGetSupportedArchs", 0);
#undef SYM
	return 1;
}

/* Tries one candidate; 1 when it is loaded and complete. */
static int nvrtc_try(const char *name)
{
	const char *missing = NULL;
	void *h;
	nvrtc_t n;

	h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL)
		return 0;
	memset(&n, 0, sizeof(n));
	if (!nvrtc_resolve(h, &n, &missing)) {
		why_add("%s lacks %s; ", name, missing);
		dlclose(h);
		return 0;
	}
	if (n.Version(&n.major, &n.minor) != 0) {
		why_add("%s: nvrtcVersion failed; ", name);
		dlclose(h);
		return 0;
	}
	n.handle = h;
	snprintf(n.path, sizeof(n.path), "%s", name);
	nvrtc = n;
	return 1;
}

static void nvrtc_archs(void)
{
	int n = 0, i, all[256];

	if (nvrtc.GetNumSupportedArchs != NULL &&
	    nvrtc.GetSupportedArchs != NULL &&
	    nvrtc.GetNumSupportedArchs(&n) == 0 && n > 0 &&
	    n <= (int)NELEM(all) && nvrtc.GetSupportedArchs(all) == 0) {
		for (i = 0; i < n && nvrtc.narchs < (int)NELEM(nvrtc.archs);
		    i++)
			nvrtc.archs[nvrtc.narchs++] = all[i];
		return;
	}
	for (i = 0; i < (int)NELEM(nvrtc_fixed_archs); i++)
		nvrtc.archs[nvrtc.narchs++] = nvrtc_fixed_archs[i];
}

static void nvrtc_load(void)
{
	const char *env = getenv("KSPEC_NVRTC");
	const char *off = getenv("KSPEC_NVRTC_DISABLE");
	int search = !(off != NULL && strcmp(off, "1") == 0);
	size_t i;

	if (search) {
		for (i = 0; i < NELEM(nvrtc_sonames); i++)
			if (nvrtc_try(nvrtc_sonames[i]))
				goto loaded;
	}
	if (env != NULL && env[0] != '\0' && nvrtc_try(env))
		goto loaded;
	if (search && nvrtc_try(NVRTC_LAST_RESORT))
		goto loaded;
	why_add("NVRTC not found; tried %s$KSPEC_NVRTC (%s)%s",
	    search ? "libnvrtc.so.13, .12, .11.2, .11.1, .11.0, " : "",
	    env != NULL && env[0] != '\0' ? env : "unset",
	    search ? ", " NVRTC_LAST_RESORT : " (KSPEC_NVRTC_DISABLE=1)");
	return;
loaded:
	nvrtc_archs();
	nvrtc_ok = 1;
}

/* KS_OK when NVRTC is loaded; else KS_E_BACKEND_UNAVAILABLE and the
 * reason in err. */
static int nvrtc_need(char *err, size_t errlen)
{
	pthread_once(&nvrtc_once, nvrtc_load);
	if (nvrtc_ok)
		return KS_OK;
	if (err != NULL && errlen > 0)
		snprintf(err, errlen, "%s", nvrtc_why);
	return KS_E_BACKEND_UNAVAILABLE;
}

/* ---- targets, formats, options, identity ---- */

/*
 * Options of every compile, all in the identity.  --std pins the dialect
 * (defaults differ between NVRTC versions); the rest is the numerical
 * contract, spelled out even where it is NVRTC's default so that a change
 * of default cannot change an artifact silently.
 */
static const char *const cuda_opts[] = {
	"--fmad=false",
	"--prec-div=true",
	"--prec-sqrt=true",
	"--ftz=false",
	"--std=c++17",
};

/* "sm_90" -> 90; -1 if T is not sm_ followed by 2 or 3 digits, no leading
 * zero. */
static int parse_sm(const char *t)
{
	int v = 0, n = 0;

	if (t == NULL || strncmp(t, "sm_", 3) != 0 || t[3] == '0')
		return -1;
	for (t += 3; *t >= '0' && *t <= '9'; t++, n++)
		v = v * 10 + (*t - '0');
	if (*t != '\0' || n < 2 || n > 3 || v < 10)
		return -1;
	return v;
}

static int arch_supported(int sm)
{
	int i;

	for (i = 0; i < nvrtc.narchs; i++)
		if (nvrtc.archs[i] == sm)
			return 1;
	return 0;
}

/* Checks TARGET against this NVRTC; KS_OK and *sm, or an error. */
static int check_target(const char *target, int *sm, char *err,
    size_t errlen)
{
	ks_buf_t list;
	int i, rc;

	if (target == NULL || strcmp(target, "auto") == 0) {
		ks_set_err(err, errlen, "cuda needs an explicit target such as "
		    "sm_90");
		return KS_E_BAD_TARGET;
	}
	rc = nvrtc_need(err, errlen);
	if (rc != KS_OK)
		return rc;
	*sm = parse_sm(target);
	if (*sm > 0 && arch_supported(*sm))
		return KS_OK;
	ks_buf_init(&list);
	for (i = 0; i < nvrtc.narchs; i++)
		ks_buf_printf(&list, "%ssm_%d", i ? " " : "", nvrtc.archs[i]);
	ks_set_err(err, errlen, "cuda target '%.*s' is not accepted by NVRTC "
	    "%d.%d; use one of: %s", KS_MAX_NAME, target, nvrtc.major,
	    nvrtc.minor, list.data ? list.data : "");
	ks_buf_close(&list);
	return KS_E_BAD_TARGET;
}

static int cuda_available(char *err, size_t errlen)
{
	return nvrtc_need(err, errlen);
}

static int cuda_resolve_target(const char *requested, char *out,
    size_t outlen, char *err, size_t errlen)
{
	int sm, rc = check_target(requested, &sm, err, errlen);

	if (rc != KS_OK)
		return rc;
	if ((size_t)snprintf(out, outlen, "sm_%d", sm) >= outlen) {
		ks_set_err(err, errlen, "target name too long");
		return KS_E_INVAL;
	}
	return KS_OK;
}

static int cuda_check_format(const char *format)
{
	return format != NULL && (strcmp(format, "ptx") == 0 ||
	    strcmp(format, "cubin") == 0) ? KS_OK : KS_E_BAD_FORMAT;
}

static int cuda_source(const ks_ir_kernel_t *k, ks_buf_t *out, char *err,
    size_t errlen)
{
	return ks_jit_emit_c(k, &cuda_dialect, out, err, errlen);
}

/*
 * The NVRTC build, from the header of the PTX of an empty program, once
 * per process: "V13.0.88, CL-36424714".  nvrtcVersion gives only 13.0, and
 * a patch release can change code generation (so the compiler's version
 * is in the key: docs/architecture.md, "Keys").
 * Empty if it cannot be read.
 */
static pthread_once_t build_once = PTHREAD_ONCE_INIT;
static char build_name[128];

static void copy_field(const char *ptx, const char *tag, char *out,
    size_t outlen)
{
	const char *p = strstr(ptx, tag), *q;

	out[0] = '\0';
	if (p == NULL)
		return;
	p += strlen(tag);
	for (q = p; *q != '\0' && *q != '\n' && *q != '\r'; q++)
		;
	if ((size_t)(q - p) < outlen) {
		memcpy(out, p, (size_t)(q - p));
		out[q - p] = '\0';
	}
}

static void build_name_init(void)
{
	static const char src[] =
	    "extern \"C\" __global__ void ks_probe() {}\n";
	nvrtcProgram prog = NULL;
	size_t n = 0;
	char *ptx = NULL, rel[48], id[48];

	if (nvrtc.CreateProgram(&prog, src, "ks_probe.cu", 0, NULL, NULL) != 0)
		return;
	if (nvrtc.CompileProgram(prog, 0, NULL) == 0 &&
	    nvrtc.GetPTXSize(prog, &n) == 0 && n > 0 &&
	    (ptx = calloc(1, n + 1)) != NULL && nvrtc.GetPTX(prog, ptx) == 0) {
		/* "// Cuda compilation tools, release 13.0, V13.0.88" and
		 * "// Compiler Build ID: CL-36424714" */
		copy_field(ptx, ", V", rel, sizeof(rel));
		copy_field(ptx, "Compiler Build ID: ", id, sizeof(id));
		if (rel[0] != '\0' || id[0] != '\0')
			snprintf(build_name, sizeof(build_name), "%s%s%s%s",
			    rel[0] ? "V" : "", rel, rel[0] && id[0] ? ", " : "",
			    id);
	}
	free(ptx);
	nvrtc.DestroyProgram(&prog);
}

static int cuda_identity(const char *target, ks_buf_t *out)
{
	int sm = parse_sm(target), rc;
	size_t i;

	rc = nvrtc_need(NULL, 0);
	if (rc != KS_OK)
		return rc;
	if (sm < 0)
		return KS_E_BAD_TARGET;
	pthread_once(&build_once, build_name_init);
	rc = ks_buf_printf(out, "nvrtc %d.%d", nvrtc.major, nvrtc.minor);
	if (rc == KS_OK && build_name[0] != '\0')
		rc = ks_buf_printf(out, " (%s)", build_name);
	if (rc == KS_OK)
		rc = ks_buf_printf(out, "; sm_%d; emit-c %d;", sm,
		    KS_EMIT_C_VERSION);
	for (i = 0; rc == KS_OK && i < NELEM(cuda_opts); i++)
		rc = ks_buf_printf(out, " %s", cuda_opts[i]);
	if (rc == KS_OK)
		rc = ks_buf_printf(out, "; ptx --gpu-architecture=compute_%d; "
		    "cubin --gpu-architecture=sm_%d", sm, sm);
	return rc;
}

/* ---- compile ---- */

/* The program log, appended to err after PREFIX. */
static void log_error(nvrtcProgram prog, const char *prefix, char *err,
    size_t errlen)
{
	size_t n = 0;
	char *log = NULL;

	if (nvrtc.GetProgramLogSize(prog, &n) == 0 && n > 1 &&
	    (log = calloc(1, n + 1)) != NULL &&
	    nvrtc.GetProgramLog(prog, log) == 0)
		ks_set_err(err, errlen, "%s: %s", prefix, log);
	else
		ks_set_err(err, errlen, "%s", prefix);
	free(log);
}

/* Takes the PTX or cubin out of a compiled program. */
static int take_output(nvrtcProgram prog, int cubin, ks_jit_artifact_t *out,
    char *err, size_t errlen)
{
	nvrtcResult r;
	size_t n = 0;
	uint8_t *p;

	r = cubin ? nvrtc.GetCUBINSize(prog, &n) : nvrtc.GetPTXSize(prog, &n);
	if (r != 0 || n == 0) {
		ks_set_err(err, errlen, "nvrtcGet%sSize: %s", cubin ? "CUBIN" :
		    "PTX", nvrtc.GetErrorString(r));
		return KS_E_COMPILE;
	}
	p = malloc(n);
	if (p == NULL) {
		ks_set_err(err, errlen, "out of memory");
		return KS_E_NOMEM;
	}
	r = cubin ? nvrtc.GetCUBIN(prog, (char *)p) :
	    nvrtc.GetPTX(prog, (char *)p);
	if (r != 0) {
		free(p);
		ks_set_err(err, errlen, "nvrtcGet%s: %s", cubin ? "CUBIN" : "PTX",
		    nvrtc.GetErrorString(r));
		return KS_E_COMPILE;
	}
	/* PTX is text: drop the NUL terminator(s) NVRTC counts. */
	while (!cubin && n > 0 && p[n - 1] == '\0')
		n--;
	out->bytes = p;
	out->len = n;
	snprintf(out->format, sizeof(out->format), "%s", cubin ? "cubin" :
	    "ptx");
	return KS_OK;
}

/* FORMAT and TARGET of a compile: *SM and *CUBIN, or the error. */
static int check_request(const char *target, const char *format, int *sm,
    int *cubin, char *err, size_t errlen)
{
	int rc;

	if (cuda_check_format(format) != KS_OK) {
		ks_set_err(err, errlen, "cuda backend produces formats 'ptx' and "
		    "'cubin'");
		return KS_E_BAD_FORMAT;
	}
	rc = check_target(target, sm, err, errlen);
	if (rc != KS_OK)
		return rc;
	*cubin = strcmp(format, "cubin") == 0;
	if (*cubin && (nvrtc.GetCUBINSize == NULL || nvrtc.GetCUBIN == NULL)) {
		ks_set_err(err, errlen, "NVRTC %d.%d cannot produce cubin (11.1 "
		    "or later can)", nvrtc.major, nvrtc.minor);
		return KS_E_BAD_FORMAT;
	}
	return KS_OK;
}

/* Compiles SRC (NAME in NVRTC's messages) for sm_SM as cubin or PTX,
 * the request checked (check_request). */
static int compile_checked(const char *src, const char *name, int sm,
    int cubin, ks_jit_artifact_t *out, char *err, size_t errlen)
{
	const char *opts[NELEM(cuda_opts) + 1];
	char arch[48];
	nvrtcProgram prog = NULL;
	nvrtcResult r;
	int rc;
	size_t i;

	snprintf(arch, sizeof(arch), "--gpu-architecture=%s_%d",
	    cubin ? "sm" : "compute", sm);
	opts[0] = arch;
	for (i = 0; i < NELEM(cuda_opts); i++)
		opts[i + 1] = cuda_opts[i];

	r = nvrtc.CreateProgram(&prog, src, name, 0, NULL, NULL);
	if (r != 0) {
		ks_set_err(err, errlen, "nvrtcCreateProgram: %s",
		    nvrtc.GetErrorString(r));
		return KS_E_COMPILE;
	}
	r = nvrtc.CompileProgram(prog, (int)NELEM(opts), opts);
	if (r != 0) {
		char prefix[128];

		snprintf(prefix, sizeof(prefix), "nvrtcCompileProgram: %s",
		    nvrtc.GetErrorString(r));
		log_error(prog, prefix, err, errlen);
		rc = KS_E_COMPILE;
	} else {
		rc = take_output(prog, cubin, out, err, errlen);
	}
	nvrtc.DestroyProgram(&prog);
	return rc;
}

/*
 * Compiles the CUDA C text SRC for TARGET in FORMAT with the options of
 * every kspec compile (cuda_opts); NAME ("ks_gemm_gemv_m1.cu") names the
 * program in NVRTC's messages.  The backend's compile is this on the text
 * emitted from the IR; bench/gpu/check also hands it edited copies of
 * that text to measure a schedule on a GPU before the emitter adopts it.
 */
int ks_jit_cuda_compile_text(const char *src, const char *name,
    const char *target, const char *format, ks_jit_artifact_t *out,
    char *err, size_t errlen)
{
	uint64_t t0 = ks_now_ns();
	int sm, cubin, rc;

	memset(out, 0, sizeof(*out));
	if (src == NULL) {
		ks_set_err(err, errlen, "no CUDA C text to compile");
		return KS_E_INTERNAL;
	}
	rc = check_request(target, format, &sm, &cubin, err, errlen);
	if (rc == KS_OK)
		rc = compile_checked(src, name, sm, cubin, out, err, errlen);
	if (rc == KS_OK)
		out->compile_ms = (double)(ks_now_ns() - t0) / 1e6;
	return rc;
}

static int cuda_compile(const ks_ir_kernel_t *k, const char *target,
    const char *format, ks_jit_artifact_t *out, char *err, size_t errlen)
{
	char name[KS_MAX_NAME * 2 + 8];
	uint64_t t0 = ks_now_ns();
	ks_buf_t src;
	int rc, sm, cubin;

	memset(out, 0, sizeof(*out));
	/* Format, target and NVRTC first: a refused request costs no
	 * emitting. */
	rc = check_request(target, format, &sm, &cubin, err, errlen);
	if (rc != KS_OK)
		return rc;
	ks_buf_init(&src);
	rc = cuda_source(k, &src, err, errlen);
	snprintf(name, sizeof(name), "%s.cu", k->entry);
	if (rc == KS_OK)
		rc = compile_checked(src.data, name, sm, cubin, out, err,
		    errlen);
	ks_buf_close(&src);
	if (rc == KS_OK)
		out->compile_ms = (double)(ks_now_ns() - t0) / 1e6;
	return rc;
}

static int cuda_targets(char (*names)[KS_MAX_NAME + 1], int max)
{
	int i, rc = nvrtc_need(NULL, 0);

	if (rc != KS_OK)
		return rc;
	for (i = 0; i < nvrtc.narchs && i < max; i++)
		snprintf(names[i], KS_MAX_NAME + 1, "sm_%d", nvrtc.archs[i]);
	return i;
}

const ks_backend_t ks_backend_cuda = {
	.name = "cuda",
	.default_format = "ptx",
	.same_bytes = 1,        /* PTX text, and cubin from one ptxas */
	.available = cuda_available,
	.resolve_target = cuda_resolve_target,
	.check_format = cuda_check_format,
	.identity = cuda_identity,
	.compile = cuda_compile,
	.source = cuda_source,
	.targets = cuda_targets,
};
