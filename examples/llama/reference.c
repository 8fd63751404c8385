/*
 * examples/llama's float64 reference (--reference): the same model with
 * every operation in double, the bf16 weights widened exactly and the
 * quantized ones decoded exactly, the f32 rope table widened; run on the
 * prompt and greedy, or teacher-forced on the tokens of an engine dump
 * (--follow), so that each of its steps sees the engine's context.  And
 * the dump both write (--dump FILE): a header of four int32 (the magic
 * 0x4b4c4c47, the vocab V, the size of a logit in bytes: 4 for the
 * engine, 8 for the reference, the number of steps), then per step an
 * int32 token (the greedy pick) and its V logits.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

#define DUMP_MAGIC 0x4b4c4c47

static void ref_norm(const double *x, const float *w, double *y, int H,
    float eps)
{
	double ss = 0;
	int j;

	for (j = 0; j < H; j++)
		ss += x[j] * x[j];
	ss = 1.0 / sqrt(ss / H + (double)eps);
	for (j = 0; j < H; j++)
		y[j] = x[j] * ss * w[j];
}

static void ref_linear(const float *W, const double *x, double *y, int N,
    int K)
{
	int n, k;

	for (n = 0; n < N; n++) {
		double s = 0;

		for (k = 0; k < K; k++)
			s += (double)W[(int64_t)n * K + k] * x[k];
		y[n] = s;
	}
}

static void ref_rope(const float *cs, double *x, int D)
{
	int i;

	for (i = 0; i < D / 2; i++) {
		double x0 = x[i], x1 = x[D / 2 + i], c = cs[i], s = cs[D / 2 + i];

		x[i] = x0 * c - x1 * s;
		x[D / 2 + i] = x1 * c + x0 * s;
	}
}

typedef struct {
	const model_t *m;
	double *kc, *vc;        /* [layer][max_seq][hkv*hd] */
	double *res, *h, *q, *k, *v, *att, *tmp, *gu, *act, *sc;
} ref_t;

/* One token at position POS through the float64 model; LOGITS gets V. */
static void ref_step(ref_t *r, int32_t tok, int pos, double *logits)
{
	const config_t *c = &r->m->c;
	const int H = c->hidden, D = c->hd, Dq = c->hq * D, Dkv = c->hkv * D,
	    F = c->ffn, G = c->hq / c->hkv;
	int l, j, h, p;

	for (j = 0; j < H; j++)
		r->res[j] = tok >= 0 && tok < c->vocab ?
		    r->m->embed.f[(int64_t)tok * H + j] : 0.0;
	for (l = 0; l < c->layers; l++) {
		const layer_t *y = &r->m->layer[l];
		double *kc = r->kc + (size_t)l * c->max_seq * Dkv;
		double *vc = r->vc + (size_t)l * c->max_seq * Dkv;

		ref_norm(r->res, y->attn_norm.f, r->h, H, c->rms_eps);
		ref_linear(y->wq.f, r->h, r->q, Dq, H);
		ref_linear(y->wk.f, r->h, r->k, Dkv, H);
		ref_linear(y->wv.f, r->h, r->v, Dkv, H);
		for (h = 0; h < c->hq; h++)
			ref_rope(r->m->cs + (size_t)pos * D, r->q + h * D, D);
		for (h = 0; h < c->hkv; h++)
			ref_rope(r->m->cs + (size_t)pos * D, r->k + h * D, D);
		memcpy(kc + (size_t)pos * Dkv, r->k, sizeof(double) * Dkv);
		memcpy(vc + (size_t)pos * Dkv, r->v, sizeof(double) * Dkv);
		for (h = 0; h < c->hq; h++) {
			const int kvh = h / G;
			double mx = -INFINITY, sum = 0;

			for (p = 0; p <= pos; p++) {
				double s = 0;

				for (j = 0; j < D; j++)
					s += r->q[h * D + j] *
					    kc[(size_t)p * Dkv + kvh * D + j];
				r->sc[p] = s / sqrt((double)D);
				mx = fmax(mx, r->sc[p]);
			}
			for (p = 0; p <= pos; p++) {
				r->sc[p] = exp(r->sc[p] - mx);
				sum += r->sc[p];
			}
			for (j = 0; j < D; j++) {
				double a = 0;

				for (p = 0; p <= pos; p++)
					a += r->sc[p] *
					    vc[(size_t)p * Dkv + kvh * D + j];
				r->att[h * D + j] = a / sum;
			}
		}
		ref_linear(y->wo.f, r->att, r->tmp, H, Dq);
		for (j = 0; j < H; j++)
			r->res[j] += r->tmp[j];
		ref_norm(r->res, y->ffn_norm.f, r->h, H, c->rms_eps);
		ref_linear(y->wgu.f, r->h, r->gu, 2 * F, H);
		for (j = 0; j < F; j++) {
			double g = r->gu[j];

			r->act[j] = g / (1.0 + exp(-g)) * r->gu[F + j];
		}
		ref_linear(y->wd.f, r->act, r->tmp, H, F);
		for (j = 0; j < H; j++)
			r->res[j] += r->tmp[j];
	}
	ref_norm(r->res, r->m->final_norm.f, r->h, H, c->rms_eps);
	ref_linear(r->m->wout.f, r->h, logits, c->vocab, H);
}

static void ref_open(ref_t *r, const model_t *m)
{
	const config_t *c = &m->c;
	size_t Dkv = (size_t)c->hkv * c->hd, big = (size_t)c->hidden;

	if ((size_t)c->hq * c->hd > big)
		big = (size_t)c->hq * c->hd;
	memset(r, 0, sizeof *r);
	r->m = m;
	r->kc = xcalloc((size_t)c->layers * c->max_seq * Dkv, sizeof(double));
	r->vc = xcalloc((size_t)c->layers * c->max_seq * Dkv, sizeof(double));
	r->res = xcalloc(big, sizeof(double));
	r->h = xcalloc(big, sizeof(double));
	r->q = xcalloc(big, sizeof(double));
	r->k = xcalloc(Dkv, sizeof(double));
	r->v = xcalloc(Dkv, sizeof(double));
	r->att = xcalloc(big, sizeof(double));
	r->tmp = xcalloc(big, sizeof(double));
	r->gu = xcalloc(2 * (size_t)c->ffn, sizeof(double));
	r->act = xcalloc((size_t)c->ffn, sizeof(double));
	r->sc = xcalloc((size_t)c->max_seq, sizeof(double));
}

static void ref_close(ref_t *r)
{
	double *all[] = { r->kc, r->vc, r->res, r->h, r->q, r->k, r->v,
	    r->att, r->tmp, r->gu, r->act, r->sc };
	size_t i;

	for (i = 0; i < sizeof all / sizeof all[0]; i++)
		free(all[i]);
}

void dump_write(const char *path, int V, int elem, int steps,
    const int32_t *toks, const void *logits)
{
	FILE *f = fopen(path, "wb");
	int32_t hdr[4] = { DUMP_MAGIC, V, elem, steps };
	int s;

	if (f == NULL)
		die("%s: %s", path, strerror(errno));
	fwrite(hdr, sizeof hdr, 1, f);
	for (s = 0; s < steps; s++) {
		fwrite(&toks[s], 4, 1, f);
		fwrite((const char *)logits + (size_t)s * V * elem,
		    (size_t)elem, (size_t)V, f);
	}
	if (fclose(f) != 0)
		die("%s: write failed", path);
}

/* The tokens of an engine dump (the trajectory to follow). */
static int32_t *dump_tokens(const char *path, int V, int *steps)
{
	FILE *f = fopen(path, "rb");
	int32_t hdr[4], *toks;
	int s;

	if (f == NULL)
		die("%s: %s", path, strerror(errno));
	if (fread(hdr, sizeof hdr, 1, f) != 1 || hdr[0] != DUMP_MAGIC ||
	    hdr[1] != V || hdr[3] < 0)
		die("%s: not a dump of this config", path);
	*steps = hdr[3];
	toks = xcalloc((size_t)hdr[3], 4);
	for (s = 0; s < hdr[3]; s++)
		if (fread(&toks[s], 4, 1, f) != 1 ||
		    fseek(f, (long)hdr[1] * hdr[2], SEEK_CUR) != 0)
			die("%s: truncated", path);
	fclose(f);
	return toks;
}

int ref_run(const model_t *m, const ref_opts_t *o)
{
	const int V = m->c.vocab;
	int32_t *follow = NULL, *toks, prompt[1024];
	double *logits;
	int steps = o->steps, s, t;
	ref_t r;

	if (o->follow)
		follow = dump_tokens(o->follow, V, &steps);
	if (o->prompt + steps > m->c.max_seq)
		die("prompt + steps exceed max_seq %d", m->c.max_seq);
	toks = xcalloc((size_t)steps + 1, 4);
	logits = xcalloc((size_t)(steps + 1) * V, sizeof(double));
	model_prompt(o->seed, o->prompt, V, prompt);
	ref_open(&r, m);
	for (t = 0; t < o->prompt; t++)
		ref_step(&r, prompt[t], t, logits);
	for (s = 0; s < steps; s++) {
		double *lg = logits + (size_t)s * V;
		int j, best = 0;

		if (s > 0)
			ref_step(&r, follow ? follow[s - 1] : toks[s - 1],
			    o->prompt + s - 1, lg);
		for (j = 1; j < V; j++)
			if (lg[j] > lg[best])
				best = j;
		toks[s] = best;
		if (!o->quiet)
			printf("%d%c", best, s + 1 < steps ? ' ' : '\n');
	}
	if (o->dump)
		dump_write(o->dump, V, 8, steps, toks, logits);
	ref_close(&r);
	free(follow);
	free(toks);
	free(logits);
	return 0;
}
