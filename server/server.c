/*
 * kspecd's event loop: connections, framing, dispatch, the hit path and
 * the single-flight compile table.
 *
 * Threads.  Everything here runs on the loop thread except work_compile,
 * which runs in libuv's thread pool (the compile executor: one job = one
 * flight; spec in, artifact or error out).  The worker touches only its
 * flight's get, artifact and error fields and the store's writer; the loop
 * thread owns connections, waiters, counters, the hot tier and the flight
 * table.
 *
 * Hit path (parse, key, hot tier, store) allocates nothing per request
 * beyond the connection's reused buffers, except what cJSON allocates while
 * parsing the header; replies are written with uv_try_write from those
 * buffers, and only a reply the socket cannot take at once is copied into a
 * write request.  sqlite is touched only on a hot-tier miss.
 *
 * Signals.  SIGINT and SIGTERM are blocked in every thread (the mask is set
 * before any thread starts and inherited) and taken by one thread in
 * sigwait(), which wakes the loop through a uv_async_t.  Handlers would not
 * do: libgccjit runs GCC's driver inside the process, and the driver
 * installs its own SIGINT/SIGTERM handlers that kill the process, replacing
 * any handler of ours, the moment the first compile links.
 *
 * Shutdown (SIGINT/SIGTERM): the listener closes and the socket file is
 * removed, connections stop reading, queued compiles are cancelled and
 * their waiters told E_SHUTTING_DOWN, running compiles finish and are
 * answered; then every handle closes, the loop ends and the store is
 * flushed and closed.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "internal.h"

#define READ_CHUNK 65536
#define FLUSH_INTERVAL_MS 1000

typedef struct {
	uv_write_t req;
	ks_conn_t *conn;
	ks_artifact_t *art;      /* payload, referenced; may be NULL */
	size_t art_off;          /* payload bytes already written */
	size_t hdr_len;
	char hdr[];              /* unwritten prefix+header bytes */
} ks_wreq_t;

static void conn_close(ks_conn_t *c);
static void conn_resume(ks_conn_t *c);
static void maybe_finish(ks_srv_t *srv);

/* ---- request parsing arena ---- */

/*
 * cJSON allocates a node per JSON value.  On the hit path those
 * allocations come from one arena, reset per request, instead of malloc:
 * the hooks serve the loop thread while a parse is under way and fall back
 * to malloc/free everywhere else (other threads, a parse that outgrows the
 * arena).  free() of an arena pointer is a no-op; the arena is reset
 * before the next parse.  The daemon owns its process, so installing the
 * global cJSON hooks is its call (libkspec never does).
 */
#define PARSE_ARENA_BYTES (256u << 10)

static struct {
	_Alignas(16) char mem[PARSE_ARENA_BYTES];
	size_t used;
	int active;
	pthread_t owner;
} parse_arena;

static void *arena_malloc(size_t n)
{
	size_t need = (n + 15) & ~(size_t)15;

	if (parse_arena.active && need >= n && pthread_equal(pthread_self(),
	    parse_arena.owner) && need <= PARSE_ARENA_BYTES -
	    parse_arena.used) {
		void *p = parse_arena.mem + parse_arena.used;

		parse_arena.used += need;
		return p;
	}
	return malloc(n);
}

static void arena_free(void *p)
{
	if ((char *)p >= parse_arena.mem &&
	    (char *)p < parse_arena.mem + PARSE_ARENA_BYTES)
		return;
	free(p);
}

static void arena_install(void)
{
	cJSON_Hooks hooks = { arena_malloc, arena_free };

	parse_arena.owner = pthread_self();
	cJSON_InitHooks(&hooks);
}

/* ---- connections ---- */

void ks_conn_unref(ks_conn_t *c)
{
	if (--c->refs > 0)
		return;
	ks_buf_close(&c->in);
	ks_buf_close(&c->out);
	free(c);
}

static void on_close(uv_handle_t *h)
{
	ks_conn_unref((ks_conn_t *)h);
}

static void conn_close(ks_conn_t *c)
{
	ks_srv_t *srv = c->srv;

	if (c->state == CONN_CLOSED)
		return;
	c->state = CONN_CLOSED;
	if (c->prev)
		c->prev->next = c->next;
	else
		srv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	srv->nconns--;
	uv_close((uv_handle_t *)&c->pipe, on_close);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
	ks_conn_t *c = req->data;

	free(req);
	conn_close(c);
}

int ks_conn_live(const ks_conn_t *c)
{
	return c->state == CONN_OPEN || c->state == CONN_DRAINING;
}

void ks_conn_settle(ks_conn_t *c)
{
	uv_shutdown_t *req;

	if (c->state != CONN_DRAINING || c->pending > 0)
		return;
	c->state = CONN_SHUTTING;
	req = malloc(sizeof *req);
	if (!req) {
		conn_close(c);
		return;
	}
	req->data = c;
	if (uv_shutdown(req, (uv_stream_t *)&c->pipe, on_shutdown) != 0) {
		free(req);
		conn_close(c);
	}
}

/* Stops reading; the requests already read are still answered, then the
 * queued replies are flushed and the connection closes (see the states in
 * internal.h). */
static void conn_drain(ks_conn_t *c)
{
	if (c->state != CONN_OPEN)
		return;
	c->state = CONN_DRAINING;
	if (c->reading)
		uv_read_stop((uv_stream_t *)&c->pipe);
	c->reading = 0;
	ks_conn_settle(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	ks_conn_t *c = (ks_conn_t *)h;

	if (ks_buf_reserve(&c->in, READ_CHUNK) != KS_OK) {
		buf->base = NULL;
		buf->len = 0;
		return;
	}
	buf->base = c->in.data + c->in.len;
	buf->len = c->in.cap - c->in.len - 1;
}

static void on_write(uv_write_t *req, int status)
{
	ks_wreq_t *w = (ks_wreq_t *)req;
	ks_conn_t *c = w->conn;

	if (w->art)
		ks_artifact_unref(w->art);
	free(w);
	if (status < 0) {
		conn_close(c);
		return;
	}
	/* Backpressure: reading resumes once the queue has drained by half. */
	if (c->state == CONN_OPEN && !c->reading && !c->srv->stopping &&
	    c->pipe.write_queue_size < KS_MAX_WRITE_QUEUE / 2)
		conn_resume(c);
}

/*
 * Sends c->out (prefix + header, already complete) and, unless NULL, the
 * artifact's bytes as payload.  Tries a synchronous write first; whatever
 * the socket does not take is queued with a copy of the header bytes and
 * a reference on the artifact.
 */
void ks_reply_send(ks_conn_t *c, ks_artifact_t *art)
{
	uv_buf_t bufs[2];
	size_t total, hdr = c->out.len, plen = art ? art->len : 0;
	ssize_t n;
	ks_wreq_t *w;
	size_t hdr_left, art_off;
	int nb = 1;

	if (!ks_conn_live(c))
		return;
	bufs[0] = uv_buf_init(c->out.data, (unsigned)hdr);
	if (plen) {
		bufs[1] = uv_buf_init((char *)art->bytes, (unsigned)plen);
		nb = 2;
	}
	total = hdr + plen;
	n = uv_try_write((uv_stream_t *)&c->pipe, bufs, nb);
	if (n == (ssize_t)total)
		return;
	if (n < 0 && n != UV_EAGAIN) {
		conn_close(c);
		return;
	}
	if (n < 0)
		n = 0;
	hdr_left = (size_t)n < hdr ? hdr - (size_t)n : 0;
	art_off = (size_t)n > hdr ? (size_t)n - hdr : 0;
	w = malloc(sizeof *w + hdr_left);
	if (!w) {
		conn_close(c);
		return;
	}
	w->conn = c;
	w->hdr_len = hdr_left;
	w->art_off = art_off;
	w->art = NULL;
	memcpy(w->hdr, c->out.data + (hdr - hdr_left), hdr_left);
	nb = 0;
	if (hdr_left)
		bufs[nb++] = uv_buf_init(w->hdr, (unsigned)hdr_left);
	if (plen > art_off) {
		w->art = art;
		ks_artifact_ref(art);
		bufs[nb++] = uv_buf_init((char *)art->bytes + art_off,
		    (unsigned)(plen - art_off));
	}
	if (uv_write(&w->req, (uv_stream_t *)&c->pipe, bufs, nb,
	    on_write) != 0) {
		if (w->art)
			ks_artifact_unref(w->art);
		free(w);
		conn_close(c);
		return;
	}
	if (c->pipe.write_queue_size > KS_MAX_WRITE_QUEUE && c->reading) {
		uv_read_stop((uv_stream_t *)&c->pipe);
		c->reading = 0;
	}
}

/* Starts c->out with room for the frame prefix and the reply's id (no
 * printf on the hit path). */
void ks_reply_begin(ks_conn_t *c, int has_id, uint64_t id)
{
	static const char zero[KS_FRAME_PREFIX];
	char digits[24], *p = digits + sizeof digits;

	ks_buf_reset(&c->out);
	ks_buf_append(&c->out, zero, sizeof zero);
	if (!has_id) {
		ks_buf_append(&c->out, "{\"ok\":true", 10);
		return;
	}
	do {
		*--p = (char)('0' + id % 10);
		id /= 10;
	} while (id);
	ks_buf_append(&c->out, "{\"id\":", 6);
	ks_buf_append(&c->out, p, (size_t)(digits + sizeof digits - p));
	ks_buf_append(&c->out, ",\"ok\":true", 10);
}

/* Closes the JSON object and fills in the prefix. */
void ks_reply_end(ks_conn_t *c, size_t payload_len)
{
	ks_buf_puts(&c->out, "}");
	ks_frame_prefix((uint8_t *)c->out.data,
	    (uint32_t)(c->out.len - KS_FRAME_PREFIX), (uint32_t)payload_len);
}

void ks_reply_err(ks_conn_t *c, int has_id, uint64_t id, int code,
    const char *msg)
{
	static const char zero[KS_FRAME_PREFIX];

	ks_buf_reset(&c->out);
	ks_buf_append(&c->out, zero, sizeof zero);
	ks_reply_error(&c->out, has_id, id, code, msg);
	ks_frame_prefix((uint8_t *)c->out.data,
	    (uint32_t)(c->out.len - KS_FRAME_PREFIX), 0);
	ks_reply_send(c, NULL);
}

/* An error answer to a request that was refused (bad input, limits),
 * counted in stats as `errors`; compile failures count as `failures`. */
static void reject(ks_conn_t *c, int has_id, uint64_t id, int code,
    const char *msg)
{
	c->srv->n.bad_requests++;
	ks_reply_err(c, has_id, id, code, msg);
}

static void reply_artifact(ks_conn_t *c, int has_id, uint64_t id,
    const char *source, ks_artifact_t *a, int meta_only)
{
	ks_reply_begin(c, has_id, id);
	ks_buf_puts(&c->out, ",\"source\":\"");
	ks_buf_puts(&c->out, source);
	ks_buf_puts(&c->out, "\",");
	ks_buf_append(&c->out, a->meta, a->meta_len);
	ks_reply_end(c, meta_only ? 0 : a->len);
	ks_reply_send(c, meta_only ? NULL : a);
}

/* ---- stats and hello ---- */

static void json_counter(ks_buf_t *b, const char *name, uint64_t v)
{
	ks_buf_printf(b, ",\"%s\":%" PRIu64, name, v);
}

static void handle_stats(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = c->srv;
	ks_store_stats_t ss;
	ks_flight_t *f, *tmp;
	uint64_t now = ks_now_ns();
	int first = 1;

	memset(&ss, 0, sizeof ss);
	ks_store_stats(srv->store, &ss);
	ks_reply_begin(c, req->has_id, req->id);
	ks_buf_printf(&c->out, ",\"server\":\"kspecd %s\",\"uptime_s\":%.3f",
	    KS_SERVER_VERSION, (double)(now - srv->started_ns) / 1e9);
	json_counter(&c->out, "requests", srv->n.requests);
	json_counter(&c->out, "gets", srv->n.gets);
	json_counter(&c->out, "hits_memory", srv->n.hits_memory);
	json_counter(&c->out, "hits_disk", srv->n.hits_disk);
	json_counter(&c->out, "compiles", srv->n.compiles);
	json_counter(&c->out, "joins", srv->n.joins);
	json_counter(&c->out, "failures", srv->n.failures);
	json_counter(&c->out, "errors", srv->n.bad_requests);
	json_counter(&c->out, "corrupt", srv->n.corrupt);
	json_counter(&c->out, "abandoned", srv->n.abandoned);
	json_counter(&c->out, "warms", srv->n.warms);
	json_counter(&c->out, "warm_items", srv->n.warm_items);
	json_counter(&c->out, "connections", (uint64_t)srv->nconns);
	json_counter(&c->out, "connections_total", srv->n.connections_total);
	ks_buf_printf(&c->out, ",\"compile_ms_total\":%.3f",
	    (double)srv->n.compile_ns_total / 1e6);
	ks_buf_printf(&c->out, ",\"hot\":{\"entries\":%zu,\"bytes\":%zu,"
	    "\"max_bytes\":%" PRIu64 "}", ks_hot_count(srv->hot),
	    ks_hot_bytes(srv->hot), srv->cfg.hot_bytes);
	ks_buf_printf(&c->out, ",\"store\":{\"path\":");
	ks_buf_json_str(&c->out, srv->cfg.store_path);
	ks_buf_printf(&c->out, ",\"entries\":%" PRIu64 ",\"bytes\":%" PRIu64
	    ",\"max_bytes\":%" PRIu64 ",\"evicted\":%" PRIu64
	    ",\"corrupt\":%" PRIu64 ",\"schema_version\":%d}", ss.entries,
	    ss.bytes, ss.max_bytes, ss.evicted, ss.corrupt,
	    ss.schema_version);
	ks_buf_printf(&c->out, ",\"queue_depth\":%u,\"inflight\":[",
	    HASH_COUNT(srv->flights));
	HASH_ITER(hh, srv->flights, f, tmp) {
		char hex[KS_HASH_HEX];

		ks_hash_hex(&f->key, hex);
		ks_buf_printf(&c->out, "%s{\"key\":\"%s\",\"kernel\":\"%s\","
		    "\"backend\":\"%s\",\"state\":\"%s\",\"waiters\":%d,"
		    "\"priority\":\"%s\",\"age_ms\":%.1f}", first ? "" : ",",
		    hex, f->get.spec.def->name, f->get.backend->name,
		    __atomic_load_n(&f->running, __ATOMIC_RELAXED) ?
		    "compiling" : "queued", f->nwaiters,
		    f->prio == KS_PRIO_GET ? "get" : "warm",
		    (double)(now - f->started_ns) / 1e6);
		first = 0;
	}
	ks_buf_puts(&c->out, "]");
	ks_reply_end(c, 0);
	ks_reply_send(c, NULL);
}

/* A backend without an "auto" target (cuda): its explicit targets, and
 * the compiler identity for the newest of them. */
static void hello_targets(ks_conn_t *c, const ks_backend_t *be)
{
	char names[64][KS_MAX_NAME + 1];
	ks_buf_t id;
	int i, n = be->targets(names, 64);

	if (n <= 0)
		return;
	ks_buf_puts(&c->out, ",\"target\":null,\"targets\":[");
	for (i = 0; i < n; i++) {
		ks_buf_puts(&c->out, i ? "," : "");
		ks_buf_json_str(&c->out, names[i]);
	}
	ks_buf_puts(&c->out, "]");
	ks_buf_init(&id);
	if (be->identity(names[n - 1], &id) == KS_OK && id.data) {
		ks_buf_puts(&c->out, ",\"compiler\":");
		ks_buf_json_str(&c->out, id.data);
	}
	ks_buf_close(&id);
}

static void handle_hello(ks_conn_t *c, const ks_request_t *req)
{
	const ks_backend_t *const *bes;
	const ks_kernel_def_t *const *ks;
	char why[256], target[KS_MAX_NAME + 1];
	int i, nb, nk;

	ks_reply_begin(c, req->has_id, req->id);
	ks_buf_printf(&c->out, ",\"protocol\":%d,\"server\":\"kspecd %s\","
	    "\"backends\":[", KS_PROTO_VERSION, KS_SERVER_VERSION);
	bes = ks_backends(&nb);
	for (i = 0; i < nb; i++) {
		const ks_backend_t *be = bes[i];
		ks_buf_t id;

		why[0] = '\0';
		ks_buf_printf(&c->out, "%s{\"name\":\"%s\",\"format\":\"%s\"",
		    i ? "," : "", be->name, be->default_format);
		if (be->available(why, sizeof why) != KS_OK) {
			ks_buf_puts(&c->out, ",\"available\":false,\"reason\":");
			ks_buf_json_str(&c->out, why);
			ks_buf_puts(&c->out, "}");
			continue;
		}
		ks_buf_puts(&c->out, ",\"available\":true");
		ks_buf_init(&id);
		if (be->resolve_target("auto", target, sizeof target, why,
		    sizeof why) == KS_OK && be->identity(target, &id) ==
		    KS_OK && id.data) {
			ks_buf_puts(&c->out, ",\"target\":");
			ks_buf_json_str(&c->out, target);
			ks_buf_puts(&c->out, ",\"compiler\":");
			ks_buf_json_str(&c->out, id.data);
		} else if (be->targets) {
			hello_targets(c, be);
		}
		ks_buf_close(&id);
		ks_buf_puts(&c->out, "}");
	}
	ks_buf_puts(&c->out, "],\"kernels\":[");
	ks = ks_kernels(&nk);
	for (i = 0; i < nk; i++) {
		ks_buf_puts(&c->out, i ? "," : "");
		ks_buf_json_str(&c->out, ks[i]->name);
	}
	ks_buf_puts(&c->out, "]");
	ks_reply_end(c, 0);
	ks_reply_send(c, NULL);
}

/* ---- compiles ---- */

void ks_srv_params_json(ks_buf_t *m, const ks_ir_kernel_t *k)
{
	int i, first = 1;

	ks_buf_puts(m, ",\"params\":[");
	for (i = 0; i < k->nparams; i++) {
		const ks_ir_param_t *p = &k->params[i];

		if (p->bound)
			continue;
		ks_buf_puts(m, first ? "{\"name\":" : ",{\"name\":");
		ks_buf_json_str(m, p->name);
		if (p->kind == KS_PARAM_BUFFER)
			ks_buf_printf(m, ",\"kind\":\"buffer\",\"dtype\":\"%s\","
			    "\"access\":\"%s\"}", p->type == KS_TY_I32 ? "i32" :
			    ks_dtype_name(p->dtype),
			    p->access == (KS_ACCESS_READ | KS_ACCESS_WRITE) ?
			    "readwrite" : p->access == KS_ACCESS_WRITE ?
			    "write" : "read");
		else
			ks_buf_printf(m, ",\"kind\":\"scalar\",\"dtype\":\"%s\"}",
			    ks_ty_name(p->type));
		first = 0;
	}
	ks_buf_puts(m, "]");
}

/* The reply fields of an artifact, stored with it (see store.h). */
static int build_meta(ks_buf_t *m, const ks_get_t *g, const ks_ir_kernel_t *k,
    const ks_jit_artifact_t *ja)
{
	char key[KS_HASH_HEX], sum[KS_HASH_HEX];
	ks_buf_t grid;
	ks_hash_t h;
	int i, first;

	ks_hash_hex(&g->key, key);
	ks_hash(ja->bytes, ja->len, &h);
	ks_hash_hex(&h, sum);
	ks_buf_printf(m, "\"key\":\"%s\",\"artifact\":\"%s\",\"kernel\":\"%s\","
	    "\"variant\":\"%s\",\"backend\":\"%s\",\"target\":\"%s\","
	    "\"dtype\":\"%s\",\"mode\":\"%s\",\"format\":\"%s\","
	    "\"entry\":\"%s\",\"bytes\":%zu", key, sum, g->spec.def->name,
	    k->variant, g->backend->name, g->target,
	    ks_dtype_name(g->spec.dtype),
	    g->spec.mode == KS_MODE_FAST ? "fast" : "exact", ja->format,
	    k->entry, ja->len);
	ks_buf_puts(m, ",\"guard\":{");
	for (i = 0, first = 1; i < g->spec.ndims; i++) {
		if (!g->spec.dims[i].is_const)
			continue;
		ks_buf_printf(m, "%s\"%s\":%" PRId64, first ? "" : ",",
		    g->spec.dims[i].name, g->spec.dims[i].value);
		first = 0;
	}
	ks_buf_puts(m, "},\"dynamic\":[");
	for (i = 0, first = 1; i < g->spec.ndims; i++) {
		if (g->spec.dims[i].is_const)
			continue;
		ks_buf_printf(m, "%s\"%s\"", first ? "" : ",",
		    g->spec.dims[i].name);
		first = 0;
	}
	ks_buf_puts(m, "]");
	ks_srv_params_json(m, k);
	/* groups: a number, or a C expression of the dynamic dimensions.
	 * GPUs launch grid x block threads (one block per work-group, one
	 * thread per lane); cpu hosts run groups [0, groups). */
	ks_buf_init(&grid);
	if (k->grid->kind == KS_X_CONST) {
		ks_buf_printf(&grid, "%" PRId64, k->grid->i);
	} else {
		ks_buf_t e;

		ks_buf_init(&e);
		ks_ir_print_c_expr(k, k->grid, &e);
		ks_buf_json_str(&grid, e.data ? e.data : "");
		ks_buf_close(&e);
	}
	ks_buf_printf(m, ",\"launch\":{\"groups\":%s,\"lanes\":%d,"
	    "\"grid\":[%s,1,1],\"block\":[%d,1,1]}", grid.data, k->nlanes,
	    grid.data, k->nlanes);
	ks_buf_close(&grid);
	ks_buf_printf(m, ",\"compile_ms\":%.3f,\"compiler\":", ja->compile_ms);
	return ks_buf_json_str(m, g->identity);
}

/* Runs in a worker thread. */
static void work_compile(uv_work_t *w)
{
	ks_flight_t *f = w->data;
	ks_ir_kernel_t *k = NULL;
	ks_jit_artifact_t ja;
	ks_buf_t meta;
	uint64_t t0 = ks_now_ns();
	int rc;

	__atomic_store_n(&f->running, 1, __ATOMIC_RELAXED);
	memset(&ja, 0, sizeof ja);
	ks_buf_init(&meta);
	rc = ks_specialize(&f->get.spec, &k, f->errmsg, sizeof f->errmsg);
	if (rc)
		goto out;
	rc = f->get.backend->compile(k, f->get.target, f->get.format, &ja,
	    f->errmsg, sizeof f->errmsg);
	if (rc)
		goto out;
	rc = build_meta(&meta, &f->get, k, &ja);
	if (rc)
		goto out;
	f->artifact = ks_artifact_new(&f->key, meta.data, ja.bytes, ja.len);
	if (!f->artifact) {
		rc = KS_E_NOMEM;
		goto out;
	}
	/* The store is the second tier; failing to write it still serves. */
	if (ks_store_put(f->srv->store, f->artifact) != KS_OK)
		ks_log(KS_LOG_WARN, "store: could not persist an artifact");
out:
	f->err = rc;
	if (rc && !f->errmsg[0])
		snprintf(f->errmsg, sizeof f->errmsg, "%s", ks_strerror(rc));
	f->compile_ms = (double)(ks_now_ns() - t0) / 1e6;
	ks_buf_close(&meta);
	ks_jit_artifact_close(&ja);
	if (k)
		ks_ir_free(k);
}

/* ---- the compile queue ---- */

static void after_compile(uv_work_t *w, int status);

static void queue_push(ks_srv_t *srv, ks_flight_t *f)
{
	int p = f->prio;

	f->qnext = NULL;
	f->qprev = srv->queue_tail[p];
	if (f->qprev)
		f->qprev->qnext = f;
	else
		srv->queue[p] = f;
	srv->queue_tail[p] = f;
}

static void queue_remove(ks_srv_t *srv, ks_flight_t *f)
{
	int p = f->prio;

	if (f->qprev)
		f->qprev->qnext = f->qnext;
	else
		srv->queue[p] = f->qnext;
	if (f->qnext)
		f->qnext->qprev = f->qprev;
	else
		srv->queue_tail[p] = f->qprev;
	f->qprev = f->qnext = NULL;
}

static void flight_finish(ks_srv_t *srv, ks_flight_t *f);

/* 1 while some waiter of F can still receive its reply. */
static int flight_wanted(const ks_flight_t *f)
{
	const ks_waiter_t *wt;

	for (wt = f->waiters; wt; wt = wt->next)
		if (ks_conn_live(wt->warm ? wt->warm->conn : wt->conn))
			return 1;
	return 0;
}

/*
 * Hands queued flights to the thread pool while a compile slot is free,
 * gets before warms.  At most cfg.workers flights are submitted at once,
 * so a warm holds at most one slot a get could have used: a get waits for
 * no more than one running compile (DESIGN.md section 12).
 */
void ks_srv_dispatch(ks_srv_t *srv)
{
	ks_flight_t *f;
	int p, rc;

	while (srv->slots_busy < srv->cfg.workers) {
		for (p = 0; p < KS_PRIO_COUNT && !srv->queue[p]; p++)
			;
		if (p == KS_PRIO_COUNT)
			return;
		f = srv->queue[p];
		queue_remove(srv, f);
		if (!flight_wanted(f)) {
			/* Every client of it went away: compile nothing. */
			f->err = KS_E_SHUTTING_DOWN;
			snprintf(f->errmsg, sizeof f->errmsg, "no client waits "
			    "for this compile any more");
			srv->n.abandoned++;
			flight_finish(srv, f);
			continue;
		}
		f->submitted = 1;
		srv->slots_busy++;
		rc = uv_queue_work(srv->loop, &f->work, work_compile,
		    after_compile);
		if (rc != 0) {
			f->err = KS_E_INTERNAL;
			snprintf(f->errmsg, sizeof f->errmsg, "cannot queue "
			    "compile: %s", uv_strerror(rc));
			after_compile(&f->work, 0);
		}
	}
}

/* Replies to every waiter of F and frees it.  Loop thread. */
static void flight_finish(ks_srv_t *srv, ks_flight_t *f)
{
	ks_waiter_t *wt, *next;
	uint64_t gets;

	HASH_DEL(srv->flights, f);
	srv->n.compile_ns_total += ks_now_ns() - f->started_ns;
	if (!f->err) {
		ks_hot_put(srv->hot, f->artifact);
	} else if (f->err != KS_E_SHUTTING_DOWN) {     /* not a cancel */
		srv->n.failures++;
		ks_log(KS_LOG_WARN, "compile of %s failed: %s: %s",
		    f->get.spec.def->name, ks_err_name(f->err), f->errmsg);
	}
	/* Every get that missed is recorded, so production's misses can be
	 * exported as a warm manifest (warm items are replays, not asks). */
	for (wt = f->waiters, gets = 0; wt; wt = wt->next)
		gets += wt->warm == NULL;
	if (gets) {
		ks_buf_t spec;

		ks_buf_init(&spec);
		if (ks_spec_json(&f->get, &spec) == KS_OK &&
		    ks_store_record_miss(srv->store, spec.data, gets) != KS_OK)
			ks_log(KS_LOG_WARN, "store: could not record a miss");
		ks_buf_close(&spec);
	}
	for (wt = f->waiters; wt; wt = next) {
		const char *source = wt->joined ? "joined" : "compiled";

		next = wt->next;
		if (wt->warm) {
			ks_warm_item_done(wt->warm, wt->index, f->err,
			    f->errmsg, source, f->artifact);
		} else {
			if (ks_conn_live(wt->conn)) {
				if (f->err)
					ks_reply_err(wt->conn, wt->has_id,
					    wt->id, f->err, f->errmsg);
				else
					reply_artifact(wt->conn, wt->has_id,
					    wt->id, source, f->artifact,
					    wt->meta_only);
			}
			wt->conn->pending--;
			ks_conn_settle(wt->conn);
			ks_conn_unref(wt->conn);
		}
		free(wt);
	}
	if (f->artifact)
		ks_artifact_unref(f->artifact);
	free(f);
}

/* Runs on the loop thread after work_compile, or with UV_ECANCELED. */
static void after_compile(uv_work_t *w, int status)
{
	ks_flight_t *f = w->data;
	ks_srv_t *srv = f->srv;

	srv->slots_busy--;
	if (status == UV_ECANCELED) {
		f->err = KS_E_SHUTTING_DOWN;
		snprintf(f->errmsg, sizeof f->errmsg, "daemon stopped before "
		    "this compile started");
	}
	flight_finish(srv, f);
	if (!srv->stopping)
		ks_srv_dispatch(srv);
	maybe_finish(srv);
}

ks_flight_t *ks_flight_join(ks_srv_t *srv, const ks_get_t *g, int prio,
    int *joined)
{
	ks_flight_t *f;

	HASH_FIND(hh, srv->flights, &g->key, sizeof g->key, f);
	if (f) {
		*joined = 1;
		if (prio < f->prio && !f->submitted) {
			queue_remove(srv, f);
			f->prio = prio;
			queue_push(srv, f);
		}
		return f;
	}
	if (HASH_COUNT(srv->flights) >= KS_MAX_FLIGHTS)
		return NULL;
	f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	*joined = 0;
	f->key = g->key;
	f->get = *g;
	f->srv = srv;
	f->prio = prio;
	f->started_ns = ks_now_ns();
	f->work.data = f;
	HASH_ADD(hh, srv->flights, key, sizeof f->key, f);
	srv->n.compiles++;
	queue_push(srv, f);
	return f;
}

int ks_flight_wait(ks_flight_t *f, ks_waiter_t *w)
{
	ks_waiter_t *copy = malloc(sizeof *copy);

	if (!copy)
		return KS_E_NOMEM;
	*copy = *w;
	copy->next = f->waiters;
	f->waiters = copy;
	f->nwaiters++;
	if (!copy->warm) {
		copy->conn->refs++;
		copy->conn->pending++;
	}
	return KS_OK;
}

static void handle_get(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = c->srv;
	ks_waiter_t wt;
	ks_artifact_t *a;
	ks_flight_t *f;
	ks_get_t g;
	char err[512];
	int rc, joined;

	srv->n.gets++;
	err[0] = '\0';
	rc = ks_srv_normalize(srv, &req->get, &g, err, sizeof err);
	if (rc) {
		reject(c, req->has_id, req->id, rc, err);
		return;
	}
	a = ks_hot_get(srv->hot, &g.key);
	if (a) {
		srv->n.hits_memory++;
		ks_store_touch(srv->store, &g.key);
		reply_artifact(c, req->has_id, req->id, "memory", a,
		    req->get.meta_only);
		return;
	}
	rc = ks_store_get(srv->store, &g.key, &a);
	if (rc == KS_OK) {
		srv->n.hits_disk++;
		ks_store_touch(srv->store, &g.key);
		ks_hot_put(srv->hot, a);
		reply_artifact(c, req->has_id, req->id, "disk", a,
		    req->get.meta_only);
		ks_artifact_unref(a);
		return;
	}
	if (rc == KS_E_CORRUPT) {
		char hex[KS_HASH_HEX];

		srv->n.corrupt++;
		ks_hash_hex(&g.key, hex);
		ks_log(KS_LOG_WARN, "store: entry %s failed its checksum; "
		    "removed, recompiling", hex);
	} else if (rc != KS_E_NOT_FOUND) {
		ks_log(KS_LOG_WARN, "store: read failed (%s); compiling",
		    ks_err_name(rc));
	}

	if (srv->stopping) {
		reject(c, req->has_id, req->id, KS_E_SHUTTING_DOWN,
		    "daemon is shutting down");
		return;
	}
	if (c->pending >= KS_MAX_INFLIGHT_PER_CONN) {
		snprintf(err, sizeof err, "more than %d requests waiting on "
		    "compiles on this connection", KS_MAX_INFLIGHT_PER_CONN);
		reject(c, req->has_id, req->id, KS_E_BUSY, err);
		return;
	}
	memset(&wt, 0, sizeof wt);
	wt.conn = c;
	wt.has_id = req->has_id;
	wt.id = req->id;
	wt.meta_only = req->get.meta_only;
	f = ks_flight_join(srv, &g, KS_PRIO_GET, &joined);
	wt.joined = joined;
	if (!f && HASH_COUNT(srv->flights) >= KS_MAX_FLIGHTS) {
		snprintf(err, sizeof err, "%d distinct compiles are queued; "
		    "try again later", KS_MAX_FLIGHTS);
		reject(c, req->has_id, req->id, KS_E_BUSY, err);
		return;
	}
	if (!f || ks_flight_wait(f, &wt) != KS_OK) {
		ks_reply_err(c, req->has_id, req->id, KS_E_NOMEM,
		    "out of memory");
		if (f && !f->nwaiters && !joined) {
			queue_remove(srv, f);
			HASH_DEL(srv->flights, f);
			free(f);
		}
		return;
	}
	if (joined)
		srv->n.joins++;
	ks_srv_dispatch(srv);
}

/* ---- requests ---- */

static void handle_request(ks_conn_t *c, const char *hdr, size_t len)
{
	ks_request_t req;
	char err[512];
	int rc;

	c->srv->n.requests++;
	err[0] = '\0';
	parse_arena.used = 0;
	parse_arena.active = 1;
	rc = ks_request_parse(hdr, len, &req, err, sizeof err);
	parse_arena.active = 0;
	if (rc) {
		reject(c, req.has_id, req.id, rc, err);
		/* A header that is not JSON at all: the client is not
		 * speaking the protocol; answer and close. */
		if (rc == KS_E_BAD_JSON)
			conn_drain(c);
		return;
	}
	switch (req.op) {
	case KS_OP_PING:
		ks_reply_begin(c, req.has_id, req.id);
		ks_buf_puts(&c->out, ",\"pong\":true");
		ks_reply_end(c, 0);
		ks_reply_send(c, NULL);
		break;
	case KS_OP_HELLO:
		handle_hello(c, &req);
		break;
	case KS_OP_STATS:
		handle_stats(c, &req);
		break;
	case KS_OP_GET:
		handle_get(c, &req);
		break;
	case KS_OP_KERNELS:
		ks_op_kernels(c, &req);
		break;
	case KS_OP_LIST:
		ks_op_list(c, &req);
		break;
	case KS_OP_EVICT:
		ks_op_evict(c, &req);
		break;
	case KS_OP_EXPLAIN:
		ks_op_explain(c, &req);
		break;
	case KS_OP_WARM:
		ks_op_warm(c, &req);
		break;
	case KS_OP_MISSES:
		ks_op_misses(c, &req);
		break;
	default:
		reject(c, req.has_id, req.id, KS_E_UNKNOWN_OP,
		    "unknown op");
	}
	ks_request_close(&req);
}

static void process_input(ks_conn_t *c)
{
	uint32_t hl, pl;
	size_t avail;
	char msg[128];
	int rc;

	while (c->state == CONN_OPEN) {
		avail = c->in.len - c->in_off;
		rc = ks_frame_peek((const uint8_t *)c->in.data + c->in_off,
		    avail, KS_MAX_HEADER, 0, &hl, &pl);
		if (rc == 1)
			break;
		if (rc < 0) {
			/* The stream cannot be resynchronized: answer, close. */
			snprintf(msg, sizeof msg, "bad frame: a request's header "
			    "length must be 1..%u and its payload length 0",
			    KS_MAX_HEADER);
			reject(c, 0, 0, rc, msg);
			conn_drain(c);
			return;
		}
		if (avail < KS_FRAME_PREFIX + (size_t)hl)
			break;
		handle_request(c, c->in.data + c->in_off + KS_FRAME_PREFIX,
		    hl);
		c->in_off += KS_FRAME_PREFIX + hl;
	}
	if (c->in_off == c->in.len) {
		c->in_off = 0;
		ks_buf_reset(&c->in);
	} else if (c->in_off > READ_CHUNK) {
		memmove(c->in.data, c->in.data + c->in_off,
		    c->in.len - c->in_off);
		c->in.len -= c->in_off;
		c->in_off = 0;
	}
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	ks_conn_t *c = (ks_conn_t *)s;

	if (nread == UV_EOF) {
		/* Half-close: the peer sends no more, but may still read the
		 * replies to what it sent. */
		conn_drain(c);
		return;
	}
	if (nread < 0) {
		conn_close(c);
		return;
	}
	if (nread == 0)
		return;
	c->in.len += (size_t)nread;
	c->in.data[c->in.len] = '\0';
	process_input(c);
}

static void conn_resume(ks_conn_t *c)
{
	if (uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) == 0)
		c->reading = 1;
	else
		conn_close(c);
}

/* Only our own uid (and root) may talk to the daemon. */
static int peer_allowed(ks_conn_t *c)
{
	struct ucred cred;
	socklen_t len = sizeof cred;
	uv_os_fd_t fd;

	if (uv_fileno((uv_handle_t *)&c->pipe, &fd) != 0)
		return 0;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
		return 0;
	return cred.uid == getuid() || cred.uid == 0;
}

static void on_connection(uv_stream_t *l, int status)
{
	ks_srv_t *srv = l->data;
	ks_conn_t *c;

	if (status < 0) {
		ks_log(KS_LOG_WARN, "accept: %s", uv_strerror(status));
		return;
	}
	c = calloc(1, sizeof *c);
	if (!c)
		return;
	c->srv = srv;
	c->refs = 1;
	ks_buf_init(&c->in);
	ks_buf_init(&c->out);
	uv_pipe_init(srv->loop, &c->pipe, 0);
	if (uv_accept(l, (uv_stream_t *)&c->pipe) != 0) {
		c->state = CONN_CLOSED;
		uv_close((uv_handle_t *)&c->pipe, on_close);
		return;
	}
	c->next = srv->conns;
	if (srv->conns)
		srv->conns->prev = c;
	srv->conns = c;
	srv->nconns++;
	srv->n.connections_total++;
	if (!peer_allowed(c)) {
		ks_log(KS_LOG_WARN, "refused a connection from another user");
		conn_close(c);
		return;
	}
	if (srv->nconns > srv->max_conns || srv->stopping) {
		ks_reply_err(c, 0, 0, srv->stopping ? KS_E_SHUTTING_DOWN :
		    KS_E_BUSY, srv->stopping ? "daemon is shutting down" :
		    "too many connections");
		conn_drain(c);
		return;
	}
	conn_resume(c);
}

/* ---- lifecycle ---- */

static void on_flush(uv_timer_t *t)
{
	ks_srv_t *srv = t->data;

	ks_store_flush(srv->store);
}

static void on_drain_deadline(uv_timer_t *t)
{
	ks_srv_t *srv = t->data;
	ks_conn_t *c, *next;

	for (c = srv->conns; c; c = next) {
		next = c->next;
		conn_close(c);
	}
}

/* Once no compile is left at shutdown: every connection drains (its
 * queued replies go out) within a deadline, then the loop ends. */
static void maybe_finish(ks_srv_t *srv)
{
	ks_conn_t *c, *next;

	if (!srv->stopping || srv->flights)
		return;
	for (c = srv->conns; c; c = next) {
		next = c->next;
		conn_drain(c);
	}
	if (!uv_is_closing((uv_handle_t *)&srv->flush_timer))
		uv_close((uv_handle_t *)&srv->flush_timer, NULL);
	if (!uv_is_closing((uv_handle_t *)&srv->stop_async))
		uv_close((uv_handle_t *)&srv->stop_async, NULL);
	if (srv->conns && !uv_is_active((uv_handle_t *)&srv->drain_timer)) {
		uv_timer_start(&srv->drain_timer, on_drain_deadline, 5000, 0);
		uv_unref((uv_handle_t *)&srv->drain_timer);
	}
}

static void on_stop(uv_async_t *a)
{
	ks_srv_t *srv = a->data;
	ks_flight_t *f, *tmp;
	ks_conn_t *c;

	if (srv->stopping)
		return;
	ks_log(KS_LOG_INFO, "signal %d: stopping (%u compiles in flight)",
	    __atomic_load_n(&srv->stop_signal, __ATOMIC_ACQUIRE),
	    HASH_COUNT(srv->flights));
	srv->stopping = 1;
	uv_close((uv_handle_t *)&srv->listener, NULL);
	ks_sock_unlink(srv->cfg.socket_path);
	for (c = srv->conns; c; c = c->next) {
		if (c->reading) {
			uv_read_stop((uv_stream_t *)&c->pipe);
			c->reading = 0;
		}
	}
	/* Compiles not yet started are failed with E_SHUTTING_DOWN (those
	 * in the thread pool's queue through UV_ECANCELED); running ones
	 * finish and are answered. */
	HASH_ITER(hh, srv->flights, f, tmp) {
		if (f->submitted) {
			uv_cancel((uv_req_t *)&f->work);
			continue;
		}
		queue_remove(srv, f);
		f->err = KS_E_SHUTTING_DOWN;
		snprintf(f->errmsg, sizeof f->errmsg, "daemon stopped before "
		    "this compile started");
		flight_finish(srv, f);
	}
	maybe_finish(srv);
}

/* Waits for the first SIGINT/SIGTERM and wakes the loop; later signals
 * stay pending and blocked while the daemon finishes its work. */
static void *signal_main(void *p)
{
	ks_srv_t *srv = p;
	sigset_t set;
	int sig = 0;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	while (sigwait(&set, &sig) != 0)
		;
	__atomic_store_n(&srv->stop_signal, sig, __ATOMIC_RELEASE);
	uv_async_send(&srv->stop_async);
	/* A second signal while the daemon finishes its work (a compile can
	 * take long) stops it at once.  The store stays consistent: sqlite
	 * survives a killed writer. */
	while (sigwait(&set, &sig) != 0)
		;
	ks_log(KS_LOG_WARN, "signal %d again: exiting without finishing", sig);
	_exit(1);
}

/* Raises the soft RLIMIT_NOFILE to the hard one and sizes the connection
 * limit below it: running out of descriptors inside a compile makes GCC's
 * driver exit the process. */
static void raise_fd_limit(ks_srv_t *srv)
{
	struct rlimit rl;
	long room;

	srv->max_conns = KS_MAX_CONNECTIONS;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	room = rl.rlim_cur == RLIM_INFINITY ? KS_MAX_CONNECTIONS :
	    (long)rl.rlim_cur - KS_FD_RESERVE;
	if (room < srv->max_conns)
		srv->max_conns = room < 1 ? 1 : (int)room;
}

/* Resolves "auto" and reads the compiler identity of every available
 * backend now, so the first request does not pay for it on the loop
 * thread (the cpu identity runs an empty libgccjit compile). */
static int warm_identities(ks_srv_t *srv, char *err, size_t errlen)
{
	const ks_backend_t *const *all;
	char why[256];
	int i, n;

	all = ks_backends(&n);
	for (i = 0; i < n; i++) {
		if (all[i]->available(why, sizeof why) != KS_OK)
			continue;
		if (ks_srv_ident_warm(srv, all[i]) != KS_OK)
			ks_log(KS_LOG_DEBUG, "backend %s: no default target",
			    all[i]->name);
	}
	(void)err;
	(void)errlen;
	return KS_OK;
}

static int init_fingerprints(ks_srv_t *srv)
{
	const ks_kernel_def_t *const *all;
	int i, n;

	all = ks_kernels(&n);
	if (n > (int)(sizeof srv->fingerprints / sizeof srv->fingerprints[0]))
		return KS_E_INTERNAL;
	for (i = 0; i < n; i++) {
		const ks_hash_t *h = ks_kernel_fingerprint(all[i]);

		if (!h)
			return KS_E_INTERNAL;
		srv->fingerprints[i] = *h;
	}
	return KS_OK;
}

int ks_server_run(const ks_server_config_t *cfg)
{
	ks_srv_t srv;
	ks_ident_t *id, *next;
	char err[1024];
	char nthreads[16];
	sigset_t sigs;
	int fd, rc;

	memset(&srv, 0, sizeof srv);
	srv.cfg = *cfg;
	/* Before any thread exists, so that every thread inherits it. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	srv.lock_fd = -1;
	srv.store_lock_fd = -1;
	srv.started_ns = ks_now_ns();
	signal(SIGPIPE, SIG_IGN);

	/* libuv reads the pool size once, at the first queued work. */
	snprintf(nthreads, sizeof nthreads, "%d", cfg->workers);
	setenv("UV_THREADPOOL_SIZE", nthreads, 1);

	arena_install();
	rc = ks_base_init();
	if (rc == KS_OK)
		rc = init_fingerprints(&srv);
	if (rc) {
		ks_log(KS_LOG_ERROR, "cannot initialize: %s", ks_strerror(rc));
		return rc;
	}
	raise_fd_limit(&srv);
	/* The socket lock first: a second instance must fail before it
	 * touches the store.  The store's own lock then keeps a daemon on
	 * another socket off the same store (one writer, DESIGN.md 11). */
	rc = ks_sock_listen(cfg->socket_path, &fd, &srv.lock_fd, err,
	    sizeof err);
	if (rc) {
		ks_log(KS_LOG_ERROR, "%s", err);
		return rc;
	}
	rc = ks_make_parent(cfg->store_path, err, sizeof err);
	if (rc == KS_OK)
		rc = ks_lock_beside(cfg->store_path, &srv.store_lock_fd, err,
		    sizeof err);
	if (rc == KS_OK)
		rc = ks_store_open(cfg->store_path, cfg->max_bytes, &srv.store,
		    err, sizeof err);
	if (rc == KS_OK && !(srv.hot = ks_hot_new(cfg->hot_bytes)))
		rc = KS_E_NOMEM;
	if (rc == KS_OK)
		rc = warm_identities(&srv, err, sizeof err);
	if (rc) {
		ks_log(KS_LOG_ERROR, "store %s: %s", cfg->store_path, err);
		if (srv.store)
			ks_store_close(srv.store);
		close(fd);
		ks_sock_unlink(cfg->socket_path);
		close(srv.lock_fd);
		if (srv.store_lock_fd >= 0)
			close(srv.store_lock_fd);
		return rc;
	}

	srv.loop = uv_default_loop();
	uv_pipe_init(srv.loop, &srv.listener, 0);
	srv.listener.data = &srv;
	uv_pipe_open(&srv.listener, fd);
	rc = uv_listen((uv_stream_t *)&srv.listener, 511, on_connection);
	if (rc) {
		ks_log(KS_LOG_ERROR, "listen: %s", uv_strerror(rc));
		return KS_E_IO;
	}
	uv_async_init(srv.loop, &srv.stop_async, on_stop);
	srv.stop_async.data = &srv;
	if (pthread_create(&srv.signal_thread, NULL, signal_main, &srv) != 0) {
		ks_log(KS_LOG_ERROR, "cannot start the signal thread");
		return KS_E_INTERNAL;
	}
	pthread_detach(srv.signal_thread);
	uv_timer_init(srv.loop, &srv.flush_timer);
	srv.flush_timer.data = &srv;
	uv_timer_init(srv.loop, &srv.drain_timer);
	srv.drain_timer.data = &srv;
	uv_timer_start(&srv.flush_timer, on_flush, FLUSH_INTERVAL_MS,
	    FLUSH_INTERVAL_MS);
	uv_unref((uv_handle_t *)&srv.flush_timer);

	ks_log(KS_LOG_INFO, "kspecd %s listening on %s, store %s, %d workers",
	    KS_SERVER_VERSION, cfg->socket_path, cfg->store_path,
	    cfg->workers);
	uv_run(srv.loop, UV_RUN_DEFAULT);
	uv_close((uv_handle_t *)&srv.drain_timer, NULL);
	uv_run(srv.loop, UV_RUN_DEFAULT);

	ks_store_close(srv.store);
	ks_hot_free(srv.hot);
	for (id = srv.idents; id; id = next) {
		next = id->next;
		free(id->identity);
		free(id);
	}
	uv_loop_close(srv.loop);
	close(srv.lock_fd);
	close(srv.store_lock_fd);
	ks_log(KS_LOG_INFO, "kspecd stopped");
	return KS_OK;
}
