/*
 * What an entry is (schema 4): the entry columns of a row, read from its
 * meta by a put and by the v3 -> v4 migration, and read back by listings
 * and the audit.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

static const char *const entry_col_names[EC_N] = {
	"kernel", "variant", "backend", "target", "dtype", "mode", "format",
	"shape", "compiler",
};

void kss_entry_cols_free(struct entry_cols *c)
{
	cJSON_Delete(c->tree);
	ks_buf_close(&c->shape);
}

cJSON *ks_meta_parse(const char *meta, size_t meta_len)
{
	char *text = malloc(meta_len + 3);
	cJSON *m;

	if (!text)
		return NULL;
	text[0] = '{';
	memcpy(text + 1, meta, meta_len);
	text[meta_len + 1] = '}';
	text[meta_len + 2] = '\0';
	m = cJSON_ParseWithLength(text, meta_len + 2);
	free(text);
	if (!cJSON_IsObject(m)) {
		cJSON_Delete(m);
		return NULL;
	}
	return m;
}

/*
 * Fills C from META (a reply's fields without braces, as store.h says).
 * A meta that is not such a fragment leaves every column "": the row is
 * still served (its checksums cover meta), only not described.  KS_OK, or
 * KS_E_NOMEM.
 */
int kss_entry_cols_of(const char *meta, size_t meta_len,
    struct entry_cols *c)
{
	const cJSON *guard, *dyn, *v;
	int i, rc = KS_OK;

	memset(c, 0, sizeof *c);
	ks_buf_init(&c->shape);
	for (i = 0; i < EC_N; i++)
		c->v[i] = "";
	/* An allocation that fails here is taken for a meta that is not
	 * JSON: the row goes in undescribed rather than not at all. */
	c->tree = ks_meta_parse(meta, meta_len);
	if (!c->tree)
		return KS_OK;
	for (i = 0; i < EC_N; i++) {
		v = cJSON_GetObjectItemCaseSensitive(c->tree,
		    entry_col_names[i]);
		if (i != EC_SHAPE && cJSON_IsString(v))
			c->v[i] = v->valuestring;
	}
	guard = cJSON_GetObjectItemCaseSensitive(c->tree, "guard");
	dyn = cJSON_GetObjectItemCaseSensitive(c->tree, "dynamic");
	if (!cJSON_IsObject(guard))
		guard = NULL;
	if (!cJSON_IsArray(dyn))
		dyn = NULL;
	cJSON_ArrayForEach(v, guard) {
		if (!cJSON_IsNumber(v) || !v->string)
			continue;
		rc |= ks_buf_printf(&c->shape, "%s%s=%lld", c->shape.len ?
		    "," : "", v->string, (long long)v->valuedouble);
	}
	cJSON_ArrayForEach(v, dyn) {
		if (cJSON_IsString(v))
			rc |= ks_buf_printf(&c->shape, "%s%s=dyn",
			    c->shape.len ? "," : "", v->valuestring);
	}
	if (rc)
		return KS_E_NOMEM;
	if (c->shape.data)
		c->v[EC_SHAPE] = c->shape.data;
	return KS_OK;
}

int ks_store_entry_of(const ks_hash_t *key, const char *meta,
    size_t meta_len, uint64_t size,
    int (*cb)(void *ctx, const ks_store_entry_t *e), void *ctx)
{
	struct entry_cols c;
	ks_store_entry_t e;
	int rc;

	if (kss_entry_cols_of(meta, meta_len, &c) != KS_OK) {
		kss_entry_cols_free(&c);
		return KS_E_NOMEM;
	}
	memset(&e, 0, sizeof e);
	e.key = *key;
	e.kernel = c.v[EC_KERNEL];
	e.variant = c.v[EC_VARIANT];
	e.backend = c.v[EC_BACKEND];
	e.target = c.v[EC_TARGET];
	e.dtype = c.v[EC_DTYPE];
	e.mode = c.v[EC_MODE];
	e.format = c.v[EC_FORMAT];
	e.shape = c.v[EC_SHAPE];
	e.compiler = c.v[EC_COMPILER];
	e.size = size;
	rc = cb(ctx, &e);
	kss_entry_cols_free(&c);
	return rc;
}

/* Binds C to the entry columns of an INSERT_ROW statement. */
int kss_bind_entry_cols(sqlite3_stmt *st, const struct entry_cols *c)
{
	int i, rc = SQLITE_OK;

	for (i = 0; i < EC_N && rc == SQLITE_OK; i++)
		rc = sqlite3_bind_text(st, COL_PUT_ENTRY + i, c->v[i], -1,
		    SQLITE_STATIC);
	return rc;
}

/* The entry columns of ST from column FIRST on, in table order, into E
 * (the strings live until ST steps again). */
void kss_column_entry(sqlite3_stmt *st, int first, ks_store_entry_t *e)
{
	const char **f[EC_N] = { &e->kernel, &e->variant, &e->backend,
	    &e->target, &e->dtype, &e->mode, &e->format, &e->shape,
	    &e->compiler };
	int i;

	for (i = 0; i < EC_N; i++)
		*f[i] = kss_column_str(st, first + i);
}
