/*
 * Private to store/: helpers shared by artifact.c, hot.c and store.c.
 * Other modules include store.h only.
 */
#ifndef KS_STORE_INT_H
#define KS_STORE_INT_H

#include "store.h"

/*
 * Like ks_artifact_new, but takes SUM as given instead of hashing BYTES:
 * the store reads the sum from disk and verifies it itself, after the copy,
 * outside its reader lock.  META is META_LEN bytes, not necessarily
 * NUL-terminated; the copy is.  refs = 1.  NULL on OOM.
 */
ks_artifact_t *ks_artifact_new_with_sum(const ks_hash_t *key,
    const ks_hash_t *sum, const char *meta, size_t meta_len,
    const void *bytes, size_t len);

#endif
