/*
 * The misses table (schema 2) and the late compiles of deployments
 * (schema 6): every distinct get that missed, counted.
 */
#include <pthread.h>

#include "store_int.h"

static const kss_stmt_t stmts[] = {
	KSS_W(miss, "INSERT INTO misses(spec, first, last, count) VALUES "
	    "(?1, ?2, ?2, ?3) ON CONFLICT(spec) DO UPDATE SET last = "
	    "excluded.last, count = count + excluded.count"),
	KSS_W(late, "INSERT INTO late(deployment, spec, first, last, count) "
	    "VALUES (?4, ?1, ?2, ?2, ?3) ON CONFLICT(deployment, spec) DO "
	    "UPDATE SET last = excluded.last, count = count + excluded.count"),
	KSS_R(misses, "SELECT spec, first, last, count FROM misses ORDER BY "
	    "first, spec"),
	KSS_R(late, "SELECT spec, first, last, count FROM late WHERE "
	    "deployment = ?1 ORDER BY first, spec"),
};
KSS_STMTS(kss_misses_stmts, stmts);

int ks_store_record_miss(ks_store_t *s, const char *deployment,
    const char *spec, uint64_t count)
{
	int64_t now = ks_wall_s() * 1000;
	sqlite3_stmt *st;
	int rc;

	if (kss_wlock(s) != KS_OK)
		return KS_E_IO;
	st = deployment ? s->w_late : s->w_miss;
	sqlite3_bind_text(st, 1, spec, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, now);
	sqlite3_bind_int64(st, 3, (int64_t)count);
	if (deployment)
		sqlite3_bind_text(st, 4, deployment, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	rc = rc == SQLITE_DONE ? KS_OK : kss_failed(s, s->w, rc, "record miss");
	kss_release(st);
	pthread_mutex_unlock(&s->wlock);
	return rc;
}

int ks_store_misses(ks_store_t *s, const char *deployment,
    int (*cb)(void *ctx, const char *spec, int64_t first, int64_t last,
    uint64_t count), void *ctx)
{
	sqlite3_stmt *st;
	int rc, stop = 0;

	if (kss_rlock(s) != KS_OK)
		return KS_E_IO;
	st = deployment ? s->r_late : s->r_misses;
	if (deployment)
		sqlite3_bind_text(st, 1, deployment, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *spec = (const char *)sqlite3_column_text(st, 0);

		stop = cb(ctx, spec ? spec : "", sqlite3_column_int64(st, 1),
		    sqlite3_column_int64(st, 2),
		    (uint64_t)sqlite3_column_int64(st, 3));
		if (stop)
			break;
	}
	rc = !stop && rc != SQLITE_DONE ? kss_failed(s, s->r, rc, "misses") :
	    KS_OK;
	kss_release(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}
