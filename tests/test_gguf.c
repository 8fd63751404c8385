/*
 * examples/llama's GGUF reader and writer (examples/llama/gguf.h):
 *   - a file the writer makes, with every value type, arrays of scalars
 *     and of strings, and tensors of every type it writes at 1 to 4
 *     dimensions, reads back to the same pairs, sizes, offsets and bytes,
 *     at the default alignment and at another (general.alignment);
 *   - every prefix of that file is refused (truncated), never read past;
 *   - each malformed file is refused with its reason: the magic, a version
 *     1 or a big-endian file, counts the file cannot hold, a string past
 *     the end, an unknown value type, arrays of arrays, a duplicate key or
 *     tensor, a bad alignment, 0 or 5 dimensions, a zero size, a size
 *     product that overflows, a first size off the block, a type it does
 *     not read (named: Q6_K), an offset off the alignment, a tensor past
 *     the end (a lying size) or over another, a name too long;
 *   - the checks are not blind: an intact file passes the same run.
 *
 * Beside llama.cpp's own GGUF code (suite gguf_ggml, the pinned
 * libggml-base.so of tests/ggml.h; skipped, saying so, without it): ggml
 * reads the writer's file at both alignments to the same version,
 * alignment, data offset, pairs and tensors (offsets, types, sizes), and
 * this reader reads a file ggml wrote (a model's pairs, q4_0, q8_0, q4_k
 * and f32 tensors) to ggml's values and bytes.
 */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../examples/llama/gguf.h"
#include "ggml.h"

/* ---- a file with everything ---- */

typedef struct {
	uint8_t *p;
	size_t n;
} file_t;

static uint8_t q8[2 * 34], q4[3 * 18], q4k[144], f16[3 * 2 * 2], bf16[4 * 2];
static float f32[2 * 3 * 2 * 2];

/* The test file's tensors: name, type, dims, data. */
static const struct {
	const char *name;
	uint32_t type, ndims;
	uint64_t dims[4];
	const void *data;
	uint64_t bytes;
} tensors[] = {
	{ "t.f32", GF_T_F32, 4, { 2, 3, 2, 2 }, f32, sizeof f32 },
	{ "t.q8_0", GF_T_Q8_0, 2, { 32, 2 }, q8, sizeof q8 },
	{ "t.q4_0", GF_T_Q4_0, 1, { 96 }, q4, sizeof q4 },
	{ "t.q4_k", GF_T_Q4_K, 2, { 256, 1 }, q4k, sizeof q4k },
	{ "t.f16", GF_T_F16, 3, { 3, 1, 2 }, f16, sizeof f16 },
	{ "t.bf16", GF_T_BF16, 1, { 4 }, bf16, sizeof bf16 },
};

#define NT (sizeof tensors / sizeof tensors[0])

static file_t make(uint32_t alignment)
{
	static const char *const strs[] = { "<s>", "", "hello" };
	static const uint32_t u32s[] = { 1, 2, 0xffffffffu };
	static const float f32s[] = { 0.5f, -1.0f };
	uint8_t u8 = 200, b = 1;
	int8_t i8 = -100;
	uint16_t u16 = 60000;
	int16_t i16 = -30000;
	uint32_t u32 = 4000000000u;
	int32_t i32 = -2000000000;
	float f = 1e-5f;
	uint64_t u64 = 18000000000000000000ull;
	int64_t i64 = -9000000000000000000ll;
	double d = 0.1;
	gf_writer_t *w = gf_writer_new(alignment);
	char err[256];
	file_t fl;
	FILE *m;
	size_t i;

	cr_assert(w);
	for (i = 0; i < sizeof f32 / 4; i++)
		f32[i] = (float)i - 3.5f;
	for (i = 0; i < sizeof q8; i++)
		q8[i] = (uint8_t)(i * 7 + 1);
	for (i = 0; i < sizeof q4; i++)
		q4[i] = (uint8_t)(i * 13 + 5);
	for (i = 0; i < sizeof q4k; i++)
		q4k[i] = (uint8_t)(i * 31 + 3);
	for (i = 0; i < sizeof f16; i++)
		f16[i] = (uint8_t)(0x3c + i);
	for (i = 0; i < sizeof bf16; i++)
		bf16[i] = (uint8_t)(0x40 + i);
	cr_assert_eq(gf_add_kv_str(w, "general.architecture", "llama"), 0);
	cr_assert_eq(gf_add_kv(w, "k.u8", GF_U8, &u8), 0);
	cr_assert_eq(gf_add_kv(w, "k.i8", GF_I8, &i8), 0);
	cr_assert_eq(gf_add_kv(w, "k.u16", GF_U16, &u16), 0);
	cr_assert_eq(gf_add_kv(w, "k.i16", GF_I16, &i16), 0);
	cr_assert_eq(gf_add_kv(w, "k.u32", GF_U32, &u32), 0);
	cr_assert_eq(gf_add_kv(w, "k.i32", GF_I32, &i32), 0);
	cr_assert_eq(gf_add_kv(w, "k.f32", GF_F32, &f), 0);
	cr_assert_eq(gf_add_kv(w, "k.bool", GF_BOOL, &b), 0);
	cr_assert_eq(gf_add_kv(w, "k.u64", GF_U64, &u64), 0);
	cr_assert_eq(gf_add_kv(w, "k.i64", GF_I64, &i64), 0);
	cr_assert_eq(gf_add_kv(w, "k.f64", GF_F64, &d), 0);
	cr_assert_eq(gf_add_kv_arr(w, "k.strs", GF_STR, strs, 3), 0);
	cr_assert_eq(gf_add_kv_arr(w, "k.u32s", GF_U32, u32s, 3), 0);
	cr_assert_eq(gf_add_kv_arr(w, "k.f32s", GF_F32, f32s, 2), 0);
	cr_assert_eq(gf_add_kv_arr(w, "k.empty", GF_I32, NULL, 0), 0);
	for (i = 0; i < NT; i++)
		cr_assert_eq(gf_add_tensor(w, tensors[i].name, tensors[i].type,
		    tensors[i].ndims, tensors[i].dims, tensors[i].data,
		    tensors[i].bytes), 0, "%s", tensors[i].name);
	m = open_memstream((char **)&fl.p, &fl.n);
	cr_assert(m);
	cr_assert_eq(gf_write(w, m, err, sizeof err), 0, "%s", err);
	cr_assert_eq(fclose(m), 0);
	gf_writer_free(w);
	return fl;
}

static int str_is(gf_str_t s, const char *z)
{
	return s.n == strlen(z) && memcmp(s.s, z, s.n) == 0;
}

static void check_file(const file_t *fl, uint32_t alignment)
{
	gf_file_t g;
	gf_str_t s;
	int64_t v;
	double d;
	char err[256];
	size_t i;
	const gf_kv_t *kv;

	cr_assert_eq(gf_read(fl->p, fl->n, &g, err, sizeof err), 0, "%s", err);
	cr_assert_eq(g.version, 3);
	cr_assert_eq(g.alignment, alignment);
	cr_assert_eq(g.ntensors, NT);
	cr_assert_eq(g.data_offset % alignment, 0);
	cr_assert_eq(gf_kv_str(&g, "general.architecture", &s), 0);
	cr_assert(str_is(s, "llama"));
	cr_assert_eq(gf_kv_int(&g, "k.u8", &v), 0);
	cr_assert_eq(v, 200);
	cr_assert_eq(gf_kv_int(&g, "k.i8", &v), 0);
	cr_assert_eq(v, -100);
	cr_assert_eq(gf_kv_int(&g, "k.u16", &v), 0);
	cr_assert_eq(v, 60000);
	cr_assert_eq(gf_kv_int(&g, "k.i16", &v), 0);
	cr_assert_eq(v, -30000);
	cr_assert_eq(gf_kv_int(&g, "k.u32", &v), 0);
	cr_assert_eq(v, 4000000000ll);
	cr_assert_eq(gf_kv_int(&g, "k.i32", &v), 0);
	cr_assert_eq(v, -2000000000ll);
	cr_assert_eq(gf_kv_int(&g, "k.bool", &v), 0);
	cr_assert_eq(v, 1);
	cr_assert_eq(gf_kv_int(&g, "k.u64", &v), -1, "beyond int64");
	cr_assert_eq(gf_kv_int(&g, "k.i64", &v), 0);
	cr_assert_eq(v, -9000000000000000000ll);
	cr_assert_eq(gf_kv_float(&g, "k.f32", &d), 0);
	cr_assert_eq(d, (double)1e-5f);
	cr_assert_eq(gf_kv_float(&g, "k.f64", &d), 0);
	cr_assert_eq(d, 0.1);
	cr_assert_eq(gf_kv_int(&g, "k.f64", &v), -1, "a float is no int");
	cr_assert_eq(gf_kv_str(&g, "k.u8", &s), -1);
	cr_assert_eq(gf_kv_int(&g, "no.such", &v), -1);
	kv = gf_find_kv(&g, "k.strs");
	cr_assert(kv && kv->type == GF_ARR && kv->atype == GF_STR &&
	    kv->n == 3);
	cr_assert_eq(gf_kv_arr_str(kv, 0, &s), 0);
	cr_assert(str_is(s, "<s>"));
	cr_assert_eq(gf_kv_arr_str(kv, 1, &s), 0);
	cr_assert(str_is(s, ""));
	cr_assert_eq(gf_kv_arr_str(kv, 2, &s), 0);
	cr_assert(str_is(s, "hello"));
	cr_assert_eq(gf_kv_arr_str(kv, 3, &s), -1);
	kv = gf_find_kv(&g, "k.u32s");
	cr_assert(kv && kv->atype == GF_U32 && kv->n == 3 && kv->bytes == 12);
	cr_assert_eq(memcmp(kv->val + 8, "\xff\xff\xff\xff", 4), 0);
	kv = gf_find_kv(&g, "k.empty");
	cr_assert(kv && kv->n == 0 && kv->bytes == 0);
	for (i = 0; i < NT; i++) {
		const gf_tensor_t *t = gf_find_tensor(&g, tensors[i].name);
		uint32_t d2;

		cr_assert(t, "%s", tensors[i].name);
		cr_assert_eq(t->type, tensors[i].type);
		cr_assert_eq(t->ndims, tensors[i].ndims);
		for (d2 = 0; d2 < t->ndims; d2++)
			cr_assert_eq(t->dims[d2], tensors[i].dims[d2]);
		cr_assert_eq(t->bytes, tensors[i].bytes);
		cr_assert_eq(t->offset % alignment, 0);
		cr_assert_eq(memcmp(t->data, tensors[i].data, t->bytes), 0,
		    "%s", tensors[i].name);
	}
	cr_assert_null(gf_find_tensor(&g, "t.none"));
	gf_free(&g);
}

Test(gguf, a_written_file_reads_back_whole)
{
	file_t a = make(GF_ALIGN), b = make(128);
	gf_file_t g;

	check_file(&a, GF_ALIGN);
	check_file(&b, 128);
	/* The other alignment is written down, and moved the data. */
	cr_assert_eq(gf_read(b.p, b.n, &g, NULL, 0), 0);
	cr_assert_not_null(gf_find_kv(&g, "general.alignment"));
	cr_assert_eq(g.data_offset % 128, 0);
	gf_free(&g);
	cr_assert_eq(gf_read(a.p, a.n, &g, NULL, 0), 0);
	cr_assert_null(gf_find_kv(&g, "general.alignment"));
	gf_free(&g);
	free(a.p);
	free(b.p);
}

Test(gguf, the_writer_refuses_what_it_cannot_write)
{
	gf_writer_t *w = gf_writer_new(32);
	uint64_t dims[5] = { 32, 1, 1, 1, 1 }, big = 300;
	uint8_t blk[34] = { 0 };

	cr_assert_null(gf_writer_new(0));
	cr_assert_null(gf_writer_new(48));
	cr_assert_eq(gf_add_tensor(w, "q", GF_T_Q8_0, 1, &big, blk, 34), -1,
	    "not a multiple of the block");
	cr_assert_eq(gf_add_tensor(w, "q", GF_T_Q8_0, 1, dims, blk, 33), -1,
	    "bytes disagree");
	cr_assert_eq(gf_add_tensor(w, "q", 14, 1, dims, blk, 34), -1, "Q6_K");
	cr_assert_eq(gf_add_tensor(w, "q", GF_T_Q8_0, 5, dims, blk, 34), -1);
	cr_assert_eq(gf_add_kv(w, "a", GF_ARR, blk), -1);
	cr_assert_eq(gf_add_tensor(w, "q", GF_T_Q8_0, 1, dims, blk, 34), 0);
	gf_writer_free(w);
}

/* ---- malformed files ---- */

/* Offsets in the test file (alignment 32), found by walking it. */
typedef struct {
	size_t version, ntensors, nkv;
	size_t kv0_type;                /* the first pair's value type */
	size_t kv0_len;                 /* the first pair's string length */
	size_t arr_type;                /* k.strs' element type */
	size_t arr_n;                   /* k.strs' count */
	size_t t0_name_len, t0_ndims, t0_dim0, t0_type, t0_off;
	size_t t1_dim0, t1_off;
	size_t t1_name_len;
	size_t n;                       /* the file's bytes */
} where_t;

static uint64_t rd(const uint8_t *p, int k)
{
	uint64_t v = 0;
	int i;

	for (i = k - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void wr(uint8_t *p, uint64_t v, int k)
{
	int i;

	for (i = 0; i < k; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static where_t walk(const file_t *fl)
{
	const uint8_t *p = fl->p;
	where_t at;
	size_t o = 24, i;
	uint64_t nkv = rd(p + 16, 8);

	memset(&at, 0, sizeof at);
	at.n = fl->n;
	at.version = 4;
	at.ntensors = 8;
	at.nkv = 16;
	for (i = 0; i < nkv; i++) {
		uint64_t kl = rd(p + o, 8), type;
		int is_strs = kl == 6 && memcmp(p + o + 8, "k.strs", 6) == 0;

		o += 8 + kl;
		type = rd(p + o, 4);
		if (i == 0)
			at.kv0_type = o;
		o += 4;
		if (type == GF_STR) {
			if (i == 0)
				at.kv0_len = o;
			o += 8 + rd(p + o, 8);
		} else if (type == GF_ARR) {
			uint64_t at2 = rd(p + o, 4), n = rd(p + o + 4, 8), j;
			static const int sz[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0,
				8, 8, 8 };

			if (is_strs) {
				at.arr_type = o;
				at.arr_n = o + 4;
			}
			o += 12;
			for (j = 0; j < n; j++)
				o += at2 == GF_STR ? 8 + rd(p + o, 8) :
				    (uint64_t)sz[at2];
		} else {
			static const int sz[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0,
				8, 8, 8 };

			o += (size_t)sz[type];
		}
	}
	for (i = 0; i < 2; i++) {
		uint64_t nl = rd(p + o, 8), nd;

		if (i == 0)
			at.t0_name_len = o;
		else
			at.t1_name_len = o;
		o += 8 + nl;
		nd = rd(p + o, 4);
		if (i == 0)
			at.t0_ndims = o;
		o += 4;
		if (i == 0)
			at.t0_dim0 = o;
		else
			at.t1_dim0 = o;
		o += 8 * nd;
		if (i == 0)
			at.t0_type = o;
		o += 4;
		if (i == 0)
			at.t0_off = o;
		else
			at.t1_off = o;
		o += 8;
	}
	return at;
}

/* Reads FL with byte-level change MUT applied to a copy; returns the
 * reader's message, or NULL when it read the file. */
static const char *read_copy(const file_t *fl, void (*mut)(uint8_t *,
    const where_t *), size_t n)
{
	static char err[512];
	uint8_t *c = malloc(fl->n);
	where_t at = walk(fl);
	gf_file_t g;
	int rc;

	memcpy(c, fl->p, fl->n);
	if (mut)
		mut(c, &at);
	err[0] = '\0';
	rc = gf_read(c, n, &g, err, sizeof err);
	if (rc == 0)
		gf_free(&g);
	free(c);
	return rc == 0 ? NULL : err;
}

#define MUT(name, body) \
	static void name(uint8_t *p, const where_t *at) { (void)at; body; }

MUT(m_magic, p[0] = 'X')
MUT(m_v1, wr(p + at->version, 1, 4))
MUT(m_be, wr(p + at->version, 3u << 24, 4))
MUT(m_many_tensors, wr(p + at->ntensors, UINT64_MAX, 8))
MUT(m_many_kv, wr(p + at->nkv, 1ull << 40, 8))
MUT(m_long_string, wr(p + at->kv0_len, 1ull << 50, 8))
MUT(m_vtype, wr(p + at->kv0_type, 13, 4))
MUT(m_nested, wr(p + at->arr_type, GF_ARR, 4))
MUT(m_big_array, wr(p + at->arr_n, 1ull << 61, 8))
/* The first S in the file becomes T (as long). */
static void rename_first(uint8_t *p, size_t n, const char *s, const char *t)
{
	uint8_t *q = memmem(p, n, s, strlen(s));

	cr_assert(q);
	memcpy(q, t, strlen(t));
}

MUT(m_dup_key, rename_first(p, at->n, "k.i8", "k.u8"))
MUT(m_ndims0, wr(p + at->t0_ndims, 0, 4))
MUT(m_ndims5, wr(p + at->t0_ndims, 5, 4))
MUT(m_dim0, wr(p + at->t0_dim0, 0, 8))
MUT(m_dim_overflow, wr(p + at->t0_dim0 + 8, 1ull << 62, 8))
MUT(m_q6k, wr(p + at->t0_type, 14, 4))
MUT(m_type99, wr(p + at->t0_type, 99, 4))
MUT(m_unaligned, wr(p + at->t0_off, 4, 8))
MUT(m_past_end, wr(p + at->t0_off, 1ull << 20, 8))
MUT(m_lying_size, wr(p + at->t1_dim0, 32 * 1000, 8))
MUT(m_off_block, wr(p + at->t1_dim0, 33, 8))
MUT(m_overlap, wr(p + at->t1_off, 32, 8))
MUT(m_dup_tensor, rename_first(p, at->n, "t.f16", "t.f32"))
MUT(m_long_name, wr(p + at->t0_name_len, 64, 8))

Test(gguf, every_malformed_file_is_refused_with_its_reason)
{
	static const struct {
		void (*mut)(uint8_t *, const where_t *);
		const char *why;
	} cases[] = {
		{ m_magic, "not a GGUF file" },
		{ m_v1, "GGUF version 1" },
		{ m_be, "big-endian" },
		{ m_many_tensors, "tensors do not fit" },
		{ m_many_kv, "key-value pairs do not fit" },
		{ m_long_string, "truncated" },
		{ m_vtype, "unknown value type 13" },
		{ m_nested, "arrays of arrays" },
		{ m_big_array, "does not fit" },
		{ m_dup_key, "key 'k.u8' appears twice" },
		{ m_dup_tensor, "tensor 't.f32' appears twice" },
		{ m_ndims0, "0 dimensions" },
		{ m_ndims5, "5 dimensions" },
		{ m_dim0, "size 0 in dimension 0" },
		{ m_dim_overflow, "sizes that a F32 tensor cannot have" },
		{ m_q6k, "type Q6_K is not read" },
		{ m_type99, "type 99 is not read" },
		{ m_unaligned, "not a multiple of the alignment" },
		{ m_past_end, "pass the end of the file" },
		{ m_lying_size, "pass the end of the file" },
		{ m_off_block, "sizes that a Q8_0 tensor cannot have" },
		{ m_overlap, "overlaps" },
		{ m_long_name, "a tensor name of 64 bytes" },
	};
	file_t fl = make(GF_ALIGN);
	size_t i;

	cr_assert_null(read_copy(&fl, NULL, fl.n), "the intact file reads");
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *e = read_copy(&fl, cases[i].mut, fl.n);

		cr_assert_not_null(e, "case %zu (%s) was read", i,
		    cases[i].why);
		cr_assert(strstr(e, cases[i].why), "case %zu: \"%s\", want "
		    "\"%s\"", i, e, cases[i].why);
	}
	free(fl.p);
}

/* Every prefix of a file that cuts into its last tensor is refused; one
 * that cuts only the padding after it reads. */
Test(gguf, every_prefix_of_a_file_is_refused)
{
	file_t fl = make(GF_ALIGN);
	size_t n, end = 0, i;
	gf_file_t g;

	cr_assert_eq(gf_read(fl.p, fl.n, &g, NULL, 0), 0);
	for (i = 0; i < g.ntensors; i++)
		if (g.data_offset + g.tensors[i].offset + g.tensors[i].bytes >
		    end)
			end = g.data_offset + g.tensors[i].offset +
			    g.tensors[i].bytes;
	gf_free(&g);
	cr_assert_lt(end, fl.n, "the test file ends in padding");
	cr_assert_eq(read_copy(&fl, NULL, end), NULL);
	for (n = 0; n < end; n++) {
		/* A copy of exactly N bytes, so that a read past it is one
		 * past the allocation (make asan catches it). */
		uint8_t *c = malloc(n ? n : 1);
		char err[256];
		gf_file_t g;

		memcpy(c, fl.p, n);
		cr_assert_eq(gf_read(c, n, &g, err, sizeof err), -1,
		    "a prefix of %zu of %zu bytes was read", n, fl.n);
		free(c);
	}
	free(fl.p);
}

/* ---- beside llama.cpp's own GGUF code ---- */

/*
 * ggml's gguf reader and writer, from the pinned libggml-base.so
 * (tests/ggml.h), declared as ggml's gguf.h and ggml.h declare them.
 * Skipped, saying so, where the package is not installed.
 */
struct gguf_init_params {
	bool no_alloc;
	void **ctx;
};

struct ggml_init_params {
	size_t mem_size;
	void *mem_buffer;
	bool no_alloc;
};

typedef struct {
	ks_ggml_t lib;
	void *(*init_from_file)(const char *, struct gguf_init_params);
	void *(*init_empty)(void);
	void (*free)(void *);
	uint32_t (*get_version)(const void *);
	size_t (*get_alignment)(const void *);
	size_t (*get_data_offset)(const void *);
	int64_t (*get_n_kv)(const void *);
	int64_t (*find_key)(const void *, const char *);
	uint32_t (*get_val_u32)(const void *, int64_t);
	const char *(*get_val_str)(const void *, int64_t);
	size_t (*get_arr_n)(const void *, int64_t);
	const char *(*get_arr_str)(const void *, int64_t, size_t);
	int64_t (*get_n_tensors)(const void *);
	int64_t (*find_tensor)(const void *, const char *);
	size_t (*get_tensor_offset)(const void *, int64_t);
	int (*get_tensor_type)(const void *, int64_t);
	size_t (*get_tensor_size)(const void *, int64_t);
	void (*set_val_u32)(void *, const char *, uint32_t);
	void (*set_val_str)(void *, const char *, const char *);
	void (*set_arr_str)(void *, const char *, const char **, size_t);
	void (*add_tensor)(void *, const void *);
	bool (*write_to_file)(const void *, const char *, bool);
	void *(*ggml_init)(struct ggml_init_params);
	void (*ggml_free)(void *);
	void *(*new_tensor)(void *, int, int, const int64_t *);
	void *(*set_name)(void *, const char *);
	void *(*get_data)(const void *);
} ggguf_t;

static void need_ggml(ggguf_t *g)
{
	static const char *const names[] = { "gguf_init_from_file",
		"gguf_init_empty", "gguf_free", "gguf_get_version",
		"gguf_get_alignment", "gguf_get_data_offset", "gguf_get_n_kv",
		"gguf_find_key", "gguf_get_val_u32", "gguf_get_val_str",
		"gguf_get_arr_n", "gguf_get_arr_str", "gguf_get_n_tensors",
		"gguf_find_tensor", "gguf_get_tensor_offset",
		"gguf_get_tensor_type", "gguf_get_tensor_size",
		"gguf_set_val_u32", "gguf_set_val_str", "gguf_set_arr_str",
		"gguf_add_tensor", "gguf_write_to_file", "ggml_init",
		"ggml_free", "ggml_new_tensor", "ggml_set_name",
		"ggml_get_data" };
	void **fn = (void **)&g->init_from_file;
	char err[1024];
	size_t i;

	if (access(ks_ggml_path(), F_OK) != 0)
		cr_skip_test("ggml is not installed (%s missing): "
		    "deploy/deps.sh --bench installs %s %s",
		    ks_ggml_path(), KS_GGML_PACKAGE, KS_GGML_PACKAGE_VERSION);
	cr_assert_eq(ks_ggml_open(&g->lib, err, sizeof err), 0, "%s", err);
	for (i = 0; i < sizeof names / sizeof names[0]; i++) {
		fn[i] = dlsym(g->lib.handle, names[i]);
		cr_assert_not_null(fn[i], "%s lacks %s", g->lib.path, names[i]);
	}
}

/* FL as a file of its own, for ggml's reader; the path in PATH. */
static void to_file(const file_t *fl, char *path, size_t n)
{
	int fd;

	snprintf(path, n, "/tmp/kspec-gguf-XXXXXX");
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, fl->p, fl->n), (ssize_t)fl->n);
	close(fd);
}

Test(gguf_ggml, ggml_reads_a_file_this_writer_wrote_as_this_reader_does)
{
	uint32_t aligns[] = { GF_ALIGN, 128 };
	ggguf_t g;
	size_t a, i;

	need_ggml(&g);
	for (a = 0; a < 2; a++) {
		file_t fl = make(aligns[a]);
		struct gguf_init_params ip = { true, NULL };
		char path[64];
		gf_file_t mine;
		void *c;
		int64_t k;

		to_file(&fl, path, sizeof path);
		c = g.init_from_file(path, ip);
		unlink(path);
		cr_assert_not_null(c, "ggml refused the file (alignment %u)",
		    aligns[a]);
		cr_assert_eq(gf_read(fl.p, fl.n, &mine, NULL, 0), 0);
		cr_assert_eq(g.get_version(c), 3);
		cr_assert_eq(g.get_alignment(c), aligns[a]);
		cr_assert_eq(g.get_data_offset(c), mine.data_offset);
		cr_assert_eq(g.get_n_kv(c), (int64_t)mine.nkv);
		cr_assert_eq(g.get_n_tensors(c), (int64_t)NT);
		k = g.find_key(c, "general.architecture");
		cr_assert_geq(k, 0);
		cr_assert_str_eq(g.get_val_str(c, k), "llama");
		k = g.find_key(c, "k.u32");
		cr_assert_eq(g.get_val_u32(c, k), 4000000000u);
		k = g.find_key(c, "k.strs");
		cr_assert_eq(g.get_arr_n(c, k), 3);
		cr_assert_str_eq(g.get_arr_str(c, k, 2), "hello");
		for (i = 0; i < NT; i++) {
			const gf_tensor_t *t = gf_find_tensor(&mine,
			    tensors[i].name);
			int64_t id = g.find_tensor(c, tensors[i].name);

			cr_assert_geq(id, 0, "%s", tensors[i].name);
			cr_assert_eq(g.get_tensor_offset(c, id), t->offset);
			cr_assert_eq(g.get_tensor_type(c, id),
			    (int)tensors[i].type);
			cr_assert_eq(g.get_tensor_size(c, id), t->bytes,
			    "%s: ggml's size", tensors[i].name);
		}
		g.free(c);
		gf_free(&mine);
		free(fl.p);
	}
	ks_ggml_close(&g.lib);
}

Test(gguf_ggml, this_reader_reads_a_file_ggml_wrote)
{
	static const char *const toks[] = { "<s>", "x", "" };
	struct ggml_init_params mp = { 1 << 20, NULL, false };
	static const struct {
		const char *name;
		int type, ndims;
		int64_t ne[2];
	} ts[] = {
		{ "w.q4_0", GF_T_Q4_0, 2, { 64, 3 } },
		{ "w.q8_0", GF_T_Q8_0, 2, { 32, 2 } },
		{ "w.q4_k", GF_T_Q4_K, 1, { 512, 1 } },
		{ "n.f32", GF_T_F32, 1, { 5, 1 } },
	};
	ggguf_t g;
	void *c, *m, *tensor[4];
	char path[64];
	long n;
	uint8_t *buf;
	FILE *f;
	gf_file_t rd;
	gf_str_t s;
	int64_t v;
	size_t i, j;
	int fd;

	need_ggml(&g);
	c = g.init_empty();
	m = g.ggml_init(mp);
	cr_assert(c && m);
	g.set_val_str(c, "general.architecture", "llama");
	g.set_val_u32(c, "llama.block_count", 7);
	g.set_arr_str(c, "tokenizer.ggml.tokens", (const char **)toks, 3);
	for (i = 0; i < 4; i++) {
		tensor[i] = g.new_tensor(m, ts[i].type, ts[i].ndims, ts[i].ne);
		cr_assert_not_null(tensor[i]);
		g.set_name(tensor[i], ts[i].name);
		g.add_tensor(c, tensor[i]);
	}
	/* The tensors' bytes: a pattern per tensor, over their sizes as
	 * this file computes them (the test checks both agree). */
	for (i = 0; i < 4; i++) {
		uint64_t dims[2] = { (uint64_t)ts[i].ne[0],
			(uint64_t)ts[i].ne[1] };
		int be, bb;
		uint64_t bytes;
		uint8_t *d = g.get_data(tensor[i]);

		cr_assert(gf_type_block((uint32_t)ts[i].type, &be, &bb));
		bytes = dims[0] / (uint64_t)be * (uint64_t)bb * dims[1];
		for (j = 0; j < bytes; j++)
			d[j] = (uint8_t)(j * 17 + i);
	}
	snprintf(path, sizeof path, "/tmp/kspec-gguf-XXXXXX");
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert(g.write_to_file(c, path, false), "ggml could not write");
	g.free(c);
	f = fopen(path, "rb");
	cr_assert_not_null(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	unlink(path);
	cr_assert_eq(gf_read(buf, (size_t)n, &rd, path, sizeof path), 0,
	    "%s", path);
	cr_assert_eq(gf_kv_str(&rd, "general.architecture", &s), 0);
	cr_assert(str_is(s, "llama"));
	cr_assert_eq(gf_kv_int(&rd, "llama.block_count", &v), 0);
	cr_assert_eq(v, 7);
	cr_assert_eq(gf_kv_arr_str(gf_find_kv(&rd, "tokenizer.ggml.tokens"),
	    1, &s), 0);
	cr_assert(str_is(s, "x"));
	for (i = 0; i < 4; i++) {
		const gf_tensor_t *t = gf_find_tensor(&rd, ts[i].name);
		const uint8_t *d = g.get_data(tensor[i]);

		cr_assert_not_null(t, "%s", ts[i].name);
		cr_assert_eq(t->type, (uint32_t)ts[i].type);
		cr_assert_eq(t->ndims, (uint32_t)ts[i].ndims);
		cr_assert_eq(t->dims[0], (uint64_t)ts[i].ne[0]);
		cr_assert_eq(memcmp(t->data, d, t->bytes), 0, "%s",
		    ts[i].name);
	}
	gf_free(&rd);
	free(buf);
	g.ggml_free(m);
	ks_ggml_close(&g.lib);
}
