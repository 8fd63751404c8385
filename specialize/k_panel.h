/*
 * The panel layout's size check, shared by gemm_packed and its packs
 * (k_gemm_packed.c, k_gemm_pack.c; docs/kernels.md, "gemm_packed").
 */
#ifndef KS_K_PANEL_H
#define KS_K_PANEL_H

#include <stdio.h>

#include "specialize.h"

/*
 * Checks that buffer BUF, R's rows of K's columns in panels of T rows
 * (ceil(R / T) * T * 32 * ceil(K / 32) elements), stays within
 * KS_MAX_ELEMS when both dims are constant.  KS_E_TOO_LARGE with a
 * message naming BUF otherwise.
 */
static inline int ks_panel_check(const ks_dim_t *r, const ks_dim_t *k,
    int64_t T, const char *buf, char *err, size_t errlen)
{
	int64_t rows, n;

	if (!r->is_const || !k->is_const)
		return KS_OK;
	rows = (r->value + T - 1) / T * T;
	if (!ks_mul_overflow(rows, (k->value + 31) / 32 * 32, &n) &&
	    n <= KS_MAX_ELEMS)
		return KS_OK;
	if (err != NULL && errlen > 0)
		snprintf(err, errlen, "buffer %s of %lld panel elements "
		    "exceeds the limit of %lld", buf, (long long)rows *
		    ((k->value + 31) / 32 * 32), (long long)KS_MAX_ELEMS);
	return KS_E_TOO_LARGE;
}

#endif
