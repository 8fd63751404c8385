/*
 * bench/fleet: N kspecd nodes, each with its own store, ask for one cold
 * key at the same moment (one client per node), with the remote tier (a
 * real redis-server on a Unix socket, every node signing and publishing,
 * the fleet-wide lease) and without it (the same nodes' twins without
 * --remote), in the same run: wall time until the last node has answered,
 * and compiles fleet-wide (what ran in the workers).  Trials alternate
 * the two fleets, a new cold key each; medians with min..max, after a
 * warm-up trial of each.
 */
#include <pthread.h>

#include "../../proto/entry.h"
#include "../../tests/e2e.h"
#include "../bench.h"

#define NODES 4
#define TRIALS 5

typedef struct {
	const e2e_daemon_t *d;
	int dim;
	pthread_barrier_t *go;
	int fd;
	int ok;
} ask_t;

static char dir[256], rsock[320], pub[320], sec[320];
static pid_t redis_pid;
static e2e_daemon_t remote[NODES], local[NODES];

static void die(const char *what)
{
	int i;

	fprintf(stderr, "fleet: %s\n", what);
	for (i = 0; i < NODES; i++) {
		e2e_cleanup(&remote[i]);
		e2e_cleanup(&local[i]);
	}
	if (redis_pid > 0)
		kill(redis_pid, SIGKILL);
	exit(1);
}

static void *ask(void *p)
{
	ask_t *a = p;
	char json[300];
	e2e_reply_t r;

	snprintf(json, sizeof json, "{\"op\":\"get\",\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"N\":%d,\"K\":%d}}", a->dim, a->dim);
	pthread_barrier_wait(a->go);
	a->ok = e2e_send(a->fd, json) == 0 && e2e_recv(a->fd, &r) == 0 &&
	    e2e_ok(&r);
	if (a->ok)
		e2e_reply_free(&r);
	return NULL;
}

/* Compiles that ran in D's workers. */
static double ran(const e2e_daemon_t *d)
{
	double n = e2e_compiles_ran(d->sock);

	if (n < 0)
		die("stats failed");
	return n;
}

/* One trial: every node of F asks for gemm N=K=DIM at once.  The wall
 * time in ms; *COMPILES, what the fleet compiled for it. */
static double trial(e2e_daemon_t *f, int dim, double *compiles)
{
	pthread_barrier_t go;
	pthread_t th[NODES];
	ask_t a[NODES];
	double before = 0, after = 0;
	uint64_t t0, t1;
	int i;

	for (i = 0; i < NODES; i++)
		before += ran(&f[i]);
	pthread_barrier_init(&go, NULL, NODES + 1);
	for (i = 0; i < NODES; i++) {
		a[i] = (ask_t){ &f[i], dim, &go, e2e_connect(f[i].sock), 0 };
		if (a[i].fd < 0)
			die("cannot connect to a node");
		pthread_create(&th[i], NULL, ask, &a[i]);
	}
	pthread_barrier_wait(&go);
	t0 = bench_ns();
	for (i = 0; i < NODES; i++)
		pthread_join(th[i], NULL);
	t1 = bench_ns();
	pthread_barrier_destroy(&go);
	for (i = 0; i < NODES; i++) {
		if (!a[i].ok)
			die("a get failed");
		close(a[i].fd);
	}
	/* The workers' counts are in once the replies are. */
	for (i = 0; i < NODES; i++)
		after += ran(&f[i]);
	*compiles = after - before;
	return (double)(t1 - t0) / 1e6;
}

static void start_redis(void)
{
	int i, fd;

	snprintf(rsock, sizeof rsock, "%s/redis.sock", dir);
	redis_pid = fork();
	if (redis_pid < 0)
		die("fork");
	if (redis_pid == 0) {
		int nul = open("/dev/null", O_WRONLY);

		dup2(nul, 1);
		dup2(nul, 2);
		execlp("redis-server", "redis-server", "--port", "0",
		    "--unixsocket", rsock, "--unixsocketperm", "700", "--save",
		    "", "--appendonly", "no", "--dir", dir, (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 1000; i++) {
		fd = e2e_connect(rsock);
		if (fd >= 0) {
			close(fd);
			return;
		}
		usleep(10000);
	}
	die("redis-server did not start (deploy/deps.sh installs it)");
}

static void start_fleets(void)
{
	char url[400];
	const char *with[] = { "--workers", "1", "--remote", url,
	    "--fleet-key", pub, "--fleet-sign-key", sec, "--remote-timeout",
	    "1000", NULL };
	const char *without[] = { "--workers", "1", NULL };
	int i, k;

	snprintf(url, sizeof url, "unix:%s", rsock);
	for (i = 0; i < NODES; i++) {
		if (e2e_start(&remote[i], with) || e2e_start(&local[i], without))
			die("a node did not start");
		/* Connected to Redis before the first trial. */
		for (k = 0; k < 500; k++) {
			e2e_reply_t r;
			int up;

			if (e2e_call(remote[i].sock, "{\"op\":\"stats\"}", &r))
				die("stats failed");
			up = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
			    cJSON_GetObjectItemCaseSensitive(r.h, "remote"),
			    "connected"));
			e2e_reply_free(&r);
			if (up)
				break;
			usleep(10000);
		}
	}
}

int main(void)
{
	double wr[TRIALS], wl[TRIALS], cr = 0, cl = 0, c, maxr = 0, minl = 1e9;
	char prefix[300], id[17], err[512];
	int t, i;

	if (ks_base_init() != KS_OK)
		return 1;
	snprintf(dir, sizeof dir, "/tmp/kspec-e2e-XXXXXX");
	if (!mkdtemp(dir))
		return 1;
	snprintf(prefix, sizeof prefix, "%s/fleet", dir);
	if (ks_fleet_keygen(prefix, id, err, sizeof err) != KS_OK)
		die(err);
	snprintf(pub, sizeof pub, "%s.public", prefix);
	snprintf(sec, sizeof sec, "%s.secret", prefix);
	start_redis();
	start_fleets();
	/* Warm-up: the workers' first compile, the connections. */
	trial(remote, 128, &c);
	trial(local, 128, &c);
	for (t = 0; t < TRIALS; t++) {
		wr[t] = trial(remote, 256 + 32 * t, &c);
		cr += c;
		if (c > maxr)
			maxr = c;
		wl[t] = trial(local, 256 + 32 * t, &c);
		cl += c;
		if (c < minl)
			minl = c;
	}
	printf("fleet: %d nodes (one worker each, own stores), each asking for "
	    "the same cold\ngemm M=1 f32 N=K=256..384 at once; %d trials "
	    "alternating, after a warm-up\n\n", NODES, TRIALS);
	printf("%-34s %10s %21s %16s\n", "fleet", "wall ms", "(min..max)",
	    "compiles/trial");
	printf("%-34s %10.1f", "with --remote (Redis, lease)",
	    bench_median(wr, TRIALS));
	printf(" %10.1f..%-10.1f %7.1f (max %.0f)\n", wr[0], wr[TRIALS - 1],
	    cr / TRIALS, maxr);
	printf("%-34s %10.1f", "without it", bench_median(wl, TRIALS));
	printf(" %10.1f..%-10.1f %7.1f (min %.0f)\n", wl[0], wl[TRIALS - 1],
	    cl / TRIALS, minl);
	for (i = 0; i < NODES; i++) {
		e2e_cleanup(&remote[i]);
		e2e_cleanup(&local[i]);
	}
	kill(redis_pid, SIGKILL);
	waitpid(redis_pid, NULL, 0);
	snprintf(prefix, sizeof prefix, "rm -rf '%s'", dir);
	if (system(prefix) != 0)
		fprintf(stderr, "fleet: could not remove %s\n", dir);
	return 0;
}
