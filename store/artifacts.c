/*
 * The artifacts table: one row per artifact, metadata and bytes together,
 * so one transaction covers both, and its row in uses beside it: the put,
 * the add, the get and its checks, the quarantine, eviction, removal, and
 * the listings.
 *
 * States of a store entry (one row of the artifacts table):
 *
 *   absent   --put-->                    stored (one transaction: key, sum,
 *                                        row_sum, meta, bytes, size, times)
 *   stored   --put, same key-->          stored, replaced in one transaction
 *   absent   --add-->                    stored, as by a put
 *   stored   --add, same key-->          stored, unchanged (the add says so)
 *   stored   --get, checks pass-->       stored; a verified copy is served
 *   stored   --touch-->                  stored, a newer last_used pending in
 *                                        memory (not on disk)
 *   pending  --flush, close, full set,
 *              or a put that evicts-->   stored, last_used written
 *   stored   --get, a check fails-->     quarantined: the writer re-reads the
 *                                        row and, if it is still bad, deletes
 *                                        it and counts it --> absent (the
 *                                        caller recompiles and puts again)
 *   stored   --put over the budget-->    evicted, least recently used first,
 *                                        in the put's transaction --> absent
 *   stored   --remove-->                 absent
 *
 * A crash at any point leaves every row as it was before or after the
 * transaction that was running: WAL never exposes half a transaction.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

/* Keys selected per round of eviction. */
#define EVICT_BATCH 32

/* The statements of the artifacts and their uses rows. */
static const kss_stmt_t stmts[] = {
	KSS_W(size, "SELECT size FROM artifacts WHERE key = ?1"),
	KSS_W(put, INSERT_ROW("artifacts")),
	KSS_W(put_use, "INSERT OR REPLACE INTO uses (key, last_used)"
	    " VALUES (?1, ?2)"),
	KSS_W(delete, "DELETE FROM artifacts WHERE key = ?1"
	    " RETURNING size"),
	KSS_W(delete_use, "DELETE FROM uses WHERE key = ?1"),
	/* A deployment's pinned keys are never evicted. */
	KSS_W(lru, "SELECT key FROM uses WHERE key <> ?1 AND key NOT IN"
	    " (SELECT key FROM pins) ORDER BY last_used, key LIMIT ?2"),
	KSS_W(check, SELECT_ROW),
	KSS_W(count_corrupt, "UPDATE counters SET value = value + 1"
	    " WHERE name = 'corrupt'"),
	KSS_W(scan, "SELECT key, meta FROM artifacts ORDER BY key"),
	KSS_R(get, SELECT_ROW),
	KSS_R(list, "SELECT a.key, a.meta, a.size, "
	    "COALESCE(u.last_used, 0) FROM artifacts a LEFT JOIN uses u "
	    "ON u.key = a.key ORDER BY a.key"),
	KSS_R(entries, "SELECT a.key, a.size, a.created, "
	    ENTRY_COLS ", COALESCE(u.last_used, 0) FROM artifacts a "
	    "LEFT JOIN uses u ON u.key = a.key WHERE (?1 = '' OR "
	    "a.kernel = ?1) AND (?2 = '' OR a.backend = ?2) AND "
	    "(?3 = '' OR a.target = ?3) ORDER BY a.key"),
	KSS_R(key_range, "SELECT key FROM artifacts WHERE key "
	    "BETWEEN ?1 AND ?2 ORDER BY key LIMIT ?3"),
};
KSS_STMTS(kss_artifacts_stmts, stmts);

/* Deletes KEY's row; *size is its size, or -1 when there was none. */
int kss_delete_row(ks_store_t *s, const ks_hash_t *key, int64_t *size)
{
	int rc;

	*size = -1;
	kss_bind_key(s->w_delete, 1, key);
	while ((rc = sqlite3_step(s->w_delete)) == SQLITE_ROW)
		*size = sqlite3_column_int64(s->w_delete, 0);
	sqlite3_reset(s->w_delete);
	if (rc != SQLITE_DONE)
		return kss_failed(s, s->w, rc, "delete");
	kss_bind_key(s->w_delete_use, 1, key);
	return kss_run(s, s->w_delete_use, "delete use");
}

/*
 * Inside the put's transaction: deletes least recently used rows other
 * than KEEP until *bytes is within the budget, adjusting *bytes, *entries
 * and *evicted.  If KEEP alone exceeds the budget it stays, with a warning:
 * refusing it would only make the daemon recompile it on every request.
 */
static int evict_locked(ks_store_t *s, const ks_hash_t *keep,
    uint64_t *bytes, uint64_t *entries, uint64_t *evicted)
{
	ks_hash_t victims[EVICT_BATCH];
	int64_t size;
	int i, n, rc, st = SQLITE_DONE;

	while (*bytes > s->max_bytes) {
		/* Collect a batch first: deleting rows under a running SELECT
		 * of the same table is best avoided. */
		n = 0;
		kss_bind_key(s->w_lru, 1, keep);
		sqlite3_bind_int(s->w_lru, 2, EVICT_BATCH);
		while (n < EVICT_BATCH &&
		    (st = sqlite3_step(s->w_lru)) == SQLITE_ROW)
			kss_column_key(s->w_lru, 0, &victims[n++]);
		if (n < EVICT_BATCH && st != SQLITE_DONE) {
			sqlite3_reset(s->w_lru);
			return kss_failed(s, s->w, st,
			    "select eviction victims");
		}
		sqlite3_reset(s->w_lru);
		if (n == 0) {
			char hex[KS_HASH_HEX];

			ks_hash_hex(keep, hex);
			ks_log(KS_LOG_WARN, "store %s: artifact %s alone "
			    "(%" PRIu64 " bytes) exceeds the budget of %"
			    PRIu64 " bytes; keeping it", s->path, hex, *bytes,
			    s->max_bytes);
			return KS_OK;
		}
		for (i = 0; i < n && *bytes > s->max_bytes; i++) {
			rc = kss_delete_row(s, &victims[i], &size);
			if (rc != KS_OK)
				return rc;
			if (size < 0)
				continue;
			*bytes -= (uint64_t)size;
			(*entries)--;
			(*evicted)++;
		}
	}
	return KS_OK;
}

/*
 * Quarantine: called after the reader found KEY's row bad.  Re-reads the
 * row through the writer, inside a write transaction, and deletes it only
 * if it is still bad, so a good row that a put wrote in between is kept.
 * Each deleted row is counted once, in memory and in counters.
 */
int ks_store_quarantine(ks_store_t *s, const ks_hash_t *key)
{
	uint8_t xsum[XSUM_BYTES];
	ks_hash_t sum, row_sum;
	const char *why = NULL;
	int64_t size = -1;
	int rc, st, bad = 0;

	if (kss_wlock(s) != KS_OK)
		return KS_E_IO;
	rc = kss_begin(s);
	if (rc == KS_OK) {
		kss_bind_key(s->w_check, 1, key);
		st = sqlite3_step(s->w_check);
		if (st == SQLITE_ROW) {
			why = kss_check_shape(s->w_check, &sum, &row_sum, xsum);
			if (why == NULL) {
				struct row_data d;

				kss_row_data(s->w_check, &d);
				why = kss_check_xsum(key, &sum, xsum, d.meta,
				    d.meta_len, d.bytes, d.len);
				if (why == NULL)
					why = kss_check_content(key, &sum,
					    &row_sum, d.meta, d.meta_len,
					    d.bytes, d.len);
			}
			bad = why != NULL;
		} else if (st != SQLITE_DONE) {
			rc = kss_failed(s, s->w, st, "re-read corrupt row");
		}
		sqlite3_reset(s->w_check);
	}
	if (rc == KS_OK && bad)
		rc = kss_delete_row(s, key, &size);
	if (rc == KS_OK && bad && size >= 0)
		rc = kss_run(s, s->w_count_corrupt, "count corrupt row");
	if (rc == KS_OK)
		rc = kss_commit(s);
	if (rc != KS_OK) {
		kss_rollback(s);
	} else if (bad && size >= 0) {
		char hex[KS_HASH_HEX];

		atomic_fetch_sub(&s->bytes, (uint64_t)size);
		atomic_fetch_sub(&s->entries, 1);
		atomic_fetch_add(&s->corrupt, 1);
		atomic_fetch_add(&s->corrupt_total, 1);
		ks_hash_hex(key, hex);
		ks_log(KS_LOG_WARN, "store %s: corrupt artifact %s removed",
		    s->path, hex);
	}
	pthread_mutex_unlock(&s->wlock);
	return rc;
}

int ks_store_lookup(ks_store_t *s, const ks_hash_t *key, ks_artifact_t **out)
{
	uint8_t xsum[XSUM_BYTES];
	ks_artifact_t *a = NULL;
	ks_hash_t sum, row_sum;
	const char *why = NULL;
	char hex[KS_HASH_HEX];
	int rc;

	*out = NULL;
	if (kss_rlock(s) != KS_OK)
		return KS_E_IO;
	kss_bind_key(s->r_get, 1, key);
	rc = sqlite3_step(s->r_get);
	if (rc == SQLITE_ROW) {
		why = kss_check_shape(s->r_get, &sum, &row_sum, xsum);
		if (why == NULL) {
			struct row_data d;

			kss_row_data(s->r_get, &d);
			a = ks_artifact_new_with_sum(key, &sum, d.meta,
			    d.meta_len, d.bytes, d.len);
			rc = a ? KS_OK : KS_E_NOMEM;
		} else {
			rc = KS_E_CORRUPT;
		}
	} else if (rc == SQLITE_DONE) {
		rc = KS_E_NOT_FOUND;
	} else {
		rc = kss_failed(s, s->r, rc, "get");
	}
	/* Reset before unlocking: a reset statement ends the read
	 * transaction, which would otherwise pin the WAL and stop
	 * checkpoints. */
	sqlite3_reset(s->r_get);
	pthread_mutex_unlock(&s->rlock);

	/* Checked outside the lock, on our own copy. */
	if (a != NULL) {
		why = kss_check_xsum(key, &a->sum, xsum, a->meta, a->meta_len,
		    a->bytes, a->len);
		if (why == NULL) {
			*out = a;
			return KS_OK;
		}
		ks_artifact_unref(a);
		rc = KS_E_CORRUPT;
	}
	if (rc == KS_E_CORRUPT) {
		ks_hash_hex(key, hex);
		ks_log(KS_LOG_WARN, "store %s: artifact %s is corrupt (%s); "
		    "not served", s->path, hex, why);
	}
	return rc;
}

int ks_store_get(ks_store_t *s, const ks_hash_t *key, ks_artifact_t **out)
{
	int rc = ks_store_lookup(s, key, out);

	if (rc == KS_E_CORRUPT)
		ks_store_quarantine(s, key);
	return rc;
}

/* The put (KEEP 0) and the add (KEEP 1): the key's row is looked for in
 * the transaction that would write it, under wlock, so of two adds of one
 * key exactly one finds no row and writes it (*ADDED 1). */
static int put_row(ks_store_t *s, const ks_artifact_t *a, int keep,
    int *added)
{
	uint64_t bytes, entries, evicted = 0;
	uint8_t xsum[XSUM_BYTES];
	int64_t old = -1, now;
	struct entry_cols cols;
	ks_hash_t row_sum;
	int rc, st;

	if (s == NULL || a == NULL || (a->meta == NULL && a->meta_len))
		return KS_E_INVAL;
	if (a->len > (uint64_t)INT64_MAX)
		return KS_E_TOO_LARGE;
	/* Outside the lock: a put is not on the hit path, and parsing its
	 * meta here keeps every listing free of JSON. */
	if (kss_entry_cols_of(a->meta ? a->meta : "", a->meta_len, &cols)) {
		kss_entry_cols_free(&cols);
		return KS_E_NOMEM;
	}
	kss_row_sum_of(&a->key, &a->sum, a->meta ? a->meta : "", a->meta_len,
	    &row_sum);
	kss_xsum_of(&a->key, &a->sum, a->meta ? a->meta : "", a->meta_len,
	    a->bytes ? (const void *)a->bytes : (const void *)"", a->len,
	    xsum);
	now = ks_wall_ms();

	if (kss_wlock(s) != KS_OK)
		return KS_E_IO;
	bytes = atomic_load(&s->bytes);
	entries = atomic_load(&s->entries);
	/* Before a put that may evict, write the pending touches, so that
	 * eviction sees the latest uses. */
	if (s->max_bytes && bytes + a->len > s->max_bytes)
		kss_flush_locked(s);

	rc = kss_begin(s);
	if (rc == KS_OK) {
		kss_bind_key(s->w_size, 1, &a->key);
		st = sqlite3_step(s->w_size);
		if (st == SQLITE_ROW)
			old = sqlite3_column_int64(s->w_size, 0);
		sqlite3_reset(s->w_size);
		if (st != SQLITE_ROW && st != SQLITE_DONE)
			rc = kss_failed(s, s->w, st, "read old size");
	}
	if (rc == KS_OK && keep && old >= 0) {
		/* The row stays as it is: the transaction wrote nothing. */
		kss_rollback(s);
		pthread_mutex_unlock(&s->wlock);
		kss_entry_cols_free(&cols);
		return KS_OK;
	}
	if (rc == KS_OK) {
		sqlite3_stmt *p = s->w_put;

		kss_bind_key(p, 1, &a->key);
		sqlite3_bind_blob(p, 2, a->sum.b, KS_HASH_BYTES, SQLITE_STATIC);
		sqlite3_bind_blob(p, 3, row_sum.b, KS_HASH_BYTES,
		    SQLITE_STATIC);
		sqlite3_bind_int64(p, 4, (int64_t)a->len);
		sqlite3_bind_int64(p, 5, now);
		st = kss_bind_entry_cols(p, &cols);
		if (st == SQLITE_OK)
			st = sqlite3_bind_text64(p, COL_PUT_META, a->meta ?
			    a->meta : "", a->meta_len, SQLITE_STATIC,
			    SQLITE_UTF8);
		if (st == SQLITE_OK)
			st = sqlite3_bind_blob64(p, COL_PUT_META + 1, a->bytes ?
			    (const void *)a->bytes : (const void *)"", a->len,
			    SQLITE_STATIC);
		if (st == SQLITE_OK)
			st = sqlite3_bind_blob(p, COL_PUT_META + 2, xsum,
			    XSUM_BYTES, SQLITE_STATIC);
		if (st != SQLITE_OK) {
			sqlite3_reset(p);
			rc = kss_failed(s, s->w, st, "bind artifact");
		} else {
			rc = kss_run(s, p, "put");
		}
		/* Drop the borrowed pointers to the caller's buffers. */
		sqlite3_clear_bindings(p);
	}
	if (rc == KS_OK) {
		kss_bind_key(s->w_put_use, 1, &a->key);
		sqlite3_bind_int64(s->w_put_use, 2, kss_stamp(s));
		rc = kss_run(s, s->w_put_use, "put use");
	}
	if (rc == KS_OK) {
		if (old >= 0)
			bytes -= (uint64_t)old;
		else
			entries++;
		bytes += a->len;
		if (s->max_bytes && bytes > s->max_bytes)
			rc = evict_locked(s, &a->key, &bytes, &entries,
			    &evicted);
	}
	if (rc == KS_OK)
		rc = kss_commit(s);
	if (rc != KS_OK) {
		kss_rollback(s);
	} else {
		atomic_store(&s->bytes, bytes);
		atomic_store(&s->entries, entries);
		atomic_fetch_add(&s->evicted, evicted);
		if (added)
			*added = 1;
	}
	pthread_mutex_unlock(&s->wlock);
	kss_entry_cols_free(&cols);
	return rc;
}

int ks_store_put(ks_store_t *s, const ks_artifact_t *a)
{
	return put_row(s, a, 0, NULL);
}

int ks_store_add(ks_store_t *s, const ks_artifact_t *a, int *added)
{
	*added = 0;
	return put_row(s, a, 1, added);
}

int ks_store_remove(ks_store_t *s, const ks_hash_t *key)
{
	int64_t size;
	int rc;

	if (kss_wlock(s) != KS_OK)
		return KS_E_IO;
	/* The artifact and its uses row in one transaction. */
	rc = kss_begin(s);
	if (rc == KS_OK)
		rc = kss_delete_row(s, key, &size);
	if (rc == KS_OK)
		rc = kss_commit(s);
	if (rc != KS_OK)
		kss_rollback(s);
	if (rc == KS_OK && size < 0) {
		rc = KS_E_NOT_FOUND;
	} else if (rc == KS_OK) {
		atomic_fetch_sub(&s->bytes, (uint64_t)size);
		atomic_fetch_sub(&s->entries, 1);
	}
	pthread_mutex_unlock(&s->wlock);
	return rc;
}

int ks_store_remove_if(ks_store_t *s, const ks_hash_t *keys, size_t nkeys,
    int (*match)(void *ctx, const char *meta), void *ctx,
    ks_hash_t **removed, size_t *nremoved)
{
	ks_hash_t *found = NULL;
	size_t n = 0, cap = 0, i;
	uint64_t bytes = 0, entries = 0;
	int64_t size;
	int rc, st;

	*removed = NULL;
	*nremoved = 0;
	if (kss_wlock(s) != KS_OK)
		return KS_E_IO;
	rc = kss_begin(s);
	/* Collect first, then delete: no rows are deleted under a running
	 * SELECT of the same table. */
	if (rc == KS_OK && nkeys == 0) {
		while ((st = sqlite3_step(s->w_scan)) == SQLITE_ROW) {
			const char *meta = (const char *)sqlite3_column_text(
			    s->w_scan, 1);

			if (match && !match(ctx, meta ? meta : ""))
				continue;
			if (n == cap) {
				size_t c2 = cap ? 2 * cap : 64;
				ks_hash_t *k2 = realloc(found, c2 * sizeof *k2);

				if (!k2) {
					rc = KS_E_NOMEM;
					break;
				}
				found = k2;
				cap = c2;
			}
			kss_column_key(s->w_scan, 0, &found[n++]);
		}
		if (rc == KS_OK && st != SQLITE_DONE)
			rc = kss_failed(s, s->w, st, "scan");
		sqlite3_reset(s->w_scan);
	} else if (rc == KS_OK) {
		found = malloc(nkeys * sizeof *found);
		if (!found)
			rc = KS_E_NOMEM;
		else
			memcpy(found, keys, nkeys * sizeof *found);
		n = nkeys;
	}
	/* Keep only the keys whose row was there. */
	for (i = 0, cap = 0; rc == KS_OK && i < n; i++) {
		rc = kss_delete_row(s, &found[i], &size);
		if (rc == KS_OK && size >= 0) {
			found[cap++] = found[i];
			bytes += (uint64_t)size;
			entries++;
		}
	}
	if (rc == KS_OK)
		rc = kss_commit(s);
	if (rc != KS_OK) {
		kss_rollback(s);
		free(found);
	} else {
		atomic_fetch_sub(&s->bytes, bytes);
		atomic_fetch_sub(&s->entries, entries);
		*removed = found;
		*nremoved = cap;
	}
	pthread_mutex_unlock(&s->wlock);
	return rc;
}

int ks_store_stats(ks_store_t *s, ks_store_stats_t *out)
{
	out->entries = atomic_load(&s->entries);
	out->bytes = atomic_load(&s->bytes);
	out->max_bytes = s->max_bytes;
	out->corrupt = atomic_load(&s->corrupt);
	out->evicted = atomic_load(&s->evicted);
	out->schema_version = atomic_load(&s->schema_version);
	return KS_OK;
}

uint64_t ks_store_corrupt_total(ks_store_t *s)
{
	return atomic_load(&s->corrupt_total);
}

int ks_store_list(ks_store_t *s, int (*cb)(void *ctx, const ks_hash_t *key,
    const char *meta, uint64_t size, int64_t last_used), void *ctx)
{
	ks_hash_t key;
	int rc, stop = 0;

	if (kss_rlock(s) != KS_OK)
		return KS_E_IO;
	while ((rc = sqlite3_step(s->r_list)) == SQLITE_ROW) {
		const char *meta;

		kss_column_key(s->r_list, 0, &key);
		meta = (const char *)sqlite3_column_text(s->r_list, 1);
		stop = cb(ctx, &key, meta ? meta : "",
		    (uint64_t)sqlite3_column_int64(s->r_list, 2),
		    sqlite3_column_int64(s->r_list, 3));
		if (stop)
			break;
	}
	if (!stop && rc != SQLITE_DONE)
		stop = kss_failed(s, s->r, rc, "list");
	sqlite3_reset(s->r_list);
	pthread_mutex_unlock(&s->rlock);
	return stop;
}

int ks_store_entries(ks_store_t *s, const ks_store_filter_t *f,
    uint64_t offset, uint64_t limit,
    int (*cb)(void *ctx, const ks_store_entry_t *e), void *ctx,
    uint64_t *total)
{
	/* Columns of r_entries: key, size, created, the entry columns in
	 * table order, last_used. */
	enum { R_KEY, R_SIZE, R_CREATED, R_ENTRY, R_LAST_USED = R_ENTRY +
		EC_N };
	const char *const by[3] = { f ? f->kernel : NULL, f ? f->backend :
	    NULL, f ? f->target : NULL };
	ks_store_entry_t e;
	sqlite3_stmt *st;
	uint64_t n = 0;
	int rc, i, stop = 0;

	if (kss_rlock(s) != KS_OK)
		return KS_E_IO;
	/* Read under the lock: a reopen replaces the statements. */
	st = s->r_entries;
	for (i = 0; i < 3; i++)
		sqlite3_bind_text(st, i + 1, by[i] ? by[i] : "", -1,
		    SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		/* Rows before the page and after it are only counted. */
		if (n++ < offset || (limit && n > offset + limit))
			continue;
		kss_column_key(st, R_KEY, &e.key);
		e.size = (uint64_t)sqlite3_column_int64(st, R_SIZE);
		e.created = sqlite3_column_int64(st, R_CREATED);
		kss_column_entry(st, R_ENTRY, &e);
		e.last_used = sqlite3_column_int64(st, R_LAST_USED);
		stop = cb(ctx, &e);
		if (stop)
			break;
	}
	if (!stop && rc != SQLITE_DONE)
		stop = kss_failed(s, s->r, rc, "list entries");
	/* Reset before unlocking, as a get does; the filter strings were
	 * borrowed. */
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	pthread_mutex_unlock(&s->rlock);
	if (total)
		*total = n;
	return stop;
}

int ks_store_keys_with_prefix(ks_store_t *s, const char *prefix,
    ks_hash_t *keys, int max)
{
	char lo_hex[KS_HASH_HEX], hi_hex[KS_HASH_HEX];
	size_t n = strlen(prefix);
	sqlite3_stmt *st;
	ks_hash_t lo, hi;
	int rc, found = 0;

	/* The keys from PREFIX 000... to PREFIX fff..., both included. */
	if (n == 0 || n > 2 * KS_HASH_BYTES)
		return KS_E_INVAL;
	memset(lo_hex, '0', 2 * KS_HASH_BYTES);
	memset(hi_hex, 'f', 2 * KS_HASH_BYTES);
	memcpy(lo_hex, prefix, n);
	memcpy(hi_hex, prefix, n);
	lo_hex[2 * KS_HASH_BYTES] = hi_hex[2 * KS_HASH_BYTES] = '\0';
	if (ks_hash_from_hex(lo_hex, &lo) || ks_hash_from_hex(hi_hex, &hi))
		return KS_E_INVAL;
	if (kss_rlock(s) != KS_OK)
		return KS_E_IO;
	st = s->r_key_range;
	kss_bind_key(st, 1, &lo);
	kss_bind_key(st, 2, &hi);
	sqlite3_bind_int(st, 3, max);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && found < max)
		if (sqlite3_column_type(st, 0) == SQLITE_BLOB &&
		    sqlite3_column_bytes(st, 0) == KS_HASH_BYTES)
			kss_column_key(st, 0, &keys[found++]);
	rc = rc == SQLITE_DONE || rc == SQLITE_ROW ? found :
	    kss_failed(s, s->r, rc, "keys with a prefix");
	kss_release(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}
