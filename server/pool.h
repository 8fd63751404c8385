/*
 * Private to server/: the compile executor, a pool of worker processes
 * (exec.h's worker, kspecd's own binary re-executed).  It runs at most one
 * job per worker at a time; the flight layer decides which job goes next.
 *
 * Worker states:
 *   STARTING  spawned, not yet ready (its ready message names its channel
 *             version, code generation and kernel fingerprints, which
 *             must be ours);
 *   IDLE      ready for a job;
 *   CHECKING  pinged before it is given work: back to IDLE (and given
 *             the work) when it answers, killed and counted as
 *             unresponsive when it does not within PING_DEADLINE_MS
 *             (pool.c);
 *   BUSY      running one job, under the compile deadline;
 *   RETIRING  done with its last job (recycled after KS_WORKER_JOBS jobs
 *             or above the RSS limit), found unresponsive, or the daemon
 *             is stopping: its channel is closed and it exits (or is
 *             killed); a replacement is started at once;
 *   DEAD      its process has ended; freed once its handles are closed.
 * A worker that dies while BUSY ends its job: a timeout is
 * E_COMPILE_TIMEOUT, a death at the memory limit E_COMPILE_OOM, any other
 * death is retried once on another worker and then E_COMPILE_CRASHED.  A
 * replacement is started for every worker that ends, after a growing
 * pause when workers keep failing to start.  pool.c asserts each state's
 * invariants at its transitions (worker_state_ok, pool_state_ok).
 *
 * A job is sent only to a worker that has just answered: the one whose
 * result (or ready message, or pong) the loop is handling, or else, while
 * the pool holds the job in its queue with the retries, the first idle
 * worker to answer a ping.  A stopped or hung idle worker therefore costs
 * a job at most PING_DEADLINE_MS (and, when no other worker answers, a
 * replacement's start), never the compile deadline.
 *
 * The reserve.  The pool runs OPTS.workers workers plus KS_POOL_RESERVE
 * more, and counts jobs in two slots: at most OPTS.workers ordinary jobs
 * run at once (ks_pool_idle), and the reserve's KS_POOL_RESERVE jobs only
 * when the flight layer says so (ks_pool_job_t.reserve; it gives the
 * reserve only a get of a client that has nothing else compiling).  So a
 * client's backlog never holds every worker: another client's cold get
 * starts at once, or after at most one compile, on the reserve, whatever
 * the backlog (docs/architecture.md, "Scheduling").
 */
#ifndef KS_SERVER_POOL_H
#define KS_SERVER_POOL_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "../exec/exec.h"

typedef struct ks_pool ks_pool_t;
typedef struct ks_pool_job ks_pool_job_t;
typedef struct ks_worker ks_worker_t;

/* A job handed to the pool, embedded in its flight. */
struct ks_pool_job {
	ks_job_t job;                       /* in */
	ks_hash_t key;                      /* in: for stats and logs */
	uint64_t timeout_ms;                /* in: its deadline when the pool
	                                       has one (0: the pool's) */
	int reserve;                        /* in: runs in the reserve slot */
	/* Called once on the loop thread when the job ended, with err and
	 * out (KS_OK) or errmsg (an error) filled. */
	void (*done)(ks_pool_job_t *pj);
	int err;
	char errmsg[512];
	ks_job_out_t out;
	double compile_ms;                  /* the compile itself */
	uint64_t started_ns;                /* when a worker took it */
	pid_t pid;                          /* the worker that ran it last */
	/* The pool's. */
	int attempts;                       /* workers that died running it */
	ks_pool_job_t *next;                /* the pool's queue */
};

enum { WORKER_STARTING, WORKER_IDLE, WORKER_CHECKING, WORKER_BUSY,
    WORKER_RETIRING, WORKER_DEAD };

/* Workers beyond --workers, for the reserve slot (above). */
#define KS_POOL_RESERVE 1

struct ks_worker {
	ks_pool_t *pool;
	pid_t pid;
	int state;
	int pidfd;
	uv_poll_t exitw;                    /* readable once the process ended */
	uv_pipe_t chan;                     /* the socketpair */
	uv_timer_t deadline;                /* start, ping or compile
	                                       deadline */
	int open_handles;                   /* freed when it reaches 0 */
	int chan_open;
	ks_buf_t in;                        /* received bytes */
	ks_pool_job_t *job;                 /* BUSY */
	uint64_t seq;                       /* of the job, probe or ping sent */
	int probing;                        /* the probe was sent to it */
	int timed_out;                      /* killed by the deadline */
	const char *why;                    /* a reason it was killed */
	uint64_t jobs;                      /* jobs finished */
	uint64_t rss;                       /* bytes, as last reported */
	uint64_t started_ns;
	uint64_t job_ns;                    /* when the job was sent */
	ks_worker_t *next;                  /* pool->workers */
};

typedef struct {
	int workers;                        /* ordinary slots (processes, less
	                                       the reserve) */
	uint64_t timeout_ms;                /* per compile */
	uint64_t memory_bytes;              /* per worker (RLIMIT_DATA) */
	uint64_t recycle_jobs;              /* jobs before a worker retires */
	uint64_t recycle_rss;               /* RSS above which it retires */
	const char *exe;                    /* the binary to re-execute */
} ks_pool_opts_t;

struct ks_pool {
	uv_loop_t *loop;
	ks_pool_opts_t opts;
	int exe_fd;                         /* the daemon's binary, pinned */
	char exe[64];                       /* its /proc path */
	ks_worker_t *workers;               /* every live worker process */
	int nlive;                          /* not RETIRING or DEAD */
	/* Jobs taken and not on a worker: new ones waiting for a worker that
	 * answered, and retries. */
	ks_pool_job_t *queue_head, *queue_tail;
	int stopping;
	uv_timer_t respawn;                 /* the pause after start failures */
	uv_signal_t sigchld;                /* without pidfds only */
	int failing;                        /* start failures in a row */
	int paused;                         /* the pause has passed */
	uint64_t next_seq;
	ks_worker_t *heard;                 /* whose message is being handled */
	/* A worker became idle (the flight layer dispatches). */
	void (*on_idle)(ks_pool_t *p);
	/* The probe's outcome: RC, and on success the probe's JSON and its
	 * witness (a JSON object, exec.h), or NULL when it had none. */
	void (*on_probe)(ks_pool_t *p, int rc, const char *json,
	    const char *witness);
	int probe_wanted;
	void *owner;
	/* Counters for stats. */
	uint64_t started;                   /* worker processes spawned */
	uint64_t start_failures;
	uint64_t crashes;                   /* workers that died unasked */
	uint64_t timeouts;
	uint64_t ooms;
	uint64_t retries;
	uint64_t recycled;
	uint64_t unresponsive;              /* idle workers that missed a ping */
	uint64_t reserve_jobs;              /* jobs sent in the reserve slot */
};

/* Starts OPTS.workers processes. */
int ks_pool_init(ks_pool_t *p, uv_loop_t *loop, const ks_pool_opts_t *opts,
    void *owner);
/* Asks a worker (the first ready one) for the probe (exec.h); the answer
 * goes to on_probe. */
void ks_pool_probe(ks_pool_t *p);
/* No job starts any more; idle workers end now, busy ones after their
 * job.  The loop runs until every worker has ended. */
void ks_pool_stop(ks_pool_t *p);
void ks_pool_close(ks_pool_t *p);
/* How many more ordinary jobs the pool can take now. */
int ks_pool_idle(const ks_pool_t *p);
/* 1 when the pool can take a job in the reserve slot now. */
int ks_pool_reserve_idle(const ks_pool_t *p);
/* Takes PJ (in the slot PJ->reserve names): starts it on a worker that
 * answered recently, or holds it until one does.  KS_E_BUSY when its slot
 * is full; on any failure (a negative ks error) PJ's done is not
 * called. */
int ks_pool_submit(ks_pool_t *p, ks_pool_job_t *pj);
/* Calls FN for every worker process. */
void ks_pool_each(ks_pool_t *p, void (*fn)(void *ctx, const ks_worker_t *w),
    void *ctx);
const char *ks_worker_state_name(int state);

#endif
