/*
 * Private to server/: the daemon's state, connections and flights.
 */
#ifndef KS_SERVER_INTERNAL_H
#define KS_SERVER_INTERNAL_H

#include <pthread.h>
#include <uv.h>
#include <uthash.h>

#include "../base/base.h"
#include "../jit/jit.h"
#include "../proto/proto.h"
#include "../specialize/specialize.h"
#include "../store/store.h"
#include "server.h"

typedef struct ks_srv ks_srv_t;
typedef struct ks_conn ks_conn_t;
typedef struct ks_flight ks_flight_t;

/*
 * Connection states:
 *   OPEN     reading and answering requests;
 *   DRAINING not reading any more (the peer half-closed, a frame could not
 *            be parsed, or the daemon is stopping) but still answering the
 *            requests it has: once none is pending, uv_shutdown flushes
 *            the queued replies -> SHUTTING;
 *   SHUTTING uv_shutdown issued; its callback closes -> CLOSED;
 *   CLOSED   uv_close called; the struct is freed when the close callback
 *            has run and no flight holds a waiter on it (refs == 0).
 * A read error or reset goes straight to CLOSED; the replies of its
 * pending requests are dropped.
 */
enum { CONN_OPEN, CONN_DRAINING, CONN_SHUTTING, CONN_CLOSED };

struct ks_conn {
	uv_pipe_t pipe;          /* first: handle->data is not needed */
	ks_srv_t *srv;
	int state;
	int refs;                /* the handle + one per waiter */
	int pending;             /* requests waiting on a flight */
	int reading;
	ks_buf_t in;             /* received bytes not yet consumed */
	size_t in_off;           /* consumed prefix of in */
	ks_buf_t out;            /* reply header scratch, reused */
	ks_conn_t *prev, *next;  /* srv->conns */
};

/* One item's outcome in a warm reply. */
typedef struct {
	int err;                 /* KS_OK or the error */
	const char *source;      /* "memory" "disk" "compiled" "joined" */
	char key[KS_HASH_HEX];
	char variant[KS_MAX_NAME + 1];
	char *msg;               /* malloc'd error message, or NULL */
} ks_warm_item_t;

/* A warm request in progress: replied to when its last item is done.
 * Holds one reference on its connection. */
typedef struct {
	ks_conn_t *conn;
	int has_id;
	uint64_t id;
	int nitems;
	int pending;
	ks_warm_item_t *items;
} ks_warm_t;

/* A client waiting on a flight: a get (warm == NULL) or one item of a
 * warm request. */
typedef struct ks_waiter {
	ks_conn_t *conn;
	int has_id;
	uint64_t id;
	int meta_only;
	int joined;              /* 0 for the request that started it */
	ks_warm_t *warm;
	int index;               /* item of warm */
	struct ks_waiter *next;
} ks_waiter_t;

/* Compile priorities: a waiting get before bulk warm. */
enum { KS_PRIO_GET, KS_PRIO_WARM, KS_PRIO_COUNT };

/* The normalized form of a get request, everything its key is made of. */
typedef struct {
	ks_spec_t spec;
	const ks_backend_t *backend;
	const char *target;      /* resolved; owned by the identity cache */
	const char *requested;   /* target as the client wrote it; likewise */
	const char *identity;    /* compiler identity; identity cache */
	char format[KS_MAX_NAME + 1];
	ks_hash_t key;
} ks_get_t;

/*
 * Flight states: QUEUED (in srv->queue[prio], waiting for a compile
 * slot) -> SUBMITTED (handed to the thread pool; `running` once a worker
 * starts it) -> DONE (after_compile on the loop thread replies to every
 * waiter and frees the flight).  A get that joins a queued warm flight
 * promotes it to the get queue.  Only the loop thread touches the waiter
 * list and the queue links; the worker touches only get, artifact and
 * error.
 */
struct ks_flight {
	ks_hash_t key;
	UT_hash_handle hh;
	uv_work_t work;
	ks_srv_t *srv;
	ks_get_t get;
	ks_waiter_t *waiters;
	int nwaiters;
	uint64_t started_ns;
	int prio;
	int submitted;           /* handed to the thread pool */
	ks_flight_t *qprev, *qnext;  /* srv->queue[prio] while queued */
	int running;             /* atomic: set by the worker */
	/* Results, written by the worker. */
	ks_artifact_t *artifact;
	int err;
	char errmsg[512];
	double compile_ms;
};

typedef struct {
	uint64_t requests;
	uint64_t gets;
	uint64_t hits_memory;
	uint64_t hits_disk;
	uint64_t compiles;
	uint64_t joins;
	uint64_t failures;       /* compiles that failed */
	uint64_t bad_requests;   /* requests answered with an error */
	uint64_t corrupt;        /* store rows that failed their checksum */
	uint64_t warms;          /* warm requests */
	uint64_t abandoned;      /* compiles skipped: nobody waited any more */
	uint64_t warm_items;
	uint64_t connections_total;
	uint64_t compile_ns_total;
} ks_counters_t;

/* (backend, requested target) -> resolved target and compiler identity.
 * Filled on first use; entries are never removed, so their strings can be
 * borrowed for the daemon's lifetime. */
typedef struct ks_ident {
	/* The key's fields that depend only on this entry, absorbed once; a
	 * request copies the state and adds its own fields. */
	ks_hasher_t prefix;
	const ks_backend_t *backend;
	char requested[KS_MAX_NAME + 1];
	char target[KS_MAX_NAME + 1];
	char *identity;
	struct ks_ident *next;
} ks_ident_t;

struct ks_srv {
	uv_loop_t *loop;
	uv_pipe_t listener;
	uv_async_t stop_async;   /* the signal thread's wake-up */
	pthread_t signal_thread;
	int stop_signal;
	uv_timer_t flush_timer;
	uv_timer_t drain_timer;  /* bounds the drain at shutdown */
	ks_server_config_t cfg;
	ks_store_t *store;
	ks_hot_t *hot;
	ks_flight_t *flights;    /* uthash by key */
	ks_flight_t *queue[KS_PRIO_COUNT];      /* FIFO heads */
	ks_flight_t *queue_tail[KS_PRIO_COUNT];
	int slots_busy;          /* flights submitted to the pool */
	ks_conn_t *conns;
	int nconns;
	int max_conns;           /* KS_MAX_CONNECTIONS within RLIMIT_NOFILE */
	int stopping;
	int lock_fd;
	int store_lock_fd;
	uint64_t started_ns;
	ks_counters_t n;
	ks_ident_t *idents;
	ks_hash_t fingerprints[16];  /* per kernel, library order */
};

/* key.c */
int ks_srv_normalize(ks_srv_t *srv, const ks_get_req_t *req, ks_get_t *out,
    char *err, size_t errlen);
/* Appends the key's components as a JSON object (for explain). */
int ks_srv_key_components(ks_srv_t *srv, const ks_get_t *g, ks_buf_t *out);

/* server.c: replies and flights, shared with ops.c */
void ks_reply_begin(ks_conn_t *c, int has_id, uint64_t id);
void ks_reply_end(ks_conn_t *c, size_t payload_len);
void ks_reply_send(ks_conn_t *c, ks_artifact_t *art);
void ks_reply_err(ks_conn_t *c, int has_id, uint64_t id, int code,
    const char *msg);
void ks_conn_unref(ks_conn_t *c);
/* Called after a connection's pending count dropped: a draining
 * connection with nothing pending is shut down. */
void ks_conn_settle(ks_conn_t *c);
/* 1 when replies can still be sent on C. */
int ks_conn_live(const ks_conn_t *c);
/* Finds the flight of G's key or starts one at PRIO; a get joining a
 * queued warm flight promotes it.  *joined tells which.  NULL on OOM. */
ks_flight_t *ks_flight_join(ks_srv_t *srv, const ks_get_t *g, int prio,
    int *joined);
/* Hands queued flights to free compile slots, gets first. */
void ks_srv_dispatch(ks_srv_t *srv);
/* Appends ,"params":[...]: K's unbound parameters in entry order, as the
 * get reply and the kernels op give them (docs/protocol.md). */
void ks_srv_params_json(ks_buf_t *m, const ks_ir_kernel_t *k);
/* Adds a waiter (takes a reference on its connection). */
int ks_flight_wait(ks_flight_t *f, ks_waiter_t *w);

/* ops.c */
void ks_op_kernels(ks_conn_t *c, const ks_request_t *req);
void ks_op_list(ks_conn_t *c, const ks_request_t *req);
void ks_op_evict(ks_conn_t *c, const ks_request_t *req);
void ks_op_explain(ks_conn_t *c, const ks_request_t *req);
void ks_op_warm(ks_conn_t *c, const ks_request_t *req);
void ks_op_misses(ks_conn_t *c, const ks_request_t *req);
/* Writes the canonical get-spec of G (target as requested) as JSON. */
int ks_spec_json(const ks_get_t *g, ks_buf_t *out);
/* Records a finished warm item; replies when it was the last. */
void ks_warm_item_done(ks_warm_t *w, int index, int err, const char *msg,
    const char *source, const ks_artifact_t *a);

/* Adds (backend, requested target) -> (resolved target, compiler
 * identity) to the identity cache; the key prefix is hashed here.  Used by
 * the lookup and by tests that need another compiler identity. */
int ks_srv_ident_add(ks_srv_t *srv, const ks_backend_t *be,
    const char *requested, const char *target, const char *identity,
    ks_ident_t **out);
/* Fills the identity cache for BACKEND's "auto" target. */
int ks_srv_ident_warm(ks_srv_t *srv, const ks_backend_t *backend);

/* socket.c */
/* Creates the parent directories of PATH (mode 0700) when missing. */
int ks_make_parent(const char *path, char *err, size_t errlen);
/* Holds an exclusive flock on PATH.lock (created 0600, no symlinks). */
int ks_lock_beside(const char *path, int *fd_out, char *err, size_t errlen);
int ks_sock_listen(const char *path, int *fd_out, int *lock_fd_out,
    char *err, size_t errlen);
void ks_sock_unlink(const char *path);

#endif
