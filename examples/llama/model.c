/*
 * examples/llama's model: the seeded weights of a config (drawn alike in
 * every mode, then rounded to bf16 or f16 or quantized), the rope table, the
 * prompt, and the helpers every file of the example shares.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/kspec.h"
#include "../../ref/ref.h"
#include "model.h"

void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "llama: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size);

	if (p == NULL)
		die("out of memory (%zu x %zu bytes)", n, size);
	return p;
}

const char *model_fmt_for(const char *wq, int64_t k)
{
	return strcmp(wq, "q4_k") == 0 && k % 256 != 0 ? "q8_0" : wq;
}

float model_half_to_f32(const char *half, uint16_t h)
{
	return strcmp(half, "bf16") == 0 ? ref_bf16_to_f32(h) :
	    ref_f16_to_f32(h);
}

uint16_t model_f32_to_half(const char *half, float f)
{
	return strcmp(half, "bf16") == 0 ? ref_f32_to_bf16(f) :
	    ref_f32_to_f16(f);
}

/* The prompt of N tokens of a model of vocab V for SEED: P[0..N). */
void model_prompt(int seed, int n, int vocab, int32_t *p)
{
	uint64_t s = (uint64_t)seed * 0xD1B54A32D192ED03ull + 7;
	int i;

	for (i = 0; i < n; i++)
		p[i] = (int32_t)(ref_rand(&s) % (uint64_t)vocab);
}

static float uniform(uint64_t *rng)      /* [-1, 1) */
{
	return (float)((double)(ref_rand(rng) >> 11) /
	    (double)(1ull << 53) * 2.0 - 1.0);
}

/* N values U(-1,1) * SCALE + BIAS; in bf16 or f16 mode rounded to it,
 * so that f holds exactly what the engine's 16-bit buffer holds. */
static void tensor_init(model_t *m, tensor_t *t, int64_t n, float scale,
    float bias)
{
	int64_t i;

	t->n = n;
	t->f = xcalloc((size_t)n, sizeof(float));
	for (i = 0; i < n; i++) {
		float v = uniform(&m->rng) * scale + bias;

		t->f[i] = m->half ? model_half_to_f32(m->half,
		    model_f32_to_half(m->half, v)) : v;
	}
}

/* In quantized mode, T (rows of K weights) quantized to its format and
 * its values replaced by their exact decode: what the engine's buffer
 * holds and what the reference reads. */
static void tensor_quant(model_t *m, tensor_t *t, int64_t k)
{
	size_t rows = (size_t)(t->n / k);
	char err[256];

	if (!m->wq)
		return;
	t->fmt = model_fmt_for(m->wq, k);
	t->k = k;
	if (kspec_quant_size(t->fmt, rows, (size_t)k, &t->qbytes, err,
	    sizeof err) != 0)
		die("%s: %s", t->fmt, err);
	t->q = xcalloc(1, t->qbytes);
	if (kspec_quantize(t->fmt, t->f, rows, (size_t)k, t->q, t->qbytes,
	    err, sizeof err) != 0 || kspec_dequantize(t->fmt, t->q,
	    t->qbytes, rows, (size_t)k, t->f, err, sizeof err) != 0)
		die("%s: %s", t->fmt, err);
}

/*
 * Seeded weights, scaled to keep activations near unit size: a gemm's
 * W is U(-1,1) * sqrt(3/K) (unit variance out for unit variance in), norm
 * weights 1 + U(-1,1)/10, the embedding U(-1,1).  The values are drawn
 * alike in every mode, then rounded to bf16 or f16 or quantized.
 */
void model_init(model_t *m, const config_t *c, const char *half,
    const char *wq, uint64_t seed)
{
	const int64_t H = c->hidden, Dq = (int64_t)c->hq * c->hd,
	    Dkv = (int64_t)c->hkv * c->hd, F = c->ffn;
	int l;

	memset(m, 0, sizeof *m);
	m->c = *c;
	m->half = half;
	m->wq = wq;
	m->rng = seed * 0x9E3779B97F4A7C15ull + 1;
	tensor_init(m, &m->embed, c->vocab * H, 1.0f, 0.0f);
	tensor_quant(m, &m->embed, H);
	m->layer = xcalloc((size_t)c->layers, sizeof *m->layer);
	for (l = 0; l < c->layers; l++) {
		layer_t *y = &m->layer[l];

		tensor_init(m, &y->attn_norm, H, 0.1f, 1.0f);
		tensor_init(m, &y->wq, Dq * H, sqrtf(3.0f / (float)H), 0);
		tensor_init(m, &y->wk, Dkv * H, sqrtf(3.0f / (float)H), 0);
		tensor_init(m, &y->wv, Dkv * H, sqrtf(3.0f / (float)H), 0);
		tensor_init(m, &y->wo, H * Dq, sqrtf(3.0f / (float)Dq), 0);
		tensor_init(m, &y->ffn_norm, H, 0.1f, 1.0f);
		tensor_init(m, &y->wgu, 2 * F * H, sqrtf(3.0f / (float)H), 0);
		tensor_init(m, &y->wd, H * F, sqrtf(3.0f / (float)F), 0);
		tensor_quant(m, &y->wq, H);
		tensor_quant(m, &y->wk, H);
		tensor_quant(m, &y->wv, H);
		tensor_quant(m, &y->wo, Dq);
		tensor_quant(m, &y->wgu, H);
		tensor_quant(m, &y->wd, F);
	}
	tensor_init(m, &m->final_norm, H, 0.1f, 1.0f);
	tensor_init(m, &m->wout, c->vocab * H, sqrtf(3.0f / (float)H), 0);
	tensor_quant(m, &m->wout, H);
	model_rope_table(m);
}

void model_rope_table(model_t *m)
{
	const config_t *c = &m->c;
	int p, i;

	m->cs = xcalloc((size_t)c->max_seq * c->hd, sizeof(float));
	for (p = 0; p < c->max_seq; p++)
		for (i = 0; i < c->hd / 2; i++) {
			double a = p * pow(c->rope_theta, -2.0 * i / c->hd);

			m->cs[p * c->hd + i] = (float)cos(a);
			m->cs[p * c->hd + c->hd / 2 + i] = (float)sin(a);
		}
}

/* Every weight of M into OUT (room for 3 + 8 * layers); returns the count. */
int model_tensors(model_t *m, tensor_t **out)
{
	int n = 0, l;

	out[n++] = &m->embed;
	for (l = 0; l < m->c.layers; l++) {
		layer_t *y = &m->layer[l];

		out[n++] = &y->attn_norm;
		out[n++] = &y->wq;
		out[n++] = &y->wk;
		out[n++] = &y->wv;
		out[n++] = &y->wo;
		out[n++] = &y->ffn_norm;
		out[n++] = &y->wgu;
		out[n++] = &y->wd;
	}
	out[n++] = &m->final_norm;
	out[n++] = &m->wout;
	return n;
}

void model_free(model_t *m)
{
	tensor_t *t[3 + 8 * 64];
	int i, n = model_tensors(m, t);

	for (i = 0; i < n; i++) {
		free(t[i]->f);
		free(t[i]->q);
	}
	free(m->layer);
	free(m->cs);
}
