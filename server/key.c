/*
 * Request normalization and the request key (DESIGN.md section 7).
 *
 * The key is BLAKE2b-256 over length-prefixed (name, value) fields in one
 * fixed order: the key scheme version, the codegen version, kernel name and
 * definition fingerprint, every shape parameter in the kernel's declared
 * order as a constant or "dyn", dtype, mode, backend, resolved target,
 * format and the backend's compiler identity (compiler version and every
 * option that changes output).  Any input that changes the artifact is in
 * it; nothing else is (not the id, not return:"meta", not the order in
 * which the client wrote its shape).  No IR is built here.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define KEY_SCHEME "kspec-key-v1"

/* Returns the cached (target, identity) of a backend for a requested
 * target, resolving and filling the cache on first use. */
static int ident_lookup(ks_srv_t *srv, const ks_backend_t *be,
    const char *requested, ks_ident_t **out, char *err, size_t errlen)
{
	ks_ident_t *id;
	ks_buf_t b;
	int rc;

	for (id = srv->idents; id; id = id->next) {
		if (id->backend == be && strcmp(id->requested, requested) == 0) {
			*out = id;
			return KS_OK;
		}
	}
	id = calloc(1, sizeof *id);
	if (!id)
		return KS_E_NOMEM;
	rc = be->resolve_target(requested, id->target, sizeof id->target,
	    err, errlen);
	if (rc) {
		free(id);
		return rc;
	}
	ks_buf_init(&b);
	rc = be->identity(id->target, &b);
	if (rc || !b.data) {
		ks_buf_close(&b);
		free(id);
		snprintf(err, errlen, "backend %s: cannot read its compiler "
		    "identity", be->name);
		return rc ? rc : KS_E_INTERNAL;
	}
	id->backend = be;
	snprintf(id->requested, sizeof id->requested, "%s", requested);
	id->identity = ks_buf_steal(&b, NULL);
	id->next = srv->idents;
	srv->idents = id;
	*out = id;
	return KS_OK;
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

int ks_srv_normalize(ks_srv_t *srv, const ks_get_req_t *req, ks_get_t *out,
    char *err, size_t errlen)
{
	const ks_kernel_def_t *def;
	ks_dim_t dims[2 * KS_MAX_DIMS];
	ks_dtype_t dtype;
	ks_mode_t mode;
	ks_ident_t *ident;
	ks_hasher_t h;
	char num[32], beerr[256];
	int i, nd = 0, rc, ki;

	def = ks_kernel_find(req->kernel);
	if (!def) {
		snprintf(err, errlen, "no kernel named '%s' (see `kspec "
		    "kernels`)", req->kernel);
		return KS_E_UNKNOWN_KERNEL;
	}
	out->backend = ks_backend_find(req->backend);
	if (!out->backend) {
		snprintf(err, errlen, "no backend named '%s' (cpu, cuda, "
		    "opencl)", req->backend);
		return KS_E_BAD_BACKEND;
	}
	beerr[0] = '\0';
	rc = out->backend->available(beerr, sizeof beerr);
	if (rc) {
		snprintf(err, errlen, "backend %s is unavailable: %s",
		    out->backend->name, beerr);
		return KS_E_BACKEND_UNAVAILABLE;
	}
	if (ks_dtype_parse(req->dtype, &dtype)) {
		snprintf(err, errlen, "dtype '%s' is not one of f32, f16, bf16",
		    req->dtype);
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
		snprintf(out->format, sizeof out->format, "%s", req->format);
	} else {
		snprintf(out->format, sizeof out->format, "%s",
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
	rc = ks_kernel_validate(def, dtype, mode, dims, nd, &out->spec, err,
	    errlen);
	if (rc)
		return rc;

	beerr[0] = '\0';
	rc = ident_lookup(srv, out->backend, req->target, &ident, beerr,
	    sizeof beerr);
	if (rc) {
		snprintf(err, errlen, "%s", beerr[0] ? beerr :
		    ks_strerror(rc));
		return rc;
	}
	out->target = ident->target;
	out->identity = ident->identity;

	ki = kernel_index(def);
	if (ki < 0 || ki >= (int)(sizeof srv->fingerprints /
	    sizeof srv->fingerprints[0]))
		return KS_E_INTERNAL;

	ks_hasher_init(&h);
	ks_hasher_field(&h, "scheme", KEY_SCHEME);
	snprintf(num, sizeof num, "%d", KS_CODEGEN_VERSION);
	ks_hasher_field(&h, "codegen", num);
	ks_hasher_field(&h, "kernel", def->name);
	ks_hasher_field(&h, "fingerprint", srv->fingerprints[ki]);
	for (i = 0; i < out->spec.ndims; i++) {
		const ks_dim_t *d = &out->spec.dims[i];

		if (d->is_const)
			snprintf(num, sizeof num, "%" PRId64, d->value);
		else
			snprintf(num, sizeof num, "dyn");
		ks_hasher_field(&h, d->name, num);
	}
	ks_hasher_field(&h, "dtype", ks_dtype_name(dtype));
	ks_hasher_field(&h, "mode", mode == KS_MODE_FAST ? "fast" : "exact");
	ks_hasher_field(&h, "backend", out->backend->name);
	ks_hasher_field(&h, "target", out->target);
	ks_hasher_field(&h, "format", out->format);
	ks_hasher_field(&h, "compiler", out->identity);
	ks_hasher_final(&h, &out->key);
	return KS_OK;
}
