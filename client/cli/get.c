/*
 * get and explain: a kernel specialized for a shape, fetched (get) or
 * described without compiling (explain), from one get-spec read from
 * the command line.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char usage_get[] =
"usage: kspec [--socket PATH] get KERNEL --backend cpu|cuda|opencl\n"
"           [--target T] [--format F] [--mode exact|fast]\n"
"           --dtype f32|f16|bf16 [--wdtype f32|f16|bf16|q8_0|q4_0|q4_k]\n"
"           --shape M=1,N=4096,K=4096\n"
"           [--dynamic M,...] [--deployment NAME] -o FILE\n"
"           [--meta FILE.json] [--json]\n"
"\n"
"Fetches the artifact of KERNEL specialized for the shape, compiling it\n"
"if no cache holds it.  Writes the artifact to FILE (through FILE.tmp and\n"
"a rename) and the reply's metadata, as JSON, to --meta; one of the two\n"
"is needed, and with --meta alone only the metadata is fetched.  Prints\n"
"one summary line (with --json: the\n"
"reply's metadata as one line of JSON).\n"
"\n"
"  --backend B      cpu, cuda or opencl\n"
"  --target T       backend target (default: auto)\n"
"  --format F       artifact format (default: the backend's)\n"
"  --mode M         exact (default) or fast\n"
"  --dtype D        f32, f16 or bf16\n"
"  --wdtype D       the weights' dtype where the kernel takes one (gemm's\n"
"                   W, the norms' w: f16 or bf16 with --dtype f32; rope's\n"
"                   table: f32; gemm's W, embedding's table, gemm_pack_w's\n"
"                   in also q8_0, q4_0, q4_k with --dtype f32); default:\n"
"                   the dtype\n"
"  --shape LIST     NAME=INTEGER,... constants of the kernel (repeatable)\n"
"  --dynamic LIST   NAME,... parameters left dynamic (repeatable)\n"
"  --deployment N   the deployment this get is for (kspec deploy): a\n"
"                   compile after it was ready counts as late\n"
"  -o, --output F   where to write the artifact\n"
"  --meta F         where to write the reply metadata (JSON)\n";

const char usage_explain[] =
"usage: kspec [--socket PATH] explain KERNEL --backend B --dtype D\n"
"           [--wdtype D] --shape M=1,N=4096,K=4096 [--dynamic M,...]\n"
"           [--target T]\n"
"           [--format F] [--mode exact|fast] [--json]\n"
"\n"
"Shows, without compiling, the variant and guard a get would use, every\n"
"component of its key, whether it is cached, and for a miss the nearest\n"
"stored entry and the components that differ.\n";

typedef struct {
	kspec_dim_t shape[CLI_MAX_DIMS];
	size_t nshape;
	const char *dynamic[CLI_MAX_DIMS];
	size_t ndynamic;
} dims_t;

/* Splits "M=1,N=4096" in place into DIMS.  Returns 0 or EXIT_USAGE, the
 * error in the name of command WHO. */
static int parse_shape(const char *who, char *list, dims_t *d)
{
	char *item, *save = NULL, *eq, *end;
	long long v;

	if (!*list)
		return usage_error(who, "empty --shape");
	for (item = strtok_r(list, ",", &save); item;
	    item = strtok_r(NULL, ",", &save)) {
		eq = strchr(item, '=');
		if (!eq || eq == item)
			return usage_error(who, "--shape entry '%s' is not "
			    "NAME=INTEGER", item);
		*eq = '\0';
		errno = 0;
		v = strtoll(eq + 1, &end, 10);
		if (!eq[1] || *end)
			return usage_error(who, "--shape value of '%s' is "
			    "not an integer: '%s'", item, eq + 1);
		if (errno == ERANGE)
			return usage_error(who, "--shape value of '%s' is "
			    "out of range: '%s'", item, eq + 1);
		if (d->nshape == CLI_MAX_DIMS)
			return usage_error(who, "more than %d --shape "
			    "entries", CLI_MAX_DIMS);
		d->shape[d->nshape].name = item;
		d->shape[d->nshape].value = (int64_t)v;
		d->nshape++;
	}
	return 0;
}

static int parse_dynamic(const char *who, char *list, dims_t *d)
{
	char *item, *save = NULL;
	size_t n = strlen(list);

	if (!n || list[0] == ',' || list[n - 1] == ',' || strstr(list, ",,"))
		return usage_error(who, "--dynamic needs NAME,... with no "
		    "empty names");
	for (item = strtok_r(list, ",", &save); item;
	    item = strtok_r(NULL, ",", &save)) {
		if (d->ndynamic == CLI_MAX_DIMS)
			return usage_error(who, "more than %d --dynamic "
			    "names", CLI_MAX_DIMS);
		d->dynamic[d->ndynamic++] = item;
	}
	return 0;
}

/* What get and explain read from their command line. */
typedef struct {
	kspec_get_spec_t spec;
	dims_t d;
	const char *out;        /* get: -o FILE */
	const char *meta;       /* get: --meta FILE */
	const char *deployment; /* get: --deployment NAME */
	int json;
} spec_args_t;

static int take_shape(const cli_cmd_t *cmd, void *args, const cli_opt_t *o,
    char *value)
{
	return parse_shape(cmd->name, value, &((spec_args_t *)args)->d);
}

static int take_dynamic(const cli_cmd_t *cmd, void *args,
    const cli_opt_t *o, char *value)
{
	return parse_dynamic(cmd->name, value, &((spec_args_t *)args)->d);
}

/* The options of a get-spec, which get and explain share. */
#define SPEC_OPTS \
	CLI_OPT_OPERAND(spec_args_t, spec.kernel), \
	CLI_OPT_STRING("backend", 0, spec_args_t, spec.backend), \
	CLI_OPT_STRING("target", 0, spec_args_t, spec.target), \
	CLI_OPT_STRING("format", 0, spec_args_t, spec.format), \
	CLI_OPT_STRING("mode", 0, spec_args_t, spec.mode), \
	CLI_OPT_STRING("dtype", 0, spec_args_t, spec.dtype), \
	CLI_OPT_STRING("wdtype", 0, spec_args_t, spec.wdtype), \
	CLI_OPT_CALL(CLI_VALUE, "shape", 0, take_shape), \
	CLI_OPT_CALL(CLI_VALUE, "dynamic", 0, take_dynamic), \
	CLI_OPT_FLAG("json", 0, spec_args_t, json)

static const cli_opt_t get_opts[] = {
	SPEC_OPTS,
	CLI_OPT_STRING("output", 'o', spec_args_t, out),
	CLI_OPT_STRING("meta", 0, spec_args_t, meta),
	CLI_OPT_STRING("deployment", 0, spec_args_t, deployment),
	CLI_OPT_END
};

static const cli_opt_t explain_opts[] = {
	SPEC_OPTS,
	CLI_OPT_END
};

/*
 * Reads the command line of get (IS_GET) or explain by OPTS into A and
 * checks that the spec is whole.  Returns CLI_GO_ON, or the exit status
 * (help printed, usage error).
 */
static int parse_spec_args(const cli_cmd_t *cmd, int argc, char **argv,
    const cli_opt_t *opts, spec_args_t *a, int is_get)
{
	int rc = cli_parse(cmd, argc, argv, opts, a);

	if (rc != CLI_GO_ON)
		return rc;
	if (!a->spec.kernel)
		return usage_error(cmd->name, "missing KERNEL");
	if (!a->spec.backend)
		return usage_error(cmd->name, "missing --backend");
	if (!a->spec.dtype)
		return usage_error(cmd->name, "missing --dtype");
	if (is_get && !a->out && !a->meta)
		return usage_error(cmd->name, "missing -o FILE (or --meta "
		    "FILE)");
	a->spec.shape = a->d.shape;
	a->spec.nshape = a->d.nshape;
	a->spec.dynamic = a->d.dynamic;
	a->spec.ndynamic = a->d.ndynamic;
	a->spec.meta_only = !a->out;
	return CLI_GO_ON;
}

int cmd_get(const cli_cmd_t *cmd, const char *socket, int argc, char **argv)
{
	static spec_args_t args;
	kspec_get_spec_t spec;
	kspec_artifact_t *a = NULL;
	kspec_client_t *c = NULL;
	const char *out, *meta;
	int rc;

	rc = parse_spec_args(cmd, argc, argv, get_opts, &args, 1);
	if (rc != CLI_GO_ON)
		return rc;
	spec = args.spec;
	out = args.out;
	meta = args.meta;

	rc = open_client(socket, &c);
	if (rc)
		return rc;
	rc = args.deployment ? kspec_set_deployment(c, args.deployment) : 0;
	if (rc) {
		fprintf(stderr, "kspec get: --deployment: %s\n",
		    kspec_last_error(c, NULL));
		kspec_close(c);
		return EXIT_USAGE;
	}
	rc = kspec_get(c, &spec, &a);
	if (rc) {
		rc = fail(c, rc);
		kspec_close(c);
		return rc;
	}
	kspec_close(c);
	rc = EXIT_OK;
	if ((out && write_file(out, a->bytes, a->len, 0)) ||
	    (meta && write_file(meta, a->meta, a->meta_len, 1)))
		rc = EXIT_FAIL;
	if (!rc && args.json)
		printf("%.*s\n", (int)a->meta_len, a->meta);
	else if (!rc)
		printf("%s: variant %s, source %s, %" PRIu64 " bytes%s, "
		    "key %.12s -> %s\n", a->kernel[0] ? a->kernel : spec.kernel,
		    a->variant, a->source, out ? (uint64_t)a->len : a->size,
		    out ? "" : " (metadata only)", a->key, out ? out : meta);
	kspec_artifact_free(a);
	return rc;
}

static int print_explain(const cJSON *json)
{
	const cJSON *v, *near;

	printf("kernel     %s\nvariant    %s\nkey        %s\ncached     %s\n",
	    jstr(json, "kernel"), jstr(json, "variant"), jstr(json, "key"),
	    cJSON_IsString(cJSON_GetObjectItemCaseSensitive(json, "cached")) ?
	    jstr(json, "cached") : "no");
	printf("components:\n");
	cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(json,
	    "components")) {
		char *t = cJSON_IsString(v) ? NULL : cJSON_PrintUnformatted(v);

		printf("  %-12s %s\n", v->string, t ? t : v->valuestring);
		free(t);
	}
	near = cJSON_GetObjectItemCaseSensitive(json, "nearest");
	if (cJSON_IsObject(near)) {
		char *t = cJSON_PrintUnformatted(
		    cJSON_GetObjectItemCaseSensitive(near, "differs"));

		printf("nearest    %.12s, differs in %s\n", jstr(near, "key"),
		    t ? t : "?");
		free(t);
	} else if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(json,
	    "cached"))) {
		printf("nearest    none stored for this kernel\n");
	}
	return EXIT_OK;
}

int cmd_explain(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv)
{
	static spec_args_t args;
	kspec_client_t *c = NULL;
	char *text = NULL;
	int rc;

	rc = parse_spec_args(cmd, argc, argv, explain_opts, &args, 0);
	if (rc != CLI_GO_ON)
		return rc;
	rc = open_client(socket, &c);
	if (rc)
		return rc;
	rc = kspec_explain(c, &args.spec, &text);
	return show_reply(c, rc, text, args.json, print_explain);
}
