/*
 * bench/restart: what a restart costs a client whose kernel is in the
 * store.  TRIALS times: kspecd is stopped and exec'd again on the same
 * store, and from the fork (just before the exec) the client connects as
 * soon as the socket accepts and sends a get of the stored kernel.
 * Reported side by side, per restart: the disk hit's reply, and the
 * moment this start's probe of the compilers is in (stats' probe.state
 * "done", polled every millisecond on another connection), which is when
 * a restart used to answer its first request.  Medians with min..max;
 * the first restart is a warm-up and not counted.
 */
#include "../../tests/e2e.h"
#include "../bench.h"

#define TRIALS 10

static e2e_daemon_t d;

static void die(const char *what)
{
	fprintf(stderr, "restart: %s\n", what);
	e2e_cleanup(&d);
	exit(1);
}

static const char GET[] = "{\"op\":\"get\",\"id\":1,\"kernel\":\"gemm\","
    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,\"N\":4096,"
    "\"K\":4096},\"return\":\"meta\"}";

/* Execs kspecd on D's socket and store; the fork's time in *T0. */
static void spawn(uint64_t *t0)
{
	char bin[512];

	snprintf(bin, sizeof bin, "%s/kspecd", e2e_build_dir());
	unlink(d.sock);
	*t0 = bench_ns();
	d.pid = fork();
	if (d.pid < 0)
		die("fork");
	if (d.pid == 0) {
		int nul = open("/dev/null", O_WRONLY);

		dup2(nul, 1);
		dup2(nul, 2);
		execl(bin, bin, "--socket", d.sock, "--store", d.store,
		    (char *)NULL);
		_exit(127);
	}
}

/* One restart: ms from the fork to the get's reply, and to the probe. */
static void trial(double *hit_ms, double *probe_ms)
{
	e2e_reply_t r;
	uint64_t t0, t;
	int fd = -1, i;

	spawn(&t0);
	for (i = 0; i < 30000 && fd < 0; i++) {
		fd = e2e_connect(d.sock);
		if (fd < 0)
			usleep(200);
	}
	if (fd < 0)
		die("the socket never accepted");
	if (e2e_send(fd, GET) || e2e_recv(fd, &r) || !e2e_ok(&r))
		die("the get failed");
	t = bench_ns();
	if (strcmp(e2e_str(&r, "source"), "disk") != 0)
		die("the get was no disk hit");
	e2e_reply_free(&r);
	close(fd);
	*hit_ms = (double)(t - t0) / 1e6;
	for (i = 0; i < 60000 && !e2e_probed(d.sock); i++)
		usleep(1000);
	*probe_ms = (double)(bench_ns() - t0) / 1e6;
	if (e2e_stop(&d) != 0)
		die("kspecd did not stop cleanly");
}

static void row(const char *what, double *v, int n)
{
	double lo = v[0], hi = v[0];
	int i;

	for (i = 1; i < n; i++) {
		lo = v[i] < lo ? v[i] : lo;
		hi = v[i] > hi ? v[i] : hi;
	}
	printf("  %-44s %8.1f ms  (%.1f..%.1f)\n", what, bench_median(v, n),
	    lo, hi);
}

int main(void)
{
	double hit[TRIALS], probe[TRIALS], w1, w2;
	e2e_reply_t r;
	int i;

	memset(&d, 0, sizeof d);
	if (e2e_start(&d, NULL) != 0)
		die("kspecd did not start");
	if (e2e_call(d.sock, GET, &r) || !e2e_ok(&r))
		die("the first get failed");
	e2e_reply_free(&r);
	if (e2e_stop(&d) != 0)
		die("kspecd did not stop");
	trial(&w1, &w2);                    /* warm-up */
	for (i = 0; i < TRIALS; i++)
		trial(&hit[i], &probe[i]);
	printf("restart: %d restarts of kspecd on a store holding the kernel "
	    "(gemm f32 1x4096x4096, cpu), from the fork\n", TRIALS);
	row("disk hit answered", hit, TRIALS);
	row("this start's probe in (the old first answer)", probe, TRIALS);
	e2e_cleanup(&d);
	return 0;
}
