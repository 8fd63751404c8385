/*
 * The persistent store: one sqlite database in WAL mode holding one row per
 * artifact, metadata and bytes together, so one transaction covers both.
 * docs/store.md gives the schema, the settings and the reasons for them.
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
 *
 * Connections and locks.  SQLite before 3.51.3 can corrupt a WAL database
 * when several connections write or checkpoint at once (docs/store.md,
 * "Connections: the one-writer rule"), so every write goes through ONE
 * writer connection, and only it checkpoints.  Reads go through a second,
 * query-only connection that never checkpoints (wal_autocheckpoint=0, no
 * checkpoint on close), so a read proceeds while a write is in progress.  Both connections are opened with
 * SQLITE_OPEN_NOMUTEX: each is used by one thread at a time because its
 * mutex is held around every use, so sqlite's own per-connection mutex
 * would only add cost.
 *
 *   wlock  guards the writer connection, its statements, s->batch and the
 *          totals mirrored in memory (written only under wlock; stats reads
 *          them lock-free as atomics).
 *   rlock  guards the reader connection and its statements.
 *   tlock  guards the pending set of touches.
 *
 * Lock order: wlock before tlock, and wlock before rlock (only
 * ks_store_reopen holds both, to swap the connections); no other path
 * holds rlock with another lock.
 * No lock is held while calling out, except ks_store_list's callback, which
 * runs under rlock and therefore must not call into the same store.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define XXH_STATIC_LINKING_ONLY         /* XXH3_state_t on the stack */
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>            /* the widest vector unit there is */
#endif
#include <unistd.h>

#include "store.h"

/* How long a connection waits for a lock held by another connection (the
 * other connection of this store, or an outside reader such as the sqlite3
 * shell) before a statement fails with SQLITE_BUSY. */
#define BUSY_TIMEOUT_MS 5000
/* WAL pages after which a commit of the writer checkpoints (sqlite's
 * default, stated so that it is a decision).  4 MB of WAL at 4 KB pages. */
#define WAL_AUTOCHECKPOINT 1000
/* Keys selected per round of eviction. */
#define EVICT_BATCH 32
/* Slots of the pending set's index: a power of two, at most half full. */
#define PENDING_SLOTS (2 * KS_STORE_PENDING_TOUCHES)

_Static_assert((PENDING_SLOTS & (PENDING_SLOTS - 1)) == 0,
    "PENDING_SLOTS must be a power of two");
_Static_assert(KS_STORE_PENDING_TOUCHES < 65535, "slot index is 16 bits");

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
 *   row_sum   BLAKE2b-256 of key, sum and meta (row_sum_of): catches a
 *             damaged meta, whose launch geometry would otherwise be served
 *   size      length of bytes, checked against the blob on every read
 *   created   Unix milliseconds of the put
 *   meta, bytes
 *   xsum      (v3) XXH3-128 of key, sum, meta and bytes (xsum_of): the
 *             check of every read, for bit rot; sum and row_sum are checked
 *             again when a row is quarantined or migrated
 * (v1 and v2 had last_used after created.)  From v4, between created and
 * meta, what the entry is: kernel, variant, backend, target, dtype, mode,
 * format, shape, compiler (entry_cols_of: read from meta by every put, and
 * by the migration for older rows), so that listing and evict --stale
 * read columns and no JSON.  They are derived from meta, which row_sum
 * and xsum cover; a damaged one misleads a listing, never a get.
 *
 * uses (v3): key, last_used: the stamp of the latest put or flushed touch
 * (stamp(): Unix milliseconds made strictly increasing per store), one
 * small row per artifact, so that a touch rewrites a few dozen bytes and
 * not the artifact's row with its blob (sqlite rewrites a whole record to
 * change one column of it).  Every transaction that writes or deletes an
 * artifact row does the same to its uses row.
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

/* Columns of r_get and w_check, in this order. */
enum { COL_SUM, COL_ROW_SUM, COL_SIZE, COL_META, COL_BYTES, COL_XSUM };
#define SELECT_ROW \
	"SELECT sum, row_sum, size, meta, bytes, xsum FROM artifacts " \
	"WHERE key = ?1"
#define XSUM_BYTES 16

/* The entry columns (v4), in table order; each but shape is the meta
 * field of the same name. */
enum { EC_KERNEL, EC_VARIANT, EC_BACKEND, EC_TARGET, EC_DTYPE, EC_MODE,
	EC_FORMAT, EC_SHAPE, EC_COMPILER, EC_N };
static const char *const entry_col_names[EC_N] = {
	"kernel", "variant", "backend", "target", "dtype", "mode", "format",
	"shape", "compiler",
};
#define ENTRY_COLS "kernel, variant, backend, target, dtype, mode, " \
	"format, shape, compiler"
/* A row's columns as a put writes them: ?1 to ?17. */
#define INSERT_ROW(table) "INSERT OR REPLACE INTO " table " (key, sum, " \
	"row_sum, size, created, " ENTRY_COLS ", meta, bytes, xsum) VALUES " \
	"(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, " \
	"?16, ?17)"
#define COL_PUT_ENTRY 6         /* the first entry column of INSERT_ROW */
#define COL_PUT_META (COL_PUT_ENTRY + EC_N)

struct touch {
	ks_hash_t key;
	int64_t when;
};

struct ks_store {
	char *path;
	uint64_t max_bytes;

	pthread_mutex_t wlock;
	sqlite3 *w;
	sqlite3_stmt *w_begin, *w_commit, *w_rollback;
	sqlite3_stmt *w_size;           /* size of a row, before a put */
	sqlite3_stmt *w_put;
	sqlite3_stmt *w_put_use;        /* its row in uses */
	sqlite3_stmt *w_delete;         /* RETURNING size */
	sqlite3_stmt *w_delete_use;
	sqlite3_stmt *w_touch;
	sqlite3_stmt *w_lru;            /* eviction victims */
	sqlite3_stmt *w_check;          /* SELECT_ROW, for quarantine */
	sqlite3_stmt *w_count_corrupt;
	sqlite3_stmt *w_scan;           /* key, meta of every row */
	struct touch batch[KS_STORE_PENDING_TOUCHES]; /* flush's copy */

	pthread_mutex_t rlock;
	sqlite3 *r;
	sqlite3_stmt *r_get;            /* SELECT_ROW */
	sqlite3_stmt *r_list;
	sqlite3_stmt *r_entries;        /* the entry columns, filtered */

	/* Pending touches: an array plus an open-addressing index over it,
	 * so a touch deduplicates without allocating. */
	pthread_mutex_t tlock;
	struct touch pending[KS_STORE_PENDING_TOUCHES];
	uint16_t slots[PENDING_SLOTS];  /* 0: empty, else index + 1 */
	size_t npending;
	uint64_t dropped;               /* touches that found the set full */

	_Atomic int64_t clock;          /* the last stamp handed out */
	_Atomic uint64_t entries, bytes, corrupt, evicted, corrupt_total;
	int schema_version;
	int locks;                      /* mutexes initialized, for teardown */
	dev_t dev;                      /* the file opened, to notice its */
	ino_t ino;                      /* deletion or replacement */
};

/* ---- small helpers ---- */

/*
 * A use stamp for last_used: wall-clock milliseconds, but strictly greater
 * than every stamp this store handed out before (and than every last_used
 * on disk at open), so the LRU order of two uses in the same millisecond,
 * or across a wall clock stepped backwards, is still their real order.
 */
static int64_t stamp(ks_store_t *s)
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

/* The ks error for a failed sqlite call with result code RC. */
static int from_sqlite(int rc)
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
static int failed(ks_store_t *s, sqlite3 *db, int rc, const char *what)
{
	ks_log(KS_LOG_ERROR, "store %s: %s: %s", s->path, what,
	    sqlite3_errmsg(db));
	return from_sqlite(rc) == KS_E_CORRUPT ? KS_E_STORE : from_sqlite(rc);
}

/* Steps a statement that returns no rows, then resets it. */
static int run(ks_store_t *s, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	if (rc != SQLITE_DONE)
		return failed(s, sqlite3_db_handle(st), rc, what);
	return KS_OK;
}

static int bind_key(sqlite3_stmt *st, int col, const ks_hash_t *key)
{
	return sqlite3_bind_blob(st, col, key->b, KS_HASH_BYTES,
	    SQLITE_STATIC);
}

static void column_key(sqlite3_stmt *st, int col, ks_hash_t *out)
{
	const void *p = sqlite3_column_blob(st, col);

	memset(out, 0, sizeof *out);
	if (p != NULL && sqlite3_column_bytes(st, col) == KS_HASH_BYTES)
		memcpy(out->b, p, KS_HASH_BYTES);
}

/* BLAKE2b-256 over key, sum, the length of meta and meta. */
static void row_sum_of(const ks_hash_t *key, const ks_hash_t *sum,
    const char *meta, size_t meta_len, ks_hash_t *out)
{
	ks_hasher_t h;
	uint8_t le[8];
	int i;

	for (i = 0; i < 8; i++)
		le[i] = (uint8_t)((uint64_t)meta_len >> (8 * i));
	ks_hasher_init(&h);
	ks_hasher_update(&h, key->b, KS_HASH_BYTES);
	ks_hasher_update(&h, sum->b, KS_HASH_BYTES);
	ks_hasher_update(&h, le, sizeof le);
	ks_hasher_update(&h, meta, meta_len);
	ks_hasher_final(&h, out);
}

/*
 * XXH3-128 over key, sum, the length of meta, meta and bytes, in its
 * canonical (big-endian) form.  Not a cryptographic hash: it catches bit
 * rot and misfiled rows at about half an instruction a byte (callgrind,
 * 6.4 KB), where BLAKE2b costs 5.6; the store file is trusted
 * (docs/store.md, threat model).
 */
static void xsum_of(const ks_hash_t *key, const ks_hash_t *sum,
    const char *meta, size_t meta_len, const void *bytes, size_t len,
    uint8_t out[XSUM_BYTES])
{
	XXH3_state_t st;
	XXH128_canonical_t c;
	uint8_t le[8];
	int i;

	for (i = 0; i < 8; i++)
		le[i] = (uint8_t)((uint64_t)meta_len >> (8 * i));
	XXH3_128bits_reset(&st);
	XXH3_128bits_update(&st, key->b, KS_HASH_BYTES);
	XXH3_128bits_update(&st, sum->b, KS_HASH_BYTES);
	XXH3_128bits_update(&st, le, sizeof le);
	XXH3_128bits_update(&st, meta, meta_len);
	XXH3_128bits_update(&st, bytes, len);
	XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
	memcpy(out, c.digest, XSUM_BYTES);
}

/*
 * The checks of a row that need no hashing, on a statement stepped to a
 * SELECT_ROW row: column types, hash lengths, size == length of bytes.
 * Fills SUM, ROW_SUM and, unless XSUM is NULL (a row being migrated), XSUM.
 * Returns NULL if they pass, else the reason.
 */
static const char *check_shape(sqlite3_stmt *st, ks_hash_t *sum,
    ks_hash_t *row_sum, uint8_t *xsum)
{
	if (sqlite3_column_type(st, COL_SUM) != SQLITE_BLOB ||
	    sqlite3_column_bytes(st, COL_SUM) != KS_HASH_BYTES ||
	    sqlite3_column_type(st, COL_ROW_SUM) != SQLITE_BLOB ||
	    sqlite3_column_bytes(st, COL_ROW_SUM) != KS_HASH_BYTES)
		return "malformed checksum";
	if (xsum && (sqlite3_column_type(st, COL_XSUM) != SQLITE_BLOB ||
	    sqlite3_column_bytes(st, COL_XSUM) != XSUM_BYTES))
		return "malformed checksum";
	if (sqlite3_column_type(st, COL_META) != SQLITE_TEXT ||
	    sqlite3_column_type(st, COL_BYTES) != SQLITE_BLOB ||
	    sqlite3_column_type(st, COL_SIZE) != SQLITE_INTEGER)
		return "malformed row";
	if (sqlite3_column_int64(st, COL_SIZE) !=
	    (int64_t)sqlite3_column_bytes(st, COL_BYTES))
		return "size does not match the stored bytes";
	column_key(st, COL_SUM, sum);
	column_key(st, COL_ROW_SUM, row_sum);
	if (xsum)
		memcpy(xsum, sqlite3_column_blob(st, COL_XSUM), XSUM_BYTES);
	return NULL;
}

/* Meta and bytes of a SELECT_ROW row that passed check_shape.  The
 * pointers are sqlite's, valid until the statement is stepped or reset.
 * Pointer before length, as sqlite asks; no type conversion can happen
 * since check_shape saw TEXT and BLOB. */
struct row_data {
	const char *meta;
	size_t meta_len;
	const void *bytes;
	size_t len;
};

static void row_data(sqlite3_stmt *st, struct row_data *d)
{
	d->meta = (const char *)sqlite3_column_text(st, COL_META);
	d->meta_len = (size_t)sqlite3_column_bytes(st, COL_META);
	d->bytes = sqlite3_column_blob(st, COL_BYTES);
	d->len = (size_t)sqlite3_column_bytes(st, COL_BYTES);
	if (d->meta == NULL)
		d->meta = "";
}

/* The check of every read: xsum over the row. */
static const char *check_xsum(const ks_hash_t *key, const ks_hash_t *sum,
    const uint8_t *xsum, const char *meta, size_t meta_len,
    const void *bytes, size_t len)
{
	uint8_t x[XSUM_BYTES];

	xsum_of(key, sum, meta, meta_len, bytes, len, x);
	return memcmp(x, xsum, XSUM_BYTES) == 0 ? NULL :
	    "row checksum (xsum) does not match";
}

/* The cryptographic checks: BLAKE2b(bytes) == sum, row_sum over key, sum,
 * meta. */
static const char *check_content(const ks_hash_t *key, const ks_hash_t *sum,
    const ks_hash_t *row_sum, const char *meta, size_t meta_len,
    const void *bytes, size_t len)
{
	ks_hash_t h;

	ks_hash(bytes, len, &h);
	if (!ks_hash_eq(&h, sum))
		return "checksum of the bytes does not match";
	row_sum_of(key, sum, meta, meta_len, &h);
	if (!ks_hash_eq(&h, row_sum))
		return "row checksum (key, sum, meta) does not match";
	return NULL;
}

/* ---- the entry columns (v4) ---- */

/* What an entry is, read from its meta: v[EC_*] borrowed from TREE, or
 * from SHAPE for EC_SHAPE; "" for what the meta lacks. */
struct entry_cols {
	cJSON *tree;
	ks_buf_t shape;
	const char *v[EC_N];
};

static void entry_cols_free(struct entry_cols *c)
{
	cJSON_Delete(c->tree);
	ks_buf_close(&c->shape);
}

cJSON *ks_meta_parse(const char *meta, size_t meta_len)
{
	char *text = malloc(meta_len + 3);
	cJSON *m;

	if (!text)
		return NULL;
	text[0] = '{';
	memcpy(text + 1, meta, meta_len);
	text[meta_len + 1] = '}';
	text[meta_len + 2] = '\0';
	m = cJSON_ParseWithLength(text, meta_len + 2);
	free(text);
	if (!cJSON_IsObject(m)) {
		cJSON_Delete(m);
		return NULL;
	}
	return m;
}

/*
 * Fills C from META (a reply's fields without braces, as store.h says).
 * A meta that is not such a fragment leaves every column "": the row is
 * still served (its checksums cover meta), only not described.  KS_OK, or
 * KS_E_NOMEM.
 */
static int entry_cols_of(const char *meta, size_t meta_len,
    struct entry_cols *c)
{
	const cJSON *guard, *dyn, *v;
	int i, rc = KS_OK;

	memset(c, 0, sizeof *c);
	ks_buf_init(&c->shape);
	for (i = 0; i < EC_N; i++)
		c->v[i] = "";
	/* An allocation that fails here is taken for a meta that is not
	 * JSON: the row goes in undescribed rather than not at all. */
	c->tree = ks_meta_parse(meta, meta_len);
	if (!c->tree)
		return KS_OK;
	for (i = 0; i < EC_N; i++) {
		v = cJSON_GetObjectItemCaseSensitive(c->tree,
		    entry_col_names[i]);
		if (i != EC_SHAPE && cJSON_IsString(v))
			c->v[i] = v->valuestring;
	}
	guard = cJSON_GetObjectItemCaseSensitive(c->tree, "guard");
	dyn = cJSON_GetObjectItemCaseSensitive(c->tree, "dynamic");
	if (!cJSON_IsObject(guard))
		guard = NULL;
	if (!cJSON_IsArray(dyn))
		dyn = NULL;
	cJSON_ArrayForEach(v, guard) {
		if (!cJSON_IsNumber(v) || !v->string)
			continue;
		rc |= ks_buf_printf(&c->shape, "%s%s=%lld", c->shape.len ?
		    "," : "", v->string, (long long)v->valuedouble);
	}
	cJSON_ArrayForEach(v, dyn) {
		if (cJSON_IsString(v))
			rc |= ks_buf_printf(&c->shape, "%s%s=dyn",
			    c->shape.len ? "," : "", v->valuestring);
	}
	if (rc)
		return KS_E_NOMEM;
	if (c->shape.data)
		c->v[EC_SHAPE] = c->shape.data;
	return KS_OK;
}

int ks_store_entry_of(const ks_hash_t *key, const char *meta,
    size_t meta_len, uint64_t size,
    int (*cb)(void *ctx, const ks_store_entry_t *e), void *ctx)
{
	struct entry_cols c;
	ks_store_entry_t e;
	int rc;

	if (entry_cols_of(meta, meta_len, &c) != KS_OK) {
		entry_cols_free(&c);
		return KS_E_NOMEM;
	}
	memset(&e, 0, sizeof e);
	e.key = *key;
	e.kernel = c.v[EC_KERNEL];
	e.variant = c.v[EC_VARIANT];
	e.backend = c.v[EC_BACKEND];
	e.target = c.v[EC_TARGET];
	e.dtype = c.v[EC_DTYPE];
	e.mode = c.v[EC_MODE];
	e.format = c.v[EC_FORMAT];
	e.shape = c.v[EC_SHAPE];
	e.compiler = c.v[EC_COMPILER];
	e.size = size;
	rc = cb(ctx, &e);
	entry_cols_free(&c);
	return rc;
}

/* Binds C to the entry columns of an INSERT_ROW statement. */
static int bind_entry_cols(sqlite3_stmt *st, const struct entry_cols *c)
{
	int i, rc = SQLITE_OK;

	for (i = 0; i < EC_N && rc == SQLITE_OK; i++)
		rc = sqlite3_bind_text(st, COL_PUT_ENTRY + i, c->v[i], -1,
		    SQLITE_STATIC);
	return rc;
}

/* ---- writer side (wlock held) ---- */

static int begin(ks_store_t *s)
{
	return run(s, s->w_begin, "begin");
}

static int commit(ks_store_t *s)
{
	return run(s, s->w_commit, "commit");
}

/* Rolls back the open transaction, if any: a failed statement may already
 * have ended it. */
static void rollback(ks_store_t *s)
{
	if (!sqlite3_get_autocommit(s->w))
		run(s, s->w_rollback, "rollback");
}

/* Deletes KEY's row; *size is its size, or -1 when there was none. */
static int delete_row(ks_store_t *s, const ks_hash_t *key, int64_t *size)
{
	int rc;

	*size = -1;
	bind_key(s->w_delete, 1, key);
	while ((rc = sqlite3_step(s->w_delete)) == SQLITE_ROW)
		*size = sqlite3_column_int64(s->w_delete, 0);
	sqlite3_reset(s->w_delete);
	if (rc != SQLITE_DONE)
		return failed(s, s->w, rc, "delete");
	bind_key(s->w_delete_use, 1, key);
	return run(s, s->w_delete_use, "delete use");
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
static int flush_locked(ks_store_t *s)
{
	size_t i, n = take_pending(s);
	int rc;

	if (n == 0)
		return KS_OK;
	rc = begin(s);
	for (i = 0; rc == KS_OK && i < n; i++) {
		bind_key(s->w_touch, 1, &s->batch[i].key);
		sqlite3_bind_int64(s->w_touch, 2, s->batch[i].when);
		rc = run(s, s->w_touch, "update last_used");
	}
	if (rc == KS_OK)
		rc = commit(s);
	if (rc != KS_OK) {
		rollback(s);
		ks_log(KS_LOG_WARN, "store %s: %zu last_used updates lost",
		    s->path, n);
	}
	return rc;
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
		bind_key(s->w_lru, 1, keep);
		sqlite3_bind_int(s->w_lru, 2, EVICT_BATCH);
		while (n < EVICT_BATCH &&
		    (st = sqlite3_step(s->w_lru)) == SQLITE_ROW)
			column_key(s->w_lru, 0, &victims[n++]);
		if (n < EVICT_BATCH && st != SQLITE_DONE) {
			sqlite3_reset(s->w_lru);
			return failed(s, s->w, st, "select eviction victims");
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
			rc = delete_row(s, &victims[i], &size);
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

	pthread_mutex_lock(&s->wlock);
	rc = begin(s);
	if (rc == KS_OK) {
		bind_key(s->w_check, 1, key);
		st = sqlite3_step(s->w_check);
		if (st == SQLITE_ROW) {
			why = check_shape(s->w_check, &sum, &row_sum, xsum);
			if (why == NULL) {
				struct row_data d;

				row_data(s->w_check, &d);
				why = check_xsum(key, &sum, xsum, d.meta,
				    d.meta_len, d.bytes, d.len);
				if (why == NULL)
					why = check_content(key, &sum,
					    &row_sum, d.meta, d.meta_len,
					    d.bytes, d.len);
			}
			bad = why != NULL;
		} else if (st != SQLITE_DONE) {
			rc = failed(s, s->w, st, "re-read corrupt row");
		}
		sqlite3_reset(s->w_check);
	}
	if (rc == KS_OK && bad)
		rc = delete_row(s, key, &size);
	if (rc == KS_OK && bad && size >= 0)
		rc = run(s, s->w_count_corrupt, "count corrupt row");
	if (rc == KS_OK)
		rc = commit(s);
	if (rc != KS_OK) {
		rollback(s);
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

/* ---- open and close ---- */

/* Creates the missing parent directories of PATH with mode 0700; existing
 * ones are left as they are. */
static int make_parents(const char *path, char *err, size_t errlen)
{
	char *dir = strdup(path), *p;
	struct stat st;
	int rc = KS_OK;

	if (dir == NULL)
		return KS_E_NOMEM;
	for (p = strchr(dir + 1, '/'); p != NULL; p = strchr(p + 1, '/')) {
		*p = '\0';
		if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
			int e = errno;

			/* Not ks_err_from_errno: its ENOENT means "cannot
			 * connect", and this is a file system failure. */
			rc = e == ENOMEM ? KS_E_NOMEM : KS_E_IO;
			ks_set_err(err, errlen, "store %s: cannot create "
			    "directory %s: %s", path, dir, strerror(e));
			break;
		}
		if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
			rc = KS_E_IO;
			ks_set_err(err, errlen, "store %s: %s is not a directory",
			    path, dir);
			break;
		}
		*p = '/';
	}
	free(dir);
	return rc;
}

/*
 * The ks error of SQLite's RC at open: KS_E_CORRUPT when the failure is
 * the file's content (not a database and damage, as from_sqlite says; a
 * schema that is not kspec's: a table or column missing or already
 * there), which the caller may set aside (store.h); else from_sqlite's
 * (locked, busy, read-only, I/O, a full disk: never the content's fault).
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
		return from_sqlite(rc);
	}
}

/* Runs SQL (no rows expected back) on DB at open, with error text. */
static int exec_open(ks_store_t *s, sqlite3 *db, const char *sql,
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
static int query_int(ks_store_t *s, sqlite3 *db, const char *sql,
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

static int prepare(ks_store_t *s, sqlite3 *db, const char *sql,
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

/* Opens a connection to s->path; errors name the path. */
static int open_conn(ks_store_t *s, int flags, sqlite3 **db, char *err,
    size_t errlen)
{
	/* NOFOLLOW: a symbolic link at the store's path (or its -wal, -shm)
	 * is refused by sqlite too, not only by check_trust. */
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

/* A store of a newer kspec: its content is not this build's to read
 * (KS_E_CORRUPT: the daemon sets it aside, unchanged, and starts anew). */
static int too_new(ks_store_t *s, int64_t v, char *err, size_t errlen)
{
	ks_set_err(err, errlen, "store %s: schema version %" PRId64 " is newer "
	    "than this build supports (%d); refusing to open it", s->path, v,
	    KS_STORE_SCHEMA_VERSION);
	return KS_E_CORRUPT;
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
	rc = query_int(s, s->w, "PRAGMA user_version", &v, err, errlen);
	if (rc != KS_OK)
		return rc;
	if (v > KS_STORE_SCHEMA_VERSION)
		return too_new(s, v, err, errlen);
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
	rc = exec_open(s, s->w, "PRAGMA synchronous=NORMAL;"
	    "PRAGMA foreign_keys=OFF;", err, errlen);
	if (rc == KS_OK)
		rc = exec_open(s, s->w, sql, err, errlen);
	return rc;
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

	rc = prepare(s, s->w, "SELECT sum, row_sum, size, meta, bytes, key "
	    "FROM artifacts WHERE key > ?1 ORDER BY key LIMIT 1",
	    &sel, err, errlen);
	if (rc == KS_OK)
		rc = prepare(s, s->w, "UPDATE artifacts SET xsum = ?2 "
		    "WHERE key = ?1", &upd, err, errlen);
	if (rc == KS_OK)
		rc = prepare(s, s->w, "DELETE FROM artifacts WHERE key = ?1",
		    &del, err, errlen);
	if (rc == KS_OK)
		rc = prepare(s, s->w, "DELETE FROM uses WHERE key = ?1",
		    &del_use, err, errlen);
	if (rc == KS_OK)
		rc = prepare(s, s->w, "UPDATE counters SET value = value + 1 "
		    "WHERE name = 'corrupt'", &cnt, err, errlen);
	/* A key that is not 32 bytes was never written by a daemon, and no
	 * get can reach it: such rows go first, as corrupt. */
	if (rc == KS_OK)
		rc = exec_open(s, s->w, "UPDATE counters SET value = value + "
		    "(SELECT COUNT(*) FROM artifacts WHERE typeof(key) <> "
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
			rc = failed(s, s->w, st, "read a row to migrate");
			sqlite3_reset(sel);
			break;
		}
		column_key(sel, 5, &key);
		memcpy(last, key.b, KS_HASH_BYTES);
		last_len = KS_HASH_BYTES;
		why = check_shape(sel, &sum, &row_sum, NULL);
		if (why == NULL) {
			struct row_data d;

			row_data(sel, &d);
			why = check_content(&key, &sum, &row_sum, d.meta,
			    d.meta_len, d.bytes, d.len);
			if (why == NULL)
				xsum_of(&key, &sum, d.meta, d.meta_len,
				    d.bytes, d.len, xsum);
		}
		sqlite3_reset(sel);
		if (why == NULL) {
			bind_key(upd, 1, &key);
			sqlite3_bind_blob(upd, 2, xsum, XSUM_BYTES,
			    SQLITE_STATIC);
			rc = run(s, upd, "store a row's xsum");
			filled++;
		} else {
			char hex[KS_HASH_HEX];

			ks_hash_hex(&key, hex);
			ks_log(KS_LOG_WARN, "store %s: corrupt artifact %s "
			    "removed while migrating (%s)", s->path, hex, why);
			bind_key(del, 1, &key);
			rc = run(s, del, "remove a corrupt row");
			if (rc == KS_OK) {
				bind_key(del_use, 1, &key);
				rc = run(s, del_use, "remove a corrupt row");
			}
			if (rc == KS_OK)
				rc = run(s, cnt, "count a corrupt row");
			removed++;
		}
	}
	sqlite3_finalize(sel);
	sqlite3_finalize(upd);
	sqlite3_finalize(del);
	sqlite3_finalize(del_use);
	sqlite3_finalize(cnt);
	if (rc != KS_OK) {
		/* failed() reports damage as KS_E_STORE, right for a get; at
		 * open it is the file's content (exec_open). */
		if (from_sqlite(sqlite3_errcode(s->w)) == KS_E_CORRUPT)
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

	rc = prepare(s, s->w, "SELECT key, sum, row_sum, size, created, meta, "
	    "bytes, xsum FROM artifacts ORDER BY key", &sel, err, errlen);
	if (rc == KS_OK)
		rc = prepare(s, s->w, INSERT_ROW("artifacts_v4"), &ins, err,
		    errlen);
	while (rc == KS_OK && (st = sqlite3_step(sel)) == SQLITE_ROW) {
		const char *meta = (const char *)sqlite3_column_text(sel,
		    S_META);
		struct entry_cols c;

		rc = entry_cols_of(meta ? meta : "", (size_t)
		    sqlite3_column_bytes(sel, S_META), &c);
		for (i = S_KEY; rc == KS_OK && i <= S_CREATED; i++)
			rc = sqlite3_bind_value(ins, i + 1,
			    sqlite3_column_value(sel, i)) == SQLITE_OK ?
			    KS_OK : KS_E_NOMEM;
		for (i = S_META; rc == KS_OK && i <= S_XSUM; i++)
			rc = sqlite3_bind_value(ins, COL_PUT_META + i - S_META,
			    sqlite3_column_value(sel, i)) == SQLITE_OK ?
			    KS_OK : KS_E_NOMEM;
		if (rc == KS_OK && bind_entry_cols(ins, &c) != SQLITE_OK)
			rc = KS_E_NOMEM;
		if (rc == KS_OK)
			rc = run(s, ins, "copy a row with its entry columns");
		sqlite3_clear_bindings(ins);
		entry_cols_free(&c);
		copied++;
	}
	if (rc == KS_OK && st != SQLITE_DONE)
		rc = failed(s, s->w, st, "read a row to migrate");
	sqlite3_finalize(sel);
	sqlite3_finalize(ins);
	if (rc == KS_OK)
		rc = exec_open(s, s->w, "DROP TABLE artifacts;"
		    "ALTER TABLE artifacts_v4 RENAME TO artifacts;", err,
		    errlen);
	else {
		/* As fill_xsum: damage is the file's content. */
		if (from_sqlite(sqlite3_errcode(s->w)) == KS_E_CORRUPT)
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

/* Brings the schema to KS_STORE_SCHEMA_VERSION, one transaction a step. */
/*
 * Brings the schema to KS_STORE_SCHEMA_VERSION in one transaction, all or
 * nothing: every step, then user_version, then the commit; a step that
 * fails rolls every step back and the store is as it was.  A step that
 * fails on the file's content (a table that should not be there, one
 * that is missing, damage) is KS_E_CORRUPT, for the caller to set the
 * store aside.
 */
static int migrate(ks_store_t *s, char *err, size_t errlen)
{
	int64_t v = 0, from;
	char sql[64];
	int rc;

	rc = exec_open(s, s->w, "BEGIN IMMEDIATE", err, errlen);
	if (rc != KS_OK)
		return rc;
	/* Read inside the write transaction, so the version cannot change
	 * between the check and the steps. */
	rc = query_int(s, s->w, "PRAGMA user_version", &v, err, errlen);
	if (rc == KS_OK && v > KS_STORE_SCHEMA_VERSION) {
		rc = too_new(s, v, err, errlen);
	} else if (rc == KS_OK && v < 0) {
		ks_set_err(err, errlen, "store %s: invalid schema version "
		    "%" PRId64, s->path, v);
		rc = KS_E_CORRUPT;
	}
	for (from = v; rc == KS_OK && v < KS_STORE_SCHEMA_VERSION; v++) {
		rc = exec_open(s, s->w, migrations[v], err, errlen);
		if (rc == KS_OK && migration_fill[v])
			rc = migration_fill[v](s, err, errlen);
	}
	if (rc == KS_OK && v != from) {
		snprintf(sql, sizeof sql, "PRAGMA user_version=%d", (int)v);
		rc = exec_open(s, s->w, sql, err, errlen);
	}
	if (rc == KS_OK)
		rc = exec_open(s, s->w, "COMMIT", err, errlen);
	if (!sqlite3_get_autocommit(s->w))
		sqlite3_exec(s->w, "ROLLBACK", NULL, NULL, NULL);
	if (rc == KS_OK && v != from)
		ks_log(KS_LOG_INFO, "store %s: schema migrated from version "
		    "%d to %d", s->path, (int)from, (int)v);
	s->schema_version = rc == KS_OK ? (int)v : (int)from;
	return rc;
}

static int prepare_writer(ks_store_t *s, char *err, size_t errlen)
{
	static const struct {
		size_t off;
		const char *sql;
	} stmts[] = {
#define W(field, text) { offsetof(ks_store_t, field), text }
		W(w_begin, "BEGIN IMMEDIATE"),
		W(w_commit, "COMMIT"),
		W(w_rollback, "ROLLBACK"),
		W(w_size, "SELECT size FROM artifacts WHERE key = ?1"),
		W(w_put, INSERT_ROW("artifacts")),
		W(w_put_use, "INSERT OR REPLACE INTO uses (key, last_used)"
		    " VALUES (?1, ?2)"),
		W(w_delete, "DELETE FROM artifacts WHERE key = ?1"
		    " RETURNING size"),
		W(w_delete_use, "DELETE FROM uses WHERE key = ?1"),
		W(w_touch, "UPDATE uses SET last_used = ?2"
		    " WHERE key = ?1 AND last_used < ?2"),
		/* A deployment's pinned keys are never evicted. */
		W(w_lru, "SELECT key FROM uses WHERE key <> ?1 AND key NOT IN"
		    " (SELECT key FROM pins) ORDER BY last_used, key LIMIT ?2"),
		W(w_check, SELECT_ROW),
		W(w_count_corrupt, "UPDATE counters SET value = value + 1"
		    " WHERE name = 'corrupt'"),
		W(w_scan, "SELECT key, meta FROM artifacts ORDER BY key"),
#undef W
	};
	size_t i;

	for (i = 0; i < sizeof stmts / sizeof stmts[0]; i++) {
		sqlite3_stmt **st = (sqlite3_stmt **)((char *)s +
		    stmts[i].off);
		int rc = prepare(s, s->w, stmts[i].sql, st, err, errlen);

		if (rc != KS_OK)
			return rc;
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
	rc = exec_open(s, s->w, "BEGIN IMMEDIATE;"
	    "INSERT INTO uses (key, last_used) SELECT key, 0 FROM artifacts"
	    "  WHERE key NOT IN (SELECT key FROM uses);"
	    "DELETE FROM uses WHERE key NOT IN (SELECT key FROM artifacts);"
	    "COMMIT;", err, errlen);
	if (rc != KS_OK) {
		if (!sqlite3_get_autocommit(s->w))
			sqlite3_exec(s->w, "ROLLBACK", NULL, NULL, NULL);
		return rc;
	}
	rc = query_int(s, s->w, "SELECT COUNT(*) FROM artifacts", &n, err,
	    errlen);
	if (rc == KS_OK)
		rc = query_int(s, s->w, "SELECT COALESCE(SUM(size), 0) "
		    "FROM artifacts", &bytes, err, errlen);
	if (rc == KS_OK)
		rc = query_int(s, s->w, "SELECT COALESCE(MAX(last_used), 0) "
		    "FROM uses", &last, err, errlen);
	if (rc == KS_OK)
		rc = query_int(s, s->w, "SELECT COALESCE((SELECT value FROM "
		    "counters WHERE name = 'corrupt'), 0)", &corrupt, err,
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
	rc = exec_open(s, s->r, "PRAGMA wal_autocheckpoint=0;"
	    "PRAGMA query_only=1;"
	    "PRAGMA cache_size=-" READER_CACHE_KB ";", err, errlen);
	if (rc == KS_OK)
		rc = prepare(s, s->r, SELECT_ROW, &s->r_get, err, errlen);
	if (rc == KS_OK)
		rc = prepare(s, s->r, "SELECT a.key, a.meta, a.size, "
		    "COALESCE(u.last_used, 0) FROM artifacts a LEFT JOIN uses u "
		    "ON u.key = a.key ORDER BY a.key", &s->r_list, err, errlen);
	if (rc == KS_OK)
		rc = prepare(s, s->r, "SELECT a.key, a.size, a.created, "
		    ENTRY_COLS ", COALESCE(u.last_used, 0) FROM artifacts a "
		    "LEFT JOIN uses u ON u.key = a.key WHERE (?1 = '' OR "
		    "a.kernel = ?1) AND (?2 = '' OR a.backend = ?2) AND "
		    "(?3 = '' OR a.target = ?3) ORDER BY a.key", &s->r_entries,
		    err, errlen);
	return rc;
}

static void finalize_all(ks_store_t *s)
{
	sqlite3_stmt **w[] = {
		&s->w_begin, &s->w_commit, &s->w_rollback, &s->w_size,
		&s->w_put, &s->w_put_use, &s->w_delete, &s->w_delete_use,
		&s->w_touch, &s->w_lru, &s->w_check,
		&s->w_count_corrupt, &s->w_scan, &s->r_get, &s->r_list,
		&s->r_entries,
	};
	size_t i;

	for (i = 0; i < sizeof w / sizeof w[0]; i++) {
		sqlite3_finalize(*w[i]);
		*w[i] = NULL;
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

/* ---- who may write the store ---- */

/* "uid 1000, mode 0666" of ST, for messages. */
static void describe(const struct stat *st, char *out, size_t len)
{
	snprintf(out, len, "owned by uid %ld, mode %04o", (long)st->st_uid,
	    (unsigned)(st->st_mode & 07777));
}

/* A file of the store: absent, or a regular file (never a symbolic link)
 * owned by us or root and writable by nobody else. */
static int check_file(const char *path, const char *store, char *err,
    size_t errlen)
{
	struct stat st;
	char how[64];

	if (lstat(path, &st) != 0)
		return errno == ENOENT ? KS_OK : KS_E_IO;
	describe(&st, how, sizeof how);
	if (S_ISLNK(st.st_mode)) {
		ks_set_err(err, errlen, "store %s: refusing it: %s is a symbolic "
		    "link; kspecd opens its store only as a plain file (remove "
		    "the link, or give the real path)", store, path);
		return KS_E_DENIED;
	}
	if (!S_ISREG(st.st_mode)) {
		ks_set_err(err, errlen, "store %s: cannot open: %s is not a "
		    "regular file", store, path);
		return KS_E_STORE;
	}
	if ((st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & 022)) {
		ks_set_err(err, errlen, "store %s: refusing it: %s is %s; "
		    "whoever can write the store can change what kspecd serves, "
		    "so it must be a file owned by uid %ld (or root) that nobody "
		    "else may write (chmod 0600, or remove it and let kspecd "
		    "create it)", store, path, how, (long)geteuid());
		return KS_E_DENIED;
	}
	return KS_OK;
}

/*
 * The store's directory and every directory above it: owned by us or
 * root, and writable by nobody else, except an ancestor that is sticky and
 * root's (like /tmp), where others cannot replace what is ours.
 */
static int check_dirs(const char *store, char *err, size_t errlen)
{
	char *dir = realpath(store, NULL), *slash;
	char how[64];
	struct stat st;
	int first = 1, rc = KS_OK;

	if (!dir) {
		/* The store does not exist yet: its directory does. */
		char *copy = strdup(store);

		if (!copy)
			return KS_E_NOMEM;
		slash = strrchr(copy, '/');
		if (slash && slash != copy)
			*slash = '\0';
		else if (slash)
			slash[1] = '\0';
		else
			strcpy(copy, ".");
		dir = realpath(copy, NULL);
		free(copy);
		if (!dir)
			return KS_E_IO;
	} else if ((slash = strrchr(dir, '/')) == dir) {
		dir[1] = '\0';         /* the store is in / */
	} else if (slash) {
		*slash = '\0';
	}
	for (;;) {
		if (stat(dir, &st) != 0) {
			rc = KS_E_IO;
			break;
		}
		describe(&st, how, sizeof how);
		if ((st.st_uid != geteuid() && st.st_uid != 0) ||
		    ((st.st_mode & 022) && (first || !(st.st_mode & S_ISVTX) ||
		    st.st_uid != 0))) {
			ks_set_err(err, errlen, "store %s: refusing it: directory "
			    "%s is %s; whoever can write there can replace the "
			    "store and change what kspecd serves, so the store's "
			    "directory and those above it must be owned by uid %ld "
			    "(or root) and writable by nobody else (above the "
			    "store's own directory, a root-owned sticky one such "
			    "as /tmp is fine)", store, dir, how, (long)geteuid());
			rc = KS_E_DENIED;
			break;
		}
		first = 0;
		if (strcmp(dir, "/") == 0)
			break;
		slash = strrchr(dir, '/');
		if (slash == dir)
			slash[1] = '\0';
		else
			*slash = '\0';
	}
	free(dir);
	return rc;
}

static int check_trust(const char *path, char *err, size_t errlen)
{
	static const char *const ext[] = { "", "-wal", "-shm" };
	char file[4200];
	size_t i;
	int rc = check_file(path, path, err, errlen);

	if (rc == KS_OK)
		rc = check_dirs(path, err, errlen);
	for (i = 1; rc == KS_OK && i < sizeof ext / sizeof ext[0]; i++) {
		snprintf(file, sizeof file, "%s%s", path, ext[i]);
		rc = check_file(file, path, err, errlen);
	}
	return rc;
}

/* Opens both connections of S at s->path and brings the schema and the
 * totals up to date. */
static int open_all(ks_store_t *s, char *err, size_t errlen)
{
	struct stat st;
	int rc;

	rc = open_writer(s, err, errlen);
	if (rc == KS_OK)
		rc = migrate(s, err, errlen);
	if (rc == KS_OK)
		rc = prepare_writer(s, err, errlen);
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

	rc = make_parents(path, err, errlen);
	if (rc == KS_OK)
		rc = check_trust(path, err, errlen);
	if (rc == KS_OK)
		rc = open_all(s, err, errlen);
	if (rc != KS_OK) {
		destroy(s);
		return rc;
	}
	*out = s;
	return KS_OK;
}

int ks_store_changed(ks_store_t *s)
{
	struct stat st;

	if (lstat(s->path, &st) != 0)
		return errno == ENOENT;
	return st.st_dev != s->dev || st.st_ino != s->ino;
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
	rc = check_trust(s->path, err, errlen);
	if (rc == KS_OK)
		rc = open_all(s, err, errlen);
	pthread_mutex_unlock(&s->rlock);
	pthread_mutex_unlock(&s->wlock);
	return rc;
}

static const char *const store_ext[] = { "", "-wal", "-shm" };

/* Removes the set-aside copy NAME (a file of DIR) with its -wal and -shm,
 * each only when it is a regular file of this uid. */
static void remove_aside(const char *dir, const char *name)
{
	char file[4400];
	struct stat st;
	size_t i;

	for (i = 0; i < sizeof store_ext / sizeof store_ext[0]; i++) {
		snprintf(file, sizeof file, "%s/%s%s", dir, name, store_ext[i]);
		if (lstat(file, &st) == 0 && S_ISREG(st.st_mode) &&
		    st.st_uid == geteuid() && unlink(file) == 0)
			ks_log(KS_LOG_INFO, "store: removed %s, an older "
			    "set-aside copy (the newest %d are kept)", file,
			    KS_STORE_ASIDE_KEEP);
	}
}

/* A set-aside copy: its name, and the seconds and -n of its suffix. */
typedef struct {
	char *name;
	long long sec, n;
} aside_t;

/* Newest first. */
static int newer_first(const void *a, const void *b)
{
	const aside_t *x = a, *y = b;

	if (x->sec != y->sec)
		return x->sec < y->sec ? 1 : -1;
	return (x->n < y->n) - (x->n > y->n);
}

enum { ASIDE_MAX = 256 };

/*
 * The set-aside copies beside PATH (PATH.corrupt-SECONDS[-N], not their
 * -wal or -shm) into NAMES, newest first; their directory into WHERE.
 * Returns how many (the caller frees each name).
 */
static size_t aside_list(const char *path, aside_t *names, char *where,
    size_t wherelen)
{
	const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 :
	    path;
	char prefix[512], *end;
	struct dirent *e;
	size_t n = 0;
	DIR *d;

	if (!slash)
		snprintf(where, wherelen, ".");
	else if (slash == path)
		snprintf(where, wherelen, "/");
	else
		snprintf(where, wherelen, "%.*s", (int)(slash - path), path);
	snprintf(prefix, sizeof prefix, "%s.corrupt-", base);
	d = opendir(where);
	while (d && (e = readdir(d)) != NULL && n < ASIDE_MAX) {
		const char *t = e->d_name + strlen(prefix);

		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 ||
		    *t < '0' || *t > '9')
			continue;
		names[n].sec = strtoll(t, &end, 10);
		names[n].n = 1;
		if (*end == '-' && end[1] >= '0' && end[1] <= '9')
			names[n].n = strtoll(end + 1, &end, 10);
		if (*end != '\0' || !(names[n].name = strdup(e->d_name)))
			continue;       /* a copy's -wal or -shm */
		n++;
	}
	if (d)
		closedir(d);
	qsort(names, n, sizeof names[0], newer_first);
	return n;
}

int ks_store_move_aside(const char *path, char *moved, size_t movedlen,
    char *err, size_t errlen)
{
	char from[4200], to[4300], where[4200];
	aside_t names[ASIDE_MAX];
	long long now = (long long)ks_wall_s(), next = 1;
	size_t i, n;
	int rc = check_trust(path, err, errlen);

	if (rc != KS_OK)
		return rc;
	/* A name after every copy of this second: PATH.corrupt-SECONDS,
	 * then -2, -3, ... */
	n = aside_list(path, names, where, sizeof where);
	for (i = 0; i < n; i++)
		if (names[i].sec == now && names[i].n >= next)
			next = names[i].n + 1;
	if (next == 1)
		snprintf(moved, movedlen, "%s.corrupt-%lld", path, now);
	else
		snprintf(moved, movedlen, "%s.corrupt-%lld-%lld", path, now,
		    next);
	for (i = 0; rc == KS_OK && i < sizeof store_ext / sizeof store_ext[0];
	    i++) {
		snprintf(from, sizeof from, "%s%s", path, store_ext[i]);
		snprintf(to, sizeof to, "%s%s", moved, store_ext[i]);
		if (rename(from, to) != 0 && errno != ENOENT) {
			ks_set_err(err, errlen, "store %s: cannot move %s aside: "
			    "%s", path, from, strerror(errno));
			rc = KS_E_IO;
		}
	}
	/* The newest KS_STORE_ASIDE_KEEP, this one among them: a store
	 * broken at every start cannot fill the disk. */
	for (i = 0; i < n; i++) {
		if (rc == KS_OK && i + 1 >= KS_STORE_ASIDE_KEEP)
			remove_aside(where, names[i].name);
		free(names[i].name);
	}
	return rc;
}

void ks_store_close(ks_store_t *s)
{
	if (s == NULL)
		return;
	pthread_mutex_lock(&s->wlock);
	flush_locked(s);
	pthread_mutex_unlock(&s->wlock);
	destroy(s);
}

/* ---- operations ---- */

int ks_store_lookup(ks_store_t *s, const ks_hash_t *key, ks_artifact_t **out)
{
	uint8_t xsum[XSUM_BYTES];
	ks_artifact_t *a = NULL;
	ks_hash_t sum, row_sum;
	const char *why = NULL;
	char hex[KS_HASH_HEX];
	int rc;

	*out = NULL;
	pthread_mutex_lock(&s->rlock);
	bind_key(s->r_get, 1, key);
	rc = sqlite3_step(s->r_get);
	if (rc == SQLITE_ROW) {
		why = check_shape(s->r_get, &sum, &row_sum, xsum);
		if (why == NULL) {
			struct row_data d;

			row_data(s->r_get, &d);
			a = ks_artifact_new_with_sum(key, &sum, d.meta,
			    d.meta_len, d.bytes, d.len);
			rc = a ? KS_OK : KS_E_NOMEM;
		} else {
			rc = KS_E_CORRUPT;
		}
	} else if (rc == SQLITE_DONE) {
		rc = KS_E_NOT_FOUND;
	} else {
		rc = failed(s, s->r, rc, "get");
	}
	/* Reset before unlocking: a reset statement ends the read
	 * transaction, which would otherwise pin the WAL and stop
	 * checkpoints. */
	sqlite3_reset(s->r_get);
	pthread_mutex_unlock(&s->rlock);

	/* Checked outside the lock, on our own copy. */
	if (a != NULL) {
		why = check_xsum(key, &a->sum, xsum, a->meta, a->meta_len,
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
	if (entry_cols_of(a->meta ? a->meta : "", a->meta_len, &cols)) {
		entry_cols_free(&cols);
		return KS_E_NOMEM;
	}
	row_sum_of(&a->key, &a->sum, a->meta ? a->meta : "", a->meta_len,
	    &row_sum);
	xsum_of(&a->key, &a->sum, a->meta ? a->meta : "", a->meta_len,
	    a->bytes ? (const void *)a->bytes : (const void *)"", a->len,
	    xsum);
	now = ks_wall_ms();

	pthread_mutex_lock(&s->wlock);
	bytes = atomic_load(&s->bytes);
	entries = atomic_load(&s->entries);
	/* Before a put that may evict, write the pending touches, so that
	 * eviction sees the latest uses. */
	if (s->max_bytes && bytes + a->len > s->max_bytes)
		flush_locked(s);

	rc = begin(s);
	if (rc == KS_OK) {
		bind_key(s->w_size, 1, &a->key);
		st = sqlite3_step(s->w_size);
		if (st == SQLITE_ROW)
			old = sqlite3_column_int64(s->w_size, 0);
		sqlite3_reset(s->w_size);
		if (st != SQLITE_ROW && st != SQLITE_DONE)
			rc = failed(s, s->w, st, "read old size");
	}
	if (rc == KS_OK && keep && old >= 0) {
		/* The row stays as it is: the transaction wrote nothing. */
		rollback(s);
		pthread_mutex_unlock(&s->wlock);
		entry_cols_free(&cols);
		return KS_OK;
	}
	if (rc == KS_OK) {
		sqlite3_stmt *p = s->w_put;

		bind_key(p, 1, &a->key);
		sqlite3_bind_blob(p, 2, a->sum.b, KS_HASH_BYTES, SQLITE_STATIC);
		sqlite3_bind_blob(p, 3, row_sum.b, KS_HASH_BYTES,
		    SQLITE_STATIC);
		sqlite3_bind_int64(p, 4, (int64_t)a->len);
		sqlite3_bind_int64(p, 5, now);
		st = bind_entry_cols(p, &cols);
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
			rc = failed(s, s->w, st, "bind artifact");
		} else {
			rc = run(s, p, "put");
		}
		/* Drop the borrowed pointers to the caller's buffers. */
		sqlite3_clear_bindings(p);
	}
	if (rc == KS_OK) {
		bind_key(s->w_put_use, 1, &a->key);
		sqlite3_bind_int64(s->w_put_use, 2, stamp(s));
		rc = run(s, s->w_put_use, "put use");
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
		rc = commit(s);
	if (rc != KS_OK) {
		rollback(s);
	} else {
		atomic_store(&s->bytes, bytes);
		atomic_store(&s->entries, entries);
		atomic_fetch_add(&s->evicted, evicted);
		if (added)
			*added = 1;
	}
	pthread_mutex_unlock(&s->wlock);
	entry_cols_free(&cols);
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
	int64_t when = stamp(s);
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
		if (pending_add(s, &keys[i], stamp(s)))
			s->dropped++;
	full = s->npending == KS_STORE_PENDING_TOUCHES;
	pthread_mutex_unlock(&s->tlock);
	return full;
}

int ks_store_flush(ks_store_t *s)
{
	int rc;

	pthread_mutex_lock(&s->wlock);
	rc = flush_locked(s);
	pthread_mutex_unlock(&s->wlock);
	return rc;
}

int ks_store_remove(ks_store_t *s, const ks_hash_t *key)
{
	int64_t size;
	int rc;

	pthread_mutex_lock(&s->wlock);
	/* The artifact and its uses row in one transaction. */
	rc = begin(s);
	if (rc == KS_OK)
		rc = delete_row(s, key, &size);
	if (rc == KS_OK)
		rc = commit(s);
	if (rc != KS_OK)
		rollback(s);
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
	pthread_mutex_lock(&s->wlock);
	rc = begin(s);
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
			column_key(s->w_scan, 0, &found[n++]);
		}
		if (rc == KS_OK && st != SQLITE_DONE)
			rc = failed(s, s->w, st, "scan");
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
		rc = delete_row(s, &found[i], &size);
		if (rc == KS_OK && size >= 0) {
			found[cap++] = found[i];
			bytes += (uint64_t)size;
			entries++;
		}
	}
	if (rc == KS_OK)
		rc = commit(s);
	if (rc != KS_OK) {
		rollback(s);
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

uint64_t ks_store_touches_dropped(ks_store_t *s)
{
	uint64_t n;

	pthread_mutex_lock(&s->tlock);
	n = s->dropped;
	pthread_mutex_unlock(&s->tlock);
	return n;
}

int ks_store_stats(ks_store_t *s, ks_store_stats_t *out)
{
	out->entries = atomic_load(&s->entries);
	out->bytes = atomic_load(&s->bytes);
	out->max_bytes = s->max_bytes;
	out->corrupt = atomic_load(&s->corrupt);
	out->evicted = atomic_load(&s->evicted);
	out->schema_version = s->schema_version;
	return KS_OK;
}

uint64_t ks_store_corrupt_total(ks_store_t *s)
{
	return atomic_load(&s->corrupt_total);
}

int ks_store_integrity_check(ks_store_t *s, char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	size_t used = 0;
	int rc, ok = 0, rows = 0;

	ks_set_err(err, errlen, "%s", "");
	pthread_mutex_lock(&s->rlock);
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
		rc = from_sqlite(rc);
	} else {
		rc = ok && rows == 1 ? KS_OK : KS_E_CORRUPT;
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

int ks_store_list(ks_store_t *s, int (*cb)(void *ctx, const ks_hash_t *key,
    const char *meta, uint64_t size, int64_t last_used), void *ctx)
{
	ks_hash_t key;
	int rc, stop = 0;

	pthread_mutex_lock(&s->rlock);
	while ((rc = sqlite3_step(s->r_list)) == SQLITE_ROW) {
		const char *meta;

		column_key(s->r_list, 0, &key);
		meta = (const char *)sqlite3_column_text(s->r_list, 1);
		stop = cb(ctx, &key, meta ? meta : "",
		    (uint64_t)sqlite3_column_int64(s->r_list, 2),
		    sqlite3_column_int64(s->r_list, 3));
		if (stop)
			break;
	}
	if (!stop && rc != SQLITE_DONE)
		stop = failed(s, s->r, rc, "list");
	sqlite3_reset(s->r_list);
	pthread_mutex_unlock(&s->rlock);
	return stop;
}

/* Text column COL of ST, "" for NULL. */
static const char *column_str(sqlite3_stmt *st, int col)
{
	const char *t = (const char *)sqlite3_column_text(st, col);

	return t ? t : "";
}

/* The entry columns of ST from column FIRST on, in table order, into E
 * (the strings live until ST steps again). */
static void column_entry(sqlite3_stmt *st, int first, ks_store_entry_t *e)
{
	const char **f[EC_N] = { &e->kernel, &e->variant, &e->backend,
	    &e->target, &e->dtype, &e->mode, &e->format, &e->shape,
	    &e->compiler };
	int i;

	for (i = 0; i < EC_N; i++)
		*f[i] = column_str(st, first + i);
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
	sqlite3_stmt *st = s->r_entries;
	const char *const by[3] = { f ? f->kernel : NULL, f ? f->backend :
	    NULL, f ? f->target : NULL };
	ks_store_entry_t e;
	uint64_t n = 0;
	int rc, i, stop = 0;

	pthread_mutex_lock(&s->rlock);
	for (i = 0; i < 3; i++)
		sqlite3_bind_text(st, i + 1, by[i] ? by[i] : "", -1,
		    SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		/* Rows before the page and after it are only counted. */
		if (n++ < offset || (limit && n > offset + limit))
			continue;
		column_key(st, R_KEY, &e.key);
		e.size = (uint64_t)sqlite3_column_int64(st, R_SIZE);
		e.created = sqlite3_column_int64(st, R_CREATED);
		column_entry(st, R_ENTRY, &e);
		e.last_used = sqlite3_column_int64(st, R_LAST_USED);
		stop = cb(ctx, &e);
		if (stop)
			break;
	}
	if (!stop && rc != SQLITE_DONE)
		stop = failed(s, s->r, rc, "list entries");
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
	sqlite3_stmt *st = NULL;
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
	pthread_mutex_lock(&s->rlock);
	rc = sqlite3_prepare_v2(s->r, "SELECT key FROM artifacts WHERE key "
	    "BETWEEN ?1 AND ?2 ORDER BY key LIMIT ?3", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		bind_key(st, 1, &lo);
		bind_key(st, 2, &hi);
		sqlite3_bind_int(st, 3, max);
		while ((rc = sqlite3_step(st)) == SQLITE_ROW && found < max)
			if (sqlite3_column_type(st, 0) == SQLITE_BLOB &&
			    sqlite3_column_bytes(st, 0) == KS_HASH_BYTES)
				column_key(st, 0, &keys[found++]);
	}
	rc = rc == SQLITE_DONE || rc == SQLITE_ROW ? found :
	    failed(s, s->r, rc, "keys with a prefix");
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

int ks_store_record_miss(ks_store_t *s, const char *deployment,
    const char *spec, uint64_t count)
{
	sqlite3_stmt *st = NULL;
	int64_t now = ks_wall_s() * 1000;
	int rc;

	pthread_mutex_lock(&s->wlock);
	rc = sqlite3_prepare_v2(s->w, deployment ? "INSERT INTO late("
	    "deployment, spec, first, last, count) VALUES (?4, ?1, ?2, ?2, "
	    "?3) ON CONFLICT(deployment, spec) DO UPDATE SET last = "
	    "excluded.last, count = count + excluded.count" : "INSERT INTO "
	    "misses(spec, first, last, count) VALUES (?1, ?2, ?2, ?3) ON "
	    "CONFLICT(spec) DO UPDATE SET last = excluded.last, count = "
	    "count + excluded.count", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, spec, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, now);
		sqlite3_bind_int64(st, 3, (int64_t)count);
		if (deployment)
			sqlite3_bind_text(st, 4, deployment, -1,
			    SQLITE_STATIC);
		rc = sqlite3_step(st);
	}
	rc = rc == SQLITE_DONE ? KS_OK : failed(s, s->w, rc, "record miss");
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->wlock);
	return rc;
}

int ks_store_misses(ks_store_t *s, const char *deployment,
    int (*cb)(void *ctx, const char *spec, int64_t first, int64_t last,
    uint64_t count), void *ctx)
{
	sqlite3_stmt *st = NULL;
	int rc, stop = 0;

	pthread_mutex_lock(&s->rlock);
	rc = sqlite3_prepare_v2(s->r, deployment ? "SELECT spec, first, last, "
	    "count FROM late WHERE deployment = ?1 ORDER BY first, spec" :
	    "SELECT spec, first, last, count FROM misses ORDER BY first, spec",
	    -1, &st, NULL);
	if (rc == SQLITE_OK && deployment)
		sqlite3_bind_text(st, 1, deployment, -1, SQLITE_STATIC);
	while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *spec = (const char *)sqlite3_column_text(st, 0);

		rc = SQLITE_OK;
		stop = cb(ctx, spec ? spec : "", sqlite3_column_int64(st, 1),
		    sqlite3_column_int64(st, 2),
		    (uint64_t)sqlite3_column_int64(st, 3));
		if (stop)
			break;
	}
	rc = !stop && rc != SQLITE_DONE ? failed(s, s->r, rc, "misses") :
	    KS_OK;
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

/* ---- deployments (schema 5) ---- */

/* Runs SQL on the writer's connection with NAME bound to ?1, SPECS (when
 * not NULL) to ?2 and now (Unix ms) to ?3 when SQL has it. */
static int exec_deployment(ks_store_t *s, const char *sql, const char *name,
    const char *specs, int *changes)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(s->w, sql, -1, &st, NULL);

	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
		if (specs)
			sqlite3_bind_text(st, 2, specs, -1, SQLITE_STATIC);
		if (sqlite3_bind_parameter_count(st) >= 3)
			sqlite3_bind_int64(st, 3, ks_wall_ms());
		rc = sqlite3_step(st);
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return failed(s, s->w, rc, "deployment");
	if (changes)
		*changes = sqlite3_changes(s->w);
	return KS_OK;
}

int ks_store_deploy_set(ks_store_t *s, const char *name, const char *specs,
    const ks_hash_t *keys, size_t n)
{
	sqlite3_stmt *st = NULL;
	size_t i;
	int rc;

	pthread_mutex_lock(&s->wlock);
	rc = begin(s);
	/* New specs: the late compiles were of the old ones (a repin at
	 * start writes the same specs, and keeps them). */
	if (rc == KS_OK)
		rc = exec_deployment(s, "DELETE FROM late WHERE deployment = ?1 "
		    "AND NOT EXISTS (SELECT 1 FROM deployments WHERE name = ?1 "
		    "AND specs = ?2)", name, specs, NULL);
	if (rc == KS_OK)
		rc = exec_deployment(s, "INSERT INTO deployments (name, specs, "
		    "created) VALUES (?1, ?2, ?3) ON CONFLICT (name) DO UPDATE "
		    "SET specs = ?2", name, specs, NULL);
	if (rc == KS_OK)
		rc = exec_deployment(s, "DELETE FROM pins WHERE name = ?1", name,
		    NULL, NULL);
	if (rc == KS_OK && sqlite3_prepare_v2(s->w, "INSERT OR IGNORE INTO "
	    "pins (key, name) VALUES (?1, ?2)", -1, &st, NULL) != SQLITE_OK)
		rc = failed(s, s->w, sqlite3_errcode(s->w), "pins");
	for (i = 0; rc == KS_OK && i < n; i++) {
		bind_key(st, 1, &keys[i]);
		sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
		if (sqlite3_step(st) != SQLITE_DONE)
			rc = failed(s, s->w, sqlite3_errcode(s->w), "pins");
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	if (rc == KS_OK)
		rc = commit(s);
	if (rc != KS_OK)
		rollback(s);
	pthread_mutex_unlock(&s->wlock);
	return rc;
}

int ks_store_deploy_remove(ks_store_t *s, const char *name)
{
	int rc, n = 0;

	pthread_mutex_lock(&s->wlock);
	rc = begin(s);
	if (rc == KS_OK)
		rc = exec_deployment(s, "DELETE FROM deployments WHERE name = ?1",
		    name, NULL, &n);
	if (rc == KS_OK)
		rc = exec_deployment(s, "DELETE FROM pins WHERE name = ?1", name,
		    NULL, NULL);
	if (rc == KS_OK)
		rc = exec_deployment(s, "DELETE FROM late WHERE deployment = ?1",
		    name, NULL, NULL);
	if (rc == KS_OK)
		rc = commit(s);
	if (rc != KS_OK)
		rollback(s);
	pthread_mutex_unlock(&s->wlock);
	return rc == KS_OK && n == 0 ? KS_E_NOT_FOUND : rc;
}

int ks_store_deployments(ks_store_t *s, const char *name,
    int (*cb)(void *ctx, const char *name, const char *specs,
    int64_t created, uint64_t pins), void *ctx)
{
	sqlite3_stmt *st = NULL;
	int rc, stop = 0;

	pthread_mutex_lock(&s->rlock);
	rc = sqlite3_prepare_v2(s->r, "SELECT d.name, d.specs, d.created, "
	    "(SELECT count(*) FROM pins p WHERE p.name = d.name) FROM "
	    "deployments d WHERE ?1 IS NULL OR d.name = ?1 ORDER BY d.name",
	    -1, &st, NULL);
	if (rc == SQLITE_OK) {
		if (name)
			sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
		while (!stop && (rc = sqlite3_step(st)) == SQLITE_ROW)
			stop = cb(ctx, (const char *)sqlite3_column_text(st, 0),
			    (const char *)sqlite3_column_text(st, 1),
			    sqlite3_column_int64(st, 2),
			    (uint64_t)sqlite3_column_int64(st, 3));
	}
	rc = stop ? stop : rc == SQLITE_DONE || rc == SQLITE_ROW ? KS_OK :
	    failed(s, s->r, rc, "deployments");
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}


int ks_store_pinned(ks_store_t *s, const char *name, const ks_hash_t *key)
{
	sqlite3_stmt *st = NULL;
	int rc;

	pthread_mutex_lock(&s->rlock);
	rc = sqlite3_prepare_v2(s->r, "SELECT 1 FROM pins WHERE key = ?1 AND "
	    "name = ?2", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		bind_key(st, 1, key);
		sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
	}
	rc = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 :
	    failed(s, s->r, rc, "pins");
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

/* One int64 of ST after binding TEXT1 and TEXT2 (when not NULL) to ?1 and
 * ?2, into *out (0 for NULL); the statement is reset. */
static int step_int64(ks_store_t *s, sqlite3_stmt *st, const char *text1,
    const char *text2, int64_t *out)
{
	int rc;

	sqlite3_reset(st);
	if (text1)
		sqlite3_bind_text(st, 1, text1, -1, SQLITE_STATIC);
	if (text2)
		sqlite3_bind_text(st, 2, text2, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW)
		return failed(s, s->r, rc, "pins");
	*out = sqlite3_column_int64(st, 0);
	return KS_OK;
}

int ks_store_pin_bytes(ks_store_t *s, const char *name, const ks_hash_t *keys,
    const char *const *kernels, const char *const *backends, size_t n,
    uint64_t *bytes, size_t *estimated)
{
	sqlite3_stmt *others = NULL, *size = NULL, *by_kernel = NULL;
	sqlite3_stmt *by_backend = NULL;
	int64_t v;
	size_t i;
	int rc;

	*bytes = 0;
	*estimated = 0;
	pthread_mutex_lock(&s->rlock);
	rc = sqlite3_prepare_v2(s->r, "SELECT coalesce(sum(size), 0) FROM "
	    "artifacts WHERE key IN (SELECT key FROM pins WHERE name != ?1)",
	    -1, &others, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(s->r, "SELECT size, key IN (SELECT "
		    "key FROM pins WHERE name != ?2) FROM artifacts WHERE key "
		    "= ?1", -1, &size, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(s->r, "SELECT coalesce(avg(size), 0) "
		    "FROM artifacts WHERE kernel = ?1 AND backend = ?2", -1,
		    &by_kernel, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(s->r, "SELECT coalesce(avg(size), 0) "
		    "FROM artifacts WHERE backend = ?1", -1, &by_backend,
		    NULL);
	rc = rc == SQLITE_OK ? step_int64(s, others, name, NULL, &v) :
	    failed(s, s->r, rc, "pins");
	if (rc == KS_OK)
		*bytes = (uint64_t)v;
	for (i = 0; rc == KS_OK && i < n; i++) {
		sqlite3_reset(size);
		bind_key(size, 1, &keys[i]);
		sqlite3_bind_text(size, 2, name, -1, SQLITE_STATIC);
		rc = sqlite3_step(size);
		if (rc == SQLITE_ROW) {
			/* One another deployment pins is counted above. */
			if (!sqlite3_column_int(size, 1))
				*bytes += (uint64_t)sqlite3_column_int64(size,
				    0);
			rc = KS_OK;
			continue;
		}
		if (rc != SQLITE_DONE) {
			rc = failed(s, s->r, rc, "pins");
			break;
		}
		rc = step_int64(s, by_kernel, kernels[i], backends[i], &v);
		if (rc == KS_OK && v == 0)
			rc = step_int64(s, by_backend, backends[i], NULL, &v);
		if (rc == KS_OK) {
			*bytes += (uint64_t)v;
			(*estimated)++;
		}
	}
	sqlite3_finalize(others);
	sqlite3_finalize(size);
	sqlite3_finalize(by_kernel);
	sqlite3_finalize(by_backend);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

/* ---- the key audit (schema 7) ---- */

int ks_store_audit_candidates(ks_store_t *s, const char *kernel,
    int64_t since, uint64_t limit,
    int (*cb)(void *ctx, const ks_store_audit_row_t *r), void *ctx)
{
	/* Columns: key, size, created, the entry columns, audited,
	 * alarmed. */
	enum { R_KEY, R_SIZE, R_CREATED, R_ENTRY, R_AUDITED = R_ENTRY + EC_N,
		R_ALARMED };
	sqlite3_stmt *st = NULL;
	ks_store_audit_row_t r;
	int rc, stop = 0;

	pthread_mutex_lock(&s->rlock);
	rc = sqlite3_prepare_v2(s->r, "SELECT a.key, a.size, a.created, "
	    "a.kernel, a.variant, a.backend, a.target, a.dtype, a.mode, "
	    "a.format, a.shape, a.compiler, coalesce(u.audited, 0), "
	    "(SELECT coalesce(max(e.at), 0) FROM audit_events e WHERE "
	    "e.key = a.key AND e.at >= ?2) FROM artifacts a LEFT JOIN audits "
	    "u ON u.key = a.key WHERE ?1 = '' OR a.kernel = ?1 ORDER BY "
	    "coalesce(u.audited, 0), a.key LIMIT ?3", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, kernel ? kernel : "", -1,
		    SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, since);
		sqlite3_bind_int64(st, 3, limit ? (int64_t)limit : -1);
	}
	while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		rc = SQLITE_OK;
		if (sqlite3_column_bytes(st, R_KEY) != KS_HASH_BYTES)
			continue;
		memset(&r, 0, sizeof r);
		column_key(st, R_KEY, &r.e.key);
		r.e.size = (uint64_t)sqlite3_column_int64(st, R_SIZE);
		r.e.created = sqlite3_column_int64(st, R_CREATED);
		column_entry(st, R_ENTRY, &r.e);
		r.audited = sqlite3_column_int64(st, R_AUDITED);
		r.alarmed = sqlite3_column_int64(st, R_ALARMED);
		stop = cb(ctx, &r);
		if (stop)
			break;
	}
	rc = stop ? stop : rc == SQLITE_DONE || rc == SQLITE_OK ? KS_OK :
	    failed(s, s->r, rc, "audit candidates");
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

/* Records that KEY was audited AT with RESULT (writer, under wlock). */
static int audit_mark(ks_store_t *s, const ks_hash_t *key,
    const char *result, int64_t at)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(s->w, "INSERT INTO audits (key, audited, "
	    "result) VALUES (?1, ?2, ?3) ON CONFLICT (key) DO UPDATE SET "
	    "audited = ?2, result = ?3", -1, &st, NULL);

	if (rc == SQLITE_OK) {
		bind_key(st, 1, key);
		sqlite3_bind_int64(st, 2, at);
		sqlite3_bind_text(st, 3, result, -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
	}
	sqlite3_finalize(st);
	return rc == SQLITE_DONE ? KS_OK : failed(s, s->w, rc, "audit mark");
}

int ks_store_audit_record(ks_store_t *s, const ks_store_audit_event_t *ev)
{
	sqlite3_stmt *st = NULL;
	int64_t size = -1;
	int rc, copied = 0;

	pthread_mutex_lock(&s->wlock);
	rc = begin(s);
	if (rc == KS_OK)
		rc = audit_mark(s, &ev->key, ev->differs ? "mismatch" :
		    ev->failed ? "failed" : "match", ev->at);
	/* A mismatch: the row, if it is still the one audited (its sum),
	 * moves into the event, and out of the artifacts. */
	if (rc == KS_OK && ev->differs) {
		if (sqlite3_prepare_v2(s->w, "INSERT INTO audit_events (at, "
		    "key, kernel, variant, backend, target, dtype, mode, format, "
		    "shape, compiler, auditor, stored_sum, audit_sum, differs, "
		    "meta, bytes) SELECT ?1, key, kernel, variant, backend, "
		    "target, dtype, mode, format, shape, compiler, ?3, sum, ?4, "
		    "?5, meta, bytes FROM artifacts WHERE key = ?2 AND sum = ?6",
		    -1, &st, NULL) == SQLITE_OK) {
			sqlite3_bind_int64(st, 1, ev->at);
			bind_key(st, 2, &ev->key);
			sqlite3_bind_text(st, 3, ev->auditor, -1, SQLITE_STATIC);
			bind_key(st, 4, &ev->audit_sum);
			sqlite3_bind_text(st, 5, ev->differs, -1, SQLITE_STATIC);
			bind_key(st, 6, &ev->stored_sum);
			if (sqlite3_step(st) != SQLITE_DONE)
				rc = failed(s, s->w, sqlite3_errcode(s->w),
				    "audit event");
			copied = sqlite3_changes(s->w);
		} else {
			rc = failed(s, s->w, sqlite3_errcode(s->w),
			    "audit event");
		}
		sqlite3_finalize(st);
		if (rc == KS_OK && copied)
			rc = delete_row(s, &ev->key, &size);
	}
	if (rc == KS_OK)
		rc = commit(s);
	if (rc != KS_OK)
		rollback(s);
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
	sqlite3_stmt *st = NULL;
	ks_store_audit_event_t ev;
	int rc, stop = 0;

	pthread_mutex_lock(&s->rlock);
	rc = sqlite3_prepare_v2(s->r, "SELECT at, key, kernel, variant, "
	    "backend, target, dtype, mode, format, shape, compiler, auditor, "
	    "stored_sum, audit_sum, differs, length(bytes) FROM audit_events "
	    "ORDER BY at DESC, id DESC LIMIT ?1", -1, &st, NULL);
	if (rc == SQLITE_OK)
		sqlite3_bind_int64(st, 1, limit ? (int64_t)limit : -1);
	while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		rc = SQLITE_OK;
		if (sqlite3_column_bytes(st, R_KEY) != KS_HASH_BYTES ||
		    sqlite3_column_bytes(st, R_STORED) != KS_HASH_BYTES ||
		    sqlite3_column_bytes(st, R_AUDIT) != KS_HASH_BYTES)
			continue;
		memset(&ev, 0, sizeof ev);
		ev.at = sqlite3_column_int64(st, R_AT);
		column_key(st, R_KEY, &ev.key);
		ev.e.key = ev.key;
		column_entry(st, R_ENTRY, &ev.e);
		ev.e.size = (uint64_t)sqlite3_column_int64(st, R_SIZE);
		ev.auditor = column_str(st, R_AUDITOR);
		column_key(st, R_STORED, &ev.stored_sum);
		column_key(st, R_AUDIT, &ev.audit_sum);
		ev.differs = column_str(st, R_DIFFERS);
		stop = cb(ctx, &ev);
		if (stop)
			break;
	}
	rc = stop ? stop : rc == SQLITE_DONE || rc == SQLITE_OK ? KS_OK :
	    failed(s, s->r, rc, "audit events");
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

/* ---- identities and canaries (schema 8) ---- */

int ks_store_identities(ks_store_t *s, const char *backend,
    int (*cb)(void *ctx, const char *identity), void *ctx)
{
	sqlite3_stmt *st = NULL;
	int rc, stop = 0;

	pthread_mutex_lock(&s->rlock);
	rc = sqlite3_prepare_v2(s->r, "SELECT DISTINCT compiler FROM "
	    "artifacts WHERE backend = ?1", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, backend, -1, SQLITE_STATIC);
		while (!stop && (rc = sqlite3_step(st)) == SQLITE_ROW)
			stop = cb(ctx, (const char *)sqlite3_column_text(st,
			    0));
	}
	rc = stop ? stop : rc == SQLITE_DONE || rc == SQLITE_ROW ? KS_OK :
	    failed(s, s->r, rc, "identities");
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

int ks_store_canary_put(ks_store_t *s, const ks_store_canary_t *c)
{
	sqlite3_stmt *st = NULL;
	int rc;

	pthread_mutex_lock(&s->wlock);
	rc = sqlite3_prepare_v2(s->w, "INSERT OR REPLACE INTO canaries "
	    "(backend, identity, kernel, result, at, ms, detail) VALUES "
	    "(?1, ?2, ?3, ?4, ?5, ?6, ?7)", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, c->backend, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, c->identity, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, c->kernel, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 4, c->result, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 5, c->at ? c->at : ks_wall_ms());
		sqlite3_bind_double(st, 6, c->ms);
		sqlite3_bind_text(st, 7, c->detail, -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
	}
	rc = rc == SQLITE_DONE ? KS_OK : failed(s, s->w, rc, "canary");
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->wlock);
	return rc;
}

int ks_store_canaries(ks_store_t *s, const char *backend,
    const char *identity, int (*cb)(void *ctx, const ks_store_canary_t *c),
    void *ctx)
{
	sqlite3_stmt *st = NULL;
	int rc, stop = 0;

	pthread_mutex_lock(&s->rlock);
	rc = sqlite3_prepare_v2(s->r, "SELECT backend, identity, kernel, "
	    "result, at, ms, detail FROM canaries WHERE backend = ?1 AND "
	    "identity = ?2 ORDER BY kernel", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, backend, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, identity, -1, SQLITE_STATIC);
		while (!stop && (rc = sqlite3_step(st)) == SQLITE_ROW) {
			ks_store_canary_t c = {
				(const char *)sqlite3_column_text(st, 0),
				(const char *)sqlite3_column_text(st, 1),
				(const char *)sqlite3_column_text(st, 2),
				(const char *)sqlite3_column_text(st, 3),
				sqlite3_column_int64(st, 4),
				sqlite3_column_double(st, 5),
				(const char *)sqlite3_column_text(st, 6),
			};

			stop = cb(ctx, &c);
		}
	}
	rc = stop ? stop : rc == SQLITE_DONE || rc == SQLITE_ROW ? KS_OK :
	    failed(s, s->r, rc, "canaries");
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

/* ---- the saved probe ---- */

int ks_store_probe_get(ks_store_t *s, ks_store_probe_t *out)
{
	sqlite3_stmt *st = NULL;
	char **col[3] = { &out->probe, &out->witness, &out->fingerprints };
	int rc, i;

	memset(out, 0, sizeof *out);
	pthread_mutex_lock(&s->rlock);
	rc = sqlite3_prepare_v2(s->r, "SELECT probe, witness, fingerprints "
	    "FROM probe WHERE id = 1", -1, &st, NULL);
	if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		for (rc = KS_OK, i = 0; i < 3; i++)
			if (!(*col[i] = strdup((const char *)
			    sqlite3_column_text(st, i))))
				rc = KS_E_NOMEM;
	} else
		rc = rc == SQLITE_DONE ? KS_E_NOT_FOUND : failed(s, s->r, rc,
		    "probe");
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	if (rc != KS_OK)
		ks_store_probe_free(out);
	return rc;
}

void ks_store_probe_free(ks_store_probe_t *p)
{
	free(p->probe);
	free(p->witness);
	free(p->fingerprints);
	memset(p, 0, sizeof *p);
}

int ks_store_probe_put(ks_store_t *s, const ks_store_probe_t *p)
{
	sqlite3_stmt *st = NULL;
	int rc;

	pthread_mutex_lock(&s->wlock);
	rc = sqlite3_prepare_v2(s->w, p ? "INSERT OR REPLACE INTO probe (id, "
	    "probe, witness, fingerprints, at) VALUES (1, ?1, ?2, ?3, ?4)" :
	    "DELETE FROM probe", -1, &st, NULL);
	if (rc == SQLITE_OK && p) {
		sqlite3_bind_text(st, 1, p->probe, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, p->witness, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, p->fingerprints, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 4, ks_wall_ms());
	}
	if (rc == SQLITE_OK)
		rc = sqlite3_step(st);
	rc = rc == SQLITE_DONE ? KS_OK : failed(s, s->w, rc, "probe");
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->wlock);
	return rc;
}
