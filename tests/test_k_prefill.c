/*
 * attention_prefill and attention_paged: selection and rejection of
 * shapes, and every variant x dtype run on the cpu backend and on OpenCL
 * (PoCL here) against the plain-C reference of ref/ref_attn.h, written
 * from the documented order:
 *
 *   - cpu and OpenCL: bit for bit against the reference;
 *   - both: within a bound of a double-precision reference;
 *   - every specialization bitwise equal to general at its shape (cpu:
 *     general forced at the same constants; OpenCL: general dynamic);
 *   - a decode step equal to a prefill row and to a paged row, bitwise;
 *   - the causal mask, the block table and each checker shown to catch a
 *     planted bug.
 *
 * As in test_k_attn.c, one program per variant x dtype with the dims it
 * does not need left dynamic, many shapes run through it.
 */
#include <math.h>

#include "cl.h"
#include "kern.h"
#include "../ref/ref_attn.h"

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(prefill, .init = setup, .timeout = 300);

#define PREFILL (&ks_kernel_attention_prefill)
#define PAGED (&ks_kernel_attention_paged)
#define DECODE (&ks_kernel_attention_decode)
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---- cases ---- */

enum { MAXB = 4, MAXBT = 64 };

/* A prefill case (MB = 0) or a paged one (MB > 0; S, Sc unused). */
typedef struct {
	int64_t B, T, Hq, Hkv, D, S, Sc, BS, MB, NB;
	int32_t lens[MAXB];
	float smul;             /* scale = smul / sqrt(D); 0 means 6 */
} case_t;

typedef struct {
	case_t c;
	ref_attn_shape_t sh;
	ks_dtype_t dt;
	float scale;
	size_t es;
	int64_t nq, nkv;
	void *q, *k, *v, *o, *want;
	int32_t lens[MAXB], bt[MAXBT];
} prob_t;

#define SENTINEL 0xa5

/* The block table of a paged case: the blocks out of order, with one
 * entry below 0 and one past NB where there are 4 entries or more (both
 * clamped by the kernel and the reference alike). */
static void fill_table(prob_t *p)
{
	int64_t j, n = p->c.B * p->c.MB;

	cr_assert_leq(n, MAXBT);
	for (j = 0; j < n; j++)
		p->bt[j] = (int32_t)((j * 7 + 3) % p->c.NB);
	if (n >= 4) {
		p->bt[1] = -2;
		p->bt[n - 2] = (int32_t)(p->c.NB + 5);
	}
}

static void prob_init(prob_t *p, const case_t *c, ks_dtype_t dt,
    uint64_t seed)
{
	int paged = c->MB > 0;

	memset(p, 0, sizeof *p);
	p->c = *c;
	p->dt = dt;
	p->sh = (ref_attn_shape_t){ c->B, c->T, c->Hq, c->Hkv, c->D,
	    paged ? c->MB * c->BS : c->S, c->Sc, paged ? p->bt : NULL, c->BS,
	    c->MB, c->NB };
	p->scale = (c->smul != 0 ? c->smul : 6.0f) / sqrtf((float)c->D);
	p->es = ks_dtype_size(dt);
	p->nq = c->B * c->T * c->Hq * c->D;
	p->nkv = (paged ? c->NB * c->BS : c->B * c->Sc) * c->Hkv * c->D;
	p->q = malloc(p->es * (size_t)p->nq);
	p->k = malloc(p->es * (size_t)p->nkv);
	p->v = malloc(p->es * (size_t)p->nkv);
	p->o = malloc(p->es * (size_t)p->nq);
	p->want = malloc(p->es * (size_t)p->nq);
	cr_assert(p->q && p->k && p->v && p->o && p->want);
	ref_fill(p->q, (int)dt, p->nq, seed);
	ref_fill(p->k, (int)dt, p->nkv, seed + 1);
	ref_fill(p->v, (int)dt, p->nkv, seed + 2);
	memset(p->o, SENTINEL, p->es * (size_t)p->nq);
	cr_assert_leq(c->B, MAXB);
	memcpy(p->lens, c->lens, sizeof p->lens);
	if (paged)
		fill_table(p);
}

static void prob_close(prob_t *p)
{
	free(p->q);
	free(p->k);
	free(p->v);
	free(p->o);
	free(p->want);
}

/* ---- IR and runners ---- */

typedef kt_prog_t prog_t;

/* The IR of DEF's VARIANT (NULL: selected) at dims VALS (declared order,
 * 0: dynamic). */
static ks_ir_kernel_t *ir_of(const ks_kernel_def_t *def, const char *variant,
    ks_dtype_t dt, const int64_t *vals)
{
	return gpu_kernel_ir(def, variant, dt, KS_MODE_EXACT, vals);
}

static void prog_run(prog_t *p, prob_t *pr)
{
	const case_t *c = &pr->c;
	kt_buf_t bufs[] = {
		{ "q", pr->q, pr->es * (size_t)pr->nq },
		{ "k", pr->k, pr->es * (size_t)pr->nkv },
		{ "v", pr->v, pr->es * (size_t)pr->nkv },
		{ "block_table", pr->bt, sizeof(int32_t) * (size_t)(c->B *
		    (c->MB > 0 ? c->MB : 1)) },
		{ "lens", pr->lens, sizeof(int32_t) * (size_t)c->B },
		{ "o", pr->o, pr->es * (size_t)pr->nq },
	};
	kt_val_t vals[] = {
		{ "B", c->B, 0 }, { "T", c->T, 0 }, { "Hq", c->Hq, 0 },
		{ "Hkv", c->Hkv, 0 }, { "D", c->D, 0 }, { "S", c->S, 0 },
		{ "Sc", c->Sc, 0 }, { "BS", c->BS, 0 }, { "MB", c->MB, 0 },
		{ "NB", c->NB, 0 }, { "scale", 0, pr->scale },
	};
	kt_args_t a;

	kt_bind(&a, p->k, bufs, NELEM(bufs), vals, NELEM(vals));
	kt_prog_run(p, a.args);
}

/* ---- checkers ---- */

/*
 * Count of outputs off the double-precision result by more than the bound
 * of test_k_attn.c, per row over the positions it sees: vmax * (8 (D + 2)
 * 2^-24 smag + (4n + 256) 2^-24) + 2 u |exact| + 2^-24.
 */
static int64_t f64_diff(const char *who, const prob_t *p, const void *got)
{
	const case_t *c = &p->c;
	double *exact = malloc(sizeof(double) * (size_t)p->nq);
	double u = kt_unit(p->dt);
	int64_t b, t, h, d, pos, i, n, kvh, ko, bad = 0;

	ref_attn_rows_f64(p->q, p->k, p->v, p->lens, exact, (int)p->dt, &p->sh,
	    p->scale);
	for (b = 0; b < c->B; b++)
		for (t = 0; t < c->T; t++)
		for (h = 0; h < c->Hq; h++) {
			int64_t qo = ((b * c->T + t) * c->Hq + h) * c->D;
			double smag = 0, vmax[512] = { 0 };

			n = ref_attn_row_len(&p->sh, p->lens, b, t, 0);
			kvh = h / (c->Hq / c->Hkv);
			for (pos = 0; pos < n; pos++) {
				double s = 0;

				ko = (ref_attn_kvrow(&p->sh, b, pos, 0) *
				    c->Hkv + kvh) * c->D;
				for (d = 0; d < c->D; d++) {
					s += fabs((double)ref_load(p->q,
					    (int)p->dt, qo + d) * ref_load(p->k,
					    (int)p->dt, ko + d));
					vmax[d] = fmax(vmax[d], fabs((double)
					    ref_load(p->v, (int)p->dt, ko + d)));
				}
				smag = fmax(smag, s * fabs(p->scale));
			}
			for (d = 0; d < c->D; d++) {
				double g, tol;

				i = qo + d;
				g = ref_load(got, (int)p->dt, i);
				tol = vmax[d] * (8.0 * (double)(c->D + 2) *
				    0x1p-24 * smag + (4.0 * (double)n + 256) *
				    0x1p-24) + 2 * u * fabs(exact[i]) + 0x1p-24;
				if (!(fabs(g - exact[i]) <= tol) && bad++ < 3)
					cr_log_info("%s: o[%lld][%lld][%lld][%lld]"
					    " = %.9g, exact %.9g (bound %.3g)",
					    who, (long long)b, (long long)t,
					    (long long)h, (long long)d, g,
					    exact[i], tol);
			}
		}
	free(exact);
	return bad;
}

static void label(char *out, size_t n, const prog_t *p, const prob_t *pr)
{
	const case_t *c = &pr->c;

	snprintf(out, n, "%s %s.%s %s B=%lld T=%lld Hq=%lld Hkv=%lld D=%lld "
	    "S=%lld Sc=%lld BS=%lld MB=%lld", p->env != NULL ? "opencl" :
	    "cpu", p->k->name, p->k->variant, ks_dtype_name(pr->dt),
	    (long long)c->B, (long long)c->T, (long long)c->Hq,
	    (long long)c->Hkv, (long long)c->D, (long long)c->S,
	    (long long)c->Sc, (long long)c->BS, (long long)c->MB);
}

/* Runs CASES through P: bitwise against the reference, within the bound
 * of double precision; with EQ, bitwise equal to EQ on the same inputs. */
static void check_cases(prog_t *p, prog_t *eq, ks_dtype_t dt,
    const case_t *cases, size_t ncases)
{
	char who[200];
	prob_t pr;
	size_t i;
	void *o2;

	for (i = 0; i < ncases; i++) {
		prob_init(&pr, &cases[i], dt, 1000 + i * 17);
		ref_attn_rows(pr.q, pr.k, pr.v, pr.lens, pr.want, (int)dt,
		    &pr.sh, pr.scale);
		prog_run(p, &pr);
		label(who, sizeof who, p, &pr);
		kt_assert_bitwise(who, pr.o, pr.want, dt, pr.nq);
		cr_assert_eq(f64_diff(who, &pr, pr.o), 0, "%s: off the double "
		    "precision result", who);
		if (eq != NULL) {
			o2 = pr.o;
			pr.o = pr.want;
			memset(pr.o, SENTINEL, pr.es * (size_t)pr.nq);
			prog_run(eq, &pr);
			strncat(who, " vs general", sizeof who - strlen(who) -
			    1);
			kt_assert_bitwise(who, o2, pr.o, dt, pr.nq);
			pr.o = o2;
		}
		prob_close(&pr);
	}
}

/* ---- the shapes ---- */

/*
 * Prefill through general, every dim dynamic: rows seeing 0 positions
 * (lens < T), 1, 63/64/65 around a chunk edge, rows spanning several
 * chunks, lens clamped from below and above, S < Sc, T = 1 and T > S,
 * G = 1, 3, 4, D = 33, 96, large scores.
 */
static const case_t prefill_general[] = {
	{ 4, 5, 4, 1, 96, 130, 140, 0, 0, 0, { 2, 65, 68, 130 }, 0 },
	{ 2, 17, 3, 1, 33, 80, 80, 0, 0, 0, { 80, -3 }, 0 },
	{ 3, 1, 4, 4, 33, 64, 70, 0, 0, 0, { 64, 99, 1 }, 0 },
	{ 1, 9, 4, 2, 128, 200, 201, 0, 0, 0, { 200 }, 60 },
};

/* Through head_dim at D = 128. */
static const case_t prefill_hd[] = {
	{ 3, 5, 4, 2, 128, 130, 131, 0, 0, 0, { 4, 66, 130 }, 0 },
	{ 1, 70, 2, 2, 128, 70, 96, 0, 0, 0, { 70 }, 60 },
};

/* Through gqa at T = 4 (a verify width), Hq = 8, Hkv = 2, D = 64. */
static const case_t verify_gqa[] = {
	{ 4, 4, 8, 2, 64, 140, 150, 0, 0, 0, { 3, 64, 68, 140 }, 0 },
	{ 2, 4, 8, 2, 64, 300, 300, 0, 0, 0, { 300, 129 }, 60 },
};

/*
 * Paged through general, every dim dynamic: blocks of 16 and 5 (BS not a
 * divisor of the chunk), tables out of order with entries clamped from
 * both sides, lens past MB * BS clamped, T = 1 (decode) and T = 6.
 */
static const case_t paged_general[] = {
	{ 3, 6, 4, 1, 96, 0, 0, 16, 9, 30, { 144, 70, 5 }, 0 },
	{ 2, 1, 4, 2, 33, 0, 0, 5, 20, 41, { 99, 200 }, 0 },
	{ 1, 3, 2, 2, 128, 0, 0, 7, 12, 12, { 80 }, 60 },
};

/* Through head_dim at D = 64, BS = 16. */
static const case_t paged_hd[] = {
	{ 3, 6, 4, 2, 64, 0, 0, 16, 9, 30, { 144, 70, 5 }, 0 },
};

/* Through gqa at T = 1 (paged decode), Hq = 8, Hkv = 2, D = 128, BS = 16. */
static const case_t paged_gqa[] = {
	{ 4, 1, 8, 2, 128, 0, 0, 16, 9, 40, { 144, 65, 0, 17 }, 0 },
};

static const int64_t d_prefill[7] = { 0 };
static const int64_t d_prefill_hd[7] = { 0, 0, 0, 0, 128, 0, 0 };
static const int64_t d_verify[7] = { 0, 4, 8, 2, 64, 0, 0 };
static const int64_t d_paged[8] = { 0 };
static const int64_t d_paged_hd[8] = { 0, 0, 0, 0, 64, 16, 0, 0 };
static const int64_t d_paged_gqa[8] = { 0, 1, 8, 2, 128, 16, 0, 0 };

/* One program of a run: the dims it is compiled at, the variant they
 * select, its cases. */
typedef struct {
	const ks_kernel_def_t *def;
	const int64_t *dims;
	const char *variant;
	const case_t *cases;
	size_t ncases;
} run_t;

static const run_t runs[] = {
	{ PREFILL, d_prefill, "general", prefill_general,
	    NELEM(prefill_general) },
	{ PREFILL, d_prefill_hd, "head_dim", prefill_hd, NELEM(prefill_hd) },
	{ PREFILL, d_verify, "gqa", verify_gqa, NELEM(verify_gqa) },
	{ PAGED, d_paged, "general", paged_general, NELEM(paged_general) },
	{ PAGED, d_paged_hd, "head_dim", paged_hd, NELEM(paged_hd) },
	{ PAGED, d_paged_gqa, "gqa", paged_gqa, NELEM(paged_gqa) },
};

/* Every run in DT on the cpu (ENV NULL) or OpenCL.  A specialization is
 * compared with general: on the cpu forced at its constants, on OpenCL
 * the general program of every dim dynamic (one compile fewer each). */
static void dtype_runs(ks_dtype_t dt, clenv_t *env)
{
	prog_t p, gen, dyn[2];
	size_t i;
	int j;

	for (j = 0; env != NULL && j < 2; j++)
		kt_prog_open(&dyn[j], ir_of(j ? PAGED : PREFILL, NULL, dt,
		    j ? d_paged : d_prefill), env);
	for (i = 0; i < NELEM(runs); i++) {
		const run_t *r = &runs[i];
		int generic = strcmp(r->variant, "general") == 0;

		if (generic && env != NULL) {
			check_cases(&dyn[r->def == PAGED], NULL, dt, r->cases,
			    r->ncases);
			continue;
		}
		kt_prog_open(&p, ir_of(r->def, NULL, dt, r->dims), env);
		cr_assert_str_eq(p.k->variant, r->variant);
		if (generic) {
			check_cases(&p, NULL, dt, r->cases, r->ncases);
		} else if (env != NULL) {
			check_cases(&p, &dyn[r->def == PAGED], dt, r->cases,
			    r->ncases);
		} else {
			kt_prog_open(&gen, ir_of(r->def, "general", dt,
			    r->dims), NULL);
			check_cases(&p, &gen, dt, r->cases, r->ncases);
			kt_prog_close(&gen);
		}
		kt_prog_close(&p);
	}
	for (j = 0; env != NULL && j < 2; j++)
		kt_prog_close(&dyn[j]);
}

/* ---- selection and rejection ---- */

static const char *selected(const ks_kernel_def_t *def, const int64_t *v)
{
	ks_dim_t dims[KS_MAX_DIMS];
	ks_spec_t spec;
	char err[256];
	int i;

	for (i = 0; i < def->ndims; i++)
		dims[i] = (ks_dim_t){ def->dims[i], v[i] != 0, v[i] };
	cr_assert_eq(ks_kernel_validate(def, KS_DTYPE_F16, KS_MODE_EXACT, dims,
	    def->ndims, &spec, err, sizeof err), KS_OK, "%s", err);
	return def->select(&spec);
}

Test(prefill, selects_each_variant_inside_its_guard_only)
{
	/* B, T, Hq, Hkv, D, S, Sc; paged B, T, Hq, Hkv, D, BS, MB, NB */
	static const struct {
		int64_t dims[8];
		const char *prefill, *paged;
	} cases[] = {
		{ { 0, 0, 0, 0, 128 }, "head_dim", "head_dim" },
		{ { 0, 0, 0, 0, 64 }, "head_dim", "head_dim" },
		{ { 0, 0, 0, 0, 256 }, "head_dim", "head_dim" },
		{ { 0, 0, 0, 0, 96 }, "general", "general" },
		{ { 0, 0, 0, 0, 0 }, "general", "general" },
		{ { 0, 4, 32, 8, 128 }, "gqa", "gqa" },
		{ { 0, 0, 2, 1, 64 }, "gqa", "gqa" },
		{ { 0, 1, 8, 1, 128 }, "gqa", "gqa" },
		{ { 0, 8, 8, 8, 128 }, "head_dim", "head_dim" },   /* G = 1 */
		{ { 0, 2, 16, 1, 64 }, "head_dim", "head_dim" },   /* G = 16 */
		{ { 0, 2, 8, 1, 256 }, "head_dim", "head_dim" },   /* 2048 */
		{ { 0, 2, 0, 8, 128 }, "head_dim", "head_dim" },
		{ { 0, 2, 32, 8, 96 }, "general", "general" },
	};
	size_t i;

	cr_assert_eq(ks_kernel_find("attention_prefill"), PREFILL);
	cr_assert_eq(ks_kernel_find("attention_paged"), PAGED);
	for (i = 0; i < NELEM(cases); i++) {
		cr_assert_str_eq(selected(PREFILL, cases[i].dims),
		    cases[i].prefill, "case %zu", i);
		cr_assert_str_eq(selected(PAGED, cases[i].dims),
		    cases[i].paged, "case %zu", i);
	}
}

static int validate(const ks_kernel_def_t *def, const int64_t *v, char *err,
    size_t errlen)
{
	ks_dim_t dims[KS_MAX_DIMS];
	ks_spec_t spec;
	int i;

	for (i = 0; i < def->ndims; i++)
		dims[i] = (ks_dim_t){ def->dims[i], v[i] != 0, v[i] };
	return ks_kernel_validate(def, KS_DTYPE_BF16, KS_MODE_EXACT, dims,
	    def->ndims, &spec, err, errlen);
}

Test(prefill, bad_constant_shapes_are_rejected_with_a_reason)
{
	const int64_t ok[7] = { 0, 0, 0, 0, 512, 100, 100 };
	const int64_t d513[7] = { 0, 0, 0, 0, 513 };
	const int64_t s_past[7] = { 0, 0, 0, 0, 64, 101, 100 };
	const int64_t hq6[8] = { 0, 0, 6, 4, 64 };
	const int64_t big_kv[7] = { 1 << 20, 0, 2, 2, 64, 0, 1 << 20 };
	const int64_t big_table[8] = { 1 << 21, 0, 0, 0, 0, 0, 1 << 20 };
	char err[256];

	cr_assert_eq(validate(PREFILL, ok, err, sizeof err), KS_OK, "%s", err);
	cr_assert_eq(validate(PREFILL, d513, err, sizeof err), KS_E_TOO_LARGE);
	cr_assert(strstr(err, "D must be <= 512 for attention_prefill"), "%s",
	    err);
	cr_assert_eq(validate(PREFILL, s_past, err, sizeof err),
	    KS_E_BAD_SHAPE);
	cr_assert(strstr(err, "S must be <= Sc"), "%s", err);
	cr_assert_eq(validate(PAGED, hq6, err, sizeof err), KS_E_BAD_SHAPE);
	cr_assert(strstr(err, "multiple of Hkv"), "%s", err);
	cr_assert_eq(validate(PREFILL, big_kv, err, sizeof err),
	    KS_E_TOO_LARGE);
	cr_assert(strstr(err, "buffer k of B*Sc*Hkv*D"), "%s", err);
	cr_assert_eq(validate(PAGED, big_table, err, sizeof err),
	    KS_E_TOO_LARGE);
	cr_assert(strstr(err, "buffer block_table of B*MB"), "%s", err);
}

Test(prefill, buffers_declare_their_extents)
{
	ks_ir_kernel_t *k = ir_of(PAGED, NULL, KS_DTYPE_F32, d_paged);
	static const char *const want[][2] = {
		{ "q", "B,T,Hq,D" }, { "k", "NB,BS,Hkv,D" },
		{ "v", "NB,BS,Hkv,D" }, { "block_table", "B,MB" },
		{ "lens", "B" }, { "o", "B,T,Hq,D" },
	};
	int i, j, seen = 0;

	for (i = 0; i < k->nparams; i++)
		for (j = 0; j < (int)NELEM(want); j++)
			if (strcmp(k->params[i].name, want[j][0]) == 0) {
				cr_assert_str_eq(k->params[i].dims, want[j][1]);
				seen++;
			}
	cr_assert_eq(seen, (int)NELEM(want));
	ks_ir_free(k);
	k = ir_of(PREFILL, NULL, KS_DTYPE_F32, d_prefill);
	for (i = 0; i < k->nparams; i++)
		if (strcmp(k->params[i].name, "k") == 0)
			cr_assert_str_eq(k->params[i].dims, "B,Sc,Hkv,D");
	ks_ir_free(k);
}

Test(prefill, fingerprint_probes_select_every_variant)
{
	const ks_kernel_def_t *defs[] = { PREFILL, PAGED };
	ks_dim_t dims[KS_MAX_DIMS];
	ks_spec_t spec;
	size_t d;
	int i, j, v;

	for (d = 0; d < NELEM(defs); d++) {
		int seen[3] = { 1, 0, 0 };      /* general: all dynamic */

		for (i = 0; i < defs[d]->nprobes; i++) {
			for (j = 0; j < defs[d]->ndims; j++)
				dims[j] = (ks_dim_t){ defs[d]->dims[j],
				    defs[d]->probes[i][j] != 0,
				    defs[d]->probes[i][j] };
			cr_assert_eq(ks_kernel_validate(defs[d], KS_DTYPE_F32,
			    KS_MODE_EXACT, dims, defs[d]->ndims, &spec, NULL,
			    0), KS_OK);
			for (v = 0; v < 3; v++)
				seen[v] |= strcmp(defs[d]->select(&spec),
				    defs[d]->variants[v]) == 0;
		}
		for (v = 0; v < 3; v++)
			cr_assert(seen[v], "%s: no probe selects %s",
			    defs[d]->name, defs[d]->variants[v]);
		cr_assert_not_null(ks_kernel_fingerprint(defs[d]));
	}
}

/* ---- cpu and OpenCL ---- */

Test(prefill, cpu_f32_every_variant_is_bitwise_canonical)
{
	dtype_runs(KS_DTYPE_F32, NULL);
}

Test(prefill, cpu_f16_every_variant_is_bitwise_canonical)
{
	dtype_runs(KS_DTYPE_F16, NULL);
}

Test(prefill, cpu_bf16_every_variant_is_bitwise_canonical)
{
	dtype_runs(KS_DTYPE_BF16, NULL);
}

static void cl_dtype(ks_dtype_t dt)
{
	clenv_t env;

	env_open(&env);
	dtype_runs(dt, &env);
	env_close(&env);
}

Test(prefill, opencl_f32_every_variant_is_bitwise_canonical)
{
	cl_dtype(KS_DTYPE_F32);
}

Test(prefill, opencl_f16_every_variant_is_bitwise_canonical)
{
	cl_dtype(KS_DTYPE_F16);
}

Test(prefill, opencl_bf16_every_variant_is_bitwise_canonical)
{
	cl_dtype(KS_DTYPE_BF16);
}

/* Runs DEC, attention_decode, on PR's buffers as [B][S][Hkv][D]. */
static void decode_run(prog_t *dec, prob_t *pr)
{
	const case_t *c = &pr->c;
	size_t bytes = pr->es * (size_t)pr->nq;
	kt_buf_t bufs[] = {
		{ "q", pr->q, bytes },
		{ "k", pr->k, pr->es * (size_t)pr->nkv },
		{ "v", pr->v, pr->es * (size_t)pr->nkv },
		{ "lens", pr->lens, sizeof pr->lens },
		{ "o", pr->o, bytes },
	};
	kt_val_t vals[] = {
		{ "B", c->B, 0 }, { "Hq", c->Hq, 0 }, { "Hkv", c->Hkv, 0 },
		{ "D", c->D, 0 }, { "S", c->S, 0 }, { "scale", 0, pr->scale },
	};
	kt_args_t a;

	kt_bind(&a, dec->k, bufs, NELEM(bufs), vals, NELEM(vals));
	kt_prog_run(dec, a.args);
}

/*
 * A decode step is a prefill row and a paged row, bit for bit: decode at
 * (B, Hq, Hkv, D, S) on k of [B][S][Hkv][D] gives the bits of prefill at
 * T = 1, Sc = S on the same buffers, and of paged at T = 1 with blocks of
 * 16 and the identity table (block b * MB + i is sequence b's i-th), which
 * reads the same buffers as [NB][16][Hkv][D]; and the last row of a
 * prefill of T rows over lens[b] is the decode step at lens[b].
 */
Test(prefill, a_decode_step_equals_a_prefill_row_and_a_paged_row)
{
	static const case_t dc = { 3, 1, 8, 2, 64, 160, 160, 16, 10, 30,
	    { 160, 65, 1 }, 0 };
	static const case_t tc = { 3, 5, 8, 2, 64, 160, 160, 0, 0, 0,
	    { 160, 65, 5 }, 0 };
	const int64_t ddims[5] = { 0, 8, 2, 64, 0 };
	prog_t dec, pre, pag;
	prob_t pr, pt;
	void *od, *op;
	int64_t b, j, row = 8 * 64;
	size_t bytes;

	kt_prog_open(&dec, ir_of(DECODE, NULL, KS_DTYPE_F32, ddims), NULL);
	kt_prog_open(&pre, ir_of(PREFILL, NULL, KS_DTYPE_F32, (const int64_t
	    []){ 0, 1, 8, 2, 64, 0, 0 }), NULL);
	kt_prog_open(&pag, ir_of(PAGED, NULL, KS_DTYPE_F32, (const int64_t
	    []){ 0, 1, 8, 2, 64, 16, 0, 0 }), NULL);
	cr_assert_str_eq(dec.k->variant, "gqa");
	cr_assert_str_eq(pre.k->variant, "gqa");
	cr_assert_str_eq(pag.k->variant, "gqa");

	prob_init(&pr, &dc, KS_DTYPE_F32, 11);
	bytes = pr.es * (size_t)pr.nq;
	decode_run(&dec, &pr);
	od = pr.o;
	pr.o = pr.want;
	memset(pr.o, SENTINEL, bytes);
	prog_run(&pre, &pr);
	kt_assert_bitwise("prefill T=1 vs decode", pr.o, od, KS_DTYPE_F32,
	    pr.nq);
	for (j = 0; j < dc.B * dc.MB; j++)
		pr.bt[j] = (int32_t)j;
	op = malloc(bytes);
	pr.o = op;
	memset(pr.o, SENTINEL, bytes);
	prog_run(&pag, &pr);
	kt_assert_bitwise("paged T=1, identity table vs decode", op, od,
	    KS_DTYPE_F32, pr.nq);
	pr.o = od;

	/* The last of T rows: prefill at T = 5 on the same k, v. */
	kt_prog_close(&pre);
	kt_prog_open(&pre, ir_of(PREFILL, NULL, KS_DTYPE_F32, (const int64_t
	    []){ 0, 5, 8, 2, 64, 0, 0 }), NULL);
	prob_init(&pt, &tc, KS_DTYPE_F32, 12);
	memcpy(pt.k, pr.k, pr.es * (size_t)pr.nkv);
	memcpy(pt.v, pr.v, pr.es * (size_t)pr.nkv);
	for (b = 0; b < 3; b++)
		memcpy((float *)pr.q + b * row, (float *)pt.q +
		    (b * 5 + 4) * row, sizeof(float) * (size_t)row);
	memcpy(pr.lens, tc.lens, sizeof pr.lens);
	prog_run(&pre, &pt);
	pr.o = op;
	decode_run(&dec, &pr);
	for (b = 0; b < 3; b++)
		kt_assert_bitwise("prefill last row vs decode", (float *)op +
		    b * row, (float *)pt.o + (b * 5 + 4) * row, KS_DTYPE_F32,
		    row);
	pr.o = od;
	free(op);
	prob_close(&pr);
	prob_close(&pt);
	kt_prog_close(&dec);
	kt_prog_close(&pre);
	kt_prog_close(&pag);
}

/* Dynamic shapes the kernels do not serve, just outside the guards: S =
 * Sc + 1 (prefill), Hq % Hkv != 0 (both): nothing is written. */
Test(prefill, unserved_dynamic_shapes_write_nothing)
{
	static const case_t pre[] = {
		{ 2, 3, 4, 1, 64, 81, 80, 0, 0, 0, { 10, 10 }, 0 },
		{ 1, 2, 6, 4, 64, 10, 10, 0, 0, 0, { 10 }, 0 },
	};
	static const case_t pag[] = {
		{ 1, 2, 6, 4, 64, 0, 0, 16, 2, 2, { 10 }, 0 },
	};
	char who[200];
	prog_t p;
	prob_t pr;
	size_t i, j, n;

	for (n = 0; n < 2; n++) {
		const case_t *cs = n ? pag : pre;

		kt_prog_open(&p, ir_of(n ? PAGED : PREFILL, NULL, KS_DTYPE_F32,
		    n ? d_paged : d_prefill), NULL);
		for (i = 0; i < (n ? NELEM(pag) : NELEM(pre)); i++) {
			prob_init(&pr, &cs[i], KS_DTYPE_F32, 99);
			prog_run(&p, &pr);
			label(who, sizeof who, &p, &pr);
			for (j = 0; j < pr.es * (size_t)pr.nq; j++)
				cr_assert_eq(((unsigned char *)pr.o)[j],
				    SENTINEL, "%s: o written at byte %zu", who,
				    j);
			prob_close(&pr);
		}
		kt_prog_close(&p);
	}
}

/* ---- the checkers catch planted bugs ---- */

/*
 * On the cpu output of general (f32): a reference whose causal rows see
 * one position more, or that reads the blocks in order ignoring the
 * table, or maps query heads by h % Hkv, is told apart bit for bit; one
 * that drops each row's last position fails the double-precision bound.
 */
Test(prefill, each_checker_catches_a_planted_bug)
{
	static const struct {
		const char *what;
		int paged, c;           /* kernel, case of its general list */
		ref_attn_bug_t bug;
	} bitwise_bugs[] = {
		{ "causal rows see one position more", 0, 0,
		    { .causal_next = 1 } },
		{ "causal rows see one position more (paged)", 1, 0,
		    { .causal_next = 1 } },
		{ "block table ignored", 1, 0, { .table_ignored = 1 } },
		{ "KV head h % Hkv", 0, 3, { .kvh_mod = 1 } },
		{ "chunks of 32", 1, 0, { .chunk = 32 } },
	};
	const ref_attn_bug_t drop = { .drop_last = 1 };
	prog_t p[2];
	prob_t pr;
	size_t i;
	int j;

	for (j = 0; j < 2; j++)
		kt_prog_open(&p[j], ir_of(j ? PAGED : PREFILL, NULL,
		    KS_DTYPE_F32, j ? d_paged : d_prefill), NULL);
	for (i = 0; i < NELEM(bitwise_bugs); i++) {
		j = bitwise_bugs[i].paged;
		prob_init(&pr, j ? &paged_general[bitwise_bugs[i].c] :
		    &prefill_general[bitwise_bugs[i].c], KS_DTYPE_F32, 5);
		prog_run(&p[j], &pr);
		ref_attn_rows_bug(pr.q, pr.k, pr.v, pr.lens, pr.want, 0, &pr.sh,
		    pr.scale, &bitwise_bugs[i].bug);
		cr_assert_gt(kt_diff("planted", pr.o, pr.want, KS_DTYPE_F32,
		    pr.nq), 0, "bitwise checker misses: %s",
		    bitwise_bugs[i].what);
		prob_close(&pr);
	}
	for (j = 0; j < 2; j++) {
		prob_init(&pr, j ? &paged_general[0] : &prefill_general[0],
		    KS_DTYPE_F32, 6);
		ref_attn_rows_bug(pr.q, pr.k, pr.v, pr.lens, pr.want, 0, &pr.sh,
		    pr.scale, &drop);
		cr_assert_gt(f64_diff("planted", &pr, pr.want), 0,
		    "double-precision bound misses a dropped position");
		prob_close(&pr);
		kt_prog_close(&p[j]);
	}
}
