/*
 * exec: the compile job, the one interface between the daemon and whatever
 * runs its compiles.  A job is a normalized spec plus everything its key
 * promises about the compiler; its outcome is an artifact's bytes and the
 * description a reply needs (entry, params, launch), or an error.
 *
 * Depends on base, proto, specialize and jit; never on libuv or sqlite, so
 * a compile worker process links only what compiles.
 */
#ifndef KS_EXEC_H
#define KS_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "../jit/jit.h"
#include "../specialize/specialize.h"

/* Longest compiler identity a job carries. */
#define KS_MAX_IDENTITY 1024

/*
 * A compile job.  spec.def is a kernel of the library and spec.dims its
 * parameters in declared order, named by the definition.  identity,
 * fingerprint and codegen are what the request key was made of: whoever
 * runs the job checks them against its own code and compiler and refuses
 * a job they do not describe, so that an artifact is never filed under a
 * key that names another compiler or another definition.
 */
typedef struct {
	ks_spec_t spec;
	const ks_backend_t *backend;
	char target[KS_MAX_NAME + 1];       /* resolved */
	char format[KS_MAX_NAME + 1];
	char identity[KS_MAX_IDENTITY];
	ks_hash_t fingerprint;
	int codegen;
	/* 1: run the known-answer canary of spec.def (ks_canary_run) instead
	 * of compiling spec; the channel's op "canary". */
	int canary;
} ks_job_t;

/* What a job produced. */
typedef struct {
	uint8_t *bytes;                     /* malloc'd */
	size_t len;
	char format[8];
	char variant[KS_MAX_NAME + 1];
	char entry[2 * KS_MAX_NAME + 8];
	char *params;                       /* malloc'd JSON array */
	char *launch;                       /* malloc'd JSON object */
	double compile_ms;                  /* specialize + backend compile */
	/* For a backend whose bytes are not deterministic (same_bytes 0)
	 * and that has a source form: the BLAKE2b-256 (hex) of the source
	 * it compiled, which is; else "". */
	char codegen[KS_HASH_HEX];
} ks_job_out_t;

/*
 * Runs JOB in this process: checks it (above), specializes, compiles and
 * describes the artifact.  On success OUT is filled (release it with
 * ks_job_out_close); on failure a negative ks error with a message in ERR
 * and OUT holds nothing.  Safe to call from any thread.
 */
int ks_job_run(const ks_job_t *job, ks_job_out_t *out, char *err,
    size_t errlen);
void ks_job_out_close(ks_job_out_t *out);

/* Appends K's unbound parameters in entry order as a JSON array, the form
 * of the get reply's params and of the kernels op (docs/protocol.md). */
int ks_exec_params_json(ks_buf_t *out, const ks_ir_kernel_t *k);
/* Appends K's launch geometry as a JSON object: groups (a number, or a C
 * expression of the dynamic dims), lanes, grid and block. */
int ks_exec_launch_json(ks_buf_t *out, const ks_ir_kernel_t *k);

/*
 * ---- the worker channel ----
 *
 * Parent and compile worker talk over a socketpair in proto's frames
 * (u32 header length, u32 payload length, JSON header, raw payload), one
 * request at a time:
 *
 *   worker -> parent  {"op":"ready","pid":N,"channel":V,"codegen":C,
 *                      "fingerprints":["<hex>",...]}       once, at start
 *   parent -> worker  {"op":"ping","seq":S}
 *   worker -> parent  {"seq":S,"ok":true}                  at once: the
 *                      parent's liveness check before it gives work to
 *                      a worker that has been silent (server/pool.c)
 *   parent -> worker  {"op":"probe","seq":S}
 *   worker -> parent  {"seq":S,"ok":true,"probe":{...},"witness":{...}}
 *                      (ks_exec_probe, ks_exec_witness; null when none)
 *   parent -> worker  {"op":"compile","seq":S,"kernel":..,"dtype":..,
 *                      "mode":..,"shape":{..},"dynamic":[..],"backend":..,
 *                      "target":..,"format":..,"identity":..,
 *                      "fingerprint":"<hex>","codegen":C}
 *   worker -> parent  {"seq":S,"ok":true,"variant":..,"entry":..,
 *                      "format":..,"params":[..],"launch":{..},
 *                      "compile_ms":T,"rss":B} + the artifact as payload
 *                  or {"seq":S,"ok":false,"error":{"code":"E_..",
 *                      "message":".."},"compile_ms":T,"rss":B}
 *   parent -> worker  {"op":"canary", the fields of a compile request}
 *                      the known-answer canary of the kernel on the
 *                      backend and target (ks_canary_run; the shape,
 *                      dtype and mode are ignored, the identity,
 *                      fingerprint and codegen checked as a compile's)
 *   worker -> parent  {"seq":S,"ok":true,"variant":"canary","entry":"",
 *                      "format":"txt","params":[],"launch":{},
 *                      "compile_ms":T,"rss":B} + a one-line summary as
 *                      payload: every run equal to the reference
 *                  or {"seq":S,"ok":false,"error":{"code":"E_CANARY",
 *                      "message":"<variant, dtype, first difference>"},
 *                      "rss":B} (or the error that stopped it)
 *
 * rss is the worker's resident set in bytes after the job.  The parent
 * closing its end tells the worker to exit.  V is KS_WORKER_CHANNEL: the
 * parent kills a worker that names another (a change to these messages
 * changes it).
 */

#define KS_WORKER_CHANNEL 2

/* Largest header and payload either side accepts on the channel. */
#define KS_WIRE_MAX_HEADER  (1u << 20)
#define KS_WIRE_MAX_PAYLOAD (256u << 20)

/* The JSON header HDR (LEN bytes, not terminated) of a frame, or NULL
 * when it is not JSON (or out of memory); free it with cJSON_Delete. */
struct cJSON *ks_wire_header_parse(const char *hdr, size_t len);
/* Appends the compile request of JOB (a whole frame) to FRAME. */
int ks_wire_job_encode(const ks_job_t *job, uint64_t seq, ks_buf_t *frame);
/* Parses a compile request; the kernel and backend must be this build's.
 * KS_E_BAD_REQUEST with a message otherwise. */
int ks_wire_job_decode(const char *hdr, size_t len, ks_job_t *job,
    uint64_t *seq, char *err, size_t errlen);
/* Appends the frame prefix and header of a job's outcome (RC, ERRMSG when
 * RC is an error, else OUT, whose bytes are the payload the caller sends
 * after it). */
int ks_wire_out_encode(uint64_t seq, int rc, const char *errmsg,
    const ks_job_out_t *out, uint64_t rss, ks_buf_t *frame);
/*
 * Parses a job's outcome header; PAYLOAD (PLEN bytes) is copied into OUT
 * on success.  *rc is the job's result; the return value says whether the
 * header itself was valid (KS_E_PROTO otherwise).
 */
int ks_wire_out_decode(const char *hdr, size_t len, const void *payload,
    size_t plen, uint64_t *seq, int *rc, char *errmsg, size_t errlen,
    ks_job_out_t *out, uint64_t *rss);

/*
 * Appends what this process's backends are (the probe): for every backend
 * its name, default format, whether it is available (and why not), and
 * for "auto" and each explicit target it lists the resolved target and
 * the compiler identity, or the error that refuses it:
 *
 *   {"codegen":C,"backends":[{"name":"cpu","format":"so",
 *     "available":true,"listed":["x86-64-v4",...],
 *     "targets":[{"requested":"auto","target":"x86-64-v3",
 *                 "identity":"libgccjit ..."},
 *                {"requested":"sm_50","error":{"code":"E_BAD_TARGET",
 *                 "message":"..."}}, ...]}, ...]}
 *
 * The daemon resolves targets from it, so that it never loads a compiler
 * itself.
 */
int ks_exec_probe(ks_buf_t *out);

/*
 * The witness of a probe: what its answer depends on that the daemon can
 * look at again in milliseconds, without a compiler.  A restarted daemon
 * whose saved probe has the same witness answers hits with the saved
 * probe's keys while its workers probe again (docs/architecture.md,
 * "Start").
 *
 * ks_exec_witness appends {"paths":[...],"digest":"<hex>"}: the files
 * this process has mapped (its executable, libgccjit, NVRTC, the OpenCL
 * loader and every driver a probe loaded, ...), their directories and
 * those of LD_LIBRARY_PATH, and the files that decide what a probe would
 * load (/etc/ld.so.cache, the OpenCL vendor directory and its files),
 * with their digest taken now; a worker calls it right after
 * its probe.  KS_E_INVAL, and nothing appended, when the witness cannot
 * be sound: a library mapped from a file since deleted (an upgrade under
 * the running process), more paths or vendor files than it holds.
 * ks_exec_witness_digest hashes the codegen version, then for PATHS in
 * order each one's stat (device, inode, size, mode, modification and
 * change times, or its absence), then the environment
 * variables a compiler or driver reads (KSPEC_NVRTC*, OCL_*, POCL_*,
 * CUDA_*, NVIDIA_*, LD_*, GCC_*, and the test build's identity switch),
 * the first CPU's model and flags and the NVIDIA
 * driver's version and GPUs (/proc/driver/nvidia), where present.
 */
int ks_exec_witness(ks_buf_t *out);
int ks_exec_witness_digest(const char *const *paths, int npaths,
    ks_hash_t *out);

/* The compiler identity of BE for the resolved TARGET, as probes and jobs
 * name it: be->identity, and in the test build (-DKS_TEST_PLANT) with
 * $KSPEC_TEST_PLANT_IDENTITY_SUFFIX and the first line of the file
 * $KSPEC_TEST_PLANT_IDENTITY_SUFFIX_FILE appended, so a test can make one
 * compiler look like another (an upgrade). */
int ks_exec_identity(const ks_backend_t *be, const char *target,
    ks_buf_t *out);

/*
 * ---- known-answer canaries (exec/canary.c) ----
 *
 * The canary of a kernel on a backend: every case of the kernel (small
 * shapes, with constant dims and with every dim dynamic, chosen so that
 * the library's selection picks every variant) in every dtype, compiled
 * as a get's job would be (ks_job_run: JOB's identity, fingerprint and
 * codegen checked), run by the backend in this process on fixed inputs
 * (ref/layout.h, seeded) and compared bit for bit with the plain-C
 * reference of the documented canonical order (ref/kernels.h).  Every
 * kernel of the library is bitwise equal to its reference
 * (docs/kernels.md), so any difference is a miscompile.
 *
 * KS_OK: every run matched, with a one-line summary in SUMMARY and the
 * time taken in *MS.  KS_E_CANARY: the first run that differed, named in
 * ERR (variant, dtype, buffer, first differing index, both values).
 * KS_E_UNSUPPORTED: the backend cannot run artifacts here (its run is
 * NULL).  Other errors: what stopped a compile or a run.
 *
 * In the test build, $KSPEC_TEST_PLANT_CANARY=KERNEL makes the reference
 * of KERNEL one ulp wrong (a planted wrong reference), so that a test
 * sees a canary fail; $KSPEC_TEST_PLANT_CANARY_ONLY=K1,K2,... passes the
 * canaries of every other kernel without running them, for the tests
 * that upgrade a daemon for another reason than its canaries (a whole
 * library's canaries are a minute of compiles on a 2-core machine).
 */
int ks_canary_run(const ks_job_t *job, char *summary, size_t slen,
    double *ms, char *err, size_t errlen);
/* Runs (compiles and launches) the canary of DEF makes on one backend. */
int ks_canary_runs(const ks_kernel_def_t *def);
/* The variant each case of DEF selects in DTYPE, written into NAMES (at
 * most MAX); returns the number of cases.  Tests check that the cases
 * select every variant. */
int ks_canary_variants(const ks_kernel_def_t *def, ks_dtype_t dtype,
    const char **names, int max);
/* The first of N elements of dtype DT whose bits differ between GOT and
 * WANT, or -1; with a difference, DETAIL gets "[i] = 0x.. (v), want
 * 0x.. (v)". */
int64_t ks_canary_diff(const void *got, const void *want, ks_dtype_t dt,
    int64_t n, char *detail, size_t dlen);

/*
 * The compile worker: serves the channel on FD until the parent closes
 * it.  MEMORY_BYTES (0: none) is the worker's own address-space limit.
 * Returns the process's exit status.  Test faults (KSPEC_TEST_FAULTS,
 * docs/architecture.md) are read here and nowhere else.
 */
int ks_worker_main(int fd, uint64_t memory_bytes, long parent);

#endif
