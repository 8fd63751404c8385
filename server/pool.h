/*
 * Private to server/: the compile executor.  It takes jobs (exec.h) and
 * runs at most one per worker at a time; the flight layer decides which
 * job goes next.
 */
#ifndef KS_SERVER_POOL_H
#define KS_SERVER_POOL_H

#include <stdint.h>
#include <uv.h>

#include "../exec/exec.h"

typedef struct ks_pool ks_pool_t;
typedef struct ks_pool_job ks_pool_job_t;

/* A job handed to the pool, embedded in its flight. */
struct ks_pool_job {
	ks_job_t job;                       /* in */
	/* Called once on the loop thread when the job ended, with err and
	 * out (KS_OK) or errmsg (an error) filled. */
	void (*done)(ks_pool_job_t *pj);
	int err;
	char errmsg[512];
	ks_job_out_t out;
	uint64_t started_ns;                /* when a worker took it */
	int running;                        /* atomic: a worker runs it */
	/* The pool's. */
	uv_work_t work;
	ks_pool_t *pool;
};

struct ks_pool {
	uv_loop_t *loop;
	int workers;
	int busy;
};

int ks_pool_init(ks_pool_t *p, uv_loop_t *loop, int workers);
void ks_pool_close(ks_pool_t *p);
/* How many more jobs the pool can start now. */
int ks_pool_idle(const ks_pool_t *p);
/* Starts PJ on a free worker.  On failure (a negative ks error) PJ's done
 * is not called. */
int ks_pool_submit(ks_pool_t *p, ks_pool_job_t *pj);

#endif
