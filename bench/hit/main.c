/*
 * bench/hit: warm-hit throughput and latency of kspecd against redis-server
 * serving a value of the same size, both on a Unix socket, in the same
 * run, with the same client loop (write one request, read the whole reply).
 *
 * Runs: 1, 4 and 16 clients with one request in flight each, and 16
 * clients with DEPTH requests written at once (both servers pipelined the
 * same way).  For each: a warm-up, then TRIALS interleaved trials of the
 * two servers (which goes first alternates), PER_TRIAL requests each.
 * Printed: median throughput with min..max over trials, p50/p99 latency
 * of a batch (one request, or DEPTH) from the pooled samples of all
 * trials, and the server's user and system CPU per request (clock ticks
 * of /proc/PID/stat over all trials: the headroom is in user time).
 */
#include <pthread.h>

#include "../bench.h"
#include "../wire.h"

#define TRIALS 9
#define PER_TRIAL 60000         /* requests per trial, all clients */
#define WARMUP 3000
#define DEPTH 16                /* requests in flight when pipelining */

typedef struct {
	const char *sock;
	int proto;
	const char *req;        /* DEPTH requests back to back */
	size_t reqlen;          /* of one */
	int depth;              /* requests written at once */
	int iters;              /* batches */
	pthread_barrier_t *go;
	uint64_t *lat;
	int rc;
} client_t;

static void *client_run(void *p)
{
	client_t *c = p;
	rd_t *r = calloc(1, sizeof *r);
	int i, k;

	r->fd = r ? e2e_connect(c->sock) : -1;
	pthread_barrier_wait(c->go);
	c->rc = !r || r->fd < 0;
	for (i = 0; i < c->iters && !c->rc; i++) {
		uint64_t t0 = bench_ns();

		if (e2e_write_all(r->fd, c->req, c->reqlen * (size_t)c->depth))
			c->rc = -1;
		for (k = 0; k < c->depth && !c->rc; k++)
			if (wire_read_reply(r, c->proto, NULL))
				c->rc = -1;
		if (c->lat)
			c->lat[i] = bench_ns() - t0;
	}
	if (r && r->fd >= 0)
		close(r->fd);
	free(r);
	return NULL;
}

/* User and system CPU seconds of process PID so far. */
static void cpu_of(pid_t pid, double *user, double *sys)
{
	char path[64], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	FILE *f;

	*user = *sys = 0;
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return;
	if (fgets(buf, sizeof buf, f) && (p = strrchr(buf, ')')) &&
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
	    &ut, &st) == 2) {
		*user = (double)ut / (double)sysconf(_SC_CLK_TCK);
		*sys = (double)st / (double)sysconf(_SC_CLK_TCK);
	}
	fclose(f);
}

typedef struct {
	double rate;            /* requests per second */
	double user, sys;       /* server CPU seconds during the trial */
} trial_t;

/* One trial: NC clients x ITERS batches of DEPTH requests; latencies (of a
 * batch) appended to LAT when not NULL. */
static trial_t trial(const char *sock, pid_t server, int proto,
    const char *req, size_t reqlen, int nc, int depth, int iters,
    uint64_t *lat)
{
	pthread_t th[64];
	client_t cl[64];
	pthread_barrier_t go;
	double u0, s0, u1, s1;
	uint64_t t0, t1;
	trial_t t;
	int i;

	pthread_barrier_init(&go, NULL, (unsigned)nc + 1);
	for (i = 0; i < nc; i++) {
		cl[i] = (client_t){ sock, proto, req, reqlen, depth, iters,
		    &go, lat ? lat + (size_t)i * iters : NULL, 0 };
		pthread_create(&th[i], NULL, client_run, &cl[i]);
	}
	cpu_of(server, &u0, &s0);
	pthread_barrier_wait(&go);
	t0 = bench_ns();
	for (i = 0; i < nc; i++)
		pthread_join(th[i], NULL);
	t1 = bench_ns();
	cpu_of(server, &u1, &s1);
	pthread_barrier_destroy(&go);
	for (i = 0; i < nc; i++)
		if (cl[i].rc) {
			fprintf(stderr, "hit: a %s client failed\n",
			    proto == WIRE_KSPEC ? "kspecd" : "redis");
			exit(1);
		}
	t.rate = (double)nc * iters * depth / ((double)(t1 - t0) / 1e9);
	t.user = u1 - u0;
	t.sys = s1 - s0;
	return t;
}

/* DEPTH copies of the N-byte request REQ, back to back (malloc'd). */
static char *repeat(const char *req, size_t n, int depth)
{
	char *out = malloc(n * (size_t)depth);
	int i;

	if (!out)
		exit(1);
	for (i = 0; i < depth; i++)
		memcpy(out + n * (size_t)i, req, n);
	return out;
}

int main(void)
{
	static const char get[] = "{\"op\":\"get\",\"id\":1,\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"N\":64,\"K\":64}}";
	static const struct {
		int clients, depth;
	} runs[] = { { 1, 1 }, { 4, 1 }, { 16, 1 }, { 16, DEPTH } };
	const char *name[2] = { "kspecd", "redis" };
	char kframe[512], rsock[300];
	const char *req[2];
	size_t reqlen[2], art;
	e2e_daemon_t d;
	e2e_reply_t r;
	pid_t redis, pid[2];
	int ri;

	memset(&d, 0, sizeof d);
	if (e2e_start(&d, NULL)) {
		fprintf(stderr, "hit: kspecd did not start\n");
		return 1;
	}
	if (e2e_call(d.sock, get, &r) || !e2e_ok(&r)) {
		fprintf(stderr, "hit: first get failed\n");
		e2e_cleanup(&d);
		return 1;
	}
	art = r.len;
	redis = wire_start_redis(d.dir, rsock, sizeof rsock, NULL, 5);
	if (redis < 0 || wire_redis_set(rsock, r.payload, r.len)) {
		fprintf(stderr, "hit: redis-server did not start (run "
		    "deploy/deps.sh)\n");
		e2e_cleanup(&d);
		return 1;
	}
	e2e_reply_free(&r);
	reqlen[WIRE_KSPEC] = wire_frame(kframe, sizeof kframe, get);
	reqlen[WIRE_REDIS] = strlen(WIRE_REDIS_GET);
	pid[WIRE_KSPEC] = d.pid;
	pid[WIRE_REDIS] = redis;

	printf("hit path: kspecd get (%zu-byte artifact, memory tier) vs "
	    "redis GET of a %zu-byte value\n", art, art);
	printf("Unix sockets, the same client loop for both; %d interleaved "
	    "trials of %d requests after %d warm-up; server CPU from "
	    "/proc/PID/stat\n\n", TRIALS, PER_TRIAL, WARMUP);
	printf("%-8s %-6s %-7s %12s %21s %9s %9s %8s %8s\n", "clients",
	    "depth", "server", "req/s median", "(min..max)", "p50 us",
	    "p99 us", "user us", "sys us");
	printf("%52s %9s %9s %8s %8s\n", "", "(batch)", "(batch)", "/req",
	    "/req");
	for (ri = 0; ri < (int)(sizeof runs / sizeof runs[0]); ri++) {
		int nc = runs[ri].clients, depth = runs[ri].depth, t, s;
		int iters = PER_TRIAL / nc / depth;
		size_t nlat = (size_t)nc * iters * TRIALS;
		double rate[2][TRIALS], med[2], user[2] = { 0, 0 };
		double sys[2] = { 0, 0 };
		uint64_t *lat[2];

		req[WIRE_KSPEC] = repeat(kframe, reqlen[WIRE_KSPEC], depth);
		req[WIRE_REDIS] = repeat(WIRE_REDIS_GET, reqlen[WIRE_REDIS],
		    depth);
		lat[0] = malloc(nlat * sizeof(uint64_t));
		lat[1] = malloc(nlat * sizeof(uint64_t));
		for (s = 0; s < 2; s++)
			trial(s == WIRE_KSPEC ? d.sock : rsock, pid[s], s,
			    req[s], reqlen[s], nc, depth, WARMUP / depth,
			    NULL);
		for (t = 0; t < TRIALS; t++) {
			size_t off = (size_t)t * nc * iters;

			/* Alternate which server goes first. */
			for (s = 0; s < 2; s++) {
				int w = (t + s) % 2;
				trial_t tr = trial(w == WIRE_KSPEC ? d.sock :
				    rsock, pid[w], w, req[w], reqlen[w], nc,
				    depth, iters, lat[w] + off);

				rate[w][t] = tr.rate;
				user[w] += tr.user;
				sys[w] += tr.sys;
			}
		}
		for (s = 1; s >= 0; s--) {
			double total = (double)TRIALS * nc * iters * depth;

			med[s] = bench_median(rate[s], TRIALS);
			qsort(lat[s], nlat, sizeof(uint64_t), bench_cmp_u64);
			printf("%-8d %-6d %-7s %12.0f %10.0f..%-10.0f %9.1f "
			    "%9.1f %8.2f %8.2f\n", nc, depth, name[s], med[s],
			    rate[s][0], rate[s][TRIALS - 1],
			    bench_pct(lat[s], nlat, 50) / 1e3,
			    bench_pct(lat[s], nlat, 99) / 1e3,
			    user[s] / total * 1e6, sys[s] / total * 1e6);
		}
		printf("%-8d %-6d ratio kspecd/redis throughput: %.2fx\n\n",
		    nc, depth, med[WIRE_KSPEC] / med[WIRE_REDIS]);
		free(lat[0]);
		free(lat[1]);
		free((void *)req[0]);
		free((void *)req[1]);
	}
	kill(redis, SIGTERM);
	waitpid(redis, NULL, 0);
	e2e_cleanup(&d);
	return 0;
}
