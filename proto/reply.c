/*
 * The get reply's schema (reply.def): the field names and the encoder
 * of an artifact's stored metadata, both generated from it.
 */
#include <string.h>

#include "reply.h"

const char *const ks_get_field_name[KS_GF_COUNT] = {
#define KS_GET_FIELD(name, type, presence, part) [KS_GF_##name] = #name,
#include "reply.def"
#undef KS_GET_FIELD
};

/* Whether a SOMETIMES field is written. */
static int present_str(const char *v)
{
	return v && *v;
}

static int put_name(ks_buf_t *out, int *first, const char *name)
{
	int rc = ks_buf_printf(out, "%s\"%s\":", *first ? "" : ",", name);

	*first = 0;
	return rc;
}

static int put_INT(ks_buf_t *out, int *first, const char *name,
    uint64_t v)
{
	return put_name(out, first, name) ||
	    ks_buf_printf(out, "%llu", (unsigned long long)v);
}

static int put_MS(ks_buf_t *out, int *first, const char *name, double v)
{
	return put_name(out, first, name) || ks_buf_printf(out, "%.3f", v);
}

static int put_STR(ks_buf_t *out, int *first, const char *name,
    const char *v)
{
	return put_name(out, first, name) || ks_buf_json_str(out, v ? v : "");
}

static int put_HEX(ks_buf_t *out, int *first, const char *name,
    const char *v)
{
	return put_STR(out, first, name, v);
}

static int put_OBJ(ks_buf_t *out, int *first, const char *name,
    const char *v)
{
	return put_name(out, first, name) || ks_buf_puts(out, v ? v : "{}");
}

static int put_ARR(ks_buf_t *out, int *first, const char *name,
    const char *v)
{
	return put_name(out, first, name) || ks_buf_puts(out, v ? v : "[]");
}

/* A SOMETIMES field of a numeric type is always written. */
#define KS_PUT_ALWAYS(n, type) \
	rc = rc ? rc : put_##type(out, &first, #n, m->n);
#define KS_PUT_SOMETIMES(n, type) \
	rc = rc ? rc : !KS_PRESENT_##type(m->n) ? KS_OK : \
	    put_##type(out, &first, #n, m->n);
#define KS_PRESENT_STR(v) present_str(v)
#define KS_PRESENT_HEX(v) present_str(v)
#define KS_PRESENT_OBJ(v) present_str(v)
#define KS_PRESENT_ARR(v) present_str(v)
#define KS_PUT_ENVELOPE(n, type, presence)
#define KS_PUT_META(n, type, presence) KS_PUT_##presence(n, type)

int ks_meta_encode(ks_buf_t *out, const ks_meta_t *m)
{
	int first = 1, rc = KS_OK;

#define KS_GET_FIELD(name, type, presence, part) \
	KS_PUT_##part(name, type, presence)
#include "reply.def"
#undef KS_GET_FIELD
	return rc ? KS_E_NOMEM : KS_OK;
}
