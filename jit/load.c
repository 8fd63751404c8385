/*
 * The jit's typed view of base's shared-object loader, for tests and
 * benchmarks of the cpu backend.
 */
#include "jit.h"

#include <string.h>

struct ks_jit_cpu_lib;

int ks_jit_cpu_load(const void *bytes, size_t len, const char *entry,
    ks_jit_cpu_lib_t **lib, ks_jit_cpu_entry_t *fn, char *err,
    size_t errlen)
{
	void *sym;
	int rc;

	*fn = NULL;
	rc = ks_so_load(bytes, len, entry, (ks_so_t **)lib, &sym, err,
	    errlen);
	/* POSIX guarantees a dlsym result converts to a function pointer;
	 * memcpy keeps ISO C quiet about it. */
	if (rc == KS_OK)
		memcpy(fn, &sym, sizeof(*fn));
	return rc;
}

void ks_jit_cpu_unload(ks_jit_cpu_lib_t *lib)
{
	ks_so_unload((ks_so_t *)lib);
}
