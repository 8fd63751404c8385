/*
 * Mixed precision (docs/kernels.md, "Mixed precision"): the kernels that
 * take a weight dtype (the request's wdtype) beside their dtype, on the
 * cpu backend and on OpenCL (PoCL here).
 *
 * For every kernel x variant x mixed pair (gemm, rmsnorm and add_rmsnorm at
 * dtype f32 with f16 and bf16 weights; rope at f16 and bf16 with an f32
 * table) and both backends, at shapes with and without a tail chunk:
 *
 *   - bit for bit equal to the plain-C reference of ref/ (ref_kernel_mixed,
 *     written from the documented order, each buffer in its own dtype);
 *   - within a stated bound of a double-precision reference;
 *   - a specialized variant bit for bit equal to `general` at its shape;
 *   - gemm and the norms bit for bit equal to the plain f32 kernel run on
 *     the weights widened to f32 (the identity the contract promises).
 *
 * Both checkers are shown to catch a planted bug: a reference that reads
 * the weights wrong (each weight one ulp of its dtype off, or rope's f32
 * table read at the activation's precision).  Selection, validation
 * errors and the buffers' dtypes in the IR are checked without a compile.
 *
 * Compiles are the cost: one `general` program per kernel x pair with
 * every dim dynamic serves each shape; a specialized variant is compiled
 * at its one shape.
 */
#include "cl.h"
#include "kern.h"
#include "../ref/kernels.h"

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(mixed, .init = setup, .timeout = 300);

/* ---- the cases ---- */

/* A shape of a kernel, dims in declared order; VARIANT, when not
 * "general", is compiled with every dim constant. */
typedef struct {
	const char *kernel;
	const char *variant;
	int64_t dims[KS_MAX_DIMS];
} mcase_t;

static const mcase_t cases[] = {
	{ "gemm", "general", { 5, 37, 100 } },
	{ "gemm", "general", { 2, 9, 64 } },           /* no tail chunk */
	{ "gemm", "gemv_m1", { 1, 37, 100 } },
	{ "gemm", "small_m", { 3, 37, 100 } },
	{ "gemm", "blocked", { 9, 37, 100 } },
	{ "rmsnorm", "general", { 3, 100 } },
	{ "rmsnorm", "general", { 2, 64 } },
	{ "rmsnorm", "row_local", { 3, 100 } },
	{ "add_rmsnorm", "general", { 3, 100 } },
	{ "add_rmsnorm", "general", { 2, 64 } },
	{ "add_rmsnorm", "row_local", { 3, 100 } },
	{ "rope", "general", { 3, 4, 16, 8 } },
	{ "rope", "general", { 2, 3, 70, 5 } },        /* a tail chunk */
};

#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* The mixed pairs of DEF (dtype, wdtype), dtype != wdtype. */
static int mixed_pairs(const ks_kernel_def_t *def, ks_dtype_t (*out)[2])
{
	int d, w, n = 0;

	for (d = 0; d < KS_DTYPE_COUNT; d++)
		for (w = 0; w < KS_DTYPE_COUNT; w++)
			if (d != w && ks_kernel_wdtype_ok(def, (ks_dtype_t)d,
			    (ks_dtype_t)w)) {
				out[n][0] = (ks_dtype_t)d;
				out[n][1] = (ks_dtype_t)w;
				n++;
			}
	return n;
}

/* The IR of DEF's VARIANT at dtype DT and weight dtype WDT, dim i a
 * constant VALS[i] or dynamic (0). */
static ks_ir_kernel_t *mixed_ir(const ks_kernel_def_t *def,
    const char *variant, ks_dtype_t dt, ks_dtype_t wdt, const int64_t *vals)
{
	ks_dim_t dims[KS_MAX_DIMS];
	ks_spec_t spec;
	ks_ir_kernel_t *k = NULL;
	char err[512];
	int i;

	for (i = 0; i < def->ndims; i++)
		dims[i] = (ks_dim_t){ def->dims[i], vals[i] != 0, vals[i] };
	cr_assert_eq(ks_kernel_validate_mixed(def, dt, wdt, KS_MODE_EXACT,
	    dims, def->ndims, &spec, err, sizeof err), KS_OK, "%s", err);
	cr_assert_eq(ks_specialize_variant(&spec, variant, &k, err,
	    sizeof err), KS_OK, "%s.%s: %s", def->name, variant, err);
	return k;
}

/* ---- data and runs ---- */

typedef struct {
	const ks_kernel_def_t *def;
	const int64_t *v;       /* dims, declared order */
	ks_dtype_t dt, wdt;
	buf_t in[LAY_MAXB];     /* the inputs, as filled */
	int nb;
} mdata_t;

static void data_open(mdata_t *d, const ks_kernel_def_t *def,
    const int64_t *v, ks_dtype_t dt, ks_dtype_t wdt)
{
	memset(d, 0, sizeof *d);
	d->def = def;
	d->v = v;
	d->dt = dt;
	d->wdt = wdt;
	d->nb = layout(def, v, d->in);
	lay_fill_mixed(def, v, d->in, d->nb, dt, wdt, 11 + (uint64_t)v[0]);
}

static void bufs_free(buf_t *b, int nb)
{
	int i;

	for (i = 0; i < nb; i++)
		free(b[i].data);
}

static void data_close(mdata_t *d)
{
	bufs_free(d->in, d->nb);
}

/* Copies D's inputs into OUT (written-only buffers as all ones, a NaN in
 * every dtype), in dtype DT with weights in WDT (converted exactly, or
 * rounded when narrower). */
static void copy_in(const mdata_t *d, buf_t *out, ks_dtype_t dt,
    ks_dtype_t wdt)
{
	int i;
	int64_t j;

	for (i = 0; i < d->nb; i++) {
		const buf_t *b = &d->in[i];
		ks_dtype_t from = lay_dtype(b, d->dt, d->wdt);
		ks_dtype_t to = lay_dtype(b, dt, wdt);
		size_t n = lay_size(b, dt, wdt);

		out[i] = *b;
		out[i].data = malloc(n ? n : 1);
		cr_assert_not_null(out[i].data);
		if (b->i32 || from == to)
			memcpy(out[i].data, b->data, n);
		else
			for (j = 0; j < b->elems; j++)
				ref_store(out[i].data, (int)to, j,
				    ref_load(b->data, (int)from, j));
		if (b->written && strcmp(b->name, "x") != 0 &&
		    strcmp(b->name, "res") != 0)
			memset(out[i].data, 0xff, n);
	}
}

/* Runs P (of D's kernel at dtype DT, weights WDT) on B in place. */
static void run_on(kt_prog_t *p, const mdata_t *d, buf_t *b, ks_dtype_t dt,
    ks_dtype_t wdt)
{
	gpu_arg_t args[KT_MAX_PARAMS];
	int64_t i64[KT_MAX_PARAMS];
	float f32[KT_MAX_PARAMS];
	int i, j;

	for (i = 0; i < p->k->nparams; i++) {
		const ks_ir_param_t *pa = &p->k->params[i];

		args[i] = (gpu_arg_t){ NULL, 0 };
		if (pa->kind == KS_PARAM_BUFFER) {
			for (j = 0; j < d->nb && strcmp(b[j].name, pa->name);
			    j++)
				;
			cr_assert_lt(j, d->nb, "no buffer %s", pa->name);
			cr_assert_eq(pa->dtype, b[j].i32 ? KS_DTYPE_F32 :
			    lay_dtype(&b[j], dt, wdt), "%s: dtype of %s",
			    p->k->name, pa->name);
			args[i] = (gpu_arg_t){ b[j].data, lay_size(&b[j], dt,
			    wdt) };
			continue;
		}
		if (pa->bound)
			continue;
		f32[i] = 1e-5f;
		i64[i] = strcmp(pa->name, "eps") ? dim(d->def, d->v,
		    pa->name) : 0;
		args[i].data = pa->type == KS_TY_F32 ? (void *)&f32[i] :
		    (void *)&i64[i];
		args[i].bytes = pa->type == KS_TY_F32 ? 4 : 8;
	}
	kt_prog_run(p, args);
}

/* Elements of the written buffers of GOT and WANT that differ. */
static int64_t diff_written(const char *who, const mdata_t *d,
    const buf_t *got, const buf_t *want)
{
	int64_t bad = 0;
	int i;

	for (i = 0; i < d->nb; i++)
		if (got[i].written)
			bad += kt_diff(who, got[i].data, want[i].data,
			    lay_dtype(&got[i], d->dt, d->wdt), got[i].elems);
	return bad;
}

/* ---- the double-precision bound ---- */

/*
 * Elements of the written buffers of GOT outside the bound of the exact
 * result of its inputs (the loaded values, each in its own dtype), in
 * double: with u = 2^-24 and U the unit roundoff of the stored dtype,
 *   gemm:     |y - y64| <= (ceil(K/32) + 6) u sum_k |x W| + U |y64|
 *             (32 lane sums of ceil(K/32) fmas, a 5-level tree, a store);
 *   rmsnorm:  |y - y64| <= ((ceil(H/32) + 6) / 2 + 4) u |y64| + U |y64|
 *             (the sum of squares relative as gemm's, halved by the
 *             square root, then mean, sqrt, divide and two multiplies);
 *   add_rmsnorm: res as one rounding of x + res0 (U), y as rmsnorm of the
 *             stored res;
 *   rope:     |y - y64| <= 3 u (|x0 c| + |x1 s|) + U |y64|.
 */
static int64_t out_of_bound(const mdata_t *d, const buf_t *got)
{
	const ks_kernel_def_t *def = d->def;
	const char *n = def->name;
	int dt = (int)d->dt, wdt = (int)d->wdt;
	double u = 0x1p-24, U = kt_unit(d->dt), *y64, *mag = NULL, c;
	int64_t i, ny, bad = 0;
	size_t nalloc;
	buf_t *in = (buf_t *)d->in, *gb = (buf_t *)got;
	const void *x = ref_buf(in, d->nb, "x");

	if (strcmp(n, "gemm") == 0) {
		int64_t M = dim(def, d->v, "M"), N = dim(def, d->v, "N");
		int64_t K = dim(def, d->v, "K"), m, nn, k;
		const void *W = ref_buf(in, d->nb, "W");

		ny = M * N;
		nalloc = ny > 0 ? (size_t)ny : 1;
		y64 = calloc(nalloc, sizeof *y64);
		mag = calloc(nalloc, sizeof *mag);
		ref_gemm_f64_mixed(x, W, y64, dt, wdt, M, N, K);
		for (m = 0; m < M; m++)
			for (nn = 0; nn < N; nn++)
				for (k = 0; k < K; k++)
					mag[m * N + nn] += fabs((double)ref_load(
					    x, dt, m * K + k) * ref_load(W, wdt,
					    nn * K + k));
		c = (double)((K + 31) / 32 + 6) * u;
		for (i = 0; i < ny; i++)
			mag[i] *= c;
	} else if (strcmp(n, "rope") == 0) {
		int64_t T = dim(def, d->v, "T"), Hn = dim(def, d->v, "Hn");
		int64_t D = dim(def, d->v, "D"), P = dim(def, d->v, "P");
		int64_t t, h, half = D / 2;
		const int32_t *pos = ref_buf(in, d->nb, "pos");
		const void *cs = ref_buf(in, d->nb, "cs");

		ny = T * Hn * D;
		nalloc = ny > 0 ? (size_t)ny : 1;
		y64 = calloc(nalloc, sizeof *y64);
		mag = calloc(nalloc, sizeof *mag);
		ref_rope_f64_mixed(x, pos, cs, dt, wdt, T, Hn, D, P, y64);
		for (t = 0; t < T; t++)
			for (h = 0; h < Hn && pos[t] >= 0 && pos[t] < P; h++)
				for (i = 0; i < half; i++) {
					int64_t o = (t * Hn + h) * D, p = pos[t];
					double m = fabs((double)ref_load(x, dt,
					    o + i)) * fabs((double)ref_load(cs,
					    wdt, p * D + i)) + fabs((double)
					    ref_load(x, dt, o + half + i)) *
					    fabs((double)ref_load(cs, wdt,
					    p * D + half + i));

					mag[o + i] = mag[o + half + i] =
					    3 * u * m;
				}
	} else {
		int64_t R = dim(def, d->v, "R"), H = dim(def, d->v, "H");
		const void *w = ref_buf(in, d->nb, "w");
		const void *src = x;

		ny = R * H;
		if (n[0] == 'a') {
			const void *res0 = ref_buf(in, d->nb, "res");
			const void *res = ref_buf(gb, d->nb, "res");

			for (i = 0; i < ny; i++) {
				double e = (double)ref_load(x, dt, i) +
				    ref_load(res0, dt, i);

				bad += fabs(ref_load(res, dt, i) - e) >
				    U * fabs(e);
			}
			src = res;
		}
		nalloc = ny > 0 ? (size_t)ny : 1;
		y64 = calloc(nalloc, sizeof *y64);
		mag = calloc(nalloc, sizeof *mag);
		ref_rmsnorm_f64_mixed(src, w, y64, dt, wdt, R, H, 1e-5f);
		c = ((double)((H + 31) / 32 + 6) / 2 + 4) * u;
		for (i = 0; i < ny; i++)
			mag[i] = c * fabs(y64[i]);
	}
	{
		const void *y = ref_buf(gb, d->nb, n[0] == 'r' && n[1] == 'o' ?
		    "x" : "y");

		for (i = 0; i < ny; i++) {
			double e = fabs(ref_load(y, dt, i) - y64[i]);

			if (e > mag[i] + U * fabs(y64[i]) && bad++ < 3)
				cr_log_info("%s: [%lld] = %.9g, f64 %.9g, "
				    "bound %.3g", n, (long long)i,
				    (double)ref_load(y, dt, i), y64[i],
				    mag[i] + U * fabs(y64[i]));
		}
	}
	free(y64);
	free(mag);
	return bad;
}

/* ---- every kernel x variant x pair ---- */

static void check_all(clenv_t *env)
{
	const char *be = env ? "opencl" : "cpu";
	static const char *const kernels[] = { "gemm", "rmsnorm",
	    "add_rmsnorm", "rope" };
	int64_t zero[KS_MAX_DIMS] = { 0 };
	size_t ki;
	int c, p, np, runs = 0;

	for (ki = 0; ki < sizeof kernels / sizeof *kernels; ki++) {
		const ks_kernel_def_t *def = ks_kernel_find(kernels[ki]);
		ks_dtype_t pr[KS_DTYPE_COUNT * KS_DTYPE_COUNT][2];
		kt_prog_t gen, f32;
		int identity = def->wmix == KS_WMIX_NARROW;

		np = mixed_pairs(def, pr);
		cr_assert_eq(np, 2, "%s: mixed pairs", def->name);
		if (identity)
			kt_prog_open(&f32, mixed_ir(def, "general",
			    KS_DTYPE_F32, KS_DTYPE_F32, zero), env);
		for (p = 0; p < np; p++) {
			ks_dtype_t dt = pr[p][0], wdt = pr[p][1];

			kt_prog_open(&gen, mixed_ir(def, "general", dt, wdt,
			    zero), env);
			for (c = 0; c < NCASES; c++) {
				const mcase_t *mc = &cases[c];
				buf_t got[LAY_MAXB], want[LAY_MAXB];
				buf_t g2[LAY_MAXB], wide[LAY_MAXB];
				char who[128];
				mdata_t d;

				if (strcmp(mc->kernel, def->name))
					continue;
				snprintf(who, sizeof who, "%s %s.%s %s/w%s",
				    be, def->name, mc->variant,
				    ks_dtype_name(dt), ks_dtype_name(wdt));
				data_open(&d, def, mc->dims, dt, wdt);
				copy_in(&d, got, dt, wdt);
				copy_in(&d, want, dt, wdt);
				ref_kernel_mixed(def, dt, wdt, mc->dims, want,
				    d.nb);
				if (strcmp(mc->variant, "general") == 0) {
					run_on(&gen, &d, got, dt, wdt);
				} else {
					kt_prog_t sp;

					kt_prog_open(&sp, mixed_ir(def,
					    mc->variant, dt, wdt, mc->dims),
					    env);
					run_on(&sp, &d, got, dt, wdt);
					kt_prog_close(&sp);
					copy_in(&d, g2, dt, wdt);
					run_on(&gen, &d, g2, dt, wdt);
					cr_assert_eq(diff_written(who, &d, got,
					    g2), 0, "%s: differs from general",
					    who);
					bufs_free(g2, d.nb);
				}
				cr_assert_eq(diff_written(who, &d, got, want),
				    0, "%s: differs from the reference", who);
				cr_assert_eq(out_of_bound(&d, got), 0,
				    "%s: outside the f64 bound", who);
				if (identity) {
					/* The f32 kernel on widened weights. */
					copy_in(&d, wide, KS_DTYPE_F32,
					    KS_DTYPE_F32);
					run_on(&f32, &d, wide, KS_DTYPE_F32,
					    KS_DTYPE_F32);
					cr_assert_eq(diff_written(who, &d, got,
					    wide), 0, "%s: differs from f32 on "
					    "widened weights", who);
					bufs_free(wide, d.nb);
				}
				bufs_free(got, d.nb);
				bufs_free(want, d.nb);
				data_close(&d);
				runs++;
			}
			kt_prog_close(&gen);
		}
		if (identity)
			kt_prog_close(&f32);
	}
	cr_assert_eq(runs, 2 * NCASES);
	cr_log_info("%s: %d mixed runs equal to the reference", be, runs);
}

Test(mixed, every_kernel_variant_and_pair_on_cpu_is_the_reference)
{
	check_all(NULL);
}

Test(mixed, every_kernel_variant_and_pair_on_opencl_is_the_reference)
{
	clenv_t env;

	env_open(&env);
	check_all(&env);
	env_close(&env);
}

/* ---- the checkers catch a planted bug ---- */

/*
 * A reference that reads the weights wrong: gemm's and the norms' narrow
 * weights one ulp of their dtype off (the lowest bit flipped), rope's f32
 * table rounded to the activation dtype (a table read at the
 * activations' precision).  The bitwise checker and (for the narrow
 * weights, whose error is far above the arithmetic's) the f64 bound both
 * see it.
 */
static void plant(void *wbuf, ks_dtype_t dt, ks_dtype_t wdt, int64_t j)
{
	float v;

	if (wdt != KS_DTYPE_F32) {
		((uint16_t *)wbuf)[j] ^= 1;
		return;
	}
	v = ref_load(wbuf, (int)wdt, j);
	v = dt == KS_DTYPE_F16 ? ref_f16_to_f32(ref_f32_to_f16(v)) :
	    ref_bf16_to_f32(ref_f32_to_bf16(v));
	ref_store(wbuf, (int)wdt, j, v);
}

Test(mixed, the_checkers_catch_weights_read_wrong)
{
	static const char *const kernels[] = { "gemm", "rmsnorm",
	    "add_rmsnorm", "rope" };
	size_t ki;
	int c, i;
	int64_t j;

	for (ki = 0; ki < sizeof kernels / sizeof *kernels; ki++) {
		const ks_kernel_def_t *def = ks_kernel_find(kernels[ki]);
		ks_dtype_t pr[KS_DTYPE_COUNT * KS_DTYPE_COUNT][2];
		int np = mixed_pairs(def, pr), p;

		for (p = 0; p < np; p++) {
			ks_dtype_t dt = pr[p][0], wdt = pr[p][1];

			for (c = 0; c < NCASES; c++) {
				buf_t good[LAY_MAXB], bad[LAY_MAXB];
				mdata_t d;

				if (strcmp(cases[c].kernel, def->name) ||
				    strcmp(cases[c].variant, "general"))
					continue;
				data_open(&d, def, cases[c].dims, dt, wdt);
				copy_in(&d, good, dt, wdt);
				copy_in(&d, bad, dt, wdt);
				for (i = 0; i < d.nb; i++) {
					if (!bad[i].weight)
						continue;
					for (j = 0; j < bad[i].elems; j++)
						plant(bad[i].data, dt, wdt, j);
				}
				ref_kernel_mixed(def, dt, wdt, cases[c].dims,
				    good, d.nb);
				ref_kernel_mixed(def, dt, wdt, cases[c].dims,
				    bad, d.nb);
				cr_assert_gt(diff_written("planted", &d, bad,
				    good), 0, "%s %s/w%s: the bitwise checker "
				    "misses the planted bug", def->name,
				    ks_dtype_name(dt), ks_dtype_name(wdt));
				cr_assert_eq(out_of_bound(&d, good), 0);
				if (def->wmix == KS_WMIX_NARROW) {
					/* The bound judges against the true
					 * inputs, the planted output read
					 * different weights. */
					cr_assert_gt(out_of_bound(&d, bad), 0,
					    "%s %s/w%s: the bound misses the "
					    "planted bug", def->name,
					    ks_dtype_name(dt),
					    ks_dtype_name(wdt));
				}
				bufs_free(good, d.nb);
				bufs_free(bad, d.nb);
				data_close(&d);
			}
		}
	}
}

/* ---- without a compile ---- */

Test(mixed, pairs_validation_and_buffer_dtypes)
{
	const ks_kernel_def_t *const *all;
	ks_dim_t gd[3] = { { "M", 1, 1 }, { "N", 1, 64 }, { "K", 1, 64 } };
	ks_spec_t spec;
	ks_ir_kernel_t *k;
	char err[256];
	int i, n, d, w;

	/* Exactly these kernels take a distinct weight dtype. */
	all = ks_kernels(&n);
	for (i = 0; i < n; i++) {
		int mixed = 0;

		for (d = 0; d < KS_DTYPE_COUNT; d++)
			for (w = 0; w < KS_DTYPE_COUNT; w++)
				mixed += d != w && ks_kernel_wdtype_ok(all[i],
				    (ks_dtype_t)d, (ks_dtype_t)w);
		cr_assert_eq(mixed, strcmp(all[i]->name, "gemm") == 0 ||
		    strcmp(all[i]->name, "gemm_packed") == 0 ||
		    strcmp(all[i]->name, "rmsnorm") == 0 ||
		    strcmp(all[i]->name, "add_rmsnorm") == 0 ||
		    strcmp(all[i]->name, "rope") == 0 ||
		    strcmp(all[i]->name, "embedding") == 0 ||
		    strcmp(all[i]->name, "kv_append_rope") == 0 ? 2 : 0, "%s",
		    all[i]->name);
	}
	/* A pair the kernel does not take is E_BAD_DTYPE naming wdtype. */
	cr_assert_eq(ks_kernel_validate_mixed(&ks_kernel_gemm, KS_DTYPE_BF16,
	    KS_DTYPE_F16, KS_MODE_EXACT, gd, 3, &spec, err, sizeof err),
	    KS_E_BAD_DTYPE);
	cr_assert(strstr(err, "wdtype") != NULL, "%s", err);
	cr_assert_eq(ks_kernel_validate_mixed(&ks_kernel_gemm, KS_DTYPE_BF16,
	    KS_DTYPE_F32, KS_MODE_EXACT, gd, 3, &spec, err, sizeof err),
	    KS_E_BAD_DTYPE);
	cr_assert_eq(ks_kernel_validate_mixed(&ks_kernel_softmax,
	    KS_DTYPE_F32, KS_DTYPE_BF16, KS_MODE_EXACT, (ks_dim_t[]){
	    { "R", 1, 2 }, { "L", 1, 8 } }, 2, &spec, err, sizeof err),
	    KS_E_BAD_DTYPE);
	cr_assert(strstr(err, "wdtype") != NULL, "%s", err);
	/* Plain validation gives wdtype = dtype. */
	cr_assert_eq(ks_kernel_validate(&ks_kernel_gemm, KS_DTYPE_BF16,
	    KS_MODE_EXACT, gd, 3, &spec, err, sizeof err), KS_OK);
	cr_assert_eq(spec.wdtype, KS_DTYPE_BF16);
	/* gemv_m1 with bf16 W: x and y f32, W bf16, the same selection. */
	cr_assert_eq(ks_kernel_validate_mixed(&ks_kernel_gemm, KS_DTYPE_F32,
	    KS_DTYPE_BF16, KS_MODE_EXACT, gd, 3, &spec, err, sizeof err),
	    KS_OK);
	cr_assert_str_eq(ks_kernel_gemm.select(&spec), "gemv_m1");
	cr_assert_eq(ks_specialize(&spec, &k, err, sizeof err), KS_OK);
	cr_assert_eq(k->params[0].dtype, KS_DTYPE_F32);
	cr_assert_eq(k->params[1].dtype, KS_DTYPE_BF16);
	cr_assert_str_eq(k->params[1].name, "W");
	cr_assert_eq(k->params[2].dtype, KS_DTYPE_F32);
	ks_ir_free(k);
}
