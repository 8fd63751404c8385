/*
 * Compiler identities and the canaries' verdicts (schema 8).
 */
#include <pthread.h>

#include "store_int.h"

static const kss_stmt_t stmts[] = {
	KSS_R(identities, "SELECT DISTINCT compiler FROM artifacts WHERE "
	    "backend = ?1"),
	KSS_W(canary, "INSERT OR REPLACE INTO canaries (backend, identity, "
	    "kernel, result, at, ms, detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, "
	    "?7)"),
	KSS_R(canaries, "SELECT backend, identity, kernel, result, at, ms, "
	    "detail FROM canaries WHERE backend = ?1 AND identity = ?2 ORDER "
	    "BY kernel"),
};
KSS_STMTS(kss_canary_stmts, stmts);

int ks_store_identities(ks_store_t *s, const char *backend,
    int (*cb)(void *ctx, const char *identity), void *ctx)
{
	sqlite3_stmt *st;
	int rc, stop = 0;

	if (kss_rlock(s) != KS_OK)
		return KS_E_IO;
	st = s->r_identities;
	sqlite3_bind_text(st, 1, backend, -1, SQLITE_STATIC);
	while (!stop && (rc = sqlite3_step(st)) == SQLITE_ROW)
		stop = cb(ctx, (const char *)sqlite3_column_text(st, 0));
	rc = stop ? stop : rc == SQLITE_DONE || rc == SQLITE_ROW ? KS_OK :
	    kss_failed(s, s->r, rc, "identities");
	kss_release(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

int ks_store_canary_put(ks_store_t *s, const ks_store_canary_t *c)
{
	sqlite3_stmt *st;
	int rc;

	if (kss_wlock(s) != KS_OK)
		return KS_E_IO;
	st = s->w_canary;
	sqlite3_bind_text(st, 1, c->backend, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, c->identity, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, c->kernel, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, c->result, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 5, c->at ? c->at : ks_wall_ms());
	sqlite3_bind_double(st, 6, c->ms);
	sqlite3_bind_text(st, 7, c->detail, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	rc = rc == SQLITE_DONE ? KS_OK : kss_failed(s, s->w, rc, "canary");
	kss_release(st);
	pthread_mutex_unlock(&s->wlock);
	return rc;
}

int ks_store_canaries(ks_store_t *s, const char *backend,
    const char *identity, int (*cb)(void *ctx, const ks_store_canary_t *c),
    void *ctx)
{
	sqlite3_stmt *st;
	int rc, stop = 0;

	if (kss_rlock(s) != KS_OK)
		return KS_E_IO;
	st = s->r_canaries;
	sqlite3_bind_text(st, 1, backend, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, identity, -1, SQLITE_STATIC);
	while (!stop && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		ks_store_canary_t c = {
			(const char *)sqlite3_column_text(st, 0),
			(const char *)sqlite3_column_text(st, 1),
			(const char *)sqlite3_column_text(st, 2),
			(const char *)sqlite3_column_text(st, 3),
			sqlite3_column_int64(st, 4),
			sqlite3_column_double(st, 5),
			(const char *)sqlite3_column_text(st, 6),
		};

		stop = cb(ctx, &c);
	}
	rc = stop ? stop : rc == SQLITE_DONE || rc == SQLITE_ROW ? KS_OK :
	    kss_failed(s, s->r, rc, "canaries");
	kss_release(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}
