/*
 * The remote tier's Redis connection (remote.h).
 *
 * A command is an op: hiredis holds it until its reply callback (which it
 * also calls, with no reply, for every command pending when a context is
 * freed), and its deadline timer holds it until the timer is closed.  The
 * op's outcome is told once, by whichever comes first; the op is freed
 * when both are done with it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libuv.h>

#include "../proto/entry.h"
#include "remote.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

enum { OP_HELLO, OP_PING, OP_GET, OP_SET, OP_CMD };

typedef struct {
	ks_remote_t *r;
	redisAsyncContext *ac;   /* the connection it was sent on */
	uv_timer_t timer;
	int kind;
	int told;                /* its outcome is told */
	int in_redis;            /* hiredis still holds it */
	int closing;             /* its timer is being closed: freed soon */
	uint64_t t0;
	ks_remote_get_fn fn;
	ks_remote_reply_fn cmd_fn;
	void *ctx;
} op_t;

#define COUNTER(stat, metric, help) \
	{ #stat, "kspec_remote_" metric "_total", help, \
	  offsetof(ks_remote_t, stat) }

const ks_remote_counter_t ks_remote_counters[] = {
	COUNTER(hits, "hits", "Remote lookups answered with a value that "
	    "verified, served as source remote."),
	COUNTER(misses, "misses", "Remote lookups Redis had no value for."),
	COUNTER(timeouts, "timeouts", "Remote commands (lookups and "
	    "publishes) past --remote-timeout."),
	COUNTER(errors, "errors", "Remote commands that failed (connection "
	    "lost, an error reply)."),
	COUNTER(skipped, "skipped", "Local misses not looked up remotely: no "
	    "connection."),
	COUNTER(auth_failures, "auth_failures", "Values from the remote tier "
	    "refused: bad signature, unknown key, another key's entry, or "
	    "metadata that does not match."),
	COUNTER(published, "published", "Compiled artifacts published to "
	    "the remote tier."),
	COUNTER(publish_failures, "publish_failures", "Publishes that failed "
	    "or could not be sent (no connection)."),
	COUNTER(too_large, "too_large", "Artifacts not published: over "
	    "512 MiB."),
	COUNTER(reconnects, "reconnects", "Connections to the remote tier "
	    "made again after a loss."),
	COUNTER(outages, "outages", "Times the connection to the remote "
	    "tier was lost."),
	COUNTER(lease_taken, "lease_taken", "Compile leases taken in the "
	    "remote tier (this node compiled for the fleet)."),
	COUNTER(lease_waits, "lease_waits", "Compiles not started here: "
	    "another node held the key's lease, this one waited for its "
	    "artifact."),
	COUNTER(lease_takeovers, "lease_takeovers", "Leases taken after "
	    "waiting: the holder's lease expired (it died or stalled)."),
	COUNTER(lease_wait_timeouts, "lease_wait_timeouts", "Waits for "
	    "another node's compile past --remote-lease-wait, compiled "
	    "here."),
};
const int ks_remote_ncounters = (int)(sizeof ks_remote_counters /
    sizeof ks_remote_counters[0]);

/* ---- configuration ---- */

int ks_remote_parse(const char *url, ks_remote_addr_t *out, char *err,
    size_t errlen)
{
	const char *p, *end;
	char *e;
	long v;

	memset(out, 0, sizeof *out);
	if (strncmp(url, "unix:", 5) == 0) {
		p = url + 5;
		end = strstr(p, "?db=");
		if (*p != '/' || (size_t)((end ? end : p + strlen(p)) - p) >=
		    sizeof out->path) {
			snprintf(err, errlen, "--remote unix:PATH needs an "
			    "absolute PATH of less than %zu bytes",
			    sizeof out->path);
			return KS_E_INVAL;
		}
		out->is_unix = 1;
		snprintf(out->path, sizeof out->path, "%.*s",
		    (int)((end ? end : p + strlen(p)) - p), p);
		p = end ? end + 4 : NULL;
	} else if (strncmp(url, "redis://", 8) == 0) {
		p = url + 8;
		if (strchr(p, '@')) {
			snprintf(err, errlen, "--remote: no password in the "
			    "URL (ps shows it): give --remote-password-file");
			return KS_E_INVAL;
		}
		if (*p == '[') {
			end = strchr(p, ']');
			if (!end)
				goto bad;
			snprintf(out->host, sizeof out->host, "%.*s",
			    (int)(end - p - 1), p + 1);
			end++;
		} else {
			end = p + strcspn(p, ":/");
			snprintf(out->host, sizeof out->host, "%.*s",
			    (int)(end - p), p);
		}
		if (!out->host[0] || (size_t)(end - p) >= sizeof out->host)
			goto bad;
		out->port = 6379;
		if (*end == ':') {
			errno = 0;
			v = strtol(end + 1, &e, 10);
			if (errno || e == end + 1 || v < 1 || v > 65535)
				goto bad;
			out->port = (int)v;
			end = e;
		}
		if (*end && *end != '/')
			goto bad;
		p = *end && end[1] ? end + 1 : NULL;
	} else {
		goto bad;
	}
	if (p) {
		errno = 0;
		v = strtol(p, &e, 10);
		if (errno || e == p || *e || v < 0 || v > 1000000)
			goto bad;
		out->db = (int)v;
	}
	return KS_OK;
bad:
	snprintf(err, errlen, "--remote is redis://HOST:PORT[/DB] or "
	    "unix:/PATH[?db=N] (got '%s')", url);
	return KS_E_INVAL;
}

int ks_remote_read_password(const char *path, char *out, size_t outlen,
    char *err, size_t errlen)
{
	ssize_t got;
	int fd, rc = ks_secret_open(path, &fd, err, errlen);

	if (rc)
		return rc;
	got = read(fd, out, outlen - 1);
	close(fd);
	if (got < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return KS_E_IO;
	}
	out[got] = '\0';
	out[strcspn(out, "\r\n")] = '\0';
	if (!out[0] || (size_t)got == outlen - 1) {
		snprintf(err, errlen, "%s: the password is one line of 1 to "
		    "%zu bytes", path, outlen - 2);
		return KS_E_INVAL;
	}
	return KS_OK;
}

/* ---- the connection ---- */

static void connect_now(ks_remote_t *r);

static void on_retry(uv_timer_t *t)
{
	connect_now(t->data);
}

static void retry_later(ks_remote_t *r)
{
	if (r->stopped)
		return;
	uv_timer_start(&r->retry, on_retry, r->backoff_ms, 0);
	r->backoff_ms = r->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS :
	    r->backoff_ms * 2;
}

/* The connection is gone (or never came): once per outage in the log. */
static void went_down(ks_remote_t *r, const char *why)
{
	if (r->state == KS_REMOTE_READY)
		r->outages++;
	r->state = KS_REMOTE_DOWN;
	if (!r->down_logged && !r->stopped) {
		ks_log(KS_LOG_WARN, "remote %s: %s; serving and compiling "
		    "locally, reconnecting in the background", r->where, why);
		r->down_logged = 1;
		r->down_ns = ks_now_ns();
	}
	retry_later(r);
}

/* Drops the connection; every command pending on it fails (KS_E_IO). */
static void drop(ks_remote_t *r, const char *why)
{
	redisAsyncContext *ac = r->ac;

	r->ac = NULL;       /* its disconnect callback is not a new loss */
	if (ac)
		redisAsyncFree(ac);
	went_down(r, why);
}

static void op_free(uv_handle_t *h)
{
	free(h->data);
}

/* Frees OP once its outcome is told and hiredis is done with it. */
static void op_release(op_t *op)
{
	if (op->in_redis || !op->told || op->closing)
		return;
	op->closing = 1;
	uv_close((uv_handle_t *)&op->timer, op_free);
}

static void tell(op_t *op, redisReply *rep, int rc)
{
	ks_remote_t *r = op->r;

	op->told = 1;
	uv_timer_stop(&op->timer);
	if (rep && rep->type == REDIS_REPLY_ERROR)
		rc = KS_E_IO;
	/* Lookups and publishes count; the handshake's failures show in
	 * the log and in connected. */
	if (rc == KS_E_IO && !r->stopped && op->kind >= OP_GET)
		r->errors++;
	switch (op->kind) {
	case OP_GET:
		r->pending--;
		ks_hist_observe(&r->latency, &ks_hist_hit_bounds,
		    ks_now_ns() - op->t0);
		if (rc == KS_OK && rep->type == REDIS_REPLY_NIL)
			rc = KS_E_NOT_FOUND;
		else if (rc == KS_OK && rep->type != REDIS_REPLY_STRING)
			rc = KS_E_IO;
		op->fn(op->ctx, rc, rc == KS_OK ? rep->str : NULL,
		    rc == KS_OK ? (size_t)rep->len : 0);
		break;
	case OP_SET:
		if (rc == KS_OK)
			r->published++;
		else
			r->publish_failures++;
		break;
	case OP_CMD:
		if (op->cmd_fn)
			op->cmd_fn(op->ctx, rc, rc == KS_OK ? rep : NULL);
		break;
	case OP_HELLO:
		/* AUTH or SELECT refused: a wrong password or database. */
		if (rep && rep->type == REDIS_REPLY_ERROR && r->ac == op->ac) {
			char why[300];

			snprintf(why, sizeof why, "refused the connection: "
			    "%.200s", rep->str);
			drop(r, why);
		}
		break;
	case OP_PING:
		if (rc == KS_OK && r->ac == op->ac) {
			if (r->ever_up && r->down_logged) {
				r->reconnects++;
				ks_log(KS_LOG_INFO, "remote %s: connected again "
				    "after %.1f s", r->where, (double)(ks_now_ns()
				    - r->down_ns) / 1e9);
			} else if (!r->ever_up) {
				ks_log(KS_LOG_INFO, "remote %s: connected",
				    r->where);
			}
			r->state = KS_REMOTE_READY;
			r->ever_up = 1;
			r->down_logged = 0;
			r->backoff_ms = BACKOFF_MIN_MS;
		}
		break;
	}
}

static void on_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	op_t *op = priv;

	(void)ac;
	op->in_redis = 0;
	if (!op->told)
		tell(op, reply, reply ? KS_OK : KS_E_IO);
	op_release(op);
}

/* Past its deadline: Redis is slow or stopped.  The connection goes (a
 * reply may still be on its way and would answer the wrong command). */
static void on_deadline(uv_timer_t *t)
{
	op_t *op = t->data;
	ks_remote_t *r = op->r;

	if (op->told)
		return;
	if (op->kind >= OP_GET)
		r->timeouts++;
	tell(op, NULL, KS_E_TIMEOUT);
	if (r->ac == op->ac)
		drop(r, "no answer within the deadline (--remote-timeout)");
	op_release(op);
}

/* Sends one command with a deadline of MS: its op, or NULL and FN's op
 * is never told. */
static op_t *send_op_get(ks_remote_t *r, int kind, uint64_t ms,
    ks_remote_get_fn fn, void *ctx, int argc, const char **argv,
    const size_t *lens)
{
	op_t *op = calloc(1, sizeof *op);

	if (!op)
		return NULL;
	op->r = r;
	op->ac = r->ac;
	op->kind = kind;
	op->fn = fn;
	op->ctx = ctx;
	op->t0 = ks_now_ns();
	if (redisAsyncCommandArgv(r->ac, on_reply, op, argc, argv, lens) !=
	    REDIS_OK) {
		free(op);
		return NULL;
	}
	op->in_redis = 1;
	uv_timer_init(r->loop, &op->timer);
	op->timer.data = op;
	uv_timer_start(&op->timer, on_deadline, ms, 0);
	return op;
}

static int send_op(ks_remote_t *r, int kind, uint64_t ms,
    ks_remote_get_fn fn, void *ctx, int argc, const char **argv,
    const size_t *lens)
{
	return send_op_get(r, kind, ms, fn, ctx, argc, argv, lens) ? KS_OK :
	    KS_E_IO;
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	ks_remote_t *r = ac->data;
	char why[300];

	if (status == REDIS_OK || r->ac != ac)
		return;
	/* hiredis frees AC after this callback. */
	r->ac = NULL;
	snprintf(why, sizeof why, "cannot connect: %.200s", ac->errstr);
	went_down(r, why);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	ks_remote_t *r = ac->data;
	char why[300];

	if (r->ac != ac)
		return;          /* dropped on purpose (drop) */
	r->ac = NULL;
	snprintf(why, sizeof why, "connection lost: %.200s", status ==
	    REDIS_OK ? "closed" : ac->errstr);
	went_down(r, why);
}

/* A new context for ADDR: AUTH, SELECT and PING are queued at once, the
 * connection is up when PING is answered. */
static void connect_to(ks_remote_t *r, const char *ip)
{
	redisAsyncContext *ac;
	const char *argv[2];
	size_t lens[2];
	char db[16], why[300];
	int rc = KS_OK;

	ac = r->addr.is_unix ? redisAsyncConnectUnix(r->addr.path) :
	    redisAsyncConnect(ip, r->addr.port);
	if (!ac || ac->err || redisLibuvAttach(ac, r->loop) != REDIS_OK) {
		snprintf(why, sizeof why, "cannot connect: %.200s", ac ?
		    ac->errstr : "out of memory");
		if (ac)
			redisAsyncFree(ac);
		went_down(r, why);
		return;
	}
	ac->data = r;
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	r->ac = ac;
	r->state = KS_REMOTE_CONNECTING;
	if (r->password[0]) {
		argv[0] = "AUTH";
		argv[1] = r->password;
		lens[0] = 4;
		lens[1] = strlen(r->password);
		rc = send_op(r, OP_HELLO, r->timeout_ms, NULL, NULL, 2, argv,
		    lens);
	}
	if (rc == KS_OK && r->addr.db) {
		snprintf(db, sizeof db, "%d", r->addr.db);
		argv[0] = "SELECT";
		argv[1] = db;
		lens[0] = 6;
		lens[1] = strlen(db);
		rc = send_op(r, OP_HELLO, r->timeout_ms, NULL, NULL, 2, argv,
		    lens);
	}
	if (rc == KS_OK) {
		argv[0] = "PING";
		lens[0] = 4;
		rc = send_op(r, OP_PING, r->timeout_ms, NULL, NULL, 1, argv,
		    lens);
	}
	if (rc != KS_OK && r->ac == ac)
		drop(r, "cannot send to it");
}

static void on_resolved(uv_getaddrinfo_t *req, int status,
    struct addrinfo *res)
{
	ks_remote_t *r = req->data;
	char ip[INET6_ADDRSTRLEN], why[300];

	r->resolving = 0;
	if (r->stopped) {
		uv_freeaddrinfo(res);
		return;
	}
	if (status || !res || uv_ip_name(res->ai_addr, ip, sizeof ip)) {
		snprintf(why, sizeof why, "cannot resolve %.256s: %s",
		    r->addr.host, status ? uv_strerror(status) : "no address");
		uv_freeaddrinfo(res);
		went_down(r, why);
		return;
	}
	uv_freeaddrinfo(res);
	connect_to(r, ip);
}

/* A name is resolved off the loop (uv_getaddrinfo): hiredis's own lookup
 * would block it. */
static void connect_now(ks_remote_t *r)
{
	struct addrinfo hints;

	if (r->stopped || r->ac || r->resolving)
		return;
	if (r->addr.is_unix) {
		connect_to(r, NULL);
		return;
	}
	memset(&hints, 0, sizeof hints);
	hints.ai_socktype = SOCK_STREAM;
	r->gai.data = r;
	r->resolving = 1;
	if (uv_getaddrinfo(r->loop, &r->gai, on_resolved, r->addr.host, NULL,
	    &hints) != 0) {
		r->resolving = 0;
		went_down(r, "cannot resolve its name");
	}
}

void ks_remote_start(ks_remote_t *r, uv_loop_t *loop,
    const ks_remote_addr_t *addr, const char *password, uint64_t timeout_ms)
{
	memset(r, 0, sizeof *r);
	r->loop = loop;
	r->addr = *addr;
	if (addr->is_unix)
		snprintf(r->where, sizeof r->where, "unix:%s", addr->path);
	else
		snprintf(r->where, sizeof r->where, "redis://%s:%d",
		    addr->host, addr->port);
	snprintf(r->password, sizeof r->password, "%s", password ?
	    password : "");
	r->timeout_ms = timeout_ms;
	r->backoff_ms = BACKOFF_MIN_MS;
	uv_timer_init(loop, &r->retry);
	r->retry.data = r;
	uv_unref((uv_handle_t *)&r->retry);
	connect_now(r);
}

void ks_remote_close(ks_remote_t *r)
{
	if (r->stopped)
		return;
	r->stopped = 1;
	uv_close((uv_handle_t *)&r->retry, NULL);
	if (r->resolving)
		uv_cancel((uv_req_t *)&r->gai);
	if (r->ac) {
		redisAsyncContext *ac = r->ac;

		r->ac = NULL;
		redisAsyncFree(ac);
	}
	r->state = KS_REMOTE_DOWN;
}

int ks_remote_get(ks_remote_t *r, const char *key, ks_remote_get_fn fn,
    void *ctx)
{
	const char *argv[2] = { "GET", key };
	size_t lens[2] = { 3, strlen(key) };

	if (r->state != KS_REMOTE_READY || !r->ac) {
		r->skipped++;
		return KS_E_IO;
	}
	if (send_op(r, OP_GET, r->timeout_ms, fn, ctx, 2, argv, lens) !=
	    KS_OK) {
		r->skipped++;
		return KS_E_IO;
	}
	r->pending++;
	return KS_OK;
}

void ks_remote_set(ks_remote_t *r, const char *key, const void *v,
    size_t len)
{
	const char *argv[3] = { "SET", key, v };
	size_t lens[3] = { 3, strlen(key), len };
	uint64_t ms = r->timeout_ms + (len >> 20) * KS_REMOTE_MS_PER_MIB;

	if (r->state != KS_REMOTE_READY || !r->ac ||
	    send_op(r, OP_SET, ms, NULL, NULL, 3, argv, lens) != KS_OK)
		r->publish_failures++;
}

int ks_remote_cmd(ks_remote_t *r, int argc, const char **argv,
    const size_t *lens, ks_remote_reply_fn fn, void *ctx)
{
	op_t *op;

	if (r->state != KS_REMOTE_READY || !r->ac)
		return KS_E_IO;
	op = send_op_get(r, OP_CMD, r->timeout_ms, NULL, ctx, argc, argv,
	    lens);
	if (!op)
		return KS_E_IO;
	op->cmd_fn = fn;
	return KS_OK;
}
