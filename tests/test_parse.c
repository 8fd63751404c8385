/*
 * The IR's text form read back (specialize/parse.c): every kernel of the
 * library, in every variant, dtype, weight dtype and mode at every
 * fingerprint probe, built and specialized, prints back from its parse
 * byte for byte, and a parsed build specializes to what the library
 * specializes; every golden file does too.  A corpus of malformed texts,
 * one test per class of error, is refused with KS_E_BAD_KERNEL at the
 * exact line and column, with what was expected; the limits make a
 * hostile text cost an error.  The round trip's checker is shown to catch
 * a parse that drops an unroll hint.
 */
#include <criterion/criterion.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../specialize/specialize.h"
#include "spec.h"

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(parse, .init = setup);

typedef int parse_fn(const char *text, size_t len, ks_ir_kernel_t **out,
    ks_ir_parse_error_t *err);

static char *print(const ks_ir_kernel_t *k)
{
	ks_buf_t b;

	ks_buf_init(&b);
	cr_assert_eq(ks_ir_print(k, &b), KS_OK);
	return ks_buf_steal(&b, NULL);
}

/*
 * The round trip's checker: TEXT parsed by PARSE prints back to TEXT.
 * Returns 1 when it does (then *OUT, when not NULL, is the parsed kernel,
 * caller frees), else 0 with why in WHY.
 */
static int round_trips(parse_fn *parse, const char *text,
    ks_ir_kernel_t **out, char *why, size_t whylen)
{
	ks_ir_parse_error_t err;
	ks_ir_kernel_t *k;
	char *again;
	size_t i, line = 1;
	int same;

	if (parse(text, strlen(text), &k, &err) != KS_OK) {
		snprintf(why, whylen, "refused: %s", err.message);
		return 0;
	}
	again = print(k);
	for (i = 0; text[i] && text[i] == again[i]; i++)
		line += text[i] == '\n';
	same = text[i] == again[i];
	if (!same)
		snprintf(why, whylen, "prints back otherwise from line %zu",
		    line);
	free(again);
	if (same && out != NULL)
		*out = k;
	else
		ks_ir_free(k);
	return same;
}

/* ---- every library kernel ---- */

typedef struct {
	parse_fn *parse;
	const char *only;       /* the one kernel to check, or NULL: all */
	int texts;              /* checked */
	int failed;             /* that did not round-trip */
	char first[512];        /* the first failure */
	ks_hash_t *hashes;      /* of every text, for the distinct count */
	int nhashes, hashes_cap;
} tally_t;

static void note(tally_t *t, const char *what, const char *text)
{
	char why[300];

	t->texts++;
	if (t->nhashes == t->hashes_cap) {
		t->hashes_cap = t->hashes_cap ? 2 * t->hashes_cap : 1024;
		t->hashes = realloc(t->hashes, (size_t)t->hashes_cap *
		    sizeof *t->hashes);
		cr_assert_not_null(t->hashes);
	}
	ks_hash(text, strlen(text), &t->hashes[t->nhashes++]);
	if (round_trips(t->parse, text, NULL, why, sizeof why))
		return;
	if (t->failed++ == 0)
		snprintf(t->first, sizeof t->first, "%s: %s", what, why);
}

/* Binds SPEC's constant dims in K as ks_specialize does, and runs the
 * passes. */
static void specialize_parsed(ks_ir_kernel_t *k, const ks_spec_t *spec)
{
	char err[256];
	int i, p;

	for (i = 0; i < spec->ndims; i++) {
		if (!spec->dims[i].is_const)
			continue;
		for (p = 0; p < k->nparams; p++)
			if (k->params[p].kind == KS_PARAM_SCALAR &&
			    strcmp(k->params[p].name, spec->dims[i].name) == 0)
				break;
		cr_assert_lt(p, k->nparams, "no param %s", spec->dims[i].name);
		ks_pass_bind(k, p, spec->dims[i].value);
	}
	cr_assert_eq(ks_pass_run(k, err, sizeof err), KS_OK, "%s", err);
}

/*
 * One variant at one spec: its build (every dim a scalar) and its
 * specialization round-trip, and the parsed build, specialized, prints as
 * the library's specialization.  Returns 0 when the variant does not
 * apply to the spec.
 */
static int check_variant(tally_t *t, const ks_spec_t *spec,
    const char *variant)
{
	ks_ir_kernel_t *k, *raw, *parsed;
	ks_ir_parse_error_t err;
	char what[160], msg[256], *ktext, *rtext, *ptext;

	if (ks_specialize_variant(spec, variant, &k, msg, sizeof msg) != KS_OK)
		return 0;
	raw = spec->def->build(spec, variant);
	cr_assert_not_null(raw);
	ktext = print(k);
	rtext = print(raw);
	snprintf(what, sizeof what, "%s.%s dtype %s wdtype %s mode %d",
	    spec->def->name, variant, ks_dtype_name(spec->dtype),
	    ks_dtype_name(spec->wdtype), (int)spec->mode);
	note(t, what, ktext);
	note(t, what, rtext);
	if (t->parse == ks_ir_parse) {
		cr_assert_eq(ks_ir_parse(rtext, strlen(rtext), &parsed, &err),
		    KS_OK, "%s: %s", what, err.message);
		specialize_parsed(parsed, spec);
		ptext = print(parsed);
		cr_assert_str_eq(ptext, ktext, "%s: the parsed build "
		    "specializes otherwise", what);
		free(ptext);
		ks_ir_free(parsed);
	}
	free(ktext);
	free(rtext);
	ks_ir_free(raw);
	ks_ir_free(k);
	return 1;
}

/* Every kernel, dtype and weight dtype pair it takes, mode, fingerprint
 * probe and variant, as the fingerprint enumerates them.  Asserts every
 * variant of every kernel was reached. */
static void each_library_text(tally_t *t)
{
	int64_t probes[64][KS_MAX_DIMS];
	const ks_kernel_def_t *const *lib;
	int n, i, d, w, m, p, v, j, np, seen[16];

	lib = ks_kernels(&n);
	for (i = 0; i < n; i++) {
		const ks_kernel_def_t *def = lib[i];

		if (t->only != NULL && strcmp(def->name, t->only) != 0)
			continue;
		cr_assert_leq(def->nvariants, 16);
		memset(seen, 0, sizeof seen);
		np = ks_kernel_probes(def, probes, 64);
		for (d = 0; d < KS_DTYPE_COUNT; d++)
		for (w = 0; w < KS_DTYPE_ALL; w++)
		for (m = KS_MODE_EXACT; m <= KS_MODE_FAST; m++)
		for (p = 0; p < np; p++) {
			ks_dim_t dims[KS_MAX_DIMS];
			ks_spec_t spec;
			char err[256];

			if (w != d && !ks_kernel_wdtype_ok(def, (ks_dtype_t)d,
			    (ks_dtype_t)w))
				continue;
			for (j = 0; j < def->ndims; j++)
				dims[j] = (ks_dim_t){ def->dims[j],
				    probes[p][j] != 0, probes[p][j] };
			if (ks_kernel_validate_mixed(def, (ks_dtype_t)d,
			    (ks_dtype_t)w, (ks_mode_t)m, dims, def->ndims,
			    &spec, err, sizeof err) != KS_OK)
				continue;
			for (v = 0; v < def->nvariants; v++)
				seen[v] |= check_variant(t, &spec,
				    def->variants[v]);
		}
		for (v = 0; v < def->nvariants; v++)
			cr_assert(seen[v], "%s.%s: reached by no probe",
			    def->name, def->variants[v]);
	}
}

static int hash_cmp(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(ks_hash_t));
}

Test(parse, every_library_kernel_variant_and_dtype_prints_back_from_its_parse)
{
	tally_t t = { .parse = ks_ir_parse };
	int i, distinct = 0;

	each_library_text(&t);
	cr_assert_eq(t.failed, 0, "%d of %d texts do not round-trip; first: "
	    "%s", t.failed, t.texts, t.first);
	qsort(t.hashes, (size_t)t.nhashes, sizeof *t.hashes, hash_cmp);
	for (i = 0; i < t.nhashes; i++)
		distinct += i == 0 || !ks_hash_eq(&t.hashes[i],
		    &t.hashes[i - 1]);
	cr_assert_gt(distinct, 500, "only %d distinct texts", distinct);
	cr_log_info("round trip: %d texts (%d distinct), built and "
	    "specialized", t.texts, distinct);
	free(t.hashes);
}

/*
 * Shapes beyond the fingerprint's probes name what the probes do not:
 * attention's gqa at 8 query heads per KV head has query registers
 * q4_0 .. q7_3, which read like the block formats' names and must stay
 * names (the verifier refused the library's own kernel while they were
 * reserved).
 */
Test(parse, gqa_at_eight_heads_per_kv_head_prints_back_with_its_q4_0)
{
	static const int64_t vals[5] = { 0, 64, 8, 128, 0 };
	tally_t t = { .parse = ks_ir_parse };
	const ks_kernel_def_t *def = ks_kernel_find("attention_decode");
	ks_dim_t dims[KS_MAX_DIMS];
	ks_spec_t spec;
	char err[256];
	int j;

	cr_assert_not_null(def);
	cr_assert_eq(def->ndims, 5);
	for (j = 0; j < def->ndims; j++)
		dims[j] = (ks_dim_t){ def->dims[j], vals[j] != 0, vals[j] };
	cr_assert_eq(ks_kernel_validate_mixed(def, KS_DTYPE_F32, KS_DTYPE_F32,
	    KS_MODE_EXACT, dims, def->ndims, &spec, err, sizeof err), KS_OK,
	    "%s", err);
	cr_assert(check_variant(&t, &spec, "gqa"), "gqa was not built");
	cr_assert_eq(t.failed, 0, "%s", t.first);
	free(t.hashes);
}

/* LEVELS loops of 8 trips nested around one lanes store, as text. */
static char *nested_loops(int levels)
{
	ks_buf_t b;
	int i, j;

	ks_buf_init(&b);
	ks_buf_puts(&b, "kernel scale variant general entry ks_scale_general "
	    "nlanes 32\nparam 0 x buffer f32 read dims N\n"
	    "param 1 y buffer f32 write dims N\nparam 2 N scalar i64\n"
	    "param 3 a scalar f32\n");
	for (i = 0; i < levels; i++)
		ks_buf_printf(&b, "var %d i%d uniform i64\n", i, i);
	ks_buf_printf(&b, "var %d i lane i64\ngrid 1\nbody {\n", levels);
	for (i = 0; i < levels; i++) {
		for (j = 0; j <= i; j++)
			ks_buf_puts(&b, "  ");
		ks_buf_printf(&b, "for i%d = 0 to 8 step 1 {\n", i);
	}
	for (j = 0; j <= levels; j++)
		ks_buf_puts(&b, "  ");
	ks_buf_puts(&b, "lanes {\n");
	for (j = 0; j <= levels + 1; j++)
		ks_buf_puts(&b, "  ");
	ks_buf_printf(&b, "decl i = (lane + i%d)\n", levels - 1);
	for (j = 0; j <= levels + 1; j++)
		ks_buf_puts(&b, "  ");
	ks_buf_puts(&b, "y[i] = (a * x[i])\n");
	for (i = levels; i >= 0; i--) {
		for (j = 0; j <= i; j++)
			ks_buf_puts(&b, "  ");
		ks_buf_puts(&b, "}\n");
	}
	ks_buf_puts(&b, "}\n");
	return b.data;
}

/*
 * Ten loops of 8 trips, one inside the other, are 8^10 copies of the
 * innermost body if every loop unrolls: a 1 KB text that would take
 * the worker's memory.  The passes keep the kernel within the text form's
 * limits instead (the outer loops stay loops), and what they give is
 * still a kernel that prints and parses back.  Without the budget the
 * passes run for minutes and more on six levels (the time limit fails
 * the test).
 */
Test(parse, nested_constant_loops_unroll_within_the_limits, .timeout = 60)
{
	char *text = nested_loops(10), *out, err[256];
	ks_ir_parse_error_t perr;
	ks_ir_kernel_t *k, *again;

	cr_assert_lt(strlen(text), 2000);
	cr_assert_eq(ks_ir_parse(text, strlen(text), &k, &perr), KS_OK, "%s",
	    perr.message);
	cr_assert_eq(ks_pass_run(k, err, sizeof err), KS_OK, "%s", err);
	out = print(k);
	cr_assert_leq(strlen(out), KS_IR_MAX_TEXT, "%zu bytes",
	    strlen(out));
	cr_assert(strstr(out, "for i"), "every loop was unrolled");
	cr_assert_eq(ks_ir_parse(out, strlen(out), &again, &perr), KS_OK,
	    "%s", perr.message);
	ks_ir_free(again);
	ks_ir_free(k);
	free(out);
	free(text);
}

/* Unrolling names a copy's variable <name>_u<copy>, a name no local
 * array may already have. */
Test(parse, an_unrolled_copy_takes_no_local_arrays_name)
{
	static const char text[] =
	    "kernel scale variant general entry ks_scale_general nlanes 32\n"
	    "param 0 x buffer f32 read dims N\n"
	    "param 1 y buffer f32 write dims N\n"
	    "param 2 N scalar i64\n"
	    "param 3 a scalar f32\n"
	    "local 0 t_u0 f32 4\n"
	    "var 0 j uniform i64\n"
	    "var 1 t lane i64\n"
	    "grid 1\n"
	    "body {\n"
	    "  for j = 0 to 2 step 1 {\n"
	    "    lanes {\n"
	    "      decl t = (lane + j)\n"
	    "      y[t] = (a * x[t])\n"
	    "    }\n"
	    "  }\n"
	    "}\n";
	ks_ir_parse_error_t perr;
	ks_ir_kernel_t *k;
	char err[256], *out;

	cr_assert_eq(ks_ir_parse(text, strlen(text), &k, &perr), KS_OK, "%s",
	    perr.message);
	cr_assert_eq(ks_pass_run(k, err, sizeof err), KS_OK, "%s", err);
	out = print(k);
	cr_assert_null(strstr(out, "for j"), "the loop was not unrolled");
	cr_assert_not_null(strstr(out, "decl t_u8 = "), "%s", out);
	free(out);
	ks_ir_free(k);
}

/* A parse with a planted bug: the unroll hints are gone from what it
 * reads, as a parser that skipped the clause would lose them. */
static int parse_dropping_unroll(const char *text, size_t len,
    ks_ir_kernel_t **out, ks_ir_parse_error_t *err)
{
	char *copy = malloc(len + 1), *p;
	int rc;

	cr_assert_not_null(copy);
	memcpy(copy, text, len);
	copy[len] = '\0';
	while ((p = strstr(copy, " unroll ")) != NULL) {
		size_t skip = 8 + strspn(p + 8, "0123456789");

		memmove(p, p + skip, strlen(p + skip) + 1);
	}
	rc = ks_ir_parse(copy, strlen(copy), out, err);
	free(copy);
	return rc;
}

Test(parse, the_round_trip_check_catches_a_parse_that_drops_unroll)
{
	tally_t t = { .parse = parse_dropping_unroll, .only = "gemm" };

	each_library_text(&t);
	cr_assert_gt(t.failed, 0, "the planted bug went unseen");
	cr_assert(strstr(t.first, "gemm.gemv_m1") != NULL, "%s", t.first);
	cr_assert(strstr(t.first, "prints back otherwise") != NULL, "%s",
	    t.first);
	free(t.hashes);
}

/* Reads PATH whole, NUL-terminated; NULL when it cannot. */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *p = NULL;
	long n;

	if (f == NULL)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0 && (p = malloc((size_t)n + 1)) &&
	    fread(p, 1, (size_t)n, f) == (size_t)n)
		p[n] = '\0';
	fclose(f);
	return p;
}

Test(parse, every_golden_file_prints_back_from_its_parse)
{
	const char *slash = strrchr(__FILE__, '/');
	char dir[512], path[1024], why[300];
	struct dirent *d;
	int count = 0;
	DIR *dp;
	char *text;

	snprintf(dir, sizeof dir, "%.*s/golden", slash ?
	    (int)(slash - __FILE__) : 1, slash ? __FILE__ : ".");
	dp = opendir(dir);
	cr_assert_not_null(dp, "no %s", dir);
	while ((d = readdir(dp)) != NULL) {
		size_t n = strlen(d->d_name);

		if (n < 4 || strcmp(d->d_name + n - 3, ".ir") != 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, d->d_name);
		text = slurp(path);
		cr_assert_not_null(text, "cannot read %s", path);
		cr_assert(round_trips(ks_ir_parse, text, NULL, why,
		    sizeof why), "%s: %s", path, why);
		free(text);
		count++;
	}
	closedir(dp);
	cr_assert_geq(count, 9, "only %d golden .ir files", count);
}

/* ---- malformed texts ---- */

/* A small valid kernel, y = a * x; the texts below break it. */
static const char base[] =
    "kernel scale variant general entry ks_scale_general nlanes 32\n"
    "param 0 x buffer f32 read dims N\n"
    "param 1 y buffer f32 write dims N\n"
    "param 2 N scalar i64\n"
    "param 3 a scalar f32\n"
    "var 0 base uniform i64\n"
    "var 1 i lane i64\n"
    "grid ((N + 31) / 32)\n"
    "body {\n"
    "  decl base = (group * 32)\n"                     /* line 10 */
    "  lanes {\n"
    "    decl i = (base + lane)\n"
    "    if (i < N) {\n"
    "      y[i] = (a * x[i])\n"                        /* line 14 */
    "    }\n"
    "  }\n"
    "}\n";

/* BASE with its first FROM replaced by TO; caller frees. */
static char *edit(const char *from, const char *to)
{
	const char *at = strstr(base, from);
	size_t n = strlen(base) - strlen(from) + strlen(to) + 1;
	char *s = malloc(n);

	cr_assert_not_null(at, "'%s' is not in the base text", from);
	cr_assert_not_null(s);
	snprintf(s, n, "%.*s%s%s", (int)(at - base), base, to,
	    at + strlen(from));
	return s;
}

/* TEXT (LEN bytes) is refused at LINE, COLUMN with WORDS in the message,
 * which starts with the place. */
static void refused_n(const char *text, size_t len, int line, int column,
    const char *words)
{
	ks_ir_parse_error_t err;
	ks_ir_kernel_t *k = (ks_ir_kernel_t *)1;
	char place[64];
	size_t i;

	cr_assert_eq(ks_ir_parse(text, len, &k, &err), KS_E_BAD_KERNEL,
	    "accepted: %s", text);
	cr_assert_null(k);
	snprintf(place, sizeof place, "line %d, column %d: ", line, column);
	cr_assert_eq(err.line, line, "%s", err.message);
	cr_assert_eq(err.column, column, "%s", err.message);
	cr_assert_eq(strncmp(err.message, place, strlen(place)), 0, "%s",
	    err.message);
	cr_assert(strstr(err.message, words) != NULL, "'%s' not in: %s",
	    words, err.message);
	for (i = 0; err.message[i]; i++)
		cr_assert(err.message[i] >= 0x20 && err.message[i] < 0x7f,
		    "a byte that is not printable ASCII: %s", err.message);
}

static void refused(char *text, int line, int column, const char *words)
{
	refused_n(text, strlen(text), line, column, words);
	free(text);
}

/* An edit of the base text and where and why it is refused. */
typedef struct {
	const char *from, *to;
	int line, column;
	const char *words;
} mutation_t;

static void refused_each(const mutation_t *m, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		refused(edit(m[i].from, m[i].to), m[i].line, m[i].column,
		    m[i].words);
}

Test(parse, the_base_text_of_the_corpus_is_accepted_and_prints_back)
{
	ks_ir_kernel_t *k;
	char why[300];

	cr_assert(round_trips(ks_ir_parse, base, &k, why, sizeof why), "%s",
	    why);
	cr_assert_str_eq(k->entry, "ks_scale_general");
	cr_assert_eq(k->nparams, 4);
	cr_assert_str_eq(k->params[0].dims, "N");
	cr_assert_eq(k->params[3].type, KS_TY_F32);
	cr_assert_eq(k->vars[1].scope, KS_VAR_LANE);
	ks_ir_free(k);
}

Test(parse, an_unexpected_token_is_named_with_what_was_expected)
{
	refused(edit("(a * x[i])", "(a * x[i, 1])"), 14, 22,
	    "expected ']' after the index, found ','");
	refused(edit("(i < N)", "(i <> N)"), 13, 12,
	    "expected a space after the operator, found '>'");
	refused(edit("grid ((N", "grid [(N"), 8, 6,
	    "expected an expression, found '['");
	refused(edit("    }\n  }", "    }\n  }\n  ;"), 17, 3,
	    "expected a statement, found ';'");
	refused(edit("(a * x", "(a \xff x"), 14, 17,
	    "expected a binary operator, found byte 0xff");
}

Test(parse, an_unknown_name_is_refused_where_it_is_used)
{
	static const mutation_t cases[] = {
		{ "(base + lane)", "(bse + lane)", 12, 15,
		    "unknown name 'bse'" },
		{ "decl i =", "decl j =", 12, 10, "unknown name 'j'" },
	};

	refused_each(cases, sizeof cases / sizeof *cases);
}

Test(parse, a_type_error_is_the_verifiers_at_the_node_it_names)
{
	static const mutation_t cases[] = {
		{ "(a * x[i])", "(i * x[i])", 14, 14,
		    "operand types i64 and f32 differ" },
		{ "(group * 32)", "(lane * 32)", 10, 16,
		    "lane index used outside LANES" },
		{ "if (i < N)", "if (i + N)", 13, 5,
		    "if condition: type i64, expected bool" },
		{ "nlanes 32", "nlanes 0", 1, 60, "nlanes 0 out of range" },
		{ "var 1 i lane i64", "var 1 i lane f32", 12, 5,
		    "decl i: initializer is i64, variable is f32" },
	};

	refused_each(cases, sizeof cases / sizeof *cases);
}

Test(parse, a_reserved_name_is_refused_at_its_declaration)
{
	static const mutation_t cases[] = {
		{ "var 0 base", "var 0 float", 6, 7,
		    "name 'float' is reserved" },
		{ "var 0 base", "var 0 ks_t1", 6, 7,
		    "name 'ks_t1' is reserved: a prefix" },
		{ "var 0 base", "var 0 threadIdx", 6, 7,
		    "name 'threadIdx' is reserved" },
		{ "var 0 base", "var 0 float4", 6, 7, "a vector type" },
		{ "param 3 a scalar", "param 3 lane scalar", 5, 9,
		    "name 'lane' is reserved" },
		{ "var 1 i lane", "var 1 __i lane", 7, 7,
		    "name '__i' is reserved" },
	};

	refused_each(cases, sizeof cases / sizeof *cases);
}

Test(parse, a_duplicate_name_is_refused_with_the_first)
{
	static const mutation_t cases[] = {
		{ "var 1 i lane", "var 1 x lane", 7, 7,
		    "duplicate name 'x': already param 0 (line 2)" },
		{ "var 1 i lane", "var 1 base lane", 7, 7,
		    "duplicate name 'base': already var 0 (line 6)" },
	};

	refused_each(cases, sizeof cases / sizeof *cases);
}

Test(parse, a_missing_body_is_refused_at_the_end)
{
	char *s = edit("body {", "");

	s[strstr(s, "grid") - s + strlen("grid ((N + 31) / 32)\n")] = '\0';
	refused(s, 9, 1, "expected 'body ' after the grid, found end of text");
	refused(edit("body {", "body"), 9, 1,
	    "expected 'body ' after the grid, found 'body'");
}

Test(parse, an_unterminated_block_names_where_it_opened)
{
	char *s = edit("", "");

	s[strlen(s) - 2] = '\0';        /* the body's closing "}\n" */
	refused(s, 17, 1, "expected '}' closing the block of line 9, found "
	    "end of text");
	refused(edit("    }\n  }\n}\n", "    }\n"), 16, 1,
	    "expected '}' closing the block of line 11, found end of text");
	refused(edit("    decl i", "   decl i"), 12, 1,
	    "expected 4 spaces of indentation, found 3");
}

/* A grid of DEPTH nested binary expressions. */
static char *nested_grid(int depth)
{
	size_t n = strlen(base) + 8 * (size_t)depth;
	char *grid = malloc(n), *s;
	int i;

	cr_assert_not_null(grid);
	strcpy(grid, "grid ");
	for (i = 0; i < depth; i++)
		strcat(grid, "(");
	strcat(grid, "N");
	for (i = 0; i < depth; i++)
		strcat(grid, " + 1)");
	s = edit("grid ((N + 31) / 32)", grid);
	free(grid);
	return s;
}

Test(parse, nesting_deeper_than_the_limit_is_refused)
{
	ks_ir_kernel_t *k;
	char why[300], *s = nested_grid(KS_IR_MAX_DEPTH - 1);

	/* KS_IR_MAX_DEPTH - 1 binary expressions and their leaf N */
	cr_assert(round_trips(ks_ir_parse, s, &k, why, sizeof why), "%s", why);
	ks_ir_free(k);
	free(s);
	/* one more, and N is one level too deep */
	refused(nested_grid(KS_IR_MAX_DEPTH), 8, 6 + KS_IR_MAX_DEPTH,
	    "nested deeper than 128 blocks and expressions");
	refused(nested_grid(100000), 8, 6 + KS_IR_MAX_DEPTH,
	    "nested deeper than 128");
}

Test(parse, a_text_longer_than_the_limit_is_refused_before_it_is_read)
{
	size_t n = KS_IR_MAX_TEXT + 1;
	char *s = malloc(n);

	cr_assert_not_null(s);
	memset(s, '(', n);
	refused_n(s, n, 1, 1, "more than 1048576");
	free(s);
}

/* BASE with COUNT copies of LINE (a format of one %d) before BEFORE. */
static char *repeated(const char *before, const char *line, int count)
{
	size_t cap = strlen(base) + (size_t)count * (strlen(line) + 16);
	char *lines = malloc(cap), *s;
	size_t used = 0;
	int i;

	cr_assert_not_null(lines);
	for (i = 0; i < count; i++)
		used += (size_t)snprintf(lines + used, cap - used, line, i);
	strcat(lines, before);
	s = edit(before, lines);
	free(lines);
	return s;
}

Test(parse, counts_past_their_limits_are_refused_where_they_pass_them)
{
	char *decls;
	size_t n;
	int i;

	/* vars: 2 are declared, so the one after KS_IR_MAX_VARS - 2 more */
	refused(repeated("grid", "var %d v uniform i64\n", 1), 8, 5,
	    "expected var 2 (in order), found 0");
	decls = malloc((size_t)KS_IR_MAX_VARS * 32);
	cr_assert_not_null(decls);
	for (i = 2, n = 0; i <= KS_IR_MAX_VARS; i++)
		n += (size_t)sprintf(decls + n, "var %d w%d uniform i64\n", i,
		    i);
	strcat(decls, "grid");
	refused(edit("grid", decls), 8 + KS_IR_MAX_VARS - 2, 1,
	    "more than 4096 vars");
	free(decls);
	/* statements: the body's block is the first */
	refused(repeated("  lanes {", "  barrier\n", KS_IR_MAX_STMTS), 10 +
	    KS_IR_MAX_STMTS - 1, 3, "more than 65536 statements");
	/* local arrays: 48 KiB of them at most */
	refused(edit("var 0", "local 0 s f32 100000\nvar 0"), 6, 15,
	    "local arrays of more than 12288 f32 elements together");
	refused(edit("var 0", "local 0 s f32 4096\nlocal 1 t f32 4096\n"
	    "local 2 u f32 4096\nlocal 3 v f32 1\nvar 0"), 9, 15,
	    "more than 12288");
	refused(edit("var 0", "local 0 s f32 0\nvar 0"), 6, 9,
	    "local array s: 0 elements, expected 1..4096");
}

Test(parse, expression_nodes_past_their_limit_are_refused)
{
	/* Statements of PER nodes each, 100 levels deep, until the count
	 * passes KS_IR_MAX_EXPRS (within the text's limit).  Before them the
	 * grid has 5 nodes and the decl of base 3; nodes are counted in
	 * pre-order, so the one past the limit is the R-th '(' of statement
	 * S. */
	int per = 201, before = 8, s = (KS_IR_MAX_EXPRS - before) / per;
	int r = KS_IR_MAX_EXPRS + 1 - (before + s * per), i, j;
	size_t cap = (size_t)(s + 1) * 720 + 64, n = 0;
	char *body = malloc(cap);

	cr_assert_not_null(body);
	cr_assert(r >= 1 && r <= 100);
	for (i = 0; i <= s; i++) {
		n += (size_t)sprintf(body + n, "  base = ");
		for (j = 0; j < 100; j++)
			body[n++] = '(';
		body[n++] = '1';
		for (j = 0; j < 100; j++)
			n += (size_t)sprintf(body + n, " + 1)");
		body[n++] = '\n';
	}
	sprintf(body + n, "  lanes {");
	cr_assert_lt(n + strlen(base), (size_t)KS_IR_MAX_TEXT);
	refused(edit("  lanes {", body), 11 + s, 10 + r - 1,
	    "more than 262144 expression nodes");
	free(body);
}

Test(parse, a_number_out_of_range_or_not_canonical_is_refused)
{
	static const mutation_t cases[] = {
		{ "(group * 32)", "(group * 99999999999999999999)", 10, 24,
		    "out of range (int64)" },
		{ "(group * 32)", "(group * 032)", 10, 24,
		    "expected an integer as 32, found '032'" },
		{ "(group * 32)", "(group * -0)", 10, 24,
		    "expected an integer as 0, found '-0'" },
		{ "(a * x[i])", "(0x1p+0 * x[i])", 14, 15,
		    "expected the f32 constant as 1.0, found '0x1p+0'" },
		{ "(a * x[i])", "(0.5 * x[i])", 14, 15,
		    "expected the f32 constant as 0x1p-1, found '0.5'" },
		{ "(a * x[i])", "(0.1 * x[i])", 14, 15, "not exactly an f32" },
		{ "(a * x[i])", "(0x1p+200 * x[i])", 14, 15,
		    "out of range or not exactly an f32" },
		{ "param 2 N", "param 02 N", 4, 7,
		    "expected param as 2, found '02'" },
		{ "nlanes 32", "nlanes 99999999999", 1, 60,
		    "nlanes 99999999999 out of range" },
	};

	refused_each(cases, sizeof cases / sizeof *cases);
}

Test(parse, an_entry_the_library_would_not_make_is_refused)
{
	static const mutation_t cases[] = {
		{ "entry ks_scale_general", "entry ks_other", 1, 36,
		    "expected entry ks_scale_general (ks_<kernel>_<variant>), "
		    "found " "'ks_other'" },
		{ "entry ks_scale_general", "entry ks_scale_general2", 1, 36,
		    "expected entry ks_scale_general" },
	};

	refused_each(cases, sizeof cases / sizeof *cases);
}

Test(parse, trailing_text_after_the_body_is_refused)
{
	static const mutation_t cases[] = {
		{ "  }\n}\n", "  }\n}\nx\n", 18, 1,
		    "expected the end of the text after the body, found 'x'" },
		{ "  }\n}\n", "  }\n} \n", 17, 2,
		    "expected a newline after the body, found a space" },
	};

	refused_each(cases, sizeof cases / sizeof *cases);
}

/* The base's lanes body as one loop of the hint UNROLL ("" for none)
 * and STEP; caller frees. */
static char *loop(const char *step, const char *unroll)
{
	char text[256];

	snprintf(text, sizeof text, "    for i = lane to N step %s%s {\n"
	    "      if (i < N) {\n        y[i] = (a * x[i])\n      }\n    }\n",
	    step, unroll);
	return edit("    decl i = (base + lane)\n    if (i < N) {\n"
	    "      y[i] = (a * x[i])\n    }\n", text);
}

Test(parse, a_loop_is_read_with_its_unroll_hint_as_printed)
{
	ks_ir_kernel_t *k;
	char why[300], *s = loop("32", " unroll 4");

	cr_assert(round_trips(ks_ir_parse, s, &k, why, sizeof why), "%s", why);
	cr_assert_eq(k->body->items[1]->body->items[0]->unroll, 4);
	ks_ir_free(k);
	free(s);
	refused(loop("32", " unroll 0"), 12, 38, "an unroll hint of 0 is "
	    "written as no unroll clause");
	refused(loop("32", " unroll 1"), 12, 5, "for: unroll hint 1 is not 0 "
	    "or 2..64");
	refused(loop("0", ""), 12, 5, "for: step 0 is not positive");
}

Test(parse, declarations_and_buffers_are_read_strictly)
{
	char *nul = edit("", "");

	nul[strstr(nul, "dims N") - nul + 5] = '\0';  /* param 0's dims */
	refused_n(nul, strlen(base), 2, 32, "dims of x: byte 0x00 is not "
	    "allowed in dims");
	free(nul);

	static const mutation_t cases[] = {
		{ "param 1 y", "param 2 y", 3, 7,
		    "expected param 1 (in order), found 2" },
		{ "read dims N", "read", 2, 26,
		    "expected ' dims ' after the access (every buffer declares "
		    "its " "dims)" },
		{ "dims N\nparam 1", "dims N+\nparam 1", 2, 34,
		    "dims of x: expected a number, an i64 scalar param or "
		    "'('" },
		{ "dims N\nparam 1", "dims a\nparam 1", 2, 32,
		    "dims of x: 'a' is not an i64 scalar param" },
		{ "dims N\nparam 1", "dims N(N\nparam 1", 2, 33,
		    "dims of x: expected an operator, ',' or the end of the "
		    "line" },
		{ "buffer f32 read", "buffer f64 read", 2, 18,
		    "expected a buffer type" },
		{ "y buffer f32 write", "y buffer q8_0 write", 3, 9,
		    "buffer y: bad type, dtype, access or binding" },
		{ "N scalar i64", "N scalar bool", 4, 18,
		    "expected i64 or f32, found 'bool'" },
		{ "    decl i = (base + lane)\n",
		    "    decl i = (base + lane)\n    base = i\n", 13, 5,
		    "uniform variable base assigned inside LANES" },
		{ "lanes {\n", "decl i = reduce_sum(base)\n  lanes {\n", 11,
		    23, "reduce of uniform variable base, expected a lane "
		    "variable" },
	};

	refused_each(cases, sizeof cases / sizeof *cases);
}
