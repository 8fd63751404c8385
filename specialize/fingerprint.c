/*
 * fingerprint: a kernel definition's identity, part of every request key.
 *
 * BLAKE2b-256 (ks_hasher_*) over length-prefixed fields: a format tag, the
 * kernel's name, version, dims, each variant with its guard, and, for every
 * dtype (then every mixed dtype and wdtype pair the kernel allows), mode
 * and probe shape below, the variant selected and the printed
 * IR after ks_specialize.  A change to a builder, a pass or the printer
 * therefore changes the fingerprint even when nobody bumps `version`, and
 * the selection policy is sampled at the probes.  A variant that none of
 * the probes selects is covered only by its name and guard: extend the
 * probes when adding such a variant.
 *
 * Computed once for the whole library, on first use, under pthread_once:
 * safe from any thread, and later calls only read.  A probe that cannot be
 * specialized or printed for want of memory fails the computation: hashing
 * its error instead, as a rejected shape is hashed, would give the kernel
 * another identity for as long as the process lives.  The hasher needs
 * ks_base_init to have run (libsodium), which every program does at start.
 */
#include "specialize.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define PROBE_DYNAMIC 0

/* Every dim at this value (0: every dim dynamic). */
static const int64_t probes[] = { PROBE_DYNAMIC, 1, 2, 17, 4096, 4100 };

enum { MAX_PROBES = 64 };

/* One per library kernel; ks_kernels() is a fixed table far smaller. */
static ks_hash_t prints[64];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void field_int(ks_hasher_t *h, const char *name, long long v)
{
	char s[32];

	snprintf(s, sizeof s, "%lld", v);
	ks_hasher_field(h, name, s);
}

/* Hashes the variant and IR of one probe: VALS[i] is dim i's value in
 * declared order, PROBE_DYNAMIC for a dynamic dim.  KS_E_NOMEM. */
static int hash_probe(ks_hasher_t *h, const ks_kernel_def_t *def,
    ks_dtype_t dtype, ks_dtype_t wdtype, ks_mode_t mode, const int64_t *vals)
{
	ks_dim_t dims[KS_MAX_DIMS];
	ks_spec_t spec;
	ks_ir_kernel_t *k = NULL;
	ks_buf_t text;
	char err[256];
	int i, rc;

	for (i = 0; i < def->ndims; i++) {
		dims[i].name = def->dims[i];
		dims[i].is_const = vals[i] != PROBE_DYNAMIC;
		dims[i].value = vals[i];
		field_int(h, "probe", (long long)vals[i]);
	}
	rc = ks_kernel_validate_mixed(def, dtype, wdtype, mode, dims,
	    def->ndims, &spec, err, sizeof err);
	if (rc == KS_OK)
		rc = ks_specialize(&spec, &k, err, sizeof err);
	if (rc == KS_E_NOMEM)
		return rc;
	if (rc != KS_OK) {
		ks_hasher_field(h, "rejected", ks_err_name(rc));
		return KS_OK;
	}
	ks_buf_init(&text);
	rc = ks_ir_print(k, &text);
	if (rc == KS_OK) {
		ks_hasher_field(h, "variant", k->variant);
		ks_hasher_field(h, "ir", text.data);
	}
	ks_buf_close(&text);
	ks_ir_free(k);
	return rc;
}

int ks_kernel_probes(const ks_kernel_def_t *def,
    int64_t (*out)[KS_MAX_DIMS], int max)
{
	int n = 0, i;
	size_t p;

	for (p = 0; p < sizeof probes / sizeof *probes && n < max; p++, n++)
		for (i = 0; i < def->ndims; i++)
			out[n][i] = probes[p];
	for (p = 0; p < (size_t)def->nprobes && n < max; p++, n++)
		for (i = 0; i < def->ndims; i++)
			out[n][i] = def->probes[p][i];
	return n;
}

static int compute(const ks_kernel_def_t *def, ks_hash_t *out)
{
	ks_hasher_t h;
	int64_t probe_list[MAX_PROBES][KS_MAX_DIMS];   /* 8 KB */
	int i, d, w, m, p, nprobes, rc = KS_OK;

	ks_hasher_init(&h);
	ks_hasher_field(&h, "format", "kspec-kernel-fingerprint-2");
	ks_hasher_field(&h, "kernel", def->name);
	field_int(&h, "version", def->version);
	for (i = 0; i < def->ndims; i++)
		ks_hasher_field(&h, "dim", def->dims[i]);
	for (i = 0; i < def->nvariants; i++) {
		ks_hasher_field(&h, "variant", def->variants[i]);
		ks_hasher_field(&h, "guard", def->guards[i]);
	}
	nprobes = ks_kernel_probes(def, probe_list, MAX_PROBES);
	/* The plain dtypes first, as before weight dtypes existed, then
	 * each mixed pair the kernel allows, tagged. */
	for (d = 0; d < KS_DTYPE_COUNT; d++)
		for (m = KS_MODE_EXACT; m <= KS_MODE_FAST; m++)
			for (p = 0; p < nprobes && rc == KS_OK; p++)
				rc = hash_probe(&h, def, (ks_dtype_t)d,
				    (ks_dtype_t)d, (ks_mode_t)m,
				    probe_list[p]);
	for (d = 0; d < KS_DTYPE_COUNT; d++)
		for (w = 0; w < KS_DTYPE_ALL; w++) {
			if (w == d || !ks_kernel_wdtype_ok(def, (ks_dtype_t)d,
			    (ks_dtype_t)w))
				continue;
			ks_hasher_field(&h, "wdtype",
			    ks_dtype_name((ks_dtype_t)w));
			for (m = KS_MODE_EXACT; m <= KS_MODE_FAST; m++)
				for (p = 0; p < nprobes && rc == KS_OK; p++)
					rc = hash_probe(&h, def, (ks_dtype_t)d,
					    (ks_dtype_t)w, (ks_mode_t)m,
					    probe_list[p]);
		}
	ks_hasher_final(&h, out);
	return rc;
}

int ks_kernel_fingerprint_compute(const ks_kernel_def_t *def,
    ks_hash_t *out)
{
	if (def == NULL || out == NULL)
		return KS_E_INVAL;
	return compute(def, out);
}

static void compute_all(void)
{
	const ks_kernel_def_t *const *lib;
	int i, n;

	lib = ks_kernels(&n);
	assert(n <= (int)(sizeof prints / sizeof *prints));
	/* Every request key needs these: a process that cannot compute
	 * them cannot serve, and must not serve under other keys. */
	for (i = 0; i < n; i++)
		if (compute(lib[i], &prints[i]) != KS_OK) {
			fprintf(stderr, "kspec: out of memory computing the "
			    "fingerprint of kernel %s\n", lib[i]->name);
			abort();
		}
}

/* Cached for the library's kernels; NULL for a definition outside it (use
 * ks_kernel_fingerprint_compute). */
const ks_hash_t *ks_kernel_fingerprint(const ks_kernel_def_t *def)
{
	const ks_kernel_def_t *const *lib;
	int i, n;

	pthread_once(&once, compute_all);
	lib = ks_kernels(&n);
	for (i = 0; i < n && i < (int)(sizeof prints / sizeof *prints); i++)
		if (lib[i] == def)
			return &prints[i];
	return NULL;
}
