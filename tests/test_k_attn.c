/*
 * attention_decode: selection and rejection of shapes, and every variant x
 * dtype run on the cpu backend and on OpenCL (PoCL here) against the
 * plain-C reference of ref/ref_attn.h.
 *
 *   - cpu and OpenCL: bit for bit against the reference (exp is kspec's
 *     own sequence on every backend, ref_expf in the reference);
 *   - both: within a tolerance of a double-precision reference;
 *   - every specialization bitwise equal to general at its shape on the
 *     same backend (general forced through gpu_kernel_ir);
 *   - each checker shown to catch a planted bug.
 *
 * Compiles are the cost (PoCL takes seconds per program): one program per
 * variant x dtype with every dim it does not need as a constant left
 * dynamic, and many shapes run through it.
 */
#include <math.h>

#include "cl.h"
#include "kern.h"
#include "../ref/ref_attn.h"

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(attn, .init = setup, .timeout = 300);

#define DEF (&ks_kernel_attention_decode)
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---- cases ---- */

enum { MAXB = 8 };

typedef struct {
	int64_t B, Hq, Hkv, D, S;
	int32_t lens[MAXB];
	float smul;             /* scale = smul / sqrt(D); 0 means 6 */
} case_t;

typedef struct {
	case_t c;
	ks_dtype_t dt;
	float scale;
	size_t es;
	int64_t nq, nkv;        /* elements of q and o, of k and v */
	void *q, *k, *v, *o, *want;
	int32_t lens[MAXB];
} prob_t;

/* Sentinel o is filled with: a NaN no result has (f32 and 16-bit). */
#define SENTINEL 0xa5

static void prob_init(prob_t *p, const case_t *c, ks_dtype_t dt,
    uint64_t seed)
{
	memset(p, 0, sizeof *p);
	p->c = *c;
	p->dt = dt;
	p->scale = (c->smul != 0 ? c->smul : 6.0f) / sqrtf((float)c->D);
	p->es = ks_dtype_size(dt);
	p->nq = c->B * c->Hq * c->D;
	p->nkv = c->B * c->S * c->Hkv * c->D;
	p->q = malloc(p->es * (size_t)p->nq);
	p->k = malloc(p->es * (size_t)(p->nkv ? p->nkv : 1));
	p->v = malloc(p->es * (size_t)(p->nkv ? p->nkv : 1));
	p->o = malloc(p->es * (size_t)p->nq);
	p->want = malloc(p->es * (size_t)p->nq);
	cr_assert(p->q && p->k && p->v && p->o && p->want);
	ref_fill(p->q, (int)dt, p->nq, seed);
	ref_fill(p->k, (int)dt, p->nkv, seed + 1);
	ref_fill(p->v, (int)dt, p->nkv, seed + 2);
	memset(p->o, SENTINEL, p->es * (size_t)p->nq);
	cr_assert_leq(c->B, MAXB);
	memcpy(p->lens, c->lens, sizeof p->lens);
}

static void prob_ref(prob_t *p)
{
	ref_attn_decode(p->q, p->k, p->v, p->lens, p->want, (int)p->dt,
	    p->c.B, p->c.Hq, p->c.Hkv, p->c.D, p->c.S, p->scale);
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

/* The IR of VARIANT (NULL: selected) with dims VALS (0: dynamic). */
static ks_ir_kernel_t *attn_ir(const char *variant, ks_dtype_t dt,
    int64_t B, int64_t Hq, int64_t Hkv, int64_t D, int64_t S)
{
	const int64_t vals[5] = { B, Hq, Hkv, D, S };

	return gpu_kernel_ir(DEF, variant, dt, KS_MODE_EXACT, vals);
}

/* A kernel compiled once on cpu or OpenCL, run on many problems. */
typedef kt_prog_t prog_t;

/* Runs P on the problem, writing pr->o. */
static void prog_run(prog_t *p, prob_t *pr)
{
	const case_t *c = &pr->c;
	kt_buf_t bufs[] = {
		{ "q", pr->q, pr->es * (size_t)pr->nq },
		{ "k", pr->k, pr->es * (size_t)(pr->nkv ? pr->nkv : 1) },
		{ "v", pr->v, pr->es * (size_t)(pr->nkv ? pr->nkv : 1) },
		{ "lens", pr->lens, sizeof(int32_t) * (size_t)c->B },
		{ "o", pr->o, pr->es * (size_t)pr->nq },
	};
	kt_val_t vals[] = {
		{ "B", c->B, 0 }, { "Hq", c->Hq, 0 }, { "Hkv", c->Hkv, 0 },
		{ "D", c->D, 0 }, { "S", c->S, 0 }, { "scale", 0, pr->scale },
	};
	kt_args_t a;

	kt_bind(&a, p->k, bufs, NELEM(bufs), vals, NELEM(vals));
	kt_prog_run(p, a.args);
}

/* ---- checkers ---- */

/* max over p < n of |v[b][p][kvh][d]|, 0 for n = 0. */
static double vmax_of(const prob_t *p, int64_t b, int64_t h, int64_t d)
{
	const case_t *c = &p->c;
	int64_t n = ref_attn_len(p->lens, b, c->S), kvh = h / (c->Hq / c->Hkv);
	int64_t pos;
	double m = 0;

	for (pos = 0; pos < n; pos++)
		m = fmax(m, fabs((double)ref_load(p->v, (int)p->dt,
		    ((b * c->S + pos) * c->Hkv + kvh) * c->D + d)));
	return m;
}

/*
 * Count of outputs off the double-precision result by more than: vmax *
 * (8 (D + 2) 2^-24 smag + (4n + 256) 2^-24) + 2 u |exact| + 2^-24, where
 * smag = scale * max_p sum_d |q_d k_pd| bounds the scores' rounding
 * (each error in a score moves the weights by a relative amount of that
 * size), 4n + 256 ulp the sums, exps and the merges, and u the store.
 */
static int64_t f64_diff(const char *who, const prob_t *p, const void *got)
{
	const case_t *c = &p->c;
	double *exact = malloc(sizeof(double) * (size_t)p->nq);
	double u = kt_unit(p->dt);
	int64_t b, h, d, pos, i, n, kvh, bad = 0;

	ref_attn_decode_f64(p->q, p->k, p->v, p->lens, exact, (int)p->dt,
	    c->B, c->Hq, c->Hkv, c->D, c->S, p->scale);
	for (b = 0; b < c->B; b++)
		for (h = 0; h < c->Hq; h++) {
			double smag = 0;

			n = ref_attn_len(p->lens, b, c->S);
			kvh = h / (c->Hq / c->Hkv);
			for (pos = 0; pos < n; pos++) {
				double s = 0;

				for (d = 0; d < c->D; d++)
					s += fabs((double)ref_load(p->q,
					    (int)p->dt, (b * c->Hq + h) * c->D +
					    d) * ref_load(p->k, (int)p->dt,
					    ((b * c->S + pos) * c->Hkv + kvh) *
					    c->D + d));
				smag = fmax(smag, s * fabs(p->scale));
			}
			for (d = 0; d < c->D; d++) {
				double g, tol;

				i = (b * c->Hq + h) * c->D + d;
				g = ref_load(got, (int)p->dt, i);
				tol = vmax_of(p, b, h, d) * (8.0 *
				    (double)(c->D + 2) * 0x1p-24 * smag +
				    (4.0 * (double)n + 256) * 0x1p-24) +
				    2 * u * fabs(exact[i]) + 0x1p-24;
				if (!(fabs(g - exact[i]) <= tol) && bad++ < 3)
					cr_log_info("%s: o[%lld][%lld][%lld] = "
					    "%.9g, exact %.9g (tolerance %.3g)",
					    who, (long long)b, (long long)h,
					    (long long)d, g, exact[i], tol);
			}
		}
	free(exact);
	return bad;
}

/* Label of a run for messages. */
static void label(char *out, size_t n, const prog_t *p, const prob_t *pr)
{
	snprintf(out, n, "%s %s.%s %s B=%lld Hq=%lld Hkv=%lld D=%lld S=%lld",
	    p->env != NULL ? "opencl" : "cpu", p->k->name, p->k->variant,
	    ks_dtype_name(pr->dt), (long long)pr->c.B, (long long)pr->c.Hq,
	    (long long)pr->c.Hkv, (long long)pr->c.D, (long long)pr->c.S);
}

/* Runs every case of CASES through P and checks it: bitwise against the
 * reference, within the tolerance of double precision. */
static void check_cases(prog_t *p, ks_dtype_t dt, const case_t *cases,
    size_t ncases)
{
	char who[160];
	prob_t pr;
	size_t i;

	for (i = 0; i < ncases; i++) {
		prob_init(&pr, &cases[i], dt, 1000 + i * 17);
		prob_ref(&pr);
		prog_run(p, &pr);
		label(who, sizeof who, p, &pr);
		kt_assert_bitwise(who, pr.o, pr.want, dt, pr.nq);
		cr_assert_eq(f64_diff(who, &pr, pr.o), 0, "%s: off the double "
		    "precision result", who);
		prob_close(&pr);
	}
}

/* Runs CASES through A and B and asserts the same bits. */
static void check_equal(prog_t *a, prog_t *b, ks_dtype_t dt,
    const case_t *cases, size_t ncases)
{
	char who[160];
	prob_t pa, pb;
	size_t i;

	for (i = 0; i < ncases; i++) {
		prob_init(&pa, &cases[i], dt, 7000 + i);
		prob_init(&pb, &cases[i], dt, 7000 + i);
		prog_run(a, &pa);
		prog_run(b, &pb);
		label(who, sizeof who, a, &pa);
		strncat(who, " vs general", sizeof who - strlen(who) - 1);
		kt_assert_bitwise(who, pa.o, pb.o, dt, pa.nq);
		prob_close(&pa);
		prob_close(&pb);
	}
}

/* ---- the shapes ---- */

/* Through general with every dim dynamic: lens 0, 1, 63, 64, 65 and S in
 * one batch, S not a multiple of 64, G = 1, 4, 8, D of 1, 33, 80, 96 and
 * 512, lens clamped from below and above, large scores (chunks whose
 * weights underflow in the merge). */
static const case_t general_cases[] = {
	{ 6, 4, 1, 96, 130, { 0, 1, 63, 64, 65, 130 }, 0 },
	{ 2, 8, 1, 80, 200, { 200, 129 }, 0 },
	{ 3, 4, 4, 33, 64, { 64, -3, 99 }, 0 },
	{ 1, 2, 2, 512, 70, { 70 }, 0 },
	{ 2, 3, 1, 1, 5, { 5, 2 }, 0 },
	{ 1, 4, 2, 128, 300, { 300 }, 60 },
};

/* Through head_dim at D = 128 (every other dim dynamic). */
static const case_t head_dim_cases[] = {
	{ 6, 4, 1, 128, 130, { 0, 1, 63, 64, 65, 130 }, 0 },
	{ 2, 8, 8, 128, 100, { 100, 37 }, 0 },
	{ 1, 8, 1, 128, 260, { 260 }, 60 },
};

/* Through head_dim at D = 64 and at D = 256. */
static const case_t head_dim64_cases[] = {
	{ 2, 4, 2, 64, 100, { 100, 65 }, 0 },
};
static const case_t head_dim256_cases[] = {
	{ 2, 2, 1, 256, 70, { 70, 3 }, 0 },
};

/* Through gqa at Hq = 8, Hkv = 2, D = 128 (G = 4; B, S dynamic). */
static const case_t gqa4_cases[] = {
	{ 6, 8, 2, 128, 130, { 0, 1, 63, 64, 65, 130 }, 0 },
	{ 2, 8, 2, 128, 257, { 257, 192 }, 60 },
};

/* Through gqa at Hq = 8, Hkv = 1, D = 64 (G = 8). */
static const case_t gqa8_cases[] = {
	{ 3, 8, 1, 64, 150, { 150, 64, 65 }, 0 },
};

/* ---- selection and rejection ---- */

static const char *selected(ks_mode_t mode, int64_t Hq, int64_t Hkv,
    int64_t D)
{
	ks_dim_t dims[5] = {
		{ "B", 0, 0 }, { "Hq", Hq != 0, Hq }, { "Hkv", Hkv != 0, Hkv },
		{ "D", D != 0, D }, { "S", 0, 0 },
	};
	ks_spec_t spec;
	char err[256];

	cr_assert_eq(ks_kernel_validate(DEF, KS_DTYPE_F16, mode, dims, 5,
	    &spec, err, sizeof err), KS_OK, "%s", err);
	return DEF->select(&spec);
}

Test(attn, selects_each_variant_inside_its_guard_only)
{
	ks_mode_t m;

	cr_assert_eq(ks_kernel_find("attention_decode"), DEF);
	for (m = KS_MODE_EXACT; m <= KS_MODE_FAST; m++) {
		/* head_dim: D in {64, 128, 256}; just outside: 96, 80. */
		cr_assert_str_eq(selected(m, 0, 0, 64), "head_dim");
		cr_assert_str_eq(selected(m, 0, 0, 128), "head_dim");
		cr_assert_str_eq(selected(m, 0, 0, 256), "head_dim");
		cr_assert_str_eq(selected(m, 0, 0, 96), "general");
		cr_assert_str_eq(selected(m, 0, 0, 80), "general");
		cr_assert_str_eq(selected(m, 0, 0, 512), "general");
		cr_assert_str_eq(selected(m, 0, 0, 0), "general");
		cr_assert_str_eq(selected(m, 32, 8, 0), "general");
		/* gqa: G in 2..8, G * D <= 1024, Hq and Hkv constant. */
		cr_assert_str_eq(selected(m, 32, 8, 128), "gqa");
		cr_assert_str_eq(selected(m, 2, 1, 64), "gqa");
		cr_assert_str_eq(selected(m, 8, 1, 128), "gqa");
		cr_assert_str_eq(selected(m, 4, 1, 256), "gqa");
		cr_assert_str_eq(selected(m, 8, 8, 128), "head_dim");  /* G 1 */
		cr_assert_str_eq(selected(m, 0, 8, 128), "head_dim");
		cr_assert_str_eq(selected(m, 32, 0, 128), "head_dim");
		cr_assert_str_eq(selected(m, 16, 1, 64), "head_dim");  /* G 16 */
		cr_assert_str_eq(selected(m, 8, 1, 256), "head_dim"); /* 2048 */
		cr_assert_str_eq(selected(m, 32, 8, 96), "general");
	}
}

Test(attn, variants_are_built_only_inside_their_guards)
{
	const int64_t dyn_d[5] = { 0, 32, 8, 0, 0 }, d96[5] = { 0, 32, 8, 96,
	    0 }, g1[5] = { 0, 8, 8, 128, 0 }, gok[5] = { 0, 32, 8, 128, 0 };
	const int64_t *const no_head[] = { dyn_d, d96 };
	ks_dim_t dims[5];
	ks_spec_t spec;
	ks_ir_kernel_t *k;
	char err[256];
	size_t i;
	int j;

	for (i = 0; i < NELEM(no_head) + 2; i++) {
		const int64_t *v = i < NELEM(no_head) ? no_head[i] :
		    i == NELEM(no_head) ? g1 : gok;

		for (j = 0; j < 5; j++) {
			dims[j].name = DEF->dims[j];
			dims[j].is_const = v[j] != 0;
			dims[j].value = v[j];
		}
		cr_assert_eq(ks_kernel_validate(DEF, KS_DTYPE_F32,
		    KS_MODE_EXACT, dims, 5, &spec, err, sizeof err), KS_OK);
		k = DEF->build(&spec, "gqa");
		cr_assert_eq(k != NULL, i == NELEM(no_head) + 1);
		ks_ir_free(k);
		k = DEF->build(&spec, "head_dim");
		cr_assert_eq(k != NULL, i >= NELEM(no_head));
		ks_ir_free(k);
		k = DEF->build(&spec, "general");
		cr_assert_not_null(k);
		ks_ir_free(k);
	}
}

/* Validation with the given dims; returns the code, message in ERR. */
static int validate(int64_t B, int64_t Hq, int64_t Hkv, int64_t D,
    int64_t S, char *err, size_t errlen)
{
	ks_dim_t dims[5] = {
		{ "B", B != 0, B }, { "Hq", Hq != 0, Hq },
		{ "Hkv", Hkv != 0, Hkv }, { "D", D != 0, D },
		{ "S", S != 0, S },
	};
	ks_spec_t spec;

	return ks_kernel_validate(DEF, KS_DTYPE_BF16, KS_MODE_EXACT, dims, 5,
	    &spec, err, errlen);
}

Test(attn, bad_constant_shapes_are_rejected_with_a_reason)
{
	char err[256];

	cr_assert_eq(validate(0, 0, 0, 512, 0, err, sizeof err), KS_OK, "%s",
	    err);
	cr_assert_eq(validate(0, 0, 0, 513, 0, err, sizeof err),
	    KS_E_TOO_LARGE);
	cr_assert_not_null(strstr(err, "D must be <= 512"), "%s", err);
	cr_assert_eq(validate(0, 6, 4, 64, 0, err, sizeof err),
	    KS_E_BAD_SHAPE);
	cr_assert_not_null(strstr(err, "multiple of Hkv"), "%s", err);
	cr_assert_eq(validate(0, 2, 4, 64, 0, err, sizeof err),
	    KS_E_BAD_SHAPE);
	/* Hq dynamic: checked by the kernel at run time instead. */
	cr_assert_eq(validate(0, 0, 4, 64, 0, err, sizeof err), KS_OK);
	/* k has B*S*Hkv*D elements: 2^20 * 2^20 * 2 * 64 > 2^40; with S
	 * dynamic the size is the launch's. */
	cr_assert_eq(validate(1 << 20, 2, 2, 64, 0, err, sizeof err), KS_OK);
	cr_assert_eq(validate(1 << 20, 2, 2, 64, 1 << 20, err, sizeof err),
	    KS_E_TOO_LARGE);
	cr_assert_not_null(strstr(err, "buffer k of B*S*Hkv*D"), "%s", err);
	/* q: B*Hq*D with every product overflowing i64 on the way. */
	cr_assert_eq(validate(KS_MAX_DIM, KS_MAX_DIM, 1, 512, 0, err,
	    sizeof err), KS_E_TOO_LARGE);
	cr_assert_not_null(strstr(err, "buffer q of B*Hq*D"), "%s", err);
}

/* Every variant is selected by some fingerprint probe, so every variant's
 * IR is part of the fingerprint. */
Test(attn, fingerprint_probes_select_every_variant)
{
	int seen[3] = { 0 }, i, j, v;
	ks_dim_t dims[5];
	ks_spec_t spec;
	ks_hash_t h;

	for (i = 0; i < DEF->nprobes; i++) {
		for (j = 0; j < 5; j++) {
			dims[j].name = DEF->dims[j];
			dims[j].is_const = DEF->probes[i][j] != 0;
			dims[j].value = DEF->probes[i][j];
		}
		cr_assert_eq(ks_kernel_validate(DEF, KS_DTYPE_F32,
		    KS_MODE_EXACT, dims, 5, &spec, NULL, 0), KS_OK);
		for (v = 0; v < DEF->nvariants; v++)
			if (strcmp(DEF->select(&spec), DEF->variants[v]) == 0)
				seen[v] = 1;
	}
	seen[0] = 1;    /* the common probe "every dim dynamic" */
	for (v = 0; v < DEF->nvariants; v++)
		cr_assert(seen[v], "no probe selects %s", DEF->variants[v]);
	cr_assert_not_null(ks_kernel_fingerprint(DEF));
	cr_assert_eq(ks_kernel_fingerprint_compute(DEF, &h), KS_OK);
	cr_assert_eq(memcmp(&h, ks_kernel_fingerprint(DEF), sizeof h), 0);
}

/* ---- cpu ---- */

/* Every variant x dtype, bitwise against the reference, and each
 * specialization bitwise equal to general forced at its constants. */
static void cpu_dtype(ks_dtype_t dt)
{
	prog_t gen, hd, g4, g8, ref;
	int64_t d;

	kt_prog_open(&gen, attn_ir(NULL, dt, 0, 0, 0, 0, 0), NULL);
	cr_assert_str_eq(gen.k->variant, "general");
	check_cases(&gen, dt, general_cases, NELEM(general_cases));
	check_cases(&gen, dt, head_dim_cases, NELEM(head_dim_cases));
	kt_prog_close(&gen);

	kt_prog_open(&hd, attn_ir(NULL, dt, 0, 0, 0, 128, 0), NULL);
	cr_assert_str_eq(hd.k->variant, "head_dim");
	check_cases(&hd, dt, head_dim_cases, NELEM(head_dim_cases));
	kt_prog_open(&ref, attn_ir("general", dt, 0, 0, 0, 128, 0), NULL);
	check_equal(&hd, &ref, dt, head_dim_cases, NELEM(head_dim_cases));
	kt_prog_close(&hd);
	kt_prog_close(&ref);
	for (d = 64; d <= 256; d += 192) {
		kt_prog_open(&hd, attn_ir(NULL, dt, 0, 0, 0, d, 0), NULL);
		cr_assert_str_eq(hd.k->variant, "head_dim");
		check_cases(&hd, dt, d == 64 ? head_dim64_cases :
		    head_dim256_cases, 1);
		kt_prog_close(&hd);
	}

	kt_prog_open(&g4, attn_ir(NULL, dt, 0, 8, 2, 128, 0), NULL);
	cr_assert_str_eq(g4.k->variant, "gqa");
	check_cases(&g4, dt, gqa4_cases, NELEM(gqa4_cases));
	kt_prog_open(&ref, attn_ir("general", dt, 0, 8, 2, 128, 0), NULL);
	check_equal(&g4, &ref, dt, gqa4_cases, NELEM(gqa4_cases));
	kt_prog_close(&g4);
	kt_prog_close(&ref);

	kt_prog_open(&g8, attn_ir(NULL, dt, 0, 8, 1, 64, 0), NULL);
	cr_assert_str_eq(g8.k->variant, "gqa");
	check_cases(&g8, dt, gqa8_cases, NELEM(gqa8_cases));
	kt_prog_open(&ref, attn_ir("general", dt, 0, 8, 1, 64, 0), NULL);
	check_equal(&g8, &ref, dt, gqa8_cases, NELEM(gqa8_cases));
	kt_prog_close(&g8);
	kt_prog_close(&ref);
}

Test(attn, cpu_f32_every_variant_is_bitwise_canonical)
{
	cpu_dtype(KS_DTYPE_F32);
}

Test(attn, cpu_f16_every_variant_is_bitwise_canonical)
{
	cpu_dtype(KS_DTYPE_F16);
}

Test(attn, cpu_bf16_every_variant_is_bitwise_canonical)
{
	cpu_dtype(KS_DTYPE_BF16);
}


/* Shapes the kernel does not serve, all dims dynamic: Hq not a multiple
 * of Hkv, Hkv > Hq, D > 512 (general only).  Nothing is written. */
static const case_t unserved_cases[] = {
	{ 2, 6, 4, 64, 10, { 10, 10 }, 0 },
	{ 1, 2, 4, 64, 3, { 3 }, 0 },
	{ 1, 2, 1, 600, 3, { 3 }, 0 },
};

/* Runs the unserved cases with D <= DMAX through P: o keeps every byte. */
static void check_unserved(prog_t *p, int64_t dmax)
{
	char who[160];
	prob_t pr;
	size_t i, j;

	for (i = 0; i < NELEM(unserved_cases); i++) {
		if (unserved_cases[i].D > dmax)
			continue;
		prob_init(&pr, &unserved_cases[i], KS_DTYPE_F32, 99);
		prog_run(p, &pr);
		label(who, sizeof who, p, &pr);
		for (j = 0; j < pr.es * (size_t)pr.nq; j++)
			cr_assert_eq(((unsigned char *)pr.o)[j], SENTINEL,
			    "%s: o written at byte %zu", who, j);
		prob_close(&pr);
	}
}

Test(attn, cpu_unserved_dynamic_shapes_write_nothing)
{
	prog_t gen, hd;

	kt_prog_open(&gen, attn_ir(NULL, KS_DTYPE_F32, 0, 0, 0, 0, 0), NULL);
	check_unserved(&gen, 1 << 20);
	kt_prog_close(&gen);
	kt_prog_open(&hd, attn_ir(NULL, KS_DTYPE_F32, 0, 0, 0, 64, 0), NULL);
	cr_assert_str_eq(hd.k->variant, "head_dim");
	check_unserved(&hd, 64);
	kt_prog_close(&hd);
}

/* ---- OpenCL ---- */

static void cl_dtype(ks_dtype_t dt)
{
	prog_t gen, hd, g4, g8;
	clenv_t env;

	env_open(&env);
	kt_prog_open(&gen, attn_ir(NULL, dt, 0, 0, 0, 0, 0), &env);
	check_cases(&gen, dt, general_cases, NELEM(general_cases));

	kt_prog_open(&hd, attn_ir(NULL, dt, 0, 0, 0, 128, 0), &env);
	cr_assert_str_eq(hd.k->variant, "head_dim");
	check_cases(&hd, dt, head_dim_cases, NELEM(head_dim_cases));
	check_equal(&hd, &gen, dt, head_dim_cases, NELEM(head_dim_cases));
	kt_prog_close(&hd);

	kt_prog_open(&g4, attn_ir(NULL, dt, 0, 8, 2, 128, 0), &env);
	cr_assert_str_eq(g4.k->variant, "gqa");
	check_cases(&g4, dt, gqa4_cases, NELEM(gqa4_cases));
	check_equal(&g4, &gen, dt, gqa4_cases, NELEM(gqa4_cases));
	kt_prog_close(&g4);

	if (dt == KS_DTYPE_F32) {
		check_unserved(&gen, 1 << 20);
		kt_prog_open(&g8, attn_ir(NULL, dt, 0, 8, 1, 64, 0), &env);
		cr_assert_str_eq(g8.k->variant, "gqa");
		check_cases(&g8, dt, gqa8_cases, NELEM(gqa8_cases));
		check_equal(&g8, &gen, dt, gqa8_cases, NELEM(gqa8_cases));
		kt_prog_close(&g8);
	}
	kt_prog_close(&gen);
	env_close(&env);
}

Test(attn, opencl_f32_every_variant_is_bitwise_canonical)
{
	cl_dtype(KS_DTYPE_F32);
}

Test(attn, opencl_f16_every_variant_is_bitwise_canonical)
{
	cl_dtype(KS_DTYPE_F16);
}

Test(attn, opencl_bf16_every_variant_is_bitwise_canonical)
{
	cl_dtype(KS_DTYPE_BF16);
}

/* ---- the checkers catch planted bugs ---- */

/* On the cpu output of general (f32): a reference that sums the lane
 * partials of the dot in sequence, merges chunks right to left, uses
 * chunks of 32, or maps query heads to KV heads by h % Hkv is told apart
 * bit for bit; one that drops the last position fails the
 * double-precision tolerance. */
Test(attn, each_checker_catches_a_planted_bug)
{
	static const case_t multi = { 2, 4, 2, 96, 200, { 200, 65 }, 0 };
	static const case_t mixed = { 6, 4, 1, 96, 130,
	    { 0, 1, 63, 64, 65, 130 }, 0 };
	static const struct {
		const char *what;
		ref_attn_bug_t bug;
	} bitwise_bugs[] = {
		{ "lane partials summed in sequence", { .seq_dot = 1 } },
		{ "chunks merged right to left", { .reverse_merge = 1 } },
		{ "chunks of 32", { .chunk = 32 } },
		{ "KV head h % Hkv", { .kvh_mod = 1 } },
	};
	const ref_attn_bug_t drop = { .drop_last = 1 };
	prog_t gen;
	prob_t pr;
	size_t i;

	kt_prog_open(&gen, attn_ir(NULL, KS_DTYPE_F32, 0, 0, 0, 0, 0), NULL);
	prob_init(&pr, &multi, KS_DTYPE_F32, 5);
	prog_run(&gen, &pr);
	for (i = 0; i < NELEM(bitwise_bugs); i++) {
		ref_attn_decode_bug(pr.q, pr.k, pr.v, pr.lens, pr.want, 0,
		    multi.B, multi.Hq, multi.Hkv, multi.D, multi.S, pr.scale,
		    &bitwise_bugs[i].bug);
		cr_assert_gt(kt_diff("planted", pr.o, pr.want, KS_DTYPE_F32,
		    pr.nq), 0, "bitwise checker misses: %s",
		    bitwise_bugs[i].what);
	}
	prob_close(&pr);

	prob_init(&pr, &mixed, KS_DTYPE_F32, 6);
	ref_attn_decode_bug(pr.q, pr.k, pr.v, pr.lens, pr.want, 0, mixed.B,
	    mixed.Hq, mixed.Hkv, mixed.D, mixed.S, pr.scale, &drop);
	cr_assert_gt(f64_diff("planted", &pr, pr.want), 0,
	    "double-precision check misses a dropped position");
	prob_close(&pr);
	kt_prog_close(&gen);
}
