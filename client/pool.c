/*
 * kspec_cpu_launch: the library's thread pool for cpu kernels.
 *
 * A launch splits groups [0, groups) into N contiguous chunks, chunk c =
 * [c*q + min(c, r), (c+1)*q + min(c+1, r)) with q = groups / N and
 * r = groups % N, and runs each chunk with one call of the entry.  Every
 * library kernel writes disjoint outputs per work-group and reads nothing
 * another group writes (docs/kernels.md), and a group computes its outputs
 * in the same order whichever thread runs it, so the result is bitwise
 * that of one call over [0, groups).
 *
 * The caller is one of the N threads: it queues its launch, wakes the
 * workers and then claims chunks of its own launch like any worker, so a
 * launch finishes even when every worker is busy with other launches (or
 * none could be started).  It returns once every chunk has run.
 *
 * Locking: one mutex, pool.lock, guards the queue, every launch's next and
 * done counters and nworkers.  Entries run without it.  Workers are
 * detached and live until the process exits; they block every signal.
 *
 * Fork: pthread_atfork takes pool.lock before fork and gives it back in
 * both processes; the child, which has no workers, also empties the queue
 * (its launches belong to the parent's threads) and sets nworkers to 0,
 * so that its first launch starts a new pool.
 */
#include "../include/kspec.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct launch {
	kspec_cpu_entry_t fn;
	void **params;
	uint64_t groups;
	unsigned nchunks;
	unsigned next;          /* the next chunk to claim */
	unsigned done;          /* chunks run to the end */
	pthread_cond_t finished;
	struct launch *qnext;   /* queued while next < nchunks */
} launch_t;

static struct {
	pthread_mutex_t lock;
	pthread_cond_t work;
	launch_t *head;
	int nworkers;
} pool = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0 };

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int default_threads = 1;

static void prepare(void)
{
	pthread_mutex_lock(&pool.lock);
}

static void parent(void)
{
	pthread_mutex_unlock(&pool.lock);
}

static void child(void)
{
	pool.head = NULL;
	pool.nworkers = 0;
	pthread_cond_init(&pool.work, NULL);
	pthread_mutex_unlock(&pool.lock);
}

/* KSPEC_THREADS when it is an integer in [1, KSPEC_MAX_THREADS], else the
 * CPUs this process may run on, at most KSPEC_MAX_THREADS. */
static void setup(void)
{
	const char *env = getenv("KSPEC_THREADS");
	cpu_set_t set;
	long n = 0;
	char *end;

	if (env && env[0]) {
		n = strtol(env, &end, 10);
		if (*end || n < 1 || n > KSPEC_MAX_THREADS)
			n = 0;
	}
	if (n == 0 && sched_getaffinity(0, sizeof set, &set) == 0)
		n = CPU_COUNT(&set);
	if (n <= 0)
		n = sysconf(_SC_NPROCESSORS_ONLN);
	if (n <= 0)
		n = 1;
	default_threads = n > KSPEC_MAX_THREADS ? KSPEC_MAX_THREADS : (int)n;
	pthread_atfork(prepare, parent, child);
}

int kspec_cpu_threads(void)
{
	pthread_once(&once, setup);
	return default_threads;
}

/* Claims L's next chunk (under pool.lock); dequeues L with its last. */
static unsigned claim(launch_t *l)
{
	unsigned c = l->next++;
	launch_t **p;

	if (l->next == l->nchunks)
		for (p = &pool.head; *p; p = &(*p)->qnext)
			if (*p == l) {
				*p = l->qnext;
				break;
			}
	return c;
}

/* Runs chunk C of L without pool.lock, then counts it (under the lock). */
static void run_chunk(launch_t *l, unsigned c)
{
	uint64_t q = l->groups / l->nchunks, r = l->groups % l->nchunks;
	uint64_t begin = c * q + (c < r ? c : r);
	uint64_t end = begin + q + (c < r ? 1 : 0);

	pthread_mutex_unlock(&pool.lock);
	if (begin < end)
		l->fn(l->params, begin, end);
	pthread_mutex_lock(&pool.lock);
	if (++l->done == l->nchunks)
		pthread_cond_signal(&l->finished);
}

static void *worker(void *arg)
{
	launch_t *l;

	(void)arg;
	pthread_mutex_lock(&pool.lock);
	for (;;) {
		while (!pool.head)
			pthread_cond_wait(&pool.work, &pool.lock);
		l = pool.head;
		run_chunk(l, claim(l));
	}
	return NULL;
}

/* Starts workers until there are N (under pool.lock); fewer when
 * pthread_create fails, which only makes launches use fewer threads. */
static void grow(int n)
{
	pthread_attr_t attr;
	sigset_t all, old;
	pthread_t t;

	if (pool.nworkers >= n || pthread_attr_init(&attr) != 0)
		return;
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	while (pool.nworkers < n &&
	    pthread_create(&t, &attr, worker, NULL) == 0)
		pool.nworkers++;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
}

int kspec_cpu_launch(kspec_cpu_entry_t fn, void **params, uint64_t groups,
    int nthreads)
{
	launch_t l;
	launch_t **p;

	if (!fn || nthreads < 0 || nthreads > KSPEC_MAX_THREADS)
		return KSPEC_E_INVAL;
	if (nthreads == 0)
		nthreads = kspec_cpu_threads();
	else
		pthread_once(&once, setup);
	if ((uint64_t)nthreads > groups)
		nthreads = (int)groups;
	if (nthreads <= 1) {
		if (groups > 0)
			fn(params, 0, groups);
		return KSPEC_OK;
	}
	memset(&l, 0, sizeof l);
	l.fn = fn;
	l.params = params;
	l.groups = groups;
	l.nchunks = (unsigned)nthreads;
	pthread_cond_init(&l.finished, NULL);
	pthread_mutex_lock(&pool.lock);
	grow(nthreads - 1);
	for (p = &pool.head; *p; p = &(*p)->qnext)
		;
	*p = &l;
	pthread_cond_broadcast(&pool.work);
	while (l.next < l.nchunks)
		run_chunk(&l, claim(&l));
	while (l.done < l.nchunks)
		pthread_cond_wait(&l.finished, &pool.lock);
	pthread_mutex_unlock(&pool.lock);
	pthread_cond_destroy(&l.finished);
	return KSPEC_OK;
}
