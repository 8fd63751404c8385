/*
 * get, warm and cancel: the lookup (lookup.h) for one spec or many, the
 * replies when a compile they wait on ends, and taking a warm's queued
 * items back.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"
#include "lookup.h"
#include "ops.h"

/* ---- get ---- */

typedef struct {
	ks_waiter_t w;           /* first */
	ks_conn_t *conn;
	int has_id;
	uint64_t id;
	int meta_only;
	uint64_t log_t0;         /* its arrival, at debug; else 0 */
	ks_hash_t key;
} get_wait_t;

static int get_wanted(const ks_waiter_t *w)
{
	return ks_conn_live(((const get_wait_t *)w)->conn);
}

static void get_done(ks_waiter_t *w, ks_flight_t *f)
{
	get_wait_t *gw = (get_wait_t *)w;
	ks_conn_t *c = gw->conn;

	if (ks_conn_live(c)) {
		if (f->err)
			ks_srv_error_reply(c, KS_OP_GET, gw->has_id, gw->id,
			    f->err, f->errmsg);
		else
			ks_reply_artifact(c, gw->has_id, gw->id,
			    ks_lookup_source(w), f->artifact, gw->meta_only);
	}
	if (gw->log_t0)
		ks_req_log_line("get", &gw->key, ks_lookup_source(w), f->err,
		    gw->log_t0);
	ks_conn_done(c);
	free(gw);
}

void ks_op_get_normalized(ks_conn_t *c, int has_id, uint64_t id,
    int meta_only, const ks_get_t *g)
{
	ks_srv_t *srv = ks_srv_of(c);
	const char *source;
	ks_artifact_t *a;
	get_wait_t *gw;
	char err[512];
	int rc;

	if (srv->rlog.on) {
		srv->rlog.key = g->key;
		srv->rlog.has_key = 1;
	}
	/* A kernel disabled by its canary is served nothing (canary.h). */
	if (srv->canaries.ndisabled &&
	    (rc = ks_canary_check(srv, g, err, sizeof err)) != KS_OK) {
		ks_srv_reject_op(c, KS_OP_GET, has_id, id, rc, err);
		return;
	}
	srv->n.kernel_gets[g->kernel_index] += srv->replaying !=
	    KS_REPLAY_COUNTED;
	if (ks_lookup_cached(srv, g, 0, &a, &source) == KS_OK) {
		ks_reply_artifact(c, has_id, id, source, a, meta_only);
		ks_artifact_unref(a);
		srv->rlog.source = source;
		/* A get's hit ("memory" or "disk"; warm items are not gets),
		 * arrival to reply queued: also the count of hits. */
		ks_hist_observe(&srv->n.hit_hist[source[0] == 'd'],
		    &ks_hist_hit_bounds, ks_now_ns() - srv->req_ns);
		return;
	}
	/* A miss under the saved probe's keys waits for this start's probe
	 * (daemon.c, "Start"). */
	if (srv->probe_state != KS_PROBE_DONE) {
		ks_srv_park(c, KS_OP_GET, has_id, id, KS_REPLAY_COUNTED);
		return;
	}
	if (c->pending >= KS_MAX_INFLIGHT_PER_CONN) {
		snprintf(err, sizeof err, "more than %d requests waiting on "
		    "compiles on this connection", KS_MAX_INFLIGHT_PER_CONN);
		ks_srv_reject_op(c, KS_OP_GET, has_id, id, KS_E_BUSY, err);
		return;
	}
	if (ks_conn_user_waiting(c) >= KS_MAX_INFLIGHT_PER_USER) {
		snprintf(err, sizeof err, "more than %d requests of uid %u "
		    "waiting on compiles", KS_MAX_INFLIGHT_PER_USER, c->uid);
		ks_srv_reject_op(c, KS_OP_GET, has_id, id, KS_E_BUSY, err);
		return;
	}
	gw = calloc(1, sizeof *gw);
	if (!gw) {
		ks_srv_reject_op(c, KS_OP_GET, has_id, id, KS_E_NOMEM, "out of memory");
		return;
	}
	gw->w.done = get_done;
	gw->w.wanted = get_wanted;
	gw->w.client = c->id;
	gw->w.uid = c->uid;
	gw->w.is_get = 1;
	gw->conn = c;
	gw->has_id = has_id;
	gw->id = id;
	gw->meta_only = meta_only;
	if (srv->rlog.on) {
		gw->log_t0 = srv->rlog.t0;
		gw->key = g->key;
	}
	rc = ks_lookup_join(srv, g, KS_PRIO_GET, &gw->w, err, sizeof err);
	if (rc) {
		free(gw);
		ks_srv_reject_op(c, KS_OP_GET, has_id, id, rc, err);
		return;
	}
	if (g->deployment[0])
		ks_deploy_late(srv, g);
	srv->rlog.waiting = 1;  /* get_done writes its line */
	ks_conn_wait(c);
	ks_flights_dispatch(&srv->flights);
}

void ks_op_get(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = ks_srv_of(c);
	ks_get_t g;
	char err[512];
	int rc;

	err[0] = '\0';
	rc = ks_keys_normalize(&srv->keys, &req->get, &g, err, sizeof err);
	/* What the saved probe refused (a backend unavailable then, a
	 * target unknown), this start's probe may accept: it waits. */
	if (rc && srv->probe_state == KS_PROBE_SAVED) {
		ks_srv_park(c, (int)req->op, req->has_id, req->id,
		    KS_REPLAY_BEFORE_OP);
		return;
	}
	srv->n.gets += srv->replaying != KS_REPLAY_COUNTED;
	if (rc) {
		ks_srv_reject(c, req, rc, err);
		return;
	}
	if (srv->learn)
		ks_fast_learn(srv->fast, srv->learn, req->has_id, req->id,
		    req->get.meta_only, &g);
	ks_op_get_normalized(c, req->has_id, req->id, req->get.meta_only, &g);
}

/* ---- warm ---- */

/* One item's outcome in a warm reply. */
typedef struct {
	int err;                 /* KS_OK or the error */
	const char *source;      /* "memory" "disk" "compiled" "joined" */
	char key[KS_HASH_HEX];
	char variant[KS_MAX_NAME + 1];
	char *msg;               /* malloc'd error message, or NULL */
} warm_item_t;

typedef struct ks_warm warm_t;

typedef struct {
	ks_waiter_t w;           /* first */
	warm_t *warm;
	int index;
	int waiting;             /* on a flight: its done is still to come */
} warm_wait_t;

/* A warm request in progress: answered when its last item is done, and
 * with "progress" also as each item is.  Keeps its connection waiting
 * (ks_conn_wait) until then; listed in srv->warms for cancel. */
struct ks_warm {
	ks_conn_t *conn;
	int has_id;
	uint64_t id;
	int progress;
	int nitems;
	int pending;
	warm_item_t *items;
	warm_wait_t *waits;      /* one per item */
	warm_t *prev, *next;     /* srv->warms */
};

/* Appends item I's outcome: {"index":I,"ok":...}. */
static void warm_item_json(ks_buf_t *b, int i, const warm_item_t *it)
{
	ks_buf_printf(b, "{\"index\":%d", i);
	if (it->err) {
		ks_buf_printf(b, ",\"ok\":false,\"error\":{\"code\":\"%s\","
		    "\"message\":", ks_err_name(it->err));
		ks_buf_json_str(b, it->msg ? it->msg : "");
		ks_buf_puts(b, "}}");
		return;
	}
	ks_buf_printf(b, ",\"ok\":true,\"key\":\"%s\",\"variant\":\"%s\","
	    "\"source\":\"%s\"}", it->key, it->variant, it->source);
}

static void warm_reply(warm_t *w)
{
	ks_conn_t *c = w->conn;
	int i, cached = 0, compiled = 0, joined = 0, failed = 0;
	int cancelled = 0;

	ks_reply_begin(c, w->has_id, w->id);
	ks_buf_puts(&c->out, ",\"items\":[");
	for (i = 0; i < w->nitems; i++) {
		warm_item_t *it = &w->items[i];

		if (i)
			ks_buf_puts(&c->out, ",");
		warm_item_json(&c->out, i, it);
		if (it->err == KS_E_CANCELLED)
			cancelled++;
		else if (it->err)
			failed++;
		else if (strcmp(it->source, "compiled") == 0)
			compiled++;
		else if (strcmp(it->source, "joined") == 0)
			joined++;
		else
			cached++;
	}
	ks_buf_printf(&c->out, "],\"summary\":{\"total\":%d,\"cached\":"
	    "%d,\"compiled\":%d,\"joined\":%d,\"failed\":%d,\"cancelled\":%d}",
	    w->nitems, cached, compiled, joined, failed, cancelled);
	ks_reply_finish(c);
}

/* The progress frame of item I: {"id":..,"ok":true,"progress":{item}}. */
static void warm_progress(warm_t *w, int i)
{
	ks_conn_t *c = w->conn;

	ks_reply_begin(c, w->has_id, w->id);
	ks_buf_puts(&c->out, ",\"progress\":");
	warm_item_json(&c->out, i, &w->items[i]);
	ks_reply_finish(c);
}

/* Records item INDEX (-1: none, the request's own count) and answers
 * when it was the last. */
static void warm_item_done(warm_t *w, int index, int err, const char *msg,
    const char *source, const ks_artifact_t *a)
{
	ks_srv_t *srv = ks_srv_of(w->conn);
	int i;

	if (index >= 0) {
		warm_item_t *it = &w->items[index];

		it->err = err;
		it->source = source;
		if (err) {
			it->msg = strdup(msg && *msg ? msg : ks_strerror(err));
		} else if (a) {
			const char *v = strstr(a->meta, "\"variant\":\"");

			ks_hash_hex(&a->key, it->key);
			if (v) {
				v += 11;
				snprintf(it->variant, sizeof it->variant,
				    "%.*s", (int)strcspn(v, "\""), v);
			}
		}
		if (w->progress && ks_conn_live(w->conn))
			warm_progress(w, index);
	}
	if (--w->pending > 0)
		return;
	if (ks_conn_live(w->conn))
		warm_reply(w);
	if (w->prev)
		w->prev->next = w->next;
	else
		srv->warms = w->next;
	if (w->next)
		w->next->prev = w->prev;
	for (i = 0; i < w->nitems; i++)
		free(w->items[i].msg);
	ks_conn_done(w->conn);
	free(w->items);
	free(w->waits);
	free(w);
}

static int warm_wanted(const ks_waiter_t *w)
{
	return ks_conn_live(((const warm_wait_t *)w)->warm->conn);
}

static void warm_done(ks_waiter_t *w, ks_flight_t *f)
{
	warm_wait_t *ww = (warm_wait_t *)w;

	ww->waiting = 0;
	warm_item_done(ww->warm, ww->index, f->err, f->errmsg,
	    ks_lookup_source(w), f->artifact);
}

void ks_op_warm(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = ks_srv_of(c);
	size_t n = req->nitems ? (size_t)req->nitems : 1;
	warm_t *w;
	int i;

	w = calloc(1, sizeof *w);
	if (w) {
		w->items = calloc(n, sizeof *w->items);
		w->waits = calloc(n, sizeof *w->waits);
	}
	if (!w || !w->items || !w->waits) {
		if (w) {
			free(w->items);
			free(w->waits);
		}
		free(w);
		ks_srv_reject(c, req, KS_E_NOMEM,
		    "out of memory");
		return;
	}
	srv->n.warms++;
	srv->n.warm_items += (uint64_t)req->nitems;
	w->conn = c;
	w->has_id = req->has_id;
	w->id = req->id;
	w->progress = req->progress;
	w->nitems = req->nitems;
	/* One extra count keeps the request open until every item has been
	 * looked at, even if all of them finish at once. */
	w->pending = req->nitems + 1;
	w->next = srv->warms;
	if (w->next)
		w->next->prev = w;
	srv->warms = w;
	ks_conn_wait(c);

	for (i = 0; i < req->nitems; i++) {
		warm_wait_t *ww = &w->waits[i];
		const char *source;
		ks_artifact_t *a;
		char err[512];
		ks_get_t g;
		int rc;

		if (req->item_errs && req->item_errs[i].code) {
			warm_item_done(w, i, req->item_errs[i].code,
			    req->item_errs[i].msg, NULL, NULL);
			continue;
		}
		err[0] = '\0';
		rc = ks_keys_normalize(&srv->keys, &req->items[i], &g, err,
		    sizeof err);
		if (rc == KS_OK && srv->canaries.ndisabled)
			rc = ks_canary_check(srv, &g, err, sizeof err);
		if (rc) {
			warm_item_done(w, i, rc, err, NULL, NULL);
			continue;
		}
		if (ks_lookup_cached(srv, &g, 0, &a, &source) == KS_OK) {
			warm_item_done(w, i, KS_OK, NULL, source, a);
			ks_artifact_unref(a);
			continue;
		}
		ww->w.done = warm_done;
		ww->w.wanted = warm_wanted;
		ww->w.client = c->id;
		ww->w.uid = c->uid;
		ww->warm = w;
		ww->index = i;
		rc = ks_lookup_join(srv, &g, KS_PRIO_WARM, &ww->w, err,
		    sizeof err);
		if (rc)
			warm_item_done(w, i, rc, err, NULL, NULL);
		else
			ww->waiting = 1;
	}
	warm_item_done(w, -1, KS_OK, NULL, NULL, NULL);
	ks_flights_dispatch(&srv->flights);
}

/* ---- cancel ---- */

/* Ends the items of W still queued as E_CANCELLED; returns how many, and
 * adds those whose compile runs to *running. */
static int warm_cancel(ks_srv_t *srv, warm_t *w, int *running)
{
	int i, n = 0;

	w->pending++;            /* W outlives the loop */
	for (i = 0; i < w->nitems; i++) {
		warm_wait_t *ww = &w->waits[i];

		if (!ww->waiting)
			continue;
		if (ks_canary_leave(srv, &ww->w) != KS_OK &&
		    ks_flight_leave(&srv->flights, &ww->w) != KS_OK) {
			(*running)++;
			continue;
		}
		ww->waiting = 0;
		n++;
		warm_item_done(w, i, KS_E_CANCELLED, "cancelled before its "
		    "compile began", NULL, NULL);
	}
	warm_item_done(w, -1, KS_OK, NULL, NULL, NULL);
	return n;
}

void ks_op_cancel(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = ks_srv_of(c);
	int found = 0, cancelled = 0, running = 0;
	warm_t *w, *next;
	char msg[128];

	for (w = srv->warms; w; w = next) {
		next = w->next;  /* W may end here */
		if (w->conn != c || !w->has_id || w->id != req->request)
			continue;
		found++;
		cancelled += warm_cancel(srv, w, &running);
	}
	if (!found) {
		snprintf(msg, sizeof msg, "no warm request with id %" PRIu64
		    " is in progress on this connection", req->request);
		ks_srv_reject(c, req, KS_E_NOT_FOUND, msg);
		return;
	}
	ks_reply_begin(c, req->has_id, req->id);
	ks_buf_printf(&c->out, ",\"cancelled\":%d,\"running\":%d", cancelled,
	    running);
	ks_reply_finish(c);
}
