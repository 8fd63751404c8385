/*
 * The gemm specializations the tests of specialize/ build: a spec from a
 * dtype, a mode and M, N, K (DYN for a dynamic dim), and the IR of an
 * exact one, asserting that both succeed (Criterion).
 */
#ifndef KS_TESTS_SPEC_H
#define KS_TESTS_SPEC_H

#include <criterion/criterion.h>

#include "../specialize/specialize.h"

#define DYN 0   /* a dim given as dynamic */

/*
 * The request kinds that together select every variant of a kernel at its
 * probe shapes: combination C (0, 1, ..) is a plain dtype in mode exact,
 * then, for a kernel that takes block-format weights, f32 with each block
 * format in mode fast (gemm's `fast`).  Sets DT, WDT and MODE; 0 for a C
 * that does not apply to DEF, -1 past the last.
 */
static inline int probe_combo(const ks_kernel_def_t *def, int c,
    ks_dtype_t *dt, ks_dtype_t *wdt, ks_mode_t *mode)
{
	if (c >= (int)KS_DTYPE_ALL)
		return -1;
	if (c < (int)KS_DTYPE_COUNT) {
		*dt = *wdt = (ks_dtype_t)c;
		*mode = KS_MODE_EXACT;
		return 1;
	}
	if (!def->wblocks || !ks_dtype_block((ks_dtype_t)c, NULL, NULL))
		return 0;
	*dt = KS_DTYPE_F32;
	*wdt = (ks_dtype_t)c;
	*mode = KS_MODE_FAST;
	return 1;
}

static inline int gemm_spec(ks_dtype_t dtype, ks_mode_t mode, int64_t m,
    int64_t n, int64_t k, ks_spec_t *spec, char *err, size_t errlen)
{
	ks_dim_t dims[3] = {
		{ "M", m != DYN, m }, { "N", n != DYN, n },
		{ "K", k != DYN, k },
	};

	return ks_kernel_validate(&ks_kernel_gemm, dtype, mode, dims, 3,
	    spec, err, errlen);
}

static inline ks_ir_kernel_t *gemm(ks_dtype_t dtype, int64_t m, int64_t n,
    int64_t k)
{
	ks_spec_t spec;
	ks_ir_kernel_t *ir = NULL;
	char err[256];

	cr_assert_eq(gemm_spec(dtype, KS_MODE_EXACT, m, n, k, &spec, err,
	    sizeof err), KS_OK, "validate: %s", err);
	cr_assert_eq(ks_specialize(&spec, &ir, err, sizeof err), KS_OK,
	    "specialize: %s", err);
	return ir;
}

#endif
