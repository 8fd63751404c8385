/*
 * gemm_pack_x, gemm_pack_w and gemm_packed on the cpu backend and on
 * OpenCL (PoCL here; skipped visibly without a device):
 *
 *   - the packs: bitwise the plain-C layout (docs/kernels.md: element
 *     (t, l, j, i) is row t*T + i, column l + 32 j; 0.0 in the padding) for
 *     T = 8 (x) and 32 (W), the dims dynamic and constant, every dtype,
 *     nothing written past the panels;
 *   - gemm_packed on operands packed by them: bitwise gemm's canonical
 *     reference (ref_gemm_mixed on the unpacked x and W) and bitwise gemm
 *     `general` run on the same x and W, for every dtype and weight dtype
 *     pair, shapes with partial panels (M % 8, N % 32), a K tail, K < 32
 *     (lanes that hold no k), K = 1, a band boundary (more than 32 x
 *     panels); within a float64 bound; nothing written past y;
 *   - cpu and OpenCL bitwise equal;
 *   - the panel buffers' declared dims (what the loaders check), and a
 *     panel buffer past the element limit refused by name.
 *   - the cpu code at the prefill shapes keeps each 8 x 32 tile in
 *     registers (no fma reads memory) and holds the prefetches: an
 *     unclamped W prefetch once made GCC keep one panel's accumulators on
 *     the stack (25% slower), which this catches.
 *
 * The bitwise checker is shown to catch a planted bug: a reference that
 * combines the canonical lanes in order 0..31 instead of the tree differs
 * from the kernel.
 */
#include <math.h>

#include "cl.h"
#include "kern.h"

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

static void general_close(void);

TestSuite(k_packed, .init = setup, .fini = general_close, .timeout = 600);

enum { CANARY = 64, PM = 8, PN = 32 };

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	cr_assert_not_null(p);
	return p;
}

/* IR of kernel NAME at VALS (0: dynamic), dtype DT, weight dtype WDT. */
static ks_ir_kernel_t *ir(const char *name, ks_dtype_t dt, ks_dtype_t wdt,
    const int64_t *vals)
{
	const ks_kernel_def_t *def = ks_kernel_find(name);
	ks_dim_t dims[KS_MAX_DIMS];
	ks_spec_t spec;
	ks_ir_kernel_t *k = NULL;
	char err[512];
	int i;

	cr_assert_not_null(def, "%s is not in the library", name);
	for (i = 0; i < def->ndims; i++) {
		dims[i].name = def->dims[i];
		dims[i].is_const = vals[i] != 0;
		dims[i].value = vals[i];
	}
	cr_assert_eq(ks_kernel_validate_mixed(def, dt, wdt, KS_MODE_EXACT,
	    dims, def->ndims, &spec, err, sizeof err), KS_OK, "%s: %s", name,
	    err);
	cr_assert_eq(ks_specialize(&spec, &k, err, sizeof err), KS_OK,
	    "%s: %s", name, err);
	return k;
}

/* Runs a pack (PROG, panels of T rows) on IN; returns the panels plus
 * CANARY elements of 99-fill (caller frees). */
static void *pack_run(kt_prog_t *p, ks_dtype_t dt, const void *in,
    int64_t R, int64_t K, int64_t T)
{
	size_t es = ks_dtype_size(dt);
	int64_t n = ref_panel_elems(R, K, T);
	void *out = xmalloc(es * (size_t)(n + CANARY));
	kt_buf_t bufs[] = {
		{ "in", (void *)in, es * (size_t)(R * K) },
		{ "out", out, es * (size_t)(n + CANARY) },
	};
	kt_val_t vals[] = { { "R", R, 0 }, { "K", K, 0 } };
	kt_args_t a;

	ref_fill(out, (int)dt, n + CANARY, 99);
	kt_bind(&a, p->k, bufs, 2, vals, 2);
	kt_prog_run(p, a.args);
	return out;
}

/* Packs IN on P and checks the panels and the canary bitwise. */
static void *pack_checked(kt_prog_t *p, ks_dtype_t dt, const void *in,
    int64_t R, int64_t K, int64_t T)
{
	size_t es = ks_dtype_size(dt);
	int64_t n = ref_panel_elems(R, K, T);
	void *want = xmalloc(es * (size_t)(n + CANARY)), *got;
	char who[128];

	ref_fill(want, (int)dt, n + CANARY, 99);
	ref_pack_panels(in, want, (int)dt, R, K, T);
	got = pack_run(p, dt, in, R, K, T);
	snprintf(who, sizeof who, "gemm_pack %s %s R=%lld K=%lld T=%lld",
	    p->env ? "opencl" : "cpu", ks_dtype_name(dt), (long long)R,
	    (long long)K, (long long)T);
	kt_assert_bitwise(who, got, want, dt, n + CANARY);
	free(want);
	return got;
}

/* Runs gemm_packed (P) on XP, WP; returns y plus CANARY (caller frees). */
static void *packed_run(kt_prog_t *p, ks_dtype_t dt, ks_dtype_t wdt,
    const void *xp, const void *wp, int64_t M, int64_t N, int64_t K)
{
	size_t es = ks_dtype_size(dt), ws = ks_dtype_size(wdt);
	void *y = xmalloc(es * (size_t)(M * N + CANARY));
	kt_buf_t bufs[] = {
		{ "xp", (void *)xp, es * (size_t)ref_panel_elems(M, K, PM) },
		{ "Wp", (void *)wp, ws * (size_t)ref_panel_elems(N, K, PN) },
		{ "y", y, es * (size_t)(M * N + CANARY) },
	};
	kt_val_t vals[] = { { "M", M, 0 }, { "N", N, 0 }, { "K", K, 0 } };
	kt_args_t a;

	ref_fill(y, (int)dt, M * N + CANARY, 99);
	kt_bind(&a, p->k, bufs, 3, vals, 3);
	kt_prog_run(p, a.args);
	return y;
}

/* gemm general's cpu build per dtype pair, made at its first use: its
 * dims are dynamic, so one build serves every shape of the test (a build
 * per call was most of the test's compiles). */
static kt_prog_t general[KS_DTYPE_COUNT][KS_DTYPE_COUNT];

static void general_close(void)
{
	int d, w;

	for (d = 0; d < KS_DTYPE_COUNT; d++)
		for (w = 0; w < KS_DTYPE_COUNT; w++)
			if (general[d][w].k != NULL)
				kt_prog_close(&general[d][w]);
}

/* gemm general (its cpu build) on x, W: y of M*N (caller frees). */
static void *general_run(ks_dtype_t dt, ks_dtype_t wdt, const void *x,
    const void *w, int64_t M, int64_t N, int64_t K)
{
	const int64_t dyn[3] = { 0, 0, 0 };
	size_t es = ks_dtype_size(dt), ws = ks_dtype_size(wdt);
	void *y = xmalloc(es * (size_t)(M * N));
	kt_buf_t bufs[] = {
		{ "x", (void *)x, es * (size_t)(M * K) },
		{ "W", (void *)w, ws * (size_t)(N * K) },
		{ "y", y, es * (size_t)(M * N) },
	};
	kt_val_t vals[] = { { "M", M, 0 }, { "N", N, 0 }, { "K", K, 0 } };
	kt_prog_t *p = &general[dt][wdt];
	kt_args_t a;

	if (p->k == NULL)
		kt_prog_open(p, ir("gemm", dt, wdt, dyn), NULL);
	cr_assert_str_eq(p->k->variant, "general");
	kt_bind(&a, p->k, bufs, 3, vals, 3);
	kt_prog_run(p, a.args);
	return y;
}

typedef struct {
	int64_t M, N, K;
} shape_t;

static const shape_t shapes[] = {
	{ 1, 1, 1 }, { 12, 32, 32 }, { 13, 33, 33 }, { 5, 40, 31 },
	{ 25, 70, 100 }, { 3, 17, 7 }, { 24, 64, 300 }, { 400, 33, 40 },
	/* K past 64 * 32: a lane's k in chunks of 64 (three, the last
	 * short; two for lane 0 only) */
	{ 9, 40, 4200 }, { 17, 33, 2049 },
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static const ks_dtype_t pairs[][2] = {
	{ KS_DTYPE_F32, KS_DTYPE_F32 }, { KS_DTYPE_F16, KS_DTYPE_F16 },
	{ KS_DTYPE_BF16, KS_DTYPE_BF16 }, { KS_DTYPE_F32, KS_DTYPE_BF16 },
	{ KS_DTYPE_F32, KS_DTYPE_F16 },
};
#define NPAIRS ((int)(sizeof pairs / sizeof pairs[0]))

/* One shape: pack x and W (the pack progs XPK, WPK), run G;
 * check y against the reference, general and a float64 bound; returns
 * y (caller frees). */
static void *gemm_case(kt_prog_t *xpk, kt_prog_t *wpk, kt_prog_t *g,
    ks_dtype_t dt, ks_dtype_t wdt, const shape_t *s, uint64_t seed)
{
	size_t es = ks_dtype_size(dt), ws = ks_dtype_size(wdt);
	void *x = xmalloc(es * (size_t)(s->M * s->K));
	void *w = xmalloc(ws * (size_t)(s->N * s->K));
	void *want = xmalloc(es * (size_t)(s->M * s->N + CANARY));
	double *f64 = xmalloc(sizeof(double) * (size_t)(s->M * s->N));
	void *xp, *wp, *y, *gen;
	char who[160];
	int64_t i;

	ref_fill(x, (int)dt, s->M * s->K, seed);
	ref_fill(w, (int)wdt, s->N * s->K, seed + 1000);
	xp = pack_checked(xpk, dt, x, s->M, s->K, PM);
	wp = pack_checked(wpk, wdt, w, s->N, s->K, PN);
	y = packed_run(g, dt, wdt, xp, wp, s->M, s->N, s->K);
	ref_fill(want, (int)dt, s->M * s->N + CANARY, 99);
	ref_gemm_mixed(x, w, want, (int)dt, (int)wdt, s->M, s->N, s->K);
	snprintf(who, sizeof who, "gemm_packed %s %s/%s M=%lld N=%lld K=%lld",
	    g->env ? "opencl" : "cpu", ks_dtype_name(dt), ks_dtype_name(wdt),
	    (long long)s->M, (long long)s->N, (long long)s->K);
	kt_assert_bitwise(who, y, want, dt, s->M * s->N + CANARY);
	gen = general_run(dt, wdt, x, w, s->M, s->N, s->K);
	kt_assert_bitwise("gemm_packed vs gemm general", y, gen, dt,
	    s->M * s->N);
	/* The float64 bound of a K-term dot product in f32 (K u sum|x w|)
	 * plus the store's rounding. */
	ref_gemm_f64_mixed(x, w, f64, (int)dt, (int)wdt, s->M, s->N, s->K);
	for (i = 0; i < s->M * s->N; i++) {
		double got = ref_load(y, (int)dt, i);

		cr_assert_leq(fabs(got - f64[i]), (double)s->K * 0x1p-24 *
		    (double)s->K + kt_unit(dt) * fabs(f64[i]) + 1e-30,
		    "%s: [%lld] %.9g vs f64 %.9g", who, (long long)i, got,
		    f64[i]);
	}
	free(x);
	free(w);
	free(want);
	free(f64);
	free(xp);
	free(wp);
	free(gen);
	return y;
}

/* One shape on the cpu (and on ENV): the cpu result, checked. */
static void shape_case(clenv_t *env, ks_dtype_t dt, ks_dtype_t wdt,
    const shape_t *sh, kt_prog_t *progs, kt_prog_t *clprogs)
{
	void *a = gemm_case(&progs[0], &progs[1], &progs[2], dt, wdt, sh,
	    (uint64_t)sh->K + 1), *b;

	if (env != NULL) {
		b = gemm_case(&clprogs[0], &clprogs[1], &clprogs[2], dt, wdt,
		    sh, (uint64_t)sh->K + 1);
		kt_assert_bitwise("gemm_packed cpu vs opencl", b, a, dt,
		    sh->M * sh->N);
		free(b);
	}
	free(a);
}

/* The three programs of one build: pack x, pack W, gemm_packed. */
static void open3(kt_prog_t *p, clenv_t *env, ks_dtype_t dt,
    ks_dtype_t wdt, const int64_t *dims)
{
	const int64_t xv[2] = { dims[0], dims[2] };
	const int64_t wv[2] = { dims[1], dims[2] };

	kt_prog_open(&p[0], ir("gemm_pack_x", dt, dt, xv), env);
	kt_prog_open(&p[1], ir("gemm_pack_w", wdt, wdt, wv), env);
	kt_prog_open(&p[2], ir("gemm_packed", dt, wdt, dims), env);
}

static void close3(kt_prog_t *p)
{
	int i;

	for (i = 0; i < 3; i++)
		kt_prog_close(&p[i]);
}

/* Every dtype pair with the dims dynamic (one build per pair, every
 * shape), and with them constant (a build per shape) for f32 and
 * f32/bf16. */
static void suite(clenv_t *env)
{
	const int64_t dyn[3] = { 0, 0, 0 };
	kt_prog_t p[3], q[3];
	int d, s;

	for (d = 0; d < NPAIRS; d++) {
		ks_dtype_t dt = pairs[d][0], wdt = pairs[d][1];

		open3(p, NULL, dt, wdt, dyn);
		if (env != NULL)
			open3(q, env, dt, wdt, dyn);
		for (s = 0; s < NSHAPES; s++)
			shape_case(env, dt, wdt, &shapes[s], p, q);
		close3(p);
		if (env != NULL)
			close3(q);
		if (d != 0 && d != 3)
			continue;
		for (s = 0; s < NSHAPES; s++) {
			const int64_t c[3] = { shapes[s].M, shapes[s].N,
			    shapes[s].K };

			open3(p, NULL, dt, wdt, c);
			if (env != NULL)
				open3(q, env, dt, wdt, c);
			shape_case(env, dt, wdt, &shapes[s], p, q);
			close3(p);
			if (env != NULL)
				close3(q);
		}
	}
}

Test(k_packed, cpu_every_dtype_pair_is_bitwise_gemm_and_its_reference)
{
	suite(NULL);
}

Test(k_packed, opencl_is_bitwise_the_reference_and_cpu)
{
	clenv_t env;

	env_open(&env);
	suite(&env);
	env_close(&env);
}

/* The planted bug: lanes summed 0..31 in order instead of the tree. */
Test(k_packed, checker_catches_a_sequential_lane_sum)
{
	const shape_t sh = { 13, 33, 300 };
	const int64_t xv[2] = { 0, 0 }, wv[2] = { 0, 0 }, gv[3] = { 0, 0, 0 };
	kt_prog_t xpk, wpk, g;
	float *x = xmalloc(4 * (size_t)(sh.M * sh.K));
	float *w = xmalloc(4 * (size_t)(sh.N * sh.K));
	float *bad = xmalloc(4 * (size_t)(sh.M * sh.N));
	void *xp, *wp, *y;
	int64_t m, n, k;

	ref_fill(x, KS_DTYPE_F32, sh.M * sh.K, 5);
	ref_fill(w, KS_DTYPE_F32, sh.N * sh.K, 6);
	for (m = 0; m < sh.M; m++)
		for (n = 0; n < sh.N; n++) {
			float v[32] = { 0 }, s = 0.0f;
			int l;

			for (k = 0; k < sh.K; k++)
				v[k % 32] = fmaf(x[m * sh.K + k],
				    w[n * sh.K + k], v[k % 32]);
			for (l = 0; l < 32; l++)
				s += v[l];
			bad[m * sh.N + n] = s;
		}
	kt_prog_open(&xpk, ir("gemm_pack_x", KS_DTYPE_F32, KS_DTYPE_F32, xv),
	    NULL);
	kt_prog_open(&wpk, ir("gemm_pack_w", KS_DTYPE_F32, KS_DTYPE_F32, wv),
	    NULL);
	kt_prog_open(&g, ir("gemm_packed", KS_DTYPE_F32, KS_DTYPE_F32, gv),
	    NULL);
	xp = pack_run(&xpk, KS_DTYPE_F32, x, sh.M, sh.K, PM);
	wp = pack_run(&wpk, KS_DTYPE_F32, w, sh.N, sh.K, PN);
	y = packed_run(&g, KS_DTYPE_F32, KS_DTYPE_F32, xp, wp, sh.M, sh.N,
	    sh.K);
	cr_assert_gt(kt_diff("planted sequential sum", y, bad, KS_DTYPE_F32,
	    sh.M * sh.N), 0, "the checker misses a sequential lane sum");
	free(x);
	free(w);
	free(bad);
	free(xp);
	free(wp);
	free(y);
	kt_prog_close(&xpk);
	kt_prog_close(&wpk);
	kt_prog_close(&g);
}

/* The packs' buffer dims in the reply: the loaders check a short
 * panel buffer before a call. */
Test(k_packed, the_panel_buffers_declare_their_padded_dims)
{
	const int64_t dyn[3] = { 0, 0, 0 };
	ks_ir_kernel_t *x = ir("gemm_pack_x", KS_DTYPE_F32, KS_DTYPE_F32, dyn);
	ks_ir_kernel_t *w = ir("gemm_pack_w", KS_DTYPE_BF16, KS_DTYPE_BF16,
	    dyn);
	ks_ir_kernel_t *g = ir("gemm_packed", KS_DTYPE_F32, KS_DTYPE_BF16,
	    dyn);

	cr_assert_str_eq(x->params[1].dims, "(R+7)/8,32,(K+31)/32,8");
	cr_assert_str_eq(w->params[1].dims, "(R+31)/32,32,(K+31)/32,32");
	cr_assert_str_eq(g->params[0].dims, "(M+7)/8,32,(K+31)/32,8");
	cr_assert_str_eq(g->params[1].dims, "(N+31)/32,32,(K+31)/32,32");
	cr_assert_eq(g->params[1].dtype, KS_DTYPE_BF16);
	cr_assert_eq(w->params[1].dtype, KS_DTYPE_BF16);
	ks_ir_free(x);
	ks_ir_free(w);
	ks_ir_free(g);
}

/* A panel buffer past the element limit is refused, naming it. */
Test(k_packed, oversized_panels_are_refused_by_name)
{
	ks_dim_t pw[2] = { { "R", 1, (1 << 20) + 1 }, { "K", 1, 1 << 20 } };
	ks_dim_t gp[3] = { { "M", 1, (1 << 20) + 1 }, { "N", 1, 64 },
	    { "K", 1, 1 << 20 } };
	ks_spec_t spec;
	char err[256];

	cr_assert_eq(ks_kernel_validate(&ks_kernel_gemm_pack_w, KS_DTYPE_F32,
	    KS_MODE_EXACT, pw, 2, &spec, err, sizeof err), KS_E_TOO_LARGE);
	cr_assert(strstr(err, "buffer out") != NULL, "%s", err);
	cr_assert_eq(ks_kernel_validate(&ks_kernel_gemm_packed, KS_DTYPE_F32,
	    KS_MODE_EXACT, gp, 3, &spec, err, sizeof err), KS_E_TOO_LARGE);
	cr_assert(strstr(err, "xp") != NULL, "%s", err);
}

/*
 * The register tile in the code: in ASM (x86-64 assembly), every fma is
 * register to register (an fma with a memory operand is an accumulator
 * kept in memory: a GCC version that does not promote the tile's lane
 * arrays to registers, measured 25% slower) and there are at least MIN
 * of them.  Returns 1, or 0 with the reason in WHY.
 */
static int tile_in_registers(const char *asm_text, int min, char *why,
    size_t n)
{
	const char *p = asm_text;
	int regs = 0;

	while ((p = strstr(p, "vfmadd")) != NULL) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);

		if (memchr(p, '(', len) != NULL) {
			snprintf(why, n, "an fma reads memory: %.*s", (int)len,
			    p);
			return 0;
		}
		regs++;
		p += len;
	}
	if (regs < min) {
		snprintf(why, n, "%d fmas, fewer than %d", regs, min);
		return 0;
	}
	return 1;
}

/* gemm_packed's artifacts at the prefill shapes keep the 8 x 32 tile of
 * each of the 4 x panels in registers (16 fmas each), with the
 * prefetches; f32 and bf16 weights, dims constant and dynamic.  The
 * checker fails on an fma with a memory operand and on too few fmas. */
Test(k_packed, the_register_tile_stays_in_registers)
{
	static const int64_t shapes[][3] = {
		{ 512, 4096, 4096 }, { 512, 4096, 14336 }, { 0, 0, 0 },
	};
	char why[256];
	int s, w;

	cr_assert_not(tile_in_registers("vfmadd231ps %zmm0,%zmm1,%zmm2\n"
	    "vfmadd213ps 0x808(%rsp),%zmm13,%zmm9\n", 1, why, sizeof why),
	    "a memory fma passed");
	cr_assert_not(tile_in_registers("vfmadd231ps %zmm0,%zmm1,%zmm2\n", 2,
	    why, sizeof why), "too few fmas passed");
	for (s = 0; s < 3; s++)
		for (w = 0; w < 2; w++) {
			ks_ir_kernel_t *k = ir("gemm_packed", KS_DTYPE_F32,
			    w ? KS_DTYPE_BF16 : KS_DTYPE_F32, shapes[s]);
			char err[512];
			ks_buf_t b;

			ks_buf_init(&b);
			cr_assert_eq(ks_jit_cpu_assembly(k, "x86-64-v4", &b,
			    err, sizeof err), KS_OK, "%s", err);
			cr_assert(tile_in_registers(b.data, 4 * 16, why,
			    sizeof why), "M=%lld N=%lld K=%lld wdtype %s: %s",
			    (long long)shapes[s][0], (long long)shapes[s][1],
			    (long long)shapes[s][2], w ? "bf16" : "f32", why);
			cr_assert(strstr(b.data, "prefetcht0") != NULL,
			    "no prefetch");
			ks_buf_close(&b);
			ks_ir_free(k);
		}
}
