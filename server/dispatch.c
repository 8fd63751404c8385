/*
 * Requests: the parse of a header and the op table.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "dispatch.h"
#include "ops.h"

/*
 * cJSON allocates a node per JSON value.  On the hit path those
 * allocations come from one arena, reset per request, instead of malloc:
 * the hooks serve the loop thread while a parse is under way and fall back
 * to malloc/free everywhere else (other threads, a parse that outgrows the
 * arena).  free() of an arena pointer is a no-op; the arena is reset
 * before the next parse.  The daemon owns its process, so installing the
 * global cJSON hooks is its call (libkspec never does).  The owner is set
 * before the daemon starts a thread, and the hooks compare it first: the
 * other threads (the store writer's, libuv's pool) never read what the
 * loop thread writes (active, used).
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

	if (pthread_equal(pthread_self(), parse_arena.owner) &&
	    parse_arena.active && need >= n && need <= PARSE_ARENA_BYTES -
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

void ks_dispatch_init(void)
{
	cJSON_Hooks hooks = { arena_malloc, arena_free };

	parse_arena.owner = pthread_self();
	cJSON_InitHooks(&hooks);
}

static ks_op_fn *const op_table[KS_OP_COUNT_] = {
	[KS_OP_PING] = ks_op_ping,
	[KS_OP_HELLO] = ks_op_hello,
	[KS_OP_GET] = ks_op_get,
	[KS_OP_STATS] = ks_op_stats,
	[KS_OP_KERNELS] = ks_op_kernels,
	[KS_OP_LIST] = ks_op_list,
	[KS_OP_EVICT] = ks_op_evict,
	[KS_OP_EXPLAIN] = ks_op_explain,
	[KS_OP_WARM] = ks_op_warm,
	[KS_OP_MISSES] = ks_op_misses,
	[KS_OP_IMPORT] = ks_op_import,
	[KS_OP_READY] = ks_op_ready,
	[KS_OP_DEPLOY] = ks_op_deploy,
	[KS_OP_UNDEPLOY] = ks_op_undeploy,
	[KS_OP_DEPLOYMENTS] = ks_op_deployments,
	[KS_OP_CANCEL] = ks_op_cancel,
	[KS_OP_AUDIT] = ks_op_audit,
	[KS_OP_CANARY] = ks_op_canary,
};

/* The debug line of the request just answered, unless it waits. */
static void req_log_end(ks_srv_t *srv)
{
	ks_req_log_t *l = &srv->rlog;

	if (l->on && !l->waiting)
		ks_req_log_line(l->op, l->has_key ? &l->key : NULL, l->source,
		    l->code, l->t0);
	l->on = 0;
}

/* The headers parked at once, all connections together. */
#define KS_PARKED_MAX_BYTES (16u << 20)

/*
 * Until this start's probe is in (daemon.c, "Start"), a request that
 * needs it waits, parked: its header is copied and dispatched again once
 * the probe is in.  Answered at once: ping, stats, kernels and list
 * (nothing of the compilers), hello and get under the saved probe's keys
 * (a get only when it hits: ks_op_get parks a miss).
 */
static int needs_probe(const ks_srv_t *srv, int op)
{
	switch (op) {
	case KS_OP_PING:
	case KS_OP_STATS:
	case KS_OP_KERNELS:
	case KS_OP_LIST:
		return 0;
	case KS_OP_HELLO:
	case KS_OP_GET:
		return srv->probe_state == KS_PROBE_NONE;
	default:
		return 1;
	}
}

void ks_srv_park(ks_conn_t *c, int op, int has_id, uint64_t id,
    int counted)
{
	ks_srv_t *srv = ks_srv_of(c);
	ks_parked_t *p;
	char err[160];

	if (c->pending >= KS_MAX_INFLIGHT_PER_CONN ||
	    ks_conn_user_waiting(c) >= KS_MAX_INFLIGHT_PER_USER ||
	    srv->parked_bytes + srv->req_len > KS_PARKED_MAX_BYTES) {
		snprintf(err, sizeof err, "too many requests waiting on this "
		    "%s while kspecd probes its compilers",
		    c->pending >= KS_MAX_INFLIGHT_PER_CONN ? "connection" :
		    ks_conn_user_waiting(c) >= KS_MAX_INFLIGHT_PER_USER ?
		    "uid" : "daemon");
		ks_srv_reject_op(c, op, has_id, id, KS_E_BUSY, err);
		return;
	}
	p = malloc(sizeof *p + srv->req_len);
	if (!p) {
		ks_srv_reject_op(c, op, has_id, id, KS_E_NOMEM, "out of memory");
		return;
	}
	p->next = NULL;
	p->conn = c;
	p->counted = counted;
	p->len = srv->req_len;
	memcpy(p->hdr, srv->req_hdr, srv->req_len);
	*srv->parked_tail = p;
	srv->parked_tail = &p->next;
	srv->nparked++;
	srv->parked_bytes += p->len;
	srv->parked_total++;
	srv->rlog.waiting = 1;
	ks_conn_wait(c);
}

void ks_dispatch_unpark(ks_srv_t *srv, int code)
{
	ks_parked_t *p;

	while ((p = srv->parked)) {
		srv->parked = p->next;
		if (!srv->parked)
			srv->parked_tail = &srv->parked;
		srv->nparked--;
		srv->parked_bytes -= p->len;
		if (ks_conn_live(p->conn) && !code) {
			/* Counted when it came, as far as it got. */
			srv->replaying = p->counted;
			ks_dispatch_request(p->conn, p->hdr, p->len);
			srv->replaying = 0;
		} else if (ks_conn_live(p->conn)) {
			ks_request_t req;
			char err[64];
			int op;

			ks_request_parse(p->hdr, p->len, &req, err,
			    sizeof err);
			/* Counted as its op's error reply. */
			op = (unsigned)req.op < KS_OP_COUNT_ ? (int)req.op :
			    KS_OP_COUNT_;
			ks_srv_error_reply(p->conn, op, req.has_id, req.id,
			    code, ks_strerror(code));
			ks_request_close(&req);
		}
		ks_conn_done(p->conn);
		free(p);
	}
}

static inline void dispatch(ks_conn_t *c, const char *hdr, size_t len)
{
	ks_srv_t *srv = ks_srv_of(c);
	const ks_fast_entry_t *e;
	ks_fast_scan_t scan;
	ks_request_t req;
	char err[512];
	int rc;

	srv->req_ns = ks_now_ns();
	srv->req_hdr = hdr;
	srv->req_len = len;
	if (ks_log_enabled(KS_LOG_DEBUG)) {
		memset(&srv->rlog, 0, sizeof srv->rlog);
		srv->rlog.on = 1;
		srv->rlog.t0 = srv->req_ns;
		srv->rlog.op = "get";
	}
	/* A get seen before, byte for byte but for its id (fastpath.h). */
	ks_fast_scan(srv->fast, hdr, len, &scan);
	e = ks_fast_find(srv->fast, &scan);
	if (e) {
		srv->n.op_requests[KS_OP_GET] += !srv->replaying;
		srv->n.gets += srv->replaying != KS_REPLAY_COUNTED;
		ks_op_get_normalized(c, scan.has_id, scan.id, e->meta_only,
		    &e->g);
		req_log_end(srv);
		return;
	}
	err[0] = '\0';
	parse_arena.used = 0;
	parse_arena.active = 1;
	rc = ks_request_parse(hdr, len, &req, err, sizeof err);
	parse_arena.active = 0;
	srv->n.op_requests[(unsigned)req.op < KS_OP_COUNT_ ? (int)req.op :
	    KS_OP_COUNT_] += !srv->replaying;
	if (rc) {
		/* As far as the parse got: the op, or "-" before it. */
		srv->rlog.op = (unsigned)req.op < KS_OP_COUNT_ ?
		    ks_op_name(req.op) : "-";
		ks_srv_reject(c, &req, rc, err);
		req_log_end(srv);
		/* A header that is not JSON at all: the client is not
		 * speaking the protocol; answer and close. */
		if (rc == KS_E_BAD_JSON)
			ks_conn_drain(c);
		return;
	}
	srv->rlog.op = ks_op_name(req.op);
	if (srv->probe_state != KS_PROBE_DONE && needs_probe(srv, req.op)) {
		ks_srv_park(c, (int)req.op, req.has_id, req.id,
		    KS_REPLAY_BEFORE_OP);
		req_log_end(srv);
		ks_request_close(&req);
		return;
	}
	if ((unsigned)req.op < KS_OP_COUNT_ && op_table[req.op]) {
		/* Only the keys of this start's probe are learned. */
		srv->learn = srv->probe_state == KS_PROBE_DONE ? &scan : NULL;
		op_table[req.op](c, &req);
		srv->learn = NULL;
	} else
		ks_srv_reject(c, &req, KS_E_UNKNOWN_OP,
		    "unknown op");
	req_log_end(srv);
	ks_request_close(&req);
}

void ks_dispatch_request(ks_conn_t *c, const char *hdr, size_t len)
{
	dispatch(c, hdr, len);
}
