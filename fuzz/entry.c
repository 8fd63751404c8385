/*
 * Signed entries and bundles (proto/entry.h).
 *
 * Each input is read as a signed entry and as a bundle, as the remote
 * tier and `kspec bundle import` read them, with the fuzzers' public key
 * (the corpus's entries verify).  Checks: an entry that opens lies inside
 * what it was opened from, its lengths add up, and sealing its parts
 * again with the fuzzers' secret key gives it back byte for byte (Ed25519
 * signatures are deterministic); a bundle that walks hands out entries
 * that tile it exactly, and begin/add of them gives it back.  Then the
 * input itself is sealed, cut into metadata and bytes, and must open to
 * the same parts; with any one byte changed it must not verify.
 */
#include <string.h>

#include "fuzz.h"

/* Sealed inputs are kept small: a seal and two checks per input. */
#define SEAL_MAX 4096

/* An entry that opened is what sealing its parts gives. */
static void check_opened(const uint8_t *v, size_t len, const ks_entry_t *e)
{
	ks_buf_t again;

	KS_FUZZ_CHECK(e->signer == 0);
	KS_FUZZ_CHECK((const uint8_t *)e->meta == v + KS_ENTRY_HEAD);
	KS_FUZZ_CHECK(e->bytes == v + KS_ENTRY_HEAD + e->meta_len);
	KS_FUZZ_CHECK(KS_ENTRY_HEAD + e->meta_len + e->len +
	    KS_FLEET_SIG_BYTES == len);
	ks_buf_init(&again);
	KS_FUZZ_CHECK(ks_entry_seal(ks_fuzz_fleet_secret(), &e->key, e->meta,
	    e->meta_len, e->bytes, e->len, &again) == KS_OK);
	KS_FUZZ_CHECK(again.len == len && memcmp(again.data, v, len) == 0);
	ks_buf_close(&again);
}

static void open_entry(const uint8_t *v, size_t len)
{
	ks_entry_t e;
	char err[512];

	if (ks_entry_open(ks_fuzz_fleet_public(), 1, v, len, &e, err,
	    sizeof err) == KS_OK)
		check_opened(v, len, &e);
	else
		KS_FUZZ_CHECK(err[0] != '\0');
}

typedef struct {
	const uint8_t *base;
	size_t at;               /* where the next entry's length is */
	ks_buf_t again;          /* the bundle made anew */
} walk_t;

static int each(void *ctx, uint32_t index, const void *p, size_t len)
{
	walk_t *w = ctx;
	ks_buf_t one = { .data = (char *)p, .len = len, .cap = len };

	KS_FUZZ_CHECK((const uint8_t *)p == w->base + w->at + 8);
	w->at += 8 + len;
	KS_FUZZ_CHECK(ks_bundle_add(&w->again, &one) == KS_OK);
	open_entry(p, len);
	return 0;
}

static void walk_bundle(const uint8_t *data, size_t size)
{
	walk_t w = { .base = data, .at = 12 };
	char err[512];
	uint32_t count = 0;

	ks_buf_init(&w.again);
	if (size >= 12)
		ks_bundle_begin(&w.again, (uint32_t)data[8] << 24 |
		    (uint32_t)data[9] << 16 | (uint32_t)data[10] << 8 |
		    data[11]);
	if (ks_bundle_each(data, size, each, &w, &count, err, sizeof err) ==
	    KS_OK) {
		KS_FUZZ_CHECK(w.at == size);
		KS_FUZZ_CHECK(w.again.len == size &&
		    memcmp(w.again.data, data, size) == 0);
	} else {
		KS_FUZZ_CHECK(err[0] != '\0');
	}
	ks_buf_close(&w.again);
}

/* The input sealed as an entry: its first byte says where the metadata
 * ends and the bytes begin. */
static void seal_input(const uint8_t *data, size_t size)
{
	size_t ml = size > 1 ? data[0] % size : 0;
	ks_buf_t v;
	ks_entry_t e;
	ks_hash_t key;
	char err[512];
	size_t flip;

	ks_hash(data, size, &key);
	ks_buf_init(&v);
	KS_FUZZ_CHECK(ks_entry_seal(ks_fuzz_fleet_secret(), &key,
	    (const char *)data, ml, data + ml, size - ml, &v) == KS_OK);
	KS_FUZZ_CHECK(ks_entry_open(ks_fuzz_fleet_public(), 1, v.data, v.len,
	    &e, err, sizeof err) == KS_OK);
	KS_FUZZ_CHECK(memcmp(e.key.b, key.b, KS_HASH_BYTES) == 0);
	KS_FUZZ_CHECK(e.meta_len == ml && memcmp(e.meta, data, ml) == 0);
	KS_FUZZ_CHECK(e.len == size - ml &&
	    memcmp(e.bytes, data + ml, size - ml) == 0);
	flip = size ? (data[size - 1] * 131u + size) % v.len : 0;
	v.data[flip] ^= 0x01;
	KS_FUZZ_CHECK(ks_entry_open(ks_fuzz_fleet_public(), 1, v.data, v.len,
	    &e, err, sizeof err) != KS_OK);
	ks_buf_close(&v);
}

KS_FUZZ_TARGET(entry)
{
	open_entry(data, size);
	walk_bundle(data, size);
	if (size <= SEAL_MAX)
		seal_input(data, size);
	return 0;
}
