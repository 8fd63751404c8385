/*
 * Signed entries and bundles (proto/entry.h).
 *
 * Each input is read as a signed entry and as a bundle, as the remote
 * tier and `kspec bundle import` read them, with the fuzzers' public key
 * (the corpus's entries verify).  Checks: an entry that opens lies inside
 * what it was opened from, its lengths add up, and sealing its parts
 * again with the fuzzers' secret key gives it back byte for byte (Ed25519
 * signatures are deterministic); a bundle that opens hands out entries
 * that tile it exactly, and begin/add of them gives it back.  Then the
 * input itself is sealed, cut into metadata and bytes, and must open to
 * the same parts; with any one byte changed it must not verify.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

/* The input as a bundle file (a memfd), read as an import reads one:
 * opened (every length walked), then each entry peeked and taken. */
static void walk_bundle(const uint8_t *data, size_t size)
{
	ks_bundle_file_t f;
	ks_buf_t again, one;
	char err[512];
	uint64_t len, at = 12;
	int fd = memfd_create("bundle", MFD_CLOEXEC);

	KS_FUZZ_CHECK(fd >= 0);
	KS_FUZZ_CHECK(size == 0 || write(fd, data, size) == (ssize_t)size);
	ks_buf_init(&again);
	err[0] = '\0';
	if (ks_bundle_file_open(&f, fd, size, err, sizeof err) == KS_OK) {
		ks_bundle_begin(&again, f.count);
		while (f.next < f.count) {
			KS_FUZZ_CHECK(ks_bundle_file_peek(&f, &len, err,
			    sizeof err) == KS_OK);
			/* The entries tile the file, each after its length. */
			KS_FUZZ_CHECK(at + 8 + len <= size);
			one.data = malloc(len ? len : 1);
			one.len = one.cap = len;
			KS_FUZZ_CHECK(one.data != NULL);
			KS_FUZZ_CHECK(ks_bundle_file_take(&f, one.data, len, err,
			    sizeof err) == KS_OK);
			KS_FUZZ_CHECK(memcmp(one.data, data + at + 8, len) == 0);
			at += 8 + len;
			KS_FUZZ_CHECK(ks_bundle_add(&again, &one) == KS_OK);
			open_entry((const uint8_t *)one.data, len);
			free(one.data);
		}
		KS_FUZZ_CHECK(at == size);
		KS_FUZZ_CHECK(again.len == size &&
		    memcmp(again.data, data, size) == 0);
	} else {
		KS_FUZZ_CHECK(err[0] != '\0');
	}
	ks_buf_close(&again);
	close(fd);
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
