/*
 * quant: GGUF's block formats q8_0, q4_0 and q4_k in libkspec (kspec.h:
 * kspec_quantize, kspec_dequantize; docs/kernels.md, "Quantized weight
 * formats", is the definition of every byte).
 *
 * The quantizer gives, on every row it accepts, the bytes of llama.cpp's
 * reference quantizers (quantize_row_q8_0_ref, quantize_row_q4_0_ref,
 * quantize_row_q4_K_ref): the same f32 operations in the same order, so
 * the same roundings.  Two things make that hold on any compiler:
 *   - no contraction of a*b+c into fma: the Makefile builds this file with
 *     -ffp-contract=off (an fma rounds once where the reference rounds
 *     twice, and the least-squares fit of q4_k then picks other codes);
 *   - no reassociation: every sum runs in index order, as written.
 * Rows where the reference is undefined (it converts an infinite or NaN
 * float to an integer) or writes a non-finite scale are refused with
 * KSPEC_E_INVAL: a non-finite input, a scale whose f16 overflows, a scale
 * too small to invert.  No block is written with a value the reference
 * would not write; the blocks of a refused row before the refused block
 * are written, those after it are not.
 *
 * A large matrix is split by rows over libkspec's thread pool
 * (kspec_cpu_launch): rows are independent, so the bytes, and the error
 * (the lowest refused row's), do not depend on the split.
 *
 * The decoder is exact: every product it forms fits f32's 24-bit
 * significand, so q8_0 and q4_0 weights are exact products and a q4_k
 * weight is rounded once, at its subtraction.
 */
#define _POSIX_C_SOURCE 200809L
#include "../include/kspec.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../base/base.h"

enum { Q8_0, Q4_0, Q4_K };

typedef struct {
	const char *name;
	size_t block;           /* elements per block along K */
	size_t bytes;           /* bytes per block */
} format_t;

static const format_t formats[] = {
	[Q8_0] = { "q8_0", 32, 34 },
	[Q4_0] = { "q4_0", 32, 18 },
	[Q4_K] = { "q4_k", 256, 144 },
};
#define NFORMATS (sizeof formats / sizeof formats[0])

/* GGUF's other tensor types, refused by name (E_BAD_DTYPE). */
static const char *const gguf_others[] = {
	"f32", "f16", "bf16", "f64", "q4_1", "q5_0", "q5_1", "q8_1", "q2_k",
	"q3_k", "q5_k", "q6_k", "q8_k", "iq1_s", "iq1_m", "iq2_xxs",
	"iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq4_nl", "iq4_xs", "tq1_0",
	"tq2_0", "mxfp4", "i8", "i16", "i32", "i64",
};

/* Sets the message (ks_set_err: none when err is NULL) and gives CODE;
 * every function with err and errlen in scope uses it. */
#define FAIL(code, ...) (ks_set_err(err, errlen, __VA_ARGS__), (code))

static int lookup(const char *name, const format_t **out, char *err,
    size_t errlen)
{
	char lower[16];
	size_t i;

	if (!name)
		return FAIL(KSPEC_E_INVAL, "no format given (q8_0, q4_0 or "
		    "q4_k)");
	for (i = 0; i < NFORMATS; i++) {
		if (strcmp(name, formats[i].name) == 0) {
			*out = &formats[i];
			return KSPEC_OK;
		}
	}
	for (i = 0; name[i] && i + 1 < sizeof lower; i++)
		lower[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ?
		    name[i] - 'A' + 'a' : name[i]);
	lower[i] = '\0';
	if (!name[i]) {
		for (i = 0; i < NFORMATS; i++) {
			if (strcmp(lower, formats[i].name) == 0)
				return FAIL(KSPEC_E_BAD_DTYPE, "format '%s': "
				    "formats are named in lower case ('%s')",
				    name, formats[i].name);
		}
		for (i = 0; i < sizeof gguf_others / sizeof *gguf_others; i++) {
			if (strcmp(lower, gguf_others[i]) == 0)
				return FAIL(KSPEC_E_BAD_DTYPE, "format '%s': a "
				    "GGUF type that kspec does not quantize "
				    "(it takes q8_0, q4_0 and q4_k)", name);
		}
	}
	return FAIL(KSPEC_E_BAD_DTYPE, "format '%.32s': not a quantized "
	    "weight format (q8_0, q4_0 or q4_k)", name);
}

int kspec_quant_block(const char *format, size_t *block_elems,
    size_t *block_bytes)
{
	const format_t *f;
	int rc = lookup(format, &f, NULL, 0);

	if (rc)
		return rc;
	if (block_elems)
		*block_elems = f->block;
	if (block_bytes)
		*block_bytes = f->bytes;
	return KSPEC_OK;
}

/* The checks every entry point makes: the format, K a multiple of its
 * block, and the packed size without overflow. */
static int geometry(const char *format, size_t rows, size_t k,
    const format_t **f, size_t *bytes, char *err, size_t errlen)
{
	int rc = lookup(format, f, err, errlen);
	size_t row_bytes;

	if (rc)
		return rc;
	if (k % (*f)->block)
		return FAIL(KSPEC_E_BAD_SHAPE, "K = %zu is not a multiple of "
		    "%s's block of %zu elements", k, (*f)->name, (*f)->block);
	row_bytes = k / (*f)->block * (*f)->bytes;
	if (rows && (row_bytes > SIZE_MAX / rows ||
	    k > SIZE_MAX / sizeof(float) / rows))
		return FAIL(KSPEC_E_TOO_LARGE, "%zu rows of K = %zu overflow "
		    "a size", rows, k);
	*bytes = rows * row_bytes;
	return KSPEC_OK;
}

/* The packed side has LEN bytes where NEED are needed (its NAME for the
 * message), and neither buffer is NULL when there is anything to do. */
static int buffers(const format_t *f, size_t rows, size_t k, size_t need,
    size_t len, const char *name, const void *src, const void *dst,
    char *err, size_t errlen)
{
	if (len < need)
		return FAIL(KSPEC_E_INVAL, "%s has %zu bytes; %zu x %zu "
		    "weights in %s need %zu", name, len, rows, k, f->name,
		    need);
	if (need && (!src || !dst))
		return FAIL(KSPEC_E_INVAL, "src or dst is NULL");
	return KSPEC_OK;
}

int kspec_quant_size(const char *format, size_t rows, size_t k,
    size_t *bytes, char *err, size_t errlen)
{
	const format_t *f;
	size_t n = 0;
	int rc = geometry(format, rows, k, &f, &n, err, errlen);

	if (bytes)
		*bytes = rc ? 0 : n;
	return rc;
}

/* ---- f16 ---- */

static uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	return u;
}

static float bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof f);
	return f;
}

/* IEEE binary16 to f32, exact. */
static float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;

	if (exp == 0x1f)
		return bits_f32(sign | 0x7f800000u | (man << 13));
	if (exp == 0) {         /* zero or subnormal: man * 2^-24, exact */
		float v = (float)man * 0x1p-24f;

		return sign ? -v : v;
	}
	return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* f32 to binary16, round to nearest even; NaN stays a quiet NaN.  The
 * reference's GGML_FP32_TO_FP16 rounds every finite value the same. */
static uint16_t f32_to_f16(float f)
{
	uint32_t u = f32_bits(f), a = u & 0x7fffffffu;
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t h, rem;

	if (a > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u)           /* >= 65520: rounds to Inf */
		return (uint16_t)(sign | 0x7c00u);
	if (a < 0x38800000u) {          /* below 2^-14: the subnormal grid */
		/* |f| * 2^24 < 1024 is exact; adding 2^23 rounds it to an
		 * integer, to nearest even, in the low bits (1024 is the
		 * smallest normal's encoding, as it should be). */
		float t = bits_f32(a) * 0x1p24f;

		return (uint16_t)(sign | (f32_bits(t + 0x1p23f) -
		    0x4b000000u));
	}
	h = ((a >> 23) - 112) << 10 | ((a >> 13) & 0x3ffu);
	rem = a & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
		h++;                    /* may carry into the exponent */
	return (uint16_t)(sign | h);
}

static void put_f16(uint8_t *p, uint16_t h)
{
	p[0] = (uint8_t)(h & 0xff);
	p[1] = (uint8_t)(h >> 8);
}

static uint16_t get_f16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

/* ---- the quantizers, one block each ---- */

/* Why a block is refused; *VALUE is the number the message names. */
enum { BLOCK_OK, BLOCK_SCALE_F16_INF, BLOCK_SCALE_TINY,
	BLOCK_SCALE_NONFINITE };

static const struct {
	const char *subject, *predicate;        /* around the value */
} refusals[] = {
	[BLOCK_SCALE_F16_INF] = { "its scale", "is beyond f16's range "
	    "(largest 65504)" },
	[BLOCK_SCALE_TINY] = { "its scale", "has no finite inverse (every "
	    "weight of the block is below 4e-37 in magnitude: set them to "
	    "0)" },
	[BLOCK_SCALE_NONFINITE] = { "a sub-block's fitted scale or min is",
	    "(the weights' squares or the fit overflow f32)" },
};

/* llama.cpp's nearest_int: adding 1.5 * 2^23 leaves round-to-nearest-even
 * of F in the low 23 bits, for |F| < 2^22.  Out of that range (and for
 * Inf or NaN, which q4_k's fit can meet on a sub-block of tiny range) the
 * result is what those bits give, as in the reference: never undefined. */
static int nearest(float f)
{
	float v = f + 12582912.0f;

	return (int)(f32_bits(v) & 0x7fffffu) - 0x400000;
}

/* q8_0 and q4_0: stores the f16 of the block's scale D (inverse ID) at
 * OUT, or says why the block is refused. */
static int store_scale(float d, float id, uint8_t *out, float *value)
{
	uint16_t dh = f32_to_f16(d);

	*value = d;
	if ((dh & 0x7c00u) == 0x7c00u)
		return BLOCK_SCALE_F16_INF;
	if (isinf(id))
		return BLOCK_SCALE_TINY;
	put_f16(out, dh);
	return BLOCK_OK;
}

static int q8_0_block(const float *x, uint8_t *out, float *value)
{
	float amax = 0.0f, d, id;
	int j, why;

	for (j = 0; j < 32; j++) {
		float a = fabsf(x[j]);

		amax = amax > a ? amax : a;
	}
	d = amax / 127.0f;
	id = d != 0.0f ? 1.0f / d : 0.0f;
	if ((why = store_scale(d, id, out, value)) != BLOCK_OK)
		return why;
	for (j = 0; j < 32; j++)
		out[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
	return BLOCK_OK;
}

static int q4_0_block(const float *x, uint8_t *out, float *value)
{
	float amax = 0.0f, max = 0.0f, d, id;
	int j, why;

	/* The first element of largest magnitude, with its sign. */
	for (j = 0; j < 32; j++) {
		if (amax < fabsf(x[j])) {
			amax = fabsf(x[j]);
			max = x[j];
		}
	}
	d = max / -8.0f;
	id = d != 0.0f ? 1.0f / d : 0.0f;
	if ((why = store_scale(d, id, out, value)) != BLOCK_OK)
		return why;
	for (j = 0; j < 16; j++) {
		/* x*id + 8.5 lies in [0.49, 16.5]: truncation, then 15 at
		 * most. */
		int lo = (int)(x[j] * id + 8.5f);
		int hi = (int)(x[16 + j] * id + 8.5f);

		lo = lo < 15 ? lo : 15;
		hi = hi < 15 ? hi : 15;
		out[2 + j] = (uint8_t)(lo | hi << 4);
	}
	return BLOCK_OK;
}

/*
 * q4_k's fit of one sub-block of 32 (llama.cpp's make_qkx2_quants with
 * nmax 15, rmin -1, rdelta 0.1, nstep 20, squared error): codes L in
 * 0..15, a scale and a min with x ~ scale*L + min, min <= 0.  Starts from
 * the range's grid, then tries 21 grids (-1 + 0.1 is + 15)/(max - min)
 * and keeps the weighted least-squares fit of the first that lowers the
 * weighted squared error.  Returns the scale; *NEG_MIN gets -min.
 */
static float fit_subblock(const float *x, const float *w, uint8_t *L,
    float *neg_min)
{
	uint8_t trial[32];
	float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
	float iscale, scale, best = 0.0f;
	int i, is;

	for (i = 1; i < 32; i++) {
		if (x[i] < min)
			min = x[i];
		if (x[i] > max)
			max = x[i];
		sum_w += w[i];
		sum_x += w[i] * x[i];
	}
	if (min > 0.0f)
		min = 0.0f;
	if (max == min) {
		memset(L, 0, 32);
		*neg_min = -min;
		return 0.0f;
	}
	iscale = 15.0f / (max - min);
	scale = 1.0f / iscale;
	for (i = 0; i < 32; i++) {
		int l = nearest(iscale * (x[i] - min));
		float diff;

		L[i] = (uint8_t)(l < 0 ? 0 : l > 15 ? 15 : l);
		diff = scale * (float)L[i] + min - x[i];
		best += w[i] * (diff * diff);
	}
	for (is = 0; is <= 20; is++) {
		float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f, D;

		iscale = (-1.0f + 0.1f * (float)is + 15.0f) / (max - min);
		for (i = 0; i < 32; i++) {
			int l = nearest(iscale * (x[i] - min));
			float fl;

			l = l < 0 ? 0 : l > 15 ? 15 : l;
			trial[i] = (uint8_t)l;
			fl = (float)l;
			sum_l += w[i] * fl;
			sum_l2 += w[i] * fl * fl;
			sum_xl += w[i] * fl * x[i];
		}
		D = sum_w * sum_l2 - sum_l * sum_l;
		if (D > 0.0f) {
			float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
			float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
			float err = 0.0f;

			if (this_min > 0.0f) {
				this_min = 0.0f;
				this_scale = sum_xl / sum_l2;
			}
			for (i = 0; i < 32; i++) {
				float diff = this_scale * (float)trial[i] +
				    this_min - x[i];

				err += w[i] * (diff * diff);
			}
			if (err < best) {
				memcpy(L, trial, 32);
				best = err;
				scale = this_scale;
				min = this_min;
			}
		}
	}
	*neg_min = -min;
	return scale;
}

/* The 6-bit scale and min of sub-block C from the 12 packed bytes S
 * (docs/kernels.md, q4_k). */
static void q4_k_scale_min(const uint8_t *s, int c, unsigned *sc,
    unsigned *m)
{
	if (c < 4) {
		*sc = s[c] & 63u;
		*m = s[c + 4] & 63u;
	} else {
		*sc = (s[c + 4] & 15u) | (unsigned)(s[c - 4] >> 6) << 4;
		*m = (unsigned)(s[c + 4] >> 4) | (unsigned)(s[c] >> 6) << 4;
	}
}

static int q4_k_block(const float *x, uint8_t *out, float *value)
{
	uint8_t L[256], *s = out + 4, *qs = out + 16;
	float weights[32], scales[8], mins[8];
	float max_scale = 0.0f, max_min = 0.0f, inv_scale, inv_min, d, dmin;
	uint16_t dh, dminh;
	int c, i;

	for (c = 0; c < 8; c++) {
		const float *xs = x + 32 * c;
		float sum_x2 = 0.0f, av_x;

		for (i = 0; i < 32; i++)
			sum_x2 += xs[i] * xs[i];
		av_x = sqrtf(sum_x2 / 32.0f);
		for (i = 0; i < 32; i++)
			weights[i] = av_x + fabsf(xs[i]);
		scales[c] = fit_subblock(xs, weights, L + 32 * c, &mins[c]);
		if (!isfinite(scales[c]) || !isfinite(mins[c])) {
			*value = isfinite(scales[c]) ? mins[c] : scales[c];
			return BLOCK_SCALE_NONFINITE;
		}
		if (scales[c] > max_scale)
			max_scale = scales[c];
		if (mins[c] > max_min)
			max_min = mins[c];
	}
	d = max_scale / 63.0f;
	dmin = max_min / 63.0f;
	dh = f32_to_f16(d);
	dminh = f32_to_f16(dmin);
	if ((dh & 0x7c00u) == 0x7c00u || (dminh & 0x7c00u) == 0x7c00u) {
		*value = (dh & 0x7c00u) == 0x7c00u ? d : dmin;
		return BLOCK_SCALE_F16_INF;
	}
	inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
	inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
	memset(s, 0, 12);
	for (c = 0; c < 8; c++) {
		/* The reference stores nearest() in a uint8_t (mod 256),
		 * then takes at most 63. */
		uint8_t ls = (uint8_t)nearest(inv_scale * scales[c]);
		uint8_t lm = (uint8_t)nearest(inv_min * mins[c]);

		ls = ls < 63 ? ls : 63;
		lm = lm < 63 ? lm : 63;
		if (c < 4) {
			s[c] = ls;
			s[c + 4] = lm;
		} else {
			s[c + 4] = (uint8_t)((ls & 15u) | (lm & 15u) << 4);
			s[c - 4] |= (uint8_t)((ls >> 4) << 6);
			s[c] |= (uint8_t)((lm >> 4) << 6);
		}
	}
	put_f16(out, dh);
	put_f16(out + 2, dminh);
	/* The codes again, against the stored scales; a sub-block whose
	 * d*sc is 0 keeps the fit's codes. */
	for (c = 0; c < 8; c++) {
		unsigned sc, m;
		float dc, dm;

		q4_k_scale_min(s, c, &sc, &m);
		dc = f16_to_f32(dh) * (float)sc;
		if (dc == 0.0f)
			continue;
		dm = f16_to_f32(dminh) * (float)m;
		for (i = 0; i < 32; i++) {
			int l = nearest((x[32 * c + i] + dm) / dc);

			L[32 * c + i] = (uint8_t)(l < 0 ? 0 : l > 15 ? 15 : l);
		}
	}
	for (c = 0; c < 4; c++) {
		for (i = 0; i < 32; i++)
			qs[32 * c + i] = (uint8_t)(L[64 * c + i] |
			    L[64 * c + 32 + i] << 4);
	}
	return BLOCK_OK;
}

typedef int (*quantize_block_fn)(const float *x, uint8_t *out,
    float *value);

static const quantize_block_fn quantize_block[] = {
	[Q8_0] = q8_0_block,
	[Q4_0] = q4_0_block,
	[Q4_K] = q4_k_block,
};

/* Row R of K weights X into OUT; the reason in ERR when it is refused. */
static int quantize_row(const format_t *f, const float *x, size_t r,
    size_t k, uint8_t *out, char *err, size_t errlen)
{
	size_t b, j;

	for (j = 0; j < k; j++) {
		if (!isfinite(x[j]))
			return FAIL(KSPEC_E_INVAL, "row %zu, element %zu is "
			    "%s: only finite weights quantize", r, j,
			    isnan(x[j]) ? "NaN" : "infinite");
	}
	for (b = 0; b < k / f->block; b++) {
		float v = 0.0f;
		int why = quantize_block[f - formats](x + b * f->block,
		    out + b * f->bytes, &v);

		if (why != BLOCK_OK)
			return FAIL(KSPEC_E_INVAL, "row %zu, %s block %zu "
			    "(elements %zu..%zu): %s %g %s", r, f->name, b,
			    b * f->block, (b + 1) * f->block - 1,
			    refusals[why].subject, (double)v,
			    refusals[why].predicate);
	}
	return KSPEC_OK;
}

/* A matrix being quantized, by one thread or by the pool's.  Each range
 * of rows stops at its first refused row; of those, the lowest row's
 * error is kept (under LOCK), so the error does not depend on the split. */
typedef struct {
	const format_t *f;
	const float *src;
	uint8_t *dst;
	size_t k, row_bytes;
	pthread_mutex_t lock;
	size_t err_row;         /* SIZE_MAX while no row was refused */
	int code;
	char msg[512];
} job_t;

/* Rows of at least this many weights in all go to the thread pool. */
#define POOL_MIN_WEIGHTS (1u << 18)

static void quantize_rows(void **params, uint64_t begin, uint64_t end)
{
	job_t *job = params[0];
	char msg[sizeof job->msg];
	size_t r;

	for (r = (size_t)begin; r < (size_t)end; r++) {
		int rc = quantize_row(job->f, job->src + r * job->k, r, job->k,
		    job->dst + r * job->row_bytes, msg, sizeof msg);

		if (rc) {
			pthread_mutex_lock(&job->lock);
			if (r < job->err_row) {
				job->err_row = r;
				job->code = rc;
				memcpy(job->msg, msg, sizeof msg);
			}
			pthread_mutex_unlock(&job->lock);
			return;
		}
	}
}

int kspec_quantize(const char *format, const float *src, size_t rows,
    size_t k, void *dst, size_t dstlen, char *err, size_t errlen)
{
	job_t job = { .src = src, .dst = dst, .k = k, .err_row = SIZE_MAX,
		.lock = PTHREAD_MUTEX_INITIALIZER };
	void *params[1] = { &job };
	size_t need;
	int rc = geometry(format, rows, k, &job.f, &need, err, errlen);

	if (rc || (rc = buffers(job.f, rows, k, need, dstlen, "dst", src,
	    dst, err, errlen)))
		return rc;
	job.row_bytes = k / job.f->block * job.f->bytes;
	/* Rows are independent: any split gives the same bytes. */
	if (rows > 1 && rows * k >= POOL_MIN_WEIGHTS)
		kspec_cpu_launch(quantize_rows, params, rows, 0);
	else
		quantize_rows(params, 0, rows);
	pthread_mutex_destroy(&job.lock);
	if (job.err_row == SIZE_MAX)
		return KSPEC_OK;
	return FAIL(job.code, "%s", job.msg);
}

/* ---- the decoder ---- */

static void q8_0_decode(const uint8_t *blk, float *y)
{
	float d = f16_to_f32(get_f16(blk));
	int j;

	for (j = 0; j < 32; j++)
		y[j] = (float)(int8_t)blk[2 + j] * d;
}

static void q4_0_decode(const uint8_t *blk, float *y)
{
	float d = f16_to_f32(get_f16(blk));
	int j;

	for (j = 0; j < 16; j++) {
		y[j] = (float)((blk[2 + j] & 15) - 8) * d;
		y[16 + j] = (float)((blk[2 + j] >> 4) - 8) * d;
	}
}

static void q4_k_decode(const uint8_t *blk, float *y)
{
	float d = f16_to_f32(get_f16(blk)), dmin = f16_to_f32(get_f16(blk + 2));
	const uint8_t *qs = blk + 16;
	int c, i;

	for (c = 0; c < 8; c++) {
		unsigned sc, m;
		float dc, mc;
		int shift = (c & 1) * 4;

		q4_k_scale_min(blk + 4, c, &sc, &m);
		dc = d * (float)sc;     /* exact */
		mc = dmin * (float)m;   /* exact */
		for (i = 0; i < 32; i++)
			y[32 * c + i] = dc * (float)((qs[32 * (c / 2) + i] >>
			    shift) & 15) - mc;
	}
}

typedef void (*decode_block_fn)(const uint8_t *blk, float *y);

static const decode_block_fn decode_block[] = {
	[Q8_0] = q8_0_decode,
	[Q4_0] = q4_0_decode,
	[Q4_K] = q4_k_decode,
};

int kspec_dequantize(const char *format, const void *src, size_t srclen,
    size_t rows, size_t k, float *dst, char *err, size_t errlen)
{
	const format_t *f;
	const uint8_t *in = src;
	size_t need, i, n;
	int rc = geometry(format, rows, k, &f, &need, err, errlen);

	if (rc || (rc = buffers(f, rows, k, need, srclen, "src", src, dst,
	    err, errlen)))
		return rc;
	n = need / f->bytes;    /* blocks: rows follow each other unpadded */
	for (i = 0; i < n; i++)
		decode_block[f - formats](in + i * f->bytes,
		    dst + i * f->block);
	return KSPEC_OK;
}
