/*
 * jit: the backend table and artifact helpers.
 */
#include "jit.h"

#include <stdlib.h>
#include <string.h>

/* Fixed order: it is the order of the hello reply. */
static const ks_backend_t *const backends[] = {
	&ks_backend_cpu,
	&ks_backend_cuda,
	&ks_backend_opencl,
};

const ks_backend_t *const *ks_backends(int *count)
{
	if (count != NULL)
		*count = (int)(sizeof(backends) / sizeof(backends[0]));
	return backends;
}

const ks_backend_t *ks_backend_find(const char *name)
{
	size_t i;

	if (name == NULL)
		return NULL;
	for (i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
		if (strcmp(backends[i]->name, name) == 0)
			return backends[i];
	return NULL;
}

void ks_jit_artifact_close(ks_jit_artifact_t *a)
{
	if (a == NULL)
		return;
	free(a->bytes);
	memset(a, 0, sizeof(*a));
}

int ks_jit_groups(const ks_ir_kernel_t *k, const ks_jit_arg_t *args,
    int64_t *groups)
{
	int64_t vals[KS_JIT_MAX_ARGS] = { 0 };
	int i;

	if (k->nparams > KS_JIT_MAX_ARGS)
		return KS_E_INVAL;
	for (i = 0; i < k->nparams; i++)
		if (k->params[i].kind == KS_PARAM_SCALAR &&
		    k->params[i].type == KS_TY_I64 && !k->params[i].bound)
			vals[i] = *(const int64_t *)args[i].data;
	return ks_ir_eval_launch(k, k->grid, vals, groups) == KS_OK &&
	    *groups >= 0 ? KS_OK : KS_E_INVAL;
}
