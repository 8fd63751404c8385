/*
 * The compile executor: libuv's thread pool, one job per thread at a time
 * (at most `workers` submitted at once, so a job starts as soon as it is
 * submitted).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

int ks_pool_init(ks_pool_t *p, uv_loop_t *loop, int workers)
{
	char n[16];

	memset(p, 0, sizeof *p);
	p->loop = loop;
	p->workers = workers;
	/* libuv reads the pool size once, at the first queued work. */
	snprintf(n, sizeof n, "%d", workers);
	setenv("UV_THREADPOOL_SIZE", n, 1);
	return KS_OK;
}

void ks_pool_close(ks_pool_t *p)
{
	(void)p;
}

int ks_pool_idle(const ks_pool_t *p)
{
	return p->workers - p->busy;
}

static void work(uv_work_t *w)
{
	ks_pool_job_t *pj = w->data;

	pj->started_ns = ks_now_ns();
	__atomic_store_n(&pj->running, 1, __ATOMIC_RELAXED);
	pj->errmsg[0] = '\0';
	pj->err = ks_job_run(&pj->job, &pj->out, pj->errmsg,
	    sizeof pj->errmsg);
}

static void after(uv_work_t *w, int status)
{
	ks_pool_job_t *pj = w->data;

	pj->pool->busy--;
	if (status == UV_ECANCELED) {
		pj->err = KS_E_SHUTTING_DOWN;
		snprintf(pj->errmsg, sizeof pj->errmsg, "daemon stopped before "
		    "this compile started");
	}
	pj->done(pj);
}

int ks_pool_submit(ks_pool_t *p, ks_pool_job_t *pj)
{
	int rc;

	if (p->busy >= p->workers)
		return KS_E_BUSY;
	pj->pool = p;
	pj->work.data = pj;
	pj->running = 0;
	memset(&pj->out, 0, sizeof pj->out);
	rc = uv_queue_work(p->loop, &pj->work, work, after);
	if (rc != 0)
		return KS_E_INTERNAL;
	p->busy++;
	return KS_OK;
}
