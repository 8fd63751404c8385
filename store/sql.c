/*
 * The SQL helpers of every file of the persistent store: sqlite's result
 * codes as ks errors, a statement run and reset, keys bound and read, the
 * writer's transactions, and the error text of what runs at open.
 */
#include <stdint.h>
#include <string.h>

#include "store_int.h"

/* The writer's transactions. */
static const kss_stmt_t stmts[] = {
	KSS_W(begin, "BEGIN IMMEDIATE"),
	KSS_W(commit, "COMMIT"),
	KSS_W(rollback, "ROLLBACK"),
};
KSS_STMTS(kss_sql_stmts, stmts);

/* The ks error for a failed sqlite call with result code RC. */
int kss_from_sqlite(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_NOMEM:
		return KS_E_NOMEM;
	case SQLITE_TOOBIG:
		return KS_E_TOO_LARGE;
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		return KS_E_CORRUPT;
	default:
		return KS_E_STORE;
	}
}

/* Logs a failed statement on DB and returns its ks error. */
int kss_failed(ks_store_t *s, sqlite3 *db, int rc, const char *what)
{
	ks_log(KS_LOG_ERROR, "store %s: %s: %s", s->path, what,
	    sqlite3_errmsg(db));
	return kss_from_sqlite(rc) == KS_E_CORRUPT ? KS_E_STORE :
	    kss_from_sqlite(rc);
}

/* Steps a statement that returns no rows, then resets it. */
int kss_run(ks_store_t *s, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	if (rc != SQLITE_DONE)
		return kss_failed(s, sqlite3_db_handle(st), rc, what);
	return KS_OK;
}

/* Ends a use of ST: resets it and sets its parameters back to NULL
 * (store_int.h, "Statements").  ST is NULL after a reopen that failed. */
void kss_release(sqlite3_stmt *st)
{
	sqlite3_reset(st);
	if (st)
		sqlite3_clear_bindings(st);
}

int kss_bind_key(sqlite3_stmt *st, int col, const ks_hash_t *key)
{
	return sqlite3_bind_blob(st, col, key->b, KS_HASH_BYTES,
	    SQLITE_STATIC);
}

void kss_column_key(sqlite3_stmt *st, int col, ks_hash_t *out)
{
	const void *p = sqlite3_column_blob(st, col);

	memset(out, 0, sizeof *out);
	if (p != NULL && sqlite3_column_bytes(st, col) == KS_HASH_BYTES)
		memcpy(out->b, p, KS_HASH_BYTES);
}

/* Text column COL of ST, "" for NULL. */
const char *kss_column_str(sqlite3_stmt *st, int col)
{
	const char *t = (const char *)sqlite3_column_text(st, col);

	return t ? t : "";
}

/* ---- the locks of the public calls ---- */

int kss_wlock(ks_store_t *s)
{
	pthread_mutex_lock(&s->wlock);
	if (s->w != NULL)
		return KS_OK;
	pthread_mutex_unlock(&s->wlock);
	return KS_E_IO;
}

int kss_rlock(ks_store_t *s)
{
	pthread_mutex_lock(&s->rlock);
	if (s->r != NULL)
		return KS_OK;
	pthread_mutex_unlock(&s->rlock);
	return KS_E_IO;
}

/* ---- the writer's transactions (wlock held) ---- */

int kss_begin(ks_store_t *s)
{
	return kss_run(s, s->w_begin, "begin");
}

int kss_commit(ks_store_t *s)
{
	return kss_run(s, s->w_commit, "commit");
}

/* Rolls back the open transaction, if any: a failed statement may already
 * have ended it. */
void kss_rollback(ks_store_t *s)
{
	if (s->w != NULL && !sqlite3_get_autocommit(s->w))
		kss_run(s, s->w_rollback, "rollback");
}

/* ---- at open: errors with text, for the caller to show ---- */

/*
 * The ks error of SQLite's RC at open: KS_E_CORRUPT when the failure is
 * the file's content (not a database and damage, as kss_from_sqlite
 * says; a schema that is not kspec's: a table or column missing or
 * already there), which the caller may set aside (store.h); else
 * kss_from_sqlite's (locked, busy, read-only, I/O, a full disk: never the
 * content's fault).
 */
static int open_error(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_ERROR:
	case SQLITE_SCHEMA:
	case SQLITE_CONSTRAINT:
	case SQLITE_MISMATCH:
		return KS_E_CORRUPT;
	default:
		return kss_from_sqlite(rc);
	}
}

/* Runs SQL (no rows expected back) on DB at open, with error text. */
int kss_exec_open(ks_store_t *s, sqlite3 *db, const char *sql,
    char *err, size_t errlen)
{
	char *msg = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);

	if (rc != SQLITE_OK) {
		ks_set_err(err, errlen, "store %s: %s", s->path,
		    msg ? msg : sqlite3_errstr(rc));
		sqlite3_free(msg);
		return open_error(rc);
	}
	return KS_OK;
}

/* Reads a one-row, one-column integer query at open. */
int kss_query_int(ks_store_t *s, sqlite3 *db, const char *sql,
    int64_t *out, char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);

	if (rc == SQLITE_OK) {
		rc = sqlite3_step(st);
		if (rc == SQLITE_ROW) {
			*out = sqlite3_column_int64(st, 0);
			rc = SQLITE_OK;
		}
	}
	if (rc != SQLITE_OK) {
		ks_set_err(err, errlen, "store %s: %s", s->path,
		    sqlite3_errmsg(db));
		sqlite3_finalize(st);
		return open_error(rc);
	}
	sqlite3_finalize(st);
	return KS_OK;
}

int kss_prepare(ks_store_t *s, sqlite3 *db, const char *sql,
    sqlite3_stmt **st, char *err, size_t errlen)
{
	int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT,
	    st, NULL);

	if (rc != SQLITE_OK) {
		ks_set_err(err, errlen, "store %s: preparing \"%s\": %s", s->path,
		    sql, sqlite3_errmsg(db));
		return open_error(rc);
	}
	return KS_OK;
}
