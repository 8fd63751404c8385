/*
 * Hot tier: the artifacts served most recently, in memory, under a byte
 * budget.  Used by one thread only (the loop thread), so it has no locks;
 * the artifacts it holds are shared with other threads through their
 * atomic reference counts.
 *
 * An entry is in the hash table and in the LRU list at once, or in
 * neither.  The list runs from head (most recently used) to tail (least);
 * eviction takes from the tail.  Each entry holds one reference to its
 * artifact and costs meta_len + len bytes of the budget (the entry's own
 * ~100 bytes of bookkeeping are not counted).
 */
#include <stdlib.h>
#include <string.h>

/* Request keys are BLAKE2b outputs computed by the daemon, never chosen by
 * clients, so their first bytes are already uniformly distributed and need
 * no further hashing. */
#define HASH_FUNCTION(keyptr, keylen, hashv) \
	memcpy(&(hashv), (keyptr), sizeof(hashv))
/* A failed table allocation leaves the entry out (hh.tbl == NULL) instead
 * of calling exit(): the hot tier is a cache, so it simply does not keep
 * the artifact. */
#define HASH_NONFATAL_OOM 1
#include <uthash.h>

#include "store.h"

struct hot_entry {
	ks_hash_t key;                  /* copy of a->key: the table key */
	ks_artifact_t *a;               /* one reference held */
	size_t cost;                    /* a->meta_len + a->len */
	struct hot_entry *prev, *next;  /* LRU list, head = most recent */
	int used;                       /* in the used list */
	struct hot_entry *uprev, *unext;
	UT_hash_handle hh;
};

/* Uses of entries dropped before they were taken. */
#define DROPPED_USES 64

struct ks_hot {
	struct hot_entry *table;        /* uthash head */
	struct hot_entry *head, *tail;
	struct hot_entry *used;         /* used since the last take */
	ks_hash_t dropped[DROPPED_USES];
	size_t ndropped;
	size_t bytes, max_bytes, count;
};

static void mark_used(ks_hot_t *h, struct hot_entry *e)
{
	if (e->used)
		return;
	e->used = 1;
	e->uprev = NULL;
	e->unext = h->used;
	if (h->used)
		h->used->uprev = e;
	h->used = e;
}

static void unmark_used(ks_hot_t *h, struct hot_entry *e)
{
	if (!e->used)
		return;
	if (e->uprev)
		e->uprev->unext = e->unext;
	else
		h->used = e->unext;
	if (e->unext)
		e->unext->uprev = e->uprev;
	e->used = 0;
	e->uprev = e->unext = NULL;
}

ks_hot_t *ks_hot_new(size_t max_bytes)
{
	ks_hot_t *h = calloc(1, sizeof *h);

	if (h != NULL)
		h->max_bytes = max_bytes;
	return h;
}

static void unlink_lru(ks_hot_t *h, struct hot_entry *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		h->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		h->tail = e->prev;
	e->prev = e->next = NULL;
}

static void push_front(ks_hot_t *h, struct hot_entry *e)
{
	e->prev = NULL;
	e->next = h->head;
	if (h->head)
		h->head->prev = e;
	else
		h->tail = e;
	h->head = e;
}

/* Drops E from the table, the list and the budget, and its reference. */
static void drop(ks_hot_t *h, struct hot_entry *e)
{
	/* Its use is kept until taken, within a bound (a use lost only
	 * makes the store's eviction order less precise). */
	if (e->used && h->ndropped < DROPPED_USES)
		h->dropped[h->ndropped++] = e->key;
	unmark_used(h, e);
	HASH_DEL(h->table, e);
	unlink_lru(h, e);
	h->bytes -= e->cost;
	h->count--;
	ks_artifact_unref(e->a);
	free(e);
}

void ks_hot_free(ks_hot_t *h)
{
	if (h == NULL)
		return;
	while (h->tail)
		drop(h, h->tail);
	HASH_CLEAR(hh, h->table);
	free(h);
}

int ks_hot_has(const ks_hot_t *h, const ks_hash_t *key)
{
	struct hot_entry *e;

	HASH_FIND(hh, h->table, key->b, KS_HASH_BYTES, e);
	return e != NULL;
}

ks_artifact_t *ks_hot_get(ks_hot_t *h, const ks_hash_t *key)
{
	struct hot_entry *e;

	HASH_FIND(hh, h->table, key->b, KS_HASH_BYTES, e);
	if (e == NULL)
		return NULL;
	if (e != h->head) {
		unlink_lru(h, e);
		push_front(h, e);
	}
	mark_used(h, e);
	return e->a;
}

size_t ks_hot_take_uses(ks_hot_t *h, ks_hash_t *keys, size_t max)
{
	struct hot_entry *e;
	size_t n = 0;

	while (n < max && h->ndropped)
		keys[n++] = h->dropped[--h->ndropped];
	while (n < max && (e = h->used)) {
		keys[n++] = e->key;
		unmark_used(h, e);
	}
	return n;
}

int ks_hot_put(ks_hot_t *h, ks_artifact_t *a)
{
	struct hot_entry *e;
	size_t cost = a->meta_len + a->len;

	HASH_FIND(hh, h->table, a->key.b, KS_HASH_BYTES, e);
	if (e != NULL) {
		if (e->a == a) {
			unlink_lru(h, e);
			push_front(h, e);
			mark_used(h, e);
			return 1;
		}
		/* A new artifact under a known key replaces the old one. */
		drop(h, e);
	}
	if (h->max_bytes == 0 || cost > h->max_bytes)
		return 0;
	while (h->tail && h->bytes + cost > h->max_bytes)
		drop(h, h->tail);

	e = calloc(1, sizeof *e);
	if (e == NULL)
		return 0;
	e->key = a->key;
	e->a = a;
	e->cost = cost;
	HASH_ADD(hh, h->table, key.b, KS_HASH_BYTES, e);
	if (e->hh.tbl == NULL) {
		free(e);
		return 0;
	}
	ks_artifact_ref(a);
	push_front(h, e);
	mark_used(h, e);
	h->bytes += cost;
	h->count++;
	return 1;
}

void ks_hot_remove(ks_hot_t *h, const ks_hash_t *key)
{
	struct hot_entry *e;

	HASH_FIND(hh, h->table, key->b, KS_HASH_BYTES, e);
	if (e != NULL)
		drop(h, e);
}

int ks_hot_remove_if(ks_hot_t *h, int (*match)(void *ctx,
    const ks_artifact_t *a), void *ctx, ks_hash_t **removed, size_t *n)
{
	struct hot_entry *e, *tmp;
	ks_hash_t *keys;
	size_t k = 0;

	*removed = NULL;
	*n = 0;
	keys = malloc((h->count ? h->count : 1) * sizeof *keys);
	if (keys == NULL)
		return KS_E_NOMEM;
	HASH_ITER(hh, h->table, e, tmp) {
		if (match && !match(ctx, e->a))
			continue;
		keys[k++] = e->key;
		drop(h, e);
	}
	*removed = keys;
	*n = k;
	return KS_OK;
}

void ks_hot_each(ks_hot_t *h, void (*fn)(void *ctx, ks_artifact_t *a),
    void *ctx)
{
	struct hot_entry *e;

	for (e = h->head; e; e = e->next)
		fn(ctx, e->a);
}

size_t ks_hot_bytes(const ks_hot_t *h)
{
	return h->bytes;
}

size_t ks_hot_count(const ks_hot_t *h)
{
	return h->count;
}
