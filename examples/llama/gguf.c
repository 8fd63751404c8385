/*
 * GGUF reading and writing (gguf.h).  The reader walks the file with a
 * cursor that refuses any read past its end, bounds every count by the
 * bytes left (a count of tensors or pairs that the rest of the file could
 * not hold is refused before anything is allocated for it), and checks
 * each tensor's type, sizes, alignment and extent before it points into
 * the data.
 */
#include "gguf.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- types ---- */

static const int scalar_bytes[GF_NVTYPES] = {
	[GF_U8] = 1, [GF_I8] = 1, [GF_U16] = 2, [GF_I16] = 2, [GF_U32] = 4,
	[GF_I32] = 4, [GF_F32] = 4, [GF_BOOL] = 1, [GF_U64] = 8, [GF_I64] = 8,
	[GF_F64] = 8,
};

/* ggml's tensor types by number, for the names in errors. */
static const char *const type_names[] = {
	"F32", "F16", "Q4_0", "Q4_1", "type 4", "type 5", "Q5_0", "Q5_1",
	"Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
	"IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S",
	"IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16",
};

const char *gf_type_name(uint32_t t)
{
	if (t < sizeof type_names / sizeof type_names[0] &&
	    strncmp(type_names[t], "type", 4) != 0)
		return type_names[t];
	return NULL;
}

/* T's name, or its number when ggml has none, in BUF. */
static const char *type_desc(uint32_t t, char *buf, size_t n)
{
	const char *name = gf_type_name(t);

	if (name)
		return name;
	snprintf(buf, n, "%u", t);
	return buf;
}

int gf_type_block(uint32_t t, int *elems, int *bytes)
{
	int e, b;

	switch (t) {
	case GF_T_F32: e = 1; b = 4; break;
	case GF_T_F16: case GF_T_BF16: e = 1; b = 2; break;
	case GF_T_Q8_0: e = 32; b = 34; break;
	case GF_T_Q4_0: e = 32; b = 18; break;
	case GF_T_Q4_K: e = 256; b = 144; break;
	default: return 0;
	}
	if (elems)
		*elems = e;
	if (bytes)
		*bytes = b;
	return 1;
}

/* The bytes of a tensor of TYPE and sizes DIMS[0..NDIMS): 0 when the
 * first size is not a multiple of the block or the product overflows. */
static uint64_t tensor_bytes(uint32_t type, uint32_t ndims,
    const uint64_t *dims)
{
	uint64_t b;
	uint32_t i;
	int be, bb;

	if (!gf_type_block(type, &be, &bb) || dims[0] % (uint64_t)be != 0 ||
	    dims[0] / (uint64_t)be > (uint64_t)INT64_MAX / (uint64_t)bb)
		return 0;
	b = dims[0] / (uint64_t)be * (uint64_t)bb;
	for (i = 1; i < ndims; i++) {
		if (dims[i] != 0 && b > (uint64_t)INT64_MAX / dims[i])
			return 0;
		b *= dims[i];
	}
	return b;
}

/* ---- reading ---- */

typedef struct {
	const uint8_t *p;
	size_t n, at;
	char *err;
	size_t errlen;
	int bad;
} cur_t;

static int fail(cur_t *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int fail(cur_t *c, const char *fmt, ...)
{
	va_list ap;

	if (!c->bad && c->err && c->errlen) {
		va_start(ap, fmt);
		vsnprintf(c->err, c->errlen, fmt, ap);
		va_end(ap);
	}
	c->bad = 1;
	return -1;
}

static size_t left(const cur_t *c)
{
	return c->n - c->at;
}

/* K bytes at the cursor, which moves past them. */
static const uint8_t *take(cur_t *c, uint64_t k, const char *what)
{
	const uint8_t *q;

	if (c->bad)
		return NULL;
	if (k > left(c)) {
		fail(c, "truncated: %s at byte %zu needs %llu bytes, the file "
		    "has %zu more", what, c->at, (unsigned long long)k,
		    left(c));
		return NULL;
	}
	q = c->p + c->at;
	c->at += (size_t)k;
	return q;
}

static uint64_t le(const uint8_t *q, int k)
{
	uint64_t v = 0;
	int i;

	for (i = k - 1; i >= 0; i--)
		v = v << 8 | q[i];
	return v;
}

static uint32_t u32(cur_t *c, const char *what)
{
	const uint8_t *q = take(c, 4, what);

	return q ? (uint32_t)le(q, 4) : 0;
}

static uint64_t u64(cur_t *c, const char *what)
{
	const uint8_t *q = take(c, 8, what);

	return q ? le(q, 8) : 0;
}

static gf_str_t str(cur_t *c, const char *what)
{
	gf_str_t s = { NULL, 0 };
	uint64_t n = u64(c, what);
	const uint8_t *q = take(c, n, what);

	if (q) {
		s.s = (const char *)q;
		s.n = n;
	}
	return s;
}

static int str_is(gf_str_t s, const char *z)
{
	return s.s && s.n == strlen(z) && memcmp(s.s, z, s.n) == 0;
}

static int str_eq(gf_str_t a, gf_str_t b)
{
	return a.n == b.n && memcmp(a.s, b.s, a.n) == 0;
}

/* The value of one pair, its type already read. */
static int kv_value(cur_t *c, gf_kv_t *kv)
{
	size_t start;
	uint64_t i;

	if (kv->type >= GF_NVTYPES)
		return fail(c, "key '%.*s': unknown value type %u",
		    (int)kv->key.n, kv->key.s, kv->type);
	if (kv->type == GF_ARR) {
		kv->atype = u32(c, "an array's element type");
		kv->n = u64(c, "an array's count");
		if (c->bad)
			return -1;
		if (kv->atype == GF_ARR || kv->atype >= GF_NVTYPES)
			return fail(c, "key '%.*s': arrays of %s are not read",
			    (int)kv->key.n, kv->key.s, kv->atype == GF_ARR ?
			    "arrays" : "an unknown type");
		/* Each element takes at least a byte (a string 8). */
		if (kv->n > left(c) / (kv->atype == GF_STR ? 8 :
		    (uint64_t)scalar_bytes[kv->atype]))
			return fail(c, "key '%.*s': an array of %llu elements "
			    "does not fit in the %zu bytes left",
			    (int)kv->key.n, kv->key.s,
			    (unsigned long long)kv->n, left(c));
		start = c->at;
		if (kv->atype == GF_STR)
			for (i = 0; i < kv->n && !c->bad; i++)
				str(c, "an array's string");
		else
			take(c, kv->n * (uint64_t)scalar_bytes[kv->atype],
			    "an array's elements");
	} else {
		start = c->at;
		if (kv->type == GF_STR)
			str(c, "a string value");
		else
			take(c, (uint64_t)scalar_bytes[kv->type], "a value");
	}
	if (c->bad)
		return -1;
	kv->val = c->p + start;
	kv->bytes = c->at - start;
	return 0;
}

static int read_kvs(cur_t *c, gf_file_t *f)
{
	uint64_t i, j;

	/* A pair takes at least 13 bytes: key length, type, a byte. */
	if (f->nkv > left(c) / 13)
		return fail(c, "%llu key-value pairs do not fit in the %zu "
		    "bytes left", (unsigned long long)f->nkv, left(c));
	f->kv = calloc(f->nkv ? f->nkv : 1, sizeof *f->kv);
	if (!f->kv)
		return fail(c, "out of memory");
	for (i = 0; i < f->nkv; i++) {
		gf_kv_t *kv = &f->kv[i];

		kv->key = str(c, "a key");
		kv->type = u32(c, "a value type");
		if (c->bad || kv_value(c, kv) != 0)
			return -1;
		for (j = 0; j < i; j++)
			if (str_eq(f->kv[j].key, kv->key))
				return fail(c, "key '%.*s' appears twice",
				    (int)kv->key.n, kv->key.s);
	}
	return 0;
}

static int read_alignment(cur_t *c, gf_file_t *f)
{
	const gf_kv_t *a = gf_find_kv(f, "general.alignment");

	f->alignment = GF_ALIGN;
	if (!a)
		return 0;
	if (a->type != GF_U32)
		return fail(c, "general.alignment is not a u32");
	f->alignment = (uint32_t)le(a->val, 4);
	if (f->alignment == 0 || (f->alignment & (f->alignment - 1)) != 0)
		return fail(c, "general.alignment %u is not a power of two",
		    f->alignment);
	return 0;
}

static int read_tensor_info(cur_t *c, gf_file_t *f, gf_tensor_t *t)
{
	char tn[32];
	uint32_t d;

	t->name = str(c, "a tensor's name");
	t->ndims = u32(c, "a tensor's dimension count");
	if (c->bad)
		return -1;
	if (t->name.n > GF_MAX_NAME)
		return fail(c, "a tensor name of %llu bytes (at most %d)",
		    (unsigned long long)t->name.n, GF_MAX_NAME);
	if (t->ndims < 1 || t->ndims > GF_MAX_DIMS)
		return fail(c, "tensor '%.*s': %u dimensions (1 to %d)",
		    (int)t->name.n, t->name.s, t->ndims, GF_MAX_DIMS);
	for (d = 0; d < t->ndims; d++) {
		t->dims[d] = u64(c, "a tensor's size");
		if (!c->bad && (t->dims[d] == 0 ||
		    t->dims[d] > (uint64_t)INT64_MAX))
			return fail(c, "tensor '%.*s': size %llu in dimension "
			    "%u", (int)t->name.n, t->name.s,
			    (unsigned long long)t->dims[d], d);
	}
	for (; d < GF_MAX_DIMS; d++)
		t->dims[d] = 1;
	t->type = u32(c, "a tensor's type");
	t->offset = u64(c, "a tensor's offset");
	if (c->bad)
		return -1;
	if (!gf_type_block(t->type, NULL, NULL))
		return fail(c, "tensor '%.*s': type %s is not read (F32, F16, "
		    "BF16, Q8_0, Q4_0 and Q4_K are)", (int)t->name.n, t->name.s,
		    type_desc(t->type, tn, sizeof tn));
	t->bytes = tensor_bytes(t->type, t->ndims, t->dims);
	if (t->bytes == 0)
		return fail(c, "tensor '%.*s': sizes that a %s tensor cannot "
		    "have (the first a multiple of its block, the product "
		    "within range)", (int)t->name.n, t->name.s,
		    type_desc(t->type, tn, sizeof tn));
	if (t->offset % f->alignment != 0)
		return fail(c, "tensor '%.*s': offset %llu is not a multiple "
		    "of the alignment %u", (int)t->name.n, t->name.s,
		    (unsigned long long)t->offset, f->alignment);
	return 0;
}

static int by_offset(const void *a, const void *b)
{
	const gf_tensor_t *x = *(const gf_tensor_t *const *)a;
	const gf_tensor_t *y = *(const gf_tensor_t *const *)b;

	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Every tensor inside the data section, none overlapping another. */
static int place_tensors(cur_t *c, gf_file_t *f)
{
	uint64_t data = c->n - f->data_offset, i;
	gf_tensor_t **s = malloc((f->ntensors ? f->ntensors : 1) * sizeof *s);

	if (!s)
		return fail(c, "out of memory");
	for (i = 0; i < f->ntensors; i++)
		s[i] = &f->tensors[i];
	qsort(s, f->ntensors, sizeof *s, by_offset);
	for (i = 0; i < f->ntensors && !c->bad; i++) {
		gf_tensor_t *t = s[i];

		if (t->offset > data || t->bytes > data - t->offset)
			fail(c, "tensor '%.*s': %llu bytes at offset %llu "
			    "pass the end of the file (%llu bytes of data)",
			    (int)t->name.n, t->name.s,
			    (unsigned long long)t->bytes,
			    (unsigned long long)t->offset,
			    (unsigned long long)data);
		else if (i > 0 && t->offset < s[i - 1]->offset +
		    s[i - 1]->bytes)
			fail(c, "tensor '%.*s' overlaps tensor '%.*s'",
			    (int)t->name.n, t->name.s, (int)s[i - 1]->name.n,
			    s[i - 1]->name.s);
		else
			t->data = c->p + f->data_offset + t->offset;
	}
	free(s);
	return c->bad ? -1 : 0;
}

int gf_read(const uint8_t *p, size_t n, gf_file_t *out, char *err,
    size_t errlen)
{
	cur_t c = { p, n, 0, err, errlen, 0 };
	const uint8_t *magic;
	uint64_t i, j, pad;

	memset(out, 0, sizeof *out);
	magic = take(&c, 4, "the magic");
	if (magic && memcmp(magic, "GGUF", 4) != 0)
		fail(&c, "not a GGUF file (its first bytes are not \"GGUF\")");
	out->version = u32(&c, "the version");
	if (!c.bad && (out->version & 0xffff) == 0 && out->version != 0)
		fail(&c, "a big-endian GGUF file (version %u byte-swapped): "
		    "only little-endian files are read", out->version >> 24);
	if (!c.bad && out->version != 2 && out->version != 3)
		fail(&c, "GGUF version %u (2 and 3 are read)", out->version);
	out->ntensors = u64(&c, "the tensor count");
	out->nkv = u64(&c, "the key-value count");
	if (c.bad || read_kvs(&c, out) != 0 || read_alignment(&c, out) != 0)
		goto bad;
	/* A tensor's info takes at least 32 bytes. */
	if (out->ntensors > left(&c) / 32) {
		fail(&c, "%llu tensors do not fit in the %zu bytes left",
		    (unsigned long long)out->ntensors, left(&c));
		goto bad;
	}
	out->tensors = calloc(out->ntensors ? out->ntensors : 1,
	    sizeof *out->tensors);
	if (!out->tensors) {
		fail(&c, "out of memory");
		goto bad;
	}
	for (i = 0; i < out->ntensors; i++) {
		if (read_tensor_info(&c, out, &out->tensors[i]) != 0)
			goto bad;
		for (j = 0; j < i; j++)
			if (str_eq(out->tensors[j].name, out->tensors[i].name)) {
				fail(&c, "tensor '%.*s' appears twice",
				    (int)out->tensors[i].name.n,
				    out->tensors[i].name.s);
				goto bad;
			}
	}
	pad = (out->alignment - c.at % out->alignment) % out->alignment;
	if (out->ntensors > 0 && !take(&c, pad, "the padding before the data"))
		goto bad;
	out->data_offset = c.at;
	if (place_tensors(&c, out) == 0)
		return 0;
bad:
	gf_free(out);
	return -1;
}

void gf_free(gf_file_t *f)
{
	free(f->kv);
	free(f->tensors);
	memset(f, 0, sizeof *f);
}

const gf_kv_t *gf_find_kv(const gf_file_t *f, const char *key)
{
	uint64_t i;

	for (i = 0; i < f->nkv; i++)
		if (str_is(f->kv[i].key, key))
			return &f->kv[i];
	return NULL;
}

const gf_tensor_t *gf_find_tensor(const gf_file_t *f, const char *name)
{
	uint64_t i;

	for (i = 0; i < f->ntensors; i++)
		if (str_is(f->tensors[i].name, name))
			return &f->tensors[i];
	return NULL;
}

int gf_kv_int(const gf_file_t *f, const char *key, int64_t *v)
{
	const gf_kv_t *kv = gf_find_kv(f, key);
	uint64_t u;

	if (!kv || kv->type == GF_F32 || kv->type == GF_F64 ||
	    kv->type == GF_STR || kv->type == GF_ARR)
		return -1;
	u = le(kv->val, scalar_bytes[kv->type]);
	switch (kv->type) {
	case GF_I8: *v = (int8_t)u; return 0;
	case GF_I16: *v = (int16_t)u; return 0;
	case GF_I32: *v = (int32_t)u; return 0;
	case GF_I64: *v = (int64_t)u; return 0;
	default:
		if (u > (uint64_t)INT64_MAX)
			return -1;
		*v = (int64_t)u;
		return 0;
	}
}

int gf_kv_float(const gf_file_t *f, const char *key, double *v)
{
	const gf_kv_t *kv = gf_find_kv(f, key);
	uint64_t u;
	float s;

	if (!kv || (kv->type != GF_F32 && kv->type != GF_F64))
		return -1;
	u = le(kv->val, scalar_bytes[kv->type]);
	if (kv->type == GF_F64) {
		memcpy(v, &u, 8);
	} else {
		uint32_t w = (uint32_t)u;

		memcpy(&s, &w, 4);
		*v = s;
	}
	return 0;
}

int gf_kv_str(const gf_file_t *f, const char *key, gf_str_t *v)
{
	const gf_kv_t *kv = gf_find_kv(f, key);

	if (!kv || kv->type != GF_STR)
		return -1;
	v->n = le(kv->val, 8);
	v->s = (const char *)kv->val + 8;
	return 0;
}

int gf_kv_arr_str(const gf_kv_t *kv, uint64_t i, gf_str_t *v)
{
	const uint8_t *q;
	uint64_t k;

	if (kv->type != GF_ARR || kv->atype != GF_STR || i >= kv->n)
		return -1;
	/* The reader checked every length when it read the array. */
	for (q = kv->val, k = 0; k < i; k++)
		q += 8 + le(q, 8);
	v->n = le(q, 8);
	v->s = (const char *)q + 8;
	return 0;
}

/* ---- writing ---- */

typedef struct {
	char *key;
	uint32_t type, atype;
	uint64_t n;
	uint8_t *val;           /* the value's bytes as written */
	size_t bytes;
} wkv_t;

typedef struct {
	char *name;
	uint32_t type, ndims;
	uint64_t dims[GF_MAX_DIMS];
	const void *data;
	uint64_t bytes;
} wtensor_t;

struct gf_writer {
	uint32_t alignment;
	wkv_t *kv;
	size_t nkv, capkv;
	wtensor_t *t;
	size_t nt, capt;
};

gf_writer_t *gf_writer_new(uint32_t alignment)
{
	gf_writer_t *w;

	if (alignment == 0 || (alignment & (alignment - 1)) != 0)
		return NULL;
	w = calloc(1, sizeof *w);
	if (!w)
		return NULL;
	w->alignment = alignment;
	if (alignment != GF_ALIGN &&
	    gf_add_kv(w, "general.alignment", GF_U32, &alignment) != 0) {
		gf_writer_free(w);
		return NULL;
	}
	return w;
}

void gf_writer_free(gf_writer_t *w)
{
	size_t i;

	if (!w)
		return;
	for (i = 0; i < w->nkv; i++) {
		free(w->kv[i].key);
		free(w->kv[i].val);
	}
	for (i = 0; i < w->nt; i++)
		free(w->t[i].name);
	free(w->kv);
	free(w->t);
	free(w);
}

/* Appends N bytes to the growing buffer *B of *LEN bytes. */
static int put(uint8_t **b, size_t *len, const void *src, size_t n)
{
	uint8_t *q = realloc(*b, *len + n + 1);

	if (!q)
		return -1;
	if (n)
		memcpy(q + *len, src, n);
	*b = q;
	*len += n;
	return 0;
}

static int put_le(uint8_t **b, size_t *len, uint64_t v, int k)
{
	uint8_t q[8];
	int i;

	for (i = 0; i < k; i++)
		q[i] = (uint8_t)(v >> (8 * i));
	return put(b, len, q, (size_t)k);
}

static int put_str(uint8_t **b, size_t *len, const char *s)
{
	size_t n = strlen(s);

	return put_le(b, len, n, 8) || put(b, len, s, n);
}

/* The bytes of one scalar of TYPE at VAL, little-endian. */
static int put_scalar(uint8_t **b, size_t *len, uint32_t type,
    const void *val)
{
	uint64_t v = 0;
	int k = scalar_bytes[type];

	memcpy(&v, val, (size_t)k);     /* this host is little-endian */
	return put_le(b, len, v, k);
}

static wkv_t *new_kv(gf_writer_t *w, const char *key, uint32_t type)
{
	wkv_t *kv;

	if (w->nkv == w->capkv) {
		size_t cap = w->capkv ? 2 * w->capkv : 16;
		wkv_t *q = realloc(w->kv, cap * sizeof *q);

		if (!q)
			return NULL;
		w->kv = q;
		w->capkv = cap;
	}
	kv = &w->kv[w->nkv];
	memset(kv, 0, sizeof *kv);
	kv->key = strdup(key);
	kv->type = type;
	if (!kv->key)
		return NULL;
	w->nkv++;
	return kv;
}

int gf_add_kv(gf_writer_t *w, const char *key, uint32_t type,
    const void *val)
{
	wkv_t *kv;

	if (type >= GF_NVTYPES || type == GF_ARR)
		return -1;
	if (type == GF_STR)
		return gf_add_kv_str(w, key, val);
	kv = new_kv(w, key, type);
	return kv ? put_scalar(&kv->val, &kv->bytes, type, val) : -1;
}

int gf_add_kv_str(gf_writer_t *w, const char *key, const char *s)
{
	wkv_t *kv = new_kv(w, key, GF_STR);

	return kv ? put_str(&kv->val, &kv->bytes, s) : -1;
}

int gf_add_kv_arr(gf_writer_t *w, const char *key, uint32_t atype,
    const void *val, uint64_t n)
{
	wkv_t *kv;
	uint64_t i;

	if (atype >= GF_NVTYPES || atype == GF_ARR)
		return -1;
	kv = new_kv(w, key, GF_ARR);
	if (!kv)
		return -1;
	kv->atype = atype;
	kv->n = n;
	for (i = 0; i < n; i++)
		if (atype == GF_STR ? put_str(&kv->val, &kv->bytes,
		    ((const char *const *)val)[i]) : put_scalar(&kv->val,
		    &kv->bytes, atype, (const uint8_t *)val +
		    i * (uint64_t)scalar_bytes[atype]))
			return -1;
	return 0;
}

int gf_add_tensor(gf_writer_t *w, const char *name, uint32_t type,
    uint32_t ndims, const uint64_t *dims, const void *data, uint64_t bytes)
{
	wtensor_t *t;
	uint32_t d;

	if (ndims < 1 || ndims > GF_MAX_DIMS || strlen(name) > GF_MAX_NAME)
		return -1;
	for (d = 0; d < ndims; d++)
		if (dims[d] == 0)
			return -1;
	if (tensor_bytes(type, ndims, dims) != bytes || bytes == 0)
		return -1;
	if (w->nt == w->capt) {
		size_t cap = w->capt ? 2 * w->capt : 16;
		wtensor_t *q = realloc(w->t, cap * sizeof *q);

		if (!q)
			return -1;
		w->t = q;
		w->capt = cap;
	}
	t = &w->t[w->nt];
	memset(t, 0, sizeof *t);
	t->name = strdup(name);
	if (!t->name)
		return -1;
	t->type = type;
	t->ndims = ndims;
	memcpy(t->dims, dims, ndims * sizeof *dims);
	t->data = data;
	t->bytes = bytes;
	w->nt++;
	return 0;
}

static uint64_t pad_to(uint64_t x, uint32_t a)
{
	return (x + a - 1) / a * a;
}

int gf_write(gf_writer_t *w, FILE *f, char *err, size_t errlen)
{
	static const uint8_t zeros[64];
	uint8_t *h = NULL;
	size_t len = 0, i;
	uint64_t off = 0, at;
	uint32_t d;
	int rc = 0;

	rc |= put(&h, &len, "GGUF", 4);
	rc |= put_le(&h, &len, 3, 4);
	rc |= put_le(&h, &len, w->nt, 8);
	rc |= put_le(&h, &len, w->nkv, 8);
	for (i = 0; i < w->nkv && !rc; i++) {
		rc |= put_str(&h, &len, w->kv[i].key);
		rc |= put_le(&h, &len, w->kv[i].type, 4);
		if (w->kv[i].type == GF_ARR) {
			rc |= put_le(&h, &len, w->kv[i].atype, 4);
			rc |= put_le(&h, &len, w->kv[i].n, 8);
		}
		rc |= put(&h, &len, w->kv[i].val, w->kv[i].bytes);
	}
	for (i = 0; i < w->nt && !rc; i++) {
		rc |= put_str(&h, &len, w->t[i].name);
		rc |= put_le(&h, &len, w->t[i].ndims, 4);
		for (d = 0; d < w->t[i].ndims; d++)
			rc |= put_le(&h, &len, w->t[i].dims[d], 8);
		rc |= put_le(&h, &len, w->t[i].type, 4);
		rc |= put_le(&h, &len, off, 8);
		off = pad_to(off + w->t[i].bytes, w->alignment);
	}
	if (rc) {
		free(h);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	/* The header, padding, then each tensor padded to the alignment. */
	at = len;
	if (fwrite(h, 1, len, f) != len)
		rc = -1;
	free(h);
	for (i = 0; i <= w->nt && !rc && w->nt > 0; i++) {
		uint64_t to = pad_to(at, w->alignment);

		while (!rc && at < to) {
			size_t k = (size_t)(to - at < sizeof zeros ? to - at :
			    sizeof zeros);

			rc = fwrite(zeros, 1, k, f) == k ? 0 : -1;
			at += k;
		}
		if (i < w->nt && !rc) {
			rc = fwrite(w->t[i].data, 1, w->t[i].bytes, f) ==
			    w->t[i].bytes ? 0 : -1;
			at += w->t[i].bytes;
		}
	}
	if (rc)
		snprintf(err, errlen, "write failed");
	return rc;
}
