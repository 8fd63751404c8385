/*
 * The values of the remote tier (fleetval.h).  Every check of a value
 * read from Redis comes after its signature's, so that only a holder of
 * a fleet key reaches the metadata parse; what the metadata then says is
 * still checked, field by field, and never trusted for more than it names.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <sodium.h>

#include "../store/store.h"
#include "fleetval.h"
#include "remote.h"

int ks_fleet_value_seal(const ks_fleet_sec_t *sk, const ks_hash_t *key,
    const char *kind, const char *node, double now_ms, uint64_t ttl_ms,
    cJSON *more, ks_buf_t *out)
{
	cJSON *m = more ? more : cJSON_CreateObject();
	ks_buf_t sealed;
	char *meta;
	int rc;

	if (!m)
		return KS_E_NOMEM;
	cJSON_AddStringToObject(m, "kspec", kind);
	cJSON_AddStringToObject(m, "node", node);
	cJSON_AddNumberToObject(m, "expires_ms", now_ms + (double)ttl_ms);
	meta = cJSON_PrintUnformatted(m);
	cJSON_Delete(m);
	if (!meta)
		return KS_E_NOMEM;
	ks_buf_init(&sealed);
	rc = ks_entry_seal(sk, key, meta, strlen(meta), NULL, 0, &sealed);
	free(meta);
	if (rc == KS_OK)
		rc = ks_buf_reserve(out, sealed.len * 2 + 1);
	if (rc == KS_OK) {
		sodium_bin2hex(out->data + out->len, sealed.len * 2 + 1,
		    (const unsigned char *)sealed.data, sealed.len);
		out->len += sealed.len * 2;
	}
	ks_buf_close(&sealed);
	return rc;
}

/* String NAME of object O is WANT. */
static int meta_is(const cJSON *o, const char *name, const char *want)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(v) && strcmp(v->valuestring, want) == 0;
}

int ks_fleet_entry_binds(const ks_entry_t *e, const ks_hash_t *key,
    const char *identity, ks_hash_t *sum, char *why, size_t whylen)
{
	char hex[KS_HASH_HEX];
	const cJSON *n;
	cJSON *meta;
	int ok;

	if (memcmp(e->key.b, key->b, KS_HASH_BYTES) != 0) {
		snprintf(why, whylen, "a signed entry of another key");
		return KS_E_DENIED;
	}
	ks_hash(e->bytes, e->len, sum);
	meta = ks_meta_parse(e->meta, e->meta_len);
	ks_hash_hex(key, hex);
	ok = meta && meta_is(meta, "key", hex) &&
	    meta_is(meta, "compiler", identity);
	ks_hash_hex(sum, hex);
	n = cJSON_GetObjectItemCaseSensitive(meta, "bytes");
	ok = ok && meta_is(meta, "artifact", hex) && cJSON_IsNumber(n) &&
	    n->valuedouble == (double)e->len;
	cJSON_Delete(meta);
	if (!ok) {
		snprintf(why, whylen, "its metadata does not describe this "
		    "key, compiler and bytes");
		return KS_E_DENIED;
	}
	return KS_OK;
}

/*
 * The metadata of V (LEN hex digits), a signed value of KIND for KEY that
 * has not expired at NOW_MS and does not claim to live longer than
 * MAX_TTL_MS: a cJSON object (the caller deletes it), or NULL with WHY
 * said.
 */
static cJSON *value_open(const ks_fleet_pub_t *keys, int nkeys,
    const ks_hash_t *key, const char *kind, uint64_t max_ttl_ms,
    double now, const char *v, size_t len, char *why, size_t whylen)
{
	unsigned char *bin = malloc(len / 2 + 1);
	const cJSON *k, *exp;
	size_t n = 0;
	ks_entry_t e;
	cJSON *m = NULL;

	why[0] = '\0';
	if (!bin) {
		snprintf(why, whylen, "out of memory");
		return NULL;
	}
	if (sodium_hex2bin(bin, len / 2 + 1, v, len, NULL, &n, NULL) != 0 ||
	    ks_entry_open(keys, nkeys, bin, n, &e, why, whylen) != KS_OK) {
		if (n == 0 || why[0] == '\0')
			snprintf(why, whylen, "not signed by a fleet key");
		free(bin);
		return NULL;
	}
	if (memcmp(e.key.b, key->b, KS_HASH_BYTES) != 0)
		snprintf(why, whylen, "a signed %s of another key", kind);
	else if (!(m = cJSON_ParseWithLength(e.meta, e.meta_len)) ||
	    !cJSON_IsString(k = cJSON_GetObjectItemCaseSensitive(m,
	    "kspec")) || strcmp(k->valuestring, kind) != 0 ||
	    !cJSON_IsNumber(exp = cJSON_GetObjectItemCaseSensitive(m,
	    "expires_ms")))
		snprintf(why, whylen, "a signed value that is not a %s", kind);
	else if (exp->valuedouble + KS_FLEET_SKEW_MS < now)
		snprintf(why, whylen, "a %s that expired %.0f ms ago", kind,
		    now - exp->valuedouble);
	else if (exp->valuedouble > now + (double)(max_ttl_ms +
	    KS_FLEET_SKEW_MS))
		snprintf(why, whylen, "a %s that claims to live %.0f ms", kind,
		    exp->valuedouble - now);
	else {
		free(bin);
		return m;
	}
	cJSON_Delete(m);
	free(bin);
	return NULL;
}

int ks_fleet_fail_open(const ks_fleet_pub_t *keys, int nkeys,
    const ks_hash_t *key, double now_ms, const char *v, size_t len,
    char *msg, size_t msglen, char *why, size_t whylen)
{
	const cJSON *code, *text;
	cJSON *m;

	m = value_open(keys, nkeys, key, "fail", KS_LEASE_FAIL_TTL_MS, now_ms,
	    v, len, why, whylen);
	if (!m)
		return KS_E_DENIED;
	if (!cJSON_IsNumber(code = cJSON_GetObjectItemCaseSensitive(m,
	    "code")) || code->valuedouble != KS_E_COMPILE ||
	    !cJSON_IsString(text = cJSON_GetObjectItemCaseSensitive(m,
	    "message"))) {
		snprintf(why, whylen, "a failure marker of another kind than "
		    "a compile error");
		cJSON_Delete(m);
		return KS_E_DENIED;
	}
	snprintf(msg, msglen, "%s", text->valuestring);
	cJSON_Delete(m);
	return KS_OK;
}

int ks_fleet_lease_open(const ks_fleet_pub_t *keys, int nkeys,
    const ks_hash_t *key, double now_ms, const char *v, size_t len,
    double *expires_ms, char *why, size_t whylen)
{
	const char *colon = memrchr(v, ':', len);
	cJSON *m;

	if (!colon) {
		snprintf(why, whylen, "a lease that is not signed:token");
		return KS_E_DENIED;
	}
	m = value_open(keys, nkeys, key, "lease", KS_LEASE_TTL_MS, now_ms, v,
	    (size_t)(colon - v), why, whylen);
	if (!m)
		return KS_E_DENIED;
	*expires_ms = cJSON_GetObjectItemCaseSensitive(m,
	    "expires_ms")->valuedouble;
	cJSON_Delete(m);
	return KS_OK;
}
