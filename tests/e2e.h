/*
 * End-to-end harness: starts a real kspecd on a temporary socket and store,
 * talks the wire protocol with raw frames, and loads CPU artifacts.
 * Shared by tests/test_e2e.c and the benchmarks.
 */
#ifndef KS_TEST_E2E_H
#define KS_TEST_E2E_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../base/base.h"
#include "../specialize/specialize.h"

#ifdef CRITERION_H_
#include <criterion/hooks.h>
#endif

typedef struct {
	char dir[256];
	char sock[300];
	char store[300];
	pid_t pid;
	const char *program;     /* in $KSPEC_BUILD; NULL: "kspecd" */
	int accepting_only;      /* e2e_start returns once the socket
	                            accepts, not once the compilers are
	                            probed */
	int shared;              /* E2E_SHARED_SUITE's: the runner's, in a
	                            session of its own and holding none of
	                            the runner's files; no test stops it */
} e2e_daemon_t;

struct e2e_reply;
static inline int e2e_call(const char *sock, const char *json,
    struct e2e_reply *r);
static inline int e2e_probed(const char *sock);

/* Where kspecd is: $KSPEC_BUILD (set by make test), else ./build. */
static inline const char *e2e_build_dir(void)
{
	const char *b = getenv("KSPEC_BUILD");

	return b && *b ? b : "build";
}

static inline int e2e_connect(const char *path)
{
	struct sockaddr_un sa;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sa.sun_path) {
		close(fd);
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path));
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Starts the program NAME of the build folder (kspecd, or the test
 * build tests/kspecd-plant) with EXTRA arguments (NULL-terminated, may
 * be NULL) on D's socket and store; waits until it accepts (or exits; a
 * daemon that does neither for 60 s is a failed start: the deadline is
 * for a hang, on a machine loaded by other work).  D->dir must be set (a
 * fresh directory is made when empty). */
static inline int e2e_start_bin(e2e_daemon_t *d, const char *name,
    const char *const *extra)
{
	char bin[512];
	const char *argv[32];
	int i, n = 0, fd;

	if (!d->dir[0]) {
		snprintf(d->dir, sizeof d->dir, "/tmp/kspec-e2e-XXXXXX");
		if (!mkdtemp(d->dir))
			return -1;
	}
	snprintf(d->sock, sizeof d->sock, "%s/run/kspecd.sock", d->dir);
	snprintf(d->store, sizeof d->store, "%s/store/kspec.db", d->dir);
	snprintf(bin, sizeof bin, "%s/%s", e2e_build_dir(), name);
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	argv[n++] = "--store";
	argv[n++] = d->store;
	for (i = 0; extra && extra[i] && n < 30; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	d->pid = fork();
	if (d->pid < 0)
		return -1;
	if (d->pid == 0) {
		int nul = open("/dev/null", O_WRONLY);

		/* The daemon must not hold the test's stdout open. */
		dup2(nul, 1);
		if (!getenv("KSPEC_E2E_LOG"))
			dup2(nul, 2);
		if (d->shared) {
			/* None of Criterion's pipes stays open in it, nor
			 * does a signal to the runner's group reach it. */
			setsid();
			for (i = 3; i < 1024; i++)
				close(i);
		}
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	for (i = 0; i < 6000; i++) {          /* up to 60 s */
		int st;

		fd = e2e_connect(d->sock);
		if (fd >= 0) {
			close(fd);
			if (d->accepting_only || e2e_probed(d->sock))
				return 0;
		}
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			return -1;
		}
		usleep(10000);
	}
	return -1;
}

/* A loopback port free a moment ago; -1 if none could be had.  (No
 * assertion here: benchmarks include this header without criterion.) */
static inline int e2e_free_port(void)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd < 0)
		return -1;
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

/* The test build of the daemon (make build/tests/kspecd-plant): kspecd
 * with the KSPEC_TEST_* switches compiled in (-DKS_TEST_PLANT), for the
 * tests that set them.  The installed kspecd reads none of them. */
#define E2E_PLANT "tests/kspecd-plant"

/* e2e_start_bin of D->program, or else kspecd. */
static inline int e2e_start(e2e_daemon_t *d, const char *const *extra)
{
	return e2e_start_bin(d, d->program ? d->program : "kspecd", extra);
}

/* Sends SIGTERM and waits; returns the exit status, or -1 when the
 * daemon had not stopped after 120 s (it finishes the compiles that run:
 * on a loaded machine one of the larger ones takes a minute). */
static inline int e2e_stop(e2e_daemon_t *d)
{
	int st, i;

	if (d->pid <= 0)
		return -1;
	kill(d->pid, SIGTERM);
	for (i = 0; i < 12000; i++) {
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 +
			    WTERMSIG(st);
		}
		usleep(10000);
	}
	kill(d->pid, SIGKILL);
	waitpid(d->pid, &st, 0);
	d->pid = 0;
	return -1;
}

/* The resident size of process PID in KiB (/proc/PID/status), or -1. */
static inline long e2e_rss_kb(pid_t pid)
{
	char path[64], line[256];
	long kb = -1;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, "VmRSS:", 6) == 0)
			kb = atol(line + 6);
	fclose(f);
	return kb;
}

static inline void e2e_cleanup(e2e_daemon_t *d)
{
	char cmd[400];

	if (d->shared)
		return;                 /* the runner's, stopped after the tests */
	if (d->pid > 0)
		e2e_stop(d);
	if (d->dir[0] && strncmp(d->dir, "/tmp/kspec-e2e-", 15) == 0) {
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", d->dir);
	}
}

/*
 * E2E_SUITE(NAME, SECONDS): the Criterion suite NAME whose every test
 * runs against a fresh kspecd of its own, the file's static e2e_daemon_t
 * D (started with no extra arguments before the test, stopped and its
 * directory removed after it), with a timeout of SECONDS.  For test files
 * that include criterion.h before this header.
 */
#define E2E_SUITE(name, seconds)                                         \
	static e2e_daemon_t D;                                           \
	static void e2e_suite_up(void)                                   \
	{                                                                \
		memset(&D, 0, sizeof D);                                 \
		cr_assert_eq(e2e_start(&D, NULL), 0,                     \
		    "kspecd did not start");                             \
	}                                                                \
	static void e2e_suite_down(void)                                 \
	{                                                                \
		e2e_cleanup(&D);                                         \
	}                                                                \
	TestSuite(name, .init = e2e_suite_up, .fini = e2e_suite_down,    \
	    .timeout = seconds)

/*
 * E2E_SHARED_SUITE(NAME, SECONDS): the suite NAME whose tests share one
 * kspecd, the file's static e2e_daemon_t D, for tests that need no daemon
 * of their own (none stops or restarts D, or reads a counter or an entry
 * that another test may move).  Criterion runs each test in a process of
 * its own, several at once, as children of one runner process: the
 * runner starts the daemon before the first test and names its directory
 * in the environment ($KSPEC_E2E_SHARED_DIR), and stops it after the last
 * (report hooks: the file defines E2E_SHARED_DAEMON before it includes
 * this header), so its compiles count in the binary's CPU time.  D.dir is
 * the daemon's; each test has a fresh directory of its own, T, removed
 * after it.  The suite's timeout is SECONDS.
 */
#define E2E_SHARED_ENV "KSPEC_E2E_SHARED_DIR"

/* In a test: D, the shared daemon. */
static inline int e2e_shared_up(e2e_daemon_t *d)
{
	const char *dir = getenv(E2E_SHARED_ENV);

	memset(d, 0, sizeof *d);
	if (!dir || snprintf(d->dir, sizeof d->dir, "%s", dir) >=
	    (int)sizeof d->dir)
		return -1;
	d->shared = 1;
	snprintf(d->sock, sizeof d->sock, "%s/run/kspecd.sock", d->dir);
	snprintf(d->store, sizeof d->store, "%s/store/kspec.db", d->dir);
	return 0;
}

#if defined(E2E_SHARED_DAEMON) && defined(CRITERION_H_)
static e2e_daemon_t e2e_shared;

/* The runner's ends of E2E_SHARED_SUITE. */
ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
	(void)set;
	memset(&e2e_shared, 0, sizeof e2e_shared);
	e2e_shared.shared = 1;
	if (e2e_start(&e2e_shared, NULL) == 0)
		setenv(E2E_SHARED_ENV, e2e_shared.dir, 1);
	else
		fprintf(stderr, "the shared kspecd did not start\n");
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
	(void)stats;
	if (e2e_shared.pid > 0 && e2e_stop(&e2e_shared) != 0)
		fprintf(stderr, "the shared kspecd did not stop cleanly\n");
	e2e_shared.shared = 0;
	e2e_cleanup(&e2e_shared);
}
#endif

#define E2E_SHARED_SUITE(name, seconds)                                  \
	static e2e_daemon_t D;                                           \
	static char T[256];                                              \
	static void e2e_suite_up(void)                                   \
	{                                                                \
		snprintf(T, sizeof T, "/tmp/kspec-e2e-XXXXXX");          \
		cr_assert_not_null(mkdtemp(T));                          \
		cr_assert_eq(e2e_shared_up(&D), 0,                       \
		    "no shared kspecd (see the runner's message)");      \
	}                                                                \
	static void e2e_suite_down(void)                                 \
	{                                                                \
		char cmd_[300];                                          \
                                                                         \
		snprintf(cmd_, sizeof cmd_, "rm -rf '%s'", T);           \
		if (T[0] && system(cmd_) != 0)                           \
			fprintf(stderr, "could not remove %s\n", T);     \
	}                                                                \
	TestSuite(name, .init = e2e_suite_up, .fini = e2e_suite_down,    \
	    .timeout = seconds)

static inline int e2e_write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t w = write(fd, c, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

static inline int e2e_read_all(int fd, void *p, size_t n)
{
	char *c = p;

	while (n) {
		ssize_t r = read(fd, c, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		c += r;
		n -= (size_t)r;
	}
	return 0;
}

static inline int e2e_send(int fd, const char *json)
{
	uint32_t hl = (uint32_t)strlen(json);
	unsigned char pre[8] = {
		(unsigned char)(hl >> 24), (unsigned char)(hl >> 16),
		(unsigned char)(hl >> 8), (unsigned char)hl, 0, 0, 0, 0 };

	if (e2e_write_all(fd, pre, 8))
		return -1;
	return e2e_write_all(fd, json, hl);
}

/* A reply: parsed header and payload (malloc'd, may be NULL). */
typedef struct e2e_reply {
	cJSON *h;
	unsigned char *payload;
	size_t len;
} e2e_reply_t;

static inline void e2e_reply_free(e2e_reply_t *r)
{
	cJSON_Delete(r->h);
	free(r->payload);
	memset(r, 0, sizeof *r);
}

static inline int e2e_recv(int fd, e2e_reply_t *r)
{
	unsigned char pre[8];
	uint32_t hl, pl;
	char *hdr;

	memset(r, 0, sizeof *r);
	if (e2e_read_all(fd, pre, 8))
		return -1;
	hl = (uint32_t)pre[0] << 24 | (uint32_t)pre[1] << 16 |
	    (uint32_t)pre[2] << 8 | pre[3];
	pl = (uint32_t)pre[4] << 24 | (uint32_t)pre[5] << 16 |
	    (uint32_t)pre[6] << 8 | pre[7];
	hdr = malloc((size_t)hl + 1);
	if (!hdr || e2e_read_all(fd, hdr, hl)) {
		free(hdr);
		return -1;
	}
	hdr[hl] = '\0';
	r->h = cJSON_Parse(hdr);
	free(hdr);
	if (!r->h)
		return -1;
	if (pl) {
		r->payload = malloc(pl);
		if (!r->payload || e2e_read_all(fd, r->payload, pl))
			return -1;
		r->len = pl;
	}
	return 0;
}

/* One request, one reply on a fresh connection. */
static inline int e2e_call(const char *sock, const char *json,
    e2e_reply_t *r)
{
	int fd = e2e_connect(sock), rc;

	if (fd < 0)
		return -1;
	rc = e2e_send(fd, json) || e2e_recv(fd, r);
	close(fd);
	return rc ? -1 : 0;
}

/* 1 once the daemon at SOCK has this start's probe (stats' probe.state
 * "done"): the keys are its compilers', start-time work is queued. */
static inline int e2e_probed(const char *sock)
{
	e2e_reply_t r;
	const cJSON *p;
	int done;

	if (e2e_call(sock, "{\"op\":\"stats\"}", &r))
		return 0;
	p = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(
	    r.h, "probe"), "state");
	done = cJSON_IsString(p) && strcmp(p->valuestring, "done") == 0;
	e2e_reply_free(&r);
	return done;
}

static inline const char *e2e_str(const e2e_reply_t *r, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->h, name);

	return cJSON_IsString(v) ? v->valuestring : "";
}

static inline double e2e_num(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static inline int e2e_ok(const e2e_reply_t *r)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r->h, "ok"));
}

/* The error code of an error reply, "" otherwise. */
static inline const char *e2e_code(const e2e_reply_t *r)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(r->h, "error");
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "code");

	return cJSON_IsString(c) ? c->valuestring : "";
}

/* Counter NAME from a stats reply on a fresh connection, -1 on error. */
static inline double e2e_stat(const char *sock, const char *name)
{
	e2e_reply_t r;
	double v;

	if (e2e_call(sock, "{\"op\":\"stats\"}", &r))
		return -1;
	v = e2e_num(r.h, name);
	e2e_reply_free(&r);
	return v;
}

/* Sends the daemon at SOCK a frame it cannot read (a header length over
 * every limit) on a connection of its own; 0 when the answer is
 * E_TOO_LARGE, as it must be, else -1. */
static inline int e2e_bad_frame(const char *sock)
{
	e2e_reply_t r;
	int fd = e2e_connect(sock), rc = -1;

	if (fd < 0)
		return -1;
	if (e2e_write_all(fd, "\xff\xff\xff\xff\0\0\0\0", 8) == 0 &&
	    e2e_recv(fd, &r) == 0) {
		rc = strcmp(e2e_code(&r), "E_TOO_LARGE") == 0 ? 0 : -1;
		e2e_reply_free(&r);
	}
	close(fd);
	return rc;
}

/* 1 when the daemon at SOCK lists BACKEND as available in its hello, 0
 * when not, -1 when it does not answer. */
static inline int e2e_backend_available(const char *sock, const char *backend)
{
	const cJSON *b;
	e2e_reply_t r;
	int yes = 0;

	if (e2e_call(sock, "{\"op\":\"hello\"}", &r))
		return -1;
	cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(r.h,
	    "backends"))
		if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(b,
		    "name")) && strcmp(cJSON_GetObjectItemCaseSensitive(b,
		    "name")->valuestring, backend) == 0)
			yes = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b,
			    "available"));
	e2e_reply_free(&r);
	return yes;
}

/* One warm request of ITEMS (a comma-separated list of get-specs) to the
 * daemon at SOCK: how many items there were, or -1 when the request or an
 * item failed (MSG says which). */
static inline int e2e_warm_items(const char *sock, const char *items,
    char *msg, size_t msglen)
{
	const cJSON *s;
	e2e_reply_t r;
	ks_buf_t req;
	char *text;
	int n = -1;

	ks_buf_init(&req);
	ks_buf_printf(&req, "{\"op\":\"warm\",\"items\":[%s]}", items);
	if (!req.data || e2e_call(sock, req.data, &r)) {
		snprintf(msg, msglen, "warm: no reply");
		ks_buf_close(&req);
		return -1;
	}
	ks_buf_close(&req);
	s = cJSON_GetObjectItemCaseSensitive(r.h, "summary");
	if (e2e_ok(&r) && e2e_num(s, "failed") == 0)
		n = (int)e2e_num(s, "total");
	if (n < 0) {
		text = cJSON_PrintUnformatted(r.h);
		snprintf(msg, msglen, "warm: %.480s", text ? text : "?");
		free(text);
	}
	e2e_reply_free(&r);
	return n;
}

/* Warms every kernel of the library on BACKEND (TARGET "auto" or an
 * explicit one) in every dtype at up to PER shapes each (every dim at one
 * of a list of values that the kernel validates), through the daemon at
 * SOCK: the specs warmed (each compiled, or found cached), or -1 (MSG
 * says why). */
static inline int e2e_warm_library(const char *sock, const char *backend,
    const char *target, int per, char *msg, size_t msglen)
{
	static const int64_t vals[] = { 8, 16, 24, 32, 40, 48, 64, 96, 128,
	    160, 192, 256 };
	static const ks_dtype_t dtypes[] = { KS_DTYPE_F32, KS_DTYPE_F16,
	    KS_DTYPE_BF16 };
	const ks_kernel_def_t *const *all;
	int k, nk, t, v, i, n = 0, batch = 0, got, rc = 0;
	ks_buf_t items;

	all = ks_kernels(&nk);
	ks_buf_init(&items);
	for (k = 0; k < nk && rc >= 0; k++)
	for (t = 0; t < 3 && rc >= 0; t++)
	for (v = 0, got = 0; v < (int)(sizeof vals / sizeof *vals) &&
	    got < per && rc >= 0; v++) {
		ks_dim_t dims[KS_MAX_DIMS];
		ks_spec_t spec;
		char err[256];

		for (i = 0; i < all[k]->ndims; i++) {
			dims[i].name = all[k]->dims[i];
			dims[i].is_const = 1;
			dims[i].value = vals[v];
		}
		if (ks_kernel_validate(all[k], dtypes[t], KS_MODE_EXACT, dims,
		    all[k]->ndims, &spec, err, sizeof err) != KS_OK)
			continue;
		ks_buf_printf(&items, "%s{\"kernel\":\"%s\",\"backend\":"
		    "\"%s\",\"target\":\"%s\",\"dtype\":\"%s\",\"shape\":{",
		    batch ? "," : "", all[k]->name, backend, target,
		    ks_dtype_name(dtypes[t]));
		for (i = 0; i < all[k]->ndims; i++)
			ks_buf_printf(&items, "%s\"%s\":%" PRId64, i ? "," : "",
			    all[k]->dims[i], vals[v]);
		ks_buf_puts(&items, "}}");
		got++;
		if (++batch == 200) {
			rc = e2e_warm_items(sock, items.data, msg, msglen);
			n += rc;
			ks_buf_reset(&items);
			batch = 0;
		}
	}
	if (batch && rc >= 0) {
		rc = e2e_warm_items(sock, items.data, msg, msglen);
		n += rc;
	}
	ks_buf_close(&items);
	return rc < 0 ? -1 : n;
}

/* Compiles that ran in the workers of the daemon at SOCK (every outcome
 * of the cpu backend, stats' compiles_by_backend), -1 on error. */
static inline double e2e_compiles_ran(const char *sock)
{
	static const char *const res[] = { "ok", "failed", "timeout",
	    "crashed", "oom" };
	const cJSON *c;
	e2e_reply_t r;
	double n = 0;
	size_t i;

	if (e2e_call(sock, "{\"op\":\"stats\"}", &r))
		return -1;
	c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(
	    r.h, "compiles_by_backend"), "cpu");
	for (i = 0; i < sizeof res / sizeof res[0]; i++)
		n += e2e_num(c, res[i]);
	e2e_reply_free(&r);
	return n;
}

/* Loads a CPU artifact from memory (base's loader: memfd + dlopen, no
 * temporary file); unload with ks_so_unload. */
typedef void (*e2e_entry_t)(void **params, uint64_t gb, uint64_t ge);

static inline ks_so_t *e2e_load(const void *bytes, size_t len,
    const char *entry, e2e_entry_t *fn)
{
	ks_so_t *lib;
	void *sym;
	char err[256];

	if (ks_so_load(bytes, len, entry, &lib, &sym, err, sizeof err)) {
		fprintf(stderr, "e2e_load: %s\n", err);
		return NULL;
	}
	memcpy(fn, &sym, sizeof *fn);
	return lib;
}

#endif
