/*
 * Private to server/: the fleet tier of a lookup (lease.c), with --remote:
 * the flights' remote hook (ks_lookup_remote, lookup.h) asks Redis for a
 * key's signed entry and, on a miss, takes or waits for the fleet-wide
 * lease of its compile; these two end what it began.
 */
#ifndef KS_SERVER_LEASE_H
#define KS_SERVER_LEASE_H

#include "lookup.h"

/* A compiled artifact goes to the fleet, signed, when this node has the
 * sign key (none without --remote); fire and forget. */
void ks_lease_publish(ks_srv_t *srv, const ks_artifact_t *a);
/* F's compile ended (published first, if it succeeded): a failure's
 * marker, then F's lease goes, each only while it is ours; nothing when
 * F holds no lease. */
void ks_lease_end(ks_srv_t *srv, ks_flight_t *f);

#endif
