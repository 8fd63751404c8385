/*
 * The CUDA driver, loaded at run time: libcuda.so.1 through dlopen, never
 * linked, so that a program builds and runs without the CUDA toolkit.  The
 * few driver types and entry points that examples/llama and
 * bench/gpu/first call, as the driver's ABI defines them (the _v2 entry
 * points of 64-bit device pointers).  Header-only: each program has its
 * own copy of the table.
 */
#ifndef KS_EXAMPLES_CU_DRIVER_H
#define KS_EXAMPLES_CU_DRIVER_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef int cu_result_t;        /* CUresult: 0 is CUDA_SUCCESS */

static struct {
	cu_result_t (*Init)(unsigned);
	cu_result_t (*DeviceGet)(int *, int);
	cu_result_t (*DeviceGetAttribute)(int *, int, int);
	cu_result_t (*PrimaryCtxRetain)(void **, int);
	cu_result_t (*PrimaryCtxRelease)(int);
	cu_result_t (*CtxSetCurrent)(void *);
	cu_result_t (*CtxSynchronize)(void);
	cu_result_t (*ModuleLoadData)(void **, const void *);
	cu_result_t (*ModuleUnload)(void *);
	cu_result_t (*ModuleGetFunction)(void **, void *, const char *);
	cu_result_t (*MemAlloc)(unsigned long long *, size_t);
	cu_result_t (*MemFree)(unsigned long long);
	cu_result_t (*MemcpyHtoD)(unsigned long long, const void *, size_t);
	cu_result_t (*MemcpyDtoH)(void *, unsigned long long, size_t);
	cu_result_t (*MemcpyDtoD)(unsigned long long, unsigned long long,
	    size_t);
	cu_result_t (*MemsetD8)(unsigned long long, unsigned char, size_t);
	cu_result_t (*LaunchKernel)(void *, unsigned, unsigned, unsigned,
	    unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
	cu_result_t (*GetErrorString)(cu_result_t, const char **);
} cu;

enum {
	CU_CC_MAJOR = 75,       /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_* */
	CU_CC_MINOR = 76,
};

/* Loads the driver's entry points into cu: NULL, or why it cannot (no
 * libcuda.so.1: no driver). */
static const char *cu_driver_load(void)
{
	static const struct {
		const char *name;
		size_t off;
	} syms[] = {
		{ "cuInit", offsetof(__typeof__(cu), Init) },
		{ "cuDeviceGet", offsetof(__typeof__(cu), DeviceGet) },
		{ "cuDeviceGetAttribute",
		    offsetof(__typeof__(cu), DeviceGetAttribute) },
		{ "cuDevicePrimaryCtxRetain",
		    offsetof(__typeof__(cu), PrimaryCtxRetain) },
		{ "cuDevicePrimaryCtxRelease_v2",
		    offsetof(__typeof__(cu), PrimaryCtxRelease) },
		{ "cuCtxSetCurrent", offsetof(__typeof__(cu), CtxSetCurrent) },
		{ "cuCtxSynchronize",
		    offsetof(__typeof__(cu), CtxSynchronize) },
		{ "cuModuleLoadData",
		    offsetof(__typeof__(cu), ModuleLoadData) },
		{ "cuModuleUnload", offsetof(__typeof__(cu), ModuleUnload) },
		{ "cuModuleGetFunction",
		    offsetof(__typeof__(cu), ModuleGetFunction) },
		{ "cuMemAlloc_v2", offsetof(__typeof__(cu), MemAlloc) },
		{ "cuMemFree_v2", offsetof(__typeof__(cu), MemFree) },
		{ "cuMemcpyHtoD_v2", offsetof(__typeof__(cu), MemcpyHtoD) },
		{ "cuMemcpyDtoH_v2", offsetof(__typeof__(cu), MemcpyDtoH) },
		{ "cuMemcpyDtoD_v2", offsetof(__typeof__(cu), MemcpyDtoD) },
		{ "cuMemsetD8_v2", offsetof(__typeof__(cu), MemsetD8) },
		{ "cuLaunchKernel", offsetof(__typeof__(cu), LaunchKernel) },
		{ "cuGetErrorString",
		    offsetof(__typeof__(cu), GetErrorString) },
	};
	static char why[512];
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	size_t i;

	if (lib == NULL) {
		snprintf(why, sizeof why, "no CUDA driver: libcuda.so.1 cannot "
		    "be loaded (%s)", dlerror());
		return why;
	}
	for (i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		void *f = dlsym(lib, syms[i].name);

		if (f == NULL) {
			snprintf(why, sizeof why, "libcuda.so.1 lacks %s",
			    syms[i].name);
			return why;
		}
		memcpy((char *)&cu + syms[i].off, &f, sizeof f);
	}
	return NULL;
}

#endif
