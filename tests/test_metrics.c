/*
 * The metrics listener (--metrics-listen): /metrics read with a real curl
 * and checked by a real promtool, its counters moving with the requests
 * served; the HTTP side's refusals; the dashboard page in a real headless
 * Chromium, showing what `stats` says, with a screenshot kept in
 * $KSPEC_BUILD/test-artifacts/dashboard.png.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/stat.h>

#include "e2e.h"
#include "../server/http.h"

static e2e_daemon_t d;
static char addr[64];

static void setup(void)
{
	memset(&d, 0, sizeof d);
	addr[0] = '\0';
}

static void down(void)
{
	e2e_cleanup(&d);
}

TestSuite(metrics, .init = setup, .fini = down, .timeout = 180);

static int have(const char *prog)
{
	char cmd[256];

	snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", prog);
	return system(cmd) == 0;
}

static void start_with_metrics(const char *const *more)
{
	const char *args[16] = { "--workers", "1", "--metrics-listen", addr };
	int i, n = 4, port, tries;

	for (i = 0; more && more[i] && n < 15; i++)
		args[n++] = more[i];
	args[n] = NULL;
	/* The port was free a moment before the daemon binds it; another
	 * test's client may take it in between (the daemon then exits at
	 * once): a few more ports before giving up. */
	for (tries = 0; tries < 5; tries++) {
		port = e2e_free_port();
		cr_assert_gt(port, 0, "no free loopback port");
		snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
		if (e2e_start(&d, args) == 0)
			return;
	}
	cr_assert_fail("kspecd did not start (5 loopback ports tried)");
}

/* What CMD prints on stdout (malloc'd), and its exit status in *RC. */
static char *run(const char *cmd, int *rc)
{
	char *out = NULL;
	size_t len = 0, cap = 0;
	char buf[4096];
	size_t n;
	FILE *p = popen(cmd, "r");
	int st;

	cr_assert(p, "cannot run %s", cmd);
	while ((n = fread(buf, 1, sizeof buf, p)) > 0) {
		if (len + n + 1 > cap) {
			cap = (len + n + 1) * 2;
			out = realloc(out, cap);
			cr_assert(out);
		}
		memcpy(out + len, buf, n);
		len += n;
	}
	st = pclose(p);
	if (rc)
		*rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	if (!out)
		out = calloc(1, 1);
	else
		out[len] = '\0';
	return out;
}

static char *fetch(const char *path)
{
	char cmd[512];
	int rc;
	char *out;

	snprintf(cmd, sizeof cmd, "curl -sS --max-time 10 http://%s%s", addr,
	    path);
	out = run(cmd, &rc);
	cr_assert_eq(rc, 0, "curl %s failed", path);
	return out;
}

/* The value of the sample whose line begins with SERIES (name and
 * labels exactly as printed), or -1. */
static double sample(const char *text, const char *series)
{
	const char *p = text;
	size_t n = strlen(series);

	while ((p = strstr(p, series))) {
		if ((p == text || p[-1] == '\n') && p[n] == ' ')
			return strtod(p + n + 1, NULL);
		p += n;
	}
	return -1;
}

/* promtool's verdict on TEXT: its exit status, its complaints in OUT. */
static int promtool(const char *text, char **out)
{
	char path[400], cmd[600];
	FILE *f;
	int rc;

	snprintf(path, sizeof path, "%s/metrics.txt", d.dir);
	f = fopen(path, "w");
	cr_assert(f);
	fputs(text, f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "promtool check metrics < '%s' 2>&1", path);
	*out = run(cmd, &rc);
	return rc;
}

static void get(const char *kernel, const char *shape, const char *want)
{
	char json[512];
	e2e_reply_t r;

	snprintf(json, sizeof json, "{\"op\":\"get\",\"kernel\":\"%s\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{%s}}", kernel,
	    shape);
	cr_assert_eq(e2e_call(d.sock, json, &r), 0);
	if (want)
		cr_assert_str_eq(e2e_str(&r, "source"), want);
	else
		cr_assert(!e2e_ok(&r));
	e2e_reply_free(&r);
}

Test(metrics, promtool_accepts_it_and_the_counters_move)
{
	char *before, *after, *lint, *bad, *at;
	e2e_reply_t r;
	int i;

	if (!have("promtool") || !have("curl"))
		cr_skip_test("promtool or curl is not installed "
		    "(deploy/deps.sh installs prometheus and curl)");
	start_with_metrics(NULL);
	before = fetch("/metrics");
	cr_assert_eq(promtool(before, &lint), 0, "promtool: %s", lint);
	free(lint);

	get("gemm", "\"M\":1,\"N\":64,\"K\":64", "compiled");
	get("gemm", "\"M\":1,\"N\":64,\"K\":64", "memory");
	get("nosuch", "\"M\":1", NULL);
	/* A warm of the cached spec is not a get, nor a get's hit. */
	cr_assert_eq(e2e_call(d.sock, "{\"op\":\"warm\",\"items\":[{"
	    "\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\","
	    "\"shape\":{\"M\":1,\"N\":64,\"K\":64}}]}", &r), 0);
	cr_assert(e2e_ok(&r));
	e2e_reply_free(&r);
	/* A frame that cannot be read: an error of no op. */
	cr_assert_eq(e2e_bad_frame(d.sock), 0);
	after = fetch("/metrics");
	cr_assert_eq(promtool(after, &lint), 0, "promtool: %s", lint);
	free(lint);

	cr_assert_eq(sample(before, "kspec_requests_total{op=\"get\"}"), 0);
	cr_assert_eq(sample(after, "kspec_requests_total{op=\"get\"}"), 3);
	cr_assert_eq(sample(after, "kspec_request_errors_total{op=\"get\"}"),
	    1);
	cr_assert_eq(sample(before, "kspec_errors_total{code="
	    "\"E_UNKNOWN_KERNEL\"}"), 0, "every code is there from the start");
	cr_assert_eq(sample(after, "kspec_errors_total{code="
	    "\"E_UNKNOWN_KERNEL\"}"), 1);
	cr_assert_eq(sample(after, "kspec_errors_total{code="
	    "\"E_TOO_LARGE\"}"), 1);
	cr_assert_eq(sample(after, "kspec_request_errors_total{op=\"none\"}"),
	    1);
	cr_assert_eq(sample(after, "kspec_gets_total"), 3);
	cr_assert_eq(sample(after, "kspec_warm_items_total"), 1);
	cr_assert_eq(sample(before, "kspec_hits_total{tier=\"memory\"}"), 0);
	cr_assert_eq(sample(after, "kspec_hits_total{tier=\"memory\"}"), 1,
	    "a warm item's hit was counted as a get's");
	cr_assert_eq(sample(after, "kspec_compiles_total{backend=\"cpu\","
	    "result=\"ok\"}"), 1);
	cr_assert_eq(sample(after, "kspec_compile_duration_seconds_count"
	    "{backend=\"cpu\"}"), 1);
	cr_assert_gt(sample(after, "kspec_compile_duration_seconds_sum"
	    "{backend=\"cpu\"}"), 0);
	cr_assert_eq(sample(after, "kspec_hit_duration_seconds_count"
	    "{tier=\"memory\"}"), 1);
	cr_assert_eq(sample(after, "kspec_hit_duration_seconds_bucket"
	    "{tier=\"memory\",le=\"+Inf\"}"), 1);
	cr_assert_gt(sample(after, "kspec_store_bytes"), 0);
	cr_assert_eq(sample(after, "kspec_store_entries"), 1);
	/* --workers 1 and the reserve, idle once a liveness ping that may
	 * be out is answered (the worker is "checking" meanwhile, longer on
	 * a loaded machine: once it was when scraped). */
	for (i = 0; i < 300 && sample(after, "kspec_workers{state=\"idle\"}")
	    != 2; i++) {
		usleep(100000);
		free(after);
		after = fetch("/metrics");
	}
	cr_assert_eq(sample(after, "kspec_workers{state=\"idle\"}"), 2);
	cr_assert_eq(sample(after, "kspec_worker_unresponsive_total"), 0);
	cr_assert_eq(sample(after, "kspec_reserve_compiles_total"), 0);
	cr_assert_eq(sample(after, "kspec_compiles_queued"), 0);

	/* The checker catches a planted mistake: a counter without its
	 * _total suffix. */
	bad = strdup(after);
	while ((at = strstr(bad, "kspec_gets_total")))
		memcpy(at, "kspec_gets_count", 16);
	cr_assert_neq(promtool(bad, &lint), 0, "promtool accepted a counter "
	    "named without _total");
	cr_assert(strstr(lint, "kspec_gets_count"), "promtool: %s", lint);
	free(lint);
	free(bad);
	free(before);
	free(after);
}

/* Waits until the store holds N entries and the writer has nothing
 * pending, so that store figures stand still. */
static void settle(int n)
{
	int i;

	for (i = 0; i < 200; i++) {
		e2e_reply_t s;
		const cJSON *store;
		int done;

		cr_assert_eq(e2e_call(d.sock, "{\"op\":\"stats\"}", &s), 0);
		store = cJSON_GetObjectItem(s.h, "store");
		done = e2e_num(store, "entries") == n &&
		    e2e_num(store, "writes_pending") == 0;
		e2e_reply_free(&s);
		if (done)
			return;
		usleep(50000);
	}
	cr_assert_fail("the store did not reach %d entries", n);
}

Test(metrics, api_stats_is_the_stats_reply)
{
	cJSON *page;
	e2e_reply_t r;
	char *body;

	if (!have("curl"))
		cr_skip_test("curl is not installed (deploy/deps.sh)");
	start_with_metrics(NULL);
	get("gemm", "\"M\":1,\"N\":32,\"K\":32", "compiled");
	get("gemm", "\"M\":1,\"N\":32,\"K\":32", "memory");
	settle(1);
	cr_assert_eq(e2e_call(d.sock, "{\"op\":\"stats\"}", &r), 0);
	body = fetch("/api/stats");
	page = cJSON_Parse(body);
	cr_assert(page, "not JSON: %s", body);
	cr_assert_eq(e2e_num(page, "gets"), e2e_num(r.h, "gets"));
	cr_assert_eq(e2e_num(page, "hits_memory"), 1);
	cr_assert_eq(e2e_num(page, "hits_memory"),
	    e2e_num(r.h, "hits_memory"));
	cr_assert_eq(e2e_num(cJSON_GetObjectItem(page, "store"), "bytes"),
	    e2e_num(cJSON_GetObjectItem(r.h, "store"), "bytes"));
	cr_assert(cJSON_GetObjectItem(cJSON_GetObjectItem(page, "latency"),
	    "hit_memory"));
	cr_assert(cJSON_GetObjectItem(r.h, "recent_errors"));
	cJSON_Delete(page);
	e2e_reply_free(&r);
	free(body);
}

/* /api/history: the dashboard's series sampled every 2 s, oldest first,
 * each sample [age_ms, requests, hits, gets, queue_depth]; a sample taken
 * after two gets (one hit) holds them, and the ages go down. */
Test(metrics, api_history_keeps_the_dashboards_series)
{
	const cJSON *s, *last = NULL, *prev = NULL;
	cJSON *h;
	char *body;
	int i, n = 0;

	if (!have("curl"))
		cr_skip_test("curl is not installed (deploy/deps.sh)");
	start_with_metrics(NULL);
	get("gemm", "\"M\":1,\"N\":32,\"K\":32", "compiled");
	get("gemm", "\"M\":1,\"N\":32,\"K\":32", "memory");
	/* A sample after the gets: one is taken every 2 s. */
	for (i = 0; i < 100; i++) {
		body = fetch("/api/history");
		h = cJSON_Parse(body);
		cr_assert(h, "not JSON: %s", body);
		free(body);
		s = cJSON_GetObjectItem(h, "samples");
		last = cJSON_GetArrayItem(s, cJSON_GetArraySize(s) - 1);
		if (last && cJSON_GetArrayItem(last, 3)->valuedouble == 2)
			break;
		cJSON_Delete(h);
		h = NULL;
		usleep(100000);
	}
	cr_assert(h, "no sample after the gets within 10 s");
	cr_assert_eq(e2e_num(h, "interval_ms"), 2000);
	cr_assert_eq(cJSON_GetArrayItem(last, 2)->valuedouble, 1, "hits");
	cr_assert_geq(cJSON_GetArrayItem(last, 1)->valuedouble, 2,
	    "requests");
	cJSON_ArrayForEach(prev, cJSON_GetObjectItem(h, "samples")) {
		cr_assert_eq(cJSON_GetArraySize(prev), 5);
		n++;
	}
	cr_assert_geq(n, 1);
	if (n > 1)
		cr_assert_gt(cJSON_GetArrayItem(cJSON_GetArrayItem(
		    cJSON_GetObjectItem(h, "samples"), 0), 0)->valuedouble,
		    cJSON_GetArrayItem(last, 0)->valuedouble, "oldest first");
	cJSON_Delete(h);
}

/* A flood of scrapes walks the daemon's state at most 20 times a second:
 * the rest get the newest render, and a scrape after a pause is fresh. */
Test(metrics, a_flood_of_scrapes_is_served_from_the_newest_render)
{
	char cmd[8192], *out, *page;
	e2e_reply_t r;
	size_t k;
	int i;

	if (!have("curl"))
		cr_skip_test("curl is not installed (deploy/deps.sh)");
	start_with_metrics(NULL);
	k = (size_t)snprintf(cmd, sizeof cmd, "curl -sS --max-time 10 -o "
	    "/dev/null");
	for (i = 0; i < 60; i++)
		k += (size_t)snprintf(cmd + k, sizeof cmd - k, " http://%s"
		    "/metrics", addr);
	out = run(cmd, &i);
	cr_assert_eq(i, 0, "curl: %s", out);
	free(out);
	cr_assert_eq(e2e_call(d.sock, "{\"op\":\"ping\"}", &r), 0);
	e2e_reply_free(&r);
	usleep(200 * 1000);             /* a few renders' worth of tokens */
	page = fetch("/metrics");
	cr_assert_geq(sample(page, "kspec_scrapes_total{served=\"snapshot\"}"),
	    20, "%s", page);
	cr_assert_leq(sample(page, "kspec_scrapes_total{served=\"rendered\"}"),
	    45);
	cr_assert_eq(sample(page, "kspec_requests_total{op=\"ping\"}"), 1,
	    "the scrape after a pause is not fresh");
	free(page);
}

Test(metrics, unix_socket_listener_has_the_sockets_mode_and_checks_host)
{
	char path[400], cmd[600], *out;
	struct stat st;
	const char *args[] = { "--metrics-listen", path, NULL };
	int rc;

	if (!have("curl"))
		cr_skip_test("curl is not installed (deploy/deps.sh)");
	snprintf(d.dir, sizeof d.dir, "/tmp/kspec-e2e-XXXXXX");
	cr_assert(mkdtemp(d.dir));
	snprintf(path, sizeof path, "%s/run/metrics.sock", d.dir);
	cr_assert_eq(e2e_start(&d, args), 0);
	cr_assert_eq(stat(path, &st), 0);
	cr_assert(S_ISSOCK(st.st_mode));
	cr_assert_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
	snprintf(cmd, sizeof cmd, "curl -sS --max-time 10 --unix-socket '%s' "
	    "http://localhost/metrics", path);
	out = run(cmd, &rc);
	cr_assert_eq(rc, 0);
	cr_assert(strstr(out, "# TYPE kspec_requests_total counter"));
	free(out);
	/* The same Host check as on TCP: a browser reaches this socket
	 * through ssh -L, so a rebound name is refused here too. */
	snprintf(cmd, sizeof cmd, "curl -s -o /dev/null -w '%%{http_code}' "
	    "--max-time 10 --unix-socket '%s' -H 'Host: rebound.example:9464' "
	    "http://localhost/api/stats", path);
	out = run(cmd, &rc);
	cr_assert_str_eq(out, "403");
	free(out);
	cr_assert_eq(e2e_stop(&d), 0);
	cr_assert_neq(stat(path, &st), 0, "the metrics socket outlived "
	    "kspecd");
}

/* kspecd with ARG as --metrics-listen: 1 when it stopped by itself, 0
 * when it was still running once its socket was there (it listens); its
 * stderr into LOG.  Either within 30 s, a generous deadline: it decides
 * once its first worker reports, which a sanitizer build on a busy
 * machine can take seconds to do. */
static int start_fails(const char *arg, const char *more, char *log,
    size_t loglen)
{
	char cmd[1200];
	char *out;
	int rc;

	snprintf(d.dir, sizeof d.dir, "/tmp/kspec-e2e-XXXXXX");
	cr_assert(mkdtemp(d.dir));
	snprintf(cmd, sizeof cmd, "timeout 60 %s/kspecd --socket %s/s --store "
	    "%s/db --workers 1 --metrics-listen '%s' %s 2>&1 & p=$!; "
	    "i=0; while [ $i -lt 300 ] && kill -0 $p 2>/dev/null && "
	    "! [ -S %s/s ]; do sleep 0.1; i=$((i + 1)); done; "
	    "if kill -0 $p 2>/dev/null; then kill $p; wait $p; "
	    "echo STILL-RUNNING; fi; wait $p", e2e_build_dir(), d.dir,
	    d.dir, arg, more, d.dir);
	out = run(cmd, &rc);
	snprintf(log, loglen, "%s", out);
	free(out);
	return strstr(log, "STILL-RUNNING") ? 0 : 1;
}

Test(metrics, only_loopback_unless_told)
{
	char log[8192];

	cr_assert(start_fails("0.0.0.0:0", "", log, sizeof log), "%s", log);
	cr_assert(strstr(log, "not a loopback address"), "%s", log);
	cr_assert(strstr(log, "--metrics-any-host"), "%s", log);
	e2e_cleanup(&d);
	memset(&d, 0, sizeof d);
	cr_assert(start_fails("nonsense", "", log, sizeof log), "%s", log);
	cr_assert(strstr(log, "HOST:PORT"), "%s", log);
	e2e_cleanup(&d);
	memset(&d, 0, sizeof d);
	cr_assert(start_fails("127.0.0.1:99999", "", log, sizeof log), "%s",
	    log);
	cr_assert(strstr(log, "bad port"), "%s", log);
	e2e_cleanup(&d);
	memset(&d, 0, sizeof d);
	/* A port in use: the daemon stops before it binds its socket, and
	 * leaves no socket file behind. */
	{
		struct sockaddr_in sa;
		socklen_t len = sizeof sa;
		char busy[64], sock[400];
		struct stat st;
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		memset(&sa, 0, sizeof sa);
		sa.sin_family = AF_INET;
		sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
		cr_assert_eq(listen(fd, 1), 0);
		getsockname(fd, (struct sockaddr *)&sa, &len);
		snprintf(busy, sizeof busy, "127.0.0.1:%d", ntohs(sa.sin_port));
		cr_assert(start_fails(busy, "", log, sizeof log), "%s", log);
		cr_assert(strstr(log, "address already in use"), "%s", log);
		snprintf(sock, sizeof sock, "%s/s", d.dir);
		cr_assert_neq(stat(sock, &st), 0, "the socket was left behind");
		close(fd);
		e2e_cleanup(&d);
		memset(&d, 0, sizeof d);
	}
	/* Told: it starts. */
	cr_assert(!start_fails("0.0.0.0:0", "--metrics-any-host", log,
	    sizeof log), "%s", log);
	cr_assert(strstr(log, "metrics and dashboard on http://0.0.0.0:"),
	    "%s", log);
}

Test(metrics, bad_http_is_refused_and_the_daemon_serves_on)
{
	char cmd[10200], *out, big[9001];
	int fds[40], i, rc, port, closed;
	struct sockaddr_in sa;

	if (!have("curl"))
		cr_skip_test("curl is not installed (deploy/deps.sh)");
	start_with_metrics(NULL);
	snprintf(cmd, sizeof cmd, "curl -s -o /dev/null -w '%%{http_code}' "
	    "--max-time 10 http://%s/nowhere", addr);
	out = run(cmd, &rc);
	cr_assert_str_eq(out, "404");
	free(out);
	snprintf(cmd, sizeof cmd, "curl -s -o /dev/null -w '%%{http_code}' "
	    "--max-time 10 -X POST -d x=1 http://%s/metrics", addr);
	out = run(cmd, &rc);
	cr_assert_str_eq(out, "405");
	free(out);
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	snprintf(cmd, sizeof cmd, "curl -s -o /dev/null -w '%%{http_code}' "
	    "--max-time 10 -H 'X-Big: %.9000s' http://%s/metrics", big, addr);
	out = run(cmd, &rc);
	cr_assert_str_eq(out, "431");
	free(out);
	/* A name that is not loopback in Host (DNS rebinding) is refused. */
	snprintf(cmd, sizeof cmd, "curl -s -o /dev/null -w '%%{http_code}' "
	    "--max-time 10 -H 'Host: rebound.example:%s' http://%s/api/stats",
	    strchr(addr, ':') + 1, addr);
	out = run(cmd, &rc);
	cr_assert_str_eq(out, "403");
	free(out);
	snprintf(cmd, sizeof cmd, "curl -s -o /dev/null -w '%%{http_code}' "
	    "--max-time 10 -H 'Host: localhost' http://%s/api/stats", addr);
	out = run(cmd, &rc);
	cr_assert_str_eq(out, "200");
	free(out);

	/* 40 connections of this one user that never send a byte: one
	 * peer's share is held, the others closed at once; the protocol is
	 * served all the same, and once they go, a scrape is too.  (Other
	 * users' scrapes meanwhile: test_users.c.) */
	port = atoi(strchr(addr, ':') + 1);
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (i = 0; i < 40; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		cr_assert_eq(connect(fds[i], (struct sockaddr *)&sa, sizeof sa),
		    0);
	}
	get("gemm", "\"M\":1,\"N\":16,\"K\":16", "compiled");
	for (i = closed = 0; i < 40; i++) {
		struct pollfd p = { fds[i], POLLIN, 0 };
		char ch;

		/* An open one stays silent; a closed one reads its end. */
		if (poll(&p, 1, i < KS_HTTP_MAX_PER_PEER ? 100 : 2000) == 1 &&
		    read(fds[i], &ch, 1) == 0)
			closed++;
	}
	cr_assert_eq(closed, 40 - KS_HTTP_MAX_PER_PEER, "%d of 40 silent "
	    "connections were closed", closed);
	for (i = 0; i < 40; i++)
		close(fds[i]);
	out = fetch("/metrics");
	cr_assert(strstr(out, "kspec_requests_total{op=\"get\"} 1"), "%s",
	    out);
	free(out);
}

Test(metrics, a_head_that_never_ends_is_cut_off, .timeout = 60)
{
	struct sockaddr_in sa;
	char buf[512];
	ssize_t n;
	size_t got = 0;
	int fd;

	start_with_metrics(NULL);
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)atoi(strchr(addr, ':') + 1));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	cr_assert_eq(e2e_write_all(fd, "GET /metrics HTTP/1.1\r\nHost: x", 31),
	    0);
	/* No end of head: within the 10 s limit (and a margin) a 400. */
	while ((n = read(fd, buf + got, sizeof buf - 1 - got)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	cr_assert(strstr(buf, "HTTP/1.1 400") && strstr(buf, "10 s"), "%s",
	    buf);
	close(fd);
}

/* The value of data-value on the element with id ID in DOM, or "". */
static void data_value(const char *dom, const char *id, char *out,
    size_t outlen)
{
	char pat[128];
	const char *p, *v, *end;

	out[0] = '\0';
	snprintf(pat, sizeof pat, "id=\"%s\"", id);
	p = strstr(dom, pat);
	if (!p)
		return;
	end = strchr(p, '>');
	v = strstr(p, "data-value=\"");
	if (!v || (end && v > end)) {
		/* Attributes may come in either order. */
		const char *start = p;

		while (start > dom && *start != '<')
			start--;
		v = strstr(start, "data-value=\"");
		if (!v || (end && v > end))
			return;
	}
	v += 12;
	snprintf(out, outlen, "%.*s", (int)strcspn(v, "\""), v);
}

Test(metrics, dashboard_in_chromium_shows_what_stats_says, .timeout = 240)
{
	char cmd[2000], shot[600], ud[400], want[64], got[64], *dom, *js;
	const char *chrome = have("chromium") ? "chromium" :
	    have("chromium-headless-shell") ? "chromium-headless-shell" : NULL;
	struct { cJSON *h; } r;
	struct stat st;
	double gets, hits;
	int rc;

	if (!chrome || !have("curl"))
		cr_skip_test("chromium or curl is not installed "
		    "(deploy/deps.sh installs them)");
	start_with_metrics((const char *const[]){ "--max-bytes", "64M",
	    NULL });
	get("gemm", "\"M\":1,\"N\":64,\"K\":64", "compiled");
	get("gemm", "\"M\":1,\"N\":64,\"K\":64", "memory");
	get("gemm", "\"M\":1,\"N\":64,\"K\":64", "memory");
	get("rmsnorm", "\"R\":1,\"H\":64", "compiled");
	/* A client's bytes in an error message: shown as text, never as
	 * markup. */
	get("<img/src=x/id=planted>", "\"M\":1", NULL);
	settle(2);

	snprintf(ud, sizeof ud, "%s/chromium", d.dir);
	snprintf(cmd, sizeof cmd, "%s --headless --no-sandbox --disable-gpu "
	    "--disable-dev-shm-usage --no-first-run --user-data-dir='%s' "
	    "--virtual-time-budget=4000 --dump-dom http://%s/ 2>/dev/null",
	    chrome, ud, addr);
	dom = run(cmd, &rc);
	cr_assert_eq(rc, 0, "chromium failed");
	cr_assert(strstr(dom, "data-polls=\""), "the page never polled: %.2000s",
	    dom);
	/* It drew from the daemon's samples before its own first poll. */
	cr_assert(strstr(dom, "data-seeded=\"") && !strstr(dom,
	    "data-seeded=\"0\""), "the page did not read /api/history: "
	    "%.400s", strstr(dom, "<body"));

	/* What `kspec stats --json` prints, beside what the page shows. */
	snprintf(cmd, sizeof cmd, "%s/kspec --socket '%s' stats --json",
	    e2e_build_dir(), d.sock);
	js = run(cmd, &rc);
	cr_assert_eq(rc, 0, "kspec stats --json failed");
	r.h = cJSON_Parse(js);
	cr_assert(r.h, "not JSON: %s", js);
	free(js);
	gets = e2e_num(r.h, "gets");
	hits = e2e_num(r.h, "hits_memory") + e2e_num(r.h, "hits_disk");
	cr_assert_eq(gets, 5);
	cr_assert_eq(hits, 2);
	/* The same figure kspec stats prints, to its four decimals. */
	snprintf(want, sizeof want, "%.4f", hits / gets);
	data_value(dom, "hit-ratio", got, sizeof got);
	cr_assert_str_eq(got, want, "page %s, stats %s", got, want);
	snprintf(want, sizeof want, "%.0f",
	    e2e_num(cJSON_GetObjectItem(r.h, "store"), "bytes"));
	data_value(dom, "store-bytes", got, sizeof got);
	cr_assert_str_eq(got, want, "page %s, stats %s", got, want);
	snprintf(want, sizeof want, "%.0f", e2e_num(r.h, "errors"));
	data_value(dom, "errors", got, sizeof got);
	cr_assert_str_eq(got, want);
	cJSON_Delete(r.h);
	cr_assert(strstr(dom, "gemm"), "most requested kernels missing");
	cr_assert(strstr(dom, "E_UNKNOWN_KERNEL"), "recent errors missing");
	cr_assert(strstr(dom, "&lt;img/src=x/id=planted&gt;"),
	    "the client's string is not shown as text");
	/* The page itself has no images: one is the client's markup. */
	cr_assert_null(strstr(dom, "<img"),
	    "the page made markup of a client's string");
	free(dom);

	/* That check catches a page that writes the message as markup. */
	{
		char planted[400];
		FILE *f;

		snprintf(planted, sizeof planted, "%s/planted.html", d.dir);
		f = fopen(planted, "w");
		cr_assert(f);
		fputs("<p id=e></p><script>document.getElementById('e')."
		    "innerHTML = \"no kernel named '<img/src=x/id=planted>'\";"
		    "</script>", f);
		fclose(f);
		snprintf(cmd, sizeof cmd, "%s --headless --no-sandbox "
		    "--disable-gpu --disable-dev-shm-usage --no-first-run "
		    "--user-data-dir='%s' --dump-dom 'file://%s' 2>/dev/null",
		    chrome, ud, planted);
		dom = run(cmd, &rc);
		cr_assert(strstr(dom, "<img"), "the markup check "
		    "missed a planted innerHTML: %s", dom);
		free(dom);
	}

	/* The screenshot, kept for people to look at. */
	snprintf(cmd, sizeof cmd, "mkdir -p '%s/test-artifacts'",
	    e2e_build_dir());
	cr_assert_eq(system(cmd), 0);
	snprintf(shot, sizeof shot, "%s/test-artifacts/dashboard.png",
	    e2e_build_dir());
	unlink(shot);
	snprintf(cmd, sizeof cmd, "%s --headless --no-sandbox --disable-gpu "
	    "--disable-dev-shm-usage --no-first-run --user-data-dir='%s' "
	    "--hide-scrollbars --window-size=1400,1000 "
	    "--virtual-time-budget=4000 --screenshot='%s' http://%s/ "
	    ">/dev/null 2>&1", chrome, ud, shot, addr);
	js = run(cmd, &rc);
	free(js);
	cr_assert_eq(rc, 0, "chromium --screenshot failed");
	cr_assert_eq(stat(shot, &st), 0, "no screenshot at %s", shot);
	cr_assert_gt(st.st_size, 20000, "a screenshot of %ld bytes is blank",
	    (long)st.st_size);
	cr_log_info("dashboard screenshot: %s", shot);
}
