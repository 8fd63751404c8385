/*
 * Private to server/: the request callback of the connections (parse and
 * op table).
 */
#ifndef KS_SERVER_DISPATCH_H
#define KS_SERVER_DISPATCH_H

#include "conn.h"

/* Installs the parse arena's cJSON hooks; the calling thread is the one
 * whose parses use the arena (the loop thread). */
void ks_dispatch_init(void);
/* ks_conn_request_fn of the daemon. */
void ks_dispatch_request(ks_conn_t *c, const char *hdr, size_t len);

#endif
