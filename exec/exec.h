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

#endif
