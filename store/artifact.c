/*
 * Artifacts: immutable key, sum, metadata and bytes, shared by reference
 * count.  The count is the only mutable field; it is changed with atomic
 * read-modify-write operations so that the loop thread, compile workers'
 * completion callbacks and the store writer may hold references at once.
 * Whoever drops the count to zero frees; the acquire-release ordering on
 * the decrement makes every earlier use of the artifact by other threads
 * happen before the free.
 */
#include <stdlib.h>
#include <string.h>

#include "store.h"

ks_artifact_t *ks_artifact_new_with_sum(const ks_hash_t *key,
    const ks_hash_t *sum, const char *meta, size_t meta_len,
    const void *bytes, size_t len)
{
	ks_artifact_t *a;

	if (meta_len == SIZE_MAX)
		return NULL;
	a = calloc(1, sizeof *a);
	if (a == NULL)
		return NULL;
	/* One byte more than needed so that empty metadata and empty bytes
	 * still get a valid pointer, and meta is a C string. */
	a->meta = malloc(meta_len + 1);
	a->bytes = malloc(len ? len : 1);
	if (a->meta == NULL || a->bytes == NULL) {
		free(a->meta);
		free(a->bytes);
		free(a);
		return NULL;
	}
	if (meta_len)
		memcpy(a->meta, meta, meta_len);
	a->meta[meta_len] = '\0';
	if (len)
		memcpy(a->bytes, bytes, len);
	a->key = *key;
	a->sum = *sum;
	a->meta_len = meta_len;
	a->len = len;
	a->refs = 1;
	return a;
}

ks_artifact_t *ks_artifact_new(const ks_hash_t *key, const char *meta,
    const void *bytes, size_t len)
{
	ks_hash_t sum;

	if (meta == NULL)
		meta = "";
	ks_hash(bytes, len, &sum);
	return ks_artifact_new_with_sum(key, &sum, meta, strlen(meta), bytes,
	    len);
}

/* A reference may only be taken by someone who already holds one, so the
 * count cannot be zero here and relaxed ordering suffices. */
void ks_artifact_ref(ks_artifact_t *a)
{
	__atomic_fetch_add(&a->refs, 1, __ATOMIC_RELAXED);
}

void ks_artifact_unref(ks_artifact_t *a)
{
	if (a == NULL)
		return;
	if (__atomic_sub_fetch(&a->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	free(a->meta);
	free(a->bytes);
	free(a);
}
