/*
 * bench/scrape: what a flood of metrics scrapes costs the kernel socket.
 * One client pings kspecd on its socket, one request at a time, and its
 * round trips are recorded in alternating phases of PHASE_S seconds:
 * idle, then with FLOOD_THREADS threads scraping /metrics on the TCP
 * metrics listener (a connection per scrape, as Prometheus and curl do)
 * at RATE scrapes a second in all, ROUNDS times.  Reported: the ping's
 * median and p99 idle and under the flood, the scrape rate reached, and
 * how the daemon served the scrapes (rendered, or its newest render).
 */
#include "../../tests/e2e.h"
#include "../bench.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>

#define PHASE_S 3
#define ROUNDS 3
#define RATE 3000
#define FLOOD_THREADS 4
#define MAX_PINGS 2000000

static e2e_daemon_t d;
static int port;
static atomic_int flooding;
static atomic_ulong scrapes, scrape_errors;

static void die(const char *what)
{
	fprintf(stderr, "scrape: %s\n", what);
	e2e_cleanup(&d);
	exit(1);
}

/* One GET of PATH, the whole reply read; its length, or -1. */
static long scrape(const char *path, char *out, size_t outlen)
{
	struct sockaddr_in sa;
	char req[128], buf[65536];
	long total = 0;
	ssize_t n;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
	    "\r\n", path, port);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
	    e2e_write_all(fd, req, strlen(req)) != 0) {
		close(fd);
		return -1;
	}
	while ((n = read(fd, buf, sizeof buf)) > 0) {
		if (out && (size_t)total < outlen) {
			size_t k = (size_t)n < outlen - (size_t)total ?
			    (size_t)n : outlen - (size_t)total - 1;

			memcpy(out + total, buf, k);
			out[total + (long)k] = '\0';
		}
		total += n;
	}
	close(fd);
	return n < 0 ? -1 : total;
}

/* Scrapes at RATE / FLOOD_THREADS a second while flooding is set. */
static void *flood_main(void *p)
{
	uint64_t gap = 1000000000ull * FLOOD_THREADS / RATE;
	uint64_t next = bench_ns();

	(void)p;
	for (;;) {
		uint64_t now;

		while (!atomic_load(&flooding)) {
			usleep(1000);
			next = bench_ns();
		}
		if (atomic_load(&flooding) < 0)
			return NULL;
		if (scrape("/metrics", NULL, 0) > 0)
			atomic_fetch_add(&scrapes, 1);
		else
			atomic_fetch_add(&scrape_errors, 1);
		next += gap;
		now = bench_ns();
		if (next > now)
			usleep((useconds_t)((next - now) / 1000));
		else if (now - next > 100000000ull)
			next = now;     /* fell behind: no burst to catch up */
	}
}

/* Pings on FD for PHASE_S seconds into V from *N on. */
static void ping_phase(int fd, uint64_t *v, size_t *n)
{
	uint64_t end = bench_ns() + PHASE_S * 1000000000ull;
	e2e_reply_t r;

	while (bench_ns() < end) {
		uint64_t t = bench_ns();

		if (e2e_send(fd, "{\"op\":\"ping\"}") || e2e_recv(fd, &r))
			die("ping failed");
		if (*n < MAX_PINGS)
			v[(*n)++] = bench_ns() - t;
		e2e_reply_free(&r);
	}
}

static double sample(const char *text, const char *name)
{
	const char *p = strstr(text, name);

	return p ? atof(p + strlen(name)) : -1;
}

int main(void)
{
	static uint64_t idle[MAX_PINGS], busy[MAX_PINGS];
	static char metrics[1 << 20];
	pthread_t th[FLOOD_THREADS];
	size_t ni = 0, nb = 0;
	char listen[64];
	uint64_t t0, flood_ns = 0;
	int fd, i;

	memset(&d, 0, sizeof d);
	port = e2e_free_port();
	if (port < 0)
		die("no free port");
	snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
	if (e2e_start(&d, (const char *const[]){ "--metrics-listen", listen,
	    NULL }) != 0)
		die("kspecd did not start");
	fd = e2e_connect(d.sock);
	if (fd < 0)
		die("connect");
	for (i = 0; i < FLOOD_THREADS; i++)
		pthread_create(&th[i], NULL, flood_main, NULL);
	ping_phase(fd, idle, &(size_t){ 0 });   /* warm-up */
	memset(idle, 0, sizeof idle);
	for (i = 0; i < ROUNDS; i++) {
		ping_phase(fd, idle, &ni);
		atomic_store(&flooding, 1);
		t0 = bench_ns();
		ping_phase(fd, busy, &nb);
		atomic_store(&flooding, 0);
		flood_ns += bench_ns() - t0;
	}
	atomic_store(&flooding, -1);
	for (i = 0; i < FLOOD_THREADS; i++)
		pthread_join(th[i], NULL);
	close(fd);
	if (scrape("/metrics", metrics, sizeof metrics) <= 0)
		die("the last scrape failed");
	qsort(idle, ni, sizeof *idle, bench_cmp_u64);
	qsort(busy, nb, sizeof *busy, bench_cmp_u64);
	printf("scrape: ping round trips on the kernel socket, idle and "
	    "under a /metrics flood (%d threads, %d/s asked), %d rounds of "
	    "%d s each\n", FLOOD_THREADS, RATE, ROUNDS, PHASE_S);
	printf("  idle   %7zu pings  median %6.1f us  p99 %7.1f us\n", ni,
	    bench_pct(idle, ni, 50) / 1e3, bench_pct(idle, ni, 99) / 1e3);
	printf("  flood  %7zu pings  median %6.1f us  p99 %7.1f us  "
	    "(p99 %.2fx idle)\n", nb, bench_pct(busy, nb, 50) / 1e3,
	    bench_pct(busy, nb, 99) / 1e3, (double)bench_pct(busy, nb,
	    99) / (double)bench_pct(idle, ni, 99));
	printf("  scrapes %lu answered (%.0f/s), %lu failed; the daemon "
	    "rendered %.0f and served %.0f from its newest render\n",
	    atomic_load(&scrapes), (double)atomic_load(&scrapes) /
	    ((double)flood_ns / 1e9), atomic_load(&scrape_errors),
	    sample(metrics, "kspec_scrapes_total{served=\"rendered\"} "),
	    sample(metrics, "kspec_scrapes_total{served=\"snapshot\"} "));
	e2e_cleanup(&d);
	return 0;
}
