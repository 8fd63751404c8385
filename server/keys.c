/*
 * Request normalization and the request key (docs/architecture.md, "Keys").
 *
 * The key is BLAKE2b-256 over a canonical encoding of everything that
 * changes the artifact, and nothing else (not the id, not return:"meta",
 * not the order in which the client wrote its shape):
 *
 *   prefix  (per backend and target, absorbed once and cached):
 *           field("scheme", "kspec-key-v1"), field("codegen", version),
 *           field("backend", name), field("target", resolved target),
 *           field("compiler", the backend's identity: compiler version and
 *           every option that changes output)
 *   request: field("kernel", name), field("fingerprint", 32 raw bytes of
 *           the definition's fingerprint), per shape parameter in the
 *           kernel's declared order field(name, 8-byte little-endian value)
 *           or field(name, "dyn"), field("dtype", name), then
 *           field("wdtype", name) only when the weight dtype differs from
 *           the dtype (so a request without wdtype, or with wdtype equal to
 *           dtype, keeps the key it had before weight dtypes existed),
 *           field("mode", name), field("format", name)
 *
 * where field(n, v) is u64le(len n) n u64le(len v) v, so no two different
 * requests encode alike.  The encoding is stable across runs and machines;
 * changing it means bumping the scheme.  No IR is built here and nothing
 * is allocated: the request part is encoded into a stack buffer and hashed
 * in one update after copying the cached prefix state.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "keys.h"

#define KEY_SCHEME "kspec-key-v1"

/* strlcpy for the hit path (snprintf costs a format parse per call). */
static void copy_name(char *dst, size_t cap, const char *src)
{
	size_t n = strnlen(src, cap - 1);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* Returns the cached (target, identity) of a backend for a requested
 * target, resolving and filling the cache on first use. */
int ks_keys_ident_add(ks_keys_t *keys, const ks_backend_t *be,
    const char *requested, const char *target, const char *identity,
    ks_ident_t **out)
{
	ks_ident_t *id;
	char num[16];

	id = aligned_alloc(_Alignof(ks_ident_t), sizeof *id);
	if (!id)
		return KS_E_NOMEM;
	memset(id, 0, sizeof *id);
	id->identity = strdup(identity);
	if (!id->identity) {
		free(id);
		return KS_E_NOMEM;
	}
	id->backend = be;
	copy_name(id->requested, sizeof id->requested, requested);
	copy_name(id->target, sizeof id->target, target);
	snprintf(num, sizeof num, "%d", KS_CODEGEN_VERSION);
	ks_hasher_init(&id->prefix);
	ks_hasher_field(&id->prefix, "scheme", KEY_SCHEME);
	ks_hasher_field(&id->prefix, "codegen", num);
	ks_hasher_field(&id->prefix, "backend", be->name);
	ks_hasher_field(&id->prefix, "target", id->target);
	ks_hasher_field(&id->prefix, "compiler", id->identity);
	id->next = keys->idents;
	keys->idents = id;
	if (out)
		*out = id;
	return KS_OK;
}

static ks_binfo_t *backend_mut(ks_keys_t *keys,
    const ks_backend_t *be)
{
	int i;

	for (i = 0; i < keys->nbackends; i++)
		if (keys->backends[i].backend == be)
			return &keys->backends[i];
	return NULL;
}

const ks_binfo_t *ks_keys_backend(const ks_keys_t *keys,
    const ks_backend_t *be)
{
	return backend_mut((ks_keys_t *)keys, be);
}

int ks_keys_resolve(const ks_keys_t *keys, const ks_backend_t *be,
    const char *requested, const ks_ident_t **out, char *err,
    size_t errlen)
{
	const ks_binfo_t *bi = ks_keys_backend(keys, be);
	const ks_refusal_t *r;
	const ks_ident_t *id;
	ks_buf_t list;
	int i, has_auto = 0;

	/* Most requests say "auto": no walk of the table for them. */
	if (bi && bi->auto_id && requested[0] == 'a' &&
	    strcmp(requested, "auto") == 0) {
		*out = bi->auto_id;
		return KS_OK;
	}
	for (id = keys->idents; id; id = id->next) {
		if (id->backend == be && strcmp(id->requested, requested) == 0) {
			*out = id;
			return KS_OK;
		}
		has_auto |= id->backend == be && !strcmp(id->requested, "auto");
	}
	for (r = keys->refused; r; r = r->next) {
		if (r->backend == be && strcmp(r->requested, requested) == 0) {
			ks_set_err(err, errlen, "%s", r->message);
			return r->code;
		}
	}
	ks_buf_init(&list);
	for (i = 0; bi && i < bi->nlisted; i++)
		ks_buf_printf(&list, "%s%s", i ? ", " : "", bi->listed[i]);
	ks_set_err(err, errlen, "%s target '%.*s' is not accepted; use %s%s%s",
	    be->name, KS_MAX_NAME, requested, has_auto ? "auto" : "",
	    has_auto && list.data ? " or one of: " : list.data ? "one of: " :
	    "", list.data ? list.data : "");
	ks_buf_close(&list);
	return KS_E_BAD_TARGET;
}

/* ---- the probe ---- */

static const char *jstr(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int load_target(ks_keys_t *keys, const ks_backend_t *be,
    const cJSON *t)
{
	const char *req = jstr(t, "requested"), *tg = jstr(t, "target");
	const char *id = jstr(t, "identity");
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(t, "error");
	ks_refusal_t *r;

	if (!req || strlen(req) > KS_MAX_NAME)
		return KS_E_PROTO;
	if (tg && id) {
		ks_ident_t *added;
		int rc;

		if (strlen(tg) > KS_MAX_NAME)
			return KS_E_PROTO;
		rc = ks_keys_ident_add(keys, be, req, tg, id, &added);
		if (rc == KS_OK && strcmp(req, "auto") == 0)
			backend_mut(keys, be)->auto_id = added;
		return rc;
	}
	if (!jstr(e, "code") || !jstr(e, "message"))
		return KS_E_PROTO;
	r = calloc(1, sizeof *r);
	if (!r || !(r->message = strdup(jstr(e, "message")))) {
		free(r);
		return KS_E_NOMEM;
	}
	r->backend = be;
	copy_name(r->requested, sizeof r->requested, req);
	r->code = ks_err_from_name(jstr(e, "code"));
	r->next = keys->refused;
	keys->refused = r;
	return KS_OK;
}

static int load_backend(ks_keys_t *keys, const cJSON *b)
{
	const ks_backend_t *be = ks_backend_find(jstr(b, "name"));
	const cJSON *listed, *t;
	ks_binfo_t *bi;
	int rc, i = 0;

	if (!be || ks_keys_backend(keys, be) ||
	    keys->nbackends == KS_KEYS_MAX_BACKENDS)
		return KS_E_PROTO;
	bi = &keys->backends[keys->nbackends++];
	bi->backend = be;
	bi->available = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b,
	    "available"));
	if (!bi->available) {
		bi->reason = strdup(jstr(b, "reason") ? jstr(b, "reason") :
		    "unavailable");
		return bi->reason ? KS_OK : KS_E_NOMEM;
	}
	listed = cJSON_GetObjectItemCaseSensitive(b, "listed");
	bi->nlisted = cJSON_GetArraySize(listed);
	bi->listed = calloc(bi->nlisted ? (size_t)bi->nlisted : 1,
	    sizeof *bi->listed);
	if (!bi->listed)
		return KS_E_NOMEM;
	cJSON_ArrayForEach(t, listed) {
		if (!cJSON_IsString(t) || strlen(t->valuestring) > KS_MAX_NAME)
			return KS_E_PROTO;
		copy_name(bi->listed[i++], KS_MAX_NAME + 1, t->valuestring);
	}
	cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(b, "targets"))
		if ((rc = load_target(keys, be, t)) != KS_OK)
			return rc;
	return KS_OK;
}

int ks_keys_load_probe(ks_keys_t *keys, const char *json, char *err,
    size_t errlen)
{
	cJSON *j = cJSON_Parse(json);
	const cJSON *cg = cJSON_GetObjectItemCaseSensitive(j, "codegen");
	const cJSON *b;
	int rc = KS_OK;

	if (!cJSON_IsObject(j) || !cJSON_IsNumber(cg) ||
	    cg->valueint != KS_CODEGEN_VERSION) {
		ks_set_err(err, errlen, "the probe is malformed or from "
		    "another code generation");
		cJSON_Delete(j);
		return KS_E_PROTO;
	}
	cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(j, "backends"))
		if ((rc = load_backend(keys, b)) != KS_OK)
			break;
	cJSON_Delete(j);
	if (rc)
		ks_set_err(err, errlen, "the probe is malformed (%s)",
		    ks_err_name(rc));
	return rc;
}

/* Appends field(name, value) of the canonical encoding to ENC; the caller
 * sized ENC for the worst case. */
static size_t put_field(uint8_t *enc, size_t at, const char *name,
    const void *value, size_t vlen)
{
	size_t nlen = strlen(name);
	uint64_t n;
	int i;

	for (n = nlen, i = 0; i < 8; i++, n >>= 8)
		enc[at++] = (uint8_t)n;
	memcpy(enc + at, name, nlen);
	at += nlen;
	for (n = vlen, i = 0; i < 8; i++, n >>= 8)
		enc[at++] = (uint8_t)n;
	memcpy(enc + at, value, vlen);
	return at + vlen;
}

static int kernel_index(const ks_kernel_def_t *def)
{
	const ks_kernel_def_t *const *all;
	int i, n;

	all = ks_kernels(&n);
	for (i = 0; i < n; i++)
		if (all[i] == def)
			return i;
	return -1;
}

/* The key of SPEC (validated, of the KI-th kernel) in FORMAT under
 * IDENT: the cached prefix, then the request's fields. */
static void key_of(const ks_keys_t *keys, const ks_ident_t *ident, int ki,
    const ks_spec_t *spec, const char *format, ks_hash_t *out)
{
	const ks_kernel_def_t *def = spec->def;
	/* Worst case: 7 fixed fields and KS_MAX_DIMS dims, each two 8-byte
	 * lengths, a name of at most KS_MAX_NAME and a value of at most 64. */
	uint8_t enc[(7 + KS_MAX_DIMS) * (16 + KS_MAX_NAME + 64)];
	const char *dt = ks_dtype_name(spec->dtype);
	size_t at = 0;
	ks_hasher_t h;
	int i;

	at = put_field(enc, at, "kernel", def->name, strlen(def->name));
	at = put_field(enc, at, "fingerprint", keys->fingerprints[ki].b,
	    KS_HASH_BYTES);
	for (i = 0; i < spec->ndims; i++) {
		const ks_dim_t *d = &spec->dims[i];
		uint8_t le[8];
		uint64_t v = (uint64_t)d->value;
		int j;

		if (!d->is_const) {
			at = put_field(enc, at, d->name, "dyn", 3);
			continue;
		}
		for (j = 0; j < 8; j++, v >>= 8)
			le[j] = (uint8_t)v;
		at = put_field(enc, at, d->name, le, sizeof le);
	}
	at = put_field(enc, at, "dtype", dt, strlen(dt));
	if (spec->wdtype != spec->dtype) {
		dt = ks_dtype_name(spec->wdtype);
		at = put_field(enc, at, "wdtype", dt, strlen(dt));
	}
	at = put_field(enc, at, "mode", spec->mode == KS_MODE_FAST ? "fast" :
	    "exact", spec->mode == KS_MODE_FAST ? 4 : 5);
	at = put_field(enc, at, "format", format, strlen(format));
	memcpy(&h, &ident->prefix, sizeof h);
	ks_hasher_update(&h, enc, at);
	ks_hasher_final(&h, out);
}

int ks_keys_normalize(ks_keys_t *keys, const ks_get_req_t *req,
    ks_get_t *out, char *err, size_t errlen)
{
	const ks_kernel_def_t *def;
	ks_dim_t dims[2 * KS_MAX_DIMS];
	ks_dtype_t dtype, wdtype;
	ks_mode_t mode;
	const ks_binfo_t *bi;
	const ks_ident_t *ident;
	char beerr[256];
	int i, nb, nd = 0, rc, ki, known;

	memcpy(out->deployment, req->deployment, sizeof out->deployment);
	def = ks_kernel_find(req->kernel);
	if (!def) {
		snprintf(err, errlen, "no kernel named '%s' (see `kspec "
		    "kernels`)", req->kernel);
		return KS_E_UNKNOWN_KERNEL;
	}
	out->backend = ks_backend_find(req->backend);
	if (!out->backend) {
		const ks_backend_t *const *all = ks_backends(&nb);
		int n = snprintf(err, errlen, "no backend named '%s' (known:",
		    req->backend);

		for (i = 0; i < nb && n > 0 && (size_t)n < errlen; i++)
			n += snprintf(err + n, errlen - (size_t)n, " %s",
			    all[i]->name);
		if (n > 0 && (size_t)n < errlen)
			snprintf(err + n, errlen - (size_t)n, ")");
		return KS_E_BAD_BACKEND;
	}
	bi = ks_keys_backend(keys, out->backend);
	if (!bi || !bi->available) {
		snprintf(err, errlen, "backend %s is unavailable: %s",
		    out->backend->name, bi ? bi->reason : "the compile workers "
		    "have not reported it");
		return KS_E_BACKEND_UNAVAILABLE;
	}
	/* The hint only for a name that is a dtype, a block format's: DTYPE
	 * is not set when the name is none. */
	known = ks_dtype_parse(req->dtype, &dtype) == 0;
	if (!known || dtype >= KS_DTYPE_COUNT) {
		snprintf(err, errlen, "dtype '%s' is not one of f32, f16, bf16%s",
		    req->dtype, known ? " (a block format is a weight dtype: "
		    "wdtype)" : "");
		return KS_E_BAD_DTYPE;
	}
	wdtype = dtype;
	if (req->wdtype[0] && ks_dtype_parse(req->wdtype, &wdtype)) {
		snprintf(err, errlen, "wdtype '%s' is not one of f32, f16, "
		    "bf16, q8_0, q4_0, q4_k", req->wdtype);
		return KS_E_BAD_DTYPE;
	}
	if (strcmp(req->mode, "exact") == 0) {
		mode = KS_MODE_EXACT;
	} else if (strcmp(req->mode, "fast") == 0) {
		mode = KS_MODE_FAST;
	} else {
		snprintf(err, errlen, "mode '%s' is not exact or fast",
		    req->mode);
		return KS_E_BAD_MODE;
	}
	if (req->format[0]) {
		if (out->backend->check_format(req->format)) {
			snprintf(err, errlen, "backend %s does not produce "
			    "format '%s'", out->backend->name, req->format);
			return KS_E_BAD_FORMAT;
		}
		copy_name(out->format, sizeof out->format, req->format);
	} else {
		copy_name(out->format, sizeof out->format,
		    out->backend->default_format);
	}

	for (i = 0; i < req->nshape; i++, nd++) {
		dims[nd].name = req->shape[i].name;
		dims[nd].is_const = 1;
		dims[nd].value = req->shape[i].value;
	}
	for (i = 0; i < req->ndynamic; i++, nd++) {
		dims[nd].name = req->dynamic[i];
		dims[nd].is_const = 0;
		dims[nd].value = 0;
	}
	rc = ks_kernel_validate_mixed(def, dtype, wdtype, mode, dims, nd,
	    &out->spec, err, errlen);
	if (rc)
		return rc;

	beerr[0] = '\0';
	rc = ks_keys_resolve(keys, out->backend, req->target, &ident, beerr,
	    sizeof beerr);
	if (rc) {
		snprintf(err, errlen, "%s", beerr[0] ? beerr :
		    ks_strerror(rc));
		return rc;
	}
	out->target = ident->target;
	out->requested = ident->requested;
	out->identity = ident->identity;

	ki = kernel_index(def);
	if (ki < 0 || ki >= keys->nkernels)
		return KS_E_INTERNAL;
	out->kernel_index = ki;
	key_of(keys, ident, ki, &out->spec, out->format, &out->key);
	return KS_OK;
}

/* Reads a store's shape column ("M=1,N=64,K=dyn") into DIMS, their names
 * pointing into BUF (a copy); the count, or -1 when it is not one. */
static int shape_dims(const char *shape, char *buf, size_t buflen,
    ks_dim_t *dims)
{
	char *p = buf, *item, *eq, *end;
	int n = 0;

	if (strlen(shape) >= buflen)
		return -1;
	strcpy(buf, shape);
	while (*p) {
		item = p;
		p = strchr(p, ',');
		if (p)
			*p++ = '\0';
		else
			p = item + strlen(item);
		eq = strchr(item, '=');
		if (!eq || eq == item || n == 2 * KS_MAX_DIMS)
			return -1;
		*eq++ = '\0';
		dims[n].name = item;
		dims[n].is_const = strcmp(eq, "dyn") != 0;
		dims[n].value = 0;
		if (dims[n].is_const) {
			errno = 0;
			dims[n].value = strtoll(eq, &end, 10);
			if (errno || end == eq || *end)
				return -1;
		}
		n++;
	}
	return n;
}

int ks_keys_check_entry(const ks_keys_t *keys, const ks_store_entry_t *e,
    const char **why)
{
	return ks_keys_entry_get(keys, e, NULL, why);
}

int ks_keys_entry_get(const ks_keys_t *keys, const ks_store_entry_t *e,
    ks_get_t *out, const char **why)
{
	const ks_kernel_def_t *def = ks_kernel_find(e->kernel);
	const ks_backend_t *be = ks_backend_find(e->backend);
	const ks_binfo_t *bi = be ? ks_keys_backend(keys, be) : NULL;
	char buf[KS_MAX_DIMS * (KS_MAX_NAME + 24)], msg[256];
	ks_dim_t dims[2 * KS_MAX_DIMS];
	const ks_ident_t *id;
	ks_dtype_t dtype;
	ks_mode_t mode = KS_MODE_EXACT;
	ks_spec_t spec;
	ks_hash_t k;
	int nd, ki, w, seen = 0, same_compiler = 0;

	if (!def || (ki = kernel_index(def)) < 0 || ki >= keys->nkernels) {
		*why = "kernel";
		return KS_KEYS_STALE;
	}
	/* A backend this daemon cannot use now (no NVRTC, no OpenCL device,
	 * one it does not know) says nothing of the entries it made. */
	if (!bi || !bi->available) {
		*why = "backend";
		return KS_KEYS_UNCHECKED;
	}
	nd = shape_dims(e->shape, buf, sizeof buf, dims);
	if (nd < 0 || ks_dtype_parse(e->dtype, &dtype) ||
	    (strcmp(e->mode, "exact") && strcmp(e->mode, "fast")) ||
	    be->check_format(e->format)) {
		*why = "spec";
		return KS_KEYS_STALE;
	}
	if (strcmp(e->mode, "fast") == 0)
		mode = KS_MODE_FAST;
	if (ks_kernel_validate(def, dtype, mode, dims, nd, &spec, msg,
	    sizeof msg)) {
		*why = "spec";
		return KS_KEYS_STALE;
	}
	/* Every identity the backend has for the entry's target: "auto" and
	 * the target named resolve alike, and give the same key.  The store
	 * keeps no weight dtype (its dtype column is the request's dtype), so
	 * each one the kernel takes with the dtype is tried: the entry's key
	 * says which it was made for. */
	for (id = keys->idents; id; id = id->next) {
		if (id->backend != be || strcmp(id->target, e->target))
			continue;
		seen = 1;
		for (w = 0; w <= KS_DTYPE_ALL; w++) {
			spec.wdtype = w == 0 ? dtype : (ks_dtype_t)(w - 1);
			if ((w > 0 && spec.wdtype == dtype) ||
			    !ks_kernel_wdtype_ok(def, dtype, spec.wdtype))
				continue;
			key_of(keys, id, ki, &spec, e->format, &k);
			if (ks_hash_eq(&k, &e->key))
				break;
			if (w == 0 && def->wmix == KS_WMIX_NONE)
				break;
		}
		if (!ks_hash_eq(&k, &e->key)) {
			same_compiler |= strcmp(id->identity, e->compiler) == 0;
			continue;
		}
		if (out) {
			/* The spec's dim names are the definition's
			 * (ks_kernel_validate), not BUF's. */
			memset(out, 0, sizeof *out);
			out->spec = spec;
			out->backend = be;
			out->target = id->target;
			out->requested = id->requested;
			out->identity = id->identity;
			out->kernel_index = ki;
			snprintf(out->format, sizeof out->format, "%s",
			    e->format);
			out->key = k;
		}
		return KS_KEYS_CURRENT;
	}
	if (!seen) {
		/* Another GPU or toolkit than this daemon's: kept. */
		*why = "target";
		return KS_KEYS_UNCHECKED;
	}
	/* The compiler is today's, yet the key differs: the kernel's
	 * definition, or kspec's code generation, changed (as explain's
	 * nearest says). */
	*why = same_compiler ? "fingerprint" : "compiler";
	return KS_KEYS_STALE;
}

int ks_keys_components(const ks_keys_t *keys, const ks_get_t *g,
    ks_buf_t *o)
{
	const ks_hash_t *h = ks_keys_fingerprint(keys, g->spec.def);
	char fp[KS_HASH_HEX];
	int i;

	if (!h)
		return KS_E_INTERNAL;
	ks_hash_hex(h, fp);
	ks_buf_printf(o, "{\"scheme\":\"%s\",\"codegen\":%d,\"kernel\":\"%s\","
	    "\"fingerprint\":\"%s\",\"shape\":{", KEY_SCHEME,
	    KS_CODEGEN_VERSION, g->spec.def->name, fp);
	for (i = 0; i < g->spec.ndims; i++) {
		const ks_dim_t *d = &g->spec.dims[i];

		if (d->is_const)
			ks_buf_printf(o, "%s\"%s\":%lld", i ? "," : "", d->name,
			    (long long)d->value);
		else
			ks_buf_printf(o, "%s\"%s\":\"dyn\"", i ? "," : "",
			    d->name);
	}
	ks_buf_printf(o, "},\"dtype\":\"%s\"", ks_dtype_name(g->spec.dtype));
	ks_get_wdtype_json(g, o);
	ks_buf_printf(o, ",\"mode\":\"%s\",\"backend\":"
	    "\"%s\",\"target\":\"%s\",\"format\":\"%s\",\"compiler\":",
	    g->spec.mode == KS_MODE_FAST ?
	    "fast" : "exact", g->backend->name, g->target, g->format);
	ks_buf_json_str(o, g->identity);
	return ks_buf_puts(o, "}");
}

const ks_hash_t *ks_keys_fingerprint(const ks_keys_t *keys,
    const ks_kernel_def_t *def)
{
	int ki = kernel_index(def);

	return ki < 0 || ki >= keys->nkernels ? NULL :
	    &keys->fingerprints[ki];
}

int ks_keys_init_unprinted(ks_keys_t *keys)
{
	int n;

	memset(keys, 0, sizeof *keys);
	ks_kernels(&n);
	if (n > KS_KEYS_MAX_KERNELS)
		return KS_E_INTERNAL;
	keys->nkernels = n;
	return KS_OK;
}

int ks_keys_fingerprints_compute(ks_hash_t *out, int max)
{
	const ks_kernel_def_t *const *all;
	int i, n;

	all = ks_kernels(&n);
	if (n > max)
		return KS_E_INTERNAL;
	for (i = 0; i < n; i++) {
		const ks_hash_t *h = ks_kernel_fingerprint(all[i]);

		if (!h)
			return KS_E_INTERNAL;
		out[i] = *h;
	}
	return KS_OK;
}

void ks_keys_set_fingerprints(ks_keys_t *keys, const ks_hash_t *fps)
{
	memcpy(keys->fingerprints, fps, (size_t)keys->nkernels *
	    sizeof *fps);
}

int ks_keys_init(ks_keys_t *keys)
{
	int rc = ks_keys_init_unprinted(keys);

	if (rc == KS_OK)
		rc = ks_keys_fingerprints_compute(keys->fingerprints,
		    KS_KEYS_MAX_KERNELS);
	return rc;
}

void ks_keys_forget_probe(ks_keys_t *keys)
{
	ks_ident_t *id, *next;
	ks_refusal_t *r, *rn;
	int i;

	for (id = keys->idents; id; id = next) {
		next = id->next;
		id->next = keys->retired;
		keys->retired = id;
	}
	keys->idents = NULL;
	for (r = keys->refused; r; r = rn) {
		rn = r->next;
		free(r->message);
		free(r);
	}
	keys->refused = NULL;
	for (i = 0; i < keys->nbackends; i++) {
		free(keys->backends[i].reason);
		free(keys->backends[i].listed);
	}
	memset(keys->backends, 0, sizeof keys->backends);
	keys->nbackends = 0;
}

void ks_keys_close(ks_keys_t *keys)
{
	ks_ident_t *id, *next;

	ks_keys_forget_probe(keys);
	for (id = keys->retired; id; id = next) {
		next = id->next;
		free(id->identity);
		free(id);
	}
	keys->retired = NULL;
}

/* Appends ,"NAME":{constant dims},"dynamic":[dynamic dims] of G. */
int ks_get_dims_json(const ks_get_t *g, int constants, ks_buf_t *o)
{
	int i, first;

	ks_buf_puts(o, constants ? "{" : "[");
	for (i = 0, first = 1; i < g->spec.ndims; i++) {
		const ks_dim_t *d = &g->spec.dims[i];

		if (d->is_const != constants)
			continue;
		if (constants)
			ks_buf_printf(o, "%s\"%s\":%" PRId64, first ? "" : ",",
			    d->name, d->value);
		else
			ks_buf_printf(o, "%s\"%s\"", first ? "" : ",",
			    d->name);
		first = 0;
	}
	return ks_buf_puts(o, constants ? "}" : "]");
}

static int dims_json(const ks_get_t *g, const char *name, ks_buf_t *o)
{
	ks_buf_printf(o, ",\"%s\":", name);
	ks_get_dims_json(g, 1, o);
	ks_buf_puts(o, ",\"dynamic\":");
	return ks_get_dims_json(g, 0, o);
}

void ks_get_wdtype_json(const ks_get_t *g, ks_buf_t *o)
{
	if (g->spec.wdtype != g->spec.dtype)
		ks_buf_printf(o, ",\"wdtype\":\"%s\"",
		    ks_dtype_name(g->spec.wdtype));
}

void ks_get_guard_json(const ks_get_t *g, ks_buf_t *o)
{
	dims_json(g, "guard", o);
}

int ks_get_spec_json(const ks_get_t *g, ks_buf_t *o)
{
	ks_buf_printf(o, "{\"kernel\":\"%s\",\"backend\":\"%s\",\"target\":",
	    g->spec.def->name, g->backend->name);
	ks_buf_json_str(o, g->requested);
	ks_buf_printf(o, ",\"dtype\":\"%s\"", ks_dtype_name(g->spec.dtype));
	ks_get_wdtype_json(g, o);
	ks_buf_printf(o, ",\"mode\":\"%s\",\"format\":",
	    g->spec.mode == KS_MODE_FAST ? "fast" : "exact");
	ks_buf_json_str(o, g->format);
	dims_json(g, "shape", o);
	return ks_buf_puts(o, "}");
}
