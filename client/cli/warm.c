/*
 * warm: every spec of a manifest compiled ahead, at lower priority than
 * live gets, each reported as it completes; Ctrl-C takes back what the
 * daemon still has queued.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

const char usage_warm[] =
"usage: kspec [--socket PATH] warm MANIFEST [--json]\n"
"\n"
"Compiles every spec of MANIFEST that is not cached yet, at lower priority\n"
"than live gets, reporting each spec as it completes: a progress bar on a\n"
"terminal, one line per spec otherwise; a bad spec is named by its index\n"
"in \"specs\" (specs[N], from 0) and the rest go on.  A summary always\n"
"comes last.  Ctrl-C cancels the specs still queued in the daemon (a\n"
"running compile finishes).  Exit status 0, 1 if any spec failed, 3 if\n"
"the connection was lost, 130 after Ctrl-C.\n"
"Manifest (JSON, docs/cli.md):\n"
"  {\"version\":1, \"targets\":{\"cpu\":[\"x86-64-v3\",\"x86-64-v4\"]},\n"
"   \"specs\":[{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"bf16\",\n"
"              \"shape\":{\"M\":1,\"N\":4096,\"K\":4096}}]}\n";

/*
 * Specs go in warm requests of at most WARM_BATCH items and
 * WARM_BATCH_BYTES of header (items_batch), with "progress":true so that
 * each item is reported as it completes.  Two requests are in flight at
 * once: the second keeps the workers busy while the first's last compiles
 * finish, and two stay far below the flights one uid may have queued.
 */
#define WARM_WINDOW 2

/* What became of a spec; the summary counts them. */
enum { W_PENDING, W_CACHED, W_COMPILED, W_JOINED, W_FAILED, W_CANCELLED,
    W_RUNNING, W_STATES };

/* A request in flight: a warm of specs [start, start + n), or a cancel
 * of one. */
typedef struct {
	uint64_t id;
	int start, n;
	int is_cancel;
} warm_req_t;

typedef struct {
	const char *path;
	cJSON *specs;            /* the manifest expanded (expand_manifest) */
	const cJSON **spec;      /* its items, for access by index */
	int *origin;             /* per spec: its index in "specs" */
	int *state;              /* per spec: W_* */
	cJSON **result;          /* --json: per spec, its item or NULL */
	int n;
	int count[W_STATES];
	int next;                /* the first spec not sent */
	int *retry;              /* specs to send again one at a time */
	int nretry;
	warm_req_t req[2 * WARM_WINDOW];
	int nreq;
	int batches;             /* of req, the warms */
	int cancelling;          /* cancels sent */
	int tty, as_json;
} warm_run_t;

static volatile sig_atomic_t warm_interrupted;

static void on_warm_sigint(int sig)
{
	(void)sig;
	warm_interrupted = 1;   /* SA_RESETHAND: a second Ctrl-C kills */
}

static void describe_spec(const cJSON *s, char *buf, size_t len)
{
	const cJSON *d;
	size_t n;

	n = (size_t)snprintf(buf, len, "%s %s %s", jstr(s, "kernel"),
	    jstr(s, "backend"), jstr(s, "dtype"));
	cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(s, "shape")) {
		if (n >= len)
			break;
		n += (size_t)snprintf(buf + n, len - n, " %s=%.0f", d->string,
		    d->valuedouble);
	}
	if (n < len && cJSON_GetObjectItemCaseSensitive(s, "target"))
		snprintf(buf + n, len - n, " @%s", jstr(s, "target"));
}

static void progress(const warm_run_t *r)
{
	int i, w = 30, done = r->n - r->count[W_PENDING];
	int fill = r->n ? done * w / r->n : w;

	fprintf(stderr, "\r[");
	for (i = 0; i < w; i++)
		fputc(i < fill ? '#' : ' ', stderr);
	fprintf(stderr, "] %d/%d", done, r->n);
	if (r->count[W_FAILED])
		fprintf(stderr, " (%d failed)", r->count[W_FAILED]);
	fflush(stderr);
}

/* Spec I ended as ITEM reports ({index, ok, key, variant, source} or
 * {index, ok:false, error}): counted, shown unless QUIET, kept for
 * --json. */
static void warm_record(warm_run_t *r, int i, const cJSON *item, int quiet)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(item, "error");
	const char *src = jstr(item, "source");
	int ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(item, "ok"));
	int st;
	char desc[256];

	if (i < 0 || i >= r->n || r->state[i] != W_PENDING)
		return;         /* reported already (the final reply) */
	st = !ok ? (strcmp(jstr(e, "code"), "E_CANCELLED") == 0 ?
	    W_CANCELLED : W_FAILED) : strcmp(src, "compiled") == 0 ?
	    W_COMPILED : strcmp(src, "joined") == 0 ? W_JOINED : W_CACHED;
	r->state[i] = st;
	r->count[W_PENDING]--;
	r->count[st]++;
	if (r->as_json) {
		cJSON *x = cJSON_Duplicate(item, 1);

		cJSON_ReplaceItemInObject(x, "index", cJSON_CreateNumber(i));
		cJSON_AddNumberToObject(x, "spec", r->origin[i]);
		r->result[i] = x;
		return;
	}
	if (quiet)
		return;
	describe_spec(r->spec[i], desc, sizeof desc);
	if (st == W_FAILED)
		fprintf(r->tty ? stderr : stdout, "%sFAIL  specs[%d] %s: %s: "
		    "%s\n", r->tty ? "\r\033[K" : "", r->origin[i], desc,
		    jstr(e, "code"), jstr(e, "message"));
	else if (st != W_CANCELLED && !r->tty)
		printf("ok    specs[%d] %s: %s %s, key %.12s\n", r->origin[i],
		    desc, jstr(item, "variant"), src, jstr(item, "key"));
	if (!r->tty)
		fflush(stdout);
	else
		progress(r);
}

/* Spec I ends with error CODE and MSG. */
static void warm_fail(warm_run_t *r, int i, const char *code,
    const char *msg, int quiet)
{
	cJSON *item = cJSON_CreateObject(), *e;

	cJSON_AddNumberToObject(item, "index", i);
	cJSON_AddFalseToObject(item, "ok");
	e = cJSON_AddObjectToObject(item, "error");
	cJSON_AddStringToObject(e, "code", code);
	cJSON_AddStringToObject(e, "message", msg);
	warm_record(r, i, item, quiet);
	cJSON_Delete(item);
}

/* After Ctrl-C, the specs of the warms still in flight: compiling, since
 * the daemon took back every queued one.  It finishes and stores them. */
static void warm_running(warm_run_t *r)
{
	cJSON *x;
	int i, j;

	for (i = 0; i < r->nreq; i++) {
		for (j = r->req[i].start; !r->req[i].is_cancel &&
		    j < r->req[i].start + r->req[i].n; j++) {
			if (r->state[j] != W_PENDING)
				continue;
			r->state[j] = W_RUNNING;
			r->count[W_PENDING]--;
			r->count[W_RUNNING]++;
			if (!r->as_json)
				continue;
			x = cJSON_CreateObject();
			cJSON_AddNumberToObject(x, "index", j);
			cJSON_AddNumberToObject(x, "spec", r->origin[j]);
			cJSON_AddFalseToObject(x, "ok");
			cJSON_AddTrueToObject(x, "running");
			r->result[j] = x;
		}
	}
}

/* At the end, the specs still pending: each ends with CODE and MSG,
 * without a line each (the summary and the error line say why). */
static void warm_end_all(warm_run_t *r, const char *code, const char *msg)
{
	int i;

	for (i = 0; i < r->n; i++)
		if (r->state[i] == W_PENDING)
			warm_fail(r, i, code, msg, 1);
}

/* Sends the next warm request: one spec to retry, or the next batch. */
static int warm_send(warm_run_t *r, kspec_client_t *c)
{
	int idx[WARM_BATCH];
	char *items, *fields;
	int start, n, k, rc;

	/* One spec to retry alone, or the next batch. */
	start = r->nretry ? r->retry[--r->nretry] : r->next;
	k = start == r->next ? r->n - start : 1;
	for (n = 0; n < k && n < WARM_BATCH; n++)
		idx[n] = start + n;
	items = items_batch(r->spec, idx, n, &n);
	fields = items ? malloc(strlen(items) + 32) : NULL;
	if (!fields) {
		free(items);
		fputs("kspec: E_NOMEM: out of memory\n", stderr);
		return EXIT_FAIL;
	}
	if (start == r->next)
		r->next += n;
	sprintf(fields, "\"progress\":true,%s", items);
	free(items);
	rc = kspec_send(c, "warm", fields, &r->req[r->nreq].id);
	free(fields);
	if (rc)
		return fail(c, rc);
	r->req[r->nreq].start = start;
	r->req[r->nreq].n = n;
	r->req[r->nreq].is_cancel = 0;
	r->nreq++;
	r->batches++;
	return EXIT_OK;
}

/* Keeps WARM_WINDOW warm requests in flight while specs are left. */
static int warm_fill(warm_run_t *r, kspec_client_t *c)
{
	int rc = EXIT_OK;

	while (!rc && !warm_interrupted && r->batches < WARM_WINDOW &&
	    (r->nretry || r->next < r->n))
		rc = warm_send(r, c);
	return rc;
}

/* Ctrl-C: asks the daemon to take back what is queued of every warm in
 * flight. */
static int warm_cancel(warm_run_t *r, kspec_client_t *c)
{
	int i, nreq = r->nreq, rc;
	char fields[64];

	r->cancelling = 1;
	for (i = 0; i < nreq; i++) {
		snprintf(fields, sizeof fields, "\"request\":%" PRIu64,
		    r->req[i].id);
		rc = kspec_send(c, "cancel", fields, &r->req[r->nreq].id);
		if (rc)
			return fail(c, rc);
		r->req[r->nreq].is_cancel = 1;
		r->nreq++;
	}
	return EXIT_OK;
}

/* The frame (RC, TEXT) of request K: a progress frame, or its reply,
 * which takes it out of the list. */
static int warm_reply(warm_run_t *r, kspec_client_t *c, int k, int rc,
    char *text)
{
	warm_req_t q = r->req[k];
	const cJSON *it;
	const char *code, *msg;
	cJSON *json = NULL;
	int i;

	if (!rc && !q.is_cancel) {
		json = cJSON_Parse(text);
		it = cJSON_GetObjectItemCaseSensitive(json, "progress");
		if (it) {
			warm_record(r, q.start + (int)jnum(it, "index"), it, 0);
			cJSON_Delete(json);
			kspec_free(text);
			return EXIT_OK; /* more to come */
		}
	}
	kspec_free(text);
	r->req[k] = r->req[--r->nreq];
	if (q.is_cancel)
		return EXIT_OK;         /* E_NOT_FOUND: the warm had ended */
	r->batches--;
	if (!rc) {
		/* The reply repeats every item: any not reported yet. */
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(json,
		    "items"))
			warm_record(r, q.start + (int)jnum(it, "index"), it,
			    0);
		cJSON_Delete(json);
		return EXIT_OK;
	}
	/* The request as a whole was refused (a duplicate key in a spec,
	 * say): each of its specs alone finds the one at fault. */
	if (q.n > 1 && !warm_interrupted) {
		for (i = q.start + q.n - 1; i >= q.start; i--)
			r->retry[r->nretry++] = i;
		return EXIT_OK;
	}
	msg = kspec_last_error(c, &code);
	for (i = q.start; i < q.start + q.n; i++)
		warm_fail(r, i, *code ? code : kspec_err_name(rc), msg, 0);
	return EXIT_OK;
}

/* Sends and reads until every spec is done, or, after Ctrl-C, until the
 * daemon has answered the cancels.  Returns an exit status. */
static int warm_loop(warm_run_t *r, kspec_client_t *c)
{
	int rc = warm_fill(r, c), k;
	uint64_t id;
	char *text;

	while (!rc && r->nreq) {
		if (warm_interrupted && !r->cancelling) {
			rc = warm_cancel(r, c);
			continue;
		}
		if (r->cancelling && r->nreq == r->batches)
			break;          /* what is left is compiling */
		rc = kspec_recv(c, 250, &id, &text);
		if (rc == KSPEC_E_TIMEOUT) {
			rc = EXIT_OK;
			continue;
		}
		for (k = 0; k < r->nreq && r->req[k].id != id; k++)
			;
		if (k == r->nreq || rc == KSPEC_E_CONNECT)
			return fail(c, rc ? rc : KSPEC_E_PROTO);
		rc = warm_reply(r, c, k, rc, text);
		if (!rc)
			rc = warm_fill(r, c);
	}
	return rc;
}

static void warm_summary(warm_run_t *r, double secs)
{
	const int *n = r->count;
	cJSON *o, *items;
	char *t;
	int i;

	if (!r->as_json) {
		printf("warm %s: %d specs: %d cached, %d compiled, %d joined, "
		    "%d failed, %d cancelled", r->path, r->n, n[W_CACHED],
		    n[W_COMPILED], n[W_JOINED], n[W_FAILED], n[W_CANCELLED]);
		if (n[W_RUNNING])
			printf(", %d still compiling (stored when done)",
			    n[W_RUNNING]);
		printf(" in %.2f s%s\n", secs, warm_interrupted ?
		    " (interrupted)" : "");
		return;
	}
	o = cJSON_CreateObject();
	items = cJSON_AddArrayToObject(o, "items");
	for (i = 0; i < r->n; i++) {
		cJSON_AddItemToArray(items, r->result[i] ? r->result[i] :
		    cJSON_CreateNull());
		r->result[i] = NULL;
	}
	cJSON_AddNumberToObject(o, "total", r->n);
	cJSON_AddNumberToObject(o, "cached", n[W_CACHED]);
	cJSON_AddNumberToObject(o, "compiled", n[W_COMPILED]);
	cJSON_AddNumberToObject(o, "joined", n[W_JOINED]);
	cJSON_AddNumberToObject(o, "failed", n[W_FAILED]);
	cJSON_AddNumberToObject(o, "cancelled", n[W_CANCELLED]);
	cJSON_AddNumberToObject(o, "running", n[W_RUNNING]);
	cJSON_AddBoolToObject(o, "interrupted", warm_interrupted);
	cJSON_AddNumberToObject(o, "seconds", (double)(int64_t)(secs * 1000 +
	    0.5) / 1000);
	t = cJSON_PrintUnformatted(o);
	printf("%s\n", t);
	free(t);
	cJSON_Delete(o);
}

/* Reads and expands the manifest at PATH into R; an exit status. */
static int warm_open(warm_run_t *r, const char *path)
{
	cJSON *manifest, *origin, *x;
	char why[256], *text;
	int i;

	text = slurp(path);
	if (!text) {
		fprintf(stderr, "kspec: cannot read %s: %s\n", path,
		    strerror(errno ? errno : EIO));
		return EXIT_FAIL;
	}
	manifest = cJSON_Parse(text);
	free(text);
	r->specs = cJSON_CreateArray();
	origin = cJSON_CreateArray();
	if (!manifest || expand_manifest(manifest, r->specs, origin, why,
	    sizeof why)) {
		fprintf(stderr, "kspec: %s: %s\n", path, manifest ? why :
		    "not valid JSON");
		cJSON_Delete(manifest);
		cJSON_Delete(origin);
		return EXIT_FAIL;
	}
	cJSON_Delete(manifest);
	r->path = path;
	r->n = cJSON_GetArraySize(r->specs);
	r->spec = calloc((size_t)r->n + 1, sizeof *r->spec);
	r->origin = calloc((size_t)r->n + 1, sizeof *r->origin);
	r->state = calloc((size_t)r->n + 1, sizeof *r->state);
	r->retry = calloc((size_t)r->n + 1, sizeof *r->retry);
	r->result = calloc((size_t)r->n + 1, sizeof *r->result);
	if (!r->spec || !r->origin || !r->state || !r->retry || !r->result) {
		cJSON_Delete(origin);
		fputs("kspec: E_NOMEM: out of memory\n", stderr);
		return EXIT_FAIL;
	}
	i = 0;
	cJSON_ArrayForEach(x, r->specs)
		r->spec[i++] = x;
	i = 0;
	cJSON_ArrayForEach(x, origin)
		r->origin[i++] = (int)x->valuedouble;
	cJSON_Delete(origin);
	r->count[W_PENDING] = r->n;
	return EXIT_OK;
}

static void warm_close(warm_run_t *r)
{
	int i;

	for (i = 0; r->result && i < r->n; i++)
		cJSON_Delete(r->result[i]);
	cJSON_Delete(r->specs);
	free(r->spec);
	free(r->result);
	free(r->origin);
	free(r->state);
	free(r->retry);
}

/* What warm reads from its command line. */
typedef struct {
	const char *path;
	int json;
} warm_args_t;

static const cli_opt_t warm_opts[] = {
	CLI_OPT_OPERAND(warm_args_t, path),
	CLI_OPT_FLAG("json", 0, warm_args_t, json),
	CLI_OPT_END
};

int cmd_warm(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv)
{
	warm_args_t a = { 0 };
	struct sigaction sa, old;
	kspec_client_t *c = NULL;
	warm_run_t r;
	double t0 = mono_s();
	int rc;

	memset(&r, 0, sizeof r);
	rc = cli_parse(cmd, argc, argv, warm_opts, &a);
	if (rc != CLI_GO_ON)
		return rc;
	r.as_json = a.json;
	if (!a.path)
		return usage_error(cmd->name, "missing MANIFEST");
	rc = warm_open(&r, a.path);
	if (rc == EXIT_OK)
		rc = open_client(socket, &c);
	if (rc) {
		warm_close(&r);
		return rc;
	}
	r.tty = !r.as_json && isatty(2);
	/* Not SA_RESTART: a wait for a reply returns, and the loop sends
	 * the cancels. */
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_warm_sigint;
	sa.sa_flags = SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old);
	if (r.tty)
		progress(&r);
	rc = warm_loop(&r, c);
	sigaction(SIGINT, &old, NULL);
	kspec_close(c);
	/* What is pending now was compiling when the cancels were answered
	 * (the daemon finishes and stores it), or never sent; or the run
	 * stopped at an error, reported already. */
	if (rc)
		warm_end_all(&r, rc == EXIT_CONNECT ? "E_CONNECT" : "E_PROTO",
		    "not warmed: kspec warm stopped at an error");
	else if (warm_interrupted)
		warm_running(&r);
	warm_end_all(&r, "E_CANCELLED", "not sent: kspec warm was "
	    "interrupted");
	if (r.tty)
		fputs("\n", stderr);
	warm_summary(&r, mono_s() - t0);
	warm_close(&r);
	if (rc)
		return rc;
	if (warm_interrupted)
		return 128 + SIGINT;
	return r.count[W_FAILED] ? EXIT_FAIL : EXIT_OK;
}
