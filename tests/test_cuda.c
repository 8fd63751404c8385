/*
 * jit: the cuda backend.  No GPU is needed (or used) here: NVRTC compiles
 * every gemm variant x dtype to PTX and cubin for sm_80 and sm_90, ptxas
 * assembles the PTX for both archs where it is installed, the PTX shows
 * the numerical options took effect (no contraction, IEEE division, no
 * flush to zero), golden files pin the emitted CUDA C (and catch a planted
 * wrong reduction order), and the backend's targets, formats, identity and
 * unavailability are checked.  Running the kernels needs a GPU:
 * bench/gpu/run.sh.
 *
 * The backend conformance suite (conform.h, shared with test_opencl.c)
 * runs here too: its cases without a device on NVRTC, and its cases on a
 * device where a GPU and its driver (libcuda.so.1) are.
 *
 * Tests that need NVRTC skip visibly (cr_skip_test, counted as skipped)
 * where it cannot be loaded, and those that need a GPU where there is
 * none; KSPEC_NVRTC_DISABLE=1 with KSPEC_NVRTC set to a bogus path
 * simulates the first (see no_nvrtc_means_unavailable...).
 */
#include <errno.h>
#include <pthread.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conform.h"
#include "spec.h"
#include "../examples/cu_driver.h"

extern char **environ;

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(cuda, .init = setup, .timeout = 300);

static void need_nvrtc(void)
{
	char err[512];

	if (ks_backend_cuda.available(err, sizeof err) != KS_OK)
		cr_skip_test("NVRTC not available: %s", err);
}

static const char *const archs[] = { "sm_80", "sm_90" };

/* ---- the conformance suite (conform.h) on CUDA ---- */

static void cuda_target(char *out, size_t n)
{
	need_nvrtc();
	snprintf(out, n, "sm_90");
}

/* KSPEC_NVRTC pins a library that is not there, and the search is off. */
static void cuda_hide(void)
{
	setenv("KSPEC_NVRTC_DISABLE", "1", 1);
	setenv("KSPEC_NVRTC", "/nonexistent/libnvrtc.so", 1);
}

/* Device 0 through the driver, its primary context current here. */
typedef struct {
	int dev;
	void *ctx;
	char sm[16];
} cudev_t;

static void cu_ok(cu_result_t r, const char *what)
{
	const char *s = NULL;

	if (r != 0 && cu.GetErrorString != NULL)
		cu.GetErrorString(r, &s);
	cr_assert_eq(r, 0, "%s: %s (CUresult %d)", what, s ? s : "?", r);
}

static void *cuda_open(void)
{
	const char *why = cu_driver_load();
	char t[KS_MAX_NAME], err[512];
	int major = 0, minor = 0;
	cudev_t *d;

	if (why != NULL)
		cr_skip_test("%s", why);
	if (cu.Init(0) != 0)
		cr_skip_test("a CUDA driver but no device (cuInit failed)");
	d = calloc(1, sizeof *d);
	cr_assert_not_null(d);
	if (cu.DeviceGet(&d->dev, 0) != 0)
		cr_skip_test("a CUDA driver but no device");
	cu_ok(cu.DeviceGetAttribute(&major, CU_CC_MAJOR, d->dev),
	    "cuDeviceGetAttribute");
	cu_ok(cu.DeviceGetAttribute(&minor, CU_CC_MINOR, d->dev),
	    "cuDeviceGetAttribute");
	snprintf(d->sm, sizeof d->sm, "sm_%d%d", major, minor);
	need_nvrtc();
	if (ks_backend_cuda.resolve_target(d->sm, t, sizeof t, err,
	    sizeof err) != KS_OK)
		cr_skip_test("NVRTC cannot compile for this %s: %s", d->sm,
		    err);
	cu_ok(cu.PrimaryCtxRetain(&d->ctx, d->dev),
	    "cuDevicePrimaryCtxRetain");
	cu_ok(cu.CtxSetCurrent(d->ctx), "cuCtxSetCurrent");
	return d;
}

/* K as a cubin for the device, launched as examples/llama launches:
 * grid = the groups, block = the lanes, one device buffer per buffer
 * argument (filled from its host memory; the written ones read back),
 * the unbound scalars by value, in declaration order. */
static void cuda_run(void *p, const ks_ir_kernel_t *k, gpu_arg_t *args)
{
	cudev_t *d = p;
	unsigned long long mem[32] = { 0 };
	void *params[32], *mod = NULL, *fn = NULL;
	int64_t groups = gpu_groups(k, args);
	ks_jit_artifact_t a;
	char err[8192];
	int i, n = 0;

	cr_assert_leq(k->nparams, 32);
	cr_assert_eq(ks_backend_cuda.compile(k, d->sm, "cubin", &a, err,
	    sizeof err), KS_OK, "%s", err);
	cu_ok(cu.ModuleLoadData(&mod, a.bytes), "cuModuleLoadData");
	cu_ok(cu.ModuleGetFunction(&fn, mod, k->entry),
	    "cuModuleGetFunction");
	for (i = 0; i < k->nparams; i++) {
		const ks_ir_param_t *pa = &k->params[i];

		if (pa->kind == KS_PARAM_SCALAR && pa->bound)
			continue;
		if (pa->kind == KS_PARAM_BUFFER) {
			cu_ok(cu.MemAlloc(&mem[i], args[i].bytes ?
			    args[i].bytes : 1), "cuMemAlloc");
			if (args[i].bytes)
				cu_ok(cu.MemcpyHtoD(mem[i], args[i].data,
				    args[i].bytes), "cuMemcpyHtoD");
			params[n++] = &mem[i];
		} else {
			params[n++] = args[i].data;
		}
	}
	cr_assert_lt(groups, 0x80000000LL, "%lld groups", (long long)groups);
	if (groups > 0)
		cu_ok(cu.LaunchKernel(fn, (unsigned)groups, 1, 1,
		    (unsigned)k->nlanes, 1, 1, 0, NULL, params, NULL),
		    "cuLaunchKernel");
	cu_ok(cu.CtxSynchronize(), "cuCtxSynchronize");
	for (i = 0; i < k->nparams; i++) {
		if (mem[i] == 0)
			continue;
		if ((k->params[i].access & KS_ACCESS_WRITE) && args[i].bytes)
			cu_ok(cu.MemcpyDtoH(args[i].data, mem[i],
			    args[i].bytes), "cuMemcpyDtoH");
		cu_ok(cu.MemFree(mem[i]), "cuMemFree");
	}
	cu_ok(cu.ModuleUnload(mod), "cuModuleUnload");
	ks_jit_artifact_close(&a);
}

static void cuda_close(void *p)
{
	cudev_t *d = p;

	cu.PrimaryCtxRelease(d->dev);
	free(d);
}

static const conform_t C = {
	.be = &ks_backend_cuda,
	.golden_ext = "cu",
	.other_format = "clbin",
	.identity_has = { "nvrtc ", "--fmad=false", "--prec-div=true",
		"--prec-sqrt=true", "--ftz=false", NULL },
	.max_lanes = 32,
	.target = cuda_target,
	.hide = cuda_hide,
	.hidden_says = "/nonexistent/libnvrtc.so",
	.named_target = "sm_90",
	.same_bytes = 1,
	.open = cuda_open,
	.run = cuda_run,
	.close = cuda_close,
	.local_decl = "__shared__ float l_s[32];",
	.barrier = "__syncthreads();",
};

CONFORM_DEVICE_TESTS(cuda, C)

/* Compiles K for TARGET and FORMAT; asserts success. */
static void compile(const ks_ir_kernel_t *k, const char *target,
    const char *format, ks_jit_artifact_t *a)
{
	char err[8192];

	cr_assert_eq(ks_backend_cuda.compile(k, target, format, a, err,
	    sizeof err), KS_OK, "%s %s %s: %s", k->entry, target, format,
	    err);
	cr_assert_str_eq(a->format, format);
	cr_assert_gt(a->len, 0);
	cr_assert_gt(a->compile_ms, 0.0);
}

/* PTX as a NUL-terminated string; caller frees. */
static char *ptx_text(const ks_jit_artifact_t *a)
{
	char *t = malloc(a->len + 1);

	memcpy(t, a->bytes, a->len);
	t[a->len] = '\0';
	cr_assert_eq(strlen(t), a->len, "PTX holds a NUL byte");
	return t;
}

/* ptxas from the CUDA install or PATH, or NULL. */
static const char *find_ptxas(void)
{
	static char path[4096];
	const char *env = getenv("PATH");
	struct stat st;

	if (stat("/usr/local/cuda/bin/ptxas", &st) == 0)
		return "/usr/local/cuda/bin/ptxas";
	while (env != NULL && *env != '\0') {
		const char *end = strchr(env, ':');
		size_t n = end ? (size_t)(end - env) : strlen(env);

		snprintf(path, sizeof path, "%.*s/ptxas", (int)n, env);
		if (n > 0 && stat(path, &st) == 0 && (st.st_mode & S_IXUSR))
			return path;
		env = end ? end + 1 : NULL;
	}
	return NULL;
}

/* Runs ptxas -arch=ARCH on PTX; returns its exit status (-1 if it could
 * not run). */
static int ptxas(const char *tool, const ks_jit_artifact_t *ptx,
    const char *arch)
{
	const char *tmp = getenv("TMPDIR");
	char file[4096], archopt[32];
	char *argv[7];
	pid_t pid;
	int fd, status = -1;

	snprintf(file, sizeof file, "%s/kspec-ptx-XXXXXX",
	    tmp && *tmp ? tmp : "/tmp");
	fd = mkstemp(file);
	cr_assert_geq(fd, 0, "mkstemp: %s", strerror(errno));
	cr_assert_eq(write(fd, ptx->bytes, ptx->len), (ssize_t)ptx->len);
	close(fd);
	snprintf(archopt, sizeof archopt, "-arch=%s", arch);
	argv[0] = (char *)tool;
	argv[1] = archopt;
	argv[2] = file;
	argv[3] = "-o";
	argv[4] = "/dev/null";
	argv[5] = NULL;
	if (posix_spawn(&pid, tool, NULL, NULL, argv, environ) == 0 &&
	    waitpid(pid, &status, 0) == pid)
		status = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
	unlink(file);
	return status;
}

/* ---- golden source, determinism, a planted bug ---- */

Test(cuda, emitted_source_matches_golden_files)
{
	conform_golden(&C);
}

/* Swaps the strides of the shuffle tree (16 <-> 1, 8 <-> 2): the tree
 * t[l] + t[l + 1] first is not the canonical order. */
static char *mutate_strides(const char *src)
{
	static const char *const from[] = { "v, 16)", "v, 8)", "v, 2)",
		"v, 1)" };
	static const char *const to[] = { "v, 1)", "v, 2)", "v, 8)",
		"v, 16)" };
	size_t n = 0;
	char *out = malloc(strlen(src) + 64);
	const char *p = src;
	int i, hits = 0;

	while (*p) {
		for (i = 0; i < 4; i++)
			if (strncmp(p, from[i], strlen(from[i])) == 0)
				break;
		if (i < 4) {
			memcpy(out + n, to[i], strlen(to[i]));
			n += strlen(to[i]);
			p += strlen(from[i]);
			hits++;
		} else {
			out[n++] = *p++;
		}
	}
	out[n] = '\0';
	cr_assert_eq(hits, 4, "the shuffle tree has a new shape: update the "
	    "mutation");
	return out;
}

Test(cuda, a_mutated_reduction_order_is_caught_by_the_golden_file)
{
	ks_ir_kernel_t *k = gpu_gemm_ir("gemv_m1", KS_DTYPE_BF16, 1, 4096,
	    4096);
	char *src = gpu_source(&ks_backend_cuda, k), *bad = mutate_strides(src);

	cr_assert_eq(gpu_golden_diff(src, "gemm_gemv_m1_bf16.cu"), 0);
	cr_assert_gt(gpu_golden_diff(bad, "gemm_gemv_m1_bf16.cu"), 0,
	    "the golden file does not see a mutated tree");
	free(src);
	free(bad);
	ks_ir_free(k);
}

Test(cuda, emitted_source_identity_and_ptx_are_deterministic)
{
	ks_ir_kernel_t *a = gpu_gemm_ir("small_m", KS_DTYPE_BF16, 3, 0, 4100);
	ks_ir_kernel_t *b = gpu_gemm_ir("small_m", KS_DTYPE_BF16, 3, 0, 4100);
	char *sa = gpu_source(&ks_backend_cuda, a);
	char *sb = gpu_source(&ks_backend_cuda, b);
	char t[KS_MAX_NAME];
	ks_jit_artifact_t pa, pb;
	ks_buf_t i80, i90;

	cr_assert_str_eq(sa, sb);
	free(sa);
	free(sb);
	conform_deterministic(&C, t, sizeof t, &i90);
	ks_buf_init(&i80);
	cr_assert_eq(ks_backend_cuda.identity("sm_80", &i80), KS_OK);
	cr_assert_str_neq(i90.data, i80.data);
	cr_assert(strncmp(i90.data, "nvrtc ", 6) == 0, "%s", i90.data);
	cr_assert(strstr(i90.data, "; sm_90;") != NULL, "%s", i90.data);
	cr_assert(strstr(i90.data, "compute_90") != NULL);
	/* NVRTC itself is deterministic: the same source, the same PTX. */
	compile(a, "sm_90", "ptx", &pa);
	compile(b, "sm_90", "ptx", &pb);
	cr_assert_eq(pa.len, pb.len);
	cr_assert_eq(memcmp(pa.bytes, pb.bytes, pa.len), 0);
	ks_jit_artifact_close(&pa);
	ks_jit_artifact_close(&pb);
	ks_buf_close(&i80);
	ks_buf_close(&i90);
	ks_ir_free(a);
	ks_ir_free(b);
}

/* ---- NVRTC and ptxas on every gemm variant ---- */

/* Every variant at its golden shape (constants) and with its free dims
 * dynamic. */
static const struct {
	const char *variant;
	int64_t M, N, K;
} variant_shapes[] = {
	{ "general", 0, 0, 0 }, { "general", 17, 100, 4100 },
	{ "gemv_m1", 1, 4096, 4096 }, { "gemv_m1", 1, 0, 0 },
	{ "small_m", 2, 4096, 4096 }, { "small_m", 3, 0, 0 },
	{ "blocked", 512, 4096, 4096 }, { "blocked", 9, 0, 0 },
};

Test(cuda, every_gemm_variant_compiles_to_ptx_and_cubin_for_sm80_sm90)
{
	size_t i, a;
	ks_dtype_t d;

	need_nvrtc();
	for (i = 0; i < sizeof variant_shapes / sizeof *variant_shapes; i++)
		for (d = 0; d < KS_DTYPE_COUNT; d++) {
			ks_ir_kernel_t *k = gpu_gemm_ir(
			    variant_shapes[i].variant, d, variant_shapes[i].M,
			    variant_shapes[i].N, variant_shapes[i].K);

			for (a = 0; a < 2; a++) {
				ks_jit_artifact_t ptx, cubin;
				char entry[128], target[32], *t;

				compile(k, archs[a], "ptx", &ptx);
				compile(k, archs[a], "cubin", &cubin);
				t = ptx_text(&ptx);
				snprintf(entry, sizeof entry, ".entry %s(",
				    k->entry);
				snprintf(target, sizeof target, ".target %s",
				    archs[a]);
				cr_assert(strstr(t, entry) != NULL, "%s",
				    entry);
				cr_assert(strstr(t, target) != NULL, "%s",
				    target);
				cr_assert(memcmp(cubin.bytes, "\177ELF", 4) ==
				    0, "a cubin is an ELF file");
				free(t);
				ks_jit_artifact_close(&ptx);
				ks_jit_artifact_close(&cubin);
			}
			ks_ir_free(k);
		}
}

/*
 * Every variant of every library kernel, in every dtype that selects it,
 * at the first fingerprint probe that selects it (constants baked; for
 * general, every dim dynamic): NVRTC gives PTX naming the entry, and a
 * cubin (ptxas inside NVRTC), for sm_80 and sm_90.
 */
Test(cuda, every_library_variant_compiles_to_ptx_and_cubin_for_sm80_sm90)
{
	int64_t probes[64][KS_MAX_DIMS];
	const ks_kernel_def_t *const *lib;
	int n, i, p, np, v, a, c, done, any;
	ks_dtype_t d, wd;
	ks_mode_t mode;

	need_nvrtc();
	lib = ks_kernels(&n);
	for (i = 0; i < n; i++) {
		const ks_kernel_def_t *def = lib[i];

		np = ks_kernel_probes(def, probes, 64);
		for (v = 0; v < def->nvariants; v++) {
			any = 0;
			for (c = 0; probe_combo(def, c, &d, &wd, &mode) >= 0;
			    c++) {
				if (!probe_combo(def, c, &d, &wd, &mode))
					continue;
				done = 0;
				for (p = 0; p < np && !done; p++) {
					ks_dim_t dims[KS_MAX_DIMS];
					ks_spec_t spec;
					ks_ir_kernel_t *k;
					char err[512];
					int j;

					for (j = 0; j < def->ndims; j++) {
						dims[j].name = def->dims[j];
						dims[j].is_const =
						    probes[p][j] != 0;
						dims[j].value = probes[p][j];
					}
					if (ks_kernel_validate_mixed(def, d, wd,
					    mode, dims, def->ndims,
					    &spec, err, sizeof err) != KS_OK ||
					    strcmp(def->select(&spec),
					    def->variants[v]) != 0)
						continue;
					cr_assert_eq(ks_specialize(&spec, &k,
					    err, sizeof err), KS_OK, "%s", err);
					for (a = 0; a < 2; a++) {
						ks_jit_artifact_t ptx, cubin;
						char entry[128], *t;

						compile(k, archs[a], "ptx", &ptx);
						compile(k, archs[a], "cubin",
						    &cubin);
						t = ptx_text(&ptx);
						snprintf(entry, sizeof entry,
						    ".entry %s(", k->entry);
						cr_assert(strstr(t, entry) !=
						    NULL, "%s", entry);
						cr_assert(memcmp(cubin.bytes,
						    "\177ELF", 4) == 0);
						free(t);
						ks_jit_artifact_close(&ptx);
						ks_jit_artifact_close(&cubin);
					}
					ks_ir_free(k);
					done = 1;
				}
				any |= done;
			}
			/* A variant may be for some dtypes only (rmsnorm's
			 * row_local is not selected in f32; gemm's fast in
			 * mode fast with block-format weights). */
			cr_assert(any, "%s: no probe selects %s", def->name,
			    def->variants[v]);
		}
	}
}

Test(cuda, ptx_of_every_gemm_variant_assembles_with_ptxas)
{
	const char *tool = find_ptxas();
	size_t i, a;
	ks_dtype_t d;

	need_nvrtc();
	if (tool == NULL)
		cr_skip_test("ptxas not found in /usr/local/cuda/bin or PATH");
	for (i = 0; i < sizeof variant_shapes / sizeof *variant_shapes; i++)
		for (d = 0; d < KS_DTYPE_COUNT; d++) {
			ks_ir_kernel_t *k = gpu_gemm_ir(
			    variant_shapes[i].variant, d, variant_shapes[i].M,
			    variant_shapes[i].N, variant_shapes[i].K);

			for (a = 0; a < 2; a++) {
				ks_jit_artifact_t ptx;

				compile(k, archs[a], "ptx", &ptx);
				cr_assert_eq(ptxas(tool, &ptx, archs[a]), 0,
				    "ptxas -arch=%s rejects %s %s", archs[a],
				    k->entry, ks_dtype_name(d));
				/* compute_80 PTX also runs on sm_90. */
				if (a == 0)
					cr_assert_eq(ptxas(tool, &ptx, "sm_90"),
					    0);
				ks_jit_artifact_close(&ptx);
			}
			ks_ir_free(k);
		}
}

/* The hand-built kernels cover every helper and statement form of the
 * emitter (conversions, min/max, the four reductions at 32, 8 and 1 lanes,
 * casts, select, uniform stores): all compile, and assemble. */
Test(cuda, every_emitter_path_compiles_and_assembles)
{
	const char *tool = find_ptxas();
	ks_ir_kernel_t *ks[32];
	int n = 0, i, f, t, l, o;

	need_nvrtc();
	for (f = 0; f < KS_DTYPE_COUNT; f++)
		for (t = 0; t < KS_DTYPE_COUNT; t++)
			ks[n++] = gpu_copy_kernel((ks_dtype_t)f, (ks_dtype_t)t);
	for (o = 0; o < 2; o++)
		for (l = 32; l >= 1; l /= 4)
			for (t = 0; t < 2; t++)
				ks[n++] = gpu_reduce_kernel(l, o ? KS_RED_MAX :
				    KS_RED_SUM, t ? KS_TY_I64 : KS_TY_F32);
	ks[n++] = gpu_elementwise_kernel();
	ks[n++] = gpu_int_kernel();
	ks[n++] = gpu_i32_kernel();
	ks[n++] = gpu_bytes_kernel();   /* bytes, bit operators, f16bits */
	for (o = 0; o < KS_UN_COUNT; o++)
		if (o != KS_UN_F16)     /* of i32: gpu_bytes_kernel's */
			ks[n++] = gpu_un_kernel((ks_unop_t)o);
	ks[n] = gpu_unroll_kernel();    /* unrolled: LANES phases */
	cr_assert_eq(ks_pass_run(ks[n++], NULL, 0), KS_OK);
	ks[n++] = gpu_local_kernel();   /* __shared__, __syncthreads */
	cr_assert_leq(n, 32);
	for (i = 0; i < n; i++) {
		ks_jit_artifact_t ptx;

		compile(ks[i], "sm_90", "ptx", &ptx);
		if (tool != NULL)
			cr_assert_eq(ptxas(tool, &ptx, "sm_90"), 0, "kernel %d",
			    i);
		ks_jit_artifact_close(&ptx);
		ks_ir_free(ks[i]);
	}
	if (tool == NULL)
		cr_log_warn("ptxas not found: compiled only");
}

/*
 * The numerical options show in the PTX of the element-wise kernel: its
 * a*b+c is a separate mul.rn and add.rn (no contraction, and .rn keeps
 * ptxas from fusing them), its fma is fma.rn, its division div.rn (IEEE,
 * not div.approx or div.full), and nothing flushes subnormals (.ftz).
 */
Test(cuda, ptx_keeps_mul_add_separate_and_division_ieee)
{
	ks_ir_kernel_t *k = gpu_elementwise_kernel();
	ks_jit_artifact_t ptx;
	char *t;

	need_nvrtc();
	compile(k, "sm_90", "ptx", &ptx);
	t = ptx_text(&ptx);
	cr_assert(strstr(t, "mul.rn.f32") != NULL, "no mul.rn.f32");
	cr_assert(strstr(t, "add.rn.f32") != NULL, "no add.rn.f32");
	cr_assert(strstr(t, "fma.rn.f32") != NULL, "no fma.rn.f32");
	cr_assert(strstr(t, "div.rn.f32") != NULL, "no div.rn.f32");
	cr_assert(strstr(t, "div.approx") == NULL, "approximate division");
	cr_assert(strstr(t, "div.full") == NULL, "approximate division");
	cr_assert(strstr(t, ".ftz") == NULL, "flush to zero");
	free(t);
	ks_jit_artifact_close(&ptx);
	ks_ir_free(k);
}

/*
 * Unary math compiles and assembles; sqrt is sqrt.rn.f32 (IEEE, from
 * --prec-sqrt=true), never sqrt.approx, and flushes nothing.  exp is
 * kspec's own sequence (bitwise with the other backends; on an H200,
 * bench/gpu/run.sh found every kernel with exp bitwise equal to ref/),
 * so its PTX has no ex2.
 */
Test(cuda, unary_math_compiles_and_sqrt_is_ieee_in_the_ptx)
{
	static const ks_unop_t ops[] = { KS_UN_SQRT, KS_UN_NEG, KS_UN_ABS,
		KS_UN_EXP };
	const char *tool = find_ptxas();
	size_t o;

	need_nvrtc();
	for (o = 0; o < sizeof ops / sizeof ops[0]; o++) {
		ks_ir_kernel_t *k = gpu_un_kernel(ops[o]);
		ks_jit_artifact_t ptx;
		char *t;

		compile(k, "sm_90", "ptx", &ptx);
		if (tool != NULL)
			cr_assert_eq(ptxas(tool, &ptx, "sm_90"), 0, "%s",
			    ks_unop_name(ops[o]));
		t = ptx_text(&ptx);
		/* kspec's exp is its own sequence of fma and bit operations
		 * (ref_expf), never the hardware's approximate ex2. */
		if (ops[o] == KS_UN_EXP)
			cr_assert(strstr(t, "ex2.") == NULL, "exp uses ex2:\n%s",
			    t);
		if (ops[o] == KS_UN_SQRT) {
			cr_assert(strstr(t, "sqrt.rn.f32") != NULL,
			    "no sqrt.rn.f32");
			cr_assert(strstr(t, "sqrt.approx") == NULL,
			    "approximate sqrt");
			cr_assert(strstr(t, ".ftz") == NULL, "flush to zero");
		}
		free(t);
		ks_jit_artifact_close(&ptx);
		ks_ir_free(k);
	}
}

/* Compiling the emitted text with ks_jit_cuda_compile_text (what
 * bench/gpu/check does with its schedule trials) is the backend's own
 * compile: the same PTX, byte for byte. */
Test(cuda, compile_text_of_the_emitted_source_is_the_compile)
{
	ks_ir_kernel_t *k = gpu_gemm_ir("gemv_m1", KS_DTYPE_BF16, 1, 4096,
	    4096);
	char *src, err[512];
	ks_jit_artifact_t a, b;

	need_nvrtc();
	src = gpu_source(&ks_backend_cuda, k);
	compile(k, "sm_90", "ptx", &a);
	cr_assert_eq(ks_jit_cuda_compile_text(src, "t.cu", "sm_90", "ptx", &b,
	    err, sizeof err), KS_OK, "%s", err);
	cr_assert_eq(a.len, b.len);
	cr_assert(memcmp(a.bytes, b.bytes, a.len) == 0);
	ks_jit_artifact_close(&b);
	cr_assert_eq(ks_jit_cuda_compile_text("not C++ {", "t.cu", "sm_90",
	    "ptx", &b, err, sizeof err), KS_E_COMPILE);
	cr_assert(strstr(err, "t.cu") != NULL, "no program log: %s", err);
	cr_assert_eq(ks_jit_cuda_compile_text(src, "t.cu", "auto", "ptx", &b,
	    err, sizeof err), KS_E_BAD_TARGET);
	free(src);
	ks_jit_artifact_close(&a);
	ks_ir_free(k);
}

/* Loads from global memory in PTX text T. */
static int global_loads(const char *t)
{
	int n = 0;

	while ((t = strstr(t, "ld.global")) != NULL) {
		n++;
		t++;
	}
	return n;
}

/*
 * gemv_m1's k loop carries the unroll hint 4 (k_gemm.c: on an H200, bf16
 * N=14336 K=4096 ran at 0.75 of a device copy's bandwidth with it and 0.61
 * without), emitted as `#pragma unroll 4` right before the loop, so the
 * loop body of the PTX issues the loads of 4 chunks: 4 x (8 rows of W + 1
 * of x).  Without the hint NVRTC unrolls twice; the planted removal is
 * caught by the count.
 */
Test(cuda, gemv_m1_keeps_four_chunks_of_loads_in_flight)
{
	ks_ir_kernel_t *k = gpu_gemm_ir("gemv_m1", KS_DTYPE_BF16, 1, 14336,
	    4096);
	ks_jit_artifact_t ptx;
	char *src, *t;
	int hinted;

	need_nvrtc();
	src = gpu_source(&ks_backend_cuda, k);
	cr_assert(strstr(src, "#pragma unroll 4\n\tfor (ks_i64 v_k0 = ") !=
	    NULL, "%s", src);
	free(src);
	compile(k, "sm_90", "ptx", &ptx);
	t = ptx_text(&ptx);
	hinted = global_loads(t);
	cr_assert_geq(hinted, 4 * 9, "%d loads:\n%s", hinted, t);
	free(t);
	ks_jit_artifact_close(&ptx);

	ks_test_clear_hints(k->body);
	compile(k, "sm_90", "ptx", &ptx);
	t = ptx_text(&ptx);
	cr_assert_lt(global_loads(t), hinted, "the hint made no difference");
	free(t);
	ks_jit_artifact_close(&ptx);
	ks_ir_free(k);
}

/* ---- targets, formats, availability ---- */

Test(cuda, targets_are_explicit_sm_archs_this_nvrtc_supports)
{
	static const char *const bad[] = { "sm_9", "sm_090", "sm_90a",
		"compute_90", "sm_1000", "", "sm_", "sm_90 ", "sm_12" };
	char t[KS_MAX_NAME], err[1024];
	size_t i;

	cr_assert_str_eq(ks_backend_cuda.default_format, "ptx");
	cr_assert_eq(ks_backend_cuda.check_format("cubin"), KS_OK);
	cr_assert_eq(ks_backend_cuda.check_format("so"), KS_E_BAD_FORMAT);
	cr_assert_eq(ks_backend_cuda.resolve_target("auto", t, sizeof t, err,
	    sizeof err), KS_E_BAD_TARGET);
	cr_assert(strstr(err, "cuda needs an explicit target such as "
	    "sm_90") != NULL, "%s", err);
	conform_formats(&C);
	for (i = 0; i < 2; i++) {
		cr_assert_eq(ks_backend_cuda.resolve_target(archs[i], t,
		    sizeof t, err, sizeof err), KS_OK, "%s", err);
		cr_assert_str_eq(t, archs[i]);
	}
	for (i = 0; i < sizeof bad / sizeof *bad; i++) {
		cr_assert_eq(ks_backend_cuda.resolve_target(bad[i], t,
		    sizeof t, err, sizeof err), KS_E_BAD_TARGET, "'%s'",
		    bad[i]);
		cr_assert(strstr(err, "sm_90") != NULL, "the error lists the "
		    "archs: %s", err);
	}
}

/* Criterion runs each test in its own process: NVRTC is not loaded yet. */
Test(cuda, no_nvrtc_means_unavailable_with_what_was_tried)
{
	ks_ir_kernel_t *k = gpu_copy_kernel(KS_DTYPE_F32, KS_DTYPE_BF16);
	char err[512] = "", *src;

	conform_unavailable(&C);
	cr_assert_eq(ks_backend_cuda.available(err, sizeof err),
	    KS_E_BACKEND_UNAVAILABLE);
	cr_assert(strstr(err, "KSPEC_NVRTC") != NULL, "%s", err);
	src = gpu_source(&ks_backend_cuda, k);
	cr_assert(strstr(src, "__global__") != NULL);
	free(src);
	ks_ir_free(k);
}

/* KSPEC_NVRTC pins one library when the search is off. */
Test(cuda, kspec_nvrtc_names_the_library_to_load)
{
	static const char path[] = "/usr/local/cuda/lib64/libnvrtc.so";
	struct stat st;
	char err[512];

	if (stat(path, &st) != 0)
		cr_skip_test("%s is not installed", path);
	setenv("KSPEC_NVRTC_DISABLE", "1", 1);
	setenv("KSPEC_NVRTC", path, 1);
	cr_assert_eq(ks_backend_cuda.available(err, sizeof err), KS_OK, "%s",
	    err);
}

Test(cuda, invalid_ir_is_refused_before_nvrtc)
{
	conform_invalid_ir(&C);
}

/* ---- threads ---- */

/* The first calls race on loading NVRTC (pthread_once) and then compile
 * concurrently without a lock: all succeed, with the same PTX. */
Test(cuda, concurrent_first_compiles_are_safe_and_identical)
{
	ks_ir_kernel_t *k = gpu_gemm_ir("small_m", KS_DTYPE_F16, 3, 0, 0);
	ks_jit_artifact_t a[CONFORM_THREADS];
	int i;

	conform_concurrent(&C, k, "sm_90", a);
	for (i = 0; i < CONFORM_THREADS; i++)
		ks_jit_artifact_close(&a[i]);
	ks_ir_free(k);
}

/* bench/gpu/run.sh builds the GPU check from this checkout's sources with
 * only a C compiler and the CUDA headers (a GPU machine has nothing
 * else); this builds it the same way, so a source the check needs and
 * the script leaves out fails here, not on the lent GPU. */
Test(cuda, the_gpu_check_builds_from_this_checkout, .timeout = 120)
{
	const char *home = getenv("CUDA_HOME");
	char hdr[512];
	int rc;

	snprintf(hdr, sizeof hdr, "%s/include/cuda.h", home && *home ? home :
	    "/usr/local/cuda");
	if (access(hdr, R_OK) != 0)
		cr_skip_test("no CUDA headers at %s", hdr);
	rc = system("bench/gpu/run.sh build >/dev/null");
	cr_assert_eq(rc, 0, "bench/gpu/run.sh build failed (status %d)", rc);
	cr_assert_eq(access("build/gpu/check", X_OK), 0);
}
