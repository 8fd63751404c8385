/*
 * Private to server/: flights (the single-flight table of compiles) and
 * their waiters.
 *
 * A flight is the compile of one key.  States:
 *   REMOTE   (with a remote tier) asking it for the key before anything
 *            is queued: concurrent requests join it and share the one
 *            lookup; a hit ends it (DONE) without a compile, a miss, an
 *            error or a timeout queues it (ks_flight_remote_done); after
 *            a miss it also waits here while another node holds the
 *            key's fleet lease (lease.c), and may end with that node's
 *            failure (ks_flight_remote_fail);
 *   QUEUED   in the fair queue of its priority (sched.h), owned by the
 *            client of the waiter that started it; a get that joins a
 *            queued warm flight moves it to the get queue, in that get's
 *            client's turn;
 *   RUNNING  handed to the executor (pool.h);
 *   DONE     the finish hook has turned the job's outcome into an
 *            artifact or an error, every waiter's done callback has run,
 *            and the flight is freed.
 * A queued flight whose every waiter has gone is finished without a
 * compile when its turn comes (abandoned); one whose last waiter leaves
 * (ks_flight_leave: a cancelled warm item) is finished at once, also
 * abandoned.  Only the loop thread touches flights.  flight.c asserts
 * each state's invariants at its transitions (flight_state_ok).
 */
#ifndef KS_SERVER_FLIGHT_H
#define KS_SERVER_FLIGHT_H

#include <stdint.h>
#include <uthash.h>

#include "../store/store.h"
#include "keys.h"
#include "metrics.h"
#include "pool.h"
#include "sched.h"

typedef struct ks_flight ks_flight_t;
typedef struct ks_flights ks_flights_t;
typedef struct ks_waiter ks_waiter_t;

/* How a compile that ran ended, for metrics (ks_compile_result_names). */
enum {
	KS_CR_OK, KS_CR_FAILED, KS_CR_TIMEOUT, KS_CR_CRASHED, KS_CR_OOM,
	KS_CR_COUNT
};
extern const char *const ks_compile_result_names[KS_CR_COUNT];

/* Compile priorities: a waiting get before bulk warm. */
enum { KS_PRIO_GET, KS_PRIO_WARM, KS_PRIO_COUNT };
enum { FLIGHT_QUEUED, FLIGHT_RUNNING, FLIGHT_DONE, FLIGHT_REMOTE };

/*
 * A request waiting on a flight, embedded in the op's own record.  done
 * is called exactly once, when the flight ends (its artifact or error is
 * in F); the op frees its record there.  wanted says whether the reply
 * can still be delivered (the client is still connected).
 */
struct ks_waiter {
	void (*done)(ks_waiter_t *w, ks_flight_t *f);
	int (*wanted)(const ks_waiter_t *w);
	uint64_t client;         /* the connection, for fair scheduling */
	uint32_t uid;            /* its peer */
	int is_get;              /* a get (a miss to record), not a warm item */
	int joined;              /* 0 for the waiter that started the flight */
	ks_flight_t *flight;     /* set by ks_flight_join */
	ks_waiter_t *next;
};

struct ks_flight {
	ks_hash_t key;
	UT_hash_handle hh;
	ks_flights_t *set;
	uint32_t uid;            /* who started it: it counts against them */
	uint32_t turn_uid;       /* whose turn it is queued in, after REMOTE */
	uint64_t turn_client;
	int remote_hit;          /* its artifact came from the remote tier */
	void *lease;             /* its fleet lease, held (lease.c), or NULL */
	ks_get_t get;
	int prio;
	int state;
	ks_waiter_t *waiters;
	int nwaiters;
	uint64_t created_ns;
	ks_sched_item_t queued;  /* while QUEUED */
	ks_pool_job_t pj;        /* the job; its outcome once it ended */
	/* The outcome, set by the finish hook. */
	ks_artifact_t *artifact; /* referenced; NULL on error */
	int err;
	char errmsg[512];
};

/* How long a compile that crashed, timed out or ran out of memory is
 * answered from its negative entry instead of being run again. */
#define KS_NEGATIVE_TTL_MS 5000

/* Flights started per uid (KS_MAX_FLIGHTS_PER_USER). */
typedef struct ks_flight_user {
	uint32_t uid;
	int flights;
	UT_hash_handle hh;
} ks_flight_user_t;

typedef struct ks_negative {
	ks_hash_t key;
	UT_hash_handle hh;
	int err;
	char msg[512];
	uint64_t expires_ns;
	struct ks_negative *next;        /* expiry order */
} ks_negative_t;

struct ks_flights {
	ks_flight_t *table;      /* uthash by key */
	ks_negative_t *negative; /* uthash by key */
	ks_negative_t *negative_head, *negative_tail;
	ks_flight_user_t *users; /* uthash by uid */
	ks_sched_t queue[KS_PRIO_COUNT];
	ks_pool_t *pool;
	const ks_keys_t *keys;   /* fingerprints for the jobs */
	int stopping;            /* no compile starts any more */
	/* Turns F's job outcome (f->pj) into f->artifact, or f->err and
	 * f->errmsg, before the waiters are told.  Loop thread. */
	void (*finish)(ks_flights_t *set, ks_flight_t *f);
	/* Asked for every new flight before it is queued: nonzero when it
	 * looks F up in the remote tier (F stays REMOTE until
	 * ks_flight_remote_done, which it never calls from inside this
	 * call); 0 queues F at once.  NULL: no remote tier. */
	int (*remote)(ks_flights_t *set, ks_flight_t *f);
	/* Called first in every dispatch: jobs that go before every flight
	 * (the canaries).  NULL: none. */
	void (*first)(ks_flights_t *set);
	/* Called whenever a flight ended and none is left. */
	void (*idle)(ks_flights_t *set);
	void *owner;             /* the daemon */
	/* Counters for stats. */
	uint64_t compiles;       /* flights started */
	uint64_t joins;
	uint64_t failures;       /* compiles that failed */
	uint64_t abandoned;      /* flights nobody waited for any more */
	uint64_t negative_hits;  /* requests answered by a negative entry */
	uint64_t compile_ns;     /* time inside compiles */
	uint64_t queue_ns;       /* time flights waited for a worker */
	/* Compiles that ran, by backend (ks_backends() order). */
	ks_hist_t compile_hist[KS_KEYS_MAX_BACKENDS];
	uint64_t compile_results[KS_KEYS_MAX_BACKENDS][KS_CR_COUNT];
};

void ks_flights_init(ks_flights_t *set, ks_pool_t *pool,
    const ks_keys_t *keys, void *owner);
void ks_flights_close(ks_flights_t *set);
unsigned ks_flights_count(const ks_flights_t *set);

/*
 * Adds W to the flight of G's key, or starts one at PRIO for it.  On KS_OK
 * W belongs to the flight until its done callback; W->joined tells which
 * happened.  Errors, with a message in ERR: the error of a negative entry
 * (E_COMPILE_CRASHED, _TIMEOUT, _OOM), KS_E_BUSY when KS_MAX_FLIGHTS
 * distinct compiles are in flight, or KS_MAX_FLIGHTS_PER_USER started by
 * W's uid (a flight joined by several users counts against the one who
 * started it), KS_E_NOMEM.  On error W is untouched
 * and done is not called.
 */
int ks_flight_join(ks_flights_t *set, const ks_get_t *g, int prio,
    ks_waiter_t *w, char *err, size_t errlen);
/*
 * Takes W, a waiter of a flight that is still queued, off it: KS_OK, and
 * W's done will not be called.  A flight left without waiters is taken
 * out of the queue and ended unrun (counted abandoned); one that others
 * wait on keeps its place.  A flight already running keeps W (KS_E_BUSY):
 * its compile finishes and W hears of it as usual; so does one asking the
 * remote tier (REMOTE).
 */
int ks_flight_leave(ks_flights_t *set, ks_waiter_t *w);
/*
 * The remote lookup of F (REMOTE) ended: with A (a reference it takes) F
 * ends now with A as its artifact (remote_hit; no compile is counted);
 * without, F is queued for its compile (at shutdown: ends with
 * E_SHUTTING_DOWN).
 */
void ks_flight_remote_done(ks_flights_t *set, ks_flight_t *f,
    ks_artifact_t *a);
/* The remote lookup of F (REMOTE) ended with another node's failure of
 * its compile: F ends with ERR and MSG, unrun. */
void ks_flight_remote_fail(ks_flights_t *set, ks_flight_t *f, int err,
    const char *msg);
/* Fills PJ's job (and key) with the compile of G, with what its key
 * promises (exec.h).  KS_E_INTERNAL for a G the keys do not know. */
int ks_flight_job_fill(const ks_keys_t *keys, const ks_get_t *g,
    ks_pool_job_t *pj);
/* Queued flights of every priority. */
static inline unsigned ks_flights_queued(const ks_flights_t *set)
{
	unsigned n = 0;
	int p;

	for (p = 0; p < KS_PRIO_COUNT; p++)
		n += set->queue[p].count;
	return n;
}
/* Hands queued flights to idle workers, gets first. */
void ks_flights_dispatch(ks_flights_t *set);
/* Shutdown: no compile starts from now on; every queued flight ends with
 * ERR and MSG.  Running ones finish. */
void ks_flights_stop(ks_flights_t *set, int err, const char *msg);

/* Calls FN for every flight, in no particular order. */
void ks_flights_each(ks_flights_t *set, void (*fn)(void *ctx,
    const ks_flight_t *f), void *ctx);

#endif
