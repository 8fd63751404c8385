/*
 * The key audit (schema 7): when each row was last recompiled and
 * compared, and the events of the mismatches, with the quarantined rows.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "store_int.h"

static const kss_stmt_t stmts[] = {
	KSS_R(audit_candidates, "SELECT a.key, a.size, a.created, a.kernel, "
	    "a.variant, a.backend, a.target, a.dtype, a.mode, a.format, "
	    "a.shape, a.compiler, coalesce(u.audited, 0), (SELECT "
	    "coalesce(max(e.at), 0) FROM audit_events e WHERE e.key = a.key "
	    "AND e.at >= ?2) FROM artifacts a LEFT JOIN audits u ON u.key = "
	    "a.key WHERE ?1 = '' OR a.kernel = ?1 ORDER BY "
	    "coalesce(u.audited, 0), a.key LIMIT ?3"),
	KSS_W(audited, "INSERT INTO audits (key, audited, result) VALUES "
	    "(?1, ?2, ?3) ON CONFLICT (key) DO UPDATE SET audited = ?2, "
	    "result = ?3"),
	/* A mismatch's row, if it is still the one audited (its sum),
	 * copied into its event. */
	KSS_W(audit_event, "INSERT INTO audit_events (at, key, kernel, "
	    "variant, backend, target, dtype, mode, format, shape, compiler, "
	    "auditor, stored_sum, audit_sum, differs, meta, bytes) SELECT ?1, "
	    "key, kernel, variant, backend, target, dtype, mode, format, "
	    "shape, compiler, ?3, sum, ?4, ?5, meta, bytes FROM artifacts "
	    "WHERE key = ?2 AND sum = ?6"),
	KSS_R(audit_events, "SELECT at, key, kernel, variant, backend, "
	    "target, dtype, mode, format, shape, compiler, auditor, "
	    "stored_sum, audit_sum, differs, length(bytes) FROM audit_events "
	    "ORDER BY at DESC, id DESC LIMIT ?1"),
};
KSS_STMTS(kss_audit_stmts, stmts);

int ks_store_audit_candidates(ks_store_t *s, const char *kernel,
    int64_t since, uint64_t limit,
    int (*cb)(void *ctx, const ks_store_audit_row_t *r), void *ctx)
{
	/* Columns: key, size, created, the entry columns, audited,
	 * alarmed. */
	enum { R_KEY, R_SIZE, R_CREATED, R_ENTRY, R_AUDITED = R_ENTRY + EC_N,
		R_ALARMED };
	sqlite3_stmt *st;
	ks_store_audit_row_t r;
	int rc = SQLITE_OK, stop = 0;

	if (kss_rlock(s) != KS_OK)
		return KS_E_IO;
	st = s->r_audit_candidates;
	sqlite3_bind_text(st, 1, kernel ? kernel : "", -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, since);
	sqlite3_bind_int64(st, 3, limit ? (int64_t)limit : -1);
	while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		rc = SQLITE_OK;
		if (sqlite3_column_bytes(st, R_KEY) != KS_HASH_BYTES)
			continue;
		memset(&r, 0, sizeof r);
		kss_column_key(st, R_KEY, &r.e.key);
		r.e.size = (uint64_t)sqlite3_column_int64(st, R_SIZE);
		r.e.created = sqlite3_column_int64(st, R_CREATED);
		kss_column_entry(st, R_ENTRY, &r.e);
		r.audited = sqlite3_column_int64(st, R_AUDITED);
		r.alarmed = sqlite3_column_int64(st, R_ALARMED);
		stop = cb(ctx, &r);
		if (stop)
			break;
	}
	rc = stop ? stop : rc == SQLITE_DONE || rc == SQLITE_OK ? KS_OK :
	    kss_failed(s, s->r, rc, "audit candidates");
	kss_release(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

/* Records that KEY was audited AT with RESULT (writer, under wlock). */
static int audit_mark(ks_store_t *s, const ks_hash_t *key,
    const char *result, int64_t at)
{
	sqlite3_stmt *st = s->w_audited;
	int rc;

	kss_bind_key(st, 1, key);
	sqlite3_bind_int64(st, 2, at);
	sqlite3_bind_text(st, 3, result, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	kss_release(st);
	return rc == SQLITE_DONE ? KS_OK : kss_failed(s, s->w, rc,
	    "audit mark");
}

int ks_store_audit_record(ks_store_t *s, const ks_store_audit_event_t *ev)
{
	sqlite3_stmt *st;
	int64_t size = -1;
	int rc, copied = 0;

	if (kss_wlock(s) != KS_OK)
		return KS_E_IO;
	rc = kss_begin(s);
	if (rc == KS_OK)
		rc = audit_mark(s, &ev->key, ev->differs ? "mismatch" :
		    ev->failed ? "failed" : "match", ev->at);
	/* A mismatch: the row, if it is still the one audited (its sum),
	 * moves into the event (w_audit_event), and out of the artifacts. */
	if (rc == KS_OK && ev->differs) {
		st = s->w_audit_event;
		sqlite3_bind_int64(st, 1, ev->at);
		kss_bind_key(st, 2, &ev->key);
		sqlite3_bind_text(st, 3, ev->auditor, -1, SQLITE_STATIC);
		kss_bind_key(st, 4, &ev->audit_sum);
		sqlite3_bind_text(st, 5, ev->differs, -1, SQLITE_STATIC);
		kss_bind_key(st, 6, &ev->stored_sum);
		if (sqlite3_step(st) != SQLITE_DONE)
			rc = kss_failed(s, s->w, sqlite3_errcode(s->w),
			    "audit event");
		copied = sqlite3_changes(s->w);
		kss_release(st);
		if (rc == KS_OK && copied)
			rc = kss_delete_row(s, &ev->key, &size);
	}
	if (rc == KS_OK)
		rc = kss_commit(s);
	if (rc != KS_OK)
		kss_rollback(s);
	if (rc == KS_OK && size >= 0) {
		atomic_fetch_sub(&s->bytes, (uint64_t)size);
		atomic_fetch_sub(&s->entries, 1);
	}
	pthread_mutex_unlock(&s->wlock);
	return rc == KS_OK && ev->differs && !copied ? KS_E_NOT_FOUND : rc;
}

int ks_store_audit_events(ks_store_t *s, uint64_t limit,
    int (*cb)(void *ctx, const ks_store_audit_event_t *ev), void *ctx)
{
	enum { R_AT, R_KEY, R_ENTRY, R_AUDITOR = R_ENTRY + EC_N, R_STORED,
		R_AUDIT, R_DIFFERS, R_SIZE };
	sqlite3_stmt *st;
	ks_store_audit_event_t ev;
	int rc = SQLITE_OK, stop = 0;

	if (kss_rlock(s) != KS_OK)
		return KS_E_IO;
	st = s->r_audit_events;
	sqlite3_bind_int64(st, 1, limit ? (int64_t)limit : -1);
	while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		rc = SQLITE_OK;
		if (sqlite3_column_bytes(st, R_KEY) != KS_HASH_BYTES ||
		    sqlite3_column_bytes(st, R_STORED) != KS_HASH_BYTES ||
		    sqlite3_column_bytes(st, R_AUDIT) != KS_HASH_BYTES)
			continue;
		memset(&ev, 0, sizeof ev);
		ev.at = sqlite3_column_int64(st, R_AT);
		kss_column_key(st, R_KEY, &ev.key);
		ev.e.key = ev.key;
		kss_column_entry(st, R_ENTRY, &ev.e);
		ev.e.size = (uint64_t)sqlite3_column_int64(st, R_SIZE);
		ev.auditor = kss_column_str(st, R_AUDITOR);
		kss_column_key(st, R_STORED, &ev.stored_sum);
		kss_column_key(st, R_AUDIT, &ev.audit_sum);
		ev.differs = kss_column_str(st, R_DIFFERS);
		stop = cb(ctx, &ev);
		if (stop)
			break;
	}
	rc = stop ? stop : rc == SQLITE_DONE || rc == SQLITE_OK ? KS_OK :
	    kss_failed(s, s->r, rc, "audit events");
	kss_release(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}
