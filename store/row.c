/*
 * The checks of a stored row: its checksums (row_sum, xsum), what a row
 * must look like, and the checks of a read, a quarantine and a migration.
 */
#include <string.h>

#define XXH_STATIC_LINKING_ONLY         /* XXH3_state_t on the stack */
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>            /* the widest vector unit there is */
#endif

#include "store_int.h"

/* BLAKE2b-256 over key, sum, the length of meta and meta. */
void kss_row_sum_of(const ks_hash_t *key, const ks_hash_t *sum,
    const char *meta, size_t meta_len, ks_hash_t *out)
{
	ks_hasher_t h;
	uint8_t le[8];
	int i;

	for (i = 0; i < 8; i++)
		le[i] = (uint8_t)((uint64_t)meta_len >> (8 * i));
	ks_hasher_init(&h);
	ks_hasher_update(&h, key->b, KS_HASH_BYTES);
	ks_hasher_update(&h, sum->b, KS_HASH_BYTES);
	ks_hasher_update(&h, le, sizeof le);
	ks_hasher_update(&h, meta, meta_len);
	ks_hasher_final(&h, out);
}

/*
 * XXH3-128 over key, sum, the length of meta, meta and bytes, in its
 * canonical (big-endian) form.  Not a cryptographic hash: it catches bit
 * rot and misfiled rows at about half an instruction a byte (callgrind,
 * 6.4 KB), where BLAKE2b costs 5.6; the store file is trusted
 * (docs/store.md, threat model).
 */
void kss_xsum_of(const ks_hash_t *key, const ks_hash_t *sum,
    const char *meta, size_t meta_len, const void *bytes, size_t len,
    uint8_t out[XSUM_BYTES])
{
	XXH3_state_t st;
	XXH128_canonical_t c;
	uint8_t le[8];
	int i;

	for (i = 0; i < 8; i++)
		le[i] = (uint8_t)((uint64_t)meta_len >> (8 * i));
	XXH3_128bits_reset(&st);
	XXH3_128bits_update(&st, key->b, KS_HASH_BYTES);
	XXH3_128bits_update(&st, sum->b, KS_HASH_BYTES);
	XXH3_128bits_update(&st, le, sizeof le);
	XXH3_128bits_update(&st, meta, meta_len);
	XXH3_128bits_update(&st, bytes, len);
	XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
	memcpy(out, c.digest, XSUM_BYTES);
}

/*
 * The checks of a row that need no hashing, on a statement stepped to a
 * SELECT_ROW row: column types, hash lengths, size == length of bytes.
 * Fills SUM, ROW_SUM and, unless XSUM is NULL (a row being migrated), XSUM.
 * Returns NULL if they pass, else the reason.
 */
const char *kss_check_shape(sqlite3_stmt *st, ks_hash_t *sum,
    ks_hash_t *row_sum, uint8_t *xsum)
{
	if (sqlite3_column_type(st, COL_SUM) != SQLITE_BLOB ||
	    sqlite3_column_bytes(st, COL_SUM) != KS_HASH_BYTES ||
	    sqlite3_column_type(st, COL_ROW_SUM) != SQLITE_BLOB ||
	    sqlite3_column_bytes(st, COL_ROW_SUM) != KS_HASH_BYTES)
		return "malformed checksum";
	if (xsum && (sqlite3_column_type(st, COL_XSUM) != SQLITE_BLOB ||
	    sqlite3_column_bytes(st, COL_XSUM) != XSUM_BYTES))
		return "malformed checksum";
	if (sqlite3_column_type(st, COL_META) != SQLITE_TEXT ||
	    sqlite3_column_type(st, COL_BYTES) != SQLITE_BLOB ||
	    sqlite3_column_type(st, COL_SIZE) != SQLITE_INTEGER)
		return "malformed row";
	if (sqlite3_column_int64(st, COL_SIZE) !=
	    (int64_t)sqlite3_column_bytes(st, COL_BYTES))
		return "size does not match the stored bytes";
	kss_column_key(st, COL_SUM, sum);
	kss_column_key(st, COL_ROW_SUM, row_sum);
	if (xsum)
		memcpy(xsum, sqlite3_column_blob(st, COL_XSUM), XSUM_BYTES);
	return NULL;
}

void kss_row_data(sqlite3_stmt *st, struct row_data *d)
{
	d->meta = (const char *)sqlite3_column_text(st, COL_META);
	d->meta_len = (size_t)sqlite3_column_bytes(st, COL_META);
	d->bytes = sqlite3_column_blob(st, COL_BYTES);
	d->len = (size_t)sqlite3_column_bytes(st, COL_BYTES);
	if (d->meta == NULL)
		d->meta = "";
}

/* The check of every read: xsum over the row. */
const char *kss_check_xsum(const ks_hash_t *key, const ks_hash_t *sum,
    const uint8_t *xsum, const char *meta, size_t meta_len,
    const void *bytes, size_t len)
{
	uint8_t x[XSUM_BYTES];

	kss_xsum_of(key, sum, meta, meta_len, bytes, len, x);
	return memcmp(x, xsum, XSUM_BYTES) == 0 ? NULL :
	    "row checksum (xsum) does not match";
}

/* The cryptographic checks: BLAKE2b(bytes) == sum, row_sum over key, sum,
 * meta. */
const char *kss_check_content(const ks_hash_t *key, const ks_hash_t *sum,
    const ks_hash_t *row_sum, const char *meta, size_t meta_len,
    const void *bytes, size_t len)
{
	ks_hash_t h;

	ks_hash(bytes, len, &h);
	if (!ks_hash_eq(&h, sum))
		return "checksum of the bytes does not match";
	kss_row_sum_of(key, sum, meta, meta_len, &h);
	if (!ks_hash_eq(&h, row_sum))
		return "row checksum (key, sum, meta) does not match";
	return NULL;
}
