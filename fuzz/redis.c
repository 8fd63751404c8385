/*
 * The values of the remote tier in Redis (server/fleetval.h), read as a
 * node reads them under the corpus's request key, at a fixed clock.
 *
 * Each input is read three ways: as an artifact (ks_entry_open, then
 * ks_fleet_entry_binds for the fuzzers' compiler identity), as a failure
 * marker and as a lease.  The signature stops almost every mutation
 * before the metadata is read, so each input is also taken as metadata, as
 * a signer could write it: sealed by the fuzzers' key as an artifact's
 * (with a few bytes) and as a marker's and a lease's (the layout of
 * ks_fleet_value_seal), and read back the same three ways.  Checks: what
 * is accepted is bound to the key, within its lifetime, and says what the
 * daemon then acts on (the artifact's checksum and length, the compile
 * error's message, the lease's expiry); a refusal says why.
 */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <sodium.h>

#include "../server/fleetval.h"
#include "../server/remote.h"
#include "../store/store.h"
#include "fuzz.h"

/* The identity the probe of fuzz.h gives cpu's targets. */
#define IDENTITY "gcc 12 fuzz"
/* An artifact's bytes when the input is its metadata. */
static const uint8_t bytes[] = "\x7f" "ELF fuzz";

/* The metadata of an accepted artifact names what it must. */
static void read_artifact(const void *v, size_t len, const ks_hash_t *key)
{
	char why[512], hex[KS_HASH_HEX];
	const cJSON *n;
	ks_entry_t e;
	ks_hash_t sum, h;
	cJSON *m;

	if (ks_entry_open(ks_fuzz_fleet_public(), 1, v, len, &e, why,
	    sizeof why) != KS_OK) {
		KS_FUZZ_CHECK(why[0] != '\0');
		return;
	}
	if (ks_fleet_entry_binds(&e, key, IDENTITY, &sum, why,
	    sizeof why) != KS_OK) {
		KS_FUZZ_CHECK(why[0] != '\0');
		return;
	}
	KS_FUZZ_CHECK(memcmp(e.key.b, key->b, KS_HASH_BYTES) == 0);
	ks_hash(e.bytes, e.len, &h);
	KS_FUZZ_CHECK(memcmp(h.b, sum.b, KS_HASH_BYTES) == 0);
	m = ks_meta_parse(e.meta, e.meta_len);
	KS_FUZZ_CHECK(m != NULL);
	ks_hash_hex(key, hex);
	KS_FUZZ_CHECK(strcmp(cJSON_GetStringValue(
	    cJSON_GetObjectItemCaseSensitive(m, "key")), hex) == 0);
	ks_hash_hex(&sum, hex);
	KS_FUZZ_CHECK(strcmp(cJSON_GetStringValue(
	    cJSON_GetObjectItemCaseSensitive(m, "artifact")), hex) == 0);
	n = cJSON_GetObjectItemCaseSensitive(m, "bytes");
	KS_FUZZ_CHECK(cJSON_IsNumber(n) && n->valuedouble == (double)e.len);
	cJSON_Delete(m);
}

/* A signed expiry that is in force at KS_FUZZ_NOW_MS for TTL_MS. */
static int in_force(double expires, uint64_t ttl_ms)
{
	return expires + KS_FLEET_SKEW_MS >= KS_FUZZ_NOW_MS &&
	    expires <= KS_FUZZ_NOW_MS + (double)(ttl_ms + KS_FLEET_SKEW_MS);
}

static void read_marker(const char *v, size_t len, const ks_hash_t *key)
{
	char msg[512], why[256];

	memset(msg, 0xff, sizeof msg);
	if (ks_fleet_fail_open(ks_fuzz_fleet_public(), 1, key,
	    KS_FUZZ_NOW_MS, v, len, msg, sizeof msg, why, sizeof why) !=
	    KS_OK) {
		KS_FUZZ_CHECK(why[0] != '\0' && memchr(why, '\0', sizeof why));
		return;
	}
	KS_FUZZ_CHECK(memchr(msg, '\0', sizeof msg) != NULL);
}

static void read_lease(const char *v, size_t len, const ks_hash_t *key)
{
	char why[256];
	double expires;

	if (ks_fleet_lease_open(ks_fuzz_fleet_public(), 1, key,
	    KS_FUZZ_NOW_MS, v, len, &expires, why, sizeof why) != KS_OK) {
		KS_FUZZ_CHECK(why[0] != '\0' && memchr(why, '\0', sizeof why));
		return;
	}
	KS_FUZZ_CHECK(in_force(expires, KS_LEASE_TTL_MS));
	KS_FUZZ_CHECK(memrchr(v, ':', len) != NULL);
}

static void read_all(const uint8_t *v, size_t len, const ks_hash_t *key)
{
	read_artifact(v, len, key);
	read_marker((const char *)v, len, key);
	read_lease((const char *)v, len, key);
}

/* The input as the metadata a signer wrote: sealed, hex for a marker or
 * a lease (":" and a token after it), and read back. */
static void read_as_metadata(const uint8_t *data, size_t size,
    const ks_hash_t *key)
{
	ks_buf_t sealed, v;

	ks_buf_init(&sealed);
	ks_buf_init(&v);
	KS_FUZZ_CHECK(ks_entry_seal(ks_fuzz_fleet_secret(), key,
	    (const char *)data, size, bytes, sizeof bytes - 1, &sealed) ==
	    KS_OK);
	read_artifact(sealed.data, sealed.len, key);
	ks_buf_reset(&sealed);
	KS_FUZZ_CHECK(ks_entry_seal(ks_fuzz_fleet_secret(), key,
	    (const char *)data, size, NULL, 0, &sealed) == KS_OK);
	KS_FUZZ_CHECK(ks_buf_reserve(&v, sealed.len * 2 + 8) == KS_OK);
	sodium_bin2hex(v.data, sealed.len * 2 + 1,
	    (const unsigned char *)sealed.data, sealed.len);
	v.len = sealed.len * 2;
	read_marker(v.data, v.len, key);
	KS_FUZZ_CHECK(ks_buf_puts(&v, ":7") == KS_OK);
	read_lease(v.data, v.len, key);
	ks_buf_close(&sealed);
	ks_buf_close(&v);
}

KS_FUZZ_TARGET(redis)
{
	ks_hash_t key;

	ks_fuzz_value_key(&key);
	read_all(data, size, &key);
	if (size <= KS_ENTRY_MAX_META)
		read_as_metadata(data, size, &key);
	return 0;
}
