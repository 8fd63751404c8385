/*
 * client: the public client library (include/kspec.h).
 *
 * One request at a time per connection: send a frame, read one reply
 * frame, check that its id is the request's (kspec_get_many, and
 * kspec_send/kspec_recv, pipeline instead).  Connection states:
 *   connected (fd >= 0) -- any transport failure, a malformed reply frame or
 *   a reply for another id --> closed (fd == -1), every later call fails
 *   with KSPEC_E_CONNECT.  A reply whose header is well framed but not what
 *   the op expects is KSPEC_E_PROTO and leaves the stream usable, since the
 *   whole frame was read.
 *
 * Replies are parsed with cJSON from a NUL-terminated copy of exactly the
 * header bytes, like the daemon does with requests.  Requests are built
 * with ks_buf and ks_buf_json_str, which prints int64 shape values exactly.
 *
 * System calls: a request's frame (prefix and header) goes out in one
 * send, built in the client's reused frame buffer, and kspec_get_many's
 * frames together, a send per SEND_BATCH bytes of them.
 * Replies are read through a READ_BUF buffer, so that a frame's prefix,
 * header and the start of its payload, or several small replies, come in
 * one recv; anything that waits on the socket (poll) looks in that
 * buffer first.  Fewer calls also mean fewer wake-ups of the daemon,
 * which is woken each time a read frees room in the socket.
 */
#define _POSIX_C_SOURCE 200809L
#include "../include/kspec.h"

#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cJSON.h>

#include "../base/base.h"
#include "../proto/proto.h"
#include "../proto/reply.h"

/* kspec.h repeats base.h's error table for outside users: keep them equal. */
#define KS_SAME_CODE(name, val, msg)                                         \
	_Static_assert((int)KSPEC_E_##name == (int)KS_E_##name,            \
	    "kspec.h and base.h disagree on E_" #name);
KS_ERRNO_MAP(KS_SAME_CODE)
#undef KS_SAME_CODE

/* Largest payload read at once when discarding one. */
#define DISCARD_CHUNK 65536
/* Replies are read through a buffer of this size: a frame's prefix, its
 * header and the start of its payload (or several small replies) come in
 * one recv.  The rest of a payload at least this large is read straight
 * into its own buffer. */
#define READ_BUF 32768
/* kspec_get_many sends its request frames a batch of this many bytes at
 * a time. */
#define SEND_BATCH 65536

struct kspec_client {
	int fd;                         /* -1 once closed */
	int send_errno;                 /* a send the daemon did not take */
	uint64_t next_id;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char code[32];                  /* wire name of the last failure */
	char message[512];              /* its one-line message */
	char deployment[65];            /* declared in every get, or "" */
	ks_buf_t frames;                /* request frames not yet sent */
	size_t rpos, rlen;              /* unread bytes: rbuf[rpos, rlen) */
	uint8_t rbuf[READ_BUF];
};

/* A reply frame as read: header text (NUL-terminated), parsed header,
 * payload when one was wanted. */
typedef struct {
	char *header;
	size_t header_len;
	cJSON *json;
	uint8_t *payload;
	size_t payload_len;
} reply_t;

/* The artifact and the storage behind its strings. */
typedef struct {
	kspec_artifact_t pub;
	char *strings[7];
} artifact_t;

const char *kspec_err_name(int err)
{
	return ks_err_name(err);
}

const char *kspec_strerror(int err)
{
	return ks_strerror(err);
}

void kspec_free(void *p)
{
	free(p);
}

int kspec_default_socket(char *buf, size_t len)
{
	return ks_proto_default_socket(KS_SOCKET_CLIENT, buf, len);
}

/* Records a failure on C (code name from RC) and returns RC. */
__attribute__((format(printf, 3, 4)))
static int set_error(kspec_client_t *c, int rc, const char *fmt, ...)
{
	va_list ap;

	snprintf(c->code, sizeof c->code, "%s", ks_err_name(rc));
	va_start(ap, fmt);
	vsnprintf(c->message, sizeof c->message, fmt, ap);
	va_end(ap);
	return rc;
}

static void clear_error(kspec_client_t *c)
{
	c->code[0] = '\0';
	c->message[0] = '\0';
}

static void drop(kspec_client_t *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->send_errno = 0;
	c->rpos = c->rlen = 0;
}

/* A transport failure: the stream is unusable from here on. */
static int lost(kspec_client_t *c, const char *why)
{
	drop(c);
	return set_error(c, KSPEC_E_CONNECT, "lost connection to %s: %s",
	    c->path, why);
}

/* A reply that breaks the framing: the stream cannot be resynced. */
static int broken(kspec_client_t *c, const char *why)
{
	drop(c);
	return set_error(c, KSPEC_E_PROTO, "%s", why);
}

static int send_all(kspec_client_t *c, const void *p, size_t n)
{
	const char *q = p;
	ssize_t k;

	while (n) {
		k = send(c->fd, q, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EPIPE || errno == ECONNRESET)) {
			/* The daemon closed its end, maybe after saying why
			 * (a refused peer is told so first): the reply read
			 * finds that, or the end of the stream. */
			c->send_errno = errno;
			return KSPEC_OK;
		}
		if (k < 0)
			return lost(c, strerror(errno));
		q += k;
		n -= (size_t)k;
	}
	return KSPEC_OK;
}

/* Reads N bytes: first what the buffer holds, then from the socket,
 * through the buffer unless N is at least its size. */
static int recv_all(kspec_client_t *c, void *p, size_t n)
{
	char *q = p;
	ssize_t k;
	size_t have;

	while (n) {
		have = c->rlen - c->rpos;
		if (have) {
			if (have > n)
				have = n;
			memcpy(q, c->rbuf + c->rpos, have);
			c->rpos += have;
			q += have;
			n -= have;
			continue;
		}
		if (n >= READ_BUF)
			k = recv(c->fd, q, n, 0);
		else
			k = recv(c->fd, c->rbuf, READ_BUF, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return lost(c, strerror(errno));
		if (k == 0)
			return lost(c, c->send_errno ?
			    strerror(c->send_errno) :
			    "kspecd closed the connection");
		if (n >= READ_BUF) {
			q += k;
			n -= (size_t)k;
		} else {
			c->rpos = 0;
			c->rlen = (size_t)k;
		}
	}
	return KSPEC_OK;
}

/* Reads and drops N payload bytes, keeping the stream in step. */
static int discard(kspec_client_t *c, size_t n)
{
	char chunk[DISCARD_CHUNK];
	size_t k;
	int rc;

	while (n) {
		k = n < sizeof chunk ? n : sizeof chunk;
		rc = recv_all(c, chunk, k);
		if (rc)
			return rc;
		n -= k;
	}
	return KSPEC_OK;
}

static void reply_free(reply_t *r)
{
	cJSON_Delete(r->json);
	free(r->header);
	free(r->payload);
	memset(r, 0, sizeof *r);
}

static const char *json_string(const cJSON *obj, const char *name)
{
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(obj, name);

	return cJSON_IsString(m) ? m->valuestring : NULL;
}

/*
 * Turns an ok:false reply into the daemon's error: code and message kept
 * verbatim, the return value its KSPEC_E_* (KSPEC_E_INTERNAL for a code
 * this library does not know).
 */
static int daemon_error(kspec_client_t *c, const cJSON *json)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(json, "error");
	const char *code = json_string(e, "code");
	const char *msg = json_string(e, "message");

	if (!cJSON_IsObject(e) || !code)
		return set_error(c, KSPEC_E_PROTO,
		    "error reply without an error code");
	snprintf(c->code, sizeof c->code, "%s", code);
	snprintf(c->message, sizeof c->message, "%s",
	    msg && *msg ? msg : ks_strerror(ks_err_from_name(code)));
	return ks_err_from_name(code);
}

/* Appends to c->frames the frame of request header REQ: prefix, then
 * REQ.  On failure the frames not yet sent are dropped. */
static int frame_append(kspec_client_t *c, const ks_buf_t *req)
{
	uint8_t prefix[KS_FRAME_PREFIX];
	int rc = KSPEC_OK;

	if (req->len > KS_MAX_HEADER) {
		rc = set_error(c, KSPEC_E_TOO_LARGE, "request header is "
		    "longer than %u bytes", KS_MAX_HEADER);
	} else {
		ks_frame_prefix(prefix, (uint32_t)req->len, 0);
		if (ks_buf_append(&c->frames, prefix, sizeof prefix) ||
		    ks_buf_append(&c->frames, req->data, req->len))
			rc = set_error(c, KSPEC_E_NOMEM, "out of memory");
	}
	if (rc)
		ks_buf_reset(&c->frames);
	return rc;
}

/* Sends c->frames (one send for all of them, as a rule) and empties it. */
static int send_frames(kspec_client_t *c)
{
	int rc;

	if (c->fd < 0)
		rc = set_error(c, KSPEC_E_CONNECT, "not connected to %s",
		    c->path);
	else
		rc = send_all(c, c->frames.data, c->frames.len);
	ks_buf_reset(&c->frames);
	return rc;
}

static int send_request(kspec_client_t *c, const ks_buf_t *req)
{
	int rc = frame_append(c, req);

	return rc ? rc : send_frames(c);
}

/*
 * Reads one reply whose id lies in [lo, hi] into R (*id_out is its id).
 * WANT_PAYLOAD(ctx, id) tells whether that request asked for a payload.
 * A daemon error reply returns its code with R freed but *id_out set.
 */
static int recv_reply(kspec_client_t *c, uint64_t lo, uint64_t hi,
    int (*want_payload)(void *ctx, uint64_t id), void *ctx, reply_t *r,
    uint64_t *id_out)
{
	uint8_t prefix[KS_FRAME_PREFIX];
	uint32_t hlen, plen;
	const cJSON *rid, *ok;
	const char *end = NULL;
	int rc, want;

	memset(r, 0, sizeof *r);
	*id_out = UINT64_MAX;
	rc = recv_all(c, prefix, sizeof prefix);
	if (rc)
		return rc;
	rc = ks_frame_peek(prefix, sizeof prefix, KS_MAX_REPLY_HEADER,
	    KS_MAX_REPLY_PAYLOAD, &hlen, &plen);
	if (rc == KS_E_TOO_LARGE)
		return broken(c, "reply frame exceeds the client's limits");
	if (rc)
		return broken(c, "malformed reply frame");

	/* Without memory for a frame the stream cannot be kept in step. */
	r->header = malloc((size_t)hlen + 1);
	if (!r->header) {
		drop(c);
		return set_error(c, KSPEC_E_NOMEM,
		    "out of memory for a reply header of %u bytes", hlen);
	}
	r->header_len = hlen;
	rc = recv_all(c, r->header, hlen);
	if (rc)
		goto fail;
	r->header[hlen] = '\0';
	r->json = cJSON_ParseWithLengthOpts(r->header, (size_t)hlen + 1, &end,
	    1);
	if (!cJSON_IsObject(r->json)) {
		/* The frame's length keeps the stream in step. */
		rc = plen ? discard(c, plen) : KSPEC_OK;
		if (!rc)
			rc = set_error(c, KSPEC_E_PROTO,
			    "reply header is not a JSON object");
		goto fail;
	}
	/* An error reply may lack the id when the daemon could not read
	 * ours; any other id means replies and requests are out of step. */
	rid = cJSON_GetObjectItemCaseSensitive(r->json, "id");
	ok = cJSON_GetObjectItemCaseSensitive(r->json, "ok");
	if (rid && !(cJSON_IsNumber(rid) && rid->valuedouble >= (double)lo &&
	    rid->valuedouble <= (double)hi)) {
		rc = broken(c, "reply id does not match the request");
		goto fail;
	}
	if (rid)
		*id_out = (uint64_t)rid->valuedouble;
	want = rid && want_payload ? want_payload(ctx, *id_out) : 0;
	if (plen && want) {
		r->payload = malloc(plen);
		if (!r->payload) {
			drop(c);
			rc = set_error(c, KSPEC_E_NOMEM, "out of memory for "
			    "an artifact of %u bytes", plen);
			goto fail;
		}
		r->payload_len = plen;
		rc = recv_all(c, r->payload, plen);
	} else if (plen) {
		rc = discard(c, plen);
	}
	if (rc)
		goto fail;
	if (cJSON_IsFalse(ok)) {
		rc = daemon_error(c, r->json);
		goto fail;
	}
	if (!cJSON_IsTrue(ok) || !rid) {
		rc = set_error(c, KSPEC_E_PROTO,
		    "reply lacks \"ok\":true or its id");
		goto fail;
	}
	if (plen && !want) {
		rc = set_error(c, KSPEC_E_PROTO, "unexpected reply payload");
		goto fail;
	}
	return KSPEC_OK;
fail:
	reply_free(r);
	return rc;
}

static int reopen_if_closed(kspec_client_t *c);

static int want_yes(void *ctx, uint64_t id)
{
	return 1;
}

static int want_no(void *ctx, uint64_t id)
{
	return 0;
}

/*
 * Sends the request header REQ (id ID) and reads its reply into R.  The
 * payload is kept only when WANT_PAYLOAD, and is a protocol error
 * otherwise.  Returns KSPEC_OK for an ok:true reply, the daemon's error
 * for ok:false, or a local one.  R is empty unless KSPEC_OK.
 */
static int transact(kspec_client_t *c, const ks_buf_t *req, uint64_t id,
    int want_payload, reply_t *r)
{
	uint64_t got;
	int rc;

	memset(r, 0, sizeof *r);
	rc = reopen_if_closed(c);
	if (rc == KSPEC_OK)
		rc = send_request(c, req);
	if (rc)
		return rc;
	return recv_reply(c, id, id, want_payload ? want_yes : want_no, NULL,
	    r, &got);
}

/*
 * Why connect() on PATH was refused with EACCES, for people: a socket
 * open to a group names the group and how to join it (the socket, or its
 * directory when that is what stops the caller).
 */
static int denied(kspec_client_t *c)
{
	char dir[sizeof c->path], gbuf[4096], gname[64], *slash;
	struct group gr, *g = NULL;
	struct stat st;
	const char *what = "socket";

	if (stat(c->path, &st) != 0) {
		snprintf(dir, sizeof dir, "%s", c->path);
		slash = strrchr(dir, '/');
		if (slash && slash != dir)
			*slash = '\0';
		else
			snprintf(dir, sizeof dir, ".");
		if (stat(dir, &st) != 0)
			return set_error(c, KSPEC_E_DENIED, "cannot connect to "
			    "%s: permission denied", c->path);
		what = "socket's directory";
	}
	if (!(st.st_mode & 0070))
		return set_error(c, KSPEC_E_DENIED, "cannot connect to %s: "
		    "permission denied: the %s is private to uid %ld (kspecd "
		    "admits other users with --socket-group GROUP)", c->path,
		    what, (long)st.st_uid);
	if (getgrgid_r(st.st_gid, &gr, gbuf, sizeof gbuf, &g) == 0 && g)
		snprintf(gname, sizeof gname, "%s", g->gr_name);
	else
		snprintf(gname, sizeof gname, "%ld", (long)st.st_gid);
	return set_error(c, KSPEC_E_DENIED, "cannot connect to %s: permission "
	    "denied: the %s is open to group %s only; ask to be added to it "
	    "(usermod -aG %s USER), then log in again", c->path, what, gname,
	    gname);
}

/* Connects c->fd to c->path. */
static int open_fd(kspec_client_t *c)
{
	struct sockaddr_un sa;
	struct pollfd pfd;
	socklen_t elen;
	int err = 0;

	c->send_errno = 0;
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return set_error(c, KSPEC_E_CONNECT, "cannot connect to %s: %s",
		    c->path, strerror(errno));
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, c->path, strlen(c->path) + 1);
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		err = errno;
		/* An interrupted connect() goes on in the background: wait
		 * for it and take its result, do not call connect() again. */
		if (err == EINTR) {
			pfd.fd = c->fd;
			pfd.events = POLLOUT;
			while (poll(&pfd, 1, -1) < 0 && errno == EINTR)
				;
			elen = sizeof err;
			if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err,
			    &elen) < 0)
				err = errno;
		}
	}
	if (err) {
		drop(c);
		if (err == EACCES || err == EPERM)
			return denied(c);
		return set_error(c, KSPEC_E_CONNECT, "cannot connect to %s: %s",
		    c->path, strerror(err));
	}
	return KSPEC_OK;
}

/*
 * Before a request with nothing outstanding: kspecd closes connections
 * that stay idle (its --idle-timeout), so a connection the daemon has
 * closed in the meantime is opened again.  Costs one poll() with no wait.
 */
static int reopen_if_closed(kspec_client_t *c)
{
	struct pollfd pfd = { c->fd, POLLIN | POLLRDHUP, 0 };
	ssize_t k;
	char b;

	if (c->fd < 0 || c->rpos < c->rlen || poll(&pfd, 1, 0) != 1)
		return KSPEC_OK;
	/* Bytes waiting (a refusal, say) are read as a reply, not lost. */
	k = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (k > 0 || (k < 0 && !(pfd.revents & (POLLHUP | POLLRDHUP |
	    POLLERR))))
		return KSPEC_OK;
	drop(c);
	return open_fd(c);
}

int kspec_connect(const char *socket_path, kspec_client_t **out)
{
	kspec_client_t *c;

	*out = c = calloc(1, sizeof *c);
	if (!c)
		return KSPEC_E_NOMEM;
	c->fd = -1;
	c->next_id = 1;
	ks_buf_init(&c->frames);
	/* libsodium for the artifact check; idempotent and thread-safe. */
	if (ks_base_init())
		return set_error(c, KSPEC_E_INTERNAL,
		    "cannot initialize libsodium");
	if (socket_path) {
		if (strlen(socket_path) >= sizeof c->path)
			return set_error(c, KSPEC_E_TOO_LARGE,
			    "socket path is longer than %zu bytes",
			    sizeof c->path - 1);
		memcpy(c->path, socket_path, strlen(socket_path) + 1);
	} else if (ks_proto_default_socket(KS_SOCKET_CLIENT, c->path,
	    sizeof c->path)) {
		return set_error(c, KSPEC_E_TOO_LARGE,
		    "default socket path is longer than %zu bytes",
		    sizeof c->path - 1);
	}
	if (!c->path[0])
		return set_error(c, KSPEC_E_INVAL, "empty socket path");
	return open_fd(c);
}

void kspec_close(kspec_client_t *c)
{
	if (!c)
		return;
	drop(c);
	ks_buf_close(&c->frames);
	free(c);
}

const char *kspec_socket_path(const kspec_client_t *c)
{
	return c ? c->path : "";
}

const char *kspec_last_error(const kspec_client_t *c, const char **code)
{
	if (!c) {
		if (code)
			*code = "E_NOMEM";
		return "out of memory";
	}
	if (code)
		*code = c->code;
	return c->message;
}

/* Sends {"op":OP,"id":N} and reads its reply into R. */
static int simple_op(kspec_client_t *c, const char *op, reply_t *r)
{
	ks_buf_t req;
	uint64_t id = c->next_id++;
	int rc;

	ks_buf_init(&req);
	rc = ks_buf_printf(&req, "{\"op\":\"%s\",\"id\":%" PRIu64 "}", op, id);
	if (rc) {
		ks_buf_close(&req);
		return set_error(c, rc, "out of memory");
	}
	rc = transact(c, &req, id, 0, r);
	ks_buf_close(&req);
	return rc;
}

int kspec_ping(kspec_client_t *c)
{
	reply_t r;
	int rc;

	clear_error(c);
	rc = simple_op(c, "ping", &r);
	if (rc)
		return rc;
	if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r.json, "pong")))
		rc = set_error(c, KSPEC_E_PROTO,
		    "ping reply lacks \"pong\":true");
	reply_free(&r);
	return rc;
}

/* Runs a simple op and hands its reply header text to the caller. */
static int text_op(kspec_client_t *c, const char *op, char **json_out)
{
	reply_t r;
	int rc;

	*json_out = NULL;
	clear_error(c);
	rc = simple_op(c, op, &r);
	if (rc)
		return rc;
	*json_out = r.header;
	r.header = NULL;
	reply_free(&r);
	return KSPEC_OK;
}

int kspec_hello(kspec_client_t *c, char **json_out)
{
	return text_op(c, "hello", json_out);
}

int kspec_stats(kspec_client_t *c, char **json_out)
{
	return text_op(c, "stats", json_out);
}

/* Appends ,"NAME":"VALUE" when VALUE is not NULL. */
static int put_field(ks_buf_t *b, const char *name, const char *value)
{
	int rc;

	if (!value)
		return KS_OK;
	rc = ks_buf_printf(b, ",\"%s\":", name);
	return rc ? rc : ks_buf_json_str(b, value);
}

static int build_op(ks_buf_t *b, const char *op, uint64_t id,
    const kspec_get_spec_t *s)
{
	size_t i;
	int rc;

	rc = ks_buf_printf(b, "{\"op\":\"%s\",\"id\":%" PRIu64, op, id);
	if (!rc)
		rc = put_field(b, "kernel", s->kernel);
	if (!rc)
		rc = put_field(b, "backend", s->backend);
	if (!rc)
		rc = put_field(b, "target", s->target);
	if (!rc)
		rc = put_field(b, "format", s->format);
	if (!rc)
		rc = put_field(b, "dtype", s->dtype);
	if (!rc)
		rc = put_field(b, "wdtype", s->wdtype);
	if (!rc)
		rc = put_field(b, "mode", s->mode);
	if (!rc)
		rc = ks_buf_puts(b, ",\"shape\":{");
	for (i = 0; !rc && i < s->nshape; i++) {
		rc = ks_buf_json_str(b, s->shape[i].name);
		if (!rc)
			rc = ks_buf_printf(b, ":%" PRId64 "%s",
			    s->shape[i].value, i + 1 < s->nshape ? "," : "");
	}
	if (!rc)
		rc = ks_buf_puts(b, "},\"dynamic\":[");
	for (i = 0; !rc && i < s->ndynamic; i++) {
		rc = ks_buf_json_str(b, s->dynamic[i]);
		if (!rc && i + 1 < s->ndynamic)
			rc = ks_buf_puts(b, ",");
	}
	if (!rc && strcmp(op, "get") == 0)
		rc = ks_buf_printf(b, "],\"return\":\"%s\"}",
		    s->meta_only ? "meta" : "artifact");
	else if (!rc)
		rc = ks_buf_puts(b, "]}");
	return rc;
}

/* A get of S; the client's deployment, when it declared one, goes
 * before the last field. */
static int build_get(const kspec_client_t *c, ks_buf_t *b, uint64_t id,
    const kspec_get_spec_t *s)
{
	int rc = build_op(b, "get", id, s);

	if (rc || !c->deployment[0])
		return rc;
	b->len--;               /* the closing brace */
	rc = put_field(b, "deployment", c->deployment);
	return rc ? rc : ks_buf_puts(b, "}");
}

int kspec_set_deployment(kspec_client_t *c, const char *name)
{
	size_t n = name ? strlen(name) : 0;

	clear_error(c);
	if (n >= sizeof c->deployment || strspn(name ? name : "",
	    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	    "._-") != n)
		return set_error(c, KSPEC_E_INVAL, "a deployment is a name of "
		    "1 to 64 letters, digits, '.', '_' or '-'");
	memcpy(c->deployment, name ? name : "", n + 1);
	return KSPEC_OK;
}

static int check_spec(kspec_client_t *c, const kspec_get_spec_t *s)
{
	size_t i;

	if (!s)
		return set_error(c, KSPEC_E_INVAL, "no get spec");
	if (!s->kernel || !s->backend || !s->dtype)
		return set_error(c, KSPEC_E_INVAL,
		    "get spec lacks its %s", !s->kernel ? "kernel" :
		    !s->backend ? "backend" : "dtype");
	if ((s->nshape && !s->shape) || (s->ndynamic && !s->dynamic))
		return set_error(c, KSPEC_E_INVAL,
		    "get spec has a count without its array");
	for (i = 0; i < s->nshape; i++) {
		if (!s->shape[i].name)
			return set_error(c, KSPEC_E_INVAL,
			    "shape entry %zu has no name", i);
	}
	for (i = 0; i < s->ndynamic; i++) {
		if (!s->dynamic[i])
			return set_error(c, KSPEC_E_INVAL,
			    "dynamic entry %zu is NULL", i);
	}
	return KSPEC_OK;
}

void kspec_artifact_free(kspec_artifact_t *a)
{
	artifact_t *x = (artifact_t *)a;
	size_t i;

	if (!x)
		return;
	for (i = 0; i < sizeof x->strings / sizeof x->strings[0]; i++)
		free(x->strings[i]);
	free((void *)x->pub.bytes);
	free((void *)x->pub.meta);
	free(x);
}

/* Fills the artifact's convenience fields from the reply header. */
static int fill_artifact(artifact_t *x, const cJSON *json)
{
	static const ks_get_field_t fields[7] = {
		KS_GF_key, KS_GF_artifact, KS_GF_source, KS_GF_kernel,
		KS_GF_variant, KS_GF_format, KS_GF_entry,
	};
	const char **dst[7] = {
		&x->pub.key, &x->pub.artifact, &x->pub.source, &x->pub.kernel,
		&x->pub.variant, &x->pub.format, &x->pub.entry,
	};
	const char *v;
	size_t i;

	for (i = 0; i < 7; i++) {
		v = json_string(json, ks_get_field_name[fields[i]]);
		x->strings[i] = strdup(v ? v : "");
		if (!x->strings[i])
			return KSPEC_E_NOMEM;
		*dst[i] = x->strings[i];
	}
	return KSPEC_OK;
}

/*
 * The reply's "artifact" is the BLAKE2b-256 of the bytes (docs/protocol.md):
 * check it, so that a daemon bug or a torn transfer is never loaded as a
 * kernel.  A reply without the field is taken as it is.
 */
static int check_content(kspec_client_t *c, const cJSON *json,
    const uint8_t *bytes, size_t len)
{
	const char *hex = json_string(json,
	    ks_get_field_name[KS_GF_artifact]);
	ks_hash_t want, got;

	if (!hex)
		return KSPEC_OK;
	if (ks_hash_from_hex(hex, &want))
		return set_error(c, KSPEC_E_PROTO,
		    "get reply has a malformed \"artifact\" hash");
	ks_hash(bytes, len, &got);
	if (!ks_hash_eq(&want, &got))
		return set_error(c, KSPEC_E_CORRUPT,
		    "artifact bytes do not match their hash %.12s", hex);
	return KSPEC_OK;
}

/* Checks a get reply and turns it into *out (takes R's buffers). */
static int finish_get(kspec_client_t *c, reply_t *r, int meta_only,
    kspec_artifact_t **out)
{
	const cJSON *bytes;
	artifact_t *x;
	int rc = KSPEC_OK;

	*out = NULL;
	bytes = cJSON_GetObjectItemCaseSensitive(r->json,
	    ks_get_field_name[KS_GF_bytes]);
	if (!meta_only && r->payload_len == 0)
		rc = set_error(c, KSPEC_E_PROTO, "get reply has no artifact");
	else if (!meta_only && cJSON_IsNumber(bytes) &&
	    bytes->valuedouble != (double)r->payload_len)
		rc = set_error(c, KSPEC_E_PROTO,
		    "get reply says %.0f bytes but carries %zu",
		    bytes->valuedouble, r->payload_len);
	if (!rc && r->payload_len)
		rc = check_content(c, r->json, r->payload, r->payload_len);
	if (rc) {
		reply_free(r);
		return rc;
	}
	x = calloc(1, sizeof *x);
	if (!x || fill_artifact(x, r->json)) {
		kspec_artifact_free(x ? &x->pub : NULL);
		reply_free(r);
		return set_error(c, KSPEC_E_NOMEM, "out of memory");
	}
	x->pub.bytes = r->payload;
	x->pub.len = r->payload_len;
	x->pub.meta = r->header;
	x->pub.meta_len = r->header_len;
	if (cJSON_IsNumber(bytes) && bytes->valuedouble >= 0 &&
	    bytes->valuedouble <= 9007199254740992.0)
		x->pub.size = (uint64_t)bytes->valuedouble;
	r->payload = NULL;
	r->header = NULL;
	reply_free(r);
	*out = &x->pub;
	return KSPEC_OK;
}

int kspec_get(kspec_client_t *c, const kspec_get_spec_t *spec,
    kspec_artifact_t **out)
{
	ks_buf_t req;
	reply_t r;
	uint64_t id;
	int rc;

	*out = NULL;
	clear_error(c);
	rc = check_spec(c, spec);
	if (rc)
		return rc;
	id = c->next_id++;
	ks_buf_init(&req);
	rc = build_get(c, &req, id, spec);
	if (rc) {
		ks_buf_close(&req);
		return set_error(c, rc, "out of memory");
	}
	rc = transact(c, &req, id, !spec->meta_only, &r);
	ks_buf_close(&req);
	if (rc)
		return rc;
	return finish_get(c, &r, spec->meta_only, out);
}

typedef struct {
	const kspec_get_spec_t *specs;
	uint64_t base;
} many_t;

static int want_many(void *ctx, uint64_t id)
{
	many_t *m = ctx;

	return !m->specs[id - m->base].meta_only;
}

int kspec_get_many(kspec_client_t *c, const kspec_get_spec_t *specs,
    size_t n, kspec_artifact_t **out, int *errors)
{
	ks_buf_t req;
	many_t m;
	size_t i, got;
	int rc, first = KSPEC_OK;

	clear_error(c);
	for (i = 0; i < n; i++) {
		out[i] = NULL;
		if (errors)
			errors[i] = KSPEC_OK;
	}
	for (i = 0; i < n; i++) {
		rc = check_spec(c, &specs[i]);
		if (rc)
			return rc;
	}
	m.specs = specs;
	m.base = c->next_id;
	c->next_id += n;
	/* All requests first: the daemon answers them in completion order
	 * while it reads the rest. */
	rc = reopen_if_closed(c);
	if (rc)
		return rc;
	ks_buf_init(&req);
	/* The frames go out together, a send per SEND_BATCH bytes. */
	for (i = 0; i < n && !rc; i++) {
		ks_buf_reset(&req);
		rc = build_get(c, &req, m.base + i, &specs[i]);
		if (rc) {
			ks_buf_reset(&c->frames);
			rc = set_error(c, rc, "out of memory");
		} else {
			rc = frame_append(c, &req);
		}
		if (!rc && (c->frames.len >= SEND_BATCH || i == n - 1))
			rc = send_frames(c);
	}
	ks_buf_close(&req);
	if (rc)
		return rc;
	for (got = 0; got < n; got++) {
		reply_t r;
		uint64_t id;
		size_t k;

		rc = recv_reply(c, m.base, m.base + n - 1, want_many, &m, &r,
		    &id);
		if (rc && (c->fd < 0 || id == UINT64_MAX))
			return rc;      /* the stream is lost */
		k = (size_t)(id - m.base);
		if (!rc && out[k]) {
			reply_free(&r);
			return broken(c, "two replies carry one id");
		}
		if (!rc)
			rc = finish_get(c, &r, specs[k].meta_only, &out[k]);
		if (rc) {
			if (errors)
				errors[k] = rc;
			if (!first)
				first = rc;
		}
	}
	return first;
}

/* Sends REQ (request id ID) and hands the reply header's text to the
 * caller; takes REQ. */
static int text_call(kspec_client_t *c, ks_buf_t *req, uint64_t id,
    char **json_out)
{
	reply_t r;
	int rc;

	rc = transact(c, req, id, 0, &r);
	ks_buf_close(req);
	if (rc)
		return rc;
	*json_out = r.header;
	r.header = NULL;
	reply_free(&r);
	return KSPEC_OK;
}

/* {"op":OP,"id":ID,FIELDS} into REQ. */
static int build_call(kspec_client_t *c, ks_buf_t *req, const char *op,
    const char *fields, uint64_t id)
{
	int rc;

	if (!op)
		return set_error(c, KSPEC_E_INVAL, "no op");
	ks_buf_init(req);
	rc = ks_buf_puts(req, "{\"op\":");
	if (!rc)
		rc = ks_buf_json_str(req, op);
	if (!rc)
		rc = ks_buf_printf(req, ",\"id\":%" PRIu64 "%s%s}", id,
		    fields && *fields ? "," : "", fields ? fields : "");
	if (rc) {
		ks_buf_close(req);
		return set_error(c, rc, "out of memory");
	}
	return KSPEC_OK;
}

int kspec_call(kspec_client_t *c, const char *op, const char *fields,
    char **json_out)
{
	ks_buf_t req;
	uint64_t id = c->next_id++;
	int rc;

	*json_out = NULL;
	clear_error(c);
	rc = build_call(c, &req, op, fields, id);
	return rc ? rc : text_call(c, &req, id, json_out);
}

int kspec_send(kspec_client_t *c, const char *op, const char *fields,
    uint64_t *id)
{
	ks_buf_t req;
	int rc;

	clear_error(c);
	*id = c->next_id++;
	rc = build_call(c, &req, op, fields, *id);
	if (rc)
		return rc;
	rc = reopen_if_closed(c);
	if (rc == KSPEC_OK)
		rc = send_request(c, &req);
	ks_buf_close(&req);
	return rc;
}

int kspec_recv(kspec_client_t *c, int timeout_ms, uint64_t *id,
    char **json_out)
{
	struct pollfd pfd;
	reply_t r;
	int rc;

	*id = UINT64_MAX;
	*json_out = NULL;
	clear_error(c);
	if (c->fd < 0)
		return set_error(c, KSPEC_E_CONNECT, "not connected to %s",
		    c->path);
	/* Wait for a frame to begin, so that the caller can look up from
	 * a long wait (a signal, a deadline) without losing its place in
	 * the stream. */
	pfd.fd = c->fd;
	pfd.events = POLLIN;
	/* A frame that began in the read buffer has begun. */
	rc = c->rpos < c->rlen ? 1 : poll(&pfd, 1, timeout_ms < 0 ? -1 :
	    timeout_ms);
	if (rc == 0 || (rc < 0 && errno == EINTR))
		return set_error(c, KSPEC_E_TIMEOUT, "%s", rc ? "interrupted" :
		    "no reply yet");
	if (rc < 0)
		return lost(c, strerror(errno));
	rc = recv_reply(c, 1, c->next_id - 1, want_no, NULL, &r, id);
	if (rc)
		return rc;
	*json_out = r.header;
	r.header = NULL;
	reply_free(&r);
	return KSPEC_OK;
}

int kspec_explain(kspec_client_t *c, const kspec_get_spec_t *spec,
    char **json_out)
{
	ks_buf_t req;
	uint64_t id;
	int rc;

	*json_out = NULL;
	clear_error(c);
	rc = check_spec(c, spec);
	if (rc)
		return rc;
	id = c->next_id++;
	ks_buf_init(&req);
	rc = build_op(&req, "explain", id, spec);
	if (rc) {
		ks_buf_close(&req);
		return set_error(c, rc, "out of memory");
	}
	return text_call(c, &req, id, json_out);
}
