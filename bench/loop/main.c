/*
 * bench/loop: what a greedy client costs the others.  Connections that
 * pipeline 15,000 `kernels` requests each and never read their replies
 * (1, then 8 of them), and beside them a client timing pings one at a
 * time; the reference is the same pings on the idle daemon, in the same
 * run.  Reports ping round trips (median, p99, worst) and the daemon's
 * RSS.  Trials alternate the cases.
 */
#include <fcntl.h>

#include "../../tests/e2e.h"
#include "../bench.h"

#define TRIALS 3
#define PINGS 2000
#define REQUESTS 15000

/* Stuffs FD with REQUESTS pipelined kernels requests, as many as it takes
 * without blocking for long. */
static void stuff(int fd)
{
	static const char json[] = "{\"op\":\"kernels\",\"id\":7}";
	uint32_t hl = sizeof json - 1;
	size_t one = 8 + hl, n = one * REQUESTS, off = 0;
	char *buf = malloc(n);
	int i;

	for (i = 0; i < REQUESTS; i++) {
		char *p = buf + one * (size_t)i;

		p[0] = 0;
		p[1] = 0;
		p[2] = (char)(hl >> 8);
		p[3] = (char)hl;
		memset(p + 4, 0, 4);
		memcpy(p + 8, json, hl);
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	for (i = 0; i < 100 && off < n; i++) {
		ssize_t w = write(fd, buf + off, n - off);

		if (w > 0) {
			off += (size_t)w;
			i = 0;
		} else {
			usleep(2000);
		}
	}
	free(buf);
}

/* PINGS round trips in microseconds into V (sorted). */
static void pings(const char *sock, double *v)
{
	int fd = e2e_connect(sock), i;
	e2e_reply_t r;

	for (i = 0; i < PINGS; i++) {
		uint64_t t0 = bench_ns();

		if (e2e_send(fd, "{\"op\":\"ping\",\"id\":1}") ||
		    e2e_recv(fd, &r)) {
			fprintf(stderr, "loop: a ping failed\n");
			exit(1);
		}
		e2e_reply_free(&r);
		v[i] = (double)(bench_ns() - t0) / 1e3;
	}
	close(fd);
	qsort(v, PINGS, sizeof *v, bench_cmp_d);
}

int main(void)
{
	static const int heavies[3] = { 0, 1, 8 };
	double med[3][TRIALS], p99[3][TRIALS], worst[3][TRIALS];
	double rss[3][TRIALS];
	static double v[PINGS];
	int t, h, i, fds[8];

	for (t = 0; t < TRIALS; t++) {
		for (h = 0; h < 3; h++) {
			e2e_daemon_t d;

			memset(&d, 0, sizeof d);
			if (e2e_start(&d, NULL)) {
				fprintf(stderr, "loop: kspecd did not start\n");
				return 1;
			}
			pings(d.sock, v);               /* warm-up */
			for (i = 0; i < heavies[h]; i++) {
				fds[i] = e2e_connect(d.sock);
				stuff(fds[i]);
			}
			pings(d.sock, v);
			med[h][t] = v[PINGS / 2];
			p99[h][t] = v[PINGS * 99 / 100];
			worst[h][t] = v[PINGS - 1];
			rss[h][t] = e2e_rss_kb(d.pid) / 1024.0;
			for (i = 0; i < heavies[h]; i++)
				close(fds[i]);
			e2e_cleanup(&d);
		}
	}
	printf("loop: %d pings one at a time beside connections that pipeline "
	    "%d kernels requests each and never read; %d trials\n\n", PINGS,
	    REQUESTS, TRIALS);
	printf("%-34s %12s %12s %12s %14s\n", "greedy connections",
	    "ping p50 us", "p99 us", "worst us", "daemon RSS MB");
	for (h = 0; h < 3; h++) {
		double m = bench_median(med[h], TRIALS);
		double q = bench_median(p99[h], TRIALS);
		double w = bench_median(worst[h], TRIALS);
		double r = bench_median(rss[h], TRIALS);

		printf("%-34d %12.1f %12.1f %12.1f %14.1f\n", heavies[h], m, q,
		    w, r);
	}
	printf("\n(medians over trials; goals: every ping under 50 ms beside "
	    "one greedy connection, RSS under 256 MB beside eight)\n");
	return 0;
}
