/*
 * The get fast path answers exactly as the full parse does.
 *
 * Two fresh daemons, one with the fast path (the default) and one with
 * --no-fast-path, get the same corpus of request headers in the same
 * order: a few valid gets, each sent again with new ids so the fast path
 * learns it, and after every resend one variant of it: every byte changed,
 * deleted or doubled in turn, ids written every way the protocol allows
 * and refuses, members reordered, white space, escapes, duplicate keys,
 * trailing bytes, other ops with the same fields.  Every reply must be
 * byte for byte the same, header and payload, once "source" and
 * "compile_ms" are masked (the one thing that tells a memory hit from a
 * fresh compile, and a duration).
 *
 * The checker checks itself: a daemon with a planted fast-path bug
 * (KSPEC_TEST_FAST_PATH_BUG: templates end at the id) must be caught.
 */
#include <criterion/criterion.h>
#include <stdarg.h>

#include "e2e.h"
#include "../server/fastpath.h"

/* One request header, bytes as sent (may hold any byte). */
typedef struct {
	char *p;
	size_t n;
	int hot;                  /* a base resent: a fast-path hit */
} item_t;

typedef struct {
	item_t *v;
	size_t n, cap;
} corpus_t;

static e2e_daemon_t A, B;
static corpus_t C;

static void down(void)
{
	size_t i;

	e2e_cleanup(&A);
	e2e_cleanup(&B);
	for (i = 0; i < C.n; i++)
		free(C.v[i].p);
	free(C.v);
	memset(&C, 0, sizeof C);
}

TestSuite(fastpath, .fini = down, .timeout = 600);

static void push(const char *p, size_t n)
{
	if (C.n == C.cap) {
		C.cap = C.cap ? 2 * C.cap : 1024;
		C.v = realloc(C.v, C.cap * sizeof *C.v);
		cr_assert(C.v);
	}
	C.v[C.n].p = malloc(n ? n : 1);
	cr_assert(C.v[C.n].p);
	memcpy(C.v[C.n].p, p, n);
	C.v[C.n].n = n;
	C.v[C.n].hot = 0;
	C.n++;
}

__attribute__((format(printf, 1, 2)))
static void pushf(const char *fmt, ...)
{
	char buf[8192];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	cr_assert(n > 0 && (size_t)n < sizeof buf);
	push(buf, (size_t)n);
}

/* The valid gets the corpus grows from: the member list inside the
 * braces, without the id (which is put first, last or left out). */
static const char *const bases[] = {
	"\"op\":\"get\",\"kernel\":\"gemm\",\"backend\":\"cpu\","
	    "\"dtype\":\"f32\",\"shape\":{\"M\":1,\"N\":64,\"K\":64}",
	"\"op\":\"get\",\"kernel\":\"gemm\",\"backend\":\"cpu\","
	    "\"dtype\":\"f32\",\"shape\":{\"M\":1,\"N\":64,\"K\":64},"
	    "\"return\":\"meta\"",
	"\"kernel\":\"rmsnorm\",\"op\":\"get\",\"dtype\":\"f16\","
	    "\"backend\":\"cpu\",\"shape\":{\"H\":128},"
	    "\"dynamic\":[\"R\"],\"mode\":\"fast\"",
	"\"op\" : \"get\" , \"kernel\" : \"softmax\" , \"backend\":\"cpu\","
	    "\"target\":\"auto\",\"format\":\"\",\"dtype\":\"f32\","
	    "\"shape\":{\"R\":2,\"L\":32}",
};

/* Where a base's id goes. */
enum { ID_FIRST, ID_LAST, ID_NONE };

static void instance(char *out, size_t cap, const char *members, int where,
    const char *id)
{
	if (where == ID_FIRST)
		snprintf(out, cap, "{\"id\":%s,%s}", id, members);
	else if (where == ID_LAST)
		snprintf(out, cap, "{%s,\"id\":%s}", members, id);
	else
		snprintf(out, cap, "{%s}", members);
}

static unsigned long long next_id = 1000;

/* The base again with a fresh id (what the fast path serves), then V. */
static void pair(const char *members, int where, const char *v, size_t n)
{
	char id[32], hot[4096];

	snprintf(id, sizeof id, "%llu", next_id++);
	instance(hot, sizeof hot, members, where, id);
	push(hot, strlen(hot));
	C.v[C.n - 1].hot = 1;
	push(v, n);
}

static void pairs(const char *members, int where, const char *v)
{
	pair(members, where, v, strlen(v));
}

/* Every byte of S changed to each of a few others, deleted, doubled. */
static void byte_variants(const char *members, int where, const char *s)
{
	static const char subs[] = " x\"\\07}{,:di\n\x80";
	size_t n = strlen(s), i, k;
	char v[4096];

	for (i = 0; i < n; i++) {
		for (k = 0; k < sizeof subs - 1; k++) {
			if (subs[k] == s[i])
				continue;
			memcpy(v, s, n);
			v[i] = subs[k];
			pair(members, where, v, n);
		}
		memcpy(v, s, i);
		memcpy(v + i, s + i + 1, n - i - 1);
		pair(members, where, v, n - 1);
		memcpy(v, s, i + 1);
		memcpy(v + i + 1, s + i, n - i);
		pair(members, where, v, n + 1);
	}
	/* A NUL inside the header. */
	memcpy(v, s, n);
	v[n / 2] = '\0';
	pair(members, where, v, n);
}

/* Ids of every form: those the fast path takes out and those it leaves
 * to the full parse. */
static const char *const ids[] = {
	"0", "7", "00", "01", "-1", "-0", "1.0", "1e0", "1E2", "+1", ".5",
	"5.", "0x10", "9007199254740991", "9007199254740992",
	"9007199254740993", "18446744073709551615", "18446744073709551616",
	"99999999999999999999999", "\"1\"", "null", "true", "[]", "{}",
	" 5", "5 ", "\n5\t", " 5 ",
};

static void id_variants(const char *members)
{
	char v[4096];
	size_t i;

	for (i = 0; i < sizeof ids / sizeof *ids; i++) {
		instance(v, sizeof v, members, ID_FIRST, ids[i]);
		pairs(members, ID_FIRST, v);
		instance(v, sizeof v, members, ID_LAST, ids[i]);
		pairs(members, ID_FIRST, v);
	}
	/* The key "id" spelled other ways, twice, nested, as a value. */
	snprintf(v, sizeof v, "{\"i\\u0064\":5,%s}", members);
	pairs(members, ID_FIRST, v);
	snprintf(v, sizeof v, "{\"\\u0069d\":5,%s}", members);
	pairs(members, ID_FIRST, v);
	snprintf(v, sizeof v, "{\"id\" :5,%s}", members);
	pairs(members, ID_FIRST, v);
	snprintf(v, sizeof v, "{\"id\": 5 ,%s}", members);
	pairs(members, ID_FIRST, v);
	snprintf(v, sizeof v, "{\"id\":5,%s,\"id\":5}", members);
	pairs(members, ID_FIRST, v);
	snprintf(v, sizeof v, "{\"id\":5,%s,\"id\":6}", members);
	pairs(members, ID_FIRST, v);
	snprintf(v, sizeof v, "{\"id\":5,\"id\":5,%s}", members);
	pairs(members, ID_FIRST, v);
	snprintf(v, sizeof v, "{\"id\":5,%s,\"i\\u0064\":6}", members);
	pairs(members, ID_FIRST, v);
	snprintf(v, sizeof v, "{%s,\"x\":{\"id\":5}}", members);
	pairs(members, ID_FIRST, v);
	snprintf(v, sizeof v, "{\"x\":{\"id\":5},\"id\":6,%s}", members);
	pairs(members, ID_FIRST, v);
	snprintf(v, sizeof v, "{\"x\":\"id\",\"id\":6,%s}", members);
	pairs(members, ID_FIRST, v);
	snprintf(v, sizeof v, "{\"x\":[\"id\",{\"id\":1}],\"id\":6,%s}",
	    members);
	pairs(members, ID_FIRST, v);
}

/* The members of M (top level, split at commas outside strings and
 * brackets) into OUT[]; returns their count. */
static int split_members(const char *m, char out[][512], int max)
{
	int n = 0, depth = 0, str = 0;
	size_t start = 0, i, len = strlen(m);

	for (i = 0; i <= len; i++) {
		char c = m[i];

		if (str) {
			if (c == '\\')
				i++;
			else if (c == '"')
				str = 0;
			continue;
		}
		if (c == '"')
			str = 1;
		else if (c == '{' || c == '[')
			depth++;
		else if (c == '}' || c == ']')
			depth--;
		else if ((c == ',' && depth == 0) || c == '\0') {
			cr_assert_lt(n, max);
			snprintf(out[n], 512, "%.*s", (int)(i - start),
			    m + start);
			n++;
			start = i + 1;
		}
	}
	return n;
}

/* Members rotated and reversed, the id among them at each place. */
static void order_variants(const char *members)
{
	char mem[16][512], v[4096];
	int n = split_members(members, mem, 16), r, k, at;
	size_t len;

	for (r = 0; r < n; r++) {
		for (at = 0; at <= n; at++) {
			len = 0;
			v[len++] = '{';
			for (k = 0; k <= n; k++) {
				if (k)
					v[len++] = ',';
				if (k == at)
					len += (size_t)sprintf(v + len,
					    "\"id\":9");
				else
					len += (size_t)sprintf(v + len, "%s",
					    mem[(r + k - (k > at)) % n]);
			}
			v[len++] = '}';
			pair(members, ID_FIRST, v, len);
		}
	}
	len = 0;
	v[len++] = '{';
	for (k = n - 1; k >= 0; k--)
		len += (size_t)sprintf(v + len, "%s,", mem[k]);
	len += (size_t)sprintf(v + len, "\"id\":9}");
	pair(members, ID_FIRST, v, len);
}

/* Each occurrence of FROM in S replaced by TO, one at a time. */
static void replace_each(const char *members, const char *s,
    const char *from, const char *to)
{
	const char *at = s;
	char v[4096];

	while ((at = strstr(at, from)) != NULL) {
		snprintf(v, sizeof v, "%.*s%s%s", (int)(at - s), s, to,
		    at + strlen(from));
		pairs(members, ID_FIRST, v);
		at++;
	}
}

static void text_variants(const char *members)
{
	static const char *const swaps[][2] = {
		{ "\"gemm\"", "\"g\\u0065mm\"" },
		{ "\"gemm\"", "\"\\u0067emm\"" },
		{ "\"gemm\"", "\"gemm\\u0000\"" },
		{ "\"gemm\"", "\"ge\\\"mm\"" },
		{ "\"gemm\"", "\"GEMM\"" },
		{ "\"gemm\"", "\"gemm \"" },
		{ "\"gemm\"", "\"g\xc3\xa9mm\"" },
		{ "\"gemm\"", "\"gemm\",\"kernel\":\"gemm\"" },
		{ "\"gemm\"", "\"gemm\",\"kernel\":\"rmsnorm\"" },
		{ "\"cpu\"", "\"c\\u0070u\"" },
		{ "\"cpu\"", "\"opencl\"" },
		{ "\"cpu\"", "\"cuda\"" },
		{ "\"cpu\"", "\"\\/cpu\"" },
		{ "\"get\"", "\"g\\u0065t\"" },
		{ "\"get\"", "\"explain\"" },
		{ "\"get\"", "\"warm\"" },
		{ "\"get\"", "\"ping\"" },
		{ "\"get\"", "\"get\",\"op\":\"get\"" },
		{ "\"kernel\"", "\"k\\u0065rnel\"" },
		{ "\"kernel\"", "\"kernel \"" },
		{ "\"shape\"", "\"sh\\u0061pe\"" },
		{ "\"f32\"", "\"f16\"" },
		{ "\"f32\"", "\"bf16\"" },
		{ "\"f16\"", "\"f32\"" },
		{ ":64", ":64.0" },
		{ ":64", ":6.4e1" },
		{ ":64", ":-64" },
		{ ":64", ":064" },
		{ ":64", ":\"64\"" },
		{ ":64", ":64,\"M\":1" },
		{ ":1,", ":1,\"M\":1," },
		{ ":1,", ":true," },
		{ "\"fast\"", "\"exact\"" },
		{ "\"meta\"", "\"artifact\"" },
		{ "\"meta\"", "\"Meta\"" },
		{ "\"auto\"", "\"x86-64\"" },
		{ "\"auto\"", "\"x86-64-v4\"" },
		{ "[\"R\"]", "[\"R\",\"R\"]" },
		{ "[\"R\"]", "[]" },
		{ ",", ", " },
		{ ",", ",\n" },
		{ ":", ": " },
		{ ":", "\t:\t" },
		{ "{", "{ " },
		{ "}", " }" },
	};
	char s[4096], v[8192];
	size_t i, n;

	instance(s, sizeof s, members, ID_FIRST, "12");
	for (i = 0; i < sizeof swaps / sizeof *swaps; i++)
		replace_each(members, s, swaps[i][0], swaps[i][1]);
	/* Around the object. */
	snprintf(v, sizeof v, " %s", s);
	pairs(members, ID_FIRST, v);
	snprintf(v, sizeof v, "%s ", s);
	pairs(members, ID_FIRST, v);
	snprintf(v, sizeof v, "%s\n", s);
	pairs(members, ID_FIRST, v);
	snprintf(v, sizeof v, "%sx", s);
	pairs(members, ID_FIRST, v);
	snprintf(v, sizeof v, "%s{}", s);
	pairs(members, ID_FIRST, v);
	snprintf(v, sizeof v, "[%s]", s);
	pairs(members, ID_FIRST, v);
	n = strlen(s);
	memcpy(v, s, n);
	v[n] = '\0';
	pair(members, ID_FIRST, v, n + 1);
	/* Past the fast path's template limit: white space to 3000 bytes. */
	n = strlen(s);
	memset(v, ' ', 3000);
	memcpy(v, s, n - 1);
	v[2999] = '}';
	pair(members, ID_FIRST, v, 3000);
	/* Headers that are not gets at all. */
	pairs(members, ID_FIRST, "{}");
	pairs(members, ID_FIRST, "{\"id\":5}");
	pairs(members, ID_FIRST, "{\"op\":\"get\",\"id\":5}");
	pairs(members, ID_FIRST, "{\"op\":\"ping\",\"id\":5}");
	pairs(members, ID_FIRST, "[]");
	pairs(members, ID_FIRST, "\"id\"");
	pairs(members, ID_FIRST, "");
}

static void build_corpus(int full)
{
	char s[4096];
	size_t b;
	int w;

	for (b = 0; b < sizeof bases / sizeof *bases; b++) {
		for (w = ID_FIRST; w <= ID_NONE; w++) {
			/* Learned, then served from the fast path. */
			instance(s, sizeof s, bases[b], w, "1");
			pushf("%s", s);
			pair(bases[b], w, s, strlen(s));
			if (w == ID_NONE)
				pairs(bases[b], w, s);
		}
		if (full || b == 0) {
			instance(s, sizeof s, bases[b], ID_FIRST, "12");
			byte_variants(bases[b], ID_FIRST, s);
		}
		if (full)
			id_variants(bases[b]);
		order_variants(bases[b]);
		text_variants(bases[b]);
	}
}

/* The reply's header with "source" and "compile_ms" values masked. */
static char *normalized(const char *h, size_t n)
{
	static const char *const keys[] = { "\"source\":", "\"compile_ms\":" };
	char *out = malloc(n + 1), *p, *e;
	size_t k;

	cr_assert(out);
	memcpy(out, h, n);
	out[n] = '\0';
	for (k = 0; k < 2; k++) {
		p = strstr(out, keys[k]);
		if (!p)
			continue;
		p += strlen(keys[k]);
		e = p;
		if (*e == '"') {
			for (e++; *e && *e != '"'; e++)
				;
			if (*e)
				e++;
		} else {
			for (; *e && *e != ',' && *e != '}'; e++)
				;
		}
		memmove(p + 1, e, strlen(e) + 1);
		*p = '*';
	}
	return out;
}

typedef struct {
	char *header;           /* normalized */
	unsigned char *payload;
	size_t plen;
	int closed;             /* the daemon closed the connection */
} raw_t;

static void raw_free(raw_t *r)
{
	free(r->header);
	free(r->payload);
	memset(r, 0, sizeof *r);
}

static int send_raw(int fd, const item_t *it)
{
	unsigned char pre[8] = {
		(unsigned char)(it->n >> 24), (unsigned char)(it->n >> 16),
		(unsigned char)(it->n >> 8), (unsigned char)it->n, 0, 0, 0, 0 };

	return e2e_write_all(fd, pre, 8) || e2e_write_all(fd, it->p, it->n);
}

static void recv_raw(int fd, raw_t *r)
{
	unsigned char pre[8];
	uint32_t hl, pl;
	char *h;

	memset(r, 0, sizeof *r);
	if (e2e_read_all(fd, pre, 8)) {
		r->closed = 1;
		return;
	}
	hl = (uint32_t)pre[0] << 24 | (uint32_t)pre[1] << 16 |
	    (uint32_t)pre[2] << 8 | pre[3];
	pl = (uint32_t)pre[4] << 24 | (uint32_t)pre[5] << 16 |
	    (uint32_t)pre[6] << 8 | pre[7];
	h = malloc((size_t)hl + 1);
	cr_assert(h);
	cr_assert_eq(e2e_read_all(fd, h, hl), 0);
	r->header = normalized(h, hl);
	free(h);
	if (pl) {
		r->payload = malloc(pl);
		cr_assert(r->payload);
		cr_assert_eq(e2e_read_all(fd, r->payload, pl), 0);
		r->plen = pl;
	}
}

static int reconnect(int *fd, const char *sock)
{
	if (*fd >= 0)
		close(*fd);
	*fd = e2e_connect(sock);
	return *fd >= 0;
}

/* Runs the corpus against A and B in step; returns the number of
 * requests whose replies differ, printing the first few.  EXPECT_BAD is
 * the planted-bug run: it stops at the first difference and prints it as
 * information (Criterion fails a run that logged an error). */
static size_t run_corpus(int expect_bad)
{
	int fa = -1, fb = -1;
	size_t i, bad = 0;
	raw_t ra, rb;

	signal(SIGPIPE, SIG_IGN);
	cr_assert(reconnect(&fa, A.sock) && reconnect(&fb, B.sock));
	for (i = 0; i < C.n; i++) {
		/* Both sent first: a compile runs in both daemons at once. */
		cr_assert_eq(send_raw(fa, &C.v[i]), 0);
		cr_assert_eq(send_raw(fb, &C.v[i]), 0);
		recv_raw(fa, &ra);
		recv_raw(fb, &rb);
		if (ra.closed != rb.closed || (!ra.closed &&
		    (strcmp(ra.header, rb.header) != 0 || ra.plen != rb.plen ||
		    (ra.plen && memcmp(ra.payload, rb.payload, ra.plen))))) {
			if (bad < 5)
				cr_log(expect_bad ? CR_LOG_INFO : CR_LOG_ERROR,
				    "request %zu '%.*s':\n fast: %s "
				    "(%zu bytes)\n full: %s (%zu bytes)", i,
				    (int)C.v[i].n, C.v[i].p,
				    ra.closed ? "closed" : ra.header, ra.plen,
				    rb.closed ? "closed" : rb.header, rb.plen);
			bad++;
		}
		/* A header that is not JSON, or a bad frame, is answered
		 * and the connection closed. */
		if (ra.closed || strstr(ra.header, "\"E_BAD_JSON\"") ||
		    strstr(ra.header, "\"E_BAD_FRAME\""))
			cr_assert(reconnect(&fa, A.sock));
		if (rb.closed || strstr(rb.header, "\"E_BAD_JSON\"") ||
		    strstr(rb.header, "\"E_BAD_FRAME\""))
			cr_assert(reconnect(&fb, B.sock));
		raw_free(&ra);
		raw_free(&rb);
		if (bad && expect_bad)
			break;
	}
	close(fa);
	close(fb);
	return bad;
}

static double fast_stat(const char *sock, const char *name)
{
	e2e_reply_t r;
	const cJSON *fp;
	double v;

	cr_assert_eq(e2e_call(sock, "{\"op\":\"stats\",\"id\":1}", &r), 0);
	fp = cJSON_GetObjectItemCaseSensitive(r.h, "fast_path");
	cr_assert(cJSON_IsObject(fp), "stats has no fast_path");
	v = cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(fp, name)) ?
	    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(fp, name)) :
	    e2e_num(fp, name);
	e2e_reply_free(&r);
	return v;
}

static void start_pair(void)
{
	const char *off[] = { "--workers", "1", "--no-fast-path", NULL };
	const char *on[] = { "--workers", "1", NULL };

	memset(&A, 0, sizeof A);
	memset(&B, 0, sizeof B);
	cr_assert_eq(e2e_start(&A, on), 0, "kspecd did not start");
	cr_assert_eq(e2e_start(&B, off), 0, "kspecd did not start");
}

Test(fastpath, replies_are_those_of_the_full_parse)
{
	double hits, replaced;
	size_t bad, hot = 0, i;

	build_corpus(1);
	for (i = 0; i < C.n; i++)
		hot += (size_t)C.v[i].hot;
	start_pair();
	bad = run_corpus(0);
	cr_assert_eq(bad, 0, "%zu of %zu replies differ", bad, C.n);
	/* The fast path did serve: every resend of a base is a hit unless
	 * a variant learned since took its slot; the other daemon's did
	 * not. */
	hits = fast_stat(A.sock, "hits");
	replaced = fast_stat(A.sock, "replaced");
	cr_assert_eq(fast_stat(A.sock, "enabled"), 1);
	cr_assert_geq(hits, (double)hot - replaced, "%g hits, %zu resends, "
	    "%g replaced", hits, hot, replaced);
	cr_assert_eq(fast_stat(B.sock, "enabled"), 0);
	cr_assert_eq(fast_stat(B.sock, "hits"), 0);
	cr_log_info("%zu requests, %zu resends, %g fast-path hits, %g learned, "
	    "%g replaced", C.n, hot, hits, fast_stat(A.sock, "learned"),
	    replaced);
}

Test(fastpath, the_check_catches_a_planted_fast_path_bug)
{
	const char *on[] = { "--workers", "1", NULL };
	const char *off[] = { "--workers", "1", "--no-fast-path", NULL };

	build_corpus(0);
	memset(&A, 0, sizeof A);
	memset(&B, 0, sizeof B);
	setenv("KSPEC_TEST_FAST_PATH_BUG", "prefix", 1);
	A.program = E2E_PLANT;
	cr_assert_eq(e2e_start(&A, on), 0, "kspecd-plant did not start");
	unsetenv("KSPEC_TEST_FAST_PATH_BUG");
	cr_assert_eq(e2e_start(&B, off), 0, "kspecd did not start");
	cr_assert_gt(run_corpus(1), 0, "the planted bug went unnoticed");
}

/* The cache itself: templates that fall in the same set of KS_FAST_WAYS
 * slots do not evict each other while there is room; a new one takes the
 * slot used least recently; a template is learned only when the parse
 * and the scan agree on the id. */
Test(fastpath, a_set_keeps_its_templates_and_replaces_the_least_used)
{
	enum { TRIES = 20000 };
	ks_fast_t *f = calloc(1, sizeof *f);
	static ks_fast_scan_t s[KS_FAST_WAYS + 1], t;
	static char h[KS_FAST_WAYS + 1][128];   /* a scan refers to its header */
	ks_get_t g;
	uint64_t set = 0;
	int i, n = 0;

	cr_assert(f);
	memset(&g, 0, sizeof g);
	ks_fast_init(f, 1);
	/* KS_FAST_WAYS + 1 headers whose templates share a set. */
	for (i = 0; i < TRIES && n < KS_FAST_WAYS + 1; i++) {
		int len = snprintf(h[n], sizeof h[n], "{\"op\":\"get\","
		    "\"id\":1,\"kernel\":\"k%d\"}", i);

		ks_fast_scan(f, h[n], (size_t)len, &t);
		cr_assert(t.usable && t.has_id && t.id == 1);
		if (n == 0)
			set = t.hash & (KS_FAST_SLOTS / KS_FAST_WAYS - 1);
		if ((t.hash & (KS_FAST_SLOTS / KS_FAST_WAYS - 1)) == set)
			s[n++] = t;
	}
	cr_assert_eq(n, KS_FAST_WAYS + 1, "no headers sharing a set");
	/* A parse that found another id teaches nothing. */
	ks_fast_learn(f, &s[0], 1, 2, 0, &g);
	cr_assert_null(ks_fast_find(f, &s[0]));
	for (i = 0; i < KS_FAST_WAYS; i++)
		ks_fast_learn(f, &s[i], 1, 1, 0, &g);
	for (i = 0; i < KS_FAST_WAYS; i++)
		cr_assert_not_null(ks_fast_find(f, &s[i]), "template %d of "
		    "a full set was evicted", i);
	cr_assert_eq(f->replaced, 0);
	/* s[0] is used again, so s[1] is the least recently used. */
	cr_assert_not_null(ks_fast_find(f, &s[0]));
	ks_fast_learn(f, &s[KS_FAST_WAYS], 1, 1, 0, &g);
	cr_assert_eq(f->replaced, 1);
	cr_assert_not_null(ks_fast_find(f, &s[0]));
	cr_assert_null(ks_fast_find(f, &s[1]), "not the least used replaced");
	cr_assert_not_null(ks_fast_find(f, &s[KS_FAST_WAYS]));
	ks_fast_close(f);
	free(f);
}

/* The scan takes out the value after the first bytes "id" wherever they
 * are; learning keeps a template only where that is the top-level key,
 * even when the parse's id is the same number. */
Test(fastpath, only_a_top_level_id_is_learned)
{
	static const char *const not_top[] = {
		"{\"x\":{\"id\":5},\"id\":5,\"op\":\"get\"}",
		"{\"x\":[{\"id\":5}],\"id\":5,\"op\":\"get\"}",
		"{\"x\\\"id\":5,\"id\":5,\"op\":\"get\"}",
	};
	static const char top[] = "{\"op\":\"get\", \"id\" : 5 ,\"x\":1}";
	ks_fast_t *f = calloc(1, sizeof *f);
	static ks_fast_scan_t s;
	ks_get_t g;
	size_t i;

	cr_assert(f);
	memset(&g, 0, sizeof g);
	ks_fast_init(f, 1);
	for (i = 0; i < sizeof not_top / sizeof *not_top; i++) {
		ks_fast_scan(f, not_top[i], strlen(not_top[i]), &s);
		cr_assert(s.usable && s.has_id && s.id == 5, "%s", not_top[i]);
		ks_fast_learn(f, &s, 1, 5, 0, &g);
		cr_assert_null(ks_fast_find(f, &s), "learned %s", not_top[i]);
	}
	ks_fast_scan(f, top, strlen(top), &s);
	ks_fast_learn(f, &s, 1, 5, 0, &g);
	cr_assert_not_null(ks_fast_find(f, &s), "%s not learned", top);
	ks_fast_close(f);
	free(f);
}
