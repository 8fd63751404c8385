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
/* Takes a sample of the dashboard's series when one is due (every
 * KS_HISTORY_MS); called every second. */
void ks_observe_sample(ks_srv_t *srv);
/* ks_http_fn of the listener: /metrics, /api/stats, /api/history, /;
 * OWNER is SRV. */
void ks_observe_handle(void *owner, const char *path, ks_http_reply_t *r);

#endif
