/*
 * Signed entries: an artifact with its metadata, as one value that only
 * the holder of a fleet secret key can make and anyone with the public key
 * can check (libsodium crypto_sign, Ed25519).  The unit of a bundle file
 * and of the fleet tier; docs/fleet.md gives the layout and the reasons.
 *
 * Entry:  "kspecE1\n" | key id (8) | request key (32) | meta_len (u32 BE)
 *         | bytes_len (u64 BE) | meta | bytes | signature (64) over all
 *         that precedes it.
 * Bundle: "kspecB1\n" | count (u32 BE) | count x (u64 BE length | entry).
 *
 * The key id is the first 8 bytes of the BLAKE2b-256 of the public key, so
 * that keys can rotate: a reader holds several public keys and picks by
 * id.  Key files are one line of text: "kspec-fleet-public-v1 HEX" (32
 * bytes) and "kspec-fleet-secret-v1 HEX" (64 bytes, libsodium's secret
 * key, which holds the public key too).
 */
#ifndef KS_PROTO_ENTRY_H
#define KS_PROTO_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

#define KS_FLEET_ID_BYTES   8
#define KS_FLEET_PK_BYTES   32
#define KS_FLEET_SK_BYTES   64
#define KS_FLEET_SIG_BYTES  64
#define KS_ENTRY_HEAD       (8 + KS_FLEET_ID_BYTES + KS_HASH_BYTES + 4 + 8)
#define KS_ENTRY_MAX_META   (1u << 20)
#define KS_FLEET_MAX_KEYS   8

typedef struct {
	uint8_t id[KS_FLEET_ID_BYTES];
	uint8_t pk[KS_FLEET_PK_BYTES];
} ks_fleet_pub_t;

typedef struct {
	uint8_t id[KS_FLEET_ID_BYTES];
	uint8_t sk[KS_FLEET_SK_BYTES];
} ks_fleet_sec_t;

/* The key id as 16 hex digits and a NUL. */
void ks_fleet_id_hex(const uint8_t id[KS_FLEET_ID_BYTES], char out[17]);

/*
 * Writes a new key pair: PREFIX.secret (mode 0600) and PREFIX.public
 * (0644), refusing to replace either.  Errors with a message: KS_E_IO
 * (a file exists), errno's.
 */
int ks_fleet_keygen(const char *prefix, char *id_hex, char *err,
    size_t errlen);
/* Reads a public key file.  KS_E_INVAL for a file that is not one. */
int ks_fleet_load_public(const char *path, ks_fleet_pub_t *out, char *err,
    size_t errlen);
/*
 * Reads a secret key file, which must be a regular file (no symlink) owned
 * by the caller's uid or root that no one else can read or write (mode
 * 0600 or 0400): KS_E_DENIED otherwise, with what to fix.
 */
int ks_fleet_load_secret(const char *path, ks_fleet_sec_t *out, char *err,
    size_t errlen);

/*
 * Opens PATH for reading (*FD, caller closes) if it is a secret's file: a
 * regular file (no symlink) owned by the caller's uid or root, mode 0600
 * or 0400.  KS_E_DENIED otherwise, with what to fix; errno's.  Secret keys
 * and kspecd's --remote-password-file.
 */
int ks_secret_open(const char *path, int *fd, char *err, size_t errlen);

/* Appends the signed entry of (KEY, META, BYTES) to OUT. */
int ks_entry_seal(const ks_fleet_sec_t *sk, const ks_hash_t *key,
    const char *meta, size_t meta_len, const void *bytes, size_t len,
    ks_buf_t *out);

/* An entry's parts, pointing into the value they were opened from. */
typedef struct {
	ks_hash_t key;
	const char *meta;
	size_t meta_len;
	const uint8_t *bytes;
	size_t len;
	int signer;              /* index of the key that signed it */
} ks_entry_t;

/*
 * Checks V (LEN bytes) and fills OUT.  Errors, with a message: KS_E_PROTO
 * (not an entry, truncated, lengths that disagree), KS_E_DENIED (signed
 * by a key id not among KEYS, or the signature does not verify: the bytes,
 * metadata or key were changed).
 */
int ks_entry_open(const ks_fleet_pub_t *keys, int nkeys, const void *v,
    size_t len, ks_entry_t *out, char *err, size_t errlen);

/* Bundles: the header, then each entry with its length.  KS_E_NOMEM. */
int ks_bundle_begin(ks_buf_t *out, uint32_t count);
int ks_bundle_add(ks_buf_t *out, const ks_buf_t *entry);

/*
 * A bundle file read in order, one entry at a time, so that a reader
 * holds no more of it than the entry it asked for.  The file may change
 * under the reader: every length is checked again as it is read.
 */
typedef struct {
	int fd;                  /* the caller's: not closed here */
	uint64_t size;           /* of the file */
	uint64_t at;             /* offset of the next entry's length */
	uint32_t count;          /* entries in the bundle */
	uint32_t next;           /* index of the next entry */
} ks_bundle_file_t;

/*
 * Reads the header of the bundle file FD (SIZE bytes) and walks the
 * lengths of all its entries, reading none of them, then leaves F at the
 * first.  KS_E_PROTO with a message when the file is not a bundle, is cut
 * short or has bytes after its last entry; KS_E_IO when a read fails.
 */
int ks_bundle_file_open(ks_bundle_file_t *f, int fd, uint64_t size,
    char *err, size_t errlen);
/* *LEN: the length of entry F->next, which must be < F->count.  Errors
 * as ks_bundle_file_open's (the file changed since). */
int ks_bundle_file_peek(ks_bundle_file_t *f, uint64_t *len, char *err,
    size_t errlen);
/* Reads entry F->next, of LEN bytes as peeked, into BUF (NULL: passes
 * over it unread) and moves F to the next entry.  Errors as above. */
int ks_bundle_file_take(ks_bundle_file_t *f, void *buf, uint64_t len,
    char *err, size_t errlen);

#endif
