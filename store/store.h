/*
 * store: the persistent artifact cache (sqlite, WAL) and the in-memory hot
 * tier.  It sees keys, metadata text and bytes, never IR.
 */
#ifndef KS_STORE_H
#define KS_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

/*
 * An artifact as served: immutable after creation and shared by reference
 * count between the hot tier, in-flight replies and the store writer.
 * meta is a JSON fragment of reply fields without braces, e.g.
 * "\"kernel\":\"gemm\",\"variant\":\"gemv_m1\",...", so a reply is built by
 * concatenation without any JSON work on the hit path.
 */
typedef struct ks_artifact {
	ks_hash_t key;          /* request key */
	ks_hash_t sum;          /* BLAKE2b-256 of bytes */
	char *meta;
	size_t meta_len;
	uint8_t *bytes;
	size_t len;
	int refs;               /* atomic */
} ks_artifact_t;

/* Copies meta and bytes; sum computed here.  refs = 1.  NULL on OOM. */
ks_artifact_t *ks_artifact_new(const ks_hash_t *key, const char *meta,
    const void *bytes, size_t len);
void ks_artifact_ref(ks_artifact_t *a);
void ks_artifact_unref(ks_artifact_t *a);

/* ---- hot tier: memory LRU under a byte budget (single thread) ---- */

typedef struct ks_hot ks_hot_t;

ks_hot_t *ks_hot_new(size_t max_bytes);
void ks_hot_free(ks_hot_t *h);
/* Borrowed reference valid until the next ks_hot_put/ks_hot_free on H;
 * ks_artifact_ref it to keep it.  Marks the entry most recently used. */
ks_artifact_t *ks_hot_get(ks_hot_t *h, const ks_hash_t *key);
/* Adds a reference to A; evicts least recently used entries over budget.
 * An artifact larger than the whole budget is not kept. */
void ks_hot_put(ks_hot_t *h, ks_artifact_t *a);
void ks_hot_remove(ks_hot_t *h, const ks_hash_t *key);
size_t ks_hot_bytes(const ks_hot_t *h);
size_t ks_hot_count(const ks_hot_t *h);

/* ---- persistent store ---- */

typedef struct ks_store ks_store_t;

typedef struct {
	uint64_t entries;
	uint64_t bytes;         /* artifact bytes stored */
	uint64_t max_bytes;
	uint64_t corrupt;       /* bad rows found and removed since open */
	uint64_t evicted;       /* rows evicted for the byte budget */
	int schema_version;
} ks_store_stats_t;

/*
 * Opens or creates the store at PATH (parent directories created, 0700),
 * WAL mode, schema migrated to the current version.  max_bytes is the byte
 * budget of stored artifacts (0: unlimited); over it, least recently used
 * rows are evicted after a put.  Thread safety: every function may be
 * called from any thread; writes go through one writer connection under a
 * mutex, reads through a separate reader connection per store.
 */
int ks_store_open(const char *path, uint64_t max_bytes, ks_store_t **out,
    char *err, size_t errlen);
/* Flushes pending last_used updates, checkpoints, closes. */
void ks_store_close(ks_store_t *s);

/*
 * Looks KEY up.  KS_OK with *out (refs = 1, caller unrefs) when found and
 * its checksum verifies; KS_E_NOT_FOUND when absent; KS_E_CORRUPT when a
 * row was found whose bytes do not match their checksum: the row is
 * removed and counted, and the caller treats it as a miss.
 */
int ks_store_get(ks_store_t *s, const ks_hash_t *key, ks_artifact_t **out);
/* Inserts or replaces the artifact: key, sum, meta and bytes in one
 * transaction. */
int ks_store_put(ks_store_t *s, const ks_artifact_t *a);
/* Records a hit; written to disk in batches (ks_store_flush), not per hit. */
void ks_store_touch(ks_store_t *s, const ks_hash_t *key);
int ks_store_flush(ks_store_t *s);
int ks_store_remove(ks_store_t *s, const ks_hash_t *key);
int ks_store_stats(ks_store_t *s, ks_store_stats_t *out);

#endif
