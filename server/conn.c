/*
 * Connections: accept, peer check, framing of requests, the write path of
 * replies with backpressure, and the connection state machine (conn.h).
 *
 * Replies are written with uv_try_write straight from the connection's
 * header buffer and the artifact's bytes; only what the socket does not
 * take at once is copied into a write request, which holds a reference on
 * the artifact until it is written.  A libuv handle is freed only in its
 * close callback; a connection that must close is marked CLOSED and torn
 * down here, never inside another layer's callback.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../proto/proto.h"
#include "conn.h"

#define READ_CHUNK 65536

typedef struct {
	uv_write_t req;
	ks_conn_t *conn;
	ks_artifact_t *art;      /* payload, referenced; may be NULL */
	size_t hdr_len;
	char hdr[];              /* unwritten prefix+header bytes */
} ks_wreq_t;

static void conn_resume(ks_conn_t *c);

void ks_conns_init(ks_conns_t *set, uv_loop_t *loop, int max,
    ks_conn_request_fn on_request, void *owner)
{
	memset(set, 0, sizeof *set);
	set->loop = loop;
	set->max = max;
	set->on_request = on_request;
	set->owner = owner;
}

static void conn_unref(ks_conn_t *c)
{
	if (--c->refs > 0)
		return;
	ks_buf_close(&c->in);
	ks_buf_close(&c->out);
	free(c);
}

static void on_close(uv_handle_t *h)
{
	conn_unref((ks_conn_t *)h);
}

static void conn_close(ks_conn_t *c)
{
	ks_conns_t *set = c->set;

	if (c->state == CONN_CLOSED)
		return;
	c->state = CONN_CLOSED;
	if (c->prev)
		c->prev->next = c->next;
	else
		set->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	set->n--;
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
	c->refs++;
	c->pending++;
}

void ks_conn_done(ks_conn_t *c)
{
	c->pending--;
	conn_settle(c);
	conn_unref(c);
}

void ks_conn_drain(ks_conn_t *c)
{
	if (c->state != CONN_OPEN)
		return;
	c->state = CONN_DRAINING;
	if (c->reading)
		uv_read_stop((uv_stream_t *)&c->pipe);
	c->reading = 0;
	conn_settle(c);
}

void ks_conns_pause_all(ks_conns_t *set)
{
	ks_conn_t *c;

	set->stopping = 1;
	for (c = set->head; c; c = c->next) {
		if (c->reading) {
			uv_read_stop((uv_stream_t *)&c->pipe);
			c->reading = 0;
		}
	}
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

/* ---- the write path ---- */

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
	if (c->state == CONN_OPEN && !c->reading && !c->set->stopping &&
	    c->pipe.write_queue_size < KS_MAX_WRITE_QUEUE / 2)
		conn_resume(c);
}

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

void ks_reply_end(ks_conn_t *c, size_t payload_len)
{
	ks_buf_puts(&c->out, "}");
	ks_frame_prefix((uint8_t *)c->out.data,
	    (uint32_t)(c->out.len - KS_FRAME_PREFIX), (uint32_t)payload_len);
}

void ks_reply_finish(ks_conn_t *c)
{
	ks_reply_end(c, 0);
	ks_reply_send(c, NULL);
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

void ks_reply_artifact(ks_conn_t *c, int has_id, uint64_t id,
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

/* Hands every complete frame read so far to the request callback. */
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
			c->set->bad_frames++;
			ks_reply_err(c, 0, 0, rc, msg);
			ks_conn_drain(c);
			return;
		}
		if (avail < KS_FRAME_PREFIX + (size_t)hl)
			break;
		c->set->on_request(c, c->in.data + c->in_off + KS_FRAME_PREFIX,
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
	process_input(c);
}

static void conn_resume(ks_conn_t *c)
{
	if (uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) == 0)
		c->reading = 1;
	else
		conn_close(c);
}

/* Only our own uid (and root) may talk to the daemon.  Records the
 * peer's uid, which the compile scheduler uses. */
static int peer_allowed(ks_conn_t *c)
{
	struct ucred cred;
	socklen_t len = sizeof cred;
	uv_os_fd_t fd;

	if (uv_fileno((uv_handle_t *)&c->pipe, &fd) != 0)
		return 0;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
		return 0;
	c->uid = (uint32_t)cred.uid;
	return cred.uid == getuid() || cred.uid == 0;
}

void ks_conns_on_connection(uv_stream_t *l, int status)
{
	ks_conns_t *set = l->data;
	ks_conn_t *c;

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
	if (!peer_allowed(c)) {
		ks_log(KS_LOG_WARN, "refused a connection from another user");
		conn_close(c);
		return;
	}
	if (set->n > set->max || set->stopping) {
		ks_reply_err(c, 0, 0, set->stopping ? KS_E_SHUTTING_DOWN :
		    KS_E_BUSY, set->stopping ? "daemon is shutting down" :
		    "too many connections");
		ks_conn_drain(c);
		return;
	}
	conn_resume(c);
}
