/*
 * The quantized weight formats q8_0, q4_0 and q4_k (docs/kernels.md,
 * "Quantized weight formats") against llama.cpp's own codec.
 *
 * Without ggml (suite quant), from the golden vectors of tests/golden/quant
 * (bench/ggml/golden.c wrote them from the pinned ggml; INDEX lists them):
 *   - the reference decoder (ref/ref_quant.h) and libkspec's
 *     kspec_dequantize give ggml's decoded floats bitwise, every file;
 *   - kspec_quantize gives ggml's bytes, every file with inputs;
 *   - the sizes of each format, and every documented error: a format that
 *     is not one of the three (GGUF's others by name), K not a multiple of
 *     the block, a non-finite weight, a scale beyond f16, a scale too small
 *     to invert, a q4_k fit that overflows, a short or NULL buffer, a size
 *     that overflows;
 *   - each checker catches a planted bug: the decoder check fails on the
 *     reference decoder with its nibbles swapped, its scale read as bf16,
 *     q4_k's 6-bit fields unpacked wrong, the block boundary one weight
 *     off, the last block of a row left out; the quantizer check on a
 *     flipped byte, and the golden ties on quantizers that round halves
 *     to even (q8_0) or to nearest instead of truncating (q4_0).
 *
 * With ggml (suite ggml), when the package that `deploy/deps.sh --bench`
 * installs is there (tests/ggml.h), else skipped with the reason: the
 * golden files are exactly what that ggml writes and decodes, and
 * thousands of further rows quantize and decode bitwise alike in kspec,
 * the reference decoder and ggml; a row kspec refuses for a scale beyond
 * f16 is one where ggml writes an infinite scale.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The reference decoder with its test plants switchable. */
static int ref_quant_planted;
#define REF_QUANT_PLANT(p) (ref_quant_planted == (p))
#include "../ref/ref_quant.h"

#include "../include/kspec.h"
#include "e2e.h"
#include "ggml.h"

TestSuite(quant, .timeout = 120);
TestSuite(ggml, .timeout = 300);

/* Fills decoder outputs first, so that a weight left unwritten differs. */
#define CANARY_BITS 0x7fc0deadu

/* ---- golden files ---- */

typedef struct {
	char name[64];
	int fmt, rows, k, has_input;
	float *x;               /* rows * k, when has_input */
	uint8_t *q;             /* qlen bytes */
	size_t qlen;
	float *y;               /* rows * k: ggml's decoding of q */
} golden_t;

static void golden_path(char *out, size_t n, const char *name)
{
	const char *slash = strrchr(__FILE__, '/');

	if (slash)
		snprintf(out, n, "%.*s/golden/quant/%s",
		    (int)(slash - __FILE__), __FILE__, name);
	else
		snprintf(out, n, "golden/quant/%s", name);
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	cr_assert_not_null(p);
	return p;
}

static void golden_load(const char *file, golden_t *g)
{
	char path[4096], fmtname[9] = { 0 };
	uint8_t head[32];
	size_t n, got;
	FILE *f;

	golden_path(path, sizeof path, file);
	f = fopen(path, "rb");
	cr_assert_not_null(f, "missing golden file %s (make golden-quant)",
	    path);
	cr_assert_eq(fread(head, 1, 32, f), 32, "%s: short header", path);
	cr_assert(memcmp(head, "KSQGOLD1", 8) == 0, "%s: not a golden file",
	    path);
	memcpy(fmtname, head + 8, 8);
	memset(g, 0, sizeof *g);
	snprintf(g->name, sizeof g->name, "%.63s", file);
	g->fmt = ref_qfmt_of(fmtname);
	g->rows = (int)le32(head + 16);
	g->k = (int)le32(head + 20);
	g->has_input = (int)le32(head + 24);
	cr_assert(g->fmt >= 0 && g->rows >= 1 && g->rows <= 64 && g->k >= 1 &&
	    g->k <= 4096 && g->k % ref_qblock(g->fmt) == 0,
	    "%s: bad header (%s, %d x %d)", path, fmtname, g->rows, g->k);
	n = (size_t)g->rows * (size_t)g->k;
	g->qlen = (size_t)g->rows * (size_t)ref_qrow_bytes(g->fmt, g->k);
	g->x = xmalloc(n * 4);
	g->q = xmalloc(g->qlen);
	g->y = xmalloc(n * 4);
	got = (g->has_input ? fread(g->x, 4, n, f) : n) +
	    fread(g->q, 1, g->qlen, f) + fread(g->y, 4, n, f);
	cr_assert_eq(got, 2 * n + g->qlen, "%s: short file", path);
	cr_assert_eq(fgetc(f), EOF, "%s: bytes past the end", path);
	fclose(f);
}

static void golden_free(golden_t *g, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		free(g[i].x);
		free(g[i].q);
		free(g[i].y);
	}
	free(g);
}

/* Every file of INDEX; *N gets their number. */
static golden_t *golden_all(size_t *n)
{
	char path[4096], line[256];
	golden_t *g = NULL;
	size_t cap = 0;
	FILE *f;

	*n = 0;
	golden_path(path, sizeof path, "INDEX");
	f = fopen(path, "r");
	cr_assert_not_null(f, "missing %s (make golden-quant)", path);
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		if (!line[0] || line[0] == '#')
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 64;
			g = realloc(g, cap * sizeof *g);
			cr_assert_not_null(g);
		}
		golden_load(line, &g[(*n)++]);
	}
	fclose(f);
	return g;
}

/* ---- the checks ---- */

typedef void (*decoder_fn)(const golden_t *g, float *out);

static void decode_ref(const golden_t *g, float *out)
{
	ref_dequant_rows(g->fmt, g->q, g->rows, g->k, out);
}

static void decode_kspec(const golden_t *g, float *out)
{
	char err[256];
	int rc = kspec_dequantize(ref_qfmt_names[g->fmt], g->q, g->qlen,
	    (size_t)g->rows, (size_t)g->k, out, err, sizeof err);

	cr_assert_eq(rc, KSPEC_OK, "%s: %s", g->name, err);
}

/* Weights of G's rows that DEC decodes to other bits than ggml did;
 * the first one described in WHY. */
static size_t decode_mismatches(const golden_t *g, decoder_fn dec,
    char *why, size_t whylen)
{
	size_t n = (size_t)g->rows * (size_t)g->k, i, bad = 0;
	uint32_t *got = xmalloc(n * 4), want;

	for (i = 0; i < n; i++)
		got[i] = CANARY_BITS;
	dec(g, (float *)got);
	for (i = 0; i < n; i++) {
		memcpy(&want, &g->y[i], 4);
		if (got[i] == want)
			continue;
		if (!bad++)
			snprintf(why, whylen, "%s: weight %zu (row %zu, %zu) "
			    "is 0x%08x, ggml 0x%08x (%g)", g->name, i,
			    i / (size_t)g->k, i % (size_t)g->k, got[i], want,
			    (double)g->y[i]);
	}
	free(got);
	return bad;
}

/* Bytes of kspec_quantize's output for G's input that differ from ggml's;
 * FLIP (>= 0) flips a bit of that byte of the output first. */
static size_t quantize_mismatches(const golden_t *g, long flip, char *why,
    size_t whylen)
{
	uint8_t *q = xmalloc(g->qlen);
	char err[256];
	size_t i, bad = 0;
	int rc = kspec_quantize(ref_qfmt_names[g->fmt], g->x, (size_t)g->rows,
	    (size_t)g->k, q, g->qlen, err, sizeof err);

	cr_assert_eq(rc, KSPEC_OK, "%s: kspec refused a row ggml took: %s",
	    g->name, err);
	if (flip >= 0)
		q[flip] ^= 0x10;
	for (i = 0; i < g->qlen; i++) {
		if (q[i] != g->q[i] && !bad++)
			snprintf(why, whylen, "%s: byte %zu (row %zu) is "
			    "0x%02x, ggml 0x%02x", g->name, i,
			    i / (size_t)ref_qrow_bytes(g->fmt, g->k), q[i],
			    g->q[i]);
	}
	free(q);
	return bad;
}

/* ---- without ggml ---- */

Test(quant, golden_index_has_every_case_of_every_format)
{
	static const char *const cases[] = { "random", "gaussian", "zeros",
		"spike", "tiny", "huge", "mixed", "codes", "ties", "signs",
		"blocks" };
	size_t n, i, c;
	int f, found;
	golden_t *g = golden_all(&n);

	for (f = 0; f < REF_QFMT_N; f++) {
		for (c = 0; c < sizeof cases / sizeof *cases; c++) {
			char want[64];

			snprintf(want, sizeof want, "%s.%s.bin",
			    ref_qfmt_names[f], cases[c]);
			for (found = 0, i = 0; i < n; i++)
				found += strcmp(g[i].name, want) == 0 &&
				    g[i].fmt == f;
			cr_expect_eq(found, 1, "INDEX lacks %s", want);
		}
	}
	for (i = 0; i < n; i++)
		cr_expect_eq(g[i].has_input,
		    strstr(g[i].name, ".blocks.") == NULL,
		    "%s: only the decode-only blocks lack inputs", g[i].name);
	golden_free(g, n);
}

/* DEC decodes every golden file as ggml did. */
static void expect_decoder_is_ggml(decoder_fn dec)
{
	char why[256];
	size_t n, i;
	golden_t *g = golden_all(&n);

	for (i = 0; i < n; i++)
		cr_expect_eq(decode_mismatches(&g[i], dec, why, sizeof why), 0,
		    "%s", why);
	golden_free(g, n);
}

Test(quant, reference_decoder_is_ggml_on_every_golden_file)
{
	expect_decoder_is_ggml(decode_ref);
}

Test(quant, kspec_dequantize_is_ggml_on_every_golden_file)
{
	expect_decoder_is_ggml(decode_kspec);
}

Test(quant, kspec_quantize_is_ggml_on_every_golden_input)
{
	char why[256];
	size_t n, i, checked = 0;
	golden_t *g = golden_all(&n);

	for (i = 0; i < n; i++) {
		if (!g[i].has_input)
			continue;
		cr_expect_eq(quantize_mismatches(&g[i], -1, why, sizeof why),
		    0, "%s", why);
		checked++;
	}
	cr_assert_geq(checked, 30);
	golden_free(g, n);
}

Test(quant, each_format_has_its_block_and_row_sizes)
{
	static const size_t elems[] = { 32, 32, 256 };
	static const size_t bytes[] = { 34, 18, 144 };
	size_t e, b, n;
	char err[256];
	int f;

	for (f = 0; f < REF_QFMT_N; f++) {
		const char *name = ref_qfmt_names[f];

		cr_assert_eq(kspec_quant_block(name, &e, &b), KSPEC_OK);
		cr_expect_eq(e, elems[f], "%s block", name);
		cr_expect_eq(b, bytes[f], "%s bytes", name);
		cr_expect_eq((size_t)ref_qblock(f), e);
		cr_expect_eq((size_t)ref_qblock_bytes(f), b);
		cr_assert_eq(kspec_quant_size(name, 3, 4096, &n, err,
		    sizeof err), KSPEC_OK, "%s", err);
		cr_expect_eq(n, 3 * 4096 / elems[f] * bytes[f], "%s size",
		    name);
		cr_expect_eq((size_t)ref_qrow_bytes(f, 4096) * 3, n);
		cr_assert_eq(kspec_quant_size(name, 0, 4096, &n, err,
		    sizeof err), KSPEC_OK);
		cr_expect_eq(n, 0);
	}
	cr_assert_eq(kspec_quant_size("q8_0", 1, 4096, &n, NULL, 0), KSPEC_OK);
	cr_expect_eq(n, 4352);
	cr_assert_eq(kspec_quant_size("q4_k", 1, 4096, &n, NULL, 0), KSPEC_OK);
	cr_expect_eq(n, 2304);
}

Test(quant, k_not_a_multiple_of_the_block_is_bad_shape_naming_the_block)
{
	static const size_t bad_k[] = { 16, 33, 4095, 100 };
	float x[512] = { 0 }, y[512];
	uint8_t q[1024];
	char err[256];
	size_t n, i;
	int f;

	for (f = 0; f < REF_QFMT_N; f++) {
		const char *name = ref_qfmt_names[f];
		char block[16];

		snprintf(block, sizeof block, "%lld",
		    (long long)ref_qblock(f));
		for (i = 0; i < sizeof bad_k / sizeof *bad_k; i++) {
			cr_expect_eq(kspec_quant_size(name, 1, bad_k[i], &n,
			    err, sizeof err), KSPEC_E_BAD_SHAPE);
			cr_expect(strstr(err, block) && strstr(err, name),
			    "%s: '%s' names neither %s nor the format", name,
			    err, block);
		}
		cr_expect_eq(kspec_quant_size(name, 1, 128, &n, err,
		    sizeof err), f == REF_Q4_K ? KSPEC_E_BAD_SHAPE : KSPEC_OK);
		cr_expect_eq(kspec_quantize(name, x, 1, 48, q, sizeof q, err,
		    sizeof err), KSPEC_E_BAD_SHAPE);
		cr_expect(strstr(err, block), "'%s' does not name %s", err,
		    block);
		cr_expect_eq(kspec_dequantize(name, q, sizeof q, 1, 48, y, err,
		    sizeof err), KSPEC_E_BAD_SHAPE);
	}
}

Test(quant, other_formats_are_refused_by_name)
{
	static const char *const refused[] = { "q6_k", "q5_k", "q4_1",
		"iq4_xs", "f16", "bf16", "q8_k", "Q4_K", "Q8_0", "q4_K",
		"q9_9", "", "q4_k ", "q4_0_4_4" };
	float x[32] = { 0 };
	uint8_t q[64];
	char err[256];
	size_t i, e;

	for (i = 0; i < sizeof refused / sizeof *refused; i++) {
		err[0] = '\0';
		cr_expect_eq(kspec_quantize(refused[i], x, 1, 32, q, sizeof q,
		    err, sizeof err), KSPEC_E_BAD_DTYPE, "'%s'", refused[i]);
		cr_expect(strstr(err, refused[i]) != NULL,
		    "'%s' does not name '%s'", err, refused[i]);
		cr_expect_eq(kspec_quant_block(refused[i], &e, NULL),
		    KSPEC_E_BAD_DTYPE);
		cr_expect_eq(ref_qfmt_of(refused[i]), -1);
	}
	kspec_quantize("q6_k", x, 1, 32, q, sizeof q, err, sizeof err);
	cr_expect(strstr(err, "GGUF") != NULL, "%s", err);
	kspec_quantize("Q4_K", x, 1, 32, q, sizeof q, err, sizeof err);
	cr_expect(strstr(err, "'q4_k'") != NULL, "no lower-case hint: %s",
	    err);
	cr_expect_eq(kspec_quantize(NULL, x, 1, 32, q, sizeof q, err,
	    sizeof err), KSPEC_E_INVAL);
}

/* A row of K weights in FORMAT, all V but X[AT] = SPECIAL; kspec's code. */
static int quantize_one(const char *format, size_t k, float v, size_t at,
    float special, char *err, size_t errlen)
{
	float x[512];
	uint8_t q[512 / 32 * 34];
	size_t i;

	for (i = 0; i < k; i++)
		x[i] = v * (float)((i % 7) + 1) / 7.0f;
	x[at] = special;
	return kspec_quantize(format, x, 1, k, q, sizeof q, err, errlen);
}

Test(quant, non_finite_weights_are_refused_naming_row_and_element)
{
	float x[2 * 256];
	uint8_t q[2 * 144];
	char err[256];
	int f;

	for (f = 0; f < REF_QFMT_N; f++) {
		const char *name = ref_qfmt_names[f];

		cr_expect_eq(quantize_one(name, 256, 1.0f, 77, NAN, err,
		    sizeof err), KSPEC_E_INVAL);
		cr_expect(strstr(err, "element 77") && strstr(err, "NaN"),
		    "%s", err);
		cr_expect_eq(quantize_one(name, 256, 1.0f, 3, -INFINITY, err,
		    sizeof err), KSPEC_E_INVAL);
		cr_expect(strstr(err, "infinite") != NULL, "%s", err);
	}
	memset(x, 0, sizeof x);
	x[256 + 200] = INFINITY;
	cr_expect_eq(kspec_quantize("q4_k", x, 2, 256, q, sizeof q, err,
	    sizeof err), KSPEC_E_INVAL);
	cr_expect(strstr(err, "row 1, element 200") != NULL, "%s", err);
}

Test(quant, scales_beyond_f16_are_refused_and_the_largest_within_taken)
{
	char err[256];

	/* q8_0: d = amax / 127 rounds to f16 Inf from 65520 * 127 on. */
	cr_expect_eq(quantize_one("q8_0", 64, 1.0f, 40, 8.4e6f, err,
	    sizeof err), KSPEC_E_INVAL);
	cr_expect(strstr(err, "block 1 (elements 32..63)") &&
	    strstr(err, "f16"), "%s", err);
	cr_expect_eq(quantize_one("q8_0", 64, 1.0f, 40, 8.3e6f, err,
	    sizeof err), KSPEC_OK, "%s", err);
	/* q4_0: d = max / -8, from 65520 * 8. */
	cr_expect_eq(quantize_one("q4_0", 64, 1.0f, 3, -5.3e5f, err,
	    sizeof err), KSPEC_E_INVAL);
	cr_expect(strstr(err, "block 0") != NULL, "%s", err);
	cr_expect_eq(quantize_one("q4_0", 64, 1.0f, 3, -5.2e5f, err,
	    sizeof err), KSPEC_OK, "%s", err);
	/* q4_k: a min of -5e6 needs dmin = 5e6 / 63 > 65504. */
	cr_expect_eq(quantize_one("q4_k", 256, 1.0f, 100, -5e6f, err,
	    sizeof err), KSPEC_E_INVAL);
	cr_expect(strstr(err, "q4_k block 0") != NULL, "%s", err);
	cr_expect_eq(quantize_one("q4_k", 256, 1.0f, 100, -3e6f, err,
	    sizeof err), KSPEC_OK, "%s", err);
}

Test(quant, scales_too_small_to_invert_are_refused_but_zero_blocks_taken)
{
	float x[256] = { 0 }, y[64];
	uint8_t q[272];
	char err[256];
	int f;

	for (f = 0; f < REF_QFMT_N; f++)
		cr_expect_eq(kspec_quantize(ref_qfmt_names[f], x, 1, 256, q,
		    sizeof q, err, sizeof err), KSPEC_OK, "zeros: %s", err);
	/* 1e-38: d = 1e-38 / 127 has no finite inverse. */
	x[40] = 1e-38f;
	cr_expect_eq(kspec_quantize("q8_0", x, 1, 64, q, sizeof q, err,
	    sizeof err), KSPEC_E_INVAL);
	cr_expect(strstr(err, "block 1") && strstr(err, "inverse"), "%s", err);
	cr_expect_eq(kspec_quantize("q4_0", x, 1, 64, q, sizeof q, err,
	    sizeof err), KSPEC_E_INVAL);
	/* 1e-36 is still invertible, and its f16 scale is 0. */
	x[40] = 1e-36f;
	cr_expect_eq(kspec_quantize("q8_0", x, 1, 64, q, sizeof q, err,
	    sizeof err), KSPEC_OK, "%s", err);
	cr_expect_eq(kspec_dequantize("q8_0", q, 68, 1, 64, y, err,
	    sizeof err), KSPEC_OK);
	cr_expect(y[40] == 0.0f);
}

Test(quant, q4_k_zeros_and_subnormals_are_taken_and_overflowing_fits_not)
{
	float x[256] = { 0 };
	uint8_t q[144];
	char err[256];
	int i;

	cr_expect_eq(kspec_quantize("q4_k", x, 1, 256, q, sizeof q, err,
	    sizeof err), KSPEC_OK, "%s", err);
	for (i = 0; i < 256; i++)
		x[i] = (float)(i % 13 - 6) * 1e-44f;
	cr_expect_eq(kspec_quantize("q4_k", x, 1, 256, q, sizeof q, err,
	    sizeof err), KSPEC_OK, "%s", err);
	/* Squares of 1e20 overflow f32. */
	for (i = 0; i < 256; i++)
		x[i] = (float)(i % 5) * 1e20f;
	cr_expect_eq(kspec_quantize("q4_k", x, 1, 256, q, sizeof q, err,
	    sizeof err), KSPEC_E_INVAL);
	cr_expect(strstr(err, "row 0, q4_k block 0") != NULL, "%s", err);
}

Test(quant, short_and_null_buffers_and_overflowing_sizes_are_refused)
{
	float x[64] = { 0 }, y[64];
	uint8_t q[68];
	char err[256];
	size_t n = 7;

	cr_expect_eq(kspec_quantize("q8_0", x, 2, 32, q, 67, err, sizeof err),
	    KSPEC_E_INVAL);
	cr_expect(strstr(err, "67") && strstr(err, "68"), "%s", err);
	cr_expect_eq(kspec_dequantize("q8_0", q, 67, 2, 32, y, err,
	    sizeof err), KSPEC_E_INVAL);
	cr_expect_eq(kspec_quantize("q8_0", NULL, 2, 32, q, 68, err,
	    sizeof err), KSPEC_E_INVAL);
	cr_expect_eq(kspec_dequantize("q8_0", q, 68, 2, 32, NULL, err,
	    sizeof err), KSPEC_E_INVAL);
	cr_expect_eq(kspec_quantize("q8_0", NULL, 0, 32, NULL, 0, err,
	    sizeof err), KSPEC_OK, "nothing to do: %s", err);
	cr_expect_eq(kspec_quant_size("q4_0", SIZE_MAX / 8, 64, &n, err,
	    sizeof err), KSPEC_E_TOO_LARGE);
	cr_expect_eq(n, 0);
	cr_expect_eq(kspec_quant_size("q4_k", 1, SIZE_MAX / 256 * 256, &n,
	    err, sizeof err), KSPEC_E_TOO_LARGE);
}

/* 96 x 4096 weights go to the library's thread pool: each row's bytes are
 * those of the row alone, and of two refused rows the first is named. */
Test(quant, a_matrix_split_over_threads_gives_the_same_bytes_and_error)
{
	enum { R = 96, K = 4096 };
	float *x = xmalloc((size_t)R * K * 4);
	uint8_t *q = xmalloc((size_t)R * K / 32 * 34), one[K / 32 * 34];
	char err[256];
	size_t i, rb, r;
	int f;

	for (i = 0; i < (size_t)R * K; i++)
		x[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
	for (f = 0; f < REF_QFMT_N; f++) {
		const char *name = ref_qfmt_names[f];

		rb = (size_t)ref_qrow_bytes(f, K);
		cr_assert_eq(kspec_quantize(name, x, R, K, q, R * rb, err,
		    sizeof err), KSPEC_OK, "%s", err);
		for (r = 0; r < R; r++) {
			cr_assert_eq(kspec_quantize(name, x + r * K, 1, K, one,
			    rb, err, sizeof err), KSPEC_OK, "%s", err);
			cr_expect_eq(memcmp(one, q + r * rb, rb), 0,
			    "%s row %zu differs alone", name, r);
		}
	}
	x[70 * K + 5] = NAN;
	x[20 * K + 9] = INFINITY;
	cr_expect_eq(kspec_quantize("q4_0", x, R, K, q, R * K / 32 * 18, err,
	    sizeof err), KSPEC_E_INVAL);
	cr_expect(strstr(err, "row 20, element 9") != NULL, "%s", err);
	free(x);
	free(q);
}

/* The documented values on hand-made blocks: q4_0's code 8 under a
 * negative d is -0.0, q4_k's sub-block 5 takes its fields from s[9],
 * s[1] and s[5], and one weight is rounded, at the subtraction. */
Test(quant, hand_made_blocks_decode_to_their_documented_values)
{
	uint8_t q0[18] = { 0x00, 0xc0 }, qk[144] = { 0 };  /* d = -2 */
	float y[256];
	uint32_t bits;
	int c;

	q0[2] = 0x08 | 0xf0;    /* element 0: 8 -> -0; element 16: 15 */
	cr_assert_eq(kspec_dequantize("q4_0", q0, 18, 1, 32, y, NULL, 0), 0);
	memcpy(&bits, &y[0], 4);
	cr_expect_eq(bits, 0x80000000u, "code 8 under d = -2: 0x%08x", bits);
	cr_expect(y[16] == -14.0f, "(15 - 8) * -2 = %g", (double)y[16]);
	cr_expect(ref_dequant(REF_Q4_0, q0, 16) == -14.0f);
	memcpy(&bits, (float[]){ ref_dequant(REF_Q4_0, q0, 0) }, 4);
	cr_expect_eq(bits, 0x80000000u);

	/* d = 1, dmin = 2^-10 (f16 0x1400); sub-block 5: sc = 0x3 | 2 << 4
	 * = 35 from s[9] low nibble and s[1] top bits; m = 0xa | 1 << 4 = 26
	 * from s[9] high nibble and s[5] top bits. */
	qk[0] = 0x00; qk[1] = 0x3c;
	qk[2] = 0x00; qk[3] = 0x14;
	qk[4 + 9] = 0xa3;
	qk[4 + 1] = 0x80;
	qk[4 + 5] = 0x40;
	for (c = 0; c < 32; c++)
		qk[16 + 64 + c] = 0x70; /* sub-block 5 (odd): high nibble 7 */
	cr_assert_eq(kspec_dequantize("q4_k", qk, 144, 1, 256, y, NULL, 0), 0);
	/* 35 * 7 - 26 * 2^-10 = 245 - 0.025390625: rounded to f32. */
	cr_expect(y[5 * 32 + 3] == (float)(245.0 - 26.0 / 1024.0),
	    "%.9g", (double)y[5 * 32 + 3]);
	cr_expect(y[4 * 32 + 3] == 0.0f, "sub-block 4 (low nibble 0)");
	cr_expect(ref_dequant(REF_Q4_K, qk, 5 * 32 + 3) == y[5 * 32 + 3]);
}

/* ---- the command line ---- */

/* Runs `kspec ARGS` (stderr merged) into OUT; its exit status. */
static int run_kspec(char *out, size_t outlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int run_kspec(char *out, size_t outlen, const char *fmt, ...)
{
	char args[2048], cmd[4096];
	va_list ap;
	size_t n;
	FILE *p;
	int st;

	va_start(ap, fmt);
	vsnprintf(args, sizeof args, fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof cmd, "%s/kspec %s 2>&1", e2e_build_dir(), args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, outlen - 1, p);
	out[n] = '\0';
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void write_bytes(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");

	cr_assert_not_null(f, "%s", path);
	cr_assert_eq(fwrite(data, 1, n, f), n);
	cr_assert_eq(fclose(f), 0);
}

Test(quant, kspec_quantize_command_writes_ggmls_bytes_and_exit_statuses)
{
	char dir[] = "/tmp/kspec-quant-XXXXXX", in[64], outp[64], out[4096];
	golden_t g;
	uint8_t *got;
	size_t n;
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(in, sizeof in, "%s/w.f32", dir);
	snprintf(outp, sizeof outp, "%s/w.q4k", dir);
	golden_load("q4_k.gaussian.bin", &g);
	write_bytes(in, g.x, (size_t)g.rows * (size_t)g.k * 4);
	cr_assert_eq(run_kspec(out, sizeof out, "quantize q4_k -k %d -o %s "
	    "%s", g.k, outp, in), 0, "%s", out);
	cr_expect(strstr(out, "-> q4_k") != NULL, "%s", out);
	f = fopen(outp, "rb");
	cr_assert_not_null(f);
	got = xmalloc(g.qlen + 1);
	n = fread(got, 1, g.qlen + 1, f);
	fclose(f);
	cr_expect_eq(n, g.qlen);
	cr_expect_eq(memcmp(got, g.q, g.qlen), 0, "not ggml's bytes");
	free(got);
	cr_assert_eq(run_kspec(out, sizeof out, "quantize q4_k -k %d -o %s "
	    "--json %s", g.k, outp, in), 0, "%s", out);
	cr_expect(strstr(out, "\"rows\":2") && strstr(out, "\"bytes\":576"),
	    "%s", out);
	/* Usage errors (2), nothing written. */
	unlink(outp);
	cr_expect_eq(run_kspec(out, sizeof out, "quantize q4_k -k 100 -o %s "
	    "%s", outp, in), 2, "%s", out);
	cr_expect(strstr(out, "256") != NULL, "%s", out);
	cr_expect_eq(run_kspec(out, sizeof out, "quantize q6_k -k 256 -o %s "
	    "%s", outp, in), 2, "%s", out);
	cr_expect_eq(run_kspec(out, sizeof out, "quantize q4_k %s", in), 2,
	    "%s", out);
	/* A refused row, a file of partial rows, a missing file (1). */
	g.x[g.k + 7] = NAN;
	write_bytes(in, g.x, (size_t)g.rows * (size_t)g.k * 4);
	cr_expect_eq(run_kspec(out, sizeof out, "quantize q4_k -k %d -o %s "
	    "%s", g.k, outp, in), 1, "%s", out);
	cr_expect(strstr(out, "E_INVAL: row 1, element 7 is NaN") != NULL,
	    "%s", out);
	cr_expect_eq(run_kspec(out, sizeof out, "quantize q4_0 -k 96 -o %s "
	    "%s", outp, in), 1, "%s", out);
	cr_expect(strstr(out, "not whole rows") != NULL, "%s", out);
	cr_expect_eq(access(outp, F_OK), -1, "a refused matrix wrote %s",
	    outp);
	cr_expect_eq(run_kspec(out, sizeof out, "quantize q4_0 -k 32 -o %s "
	    "%s/none", outp, dir), 1, "%s", out);
	unlink(in);
	rmdir(dir);
	free(g.x);
	free(g.q);
	free(g.y);
}

/* ---- each checker catches a planted bug ---- */

/* Per plant: the formats whose golden files must show it. */
static const struct {
	int plant;
	const char *name;
	int formats[REF_QFMT_N];
} plants[] = {
	{ REF_PLANT_NIBBLE_SWAP, "nibble order swapped", { 0, 1, 1 } },
	{ REF_PLANT_SCALE_BF16, "scale read as bf16", { 1, 1, 1 } },
	{ REF_PLANT_Q4K_SCALE_BITS, "q4_k 6-bit min unpacked from s[c-4]",
	    { 0, 0, 1 } },
	{ REF_PLANT_BLOCK_BOUNDARY, "block boundary one weight off",
	    { 1, 1, 1 } },
	{ REF_PLANT_TAIL, "last block of a row left out", { 1, 1, 1 } },
};

Test(quant, decoder_check_catches_each_planted_decoder_bug)
{
	char why[256];
	size_t n, i, p;
	golden_t *g = golden_all(&n);

	for (p = 0; p < sizeof plants / sizeof *plants; p++) {
		size_t caught[REF_QFMT_N] = { 0 };
		int f;

		ref_quant_planted = plants[p].plant;
		for (i = 0; i < n; i++)
			caught[g[i].fmt] += decode_mismatches(&g[i], decode_ref,
			    why, sizeof why) > 0;
		for (f = 0; f < REF_QFMT_N; f++) {
			if (plants[p].formats[f])
				cr_expect_gt(caught[f], 0, "the %s plant "
				    "passes every %s file", plants[p].name,
				    ref_qfmt_names[f]);
		}
	}
	ref_quant_planted = REF_PLANT_NONE;
	for (i = 0; i < n; i++)
		cr_expect_eq(decode_mismatches(&g[i], decode_ref, why,
		    sizeof why), 0, "unplanted again: %s", why);
	golden_free(g, n);
}

/* q8_0 with halves to even (rintf), the rest as the reference does. */
static void q8_0_halves_to_even(const float *x, int k, uint8_t *q)
{
	int b, j;

	for (b = 0; b < k / 32; b++) {
		const float *xb = x + 32 * b;
		uint8_t *blk = q + 34 * b;
		float amax = 0.0f, d, id;
		uint8_t tmp[34];

		for (j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(xb[j]));
		d = amax / 127.0f;
		id = d != 0.0f ? 1.0f / d : 0.0f;
		/* The scale bytes from kspec (checked elsewhere). */
		cr_assert_eq(kspec_quantize("q8_0", xb, 1, 32, tmp, 34, NULL,
		    0), 0);
		blk[0] = tmp[0];
		blk[1] = tmp[1];
		for (j = 0; j < 32; j++)
			blk[2 + j] = (uint8_t)(int8_t)rintf(xb[j] * id);
	}
}

Test(quant, quantizer_check_catches_a_flipped_byte_and_wrong_ties)
{
	char why[256];
	size_t n, i, ties = 0;
	golden_t *g = golden_all(&n);

	for (i = 0; i < n; i++) {
		if (!g[i].has_input)
			continue;
		cr_expect_gt(quantize_mismatches(&g[i], (long)(g[i].qlen / 3),
		    why, sizeof why), 0, "%s: a flipped byte passed",
		    g[i].name);
		if (strcmp(g[i].name, "q8_0.ties.bin") == 0) {
			uint8_t *q = xmalloc(g[i].qlen);

			q8_0_halves_to_even(g[i].x, g[i].rows * g[i].k, q);
			cr_expect_neq(memcmp(q, g[i].q, g[i].qlen), 0,
			    "q8_0.ties passes a quantizer that rounds halves "
			    "to even");
			free(q);
			ties++;
		}
		if (strcmp(g[i].name, "q4_0.ties.bin") == 0) {
			/* Codes by rounding x/d + 8 instead of truncating
			 * x/d + 8.5 must differ somewhere. */
			size_t j, differ = 0;

			for (j = 0; j < (size_t)(g[i].rows * g[i].k); j++) {
				const uint8_t *blk = g[i].q + j / 32 * 18;
				int t = (int)(j % 32), code = t < 16 ?
				    blk[2 + t] & 15 : blk[2 + t - 16] >> 4;
				float d = ref_f16_to_f32((uint16_t)(blk[0] |
				    blk[1] << 8));
				float r = rintf(g[i].x[j] / d + 8.0f);

				differ += d != 0.0f && (int)fminf(r, 15.0f) !=
				    code;
			}
			cr_expect_gt(differ, 0, "q4_0.ties passes rounding");
			ties++;
		}
	}
	cr_expect_eq(ties, 2);
	golden_free(g, n);
}

/* ---- with ggml ---- */

/* Loads ggml, or skips the test when the package is not installed; a
 * package that is there but cannot be used fails. */
static void need_ggml(ks_ggml_t *gg)
{
	char err[1024];

	if (access(ks_ggml_path(), F_OK) != 0)
		cr_skip_test("ggml is not installed (%s missing): "
		    "deploy/deps.sh --bench installs %s %s",
		    ks_ggml_path(), KS_GGML_PACKAGE, KS_GGML_PACKAGE_VERSION);
	cr_assert_eq(ks_ggml_open(gg, err, sizeof err), 0, "%s", err);
}

Test(ggml, golden_files_are_what_the_pinned_ggml_writes_and_decodes)
{
	ks_ggml_t gg;
	size_t n, i;
	golden_t *g;

	need_ggml(&gg);
	g = golden_all(&n);
	for (i = 0; i < n; i++) {
		size_t row_bytes = (size_t)ref_qrow_bytes(g[i].fmt, g[i].k);
		uint8_t *q = xmalloc(g[i].qlen);
		float *y = xmalloc((size_t)g[i].k * 4);
		int r;

		for (r = 0; r < g[i].rows; r++) {
			if (g[i].has_input) {
				gg.quantize[g[i].fmt](g[i].x + r * g[i].k,
				    q + r * row_bytes, g[i].k);
				cr_expect_eq(memcmp(q + r * row_bytes, g[i].q +
				    r * row_bytes, row_bytes), 0,
				    "%s row %d: ggml quantizes otherwise now",
				    g[i].name, r);
			}
			gg.dequantize[g[i].fmt](g[i].q + r * row_bytes, y,
			    g[i].k);
			cr_expect_eq(memcmp(y, g[i].y + r * g[i].k,
			    (size_t)g[i].k * 4), 0,
			    "%s row %d: ggml decodes otherwise now", g[i].name,
			    r);
		}
		free(q);
		free(y);
	}
	golden_free(g, n);
	ks_ggml_close(&gg);
}

/* ---- rows for the comparison with ggml ---- */

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static float uni(void)
{
	return (float)((double)(next() >> 11) * 0x1p-52 - 1.0);
}

enum { FUZZ_K = 512, FUZZ_MODES = 11 };

/* A row of the comparison: MODE picks a distribution; a random power of
 * ten from 1e-12 to 1e6 scales modes 0 to 7. */
static void fuzz_row(int mode, float *x)
{
	/* f16's largest scale times 127, 8 and 15 * 63 / 2 (q4_k's range
	 * about 0); the smallest invertible scale times 127 and 8. */
	static const float limits[] = { 65520.0f * 127, 65520.0f * 8,
		65520.0f * 63 * 7.5f, 65520.0f * 63, 2.9387e-39f * 127,
		2.9387e-39f * 8 };
	float scale = powf(10.0f, (float)((int)(next() % 19) - 12));
	int j, e = (int)(next() % 41) - 20;

	for (j = 0; j < FUZZ_K; j++) {
		float v = uni();

		switch (mode) {
		case 0: break;
		case 1: v = v * v * v; break;                 /* heavy tail */
		case 2: v = next() % 16 ? v : v * 100.0f; break;
		case 3: v = fabsf(v); break;                  /* one sign */
		case 4: v = -fabsf(v) - 2.0f; break;
		case 5: v = (j / 32) % 3 ? v : 0.0f; break;   /* zero blocks */
		case 6: v = (float)((int)(next() % 31) - 15) * 0.125f; break;
		case 7: v = v * powf(2.0f, (float)(j / 32 * 3 % 20)); break;
		case 8:                                       /* ties at 2^e */
			v = j % 32 == 0 ? 127.0f : (float)((int)(next() % 253) -
			    126) + 0.5f;
			scale = ldexpf(1.0f, e);
			break;
		case 9: {                                     /* random bits */
			uint32_t u = (uint32_t)next();
			int ex = (int)(next() % 151);  /* subnormal .. 2^23 */

			u = (u & 0x807fffffu) | (uint32_t)ex << 23;
			memcpy(&v, &u, 4);
			scale = 1.0f;
			break;
		}
		default:               /* at the limits of docs/kernels.md */
			if (j == 0)
				scale = limits[next() % 6] *
				    (1.0f + 0.02f * uni());
			v = j % 32 == 0 ? 1.0f : v;
		}
		x[j] = v * scale;
	}
}

/* Whether any block of the row Q of FMT stores an Inf or NaN scale. */
static int scale_not_finite(int fmt, const uint8_t *q, size_t nb)
{
	size_t b, bb = (size_t)ref_qblock_bytes(fmt);
	int bad = 0;

	for (b = 0; b < nb; b++) {
		bad |= (q[b * bb + 1] & 0x7c) == 0x7c;
		if (fmt == REF_Q4_K)
			bad |= (q[b * bb + 3] & 0x7c) == 0x7c;
	}
	return bad;
}

/* kspec_dequantize and the reference decode the row Q of FMT as ggml. */
static void expect_decoders_are_ggml(const ks_ggml_t *gg, int fmt,
    const uint8_t *q, size_t rb, int row)
{
	static float y_ggml[FUZZ_K], y_kspec[FUZZ_K], y_ref[FUZZ_K];
	char err[256];

	gg->dequantize[fmt](q, y_ggml, FUZZ_K);
	cr_assert_eq(kspec_dequantize(ref_qfmt_names[fmt], q, rb, 1, FUZZ_K,
	    y_kspec, err, sizeof err), 0, "%s", err);
	ref_dequant_row(fmt, q, FUZZ_K, y_ref);
	cr_assert_eq(memcmp(y_kspec, y_ggml, sizeof y_ggml), 0,
	    "%s row %d: kspec_dequantize differs", ref_qfmt_names[fmt], row);
	cr_assert_eq(memcmp(y_ref, y_ggml, sizeof y_ggml), 0,
	    "%s row %d: ref_dequant_row differs", ref_qfmt_names[fmt], row);
}

Test(ggml, thousands_of_rows_quantize_and_decode_as_in_ggml)
{
	enum { ROWS = 3000 };
	static float x[FUZZ_K], y_ggml[FUZZ_K], y_ref[FUZZ_K];
	static uint8_t qk[FUZZ_K / 32 * 34], qg[FUZZ_K / 32 * 34];
	char err[256];
	ks_ggml_t gg;
	int f, r;

	need_ggml(&gg);
	for (f = 0; f < REF_QFMT_N; f++) {
		const char *name = ref_qfmt_names[f];
		size_t rb = (size_t)ref_qrow_bytes(f, FUZZ_K), i, taken = 0;
		size_t nb = FUZZ_K / (size_t)ref_qblock(f);

		for (r = 0; r < ROWS; r++) {
			int rc;

			fuzz_row(r % FUZZ_MODES, x);
			rc = kspec_quantize(name, x, 1, FUZZ_K, qk, rb, err,
			    sizeof err);
			gg.quantize[f](x, qg, FUZZ_K);
			if (rc) {
				/* Refused for f16: ggml stores an Inf. */
				cr_assert_eq(rc, KSPEC_E_INVAL, "%s", err);
				cr_expect(!strstr(err, "f16's range") ||
				    scale_not_finite(f, qg, nb), "%s row %d: "
				    "kspec refused (%s), ggml's scales are "
				    "finite", name, r, err);
				continue;
			}
			taken++;
			for (i = 0; i < rb && qk[i] == qg[i]; i++)
				;
			cr_assert_eq(i, rb, "%s row %d (mode %d): byte %zu is "
			    "0x%02x, ggml 0x%02x", name, r, r % FUZZ_MODES, i,
			    qk[i % rb], qg[i % rb]);
			expect_decoders_are_ggml(&gg, f, qg, rb, r);
			/* Random blocks with finite scales (exponent < 16). */
			for (i = 0; i < rb; i++)
				qg[i] = (uint8_t)next();
			for (i = 0; i < nb; i++) {
				qg[i * (size_t)ref_qblock_bytes(f) + 1] &= 0xbf;
				qg[i * (size_t)ref_qblock_bytes(f) + 3] &= 0xbf;
			}
			expect_decoders_are_ggml(&gg, f, qg, rb, r);
		}
		cr_log_info("%s: %zu rows bitwise ggml's, %zu refused", name,
		    taken, ROWS - taken);
		cr_expect_gt(taken, ROWS / 2);
	}
	/* The same comparison fails with a plant in the reference. */
	ref_quant_planted = REF_PLANT_BLOCK_BOUNDARY;
	fuzz_row(0, x);
	gg.quantize[REF_Q4_0](x, qg, FUZZ_K);
	gg.dequantize[REF_Q4_0](qg, y_ggml, FUZZ_K);
	ref_dequant_row(REF_Q4_0, qg, FUZZ_K, y_ref);
	cr_expect_neq(memcmp(y_ref, y_ggml, sizeof y_ggml), 0,
	    "a planted block boundary passes the comparison");
	ref_quant_planted = REF_PLANT_NONE;
	ks_ggml_close(&gg);
}
