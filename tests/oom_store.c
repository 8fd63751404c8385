/*
 * make oom over store/: creating a store (its schema), opening one that
 * holds entries, putting, getting, recording a miss, artifacts and the hot
 * cache, each with every allocation failing in turn (tests/oom.h), those
 * of SQLite and cJSON included: SQLite's allocator is routed through the
 * injector with sqlite3_config(SQLITE_CONFIG_MALLOC), as SQLite's own
 * test_malloc.c does.
 */
#include "store_fixture.h"

#include <criterion/logging.h>

#include "oom.h"

static sqlite3_mem_methods sqlite_mem;

static void *sqlite_malloc(int n)
{
	return ks_oom_should_fail() ? NULL : sqlite_mem.xMalloc(n);
}

static void *sqlite_realloc(void *p, int n)
{
	return ks_oom_should_fail() ? NULL : sqlite_mem.xRealloc(p, n);
}

static void oom_setup(void)
{
	sqlite3_mem_methods m;

	setup();
	/* On tmpfs: a try costs no disk syncs. */
	cr_assert_eq(rmdir(dir), 0);
	snprintf(dir, sizeof dir, "/dev/shm/kspec-oom-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(db, sizeof db, "%s/store.db", dir);
	ks_oom_hook_cjson();
	cr_assert_eq(sqlite3_shutdown(), SQLITE_OK);
	cr_assert_eq(sqlite3_config(SQLITE_CONFIG_GETMALLOC, &sqlite_mem),
	    SQLITE_OK);
	m = sqlite_mem;
	m.xMalloc = sqlite_malloc;
	m.xRealloc = sqlite_realloc;
	cr_assert_eq(sqlite3_config(SQLITE_CONFIG_MALLOC, &m), SQLITE_OK);
	cr_assert_eq(sqlite3_initialize(), SQLITE_OK);
}

TestSuite(oom_store, .init = oom_setup, .fini = teardown, .timeout = 600);

/* Removes the store's files (the database, its journal, what was moved
 * aside), leaving the directory. */
static void remove_store(void)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	cr_assert_eq(mkdir(dir, 0700), 0);
}

typedef struct {
	ks_store_t *s;
	ks_artifact_t *a, *got;
	int fresh;                      /* each try on a new store */
	int populate;                   /* entries 1..3 stored before */
	int reopen;                     /* each try opens the store */
	char err[512];
} store_case_t;

static void store_setup(void *ctx)
{
	store_case_t *p = ctx;
	int i;

	if (p->fresh)
		remove_store();
	if (p->populate) {
		ks_store_t *s = open_store(0);

		for (i = 1; i <= 3; i++)
			put(s, i, (size_t)(100 * i));
		ks_store_close(s);
	}
	if (!p->reopen)
		p->s = open_store(0);
}

static void store_teardown(void *ctx)
{
	store_case_t *p = ctx;

	if (p->got != NULL)
		ks_artifact_unref(p->got);
	p->got = NULL;
	ks_store_close(p->s);
	p->s = NULL;
}

/* Opening a store runs thousands of SQLite allocations (its schema
 * parsed, and on a new store created): those cases fail a sample. */
#define OPEN_MAX_TRIES 400

static void run_store(const char *what, store_case_t *p,
    int (*op)(void *), int (*check)(void *))
{
	ks_oom_case_t c = { .what = what, .ctx = p, .setup = store_setup,
	    .op = op, .check = check, .teardown = store_teardown,
	    .max_tries = p->reopen ? OPEN_MAX_TRIES : 0 };

	ks_oom_run(&c);
}

static int open_op(void *ctx)
{
	store_case_t *p = ctx;

	return ks_store_open(db, 0, &p->s, p->err, sizeof p->err);
}

static int open_check(void *ctx)
{
	store_case_t *p = ctx;
	ks_store_stats_t st;
	int i;

	if (ks_store_stats(p->s, &st) != KS_OK ||
	    st.schema_version != KS_STORE_SCHEMA_VERSION)
		return 0;
	if (!p->populate)
		return st.entries == 0;
	for (i = 1; i <= 3; i++)
		expect_same(p->s, i, (size_t)(100 * i));
	return st.entries == 3;
}

Test(oom_store, creating_a_store_succeeds_or_fails_cleanly)
{
	store_case_t p = { .fresh = 1, .reopen = 1 };

	run_store("create", &p, open_op, open_check);
}

Test(oom_store, opening_a_store_with_entries_succeeds_or_fails_cleanly)
{
	store_case_t p = { .fresh = 1, .populate = 1, .reopen = 1 };

	run_store("open", &p, open_op, open_check);
}

static int put_op(void *ctx)
{
	store_case_t *p = ctx;

	return ks_store_put(p->s, p->a);
}

static int put_check(void *ctx)
{
	store_case_t *p = ctx;

	expect_same(p->s, 7, 300);
	return 1;
}

Test(oom_store, a_put_succeeds_or_fails_cleanly)
{
	store_case_t p = { .fresh = 1, .populate = 1 };

	p.a = make(7, 300);
	run_store("put", &p, put_op, put_check);
	ks_artifact_unref(p.a);
}

static int get_op(void *ctx)
{
	store_case_t *p = ctx;
	ks_hash_t k = key_of(2);

	return ks_store_get(p->s, &k, &p->got);
}

static int get_check(void *ctx)
{
	store_case_t *p = ctx;
	ks_artifact_t *want = make(2, 200);
	int same = p->got != NULL && p->got->len == want->len &&
	    memcmp(p->got->bytes, want->bytes, want->len) == 0 &&
	    strcmp(p->got->meta, want->meta) == 0 &&
	    ks_hash_eq(&p->got->sum, &want->sum);

	ks_artifact_unref(want);
	return same;
}

Test(oom_store, a_get_succeeds_or_fails_cleanly)
{
	store_case_t p = { .populate = 1 };

	remove_store();
	run_store("get", &p, get_op, get_check);
}

static int miss_op(void *ctx)
{
	store_case_t *p = ctx;

	return ks_store_record_miss(p->s, "decode",
	    "{\"kernel\":\"gemm\",\"backend\":\"cpu\"}", 2);
}

Test(oom_store, recording_a_miss_succeeds_or_fails_cleanly)
{
	store_case_t p = { .fresh = 1 };

	run_store("miss", &p, miss_op, NULL);
}

/* ---- artifacts and the hot cache (no SQLite) ---- */

typedef struct {
	ks_hot_t *hot;
	ks_artifact_t *a;
	ks_artifact_t *got;             /* borrowed from the cache */
	int kept;
} hot_case_t;

/* A cache that cannot keep an entry for want of memory does not keep it
 * (ks_hot_put answers 0): that is absorbed, not an error. */
static int hot_op(void *ctx)
{
	hot_case_t *p = ctx;
	static const uint8_t bytes[] = { 9, 8, 7, 6, 5 };
	ks_hash_t k = key_of(5);

	p->hot = ks_hot_new(1 << 20);
	if (p->hot == NULL)
		return KS_E_NOMEM;
	p->a = ks_artifact_new(&k, "\"kernel\":\"k5\"", bytes, sizeof bytes);
	if (p->a == NULL)
		return KS_E_NOMEM;
	p->kept = ks_hot_put(p->hot, p->a);
	p->got = ks_hot_get(p->hot, &k);
	return KS_OK;
}

static int hot_check(void *ctx)
{
	hot_case_t *p = ctx;

	if (!p->kept)
		return p->got == NULL && ks_hot_count(p->hot) == 0;
	return p->got == p->a && ks_hot_count(p->hot) == 1 &&
	    p->a->refs == 2;
}

static void hot_teardown(void *ctx)
{
	hot_case_t *p = ctx;

	if (p->a != NULL)
		ks_artifact_unref(p->a);
	ks_hot_free(p->hot);
	memset(p, 0, sizeof *p);
}

Test(oom_store, an_artifact_in_the_hot_cache_succeeds_or_fails_cleanly)
{
	hot_case_t p = { 0 };
	ks_oom_case_t c = { .what = "hot", .ctx = &p, .op = hot_op,
	    .check = hot_check, .teardown = hot_teardown };

	ks_oom_run(&c);
}
