/*
 * jit: backends that turn a specialized kernel into an artifact.
 *
 * One table of function pointers per backend (jit/cpu.c, jit/cuda.c,
 * jit/opencl.c; the GPU ones share the C emitter of jit/emit_c.c); nothing
 * outside the backend's file switches on the backend.  All functions are
 * safe to call from any thread; compile may run concurrently on several
 * threads (libgccjit serializes internally).  docs/backends.md describes
 * each backend: targets, formats, options, identity, launch, numerics.
 */
#ifndef KS_JIT_H
#define KS_JIT_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "../specialize/specialize.h"

/* Bumped whenever the lowering of IR to any backend changes output in a way
 * the compiler identity does not show; part of every request key, and
 * checked by a compile worker against the job it is given. */
#define KS_CODEGEN_VERSION 4

typedef struct {
	uint8_t *bytes;         /* malloc'd; caller frees with ks_jit_artifact_close */
	size_t len;
	char format[8];         /* "so", "ptx", "cubin", "clbin" */
	double compile_ms;      /* wall time of the backend compile */
} ks_jit_artifact_t;

void ks_jit_artifact_close(ks_jit_artifact_t *a);

/* One argument of a run (ks_backend_t.run), per declared parameter of the
 * kernel: a buffer's host memory and its size in bytes, or a pointer to a
 * scalar's value (an int64_t or a float).  Bound scalars are skipped. */
typedef struct {
	void *data;
	size_t bytes;
} ks_jit_arg_t;

/* The most parameters a kernel that run takes may declare. */
#define KS_JIT_MAX_ARGS 32

typedef struct ks_backend {
	const char *name;               /* "cpu" */
	const char *default_format;     /* "so" */
	/* 1 when compiling one kernel twice gives the same bytes (the key
	 * audit compares them; docs/operations.md); 0 when the compiler puts
	 * build ids or temporary names in them, and the audit compares the
	 * artifact's description only. */
	int same_bytes;
	/* KS_OK when usable here; else an error with a reason in err. */
	int (*available)(char *err, size_t errlen);
	/* Resolves a requested target ("auto" or explicit) to the explicit one
	 * that goes into the key ("x86-64-v4").  KS_E_BAD_TARGET if invalid. */
	int (*resolve_target)(const char *requested, char *out, size_t outlen,
	    char *err, size_t errlen);
	/* KS_OK if the format is produced by this backend, else
	 * KS_E_BAD_FORMAT. */
	int (*check_format)(const char *format);
	/* Appends the compiler identity for a resolved target: compiler and
	 * version, every option that changes output.  Part of the key and of
	 * the hello reply. */
	int (*identity)(const char *target, ks_buf_t *out);
	/* Compiles K for the resolved target and format. */
	int (*compile)(const ks_ir_kernel_t *k, const char *target,
	    const char *format, ks_jit_artifact_t *out, char *err,
	    size_t errlen);
	/* Appends the source text compile would hand to the backend's
	 * compiler for K (CUDA C, OpenCL C): byte-deterministic, independent
	 * of target and format, needs no compiler.  NULL where the backend
	 * has no source form (cpu builds gccjit calls). */
	int (*source)(const ks_ir_kernel_t *k, ks_buf_t *out, char *err,
	    size_t errlen);
	/* Writes up to MAX accepted explicit targets, oldest first, and
	 * returns how many (or a negative error).  With "auto", these are
	 * every target a request may name; a daemon resolves requests from
	 * this list (hello lists it for a backend without "auto"). */
	int (*targets)(char (*names)[KS_MAX_NAME + 1], int max);
	/* Runs artifact A of K, compiled for the resolved TARGET, once over
	 * its whole grid in this process, on host memory: ARGS has one entry
	 * per declared parameter of K; written buffers are updated in place.
	 * For the canaries (exec/canary.c).  NULL where the backend cannot
	 * run its artifacts here (cuda). */
	int (*run)(const ks_ir_kernel_t *k, const char *target,
	    const ks_jit_artifact_t *a, ks_jit_arg_t *args, char *err,
	    size_t errlen);
} ks_backend_t;

extern const ks_backend_t ks_backend_cpu, ks_backend_cuda,
    ks_backend_opencl;

/* Compiles CUDA C text SRC as the cuda backend compiles the text it
 * emits (jit/cuda.c); NAME names the program in NVRTC's messages. */
int ks_jit_cuda_compile_text(const char *src, const char *name,
    const char *target, const char *format, ks_jit_artifact_t *out,
    char *err, size_t errlen);

/* The backends, in a fixed order; NULL-safe lookup by name. */
const ks_backend_t *const *ks_backends(int *count);
const ks_backend_t *ks_backend_find(const char *name);

/* ---- cpu artifacts in this process (tests, benchmarks) ---- */

/* The entry of a cpu artifact (docs/backends.md). */
typedef void (*ks_jit_cpu_entry_t)(void **params, uint64_t group_begin,
    uint64_t group_end);

typedef struct ks_jit_cpu_lib ks_jit_cpu_lib_t;

/*
 * Loads a cpu artifact from memory (memfd_create + dlopen of
 * /proc/self/fd/N, no file on disk) and looks up ENTRY.  On success *lib
 * (caller frees with ks_jit_cpu_unload) and *fn are set.  Errors: KS_E_IO,
 * KS_E_NOT_FOUND (no such symbol), with a message in err.
 */
int ks_jit_cpu_load(const void *bytes, size_t len, const char *entry,
    ks_jit_cpu_lib_t **lib, ks_jit_cpu_entry_t *fn, char *err,
    size_t errlen);
void ks_jit_cpu_unload(ks_jit_cpu_lib_t *lib);
/* Calls FN, the loaded entry of K, over K's whole grid with ARGS (as the
 * backend's run takes them).  KS_E_INVAL when the grid is not
 * evaluable. */
int ks_jit_cpu_call(const ks_ir_kernel_t *k, ks_jit_cpu_entry_t fn,
    ks_jit_arg_t *args);

/* The number of work-groups of K's grid with ARGS (as run takes them):
 * KS_OK and *groups, or KS_E_INVAL when the grid is not evaluable. */
int ks_jit_groups(const ks_ir_kernel_t *k, const ks_jit_arg_t *args,
    int64_t *groups);

/* ---- opencl devices in this process (tests, benchmarks) ---- */

/*
 * The OpenCL platform and device (a cl_platform_id and a cl_device_id) that
 * TARGET names: "auto", a resolved name ("pocl:cpu-0") or "<platform
 * index>:<device index>", as the opencl backend resolves it.  Errors:
 * KS_E_BACKEND_UNAVAILABLE, KS_E_BAD_TARGET, with a message in err.
 */
int ks_jit_opencl_device(const char *target, void **platform,
    void **device, char *err, size_t errlen);

/* Appends the assembly the cpu backend generates for K at the resolved
 * TARGET, with the options of compile; for checking vectorization. */
int ks_jit_cpu_assembly(const ks_ir_kernel_t *k, const char *target,
    ks_buf_t *out, char *err, size_t errlen);

#endif
