/*
 * bench/hit: warm-hit throughput and latency of kspecd against redis-server
 * serving a value of the same size, both on a Unix socket, in the same
 * run, with the same client loop (write one request, read the whole reply).
 *
 * Runs: 1, 4 and 16 clients with one request in flight each, and 16
 * clients with DEPTH requests written at once (both servers pipelined the
 * same way).  For each: a warm-up, then TRIALS interleaved rounds, each a
 * trial of every server (which goes first rotates), PER_TRIAL requests
 * each.  The third server is the ceiling: a loop that does no work at all
 * (epoll, read, count the frames, write kspecd's own reply bytes back for
 * each), so what lies between kspecd and it is what kspecd's work costs.
 * Printed: median throughput with min..max over trials, the ratio to
 * redis of the medians and the median of the ratios within each round
 * (steadier when the machine drifts), p50/p99 latency
 * of a batch (one request, or DEPTH) from the pooled samples of all
 * trials, and the server's user and system CPU per request (clock ticks
 * of /proc/PID/stat over all trials: the headroom is in user time).
 */
#include <pthread.h>
#include <sys/epoll.h>

#include "../bench.h"
#include "../wire.h"

#define TRIALS 21
#define PER_TRIAL 20000         /* requests per trial, all clients */
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
			fprintf(stderr, "hit: a client of %s failed\n",
			    sock);
			exit(1);
		}
	t.rate = (double)nc * iters * depth / ((double)(t1 - t0) / 1e9);
	t.user = u1 - u0;
	t.sys = s1 - s0;
	return t;
}

/*
 * The server that does no work: one thread, epoll, and for every whole
 * request frame read, the bytes REPLY (N of them: a kspecd reply, prefix,
 * header and payload) written back, all the replies of one read in one
 * write.  Listens on SOCK; runs until killed.
 */
static void null_server(const char *sock, const char *reply, size_t n)
{
	struct sockaddr_un a;
	struct epoll_event ev, evs[64];
	static char in[64][1 << 16];
	static size_t have[64];
	char *out = NULL;
	size_t cap = 0;
	int lfd, ep, i;

	memset(&a, 0, sizeof a);
	a.sun_family = AF_UNIX;
	if (strlen(sock) >= sizeof a.sun_path)
		_exit(1);
	memcpy(a.sun_path, sock, strlen(sock) + 1);
	lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) ||
	    listen(lfd, 128))
		_exit(1);
	ep = epoll_create1(0);
	ev.events = EPOLLIN;
	ev.data.fd = lfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	for (;;) {
		int k = epoll_wait(ep, evs, 64, -1);

		for (i = 0; i < k; i++) {
			int fd = evs[i].data.fd, frames = 0;
			size_t off = 0, need;
			ssize_t r;

			if (fd == lfd) {
				int c = accept(lfd, NULL, NULL);

				if (c >= 0 && c < 64) {
					have[c] = 0;
					ev.events = EPOLLIN;
					ev.data.fd = c;
					epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
				} else if (c >= 0) {
					close(c);
				}
				continue;
			}
			r = read(fd, in[fd] + have[fd], sizeof in[fd] -
			    have[fd]);
			if (r <= 0) {
				close(fd);
				continue;
			}
			have[fd] += (size_t)r;
			while (have[fd] - off >= 8) {
				const unsigned char *p = (unsigned char *)
				    in[fd] + off;

				need = 8 + ((size_t)p[0] << 24 |
				    (size_t)p[1] << 16 | (size_t)p[2] << 8 |
				    p[3]);
				if (have[fd] - off < need)
					break;
				off += need;
				frames++;
			}
			memmove(in[fd], in[fd] + off, have[fd] - off);
			have[fd] -= off;
			if (cap < n * (size_t)frames) {
				cap = n * (size_t)frames;
				out = realloc(out, cap);
				if (!out)
					_exit(1);
			}
			for (int f = 0; f < frames; f++)
				memcpy(out + n * (size_t)f, reply, n);
			if (frames && e2e_write_all(fd, out,
			    n * (size_t)frames))
				close(fd);
		}
	}
}

/* The raw bytes of the reply to the N-byte frame REQ on SOCK (malloc'd,
 * length in *LEN). */
static char *raw_reply(const char *sock, const char *req, size_t n,
    size_t *len)
{
	rd_t *r = calloc(1, sizeof *r);
	unsigned char p[8];
	char *out = NULL;
	size_t hl, pl;

	if (!r || (r->fd = e2e_connect(sock)) < 0 ||
	    e2e_write_all(r->fd, req, n) || rd_take(r, p, 8))
		exit(1);
	hl = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 |
	    p[3];
	pl = (size_t)p[4] << 24 | (size_t)p[5] << 16 | (size_t)p[6] << 8 |
	    p[7];
	out = malloc(8 + hl + pl);
	if (!out || rd_take(r, out + 8, hl + pl))
		exit(1);
	memcpy(out, p, 8);
	*len = 8 + hl + pl;
	close(r->fd);
	free(r);
	return out;
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

enum { S_KSPEC, S_REDIS, S_NULL, NSERVERS };

int main(void)
{
	static const char get[] = "{\"op\":\"get\",\"id\":1,\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"N\":64,\"K\":64}}";
	static const struct {
		int clients, depth;
	} runs[] = { { 1, 1 }, { 4, 1 }, { 16, 1 }, { 16, DEPTH } };
	static const char *const name[NSERVERS] = { "kspecd", "redis",
	    "no-work" };
	static const int proto[NSERVERS] = { WIRE_KSPEC, WIRE_REDIS,
	    WIRE_KSPEC };
	char kframe[512], rsock[300], nsock[300];
	const char *req[NSERVERS], *sock[NSERVERS];
	size_t reqlen[NSERVERS], art, rawlen;
	e2e_daemon_t d;
	e2e_reply_t r;
	pid_t pid[NSERVERS];
	char *raw;
	int ri, i;

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
	pid[S_REDIS] = wire_start_redis(d.dir, rsock, sizeof rsock, NULL, 5);
	if (pid[S_REDIS] < 0 || wire_redis_set(rsock, r.payload, r.len)) {
		fprintf(stderr, "hit: redis-server did not start (run "
		    "deploy/deps.sh)\n");
		e2e_cleanup(&d);
		return 1;
	}
	e2e_reply_free(&r);
	reqlen[S_KSPEC] = reqlen[S_NULL] = wire_frame(kframe, sizeof kframe,
	    get);
	reqlen[S_REDIS] = strlen(WIRE_REDIS_GET);
	raw = raw_reply(d.sock, kframe, reqlen[S_KSPEC], &rawlen);
	snprintf(nsock, sizeof nsock, "%s/null.sock", d.dir);
	pid[S_NULL] = fork();
	if (pid[S_NULL] == 0)
		null_server(nsock, raw, rawlen);
	for (i = 0; i < 500 && e2e_connect(nsock) < 0; i++)
		usleep(10000);
	pid[S_KSPEC] = d.pid;
	sock[S_KSPEC] = d.sock;
	sock[S_REDIS] = rsock;
	sock[S_NULL] = nsock;

	printf("hit path: kspecd get (%zu-byte artifact, memory tier) vs "
	    "redis GET of a %zu-byte value\n", art, art);
	printf("and a server that does no work (writes kspecd's %zu reply "
	    "bytes back for each request)\n", rawlen);
	printf("Unix sockets, the same client loop for all; %d interleaved "
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
		double rate[NSERVERS][TRIALS], med[NSERVERS];
		double round_rate[NSERVERS][TRIALS], ratio[2][TRIALS], rmed[2];
		double user[NSERVERS] = { 0 }, sys[NSERVERS] = { 0 };
		uint64_t *lat[NSERVERS];

		req[S_KSPEC] = repeat(kframe, reqlen[S_KSPEC], depth);
		req[S_NULL] = repeat(kframe, reqlen[S_NULL], depth);
		req[S_REDIS] = repeat(WIRE_REDIS_GET, reqlen[S_REDIS], depth);
		for (s = 0; s < NSERVERS; s++) {
			lat[s] = malloc(nlat * sizeof(uint64_t));
			if (!lat[s])
				return 1;
			trial(sock[s], pid[s], proto[s], req[s], reqlen[s],
			    nc, depth, WARMUP / depth, NULL);
		}
		for (t = 0; t < TRIALS; t++) {
			size_t off = (size_t)t * nc * iters;

			/* Rotate which server goes first. */
			for (s = 0; s < NSERVERS; s++) {
				int w = (t + s) % NSERVERS;
				trial_t tr = trial(sock[w], pid[w], proto[w],
				    req[w], reqlen[w], nc, depth, iters,
				    lat[w] + off);

				rate[w][t] = round_rate[w][t] = tr.rate;
				user[w] += tr.user;
				sys[w] += tr.sys;
			}
		}
		for (s = 0; s < NSERVERS; s++) {
			int w = (s + 1) % NSERVERS;     /* redis first */
			double total = (double)TRIALS * nc * iters * depth;

			med[w] = bench_median(rate[w], TRIALS);
			qsort(lat[w], nlat, sizeof(uint64_t), bench_cmp_u64);
			printf("%-8d %-6d %-7s %12.0f %10.0f..%-10.0f %9.1f "
			    "%9.1f %8.2f %8.2f\n", nc, depth, name[w], med[w],
			    rate[w][0], rate[w][TRIALS - 1],
			    bench_pct(lat[w], nlat, 50) / 1e3,
			    bench_pct(lat[w], nlat, 99) / 1e3,
			    user[w] / total * 1e6, sys[w] / total * 1e6);
		}
		/* The ratio within each round too: its median is steadier
		 * than the ratio of the medians when the machine drifts. */
		for (s = 0; s < 2; s++) {
			int w = s ? S_NULL : S_KSPEC;

			for (t = 0; t < TRIALS; t++)
				ratio[s][t] = round_rate[w][t] /
				    round_rate[S_REDIS][t];
			rmed[s] = bench_median(ratio[s], TRIALS);
		}
		printf("%-8d %-6d ratio to redis, throughput: kspecd %.2fx "
		    "(per round %.2fx, %.2f..%.2f), no-work %.2fx (per round "
		    "%.2fx)\n\n", nc, depth, med[S_KSPEC] / med[S_REDIS],
		    rmed[0], ratio[0][0], ratio[0][TRIALS - 1],
		    med[S_NULL] / med[S_REDIS], rmed[1]);
		for (s = 0; s < NSERVERS; s++) {
			free(lat[s]);
			free((void *)req[s]);
		}
	}
	for (i = S_REDIS; i <= S_NULL; i++) {
		kill(pid[i], SIGTERM);
		waitpid(pid[i], NULL, 0);
	}
	free(raw);
	e2e_cleanup(&d);
	return 0;
}
