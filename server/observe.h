/*
 * Private to server/: the metrics listener's pages (observe.c).
 */
#ifndef KS_SERVER_OBSERVE_H
#define KS_SERVER_OBSERVE_H

#include "http.h"
#include "srv.h"

/* The Prometheus text of SRV's counters and gauges into B. */
void ks_metrics_text(ks_srv_t *srv, ks_buf_t *b);
/* Frees the kept renders. */
void ks_observe_close(ks_srv_t *srv);
/* ks_http_fn of the listener: /metrics, /api/stats, /; OWNER is SRV. */
void ks_observe_handle(void *owner, const char *path, ks_http_reply_t *r);

#endif
