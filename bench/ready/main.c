/*
 * bench/ready: what a ready check of a 200-spec deployment costs, every
 * spec cached (the case a startup script meets once it passes), beside a
 * ping on the same connection as the reference: the ready op by the
 * deployment's name, the same 200 specs as items, and the `kspec ready
 * NAME` process a startup script runs (beside `kspec ping`, the cost of
 * starting the CLI).  Medians with min..max, after a warm-up.
 */
#include "../../tests/e2e.h"
#include "../bench.h"

#define SPECS 200
#define TRIALS 201
#define PROCS 21

static e2e_daemon_t d;

static void die(const char *what)
{
	fprintf(stderr, "ready: %s\n", what);
	e2e_cleanup(&d);
	exit(1);
}

/* SPECS distinct cached-to-be gemm specs as a JSON array into OUT. */
static void specs_json(char *out, size_t len)
{
	size_t k;
	int i;

	k = (size_t)snprintf(out, len, "[");
	for (i = 0; i < SPECS && k < len; i++)
		k += (size_t)snprintf(out + k, len - k, "%s{\"kernel\":\"gemm\","
		    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
		    "\"N\":%d,\"K\":64}}", i ? "," : "", 8 * (i + 1));
	if (k + 2 >= len)
		die("specs do not fit");
	snprintf(out + k, len - k, "]");
}

/* One request on FD; its reply checked ok (and ready, for a ready). */
static void call(int fd, const char *json, int is_ready)
{
	e2e_reply_t r;

	if (e2e_send(fd, json) || e2e_recv(fd, &r) || !e2e_ok(&r))
		die("a request failed");
	if (is_ready && !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r.h,
	    "ready")))
		die("the deployment is not ready");
	e2e_reply_free(&r);
}

/* Median and spread in microseconds of TRIALS calls of JSON on FD. */
static void time_op(int fd, const char *name, const char *json, int is_ready)
{
	double us[TRIALS], med;
	uint64_t t0;
	int i;

	for (i = 0; i < 20; i++)
		call(fd, json, is_ready);
	for (i = 0; i < TRIALS; i++) {
		t0 = bench_ns();
		call(fd, json, is_ready);
		us[i] = (double)(bench_ns() - t0) / 1e3;
	}
	med = bench_median(us, TRIALS);
	printf("%-34s %10.1f %10.1f %10.1f\n", name, med, us[0],
	    us[TRIALS - 1]);
}

/* Median and spread in ms of PROCS runs of the CLI with ARGS. */
static void time_cli(const char *name, const char *args)
{
	char cmd[1024];
	double ms[PROCS], med;
	uint64_t t0;
	int i;

	/* From the daemon's folder: a file named like the deployment in
	 * the current one would be read as a manifest. */
	snprintf(cmd, sizeof cmd, "cd %s && %s/kspec --socket %s %s "
	    ">/dev/null", d.dir, e2e_build_dir(), d.sock, args);
	if (system(cmd) != 0)
		die("the CLI failed");
	for (i = 0; i < PROCS; i++) {
		t0 = bench_ns();
		if (system(cmd) != 0)
			die("the CLI failed");
		ms[i] = (double)(bench_ns() - t0) / 1e6;
	}
	med = bench_median(ms, PROCS);
	printf("%-34s %10.2f %10.2f %10.2f\n", name, med, ms[0],
	    ms[PROCS - 1]);
}

int main(void)
{
	static const char *const extra[] = { "--workers", "2", NULL };
	static char specs[SPECS * 128], json[SPECS * 128 + 128];
	e2e_reply_t r;
	int fd;

	if (e2e_start(&d, extra))
		die("cannot start kspecd");
	specs_json(specs, sizeof specs);
	snprintf(json, sizeof json, "{\"op\":\"deploy\",\"name\":\"bench\","
	    "\"items\":%s}", specs);
	if (e2e_call(d.sock, json, &r) || !e2e_ok(&r))
		die("deploy failed");
	e2e_reply_free(&r);
	snprintf(json, sizeof json, "{\"op\":\"warm\",\"items\":%s}", specs);
	if (e2e_call(d.sock, json, &r) || !e2e_ok(&r))
		die("warm failed");
	e2e_reply_free(&r);
	fd = e2e_connect(d.sock);
	if (fd < 0)
		die("cannot connect");
	printf("ready check of a %d-spec deployment, every spec cached "
	    "(%d trials; the CLI %d runs)\n", SPECS, TRIALS, PROCS);
	printf("%-34s %10s %10s %10s\n", "request", "median", "min", "max");
	printf("%-34s %10s %10s %10s\n", "(us, one connection)", "", "", "");
	time_op(fd, "ping (reference)", "{\"op\":\"ping\"}", 0);
	time_op(fd, "ready by deployment name",
	    "{\"op\":\"ready\",\"deployment\":\"bench\"}", 1);
	snprintf(json, sizeof json, "{\"op\":\"ready\",\"items\":%s}", specs);
	time_op(fd, "ready with the 200 specs as items", json, 1);
	close(fd);
	printf("%-34s %10s %10s %10s\n", "(ms, a process each)", "", "", "");
	time_cli("kspec ping (reference)", "ping");
	time_cli("kspec ready bench", "ready bench");
	if (e2e_stop(&d))
		die("kspecd did not stop cleanly");
	e2e_cleanup(&d);
	return 0;
}
