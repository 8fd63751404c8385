/*
 * opencl: IR -> OpenCL C (emit_c.c) -> the ICD loader (libOpenCL) ->
 * clBuildProgram on the selected device -> CL_PROGRAM_BINARIES ("clbin").
 *
 * kspecd links the ICD loader (ocl-icd), which needs no vendor to load:
 * with no platform or no usable device the backend reports itself
 * unavailable with the reason, and cpu and cuda are served as usual.
 *
 * Devices and targets.  The platforms and their devices are enumerated
 * once per process (pthread_once; an ICD's device list does not change
 * under a running process).  Each device gets a stable, readable name,
 * "<platform>:<type>-<n>" (docs/backends.md):
 *
 *   <platform>  the platform's ICD suffix (cl_khr_icd), lower case: "pocl",
 *               "nv", "amd", "intel"; "p<i>" (platform index) when it has
 *               none or a platform before it has the same one;
 *   <type>      gpu, cpu, acc or dev (any other type);
 *   <n>         the device's index among the platform's devices of that
 *               type, in the order the platform lists them.
 *
 * so the PoCL CPU device is "pocl:cpu-0" and a second NVIDIA GPU
 * "nv:gpu-1".  A request may also say "<platform index>:<device index>"
 * ("0:0"); it resolves to the name.  "auto" is the first GPU, else the
 * first device, among usable devices: available, with a compiler, and with
 * correctly rounded f32 division and square root
 * (CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT), which the numerical contract
 * needs.  A device without it is refused by name.
 *
 * Compiles.  Each compile creates its own context on the device and
 * releases it, with the program, on every path; OpenCL calls are
 * thread-safe, so compiles run concurrently.  Build options (in the
 * identity): -cl-std=CL1.2 (the OpenCL C every device since 1.2 accepts;
 * the default differs between drivers), -cl-fp32-correctly-rounded-divide-
 * sqrt (IEEE division and sqrt).  Contraction is off through
 * `#pragma OPENCL FP_CONTRACT OFF` in the source; -cl-fast-relaxed-math,
 * -cl-mad-enable and -cl-denorms-are-zero are never passed.
 *
 * PoCL keeps its own cache of compiled kernels (~/.cache/pocl/kcache);
 * a repeated compile of the same source is then mostly a cache lookup.
 * Set POCL_KERNEL_CACHE=0 when measuring compile cost.
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <CL/cl_ext.h>

#include "emit_c.h"

#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the OpenCL C dialect ---- */

static void cl_entry_head(ks_buf_t *out, int nlanes)
{
	ks_buf_printf(out, "__kernel __attribute__((reqd_work_group_size(%d, "
	    "1, 1)))\nvoid ", nlanes);
}

/*
 * The canonical tree through local memory, not sub-groups (which OpenCL
 * 1.2 does not have and whose size a device chooses): every work-item
 * stores its value, and after one barrier every work-item computes the
 * whole tree from the stored values, in private registers, straight-line:
 * u[l] = t[l] op t[l + s] at the first stride, then u[l] = u[l] op u[l + s].
 * All work-items compute the same bits (the same operations in the same
 * order), so no broadcast is needed.  Two barriers per reduction instead
 * of one per stride: a CPU device such as PoCL splits the work-group
 * function at every barrier and pays for it in compile time (gemm
 * gemv_m1 bf16, PoCL 3.1 here: 6.9 s with a barrier per stride, 2.5 s like
 * this), and 31 redundant adds are nothing beside the loads.
 * The second barrier keeps the next reduction from overwriting t before
 * every work-item has read it.
 */
static void cl_reduce_helper(ks_buf_t *out, const ks_c_dialect_t *d,
    const ks_c_reduce_t *r, int nlanes)
{
	int s, l;

	ks_buf_printf(out, "/* The canonical tree over %d lanes: t[l] = t[l] "
	    "op t[l + s], s = %d .. 1,\n * computed by every work-item. */\n"
	    "%s%s %s(%s v, ks_i64 lane, __local %s *t)\n{\n",
	    nlanes, nlanes / 2, d->fn, r->type, r->name, r->type, r->type);
	if (nlanes > 1)
		ks_buf_printf(out, "\t%s u[%d];\n\n", r->type, nlanes / 2);
	ks_buf_puts(out, "\tt[lane] = v;\n\tbarrier(CLK_LOCAL_MEM_FENCE);\n");
	for (s = nlanes / 2; s >= 1; s /= 2) {
		for (l = 0; l < s; l++) {
			char a[32], b[32];

			snprintf(a, sizeof(a), "%s[%d]", s == nlanes / 2 ? "t" :
			    "u", l);
			snprintf(b, sizeof(b), "%s[%d]", s == nlanes / 2 ? "t" :
			    "u", l + s);
			ks_buf_printf(out, "\tu[%d] = ", l);
			r->combine(out, a, b);
			ks_buf_puts(out, ";\n");
		}
	}
	ks_buf_printf(out, "\tconst %s r = %s;\n\n"
	    "\tbarrier(CLK_LOCAL_MEM_FENCE);\n\treturn r;\n}\n", r->type,
	    nlanes > 1 ? "u[0]" : "t[0]");
}

static void cl_reduce_args(ks_buf_t *out, const ks_c_reduce_t *r)
{
	ks_buf_printf(out, ", ks_lane, %s", r->scratch);
}

static void cl_reduce_locals(ks_buf_t *out, const ks_c_reduce_t *r,
    int nlanes)
{
	ks_buf_printf(out, "\t__local %s %s[%d];\n", r->type, r->scratch,
	    nlanes);
}

static const ks_c_dialect_t cl_dialect = {
	.name = "OpenCL C",
	.prelude =
	    "/* Built with -cl-std=CL1.2 "
	    "-cl-fp32-correctly-rounded-divide-sqrt. */\n"
	    "#pragma OPENCL FP_CONTRACT OFF\n"
	    "typedef long ks_i64;\n"
	    "typedef uint ks_u32;\n"
	    "typedef ushort ks_u16;\n",
	/* Not static: PoCL 3.1 (LLVM 15) crashed in LLVM's inliner while
	 * building the binary of a gemm whose helpers were static (the same
	 * source without `static` builds and runs).  External linkage is
	 * harmless: the helper names (ksh_*) are kspec's own. */
	.fn = "",
	.entry_head = cl_entry_head,
	.global = "__global ",
	.restrict_kw = "restrict",
	.lane = "(ks_i64)get_local_id(0)",
	.group = "(ks_i64)get_group_id(0)",
	.i64_suffix = "L",
	.f32_bits = "as_uint",
	.bits_f32 = "as_float",
	.fma = "fma",
	.sqrt = "sqrt",                 /* -cl-fp32-correctly-rounded-... */
	.fabs = "fabs",
	.i64_to_f32 = "convert_float_rte",
	.f32_to_i64 = "convert_long_rtz",
	.max_lanes = 256,
	.reduce_helper = cl_reduce_helper,
	.reduce_args = cl_reduce_args,
	.reduce_locals = cl_reduce_locals,
	.phase_sync = "barrier(CLK_GLOBAL_MEM_FENCE);",
	.local_kw = "__local ",
	.barrier = "barrier(CLK_LOCAL_MEM_FENCE);",
};

/* ---- devices ---- */

static const char *const cl_opts = "-cl-std=CL1.2 "
    "-cl-fp32-correctly-rounded-divide-sqrt";

typedef struct {
	char target[KS_MAX_NAME];       /* "pocl:cpu-0" */
	cl_platform_id platform;
	cl_device_id device;
	int pi, di;                     /* indices, for "0:0" */
	int is_gpu;
	const char *unusable;           /* why it is not, or NULL */
	char *identity;                 /* platform, device, driver */
} cl_dev_t;

static pthread_once_t devs_once = PTHREAD_ONCE_INIT;
static cl_dev_t *devs;
static int ndevs;
static char devs_why[256];          /* why there is none */

/* A string property of a platform or device, NUL-terminated, or "?". */
static void plat_str(cl_platform_id p, cl_platform_info what, char *out,
    size_t len)
{
	if (clGetPlatformInfo(p, what, len - 1, out, NULL) != CL_SUCCESS)
		snprintf(out, len, "?");
	out[len - 1] = '\0';
}

static void dev_str(cl_device_id d, cl_device_info what, char *out,
    size_t len)
{
	if (clGetDeviceInfo(d, what, len - 1, out, NULL) != CL_SUCCESS)
		snprintf(out, len, "?");
	out[len - 1] = '\0';
}

/* Short name of platform PI from its ICD suffix; "p<PI>" without one or
 * when an earlier platform took it. */
static void plat_short(cl_platform_id p, int pi, char shorts[][16],
    char *out, size_t len)
{
	char suf[32];
	size_t i;
	int j, ok = 1;

	if (clGetPlatformInfo(p, CL_PLATFORM_ICD_SUFFIX_KHR, sizeof(suf) - 1,
	    suf, NULL) != CL_SUCCESS)
		suf[0] = '\0';
	suf[sizeof(suf) - 1] = '\0';
	for (i = 0; suf[i] != '\0'; i++) {
		suf[i] = (char)tolower((unsigned char)suf[i]);
		if (!isalnum((unsigned char)suf[i]) || i >= 12)
			ok = 0;
	}
	if (i == 0)
		ok = 0;
	for (j = 0; ok && j < pi; j++)
		if (strcmp(shorts[j], suf) == 0)
			ok = 0;
	if (ok)
		snprintf(out, len, "%.12s", suf);
	else
		snprintf(out, len, "p%d", pi);
}

static void add_device(cl_platform_id p, int pi, const char *pshort,
    const char *pident, cl_device_id d, int di, int *type_count)
{
	cl_device_type type = 0;
	cl_device_fp_config fp = 0;
	cl_bool avail = CL_FALSE, compiler = CL_FALSE;
	char name[256], version[256], driver[128];
	const char *tname;
	int t;
	cl_dev_t *v = &devs[ndevs];
	ks_buf_t id;

	clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof(type), &type, NULL);
	if (type & CL_DEVICE_TYPE_GPU) {
		tname = "gpu";
		t = 0;
	} else if (type & CL_DEVICE_TYPE_CPU) {
		tname = "cpu";
		t = 1;
	} else if (type & CL_DEVICE_TYPE_ACCELERATOR) {
		tname = "acc";
		t = 2;
	} else {
		tname = "dev";
		t = 3;
	}
	memset(v, 0, sizeof(*v));
	snprintf(v->target, sizeof(v->target), "%s:%s-%d", pshort, tname,
	    type_count[t]++);
	v->platform = p;
	v->device = d;
	v->pi = pi;
	v->di = di;
	v->is_gpu = t == 0;
	clGetDeviceInfo(d, CL_DEVICE_SINGLE_FP_CONFIG, sizeof(fp), &fp, NULL);
	clGetDeviceInfo(d, CL_DEVICE_AVAILABLE, sizeof(avail), &avail, NULL);
	clGetDeviceInfo(d, CL_DEVICE_COMPILER_AVAILABLE, sizeof(compiler),
	    &compiler, NULL);
	if (!avail)
		v->unusable = "it is not available";
	else if (!compiler)
		v->unusable = "it has no compiler";
	else if (!(fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT))
		v->unusable = "it cannot divide and take square roots "
		    "correctly rounded (CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT)";
	dev_str(d, CL_DEVICE_NAME, name, sizeof(name));
	dev_str(d, CL_DEVICE_VERSION, version, sizeof(version));
	dev_str(d, CL_DRIVER_VERSION, driver, sizeof(driver));
	ks_buf_init(&id);
	ks_buf_printf(&id, "%s; device %s (%s); driver %s", pident, name,
	    version, driver);
	v->identity = ks_buf_steal(&id, NULL);
	ndevs++;
}

static void devs_init(void)
{
	cl_platform_id plats[16];
	cl_uint np = 0, nd, i, j;
	char shorts[16][16];
	cl_int rc;
	int cap = 0;

	rc = clGetPlatformIDs(16, plats, &np);
	if (rc != CL_SUCCESS || np == 0) {
		snprintf(devs_why, sizeof(devs_why), "no OpenCL platform "
		    "(clGetPlatformIDs: %d; the ICD loader found no vendor in "
		    "/etc/OpenCL/vendors or $OCL_ICD_VENDORS)", (int)rc);
		return;
	}
	if (np > 16)
		np = 16;
	for (i = 0; i < np; i++) {
		if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 0, NULL,
		    &nd) == CL_SUCCESS)
			cap += (int)nd;
	}
	devs = calloc((size_t)cap + 1, sizeof(*devs));
	if (devs == NULL) {
		snprintf(devs_why, sizeof(devs_why), "out of memory");
		return;
	}
	for (i = 0; i < np; i++) {
		cl_device_id ids[64];
		char pname[128], pver[256], pshort[16];
		int type_count[4] = { 0 };
		ks_buf_t pid;

		plat_short(plats[i], (int)i, shorts, pshort, sizeof(pshort));
		snprintf(shorts[i], sizeof(shorts[i]), "%s", pshort);
		if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 64, ids,
		    &nd) != CL_SUCCESS)
			continue;
		if (nd > 64)
			nd = 64;
		plat_str(plats[i], CL_PLATFORM_NAME, pname, sizeof(pname));
		plat_str(plats[i], CL_PLATFORM_VERSION, pver, sizeof(pver));
		ks_buf_init(&pid);
		ks_buf_printf(&pid, "%s (%s)", pname, pver);
		for (j = 0; j < nd && ndevs < cap; j++)
			add_device(plats[i], (int)i, pshort,
			    pid.data ? pid.data : "?", ids[j], (int)j,
			    type_count);
		ks_buf_close(&pid);
	}
	if (ndevs == 0)
		snprintf(devs_why, sizeof(devs_why), "no OpenCL device on "
		    "%u platform(s)", np);
}

/* The device named by TARGET (a name or "P:D"); NULL if none. */
static const cl_dev_t *find_dev(const char *target)
{
	int i, pi, di, n = 0;

	pthread_once(&devs_once, devs_init);
	if (target == NULL)
		return NULL;
	for (i = 0; i < ndevs; i++)
		if (strcmp(devs[i].target, target) == 0)
			return &devs[i];
	if (sscanf(target, "%d:%d%n", &pi, &di, &n) == 2 &&
	    target[n] == '\0' && isdigit((unsigned char)target[0]))
		for (i = 0; i < ndevs; i++)
			if (devs[i].pi == pi && devs[i].di == di)
				return &devs[i];
	return NULL;
}

static const cl_dev_t *auto_dev(void)
{
	int i;

	pthread_once(&devs_once, devs_init);
	for (i = 0; i < ndevs; i++)
		if (devs[i].is_gpu && devs[i].unusable == NULL)
			return &devs[i];
	for (i = 0; i < ndevs; i++)
		if (devs[i].unusable == NULL)
			return &devs[i];
	return NULL;
}

static int cl_available(char *err, size_t errlen)
{
	pthread_once(&devs_once, devs_init);
	if (ndevs == 0) {
		ks_set_err(err, errlen, "%s", devs_why);
		return KS_E_BACKEND_UNAVAILABLE;
	}
	if (auto_dev() != NULL)
		return KS_OK;
	ks_set_err(err, errlen, "no usable OpenCL device (%d found); %s: %s",
	    ndevs, devs[0].target, devs[0].unusable);
	return KS_E_BACKEND_UNAVAILABLE;
}

/* The usable device of a resolved or requested target, or an error. */
static int get_dev(const char *target, const cl_dev_t **out, char *err,
    size_t errlen)
{
	const cl_dev_t *v;
	ks_buf_t list;
	int i, rc;

	rc = cl_available(err, errlen);
	if (rc != KS_OK)
		return rc;
	v = target == NULL || strcmp(target, "auto") == 0 ? auto_dev() :
	    find_dev(target);
	if (v != NULL && v->unusable == NULL) {
		*out = v;
		return KS_OK;
	}
	if (v != NULL) {
		ks_set_err(err, errlen, "opencl device %s cannot be used: %s",
		    v->target, v->unusable);
		return KS_E_BAD_TARGET;
	}
	ks_buf_init(&list);
	for (i = 0; i < ndevs; i++)
		ks_buf_printf(&list, "%s%s", i ? ", " : "", devs[i].target);
	ks_set_err(err, errlen, "opencl target '%.*s' names no device; use auto, "
	    "one of: %s, or <platform>:<device> indices", KS_MAX_NAME,
	    target, list.data ? list.data : "");
	ks_buf_close(&list);
	return KS_E_BAD_TARGET;
}

static int cl_resolve_target(const char *requested, char *out,
    size_t outlen, char *err, size_t errlen)
{
	const cl_dev_t *v;
	int rc = get_dev(requested, &v, err, errlen);

	if (rc != KS_OK)
		return rc;
	if (strlen(v->target) >= outlen) {
		ks_set_err(err, errlen, "target name too long");
		return KS_E_INVAL;
	}
	memcpy(out, v->target, strlen(v->target) + 1);
	return KS_OK;
}

static int cl_check_format(const char *format)
{
	return format != NULL && strcmp(format, "clbin") == 0 ? KS_OK :
	    KS_E_BAD_FORMAT;
}

static int cl_identity(const char *target, ks_buf_t *out)
{
	const cl_dev_t *v;
	int rc = get_dev(target, &v, NULL, 0);

	if (rc != KS_OK)
		return rc;
	return ks_buf_printf(out, "opencl %s; emit-c %d; %s", v->identity,
	    KS_EMIT_C_VERSION, cl_opts);
}

static int cl_source(const ks_ir_kernel_t *k, ks_buf_t *out, char *err,
    size_t errlen)
{
	return ks_jit_emit_c(k, &cl_dialect, out, err, errlen);
}

/* ---- compile ---- */

/* The build log of PROG on DEV into err after PREFIX. */
static void build_log(cl_program prog, cl_device_id dev, const char *prefix,
    char *err, size_t errlen)
{
	size_t n = 0;
	char *log = NULL;

	if (clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, NULL,
	    &n) == CL_SUCCESS && n > 1 && (log = calloc(1, n + 1)) != NULL &&
	    clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, log,
	    NULL) == CL_SUCCESS)
		ks_set_err(err, errlen, "%s: %s", prefix, log);
	else
		ks_set_err(err, errlen, "%s", prefix);
	free(log);
}

static int take_binary(cl_program prog, ks_jit_artifact_t *out, char *err,
    size_t errlen)
{
	size_t n = 0;
	unsigned char *p;
	cl_int rc;

	rc = clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof(n), &n,
	    NULL);
	if (rc != CL_SUCCESS || n == 0) {
		ks_set_err(err, errlen, "CL_PROGRAM_BINARY_SIZES: %d, size %zu",
		    (int)rc, n);
		return KS_E_COMPILE;
	}
	p = malloc(n);
	if (p == NULL) {
		ks_set_err(err, errlen, "out of memory");
		return KS_E_NOMEM;
	}
	rc = clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof(p), &p, NULL);
	if (rc != CL_SUCCESS) {
		free(p);
		ks_set_err(err, errlen, "CL_PROGRAM_BINARIES: %d", (int)rc);
		return KS_E_COMPILE;
	}
	out->bytes = p;
	out->len = n;
	memcpy(out->format, "clbin", 6);
	return KS_OK;
}

static int cl_compile(const ks_ir_kernel_t *k, const char *target,
    const char *format, ks_jit_artifact_t *out, char *err, size_t errlen)
{
	uint64_t t0 = ks_now_ns();
	const cl_dev_t *v;
	cl_context_properties props[3];
	cl_context ctx;
	cl_program prog;
	const char *text;
	ks_buf_t src;
	cl_int crc;
	int rc;

	memset(out, 0, sizeof(*out));
	if (cl_check_format(format) != KS_OK) {
		ks_set_err(err, errlen, "opencl backend produces format 'clbin' "
		    "only");
		return KS_E_BAD_FORMAT;
	}
	if (target == NULL || strcmp(target, "auto") == 0) {
		ks_set_err(err, errlen, "opencl target '%s' is not resolved",
		    target ? target : "(null)");
		return KS_E_BAD_TARGET;
	}
	rc = get_dev(target, &v, err, errlen);
	if (rc != KS_OK)
		return rc;
	ks_buf_init(&src);
	rc = cl_source(k, &src, err, errlen);
	if (rc != KS_OK) {
		ks_buf_close(&src);
		return rc;
	}
	props[0] = CL_CONTEXT_PLATFORM;
	props[1] = (cl_context_properties)v->platform;
	props[2] = 0;
	ctx = clCreateContext(props, 1, &v->device, NULL, NULL, &crc);
	if (ctx == NULL) {
		ks_set_err(err, errlen, "clCreateContext on %s: %d", v->target,
		    (int)crc);
		ks_buf_close(&src);
		return KS_E_COMPILE;
	}
	text = src.data;
	prog = clCreateProgramWithSource(ctx, 1, &text, &src.len, &crc);
	if (prog == NULL) {
		ks_set_err(err, errlen, "clCreateProgramWithSource: %d", (int)crc);
		rc = KS_E_COMPILE;
	} else {
		crc = clBuildProgram(prog, 1, &v->device, cl_opts, NULL, NULL);
		if (crc != CL_SUCCESS) {
			char prefix[64];

			snprintf(prefix, sizeof(prefix), "clBuildProgram: %d",
			    (int)crc);
			build_log(prog, v->device, prefix, err, errlen);
			rc = KS_E_COMPILE;
		} else {
			rc = take_binary(prog, out, err, errlen);
		}
		clReleaseProgram(prog);
	}
	clReleaseContext(ctx);
	ks_buf_close(&src);
	if (rc == KS_OK)
		out->compile_ms = (double)(ks_now_ns() - t0) / 1e6;
	return rc;
}

int ks_jit_opencl_device(const char *target, void **platform,
    void **device, char *err, size_t errlen)
{
	const cl_dev_t *v;
	int rc = get_dev(target, &v, err, errlen);

	if (rc != KS_OK)
		return rc;
	*platform = v->platform;
	*device = v->device;
	return KS_OK;
}

/* Every device by name, then by "<platform index>:<device index>". */
static int cl_targets(char (*names)[KS_MAX_NAME + 1], int max)
{
	int i, n = 0;

	pthread_once(&devs_once, devs_init);
	for (i = 0; i < ndevs && n < max; i++)
		snprintf(names[n++], KS_MAX_NAME + 1, "%s", devs[i].target);
	for (i = 0; i < ndevs && n < max; i++)
		snprintf(names[n++], KS_MAX_NAME + 1, "%d:%d", devs[i].pi,
		    devs[i].di);
	return n;
}

/* Builds A (a program binary) on TARGET's device, one cl_mem per buffer
 * (copied from and, when written, read back to its host memory), the
 * scalars as cl_long and cl_float in the order of the unbound parameters;
 * global = groups * nlanes, local = nlanes. */
static int cl_run(const ks_ir_kernel_t *k, const char *target,
    const ks_jit_artifact_t *a, ks_jit_arg_t *args, char *err,
    size_t errlen)
{
	const unsigned char *bytes = a->bytes;
	cl_mem mem[KS_JIT_MAX_ARGS] = { 0 };
	cl_context ctx = NULL;
	cl_command_queue q = NULL;
	cl_program prog = NULL;
	cl_kernel kern = NULL;
	size_t local = (size_t)k->nlanes, global, len = a->len;
	const cl_dev_t *v;
	cl_int st = CL_SUCCESS, bst;
	cl_uint slot = 0;
	int64_t groups;
	int i, rc;

	rc = get_dev(target, &v, err, errlen);
	if (rc != KS_OK)
		return rc;
	if (k->nparams > KS_JIT_MAX_ARGS ||
	    ks_jit_groups(k, args, &groups) != KS_OK) {
		ks_set_err(err, errlen, "%s.%s: the grid cannot be evaluated",
		    k->name, k->variant);
		return KS_E_INVAL;
	}
	global = (size_t)groups * local;
	ctx = clCreateContext(NULL, 1, &v->device, NULL, NULL, &st);
	if (ctx)
		q = clCreateCommandQueue(ctx, v->device, 0, &st);
	if (q)
		prog = clCreateProgramWithBinary(ctx, 1, &v->device, &len,
		    &bytes, &bst, &st);
	if (prog && (st = clBuildProgram(prog, 1, &v->device, NULL, NULL,
	    NULL)) == CL_SUCCESS)
		kern = clCreateKernel(prog, k->entry, &st);
	for (i = 0; kern && st == CL_SUCCESS && i < k->nparams; i++) {
		const ks_ir_param_t *p = &k->params[i];

		if (p->kind == KS_PARAM_SCALAR && p->bound)
			continue;
		if (p->kind == KS_PARAM_BUFFER) {
			mem[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE |
			    CL_MEM_COPY_HOST_PTR, args[i].bytes, args[i].data,
			    &st);
			if (mem[i])
				st = clSetKernelArg(kern, slot++, sizeof(cl_mem),
				    &mem[i]);
		} else if (p->type == KS_TY_I64) {
			cl_long x = *(const int64_t *)args[i].data;

			st = clSetKernelArg(kern, slot++, sizeof x, &x);
		} else {
			cl_float x = *(const float *)args[i].data;

			st = clSetKernelArg(kern, slot++, sizeof x, &x);
		}
	}
	if (kern && st == CL_SUCCESS && global > 0)
		st = clEnqueueNDRangeKernel(q, kern, 1, NULL, &global, &local,
		    0, NULL, NULL);
	for (i = 0; kern && st == CL_SUCCESS && i < k->nparams; i++)
		if (mem[i] && (k->params[i].access & KS_ACCESS_WRITE))
			st = clEnqueueReadBuffer(q, mem[i], CL_TRUE, 0,
			    args[i].bytes, args[i].data, 0, NULL, NULL);
	if (!kern || st != CL_SUCCESS) {
		ks_set_err(err, errlen, "opencl: running %s.%s on %s failed "
		    "(error %d)", k->name, k->variant, v->target, (int)st);
		rc = KS_E_BACKEND_UNAVAILABLE;
	}
	for (i = 0; i < k->nparams; i++)
		if (mem[i])
			clReleaseMemObject(mem[i]);
	if (kern)
		clReleaseKernel(kern);
	if (prog)
		clReleaseProgram(prog);
	if (q) {
		clFinish(q);
		clReleaseCommandQueue(q);
	}
	if (ctx)
		clReleaseContext(ctx);
	return rc;
}

const ks_backend_t ks_backend_opencl = {
	.name = "opencl",
	.default_format = "clbin",
	/* A PoCL binary holds a build id or an "_UNCACHED_" temporary name,
	 * LLVM bitcode that differs between builds of one source, and the
	 * work-group functions PoCL's cache happened to hold (measured:
	 * 110 of 110 kernels differ between two processes). */
	.same_bytes = 0,
	.available = cl_available,
	.resolve_target = cl_resolve_target,
	.check_format = cl_check_format,
	.identity = cl_identity,
	.compile = cl_compile,
	.source = cl_source,
	.targets = cl_targets,
	.run = cl_run,
};
