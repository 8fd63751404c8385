/*
 * The daemon's loop under clients that take more than their share: a
 * pipelining connection that never reads, idle connections, slow frames,
 * one uid's many connections.  Real kspecd, real sockets; deadlines are
 * generous liveness bounds (the speeds are bench figures).
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/time.h>

#include "../include/kspec.h"
#include "e2e.h"

static e2e_daemon_t D;

static void down(void)
{
	e2e_cleanup(&D);
}

TestSuite(loop, .fini = down, .timeout = 120);

static void start(const char *const *extra)
{
	memset(&D, 0, sizeof D);
	cr_assert_eq(e2e_start(&D, extra), 0, "kspecd did not start");
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Stuffs FD with COUNT pipelined requests of JSON, as many as the socket
 * takes without blocking; returns how many went in whole. */
static int stuff(int fd, const char *json, int count)
{
	uint32_t hl = (uint32_t)strlen(json);
	size_t one = 8 + hl, n = one * (size_t)count, off = 0;
	char *buf = malloc(n);
	int i, flags = fcntl(fd, F_GETFL);

	cr_assert(buf);
	for (i = 0; i < count; i++) {
		char *p = buf + one * (size_t)i;

		p[0] = (char)(hl >> 24);
		p[1] = (char)(hl >> 16);
		p[2] = (char)(hl >> 8);
		p[3] = (char)hl;
		memset(p + 4, 0, 4);
		memcpy(p + 8, json, hl);
	}
	fcntl(fd, F_SETFL, flags | O_NONBLOCK);
	for (i = 0; i < 200 && off < n; i++) {
		ssize_t w = write(fd, buf + off, n - off);

		if (w > 0) {
			off += (size_t)w;
			i = 0;
		} else {
			usleep(5000);   /* the daemon reads, then pauses */
		}
	}
	free(buf);
	return (int)(off / one);
}

/* The worst ping round trip of N pings on a fresh connection, in ms. */
static double worst_ping(int n)
{
	double worst = 0, t;
	e2e_reply_t r;
	int fd = e2e_connect(D.sock), i;

	cr_assert_geq(fd, 0);
	for (i = 0; i < n; i++) {
		t = now_ms();
		cr_assert_eq(e2e_send(fd, "{\"op\":\"ping\",\"id\":1}"), 0);
		cr_assert_eq(e2e_recv(fd, &r), 0);
		cr_assert(e2e_ok(&r));
		e2e_reply_free(&r);
		t = now_ms() - t;
		if (t > worst)
			worst = t;
	}
	close(fd);
	return worst;
}

Test(loop, connections_that_pipeline_and_never_read_stall_nobody)
{
	int heavy[3], i, sent;
	double worst;
	long rss;

	start(NULL);
	for (i = 0; i < 3; i++) {
		heavy[i] = e2e_connect(D.sock);
		cr_assert_geq(heavy[i], 0);
		sent = stuff(heavy[i], "{\"op\":\"kernels\",\"id\":7}", 15000);
		cr_log_info("connection %d took %d kernels requests", i, sent);
	}
	worst = worst_ping(50);
	cr_log_info("worst of 50 pings beside them: %.1f ms", worst);
	cr_assert_lt(worst, 1000, "a ping waited %.0f ms", worst);
	cr_assert_gt(e2e_stat(D.sock, "turns_yielded"), 0);
	/* Three connections come to hold more than the global budget of
	 * unsent replies: their reading pauses, memory stays bounded, and
	 * others are still answered. */
	for (i = 0; i < 500 && e2e_stat(D.sock, "reads_paused_global") < 1;
	    i++)
		usleep(20000);
	cr_assert_gt(e2e_stat(D.sock, "reads_paused_global"), 0);
	worst = worst_ping(50);
	cr_log_info("worst of 50 pings with reading paused: %.1f ms", worst);
	cr_assert_lt(worst, 1000, "a ping waited %.0f ms", worst);
	rss = e2e_rss_kb(D.pid);
	cr_log_info("daemon RSS %ld KiB", rss);
	cr_assert_gt(rss, 0, "cannot read the daemon's RSS");
	cr_assert_lt(rss, 400 * 1024, "RSS %ld KiB", rss);
	cr_assert_leq(e2e_stat(D.sock, "unsent_bytes"),
	    KS_MAX_WRITE_QUEUE_TOTAL + KS_MAX_WRITE_QUEUE);
	for (i = 0; i < 3; i++)
		close(heavy[i]);
}

Test(loop, idle_connections_are_closed_and_a_waiting_one_is_not)
{
	static const char *const extra[] = { "--idle-timeout", "2", NULL };
	e2e_reply_t r;
	char b;
	int idle, busy;

	setenv("KSPEC_TEST_FAULTS", "delay/4000:N=4200", 1);
	memset(&D, 0, sizeof D);
	D.program = E2E_PLANT;
	cr_assert_eq(e2e_start(&D, extra), 0, "kspecd-plant did not start");
	unsetenv("KSPEC_TEST_FAULTS");
	idle = e2e_connect(D.sock);
	busy = e2e_connect(D.sock);
	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"ping\"}", &r), 0);
	e2e_reply_free(&r);
	cr_assert_eq(e2e_send(busy, "{\"op\":\"get\",\"id\":1,\"kernel\":"
	    "\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{"
	    "\"M\":1,\"N\":4200,\"K\":64},\"return\":\"meta\"}"), 0);
	/* The idle one is closed (EOF) after 2..3 s, with no reply. */
	cr_assert_eq(e2e_read_all(idle, &b, 1), -1, "an idle connection was "
	    "not closed");
	/* The one waiting 4 s on a compile gets its reply. */
	cr_assert_eq(e2e_recv(busy, &r), 0, "a waiting connection was closed");
	cr_assert(e2e_ok(&r));
	e2e_reply_free(&r);
	cr_assert_geq(e2e_stat(D.sock, "idle_closed"), 1);
	close(idle);
	close(busy);
}

Test(loop, slow_frames_are_cut_at_the_read_deadline)
{
	static const char *const extra[] = { "--read-timeout", "2", NULL };
	enum { N = 50 };
	static const char frame[] = "\0\0\0\x10{\"op\":\"ping\"}";
	int fds[N], open_n = N, i, k;
	double t0 = now_ms();
	e2e_reply_t r;

	start(extra);
	for (i = 0; i < N; i++) {
		fds[i] = e2e_connect(D.sock);
		cr_assert_geq(fds[i], 0);
	}
	/* One byte a second each: no frame is ever complete in time. */
	for (k = 0; open_n && now_ms() - t0 < 15000; k++) {
		for (i = 0; i < N; i++) {
			if (fds[i] < 0)
				continue;
			if (send(fds[i], frame + k % 8, 1, MSG_NOSIGNAL) != 1) {
				close(fds[i]);
				fds[i] = -1;
				open_n--;
			}
		}
		for (i = 0; i < N; i++) {
			struct pollfd p = { fds[i], POLLIN, 0 };

			if (fds[i] < 0 || poll(&p, 1, 0) != 1)
				continue;
			/* The reply says why, then the stream ends. */
			cr_assert_eq(e2e_recv(fds[i], &r), 0);
			cr_assert_str_eq(e2e_code(&r), "E_TIMEOUT");
			e2e_reply_free(&r);
			close(fds[i]);
			fds[i] = -1;
			open_n--;
		}
		usleep(1000000);
	}
	cr_log_info("%d slow clients closed in %.0f ms", N, now_ms() - t0);
	cr_assert_eq(open_n, 0, "%d slow clients still open", open_n);
	cr_assert_eq(e2e_stat(D.sock, "read_timeouts"), N);
}

Test(loop, one_uid_cannot_take_every_connection)
{
	static const char *const extra[] = { "--max-conns-per-user", "5",
	    NULL };
	e2e_reply_t r;
	int fds[5], i, extra_fd;

	start(extra);
	for (i = 0; i < 5; i++) {
		fds[i] = e2e_connect(D.sock);
		cr_assert_geq(fds[i], 0);
		cr_assert_eq(e2e_send(fds[i], "{\"op\":\"ping\"}"), 0);
		cr_assert_eq(e2e_recv(fds[i], &r), 0);
		e2e_reply_free(&r);
	}
	extra_fd = e2e_connect(D.sock);
	cr_assert_geq(extra_fd, 0);
	cr_assert_eq(e2e_recv(extra_fd, &r), 0);
	cr_assert_str_eq(e2e_code(&r), "E_BUSY");
	cr_assert(strstr(cJSON_GetObjectItem(cJSON_GetObjectItem(r.h,
	    "error"), "message")->valuestring, "--max-conns-per-user"));
	e2e_reply_free(&r);
	close(extra_fd);
	close(fds[0]);
	/* A slot given back is a slot for the next connection, once the
	 * daemon has seen the close. */
	for (i = 0; i < 500; i++) {
		cr_assert_eq(e2e_call(D.sock, "{\"op\":\"ping\"}", &r), 0);
		if (e2e_ok(&r) || strcmp(e2e_code(&r), "E_BUSY"))
			break;
		e2e_reply_free(&r);
		usleep(10000);
	}
	cr_assert(e2e_ok(&r), "%s", cJSON_PrintUnformatted(r.h));
	e2e_reply_free(&r);
	for (i = 1; i < 5; i++)
		close(fds[i]);
}

Test(loop, the_client_library_reconnects_after_an_idle_close)
{
	static const char *const extra[] = { "--idle-timeout", "1", NULL };
	kspec_client_t *c;
	int i;

	start(extra);
	cr_assert_eq(kspec_connect(D.sock, &c), KSPEC_OK);
	cr_assert_eq(kspec_ping(c), KSPEC_OK);
	for (i = 0; i < 1000 && e2e_stat(D.sock, "idle_closed") < 1; i++)
		usleep(10000);
	cr_assert_geq(e2e_stat(D.sock, "idle_closed"), 1);
	cr_assert_eq(kspec_ping(c), KSPEC_OK, "%s", kspec_last_error(c, NULL));
	kspec_close(c);
}

/* A slow sender is cut at its read deadline even while another
 * connection holds unsent replies (the daemon then takes its careful path
 * for every connection; it must not keep re-queueing an unfinished frame,
 * which spun the loop and reset the deadline). */
Test(loop, the_read_deadline_holds_beside_unsent_replies)
{
	static const char *const extra[] = { "--read-timeout", "1", NULL };
	static const char part[] = "\0\0\0\x10\0\0\0\0{\"op\":";
	int heavy, slow, sent;
	double t0;
	e2e_reply_t r;

	start(extra);
	heavy = e2e_connect(D.sock);
	cr_assert_geq(heavy, 0);
	sent = stuff(heavy, "{\"op\":\"kernels\",\"id\":7}", 15000);
	cr_log_info("the heavy connection took %d requests", sent);
	for (t0 = now_ms(); e2e_stat(D.sock, "unsent_bytes") == 0 &&
	    now_ms() - t0 < 5000;)
		usleep(20000);
	cr_assert_gt(e2e_stat(D.sock, "unsent_bytes"), 0);
	slow = e2e_connect(D.sock);
	cr_assert_geq(slow, 0);
	/* A liveness bound, so the failure is a failed read, not a hang. */
	setsockopt(slow, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ 15, 0 },
	    sizeof(struct timeval));
	cr_assert_eq(send(slow, part, sizeof part - 1, MSG_NOSIGNAL),
	    (ssize_t)sizeof part - 1);
	t0 = now_ms();
	/* 1 s deadline, swept every second: within a few seconds. */
	cr_assert_eq(e2e_recv(slow, &r), 0, "no reply to the slow sender");
	cr_assert_str_eq(e2e_code(&r), "E_TIMEOUT");
	e2e_reply_free(&r);
	cr_log_info("E_TIMEOUT after %.0f ms", now_ms() - t0);
	cr_assert_lt(now_ms() - t0, 10000);
	close(slow);
	close(heavy);
}

/* A client that sends more requests than one turn takes and then
 * half-closes gets every reply before the stream ends. */
Test(loop, a_half_close_after_many_requests_gets_every_reply)
{
	enum { N = 200 };
	int fd, i, got = 0;
	e2e_reply_t r;
	char c;

	start(NULL);
	fd = e2e_connect(D.sock);
	cr_assert_geq(fd, 0);
	cr_assert_eq(stuff(fd, "{\"op\":\"ping\",\"id\":3}", N), N);
	cr_assert_eq(shutdown(fd, SHUT_WR), 0);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	for (i = 0; i < N; i++) {
		if (e2e_recv(fd, &r) != 0)
			break;
		got += e2e_ok(&r);
		e2e_reply_free(&r);
	}
	cr_assert_eq(got, N, "%d of %d replies came back", got, N);
	cr_assert_eq(read(fd, &c, 1), 0, "the stream did not end after");
	close(fd);
}

/* The last_used of the one stored row (list), waiting up to 5 s for it to
 * be above AFTER (0: for the row to be there). */
static double last_used_above(double after)
{
	double v = 0, t0;
	e2e_reply_t r;
	const cJSON *e;

	for (t0 = now_ms(); now_ms() - t0 < 5000 && v <= after;
	    usleep(50000)) {
		cr_assert_eq(e2e_call(D.sock, "{\"op\":\"list\"}", &r), 0);
		e = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r.h,
		    "entries"), 0);
		v = e ? e2e_num(e, "last_used_ms") : 0;
		e2e_reply_free(&r);
	}
	return v;
}

/* A hit counts as a use of the store's row (its last_used moves, with
 * the next flush, every second), so the store's eviction does not take a
 * kernel in use for an unused one: a hit from the memory tier, which
 * records it in the tier, and a disk hit that the tier does not keep
 * (--hot-bytes 0), which records it in the store itself. */
static void hit_is_a_use(const char *const *extra, const char *source)
{
	static const char get[] = "{\"op\":\"get\",\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"N\":64,\"K\":64},\"return\":\"meta\"}";
	double first, later;
	e2e_reply_t r;

	start(extra);
	cr_assert_eq(e2e_call(D.sock, get, &r), 0);
	cr_assert(e2e_ok(&r));
	e2e_reply_free(&r);
	cr_assert_gt(last_used_above(0), 0, "the compile was not stored");
	/* The put's own use goes out with the flush after it: past that,
	 * only the hit can move last_used. */
	usleep(1500000);
	first = last_used_above(0);
	cr_assert_eq(e2e_call(D.sock, get, &r), 0);
	cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
	    r.h, "source")), source);
	e2e_reply_free(&r);
	later = last_used_above(first);
	cr_assert_gt(later, first, "the %s hit was not recorded as a use",
	    source);
}

Test(loop, a_memory_hit_is_a_use)
{
	hit_is_a_use(NULL, "memory");
}

Test(loop, a_disk_hit_the_memory_tier_does_not_keep_is_a_use)
{
	static const char *const extra[] = { "--hot-bytes", "0", NULL };

	hit_is_a_use(extra, "disk");
}

/* A turn that gathers more than KS_MAX_BATCH_BYTES of replies writes them
 * before it ends, to a client that is not reading yet: every reply still
 * arrives, whole and in the order of the requests. */
Test(loop, a_turn_of_large_replies_arrives_whole_and_in_order)
{
	enum { N = KS_MAX_REQUESTS_PER_TURN };
	char json[64];
	e2e_reply_t r;
	int fd, i;
	char *body0 = NULL;

	start(NULL);
	fd = e2e_connect(D.sock);
	cr_assert_geq(fd, 0);
	/* One write: the daemon reads them all in one turn. */
	for (i = 0; i < N; i++) {
		snprintf(json, sizeof json, "{\"op\":\"%s\",\"id\":%d}",
		    i % 4 == 3 ? "ping" : "kernels", i + 1);
		cr_assert_eq(stuff(fd, json, 1), 1);
	}
	usleep(300000);         /* the socket fills, the rest is queued */
	for (i = 0; i < N; i++) {
		char *body;

		cr_assert_eq(e2e_recv(fd, &r), 0, "reply %d did not come", i + 1);
		cr_assert(e2e_ok(&r));
		cr_assert_eq((int)e2e_num(r.h, "id"), i + 1, "reply %d came "
		    "out of order", i + 1);
		if (i % 4 == 3) {
			e2e_reply_free(&r);
			continue;
		}
		cJSON_DeleteItemFromObjectCaseSensitive(r.h, "id");
		body = cJSON_PrintUnformatted(r.h);
		cr_assert(body);
		if (!body0)
			body0 = body;
		else {
			cr_assert_str_eq(body, body0, "reply %d differs", i + 1);
			free(body);
		}
		e2e_reply_free(&r);
	}
	cr_assert_gt(strlen(body0) * (N - N / 4), KS_MAX_BATCH_BYTES,
	    "the replies are too small to pass the batch limit");
	free(body0);
	close(fd);
}
