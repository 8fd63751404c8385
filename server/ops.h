/*
 * Private to server/: the ops, one handler each, grouped in files:
 * op_get.c (get, warm, cancel), op_info.c (ping, hello, stats, kernels),
 * op_store.c (list, evict, explain, misses), op_import.c (import),
 * op_ready.c (ready), op_deploy.c (deploy, undeploy, deployments),
 * op_canary.c (canary).  dispatch.c maps a parsed
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
ks_op_fn ks_op_deploy, ks_op_undeploy, ks_op_deployments;
ks_op_fn ks_op_audit;
ks_op_fn ks_op_canary;

/* Deployments (op_deploy.c): SPECS (a stored JSON array of get-specs)
 * parsed as a ready request's items; each item's key into KEYS (and its
 * kernel's and backend's names into KERNELS and BACKENDS, its canonical
 * spec into SPECS_OUT, each when not NULL), or the first bad item's
 * error with its index in ERR; the keys of every deployment pinned anew
 * under today's compilers (at start). */
int ks_deploy_specs_parse(const char *specs, ks_request_t *out, char *err,
    size_t errlen);
int ks_deploy_keys(ks_srv_t *srv, const ks_request_t *req, ks_hash_t *keys,
    const char **kernels, const char **backends, ks_buf_t *specs_out,
    char *err, size_t errlen);
void ks_deploy_repin(ks_srv_t *srv);
/* The state of deployment NAME, or NULL when the daemon knows none; with
 * CREATE a new one (not ready) is made for a name it does not know
 * (NULL on OOM).  ks_deploy_forget drops it; ks_deploy_states_free all. */
ks_deploy_state_t *ks_deploy_state(ks_srv_t *srv, const char *name,
    int create);
void ks_deploy_forget(ks_srv_t *srv, const char *name);
void ks_deploy_states_free(ks_srv_t *srv);
/* A get of G missed: when the deployment it declared is ready, a late
 * compile (counted, logged with its spec, recorded for `kspec manifest
 * --from-misses --deployment`). */
void ks_deploy_late(ks_srv_t *srv, const ks_get_t *g);

/* The fields of the stats reply, each after a comma (docs/protocol.md):
 * the same for the stats op and the metrics listener's /api/stats. */
void ks_stats_fields(ks_srv_t *srv, ks_buf_t *out);

/* A get whose normalized form is G (from the full parse or the fast
 * path): the lookup, and the reply now or when the compile ends. */
void ks_op_get_normalized(ks_conn_t *c, int has_id, uint64_t id,
    int meta_only, const ks_get_t *g);

#endif
