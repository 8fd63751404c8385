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
		ks_srv_reject(c, req->has_id, req->id, KS_E_NOMEM,
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
	    f->state == FLIGHT_QUEUED ? "queued" : "compiling", f->nwaiters,
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
	}
	ks_buf_printf(in->out, ",\"jobs\":%" PRIu64 ",\"rss\":%" PRIu64
	    ",\"age_s\":%.1f}", w->jobs, w->rss,
	    (double)(in->now - w->started_ns) / 1e9);
	in->first = 0;
}

void ks_op_stats(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = ks_srv_of(c);
	const ks_flights_t *fl = &srv->flights;
	ks_store_stats_t ss;
	inflight_t in;

	memset(&ss, 0, sizeof ss);
	ks_store_stats(srv->store, &ss);
	in.out = &c->out;
	in.now = ks_now_ns();
	in.first = 1;
	ks_reply_begin(c, req->has_id, req->id);
	ks_buf_printf(&c->out, ",\"server\":\"kspecd %s\",\"uptime_s\":%.3f",
	    KS_SERVER_VERSION, (double)(in.now - srv->started_ns) / 1e9);
	json_counter(&c->out, "requests", srv->n.requests);
	json_counter(&c->out, "gets", srv->n.gets);
	json_counter(&c->out, "hits_memory", srv->n.hits_memory);
	json_counter(&c->out, "hits_disk", srv->n.hits_disk);
	json_counter(&c->out, "compiles", fl->compiles);
	json_counter(&c->out, "joins", fl->joins);
	json_counter(&c->out, "failures", fl->failures);
	json_counter(&c->out, "errors", srv->n.bad_requests +
	    srv->conns.bad_frames);
	json_counter(&c->out, "corrupt", srv->n.corrupt);
	json_counter(&c->out, "abandoned", fl->abandoned);
	json_counter(&c->out, "warms", srv->n.warms);
	json_counter(&c->out, "warm_items", srv->n.warm_items);
	json_counter(&c->out, "connections", (uint64_t)srv->conns.n);
	json_counter(&c->out, "connections_total", srv->conns.total);
	json_counter(&c->out, "connections_refused_full",
	    srv->conns.refused_full);
	json_counter(&c->out, "connections_refused_user",
	    srv->conns.refused_user);
	json_counter(&c->out, "connections_refused_peer",
	    srv->conns.refused_peer);
	json_counter(&c->out, "idle_closed", srv->conns.idle_closed);
	json_counter(&c->out, "read_timeouts", srv->conns.read_timeouts);
	json_counter(&c->out, "turns_yielded", srv->conns.turns_yielded);
	json_counter(&c->out, "reads_paused_global", srv->conns.paused_global);
	json_counter(&c->out, "unsent_bytes", srv->conns.unsent_total);
	ks_buf_printf(&c->out, ",\"compile_ms_total\":%.3f,"
	    "\"queue_ms_total\":%.3f", (double)fl->compile_ns / 1e6,
	    (double)fl->queue_ns / 1e6);
	ks_buf_printf(&c->out, ",\"hot\":{\"entries\":%zu,\"bytes\":%zu,"
	    "\"max_bytes\":%" PRIu64 "}", ks_hot_count(srv->hot),
	    ks_hot_bytes(srv->hot), srv->cfg.hot_bytes);
	ks_buf_printf(&c->out, ",\"store\":{\"path\":");
	ks_buf_json_str(&c->out, srv->cfg.store_path);
	ks_buf_printf(&c->out, ",\"entries\":%" PRIu64 ",\"bytes\":%" PRIu64
	    ",\"max_bytes\":%" PRIu64 ",\"evicted\":%" PRIu64
	    ",\"corrupt\":%" PRIu64 ",\"schema_version\":%d"
	    ",\"writes_pending\":%" PRIu64 ",\"writes_failed\":%" PRIu64
	    ",\"touches_dropped\":%" PRIu64 ",\"replaced\":%" PRIu64
	    ",\"moved_aside\":", ss.entries, ss.bytes,
	    ss.max_bytes, ss.evicted, ss.corrupt, ss.schema_version,
	    ks_writer_backlog(srv->writer), ks_writer_failed_puts(srv->writer),
	    ks_store_touches_dropped(srv->store), srv->store_replaced);
	if (srv->store_moved[0])
		ks_buf_json_str(&c->out, srv->store_moved);
	else
		ks_buf_puts(&c->out, "null");
	ks_buf_puts(&c->out, "}");
	json_counter(&c->out, "negative_hits", fl->negative_hits);
	ks_buf_printf(&c->out, ",\"fast_path\":{\"enabled\":%s,\"hits\":%"
	    PRIu64 ",\"learned\":%" PRIu64 ",\"replaced\":%" PRIu64 "}",
	    srv->fast->enabled ? "true" : "false", srv->fast->hits,
	    srv->fast->learned, srv->fast->replaced);
	json_counter(&c->out, "worker_starts", srv->pool.started);
	json_counter(&c->out, "worker_start_failures",
	    srv->pool.start_failures);
	json_counter(&c->out, "worker_crashes", srv->pool.crashes);
	json_counter(&c->out, "worker_timeouts", srv->pool.timeouts);
	json_counter(&c->out, "worker_ooms", srv->pool.ooms);
	json_counter(&c->out, "worker_retries", srv->pool.retries);
	json_counter(&c->out, "worker_recycles", srv->pool.recycled);
	ks_buf_printf(&c->out, ",\"limits\":{\"workers\":%d,"
	    "\"compile_timeout_s\":%" PRIu64 ",\"worker_memory\":%" PRIu64
	    ",\"worker_jobs\":%" PRIu64 ",\"worker_rss\":%" PRIu64
	    ",\"connections\":%d,\"connections_per_user\":%d,"
	    "\"idle_timeout_s\":%" PRIu64 ",\"read_timeout_s\":%" PRIu64 "}",
	    srv->cfg.workers, srv->cfg.compile_timeout_s,
	    srv->cfg.worker_memory, srv->cfg.worker_jobs, srv->cfg.worker_rss,
	    srv->conns.lim.max, srv->conns.lim.max_per_user,
	    srv->cfg.idle_timeout_s, srv->cfg.read_timeout_s);
	ks_buf_puts(&c->out, ",\"workers\":[");
	in.first = 1;
	ks_pool_each(&srv->pool, worker_one, &in);
	ks_buf_printf(&c->out, "],\"queue_depth\":%u,\"inflight\":[",
	    ks_flights_count(fl));
	in.first = 1;
	ks_flights_each(&srv->flights, inflight_one, &in);
	ks_buf_puts(&c->out, "]");
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
		ks_buf_puts(out, "],\"variants\":[");
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
