/*
 * Deployments and readiness (docs/operations.md): ready says whether
 * every spec of a manifest or deployment is cached (and with --wait warms
 * what is not); deploy registers, lists and removes deployments, whose
 * kernels the daemon keeps pinned.
 */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../proto/entry.h"
#include "cli.h"

const char usage_ready[] =
"usage: kspec [--socket PATH] ready MANIFEST|DEPLOYMENT [--wait SECONDS]\n"
"           [--json]\n"
"\n"
"Says whether every spec of MANIFEST (as kspec warm reads it), or of the\n"
"deployment of that name (kspec deploy; when no such file exists), is cached\n"
"for this daemon's compilers now: how many of how many, and which are\n"
"missing.  Nothing is compiled, unless --wait: then the missing specs are\n"
"warmed (at warm priority) and kspec waits until they are all cached or\n"
"SECONDS have passed (then what is still queued is cancelled).  Exit\n"
"status 0 ready, 1 not ready (or a spec that can never be: named with\n"
"its error), 2 usage, 3 no daemon.  For a startup script to gate on.\n";

/* The specs of deployment NAME into SPECS (ORIGIN: their indexes). */
static int deployment_specs(const char *socket, const char *name,
    cJSON *specs, cJSON *origin)
{
	const cJSON *d, *it;
	cJSON *reply;
	ks_buf_t f;
	int rc, i = 0;

	if (strlen(name) > 64)
		return usage_error("ready", "no file '%s', nor a deployment "
		    "name", name);
	ks_buf_init(&f);
	ks_buf_puts(&f, "\"name\":");
	ks_buf_json_str(&f, name);
	rc = call_parsed(socket, "deployments", f.data, &reply);
	ks_buf_close(&f);
	if (rc)
		return rc;
	d = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(reply,
	    "deployments"), 0);
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(d, "items")) {
		cJSON_AddItemToArray(specs, cJSON_Duplicate(it, 1));
		cJSON_AddItemToArray(origin, cJSON_CreateNumber(i++));
	}
	cJSON_Delete(reply);
	return EXIT_OK;
}

/* The ready op over SPECS in batches, or over DEPLOYMENT's (its SPECS)
 * by name in one, which tells the daemon when it is ready: *CACHED, and
 * MISSING gets {index, spec, key | code, message} per spec not cached. */
static int ready_check(kspec_client_t *c, const char *deployment,
    const cJSON *const *sp, int n, const int *origin, cJSON *missing,
    int *cached)
{
	int at, i, rc, taken;
	int *idx = malloc(((size_t)n + 1) * sizeof *idx);

	*cached = 0;
	if (!idx)
		return KSPEC_E_NOMEM;
	for (i = 0; i < n; i++)
		idx[i] = i;
	for (at = 0, rc = 0; at < n && rc == 0; at += taken) {
		cJSON *reply;
		const cJSON *m;
		char *fields, *text = NULL;

		if (deployment) {
			ks_buf_t f;

			ks_buf_init(&f);
			ks_buf_puts(&f, "\"deployment\":");
			ks_buf_json_str(&f, deployment);
			fields = f.data;
			taken = n;
		} else {
			fields = items_batch(sp, idx + at, n - at, &taken);
		}
		if (!fields) {
			rc = KSPEC_E_NOMEM;
			break;
		}
		rc = kspec_call(c, "ready", fields, &text);
		free(fields);
		if (rc)
			break;
		reply = cJSON_Parse(text);
		kspec_free(text);
		*cached += (int)jnum(reply, "cached");
		cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(reply,
		    "missing")) {
			cJSON *x = cJSON_Duplicate(m, 1);
			int k = at + (int)jnum(m, "index");

			cJSON_ReplaceItemInObject(x, "index",
			    cJSON_CreateNumber(k));
			cJSON_AddNumberToObject(x, "spec", origin[k]);
			cJSON_AddItemToArray(missing, x);
		}
		cJSON_Delete(reply);
	}
	free(idx);
	return rc;
}

/* Warms the specs of MISSING that can be (no error), waiting at most
 * UNTIL (ks_now_ns); what is still queued then is cancelled. */
static int ready_warm(kspec_client_t *c, const cJSON *const *sp,
    const cJSON *missing, uint64_t until)
{
	uint64_t ids[64], id;
	int nids = 0, i, rc = 0, n = 0, at, taken;
	int *idx = malloc(((size_t)cJSON_GetArraySize(missing) + 1) *
	    sizeof *idx);
	const cJSON *m;

	if (!idx)
		return KSPEC_E_NOMEM;
	cJSON_ArrayForEach(m, missing)
		if (!cJSON_GetObjectItemCaseSensitive(m, "code"))
			idx[n++] = (int)jnum(m, "index");   /* can be cached */
	for (at = 0; at < n && nids < 64 && rc == 0; at += taken) {
		char *fields = items_batch(sp, idx + at, n - at, &taken);

		if (!fields) {
			rc = KSPEC_E_NOMEM;
			break;
		}
		rc = kspec_send(c, "warm", fields, &ids[nids]);
		nids += rc == 0;
		free(fields);
	}
	free(idx);
	for (i = 0; i < nids && rc == 0; ) {
		uint64_t now = ks_now_ns();
		char *text = NULL;

		if (now >= until) {
			rc = KSPEC_E_TIMEOUT;
			break;
		}
		rc = kspec_recv(c, (int)((until - now) / 1000000) + 1, &id,
		    &text);
		kspec_free(text);
		if (rc == KSPEC_E_TIMEOUT && ks_now_ns() < until)
			rc = 0;         /* a signal: wait on */
		else if (rc == 0)
			i++;
		else if (rc != KSPEC_E_TIMEOUT)
			i++, rc = 0;    /* a warm's own error: counted next */
	}
	if (rc == KSPEC_E_TIMEOUT) {
		/* Take back what is still queued, and read what comes. */
		char f[64], *text = NULL;
		int j;

		for (j = 0; j < nids; j++) {
			snprintf(f, sizeof f, "\"request\":%" PRIu64, ids[j]);
			kspec_send(c, "cancel", f, &id);
		}
		while (kspec_recv(c, 2000, &id, &text) != KSPEC_E_TIMEOUT) {
			kspec_free(text);
			text = NULL;
		}
		return KSPEC_E_TIMEOUT;
	}
	return rc;
}

/* What ready reads from its command line. */
typedef struct {
	const char *path;
	double wait;
	int json;
} ready_args_t;

static int take_wait(const cli_cmd_t *cmd, void *args, const cli_opt_t *o,
    char *value)
{
	ready_args_t *a = args;
	char *end;

	a->wait = strtod(value, &end);
	if (*end || end == value || a->wait < 0 || a->wait > 86400)
		return usage_error(cmd->name, "--wait takes 0 to 86400 "
		    "seconds");
	return 0;
}

static const cli_opt_t ready_opts[] = {
	CLI_OPT_OPERAND(ready_args_t, path),
	CLI_OPT_CALL(CLI_VALUE, "wait", 0, take_wait),
	CLI_OPT_FLAG("json", 0, ready_args_t, json),
	CLI_OPT_END
};

int cmd_ready(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv)
{
	ready_args_t a = { 0 };
	const char *path, *deployment = NULL;
	kspec_client_t *c = NULL;
	cJSON *man = NULL, *specs, *origin_j, *missing, *out;
	char why[256], *text;
	int cached = 0, n, i, rc, *origin = NULL, timed_out = 0;
	const cJSON **sp = NULL, *x;

	rc = cli_parse(cmd, argc, argv, ready_opts, &a);
	if (rc != CLI_GO_ON)
		return rc;
	path = a.path;
	if (!path)
		return usage_error(cmd->name, "missing MANIFEST or "
		    "DEPLOYMENT");
	specs = cJSON_CreateArray();
	origin_j = cJSON_CreateArray();
	missing = cJSON_CreateArray();
	if (access(path, F_OK) != 0 && strchr(path, '/') == NULL) {
		/* A deployment: its specs, as the daemon keeps them. */
		rc = deployment_specs(socket, path, specs, origin_j);
		if (rc)
			goto out;
		man = cJSON_CreateObject();
		deployment = path;
	} else {
		text = slurp(path);
		man = text ? cJSON_Parse(text) : NULL;
		free(text);
	}
	if (!man || (!cJSON_GetArraySize(specs) &&
	    expand_manifest(man, specs, origin_j, why, sizeof why))) {
		fprintf(stderr, "kspec: %s: %s\n", path, !man ? "cannot read "
		    "it as JSON" : why);
		rc = EXIT_FAIL;
		goto out;
	}
	n = cJSON_GetArraySize(specs);
	origin = calloc((size_t)n + 1, sizeof *origin);
	sp = calloc((size_t)n + 1, sizeof *sp);
	if (!origin || !sp) {
		fputs("kspec: E_NOMEM: out of memory\n", stderr);
		rc = EXIT_FAIL;
		goto out;
	}
	i = 0;
	cJSON_ArrayForEach(x, specs)
		sp[i++] = x;
	i = 0;
	cJSON_ArrayForEach(x, origin_j)
		origin[i++] = x->valueint;
	rc = open_client(socket, &c);
	if (rc)
		goto out;
	rc = ready_check(c, deployment, sp, n, origin, missing,
		    &cached);
	if (rc == 0 && cached < n && a.wait > 0) {
		rc = ready_warm(c, sp, missing, ks_now_ns() +
		    (uint64_t)(a.wait * 1e9));
		timed_out = rc == KSPEC_E_TIMEOUT;
		cJSON_Delete(missing);
		missing = cJSON_CreateArray();
		rc = ready_check(c, deployment, sp, n, origin, missing,
		    &cached);
	}
	if (rc) {
		rc = fail(c, rc);
		goto out;
	}
	if (a.json) {
		out = cJSON_CreateObject();
		cJSON_AddBoolToObject(out, "ready", cached == n);
		cJSON_AddNumberToObject(out, "specs", n);
		cJSON_AddNumberToObject(out, "cached", cached);
		cJSON_AddBoolToObject(out, "timed_out", timed_out);
		cJSON_AddItemToObject(out, "missing", missing);
		missing = NULL;
		text = cJSON_PrintUnformatted(out);
		puts(text ? text : "{}");
		free(text);
		cJSON_Delete(out);
	} else {
		const cJSON *m;

		printf("%s: %d of %d specs cached%s\n", cached == n ? "ready" :
		    "not ready", cached, n, timed_out ? " (--wait ran out)" :
		    "");
		cJSON_ArrayForEach(m, missing) {
			const cJSON *s = cJSON_GetArrayItem(specs,
			    (int)jnum(m, "index"));

			if (cJSON_GetObjectItemCaseSensitive(m, "code"))
				printf("  specs[%d] %s: %s: %s\n",
				    (int)jnum(m, "spec"), jstr(s, "kernel"),
				    jstr(m, "code"), jstr(m, "message"));
			else
				printf("  specs[%d] %s: not cached (key %.12s)\n",
				    (int)jnum(m, "spec"), jstr(s, "kernel"),
				    jstr(m, "key"));
		}
	}
	rc = cached == n ? EXIT_OK : EXIT_FAIL;
out:
	if (c)
		kspec_close(c);
	free(origin);
	free(sp);
	cJSON_Delete(man);
	cJSON_Delete(specs);
	cJSON_Delete(origin_j);
	cJSON_Delete(missing);
	return rc;
}

/* ---- deploy ---- */

const char usage_deploy[] =
"usage: kspec [--socket PATH] deploy add NAME MANIFEST [--json]\n"
"       kspec [--socket PATH] deploy ls [NAME] [--json]\n"
"       kspec [--socket PATH] deploy rm NAME [--json]\n"
"\n"
"Registers the specs of MANIFEST (at most 256, as kspec warm reads it)\n"
"with the daemon as deployment NAME: their kernels are never evicted to\n"
"keep the store in its budget, and kspec ready NAME says whether all are\n"
"cached.  ls lists deployments with how many of their specs are cached;\n"
"rm removes one (its kernels stay, unpinned).  add and rm are for the\n"
"daemon's uid, root and --admin-group.  NAME: letters, digits, . _ -\n";

/* What deploy reads from its command line. */
typedef struct {
	const char *arg[4];     /* add NAME MANIFEST, ls [NAME] or rm NAME */
	int json;
} deploy_args_t;

static const cli_opt_t deploy_opts[] = {
	CLI_OPT_OPERAND(deploy_args_t, arg[0]),
	CLI_OPT_OPERAND(deploy_args_t, arg[1]),
	CLI_OPT_OPERAND(deploy_args_t, arg[2]),
	CLI_OPT_OPERAND(deploy_args_t, arg[3]),
	CLI_OPT_FLAG("json", 0, deploy_args_t, json),
	CLI_OPT_END
};

int cmd_deploy(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv)
{
	deploy_args_t a = { 0 };
	const char *const *args = a.arg;
	kspec_client_t *c = NULL;
	cJSON *man = NULL, *specs = NULL, *origin = NULL, *reply;
	const cJSON *d;
	char why[256], *text = NULL, *items = NULL;
	ks_buf_t f;
	int rc, nargs = 0;

	rc = cli_parse(cmd, argc, argv, deploy_opts, &a);
	if (rc != CLI_GO_ON)
		return rc;
	while (nargs < 4 && args[nargs])
		nargs++;
	ks_buf_init(&f);
	if (nargs == 3 && strcmp(args[0], "add") == 0) {
		text = slurp(args[2]);
		man = text ? cJSON_Parse(text) : NULL;
		free(text);
		specs = cJSON_CreateArray();
		origin = cJSON_CreateArray();
		if (!man || expand_manifest(man, specs, origin, why,
		    sizeof why)) {
			fprintf(stderr, "kspec: %s: %s\n", args[2], !man ?
			    "cannot read it as JSON" : why);
			rc = EXIT_FAIL;
			goto out;
		}
		items = cJSON_PrintUnformatted(specs);
		ks_buf_puts(&f, "\"name\":");
		ks_buf_json_str(&f, args[1]);
		ks_buf_printf(&f, ",\"items\":%s", items ? items : "[]");
	} else if ((nargs == 2 && strcmp(args[0], "rm") == 0) ||
	    (nargs <= 2 && nargs >= 1 && strcmp(args[0], "ls") == 0)) {
		if (nargs == 2) {
			ks_buf_puts(&f, "\"name\":");
			ks_buf_json_str(&f, args[1]);
		}
	} else {
		ks_buf_close(&f);
		return usage_error(cmd->name, "give: add NAME MANIFEST, ls "
		    "[NAME] or rm NAME");
	}
	rc = open_client(socket, &c);
	if (rc)
		goto out;
	rc = kspec_call(c, strcmp(args[0], "add") == 0 ? "deploy" :
	    strcmp(args[0], "rm") == 0 ? "undeploy" : "deployments",
	    f.len ? f.data : NULL, &text);
	if (rc) {
		rc = fail(c, rc);
		goto out;
	}
	if (a.json) {
		puts(text);
	} else if (strcmp(args[0], "ls") == 0) {
		reply = cJSON_Parse(text);
		printf("%-24s %7s %7s %7s %5s %5s\n", "name", "specs",
		    "cached", "pinned", "ready", "late");
		cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(reply,
		    "deployments"))
			printf("%-24s %7d %7d %7d %5s %5d\n", jstr(d, "name"),
			    (int)jnum(d, "specs"), (int)jnum(d, "cached"),
			    (int)jnum(d, "pinned"), cJSON_IsTrue(
			    cJSON_GetObjectItemCaseSensitive(d, "ready")) ?
			    "yes" : "no", (int)jnum(d, "late_compiles"));
		cJSON_Delete(reply);
	} else if (strcmp(args[0], "add") == 0) {
		printf("deployment %s: %d specs registered; their kernels are "
		    "pinned\n", args[1], cJSON_GetArraySize(specs));
	} else {
		printf("deployment %s removed\n", args[1]);
	}
	kspec_free(text);
	rc = EXIT_OK;
out:
	if (c)
		kspec_close(c);
	free(items);
	ks_buf_close(&f);
	cJSON_Delete(man);
	cJSON_Delete(specs);
	cJSON_Delete(origin);
	return rc;
}
