/*
 * Connections: accept (who is admitted: admit.c), framing of requests,
 * the write path of replies with backpressure, turns between
 * connections, deadlines, and the connection state machine (conn.h).
 *
 * Replies are written with uv_try_write straight from the connection's
 * header buffer and the artifact's bytes; only what the socket does not
 * take at once is copied into a write request, which holds a reference on
 * the artifact until it is written.  A libuv handle is freed only in its
 * close callback; a connection that must close is marked CLOSED and torn
 * down here, never inside another layer's callback.
 *
 * Turns.  A read hands at most KS_MAX_REQUESTS_PER_TURN frames of one
 * connection to the daemon; the rest wait in the connection's buffer, and
 * the connection joins the turn queue, which an idle handle serves
 * round-robin, one turn per connection per loop iteration, after the
 * loop has polled for everyone else's input.  So a client that pipelines
 * thousands of requests shares the loop with the others instead of
 * holding it until its last request is answered.
 *
 * Deadlines (the sweep, every second): a connection with nothing pending
 * and no unfinished frame that has been quiet for the idle timeout is
 * closed; a frame that has begun must be complete within the read
 * timeout, or the connection gets E_TIMEOUT and is closed.
 */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../proto/proto.h"
#include "admit.h"

#define READ_CHUNK 65536
#define SWEEP_MS 1000

/* A write the socket did not take at once: its buffers, the artifacts
 * they point into (referenced), and a copy of the rest (after it). */
typedef struct {
	uv_write_t req;
	ks_conn_t *conn;
	size_t bytes;            /* queued: counted in conn->unsent */
	ks_artifact_t **arts;
	size_t narts;
} ks_wreq_t;

static void update_reading(ks_conn_t *c);
static void process_input(ks_conn_t *c);
static void batch_clear(ks_conn_t *c);
static void on_sweep(uv_timer_t *t);
static void on_turn(uv_idle_t *h);

void ks_conns_init(ks_conns_t *set, uv_loop_t *loop,
    const ks_conn_limits_t *lim, ks_conn_request_fn on_request,
    void *owner)
{
	memset(set, 0, sizeof *set);
	set->loop = loop;
	set->lim = *lim;
	set->on_request = on_request;
	set->owner = owner;
	uv_idle_init(loop, &set->turn);
	set->turn.data = set;
	uv_timer_init(loop, &set->sweep);
	set->sweep.data = set;
	uv_timer_start(&set->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
	uv_unref((uv_handle_t *)&set->sweep);
}

void ks_conns_close(ks_conns_t *set)
{
	ks_conn_user_t *u, *tmp;

	if (!uv_is_closing((uv_handle_t *)&set->turn))
		uv_close((uv_handle_t *)&set->turn, NULL);
	if (!uv_is_closing((uv_handle_t *)&set->sweep))
		uv_close((uv_handle_t *)&set->sweep, NULL);
	/* A user whose request still waits (on a store write the writer
	 * finishes after the loop) is freed by that request's
	 * ks_conn_done, which still reads it. */
	HASH_ITER(hh, set->users, u, tmp) {
		if (u->waiting)
			continue;
		HASH_DEL(set->users, u);
		free(u);
	}
}

/* ---- users ---- */

int ks_conn_user_waiting(const ks_conn_t *c)
{
	return c->user ? c->user->waiting : 0;
}

/* ---- turns ---- */

static void turn_enqueue(ks_conn_t *c)
{
	ks_conns_t *set = c->set;

	if (c->turn_queued)
		return;
	assert(c->state == CONN_OPEN);
	c->turn_queued = 1;
	c->tnext = NULL;
	c->tprev = set->turns_tail;
	if (set->turns_tail)
		set->turns_tail->tnext = c;
	else
		set->turns_head = c;
	set->turns_tail = c;
	if (!uv_is_active((uv_handle_t *)&set->turn))
		uv_idle_start(&set->turn, on_turn);
}

static void turn_dequeue(ks_conn_t *c)
{
	ks_conns_t *set = c->set;

	if (!c->turn_queued)
		return;
	c->turn_queued = 0;
	if (c->tprev)
		c->tprev->tnext = c->tnext;
	else
		set->turns_head = c->tnext;
	if (c->tnext)
		c->tnext->tprev = c->tprev;
	else
		set->turns_tail = c->tprev;
	c->tprev = c->tnext = NULL;
	if (!set->turns_head)
		uv_idle_stop(&set->turn);
}

/* One turn for every connection queued when the iteration began. */
static void on_turn(uv_idle_t *h)
{
	ks_conns_t *set = h->data;
	ks_conn_t *last = set->turns_tail, *c;

	while ((c = set->turns_head)) {
		turn_dequeue(c);
		process_input(c);
		if (c == last)
			break;
	}
}

/* ---- lifetime ---- */

/*
 * Whether C keeps the invariants of its state (conn.h), asserted at every
 * transition, never on the path of a request: a reference for the handle
 * until its close callback has run and one per pending request; only an
 * OPEN connection reads or waits for a turn; a CLOSED one with nothing
 * pending no longer counts against its uid.
 */
static int conn_state_ok(const ks_conn_t *c)
{
	if (c->pending < 0 || (c->refs != c->pending + 1 &&
	    (c->state != CONN_CLOSED || c->refs != c->pending)))
		return 0;
	switch (c->state) {
	case CONN_OPEN:
		return 1;
	case CONN_DRAINING:
	case CONN_SHUTTING:
		return !c->reading && !c->turn_queued;
	case CONN_CLOSED:
		return !c->turn_queued && (c->pending > 0 || !c->user);
	default:
		return 0;
	}
}

static void conn_unref(ks_conn_t *c)
{
	assert(c->refs > 0);
	if (--c->refs > 0)
		return;
	/* Freed only from the close callback or a request's end, never
	 * inside a turn of its own input. */
	assert(c->state == CONN_CLOSED && c->pending == 0 && !c->batching &&
	    conn_state_ok(c));
	batch_clear(c);
	free(c->segs);
	ks_buf_close(&c->in);
	ks_buf_close(&c->out);
	free(c);
}

static void on_close(uv_handle_t *h)
{
	assert(((ks_conn_t *)h)->state == CONN_CLOSED);
	conn_unref((ks_conn_t *)h);
}

static void conn_close(ks_conn_t *c)
{
	ks_conns_t *set = c->set;

	if (c->state == CONN_CLOSED)
		return;
	c->state = CONN_CLOSED;
	turn_dequeue(c);
	if (c->prev)
		c->prev->next = c->next;
	else
		set->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	set->n--;
	if (c->user) {
		c->user->conns--;
		ks_admit_release(set, c->user);
		if (c->pending == 0)
			c->user = NULL;
	}
	assert(conn_state_ok(c));
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

/* A draining connection with nothing pending is shut down. */
static void conn_settle(ks_conn_t *c)
{
	uv_shutdown_t *req;

	if (c->state != CONN_DRAINING || c->pending > 0)
		return;
	c->state = CONN_SHUTTING;
	assert(conn_state_ok(c));
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

void ks_conn_wait(ks_conn_t *c)
{
	assert(conn_state_ok(c));
	c->refs++;
	c->pending++;
	if (c->user)
		c->user->waiting++;
}

void ks_conn_done(ks_conn_t *c)
{
	ks_conn_user_t *u = c->user;

	/* Every done ends a wait. */
	assert(c->pending > 0 && conn_state_ok(c));
	c->pending--;
	c->active_ms = uv_now(c->set->loop);
	if (u) {
		u->waiting--;
		if (c->state == CONN_CLOSED && c->pending == 0)
			c->user = NULL;
		ks_admit_release(c->set, u);
	}
	/* The request's reference: the last one (its handle closed) frees
	 * C, which is CLOSED and has nothing to settle. */
	if (c->refs == 1) {
		conn_unref(c);
		return;
	}
	c->refs--;
	conn_settle(c);
}

static void flush(ks_conn_t *c);

void ks_conn_drain(ks_conn_t *c)
{
	if (c->state != CONN_OPEN)
		return;
	/* What the batch holds goes before the shutdown. */
	if (c->nsegs)
		flush(c);
	if (c->state != CONN_OPEN)
		return;
	c->state = CONN_DRAINING;
	turn_dequeue(c);
	update_reading(c);
	assert(conn_state_ok(c));
	conn_settle(c);
}

void ks_conns_pause_all(ks_conns_t *set)
{
	ks_conn_t *c;

	set->stopping = 1;
	for (c = set->head; c; c = c->next)
		update_reading(c);
}

void ks_conns_drain_all(ks_conns_t *set)
{
	ks_conn_t *c, *next;

	for (c = set->head; c; c = next) {
		next = c->next;
		ks_conn_drain(c);
	}
}

void ks_conns_close_all(ks_conns_t *set)
{
	ks_conn_t *c, *next;

	for (c = set->head; c; c = next) {
		next = c->next;
		conn_close(c);
	}
}

/* ---- reading on and off ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* This connection's share of the global budget of unsent bytes. */
static int over_share(const ks_conn_t *c)
{
	const ks_conns_t *set = c->set;

	return set->unsent_total > KS_MAX_WRITE_QUEUE_TOTAL &&
	    c->unsent > KS_MAX_WRITE_QUEUE_TOTAL / (size_t)(set->n ?
	    set->n : 1);
}

/* Whether C's buffered input holds something a turn can act on: a whole
 * frame, or a prefix so bad that it is answered at once.  An unfinished
 * frame is not: it waits for more bytes (and the read deadline). */
static int input_ready(const ks_conn_t *c)
{
	size_t avail = c->in.len - c->in_off;
	uint32_t hl, pl;
	int rc;

	if (avail == 0)
		return 0;
	rc = ks_frame_peek((const uint8_t *)c->in.data + c->in_off, avail,
	    KS_MAX_HEADER, 0, &hl, &pl);
	return rc < 0 || (rc == 0 && avail >= KS_FRAME_PREFIX + (size_t)hl);
}

/* Sets and clears the PAUSE_* bits, with their hysteresis, and starts or
 * stops reading to match. */
static void update_reading(ks_conn_t *c)
{
	ks_conns_t *set = c->set;
	size_t backlog = c->in.len - c->in_off;
	int want;

	/* The common case, reading and nothing queued anywhere: as is. */
	if (c->reading && !c->paused && !c->unsent && !set->unsent_total &&
	    backlog <= KS_MAX_READ_BACKLOG && !set->stopping &&
	    c->state == CONN_OPEN && !c->eof)
		return;

	if (c->unsent > KS_MAX_WRITE_QUEUE)
		c->paused |= PAUSE_WRITE;
	else if (c->unsent < KS_MAX_WRITE_QUEUE / 2)
		c->paused &= ~PAUSE_WRITE;
	if (backlog > KS_MAX_READ_BACKLOG)
		c->paused |= PAUSE_INPUT;
	else if (backlog < KS_MAX_READ_BACKLOG / 2)
		c->paused &= ~PAUSE_INPUT;
	if (over_share(c)) {
		if (!(c->paused & PAUSE_GLOBAL))
			set->paused_global++;
		c->paused |= PAUSE_GLOBAL;
	} else if (set->unsent_total < KS_MAX_WRITE_QUEUE_TOTAL / 2) {
		c->paused &= ~PAUSE_GLOBAL;
	}
	/* Input already read waits while replies cannot be sent: a small
	 * request can make a large reply. */
	if (!(c->paused & (PAUSE_WRITE | PAUSE_GLOBAL)) && c->state ==
	    CONN_OPEN && !c->turn_queued && input_ready(c))
		turn_enqueue(c);
	want = c->state == CONN_OPEN && !set->stopping && !c->paused &&
	    !c->eof;
	if (want && !c->reading) {
		if (uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read))
			conn_close(c);
		else
			c->reading = 1;
	} else if (!want && c->reading) {
		uv_read_stop((uv_stream_t *)&c->pipe);
		c->reading = 0;
	}
}

/* ---- the write path ----
 *
 * Replies are gathered into a batch: their headers are appended to c->out
 * and each reply adds segments (a span of c->out, bytes an artifact owns
 * and keeps alive by a reference, or bytes that live as long as the
 * daemon).  Outside a turn every reply is flushed at once; during a turn
 * (process_input) the batch is flushed once at its end, so the replies to
 * everything one read brought go out in one write, or as soon as it
 * holds KS_MAX_BATCH_BYTES, so that the client reads the first replies
 * while the daemon reads the next artifacts from disk.  A flush tries a
 * vectored write; what the socket does not take is queued in a write
 * request that copies the spans of c->out and keeps the references.
 */

/* Makes room for N more segments. */
static int segs_reserve(ks_conn_t *c, size_t n)
{
	size_t cap;
	ks_seg_t *segs;

	if (c->nsegs + n <= c->capsegs)
		return 0;
	cap = c->capsegs ? 2 * c->capsegs : 16;
	while (cap < c->nsegs + n)
		cap *= 2;
	segs = realloc(c->segs, cap * sizeof *segs);
	if (!segs)
		return -1;
	c->segs = segs;
	c->capsegs = cap;
	return 0;
}

static inline int seg_add(ks_conn_t *c, int kind, const void *p,
    size_t off, size_t len, ks_artifact_t *art)
{
	ks_seg_t *s;

	if (len == 0)
		return 0;
	if (c->nsegs == c->capsegs && segs_reserve(c, 1))
		return -1;
	s = &c->segs[c->nsegs++];
	s->kind = kind;
	s->p = p;
	s->off = off;
	s->len = len;
	s->art = art;
	if (art)
		ks_artifact_ref(art);
	c->batch_bytes += len;
	return 0;
}

/* The frame prefix at P: header and payload lengths, big-endian. */
static inline void put_prefix(char *p, uint32_t header, uint32_t payload)
{
	p[0] = (char)(header >> 24);
	p[1] = (char)(header >> 16);
	p[2] = (char)(header >> 8);
	p[3] = (char)header;
	p[4] = (char)(payload >> 24);
	p[5] = (char)(payload >> 16);
	p[6] = (char)(payload >> 8);
	p[7] = (char)payload;
}

/* Drops the batch: references, spans, the header bytes. */
static void batch_clear(ks_conn_t *c)
{
	size_t i;

	for (i = 0; i < c->nsegs; i++)
		if (c->segs[i].art)
			ks_artifact_unref(c->segs[i].art);
	c->nsegs = 0;
	c->batch_bytes = 0;
	ks_buf_reset(&c->out);
	c->reply_open = 0;
}

static const char *seg_base(const ks_conn_t *c, const ks_seg_t *s)
{
	return s->kind == SEG_OUT ? c->out.data + s->off : s->p;
}

static void on_write(uv_write_t *req, int status)
{
	ks_wreq_t *w = (ks_wreq_t *)req;
	ks_conn_t *c = w->conn;
	ks_conns_t *set = c->set;
	ks_conn_t *o;
	int was_over = set->unsent_total >= KS_MAX_WRITE_QUEUE_TOTAL / 2;
	size_t i;

	c->unsent -= w->bytes;
	set->unsent_total -= w->bytes;
	for (i = 0; i < w->narts; i++)
		ks_artifact_unref(w->arts[i]);
	free(w);
	if (status < 0) {
		conn_close(c);
		return;
	}
	c->active_ms = uv_now(c->set->loop);
	if (c->state == CONN_OPEN)
		update_reading(c);
	/* Once the total is back under half the budget, every connection
	 * it paused may read again. */
	if (was_over && set->unsent_total < KS_MAX_WRITE_QUEUE_TOTAL / 2)
		for (o = set->head; o; o = o->next)
			if (o->paused & PAUSE_GLOBAL)
				update_reading(o);
}

/* Queues what a try write left of the batch, from segment FIRST at byte
 * SKIP on. */
static int queue_rest(ks_conn_t *c, size_t first, size_t skip)
{
	size_t i, copy = 0, nbufs = 0, narts = 0, total = 0, at;
	uv_buf_t *bufs;
	ks_wreq_t *w;
	char *data;

	for (i = first; i < c->nsegs; i++) {
		size_t len = c->segs[i].len - (i == first ? skip : 0);

		total += len;
		nbufs++;
		if (c->segs[i].kind == SEG_OUT)
			copy += len;
		narts += c->segs[i].art != NULL;
	}
	w = malloc(sizeof *w + nbufs * sizeof *bufs + narts *
	    sizeof(ks_artifact_t *) + copy);
	if (!w)
		return -1;
	bufs = (uv_buf_t *)(w + 1);
	w->arts = (ks_artifact_t **)(bufs + nbufs);
	data = (char *)(w->arts + narts);
	w->conn = c;
	w->bytes = total;
	w->narts = 0;
	for (i = first, nbufs = 0, at = 0; i < c->nsegs; i++) {
		ks_seg_t *s = &c->segs[i];
		size_t off = i == first ? skip : 0, len = s->len - off;
		const char *base = seg_base(c, s) + off;

		if (s->kind == SEG_OUT) {
			memcpy(data + at, base, len);
			bufs[nbufs++] = uv_buf_init(data + at, (unsigned)len);
			at += len;
		} else {
			bufs[nbufs++] = uv_buf_init((char *)base,
			    (unsigned)len);
		}
		if (s->art) {
			w->arts[w->narts++] = s->art;
			s->art = NULL;      /* the write request's now */
		}
	}
	if (uv_write(&w->req, (uv_stream_t *)&c->pipe, bufs,
	    (unsigned)nbufs, on_write) != 0) {
		for (i = 0; i < w->narts; i++)
			ks_artifact_unref(w->arts[i]);
		free(w);
		return -1;
	}
	c->unsent += total;
	c->set->unsent_total += total;
	return 0;
}

/* Writes the batch: one vectored write, the rest queued. */
static void flush(ks_conn_t *c)
{
	uv_buf_t bufs[64];
	size_t done = 0, n, first, total = 0;
	ssize_t wrote = UV_EAGAIN;

	if (!c->nsegs) {
		batch_clear(c);
		return;
	}
	if (!ks_conn_live(c)) {
		batch_clear(c);
		return;
	}
	/* Behind queued replies, a try write would reorder the stream. */
	while (!c->unsent && done < c->nsegs) {
		for (n = 0, total = 0; n < 64 && done + n < c->nsegs; n++) {
			ks_seg_t *s = &c->segs[done + n];

			bufs[n] = uv_buf_init((char *)seg_base(c, s),
			    (unsigned)s->len);
			total += s->len;
		}
		wrote = uv_try_write((uv_stream_t *)&c->pipe, bufs,
		    (unsigned)n);
		if (wrote < 0)
			break;
		if ((size_t)wrote < total)
			break;
		done += n;
	}
	if (wrote < 0 && wrote != UV_EAGAIN) {
		batch_clear(c);
		conn_close(c);
		return;
	}
	if (done < c->nsegs) {
		/* Part of segments [done, done + n) went: find where. */
		size_t skip = wrote > 0 ? (size_t)wrote : 0;

		for (first = done; first < c->nsegs && skip >=
		    c->segs[first].len; first++)
			skip -= c->segs[first].len;
		if (queue_rest(c, first, skip) != 0) {
			batch_clear(c);
			conn_close(c);
			return;
		}
	} else {
		c->active_ms = uv_now(c->set->loop);
	}
	batch_clear(c);
	if (c->state == CONN_OPEN)
		update_reading(c);
}

/* Ends the reply begun at c->reply_prefix: its frame prefix (the header
 * counts the static segments it has too), its last span of c->out, and
 * ART's bytes as payload unless NULL. */
static void reply_close(ks_conn_t *c, ks_artifact_t *art)
{
	size_t plen = art ? art->len : 0;
	size_t header = c->out.len - c->reply_prefix + c->static_len -
	    KS_FRAME_PREFIX;

	if (!c->out.data) {
		conn_close(c);
		return;
	}
	put_prefix(c->out.data + c->reply_prefix, (uint32_t)header,
	    (uint32_t)plen);
	c->reply_open = 0;
	if (seg_add(c, SEG_OUT, NULL, c->reply_span, c->out.len -
	    c->reply_span, NULL) || (art && seg_add(c, SEG_ART, art->bytes, 0,
	    plen, art))) {
		batch_clear(c);
		conn_close(c);
		return;
	}
	if (!c->batching)
		flush(c);
}

void ks_reply_send(ks_conn_t *c, ks_artifact_t *art)
{
	if (c->reply_open)
		reply_close(c, art);
}

/* Room for the frame prefix, an id and the fixed fields of a reply. */
#define HEAD_ROOM 96

static void reply_start(ks_conn_t *c)
{
	static const char zero[KS_FRAME_PREFIX];
	size_t i;

	/* A reply begun and not sent (an op that turned to an error) is
	 * dropped, with the segments it had. */
	if (c->reply_open) {
		c->out.len = c->reply_prefix;
		for (i = c->reply_seg0; i < c->nsegs; i++) {
			c->batch_bytes -= c->segs[i].len;
			if (c->segs[i].art)
				ks_artifact_unref(c->segs[i].art);
		}
		c->nsegs = c->reply_seg0;
	}
	c->reply_prefix = c->reply_span = c->out.len;
	c->reply_seg0 = c->nsegs;
	c->static_len = 0;
	c->reply_open = 1;
	/* Room for the fixed fields of a reply (ks_reply_begin, the source
	 * and closing brace of ks_reply_artifact) and its segments. */
	if (ks_buf_reserve(&c->out, HEAD_ROOM) == KS_OK &&
	    segs_reserve(c, 6) == 0) {
		memcpy(c->out.data + c->out.len, zero, sizeof zero);
		c->out.len += sizeof zero;
	} else {
		/* Out of memory: the reply cannot be built, and a client
		 * left waiting for it would wait for ever; it sees the
		 * connection close instead. */
		c->reply_open = 0;
		conn_close(c);
	}
}

/* Appends the constant STR (a literal, with its NUL, so c->out stays a
 * string) to c->out, whose room was reserved: no call per piece on the
 * hit path. */
#define PUT(c, str) do {                                                \
		memcpy((c)->out.data + (c)->out.len, str, sizeof str);   \
		(c)->out.len += sizeof str - 1;                          \
	} while (0)

void ks_reply_begin(ks_conn_t *c, int has_id, uint64_t id)
{
	char digits[24], *p = digits + sizeof digits;
	size_t n;

	reply_start(c);
	if (!c->reply_open)
		return;
	if (!has_id) {
		PUT(c, "{\"ok\":true");
		return;
	}
	do {
		*--p = (char)('0' + id % 10);
		id /= 10;
	} while (id);
	n = (size_t)(digits + sizeof digits - p);
	PUT(c, "{\"id\":");
	memcpy(c->out.data + c->out.len, p, n);
	c->out.len += n;
	PUT(c, ",\"ok\":true");
}

void ks_reply_end(ks_conn_t *c, size_t payload_len)
{
	(void)payload_len;
	ks_buf_append(&c->out, "}", 1);
}

void ks_reply_finish(ks_conn_t *c)
{
	ks_reply_end(c, 0);
	ks_reply_send(c, NULL);
}

void ks_reply_err(ks_conn_t *c, int has_id, uint64_t id, int code,
    const char *msg)
{
	reply_start(c);
	ks_reply_error(&c->out, has_id, id, code, msg);
	ks_reply_send(c, NULL);
}

/* An error reply of the connection layer's own (a frame, a time limit,
 * a refusal): no request's, told to the owner (on_error) to count. */
static void conn_err(ks_conn_t *c, int code, const char *msg)
{
	if (c->set->on_error)
		c->set->on_error(c, code, msg);
	ks_reply_err(c, 0, 0, code, msg);
}

/* Appends LEN bytes at P to the reply being built without copying them:
 * they live as long as the daemon, or as ART, which is referenced while
 * they wait to be sent. */
static void reply_external(ks_conn_t *c, const void *p, size_t len,
    ks_artifact_t *art)
{
	if (!c->reply_open || !c->out.data)
		return;
	/* The span of c->out so far, then P..P+LEN; what the op appends
	 * next starts another span. */
	if (seg_add(c, SEG_OUT, NULL, c->reply_span, c->out.len -
	    c->reply_span, NULL) || seg_add(c, art ? SEG_ART : SEG_STATIC, p,
	    0, len, art)) {
		batch_clear(c);
		conn_close(c);
		return;
	}
	c->static_len += len;
	c->reply_span = c->out.len;
}

void ks_reply_static(ks_conn_t *c, const void *p, size_t len)
{
	reply_external(c, p, len, NULL);
}

void ks_reply_artifact(ks_conn_t *c, int has_id, uint64_t id,
    const char *source, ks_artifact_t *a, int meta_only)
{
	/* The stored fields are sent from the artifact itself: only the id
	 * and the source are written per reply. */
	size_t n = strlen(source);

	ks_reply_begin(c, has_id, id);
	if (!c->reply_open || n > 16) {
		conn_close(c);
		return;
	}
	/* HEAD_ROOM holds these (reply_start). */
	PUT(c, ",\"source\":\"");
	memcpy(c->out.data + c->out.len, source, n);
	c->out.len += n;
	PUT(c, "\",");
	reply_external(c, a->meta, a->meta_len, a);
	PUT(c, "}");
	if (c->reply_open)
		reply_close(c, meta_only ? NULL : a);
}

/* ---- the read path ---- */

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

/* Hands at most a turn's worth of complete frames to the request
 * callback; more wait for the next turn. */
static void process_input(ks_conn_t *c)
{
	uint32_t hl, pl;
	size_t avail;
	char msg[128];
	int rc, handled = 0;

	c->batching = 1;
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
			c->set->bad_frames++;
			conn_err(c, rc, msg);
			c->batching = 0;
			flush(c);
			ks_conn_drain(c);
			return;
		}
		if (avail < KS_FRAME_PREFIX + (size_t)hl)
			break;
		if (c->paused & (PAUSE_WRITE | PAUSE_GLOBAL))
			break;          /* resumed by update_reading */
		if (handled == KS_MAX_REQUESTS_PER_TURN) {
			c->set->turns_yielded++;
			turn_enqueue(c);
			break;
		}
		c->set->on_request(c, c->in.data + c->in_off + KS_FRAME_PREFIX,
		    hl);
		c->in_off += KS_FRAME_PREFIX + hl;
		handled++;
		/* Large replies (artifacts read from disk, say) go out
		 * while the next requests are handled. */
		if (c->batch_bytes >= KS_MAX_BATCH_BYTES)
			flush(c);
		/* A reply can pause the connection: send what the batch
		 * holds before looking at more. */
		if (c->paused & (PAUSE_WRITE | PAUSE_GLOBAL))
			break;
	}
	c->batching = 0;
	if (c->nsegs)
		flush(c);       /* updates reading */
	else if (c->state == CONN_OPEN)
		update_reading(c);
	if (handled)
		c->active_ms = uv_now(c->set->loop);
	if (c->in_off == c->in.len) {
		c->in_off = 0;
		ks_buf_reset(&c->in);
	} else if (c->in_off > READ_CHUNK) {
		memmove(c->in.data, c->in.data + c->in_off,
		    c->in.len - c->in_off);
		c->in.len -= c->in_off;
		c->in_off = 0;
	}
	/* An unfinished frame starts the read deadline; a finished one (or
	 * a frame waiting only for its turn) stops it. */
	if (c->in.len == c->in_off || c->turn_queued)
		c->frame_ms = 0;
	else if (!c->frame_ms)
		c->frame_ms = uv_now(c->set->loop);
	/* Half-closed: once every whole frame has been answered (or waits
	 * only on a compile), nothing more will come. */
	if (c->eof && c->state == CONN_OPEN && !c->turn_queued &&
	    !input_ready(c))
		ks_conn_drain(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	ks_conn_t *c = (ks_conn_t *)s;

	if (nread == UV_EOF) {
		/* Half-close: the peer sends no more, but may still read the
		 * replies to what it sent, all of it, even what waits for a
		 * turn; process_input drains once none is left. */
		c->eof = 1;
		if (c->state == CONN_OPEN && (c->turn_queued ||
		    input_ready(c))) {
			update_reading(c);          /* stops reading */
			return;
		}
		ks_conn_drain(c);
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
	c->active_ms = uv_now(c->set->loop);
	if (!c->turn_queued)
		process_input(c);
	else
		update_reading(c);
}

/* ---- deadlines ---- */

static void on_sweep(uv_timer_t *t)
{
	ks_conns_t *set = t->data;
	uint64_t now = uv_now(set->loop);
	ks_conn_t *c, *next;
	char msg[128];

	for (c = set->head; c; c = next) {
		next = c->next;
		if (c->state != CONN_OPEN)
			continue;
		if (set->lim.read_ms && c->frame_ms && now - c->frame_ms >
		    set->lim.read_ms) {
			snprintf(msg, sizeof msg, "a request was not complete "
			    "within %llu s; closing", (unsigned long long)
			    (set->lim.read_ms / 1000));
			set->read_timeouts++;
			conn_err(c, KS_E_TIMEOUT, msg);
			ks_conn_drain(c);
			continue;
		}
		if (set->lim.idle_ms && c->pending == 0 && !c->frame_ms &&
		    !c->turn_queued && now - c->active_ms > set->lim.idle_ms) {
			set->idle_closed++;
			ks_conn_drain(c);
		}
	}
}

/* ---- accepting ---- */

void ks_conns_on_connection(uv_stream_t *l, int status)
{
	ks_conns_t *set = l->data;
	char msg[320];
	ks_conn_t *c;
	int rc;

	if (status < 0) {
		ks_log(KS_LOG_WARN, "accept: %s", uv_strerror(status));
		return;
	}
	c = calloc(1, sizeof *c);
	if (!c)
		return;
	c->set = set;
	c->refs = 1;
	c->id = ++set->next_id;
	c->active_ms = uv_now(c->set->loop);
	ks_buf_init(&c->in);
	ks_buf_init(&c->out);
	uv_pipe_init(set->loop, &c->pipe, 0);
	if (uv_accept(l, (uv_stream_t *)&c->pipe) != 0) {
		c->state = CONN_CLOSED;
		uv_close((uv_handle_t *)&c->pipe, on_close);
		return;
	}
	c->next = set->head;
	if (set->head)
		set->head->prev = c;
	set->head = c;
	set->n++;
	set->total++;
	/* Who may connect, and how many: admit.c.  A peer whose credentials
	 * cannot be read is closed; one refused is told why, then drained. */
	rc = ks_admit(set, c, msg, sizeof msg);
	if (rc == KS_ADMIT_CLOSE) {
		conn_close(c);
		return;
	}
	if (rc != KS_OK) {
		conn_err(c, rc, msg);
		ks_conn_drain(c);
		return;
	}
	update_reading(c);
}
