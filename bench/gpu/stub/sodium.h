/*
 * A stand-in for libsodium's header, used by bench/gpu/run.sh only where
 * libsodium is not installed (a bare GPU machine): base/base.c then
 * compiles, and the GPU check never hashes (it computes no request keys
 * and no fingerprints).  Every function fails loudly if called.
 */
#ifndef KS_GPU_STUB_SODIUM_H
#define KS_GPU_STUB_SODIUM_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#define crypto_generichash_BYTES_MIN 16U
#define crypto_generichash_BYTES_MAX 64U

typedef struct {
	unsigned char opaque[384];
} crypto_generichash_state;

static inline void ks_stub_sodium_abort(const char *fn)
{
	fprintf(stderr, "bench/gpu: %s called without libsodium\n", fn);
	abort();
}

static inline int sodium_init(void)
{
	return 0;
}

static inline int crypto_generichash(unsigned char *out, size_t outlen,
    const unsigned char *in, unsigned long long inlen,
    const unsigned char *key, size_t keylen)
{
	(void)out; (void)outlen; (void)in; (void)inlen; (void)key;
	(void)keylen;
	ks_stub_sodium_abort("crypto_generichash");
	return -1;
}

static inline int crypto_generichash_init(crypto_generichash_state *st,
    const unsigned char *key, size_t keylen, size_t outlen)
{
	(void)st; (void)key; (void)keylen; (void)outlen;
	ks_stub_sodium_abort("crypto_generichash_init");
	return -1;
}

static inline int crypto_generichash_update(crypto_generichash_state *st,
    const unsigned char *in, unsigned long long inlen)
{
	(void)st; (void)in; (void)inlen;
	ks_stub_sodium_abort("crypto_generichash_update");
	return -1;
}

static inline int crypto_generichash_final(crypto_generichash_state *st,
    unsigned char *out, size_t outlen)
{
	(void)st; (void)out; (void)outlen;
	ks_stub_sodium_abort("crypto_generichash_final");
	return -1;
}

static inline char *sodium_bin2hex(char *hex, size_t hexlen,
    const unsigned char *bin, size_t binlen)
{
	(void)hexlen; (void)bin; (void)binlen;
	ks_stub_sodium_abort("sodium_bin2hex");
	return hex;
}

static inline int sodium_hex2bin(unsigned char *bin, size_t binmaxlen,
    const char *hex, size_t hexlen, const char *ignore, size_t *binlen,
    const char **hexend)
{
	(void)bin; (void)binmaxlen; (void)hex; (void)hexlen; (void)ignore;
	(void)binlen; (void)hexend;
	ks_stub_sodium_abort("sodium_hex2bin");
	return -1;
}

#endif
