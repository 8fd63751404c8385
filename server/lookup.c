/*
 * The lookup (lookup.h) and what happens when a compile ends.
 *
 * Durability: the reply to a compile may go out before the store has
 * committed its artifact (the writer thread puts it), but the artifact is
 * in the hot tier before the first reply, so every later request finds
 * it.  A daemon killed in between loses that entry, never corrupts one:
 * the next start compiles it again.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "lookup.h"

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

int ks_lookup_join(ks_srv_t *srv, const ks_get_t *g, int prio,
    ks_waiter_t *w, char *err, size_t errlen)
{
	if (srv->stopping) {
		snprintf(err, errlen, "daemon is shutting down");
		return KS_E_SHUTTING_DOWN;
	}
	return ks_flight_join(&srv->flights, g, prio, w, err, errlen);
}

const char *ks_lookup_source(const ks_waiter_t *w)
{
	if (w->flight && w->flight->remote_hit)
		return "remote";
	return w->joined ? "joined" : "compiled";
}

/* ---- the remote tier ---- */

/* The Redis key of an entry: the request key, under a prefix that names
 * the value's format (the signed entry of proto/entry.h, version 1). */
#define REMOTE_PREFIX "kspec:e1:"
#define REMOTE_KEY_LEN (sizeof REMOTE_PREFIX + KS_HASH_HEX)
#define REMOTE_LOG_EVERY_NS (10ull * 1000000000)

static void remote_key(const ks_hash_t *key, char out[REMOTE_KEY_LEN])
{
	char hex[KS_HASH_HEX];

	ks_hash_hex(key, hex);
	snprintf(out, REMOTE_KEY_LEN, REMOTE_PREFIX "%s", hex);
}

/* A value refused: counted, logged at most once every 10 s (a poisoned
 * Redis must not flood the log), and the flight compiles instead. */
static void remote_refused(ks_srv_t *srv, const ks_flight_t *f,
    const char *why)
{
	uint64_t now = ks_now_ns();
	char hex[KS_HASH_HEX];

	srv->remote->auth_failures++;
	if (srv->remote_log_ns && now - srv->remote_log_ns <
	    REMOTE_LOG_EVERY_NS) {
		srv->remote_log_quiet++;
		return;
	}
	ks_hash_hex(&f->key, hex);
	ks_log(KS_LOG_WARN, "remote: refused the value of %.16s for %s "
	    "(%s); compiling it here (%" PRIu64 " more refused since the "
	    "last such line)", hex, f->get.spec.def->name, why,
	    srv->remote_log_quiet);
	srv->remote_log_ns = now;
	srv->remote_log_quiet = 0;
}

/* String NAME of object O is WANT. */
static int meta_is(const cJSON *o, const char *name, const char *want)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(v) && strcmp(v->valuestring, want) == 0;
}

/* The artifact of a value Redis had for F's key, or NULL when it is not
 * one this node can serve: signed by a fleet key, for this very key (not
 * a value copied under another), its metadata an object that names this
 * key, compiler and the bytes' checksum and length. */
static ks_artifact_t *remote_open(ks_srv_t *srv, const ks_flight_t *f,
    const char *v, size_t len)
{
	char err[512], hex[KS_HASH_HEX];
	const cJSON *n;
	ks_artifact_t *a;
	ks_entry_t e;
	ks_hash_t sum;
	cJSON *meta;
	int ok;

	if (ks_entry_open(srv->fleet, srv->nfleet, v, len, &e, err,
	    sizeof err) != KS_OK) {
		remote_refused(srv, f, err);
		return NULL;
	}
	if (srv->remote_planted)
		goto take;       /* the tests' planted bug: no check */
	if (memcmp(e.key.b, f->key.b, KS_HASH_BYTES) != 0) {
		remote_refused(srv, f, "a signed entry of another key");
		return NULL;
	}
	ks_hash(e.bytes, e.len, &sum);
	meta = ks_meta_parse(e.meta, e.meta_len);
	ks_hash_hex(&f->key, hex);
	ok = meta && meta_is(meta, "key", hex) &&
	    meta_is(meta, "compiler", f->get.identity);
	ks_hash_hex(&sum, hex);
	n = cJSON_GetObjectItemCaseSensitive(meta, "bytes");
	ok = ok && meta_is(meta, "artifact", hex) && cJSON_IsNumber(n) &&
	    n->valuedouble == (double)e.len;
	cJSON_Delete(meta);
	if (!ok) {
		remote_refused(srv, f, "its metadata does not describe this "
		    "key, compiler and bytes");
		return NULL;
	}
take:
	if (srv->remote_planted)
		ks_hash(e.bytes, e.len, &sum);
	a = ks_artifact_new_with_sum(&f->key, &sum, e.meta, e.meta_len,
	    e.bytes, e.len);
	if (a)
		srv->remote->hits++;
	return a;
}

static void on_remote(void *ctx, int rc, const char *v, size_t len)
{
	ks_flight_t *f = ctx;
	ks_srv_t *srv = f->set->owner;
	ks_artifact_t *a = NULL;

	if (rc == KS_OK)
		a = remote_open(srv, f, v, len);
	else if (rc == KS_E_NOT_FOUND)
		srv->remote->misses++;
	ks_flight_remote_done(&srv->flights, f, a);
}

int ks_lookup_remote(ks_flights_t *set, ks_flight_t *f)
{
	ks_srv_t *srv = set->owner;
	char key[REMOTE_KEY_LEN];

	if (!srv->remote || srv->stopping)
		return 0;
	remote_key(&f->key, key);
	return ks_remote_get(srv->remote, key, on_remote, f) == KS_OK;
}

/* A compiled artifact goes to the fleet, signed, when this node has the
 * sign key; fire and forget. */
static void remote_publish(ks_srv_t *srv, const ks_artifact_t *a)
{
	char key[REMOTE_KEY_LEN];
	ks_buf_t v;

	if (!srv->remote || !srv->can_sign)
		return;
	if (a->len > KS_REMOTE_MAX_PUBLISH) {
		srv->remote->too_large++;
		return;
	}
	ks_buf_init(&v);
	if (ks_entry_seal(&srv->sign, &a->key, a->meta, a->meta_len, a->bytes,
	    a->len, &v) == KS_OK) {
		remote_key(&a->key, key);
		ks_remote_set(srv->remote, key, v.data, v.len);
	} else {
		srv->remote->publish_failures++;
	}
	ks_buf_close(&v);
}

/* The reply fields of an artifact, stored with it (see store.h): what the
 * request was, and what the job says of the entry. */
static int meta_of(ks_buf_t *m, const ks_get_t *g, const ks_job_out_t *o,
    const ks_hash_t *sum)
{
	char key[KS_HASH_HEX], hex[KS_HASH_HEX];

	ks_hash_hex(&g->key, key);
	ks_hash_hex(sum, hex);
	ks_buf_printf(m, "\"key\":\"%s\",\"artifact\":\"%s\",\"kernel\":\"%s\","
	    "\"variant\":", key, hex, g->spec.def->name);
	ks_buf_json_str(m, o->variant);
	ks_buf_printf(m, ",\"backend\":\"%s\",\"target\":\"%s\","
	    "\"dtype\":\"%s\",\"mode\":\"%s\",\"format\":", g->backend->name,
	    g->target, ks_dtype_name(g->spec.dtype),
	    g->spec.mode == KS_MODE_FAST ? "fast" : "exact");
	ks_buf_json_str(m, o->format);
	ks_buf_puts(m, ",\"entry\":");
	ks_buf_json_str(m, o->entry);
	ks_buf_printf(m, ",\"bytes\":%zu", o->len);
	ks_get_guard_json(g, m);
	ks_buf_printf(m, ",\"params\":%s,\"launch\":%s", o->params, o->launch);
	ks_buf_printf(m, ",\"compile_ms\":%.3f,\"compiler\":", o->compile_ms);
	return ks_buf_json_str(m, g->identity);
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
		ks_writer_record_miss(srv->writer, spec.data, gets);
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
		if (meta_of(&meta, &f->get, o, &sum) == KS_OK)
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
		remote_publish(srv, f->artifact);
	} else if (f->err != KS_E_SHUTTING_DOWN && f->err != KS_E_CANCELLED) {
		ks_log(KS_LOG_WARN, "compile of %s failed: %s: %s",
		    f->get.spec.def->name, ks_err_name(f->err), f->errmsg);
	}
}
