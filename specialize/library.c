/*
 * library: the kernel table, lookup, and validation of a request's shape.
 *
 * Validation is generic over a kernel's declared dims and builds no IR, so
 * it is cheap enough for the request path (docs/architecture.md, "The
 * request path", step 2);
 * kernel-specific limits (buffer sizes) come from the kernel's check().
 */
#include "specialize.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const ks_kernel_def_t *const library[] = {
	&ks_kernel_gemm,
	&ks_kernel_rmsnorm,
	&ks_kernel_add_rmsnorm,
	&ks_kernel_softmax,
	&ks_kernel_rope,
	&ks_kernel_silu_mul,
	&ks_kernel_attention_decode,
	&ks_kernel_embedding,
	&ks_kernel_argmax,
	&ks_kernel_kv_append_rope,
	&ks_kernel_attention_prefill,
	&ks_kernel_attention_paged,
	&ks_kernel_gemm_packed,
	&ks_kernel_gemm_pack_x,
	&ks_kernel_gemm_pack_w,
};

#define NKERNELS ((int)(sizeof library / sizeof library[0]))

const ks_kernel_def_t *const *ks_kernels(int *count)
{
	if (count != NULL)
		*count = NKERNELS;
	return library;
}

const ks_kernel_def_t *ks_kernel_find(const char *name)
{
	int i;

	if (name == NULL)
		return NULL;
	for (i = 0; i < NKERNELS; i++)
		if (strcmp(library[i]->name, name) == 0)
			return library[i];
	return NULL;
}

static int seterr(char *err, size_t errlen, int rc, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int seterr(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	if (err != NULL && errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

static int dim_index(const ks_kernel_def_t *def, const char *name)
{
	int i;

	for (i = 0; i < def->ndims; i++)
		if (strcmp(def->dims[i], name) == 0)
			return i;
	return -1;
}

/*
 * On success OUT->dims[i].name points at the definition's own string, not
 * at the caller's, so the spec outlives the request it came from.  On
 * error OUT is unspecified.  A constant below 1 is KS_E_BAD_SHAPE; one
 * above KS_MAX_DIM is KS_E_TOO_LARGE (a size limit, like the buffer sizes
 * of check()).
 */
int ks_kernel_wdtype_ok(const ks_kernel_def_t *def, ks_dtype_t dtype,
    ks_dtype_t wdtype)
{
	if (wdtype == dtype)
		return 1;
	if (ks_dtype_block(wdtype, NULL, NULL))
		return def->wblocks && dtype == KS_DTYPE_F32;
	if ((int)wdtype < 0 || wdtype >= KS_DTYPE_COUNT)
		return 0;
	switch (def->wmix) {
	case KS_WMIX_NARROW:
		return dtype == KS_DTYPE_F32;
	case KS_WMIX_F32:
		return wdtype == KS_DTYPE_F32;
	default:
		return 0;
	}
}

int ks_kernel_validate(const ks_kernel_def_t *def, ks_dtype_t dtype,
    ks_mode_t mode, const ks_dim_t *dims, int ndims, ks_spec_t *out,
    char *err, size_t errlen)
{
	return ks_kernel_validate_mixed(def, dtype, dtype, mode, dims, ndims,
	    out, err, errlen);
}

int ks_kernel_validate_mixed(const ks_kernel_def_t *def, ks_dtype_t dtype,
    ks_dtype_t wdtype, ks_mode_t mode, const ks_dim_t *dims, int ndims,
    ks_spec_t *out, char *err, size_t errlen)
{
	int seen[KS_MAX_DIMS] = { 0 };
	int i, j;

	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (def == NULL || out == NULL || def->ndims > KS_MAX_DIMS)
		return seterr(err, errlen, KS_E_INVAL, "no kernel to validate");
	if ((int)dtype < 0 || dtype >= KS_DTYPE_COUNT)
		return seterr(err, errlen, KS_E_BAD_DTYPE,
		    "dtype %d is not supported", (int)dtype);
	if (!ks_kernel_wdtype_ok(def, dtype, wdtype))
		return def->wmix == KS_WMIX_NONE || (int)wdtype < 0 ||
		    wdtype >= KS_DTYPE_ALL ?
		    seterr(err, errlen, KS_E_BAD_DTYPE, "wdtype must equal "
		    "dtype for kernel %s (it has no weight buffer of its "
		    "own dtype)", def->name) :
		    seterr(err, errlen, KS_E_BAD_DTYPE, "wdtype %s with dtype "
		    "%s is not supported by %s (its %s: %s)",
		    ks_dtype_name(wdtype), ks_dtype_name(dtype), def->name,
		    def->weights, def->wmix == KS_WMIX_NARROW ?
		    (def->wblocks ? "f16, bf16, q8_0, q4_0 or q4_k with dtype "
		    "f32" : "f16 or bf16 with dtype f32") :
		    "f32 with dtype f16 or bf16");
	if (mode != KS_MODE_EXACT && mode != KS_MODE_FAST)
		return seterr(err, errlen, KS_E_BAD_MODE,
		    "mode %d is not supported", (int)mode);
	if (ndims < 0 || (ndims > 0 && dims == NULL))
		return seterr(err, errlen, KS_E_BAD_SHAPE, "bad shape list");
	memset(out, 0, sizeof(*out));
	out->def = def;
	out->dtype = dtype;
	out->wdtype = wdtype;
	out->mode = mode;
	out->ndims = def->ndims;
	for (i = 0; i < ndims; i++) {
		const ks_dim_t *d = &dims[i];

		if (d->name == NULL)
			return seterr(err, errlen, KS_E_BAD_SHAPE,
			    "shape parameter without a name");
		j = dim_index(def, d->name);
		if (j < 0)
			return seterr(err, errlen, KS_E_BAD_SHAPE,
			    "unknown shape parameter %.64s for kernel %s",
			    d->name, def->name);
		if (seen[j])
			return seterr(err, errlen, KS_E_BAD_SHAPE,
			    out->dims[j].is_const != !!d->is_const ?
			    "%s is given both as a constant and as dynamic" :
			    "%s is given twice", def->dims[j]);
		seen[j] = 1;
		out->dims[j].name = def->dims[j];
		out->dims[j].is_const = !!d->is_const;
		out->dims[j].value = d->is_const ? d->value : 0;
		if (!d->is_const)
			continue;
		if (d->value < 1)
			return seterr(err, errlen, KS_E_BAD_SHAPE,
			    "%s must be >= 1 (got %lld)", def->dims[j],
			    (long long)d->value);
		if (d->value > KS_MAX_DIM)
			return seterr(err, errlen, KS_E_TOO_LARGE,
			    "%s must be <= %lld (got %lld)", def->dims[j],
			    (long long)KS_MAX_DIM, (long long)d->value);
	}
	for (j = 0; j < def->ndims; j++)
		if (!seen[j])
			return seterr(err, errlen, KS_E_BAD_SHAPE,
			    "missing shape parameter %s (give it in shape or "
			    "in dynamic)", def->dims[j]);
	return def->check != NULL ? def->check(out, err, errlen) : KS_OK;
}
