/*
 * The fleet tier of a lookup (lease.h): an artifact asked of the remote
 * tier and verified, the fleet-wide lease that lets one node compile a
 * key that several miss at once, its failure markers, and the signed
 * publication of what this node compiled (docs/fleet.md).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <hiredis/hiredis.h>

#include "fleetval.h"
#include "lease.h"

/* ---- the remote tier ---- */

/* The Redis key of an entry: the request key, under a prefix that names
 * the value's format (the signed entry of proto/entry.h, version 1). */
#define REMOTE_PREFIX "kspec:e1:"
#define REMOTE_KEY_LEN (sizeof REMOTE_PREFIX + KS_HASH_HEX)
#define REMOTE_LOG_EVERY_NS (10ull * 1000000000)

static void remote_key(const ks_hash_t *key, char out[REMOTE_KEY_LEN])
{
	char hex[KS_HASH_HEX];

	ks_hash_hex(key, hex);
	snprintf(out, REMOTE_KEY_LEN, REMOTE_PREFIX "%s", hex);
}

/* A value refused: counted, logged at most once every 10 s (a poisoned
 * Redis must not flood the log), and the flight compiles instead. */
static void remote_refused(ks_srv_t *srv, const ks_flight_t *f,
    const char *why)
{
	uint64_t now = ks_now_ns();
	char hex[KS_HASH_HEX];

	srv->remote->auth_failures++;
	if (srv->remote_log_ns && now - srv->remote_log_ns <
	    REMOTE_LOG_EVERY_NS) {
		srv->remote_log_quiet++;
		return;
	}
	ks_hash_hex(&f->key, hex);
	ks_log(KS_LOG_WARN, "remote: refused the value of %.16s for %s "
	    "(%s); compiling it here (%" PRIu64 " more refused since the "
	    "last such line)", hex, f->get.spec.def->name, why,
	    srv->remote_log_quiet);
	srv->remote_log_ns = now;
	srv->remote_log_quiet = 0;
}

/* The artifact of a value Redis had for F's key, or NULL when it is not
 * one this node can serve: signed by a fleet key, for this very key (not
 * a value copied under another), its metadata an object that names this
 * key, compiler and the bytes' checksum and length. */
static ks_artifact_t *remote_open(ks_srv_t *srv, const ks_flight_t *f,
    const char *v, size_t len)
{
	char err[512];
	ks_artifact_t *a;
	ks_entry_t e;
	ks_hash_t sum;
	int rc;

	if (ks_entry_open(srv->fleet, srv->nfleet, v, len, &e, err,
	    sizeof err) != KS_OK) {
		remote_refused(srv, f, err);
		return NULL;
	}
	rc = ks_fleet_entry_binds(&e, &f->key, f->get.identity, &sum, err,
	    sizeof err);
#ifdef KS_TEST_PLANT
	if (srv->remote_planted) {      /* the test build's planted bug: */
		rc = KS_OK;             /* every entry that verifies is taken */
		ks_hash(e.bytes, e.len, &sum);
	}
#endif
	if (rc != KS_OK) {
		remote_refused(srv, f, err);
		return NULL;
	}
	a = ks_artifact_new_with_sum(&f->key, &sum, e.meta, e.meta_len,
	    e.bytes, e.len);
	if (a)
		srv->remote->hits++;
	return a;
}

/* ---- signed fleet values: failure markers and leases ---- */

static const char *node_id(void);

/* The signed value of KIND for KEY (fleetval.h), valid for TTL_MS from
 * now, with the members of MORE (an object, may be NULL, taken over), hex,
 * in OUT.  KS_OK or an error (no sign key, out of memory). */
static int fleet_seal(ks_srv_t *srv, const ks_hash_t *key, const char *kind,
    uint64_t ttl_ms, cJSON *more, ks_buf_t *out)
{
	if (!srv->can_sign) {
		cJSON_Delete(more);
		return KS_E_DENIED;
	}
	return ks_fleet_value_seal(&srv->sign, key, kind, node_id(),
	    (double)ks_wall_ms(), ttl_ms, more, out);
}

/* ---- the fleet lease (docs/fleet.md, "Fleet-wide single flight") ---- */

#define LEASE_PREFIX "kspec:lease:"
#define FAIL_PREFIX "kspec:fail:"
#define LEASE_SEQ "kspec:lease-seq"

/*
 * One script asks for everything at once, atomically: KEYS entry, fail
 * marker, lease, token counter; ARGV this node's signed lease (hex,
 * fleet_seal), the lease's TTL, 1 when this node may take the lease.  {1,
 * entry}, {2, marker}, {3, our lease's value} (taken: signed:token, the
 * token from INCR, increasing fleet-wide), {0, the holder's value} (held
 * by another, or free and not ours to take: {0, ""}).
 */
static const char lease_acquire_lua[] =
    "local v = redis.call('GET', KEYS[1]) "
    "if v then return {1, v} end "
    "v = redis.call('GET', KEYS[2]) "
    "if v then return {2, v} end "
    "v = redis.call('GET', KEYS[3]) "
    "if v then return {0, v} end "
    "if ARGV[3] ~= '1' then return {0, ''} end "
    "local me = ARGV[1] .. ':' .. redis.call('INCR', KEYS[4]) "
    "if redis.call('SET', KEYS[3], me, 'NX', 'PX', ARGV[2]) then "
    "return {3, me} end "
    "return {0, ''}";
/* Whether KEYS[1] holds our lease: its value ends in ":" and our token
 * ARGV[1] (tokens are unique fleet-wide, so a renewal that was lost or
 * ran unseen leaves nothing to compare wrongly). */
#define LEASE_OURS_LUA \
    "local v = redis.call('GET', KEYS[1]) " \
    "local t = ':' .. ARGV[1] " \
    "if v and string.sub(v, -#t) == t then "
/* KEYS lease; ARGV our token, our lease signed anew, TTL: renewed (the
 * new signed lease, the same token) only while it is ours. */
static const char lease_renew_lua[] =
    LEASE_OURS_LUA
    "redis.call('SET', KEYS[1], ARGV[2] .. t, 'PX', ARGV[3]) return 1 end "
    "return 0";
/* KEYS lease; ARGV our token: deleted only while it is ours. */
static const char lease_release_lua[] =
    LEASE_OURS_LUA
    "return redis.call('DEL', KEYS[1]) end return 0";

/*
 * The lease of a flight, from its miss in Redis: waiting (REMOTE, its
 * timer polls), then held (its timer renews it while the flight is
 * queued and compiles; released by ks_lookup_finish) or gone.  Its own
 * allocation: its timer is closed asynchronously, after the flight.
 */
typedef struct {
	ks_srv_t *srv;
	ks_flight_t *f;
	uv_timer_t timer;
	ks_hash_t key;           /* the flight's request key */
	char hex[KS_HASH_HEX];
	char token[24];          /* ours, while held: the INCR of the take */
	ks_buf_t me;             /* this node's signed lease, for a take */
	uint64_t me_ns;          /* when it was signed */
	char *seen;              /* the holder's value last verified */
	size_t seen_len;
	double seen_expires;     /* its signed expiry, ms */
	uint64_t deadline_ns;    /* of the wait */
	int waited;              /* found another's lease at least once */
} lease_t;

static void lease_poll(lease_t *l);

static void lease_closed(uv_handle_t *h)
{
	lease_t *l = h->data;

	ks_buf_close(&l->me);
	free(l->seen);
	free(l);
}

static void lease_free(lease_t *l)
{
	uv_timer_stop(&l->timer);
	uv_close((uv_handle_t *)&l->timer, lease_closed);
}

/* This node, in the values of its leases. */
static const char *node_id(void)
{
	static char id[96];

	if (!id[0]) {
		char host[64] = "";

		gethostname(host, sizeof host - 1);
		snprintf(id, sizeof id, "%s/%ld", host[0] ? host : "node",
		    (long)getpid());
	}
	return id;
}

static void lease_keyname(char *out, size_t n, const char *prefix,
    const lease_t *l)
{
	snprintf(out, n, "%s%s", prefix, l->hex);
}

/* Renews L while it is ours, signed anew (its signed expiry moves with
 * the TTL); fire and forget: a lost renewal lets the lease expire and
 * another node may compile too, nothing worse; the next one, matched by
 * the token, renews it again if it is still ours. */
static void on_renew_tick(uv_timer_t *t)
{
	lease_t *l = t->data;
	char key[sizeof LEASE_PREFIX + KS_HASH_HEX], ttl[24];
	const char *argv[7];
	size_t lens[7];
	ks_buf_t v;
	int i;

	ks_buf_init(&v);
	if (fleet_seal(l->srv, &l->key, "lease", KS_LEASE_TTL_MS, NULL,
	    &v) != KS_OK) {
		ks_buf_close(&v);
		return;
	}
	lease_keyname(key, sizeof key, LEASE_PREFIX, l);
	snprintf(ttl, sizeof ttl, "%d", KS_LEASE_TTL_MS);
	argv[0] = "EVAL";
	argv[1] = lease_renew_lua;
	argv[2] = "1";
	argv[3] = key;
	argv[4] = l->token;
	argv[5] = v.data;
	argv[6] = ttl;
	for (i = 0; i < 7; i++)
		lens[i] = strlen(argv[i]);
	(void)ks_remote_cmd(l->srv->remote, 7, argv, lens, NULL, NULL);
	ks_buf_close(&v);
}

/* Leaves REMOTE: with A (served), or to compile; L goes unless held
 * (then renewed until ks_lookup_finish lets it go). */
static void lease_leave(lease_t *l, ks_artifact_t *a, int held)
{
	ks_flight_t *f = l->f;
	ks_srv_t *srv = l->srv;

	if (held) {
		f->lease = l;
		uv_timer_start(&l->timer, on_renew_tick, KS_LEASE_RENEW_MS,
		    KS_LEASE_RENEW_MS);
	} else {
		l->f = NULL;
		lease_free(l);
	}
	ks_flight_remote_done(&srv->flights, f, a);
}

/* The wait ends without an artifact or a lease: compile here, as
 * without a remote (at shutdown: the flight ends). */
static void lease_compile_here(lease_t *l)
{
	lease_leave(l, NULL, 0);
}

static void on_poll_tick(uv_timer_t *t)
{
	lease_poll(t->data);
}

/* What a marker's message says after it. */
#define ELSEWHERE " (on another node of the fleet)"

/* Another node's compile of this key failed: its error, ended here too,
 * when a fleet key signed the marker for this key, it has not expired and
 * it is a compile error (the compiler's own verdict, the same on every
 * node).  Anything else is ignored: compiled here. */
static void lease_failed(lease_t *l, const char *v, size_t len)
{
	ks_flight_t *f = l->f;
	ks_flights_t *flights;
	char msg[512], text[sizeof msg - sizeof ELSEWHERE + 1], why[256];

	if (ks_fleet_fail_open(l->srv->fleet, l->srv->nfleet, &l->key,
	    (double)ks_wall_ms(), v, len, text, sizeof text, why,
	    sizeof why) != KS_OK) {
		remote_refused(l->srv, f, why);
		lease_compile_here(l);
		return;
	}
	snprintf(msg, sizeof msg, "%s" ELSEWHERE, text);
	l->f = NULL;
	flights = &l->srv->flights;
	lease_free(l);
	/* Ends the flight with that error: not queued, not compiled. */
	ks_flight_remote_fail(flights, f, KS_E_COMPILE, msg);
}

/* The token of the lease L just took (its value V, signed:token, made
 * by our own script) into l->token; 0 if V is not that. */
static int take_token(lease_t *l, const redisReply *v)
{
	const char *colon;
	size_t n;

	if (v->type != REDIS_REPLY_STRING || v->len == 0 ||
	    !(colon = memrchr(v->str, ':', (size_t)v->len)))
		return 0;
	n = (size_t)v->len - (size_t)(colon + 1 - v->str);
	if (n == 0 || n >= sizeof l->token)
		return 0;
	memcpy(l->token, colon + 1, n);
	l->token[n] = '\0';
	return 1;
}

/* Whether V, another node's lease of L's key, was signed by a fleet key
 * for this key and is within its signed lifetime; refused (counted,
 * logged) if not.  The last value verified is kept, so that a wait's
 * polls check a signature once and then only its expiry. */
static int lease_is_signed(lease_t *l, const char *v, size_t len)
{
	double expires;
	char why[256];

	if (l->seen && l->seen_len == len && memcmp(l->seen, v, len) == 0) {
		if (l->seen_expires + KS_FLEET_SKEW_MS >= (double)ks_wall_ms())
			return 1;
		snprintf(why, sizeof why, "a lease that expired");
	} else if (ks_fleet_lease_open(l->srv->fleet, l->srv->nfleet,
	    &l->key, (double)ks_wall_ms(), v, len, &expires, why,
	    sizeof why) == KS_OK) {
		free(l->seen);
		l->seen = malloc(len);
		if (l->seen) {
			memcpy(l->seen, v, len);
			l->seen_len = len;
			l->seen_expires = expires;
		}
		return 1;
	}
	remote_refused(l->srv, l->f, why);
	return 0;
}

static void on_acquire(void *ctx, int rc, const redisReply *rep)
{
	lease_t *l = ctx;
	ks_srv_t *srv = l->srv;
	ks_remote_t *r = srv->remote;
	const redisReply *what, *v;
	ks_artifact_t *a;

	if (rc != KS_OK || rep->type != REDIS_REPLY_ARRAY ||
	    rep->elements != 2 ||
	    (what = rep->element[0])->type != REDIS_REPLY_INTEGER ||
	    ((v = rep->element[1])->type != REDIS_REPLY_STRING &&
	    v->type != REDIS_REPLY_NIL)) {
		/* Redis down, slow or strange: as without a remote. */
		lease_compile_here(l);
		return;
	}
	switch (what->integer) {
	case 1:
		a = remote_open(srv, l->f, v->str, (size_t)v->len);
		lease_leave(l, a, 0);     /* refused: compiled here */
		return;
	case 2:
		lease_failed(l, v->str, (size_t)v->len);
		return;
	case 3:
		if (!take_token(l, v)) {
			lease_compile_here(l);  /* cannot be: our own value */
			return;
		}
		r->lease_taken++;
		if (l->waited)
			r->lease_takeovers++;
		lease_leave(l, NULL, 1);
		return;
	}
	if (v->type != REDIS_REPLY_STRING || v->len == 0) {
		/* Free, and this node may not take it (it cannot publish). */
		lease_compile_here(l);
		return;
	}
	if (!lease_is_signed(l, v->str, (size_t)v->len)) {
		lease_compile_here(l);  /* not waited for: compiled here */
		return;
	}
	if (!l->waited) {
		l->waited = 1;
		r->lease_waits++;
		l->deadline_ns = ks_now_ns() + srv->cfg.remote_lease_wait_s *
		    1000000000ull;
	}
	if (ks_now_ns() >= l->deadline_ns) {
		r->lease_wait_timeouts++;
		lease_compile_here(l);
		return;
	}
	uv_timer_start(&l->timer, on_poll_tick, KS_LEASE_POLL_MS, 0);
}

/* Asks for the entry, a failure's marker or the lease (one script). */
static void lease_poll(lease_t *l)
{
	char ek[REMOTE_KEY_LEN], fk[sizeof FAIL_PREFIX + KS_HASH_HEX];
	char lk[sizeof LEASE_PREFIX + KS_HASH_HEX], ttl[24];
	const char *argv[10];
	size_t lens[10];
	int i;

	if (l->srv->stopping) {
		lease_compile_here(l);   /* ends it: the daemon stops */
		return;
	}
	/* This node's lease, signed, in case it takes it (nodes without the
	 * sign key never do: ARGV[3]); signed anew once it is older than a
	 * renewal's period, so that a take's lease lives until the first
	 * renewal. */
	if (l->srv->can_sign && (l->me.len == 0 || ks_now_ns() - l->me_ns >
	    KS_LEASE_RENEW_MS * 1000000ull)) {
		l->me.len = 0;
		if (fleet_seal(l->srv, &l->key, "lease", KS_LEASE_TTL_MS, NULL,
		    &l->me) != KS_OK) {
			lease_compile_here(l);
			return;
		}
		l->me_ns = ks_now_ns();
	}
	remote_key(&l->f->key, ek);
	lease_keyname(fk, sizeof fk, FAIL_PREFIX, l);
	lease_keyname(lk, sizeof lk, LEASE_PREFIX, l);
	snprintf(ttl, sizeof ttl, "%d", KS_LEASE_TTL_MS);
	argv[0] = "EVAL";
	argv[1] = lease_acquire_lua;
	argv[2] = "4";
	argv[3] = ek;
	argv[4] = fk;
	argv[5] = lk;
	argv[6] = LEASE_SEQ;
	argv[7] = l->me.len ? l->me.data : "";
	argv[8] = ttl;
	argv[9] = l->srv->can_sign ? "1" : "0";
	for (i = 0; i < 10; i++)
		lens[i] = strlen(argv[i]);
	if (ks_remote_cmd(l->srv->remote, 10, argv, lens, on_acquire, l) !=
	    KS_OK)
		lease_compile_here(l);
}

/* A miss in Redis: the lease, before a compile. */
static void lease_start(ks_srv_t *srv, ks_flight_t *f)
{
	lease_t *l = calloc(1, sizeof *l);

	if (!l) {
		ks_flight_remote_done(&srv->flights, f, NULL);
		return;
	}
	l->srv = srv;
	l->f = f;
	l->key = f->key;
	ks_buf_init(&l->me);
	ks_hash_hex(&f->key, l->hex);
	uv_timer_init(srv->loop, &l->timer);
	l->timer.data = l;
	lease_poll(l);
}

void ks_lease_end(ks_srv_t *srv, ks_flight_t *f)
{
	lease_t *l = f->lease;
	char lk[sizeof LEASE_PREFIX + KS_HASH_HEX];
	char fk[sizeof FAIL_PREFIX + KS_HASH_HEX], ttl[24];
	ks_buf_t mark;

	if (!l)
		return;
	f->lease = NULL;
	l->f = NULL;
	lease_keyname(lk, sizeof lk, LEASE_PREFIX, l);
	/* Only a compile error is the same on every node; a timeout, a
	 * crash or running out of memory belong to this node, so the
	 * waiters take the lease and compile themselves. */
	ks_buf_init(&mark);
	if (f->err == KS_E_COMPILE && srv->can_sign) {
		cJSON *more = cJSON_CreateObject();
		int rc = KS_E_NOMEM;

		if (more && cJSON_AddNumberToObject(more, "code", f->err) &&
		    cJSON_AddStringToObject(more, "message", f->errmsg))
			rc = fleet_seal(srv, &l->key, "fail",
			    KS_LEASE_FAIL_TTL_MS, more, &mark);    /* takes it */
		else
			cJSON_Delete(more);
		if (rc == KS_OK) {
			const char *argv[6] = { "SET", fk, mark.data, "PX",
				ttl, "NX" };
			size_t lens[6];
			int i;

			lease_keyname(fk, sizeof fk, FAIL_PREFIX, l);
			snprintf(ttl, sizeof ttl, "%d", KS_LEASE_FAIL_TTL_MS);
			for (i = 0; i < 6; i++)
				lens[i] = strlen(argv[i]);
			(void)ks_remote_cmd(srv->remote, 6, argv, lens, NULL,
			    NULL);
		}
	}
	ks_buf_close(&mark);
	{
		const char *argv[5] = { "EVAL", lease_release_lua, "1", lk,
		    l->token };
		size_t lens[5];
		int i;

		for (i = 0; i < 5; i++)
			lens[i] = strlen(argv[i]);
		(void)ks_remote_cmd(srv->remote, 5, argv, lens, NULL, NULL);
	}
	lease_free(l);
}

static void on_remote(void *ctx, int rc, const char *v, size_t len)
{
	ks_flight_t *f = ctx;
	ks_srv_t *srv = f->set->owner;
	ks_artifact_t *a = NULL;

	if (rc == KS_OK)
		a = remote_open(srv, f, v, len);
	else if (rc == KS_E_NOT_FOUND)
		srv->remote->misses++;
	if (rc == KS_E_NOT_FOUND && !srv->stopping) {
		lease_start(srv, f);
		return;
	}
	ks_flight_remote_done(&srv->flights, f, a);
}

int ks_lookup_remote(ks_flights_t *set, ks_flight_t *f)
{
	ks_srv_t *srv = set->owner;
	char key[REMOTE_KEY_LEN];

	if (!srv->remote || srv->stopping)
		return 0;
	remote_key(&f->key, key);
	return ks_remote_get(srv->remote, key, on_remote, f) == KS_OK;
}

void ks_lease_publish(ks_srv_t *srv, const ks_artifact_t *a)
{
	char key[REMOTE_KEY_LEN];
	ks_buf_t v;

	if (!srv->remote || !srv->can_sign)
		return;
	if (a->len > KS_REMOTE_MAX_PUBLISH) {
		srv->remote->too_large++;
		return;
	}
	ks_buf_init(&v);
	if (ks_entry_seal(&srv->sign, &a->key, a->meta, a->meta_len, a->bytes,
	    a->len, &v) == KS_OK) {
		remote_key(&a->key, key);
		ks_remote_set(srv->remote, key, v.data, v.len);
	} else {
		srv->remote->publish_failures++;
	}
	ks_buf_close(&v);
}
