/*
 * Known-answer canaries (exec.h): a kernel at small shapes, every variant
 * and dtype, compiled as a get's job and run here against the plain-C
 * reference of its canonical order.
 *
 * The cases are written so that the library's own selection picks each
 * variant (a canary tests what a get is served, not a variant forced on
 * a shape it would never get): tests/test_canary.c checks that the cases
 * of every kernel select every one of its variants in some dtype.  Every
 * case runs in each dtype and then in each mixed pair of dtype and weight
 * dtype the kernel allows (ks_kernel_wdtype_ok: gemm and the norms at f32
 * with f16 and bf16 weights, rope's f32 table beside f16 and bf16), the
 * weight buffer filled and compared in its own dtype.  Inputs
 * are ref/layout.h's (values in [-1, 1) from a fixed seed, rope's real
 * cos/sin table, positions inside the table, every sequence full); the
 * scalars are eps 1e-5 and scale 1/sqrt(D), as ref/kernels.h applies
 * them.  Written buffers that are not also read start as all ones (a NaN
 * in every dtype; -1 in an i32 buffer), so an element the kernel forgets
 * to write differs; the KV caches keep their test data, which the slots a
 * step does not write must keep.  An i32 buffer is compared as 4-byte
 * elements whatever the dtype.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ref/kernels.h"
#include "exec.h"

/* The seed of every canary's inputs. */
#define CANARY_SEED 7

/* dims in declared order; consts bit i: dim i is constant, else dynamic. */
typedef struct {
	const char *kernel;
	int64_t dims[KS_MAX_DIMS];
	unsigned consts;
} canary_case_t;

static const canary_case_t cases[] = {
	{ "gemm", { 1, 37, 100 }, 7 },                 /* gemv_m1 */
	{ "gemm", { 3, 37, 100 }, 7 },                 /* small_m */
	{ "gemm", { 5, 37, 100 }, 0 },                 /* general */
	{ "gemm", { 9, 37, 100 }, 7 },                 /* blocked */
	{ "gemm_packed", { 13, 37, 100 }, 7 },          /* partial panels */
	{ "gemm_packed", { 13, 37, 2100 }, 0 },         /* k in chunks */
	{ "gemm_pack_x", { 13, 100 }, 3 },              /* partial panels */
	{ "gemm_pack_x", { 13, 100 }, 0 },
	{ "gemm_pack_w", { 37, 100 }, 3 },
	{ "gemm_pack_w", { 37, 100 }, 0 },
	{ "rmsnorm", { 3, 100 }, 3 },                  /* row_local: f16, bf16 */
	{ "rmsnorm", { 3, 100 }, 0 },
	{ "add_rmsnorm", { 3, 100 }, 3 },
	{ "add_rmsnorm", { 3, 100 }, 0 },
	{ "softmax", { 3, 100 }, 3 },                  /* row_local */
	{ "softmax", { 3, 100 }, 0 },
	{ "rope", { 3, 4, 16, 8 }, 15 },
	{ "rope", { 3, 4, 16, 8 }, 0 },
	{ "silu_mul", { 2, 100 }, 3 },
	{ "silu_mul", { 2, 100 }, 0 },
	{ "attention_decode", { 2, 8, 2, 64, 70 }, 31 },   /* gqa, G = 4 */
	{ "attention_decode", { 2, 8, 8, 64, 70 }, 31 },   /* head_dim */
	{ "attention_decode", { 2, 8, 2, 48, 70 }, 0 },    /* general */
	{ "embedding", { 3, 50, 300 }, 7 },
	{ "embedding", { 3, 50, 300 }, 0 },
	{ "argmax", { 3, 100 }, 3 },
	{ "argmax", { 3, 100 }, 0 },
	{ "kv_append_rope", { 2, 3, 2, 16, 12, 10 }, 63 },
	{ "kv_append_rope", { 2, 3, 2, 16, 12, 10 }, 0 },
	/* B, T, Hq, Hkv, D, S, Sc: 3 causal rows, rows of 80 positions */
	{ "attention_prefill", { 2, 3, 8, 2, 64, 70, 80 }, 127 },   /* gqa */
	{ "attention_prefill", { 2, 3, 8, 8, 64, 70, 80 }, 127 },   /* head_dim */
	{ "attention_prefill", { 2, 3, 8, 2, 48, 70, 80 }, 0 },     /* general */
	/* B, T, Hq, Hkv, D, BS, MB, NB: 80 positions in blocks of 16 */
	{ "attention_paged", { 2, 1, 8, 2, 64, 16, 5, 11 }, 255 },  /* gqa */
	{ "attention_paged", { 2, 4, 8, 8, 64, 16, 5, 11 }, 255 },  /* head_dim */
	{ "attention_paged", { 2, 3, 8, 2, 48, 16, 5, 11 }, 0 },    /* general */
};

#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static const ks_dtype_t dtypes[] = { KS_DTYPE_F32, KS_DTYPE_F16,
    KS_DTYPE_BF16 };

#define NDTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

/* The (dtype, weight dtype) pairs of DEF's runs: each dtype with itself,
 * then the mixed pairs it allows.  Returns the count (at most NDTYPES^2). */
static int pairs(const ks_kernel_def_t *def, ks_dtype_t (*out)[2])
{
	int d, w, n = 0;

	for (d = 0; d < NDTYPES; d++)
		out[n][0] = out[n][1] = dtypes[d], n++;
	for (d = 0; d < NDTYPES; d++)
		for (w = 0; w < NDTYPES; w++)
			if (w != d && ks_kernel_wdtype_ok(def, dtypes[d],
			    dtypes[w])) {
				out[n][0] = dtypes[d];
				out[n][1] = dtypes[w];
				n++;
			}
	return n;
}

int ks_canary_runs(const ks_kernel_def_t *def)
{
	ks_dtype_t pr[NDTYPES * NDTYPES][2];
	int i, n = 0;

	for (i = 0; i < NCASES; i++)
		n += strcmp(cases[i].kernel, def->name) == 0;
	return n * pairs(def, pr);
}

/* The spec of case C in DT with weights in WDT. */
static int case_spec_mixed(const ks_kernel_def_t *def,
    const canary_case_t *c, ks_dtype_t dt, ks_dtype_t wdt, ks_spec_t *spec,
    char *err, size_t errlen)
{
	ks_dim_t dims[KS_MAX_DIMS];
	int i;

	for (i = 0; i < def->ndims; i++)
		dims[i] = (ks_dim_t){ def->dims[i], (c->consts >> i) & 1,
		    (c->consts >> i) & 1 ? c->dims[i] : 0 };
	return ks_kernel_validate_mixed(def, dt, wdt, KS_MODE_EXACT, dims,
	    def->ndims, spec, err, errlen);
}

/* The spec of case C in DT. */
static int case_spec(const ks_kernel_def_t *def, const canary_case_t *c,
    ks_dtype_t dt, ks_spec_t *spec, char *err, size_t errlen)
{
	return case_spec_mixed(def, c, dt, dt, spec, err, errlen);
}

int ks_canary_variants(const ks_kernel_def_t *def, ks_dtype_t dtype,
    const char **names, int max)
{
	ks_spec_t spec;
	int i, n = 0;

	for (i = 0; i < NCASES; i++) {
		if (strcmp(cases[i].kernel, def->name) != 0)
			continue;
		if (n < max)
			names[n] = case_spec(def, &cases[i], dtype, &spec, NULL,
			    0) == KS_OK ? def->select(&spec) : "(invalid)";
		n++;
	}
	return n;
}

int64_t ks_canary_diff(const void *got, const void *want, ks_dtype_t dt,
    int64_t n, char *detail, size_t dlen)
{
	size_t es = ks_dtype_size(dt);
	int64_t i;

	for (i = 0; i < n; i++) {
		uint32_t g = 0, w = 0;

		memcpy(&g, (const char *)got + (size_t)i * es, es);
		memcpy(&w, (const char *)want + (size_t)i * es, es);
		if (g == w)
			continue;
		ks_set_err(detail, dlen, "[%" PRId64 "] = 0x%0*x (%.9g), want "
		    "0x%0*x (%.9g)", i, (int)es * 2, g,
		    (double)ref_load(got, (int)dt, i), (int)es * 2, w,
		    (double)ref_load(want, (int)dt, i));
		return i;
	}
	return -1;
}

/* A scalar parameter's value: a dim by name, eps or scale. */
static int scalar_of(const ks_kernel_def_t *def, const int64_t *v,
    const ks_ir_param_t *p, int64_t *i64, float *f32)
{
	int i;

	for (i = 0; i < def->ndims; i++)
		if (strcmp(def->dims[i], p->name) == 0) {
			*i64 = v[i];
			return KS_OK;
		}
	if (strcmp(p->name, "eps") == 0) {
		*f32 = 1e-5f;
		return KS_OK;
	}
	if (strcmp(p->name, "scale") == 0) {
		*f32 = 1.0f / sqrtf((float)dim(def, v, "D"));
		return KS_OK;
	}
	return KS_E_INTERNAL;
}

#ifdef KS_TEST_PLANT
/* The planted wrong reference: element 0 of the first written buffer one
 * ulp off, when $KSPEC_TEST_PLANT_CANARY names DEF. */
static void plant_reference(const ks_kernel_def_t *def, buf_t *want, int nb)
{
	const char *k = getenv("KSPEC_TEST_PLANT_CANARY");
	int i;

	if (!k || strcmp(k, def->name) != 0)
		return;
	for (i = 0; i < nb; i++)
		if (want[i].written) {
			((uint8_t *)want[i].data)[0] ^= 1;
			return;
		}
}

/* Whether the test build leaves DEF's canary unrun: $KSPEC_TEST_PLANT_
 * CANARY_ONLY is set and does not name DEF in its comma-separated list. */
static int plant_skips(const ks_kernel_def_t *def)
{
	const char *only = getenv("KSPEC_TEST_PLANT_CANARY_ONLY"), *p;
	size_t n = strlen(def->name);

	if (!only || !*only)
		return 0;
	for (p = only; *p; p += strcspn(p, ","), p += *p == ',')
		if (strncmp(p, def->name, n) == 0 && (p[n] == ',' || !p[n]))
			return 0;
	return 1;
}
#endif

/* Case C of JOB's kernel in DT with weights in WDT: compile, run,
 * compare.  The variant it ran goes to VARIANT. */
static int run_case(const ks_job_t *job, const canary_case_t *c,
    ks_dtype_t dt, ks_dtype_t wdt, const char **variant, char *err,
    size_t errlen)
{
	const ks_kernel_def_t *def = job->spec.def;
	ks_jit_arg_t args[KS_JIT_MAX_ARGS];
	int64_t i64[KS_JIT_MAX_ARGS];
	float f32[KS_JIT_MAX_ARGS];
	buf_t got[LAY_MAXB], want[LAY_MAXB];
	ks_ir_kernel_t *k = NULL;
	ks_jit_artifact_t a;
	ks_job_out_t out;
	ks_job_t cj = *job;
	char detail[256];
	int i, j, nb = 0, rc;

	memset(&out, 0, sizeof out);
	memset(got, 0, sizeof got);
	memset(want, 0, sizeof want);
	cj.canary = 0;
	rc = case_spec_mixed(def, c, dt, wdt, &cj.spec, err, errlen);
	if (rc == KS_OK)
		rc = ks_job_run(&cj, &out, err, errlen);
	if (rc == KS_OK)
		rc = ks_specialize(&cj.spec, &k, err, errlen);
	if (rc == KS_OK && (strcmp(k->variant, out.variant) != 0 ||
	    k->nparams > KS_JIT_MAX_ARGS)) {
		ks_set_err(err, errlen, "%s: the specialized kernel is not "
		    "the compiled one", def->name);
		rc = KS_E_INTERNAL;
	}
	if (rc != KS_OK)
		goto out;
	*variant = def->select(&cj.spec);
	nb = layout(def, c->dims, got);
	lay_fill_mixed(def, c->dims, got, nb, dt, wdt, CANARY_SEED);
	for (i = 0; i < nb; i++) {
		size_t n = lay_size(&got[i], dt, wdt);

		want[i] = got[i];
		want[i].data = malloc(n ? n : 1);
		if (!want[i].data) {
			rc = KS_E_NOMEM;
			goto out;
		}
		memcpy(want[i].data, got[i].data, n);
		if (lay_is_output(&got[i]))
			memset(got[i].data, 0xff, n);
	}
	for (i = 0; i < k->nparams; i++) {
		const ks_ir_param_t *p = &k->params[i];

		args[i] = (ks_jit_arg_t){ NULL, 0 };
		if (p->kind == KS_PARAM_SCALAR && p->bound)
			continue;
		if (p->kind == KS_PARAM_SCALAR) {
			rc = scalar_of(def, c->dims, p, &i64[i], &f32[i]);
			args[i].data = p->type == KS_TY_F32 ? (void *)&f32[i] :
			    (void *)&i64[i];
			args[i].bytes = p->type == KS_TY_F32 ? 4 : 8;
		} else {
			for (j = 0; j < nb && strcmp(got[j].name, p->name); j++)
				;
			rc = j < nb ? KS_OK : KS_E_INTERNAL;
			if (j < nb)
				args[i] = (ks_jit_arg_t){ got[j].data,
				    lay_size(&got[j], dt, wdt) };
		}
		if (rc != KS_OK) {
			ks_set_err(err, errlen, "%s: no canary value for "
			    "parameter %s", def->name, p->name);
			goto out;
		}
	}
	memset(&a, 0, sizeof a);
	a.bytes = out.bytes;
	a.len = out.len;
	memcpy(a.format, out.format, sizeof a.format);
	rc = job->backend->run(k, job->target, &a, args, err, errlen);
	if (rc != KS_OK)
		goto out;
	ref_kernel_mixed(def, dt, wdt, c->dims, want, nb);
#ifdef KS_TEST_PLANT
	plant_reference(def, want, nb);
#endif
	for (i = 0; i < nb; i++) {
		int64_t at;

		if (!got[i].written)
			continue;
		at = ks_canary_diff(got[i].data, want[i].data,
		    lay_cmp_dtype(&got[i], lay_dtype(&got[i], dt, wdt)),
		    got[i].elems, detail, sizeof detail);
		if (at < 0)
			continue;
		ks_set_err(err, errlen, "variant %s %s%s%s (dims %s): %s%s",
		    k->variant, ks_dtype_name(dt), wdt != dt ? " wdtype " : "",
		    wdt != dt ? ks_dtype_name(wdt) : "", c->consts ?
		    "constant" : "dynamic", got[i].name, detail);
		rc = KS_E_CANARY;
		break;
	}
out:
	for (i = 0; i < nb; i++) {
		free(got[i].data);
		free(want[i].data);
	}
	if (k)
		ks_ir_free(k);
	ks_job_out_close(&out);
	return rc;
}

int ks_canary_run(const ks_job_t *job, char *summary, size_t slen,
    double *ms, char *err, size_t errlen)
{
	const char *seen[16], *variant = NULL;
	uint64_t t0 = ks_now_ns();
	ks_dtype_t pr[NDTYPES * NDTYPES][2];
	int i, d, s, np, nseen = 0, runs = 0, rc = KS_OK;
	ks_buf_t names;

	*ms = 0;
	if (!job->backend->run) {
		ks_set_err(err, errlen, "backend %s cannot run its artifacts "
		    "in a worker", job->backend->name);
		return KS_E_UNSUPPORTED;
	}
#ifdef KS_TEST_PLANT
	if (plant_skips(job->spec.def)) {
		ks_set_err(summary, slen, "not run: the test build runs the "
		    "canaries of $KSPEC_TEST_PLANT_CANARY_ONLY only");
		return KS_OK;
	}
#endif
	np = pairs(job->spec.def, pr);
	for (i = 0; i < NCASES && rc == KS_OK; i++) {
		if (strcmp(cases[i].kernel, job->spec.def->name) != 0)
			continue;
		for (d = 0; d < np && rc == KS_OK; d++) {
			rc = run_case(job, &cases[i], pr[d][0], pr[d][1],
			    &variant, err, errlen);
			if (rc != KS_OK)
				break;
			runs++;
			for (s = 0; s < nseen && strcmp(seen[s], variant); s++)
				;
			if (s == nseen && nseen < 16)
				seen[nseen++] = variant;
		}
	}
	*ms = (double)(ks_now_ns() - t0) / 1e6;
	if (rc != KS_OK)
		return rc;
	if (runs == 0) {
		ks_set_err(err, errlen, "kernel %s has no canary",
		    job->spec.def->name);
		return KS_E_INTERNAL;
	}
	ks_buf_init(&names);
	for (s = 0; s < nseen; s++)
		ks_buf_printf(&names, "%s%s", s ? " " : "", seen[s]);
	ks_buf_puts(&names, "; f32 f16 bf16");
	for (d = NDTYPES; d < np; d++)
		ks_buf_printf(&names, " %s/w%s", ks_dtype_name(pr[d][0]),
		    ks_dtype_name(pr[d][1]));
	ks_set_err(summary, slen, "%d runs equal to the reference (variants "
	    "%s) in %.0f ms", runs, names.data ? names.data : "", *ms);
	ks_buf_close(&names);
	return KS_OK;
}
