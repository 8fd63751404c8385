/*
 * Uses: the pending set of touches (a hit records its key in memory, never
 * waiting on the writer) and its flush into the uses table, in batches.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "store_int.h"

/* The flush of the touches into uses (the artifacts' file writes a put's
 * and a removal's uses rows in their own transactions). */
static const kss_stmt_t stmts[] = {
	KSS_W(touch, "UPDATE uses SET last_used = ?2"
	    " WHERE key = ?1 AND last_used < ?2"),
};
KSS_STMTS(kss_touch_stmts, stmts);

/*
 * A use stamp for last_used: wall-clock milliseconds, but strictly greater
 * than every stamp this store handed out before (and than every last_used
 * on disk at open), so the LRU order of two uses in the same millisecond,
 * or across a wall clock stepped backwards, is still their real order.
 */
int64_t kss_stamp(ks_store_t *s)
{
	int64_t now = ks_wall_ms();
	int64_t prev = atomic_load_explicit(&s->clock, memory_order_relaxed);
	int64_t next;

	do {
		next = now > prev ? now : prev + 1;
	} while (!atomic_compare_exchange_weak_explicit(&s->clock, &prev, next,
	    memory_order_relaxed, memory_order_relaxed));
	return next;
}

/* Moves the pending touches into s->batch and returns how many. */
static size_t take_pending(ks_store_t *s)
{
	size_t n;

	pthread_mutex_lock(&s->tlock);
	n = s->npending;
	memcpy(s->batch, s->pending, n * sizeof s->pending[0]);
	s->npending = 0;
	memset(s->slots, 0, sizeof s->slots);
	pthread_mutex_unlock(&s->tlock);
	return n;
}

/*
 * Writes the pending touches in one transaction.  A touch only moves
 * last_used forward, so a row replaced by a put after the touch keeps the
 * put's newer stamp.  On failure the batch is dropped: touches are hints
 * for eviction order, and losing some costs nothing but precision.
 */
int kss_flush_locked(ks_store_t *s)
{
	size_t i, n;
	int rc;

	if (s->w == NULL)
		return KS_E_IO;         /* the touches wait for a reopen */
	n = take_pending(s);
	if (n == 0)
		return KS_OK;
	rc = kss_begin(s);
	for (i = 0; rc == KS_OK && i < n; i++) {
		kss_bind_key(s->w_touch, 1, &s->batch[i].key);
		sqlite3_bind_int64(s->w_touch, 2, s->batch[i].when);
		rc = kss_run(s, s->w_touch, "update last_used");
	}
	if (rc == KS_OK)
		rc = kss_commit(s);
	if (rc != KS_OK) {
		kss_rollback(s);
		ks_log(KS_LOG_WARN, "store %s: %zu last_used updates lost",
		    s->path, n);
	}
	return rc;
}

/*
 * Adds or refreshes KEY in the pending set (tlock held).  Returns 0 when
 * recorded, 1 when the set is full and KEY is not in it.
 */
static int pending_add(ks_store_t *s, const ks_hash_t *key, int64_t when)
{
	uint64_t h;
	size_t i;

	memcpy(&h, key->b, sizeof h);
	for (i = h & (PENDING_SLOTS - 1); s->slots[i];
	    i = (i + 1) & (PENDING_SLOTS - 1)) {
		struct touch *t = &s->pending[s->slots[i] - 1];

		if (ks_hash_eq(&t->key, key)) {
			if (when > t->when)
				t->when = when;
			return 0;
		}
	}
	if (s->npending == KS_STORE_PENDING_TOUCHES)
		return 1;
	s->pending[s->npending].key = *key;
	s->pending[s->npending].when = when;
	s->slots[i] = (uint16_t)++s->npending;
	return 0;
}

int ks_store_touch(ks_store_t *s, const ks_hash_t *key)
{
	int64_t when = kss_stamp(s);
	int full;

	/* A touch that finds the set full is dropped: it is only a hint for
	 * the eviction order, and waiting for the writer here would stall
	 * the caller behind a write. */
	pthread_mutex_lock(&s->tlock);
	if (pending_add(s, key, when))
		s->dropped++;
	full = s->npending == KS_STORE_PENDING_TOUCHES;
	pthread_mutex_unlock(&s->tlock);
	return full;
}

size_t ks_store_touch_room(ks_store_t *s)
{
	size_t n;

	pthread_mutex_lock(&s->tlock);
	n = KS_STORE_PENDING_TOUCHES - s->npending;
	pthread_mutex_unlock(&s->tlock);
	return n;
}

int ks_store_touch_many(ks_store_t *s, const ks_hash_t *keys, size_t n)
{
	size_t i;
	int full;

	pthread_mutex_lock(&s->tlock);
	for (i = 0; i < n; i++)
		if (pending_add(s, &keys[i], kss_stamp(s)))
			s->dropped++;
	full = s->npending == KS_STORE_PENDING_TOUCHES;
	pthread_mutex_unlock(&s->tlock);
	return full;
}

int ks_store_flush(ks_store_t *s)
{
	int rc;

	if (kss_wlock(s) != KS_OK)
		return KS_E_IO;
	rc = kss_flush_locked(s);
	pthread_mutex_unlock(&s->wlock);
	return rc;
}

uint64_t ks_store_touches_dropped(ks_store_t *s)
{
	uint64_t n;

	pthread_mutex_lock(&s->tlock);
	n = s->dropped;
	pthread_mutex_unlock(&s->tlock);
	return n;
}
