/*
 * make oom over proto/: parsing requests, encoding error replies, sealing
 * and opening signed entries and bundles, each with every allocation
 * failing in turn (tests/oom.h).  Also the injector's own check: planted
 * defects (an unchecked allocation, a leak on an error path) in copies of
 * a small function, which it must catch.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "../proto/entry.h"
#include "../proto/proto.h"
#include "oom.h"

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
	ks_oom_hook_cjson();
}

TestSuite(oom_proto, .init = setup);

/* ---- requests ---- */

typedef struct {
	const char *header;
	ks_request_t req;
	char err[512];
	int (*whole)(const ks_request_t *r);
} parse_case_t;

static int parse_op(void *ctx)
{
	parse_case_t *p = ctx;

	return ks_request_parse(p->header, strlen(p->header), &p->req, p->err,
	    sizeof p->err);
}

static int parse_check(void *ctx)
{
	parse_case_t *p = ctx;

	return p->whole(&p->req);
}

static void parse_teardown(void *ctx)
{
	parse_case_t *p = ctx;

	ks_request_close(&p->req);
	memset(&p->req, 0, sizeof p->req);
}

static void run_parse(const char *what, const char *header,
    int (*whole)(const ks_request_t *r))
{
	parse_case_t p = { .header = header, .whole = whole };
	ks_oom_case_t c = { .what = what, .ctx = &p, .op = parse_op,
	    .check = parse_check, .teardown = parse_teardown };

	ks_oom_run(&c);
}

static int get_whole(const ks_request_t *r)
{
	return r->op == KS_OP_GET && r->has_id && r->id == 7 &&
	    strcmp(r->get.kernel, "gemm") == 0 && r->get.nshape == 2 &&
	    r->get.ndynamic == 1 && strcmp(r->get.dynamic[0], "N") == 0;
}

Test(oom_proto, a_get_request_parses_or_fails_cleanly)
{
	run_parse("get", "{\"op\":\"get\",\"id\":7,\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"K\":64},\"dynamic\":[\"N\"]}",
	    get_whole);
}

/* Longer than the parser's stack copy: the copy is allocated. */
Test(oom_proto, a_long_request_parses_or_fails_cleanly)
{
	static char header[2048];
	size_t n;

	n = (size_t)snprintf(header, sizeof header, "{\"op\":\"get\","
	    "\"id\":7,\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":"
	    "\"f32\",\"shape\":{\"M\":1,\"K\":64},\"dynamic\":[\"N\"],"
	    "\"deployment\":\"");
	memset(header + n, 'd', 60);
	strcpy(header + n + 60, "\"}");
	cr_assert_lt(strlen(header), sizeof header);
	run_parse("long get", header, get_whole);
}

static int warm_whole(const ks_request_t *r)
{
	return r->op == KS_OP_WARM && r->nitems == 3 && r->items != NULL &&
	    r->item_errs != NULL && r->item_errs[0].code == KS_OK &&
	    r->item_errs[1].code == KS_E_UNKNOWN_FIELD &&
	    strcmp(r->items[2].kernel, "softmax") == 0;
}

Test(oom_proto, a_warm_request_with_items_parses_or_fails_cleanly)
{
	run_parse("warm", "{\"op\":\"warm\",\"id\":4,\"progress\":true,"
	    "\"items\":[{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":"
	    "\"f32\",\"shape\":{\"M\":1}},{\"kernel\":\"gemm\",\"shpe\":{}},"
	    "{\"kernel\":\"softmax\",\"backend\":\"cpu\",\"dtype\":\"f16\","
	    "\"shape\":{}}]}", warm_whole);
}

static int import_whole(const ks_request_t *r)
{
	return r->op == KS_OP_IMPORT && r->path != NULL &&
	    strcmp(r->path, "/var/lib/kspec/fleet.bundle") == 0;
}

Test(oom_proto, an_import_request_parses_or_fails_cleanly)
{
	run_parse("import", "{\"op\":\"import\",\"path\":"
	    "\"/var/lib/kspec/fleet.bundle\"}", import_whole);
}

/* ---- error replies ---- */

typedef struct {
	ks_buf_t out;
} reply_case_t;

static int reply_op(void *ctx)
{
	reply_case_t *p = ctx;

	return ks_reply_error(&p->out, 1, 42, KS_E_BAD_SHAPE,
	    "gemm: \"M\" must be in [1, 1048576]");
}

static int reply_check(void *ctx)
{
	reply_case_t *p = ctx;
	static const char want[] = "{\"id\":42,\"ok\":false,\"error\":{"
	    "\"code\":\"E_BAD_SHAPE\",\"message\":\"gemm: \\\"M\\\" must be in "
	    "[1, 1048576]\"}}";

	return p->out.len == strlen(want) &&
	    memcmp(p->out.data, want, p->out.len) == 0;
}

static void reply_teardown(void *ctx)
{
	reply_case_t *p = ctx;

	ks_buf_close(&p->out);
}

Test(oom_proto, an_error_reply_encodes_or_fails_cleanly)
{
	reply_case_t p;
	ks_oom_case_t c = { .what = "error reply", .ctx = &p,
	    .op = reply_op, .check = reply_check, .teardown = reply_teardown };

	ks_buf_init(&p.out);
	ks_oom_run(&c);
}

/* ---- signed entries and bundles ---- */

typedef struct {
	ks_fleet_sec_t sec;
	ks_fleet_pub_t pub;
	ks_buf_t entry, bundle;
	ks_entry_t opened;
	char err[512];
} entry_case_t;

static const char entry_meta[] = "{\"kernel\":\"gemm\"}";
static const uint8_t entry_bytes[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 };

static int entry_op(void *ctx)
{
	entry_case_t *p = ctx;
	ks_hash_t key;
	int rc;

	memset(key.b, 0xab, sizeof key.b);
	rc = ks_entry_seal(&p->sec, &key, entry_meta, strlen(entry_meta),
	    entry_bytes, sizeof entry_bytes, &p->entry);
	if (rc != KS_OK)
		return rc;
	rc = ks_bundle_begin(&p->bundle, 1);
	if (rc != KS_OK)
		return rc;
	rc = ks_bundle_add(&p->bundle, &p->entry);
	if (rc != KS_OK)
		return rc;
	return ks_entry_open(&p->pub, 1, p->entry.data, p->entry.len,
	    &p->opened, p->err, sizeof p->err);
}

static int entry_check(void *ctx)
{
	entry_case_t *p = ctx;

	return p->opened.len == sizeof entry_bytes &&
	    memcmp(p->opened.bytes, entry_bytes, sizeof entry_bytes) == 0 &&
	    p->bundle.len == 12 + 8 + p->entry.len;
}

static void entry_teardown(void *ctx)
{
	entry_case_t *p = ctx;

	ks_buf_close(&p->entry);
	ks_buf_close(&p->bundle);
}

Test(oom_proto, an_entry_seals_bundles_and_opens_or_fails_cleanly)
{
	char dir[] = "/tmp/kspec-oom-XXXXXX", prefix[64], path[80], id[17];
	entry_case_t p;
	ks_oom_case_t c = { .what = "entry", .ctx = &p, .op = entry_op,
	    .check = entry_check, .teardown = entry_teardown };

	memset(&p, 0, sizeof p);
	cr_assert_not_null(mkdtemp(dir));
	snprintf(prefix, sizeof prefix, "%s/fleet", dir);
	cr_assert_eq(ks_fleet_keygen(prefix, id, p.err, sizeof p.err), KS_OK);
	snprintf(path, sizeof path, "%s.public", prefix);
	cr_assert_eq(ks_fleet_load_public(path, &p.pub, p.err, sizeof p.err),
	    KS_OK);
	unlink(path);
	snprintf(path, sizeof path, "%s.secret", prefix);
	cr_assert_eq(ks_fleet_load_secret(path, &p.sec, p.err, sizeof p.err),
	    KS_OK);
	unlink(path);
	rmdir(dir);
	ks_buf_init(&p.entry);
	ks_buf_init(&p.bundle);
	ks_oom_run(&c);
}

/* ---- the injector catches planted defects ---- */

/* A copy of the import path's copy with its check left out: the
 * allocation is unchecked, and a failure gives KS_OK with no path. */
static int planted_unchecked(void *ctx)
{
	char **path = ctx;

	*path = strdup("/var/lib/kspec/fleet.bundle");
	return KS_OK;
}

static int planted_check(void *ctx)
{
	char **path = ctx;

	return *path != NULL;
}

static void planted_teardown(void *ctx)
{
	char **path = ctx;

	free(*path);
	*path = NULL;
}

Test(oom_proto, the_injector_catches_a_planted_unchecked_allocation)
{
	char *path = NULL;
	ks_oom_case_t c = { .what = "planted unchecked", .ctx = &path,
	    .op = planted_unchecked, .check = planted_check,
	    .teardown = planted_teardown };
	ks_oom_result_t r;

	ks_oom_try(&c, &r);
	cr_assert_eq(r.first_bad, 1, "%s", r.why);
	cr_assert(strstr(r.why, "broken result"), "%s", r.why);
}

/* The block the planted leak loses, kept where LeakSanitizer does not see
 * a pointer (inverted), so that the test can free it once the injector has
 * found it and the process ends without a leak. */
static uintptr_t planted_lost;

/* Two allocations, and the first is not freed when the second fails. */
static void *leaky_body(void *ctx)
{
	char **path = ctx;
	char *dir = strdup("/var/lib/kspec");

	if (dir == NULL)
		return (void *)(intptr_t)KS_E_NOMEM;
	*path = malloc(strlen(dir) + 16);
	if (*path == NULL) {
		planted_lost = ~(uintptr_t)dir;
		return (void *)(intptr_t)KS_E_NOMEM;
	}
	snprintf(*path, strlen(dir) + 16, "%s/fleet", dir);
	free(dir);
	return (void *)(intptr_t)KS_OK;
}

/* Runs the body on a thread of its own, which ends before the leak check:
 * LeakSanitizer scans the stacks and registers of live threads only, so
 * no stale copy of the lost pointer can hide the leak. */
static int planted_leaky(void *ctx)
{
	pthread_t t;
	void *rc;

	if (pthread_create(&t, NULL, leaky_body, ctx) != 0 ||
	    pthread_join(t, &rc) != 0)
		return KS_E_INTERNAL;
	return (int)(intptr_t)rc;
}

Test(oom_proto, the_injector_catches_a_planted_leak_on_an_error_path)
{
	char *path = NULL;
	ks_oom_case_t c = { .what = "planted leak", .ctx = &path,
	    .op = planted_leaky, .check = planted_check,
	    .teardown = planted_teardown };
	ks_oom_result_t r;
	int saved, quiet;
	long n;

	if (__lsan_do_recoverable_leak_check == NULL)
		cr_skip_test("built without LeakSanitizer");
	/* The leak is when the last allocation fails: count them. */
	ks_oom_arm(LONG_MAX, KS_OOM_ONCE);
	cr_assert_eq(planted_leaky(&path), KS_OK);
	ks_oom_disarm();
	n = ks_oom_counted();
	planted_teardown(&path);
	cr_assert_geq(n, 2);
	/* LeakSanitizer prints the leak it finds: this test's expected
	 * finding, kept out of the log, where any sanitizer report fails
	 * the run (tests/run.sh). */
	fflush(stderr);
	saved = dup(STDERR_FILENO);
	quiet = open("/dev/null", O_WRONLY | O_CLOEXEC);
	cr_assert(saved >= 0 && quiet >= 0);
	dup2(quiet, STDERR_FILENO);
	ks_oom_try(&c, &r);
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(quiet);
	free((void *)~planted_lost);
	cr_assert_eq(r.first_bad, n, "%ld: %s", r.first_bad, r.why);
	cr_assert(strstr(r.why, "leak"), "%s", r.why);
}
