/*
 * Private to server/: request normalization and request keys (keys.c).
 */
#ifndef KS_SERVER_KEYS_H
#define KS_SERVER_KEYS_H

#include "../base/base.h"
#include "../jit/jit.h"
#include "../proto/proto.h"
#include "../specialize/specialize.h"
#include "../store/store.h"

/* The normalized form of a get request, everything its key is made of. */
typedef struct {
	ks_spec_t spec;
	const ks_backend_t *backend;
	const char *target;      /* resolved; owned by the identity cache */
	const char *requested;   /* target as the client wrote it; likewise */
	const char *identity;    /* compiler identity; identity cache */
	int kernel_index;        /* of spec.def in the library (stats) */
	char format[KS_MAX_NAME + 1];
	ks_hash_t key;
	/* Not in the key: the deployment a get declared, or "" (a miss of
	 * a ready deployment's client is a late compile, op_get.c). */
	char deployment[KS_MAX_NAME + 1];
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

/* A requested target that the compilers refused, with their reason. */
typedef struct ks_refusal {
	const ks_backend_t *backend;
	char requested[KS_MAX_NAME + 1];
	int code;
	char *message;
	struct ks_refusal *next;
} ks_refusal_t;

/* What the probe (exec.h) says of one backend. */
typedef struct {
	const ks_backend_t *backend;
	int available;
	char *reason;            /* when not available */
	char (*listed)[KS_MAX_NAME + 1];  /* explicit targets, oldest first */
	int nlisted;
	const ks_ident_t *auto_id;       /* "auto", when it resolves */
} ks_binfo_t;

#define KS_KEYS_MAX_KERNELS 16
#define KS_KEYS_MAX_BACKENDS 8

/* What keys are made of besides the request: kernel fingerprints (in
 * library order) and what the compilers are (targets and identities,
 * from the probe). */
typedef struct {
	ks_hash_t fingerprints[KS_KEYS_MAX_KERNELS];
	int nkernels;
	ks_ident_t *idents;
	ks_ident_t *retired;     /* of a probe replaced by another */
	ks_refusal_t *refused;
	ks_binfo_t backends[KS_KEYS_MAX_BACKENDS];
	int nbackends;
} ks_keys_t;

/* Computes the fingerprints of every kernel of the library.  No backend
 * is known until ks_keys_load_probe. */
int ks_keys_init(ks_keys_t *keys);
/* ks_keys_init without the fingerprints (they take a large part of a
 * second): ks_keys_set_fingerprints gives them, from
 * ks_keys_fingerprints_compute (any thread: it fills OUT, at most MAX, in
 * library order) or from the store's saved probe. */
int ks_keys_init_unprinted(ks_keys_t *keys);
int ks_keys_fingerprints_compute(ks_hash_t *out, int max);
void ks_keys_set_fingerprints(ks_keys_t *keys, const ks_hash_t *fps);
void ks_keys_close(ks_keys_t *keys);
/* Loads the probe's JSON (exec.h): every backend, its targets and their
 * identities.  KS_E_PROTO with a message for a probe that is not one. */
int ks_keys_load_probe(ks_keys_t *keys, const char *json, char *err,
    size_t errlen);
/* Forgets what the probe said, before another is loaded: no target
 * resolves until then.  The identity cache's entries are retired, not
 * freed (their strings are borrowed for the daemon's lifetime). */
void ks_keys_forget_probe(ks_keys_t *keys);
/* What the probe said of BE, or NULL when it said nothing. */
const ks_binfo_t *ks_keys_backend(const ks_keys_t *keys,
    const ks_backend_t *be);
/* Resolves REQUESTED for BE from the probe: KS_OK and *out, or the error
 * that refuses it with a message. */
int ks_keys_resolve(const ks_keys_t *keys, const ks_backend_t *be,
    const char *requested, const ks_ident_t **out, char *err,
    size_t errlen);

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

/*
 * Whether this daemon can still ask for stored entry E (its row's
 * columns): the key its spec gets now, under every identity the backend
 * has for its target, is compared with its key.
 *   KS_KEYS_CURRENT    one of them is E's key;
 *   KS_KEYS_STALE      no request can get E's key again; *WHY is "kernel"
 *                      (not in the library), "spec" (the library refuses
 *                      its spec), "compiler" (the backend's identity for
 *                      its target is another now) or "fingerprint" (the
 *                      compiler is the same: the kernel's definition, or
 *                      the code generation, changed);
 *   KS_KEYS_UNCHECKED  its backend is not available now ("backend"), or
 *                      does not offer its target now ("target"): nothing
 *                      can be said, and E must be kept.
 */
enum { KS_KEYS_CURRENT, KS_KEYS_STALE, KS_KEYS_UNCHECKED };
int ks_keys_check_entry(const ks_keys_t *keys, const ks_store_entry_t *e,
    const char **why);
/* ks_keys_check_entry that also fills OUT (when not NULL) with the
 * normalized request whose key is E's, for KS_KEYS_CURRENT: what a get of
 * E would compile now (the key audit recompiles it).  OUT's strings are
 * the identity cache's. */
int ks_keys_entry_get(const ks_keys_t *keys, const ks_store_entry_t *e,
    ks_get_t *out, const char **why);

/* Adds (backend, requested target) -> (resolved target, compiler
 * identity) to the identity cache; the key prefix is hashed here.  Used by
 * the probe's loader and by tests that need another compiler identity. */
int ks_keys_ident_add(ks_keys_t *keys, const ks_backend_t *be,
    const char *requested, const char *target, const char *identity,
    ks_ident_t **out);

/* Writes the canonical get-spec of G (target as requested) as JSON: the
 * form `misses` records and a manifest replays. */
int ks_get_spec_json(const ks_get_t *g, ks_buf_t *out);
/* Appends ,"wdtype":"NAME" of G when its weight dtype differs from its
 * dtype, else nothing (the canonical form omits a wdtype equal to dtype). */
void ks_get_wdtype_json(const ks_get_t *g, ks_buf_t *out);
/* Appends G's constant dims as a JSON object ({"M":1,...}) when
 * CONSTANTS, else the names of its dynamic ones as an array. */
int ks_get_dims_json(const ks_get_t *g, int constants, ks_buf_t *out);
/* Appends ,"guard":{...},"dynamic":[...] of G. */
void ks_get_guard_json(const ks_get_t *g, ks_buf_t *out);

#endif
