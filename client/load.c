/*
 * kspec_cpu_load: runs cpu artifacts in the client's process, from memory.
 */
#include "../include/kspec.h"

#include <stdio.h>
#include <string.h>

#include "../base/base.h"

int kspec_cpu_load(const kspec_artifact_t *a, kspec_cpu_kernel_t **out,
    kspec_cpu_entry_t *fn, char *err, size_t errlen)
{
	void *sym;
	int rc;

	*out = NULL;
	*fn = NULL;
	if (!a || !a->bytes || !a->len || !a->entry || !a->entry[0]) {
		if (err && errlen)
			snprintf(err, errlen, "not a cpu artifact with bytes "
			    "and an entry (fetched with meta_only?)");
		return KSPEC_E_INVAL;
	}
	if (a->format && a->format[0] && strcmp(a->format, "so") != 0) {
		if (err && errlen)
			snprintf(err, errlen, "artifact format is '%s', not "
			    "'so'", a->format);
		return KSPEC_E_INVAL;
	}
	rc = ks_so_load(a->bytes, a->len, a->entry, (ks_so_t **)out, &sym,
	    err, errlen);
	if (rc == KS_OK)
		memcpy(fn, &sym, sizeof(*fn));
	return rc;
}

void kspec_cpu_unload(kspec_cpu_kernel_t *k)
{
	ks_so_unload((ks_so_t *)k);
}
