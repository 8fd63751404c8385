/*
 * Flights and waiters (flight.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flight.h"

#define FLIGHT_OF(item) \
	((ks_flight_t *)((char *)(item) - offsetof(ks_flight_t, queued)))

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
	int p;

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

/* Tells every waiter of F its outcome and frees F. */
static void flight_end(ks_flights_t *set, ks_flight_t *f)
{
	ks_waiter_t *w, *next;

	f->state = FLIGHT_DONE;
	HASH_DEL(set->table, f);
	set->finish(set, f);
	if (f->err && f->err != KS_E_SHUTTING_DOWN)
		set->failures++;
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

static void job_done(ks_pool_job_t *pj)
{
	ks_flight_t *f = (ks_flight_t *)((char *)pj -
	    offsetof(ks_flight_t, pj));
	ks_flights_t *set = f->set;

	set->compile_ns += ks_now_ns() - pj->started_ns;
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
static int job_fill(ks_flights_t *set, ks_flight_t *f)
{
	ks_job_t *j = &f->pj.job;
	const ks_get_t *g = &f->get;
	const ks_keys_t *keys = set->keys;
	const ks_hash_t *fp = ks_keys_fingerprint(keys, g->spec.def);

	if (!fp || strlen(g->identity) >= sizeof j->identity)
		return KS_E_INTERNAL;
	j->spec = g->spec;
	j->backend = g->backend;
	snprintf(j->target, sizeof j->target, "%s", g->target);
	snprintf(j->format, sizeof j->format, "%s", g->format);
	strcpy(j->identity, g->identity);
	j->fingerprint = *fp;
	j->codegen = KS_CODEGEN_VERSION;
	return KS_OK;
}

void ks_flights_dispatch(ks_flights_t *set)
{
	ks_sched_item_t *it;
	ks_flight_t *f;
	int p, rc;

	while (!set->stopping && ks_pool_idle(set->pool) > 0) {
		for (p = 0, it = NULL; p < KS_PRIO_COUNT && !it; p++)
			it = ks_sched_pop(&set->queue[p]);
		if (!it)
			return;
		f = FLIGHT_OF(it);
		if (!flight_wanted(f)) {
			/* Every client of it went away: compile nothing. */
			set->abandoned++;
			flight_fail(set, f, KS_E_SHUTTING_DOWN, "no client "
			    "waits for this compile any more");
			continue;
		}
		set->queue_ns += ks_now_ns() - f->created_ns;
		f->pj.done = job_done;
		rc = job_fill(set, f);
		if (rc == KS_OK)
			rc = ks_pool_submit(set->pool, &f->pj);
		if (rc != KS_OK) {
			flight_fail(set, f, rc, "cannot start the compile");
			continue;
		}
		f->state = FLIGHT_RUNNING;
	}
}

static int enqueue(ks_flights_t *set, ks_flight_t *f, const ks_waiter_t *w)
{
	return ks_sched_push(&set->queue[f->prio], &f->queued, w->uid,
	    w->client);
}

int ks_flight_join(ks_flights_t *set, const ks_get_t *g, int prio,
    ks_waiter_t *w)
{
	ks_flight_t *f;

	HASH_FIND(hh, set->table, &g->key, sizeof g->key, f);
	if (f) {
		/* A get joining a queued warm flight promotes it, in the
		 * get's client's turn. */
		if (prio < f->prio && f->state == FLIGHT_QUEUED) {
			int old = f->prio;

			ks_sched_remove(&set->queue[old], &f->queued);
			f->prio = prio;
			if (enqueue(set, f, w) != KS_OK) {
				f->prio = old;
				if (enqueue(set, f, f->waiters) != KS_OK)
					return KS_E_NOMEM;
			}
		}
		w->joined = 1;
		set->joins++;
	} else {
		if (HASH_COUNT(set->table) >= KS_MAX_FLIGHTS)
			return KS_E_BUSY;
		f = calloc(1, sizeof *f);
		if (!f)
			return KS_E_NOMEM;
		f->key = g->key;
		f->get = *g;
		f->set = set;
		f->prio = prio;
		f->state = FLIGHT_QUEUED;
		f->created_ns = ks_now_ns();
		if (enqueue(set, f, w) != KS_OK) {
			free(f);
			return KS_E_NOMEM;
		}
		HASH_ADD(hh, set->table, key, sizeof f->key, f);
		w->joined = 0;
		set->compiles++;
	}
	w->next = f->waiters;
	f->waiters = w;
	f->nwaiters++;
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
