/*
 * Private to server/: request normalization and request keys (keys.c).
 */
#ifndef KS_SERVER_KEYS_H
#define KS_SERVER_KEYS_H

#include "../base/base.h"
#include "../jit/jit.h"
#include "../proto/proto.h"
#include "../specialize/specialize.h"

/* The normalized form of a get request, everything its key is made of. */
typedef struct {
	ks_spec_t spec;
	const ks_backend_t *backend;
	const char *target;      /* resolved; owned by the identity cache */
	const char *requested;   /* target as the client wrote it; likewise */
	const char *identity;    /* compiler identity; identity cache */
	char format[KS_MAX_NAME + 1];
	ks_hash_t key;
} ks_get_t;

/* (backend, requested target) -> resolved target and compiler identity.
 * Entries are never removed, so their strings can be borrowed for the
 * daemon's lifetime. */
typedef struct ks_ident {
	/* The key's fields that depend only on this entry, absorbed once; a
	 * request copies the state and adds its own fields. */
	ks_hasher_t prefix;
	const ks_backend_t *backend;
	char requested[KS_MAX_NAME + 1];
	char target[KS_MAX_NAME + 1];
	char *identity;
	struct ks_ident *next;
} ks_ident_t;

#define KS_KEYS_MAX_KERNELS 16

/* What keys are made of besides the request: kernel fingerprints (in
 * library order) and the identity cache. */
typedef struct {
	ks_hash_t fingerprints[KS_KEYS_MAX_KERNELS];
	int nkernels;
	ks_ident_t *idents;
} ks_keys_t;

/* Computes the fingerprints of every kernel of the library. */
int ks_keys_init(ks_keys_t *keys);
void ks_keys_close(ks_keys_t *keys);

/* Validates REQ and fills OUT with its normalized form and key.  On error
 * a negative ks error with a one-line message in ERR. */
int ks_keys_normalize(ks_keys_t *keys, const ks_get_req_t *req,
    ks_get_t *out, char *err, size_t errlen);
/* Appends the key's components as a JSON object (for explain). */
int ks_keys_components(const ks_keys_t *keys, const ks_get_t *g,
    ks_buf_t *out);
/* The fingerprint of DEF, or NULL when DEF is not in the library. */
const ks_hash_t *ks_keys_fingerprint(const ks_keys_t *keys,
    const ks_kernel_def_t *def);

/* Adds (backend, requested target) -> (resolved target, compiler
 * identity) to the identity cache; the key prefix is hashed here.  Used by
 * the lookup and by tests that need another compiler identity. */
int ks_keys_ident_add(ks_keys_t *keys, const ks_backend_t *be,
    const char *requested, const char *target, const char *identity,
    ks_ident_t **out);
/* Fills the identity cache for BACKEND's "auto" target. */
int ks_keys_ident_warm(ks_keys_t *keys, const ks_backend_t *backend);

/* Writes the canonical get-spec of G (target as requested) as JSON: the
 * form `misses` records and a manifest replays. */
int ks_get_spec_json(const ks_get_t *g, ks_buf_t *out);
/* Appends ,"guard":{...},"dynamic":[...] of G. */
void ks_get_guard_json(const ks_get_t *g, ks_buf_t *out);

#endif
