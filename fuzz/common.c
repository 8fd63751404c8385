/*
 * What the fuzz targets share (fuzz.h): the keys of a daemon with a fixed
 * probe and the fleet key pair.  Made on first use (the test suite calls
 * the targets as they are), or before the first run (libFuzzer calls
 * ks_fuzz_init: the kernels' fingerprints take seconds under its
 * instrumentation).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "fuzz.h"

_Noreturn void ks_fuzz_fail(const char *what, const char *file, int line)
{
	fprintf(stderr, "%s:%d: fuzz check failed: %s\n", file, line, what);
	abort();
}

/* The probe's JSON (exec.h) with its code generation left to fill in. */
static const char probe_fmt[] =
    "{\"codegen\":%d,\"backends\":["
    "{\"name\":\"cpu\",\"format\":\"so\",\"available\":true,"
    "\"listed\":[\"x86-64\",\"x86-64-v3\"],\"targets\":["
    "{\"requested\":\"auto\",\"target\":\"x86-64-v3\","
    "\"identity\":\"gcc 12 fuzz\"},"
    "{\"requested\":\"x86-64\",\"target\":\"x86-64\","
    "\"identity\":\"gcc 12 fuzz\"},"
    "{\"requested\":\"x86-64-v3\",\"target\":\"x86-64-v3\","
    "\"identity\":\"gcc 12 fuzz\"},"
    "{\"requested\":\"native\",\"error\":{\"code\":\"E_BAD_TARGET\","
    "\"message\":\"not in the fuzzers' probe\"}}]},"
    "{\"name\":\"opencl\",\"format\":\"source\",\"available\":true,"
    "\"listed\":[],\"targets\":[{\"requested\":\"auto\","
    "\"target\":\"pocl\",\"identity\":\"pocl fuzz\"}]},"
    "{\"name\":\"cuda\",\"format\":\"ptx\",\"available\":false,"
    "\"reason\":\"no GPU in the fuzzers' probe\"}]}";

ks_keys_t *ks_fuzz_keys(void)
{
	static ks_keys_t *keys;
	char probe[sizeof probe_fmt + 16], err[256];

	if (keys)
		return keys;
	KS_FUZZ_CHECK(ks_base_init() == KS_OK);
	keys = aligned_alloc(_Alignof(ks_keys_t), sizeof *keys);
	KS_FUZZ_CHECK(keys != NULL);
	KS_FUZZ_CHECK(ks_keys_init(keys) == KS_OK);
	snprintf(probe, sizeof probe, probe_fmt, KS_CODEGEN_VERSION);
	if (ks_keys_load_probe(keys, probe, err, sizeof err) != KS_OK) {
		fprintf(stderr, "fuzz: %s\n", err);
		ks_fuzz_fail("the fixed probe loads", __FILE__, __LINE__);
	}
	return keys;
}

static ks_fleet_pub_t pub;
static ks_fleet_sec_t sec;

/* The key id is the first bytes of the public key's hash (entry.h). */
static void fleet_keys(void)
{
	static int made;
	uint8_t seed[crypto_sign_SEEDBYTES];
	ks_hash_t h;

	if (made)
		return;
	KS_FUZZ_CHECK(ks_base_init() == KS_OK);
	memset(seed, 0x6b, sizeof seed);
	crypto_sign_seed_keypair(pub.pk, sec.sk, seed);
	ks_hash(pub.pk, sizeof pub.pk, &h);
	memcpy(pub.id, h.b, sizeof pub.id);
	memcpy(sec.id, h.b, sizeof sec.id);
	made = 1;
}

const ks_fleet_pub_t *ks_fuzz_fleet_public(void)
{
	fleet_keys();
	return &pub;
}

const ks_fleet_sec_t *ks_fuzz_fleet_secret(void)
{
	fleet_keys();
	return &sec;
}

void ks_fuzz_init(void)
{
	ks_fuzz_keys();
	fleet_keys();
}

void ks_fuzz_value_key(ks_hash_t *key)
{
	memset(key->b, 0x5a, sizeof key->b);
}
