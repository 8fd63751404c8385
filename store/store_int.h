/*
 * Private to store/: the persistent store's one struct, the rules of its
 * two connections, and what its files share.  The store is one sqlite
 * database in WAL mode; docs/store.md gives the schema, the settings and
 * the reasons for them, docs/architecture.md which file holds what.
 *
 * Connections and locks.  SQLite before 3.51.3 can corrupt a WAL database
 * when several connections write or checkpoint at once (docs/store.md,
 * "Connections: the one-writer rule"), so every write goes through ONE
 * writer connection, and only it checkpoints.  Reads go through a second,
 * query-only connection that never checkpoints (wal_autocheckpoint=0, no
 * checkpoint on close), so a read proceeds while a write is in progress.
 * Both connections are opened with SQLITE_OPEN_NOMUTEX: each is used by
 * one thread at a time because its mutex is held around every use, so
 * sqlite's own per-connection mutex would only add cost.
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
 * No lock is held while calling out, except the callbacks of the reader's
 * walks (ks_store_list and the like), which run under rlock and therefore
 * must not call into the same store.
 *
 * Statements.  Each file prepares the statements of its tables once, from
 * a table of its own (kss_stmt_t, below), when the connections open and
 * again at a reopen; open.c walks every file's table to prepare and to
 * finalize them.  A statement belongs to one connection, and its field's
 * name says which: w_<name> is the writer's, used only under wlock (in the
 * daemon, on the writer thread), r_<name> the reader's, used only under
 * rlock (in the daemon, on the loop thread).  A pointer is read only under its lock, since
 * a reopen replaces them all.  Each use ends before the lock is released
 * with sqlite3_reset (a reader's read transaction ends with it, so the
 * WAL is not pinned) or kss_release, which also sets the parameters back
 * to NULL, as a freshly prepared statement has them, so that no borrowed
 * pointer outlives the call.  Only what runs once per open (the
 * migrations and their fills, the totals) and the integrity check (a
 * whole-file pragma, for start-up checks and tests) are prepared where
 * they run.
 */
#ifndef KS_STORE_INT_H
#define KS_STORE_INT_H

#include <pthread.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "store.h"

/* Slots of the pending set's index: a power of two, at most half full. */
#define PENDING_SLOTS (2 * KS_STORE_PENDING_TOUCHES)

_Static_assert((PENDING_SLOTS & (PENDING_SLOTS - 1)) == 0,
    "PENDING_SLOTS must be a power of two");
_Static_assert(KS_STORE_PENDING_TOUCHES < 65535, "slot index is 16 bits");

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

	/* The writer and its statements, by the file whose table prepares
	 * them. */
	pthread_mutex_t wlock;
	sqlite3 *w;
	/* sql.c */
	sqlite3_stmt *w_begin, *w_commit, *w_rollback;
	/* artifacts.c */
	sqlite3_stmt *w_size;           /* size of a row, before a put */
	sqlite3_stmt *w_put;
	sqlite3_stmt *w_put_use;        /* its row in uses */
	sqlite3_stmt *w_delete;         /* RETURNING size */
	sqlite3_stmt *w_delete_use;
	sqlite3_stmt *w_lru;            /* eviction victims */
	sqlite3_stmt *w_check;          /* SELECT_ROW, for quarantine */
	sqlite3_stmt *w_count_corrupt;
	sqlite3_stmt *w_scan;           /* key, meta of every row */
	/* touch.c */
	sqlite3_stmt *w_touch;
	/* misses.c */
	sqlite3_stmt *w_miss, *w_late;
	/* deploy.c */
	sqlite3_stmt *w_late_stale;     /* late compiles of old specs */
	sqlite3_stmt *w_deploy, *w_undeploy;
	sqlite3_stmt *w_pin, *w_unpin;  /* one key; every key of a name */
	sqlite3_stmt *w_late_drop;
	/* audit.c */
	sqlite3_stmt *w_audited, *w_audit_event;
	/* canary.c */
	sqlite3_stmt *w_canary;
	/* probe.c */
	sqlite3_stmt *w_probe, *w_probe_drop;
	struct touch batch[KS_STORE_PENDING_TOUCHES]; /* flush's copy */

	/* The reader and its statements, likewise. */
	pthread_mutex_t rlock;
	sqlite3 *r;
	/* artifacts.c */
	sqlite3_stmt *r_get;            /* SELECT_ROW */
	sqlite3_stmt *r_list;
	sqlite3_stmt *r_entries;        /* the entry columns, filtered */
	sqlite3_stmt *r_key_range;      /* keys with a prefix */
	/* misses.c */
	sqlite3_stmt *r_misses, *r_late;
	/* deploy.c */
	sqlite3_stmt *r_deployments, *r_pinned;
	sqlite3_stmt *r_pins_others;    /* bytes other deployments pin */
	sqlite3_stmt *r_pin_size;       /* a key's size, pinned by others */
	sqlite3_stmt *r_mean_kernel, *r_mean_backend;
	/* audit.c */
	sqlite3_stmt *r_audit_candidates, *r_audit_events;
	/* canary.c */
	sqlite3_stmt *r_identities, *r_canaries;
	/* probe.c */
	sqlite3_stmt *r_probe;

	/* Pending touches: an array plus an open-addressing index over it,
	 * so a touch deduplicates without allocating. */
	pthread_mutex_t tlock;
	struct touch pending[KS_STORE_PENDING_TOUCHES];
	uint16_t slots[PENDING_SLOTS];  /* 0: empty, else index + 1 */
	size_t npending;
	uint64_t dropped;               /* touches that found the set full */

	_Atomic int64_t clock;          /* the last stamp handed out */
	_Atomic uint64_t entries, bytes, corrupt, evicted, corrupt_total;
	/* Written at open and at a reopen (the writer thread, under wlock);
	 * stats reads it lock-free. */
	_Atomic int schema_version;
	int locks;                      /* mutexes initialized, for teardown */
	dev_t dev;                      /* the file opened, to notice its */
	ino_t ino;                      /* deletion or replacement */
};

/* ---- the statement tables ---- */

/* The connection a statement is prepared on. */
enum kss_conn { KSS_WRITER, KSS_READER };

/* A statement of a file's table: SQL prepared on CONN into the
 * sqlite3_stmt pointer at OFF in struct ks_store. */
typedef struct {
	size_t off;
	enum kss_conn conn;
	const char *sql;
} kss_stmt_t;

/* A writer statement w_NAME, a reader statement r_NAME: the field's
 * prefix comes from the macro that picks the connection, so a
 * statement's name always says which connection it was prepared on. */
#define KSS_W(name, text) \
	{ offsetof(struct ks_store, w_##name), KSS_WRITER, text }
#define KSS_R(name, text) \
	{ offsetof(struct ks_store, r_##name), KSS_READER, text }

/* A file's table, as open.c finds it. */
typedef struct {
	const kss_stmt_t *stmt;
	size_t n;
} kss_stmts_t;

#define KSS_STMTS(name, table) \
	const kss_stmts_t name = { table, sizeof table / sizeof table[0] }

extern const kss_stmts_t kss_sql_stmts, kss_artifacts_stmts,
    kss_touch_stmts, kss_misses_stmts, kss_deploy_stmts, kss_audit_stmts,
    kss_canary_stmts, kss_probe_stmts;

/* ---- sql.c: statements, errors, the writer's transactions ---- */

/* Take the writer's (the reader's) lock for a call of the public API:
 * KS_OK, or KS_E_IO with the lock not held while the store has no
 * connection, after a reopen that failed (until one succeeds). */
int kss_wlock(ks_store_t *s);
int kss_rlock(ks_store_t *s);

int kss_from_sqlite(int rc);
int kss_failed(ks_store_t *s, sqlite3 *db, int rc, const char *what);
int kss_run(ks_store_t *s, sqlite3_stmt *st, const char *what);
void kss_release(sqlite3_stmt *st);
int kss_bind_key(sqlite3_stmt *st, int col, const ks_hash_t *key);
void kss_column_key(sqlite3_stmt *st, int col, ks_hash_t *out);
const char *kss_column_str(sqlite3_stmt *st, int col);
int kss_begin(ks_store_t *s);
int kss_commit(ks_store_t *s);
void kss_rollback(ks_store_t *s);
/* At open, with the error's text in ERR. */
int kss_exec_open(ks_store_t *s, sqlite3 *db, const char *sql,
    char *err, size_t errlen);
int kss_query_int(ks_store_t *s, sqlite3 *db, const char *sql,
    int64_t *out, char *err, size_t errlen);
int kss_prepare(ks_store_t *s, sqlite3 *db, const char *sql,
    sqlite3_stmt **st, char *err, size_t errlen);

/* ---- schema.c: the migrations ---- */

int kss_too_new(ks_store_t *s, int64_t v, char *err, size_t errlen);
int kss_migrate(ks_store_t *s, char *err, size_t errlen);

/* ---- row.c: a row's checksums and checks ---- */

/* Meta and bytes of a SELECT_ROW row that passed kss_check_shape.  The
 * pointers are sqlite's, valid until the statement is stepped or reset.
 * Pointer before length, as sqlite asks; no type conversion can happen
 * since kss_check_shape saw TEXT and BLOB. */
struct row_data {
	const char *meta;
	size_t meta_len;
	const void *bytes;
	size_t len;
};

void kss_row_sum_of(const ks_hash_t *key, const ks_hash_t *sum,
    const char *meta, size_t meta_len, ks_hash_t *out);
void kss_xsum_of(const ks_hash_t *key, const ks_hash_t *sum,
    const char *meta, size_t meta_len, const void *bytes, size_t len,
    uint8_t out[XSUM_BYTES]);
const char *kss_check_shape(sqlite3_stmt *st, ks_hash_t *sum,
    ks_hash_t *row_sum, uint8_t *xsum);
void kss_row_data(sqlite3_stmt *st, struct row_data *d);
const char *kss_check_xsum(const ks_hash_t *key, const ks_hash_t *sum,
    const uint8_t *xsum, const char *meta, size_t meta_len,
    const void *bytes, size_t len);
const char *kss_check_content(const ks_hash_t *key, const ks_hash_t *sum,
    const ks_hash_t *row_sum, const char *meta, size_t meta_len,
    const void *bytes, size_t len);

/* ---- entry.c: the entry columns (v4) ---- */

/* What an entry is, read from its meta: v[EC_*] borrowed from TREE, or
 * from SHAPE for EC_SHAPE; "" for what the meta lacks. */
struct entry_cols {
	struct cJSON *tree;
	ks_buf_t shape;
	const char *v[EC_N];
};

int kss_entry_cols_of(const char *meta, size_t meta_len,
    struct entry_cols *c);
void kss_entry_cols_free(struct entry_cols *c);
int kss_bind_entry_cols(sqlite3_stmt *st, const struct entry_cols *c);
void kss_column_entry(sqlite3_stmt *st, int first, ks_store_entry_t *e);

/* ---- touch.c: uses ---- */

int64_t kss_stamp(ks_store_t *s);
int kss_flush_locked(ks_store_t *s);

/* ---- artifacts.c ---- */

int kss_delete_row(ks_store_t *s, const ks_hash_t *key, int64_t *size);

/* ---- file.c ---- */

int kss_make_parents(const char *path, char *err, size_t errlen);
int kss_check_trust(const char *path, char *err, size_t errlen);

#endif
