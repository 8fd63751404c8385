/*
 * Bundles: `kspec bundle export` on one daemon, `kspec bundle import` into
 * another with its own store, real processes both; what a bundle carries
 * is served from disk with no compile, and nothing that fails its
 * signature, its metadata or this daemon's keys is ever stored.
 */
#include <criterion/criterion.h>
#include <sys/stat.h>

#include "../proto/entry.h"
#include "e2e.h"

static e2e_daemon_t a, b;
static char dir[256], keyp[300], manifest[300], bundle[300];

#define SPEC(n) "{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\"," \
	"\"shape\":{\"M\":1,\"N\":" #n ",\"K\":32}}"
static const char *const specs[] = {
	SPEC(32), SPEC(64),
	"{\"kernel\":\"rmsnorm\",\"backend\":\"cpu\",\"dtype\":\"f32\","
	"\"shape\":{\"R\":1,\"H\":64}}",
	SPEC(96),                /* never warmed on A */
};

static void setup(void)
{
	memset(&a, 0, sizeof a);
	memset(&b, 0, sizeof b);
	snprintf(dir, sizeof dir, "/tmp/kspec-e2e-XXXXXX");
	cr_assert(mkdtemp(dir));
	snprintf(keyp, sizeof keyp, "%s/fleet", dir);
	snprintf(manifest, sizeof manifest, "%s/m.json", dir);
	snprintf(bundle, sizeof bundle, "%s/b.kspec", dir);
}

static void down(void)
{
	char cmd[400];

	e2e_cleanup(&a);
	e2e_cleanup(&b);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

TestSuite(bundle, .init = setup, .fini = down, .timeout = 180);

/* Runs kspec ARGS on daemon D: its stdout (malloc'd) and exit status. */
static char *kspec(const e2e_daemon_t *d, const char *args, int *status)
{
	char cmd[2000], buf[4096];
	char *out = calloc(1, 1);
	size_t len = 0, n;
	FILE *p;
	int st;

	/* fleet-key needs no daemon (and D none yet). */
	snprintf(cmd, sizeof cmd, "%s/kspec %s%s%s %s 2>&1", e2e_build_dir(),
	    d->sock[0] ? "--socket '" : "", d->sock, d->sock[0] ? "'" : "",
	    args);
	p = popen(cmd, "r");
	cr_assert(p);
	while ((n = fread(buf, 1, sizeof buf, p)) > 0) {
		out = realloc(out, len + n + 1);
		memcpy(out + len, buf, n);
		len += n;
		out[len] = '\0';
	}
	st = pclose(p);
	*status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	return out;
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert(f);
	fputs(text, f);
	fclose(f);
}

/* Keys, a manifest of every spec, A with all but the last warmed, and
 * the bundle A exports; B started with ARGS (the fleet key unless
 * NO_KEY). */
static void export_from_a(void)
{
	char args[1200], *out;
	e2e_reply_t r;
	int st, i;

	snprintf(args, sizeof args, "fleet-key generate '%s'", keyp);
	out = kspec(&a, args, &st);
	cr_assert_eq(st, 0, "%s", out);
	free(out);
	write_text(manifest, "{\"version\":1,\"specs\":[" SPEC(32) ","
	    SPEC(64) ",{\"kernel\":\"rmsnorm\",\"backend\":\"cpu\",\"dtype\":"
	    "\"f32\",\"shape\":{\"R\":1,\"H\":64}}," SPEC(96) "]}");
	cr_assert_eq(e2e_start(&a, (const char *const[]){ "--workers", "1",
	    NULL }), 0);
	for (i = 0; i < 3; i++) {
		char get[400];

		snprintf(get, sizeof get, "{\"op\":\"warm\",\"items\":[%s]}",
		    specs[i]);
		cr_assert_eq(e2e_call(a.sock, get, &r), 0);
		cr_assert(e2e_ok(&r));
		e2e_reply_free(&r);
	}
	snprintf(args, sizeof args, "bundle export '%s' -o '%s' --sign-key "
	    "'%s.secret' --json", manifest, bundle, keyp);
	out = kspec(&a, args, &st);
	/* The spec never warmed is reported, and makes the status 1. */
	cr_assert_eq(st, 1, "%s", out);
	cr_assert(strstr(out, "\"not_cached\":[3]"), "%s", out);
	cr_assert(strstr(out, "\"exported\":3"), "%s", out);
	free(out);
}

/* A fleet key, the manifest MAN and daemon A started: what the export
 * tests below begin with. */
static void key_manifest_and_a(const char *man)
{
	char args[400];
	char *out;
	int st;

	snprintf(args, sizeof args, "fleet-key generate '%s'", keyp);
	out = kspec(&a, args, &st);
	cr_assert_eq(st, 0, "%s", out);
	free(out);
	write_text(manifest, man);
	cr_assert_eq(e2e_start(&a, (const char *const[]){ "--workers", "1",
	    NULL }), 0);
}

/* A spec the daemon refuses is named once in the error line: "kspec:
 * specs[0]: E_UNKNOWN_KERNEL: ...", not "kspec: specs[0]: kspec: ...". */
Test(bundle, a_refused_spec_is_named_once_in_its_error_line)
{
	char args[1200];
	char *out;
	int st;

	key_manifest_and_a("{\"version\":1,\"specs\":[{\"kernel\":"
	    "\"nosuch\",\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":"
	    "{\"M\":1}}]}");
	snprintf(args, sizeof args, "bundle export '%s' -o '%s' --sign-key "
	    "'%s.secret'", manifest, bundle, keyp);
	out = kspec(&a, args, &st);
	cr_assert_eq(st, 1, "%s", out);
	cr_assert(strstr(out, "kspec: specs[0]: E_UNKNOWN_KERNEL: "), "%s",
	    out);
	cr_assert(!strstr(out, "kspec: specs[0]: kspec:"), "%s", out);
	free(out);
}

/* A spec's weight dtype and mode are part of what bundle export asks
 * for: a warmed q4_0 gemm in mode fast is exported, not "not cached". */
Test(bundle, a_spec_with_wdtype_and_mode_is_exported)
{
	char args[1200];
	char *out;
	int st;

	key_manifest_and_a("{\"version\":1,\"specs\":[{\"kernel\":"
	    "\"gemm\",\"backend\":\"cpu\",\"dtype\":\"f32\",\"wdtype\":"
	    "\"q4_0\",\"mode\":\"fast\",\"shape\":{\"M\":1,\"N\":32,"
	    "\"K\":64}}]}");
	snprintf(args, sizeof args, "warm '%s'", manifest);
	out = kspec(&a, args, &st);
	cr_assert_eq(st, 0, "%s", out);
	free(out);
	snprintf(args, sizeof args, "bundle export '%s' -o '%s' --sign-key "
	    "'%s.secret'", manifest, bundle, keyp);
	out = kspec(&a, args, &st);
	cr_assert_eq(st, 0, "%s", out);
	cr_assert(strstr(out, "exported 1 of 1 specs"), "%s", out);
	free(out);
}

/* fleet-key generate warns when the secret lands inside a git work
 * tree (a .git in its folder or one above), and only then. */
Test(bundle, a_key_made_inside_a_git_work_tree_is_warned_about)
{
	char args[1200], repo[400], cmd[1400];
	char *out;
	int st;

	snprintf(args, sizeof args, "fleet-key generate '%s'", keyp);
	out = kspec(&a, args, &st);
	cr_assert_eq(st, 0, "%s", out);
	cr_assert(!strstr(out, "warning"), "%s", out);
	free(out);
	snprintf(repo, sizeof repo, "%s/repo", dir);
	snprintf(cmd, sizeof cmd, "mkdir -p '%s/.git' '%s/keys'", repo, repo);
	cr_assert_eq(system(cmd), 0);
	snprintf(args, sizeof args, "fleet-key generate '%s/keys/k'", repo);
	out = kspec(&a, args, &st);
	cr_assert_eq(st, 0, "%s", out);
	snprintf(cmd, sizeof cmd, "kspec: warning: %s/keys/k.secret is inside "
	    "the git work tree %s: ", repo, repo);
	cr_assert(strstr(out, cmd), "%s", out);
	free(out);
}

static void start_b(int with_key, const char *other_key)
{
	char key[400];
	const char *args[6] = { "--workers", "1", NULL };

	snprintf(key, sizeof key, "%s.public", other_key ? other_key : keyp);
	if (with_key) {
		args[2] = "--fleet-key";
		args[3] = key;
	}
	cr_assert_eq(e2e_start(&b, args), 0);
}

/* The bytes and source of SPEC from daemon D. */
static void get(const e2e_daemon_t *d, const char *spec, e2e_reply_t *r)
{
	char req[400];

	snprintf(req, sizeof req, "{\"op\":\"get\",%s", spec + 1);
	cr_assert_eq(e2e_call(d->sock, req, r), 0);
	cr_assert(e2e_ok(r), "%s", e2e_code(r));
}

Test(bundle, imported_entries_are_served_from_disk_with_no_compile)
{
	e2e_reply_t ra, rb;
	char args[600], *out;
	int st, i;

	export_from_a();
	start_b(1, NULL);
	snprintf(args, sizeof args, "bundle import '%s'", bundle);
	out = kspec(&b, args, &st);
	cr_assert_eq(st, 0, "%s", out);
	cr_assert(strstr(out, "imported 3 of 3 entries"), "%s", out);
	free(out);
	for (i = 0; i < 3; i++) {
		get(&a, specs[i], &ra);
		get(&b, specs[i], &rb);
		cr_assert_str_eq(e2e_str(&rb, "source"), "disk");
		cr_assert_eq(ra.len, rb.len);
		cr_assert_eq(memcmp(ra.payload, rb.payload, ra.len), 0);
		cr_assert_str_eq(e2e_str(&ra, "key"), e2e_str(&rb, "key"));
		e2e_reply_free(&ra);
		e2e_reply_free(&rb);
	}
	cr_assert_eq(e2e_stat(b.sock, "compiles"), 0);
	/* Again: all there, nothing replaced. */
	out = kspec(&b, args, &st);
	cr_assert_eq(st, 0, "%s", out);
	cr_assert(strstr(out, "imported 0 of 3 entries (3 already stored"),
	    "%s", out);
	free(out);
}

/* Flips one byte in the middle of entry INDEX's artifact bytes. */
static void tamper(int index)
{
	FILE *f = fopen(bundle, "r+b");
	uint8_t lenb[8], head[KS_ENTRY_HEAD];
	uint64_t at = 12, el = 0, ml, bl;
	int i, j, c;

	cr_assert(f);
	for (i = 0; i <= index; i++) {
		cr_assert_eq(fseek(f, (long)at, SEEK_SET), 0);
		cr_assert_eq(fread(lenb, 1, 8, f), 8);
		for (el = 0, j = 0; j < 8; j++)
			el = el << 8 | lenb[j];
		if (i < index)
			at += 8 + el;
	}
	cr_assert_eq(fread(head, 1, sizeof head, f), sizeof head);
	for (ml = 0, j = 0; j < 4; j++)
		ml = ml << 8 | head[8 + KS_FLEET_ID_BYTES + KS_HASH_BYTES + j];
	for (bl = 0, j = 0; j < 8; j++)
		bl = bl << 8 | head[12 + KS_FLEET_ID_BYTES + KS_HASH_BYTES + j];
	cr_assert_gt(bl, 100);
	at += 8 + KS_ENTRY_HEAD + ml + bl / 2;
	cr_assert_eq(fseek(f, (long)at, SEEK_SET), 0);
	c = fgetc(f);
	cr_assert_eq(fseek(f, (long)at, SEEK_SET), 0);
	fputc(c ^ 0x20, f);
	fclose(f);
}

Test(bundle, a_changed_entry_is_refused_and_the_rest_imported)
{
	e2e_reply_t r;
	char args[600], *out;
	int st;

	export_from_a();
	tamper(1);
	start_b(1, NULL);
	snprintf(args, sizeof args, "bundle import '%s' --json", bundle);
	out = kspec(&b, args, &st);
	cr_assert_eq(st, 1, "%s", out);
	cr_assert(strstr(out, "\"imported\":2"), "%s", out);
	cr_assert(strstr(out, "\"refusals\":[{\"index\":1,\"code\":"
	    "\"E_DENIED\",\"message\":\"its signature does not verify"),
	    "%s", out);
	free(out);
	get(&b, specs[0], &r);
	cr_assert_str_eq(e2e_str(&r, "source"), "disk");
	e2e_reply_free(&r);
	/* The refused one is compiled here, not taken from the bundle. */
	get(&b, specs[1], &r);
	cr_assert_str_eq(e2e_str(&r, "source"), "compiled");
	e2e_reply_free(&r);
}

Test(bundle, only_this_fleets_keys_are_trusted)
{
	char args[600], other[320], *out;
	int st;

	export_from_a();
	snprintf(other, sizeof other, "%s/other", dir);
	snprintf(args, sizeof args, "fleet-key generate '%s'", other);
	out = kspec(&a, args, &st);
	cr_assert_eq(st, 0, "%s", out);
	free(out);
	start_b(1, other);
	snprintf(args, sizeof args, "bundle import '%s'", bundle);
	out = kspec(&b, args, &st);
	cr_assert_eq(st, 1, "%s", out);
	cr_assert(strstr(out, "imported 0 of 3 entries (0 already stored, "
	    "3 refused)"), "%s", out);
	cr_assert(strstr(out, "not one of this daemon's fleet keys"), "%s",
	    out);
	free(out);
}

Test(bundle, a_daemon_without_a_fleet_key_imports_nothing)
{
	char args[600], *out;
	int st;

	export_from_a();
	start_b(0, NULL);
	snprintf(args, sizeof args, "bundle import '%s'", bundle);
	out = kspec(&b, args, &st);
	cr_assert_eq(st, 1, "%s", out);
	cr_assert(strstr(out, "E_DENIED") && strstr(out, "no --fleet-key"),
	    "%s", out);
	free(out);
	/* Not a bundle at all. */
	snprintf(args, sizeof args, "bundle import '%s'", manifest);
	out = kspec(&b, args, &st);
	cr_assert_eq(st, 1, "%s", out);
	free(out);
}

/* The fleet secret of the keys at KEYP. */
static void load_secret(ks_fleet_sec_t *sk)
{
	char path[400], err[512];

	cr_assert_eq(ks_base_init(), KS_OK);
	snprintf(path, sizeof path, "%s.secret", keyp);
	cr_assert_eq(ks_fleet_load_secret(path, sk, err, sizeof err), KS_OK,
	    "%s", err);
}

/* What a store keeps of get reply R beside its bytes: the header's fields
 * after its source (malloc'd; *LEN leaves out the closing brace), and its
 * key. */
static char *stored_meta(const e2e_reply_t *r, size_t *len, ks_hash_t *key)
{
	char *hdr = cJSON_PrintUnformatted(r->h), *meta;
	const char *src = strstr(hdr, "\"source\":");

	cr_assert(src);
	meta = strdup(strchr(src + 9 + 1, '"') + 2);
	*len = strlen(meta) - 1;
	free(hdr);
	cr_assert_eq(ks_hash_from_hex(e2e_str(r, "key"), key), KS_OK);
	return meta;
}

/* Entries that are signed but wrong: for another compiler, or whose
 * metadata names another key.  Made here with the fleet secret. */
Test(bundle, signed_but_wrong_entries_are_refused)
{
	char args[600], path[400], *out, *meta;
	e2e_reply_t r;
	ks_fleet_sec_t sk;
	ks_buf_t file, one;
	ks_hash_t key, other;
	size_t mlen;
	int st;

	export_from_a();
	get(&a, specs[0], &r);
	load_secret(&sk);
	meta = stored_meta(&r, &mlen, &key);
	ks_buf_init(&file);
	ks_bundle_begin(&file, 3);
	/* 0: what another compiler made: its compiler, so its key, are
	 * others (the key names the compiler).  Consistent and signed. */
	{
		char *m2 = strdup(meta), *c = strstr(m2, "\"compiler\":\"");
		char *k = strstr(m2, "\"key\":\""), hex[KS_HASH_HEX];
		ks_hash_t k2;

		cr_assert(c && k);
		c[12] = c[12] == 'X' ? 'Y' : 'X';
		memset(k2.b, 0x3c, sizeof k2.b);
		ks_hash_hex(&k2, hex);
		memcpy(k + 7, hex, 64);
		ks_buf_init(&one);
		cr_assert_eq(ks_entry_seal(&sk, &k2, m2, mlen, r.payload, r.len,
		    &one), KS_OK);
		ks_bundle_add(&file, &one);
		ks_buf_close(&one);
		free(m2);
	}
	/* 1: sealed under another key than its metadata names. */
	memset(other.b, 0x5a, sizeof other.b);
	ks_buf_init(&one);
	cr_assert_eq(ks_entry_seal(&sk, &other, meta, mlen, r.payload, r.len,
	    &one), KS_OK);
	ks_bundle_add(&file, &one);
	ks_buf_close(&one);
	/* 2: signed, but its bytes are not the artifact its metadata
	 * names (a signer's own mistake). */
	r.payload[r.len / 2] ^= 1;
	ks_buf_init(&one);
	cr_assert_eq(ks_entry_seal(&sk, &key, meta, mlen, r.payload, r.len,
	    &one), KS_OK);
	ks_bundle_add(&file, &one);
	ks_buf_close(&one);
	snprintf(path, sizeof path, "%s/wrong.kspec", dir);
	{
		FILE *f = fopen(path, "wb");

		cr_assert(f);
		fwrite(file.data, 1, file.len, f);
		fclose(f);
	}
	ks_buf_close(&file);
	free(meta);
	e2e_reply_free(&r);
	start_b(1, NULL);
	snprintf(args, sizeof args, "bundle import '%s' --json", path);
	out = kspec(&b, args, &st);
	cr_assert_eq(st, 1, "%s", out);
	cr_assert(strstr(out, "\"imported\":0"), "%s", out);
	cr_assert(strstr(out, "{\"index\":0,\"code\":\"E_BAD_REQUEST\","
	    "\"message\":\"not for this daemon (compiler)"), "%s", out);
	cr_assert(strstr(out, "{\"index\":1,\"code\":\"E_PROTO\""), "%s",
	    out);
	cr_assert(strstr(out, "{\"index\":2,\"code\":\"E_CORRUPT\""), "%s",
	    out);
	free(out);
	cr_assert_eq(e2e_stat(b.sock, "hits_disk"), 0);
	get(&b, specs[0], &r);
	cr_assert_str_eq(e2e_str(&r, "source"), "compiled");
	e2e_reply_free(&r);
}

/* An entry of a kernel whose canary failed here (the test build's wrong
 * rmsnorm reference, after an upgrade) is not let in by an import, though
 * it was built by this daemon's compiler and signed: the canary stands
 * between a new compiler's output and the clients, wherever it was
 * built.  The gemm entries are imported. */
Test(bundle, an_import_does_not_pass_a_failed_canary)
{
	static const char *const suffix = " (upgraded)";
	char args[600], key[400], *out;
	e2e_reply_t r;
	int st;

	/* B knows the old compiler: one entry of it. */
	b.program = "tests/kspecd-plant";
	snprintf(key, sizeof key, "%s.public", keyp);
	cr_assert_eq(e2e_start(&b, NULL), 0);
	get(&b, specs[3], &r);
	e2e_reply_free(&r);
	cr_assert_eq(e2e_stop(&b), 0);
	/* A, with the new compiler, builds and exports the bundle. */
	a.program = "tests/kspecd-plant";
	setenv("KSPEC_TEST_PLANT_IDENTITY_SUFFIX", suffix, 1);
	export_from_a();
	/* B, upgraded, with rmsnorm's canary made to fail (and the canaries
	 * of the kernels the bundle does not hold not run). */
	setenv("KSPEC_TEST_PLANT_CANARY", "rmsnorm", 1);
	setenv("KSPEC_TEST_PLANT_CANARY_ONLY", "gemm,rmsnorm", 1);
	cr_assert_eq(e2e_start(&b, (const char *const[]){ "--workers", "1",
	    "--fleet-key", key, NULL }), 0);
	unsetenv("KSPEC_TEST_PLANT_CANARY");
	unsetenv("KSPEC_TEST_PLANT_CANARY_ONLY");
	unsetenv("KSPEC_TEST_PLANT_IDENTITY_SUFFIX");
	snprintf(args, sizeof args, "{\"op\":\"get\",%s", specs[2] + 1);
	cr_assert_eq(e2e_call(b.sock, args, &r), 0);
	cr_assert_str_eq(e2e_code(&r), "E_CANARY");
	e2e_reply_free(&r);
	snprintf(args, sizeof args, "bundle import '%s' --json", bundle);
	out = kspec(&b, args, &st);
	cr_assert_eq(st, 1, "%s", out);
	cr_assert(strstr(out, "\"imported\":2"), "%s", out);
	cr_assert(strstr(out, "{\"index\":2,\"code\":\"E_CANARY\","
	    "\"message\":\"kernel rmsnorm is disabled on backend cpu"), "%s",
	    out);
	free(out);
	/* Still refused, and the gemm entries are served from disk. */
	snprintf(args, sizeof args, "{\"op\":\"get\",%s", specs[2] + 1);
	cr_assert_eq(e2e_call(b.sock, args, &r), 0);
	cr_assert_str_eq(e2e_code(&r), "E_CANARY");
	e2e_reply_free(&r);
	get(&b, specs[0], &r);
	cr_assert_str_eq(e2e_str(&r, "source"), "disk");
	e2e_reply_free(&r);
}

/*
 * Made here, with no second daemon: the keys, daemon B started with them
 * (as PROGRAM), one entry of spec 0 compiled on B and evicted again, and
 * sealed as it was (*SEALED) with its parts, so that bundles of any size
 * can be written from copies of it.
 */
typedef struct {
	ks_fleet_sec_t sk;
	ks_hash_t key;
	char *meta;
	size_t mlen;
	e2e_reply_t r;           /* the get: its bytes */
	ks_buf_t sealed;
} one_entry_t;

static void one_entry(one_entry_t *o, const char *program)
{
	char id[17], err[512], key[400];
	e2e_reply_t r;

	cr_assert_eq(ks_base_init(), KS_OK);
	cr_assert_eq(ks_fleet_keygen(keyp, id, err, sizeof err), KS_OK, "%s",
	    err);
	load_secret(&o->sk);
	snprintf(key, sizeof key, "%s.public", keyp);
	b.program = program;
	cr_assert_eq(e2e_start(&b, (const char *const[]){ "--workers", "1",
	    "--fleet-key", key, NULL }), 0);
	get(&b, specs[0], &o->r);
	o->meta = stored_meta(&o->r, &o->mlen, &o->key);
	ks_buf_init(&o->sealed);
	cr_assert_eq(ks_entry_seal(&o->sk, &o->key, o->meta, o->mlen,
	    o->r.payload, o->r.len, &o->sealed), KS_OK);
	cr_assert_eq(e2e_call(b.sock, "{\"op\":\"evict\",\"all\":true}", &r),
	    0);
	cr_assert(e2e_ok(&r));
	e2e_reply_free(&r);
}

static void one_entry_free(one_entry_t *o)
{
	free(o->meta);
	e2e_reply_free(&o->r);
	ks_buf_close(&o->sealed);
}

/* The entry of O's key and metadata with LEN bytes of its own (the
 * metadata's artifact hash made theirs): still one this daemon would
 * ask for, of any size. */
static void reseal(one_entry_t *o, size_t len, ks_buf_t *out)
{
	char *meta = strdup(o->meta), *sum = strstr(meta, "\"artifact\":\"");
	char hex[KS_HASH_HEX];
	uint8_t *bytes = malloc(len);
	ks_hash_t h;
	size_t i;

	cr_assert(sum && bytes);
	for (i = 0; i < len; i++)
		bytes[i] = o->r.payload[i % o->r.len];
	ks_hash(bytes, len, &h);
	ks_hash_hex(&h, hex);
	memcpy(sum + 12, hex, 64);
	ks_buf_init(out);
	cr_assert_eq(ks_entry_seal(&o->sk, &o->key, meta, o->mlen, bytes, len,
	    out), KS_OK);
	free(bytes);
	free(meta);
}

/* Writes a bundle of COPIES copies of ENTRY to PATH: no more in memory
 * than one. */
static void write_copies(const char *path, const ks_buf_t *entry,
    uint32_t copies)
{
	FILE *f = fopen(path, "wb");
	ks_buf_t head, one;
	uint32_t i;

	cr_assert(f);
	ks_buf_init(&head);
	ks_buf_init(&one);
	ks_bundle_begin(&head, copies);
	ks_bundle_add(&one, entry);
	cr_assert_eq(fwrite(head.data, 1, head.len, f), head.len);
	for (i = 0; i < copies; i++)
		cr_assert_eq(fwrite(one.data, 1, one.len, f), one.len);
	cr_assert_eq(fclose(f), 0);
	ks_buf_close(&head);
	ks_buf_close(&one);
}

/* Sends the import of PATH on connection FD. */
static void import_on(int fd, const char *path)
{
	char req[600];

	snprintf(req, sizeof req, "{\"op\":\"import\",\"path\":\"%s\"}", path);
	cr_assert_eq(e2e_send(fd, req), 0);
}

/* The reply of an import on FD, which refused nothing. */
static void import_reply(int fd, e2e_reply_t *r)
{
	cr_assert_eq(e2e_recv(fd, r), 0);
	cr_assert(e2e_ok(r), "%s", e2e_code(r));
	cr_assert_eq(e2e_num(r->h, "refused"), 0);
}

/* Imports PATH, of ENTRIES entries, on B; then the most entries and bytes
 * imports have held at once since B started, and that they hold none. */
static void import_peak(const char *path, double entries, double *peak,
    double *peak_bytes)
{
	const cJSON *im;
	e2e_reply_t r;
	int fd = e2e_connect(b.sock);

	cr_assert(fd >= 0);
	import_on(fd, path);
	import_reply(fd, &r);
	close(fd);
	cr_assert_eq(e2e_num(r.h, "entries"), entries);
	cr_assert_eq(e2e_num(r.h, "imported") + e2e_num(r.h, "present"),
	    entries);
	e2e_reply_free(&r);
	cr_assert_eq(e2e_call(b.sock, "{\"op\":\"stats\"}", &r), 0);
	im = cJSON_GetObjectItemCaseSensitive(r.h, "imports");
	*peak = e2e_num(im, "peak_entries");
	*peak_bytes = e2e_num(im, "peak_bytes");
	cr_assert_eq(e2e_num(im, "held_entries"), 0);
	cr_assert_eq(e2e_num(im, "held_bytes"), 0);
	cr_assert_eq(e2e_num(im, "running"), 0);
	e2e_reply_free(&r);
}

/*
 * The bound is in entries and bytes, not in the bundle's size: a bundle
 * of 512 MB is imported holding exactly as much as one of 64 MB.  The test build
 * makes the store slower than any read (KSPEC_TEST_PLANT_IMPORT_SLOW_
 * STORE), the case the bound is for, so that the peak is the bound every
 * time: two full batches.  Copies of one entry make bundles of any size
 * at the cost of one compile; every copy reaches the store writer (the
 * first is stored, the others found present).
 */
Test(bundle, an_import_holds_two_batches_whatever_the_bundle_size)
{
	char small[400], big[400];
	double e1, e2, b1, b2;
	one_entry_t o;
	ks_buf_t large;
	uint32_t per;

	setenv("KSPEC_TEST_PLANT_IMPORT_SLOW_STORE", "1", 1);
	one_entry(&o, "tests/kspecd-plant");
	unsetenv("KSPEC_TEST_PLANT_IMPORT_SLOW_STORE");
	snprintf(small, sizeof small, "%s/small.kspec", dir);
	snprintf(big, sizeof big, "%s/big.kspec", dir);
	/* Entries of 64 KiB: a batch's bytes bind first, at PER entries;
	 * bundles of 64 MB and 512 MB.  (These come first: the peak since
	 * start only grows.) */
	reseal(&o, 64 << 10, &large);
	per = KS_IMPORT_BATCH_BYTES / (uint32_t)large.len;
	cr_assert_lt(per, KS_IMPORT_BATCH_ENTRIES);
	write_copies(small, &large, (64u << 20) / (uint32_t)large.len);
	write_copies(big, &large, (512u << 20) / (uint32_t)large.len);
	import_peak(small, (64u << 20) / (uint32_t)large.len, &e1, &b1);
	import_peak(big, (512u << 20) / (uint32_t)large.len, &e2, &b2);
	cr_assert_eq(e1, 2 * per, "small bundle: %.0f entries held", e1);
	cr_assert_eq(e2, 2 * per, "big bundle: %.0f entries held", e2);
	cr_assert_eq(b1, b2);
	cr_assert_leq(b2, 2 * KS_IMPORT_BATCH_BYTES);
	/* Entries of a few KB: a batch's count binds first. */
	cr_assert_lt(o.sealed.len * KS_IMPORT_BATCH_ENTRIES,
	    KS_IMPORT_BATCH_BYTES);
	write_copies(small, &o.sealed, 4 * KS_IMPORT_BATCH_ENTRIES);
	write_copies(big, &o.sealed, 32 * KS_IMPORT_BATCH_ENTRIES);
	import_peak(small, 4 * KS_IMPORT_BATCH_ENTRIES, &e1, &b1);
	import_peak(big, 32 * KS_IMPORT_BATCH_ENTRIES, &e2, &b2);
	cr_assert_eq(e1, 2 * KS_IMPORT_BATCH_ENTRIES, "small: %.0f", e1);
	cr_assert_eq(e2, 2 * KS_IMPORT_BATCH_ENTRIES, "big: %.0f", e2);
	ks_buf_close(&large);
	one_entry_free(&o);
}

/*
 * Two imports of one bundle at once, each entry in it many times: the
 * store decides which import stored each, in the transaction that writes
 * it, so the one key is counted imported exactly once in all, and every
 * other copy present.  The test build's writer takes a millisecond a
 * write (KSPEC_TEST_PLANT_SLOW_WRITER), so that a count made from a look
 * at the store before the write would count copies stored twice.
 */
Test(bundle, concurrent_imports_of_one_bundle_count_each_stored_entry_once)
{
	e2e_reply_t r1, r2;
	one_entry_t o;
	int fd1, fd2;

	setenv("KSPEC_TEST_PLANT_SLOW_WRITER", "1", 1);
	one_entry(&o, "tests/kspecd-plant");
	unsetenv("KSPEC_TEST_PLANT_SLOW_WRITER");
	write_copies(bundle, &o.sealed, 2 * KS_IMPORT_BATCH_ENTRIES);
	fd1 = e2e_connect(b.sock);
	fd2 = e2e_connect(b.sock);
	cr_assert(fd1 >= 0 && fd2 >= 0);
	import_on(fd1, bundle);
	import_on(fd2, bundle);
	import_reply(fd1, &r1);
	import_reply(fd2, &r2);
	cr_assert_eq(e2e_num(r1.h, "imported") + e2e_num(r2.h, "imported"), 1,
	    "imported %.0f and %.0f", e2e_num(r1.h, "imported"),
	    e2e_num(r2.h, "imported"));
	cr_assert_eq(e2e_num(r1.h, "present") + e2e_num(r2.h, "present"),
	    2 * 2 * KS_IMPORT_BATCH_ENTRIES - 1);
	e2e_reply_free(&r1);
	e2e_reply_free(&r2);
	close(fd1);
	close(fd2);
	/* The one stored is served, and no import held more than its
	 * bound. */
	get(&b, specs[0], &r1);
	cr_assert_str_eq(e2e_str(&r1, "source"), "disk");
	e2e_reply_free(&r1);
	cr_assert_eq(e2e_call(b.sock, "{\"op\":\"stats\"}", &r1), 0);
	cr_assert_leq(e2e_num(cJSON_GetObjectItemCaseSensitive(r1.h,
	    "imports"), "peak_entries"), 2 * 2 * KS_IMPORT_BATCH_ENTRIES);
	e2e_reply_free(&r1);
	one_entry_free(&o);
}

/*
 * An import ends early, holding nothing after: when its client goes, it
 * reads no further; when the daemon is told to stop, it answers
 * E_SHUTTING_DOWN and the daemon ends cleanly.  The writer takes a
 * millisecond a write, so that each import is still running then.
 */
Test(bundle, an_import_ends_when_its_client_goes_or_the_daemon_stops)
{
	e2e_reply_t r;
	one_entry_t o;
	const cJSON *im;
	int fd, i, st;

	setenv("KSPEC_TEST_PLANT_SLOW_WRITER", "1", 1);
	one_entry(&o, "tests/kspecd-plant");
	unsetenv("KSPEC_TEST_PLANT_SLOW_WRITER");
	write_copies(bundle, &o.sealed, 16 * KS_IMPORT_BATCH_ENTRIES);
	fd = e2e_connect(b.sock);
	cr_assert(fd >= 0);
	import_on(fd, bundle);
	usleep(100 * 1000);
	close(fd);
	for (i = 0; i < 500; i++) {
		cr_assert_eq(e2e_call(b.sock, "{\"op\":\"stats\"}", &r), 0);
		im = cJSON_GetObjectItemCaseSensitive(r.h, "imports");
		if (e2e_num(im, "running") == 0)
			break;
		e2e_reply_free(&r);
		usleep(10 * 1000);
	}
	cr_assert_eq(e2e_num(im, "running"), 0);
	cr_assert_eq(e2e_num(im, "held_entries"), 0);
	cr_assert_eq(e2e_num(im, "held_bytes"), 0);
	cr_assert_lt(e2e_num(cJSON_GetObjectItemCaseSensitive(r.h, "store"),
	    "writes_pending"), 1);
	e2e_reply_free(&r);
	fd = e2e_connect(b.sock);
	cr_assert(fd >= 0);
	import_on(fd, bundle);
	usleep(100 * 1000);
	kill(b.pid, SIGTERM);
	cr_assert_eq(e2e_recv(fd, &r), 0);
	cr_assert_str_eq(e2e_code(&r), "E_SHUTTING_DOWN");
	e2e_reply_free(&r);
	close(fd);
	cr_assert_eq(waitpid(b.pid, &st, 0), b.pid);
	b.pid = 0;
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	one_entry_free(&o);
}
