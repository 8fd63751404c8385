/*
 * bench/hit: warm-hit throughput and latency of kspecd against redis-server
 * serving a value of the same size, both on a Unix socket, in the same
 * run, with the same client loop (write one request, read the whole reply).
 *
 * For each client count (1 and 16): a warm-up, then TRIALS alternating
 * trials of redis and kspecd, each of ITERS requests per client.  Printed:
 * median throughput with min..max over trials, and p50/p99 latency from the
 * pooled samples of all trials.
 */
#include <pthread.h>

#include "../../tests/e2e.h"
#include "../bench.h"

#define TRIALS 5
#define ITERS 20000
#define WARMUP 3000

typedef struct {
	int fd;
	size_t len, off;
	char buf[1 << 16];
} rd_t;

static int rd_fill(rd_t *r)
{
	ssize_t n;

	if (r->off == r->len)
		r->off = r->len = 0;
	if (r->off > 0 && r->len == sizeof r->buf) {
		memmove(r->buf, r->buf + r->off, r->len - r->off);
		r->len -= r->off;
		r->off = 0;
	}
	do
		n = read(r->fd, r->buf + r->len, sizeof r->buf - r->len);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return -1;
	r->len += (size_t)n;
	return 0;
}

/* Consumes N bytes (copying them out when DST is not NULL). */
static int rd_take(rd_t *r, void *dst, size_t n)
{
	while (n) {
		size_t k;

		if (r->off == r->len && rd_fill(r))
			return -1;
		k = r->len - r->off < n ? r->len - r->off : n;
		if (dst) {
			memcpy(dst, r->buf + r->off, k);
			dst = (char *)dst + k;
		}
		r->off += k;
		n -= k;
	}
	return 0;
}

enum { KSPEC, REDIS };

/* Reads one whole reply of the given protocol. */
static int read_reply(rd_t *r, int proto)
{
	if (proto == KSPEC) {
		unsigned char p[8];
		uint32_t hl, pl;

		if (rd_take(r, p, 8))
			return -1;
		hl = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
		    (uint32_t)p[2] << 8 | p[3];
		pl = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 |
		    (uint32_t)p[6] << 8 | p[7];
		return rd_take(r, NULL, (size_t)hl + pl);
	} else {
		char line[32];
		size_t i = 0;
		long n;

		for (;;) {      /* "$<n>\r\n" */
			if (rd_take(r, &line[i], 1) || i >= sizeof line - 2)
				return -1;
			if (line[i] == '\n')
				break;
			i++;
		}
		line[i] = '\0';
		if (line[0] != '$')
			return -1;
		n = strtol(line + 1, NULL, 10);
		return n < 0 ? -1 : rd_take(r, NULL, (size_t)n + 2);
	}
}

typedef struct {
	const char *sock;
	int proto;
	const char *req;
	size_t reqlen;
	int iters;
	pthread_barrier_t *go;
	uint64_t *lat;
	int rc;
} client_t;

static void *client_run(void *p)
{
	client_t *c = p;
	rd_t *r = calloc(1, sizeof *r);
	int i;

	r->fd = e2e_connect(c->sock);
	pthread_barrier_wait(c->go);
	c->rc = r->fd < 0;
	for (i = 0; i < c->iters && !c->rc; i++) {
		uint64_t t0 = bench_ns();

		if (e2e_write_all(r->fd, c->req, c->reqlen) ||
		    read_reply(r, c->proto))
			c->rc = -1;
		if (c->lat)
			c->lat[i] = bench_ns() - t0;
	}
	if (r->fd >= 0)
		close(r->fd);
	free(r);
	return NULL;
}

/* One trial: NC clients x ITERS requests; returns requests per second and
 * appends latencies to LAT (when not NULL). */
static double trial(const char *sock, int proto, const char *req,
    size_t reqlen, int nc, int iters, uint64_t *lat)
{
	pthread_t th[64];
	client_t cl[64];
	pthread_barrier_t go;
	uint64_t t0, t1;
	int i;

	pthread_barrier_init(&go, NULL, (unsigned)nc + 1);
	for (i = 0; i < nc; i++) {
		cl[i] = (client_t){ sock, proto, req, reqlen, iters, &go,
		    lat ? lat + (size_t)i * iters : NULL, 0 };
		pthread_create(&th[i], NULL, client_run, &cl[i]);
	}
	pthread_barrier_wait(&go);
	t0 = bench_ns();
	for (i = 0; i < nc; i++)
		pthread_join(th[i], NULL);
	t1 = bench_ns();
	pthread_barrier_destroy(&go);
	for (i = 0; i < nc; i++)
		if (cl[i].rc) {
			fprintf(stderr, "hit: a %s client failed\n",
			    proto == KSPEC ? "kspecd" : "redis");
			exit(1);
		}
	return (double)nc * iters / ((double)(t1 - t0) / 1e9);
}

static pid_t start_redis(const char *dir, char *sock, size_t socklen)
{
	pid_t pid;
	int i;

	snprintf(sock, socklen, "%s/redis.sock", dir);
	pid = fork();
	if (pid == 0) {
		int nul = open("/dev/null", O_WRONLY);

		dup2(nul, 1);
		dup2(nul, 2);
		execlp("redis-server", "redis-server", "--port", "0",
		    "--unixsocket", sock, "--unixsocketperm", "700",
		    "--save", "", "--appendonly", "no", "--dir", dir,
		    (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 500; i++) {
		int fd = e2e_connect(sock);

		if (fd >= 0) {
			close(fd);
			return pid;
		}
		usleep(10000);
	}
	kill(pid, SIGKILL);
	return -1;
}

/* SET k <value> on redis. */
static int redis_set(const char *sock, const void *val, size_t n)
{
	char hdr[64];
	rd_t *r = calloc(1, sizeof *r);
	int rc;

	r->fd = e2e_connect(sock);
	snprintf(hdr, sizeof hdr, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%zu\r\n", n);
	rc = r->fd < 0 || e2e_write_all(r->fd, hdr, strlen(hdr)) ||
	    e2e_write_all(r->fd, val, n) || e2e_write_all(r->fd, "\r\n", 2) ||
	    rd_take(r, hdr, 5) || memcmp(hdr, "+OK\r\n", 5) != 0;
	if (r->fd >= 0)
		close(r->fd);
	free(r);
	return rc ? -1 : 0;
}

int main(void)
{
	static const char get[] = "{\"op\":\"get\",\"id\":1,\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"N\":64,\"K\":64}}";
	static const char rget[] = "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
	static const int counts[] = { 1, 16 };
	char kreq[512], rsock[300];
	e2e_daemon_t d;
	e2e_reply_t r;
	pid_t redis;
	size_t klen, art;
	int ci;

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
	redis = start_redis(d.dir, rsock, sizeof rsock);
	if (redis < 0 || redis_set(rsock, r.payload, r.len)) {
		fprintf(stderr, "hit: redis-server did not start (run "
		    "deploy/deps.sh)\n");
		e2e_cleanup(&d);
		return 1;
	}
	e2e_reply_free(&r);
	klen = strlen(get);
	kreq[0] = (char)(klen >> 24);
	kreq[1] = (char)(klen >> 16);
	kreq[2] = (char)(klen >> 8);
	kreq[3] = (char)klen;
	memset(kreq + 4, 0, 4);
	memcpy(kreq + 8, get, klen);
	klen += 8;

	printf("hit path: kspecd get (%zu-byte artifact, memory tier) vs "
	    "redis GET of a %zu-byte value\n", art, art);
	printf("Unix sockets, one request in flight per client, %d trials x "
	    "%d requests per client after %d warm-up\n\n", TRIALS, ITERS,
	    WARMUP);
	printf("%-8s %-7s %12s %21s %9s %9s\n", "clients", "server",
	    "req/s median", "(min..max)", "p50 us", "p99 us");
	for (ci = 0; ci < 2; ci++) {
		int nc = counts[ci], t, s;
		double rate[2][TRIALS], med[2];
		size_t nlat = (size_t)nc * ITERS * TRIALS;
		uint64_t *lat[2];

		lat[0] = malloc(nlat * sizeof(uint64_t));
		lat[1] = malloc(nlat * sizeof(uint64_t));
		trial(rsock, REDIS, rget, strlen(rget), nc, WARMUP, NULL);
		trial(d.sock, KSPEC, kreq, klen, nc, WARMUP, NULL);
		for (t = 0; t < TRIALS; t++) {
			size_t off = (size_t)t * nc * ITERS;

			rate[REDIS][t] = trial(rsock, REDIS, rget,
			    strlen(rget), nc, ITERS, lat[REDIS] + off);
			rate[KSPEC][t] = trial(d.sock, KSPEC, kreq, klen, nc,
			    ITERS, lat[KSPEC] + off);
		}
		for (s = 1; s >= 0; s--) {
			med[s] = bench_median(rate[s], TRIALS);
			qsort(lat[s], nlat, sizeof(uint64_t), bench_cmp_u64);
			printf("%-8d %-7s %12.0f %10.0f..%-10.0f %9.1f %9.1f\n",
			    nc, s == KSPEC ? "kspecd" : "redis", med[s],
			    rate[s][0], rate[s][TRIALS - 1],
			    bench_pct(lat[s], nlat, 50) / 1e3,
			    bench_pct(lat[s], nlat, 99) / 1e3);
		}
		printf("%-8d ratio kspecd/redis throughput: %.2fx\n\n", nc,
		    med[KSPEC] / med[REDIS]);
		free(lat[0]);
		free(lat[1]);
	}
	kill(redis, SIGTERM);
	waitpid(redis, NULL, 0);
	e2e_cleanup(&d);
	return 0;
}
