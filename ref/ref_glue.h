/*
 * Plain-C references for the glue kernels (embedding, argmax,
 * kv_append_rope), written from the definitions in docs/kernels.md, not
 * from the IR, with ref.h's storage conversions.  Header-only, like ref.h.
 */
#ifndef KS_REF_GLUE_H
#define KS_REF_GLUE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "ref.h"
#include "ref_rope.h"

/* y[t] = table[ids[t]] (of WDTYPE) converted through f32 to DTYPE; zeros
 * for an id outside [0, V). */
static inline void ref_embedding_mixed(const int32_t *ids, const void *table,
    void *y, int dtype, int wdtype, int64_t T, int64_t V, int64_t H)
{
	int64_t t, j;

	for (t = 0; t < T; t++)
		for (j = 0; j < H; j++)
			ref_store(y, dtype, t * H + j, ids[t] >= 0 &&
			    ids[t] < V ? ref_load(table, wdtype,
			    (int64_t)ids[t] * H + j) : 0.0f);
}

static inline void ref_embedding(const int32_t *ids, const void *table,
    void *y, int dtype, int64_t T, int64_t V, int64_t H)
{
	ref_embedding_mixed(ids, table, y, dtype, dtype, T, V, H);
}

/* idx[r] = the lowest j with x[r][j] == the row's largest non-NaN value
 * (compared as numbers: -0 == +0), -1 when every value is NaN.  One
 * sequential scan, no lanes: the definition does not depend on order. */
static inline void ref_argmax(const void *x, int32_t *idx, int dtype,
    int64_t R, int64_t N)
{
	int64_t r, j;

	for (r = 0; r < R; r++) {
		int64_t best = -1;
		float m = 0;

		for (j = 0; j < N; j++) {
			float v = ref_load(x, dtype, r * N + j);

			if (isnan(v))
				continue;
			if (best < 0 || v > m) {
				best = j;
				m = v;
			}
		}
		idx[r] = (int32_t)best;
	}
}

/*
 * k_cache[b][p][h] = rope(k[b][t][h]) at p = pos[b] + t (the pairs i <
 * D/2, floor for an odd D whose last column is copied), v_cache[b][p][h] =
 * v[b][t][h], for 0 <= p < min(S, P); nothing else written.  The table
 * cs is of CSDTYPE.  By definition: the copy, then rope in place over the
 * cache rows written (ref_rope_mixed, its positions -1 elsewhere).
 */
static inline void ref_kv_append_rope_mixed(const void *k, const void *v,
    const int32_t *pos, const void *cs, void *kc, void *vc, int dtype,
    int csdtype, int64_t B, int64_t T, int64_t Hkv, int64_t D, int64_t S,
    int64_t P)
{
	int32_t *rows = malloc(sizeof *rows * (size_t)(B * S));
	int64_t b, t, i, n = Hkv * D;

	if (!rows)
		abort();
	for (i = 0; i < B * S; i++)
		rows[i] = -1;
	for (b = 0; b < B; b++)
		for (t = 0; t < T; t++) {
			int64_t p = (int64_t)pos[b] + t;
			int64_t so = (b * T + t) * n, co = (b * S + p) * n;

			if (p < 0 || p >= S || p >= P)
				continue;
			for (i = 0; i < n; i++) {
				ref_store(kc, dtype, co + i,
				    ref_load(k, dtype, so + i));
				ref_store(vc, dtype, co + i,
				    ref_load(v, dtype, so + i));
			}
			rows[b * S + p] = (int32_t)p;
		}
	ref_rope_mixed(kc, rows, cs, dtype, csdtype, B * S, Hkv, D, P);
	free(rows);
}

static inline void ref_kv_append_rope(const void *k, const void *v,
    const int32_t *pos, const void *cs, void *kc, void *vc, int dtype,
    int64_t B, int64_t T, int64_t Hkv, int64_t D, int64_t S, int64_t P)
{
	ref_kv_append_rope_mixed(k, v, pos, cs, kc, vc, dtype, dtype, B, T,
	    Hkv, D, S, P);
}

#endif
