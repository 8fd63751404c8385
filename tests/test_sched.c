/*
 * The compile scheduler (server/sched.c): fair turns between clients and
 * between users.  The fairness checks are run once against a first-in
 * first-out queue too, which they must reject.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "../server/sched.h"

TestSuite(sched, .timeout = 30);

typedef struct {
	ks_sched_item_t it;          /* first */
	uint32_t uid;
	uint64_t client;
	int seq;
} job_t;

/* A queue under test: the real one, or a FIFO that ignores clients. */
typedef struct {
	ks_sched_t s;
	int fifo;
	job_t *fq[1024];
	int fhead, ftail;
} queue_t;

static void q_push(queue_t *q, job_t *j)
{
	if (q->fifo)
		q->fq[q->ftail++] = j;
	else
		cr_assert_eq(ks_sched_push(&q->s, &j->it, j->uid, j->client),
		    0);
}

static job_t *q_pop(queue_t *q)
{
	if (q->fifo)
		return q->fhead < q->ftail ? q->fq[q->fhead++] : NULL;
	return (job_t *)ks_sched_pop(&q->s);
}

static void q_done(queue_t *q, job_t *j)
{
	if (!q->fifo)
		ks_sched_finish(&q->s, &j->it);
}

static job_t *job(uint32_t uid, uint64_t client, int seq)
{
	job_t *j = calloc(1, sizeof *j);

	j->uid = uid;
	j->client = client;
	j->seq = seq;
	return j;
}

/*
 * One worker.  Client 1 queues 24 jobs; one of them runs; then client 2
 * asks for one.  Returns how many of client 1's jobs ran before client
 * 2's (a fair queue: the one already running, 1).
 */
static int light_after_heavy(queue_t *q)
{
	job_t *running, *j, *light = job(0, 2, 100);
	int i, before = 0;

	for (i = 0; i < 24; i++)
		q_push(q, job(0, 1, i));
	running = q_pop(q);
	q_push(q, light);
	q_done(q, running);
	free(running);
	before = 1;
	while ((j = q_pop(q))) {
		int is_light = j == light;

		q_done(q, j);
		free(j);
		if (is_light)
			break;
		before++;
	}
	while ((j = q_pop(q))) {
		q_done(q, j);
		free(j);
	}
	return before;
}

Test(sched, a_single_job_goes_next_after_the_running_one)
{
	queue_t q = { 0 };

	ks_sched_init(&q.s);
	cr_assert_eq(light_after_heavy(&q), 1);
	ks_sched_close(&q.s);
}

Test(sched, the_checker_rejects_a_fifo)
{
	queue_t q = { 0 };

	q.fifo = 1;
	cr_assert_eq(light_after_heavy(&q), 24, "the checker would pass a "
	    "first-in first-out queue");
}

/* Users alternate however many connections each has; within a user, its
 * connections alternate. */
Test(sched, users_take_turns_whatever_their_connection_count)
{
	queue_t q = { 0 };
	int i, turns[2] = { 0, 0 }, last = -1, alternations = 0;
	job_t *j;

	ks_sched_init(&q.s);
	/* User 1000 on 10 connections with 4 jobs each; user 1001 on one
	 * connection with 40. */
	for (i = 0; i < 40; i++) {
		q_push(&q, job(1000, 10 + (uint64_t)(i % 10), i));
		q_push(&q, job(1001, 99, i));
	}
	for (i = 0; i < 20; i++) {
		j = q_pop(&q);
		cr_assert(j);
		turns[j->uid - 1000]++;
		alternations += last >= 0 && (int)j->uid != last;
		last = (int)j->uid;
		q_done(&q, j);
		free(j);
	}
	cr_assert_eq(turns[0], 10);
	cr_assert_eq(turns[1], 10);
	cr_assert_eq(alternations, 19);
	while ((j = q_pop(&q))) {
		q_done(&q, j);
		free(j);
	}
	cr_assert_eq(q.s.count, 0);
	cr_assert_null(q.s.users, "bookkeeping left after the queue emptied");
	ks_sched_close(&q.s);
}

Test(sched, each_client_keeps_its_own_order)
{
	queue_t q = { 0 };
	int i, next[3] = { 0, 0, 0 };
	job_t *j;

	ks_sched_init(&q.s);
	for (i = 0; i < 30; i++)
		q_push(&q, job(0, (uint64_t)(i % 3), i / 3));
	while ((j = q_pop(&q))) {
		cr_assert_eq(j->seq, next[j->client]++, "client %d out of order",
		    (int)j->client);
		q_done(&q, j);
		free(j);
	}
	ks_sched_close(&q.s);
}

Test(sched, a_removed_job_is_never_popped)
{
	queue_t q = { 0 };
	job_t *a = job(0, 1, 0), *b = job(0, 1, 1), *j;

	ks_sched_init(&q.s);
	q_push(&q, a);
	q_push(&q, b);
	ks_sched_remove(&q.s, &a->it);
	j = q_pop(&q);
	cr_assert_eq(j, b);
	q_done(&q, j);
	cr_assert_null(q_pop(&q));
	cr_assert_null(q.s.users);
	free(a);
	free(b);
	ks_sched_close(&q.s);
}

/*
 * The reserve's pop (ks_sched_pop_lone, or POP when planted): clients 1
 * and 2 each queue two jobs, and one job of each runs.  Returns whether
 * the lone pop gives a job then (it should not: both clients have one
 * running), and a copy of the job it gives after client 1's job finished
 * in *AFTER (client 1's second job; the caller frees it), the jobs
 * themselves being freed here.
 */
static int lone_pop_of_busy_clients(ks_sched_item_t *(*pop)(ks_sched_t *),
    job_t **after)
{
	ks_sched_t s;
	job_t *jobs[4], *got, *first, *second, *next;
	int i;

	ks_sched_init(&s);
	for (i = 0; i < 4; i++) {
		jobs[i] = job(0, 1 + (uint64_t)(i / 2), i % 2);
		cr_assert_eq(ks_sched_push(&s, &jobs[i]->it, 0, jobs[i]->client),
		    0);
	}
	first = (job_t *)ks_sched_pop(&s);
	second = (job_t *)ks_sched_pop(&s);
	cr_assert_neq(first->client, second->client);
	got = (job_t *)pop(&s);
	if (!got) {
		ks_sched_finish(&s, &jobs[0]->it);
		next = (job_t *)pop(&s);
		if (next) {
			*after = malloc(sizeof **after);
			cr_assert_not_null(*after);
			memcpy(*after, next, sizeof **after);
		}
	}
	ks_sched_close(&s);
	for (i = 0; i < 4; i++)
		free(jobs[i]);
	return got != NULL;
}

Test(sched, the_lone_pop_takes_only_a_client_with_nothing_running)
{
	job_t *after = NULL;

	cr_assert_not(lone_pop_of_busy_clients(ks_sched_pop_lone, &after),
	    "a client with a job running took the reserve");
	cr_assert(after, "client 1 went lone and got nothing");
	cr_assert_eq(after->client, 1);
	cr_assert_eq(after->seq, 1);
	free(after);
}

Test(sched, the_lone_checker_rejects_a_plain_pop)
{
	job_t *after = NULL;

	cr_assert(lone_pop_of_busy_clients(ks_sched_pop, &after),
	    "the checker would pass a pop that ignores running jobs");
	free(after);
}
