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
/* ks_artifact_new with SUM, the BLAKE2b-256 of BYTES, already computed by
 * the caller; META is META_LEN bytes, not necessarily NUL-terminated. */
ks_artifact_t *ks_artifact_new_with_sum(const ks_hash_t *key,
    const ks_hash_t *sum, const char *meta, size_t meta_len,
    const void *bytes, size_t len);
void ks_artifact_ref(ks_artifact_t *a);
void ks_artifact_unref(ks_artifact_t *a);

struct cJSON;
/* META (META_LEN bytes of reply fields without braces, as above) parsed
 * as the object it is the inside of; cJSON_Delete it.  NULL when it is
 * not one, or on OOM. */
struct cJSON *ks_meta_parse(const char *meta, size_t meta_len);

/* ---- hot tier: memory LRU under a byte budget (single thread) ---- */

typedef struct ks_hot ks_hot_t;

/* MAX_BYTES counts meta_len + len of each artifact kept; 0 keeps nothing.
 * NULL on OOM.  ks_hot_free drops the tier's references. */
ks_hot_t *ks_hot_new(size_t max_bytes);
void ks_hot_free(ks_hot_t *h);
/* Borrowed reference valid until the next ks_hot_put/ks_hot_remove/
 * ks_hot_free on H; ks_artifact_ref it to keep it.  Marks the entry most
 * recently used, and used since the last ks_hot_take_uses.  NULL when
 * absent. */
ks_artifact_t *ks_hot_get(ks_hot_t *h, const ks_hash_t *key);
/* Takes up to MAX keys of entries used (got or put) since the last take,
 * each once, into KEYS; returns how many.  The uses of the store's rows
 * are recorded from here in batches (ks_store_touch_many), so a hit costs
 * the store nothing. */
size_t ks_hot_take_uses(ks_hot_t *h, ks_hash_t *keys, size_t max);
/* Adds a reference to A; evicts least recently used entries over budget.
 * An artifact larger than the whole budget is not kept.  Returns 1 when
 * the tier holds A (and so records this use for ks_hot_take_uses), 0 when
 * it does not. */
int ks_hot_put(ks_hot_t *h, ks_artifact_t *a);
void ks_hot_remove(ks_hot_t *h, const ks_hash_t *key);
/* Removes every entry MATCH accepts (every entry when MATCH is NULL);
 * *removed (caller frees) gets their N keys.  KS_E_NOMEM. */
int ks_hot_remove_if(ks_hot_t *h, int (*match)(void *ctx,
    const ks_artifact_t *a), void *ctx, ks_hash_t **removed, size_t *n);
/* 1 when KEY is in the tier; does not change the LRU order. */
int ks_hot_has(const ks_hot_t *h, const ks_hash_t *key);
/* Calls FN for every artifact, most recently used first; FN must not
 * change H. */
void ks_hot_each(ks_hot_t *h, void (*fn)(void *ctx, ks_artifact_t *a),
    void *ctx);
size_t ks_hot_bytes(const ks_hot_t *h);
size_t ks_hot_count(const ks_hot_t *h);

/* ---- persistent store ---- */

typedef struct ks_store ks_store_t;

/* Schema version (PRAGMA user_version) this build creates and migrates to;
 * a store with a newer version is refused. */
#define KS_STORE_SCHEMA_VERSION 9
/* Distinct keys whose touches are held in memory; a full set is flushed. */
#define KS_STORE_PENDING_TOUCHES 256

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
 * Trust.  Whoever can write the store can change what is served (a row
 * holds key, bytes and their checksums, which anyone can recompute), so
 * ks_store_open refuses (KS_E_DENIED, with a message naming the path, its
 * owner and mode, and what to do) a store file, -wal or -shm that is a
 * symbolic link, is not a regular file, is not owned by this uid or root,
 * or is writable by group or others, and a store whose directory, or a
 * directory above it, is not owned by this uid or root or is writable by
 * others (above the store's own directory a root-owned sticky one, like
 * /tmp, is fine).  A store that is not a database, or is damaged, is
 * KS_E_CORRUPT at open.
 */
/* 1 when the file at the store's path is no longer the one open (deleted,
 * or replaced by another). */
int ks_store_changed(ks_store_t *s);
/* Closes both connections and opens the file now at the path (creating
 * it when missing), under both locks; the trust checks apply.  When that
 * fails the store has no connection until a reopen succeeds: every call
 * meanwhile answers KS_E_IO (pending touches wait), none blocks. */
int ks_store_reopen(ks_store_t *s, char *err, size_t errlen);
/* Renames PATH and its -wal and -shm to PATH.corrupt-<Unix seconds>
 * (with -2, -3, ... when that name is taken; written into MOVED) after
 * the trust checks, then removes all but the newest KS_STORE_ASIDE_KEEP
 * such copies (each file only when it is a regular file of this uid). */
#define KS_STORE_ASIDE_KEEP 3
int ks_store_move_aside(const char *path, char *moved, size_t movedlen,
    char *err, size_t errlen);

/*
 * Looks KEY up through the reader connection, never waiting on a write.
 * KS_OK with *out (refs = 1, caller unrefs) when found and its checksums
 * verify; KS_E_NOT_FOUND when absent; KS_E_CORRUPT when a row was found
 * that fails a check: it is logged, not served, and left for
 * ks_store_quarantine, and the caller treats it as a miss.
 */
int ks_store_lookup(ks_store_t *s, const ks_hash_t *key,
    ks_artifact_t **out);
/* Writer: re-reads KEY's row and deletes it if it is still bad, counting
 * it (a row a put replaced in between is kept). */
int ks_store_quarantine(ks_store_t *s, const ks_hash_t *key);
/* ks_store_lookup, then ks_store_quarantine of a corrupt row. */
int ks_store_get(ks_store_t *s, const ks_hash_t *key, ks_artifact_t **out);
/* Inserts or replaces the artifact: key, sum, meta and bytes in one
 * transaction. */
int ks_store_put(ks_store_t *s, const ks_artifact_t *a);
/* Inserts the artifact unless its key has a row, which is left as it is:
 * *added is 1 when this call wrote the row, else 0.  The row is looked
 * for inside the write transaction (BEGIN IMMEDIATE, under the writer
 * lock), so of any number of adds of one key, from any threads, exactly
 * one reports it added. */
int ks_store_add(ks_store_t *s, const ks_artifact_t *a, int *added);
/* Records a hit in the pending set; written to disk in batches
 * (ks_store_flush), not per hit.  Never waits on the writer: returns 1
 * when the set is full and should be flushed, else 0; a touch that finds
 * the set full is dropped and counted (ks_store_touches_dropped). */
int ks_store_touch(ks_store_t *s, const ks_hash_t *key);
/* ks_store_touch of N keys under one lock; 1 when the set is full. */
int ks_store_touch_many(ks_store_t *s, const ks_hash_t *keys, size_t n);
/* Distinct keys the pending set can still take (only a flush makes more
 * room, so a caller that touches no more than this loses none). */
size_t ks_store_touch_room(ks_store_t *s);
uint64_t ks_store_touches_dropped(ks_store_t *s);
int ks_store_flush(ks_store_t *s);
int ks_store_remove(ks_store_t *s, const ks_hash_t *key);
/*
 * Deletes in one transaction the rows of KEYS (NKEYS > 0), or else every
 * row whose meta MATCH accepts (every row when MATCH is NULL).  *removed
 * (caller frees) gets the NREMOVED keys whose rows were deleted.  MATCH
 * runs on the calling thread under the writer lock.
 */
int ks_store_remove_if(ks_store_t *s, const ks_hash_t *keys, size_t nkeys,
    int (*match)(void *ctx, const char *meta), void *ctx,
    ks_hash_t **removed, size_t *nremoved);
int ks_store_stats(ks_store_t *s, ks_store_stats_t *out);

/* Records COUNT requests that missed for SPEC (a canonical get-spec JSON
 * text): inserted with first = last = now, or last and count updated.
 * With DEPLOYMENT (else NULL) they are that deployment's late compiles
 * (schema 6), kept apart from the misses and removed with the deployment
 * or when its specs change. */
int ks_store_record_miss(ks_store_t *s, const char *deployment,
    const char *spec, uint64_t count);
/* Calls CB for every recorded miss (DEPLOYMENT NULL) or late compile of
 * DEPLOYMENT, oldest first; CB returns non-zero to stop.  CB runs under
 * the reader lock and must not call the store. */
int ks_store_misses(ks_store_t *s, const char *deployment,
    int (*cb)(void *ctx, const char *spec, int64_t first, int64_t last,
    uint64_t count), void *ctx);
/* 1 when deployment NAME pins KEY, 0 when not, or a negative ks error
 * (reader). */
int ks_store_pinned(ks_store_t *s, const char *name, const ks_hash_t *key);
/*
 * What the pins of deployment NAME would hold if its keys were KEYS (N):
 * into *bytes, the stored size of every row pinned by another deployment
 * and of each of KEYS that is stored, plus for each one that is not an
 * estimate: the mean size of the stored rows of its kernel and backend
 * (KERNELS[i], BACKENDS[i]), else of its backend, else 0; *estimated
 * counts the keys estimated.  Reader.
 */
int ks_store_pin_bytes(ks_store_t *s, const char *name, const ks_hash_t *keys,
    const char *const *kernels, const char *const *backends, size_t n,
    uint64_t *bytes, size_t *estimated);

/*
 * Notes on the calls above, added with the implementation:
 * - ks_store_open fails with KS_E_STORE and a message naming PATH for a
 *   file that cannot be opened, is read-only, or has a schema newer than
 *   KS_STORE_SCHEMA_VERSION; KS_E_CORRUPT for one that is not a database
 *   or is damaged; KS_E_DENIED by the trust checks above; KS_E_IO when a
 *   parent directory cannot be created.
 * - ks_store_get does not count as a use: the caller touches on every hit
 *   (hot tier or store).  A put counts as a use.
 * - ks_store_put evicts inside the put's transaction (after writing the
 *   pending touches), so the store on disk is within its budget after each
 *   commit, except for one artifact alone over the budget, which is kept.
 *   The artifact is only read during the call.
 * - the server calls ks_store_flush on a timer, and when ks_store_touch
 *   reports a full set, through the writer thread.
 * - ks_store_remove returns KS_E_NOT_FOUND when KEY has no row.
 * - ks_store_close must not race with other calls on S.
 */

/* Rows found corrupt and removed over the store's life (persisted), where
 * ks_store_stats_t.corrupt counts those since open. */
uint64_t ks_store_corrupt_total(ks_store_t *s);

/*
 * Runs PRAGMA integrity_check through the reader.  KS_OK when sqlite says
 * "ok"; KS_E_CORRUPT with sqlite's findings (or its error) in ERR when the
 * file is damaged; KS_E_STORE for other failures.  Reads the whole file
 * and blocks ks_store_get meanwhile: for startup checks, ops and tests,
 * not for the request path.
 */
int ks_store_integrity_check(ks_store_t *s, char *err, size_t errlen);

/*
 * Calls CB for every row, in key order, with its metadata (valid only
 * during the call), size and last_used stamp (Unix milliseconds, made
 * strictly increasing per store).  CB runs under the reader lock and must
 * not call into S.  Returns 0 after the last row, CB's value when CB
 * returns nonzero (which stops the walk), or a negative ks error.  No
 * checksum is verified here; ks_store_get verifies.
 */
int ks_store_list(ks_store_t *s, int (*cb)(void *ctx, const ks_hash_t *key,
    const char *meta, uint64_t size, int64_t last_used), void *ctx);

/*
 * An entry as its row's columns say (schema 4): what the entry is, read
 * from its meta by the put (and, for rows older than the columns, by the
 * v3 -> v4 migration), so that a listing parses no JSON.  A field the meta
 * lacks is "".  shape is the constant dims of the meta's "guard" as
 * NAME=VALUE, in its order, then the dynamic ones as NAME=dyn, joined by
 * commas: "M=1,N=4096,K=4096", "N=32,K=32,M=dyn".  The strings are valid
 * only during the callback.
 */
typedef struct {
	ks_hash_t key;
	const char *kernel, *variant, *backend, *target, *dtype, *mode;
	const char *format, *shape, *compiler;
	uint64_t size;
	int64_t created;        /* Unix milliseconds of the put */
	int64_t last_used;      /* the use stamp, as ks_store_list's */
} ks_store_entry_t;

/* The entry that a row of KEY, META and SIZE bytes would be, its columns
 * read from META as a put reads them, passed to CB (the strings live
 * during the call; created and last_used are 0).  CB's value, or
 * KS_E_NOMEM. */
int ks_store_entry_of(const ks_hash_t *key, const char *meta,
    size_t meta_len, uint64_t size,
    int (*cb)(void *ctx, const ks_store_entry_t *e), void *ctx);

/*
 * Deployments (schema 5): a NAME, its get-specs (SPECS, a JSON array) and
 * the keys they pin: budget eviction never removes a pinned row (an
 * explicit remove still does).  ks_store_deploy_set replaces NAME's specs
 * and pins, in one transaction (writer thread); ks_store_deploy_remove
 * drops both, KS_E_NOT_FOUND when NAME is none.  ks_store_deployments
 * calls CB for NAME, or every deployment when NAME is NULL, in name order,
 * with its pin count (reader; CB must not call into S; its nonzero return
 * stops the walk and is returned).
 */
int ks_store_deploy_set(ks_store_t *s, const char *name, const char *specs,
    const ks_hash_t *keys, size_t n);
int ks_store_deploy_remove(ks_store_t *s, const char *name);
int ks_store_deployments(ks_store_t *s, const char *name,
    int (*cb)(void *ctx, const char *name, const char *specs,
    int64_t created, uint64_t pins), void *ctx);

/*
 * Compiler identities and canaries (schema 8).  ks_store_identities calls
 * CB with every distinct compiler identity of BACKEND's entries (reader;
 * CB must not call into S; its nonzero return stops the walk and is
 * returned).  A canary verdict is one row per (backend, identity,
 * kernel): ks_store_canary_put inserts or replaces it (writer thread; AT
 * 0 is now), ks_store_canaries calls CB for those of BACKEND and IDENTITY
 * in kernel order (reader, as above; the strings live during the call).
 */
typedef struct {
	const char *backend, *identity, *kernel;
	const char *result;             /* "passed" or "failed" */
	int64_t at;                     /* Unix milliseconds */
	double ms;
	const char *detail;
} ks_store_canary_t;

int ks_store_identities(ks_store_t *s, const char *backend,
    int (*cb)(void *ctx, const char *identity), void *ctx);
int ks_store_canary_put(ks_store_t *s, const ks_store_canary_t *c);
int ks_store_canaries(ks_store_t *s, const char *backend,
    const char *identity, int (*cb)(void *ctx, const ks_store_canary_t *c),
    void *ctx);

/*
 * The probe the daemon last saw (schema 9): the probe's JSON (exec.h),
 * its witness and the kernels' fingerprints, as the daemon wrote them.
 * ks_store_probe_get (reader) fills OUT with copies (ks_store_probe_free),
 * or returns KS_E_NOT_FOUND; ks_store_probe_put (writer thread) replaces
 * it, or with P NULL removes it.
 */
typedef struct {
	char *probe, *witness, *fingerprints;
} ks_store_probe_t;

int ks_store_probe_get(ks_store_t *s, ks_store_probe_t *out);
void ks_store_probe_free(ks_store_probe_t *p);
int ks_store_probe_put(ks_store_t *s, const ks_store_probe_t *p);

/* Exact matches on columns; NULL or "" matches every row. */
typedef struct {
	const char *kernel, *backend, *target;
} ks_store_filter_t;

/*
 * Calls CB for the entries F matches (every one when F is NULL), in key
 * order, from the OFFSET-th match on, at most LIMIT of them (0: no limit),
 * and sets *TOTAL to the number of matches; one statement through the
 * reader, so the page and the total are of the same moment.  CB runs under
 * the reader lock and must not call into S; a nonzero return stops the
 * walk and is returned (*TOTAL is then short).  0 after the last row, or
 * a negative ks error.
 */
int ks_store_entries(ks_store_t *s, const ks_store_filter_t *f,
    uint64_t offset, uint64_t limit,
    int (*cb)(void *ctx, const ks_store_entry_t *e), void *ctx,
    uint64_t *total);

/* Up to MAX keys of stored rows whose hex form starts with PREFIX (1 to 64
 * lower-case hex digits), in key order, into KEYS: a range of the key
 * index, through the reader.  Returns how many, or a negative ks error
 * (KS_E_INVAL for a PREFIX that is not hex). */
int ks_store_keys_with_prefix(ks_store_t *s, const char *prefix,
    ks_hash_t *keys, int max);

/*
 * The key audit (schema 7; docs/operations.md): a recompile of a stored
 * entry whose bytes are compared with the row's.  A candidate is a row
 * with when it was last audited (0: never) and its latest audit event
 * since the time asked for (0: none).
 */
typedef struct {
	ks_store_entry_t e;
	int64_t audited;        /* Unix ms of its last audit, or 0 */
	int64_t alarmed;        /* Unix ms of its latest event, or 0 */
} ks_store_audit_row_t;

/* An audit's outcome.  differs NULL: the compile matched the row; else
 * what differed ("bytes", "entry", ...), and the row, when its sum is
 * still stored_sum, is quarantined: copied into audit_events with
 * auditor and audit_sum, and deleted.  Events read back (ks_store_audit_
 * events) fill e with the quarantined row's columns. */
typedef struct {
	ks_hash_t key;
	ks_hash_t stored_sum, audit_sum;
	const char *auditor;    /* who recompiled: worker and compiler */
	const char *differs;
	int failed;             /* the recompile failed: recorded as such */
	int64_t at;             /* Unix ms */
	ks_store_entry_t e;     /* read back only; e.size is the bytes kept */
} ks_store_audit_event_t;

/* Calls CB for the rows of KERNEL (every row when NULL or ""), least
 * recently audited first, at most LIMIT (0: all), with their latest event
 * at or after SINCE.  Reader; CB must not call into S; its nonzero return
 * stops the walk and is returned. */
int ks_store_audit_candidates(ks_store_t *s, const char *kernel,
    int64_t since, uint64_t limit,
    int (*cb)(void *ctx, const ks_store_audit_row_t *r), void *ctx);
/* Writer: records EV's audit of its key, and for a mismatch the event
 * and the quarantine, in one transaction.  KS_E_NOT_FOUND for a mismatch
 * whose row is gone or was replaced meanwhile (nothing quarantined, no
 * event stored). */
int ks_store_audit_record(ks_store_t *s, const ks_store_audit_event_t *ev);
/* Calls CB for the stored events, newest first, at most LIMIT (0: all);
 * reader, as above. */
int ks_store_audit_events(ks_store_t *s, uint64_t limit,
    int (*cb)(void *ctx, const ks_store_audit_event_t *ev), void *ctx);

/*
 * ---- the writer thread ----
 *
 * One thread owns every write: a caller posts an operation and returns at
 * once, without taking the writer lock, so a thread that must not stall
 * (the daemon's loop) never waits behind a write.  Operations run one at
 * a time in the order posted.  Posting fails only on OOM (KS_E_NOMEM, the
 * operation is not run, a completion is not called).
 */
typedef struct ks_store_writer ks_store_writer_t;

/* Completion of a posted removal, on the writer thread: RC and the N keys
 * whose rows were deleted (valid during the call). */
typedef void (*ks_writer_removed_fn)(void *ctx, int rc,
    const ks_hash_t *keys, size_t n);

/* Starts the writer of S; NULL on failure.  S must outlive it. */
ks_store_writer_t *ks_writer_start(ks_store_t *s);
/* Runs everything posted so far, then ends the thread and frees W. */
void ks_writer_stop(ks_store_writer_t *w);
/* Blocks until everything posted before the call has run. */
void ks_writer_sync(ks_store_writer_t *w);
/* ks_store_put of A (referenced until written). */
int ks_writer_put(ks_store_writer_t *w, ks_artifact_t *a);
/* ks_store_add of A (referenced until written); *RESULT gets 1 (added),
 * 0 (its key had a row) or ks_store_add's error.  RESULT must live until
 * the writer is past the add: a barrier posted after it says when. */
int ks_writer_add(ks_store_writer_t *w, ks_artifact_t *a, int *result);
/* ks_store_flush; a flush already waiting makes this a no-op. */
int ks_writer_flush(ks_store_writer_t *w);
int ks_writer_record_miss(ks_store_writer_t *w, const char *deployment,
    const char *spec, uint64_t count);
int ks_writer_quarantine(ks_store_writer_t *w, const ks_hash_t *key);
/* ks_store_remove_if (KEYS are copied; MATCH runs on the writer thread
 * with MCTX, which must live until DONE), then DONE. */
int ks_writer_remove(ks_store_writer_t *w, const ks_hash_t *keys,
    size_t nkeys, int (*match)(void *ctx, const char *meta), void *mctx,
    ks_writer_removed_fn done, void *ctx);
/* ks_store_deploy_set of NAME (SPECS, KEYS), or ks_store_deploy_remove of
 * it when SPECS is NULL, then DONE(CTX, rc) on the writer thread. */
int ks_writer_deploy(ks_store_writer_t *w, const char *name,
    const char *specs, const ks_hash_t *keys, size_t nkeys,
    void (*done)(void *ctx, int rc), void *ctx);
/* ks_store_canary_put of a copy of C. */
int ks_writer_canary(ks_store_writer_t *w, const ks_store_canary_t *c);
/* ks_store_probe_put on the writer thread (P is copied; NULL removes the
 * saved probe). */
int ks_writer_probe(ks_store_writer_t *w, const ks_store_probe_t *p);
/* Calls REACHED(CTX) on the writer thread once everything posted before
 * has run: a reader that waits for it sees those writes. */
int ks_writer_barrier(ks_store_writer_t *w, void (*reached)(void *ctx),
    void *ctx);
/* ks_store_reopen, then DONE(CTX, rc, message) on the writer thread. */
int ks_writer_reopen(ks_store_writer_t *w, void (*done)(void *ctx, int rc,
    const char *err), void *ctx);
/* ks_store_audit_record of EV (its strings are copied), then DONE(CTX,
 * rc) on the writer thread when DONE is not NULL. */
int ks_writer_audit(ks_store_writer_t *w, const ks_store_audit_event_t *ev,
    void (*done)(void *ctx, int rc), void *ctx);
/* Operations posted and not finished. */
uint64_t ks_writer_backlog(ks_store_writer_t *w);
/* Puts that failed (the artifact stayed in memory only). */
uint64_t ks_writer_failed_puts(ks_store_writer_t *w);

#endif
