/*
 * ping, hello, stats and kernels: what the daemon is and what it does.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ops.h"

void ks_op_ping(ks_conn_t *c, const ks_request_t *req)
{
	ks_reply_begin(c, req->has_id, req->id);
	ks_buf_puts(&c->out, ",\"pong\":true");
	ks_reply_finish(c);
}

/* ---- hello ---- */

/* A backend's default target and compiler, from the probe: "auto", or for
 * a backend without it (cuda) its explicit targets and the compiler of
 * the newest. */
static void hello_targets(ks_buf_t *out, const ks_keys_t *keys,
    const ks_binfo_t *bi)
{
	const ks_ident_t *id;
	char err[512];
	int i;

	if (ks_keys_resolve(keys, bi->backend, "auto", &id, err,
	    sizeof err) == KS_OK) {
		ks_buf_puts(out, ",\"target\":");
		ks_buf_json_str(out, id->target);
		ks_buf_puts(out, ",\"compiler\":");
		ks_buf_json_str(out, id->identity);
		return;
	}
	if (bi->nlisted == 0)
		return;
	ks_buf_puts(out, ",\"target\":null,\"targets\":[");
	for (i = 0; i < bi->nlisted; i++) {
		ks_buf_puts(out, i ? "," : "");
		ks_buf_json_str(out, bi->listed[i]);
	}
	ks_buf_puts(out, "]");
	if (ks_keys_resolve(keys, bi->backend, bi->listed[bi->nlisted - 1],
	    &id, err, sizeof err) == KS_OK) {
		ks_buf_puts(out, ",\"compiler\":");
		ks_buf_json_str(out, id->identity);
	}
}

/* The fields of the hello reply: what the probe said, which does not
 * change while the daemon runs. */
static void hello_body(ks_buf_t *out, const ks_keys_t *keys)
{
	const ks_backend_t *const *bes;
	const ks_kernel_def_t *const *ks;
	int i, nb, nk;

	ks_buf_printf(out, ",\"protocol\":%d,\"server\":\"kspecd %s\","
	    "\"backends\":[", KS_PROTO_VERSION, KS_SERVER_VERSION);
	bes = ks_backends(&nb);
	for (i = 0; i < nb; i++) {
		const ks_binfo_t *bi = ks_keys_backend(keys, bes[i]);

		ks_buf_printf(out, "%s{\"name\":\"%s\",\"format\":\"%s\"",
		    i ? "," : "", bes[i]->name, bes[i]->default_format);
		if (!bi || !bi->available) {
			ks_buf_puts(out, ",\"available\":false,\"reason\":");
			ks_buf_json_str(out, bi ? bi->reason : "not "
			    "reported by the compile workers");
			ks_buf_puts(out, "}");
			continue;
		}
		ks_buf_puts(out, ",\"available\":true");
		hello_targets(out, keys, bi);
		ks_buf_puts(out, "}");
	}
	ks_buf_puts(out, "],\"kernels\":[");
	ks = ks_kernels(&nk);
	for (i = 0; i < nk; i++) {
		ks_buf_puts(out, i ? "," : "");
		ks_buf_json_str(out, ks[i]->name);
	}
	ks_buf_puts(out, "]");
}

/* Replies with the cached fields BODY (built by BUILD on first use). */
static void reply_cached(ks_conn_t *c, const ks_request_t *req,
    ks_buf_t *body, void (*build)(ks_buf_t *out, const ks_keys_t *keys))
{
	if (!body->len)
		build(body, &ks_srv_of(c)->keys);
	if (!body->data) {
		ks_srv_reject(c, req, KS_E_NOMEM,
		    "out of memory");
		return;
	}
	ks_reply_begin(c, req->has_id, req->id);
	ks_reply_static(c, body->data, body->len);
	ks_reply_finish(c);
}

void ks_op_hello(ks_conn_t *c, const ks_request_t *req)
{
	reply_cached(c, req, &ks_srv_of(c)->hello_body, hello_body);
}

/* ---- stats ---- */

static void json_counter(ks_buf_t *b, const char *name, uint64_t v)
{
	ks_buf_printf(b, ",\"%s\":%" PRIu64, name, v);
}

typedef struct {
	ks_buf_t *out;
	uint64_t now;
	int first;
} inflight_t;

static void inflight_one(void *ctx, const ks_flight_t *f)
{
	inflight_t *in = ctx;
	char hex[KS_HASH_HEX];

	ks_hash_hex(&f->key, hex);
	ks_buf_printf(in->out, "%s{\"key\":\"%s\",\"kernel\":\"%s\","
	    "\"backend\":\"%s\",\"state\":\"%s\",\"waiters\":%d,"
	    "\"priority\":\"%s\",\"age_ms\":%.1f}", in->first ? "" : ",",
	    hex, f->get.spec.def->name, f->get.backend->name,
	    f->state == FLIGHT_QUEUED ? "queued" : f->state == FLIGHT_REMOTE ?
	    "remote" : "compiling", f->nwaiters,
	    f->prio == KS_PRIO_GET ? "get" : "warm",
	    (double)(in->now - f->created_ns) / 1e6);
	in->first = 0;
}

static void worker_one(void *ctx, const ks_worker_t *w)
{
	inflight_t *in = ctx;
	char hex[KS_HASH_HEX];

	ks_buf_printf(in->out, "%s{\"pid\":%ld,\"state\":\"%s\"",
	    in->first ? "" : ",", (long)w->pid, ks_worker_state_name(w->state));
	if (w->state == WORKER_BUSY && w->job) {
		ks_hash_hex(&w->job->key, hex);
		ks_buf_printf(in->out, ",\"key\":\"%s\",\"kernel\":\"%s\","
		    "\"backend\":\"%s\",\"job_ms\":%.1f", hex,
		    w->job->job.spec.def->name, w->job->job.backend->name,
		    (double)(in->now - w->job_ns) / 1e6);
		if (w->job->reserve)
			ks_buf_puts(in->out, ",\"reserve\":true");
	}
	ks_buf_printf(in->out, ",\"jobs\":%" PRIu64 ",\"rss\":%" PRIu64
	    ",\"age_s\":%.1f}", w->jobs, w->rss,
	    (double)(in->now - w->started_ns) / 1e9);
	in->first = 0;
}

/* The remote tier: "remote":null without --remote. */
static void remote_fields(const ks_srv_t *srv, ks_buf_t *out)
{
	const ks_remote_t *r = srv->remote;
	int k;

	if (!r) {
		ks_buf_puts(out, ",\"remote\":null");
		return;
	}
	ks_buf_puts(out, ",\"remote\":{\"url\":");
	ks_buf_json_str(out, srv->cfg.remote_url);
	ks_buf_printf(out, ",\"connected\":%s,\"publishing\":%s,"
	    "\"timeout_ms\":%" PRIu64 ",\"lease_wait_s\":%" PRIu64,
	    r->state == KS_REMOTE_READY ? "true" : "false", srv->can_sign ?
	    "true" : "false", r->timeout_ms, srv->cfg.remote_lease_wait_s);
	for (k = 0; k < ks_remote_ncounters; k++)
		json_counter(out, ks_remote_counters[k].stat,
		    ks_remote_count(r, &ks_remote_counters[k]));
	json_counter(out, "pending", r->pending);
	ks_buf_puts(out, ",\"latency\":");
	ks_hist_json(out, &r->latency, &ks_hist_hit_bounds);
	ks_buf_puts(out, "}");
}

/* What the dashboard shows beyond the counters: requests and errors by
 * op, latency histograms, compiles by backend, the most requested
 * kernels and the last errors. */
static void ks_stats_more(ks_srv_t *srv, ks_buf_t *out, uint64_t now)
{
	const ks_kernel_def_t *const *kernels;
	const ks_backend_t *const *backends;
	const ks_flights_t *fl = &srv->flights;
	int order[KS_KEYS_MAX_KERNELS];
	uint64_t i, first;
	int k, j, nk, nb;

	ks_buf_puts(out, ",\"requests_by_op\":{");
	for (k = 0; k <= KS_OP_COUNT_; k++)
		ks_buf_printf(out, "%s\"%s\":{\"requests\":%" PRIu64
		    ",\"errors\":%" PRIu64 "}", k ? "," : "",
		    k < KS_OP_COUNT_ ? ks_op_name(k) : "none",
		    srv->n.op_requests[k], srv->n.op_errors[k]);
	ks_buf_puts(out, "},\"errors_by_code\":{");
	for (k = 1, first = 1; k < KS_ERR_SLOTS; k++) {
		if (!srv->n.code_errors[k])
			continue;
		ks_buf_printf(out, "%s\"%s\":%" PRIu64, first ? "" : ",",
		    ks_err_name(-k), srv->n.code_errors[k]);
		first = 0;
	}
	ks_buf_puts(out, "},\"latency\":{\"hit_memory\":");
	ks_hist_json(out, &srv->n.hit_hist[0], &ks_hist_hit_bounds);
	ks_buf_puts(out, ",\"hit_disk\":");
	ks_hist_json(out, &srv->n.hit_hist[1], &ks_hist_hit_bounds);
	ks_buf_puts(out, ",\"compile\":{");
	backends = ks_backends(&nb);
	for (k = 0; k < nb && k < KS_KEYS_MAX_BACKENDS; k++) {
		ks_buf_printf(out, "%s\"%s\":", k ? "," : "",
		    backends[k]->name);
		ks_hist_json(out, &fl->compile_hist[k],
		    &ks_hist_compile_bounds);
	}
	ks_buf_puts(out, "}},\"compiles_by_backend\":{");
	for (k = 0; k < nb && k < KS_KEYS_MAX_BACKENDS; k++) {
		ks_buf_printf(out, "%s\"%s\":{", k ? "," : "",
		    backends[k]->name);
		for (j = 0; j < KS_CR_COUNT; j++)
			ks_buf_printf(out, "%s\"%s\":%" PRIu64, j ? "," : "",
			    ks_compile_result_names[j],
			    fl->compile_results[k][j]);
		ks_buf_puts(out, "}");
	}
	/* Most requested first (insertion sort of at most 16). */
	kernels = ks_kernels(&nk);
	if (nk > KS_KEYS_MAX_KERNELS)
		nk = KS_KEYS_MAX_KERNELS;
	for (k = 0; k < nk; k++) {
		for (j = k; j > 0 && srv->n.kernel_gets[order[j - 1]] <
		    srv->n.kernel_gets[k]; j--)
			order[j] = order[j - 1];
		order[j] = k;
	}
	ks_buf_puts(out, "},\"kernels_requested\":[");
	for (k = 0; k < nk; k++)
		ks_buf_printf(out, "%s{\"kernel\":\"%s\",\"gets\":%" PRIu64 "}",
		    k ? "," : "", kernels[order[k]]->name,
		    srv->n.kernel_gets[order[k]]);
	/* Newest first. */
	ks_buf_puts(out, "],\"recent_errors\":[");
	for (i = 0; i < srv->nrecent && i < KS_RECENT_ERRORS; i++) {
		const ks_recent_err_t *r = &srv->recent[(srv->nrecent - 1 - i) %
		    KS_RECENT_ERRORS];

		ks_buf_printf(out, "%s{\"age_s\":%.3f,\"op\":\"%s\","
		    "\"code\":\"%s\",\"message\":", i ? "," : "",
		    (double)(now - r->at_ns) / 1e9, r->op < KS_OP_COUNT_ ?
		    ks_op_name(r->op) : "none", ks_err_name(r->code));
		ks_buf_json_str(out, r->msg);
		ks_buf_puts(out, "}");
	}
	ks_buf_puts(out, "]");
}

void ks_stats_fields(ks_srv_t *srv, ks_buf_t *out)
{
	const ks_flights_t *fl = &srv->flights;
	uint64_t requests = 0;
	ks_store_stats_t ss;
	inflight_t in;
	int k;

	for (k = 0; k <= KS_OP_COUNT_; k++)
		requests += srv->n.op_requests[k];
	memset(&ss, 0, sizeof ss);
	ks_store_stats(srv->store, &ss);
	in.out = out;
	in.now = ks_now_ns();
	in.first = 1;
	ks_buf_printf(out, ",\"server\":\"kspecd %s\",\"uptime_s\":%.3f",
	    KS_SERVER_VERSION, (double)(in.now - srv->started_ns) / 1e9);
	json_counter(out, "requests", requests);
	json_counter(out, "gets", srv->n.gets);
	json_counter(out, "hits_memory", ks_srv_hits(srv, 0));
	json_counter(out, "hits_disk", ks_srv_hits(srv, 1));
	json_counter(out, "compiles", fl->compiles);
	json_counter(out, "joins", fl->joins);
	json_counter(out, "failures", fl->failures);
	json_counter(out, "errors", srv->n.bad_requests +
	    srv->conns.bad_frames);
	json_counter(out, "corrupt", srv->n.corrupt);
	json_counter(out, "abandoned", fl->abandoned);
	json_counter(out, "warms", srv->n.warms);
	json_counter(out, "warm_items", srv->n.warm_items);
	json_counter(out, "late_compiles", srv->n.late_compiles);
	ks_buf_printf(out, ",\"upgrade_recompiles\":{\"queued\":%" PRIu64
	    ",\"compiled\":%" PRIu64 ",\"failed\":%" PRIu64 "}",
	    srv->n.upgrade_queued, srv->n.upgrade_compiled,
	    srv->n.upgrade_failed);
	ks_buf_printf(out, ",\"probe\":{\"state\":\"%s\",\"saved\":\"%s\","
	    "\"ms\":%.1f,\"waiting\":%" PRIu64 ",\"waited\":%" PRIu64 "}",
	    srv->probe_state == KS_PROBE_DONE ? "done" :
	    srv->probe_state == KS_PROBE_SAVED ? "saved" : "running",
	    srv->saved_probe_use ? srv->saved_probe_use : "absent",
	    srv->probe_ms, srv->nparked, srv->parked_total);
	json_counter(out, "connections", (uint64_t)srv->conns.n);
	json_counter(out, "connections_total", srv->conns.total);
	json_counter(out, "connections_refused_full",
	    srv->conns.refused_full);
	json_counter(out, "connections_refused_user",
	    srv->conns.refused_user);
	json_counter(out, "connections_refused_peer",
	    srv->conns.refused_peer);
	json_counter(out, "idle_closed", srv->conns.idle_closed);
	json_counter(out, "read_timeouts", srv->conns.read_timeouts);
	json_counter(out, "turns_yielded", srv->conns.turns_yielded);
	json_counter(out, "reads_paused_global", srv->conns.paused_global);
	json_counter(out, "unsent_bytes", srv->conns.unsent_total);
	ks_buf_printf(out, ",\"compile_ms_total\":%.3f,"
	    "\"queue_ms_total\":%.3f", (double)fl->compile_ns / 1e6,
	    (double)fl->queue_ns / 1e6);
	ks_audit_stats(srv, out);
	ks_buf_printf(out, ",\"hot\":{\"entries\":%zu,\"bytes\":%zu,"
	    "\"max_bytes\":%" PRIu64 "}", ks_hot_count(srv->hot),
	    ks_hot_bytes(srv->hot), srv->cfg.hot_bytes);
	ks_buf_printf(out, ",\"store\":{\"path\":");
	ks_buf_json_str(out, srv->cfg.store_path);
	ks_buf_printf(out, ",\"entries\":%" PRIu64 ",\"bytes\":%" PRIu64
	    ",\"max_bytes\":%" PRIu64 ",\"evicted\":%" PRIu64
	    ",\"corrupt\":%" PRIu64 ",\"schema_version\":%d"
	    ",\"writes_pending\":%" PRIu64 ",\"writes_failed\":%" PRIu64
	    ",\"touches_dropped\":%" PRIu64 ",\"replaced\":%" PRIu64
	    ",\"moved_aside\":", ss.entries, ss.bytes,
	    ss.max_bytes, ss.evicted, ss.corrupt, ss.schema_version,
	    ks_writer_backlog(srv->writer), ks_writer_failed_puts(srv->writer),
	    ks_store_touches_dropped(srv->store), srv->store_replaced);
	if (srv->store_moved[0])
		ks_buf_json_str(out, srv->store_moved);
	else
		ks_buf_puts(out, "null");
	ks_buf_puts(out, "}");
	json_counter(out, "negative_hits", fl->negative_hits);
	ks_buf_printf(out, ",\"imports\":{\"running\":%" PRIu64
	    ",\"held_entries\":%" PRIu64 ",\"held_bytes\":%" PRIu64
	    ",\"peak_entries\":%" PRIu64 ",\"peak_bytes\":%" PRIu64 "}",
	    srv->imports.running,
	    __atomic_load_n(&srv->imports.entries, __ATOMIC_RELAXED),
	    __atomic_load_n(&srv->imports.bytes, __ATOMIC_RELAXED),
	    __atomic_load_n(&srv->imports.peak_entries, __ATOMIC_RELAXED),
	    __atomic_load_n(&srv->imports.peak_bytes, __ATOMIC_RELAXED));
	remote_fields(srv, out);
	ks_buf_printf(out, ",\"fast_path\":{\"enabled\":%s,\"hits\":%"
	    PRIu64 ",\"learned\":%" PRIu64 ",\"replaced\":%" PRIu64 "}",
	    srv->fast->enabled ? "true" : "false", srv->fast->hits,
	    srv->fast->learned, srv->fast->replaced);
	json_counter(out, "worker_starts", srv->pool.started);
	json_counter(out, "worker_start_failures",
	    srv->pool.start_failures);
	json_counter(out, "worker_crashes", srv->pool.crashes);
	json_counter(out, "worker_timeouts", srv->pool.timeouts);
	json_counter(out, "worker_ooms", srv->pool.ooms);
	json_counter(out, "worker_retries", srv->pool.retries);
	json_counter(out, "worker_recycles", srv->pool.recycled);
	json_counter(out, "worker_unresponsive", srv->pool.unresponsive);
	json_counter(out, "reserve_compiles", srv->pool.reserve_jobs);
	ks_buf_printf(out, ",\"limits\":{\"workers\":%d,"
	    "\"reserve_workers\":%d,"
	    "\"compile_timeout_s\":%" PRIu64 ",\"worker_memory\":%" PRIu64
	    ",\"worker_jobs\":%" PRIu64 ",\"worker_rss\":%" PRIu64
	    ",\"connections\":%d,\"connections_per_user\":%d,"
	    "\"idle_timeout_s\":%" PRIu64 ",\"read_timeout_s\":%" PRIu64 "}",
	    srv->cfg.workers, KS_POOL_RESERVE, srv->cfg.compile_timeout_s,
	    srv->cfg.worker_memory, srv->cfg.worker_jobs, srv->cfg.worker_rss,
	    srv->conns.lim.max, srv->conns.lim.max_per_user,
	    srv->cfg.idle_timeout_s, srv->cfg.read_timeout_s);
	ks_buf_puts(out, ",\"workers\":[");
	in.first = 1;
	ks_pool_each(&srv->pool, worker_one, &in);
	ks_buf_printf(out, "],\"queue_depth\":%u,\"inflight\":[",
	    ks_flights_count(fl));
	in.first = 1;
	ks_flights_each(&srv->flights, inflight_one, &in);
	ks_buf_puts(out, "],\"canaries\":");
	ks_canary_json(srv, out, "", "");
	ks_stats_more(srv, out, in.now);
}

void ks_op_stats(ks_conn_t *c, const ks_request_t *req)
{
	ks_reply_begin(c, req->has_id, req->id);
	ks_stats_fields(ks_srv_of(c), &c->out);
	ks_reply_finish(c);
}

/* ---- kernels ---- */

/* The entry parameters of DEF's general variant with every dim dynamic
 * (f32): every argument any of its artifacts can take, in order. */
static void general_params(ks_buf_t *out, const ks_kernel_def_t *def)
{
	ks_dim_t dims[KS_MAX_DIMS];
	ks_ir_kernel_t *k = NULL;
	ks_spec_t spec;
	char err[256];
	int i;

	ks_buf_puts(out, ",\"params\":");
	for (i = 0; i < def->ndims; i++)
		dims[i] = (ks_dim_t){ def->dims[i], 0, 0 };
	if (ks_kernel_validate(def, KS_DTYPE_F32, KS_MODE_EXACT, dims,
	    def->ndims, &spec, err, sizeof err) != KS_OK ||
	    ks_specialize(&spec, &k, err, sizeof err) != KS_OK) {
		ks_buf_puts(out, "[]");
		return;
	}
	ks_exec_params_json(out, k);
	ks_ir_free(k);
}

/* The fields of the kernels reply: the library, fixed at build time. */
static void kernels_body(ks_buf_t *out, const ks_keys_t *keys)
{
	const ks_kernel_def_t *const *all;
	int i, j, n;

	(void)keys;
	all = ks_kernels(&n);
	ks_buf_puts(out, ",\"kernels\":[");
	for (i = 0; i < n; i++) {
		const ks_kernel_def_t *k = all[i];

		ks_buf_printf(out, "%s{\"name\":", i ? "," : "");
		ks_buf_json_str(out, k->name);
		ks_buf_puts(out, ",\"summary\":");
		ks_buf_json_str(out, k->summary ? k->summary : "");
		ks_buf_printf(out, ",\"version\":%d,\"dims\":[",
		    k->version);
		for (j = 0; j < k->ndims; j++) {
			ks_buf_puts(out, j ? "," : "");
			ks_buf_json_str(out, k->dims[j]);
		}
		ks_buf_puts(out, "],\"dtypes\":[");
		for (j = 0; j < KS_DTYPE_COUNT; j++)
			ks_buf_printf(out, "%s\"%s\"", j ? "," : "",
			    ks_dtype_name((ks_dtype_t)j));
		/* The weight dtypes each dtype takes beside itself. */
		ks_buf_puts(out, "],\"wdtypes\":{");
		for (j = 0; j < KS_DTYPE_COUNT; j++) {
			int w, first = 1;

			ks_buf_printf(out, "%s\"%s\":[", j ? "," : "",
			    ks_dtype_name((ks_dtype_t)j));
			for (w = 0; w < KS_DTYPE_ALL; w++) {
				if (w == j || !ks_kernel_wdtype_ok(k,
				    (ks_dtype_t)j, (ks_dtype_t)w))
					continue;
				ks_buf_printf(out, "%s\"%s\"", first ? "" : ",",
				    ks_dtype_name((ks_dtype_t)w));
				first = 0;
			}
			ks_buf_puts(out, "]");
		}
		ks_buf_puts(out, "},\"variants\":[");
		for (j = 0; j < k->nvariants; j++) {
			ks_buf_printf(out, "%s{\"name\":", j ? "," : "");
			ks_buf_json_str(out, k->variants[j]);
			ks_buf_puts(out, ",\"guard\":");
			ks_buf_json_str(out, k->guards ? k->guards[j] : "");
			ks_buf_puts(out, "}");
		}
		ks_buf_puts(out, "]");
		general_params(out, k);
		ks_buf_puts(out, "}");
	}
	ks_buf_puts(out, "]");
}

void ks_op_kernels(ks_conn_t *c, const ks_request_t *req)
{
	reply_cached(c, req, &ks_srv_of(c)->kernels_body, kernels_body);
}
