/*
 * The HTTP responder of http.h.  It reads a request head, answers it from
 * the handler and closes: no keep-alive, no request bodies, no chunking,
 * which is all a Prometheus scrape or a browser polling a page needs.
 * Connections past KS_HTTP_MAX_CONNS are accepted and closed at once, so
 * that a stuck scraper costs the daemon a few descriptors at most; so are
 * a peer's past KS_HTTP_MAX_PER_PEER (the uid on a Unix socket, the
 * address on TCP), so that one local user holding connections open
 * cannot keep everyone else's scrapes out.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "http.h"
#include "sock.h"

typedef struct http_conn http_conn_t;

struct ks_http {
	uv_loop_t *loop;
	union {
		uv_tcp_t tcp;
		uv_pipe_t pipe;
	} l;
	int is_unix;
	int check_host;          /* Host must say loopback (every listener,
	                            unless --metrics-any-host) */
	int loopback;            /* TCP bound to a loopback address */
	int lock_fd;             /* beside a Unix socket, else -1 */
	int inited;              /* l is a handle of the loop */
	int closing;
	int listener_closed;
	int nconns;              /* open */
	int nalloc;              /* not yet freed */
	http_conn_t *conns;
	ks_http_fn *fn;
	void *owner;
	char where[4200];        /* the address bound, for logs */
	char path[4096];         /* a Unix socket's, to unlink */
};

struct http_conn {
	union {
		uv_tcp_t tcp;
		uv_pipe_t pipe;
		uv_stream_t s;
		uv_handle_t h;
	} s;
	uv_timer_t timer;
	uv_write_t wr;
	uv_shutdown_t shut;
	ks_http_t *http;
	http_conn_t *prev, *next;
	int open_handles;        /* freed when both are closed */
	int answered;
	char peer[64];           /* "uid N" or the address: the per-peer cap */
	int peer_known;          /* peer is filled (looked up when needed) */
	size_t len;
	char head[KS_HTTP_MAX_HEAD];
	ks_buf_t out;
};

static void conn_freed(uv_handle_t *h)
{
	http_conn_t *c = h->data;
	ks_http_t *http = c->http;

	if (--c->open_handles > 0)
		return;
	ks_buf_close(&c->out);
	free(c);
	if (--http->nalloc == 0 && http->listener_closed)
		free(http);
}

static void conn_close(http_conn_t *c)
{
	ks_http_t *http = c->http;

	if (uv_is_closing(&c->s.h))
		return;
	if (c->prev)
		c->prev->next = c->next;
	else
		http->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	http->nconns--;
	uv_close(&c->s.h, conn_freed);
	uv_close((uv_handle_t *)&c->timer, conn_freed);
}

static void on_shut(uv_shutdown_t *req, int status)
{
	http_conn_t *c = req->data;

	if (status < 0)
		conn_close(c);
	/* Else the client's end is read (and dropped) until it closes or
	 * the deadline: closing with its bytes unread would reset the
	 * connection and could lose the reply. */
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);
static void on_timeout(uv_timer_t *t);

static void on_written(uv_write_t *wr, int status)
{
	http_conn_t *c = wr->data;

	c->shut.data = c;
	c->len = 0;
	/* A short drain after the reply, then the connection goes. */
	uv_timer_start(&c->timer, on_timeout, KS_HTTP_DRAIN_MS, 0);
	if (status < 0 || uv_shutdown(&c->shut, &c->s.s, on_shut) != 0 ||
	    uv_read_start(&c->s.s, on_alloc, on_read) != 0)
		conn_close(c);
}

static const char *status_text(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 431: return "Request Header Fields Too Large";
	case 505: return "HTTP Version Not Supported";
	default: return "Internal Server Error";
	}
}

/* Sends R (only its head for HEAD) and closes. */
static void send_reply(http_conn_t *c, ks_http_reply_t *r, int head_only)
{
	uv_buf_t b;

	c->answered = 1;
	uv_read_stop(&c->s.s);
	ks_buf_printf(&c->out, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
	    "Content-Length: %zu\r\nCache-Control: no-store\r\n"
	    "X-Content-Type-Options: nosniff\r\n%sConnection: close\r\n\r\n",
	    r->status, status_text(r->status), r->type, r->body.len,
	    r->headers ? r->headers : "");
	if (!head_only && r->body.len)
		ks_buf_append(&c->out, r->body.data, r->body.len);
	ks_buf_close(&r->body);
	if (c->out.len == 0 && c->out.cap == 0) {
		conn_close(c);   /* out of memory */
		return;
	}
	b = uv_buf_init(c->out.data, (unsigned)c->out.len);
	c->wr.data = c;
	if (uv_write(&c->wr, &c->s.s, &b, 1, on_written) != 0)
		conn_close(c);
}

static void send_error(http_conn_t *c, int status, const char *why,
    const char *headers)
{
	ks_http_reply_t r;

	memset(&r, 0, sizeof r);
	r.status = status;
	r.type = "text/plain; charset=utf-8";
	r.headers = headers;
	ks_buf_printf(&r.body, "%d %s: %s\n", status, status_text(status),
	    why);
	send_reply(c, &r, 0);
}

/* 1 when the head's Host names a loopback address (or localhost), the
 * port aside: a page elsewhere that a browser on this machine loaded
 * cannot read the listener through a name that resolves to 127.0.0.1
 * (DNS rebinding). */
static int host_is_loopback(const char *headers)
{
	const char *p, *next;
	char host[256];
	struct in_addr a4;
	size_t n;

	for (p = headers; *p && *p != '\r'; p = next + 2) {
		next = strstr(p, "\r\n");
		if (!next)
			return 0;
		if (strncasecmp(p, "host:", 5) != 0)
			continue;
		p += 5;
		p += strspn(p, " \t");
		n = strcspn(p, "\r");
		while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		if (n >= sizeof host)
			return 0;
		memcpy(host, p, n);
		host[n] = '\0';
		if (host[0] == '[')
			return strncmp(host, "[::1]", 5) == 0 &&
			    (host[5] == '\0' || host[5] == ':');
		host[strcspn(host, ":")] = '\0';
		if (strcasecmp(host, "localhost") == 0)
			return 1;
		return inet_pton(AF_INET, host, &a4) == 1 &&
		    (ntohl(a4.s_addr) >> 24) == 127;
	}
	return 0;
}

/* The request line and Host of a complete head (one that holds a blank
 * line) into R. */
static void parse_request(char *head, int check_host, ks_http_req_t *r)
{
	char *line = head, *sp1, *sp2, *eol, *q;

	eol = strstr(line, "\r\n");
	*eol = '\0';
	sp1 = strchr(line, ' ');
	sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	if (!sp1 || !sp2 || sp1[1] != '/') {
		r->status = 400;
		r->why = "expected a request line `GET /path HTTP/1.1`";
		return;
	}
	*sp1 = *sp2 = '\0';
	if (strncmp(sp2 + 1, "HTTP/1.", 7) != 0) {
		r->status = 505;
		r->why = "HTTP/1.x only";
		return;
	}
	r->head_only = strcmp(line, "HEAD") == 0;
	if (!r->head_only && strcmp(line, "GET") != 0) {
		r->status = 405;
		r->why = "only GET and HEAD";
		r->headers = "Allow: GET, HEAD\r\n";
		return;
	}
	if (check_host && !host_is_loopback(eol + 2)) {
		r->status = 403;
		r->why = "the Host header must name a loopback address or "
		    "localhost (kspecd --metrics-any-host lifts this)";
		return;
	}
	if ((q = strchr(sp1 + 1, '?')))
		*q = '\0';
	r->path = sp1 + 1;
}

int ks_http_parse_head(char *head, size_t len, int check_host,
    ks_http_req_t *out)
{
	memset(out, 0, sizeof *out);
	if (strstr(head, "\r\n\r\n")) {
		parse_request(head, check_host, out);
		return 1;
	}
	if (len >= KS_HTTP_MAX_HEAD - 1) {
		out->status = 431;
		out->why = "the request head is larger than 8 KiB";
		return 1;
	}
	return 0;
}

/* Answers the head C has read, once it is complete. */
static void answer(http_conn_t *c)
{
	ks_http_reply_t r;
	ks_http_req_t req;

	if (!ks_http_parse_head(c->head, c->len, c->http->check_host, &req))
		return;
	if (req.status) {
		send_error(c, req.status, req.why, req.headers);
		return;
	}
	memset(&r, 0, sizeof r);
	r.status = 200;
	r.type = "text/plain; charset=utf-8";
	c->http->fn(c->http->owner, req.path, &r);
	send_reply(c, &r, req.head_only);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
	http_conn_t *c = h->data;

	(void)hint;
	/* One byte kept for the terminating NUL. */
	*buf = uv_buf_init(c->head + c->len,
	    (unsigned)(sizeof c->head - 1 - c->len));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	http_conn_t *c = s->data;

	(void)buf;
	if (n < 0) {
		conn_close(c);    /* also the end of an answered one */
		return;
	}
	if (c->answered) {
		c->len = 0;       /* what follows the head is dropped */
		return;
	}
	c->len += (size_t)n;
	c->head[c->len] = '\0';
	answer(c);
}

static void on_timeout(uv_timer_t *t)
{
	http_conn_t *c = t->data;

	/* Whatever it is doing by now, a connection gets no more time. */
	if (!c->answered)
		send_error(c, 400, "the request head did not arrive within "
		    "10 s", NULL);
	else
		conn_close(c);
}

/*
 * The uid that owns the local TCP socket bound to SA (a loopback peer's
 * end of a connection), from the kernel's socket table (/proc/net/tcp or
 * tcp6, the "uid" column, as ss -e shows it); -1 when it is not found.
 * On loopback every local user has the same address, so the per-peer cap
 * counts users there as it does on a Unix socket.
 */
static long loopback_uid(const struct sockaddr_storage *sa)
{
	char want[48], line[512], local[64];
	const char *table;
	long uid = -1, u;
	FILE *f;

	if (sa->ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const void *)sa;

		table = "/proc/net/tcp";
		snprintf(want, sizeof want, "%08X:%04X",
		    (unsigned)s4->sin_addr.s_addr, ntohs(s4->sin_port));
	} else {
		const struct sockaddr_in6 *s6 = (const void *)sa;
		uint32_t w[4];

		memcpy(w, &s6->sin6_addr, sizeof w);
		table = "/proc/net/tcp6";
		snprintf(want, sizeof want, "%08X%08X%08X%08X:%04X", w[0], w[1],
		    w[2], w[3], ntohs(s6->sin6_port));
	}
	f = fopen(table, "r");
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, " %*s %63s %*s %*s %*s %*s %*s %ld", local,
		    &u) == 2 && strcmp(local, want) == 0) {
			uid = u;
			break;
		}
	if (f)
		fclose(f);
	return uid;
}

/* C's peer ("" when it cannot be told): a uid on a Unix socket and on
 * TCP loopback, else an address; looked up once, when first asked. */
static const char *conn_peer(const ks_http_t *http, http_conn_t *c)
{
	if (c->peer_known)
		return c->peer;
	c->peer_known = 1;
	if (http->is_unix) {
		struct ucred cred;
		socklen_t len = sizeof cred;
		uv_os_fd_t fd;

		if (uv_fileno(&c->s.h, &fd) == 0 &&
		    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
			snprintf(c->peer, sizeof c->peer, "uid %ld",
			    (long)cred.uid);
	} else {
		struct sockaddr_storage sa;
		int len = sizeof sa;
		long uid;

		if (uv_tcp_getpeername(&c->s.tcp, (struct sockaddr *)&sa,
		    &len) != 0)
			return c->peer;         /* "": not capped */
		if (http->loopback && (uid = loopback_uid(&sa)) >= 0)
			snprintf(c->peer, sizeof c->peer, "uid %ld", uid);
		else if (sa.ss_family == AF_INET6)
			uv_ip6_name((struct sockaddr_in6 *)&sa, c->peer,
			    sizeof c->peer);
		else
			uv_ip4_name((struct sockaddr_in *)&sa, c->peer,
			    sizeof c->peer);
	}
	return c->peer;
}

/* 1 when C's peer already holds KS_HTTP_MAX_PER_PEER other connections.
 * Peers are looked up only once that many are open at all, so a scrape
 * (one connection at a time) reads no socket table on the loop. */
static int peer_full(ks_http_t *http, http_conn_t *c)
{
	http_conn_t *o;
	const char *p;
	int n = 0;

	if (http->nconns <= KS_HTTP_MAX_PER_PEER)
		return 0;
	p = conn_peer(http, c);
	if (!p[0])
		return 0;
	for (o = http->conns; o; o = o->next)
		n += o != c && strcmp(conn_peer(http, o), p) == 0;
	return n >= KS_HTTP_MAX_PER_PEER;
}

static void on_connection(uv_stream_t *l, int status)
{
	ks_http_t *http = l->data;
	http_conn_t *c;
	int rc;

	if (status < 0 || http->closing)
		return;
	c = calloc(1, sizeof *c);
	if (!c)
		return;
	c->http = http;
	if (http->is_unix)
		rc = uv_pipe_init(http->loop, &c->s.pipe, 0);
	else
		rc = uv_tcp_init(http->loop, &c->s.tcp);
	if (rc) {
		free(c);
		return;
	}
	c->s.h.data = c;
	uv_timer_init(http->loop, &c->timer);
	c->timer.data = c;
	c->open_handles = 2;
	http->nalloc++;
	c->next = http->conns;
	if (c->next)
		c->next->prev = c;
	http->conns = c;
	http->nconns++;
	if (uv_accept(l, &c->s.s) != 0 || http->nconns > KS_HTTP_MAX_CONNS ||
	    peer_full(http, c)) {
		conn_close(c);
		return;
	}
	uv_timer_start(&c->timer, on_timeout, KS_HTTP_TIMEOUT_MS, 0);
	if (uv_read_start(&c->s.s, on_alloc, on_read) != 0)
		conn_close(c);
}

/* HOST:PORT into SA; 1 when HOST is a loopback address. */
static int parse_inet(const char *addr, struct sockaddr_storage *sa,
    int *loopback, char *err, size_t errlen)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	char *end;
	long port;

	if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof host) {
		snprintf(err, errlen, "--metrics-listen %s: give a Unix socket "
		    "path (with a '/') or HOST:PORT", addr);
		return KS_E_INVAL;
	}
	port = strtol(colon + 1, &end, 10);
	if (!colon[1] || *end || port < 0 || port > 65535) {
		snprintf(err, errlen, "--metrics-listen %s: bad port", addr);
		return KS_E_INVAL;
	}
	snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
	if (strcmp(host, "localhost") == 0)
		snprintf(host, sizeof host, "127.0.0.1");
	memset(sa, 0, sizeof *sa);
	if (host[0] == '[' && host[strlen(host) - 1] == ']') {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;

		host[strlen(host) - 1] = '\0';
		if (uv_ip6_addr(host + 1, (int)port, s6) != 0)
			goto bad;
		*loopback = IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)sa;

		if (uv_ip4_addr(host, (int)port, s4) != 0 ||
		    inet_pton(AF_INET, host, &s4->sin_addr) != 1)
			goto bad;
		*loopback = (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
	}
	return KS_OK;
bad:
	snprintf(err, errlen, "--metrics-listen %s: '%s' is not an IPv4 "
	    "address, [IPv6] or localhost", addr, host);
	return KS_E_INVAL;
}

static int check_inet(const char *addr, int any_host,
    struct sockaddr_storage *sa, int *is_loopback, char *err, size_t errlen)
{
	int loopback = 0, rc;

	rc = parse_inet(addr, sa, &loopback, err, errlen);
	if (is_loopback)
		*is_loopback = loopback;
	if (rc)
		return rc;
	if (!loopback && !any_host) {
		snprintf(err, errlen, "--metrics-listen %s is not a loopback "
		    "address; the metrics and the page are for this machine "
		    "unless --metrics-any-host says otherwise", addr);
		return KS_E_INVAL;
	}
	return KS_OK;
}

int ks_http_check_addr(const char *addr, int any_host, char *err,
    size_t errlen)
{
	struct sockaddr_storage sa;

	if (strchr(addr, '/'))
		return KS_OK;    /* a path: checked where it is made */
	return check_inet(addr, any_host, &sa, NULL, err, errlen);
}

static int listen_inet(ks_http_t *h, const char *addr, int any_host,
    char *err, size_t errlen)
{
	struct sockaddr_storage sa, got;
	char ip[INET6_ADDRSTRLEN];
	int len = sizeof got, rc;

	rc = check_inet(addr, any_host, &sa, &h->loopback, err, errlen);
	if (rc)
		return rc;
	uv_tcp_init(h->loop, &h->l.tcp);
	h->l.tcp.data = h;
	h->inited = 1;
	h->check_host = !any_host;
	rc = uv_tcp_bind(&h->l.tcp, (struct sockaddr *)&sa, 0);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&h->l.tcp, 64, on_connection);
	if (rc) {
		snprintf(err, errlen, "--metrics-listen %s: %s", addr,
		    uv_strerror(rc));
		return KS_E_IO;
	}
	uv_tcp_getsockname(&h->l.tcp, (struct sockaddr *)&got, &len);
	if (got.ss_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (void *)&got;

		uv_ip6_name(s6, ip, sizeof ip);
		snprintf(h->where, sizeof h->where, "http://[%s]:%d", ip,
		    ntohs(s6->sin6_port));
	} else {
		const struct sockaddr_in *s4 = (void *)&got;

		uv_ip4_name(s4, ip, sizeof ip);
		snprintf(h->where, sizeof h->where, "http://%s:%d", ip,
		    ntohs(s4->sin_port));
	}
	return KS_OK;
}

static int listen_unix(ks_http_t *h, const char *path, long gid,
    int any_host, char *err, size_t errlen)
{
	int fd = -1, rc;

	rc = ks_sock_prepare(path, gid, &h->lock_fd, err, errlen);
	if (rc == KS_OK)
		rc = ks_sock_listen(path, gid, &fd, err, errlen);
	if (rc)
		return rc;
	snprintf(h->path, sizeof h->path, "%s", path);
	/* A browser reaches a Unix listener too (ssh -L to 127.0.0.1), so
	 * a page that rebinds a name of its own is refused here as well. */
	h->check_host = !any_host;
	uv_pipe_init(h->loop, &h->l.pipe, 0);
	h->l.pipe.data = h;
	h->inited = 1;
	h->is_unix = 1;
	if (uv_pipe_open(&h->l.pipe, fd) != 0) {
		close(fd);
		snprintf(err, errlen, "--metrics-listen %s: cannot listen",
		    path);
		return KS_E_IO;
	}
	if (
	    uv_listen((uv_stream_t *)&h->l.pipe, 64, on_connection) != 0) {
		snprintf(err, errlen, "--metrics-listen %s: cannot listen",
		    path);
		return KS_E_IO;
	}
	snprintf(h->where, sizeof h->where, "unix:%s", path);
	return KS_OK;
}

int ks_http_start(uv_loop_t *loop, const char *addr, int any_host, long gid,
    ks_http_fn *fn, void *owner, ks_http_t **out, char *err, size_t errlen)
{
	ks_http_t *h = calloc(1, sizeof *h);
	int rc;

	*out = NULL;
	if (!h)
		return KS_E_NOMEM;
	h->loop = loop;
	h->fn = fn;
	h->owner = owner;
	h->lock_fd = -1;
	if (strchr(addr, '/'))
		rc = listen_unix(h, addr, gid, any_host, err, errlen);
	else
		rc = listen_inet(h, addr, any_host, err, errlen);
	if (rc) {
		if (h->inited) {
			ks_http_close(h);   /* frees H once closed */
		} else {
			if (h->lock_fd >= 0)
				close(h->lock_fd);
			free(h);
		}
		return rc;
	}
	*out = h;
	return KS_OK;
}

const char *ks_http_where(const ks_http_t *h)
{
	return h->where;
}

static void listener_closed(uv_handle_t *l)
{
	ks_http_t *h = l->data;

	h->listener_closed = 1;
	if (h->nalloc == 0)
		free(h);
}

void ks_http_close(ks_http_t *h)
{
	if (!h || h->closing)
		return;
	h->closing = 1;
	while (h->conns)
		conn_close(h->conns);
	if (h->path[0])
		ks_sock_unlink(h->path);
	if (h->lock_fd >= 0)
		close(h->lock_fd);
	uv_close((uv_handle_t *)&h->l, listener_closed);
}
