/*
 * Warm manifests (docs/cli.md): their expansion into get-specs and the
 * batches of them a request carries, which warm, ready, deploy and bundle
 * share; and manifest --from-misses, which writes one from the daemon's
 * recorded misses.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../proto/entry.h"
#include "cli.h"

const char usage_manifest[] =
"usage: kspec [--socket PATH] manifest --from-misses [--deployment NAME]\n"
"           [-o FILE] [--json]\n"
"\n"
"Writes every distinct get that missed (compiled or joined a compile) on\n"
"this daemon as a warm manifest (docs/cli.md), oldest first, to FILE or\n"
"stdout, so what production asked for can be warmed on another machine\n"
"with `kspec warm FILE` (--json is accepted, and changes nothing).  With\n"
"--deployment, the late compiles of that deployment instead: the gets\n"
"that declared it and missed after it was ready, the specs its manifest\n"
"lacks.\n";

int expand_manifest(const cJSON *m, cJSON *out, cJSON *origin,
    char *why, size_t whylen)
{
	const cJSON *specs, *targets, *s, *t, *list;
	const cJSON *ver = cJSON_GetObjectItemCaseSensitive(m, "version");
	int k = 0;

	if (!cJSON_IsObject(m)) {
		snprintf(why, whylen, "the manifest is not a JSON object");
		return -1;
	}
	if (!cJSON_IsNumber(ver) || ver->valuedouble != 1) {
		snprintf(why, whylen, "unsupported manifest \"version\" "
		    "(this kspec reads version 1)");
		return -1;
	}
	specs = cJSON_GetObjectItemCaseSensitive(m, "specs");
	targets = cJSON_GetObjectItemCaseSensitive(m, "targets");
	if (!cJSON_IsArray(specs)) {
		snprintf(why, whylen, "\"specs\" must be an array");
		return -1;
	}
	if (targets && !cJSON_IsObject(targets)) {
		snprintf(why, whylen, "\"targets\" must map backends to "
		    "arrays of targets");
		return -1;
	}
	cJSON_ArrayForEach(s, specs) {
		const char *be = jstr(s, "backend");

		if (!cJSON_IsObject(s)) {
			snprintf(why, whylen, "specs[%d] is not an object", k);
			return -1;
		}
		list = cJSON_GetObjectItemCaseSensitive(targets, be);
		if (cJSON_GetObjectItemCaseSensitive(s, "target") ||
		    !cJSON_IsArray(list) || !list->child) {
			cJSON_AddItemToArray(out, cJSON_Duplicate(s, 1));
			cJSON_AddItemToArray(origin, cJSON_CreateNumber(k++));
			continue;
		}
		cJSON_ArrayForEach(t, list) {
			cJSON *dup = cJSON_Duplicate(s, 1);

			if (!cJSON_IsString(t)) {
				cJSON_Delete(dup);
				snprintf(why, whylen, "targets must be "
				    "strings");
				return -1;
			}
			cJSON_AddStringToObject(dup, "target", t->valuestring);
			cJSON_AddItemToArray(out, dup);
			cJSON_AddItemToArray(origin, cJSON_CreateNumber(k));
		}
		k++;
	}
	return 0;
}

char *items_batch(const cJSON *const *spec, const int *idx, int n,
    int *taken)
{
	cJSON *batch = cJSON_CreateArray();
	size_t bytes = 16;
	char *text, *fields;
	int k;

	for (k = 0; k < n && k < WARM_BATCH; k++) {
		const cJSON *s = spec[idx[k]];
		char *one = cJSON_PrintUnformatted(s);

		bytes += one ? strlen(one) + 1 : 0;
		free(one);
		if (k && bytes > WARM_BATCH_BYTES)
			break;
		cJSON_AddItemToArray(batch, cJSON_Duplicate(s, 1));
	}
	*taken = k;
	text = cJSON_PrintUnformatted(batch);
	cJSON_Delete(batch);
	fields = text ? malloc(strlen(text) + 16) : NULL;
	if (fields)
		sprintf(fields, "\"items\":%s", text);
	free(text);
	return fields;
}

int spec_of_json(const cJSON *o, kspec_get_spec_t *s,
    kspec_dim_t *dims, const char **dyn)
{
	const cJSON *v, *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "dynamic");

	memset(s, 0, sizeof *s);
#define STR(field, name) do { \
	v = cJSON_GetObjectItemCaseSensitive(o, name); \
	s->field = cJSON_IsString(v) ? v->valuestring : NULL; \
} while (0)
	STR(kernel, "kernel");
	STR(backend, "backend");
	STR(target, "target");
	STR(format, "format");
	STR(dtype, "dtype");
	STR(wdtype, "wdtype");
	STR(mode, "mode");
#undef STR
	cJSON_ArrayForEach(v, shape) {
		if (!cJSON_IsNumber(v) || s->nshape == CLI_MAX_DIMS)
			return -1;
		dims[s->nshape].name = v->string;
		dims[s->nshape++].value = (int64_t)v->valuedouble;
	}
	cJSON_ArrayForEach(v, d) {
		if (!cJSON_IsString(v) || s->ndynamic == CLI_MAX_DIMS)
			return -1;
		dyn[s->ndynamic++] = v->valuestring;
	}
	s->shape = dims;
	s->dynamic = dyn;
	return s->kernel ? 0 : -1;
}

/* What manifest reads from its command line. */
typedef struct {
	const char *out, *deployment;
	int from_misses;
	int json;               /* a manifest is JSON either way */
} manifest_args_t;

static const cli_opt_t manifest_opts[] = {
	CLI_OPT_FLAG("from-misses", 0, manifest_args_t, from_misses),
	CLI_OPT_STRING("deployment", 0, manifest_args_t, deployment),
	CLI_OPT_STRING("output", 'o', manifest_args_t, out),
	CLI_OPT_FLAG("json", 0, manifest_args_t, json),
	CLI_OPT_END
};

int cmd_manifest(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv)
{
	manifest_args_t a = { 0 };
	cJSON *reply, *man, *specs;
	ks_buf_t f;
	const cJSON *m;
	char *text = NULL;
	int rc;

	rc = cli_parse(cmd, argc, argv, manifest_opts, &a);
	if (rc != CLI_GO_ON)
		return rc;
	if (!a.from_misses)
		return usage_error(cmd->name, "give --from-misses");
	ks_buf_init(&f);
	if (a.deployment) {
		ks_buf_puts(&f, "\"deployment\":");
		ks_buf_json_str(&f, a.deployment);
	}
	rc = call_parsed(socket, "misses", a.deployment ? f.data : NULL,
	    &reply);
	ks_buf_close(&f);
	if (rc)
		return rc;
	man = cJSON_CreateObject();
	cJSON_AddNumberToObject(man, "version", 1);
	specs = cJSON_AddArrayToObject(man, "specs");
	cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(reply, "misses"))
		cJSON_AddItemToArray(specs, cJSON_Duplicate(
		    cJSON_GetObjectItemCaseSensitive(m, "spec"), 1));
	text = cJSON_Print(man);
	rc = EXIT_OK;
	if (a.out)
		rc = write_file(a.out, text, strlen(text), 1) ? EXIT_FAIL :
		    EXIT_OK;
	else
		printf("%s\n", text);
	if (a.out && !rc)
		printf("%d specs -> %s\n", cJSON_GetArraySize(specs), a.out);
	free(text);
	cJSON_Delete(man);
	cJSON_Delete(reply);
	return rc;
}
