/*
 * Private to server/: the remote tier's connection to Redis (--remote),
 * hiredis on the loop through its libuv adapter.  Nothing here blocks:
 * every command has a deadline (a libuv timer: hiredis 0.14 has no async
 * timeouts), a command past it drops the connection, which fails every
 * other command on it, and the connection comes back in the background
 * (backoff 100 ms doubling to 5 s).  A connection counts as up only once
 * Redis has answered its PING (after AUTH and SELECT): a stopped Redis on
 * a Unix socket still accepts connections into its backlog.  What the
 * values are (signed entries) is lease.c's business, not this file's.
 * Only the loop thread touches it.
 */
#ifndef KS_SERVER_REMOTE_H
#define KS_SERVER_REMOTE_H

#include <stdint.h>
#include <uv.h>

#include "../base/base.h"
#include "metrics.h"

#define KS_REMOTE_DEFAULT_TIMEOUT_MS 100
/* Artifacts above this are not published (counted as too_large). */
#define KS_REMOTE_MAX_PUBLISH (512ull << 20)
/* A publish may take this much longer per MiB it writes. */
#define KS_REMOTE_MS_PER_MIB 16
/* Fleet-wide single flight (lease.c, docs/fleet.md): a compile's lease
 * lives this long unless renewed, every KS_LEASE_RENEW_MS while the
 * compile runs; a node that finds it held polls every KS_LEASE_POLL_MS,
 * up to --remote-lease-wait (KS_LEASE_DEFAULT_WAIT_S by default). */
#define KS_LEASE_TTL_MS 10000
#define KS_LEASE_RENEW_MS 3000
#define KS_LEASE_POLL_MS 75
#define KS_LEASE_DEFAULT_WAIT_S 60
/* A failed compile's marker, so that waiters stop waiting. */
#define KS_LEASE_FAIL_TTL_MS 30000

typedef struct {
	int is_unix;
	char path[108];          /* unix: the socket */
	char host[256];          /* redis: a name or an address */
	int port;
	int db;                  /* SELECTed when not 0 */
} ks_remote_addr_t;

/*
 * Parses redis://HOST:PORT[/DB] (HOST may be [v6]; PORT defaults to 6379)
 * or unix:/PATH[?db=N].  A password in the URL is refused (it would show
 * in ps): --remote-password-file.  KS_E_INVAL with a message.
 */
int ks_remote_parse(const char *url, ks_remote_addr_t *out, char *err,
    size_t errlen);
/* Reads the password (one line) from PATH, a secret's file
 * (ks_secret_open). */
int ks_remote_read_password(const char *path, char *out, size_t outlen,
    char *err, size_t errlen);

enum { KS_REMOTE_DOWN, KS_REMOTE_CONNECTING, KS_REMOTE_READY };

/* A lookup's outcome: KS_OK with the value (valid during the call only),
 * KS_E_NOT_FOUND (no such key), KS_E_TIMEOUT, KS_E_IO (the connection
 * was lost, or Redis answered an error). */
typedef void (*ks_remote_get_fn)(void *ctx, int rc, const char *v,
    size_t len);
/* Any command's outcome: KS_OK with REP (valid during the call only; an
 * error reply is KS_E_IO), KS_E_TIMEOUT, KS_E_IO. */
struct redisReply;
typedef void (*ks_remote_reply_fn)(void *ctx, int rc,
    const struct redisReply *rep);

typedef struct ks_remote {
	uv_loop_t *loop;
	ks_remote_addr_t addr;
	char where[400];         /* for messages */
	char password[512];      /* "" for none */
	uint64_t timeout_ms;
	struct redisAsyncContext *ac;
	int state;
	int stopped;
	uv_timer_t retry;
	uv_getaddrinfo_t gai;
	int resolving;
	uint64_t backoff_ms;
	int ever_up;
	int down_logged;         /* this outage has been logged */
	uint64_t down_ns;        /* when the connection was lost */
	/* Counters for stats; hits, misses, auth_failures and too_large are
	 * lease.c's (what the values were). */
	uint64_t hits, misses, timeouts, errors, auth_failures;
	uint64_t published, publish_failures, too_large;
	uint64_t reconnects;     /* connections made again after a loss */
	uint64_t outages;        /* times a ready connection was lost */
	uint64_t skipped;        /* lookups not asked: no connection */
	/* The lease (lease.c's): leases taken, flights that found one held
	 * and waited, leases taken after waiting (the holder's expired),
	 * waits that ran past --remote-lease-wait. */
	uint64_t lease_taken, lease_waits, lease_takeovers;
	uint64_t lease_wait_timeouts;
	uint64_t pending;        /* lookups waiting for Redis now */
	ks_hist_t latency;       /* lookups asked, to their outcome */
} ks_remote_t;

/* The tier's counters, for stats (STAT, in the "remote" object) and
 * /metrics (kspec_remote_METRIC_total, with HELP); OFF is the offset of
 * the uint64_t in ks_remote_t. */
typedef struct {
	const char *stat;
	const char *metric;
	const char *help;
	size_t off;
} ks_remote_counter_t;

extern const ks_remote_counter_t ks_remote_counters[];
extern const int ks_remote_ncounters;

static inline uint64_t ks_remote_count(const ks_remote_t *r,
    const ks_remote_counter_t *c)
{
	return *(const uint64_t *)((const char *)r + c->off);
}

/* Fills R and starts connecting in the background. */
void ks_remote_start(ks_remote_t *r, uv_loop_t *loop,
    const ks_remote_addr_t *addr, const char *password, uint64_t timeout_ms);
/* Shutdown: drops the connection, stops reconnecting; R's handles close
 * with the loop's next turns (R must live until the loop ends). */
void ks_remote_close(ks_remote_t *r);

/*
 * GET KEY.  KS_OK: FN is called once, from the loop, never from inside
 * this call.  KS_E_IO when there is no connection now (counted skipped):
 * FN is not called.
 */
int ks_remote_get(ks_remote_t *r, const char *key, ks_remote_get_fn fn,
    void *ctx);
/* SET KEY V, fire and forget (counted published or publish_failures). */
void ks_remote_set(ks_remote_t *r, const char *key, const void *v,
    size_t len);

/*
 * Any command (ARGC strings of ARGV, LENS) with the usual deadline.  KS_OK:
 * FN (unless NULL: fire and forget) is called once, from the loop.
 * KS_E_IO when there is no connection now: FN is not called.
 */
int ks_remote_cmd(ks_remote_t *r, int argc, const char **argv,
    const size_t *lens, ks_remote_reply_fn fn, void *ctx);

#endif
