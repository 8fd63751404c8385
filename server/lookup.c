/*
 * The lookup (lookup.h) and what happens when a compile ends.
 *
 * Durability: the reply to a compile may go out before the store has
 * committed its artifact (the writer thread puts it), but the artifact is
 * in the hot tier before the first reply, so every later request finds
 * it.  A daemon killed in between loses that entry, never corrupts one:
 * the next start compiles it again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../proto/reply.h"
#include "lease.h"

/* The uses the memory tier recorded go to the store's pending set (the
 * writer writes them); called every second and at shutdown. */
void ks_lookup_record_uses(ks_srv_t *srv)
{
	ks_hash_t keys[64];
	size_t n, room;

	/* As many as the store's set has room for: the rest stay marked in
	 * the tier for the next round, after the writer has flushed it. */
	while ((room = ks_store_touch_room(srv->store)) > 0 &&
	    (n = ks_hot_take_uses(srv->hot, keys, room < 64 ? room : 64)) > 0)
		ks_store_touch_many(srv->store, keys, n);
	if (room == 0)
		ks_writer_flush(srv->writer);
}

int ks_lookup_cached(ks_srv_t *srv, const ks_get_t *g, int probe,
    ks_artifact_t **out, const char **source)
{
	ks_artifact_t *a;
	int rc;

	*out = NULL;
	a = ks_hot_get(srv->hot, &g->key);
	if (a) {
		/* The tier records the use; the caller counts the hit. */
		ks_artifact_ref(a);
		*out = a;
		*source = "memory";
		return KS_OK;
	}
	rc = ks_store_lookup(srv->store, &g->key, &a);
	if (rc == KS_OK) {
		if (!probe) {
			/* The tier records the use; one it does not keep
			 * (--hot-bytes 0, say) goes to the store itself. */
			if (!ks_hot_put(srv->hot, a) &&
			    ks_store_touch(srv->store, &g->key))
				ks_writer_flush(srv->writer);
		}
		*out = a;
		*source = "disk";
		return KS_OK;
	}
	if (rc == KS_E_CORRUPT && !probe) {
		srv->n.corrupt++;
		ks_writer_quarantine(srv->writer, &g->key);
	} else if (rc != KS_E_NOT_FOUND && rc != KS_E_CORRUPT) {
		ks_log(KS_LOG_WARN, "store: read failed (%s); treated as a "
		    "miss", ks_err_name(rc));
	}
	return KS_E_NOT_FOUND;
}

int ks_lookup_has(ks_srv_t *srv, const ks_hash_t *key)
{
	char hex[KS_HASH_HEX];
	ks_hash_t have;

	if (ks_hot_has(srv->hot, key))
		return 1;
	ks_hash_hex(key, hex);
	return ks_store_keys_with_prefix(srv->store, hex, &have, 1) == 1;
}

int ks_lookup_join(ks_srv_t *srv, const ks_get_t *g, int prio,
    ks_waiter_t *w, char *err, size_t errlen)
{
	if (srv->stopping) {
		snprintf(err, errlen, "daemon is shutting down");
		return KS_E_SHUTTING_DOWN;
	}
	if (ks_canary_defer(srv, g, prio, w))
		return KS_OK;
	return ks_flight_join(&srv->flights, g, prio, w, err, errlen);
}

const char *ks_lookup_source(const ks_waiter_t *w)
{
	if (w->flight && w->flight->remote_hit)
		return "remote";
	return w->joined ? "joined" : "compiled";
}

int ks_lookup_meta(ks_buf_t *m, const ks_get_t *g, const ks_job_out_t *o,
    const ks_hash_t *sum)
{
	char key[KS_HASH_HEX], hex[KS_HASH_HEX];
	ks_buf_t guard, dynamic;
	int rc;

	ks_hash_hex(&g->key, key);
	ks_hash_hex(sum, hex);
	ks_buf_init(&guard);
	ks_buf_init(&dynamic);
	rc = ks_get_dims_json(g, 1, &guard) | ks_get_dims_json(g, 0, &dynamic);
	if (rc == KS_OK) {
		ks_meta_t x = {
			.key = key,
			.artifact = hex,
			.kernel = g->spec.def->name,
			.variant = o->variant,
			.backend = g->backend->name,
			.target = g->target,
			.dtype = ks_dtype_name(g->spec.dtype),
			.wdtype = g->spec.wdtype != g->spec.dtype ?
			    ks_dtype_name(g->spec.wdtype) : NULL,
			.mode = g->spec.mode == KS_MODE_FAST ? "fast" : "exact",
			.format = o->format,
			.entry = o->entry,
			.bytes = o->len,
			.guard = guard.data,
			.dynamic = dynamic.data,
			.params = o->params,
			.launch = o->launch,
			.codegen = o->codegen,
			.compile_ms = o->compile_ms,
			.compiler = g->identity,
		};

		rc = ks_meta_encode(m, &x);
	}
	ks_buf_close(&guard);
	ks_buf_close(&dynamic);
	return rc ? KS_E_NOMEM : KS_OK;
}

/* The job's description must be what a reply may carry: a JSON array of
 * params and a JSON object of launch geometry. */
static int out_valid(const ks_job_out_t *o)
{
	cJSON *p = o->params ? cJSON_Parse(o->params) : NULL;
	cJSON *l = o->launch ? cJSON_Parse(o->launch) : NULL;
	int ok = cJSON_IsArray(p) && cJSON_IsObject(l) && o->bytes;

	cJSON_Delete(p);
	cJSON_Delete(l);
	return ok;
}

static void record_misses(ks_srv_t *srv, const ks_flight_t *f)
{
	const ks_waiter_t *w;
	uint64_t gets = 0;
	ks_buf_t spec;

	/* Every get that missed is recorded, so production's misses can be
	 * exported as a warm manifest (warm items are replays, not asks). */
	for (w = f->waiters; w; w = w->next)
		gets += w->is_get;
	if (!gets)
		return;
	ks_buf_init(&spec);
	if (ks_get_spec_json(&f->get, &spec) == KS_OK)
		ks_writer_record_miss(srv->writer, NULL, spec.data, gets);
	ks_buf_close(&spec);
}

void ks_lookup_finish(ks_flights_t *set, ks_flight_t *f)
{
	ks_srv_t *srv = set->owner;
	ks_job_out_t *o = &f->pj.out;
	ks_hash_t sum;
	ks_buf_t meta;

	record_misses(srv, f);
	if (f->remote_hit) {
		/* Verified (remote_open): kept here as a compile's would be. */
		ks_hot_put(srv->hot, f->artifact);
		if (ks_writer_put(srv->writer, f->artifact) != KS_OK)
			ks_log(KS_LOG_WARN, "store: could not persist an "
			    "artifact (out of memory)");
		return;
	}
	f->err = f->pj.err;
	snprintf(f->errmsg, sizeof f->errmsg, "%s", f->pj.errmsg);
	if (f->err == KS_OK && !out_valid(o)) {
		f->err = KS_E_INTERNAL;
		snprintf(f->errmsg, sizeof f->errmsg, "the compiler returned "
		    "a malformed description");
	}
	if (f->err == KS_OK) {
		ks_buf_init(&meta);
		ks_hash(o->bytes, o->len, &sum);
		if (ks_lookup_meta(&meta, &f->get, o, &sum) == KS_OK)
			f->artifact = ks_artifact_new_with_sum(&f->key, &sum,
			    meta.data, meta.len, o->bytes, o->len);
		ks_buf_close(&meta);
		if (!f->artifact) {
			f->err = KS_E_NOMEM;
			snprintf(f->errmsg, sizeof f->errmsg, "out of memory");
		}
	}
	if (f->err == KS_OK) {
		ks_hot_put(srv->hot, f->artifact);
		if (ks_writer_put(srv->writer, f->artifact) != KS_OK)
			ks_log(KS_LOG_WARN, "store: could not persist an "
			    "artifact (out of memory)");
		ks_lease_publish(srv, f->artifact);
	} else if (f->err != KS_E_SHUTTING_DOWN && f->err != KS_E_CANCELLED) {
		ks_log(KS_LOG_WARN, "compile of %s failed: %s: %s",
		    f->get.spec.def->name, ks_err_name(f->err), f->errmsg);
	}
	ks_lease_end(srv, f);
}
