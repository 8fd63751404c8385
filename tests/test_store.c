/*
 * store/: artifacts, the hot tier and the sqlite store's reads, writes,
 * checksums and byte budget (test_store_schema.c: its schema, migrations,
 * opening, crashes and the later tables).  Each test gets its own
 * temporary directory; damage is planted with a separate raw sqlite
 * connection (or raw file writes) while the store is closed
 * (store_fixture.h).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "store_fixture.h"

TestSuite(artifact, .init = setup, .fini = teardown, .timeout = 30);
TestSuite(hot, .init = setup, .fini = teardown, .timeout = 30);
TestSuite(store, .init = setup, .fini = teardown, .timeout = 60);

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
