/*
 * Deployments and their pins (schema 5): named lists of get-specs and the
 * keys they hold against eviction.
 */
#include <pthread.h>

#include "store_int.h"

static const kss_stmt_t stmts[] = {
	KSS_W(late_stale, "DELETE FROM late WHERE deployment = ?1 AND NOT "
	    "EXISTS (SELECT 1 FROM deployments WHERE name = ?1 AND specs = "
	    "?2)"),
	KSS_W(deploy, "INSERT INTO deployments (name, specs, created) VALUES "
	    "(?1, ?2, ?3) ON CONFLICT (name) DO UPDATE SET specs = ?2"),
	KSS_W(unpin, "DELETE FROM pins WHERE name = ?1"),
	KSS_W(pin, "INSERT OR IGNORE INTO pins (key, name) VALUES (?1, ?2)"),
	KSS_W(undeploy, "DELETE FROM deployments WHERE name = ?1"),
	KSS_W(late_drop, "DELETE FROM late WHERE deployment = ?1"),
	KSS_R(deployments, "SELECT d.name, d.specs, d.created, (SELECT "
	    "count(*) FROM pins p WHERE p.name = d.name) FROM deployments d "
	    "WHERE ?1 IS NULL OR d.name = ?1 ORDER BY d.name"),
	KSS_R(pinned, "SELECT 1 FROM pins WHERE key = ?1 AND name = ?2"),
	KSS_R(pins_others, "SELECT coalesce(sum(size), 0) FROM artifacts "
	    "WHERE key IN (SELECT key FROM pins WHERE name != ?1)"),
	KSS_R(pin_size, "SELECT size, key IN (SELECT key FROM pins WHERE "
	    "name != ?2) FROM artifacts WHERE key = ?1"),
	KSS_R(mean_kernel, "SELECT coalesce(avg(size), 0) FROM artifacts "
	    "WHERE kernel = ?1 AND backend = ?2"),
	KSS_R(mean_backend, "SELECT coalesce(avg(size), 0) FROM artifacts "
	    "WHERE backend = ?1"),
};
KSS_STMTS(kss_deploy_stmts, stmts);

/* Runs ST, a writer statement, with NAME bound to ?1, SPECS (when not
 * NULL) to ?2 and now (Unix ms) to ?3 when ST has it. */
static int exec_deployment(ks_store_t *s, sqlite3_stmt *st, const char *name,
    const char *specs, int *changes)
{
	int rc;

	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	if (specs)
		sqlite3_bind_text(st, 2, specs, -1, SQLITE_STATIC);
	if (sqlite3_bind_parameter_count(st) >= 3)
		sqlite3_bind_int64(st, 3, ks_wall_ms());
	rc = sqlite3_step(st);
	kss_release(st);
	if (rc != SQLITE_DONE)
		return kss_failed(s, s->w, rc, "deployment");
	if (changes)
		*changes = sqlite3_changes(s->w);
	return KS_OK;
}

int ks_store_deploy_set(ks_store_t *s, const char *name, const char *specs,
    const ks_hash_t *keys, size_t n)
{
	sqlite3_stmt *st;
	size_t i;
	int rc;

	if (kss_wlock(s) != KS_OK)
		return KS_E_IO;
	st = s->w_pin;
	rc = kss_begin(s);
	/* New specs: the late compiles were of the old ones (a repin at
	 * start writes the same specs, and keeps them). */
	if (rc == KS_OK)
		rc = exec_deployment(s, s->w_late_stale, name, specs, NULL);
	if (rc == KS_OK)
		rc = exec_deployment(s, s->w_deploy, name, specs, NULL);
	if (rc == KS_OK)
		rc = exec_deployment(s, s->w_unpin, name, NULL, NULL);
	for (i = 0; rc == KS_OK && i < n; i++) {
		kss_bind_key(st, 1, &keys[i]);
		sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
		if (sqlite3_step(st) != SQLITE_DONE)
			rc = kss_failed(s, s->w, sqlite3_errcode(s->w), "pins");
		sqlite3_reset(st);
	}
	kss_release(st);
	if (rc == KS_OK)
		rc = kss_commit(s);
	if (rc != KS_OK)
		kss_rollback(s);
	pthread_mutex_unlock(&s->wlock);
	return rc;
}

int ks_store_deploy_remove(ks_store_t *s, const char *name)
{
	int rc, n = 0;

	if (kss_wlock(s) != KS_OK)
		return KS_E_IO;
	rc = kss_begin(s);
	if (rc == KS_OK)
		rc = exec_deployment(s, s->w_undeploy, name, NULL, &n);
	if (rc == KS_OK)
		rc = exec_deployment(s, s->w_unpin, name, NULL, NULL);
	if (rc == KS_OK)
		rc = exec_deployment(s, s->w_late_drop, name, NULL, NULL);
	if (rc == KS_OK)
		rc = kss_commit(s);
	if (rc != KS_OK)
		kss_rollback(s);
	pthread_mutex_unlock(&s->wlock);
	return rc == KS_OK && n == 0 ? KS_E_NOT_FOUND : rc;
}

int ks_store_deployments(ks_store_t *s, const char *name,
    int (*cb)(void *ctx, const char *name, const char *specs,
    int64_t created, uint64_t pins), void *ctx)
{
	sqlite3_stmt *st;
	int rc, stop = 0;

	if (kss_rlock(s) != KS_OK)
		return KS_E_IO;
	st = s->r_deployments;
	if (name)
		sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	while (!stop && (rc = sqlite3_step(st)) == SQLITE_ROW)
		stop = cb(ctx, (const char *)sqlite3_column_text(st, 0),
		    (const char *)sqlite3_column_text(st, 1),
		    sqlite3_column_int64(st, 2),
		    (uint64_t)sqlite3_column_int64(st, 3));
	rc = stop ? stop : rc == SQLITE_DONE || rc == SQLITE_ROW ? KS_OK :
	    kss_failed(s, s->r, rc, "deployments");
	kss_release(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

int ks_store_pinned(ks_store_t *s, const char *name, const ks_hash_t *key)
{
	sqlite3_stmt *st;
	int rc;

	if (kss_rlock(s) != KS_OK)
		return KS_E_IO;
	st = s->r_pinned;
	kss_bind_key(st, 1, key);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	rc = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 :
	    kss_failed(s, s->r, rc, "pins");
	kss_release(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

/* One int64 of ST after binding TEXT1 and TEXT2 (when not NULL) to ?1 and
 * ?2, into *out (0 for NULL); the statement is reset. */
static int step_int64(ks_store_t *s, sqlite3_stmt *st, const char *text1,
    const char *text2, int64_t *out)
{
	int rc;

	sqlite3_reset(st);
	if (text1)
		sqlite3_bind_text(st, 1, text1, -1, SQLITE_STATIC);
	if (text2)
		sqlite3_bind_text(st, 2, text2, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW)
		return kss_failed(s, s->r, rc, "pins");
	*out = sqlite3_column_int64(st, 0);
	return KS_OK;
}

int ks_store_pin_bytes(ks_store_t *s, const char *name, const ks_hash_t *keys,
    const char *const *kernels, const char *const *backends, size_t n,
    uint64_t *bytes, size_t *estimated)
{
	sqlite3_stmt *others, *size, *by_kernel, *by_backend;
	int64_t v;
	size_t i;
	int rc;

	*bytes = 0;
	*estimated = 0;
	if (kss_rlock(s) != KS_OK)
		return KS_E_IO;
	others = s->r_pins_others;
	size = s->r_pin_size;
	by_kernel = s->r_mean_kernel;
	by_backend = s->r_mean_backend;
	rc = step_int64(s, others, name, NULL, &v);
	if (rc == KS_OK)
		*bytes = (uint64_t)v;
	for (i = 0; rc == KS_OK && i < n; i++) {
		sqlite3_reset(size);
		kss_bind_key(size, 1, &keys[i]);
		sqlite3_bind_text(size, 2, name, -1, SQLITE_STATIC);
		rc = sqlite3_step(size);
		if (rc == SQLITE_ROW) {
			/* One another deployment pins is counted above. */
			if (!sqlite3_column_int(size, 1))
				*bytes += (uint64_t)sqlite3_column_int64(size,
				    0);
			rc = KS_OK;
			continue;
		}
		if (rc != SQLITE_DONE) {
			rc = kss_failed(s, s->r, rc, "pins");
			break;
		}
		rc = step_int64(s, by_kernel, kernels[i], backends[i], &v);
		if (rc == KS_OK && v == 0)
			rc = step_int64(s, by_backend, backends[i], NULL, &v);
		if (rc == KS_OK) {
			*bytes += (uint64_t)v;
			(*estimated)++;
		}
	}
	kss_release(others);
	kss_release(size);
	kss_release(by_kernel);
	kss_release(by_backend);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}
