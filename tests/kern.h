/*
 * Running library kernels in tests, by parameter name: a test names its
 * buffers and scalar values once (kt_buf_t, kt_val_t), and kt_bind lays
 * them out as gpu.h's gpu_arg_t array, one per declared parameter, for
 * gpu_run_cpu (cpu backend) and cl.h's run_cl (OpenCL).  Dims that were
 * baked into the kernel are skipped by both runners; the values of every
 * dim are given anyway, so one binding serves every variant.
 *
 * Bitwise comparison helpers report the first few differing elements.
 */
#ifndef KS_TEST_KERN_H
#define KS_TEST_KERN_H

#include "gpu.h"
#include "../ref/ref.h"

typedef struct {
	const char *name;
	void *data;
	size_t bytes;
} kt_buf_t;

/* An i64 scalar (a dim) or an f32 scalar (eps, scale), by name. */
typedef struct {
	const char *name;
	int64_t i;
	float f;
} kt_val_t;

enum { KT_MAX_PARAMS = 32 };

typedef struct {
	gpu_arg_t args[KT_MAX_PARAMS];
	int64_t i64[KT_MAX_PARAMS];
	float f32[KT_MAX_PARAMS];
} kt_args_t;

/* Fills A for K from BUFS and VALS; every parameter must be named. */
static inline void kt_bind(kt_args_t *a, const ks_ir_kernel_t *k,
    const kt_buf_t *bufs, int nbufs, const kt_val_t *vals, int nvals)
{
	int i, j, found;

	cr_assert_leq(k->nparams, KT_MAX_PARAMS);
	memset(a, 0, sizeof(*a));
	for (i = 0; i < k->nparams; i++) {
		const ks_ir_param_t *p = &k->params[i];

		found = 0;
		if (p->kind == KS_PARAM_BUFFER) {
			for (j = 0; j < nbufs && !found; j++)
				if (strcmp(bufs[j].name, p->name) == 0) {
					a->args[i].data = bufs[j].data;
					a->args[i].bytes = bufs[j].bytes;
					found = 1;
				}
		} else {
			for (j = 0; j < nvals && !found; j++)
				if (strcmp(vals[j].name, p->name) == 0) {
					a->i64[i] = vals[j].i;
					a->f32[i] = vals[j].f;
					a->args[i].data = p->type == KS_TY_F32 ?
					    (void *)&a->f32[i] :
					    (void *)&a->i64[i];
					a->args[i].bytes = p->type == KS_TY_F32 ?
					    sizeof(float) : sizeof(int64_t);
					found = 1;
				}
		}
		cr_assert(found, "%s.%s: no value for parameter %s", k->name,
		    k->variant, p->name);
	}
}

/* Bits of element I of a buffer of dtype DT (f32, f16, bf16). */
static inline uint32_t kt_bits(const void *buf, ks_dtype_t dt, int64_t i)
{
	uint32_t u;

	if (dt == KS_DTYPE_F32) {
		memcpy(&u, (const float *)buf + i, 4);
		return u;
	}
	return ((const uint16_t *)buf)[i];
}

/* Count of the N elements whose bits differ; the first 3 are logged with
 * WHO naming the comparison. */
static inline int64_t kt_diff(const char *who, const void *got,
    const void *want, ks_dtype_t dt, int64_t n)
{
	int64_t i, bad = 0;

	for (i = 0; i < n; i++)
		if (kt_bits(got, dt, i) != kt_bits(want, dt, i) && bad++ < 3)
			cr_log_info("%s: [%lld] = 0x%x (%.9g), want 0x%x (%.9g)",
			    who, (long long)i, kt_bits(got, dt, i),
			    (double)ref_load(got, (int)dt, i),
			    kt_bits(want, dt, i),
			    (double)ref_load(want, (int)dt, i));
	return bad;
}

/* Asserts GOT equals WANT bit for bit over N elements of dtype DT. */
#define kt_assert_bitwise(who, got, want, dt, n) do { \
	int64_t bad_ = kt_diff((who), (got), (want), (dt), (n)); \
	cr_assert_eq(bad_, 0, "%s: %lld of %lld elements differ", (who), \
	    (long long)bad_, (long long)(n)); \
} while (0)

/* The unit roundoff of a store to DT: 2^-24 f32, 2^-11 f16, 2^-8 bf16. */
static inline double kt_unit(ks_dtype_t dt)
{
	return dt == KS_DTYPE_F32 ? 0x1p-24 : dt == KS_DTYPE_F16 ? 0x1p-11 :
	    0x1p-8;
}

#endif
