/*
 * Private to server/: the ops, one handler each, grouped in files:
 * op_get.c (get, warm, cancel), op_info.c (ping, hello, stats, kernels),
 * op_store.c (list, evict, explain, misses), op_import.c (import),
 * op_ready.c (ready).  dispatch.c maps a parsed
 * request to its handler.  A handler answers on C now, or keeps C waiting
 * (ks_conn_wait) and answers later.
 */
#ifndef KS_SERVER_OPS_H
#define KS_SERVER_OPS_H

#include "srv.h"

typedef void ks_op_fn(ks_conn_t *c, const ks_request_t *req);

ks_op_fn ks_op_get, ks_op_warm, ks_op_cancel;
ks_op_fn ks_op_ping, ks_op_hello, ks_op_stats, ks_op_kernels;
ks_op_fn ks_op_list, ks_op_evict, ks_op_explain, ks_op_misses;
ks_op_fn ks_op_import, ks_op_ready;

/* The fields of the stats reply, each after a comma (docs/protocol.md):
 * the same for the stats op and the metrics listener's /api/stats. */
void ks_stats_fields(ks_srv_t *srv, ks_buf_t *out);

/* A get whose normalized form is G (from the full parse or the fast
 * path): the lookup, and the reply now or when the compile ends. */
void ks_op_get_normalized(ks_conn_t *c, int has_id, uint64_t id,
    int meta_only, const ks_get_t *g);

#endif
