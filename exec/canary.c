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
 * weight buffer filled and compared in its own dtype.  The quantized
 * cases (a constant K or H, a multiple of q4_k's 256) run instead at f32
 * with each block format the kernel takes (gemm, gemm_pack_w, embedding:
 * q8_0, q4_0, q4_k): their weight buffer is random blocks with finite
 * scales, and the reference runs on its rows decoded by ref/ref_quant.h,
 * so a quantized kernel is held to the f32 kernel on the decoded
 * weights, as docs/kernels.md defines it.  gemm's fast cases run at f32
 * with each block format in mode fast: x random q8_0 blocks as well, and
 * the reference ref/ref_fast.h's sums over both.  Inputs
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
#include "../ref/ref_fast.h"
#include "exec.h"

/* The seed of every canary's inputs. */
#define CANARY_SEED 7

/* dims in declared order; consts bit i: dim i is constant, else dynamic;
 * quant: the case runs with the block formats (qfmts), not the dtypes;
 * QUANT_FAST: in mode fast (gemm's x in q8_0 blocks, ref/ref_fast.h). */
enum { QUANT_FAST = 2 };
typedef struct {
	const char *kernel;
	int64_t dims[KS_MAX_DIMS];
	unsigned consts;
	int quant;
} canary_case_t;

static const canary_case_t cases[] = {
	{ "gemm", { 1, 37, 100 }, 7, 0 },                 /* gemv_m1 */
	{ "gemm", { 3, 37, 100 }, 7, 0 },                 /* small_m */
	{ "gemm", { 5, 37, 100 }, 0, 0 },                 /* general */
	{ "gemm", { 9, 37, 100 }, 7, 0 },                 /* blocked */
	{ "gemm_packed", { 13, 37, 100 }, 7, 0 },          /* partial panels */
	{ "gemm_packed", { 13, 37, 2100 }, 0, 0 },         /* k in chunks */
	{ "gemm_pack_x", { 13, 100 }, 3, 0 },              /* partial panels */
	{ "gemm_pack_x", { 13, 100 }, 0, 0 },
	{ "gemm_pack_w", { 37, 100 }, 3, 0 },
	{ "gemm_pack_w", { 37, 100 }, 0, 0 },
	{ "rmsnorm", { 3, 100 }, 3, 0 },                  /* row_local: f16, bf16 */
	{ "rmsnorm", { 3, 100 }, 0, 0 },
	{ "add_rmsnorm", { 3, 100 }, 3, 0 },
	{ "add_rmsnorm", { 3, 100 }, 0, 0 },
	{ "softmax", { 3, 100 }, 3, 0 },                  /* row_local */
	{ "softmax", { 3, 100 }, 0, 0 },
	{ "rope", { 3, 4, 16, 8 }, 15, 0 },
	{ "rope", { 3, 4, 16, 8 }, 0, 0 },
	{ "silu_mul", { 2, 100 }, 3, 0 },
	{ "silu_mul", { 2, 100 }, 0, 0 },
	{ "attention_decode", { 2, 8, 2, 64, 70 }, 31, 0 },   /* gqa, G = 4 */
	{ "attention_decode", { 2, 8, 8, 64, 70 }, 31, 0 },   /* head_dim */
	{ "attention_decode", { 2, 8, 2, 48, 70 }, 0, 0 },    /* general */
	{ "embedding", { 3, 50, 300 }, 7, 0 },
	{ "embedding", { 3, 50, 300 }, 0, 0 },
	{ "argmax", { 3, 100 }, 3, 0 },
	{ "argmax", { 3, 100 }, 0, 0 },
	{ "kv_append_rope", { 2, 3, 2, 16, 12, 10 }, 63, 0 },
	{ "kv_append_rope", { 2, 3, 2, 16, 12, 10 }, 0, 0 },
	/* B, T, Hq, Hkv, D, S, Sc: 3 causal rows, rows of 80 positions */
	{ "attention_prefill", { 2, 3, 8, 2, 64, 70, 80 }, 127, 0 },   /* gqa */
	{ "attention_prefill", { 2, 3, 8, 8, 64, 70, 80 }, 127, 0 },   /* head_dim */
	{ "attention_prefill", { 2, 3, 8, 2, 48, 70, 80 }, 0, 0 },     /* general */
	/* B, T, Hq, Hkv, D, BS, MB, NB: 80 positions in blocks of 16 */
	{ "attention_paged", { 2, 1, 8, 2, 64, 16, 5, 11 }, 255, 0 },  /* gqa */
	{ "attention_paged", { 2, 4, 8, 8, 64, 16, 5, 11 }, 255, 0 },  /* head_dim */
	{ "attention_paged", { 2, 3, 8, 2, 48, 16, 5, 11 }, 0, 0 },    /* general */
	/* the block formats: K (H) constant */
	{ "gemm", { 1, 37, 256 }, 7, 1 },              /* gemv_m1 */
	{ "gemm", { 3, 37, 256 }, 7, 1 },              /* small_m */
	{ "gemm", { 5, 37, 256 }, 4, 1 },              /* general, M N dyn */
	{ "gemm", { 9, 37, 256 }, 7, 1 },              /* blocked */
	{ "gemm_pack_w", { 37, 256 }, 3, 1 },
	{ "gemm_pack_w", { 37, 256 }, 2, 1 },
	{ "embedding", { 3, 50, 256 }, 7, 1 },
	{ "embedding", { 3, 50, 256 }, 4, 1 },
	/* gemm's fast mode: M = 1 and 3 rows, a partial group of 16 rows */
	{ "gemm", { 1, 37, 256 }, 7, QUANT_FAST },     /* fast */
	{ "gemm", { 3, 37, 256 }, 6, QUANT_FAST },     /* fast, M dynamic */
};

#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static const ks_dtype_t dtypes[] = { KS_DTYPE_F32, KS_DTYPE_F16,
    KS_DTYPE_BF16 };

#define NDTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

static const ks_dtype_t qfmts[] = { KS_DTYPE_Q8_0, KS_DTYPE_Q4_0,
    KS_DTYPE_Q4_K };

#define NQFMTS ((int)(sizeof qfmts / sizeof qfmts[0]))

/* The (dtype, weight dtype) pairs of DEF's runs: each dtype with itself,
 * then the mixed pairs it allows; for the quantized cases (QUANT) f32
 * with each block format it allows.  Returns the count (at most
 * NDTYPES^2). */
static int pairs(const ks_kernel_def_t *def, int quant,
    ks_dtype_t (*out)[2])
{
	int d, w, n = 0;

	if (quant) {
		for (w = 0; w < NQFMTS; w++)
			if (ks_kernel_wdtype_ok(def, KS_DTYPE_F32, qfmts[w])) {
				out[n][0] = KS_DTYPE_F32;
				out[n][1] = qfmts[w];
				n++;
			}
		return n;
	}
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
		if (strcmp(cases[i].kernel, def->name) == 0)
			n += pairs(def, cases[i].quant, pr);
	return n;
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
	return ks_kernel_validate_mixed(def, dt, wdt, c->quant == QUANT_FAST ?
	    KS_MODE_FAST : KS_MODE_EXACT, dims, def->ndims, spec, err, errlen);
}

int ks_canary_variants(const ks_kernel_def_t *def, ks_dtype_t dtype,
    const char **names, int max)
{
	ks_spec_t spec;
	int i, n = 0;

	for (i = 0; i < NCASES; i++) {
		if (strcmp(cases[i].kernel, def->name) != 0 ||
		    (cases[i].quant && (cases[i].quant != QUANT_FAST ||
		    dtype != KS_DTYPE_F32)))
			continue;
		/* A fast case at f32 reports its variant with q4_0 weights
		 * (every block format selects the same). */
		if (n < max)
			names[n] = case_spec_mixed(def, &cases[i], dtype,
			    cases[i].quant ? KS_DTYPE_Q4_0 : dtype, &spec, NULL,
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

/* Bytes of B in DT with weights in WDT, a block format's whole blocks
 * for the weight buffer. */
static size_t buf_bytes(const buf_t *b, ks_dtype_t dt, ks_dtype_t wdt)
{
	int qk, qb;

	if (b->weight && ks_dtype_block(wdt, &qk, &qb))
		return (size_t)(b->elems / qk * qb);
	return lay_size(b, dt, wdt);
}

/* The weight buffer GOT of a quantized case (or a fast case's x, in
 * q8_0): random blocks of format WDT with finite scales (d, and q4_k's
 * dmin, of exponents 2^-10 .. 2^2) from SEED, and WANT its weights
 * decoded to f32 (both buffers hold elems f32). */
static void quant_fill(buf_t *got, buf_t *want, ks_dtype_t wdt,
    uint64_t seed)
{
	int fmt = wdt == KS_DTYPE_Q8_0 ? REF_Q8_0 : wdt == KS_DTYPE_Q4_0 ?
	    REF_Q4_0 : REF_Q4_K;
	int64_t bb = ref_qblock_bytes(fmt), nb = got->elems / ref_qblock(fmt);
	uint64_t s = seed;
	uint8_t *p = got->data;
	int64_t i, j;

	for (i = 0; i < nb * bb; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		p[i] = (uint8_t)(s >> 56);
	}
	for (i = 0; i < nb; i++)
		for (j = 0; j < (fmt == REF_Q4_K ? 2 : 1); j++) {
			uint8_t *h = p + i * bb + 2 * j;

			/* exponent field 5..17, sign and fraction random */
			h[1] = (uint8_t)((h[1] & 0x83) | (5 + h[0] % 13) << 2);
		}
	ref_dequant_row(fmt, got->data, got->elems, want->data);
}

/* The buffer of B[0..NB) named NAME (a fast case's x, W, y: present). */
static buf_t *lay_find(buf_t *b, int nb, const char *name)
{
	int i;

	for (i = 0; i < nb - 1 && strcmp(b[i].name, name) != 0; i++)
		;
	return &b[i];
}

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
	int i, j, nb = 0, qw = 0, rc;

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
	/* A block format's buffer is filled as f32 first: its blocks take
	 * fewer bytes than that. */
	qw = ks_dtype_block(wdt, NULL, NULL);
	lay_fill_mixed(def, c->dims, got, nb, dt, qw ? dt : wdt, CANARY_SEED);
	for (i = 0; i < nb; i++) {
		size_t n = lay_size(&got[i], dt, qw ? dt : wdt);

		want[i] = got[i];
		want[i].data = malloc(n ? n : 1);
		if (!want[i].data) {
			rc = KS_E_NOMEM;
			goto out;
		}
		memcpy(want[i].data, got[i].data, n);
		if (qw && got[i].weight)
			quant_fill(&got[i], &want[i], wdt, CANARY_SEED);
		if (c->quant == QUANT_FAST && strcmp(got[i].name, "x") == 0)
			quant_fill(&got[i], &want[i], KS_DTYPE_Q8_0,
			    CANARY_SEED + 1);
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
				    c->quant == QUANT_FAST && strcmp(p->name,
				    "x") == 0 ? (size_t)(got[j].elems / 32 *
				    34) : buf_bytes(&got[j], dt, wdt) };
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
	/* A quantized case's reference: the decoded weights, in f32; a fast
	 * case's the fast mode's sums over x's and W's blocks. */
	if (c->quant == QUANT_FAST)
		ref_gemm_fast(wdt == KS_DTYPE_Q8_0 ? REF_Q8_0 : wdt ==
		    KS_DTYPE_Q4_0 ? REF_Q4_0 : REF_Q4_K, lay_find(got, nb,
		    "x")->data, lay_find(got, nb, "W")->data, lay_find(want,
		    nb, "y")->data, c->dims[0], c->dims[1], c->dims[2]);
	else
		ref_kernel_mixed(def, dt, qw ? dt : wdt, c->dims, want, nb);
#ifdef KS_TEST_PLANT
	plant_reference(def, want, nb);
#endif
	for (i = 0; i < nb; i++) {
		int64_t at;

		if (!got[i].written)
			continue;
		at = ks_canary_diff(got[i].data, want[i].data,
		    lay_cmp_dtype(&got[i], lay_dtype(&got[i], dt,
		    qw ? dt : wdt)), got[i].elems, detail, sizeof detail);
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
	ks_dtype_t ran[NDTYPES * NDTYPES + NQFMTS][2];
	int i, d, s, np, nseen = 0, nran = 0, runs = 0, rc = KS_OK;
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
	for (i = 0; i < NCASES && rc == KS_OK; i++) {
		if (strcmp(cases[i].kernel, job->spec.def->name) != 0)
			continue;
		np = pairs(job->spec.def, cases[i].quant, pr);
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
			/* The (dtype, weight dtype) pairs that ran, in order. */
			for (s = 0; s < nran && (ran[s][0] != pr[d][0] ||
			    ran[s][1] != pr[d][1]); s++)
				;
			if (s == nran && nran < NDTYPES * NDTYPES + NQFMTS) {
				ran[nran][0] = pr[d][0];
				ran[nran++][1] = pr[d][1];
			}
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
	for (s = 0; s < nran; s++)
		ks_buf_printf(&names, "%s%s%s%s", s ? " " : "; ",
		    ks_dtype_name(ran[s][0]), ran[s][1] != ran[s][0] ? "/w" : "",
		    ran[s][1] != ran[s][0] ? ks_dtype_name(ran[s][1]) : "");
	ks_set_err(summary, slen, "%d runs equal to the reference (variants "
	    "%s) in %.0f ms", runs, names.data ? names.data : "", *ms);
	ks_buf_close(&names);
	return KS_OK;
}
