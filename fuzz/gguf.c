/*
 * examples/llama's GGUF reader (examples/llama/gguf.h, gf_read) on the
 * bytes of a file.
 *
 * Checks: a file it reads points only inside the input (every value and
 * every tensor's bytes), has the alignment it says, its tensors' bytes
 * agree with their type and sizes and overlap nowhere; the lookups find
 * what it read; and the writer, given the tensors read, writes a file
 * that reads back to the same names, types, sizes and bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../examples/llama/gguf.h"
#include "fuzz.h"

/* Whether the N bytes at Q lie inside [DATA, DATA + SIZE). */
static int inside(const uint8_t *data, size_t size, const void *q,
    uint64_t n)
{
	const uint8_t *p = q;

	return p >= data && p <= data + size && n <= (uint64_t)(data + size -
	    p);
}

/* The tensors of G written again and read back. */
static void rewrite(const gf_file_t *g)
{
	gf_writer_t *w = gf_writer_new(g->alignment);
	char name[GF_MAX_NAME + 1], err[256];
	uint8_t *out = NULL;
	size_t n = 0;
	uint64_t i;
	gf_file_t h;
	FILE *m;

	KS_FUZZ_CHECK(w != NULL);
	for (i = 0; i < g->ntensors; i++) {
		const gf_tensor_t *t = &g->tensors[i];

		memcpy(name, t->name.s, t->name.n);
		name[t->name.n] = '\0';
		if (memchr(name, '\0', t->name.n)) {
			/* A name with a NUL: not one the writer takes. */
			gf_writer_free(w);
			return;
		}
		KS_FUZZ_CHECK(gf_add_tensor(w, name, t->type, t->ndims,
		    t->dims, t->data, t->bytes) == 0);
	}
	m = open_memstream((char **)&out, &n);
	KS_FUZZ_CHECK(m != NULL);
	KS_FUZZ_CHECK(gf_write(w, m, err, sizeof err) == 0);
	KS_FUZZ_CHECK(fclose(m) == 0);
	gf_writer_free(w);
	KS_FUZZ_CHECK(gf_read(out, n, &h, err, sizeof err) == 0);
	KS_FUZZ_CHECK(h.ntensors == g->ntensors &&
	    h.alignment == g->alignment);
	for (i = 0; i < g->ntensors; i++) {
		const gf_tensor_t *a = &g->tensors[i], *b = &h.tensors[i];

		KS_FUZZ_CHECK(a->name.n == b->name.n &&
		    memcmp(a->name.s, b->name.s, a->name.n) == 0);
		KS_FUZZ_CHECK(a->type == b->type && a->ndims == b->ndims &&
		    memcmp(a->dims, b->dims, sizeof a->dims) == 0 &&
		    a->bytes == b->bytes);
		KS_FUZZ_CHECK(memcmp(a->data, b->data, a->bytes) == 0);
	}
	gf_free(&h);
	free(out);
}

KS_FUZZ_TARGET(gguf)
{
	char err[512], key[256];
	gf_file_t g;
	uint64_t i, j;

	if (gf_read(data, size, &g, err, sizeof err) != 0) {
		KS_FUZZ_CHECK(err[0] != '\0');
		return 0;
	}
	KS_FUZZ_CHECK(g.alignment && !(g.alignment & (g.alignment - 1)));
	KS_FUZZ_CHECK(g.data_offset <= size);
	for (i = 0; i < g.nkv; i++) {
		const gf_kv_t *kv = &g.kv[i];

		KS_FUZZ_CHECK(inside(data, size, kv->key.s, kv->key.n));
		KS_FUZZ_CHECK(inside(data, size, kv->val, kv->bytes));
		if (kv->key.n < sizeof key && !memchr(kv->key.s, '\0',
		    kv->key.n)) {
			memcpy(key, kv->key.s, kv->key.n);
			key[kv->key.n] = '\0';
			KS_FUZZ_CHECK(gf_find_kv(&g, key) == kv);
		}
		for (j = 0; kv->type == GF_ARR && kv->atype == GF_STR &&
		    j < kv->n; j++) {
			gf_str_t s;

			KS_FUZZ_CHECK(gf_kv_arr_str(kv, j, &s) == 0);
			KS_FUZZ_CHECK(inside(data, size, s.s, s.n));
		}
	}
	for (i = 0; i < g.ntensors; i++) {
		const gf_tensor_t *t = &g.tensors[i];
		int be, bb;

		KS_FUZZ_CHECK(gf_type_block(t->type, &be, &bb));
		KS_FUZZ_CHECK(t->dims[0] % (uint64_t)be == 0);
		KS_FUZZ_CHECK(t->offset % g.alignment == 0);
		KS_FUZZ_CHECK(inside(data, size, t->data, t->bytes));
		KS_FUZZ_CHECK(t->data == data + g.data_offset + t->offset);
		for (j = 0; j < i; j++) {
			const gf_tensor_t *u = &g.tensors[j];

			KS_FUZZ_CHECK(t->offset >= u->offset + u->bytes ||
			    u->offset >= t->offset + t->bytes);
		}
	}
	rewrite(&g);
	gf_free(&g);
	return 0;
}
