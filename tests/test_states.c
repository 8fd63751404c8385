/*
 * The state machines' checkers (server/conn.c, flight.c, pool.c): each is
 * shown once to catch a planted wrong transition, which aborts the
 * process (each test runs in a child of its own).  The store writer's is
 * shown in test_store.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "../server/conn.h"
#include "../server/flight.h"
#include "../server/pool.h"

TestSuite(states, .timeout = 30);

/* A request answered twice: the second done ends no wait. */
Test(states, a_connection_done_twice_aborts, .signal = SIGABRT)
{
	static uv_loop_t loop;
	static ks_conns_t set;
	ks_conn_limits_t lim = { .max = 1, .max_per_user = 1 };
	ks_conn_t *c = calloc(1, sizeof *c);

	cr_assert_not_null(c);
	uv_loop_init(&loop);
	ks_conns_init(&set, &loop, &lim, NULL, NULL);
	c->set = &set;
	c->refs = 1;                    /* its handle's */
	c->state = CONN_OPEN;
	ks_conn_wait(c);
	ks_conn_done(c);
	ks_conn_done(c);
}

static void finish_nothing(ks_flights_t *set, ks_flight_t *f)
{
	(void)set;
	(void)f;
}

static void waiter_done(ks_waiter_t *w, ks_flight_t *f)
{
	(void)w;
	(void)f;
}

static int waiter_wanted(const ks_waiter_t *w)
{
	(void)w;
	return 1;
}

/* A queued flight ended as if its remote lookup had failed: it would be
 * freed while its fair queue still holds it. */
Test(states, a_queued_flight_given_a_remote_outcome_aborts,
    .signal = SIGABRT)
{
	static ks_flights_t set;
	static ks_get_t g;
	static ks_waiter_t w = { .done = waiter_done, .wanted = waiter_wanted,
	    .client = 1, .uid = 1000, .is_get = 1 };
	char err[256];

	ks_flights_init(&set, NULL, NULL, NULL);
	set.finish = finish_nothing;
	ks_hash("planted", 7, &g.key);
	cr_assert_eq(ks_flight_join(&set, &g, KS_PRIO_GET, &w, err,
	    sizeof err), KS_OK, "%s", err);
	cr_assert_eq(w.flight->state, FLIGHT_QUEUED);
	ks_flight_remote_fail(&set, w.flight, KS_E_COMPILE, "planted");
}

/* A worker made BUSY without its job (a send_job that forgot to keep
 * it): the next job the pool takes finds it. */
Test(states, a_busy_worker_without_its_job_aborts, .signal = SIGABRT)
{
	static ks_pool_t p;
	static ks_worker_t w;
	static ks_pool_job_t pj;

	p.opts.workers = 1;
	p.workers = &w;
	p.nlive = 1;
	w.pool = &p;
	w.state = WORKER_BUSY;
	ks_pool_submit(&p, &pj);
}
