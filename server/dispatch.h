/*
 * Private to server/: the request callback of the connections (parse and
 * op table).
 */
#ifndef KS_SERVER_DISPATCH_H
#define KS_SERVER_DISPATCH_H

#include "conn.h"

struct ks_srv;

/* Installs the parse arena's cJSON hooks; the calling thread is the one
 * whose parses use the arena (the loop thread). */
void ks_dispatch_init(void);
/* ks_conn_request_fn of the daemon. */
void ks_dispatch_request(ks_conn_t *c, const char *hdr, size_t len);
/* Parks the request being dispatched on C (HAS_ID, ID: its id, for a
 * refusal) until this start's probe is in; E_BUSY past the limits of
 * requests waiting per connection and per uid.  COUNTED: what its first
 * dispatch counted (KS_REPLAY_*), not counted again. */
void ks_srv_park(ks_conn_t *c, int op, int has_id, uint64_t id,
    int counted);
/* Dispatches the parked requests again (CODE 0), or answers each with
 * CODE (shutdown). */
void ks_dispatch_unpark(struct ks_srv *srv, int code);

#endif
