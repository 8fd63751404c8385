/*
 * bench/fairness: what another client's backlog and a stopped worker cost
 * one cold get, each beside the same get on the same daemon with neither,
 * in the same run.
 *
 *   (1) starvation: one client pipelines 24 distinct cold OpenCL gets;
 *       200 ms later a second client's cold cpu get is timed.  Beside it,
 *       the same kind of get on the otherwise idle daemon.  Goal: loaded
 *       <= 3 x idle + one compile, "one compile" being the median
 *       compile_ms of that trial's 24 OpenCL compiles;
 *   (2) liveness: the idle workers are given 50 ms to go quiet, then one
 *       of them, or all of them, is stopped (SIGSTOP) and a cold cpu get
 *       is timed.  Beside it, the same get with no worker stopped.  Goal:
 *       under 2 s (a stopped worker is found by its ping, not by the
 *       compile deadline).
 *
 * One daemon per part, --workers the number of CPUs (the pool keeps the
 * reserve beside them), every worker warmed up first by a cold cpu and a
 * cold OpenCL compile; trials alternate the cases; medians with min..max.
 * PoCL's own kernel cache is off (POCL_KERNEL_CACHE=0), so OpenCL compiles
 * are real.
 */
#include "../bench.h"
#include "../cold.h"

#define TRIALS 5
#define BACKLOG 24

/* The worker processes stats lists (--workers and the reserve). */
static int worker_count(const char *sock)
{
	e2e_reply_t r;
	int n = 0;

	if (e2e_call(sock, "{\"op\":\"stats\"}", &r) == 0) {
		n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r.h,
		    "workers"));
		e2e_reply_free(&r);
	}
	return n;
}

/* Every worker compiles BACKEND once: as many lone clients as workers
 * ask at once, so the reserve takes one too. */
static void warm(const char *sock, const char *backend)
{
	int fd[64], i, n = worker_count(sock);

	for (i = 0; i < n && i < 64; i++) {
		fd[i] = e2e_connect(sock);
		cold_send(fd[i], backend, 1, 512);
	}
	while (i-- > 0) {
		cold_recv(fd[i], 1, NULL);
		close(fd[i]);
	}
}

/* ms of one cold cpu get on a fresh connection. */
static double timed_get(const char *sock)
{
	int fd = e2e_connect(sock);
	uint64_t t0 = bench_ns();
	double ms;

	cold_send(fd, "cpu", 1, 512);
	cold_recv(fd, 1, NULL);
	ms = (double)(bench_ns() - t0) / 1e6;
	close(fd);
	return ms;
}

/* (1) loaded: the cold cpu get behind another client's backlog; the
 * backlog's median compile in *ONE. */
static double behind_backlog(const char *sock, double *one)
{
	double ms, compile[BACKLOG];
	int h = e2e_connect(sock);

	cold_send(h, "opencl", BACKLOG, 512);
	usleep(200000);                 /* they are queued and running */
	ms = timed_get(sock);
	cold_recv(h, BACKLOG, compile);
	close(h);
	*one = bench_median(compile, BACKLOG);
	return ms;
}

/* Pids of the workers in STATE; returns how many, at most MAX. */
static int worker_pids(const char *sock, const char *state, pid_t *pids,
    int max)
{
	const cJSON *w;
	e2e_reply_t r;
	int n = 0;

	if (e2e_call(sock, "{\"op\":\"stats\"}", &r))
		return 0;
	cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(r.h,
	    "workers")) {
		const cJSON *st = cJSON_GetObjectItemCaseSensitive(w, "state");

		if (n < max && cJSON_IsString(st) &&
		    strcmp(st->valuestring, state) == 0)
			pids[n++] = (pid_t)e2e_num(w, "pid");
	}
	e2e_reply_free(&r);
	return n;
}

/* (2): the cold cpu get with STOP of the idle workers stopped (0: none,
 * -1: all); waits until the pool is whole and idle again. */
static double with_stopped(const char *sock, int stop, int workers)
{
	pid_t idle[64];
	int i, n = 0;

	for (i = 0; i < 500; i++) {
		if ((n = worker_pids(sock, "idle", idle, 64)) == workers)
			break;
		usleep(10000);
	}
	if (n != workers) {
		fprintf(stderr, "fairness: %d of %d workers idle\n", n,
		    workers);
		exit(1);
	}
	usleep(50000);
	if (stop < 0 || stop > n)
		stop = n;
	for (i = 0; i < stop; i++)
		kill(idle[i], SIGSTOP);
	return timed_get(sock);
}

static void row(const char *name, double *v, int n)
{
	double med = bench_median(v, n);

	printf("%-52s %10.1f %10.1f..%-10.1f\n", name, med, v[0], v[n - 1]);
}

int main(void)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	double idle[TRIALS], loaded[TRIALS], one[TRIALS], over[TRIALS];
	double none[TRIALS], stop1[TRIALS], stopall[TRIALS];
	double found = 0, timeouts = 0, reserve = 0;
	e2e_daemon_t d;
	int r, workers;

	setenv("POCL_KERNEL_CACHE", "0", 1);
	if (ncpu < 1)
		ncpu = 1;

	/* (1) */
	cold_start(&d, (int)ncpu);
	warm(d.sock, "cpu");
	warm(d.sock, "opencl");
	for (r = 0; r < TRIALS; r++) {
		idle[r] = timed_get(d.sock);
		loaded[r] = behind_backlog(d.sock, &one[r]);
		over[r] = loaded[r] / (3 * idle[r] + one[r]);
	}
	reserve = e2e_stat(d.sock, "reserve_compiles");
	e2e_cleanup(&d);
	printf("fairness: a cold cpu get (gemm M=1 K=512 f32), --workers %ld, "
	    "%d trials\n\n", ncpu, TRIALS);
	printf("%-52s %10s %21s\n", "case", "median ms", "(min..max)");
	row("(1) alone, on the idle daemon", idle, TRIALS);
	row("(1) behind another client's 24 cold OpenCL gets", loaded,
	    TRIALS);
	row("(1) one of those OpenCL compiles (median of 24)", one, TRIALS);
	printf("(1) loaded / (3 x alone + one compile), per trial: median "
	    "%.2f (%.2f..%.2f); goal <= 1\n", bench_median(over, TRIALS),
	    over[0], over[TRIALS - 1]);
	printf("    compiles run on the reserve: %.0f\n\n", reserve);

	/* (2) */
	cold_start(&d, (int)ncpu);
	warm(d.sock, "cpu");
	workers = worker_count(d.sock);
	for (r = 0; r < TRIALS; r++) {
		none[r] = with_stopped(d.sock, 0, workers);
		stop1[r] = with_stopped(d.sock, 1, workers);
		stopall[r] = with_stopped(d.sock, -1, workers);
	}
	found = e2e_stat(d.sock, "worker_unresponsive");
	timeouts = e2e_stat(d.sock, "worker_timeouts");
	e2e_cleanup(&d);
	printf("%-52s %10s %21s\n", "case", "median ms", "(min..max)");
	row("(2) no worker stopped", none, TRIALS);
	row("(2) one idle worker stopped", stop1, TRIALS);
	row("(2) every idle worker stopped", stopall, TRIALS);
	printf("    goal < 2000 ms; %d workers; found unresponsive: %.0f "
	    "(expected %d), compile timeouts: %.0f\n", workers, found,
	    TRIALS * (1 + workers), timeouts);
	return 0;
}
