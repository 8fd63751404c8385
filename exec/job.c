/*
 * The compile job: check, specialize, compile, describe (exec.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"

void ks_job_out_close(ks_job_out_t *out)
{
	free(out->bytes);
	free(out->params);
	free(out->launch);
	memset(out, 0, sizeof *out);
}

/* ,"dims":["M","K"] of DIMS ("M,K"). */
static void dims_json(ks_buf_t *m, const char *dims)
{
	const char *d = dims;
	size_t n;

	ks_buf_puts(m, ",\"dims\":[");
	for (;;) {
		n = strcspn(d, ",");
		ks_buf_printf(m, "%s\"%.*s\"", d == dims ? "" : ",", (int)n, d);
		if (!d[n])
			break;
		d += n + 1;
	}
	ks_buf_puts(m, "]");
}

int ks_exec_params_json(ks_buf_t *m, const ks_ir_kernel_t *k)
{
	int i, first = 1;

	ks_buf_puts(m, "[");
	for (i = 0; i < k->nparams; i++) {
		const ks_ir_param_t *p = &k->params[i];

		if (p->bound)
			continue;
		ks_buf_puts(m, first ? "{\"name\":" : ",{\"name\":");
		ks_buf_json_str(m, p->name);
		if (p->kind == KS_PARAM_BUFFER) {
			ks_buf_printf(m, ",\"kind\":\"buffer\",\"dtype\":\"%s\","
			    "\"access\":\"%s\"", p->bytes && p->dtype == KS_DTYPE_F32 ? "u8" :
			    p->type == KS_TY_I32 && !p->bytes ? "i32" :
			    ks_dtype_name(p->dtype),
			    p->access == (KS_ACCESS_READ | KS_ACCESS_WRITE) ?
			    "readwrite" : p->access == KS_ACCESS_WRITE ?
			    "write" : "read");
			if (p->dims)
				dims_json(m, p->dims);
			ks_buf_puts(m, "}");
		} else
			ks_buf_printf(m, ",\"kind\":\"scalar\",\"dtype\":\"%s\"}",
			    ks_ty_name(p->type));
		first = 0;
	}
	return ks_buf_puts(m, "]");
}

/* groups: a number, or a C expression of the dynamic dimensions.  GPUs
 * launch grid x block threads (one block per work-group, one thread per
 * lane); cpu hosts run groups [0, groups). */
int ks_exec_launch_json(ks_buf_t *m, const ks_ir_kernel_t *k)
{
	ks_buf_t grid;
	int rc;

	ks_buf_init(&grid);
	if (k->grid->kind == KS_X_CONST) {
		ks_buf_printf(&grid, "%" PRId64, k->grid->i);
	} else {
		ks_buf_t e;

		ks_buf_init(&e);
		ks_ir_print_c_expr(k, k->grid, &e);
		ks_buf_json_str(&grid, e.data ? e.data : "");
		ks_buf_close(&e);
	}
	rc = ks_buf_printf(m, "{\"groups\":%s,\"lanes\":%d,\"grid\":[%s,1,1],"
	    "\"block\":[%d,1,1]}", grid.data ? grid.data : "0", k->nlanes,
	    grid.data ? grid.data : "0", k->nlanes);
	ks_buf_close(&grid);
	return rc;
}

/* The checks of exec.h: JOB must describe this process's code and
 * compiler. */
static int check_job(const ks_job_t *job, char *err, size_t errlen)
{
	const ks_hash_t *fp;
	ks_buf_t id;
	int rc;

	if (job->codegen != KS_CODEGEN_VERSION) {
		ks_set_err(err, errlen, "job keyed for code generation version "
		    "%d; this compiler has %d", job->codegen,
		    KS_CODEGEN_VERSION);
		return KS_E_INTERNAL;
	}
	fp = ks_kernel_fingerprint(job->spec.def);
	if (!fp || !ks_hash_eq(fp, &job->fingerprint)) {
		ks_set_err(err, errlen, "job keyed for another definition of "
		    "kernel %s", job->spec.def->name);
		return KS_E_INTERNAL;
	}
	ks_buf_init(&id);
	rc = ks_exec_identity(job->backend, job->target, &id);
	if (rc == KS_OK && (!id.data || strcmp(id.data, job->identity))) {
		ks_set_err(err, errlen, "job keyed for compiler '%s'; this "
		    "process has '%s' (restart kspecd after a compiler "
		    "upgrade)", job->identity, id.data ? id.data : "");
		rc = KS_E_INTERNAL;
	} else if (rc != KS_OK) {
		ks_set_err(err, errlen, "backend %s: cannot read the compiler "
		    "identity of %s", job->backend->name, job->target);
	}
	ks_buf_close(&id);
	return rc;
}

#ifdef KS_TEST_PLANT
/*
 * The key audit's planted defect (test builds only, build/tests/kspecd-
 * plant): with KSPEC_TEST_PLANT_CODEGEN set, code generation depends on
 * something the key does not name, the environment.  The entry symbol
 * gets a suffix: a valid kernel, other bytes under the same key, which the
 * audit must catch; with KSPEC_TEST_PLANT_CODEGEN=body the first local
 * variable's name does instead (of a kernel that has one), which changes
 * the emitted source and nothing a reply describes.  The buffer outlives the compile (K points
 * into it).
 */
static void plant_codegen(ks_ir_kernel_t *k, char *buf, size_t len)
{
	const char *how = getenv("KSPEC_TEST_PLANT_CODEGEN");

	if (!how)
		return;
	if (strcmp(how, "body") == 0) {
		if (k->nlocals > 0) {
			snprintf(buf, len, "%s_planted", k->locals[0].name);
			k->locals[0].name = buf;
		}
		return;
	}
	snprintf(buf, len, "%s_planted", k->entry);
	k->entry = buf;
}
#endif

/* OUT's codegen: the hash of the source K compiles from, for a backend
 * whose artifacts differ between honest compiles (the key audit compares
 * this instead). */
static int codegen_sum(const ks_job_t *job, const ks_ir_kernel_t *k,
    ks_job_out_t *out, char *err, size_t errlen)
{
	ks_hash_t h;
	ks_buf_t src;
	int rc;

	if (job->backend->same_bytes || !job->backend->source)
		return KS_OK;
	ks_buf_init(&src);
	rc = job->backend->source(k, &src, err, errlen);
	if (rc == KS_OK && !src.data)
		rc = KS_E_NOMEM;
	if (rc == KS_OK) {
		ks_hash(src.data, src.len, &h);
		ks_hash_hex(&h, out->codegen);
	}
	ks_buf_close(&src);
	return rc;
}

int ks_job_run(const ks_job_t *job, ks_job_out_t *out, char *err,
    size_t errlen)
{
#ifdef KS_TEST_PLANT
	char planted[2 * KS_MAX_NAME + 16];
#endif
	ks_ir_kernel_t *k = NULL;
	ks_jit_artifact_t ja;
	ks_buf_t params, launch;
	uint64_t t0 = ks_now_ns();
	int rc;

	memset(out, 0, sizeof *out);
	memset(&ja, 0, sizeof ja);
	ks_buf_init(&params);
	ks_buf_init(&launch);
	rc = check_job(job, err, errlen);
	if (rc == KS_OK)
		rc = ks_specialize(&job->spec, &k, err, errlen);
#ifdef KS_TEST_PLANT
	if (rc == KS_OK)
		plant_codegen(k, planted, sizeof planted);
#endif
	if (rc == KS_OK)
		rc = job->backend->compile(k, job->target, job->format, &ja,
		    err, errlen);
	if (rc == KS_OK)
		rc = codegen_sum(job, k, out, err, errlen);
	if (rc == KS_OK)
		rc = ks_exec_params_json(&params, k);
	if (rc == KS_OK)
		rc = ks_exec_launch_json(&launch, k);
	if (rc == KS_OK && (strlen(k->variant) >= sizeof out->variant ||
	    strlen(k->entry) >= sizeof out->entry ||
	    strlen(ja.format) >= sizeof out->format)) {
		ks_set_err(err, errlen, "variant or entry name too long");
		rc = KS_E_INTERNAL;
	}
	if (rc == KS_OK) {
		out->bytes = ja.bytes;
		out->len = ja.len;
		ja.bytes = NULL;
		strcpy(out->format, ja.format);
		strcpy(out->variant, k->variant);
		strcpy(out->entry, k->entry);
		out->params = ks_buf_steal(&params, NULL);
		out->launch = ks_buf_steal(&launch, NULL);
		out->compile_ms = (double)(ks_now_ns() - t0) / 1e6;
	}
	if (rc != KS_OK && err && errlen && !err[0])
		ks_set_err(err, errlen, "%s", ks_strerror(rc));
	ks_buf_close(&params);
	ks_buf_close(&launch);
	ks_jit_artifact_close(&ja);
	if (k)
		ks_ir_free(k);
	return rc;
}
