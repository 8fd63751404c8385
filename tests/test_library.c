/*
 * The library as the benchmarks and the GPU check see it: for every kernel,
 * the buffer layout of ref/layout.h (names, sizes, test data) binds to
 * the kernel's parameters, and the cpu backend's result equals, bit for
 * bit, the reference that ref/kernels.h calls by name with the scalars
 * the GPU check launches (eps 1e-5, scale 1/sqrt(D)).  So the GPU check's
 * host side (which cannot run without a GPU) is exercised here on the cpu,
 * every variant at the shapes the GPU check uses.
 */
#include "kern.h"
#include "../bench/gpu/cases.h"
#include "../ref/kernels.h"

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(library, .init = setup, .timeout = 300);

/* gemm's cases, then the GPU check's (bench/gpu/cases.h). */
static const struct {
	const char *kernel, *variant;
	int64_t dims[KS_MAX_DIMS];
	unsigned consts;
} gemm_cases[] = {
	{ "gemm", NULL, { 1, 64, 100 }, 7 },
	{ "gemm", NULL, { 3, 37, 100 }, 0 },
};

#define NGEMM (sizeof gemm_cases / sizeof gemm_cases[0])
#define NCASES (NGEMM + sizeof gpu_cases / sizeof gpu_cases[0])
#define CASE(c, f) ((c) < NGEMM ? gemm_cases[c].f : gpu_cases[(c) - NGEMM].f)

static void run_case(size_t c, ks_dtype_t dt)
{
	const ks_kernel_def_t *def = ks_kernel_find(CASE(c, kernel));
	int64_t vals[KS_MAX_DIMS] = { 0 };
	buf_t b[LAY_MAXB], want[LAY_MAXB];
	kt_buf_t kb[LAY_MAXB];
	kt_val_t kv[KS_MAX_DIMS + 2];
	kt_args_t args;
	ks_ir_kernel_t *k;
	char who[128];
	int i, nb, nv = 0;

	cr_assert_not_null(def, "%s", CASE(c, kernel));
	for (i = 0; i < def->ndims; i++) {
		vals[i] = (CASE(c, consts) >> i) & 1 ? CASE(c, dims)[i] : 0;
		kv[nv++] = (kt_val_t){ def->dims[i], CASE(c, dims)[i], 0 };
	}
	kv[nv++] = (kt_val_t){ "eps", 0, 1e-5f };
	kv[nv++] = (kt_val_t){ "scale", 0, strncmp(def->name,
	    "attention_", 10) ? 0 : 1.0f / sqrtf((float)dim(def,
	    CASE(c, dims), "D")) };
	k = gpu_kernel_ir(def, CASE(c, variant), dt, KS_MODE_EXACT, vals);
	nb = layout(def, CASE(c, dims), b);
	lay_fill(def, CASE(c, dims), b, nb, dt, 7);
	memcpy(want, b, sizeof b);
	for (i = 0; i < nb; i++) {
		size_t n = lay_bytes(&b[i], ks_dtype_size(dt));

		want[i].data = malloc(n ? n : 1);
		memcpy(want[i].data, b[i].data, n);
		if (lay_is_output(&b[i]))
			memset(b[i].data, 0xff, n);     /* NaN, never a result */
		kb[i] = (kt_buf_t){ b[i].name, b[i].data, n };
	}
	kt_bind(&args, k, kb, nb, kv, nv);
	gpu_run_cpu(k, args.args);
	ref_kernel(def, dt, CASE(c, dims), want, nb);
	for (i = 0; i < nb; i++) {
		if (!b[i].written)
			continue;
		snprintf(who, sizeof who, "%s.%s %s %s", def->name,
		    k->variant, ks_dtype_name(dt), b[i].name);
		kt_assert_bitwise(who, b[i].data, want[i].data,
		    lay_cmp_dtype(&b[i], dt), b[i].elems);
	}
	for (i = 0; i < nb; i++) {
		free(b[i].data);
		free(want[i].data);
	}
	ks_ir_free(k);
}

Test(library, the_gpu_checks_cases_equal_their_references_on_the_cpu)
{
	size_t c;
	int d;

	for (c = 0; c < NCASES; c++)
		for (d = 0; d < KS_DTYPE_COUNT; d++)
			run_case(c, (ks_dtype_t)d);
}

/* The checker is not vacuous: a reference run at another eps differs. */
Test(library, a_reference_with_another_eps_is_told_apart)
{
	const ks_kernel_def_t *def = ks_kernel_find("rmsnorm");
	const int64_t dims[2] = { 2, 64 };
	buf_t b[LAY_MAXB];
	void *y2;
	int nb, i;
	float *row = malloc(64 * sizeof(float));

	nb = layout(def, dims, b);
	lay_fill(def, dims, b, nb, KS_DTYPE_F32, 7);
	ref_kernel(def, KS_DTYPE_F32, dims, b, nb);
	y2 = malloc(2 * 64 * 4);
	ref_rmsnorm(b[0].data, b[1].data, y2, 0, 2, 64, 1e-1f, row);
	cr_assert_gt(kt_diff("eps 1e-1", y2, b[2].data, KS_DTYPE_F32, 128), 0);
	for (i = 0; i < nb; i++)
		free(b[i].data);
	free(y2);
	free(row);
}
