/*
 * The store's file under a real kspecd: who may own and write it, links
 * at its path, its modes, a file deleted or replaced while the daemon
 * runs, a file that is not a database at start, and SIGHUP.  Tests that
 * give files to another uid need root and skip, saying so, without it.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "e2e.h"

static e2e_daemon_t D;

static void down(void)
{
	e2e_cleanup(&D);
}

TestSuite(storefile, .fini = down, .timeout = 120);

static void fresh_dir(void)
{
	memset(&D, 0, sizeof D);
	snprintf(D.dir, sizeof D.dir, "/tmp/kspec-e2e-XXXXXX");
	cr_assert(mkdtemp(D.dir));
	snprintf(D.sock, sizeof D.sock, "%s/run/kspecd.sock", D.dir);
	snprintf(D.store, sizeof D.store, "%s/store/kspec.db", D.dir);
}

static void start(const char *const *extra)
{
	char dir[sizeof D.dir];

	snprintf(dir, sizeof dir, "%s", D.dir);
	memset(&D, 0, sizeof D);
	snprintf(D.dir, sizeof D.dir, "%s", dir);
	cr_assert_eq(e2e_start(&D, extra), 0, "kspecd did not start");
}

/* Runs kspecd on D's socket and store until it exits; returns its status
 * and its stderr in ERR. */
static int run_fails(const char *const *extra, char *err, size_t errlen)
{
	char bin[512], log[400];
	const char *argv[16];
	int i, n = 0, st;
	pid_t pid;
	FILE *f;

	snprintf(bin, sizeof bin, "%s/kspecd", e2e_build_dir());
	snprintf(log, sizeof log, "%s/stderr", D.dir);
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = D.sock;
	argv[n++] = "--store";
	argv[n++] = D.store;
	for (i = 0; extra && extra[i]; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	pid = fork();
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		dup2(fd, 2);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	for (i = 0; i < 3000 && waitpid(pid, &st, WNOHANG) != pid; i++)
		usleep(10000);
	if (i == 3000) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		return -1;
	}
	err[0] = '\0';
	f = fopen(log, "r");
	if (f) {
		size_t k = fread(err, 1, errlen - 1, f);

		err[k] = '\0';
		fclose(f);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static const char *get_n(int n)
{
	static char buf[300];

	snprintf(buf, sizeof buf, "{\"op\":\"get\",\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"N\":%d,\"K\":64},\"return\":\"meta\"}", n);
	return buf;
}

/* The source of a get of N, "" on error. */
static const char *source_of(int n)
{
	static char src[32];
	e2e_reply_t r;

	src[0] = '\0';
	if (e2e_call(D.sock, get_n(n), &r) == 0) {
		snprintf(src, sizeof src, "%s", e2e_str(&r, "source"));
		e2e_reply_free(&r);
	}
	return src;
}

static void stop(void)
{
	cr_assert_eq(e2e_stop(&D), 0);
}

Test(storefile, the_store_and_its_files_are_created_0600)
{
	static const char *const ext[] = { "", "-wal", "-shm", ".lock" };
	char path[400];
	struct stat st;
	size_t i;

	fresh_dir();
	start(NULL);
	cr_assert_str_eq(source_of(64), "compiled");
	for (i = 0; i < sizeof ext / sizeof ext[0]; i++) {
		snprintf(path, sizeof path, "%s%s", D.store, ext[i]);
		cr_assert_eq(stat(path, &st), 0, "%s", path);
		cr_assert_eq(st.st_mode & 0777, 0600, "%s is %o", path,
		    st.st_mode & 0777);
	}
}

Test(storefile, a_store_others_may_write_is_refused_with_what_to_do)
{
	char path[400], err[4096];
	int rc;

	fresh_dir();
	start(NULL);
	stop();
	cr_assert_eq(chmod(D.store, 0666), 0);
	rc = run_fails(NULL, err, sizeof err);
	cr_assert_neq(rc, 0);
	cr_assert(strstr(err, D.store) && strstr(err, "mode 0666") &&
	    strstr(err, "chmod 0600"), "%s", err);
	cr_assert_eq(chmod(D.store, 0600), 0);
	snprintf(path, sizeof path, "%s/store", D.dir);
	cr_assert_eq(chmod(path, 01777), 0);
	rc = run_fails(NULL, err, sizeof err);
	cr_assert_neq(rc, 0);
	cr_assert(strstr(err, "directory") && strstr(err, path) &&
	    strstr(err, "mode 1777"), "%s", err);
}

Test(storefile, a_forged_store_of_another_uid_is_never_served)
{
	char err[4096], *msg = NULL;
	sqlite3 *db;
	int rc;

	if (geteuid() != 0)
		cr_skip_test("needs root to give the store to another uid");
	fresh_dir();
	start(NULL);
	cr_assert_str_eq(source_of(64), "compiled");
	cr_assert_str_eq(source_of(8192), "compiled");
	stop();
	/* Another uid, who owns the file, files the N=8192 row under the
	 * N=64 key.  Its checksums cover key, bytes and meta, which anyone
	 * can recompute, so only refusing the file keeps it from being
	 * served. */
	cr_assert_eq(sqlite3_open(D.store, &db), SQLITE_OK);
	rc = sqlite3_exec(db, "UPDATE artifacts SET bytes = (SELECT bytes "
	    "FROM artifacts ORDER BY size DESC LIMIT 1)", NULL, NULL, &msg);
	cr_assert_eq(rc, SQLITE_OK, "%s", msg ? msg : "");
	sqlite3_close(db);
	cr_assert_eq(chown(D.store, 4242, 4242), 0);
	rc = run_fails(NULL, err, sizeof err);
	cr_assert_neq(rc, 0, "a store of uid 4242 was opened");
	cr_assert(strstr(err, "uid 4242") && strstr(err, D.store), "%s", err);
	cr_assert_neq(access(D.sock, F_OK), 0, "it listened");
}

Test(storefile, a_link_at_the_store_path_is_refused)
{
	char err[4096], target[400], dir[400];
	int rc;

	fresh_dir();
	snprintf(dir, sizeof dir, "%s/store", D.dir);
	cr_assert_eq(mkdir(dir, 0700), 0);
	snprintf(target, sizeof target, "%s/elsewhere.db", D.dir);
	cr_assert_eq(symlink(target, D.store), 0);   /* dangling */
	rc = run_fails(NULL, err, sizeof err);
	cr_assert_neq(rc, 0);
	cr_assert(strstr(err, "symbolic link"), "%s", err);
	cr_assert_neq(access(target, F_OK), 0, "the link was followed");
}

Test(storefile, sighup_leaves_the_daemon_serving)
{
	e2e_reply_t r;

	fresh_dir();
	start(NULL);
	cr_assert_eq(kill(D.pid, SIGHUP), 0);
	usleep(300000);
	cr_assert_eq(kill(D.pid, SIGHUP), 0);
	usleep(300000);
	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"ping\"}", &r), 0);
	cr_assert(e2e_ok(&r));
	e2e_reply_free(&r);
	cr_assert_str_eq(source_of(64), "compiled");
	cr_assert_eq(e2e_stop(&D), 0, "SIGHUP changed how the daemon stops");
}

Test(storefile, a_store_deleted_under_the_daemon_is_recreated)
{
	char path[400];
	int i;

	fresh_dir();
	start(NULL);
	cr_assert_str_eq(source_of(64), "compiled");
	usleep(300000);                 /* written */
	cr_assert_eq(unlink(D.store), 0);
	snprintf(path, sizeof path, "%s-wal", D.store);
	unlink(path);
	snprintf(path, sizeof path, "%s-shm", D.store);
	unlink(path);
	for (i = 0; i < 500; i++) {
		e2e_reply_t r;
		const cJSON *st;

		cr_assert_eq(e2e_call(D.sock, "{\"op\":\"stats\"}", &r), 0);
		st = cJSON_GetObjectItem(r.h, "store");
		if (e2e_num(st, "replaced") == 1 && access(D.store, F_OK) == 0) {
			e2e_reply_free(&r);
			break;
		}
		e2e_reply_free(&r);
		usleep(20000);
	}
	cr_assert_lt(i, 500, "the deletion was not noticed within 10 s");
	/* Compiled after the deletion: on disk at the next start, with what
	 * memory held before. */
	cr_assert_str_eq(source_of(72), "compiled");
	stop();
	start(NULL);
	cr_assert_str_eq(source_of(72), "disk");
	cr_assert_str_eq(source_of(64), "disk");
}

Test(storefile, a_store_that_is_not_a_database_is_moved_aside)
{
	static const char junk[] = "this is not an sqlite database, just text "
	    "long enough to look like a header .............................";
	char dir[400], moved[600], err[4096];
	e2e_reply_t r;
	const cJSON *st, *m;
	FILE *f;
	int rc;

	fresh_dir();
	snprintf(dir, sizeof dir, "%s/store", D.dir);
	cr_assert_eq(mkdir(dir, 0700), 0);
	f = fopen(D.store, "w");
	cr_assert(f);
	fwrite(junk, 1, sizeof junk, f);
	fclose(f);
	/* Asked to refuse, it refuses. */
	rc = run_fails((const char *const[]){ "--refuse-corrupt-store", NULL },
	    err, sizeof err);
	cr_assert_neq(rc, 0);
	cr_assert(strstr(err, "not a database"), "%s", err);
	/* Otherwise it keeps the file aside and serves. */
	start(NULL);
	cr_assert_str_eq(source_of(64), "compiled");
	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"stats\"}", &r), 0);
	st = cJSON_GetObjectItem(r.h, "store");
	m = cJSON_GetObjectItem(st, "moved_aside");
	cr_assert(cJSON_IsString(m), "%s", cJSON_PrintUnformatted(st));
	snprintf(moved, sizeof moved, "%s", m->valuestring);
	e2e_reply_free(&r);
	cr_assert(strstr(moved, ".corrupt-"), "%s", moved);
	f = fopen(moved, "r");
	cr_assert(f, "%s is not there", moved);
	cr_assert_eq(fread(err, 1, sizeof junk, f), sizeof junk);
	fclose(f);
	cr_assert_eq(memcmp(err, junk, sizeof junk), 0);
}

/* Runs SQL on D's store file (the daemon stopped). */
static void store_sql(const char *sql)
{
	sqlite3 *db = NULL;
	char *msg = NULL;

	cr_assert_eq(sqlite3_open(D.store, &db), SQLITE_OK);
	cr_assert_eq(sqlite3_exec(db, sql, NULL, NULL, &msg), SQLITE_OK,
	    "%s: %s", sql, msg ? msg : "?");
	sqlite3_close(db);
}

/* The daemon's store.moved_aside, "" when none. */
static void moved_aside(char *out, size_t n)
{
	e2e_reply_t r;
	const cJSON *m;

	out[0] = '\0';
	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"stats\"}", &r), 0);
	m = cJSON_GetObjectItem(cJSON_GetObjectItem(r.h, "store"),
	    "moved_aside");
	if (cJSON_IsString(m))
		snprintf(out, n, "%s", m->valuestring);
	e2e_reply_free(&r);
}

/* kspec_store_moved_aside on D's metrics socket METRICS (curl), -1 when
 * it cannot be read. */
static int moved_metric(const char *metrics)
{
	char cmd[800], line[512];
	int v = -1;
	FILE *p;

	snprintf(cmd, sizeof cmd, "curl -sS --max-time 10 --unix-socket '%s' "
	    "http://localhost/metrics", metrics);
	p = popen(cmd, "r");
	cr_assert(p);
	while (fgets(line, sizeof line, p))
		if (strncmp(line, "kspec_store_moved_aside ", 24) == 0)
			v = atoi(line + 24);
	pclose(p);
	return v;
}

/*
 * No store stops a start: the two broken stores of an outside probe
 * (today's tables under user_version 3, whose migration fails half-way;
 * a store without its counters table), a truncated file and a newer
 * kspec's store are each set aside, unchanged, and the daemon serves on
 * a new one, saying so in stats and /metrics; the set-aside copies are
 * kept to the newest three.  (A store
 * of another uid still refuses the start:
 * a_forged_store_of_another_uid_is_never_served.)
 */
Test(storefile, no_broken_store_stops_a_start)
{
	static const char *const breaks[] = {
		"PRAGMA user_version = 3",
		"DROP TABLE counters",
		NULL,                   /* truncated to half */
		"PRAGMA user_version = 99",
	};
	char moved[600], prev[600] = "", uv[64], metrics[400];
	const char *const listen[] = { "--metrics-listen", metrics, NULL };
	struct stat st;
	size_t i;
	int kept = 0;

	fresh_dir();
	snprintf(metrics, sizeof metrics, "%s/metrics.sock", D.dir);
	for (i = 0; i < sizeof breaks / sizeof breaks[0]; i++) {
		/* A store with an entry, then broken. */
		start(listen);
		if (i == 0)     /* a new store: nothing set aside */
			cr_assert_eq(moved_metric(metrics), 0);
		cr_assert_str_eq(source_of(64 + (int)i), "compiled");
		stop();
		if (breaks[i]) {
			store_sql(breaks[i]);
		} else {
			cr_assert_eq(stat(D.store, &st), 0);
			cr_assert_eq(truncate(D.store, st.st_size / 2), 0);
		}
		cr_assert_eq(stat(D.store, &st), 0);
		start(listen);
		cr_assert_eq(moved_metric(metrics), 1, "case %zu", i);
		cr_assert_str_eq(source_of(64 + (int)i), "compiled",
		    "case %zu: the broken store's entry was served", i);
		cr_assert_str_eq(source_of(64 + (int)i), "memory");
		moved_aside(moved, sizeof moved);
		cr_assert(strstr(moved, ".corrupt-"), "case %zu: nothing set "
		    "aside", i);
		cr_assert_str_neq(moved, prev);
		snprintf(prev, sizeof prev, "%s", moved);
		/* Unchanged: the probe's first store still says version 3. */
		if (i == 0 || i == 3) {
			sqlite3 *db = NULL;
			sqlite3_stmt *q = NULL;

			cr_assert_eq(sqlite3_open_v2(moved, &db,
			    SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
			cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA "
			    "user_version", -1, &q, NULL), SQLITE_OK);
			cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
			snprintf(uv, sizeof uv, "%d", sqlite3_column_int(q, 0));
			sqlite3_finalize(q);
			sqlite3_close(db);
			cr_assert_str_eq(uv, i == 0 ? "3" : "99");
		}
		stop();
	}
	/* Four set aside, the newest three kept. */
	{
		DIR *d;
		struct dirent *e;
		char dir[600];

		snprintf(dir, sizeof dir, "%s/store", D.dir);
		d = opendir(dir);
		cr_assert(d);
		while ((e = readdir(d)) != NULL)
			kept += strstr(e->d_name, ".corrupt-") != NULL &&
			    strstr(e->d_name, "-wal") == NULL &&
			    strstr(e->d_name, "-shm") == NULL;
		closedir(d);
	}
	cr_assert_eq(kept, 3);
	cr_assert_eq(stat(prev, &st), 0, "the newest copy is gone");
}
