/*
 * deploy, undeploy, deployments: named lists of get-specs registered with
 * the daemon (a deployment's manifest), kept in the store with the keys
 * they pin against budget eviction.  A deployment's specs are stored in
 * canonical form (target as requested), so that its keys can be computed
 * again when the compilers change: ks_deploy_repin does so at start.
 * `ready` of a deployment reads its specs from here (op_ready.c).
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct {
	ks_later_t l;            /* first */
	int op;
	int rc;
	char name[KS_MAX_NAME + 1];
	int nspecs;
} deployed_t;

int ks_deploy_specs_parse(const char *specs, ks_request_t *out, char *err,
    size_t errlen)
{
	ks_buf_t b;
	int rc;

	ks_buf_init(&b);
	ks_buf_puts(&b, "{\"op\":\"ready\",\"items\":");
	ks_buf_puts(&b, specs);
	ks_buf_puts(&b, "}");
	if (!b.data) {
		snprintf(err, errlen, "out of memory");
		return KS_E_NOMEM;
	}
	rc = ks_request_parse(b.data, b.len, out, err, errlen);
	ks_buf_close(&b);
	return rc;
}

int ks_deploy_keys(ks_srv_t *srv, const ks_request_t *req, ks_hash_t *keys,
    ks_buf_t *specs, char *err, size_t errlen)
{
	char msg[256];
	ks_get_t g;
	int i, rc;

	if (specs)
		ks_buf_puts(specs, "[");
	for (i = 0; i < req->nitems; i++) {
		if (req->item_errs && req->item_errs[i].code) {
			snprintf(err, errlen, "items[%d]: %s", i,
			    req->item_errs[i].msg);
			return req->item_errs[i].code;
		}
		rc = ks_keys_normalize(&srv->keys, &req->items[i], &g, msg,
		    sizeof msg);
		if (rc) {
			snprintf(err, errlen, "items[%d]: %s", i, msg);
			return rc;
		}
		keys[i] = g.key;
		if (specs) {
			ks_buf_puts(specs, i ? "," : "");
			ks_get_spec_json(&g, specs);
		}
	}
	if (specs && ks_buf_puts(specs, "]") != KS_OK) {
		snprintf(err, errlen, "out of memory");
		return KS_E_NOMEM;
	}
	return KS_OK;
}

static void deployed_reply(ks_mail_t *m)
{
	deployed_t *d = (deployed_t *)m;
	ks_srv_t *srv = d->l.srv;
	ks_conn_t *c = d->l.conn;
	int op = ks_srv_answer_as(srv, d->op);

	if (ks_conn_live(c)) {
		if (d->rc == KS_E_NOT_FOUND) {
			char msg[128];

			snprintf(msg, sizeof msg, "no deployment named '%s'",
			    d->name);
			ks_reply_err(c, d->l.has_id, d->l.id, d->rc, msg);
		} else if (d->rc) {
			ks_reply_err(c, d->l.has_id, d->l.id, d->rc, "cannot write "
			    "the deployment to the store");
		} else {
			ks_reply_begin(c, d->l.has_id, d->l.id);
			ks_buf_puts(&c->out, ",\"name\":");
			ks_buf_json_str(&c->out, d->name);
			if (d->op == KS_OP_DEPLOY)
				ks_buf_printf(&c->out, ",\"specs\":%d",
				    d->nspecs);
			ks_reply_finish(c);
		}
	}
	srv->cur_op = op;
	ks_conn_done(c);
	free(d);
}

/* Writer thread. */
static void deploy_written(void *ctx, int rc)
{
	deployed_t *d = ctx;

	d->rc = rc;
	ks_later_post(d);
}

static void deploy_post(ks_conn_t *c, const ks_request_t *req,
    const char *specs, const ks_hash_t *keys, int n)
{
	ks_srv_t *srv = ks_srv_of(c);
	deployed_t *d = calloc(1, sizeof *d);

	if (!d) {
		ks_srv_reject(c, req->has_id, req->id, KS_E_NOMEM,
		    "out of memory");
		return;
	}
	ks_later_init(&d->l, c, req, deployed_reply);
	d->op = (int)req->op;
	d->nspecs = n;
	snprintf(d->name, sizeof d->name, "%s", req->name);
	if (ks_writer_deploy(srv->writer, req->name, specs, keys, (size_t)n,
	    deploy_written, d) != KS_OK) {
		free(d);
		ks_srv_reject(c, req->has_id, req->id, KS_E_NOMEM,
		    "out of memory");
		return;
	}
	ks_conn_wait(c);
}

void ks_op_deploy(ks_conn_t *c, const ks_request_t *req)
{
	ks_hash_t *keys;
	ks_buf_t specs;
	char err[512];
	int rc;

	if (!ks_srv_admin_only(c, req, "deploy"))
		return;
	keys = calloc(req->nitems ? (size_t)req->nitems : 1, sizeof *keys);
	ks_buf_init(&specs);
	rc = keys ? ks_deploy_keys(ks_srv_of(c), req, keys, &specs, err,
	    sizeof err) : KS_E_NOMEM;
	if (rc == KS_E_NOMEM && !keys)
		snprintf(err, sizeof err, "out of memory");
	/* Its specs are read back as one request's items (ready, the
	 * repin at start): they must fit one. */
	if (rc == KS_OK && specs.len + 64 > KS_MAX_HEADER) {
		rc = KS_E_TOO_LARGE;
		snprintf(err, sizeof err, "the deployment's specs take %zu "
		    "bytes in canonical form, more than a request may have "
		    "(%u); split it in two", specs.len, KS_MAX_HEADER - 64);
	}
	if (rc)
		ks_srv_reject(c, req->has_id, req->id, rc, err);
	else
		deploy_post(c, req, specs.data, keys, req->nitems);
	free(keys);
	ks_buf_close(&specs);
}

void ks_op_undeploy(ks_conn_t *c, const ks_request_t *req)
{
	if (!ks_srv_admin_only(c, req, "undeploy"))
		return;
	deploy_post(c, req, NULL, NULL, 0);
}

/* The deployments as the store has them, copied out of its walk (its
 * callback may not call into the store, and the coverage does). */
typedef struct dep_row {
	char *name, *specs;
	int64_t created;
	uint64_t pins;
	struct dep_row *next;
} dep_row_t;

static int collect(void *ctx, const char *name, const char *specs,
    int64_t created, uint64_t pins)
{
	dep_row_t **tail = ctx, *r = calloc(1, sizeof *r);

	if (!r || !(r->name = strdup(name)) || !(r->specs = strdup(specs))) {
		if (r)
			free(r->name);
		free(r);
		return KS_E_NOMEM;
	}
	r->created = created;
	r->pins = pins;
	while (*tail)
		tail = &(*tail)->next;
	*tail = r;
	return 0;
}

static void rows_free(dep_row_t *r)
{
	dep_row_t *next;

	for (; r; r = next) {
		next = r->next;
		free(r->name);
		free(r->specs);
		free(r);
	}
}

/* One deployment's row: its specs, pins, and how many are cached now. */
static void list_one(ks_srv_t *srv, ks_buf_t *out, const dep_row_t *d,
    int first)
{
	ks_request_t req;
	ks_hash_t have;
	char err[256], hex[KS_HASH_HEX];
	int i, cached = 0;

	if (ks_deploy_specs_parse(d->specs, &req, err, sizeof err) == KS_OK) {
		for (i = 0; i < req.nitems; i++) {
			ks_get_t g;

			if (ks_keys_normalize(&srv->keys, &req.items[i], &g,
			    err, sizeof err) != KS_OK)
				continue;
			ks_hash_hex(&g.key, hex);
			cached += ks_hot_has(srv->hot, &g.key) ||
			    ks_store_keys_with_prefix(srv->store, hex, &have,
			    1) == 1;
		}
	}
	ks_buf_printf(out, "%s{\"name\":", first ? "" : ",");
	ks_buf_json_str(out, d->name);
	ks_buf_printf(out, ",\"specs\":%d,\"cached\":%d,\"pinned\":%" PRIu64
	    ",\"created_ms\":%" PRId64 ",\"items\":%s}", req.nitems, cached,
	    d->pins, d->created, d->specs);
	ks_request_close(&req);
}

void ks_op_deployments(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = ks_srv_of(c);
	dep_row_t *rows = NULL;
	const dep_row_t *d;
	char msg[128];
	int rc;

	rc = ks_store_deployments(srv->store, req->name[0] ? req->name : NULL,
	    collect, &rows);
	if (rc) {
		ks_srv_reject(c, req->has_id, req->id, rc, "cannot read the "
		    "deployments");
	} else if (req->name[0] && !rows) {
		snprintf(msg, sizeof msg, "no deployment named '%s'",
		    req->name);
		ks_srv_reject(c, req->has_id, req->id, KS_E_NOT_FOUND, msg);
	} else {
		ks_reply_begin(c, req->has_id, req->id);
		ks_buf_puts(&c->out, ",\"deployments\":[");
		for (d = rows; d; d = d->next)
			list_one(srv, &c->out, d, d == rows);
		ks_buf_puts(&c->out, "]");
		ks_reply_finish(c);
	}
	rows_free(rows);
}

/* At start, once the compilers are known: each deployment's keys under
 * them, pinned anew (a compiler upgrade changes every key). */
typedef struct {
	ks_srv_t *srv;
} repin_t;

static void repinned(void *ctx, int rc)
{
	(void)ctx;
	if (rc)
		ks_log(KS_LOG_WARN, "deployments: could not pin the keys of "
		    "one: %s", ks_strerror(rc));
}

static int repin_one(void *ctx, const char *name, const char *specs,
    int64_t created, uint64_t pins)
{
	repin_t *r = ctx;
	ks_request_t req;
	ks_hash_t *keys = NULL;
	char err[512] = "";
	int rc;

	(void)created;
	(void)pins;
	int i, n = 0, lost = 0;

	rc = ks_deploy_specs_parse(specs, &req, err, sizeof err);
	if (rc == KS_OK && !(keys = calloc(req.nitems ? (size_t)req.nitems :
	    1, sizeof *keys)))
		rc = KS_E_NOMEM;
	/* The specs this daemon can key now; one it cannot (a kernel gone,
	 * a backend not here) pins nothing, rather than an old key. */
	for (i = 0; rc == KS_OK && i < req.nitems; i++) {
		ks_get_t g;

		if (ks_keys_normalize(&r->srv->keys, &req.items[i], &g, err,
		    sizeof err) == KS_OK)
			keys[n++] = g.key;
		else
			lost++;
	}
	if (lost)
		ks_log(KS_LOG_WARN, "deployment %s: %d of its %d specs cannot "
		    "be keyed by this daemon (%s); they pin nothing", name,
		    lost, req.nitems, err);
	err[0] = '\0';
	if (rc == KS_OK)
		rc = ks_writer_deploy(r->srv->writer, name, specs, keys,
		    (size_t)n, repinned, NULL);
	if (rc)
		ks_log(KS_LOG_WARN, "deployment %s: its keys are not pinned "
		    "now: %s", name, err[0] ? err : ks_strerror(rc));
	free(keys);
	ks_request_close(&req);
	return 0;
}

void ks_deploy_repin(ks_srv_t *srv)
{
	repin_t r = { srv };

	ks_store_deployments(srv->store, NULL, repin_one, &r);
}
