/*
 * The saved probe (schema 9): the compilers the daemon last saw, with
 * their witness.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

static const kss_stmt_t stmts[] = {
	KSS_R(probe, "SELECT probe, witness, fingerprints FROM probe WHERE "
	    "id = 1"),
	KSS_W(probe, "INSERT OR REPLACE INTO probe (id, probe, witness, "
	    "fingerprints, at) VALUES (1, ?1, ?2, ?3, ?4)"),
	KSS_W(probe_drop, "DELETE FROM probe"),
};
KSS_STMTS(kss_probe_stmts, stmts);

int ks_store_probe_get(ks_store_t *s, ks_store_probe_t *out)
{
	char **col[3] = { &out->probe, &out->witness, &out->fingerprints };
	sqlite3_stmt *st;
	int rc, i;

	memset(out, 0, sizeof *out);
	if (kss_rlock(s) != KS_OK)
		return KS_E_IO;
	st = s->r_probe;
	if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		for (rc = KS_OK, i = 0; i < 3; i++)
			if (!(*col[i] = strdup((const char *)
			    sqlite3_column_text(st, i))))
				rc = KS_E_NOMEM;
	} else
		rc = rc == SQLITE_DONE ? KS_E_NOT_FOUND : kss_failed(s, s->r,
		    rc, "probe");
	kss_release(st);
	pthread_mutex_unlock(&s->rlock);
	if (rc != KS_OK)
		ks_store_probe_free(out);
	return rc;
}

void ks_store_probe_free(ks_store_probe_t *p)
{
	free(p->probe);
	free(p->witness);
	free(p->fingerprints);
	memset(p, 0, sizeof *p);
}

int ks_store_probe_put(ks_store_t *s, const ks_store_probe_t *p)
{
	sqlite3_stmt *st;
	int rc;

	if (kss_wlock(s) != KS_OK)
		return KS_E_IO;
	st = p ? s->w_probe : s->w_probe_drop;
	if (p) {
		sqlite3_bind_text(st, 1, p->probe, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 2, p->witness, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, p->fingerprints, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 4, ks_wall_ms());
	}
	rc = sqlite3_step(st);
	rc = rc == SQLITE_DONE ? KS_OK : kss_failed(s, s->w, rc, "probe");
	kss_release(st);
	pthread_mutex_unlock(&s->wlock);
	return rc;
}
