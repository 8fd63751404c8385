/*
 * bench/gpu/first: the time from a fresh process's start to a finished
 * kspec kernel on the GPU, with the daemon's cache warm, as an inference
 * server's first kernel takes it: connect to kspecd, get the decode GEMV
 * (gemm, M=1, N=14336, K=4096, bf16) as a cubin for this device, load it
 * with the CUDA driver, launch it once on zeroed buffers and wait for it.
 *
 * Prints one line, every figure in ms from the start of main:
 *
 *   kspec-first SOURCE cuda MS get MS load MS done MS
 *
 * cuda: the driver loaded and device 0's primary context current (its
 * sm_XY names the target); get: connected and the artifact received
 * (SOURCE is the reply's "source": memory or disk on a warm cache); load:
 * the module loaded; done: the launch finished (cuCtxSynchronize).
 * bench/gpu/run.sh runs it in fresh processes beside
 * bench/gpu/first_triton.py, Triton's time from import to a finished
 * kernel from its cache.
 *
 * libcuda.so.1 is loaded with dlopen (examples/cu_driver.h, as
 * examples/llama loads it), so this builds without the CUDA toolkit.
 * Usage: first SOCKET.  Exit status 0, 1 on any error (said on stderr),
 * 2 when there is no CUDA device.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../include/kspec.h"
#include "../../examples/cu_driver.h"

enum { N = 14336, K = 4096 };

static double ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 +
	    (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
}

static void check(cu_result_t r, const char *what)
{
	if (r != 0) {
		fprintf(stderr, "first: %s: CUresult %d\n", what, r);
		exit(1);
	}
}

/* The reply's launch.groups and launch.lanes; 0 when absent. */
static void launch_of(const kspec_artifact_t *a, unsigned *groups,
    unsigned *lanes)
{
	cJSON *m = cJSON_ParseWithLength(a->meta, a->meta_len);
	const cJSON *l = cJSON_GetObjectItemCaseSensitive(m, "launch");
	const cJSON *g = cJSON_GetObjectItemCaseSensitive(l, "groups");
	const cJSON *n = cJSON_GetObjectItemCaseSensitive(l, "lanes");

	*groups = cJSON_IsNumber(g) ? (unsigned)g->valuedouble : 0;
	*lanes = cJSON_IsNumber(n) ? (unsigned)n->valuedouble : 0;
	cJSON_Delete(m);
}

int main(int argc, char **argv)
{
	static const kspec_dim_t shape[] = { { "M", 1 }, { "N", N },
		{ "K", K } };
	struct timespec t0;
	kspec_get_spec_t spec = { 0 };
	kspec_client_t *c = NULL;
	kspec_artifact_t *a = NULL;
	unsigned long long x, w, y;
	void *params[3] = { &x, &w, &y }, *ctx, *mod, *fn;
	double t_get, t_cuda, t_load;
	unsigned groups, lanes;
	char sm[16], *image;
	int dev, major = 0, minor = 0, rc;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (argc != 2) {
		fprintf(stderr, "usage: first SOCKET\n");
		return 1;
	}
	if (cu_driver_load() != NULL || cu.Init(0) != 0) {
		printf("no CUDA device\n");
		return 2;
	}
	check(cu.DeviceGet(&dev, 0), "cuDeviceGet");
	check(cu.DeviceGetAttribute(&major, CU_CC_MAJOR, dev), "attribute");
	check(cu.DeviceGetAttribute(&minor, CU_CC_MINOR, dev), "attribute");
	check(cu.PrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	check(cu.CtxSetCurrent(ctx), "cuCtxSetCurrent");
	t_cuda = ms_since(&t0);
	snprintf(sm, sizeof sm, "sm_%d%d", major, minor);

	spec.kernel = "gemm";
	spec.backend = "cuda";
	spec.target = sm;
	spec.format = "cubin";
	spec.dtype = "bf16";
	spec.shape = shape;
	spec.nshape = 3;
	rc = kspec_connect(argv[1], &c);
	if (rc == 0)
		rc = kspec_get(c, &spec, &a);
	if (rc != 0) {
		fprintf(stderr, "first: get: %s: %s\n", kspec_err_name(rc),
		    c ? kspec_last_error(c, NULL) : "no connection");
		return 1;
	}
	t_get = ms_since(&t0);
	launch_of(a, &groups, &lanes);
	if (groups == 0 || lanes == 0) {
		fprintf(stderr, "first: the reply has no launch geometry\n");
		return 1;
	}
	image = calloc(1, a->len + 1);  /* the driver reads to a NUL */
	if (image == NULL)
		return 1;
	memcpy(image, a->bytes, a->len);
	check(cu.ModuleLoadData(&mod, image), "cuModuleLoadData");
	check(cu.ModuleGetFunction(&fn, mod, a->entry), "cuModuleGetFunction");
	t_load = ms_since(&t0);
	check(cu.MemAlloc(&x, 2 * (size_t)K), "cuMemAlloc");
	check(cu.MemAlloc(&w, 2 * (size_t)N * K), "cuMemAlloc");
	check(cu.MemAlloc(&y, 2 * (size_t)N), "cuMemAlloc");
	check(cu.MemsetD8(x, 0, 2 * (size_t)K), "cuMemsetD8");
	check(cu.MemsetD8(w, 0, 2 * (size_t)N * K), "cuMemsetD8");
	check(cu.LaunchKernel(fn, groups, 1, 1, lanes, 1, 1, 0, NULL, params,
	    NULL), "cuLaunchKernel");
	check(cu.CtxSynchronize(), "cuCtxSynchronize");
	printf("kspec-first %s cuda %.1f get %.1f load %.1f done %.1f\n",
	    a->source, t_cuda, t_get, t_load, ms_since(&t0));
	free(image);
	kspec_artifact_free(a);
	kspec_close(c);
	return 0;
}
