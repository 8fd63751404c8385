/*
 * GGUF, llama.cpp's model file (versions 2 and 3, little-endian): a reader
 * of a whole file in memory that checks every length, count, type, offset
 * and size against the file before it trusts it, and a writer.
 *
 * The layout: "GGUF", u32 version, u64 tensor count, u64 key-value count;
 * the key-value pairs (a string key, a u32 value type, the value; an
 * array is a u32 element type, a u64 count and the elements); per tensor
 * a string name, u32 n_dims, n_dims u64 sizes (the first the innermost:
 * a row's length), a u32 ggml type and a u64 offset into the data
 * section; padding to the alignment (the u32 `general.alignment`, else
 * 32); the data section.  A string is a u64 length and its bytes, without
 * a terminator.
 *
 * Tensor types read and written: F32, F16, BF16, Q8_0, Q4_0 and Q4_K, in
 * ggml's layouts (a block format's blocks along the first dimension).
 * Every other ggml type is refused by its name.
 */
#ifndef KS_EXAMPLES_GGUF_H
#define KS_EXAMPLES_GGUF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Value types of the key-value pairs. */
enum {
	GF_U8, GF_I8, GF_U16, GF_I16, GF_U32, GF_I32, GF_F32, GF_BOOL,
	GF_STR, GF_ARR, GF_U64, GF_I64, GF_F64, GF_NVTYPES
};

/* The ggml tensor types this file reads and writes. */
enum {
	GF_T_F32 = 0, GF_T_F16 = 1, GF_T_Q4_0 = 2, GF_T_Q8_0 = 8,
	GF_T_Q4_K = 12, GF_T_BF16 = 30
};

enum {
	GF_MAX_DIMS = 4,
	GF_MAX_NAME = 63,       /* bytes of a tensor name (ggml's limit) */
	GF_ALIGN = 32,          /* the default alignment */
};

/* A string in the file: N bytes at S, no terminator. */
typedef struct {
	const char *s;
	uint64_t n;
} gf_str_t;

typedef struct {
	gf_str_t key;
	uint32_t type;          /* GF_U8 .. GF_F64 */
	uint32_t atype;         /* GF_ARR: the elements' type */
	uint64_t n;             /* GF_ARR: the element count */
	const uint8_t *val;     /* the value's (array's elements') bytes */
	uint64_t bytes;         /* their length in the file */
} gf_kv_t;

typedef struct {
	gf_str_t name;
	uint32_t ndims;
	uint64_t dims[GF_MAX_DIMS];     /* dims[0]: a row's length */
	uint32_t type;          /* GF_T_* */
	uint64_t offset;        /* from the data section's start */
	uint64_t bytes;
	const uint8_t *data;
} gf_tensor_t;

typedef struct {
	uint32_t version;
	uint32_t alignment;
	uint64_t nkv, ntensors;
	gf_kv_t *kv;
	gf_tensor_t *tensors;
	uint64_t data_offset;   /* of the data section in the file */
} gf_file_t;

/*
 * Reads the GGUF file of N bytes at P into OUT, whose strings and data
 * point into P (which must outlive it).  0, or -1 with the reason in ERR
 * (the file is refused whole; nothing is read past P + N).  Free with
 * gf_free.
 */
int gf_read(const uint8_t *p, size_t n, gf_file_t *out, char *err,
    size_t errlen);
void gf_free(gf_file_t *f);

/* Lookups by name: NULL when absent. */
const gf_kv_t *gf_find_kv(const gf_file_t *f, const char *key);
const gf_tensor_t *gf_find_tensor(const gf_file_t *f, const char *name);

/* A key's value as an integer (any integer type, within the range of
 * int64), a float (F32 or F64), a string, or the I-th string of an array
 * of strings.  0, or -1 when absent or of another type. */
int gf_kv_int(const gf_file_t *f, const char *key, int64_t *v);
int gf_kv_float(const gf_file_t *f, const char *key, double *v);
int gf_kv_str(const gf_file_t *f, const char *key, gf_str_t *v);
int gf_kv_arr_str(const gf_kv_t *kv, uint64_t i, gf_str_t *v);

/* ggml's name of tensor type T ("Q6_K"; NULL when ggml has none), and
 * the elements and bytes of one of its blocks (0 when this file does not
 * read T). */
const char *gf_type_name(uint32_t t);
int gf_type_block(uint32_t t, int *elems, int *bytes);

/* ---- writing ---- */

typedef struct gf_writer gf_writer_t;

/* A writer whose data section is aligned to ALIGNMENT (a power of two;
 * other than 32 it is written as general.alignment).  NULL when out of
 * memory. */
gf_writer_t *gf_writer_new(uint32_t alignment);
void gf_writer_free(gf_writer_t *w);

/* Key-value pairs, in the order added.  A scalar's VAL points to its
 * value in the type's C form (bool: one byte 0 or 1); a string is a C
 * string; an array is N elements of type ATYPE at VAL (strings: N
 * pointers to C strings).  The writer copies them.  0, or -1 when out of
 * memory or given a type it does not write. */
int gf_add_kv(gf_writer_t *w, const char *key, uint32_t type,
    const void *val);
int gf_add_kv_str(gf_writer_t *w, const char *key, const char *s);
int gf_add_kv_arr(gf_writer_t *w, const char *key, uint32_t atype,
    const void *val, uint64_t n);

/* A tensor of TYPE and NDIMS sizes DIMS (dims[0] a multiple of the
 * type's block), whose BYTES bytes at DATA the writer references (they
 * must live until gf_write).  0, or -1 when the sizes and bytes disagree
 * or the type is not one this file writes. */
int gf_add_tensor(gf_writer_t *w, const char *name, uint32_t type,
    uint32_t ndims, const uint64_t *dims, const void *data, uint64_t bytes);

/* Writes the file to F.  0, or -1 with the reason in ERR. */
int gf_write(gf_writer_t *w, FILE *f, char *err, size_t errlen);

#endif
