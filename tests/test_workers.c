/*
 * The compile workers, end to end: a real kspecd whose workers are killed,
 * stopped and starved by the tests, through the pids stats reports, and
 * through the test faults of exec/worker.c (KSPEC_TEST_FAULTS, set here
 * for one daemon at a time).  Deadlines are generous liveness bounds; the
 * speeds are bench/compile's business.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sqlite3.h>

#include "e2e.h"

static e2e_daemon_t D;

static void down(void)
{
	e2e_cleanup(&D);
	unsetenv("KSPEC_TEST_FAULTS");
}

TestSuite(workers, .fini = down, .timeout = 120);

/* Starts the daemon with FAULTS (NULL: none) and EXTRA arguments, in
 * D.dir when it is set (else a fresh one). */
static void start(const char *faults, const char *const *extra)
{
	char dir[sizeof D.dir];

	snprintf(dir, sizeof dir, "%s", D.dir);
	memset(&D, 0, sizeof D);
	snprintf(D.dir, sizeof D.dir, "%s", dir);
	D.program = faults ? E2E_PLANT : NULL;  /* the faults' build */
	if (faults)
		setenv("KSPEC_TEST_FAULTS", faults, 1);
	else
		unsetenv("KSPEC_TEST_FAULTS");
	cr_assert_eq(e2e_start(&D, extra), 0, "kspecd did not start");
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A cold cpu gemm get whose N picks a test fault. */
static const char *get_n(int id, int n)
{
	static char buf[512];

	snprintf(buf, sizeof buf, "{\"op\":\"get\",\"id\":%d,\"kernel\":"
	    "\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{"
	    "\"M\":1,\"N\":%d,\"K\":64},\"return\":\"meta\"}", id, n);
	return buf;
}

static cJSON *stats(void)
{
	e2e_reply_t r;
	cJSON *h;

	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"stats\"}", &r), 0);
	h = r.h;
	r.h = NULL;
	e2e_reply_free(&r);
	return h;
}

static double counter(const char *name)
{
	return e2e_stat(D.sock, name);
}

/* Pids of the workers in STATE ("compiling", "idle", NULL: any); returns
 * how many, at most MAX. */
static int worker_pids(const char *state, pid_t *pids, int max)
{
	cJSON *s = stats();
	const cJSON *w;
	int n = 0;

	cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(s, "workers")) {
		const cJSON *st = cJSON_GetObjectItemCaseSensitive(w, "state");

		if (n < max && (!state || (cJSON_IsString(st) &&
		    strcmp(st->valuestring, state) == 0)))
			pids[n++] = (pid_t)e2e_num(w, "pid");
	}
	cJSON_Delete(s);
	return n;
}

/* How many worker processes the daemon keeps: --workers and the reserve
 * (stats' limits). */
static int worker_count(void)
{
	cJSON *s = stats();
	const cJSON *l = cJSON_GetObjectItemCaseSensitive(s, "limits");
	int n = (int)(e2e_num(l, "workers") + e2e_num(l, "reserve_workers"));

	cJSON_Delete(s);
	return n;
}

/* Waits until the daemon's every worker is ready; returns their pids. */
static int wait_ready(pid_t *pids, int max)
{
	int i, n = worker_count();

	for (i = 0; i < 500 && worker_pids("idle", pids, max) < n; i++)
		usleep(10000);
	return worker_pids("idle", pids, max);
}

/* Waits until N workers are compiling at once; returns their pids. */
static int wait_compiling(int n, pid_t *pids, double deadline_ms)
{
	double t0 = now_ms();
	int k;

	while ((k = worker_pids("compiling", pids, 8)) < n) {
		if (now_ms() - t0 > deadline_ms)
			return k;
		usleep(20000);
	}
	return k;
}

/* Receives one reply within MS milliseconds (-1: none came). */
static int recv_within(int fd, e2e_reply_t *r, int ms)
{
	struct pollfd p = { fd, POLLIN, 0 };

	if (poll(&p, 1, ms) != 1)
		return -1;
	return e2e_recv(fd, r);
}

static int pid_gone(pid_t pid)
{
	char path[64], st = 0;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	f = fopen(path, "r");
	if (!f)
		return 1;
	/* "pid (comm) S ...": a zombie has ended too. */
	if (fscanf(f, "%*d (%*[^)]) %c", &st) != 1)
		st = 0;
	fclose(f);
	return st == 'Z';
}

/* 1 when the reply's header contains TEXT. */
static int says(const e2e_reply_t *r, const char *text)
{
	char *h = cJSON_PrintUnformatted(r->h);
	int yes = h && strstr(h, text);

	free(h);
	return yes;
}

static void still_serving(void)
{
	e2e_reply_t r;

	cr_assert_eq(e2e_call(D.sock, get_n(9, 48), &r), 0);
	cr_assert(e2e_ok(&r), "%s", cJSON_PrintUnformatted(r.h));
	e2e_reply_free(&r);
}

Test(workers, killed_worker_is_retried_and_every_waiter_answered)
{
	static const char *const extra[] = { "--workers", "2", NULL };
	char faults[512];
	pid_t busy[8], after[8];
	e2e_reply_t r;
	double t;
	int a, b, c, i, n;

	/* The first worker to take N=4104 hangs; the retry does not. */
	snprintf(D.dir, sizeof D.dir, "/tmp/kspec-e2e-XXXXXX");
	cr_assert(mkdtemp(D.dir));
	snprintf(faults, sizeof faults, "stall:N=4104@%s/once", D.dir);
	start(faults, extra);
	a = e2e_connect(D.sock);
	b = e2e_connect(D.sock);
	c = e2e_connect(D.sock);
	cr_assert(a >= 0 && b >= 0 && c >= 0);
	cr_assert_eq(e2e_send(a, get_n(1, 4104)), 0);
	cr_assert_eq(wait_compiling(1, busy, 10000), 1);
	cr_assert_eq(e2e_send(b, get_n(2, 4104)), 0);   /* joins */
	/* A hung compile takes nobody else's turn. */
	t = now_ms();
	cr_assert_eq(e2e_send(c, "{\"op\":\"ping\",\"id\":3}"), 0);
	cr_assert_eq(recv_within(c, &r, 2000), 0, "no pong while a compile "
	    "hangs");
	cr_assert(e2e_ok(&r));
	e2e_reply_free(&r);
	cr_assert_lt(now_ms() - t, 2000);
	usleep(100000);
	cr_assert_eq(counter("joins"), 1);

	cr_assert_eq(kill(busy[0], SIGKILL), 0);
	t = now_ms();
	cr_assert_eq(recv_within(a, &r, 5000), 0, "first waiter unanswered");
	cr_assert(e2e_ok(&r), "%s", cJSON_PrintUnformatted(r.h));
	cr_assert_str_eq(e2e_str(&r, "source"), "compiled");
	e2e_reply_free(&r);
	cr_assert_eq(recv_within(b, &r, 5000), 0, "joined waiter unanswered");
	cr_assert(e2e_ok(&r), "%s", cJSON_PrintUnformatted(r.h));
	cr_assert_str_eq(e2e_str(&r, "source"), "joined");
	e2e_reply_free(&r);
	cr_assert_lt(now_ms() - t, 5000);
	cr_log_info("waiters answered %.0f ms after the kill", now_ms() - t);

	cr_assert_eq(counter("worker_crashes"), 1);
	cr_assert_eq(counter("worker_retries"), 1);
	/* The next get is a hit; a replacement worker runs. */
	cr_assert_eq(e2e_send(c, get_n(4, 4104)), 0);
	cr_assert_eq(recv_within(c, &r, 5000), 0);
	cr_assert_str_eq(e2e_str(&r, "source"), "memory");
	e2e_reply_free(&r);
	for (i = 0; i < 200; i++) {
		n = worker_pids(NULL, after, 8);
		if (n == 3 && after[0] != busy[0] && after[1] != busy[0] &&
		    after[2] != busy[0])
			break;
		usleep(20000);
	}
	/* Two workers and the reserve. */
	cr_assert_eq(n, 3, "the killed worker was not replaced");
	cr_assert(after[0] != busy[0] && after[1] != busy[0] &&
	    after[2] != busy[0]);
	cr_assert(pid_gone(busy[0]));
	close(a);
	close(b);
	close(c);
}

Test(workers, compile_that_crashes_twice_fails_naming_the_signal)
{
	e2e_reply_t r;

	start("crash:N=4108", NULL);
	cr_assert_eq(e2e_call(D.sock, get_n(1, 4108), &r), 0);
	cr_assert_str_eq(e2e_code(&r), "E_COMPILE_CRASHED");
	cr_assert(says(&r, "signal 11"), "%s", cJSON_PrintUnformatted(r.h));
	e2e_reply_free(&r);
	cr_assert_eq(counter("worker_crashes"), 2);
	cr_assert_eq(counter("worker_retries"), 1);
	/* Not recompiled in a loop: the next ask gets the recent failure. */
	cr_assert_eq(e2e_call(D.sock, get_n(2, 4108), &r), 0);
	cr_assert_str_eq(e2e_code(&r), "E_COMPILE_CRASHED");
	cr_assert(says(&r, "recent failure"));
	e2e_reply_free(&r);
	cr_assert_eq(counter("negative_hits"), 1);
	cr_assert_eq(counter("worker_crashes"), 2);
	still_serving();
}

Test(workers, stopped_worker_is_killed_at_the_compile_timeout)
{
	static const char *const extra[] = { "--compile-timeout", "3",
	    "--workers", "2", NULL };
	pid_t busy[8];
	e2e_reply_t r;
	double t0;
	int fd;

	start("delay/2000:N=4120", extra);
	fd = e2e_connect(D.sock);
	cr_assert_geq(fd, 0);
	t0 = now_ms();
	cr_assert_eq(e2e_send(fd, get_n(1, 4120)), 0);
	cr_assert_eq(wait_compiling(1, busy, 5000), 1);
	/* The worker and the fork that compiles (its process group: a
	 * worker leads its own session). */
	cr_assert_eq(kill(-busy[0], SIGSTOP), 0);
	cr_assert_eq(recv_within(fd, &r, 10000), 0, "no reply to a compile "
	    "whose worker stopped");
	cr_log_info("E_COMPILE_TIMEOUT %.0f ms after the get", now_ms() - t0);
	cr_assert_str_eq(e2e_code(&r), "E_COMPILE_TIMEOUT", "%s",
	    cJSON_PrintUnformatted(r.h));
	cr_assert(says(&r, "3 s"));
	e2e_reply_free(&r);
	close(fd);
	cr_assert_eq(counter("worker_timeouts"), 1);
	cr_assert(pid_gone(busy[0]), "the stopped worker is still there");
	still_serving();
}

Test(workers, runaway_compile_ends_at_the_worker_memory_limit)
{
	static const char *const extra[] = { "--worker-memory", "256M", NULL };
	e2e_reply_t r;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	cr_skip_test("a sanitizer's shadow memory rules out a memory limit "
	    "(the worker sets none in this build)");
#endif
	start("oom:N=4112", extra);
	cr_assert_eq(e2e_call(D.sock, get_n(1, 4112), &r), 0);
	cr_assert_str_eq(e2e_code(&r), "E_COMPILE_OOM", "%s",
	    cJSON_PrintUnformatted(r.h));
	e2e_reply_free(&r);
	cr_assert_eq(counter("worker_ooms"), 1);
	cr_assert_eq(counter("worker_retries"), 0);
	still_serving();
}

Test(workers, two_workers_compile_at_the_same_time)
{
	static const char *const extra[] = { "--workers", "2", NULL };
	pid_t busy[8];
	e2e_reply_t r;
	int a, b;

	start("delay/1500:N=4124,delay/1500:N=4128", extra);
	a = e2e_connect(D.sock);
	b = e2e_connect(D.sock);
	cr_assert(a >= 0 && b >= 0);
	cr_assert_eq(e2e_send(a, get_n(1, 4124)), 0);
	cr_assert_eq(e2e_send(b, get_n(2, 4128)), 0);
	cr_assert_eq(wait_compiling(2, busy, 10000), 2, "the two compiles "
	    "never ran at once");
	cr_assert_neq(busy[0], busy[1]);
	cr_assert_eq(recv_within(a, &r, 10000), 0);
	cr_assert(e2e_ok(&r));
	e2e_reply_free(&r);
	cr_assert_eq(recv_within(b, &r, 10000), 0);
	cr_assert(e2e_ok(&r));
	e2e_reply_free(&r);
	close(a);
	close(b);
}

/* The error replies of OP ("none": of no request) in stats. */
static double op_errors(const char *op)
{
	cJSON *s = stats();
	double v = e2e_num(cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(s, "requests_by_op"), op),
	    "errors");

	cJSON_Delete(s);
	return v;
}

/*
 * An error answered after its dispatch (a compile that failed, answered
 * when its worker reports) counts under its request's op, which travels
 * with the waiting request; an error of the connection layer that comes
 * between (a frame that cannot be read, while the compile runs) counts
 * under none.
 */
Test(workers, a_late_error_counts_under_its_requests_op)
{
	e2e_reply_t r;
	pid_t busy[8];
	int a;

	start("delay/1500:N=300,error:N=300", NULL);
	a = e2e_connect(D.sock);
	cr_assert_geq(a, 0);
	cr_assert_eq(e2e_send(a, get_n(1, 300)), 0);
	cr_assert_eq(wait_compiling(1, busy, 10000), 1);
	cr_assert_eq(e2e_bad_frame(D.sock), 0);
	cr_assert_eq(recv_within(a, &r, 30000), 0);
	cr_assert_str_eq(e2e_code(&r), "E_COMPILE");
	e2e_reply_free(&r);
	close(a);
	cr_assert_eq(op_errors("get"), 1);
	cr_assert_eq(op_errors("none"), 1);
}

/* 1 when FD has something to read now. */
static int readable(int fd)
{
	struct pollfd p = { fd, POLLIN, 0 };

	return poll(&p, 1, 0) == 1;
}

/*
 * The reserve: one worker, a client with a backlog whose first compile
 * holds until the test releases it, and another client's cold get.  The
 * backlog holds the one ordinary worker and never the reserve; the lone
 * get runs on the reserve and is answered while the backlog's first
 * compile is still held (without the reserve it would wait for that
 * compile, which ends only when the test says).
 */
Test(workers, a_lone_get_runs_on_the_reserve_beside_another_clients_backlog)
{
	static const char *const extra[] = { "--workers", "1", NULL };
	char faults[sizeof D.dir + 32], release[sizeof D.dir + 16];
	int heavy, light, i, fd;
	pid_t busy[8];
	e2e_reply_t r;

	snprintf(D.dir, sizeof D.dir, "/tmp/kspec-e2e-XXXXXX");
	cr_assert_not_null(mkdtemp(D.dir));
	snprintf(release, sizeof release, "%s/release", D.dir);
	snprintf(faults, sizeof faults, "hold/%s:N=4132", release);
	start(faults, extra);
	heavy = e2e_connect(D.sock);
	light = e2e_connect(D.sock);
	cr_assert(heavy >= 0 && light >= 0);
	for (i = 0; i < 4; i++)
		cr_assert_eq(e2e_send(heavy, get_n(i, 4132 + 4 * i)), 0);
	cr_assert_eq(wait_compiling(1, busy, 10000), 1);
	usleep(200000);
	cr_assert_eq(worker_pids("compiling", busy, 8), 1, "the backlog took "
	    "the reserve");
	cr_assert_eq(counter("reserve_compiles"), 0);

	cr_assert_eq(e2e_send(light, get_n(100, 5000)), 0);
	cr_assert_eq(recv_within(light, &r, 30000), 0, "the lone get waited "
	    "for the backlog's held compile");
	cr_assert(e2e_ok(&r), "%s", cJSON_PrintUnformatted(r.h));
	e2e_reply_free(&r);
	cr_assert(!readable(heavy), "the backlog was answered before its "
	    "first compile was released");
	cr_assert_eq(counter("reserve_compiles"), 1);
	fd = open(release, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	cr_assert(fd >= 0);
	close(fd);
	for (i = 0; i < 4; i++) {
		cr_assert_eq(recv_within(heavy, &r, 60000), 0);
		cr_assert(e2e_ok(&r));
		e2e_reply_free(&r);
	}
	/* The backlog ran on the ordinary worker alone. */
	cr_assert_eq(counter("reserve_compiles"), 1);
	close(heavy);
	close(light);
}

/*
 * The liveness check: every idle worker is stopped (SIGSTOP), as a hung
 * or frozen worker would be, and a get comes.  Each is pinged before it
 * is given the job, misses the ping's deadline, and is killed and
 * replaced; a replacement compiles the get.  Without the check the job
 * goes to a stopped worker and waits for the compile deadline.
 */
Test(workers, a_stopped_idle_worker_is_found_by_a_ping_before_it_gets_a_job)
{
	static const char *const extra[] = { "--workers", "1",
	    "--compile-timeout", "60", NULL };
	pid_t idle[8];
	e2e_reply_t r;
	double t;
	int fd, i, n;

	start(NULL, extra);
	n = wait_ready(idle, 8);
	cr_assert_eq(n, worker_count());
	for (i = 0; i < n; i++)
		cr_assert_eq(kill(idle[i], SIGSTOP), 0);
	fd = e2e_connect(D.sock);
	cr_assert_geq(fd, 0);
	t = now_ms();
	cr_assert_eq(e2e_send(fd, get_n(1, 4160)), 0);
	cr_assert_eq(recv_within(fd, &r, 20000), 0, "no reply: the job went "
	    "to a stopped worker");
	cr_log_info("the get answered in %.0f ms", now_ms() - t);
	cr_assert(e2e_ok(&r), "%s", cJSON_PrintUnformatted(r.h));
	cr_assert_str_eq(e2e_str(&r, "source"), "compiled");
	e2e_reply_free(&r);
	close(fd);
	cr_assert_eq(counter("worker_unresponsive"), n);
	cr_assert_eq(counter("worker_timeouts"), 0);
	cr_assert_eq(counter("worker_crashes"), 0);
	for (i = 0; i < n; i++)
		cr_assert(pid_gone(idle[i]), "a stopped worker is still there");
	still_serving();
}

Test(workers, compile_ms_is_the_compile_and_queue_time_is_separate)
{
	static const char *const extra[] = { "--workers", "1", NULL };
	e2e_reply_t r;
	double t0, waited, compile_ms;
	int a;

	/* One client's two gets: the second waits for the first (a lone
	 * get of another client would run on the reserve). */
	start("delay/1000:N=4140", extra);
	a = e2e_connect(D.sock);
	cr_assert_eq(e2e_send(a, get_n(1, 4140)), 0);
	usleep(100000);
	t0 = now_ms();
	cr_assert_eq(e2e_send(a, get_n(2, 4144)), 0);
	cr_assert_eq(recv_within(a, &r, 20000), 0);
	e2e_reply_free(&r);
	cr_assert_eq(recv_within(a, &r, 20000), 0);
	waited = now_ms() - t0;
	compile_ms = e2e_num(r.h, "compile_ms");
	e2e_reply_free(&r);
	cr_log_info("queued get: %.0f ms in all, compile_ms %.1f", waited,
	    compile_ms);
	cr_assert_gt(compile_ms, 0);
	cr_assert_lt(compile_ms + 500, waited, "compile_ms counts the wait");
	cr_assert_gt(counter("queue_ms_total"), 500);
	close(a);
}

/* "Field:\t..." of /proc/PID/status. */
static void proc_status(pid_t pid, const char *field, char *out, size_t len)
{
	char path[64], line[256];
	FILE *f;

	out[0] = '\0';
	snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
	f = fopen(path, "r");
	cr_assert(f);
	while (fgets(line, sizeof line, f))
		if (strncmp(line, field, strlen(field)) == 0 &&
		    line[strlen(field)] == ':')
			snprintf(out, len, "%s", line + strlen(field) + 1);
	fclose(f);
}

static long stat_field(pid_t pid, int n)
{
	char path[64], buf[1024], *p;
	long v = -1;
	int i;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	f = fopen(path, "r");
	cr_assert(f);
	cr_assert(fgets(buf, sizeof buf, f));
	fclose(f);
	p = strrchr(buf, ')') + 2;      /* field 3 */
	for (i = 3; i < n && p; i++)
		p = strchr(p, ' ') ? strchr(p, ' ') + 1 : NULL;
	if (p)
		v = strtol(p, NULL, 10);
	return v;
}

Test(workers, workers_are_children_in_their_own_session_with_one_channel)
{
	static const char *const extra[] = { "--workers", "2", NULL };
	char path[64], mask[256];
	pid_t pids[8];
	struct dirent *e;
	int i, n, fds;
	DIR *d;

	start(NULL, extra);
	n = wait_ready(pids, 8);
	cr_assert_eq(n, 3, "two workers and the reserve");
	for (i = 0; i < n; i++) {
		cr_assert_eq(stat_field(pids[i], 4), D.pid, "not a child");
		cr_assert_neq(stat_field(pids[i], 6), stat_field(D.pid, 6),
		    "shares the daemon's session");
		proc_status(pids[i], "SigBlk", mask, sizeof mask);
		cr_assert_eq(strtoull(mask, NULL, 16), 0, "signals blocked");
		snprintf(path, sizeof path, "/proc/%ld/fd", (long)pids[i]);
		d = opendir(path);
		cr_assert(d);
		fds = 0;
		while ((e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			cr_assert_leq(atoi(e->d_name), 3, "worker holds fd %s",
			    e->d_name);
			fds++;
		}
		closedir(d);
		cr_assert_eq(fds, 4);
	}
}

Test(workers, killing_the_daemon_leaves_no_worker_behind)
{
	static const char *const extra[] = { "--workers", "2", NULL };
	pid_t pids[8];
	int i, n, st;

	start(NULL, extra);
	n = worker_pids(NULL, pids, 8);
	cr_assert_eq(n, 3, "two workers and the reserve");
	kill(D.pid, SIGKILL);
	waitpid(D.pid, &st, 0);
	D.pid = 0;
	for (i = 0; i < 250 && !(pid_gone(pids[0]) && pid_gone(pids[1]) &&
	    pid_gone(pids[2])); i++)
		usleep(20000);
	cr_assert(pid_gone(pids[0]) && pid_gone(pids[1]) && pid_gone(pids[2]),
	    "orphans left");
}

Test(workers, worker_is_replaced_after_its_job_limit)
{
	static const char *const extra[] = { "--workers", "1",
	    "--worker-jobs", "2", NULL };
	pid_t first[8], now[8], gone[2];
	e2e_reply_t r;
	int i, j, n, ngone = 0, alarms;

	start(NULL, extra);
	n = wait_ready(first, 8);
	cr_assert_eq(n, 2, "the worker and the reserve");
	/* Three jobs on two workers: one of them does two. */
	for (i = 0; i < 3; i++) {
		cr_assert_eq(e2e_call(D.sock, get_n(i, 64 + 8 * i), &r), 0);
		cr_assert(e2e_ok(&r), "%s", cJSON_PrintUnformatted(r.h));
		e2e_reply_free(&r);
	}
	cr_assert_eq(counter("worker_recycles"), 1);
	for (i = 0; i < 250 && worker_pids(NULL, now, 8) != 2; i++)
		usleep(20000);
	cr_assert_eq(worker_pids(NULL, now, 8), 2, "not replaced");
	for (i = 0; i < 2; i++) {
		for (j = 0; j < 2 && now[j] != first[i]; j++)
			;
		if (j == 2)
			gone[ngone++] = first[i];
	}
	/* An idle worker that misses its liveness ping (a slow machine, a
	 * sanitizer build) is replaced too, and counted: the recycled one
	 * is the worker gone beyond those. */
	alarms = (int)counter("worker_unresponsive");
	cr_assert_eq(ngone, 1 + alarms, "%d workers replaced, %d of them "
	    "after a missed ping", ngone, alarms);
	for (i = 0; i < 250 && !pid_gone(gone[0]); i++)
		usleep(20000);
	cr_assert(pid_gone(gone[0]), "the retired worker did not leave");
}

/* Holds the store's write lock from another connection, as an operator's
 * sqlite3 shell would, for MS milliseconds. */
typedef struct {
	const char *path;
	int ms;
	pthread_barrier_t *locked;
} holder_t;

static void *hold_lock(void *p)
{
	holder_t *h = p;
	sqlite3 *db = NULL;

	cr_assert_eq(sqlite3_open(h->path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 5000);
	cr_assert_eq(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL),
	    SQLITE_OK);
	pthread_barrier_wait(h->locked);
	usleep((useconds_t)h->ms * 1000);
	sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	sqlite3_close(db);
	return NULL;
}

Test(workers, a_held_store_write_lock_stalls_no_request)
{
	pthread_barrier_t locked;
	pthread_t th;
	holder_t h;
	e2e_reply_t r;
	double t;
	int i;

	start(NULL, NULL);
	/* Two entries on disk, none in memory: restart. */
	for (i = 0; i < 2; i++) {
		cr_assert_eq(e2e_call(D.sock, get_n(i, 96 + 8 * i), &r), 0);
		e2e_reply_free(&r);
	}
	cr_assert_eq(e2e_stop(&D), 0);
	cr_assert_eq(e2e_start(&D, NULL), 0);
	pthread_barrier_init(&locked, NULL, 2);
	h.path = D.store;
	h.ms = 3000;
	h.locked = &locked;
	pthread_create(&th, NULL, hold_lock, &h);
	pthread_barrier_wait(&locked);
	/* A disk hit (its touch, then the flush timer, need the writer), a
	 * compile (its put needs the writer), a memory hit, a ping: all
	 * answered while the lock is held. */
	t = now_ms();
	cr_assert_eq(e2e_call(D.sock, get_n(1, 96), &r), 0);
	cr_assert_str_eq(e2e_str(&r, "source"), "disk");
	e2e_reply_free(&r);
	cr_assert_eq(e2e_call(D.sock, get_n(2, 200), &r), 0);
	cr_assert_str_eq(e2e_str(&r, "source"), "compiled");
	e2e_reply_free(&r);
	usleep(1200000);            /* past a flush of the touches */
	cr_assert_eq(e2e_call(D.sock, get_n(3, 96), &r), 0);
	cr_assert_str_eq(e2e_str(&r, "source"), "memory");
	e2e_reply_free(&r);
	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"ping\"}", &r), 0);
	e2e_reply_free(&r);
	cr_log_info("answered in %.0f ms with the write lock held",
	    now_ms() - t);
	cr_assert_lt(now_ms() - t, 2800, "a request waited for the lock");
	pthread_join(th, NULL);
	/* The writer caught up: the compile is on disk. */
	cr_assert_eq(e2e_stop(&D), 0);
	cr_assert_eq(e2e_start(&D, NULL), 0);
	cr_assert_eq(e2e_call(D.sock, get_n(4, 200), &r), 0);
	cr_assert_str_eq(e2e_str(&r, "source"), "disk");
	e2e_reply_free(&r);
}

Test(workers, a_missing_tmpdir_is_an_io_error_not_a_lost_connection)
{
	e2e_reply_t r;
	char *msg;

	setenv("TMPDIR", "/nonexistent-kspec-tmp", 1);
	start(NULL, NULL);
	unsetenv("TMPDIR");
	cr_assert_eq(e2e_call(D.sock, get_n(1, 72), &r), 0);
	msg = cJSON_PrintUnformatted(r.h);
	cr_assert_str_eq(e2e_code(&r), "E_IO", "%s", msg);
	cr_assert(strstr(msg, "/nonexistent-kspec-tmp"), "%s", msg);
	free(msg);
	e2e_reply_free(&r);
}

/*
 * A key compiles to the same bytes whatever its worker compiled before:
 * every compile runs in a fork of the worker as it started.  (Compiled in
 * the worker itself, this softmax took other register choices after some
 * histories: 3 different artifacts in 25 tries; this test caught it in
 * most runs.)
 */
Test(workers, a_key_compiles_to_the_same_bytes_after_any_history)
{
	static const char *const extra[] = { "--workers", "1", NULL };
	static const char *const before[] = {
		"\"kernel\":\"gemm\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
		    "\"N\":64,\"K\":64}",
		"\"kernel\":\"rmsnorm\",\"dtype\":\"f16\",\"mode\":\"fast\","
		    "\"shape\":{\"H\":128},\"dynamic\":[\"R\"]",
		"\"kernel\":\"softmax\",\"dtype\":\"f32\",\"shape\":{\"R\":2,"
		    "\"L\":32}",
		"\"kernel\":\"gemm\",\"target\":\"x86-64\",\"dtype\":\"f32\","
		    "\"shape\":{\"M\":1,\"N\":64,\"K\":64}",
	};
	char first[80] = "", req[400];
	e2e_reply_t r;
	int i, k;

	start(NULL, extra);
	for (i = 0; i < 16; i++) {
		/* A history: a subset of the others (bits of I), in a
		 * rotated order. */
		for (k = 0; k < 4; k++) {
			if (!(i >> k & 1))
				continue;
			snprintf(req, sizeof req, "{\"op\":\"get\",\"backend\":"
			    "\"cpu\",%s,\"return\":\"meta\"}",
			    before[(i + k) % 4]);
			cr_assert_eq(e2e_call(D.sock, req, &r), 0);
			cr_assert(e2e_ok(&r), "%s", e2e_code(&r));
			e2e_reply_free(&r);
		}
		cr_assert_eq(e2e_call(D.sock, "{\"op\":\"get\",\"kernel\":"
		    "\"softmax\",\"backend\":\"cpu\",\"target\":\"x86-64\","
		    "\"dtype\":\"f32\",\"shape\":{\"R\":2,\"L\":32},"
		    "\"return\":\"meta\"}", &r), 0);
		cr_assert(e2e_ok(&r), "%s", e2e_code(&r));
		cr_assert_str_eq(e2e_str(&r, "source"), "compiled");
		if (!first[0])
			snprintf(first, sizeof first, "%s",
			    e2e_str(&r, "artifact"));
		cr_assert_str_eq(e2e_str(&r, "artifact"), first,
		    "history %d compiled other bytes", i);
		e2e_reply_free(&r);
		cr_assert_eq(e2e_call(D.sock, "{\"op\":\"evict\",\"all\":true}",
		    &r), 0);
		cr_assert(e2e_ok(&r), "%s", e2e_code(&r));
		e2e_reply_free(&r);
	}
}
