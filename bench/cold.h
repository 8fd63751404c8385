/*
 * Cold gets, shared by the benchmarks of the miss path (bench/compile,
 * bench/fairness): gemm specs never asked for before (a distinct N each),
 * sent pipelined on one connection, their replies checked, and a daemon
 * started with a given --workers.  Any failure ends the benchmark.
 */
#ifndef KS_BENCH_COLD_H
#define KS_BENCH_COLD_H

#include "../tests/e2e.h"

static int cold_next_n = 1000;  /* distinct N for every cold kernel */

/* A get of gemm (M=1, N, K, f32) on BACKEND, metadata only. */
static inline const char *cold_spec(int id, const char *backend, int n,
    int k)
{
	static char buf[512];

	snprintf(buf, sizeof buf, "{\"op\":\"get\",\"id\":%d,\"kernel\":"
	    "\"gemm\",\"backend\":\"%s\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"N\":%d,\"K\":%d},\"return\":\"meta\"}", id, backend, n, k);
	return buf;
}

/* Sends COUNT gets of kernels never asked for before on FD. */
static inline void cold_send(int fd, const char *backend, int count, int k)
{
	int i;

	for (i = 0; i < count; i++)
		if (e2e_send(fd, cold_spec(i, backend, cold_next_n++, k))) {
			fprintf(stderr, "bench: send failed\n");
			exit(1);
		}
}

/* Reads COUNT successful replies on FD; their compile_ms into MS unless
 * it is NULL. */
static inline void cold_recv(int fd, int count, double *ms)
{
	e2e_reply_t r;
	int i;

	for (i = 0; i < count; i++) {
		if (e2e_recv(fd, &r) || !e2e_ok(&r)) {
			fprintf(stderr, "bench: a get failed: %s\n", r.h ?
			    cJSON_PrintUnformatted(r.h) : "no reply");
			exit(1);
		}
		if (ms)
			ms[i] = e2e_num(r.h, "compile_ms");
		e2e_reply_free(&r);
	}
}

/* Starts kspecd on a fresh store with --workers WORKERS. */
static inline void cold_start(e2e_daemon_t *d, int workers)
{
	char w[16];
	const char *extra[] = { "--workers", w, NULL };

	snprintf(w, sizeof w, "%d", workers);
	memset(d, 0, sizeof *d);
	if (e2e_start(d, extra)) {
		fprintf(stderr, "bench: kspecd did not start\n");
		exit(1);
	}
}

#endif
