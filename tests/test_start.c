/*
 * A restarted daemon serves at once: the socket accepts before the
 * compile workers have probed the compilers, hits are answered under the
 * saved probe's keys while its witness holds, everything else waits for
 * this start's probe, and a changed compiler is never served from the
 * saved keys.  The probe is held back in the test build
 * (KSPEC_TEST_PLANT_PROBE_DELAY_MS), so "while the probe runs" is a state
 * the daemon reports, not a time.
 */
#include <criterion/criterion.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "e2e.h"
#include "../exec/exec.h"

#define PROBE_DELAY "2500"

static e2e_daemon_t D;

static void up(void)
{
	memset(&D, 0, sizeof D);
	D.program = E2E_PLANT;
	D.accepting_only = 1;
	unsetenv("KSPEC_TEST_PLANT_PROBE_DELAY_MS");
	unsetenv("KSPEC_TEST_PLANT_IDENTITY_SUFFIX");
	unsetenv("KSPEC_TEST_PLANT_IDENTITY_SUFFIX_FILE");
	/* A changed compiler is an upgrade, whose canaries are not what
	 * these tests are about: only the canary of the kernel they get. */
	setenv("KSPEC_TEST_PLANT_CANARY_ONLY", "rmsnorm", 1);
}

static void down(void)
{
	e2e_cleanup(&D);
}

TestSuite(start, .init = up, .fini = down, .timeout = 90);

static const char *get_of(int h)
{
	static char buf[256];

	snprintf(buf, sizeof buf, "{\"op\":\"get\",\"id\":%d,\"kernel\":"
	    "\"rmsnorm\",\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":"
	    "{\"R\":1,\"H\":%d},\"return\":\"meta\"}", h, h);
	return buf;
}

/* The source of a get of H=H on a fresh connection ("" on error). */
static const char *source_of(int h)
{
	static char src[32];
	e2e_reply_t r = { 0 };

	src[0] = '\0';
	if (e2e_call(D.sock, get_of(h), &r) == 0 && e2e_ok(&r))
		snprintf(src, sizeof src, "%s", e2e_str(&r, "source"));
	e2e_reply_free(&r);
	return src;
}

/* stats' probe.FIELD: a string (into OUT) or a number (returned). */
static double probe_field(const char *field, char *out, size_t outlen)
{
	const cJSON *p, *v;
	e2e_reply_t r = { 0 };
	double n = -1;

	if (out)
		out[0] = '\0';
	if (e2e_call(D.sock, "{\"op\":\"stats\"}", &r))
		return -1;
	p = cJSON_GetObjectItemCaseSensitive(r.h, "probe");
	v = cJSON_GetObjectItemCaseSensitive(p, field);
	if (cJSON_IsString(v) && out)
		snprintf(out, outlen, "%s", v->valuestring);
	else if (cJSON_IsNumber(v))
		n = v->valuedouble;
	e2e_reply_free(&r);
	return n;
}

static void expect_probe(const char *field, const char *want)
{
	char got[64];

	probe_field(field, got, sizeof got);
	cr_assert_str_eq(got, want, "stats probe.%s: %s, expected %s", field,
	    got, want);
}

/* Fills the store with H=64 and stops the daemon. */
static void first_run(void)
{
	cr_assert_eq(e2e_start(&D, NULL), 0);
	cr_assert_str_eq(source_of(64), "compiled");
	expect_probe("state", "done");
	cr_assert_eq(e2e_stop(&D), 0);
}

Test(start, hit_answered_while_the_probe_runs_and_a_miss_waits_for_it)
{
	e2e_reply_t r;
	int fd, bad;

	first_run();
	setenv("KSPEC_TEST_PLANT_PROBE_DELAY_MS", PROBE_DELAY, 1);
	cr_assert_eq(e2e_start(&D, NULL), 0);
	/* Accepting, the probe held back, the saved probe's keys in use. */
	expect_probe("state", "saved");
	expect_probe("saved", "used");
	cr_assert_str_eq(source_of(64), "disk");
	expect_probe("state", "saved");
	/* A miss is parked until the probe is in, then compiled; so is a
	 * target the saved probe does not know (this start's may). */
	fd = e2e_connect(D.sock);
	cr_assert_geq(fd, 0);
	cr_assert_eq(e2e_send(fd, get_of(96)), 0);
	bad = e2e_connect(D.sock);
	cr_assert_geq(bad, 0);
	cr_assert_eq(e2e_send(bad, "{\"op\":\"get\",\"kernel\":\"rmsnorm\","
	    "\"backend\":\"cpu\",\"target\":\"no-such-cpu\",\"dtype\":"
	    "\"f32\",\"shape\":{\"R\":1,\"H\":64}}"), 0);
	for (int i = 0; i < 200 && probe_field("waiting", NULL, 0) < 2; i++)
		usleep(10000);
	cr_assert_eq(probe_field("waiting", NULL, 0), 2);
	expect_probe("state", "saved");
	/* ping and stats are answered while it waits (above). */
	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"ping\"}", &r), 0);
	cr_assert(e2e_ok(&r));
	e2e_reply_free(&r);
	cr_assert_eq(e2e_recv(fd, &r), 0);
	close(fd);
	cr_assert(e2e_ok(&r), "%s", e2e_code(&r));
	cr_assert_str_eq(e2e_str(&r, "source"), "compiled");
	e2e_reply_free(&r);
	cr_assert_eq(e2e_recv(bad, &r), 0);
	close(bad);
	cr_assert_str_eq(e2e_code(&r), "E_BAD_TARGET");
	e2e_reply_free(&r);
	expect_probe("state", "done");
	cr_assert_eq(probe_field("waiting", NULL, 0), 0);
	cr_assert_eq(probe_field("waited", NULL, 0), 2);
	/* Counted once each. */
	cr_assert_eq(e2e_stat(D.sock, "gets"), 3);
}

Test(start, a_library_replaced_under_the_process_makes_no_witness)
{
	char path[] = "/tmp/kspec-mapped-XXXXXX";
	ks_buf_t out;
	void *m;
	int fd = mkstemp(path);

	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "lib", 3), 3);
	m = mmap(NULL, 3, PROT_READ, MAP_PRIVATE, fd, 0);
	cr_assert_neq(m, MAP_FAILED);
	close(fd);
	cr_assert_eq(ks_base_init(), KS_OK);
	ks_buf_init(&out);
	cr_assert_eq(ks_exec_witness(&out), KS_OK);
	cr_assert(strstr(out.data, path) != NULL, "a mapped file not named");
	ks_buf_close(&out);
	/* An upgrade renames a new file over it: what is mapped is gone. */
	unlink(path);
	ks_buf_init(&out);
	cr_assert_eq(ks_exec_witness(&out), KS_E_INVAL);
	cr_assert_eq(out.len, 0);
	ks_buf_close(&out);
	munmap(m, 3);
}

Test(start, changed_compiler_is_not_served_from_the_saved_keys)
{
	e2e_reply_t r;
	int fd;

	first_run();
	/* Another compiler identity, in what the witness looks at. */
	setenv("KSPEC_TEST_PLANT_IDENTITY_SUFFIX", " (upgraded)", 1);
	setenv("KSPEC_TEST_PLANT_PROBE_DELAY_MS", PROBE_DELAY, 1);
	cr_assert_eq(e2e_start(&D, NULL), 0);
	expect_probe("state", "running");
	expect_probe("saved", "stale");
	fd = e2e_connect(D.sock);
	cr_assert_geq(fd, 0);
	cr_assert_eq(e2e_send(fd, get_of(64)), 0);
	cr_assert_eq(e2e_recv(fd, &r), 0);
	close(fd);
	cr_assert(e2e_ok(&r), "%s", e2e_code(&r));
	/* The stored entry is the old compiler's: compiled anew. */
	cr_assert_str_eq(e2e_str(&r, "source"), "compiled");
	e2e_reply_free(&r);
	cr_assert_eq(probe_field("waited", NULL, 0), 1);
}

Test(start, probe_that_differs_from_the_saved_one_replaces_its_keys)
{
	char file[] = "/tmp/kspec-suffix-XXXXXX";
	e2e_reply_t r;
	FILE *f;
	int fd = mkstemp(file);

	cr_assert_geq(fd, 0);
	close(fd);
	/* The compiler changes where no witness looks (the file's contents,
	 * not its name, decide the identity). */
	setenv("KSPEC_TEST_PLANT_IDENTITY_SUFFIX_FILE", file, 1);
	cr_assert_eq(e2e_start(&D, NULL), 0);
	cr_assert_str_eq(source_of(64), "compiled");
	cr_assert_eq(e2e_stop(&D), 0);
	f = fopen(file, "w");
	cr_assert_not_null(f);
	fputs(" (changed unseen)\n", f);
	fclose(f);
	setenv("KSPEC_TEST_PLANT_PROBE_DELAY_MS", PROBE_DELAY, 1);
	cr_assert_eq(e2e_start(&D, NULL), 0);
	expect_probe("saved", "used");
	/* A miss waits for the probe; once it is in, the keys are the new
	 * compiler's. */
	cr_assert_str_eq(source_of(80), "compiled");
	expect_probe("state", "done");
	expect_probe("saved", "replaced");
	cr_assert_str_eq(source_of(64), "compiled");
	/* And the store saved the new probe: the next start uses it. */
	cr_assert_eq(e2e_stop(&D), 0);
	unsetenv("KSPEC_TEST_PLANT_PROBE_DELAY_MS");
	cr_assert_eq(e2e_start(&D, NULL), 0);
	cr_assert_str_eq(source_of(64), "disk");
	expect_probe("saved", "used");
	unlink(file);
	(void)r;
}

Test(start, witness_sees_files_and_the_compilers_environment)
{
	char path[] = "/tmp/kspec-witness-XXXXXX";
	const char *paths[1] = { path };
	ks_hash_t a, b;
	struct timespec ts[2] = { { 1, 0 }, { 1, 0 } };
	int fd = mkstemp(path);

	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert_eq(ks_base_init(), KS_OK);
	unsetenv("OCL_ICD_VENDORS");
	unsetenv("KSPEC_UNRELATED");
	cr_assert_eq(ks_exec_witness_digest(paths, 1, &a), KS_OK);
	cr_assert_eq(ks_exec_witness_digest(paths, 1, &b), KS_OK);
	cr_assert(ks_hash_eq(&a, &b), "the same world, another witness");
	/* A variable no compiler reads changes nothing. */
	setenv("KSPEC_UNRELATED", "1", 1);
	cr_assert_eq(ks_exec_witness_digest(paths, 1, &b), KS_OK);
	cr_assert(ks_hash_eq(&a, &b));
	/* One the OpenCL loader reads does. */
	setenv("OCL_ICD_VENDORS", "/nowhere", 1);
	cr_assert_eq(ks_exec_witness_digest(paths, 1, &b), KS_OK);
	cr_assert_not(ks_hash_eq(&a, &b));
	unsetenv("OCL_ICD_VENDORS");
	/* A file whose times change (a package upgrade rewrites it). */
	cr_assert_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
	cr_assert_eq(ks_exec_witness_digest(paths, 1, &b), KS_OK);
	cr_assert_not(ks_hash_eq(&a, &b));
	cr_assert_eq(ks_exec_witness_digest(paths, 1, &a), KS_OK);
	/* And one that is gone. */
	unlink(path);
	cr_assert_eq(ks_exec_witness_digest(paths, 1, &b), KS_OK);
	cr_assert_not(ks_hash_eq(&a, &b));
}

Test(start, witness_names_the_compilers_this_process_mapped)
{
	const cJSON *paths, *digest;
	const char *list[1024];
	char hex[KS_HASH_HEX];
	ks_buf_t out;
	ks_hash_t d;
	cJSON *w;
	int n = 0;

	cr_assert_eq(ks_base_init(), KS_OK);
	ks_buf_init(&out);
	cr_assert_eq(ks_exec_witness(&out), KS_OK);
	w = cJSON_Parse(out.data);
	paths = cJSON_GetObjectItemCaseSensitive(w, "paths");
	digest = cJSON_GetObjectItemCaseSensitive(w, "digest");
	cr_assert(cJSON_IsArray(paths) && cJSON_IsString(digest), "%s",
	    out.data);
	cr_assert_str_eq(cJSON_GetArrayItem(paths, 0)->valuestring,
	    "/etc/ld.so.cache");
	/* The test binary links libgccjit, as the worker does. */
	cr_assert(strstr(out.data, "libgccjit") != NULL, "%s", out.data);
	/* Its digest is the digest of its paths. */
	for (const cJSON *p = paths->child; p && n < 1024; p = p->next)
		list[n++] = p->valuestring;
	cr_assert_eq(ks_exec_witness_digest(list, n, &d), KS_OK);
	ks_hash_hex(&d, hex);
	cr_assert_str_eq(digest->valuestring, hex);
	cJSON_Delete(w);
	ks_buf_close(&out);
}
