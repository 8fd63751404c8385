/*
 * The store tests' fixture (test_store.c, test_store_schema.c): a
 * temporary directory per test (setup, teardown), artifacts of known
 * bytes per index, and a raw sqlite connection to plant damage while the
 * store is closed, so that the store's one-writer rule holds for the
 * store itself.
 */
#ifndef KS_TESTS_STORE_FIXTURE_H
#define KS_TESTS_STORE_FIXTURE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/base.h"
#include "../store/store.h"

static char dir[256];
static char db[512];

static inline int rm_entry(const char *p, const struct stat *st, int flag,
    struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static inline void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
	ks_log_set_level(KS_LOG_ERROR);
	snprintf(dir, sizeof dir, "/tmp/kspec-store-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(db, sizeof db, "%s/store.db", dir);
}

static inline void teardown(void)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static inline ks_hash_t key_of(int i)
{
	char name[32];
	ks_hash_t k;

	snprintf(name, sizeof name, "key-%d", i);
	ks_hash(name, strlen(name), &k);
	return k;
}

/* Artifact I with LEN bytes of a pattern that depends on I. */
static inline ks_artifact_t *make(int i, size_t len)
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

static inline ks_store_t *open_store(uint64_t max_bytes)
{
	char err[512];
	ks_store_t *s = NULL;
	int rc = ks_store_open(db, max_bytes, &s, err, sizeof err);

	cr_assert_eq(rc, KS_OK, "open: %s (%s)", err, ks_err_name(rc));
	return s;
}

static inline void put(ks_store_t *s, int i, size_t len)
{
	ks_artifact_t *a = make(i, len);

	cr_assert_eq(ks_store_put(s, a), KS_OK);
	ks_artifact_unref(a);
}

static inline int get_rc(ks_store_t *s, int i)
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
static inline void expect_same(ks_store_t *s, int i, size_t len)
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

static inline sqlite3 *raw_open(void)
{
	sqlite3 *r = NULL;

	cr_assert_eq(sqlite3_open(db, &r), SQLITE_OK);
	sqlite3_busy_timeout(r, 5000);
	return r;
}

static inline void raw_exec(const char *sql)
{
	sqlite3 *r = raw_open();
	char *msg = NULL;

	cr_assert_eq(sqlite3_exec(r, sql, NULL, NULL, &msg), SQLITE_OK,
	    "%s: %s", sql, msg ? msg : "");
	sqlite3_close(r);
}

/* Runs one statement with ?1 bound to key I. */
static inline void raw_exec_key(const char *sql, int i)
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
static inline int64_t raw_int(const char *sql, int i)
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

static inline void raw_journal_mode(char out[16])
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

static inline int64_t raw_last_used(int i)
{
	return raw_int("SELECT last_used FROM uses WHERE key = ?1", i);
}

static inline int64_t raw_rows(void)
{
	return raw_int("SELECT COUNT(*) FROM artifacts", -1);
}

/* Flips one byte of column COL of row I, through a raw connection. */
static inline void raw_flip(int i, const char *col, size_t at)
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

static inline void write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");

	cr_assert_not_null(f);
	cr_assert_eq(fwrite(p, 1, n, f), n);
	fclose(f);
}

/* A closed store holding artifacts 1 and 2 of 4000 bytes each, ready for
 * damage to be planted in row 1. */
static inline void two_rows(void)
{
	ks_store_t *s = open_store(0);

	put(s, 1, 4000);
	put(s, 2, 4000);
	ks_store_close(s);
}

/* Reopens a two_rows store whose row 1 was damaged and checks that it is
 * not served, is counted and removed, and that row 2 is untouched. */
static inline void expect_damage_caught(void)
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

#endif
