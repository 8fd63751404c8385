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
 * the blocks out of order, entry j = (7 j + 3) % NB).  Header-only; needs only the kernel
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
	int c = 0;

#define B_(nm, el, i32, w) (b[c++] = (buf_t){ nm, (el), i32, w, NULL })
	if (strcmp(n, "gemm") == 0) {
		B_("x", D_("M") * D_("K"), 0, 0);
		B_("W", D_("N") * D_("K"), 0, 0);
		B_("y", D_("M") * D_("N"), 0, 1);
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
	return c;
}

static inline size_t lay_bytes(const buf_t *b, size_t es)
{
	return (size_t)b->elems * (b->i32 ? 4 : es);
}

/* Elements of B a launch reads: all of them, except rope's cs, of which it
 * reads the T rows at the positions (at most P). */
static inline int64_t lay_read_elems(const ks_kernel_def_t *def,
    const int64_t *v, const buf_t *b)
{
	if (strcmp(def->name, "rope") == 0 && strcmp(b->name, "cs") == 0)
		return (D_("T") < D_("P") ? D_("T") : D_("P")) * D_("D");
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

		if (strcmp(b[i].name, "y") == 0 || strcmp(b[i].name, "o") == 0)
			sum += el * size;
		else
			sum += el * size * (b[i].written ? 2 : 1);
	}
	return sum;
}

/* Element J of the int32 buffer NAME: lens full, the block table out of
 * order, rope's positions spread over the table. */
static inline int32_t lay_i32(const ks_kernel_def_t *def, const int64_t *v,
    const char *name, int64_t j)
{
	if (strcmp(name, "lens") == 0)
		return strcmp(def->name, "attention_paged") == 0 ?
		    (int32_t)(D_("MB") * D_("BS")) : (int32_t)D_("S");
	if (strcmp(name, "block_table") == 0)
		return (int32_t)((j * 7 + 3) % D_("NB"));
	return (int32_t)((j * 37 + 11) % D_("P"));
}

/* Allocates (64-byte aligned) and fills the NB buffers of B. */
static inline void lay_fill(const ks_kernel_def_t *def, const int64_t *v,
    buf_t *b, int nb, ks_dtype_t dt, uint64_t seed)
{
	int i;
	int64_t j;

	for (i = 0; i < nb; i++) {
		size_t sz = lay_bytes(&b[i], ks_dtype_size(dt));

		b[i].data = aligned_alloc(64, (sz + 63) / 64 * 64);
		if (b[i].data == NULL) {
			fprintf(stderr, "layout: out of memory\n");
			exit(1);
		}
		if (strcmp(def->name, "rope") == 0 &&
		    strcmp(b[i].name, "cs") == 0) {
			int64_t D = D_("D"), h = D / 2, p, c;

			for (p = 0; p < D_("P"); p++)
				for (c = 0; c < h; c++) {
					double a = (double)p * pow(10000.0,
					    -2.0 * (double)c / (double)D);

					ref_store(b[i].data, (int)dt, p * D + c,
					    (float)cos(a));
					ref_store(b[i].data, (int)dt,
					    p * D + h + c, (float)sin(a));
				}
			continue;
		}
		if (!b[i].i32) {
			ref_fill(b[i].data, (int)dt, b[i].elems,
			    seed + (uint64_t)i);
			continue;
		}
		for (j = 0; j < b[i].elems; j++)
			((int32_t *)b[i].data)[j] = lay_i32(def, v, b[i].name,
			    j);
	}
}

#undef D_

#endif
