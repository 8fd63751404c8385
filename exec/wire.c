/*
 * The worker channel's messages (exec.h): compile requests and outcomes.
 * Both sides parse with cJSON from a NUL-terminated copy of exactly the
 * frame's header bytes, with case-sensitive lookups.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../proto/proto.h"
#include "exec.h"

/* Starts FRAME with a zero prefix; wire_end fills it in. */
static size_t wire_begin(ks_buf_t *frame)
{
	static const char zero[KS_FRAME_PREFIX];
	size_t at = frame->len;

	ks_buf_append(frame, zero, sizeof zero);
	return at;
}

static int wire_end(ks_buf_t *frame, size_t at, size_t payload)
{
	if (!frame->data)
		return KS_E_NOMEM;
	ks_frame_prefix((uint8_t *)frame->data + at, (uint32_t)(frame->len -
	    at - KS_FRAME_PREFIX), (uint32_t)payload);
	return KS_OK;
}

int ks_wire_job_encode(const ks_job_t *job, uint64_t seq, ks_buf_t *frame)
{
	const ks_spec_t *sp = &job->spec;
	char fp[KS_HASH_HEX];
	size_t at = wire_begin(frame);
	int i, first;

	ks_hash_hex(&job->fingerprint, fp);
	ks_buf_printf(frame, "{\"op\":\"%s\",\"seq\":%" PRIu64
	    ",\"kernel\":", job->canary ? "canary" : "compile", seq);
	ks_buf_json_str(frame, sp->def->name);
	ks_buf_printf(frame, ",\"dtype\":\"%s\",\"wdtype\":\"%s\",\"mode\":"
	    "\"%s\",\"shape\":{", ks_dtype_name(sp->dtype),
	    ks_dtype_name(sp->wdtype), sp->mode == KS_MODE_FAST ? "fast" :
	    "exact");
	for (i = 0, first = 1; i < sp->ndims; i++) {
		if (!sp->dims[i].is_const)
			continue;
		ks_buf_printf(frame, "%s\"%s\":%" PRId64, first ? "" : ",",
		    sp->dims[i].name, sp->dims[i].value);
		first = 0;
	}
	ks_buf_puts(frame, "},\"dynamic\":[");
	for (i = 0, first = 1; i < sp->ndims; i++) {
		if (sp->dims[i].is_const)
			continue;
		ks_buf_printf(frame, "%s\"%s\"", first ? "" : ",",
		    sp->dims[i].name);
		first = 0;
	}
	ks_buf_printf(frame, "],\"backend\":\"%s\",\"target\":",
	    job->backend->name);
	ks_buf_json_str(frame, job->target);
	ks_buf_puts(frame, ",\"format\":");
	ks_buf_json_str(frame, job->format);
	ks_buf_puts(frame, ",\"identity\":");
	ks_buf_json_str(frame, job->identity);
	ks_buf_printf(frame, ",\"fingerprint\":\"%s\",\"codegen\":%d}", fp,
	    job->codegen);
	return wire_end(frame, at, 0);
}

cJSON *ks_wire_header_parse(const char *hdr, size_t len)
{
	char *text = malloc(len + 1);
	cJSON *j;

	if (!text)
		return NULL;
	memcpy(text, hdr, len);
	text[len] = '\0';
	j = cJSON_Parse(text);
	free(text);
	return j;
}

static const char *str_of(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* An unsigned integer field that a double holds exactly. */
static int u64_of(const cJSON *o, const char *name, uint64_t *out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	if (!cJSON_IsNumber(v) || v->valuedouble < 0 ||
	    v->valuedouble > 9007199254740992.0 ||
	    v->valuedouble != (double)(uint64_t)v->valuedouble)
		return -1;
	*out = (uint64_t)v->valuedouble;
	return 0;
}

static int copy_str(char *dst, size_t cap, const char *src)
{
	if (!src || strlen(src) >= cap)
		return -1;
	memcpy(dst, src, strlen(src) + 1);
	return 0;
}

int ks_wire_job_decode(const char *hdr, size_t len, ks_job_t *job,
    uint64_t *seq, char *err, size_t errlen)
{
	ks_dim_t dims[2 * KS_MAX_DIMS];
	const ks_kernel_def_t *def;
	const cJSON *v, *shape, *dyn;
	cJSON *j = ks_wire_header_parse(hdr, len);
	uint64_t codegen;
	ks_dtype_t dtype, wdtype;
	ks_mode_t mode;
	const char *s;
	int nd = 0, rc = KS_E_BAD_REQUEST;

	memset(job, 0, sizeof *job);
	if (!cJSON_IsObject(j) || u64_of(j, "seq", seq) != 0) {
		ks_set_err(err, errlen, "compile request without a seq");
		goto out;
	}
	def = (s = str_of(j, "kernel")) ? ks_kernel_find(s) : NULL;
	job->backend = (s = str_of(j, "backend")) ? ks_backend_find(s) : NULL;
	if (!def || !job->backend) {
		ks_set_err(err, errlen, "unknown kernel or backend");
		goto out;
	}
	if (!(s = str_of(j, "dtype")) || ks_dtype_parse(s, &dtype) != KS_OK ||
	    !(s = str_of(j, "wdtype")) || ks_dtype_parse(s, &wdtype) != KS_OK ||
	    !(s = str_of(j, "mode")) || (strcmp(s, "exact") &&
	    strcmp(s, "fast"))) {
		ks_set_err(err, errlen, "bad dtype, wdtype or mode");
		goto out;
	}
	mode = strcmp(s, "fast") == 0 ? KS_MODE_FAST : KS_MODE_EXACT;
	shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
	dyn = cJSON_GetObjectItemCaseSensitive(j, "dynamic");
	if (!cJSON_IsObject(shape) || !cJSON_IsArray(dyn)) {
		ks_set_err(err, errlen, "bad shape");
		goto out;
	}
	cJSON_ArrayForEach(v, shape) {
		if (nd == 2 * KS_MAX_DIMS || !cJSON_IsNumber(v) ||
		    v->valuedouble != (double)(int64_t)v->valuedouble) {
			ks_set_err(err, errlen, "bad shape");
			goto out;
		}
		dims[nd++] = (ks_dim_t){ v->string, 1,
		    (int64_t)v->valuedouble };
	}
	cJSON_ArrayForEach(v, dyn) {
		if (nd == 2 * KS_MAX_DIMS || !cJSON_IsString(v)) {
			ks_set_err(err, errlen, "bad dynamic list");
			goto out;
		}
		dims[nd++] = (ks_dim_t){ v->valuestring, 0, 0 };
	}
	rc = ks_kernel_validate_mixed(def, dtype, wdtype, mode, dims, nd,
	    &job->spec, err, errlen);
	if (rc != KS_OK)
		goto out;
	rc = KS_E_BAD_REQUEST;
	if (copy_str(job->target, sizeof job->target, str_of(j, "target")) ||
	    copy_str(job->format, sizeof job->format, str_of(j, "format")) ||
	    copy_str(job->identity, sizeof job->identity,
	    str_of(j, "identity")) || !(s = str_of(j, "fingerprint")) ||
	    ks_hash_from_hex(s, &job->fingerprint) != KS_OK ||
	    u64_of(j, "codegen", &codegen) != 0 || codegen > 1000000) {
		ks_set_err(err, errlen, "bad target, format, identity, "
		    "fingerprint or codegen");
		goto out;
	}
	job->codegen = (int)codegen;
	job->canary = (s = str_of(j, "op")) && strcmp(s, "canary") == 0;
	rc = KS_OK;
out:
	cJSON_Delete(j);
	return rc;
}

int ks_wire_out_encode(uint64_t seq, int rc, const char *errmsg,
    const ks_job_out_t *out, uint64_t rss, ks_buf_t *frame)
{
	size_t at = wire_begin(frame);

	ks_buf_printf(frame, "{\"seq\":%" PRIu64, seq);
	if (rc != KS_OK) {
		ks_buf_printf(frame, ",\"ok\":false,\"error\":{\"code\":\"%s\","
		    "\"message\":", ks_err_name(rc));
		ks_buf_json_str(frame, errmsg && *errmsg ? errmsg :
		    ks_strerror(rc));
		ks_buf_printf(frame, "},\"rss\":%" PRIu64 "}", rss);
		return wire_end(frame, at, 0);
	}
	ks_buf_puts(frame, ",\"ok\":true,\"variant\":");
	ks_buf_json_str(frame, out->variant);
	ks_buf_puts(frame, ",\"entry\":");
	ks_buf_json_str(frame, out->entry);
	ks_buf_puts(frame, ",\"format\":");
	ks_buf_json_str(frame, out->format);
	if (out->codegen[0])
		ks_buf_printf(frame, ",\"codegen\":\"%s\"", out->codegen);
	ks_buf_printf(frame, ",\"params\":%s,\"launch\":%s,\"compile_ms\":%.3f,"
	    "\"rss\":%" PRIu64 "}", out->params, out->launch, out->compile_ms,
	    rss);
	return wire_end(frame, at, out->len);
}

int ks_wire_out_decode(const char *hdr, size_t len, const void *payload,
    size_t plen, uint64_t *seq, int *rc, char *errmsg, size_t errlen,
    ks_job_out_t *out, uint64_t *rss)
{
	cJSON *j = ks_wire_header_parse(hdr, len);
	const cJSON *ok, *e, *ms;
	int ret = KS_E_PROTO;

	memset(out, 0, sizeof *out);
	*rss = 0;
	if (!cJSON_IsObject(j) || u64_of(j, "seq", seq) != 0)
		goto out;
	u64_of(j, "rss", rss);
	ok = cJSON_GetObjectItemCaseSensitive(j, "ok");
	if (cJSON_IsFalse(ok)) {
		e = cJSON_GetObjectItemCaseSensitive(j, "error");
		if (!str_of(e, "code") || !str_of(e, "message"))
			goto out;
		*rc = ks_err_from_name(str_of(e, "code"));
		ks_set_err(errmsg, errlen, "%s", str_of(e, "message"));
		ret = KS_OK;
		goto out;
	}
	ms = cJSON_GetObjectItemCaseSensitive(j, "compile_ms");
	if (!cJSON_IsTrue(ok) || !cJSON_IsNumber(ms) || plen == 0 ||
	    copy_str(out->variant, sizeof out->variant, str_of(j, "variant")) ||
	    copy_str(out->entry, sizeof out->entry, str_of(j, "entry")) ||
	    copy_str(out->format, sizeof out->format, str_of(j, "format")) ||
	    (str_of(j, "codegen") && copy_str(out->codegen, sizeof
	    out->codegen, str_of(j, "codegen"))) ||
	    !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(j, "params")) ||
	    !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "launch")))
		goto out;
	out->params = cJSON_PrintUnformatted(
	    cJSON_GetObjectItemCaseSensitive(j, "params"));
	out->launch = cJSON_PrintUnformatted(
	    cJSON_GetObjectItemCaseSensitive(j, "launch"));
	out->bytes = malloc(plen);
	if (!out->params || !out->launch || !out->bytes) {
		ks_job_out_close(out);
		ret = KS_E_NOMEM;
		goto out;
	}
	memcpy(out->bytes, payload, plen);
	out->len = plen;
	out->compile_ms = ms->valuedouble;
	*rc = KS_OK;
	ret = KS_OK;
out:
	cJSON_Delete(j);
	return ret;
}
