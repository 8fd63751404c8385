/*
 * The plain-C reference of each library kernel (tests/ref*.h), called by
 * name on the buffers of bench/layout.h: inputs read, outputs (and
 * in-place buffers) overwritten with the reference result.  eps is 1e-5
 * and scale 1/sqrt(D), as the GPU check launches them.
 */
#ifndef KS_BENCH_GPU_REFS_H
#define KS_BENCH_GPU_REFS_H

#include <math.h>

#include "../layout.h"

static inline void *ref_buf(buf_t *b, int nb, const char *name)
{
	int i;

	for (i = 0; i < nb; i++)
		if (strcmp(b[i].name, name) == 0)
			return b[i].data;
	fprintf(stderr, "refs: no buffer %s\n", name);
	exit(1);
}

static inline void ref_kernel(const ks_kernel_def_t *def, ks_dtype_t dt,
    const int64_t *v, buf_t *b, int nb)
{
	int d = (int)dt;

#define V_(n) dim(def, v, n)
#define B_(n) ref_buf(b, nb, n)
	if (strcmp(def->name, "gemm") == 0) {
		ref_gemm(B_("x"), B_("W"), B_("y"), d, V_("M"), V_("N"),
		    V_("K"));
		return;
	}
#undef V_
#undef B_
	fprintf(stderr, "refs: no reference for %s\n", def->name);
	exit(1);
}

#endif
