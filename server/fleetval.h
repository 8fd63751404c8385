/*
 * Private to server/: the values of the remote tier in Redis
 * (docs/fleet.md), as a node makes and reads them (fleetval.c).  Pure
 * functions of the fleet's keys, the value and the clock they are given:
 * lease.c calls them with the daemon's keys and clock, the fuzzer
 * (fuzz/redis.c) with its own.
 *
 *   kspec:e1:KEY     an artifact: a signed entry (proto/entry.h) of KEY
 *                    whose metadata names KEY, the compiler and the bytes;
 *   kspec:fail:KEY   a compile's failure marker, and
 *   kspec:lease:KEY  a lease: signed entries of KEY with no bytes and the
 *                    metadata {"kspec": KIND, "node": .., "expires_ms": ..,
 *                    ...}, hex-encoded; a lease's value is that, ':' and
 *                    a token (lease.c's script adds it).
 *
 * A node acts on a value only when a fleet key signed it, bound to its key
 * (a value copied under another key is refused) and, for markers and
 * leases, to an expiry on the signer's clock (a replayed one is refused
 * once it passed, give or take KS_FLEET_SKEW_MS of clock difference
 * between nodes).
 */
#ifndef KS_SERVER_FLEETVAL_H
#define KS_SERVER_FLEETVAL_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "../proto/entry.h"

#define KS_FLEET_SKEW_MS 5000

struct cJSON;

/*
 * Appends to OUT, hex, the signed value of KIND ("fail", "lease") for KEY
 * made by NODE at NOW_MS (the signer's wall clock), valid for TTL_MS, with
 * the members of MORE (an object or NULL; taken over, freed here).  KS_OK
 * or KS_E_NOMEM.
 */
int ks_fleet_value_seal(const ks_fleet_sec_t *sk, const ks_hash_t *key,
    const char *kind, const char *node, double now_ms, uint64_t ttl_ms,
    struct cJSON *more, ks_buf_t *out);

/*
 * Whether E, the signed entry opened from the value under KEY's Redis key,
 * is KEY's artifact: its own key is KEY and its metadata an object that
 * names KEY, the compiler IDENTITY, and the checksum and length of its
 * bytes.  KS_OK with the checksum in *SUM, else KS_E_DENIED with WHY.
 */
int ks_fleet_entry_binds(const ks_entry_t *e, const ks_hash_t *key,
    const char *identity, ks_hash_t *sum, char *why, size_t whylen);

/*
 * A failure marker V (LEN bytes) read under KEY's name, at NOW_MS: KS_OK
 * and the compile error's message in MSG (cut to MSGLEN) when one of KEYS
 * signed it for KEY, it has not expired, does not claim to live longer
 * than KS_LEASE_FAIL_TTL_MS and is a compile error (the compiler's own
 * verdict, the same on every node); else KS_E_DENIED with WHY.
 */
int ks_fleet_fail_open(const ks_fleet_pub_t *keys, int nkeys,
    const ks_hash_t *key, double now_ms, const char *v, size_t len,
    char *msg, size_t msglen, char *why, size_t whylen);

/*
 * A lease V (LEN bytes, signed:token) read under KEY's name, at NOW_MS:
 * KS_OK and its signed expiry in *EXPIRES_MS when one of KEYS signed it
 * for KEY, it has not expired and does not claim to live longer than
 * KS_LEASE_TTL_MS; else KS_E_DENIED with WHY.
 */
int ks_fleet_lease_open(const ks_fleet_pub_t *keys, int nkeys,
    const ks_hash_t *key, double now_ms, const char *v, size_t len,
    double *expires_ms, char *why, size_t whylen);

#endif
