/*
 * Private to server/: known-answer canaries (canary.c, docs/operations.md
 * "Canaries").  When a backend's compiler identity is not the one that
 * built the store's entries of that backend (an upgrade), every kernel's
 * canary (exec.h, ks_canary_run) runs in a worker before anything of that
 * kernel is compiled under the new identity; a kernel whose canary fails
 * is disabled on that backend: its gets and warm items answer E_CANARY.
 *
 * States of one (backend, kernel), under the backend's current identity:
 *   NONE     no canary asked for (no upgrade, or skipped);
 *   PENDING  its job waits for a worker (ahead of every flight); gets and
 *            warm items that would compile it wait for it (deferred);
 *   RUNNING  a worker runs it;
 *   PASSED   every run matched the reference: deferred requests join
 *            their flights;
 *   FAILED   a run differed (or the canary could not run): the kernel is
 *            disabled, deferred requests get E_CANARY.
 * PASSED and FAILED go back to PENDING when `kspec canary` runs it again;
 * a disabled kernel stays disabled until a canary passes.  Verdicts are
 * kept in the store (schema 8), so a restart under the same identity
 * neither runs a passed canary again nor forgets a failed one.  Only the
 * loop thread touches any of it.
 */
#ifndef KS_SERVER_CANARY_H
#define KS_SERVER_CANARY_H

#include "flight.h"
#include "keys.h"
#include "pool.h"

enum { KS_CANARY_NONE, KS_CANARY_PENDING, KS_CANARY_RUNNING,
    KS_CANARY_PASSED, KS_CANARY_FAILED };

/* What the start found for a backend. */
enum { KS_CANARY_BE_CURRENT, KS_CANARY_BE_UPGRADE, KS_CANARY_BE_SKIPPED };

typedef struct ks_canary_wait ks_canary_wait_t;
typedef struct ks_canary_op ks_canary_op_t;

typedef struct {
	int state;
	int disabled;            /* its last verdict failed */
	double ms;               /* of its last run */
	int64_t at;              /* Unix ms of its last verdict */
	char detail[512];        /* its summary, or the difference */
	ks_pool_job_t pj;        /* PENDING, RUNNING */
	ks_canary_wait_t *waiting;   /* deferred gets and warm items */
	void *srv;               /* the daemon, for the job's end */
	int bi, ki;              /* backend (ks_backends order), kernel */
} ks_canary_t;

typedef struct {
	const ks_backend_t *backend;
	int state;               /* KS_CANARY_BE_* */
	char reason[256];        /* skipped: why */
	const char *identity;    /* of "auto" (the identity cache's) */
	const char *target;      /* auto's resolved target */
	uint64_t start_ns;       /* the canaries of the start began */
	double start_ms;         /* and took, once the last has ended */
	int start_left;          /* canaries of the start not yet ended */
	uint64_t passed, failed; /* verdicts since the daemon started */
	ks_canary_t kernels[KS_KEYS_MAX_KERNELS];
} ks_canary_backend_t;

typedef struct {
	ks_canary_backend_t b[KS_KEYS_MAX_BACKENDS];
	int nb, nk;
	int ndisabled;           /* kernels disabled on some backend */
	int npending;            /* PENDING or RUNNING */
	ks_canary_op_t *ops;     /* canary requests waiting for verdicts */
} ks_canaries_t;

struct ks_srv;

/* After the probe: which backends changed identity, what the store
 * remembers of their canaries, and the canaries to run. */
void ks_canary_start(struct ks_srv *srv);
/* Forgets what ks_canary_start found, before it runs again for another
 * probe; only while the saved probe's keys are in use, when no canary has
 * run and nothing waits for one (their dispatch waits for this start's
 * probe). */
void ks_canary_forget(struct ks_srv *srv);
/* The flights' first hook: hands pending canaries to idle workers, once
 * this start's probe is in. */
void ks_canary_dispatch(struct ks_srv *srv);
/* Shutdown: deferred requests and canary requests of canaries not
 * started end with E_SHUTTING_DOWN. */
void ks_canary_stop(struct ks_srv *srv);

/* KS_E_CANARY with a message naming kernel, backend and identity when
 * G's kernel is disabled on its backend; else KS_OK.  Only called when
 * some kernel is disabled (srv->canaries.ndisabled), off the hit path. */
int ks_canary_check(struct ks_srv *srv, const ks_get_t *g, char *err,
    size_t errlen);
/* Whether an entry of KERNEL on BACKEND built by the backend's current
 * compiler may be stored from outside (an import): KS_E_CANARY with a
 * message while its canary is pending or has failed, else KS_OK. */
int ks_canary_admits(struct ks_srv *srv, const char *backend,
    const char *kernel, char *err, size_t errlen);
/* A get or warm item that missed: when G's canary is pending, W waits
 * for it (1; its done is called later, from the flight it then joins or
 * with the canary's error); else 0. */
int ks_canary_defer(struct ks_srv *srv, const ks_get_t *g, int prio,
    ks_waiter_t *w);
/* Takes W off the canary it waits for: KS_OK, or KS_E_NOT_FOUND when it
 * waits for none (cancel). */
int ks_canary_leave(struct ks_srv *srv, ks_waiter_t *w);

/* Appends the canaries' state as a JSON object (stats, the canary op):
 * of BACKEND and KERNEL only when they are not "". */
void ks_canary_json(struct ks_srv *srv, ks_buf_t *out, const char *backend,
    const char *kernel);
/* Appends the Prometheus metrics of the canaries. */
void ks_canary_metrics(struct ks_srv *srv, ks_buf_t *out);

/* Runs the canaries of BACKEND and KERNEL ("" for all) now, on every
 * backend that can run them: calls DONE(CTX) once every one has ended.
 * The number of canaries started (0: DONE is not called). */
int ks_canary_request(struct ks_srv *srv, const char *backend,
    const char *kernel, void (*done)(void *ctx), void *ctx);

#endif
