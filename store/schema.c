/*
 * The schema: its migrations from every older version to
 * KS_STORE_SCHEMA_VERSION, run by the writer at open, all in one
 * transaction.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "store_int.h"

/*
 * Schema migrations: entry i takes user_version i to i + 1, applied in one
 * transaction together with the new user_version (and migration_fill[i],
 * when a step needs C).  Adding a version is one more entry in each and a
 * new KS_STORE_SCHEMA_VERSION; never edit a step that has shipped.
 *
 * artifacts columns, small ones first: sqlite stores a row's columns in
 * order and reaches a column behind a large blob only by walking the blob's
 * overflow pages, so size (read by eviction, listing and the totals) comes
 * before meta and bytes.
 *   key       request key, 32 bytes
 *   sum       BLAKE2b-256 of bytes
 *   row_sum   BLAKE2b-256 of key, sum and meta (kss_row_sum_of, row.c):
 *             catches a damaged meta, whose launch geometry would otherwise
 *             be served
 *   size      length of bytes, checked against the blob on every read
 *   created   Unix milliseconds of the put
 *   meta, bytes
 *   xsum      (v3) XXH3-128 of key, sum, meta and bytes (kss_xsum_of,
 *             row.c): the check of every read, for bit rot; sum and row_sum
 *             are checked again when a row is quarantined or migrated
 * (v1 and v2 had last_used after created.)  From v4, between created and
 * meta, what the entry is: kernel, variant, backend, target, dtype, mode,
 * format, shape, compiler (kss_entry_cols_of, entry.c: read from meta by
 * every put, and by the migration for older rows), so that listing and
 * evict --stale read columns and no JSON.  They are derived from meta,
 * which row_sum and xsum cover; a damaged one misleads a listing, never a
 * get.
 *
 * uses (v3): key, last_used: the stamp of the latest put or flushed touch
 * (kss_stamp(), touch.c: Unix milliseconds made strictly increasing per
 * store), one small row per artifact, so that a touch rewrites a few dozen
 * bytes and not the artifact's row with its blob (sqlite rewrites a whole
 * record to change one column of it).  Every transaction that writes or
 * deletes an artifact row does the same to its uses row.
 */
static const char *const migrations[] = {
	/* v0 -> v1 */
	"CREATE TABLE artifacts ("
	"  key BLOB PRIMARY KEY NOT NULL,"
	"  sum BLOB NOT NULL,"
	"  row_sum BLOB NOT NULL,"
	"  size INTEGER NOT NULL,"
	"  created INTEGER NOT NULL,"
	"  last_used INTEGER NOT NULL,"
	"  meta TEXT NOT NULL,"
	"  bytes BLOB NOT NULL);"
	"CREATE INDEX artifacts_by_last_used ON artifacts(last_used);"
	"CREATE TABLE counters ("
	"  name TEXT PRIMARY KEY NOT NULL,"
	"  value INTEGER NOT NULL) WITHOUT ROWID;"
	"INSERT INTO counters(name, value) VALUES ('corrupt', 0);",
	/* v1 -> v2: every distinct miss, for `kspec manifest --from-misses`.
	 *   spec   the get-spec as requested (canonical JSON, target as the
	 *          client wrote it), so a replay on another machine resolves
	 *          "auto" there
	 *   first, last  Unix milliseconds; count  requests that missed */
	"CREATE TABLE misses ("
	"  spec TEXT PRIMARY KEY NOT NULL,"
	"  first INTEGER NOT NULL,"
	"  last INTEGER NOT NULL,"
	"  count INTEGER NOT NULL) WITHOUT ROWID;",
	/* v2 -> v3: last_used moves to a table of its own, and the read
	 * check comes: xsum, at the end of the row (a read fetches bytes
	 * anyway, so nothing is walked for it), which fill_xsum computes for
	 * the rows already there.  DROP COLUMN rewrites the table once. */
	"CREATE TABLE uses ("
	"  key BLOB PRIMARY KEY NOT NULL,"
	"  last_used INTEGER NOT NULL) WITHOUT ROWID;"
	"INSERT INTO uses (key, last_used) SELECT key, last_used"
	"  FROM artifacts;"
	"CREATE INDEX uses_by_last_used ON uses(last_used);"
	"DROP INDEX artifacts_by_last_used;"
	"ALTER TABLE artifacts DROP COLUMN last_used;"
	"ALTER TABLE artifacts ADD COLUMN xsum BLOB;",
	/* v3 -> v4: the columns of what an entry is.  ADD COLUMN would put
	 * them behind the blob, where a listing would walk every row's
	 * overflow pages, so the table is made anew with them before meta;
	 * fill_entry_cols copies the rows into it, reading the columns from
	 * each row's meta, and gives it the old name. */
	"CREATE TABLE artifacts_v4 ("
	"  key BLOB PRIMARY KEY NOT NULL,"
	"  sum BLOB NOT NULL,"
	"  row_sum BLOB NOT NULL,"
	"  size INTEGER NOT NULL,"
	"  created INTEGER NOT NULL,"
	"  kernel TEXT NOT NULL,"
	"  variant TEXT NOT NULL,"
	"  backend TEXT NOT NULL,"
	"  target TEXT NOT NULL,"
	"  dtype TEXT NOT NULL,"
	"  mode TEXT NOT NULL,"
	"  format TEXT NOT NULL,"
	"  shape TEXT NOT NULL,"
	"  compiler TEXT NOT NULL,"
	"  meta TEXT NOT NULL,"
	"  bytes BLOB NOT NULL,"
	"  xsum BLOB);",
	/* v4 -> v5: deployments, named lists of get-specs (JSON), and the
	 * keys they pin against eviction (recomputed by the daemon when its
	 * compilers change). */
	"CREATE TABLE deployments ("
	"  name TEXT PRIMARY KEY NOT NULL,"
	"  specs TEXT NOT NULL,"
	"  created INTEGER NOT NULL) WITHOUT ROWID;"
	"CREATE TABLE pins ("
	"  key BLOB NOT NULL,"
	"  name TEXT NOT NULL,"
	"  PRIMARY KEY (key, name)) WITHOUT ROWID;",
	/* v5 -> v6: late compiles, the misses of a deployment's clients
	 * after it was ready (as misses, by deployment); they go with the
	 * deployment. */
	"CREATE TABLE late ("
	"  deployment TEXT NOT NULL,"
	"  spec TEXT NOT NULL,"
	"  first INTEGER NOT NULL,"
	"  last INTEGER NOT NULL,"
	"  count INTEGER NOT NULL,"
	"  PRIMARY KEY (deployment, spec)) WITHOUT ROWID;",
	/* v6 -> v7: the key audit (docs/operations.md).  audits: when each
	 * key was last recompiled and compared, so the sampler takes the
	 * least recently audited first; audit_events: every mismatch, with
	 * the quarantined entry's columns, meta and bytes as they were (so
	 * nothing is lost) beside the sums of both compiles. */
	"CREATE TABLE audits ("
	"  key BLOB PRIMARY KEY NOT NULL,"
	"  audited INTEGER NOT NULL,"
	"  result TEXT NOT NULL) WITHOUT ROWID;"
	"CREATE TABLE audit_events ("
	"  id INTEGER PRIMARY KEY,"
	"  at INTEGER NOT NULL,"
	"  key BLOB NOT NULL,"
	"  kernel TEXT NOT NULL,"
	"  variant TEXT NOT NULL,"
	"  backend TEXT NOT NULL,"
	"  target TEXT NOT NULL,"
	"  dtype TEXT NOT NULL,"
	"  mode TEXT NOT NULL,"
	"  format TEXT NOT NULL,"
	"  shape TEXT NOT NULL,"
	"  compiler TEXT NOT NULL,"
	"  auditor TEXT NOT NULL,"
	"  stored_sum BLOB NOT NULL,"
	"  audit_sum BLOB NOT NULL,"
	"  differs TEXT NOT NULL,"
	"  meta TEXT NOT NULL,"
	"  bytes BLOB NOT NULL);"
	"CREATE INDEX audit_events_by_key ON audit_events(key, at);",
	/* v7 -> v8: the verdicts of the known-answer canaries, one per
	 * (backend, compiler identity, kernel), so that a start after an
	 * upgrade knows which kernels passed and which stay disabled
	 * (docs/operations.md, "Canaries").
	 *   result  "passed" or "failed"; at  Unix milliseconds;
	 *   ms      the canary's time; detail  its summary or failure */
	"CREATE TABLE canaries ("
	"  backend TEXT NOT NULL,"
	"  identity TEXT NOT NULL,"
	"  kernel TEXT NOT NULL,"
	"  result TEXT NOT NULL,"
	"  at INTEGER NOT NULL,"
	"  ms REAL NOT NULL,"
	"  detail TEXT NOT NULL,"
	"  PRIMARY KEY (backend, identity, kernel)) WITHOUT ROWID;",
	/* v8 -> v9: the probe of the compilers the daemon last saw, with its
	 * witness, so that a restart answers hits before its workers have
	 * probed again (docs/architecture.md, "Start").  One row.
	 *   probe         the probe's JSON (exec.h)
	 *   witness       {"paths":[...],"digest":"<hex>"}
	 *   fingerprints  the kernels' fingerprints, a JSON array of hex in
	 *                 library order; at  Unix ms */
	"CREATE TABLE probe ("
	"  id INTEGER PRIMARY KEY CHECK (id = 1),"
	"  probe TEXT NOT NULL,"
	"  witness TEXT NOT NULL,"
	"  fingerprints TEXT NOT NULL,"
	"  at INTEGER NOT NULL);",
};

static int fill_xsum(ks_store_t *s, char *err, size_t errlen);
static int fill_entry_cols(ks_store_t *s, char *err, size_t errlen);

/* What a step does after its SQL, in the same transaction (NULL: none). */
static int (*const migration_fill[])(ks_store_t *, char *, size_t) = {
	NULL, NULL, fill_xsum, fill_entry_cols, NULL, NULL, NULL, NULL, NULL,
};

_Static_assert(sizeof migrations / sizeof migrations[0] ==
    KS_STORE_SCHEMA_VERSION, "one migration step per schema version");
_Static_assert(sizeof migration_fill / sizeof migration_fill[0] ==
    KS_STORE_SCHEMA_VERSION, "one fill entry per schema version");

/* A store of a newer kspec: its content is not this build's to read
 * (KS_E_CORRUPT: the daemon sets it aside, unchanged, and starts anew). */
int kss_too_new(ks_store_t *s, int64_t v, char *err, size_t errlen)
{
	ks_set_err(err, errlen, "store %s: schema version %" PRId64 " is newer "
	    "than this build supports (%d); refusing to open it", s->path, v,
	    KS_STORE_SCHEMA_VERSION);
	return KS_E_CORRUPT;
}

/*
 * Migration v2 -> v3, in the step's transaction: every row gets its xsum,
 * after the checks that guarded it until now (BLAKE2b of the bytes and
 * row_sum), so a row that rotted before the migration is not blessed by
 * it but deleted and counted corrupt.  Rows are visited in key order, one
 * lookup each, and the select is reset before its row is changed.
 */
static int fill_xsum(ks_store_t *s, char *err, size_t errlen)
{
	sqlite3_stmt *sel = NULL, *upd = NULL, *del = NULL, *del_use = NULL;
	sqlite3_stmt *cnt = NULL;
	uint64_t filled = 0, removed = 0;
	uint8_t last[KS_HASH_BYTES], xsum[XSUM_BYTES];
	size_t last_len = 0;            /* X'': below every key */
	int rc, st;

	rc = kss_prepare(s, s->w, "SELECT sum, row_sum, size, meta, bytes, key "
	    "FROM artifacts WHERE key > ?1 ORDER BY key LIMIT 1",
	    &sel, err, errlen);
	if (rc == KS_OK)
		rc = kss_prepare(s, s->w, "UPDATE artifacts SET xsum = ?2 "
		    "WHERE key = ?1", &upd, err, errlen);
	if (rc == KS_OK)
		rc = kss_prepare(s, s->w, "DELETE FROM artifacts WHERE key = "
		    "?1", &del, err, errlen);
	if (rc == KS_OK)
		rc = kss_prepare(s, s->w, "DELETE FROM uses WHERE key = ?1",
		    &del_use, err, errlen);
	if (rc == KS_OK)
		rc = kss_prepare(s, s->w, "UPDATE counters SET value = value + "
		    "1 WHERE name = 'corrupt'", &cnt, err, errlen);
	/* A key that is not 32 bytes was never written by a daemon, and no
	 * get can reach it: such rows go first, as corrupt. */
	if (rc == KS_OK)
		rc = kss_exec_open(s, s->w, "UPDATE counters SET value = value "
		    "+ (SELECT COUNT(*) FROM artifacts WHERE typeof(key) <> "
		    "'blob' OR length(key) <> 32) WHERE name = 'corrupt';"
		    "DELETE FROM artifacts WHERE typeof(key) <> 'blob' OR "
		    "length(key) <> 32;"
		    "DELETE FROM uses WHERE typeof(key) <> 'blob' OR "
		    "length(key) <> 32;", err, errlen);
	while (rc == KS_OK) {
		ks_hash_t key, sum, row_sum;
		const char *why;

		sqlite3_bind_blob(sel, 1, last, (int)last_len, SQLITE_STATIC);
		st = sqlite3_step(sel);
		if (st == SQLITE_DONE) {
			sqlite3_reset(sel);
			break;
		}
		if (st != SQLITE_ROW) {
			rc = kss_failed(s, s->w, st, "read a row to migrate");
			sqlite3_reset(sel);
			break;
		}
		kss_column_key(sel, 5, &key);
		memcpy(last, key.b, KS_HASH_BYTES);
		last_len = KS_HASH_BYTES;
		why = kss_check_shape(sel, &sum, &row_sum, NULL);
		if (why == NULL) {
			struct row_data d;

			kss_row_data(sel, &d);
			why = kss_check_content(&key, &sum, &row_sum, d.meta,
			    d.meta_len, d.bytes, d.len);
			if (why == NULL)
				kss_xsum_of(&key, &sum, d.meta, d.meta_len,
				    d.bytes, d.len, xsum);
		}
		sqlite3_reset(sel);
		if (why == NULL) {
			kss_bind_key(upd, 1, &key);
			sqlite3_bind_blob(upd, 2, xsum, XSUM_BYTES,
			    SQLITE_STATIC);
			rc = kss_run(s, upd, "store a row's xsum");
			filled++;
		} else {
			char hex[KS_HASH_HEX];

			ks_hash_hex(&key, hex);
			ks_log(KS_LOG_WARN, "store %s: corrupt artifact %s "
			    "removed while migrating (%s)", s->path, hex, why);
			kss_bind_key(del, 1, &key);
			rc = kss_run(s, del, "remove a corrupt row");
			if (rc == KS_OK) {
				kss_bind_key(del_use, 1, &key);
				rc = kss_run(s, del_use,
				    "remove a corrupt row");
			}
			if (rc == KS_OK)
				rc = kss_run(s, cnt, "count a corrupt row");
			removed++;
		}
	}
	sqlite3_finalize(sel);
	sqlite3_finalize(upd);
	sqlite3_finalize(del);
	sqlite3_finalize(del_use);
	sqlite3_finalize(cnt);
	if (rc != KS_OK) {
		/* kss_failed() reports damage as KS_E_STORE, right for a
		 * get; at open it is the file's content (kss_exec_open). */
		if (kss_from_sqlite(sqlite3_errcode(s->w)) == KS_E_CORRUPT)
			rc = KS_E_CORRUPT;
		ks_set_err(err, errlen, "store %s: migrating to version 3 "
		    "failed: %s", s->path, sqlite3_errmsg(s->w));
	}
	if (rc == KS_OK && (filled || removed))
		ks_log(KS_LOG_INFO, "store %s: %" PRIu64 " rows checked and "
		    "given a read checksum, %" PRIu64 " corrupt rows removed",
		    s->path, filled, removed);
	return rc;
}

/*
 * Migration v3 -> v4, in the step's transaction: every row is copied into
 * artifacts_v4 as it is, checksums included (they still guard its reads),
 * with the entry columns read from its meta as a put reads them, in key
 * order; then the new table takes the old one's name.  One pass: the
 * columns are written with the row, not by an UPDATE that would rewrite
 * it again.
 */
static int fill_entry_cols(ks_store_t *s, char *err, size_t errlen)
{
	/* Columns of sel, in the order of INSERT_ROW's without the entry
	 * columns. */
	enum { S_KEY, S_SUM, S_ROW_SUM, S_SIZE, S_CREATED, S_META, S_BYTES,
		S_XSUM };
	sqlite3_stmt *sel = NULL, *ins = NULL;
	uint64_t copied = 0;
	int rc, st = SQLITE_DONE, i;

	rc = kss_prepare(s, s->w, "SELECT key, sum, row_sum, size, created, "
	    "meta, bytes, xsum FROM artifacts ORDER BY key", &sel, err, errlen);
	if (rc == KS_OK)
		rc = kss_prepare(s, s->w, INSERT_ROW("artifacts_v4"), &ins, err,
		    errlen);
	while (rc == KS_OK && (st = sqlite3_step(sel)) == SQLITE_ROW) {
		const char *meta = (const char *)sqlite3_column_text(sel,
		    S_META);
		struct entry_cols c;

		rc = kss_entry_cols_of(meta ? meta : "", (size_t)
		    sqlite3_column_bytes(sel, S_META), &c);
		for (i = S_KEY; rc == KS_OK && i <= S_CREATED; i++)
			rc = sqlite3_bind_value(ins, i + 1,
			    sqlite3_column_value(sel, i)) == SQLITE_OK ?
			    KS_OK : KS_E_NOMEM;
		for (i = S_META; rc == KS_OK && i <= S_XSUM; i++)
			rc = sqlite3_bind_value(ins, COL_PUT_META + i - S_META,
			    sqlite3_column_value(sel, i)) == SQLITE_OK ?
			    KS_OK : KS_E_NOMEM;
		if (rc == KS_OK && kss_bind_entry_cols(ins, &c) != SQLITE_OK)
			rc = KS_E_NOMEM;
		if (rc == KS_OK)
			rc = kss_run(s, ins,
			    "copy a row with its entry columns");
		sqlite3_clear_bindings(ins);
		kss_entry_cols_free(&c);
		copied++;
	}
	if (rc == KS_OK && st != SQLITE_DONE)
		rc = kss_failed(s, s->w, st, "read a row to migrate");
	sqlite3_finalize(sel);
	sqlite3_finalize(ins);
	if (rc == KS_OK)
		rc = kss_exec_open(s, s->w, "DROP TABLE artifacts;"
		    "ALTER TABLE artifacts_v4 RENAME TO artifacts;", err,
		    errlen);
	else {
		/* As fill_xsum: damage is the file's content. */
		if (kss_from_sqlite(sqlite3_errcode(s->w)) == KS_E_CORRUPT)
			rc = KS_E_CORRUPT;
		ks_set_err(err, errlen, "store %s: migrating to version 4 "
		    "failed: %s", s->path, rc == KS_E_NOMEM ?
		    "out of memory" : sqlite3_errmsg(s->w));
	}
	if (rc == KS_OK && copied)
		ks_log(KS_LOG_INFO, "store %s: %" PRIu64 " rows given the "
		    "columns of what they are", s->path, copied);
	return rc;
}

/*
 * Brings the schema to KS_STORE_SCHEMA_VERSION in one transaction, all or
 * nothing: every step, then user_version, then the commit; a step that
 * fails rolls every step back and the store is as it was.  A step that
 * fails on the file's content (a table that should not be there, one
 * that is missing, damage) is KS_E_CORRUPT, for the caller to set the
 * store aside.
 */
int kss_migrate(ks_store_t *s, char *err, size_t errlen)
{
	int64_t v = 0, from;
	char sql[64];
	int rc;

	rc = kss_exec_open(s, s->w, "BEGIN IMMEDIATE", err, errlen);
	if (rc != KS_OK)
		return rc;
	/* Read inside the write transaction, so the version cannot change
	 * between the check and the steps. */
	rc = kss_query_int(s, s->w, "PRAGMA user_version", &v, err, errlen);
	if (rc == KS_OK && v > KS_STORE_SCHEMA_VERSION) {
		rc = kss_too_new(s, v, err, errlen);
	} else if (rc == KS_OK && v < 0) {
		ks_set_err(err, errlen, "store %s: invalid schema version "
		    "%" PRId64, s->path, v);
		rc = KS_E_CORRUPT;
	}
	for (from = v; rc == KS_OK && v < KS_STORE_SCHEMA_VERSION; v++) {
		rc = kss_exec_open(s, s->w, migrations[v], err, errlen);
		if (rc == KS_OK && migration_fill[v])
			rc = migration_fill[v](s, err, errlen);
	}
	if (rc == KS_OK && v != from) {
		snprintf(sql, sizeof sql, "PRAGMA user_version=%d", (int)v);
		rc = kss_exec_open(s, s->w, sql, err, errlen);
	}
	if (rc == KS_OK)
		rc = kss_exec_open(s, s->w, "COMMIT", err, errlen);
	if (!sqlite3_get_autocommit(s->w))
		sqlite3_exec(s->w, "ROLLBACK", NULL, NULL, NULL);
	if (rc == KS_OK && v != from)
		ks_log(KS_LOG_INFO, "store %s: schema migrated from version "
		    "%d to %d", s->path, (int)from, (int)v);
	atomic_store(&s->schema_version, rc == KS_OK ? (int)v : (int)from);
	return rc;
}
