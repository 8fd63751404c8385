/*
 * bench/storm: 64 concurrent identical cold requests against one cold
 * request, each on a fresh daemon with an empty store, in the same run.
 * Goal: one compile for the storm, and storm wall time <= 1.1x the single
 * request's.  Trials alternate single and storm; medians and min..max.
 */
#include <pthread.h>

#include "../../tests/e2e.h"
#include "../bench.h"

#define NSTORM 64
#define TRIALS 5

static const char REQ[] = "{\"op\":\"get\",\"id\":1,\"kernel\":\"gemm\","
    "\"backend\":\"cpu\",\"dtype\":\"bf16\",\"shape\":{\"M\":1,"
    "\"N\":4096,\"K\":4096}}";

typedef struct {
	const char *sock;
	pthread_barrier_t *go;
	int fd;
	int rc;
} arg_t;

static void *one(void *p)
{
	arg_t *a = p;
	e2e_reply_t r;

	pthread_barrier_wait(a->go);
	a->rc = e2e_send(a->fd, REQ) || e2e_recv(a->fd, &r) || !e2e_ok(&r);
	if (!a->rc)
		e2e_reply_free(&r);
	return NULL;
}

/* N clients, connected before the clock starts, send at once; returns the
 * wall time in ms until the last reply, and the daemon's compile count. */
static double run(int n, double *compiles)
{
	pthread_t th[NSTORM];
	arg_t a[NSTORM];
	pthread_barrier_t go;
	e2e_daemon_t d;
	uint64_t t0, t1;
	int i;

	memset(&d, 0, sizeof d);
	if (e2e_start(&d, NULL)) {
		fprintf(stderr, "storm: kspecd did not start\n");
		exit(1);
	}
	pthread_barrier_init(&go, NULL, (unsigned)n + 1);
	for (i = 0; i < n; i++) {
		a[i] = (arg_t){ d.sock, &go, e2e_connect(d.sock), 0 };
		pthread_create(&th[i], NULL, one, &a[i]);
	}
	pthread_barrier_wait(&go);
	t0 = bench_ns();
	for (i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	t1 = bench_ns();
	for (i = 0; i < n; i++) {
		if (a[i].rc) {
			fprintf(stderr, "storm: a request failed\n");
			exit(1);
		}
		close(a[i].fd);
	}
	*compiles = e2e_stat(d.sock, "compiles");
	e2e_cleanup(&d);
	return (double)(t1 - t0) / 1e6;
}

int main(void)
{
	double single[TRIALS], storm[TRIALS], c1, cn, maxc = 0;
	double ms, mn;
	int t;

	for (t = 0; t < TRIALS; t++) {
		single[t] = run(1, &c1);
		storm[t] = run(NSTORM, &cn);
		if (cn > maxc)
			maxc = cn;
	}
	ms = bench_median(single, TRIALS);
	mn = bench_median(storm, TRIALS);
	printf("storm: gemm gemv_m1 bf16 N=K=4096 on cpu, cold store each "
	    "trial, %d trials\n\n", TRIALS);
	printf("%-22s %12s %21s %9s\n", "case", "wall ms", "(min..max)",
	    "compiles");
	printf("%-22s %12.1f %10.1f..%-10.1f %9.0f\n", "1 cold request", ms,
	    single[0], single[TRIALS - 1], c1);
	printf("%-22s %12.1f %10.1f..%-10.1f %9.0f\n", "64 identical cold", mn,
	    storm[0], storm[TRIALS - 1], maxc);
	printf("\nstorm / single wall time: %.2fx (goal <= 1.1x); most "
	    "compiles in a storm: %.0f (goal 1)\n", mn / ms, maxc);
	return 0;
}
