/*
 * store/: the sqlite store's schema and its migrations from every earlier
 * version, opening and refusing files, crashes and damage, and the later
 * tables (misses, deployments and pins, identities and canaries).  The
 * fixture is test_store.c's (store_fixture.h).
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>

#include "store_fixture.h"

TestSuite(store, .init = setup, .fini = teardown, .timeout = 60);

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
