/*
 * Private to server/: client connections, framing of requests and the
 * write path of replies.  This layer knows nothing of ops: a complete
 * request header is handed to the callback the daemon registered.
 */
#ifndef KS_SERVER_CONN_H
#define KS_SERVER_CONN_H

#include <stdint.h>
#include <uthash.h>
#include <uv.h>

#include "../base/base.h"
#include "../store/store.h"

typedef struct ks_conn ks_conn_t;
typedef struct ks_conns ks_conns_t;

/* Called for every complete request header read on C (LEN bytes, not
 * NUL-terminated), in the order they were sent. */
typedef void (*ks_conn_request_fn)(ks_conn_t *c, const char *hdr,
    size_t len);

/*
 * Connection states:
 *   OPEN     reading and answering requests;
 *   DRAINING not reading any more (the peer half-closed, a frame could not
 *            be parsed, or the daemon is stopping) but still answering the
 *            requests it has: once none is pending, uv_shutdown flushes
 *            the queued replies -> SHUTTING;
 *   SHUTTING uv_shutdown issued; its callback closes -> CLOSED;
 *   CLOSED   uv_close called; the struct is freed when the close callback
 *            has run and no request holds a reference on it (refs == 0).
 * A read error or reset goes straight to CLOSED; the replies of its
 * pending requests are dropped.
 *
 * An OPEN connection reads unless something pauses it (PAUSE_* bits):
 * its unsent replies passed KS_MAX_WRITE_QUEUE (until half is sent), its
 * unhandled input passed KS_MAX_READ_BACKLOG (until half is handled), or
 * all connections' unsent replies passed the global budget while it holds
 * more than its share (until the total is half the budget).  While
 * PAUSE_WRITE or PAUSE_GLOBAL holds, input already received is not
 * handled either: a 30-byte request can make a 5 KB reply.
 *
 * conn.c asserts the states' invariants at every transition
 * (conn_state_ok), never on the path of a request.
 */
enum { CONN_OPEN, CONN_DRAINING, CONN_SHUTTING, CONN_CLOSED };
enum { PAUSE_WRITE = 1, PAUSE_INPUT = 2, PAUSE_GLOBAL = 4 };

/* What one peer uid holds. */
typedef struct ks_conn_user {
	uint32_t uid;
	int conns;
	int waiting;             /* requests waiting on compiles */
	UT_hash_handle hh;
} ks_conn_user_t;

/* A piece of the replies batched on a connection (conn.c). */
enum { SEG_OUT, SEG_ART, SEG_STATIC };
typedef struct {
	int kind;
	const void *p;           /* SEG_ART, SEG_STATIC */
	size_t off;              /* SEG_OUT: into out */
	size_t len;
	ks_artifact_t *art;      /* referenced while batched, or NULL */
} ks_seg_t;

struct ks_conn {
	uv_pipe_t pipe;          /* first: the handle is the connection */
	ks_conns_t *set;
	int state;
	int refs;                /* the handle + one per pending request */
	int pending;             /* requests not answered yet */
	int reading;
	int paused;              /* PAUSE_* */
	uint64_t id;             /* 1, 2, ... in order of accept */
	uint32_t uid;            /* the peer's, from SO_PEERCRED */
	int admin;               /* may evict (uid, root or --admin-group) */
	ks_conn_user_t *user;    /* its uid's counts; NULL if not admitted */
	ks_buf_t in;             /* received bytes not yet consumed */
	size_t in_off;           /* consumed prefix of in */
	ks_buf_t out;            /* the batch's reply headers, reused */
	ks_seg_t *segs;          /* the batch */
	size_t nsegs, capsegs;
	size_t batch_bytes;      /* the batch's bytes (all its segments) */
	size_t reply_prefix;     /* the reply being built starts here */
	size_t reply_span;       /* its span of out not yet a segment */
	size_t reply_seg0;       /* its first segment */
	size_t static_len;       /* its bytes in static segments */
	int reply_open;
	int batching;            /* in a turn: flushed at its end */
	size_t unsent;           /* reply bytes queued in write requests */
	uint64_t active_ms;      /* last read, write or answered request
	                            (loop time) */
	uint64_t frame_ms;       /* when the unfinished frame began, or 0 */
	int turn_queued;         /* in set->turns: frames wait for a turn */
	int eof;                 /* the peer half-closed: answer the whole
	                            frames buffered, then drain */
	ks_conn_t *tprev, *tnext;
	ks_conn_t *prev, *next;  /* set->head */
};

/* Limits of the connection layer (flags and base/limits.h). */
typedef struct {
	int max;                 /* KS_MAX_CONNECTIONS within RLIMIT_NOFILE */
	int max_per_user;        /* --max-conns-per-user */
	uint64_t idle_ms;        /* --idle-timeout, 0: never */
	uint64_t read_ms;        /* --read-timeout, 0: never */
	uint32_t self_uid;       /* the daemon's uid: always admitted */
	long socket_gid;         /* --socket-group: admitted, -1: none */
	long admin_gid;          /* --admin-group, -1: none */
	char socket_group[64];   /* its name as given, for messages */
} ks_conn_limits_t;

/* Refusals logged recently, so a refused uid is logged once a minute. */
#define KS_CONN_DENIED_SLOTS 32

/* Every connection of the daemon. */
struct ks_conns {
	uv_loop_t *loop;
	ks_conn_t *head;
	int n;
	ks_conn_limits_t lim;
	int stopping;            /* accepted connections are refused */
	uint64_t next_id;
	ks_conn_user_t *users;   /* uthash by uid */
	ks_conn_t *turns_head, *turns_tail;  /* waiting for their next turn */
	uv_idle_t turn;          /* active while some connection waits */
	uv_timer_t sweep;        /* idle and read deadlines, every second */
	size_t unsent_total;
	struct {
		uint32_t uid;
		uint64_t at_ns;
	} denied_log[KS_CONN_DENIED_SLOTS];
	ks_conn_request_fn on_request;
	void *owner;             /* the daemon, for the request callback */
	/* Told of each error reply the connection layer makes itself (a
	 * bad frame, a time limit, a refused connection: no request's) as
	 * it is queued, or NULL.  The owner counts the error replies it
	 * makes itself. */
	void (*on_error)(ks_conn_t *c, int code, const char *msg);
	/* Counters for stats. */
	uint64_t total;          /* accepted since start */
	uint64_t bad_frames;     /* frames that could not be parsed */
	uint64_t refused_full;   /* refused: KS_MAX_CONNECTIONS */
	uint64_t refused_user;   /* refused: the uid's connection limit */
	uint64_t refused_peer;   /* refused: a uid not admitted (E_DENIED) */
	uint64_t idle_closed;
	uint64_t read_timeouts;
	uint64_t turns_yielded;  /* a connection had more frames than a turn */
	uint64_t paused_global;  /* reading paused for the global budget */
};

void ks_conns_init(ks_conns_t *set, uv_loop_t *loop,
    const ks_conn_limits_t *lim, ks_conn_request_fn on_request,
    void *owner);
/* Closes the layer's own handles (after every connection has closed); a
 * request still waiting is ended by its ks_conn_done later. */
void ks_conns_close(ks_conns_t *set);
/* The listener's connection callback (listener->data must be SET). */
void ks_conns_on_connection(uv_stream_t *listener, int status);
/* Stops reading on every connection (shutdown begins). */
void ks_conns_pause_all(ks_conns_t *set);
/* Drains every connection: its pending requests are still answered. */
void ks_conns_drain_all(ks_conns_t *set);
/* Closes every connection at once, dropping what was not sent. */
void ks_conns_close_all(ks_conns_t *set);

/* 1 when replies can still be sent on C. */
int ks_conn_live(const ks_conn_t *c);
/* A request starts waiting on C (a compile, a store write): takes a
 * reference and counts it pending, for C and its uid.  ks_conn_done
 * undoes both, after the reply was sent or dropped, and shuts a draining
 * connection down once nothing is pending. */
void ks_conn_wait(ks_conn_t *c);
void ks_conn_done(ks_conn_t *c);
/* Requests of C's uid waiting on compiles, on all its connections. */
int ks_conn_user_waiting(const ks_conn_t *c);
/* Stops reading and answers what was read (see the states above). */
void ks_conn_drain(ks_conn_t *c);

/*
 * Replies.  ks_reply_begin starts c->out with room for the frame prefix
 * and the reply's id and "ok":true (no printf on the hit path); the op
 * appends ",field":value pairs; ks_reply_end closes the object and fills
 * the prefix; ks_reply_send sends c->out and, unless NULL, the artifact's
 * bytes as payload (referenced until written).
 */
void ks_reply_begin(ks_conn_t *c, int has_id, uint64_t id);
void ks_reply_end(ks_conn_t *c, size_t payload_len);
void ks_reply_send(ks_conn_t *c, ks_artifact_t *art);
/* ks_reply_end and ks_reply_send of a reply without payload. */
void ks_reply_finish(ks_conn_t *c);
/* Appends LEN bytes at P, which live as long as the daemon, to the reply
 * being built without copying them. */
void ks_reply_static(ks_conn_t *c, const void *p, size_t len);
/* An error reply (proto's form).  Not told to on_error: the owner's
 * error replies are counted where it makes them. */
void ks_reply_err(ks_conn_t *c, int has_id, uint64_t id, int code,
    const char *msg);
/* A get reply: SOURCE ("memory" ...) and the artifact's stored fields;
 * the payload unless META_ONLY. */
void ks_reply_artifact(ks_conn_t *c, int has_id, uint64_t id,
    const char *source, ks_artifact_t *a, int meta_only);

#endif
