/*
 * The key audit (audit.h): the sampler, the audit compile and the audit
 * op.
 *
 * An audit op's states:
 *   WAITING    its writer barrier is posted: the store is to hold every
 *              put posted before it;
 *   COLLECTED  its entries are read from the store (least recently
 *              audited first) and turned into the requests whose keys
 *              they are; it is queued behind earlier audit ops;
 *   AUDITING   its entries are recompiled one at a time (ks_audit_
 *              dispatch decides when), each outcome counted;
 *   ANSWERED   the last compile ended (or it had none): the counts and
 *              the mismatches are sent, and it is freed.
 * A report is answered as soon as it is COLLECTED.  At shutdown every op
 * not ANSWERED is answered E_SHUTTING_DOWN.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "audit.h"
#include "lookup.h"
#include "ops.h"
#include "srv.h"

const char *const ks_audit_result_names[KS_AUDIT_COUNT] = {
	[KS_AUDIT_MATCH] = "match",
	[KS_AUDIT_MISMATCH] = "mismatch",
	[KS_AUDIT_FAILED] = "failed",
};

#define HOUR_NS (3600ull * 1000000000ull)
/* Mismatches an audit op's reply lists (the report has them all). */
#define RUN_LISTED 100

typedef struct ks_audit_run {
	ks_later_t later;        /* first: the barrier's mail */
	struct ks_audit_run *next;
	ks_filter_req_t filter;
	ks_get_t *gets;          /* the entries to recompile, in order */
	size_t n, cap, started;
	uint64_t results[KS_AUDIT_COUNT];
	uint64_t stale, unchecked, quiet, gone;
	int nlisted;
	ks_buf_t listed;         /* the mismatches, JSON objects */
} ks_audit_run_t;

/* ---- the comparison ---- */

int ks_audit_compare(const ks_artifact_t *stored, const ks_hash_t *sum,
    const char *meta, size_t meta_len, int same_bytes, char *differs,
    size_t len)
{
	/* "bytes" (the length) last, so that it can be left out; "codegen"
	 * (the hash of the source, where the bytes are not deterministic)
	 * only when the stored entry has one (older ones do not). */
	static const char *const fields[] = { "codegen", "variant", "format",
	    "entry", "guard", "dynamic", "params", "launch", "bytes" };
	size_t nfields = sizeof fields / sizeof *fields - !same_bytes;
	cJSON *a = ks_meta_parse(stored->meta, stored->meta_len);
	cJSON *b = ks_meta_parse(meta, meta_len);
	size_t used = 0, i;

	differs[0] = '\0';
	/* The checksum first: it is what the audit is for. */
	if (same_bytes && !ks_hash_eq(&stored->sum, sum))
		used += snprintf(differs, len, "artifact");
	for (i = 0; i < nfields && used < len; i++) {
		const cJSON *x = a ? cJSON_GetObjectItemCaseSensitive(a,
		    fields[i]) : NULL;
		const cJSON *y = b ? cJSON_GetObjectItemCaseSensitive(b,
		    fields[i]) : NULL;

		if (i == 0 && !x)
			continue;

		if ((x || y) && !(x && y && cJSON_Compare(x, y, 1)))
			used += snprintf(differs + used, len - used, "%s%s",
			    used ? "," : "", fields[i]);
	}
	if ((!a || !b) && used < len)
		used += snprintf(differs + used, len - used, "%smeta",
		    used ? "," : "");
	cJSON_Delete(a);
	cJSON_Delete(b);
	return differs[0] != '\0';
}

/* ---- recording an outcome ---- */

static void entry_fields(ks_buf_t *o, const ks_get_t *g)
{
	char hex[KS_HASH_HEX];

	ks_hash_hex(&g->key, hex);
	ks_buf_printf(o, "\"key\":\"%s\",\"kernel\":\"%s\",\"backend\":\"%s\","
	    "\"target\":", hex, g->spec.def->name, g->backend->name);
	ks_buf_json_str(o, g->target);
	ks_buf_printf(o, ",\"dtype\":\"%s\",\"mode\":\"%s\",\"format\":",
	    ks_dtype_name(g->spec.dtype), g->spec.mode == KS_MODE_FAST ?
	    "fast" : "exact");
	ks_buf_json_str(o, g->format);
	ks_get_guard_json(g, o);
}

/* A mismatch: logged with both identities, the entry quarantined (the
 * memory tier now, the row through the writer, into audit_events). */
static void raise_alarm(ks_srv_t *srv, const ks_artifact_t *stored,
    const ks_hash_t *sum, const char *differs, const char *auditor,
    ks_store_audit_event_t *ev)
{
	ks_audit_t *a = &srv->audit;
	char key[KS_HASH_HEX], s1[KS_HASH_HEX], s2[KS_HASH_HEX];

	ks_hash_hex(&a->get.key, key);
	ks_hash_hex(&stored->sum, s1);
	ks_hash_hex(sum, s2);
	ks_log(KS_LOG_WARN, "audit: key %s (%s %s %s) compiled again differs "
	    "in %s: stored artifact %s built by '%s', recompiled %s by %s; "
	    "the entry is quarantined (kspec audit --report)", key,
	    a->get.spec.def->name, a->get.backend->name, a->get.target,
	    differs, s1, a->get.identity, s2, auditor);
	ks_hot_remove(srv->hot, &a->get.key);
	ev->differs = differs;
	a->quarantined++;
	if (!a->run)
		a->hour_alarms++;
}

static void run_count(ks_audit_run_t *r, int result, const ks_get_t *g,
    const char *differs, const ks_hash_t *stored, const ks_hash_t *sum)
{
	char s1[KS_HASH_HEX], s2[KS_HASH_HEX];

	r->results[result]++;
	if (result != KS_AUDIT_MISMATCH || r->nlisted >= RUN_LISTED)
		return;
	ks_hash_hex(stored, s1);
	ks_hash_hex(sum, s2);
	ks_buf_puts(&r->listed, r->nlisted++ ? ",{" : "{");
	entry_fields(&r->listed, g);
	ks_buf_printf(&r->listed, ",\"stored\":\"%s\",\"recompiled\":\"%s\","
	    "\"differs\":\"%s\"}", s1, s2, differs);
}

static void run_free(ks_audit_run_t *r)
{
	free(r->gets);
	ks_buf_close(&r->listed);
	free(r);
}

static void run_reply(ks_audit_run_t *r, int code, const char *msg)
{
	ks_conn_t *c = r->later.conn;

	if (ks_conn_live(c) && code) {
		ks_later_error(&r->later, code, msg);
	} else if (ks_conn_live(c)) {
		ks_reply_begin(c, r->later.has_id, r->later.id);
		ks_buf_printf(&c->out, ",\"audited\":%" PRIu64 ",\"matched\":%"
		    PRIu64 ",\"mismatched\":%" PRIu64 ",\"failed\":%" PRIu64
		    ",\"skipped\":{\"stale\":%" PRIu64 ",\"unchecked\":%"
		    PRIu64 ",\"quiet\":%" PRIu64 ",\"gone\":%" PRIu64 "},"
		    "\"mismatches\":[%s]",
		    r->results[0] + r->results[1] + r->results[2],
		    r->results[KS_AUDIT_MATCH], r->results[KS_AUDIT_MISMATCH],
		    r->results[KS_AUDIT_FAILED], r->stale, r->unchecked,
		    r->quiet, r->gone, r->listed.data ? r->listed.data : "");
		ks_reply_finish(c);
	}
	ks_conn_done(c);
	run_free(r);
}

/* Answers the audit ops at the head of the queue that have nothing left
 * to compile. */
static void runs_reap(ks_srv_t *srv)
{
	ks_audit_t *a = &srv->audit;
	ks_audit_run_t *r;

	while ((r = a->runs) && r->started == r->n && a->run != r) {
		a->runs = r->next;
		if (!a->runs)
			a->runs_tail = NULL;
		run_reply(r, KS_OK, NULL);
	}
}

/* The audit compile ended (loop thread). */
static void audit_done(ks_pool_job_t *pj)
{
	ks_audit_t *a = (ks_audit_t *)((char *)pj - offsetof(ks_audit_t, pj));
	ks_srv_t *srv = (ks_srv_t *)((char *)a - offsetof(ks_srv_t, audit));
	ks_artifact_t *stored = a->stored;
	ks_store_audit_event_t ev;
	char differs[128], auditor[KS_MAX_IDENTITY + 64];
	int result = KS_AUDIT_MATCH;
	ks_hash_t sum;
	ks_buf_t meta;

	a->running = 0;
	a->stored = NULL;
	a->compile_ms += pj->compile_ms;
	if (!a->run)
		a->hour_ms += pj->compile_ms;
	memset(&sum, 0, sizeof sum);
	memset(&ev, 0, sizeof ev);
	differs[0] = '\0';
	snprintf(auditor, sizeof auditor, "kspecd %s worker pid %ld: %s",
	    KS_SERVER_VERSION, (long)pj->pid, a->get.identity);
	if (srv->stopping) {
		ks_job_out_close(&pj->out);
		ks_artifact_unref(stored);
		return;
	}
	ev.key = a->get.key;
	ev.stored_sum = stored->sum;
	ev.auditor = auditor;
	ev.at = ks_wall_ms();
	if (pj->err) {
		result = KS_AUDIT_FAILED;
		ev.failed = 1;
		ks_log(KS_LOG_WARN, "audit: the recompile of a stored %s "
		    "entry failed: %s: %s", a->get.spec.def->name,
		    ks_err_name(pj->err), pj->errmsg);
	} else {
		ks_hash(pj->out.bytes, pj->out.len, &sum);
		ev.audit_sum = sum;
		ks_buf_init(&meta);
		if (ks_lookup_meta(&meta, &a->get, &pj->out, &sum) != KS_OK) {
			result = KS_AUDIT_FAILED;
			ev.failed = 1;
		} else if (ks_audit_compare(stored, &sum, meta.data, meta.len,
		    a->get.backend->same_bytes, differs, sizeof differs)) {
			result = KS_AUDIT_MISMATCH;
			raise_alarm(srv, stored, &sum, differs, auditor, &ev);
		}
		ks_buf_close(&meta);
	}
	a->results[result]++;
	if (ks_writer_audit(srv->writer, &ev, NULL, NULL) != KS_OK)
		ks_log(KS_LOG_WARN, "audit: could not record an audit (out "
		    "of memory)");
	if (a->run)
		run_count(a->run, result, &a->get, differs, &stored->sum,
		    &sum);
	a->run = NULL;
	ks_job_out_close(&pj->out);
	ks_artifact_unref(stored);
	runs_reap(srv);
	ks_audit_dispatch(srv);
}

/* Starts the recompile of G for R (NULL: the sampler).  KS_E_NOT_FOUND
 * when its row is gone (evicted, quarantined) since it was read. */
static int audit_start(ks_srv_t *srv, ks_audit_run_t *r, const ks_get_t *g)
{
	ks_audit_t *a = &srv->audit;
	ks_artifact_t *stored = NULL;
	int rc;

	rc = ks_store_lookup(srv->store, &g->key, &stored);
	if (rc == KS_E_CORRUPT)
		ks_writer_quarantine(srv->writer, &g->key);
	if (rc != KS_OK)
		return rc;
	a->get = *g;
	memset(&a->pj, 0, sizeof a->pj);
	rc = ks_flight_job_fill(&srv->keys, &a->get, &a->pj);
	a->pj.done = audit_done;
	if (rc == KS_OK)
		rc = ks_pool_submit(&srv->pool, &a->pj);
	if (rc != KS_OK) {
		ks_artifact_unref(stored);
		return rc;
	}
	a->stored = stored;
	a->running = 1;
	a->run = r;
	return KS_OK;
}

/* The sampler's hour: compile time and alarms start again after it. */
static int sampler_allowed(ks_srv_t *srv)
{
	ks_audit_t *a = &srv->audit;
	uint64_t now = ks_now_ns();

	if (now - a->hour_ns >= HOUR_NS) {
		a->hour_ns = now;
		a->hour_ms = 0;
		a->hour_alarms = 0;
	}
	if (srv->cfg.audit_budget_s &&
	    a->hour_ms >= (double)srv->cfg.audit_budget_s * 1000)
		return 0;
	return a->hour_alarms < KS_AUDIT_MAX_ALARMS;
}

typedef struct {
	ks_srv_t *srv;
	ks_audit_run_t *run;     /* NULL: the sampler's pick */
	ks_get_t pick;
	int picked;
} collect_t;

/* A candidate row: the request whose key it is, when it is current. */
static int collect_one(void *ctx, const ks_store_audit_row_t *row)
{
	collect_t *c = ctx;
	ks_audit_t *a = &c->srv->audit;
	ks_audit_run_t *r = c->run;
	const char *why = "";
	ks_get_t g;
	int state;

	state = ks_keys_entry_get(&c->srv->keys, &row->e, &g, &why);
	if (state == KS_KEYS_STALE || state == KS_KEYS_UNCHECKED ||
	    row->alarmed) {
		uint64_t *n = row->alarmed ? (r ? &r->quiet :
		    &a->skipped_quiet) : state == KS_KEYS_STALE ? (r ?
		    &r->stale : &a->skipped_stale) : (r ? &r->unchecked :
		    &a->skipped_unchecked);

		(*n)++;
		return 0;
	}
	if (!r) {
		c->pick = g;
		c->picked = 1;
		return 1;
	}
	if (r->n == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 64;
		ks_get_t *gets = realloc(r->gets, cap * sizeof *gets);

		if (!gets)
			return KS_E_NOMEM;
		r->gets = gets;
		r->cap = cap;
	}
	r->gets[r->n++] = g;
	return 0;
}

/* The sampler's next entry: the least recently audited current one that
 * has had no event lately.  It reads at most a few rows past those it
 * cannot audit. */
static int sampler_pick(ks_srv_t *srv, ks_get_t *out)
{
	collect_t c = { .srv = srv };

	ks_store_audit_candidates(srv->store, NULL, ks_wall_ms() -
	    (int64_t)KS_AUDIT_QUIET_MS, 64, collect_one, &c);
	if (c.picked)
		*out = c.pick;
	return c.picked;
}

void ks_audit_dispatch(ks_srv_t *srv)
{
	ks_audit_t *a = &srv->audit;
	int need = srv->pool.opts.workers > 1 ? 2 : 1;
	ks_audit_run_t *r;
	ks_get_t g;

	if (a->running || srv->stopping || !srv->listening)
		return;
	if (ks_flights_queued(&srv->flights) ||
	    ks_pool_idle(&srv->pool) < need)
		return;
	while ((r = a->runs)) {
		if (r->started < r->n) {
			int rc = audit_start(srv, r, &r->gets[r->started++]);

			if (rc == KS_OK)
				return;
			if (rc == KS_E_NOT_FOUND)
				r->gone++;
			else
				r->results[KS_AUDIT_FAILED]++;
			continue;
		}
		runs_reap(srv);
	}
	if (a->due && sampler_allowed(srv)) {
		a->due = 0;
		if (sampler_pick(srv, &g))
			audit_start(srv, NULL, &g);
	}
}

static void on_timer(uv_timer_t *t)
{
	ks_srv_t *srv = t->data;

	srv->audit.due = 1;
	ks_audit_dispatch(srv);
}

void ks_audit_start(ks_srv_t *srv)
{
	ks_audit_t *a = &srv->audit;
	uint64_t ms = srv->cfg.audit_interval_s * 1000;

	a->hour_ns = ks_now_ns();
	if (!ms)
		return;
	uv_timer_init(srv->loop, &a->timer);
	a->timer.data = srv;
	uv_timer_start(&a->timer, on_timer, ms, ms);
	uv_unref((uv_handle_t *)&a->timer);
	a->timer_open = 1;
}

void ks_audit_stop(ks_srv_t *srv)
{
	ks_audit_t *a = &srv->audit;
	ks_audit_run_t *r;

	if (a->timer_open && !uv_is_closing((uv_handle_t *)&a->timer))
		uv_close((uv_handle_t *)&a->timer, NULL);
	while ((r = a->runs)) {
		a->runs = r->next;
		if (a->run == r)
			a->run = NULL;
		run_reply(r, KS_E_SHUTTING_DOWN, "daemon stopped before the "
		    "audit ended");
	}
	a->runs_tail = NULL;
}

void ks_audit_stats(ks_srv_t *srv, ks_buf_t *out)
{
	const ks_audit_t *a = &srv->audit;

	ks_buf_printf(out, ",\"audit\":{\"interval_s\":%" PRIu64 ",\"budget_s\":%"
	    PRIu64 ",\"audited\":%" PRIu64 ",\"matched\":%" PRIu64
	    ",\"mismatched\":%" PRIu64 ",\"failed\":%" PRIu64
	    ",\"quarantined\":%" PRIu64 ",\"skipped_stale\":%" PRIu64
	    ",\"skipped_unchecked\":%" PRIu64 ",\"skipped_quiet\":%" PRIu64
	    ",\"compile_ms_total\":%.3f,\"running\":%s}",
	    srv->cfg.audit_interval_s, srv->cfg.audit_budget_s,
	    a->results[0] + a->results[1] + a->results[2],
	    a->results[KS_AUDIT_MATCH], a->results[KS_AUDIT_MISMATCH],
	    a->results[KS_AUDIT_FAILED], a->quarantined, a->skipped_stale,
	    a->skipped_unchecked, a->skipped_quiet, a->compile_ms,
	    a->running ? "true" : "false");
}

/* ---- the audit op ---- */

static int event_json(void *ctx, const ks_store_audit_event_t *ev)
{
	ks_buf_t *o = ctx;
	char key[KS_HASH_HEX], s1[KS_HASH_HEX], s2[KS_HASH_HEX];

	ks_hash_hex(&ev->key, key);
	ks_hash_hex(&ev->stored_sum, s1);
	ks_hash_hex(&ev->audit_sum, s2);
	ks_buf_printf(o, "%s{\"at\":%" PRId64 ",\"key\":\"%s\",\"kernel\":",
	    o->len ? "," : "", ev->at, key);
	const char *const names[] = { "variant", "backend", "target",
	    "dtype", "mode", "format", "shape", "compiler", "auditor" };
	const char *const vals[] = { ev->e.variant, ev->e.backend,
	    ev->e.target, ev->e.dtype, ev->e.mode, ev->e.format, ev->e.shape,
	    ev->e.compiler, ev->auditor };
	size_t i;

	ks_buf_json_str(o, ev->e.kernel);
	for (i = 0; i < sizeof names / sizeof *names; i++) {
		ks_buf_printf(o, ",\"%s\":", names[i]);
		ks_buf_json_str(o, vals[i]);
	}
	ks_buf_printf(o, ",\"stored\":\"%s\",\"recompiled\":\"%s\","
	    "\"differs\":", s1, s2);
	ks_buf_json_str(o, ev->differs);
	return ks_buf_printf(o, ",\"bytes\":%" PRIu64 "}", ev->e.size) ==
	    KS_OK ? 0 : KS_E_NOMEM;
}

static void report(ks_audit_run_t *r)
{
	ks_srv_t *srv = r->later.srv;
	ks_conn_t *c = r->later.conn;
	ks_buf_t events;
	int rc;

	ks_buf_init(&events);
	rc = ks_store_audit_events(srv->store, KS_AUDIT_REPORT_MAX,
	    event_json, &events);
	if (ks_conn_live(c) && rc) {
		ks_later_error(&r->later, rc, "cannot read the audit "
		    "events");
	} else if (ks_conn_live(c)) {
		ks_reply_begin(c, r->later.has_id, r->later.id);
		ks_buf_printf(&c->out, ",\"events\":[%s]", events.data ?
		    events.data : "");
		ks_reply_finish(c);
	}
	ks_buf_close(&events);
	ks_conn_done(c);
	run_free(r);
}

/* Loop thread: the writer has run everything posted before the op. */
static void collected(ks_mail_t *m)
{
	ks_audit_run_t *r = (ks_audit_run_t *)m;
	ks_srv_t *srv = r->later.srv;
	ks_audit_t *a = &srv->audit;
	collect_t c = { .srv = srv, .run = r };
	int rc;

	if (r->filter.report) {
		report(r);
		return;
	}
	if (srv->stopping) {
		run_reply(r, KS_E_SHUTTING_DOWN, "daemon stopping");
		return;
	}
	rc = ks_store_audit_candidates(srv->store, r->filter.kernel,
	    ks_wall_ms() - (int64_t)KS_AUDIT_QUIET_MS, 0, collect_one, &c);
	if (rc) {
		run_reply(r, rc, rc == KS_E_NOMEM ? "out of memory" :
		    "cannot read the store");
		return;
	}
	if (a->runs_tail)
		a->runs_tail->next = r;
	else
		a->runs = r;
	a->runs_tail = r;
	runs_reap(srv);
	ks_audit_dispatch(srv);
}

void ks_op_audit(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = ks_srv_of(c);
	ks_audit_run_t *r;

	if (!ks_srv_admin_only(c, req, "audit"))
		return;
	if (req->filter.kernel[0] && !ks_kernel_find(req->filter.kernel)) {
		ks_srv_reject(c, req, KS_E_UNKNOWN_KERNEL,
		    "no such kernel (kspec kernels lists them)");
		return;
	}
	r = calloc(1, sizeof *r);
	if (!r) {
		ks_srv_error_reply(c, (int)req->op, req->has_id, req->id,
		    KS_E_NOMEM,
		    "out of memory");
		return;
	}
	ks_later_init(&r->later, c, req, collected);
	r->filter = req->filter;
	ks_buf_init(&r->listed);
	if (ks_writer_barrier(srv->writer, ks_later_post, r) != KS_OK) {
		run_free(r);
		ks_srv_error_reply(c, (int)req->op, req->has_id, req->id,
		    KS_E_NOMEM,
		    "out of memory");
		return;
	}
	ks_conn_wait(c);
}
