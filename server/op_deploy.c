/*
 * deploy, undeploy, deployments: named lists of get-specs registered with
 * the daemon (a deployment's manifest), kept in the store with the keys
 * they pin against budget eviction.  A deployment's specs are stored in
 * canonical form (target as requested), so that its keys can be computed
 * again when the compilers change: ks_deploy_repin does so at start, and
 * queues the compiles of the specs whose keys changed (an upgrade).
 * `ready` of a deployment reads its specs from here (op_ready.c), and a
 * ready answer marks it ready; a get that declared a ready deployment
 * and missed is a late compile (ks_deploy_late).  Pins are bounded by the
 * store's budget at deploy.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lookup.h"
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
    const char **kernels, const char **backends, ks_buf_t *specs,
    char *err, size_t errlen)
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
		if (kernels)
			kernels[i] = g.spec.def->name;
		if (backends)
			backends[i] = g.backend->name;
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
	ks_deploy_state_t *st;

	/* New specs are not ready until a check says so; a removed
	 * deployment is forgotten. */
	if (d->rc == KS_OK && d->op == KS_OP_DEPLOY &&
	    (st = ks_deploy_state(srv, d->name, 1)))
		st->ready = 0;
	else if (d->rc == KS_OK)
		ks_deploy_forget(srv, d->name);
	if (ks_conn_live(c)) {
		if (d->rc == KS_E_NOT_FOUND) {
			char msg[128];

			snprintf(msg, sizeof msg, "no deployment named '%s'",
			    d->name);
			ks_later_error(&d->l, d->rc, msg);
		} else if (d->rc) {
			ks_later_error(&d->l, d->rc, "cannot write the "
			    "deployment to the store");
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
		ks_srv_reject(c, req, KS_E_NOMEM,
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
		ks_srv_reject(c, req, KS_E_NOMEM,
		    "out of memory");
		return;
	}
	ks_conn_wait(c);
}

/* KS_OK when the pins of deployment NAME, with KEYS (N), and every other
 * deployment's stay inside the store's budget; else KS_E_TOO_LARGE with
 * what they would take in ERR. */
static int pins_fit(ks_srv_t *srv, const char *name, const ks_hash_t *keys,
    const char **kernels, const char **backends, int n, char *err,
    size_t errlen)
{
	uint64_t budget = srv->cfg.max_bytes, bytes;
	size_t estimated;
	int rc;

	if (!budget)
		return KS_OK;
	rc = ks_store_pin_bytes(srv->store, name, keys, kernels, backends,
	    (size_t)n, &bytes, &estimated);
	if (rc) {
		snprintf(err, errlen, "cannot read the pinned entries' sizes");
		return rc;
	}
	if (bytes <= budget)
		return KS_OK;
	snprintf(err, errlen, "the deployments' pins would hold %" PRIu64
	    " bytes (%zu of this one's %d specs not compiled yet, each "
	    "counted as the mean stored entry of its kernel and backend), "
	    "more than the store's budget of %" PRIu64 " bytes (--max-bytes)",
	    bytes, estimated, n, budget);
	return KS_E_TOO_LARGE;
}

void ks_op_deploy(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = ks_srv_of(c);
	size_t n = req->nitems ? (size_t)req->nitems : 1;
	const char **kernels, **backends;
	ks_hash_t *keys;
	ks_buf_t specs;
	char err[512];
	int rc = KS_E_NOMEM;

	if (!ks_srv_admin_only(c, req, "deploy"))
		return;
	keys = calloc(n, sizeof *keys);
	kernels = calloc(n, sizeof *kernels);
	backends = calloc(n, sizeof *backends);
	ks_buf_init(&specs);
	snprintf(err, sizeof err, "out of memory");
	if (keys && kernels && backends)
		rc = ks_deploy_keys(srv, req, keys, kernels, backends, &specs,
		    err, sizeof err);
	/* Its specs are read back as one request's items (ready, the
	 * repin at start): they must fit one. */
	if (rc == KS_OK && specs.len + 64 > KS_MAX_HEADER) {
		rc = KS_E_TOO_LARGE;
		snprintf(err, sizeof err, "the deployment's specs take %zu "
		    "bytes in canonical form, more than a request may have "
		    "(%u); split it in two", specs.len, KS_MAX_HEADER - 64);
	}
	if (rc == KS_OK)
		rc = pins_fit(srv, req->name, keys, kernels, backends,
		    req->nitems, err, sizeof err);
	if (rc)
		ks_srv_reject(c, req, rc, err);
	else
		deploy_post(c, req, specs.data, keys, req->nitems);
	free(keys);
	free(kernels);
	free(backends);
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

/* Adds a late compile's count to the uint64_t at CTX (ks_store_misses). */
static int add_count(void *ctx, const char *spec, int64_t first,
    int64_t last, uint64_t count)
{
	*(uint64_t *)ctx += count;
	return 0;
}

/* One deployment's row: its specs, pins, how many are cached now, whether
 * it has been ready, and its late compiles. */
static void list_one(ks_srv_t *srv, ks_buf_t *out, const dep_row_t *d,
    int first)
{
	const ks_deploy_state_t *st = ks_deploy_state(srv, d->name, 0);
	ks_request_t req;
	uint64_t late = 0;
	char err[256];
	int i, cached = 0;

	if (ks_deploy_specs_parse(d->specs, &req, err, sizeof err) == KS_OK) {
		for (i = 0; i < req.nitems; i++) {
			ks_get_t g;

			if (ks_keys_normalize(&srv->keys, &req.items[i], &g,
			    err, sizeof err) == KS_OK)
				cached += ks_lookup_has(srv, &g.key);
		}
	}
	ks_store_misses(srv->store, d->name, add_count, &late);
	ks_buf_printf(out, "%s{\"name\":", first ? "" : ",");
	ks_buf_json_str(out, d->name);
	ks_buf_printf(out, ",\"specs\":%d,\"cached\":%d,\"pinned\":%" PRIu64
	    ",\"ready\":%s,\"late_compiles\":%" PRIu64 ",\"created_ms\":%"
	    PRId64 ",\"items\":%s}", req.nitems, cached, d->pins,
	    st && st->ready ? "true" : "false", late, d->created, d->specs);
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
		ks_srv_reject(c, req, rc, "cannot read the "
		    "deployments");
	} else if (req->name[0] && !rows) {
		snprintf(msg, sizeof msg, "no deployment named '%s'",
		    req->name);
		ks_srv_reject(c, req, KS_E_NOT_FOUND, msg);
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

/* ---- what the daemon knows of each deployment ---- */

ks_deploy_state_t *ks_deploy_state(ks_srv_t *srv, const char *name,
    int create)
{
	ks_deploy_state_t *st = NULL;

	HASH_FIND_STR(srv->deploys, name, st);
	if (st || !create)
		return st;
	st = calloc(1, sizeof *st);
	if (!st)
		return NULL;
	snprintf(st->name, sizeof st->name, "%s", name);
	HASH_ADD_STR(srv->deploys, name, st);
	return st;
}

void ks_deploy_forget(ks_srv_t *srv, const char *name)
{
	ks_deploy_state_t *st = ks_deploy_state(srv, name, 0);

	if (st) {
		HASH_DEL(srv->deploys, st);
		free(st);
	}
}

void ks_deploy_states_free(ks_srv_t *srv)
{
	ks_deploy_state_t *st, *tmp;

	HASH_ITER(hh, srv->deploys, st, tmp) {
		HASH_DEL(srv->deploys, st);
		free(st);
	}
}

void ks_deploy_late(ks_srv_t *srv, const ks_get_t *g)
{
	ks_deploy_state_t *st = ks_deploy_state(srv, g->deployment, 0);
	ks_buf_t spec;

	if (!st || !st->ready)
		return;
	st->late++;
	srv->n.late_compiles++;
	ks_buf_init(&spec);
	if (ks_get_spec_json(g, &spec) == KS_OK) {
		ks_log(KS_LOG_WARN, "late compile for deployment %s, which was "
		    "ready: %s", st->name, spec.data);
		if (ks_writer_record_miss(srv->writer, st->name, spec.data,
		    1) != KS_OK)
			ks_log(KS_LOG_WARN, "store: could not record a late "
			    "compile (out of memory)");
	}
	ks_buf_close(&spec);
}

/* ---- at start ---- */

/* A spec of a deployment whose key changed, compiled at warm priority at
 * start: nobody waits for its answer. */
typedef struct {
	ks_waiter_t w;           /* first */
	ks_srv_t *srv;
} upgrade_wait_t;

static int upgrade_wanted(const ks_waiter_t *w)
{
	return !((const upgrade_wait_t *)w)->srv->stopping;
}

static void upgrade_done(ks_waiter_t *w, ks_flight_t *f)
{
	ks_srv_t *srv = ((upgrade_wait_t *)w)->srv;

	if (f->err == KS_OK)
		srv->n.upgrade_compiled++;
	else if (f->err != KS_E_SHUTTING_DOWN)
		srv->n.upgrade_failed++;
	free(w);
}

/* Queues G's compile for the upgrade; 1 when it was queued. */
static int upgrade_compile(ks_srv_t *srv, const ks_get_t *g)
{
	upgrade_wait_t *uw = calloc(1, sizeof *uw);
	char err[512];
	int rc;

	if (!uw)
		return 0;
	uw->w.done = upgrade_done;
	uw->w.wanted = upgrade_wanted;
	uw->w.uid = srv->conns.lim.self_uid;
	uw->srv = srv;
	rc = ks_lookup_join(srv, g, KS_PRIO_WARM, &uw->w, err, sizeof err);
	if (rc) {
		ks_log(KS_LOG_WARN, "could not queue the recompile of a %s "
		    "spec: %s", g->spec.def->name, err);
		free(uw);
		return 0;
	}
	srv->n.upgrade_queued++;
	return 1;
}

static void repinned(void *ctx, int rc)
{
	(void)ctx;
	if (rc)
		ks_log(KS_LOG_WARN, "deployments: could not pin the keys of "
		    "one: %s", ks_strerror(rc));
}

/* Deployment D under today's compilers: its keys pinned anew, the specs
 * whose keys are not among its old pins (a compiler or kernel changed
 * them) and are not cached queued for their compile, and whether it is
 * ready now. */
static void repin_one(ks_srv_t *srv, const dep_row_t *d)
{
	ks_deploy_state_t *st = ks_deploy_state(srv, d->name, 1);
	ks_request_t req;
	ks_hash_t *keys = NULL;
	char err[512] = "";
	int i, n = 0, lost = 0, changed = 0, queued = 0, cached = 0, rc;

	rc = ks_deploy_specs_parse(d->specs, &req, err, sizeof err);
	if (rc == KS_OK && !(keys = calloc(req.nitems ? (size_t)req.nitems :
	    1, sizeof *keys)))
		rc = KS_E_NOMEM;
	/* The specs this daemon can key now; one it cannot (a kernel gone,
	 * a backend not here) pins nothing, rather than an old key. */
	for (i = 0; rc == KS_OK && i < req.nitems; i++) {
		ks_get_t g;

		if (ks_keys_normalize(&srv->keys, &req.items[i], &g, err,
		    sizeof err) != KS_OK) {
			lost++;
			continue;
		}
		keys[n++] = g.key;
		if (ks_lookup_has(srv, &g.key)) {
			cached++;
		} else if (d->pins && ks_store_pinned(srv->store, d->name,
		    &g.key) == 0) {
			changed++;
			queued += upgrade_compile(srv, &g);
		}
	}
	if (lost)
		ks_log(KS_LOG_WARN, "deployment %s: %d of its %d specs cannot "
		    "be keyed by this daemon (%s); they pin nothing", d->name,
		    lost, req.nitems, err);
	if (changed)
		ks_log(KS_LOG_INFO, "deployment %s: %d of its %d specs have "
		    "new keys (a compiler or kernel changed); %d queued for "
		    "their compile at warm priority", d->name, changed,
		    req.nitems, queued);
	if (st)
		st->ready = rc == KS_OK && cached == req.nitems;
	err[0] = '\0';
	if (rc == KS_OK)
		rc = ks_writer_deploy(srv->writer, d->name, d->specs, keys,
		    (size_t)n, repinned, NULL);
	if (rc)
		ks_log(KS_LOG_WARN, "deployment %s: its keys are not pinned "
		    "now: %s", d->name, err[0] ? err : ks_strerror(rc));
	free(keys);
	ks_request_close(&req);
}

void ks_deploy_repin(ks_srv_t *srv)
{
	dep_row_t *rows = NULL;
	const dep_row_t *d;

	if (ks_store_deployments(srv->store, NULL, collect, &rows) != KS_OK)
		ks_log(KS_LOG_WARN, "deployments: cannot read them; their "
		    "keys are not pinned anew");
	for (d = rows; d; d = d->next)
		repin_one(srv, d);
	rows_free(rows);
	ks_flights_dispatch(&srv->flights);
}
