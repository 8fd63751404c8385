/*
 * The get reply's fields (proto/reply.def) as C: their names, an index
 * per field, and the encoder of an artifact's stored metadata.
 */
#ifndef KS_PROTO_REPLY_H
#define KS_PROTO_REPLY_H

#include <stdint.h>

#include "../base/base.h"

/* KS_GF_key, KS_GF_artifact, ...: a field's index in reply.def. */
typedef enum {
#define KS_GET_FIELD(name, type, presence, part) KS_GF_##name,
#include "reply.def"
#undef KS_GET_FIELD
	KS_GF_COUNT
} ks_get_field_t;

/* The field's name on the wire: ks_get_field_name[KS_GF_kernel] is
 * "kernel".  A reader names a field only this way, so that a field the
 * schema lacks does not compile. */
extern const char *const ks_get_field_name[KS_GF_COUNT];

/* A member of ks_meta_t per META field, by its type. */
#define KS_GET_MEMBER_ENVELOPE(n, type)
#define KS_GET_MEMBER_META(n, type) KS_GET_MEMBER_##type(n)
#define KS_GET_MEMBER_INT(n)  uint64_t n;
#define KS_GET_MEMBER_MS(n)   double n;
#define KS_GET_MEMBER_STR(n)  const char *n;
#define KS_GET_MEMBER_HEX(n)  const char *n;
#define KS_GET_MEMBER_OBJ(n)  const char *n;
#define KS_GET_MEMBER_ARR(n)  const char *n;

/*
 * An artifact's stored metadata: a member per META field of reply.def.
 * Strings are borrowed; a SOMETIMES field that is NULL or "" is left
 * out; OBJ and ARR members are JSON text, written as they are.
 */
typedef struct {
#define KS_GET_FIELD(name, type, presence, part) \
	KS_GET_MEMBER_##part(name, type)
#include "reply.def"
#undef KS_GET_FIELD
} ks_meta_t;

/*
 * Appends M's fields in reply.def's order to OUT as the body of a JSON
 * object without its braces (the form an artifact stores, which
 * ks_reply_artifact sends after the envelope).  KS_OK or KS_E_NOMEM.
 */
int ks_meta_encode(ks_buf_t *out, const ks_meta_t *m);

#endif
