/*
 * Plain-C references of attention_decode, attention_prefill and
 * attention_paged, written from the definitions in
 * docs/kernels.md and independent of the IR: the canonical order
 * (chunks of 64 positions, canonical dot, sequential max and sums, the
 * left-to-right merge chain) with kspec's exp (ref_expf, the sequence every
 * backend computes, docs/ir.md), so every backend must give its bits; and
 * a double-precision one for sanity.  Header-only.
 *
 * ref_attn_decode_bug() takes planted bugs for the tests that show each
 * checker is not vacuous; ref_attn_decode() is it with none.
 */
#ifndef KS_REF_ATTN_H
#define KS_REF_ATTN_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"

enum { REF_ATTN_CH = 64 };

/* Planted bugs; all zero is the definition. */
typedef struct {
	int chunk;              /* chunk length instead of 64 (0: 64) */
	int seq_dot;            /* the 32 lane partials summed in sequence */
	int reverse_merge;      /* chunks merged right to left */
	int kvh_mod;            /* KV head h % Hkv instead of h / G */
	int drop_last;          /* the last position left out */
	int causal_next;        /* a causal row sees one position more */
	int table_ignored;      /* paged: block i of b read as b * MB + i */
} ref_attn_bug_t;

/*
 * The shape and KV layout of a call.  Query rows: T per sequence, q and o
 * of [B][T][Hq][D], row t of sequence b at position n - T + t, n =
 * clamp(lens[b], 0, S), seeing positions [0, max(n - T + t + 1, 0)).
 * Position p of sequence b is row b * Sc + p of k and v (of [.][Hkv][D]),
 * or with a block table (paged) row blk * BS + p % BS, blk =
 * clamp(bt[b * MB + p / BS], 0, NB - 1).  Decode is T = 1, Sc = S.
 */
typedef struct {
	int64_t B, T, Hq, Hkv, D, S, Sc;
	const int32_t *bt;      /* paged: [B][MB]; NULL: strided */
	int64_t BS, MB, NB;
} ref_attn_shape_t;

/* The row of k, v (in units of Hkv * D) holding position P of B. */
static inline int64_t ref_attn_kvrow(const ref_attn_shape_t *sh, int64_t b,
    int64_t p, int table_ignored)
{
	int64_t blk;

	if (sh->bt == NULL)
		return b * sh->Sc + p;
	blk = table_ignored ? b * sh->MB + p / sh->BS :
	    sh->bt[b * sh->MB + p / sh->BS];
	blk = blk < 0 ? 0 : blk > sh->NB - 1 ? sh->NB - 1 : blk;
	return blk * sh->BS + p % sh->BS;
}

/* The IR's max (fmaxf, a NaN operand ignored, -0 < +0). */
static inline float ref_attn_maxf(float a, float b)
{
	if (a == b)
		return ref_bits_f32(ref_f32_bits(a) & ref_f32_bits(b));
	return (b > a || a != a) ? b : a;
}

/* n = clamp(lens[b], 0, S). */
static inline int64_t ref_attn_len(const int32_t *lens, int64_t b,
    int64_t S)
{
	int64_t n = lens[b];

	return n < 0 ? 0 : n > S ? S : n;
}

/* Canonical dot of D elements (docs/kernels.md), or with the lane
 * partials summed in sequence (SEQ, a planted bug). */
static inline float ref_attn_dot(const void *a, int64_t ao, const void *b,
    int64_t bo, int dtype, int64_t D, int seq)
{
	float v[32], s;
	int64_t j;
	int l;

	if (!seq)
		return ref_dot_canonical(a, ao, b, bo, dtype, D);
	memset(v, 0, sizeof v);
	for (j = 0; j < D; j++)
		v[j % 32] = fmaf(ref_load(a, dtype, ao + j),
		    ref_load(b, dtype, bo + j), v[j % 32]);
	s = v[0];
	for (l = 1; l < 32; l++)
		s += v[l];
	return s;
}

/* Positions query row T of sequence B sees (see ref_attn_shape_t). */
static inline int64_t ref_attn_row_len(const ref_attn_shape_t *sh,
    const int32_t *lens, int64_t b, int64_t t, int causal_next)
{
	int64_t n = ref_attn_len(lens, b, sh->S);
	int64_t r = n - sh->T + t + 1 + (causal_next ? 1 : 0);

	return r < 0 ? 0 : r > n ? n : r;
}

/*
 * o[b][t][h][d] for every b < B, t < T, h < Hq (see the header).  q, k, v,
 * o in DTYPE (0 f32, 1 f16, 2 bf16); Hq a multiple of Hkv; D >= 1.
 */
static inline void ref_attn_rows_bug(const void *q, const void *k,
    const void *v, const int32_t *lens, void *o, int dtype,
    const ref_attn_shape_t *sh, float scale, const ref_attn_bug_t *bug)
{
	int64_t ch = bug->chunk > 0 ? bug->chunk : REF_ATTN_CH;
	int64_t Hq = sh->Hq, Hkv = sh->Hkv, D = sh->D;
	int64_t G = Hq / Hkv, b, t, h, n, nc, c, p, d, kvh, ko, i;
	float *mc, *lc, *ac, *sc, m, l, mn, f, g, e;

	sc = malloc(sizeof(float) * (size_t)ch);
	for (b = 0; b < sh->B; b++)
		for (t = 0; t < sh->T; t++)
		for (h = 0; h < Hq; h++) {
			int64_t qo = ((b * sh->T + t) * Hq + h) * D;

			n = ref_attn_row_len(sh, lens, b, t, bug->causal_next);
			if (bug->drop_last && n > 0)
				n--;
			if (n == 0) {
				for (d = 0; d < D; d++)
					ref_store(o, dtype, qo + d, 0.0f);
				continue;
			}
			kvh = bug->kvh_mod ? h % Hkv : h / G;
			nc = (n + ch - 1) / ch;
			mc = malloc(sizeof(float) * (size_t)nc);
			lc = malloc(sizeof(float) * (size_t)nc);
			ac = calloc((size_t)(nc * D), sizeof(float));
			for (c = 0; c < nc; c++) {
				int64_t p0 = c * ch, p1 = p0 + ch < n ?
				    p0 + ch : n;

				mc[c] = -INFINITY;
				for (p = p0; p < p1; p++) {
					ko = (ref_attn_kvrow(sh, b, p,
					    bug->table_ignored) * Hkv + kvh) * D;
					sc[p - p0] = ref_attn_dot(q, qo, k, ko,
					    dtype, D, bug->seq_dot) * scale;
					mc[c] = ref_attn_maxf(mc[c],
					    sc[p - p0]);
				}
				lc[c] = 0.0f;
				for (p = p0; p < p1; p++) {
					ko = (ref_attn_kvrow(sh, b, p,
					    bug->table_ignored) * Hkv + kvh) * D;
					e = ref_expf(sc[p - p0] - mc[c]);
					lc[c] = lc[c] + e;
					for (d = 0; d < D; d++)
						ac[c * D + d] = fmaf(e,
						    ref_load(v, dtype, ko + d),
						    ac[c * D + d]);
				}
			}
			/* The merge chain; state = the first chunk merged. */
			c = bug->reverse_merge ? nc - 1 : 0;
			m = mc[c];
			l = lc[c];
			for (i = 1; i < nc; i++) {
				int64_t cc = bug->reverse_merge ? nc - 1 - i :
				    i;

				mn = ref_attn_maxf(m, mc[cc]);
				f = ref_expf(m - mn);
				g = ref_expf(mc[cc] - mn);
				e = l * f;
				l = e + lc[cc] * g;
				for (d = 0; d < D; d++) {
					float x = ac[c * D + d] * f;
					float y = ac[cc * D + d] * g;

					ac[c * D + d] = x + y;
				}
				m = mn;
			}
			for (d = 0; d < D; d++)
				ref_store(o, dtype, qo + d, ac[c * D + d] / l);
			free(mc);
			free(lc);
			free(ac);
		}
	free(sc);
}

/* Decode: one row per sequence, k and v of [B][S][Hkv][D]. */
static inline ref_attn_shape_t ref_attn_decode_shape(int64_t B, int64_t Hq,
    int64_t Hkv, int64_t D, int64_t S)
{
	return (ref_attn_shape_t){ B, 1, Hq, Hkv, D, S, S, NULL, 0, 0, 0 };
}

static inline void ref_attn_decode_bug(const void *q, const void *k,
    const void *v, const int32_t *lens, void *o, int dtype, int64_t B,
    int64_t Hq, int64_t Hkv, int64_t D, int64_t S, float scale,
    const ref_attn_bug_t *bug)
{
	ref_attn_shape_t sh = ref_attn_decode_shape(B, Hq, Hkv, D, S);

	ref_attn_rows_bug(q, k, v, lens, o, dtype, &sh, scale, bug);
}

static inline void ref_attn_rows(const void *q, const void *k,
    const void *v, const int32_t *lens, void *o, int dtype,
    const ref_attn_shape_t *sh, float scale)
{
	const ref_attn_bug_t none = { 0 };

	ref_attn_rows_bug(q, k, v, lens, o, dtype, sh, scale, &none);
}

static inline void ref_attn_decode(const void *q, const void *k,
    const void *v, const int32_t *lens, void *o, int dtype, int64_t B,
    int64_t Hq, int64_t Hkv, int64_t D, int64_t S, float scale)
{
	const ref_attn_bug_t none = { 0 };

	ref_attn_decode_bug(q, k, v, lens, o, dtype, B, Hq, Hkv, D, S, scale,
	    &none);
}

/* Double precision: o = sum_p exp(s_p - max s) v_p / sum_p exp(s_p - max
 * s), s_p = dot(q, k_p) * scale, all in double, over the positions each
 * row sees. */
static inline void ref_attn_rows_f64(const void *q, const void *k,
    const void *v, const int32_t *lens, double *o, int dtype,
    const ref_attn_shape_t *sh, float scale)
{
	int64_t Hq = sh->Hq, Hkv = sh->Hkv, D = sh->D, G = Hq / Hkv;
	int64_t b, t, h, n, p, d, ko, nmax = sh->bt ? sh->MB * sh->BS : sh->S;
	double *s = malloc(sizeof(double) * (size_t)(nmax > 0 ? nmax : 1));
	double mx, l, e;

	for (b = 0; b < sh->B; b++)
		for (t = 0; t < sh->T; t++)
		for (h = 0; h < Hq; h++) {
			int64_t qo = ((b * sh->T + t) * Hq + h) * D;

			n = ref_attn_row_len(sh, lens, b, t, 0);
			for (d = 0; d < D; d++)
				o[qo + d] = 0.0;
			if (n == 0)
				continue;
			mx = -INFINITY;
			for (p = 0; p < n; p++) {
				double x = 0;

				ko = (ref_attn_kvrow(sh, b, p, 0) * Hkv +
				    h / G) * D;
				for (d = 0; d < D; d++)
					x += (double)ref_load(q, dtype, qo + d) *
					    ref_load(k, dtype, ko + d);
				s[p] = x * scale;
				mx = s[p] > mx ? s[p] : mx;
			}
			l = 0;
			for (p = 0; p < n; p++) {
				ko = (ref_attn_kvrow(sh, b, p, 0) * Hkv +
				    h / G) * D;
				e = exp(s[p] - mx);
				l += e;
				for (d = 0; d < D; d++)
					o[qo + d] += e * ref_load(v, dtype,
					    ko + d);
			}
			for (d = 0; d < D; d++)
				o[qo + d] /= l;
		}
	free(s);
}

static inline void ref_attn_decode_f64(const void *q, const void *k,
    const void *v, const int32_t *lens, double *o, int dtype, int64_t B,
    int64_t Hq, int64_t Hkv, int64_t D, int64_t S, float scale)
{
	ref_attn_shape_t sh = ref_attn_decode_shape(B, Hq, Hkv, D, S);

	ref_attn_rows_f64(q, k, v, lens, o, dtype, &sh, scale);
}

#endif
