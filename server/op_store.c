/*
 * list, evict, explain and misses: looking after the cache.  None of them
 * is on the hit path; they may parse stored metadata with cJSON and
 * allocate.  Reads go through the store's reader; evict's removal runs on
 * the store writer, after every write posted before it, and is answered
 * when the writer is done.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "lookup.h"
#include "ops.h"

/* ---- stored metadata ---- */

static const char *meta_str(const cJSON *m, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, name);

	return cJSON_IsString(v) ? v->valuestring : "";
}

static int filter_match(const ks_filter_req_t *f, const cJSON *m)
{
	return (!f->kernel[0] || strcmp(f->kernel, meta_str(m, "kernel")) ==
	    0) && (!f->backend[0] || strcmp(f->backend, meta_str(m,
	    "backend")) == 0) && (!f->target[0] || strcmp(f->target,
	    meta_str(m, "target")) == 0);
}

/* 1 when stored META matches F (unreadable meta matches nothing). */
static int meta_match(const ks_filter_req_t *f, const char *meta,
    size_t n)
{
	cJSON *m = ks_meta_parse(meta, n);
	int ok = m && filter_match(f, m);

	cJSON_Delete(m);
	return ok;
}

/* ---- reading after the writer ---- */

/*
 * list, explain and misses read the store.  Its writes run on the writer
 * thread, so a read right after a compile could miss the compile's
 * entry; these ops run once the writer has done everything posted before
 * them, and so see every write of the requests answered before them.
 */
typedef struct {
	ks_mail_t mail;          /* first */
	ks_conn_t *conn;
	ks_request_t req;        /* no warm items: nothing to own */
	ks_op_fn *fn;
} deferred_t;

static void deferred_run(ks_mail_t *m)
{
	deferred_t *d = (deferred_t *)m;

	if (ks_conn_live(d->conn))
		d->fn(d->conn, &d->req);
	ks_conn_done(d->conn);
	free(d);
}

static void writer_reached(void *ctx)
{
	deferred_t *d = ctx;

	ks_mailbox_post(&ks_srv_of(d->conn)->mailbox, &d->mail);
}

static void after_writes(ks_conn_t *c, const ks_request_t *req,
    ks_op_fn *fn)
{
	deferred_t *d = malloc(sizeof *d);

	if (!d) {
		ks_srv_reject(c, req, KS_E_NOMEM,
		    "out of memory");
		return;
	}
	d->mail.fn = deferred_run;
	d->conn = c;
	d->req = *req;
	d->req.items = NULL;
	d->req.nitems = 0;
	d->fn = fn;
	if (ks_writer_barrier(ks_srv_of(c)->writer, writer_reached, d)) {
		free(d);
		ks_srv_reject(c, req, KS_E_NOMEM,
		    "out of memory");
		return;
	}
	ks_conn_wait(c);
}

/* ---- list ---- */

/* Appends "key":..,.."last_used_ms":.. of E (no braces). */
static void entry_json(ks_buf_t *o, const ks_store_entry_t *e)
{
	const char *const names[] = { "kernel", "variant", "backend",
	    "target", "dtype", "mode", "format", "shape", "compiler" };
	const char *const vals[] = { e->kernel, e->variant, e->backend,
	    e->target, e->dtype, e->mode, e->format, e->shape, e->compiler };
	char hex[KS_HASH_HEX];
	size_t i;

	ks_hash_hex(&e->key, hex);
	ks_buf_printf(o, "\"key\":\"%s\"", hex);
	for (i = 0; i < sizeof names / sizeof names[0]; i++) {
		ks_buf_printf(o, ",\"%s\":", names[i]);
		ks_buf_json_str(o, vals[i]);
	}
	ks_buf_printf(o, ",\"bytes\":%" PRIu64 ",\"created_ms\":%" PRId64
	    ",\"last_used_ms\":%" PRId64, e->size, e->created, e->last_used);
}

typedef struct {
	ks_srv_t *srv;
	ks_buf_t *out;
	uint64_t shown;
} list_t;

/* One entry of the page, from its row's columns: no JSON is parsed. */
static int list_one(void *ctx, const ks_store_entry_t *e)
{
	list_t *s = ctx;

	ks_buf_puts(s->out, s->shown++ ? ",{" : "{");
	entry_json(s->out, e);
	ks_buf_printf(s->out, ",\"in_memory\":%s}", ks_hot_has(s->srv->hot,
	    &e->key) ? "true" : "false");
	return 0;
}

static void list_now(ks_conn_t *c, const ks_request_t *req)
{
	const ks_filter_req_t *f = &req->filter;
	ks_store_filter_t by = { f->kernel, f->backend, f->target };
	uint64_t total = 0;
	list_t s;
	int rc;

	memset(&s, 0, sizeof s);
	s.srv = ks_srv_of(c);
	s.out = &c->out;
	ks_reply_begin(c, req->has_id, req->id);
	ks_buf_puts(&c->out, ",\"entries\":[");
	rc = ks_store_entries(s.srv->store, &by, f->offset, f->limit,
	    list_one, &s, &total);
	if (rc) {
		ks_srv_error_reply(c, (int)req->op, req->has_id, req->id,
		    rc, "cannot read the "
		    "store");
		return;
	}
	ks_buf_printf(&c->out, "],\"total\":%" PRIu64 ",\"offset\":%" PRIu64
	    ",\"limit\":%" PRIu64, total, f->offset, f->limit);
	ks_reply_finish(c);
}

/* ---- evict ---- */

/* An evict in progress: the memory tier is emptied of the matching
 * entries at once, the store's rows by the writer; the reply counts the
 * keys removed from either. */
typedef struct {
	ks_mail_t mail;          /* the writer's completion */
	ks_conn_t *conn;
	int has_id;
	uint64_t id;
	ks_filter_req_t filter;
	ks_hash_t *hot_keys;     /* removed from the memory tier */
	size_t nhot;
	int rc;                  /* the writer's */
	ks_hash_t *keys;         /* removed from the store */
	size_t nkeys;
	/* evict --stale: the stale entries found, their sizes, and what the
	 * reply lists of them */
	ks_hash_t *stale;
	uint64_t *sizes;
	size_t nstale, cap;
	uint64_t unchecked;      /* kept: backend or target unavailable */
	ks_buf_t listed;
	uint64_t nlisted;
	const ks_keys_t *ks;
} evict_t;

static int evict_meta_match(void *ctx, const char *meta)
{
	return meta_match(ctx, meta, strlen(meta));
}

static int evict_hot_match(void *ctx, const ks_artifact_t *a)
{
	return meta_match(ctx, a->meta, a->meta_len);
}

static int has_key(const ks_hash_t *keys, size_t n, const ks_hash_t *k)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (ks_hash_eq(&keys[i], k))
			return 1;
	return 0;
}

static void evict_free(evict_t *e)
{
	free(e->hot_keys);
	free(e->keys);
	free(e->stale);
	free(e->sizes);
	ks_buf_close(&e->listed);
	free(e);
}

/* The fields of a stale evict's reply after "evicted": what it removed
 * (or, in a dry run, would remove) and the entries it found. */
static void stale_fields(ks_conn_t *c, const evict_t *e, uint64_t bytes)
{
	ks_buf_printf(&c->out, ",\"bytes\":%" PRIu64 ",\"dry_run\":%s,"
	    "\"unchecked\":%" PRIu64 ",\"entries\":[%s],\"unlisted\":%"
	    PRIu64, bytes, e->filter.dry_run ? "true" : "false", e->unchecked,
	    e->listed.data ? e->listed.data : "", (uint64_t)e->nstale -
	    e->nlisted);
}

/* Loop thread: the writer is done. */
static void evict_reply(ks_mail_t *m)
{
	evict_t *e = (evict_t *)m;
	ks_conn_t *c = e->conn;
	uint64_t evicted = e->nkeys, bytes = 0;
	size_t i, j;

	for (i = 0; i < e->nhot; i++)
		evicted += !has_key(e->keys, e->nkeys, &e->hot_keys[i]);
	/* The writer's keys are the stale ones it found, in their order. */
	for (i = j = 0; i < e->nstale; i++) {
		int gone = j < e->nkeys && ks_hash_eq(&e->keys[j],
		    &e->stale[i]);

		j += gone;
		if (gone || has_key(e->hot_keys, e->nhot, &e->stale[i]))
			bytes += e->sizes[i];
	}
	if (ks_conn_live(c)) {
		if (e->rc) {
			ks_srv_error_reply(c, KS_OP_EVICT, e->has_id, e->id,
			    e->rc, "cannot remove entries from the store");
		} else {
			ks_reply_begin(c, e->has_id, e->id);
			ks_buf_printf(&c->out, ",\"evicted\":%" PRIu64,
			    evicted);
			if (e->filter.stale)
				stale_fields(c, e, bytes);
			ks_reply_finish(c);
		}
	}
	ks_conn_done(c);
	evict_free(e);
}

/* Writer thread: keep the removed keys and wake the loop. */
static void evict_removed(void *ctx, int rc, const ks_hash_t *keys,
    size_t n)
{
	evict_t *e = ctx;

	e->rc = rc;
	if (rc == KS_OK && n) {
		e->keys = malloc(n * sizeof *keys);
		if (e->keys) {
			memcpy(e->keys, keys, n * sizeof *keys);
			e->nkeys = n;
		} else {
			e->rc = KS_E_NOMEM;
		}
	}
	ks_mailbox_post(&ks_srv_of(e->conn)->mailbox, &e->mail);
}

/* The keys an ambiguous prefix's error names: 4 whole keys fit the
 * client library's message (512 bytes). */
#define PREFIX_SHOWN 4

/* The distinct keys, stored or in the memory tier (a put may not have
 * reached the store yet), that start with a hex prefix: the first
 * PREFIX_SHOWN + 1, so that "more" can be told. */
typedef struct {
	const char *prefix;
	size_t len;
	ks_hash_t found[PREFIX_SHOWN + 1];
	int n;
} prefix_t;

static void prefix_add(prefix_t *p, const ks_hash_t *key)
{
	int i;

	for (i = 0; i < p->n; i++)
		if (ks_hash_eq(&p->found[i], key))
			return;
	if (p->n <= PREFIX_SHOWN)
		p->found[p->n++] = *key;
}

static void prefix_hot(void *ctx, ks_artifact_t *a)
{
	prefix_t *p = ctx;
	char hex[KS_HASH_HEX];

	ks_hash_hex(&a->key, hex);
	if (memcmp(hex, p->prefix, p->len) == 0)
		prefix_add(p, &a->key);
}

/* Resolves a key prefix to the one key, stored or in memory, that has
 * it (KS_OK), or says why not. */
static int resolve_prefix(ks_srv_t *srv, const char *prefix, ks_hash_t *key,
    char *msg, size_t msglen)
{
	prefix_t p = { prefix, strlen(prefix), { { { 0 } } }, 0 };
	ks_hash_t stored[PREFIX_SHOWN + 1];
	char hex[KS_HASH_HEX];
	size_t at;
	int n, i;

	n = ks_store_keys_with_prefix(srv->store, prefix, stored,
	    PREFIX_SHOWN + 1);
	if (n < 0) {
		snprintf(msg, msglen, "cannot read the store to resolve key "
		    "prefix %s", prefix);
		return n;
	}
	for (i = 0; i < n; i++)
		prefix_add(&p, &stored[i]);
	ks_hot_each(srv->hot, prefix_hot, &p);
	if (p.n == 0) {
		snprintf(msg, msglen, "no artifact has a key starting with %s",
		    prefix);
		return KS_E_NOT_FOUND;
	}
	if (p.n > 1) {
		/* Named whole, so that the one meant can be given. */
		at = (size_t)snprintf(msg, msglen, "key prefix %s is not "
		    "unique; give more digits of one of: ", prefix);
		for (i = 0; i < p.n && i < PREFIX_SHOWN && at < msglen; i++) {
			ks_hash_hex(&p.found[i], hex);
			at += (size_t)snprintf(msg + at, msglen - at, "%s%s",
			    i ? ", " : "", hex);
		}
		if (p.n > PREFIX_SHOWN && at < msglen)
			snprintf(msg + at, msglen - at, ", and more");
		return KS_E_BAD_REQUEST;
	}
	*key = p.found[0];
	return KS_OK;
}

/* A new evict of REQ on C, answered by evict_reply; NULL on OOM. */
static evict_t *evict_new(ks_conn_t *c, const ks_request_t *req)
{
	evict_t *e = calloc(1, sizeof *e);

	if (!e)
		return NULL;
	e->mail.fn = evict_reply;
	e->conn = c;
	e->has_id = req->has_id;
	e->id = req->id;
	e->filter = req->filter;
	e->ks = &ks_srv_of(c)->keys;
	ks_buf_init(&e->listed);
	return e;
}

/* The stale evicts list at most this many of the entries they find. */
#define STALE_LISTED KS_LIST_MAX_LIMIT

/* Under the reader lock: one entry, checked against what keys are made
 * of now. */
static int stale_one(void *ctx, const ks_store_entry_t *se)
{
	evict_t *e = ctx;
	const char *why = "";
	int v = ks_keys_check_entry(e->ks, se, &why);

	if (v == KS_KEYS_UNCHECKED)
		e->unchecked++;
	if (v != KS_KEYS_STALE)
		return 0;
	if (e->nstale == e->cap) {
		size_t c2 = e->cap ? 2 * e->cap : 64;
		ks_hash_t *k2 = realloc(e->stale, c2 * sizeof *k2);
		uint64_t *s2;

		if (!k2)
			return KS_E_NOMEM;
		e->stale = k2;
		s2 = realloc(e->sizes, c2 * sizeof *s2);
		if (!s2)
			return KS_E_NOMEM;
		e->sizes = s2;
		e->cap = c2;
	}
	e->stale[e->nstale] = se->key;
	e->sizes[e->nstale++] = se->size;
	if (e->nlisted < STALE_LISTED) {
		ks_buf_puts(&e->listed, e->nlisted++ ? ",{" : "{");
		entry_json(&e->listed, se);
		ks_buf_printf(&e->listed, ",\"reason\":\"%s\"}", why);
	}
	return 0;
}

/*
 * evict --stale, once the writer has stored every put posted before it:
 * every row is checked from its columns (ks_keys_check_entry) on the loop
 * thread, which owns the keys; the stale ones are removed from both tiers
 * like a --key evict's, unless it is a dry run.  No request can make a
 * stale key, so none is put again meanwhile.
 */
static void stale_now(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = ks_srv_of(c);
	uint64_t bytes = 0;
	evict_t *e = evict_new(c, req);
	size_t i;
	int rc;

	if (!e) {
		ks_srv_error_reply(c, (int)req->op, req->has_id, req->id,
		    KS_E_NOMEM,
		    "out of memory");
		return;
	}
	rc = ks_store_entries(srv->store, NULL, 0, 0, stale_one, e, NULL);
	if (rc == KS_OK && !e->filter.dry_run && e->nstale) {
		e->hot_keys = malloc(e->nstale * sizeof *e->hot_keys);
		rc = e->hot_keys ? KS_OK : KS_E_NOMEM;
		for (i = 0; rc == KS_OK && i < e->nstale; i++) {
			if (ks_hot_has(srv->hot, &e->stale[i]))
				e->hot_keys[e->nhot++] = e->stale[i];
			ks_hot_remove(srv->hot, &e->stale[i]);
		}
		if (rc == KS_OK)
			rc = ks_writer_remove(srv->writer, e->stale,
			    e->nstale, NULL, NULL, evict_removed, e);
		if (rc == KS_OK) {
			ks_conn_wait(c);
			return;
		}
	}
	if (rc) {
		ks_srv_error_reply(c, (int)req->op, req->has_id, req->id,
		    rc, rc == KS_E_NOMEM ?
		    "out of memory" : "cannot read the store");
	} else {
		/* A dry run, or nothing stale: the answer is now. */
		for (i = 0; i < e->nstale; i++)
			bytes += e->sizes[i];
		ks_reply_begin(c, req->has_id, req->id);
		ks_buf_printf(&c->out, ",\"evicted\":%" PRIu64,
		    (uint64_t)e->nstale);
		stale_fields(c, e, bytes);
		ks_reply_finish(c);
	}
	evict_free(e);
}

void ks_op_evict(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = ks_srv_of(c);
	const ks_filter_req_t *f = &req->filter;
	ks_hash_t key;
	evict_t *e;
	char msg[512];
	int rc;

	/* Destructive and machine-wide: the daemon's uid, root and the
	 * members of --admin-group only. */
	if (!ks_srv_admin_only(c, req, "evict"))
		return;
	if (f->stale) {
		after_writes(c, req, stale_now);
		return;
	}
	if (f->key[0] && strlen(f->key) < 2 * KS_HASH_BYTES) {
		rc = resolve_prefix(srv, f->key, &key, msg, sizeof msg);
		if (rc) {
			ks_srv_reject(c, req, rc, msg);
			return;
		}
	} else if (f->key[0] && ks_hash_from_hex(f->key, &key) != KS_OK) {
		ks_srv_reject(c, req, KS_E_BAD_REQUEST,
		    "field 'key' is not a key");
		return;
	}
	e = evict_new(c, req);
	if (!e) {
		ks_srv_reject(c, req, KS_E_NOMEM,
		    "out of memory");
		return;
	}
	if (f->key[0]) {
		if (ks_hot_has(srv->hot, &key)) {
			e->hot_keys = malloc(sizeof key);
			if (e->hot_keys) {
				e->hot_keys[0] = key;
				e->nhot = 1;
			}
		}
		ks_hot_remove(srv->hot, &key);
		rc = ks_writer_remove(srv->writer, &key, 1, NULL, NULL,
		    evict_removed, e);
	} else {
		rc = ks_hot_remove_if(srv->hot, f->all ? NULL :
		    evict_hot_match, &e->filter, &e->hot_keys, &e->nhot);
		if (rc == KS_OK)
			rc = ks_writer_remove(srv->writer, NULL, 0, f->all ?
			    NULL : evict_meta_match, &e->filter,
			    evict_removed, e);
	}
	if (rc) {
		evict_free(e);
		ks_srv_reject(c, req, rc, "out of memory");
		return;
	}
	ks_conn_wait(c);
}

/* ---- explain ---- */

typedef struct {
	const ks_get_t *g;
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
	cJSON *m = ks_meta_parse(meta, strlen(meta));
	int i, n = 0;

	if (!m)
		return 0;
	if (strcmp(meta_str(m, "kernel"), g->spec.def->name) != 0) {
		cJSON_Delete(m);
		return 0;
	}
	ks_buf_reset(&nr->differs);
	guard = cJSON_GetObjectItemCaseSensitive(m, "guard");
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
	/* The weights' own dtype, where one differs from the dtype (the
	 * meta has wdtype only then, as ks_get_wdtype_json writes it). */
	if (strcmp(meta_str(m, "wdtype"), g->spec.wdtype != g->spec.dtype ?
	    ks_dtype_name(g->spec.wdtype) : ""))
		differ(&nr->differs, &n, "wdtype");
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

static void explain_now(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = ks_srv_of(c);
	const char *cached = NULL;
	ks_artifact_t *a = NULL;
	char err[512], hex[KS_HASH_HEX];
	near_t nr;
	ks_get_t g;
	int rc;

	err[0] = '\0';
	rc = ks_keys_normalize(&srv->keys, &req->get, &g, err, sizeof err);
	if (rc) {
		ks_srv_reject(c, req, rc, err);
		return;
	}
	if (ks_lookup_cached(srv, &g, 1, &a, &cached) == KS_OK)
		ks_artifact_unref(a);
	else
		cached = NULL;

	ks_hash_hex(&g.key, hex);
	ks_reply_begin(c, req->has_id, req->id);
	ks_buf_printf(&c->out, ",\"key\":\"%s\",\"kernel\":\"%s\",\"variant\":"
	    "\"%s\"", hex, g.spec.def->name, g.spec.def->select(&g.spec));
	ks_get_guard_json(&g, &c->out);
	ks_buf_puts(&c->out, ",\"components\":");
	ks_keys_components(&srv->keys, &g, &c->out);
	if (cached) {
		ks_buf_printf(&c->out, ",\"cached\":\"%s\",\"nearest\":null",
		    cached);
		ks_reply_finish(c);
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
	ks_reply_finish(c);
}

/* ---- misses ---- */

static int miss_one(void *ctx, const char *spec, int64_t first, int64_t last,
    uint64_t count)
{
	ks_conn_t *c = ctx;
	size_t before = c->out.len;

	/* Each spec was written by ks_get_spec_json: valid JSON, inserted
	 * as is. */
	ks_buf_printf(&c->out, "%s{\"spec\":%s,\"first_ms\":%" PRId64
	    ",\"last_ms\":%" PRId64 ",\"count\":%" PRIu64 "}",
	    c->out.data[before - 1] == '[' ? "" : ",", spec, first, last,
	    count);
	return 0;
}

static void misses_now(ks_conn_t *c, const ks_request_t *req)
{
	int rc;

	ks_reply_begin(c, req->has_id, req->id);
	ks_buf_puts(&c->out, ",\"misses\":[");
	rc = ks_store_misses(ks_srv_of(c)->store, req->name[0] ? req->name :
	    NULL, miss_one, c);
	if (rc) {
		ks_srv_error_reply(c, (int)req->op, req->has_id, req->id,
		    rc, "cannot read the "
		    "recorded misses");
		return;
	}
	ks_buf_puts(&c->out, "]");
	ks_reply_finish(c);
}

void ks_op_list(ks_conn_t *c, const ks_request_t *req)
{
	after_writes(c, req, list_now);
}

void ks_op_explain(ks_conn_t *c, const ks_request_t *req)
{
	after_writes(c, req, explain_now);
}

void ks_op_misses(ks_conn_t *c, const ks_request_t *req)
{
	after_writes(c, req, misses_now);
}
