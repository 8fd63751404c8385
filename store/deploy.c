/*
 * Deployments and their pins (schema 5): named lists of get-specs and the
 * keys they hold against eviction.
 */
#include <pthread.h>

#include "store_int.h"

/* Runs SQL on the writer's connection with NAME bound to ?1, SPECS (when
 * not NULL) to ?2 and now (Unix ms) to ?3 when SQL has it. */
static int exec_deployment(ks_store_t *s, const char *sql, const char *name,
    const char *specs, int *changes)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(s->w, sql, -1, &st, NULL);

	if (rc == SQLITE_OK) {
		sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
		if (specs)
			sqlite3_bind_text(st, 2, specs, -1, SQLITE_STATIC);
		if (sqlite3_bind_parameter_count(st) >= 3)
			sqlite3_bind_int64(st, 3, ks_wall_ms());
		rc = sqlite3_step(st);
	}
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE)
		return kss_failed(s, s->w, rc, "deployment");
	if (changes)
		*changes = sqlite3_changes(s->w);
	return KS_OK;
}

int ks_store_deploy_set(ks_store_t *s, const char *name, const char *specs,
    const ks_hash_t *keys, size_t n)
{
	sqlite3_stmt *st = NULL;
	size_t i;
	int rc;

	pthread_mutex_lock(&s->wlock);
	rc = kss_begin(s);
	/* New specs: the late compiles were of the old ones (a repin at
	 * start writes the same specs, and keeps them). */
	if (rc == KS_OK)
		rc = exec_deployment(s, "DELETE FROM late WHERE deployment = ?1 "
		    "AND NOT EXISTS (SELECT 1 FROM deployments WHERE name = ?1 "
		    "AND specs = ?2)", name, specs, NULL);
	if (rc == KS_OK)
		rc = exec_deployment(s, "INSERT INTO deployments (name, specs, "
		    "created) VALUES (?1, ?2, ?3) ON CONFLICT (name) DO UPDATE "
		    "SET specs = ?2", name, specs, NULL);
	if (rc == KS_OK)
		rc = exec_deployment(s, "DELETE FROM pins WHERE name = ?1", name,
		    NULL, NULL);
	if (rc == KS_OK && sqlite3_prepare_v2(s->w, "INSERT OR IGNORE INTO "
	    "pins (key, name) VALUES (?1, ?2)", -1, &st, NULL) != SQLITE_OK)
		rc = kss_failed(s, s->w, sqlite3_errcode(s->w), "pins");
	for (i = 0; rc == KS_OK && i < n; i++) {
		kss_bind_key(st, 1, &keys[i]);
		sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
		if (sqlite3_step(st) != SQLITE_DONE)
			rc = kss_failed(s, s->w, sqlite3_errcode(s->w), "pins");
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
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

	pthread_mutex_lock(&s->wlock);
	rc = kss_begin(s);
	if (rc == KS_OK)
		rc = exec_deployment(s, "DELETE FROM deployments WHERE name = ?1",
		    name, NULL, &n);
	if (rc == KS_OK)
		rc = exec_deployment(s, "DELETE FROM pins WHERE name = ?1", name,
		    NULL, NULL);
	if (rc == KS_OK)
		rc = exec_deployment(s, "DELETE FROM late WHERE deployment = ?1",
		    name, NULL, NULL);
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
	sqlite3_stmt *st = NULL;
	int rc, stop = 0;

	pthread_mutex_lock(&s->rlock);
	rc = sqlite3_prepare_v2(s->r, "SELECT d.name, d.specs, d.created, "
	    "(SELECT count(*) FROM pins p WHERE p.name = d.name) FROM "
	    "deployments d WHERE ?1 IS NULL OR d.name = ?1 ORDER BY d.name",
	    -1, &st, NULL);
	if (rc == SQLITE_OK) {
		if (name)
			sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
		while (!stop && (rc = sqlite3_step(st)) == SQLITE_ROW)
			stop = cb(ctx, (const char *)sqlite3_column_text(st, 0),
			    (const char *)sqlite3_column_text(st, 1),
			    sqlite3_column_int64(st, 2),
			    (uint64_t)sqlite3_column_int64(st, 3));
	}
	rc = stop ? stop : rc == SQLITE_DONE || rc == SQLITE_ROW ? KS_OK :
	    kss_failed(s, s->r, rc, "deployments");
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

int ks_store_pinned(ks_store_t *s, const char *name, const ks_hash_t *key)
{
	sqlite3_stmt *st = NULL;
	int rc;

	pthread_mutex_lock(&s->rlock);
	rc = sqlite3_prepare_v2(s->r, "SELECT 1 FROM pins WHERE key = ?1 AND "
	    "name = ?2", -1, &st, NULL);
	if (rc == SQLITE_OK) {
		kss_bind_key(st, 1, key);
		sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
		rc = sqlite3_step(st);
	}
	rc = rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 :
	    kss_failed(s, s->r, rc, "pins");
	sqlite3_finalize(st);
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
	sqlite3_stmt *others = NULL, *size = NULL, *by_kernel = NULL;
	sqlite3_stmt *by_backend = NULL;
	int64_t v;
	size_t i;
	int rc;

	*bytes = 0;
	*estimated = 0;
	pthread_mutex_lock(&s->rlock);
	rc = sqlite3_prepare_v2(s->r, "SELECT coalesce(sum(size), 0) FROM "
	    "artifacts WHERE key IN (SELECT key FROM pins WHERE name != ?1)",
	    -1, &others, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(s->r, "SELECT size, key IN (SELECT "
		    "key FROM pins WHERE name != ?2) FROM artifacts WHERE key "
		    "= ?1", -1, &size, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(s->r, "SELECT coalesce(avg(size), 0) "
		    "FROM artifacts WHERE kernel = ?1 AND backend = ?2", -1,
		    &by_kernel, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(s->r, "SELECT coalesce(avg(size), 0) "
		    "FROM artifacts WHERE backend = ?1", -1, &by_backend,
		    NULL);
	rc = rc == SQLITE_OK ? step_int64(s, others, name, NULL, &v) :
	    kss_failed(s, s->r, rc, "pins");
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
	sqlite3_finalize(others);
	sqlite3_finalize(size);
	sqlite3_finalize(by_kernel);
	sqlite3_finalize(by_backend);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}
