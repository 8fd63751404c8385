/*
 * Private to server/: the one lookup of get, warm and explain: hot tier,
 * then store, then the flight of the key.
 */
#ifndef KS_SERVER_LOOKUP_H
#define KS_SERVER_LOOKUP_H

#include "srv.h"

/*
 * Looks G up in the hot tier, then the store.  On a hit (KS_OK) *out gets
 * a reference (caller unrefs) and *source is "memory" or "disk"; its use
 * is recorded (by the hot tier, which a disk hit enters); a get counts
 * its hit itself (a warm item's is not a get's).  A miss is
 * KS_E_NOT_FOUND; a stored row that fails its checksum is a miss too
 * (counted, not served, removed by the writer).  With PROBE nothing is
 * counted, touched or moved (explain).
 */
int ks_lookup_cached(ks_srv_t *srv, const ks_get_t *g, int probe,
    ks_artifact_t **out, const char **source);
/*
 * After a miss: joins or starts G's flight at PRIO for W (see
 * ks_flight_join), or, while the canary of G's kernel on its backend is
 * pending, has W wait for it first (canary.h).  Errors, with a message in ERR: KS_E_SHUTTING_DOWN,
 * a recent failure of the key (E_COMPILE_CRASHED, _TIMEOUT, _OOM),
 * KS_E_BUSY, KS_E_NOMEM; W's done is then not called.
 */
int ks_lookup_join(ks_srv_t *srv, const ks_get_t *g, int prio,
    ks_waiter_t *w, char *err, size_t errlen);
/* 1 when KEY is in the memory tier or the store (its key index), without
 * counting, touching or reading the row: what ready and deployments count
 * as cached. */
int ks_lookup_has(ks_srv_t *srv, const ks_hash_t *key);
/* Hands the uses the memory tier recorded to the store (in batches: a
 * hit costs the store nothing); every second and at shutdown. */
void ks_lookup_record_uses(ks_srv_t *srv);
/*
 * The flights' remote hook (ks_flights_t.remote; lease.c): with --remote, asks
 * Redis for F's signed entry; a value that verifies ends F as source
 * "remote" (kept in the hot tier and the store), anything else (no value,
 * a refused one, a timeout, no connection) sends F to its compile.
 */
int ks_lookup_remote(ks_flights_t *set, ks_flight_t *f);
/* Appends the reply fields of an artifact, stored with it (see store.h):
 * what the request G was, and what the job's outcome O says of the entry,
 * whose bytes have the checksum SUM. */
int ks_lookup_meta(ks_buf_t *m, const ks_get_t *g, const ks_job_out_t *o,
    const ks_hash_t *sum);
/* The source a waiter of a finished flight reports. */
const char *ks_lookup_source(const ks_waiter_t *w);
/* The flights' finish hook: builds the artifact and its reply metadata
 * from the job's outcome, puts it in the hot tier (before any reply) and
 * posts it to the store writer, publishes it to the remote tier (signed,
 * with --fleet-sign-key), and records the gets that missed.  An artifact
 * from the remote tier is kept the same way, not published again. */
void ks_lookup_finish(ks_flights_t *set, ks_flight_t *f);

#endif
