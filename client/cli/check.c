/*
 * The daemon checking its compilers: audit (recompile stored artifacts
 * and compare their bytes) and canary (the known-answer canaries).  Both
 * are docs/operations.md's.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../proto/entry.h"
#include "cli.h"

const char usage_audit[] =
"usage: kspec [--socket PATH] audit (--all | --kernel K | --report) [--json]\n"
"\n"
"The key audit (docs/operations.md): recompiles every stored artifact (of\n"
"kernel K) on the daemon's idle workers and compares the bytes and the\n"
"reply fields with the stored ones; answers when they are done.  A\n"
"mismatch means a compile depends on something its key does not name:\n"
"the entry is quarantined (no longer served; compiled again when asked\n"
"for) and the event is kept.  --report lists the events kept.  Exit\n"
"status 0, 1 if any entry differed.  For the daemon's uid, root and\n"
"--admin-group.\n";

const char usage_canary[] =
"usage: kspec [--socket PATH] canary [--kernel K] [--backend B] [--status]\n"
"           [--json]\n"
"\n"
"Runs the known-answer canaries now (every kernel, or K, on every backend\n"
"that can run them, or B) and prints each verdict: the kernel at small\n"
"shapes, every variant and dtype, against its plain-C reference.  A kernel\n"
"disabled by a failed canary is enabled again when it passes.  For the\n"
"daemon's uid, root and --admin-group.  --status prints the state without\n"
"running anything (anyone).  Exit status 0 when none failed, 1 otherwise.\n";

/* ---- audit ---- */

static int print_audit(const cJSON *r)
{
	const cJSON *events = cJSON_GetObjectItemCaseSensitive(r, "events");
	const cJSON *skipped = cJSON_GetObjectItemCaseSensitive(r, "skipped");
	const cJSON *e;

	if (cJSON_IsArray(events)) {
		cJSON_ArrayForEach(e, events)
			printf("%.12s %s %s %s %s %s %s: differs in %s; stored "
			    "%.12s, recompiled %.12s by %s\n", jstr(e, "key"),
			    jstr(e, "kernel"), jstr(e, "backend"),
			    jstr(e, "target"), jstr(e, "dtype"),
			    jstr(e, "shape"), jstr(e, "variant"),
			    jstr(e, "differs"), jstr(e, "stored"),
			    jstr(e, "recompiled"), jstr(e, "auditor"));
		printf("%d audit events\n", cJSON_GetArraySize(events));
		return EXIT_OK;
	}
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(r,
	    "mismatches"))
		printf("MISMATCH %.12s %s %s %s %s: differs in %s; "
		    "quarantined\n", jstr(e, "key"), jstr(e, "kernel"),
		    jstr(e, "backend"), jstr(e, "target"), jstr(e, "dtype"),
		    jstr(e, "differs"));
	printf("audited %.0f: %.0f matched, %.0f mismatched, %.0f failed; "
	    "skipped %.0f stale, %.0f unchecked, %.0f with a recent event, "
	    "%.0f gone\n", jnum(r, "audited"), jnum(r, "matched"),
	    jnum(r, "mismatched"), jnum(r, "failed"), jnum(skipped, "stale"),
	    jnum(skipped, "unchecked"), jnum(skipped, "quiet"),
	    jnum(skipped, "gone"));
	return jnum(r, "mismatched") > 0 ? EXIT_FAIL : EXIT_OK;
}

/* What audit reads from its command line. */
typedef struct {
	char fields[256];
	int json;
	int given;              /* of --all, --kernel K and --report */
} audit_args_t;

static int take_kernel(const cli_cmd_t *cmd, void *args,
    const cli_opt_t *o, char *value)
{
	audit_args_t *a = args;

	a->given++;
	if (add_field(a->fields, sizeof a->fields, "kernel", value))
		return usage_error(cmd->name, "option values too long");
	return 0;
}

/* --all and --report: "all":true or "report":true, alone. */
static int take_scope(const cli_cmd_t *cmd, void *args, const cli_opt_t *o,
    char *value)
{
	audit_args_t *a = args;

	a->given++;
	snprintf(a->fields, sizeof a->fields, "\"%s\":true", o->name);
	return 0;
}

static const cli_opt_t audit_opts[] = {
	CLI_OPT_CALL(CLI_VALUE, "kernel", 0, take_kernel),
	CLI_OPT_CALL(CLI_FLAG, "all", 0, take_scope),
	CLI_OPT_CALL(CLI_FLAG, "report", 0, take_scope),
	CLI_OPT_FLAG("json", 0, audit_args_t, json),
	CLI_OPT_END
};

int cmd_audit(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv)
{
	audit_args_t a = { 0 };
	int rc = cli_parse(cmd, argc, argv, audit_opts, &a);

	if (rc != CLI_GO_ON)
		return rc;
	if (a.given != 1)
		return usage_error(cmd->name, "give one of --all, --kernel K "
		    "or --report");
	return run_op(socket, "audit", a.fields, a.json, print_audit);
}

/* ---- canary ---- */

/* What canary reads from its command line. */
typedef struct {
	const char *kernel, *backend;
	int status, json;
} canary_args_t;

static const cli_opt_t canary_opts[] = {
	CLI_OPT_STRING("kernel", 0, canary_args_t, kernel),
	CLI_OPT_STRING("backend", 0, canary_args_t, backend),
	CLI_OPT_FLAG("status", 0, canary_args_t, status),
	CLI_OPT_FLAG("json", 0, canary_args_t, json),
	CLI_OPT_END
};

int cmd_canary(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv)
{
	canary_args_t a = { 0 };
	int rc, failed = 0;
	const cJSON *cs, *b, *k;
	cJSON *reply;
	char *text;
	ks_buf_t f;

	rc = cli_parse(cmd, argc, argv, canary_opts, &a);
	if (rc != CLI_GO_ON)
		return rc;
	ks_buf_init(&f);
	ks_buf_printf(&f, "\"status\":%s", a.status ? "true" : "false");
	if (a.kernel) {
		ks_buf_puts(&f, ",\"kernel\":");
		ks_buf_json_str(&f, a.kernel);
	}
	if (a.backend) {
		ks_buf_puts(&f, ",\"backend\":");
		ks_buf_json_str(&f, a.backend);
	}
	rc = call_parsed(socket, "canary", f.data, &reply);
	ks_buf_close(&f);
	if (rc)
		return rc;
	cs = cJSON_GetObjectItemCaseSensitive(reply, "canaries");
	if (a.json) {
		text = cJSON_Print(cs);
		printf("%s\n", text);
		free(text);
	}
	cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(cs,
	    "backends")) {
		const char *be = cJSON_GetStringValue(
		    cJSON_GetObjectItemCaseSensitive(b, "backend"));
		const char *st = cJSON_GetStringValue(
		    cJSON_GetObjectItemCaseSensitive(b, "state"));

		if (!a.json && st && strcmp(st, "skipped") == 0)
			printf("%-7s skipped: %s\n", be, cJSON_GetStringValue(
			    cJSON_GetObjectItemCaseSensitive(b, "reason")));
		/* A backend with no verdict to show still says how it is. */
		else if (!a.json && st && cJSON_GetArraySize(
		    cJSON_GetObjectItemCaseSensitive(b, "kernels")) == 0)
			printf("%-7s %s: %s\n", be, st, strcmp(st, "current") ?
			    "its compiler changed; no canary has run yet" :
			    "no canary to run: its compiler is the one its "
			    "stored kernels were built by, or it has none yet");
		cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(b,
		    "kernels")) {
			const cJSON *ms = cJSON_GetObjectItemCaseSensitive(k,
			    "ms");
			const char *ks = cJSON_GetStringValue(
			    cJSON_GetObjectItemCaseSensitive(k, "state"));

			failed += ks && strcmp(ks, "failed") == 0;
			if (a.json)
				continue;
			printf("%-7s %-17s %-7s %6.0f ms  %s\n", be,
			    cJSON_GetStringValue(
			    cJSON_GetObjectItemCaseSensitive(k, "kernel")), ks,
			    cJSON_IsNumber(ms) ? ms->valuedouble : 0,
			    cJSON_GetStringValue(
			    cJSON_GetObjectItemCaseSensitive(k, "detail")));
		}
	}
	cJSON_Delete(reply);
	return failed ? EXIT_FAIL : EXIT_OK;
}
