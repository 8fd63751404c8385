/*
 * store/: artifacts, the hot tier and the sqlite store.  Each test gets its
 * own temporary directory; damage is planted with a separate raw sqlite
 * connection (or raw file writes) while the store is closed, so the store's
 * one-writer rule holds for the store itself.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../base/base.h"
#include "../store/store.h"

static char dir[256];
static char db[512];

static int rm_entry(const char *p, const struct stat *st, int flag,
    struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
	ks_log_set_level(KS_LOG_ERROR);
	snprintf(dir, sizeof dir, "/tmp/kspec-store-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(db, sizeof db, "%s/store.db", dir);
}

static void teardown(void)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(artifact, .init = setup, .fini = teardown, .timeout = 30);
TestSuite(hot, .init = setup, .fini = teardown, .timeout = 30);
TestSuite(store, .init = setup, .fini = teardown, .timeout = 60);

/* ---- helpers ---- */

static ks_hash_t key_of(int i)
{
	char name[32];
	ks_hash_t k;

	snprintf(name, sizeof name, "key-%d", i);
	ks_hash(name, strlen(name), &k);
	return k;
}

/* Artifact I with LEN bytes of a pattern that depends on I. */
static ks_artifact_t *make(int i, size_t len)
{
	ks_hash_t k = key_of(i);
	char meta[64];
	uint8_t *b = malloc(len ? len : 1);
	ks_artifact_t *a;
	size_t j;

	cr_assert_not_null(b);
	for (j = 0; j < len; j++)
		b[j] = (uint8_t)(i * 31 + j * 7);
	snprintf(meta, sizeof meta, "\"kernel\":\"k%d\",\"n\":%zu", i, len);
	a = ks_artifact_new(&k, meta, b, len);
	free(b);
	cr_assert_not_null(a);
	return a;
}

static ks_store_t *open_store(uint64_t max_bytes)
{
	char err[512];
	ks_store_t *s = NULL;
	int rc = ks_store_open(db, max_bytes, &s, err, sizeof err);

	cr_assert_eq(rc, KS_OK, "open: %s (%s)", err, ks_err_name(rc));
	return s;
}

static void put(ks_store_t *s, int i, size_t len)
{
	ks_artifact_t *a = make(i, len);

	cr_assert_eq(ks_store_put(s, a), KS_OK);
	ks_artifact_unref(a);
}

static int get_rc(ks_store_t *s, int i)
{
	ks_hash_t k = key_of(i);
	ks_artifact_t *a = NULL;
	int rc = ks_store_get(s, &k, &a);

	if (rc == KS_OK)
		ks_artifact_unref(a);
	else
		cr_assert_null(a);
	return rc;
}

/* Asserts that the store serves artifact I exactly as make(I, LEN). */
static void expect_same(ks_store_t *s, int i, size_t len)
{
	ks_artifact_t *want = make(i, len), *got = NULL;

	cr_assert_eq(ks_store_get(s, &want->key, &got), KS_OK);
	cr_assert(ks_hash_eq(&got->key, &want->key));
	cr_assert(ks_hash_eq(&got->sum, &want->sum));
	cr_assert_eq(got->len, want->len);
	cr_assert_eq(memcmp(got->bytes, want->bytes, len), 0);
	cr_assert_eq(got->meta_len, want->meta_len);
	cr_assert_str_eq(got->meta, want->meta);
	cr_assert_eq(got->refs, 1);
	ks_artifact_unref(got);
	ks_artifact_unref(want);
}

static sqlite3 *raw_open(void)
{
	sqlite3 *r = NULL;

	cr_assert_eq(sqlite3_open(db, &r), SQLITE_OK);
	sqlite3_busy_timeout(r, 5000);
	return r;
}

static void raw_exec(const char *sql)
{
	sqlite3 *r = raw_open();
	char *msg = NULL;

	cr_assert_eq(sqlite3_exec(r, sql, NULL, NULL, &msg), SQLITE_OK,
	    "%s: %s", sql, msg ? msg : "");
	sqlite3_close(r);
}

/* Runs one statement with ?1 bound to key I. */
static void raw_exec_key(const char *sql, int i)
{
	sqlite3 *r = raw_open();
	sqlite3_stmt *st;
	ks_hash_t k = key_of(i);

	cr_assert_eq(sqlite3_prepare_v2(r, sql, -1, &st, NULL), SQLITE_OK,
	    "%s", sqlite3_errmsg(r));
	sqlite3_bind_blob(st, 1, k.b, KS_HASH_BYTES, SQLITE_STATIC);
	cr_assert_eq(sqlite3_step(st), SQLITE_DONE, "%s", sqlite3_errmsg(r));
	cr_assert_eq(sqlite3_changes(r), 1);
	sqlite3_finalize(st);
	sqlite3_close(r);
}

/* The first column of the first row of SQL, with ?1 bound to key I (if
 * I >= 0); -1 when there is no row. */
static int64_t raw_int(const char *sql, int i)
{
	sqlite3 *r = raw_open();
	sqlite3_stmt *st;
	ks_hash_t k = key_of(i);
	int64_t v = -1;

	cr_assert_eq(sqlite3_prepare_v2(r, sql, -1, &st, NULL), SQLITE_OK,
	    "%s", sqlite3_errmsg(r));
	if (i >= 0)
		sqlite3_bind_blob(st, 1, k.b, KS_HASH_BYTES, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(r);
	return v;
}

static void raw_journal_mode(char out[16])
{
	sqlite3 *r = raw_open();
	sqlite3_stmt *st;

	cr_assert_eq(sqlite3_prepare_v2(r, "PRAGMA journal_mode", -1, &st,
	    NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	snprintf(out, 16, "%s", (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	sqlite3_close(r);
}

static int64_t raw_last_used(int i)
{
	return raw_int("SELECT last_used FROM uses WHERE key = ?1", i);
}

static int64_t raw_rows(void)
{
	return raw_int("SELECT COUNT(*) FROM artifacts", -1);
}

/* Flips one byte of column COL of row I, through a raw connection. */
static void raw_flip(int i, const char *col, size_t at)
{
	sqlite3 *r = raw_open();
	sqlite3_stmt *st;
	ks_hash_t k = key_of(i);
	char sql[128];
	uint8_t *copy;
	int n;

	snprintf(sql, sizeof sql, "SELECT %s FROM artifacts WHERE key = ?1",
	    col);
	cr_assert_eq(sqlite3_prepare_v2(r, sql, -1, &st, NULL), SQLITE_OK);
	sqlite3_bind_blob(st, 1, k.b, KS_HASH_BYTES, SQLITE_STATIC);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	n = sqlite3_column_bytes(st, 0);
	cr_assert_lt(at, (size_t)n);
	copy = malloc((size_t)n);
	memcpy(copy, sqlite3_column_blob(st, 0), (size_t)n);
	sqlite3_finalize(st);
	copy[at] ^= 0x01;

	snprintf(sql, sizeof sql, "UPDATE artifacts SET %s = ?2 WHERE key = ?1",
	    col);
	cr_assert_eq(sqlite3_prepare_v2(r, sql, -1, &st, NULL), SQLITE_OK);
	sqlite3_bind_blob(st, 1, k.b, KS_HASH_BYTES, SQLITE_STATIC);
	if (strcmp(col, "meta") == 0)
		sqlite3_bind_text(st, 2, (char *)copy, n, SQLITE_STATIC);
	else
		sqlite3_bind_blob(st, 2, copy, n, SQLITE_STATIC);
	cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
	cr_assert_eq(sqlite3_changes(r), 1);
	sqlite3_finalize(st);
	sqlite3_close(r);
	free(copy);
}

static void write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");

	cr_assert_not_null(f);
	cr_assert_eq(fwrite(p, 1, n, f), n);
	fclose(f);
}

/* A closed store holding artifacts 1 and 2 of 4000 bytes each, ready for
 * damage to be planted in row 1. */
static void two_rows(void)
{
	ks_store_t *s = open_store(0);

	put(s, 1, 4000);
	put(s, 2, 4000);
	ks_store_close(s);
}

/* Reopens a two_rows store whose row 1 was damaged and checks that it is
 * not served, is counted and removed, and that row 2 is untouched. */
static void expect_damage_caught(void)
{
	ks_store_t *s = open_store(0);
	ks_store_stats_t st;

	cr_assert_eq(get_rc(s, 1), KS_E_CORRUPT);
	ks_store_stats(s, &st);
	cr_assert_eq(st.corrupt, 1);
	cr_assert_eq(st.entries, 1);
	cr_assert_eq(st.bytes, 4000);
	cr_assert_eq(raw_int("SELECT COUNT(*) FROM artifacts WHERE key = ?1",
	    1), 0, "the corrupt row was not removed");
	cr_assert_eq(get_rc(s, 1), KS_E_NOT_FOUND);
	expect_same(s, 2, 4000);
	cr_assert_eq(ks_store_corrupt_total(s), 1);
	ks_store_close(s);
}

/* ---- artifacts ---- */

Test(artifact, new_copies_inputs_and_sums_the_bytes)
{
	ks_hash_t k = key_of(7), sum;
	uint8_t b[5] = { 1, 2, 3, 4, 5 };
	ks_artifact_t *a = ks_artifact_new(&k, "\"x\":1", b, sizeof b);

	cr_assert_not_null(a);
	b[0] = 9;
	ks_hash((uint8_t[]){ 1, 2, 3, 4, 5 }, 5, &sum);
	cr_assert(ks_hash_eq(&a->sum, &sum));
	cr_assert(ks_hash_eq(&a->key, &k));
	cr_assert_eq(a->bytes[0], 1);
	cr_assert_str_eq(a->meta, "\"x\":1");
	cr_assert_eq(a->meta_len, 5);
	cr_assert_eq(a->refs, 1);
	ks_artifact_unref(a);
}

Test(artifact, empty_meta_and_bytes_are_valid)
{
	ks_hash_t k = key_of(1), sum;
	ks_artifact_t *a = ks_artifact_new(&k, NULL, NULL, 0);

	cr_assert_not_null(a);
	ks_hash("", 0, &sum);
	cr_assert(ks_hash_eq(&a->sum, &sum));
	cr_assert_str_eq(a->meta, "");
	cr_assert_not_null(a->bytes);
	ks_artifact_unref(a);
}

static void *ref_unref_loop(void *p)
{
	ks_artifact_t *a = p;
	int i;

	for (i = 0; i < 200000; i++) {
		ks_artifact_ref(a);
		ks_artifact_unref(a);
	}
	return NULL;
}

Test(artifact, refcount_is_exact_under_concurrent_ref_and_unref)
{
	ks_artifact_t *a = make(1, 16);
	pthread_t t[4];
	int i;

	for (i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, ref_unref_loop, a);
	for (i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(a->refs, 1);
	ks_artifact_unref(a);
}

/* ---- hot tier ---- */

/* Cost in the hot tier of make(i, len). */
static size_t cost_of(int i, size_t len)
{
	ks_artifact_t *a = make(i, len);
	size_t c = a->meta_len + a->len;

	ks_artifact_unref(a);
	return c;
}

Test(hot, least_recently_used_entry_is_evicted_first)
{
	size_t c = cost_of(1, 100);
	ks_hot_t *h = ks_hot_new(3 * c);
	ks_artifact_t *a[4];
	ks_hash_t k;
	int i;

	/* Same meta length for keys 1..4: "k1".."k4". */
	for (i = 0; i < 4; i++)
		a[i] = make(i + 1, 100);
	ks_hot_put(h, a[0]);
	ks_hot_put(h, a[1]);
	ks_hot_put(h, a[2]);
	cr_assert_eq(ks_hot_count(h), 3);
	k = key_of(1);
	cr_assert_eq(ks_hot_get(h, &k), a[0]);  /* 1 is now most recent */
	ks_hot_put(h, a[3]);                    /* evicts 2 */
	cr_assert_eq(ks_hot_count(h), 3);
	k = key_of(2);
	cr_assert_null(ks_hot_get(h, &k));
	for (i = 1; i <= 4; i++) {
		if (i == 2)
			continue;
		k = key_of(i);
		cr_assert_eq(ks_hot_get(h, &k), a[i - 1], "key %d", i);
	}
	cr_assert_eq(a[1]->refs, 1, "evicted entry kept its reference");
	ks_hot_free(h);
	for (i = 0; i < 4; i++) {
		cr_assert_eq(a[i]->refs, 1, "ks_hot_free leaked a reference");
		ks_artifact_unref(a[i]);
	}
}

Test(hot, budget_counts_meta_and_bytes)
{
	ks_artifact_t *a = make(1, 1000), *b = make(2, 1000);
	size_t ca = a->meta_len + a->len;
	ks_hot_t *h = ks_hot_new(ca + b->meta_len + b->len - 1);

	ks_hot_put(h, a);
	cr_assert_eq(ks_hot_bytes(h), ca);
	ks_hot_put(h, b);       /* both do not fit: a goes */
	cr_assert_eq(ks_hot_count(h), 1);
	cr_assert_eq(ks_hot_bytes(h), b->meta_len + b->len);
	cr_assert_null(ks_hot_get(h, &a->key));
	cr_assert_eq(ks_hot_get(h, &b->key), b);
	ks_hot_free(h);
	ks_artifact_unref(a);
	ks_artifact_unref(b);
}

Test(hot, artifact_larger_than_the_budget_is_not_kept)
{
	ks_artifact_t *small = make(1, 10), *big = make(2, 5000);
	ks_hot_t *h = ks_hot_new(1000);

	ks_hot_put(h, small);
	ks_hot_put(h, big);
	cr_assert_null(ks_hot_get(h, &big->key));
	cr_assert_eq(big->refs, 1);
	cr_assert_eq(ks_hot_get(h, &small->key), small,
	    "an oversize put must not evict what fits");
	ks_hot_free(h);
	ks_artifact_unref(small);
	ks_artifact_unref(big);
}

Test(hot, evicted_artifact_stays_valid_while_a_reference_is_held)
{
	ks_artifact_t *a = make(1, 500), *b = make(2, 500), *held;
	ks_hot_t *h = ks_hot_new(a->meta_len + a->len);
	ks_artifact_t *want = make(1, 500);

	ks_hot_put(h, a);
	ks_artifact_unref(a);           /* the tier holds the only reference */
	held = ks_hot_get(h, &want->key);
	cr_assert_not_null(held);
	cr_assert_eq(held->refs, 1);
	ks_artifact_ref(held);          /* e.g. a reply being written */
	ks_hot_put(h, b);               /* evicts the artifact of key 1 */
	cr_assert_null(ks_hot_get(h, &want->key));
	cr_assert_eq(held->refs, 1);
	cr_assert_eq(held->len, 500);
	cr_assert_eq(memcmp(held->bytes, want->bytes, 500), 0);
	cr_assert_str_eq(held->meta, want->meta);
	ks_artifact_unref(held);
	ks_hot_free(h);
	ks_artifact_unref(b);
	ks_artifact_unref(want);
}

Test(hot, put_of_a_known_key_replaces_the_artifact)
{
	ks_artifact_t *a = make(1, 100), *a2 = make(1, 200);
	ks_hot_t *h = ks_hot_new(1 << 20);

	ks_hot_put(h, a);
	ks_hot_put(h, a);               /* same artifact again: no change */
	cr_assert_eq(a->refs, 2);
	ks_hot_put(h, a2);
	cr_assert_eq(ks_hot_count(h), 1);
	cr_assert_eq(ks_hot_bytes(h), a2->meta_len + a2->len);
	cr_assert_eq(ks_hot_get(h, &a->key), a2);
	cr_assert_eq(a->refs, 1);
	ks_hot_free(h);
	cr_assert_eq(a2->refs, 1);
	ks_artifact_unref(a);
	ks_artifact_unref(a2);
}

Test(hot, remove_drops_the_entry_and_its_reference)
{
	ks_artifact_t *a = make(1, 100);
	ks_hot_t *h = ks_hot_new(1 << 20);

	ks_hot_put(h, a);
	cr_assert_eq(a->refs, 2);
	ks_hot_remove(h, &a->key);
	ks_hot_remove(h, &a->key);      /* absent: no effect */
	cr_assert_eq(a->refs, 1);
	cr_assert_eq(ks_hot_count(h), 0);
	cr_assert_eq(ks_hot_bytes(h), 0);
	cr_assert_null(ks_hot_get(h, &a->key));
	ks_hot_free(h);
	ks_artifact_unref(a);
}

Test(hot, zero_budget_keeps_nothing)
{
	ks_artifact_t *a = make(1, 0);
	ks_hot_t *h = ks_hot_new(0);

	ks_hot_put(h, a);
	cr_assert_eq(ks_hot_count(h), 0);
	cr_assert_eq(a->refs, 1);
	ks_hot_free(h);
	ks_artifact_unref(a);
}

Test(hot, many_entries_stay_consistent_under_churn)
{
	size_t c = cost_of(10, 64);
	ks_hot_t *h = ks_hot_new(50 * c);
	ks_hash_t k;
	int i;

	/* Keys 10..99 share meta length, so 50 of them fit exactly. */
	for (i = 10; i < 100; i++) {
		ks_artifact_t *a = make(i, 64);

		ks_hot_put(h, a);
		ks_artifact_unref(a);
		cr_assert_leq(ks_hot_bytes(h), 50 * c);
	}
	cr_assert_eq(ks_hot_count(h), 50);
	for (i = 10; i < 100; i++) {
		k = key_of(i);
		if (i < 50)
			cr_assert_null(ks_hot_get(h, &k), "key %d", i);
		else
			cr_assert_not_null(ks_hot_get(h, &k), "key %d", i);
	}
	ks_hot_free(h);
}

/* ---- store: basics ---- */

Test(store, put_then_get_returns_identical_bytes_and_meta)
{
	ks_store_t *s = open_store(0);

	put(s, 1, 12345);
	expect_same(s, 1, 12345);
	ks_store_close(s);
}

Test(store, empty_artifact_round_trips)
{
	ks_store_t *s = open_store(0);
	ks_hash_t k = key_of(3);
	ks_artifact_t *a = ks_artifact_new(&k, "", NULL, 0), *got = NULL;

	cr_assert_eq(ks_store_put(s, a), KS_OK);
	cr_assert_eq(ks_store_get(s, &k, &got), KS_OK);
	cr_assert_eq(got->len, 0);
	cr_assert_eq(got->meta_len, 0);
	cr_assert(ks_hash_eq(&got->sum, &a->sum));
	ks_artifact_unref(got);
	ks_artifact_unref(a);
	ks_store_close(s);
}

Test(store, get_of_an_absent_key_is_not_found)
{
	ks_store_t *s = open_store(0);

	cr_assert_eq(get_rc(s, 42), KS_E_NOT_FOUND);
	put(s, 1, 10);
	cr_assert_eq(get_rc(s, 42), KS_E_NOT_FOUND);
	ks_store_close(s);
}

Test(store, reopened_store_serves_the_same_artifact)
{
	ks_store_t *s = open_store(0);
	ks_store_stats_t st;

	put(s, 1, 5000);
	put(s, 2, 7000);
	ks_store_close(s);
	s = open_store(0);
	expect_same(s, 1, 5000);
	expect_same(s, 2, 7000);
	ks_store_stats(s, &st);
	cr_assert_eq(st.entries, 2);
	cr_assert_eq(st.bytes, 12000);
	ks_store_close(s);
}

/*
 * A reopen that fails (the file now at the path is writable by others:
 * the trust checks refuse it) leaves the store without a connection, not
 * broken: every call answers KS_E_IO and none crashes (sqlite's API on a
 * closed connection would; the walks' callbacks are NULL: none may be
 * called), and the next reopen, the file's mode repaired, serves what the
 * file holds again.
 */
Test(store, every_call_answers_an_error_after_a_failed_reopen)
{
	ks_store_t *s = open_store(0);
	ks_hash_t k = key_of(1), *removed = NULL;
	ks_artifact_t *a = make(2, 100), *got = NULL;
	ks_store_canary_t c = { "cpu", "gcc", "gemm", "passed", 0, 1.0, "" };
	ks_store_probe_t pr = { 0 };
	ks_store_audit_event_t ev = { 0 };
	const char *kern = "gemm", *be = "cpu";
	char err[512];
	size_t n, est;
	uint64_t bytes, total;
	int added;

	put(s, 1, 5000);
	ks_store_touch(s, &k);
	cr_assert_eq(chmod(db, 0666), 0);
	cr_assert_neq(ks_store_reopen(s, err, sizeof err), KS_OK,
	    "a store writable by others reopened");
	cr_assert_eq(ks_store_get(s, &k, &got), KS_E_IO);
	cr_assert_null(got);
	cr_assert_eq(ks_store_put(s, a), KS_E_IO);
	cr_assert_eq(ks_store_add(s, a, &added), KS_E_IO);
	cr_assert_eq(ks_store_quarantine(s, &k), KS_E_IO);
	cr_assert_eq(ks_store_flush(s), KS_E_IO);
	cr_assert_eq(ks_store_remove(s, &k), KS_E_IO);
	cr_assert_eq(ks_store_remove_if(s, NULL, 0, NULL, NULL, &removed, &n),
	    KS_E_IO);
	cr_assert_eq(ks_store_record_miss(s, NULL, "{}", 1), KS_E_IO);
	cr_assert_eq(ks_store_misses(s, NULL, NULL, NULL),
	    KS_E_IO);
	cr_assert_eq(ks_store_pinned(s, "d", &k), KS_E_IO);
	cr_assert_eq(ks_store_pin_bytes(s, "d", &k, &kern, &be, 1, &bytes,
	    &est), KS_E_IO);
	cr_assert_eq(ks_store_deploy_set(s, "d", "[]", &k, 1), KS_E_IO);
	cr_assert_eq(ks_store_deploy_remove(s, "d"), KS_E_IO);
	cr_assert_eq(ks_store_deployments(s, NULL, NULL, NULL),
	    KS_E_IO);
	cr_assert_eq(ks_store_identities(s, "cpu", NULL, NULL),
	    KS_E_IO);
	cr_assert_eq(ks_store_canary_put(s, &c), KS_E_IO);
	cr_assert_eq(ks_store_canaries(s, "cpu", "gcc", NULL, NULL), KS_E_IO);
	cr_assert_eq(ks_store_probe_get(s, &pr), KS_E_IO);
	cr_assert_eq(ks_store_probe_put(s, &pr), KS_E_IO);
	cr_assert_eq(ks_store_list(s, NULL, NULL), KS_E_IO);
	cr_assert_eq(ks_store_entries(s, NULL, 0, 10, NULL, NULL, &total), KS_E_IO);
	cr_assert_eq(ks_store_keys_with_prefix(s, "ab", &k, 1), KS_E_IO);
	cr_assert_eq(ks_store_audit_candidates(s, NULL, 0, 10,
	    NULL, NULL), KS_E_IO);
	cr_assert_eq(ks_store_audit_record(s, &ev), KS_E_IO);
	cr_assert_eq(ks_store_audit_events(s, 10, NULL, NULL),
	    KS_E_IO);
	cr_assert_eq(ks_store_integrity_check(s, err, sizeof err), KS_E_IO);
	cr_assert_eq(chmod(db, 0600), 0);
	cr_assert_eq(ks_store_reopen(s, err, sizeof err), KS_OK, "%s", err);
	expect_same(s, 1, 5000);
	cr_assert_eq(ks_store_flush(s), KS_OK);
	ks_artifact_unref(a);
	ks_store_close(s);
}

Test(store, put_of_a_known_key_replaces_the_row)
{
	ks_store_t *s = open_store(0);
	ks_store_stats_t st;

	put(s, 1, 5000);
	put(s, 1, 3000);
	expect_same(s, 1, 3000);
	ks_store_stats(s, &st);
	cr_assert_eq(st.entries, 1);
	cr_assert_eq(st.bytes, 3000);
	cr_assert_eq(raw_rows(), 1);
	ks_store_close(s);
}

/* An add leaves a stored row as it is and says whether it wrote it: of
 * eight adds of one key posted to the writer, exactly one did. */
Test(store, an_add_writes_a_new_key_only_and_says_so)
{
	ks_store_t *s = open_store(0);
	ks_store_writer_t *w = ks_writer_start(s);
	ks_artifact_t *a = make(1, 5000), *b = make(1, 3000);
	ks_store_stats_t st;
	int added = -1, results[8], i, n = 0;

	cr_assert_eq(ks_store_add(s, a, &added), KS_OK);
	cr_assert_eq(added, 1);
	cr_assert_eq(ks_store_add(s, b, &added), KS_OK);
	cr_assert_eq(added, 0);
	expect_same(s, 1, 5000);
	ks_artifact_unref(a);
	ks_artifact_unref(b);
	for (i = 0; i < 8; i++) {
		a = make(2, 100 + (size_t)i);
		cr_assert_eq(ks_writer_add(w, a, &results[i]), KS_OK);
		ks_artifact_unref(a);
	}
	ks_writer_sync(w);
	for (i = 0; i < 8; i++)
		n += results[i];
	cr_assert_eq(n, 1);
	cr_assert_eq(results[0], 1);
	expect_same(s, 2, 100);
	ks_store_stats(s, &st);
	cr_assert_eq(st.entries, 2);
	cr_assert_eq(st.bytes, 5100);
	ks_writer_stop(w);
	ks_store_close(s);
}

static void reopened(void *ctx, int rc, const char *err)
{
	(void)err;
	atomic_fetch_add((atomic_int *)ctx, rc == KS_OK ? 1 : 1000);
}

/* Stats read on one thread while the writer reopens the store on its
 * own: the schema version is the current one throughout (and, in make
 * tsan, read without a race). */
Test(store, stats_read_during_reopens_see_the_schema_version)
{
	ks_store_t *s = open_store(0);
	ks_store_writer_t *w;
	ks_store_stats_t st;
	atomic_int done = 0;
	int i;

	put(s, 1, 100);
	w = ks_writer_start(s);
	cr_assert_not_null(w);
	for (i = 0; i < 20; i++)
		cr_assert_eq(ks_writer_reopen(w, reopened, &done), KS_OK);
	while (atomic_load(&done) < 20) {
		ks_store_stats(s, &st);
		cr_assert_eq(st.schema_version, KS_STORE_SCHEMA_VERSION);
	}
	ks_writer_stop(w);
	cr_assert_eq(atomic_load(&done), 20, "a reopen failed");
	expect_same(s, 1, 100);
	ks_store_close(s);
}

static void reached_nothing(void *ctx)
{
	(void)ctx;
}

/* On the writer thread, ahead of the stop: waits until the stop is
 * posted behind it, then posts once more. */
static void post_after_the_stop(void *ctx)
{
	ks_store_writer_t *w = ctx;

	while (ks_writer_backlog(w) < 2)
		usleep(1000);
	usleep(100000);
	ks_writer_barrier(w, reached_nothing, NULL);
}

/* The writer's checker, shown on a planted bug: an operation posted once
 * the writer is stopping would never run; it aborts instead. */
Test(store, an_operation_posted_after_the_stop_aborts, .signal = SIGABRT)
{
	ks_store_t *s = open_store(0);
	ks_store_writer_t *w = ks_writer_start(s);

	cr_assert_not_null(w);
	cr_assert_eq(ks_writer_barrier(w, post_after_the_stop, w), KS_OK);
	ks_writer_stop(w);
	ks_store_close(s);
}

Test(store, remove_deletes_the_row)
{
	ks_store_t *s = open_store(0);
	ks_hash_t k = key_of(1);
	ks_store_stats_t st;

	put(s, 1, 100);
	put(s, 2, 200);
	cr_assert_eq(ks_store_remove(s, &k), KS_OK);
	cr_assert_eq(ks_store_remove(s, &k), KS_E_NOT_FOUND);
	cr_assert_eq(get_rc(s, 1), KS_E_NOT_FOUND);
	ks_store_stats(s, &st);
	cr_assert_eq(st.entries, 1);
	cr_assert_eq(st.bytes, 200);
	ks_store_close(s);
}

static int collect(void *ctx, const ks_hash_t *key, const char *meta,
    uint64_t size, int64_t last_used)
{
	int *n = ctx;
	ks_hash_t k = key_of(1);

	(void)last_used;
	if (ks_hash_eq(key, &k)) {
		cr_assert_eq(size, 111);
		cr_assert_str_eq(meta, "\"kernel\":\"k1\",\"n\":111");
	}
	(*n)++;
	return 0;
}

static int stop_at_first(void *ctx, const ks_hash_t *key, const char *meta,
    uint64_t size, int64_t last_used)
{
	(void)ctx;
	(void)key;
	(void)meta;
	(void)size;
	(void)last_used;
	return 7;
}

Test(store, list_walks_every_row_and_stops_when_asked)
{
	ks_store_t *s = open_store(0);
	int n = 0;

	put(s, 1, 111);
	put(s, 2, 222);
	put(s, 3, 333);
	cr_assert_eq(ks_store_list(s, collect, &n), 0);
	cr_assert_eq(n, 3);
	cr_assert_eq(ks_store_list(s, stop_at_first, NULL), 7);
	ks_store_close(s);
}

/* ---- store: checksums ---- */

Test(store, corrupt_blob_is_not_served_counted_and_removed)
{
	two_rows();
	raw_flip(1, "bytes", 1234);
	expect_damage_caught();
}

Test(store, truncated_blob_is_not_served)
{
	two_rows();
	raw_exec_key("UPDATE artifacts SET bytes = substr(bytes, 1, 3900) "
	    "WHERE key = ?1", 1);
	expect_damage_caught();
}

Test(store, truncated_blob_with_matching_size_is_not_served)
{
	/* size rewritten too: only the checksum can catch it. */
	two_rows();
	raw_exec_key("UPDATE artifacts SET bytes = substr(bytes, 1, 3000), "
	    "size = 3000 WHERE key = ?1", 1);
	expect_damage_caught();
}

Test(store, size_that_disagrees_with_the_bytes_is_not_served)
{
	/* Bytes and sum intact: only the size check can catch it. */
	two_rows();
	raw_exec_key("UPDATE artifacts SET size = 4001 WHERE key = ?1", 1);
	expect_damage_caught();
}

Test(store, corrupt_sum_is_not_served)
{
	two_rows();
	raw_flip(1, "sum", 0);
	expect_damage_caught();
}

Test(store, corrupt_meta_is_not_served)
{
	two_rows();
	raw_flip(1, "meta", 3);
	expect_damage_caught();
}

Test(store, corrupt_read_checksum_is_not_served)
{
	two_rows();
	raw_flip(1, "xsum", 15);
	expect_damage_caught();
}

Test(store, missing_read_checksum_is_not_served)
{
	two_rows();
	raw_exec_key("UPDATE artifacts SET xsum = NULL WHERE key = ?1", 1);
	expect_damage_caught();
}

Test(store, row_filed_under_another_key_is_not_served)
{
	ks_hash_t k3 = key_of(3);
	sqlite3_stmt *st;
	ks_store_t *s;
	sqlite3 *r;

	two_rows();
	/* Row 1, intact, moved to key 3: every checksum still matches its
	 * own column, but the read checksum covers the key. */
	r = raw_open();
	cr_assert_eq(sqlite3_prepare_v2(r, "UPDATE artifacts SET key = ?2 "
	    "WHERE key = ?1", -1, &st, NULL), SQLITE_OK);
	{
		ks_hash_t k1 = key_of(1);

		sqlite3_bind_blob(st, 1, k1.b, KS_HASH_BYTES, SQLITE_STATIC);
		sqlite3_bind_blob(st, 2, k3.b, KS_HASH_BYTES, SQLITE_STATIC);
		cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
	}
	sqlite3_finalize(st);
	sqlite3_close(r);
	s = open_store(0);
	cr_assert_eq(get_rc(s, 3), KS_E_CORRUPT);
	cr_assert_eq(get_rc(s, 3), KS_E_NOT_FOUND, "not removed");
	expect_same(s, 2, 4000);
	ks_store_close(s);
}

/* A store of schema version 2 (no xsum) holding rows 1..3, row 2 with a
 * flipped byte. */
static void version_2_store(void)
{
	ks_store_t *s = open_store(0);
	int i;

	for (i = 1; i <= 3; i++)
		put(s, i, 3000 + (size_t)i);
	ks_store_close(s);
	/* The v2 schema, column for column. */
	raw_exec("CREATE TABLE v2 ("
	    "  key BLOB PRIMARY KEY NOT NULL, sum BLOB NOT NULL,"
	    "  row_sum BLOB NOT NULL, size INTEGER NOT NULL,"
	    "  created INTEGER NOT NULL, last_used INTEGER NOT NULL,"
	    "  meta TEXT NOT NULL, bytes BLOB NOT NULL);"
	    "INSERT INTO v2 SELECT a.key, a.sum, a.row_sum, a.size, a.created,"
	    "  u.last_used, a.meta, a.bytes FROM artifacts a JOIN uses u"
	    "  ON u.key = a.key;"
	    "DROP TABLE artifacts; DROP TABLE uses;"
	    "DROP TABLE deployments; DROP TABLE pins; DROP TABLE late;"
	    "DROP TABLE audits; DROP TABLE audit_events; DROP TABLE canaries;"
	    "DROP TABLE probe;"
	    "ALTER TABLE v2 RENAME TO artifacts;"
	    "CREATE INDEX artifacts_by_last_used ON artifacts(last_used);"
	    "PRAGMA user_version = 2;");
	raw_flip(2, "bytes", 100);
}

Test(store, version_2_store_is_migrated_and_its_rows_checked_on_the_way)
{
	ks_store_t *s;
	ks_store_stats_t st;

	version_2_store();
	s = open_store(0);
	ks_store_stats(s, &st);
	cr_assert_eq(st.schema_version, KS_STORE_SCHEMA_VERSION);
	/* The rotten row was found by the old checks and removed, not
	 * given a checksum of its rotten bytes. */
	cr_assert_eq(st.entries, 2);
	cr_assert_eq(ks_store_corrupt_total(s), 1);
	cr_assert_eq(get_rc(s, 2), KS_E_NOT_FOUND);
	expect_same(s, 1, 3001);
	expect_same(s, 3, 3003);
	ks_store_close(s);
	cr_assert_eq(raw_int("PRAGMA user_version", -1),
	    KS_STORE_SCHEMA_VERSION);
	cr_assert_eq(raw_int("SELECT COUNT(*) FROM artifacts WHERE "
	    "length(xsum) = 16", -1), 2);
	/* On to v4 in the same open: the entry columns too. */
	cr_assert_eq(raw_int("SELECT COUNT(*) FROM artifacts WHERE "
	    "kernel = 'k3' AND key = ?1", 3), 1);
	/* The uses came along, and only those of the rows kept. */
	cr_assert_eq(raw_int("SELECT COUNT(*) FROM uses", -1), 2);
	cr_assert_gt(raw_last_used(3), raw_last_used(1));
	/* And the read check now guards the migrated rows. */
	raw_flip(3, "bytes", 7);
	s = open_store(0);
	cr_assert_eq(get_rc(s, 3), KS_E_CORRUPT);
	ks_store_close(s);
}

/* The meta of a real gemm entry, as server/lookup.c writes it: constant
 * dims in the guard, one dynamic. */
static const char gemm_meta[] = "\"key\":\"00\",\"artifact\":\"00\","
    "\"kernel\":\"gemm\",\"variant\":\"general\",\"backend\":\"cpu\","
    "\"target\":\"x86-64-v4\",\"dtype\":\"bf16\",\"mode\":\"exact\","
    "\"format\":\"so\",\"entry\":\"ks_gemm_general\",\"bytes\":300,"
    "\"guard\":{\"N\":4096,\"K\":4096},\"dynamic\":[\"M\"],"
    "\"params\":[],\"launch\":{\"groups\":\"M\",\"lanes\":1},"
    "\"compile_ms\":1.500,\"compiler\":\"libgccjit 12.2.0; -O3\"";

/* Puts artifact I with META and LEN bytes of make()'s pattern. */
static void put_meta(ks_store_t *s, int i, const char *meta, size_t len)
{
	ks_artifact_t *a = make(i, len), *b;

	b = ks_artifact_new(&a->key, meta, a->bytes, a->len);
	cr_assert_not_null(b);
	cr_assert_eq(ks_store_put(s, b), KS_OK);
	ks_artifact_unref(a);
	ks_artifact_unref(b);
}

typedef struct {
	ks_store_entry_t e[8];
	char text[8][9][128];
	int n;
} entries_t;

/* Keeps a copy of every entry it is given. */
static int keep_entry(void *ctx, const ks_store_entry_t *e)
{
	entries_t *es = ctx;
	const char **f[9];
	int i;

	cr_assert_lt(es->n, 8);
	es->e[es->n] = *e;
	f[0] = &es->e[es->n].kernel;
	f[1] = &es->e[es->n].variant;
	f[2] = &es->e[es->n].backend;
	f[3] = &es->e[es->n].target;
	f[4] = &es->e[es->n].dtype;
	f[5] = &es->e[es->n].mode;
	f[6] = &es->e[es->n].format;
	f[7] = &es->e[es->n].shape;
	f[8] = &es->e[es->n].compiler;
	for (i = 0; i < 9; i++) {
		snprintf(es->text[es->n][i], sizeof es->text[0][0], "%s", *f[i]);
		*f[i] = es->text[es->n][i];
	}
	es->n++;
	return 0;
}

/* The entry of key I among ES, or NULL. */
static const ks_store_entry_t *entry_of(const entries_t *es, int i)
{
	ks_hash_t k = key_of(i);
	int j;

	for (j = 0; j < es->n; j++)
		if (ks_hash_eq(&es->e[j].key, &k))
			return &es->e[j];
	return NULL;
}

static void expect_gemm_entry(const ks_store_entry_t *e, size_t len)
{
	cr_assert_not_null(e);
	cr_assert_str_eq(e->kernel, "gemm");
	cr_assert_str_eq(e->variant, "general");
	cr_assert_str_eq(e->backend, "cpu");
	cr_assert_str_eq(e->target, "x86-64-v4");
	cr_assert_str_eq(e->dtype, "bf16");
	cr_assert_str_eq(e->mode, "exact");
	cr_assert_str_eq(e->format, "so");
	cr_assert_str_eq(e->shape, "N=4096,K=4096,M=dyn");
	cr_assert_str_eq(e->compiler, "libgccjit 12.2.0; -O3");
	cr_assert_eq(e->size, len);
}

/*
 * A store of schema version 3 (no entry columns): row 1 a gemm entry,
 * row 2 make()'s meta (a kernel and nothing else), row 3 a meta that is
 * not JSON.  Made the way the daemon's v3 made it: the rows of today's
 * puts, in the v3 table, column for column.
 */
static void version_3_store(void)
{
	ks_store_t *s = open_store(0);

	put_meta(s, 1, gemm_meta, 300);
	put(s, 2, 200);
	put_meta(s, 3, "not json {", 100);
	ks_store_close(s);
	raw_exec("CREATE TABLE v3 ("
	    "  key BLOB PRIMARY KEY NOT NULL, sum BLOB NOT NULL,"
	    "  row_sum BLOB NOT NULL, size INTEGER NOT NULL,"
	    "  created INTEGER NOT NULL, meta TEXT NOT NULL,"
	    "  bytes BLOB NOT NULL, xsum BLOB);"
	    "INSERT INTO v3 SELECT key, sum, row_sum, size, created, meta,"
	    "  bytes, xsum FROM artifacts;"
	    "DROP TABLE artifacts;"
	    "DROP TABLE deployments; DROP TABLE pins; DROP TABLE late;"
	    "DROP TABLE audits; DROP TABLE audit_events; DROP TABLE canaries;"
	    "DROP TABLE probe;"
	    "ALTER TABLE v3 RENAME TO artifacts;"
	    "UPDATE artifacts SET created = 1234;"
	    "PRAGMA user_version = 3;");
	cr_assert_eq(raw_int("SELECT COUNT(*) FROM pragma_table_info("
	    "'artifacts') WHERE name = 'kernel'", -1), 0, "not a v3 table");
}

Test(store, version_3_store_gets_its_entry_columns_from_each_meta)
{
	entries_t es = { .n = 0 };
	const ks_store_entry_t *e;
	ks_store_stats_t st;
	ks_artifact_t *a = NULL;
	ks_hash_t k = key_of(1);
	uint64_t total = 0;
	int64_t used;
	ks_store_t *s;
	int i;

	version_3_store();
	used = raw_last_used(1);
	s = open_store(0);
	ks_store_stats(s, &st);
	cr_assert_eq(st.schema_version, KS_STORE_SCHEMA_VERSION);
	cr_assert_eq(st.entries, 3);
	cr_assert_eq(ks_store_entries(s, NULL, 0, 0, keep_entry, &es, &total),
	    0);
	cr_assert_eq(total, 3);
	cr_assert_eq(es.n, 3);
	e = entry_of(&es, 1);
	expect_gemm_entry(e, 300);
	cr_assert_eq(e->created, 1234, "the row was not copied as it was");
	cr_assert_eq(e->last_used, used);
	e = entry_of(&es, 2);
	cr_assert_not_null(e);
	cr_assert_str_eq(e->kernel, "k2");
	cr_assert_str_eq(e->shape, "");
	cr_assert_str_eq(e->compiler, "");
	/* A meta that says nothing is described by nothing, and kept. */
	e = entry_of(&es, 3);
	cr_assert_not_null(e);
	cr_assert_str_eq(e->kernel, "");
	/* Every row is still served as it was, its checks intact. */
	cr_assert_eq(ks_store_get(s, &k, &a), KS_OK);
	cr_assert_str_eq(a->meta, gemm_meta);
	ks_artifact_unref(a);
	expect_same(s, 2, 200);
	cr_assert_eq(get_rc(s, 3), KS_OK);
	ks_store_close(s);
	cr_assert_eq(raw_int("PRAGMA user_version", -1),
	    KS_STORE_SCHEMA_VERSION);
	/* The columns stand before meta and the blob, where a listing reads
	 * them without walking a row's overflow pages. */
	for (i = 0; i < 2; i++)
		cr_assert_lt(raw_int(i ? "SELECT cid FROM pragma_table_info("
		    "'artifacts') WHERE name = 'compiler'" : "SELECT cid FROM "
		    "pragma_table_info('artifacts') WHERE name = 'kernel'", -1),
		    raw_int("SELECT cid FROM pragma_table_info('artifacts') "
		    "WHERE name = 'meta'", -1));
	cr_assert_eq(raw_int("SELECT COUNT(*) FROM sqlite_schema WHERE name = "
	    "'artifacts_v4'", -1), 0);
	raw_flip(1, "bytes", 5);
	s = open_store(0);
	cr_assert_eq(get_rc(s, 1), KS_E_CORRUPT);
	ks_store_close(s);
}

/* Stop the walk at the first entry, with this value. */
static int stop_entries(void *ctx, const ks_store_entry_t *e)
{
	(void)ctx;
	(void)e;
	return 9;
}

Test(store, a_put_writes_the_entry_columns_and_entries_filter_and_page)
{
	entries_t es = { .n = 0 };
	ks_store_filter_t cpu = { NULL, "cpu", "" }, none = { "nope", NULL,
	    NULL };
	char cuda[sizeof gemm_meta + 16];
	uint64_t total = 0;
	ks_store_t *s = open_store(0);
	const char *p = strstr(gemm_meta, "\"cpu\"");
	int i;

	/* gemm_meta with backend cuda. */
	snprintf(cuda, sizeof cuda, "%.*s\"cuda\"%s", (int)(p - gemm_meta),
	    gemm_meta, p + 5);
	for (i = 1; i <= 4; i++)
		put_meta(s, i, i == 3 ? cuda : gemm_meta, 300);
	cr_assert_eq(ks_store_entries(s, &cpu, 0, 0, keep_entry, &es, &total),
	    0);
	cr_assert_eq(total, 3);
	cr_assert_eq(es.n, 3);
	cr_assert_null(entry_of(&es, 3));
	expect_gemm_entry(entry_of(&es, 4), 300);
	cr_assert_gt(entry_of(&es, 4)->created, 0);
	/* A page: the second and third of the four, in key order; the total
	 * is all of them. */
	es.n = 0;
	cr_assert_eq(ks_store_entries(s, NULL, 1, 2, keep_entry, &es, &total),
	    0);
	cr_assert_eq(total, 4);
	cr_assert_eq(es.n, 2);
	cr_assert_lt(memcmp(es.e[0].key.b, es.e[1].key.b, KS_HASH_BYTES), 0);
	es.n = 0;
	cr_assert_eq(ks_store_entries(s, &none, 0, 0, keep_entry, &es,
	    &total), 0);
	cr_assert_eq(total, 0);
	cr_assert_eq(es.n, 0);
	cr_assert_eq(ks_store_entries(s, NULL, 0, 0, stop_entries, NULL,
	    &total), 9);
	/* A replacing put rewrites them too. */
	put_meta(s, 3, gemm_meta, 300);
	es.n = 0;
	cr_assert_eq(ks_store_entries(s, &cpu, 0, 0, keep_entry, &es, &total),
	    0);
	cr_assert_eq(total, 4);
	ks_store_close(s);
}

Test(store, a_key_that_is_not_ours_is_dropped_by_the_migration)
{
	ks_store_t *s;

	version_2_store();
	raw_exec("INSERT INTO artifacts (key, sum, row_sum, size, created, "
	    "last_used, meta, bytes) VALUES ('text key', x'00', x'00', 1, 0, "
	    "0, '', x'00')");
	s = open_store(0);
	cr_assert_eq(ks_store_corrupt_total(s), 2);
	expect_same(s, 1, 3001);
	ks_store_close(s);
	cr_assert_eq(raw_int("SELECT COUNT(*) FROM artifacts", -1), 2);
}

Test(store, uses_rows_are_mended_at_open)
{
	ks_store_t *s;

	two_rows();
	/* An outside writer drops row 1's use and leaves one of no row. */
	raw_exec_key("DELETE FROM uses WHERE key = ?1", 1);
	raw_exec_key("INSERT INTO uses (key, last_used) VALUES (?1, 5)", 9);
	s = open_store(0);
	ks_store_close(s);
	cr_assert_eq(raw_int("SELECT COUNT(*) FROM uses", -1), 2);
	cr_assert_eq(raw_last_used(1), 0, "row 1 has its use again, oldest");
	cr_assert_eq(raw_int("SELECT COUNT(*) FROM uses WHERE key = ?1", 9),
	    0);
	/* So it is evicted first: a third row over a budget of two. */
	s = open_store(8000);
	put(s, 3, 4000);
	cr_assert_eq(get_rc(s, 1), KS_E_NOT_FOUND);
	expect_same(s, 2, 4000);
	ks_store_close(s);
}

Test(store, corrupt_count_persists_across_reopen)
{
	ks_store_t *s = open_store(0);
	ks_store_stats_t st;

	put(s, 1, 4000);
	ks_store_close(s);
	raw_flip(1, "bytes", 0);
	s = open_store(0);
	cr_assert_eq(get_rc(s, 1), KS_E_CORRUPT);
	ks_store_close(s);
	s = open_store(0);
	ks_store_stats(s, &st);
	cr_assert_eq(st.corrupt, 0, "corrupt counts since open");
	cr_assert_eq(ks_store_corrupt_total(s), 1);
	ks_store_close(s);
}

/* ---- store: schema and opening ---- */

Test(store, fresh_store_gets_the_current_schema_version)
{
	ks_store_t *s = open_store(0);
	ks_store_stats_t st;

	ks_store_stats(s, &st);
	cr_assert_eq(st.schema_version, KS_STORE_SCHEMA_VERSION);
	ks_store_close(s);
	cr_assert_eq(raw_int("PRAGMA user_version", -1),
	    KS_STORE_SCHEMA_VERSION);
	cr_assert_eq(raw_int("SELECT COUNT(*) FROM sqlite_schema WHERE "
	    "name = 'uses_by_last_used'", -1), 1);
}

/* A newer kspec's store is content this build cannot read: KS_E_CORRUPT,
 * for the daemon to set aside, and not changed in any way. */
Test(store, store_with_a_newer_schema_is_refused_unchanged)
{
	ks_store_t *s = NULL;
	char err[512], mode[16];
	int rc;

	raw_exec("PRAGMA user_version = 99");
	rc = ks_store_open(db, 0, &s, err, sizeof err);
	cr_assert_eq(rc, KS_E_CORRUPT);
	cr_assert_null(s);
	cr_assert_not_null(strstr(err, "newer"), "%s", err);
	cr_assert_not_null(strstr(err, db), "%s", err);
	cr_assert_eq(raw_int("PRAGMA user_version", -1), 99,
	    "a refused store must not be changed");
	raw_journal_mode(mode);
	cr_assert_str_eq(mode, "delete", "the refused store was switched "
	    "to WAL");
}

Test(store, empty_file_is_migrated_from_version_0)
{
	ks_store_t *s;

	write_file(db, "", 0);
	s = open_store(0);
	put(s, 1, 100);
	expect_same(s, 1, 100);
	ks_store_close(s);
	cr_assert_eq(raw_int("PRAGMA user_version", -1),
	    KS_STORE_SCHEMA_VERSION);
}

Test(store, version_0_database_with_other_tables_is_migrated)
{
	ks_store_t *s;

	raw_exec("CREATE TABLE unrelated(x); INSERT INTO unrelated VALUES(1)");
	cr_assert_eq(raw_int("PRAGMA user_version", -1), 0);
	s = open_store(0);
	put(s, 1, 100);
	expect_same(s, 1, 100);
	ks_store_close(s);
	cr_assert_eq(raw_int("SELECT x FROM unrelated", -1), 1);
}

Test(store, file_that_is_not_a_database_is_refused_with_the_path)
{
	static const char junk[] = "this is not an sqlite database, just text "
	    "that is long enough to fill a header .........................";
	ks_store_t *s = NULL;
	char err[512];

	write_file(db, junk, sizeof junk);
	cr_assert_eq(ks_store_open(db, 0, &s, err, sizeof err), KS_E_CORRUPT);
	cr_assert_null(s);
	cr_assert_not_null(strstr(err, "not a database"), "%s", err);
	cr_assert_not_null(strstr(err, db), "%s", err);
}

Test(store, path_that_cannot_be_opened_fails_clearly)
{
	char file[600], bad[700], err[1024];
	ks_store_t *s = NULL;
	int rc;

	/* A regular file where a parent directory should be. */
	snprintf(file, sizeof file, "%s/file", dir);
	write_file(file, "x", 1);
	snprintf(bad, sizeof bad, "%s/store.db", file);
	rc = ks_store_open(bad, 0, &s, err, sizeof err);
	cr_assert_eq(rc, KS_E_IO, "%s", ks_err_name(rc));
	cr_assert_null(s);
	cr_assert_not_null(strstr(err, bad), "%s", err);
	snprintf(bad, sizeof bad, "%s/sub/store.db", file);
	rc = ks_store_open(bad, 0, &s, err, sizeof err);
	cr_assert_eq(rc, KS_E_IO, "%s", ks_err_name(rc));
	cr_assert_not_null(strstr(err, bad), "%s", err);

	/* A directory where the file should be. */
	rc = ks_store_open(dir, 0, &s, err, sizeof err);
	cr_assert_eq(rc, KS_E_STORE);
	cr_assert_not_null(strstr(err, dir), "%s", err);
}

Test(store, missing_parent_directories_are_created_0700)
{
	char deep[700], parent[600], err[1024];
	ks_store_t *s = NULL;
	struct stat st;

	snprintf(parent, sizeof parent, "%s/a/b", dir);
	snprintf(deep, sizeof deep, "%s/store.db", parent);
	cr_assert_eq(ks_store_open(deep, 0, &s, err, sizeof err), KS_OK,
	    "%s", err);
	ks_store_close(s);
	cr_assert_eq(stat(parent, &st), 0);
	cr_assert(S_ISDIR(st.st_mode));
	cr_assert_eq(st.st_mode & 0777, 0700);
	cr_assert_eq(stat(deep, &st), 0);
}

/* Opens the store as it stands and exits 0 if it is refused as read-only. */
static int refused_as_read_only(void)
{
	ks_store_t *s = NULL;
	char err[1024];
	int rc = ks_store_open(db, 0, &s, err, sizeof err);

	if (rc == KS_OK)
		ks_store_close(s);
	return rc == KS_E_STORE && strstr(err, "read-only") != NULL ? 0 : 1;
}

Test(store, read_only_file_is_refused)
{
	ks_store_t *s = open_store(0);
	pid_t pid;
	int status;

	ks_store_close(s);
	cr_assert_eq(chmod(db, 0444), 0);
	if (geteuid() != 0) {
		cr_assert_eq(refused_as_read_only(), 0);
		return;
	}
	/* root ignores file modes: try as nobody, in a child. */
	cr_assert_eq(chmod(dir, 0755), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		if (setgid(65534) != 0 || setuid(65534) != 0)
			_exit(2);
		_exit(refused_as_read_only());
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status));
	cr_assert_eq(WEXITSTATUS(status), 0, "a read-only store was opened "
	    "(status %d)", WEXITSTATUS(status));
}

Test(store, store_is_in_wal_mode)
{
	ks_store_t *s = open_store(0);
	char mode[16];

	raw_journal_mode(mode);
	cr_assert_str_eq(mode, "wal");
	ks_store_close(s);
}

/* ---- store: budget, eviction and touches ---- */

Test(store, byte_budget_evicts_the_least_recently_used_row)
{
	ks_store_t *s = open_store(3000);
	ks_store_stats_t st;

	put(s, 1, 1000);
	put(s, 2, 1000);
	put(s, 3, 1000);
	put(s, 4, 1000);
	cr_assert_eq(get_rc(s, 1), KS_E_NOT_FOUND);
	cr_assert_eq(get_rc(s, 2), KS_OK);
	cr_assert_eq(get_rc(s, 3), KS_OK);
	cr_assert_eq(get_rc(s, 4), KS_OK);
	ks_store_stats(s, &st);
	cr_assert_eq(st.evicted, 1);
	cr_assert_eq(st.entries, 3);
	cr_assert_eq(st.bytes, 3000);
	cr_assert_eq(st.max_bytes, 3000);
	put(s, 5, 2500);                /* needs two rows to go */
	cr_assert_eq(get_rc(s, 2), KS_E_NOT_FOUND);
	cr_assert_eq(get_rc(s, 3), KS_E_NOT_FOUND);
	cr_assert_eq(get_rc(s, 4), KS_E_NOT_FOUND);
	cr_assert_eq(get_rc(s, 5), KS_OK);
	ks_store_stats(s, &st);
	cr_assert_eq(st.evicted, 4);
	cr_assert_leq(st.bytes, 3000);
	ks_store_close(s);
}

Test(store, touch_and_flush_change_which_row_is_evicted)
{
	ks_store_t *s = open_store(3000);
	ks_hash_t k1 = key_of(1);

	put(s, 1, 1000);
	put(s, 2, 1000);
	put(s, 3, 1000);
	ks_store_touch(s, &k1);
	cr_assert_eq(ks_store_flush(s), KS_OK);
	put(s, 4, 1000);
	cr_assert_eq(get_rc(s, 1), KS_OK, "the touched row was evicted");
	cr_assert_eq(get_rc(s, 2), KS_E_NOT_FOUND);
	ks_store_close(s);
}

Test(store, put_that_evicts_writes_pending_touches_first)
{
	ks_store_t *s = open_store(3000);
	ks_hash_t k1 = key_of(1);

	put(s, 1, 1000);
	put(s, 2, 1000);
	put(s, 3, 1000);
	ks_store_touch(s, &k1);         /* no explicit flush */
	put(s, 4, 1000);
	cr_assert_eq(get_rc(s, 1), KS_OK);
	cr_assert_eq(get_rc(s, 2), KS_E_NOT_FOUND);
	ks_store_close(s);
}

Test(store, touch_does_not_write_until_flush)
{
	ks_store_t *s = open_store(0);
	ks_hash_t k = key_of(1);
	int64_t before;

	put(s, 1, 100);
	before = raw_last_used(1);
	cr_assert_gt(before, 0);
	ks_store_touch(s, &k);
	ks_store_touch(s, &k);
	cr_assert_eq(raw_last_used(1), before, "touch wrote to disk");
	cr_assert_eq(ks_store_flush(s), KS_OK);
	cr_assert_gt(raw_last_used(1), before);
	ks_store_close(s);
}

Test(store, close_writes_pending_touches)
{
	ks_store_t *s = open_store(0);
	ks_hash_t k = key_of(1);
	int64_t before;

	put(s, 1, 100);
	before = raw_last_used(1);
	ks_store_touch(s, &k);
	ks_store_close(s);
	cr_assert_gt(raw_last_used(1), before);
}

Test(store, touch_reports_a_full_pending_set_and_never_writes_itself)
{
	ks_store_t *s = open_store(0);
	int64_t before;
	ks_hash_t k;
	int i, full = 0;

	put(s, 0, 10);
	before = raw_last_used(0);
	k = key_of(0);
	cr_assert_eq(ks_store_touch(s, &k), 0);
	/* Repeated touches of one key take one slot. */
	for (i = 0; i < 3 * KS_STORE_PENDING_TOUCHES; i++)
		cr_assert_eq(ks_store_touch(s, &k), 0);
	/* Distinct keys (absent rows are fine) fill the set; the touch that
	 * fills it says so, and nothing is written until a flush. */
	for (i = 1; i < KS_STORE_PENDING_TOUCHES; i++) {
		k = key_of(1000 + i);
		full = ks_store_touch(s, &k);
	}
	cr_assert_eq(full, 1, "the touch that filled the set did not say so");
	cr_assert_eq(raw_last_used(0), before);
	/* A touch of a new key now is dropped and counted. */
	k = key_of(5000);
	cr_assert_eq(ks_store_touch(s, &k), 1);
	cr_assert_eq(ks_store_touches_dropped(s), 1);
	cr_assert_eq(ks_store_flush(s), KS_OK);
	cr_assert_gt(raw_last_used(0), before, "the flush wrote nothing");
	k = key_of(0);
	cr_assert_eq(ks_store_touch(s, &k), 0, "the flush left the set full");
	ks_store_close(s);
}

Test(store, artifact_alone_over_the_budget_is_kept)
{
	ks_store_t *s = open_store(500);
	ks_store_stats_t st;

	put(s, 1, 100);
	put(s, 2, 1000);
	cr_assert_eq(get_rc(s, 1), KS_E_NOT_FOUND);
	expect_same(s, 2, 1000);
	put(s, 3, 100);                 /* now 2 is old and goes */
	cr_assert_eq(get_rc(s, 2), KS_E_NOT_FOUND);
	cr_assert_eq(get_rc(s, 3), KS_OK);
	ks_store_stats(s, &st);
	cr_assert_eq(st.bytes, 100);
	cr_assert_eq(st.evicted, 2);
	ks_store_close(s);
}

Test(store, budget_applies_to_rows_found_at_open)
{
	ks_store_t *s = open_store(0);

	put(s, 1, 1000);
	put(s, 2, 1000);
	put(s, 3, 1000);
	ks_store_close(s);
	s = open_store(2500);
	put(s, 4, 1000);
	cr_assert_eq(get_rc(s, 1), KS_E_NOT_FOUND);
	cr_assert_eq(get_rc(s, 2), KS_E_NOT_FOUND);
	cr_assert_eq(get_rc(s, 3), KS_OK);
	cr_assert_eq(get_rc(s, 4), KS_OK);
	ks_store_close(s);
}

/* ---- store: concurrency and crashes ---- */

#define PUTTERS 4
#define PER_PUTTER 60

struct shared {
	ks_store_t *s;
	int base;
	atomic_int putters_left;
	atomic_int put_errors, get_errors, gets_ok;
};

struct putter {
	struct shared *sh;
	int base;
};

static void *put_loop(void *p)
{
	struct putter *pt = p;
	int i;

	for (i = 0; i < PER_PUTTER; i++) {
		ks_artifact_t *a = make(pt->base + i, 1000 + 37 * i);

		if (ks_store_put(pt->sh->s, a) != KS_OK)
			atomic_fetch_add(&pt->sh->put_errors, 1);
		ks_artifact_unref(a);
	}
	atomic_fetch_sub(&pt->sh->putters_left, 1);
	return NULL;
}

static void *get_loop(void *p)
{
	struct shared *sh = p;
	unsigned seed = 1;

	while (atomic_load(&sh->putters_left) > 0) {
		int i = (int)(rand_r(&seed) % (PUTTERS * 1000));
		int j = (i / 1000) * 1000 + i % PER_PUTTER;
		ks_hash_t k = key_of(j);
		ks_artifact_t *a = NULL;
		int rc = ks_store_get(sh->s, &k, &a);

		if (rc == KS_OK) {
			atomic_fetch_add(&sh->gets_ok, 1);
			ks_store_touch(sh->s, &k);
			ks_artifact_unref(a);
		} else if (rc != KS_E_NOT_FOUND) {
			atomic_fetch_add(&sh->get_errors, 1);
		}
	}
	return NULL;
}

Test(store, concurrent_puts_and_gets_are_safe)
{
	struct shared sh = { .s = open_store(0) };
	struct putter pt[PUTTERS];
	pthread_t t[PUTTERS + 1];
	ks_store_stats_t st;
	int i, j;

	atomic_store(&sh.putters_left, PUTTERS);
	pthread_create(&t[PUTTERS], NULL, get_loop, &sh);
	for (i = 0; i < PUTTERS; i++) {
		pt[i].sh = &sh;
		pt[i].base = i * 1000;
		pthread_create(&t[i], NULL, put_loop, &pt[i]);
	}
	for (i = 0; i <= PUTTERS; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(atomic_load(&sh.put_errors), 0);
	cr_assert_eq(atomic_load(&sh.get_errors), 0);
	cr_assert_eq(ks_store_flush(sh.s), KS_OK);
	for (i = 0; i < PUTTERS; i++)
		for (j = 0; j < PER_PUTTER; j++)
			expect_same(sh.s, i * 1000 + j, 1000 + 37 * j);
	ks_store_stats(sh.s, &st);
	cr_assert_eq(st.entries, PUTTERS * PER_PUTTER);
	ks_store_close(sh.s);
}

struct keys {
	ks_hash_t *k;
	size_t n, cap;
};

static int add_key(void *ctx, const ks_hash_t *key, const char *meta,
    uint64_t size, int64_t last_used)
{
	struct keys *ks = ctx;

	(void)meta;
	(void)size;
	(void)last_used;
	if (ks->n == ks->cap) {
		ks->cap = ks->cap ? 2 * ks->cap : 64;
		ks->k = realloc(ks->k, ks->cap * sizeof *ks->k);
		if (ks->k == NULL)
			return KS_E_NOMEM;
	}
	ks->k[ks->n++] = *key;
	return 0;
}

/* Child: puts artifacts of varied sizes until killed (bounded loop). */
static void writer_child(int ready, int round)
{
	char err[512];
	ks_store_t *s;
	int i;

	if (ks_store_open(db, 0, &s, err, sizeof err) != KS_OK)
		_exit(2);
	for (i = 0; i < 100000; i++) {
		ks_artifact_t *a = make(round * 1000000 + i,
		    (size_t)(100 + (i * 7919) % 60000));

		if (a == NULL || ks_store_put(s, a) != KS_OK)
			_exit(3);
		ks_artifact_unref(a);
		if (i == 10 && write(ready, "r", 1) != 1)
			_exit(4);
	}
	_exit(0);
}

Test(store, killed_writer_leaves_a_sound_store)
{
	struct keys ks = { 0 };
	char err[512], c;
	ks_store_t *s;
	size_t i;
	int round, status;

	for (round = 0; round < 4; round++) {
		int fd[2];
		pid_t pid;

		cr_assert_eq(pipe(fd), 0);
		pid = fork();
		cr_assert_geq(pid, 0);
		if (pid == 0) {
			close(fd[0]);
			writer_child(fd[1], round);
		}
		close(fd[1]);
		cr_assert_eq(read(fd[0], &c, 1), 1, "writer did not start");
		close(fd[0]);
		usleep(20000 + 30000 * (useconds_t)round);
		kill(pid, SIGKILL);
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		    "writer ended before it was killed (status %d)", status);
	}

	s = open_store(0);
	cr_assert_eq(ks_store_integrity_check(s, err, sizeof err), KS_OK,
	    "%s", err);
	cr_assert_str_eq(err, "ok");
	cr_assert_eq(ks_store_list(s, add_key, &ks), 0);
	cr_assert_geq(ks.n, 4 * 11);
	cr_log_info("%zu rows survived 4 killed writers", ks.n);
	for (i = 0; i < ks.n; i++) {
		ks_artifact_t *a = NULL;

		cr_assert_eq(ks_store_get(s, &ks.k[i], &a), KS_OK,
		    "row %zu of %zu", i, ks.n);
		ks_artifact_unref(a);
	}
	free(ks.k);
	ks_store_close(s);
}

Test(store, integrity_check_reports_damaged_pages)
{
	ks_store_t *s = open_store(0);
	char err[512];
	int64_t page, psize;
	uint8_t bad[4] = { 0x7f, 0xff, 0xff, 0xff };
	int fd, rc;

	put(s, 1, 20000);               /* a chain of overflow pages */
	put(s, 2, 100);
	cr_assert_eq(ks_store_integrity_check(s, err, sizeof err), KS_OK,
	    "%s", err);
	ks_store_close(s);              /* checkpointed into the main file */

	page = raw_int("SELECT pageno FROM dbstat WHERE name = 'artifacts' "
	    "AND pagetype = 'overflow' ORDER BY pageno LIMIT 1", -1);
	psize = raw_int("PRAGMA page_size", -1);
	cr_assert_gt(page, 0);
	/* An overflow page begins with the number of the next one. */
	fd = open(db, O_WRONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, bad, sizeof bad, (off_t)((page - 1) * psize)),
	    (ssize_t)sizeof bad);
	close(fd);

	rc = ks_store_open(db, 0, &s, err, sizeof err);
	if (rc != KS_OK) {
		cr_assert_not_null(strstr(err, db), "%s", err);
		return;
	}
	rc = ks_store_integrity_check(s, err, sizeof err);
	cr_assert_eq(rc, KS_E_CORRUPT, "damage not reported: %s", err);
	cr_assert_str_neq(err, "ok");
	cr_assert_neq(get_rc(s, 1), KS_OK, "a damaged row was served");
	expect_same(s, 2, 100);
	ks_store_close(s);
}

typedef struct {
	char specs[4][64];
	uint64_t counts[4];
	int n;
} misses_t;

static int collect_miss(void *ctx, const char *spec, int64_t first,
    int64_t last, uint64_t count)
{
	misses_t *m = ctx;

	cr_assert_leq(first, last);
	if (m->n < 4) {
		snprintf(m->specs[m->n], sizeof m->specs[0], "%s", spec);
		m->counts[m->n] = count;
	}
	m->n++;
	return 0;
}

Test(store, misses_are_counted_per_distinct_spec_and_survive_reopen)
{
	ks_store_t *s = open_store(0);
	misses_t m;

	cr_assert_eq(ks_store_record_miss(s, NULL, "{\"a\":1}", 1), KS_OK);
	cr_assert_eq(ks_store_record_miss(s, NULL, "{\"b\":2}", 3), KS_OK);
	cr_assert_eq(ks_store_record_miss(s, NULL, "{\"a\":1}", 2), KS_OK);
	ks_store_close(s);
	s = open_store(0);
	memset(&m, 0, sizeof m);
	cr_assert_eq(ks_store_misses(s, NULL, collect_miss, &m), KS_OK);
	cr_assert_eq(m.n, 2);
	cr_assert_str_eq(m.specs[0], "{\"a\":1}");
	cr_assert_eq(m.counts[0], 3);
	cr_assert_str_eq(m.specs[1], "{\"b\":2}");
	cr_assert_eq(m.counts[1], 3);
	ks_store_close(s);
}

Test(store, late_compiles_are_kept_by_deployment_and_go_with_it)
{
	ks_store_t *s = open_store(0);
	ks_hash_t k = key_of(1);
	misses_t m;

	cr_assert_eq(ks_store_deploy_set(s, "llama", "[1]", &k, 1), KS_OK);
	cr_assert_eq(ks_store_record_miss(s, "llama", "{\"a\":1}", 2), KS_OK);
	cr_assert_eq(ks_store_record_miss(s, "llama", "{\"a\":1}", 1), KS_OK);
	cr_assert_eq(ks_store_record_miss(s, "qwen", "{\"b\":1}", 1), KS_OK);
	memset(&m, 0, sizeof m);
	cr_assert_eq(ks_store_misses(s, NULL, collect_miss, &m), KS_OK);
	cr_assert_eq(m.n, 0, "a late compile is not a miss");
	cr_assert_eq(ks_store_misses(s, "llama", collect_miss, &m), KS_OK);
	cr_assert_eq(m.n, 1);
	cr_assert_eq(m.counts[0], 3);
	/* The same specs again (the repin at start) keep them; others, or
	 * no deployment, drop them. */
	cr_assert_eq(ks_store_deploy_set(s, "llama", "[1]", &k, 1), KS_OK);
	memset(&m, 0, sizeof m);
	cr_assert_eq(ks_store_misses(s, "llama", collect_miss, &m), KS_OK);
	cr_assert_eq(m.n, 1);
	cr_assert_eq(ks_store_deploy_set(s, "llama", "[2]", &k, 1), KS_OK);
	memset(&m, 0, sizeof m);
	cr_assert_eq(ks_store_misses(s, "llama", collect_miss, &m), KS_OK);
	cr_assert_eq(m.n, 0);
	cr_assert_eq(ks_store_deploy_set(s, "qwen", "[1]", &k, 1), KS_OK);
	cr_assert_eq(ks_store_deploy_remove(s, "qwen"), KS_OK);
	memset(&m, 0, sizeof m);
	cr_assert_eq(ks_store_misses(s, "qwen", collect_miss, &m), KS_OK);
	cr_assert_eq(m.n, 0);
	ks_store_close(s);
}

/* Stores key I as an artifact of KERNEL on cpu with LEN bytes. */
static void put_kernel(ks_store_t *s, int i, const char *kernel, size_t len)
{
	ks_hash_t k = key_of(i);
	char meta[128];
	uint8_t *b = calloc(1, len);
	ks_artifact_t *a;

	snprintf(meta, sizeof meta, "\"kernel\":\"%s\",\"backend\":\"cpu\"",
	    kernel);
	a = ks_artifact_new(&k, meta, b, len);
	free(b);
	cr_assert_eq(ks_store_put(s, a), KS_OK);
	ks_artifact_unref(a);
}

Test(store, pin_bytes_count_stored_rows_once_and_estimate_the_others)
{
	ks_store_t *s = open_store(0);
	ks_hash_t k1 = key_of(1), keys[4] = { key_of(1), key_of(2),
	    key_of(98), key_of(99) };
	const char *kernels[4] = { "gemm", "gemm", "gemm", "softmax" };
	const char *backends[4] = { "cpu", "cpu", "cpu", "cpu" };
	uint64_t bytes;
	size_t est;

	put_kernel(s, 1, "gemm", 1000);
	put_kernel(s, 2, "gemm", 3000);
	put_kernel(s, 3, "rope", 500);
	cr_assert_eq(ks_store_pinned(s, "a", &k1), 0);
	cr_assert_eq(ks_store_deploy_set(s, "a", "[1]", &k1, 1), KS_OK);
	cr_assert_eq(ks_store_pinned(s, "a", &k1), 1);
	cr_assert_eq(ks_store_pinned(s, "b", &k1), 0);
	/* a's 1000; key 1 again (once); key 2's 3000; key 98 as a gemm
	 * (2000, the mean); key 99 as any cpu entry (1500). */
	cr_assert_eq(ks_store_pin_bytes(s, "b", keys, kernels, backends, 4,
	    &bytes, &est), KS_OK);
	cr_assert_eq(bytes, 1000 + 3000 + 2000 + 1500, "%" PRIu64, bytes);
	cr_assert_eq(est, 2);
	/* Its own old pins are not another's. */
	cr_assert_eq(ks_store_pin_bytes(s, "a", keys, kernels, backends, 2,
	    &bytes, &est), KS_OK);
	cr_assert_eq(bytes, 4000, "%" PRIu64, bytes);
	cr_assert_eq(est, 0);
	ks_store_close(s);
}

/* Overwrites the header of the first b-tree leaf page of table or index
 * NAME, so that sqlite finds it malformed (SQLITE_CORRUPT). */
static void smash_first_leaf(const char *name)
{
	static const uint8_t bad[8] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	    0xff, 0xff };
	char sql[256];
	int64_t page, size;
	int fd;

	snprintf(sql, sizeof sql, "SELECT pageno FROM dbstat WHERE name = "
	    "'%s' AND pagetype = 'leaf' ORDER BY pageno LIMIT 1", name);
	page = raw_int(sql, -1);
	size = raw_int("PRAGMA page_size", -1);
	cr_assert_gt(page, 1, "no leaf page of %s", name);
	fd = open(db, O_WRONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, bad, sizeof bad, (off_t)((page - 1) * size)),
	    (ssize_t)sizeof bad);
	close(fd);
}

/* The open reads every row (the mending of uses, a migration): damage it
 * meets there is the file's, KS_E_CORRUPT, which the daemon answers by
 * moving the file aside, not a refusal to start at every try. */
Test(store, damage_met_at_open_is_reported_as_corrupt)
{
	char err[512];
	ks_store_t *s = open_store(0);
	int i;

	for (i = 1; i <= 400; i++)
		put(s, i, 10);
	ks_store_close(s);
	smash_first_leaf("uses");
	s = NULL;
	cr_assert_eq(ks_store_open(db, 0, &s, err, sizeof err), KS_E_CORRUPT,
	    "%s", err);
}

Test(store, damage_met_by_the_migration_is_reported_as_corrupt)
{
	char err[512];
	ks_store_t *s = NULL;

	version_2_store();
	smash_first_leaf("artifacts");
	cr_assert_eq(ks_store_open(db, 0, &s, err, sizeof err), KS_E_CORRUPT,
	    "%s", err);
	cr_assert_eq(raw_int("PRAGMA user_version", -1), 2,
	    "a failed migration leaves the store as it was");
}

/*
 * The two broken stores of an outside probe: today's tables under
 * user_version 3 (the step to 4 finds its column already there) and an
 * older store without one of its tables (its migration goes through, the
 * statements that need the table do not).  Each is KS_E_CORRUPT at open,
 * for the daemon to set aside, and the failed migration, one
 * transaction, leaves the first exactly as it was: user_version 3, its
 * rows.
 */
Test(store, a_migration_that_fails_half_way_leaves_the_store_as_it_was)
{
	ks_store_t *s = open_store(0);
	char err[512];

	put(s, 1, 100);
	put(s, 2, 200);
	ks_store_close(s);
	raw_exec("PRAGMA user_version = 3");
	s = NULL;
	cr_assert_eq(ks_store_open(db, 0, &s, err, sizeof err), KS_E_CORRUPT,
	    "%s", err);
	cr_assert_null(s);
	cr_assert_eq(raw_int("PRAGMA user_version", -1), 3,
	    "the failed migration moved user_version");
	cr_assert_eq(raw_int("SELECT COUNT(*) FROM artifacts", -1), 2);

	unlink(db);
	version_2_store();
	raw_exec("DROP TABLE counters");
	cr_assert_eq(ks_store_open(db, 0, &s, err, sizeof err), KS_E_CORRUPT,
	    "%s", err);
	cr_assert_null(s);
}

/* Setting aside keeps the newest KS_STORE_ASIDE_KEEP copies, with their
 * -wal and -shm, and removes older ones; two in one second get distinct
 * names. */
Test(store, set_aside_copies_are_kept_to_the_newest_three)
{
	char moved[8][600], err[512], path[5000];
	struct stat st;
	int i;

	for (i = 0; i < 5; i++) {
		write_file(db, "not a database, just text", 25);
		snprintf(path, sizeof path, "%s-wal", db);
		write_file(path, "wal", 3);
		cr_assert_eq(ks_store_move_aside(db, moved[i], sizeof moved[i],
		    err, sizeof err), KS_OK, "%s", err);
	}
	for (i = 0; i < 5; i++) {
		snprintf(path, sizeof path, "%s-wal", moved[i]);
		cr_assert_eq(stat(moved[i], &st) == 0, i >= 5 -
		    KS_STORE_ASIDE_KEEP, "%s", moved[i]);
		cr_assert_eq(stat(path, &st) == 0, i >= 5 -
		    KS_STORE_ASIDE_KEEP, "%s", path);
		if (i > 0)
			cr_assert_str_neq(moved[i], moved[i - 1]);
	}
	cr_assert_neq(stat(db, &st), 0, "the store itself is still there");
}

/* ks_store_remove deletes the artifact and its uses row in one
 * transaction: when the second delete fails, the first is undone. */
Test(store, remove_takes_the_artifact_and_its_use_together)
{
	ks_store_t *s;
	ks_store_stats_t st;
	ks_hash_t k1 = key_of(1);

	two_rows();
	raw_exec("CREATE TRIGGER no_delete BEFORE DELETE ON uses BEGIN "
	    "SELECT RAISE(ABORT, 'planted'); END;");
	s = open_store(0);
	cr_assert_neq(ks_store_remove(s, &k1), KS_OK);
	ks_store_stats(s, &st);
	cr_assert_eq(st.entries, 2);
	cr_assert_eq(raw_rows(), 2, "the artifact's delete was not undone");
	cr_assert_eq(raw_int("SELECT COUNT(*) FROM uses", -1), 2);
	ks_store_close(s);
	raw_exec("DROP TRIGGER no_delete;");
	s = open_store(0);
	cr_assert_eq(ks_store_remove(s, &k1), KS_OK);
	cr_assert_eq(raw_rows(), 1);
	cr_assert_eq(raw_int("SELECT COUNT(*) FROM uses", -1), 1);
	ks_store_close(s);
}

/* A caller that touches no more keys than ks_store_touch_room says loses
 * none; one more is dropped and counted. */
Test(store, touch_room_is_what_the_pending_set_can_take)
{
	ks_store_t *s = open_store(0);
	ks_hash_t keys[KS_STORE_PENDING_TOUCHES];
	size_t room;
	int i;

	for (i = 0; i < 250; i++) {
		keys[i] = key_of(1000 + i);
		ks_store_touch(s, &keys[i]);
	}
	room = ks_store_touch_room(s);
	cr_assert_eq(room, KS_STORE_PENDING_TOUCHES - 250);
	for (i = 0; i < (int)room + 1; i++)
		keys[i] = key_of(i);
	ks_store_touch_many(s, keys, room);
	cr_assert_eq(ks_store_touches_dropped(s), 0);
	cr_assert_eq(ks_store_touch_room(s), 0);
	ks_store_touch_many(s, &keys[room], 1);
	cr_assert_eq(ks_store_touches_dropped(s), 1);
	ks_store_close(s);
}

/* ks_store_keys_with_prefix: the rows whose key starts with the hex
 * prefix, by the key index, for every prefix length; counted against the
 * keys the test put. */
Test(store, keys_with_a_prefix_are_found_by_range)
{
	ks_store_t *s = open_store(0);
	char hex[64][KS_HASH_HEX], prefix[8];
	ks_hash_t got[64];
	int i, j, n, want;

	for (i = 0; i < 64; i++) {
		ks_hash_t k = key_of(i);

		put(s, i, 10);
		ks_hash_hex(&k, hex[i]);
	}
	n = ks_store_keys_with_prefix(s, hex[5], got, 64);
	cr_assert_eq(n, 1);
	{
		ks_hash_t k5 = key_of(5);

		cr_assert(ks_hash_eq(&got[0], &k5));
	}
	hex[5][12] = '\0';
	cr_assert_eq(ks_store_keys_with_prefix(s, hex[5], got, 64), 1);
	/* One hex digit: 64 keys in 16 digits, so some digit has several. */
	for (j = 0; j < 16; j++) {
		snprintf(prefix, sizeof prefix, "%x", j);
		for (i = 0, want = 0; i < 64; i++)
			want += hex[i][0] == prefix[0];
		n = ks_store_keys_with_prefix(s, prefix, got, 64);
		cr_assert_eq(n, want, "prefix %s: %d, want %d", prefix, n,
		    want);
		for (i = 0; i < n; i++) {
			char h[KS_HASH_HEX];

			ks_hash_hex(&got[i], h);
			cr_assert_eq(h[0], prefix[0]);
		}
		if (want > 1)
			cr_assert_eq(ks_store_keys_with_prefix(s, prefix, got,
			    2), 2, "MAX bounds the answer");
	}
	cr_assert_eq(ks_store_keys_with_prefix(s, "xyz", got, 2), KS_E_INVAL);
	ks_store_close(s);
}

/* ---- identities and canaries (schema 6) ---- */

static int count_identity(void *ctx, const char *identity)
{
	cr_assert_str_eq(identity, "libgccjit 12.2.0; -O3");
	(*(int *)ctx)++;
	return 0;
}

static int keep_canary(void *ctx, const ks_store_canary_t *c)
{
	char *out = ctx;

	snprintf(out + strlen(out), 256 - strlen(out), "%s=%s(%s);",
	    c->kernel, c->result, c->detail);
	return 0;
}

Test(store, identities_and_canary_verdicts_are_kept)
{
	ks_store_canary_t c = { "cpu", "id A", "gemm", "passed", 0, 12.5,
	    "9 runs" };
	char got[256] = "";
	ks_store_t *s = open_store(0);
	int n = 0;

	put_meta(s, 1, gemm_meta, 300);
	put_meta(s, 2, gemm_meta, 300);
	cr_assert_eq(ks_store_identities(s, "cpu", count_identity, &n), KS_OK);
	cr_assert_eq(n, 1, "one distinct identity, not one per row");
	cr_assert_eq(ks_store_identities(s, "opencl", count_identity, &n),
	    KS_OK);
	cr_assert_eq(n, 1);
	cr_assert_eq(ks_store_canary_put(s, &c), KS_OK);
	c.kernel = "rope";
	c.result = "failed";
	c.detail = "x[0]";
	cr_assert_eq(ks_store_canary_put(s, &c), KS_OK);
	c.identity = "id B";             /* another compiler's: not listed */
	cr_assert_eq(ks_store_canary_put(s, &c), KS_OK);
	c = (ks_store_canary_t){ "cpu", "id A", "rope", "passed", 0, 1,
	    "again" };                   /* replaces the failed one */
	cr_assert_eq(ks_store_canary_put(s, &c), KS_OK);
	ks_store_close(s);
	s = open_store(0);
	cr_assert_eq(ks_store_canaries(s, "cpu", "id A", keep_canary, got),
	    KS_OK);
	cr_assert_str_eq(got, "gemm=passed(9 runs);rope=passed(again);");
	ks_store_close(s);
}
