/*
 * Flights and waiters (flight.h).
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flight.h"

static void negative_expire(ks_flights_t *set, uint64_t now);

#define FLIGHT_OF(item) \
	((ks_flight_t *)((char *)(item) - offsetof(ks_flight_t, queued)))

static void job_done(ks_pool_job_t *pj);

/*
 * Whether F keeps the invariants of its state (flight.h), asserted at its
 * transitions (a hit never reaches a flight): its waiters are nwaiters in
 * number and each names F; a QUEUED flight is in its fair queue (or popped
 * by the dispatch that is starting it), a RUNNING one popped and its job
 * the pool's, a REMOTE one in no queue.  A DONE flight is freed at once:
 * none is ever looked at.
 */
static int flight_state_ok(const ks_flight_t *f)
{
	const ks_waiter_t *w;
	int n = 0;

	for (w = f->waiters; w; w = w->next, n++)
		if (w->flight != f)
			return 0;
	if (n != f->nwaiters || f->prio < 0 || f->prio >= KS_PRIO_COUNT)
		return 0;
	switch (f->state) {
	case FLIGHT_QUEUED:
		return f->queued.client != NULL;
	case FLIGHT_RUNNING:
		return f->queued.client && f->queued.running &&
		    f->pj.done == job_done;
	case FLIGHT_REMOTE:
		return f->queued.client == NULL;
	default:
		return 0;
	}
}

void ks_flights_init(ks_flights_t *set, ks_pool_t *pool,
    const ks_keys_t *keys, void *owner)
{
	int p;

	memset(set, 0, sizeof *set);
	set->pool = pool;
	set->keys = keys;
	set->owner = owner;
	for (p = 0; p < KS_PRIO_COUNT; p++)
		ks_sched_init(&set->queue[p]);
}

void ks_flights_close(ks_flights_t *set)
{
	ks_flight_user_t *u, *tmp;
	int p;

	negative_expire(set, UINT64_MAX);
	HASH_ITER(hh, set->users, u, tmp) {
		HASH_DEL(set->users, u);
		free(u);
	}
	for (p = 0; p < KS_PRIO_COUNT; p++)
		ks_sched_close(&set->queue[p]);
}

unsigned ks_flights_count(const ks_flights_t *set)
{
	return HASH_COUNT(set->table);
}

void ks_flights_each(ks_flights_t *set, void (*fn)(void *ctx,
    const ks_flight_t *f), void *ctx)
{
	ks_flight_t *f, *tmp;

	HASH_ITER(hh, set->table, f, tmp)
		fn(ctx, f);
}

/* ---- negative entries ---- */

/* Drops the entries that have expired (they are in expiry order). */
static void negative_expire(ks_flights_t *set, uint64_t now)
{
	ks_negative_t *n;

	while ((n = set->negative_head) && n->expires_ns <= now) {
		set->negative_head = n->next;
		if (!set->negative_head)
			set->negative_tail = NULL;
		HASH_DEL(set->negative, n);
		free(n);
	}
}

/* A compile that crashed, timed out or ran out of memory is not run again
 * for KS_NEGATIVE_TTL_MS: requests for its key get its error at once. */
static void negative_add(ks_flights_t *set, const ks_flight_t *f)
{
	ks_negative_t *n;

	if (f->err != KS_E_COMPILE_CRASHED && f->err != KS_E_COMPILE_TIMEOUT &&
	    f->err != KS_E_COMPILE_OOM)
		return;
	negative_expire(set, ks_now_ns());
	HASH_FIND(hh, set->negative, &f->key, sizeof f->key, n);
	if (n)
		return;
	n = calloc(1, sizeof *n);
	if (!n)
		return;
	n->key = f->key;
	n->err = f->err;
	snprintf(n->msg, sizeof n->msg, "%s", f->errmsg);
	n->expires_ns = ks_now_ns() + (uint64_t)KS_NEGATIVE_TTL_MS * 1000000;
	HASH_ADD(hh, set->negative, key, sizeof n->key, n);
	if (set->negative_tail)
		set->negative_tail->next = n;
	else
		set->negative_head = n;
	set->negative_tail = n;
}

/* The negative entry of KEY: its error, with a message in ERR. */
static int negative_find(ks_flights_t *set, const ks_hash_t *key, char *err,
    size_t errlen)
{
	uint64_t now = ks_now_ns();
	ks_negative_t *n;

	negative_expire(set, now);
	HASH_FIND(hh, set->negative, key, sizeof *key, n);
	if (!n)
		return KS_OK;
	snprintf(err, errlen, "%s (a recent failure, not retried for another "
	    "%.1f s)", n->msg, (double)(n->expires_ns - now) / 1e9);
	set->negative_hits++;
	return n->err;
}

/* ---- flights per user ---- */

static ks_flight_user_t *flight_user(ks_flights_t *set, uint32_t uid,
    int create)
{
	ks_flight_user_t *u;

	HASH_FIND(hh, set->users, &uid, sizeof uid, u);
	if (u || !create)
		return u;
	u = calloc(1, sizeof *u);
	if (u) {
		u->uid = uid;
		HASH_ADD(hh, set->users, uid, sizeof u->uid, u);
	}
	return u;
}

static void flight_user_drop(ks_flights_t *set, uint32_t uid)
{
	ks_flight_user_t *u = flight_user(set, uid, 0);

	if (u && --u->flights == 0) {
		HASH_DEL(set->users, u);
		free(u);
	}
}

/* Tells every waiter of F its outcome and frees F. */
static void flight_end(ks_flights_t *set, ks_flight_t *f)
{
	ks_waiter_t *w, *next;

	/* Never freed while its fair queue still holds it. */
	assert(f->state != FLIGHT_DONE &&
	    (!f->queued.client || f->queued.running));
	ks_sched_finish(&set->queue[f->prio], &f->queued);
	f->state = FLIGHT_DONE;
	HASH_DEL(set->table, f);
	flight_user_drop(set, f->uid);
	set->finish(set, f);
	if (f->err && f->err != KS_E_SHUTTING_DOWN &&
	    f->err != KS_E_CANCELLED)
		set->failures++;
	negative_add(set, f);
	for (w = f->waiters; w; w = next) {
		next = w->next;
		w->done(w, f);
	}
	if (f->artifact)
		ks_artifact_unref(f->artifact);
	ks_job_out_close(&f->pj.out);
	free(f);
	if (!set->table && set->idle)
		set->idle(set);
}

/* Ends F, which never ran, with ERR. */
static void flight_fail(ks_flights_t *set, ks_flight_t *f, int err,
    const char *msg)
{
	f->pj.err = err;
	snprintf(f->pj.errmsg, sizeof f->pj.errmsg, "%s", msg);
	flight_end(set, f);
}

const char *const ks_compile_result_names[KS_CR_COUNT] = {
	"ok", "failed", "timeout", "crashed", "oom",
};

static int compile_result(int err)
{
	switch (err) {
	case KS_OK: return KS_CR_OK;
	case KS_E_COMPILE_TIMEOUT: return KS_CR_TIMEOUT;
	case KS_E_COMPILE_CRASHED: return KS_CR_CRASHED;
	case KS_E_COMPILE_OOM: return KS_CR_OOM;
	default: return KS_CR_FAILED;
	}
}

/* Counts a compile that ran, under its backend. */
static void count_compile(ks_flights_t *set, const ks_flight_t *f)
{
	const ks_backend_t *const *all;
	uint64_t ns = (uint64_t)(f->pj.compile_ms * 1e6);
	int i, n;

	set->compile_ns += ns;
	all = ks_backends(&n);
	for (i = 0; i < n && i < KS_KEYS_MAX_BACKENDS; i++)
		if (all[i] == f->get.backend) {
			ks_hist_observe(&set->compile_hist[i],
			    &ks_hist_compile_bounds, ns);
			set->compile_results[i][compile_result(f->pj.err)]++;
		}
}

static void job_done(ks_pool_job_t *pj)
{
	ks_flight_t *f = (ks_flight_t *)((char *)pj -
	    offsetof(ks_flight_t, pj));
	ks_flights_t *set = f->set;

	assert(f->state == FLIGHT_RUNNING);
	count_compile(set, f);
	flight_end(set, f);
	if (!set->stopping)
		ks_flights_dispatch(set);
}

/* 1 while some waiter of F can still receive its reply. */
static int flight_wanted(const ks_flight_t *f)
{
	const ks_waiter_t *w;

	for (w = f->waiters; w; w = w->next)
		if (w->wanted(w))
			return 1;
	return 0;
}

/* The job of F: the normalized spec and what its key promises. */
int ks_flight_job_fill(const ks_keys_t *keys, const ks_get_t *g,
    ks_pool_job_t *pj)
{
	ks_job_t *j = &pj->job;
	const ks_hash_t *fp = ks_keys_fingerprint(keys, g->spec.def);

	if (!fp || strlen(g->identity) >= sizeof j->identity)
		return KS_E_INTERNAL;
	pj->key = g->key;
	j->spec = g->spec;
	j->backend = g->backend;
	snprintf(j->target, sizeof j->target, "%s", g->target);
	snprintf(j->format, sizeof j->format, "%s", g->format);
	strcpy(j->identity, g->identity);
	j->fingerprint = *fp;
	j->codegen = KS_CODEGEN_VERSION;
	return KS_OK;
}

/*
 * The next flight to start, or NULL: while the pool can take an ordinary
 * job, the first of the highest priority in fair order; else, while its
 * reserve is free, the next get of a client that has nothing compiling
 * (pool.h).  A client's backlog never takes the reserve, so another
 * client's cold get is never queued behind it.
 */
static ks_sched_item_t *next_flight(ks_flights_t *set, int *reserve)
{
	ks_sched_item_t *it = NULL;
	int p;

	*reserve = 0;
	if (ks_pool_idle(set->pool) > 0) {
		for (p = 0; p < KS_PRIO_COUNT && !it; p++)
			it = ks_sched_pop(&set->queue[p]);
		return it;
	}
	if (!ks_pool_reserve_idle(set->pool))
		return NULL;
	*reserve = 1;
	return ks_sched_pop_lone(&set->queue[KS_PRIO_GET]);
}

void ks_flights_dispatch(ks_flights_t *set)
{
	ks_sched_item_t *it;
	ks_flight_t *f;
	int reserve, rc;

	if (set->first)
		set->first(set);
	while (!set->stopping && (it = next_flight(set, &reserve))) {
		f = FLIGHT_OF(it);
		assert(f->state == FLIGHT_QUEUED && flight_state_ok(f));
		if (!flight_wanted(f)) {
			/* Every client of it went away: compile nothing. */
			set->abandoned++;
			flight_fail(set, f, KS_E_SHUTTING_DOWN, "no client "
			    "waits for this compile any more");
			continue;
		}
		set->queue_ns += ks_now_ns() - f->created_ns;
		f->pj.done = job_done;
		f->pj.reserve = reserve;
		rc = ks_flight_job_fill(set->keys, &f->get, &f->pj);
		if (rc == KS_OK)
			rc = ks_pool_submit(set->pool, &f->pj);
		if (rc != KS_OK) {
			flight_fail(set, f, rc, "cannot start the compile");
			continue;
		}
		f->state = FLIGHT_RUNNING;
		assert(flight_state_ok(f));
	}
}

static int enqueue(ks_flights_t *set, ks_flight_t *f, const ks_waiter_t *w)
{
	return ks_sched_push(&set->queue[f->prio], &f->queued, w->uid,
	    w->client);
}

void ks_flight_remote_done(ks_flights_t *set, ks_flight_t *f,
    ks_artifact_t *a)
{
	assert(f->state == FLIGHT_REMOTE && flight_state_ok(f));
	if (a) {
		f->remote_hit = 1;
		f->artifact = a;
		flight_end(set, f);
		return;
	}
	f->state = FLIGHT_QUEUED;
	if (set->stopping) {
		flight_fail(set, f, KS_E_SHUTTING_DOWN, "daemon stopped "
		    "before this compile started");
		return;
	}
	/* Queued in the turn of whoever started it (or of the get that
	 * promoted it); one nobody waits for is abandoned at its turn. */
	if (ks_sched_push(&set->queue[f->prio], &f->queued, f->turn_uid,
	    f->turn_client) != KS_OK) {
		flight_fail(set, f, KS_E_NOMEM, "out of memory");
		return;
	}
	set->compiles++;
	assert(flight_state_ok(f));
	ks_flights_dispatch(set);
}

void ks_flight_remote_fail(ks_flights_t *set, ks_flight_t *f, int err,
    const char *msg)
{
	assert(f->state == FLIGHT_REMOTE && flight_state_ok(f));
	flight_fail(set, f, err, msg);
}

int ks_flight_join(ks_flights_t *set, const ks_get_t *g, int prio,
    ks_waiter_t *w, char *err, size_t errlen)
{
	ks_flight_t *f;
	int rc;

	HASH_FIND(hh, set->table, &g->key, sizeof g->key, f);
	if (!f && (rc = negative_find(set, &g->key, err, errlen)) != KS_OK)
		return rc;
	if (f) {
		/* A get joining a queued warm flight promotes it, in the
		 * get's client's turn. */
		if (prio < f->prio && f->state == FLIGHT_REMOTE) {
			f->prio = prio;
			f->turn_uid = w->uid;
			f->turn_client = w->client;
		} else if (prio < f->prio && f->state == FLIGHT_QUEUED) {
			int old = f->prio;

			ks_sched_remove(&set->queue[old], &f->queued);
			f->prio = prio;
			if (enqueue(set, f, w) != KS_OK) {
				f->prio = old;
				if (enqueue(set, f, f->waiters) != KS_OK) {
					snprintf(err, errlen, "out of memory");
					return KS_E_NOMEM;
				}
			}
		}
		w->joined = 1;
		set->joins++;
	} else {
		ks_flight_user_t *u;

		if (HASH_COUNT(set->table) >= KS_MAX_FLIGHTS) {
			snprintf(err, errlen, "%d distinct compiles are queued; "
			    "try again later", KS_MAX_FLIGHTS);
			return KS_E_BUSY;
		}
		u = flight_user(set, w->uid, 1);
		if (u && u->flights >= KS_MAX_FLIGHTS_PER_USER) {
			snprintf(err, errlen, "uid %u has %d distinct compiles "
			    "queued or running, the most one user may have; try "
			    "again later", w->uid, u->flights);
			return KS_E_BUSY;
		}
		f = u ? calloc(1, sizeof *f) : NULL;
		if (!f) {
			if (u && u->flights == 0) {
				HASH_DEL(set->users, u);
				free(u);
			}
			snprintf(err, errlen, "out of memory");
			return KS_E_NOMEM;
		}
		f->key = g->key;
		f->get = *g;
		f->set = set;
		f->uid = w->uid;
		f->prio = prio;
		f->state = FLIGHT_QUEUED;
		f->created_ns = ks_now_ns();
		f->turn_uid = w->uid;
		f->turn_client = w->client;
		if (set->remote && set->remote(set, f)) {
			f->state = FLIGHT_REMOTE;
		} else if (enqueue(set, f, w) != KS_OK) {
			free(f);
			if (u->flights == 0) {
				HASH_DEL(set->users, u);
				free(u);
			}
			snprintf(err, errlen, "out of memory");
			return KS_E_NOMEM;
		}
		HASH_ADD(hh, set->table, key, sizeof f->key, f);
		u->flights++;
		w->joined = 0;
		if (f->state == FLIGHT_QUEUED)
			set->compiles++;
	}
	w->flight = f;
	w->next = f->waiters;
	f->waiters = w;
	f->nwaiters++;
	assert(flight_state_ok(f));
	return KS_OK;
}

int ks_flight_leave(ks_flights_t *set, ks_waiter_t *w)
{
	ks_flight_t *f = w->flight;
	ks_waiter_t **p;

	assert(f->state != FLIGHT_DONE && flight_state_ok(f));
	if (f->state != FLIGHT_QUEUED)
		return KS_E_BUSY;
	for (p = &f->waiters; *p && *p != w; p = &(*p)->next)
		;
	if (!*p)
		return KS_E_NOT_FOUND;
	*p = w->next;
	w->next = NULL;
	f->nwaiters--;
	if (f->waiters)
		return KS_OK;
	/* Nobody else asked for it: compile nothing. */
	ks_sched_remove(&set->queue[f->prio], &f->queued);
	set->abandoned++;
	flight_fail(set, f, KS_E_CANCELLED, "every request for this compile "
	    "was cancelled");
	return KS_OK;
}

void ks_flights_stop(ks_flights_t *set, int err, const char *msg)
{
	ks_flight_t *f, *tmp;

	set->stopping = 1;
	HASH_ITER(hh, set->table, f, tmp) {
		if (f->state != FLIGHT_QUEUED)
			continue;
		ks_sched_remove(&set->queue[f->prio], &f->queued);
		flight_fail(set, f, err, msg);
	}
}
