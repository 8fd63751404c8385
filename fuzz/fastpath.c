/*
 * The get fast path (server/fastpath.h) against the full parse.
 *
 * The input is two headers, A and B, split at its first NUL byte (no
 * request holds one; B is A again when there is none).  A goes the
 * daemon's way (server/dispatch.c, op_get.c): scan, find, and on a miss
 * the full parse, normalization and learning; then B is scanned and
 * looked up.  Checks: a template learned is found again by A's own scan;
 * and when B's lookup hits, B's full parse agrees with what the fast path
 * answers in its place: a get that normalizes, with the id B's scan read,
 * the same return:"meta", deployment and key (fastpath.h's promise).
 */
#include <stdlib.h>
#include <string.h>

#include "../server/fastpath.h"
#include "fuzz.h"

int ks_fuzz_fastpath_plant;

static ks_fast_t *fast;
static ks_fast_scan_t scan;

/* Empties every slot learned, so that each input starts afresh (faster
 * than ks_fast_close's clearing of the whole table). */
static void forget(void)
{
	size_t i;

	for (i = 0; i < KS_FAST_SLOTS; i++) {
		if (!fast->slots[i].tmpl)
			continue;
		free(fast->slots[i].tmpl);
		memset(&fast->slots[i], 0, sizeof fast->slots[i]);
	}
}

/* A's way through the daemon; 1 when the fast path learned it. */
static int learn(ks_keys_t *keys, const char *a, size_t alen)
{
	uint64_t before = fast->learned;
	ks_request_t r;
	char err[512];
	ks_get_t g;

	ks_fast_scan(fast, a, alen, &scan);
	if (ks_fast_find(fast, &scan))
		return 0;
	if (ks_request_parse(a, alen, &r, err, sizeof err) == KS_OK &&
	    r.op == KS_OP_GET &&
	    ks_keys_normalize(keys, &r.get, &g, err, sizeof err) == KS_OK)
		ks_fast_learn(fast, &scan, r.has_id, r.id, r.get.meta_only, &g);
	ks_request_close(&r);
	return fast->learned != before;
}

/* B hit entry E: the full parse must give what E answers. */
static void check_hit(ks_keys_t *keys, const char *b, size_t blen,
    const ks_fast_entry_t *e)
{
	ks_request_t r;
	char err[512];
	ks_get_t g;

	KS_FUZZ_CHECK(ks_request_parse(b, blen, &r, err, sizeof err) ==
	    KS_OK);
	KS_FUZZ_CHECK(r.op == KS_OP_GET);
	KS_FUZZ_CHECK(r.has_id == scan.has_id &&
	    (!r.has_id || r.id == scan.id));
	KS_FUZZ_CHECK(r.get.meta_only == e->meta_only);
	KS_FUZZ_CHECK(ks_keys_normalize(keys, &r.get, &g, err, sizeof err) ==
	    KS_OK);
	KS_FUZZ_CHECK(memcmp(g.key.b, e->g.key.b, KS_HASH_BYTES) == 0);
	KS_FUZZ_CHECK(strcmp(g.deployment, e->g.deployment) == 0);
	KS_FUZZ_CHECK(g.requested == e->g.requested);
	ks_request_close(&r);
}

KS_FUZZ_TARGET(fastpath)
{
	ks_keys_t *keys = ks_fuzz_keys();
	const char *a = (const char *)data, *b = a, *nul;
	size_t alen = size, blen = size;
	const ks_fast_entry_t *e;

	if (!fast) {
		fast = malloc(sizeof *fast);
		KS_FUZZ_CHECK(fast != NULL);
		ks_fast_init(fast, 1);
	}
	fast->planted_prefix = ks_fuzz_fastpath_plant;
	if ((nul = memchr(a, '\0', size)) != NULL) {
		alen = (size_t)(nul - a);
		b = nul + 1;
		blen = size - alen - 1;
	}
	if (learn(keys, a, alen))
		KS_FUZZ_CHECK(ks_fast_find(fast, &scan) != NULL);
	ks_fast_scan(fast, b, blen, &scan);
	e = ks_fast_find(fast, &scan);
	if (e)
		check_hit(keys, b, blen, e);
	forget();
	return 0;
}
