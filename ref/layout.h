/*
 * The buffers of each library kernel, by the names of its parameters, for
 * the benchmarks (bench/kernels on the cpu, bench/gpu/check on a GPU):
 * sizes at given dims, the bytes a launch must move, and test data (values
 * in [-1, 1) stored in the dtype; rope's cs a real cos/sin table, so that
 * rotating in place again and again keeps x's magnitude; positions
 * (37 t + 11) % P, so that a single token is not at position 0, where the
 * rotation is the identity;
 * every sequence full, lens = S, or MB * BS paged, so that a prefill's
 * rows see S - T + 1 .. S positions; a paged block table that visits
 * the blocks out of order, entry j = (7 j + 3) % NB; embedding's ids
 * (37 t + 11) % V; kv_append_rope's positions (37 b + 11) % (S - T + 1)
 * when that is below P, so that every new token has a slot and an
 * angle; the caches start as test data, and the slots a step does not
 * write keep it).  Header-only; needs only the kernel
 * definitions.
 */
#ifndef KS_REF_LAYOUT_H
#define KS_REF_LAYOUT_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../specialize/specialize.h"
#include "ref.h"

enum { LAY_MAXB = 8 };

typedef struct {
	const char *name;
	int64_t elems;
	int i32;                /* int32 elements (positions, lengths) */
	int written;
	void *data;
	int weight;             /* the kernel's weight buffer (def->weights):
	                           of the weight dtype */
} buf_t;

static inline int64_t dim(const ks_kernel_def_t *def, const int64_t *v,
    const char *name)
{
	int i;

	for (i = 0; i < def->ndims; i++)
		if (strcmp(def->dims[i], name) == 0)
			return v[i];
	fprintf(stderr, "layout: %s has no dim %s\n", def->name, name);
	exit(1);
}

#define D_(n) dim(def, v, n)

/* The buffers of DEF at dims V (declared order); returns the count. */
static inline int layout(const ks_kernel_def_t *def, const int64_t *v,
    buf_t *b)
{
	const char *n = def->name;
	int c = 0, i;

#define B_(nm, el, i32, w) (b[c++] = (buf_t){ nm, (el), i32, w, NULL, 0 })
	if (strcmp(n, "gemm") == 0) {
		B_("x", D_("M") * D_("K"), 0, 0);
		B_("W", D_("N") * D_("K"), 0, 0);
		B_("y", D_("M") * D_("N"), 0, 1);
	} else if (strcmp(n, "gemm_packed") == 0) {
		B_("xp", ref_panel_elems(D_("M"), D_("K"), 8), 0, 0);
		B_("Wp", ref_panel_elems(D_("N"), D_("K"), 32), 0, 0);
		B_("y", D_("M") * D_("N"), 0, 1);
	} else if (strcmp(n, "gemm_pack_x") == 0 ||
	    strcmp(n, "gemm_pack_w") == 0) {
		B_("in", D_("R") * D_("K"), 0, 0);
		B_("out", ref_panel_elems(D_("R"), D_("K"),
		    n[10] == 'x' ? 8 : 32), 0, 1);
	} else if (strcmp(n, "rmsnorm") == 0 ||
	    strcmp(n, "add_rmsnorm") == 0) {
		B_("x", D_("R") * D_("H"), 0, 0);
		if (n[0] == 'a')
			B_("res", D_("R") * D_("H"), 0, 1);
		B_("w", D_("H"), 0, 0);
		B_("y", D_("R") * D_("H"), 0, 1);
	} else if (strcmp(n, "softmax") == 0) {
		B_("x", D_("R") * D_("L"), 0, 0);
		B_("y", D_("R") * D_("L"), 0, 1);
	} else if (strcmp(n, "rope") == 0) {
		B_("x", D_("T") * D_("Hn") * D_("D"), 0, 1);
		B_("pos", D_("T"), 1, 0);
		B_("cs", D_("P") * D_("D"), 0, 0);
	} else if (strcmp(n, "silu_mul") == 0) {
		B_("gu", D_("T") * 2 * D_("F"), 0, 0);
		B_("y", D_("T") * D_("F"), 0, 1);
	} else if (strcmp(n, "embedding") == 0) {
		B_("ids", D_("T"), 1, 0);
		B_("table", D_("V") * D_("H"), 0, 0);
		B_("y", D_("T") * D_("H"), 0, 1);
	} else if (strcmp(n, "argmax") == 0) {
		B_("x", D_("R") * D_("N"), 0, 0);
		B_("idx", D_("R"), 1, 1);
	} else if (strcmp(n, "kv_append_rope") == 0) {
		B_("k", D_("B") * D_("T") * D_("Hkv") * D_("D"), 0, 0);
		B_("v", D_("B") * D_("T") * D_("Hkv") * D_("D"), 0, 0);
		B_("pos", D_("B"), 1, 0);
		B_("cs", D_("P") * D_("D"), 0, 0);
		B_("k_cache", D_("B") * D_("S") * D_("Hkv") * D_("D"), 0, 1);
		B_("v_cache", D_("B") * D_("S") * D_("Hkv") * D_("D"), 0, 1);
	} else if (strcmp(n, "attention_decode") == 0) {
		B_("q", D_("B") * D_("Hq") * D_("D"), 0, 0);
		B_("k", D_("B") * D_("S") * D_("Hkv") * D_("D"), 0, 0);
		B_("v", D_("B") * D_("S") * D_("Hkv") * D_("D"), 0, 0);
		B_("lens", D_("B"), 1, 0);
		B_("o", D_("B") * D_("Hq") * D_("D"), 0, 1);
	} else if (strcmp(n, "attention_prefill") == 0 ||
	    strcmp(n, "attention_paged") == 0) {
		int paged = strcmp(n, "attention_paged") == 0;
		int64_t kv = paged ? D_("NB") * D_("BS") : D_("B") * D_("Sc");

		B_("q", D_("B") * D_("T") * D_("Hq") * D_("D"), 0, 0);
		B_("k", kv * D_("Hkv") * D_("D"), 0, 0);
		B_("v", kv * D_("Hkv") * D_("D"), 0, 0);
		if (paged)
			B_("block_table", D_("B") * D_("MB"), 1, 0);
		B_("lens", D_("B"), 1, 0);
		B_("o", D_("B") * D_("T") * D_("Hq") * D_("D"), 0, 1);
	} else {
		fprintf(stderr, "layout: no layout for %s\n", n);
		exit(1);
	}
#undef B_
	for (i = 0; i < c; i++)
		b[i].weight = def->weights != NULL &&
		    strcmp(b[i].name, def->weights) == 0;
	return c;
}

/* The dtype of B's elements: WDT for the weight buffer, else DT (the
 * i32 buffers aside). */
static inline ks_dtype_t lay_dtype(const buf_t *b, ks_dtype_t dt,
    ks_dtype_t wdt)
{
	return b->weight ? wdt : dt;
}

/* Bytes of B with the kernel's dtype DT and weight dtype WDT. */
static inline size_t lay_size(const buf_t *b, ks_dtype_t dt, ks_dtype_t wdt)
{
	return (size_t)b->elems * (b->i32 ? 4 : ks_dtype_size(lay_dtype(b, dt,
	    wdt)));
}

/* Whether B is only written, so that a test may poison it before a run
 * (every element is a result); the in-place buffers (rope's x,
 * add_rmsnorm's res) and the KV caches (whose other slots stay) are not. */
static inline int lay_is_output(const buf_t *b)
{
	static const char *const kept[] = { "x", "res", "k_cache", "v_cache" };
	size_t i;

	if (!b->written)
		return 0;
	for (i = 0; i < sizeof kept / sizeof kept[0]; i++)
		if (strcmp(b->name, kept[i]) == 0)
			return 0;
	return 1;
}

/* The dtype B's elements compare as: DT, or 4-byte words for int32. */
static inline ks_dtype_t lay_cmp_dtype(const buf_t *b, ks_dtype_t dt)
{
	return b->i32 ? KS_DTYPE_F32 : dt;
}

static inline size_t lay_bytes(const buf_t *b, size_t es)
{
	return (size_t)b->elems * (b->i32 ? 4 : es);
}

/* Elements of B a launch reads: all of them, except rope's cs, of which it
 * reads the T rows at the positions (at most P), embedding's table, of
 * which it reads T rows (at most V), and kv_append_rope's cs (B T rows)
 * and caches (which it only writes: B T rows each, counted once). */
static inline int64_t lay_read_elems(const ks_kernel_def_t *def,
    const int64_t *v, const buf_t *b)
{
	if (strcmp(def->name, "rope") == 0 && strcmp(b->name, "cs") == 0)
		return (D_("T") < D_("P") ? D_("T") : D_("P")) * D_("D");
	if (strcmp(def->name, "embedding") == 0 &&
	    strcmp(b->name, "table") == 0)
		return (D_("T") < D_("V") ? D_("T") : D_("V")) * D_("H");
	if (strcmp(def->name, "kv_append_rope") == 0 &&
	    strcmp(b->name, "cs") == 0)
		return D_("B") * D_("T") * D_("D");
	if (strcmp(def->name, "kv_append_rope") == 0 && b->written)
		return D_("B") * D_("T") * D_("Hkv") * D_("D");
	return b->elems;
}

/* Bytes a launch must move: each buffer read once (rope's cs: only the T
 * rows at the positions), each read-write buffer written once more, an
 * output (y, o) written once. */
static inline double moved(const ks_kernel_def_t *def, const int64_t *v,
    const buf_t *b, int nb, size_t es)
{
	double sum = 0;
	int i;

	for (i = 0; i < nb; i++) {
		double el = (double)lay_read_elems(def, v, &b[i]);
		double size = b[i].i32 ? 4 : (double)es;

		if (strcmp(b[i].name, "y") == 0 || strcmp(b[i].name, "o") == 0 ||
		    strcmp(b[i].name, "out") == 0 ||
		    strcmp(b[i].name, "idx") == 0 ||
		    strcmp(b[i].name, "k_cache") == 0 ||
		    strcmp(b[i].name, "v_cache") == 0)
			sum += el * size;
		else
			sum += el * size * (b[i].written ? 2 : 1);
	}
	return sum;
}

/* Element J of the i32 buffer B: a length, a block, an id or a
 * position. */
static inline int32_t lay_i32(const ks_kernel_def_t *def, const int64_t *v,
    const buf_t *b, int64_t j)
{
	int64_t n;

	if (strcmp(b->name, "lens") == 0)
		return strcmp(def->name, "attention_paged") == 0 ?
		    (int32_t)(D_("MB") * D_("BS")) : (int32_t)D_("S");
	if (strcmp(b->name, "block_table") == 0)
		return (int32_t)((j * 7 + 3) % D_("NB"));
	if (strcmp(def->name, "embedding") == 0)
		return (int32_t)((j * 37 + 11) % D_("V"));
	if (strcmp(def->name, "kv_append_rope") == 0) {
		n = D_("S") - D_("T") + 1;
		n = n < D_("P") ? n : D_("P");
		return (int32_t)(n > 0 ? (j * 37 + 11) % n : 0);
	}
	if (strcmp(b->name, "idx") == 0)
		return -2;
	return (int32_t)((j * 37 + 11) % D_("P"));
}

/* Allocates (64-byte aligned) and fills the NB buffers of B, the weight
 * buffer in WDT, the others in DT. */
static inline void lay_fill_mixed(const ks_kernel_def_t *def,
    const int64_t *v, buf_t *b, int nb, ks_dtype_t dt, ks_dtype_t wdt,
    uint64_t seed)
{
	int i;
	int64_t j;

	for (i = 0; i < nb; i++) {
		size_t sz = lay_size(&b[i], dt, wdt);
		int bdt = (int)lay_dtype(&b[i], dt, wdt);

		b[i].data = aligned_alloc(64, (sz + 63) / 64 * 64);
		if (b[i].data == NULL) {
			fprintf(stderr, "layout: out of memory\n");
			exit(1);
		}
		if ((strcmp(def->name, "rope") == 0 ||
		    strcmp(def->name, "kv_append_rope") == 0) &&
		    strcmp(b[i].name, "cs") == 0) {
			int64_t D = D_("D"), h = D / 2, p, c;

			for (p = 0; p < D_("P"); p++)
				for (c = 0; c < h; c++) {
					double a = (double)p * pow(10000.0,
					    -2.0 * (double)c / (double)D);

					ref_store(b[i].data, bdt, p * D + c,
					    (float)cos(a));
					ref_store(b[i].data, bdt,
					    p * D + h + c, (float)sin(a));
				}
			continue;
		}
		if (!b[i].i32) {
			ref_fill(b[i].data, bdt, b[i].elems,
			    seed + (uint64_t)i);
			continue;
		}
		for (j = 0; j < b[i].elems; j++)
			((int32_t *)b[i].data)[j] = lay_i32(def, v, &b[i], j);
	}
}

static inline void lay_fill(const ks_kernel_def_t *def, const int64_t *v,
    buf_t *b, int nb, ks_dtype_t dt, uint64_t seed)
{
	lay_fill_mixed(def, v, b, nb, dt, dt, seed);
}

#undef D_

#endif
