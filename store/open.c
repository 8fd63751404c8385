/*
 * The connections: the writer and the reader opened on the store's file
 * (the schema migrated, the statements prepared, the totals loaded), the
 * store reopened on a new file, closed, and checked whole.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "store_int.h"

/* How long a connection waits for a lock held by another connection (the
 * other connection of this store, or an outside reader such as the sqlite3
 * shell) before a statement fails with SQLITE_BUSY. */
#define BUSY_TIMEOUT_MS 5000
/* WAL pages after which a commit of the writer checkpoints (sqlite's
 * default, stated so that it is a decision).  4 MB of WAL at 4 KB pages. */
#define WAL_AUTOCHECKPOINT 1000

/* Opens a connection to s->path; errors name the path. */
static int open_conn(ks_store_t *s, int flags, sqlite3 **db, char *err,
    size_t errlen)
{
	/* NOFOLLOW: a symbolic link at the store's path (or its -wal, -shm)
	 * is refused by sqlite too, not only by kss_check_trust. */
	int rc = sqlite3_open_v2(s->path, db, flags | SQLITE_OPEN_NOMUTEX |
	    SQLITE_OPEN_NOFOLLOW, NULL);

	if (rc != SQLITE_OK) {
		ks_set_err(err, errlen, "store %s: cannot open: %s", s->path,
		    *db ? sqlite3_errmsg(*db) : sqlite3_errstr(rc));
		sqlite3_close(*db);
		*db = NULL;
		return KS_E_STORE;
	}
	sqlite3_extended_result_codes(*db, 1);
	sqlite3_busy_timeout(*db, BUSY_TIMEOUT_MS);
	return KS_OK;
}

static int open_writer(ks_store_t *s, char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	const char *mode;
	char sql[64];
	int64_t v;
	int rc;

	rc = open_conn(s, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, &s->w,
	    err, errlen);
	if (rc != KS_OK)
		return rc;
	/* sqlite silently opens a file it may not write read-only. */
	if (sqlite3_db_readonly(s->w, "main") == 1) {
		ks_set_err(err, errlen, "store %s: file is read-only", s->path);
		return KS_E_STORE;
	}
	/* The first read of the file: "file is not a database" shows up
	 * here.  A newer store is refused before anything, the journal mode
	 * included, is changed in it. */
	rc = kss_query_int(s, s->w, "PRAGMA user_version", &v, err, errlen);
	if (rc != KS_OK)
		return rc;
	if (v > KS_STORE_SCHEMA_VERSION)
		return kss_too_new(s, v, err, errlen);
	rc = sqlite3_prepare_v2(s->w, "PRAGMA journal_mode=WAL", -1, &st,
	    NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		ks_set_err(err, errlen, "store %s: %s", s->path,
		    sqlite3_errmsg(s->w));
		sqlite3_finalize(st);
		return KS_E_STORE;
	}
	mode = (const char *)sqlite3_column_text(st, 0);
	if (mode == NULL || strcmp(mode, "wal") != 0) {
		ks_set_err(err, errlen, "store %s: cannot enable WAL mode "
		    "(journal_mode is %s)", s->path, mode ? mode : "?");
		sqlite3_finalize(st);
		return KS_E_STORE;
	}
	sqlite3_finalize(st);
	/* synchronous=NORMAL: in WAL mode a commit is not fsynced, only a
	 * checkpoint is.  A killed process loses nothing committed; a power
	 * loss may lose the last transactions but never corrupts the file.
	 * The store is a cache, so that trade for write speed is right. */
	snprintf(sql, sizeof sql, "PRAGMA wal_autocheckpoint=%d",
	    WAL_AUTOCHECKPOINT);
	rc = kss_exec_open(s, s->w, "PRAGMA synchronous=NORMAL;"
	    "PRAGMA foreign_keys=OFF;", err, errlen);
	if (rc == KS_OK)
		rc = kss_exec_open(s, s->w, sql, err, errlen);
	return rc;
}

/* Every file's statement table (store_int.h, "Statements"): the file of
 * a new table adds its own here. */
static const kss_stmts_t *const tables[] = {
	&kss_sql_stmts, &kss_artifacts_stmts, &kss_touch_stmts,
	&kss_misses_stmts, &kss_deploy_stmts, &kss_audit_stmts,
	&kss_canary_stmts, &kss_probe_stmts,
};

static sqlite3_stmt **stmt_field(ks_store_t *s, const kss_stmt_t *st)
{
	return (sqlite3_stmt **)((char *)s + st->off);
}

/* Prepares the statements of every table that belong to CONN, on it. */
static int prepare_all(ks_store_t *s, enum kss_conn conn, char *err,
    size_t errlen)
{
	sqlite3 *db = conn == KSS_WRITER ? s->w : s->r;
	size_t i, j;
	int rc;

	for (i = 0; i < sizeof tables / sizeof tables[0]; i++) {
		for (j = 0; j < tables[i]->n; j++) {
			const kss_stmt_t *st = &tables[i]->stmt[j];

			if (st->conn != conn)
				continue;
			rc = kss_prepare(s, db, st->sql, stmt_field(s, st), err,
			    errlen);
			if (rc != KS_OK)
				return rc;
		}
	}
	return KS_OK;
}

/* Loads the totals the writer keeps in memory, after mending the uses
 * table.  COUNT and SUM read the first page of every row (size comes
 * before the blobs), once per open. */
static int load_totals(ks_store_t *s, char *err, size_t errlen)
{
	int64_t n, bytes, last, corrupt;
	int rc;

	/* Every artifact has its uses row and no other is there; only an
	 * outside writer could break that, and an artifact without one would
	 * never be evicted.  Two scans of the keys, once per open. */
	rc = kss_exec_open(s, s->w, "BEGIN IMMEDIATE;"
	    "INSERT INTO uses (key, last_used) SELECT key, 0 FROM artifacts"
	    "  WHERE key NOT IN (SELECT key FROM uses);"
	    "DELETE FROM uses WHERE key NOT IN (SELECT key FROM artifacts);"
	    "COMMIT;", err, errlen);
	if (rc != KS_OK) {
		if (!sqlite3_get_autocommit(s->w))
			sqlite3_exec(s->w, "ROLLBACK", NULL, NULL, NULL);
		return rc;
	}
	rc = kss_query_int(s, s->w, "SELECT COUNT(*) FROM artifacts", &n, err,
	    errlen);
	if (rc == KS_OK)
		rc = kss_query_int(s, s->w, "SELECT COALESCE(SUM(size), 0) "
		    "FROM artifacts", &bytes, err, errlen);
	if (rc == KS_OK)
		rc = kss_query_int(s, s->w, "SELECT COALESCE(MAX(last_used), "
		    "0) FROM uses", &last, err, errlen);
	if (rc == KS_OK)
		rc = kss_query_int(s, s->w, "SELECT COALESCE((SELECT value "
		    "FROM counters WHERE name = 'corrupt'), 0)", &corrupt, err,
		    errlen);
	if (rc != KS_OK)
		return rc;
	atomic_store(&s->entries, (uint64_t)n);
	atomic_store(&s->bytes, (uint64_t)bytes);
	atomic_store(&s->clock, last);
	atomic_store(&s->corrupt_total, (uint64_t)corrupt);
	return KS_OK;
}

/*
 * The reader: query_only, so a bug cannot make it a second writer;
 * wal_autocheckpoint=0 and no checkpoint on close, so it never
 * checkpoints.  Opened after the writer has migrated the schema.
 *
 * Its page cache is small (READER_CACHE_KB): an artifact's bytes pass
 * through it on their way to the memory tier, which keeps them, so a
 * large cache only holds copies; with a small one the same few pages are
 * reused.  (A 2 MB cache made every page of the first 2 MB read from disk
 * a page the process had never touched: 380 more page faults for the 1.4
 * MB of bench/startup's 64 kernels.)  The pages of the key index stay in
 * it, being the most recently used.
 */
#define READER_CACHE_KB "256"
static int open_reader(ks_store_t *s, char *err, size_t errlen)
{
	int rc;

	rc = open_conn(s, SQLITE_OPEN_READWRITE, &s->r, err, errlen);
	if (rc != KS_OK)
		return rc;
	sqlite3_db_config(s->r, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, NULL);
	rc = kss_exec_open(s, s->r, "PRAGMA wal_autocheckpoint=0;"
	    "PRAGMA query_only=1;"
	    "PRAGMA cache_size=-" READER_CACHE_KB ";", err, errlen);
	if (rc == KS_OK)
		rc = prepare_all(s, KSS_READER, err, errlen);
	return rc;
}

/* Finalizes the statements of every table, of both connections. */
static void finalize_all(ks_store_t *s)
{
	size_t i, j;

	for (i = 0; i < sizeof tables / sizeof tables[0]; i++) {
		for (j = 0; j < tables[i]->n; j++) {
			sqlite3_stmt **st = stmt_field(s, &tables[i]->stmt[j]);

			sqlite3_finalize(*st);
			*st = NULL;
		}
	}
}

/*
 * Closes both connections: the reader first, so the writer is the last
 * connection and the one that checkpoints and removes the WAL.
 */
static void destroy(ks_store_t *s)
{
	finalize_all(s);
	if (s->r != NULL && sqlite3_close(s->r) != SQLITE_OK)
		ks_log(KS_LOG_ERROR, "store %s: closing reader: %s", s->path,
		    sqlite3_errmsg(s->r));
	if (s->w != NULL) {
		if (!sqlite3_db_readonly(s->w, "main"))
			sqlite3_wal_checkpoint_v2(s->w, NULL,
			    SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
		if (sqlite3_close(s->w) != SQLITE_OK)
			ks_log(KS_LOG_ERROR, "store %s: closing writer: %s",
			    s->path, sqlite3_errmsg(s->w));
	}
	if (s->locks) {
		pthread_mutex_destroy(&s->wlock);
		pthread_mutex_destroy(&s->rlock);
		pthread_mutex_destroy(&s->tlock);
	}
	free(s->path);
	free(s);
}

/* Opens both connections of S at s->path and brings the schema and the
 * totals up to date. */
static int open_all(ks_store_t *s, char *err, size_t errlen)
{
	struct stat st;
	int rc;

	rc = open_writer(s, err, errlen);
	if (rc == KS_OK)
		rc = kss_migrate(s, err, errlen);
	if (rc == KS_OK)
		rc = prepare_all(s, KSS_WRITER, err, errlen);
	if (rc == KS_OK)
		rc = load_totals(s, err, errlen);
	if (rc == KS_OK)
		rc = open_reader(s, err, errlen);
	if (rc == KS_OK && stat(s->path, &st) == 0) {
		s->dev = st.st_dev;
		s->ino = st.st_ino;
	}
	return rc;
}

int ks_store_open(const char *path, uint64_t max_bytes, ks_store_t **out,
    char *err, size_t errlen)
{
	ks_store_t *s;
	int rc;

	*out = NULL;
	ks_set_err(err, errlen, "%s", "");
	if (path == NULL || *path == '\0') {
		ks_set_err(err, errlen, "store: empty path");
		return KS_E_INVAL;
	}
	s = calloc(1, sizeof *s);
	if (s == NULL || (s->path = strdup(path)) == NULL) {
		free(s);
		ks_set_err(err, errlen, "store %s: out of memory", path);
		return KS_E_NOMEM;
	}
	s->max_bytes = max_bytes;
	pthread_mutex_init(&s->wlock, NULL);
	pthread_mutex_init(&s->rlock, NULL);
	pthread_mutex_init(&s->tlock, NULL);
	s->locks = 1;

	rc = kss_make_parents(path, err, errlen);
	if (rc == KS_OK)
		rc = kss_check_trust(path, err, errlen);
	if (rc == KS_OK)
		rc = open_all(s, err, errlen);
	if (rc != KS_OK) {
		destroy(s);
		return rc;
	}
	*out = s;
	return KS_OK;
}

int ks_store_reopen(ks_store_t *s, char *err, size_t errlen)
{
	int rc;

	pthread_mutex_lock(&s->wlock);
	pthread_mutex_lock(&s->rlock);
	finalize_all(s);
	sqlite3_close(s->r);
	sqlite3_close(s->w);
	s->r = s->w = NULL;
	rc = kss_check_trust(s->path, err, errlen);
	if (rc == KS_OK)
		rc = open_all(s, err, errlen);
	pthread_mutex_unlock(&s->rlock);
	pthread_mutex_unlock(&s->wlock);
	return rc;
}

void ks_store_close(ks_store_t *s)
{
	if (s == NULL)
		return;
	pthread_mutex_lock(&s->wlock);
	kss_flush_locked(s);
	pthread_mutex_unlock(&s->wlock);
	destroy(s);
}

int ks_store_integrity_check(ks_store_t *s, char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	size_t used = 0;
	int rc, ok = 0, rows = 0;

	ks_set_err(err, errlen, "%s", "");
	if (kss_rlock(s) != KS_OK) {
		ks_set_err(err, errlen, "store %s: not open (a reopen failed)",
		    s->path);
		return KS_E_IO;
	}
	rc = sqlite3_prepare_v2(s->r, "PRAGMA integrity_check(20)", -1, &st,
	    NULL);
	while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *line = (const char *)sqlite3_column_text(st, 0);

		rc = SQLITE_OK;
		if (line == NULL)
			continue;
		if (rows++ == 0 && strcmp(line, "ok") == 0)
			ok = 1;
		if (err != NULL && used + 1 < errlen) {
			int n = snprintf(err + used, errlen - used, "%s%s",
			    used ? "; " : "", line);

			used += n > 0 ? (size_t)n : 0;
		}
	}
	if (rc != SQLITE_DONE) {
		ks_set_err(err, errlen, "store %s: integrity check failed: %s",
		    s->path, sqlite3_errmsg(s->r));
		rc = kss_from_sqlite(rc);
	} else {
		rc = ok && rows == 1 ? KS_OK : KS_E_CORRUPT;
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}
