/*
 * What the metrics listener (--metrics-listen) serves: /metrics in the
 * Prometheus text format, /api/stats (the stats reply's fields as one
 * JSON object), /api/history (the dashboard's series of the last
 * minutes) and / (the dashboard page, server/dashboard.html, which reads
 * /api/history once and polls /api/stats).  docs/operations.md lists
 * every metric.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "http.h"
#include "observe.h"
#include "ops.h"

/* The page, embedded at build time (dashboard.c). */
extern const char ks_dashboard_html[];
extern const unsigned ks_dashboard_html_len;

typedef struct {
	unsigned queued, running, waiters;
	unsigned workers[WORKER_DEAD + 1];
} census_t;

static void census_flight(void *ctx, const ks_flight_t *f)
{
	census_t *c = ctx;

	if (f->state == FLIGHT_QUEUED)
		c->queued++;
	else if (f->state != FLIGHT_REMOTE)
		c->running++;
	c->waiters += (unsigned)f->nwaiters;
}

static void census_worker(void *ctx, const ks_worker_t *w)
{
	census_t *c = ctx;

	if (w->state >= 0 && w->state <= WORKER_DEAD)
		c->workers[w->state]++;
}

static void counter(ks_buf_t *b, const char *name, const char *help,
    uint64_t v)
{
	ks_prom_head(b, name, "counter", help);
	ks_prom_u64(b, name, "", v);
}

static void gauge(ks_buf_t *b, const char *name, const char *help,
    uint64_t v)
{
	ks_prom_head(b, name, "gauge", help);
	ks_prom_u64(b, name, "", v);
}

/* Counter NAME with one sample per op of V. */
static void by_op(ks_buf_t *b, const char *name, const char *help,
    const uint64_t *v)
{
	char l[96];
	int k;

	ks_prom_head(b, name, "counter", help);
	for (k = 0; k <= KS_OP_COUNT_; k++) {
		snprintf(l, sizeof l, "op=\"%s\"", k < KS_OP_COUNT_ ?
		    ks_op_name(k) : "none");
		ks_prom_u64(b, name, l, v[k]);
	}
}

static void requests(ks_buf_t *b, const ks_srv_t *srv)
{
	char l[96];
	int k;

	by_op(b, "kspec_requests_total", "Requests received, by op (none: "
	    "the header named no valid op).", srv->n.op_requests);
	by_op(b, "kspec_request_errors_total", "Requests answered with an "
	    "error, by op.", srv->n.op_errors);
	ks_prom_head(b, "kspec_errors_total", "counter",
	    "Error replies by error code.");
	for (k = 1; k < KS_ERR_SLOTS; k++) {
		if (strcmp(ks_err_name(-k), "E_UNKNOWN") == 0)
			continue;    /* not a code */
		snprintf(l, sizeof l, "code=\"%s\"", ks_err_name(-k));
		ks_prom_u64(b, "kspec_errors_total", l, srv->n.code_errors[k]);
	}
	counter(b, "kspec_gets_total", "Get requests.", srv->n.gets);
	ks_prom_head(b, "kspec_hits_total", "counter",
	    "Gets answered from a tier without a compile.");
	ks_prom_u64(b, "kspec_hits_total", "tier=\"memory\"",
	    ks_srv_hits(srv, 0));
	ks_prom_u64(b, "kspec_hits_total", "tier=\"disk\"", ks_srv_hits(srv, 1));
	ks_prom_head(b, "kspec_hit_duration_seconds", "histogram",
	    "Hits, from the request's arrival to its reply queued.");
	ks_prom_hist(b, "kspec_hit_duration_seconds", "tier=\"memory\"",
	    &srv->n.hit_hist[0], &ks_hist_hit_bounds);
	ks_prom_hist(b, "kspec_hit_duration_seconds", "tier=\"disk\"",
	    &srv->n.hit_hist[1], &ks_hist_hit_bounds);
	counter(b, "kspec_fast_path_hits_total", "Gets whose header the "
	    "fast path recognized.", srv->fast->hits);
	counter(b, "kspec_warm_requests_total", "Warm requests.",
	    srv->n.warms);
	counter(b, "kspec_warm_items_total", "Specs in warm requests.",
	    srv->n.warm_items);
}

/* Per deployment (names are the admins' own: 1 to 64 of [A-Za-z0-9._-],
 * nothing to escape in a label). */
static void deployments(ks_buf_t *b, ks_srv_t *srv)
{
	const ks_deploy_state_t *st;
	char l[96];

	counter(b, "kspec_late_compiles_total", "Gets that declared a "
	    "deployment and compiled after it was ready, since start.",
	    srv->n.late_compiles);
	ks_prom_head(b, "kspec_deployment_ready", "gauge", "1 once a check "
	    "found every spec of the deployment cached, until its specs "
	    "change.");
	for (st = srv->deploys; st; st = st->hh.next) {
		snprintf(l, sizeof l, "deployment=\"%s\"", st->name);
		ks_prom_u64(b, "kspec_deployment_ready", l, (uint64_t)st->ready);
	}
	ks_prom_head(b, "kspec_deployment_late_compiles_total", "counter",
	    "Late compiles by deployment, since start.");
	for (st = srv->deploys; st; st = st->hh.next) {
		snprintf(l, sizeof l, "deployment=\"%s\"", st->name);
		ks_prom_u64(b, "kspec_deployment_late_compiles_total", l,
		    st->late);
	}
	ks_prom_head(b, "kspec_upgrade_recompiles_total", "counter",
	    "Specs of deployments whose keys changed (a compiler or kernel "
	    "upgrade), recompiled at start: by outcome.");
	ks_prom_u64(b, "kspec_upgrade_recompiles_total", "result=\"queued\"",
	    srv->n.upgrade_queued);
	ks_prom_u64(b, "kspec_upgrade_recompiles_total",
	    "result=\"compiled\"", srv->n.upgrade_compiled);
	ks_prom_u64(b, "kspec_upgrade_recompiles_total", "result=\"failed\"",
	    srv->n.upgrade_failed);
}

static void compiles(ks_buf_t *b, ks_srv_t *srv, const census_t *cs)
{
	const ks_backend_t *const *all;
	const ks_flights_t *fl = &srv->flights;
	char l[96];
	int k, j, n;

	all = ks_backends(&n);
	if (n > KS_KEYS_MAX_BACKENDS)
		n = KS_KEYS_MAX_BACKENDS;
	ks_prom_head(b, "kspec_compiles_total", "counter",
	    "Compiles that ran in a worker, by backend and result.");
	for (k = 0; k < n; k++)
		for (j = 0; j < KS_CR_COUNT; j++) {
			snprintf(l, sizeof l, "backend=\"%s\",result=\"%s\"",
			    all[k]->name, ks_compile_result_names[j]);
			ks_prom_u64(b, "kspec_compiles_total", l,
			    fl->compile_results[k][j]);
		}
	ks_prom_head(b, "kspec_compile_duration_seconds", "histogram",
	    "Compiles that ran in a worker, by backend: the compile itself.");
	for (k = 0; k < n; k++) {
		snprintf(l, sizeof l, "backend=\"%s\"", all[k]->name);
		ks_prom_hist(b, "kspec_compile_duration_seconds", l,
		    &fl->compile_hist[k], &ks_hist_compile_bounds);
	}
	counter(b, "kspec_compile_joins_total", "Requests that joined a "
	    "compile already in flight (single-flight).", fl->joins);
	counter(b, "kspec_compiles_abandoned_total", "Queued compiles "
	    "dropped because no client waited for them any more.",
	    fl->abandoned);
	counter(b, "kspec_negative_hits_total", "Requests answered from the "
	    "record of a recent compile failure.", fl->negative_hits);
	ks_prom_head(b, "kspec_compile_queue_seconds_total", "counter",
	    "Time compiles waited for a worker.");
	ks_prom_f64(b, "kspec_compile_queue_seconds_total", "",
	    (double)fl->queue_ns / 1e9);
	gauge(b, "kspec_compiles_queued", "Compiles waiting for a worker.",
	    cs->queued);
	gauge(b, "kspec_compiles_running", "Compiles running in a worker.",
	    cs->running);
	gauge(b, "kspec_compile_waiters", "Requests waiting on a queued or "
	    "running compile.", cs->waiters);
	ks_prom_head(b, "kspec_workers", "gauge",
	    "Compile worker processes, by state.");
	for (k = 0; k <= WORKER_DEAD; k++) {
		snprintf(l, sizeof l, "state=\"%s\"", ks_worker_state_name(k));
		ks_prom_u64(b, "kspec_workers", l, cs->workers[k]);
	}
	gauge(b, "kspec_workers_max", "The --workers limit.",
	    (uint64_t)srv->cfg.workers);
	counter(b, "kspec_worker_starts_total", "Worker processes started.",
	    srv->pool.started);
	counter(b, "kspec_worker_start_failures_total", "Worker processes "
	    "that could not be started.", srv->pool.start_failures);
	counter(b, "kspec_worker_crashes_total", "Workers that died in a "
	    "compile.", srv->pool.crashes);
	counter(b, "kspec_worker_timeouts_total", "Workers killed at the "
	    "compile time limit.", srv->pool.timeouts);
	counter(b, "kspec_worker_ooms_total", "Workers that ran out of their "
	    "memory limit.", srv->pool.ooms);
	counter(b, "kspec_worker_recycles_total", "Workers replaced after "
	    "their job or memory budget.", srv->pool.recycled);
	counter(b, "kspec_worker_unresponsive_total", "Idle workers killed "
	    "for missing a ping before a job.", srv->pool.unresponsive);
	counter(b, "kspec_reserve_compiles_total", "Compiles run on the "
	    "reserve worker: a get of a client with nothing else compiling, "
	    "while the other workers were busy.", srv->pool.reserve_jobs);
	ks_prom_head(b, "kspec_audits_total", "counter", "Stored entries "
	    "compiled again by the key audit, by result.");
	for (j = 0; j < KS_AUDIT_COUNT; j++) {
		snprintf(l, sizeof l, "result=\"%s\"",
		    ks_audit_result_names[j]);
		ks_prom_u64(b, "kspec_audits_total", l,
		    srv->audit.results[j]);
	}
	counter(b, "kspec_audit_mismatches_total", "Stored entries whose "
	    "recompile differed (each one quarantined).",
	    srv->audit.results[KS_AUDIT_MISMATCH]);
	ks_prom_head(b, "kspec_audit_compile_seconds_total", "counter",
	    "Time the key audit's compiles took.");
	ks_prom_f64(b, "kspec_audit_compile_seconds_total", "",
	    srv->audit.compile_ms / 1e3);
}

static void storage(ks_buf_t *b, ks_srv_t *srv)
{
	ks_store_stats_t ss;

	memset(&ss, 0, sizeof ss);
	ks_store_stats(srv->store, &ss);
	gauge(b, "kspec_store_bytes", "Artifact bytes in the store.",
	    ss.bytes);
	gauge(b, "kspec_store_entries", "Artifacts in the store.", ss.entries);
	gauge(b, "kspec_store_max_bytes", "The store's byte budget "
	    "(--max-bytes; 0: unlimited).", ss.max_bytes);
	counter(b, "kspec_store_evictions_total", "Artifacts evicted from "
	    "the store to keep it in its budget.", ss.evicted);
	counter(b, "kspec_store_corrupt_total", "Store rows that failed "
	    "their checksum on read.", srv->n.corrupt);
	gauge(b, "kspec_store_moved_aside", "1 when this start found a "
	    "store it could not open or migrate and set it aside (stats: "
	    "store.moved_aside names the copy).", srv->store_moved[0] != 0);
	gauge(b, "kspec_store_writes_pending", "Writes posted to the store "
	    "writer and not yet done.", ks_writer_backlog(srv->writer));
	counter(b, "kspec_store_writes_failed_total", "Artifacts the writer "
	    "could not store.", ks_writer_failed_puts(srv->writer));
	gauge(b, "kspec_memory_tier_bytes", "Artifact bytes in the memory "
	    "tier.", ks_hot_bytes(srv->hot));
	gauge(b, "kspec_memory_tier_entries", "Artifacts in the memory tier.",
	    ks_hot_count(srv->hot));
	gauge(b, "kspec_memory_tier_max_bytes", "The memory tier's byte "
	    "budget (--hot-bytes).", srv->cfg.hot_bytes);
}

static void connections(ks_buf_t *b, const ks_srv_t *srv)
{
	gauge(b, "kspec_connections", "Client connections open.",
	    (uint64_t)srv->conns.n);
	counter(b, "kspec_connections_total", "Client connections accepted.",
	    srv->conns.total);
	ks_prom_head(b, "kspec_connections_refused_total", "counter",
	    "Connections refused: full (the connection limit), user (one "
	    "user's limit), peer (not allowed to connect).");
	ks_prom_u64(b, "kspec_connections_refused_total", "reason=\"full\"",
	    srv->conns.refused_full);
	ks_prom_u64(b, "kspec_connections_refused_total", "reason=\"user\"",
	    srv->conns.refused_user);
	ks_prom_u64(b, "kspec_connections_refused_total", "reason=\"peer\"",
	    srv->conns.refused_peer);
	counter(b, "kspec_connections_idle_closed_total", "Connections "
	    "closed after --idle-timeout.", srv->conns.idle_closed);
	counter(b, "kspec_read_timeouts_total", "Connections closed after "
	    "--read-timeout with a request half sent.",
	    srv->conns.read_timeouts);
	ks_prom_head(b, "kspec_scrapes_total", "counter", "Pages of the "
	    "metrics listener served: rendered, or the newest render again "
	    "(snapshot: beyond the render rate).");
	ks_prom_u64(b, "kspec_scrapes_total", "served=\"rendered\"",
	    srv->scrapes.rendered);
	ks_prom_u64(b, "kspec_scrapes_total", "served=\"snapshot\"",
	    srv->scrapes.reused);
}

/* The remote tier (--remote); none of these without it. */
static void remote(ks_buf_t *b, const ks_srv_t *srv)
{
	const ks_remote_t *r = srv->remote;
	int k;

	if (!r)
		return;
	gauge(b, "kspec_remote_connected", "1 while the connection to the "
	    "remote tier (Redis) is up.", r->state == KS_REMOTE_READY);
	for (k = 0; k < ks_remote_ncounters; k++)
		counter(b, ks_remote_counters[k].metric,
		    ks_remote_counters[k].help,
		    ks_remote_count(r, &ks_remote_counters[k]));
	ks_prom_head(b, "kspec_remote_lookup_duration_seconds", "histogram",
	    "Remote lookups, from the command sent to its outcome.");
	ks_prom_hist(b, "kspec_remote_lookup_duration_seconds", "",
	    &r->latency, &ks_hist_hit_bounds);
}

void ks_metrics_text(ks_srv_t *srv, ks_buf_t *b)
{
	census_t cs;

	memset(&cs, 0, sizeof cs);
	ks_flights_each(&srv->flights, census_flight, &cs);
	ks_pool_each(&srv->pool, census_worker, &cs);
	ks_prom_head(b, "kspec_build_info", "gauge",
	    "Always 1; the labels say which kspecd this is.");
	ks_buf_printf(b, "kspec_build_info{version=\"%s\"} 1\n",
	    KS_SERVER_VERSION);
	ks_prom_head(b, "kspec_uptime_seconds", "gauge",
	    "Seconds since kspecd started.");
	ks_prom_f64(b, "kspec_uptime_seconds", "",
	    (double)(ks_now_ns() - srv->started_ns) / 1e9);
	requests(b, srv);
	compiles(b, srv, &cs);
	deployments(b, srv);
	storage(b, srv);
	ks_canary_metrics(srv, b);
	connections(b, srv);
	remote(b, srv);
}

/*
 * A render walks the daemon's state on the loop (the store's counts, the
 * flights, the workers), which the kernel socket's clients wait behind.
 * Renders are rate-limited by a token bucket: KS_SCRAPE_RATE tokens a
 * second, as many at most; a scrape that finds no token is answered with
 * the newest render of its page (at most 1/KS_SCRAPE_RATE s old when
 * scrapes keep coming), so a flood of scrapes costs a copy each.
 */
static int may_render(ks_scrapes_t *s)
{
	uint64_t now = ks_now_ns();

	s->tokens += (double)(now - s->refill_ns) * KS_SCRAPE_RATE / 1e9;
	if (s->tokens > KS_SCRAPE_RATE)
		s->tokens = KS_SCRAPE_RATE;
	s->refill_ns = now;
	if (s->tokens < 1)
		return 0;
	s->tokens -= 1;
	return 1;
}

static void render(ks_srv_t *srv, int page, ks_buf_t *b)
{
	if (page == KS_PAGE_METRICS) {
		ks_metrics_text(srv, b);
		return;
	}
	ks_buf_puts(b, "{\"ok\":true");
	ks_stats_fields(srv, b);
	ks_buf_puts(b, "}");
}

static void page_reply(ks_srv_t *srv, int page, ks_http_reply_t *r)
{
	ks_scrapes_t *s = &srv->scrapes;
	ks_buf_t *p = &s->page[page];

	if (!p->data || may_render(s)) {
		p->len = 0;
		render(srv, page, p);
		s->rendered++;
	} else
		s->reused++;
	if (p->data)
		ks_buf_append(&r->body, p->data, p->len);
}

void ks_observe_sample(ks_srv_t *srv)
{
	ks_history_t *h = &srv->history;
	uint64_t now = ks_now_ns(), requests = 0;
	int k, i;

	if (now < h->next_ns)
		return;
	h->next_ns = now + (uint64_t)KS_HISTORY_MS * 1000000 - 100000000;
	for (k = 0; k <= KS_OP_COUNT_; k++)
		requests += srv->n.op_requests[k];
	i = (h->head + h->n) % KS_HISTORY_N;
	if (h->n == KS_HISTORY_N)
		h->head = (h->head + 1) % KS_HISTORY_N;
	else
		h->n++;
	h->s[i].ns = now;
	h->s[i].requests = requests;
	h->s[i].gets = srv->n.gets;
	h->s[i].hits = ks_srv_hits(srv, 0) + ks_srv_hits(srv, 1);
	h->s[i].queue = ks_flights_count(&srv->flights);
}

/* /api/history: {"interval_ms":..,"samples":[[age_ms, requests, hits,
 * gets, queue_depth], ...]}, oldest first, age_ms counted back from now
 * (the stats reply's names for the counters). */
static void history_json(const ks_srv_t *srv, ks_buf_t *b)
{
	const ks_history_t *h = &srv->history;
	uint64_t now = ks_now_ns();
	int i;

	ks_buf_printf(b, "{\"interval_ms\":%d,\"samples\":[", KS_HISTORY_MS);
	for (i = 0; i < h->n; i++) {
		const int j = (h->head + i) % KS_HISTORY_N;

		ks_buf_printf(b, "%s[%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%"
		    PRIu64 ",%u]", i ? "," : "", (now - h->s[j].ns) / 1000000,
		    h->s[j].requests, h->s[j].hits, h->s[j].gets,
		    h->s[j].queue);
	}
	ks_buf_puts(b, "]}");
}

void ks_observe_close(ks_srv_t *srv)
{
	int i;

	for (i = 0; i < KS_PAGE_COUNT_; i++)
		ks_buf_close(&srv->scrapes.page[i]);
}

void ks_observe_handle(void *owner, const char *path, ks_http_reply_t *r)
{
	ks_srv_t *srv = owner;

	if (strcmp(path, "/metrics") == 0) {
		r->type = "text/plain; version=0.0.4; charset=utf-8";
		page_reply(srv, KS_PAGE_METRICS, r);
	} else if (strcmp(path, "/api/stats") == 0) {
		r->type = "application/json";
		page_reply(srv, KS_PAGE_STATS, r);
	} else if (strcmp(path, "/api/history") == 0) {
		r->type = "application/json";
		history_json(srv, &r->body);
	} else if (strcmp(path, "/") == 0) {
		r->type = "text/html; charset=utf-8";
		/* Nothing but this page and its own requests to /api/. */
		r->headers = "Content-Security-Policy: default-src 'none'; "
		    "script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
		    "connect-src 'self'; img-src data:; base-uri 'none'; "
		    "form-action 'none'; frame-ancestors 'none'\r\n";
		ks_buf_append(&r->body, ks_dashboard_html,
		    ks_dashboard_html_len);
	} else {
		r->status = 404;
		ks_buf_printf(&r->body, "404 Not Found: this listener serves "
		    "/metrics, /api/stats, /api/history and /\n");
	}
}
