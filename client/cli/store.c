/*
 * The stored artifacts: ls lists them, evict removes them (by key, by
 * filter, all, or those no request can reach any more).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

const char usage_ls[] =
"usage: kspec [--socket PATH] ls [--kernel K] [--backend B] [--target T]\n"
"           [--offset N] [--limit N] [--json]\n"
"\n"
"Lists stored artifacts, ordered by key, one page at a time: key prefix,\n"
"kernel, backend, target, dtype, shape, variant, size, age (since it was\n"
"stored) and whether it is in memory too.\n";

const char usage_evict[] =
"usage: kspec [--socket PATH] evict (--key KEY | --all | --stale [--dry-run] |\n"
"           [--kernel K] [--backend B] [--target T]) [--json]\n"
"\n"
"Removes stored artifacts from the store and the memory tier.  KEY is a\n"
"whole key or a prefix of one, 8 hex digits or more, that only one\n"
"artifact has (the 12 digits ls prints).  --stale removes the artifacts\n"
"no request can reach any more: of a kernel gone from the library, of an\n"
"older kernel definition, or of another compiler than the daemon's; those\n"
"of a backend unavailable now are kept.  --dry-run lists them, removing\n"
"nothing.\n";

/* BYTES as ls prints a size: 812, 14.7K, 3.2M, 1.1G. */
static void human_size(double bytes, char *out, size_t n)
{
	static const char units[] = "KMG";
	int u = -1;

	while (bytes >= 1024 && u < 2) {
		bytes /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(out, n, "%.0f", bytes);
	else
		snprintf(out, n, "%.1f%c", bytes, units[u]);
}

/* The time since Unix milliseconds MS, in its largest unit: 42s, 17m,
 * 5h, 3d. */
static void human_age(double ms, char *out, size_t n)
{
	struct timespec now;
	double s;

	clock_gettime(CLOCK_REALTIME, &now);
	s = ((double)now.tv_sec * 1e3 + (double)now.tv_nsec / 1e6 - ms) / 1e3;
	if (s < 0)
		s = 0;      /* a clock stepped back */
	if (s < 60)
		snprintf(out, n, "%.0fs", s);
	else if (s < 3600)
		snprintf(out, n, "%.0fm", s / 60);
	else if (s < 86400)
		snprintf(out, n, "%.0fh", s / 3600);
	else
		snprintf(out, n, "%.0fd", s / 86400);
}

/* The columns of the entry tables of ls and evict --stale; LAST is the
 * table's own last column (in memory, or why it is stale). */
enum { T_KEY, T_KERNEL, T_BACKEND, T_TARGET, T_DTYPE, T_SHAPE, T_VARIANT,
	T_SIZE, T_AGE, T_LAST, T_N };

static const char *cell(const cJSON *e, int col, const char *last,
    char *buf, size_t n)
{
	static const char *const fields[] = { "key", "kernel", "backend",
	    "target", "dtype", "shape", "variant" };

	if (col == T_KEY) {
		snprintf(buf, n, "%.12s", jstr(e, "key"));
		return buf;
	}
	if (col < T_SIZE)
		return *jstr(e, fields[col]) ? jstr(e, fields[col]) : "-";
	if (col == T_SIZE) {
		human_size(jnum(e, "bytes"), buf, n);
		return buf;
	}
	if (col == T_AGE) {
		human_age(jnum(e, "created_ms"), buf, n);
		return buf;
	}
	if (strcmp(last, "in_memory") == 0)
		return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e,
		    last)) ? "yes" : "no";
	return jstr(e, last);
}

/* ENTRIES as a table, every column as wide as its widest cell; LAST
 * names the field of the last column and HEAD its header. */
static void print_entries(const cJSON *entries, const char *last,
    const char *head)
{
	const char *const heads[T_N] = { "key", "kernel", "backend", "target",
	    "dtype", "shape", "variant", "size", "age", head };
	size_t w[T_N];
	const cJSON *e;
	char buf[64];
	int i;

	for (i = 0; i < T_N; i++)
		w[i] = strlen(heads[i]);
	cJSON_ArrayForEach(e, entries)
		for (i = 0; i < T_N; i++) {
			size_t n = strlen(cell(e, i, last, buf, sizeof buf));

			if (n > w[i])
				w[i] = n;
		}
	/* Sizes and ages right-aligned, so that their digits line up. */
	for (i = 0; i < T_N; i++)
		printf(i == T_SIZE || i == T_AGE ? "%*s%s" : "%-*s%s",
		    i == T_LAST ? 0 : (int)w[i], heads[i], i == T_LAST ?
		    "\n" : "  ");
	cJSON_ArrayForEach(e, entries)
		for (i = 0; i < T_N; i++)
			printf(i == T_SIZE || i == T_AGE ? "%*s%s" : "%-*s%s",
			    i == T_LAST ? 0 : (int)w[i], cell(e, i, last, buf,
			    sizeof buf), i == T_LAST ? "\n" : "  ");
}

static int print_ls(const cJSON *r)
{
	const cJSON *entries = cJSON_GetObjectItemCaseSensitive(r, "entries");

	print_entries(entries, "in_memory", "mem");
	printf("%.0f of %.0f entries (offset %.0f)\n",
	    (double)cJSON_GetArraySize(entries), jnum(r, "total"),
	    jnum(r, "offset"));
	return EXIT_OK;
}

static int print_evict(const cJSON *r)
{
	const cJSON *entries = cJSON_GetObjectItemCaseSensitive(r, "entries");
	int dry = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "dry_run"));
	char size[32];

	/* Only a stale evict says what it found. */
	if (!cJSON_IsArray(entries)) {
		printf("evicted %.0f entries\n", jnum(r, "evicted"));
		return EXIT_OK;
	}
	if (cJSON_GetArraySize(entries) > 0)
		print_entries(entries, "reason", "reason");
	if (jnum(r, "unlisted") > 0)
		printf("(%.0f more not listed)\n", jnum(r, "unlisted"));
	human_size(jnum(r, "bytes"), size, sizeof size);
	printf("%s %.0f stale entries (%s)%s", dry ? "would evict" :
	    "evicted", jnum(r, "evicted"), size, dry ? "; a dry run, nothing "
	    "removed" : "");
	if (jnum(r, "unchecked") > 0)
		printf("; kept %.0f whose backend or target is not available "
		    "now", jnum(r, "unchecked"));
	printf("\n");
	return EXIT_OK;
}

/* What ls and evict read from their command line: the request's fields,
 * in the order their options were given. */
typedef struct {
	char fields[1024];
	int json;
	int stale, dry_run;     /* evict */
} filter_args_t;

/* --kernel K and its like: "kernel":"K". */
static int take_field(const cli_cmd_t *cmd, void *args, const cli_opt_t *o,
    char *value)
{
	filter_args_t *a = args;

	if (add_field(a->fields, sizeof a->fields, o->name, value))
		return usage_error(cmd->name, "option values too long");
	return 0;
}

/* --offset N and --limit N: "offset":N. */
static int take_number(const cli_cmd_t *cmd, void *args,
    const cli_opt_t *o, char *value)
{
	filter_args_t *a = args;
	size_t n = strlen(a->fields);
	char *end;

	errno = 0;
	(void)strtoull(value, &end, 10);
	if (errno || *end || !*value)
		return usage_error(cmd->name, "--%s needs a number", o->name);
	snprintf(a->fields + n, sizeof a->fields - n, "%s\"%s\":%s",
	    n ? "," : "", o->name, value);
	return 0;
}

/* --all, --stale and --dry-run: "all":true, "stale":true,
 * "dry_run":true. */
static int take_true(const cli_cmd_t *cmd, void *args, const cli_opt_t *o,
    char *value)
{
	filter_args_t *a = args;
	size_t n = strlen(a->fields);
	int dry = strcmp(o->name, "dry-run") == 0;

	a->dry_run |= dry;
	a->stale |= strcmp(o->name, "stale") == 0;
	snprintf(a->fields + n, sizeof a->fields - n, "%s\"%s\":true",
	    n ? "," : "", dry ? "dry_run" : o->name);
	return 0;
}

static const cli_opt_t ls_opts[] = {
	CLI_OPT_CALL(CLI_VALUE, "kernel", 0, take_field),
	CLI_OPT_CALL(CLI_VALUE, "backend", 0, take_field),
	CLI_OPT_CALL(CLI_VALUE, "target", 0, take_field),
	CLI_OPT_CALL(CLI_VALUE, "offset", 0, take_number),
	CLI_OPT_CALL(CLI_VALUE, "limit", 0, take_number),
	CLI_OPT_FLAG("json", 0, filter_args_t, json),
	CLI_OPT_END
};

int cmd_ls(const cli_cmd_t *cmd, const char *socket, int argc, char **argv)
{
	filter_args_t a = { 0 };
	int rc = cli_parse(cmd, argc, argv, ls_opts, &a);

	if (rc != CLI_GO_ON)
		return rc;
	return run_op(socket, "list", a.fields, a.json, print_ls);
}

static const cli_opt_t evict_opts[] = {
	CLI_OPT_CALL(CLI_VALUE, "key", 0, take_field),
	CLI_OPT_CALL(CLI_VALUE, "kernel", 0, take_field),
	CLI_OPT_CALL(CLI_VALUE, "backend", 0, take_field),
	CLI_OPT_CALL(CLI_VALUE, "target", 0, take_field),
	CLI_OPT_CALL(CLI_FLAG, "all", 0, take_true),
	CLI_OPT_CALL(CLI_FLAG, "stale", 0, take_true),
	CLI_OPT_CALL(CLI_FLAG, "dry-run", 0, take_true),
	CLI_OPT_FLAG("json", 0, filter_args_t, json),
	CLI_OPT_END
};

int cmd_evict(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv)
{
	filter_args_t a = { 0 };
	int rc = cli_parse(cmd, argc, argv, evict_opts, &a);

	if (rc != CLI_GO_ON)
		return rc;
	if (!a.fields[0] || (a.dry_run && !a.stale))
		return usage_error(cmd->name, a.dry_run ? "--dry-run goes "
		    "with --stale" : "give --key KEY, a filter, --all or "
		    "--stale");
	return run_op(socket, "evict", a.fields, a.json, print_evict);
}
