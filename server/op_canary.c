/*
 * canary: the state of the known-answer canaries ("status":true, anyone),
 * or their runs now (the admin way to re-enable a disabled kernel: one
 * that passes is enabled again), answered once every canary asked for
 * has ended (canary.h).
 */
#include <stdlib.h>

#include "ops.h"

typedef struct {
	ks_conn_t *conn;
	int has_id;
	uint64_t id;
	ks_filter_req_t filter;
} canary_req_t;

static void canary_reply(ks_conn_t *c, int has_id, uint64_t id,
    const ks_filter_req_t *f)
{
	ks_reply_begin(c, has_id, id);
	ks_buf_puts(&c->out, ",\"canaries\":");
	ks_canary_json(ks_srv_of(c), &c->out, f->backend, f->kernel);
	ks_reply_finish(c);
}

static void canary_done(void *ctx)
{
	canary_req_t *r = ctx;

	if (ks_conn_live(r->conn))
		canary_reply(r->conn, r->has_id, r->id, &r->filter);
	ks_conn_done(r->conn);
	free(r);
}

void ks_op_canary(ks_conn_t *c, const ks_request_t *req)
{
	const ks_filter_req_t *f = &req->filter;
	canary_req_t *r;
	char msg[160];

	if (f->kernel[0] && !ks_kernel_find(f->kernel)) {
		snprintf(msg, sizeof msg, "no kernel named '%s' (kspec "
		    "kernels lists them)", f->kernel);
		ks_srv_reject(c, req, KS_E_UNKNOWN_KERNEL,
		    msg);
		return;
	}
	if (f->backend[0] && !ks_backend_find(f->backend)) {
		snprintf(msg, sizeof msg, "no backend named '%s'", f->backend);
		ks_srv_reject(c, req, KS_E_BAD_BACKEND, msg);
		return;
	}
	if (f->status) {
		canary_reply(c, req->has_id, req->id, f);
		return;
	}
	if (!ks_srv_admin_only(c, req, "canary"))
		return;
	r = calloc(1, sizeof *r);
	if (!r) {
		ks_srv_reject(c, req, KS_E_NOMEM,
		    "out of memory");
		return;
	}
	r->conn = c;
	r->has_id = req->has_id;
	r->id = req->id;
	r->filter = *f;
	ks_conn_wait(c);
	/* Nothing to run (a backend that is skipped): the state now. */
	if (ks_canary_request(ks_srv_of(c), f->backend, f->kernel,
	    canary_done, r) == 0)
		canary_done(r);
}
