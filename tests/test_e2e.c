/*
 * End to end: a real kspecd on a temporary socket and store, spoken to with
 * raw frames; CPU artifacts are loaded and run against ref/ref.h.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "../jit/jit.h"
#include "../proto/reply.h"
#include "e2e.h"
#include "../ref/ref.h"

E2E_SUITE(e2e, 240);

/* ---- helpers ---- */

static char *get_json(const char *dtype, const char *shape,
    const char *dynamic, const char *ret)
{
	static char buf[1024];

	snprintf(buf, sizeof buf, "{\"op\":\"get\",\"id\":7,\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"%s\",\"shape\":{%s},"
	    "\"dynamic\":[%s],\"return\":\"%s\"}", dtype, shape, dynamic,
	    ret);
	return buf;
}

static int dtype_code(const char *d)
{
	return strcmp(d, "f32") == 0 ? 0 : strcmp(d, "f16") == 0 ? 1 : 2;
}

/* 0 when equal bit for bit, else the number of differing elements. */
static int64_t bitwise_diff(const void *a, const void *b, int dtype,
    int64_t n)
{
	size_t es = dtype == 0 ? 4 : 2;
	int64_t i, bad = 0;

	for (i = 0; i < n; i++)
		bad += memcmp((const char *)a + i * es, (const char *)b + i * es,
		    es) != 0;
	return bad;
}

/*
 * Runs a gemm artifact: loads it, runs groups [0, groups) with the
 * dynamic dims in `dyn` (NULL when none), returns y (malloc'd).
 */
static void *run_gemm(const e2e_reply_t *r, const void *x, const void *w,
    int dtype, int64_t M, int64_t N, int64_t groups, const int64_t *dyn,
    int ndyn)
{
	const cJSON *entry = cJSON_GetObjectItemCaseSensitive(r->h, "entry");
	size_t es = dtype == 0 ? 4 : 2;
	void *params[8], *px = (void *)x, *pw = (void *)w, *y;
	e2e_entry_t fn = NULL;
	ks_so_t *h;
	int i, n = 0;

	cr_assert(cJSON_IsString(entry));
	h = e2e_load(r->payload, r->len, entry->valuestring, &fn);
	cr_assert_not_null(h, "artifact does not load");
	y = calloc((size_t)(M * N), es);
	params[n++] = &px;
	params[n++] = &pw;
	params[n++] = &y;
	for (i = 0; i < ndyn; i++)
		params[n++] = (void *)&dyn[i];
	fn(params, 0, (uint64_t)groups);
	ks_so_unload(h);
	return y;
}

static int64_t launch_groups(const e2e_reply_t *r)
{
	const cJSON *l = cJSON_GetObjectItemCaseSensitive(r->h, "launch");
	const cJSON *g = cJSON_GetObjectItemCaseSensitive(l, "groups");

	return cJSON_IsNumber(g) ? (int64_t)g->valuedouble : -1;
}

/* Requests gemm at a constant shape, runs it, checks it bit for bit against
 * the canonical reference.  Returns y for further comparisons. */
static void *check_gemm(const char *dtype, int64_t M, int64_t N, int64_t K,
    const char *want_variant)
{
	int dt = dtype_code(dtype);
	size_t es = dt == 0 ? 4 : 2;
	char shape[128];
	e2e_reply_t r;
	void *x, *w, *y, *ref;

	snprintf(shape, sizeof shape, "\"M\":%ld,\"N\":%ld,\"K\":%ld",
	    (long)M, (long)N, (long)K);
	cr_assert_eq(e2e_call(D.sock, get_json(dtype, shape, "", "artifact"),
	    &r), 0);
	cr_assert(e2e_ok(&r), "get failed: %s", cJSON_PrintUnformatted(r.h));
	cr_assert_str_eq(e2e_str(&r, "variant"), want_variant);
	cr_assert_str_eq(e2e_str(&r, "format"), "so");
	cr_assert_gt(r.len, 0);
	x = malloc((size_t)(M * K) * es);
	w = malloc((size_t)(N * K) * es);
	ref = calloc((size_t)(M * N), es);
	ref_fill(x, dt, M * K, 1);
	ref_fill(w, dt, N * K, 2);
	ref_gemm(x, w, ref, dt, M, N, K);
	y = run_gemm(&r, x, w, dt, M, N, launch_groups(&r), NULL, 0);
	cr_assert_eq(bitwise_diff(y, ref, dt, M * N), 0,
	    "%s gemm M=%ld N=%ld K=%ld differs from the canonical reference",
	    dtype, (long)M, (long)N, (long)K);
	free(x);
	free(w);
	free(ref);
	e2e_reply_free(&r);
	return y;
}

/* ---- gemm through the daemon ---- */

Test(e2e, gemv_m1_is_bitwise_canonical_for_every_dtype)
{
	static const char *const dts[] = { "f32", "f16", "bf16" };
	int i;

	for (i = 0; i < 3; i++)
		free(check_gemm(dts[i], 1, 4096, 4096, "gemv_m1"));
}

Test(e2e, general_at_m1_is_bitwise_equal_to_gemv_m1)
{
	static const char *const dts[] = { "f32", "bf16" };
	int64_t N = 4096, K = 4096, M = 1;
	int i;

	for (i = 0; i < 2; i++) {
		int dt = dtype_code(dts[i]);
		size_t es = dt == 0 ? 4 : 2;
		void *x = malloc((size_t)(M * K) * es);
		void *w = malloc((size_t)(N * K) * es);
		void *y1 = check_gemm(dts[i], 1, N, K, "gemv_m1");
		void *yg;
		e2e_reply_t r;

		/* M dynamic selects `general`; run it with M = 1. */
		cr_assert_eq(e2e_call(D.sock, get_json(dts[i],
		    "\"N\":4096,\"K\":4096", "\"M\"", "artifact"), &r), 0);
		cr_assert(e2e_ok(&r));
		cr_assert_str_eq(e2e_str(&r, "variant"), "general");
		ref_fill(x, dt, M * K, 1);
		ref_fill(w, dt, N * K, 2);
		yg = run_gemm(&r, x, w, dt, M, N, M * ((N + 3) / 4), &M, 1);
		cr_assert_eq(bitwise_diff(y1, yg, dt, M * N), 0);
		e2e_reply_free(&r);
		free(x);
		free(w);
		free(y1);
		free(yg);
	}
}

/* Just outside gemv_m1 (M=2), small_m (M=4) and blocked (M=7), and the
 * awkward shapes inside them, all bit for bit against the canonical
 * reference. */
Test(e2e, shapes_around_each_specialization_stay_exact)
{
	free(check_gemm("f32", 2, 64, 96, "small_m"));
	free(check_gemm("bf16", 3, 33, 64, "small_m"));
	free(check_gemm("bf16", 4, 33, 64, "general"));
	free(check_gemm("bf16", 7, 33, 64, "general"));
	free(check_gemm("bf16", 8, 33, 64, "blocked"));
	free(check_gemm("f16", 17, 33, 4100, "blocked"));
	free(check_gemm("f32", 1, 37, 4100, "gemv_m1"));  /* K % 32 != 0 */
	free(check_gemm("f16", 3, 1, 4100, "small_m"));   /* N = 1 */
	free(check_gemm("f32", 1, 1, 5, "gemv_m1"));
}

Test(e2e, all_dynamic_general_matches_reference)
{
	int64_t M = 3, N = 10, K = 77;
	int64_t dyn[3] = { M, N, K };
	float x[3 * 77], w[10 * 77], ref[30];
	e2e_reply_t r;
	void *y;

	cr_assert_eq(e2e_call(D.sock, get_json("f32", "", "\"M\",\"N\",\"K\"",
	    "artifact"), &r), 0);
	cr_assert(e2e_ok(&r), "%s", cJSON_PrintUnformatted(r.h));
	ref_fill(x, 0, M * K, 3);
	ref_fill(w, 0, N * K, 4);
	ref_gemm(x, w, ref, 0, M, N, K);
	y = run_gemm(&r, x, w, 0, M, N, M * ((N + 3) / 4), dyn, 3);
	cr_assert_eq(bitwise_diff(y, ref, 0, M * N), 0);
	free(y);
	e2e_reply_free(&r);
}

/* The checker used above must catch a wrong reduction order. */
Test(e2e, bitwise_checker_catches_a_sequential_reduction)
{
	int64_t K = 4096, k;
	float x[4096], w[4096], canon, seq = 0.0f;

	ref_fill(x, 0, K, 5);
	ref_fill(w, 0, K, 6);
	canon = ref_dot_canonical(x, 0, w, 0, 0, K);
	for (k = 0; k < K; k++)
		seq = fmaf(x[k], w[k], seq);
	cr_assert_neq(bitwise_diff(&canon, &seq, 0, 1), 0,
	    "the checker cannot tell the canonical order from a sequential "
	    "sum on this data");
}

/* ---- single flight, persistence, corruption ---- */

typedef struct {
	const char *sock;
	const char *req;
	pthread_barrier_t *go;
	e2e_reply_t r;
	int rc;
} storm_arg_t;

static void *storm_one(void *p)
{
	storm_arg_t *a = p;
	int fd = e2e_connect(a->sock);

	pthread_barrier_wait(a->go);
	a->rc = fd < 0 || e2e_send(fd, a->req) || e2e_recv(fd, &a->r);
	if (fd >= 0)
		close(fd);
	return NULL;
}

Test(e2e, concurrent_identical_cold_requests_compile_once)
{
	enum { NCLIENT = 32 };
	storm_arg_t args[NCLIENT];
	pthread_t th[NCLIENT];
	pthread_barrier_t go;
	/* get_json's buffer is static: build the request before the threads
	 * start. */
	char *req = strdup(get_json("f32", "\"M\":1,\"N\":2048,\"K\":2048",
	    "", "artifact"));
	int i, compiled = 0;

	pthread_barrier_init(&go, NULL, NCLIENT);
	for (i = 0; i < NCLIENT; i++) {
		memset(&args[i], 0, sizeof args[i]);
		args[i].sock = D.sock;
		args[i].req = req;
		args[i].go = &go;
		pthread_create(&th[i], NULL, storm_one, &args[i]);
	}
	for (i = 0; i < NCLIENT; i++)
		pthread_join(th[i], NULL);
	for (i = 0; i < NCLIENT; i++) {
		cr_assert_eq(args[i].rc, 0);
		cr_assert(e2e_ok(&args[i].r), "client %d: %s", i,
		    cJSON_PrintUnformatted(args[i].r.h));
		cr_assert_eq(args[i].r.len, args[0].r.len);
		cr_assert_eq(memcmp(args[i].r.payload, args[0].r.payload,
		    args[0].r.len), 0, "client %d got different bytes", i);
		compiled += strcmp(e2e_str(&args[i].r, "source"),
		    "compiled") == 0;
	}
	cr_assert_eq(compiled, 1);
	cr_assert_eq(e2e_stat(D.sock, "compiles"), 1);
	cr_assert_eq(e2e_stat(D.sock, "joins") + e2e_stat(D.sock,
	    "hits_memory"), NCLIENT - 1);
	for (i = 0; i < NCLIENT; i++)
		e2e_reply_free(&args[i].r);
	free(req);
}

Test(e2e, pipelined_requests_are_answered_by_id)
{
	int fd = e2e_connect(D.sock), i, seen = 0;
	e2e_reply_t r;

	cr_assert_geq(fd, 0);
	/* A slow compile first, then fast ops behind it on one connection. */
	cr_assert_eq(e2e_send(fd, "{\"op\":\"get\",\"id\":1,\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"N\":256,\"K\":256},\"return\":\"meta\"}"), 0);
	cr_assert_eq(e2e_send(fd, "{\"op\":\"ping\",\"id\":2}"), 0);
	cr_assert_eq(e2e_send(fd, "{\"op\":\"stats\",\"id\":3}"), 0);
	for (i = 0; i < 3; i++) {
		int id;

		cr_assert_eq(e2e_recv(fd, &r), 0);
		cr_assert(e2e_ok(&r));
		id = (int)e2e_num(r.h, "id");
		cr_assert(id >= 1 && id <= 3);
		seen |= 1 << id;
		if (id == 1)
			cr_assert_eq(r.len, 0, "return:meta sent a payload");
		e2e_reply_free(&r);
	}
	cr_assert_eq(seen, 0xe);
	close(fd);
}

Test(e2e, restart_serves_from_disk_without_compiling)
{
	const char *req = get_json("bf16", "\"M\":1,\"N\":512,\"K\":512", "",
	    "artifact");
	e2e_reply_t a, b;

	cr_assert_eq(e2e_call(D.sock, req, &a), 0);
	cr_assert_str_eq(e2e_str(&a, "source"), "compiled");
	cr_assert_eq(e2e_stop(&D), 0, "kspecd did not stop cleanly");
	cr_assert_eq(e2e_start(&D, NULL), 0);
	cr_assert_eq(e2e_call(D.sock, req, &b), 0);
	cr_assert_str_eq(e2e_str(&b, "source"), "disk");
	cr_assert_str_eq(e2e_str(&a, "key"), e2e_str(&b, "key"));
	cr_assert_eq(a.len, b.len);
	cr_assert_eq(memcmp(a.payload, b.payload, a.len), 0);
	cr_assert_eq(e2e_stat(D.sock, "compiles"), 0);
	e2e_reply_free(&b);
	cr_assert_eq(e2e_call(D.sock, req, &b), 0);
	cr_assert_str_eq(e2e_str(&b, "source"), "memory");
	e2e_reply_free(&a);
	e2e_reply_free(&b);
}

Test(e2e, corrupted_stored_blob_is_not_served_and_is_recompiled)
{
	const char *req = get_json("f32", "\"M\":1,\"N\":128,\"K\":128", "",
	    "artifact");
	e2e_reply_t a, b;
	sqlite3 *db;

	cr_assert_eq(e2e_call(D.sock, req, &a), 0);
	cr_assert(e2e_ok(&a));
	cr_assert_eq(e2e_stop(&D), 0);
	/* Flip one byte in the middle of the stored artifact. */
	cr_assert_eq(sqlite3_open(D.store, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, "UPDATE artifacts SET bytes = "
	    "substr(bytes, 1, 100) || x'5a' || substr(bytes, 102)", NULL, NULL,
	    NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
	cr_assert_eq(sqlite3_changes(db), 1);
	sqlite3_close(db);
	cr_assert_eq(e2e_start(&D, NULL), 0);
	cr_assert_eq(e2e_call(D.sock, req, &b), 0);
	cr_assert(e2e_ok(&b));
	cr_assert_str_eq(e2e_str(&b, "source"), "compiled");
	cr_assert_eq(b.len, a.len);
	cr_assert_eq(memcmp(a.payload, b.payload, a.len), 0);
	cr_assert_eq(e2e_stat(D.sock, "corrupt"), 1);
	cr_assert_eq(e2e_stat(D.sock, "compiles"), 1);
	e2e_reply_free(&a);
	e2e_reply_free(&b);
}

/* ---- bad input ---- */

/* After every bad request the daemon still answers a ping from another
 * client. */
static void still_serving(void)
{
	e2e_reply_t r;

	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"ping\",\"id\":99}", &r), 0,
	    "daemon stopped serving");
	cr_assert(e2e_ok(&r));
	e2e_reply_free(&r);
}

static void expect_error(const char *json, const char *code)
{
	e2e_reply_t r;

	cr_assert_eq(e2e_call(D.sock, json, &r), 0, "no reply to %s", json);
	cr_assert(!e2e_ok(&r), "accepted: %s", json);
	cr_assert_str_eq(e2e_code(&r), code, "for %s: %s", json,
	    cJSON_PrintUnformatted(r.h));
	e2e_reply_free(&r);
	still_serving();
}

/* The message of E_BAD_DTYPE for DTYPE. */
static char *dtype_message(const char *dtype)
{
	const cJSON *m;
	e2e_reply_t r;
	char *msg;

	cr_assert_eq(e2e_call(D.sock, get_json(dtype, "\"M\":1,\"N\":8,"
	    "\"K\":8", "", "meta"), &r), 0);
	cr_assert_str_eq(e2e_code(&r), "E_BAD_DTYPE");
	m = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(
	    r.h, "error"), "message");
	cr_assert(cJSON_IsString(m));
	msg = strdup(m->valuestring);
	e2e_reply_free(&r);
	return msg;
}

/* A dtype that is no dtype gets the list; a block format, which is a
 * weight dtype, the hint to name it as wdtype (and only it: the fast
 * path's and the full parse's replies once differed here, the hint
 * depending on an unset variable). */
Test(e2e, a_bad_dtype_hints_at_wdtype_only_for_a_block_format)
{
	char *m = dtype_message("f30");

	cr_assert_str_eq(m, "dtype 'f30' is not one of f32, f16, bf16");
	free(m);
	m = dtype_message("q4_0");
	cr_assert_str_eq(m, "dtype 'q4_0' is not one of f32, f16, bf16 (a "
	    "block format is a weight dtype: wdtype)");
	free(m);
}

Test(e2e, bad_requests_get_clear_codes_and_the_daemon_keeps_serving)
{
	expect_error("{\"op\":\"get\",", "E_BAD_JSON");
	expect_error("[1,2]", "E_BAD_JSON");
	expect_error("{\"op\":\"frobnicate\"}", "E_UNKNOWN_OP");
	expect_error("{\"op\":\"get\",\"kernel\":\"nope\",\"backend\":\"cpu\","
	    "\"dtype\":\"f32\",\"shape\":{\"M\":1}}", "E_UNKNOWN_KERNEL");
	expect_error("{\"op\":\"get\",\"kernel\":\"gemm\",\"backend\":\"cpu\","
	    "\"dtype\":\"f32\",\"shape\":{\"M\":1,\"N\":8,\"K\":8},"
	    "\"shpae\":{}}", "E_UNKNOWN_FIELD");
	expect_error("{\"op\":\"get\",\"kernel\":\"gemm\",\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"N\":8,\"K\":8}}", "E_DUPLICATE_KEY");
	expect_error("{\"op\":\"get\",\"kernel\":\"gemm\",\"backend\":\"cpu\","
	    "\"dtype\":\"f32\",\"shape\":{\"M\":1,\"M\":2,\"N\":8,\"K\":8}}",
	    "E_DUPLICATE_KEY");
	expect_error(get_json("f32", "\"M\":1,\"N\":8", "", "artifact"),
	    "E_BAD_SHAPE");
	expect_error(get_json("f32", "\"M\":0,\"N\":8,\"K\":8", "", "artifact"),
	    "E_BAD_SHAPE");
	expect_error(get_json("f32", "\"M\":-4,\"N\":8,\"K\":8", "",
	    "artifact"), "E_BAD_SHAPE");
	/* One dimension beyond KS_MAX_DIM; N*K beyond 2^63; N*K within
	 * int64 but beyond KS_MAX_ELEMS; beyond int64 altogether. */
	expect_error(get_json("f32", "\"M\":1,\"N\":2147483649,\"K\":8",
	    "", "artifact"), "E_TOO_LARGE");
	expect_error(get_json("f32", "\"M\":1,\"N\":4294967296,"
	    "\"K\":4294967296", "", "artifact"), "E_TOO_LARGE");
	expect_error(get_json("f32", "\"M\":1,\"N\":2000000000,"
	    "\"K\":2000000000", "", "artifact"), "E_TOO_LARGE");
	expect_error(get_json("f32", "\"M\":1,\"N\":99999999999999999999,"
	    "\"K\":8", "", "artifact"), "E_BAD_SHAPE");
	expect_error(get_json("f32", "\"M\":1,\"N\":1e300,\"K\":8", "",
	    "artifact"), "E_BAD_SHAPE");
	expect_error(get_json("f64", "\"M\":1,\"N\":8,\"K\":8", "",
	    "artifact"), "E_BAD_DTYPE");
	expect_error("{\"op\":\"get\",\"kernel\":\"gemm\",\"backend\":\"tpu\","
	    "\"dtype\":\"f32\",\"shape\":{\"M\":1,\"N\":8,\"K\":8}}",
	    "E_BAD_BACKEND");
	expect_error("{\"op\":\"get\",\"kernel\":\"gemm\",\"backend\":\"cpu\","
	    "\"target\":\"pentium2\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"N\":8,\"K\":8}}", "E_BAD_TARGET");
	expect_error("{\"op\":\"get\",\"kernel\":\"gemm\",\"backend\":\"cpu\","
	    "\"dtype\":\"f32\",\"shape\":{\"M\":1,\"N\":8,\"K\":8},"
	    "\"dynamic\":[\"M\"]}", "E_BAD_SHAPE");
}

/* A frame that cannot be parsed is answered, then the connection closes;
 * the daemon goes on serving others. */
static void expect_frame_error(const void *bytes, size_t n, const char *code)
{
	int fd = e2e_connect(D.sock);
	e2e_reply_t r;
	char c;

	cr_assert_geq(fd, 0);
	cr_assert_eq(e2e_write_all(fd, bytes, n), 0);
	cr_assert_eq(e2e_recv(fd, &r), 0);
	cr_assert_str_eq(e2e_code(&r), code);
	e2e_reply_free(&r);
	cr_assert_eq(read(fd, &c, 1), 0, "connection not closed");
	close(fd);
	still_serving();
}

Test(e2e, unparsable_frames_are_answered_and_closed)
{
	static const unsigned char huge[8] = { 0xff, 0xff, 0xff, 0xff, 0, 0,
	    0, 0 };
	static const unsigned char zero[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
	static const unsigned char payload[12] = { 0, 0, 0, 2, 0, 0, 0, 2,
	    '{', '}', 'a', 'b' };
	char garbage[64];

	memset(garbage, 'G', sizeof garbage);
	expect_frame_error(huge, sizeof huge, "E_TOO_LARGE");
	expect_frame_error(garbage, sizeof garbage, "E_TOO_LARGE");
	expect_frame_error(zero, sizeof zero, "E_BAD_FRAME");
	expect_frame_error(payload, sizeof payload, "E_BAD_FRAME");
}

/* ---- socket hygiene ---- */

Test(e2e, socket_is_private_and_a_second_daemon_refuses_it)
{
	struct stat st;
	char dir[300], bin[512];
	pid_t pid;
	int status = 0, i;

	cr_assert_eq(stat(D.sock, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0600);
	snprintf(dir, sizeof dir, "%s/run", D.dir);
	cr_assert_eq(stat(dir, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0700);

	/* A second daemon on the same socket must exit non-zero at once and
	 * leave the first one's socket alone. */
	snprintf(bin, sizeof bin, "%s/kspecd", e2e_build_dir());
	pid = fork();
	if (pid == 0) {
		int nul = open("/dev/null", O_WRONLY);

		dup2(nul, 1);
		dup2(nul, 2);
		execl(bin, bin, "--socket", D.sock, "--store", D.store,
		    (char *)NULL);
		_exit(127);
	}
	for (i = 0; i < 1000 && waitpid(pid, &status, WNOHANG) == 0; i++)
		usleep(10000);
	if (i == 1000) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		cr_assert_fail("a second daemon kept running on a live socket");
	}
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 0 &&
	    WEXITSTATUS(status) != 127);
	cr_assert_eq(stat(D.sock, &st), 0);
	still_serving();
}

Test(e2e, stale_socket_is_replaced_after_a_crash)
{
	int st;

	kill(D.pid, SIGKILL);
	waitpid(D.pid, &st, 0);
	D.pid = 0;
	cr_assert_eq(access(D.sock, F_OK), 0, "socket file should remain");
	cr_assert_eq(e2e_start(&D, NULL), 0, "stale socket blocked restart");
	still_serving();
}

Test(e2e, sigterm_stops_cleanly_and_removes_the_socket)
{
	cr_assert_eq(e2e_stop(&D), 0);
	cr_assert_neq(access(D.sock, F_OK), 0);
}

/* ---- kernels, explain, warm, list, evict ---- */

static const char *const GEMM_SPEC = "\"kernel\":\"gemm\",\"backend\":\"cpu\","
    "\"dtype\":\"f32\",\"shape\":{\"M\":1,\"N\":64,\"K\":64}";

/* The error code of item I of a warm reply's ITEMS. */
static const char *item_code(const cJSON *items, int i)
{
	return cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(
	    items, i), "error"), "code")->valuestring;
}

static e2e_reply_t call_ok(const char *json)
{
	e2e_reply_t r;

	cr_assert_eq(e2e_call(D.sock, json, &r), 0, "no reply to %s", json);
	cr_assert(e2e_ok(&r), "%s -> %s", json, cJSON_PrintUnformatted(r.h));
	return r;
}

Test(e2e, kernels_lists_gemm_with_variants_and_guards)
{
	e2e_reply_t r = call_ok("{\"op\":\"kernels\"}");
	const cJSON *ks = cJSON_GetObjectItemCaseSensitive(r.h, "kernels");
	const cJSON *k, *v;
	int found = 0, gemv = 0;

	cJSON_ArrayForEach(k, ks) {
		if (strcmp(cJSON_GetObjectItem(k, "name")->valuestring, "gemm"))
			continue;
		found = 1;
		cJSON_ArrayForEach(v, cJSON_GetObjectItem(k, "variants"))
			gemv |= strcmp(cJSON_GetObjectItem(v, "name")->valuestring,
			    "gemv_m1") == 0 && strlen(cJSON_GetObjectItem(v,
			    "guard")->valuestring) > 0;
	}
	cr_assert(found && gemv);
	e2e_reply_free(&r);
}

/* ---- the get reply against its schema (proto/reply.def) ---- */

#define SCHEMA_ALWAYS 1
#define SCHEMA_SOMETIMES 0
static const struct {
	const char *name, *type;
	int always;
} schema[KS_GF_COUNT] = {
#define KS_GET_FIELD(name, type, presence, part) \
	[KS_GF_##name] = { #name, #type, SCHEMA_##presence },
#include "../proto/reply.def"
#undef KS_GET_FIELD
};

static int schema_type_ok(const char *type, const cJSON *v)
{
	size_t i;

	if (strcmp(type, "BOOL") == 0)
		return cJSON_IsBool(v);
	if (strcmp(type, "INT") == 0)
		return cJSON_IsNumber(v) && v->valuedouble >= 0 &&
		    v->valuedouble == (double)(int64_t)v->valuedouble;
	if (strcmp(type, "MS") == 0)
		return cJSON_IsNumber(v) && v->valuedouble >= 0;
	if (strcmp(type, "STR") == 0)
		return cJSON_IsString(v);
	if (strcmp(type, "HEX") == 0) {
		if (!cJSON_IsString(v) || strlen(v->valuestring) != 64)
			return 0;
		for (i = 0; i < 64; i++)
			if (!strchr("0123456789abcdef", v->valuestring[i]))
				return 0;
		return 1;
	}
	if (strcmp(type, "OBJ") == 0)
		return cJSON_IsObject(v);
	return strcmp(type, "ARR") == 0 && cJSON_IsArray(v);
}

/*
 * NULL when the get reply header H has only fields of the schema, in its
 * order, each of its type, every ALWAYS one among them, and the
 * SOMETIMES ones exactly where WANT (KS_GF_COUNT flags) says; else what
 * is wrong, in WHY.
 */
static const char *schema_breach(const cJSON *h, const int *want, char *why,
    size_t n)
{
	int seen[KS_GF_COUNT] = { 0 }, at = 0, i;
	const cJSON *f;

	cJSON_ArrayForEach(f, h) {
		for (i = at; i < KS_GF_COUNT &&
		    strcmp(schema[i].name, f->string); i++)
			;
		if (i == KS_GF_COUNT) {
			snprintf(why, n, "field %s is not in proto/reply.def, "
			    "or out of its order", f->string);
			return why;
		}
		if (!schema_type_ok(schema[i].type, f)) {
			snprintf(why, n, "field %s is not %s", f->string,
			    schema[i].type);
			return why;
		}
		seen[i] = 1;
		at = i + 1;
	}
	for (i = 0; i < KS_GF_COUNT; i++)
		if (seen[i] != (schema[i].always || want[i])) {
			snprintf(why, n, "field %s is %s", schema[i].name,
			    seen[i] ? "there, unasked" : "missing");
			return why;
		}
	return NULL;
}

/* Asserts that get reply G (its request had an id when HAS_ID, a wdtype
 * other than its dtype when WDTYPE, backend opencl when CODEGEN) keeps
 * the schema. */
static void assert_schema(const e2e_reply_t *g, int has_id, int wdtype,
    int codegen)
{
	int want[KS_GF_COUNT] = { 0 };
	char why[256];
	const char *breach;

	want[KS_GF_id] = has_id;
	want[KS_GF_wdtype] = wdtype;
	want[KS_GF_codegen] = codegen;
	breach = schema_breach(g->h, want, why, sizeof why);
	cr_assert_null(breach, "%s: %s", breach,
	    cJSON_PrintUnformatted(g->h));
}

/*
 * The get reply keeps proto/reply.def: a compile's and a memory hit's,
 * with an id and without, with a wdtype and without; and the check
 * catches a reply that breaks it (a field out of order, one the schema
 * lacks, one missing, one of another type, a SOMETIMES field there or
 * missing against the request).
 */
Test(e2e, get_reply_keeps_its_schema_and_the_check_catches_a_breach)
{
	static const char q8[] = "{\"op\":\"get\",\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"wdtype\":\"q8_0\","
	    "\"shape\":{\"M\":1,\"N\":64,\"K\":64}}";
	int want[KS_GF_COUNT] = { 0 };
	e2e_reply_t r;
	cJSON *h;
	char why[256];
	int i;

	for (i = 0; i < 2; i++) {
		r = call_ok(get_json("f32", "\"M\":1,\"N\":72,\"K\":64", "",
		    "meta"));
		cr_assert_str_eq(e2e_str(&r, "source"), i ? "memory" :
		    "compiled");
		assert_schema(&r, 1, 0, 0);
		e2e_reply_free(&r);
	}
	r = call_ok(q8);
	assert_schema(&r, 0, 1, 0);
	e2e_reply_free(&r);

	r = call_ok(get_json("f32", "\"M\":1,\"N\":72,\"K\":64", "",
	    "meta"));
	want[KS_GF_id] = 1;
	cr_assert_null(schema_breach(r.h, want, why, sizeof why), "%s", why);
	h = cJSON_Duplicate(r.h, 1);
	cJSON_AddItemToObject(h, "variant",
	    cJSON_DetachItemFromObject(h, "variant"));
	cr_assert_not_null(schema_breach(h, want, why, sizeof why),
	    "a field out of order");
	cJSON_Delete(h);
	h = cJSON_Duplicate(r.h, 1);
	cJSON_AddNumberToObject(h, "planted", 1);
	cr_assert_not_null(schema_breach(h, want, why, sizeof why),
	    "a field the schema lacks");
	cJSON_Delete(h);
	h = cJSON_Duplicate(r.h, 1);
	cJSON_DeleteItemFromObject(h, "entry");
	cr_assert_not_null(schema_breach(h, want, why, sizeof why),
	    "a field missing");
	cJSON_Delete(h);
	h = cJSON_Duplicate(r.h, 1);
	cJSON_ReplaceItemInObject(h, "bytes", cJSON_CreateString("5648"));
	cr_assert_not_null(schema_breach(h, want, why, sizeof why),
	    "a field of another type");
	cJSON_Delete(h);
	want[KS_GF_wdtype] = 1;
	cr_assert_not_null(schema_breach(r.h, want, why, sizeof why),
	    "a SOMETIMES field missing");
	want[KS_GF_wdtype] = want[KS_GF_id] = 0;
	cr_assert_not_null(schema_breach(r.h, want, why, sizeof why),
	    "a SOMETIMES field there, unasked");
	e2e_reply_free(&r);
}

/*
 * Serves VARIANT of DEF on BACKEND at the first fingerprint probe that
 * selects it (bf16, constants baked, the other dims dynamic) and checks the
 * reply names the variant; on cpu the artifact itself comes back and loads
 * (its entry resolves).  Returns 0 when no probe selects the variant.
 */
static int serve_variant(const ks_kernel_def_t *def, const char *variant,
    const char *backend)
{
	int64_t probes[64][KS_MAX_DIMS];
	int np = ks_kernel_probes(def, probes, 64), q, j, dyn;
	int cpu = strcmp(backend, "cpu") == 0;

	/* Each probe in bf16, mode exact (f 0); then each with f32 and q4_0
	 * weights in mode fast (f 1: gemm's fast variant). */
	for (q = 0; q < 2 * np; q++) {
		int f = q / np, p = q % np;
		char req[1024], err[256], *o = req;
		ks_dim_t dims[KS_MAX_DIMS];
		ks_spec_t spec;
		e2e_reply_t g;
		e2e_entry_t fn;
		ks_so_t *h;

		for (j = 0; j < def->ndims; j++)
			dims[j] = (ks_dim_t){ def->dims[j], probes[p][j] != 0,
			    probes[p][j] };
		if ((f && !def->wblocks) || ks_kernel_validate_mixed(def,
		    f ? KS_DTYPE_F32 : KS_DTYPE_BF16, f ? KS_DTYPE_Q4_0 :
		    KS_DTYPE_BF16, f ? KS_MODE_FAST : KS_MODE_EXACT, dims,
		    def->ndims, &spec, err, sizeof err) != KS_OK ||
		    strcmp(def->select(&spec), variant) != 0)
			continue;
		o += sprintf(o, "{\"op\":\"get\",\"return\":\"%s\",\"kernel\":"
		    "\"%s\",\"backend\":\"%s\",%s%s\"shape\":{", cpu ?
		    "artifact" : "meta", def->name, backend,
		    strcmp(backend, "cuda") == 0 ?
		    "\"target\":\"sm_90\",\"format\":\"ptx\"," : "", f ?
		    "\"dtype\":\"f32\",\"wdtype\":\"q4_0\",\"mode\":\"fast\"," :
		    "\"dtype\":\"bf16\",");
		for (j = 0; j < def->ndims; j++)
			if (probes[p][j] != 0)
				o += sprintf(o, "%s\"%s\":%lld", o[-1] == '{' ?
				    "" : ",", def->dims[j],
				    (long long)probes[p][j]);
		o += sprintf(o, "},\"dynamic\":[");
		for (j = 0, dyn = 0; j < def->ndims; j++)
			if (probes[p][j] == 0)
				o += sprintf(o, "%s\"%s\"", dyn++ ? "," : "",
				    def->dims[j]);
		sprintf(o, "]}");
		g = call_ok(req);
		cr_assert_str_eq(e2e_str(&g, "variant"), variant, "%s", req);
		assert_schema(&g, 0, f, strcmp(backend, "opencl") == 0);
		if (cpu) {
			h = e2e_load(g.payload, g.len, e2e_str(&g, "entry"),
			    &fn);
			cr_assert_not_null(h, "%s: the artifact does not load",
			    req);
			ks_so_unload(h);
		}
		e2e_reply_free(&g);
		return 1;
	}
	return 0;
}

/*
 * Every kernel of the library is listed with its entry arguments, and each
 * of its variants is served by get on every backend available (cpu always;
 * opencl and cuda where they are, else a visible warning) at the first
 * fingerprint probe that selects it.
 */
Test(e2e, every_library_kernel_and_variant_is_listed_and_served)
{
	static const char *const backends[] = { "cpu", "opencl", "cuda" };
	const ks_backend_t *const be[] = { &ks_backend_cpu,
		&ks_backend_opencl, &ks_backend_cuda };
	const ks_kernel_def_t *const *lib;
	e2e_reply_t r = call_ok("{\"op\":\"kernels\"}");
	const cJSON *ks = cJSON_GetObjectItemCaseSensitive(r.h, "kernels");
	char err[256];
	int n, i, v, b, avail[3];

	for (b = 0; b < 3; b++) {
		avail[b] = be[b]->available(err, sizeof err) == KS_OK;
		if (!avail[b])
			cr_log_warn("%s unavailable, not served: %s",
			    backends[b], err);
	}
	cr_assert(avail[0], "the cpu backend is always available");
	lib = ks_kernels(&n);
	cr_assert_eq(cJSON_GetArraySize(ks), n);
	for (i = 0; i < n; i++) {
		const ks_kernel_def_t *def = lib[i];
		const cJSON *k = cJSON_GetArrayItem(ks, i);
		const cJSON *params = cJSON_GetObjectItem(k, "params"), *pj;

		cr_assert_str_eq(cJSON_GetObjectItem(k, "name")->valuestring,
		    def->name);
		cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(k,
		    "variants")), def->nvariants);
		/* Every dim is among the general variant's arguments; int32
		 * buffers say i32, f32 scalars f32. */
		cr_assert_geq(cJSON_GetArraySize(params), def->ndims + 1,
		    "%s", def->name);
		cJSON_ArrayForEach(pj, params) {
			const char *nm = cJSON_GetObjectItem(pj,
			    "name")->valuestring;
			const char *dt = cJSON_GetObjectItem(pj,
			    "dtype")->valuestring;

			if (strcmp(nm, "lens") == 0 || strcmp(nm, "pos") == 0)
				cr_assert_str_eq(dt, "i32", "%s.%s",
				    def->name, nm);
			if (strcmp(nm, "eps") == 0 || strcmp(nm, "scale") == 0)
				cr_assert_str_eq(dt, "f32", "%s.%s",
				    def->name, nm);
		}
		for (v = 0; v < def->nvariants; v++)
			for (b = 0; b < 3; b++)
				if (avail[b])
					cr_assert(serve_variant(def,
					    def->variants[v], backends[b]),
					    "%s: no probe serves %s",
					    def->name, def->variants[v]);
	}
	e2e_reply_free(&r);
}

Test(e2e, explain_names_the_component_that_differs)
{
	char req[512];
	e2e_reply_t r;
	const cJSON *near, *d;

	snprintf(req, sizeof req, "{\"op\":\"get\",\"return\":\"meta\",%s}",
	    GEMM_SPEC);
	r = call_ok(req);
	e2e_reply_free(&r);
	snprintf(req, sizeof req, "{\"op\":\"explain\",%s}", GEMM_SPEC);
	r = call_ok(req);
	cr_assert_str_eq(e2e_str(&r, "variant"), "gemv_m1");
	cr_assert_str_eq(e2e_str(&r, "cached"), "memory");
	e2e_reply_free(&r);

	/* The same spec in bf16 is a miss whose nearest entry differs in
	 * dtype only; the request compiles nothing. */
	r = call_ok("{\"op\":\"explain\",\"kernel\":\"gemm\",\"backend\":"
	    "\"cpu\",\"dtype\":\"bf16\",\"shape\":{\"M\":1,\"N\":64,"
	    "\"K\":64}}");
	cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(r.h, "cached")));
	near = cJSON_GetObjectItem(r.h, "nearest");
	d = cJSON_GetObjectItem(near, "differs");
	cr_assert_eq(cJSON_GetArraySize(d), 1, "%s",
	    cJSON_PrintUnformatted(near));
	cr_assert_str_eq(cJSON_GetArrayItem(d, 0)->valuestring, "dtype");
	cr_assert(cJSON_IsObject(cJSON_GetObjectItem(r.h, "components")));
	cr_assert_eq(e2e_stat(D.sock, "compiles"), 1);
	e2e_reply_free(&r);
}

Test(e2e, warm_reports_each_item_and_is_idempotent)
{
	char req[1024];
	e2e_reply_t r;
	const cJSON *items, *sum;

	snprintf(req, sizeof req, "{\"op\":\"warm\",\"id\":5,\"items\":["
	    "{%s},{%s,\"return\":\"meta\"},{\"kernel\":\"gemm\",\"backend\":"
	    "\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":0,\"N\":1,\"K\":1}},"
	    "{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"bf16\","
	    "\"shape\":{\"M\":2,\"N\":8,\"K\":8}}]}", GEMM_SPEC, GEMM_SPEC);
	r = call_ok(req);
	items = cJSON_GetObjectItem(r.h, "items");
	cr_assert_eq(cJSON_GetArraySize(items), 4);
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(items,
	    0), "ok")));
	cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(items, 1),
	    "source")->valuestring, "joined");
	cr_assert_str_eq(item_code(items, 2), "E_BAD_SHAPE");
	sum = cJSON_GetObjectItem(r.h, "summary");
	cr_assert_eq(e2e_num(sum, "compiled"), 2);
	cr_assert_eq(e2e_num(sum, "failed"), 1);
	e2e_reply_free(&r);
	/* Again: everything that succeeded is cached now. */
	r = call_ok(req);
	sum = cJSON_GetObjectItem(r.h, "summary");
	cr_assert_eq(e2e_num(sum, "cached"), 3);
	cr_assert_eq(e2e_num(sum, "compiled"), 0);
	e2e_reply_free(&r);
	cr_assert_eq(e2e_stat(D.sock, "compiles"), 2);
}

Test(e2e, list_filters_and_pages_and_evict_removes)
{
	char req[1024];
	e2e_reply_t r;
	const cJSON *e;

	snprintf(req, sizeof req, "{\"op\":\"warm\",\"items\":[{%s},"
	    "{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"bf16\","
	    "\"shape\":{\"M\":1,\"N\":64,\"K\":64}},{\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f16\",\"shape\":{\"M\":1,"
	    "\"N\":64,\"K\":64}}]}", GEMM_SPEC);
	r = call_ok(req);
	e2e_reply_free(&r);
	r = call_ok("{\"op\":\"list\",\"kernel\":\"gemm\",\"limit\":2}");
	cr_assert_eq(e2e_num(r.h, "total"), 3);
	cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r.h, "entries")),
	    2);
	e2e_reply_free(&r);
	r = call_ok("{\"op\":\"list\",\"kernel\":\"gemm\",\"offset\":2}");
	e = cJSON_GetArrayItem(cJSON_GetObjectItem(r.h, "entries"), 0);
	cr_assert_not_null(e);
	snprintf(req, sizeof req, "{\"op\":\"evict\",\"key\":\"%s\"}",
	    cJSON_GetObjectItem(e, "key")->valuestring);
	e2e_reply_free(&r);
	r = call_ok(req);
	cr_assert_eq(e2e_num(r.h, "evicted"), 1);
	e2e_reply_free(&r);
	r = call_ok("{\"op\":\"list\",\"backend\":\"nope\"}");
	cr_assert_eq(e2e_num(r.h, "total"), 0);
	e2e_reply_free(&r);
	r = call_ok("{\"op\":\"evict\",\"all\":true}");
	cr_assert_eq(e2e_num(r.h, "evicted"), 2);
	e2e_reply_free(&r);
	r = call_ok("{\"op\":\"list\"}");
	cr_assert_eq(e2e_num(r.h, "total"), 0);
	e2e_reply_free(&r);
	expect_error("{\"op\":\"evict\"}", "E_BAD_REQUEST");
	expect_error("{\"op\":\"evict\",\"key\":\"xyz\"}", "E_BAD_REQUEST");
}

/*
 * With one compile slot and a bulk warm queued, a get issued after the
 * warm is answered before the warm finishes: it waits for at most the one
 * warm compile already running.
 */
Test(e2e, get_compiles_before_a_queued_bulk_warm)
{
	static const char *const extra[] = { "--workers", "1", NULL };
	char req[4096];
	int fd, n, i, order = 0, get_at = -1, warm_at = -1;
	e2e_reply_t r;

	e2e_cleanup(&D);
	memset(&D, 0, sizeof D);
	cr_assert_eq(e2e_start(&D, extra), 0);
	n = snprintf(req, sizeof req, "{\"op\":\"warm\",\"id\":1,\"items\":[");
	for (i = 0; i < 8; i++)
		n += snprintf(req + n, sizeof req - (size_t)n, "%s{\"kernel\":"
		    "\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":"
		    "{\"M\":1,\"N\":%d,\"K\":512}}", i ? "," : "", 64 + 8 * i);
	snprintf(req + n, sizeof req - (size_t)n, "]}");
	fd = e2e_connect(D.sock);
	cr_assert_geq(fd, 0);
	cr_assert_eq(e2e_send(fd, req), 0);
	usleep(20000);
	cr_assert_eq(e2e_send(fd, "{\"op\":\"get\",\"id\":2,\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"bf16\",\"shape\":{\"M\":1,"
	    "\"N\":32,\"K\":32},\"return\":\"meta\"}"), 0);
	for (i = 0; i < 2; i++) {
		cr_assert_eq(e2e_recv(fd, &r), 0);
		cr_assert(e2e_ok(&r), "%s", cJSON_PrintUnformatted(r.h));
		if (e2e_num(r.h, "id") == 2)
			get_at = order++;
		else
			warm_at = order++;
		e2e_reply_free(&r);
	}
	close(fd);
	cr_assert_lt(get_at, warm_at, "the get waited for the whole warm");
}

/* A warm request of N cold gemm specs (N distinct), ID, with
 * "progress":true when PROGRESS; item BAD (-1: none) has M=0. */
static void warm_json(char *buf, size_t len, int id, int n, int bad,
    int progress)
{
	int i, k;

	k = snprintf(buf, len, "{\"op\":\"warm\",\"id\":%d,%s\"items\":[", id,
	    progress ? "\"progress\":true," : "");
	for (i = 0; i < n; i++)
		k += snprintf(buf + k, len - (size_t)k, "%s{\"kernel\":"
		    "\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\","
		    "\"shape\":{\"M\":%d,\"N\":%d,\"K\":512}}", i ? "," : "",
		    i == bad ? 0 : 1, 64 + 8 * i);
	snprintf(buf + k, len - (size_t)k, "]}");
}

/* The item of a progress frame, NULL for any other frame. */
static const cJSON *progress_of(const e2e_reply_t *r)
{
	return cJSON_GetObjectItemCaseSensitive(r->h, "progress");
}

/*
 * With "progress", a warm sends one frame per item as the item ends, then
 * the reply of old; item errors (one from the parser, one from the
 * daemon) are the items' own and the rest are warmed.
 */
Test(e2e, warm_progress_sends_a_frame_per_item_then_the_reply)
{
	char req[8192];
	int fd, i, frames = 0, seen[6] = { 0 };
	const cJSON *it, *sum;
	e2e_reply_t r;

	warm_json(req, sizeof req, 3, 5, 2, 1);
	/* Item 5: a typo, refused by the parser for that item alone. */
	snprintf(req + strlen(req) - 2, sizeof req - strlen(req) + 2,
	    ",{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\","
	    "\"shpe\":{}}]}");
	fd = e2e_connect(D.sock);
	cr_assert_geq(fd, 0);
	cr_assert_eq(e2e_send(fd, req), 0);
	for (;;) {
		cr_assert_eq(e2e_recv(fd, &r), 0);
		cr_assert(e2e_ok(&r), "%s", cJSON_PrintUnformatted(r.h));
		cr_assert_eq(e2e_num(r.h, "id"), 3);
		if (!(it = progress_of(&r)))
			break;
		i = (int)e2e_num(it, "index");
		cr_assert(i >= 0 && i < 6 && !seen[i]++, "index %d", i);
		frames++;
		e2e_reply_free(&r);
	}
	cr_assert_eq(frames, 6, "one progress frame per item");
	it = cJSON_GetObjectItem(r.h, "items");
	cr_assert_eq(cJSON_GetArraySize(it), 6);
	cr_assert_str_eq(item_code(it, 2), "E_BAD_SHAPE");
	cr_assert_str_eq(item_code(it, 5), "E_UNKNOWN_FIELD");
	sum = cJSON_GetObjectItem(r.h, "summary");
	cr_assert_eq(e2e_num(sum, "compiled"), 4);
	cr_assert_eq(e2e_num(sum, "failed"), 2);
	cr_assert_eq(e2e_num(sum, "cancelled"), 0);
	e2e_reply_free(&r);

	/* Without it, the one reply of old comes first. */
	warm_json(req, sizeof req, 4, 5, -1, 0);
	cr_assert_eq(e2e_send(fd, req), 0);
	cr_assert_eq(e2e_recv(fd, &r), 0);
	cr_assert_null(progress_of(&r));
	cr_assert_eq(e2e_num(cJSON_GetObjectItem(r.h, "summary"), "cached"),
	    4);
	e2e_reply_free(&r);
	close(fd);
}

/* Reads frames on FD until the reply of request ID; counts the progress
 * frames that are E_CANCELLED and marks their indexes in CANCELLED. */
static e2e_reply_t read_until(int fd, int id, int *ncancelled,
    int *cancelled)
{
	const cJSON *it, *e;
	e2e_reply_t r;

	for (;;) {
		cr_assert_eq(e2e_recv(fd, &r), 0);
		if (e2e_num(r.h, "id") == id && !progress_of(&r))
			return r;
		it = progress_of(&r);
		e = cJSON_GetObjectItem(it, "error");
		if (e && strcmp(cJSON_GetObjectItem(e, "code")->valuestring,
		    "E_CANCELLED") == 0) {
			cancelled[(int)e2e_num(it, "index")] = 1;
			(*ncancelled)++;
		}
		e2e_reply_free(&r);
	}
}

/*
 * cancel takes back a warm's queued items: each ends E_CANCELLED and its
 * flight, which nobody else waits on, is dropped unrun (abandoned).  A
 * queued flight that another client's warm joined is not dropped: that
 * client still gets its artifact.  A compile already running finishes.
 */
Test(e2e, cancel_drops_queued_items_but_not_a_shared_flight)
{
	static const char *const extra[] = { "--workers", "1", NULL };
	int a, b, n = 0, cancelled[8] = { 0 }, i;
	char req[8192];
	e2e_reply_t r;

	e2e_cleanup(&D);
	memset(&D, 0, sizeof D);
	cr_assert_eq(e2e_start(&D, extra), 0);
	a = e2e_connect(D.sock);
	b = e2e_connect(D.sock);
	cr_assert(a >= 0 && b >= 0);
	warm_json(req, sizeof req, 1, 8, -1, 1);
	cr_assert_eq(e2e_send(a, req), 0);
	/* B wants A's last spec, queued behind six compiles. */
	cr_assert_eq(e2e_send(b, "{\"op\":\"warm\",\"id\":9,\"items\":["
	    "{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\","
	    "\"shape\":{\"M\":1,\"N\":120,\"K\":512}}]}"), 0);
	for (i = 0; i < 500 && e2e_stat(D.sock, "joins") < 1; i++)
		usleep(2000);
	cr_assert_eq(e2e_stat(D.sock, "joins"), 1, "B did not join");
	cr_assert_eq(e2e_send(a, "{\"op\":\"cancel\",\"id\":2,\"request\":1}"),
	    0);
	r = read_until(a, 2, &n, cancelled);
	cr_assert(e2e_ok(&r), "%s", cJSON_PrintUnformatted(r.h));
	cr_assert_eq(e2e_num(r.h, "cancelled"), n);
	cr_assert_geq(n, 1);
	cr_assert_leq(e2e_num(r.h, "running"), 1);
	cr_assert(cancelled[7], "A's queued item 7 was not cancelled");
	e2e_reply_free(&r);
	/* Every flight of A's cancelled items but the shared one is gone. */
	cr_assert_eq(e2e_stat(D.sock, "abandoned"), n - 1);
	cr_assert_eq(e2e_stat(D.sock, "failures"), 0);

	cr_assert_eq(e2e_recv(b, &r), 0);
	cr_assert(e2e_ok(&r), "%s", cJSON_PrintUnformatted(r.h));
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(
	    cJSON_GetObjectItem(r.h, "items"), 0), "ok")), "B lost its "
	    "compile: %s", cJSON_PrintUnformatted(r.h));
	e2e_reply_free(&r);
	cr_assert_eq(e2e_stat(D.sock, "queue_depth"), 0);

	/* A's warm has ended (the running item reports on A, then the
	 * reply): a second cancel finds nothing. */
	r = read_until(a, 1, &n, cancelled);
	cr_assert_eq(e2e_num(cJSON_GetObjectItem(r.h, "summary"),
	    "cancelled"), n);
	e2e_reply_free(&r);
	cr_assert_eq(e2e_send(a, "{\"op\":\"cancel\",\"id\":3,\"request\":1}"),
	    0);
	cr_assert_eq(e2e_recv(a, &r), 0);
	cr_assert_str_eq(e2e_code(&r), "E_NOT_FOUND");
	e2e_reply_free(&r);
	close(a);
	close(b);
}

/* ---- connection lifecycle ---- */

Test(e2e, half_closed_client_still_gets_its_replies)
{
	int fd = e2e_connect(D.sock);
	e2e_reply_t r;
	char c;

	cr_assert_geq(fd, 0);
	cr_assert_eq(e2e_send(fd, get_json("f32", "\"M\":1,\"N\":96,"
	    "\"K\":96", "", "meta")), 0);
	cr_assert_eq(shutdown(fd, SHUT_WR), 0);
	cr_assert_eq(e2e_recv(fd, &r), 0, "reply lost after half-close");
	cr_assert(e2e_ok(&r));
	e2e_reply_free(&r);
	cr_assert_eq(read(fd, &c, 1), 0, "connection not closed after");
	close(fd);
}

Test(e2e, frame_error_still_answers_requests_read_before_it)
{
	int fd = e2e_connect(D.sock), i, seen = 0;
	e2e_reply_t r;

	cr_assert_geq(fd, 0);
	cr_assert_eq(e2e_send(fd, get_json("f32", "\"M\":1,\"N\":80,"
	    "\"K\":80", "", "meta")), 0);
	cr_assert_eq(e2e_send(fd, "nope!"), 0);
	for (i = 0; i < 2; i++) {
		cr_assert_eq(e2e_recv(fd, &r), 0, "a reply was dropped");
		seen |= e2e_ok(&r) ? 1 : strcmp(e2e_code(&r), "E_BAD_JSON") ==
		    0 ? 2 : 4;
		e2e_reply_free(&r);
	}
	cr_assert_eq(seen, 3);
	close(fd);
}

Test(e2e, sigterm_answers_the_compile_in_flight)
{
	int fd = e2e_connect(D.sock), st;
	e2e_reply_t r;

	cr_assert_geq(fd, 0);
	cr_assert_eq(e2e_send(fd, get_json("bf16", "\"M\":1,\"N\":1024,"
	    "\"K\":1024", "", "artifact")), 0);
	/* Stop only once the daemon has read the request: a request still in
	 * the socket at the stop is not in flight and gets no reply. */
	for (st = 0; st < 500 && e2e_stat(D.sock, "compiles") < 1; st++)
		usleep(2000);
	kill(D.pid, SIGTERM);
	cr_assert_eq(e2e_recv(fd, &r), 0, "the compile's reply was lost");
	cr_assert(e2e_ok(&r) || strcmp(e2e_code(&r), "E_SHUTTING_DOWN") == 0,
	    "%s", cJSON_PrintUnformatted(r.h));
	e2e_reply_free(&r);
	close(fd);
	cr_assert_eq(waitpid(D.pid, &st, 0), D.pid);
	D.pid = 0;
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Starts kspecd with ARGV (after the binary) and returns its exit status,
 * or -1 if it is still running after 10 s (then killed). */
static int run_kspecd(const char *const *args)
{
	char bin[512];
	const char *argv[16];
	pid_t pid;
	int st, i, n = 0;

	snprintf(bin, sizeof bin, "%s/kspecd", e2e_build_dir());
	argv[n++] = bin;
	for (i = 0; args[i] && n < 15; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	pid = fork();
	if (pid == 0) {
		int nul = open("/dev/null", O_WRONLY);

		dup2(nul, 1);
		dup2(nul, 2);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	for (i = 0; i < 1000; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
		usleep(10000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return -1;
}

Test(e2e, refuses_a_socket_directory_others_can_write)
{
	char dir[300], sock[320], store[320];
	int rc;

	snprintf(dir, sizeof dir, "%s/open", D.dir);
	snprintf(sock, sizeof sock, "%s/k.sock", dir);
	snprintf(store, sizeof store, "%s/other.db", D.dir);
	cr_assert_eq(mkdir(dir, 0777), 0);
	cr_assert_eq(chmod(dir, 0777), 0);
	rc = run_kspecd((const char *const[]){ "--socket", sock, "--store",
	    store, NULL });
	cr_assert(rc > 0 && rc != 127, "kspecd accepted a world-writable "
	    "socket directory (status %d)", rc);
	cr_assert_neq(access(sock, F_OK), 0);
}

Test(e2e, a_second_daemon_on_the_same_store_refuses_to_start)
{
	char sock[320];
	int rc;

	snprintf(sock, sizeof sock, "%s/run/second.sock", D.dir);
	rc = run_kspecd((const char *const[]){ "--socket", sock, "--store",
	    D.store, NULL });
	cr_assert(rc > 0 && rc != 127, "two daemons share one store "
	    "(status %d)", rc);
	still_serving();
}

/* Compiles whose clients all went away before they started are skipped. */
Test(e2e, abandoned_queued_compiles_are_not_run)
{
	static const char *const extra[] = { "--workers", "1", NULL };
	int fd, i;
	char req[512];

	e2e_cleanup(&D);
	memset(&D, 0, sizeof D);
	cr_assert_eq(e2e_start(&D, extra), 0);
	fd = e2e_connect(D.sock);
	cr_assert_geq(fd, 0);
	for (i = 0; i < 6; i++) {
		snprintf(req, sizeof req, "{\"op\":\"get\",\"id\":%d,\"kernel\":"
		    "\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":"
		    "{\"M\":1,\"N\":%d,\"K\":2048},\"return\":\"meta\"}", i,
		    512 + 32 * i);
		cr_assert_eq(e2e_send(fd, req), 0);
	}
	usleep(50000);
	close(fd);
	for (i = 0; i < 500 && e2e_stat(D.sock, "queue_depth") > 0; i++)
		usleep(20000);
	cr_assert_eq(e2e_stat(D.sock, "queue_depth"), 0);
	cr_assert_geq(e2e_stat(D.sock, "abandoned"), 1);
	cr_assert_leq(e2e_stat(D.sock, "compiles") - e2e_stat(D.sock,
	    "abandoned"), 3, "compiles ran for a client that left");
}

/* hello names every backend of the table: an available one with its
 * compiler identity, an unavailable one with the reason. */
Test(e2e, hello_lists_every_backend_with_its_identity)
{
	e2e_reply_t r;
	const cJSON *b;
	int n = 0;

	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"hello\"}", &r), 0);
	cr_assert_eq(e2e_num(r.h, "protocol"), 1);
	cJSON_ArrayForEach(b, cJSON_GetObjectItem(r.h, "backends")) {
		const cJSON *why = cJSON_GetObjectItem(b, "reason");
		const cJSON *id = cJSON_GetObjectItem(b, "compiler");

		n++;
		if (cJSON_IsTrue(cJSON_GetObjectItem(b, "available")))
			cr_assert(cJSON_IsString(id) && *id->valuestring,
			    "%s lacks its compiler identity",
			    cJSON_GetObjectItem(b, "name")->valuestring);
		else
			cr_assert(cJSON_IsString(why) && *why->valuestring);
	}
	cr_assert_eq(n, 3, "cpu, cuda and opencl");
	e2e_reply_free(&r);
}

Test(e2e, launch_gives_groups_grid_and_block)
{
	e2e_reply_t r;
	const cJSON *l;

	cr_assert_eq(e2e_call(D.sock, get_json("f32", "\"N\":64,\"K\":64",
	    "\"M\"", "meta"), &r), 0);
	l = cJSON_GetObjectItem(r.h, "launch");
	cr_assert_str_eq(cJSON_GetObjectItem(l, "groups")->valuestring,
	    "(M+3)/4*16");
	cr_assert_str_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(l, "grid"),
	    0)->valuestring, "(M+3)/4*16");
	cr_assert_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(l, "block"),
	    0)->valuedouble, 32);
	e2e_reply_free(&r);
}
