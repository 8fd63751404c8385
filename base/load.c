/*
 * A shared object from memory into this process (memfd + dlopen, no
 * temporary file): the loader behind libkspec's kspec_cpu_load and the
 * jit tests.  The daemon itself never runs artifacts.
 *
 * glibc's dlopen returns an already loaded object when the path string
 * matches one it has loaded, so the memfd stays open for as long as the
 * library is loaded: no other live library can get the same
 * /proc/self/fd/N name.
 */
#include "base.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct ks_so {
	void *dl;
	int fd;
};

static int write_all(int fd, const uint8_t *p, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int ks_so_load(const void *bytes, size_t len, const char *entry,
    ks_so_t **lib, void **sym_out, char *err, size_t errlen)
{
	ks_so_t *l;
	char path[64];
	void *sym;
	int rc;

	*lib = NULL;
	*sym_out = NULL;
	l = calloc(1, sizeof(*l));
	if (l == NULL)
		return KS_E_NOMEM;
	l->fd = memfd_create("kspec-artifact", MFD_CLOEXEC);
	if (l->fd < 0) {
		rc = ks_err_from_errno(errno);
		ks_set_err(err, errlen, "memfd_create: %s", strerror(errno));
		free(l);
		return rc;
	}
	if (write_all(l->fd, bytes, len) != 0) {
		rc = ks_err_from_errno(errno);
		ks_set_err(err, errlen, "writing the memfd: %s", strerror(errno));
		goto fail;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", l->fd);
	l->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (l->dl == NULL) {
		ks_set_err(err, errlen, "dlopen: %s", dlerror());
		rc = KS_E_IO;
		goto fail;
	}
	sym = dlsym(l->dl, entry);
	if (sym == NULL) {
		ks_set_err(err, errlen, "symbol '%s' not found", entry);
		rc = KS_E_NOT_FOUND;
		goto fail;
	}
	*sym_out = sym;
	*lib = l;
	return KS_OK;
fail:
	if (l->dl != NULL)
		dlclose(l->dl);
	close(l->fd);
	free(l);
	return rc;
}

void ks_so_unload(ks_so_t *lib)
{
	if (lib == NULL)
		return;
	dlclose(lib->dl);
	close(lib->fd);
	free(lib);
}
