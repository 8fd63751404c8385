/*
 * What the daemon is and how it is: ping, stats (its counters as a
 * table), hello and kernels (the kernel library).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

const char usage_ping[] =
"usage: kspec [--socket PATH] ping [--wait SECONDS] [--json]\n"
"\n"
"Sends a ping and prints the round-trip time.  With --wait, a daemon\n"
"that is not there yet (no socket, or nobody listening) is tried again\n"
"every 50 ms until it answers or SECONDS have passed (exit 3 then):\n"
"for scripts that start kspecd and go on once it serves.\n";

const char usage_stats[] =
"usage: kspec [--socket PATH] stats [--all | --json]\n"
"\n"
"Prints a summary of the daemon's counters (requests, hits, compiles,\n"
"latencies, tiers, workers, connections, canaries, audit); --all every\n"
"counter as a table; --json the daemon's reply verbatim.\n";

const char usage_hello[] =
"usage: kspec [--socket PATH] hello [--json]\n"
"\n"
"Prints the daemon's hello reply (protocol and server versions, backends)\n"
"as JSON (--json is accepted, and changes nothing).\n";

const char usage_kernels[] =
"usage: kspec [--socket PATH] kernels [--json]\n"
"\n"
"Lists the kernel library: each kernel's shape parameters, dtypes and\n"
"variants with their guards.\n";

/* ---- ping ---- */

static void on_wait_alarm(int sig)
{
	static const char msg[] = "kspec: no answer from kspecd within the "
	    "--wait time\n";

	(void)sig;
	if (write(2, msg, sizeof msg - 1) < 0)
		_exit(EXIT_CONNECT);
	_exit(EXIT_CONNECT);
}

/* Connects, trying again every 50 ms while nobody listens on the socket
 * yet, until WAIT seconds have passed; the last failure is reported as
 * open_client reports it.  A socket a service manager holds for a daemon
 * still starting accepts at once, and the ping then waits in its backlog:
 * an alarm bounds that wait too. */
static int open_client_waiting(const char *socket, double wait,
    kspec_client_t **c)
{
	double end = mono_s() + wait;

	signal(SIGALRM, on_wait_alarm);
	alarm((unsigned)wait + 1);
	for (;;) {
		int rc = kspec_connect(socket, c);

		if (rc == 0)
			return EXIT_OK;
		if (rc != KSPEC_E_CONNECT || mono_s() + 0.05 > end) {
			kspec_close(*c);
			*c = NULL;
			return open_client(socket, c);
		}
		kspec_close(*c);
		*c = NULL;
		usleep(50000);
	}
}

/* What ping reads from its command line. */
typedef struct {
	int json;
	double wait;            /* -1: none */
} ping_args_t;

static int take_wait(const cli_cmd_t *cmd, void *args, const cli_opt_t *o,
    char *value)
{
	ping_args_t *a = args;
	char *end;

	errno = 0;
	a->wait = strtod(value, &end);
	if (errno || end == value || *end || !(a->wait >= 0) ||
	    a->wait > 86400)
		return usage_error(cmd->name, "--wait takes seconds, "
		    "0..86400 (got '%s')", value);
	return 0;
}

static const cli_opt_t ping_opts[] = {
	CLI_OPT_FLAG("json", 0, ping_args_t, json),
	CLI_OPT_CALL(CLI_VALUE, "wait", 0, take_wait),
	CLI_OPT_END
};

int cmd_ping(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv)
{
	ping_args_t a = { .wait = -1 };
	struct timespec t0, t1;
	kspec_client_t *c = NULL;
	double ms;
	int rc;

	rc = cli_parse(cmd, argc, argv, ping_opts, &a);
	if (rc != CLI_GO_ON)
		return rc;
	rc = a.wait >= 0 ? open_client_waiting(socket, a.wait, &c) :
	    open_client(socket, &c);
	if (rc)
		return rc;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = kspec_ping(c);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rc) {
		rc = fail(c, rc);
		kspec_close(c);
		return rc;
	}
	alarm(0);
	ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
	    (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	if (a.json)
		printf("{\"ok\":true,\"ms\":%.3f}\n", ms);
	else
		printf("pong from %s in %.3f ms\n", kspec_socket_path(c), ms);
	kspec_close(c);
	return EXIT_OK;
}

/* ---- stats and hello ---- */

static void print_scalar(const char *name, const cJSON *v)
{
	double d;

	printf("%-40s ", name);
	if (cJSON_IsString(v)) {
		printf("%s\n", v->valuestring);
	} else if (cJSON_IsNumber(v)) {
		d = v->valuedouble;
		if (d == (double)(int64_t)d && d > -1e15 && d < 1e15)
			printf("%" PRId64 "\n", (int64_t)d);
		else
			printf("%.6g\n", d);
	} else if (cJSON_IsBool(v)) {
		printf("%s\n", cJSON_IsTrue(v) ? "true" : "false");
	} else {
		/* null, or an empty object or array */
		printf("-\n");
	}
}

/* 1 when O is an object of scalars only (a row of a list). */
static int is_row(const cJSON *o)
{
	const cJSON *c;

	if (!cJSON_IsObject(o) || !o->child)
		return 0;
	for (c = o->child; c; c = c->next)
		if (cJSON_IsObject(c) || cJSON_IsArray(c))
			return 0;
	return 1;
}

/* One line: "name key=value key=value ...". */
static void print_row(const char *name, const cJSON *o)
{
	const cJSON *c;

	printf("%-40s", name);
	for (c = o->child; c; c = c->next) {
		printf(" %s=", c->string);
		if (cJSON_IsString(c))
			printf("%s", c->valuestring);
		else if (cJSON_IsNumber(c) && c->valuedouble ==
		    (double)(int64_t)c->valuedouble)
			printf("%" PRId64, (int64_t)c->valuedouble);
		else if (cJSON_IsNumber(c))
			printf("%.6g", c->valuedouble);
		else if (cJSON_IsBool(c))
			printf("%s", cJSON_IsTrue(c) ? "true" : "false");
		else
			printf("-");
	}
	printf("\n");
}

/* 1 when O is a latency histogram of stats: le_us, counts, sum_us. */
static int is_hist(const cJSON *o)
{
	return cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(o, "le_us")) &&
	    cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(o, "counts"));
}

static void us_text(double us, char *out, size_t outlen)
{
	if (us < 1000)
		snprintf(out, outlen, "%gus", us);
	else if (us < 1e6)
		snprintf(out, outlen, "%gms", us / 1e3);
	else
		snprintf(out, outlen, "%gs", us / 1e6);
}

/* The bound of the bucket that holds quantile Q of H, in "<=25us" form,
 * as the dashboard shows it. */
static void hist_quantile(const cJSON *h, double q, double total, char *out,
    size_t outlen)
{
	const cJSON *le = cJSON_GetObjectItemCaseSensitive(h, "le_us");
	const cJSON *c;
	double seen = 0;
	int i = 0;

	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(h, "counts")) {
		seen += c->valuedouble;
		if (seen >= q * total) {
			const cJSON *b = cJSON_GetArrayItem(le, i);
			char t[48];

			if (!b)
				b = cJSON_GetArrayItem(le, i - 1);
			us_text(b ? b->valuedouble : 0, t, sizeof t);
			snprintf(out, outlen, "%s%s", cJSON_GetArrayItem(le, i) ?
			    "<=" : ">", t);
			return;
		}
		i++;
	}
	snprintf(out, outlen, "-");
}

/* One line for a histogram: how many, p50, p99 (bucket bounds). */
static void print_hist(const char *name, const cJSON *h)
{
	const cJSON *c;
	double total = 0;
	char p50[64], p99[64];

	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(h, "counts"))
		total += c->valuedouble;
	if (total == 0) {
		printf("%-40s n=0\n", name);
		return;
	}
	hist_quantile(h, 0.5, total, p50, sizeof p50);
	hist_quantile(h, 0.99, total, p99, sizeof p99);
	printf("%-40s n=%.0f p50%s p99%s\n", name, total, p50, p99);
}

/* Prints V as "dotted.name value" lines; arrays as name[i], an array
 * element that is a flat object (a worker, a compile in flight) as one
 * line, an object of such objects (requests by op) one line each, and a
 * histogram as its count and quantiles. */
static void print_flat(const char *prefix, const cJSON *v)
{
	char name[256];
	const cJSON *c;
	int i = 0;

	if (is_hist(v)) {
		print_hist(prefix, v);
		return;
	}
	if (cJSON_IsObject(v) && v->child && is_row(v->child)) {
		for (c = v->child; c; c = c->next) {
			snprintf(name, sizeof name, "%s.%s", prefix, c->string);
			if (is_row(c))
				print_row(name, c);
			else
				print_flat(name, c);
		}
		return;
	}
	if (cJSON_IsArray(v) && v->child && is_row(v->child)) {
		for (c = v->child; c; c = c->next, i++) {
			snprintf(name, sizeof name, "%s[%d]", prefix, i);
			if (is_row(c))
				print_row(name, c);
			else
				print_flat(name, c);
		}
		return;
	}
	if ((!cJSON_IsObject(v) && !cJSON_IsArray(v)) || !v->child) {
		print_scalar(prefix, v);
		return;
	}
	for (c = v->child; c; c = c->next, i++) {
		if (cJSON_IsArray(v))
			snprintf(name, sizeof name, "%s[%d]", prefix, i);
		else
			snprintf(name, sizeof name, "%s%s%s", prefix,
			    *prefix ? "." : "", c->string);
		print_flat(name, c);
	}
}

/* The hit ratio line: hits in memory and on disk, of the gets. */
static void print_hit_ratio(const cJSON *s)
{
	double gets = jnum(s, "gets");
	double hits = jnum(s, "hits_memory") + jnum(s, "hits_disk");

	printf("%-40s ", "hit_ratio");
	if (gets > 0)
		printf("%.4f (hits in memory and on disk, of the gets)\n",
		    hits / gets);
	else
		printf("- (no gets yet)\n");
}

/* One summary line: NAME, then FMT's text. */
__attribute__((format(printf, 2, 3)))
static void line(const char *name, const char *fmt, ...)
{
	va_list ap;

	printf("%-40s ", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

/* What an operator looks at first, a line a subject; --all has the rest
 * under the same names. */
static void print_summary(const cJSON *s)
{
	const cJSON *probe = cJSON_GetObjectItemCaseSensitive(s, "probe");
	const cJSON *hot = cJSON_GetObjectItemCaseSensitive(s, "hot");
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(s, "store");
	const cJSON *can = cJSON_GetObjectItemCaseSensitive(s, "canaries");
	const cJSON *au = cJSON_GetObjectItemCaseSensitive(s, "audit");
	const cJSON *rem = cJSON_GetObjectItemCaseSensitive(s, "remote");
	const cJSON *lat = cJSON_GetObjectItemCaseSensitive(s, "latency");
	const cJSON *c;
	char cap[64];

	line("server", "%s, up %.0f s, compilers probed: %s", jstr(s,
	    "server"), jnum(s, "uptime_s"), *jstr(probe, "state") ?
	    jstr(probe, "state") : "-");
	line("requests", "%.0f (%.0f errors)", jnum(s, "requests"),
	    jnum(s, "errors"));
	line("gets", "%.0f (from memory %.0f, from disk %.0f)", jnum(s,
	    "gets"), jnum(s, "hits_memory"), jnum(s, "hits_disk"));
	print_hit_ratio(s);
	line("compiles", "%.0f (joined %.0f, failed %.0f, after ready %.0f)",
	    jnum(s, "compiles"), jnum(s, "joins"), jnum(s, "failures"),
	    jnum(s, "late_compiles"));
	for (c = lat ? lat->child : NULL; c; c = c->next) {
		char name[64];

		snprintf(name, sizeof name, "latency.%s", c->string);
		if (is_hist(c))
			print_hist(name, c);
		else if (cJSON_IsObject(c))
			print_flat(name, c);
	}
	line("hot", "%.0f entries, %.0f of %.0f bytes", jnum(hot, "entries"),
	    jnum(hot, "bytes"), jnum(hot, "max_bytes"));
	if (jnum(st, "max_bytes") > 0)
		snprintf(cap, sizeof cap, "of at most %.0f", jnum(st,
		    "max_bytes"));
	else
		snprintf(cap, sizeof cap, "(no limit)");
	line("store", "%s: %.0f entries, %.0f bytes %s, %.0f evicted, %.0f "
	    "corrupt", jstr(st, "path"), jnum(st, "entries"), jnum(st,
	    "bytes"), cap, jnum(st, "evicted"), jnum(st, "corrupt"));
	line("workers", "%d (crashes %.0f, timeouts %.0f, out of memory %.0f), "
	    "%.0f queued, %d compiling", cJSON_GetArraySize(
	    cJSON_GetObjectItemCaseSensitive(s, "workers")), jnum(s,
	    "worker_crashes"), jnum(s, "worker_timeouts"), jnum(s,
	    "worker_ooms"), jnum(s, "queue_depth"), cJSON_GetArraySize(
	    cJSON_GetObjectItemCaseSensitive(s, "inflight")));
	line("connections", "%.0f open (%.0f refused)", jnum(s,
	    "connections"), jnum(s, "connections_refused_full") + jnum(s,
	    "connections_refused_user") + jnum(s, "connections_refused_peer"));
	if (cJSON_IsObject(rem))
		line("remote", "%s (hits %.0f, misses %.0f, refused %.0f)",
		    jstr(rem, "url"), jnum(rem, "hits"), jnum(rem, "misses"),
		    jnum(rem, "auth_failures"));
	else
		line("remote", "none (no --remote)");
	line("canaries", "%.0f passed, %.0f failed, %.0f pending, %.0f "
	    "kernels disabled", jnum(can, "passed"), jnum(can, "failed"),
	    jnum(can, "pending"), jnum(can, "disabled"));
	line("audit", "%.0f audited, %.0f mismatched, %.0f quarantined",
	    jnum(au, "audited"), jnum(au, "mismatched"), jnum(au,
	    "quarantined"));
	printf("(kspec stats --all: every counter)\n");
}

static int print_stats_table(const char *text, int all)
{
	cJSON *json = cJSON_Parse(text);
	const cJSON *c;

	if (!cJSON_IsObject(json)) {
		cJSON_Delete(json);
		fputs("kspec: E_PROTO: stats reply is not a JSON object\n",
		    stderr);
		return EXIT_FAIL;
	}
	if (!all) {
		print_summary(json);
		cJSON_Delete(json);
		return EXIT_OK;
	}
	for (c = json->child; c; c = c->next) {
		if (strcmp(c->string, "id") && strcmp(c->string, "ok"))
			print_flat(c->string, c);
		/* After the hit counters: their share of the gets. */
		if (strcmp(c->string, "hits_disk") == 0)
			print_hit_ratio(json);
	}
	cJSON_Delete(json);
	return EXIT_OK;
}

/* What stats, hello and kernels read from their command line. */
typedef struct {
	int json;
	int all;                /* stats: every counter */
} json_args_t;

static const cli_opt_t json_opts[] = {
	CLI_OPT_FLAG("json", 0, json_args_t, json),
	CLI_OPT_END
};

static const cli_opt_t stats_opts[] = {
	CLI_OPT_FLAG("json", 0, json_args_t, json),
	CLI_OPT_FLAG("all", 0, json_args_t, all),
	CLI_OPT_END
};

/* Runs stats or hello: JSON verbatim, or (stats only) a table. */
static int stats_or_hello(const cli_cmd_t *cmd, const char *socket,
    int argc, char **argv, int is_stats)
{
	json_args_t a = { .json = !is_stats };  /* hello is JSON either way */
	kspec_client_t *c = NULL;
	char *text = NULL;
	int rc;

	rc = cli_parse(cmd, argc, argv, is_stats ? stats_opts : json_opts, &a);
	if (rc != CLI_GO_ON)
		return rc;
	if (a.json && a.all)
		return usage_error(cmd->name, "--all and --json: --json is "
		    "every counter already");
	rc = open_client(socket, &c);
	if (rc)
		return rc;
	rc = is_stats ? kspec_stats(c, &text) : kspec_hello(c, &text);
	if (rc) {
		rc = fail(c, rc);
		kspec_close(c);
		return rc;
	}
	kspec_close(c);
	if (a.json) {
		fputs(text, stdout);
		fputc('\n', stdout);
	} else {
		rc = print_stats_table(text, a.all);
	}
	kspec_free(text);
	return rc;
}

int cmd_stats(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv)
{
	return stats_or_hello(cmd, socket, argc, argv, 1);
}

int cmd_hello(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv)
{
	return stats_or_hello(cmd, socket, argc, argv, 0);
}

/* ---- kernels ---- */

static int print_kernels(const cJSON *r)
{
	const cJSON *k, *v;

	cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(r, "kernels")) {
		printf("%s (v%d): %s\n  shape:", jstr(k, "name"),
		    (int)jnum(k, "version"), jstr(k, "summary"));
		cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(k,
		    "dims"))
			printf(" %s", cJSON_IsString(v) ? v->valuestring : "?");
		printf("\n  arguments:");
		cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(k,
		    "params")) {
			const char *acc = jstr(v, "access");

			if (strcmp(jstr(v, "kind"), "buffer") == 0)
				printf(" %s[%s,%s]", jstr(v, "name"),
				    strcmp(jstr(v, "dtype"), "i32") == 0 ?
				    "i32" : "dtype", strcmp(acc, "read") == 0 ?
				    "r" : strcmp(acc, "write") == 0 ? "w" : "rw");
			else
				printf(" %s:%s", jstr(v, "name"),
				    jstr(v, "dtype"));
		}
		printf("\n  dtypes:");
		cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(k,
		    "dtypes"))
			printf(" %s", cJSON_IsString(v) ? v->valuestring : "?");
		printf("\n");
		/* The weight dtypes beside each dtype (wdtype). */
		cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(k,
		    "wdtypes")) {
			const cJSON *w;

			if (cJSON_GetArraySize(v) == 0)
				continue;
			printf("  wdtype with %s:", v->string);
			cJSON_ArrayForEach(w, v)
				printf(" %s", cJSON_IsString(w) ?
				    w->valuestring : "?");
			printf("\n");
		}
		cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(k,
		    "variants"))
			printf("  %-12s %s\n", jstr(v, "name"),
			    jstr(v, "guard"));
	}
	return EXIT_OK;
}

int cmd_kernels(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv)
{
	json_args_t a = { 0 };
	int rc = cli_parse(cmd, argc, argv, json_opts, &a);

	if (rc != CLI_GO_ON)
		return rc;
	return run_op(socket, "kernels", "", a.json, print_kernels);
}
