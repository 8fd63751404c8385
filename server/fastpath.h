/*
 * Private to server/: the request-bytes fast path of get.
 *
 * An inference server asks for the same kernels, byte for byte, again and
 * again; only the id changes.  The fast path maps the exact header bytes
 * with a canonically written top-level id taken out (the template) to the
 * normalized get the full parse made of them, so a repeated get skips the
 * JSON parse and the key's hash.  What is cached is the key and the
 * normalized request, never a reply and never a state-dependent outcome:
 * whether the artifact is cached, the daemon busy or stopping is decided
 * afresh for every request.  Only a get that parsed and normalized without
 * error is learned, and only when the full parse found the same id as the
 * template's scan (so an id the scan does not see, "i\u0064" say, is never
 * taken out).  Bounded: KS_FAST_SLOTS entries of at most
 * KS_FAST_MAX_TEMPLATE bytes, in sets of KS_FAST_WAYS chosen by the
 * template's hash (a new template takes an empty slot of its set, else the
 * one used least recently, so two templates that share a set do not evict
 * each other at every request); a lookup that misses costs one scan of
 * the header and one hash, so no stream of requests makes a get cost more
 * than the full parse plus that scan, the hash and learning the template
 * (about 5% of the parse, bench/instr).
 */
#ifndef KS_SERVER_FASTPATH_H
#define KS_SERVER_FASTPATH_H

#include <stddef.h>
#include <stdint.h>

#include "keys.h"

#define KS_FAST_SLOTS 1024
#define KS_FAST_WAYS 2
#define KS_FAST_MAX_TEMPLATE 2048

typedef struct {
	uint64_t hash;
	char *tmpl;              /* malloc'd, NULL: empty slot */
	size_t len;
	int has_id;
	int meta_only;
	uint64_t used;           /* the clock at its last hit or learn */
	ks_get_t g;
} ks_fast_entry_t;

/* The scan of one header: where its id is, and its template. */
typedef struct {
	int usable;              /* 0: the fast path does not apply */
	int has_id;
	uint64_t id;
	uint64_t hash;           /* of the template */
	size_t len;              /* template length */
	size_t id_at;            /* where the id was taken out (or len) */
	const char *hdr;         /* the header scanned, for learning */
	size_t hdr_len;
	char tmpl[KS_FAST_MAX_TEMPLATE];
} ks_fast_scan_t;

typedef struct {
	int enabled;
	/* A planted bug for the equivalence test's self-check, read only by
	 * the test build (-DKS_TEST_PLANT, tests/kspecd-plant, from
	 * KSPEC_TEST_FAST_PATH_BUG=prefix): templates end at the id, so
	 * headers that differ after it collide. */
	int planted_prefix;
	ks_fast_entry_t slots[KS_FAST_SLOTS];
	uint64_t clock;
	uint64_t hits, learned, replaced;
} ks_fast_t;

void ks_fast_init(ks_fast_t *f, int enabled);
void ks_fast_close(ks_fast_t *f);
/* Scans header HDR (LEN bytes) into S, which refers to HDR until it is
 * learned or dropped.  Cheap: a search for "id", a copy and one hash. */
void ks_fast_scan(const ks_fast_t *f, const char *hdr, size_t len,
    ks_fast_scan_t *s);
/* The entry of S's template, or NULL. */
const ks_fast_entry_t *ks_fast_find(ks_fast_t *f, const ks_fast_scan_t *s);
/* Learns S's template -> G, after the full parse of the same header found
 * (HAS_ID, ID) and META_ONLY; nothing happens unless the parse and the
 * scan agree on the id. */
void ks_fast_learn(ks_fast_t *f, const ks_fast_scan_t *s, int has_id,
    uint64_t id, int meta_only, const ks_get_t *g);

#endif
