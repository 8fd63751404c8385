/*
 * Private to server/: the daemon's state, shared by the ops.  Layers below
 * (conn, sched, pool, flight, keys) know nothing of it; they reach it only
 * through the owner pointers the daemon gives them.
 */
#ifndef KS_SERVER_SRV_H
#define KS_SERVER_SRV_H

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <uthash.h>
#include <uv.h>

#include "../base/base.h"
#include "../proto/entry.h"
#include "../proto/proto.h"
#include "../store/store.h"
#include "audit.h"
#include "canary.h"
#include "conn.h"
#include "fastpath.h"
#include "flight.h"
#include "keys.h"
#include "mailbox.h"
#include "metrics.h"
#include "pool.h"
#include "remote.h"
#include "server.h"

typedef struct ks_srv ks_srv_t;

/* What the debug line of a request says (--log-level debug): filled while
 * it is answered, written by ks_req_log_end, or, for a get that waits on
 * a compile, when its reply goes out. */
typedef struct {
	int on;                  /* debug, and a request is being answered */
	int waiting;             /* a get waits: its reply writes the line */
	uint64_t t0;             /* ks_now_ns at its arrival */
	const char *op;
	const char *source;      /* of a get served now */
	int code;                /* of an error reply, else 0 */
	int has_key;
	ks_hash_t key;
} ks_req_log_t;

/* Writes one request's debug line: op, key prefix, source or error code,
 * microseconds since T0. */
static inline void ks_req_log_line(const char *op, const ks_hash_t *key,
    const char *source, int code, uint64_t t0)
{
	char hex[KS_HASH_HEX] = "-";

	if (key)
		ks_hash_hex(key, hex);
	hex[key ? 12 : 1] = '\0';
	ks_log(KS_LOG_DEBUG, "request op=%s key=%s %s=%s us=%.1f", op, hex,
	    code ? "error" : "source", code ? ks_err_name(code) :
	    source ? source : "-", (double)(ks_now_ns() - t0) / 1e3);
}

/* Error codes are -1 .. -(KS_ERR_SLOTS - 1). */
#define KS_ERR_SLOTS 64

/* Counters of the request path (flights and connections keep theirs). */
typedef struct {
	uint64_t gets;
	uint64_t bad_requests;   /* requests answered with an error */
	uint64_t corrupt;        /* store rows that failed their checksum */
	uint64_t warms;          /* warm requests */
	uint64_t warm_items;
	uint64_t late_compiles;  /* misses of a ready deployment's clients */
	/* The specs of deployments whose keys changed (compilers, kernels),
	 * recompiled at start: queued, compiled, failed. */
	uint64_t upgrade_queued, upgrade_compiled, upgrade_failed;
	/* Requests by op (their sum is every request); [KS_OP_COUNT_]
	 * counts headers that named no valid op. */
	uint64_t op_requests[KS_OP_COUNT_ + 1];
	uint64_t op_errors[KS_OP_COUNT_ + 1];   /* answered with an error */
	uint64_t code_errors[KS_ERR_SLOTS];     /* by -code */
	uint64_t kernel_gets[KS_KEYS_MAX_KERNELS];  /* library order */
	/* Gets' hits, arrival to reply queued: memory, disk.  Their counts
	 * are the hits (ks_srv_hits): nothing else counts them. */
	ks_hist_t hit_hist[2];
} ks_counters_t;

/* What the daemon knows of a deployment besides the store's row
 * (op_deploy.c): whether a check found it ready, and its late compiles
 * since start.  One per deployment the store has. */
typedef struct ks_deploy_state {
	char name[KS_MAX_NAME + 1];
	int ready;               /* a check found every spec cached, and its
	                            specs have not changed since */
	uint64_t late;           /* late compiles since start */
	UT_hash_handle hh;
} ks_deploy_state_t;

/* The last error replies, for the dashboard: what went wrong lately. */
#define KS_RECENT_ERRORS 32
typedef struct {
	uint64_t at_ns;
	int op;                  /* KS_OP_*, or KS_OP_COUNT_ */
	int code;
	char msg[240];
} ks_recent_err_t;

/* Where the keys come from (daemon.c, "Start"): nothing yet, the probe
 * the store saved (its witness unchanged), or this start's probe. */
enum { KS_PROBE_NONE, KS_PROBE_SAVED, KS_PROBE_DONE };

/* The metrics listener's renders (observe.c): at most KS_SCRAPE_RATE a
 * second (bursts of as many); a scrape beyond the rate is answered with
 * the newest render of its page. */
#define KS_SCRAPE_RATE 20
enum { KS_PAGE_METRICS, KS_PAGE_STATS, KS_PAGE_COUNT_ };
typedef struct {
	double tokens;
	uint64_t refill_ns;
	ks_buf_t page[KS_PAGE_COUNT_];
	uint64_t rendered, reused;
} ks_scrapes_t;

/* The dashboard's series, sampled every KS_HISTORY_MS for the last
 * KS_HISTORY_N samples (observe.c), so that a page opened now draws the
 * last minutes at once rather than after its own polls.  A ring: S[(HEAD
 * + i) % N] is the i-th oldest of the N kept. */
enum { KS_HISTORY_N = 150, KS_HISTORY_MS = 2000 };
typedef struct {
	struct {
		uint64_t ns;            /* ks_now_ns when taken */
		uint64_t requests, hits, gets;
		uint32_t queue;
	} s[KS_HISTORY_N];
	int head, n;
	uint64_t next_ns;        /* the next sample is due then */
} ks_history_t;

/* A request that waits for this start's probe, its header copied, and
 * what its first dispatch counted: its request (parked before its op
 * ran), or its op's counters too (parked by its op). */
enum { KS_REPLAY_NO, KS_REPLAY_BEFORE_OP, KS_REPLAY_COUNTED };
typedef struct ks_parked {
	struct ks_parked *next;
	ks_conn_t *conn;         /* held (ks_conn_wait) */
	int counted;             /* KS_REPLAY_* */
	size_t len;
	char hdr[];
} ks_parked_t;

struct ks_srv {
	uv_loop_t *loop;
	uv_pipe_t listener;
	uv_async_t stop_async;   /* the signal thread's wake-up */
	uv_async_t hup_async;    /* SIGHUP */
	uv_timer_t store_timer;  /* is the store's file still the one open? */
	int store_reopening;
	uint64_t store_replaced; /* times the file was found deleted/replaced */
	char store_moved[4400];  /* where a corrupt store was moved, or "" */
	pthread_t signal_thread;
	int stop_signal;
	uv_timer_t flush_timer;
	uv_timer_t drain_timer;  /* bounds the drain at shutdown */
	uv_timer_t start_timer;  /* bounds the wait for the first worker */
	int listening;           /* accepting connections */
	int probe_state;         /* KS_PROBE_* */
	const char *saved_probe_use;  /* what became of the store's saved
	                                 probe: "absent", "stale" (its
	                                 witness differs), "used" or
	                                 "replaced" (the probe differed) */
	ks_store_probe_t saved;  /* the store's saved probe, while needed */
	char *probe_json;        /* this start's probe and its witness,
	                            from the first worker */
	char *probe_witness;
	uv_work_t fp_work;       /* the kernels' fingerprints, computed on
	                            a thread of libuv's pool */
	ks_hash_t fp_computed[KS_KEYS_MAX_KERNELS];
	int fp_rc;
	int fp_ready;
	double probe_ms;         /* exec to this start's probe, once in */
	int notified_ready;
	ks_parked_t *parked, **parked_tail;
	uint64_t nparked;        /* waiting now */
	size_t parked_bytes;     /* their headers */
	uint64_t parked_total;
	int replaying;           /* KS_REPLAY_*: a parked request's second
	                            dispatch, counted as far as it says */
	const char *req_hdr;     /* the request being dispatched */
	size_t req_len;
	int passed_fd;           /* the socket a service manager passed
	                            (socket activation), or -1 */
	uv_timer_t watchdog_timer;  /* WATCHDOG=1 while the loop runs */
	ks_buf_t hello_body;     /* built once: see op_info.c */
	ks_buf_t kernels_body;
	int exit_status;
	ks_server_config_t cfg;
	ks_store_t *store;
	ks_store_writer_t *writer;
	ks_mailbox_t mailbox;    /* completions of the writer */
	ks_hot_t *hot;
	ks_keys_t keys;
	ks_conns_t conns;
	ks_flights_t flights;
	ks_pool_t pool;
	int stopping;
	int lock_fd;
	int store_lock_fd;
	uint64_t started_ns;
	ks_counters_t n;
	uint64_t req_ns;         /* its arrival (ks_now_ns) */
	ks_recent_err_t recent[KS_RECENT_ERRORS];  /* a ring */
	uint64_t nrecent;        /* errors recorded; the next slot % size */
	ks_req_log_t rlog;       /* the request being answered, at debug */
	ks_fast_t *fast;         /* the get fast path */
	struct ks_http *http;    /* --metrics-listen, or NULL */
	ks_scrapes_t scrapes;
	ks_history_t history;    /* the dashboard's series (observe.c) */
	ks_fleet_pub_t fleet[KS_FLEET_MAX_KEYS];  /* --fleet-key, loaded */
	int nfleet;
	ks_remote_t *remote;     /* --remote, or NULL */
	ks_fleet_sec_t sign;     /* --fleet-sign-key, when can_sign */
	int can_sign;
	char remote_pw[512];     /* read at start, wiped once handed over */
	uint64_t remote_log_ns;  /* the last refused value logged */
	uint64_t remote_log_quiet;   /* refused since, not logged */
	int remote_planted;      /* KSPEC_TEST_REMOTE_BUG: a signed entry of
	                            another key is taken (read by the test
	                            build only, -DKS_TEST_PLANT) */
	const ks_fast_scan_t *learn;  /* the scan of the request being
	                                 answered, for ks_op_get to learn */
	struct ks_warm *warms;   /* warm requests in progress (op_get.c),
	                            for cancel */
	ks_deploy_state_t *deploys;  /* uthash by name (op_deploy.c) */
	/* Bundle imports (op_import.c): how many run, and the entries they
	 * hold (read and not yet stored or refused) with their artifact
	 * bytes, now and at most since start, of all imports together.  All
	 * but running are atomic: pool threads add to them. */
	struct {
		uint64_t running;
		uint64_t entries, bytes;
		uint64_t peak_entries, peak_bytes;
	} imports;
	int import_slow_store;   /* KSPEC_TEST_PLANT_IMPORT_SLOW_STORE: an
	                            import's stored batches are taken only
	                            while it reads none (set and read by the
	                            test build only, -DKS_TEST_PLANT) */
	ks_audit_t audit;        /* the key audit (audit.c) */
	ks_canaries_t canaries;  /* known-answer canaries (canary.h) */
};

/* Gets answered from the memory tier (DISK 0) or the store (DISK 1). */
static inline uint64_t ks_srv_hits(const ks_srv_t *srv, int disk)
{
	return ks_hist_total(&srv->n.hit_hist[disk], &ks_hist_hit_bounds);
}

static inline ks_srv_t *ks_srv_of(const ks_conn_t *c)
{
	return (ks_srv_t *)c->set->owner;
}

/* A request answered later, from the loop, after another thread's work
 * (the store writer's, a pool thread's): the first member of its state,
 * whose mail the loop runs. */
typedef struct {
	ks_mail_t mail;          /* first */
	ks_srv_t *srv;
	ks_conn_t *conn;
	int has_id;
	uint64_t id;
	int op;                  /* the request's, for its error counts */
} ks_later_t;

static inline void ks_later_init(ks_later_t *l, ks_conn_t *c,
    const ks_request_t *req, void (*fn)(ks_mail_t *m))
{
	l->mail.fn = fn;
	l->srv = ks_srv_of(c);
	l->conn = c;
	l->has_id = req->has_id;
	l->id = req->id;
	l->op = (int)req->op;
}

/* Any thread: has the loop run L's mail (a ks_writer_barrier callback). */
static inline void ks_later_post(void *l)
{
	ks_mailbox_post(&((ks_later_t *)l)->srv->mailbox,
	    &((ks_later_t *)l)->mail);
}

/* Counts an error reply of OP (metrics, by op and by code) and keeps it
 * among the recent ones, for every error reply: OP is the request's, or
 * KS_OP_COUNT_ ("none": the connection layer's own, on_error: a frame,
 * a time limit, a refused connection). */
static inline void ks_srv_error(ks_srv_t *srv, int op, int code,
    const char *msg)
{
	ks_recent_err_t *r = &srv->recent[srv->nrecent++ % KS_RECENT_ERRORS];

	if ((unsigned)op > KS_OP_COUNT_)
		op = KS_OP_COUNT_;
	srv->n.op_errors[op]++;
	if (code < 0 && -code < KS_ERR_SLOTS)
		srv->n.code_errors[-code]++;
	r->at_ns = ks_now_ns();
	r->op = op;
	r->code = code;
	/* Cut to the slot (a message may be longer), never inside a UTF-8
	 * sequence. */
	snprintf(r->msg, sizeof r->msg, "%.*s", (int)sizeof r->msg - 1,
	    msg ? msg : "");
	if (msg && strlen(msg) >= sizeof r->msg &&
	    ((unsigned char)msg[sizeof r->msg - 1] & 0xC0) == 0x80) {
		/* The first byte cut continues a sequence: drop its start. */
		size_t n = sizeof r->msg - 1;

		while (n > 0 && ((unsigned char)r->msg[n - 1] & 0xC0) == 0x80)
			n--;
		r->msg[n > 0 ? n - 1 : 0] = '\0';
	}
}

/* An error reply to a request of OP (its id HAS_ID, ID), counted
 * under OP and CODE.  Every error reply of an op is made here, in its
 * dispatch or later (a compile's end, the store writer's answer), the
 * op handed along with the request, never read from a global. */
static inline void ks_srv_error_reply(ks_conn_t *c, int op, int has_id,
    uint64_t id, int code, const char *msg)
{
	ks_srv_error(ks_srv_of(c), op, code, msg);
	ks_reply_err(c, has_id, id, code, msg);
}

/* The error reply of a deferred answer L. */
static inline void ks_later_error(const ks_later_t *l, int code,
    const char *msg)
{
	ks_srv_error_reply(l->conn, l->op, l->has_id, l->id, code, msg);
}

/* An error answer to a request of OP that was refused (bad input,
 * limits), counted in stats as `errors`; compile failures count as
 * `failures`. */
static inline void ks_srv_reject_op(ks_conn_t *c, int op, int has_id,
    uint64_t id, int code, const char *msg)
{
	ks_srv_t *srv = ks_srv_of(c);

	srv->n.bad_requests++;
	srv->rlog.code = code;
	ks_srv_error_reply(c, op, has_id, id, code, msg);
}

/* ks_srv_reject_op of REQ. */
static inline void ks_srv_reject(ks_conn_t *c, const ks_request_t *req,
    int code, const char *msg)
{
	ks_srv_reject_op(c, (int)req->op, req->has_id, req->id, code, msg);
}

/* 1 when C may change the store machine-wide (the daemon's uid, root
 * and --admin-group); else answers E_DENIED for op WHAT and returns 0. */
static inline int ks_srv_admin_only(ks_conn_t *c, const ks_request_t *req,
    const char *what)
{
	char msg[256];

	if (c->admin)
		return 1;
	snprintf(msg, sizeof msg, "%s is for uid %u, root and the members "
	    "of --admin-group; uid %u is none of them", what,
	    ks_srv_of(c)->conns.lim.self_uid, c->uid);
	ks_srv_reject(c, req, KS_E_DENIED, msg);
	return 0;
}

#endif
