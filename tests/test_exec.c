/*
 * The compile job and the worker channel's messages (exec/): a job is run
 * only when it describes this process's code and compiler; messages
 * survive their round trip.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../exec/exec.h"

static void up(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(exec, .init = up, .timeout = 60);

/* A cpu gemv job keyed for this process. */
static void good_job(ks_job_t *job)
{
	ks_dim_t dims[] = { { "M", 1, 1 }, { "N", 1, 64 }, { "K", 1, 64 } };
	char err[256];
	ks_buf_t id;

	memset(job, 0, sizeof *job);
	cr_assert_eq(ks_kernel_validate(&ks_kernel_gemm, KS_DTYPE_F32,
	    KS_MODE_EXACT, dims, 3, &job->spec, err, sizeof err), KS_OK);
	job->backend = &ks_backend_cpu;
	cr_assert_eq(ks_backend_cpu.resolve_target("auto", job->target,
	    sizeof job->target, err, sizeof err), KS_OK);
	snprintf(job->format, sizeof job->format, "so");
	ks_buf_init(&id);
	cr_assert_eq(ks_backend_cpu.identity(job->target, &id), KS_OK);
	snprintf(job->identity, sizeof job->identity, "%s", id.data);
	ks_buf_close(&id);
	job->fingerprint = *ks_kernel_fingerprint(&ks_kernel_gemm);
	job->codegen = KS_CODEGEN_VERSION;
}

static int run(const ks_job_t *job, char *err, size_t errlen)
{
	ks_job_out_t out;
	int rc;

	err[0] = '\0';
	rc = ks_job_run(job, &out, err, errlen);
	ks_job_out_close(&out);
	return rc;
}

Test(exec, a_job_keyed_for_this_process_compiles)
{
	ks_job_out_t out;
	char err[512];
	ks_job_t job;

	good_job(&job);
	cr_assert_eq(ks_job_run(&job, &out, err, sizeof err), KS_OK, "%s",
	    err);
	cr_assert_gt(out.len, 0);
	cr_assert_str_eq(out.variant, "gemv_m1");
	cr_assert_str_eq(out.format, "so");
	cr_assert_gt(out.compile_ms, 0);
	ks_job_out_close(&out);
}

Test(exec, a_job_for_another_compiler_is_refused)
{
	char err[512];
	ks_job_t job;

	good_job(&job);
	snprintf(job.identity, sizeof job.identity, "libgccjit 13.1.0; "
	    "-march=x86-64-v3 -O3");
	cr_assert_eq(run(&job, err, sizeof err), KS_E_INTERNAL);
	cr_assert(strstr(err, "libgccjit 13.1.0"), "%s", err);
}

Test(exec, a_job_for_another_kernel_definition_is_refused)
{
	char err[512];
	ks_job_t job;

	good_job(&job);
	job.fingerprint.b[0] ^= 1;
	cr_assert_eq(run(&job, err, sizeof err), KS_E_INTERNAL);
	cr_assert(strstr(err, "definition"), "%s", err);
}

Test(exec, a_job_for_another_code_generation_is_refused)
{
	char err[512];
	ks_job_t job;

	good_job(&job);
	job.codegen = KS_CODEGEN_VERSION + 1;
	cr_assert_eq(run(&job, err, sizeof err), KS_E_INTERNAL);
	cr_assert(strstr(err, "code generation"), "%s", err);
}

Test(exec, a_job_survives_the_channel)
{
	ks_job_t job, back;
	char err[256];
	uint64_t seq;
	ks_buf_t f;
	int i;

	good_job(&job);
	job.spec.dims[2].is_const = 0;    /* K dynamic */
	job.spec.dims[2].value = 0;
	ks_buf_init(&f);
	cr_assert_eq(ks_wire_job_encode(&job, 77, &f), KS_OK);
	cr_assert_eq(ks_wire_job_decode(f.data + 8, f.len - 8, &back, &seq,
	    err, sizeof err), KS_OK, "%s", err);
	cr_assert_eq(seq, 77);
	cr_assert_eq(back.spec.def, job.spec.def);
	cr_assert_eq(back.spec.ndims, job.spec.ndims);
	for (i = 0; i < job.spec.ndims; i++) {
		cr_assert_str_eq(back.spec.dims[i].name, job.spec.dims[i].name);
		cr_assert_eq(back.spec.dims[i].is_const,
		    job.spec.dims[i].is_const);
		cr_assert_eq(back.spec.dims[i].value, job.spec.dims[i].value);
	}
	cr_assert_eq(back.backend, job.backend);
	cr_assert_str_eq(back.target, job.target);
	cr_assert_str_eq(back.identity, job.identity);
	cr_assert(ks_hash_eq(&back.fingerprint, &job.fingerprint));
	cr_assert_eq(back.codegen, job.codegen);
	ks_buf_close(&f);
}

Test(exec, a_malformed_request_is_refused)
{
	static const char *const bad[] = {
		"{}", "[1]", "{\"seq\":1,\"kernel\":\"nope\"}",
		"{\"seq\":1,\"kernel\":\"gemm\",\"backend\":\"cpu\","
		    "\"dtype\":\"f32\",\"mode\":\"exact\",\"shape\":{\"M\":0,"
		    "\"N\":1,\"K\":1},\"dynamic\":[]}",
	};
	char err[256];
	ks_job_t job;
	uint64_t seq;
	size_t i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_neq(ks_wire_job_decode(bad[i], strlen(bad[i]), &job,
		    &seq, err, sizeof err), KS_OK, "%s", bad[i]);
}

Test(exec, an_outcome_survives_the_channel)
{
	ks_job_out_t out, back;
	uint64_t seq, rss;
	char err[512], msg[256];
	ks_job_t job;
	ks_buf_t f;
	uint32_t hl;
	int rc;

	good_job(&job);
	cr_assert_eq(ks_job_run(&job, &out, err, sizeof err), KS_OK);
	ks_buf_init(&f);
	cr_assert_eq(ks_wire_out_encode(5, KS_OK, NULL, &out, 1234, &f),
	    KS_OK);
	hl = (uint32_t)f.data[0] << 24 | (uint32_t)(uint8_t)f.data[1] << 16 |
	    (uint32_t)(uint8_t)f.data[2] << 8 | (uint8_t)f.data[3];
	cr_assert_eq(ks_wire_out_decode(f.data + 8, hl, out.bytes, out.len,
	    &seq, &rc, msg, sizeof msg, &back, &rss), KS_OK);
	cr_assert_eq(seq, 5);
	cr_assert_eq(rc, KS_OK);
	cr_assert_eq(rss, 1234);
	cr_assert_eq(back.len, out.len);
	cr_assert_eq(memcmp(back.bytes, out.bytes, out.len), 0);
	cr_assert_str_eq(back.entry, out.entry);
	cr_assert_str_eq(back.params, out.params);
	cr_assert_str_eq(back.launch, out.launch);
	cr_assert_str_eq(back.codegen, "");     /* cpu: the bytes are */
	ks_job_out_close(&back);
	/* A codegen hash travels too. */
	ks_buf_reset(&f);
	memset(out.codegen, 'a', sizeof out.codegen - 1);
	cr_assert_eq(ks_wire_out_encode(7, KS_OK, NULL, &out, 0, &f), KS_OK);
	cr_assert_eq(ks_wire_out_decode(f.data + 8, f.len - 8,
	    out.bytes, out.len, &seq, &rc, msg, sizeof msg, &back, &rss),
	    KS_OK);
	cr_assert_str_eq(back.codegen, out.codegen);
	ks_job_out_close(&back);
	ks_buf_reset(&f);
	cr_assert_eq(ks_wire_out_encode(6, KS_E_COMPILE, "it broke", NULL, 0,
	    &f), KS_OK);
	cr_assert_eq(ks_wire_out_decode(f.data + 8, f.len - 8, NULL, 0, &seq,
	    &rc, msg, sizeof msg, &back, &rss), KS_OK);
	cr_assert_eq(rc, KS_E_COMPILE);
	cr_assert_str_eq(msg, "it broke");
	ks_buf_close(&f);
	ks_job_out_close(&out);
}

Test(exec, the_probe_resolves_auto_and_names_every_backend)
{
	const cJSON *b, *t;
	ks_buf_t p;
	cJSON *j;
	int n = 0, cpu_auto = 0;

	ks_buf_init(&p);
	cr_assert_eq(ks_exec_probe(&p), KS_OK);
	j = cJSON_Parse(p.data);
	cr_assert(j, "%s", p.data);
	cJSON_ArrayForEach(b, cJSON_GetObjectItem(j, "backends")) {
		n++;
		if (strcmp(cJSON_GetObjectItem(b, "name")->valuestring, "cpu"))
			continue;
		cJSON_ArrayForEach(t, cJSON_GetObjectItem(b, "targets"))
			cpu_auto += !strcmp(cJSON_GetObjectItem(t,
			    "requested")->valuestring, "auto") &&
			    cJSON_GetObjectItem(t, "identity");
	}
	cr_assert_eq(n, 3);
	cr_assert_eq(cpu_auto, 1);
	cJSON_Delete(j);
	ks_buf_close(&p);
}
