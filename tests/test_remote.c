/*
 * The remote tier (--remote): real redis-server processes on temporary
 * Unix sockets, started and stopped by the test by pid, and real kspecd
 * nodes, each with a store of its own.  Node A compiles and publishes
 * (it has the fleet's secret key); fresh nodes get what A compiled as
 * source "remote", with no compile and the same bytes; values changed in
 * Redis or copied under another key are refused and compiled instead; a
 * stopped or killed Redis costs nothing but the deadline; publishing
 * resumes when it is back.  The fleet lease: three publishing nodes
 * compile a key asked 48 times at once only once; a holder killed or
 * stopped mid-compile is taken over; a holder's failure reaches the
 * waiters.  Redis is driven from the test with hiredis.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <hiredis/hiredis.h>
#include <sodium.h>

#include "../proto/entry.h"
#include "e2e.h"

#define MAX_NODES 4

typedef struct {
	char dir[256];
	char sock[320];
	pid_t pid;
} redis_t;

static redis_t rd;
static e2e_daemon_t n0, n1, n2, n3;
static e2e_daemon_t *const nodes[MAX_NODES] = { &n0, &n1, &n2, &n3 };
static char keydir[256], pub[320], sec[320];

static void setup(void)
{
	char prefix[300], id[17], err[512];

	memset(&rd, 0, sizeof rd);
	memset(&n0, 0, sizeof n0);
	memset(&n1, 0, sizeof n1);
	memset(&n2, 0, sizeof n2);
	memset(&n3, 0, sizeof n3);
	snprintf(keydir, sizeof keydir, "/tmp/kspec-e2e-XXXXXX");
	cr_assert(mkdtemp(keydir));
	snprintf(prefix, sizeof prefix, "%s/fleet", keydir);
	cr_assert_eq(ks_fleet_keygen(prefix, id, err, sizeof err), KS_OK, "%s",
	    err);
	snprintf(pub, sizeof pub, "%s.public", prefix);
	snprintf(sec, sizeof sec, "%s.secret", prefix);
}

static void redis_kill(redis_t *r)
{
	int st;

	if (r->pid <= 0)
		return;
	kill(r->pid, SIGCONT);       /* a stopped one too */
	kill(r->pid, SIGKILL);
	waitpid(r->pid, &st, 0);
	r->pid = 0;
}

/* Redis processes go even when a test fails. */
static void down(void)
{
	char cmd[400];
	int i;

	for (i = 0; i < MAX_NODES; i++)
		e2e_cleanup(nodes[i]);
	redis_kill(&rd);
	if (rd.dir[0]) {
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", rd.dir);
		if (system(cmd) != 0)
			cr_log_info("could not remove %s", rd.dir);
	}
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", keydir);
	if (system(cmd) != 0)
		cr_log_info("could not remove %s", keydir);
}

TestSuite(remote, .init = setup, .fini = down, .timeout = 240);

static redisContext *redis_cli(void)
{
	redisContext *c = redisConnectUnix(rd.sock);

	cr_assert(c && !c->err, "cannot connect to redis at %s", rd.sock);
	return c;
}

/* Starts redis-server on RD's socket (a fresh directory the first time),
 * with PASSWORD unless NULL; returns once it answers PING. */
static void redis_start(const char *password)
{
	redisContext *c;
	redisReply *rep;
	int i;

	if (!rd.dir[0]) {
		snprintf(rd.dir, sizeof rd.dir, "/tmp/kspec-e2e-XXXXXX");
		cr_assert(mkdtemp(rd.dir));
		snprintf(rd.sock, sizeof rd.sock, "%s/redis.sock", rd.dir);
	}
	rd.pid = fork();
	cr_assert_geq(rd.pid, 0);
	if (rd.pid == 0) {
		int nul = open("/dev/null", O_WRONLY);

		dup2(nul, 1);
		dup2(nul, 2);
		if (password)
			execlp("redis-server", "redis-server", "--port", "0",
			    "--unixsocket", rd.sock, "--unixsocketperm", "700",
			    "--save", "", "--appendonly", "no", "--dir", rd.dir,
			    "--requirepass", password, (char *)NULL);
		else
			execlp("redis-server", "redis-server", "--port", "0",
			    "--unixsocket", rd.sock, "--unixsocketperm", "700",
			    "--save", "", "--appendonly", "no", "--dir", rd.dir,
			    (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 1000; i++) {          /* 10 s */
		c = redisConnectUnix(rd.sock);
		if (c && !c->err) {
			rep = redisCommand(c, "PING");
			if (rep) {
				freeReplyObject(rep);
				redisFree(c);
				return;
			}
		}
		if (c)
			redisFree(c);
		usleep(10000);
	}
	cr_assert_fail("redis-server did not start on %s", rd.sock);
}

/* Starts node I with the remote tier: SIGN publishes; MORE, NULL-ended,
 * is added. */
static e2e_daemon_t *node(int i, int sign, const char *timeout_ms,
    const char *const *more)
{
	char url[400];
	const char *args[24] = { "--workers", "1", "--remote", url,
	    "--fleet-key", pub, "--remote-timeout", timeout_ms };
	int n = 8, k;

	snprintf(url, sizeof url, "unix:%s", rd.sock);
	if (sign) {
		args[n++] = "--fleet-sign-key";
		args[n++] = sec;
	}
	for (k = 0; more && more[k] && n < 23; k++)
		args[n++] = more[k];
	args[n] = NULL;
	/* The test build where a test switch is set for this node. */
	nodes[i]->program = getenv("KSPEC_TEST_FAULTS") ||
	    getenv("KSPEC_TEST_REMOTE_BUG") ? E2E_PLANT : NULL;
	cr_assert_eq(e2e_start(nodes[i], args), 0, "node %d did not start",
	    i);
	return nodes[i];
}

/* The request of a get of gemm at N=K=DIM. */
static void get_json(char *json, size_t n, int dim)
{
	snprintf(json, n, "{\"op\":\"get\",\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"N\":%d,\"K\":%d}}", dim, dim);
}

/* A get of gemm at N=K=DIM: its reply (caller frees). */
static void get(const e2e_daemon_t *d, int dim, e2e_reply_t *r)
{
	char json[400];

	get_json(json, sizeof json, dim);
	cr_assert_eq(e2e_call(d->sock, json, r), 0, "no reply from %s",
	    d->sock);
	cr_assert(e2e_ok(r), "get failed: %s", e2e_code(r));
}

/* Field NAME of stats' "remote" object, -1 when absent. */
static double rstat(const e2e_daemon_t *d, const char *name)
{
	e2e_reply_t r;
	const cJSON *o;
	double v = -1;

	if (e2e_call(d->sock, "{\"op\":\"stats\"}", &r))
		return -1;
	o = cJSON_GetObjectItemCaseSensitive(r.h, "remote");
	if (cJSON_IsObject(o)) {
		const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);

		v = cJSON_IsBool(f) ? cJSON_IsTrue(f) : cJSON_IsNumber(f) ?
		    f->valuedouble : -1;
	}
	e2e_reply_free(&r);
	return v;
}

/* Waits up to 20 s for the remote field NAME of D to reach AT_LEAST. */
static void wait_rstat(const e2e_daemon_t *d, const char *name,
    double at_least)
{
	int i;

	for (i = 0; i < 2000; i++) {
		if (rstat(d, name) >= at_least)
			return;
		usleep(10000);
	}
	cr_assert_fail("remote.%s stayed at %.0f (wanted %.0f)", name,
	    rstat(d, name), at_least);
}

/* The Redis key of the artifact a reply describes. */
static void redis_key(const e2e_reply_t *r, char *out, size_t n)
{
	snprintf(out, n, "kspec:e1:%s", e2e_str(r, "key"));
	cr_assert_eq(strlen(out), 9 + 64, "no key in the reply");
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

Test(remote, a_compiles_and_publishes_b_fetches_the_same_bytes)
{
	e2e_daemon_t *a, *b, *c;
	e2e_reply_t ra, rb, rc;
	char key[128];
	redisContext *cli;
	redisReply *rep;
	int fd, i;

	redis_start(NULL);
	a = node(0, 1, "1000", NULL);
	b = node(1, 0, "1000", NULL);
	cr_assert_eq(rstat(b, "connected"), 1);

	get(a, 64, &ra);
	cr_assert_str_eq(e2e_str(&ra, "source"), "compiled");
	wait_rstat(a, "published", 1);
	redis_key(&ra, key, sizeof key);
	cli = redis_cli();
	rep = redisCommand(cli, "EXISTS %s", key);
	cr_assert(rep && rep->integer == 1, "%s is not in redis", key);
	freeReplyObject(rep);
	redisFree(cli);

	get(b, 64, &rb);
	cr_assert_str_eq(e2e_str(&rb, "source"), "remote");
	cr_assert_eq(e2e_stat(b->sock, "compiles"), 0);
	cr_assert_eq(rb.len, ra.len);
	cr_assert_eq(memcmp(rb.payload, ra.payload, ra.len), 0,
	    "the bytes from the remote tier differ from A's");
	cr_assert_str_eq(e2e_str(&rb, "artifact"), e2e_str(&ra, "artifact"));
	cr_assert_eq(rstat(b, "hits"), 1);
	cr_assert_eq(rstat(b, "auth_failures"), 0);
	e2e_reply_free(&rb);
	/* Kept locally: the next one never asks Redis. */
	get(b, 64, &rb);
	cr_assert_str_eq(e2e_str(&rb, "source"), "memory");
	cr_assert_eq(rstat(b, "hits") + rstat(b, "misses"), 1);
	e2e_reply_free(&rb);

	/* Single flight: three identical gets pipelined on a fresh node
	 * share one lookup. */
	c = node(2, 0, "1000", NULL);
	fd = e2e_connect(c->sock);
	cr_assert_geq(fd, 0);
	for (i = 0; i < 3; i++)
		cr_assert_eq(e2e_send(fd, "{\"op\":\"get\",\"kernel\":\"gemm\","
		    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
		    "\"N\":64,\"K\":64}}"), 0);
	for (i = 0; i < 3; i++) {
		cr_assert_eq(e2e_recv(fd, &rc), 0);
		cr_assert_str_eq(e2e_str(&rc, "source"), "remote");
		cr_assert_eq(rc.len, ra.len);
		e2e_reply_free(&rc);
	}
	close(fd);
	cr_assert_eq(rstat(c, "hits"), 1, "identical gets asked Redis "
	    "more than once");
	cr_assert_eq(e2e_stat(c->sock, "compiles"), 0);
	/* A miss in Redis compiles, and a node without the sign key never
	 * publishes. */
	get(c, 32, &rc);
	cr_assert_str_eq(e2e_str(&rc, "source"), "compiled");
	cr_assert_eq(rstat(c, "misses"), 1);
	cr_assert_eq(rstat(c, "published"), 0);
	e2e_reply_free(&rc);
	e2e_reply_free(&ra);
	/* The connection does not hold a stop up. */
	cr_assert_eq(e2e_stop(a), 0);
}

/* Flips one byte of KEY's value at OFFSET from its end. */
static void flip(const char *key, size_t from_end)
{
	redisContext *cli = redis_cli();
	redisReply *rep = redisCommand(cli, "GET %s", key);
	char *v;
	size_t n;

	cr_assert(rep && rep->type == REDIS_REPLY_STRING, "no value at %s",
	    key);
	n = rep->len;
	v = malloc(n);
	memcpy(v, rep->str, n);
	freeReplyObject(rep);
	v[n - from_end] ^= 0x20;
	rep = redisCommand(cli, "SET %s %b", key, v, n);
	cr_assert(rep && rep->type == REDIS_REPLY_STATUS);
	freeReplyObject(rep);
	free(v);
	redisFree(cli);
}

/* Copies the value of FROM under TO. */
static void copy_value(const char *from, const char *to)
{
	redisContext *cli = redis_cli();
	redisReply *rep = redisCommand(cli, "COPY %s %s REPLACE", from, to);

	cr_assert(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer == 1,
	    "COPY failed");
	freeReplyObject(rep);
	redisFree(cli);
}

Test(remote, changed_or_copied_values_are_refused_and_compiled)
{
	e2e_daemon_t *a, *b, *c;
	e2e_reply_t r64, r32, r48, r80, rb;
	char k64[128], k32[128], k48[128], k80[128];

	redis_start(NULL);
	a = node(0, 1, "1000", NULL);
	get(a, 64, &r64);
	get(a, 32, &r32);
	get(a, 48, &r48);
	get(a, 80, &r80);
	wait_rstat(a, "published", 4);
	redis_key(&r64, k64, sizeof k64);
	redis_key(&r32, k32, sizeof k32);
	redis_key(&r48, k48, sizeof k48);
	redis_key(&r80, k80, sizeof k80);

	/* One byte of the artifact changed (well before the signature). */
	flip(k64, 64 + r64.len / 2);
	b = node(1, 0, "1000", NULL);
	get(b, 64, &rb);
	cr_assert_str_eq(e2e_str(&rb, "source"), "compiled");
	cr_assert_eq(rstat(b, "auth_failures"), 1);
	cr_assert_eq(rstat(b, "hits"), 0);
	cr_assert_eq(memcmp(rb.payload, r64.payload, r64.len), 0);
	e2e_reply_free(&rb);

	/* A good value copied under another key: signed, but for 32. */
	copy_value(k32, k48);
	get(b, 48, &rb);
	cr_assert_str_eq(e2e_str(&rb, "source"), "compiled");
	cr_assert_eq(rb.len, r48.len);
	cr_assert_eq(memcmp(rb.payload, r48.payload, r48.len), 0);
	cr_assert_eq(rstat(b, "auth_failures"), 2);
	e2e_reply_free(&rb);
	/* One byte of the metadata changed (10 bytes before its end, where
	 * the artifact's bytes begin). */
	flip(k80, 64 + r80.len + 10);
	get(b, 80, &rb);
	cr_assert_str_eq(e2e_str(&rb, "source"), "compiled");
	cr_assert_eq(rstat(b, "auth_failures"), 3);
	cr_assert_eq(memcmp(rb.payload, r80.payload, r80.len), 0);
	e2e_reply_free(&rb);
	/* B's copies are its own compiles; nothing from Redis replaced
	 * them. */
	get(b, 48, &rb);
	cr_assert_str_eq(e2e_str(&rb, "source"), "memory");
	cr_assert_eq(memcmp(rb.payload, r48.payload, r48.len), 0);
	e2e_reply_free(&rb);

	/* The planted bug (the key check skipped) serves the copy: the
	 * check above is what catches it. */
	setenv("KSPEC_TEST_REMOTE_BUG", "1", 1);
	c = node(2, 0, "1000", NULL);
	unsetenv("KSPEC_TEST_REMOTE_BUG");
	get(c, 48, &rb);
	cr_assert_str_eq(e2e_str(&rb, "source"), "remote",
	    "the planted bug was not planted");
	cr_assert_neq(rb.len == r48.len && memcmp(rb.payload, r48.payload,
	    r48.len) == 0, 1, "the copied value should be 32's artifact");
	e2e_reply_free(&rb);
	e2e_reply_free(&r64);
	e2e_reply_free(&r32);
	e2e_reply_free(&r48);
	e2e_reply_free(&r80);
}

/* A get of DIM from D answered from SOURCE. */
static void expect(const e2e_daemon_t *d, int dim, const char *source)
{
	e2e_reply_t r;

	get(d, dim, &r);
	cr_assert_str_eq(e2e_str(&r, "source"), source, "dim %d", dim);
	e2e_reply_free(&r);
}

/* Once Redis is back, A (connected again) publishes what it compiles:
 * a fresh node gets DIM from Redis, A's bytes. */
static void publishing_resumes(const e2e_daemon_t *a, int dim)
{
	e2e_daemon_t *c;
	e2e_reply_t r, ra;

	wait_rstat(a, "connected", 1);
	get(a, dim, &ra);
	cr_assert_str_eq(e2e_str(&ra, "source"), "compiled");
	wait_rstat(a, "published", 1);
	c = node(2, 0, "200", NULL);
	get(c, dim, &r);
	cr_assert_str_eq(e2e_str(&r, "source"), "remote");
	cr_assert_eq(r.len, ra.len);
	cr_assert_eq(memcmp(r.payload, ra.payload, ra.len), 0);
	e2e_reply_free(&r);
	e2e_reply_free(&ra);
}

Test(remote, a_stopped_redis_costs_the_deadline_then_publishing_resumes)
{
	e2e_daemon_t *a, *b;
	double t0, dt;

	redis_start(NULL);
	a = node(0, 1, "200", NULL);
	b = node(1, 0, "200", NULL);
	expect(b, 64, "compiled");    /* cached on B */

	cr_assert_eq(kill(rd.pid, SIGSTOP), 0);
	t0 = now_s();
	expect(b, 40, "compiled");    /* cold: asks, times out, compiles */
	dt = now_s() - t0;
	cr_assert_lt(dt, 20.0, "a cold get took %.1f s with redis stopped",
	    dt);
	cr_log_info("cold get with redis stopped: %.3f s", dt);
	cr_assert_geq(rstat(b, "timeouts"), 1);
	cr_assert_eq(rstat(b, "connected"), 0);
	expect(b, 64, "memory");      /* hits never touch Redis */
	expect(b, 24, "compiled");    /* no connection: no wait at all */
	/* A compiles on while Redis is stopped: its publish is lost. */
	expect(a, 56, "compiled");
	cr_assert_eq(rstat(a, "published"), 0);

	cr_assert_eq(kill(rd.pid, SIGCONT), 0);
	publishing_resumes(a, 72);
	cr_assert_geq(rstat(a, "reconnects"), 1);
	cr_assert_geq(rstat(a, "publish_failures") + rstat(a, "timeouts"), 1);
}

Test(remote, a_killed_redis_leaves_nodes_serving_and_a_new_one_resumes)
{
	e2e_daemon_t *a, *b;

	redis_start(NULL);
	a = node(0, 1, "200", NULL);
	b = node(1, 0, "200", NULL);
	expect(b, 64, "compiled");
	redis_kill(&rd);
	expect(b, 64, "memory");
	expect(b, 40, "compiled");
	expect(a, 40, "compiled");
	cr_assert_eq(rstat(a, "connected"), 0);
	cr_assert_geq(rstat(b, "outages"), 1);

	/* A new Redis on the same socket: empty, and publishing resumes. */
	redis_start(NULL);
	publishing_resumes(a, 80);
}

/* Runs kspecd with ARGS (after --socket and --store in DIR): its exit
 * status, and what it printed in OUT. */
static int kspecd_fails(const char *args, char *out, size_t n)
{
	char cmd[2048];
	size_t len;
	FILE *p;
	int st;

	snprintf(cmd, sizeof cmd, "timeout 60 %s/kspecd --socket %s/s.sock "
	    "--store %s/s.db --workers 1 %s 2>&1", e2e_build_dir(), keydir,
	    keydir, args);
	p = popen(cmd, "r");
	cr_assert(p);
	len = fread(out, 1, n - 1, p);
	out[len] = '\0';
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(remote, refused_without_a_fleet_key_or_with_an_open_password_file)
{
	char args[1200], out[8192], pw[320];
	e2e_daemon_t *a;
	FILE *f;

	cr_assert_eq(kspecd_fails("--remote unix:/nonexistent/redis.sock",
	    out, sizeof out), 1, "%s", out);
	cr_assert(strstr(out, "needs at least one --fleet-key"), "%s", out);
	cr_assert_eq(kspecd_fails("--remote redis://u:secret@127.0.0.1:6379 "
	    "--fleet-key /dev/null", out, sizeof out), 2, "%s", out);
	cr_assert(strstr(out, "--remote-password-file"), "%s", out);

	snprintf(pw, sizeof pw, "%s/redis.password", keydir);
	f = fopen(pw, "w");
	cr_assert(f);
	fputs("s3cret-pass\n", f);
	fclose(f);
	cr_assert_eq(chmod(pw, 0644), 0);
	redis_start("s3cret-pass");
	snprintf(args, sizeof args, "--remote unix:%s --fleet-key %s "
	    "--remote-password-file %s", rd.sock, pub, pw);
	cr_assert_eq(kspecd_fails(args, out, sizeof out), 1, "%s", out);
	cr_assert(strstr(out, "chmod 0600"), "%s", out);

	/* 0600: the node authenticates and serves. */
	cr_assert_eq(chmod(pw, 0600), 0);
	a = node(0, 1, "1000", (const char *const[]){
	    "--remote-password-file", pw, NULL });
	wait_rstat(a, "connected", 1);
	cr_assert_eq(rstat(a, "errors"), 0);
}

/* ---- fleet-wide single flight: the lease ---- */

#define FLEET 3
#define PER_NODE 16

typedef struct {
	const e2e_daemon_t *d;
	int dim;
	int ok;                  /* 1: a reply that succeeded */
	e2e_reply_t r;
	pthread_t t;
} asker_t;

static void *ask(void *p)
{
	asker_t *a = p;
	char json[400];

	get_json(json, sizeof json, a->dim);
	a->ok = e2e_call(a->d->sock, json, &a->r) == 0 && e2e_ok(&a->r);
	return NULL;
}

/* Compiles that ran in D's workers. */
static double ran(const e2e_daemon_t *d)
{
	return e2e_compiles_ran(d->sock);
}

/* FLEET nodes, all publishing, with compiles of N=DIM slowed by MS, and
 * then the fault MORE unless NULL. */
static void fleet_faults(int dim, int ms, const char *more)
{
	char faults[128];
	int i;

	snprintf(faults, sizeof faults, "delay/%d:N=%d%s%s:N=%d", ms, dim,
	    more ? "," : "", more ? more : "delay/0", dim);
	setenv("KSPEC_TEST_FAULTS", faults, 1);
	redis_start(NULL);
	for (i = 0; i < FLEET; i++)
		wait_rstat(node(i, 1, "1000", NULL), "connected", 1);
	unsetenv("KSPEC_TEST_FAULTS");
}

static void fleet(int dim, int ms)
{
	fleet_faults(dim, ms, NULL);
}

static void ask_all(asker_t *a, int n, int dim)
{
	int i;

	for (i = 0; i < n; i++) {
		a[i].d = nodes[i % FLEET];
		a[i].dim = dim;
		cr_assert_eq(pthread_create(&a[i].t, NULL, ask, &a[i]), 0);
	}
}

/* Every reply of A from a node other than SKIP (-1: none) succeeded, with
 * the same bytes as the first. */
static void same_bytes(asker_t *a, int n, int skip)
{
	const asker_t *first = NULL;
	int i;

	for (i = 0; i < n; i++) {
		if (a[i].d == nodes[skip < 0 ? FLEET : skip])
			continue;
		cr_assert(a[i].ok, "get %d (node %d) failed: %s", i, i % FLEET,
		    a[i].r.h ? e2e_code(&a[i].r) : "no reply");
		if (!first)
			first = &a[i];
		cr_assert_eq(a[i].r.len, first->r.len);
		cr_assert_eq(memcmp(a[i].r.payload, first->r.payload,
		    first->r.len), 0, "get %d has other bytes", i);
	}
	cr_assert(first);
}

static void join_all(asker_t *a, int n)
{
	int i;

	for (i = 0; i < n; i++)
		pthread_join(a[i].t, NULL);
}

static void free_all(asker_t *a, int n)
{
	int i;

	for (i = 0; i < n; i++)
		e2e_reply_free(&a[i].r);
}

static double sum(double (*fn)(const e2e_daemon_t *, const char *),
    const char *name, int skip)
{
	double n = 0;
	int i;

	for (i = 0; i < FLEET; i++)
		if (i != skip)
			n += fn(nodes[i], name);
	return n;
}

static double ran_of(const e2e_daemon_t *d, const char *unused)
{
	(void)unused;
	return ran(d);
}

Test(remote, one_compile_fleet_wide_for_48_concurrent_cold_gets)
{
	asker_t a[FLEET * PER_NODE];
	int i;

	memset(a, 0, sizeof a);
	fleet(88, 1500);
	ask_all(a, FLEET * PER_NODE, 88);
	join_all(a, FLEET * PER_NODE);
	same_bytes(a, FLEET * PER_NODE, -1);
	for (i = 0; i < FLEET; i++)
		cr_log_info("node %d: ran %.0f, lease taken %.0f, waits %.0f, "
		    "hits %.0f", i, ran(nodes[i]), rstat(nodes[i],
		    "lease_taken"), rstat(nodes[i], "lease_waits"),
		    rstat(nodes[i], "hits"));
	cr_assert_eq(sum(ran_of, NULL, -1), 1, "compiles fleet-wide");
	cr_assert_eq(sum(rstat, "lease_taken", -1), 1);
	cr_assert_eq(sum(rstat, "lease_waits", -1), FLEET - 1);
	cr_assert_eq(sum(rstat, "hits", -1), FLEET - 1);
	cr_assert_eq(sum(rstat, "lease_takeovers", -1), 0);
	cr_assert_eq(sum(rstat, "lease_wait_timeouts", -1), 0);
	free_all(a, FLEET * PER_NODE);
}

/* A compile that outlives the lease's TTL (10 s) and its first signed
 * expiry: the holder's renewals, matched in Redis by its token, keep the
 * lease, and the waiters accept each value signed anew, so they wait for
 * its artifact.  (Without renewals the lease expires at 10 s and a
 * waiter compiles beside it: the compile count catches that.) */
Test(remote, a_compile_longer_than_the_ttl_keeps_its_renewed_lease)
{
	asker_t a[FLEET];

	memset(a, 0, sizeof a);
	fleet(128, 12000);
	ask_all(a, FLEET, 128);
	join_all(a, FLEET);
	same_bytes(a, FLEET, -1);
	cr_assert_eq(sum(ran_of, NULL, -1), 1, "compiles fleet-wide");
	cr_assert_eq(sum(rstat, "lease_takeovers", -1), 0);
	cr_assert_eq(sum(rstat, "lease_wait_timeouts", -1), 0);
	cr_assert_eq(sum(rstat, "auth_failures", -1), 0);
	free_all(a, FLEET);
}

/* The node that holds the lease of N=DIM, once one does (up to 10 s). */
static int holder(void)
{
	int i, k;

	for (k = 0; k < 1000; k++) {
		for (i = 0; i < FLEET; i++)
			if (rstat(nodes[i], "lease_taken") >= 1)
				return i;
		usleep(10000);
	}
	cr_assert_fail("no node took the lease");
	return -1;
}

Test(remote, a_killed_lease_holder_costs_one_more_compile)
{
	asker_t a[FLEET * 4];
	double t0 = now_s();
	int h, st;

	memset(a, 0, sizeof a);
	fleet(96, 3000);
	ask_all(a, FLEET * 4, 96);
	h = holder();
	usleep(300000);          /* mid-compile: 3 s of it */
	cr_assert_eq(kill(nodes[h]->pid, SIGKILL), 0);
	waitpid(nodes[h]->pid, &st, 0);
	nodes[h]->pid = 0;
	join_all(a, FLEET * 4);
	cr_log_info("killed node %d; the others answered in %.1f s", h,
	    now_s() - t0);
	same_bytes(a, FLEET * 4, h);
	cr_assert_eq(sum(ran_of, NULL, h), 1, "compiles on the nodes left");
	cr_assert_eq(sum(rstat, "lease_takeovers", h), 1);
	cr_assert_eq(sum(rstat, "lease_wait_timeouts", h), 0);
	free_all(a, FLEET * 4);
}

Test(remote, a_stopped_lease_holder_is_taken_over_after_the_ttl)
{
	asker_t a[FLEET * 4];
	double t0, dt;
	int h;

	memset(a, 0, sizeof a);
	fleet(104, 3000);
	ask_all(a, FLEET * 4, 104);
	h = holder();
	t0 = now_s();
	cr_assert_eq(kill(nodes[h]->pid, SIGSTOP), 0);
	/* The others' answers, without the stopped node's. */
	for (int i = 0; i < FLEET * 4; i++)
		if (i % FLEET != h)
			pthread_join(a[i].t, NULL);
	dt = now_s() - t0;
	cr_log_info("stopped node %d; the others answered in %.1f s", h, dt);
	cr_assert_eq(kill(nodes[h]->pid, SIGCONT), 0);
	for (int i = 0; i < FLEET * 4; i++)
		if (i % FLEET == h)
			pthread_join(a[i].t, NULL);
	same_bytes(a, FLEET * 4, h);
	cr_assert_geq(dt, 8.0, "taken over before the lease's TTL");
	cr_assert_lt(dt, 30.0);
	cr_assert_eq(sum(rstat, "lease_takeovers", h), 1);
	cr_assert_eq(sum(ran_of, NULL, h), 1);
	/* The stopped node finishes its compile when it goes on. */
	same_bytes(a, FLEET * 4, -1);
	free_all(a, FLEET * 4);
}

Test(remote, a_failed_compile_is_reported_to_the_waiters)
{
	asker_t a[FLEET * 2];
	int i, h;

	memset(a, 0, sizeof a);
	fleet_faults(112, 1000, "error");
	ask_all(a, FLEET * 2, 112);
	h = holder();
	join_all(a, FLEET * 2);
	for (i = 0; i < FLEET * 2; i++) {
		cr_assert(!a[i].ok && a[i].r.h, "get %d did not fail", i);
		cr_assert_str_eq(e2e_code(&a[i].r), "E_COMPILE");
		if (i % FLEET != h) {
			const cJSON *m = cJSON_GetObjectItemCaseSensitive(
			    cJSON_GetObjectItemCaseSensitive(a[i].r.h,
			    "error"), "message");

			cr_assert(cJSON_IsString(m) && strstr(m->valuestring,
			    "another node"), "get %d: not the holder's "
			    "failure", i);
		}
	}
	for (i = 0; i < FLEET; i++)
		if (i != h)
			cr_assert_eq(ran(nodes[i]), 0, "node %d compiled", i);
	cr_assert_eq(sum(rstat, "lease_taken", -1), 1);
	free_all(a, FLEET * 2);
}

/* A crash is the holder's own (its machine, its memory, its compiler
 * process): no marker, so each waiter takes the lease in turn and
 * compiles (and, with the fault on every node, crashes) itself. */
Test(remote, a_crash_is_not_shared_each_node_compiles_itself)
{
	asker_t a[FLEET];
	int i;

	memset(a, 0, sizeof a);
	fleet_faults(116, 300, "crash");
	ask_all(a, FLEET, 116);
	join_all(a, FLEET);
	for (i = 0; i < FLEET; i++) {
		const cJSON *m;

		cr_assert(!a[i].ok && a[i].r.h, "get %d did not fail", i);
		cr_assert_str_eq(e2e_code(&a[i].r), "E_COMPILE_CRASHED");
		m = cJSON_GetObjectItemCaseSensitive(
		    cJSON_GetObjectItemCaseSensitive(a[i].r.h, "error"),
		    "message");
		cr_assert(cJSON_IsString(m) && !strstr(m->valuestring,
		    "another node"), "get %d: another node's crash", i);
	}
	for (i = 0; i < FLEET; i++)
		cr_assert_geq(ran(nodes[i]), 1, "node %d did not compile", i);
	cr_assert_geq(sum(rstat, "lease_taken", -1), FLEET);
	free_all(a, FLEET);
}

/* ---- what a writer of Redis without the fleet's secret key can do ---- */

static void redis_cmd_ok(const char *what, redisReply *rep)
{
	cr_assert(rep && rep->type != REDIS_REPLY_ERROR, "%s failed: %s",
	    what, rep && rep->str ? rep->str : "no reply");
	freeReplyObject(rep);
}

/* SET KEY to V, with an expiry of PX ms unless 0. */
static void redis_set(const char *key, const char *v, long px)
{
	redisContext *cli = redis_cli();

	redis_cmd_ok("SET", px ? redisCommand(cli, "SET %s %s PX %ld", key,
	    v, px) : redisCommand(cli, "SET %s %s", key, v));
	redisFree(cli);
}

static void redis_del(const char *key)
{
	redisContext *cli = redis_cli();

	redis_cmd_ok("DEL", redisCommand(cli, "DEL %s", key));
	redisFree(cli);
}

/* A Redis key that matches PATTERN and is not NOT, into OUT, once there
 * is one (up to 10 s: a node writes after it answered). */
static void redis_find(const char *pattern, const char *not, char *out,
    size_t n)
{
	redisContext *cli = redis_cli();
	int k;

	out[0] = '\0';
	for (k = 0; k < 1000 && !out[0]; k++) {
		redisReply *rep = redisCommand(cli, "KEYS %s", pattern);
		size_t i;

		cr_assert(rep && rep->type == REDIS_REPLY_ARRAY);
		for (i = 0; i < rep->elements; i++)
			if (strcmp(rep->element[i]->str, not) != 0)
				snprintf(out, n, "%s", rep->element[i]->str);
		freeReplyObject(rep);
		if (!out[0])
			usleep(10000);
	}
	redisFree(cli);
	cr_assert(out[0], "no key matches %s", pattern);
}

/* A compiles N=DIM (published), then its entry is taken out of Redis, so
 * that another node misses there; the key's hex in HEX. */
static void compiled_then_gone(e2e_daemon_t *a, int dim, e2e_reply_t *r,
    char *hex, size_t n, double published)
{
	char ke[128];

	get(a, dim, r);
	wait_rstat(a, "published", published);
	snprintf(hex, n, "%s", e2e_str(r, "key"));
	snprintf(ke, sizeof ke, "kspec:e1:%s", hex);
	redis_del(ke);
}

/* B's get of N=DIM was its own compile, WANT's bytes, with the
 * refusals counted up to FAILURES. */
static void compiled_here(const e2e_daemon_t *b, int dim,
    const e2e_reply_t *want, double failures)
{
	e2e_reply_t r;

	get(b, dim, &r);
	cr_assert_str_eq(e2e_str(&r, "source"), "compiled");
	cr_assert_eq(r.len, want->len);
	cr_assert_eq(memcmp(r.payload, want->payload, want->len), 0);
	cr_assert_eq(rstat(b, "auth_failures"), failures);
	e2e_reply_free(&r);
}

/*
 * Plants under kspec:KIND:HEX a value signed with the fleet's secret key
 * as a node signs a failure marker (KIND "fail") or a lease ("lease", with
 * a token): for the request key HEX, expiring at EXPIRES_MS of the wall
 * clock, with the JSON members MORE (",..." or "").
 */
static void plant_signed(const char *kind, const char *hex,
    int64_t expires_ms, const char *more)
{
	char meta[512], err[256], rkey[128], out[2100];
	ks_fleet_sec_t sk;
	ks_hash_t key;
	ks_buf_t b;

	cr_assert_eq(ks_fleet_load_secret(sec, &sk, err, sizeof err), KS_OK,
	    "%s", err);
	cr_assert_eq(ks_hash_from_hex(hex, &key), KS_OK);
	snprintf(meta, sizeof meta, "{\"kspec\":\"%s\",\"node\":\"test\","
	    "\"expires_ms\":%lld%s}", kind, (long long)expires_ms, more);
	ks_buf_init(&b);
	cr_assert_eq(ks_entry_seal(&sk, &key, meta, strlen(meta), NULL, 0,
	    &b), KS_OK);
	cr_assert_gt(sizeof out, b.len * 2 + 2);
	sodium_bin2hex(out, sizeof out, (const unsigned char *)b.data, b.len);
	ks_buf_close(&b);
	if (strcmp(kind, "lease") == 0)
		strcat(out, ":1");
	snprintf(rkey, sizeof rkey, "kspec:%s:%s", kind, hex);
	redis_set(rkey, out, 600000);
}

/*
 * Everything a Redis writer plants beside the signed entries costs a node
 * at most one compile of its own, never an answer it did not compile: an
 * unsigned failure marker with no expiry (once answered as the planted
 * error), a genuine signed marker copied under another key, a lease
 * planted for ten minutes (once waited for up to --remote-lease-wait),
 * and values signed with the fleet key but past their expiry or claiming
 * ten minutes; the same kind of signed marker in date is taken (the
 * control: the refusals are the expiry's).
 */
Test(remote, planted_markers_and_leases_cost_one_compile_never_an_answer)
{
	e2e_daemon_t *a, *b;
	e2e_reply_t r;
	char hex[80], kf[128], kl[128], signed_mark[128], kf2[128];
	char json[400];
	double t0, dt;

	setenv("KSPEC_TEST_FAULTS", "error:N=200", 1);
	redis_start(NULL);
	a = node(0, 1, "1000", NULL);
	unsetenv("KSPEC_TEST_FAULTS");
	b = node(1, 0, "1000", NULL);

	/* An unsigned marker: "-18:..." was E_COMPILE with that text. */
	compiled_then_gone(a, 208, &r, hex, sizeof hex, 1);
	snprintf(kf, sizeof kf, "kspec:fail:%s", hex);
	redis_set(kf, "-18:<b>forged</b> compile error", 0);
	compiled_here(b, 208, &r, 1);
	e2e_reply_free(&r);

	/* A's real compile error leaves a signed marker; copied under
	 * another key it is refused there. */
	get_json(json, sizeof json, 200);
	cr_assert_eq(e2e_call(a->sock, json, &r), 0);
	cr_assert_str_eq(e2e_code(&r), "E_COMPILE");
	e2e_reply_free(&r);
	redis_find("kspec:fail:*", kf, signed_mark, sizeof signed_mark);
	compiled_then_gone(a, 216, &r, hex, sizeof hex, 2);
	snprintf(kf2, sizeof kf2, "kspec:fail:%s", hex);
	copy_value(signed_mark, kf2);
	compiled_here(b, 216, &r, 2);
	e2e_reply_free(&r);

	/* A lease planted for ten minutes: not waited for. */
	compiled_then_gone(a, 224, &r, hex, sizeof hex, 3);
	snprintf(kl, sizeof kl, "kspec:lease:%s", hex);
	redis_set(kl, "evil/1:1", 600000);
	t0 = now_s();
	compiled_here(b, 224, &r, 3);
	dt = now_s() - t0;
	cr_log_info("a planted lease cost %.2f s", dt);
	cr_assert_eq(rstat(b, "lease_waits"), 0, "waited for a planted lease");
	cr_assert_lt(dt, 30.0);       /* a liveness bound: the wait was 60 s */
	e2e_reply_free(&r);

	/* Genuinely signed, but replayed past its expiry (a marker) or
	 * claiming ten minutes (a lease): refused, compiled here. */
	compiled_then_gone(a, 232, &r, hex, sizeof hex, 4);
	plant_signed("fail", hex, ks_wall_ms() - 60000,
	    ",\"code\":-18,\"message\":\"old\"");
	compiled_here(b, 232, &r, 4);
	e2e_reply_free(&r);
	compiled_then_gone(a, 240, &r, hex, sizeof hex, 5);
	plant_signed("lease", hex, ks_wall_ms() + 600000, "");
	compiled_here(b, 240, &r, 5);
	cr_assert_eq(rstat(b, "lease_waits"), 0);
	e2e_reply_free(&r);

	/* The control: a marker in date is taken, as the holder's error. */
	compiled_then_gone(a, 248, &r, hex, sizeof hex, 6);
	plant_signed("fail", hex, ks_wall_ms() + 20000,
	    ",\"code\":-18,\"message\":\"in date\"");
	e2e_reply_free(&r);
	get_json(json, sizeof json, 248);
	cr_assert_eq(e2e_call(b->sock, json, &r), 0);
	cr_assert_str_eq(e2e_code(&r), "E_COMPILE");
	e2e_reply_free(&r);
	cr_assert_eq(rstat(b, "auth_failures"), 5);
}

Test(remote, a_redis_stopped_during_a_wait_costs_the_deadline)
{
	asker_t a[FLEET];
	double t0, dt;
	int i, h, w = -1, k;

	memset(a, 0, sizeof a);
	fleet(120, 3000);
	ask_all(a, FLEET, 120);
	h = holder();
	for (k = 0; k < 1000 && w < 0; k++, usleep(10000))
		for (i = 0; i < FLEET; i++)
			if (i != h && rstat(nodes[i], "lease_waits") >= 1)
				w = i;
	cr_assert_geq(w, 0, "no node waited for the lease");
	cr_assert_eq(kill(rd.pid, SIGSTOP), 0);
	t0 = now_s();
	pthread_join(a[w].t, NULL);
	dt = now_s() - t0;
	cr_log_info("node %d answered %.1f s after redis stopped", w, dt);
	/* One deadline (1 s), then its own compile (3 s). */
	cr_assert_lt(dt, 10.0);
	for (i = 0; i < FLEET; i++)
		if (i != w)
			pthread_join(a[i].t, NULL);
	same_bytes(a, FLEET, -1);
	cr_assert_geq(rstat(nodes[w], "timeouts"), 1);
	cr_assert_eq(ran(nodes[w]), 1);
	free_all(a, FLEET);
}
