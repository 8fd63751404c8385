/*
 * golden: writes the golden vectors of the quantized formats
 * (tests/golden/quant/, docs/kernels.md "Checked against llama.cpp") from
 * llama.cpp's own codec, the pinned ggml library (tests/ggml.h), so that
 * `make test` checks kspec's decoders and quantizer against ggml without
 * ggml.  `make golden-quant` runs it; it needs the package that
 * `deploy/deps.sh --bench` installs.
 *
 * Usage: golden DIR.  Writes DIR/<format>.<case>.bin for every format and
 * case below, and DIR/INDEX listing them.  A file is (little-endian):
 *
 *   "KSQGOLD1"            8 bytes
 *   format name           8 bytes, NUL-padded ("q4_k")
 *   rows, K, has_input    u32 each, then a u32 0
 *   input                 rows * K f32, when has_input
 *   bytes                 rows * (K / block) * block bytes: ggml's
 *                         quantize_row_*_ref of the input, or (decode-
 *                         only cases) random blocks
 *   decoded               rows * K f32: ggml's dequantize_row_* of bytes
 *
 * The inputs come from a fixed generator (seeded per case), so the files
 * are the same on every run with the same ggml; every row is one that
 * kspec's quantizer accepts (finite, scales within f16, invertible).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../tests/ggml.h"

enum { MAX_ROWS = 4, MAX_K = 512 };

static const int block_of[KS_GGML_NFORMATS] = { 32, 32, 256 };
static const int bytes_of[KS_GGML_NFORMATS] = { 34, 18, 144 };

/* ---- a fixed generator: splitmix64 ---- */

static uint64_t state;

static uint64_t next(void)
{
	uint64_t z = (state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float uni(void)
{
	return (float)((double)(next() >> 11) * 0x1p-52 - 1.0);
}

/* Standard normal (Box-Muller, in double). */
static float gauss(void)
{
	double u = ((double)(next() >> 11) + 0.5) * 0x1p-53;
	double v = (double)(next() >> 11) * 0x1p-53;

	return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* ---- the cases ---- */

typedef struct {
	int fmt, rows, k;
	float *x;                       /* rows * k */
	uint8_t *q;                     /* decode-only cases: the blocks */
} gen_t;

/* Block b of row r has amplitude AMP[b % n]. */
static void fill_scaled(gen_t *g, const float *amp, int n, int gaussian)
{
	int r, j, nb = block_of[g->fmt];

	for (r = 0; r < g->rows; r++) {
		for (j = 0; j < g->k; j++) {
			float a = amp[(j / nb + r) % n];

			g->x[r * g->k + j] = a * (gaussian ? gauss() : uni());
		}
	}
}

static void c_random(gen_t *g)
{
	static const float one = 1.0f;

	g->rows = 2;
	fill_scaled(g, &one, 1, 0);
}

/* Like trained weights: normal, a scale per block, 3% outliers. */
static void c_gaussian(gen_t *g)
{
	static const float amp[] = { 0.02f, 0.05f, 0.01f, 0.3f, 1.0f, 0.002f,
		0.08f, 7.0f };
	int i;

	g->rows = 2;
	fill_scaled(g, amp, 8, 1);
	for (i = 0; i < g->rows * g->k; i++) {
		if (next() % 32 == 0)
			g->x[i] *= 8.0f;
	}
}

static void c_zeros(gen_t *g)
{
	g->rows = 1;
}

/* One positive spike in row 0, one negative spike as row 1's last
 * weight: the rest zero. */
static void c_spike(gen_t *g)
{
	g->rows = 2;
	g->x[37] = 3.75f;
	g->x[2 * g->k - 1] = -1234.5f;
}

/* Scales from f16-normal down through f16's subnormals to below its
 * smallest (stored as 0), and a q8_0/q4_0 block just above the
 * invertible limit; q4_k's sub-blocks of subnormal f32 weights, where its
 * fit meets an infinite grid. */
static void c_tiny(gen_t *g)
{
	static const float amp[] = { 1e-2f, 1e-4f, 2e-5f, 3e-6f, 4e-7f,
		5e-8f, 1e-9f, 1e-36f };
	static const float amp_k[] = { 1e-3f, 1e-4f, 1e-5f, 1e-6f, 1e-7f,
		1e-9f, 1e-20f, 1e-30f };
	int j;

	g->rows = 2;
	if (g->fmt != KS_GGML_Q4_K) {
		fill_scaled(g, amp, 8, 0);
		return;
	}
	/* Row 0: a super-block of sub-blocks of falling amplitude, one of
	 * f32 subnormals; row 1 all subnormal, a few of them 0. */
	for (j = 0; j < g->k; j++) {
		g->x[j] = amp_k[(j / 32) % 8] * uni();
		g->x[g->k + j] = (float)((int)(next() % 2001) - 1000) *
		    1e-42f;
	}
	for (j = 256 + 64; j < 256 + 96; j++)
		g->x[j] = uni() * 1e-40f;
}

/* The largest scales f16 holds, and one block at them among small ones. */
static void c_huge(gen_t *g)
{
	static const float amp[KS_GGML_NFORMATS] = { 8.0e6f, 5.0e5f, 3.5e6f };
	int j;

	g->rows = 2;
	for (j = 0; j < g->k; j++) {
		g->x[j] = amp[g->fmt] * uni();
		g->x[g->k + j] = uni() * (j / 32 == 1 ? amp[g->fmt] : 1.0f);
	}
	g->x[5] = amp[g->fmt];
}

/* Blocks of wildly different magnitudes side by side: q4_k's small
 * sub-blocks get 6-bit scales of 0 and keep their fit's codes. */
static void c_mixed(gen_t *g)
{
	static const float amp[] = { 1e-3f, 1e3f, 1.0f, 1e-1f, 3e2f, 1e-2f,
		5.0f, 1e1f };

	g->rows = 2;
	fill_scaled(g, amp, 8, 0);
}

/* Every code: q8_0 -127..127 at d = 1; q4_0 0..15 in both halves of a
 * block, d = 1 and d = -1; q4_k ramps over 0..15 in every sub-block with
 * scales and mins of many sizes. */
static void c_codes(gen_t *g)
{
	int r, j, v = -127;

	g->rows = 2;
	for (r = 0; r < 2; r++) {
		for (j = 0; j < g->k; j++) {
			float *x = &g->x[r * g->k + j];
			int i = j % 32, c = (j / 32) % 8;

			if (g->fmt == KS_GGML_Q8_0) {
				if (i == 0) {
					*x = 127.0f;
				} else {
					*x = (float)v;
					v = v == 126 ? -127 : v + 1;
				}
			} else if (g->fmt == KS_GGML_Q4_0) {
				/* Row 0: max -8 (d = 1); row 1: max 8 (d =
				 * -1); codes i % 16 and 15 - i % 16. */
				int q = i < 16 ? i : 31 - i;

				*x = r == 0 ? (float)(q - 8) : (float)(8 - q);
			} else {
				float step = (float)(c + 1) *
				    (r ? 0.37f : 0.125f);
				float off = -(float)((c * 5) % 8) * step *
				    (r ? 0.5f : 1.0f);

				*x = (float)(i % 16) * step + off;
			}
		}
	}
}

/* Weights on the rounding ties of each format's code: roundf's halves
 * (away from zero), q4_0's truncation points, q4_k's half steps. */
static void c_ties(gen_t *g)
{
	int r, j;

	g->rows = 2;
	for (r = 0; r < 2; r++) {
		for (j = 0; j < g->k; j++) {
			float *x = &g->x[r * g->k + j];
			int i = j % 32, t = 1 + (int)(next() % 15);

			if (g->fmt == KS_GGML_Q8_0)
				*x = i == 0 ? (r ? -127.0f : 127.0f) :
				    (float)((int)(next() % 253) - 126) + 0.5f;
			else if (g->fmt == KS_GGML_Q4_0)
				*x = i == 0 ? -8.0f : (float)(t - 8) +
				    (r ? 0.5f : -0.5f);
			else
				*x = (float)t * 0.5f - (r ? 3.0f : 0.0f) +
				    (j % 2 ? 0.25f : 0.0f);
		}
	}
}

/* Rows of one sign, and constant rows: q4_0's d takes the sign of the
 * largest weight (its code 8 decodes to -0.0 when d < 0); q4_k clamps a
 * positive min to 0 and meets max == min. */
static void c_signs(gen_t *g)
{
	int j;

	g->rows = 4;
	for (j = 0; j < g->k; j++) {
		g->x[j] = fabsf(uni()) + 5.0f;          /* all positive */
		g->x[g->k + j] = -fabsf(uni()) - 5.0f;  /* all negative */
		g->x[2 * g->k + j] = 0.75f;             /* constant */
		g->x[3 * g->k + j] = j % 32 == 3 ? -2.0f : fabsf(uni());
	}
}

/* Decode only: random blocks, every byte random but the f16 scales,
 * which are finite and include zeros, subnormals and the extremes. */
static void c_blocks(gen_t *g)
{
	static const uint16_t special[] = { 0x0000, 0x8000, 0x0001, 0x83ff,
		0x0400, 0x7bff, 0xfbff, 0x3c00, 0xbc00, 0x1234 };
	int nblocks, b, i, s;

	g->rows = 2;
	nblocks = g->rows * g->k / block_of[g->fmt];
	for (b = 0; b < nblocks; b++) {
		uint8_t *blk = g->q + b * bytes_of[g->fmt];

		for (i = 0; i < bytes_of[g->fmt]; i++)
			blk[i] = (uint8_t)next();
		for (s = 0; s < (g->fmt == KS_GGML_Q4_K ? 2 : 1); s++) {
			uint16_t h = (uint16_t)next();

			if (next() % 3 == 0)
				h = special[next() % 10];
			if ((h & 0x7c00) == 0x7c00)
				h &= 0xbfff;    /* finite */
			blk[2 * s] = (uint8_t)h;
			blk[2 * s + 1] = (uint8_t)(h >> 8);
		}
	}
}

static const struct {
	const char *name;
	void (*fill)(gen_t *g);
	int decode_only;
} cases[] = {
	{ "random", c_random, 0 },
	{ "gaussian", c_gaussian, 0 },
	{ "zeros", c_zeros, 0 },
	{ "spike", c_spike, 0 },
	{ "tiny", c_tiny, 0 },
	{ "huge", c_huge, 0 },
	{ "mixed", c_mixed, 0 },
	{ "codes", c_codes, 0 },
	{ "ties", c_ties, 0 },
	{ "signs", c_signs, 0 },
	{ "blocks", c_blocks, 1 },
};

static int put_u32(FILE *f, uint32_t v)
{
	uint8_t b[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
		(uint8_t)(v >> 24) };

	return fwrite(b, 1, 4, f) == 4 ? 0 : -1;
}

static int write_case(const ks_ggml_t *gg, const char *dir, int fmt,
    size_t ci, FILE *index)
{
	static float x[MAX_ROWS * MAX_K], y[MAX_ROWS * MAX_K];
	static uint8_t q[MAX_ROWS * MAX_K / 32 * 34];
	char path[4096], name[8] = { 0 };
	gen_t g = { fmt, 1, fmt == KS_GGML_Q4_K ? 512 : 256, x, q };
	size_t row_bytes, n;
	FILE *f;
	int r, ok;

	memset(x, 0, sizeof x);
	memset(q, 0, sizeof q);
	/* Each case its own seed, so cases do not shift one another. */
	state = 0x5eed0000ull + (uint64_t)(fmt * 100 + (int)ci);
	cases[ci].fill(&g);
	row_bytes = (size_t)g.k / (size_t)block_of[fmt] * (size_t)bytes_of[fmt];
	for (r = 0; r < g.rows; r++) {
		if (!cases[ci].decode_only)
			gg->quantize[fmt](x + r * g.k, q + r * row_bytes, g.k);
		gg->dequantize[fmt](q + r * row_bytes, y + r * g.k, g.k);
	}
	snprintf(path, sizeof path, "%s/%s.%s.bin", dir, ks_ggml_formats[fmt],
	    cases[ci].name);
	f = fopen(path, "wb");
	if (!f) {
		fprintf(stderr, "golden: %s: %s\n", path, strerror(errno));
		return -1;
	}
	n = (size_t)g.rows * (size_t)g.k;
	strncpy(name, ks_ggml_formats[fmt], sizeof name - 1);
	ok = fwrite("KSQGOLD1", 1, 8, f) == 8 && fwrite(name, 1, 8, f) == 8 &&
	    !put_u32(f, (uint32_t)g.rows) && !put_u32(f, (uint32_t)g.k) &&
	    !put_u32(f, cases[ci].decode_only ? 0u : 1u) && !put_u32(f, 0) &&
	    (cases[ci].decode_only || fwrite(x, 4, n, f) == n) &&
	    fwrite(q, 1, (size_t)g.rows * row_bytes, f) ==
	    (size_t)g.rows * row_bytes && fwrite(y, 4, n, f) == n;
	if (fclose(f) || !ok) {
		fprintf(stderr, "golden: writing %s failed\n", path);
		return -1;
	}
	fprintf(index, "%s.%s.bin\n", ks_ggml_formats[fmt], cases[ci].name);
	return 0;
}

int main(int argc, char **argv)
{
	const uint16_t one = 1;
	char err[1024], path[4096];
	ks_ggml_t gg;
	FILE *index;
	size_t ci;
	int fmt;

	if (argc != 2) {
		fprintf(stderr, "usage: golden DIR\n");
		return 2;
	}
	if (*(const uint8_t *)&one != 1) {
		fprintf(stderr, "golden: the files are little-endian; this "
		    "machine is not\n");
		return 1;
	}
	if (ks_ggml_open(&gg, err, sizeof err)) {
		fprintf(stderr, "golden: %s (deploy/deps.sh --bench installs "
		    "%s %s)\n", err, KS_GGML_PACKAGE, KS_GGML_PACKAGE_VERSION);
		return 1;
	}
	snprintf(path, sizeof path, "%s/INDEX", argv[1]);
	index = fopen(path, "w");
	if (!index) {
		fprintf(stderr, "golden: %s: %s\n", path, strerror(errno));
		return 1;
	}
	fprintf(index, "# Golden vectors of q8_0, q4_0 and q4_k written by "
	    "bench/ggml/golden.c\n# from ggml %s (%s) of %s %s; one file a "
	    "line.\n", KS_GGML_VERSION, KS_GGML_COMMIT, KS_GGML_PACKAGE,
	    KS_GGML_PACKAGE_VERSION);
	for (fmt = 0; fmt < KS_GGML_NFORMATS; fmt++) {
		for (ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
			if (write_case(&gg, argv[1], fmt, ci, index)) {
				fclose(index);
				return 1;
			}
		}
	}
	if (fclose(index)) {
		fprintf(stderr, "golden: writing %s failed\n", path);
		return 1;
	}
	ks_ggml_close(&gg);
	printf("golden: %zu files in %s\n",
	    (size_t)KS_GGML_NFORMATS * (sizeof cases / sizeof cases[0]),
	    argv[1]);
	return 0;
}
