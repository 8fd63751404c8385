/*
 * Private to server/: the key audit (audit.c, docs/operations.md).  A key
 * names every input of its compile, and code generation is deterministic,
 * so a stored entry compiled again must come out the same: the audit
 * recompiles stored entries on an idle worker and compares.  A mismatch is
 * an alarm: the entry is quarantined (out of the memory tier; its row moves
 * into the store's audit_events), logged and counted.
 *
 * Who runs it: a background sampler, one entry every --audit-interval
 * seconds (least recently audited first) within --audit-budget compile
 * seconds an hour, and the audit op (kspec audit) on demand.  One audit
 * compile runs at a time, only when no flight is queued and a worker is
 * idle (two when there are several, so one stays free for gets): a get
 * waits for at most one audit compile.  A key with an event in the last
 * KS_AUDIT_QUIET_MS is not audited again, and the sampler stops for the
 * hour after KS_AUDIT_MAX_ALARMS alarms, so a quarantine and recompile
 * cannot alarm in a loop.
 */
#ifndef KS_SERVER_AUDIT_H
#define KS_SERVER_AUDIT_H

#include <stdint.h>
#include <uv.h>

#include "../store/store.h"
#include "keys.h"
#include "pool.h"

/* A key with an event is left alone this long. */
#define KS_AUDIT_QUIET_MS (24ull * 3600 * 1000)
/* Alarms in an hour after which the background sampler waits for the
 * next hour. */
#define KS_AUDIT_MAX_ALARMS 10
/* Events a report lists, newest first. */
#define KS_AUDIT_REPORT_MAX 1000

/* How audits ended, for stats and metrics (ks_audit_result_names). */
enum { KS_AUDIT_MATCH, KS_AUDIT_MISMATCH, KS_AUDIT_FAILED, KS_AUDIT_COUNT };
extern const char *const ks_audit_result_names[KS_AUDIT_COUNT];

struct ks_audit_run;

typedef struct {
	uv_timer_t timer;        /* the sampler's interval */
	int timer_open;
	int due;                 /* the sampler's next entry is due */
	ks_pool_job_t pj;        /* the audit compile, one at a time */
	int running;
	ks_get_t get;            /* of the running compile */
	ks_artifact_t *stored;   /* the row it is compared with, referenced */
	struct ks_audit_run *run;     /* whose compile it is; NULL: sampler */
	struct ks_audit_run *runs, *runs_tail;  /* audit ops, in order */
	/* The sampler's hour: compile time spent and alarms raised. */
	uint64_t hour_ns;
	double hour_ms;
	int hour_alarms;
	/* Counters for stats. */
	uint64_t results[KS_AUDIT_COUNT];
	uint64_t skipped_stale;      /* not current: no request makes it */
	uint64_t skipped_unchecked;  /* its backend or target is not here */
	uint64_t skipped_quiet;      /* an event in the last day */
	uint64_t quarantined;
	double compile_ms;           /* of every audit compile */
} ks_audit_t;

struct ks_srv;

/* Starts the sampler (when --audit-interval is not 0). */
void ks_audit_start(struct ks_srv *srv);
/* Starts the next audit compile if one is wanted and the workers allow
 * it; called whenever a worker becomes idle and after the flights were
 * dispatched. */
void ks_audit_dispatch(struct ks_srv *srv);
/* Shutdown: the sampler stops, audit ops still waiting are answered
 * E_SHUTTING_DOWN; a running compile finishes and is dropped. */
void ks_audit_stop(struct ks_srv *srv);
/* Appends ,"audit":{...} of stats. */
void ks_audit_stats(struct ks_srv *srv, ks_buf_t *out);

/*
 * Compares a recompile with the stored artifact: STORED's bytes and reply
 * fields (its meta) against the recompile's checksum SUM and meta: the
 * fields a reply carries, variant, format, entry, guard, dynamic, params,
 * launch, and, when SAME_BYTES (the backend's bytes are deterministic),
 * artifact and bytes too; never compile_ms.  0 when they agree; else 1
 * with the names of what differs, comma-separated, in DIFFERS.
 */
int ks_audit_compare(const ks_artifact_t *stored, const ks_hash_t *sum,
    const char *meta, size_t meta_len, int same_bytes, char *differs,
    size_t len);

#endif
