/*
 * Shared by the tests that run kernels on OpenCL (PoCL here): opening the
 * device "auto" resolves to, compiling and loading a kernel through the
 * backend, and launching it with the arguments of gpu.h (gpu_arg_t, one per
 * declared parameter) in the order of the reply's params.  A test that
 * needs a device skips visibly (cr_skip_test) where none exists.
 */
#ifndef KS_TEST_CL_H
#define KS_TEST_CL_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include "gpu.h"

/* ---- the device ---- */

typedef struct {
	char target[KS_MAX_NAME];
	cl_platform_id platform;
	cl_device_id device;
	cl_context ctx;
	cl_command_queue queue;
} clenv_t;

/* Opens the device "auto" resolves to, or skips the test visibly. */
static inline void env_open(clenv_t *e)
{
	char err[512];
	void *p, *d;
	cl_int rc;

	memset(e, 0, sizeof(*e));
	if (ks_backend_opencl.available(err, sizeof err) != KS_OK)
		cr_skip_test("no OpenCL device: %s", err);
	cr_assert_eq(ks_backend_opencl.resolve_target("auto", e->target,
	    sizeof e->target, err, sizeof err), KS_OK, "%s", err);
	cr_assert_eq(ks_jit_opencl_device(e->target, &p, &d, err, sizeof err),
	    KS_OK, "%s", err);
	e->platform = p;
	e->device = d;
	e->ctx = clCreateContext(NULL, 1, &e->device, NULL, NULL, &rc);
	cr_assert_not_null(e->ctx, "clCreateContext: %d", rc);
	e->queue = clCreateCommandQueue(e->ctx, e->device, 0, &rc);
	cr_assert_not_null(e->queue, "clCreateCommandQueue: %d", rc);
}

static inline void env_close(clenv_t *e)
{
	clReleaseCommandQueue(e->queue);
	clReleaseContext(e->ctx);
}

/* A kernel object built from a program binary or a source. */
typedef struct {
	cl_program prog;
	cl_kernel kern;
} clprog_t;

static inline void prog_from_binary(clenv_t *e, const ks_jit_artifact_t *a,
    const char *entry, clprog_t *out)
{
	const unsigned char *bytes = a->bytes;
	cl_int rc, status;

	cr_assert_str_eq(a->format, "clbin");
	out->prog = clCreateProgramWithBinary(e->ctx, 1, &e->device, &a->len,
	    &bytes, &status, &rc);
	cr_assert_not_null(out->prog, "clCreateProgramWithBinary: %d/%d", rc,
	    status);
	rc = clBuildProgram(out->prog, 1, &e->device, NULL, NULL, NULL);
	cr_assert_eq(rc, CL_SUCCESS, "clBuildProgram of the binary: %d", rc);
	out->kern = clCreateKernel(out->prog, entry, &rc);
	cr_assert_not_null(out->kern, "clCreateKernel %s: %d", entry, rc);
}

/* Compiles K with the backend and loads the artifact. */
static inline void prog_compile(clenv_t *e, const ks_ir_kernel_t *k,
    clprog_t *out)
{
	ks_jit_artifact_t a;
	char err[8192];

	cr_assert_eq(ks_backend_opencl.compile(k, e->target, "clbin", &a, err,
	    sizeof err), KS_OK, "opencl compile: %s", err);
	cr_assert_gt(a.len, 0);
	prog_from_binary(e, &a, k->entry, out);
	ks_jit_artifact_close(&a);
}

/* Builds SOURCE (e.g. a mutated emitted text) with the backend's options. */
static inline void prog_from_source(clenv_t *e, const char *source,
    const char *entry, clprog_t *out)
{
	cl_int rc;

	out->prog = clCreateProgramWithSource(e->ctx, 1, &source, NULL, &rc);
	cr_assert_not_null(out->prog);
	rc = clBuildProgram(out->prog, 1, &e->device, "-cl-std=CL1.2 "
	    "-cl-fp32-correctly-rounded-divide-sqrt", NULL, NULL);
	cr_assert_eq(rc, CL_SUCCESS, "clBuildProgram: %d", rc);
	out->kern = clCreateKernel(out->prog, entry, &rc);
	cr_assert_not_null(out->kern);
}

static inline void prog_close(clprog_t *p)
{
	clReleaseKernel(p->kern);
	clReleaseProgram(p->prog);
}

/*
 * Launches P for K: one cl_mem per buffer argument (filled from its host
 * memory), the scalars as cl_long / cl_float, in declaration order of the
 * unbound parameters (the reply's params); global = groups * nlanes, local
 * = nlanes.  Written buffers are read back into their host memory.
 */
static inline void run_cl(clenv_t *e, const ks_ir_kernel_t *k, clprog_t *p,
    gpu_arg_t *args)
{
	cl_mem mem[32] = { 0 };
	size_t local = (size_t)k->nlanes, global;
	cl_uint slot = 0;
	cl_int rc;
	int i;

	global = (size_t)gpu_groups(k, args) * local;
	for (i = 0; i < k->nparams; i++) {
		const ks_ir_param_t *pa = &k->params[i];

		if (pa->kind == KS_PARAM_SCALAR && pa->bound)
			continue;
		if (pa->kind == KS_PARAM_BUFFER) {
			mem[i] = clCreateBuffer(e->ctx, CL_MEM_READ_WRITE |
			    CL_MEM_COPY_HOST_PTR, args[i].bytes, args[i].data,
			    &rc);
			cr_assert_not_null(mem[i], "clCreateBuffer: %d", rc);
			rc = clSetKernelArg(p->kern, slot++, sizeof(cl_mem),
			    &mem[i]);
		} else if (pa->type == KS_TY_I64) {
			cl_long v = *(const int64_t *)args[i].data;

			rc = clSetKernelArg(p->kern, slot++, sizeof v, &v);
		} else {
			cl_float v = *(const float *)args[i].data;

			rc = clSetKernelArg(p->kern, slot++, sizeof v, &v);
		}
		cr_assert_eq(rc, CL_SUCCESS, "clSetKernelArg %s: %d", pa->name,
		    rc);
	}
	if (global > 0) {
		rc = clEnqueueNDRangeKernel(e->queue, p->kern, 1, NULL, &global,
		    &local, 0, NULL, NULL);
		cr_assert_eq(rc, CL_SUCCESS, "clEnqueueNDRangeKernel: %d", rc);
	}
	for (i = 0; i < k->nparams; i++) {
		if (mem[i] == NULL)
			continue;
		if (k->params[i].access & KS_ACCESS_WRITE) {
			rc = clEnqueueReadBuffer(e->queue, mem[i], CL_TRUE, 0,
			    args[i].bytes, args[i].data, 0, NULL, NULL);
			cr_assert_eq(rc, CL_SUCCESS, "read back: %d", rc);
		}
		clReleaseMemObject(mem[i]);
	}
	cr_assert_eq(clFinish(e->queue), CL_SUCCESS);
}

/* ---- a kernel compiled once, run on many inputs ---- */

/* On OpenCL when env is set, else on the cpu backend. */
typedef struct {
	ks_ir_kernel_t *k;      /* owned */
	clenv_t *env;           /* NULL: the cpu backend */
	clprog_t cl;
	gpu_cpu_build_t cpu;
} kt_prog_t;

/* Compiles and loads K (which P then owns) for ENV, or the cpu. */
static inline void kt_prog_open(kt_prog_t *p, ks_ir_kernel_t *k,
    clenv_t *env)
{
	memset(p, 0, sizeof(*p));
	p->k = k;
	p->env = env;
	if (env != NULL)
		prog_compile(env, k, &p->cl);
	else
		gpu_cpu_build(k, &p->cpu);
}

/* Runs the whole grid of P on ARGS (one per declared parameter). */
static inline void kt_prog_run(kt_prog_t *p, gpu_arg_t *args)
{
	if (p->env != NULL)
		run_cl(p->env, p->k, &p->cl, args);
	else
		gpu_cpu_launch(p->k, p->cpu.fn, args);
}

static inline void kt_prog_close(kt_prog_t *p)
{
	if (p->env != NULL)
		prog_close(&p->cl);
	else
		gpu_cpu_build_close(&p->cpu);
	ks_ir_free(p->k);
}

#endif
