/*
 * specialize: from a validated spec to the specialized IR of one variant.
 *
 * Build the variant's IR with every dim still a scalar parameter, bind
 * each constant dim (ks_pass_bind), then run the pipeline (ks_pass_run).
 * The entry symbol is "ks_<kernel>_<variant>" (set by ks_ir_new): the same
 * request always gives the same symbol, and one artifact holds one entry.
 */
#include "specialize.h"

#include <stdio.h>
#include <string.h>

static int find_scalar(const ks_ir_kernel_t *k, const char *name)
{
	int i;

	for (i = 0; i < k->nparams; i++)
		if (k->params[i].kind == KS_PARAM_SCALAR &&
		    strcmp(k->params[i].name, name) == 0)
			return i;
	return -1;
}

int ks_specialize(const ks_spec_t *spec, ks_ir_kernel_t **out, char *err,
    size_t errlen)
{
	return ks_specialize_variant(spec, NULL, out, err, errlen);
}

/* The arguments and result of one specialization, run under a guard. */
typedef struct {
	const ks_spec_t *spec;
	const char *variant;
	ks_ir_kernel_t *k;
	char *err;
	size_t errlen;
} job_t;

static int specialize(void *ctx)
{
	job_t *j = ctx;
	const ks_spec_t *spec = j->spec;
	const ks_kernel_def_t *def = spec->def;
	const char *variant = j->variant;
	char *err = j->err;
	size_t errlen = j->errlen;
	ks_ir_kernel_t *k;
	int i, p, rc, forced = variant != NULL;

	if (!forced)
		variant = def->select(spec);
	k = variant != NULL ? def->build(spec, variant) : NULL;
	if (k == NULL) {
		if (err != NULL && errlen > 0)
			snprintf(err, errlen, forced ? "%s: variant %s does "
			    "not apply to this shape" : "%s: no IR for variant "
			    "%s", def->name, variant != NULL ? variant :
			    "(none)");
		return forced ? KS_E_UNSUPPORTED : KS_E_INTERNAL;
	}
	for (i = 0; i < spec->ndims; i++) {
		if (!spec->dims[i].is_const)
			continue;
		p = find_scalar(k, spec->dims[i].name);
		if (p < 0 || k->params[p].type != KS_TY_I64 ||
		    k->params[p].bound) {
			if (err != NULL && errlen > 0)
				snprintf(err, errlen, "%s.%s: no i64 parameter "
				    "%s to bind", def->name, variant,
				    spec->dims[i].name);
			ks_ir_free(k);
			return KS_E_INTERNAL;
		}
		ks_pass_bind(k, p, spec->dims[i].value);
	}
	rc = ks_pass_run(k, err, errlen);
	if (rc != KS_OK) {
		ks_ir_free(k);
		return rc;
	}
	j->k = k;
	return KS_OK;
}

/* Under a guard: a failed allocation of the IR's arena answers
 * KS_E_NOMEM and leaves nothing behind (ir.c). */
int ks_specialize_variant(const ks_spec_t *spec, const char *variant,
    ks_ir_kernel_t **out, char *err, size_t errlen)
{
	job_t j = { spec, variant, NULL, err, errlen };
	int rc;

	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (spec == NULL || spec->def == NULL || out == NULL)
		return KS_E_INVAL;
	*out = NULL;
	rc = ks_ir_guarded(specialize, &j);
	if (rc == KS_E_NOMEM && err != NULL && errlen > 0 && err[0] == '\0')
		snprintf(err, errlen, "%s: out of memory building its IR",
		    spec->def->name);
	if (rc == KS_OK)
		*out = j.k;
	return rc;
}
