/*
 * Private to server/: a small HTTP/1.1 responder for GET and HEAD on the
 * loop (http.c), for /metrics and the dashboard.  One request per
 * connection (Connection: close), headers of at most 8 KiB read within
 * 10 s, at most KS_HTTP_MAX_CONNS connections at once and
 * KS_HTTP_MAX_PER_PEER of one peer (a uid on a Unix socket or TCP
 * loopback, else an address); anything else gets
 * a status line that says what was wrong.  It knows nothing of what it
 * serves: a handler fills each reply.
 */
#ifndef KS_SERVER_HTTP_H
#define KS_SERVER_HTTP_H

#include <uv.h>

#include "../base/base.h"

#define KS_HTTP_MAX_CONNS 32
#define KS_HTTP_MAX_PER_PEER 8    /* a uid's (Unix) or an address's (TCP) */
#define KS_HTTP_MAX_HEAD  8192
#define KS_HTTP_TIMEOUT_MS 10000
#define KS_HTTP_DRAIN_MS  2000    /* after a reply, for the client to close */

typedef struct {
	int status;              /* 200 unless the handler says otherwise */
	const char *type;        /* Content-Type */
	const char *headers;     /* more header lines, each ending "\r\n" */
	ks_buf_t body;
} ks_http_reply_t;

/*
 * A request head as ks_http_parse_head reads it: a request for PATH (the
 * target without its query), or the error status to answer with WHY
 * (and HEADERS, more header lines, or NULL).
 */
typedef struct {
	int status;              /* 0: a request to answer; else 400, 403,
	                            405, 431 or 505 */
	const char *why;
	const char *headers;
	int head_only;           /* HEAD, not GET */
	const char *path;        /* inside the head given, NUL-terminated */
} ks_http_req_t;

/*
 * Reads the request head HEAD, the LEN bytes a connection has sent so far
 * (HEAD[LEN] is a NUL; at most KS_HTTP_MAX_HEAD - 1 bytes): 0 while it
 * needs more bytes, 1 when OUT says what to answer.  With CHECK_HOST a
 * Host header that does not name a loopback address or localhost is 403.
 * HEAD is cut into NUL-terminated pieces that OUT points into.  Nothing
 * after the blank line that ends the head is read; a head that is not
 * complete at KS_HTTP_MAX_HEAD - 1 bytes is 431.
 */
int ks_http_parse_head(char *head, size_t len, int check_host,
    ks_http_req_t *out);

/* Fills R for PATH (the request target without its query). */
typedef void ks_http_fn(void *owner, const char *path, ks_http_reply_t *r);

typedef struct ks_http ks_http_t;

/*
 * Listens on ADDR: a Unix socket path (containing a '/'; mode 0660 for
 * group GID >= 0, else 0600) or HOST:PORT with HOST an IPv4 address,
 * [IPv6] or localhost.  A HOST that is not loopback is refused unless
 * ANY_HOST.  Port 0 takes a free one; the address bound is in
 * ks_http_where.  Errors: KS_E_INVAL (ADDR), KS_E_IO (bind, listen).
 */
int ks_http_start(uv_loop_t *loop, const char *addr, int any_host, long gid,
    ks_http_fn *fn, void *owner, ks_http_t **out, char *err, size_t errlen);
const char *ks_http_where(const ks_http_t *h);
/* The checks of ks_http_start that need no socket (ADDR's form, a
 * loopback HOST), for the command line. */
int ks_http_check_addr(const char *addr, int any_host, char *err,
    size_t errlen);
/* Closes the listener and every connection; frees H once they closed.
 * A Unix socket is unlinked. */
void ks_http_close(ks_http_t *h);

#endif
