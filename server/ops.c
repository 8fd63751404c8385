/*
 * The daemon's ops beside get, stats, hello and ping: kernels, list,
 * evict, explain and warm (docs/protocol.md).  None of them is on the hit
 * path; they may parse stored metadata with cJSON and allocate.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "internal.h"

/* ---- kernels ---- */

/* The entry parameters of DEF's general variant with every dim dynamic
 * (f32): every argument any of its artifacts can take, in order. */
static void general_params(ks_buf_t *out, const ks_kernel_def_t *def)
{
	ks_dim_t dims[KS_MAX_DIMS];
	ks_ir_kernel_t *k = NULL;
	ks_spec_t spec;
	char err[256];
	int i;

	for (i = 0; i < def->ndims; i++)
		dims[i] = (ks_dim_t){ def->dims[i], 0, 0 };
	if (ks_kernel_validate(def, KS_DTYPE_F32, KS_MODE_EXACT, dims,
	    def->ndims, &spec, err, sizeof err) != KS_OK ||
	    ks_specialize(&spec, &k, err, sizeof err) != KS_OK) {
		ks_buf_puts(out, ",\"params\":[]");
		return;
	}
	ks_srv_params_json(out, k);
	ks_ir_free(k);
}

void ks_op_kernels(ks_conn_t *c, const ks_request_t *req)
{
	const ks_kernel_def_t *const *all;
	int i, j, n;

	all = ks_kernels(&n);
	ks_reply_begin(c, req->has_id, req->id);
	ks_buf_puts(&c->out, ",\"kernels\":[");
	for (i = 0; i < n; i++) {
		const ks_kernel_def_t *k = all[i];

		ks_buf_printf(&c->out, "%s{\"name\":", i ? "," : "");
		ks_buf_json_str(&c->out, k->name);
		ks_buf_puts(&c->out, ",\"summary\":");
		ks_buf_json_str(&c->out, k->summary ? k->summary : "");
		ks_buf_printf(&c->out, ",\"version\":%d,\"dims\":[",
		    k->version);
		for (j = 0; j < k->ndims; j++) {
			ks_buf_puts(&c->out, j ? "," : "");
			ks_buf_json_str(&c->out, k->dims[j]);
		}
		ks_buf_puts(&c->out, "],\"dtypes\":[");
		for (j = 0; j < KS_DTYPE_COUNT; j++)
			ks_buf_printf(&c->out, "%s\"%s\"", j ? "," : "",
			    ks_dtype_name((ks_dtype_t)j));
		ks_buf_puts(&c->out, "],\"variants\":[");
		for (j = 0; j < k->nvariants; j++) {
			ks_buf_printf(&c->out, "%s{\"name\":", j ? "," : "");
			ks_buf_json_str(&c->out, k->variants[j]);
			ks_buf_puts(&c->out, ",\"guard\":");
			ks_buf_json_str(&c->out, k->guards ? k->guards[j] : "");
			ks_buf_puts(&c->out, "}");
		}
		ks_buf_puts(&c->out, "]");
		general_params(&c->out, k);
		ks_buf_puts(&c->out, "}");
	}
	ks_buf_puts(&c->out, "]");
	ks_reply_end(c, 0);
	ks_reply_send(c, NULL);
}

/* ---- list and evict ---- */

static const char *meta_str(const cJSON *m, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, name);

	return cJSON_IsString(v) ? v->valuestring : "";
}

/* Parses a stored meta fragment (reply fields without braces). */
static cJSON *meta_parse(const char *meta)
{
	size_t n = strlen(meta);
	char *text = malloc(n + 3);
	cJSON *m;

	if (!text)
		return NULL;
	text[0] = '{';
	memcpy(text + 1, meta, n);
	text[n + 1] = '}';
	text[n + 2] = '\0';
	m = cJSON_Parse(text);
	free(text);
	return m;
}

static int filter_match(const ks_filter_req_t *f, const cJSON *m)
{
	return (!f->kernel[0] || strcmp(f->kernel, meta_str(m, "kernel")) ==
	    0) && (!f->backend[0] || strcmp(f->backend, meta_str(m,
	    "backend")) == 0) && (!f->target[0] || strcmp(f->target,
	    meta_str(m, "target")) == 0);
}

typedef struct {
	const ks_filter_req_t *f;
	ks_srv_t *srv;
	ks_buf_t *out;
	uint64_t total;
	uint64_t shown;
	ks_hash_t *keys;         /* evict: matching keys */
	size_t nkeys, capkeys;
	int err;
} scan_t;

static int list_one(void *ctx, const ks_hash_t *key, const char *meta,
    uint64_t size, int64_t last_used)
{
	scan_t *s = ctx;
	cJSON *m = meta_parse(meta);
	char hex[KS_HASH_HEX];

	if (!m)
		return 0;       /* unreadable meta: not listed */
	if (filter_match(s->f, m)) {
		if (s->total >= s->f->offset && s->shown < s->f->limit) {
			ks_hash_hex(key, hex);
			ks_buf_printf(s->out, "%s{\"key\":\"%s\"",
			    s->shown ? "," : "", hex);
			ks_buf_printf(s->out, ",\"kernel\":\"%s\",\"variant\":"
			    "\"%s\",\"backend\":\"%s\",\"target\":\"%s\","
			    "\"dtype\":\"%s\",\"mode\":\"%s\",\"format\":\"%s\","
			    "\"bytes\":%" PRIu64 ",\"last_used_ms\":%" PRId64
			    ",\"in_memory\":%s}", meta_str(m, "kernel"),
			    meta_str(m, "variant"), meta_str(m, "backend"),
			    meta_str(m, "target"), meta_str(m, "dtype"),
			    meta_str(m, "mode"), meta_str(m, "format"), size,
			    last_used, ks_hot_has(s->srv->hot, key) ? "true" :
			    "false");
			s->shown++;
		}
		s->total++;
	}
	cJSON_Delete(m);
	return 0;
}

void ks_op_list(ks_conn_t *c, const ks_request_t *req)
{
	scan_t s;
	int rc;

	memset(&s, 0, sizeof s);
	s.f = &req->filter;
	s.srv = c->srv;
	s.out = &c->out;
	ks_reply_begin(c, req->has_id, req->id);
	ks_buf_puts(&c->out, ",\"entries\":[");
	rc = ks_store_list(c->srv->store, list_one, &s);
	if (rc) {
		ks_reply_err(c, req->has_id, req->id, rc, "cannot read the "
		    "store");
		return;
	}
	ks_buf_printf(&c->out, "],\"total\":%" PRIu64 ",\"offset\":%" PRIu64
	    ",\"limit\":%" PRIu64, s.total, req->filter.offset,
	    req->filter.limit);
	ks_reply_end(c, 0);
	ks_reply_send(c, NULL);
}

static int evict_one(void *ctx, const ks_hash_t *key, const char *meta,
    uint64_t size, int64_t last_used)
{
	scan_t *s = ctx;
	cJSON *m = meta_parse(meta);

	if (!m)
		return 0;
	if (s->f->all || filter_match(s->f, m)) {
		if (s->nkeys == s->capkeys) {
			size_t cap = s->capkeys ? 2 * s->capkeys : 64;
			ks_hash_t *k = realloc(s->keys, cap * sizeof *k);

			if (!k) {
				cJSON_Delete(m);
				s->err = KS_E_NOMEM;
				return 1;
			}
			s->keys = k;
			s->capkeys = cap;
		}
		s->keys[s->nkeys++] = *key;
	}
	cJSON_Delete(m);
	return 0;
}

void ks_op_evict(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = c->srv;
	uint64_t evicted = 0;
	ks_hash_t key;
	scan_t s;
	size_t i;
	int rc;

	memset(&s, 0, sizeof s);
	s.f = &req->filter;
	if (req->filter.key[0]) {
		if (ks_hash_from_hex(req->filter.key, &key) != KS_OK) {
			ks_reply_err(c, req->has_id, req->id,
			    KS_E_BAD_REQUEST, "field 'key' is not a key");
			return;
		}
		s.keys = malloc(sizeof key);
		if (s.keys) {
			s.keys[0] = key;
			s.nkeys = 1;
		}
	} else {
		rc = ks_store_list(srv->store, evict_one, &s);
		if (rc || s.err) {
			free(s.keys);
			ks_reply_err(c, req->has_id, req->id, rc ? rc : s.err,
			    "cannot read the store");
			return;
		}
	}
	/* Entries only in memory count too: the hot tier mirrors the store
	 * unless a store write failed. */
	for (i = 0; i < s.nkeys; i++) {
		int in_hot = ks_hot_has(srv->hot, &s.keys[i]);

		ks_hot_remove(srv->hot, &s.keys[i]);
		if (ks_store_remove(srv->store, &s.keys[i]) == KS_OK || in_hot)
			evicted++;
	}
	free(s.keys);
	ks_reply_begin(c, req->has_id, req->id);
	ks_buf_printf(&c->out, ",\"evicted\":%" PRIu64, evicted);
	ks_reply_end(c, 0);
	ks_reply_send(c, NULL);
}

/* ---- explain ---- */

typedef struct {
	const ks_get_t *g;
	const char *variant;
	char best_key[KS_HASH_HEX];
	int best;                /* fewest differing components, -1: none */
	ks_buf_t best_differs;
	ks_buf_t differs;
} near_t;

/* Adds NAME to the list of differing components. */
static void differ(ks_buf_t *b, int *n, const char *name)
{
	ks_buf_puts(b, *n ? ",\"" : "\"");
	ks_buf_puts(b, name);
	ks_buf_puts(b, "\"");
	(*n)++;
}

static int near_one(void *ctx, const ks_hash_t *key, const char *meta,
    uint64_t size, int64_t last_used)
{
	near_t *nr = ctx;
	const ks_get_t *g = nr->g;
	const cJSON *guard, *dyn, *v;
	cJSON *m = meta_parse(meta);
	int i, n = 0;

	if (!m)
		return 0;
	if (strcmp(meta_str(m, "kernel"), g->spec.def->name) != 0) {
		cJSON_Delete(m);
		return 0;
	}
	ks_buf_reset(&nr->differs);
	guard = cJSON_GetObjectItemCaseSensitive(m, "guard");
	dyn = cJSON_GetObjectItemCaseSensitive(m, "dynamic");
	for (i = 0; i < g->spec.ndims; i++) {
		const ks_dim_t *d = &g->spec.dims[i];
		int is_dyn = 0;

		v = cJSON_GetObjectItemCaseSensitive(guard, d->name);
		cJSON_ArrayForEach(dyn, cJSON_GetObjectItemCaseSensitive(m,
		    "dynamic"))
			if (cJSON_IsString(dyn) &&
			    strcmp(dyn->valuestring, d->name) == 0)
				is_dyn = 1;
		if (d->is_const ? !(cJSON_IsNumber(v) && v->valuedouble ==
		    (double)d->value) : !is_dyn)
			differ(&nr->differs, &n, d->name);
	}
	if (strcmp(meta_str(m, "dtype"), ks_dtype_name(g->spec.dtype)))
		differ(&nr->differs, &n, "dtype");
	if (strcmp(meta_str(m, "mode"), g->spec.mode == KS_MODE_FAST ?
	    "fast" : "exact"))
		differ(&nr->differs, &n, "mode");
	if (strcmp(meta_str(m, "backend"), g->backend->name))
		differ(&nr->differs, &n, "backend");
	if (strcmp(meta_str(m, "target"), g->target))
		differ(&nr->differs, &n, "target");
	if (strcmp(meta_str(m, "format"), g->format))
		differ(&nr->differs, &n, "format");
	if (strcmp(meta_str(m, "compiler"), g->identity))
		differ(&nr->differs, &n, "compiler");
	/* Everything visible agrees but the key differs: the kernel's
	 * definition or kspec's code generation changed since. */
	if (n == 0)
		differ(&nr->differs, &n, "fingerprint");
	if (nr->best < 0 || n < nr->best) {
		nr->best = n;
		ks_hash_hex(key, nr->best_key);
		ks_buf_reset(&nr->best_differs);
		ks_buf_append(&nr->best_differs, nr->differs.data,
		    nr->differs.len);
	}
	cJSON_Delete(m);
	return 0;
}

void ks_op_explain(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = c->srv;
	const char *cached = NULL;
	ks_artifact_t *a = NULL;
	char err[512], hex[KS_HASH_HEX];
	near_t nr;
	ks_get_t g;
	int i, rc, first;

	err[0] = '\0';
	rc = ks_srv_normalize(srv, &req->get, &g, err, sizeof err);
	if (rc) {
		ks_reply_err(c, req->has_id, req->id, rc, err);
		return;
	}
	if (ks_hot_has(srv->hot, &g.key))
		cached = "memory";
	else if (ks_store_get(srv->store, &g.key, &a) == KS_OK)
		cached = "disk";
	if (a)
		ks_artifact_unref(a);

	ks_hash_hex(&g.key, hex);
	ks_reply_begin(c, req->has_id, req->id);
	ks_buf_printf(&c->out, ",\"key\":\"%s\",\"kernel\":\"%s\",\"variant\":"
	    "\"%s\",\"guard\":{", hex, g.spec.def->name,
	    g.spec.def->select(&g.spec));
	for (i = 0, first = 1; i < g.spec.ndims; i++) {
		if (!g.spec.dims[i].is_const)
			continue;
		ks_buf_printf(&c->out, "%s\"%s\":%" PRId64, first ? "" : ",",
		    g.spec.dims[i].name, g.spec.dims[i].value);
		first = 0;
	}
	ks_buf_puts(&c->out, "},\"dynamic\":[");
	for (i = 0, first = 1; i < g.spec.ndims; i++) {
		if (g.spec.dims[i].is_const)
			continue;
		ks_buf_printf(&c->out, "%s\"%s\"", first ? "" : ",",
		    g.spec.dims[i].name);
		first = 0;
	}
	ks_buf_puts(&c->out, "],\"components\":");
	ks_srv_key_components(srv, &g, &c->out);
	if (cached) {
		ks_buf_printf(&c->out, ",\"cached\":\"%s\",\"nearest\":null",
		    cached);
		ks_reply_end(c, 0);
		ks_reply_send(c, NULL);
		return;
	}
	memset(&nr, 0, sizeof nr);
	nr.g = &g;
	nr.best = -1;
	ks_buf_init(&nr.differs);
	ks_buf_init(&nr.best_differs);
	ks_store_list(srv->store, near_one, &nr);
	ks_buf_puts(&c->out, ",\"cached\":false,\"nearest\":");
	if (nr.best < 0)
		ks_buf_puts(&c->out, "null");
	else
		ks_buf_printf(&c->out, "{\"key\":\"%s\",\"differs\":[%s]}",
		    nr.best_key, nr.best_differs.data ?
		    nr.best_differs.data : "");
	ks_buf_close(&nr.differs);
	ks_buf_close(&nr.best_differs);
	ks_reply_end(c, 0);
	ks_reply_send(c, NULL);
}

/* ---- warm ---- */

void ks_warm_item_done(ks_warm_t *w, int index, int err, const char *msg,
    const char *source, const ks_artifact_t *a)
{
	ks_conn_t *c = w->conn;
	int i, cached = 0, compiled = 0, joined = 0, failed = 0;

	if (index >= 0) {
		ks_warm_item_t *it = &w->items[index];

		it->err = err;
		it->source = source;
		if (err) {
			it->msg = strdup(msg && *msg ? msg :
			    ks_strerror(err));
		} else if (a) {
			const char *v = strstr(a->meta, "\"variant\":\"");

			ks_hash_hex(&a->key, it->key);
			if (v) {
				v += 11;
				snprintf(it->variant, sizeof it->variant,
				    "%.*s", (int)strcspn(v, "\""), v);
			}
		}
	}
	if (--w->pending > 0)
		return;

	if (c->state == CONN_OPEN || c->state == CONN_DRAINING) {
		ks_reply_begin(c, w->has_id, w->id);
		ks_buf_puts(&c->out, ",\"items\":[");
		for (i = 0; i < w->nitems; i++) {
			ks_warm_item_t *it = &w->items[i];

			ks_buf_printf(&c->out, "%s{\"index\":%d", i ? "," : "",
			    i);
			if (it->err) {
				ks_buf_printf(&c->out, ",\"ok\":false,\"error\":"
				    "{\"code\":\"%s\",\"message\":",
				    ks_err_name(it->err));
				ks_buf_json_str(&c->out, it->msg ? it->msg :
				    "");
				ks_buf_puts(&c->out, "}}");
				failed++;
				continue;
			}
			ks_buf_printf(&c->out, ",\"ok\":true,\"key\":\"%s\","
			    "\"variant\":\"%s\",\"source\":\"%s\"}", it->key,
			    it->variant, it->source);
			if (strcmp(it->source, "compiled") == 0)
				compiled++;
			else if (strcmp(it->source, "joined") == 0)
				joined++;
			else
				cached++;
		}
		ks_buf_printf(&c->out, "],\"summary\":{\"total\":%d,\"cached\":"
		    "%d,\"compiled\":%d,\"joined\":%d,\"failed\":%d}",
		    w->nitems, cached, compiled, joined, failed);
		ks_reply_end(c, 0);
		ks_reply_send(c, NULL);
	}
	for (i = 0; i < w->nitems; i++)
		free(w->items[i].msg);
	free(w->items);
	free(w);
	c->pending--;
	ks_conn_settle(c);
	ks_conn_unref(c);
}

void ks_op_warm(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = c->srv;
	ks_warm_t *w;
	int i;

	w = calloc(1, sizeof *w);
	if (w)
		w->items = calloc(req->nitems ? (size_t)req->nitems : 1,
		    sizeof *w->items);
	if (!w || !w->items) {
		free(w);
		ks_reply_err(c, req->has_id, req->id, KS_E_NOMEM,
		    "out of memory");
		return;
	}
	srv->n.warms++;
	srv->n.warm_items += (uint64_t)req->nitems;
	w->conn = c;
	w->has_id = req->has_id;
	w->id = req->id;
	w->nitems = req->nitems;
	/* One extra count keeps the request open until every item has been
	 * looked at, even if all of them finish at once. */
	w->pending = req->nitems + 1;
	c->refs++;
	c->pending++;

	for (i = 0; i < req->nitems; i++) {
		char err[512];
		ks_artifact_t *a;
		ks_flight_t *f;
		ks_waiter_t wt;
		ks_get_t g;
		int rc, joined;

		err[0] = '\0';
		rc = ks_srv_normalize(srv, &req->items[i], &g, err,
		    sizeof err);
		if (rc) {
			ks_warm_item_done(w, i, rc, err, NULL, NULL);
			continue;
		}
		a = ks_hot_get(srv->hot, &g.key);
		if (a) {
			ks_warm_item_done(w, i, KS_OK, NULL, "memory", a);
			continue;
		}
		rc = ks_store_get(srv->store, &g.key, &a);
		if (rc == KS_OK) {
			ks_warm_item_done(w, i, KS_OK, NULL, "disk", a);
			ks_artifact_unref(a);
			continue;
		}
		if (rc == KS_E_CORRUPT)
			srv->n.corrupt++;
		if (srv->stopping) {
			ks_warm_item_done(w, i, KS_E_SHUTTING_DOWN,
			    "daemon is shutting down", NULL, NULL);
			continue;
		}
		memset(&wt, 0, sizeof wt);
		wt.conn = c;
		wt.warm = w;
		wt.index = i;
		f = ks_flight_join(srv, &g, KS_PRIO_WARM, &joined);
		wt.joined = joined;
		if (!f || ks_flight_wait(f, &wt) != KS_OK) {
			ks_warm_item_done(w, i, KS_E_NOMEM, "out of memory",
			    NULL, NULL);
			continue;
		}
		if (joined)
			srv->n.joins++;
	}
	ks_warm_item_done(w, -1, KS_OK, NULL, NULL, NULL);
	ks_srv_dispatch(srv);
}

/* ---- misses ---- */

int ks_spec_json(const ks_get_t *g, ks_buf_t *o)
{
	int i, first;

	ks_buf_printf(o, "{\"kernel\":\"%s\",\"backend\":\"%s\",\"target\":",
	    g->spec.def->name, g->backend->name);
	ks_buf_json_str(o, g->requested);
	ks_buf_printf(o, ",\"dtype\":\"%s\",\"mode\":\"%s\",\"format\":",
	    ks_dtype_name(g->spec.dtype), g->spec.mode == KS_MODE_FAST ?
	    "fast" : "exact");
	ks_buf_json_str(o, g->format);
	ks_buf_puts(o, ",\"shape\":{");
	for (i = 0, first = 1; i < g->spec.ndims; i++) {
		if (!g->spec.dims[i].is_const)
			continue;
		ks_buf_printf(o, "%s\"%s\":%" PRId64, first ? "" : ",",
		    g->spec.dims[i].name, g->spec.dims[i].value);
		first = 0;
	}
	ks_buf_puts(o, "},\"dynamic\":[");
	for (i = 0, first = 1; i < g->spec.ndims; i++) {
		if (g->spec.dims[i].is_const)
			continue;
		ks_buf_printf(o, "%s\"%s\"", first ? "" : ",",
		    g->spec.dims[i].name);
		first = 0;
	}
	return ks_buf_puts(o, "]}");
}

static int miss_one(void *ctx, const char *spec, int64_t first, int64_t last,
    uint64_t count)
{
	ks_conn_t *c = ctx;
	size_t before = c->out.len;

	/* Each spec was written by ks_spec_json: valid JSON, inserted as is. */
	ks_buf_printf(&c->out, "%s{\"spec\":%s,\"first_ms\":%" PRId64
	    ",\"last_ms\":%" PRId64 ",\"count\":%" PRIu64 "}",
	    c->out.data[before - 1] == '[' ? "" : ",", spec, first, last,
	    count);
	return 0;
}

void ks_op_misses(ks_conn_t *c, const ks_request_t *req)
{
	int rc;

	ks_reply_begin(c, req->has_id, req->id);
	ks_buf_puts(&c->out, ",\"misses\":[");
	rc = ks_store_misses(c->srv->store, miss_one, c);
	if (rc) {
		ks_reply_err(c, req->has_id, req->id, rc, "cannot read the "
		    "recorded misses");
		return;
	}
	ks_buf_puts(&c->out, "]");
	ks_reply_end(c, 0);
	ks_reply_send(c, NULL);
}
