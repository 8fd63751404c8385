/*
 * base: hashing, BLAKE2b-256 from libsodium.  Kept apart from base.c so
 * that programs which hash nothing (the GPU check) build without
 * libsodium.
 */
#include "base.h"

#include <string.h>

#include <sodium.h>

_Static_assert(sizeof(ks_hasher_t) >= sizeof(crypto_generichash_state),
    "ks_hasher_t too small for crypto_generichash_state");
_Static_assert(KS_HASH_BYTES >= crypto_generichash_BYTES_MIN &&
    KS_HASH_BYTES <= crypto_generichash_BYTES_MAX, "hash size");

int ks_base_init(void)
{
	return sodium_init() < 0 ? KS_E_INTERNAL : KS_OK;
}

void ks_hash(const void *p, size_t n, ks_hash_t *out)
{
	crypto_generichash(out->b, KS_HASH_BYTES, p, n, NULL, 0);
}

void ks_hasher_init(ks_hasher_t *h)
{
	crypto_generichash_init((crypto_generichash_state *)h->opaque, NULL, 0,
	    KS_HASH_BYTES);
}

void ks_hasher_update(ks_hasher_t *h, const void *p, size_t n)
{
	crypto_generichash_update((crypto_generichash_state *)h->opaque, p, n);
}

static void put_len(ks_hasher_t *h, size_t n)
{
	uint8_t le[8];
	int i;

	for (i = 0; i < 8; i++)
		le[i] = (uint8_t)((uint64_t)n >> (8 * i));
	ks_hasher_update(h, le, sizeof le);
}

void ks_hasher_field(ks_hasher_t *h, const char *name, const char *value)
{
	size_t nn = strlen(name), nv = strlen(value);

	put_len(h, nn);
	ks_hasher_update(h, name, nn);
	put_len(h, nv);
	ks_hasher_update(h, value, nv);
}

void ks_hasher_final(ks_hasher_t *h, ks_hash_t *out)
{
	crypto_generichash_final((crypto_generichash_state *)h->opaque, out->b,
	    KS_HASH_BYTES);
}

void ks_hash_hex(const ks_hash_t *h, char out[KS_HASH_HEX])
{
	sodium_bin2hex(out, KS_HASH_HEX, h->b, KS_HASH_BYTES);
}

int ks_hash_from_hex(const char *s, ks_hash_t *out)
{
	size_t n = 0;
	const char *end = NULL;

	if (strlen(s) != 2 * KS_HASH_BYTES)
		return KS_E_INVAL;
	if (sodium_hex2bin(out->b, KS_HASH_BYTES, s, strlen(s), NULL, &n,
	    &end) != 0 || n != KS_HASH_BYTES || *end != '\0')
		return KS_E_INVAL;
	return KS_OK;
}

int ks_hash_eq(const ks_hash_t *a, const ks_hash_t *b)
{
	return memcmp(a->b, b->b, KS_HASH_BYTES) == 0;
}

