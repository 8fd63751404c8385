/*
 * The kspec command line against a real kspecd: exit statuses, files
 * written, warm manifests, ls/evict/kernels/explain.
 */
#include <criterion/criterion.h>

#include <sys/stat.h>

#include "../include/kspec.h"
#include "../store/store.h"
#include "e2e.h"

static e2e_daemon_t D;
static char out[65536];

static void up(void)
{
	memset(&D, 0, sizeof D);
	cr_assert_eq(e2e_start(&D, NULL), 0, "kspecd did not start");
}

static void down(void)
{
	e2e_cleanup(&D);
}

TestSuite(cli, .init = up, .fini = down, .timeout = 120);

/* Runs `kspec --socket SOCK ARGS` with stderr merged; returns the exit
 * status, output in `out`. */
static int kspec(const char *fmt, ...)
{
	char args[2048], cmd[4096];
	va_list ap;
	FILE *p;
	size_t n;
	int st;

	va_start(ap, fmt);
	vsnprintf(args, sizeof args, fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof cmd, "%s/kspec --socket %s %s 2>&1",
	    e2e_build_dir(), D.sock, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, sizeof out - 1, p);
	out[n] = '\0';
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

Test(cli, get_writes_a_loadable_artifact_and_its_metadata)
{
	char so[400], meta[400];
	unsigned char *bytes;
	e2e_entry_t fn;
	cJSON *m;
	ks_so_t *h;
	FILE *f;
	long n;

	snprintf(so, sizeof so, "%s/gemv.so", D.dir);
	snprintf(meta, sizeof meta, "%s/gemv.json", D.dir);
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=64,K=64 -o %s --meta %s", so, meta), 0, "%s", out);
	cr_assert(strstr(out, "variant gemv_m1"), "%s", out);
	f = fopen(meta, "r");
	cr_assert_not_null(f);
	bytes = malloc(1 << 20);
	n = (long)fread(bytes, 1, 1 << 20, f);
	fclose(f);
	bytes[n] = '\0';
	m = cJSON_Parse((char *)bytes);
	cr_assert_not_null(m);
	f = fopen(so, "rb");
	cr_assert_not_null(f);
	n = (long)fread(bytes, 1, 1 << 20, f);
	fclose(f);
	h = e2e_load(bytes, (size_t)n, cJSON_GetObjectItem(m,
	    "entry")->valuestring, &fn);
	cr_assert_not_null(h, "the written .so does not load");
	ks_so_unload(h);
	cJSON_Delete(m);
	free(bytes);
}

/* The manifest the README's fleet block uses (examples/manifest.json)
 * warms on a daemon and is then ready, every spec of it. */
Test(cli, the_shipped_example_manifest_warms_and_is_ready)
{
	const char *slash = strrchr(__FILE__, '/');
	char path[512];

	snprintf(path, sizeof path, "%.*s/../examples/manifest.json",
	    slash ? (int)(slash - __FILE__) : 1, slash ? __FILE__ : ".");
	cr_assert_eq(kspec("warm '%s'", path), 0, "%s", out);
	cr_assert(strstr(out, ": 4 specs: 0 cached, 4 compiled, 0 joined, 0 "
	    "failed"), "%s", out);
	cr_assert_eq(kspec("ready '%s'", path), 0, "%s", out);
	cr_assert(strstr(out, "4 of 4 specs cached"), "%s", out);
}

Test(cli, errors_map_to_exit_statuses_with_one_line)
{
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=0,N=8,K=8 --meta %s/m.json", D.dir), 1);
	cr_assert(strncmp(out, "kspec: E_BAD_SHAPE: ", 20) == 0, "%s", out);
	cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "%s", out);
	cr_assert_eq(kspec("get gemm --dtype f32"), 2);
	cr_assert_eq(kspec("frobnicate"), 2);
	cr_assert_eq(e2e_stop(&D), 0);
	cr_assert_eq(kspec("ping"), 3);
	cr_assert(strstr(out, "is kspecd running"), "%s", out);
}

Test(cli, warm_reports_items_and_exit_status)
{
	char good[400], bad[400];

	snprintf(good, sizeof good, "%s/good.json", D.dir);
	snprintf(bad, sizeof bad, "%s/bad.json", D.dir);
	write_text(good, "{\"version\":1,\"targets\":{\"cpu\":[\"x86-64-v3\","
	    "\"x86-64-v4\"]},\"specs\":[{\"kernel\":\"gemm\",\"backend\":"
	    "\"cpu\",\"dtype\":\"bf16\",\"shape\":{\"M\":1,\"N\":64,"
	    "\"K\":64}},{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":"
	    "\"f32\",\"target\":\"x86-64-v4\",\"shape\":{\"N\":64,\"K\":64},"
	    "\"dynamic\":[\"M\"]}]}");
	write_text(bad, "{\"version\":1,\"specs\":[{\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":0,"
	    "\"N\":8,\"K\":8}}]}");
	cr_assert_eq(kspec("warm %s", good), 0, "%s", out);
	cr_assert(strstr(out, "3 specs: 0 cached, 3 compiled"), "%s", out);
	cr_assert_eq(kspec("warm %s", good), 0, "%s", out);
	cr_assert(strstr(out, "3 specs: 3 cached, 0 compiled"), "%s", out);
	cr_assert_eq(kspec("warm %s", bad), 1, "%s", out);
	cr_assert(strstr(out, "FAIL") && strstr(out, "E_BAD_SHAPE"), "%s",
	    out);
	write_text(bad, "{\"specs\":[]}");
	cr_assert_eq(kspec("warm %s", bad), 1);
	cr_assert(strstr(out, "version"), "%s", out);
}

Test(cli, kernels_ls_explain_and_evict)
{
	cr_assert_eq(kspec("kernels"), 0);
	cr_assert(strstr(out, "gemm") && strstr(out, "gemv_m1"), "%s", out);
	/* Each kernel's entry arguments: buffers with their element type
	 * and access, dims and f32 scalars. */
	cr_assert(strstr(out, "arguments: q[dtype,r] k[dtype,r] v[dtype,r] "
	    "lens[i32,r] o[dtype,w] B:i64 Hq:i64 Hkv:i64 D:i64 S:i64 "
	    "scale:f32"), "%s", out);
	cr_assert(strstr(out, "x[dtype,rw] pos[i32,r]"), "%s", out);
	cr_assert(strstr(out, "wdtype with f32: f16 bf16 q8_0 q4_0 q4_k\n"),
	    "%s", out);
	cr_assert_eq(kspec("ping --json"), 0);
	cr_assert(strncmp(out, "{\"ok\":true,\"ms\":", 15) == 0, "%s", out);
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=8,K=8 --meta %s/m.json --json", D.dir), 0);
	cr_assert(strstr(out, "\"entry\":\"ks_gemm_gemv_m1\""), "%s", out);
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=64,K=64 --meta %s/m.json", D.dir), 0, "%s", out);
	cr_assert_eq(kspec("ls --kernel gemm"), 0);
	cr_assert(strstr(out, "2 of 2 entries"), "%s", out);
	cr_assert_eq(kspec("explain gemm --backend cpu --dtype bf16 --shape "
	    "M=1,N=64,K=64"), 0);
	cr_assert(strstr(out, "differs in [\"dtype\"]"), "%s", out);
	/* explain's own usage error, named as explain's. */
	cr_assert_eq(kspec("explain gemm --backend cpu --dtype f32 --shape "
	    "M="), 2);
	cr_assert(strstr(out, "kspec: explain: --shape value of 'M'"), "%s",
	    out);
	/* A value past 64 bits is out of range, not "not an integer". */
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=12345678901234567890,K=8"), 2);
	cr_assert(strstr(out, "kspec: get: --shape value of 'N' is out of "
	    "range: '12345678901234567890'"), "%s", out);
	cr_assert_eq(kspec("evict --all"), 0);
	cr_assert(strstr(out, "evicted 2"), "%s", out);
	cr_assert_eq(kspec("ls --json"), 0);
	cr_assert(strstr(out, "\"total\":0"), "%s", out);
	cr_assert_eq(kspec("evict"), 2);
}

/*
 * Misses recorded on one daemon, exported as a manifest, warm a fresh
 * store on another: the same requests then hit without compiling.
 */
Test(cli, exported_misses_warm_a_fresh_store)
{
	static const char *const gets[] = {
		"get gemm --backend cpu --dtype bf16 --shape M=1,N=64,K=64 "
		    "--meta /tmp/kspec-cli-meta.json",
		"get gemm --backend cpu --dtype f32 --shape N=32,K=32 "
		    "--dynamic M --meta /tmp/kspec-cli-meta.json",
	};
	char man[400];
	int i;

	for (i = 0; i < 2; i++)
		cr_assert_eq(kspec("%s", gets[i]), 0, "%s", out);
	/* A hit is not a miss. */
	cr_assert_eq(kspec("%s", gets[0]), 0, "%s", out);
	/* Outside D.dir, which goes with the first daemon. */
	snprintf(man, sizeof man, "/tmp/kspec-cli-misses-%ld.json",
	    (long)getpid());
	cr_assert_eq(kspec("manifest --from-misses -o %s", man), 0, "%s", out);
	cr_assert(strstr(out, "2 specs"), "%s", out);

	e2e_cleanup(&D);
	memset(&D, 0, sizeof D);
	cr_assert_eq(e2e_start(&D, NULL), 0);
	cr_assert_eq(kspec("warm %s", man), 0, "%s", out);
	cr_assert(strstr(out, "2 specs: 0 cached, 2 compiled"), "%s", out);
	for (i = 0; i < 2; i++) {
		cr_assert_eq(kspec("%s", gets[i]), 0, "%s", out);
		cr_assert(strstr(out, "source memory"), "%s", out);
	}
	cr_assert_eq(e2e_stat(D.sock, "compiles"), 2);
	unlink(man);
	unlink("/tmp/kspec-cli-meta.json");
}

/* Writing to a device or a pipe goes straight into it: the write-then-
 * rename that protects regular files must never replace the device (a
 * FIFO here, so that a regression cannot clobber /dev/null). */
Test(cli, writing_to_a_device_keeps_the_device)
{
	char fifo[400];
	struct stat st;
	int keep;

	snprintf(fifo, sizeof fifo, "%s/meta.fifo", D.dir);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	keep = open(fifo, O_RDWR);      /* a reader, so writers never block */
	cr_assert_geq(keep, 0);
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=8,K=8 --meta %s", fifo), 0, "%s", out);
	cr_assert_eq(stat(fifo, &st), 0);
	cr_assert(S_ISFIFO(st.st_mode), "kspec replaced the FIFO by a file");
	close(keep);
}

/* --version, hello --json, and the hit ratio in the stats table: gets
 * answered from memory or disk, of all gets. */
Test(cli, version_hello_json_and_the_hit_ratio)
{
	const char *r;
	int n;

	cr_assert_eq(kspec("--version"), 0);
	cr_assert_str_eq(out, "kspec " KSPEC_VERSION "\n");
	cr_assert_eq(kspec("hello --json"), 0);
	cr_assert(strstr(out, "\"server\":\"kspecd " KSPEC_VERSION "\""),
	    "%s", out);
	cr_assert_eq(kspec("stats"), 0);
	cr_assert(strstr(out, "hit_ratio                                - "
	    "(no gets yet)"), "%s", out);
	/* One compile, three memory hits: 3 of 4. */
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=8,K=8 --meta %s/m.json", D.dir), 0);
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=8,K=8 --meta %s/m.json", D.dir), 0);
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=8,K=8 --meta %s/m.json", D.dir), 0);
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=8,K=8 --meta %s/m.json", D.dir), 0);
	cr_assert_eq(kspec("stats"), 0);
	r = strstr(out, "hit_ratio ");
	cr_assert(r, "%s", out);
	cr_assert(strncmp(r + 41, "0.7500 ", 7) == 0, "%.60s", r);
	/* The summary: a screen, its subjects' figures; --all every
	 * counter (each worker, by op), the same ratio; not with --json. */
	n = 0;
	for (r = out; (r = strchr(r, '\n')); r++)
		n++;
	cr_assert(n <= 24, "%d lines: %s", n, out);
	cr_assert(strstr(out, "gets                                     4 "
	    "(from memory 3, from disk 0)\n"), "%s", out);
	cr_assert(strstr(out, "compiles                                 1 "
	    "(joined 0, failed 0, after ready 0)\n"), "%s", out);
	cr_assert(strstr(out, "latency.hit_memory                       "
	    "n=3 "), "%s", out);
	cr_assert(!strstr(out, "workers[0]"), "%s", out);
	cr_assert_eq(kspec("stats --all"), 0);
	cr_assert(strstr(out, "workers[0]                               pid="),
	    "%s", out);
	cr_assert(strstr(out, "requests_by_op.get                       "
	    "requests=4 errors=0\n"), "%s", out);
	r = strstr(out, "hit_ratio ");
	cr_assert(r && strncmp(r + 41, "0.7500 ", 7) == 0, "%s", out);
	cr_assert_eq(kspec("stats --all --json"), 2);
	/* help --help is the command list, as help is. */
	cr_assert_eq(kspec("help --help"), 0, "%s", out);
	cr_assert(strstr(out, "commands:"), "%s", out);
	/* canary --status names a healthy backend too, not only a skipped
	 * one (a fresh store: no canary to run). */
	cr_assert_eq(kspec("canary --status"), 0);
	cr_assert(strstr(out, "cpu     current: no canary to run"), "%s",
	    out);
}

/* evict --key takes the 12-digit prefix that ls prints (any prefix of 8
 * digits or more that only one key has): a shorter one is refused, one
 * that no key has is E_NOT_FOUND, and the other artifact stays. */
Test(cli, evict_takes_a_key_prefix)
{
	char prefix[13], full[65];
	const char *k;

	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=8,K=8 --meta %s/a.json --json", D.dir), 0);
	k = strstr(out, "\"key\":\"");
	cr_assert(k, "%s", out);
	memcpy(full, k + 7, 64);
	full[64] = '\0';
	memcpy(prefix, full, 12);
	prefix[12] = '\0';
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=64,K=64 --meta %s/b.json", D.dir), 0, "%s", out);
	cr_assert_eq(kspec("evict --key %.7s", full), 1);
	cr_assert(strstr(out, "E_BAD_REQUEST"), "%s", out);
	cr_assert_eq(kspec("evict --key %s", full[0] == 'f' ? "00000000" :
	    "ffffffff"), 1);
	cr_assert(strstr(out, "E_NOT_FOUND"), "%s", out);
	cr_assert_eq(kspec("evict --key %s", prefix), 0, "%s", out);
	cr_assert(strstr(out, "evicted 1"), "%s", out);
	cr_assert_eq(kspec("ls --json"), 0);
	cr_assert(strstr(out, "\"total\":1"), "%s", out);
	cr_assert_null(strstr(out, full), "the evicted key is still listed");
}

/* The key a get prints with --json (into KEY, 65 bytes). */
static void key_of_get(const char *args, char *key)
{
	const char *k;

	cr_assert_eq(kspec("get %s --meta %s/m.json --json", args, D.dir), 0,
	    "%s", out);
	k = strstr(out, "\"key\":\"");
	cr_assert(k, "%s", out);
	memcpy(key, k + 7, 64);
	key[64] = '\0';
}

/* The line of the table in OUT that starts with KEY's 12 digits. */
static const char *row_of(const char *key)
{
	const char *p;

	for (p = out; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, key, 12) == 0)
			return p;
	return NULL;
}

/* The column (offset in its line) at which WORD starts in LINE. */
static long col_of(const char *line, const char *word)
{
	const char *w = strstr(line, word), *nl = strchr(line, '\n');

	cr_assert(w && (!nl || w < nl), "no '%s' in: %s", word, line);
	return w - line;
}

/* ls shows what each entry is, from its row's columns, in a table whose
 * columns line up whatever the width of their cells. */
Test(cli, ls_shows_kernel_backend_target_dtype_shape_variant_size_age)
{
	static const char *const heads[] = { "kernel", "backend", "target",
	    "dtype", "shape", "variant", "size", "age", "mem" };
	char k1[65], k2[65], target[64];
	const char *r1, *r2, *t;
	size_t i;

	key_of_get("gemm --backend cpu --dtype f32 --shape M=1,N=64,K=64",
	    k1);
	t = strstr(out, "\"target\":\"");
	cr_assert(t, "%s", out);
	snprintf(target, sizeof target, "%.*s", (int)strcspn(t + 10, "\""),
	    t + 10);
	key_of_get("attention_decode --backend cpu --dtype bf16 --shape "
	    "B=1,Hq=32,Hkv=8,D=128 --dynamic S", k2);
	cr_assert_eq(kspec("ls"), 0, "%s", out);
	cr_log_info("%s", out);
	cr_assert_eq(strncmp(out, "key ", 4), 0, "%s", out);
	r1 = row_of(k1);
	r2 = row_of(k2);
	cr_assert(r1 && r2, "%s", out);
	/* Each cell under its header, in both rows. */
	cr_assert_eq(col_of(r1, "gemm "), col_of(out, "kernel"));
	cr_assert_eq(col_of(r2, "attention_decode"), col_of(out, "kernel"));
	cr_assert_eq(col_of(r1, " cpu ") + 1, col_of(out, "backend"));
	cr_assert_eq(col_of(r1, target), col_of(out, "target"));
	cr_assert_eq(col_of(r1, " f32 ") + 1, col_of(out, "dtype"));
	cr_assert_eq(col_of(r2, " bf16 ") + 1, col_of(out, "dtype"));
	cr_assert_eq(col_of(r1, "M=1,N=64,K=64"), col_of(out, "shape"));
	cr_assert_eq(col_of(r2, "B=1,Hq=32,Hkv=8,D=128,S=dyn"), col_of(out,
	    "shape"));
	cr_assert_eq(col_of(r1, "gemv_m1"), col_of(out, "variant"));
	cr_assert_eq(col_of(r2, " gqa ") + 1, col_of(out, "variant"));
	/* Sizes and ages right-aligned under theirs, ages in seconds. */
	cr_assert_eq(col_of(r1, "K  ") + 1, col_of(out, "size") + 4, "%s",
	    out);
	cr_assert_eq(col_of(r2, "K  ") + 1, col_of(out, "size") + 4, "%s",
	    out);
	cr_assert_eq(col_of(r1, "s  yes") + 1, col_of(out, "age") + 3, "%s",
	    out);
	for (i = 1; i < sizeof heads / sizeof heads[0]; i++)
		cr_assert_gt(col_of(out, heads[i]), col_of(out, heads[i - 1]));
	cr_assert(strstr(out, "2 of 2 entries"), "%s", out);
	/* --json: every field of the row, the age as the time of the put. */
	cr_assert_eq(kspec("ls --json --kernel gemm"), 0, "%s", out);
	cr_assert(strstr(out, "\"shape\":\"M=1,N=64,K=64\""), "%s", out);
	cr_assert(strstr(out, "\"variant\":\"gemv_m1\""), "%s", out);
	cr_assert(strstr(out, "\"compiler\":\"libgccjit"), "%s", out);
	cr_assert(strstr(out, "\"created_ms\":1"), "%s", out);
	cr_assert(strstr(out, "\"total\":1"), "%s", out);
}

/* The artifact the stopped daemon stored under hex KEY. */
static ks_artifact_t *stored(ks_store_t *st, const char *key)
{
	ks_artifact_t *a = NULL;
	ks_hash_t k;

	cr_assert_eq(ks_hash_from_hex(key, &k), KS_OK);
	cr_assert_eq(ks_store_get(st, &k, &a), KS_OK);
	return a;
}

/* Sets the string field FIELD of the meta in M (CAP bytes) to VALUE. */
static void set_field(char *m, size_t cap, const char *field,
    const char *value)
{
	char pat[64], *copy = strdup(m);
	const char *at, *end;

	cr_assert_not_null(copy);
	snprintf(pat, sizeof pat, "\"%s\":\"", field);
	at = strstr(copy, pat);
	cr_assert(at, "no %s in %s", field, copy);
	at += strlen(pat);
	for (end = at; *end != '"'; end++)
		end += *end == '\\';
	snprintf(m, cap, "%.*s%s%s", (int)(at - copy), copy, value, end);
	free(copy);
}

/* Puts a copy of A's bytes under the key NAME hashes to (its hex into
 * HEX), with the string fields of its meta that the NULL-terminated
 * (field, value) pairs name set to their values. */
static void plant(ks_store_t *st, const ks_artifact_t *a, const char *name,
    char *hex, ...)
{
	char meta[8192];
	const char *field;
	ks_artifact_t *b;
	ks_hash_t k;
	va_list ap;

	snprintf(meta, sizeof meta, "%s", a->meta);
	va_start(ap, hex);
	while ((field = va_arg(ap, const char *)) != NULL)
		set_field(meta, sizeof meta, field, va_arg(ap, const char *));
	va_end(ap);
	ks_hash(name, strlen(name), &k);
	ks_hash_hex(&k, hex);
	b = ks_artifact_new(&k, meta, a->bytes, a->len);
	cr_assert_not_null(b);
	cr_assert_eq(ks_store_put(st, b), KS_OK);
	ks_artifact_unref(b);
}

static ks_store_t *open_stopped_store(void)
{
	ks_store_t *st = NULL;
	char err[512];

	cr_assert_eq(ks_base_init(), KS_OK);
	cr_assert_eq(e2e_stop(&D), 0);
	cr_assert_eq(ks_store_open(D.store, 0, &st, err, sizeof err), KS_OK,
	    "%s", err);
	return st;
}

/* Starts the daemon again on D's store, with cuda unavailable when
 * NO_CUDA (no NVRTC, as on a machine without the toolkit). */
static void restart(int no_cuda)
{
	if (no_cuda)
		setenv("KSPEC_NVRTC_DISABLE", "1", 1);
	cr_assert_eq(e2e_start(&D, NULL), 0, "kspecd did not start");
	unsetenv("KSPEC_NVRTC_DISABLE");
}

/* 1 when the JSON in OUT lists KEY among "entries" with REASON. */
static int listed_with(const char *key, const char *reason)
{
	cJSON *j = cJSON_Parse(out), *e;
	int found = 0;

	cr_assert(j, "%s", out);
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(j, "entries"))
		found |= strcmp(cJSON_GetObjectItem(e, "key")->valuestring,
		    key) == 0 && strcmp(cJSON_GetObjectItem(e,
		    "reason")->valuestring, reason) == 0;
	cJSON_Delete(j);
	return found;
}

/*
 * evict --stale removes the rows no request can reach any more, beside a
 * current one: one of an older kernel definition (its key is not what the
 * spec gets now, with today's compiler), one of an older compiler, one of
 * a kernel gone from the library.  A row of a backend unavailable now is
 * kept, and is found stale once that backend is there (when this machine
 * has NVRTC).  --dry-run lists the same and removes nothing.
 */
Test(cli, evict_stale_removes_unreachable_rows_and_keeps_unavailable_ones)
{
	char cur[65], fp[65], cc[65], gone[65], cuda[65];
	ks_artifact_t *a;
	ks_store_t *st;
	cJSON *j;

	key_of_get("gemm --backend cpu --dtype f32 --shape M=1,N=64,K=64",
	    cur);
	st = open_stopped_store();
	a = stored(st, cur);
	plant(st, a, "older definition", fp, NULL);
	plant(st, a, "older compiler", cc, "compiler", "libgccjit 11.0 -O3",
	    NULL);
	plant(st, a, "gone kernel", gone, "kernel", "gemm_v0", NULL);
	/* NVRTC's of some other day, for sm_90. */
	plant(st, a, "cuda row", cuda, "backend", "cuda", "target", "sm_90",
	    "format", "ptx", "compiler", "nvrtc 11.0 sm_90", NULL);
	ks_artifact_unref(a);
	ks_store_close(st);
	restart(1);

	cr_assert_eq(kspec("evict --stale --dry-run"), 0, "%s", out);
	cr_log_info("%s", out);
	cr_assert(strstr(out, "would evict 3 stale entries"), "%s", out);
	cr_assert(strstr(out, "kept 1 whose backend"), "%s", out);
	cr_assert(row_of(fp) && strstr(row_of(fp), "fingerprint"), "%s", out);
	cr_assert(row_of(cc) && strstr(row_of(cc), "compiler"), "%s", out);
	cr_assert(row_of(gone) && strstr(row_of(gone), "gemm_v0"), "%s", out);
	cr_assert_null(row_of(cur), "%s", out);
	cr_assert_null(row_of(cuda), "%s", out);
	cr_assert_eq(kspec("evict --stale --dry-run --json"), 0, "%s", out);
	j = cJSON_Parse(out);
	cr_assert(j, "%s", out);
	cr_assert_eq(e2e_num(j, "evicted"), 3);
	cr_assert_eq(e2e_num(j, "bytes"), 3 * e2e_num(cJSON_GetArrayItem(
	    cJSON_GetObjectItem(j, "entries"), 0), "bytes"));
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "dry_run")));
	cr_assert_eq(e2e_num(j, "unchecked"), 1);
	cJSON_Delete(j);
	cr_assert(listed_with(fp, "fingerprint") && listed_with(cc,
	    "compiler") && listed_with(gone, "kernel"), "%s", out);
	cr_assert_eq(kspec("ls --json"), 0);
	cr_assert(strstr(out, "\"total\":5"), "the dry run removed: %s", out);

	cr_assert_eq(kspec("evict --stale"), 0, "%s", out);
	cr_assert(strstr(out, "evicted 3 stale entries"), "%s", out);
	cr_assert_eq(kspec("ls --json"), 0);
	cr_assert(strstr(out, "\"total\":2"), "%s", out);
	cr_assert(strstr(out, cur) && strstr(out, cuda), "%s", out);
	cr_assert(!strstr(out, fp) && !strstr(out, cc) && !strstr(out, gone),
	    "%s", out);
	cr_assert_eq(kspec("evict --stale --json"), 0, "%s", out);
	cr_assert(strstr(out, "\"evicted\":0,\"bytes\":0"), "%s", out);
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=64,K=64 --meta %s/m.json", D.dir), 0, "%s", out);
	cr_assert(strstr(out, "source disk"), "the current row: %s", out);
	cr_assert_eq(kspec("evict --dry-run"), 2, "%s", out);
	cr_assert(strstr(out, "--dry-run goes with --stale"), "%s", out);

	/* With cuda there, the row it kept is one no request reaches. */
	e2e_stop(&D);
	restart(0);
	cr_assert_eq(kspec("hello"), 0);
	if (!strstr(out, "\"name\":\"cuda\",\"format\":\"ptx\","
	    "\"available\":true")) {
		cr_log_info("no NVRTC here: the cuda row's other side is not "
		    "checked");
		return;
	}
	cr_assert_eq(kspec("evict --stale --dry-run --json"), 0, "%s", out);
	cr_assert(listed_with(cuda, "fingerprint") || listed_with(cuda,
	    "compiler"), "%s", out);
}

/* An ambiguous key prefix is refused with the keys that have it, whole,
 * so that the one meant can be given. */
Test(cli, ambiguous_key_prefix_lists_the_keys_that_have_it)
{
	char cur[65], twin[65];
	ks_artifact_t *a, *b;
	ks_store_t *st;
	ks_hash_t k;

	key_of_get("gemm --backend cpu --dtype f32 --shape M=1,N=8,K=8", cur);
	st = open_stopped_store();
	a = stored(st, cur);
	/* The same first 62 digits. */
	snprintf(twin, sizeof twin, "%.62s%s", cur, strcmp(cur + 62, "00") ?
	    "00" : "01");
	cr_assert_eq(ks_hash_from_hex(twin, &k), KS_OK);
	b = ks_artifact_new(&k, a->meta, a->bytes, a->len);
	cr_assert_eq(ks_store_put(st, b), KS_OK);
	ks_artifact_unref(a);
	ks_artifact_unref(b);
	ks_store_close(st);
	restart(0);
	cr_assert_eq(kspec("evict --key %.12s", cur), 1, "%s", out);
	cr_log_info("%s", out);
	cr_assert(strstr(out, "E_BAD_REQUEST") && strstr(out, "not unique"),
	    "%s", out);
	cr_assert(strstr(out, cur) && strstr(out, twin), "%s", out);
	cr_assert_eq(strchr(out, '\n'), out + strlen(out) - 1, "%s", out);
	cr_assert_eq(kspec("evict --key %s", twin), 0, "%s", out);
	cr_assert(strstr(out, "evicted 1"), "%s", out);
	cr_assert_eq(kspec("evict --key %.12s", cur), 0, "%s", out);
	cr_assert(strstr(out, "evicted 1"), "%s", out);
}

/* Every command takes --json, as docs/cli.md says, and then prints JSON. */
Test(cli, every_command_takes_json)
{
	static const char *const cmds[] = {
		"ping --json", "stats --json", "kernels --json", "hello --json",
		"ls --json", "manifest --from-misses --json",
		"get gemm --backend cpu --dtype f32 --shape M=1,N=8,K=8 "
		    "--meta %s/m.json --json",
		"explain gemm --backend cpu --dtype f32 --shape M=1,N=8,K=8 "
		    "--json",
		"warm %s/w.json --json", "evict --all --json",
	};
	char path[400];
	size_t i;

	snprintf(path, sizeof path, "%s/w.json", D.dir);
	write_text(path, "{\"version\":1,\"specs\":[{\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,\"N\":16,\"K\":16}}]}");
	for (i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
		cJSON *j;

		cr_assert_eq(kspec(cmds[i], D.dir), 0, "%s: %s", cmds[i], out);
		j = cJSON_Parse(out);
		cr_assert(j, "%s printed no JSON: %s", cmds[i], out);
		cJSON_Delete(j);
	}
	/* The fleet commands (docs/fleet.md), with the manifest's spec
	 * cached again (the evict above removed it). */
	cr_assert_eq(kspec("warm %s/w.json", D.dir), 0, "%s", out);
	for (i = 0; i < 3; i++) {
		cJSON *j;

		if (i == 0)
			cr_assert_eq(kspec("fleet-key generate %s/fk --json",
			    D.dir), 0, "%s", out);
		else if (i == 1)
			cr_assert_eq(kspec("bundle export %s/w.json -o %s/b.kspec "
			    "--sign-key %s/fk.secret --json", D.dir, D.dir,
			    D.dir), 0, "%s", out);
		else
			cr_assert_eq(kspec("ready %s/w.json --json", D.dir), 0,
			    "%s", out);
		j = cJSON_Parse(out);
		cr_assert(j, "printed no JSON: %s", out);
		cJSON_Delete(j);
	}
}

/* ---- warm, a spec at a time ---- */

/* Writes a manifest of N cold gemm specs (distinct N dims) to PATH. */
static void write_cold_manifest(const char *path, int n)
{
	char text[16384];
	int i, k;

	k = snprintf(text, sizeof text, "{\"version\":1,\"specs\":[");
	for (i = 0; i < n; i++)
		k += snprintf(text + k, sizeof text - (size_t)k, "%s{"
		    "\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":"
		    "\"f32\",\"shape\":{\"M\":1,\"N\":%d,\"K\":512}}",
		    i ? "," : "", 64 + 8 * i);
	snprintf(text + k, sizeof text - (size_t)k, "]}");
	write_text(path, text);
}

/* Restarts the daemon with one compile worker, so that compiles queue. */
static void one_worker(void)
{
	static const char *const extra[] = { "--workers", "1", NULL };

	e2e_cleanup(&D);
	memset(&D, 0, sizeof D);
	cr_assert_eq(e2e_start(&D, extra), 0);
}

/* Starts `kspec --socket SOCK warm PATH` as a child whose stdout and
 * stderr go to a pipe; *FD reads it. */
static pid_t spawn_warm(const char *path, int *fd)
{
	char bin[512];
	int p[2];
	pid_t pid;

	snprintf(bin, sizeof bin, "%s/kspec", e2e_build_dir());
	cr_assert_eq(pipe(p), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		close(p[0]);
		close(p[1]);
		execl(bin, bin, "--socket", D.sock, "warm", path, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	*fd = p[0];
	return pid;
}

/* Reads FD into `out` until a line starting with PREFIX is complete (or,
 * with PREFIX NULL, to the end).  Returns the bytes read. */
static size_t read_until_line(int fd, const char *prefix)
{
	size_t n = strlen(out);
	ssize_t k;

	for (;;) {
		const char *l = prefix ? strstr(out, prefix) : NULL;

		if (l && (l == out || l[-1] == '\n') && strchr(l, '\n'))
			return n;
		if (n + 1 >= sizeof out)
			return n;
		k = read(fd, out + n, sizeof out - 1 - n);
		if (k <= 0)
			return n;
		n += (size_t)k;
		out[n] = '\0';
	}
}

/* With one compile worker, starts `kspec warm` on a manifest of N cold
 * specs and reads its output up to its first "ok" line; *FD reads on. */
static pid_t warm_cold(int n, int *fd)
{
	char path[400];
	pid_t pid;

	one_worker();
	snprintf(path, sizeof path, "%s/cold.json", D.dir);
	write_cold_manifest(path, n);
	out[0] = '\0';
	pid = spawn_warm(path, fd);
	read_until_line(*fd, "ok    ");
	return pid;
}

/* The counts of the warm summary line ("warm PATH: N specs: ..."): N,
 * or 0 when there is none. */
static int summary_of(int *cached, int *compiled, int *failed,
    int *cancelled)
{
	const char *s, *d;
	int total, joined;

	for (s = strstr(out, " specs: "); s; s = strstr(s + 1, " specs: ")) {
		for (d = s; d > out && d[-1] >= '0' && d[-1] <= '9'; d--)
			;
		if (d == s || d - out < 2 || d[-2] != ':')
			continue;
		if (sscanf(d, "%d specs: %d cached, %d compiled, %d joined, "
		    "%d failed, %d cancelled", &total, cached, compiled,
		    &joined, failed, cancelled) == 6)
			return total;
	}
	return 0;
}

/* Compiles queued in the daemon, not yet running (stats "inflight"). */
static int queued_flights(void)
{
	const cJSON *f;
	e2e_reply_t r;
	int n = 0;

	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"stats\"}", &r), 0);
	cJSON_ArrayForEach(f, cJSON_GetObjectItem(r.h, "inflight"))
		n += strcmp(cJSON_GetObjectItem(f, "state")->valuestring,
		    "queued") == 0;
	e2e_reply_free(&r);
	return n;
}

/* Lines of `out` that start with PREFIX. */
static int lines_starting(const char *prefix)
{
	const char *l;
	int n = 0;

	for (l = out; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
		n += strncmp(l, prefix, strlen(prefix)) == 0;
	return n;
}

/*
 * Bad specs in the middle of a manifest (a typo the parser refuses, an
 * unknown kernel, a duplicate key that fails its whole request) are
 * reported by their index in the manifest's "specs" with the error code,
 * the rest are warmed, and the summary comes last, exit status 1.  The
 * first spec expands over two targets, so that manifest indexes and
 * request items differ.
 */
Test(cli, warm_reports_a_bad_spec_by_its_manifest_index_and_goes_on)
{
	char path[400];
	int cached, compiled, failed, cancelled;
	const cJSON *it;
	cJSON *j;

	snprintf(path, sizeof path, "%s/mixed.json", D.dir);
	write_text(path, "{\"version\":1,\"targets\":{\"cpu\":[\"x86-64-v3\","
	    "\"x86-64-v4\"]},\"specs\":["
	    "{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\","
	    "\"shape\":{\"M\":1,\"N\":64,\"K\":64}},"
	    "{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\","
	    "\"target\":\"x86-64-v3\",\"shpe\":{\"M\":1,\"N\":8,\"K\":8}},"
	    "{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"bf16\","
	    "\"target\":\"x86-64-v3\",\"shape\":{\"M\":1,\"N\":32,\"K\":32}},"
	    "{\"kernel\":\"nope\",\"backend\":\"cpu\",\"dtype\":\"f32\","
	    "\"target\":\"x86-64-v3\",\"shape\":{\"M\":1}},"
	    "{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\","
	    "\"target\":\"x86-64-v3\",\"shape\":{\"M\":1,\"N\":8,\"N\":9,"
	    "\"K\":8}},"
	    "{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f16\","
	    "\"target\":\"x86-64-v3\",\"shape\":{\"M\":1,\"N\":32,\"K\":32}}"
	    "]}");
	cr_assert_eq(kspec("warm %s", path), 1, "%s", out);
	cr_log_info("%s", out);
	cr_assert(strstr(out, "FAIL  specs[1] ") && strstr(out,
	    "E_UNKNOWN_FIELD: unknown field 'shpe'"), "%s", out);
	cr_assert(strstr(out, "FAIL  specs[3] nope ") && strstr(out,
	    "E_UNKNOWN_KERNEL"), "%s", out);
	cr_assert(strstr(out, "FAIL  specs[4] ") && strstr(out,
	    "E_DUPLICATE_KEY"), "%s", out);
	cr_assert_eq(lines_starting("FAIL  "), 3, "%s", out);
	cr_assert_eq(lines_starting("ok    specs[0] "), 2, "%s", out);
	cr_assert_eq(lines_starting("ok    specs[2] "), 1, "%s", out);
	cr_assert_eq(lines_starting("ok    specs[5] "), 1, "%s", out);
	cr_assert_eq(summary_of(&cached, &compiled, &failed, &cancelled), 7,
	    "%s", out);
	cr_assert_eq(compiled, 4);
	cr_assert_eq(failed, 3);
	cr_assert_eq(cancelled, 0);
	cr_assert(strstr(strstr(out, "warm "), " s\n"), "no time: %s", out);

	/* --json: each spec's result with its manifest index, the counts. */
	cr_assert_eq(kspec("warm %s --json", path), 1, "%s", out);
	j = cJSON_Parse(out);
	cr_assert_not_null(j, "%s", out);
	cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "items")), 7);
	it = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "items"), 5);
	cr_assert_eq(e2e_num(it, "index"), 5);
	cr_assert_eq(e2e_num(it, "spec"), 4);
	cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(it, "error"),
	    "code")->valuestring, "E_DUPLICATE_KEY");
	cr_assert_eq(e2e_num(j, "cached"), 4);
	cr_assert_eq(e2e_num(j, "failed"), 3);
	cr_assert_eq(e2e_num(j, "cancelled"), 0);
	cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(j, "interrupted")));
	cJSON_Delete(j);
}

/*
 * Progress is per spec: the first spec's line comes out while the others
 * still compile (one worker, eight cold specs), and every spec has its
 * line.
 */
Test(cli, warm_reports_each_spec_as_it_completes)
{
	int fd, st, cached, compiled, failed, cancelled;
	pid_t pid = warm_cold(8, &fd);

	cr_assert_eq(lines_starting("ok    "), 1, "%s", out);
	cr_assert_eq(waitpid(pid, &st, WNOHANG), 0, "kspec warm had ended "
	    "when its first line came: %s", out);
	cr_assert_geq(queued_flights(), 1, "nothing queued behind the first "
	    "spec: %s", out);
	read_until_line(fd, NULL);
	close(fd);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", out);
	cr_assert_eq(lines_starting("ok    specs["), 8, "%s", out);
	cr_assert_eq(summary_of(&cached, &compiled, &failed, &cancelled), 8,
	    "%s", out);
	cr_assert_eq(compiled, 8);
}

/*
 * Ctrl-C of a running warm: the daemon takes back what was still queued
 * (abandoned in its stats, never compiled), kspec prints the summary
 * with the count cancelled and exits 130; the compile that was running
 * finishes and is stored.
 */
Test(cli, warm_interrupted_cancels_what_is_queued)
{
	int fd, st, cached, compiled, failed, cancelled, running = 0, i;
	pid_t pid = warm_cold(40, &fd);
	e2e_reply_t lr;
	const char *r;

	cr_assert_geq(queued_flights(), 10, "%s", out);
	cr_assert_eq(kill(pid, SIGINT), 0);
	read_until_line(fd, NULL);
	close(fd);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_log_info("%s", out);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 130, "status %d: %s",
	    st, out);
	cr_assert_eq(summary_of(&cached, &compiled, &failed, &cancelled), 40,
	    "%s", out);
	cr_assert(strstr(out, "(interrupted)"), "%s", out);
	r = strstr(out, "cancelled, ");
	if (r)
		sscanf(r, "cancelled, %d still compiling", &running);
	cr_assert_geq(cancelled, 10, "%s", out);
	cr_assert_eq(compiled + cancelled + running, 40, "%s", out);
	/* The daemon dropped the cancelled specs' flights at once. */
	cr_assert_eq(e2e_stat(D.sock, "abandoned"), cancelled);
	cr_assert_eq(queued_flights(), 0);
	/* Stored: what compiled and what was running, nothing else. */
	for (i = 0; i < 500; i++) {
		cr_assert_eq(e2e_call(D.sock, "{\"op\":\"list\"}", &lr), 0);
		st = (int)e2e_num(lr.h, "total");
		e2e_reply_free(&lr);
		if (st == compiled + running)
			break;
		usleep(10000);
	}
	cr_assert_eq(st, compiled + running, "%d stored", st);
	usleep(300000);
	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"list\"}", &lr), 0);
	cr_assert_eq(e2e_num(lr.h, "total"), compiled + running);
	e2e_reply_free(&lr);
}

/* ---- ready ---- */

/* A manifest's readiness: coverage and what is missing, then --wait
 * warms it; a spec that can never be cached is named with its error. */
Test(cli, ready_says_what_is_missing_and_wait_warms_it)
{
	char man[400], bad[400];
	cJSON *j;

	snprintf(man, sizeof man, "%s/r.json", D.dir);
	write_cold_manifest(man, 3);
	cr_assert_eq(kspec("ready %s", man), 1, "%s", out);
	cr_assert(strstr(out, "not ready: 0 of 3 specs cached"), "%s", out);
	cr_assert(strstr(out, "specs[2] gemm: not cached (key "), "%s", out);
	cr_assert_eq(e2e_stat(D.sock, "compiles"), 0, "ready compiled");
	cr_assert_eq(kspec("ready %s --wait 120", man), 0, "%s", out);
	cr_assert(strstr(out, "ready: 3 of 3 specs cached"), "%s", out);
	cr_assert_eq(kspec("ready %s --json", man), 0, "%s", out);
	j = cJSON_Parse(out);
	cr_assert(j, "%s", out);
	cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(j, "ready")));
	cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "missing")), 0);
	cJSON_Delete(j);
	/* One cached spec after the evict of the others. */
	cr_assert_eq(kspec("evict --all"), 0, "%s", out);
	snprintf(bad, sizeof bad, "%s/bad.json", D.dir);
	write_text(bad, "{\"version\":1,\"specs\":[{\"kernel\":\"nosuch\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1}},"
	    "{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\","
	    "\"shape\":{\"M\":1,\"N\":8,\"K\":8}}]}");
	cr_assert_eq(kspec("ready %s --wait 60", bad), 1, "%s", out);
	cr_assert(strstr(out, "not ready: 1 of 2 specs cached"), "%s", out);
	cr_assert(strstr(out, "specs[0] nosuch: E_UNKNOWN_KERNEL"), "%s", out);
	/* The bad spec last: the ones before it are still warmed. */
	write_text(bad, "{\"version\":1,\"specs\":[{\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"N\":24,\"K\":8}},{\"kernel\":\"nosuch\",\"backend\":\"cpu\","
	    "\"dtype\":\"f32\",\"shape\":{\"M\":1}}]}");
	cr_assert_eq(kspec("ready %s --wait 60", bad), 1, "%s", out);
	cr_assert(strstr(out, "not ready: 1 of 2 specs cached"), "%s", out);
}

/* --wait that runs out: not ready, and what was still queued is taken
 * back in the daemon (counted abandoned), not compiled. */
Test(cli, ready_wait_that_runs_out_cancels_the_queue)
{
	char man[400];
	double abandoned = -1;
	int i;

	one_worker();
	snprintf(man, sizeof man, "%s/cold.json", D.dir);
	write_cold_manifest(man, 24);
	cr_assert_eq(kspec("ready %s --wait 1", man), 1, "%s", out);
	cr_assert(strstr(out, "(--wait ran out)"), "%s", out);
	for (i = 0; i < 100; i++) {
		abandoned = e2e_stat(D.sock, "abandoned");
		if (abandoned > 0 && e2e_stat(D.sock, "queue_depth") == 0)
			break;
		usleep(100000);
	}
	cr_assert_gt(abandoned, 0, "nothing queued was taken back");
	/* What ran is stored; what was taken back is not. */
	cr_assert_eq(kspec("ls --json"), 0, "%s", out);
	cr_assert_null(strstr(out, "\"total\":24"), "every spec compiled");
}

/* ---- deployments ---- */

/* Stats field NAME of object OBJ ("" for the top level). */
static double stat_in(const char *obj, const char *name)
{
	e2e_reply_t r;
	double v;

	cr_assert_eq(e2e_call(D.sock, "{\"op\":\"stats\"}", &r), 0);
	v = e2e_num(obj[0] ? cJSON_GetObjectItemCaseSensitive(r.h, obj) :
	    r.h, name);
	e2e_reply_free(&r);
	return v;
}

/* A compiler upgrade (the test build's identity suffix) gives every spec
 * a new key: the start queues the deployment's specs for their compile,
 * before anyone asks, and once they are in the deployment is ready
 * without a --wait; the next start under the same compilers queues
 * nothing.  Three starts, three cold gemm compiles and an upgrade's
 * canary: its own liveness limit is the sum of its waits' (120 s each),
 * not the suite's 120 s, which a loaded 2-core machine reached. */
Test(cli, a_deployment_is_recompiled_at_the_start_after_an_upgrade,
    .timeout = 360)
{
	static const char *const extra[] = { "--workers", "2", NULL };
	char man[400];
	int i;

	e2e_cleanup(&D);
	memset(&D, 0, sizeof D);
	D.program = "tests/kspecd-plant";
	cr_assert_eq(e2e_start(&D, extra), 0);
	snprintf(man, sizeof man, "%s/dep.json", D.dir);
	write_cold_manifest(man, 3);
	cr_assert_eq(kspec("deploy add llama %s", man), 0, "%s", out);
	cr_assert_eq(kspec("ready llama --wait 120"), 0, "%s", out);
	cr_assert_eq(stat_in("upgrade_recompiles", "queued"), 0);
	cr_assert_eq(e2e_stop(&D), 0);

	setenv("KSPEC_TEST_PLANT_IDENTITY_SUFFIX", " (upgraded)", 1);
	/* The deployment is gemm's: the upgrade's other canaries are not
	 * what this test is about. */
	setenv("KSPEC_TEST_PLANT_CANARY_ONLY", "gemm", 1);
	i = e2e_start(&D, extra);
	cr_assert_eq(i, 0);
	cr_assert_eq(stat_in("upgrade_recompiles", "queued"), 3);
	for (i = 0; i < 1200 && stat_in("upgrade_recompiles", "compiled") +
	    stat_in("upgrade_recompiles", "failed") < 3; i++)
		usleep(100000);
	cr_assert_eq(stat_in("upgrade_recompiles", "compiled"), 3);
	cr_assert_eq(kspec("ready llama"), 0, "%s", out);
	cr_assert(strstr(out, "ready: 3 of 3 specs cached"), "%s", out);
	cr_assert_eq(kspec("deploy ls llama --json"), 0, "%s", out);
	cr_assert(strstr(out, "\"pinned\":3"), "%s", out);
	/* The old entries are still there, under their old keys; the new
	 * ones are pinned now. */
	cr_assert_eq(kspec("ls --json"), 0, "%s", out);
	cr_assert(strstr(out, "\"total\":6"), "%s", out);
	cr_assert_eq(e2e_stop(&D), 0);
	cr_assert_eq(e2e_start(&D, extra), 0);
	unsetenv("KSPEC_TEST_PLANT_IDENTITY_SUFFIX");
	unsetenv("KSPEC_TEST_PLANT_CANARY_ONLY");
	cr_assert_eq(stat_in("upgrade_recompiles", "queued"), 0);
	cr_assert_eq(kspec("deploy ls llama --json"), 0, "%s", out);
	cr_assert(strstr(out, "\"ready\":true"), "%s", out);
}

/* A deployment registered, not ready with its coverage, ready after
 * --wait; its kernels outlive the budget's evictions; removed. */
Test(cli, a_deployment_is_pinned_and_gated_on)
{
	/* No memory tier: what is cached is what the store keeps. */
	static const char *const extra[] = { "--workers", "1", "--max-bytes",
	    "30K", "--hot-bytes", "0", NULL };
	char man[400], big[400];
	cJSON *j;
	int n;

	e2e_cleanup(&D);
	memset(&D, 0, sizeof D);
	cr_assert_eq(e2e_start(&D, extra), 0);
	snprintf(man, sizeof man, "%s/dep.json", D.dir);
	write_cold_manifest(man, 3);
	cr_assert_eq(kspec("deploy add llama %s", man), 0, "%s", out);
	cr_assert(strstr(out, "3 specs registered"), "%s", out);
	cr_assert_eq(kspec("deploy ls"), 0, "%s", out);
	cr_assert(strstr(out, "llama                          3       0       3"),
	    "%s", out);
	cr_assert_eq(kspec("ready llama"), 1, "%s", out);
	cr_assert(strstr(out, "not ready: 0 of 3 specs cached"), "%s", out);
	/* Before it is ready, a miss of its client is not late. */
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=8,K=8 --deployment llama --meta /dev/null"), 0, "%s", out);
	cr_assert_eq(e2e_stat(D.sock, "late_compiles"), 0);
	cr_assert_eq(kspec("ready llama --wait 120"), 0, "%s", out);
	cr_assert(strstr(out, "ready: 3 of 3 specs cached"), "%s", out);
	/* Ready: a get of its client that compiles is late (logged,
	 * counted, offered as a manifest); one that hits, or a get that
	 * declares no deployment, is not. */
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=8,K=8 --deployment llama --meta /dev/null"), 0, "%s", out);
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=72,K=512 --deployment llama --meta /dev/null"), 0, "%s",
	    out);
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=16,K=8 --meta /dev/null"), 0, "%s", out);
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=24,K=8 --deployment llama --meta /dev/null"), 0, "%s", out);
	cr_assert_eq(e2e_stat(D.sock, "late_compiles"), 1);
	cr_assert_eq(kspec("manifest --from-misses --deployment llama"), 0,
	    "%s", out);
	cr_assert(strstr(out, "\"N\":\t24") && !strstr(out, "\"N\":\t16") &&
	    !strstr(out, "\"N\":\t72"), "%s", out);
	cr_assert_eq(kspec("deploy ls llama --json"), 0, "%s", out);
	cr_assert(strstr(out, "\"ready\":true,\"late_compiles\":1"), "%s",
	    out);
	cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
	    "M=1,N=8,K=8 --deployment 'no such' --meta /dev/null"), 2, "%s",
	    out);
	/* Pins that would not fit the budget are refused, estimated from
	 * the stored gemm entries for the specs not compiled yet. */
	snprintf(big, sizeof big, "%s/big.json", D.dir);
	write_cold_manifest(big, 24);
	cr_assert_eq(kspec("deploy add big %s", big), 1, "%s", out);
	cr_assert(strstr(out, "E_TOO_LARGE") && strstr(out, "budget"), "%s",
	    out);
	/* Other kernels, more than the budget holds: the LRU goes, the
	 * deployment's stay. */
	for (n = 8; n <= 64; n += 8)
		cr_assert_eq(kspec("get gemm --backend cpu --dtype f32 --shape "
		    "M=1,N=%d,K=16 --meta /dev/null", n), 0, "%s", out);
	cr_assert_eq(kspec("ready llama"), 0, "a pinned kernel was evicted: %s",
	    out);
	cr_assert_eq(kspec("ls --json"), 0, "%s", out);
	j = cJSON_Parse(out);
	cr_assert(j);
	cr_assert_lt(cJSON_GetObjectItem(j, "total")->valueint, 11,
	    "nothing was evicted: the test proves nothing");
	cJSON_Delete(j);
	cr_assert_eq(kspec("deploy ls llama --json"), 0, "%s", out);
	cr_assert(strstr(out, "\"cached\":3"), "%s", out);
	/* The deployment and its pins outlive a restart (which keys it
	 * again, to the same keys under the same compilers). */
	cr_assert_eq(e2e_stop(&D), 0);
	cr_assert_eq(e2e_start(&D, extra), 0);
	cr_assert_eq(kspec("deploy ls llama --json"), 0, "%s", out);
	cr_assert(strstr(out, "\"cached\":3,\"pinned\":3,\"ready\":true,"
	    "\"late_compiles\":1"), "the start did not find it ready, or "
	    "lost its late compile: %s", out);
	cr_assert_eq(kspec("deploy rm llama"), 0, "%s", out);
	cr_assert_eq(kspec("deploy rm llama"), 1, "%s", out);
	cr_assert(strstr(out, "E_NOT_FOUND"), "%s", out);
	cr_assert_eq(kspec("ready llama"), 1, "%s", out);
	cr_assert(strstr(out, "E_NOT_FOUND") && strstr(out, "llama"), "%s",
	    out);
	/* A bad spec refuses the whole deployment, by its index. */
	write_text(man, "{\"version\":1,\"specs\":[{\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,\"N\":8,"
	    "\"K\":8}},{\"kernel\":\"nosuch\",\"backend\":\"cpu\",\"dtype\":"
	    "\"f32\",\"shape\":{}}]}");
	cr_assert_eq(kspec("deploy add bad %s", man), 1, "%s", out);
	cr_assert(strstr(out, "items[1]") && strstr(out, "E_UNKNOWN_KERNEL"),
	    "%s", out);
}
