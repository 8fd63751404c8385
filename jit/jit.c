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
