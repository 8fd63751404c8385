/*
 * Private to server/: client connections, framing of requests and the
 * write path of replies.  This layer knows nothing of ops: a complete
 * request header is handed to the callback the daemon registered.
 */
#ifndef KS_SERVER_CONN_H
#define KS_SERVER_CONN_H

#include <stdint.h>
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
 */
enum { CONN_OPEN, CONN_DRAINING, CONN_SHUTTING, CONN_CLOSED };

struct ks_conn {
	uv_pipe_t pipe;          /* first: the handle is the connection */
	ks_conns_t *set;
	int state;
	int refs;                /* the handle + one per pending request */
	int pending;             /* requests not answered yet */
	int reading;
	uint64_t id;             /* 1, 2, ... in order of accept */
	uint32_t uid;            /* the peer's, from SO_PEERCRED */
	ks_buf_t in;             /* received bytes not yet consumed */
	size_t in_off;           /* consumed prefix of in */
	ks_buf_t out;            /* reply header scratch, reused */
	ks_conn_t *prev, *next;  /* set->head */
};

/* Every connection of the daemon. */
struct ks_conns {
	uv_loop_t *loop;
	ks_conn_t *head;
	int n;
	int max;                 /* KS_MAX_CONNECTIONS within RLIMIT_NOFILE */
	int stopping;            /* accepted connections are refused */
	uint64_t next_id;
	uint64_t total;          /* accepted since start */
	uint64_t bad_frames;     /* frames that could not be parsed */
	ks_conn_request_fn on_request;
	void *owner;             /* the daemon, for the request callback */
};

void ks_conns_init(ks_conns_t *set, uv_loop_t *loop, int max,
    ks_conn_request_fn on_request, void *owner);
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
 * reference and counts it pending.  ks_conn_done undoes both, after the
 * reply was sent or dropped, and shuts a draining connection down once
 * nothing is pending. */
void ks_conn_wait(ks_conn_t *c);
void ks_conn_done(ks_conn_t *c);
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
void ks_reply_err(ks_conn_t *c, int has_id, uint64_t id, int code,
    const char *msg);
/* A get reply: SOURCE ("memory" ...) and the artifact's stored fields;
 * the payload unless META_ONLY. */
void ks_reply_artifact(ks_conn_t *c, int has_id, uint64_t id,
    const char *source, ks_artifact_t *a, int meta_only);

#endif
