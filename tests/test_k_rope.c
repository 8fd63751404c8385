/*
 * rope and silu_mul on the cpu backend and on OpenCL (PoCL here).
 *
 * Every variant x dtype runs through one compiled program per backend with
 * the dims dynamic (PoCL builds take seconds), plus programs with the head
 * dim or F bound, against the plain-C references of ref/ref_rope.h:
 *
 *   - rope: bitwise on both backends, and cpu == OpenCL bitwise; within a
 *     stated bound of a double-precision rotation; positions 0, P-1, -1,
 *     P and INT32 extremes; D = 64, 128, 256 (bound: no guard left), 96
 *     and 80 (tail guard), dynamic odd D (last column untouched, nothing
 *     written or read out of bounds: canaries after x, NaN after cs);
 *     T bound to 1 (one-token decode) bitwise equal to T dynamic.
 *   - silu_mul: bitwise on cpu and OpenCL (exp is kspec's own on every
 *     backend, docs/ir.md: SILU_CL_ULPS is 0); within a stated bound
 *     of a double-precision silu; F a multiple of 256 (bound: no guard
 *     left), of 32 but not 256, and of neither.
 *
 * Every checker is shown to catch a planted bug once.  Selection and the
 * rejection of bad constant shapes are tested too.
 */
#include "cl.h"
#include "kern.h"
#include "../ref/ref_rope.h"

#include <float.h>

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(k_rope, .init = setup, .timeout = 300);

static const ks_dtype_t dtypes[] = {
	KS_DTYPE_F32, KS_DTYPE_F16, KS_DTYPE_BF16,
};
#define NDTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

/* Elements after each buffer: x's must stay as they were, cs's are NaN so
 * that a read past the table shows in the results. */
enum { CANARY = 64 };

/* ---- a compiled kernel on either backend ---- */

typedef kt_prog_t kprog_t;

/* Compiles K (takes ownership) for OpenCL on ENV, or for the cpu backend
 * when ENV is NULL. */
static void kp_run(kprog_t *p, const kt_buf_t *bufs, int nbufs,
    const kt_val_t *vals, int nvals)
{
	kt_args_t a;

	kt_bind(&a, p->k, bufs, nbufs, vals, nvals);
	kt_prog_run(p, a.args);
}

static const char *backend_name(const kprog_t *p)
{
	return p->env != NULL ? "opencl" : "cpu";
}

/* Distance in units in the last place of dtype DT between two element
 * bit patterns of the same dtype (0 for two NaNs, huge for one). */
static int64_t ulp_dist(uint32_t a, uint32_t b, ks_dtype_t dt)
{
	int bits = dt == KS_DTYPE_F32 ? 32 : 16;
	uint32_t sign = 1u << (bits - 1), absmask = sign - 1;
	uint32_t inf = dt == KS_DTYPE_F32 ? 0x7f800000u : dt == KS_DTYPE_F16 ?
	    0x7c00u : 0x7f80u;
	int an = (a & absmask) > inf, bn = (b & absmask) > inf;
	int64_t oa, ob;

	if (an || bn)
		return an && bn ? 0 : INT64_MAX / 2;
	oa = a & sign ? -(int64_t)(a & absmask) : (int64_t)a;
	ob = b & sign ? -(int64_t)(b & absmask) : (int64_t)b;
	return oa > ob ? oa - ob : ob - oa;
}

/* ---- rope ---- */

static const ks_kernel_def_t *rope_def(void)
{
	cr_assert_eq(ks_kernel_find("rope"), &ks_kernel_rope);
	return &ks_kernel_rope;
}

typedef struct {
	int64_t T, Hn, D, P;
} rshape_t;

/* One case: inputs, the reference output, sizes (canaries included). */
typedef struct {
	rshape_t s;
	ks_dtype_t dt;
	int64_t nx, ncs;        /* elements, canary included */
	void *x0, *want, *cs;
	int32_t *pos;
} rcase_t;

static void nan_fill(void *buf, ks_dtype_t dt, int64_t from, int64_t to)
{
	int64_t i;

	for (i = from; i < to; i++)
		ref_store(buf, (int)dt, i, NAN);
}

/*
 * Inputs for S: x in [-1, 1); cs a real rope table (angle p * 10000^(-2i
 * / D)) with a NaN canary after it; positions cycling through 0, P-1, -1,
 * P, random rows, INT32_MIN and INT32_MAX, or all POS0 when POS0 is not
 * INT64_MIN.  The reference result is computed into want.
 */
static void rcase_init(rcase_t *c, ks_dtype_t dt, rshape_t s, int64_t pos0,
    uint64_t seed)
{
	size_t es = ks_dtype_size(dt);
	int64_t t, p, i, half = s.D / 2;

	memset(c, 0, sizeof(*c));
	c->s = s;
	c->dt = dt;
	c->nx = s.T * s.Hn * s.D + CANARY;
	c->ncs = s.P * s.D + CANARY;
	c->x0 = malloc(es * (size_t)c->nx);
	c->want = malloc(es * (size_t)c->nx);
	c->cs = malloc(es * (size_t)c->ncs);
	c->pos = malloc(sizeof(int32_t) * (size_t)s.T);
	cr_assert(c->x0 && c->want && c->cs && c->pos);
	ref_fill(c->x0, (int)dt, c->nx, seed);
	for (p = 0; p < s.P; p++) {
		for (i = 0; i < half; i++) {
			double th = (double)p * pow(10000.0, -2.0 *
			    (double)i / (double)s.D);

			ref_store(c->cs, (int)dt, p * s.D + i, (float)cos(th));
			ref_store(c->cs, (int)dt, p * s.D + half + i,
			    (float)sin(th));
		}
		if (s.D % 2 != 0)       /* never read */
			ref_store(c->cs, (int)dt, p * s.D + s.D - 1, 0.5f);
	}
	nan_fill(c->cs, dt, s.P * s.D, c->ncs);
	for (t = 0; t < s.T; t++) {
		static const int n = 8;
		int64_t v;

		switch (t % n) {
		case 0: v = 0; break;
		case 1: v = s.P - 1; break;
		case 2: v = -1; break;
		case 3: v = s.P; break;
		case 6: v = INT32_MIN; break;
		case 7: v = INT32_MAX; break;
		default: v = (int64_t)((seed * 7 + (uint64_t)t * 13) %
		    (uint64_t)s.P); break;
		}
		c->pos[t] = (int32_t)(pos0 != INT64_MIN ? pos0 : v);
	}
	memcpy(c->want, c->x0, es * (size_t)c->nx);
	ref_rope(c->want, c->pos, c->cs, (int)dt, s.T, s.Hn, s.D, s.P);
}

static void rcase_close(rcase_t *c)
{
	free(c->x0);
	free(c->want);
	free(c->cs);
	free(c->pos);
}

/* Runs P on the case's inputs; returns the output x (caller frees). */
static void *rope_run(kprog_t *p, const rcase_t *c)
{
	size_t es = ks_dtype_size(c->dt);
	void *x = malloc(es * (size_t)c->nx);
	kt_buf_t bufs[] = {
		{ "x", x, es * (size_t)c->nx },
		{ "pos", c->pos, sizeof(int32_t) * (size_t)c->s.T },
		{ "cs", c->cs, es * (size_t)c->ncs },
	};
	kt_val_t vals[] = {
		{ "T", c->s.T, 0 }, { "Hn", c->s.Hn, 0 },
		{ "D", c->s.D, 0 }, { "P", c->s.P, 0 },
	};

	cr_assert_not_null(x);
	memcpy(x, c->x0, es * (size_t)c->nx);
	kp_run(p, bufs, 3, vals, 4);
	return x;
}

/*
 * Elements of GOT off the double-precision rotation by more than the
 * bound: two products and one add/sub in f32 err by at most 2.01 * 2^-24 *
 * (|x0 c| + |x1 s|), then the store by u (the dtype's unit roundoff) of
 * the f32 value; 2^-24 absolute covers an f16 subnormal result.  Untouched
 * elements (out-of-range positions, an odd D's last column, the canary)
 * must be exactly the input.
 */
static int64_t rope_f64_violations(const rcase_t *c, const void *got)
{
	const rshape_t *s = &c->s;
	int64_t n = s->T * s->Hn * s->D, i, bad = 0, half = s->D / 2;
	double *exact = malloc(sizeof(double) * (size_t)n);
	double u = kt_unit(c->dt), floor_ = c->dt == KS_DTYPE_F16 ? 0x1p-24 :
	    1e-36;

	cr_assert_not_null(exact);
	ref_rope_f64(c->x0, c->pos, c->cs, (int)c->dt, s->T, s->Hn, s->D, s->P,
	    exact);
	for (i = 0; i < n; i++) {
		int64_t t = i / (s->Hn * s->D), col = i % s->D, p = c->pos[t];
		double mag = 0, g = ref_load(got, (int)c->dt, i), bound;

		if (p >= 0 && p < s->P && col < 2 * half) {
			int64_t pi = col < half ? col : col - half;
			int64_t o = i - col;
			double x0 = fabs(ref_load(c->x0, (int)c->dt, o + pi));
			double x1 = fabs(ref_load(c->x0, (int)c->dt,
			    o + half + pi));
			double cv = fabs(ref_load(c->cs, (int)c->dt,
			    p * s->D + pi));
			double sv = fabs(ref_load(c->cs, (int)c->dt,
			    p * s->D + half + pi));

			/* y0 = x0 c - x1 s, y1 = x1 c + x0 s */
			mag = col < half ? x0 * cv + x1 * sv : x1 * cv + x0 * sv;
		}
		bound = 2.01 * 0x1p-24 * mag + u * (fabs(exact[i]) +
		    2.01 * 0x1p-24 * mag) + (mag > 0 ? floor_ : 0);
		if (!(fabs(g - exact[i]) <= bound) && bad++ < 3)
			cr_log_info("rope f64: x[%lld] = %.9g, exact %.9g, "
			    "bound %.3g", (long long)i, g, exact[i], bound);
	}
	free(exact);
	return bad;
}

/* Runs C through P, asserts bitwise equality with the reference (the
 * canary included) and the f64 bound; returns the output (caller frees). */
static void *rope_check(kprog_t *p, const rcase_t *c)
{
	char who[160];
	void *x = rope_run(p, c);

	snprintf(who, sizeof who, "rope.%s %s %s T=%lld Hn=%lld D=%lld "
	    "P=%lld", p->k->variant, backend_name(p), ks_dtype_name(c->dt),
	    (long long)c->s.T, (long long)c->s.Hn, (long long)c->s.D,
	    (long long)c->s.P);
	kt_assert_bitwise(who, x, c->want, c->dt, c->nx);
	cr_assert_eq(rope_f64_violations(c, x), 0, "%s: off the f64 rotation",
	    who);
	return x;
}

/* The IR of rope's VARIANT (NULL: selected) at VALS (0: dynamic). */
static ks_ir_kernel_t *rope_ir(const char *variant, ks_dtype_t dt,
    int64_t T, int64_t Hn, int64_t D, int64_t P)
{
	const int64_t vals[4] = { T, Hn, D, P };

	return gpu_kernel_ir(rope_def(), variant, dt, KS_MODE_EXACT, vals);
}

/* A program and the shapes it runs. */
typedef struct {
	const char *variant;
	rshape_t bind;          /* constant dims (0: dynamic) */
	rshape_t shapes[10];
	int nshapes;
} rprog_spec_t;

/*
 * The programs every backend runs, per dtype: general with the dims
 * dynamic (every shape class), with T bound to 1 (one-token decode) and
 * to 2, and with D bound, which is the
 * head-dim specialization (64, 128, 256: no guard) and its neighbours
 * (96, 80: the tail guard kept).
 */
static const rprog_spec_t rope_progs[] = {
	{ "general", { 0, 0, 0, 0 }, {
		{ 9, 3, 128, 50 }, { 8, 2, 64, 17 }, { 8, 2, 256, 9 },
		{ 8, 3, 96, 20 }, { 8, 2, 80, 11 }, { 8, 1, 2, 4 },
		{ 8, 2, 66, 8 }, { 1, 4, 128, 30 }, { 8, 2, 33, 5 },
		{ 8, 2, 65, 7 } }, 10 },
	{ "general", { 1, 0, 0, 0 }, {
		{ 1, 4, 128, 30 }, { 1, 3, 64, 9 }, { 1, 2, 96, 5 },
		{ 1, 2, 80, 7 }, { 1, 1, 256, 3 }, { 1, 2, 7, 3 } }, 6 },
	{ "general", { 2, 0, 0, 0 }, { { 2, 3, 128, 9 }, { 2, 2, 80, 3 } }, 2 },
	{ "general", { 0, 0, 128, 0 }, { { 8, 4, 128, 40 } }, 1 },
	{ "general", { 0, 0, 64, 0 }, { { 8, 3, 64, 12 } }, 1 },
	{ "general", { 0, 0, 256, 0 }, { { 8, 2, 256, 12 } }, 1 },
	{ "general", { 0, 0, 96, 0 }, { { 8, 3, 96, 12 } }, 1 },
	{ "general", { 0, 0, 80, 0 }, { { 8, 3, 80, 12 } }, 1 },
};
#define NROPE_PROGS ((int)(sizeof rope_progs / sizeof rope_progs[0]))

/* Positions a decode shape runs at: row 0, row P-1, mid, -1, P. */
static int64_t decode_pos(int r, int64_t P)
{
	switch (r) {
	case 0: return 0;
	case 1: return P - 1;
	case 2: return P / 2;
	case 3: return -1;
	default: return P;
	}
}
enum { NDECODE_POS = 5 };

/*
 * Every rope program of rope_progs for DT on ENV (NULL: cpu only):
 * bitwise reference and f64 bound; with ENV also the cpu result of the
 * same program, which OpenCL must equal bit for bit.
 */
static void rope_suite(ks_dtype_t dt, clenv_t *env)
{
	int i, j, r;

	for (i = 0; i < NROPE_PROGS; i++) {
		const rprog_spec_t *ps = &rope_progs[i];
		kprog_t cpu, cl;

		kt_prog_open(&cpu, rope_ir(ps->variant, dt, ps->bind.T, ps->bind.Hn,
		    ps->bind.D, ps->bind.P), NULL);
		if (env != NULL)
			kt_prog_open(&cl, rope_ir(ps->variant, dt, ps->bind.T,
			    ps->bind.Hn, ps->bind.D, ps->bind.P), env);
		for (j = 0; j < ps->nshapes; j++)
			for (r = 0; r < (ps->shapes[j].T == 1 ? NDECODE_POS :
			    1); r++) {
				rcase_t c;
				void *a, *b;

				rcase_init(&c, dt, ps->shapes[j],
				    ps->shapes[j].T == 1 ? decode_pos(r,
				    ps->shapes[j].P) : INT64_MIN,
				    (uint64_t)(i * 100 + j * 10 + r + 1));
				a = rope_check(&cpu, &c);
				if (env != NULL) {
					b = rope_check(&cl, &c);
					kt_assert_bitwise("rope cpu vs opencl",
					    b, a, dt, c.nx);
					free(b);
				}
				free(a);
				rcase_close(&c);
			}
		kt_prog_close(&cpu);
		if (env != NULL)
			kt_prog_close(&cl);
	}
}

Test(k_rope, rope_cpu_every_variant_and_dtype_is_bitwise_reference)
{
	int d;

	for (d = 0; d < NDTYPES; d++)
		rope_suite(dtypes[d], NULL);
}

Test(k_rope, rope_opencl_every_variant_and_dtype_is_bitwise_reference_and_cpu)
{
	clenv_t env;
	int d;

	env_open(&env);
	for (d = 0; d < NDTYPES; d++)
		rope_suite(dtypes[d], &env);
	env_close(&env);
}

/* One-token decode with every dim constant equals the same shape with
 * every dim dynamic, and both equal the reference. */
Test(k_rope, rope_decode_bound_equals_dynamic_at_the_decode_shape)
{
	static const rshape_t shapes[] = {
		{ 1, 32, 128, 4096 }, { 1, 8, 96, 64 },
	};
	size_t i;
	int d;

	for (i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
		for (d = 0; d < NDTYPES; d++) {
			const rshape_t *s = &shapes[i];
			kprog_t dec, gen;
			rcase_t c;
			void *a, *b;

			kt_prog_open(&dec, rope_ir(NULL, dtypes[d], s->T, s->Hn,
			    s->D, s->P), NULL);
			cr_assert_str_eq(dec.k->variant, "general");
			kt_prog_open(&gen, rope_ir("general", dtypes[d], 0, 0, 0, 0),
			    NULL);
			rcase_init(&c, dtypes[d], *s, s->P - 1, 77 + i);
			a = rope_check(&dec, &c);
			b = rope_check(&gen, &c);
			kt_assert_bitwise("rope T=1 bound vs dynamic", a, b,
			    dtypes[d], c.nx);
			free(a);
			free(b);
			rcase_close(&c);
			kt_prog_close(&dec);
			kt_prog_close(&gen);
		}
}

/* Out-of-range positions leave the whole token bit for bit as it was, on
 * both backends (the cs canary would turn a read of row P into NaN). */
static void rope_out_of_range(clenv_t *env)
{
	static const int32_t bad[] = { -1, 7, 8, INT32_MIN, INT32_MAX, -7 };
	rshape_t s = { 6, 3, 96, 7 };
	kprog_t p;
	rcase_t c;
	void *x;
	size_t i;

	kt_prog_open(&p, rope_ir("general", KS_DTYPE_F32, 0, 0, 0, 0), env);
	rcase_init(&c, KS_DTYPE_F32, s, INT64_MIN, 5);
	for (i = 0; i < 6; i++)
		c.pos[i] = bad[i];
	x = rope_run(&p, &c);
	kt_assert_bitwise("rope out-of-range positions", x, c.x0,
	    KS_DTYPE_F32, c.nx);
	free(x);
	rcase_close(&c);
	kt_prog_close(&p);
}

Test(k_rope, rope_positions_outside_the_table_leave_tokens_unchanged)
{
	clenv_t env;

	rope_out_of_range(NULL);
	env_open(&env);
	rope_out_of_range(&env);
	env_close(&env);
}

/* A dynamic odd D rotates floor(D/2) pairs, leaves the last column, and
 * stays inside x and cs (canaries, checked bitwise with the reference in
 * rope_suite too); here the last column is checked explicitly. */
Test(k_rope, rope_dynamic_odd_d_leaves_the_last_column_and_stays_in_bounds)
{
	rshape_t s = { 4, 3, 67, 6 };
	kprog_t p;
	rcase_t c;
	float *x;
	int64_t r;

	kt_prog_open(&p, rope_ir("general", KS_DTYPE_F32, 0, 0, 0, 0), NULL);
	rcase_init(&c, KS_DTYPE_F32, s, 2, 9);
	x = rope_check(&p, &c);
	for (r = 0; r < s.T * s.Hn; r++)
		cr_assert_eq(gpu_bits(x[r * s.D + s.D - 1]),
		    gpu_bits(((float *)c.x0)[r * s.D + s.D - 1]));
	for (r = 0; r < CANARY; r++)
		cr_assert_eq(gpu_bits(x[s.T * s.Hn * s.D + r]),
		    gpu_bits(((float *)c.x0)[s.T * s.Hn * s.D + r]));
	free(x);
	rcase_close(&c);
	kt_prog_close(&p);
}

/* Binding D = 64, 128 or 256 leaves no tail guard: the only `if` left is
 * the position test; D = 96 and 80 keep the guarded tail. */
Test(k_rope, rope_bound_head_dim_has_no_guard_and_96_80_keep_the_tail)
{
	static const int64_t ds[] = { 64, 128, 256, 96, 80 };
	size_t i;

	for (i = 0; i < sizeof ds / sizeof ds[0]; i++) {
		ks_ir_kernel_t *k = rope_ir(NULL, KS_DTYPE_BF16, 0, 0, ds[i],
		    0);
		ks_buf_t b;
		const char *q;
		int ifs = 0, fors = 0;

		cr_assert_str_eq(k->variant, "general");
		ks_buf_init(&b);
		cr_assert_eq(ks_ir_print(k, &b), KS_OK);
		for (q = b.data; (q = strstr(q, " if ")) != NULL; q++)
			ifs++;
		for (q = b.data; (q = strstr(q, " for ")) != NULL; q++)
			fors++;
		cr_assert_eq(ifs, ds[i] % 64 == 0 ? 1 : 2, "D=%lld: %d ifs "
		    "in\n%s", (long long)ds[i], ifs, b.data);
		/* 1, 2 or 4 chunks: removed or unrolled. */
		cr_assert_eq(fors, 0, "D=%lld: a chunk loop is left in\n%s",
		    (long long)ds[i], b.data);
		ks_buf_close(&b);
		ks_ir_free(k);
	}
}

/*
 * Regression (jit/cpu.c): f16 stores under rope's lane guard with D = 96
 * or 80 bound failed to compile ("inlining failed in call to
 * always_inline ksh_f32_to_f16: call is unlikely and code size would
 * grow"): libgccjit 12 leaves always_inline helpers to the inlining
 * heuristics, which refuse calls guessed cold.  Every dtype and bound D
 * must compile and run.
 */
Test(k_rope, cpu_compiles_f16_stores_under_a_guess_cold_lane_guard)
{
	static const int64_t ds[] = { 96, 80, 34 };
	size_t i;
	int d;

	for (i = 0; i < sizeof ds / sizeof ds[0]; i++)
		for (d = 0; d < NDTYPES; d++) {
			rshape_t s = { 3, 2, ds[i], 5 };
			kprog_t p;
			rcase_t c;

			kt_prog_open(&p, rope_ir("general", dtypes[d], 0, 0, ds[i],
			    0), NULL);
			rcase_init(&c, dtypes[d], s, INT64_MIN, 4);
			free(rope_check(&p, &c));
			rcase_close(&c);
			kt_prog_close(&p);
		}
}

Test(k_rope, rope_select_picks_general_for_every_shape)
{
	static const struct {
		int64_t T, Hn, D, P;
		const char *variant;
	} cases[] = {
		{ 1, 32, 128, 4096, "general" }, { 1, 0, 0, 0, "general" },
		{ 1, 8, 96, 64, "general" }, { 2, 32, 128, 4096, "general" },
		{ 0, 32, 128, 4096, "general" }, { 17, 8, 64, 64, "general" },
		{ 0, 0, 128, 0, "general" },
	};
	ks_dim_t dims[4];
	ks_spec_t spec;
	char err[256];
	size_t i;
	int j, m;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
		for (m = KS_MODE_EXACT; m <= KS_MODE_FAST; m++) {
			const int64_t v[4] = { cases[i].T, cases[i].Hn,
				cases[i].D, cases[i].P };

			for (j = 0; j < 4; j++) {
				dims[j].name = ks_kernel_rope.dims[j];
				dims[j].is_const = v[j] != 0;
				dims[j].value = v[j];
			}
			cr_assert_eq(ks_kernel_validate(rope_def(),
			    KS_DTYPE_F16, (ks_mode_t)m, dims, 4, &spec, err,
			    sizeof err), KS_OK, "%s", err);
			cr_assert_str_eq(ks_kernel_rope.select(&spec),
			    cases[i].variant, "case %zu", i);
		}
	/* No other variant builds (decode was dropped: no measured win). */
	dims[0].is_const = 0;
	cr_assert_eq(ks_kernel_validate(rope_def(), KS_DTYPE_F16,
	    KS_MODE_EXACT, dims, 4, &spec, err, sizeof err), KS_OK);
	cr_assert_null(ks_kernel_rope.build(&spec, "decode"));
	cr_assert_null(ks_kernel_rope.build(&spec, "head_dim"));
}

/* Validation error code and message for DEF at VALS (all constant). */
static int reject(const ks_kernel_def_t *def, const int64_t *vals,
    char *err, size_t errlen)
{
	ks_dim_t dims[4];
	ks_spec_t spec;
	int j;

	for (j = 0; j < def->ndims; j++) {
		dims[j].name = def->dims[j];
		dims[j].is_const = 1;
		dims[j].value = vals[j];
	}
	return ks_kernel_validate(def, KS_DTYPE_F32, KS_MODE_EXACT, dims,
	    def->ndims, &spec, err, errlen);
}

Test(k_rope, rope_odd_constant_d_and_huge_buffers_are_rejected)
{
	static const int64_t odd[] = { 4, 8, 127, 64 };
	static const int64_t big_x[] = { 1 << 20, 1 << 20, 2, 64 };
	static const int64_t ovf_x[] = { 1LL << 31, 1LL << 31, 1LL << 31, 8 };
	static const int64_t big_cs[] = { 4, 8, 4096, 1LL << 29 };
	static const int64_t ok[] = { 1 << 10, 1 << 10, 1 << 20, 1 << 20 };
	char err[256];

	cr_assert_eq(reject(rope_def(), odd, err, sizeof err),
	    KS_E_BAD_SHAPE);
	cr_assert(strstr(err, "D must be even (got 127)") != NULL, "%s", err);
	cr_assert_eq(reject(rope_def(), big_x, err, sizeof err),
	    KS_E_TOO_LARGE);
	cr_assert(strstr(err, "buffer x of T*Hn*D = 1048576*1048576*2") !=
	    NULL, "%s", err);
	cr_assert_eq(reject(rope_def(), ovf_x, err, sizeof err),
	    KS_E_TOO_LARGE);
	cr_assert(strstr(err, "buffer x") != NULL, "%s", err);
	cr_assert_eq(reject(rope_def(), big_cs, err, sizeof err),
	    KS_E_TOO_LARGE);
	cr_assert(strstr(err, "buffer cs of P*D = 536870912*4096") != NULL,
	    "%s", err);
	/* Exactly 2^40 elements in x and in cs is within the limit. */
	cr_assert_eq(reject(rope_def(), ok, err, sizeof err), KS_OK, "%s",
	    err);
}

/* ---- rope: the checkers catch planted bugs ---- */

/* Planted: the contraction a compiler might do, fma(x0, c, -(x1 s)). */
static void ref_rope_fma(void *x, const int32_t *pos, const void *cs,
    int dt, int64_t T, int64_t Hn, int64_t D, int64_t P)
{
	int64_t t, h, i, half = D / 2;

	for (t = 0; t < T; t++)
		for (h = 0; h < Hn; h++)
			for (i = 0; i < half; i++) {
				int64_t o = (t * Hn + h) * D, p = pos[t];
				float c, s, x0, x1;

				if (p < 0 || p >= P)
					continue;
				c = ref_load(cs, dt, p * D + i);
				s = ref_load(cs, dt, p * D + half + i);
				x0 = ref_load(x, dt, o + i);
				x1 = ref_load(x, dt, o + half + i);
				ref_store(x, dt, o + i, fmaf(x0, c, -(x1 * s)));
				ref_store(x, dt, o + half + i,
				    fmaf(x1, c, x0 * s));
			}
}

Test(k_rope, rope_checkers_catch_fma_and_a_reversed_rotation)
{
	rshape_t s = { 8, 4, 128, 32 };
	size_t es;
	int d;

	for (d = 0; d < NDTYPES; d++) {
		ks_dtype_t dt = dtypes[d];
		kprog_t p;
		rcase_t c;
		void *x, *bad;
		int64_t n;

		es = ks_dtype_size(dt);
		kt_prog_open(&p, rope_ir("general", dt, 0, 0, 0, 0), NULL);
		rcase_init(&c, dt, s, INT64_MIN, 3);
		x = rope_check(&p, &c);
		bad = malloc(es * (size_t)c.nx);
		cr_assert_not_null(bad);

		/* fma: caught in f32.  In f16 and bf16 every product of two
		 * loaded values is exact in f32 (22 and 16 significant
		 * bits), so fma and mul+add round alike: not a bug there. */
		memcpy(bad, c.x0, es * (size_t)c.nx);
		ref_rope_fma(bad, c.pos, c.cs, (int)dt, s.T, s.Hn, s.D, s.P);
		n = kt_diff("planted fma", x, bad, dt, c.nx);
		if (dt == KS_DTYPE_F32)
			cr_assert_gt(n, 0, "f32: fma reference not told apart");
		else
			cr_assert_eq(n, 0, "%s: exact products, yet fma "
			    "differs", ks_dtype_name(dt));

		/* The opposite rotation (sin of -angle): the bitwise checker
		 * and the f64 bound both report it. */
		memcpy(bad, c.x0, es * (size_t)c.nx);
		{
			rcase_t rev = c;

			rev.x0 = bad;
			/* x0 *(-s): rotate with the sin half negated. */
			rev.cs = malloc(es * (size_t)c.ncs);
			cr_assert_not_null(rev.cs);
			memcpy(rev.cs, c.cs, es * (size_t)c.ncs);
			for (n = 0; n < s.P; n++) {
				int64_t i;

				for (i = s.D / 2; i < s.D; i++)
					ref_store(rev.cs, (int)dt, n * s.D + i,
					    -ref_load(c.cs, (int)dt,
					    n * s.D + i));
			}
			ref_rope(bad, c.pos, rev.cs, (int)dt, s.T, s.Hn, s.D,
			    s.P);
			free(rev.cs);
		}
		cr_assert_gt(kt_diff("planted reversed rotation", x, bad, dt,
		    c.nx), 0, "%s: reversed rotation not told apart",
		    ks_dtype_name(dt));
		cr_assert_gt(rope_f64_violations(&c, bad), 0, "%s: f64 bound "
		    "misses a reversed rotation", ks_dtype_name(dt));
		free(bad);
		free(x);
		rcase_close(&c);
		kt_prog_close(&p);
	}
}

/* ---- silu_mul ---- */

/*
 * The distance allowed between OpenCL's silu_mul and the reference, in
 * ulps of the dtype: none, since exp is kspec's own sequence on every
 * backend (docs/ir.md).  The checker of this distance is still shown to
 * catch one ulp.
 */
static const int64_t SILU_CL_ULPS[3] = { 0, 0, 0 };  /* f32 f16 bf16 */

static const ks_kernel_def_t *silu_def(void)
{
	cr_assert_eq(ks_kernel_find("silu_mul"), &ks_kernel_silu_mul);
	return &ks_kernel_silu_mul;
}

typedef struct {
	ks_dtype_t dt;
	int64_t T, F, ngu, ny;  /* ny: T*F plus the canary */
	void *gu, *want;
} scase_t;

static void scase_init(scase_t *c, ks_dtype_t dt, int64_t T, int64_t F,
    uint64_t seed)
{
	static const float specials[] = { 0.0f, -0.0f, 1e-3f, -1e-3f, 10.0f,
		-10.0f, -87.0f, 88.0f, -100.0f, 100.0f, INFINITY, -INFINITY,
		-17.5f, 3.0f, 0.5f, -0.5f };
	size_t es = ks_dtype_size(dt);
	int64_t t, j;

	c->dt = dt;
	c->T = T;
	c->F = F;
	c->ngu = T * 2 * F;
	c->ny = T * F + CANARY;
	c->gu = malloc(es * (size_t)c->ngu);
	c->want = malloc(es * (size_t)c->ny);
	cr_assert(c->gu && c->want);
	ref_fill(c->gu, (int)dt, c->ngu, seed);
	for (t = 0; t < T; t++)
		for (j = 0; j < F; j++) {
			int64_t i = t * 2 * F + j;
			float g = ref_load(c->gu, (int)dt, i) * 24.0f;

			if ((t * F + j) % 7 == 3)
				g = specials[(t * F + j) / 7 % 16];
			ref_store(c->gu, (int)dt, i, g);
			ref_store(c->gu, (int)dt, i + F,
			    ref_load(c->gu, (int)dt, i + F) * 2.0f);
		}
	ref_fill(c->want, (int)dt, c->ny, seed + 1);   /* canary as well */
	ref_silu_mul(c->gu, c->want, (int)dt, T, F);
}

static void scase_close(scase_t *c)
{
	free(c->gu);
	free(c->want);
}

/* Runs P; returns y (caller frees), canary initialized like want's. */
static void *silu_run(kprog_t *p, const scase_t *c)
{
	size_t es = ks_dtype_size(c->dt);
	void *y = malloc(es * (size_t)c->ny);
	kt_buf_t bufs[] = {
		{ "gu", c->gu, es * (size_t)c->ngu },
		{ "y", y, es * (size_t)c->ny },
	};
	kt_val_t vals[] = { { "T", c->T, 0 }, { "F", c->F, 0 } };

	cr_assert_not_null(y);
	memcpy(y, c->want, es * (size_t)c->ny);
	nan_fill(y, c->dt, 0, c->T * c->F);
	kp_run(p, bufs, 2, vals, 2);
	return y;
}

/*
 * Elements of GOT off the double-precision silu by more than the bound: exp
 * within EXP_ULPS ulps (relative 2 * EXP_ULPS * 2^-24), then 1 + e, the
 * division and the product each 2^-24: relative (2 * EXP_ULPS + 4) *
 * 2^-24, plus the store's u; absolute 2^-24 for f16 subnormals, 1e-36
 * elsewhere (an f32 exp overflow gives 0 where the exact value is below
 * 1e-36).  NaN and Inf must match exactly.
 */
static int64_t silu_f64_violations(const scase_t *c, const void *got,
    double exp_ulps)
{
	int64_t n = c->T * c->F, i, bad = 0;
	double *exact = malloc(sizeof(double) * (size_t)n);
	double u = kt_unit(c->dt), floor_ = c->dt == KS_DTYPE_F16 ? 0x1p-24 :
	    1e-36, rel = (2 * exp_ulps + 4) * 0x1p-24;

	cr_assert_not_null(exact);
	ref_silu_mul_f64(c->gu, (int)c->dt, c->T, c->F, exact);
	for (i = 0; i < n; i++) {
		double g = ref_load(got, (int)c->dt, i), e = exact[i];
		int ok;

		if (isnan(e) || isinf(e) || isnan(g) || isinf(g))
			ok = (isnan(e) && isnan(g)) || g == e;
		else
			ok = fabs(g - e) <= (rel + u * (1 + rel)) * fabs(e) +
			    floor_;
		if (!ok && bad++ < 3)
			cr_log_info("silu f64: y[%lld] = %.9g, exact %.9g",
			    (long long)i, g, e);
	}
	free(exact);
	return bad;
}

/* Largest ulp distance of GOT from WANT over N elements. */
static int64_t max_ulps(const void *got, const void *want, ks_dtype_t dt,
    int64_t n)
{
	int64_t i, m = 0, d;

	for (i = 0; i < n; i++) {
		d = ulp_dist(kt_bits(got, dt, i), kt_bits(want, dt, i), dt);
		if (d > m)
			m = d;
	}
	return m;
}

static ks_ir_kernel_t *silu_ir(ks_dtype_t dt, int64_t T, int64_t F)
{
	const int64_t vals[2] = { T, F };

	return gpu_kernel_ir(silu_def(), "general", dt, KS_MODE_EXACT, vals);
}

typedef struct {
	int64_t bind_T, bind_F;         /* 0: dynamic */
	int64_t shapes[8][2];           /* T, F */
	int nshapes;
} sprog_spec_t;

/* F a multiple of 256 (no guard once bound), of 32 only, of neither;
 * below one chunk; one row and several. */
static const sprog_spec_t silu_progs[] = {
	{ 0, 0, { { 3, 512 }, { 2, 256 }, { 3, 100 }, { 2, 300 },
		{ 1, 33 }, { 4, 1 }, { 2, 800 }, { 1, 1024 } }, 8 },
	{ 0, 512, { { 3, 512 } }, 1 },
	{ 3, 300, { { 3, 300 } }, 1 },
};
#define NSILU_PROGS ((int)(sizeof silu_progs / sizeof silu_progs[0]))

/*
 * Every silu program for DT: cpu bitwise equal to the reference and
 * within the f64 bound (1 ulp exp); with ENV, OpenCL within SILU_CL_ULPS
 * of the reference and the f64 bound (3 ulp exp).  *WORST gets the largest
 * OpenCL distance seen.
 */
static void silu_suite(ks_dtype_t dt, clenv_t *env, int64_t *worst)
{
	char who[128];
	int i, j;

	for (i = 0; i < NSILU_PROGS; i++) {
		const sprog_spec_t *ps = &silu_progs[i];
		kprog_t p;

		kt_prog_open(&p, silu_ir(dt, ps->bind_T, ps->bind_F), env);
		for (j = 0; j < ps->nshapes; j++) {
			scase_t c;
			void *y;
			int64_t m;

			scase_init(&c, dt, ps->shapes[j][0], ps->shapes[j][1],
			    (uint64_t)(i * 10 + j + 1));
			y = silu_run(&p, &c);
			snprintf(who, sizeof who, "silu_mul %s %s T=%lld F=%lld",
			    backend_name(&p), ks_dtype_name(dt),
			    (long long)c.T, (long long)c.F);
			/* The canary after y is compared bitwise always. */
			kt_assert_bitwise(who, (char *)y + ks_dtype_size(dt) *
			    (size_t)(c.T * c.F), (char *)c.want +
			    ks_dtype_size(dt) * (size_t)(c.T * c.F), dt,
			    CANARY);
			if (env == NULL) {
				kt_assert_bitwise(who, y, c.want, dt, c.ny);
				cr_assert_eq(silu_f64_violations(&c, y, 1), 0,
				    "%s: off the f64 silu", who);
			} else {
				m = max_ulps(y, c.want, dt, c.T * c.F);
				cr_assert_leq(m, SILU_CL_ULPS[(int)dt],
				    "%s: %lld ulps from the reference",
				    who, (long long)m);
				if (m > *worst)
					*worst = m;
				cr_assert_eq(silu_f64_violations(&c, y, 3), 0,
				    "%s: off the f64 silu", who);
			}
			free(y);
			scase_close(&c);
		}
		kt_prog_close(&p);
	}
}

Test(k_rope, silu_mul_cpu_and_opencl_are_bitwise_the_reference)
{
	int64_t worst = 0;
	int d;

	for (d = 0; d < NDTYPES; d++)
		silu_suite(dtypes[d], NULL, &worst);
}

Test(k_rope, silu_mul_opencl_is_within_the_stated_ulps_of_the_reference)
{
	clenv_t env;
	int d;

	env_open(&env);
	for (d = 0; d < NDTYPES; d++) {
		int64_t worst = 0;

		silu_suite(dtypes[d], &env, &worst);
		cr_log_info("silu_mul opencl %s: at most %lld ulps from the reference",
		    ks_dtype_name(dtypes[d]), (long long)worst);
	}
	env_close(&env);
}

/* A constant F that is a multiple of 256 leaves no guard and no tail
 * branch (one `lanes` per step, 8 steps); F = 300 keeps both. */
Test(k_rope, silu_mul_bound_f_multiple_of_256_has_no_guard)
{
	static const int64_t fs[] = { 256, 512, 11008, 300, 288 };
	size_t i;

	for (i = 0; i < sizeof fs / sizeof fs[0]; i++) {
		ks_ir_kernel_t *k = silu_ir(KS_DTYPE_F16, 0, fs[i]);
		ks_buf_t b;
		const char *q;
		int ifs = 0, lanes = 0;

		ks_buf_init(&b);
		cr_assert_eq(ks_ir_print(k, &b), KS_OK);
		for (q = b.data; (q = strstr(q, " if ")) != NULL; q++)
			ifs++;
		for (q = b.data; (q = strstr(q, " lanes ")) != NULL; q++)
			lanes++;
		if (fs[i] % 256 == 0) {
			cr_assert_eq(ifs, 0, "F=%lld:\n%s", (long long)fs[i],
			    b.data);
			cr_assert_eq(lanes, 8, "F=%lld:\n%s", (long long)fs[i],
			    b.data);
		} else {
			cr_assert_eq(ifs, 9, "F=%lld:\n%s", (long long)fs[i],
			    b.data);
			cr_assert_eq(lanes, 16);
		}
		ks_buf_close(&b);
		ks_ir_free(k);
	}
}

Test(k_rope, silu_mul_selects_general_and_rejects_huge_buffers)
{
	static const int64_t big_gu[] = { 1 << 21, 1 << 20 };
	static const int64_t ok[] = { 1 << 20, 1 << 19 };
	ks_dim_t dims[2] = { { "T", 1, 1 }, { "F", 0, 0 } };
	ks_spec_t spec;
	char err[256];

	cr_assert_eq(ks_kernel_validate(silu_def(), KS_DTYPE_BF16,
	    KS_MODE_FAST, dims, 2, &spec, err, sizeof err), KS_OK, "%s", err);
	cr_assert_str_eq(ks_kernel_silu_mul.select(&spec), "general");
	cr_assert_null(ks_kernel_silu_mul.build(&spec, "decode"));
	cr_assert_eq(reject(silu_def(), big_gu, err, sizeof err),
	    KS_E_TOO_LARGE);
	cr_assert(strstr(err, "buffer gu of T*2F = 2097152*2097152") != NULL,
	    "%s", err);
	cr_assert_eq(reject(silu_def(), ok, err, sizeof err), KS_OK, "%s",
	    err);
}

/* ---- silu_mul: the checkers catch planted bugs ---- */

/* Planted: (g * u) / (1 + exp(-g)), the product before the division. */
static void ref_silu_mul_reordered(const void *gu, void *y, int dt,
    int64_t T, int64_t F)
{
	int64_t t, j;

	for (t = 0; t < T; t++)
		for (j = 0; j < F; j++) {
			float g = ref_load(gu, dt, t * 2 * F + j);
			float u = ref_load(gu, dt, t * 2 * F + F + j);
			float gu_ = g * u;

			ref_store(y, dt, t * F + j, gu_ / (1.0f + ref_expf(-g)));
		}
}

/* Planted: the right f32 value, stored rounding toward zero instead of to
 * nearest even (f16, bf16). */
static void ref_silu_mul_toward_zero(const void *gu, void *y, int dt,
    int64_t T, int64_t F)
{
	int64_t i;

	ref_silu_mul(gu, y, dt, T, F);
	for (i = 0; i < T * F; i++) {
		float g = ref_load(gu, dt, i / F * 2 * F + i % F);
		float u = ref_load(gu, dt, i / F * 2 * F + F + i % F);
		float e = ref_expf(-g), d = 1.0f + e, q = g / d, v = q * u;

		if (isfinite(v) && fabsf(ref_load(y, dt, i)) > fabsf(v))
			((uint16_t *)y)[i]--;
	}
}

Test(k_rope, silu_mul_checkers_catch_planted_bugs_and_a_few_ulps)
{
	int d;

	for (d = 0; d < NDTYPES; d++) {
		ks_dtype_t dt = dtypes[d];
		size_t es = ks_dtype_size(dt);
		int64_t n, i, lim = SILU_CL_ULPS[(int)dt];
		kprog_t p;
		scase_t c;
		void *y, *bad;

		kt_prog_open(&p, silu_ir(dt, 0, 0), NULL);
		scase_init(&c, dt, 4, 1000, 11);
		n = c.T * c.F;
		y = silu_run(&p, &c);
		kt_assert_bitwise("silu_mul", y, c.want, dt, c.ny);
		bad = malloc(es * (size_t)c.ny);
		cr_assert_not_null(bad);

		/* The bitwise checker tells apart the reordering in f32 (in
		 * f16 and bf16 g*u is exact in f32 and the final rounding
		 * hides the one-ulp f32 difference on these inputs) and a
		 * store that rounds toward zero in f16 and bf16. */
		memcpy(bad, y, es * (size_t)c.ny);
		if (dt == KS_DTYPE_F32)
			ref_silu_mul_reordered(c.gu, bad, (int)dt, c.T, c.F);
		else
			ref_silu_mul_toward_zero(c.gu, bad, (int)dt, c.T, c.F);
		cr_assert_gt(kt_diff("planted bug", y, bad, dt, c.ny), 0,
		    "%s: planted bug not told apart", ks_dtype_name(dt));

		/* The OpenCL ulp checker reports one element one ulp past
		 * its bound, the f64 checker one element 8 ulps off (f32;
		 * 4 in f16, bf16).  Element 1 is a plain value. */
		memcpy(bad, y, es * (size_t)c.ny);
		i = 1;
		cr_assert(fabsf(ref_load(y, (int)dt, i)) > 1e-3f);
		if (dt == KS_DTYPE_F32)
			((uint32_t *)bad)[i] += (uint32_t)lim + 1;
		else
			((uint16_t *)bad)[i] += (uint16_t)(lim + 1);
		cr_assert_eq(max_ulps(bad, c.want, dt, n), lim + 1);
		if (dt == KS_DTYPE_F32)
			((uint32_t *)bad)[i] += 6;
		else
			((uint16_t *)bad)[i] += 2;
		cr_assert_gt(silu_f64_violations(&c, bad, 3), 0,
		    "%s: f64 bound misses a wrong element", ks_dtype_name(dt));
		free(bad);
		free(y);
		scase_close(&c);
		kt_prog_close(&p);
	}
}
