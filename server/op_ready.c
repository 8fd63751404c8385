/*
 * ready: whether every spec of a list (a deployment's manifest) is cached
 * for this daemon's identities now, so that an inference server can gate
 * its start on it.  Each spec is keyed as a get would key it; the answer
 * is read once the store writer has done what was posted before (a
 * compile just answered is stored), from the memory tier and the store's
 * key index.  Nothing is compiled, nothing counts as a use.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lookup.h"
#include "ops.h"

typedef struct {
	int code;                /* KS_OK, or why the spec has no key */
	char msg[256];
	ks_hash_t key;
	int cached;              /* found when the answer is made */
} ready_item_t;

typedef struct {
	ks_later_t l;            /* first */
	int n;
	ready_item_t *items;
	char name[KS_MAX_NAME + 1];  /* of a deployment, or "" */
} ready_t;


static void ready_reply(ks_mail_t *m)
{
	ready_t *r = (ready_t *)m;
	ks_srv_t *srv = r->l.srv;
	ks_conn_t *c = r->l.conn;
	char hex[KS_HASH_HEX];
	ks_deploy_state_t *st;
	int i, cached = 0, first = 1;

	for (i = 0; i < r->n; i++) {
		ready_item_t *it = &r->items[i];

		it->cached = it->code == KS_OK && ks_lookup_has(srv, &it->key);
		cached += it->cached;
	}
	/* A deployment found ready: from now on its clients' misses are
	 * late compiles. */
	if (r->name[0] && cached == r->n &&
	    (st = ks_deploy_state(srv, r->name, 0)))
		st->ready = 1;
	if (ks_conn_live(c)) {
		ks_reply_begin(c, r->l.has_id, r->l.id);
		ks_buf_puts(&c->out, ",\"missing\":[");
		for (i = 0; i < r->n; i++) {
			const ready_item_t *it = &r->items[i];

			if (it->code == KS_OK) {
				if (it->cached)
					continue;
				ks_hash_hex(&it->key, hex);
				ks_buf_printf(&c->out, "%s{\"index\":%d,"
				    "\"key\":\"%s\"}", first ? "" : ",", i, hex);
			} else {
				ks_buf_printf(&c->out, "%s{\"index\":%d,"
				    "\"code\":\"%s\",\"message\":", first ? "" :
				    ",", i, ks_err_name(it->code));
				ks_buf_json_str(&c->out, it->msg);
				ks_buf_puts(&c->out, "}");
			}
			first = 0;
		}
		ks_buf_printf(&c->out, "],\"ready\":%s,\"specs\":%d,"
		    "\"cached\":%d", cached == r->n ? "true" : "false", r->n,
		    cached);
		ks_reply_finish(c);
	}
	ks_conn_done(c);
	free(r->items);
	free(r);
}

static int specs_of(void *ctx, const char *name, const char *specs,
    int64_t created, uint64_t pins)
{
	(void)name;
	(void)created;
	(void)pins;
	*(char **)ctx = strdup(specs);
	return 0;
}

static void ready_items(ks_conn_t *c, const ks_request_t *req,
    const ks_request_t *src);

void ks_op_ready(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = ks_srv_of(c);
	ks_request_t dep;
	char *specs = NULL, err[512];
	int rc;

	if (!req->name[0]) {
		ready_items(c, req, req);
		return;
	}
	/* A deployment's specs, as they were registered. */
	rc = ks_store_deployments(srv->store, req->name, specs_of, &specs);
	if (rc == KS_OK && !specs) {
		snprintf(err, sizeof err, "no deployment named '%s'",
		    req->name);
		rc = KS_E_NOT_FOUND;
	} else if (rc == KS_OK) {
		rc = ks_deploy_specs_parse(specs, &dep, err, sizeof err);
	} else {
		snprintf(err, sizeof err, "cannot read the deployment");
	}
	free(specs);
	if (rc) {
		ks_srv_reject(c, req, rc, err);
		return;
	}
	ready_items(c, req, &dep);
	ks_request_close(&dep);
}

static void ready_items(ks_conn_t *c, const ks_request_t *req,
    const ks_request_t *src)
{
	ks_srv_t *srv = ks_srv_of(c);
	ready_t *r = calloc(1, sizeof *r);
	int i;

	if (r)
		r->items = calloc(src->nitems ? (size_t)src->nitems : 1,
		    sizeof *r->items);
	if (!r || !r->items) {
		free(r);
		ks_srv_reject(c, req, KS_E_NOMEM,
		    "out of memory");
		return;
	}
	ks_later_init(&r->l, c, req, ready_reply);
	r->n = src->nitems;
	snprintf(r->name, sizeof r->name, "%s", req->name);
	for (i = 0; i < src->nitems; i++) {
		ready_item_t *it = &r->items[i];
		ks_get_t g;

		if (src->item_errs && src->item_errs[i].code) {
			it->code = src->item_errs[i].code;
			snprintf(it->msg, sizeof it->msg, "%s",
			    src->item_errs[i].msg);
			continue;
		}
		it->code = ks_keys_normalize(&srv->keys, &src->items[i], &g,
		    it->msg, sizeof it->msg);
		if (it->code == KS_OK)
			it->key = g.key;
	}
	if (ks_writer_barrier(srv->writer, ks_later_post, r) != KS_OK) {
		free(r->items);
		free(r);
		ks_srv_reject(c, req, KS_E_NOMEM,
		    "out of memory");
		return;
	}
	ks_conn_wait(c);
}
