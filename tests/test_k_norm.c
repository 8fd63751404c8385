/*
 * The row kernels rmsnorm, add_rmsnorm and softmax on the cpu backend and
 * on OpenCL (PoCL here).
 *
 * Every kernel x variant x dtype runs on both backends and is compared
 * with ref/ref_norm.h: bit for bit with the plain-C reference that
 * follows the documented order (softmax on OpenCL: within the stated exp
 * bound, OPENCL_SOFTMAX_ULPS), and within a stated bound of a double
 * precision reference.  row_local is bitwise equal to general at its
 * shape on the same backend; rmsnorm and add_rmsnorm are bitwise equal
 * across cpu and OpenCL; add_rmsnorm is bitwise `res := round(x + res); y
 * := rmsnorm(res)` run as two kernels.  Row lengths 1, 31, 32, 33, 100,
 * 4096 (the guard's edge), 4097 (just past it: general), 4100; every dim
 * dynamic, and constant dims through the library's own selection.  Each
 * checker is shown to catch a planted bug.  Selection, ABI order, shape
 * errors and the point of row_local (one read of the row) are checked on
 * the IR; every variant x dtype compiles with NVRTC where it exists.
 *
 * Compiles are the cost (libgccjit about 0.1 s, PoCL seconds): one
 * program per variant x dtype with the dims dynamic serves every shape;
 * row_local needs its length constant, so it is compiled at a few
 * lengths only.  Tests that need OpenCL skip visibly (cr_skip_test) where
 * no device exists.
 */
#include "cl.h"
#include "kern.h"
#include "../ref/ref_norm.h"

enum { RMS, ADD, SMAX };

static const char *const kind_names[] = { "rmsnorm", "add_rmsnorm",
	"softmax" };

static const ks_kernel_def_t *def_of(int kind)
{
	return kind == RMS ? &ks_kernel_rmsnorm : kind == ADD ?
	    &ks_kernel_add_rmsnorm : &ks_kernel_softmax;
}

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(norm, .init = setup, .timeout = 300);

/* ---- data ---- */

typedef struct {
	int kind;
	ks_dtype_t dt;
	int64_t R, H;           /* H: the row length (L for softmax) */
	float eps;
	size_t es, bytes;       /* element size, bytes of an RxH buffer */
	void *x, *res0, *w;     /* inputs; res0 is res before a launch */
	void *res, *y;          /* outputs of the last run */
	void *want_y, *want_res; /* the canonical reference */
	float *row;             /* reference scratch */
} data_t;

/* Inputs in [-1, 1) (softmax: [-8, 8), a power of two so exact in every
 * dtype), seeded by the shape; the reference outputs. */
static void data_open(data_t *d, int kind, ks_dtype_t dt, int64_t R,
    int64_t H)
{
	uint64_t seed = (uint64_t)(kind * 1000003 + R * 131 + H * 7 + dt);
	int64_t i;

	memset(d, 0, sizeof(*d));
	d->kind = kind;
	d->dt = dt;
	d->R = R;
	d->H = H;
	d->eps = 1e-5f;
	d->es = ks_dtype_size(dt);
	d->bytes = d->es * (size_t)(R * H);
	d->x = malloc(d->bytes);
	d->res0 = malloc(d->bytes);
	d->res = malloc(d->bytes);
	d->y = malloc(d->bytes);
	d->want_y = malloc(d->bytes);
	d->want_res = malloc(d->bytes);
	d->w = malloc(d->es * (size_t)H);
	d->row = malloc(sizeof(float) * (size_t)H);
	cr_assert(d->x && d->res0 && d->res && d->y && d->want_y &&
	    d->want_res && d->w && d->row);
	ref_fill(d->x, (int)dt, R * H, seed);
	ref_fill(d->res0, (int)dt, R * H, seed + 1);
	ref_fill(d->w, (int)dt, H, seed + 2);
	if (kind == SMAX)
		for (i = 0; i < R * H; i++)
			ref_store(d->x, (int)dt, i,
			    ref_load(d->x, (int)dt, i) * 8.0f);
	memcpy(d->want_res, d->res0, d->bytes);
	if (kind == RMS)
		ref_rmsnorm(d->x, d->w, d->want_y, (int)dt, R, H, d->eps,
		    d->row);
	else if (kind == ADD)
		ref_add_rmsnorm(d->x, d->want_res, d->w, d->want_y, (int)dt, R,
		    H, d->eps, d->row);
	else
		ref_softmax(d->x, d->want_y, (int)dt, R, H, d->row);
}

static void data_close(data_t *d)
{
	free(d->x);
	free(d->res0);
	free(d->res);
	free(d->y);
	free(d->want_y);
	free(d->want_res);
	free(d->w);
	free(d->row);
}

/* ---- programs ---- */

typedef kt_prog_t kprog_t;

/* KIND's VARIANT (NULL: the library's selection) for DT at R, H (0:
 * dynamic), compiled for ENV (NULL: the cpu). */
static void kprog_open(kprog_t *p, clenv_t *env, int kind,
    const char *variant, ks_dtype_t dt, int64_t R, int64_t H)
{
	const int64_t vals[2] = { R, H };

	kt_prog_open(p, gpu_kernel_ir(def_of(kind), variant, dt,
	    KS_MODE_EXACT, vals), env);
}

/* Runs P on D's inputs: res starts as res0, y as NaN (never a result). */
static void kprog_run(kprog_t *p, data_t *d)
{
	kt_buf_t bufs[] = {
		{ "x", d->x, d->bytes }, { "res", d->res, d->bytes },
		{ "w", d->w, d->es * (size_t)d->H }, { "y", d->y, d->bytes },
	};
	kt_val_t vals[] = {
		{ "R", d->R, 0 }, { "H", d->H, 0 }, { "L", d->H, 0 },
		{ "eps", 0, d->eps },
	};
	kt_args_t a;

	memcpy(d->res, d->res0, d->bytes);
	memset(d->y, 0xff, d->bytes);
	kt_bind(&a, p->k, bufs, 4, vals, 4);
	kt_prog_run(p, a.args);
}

/* ---- the checkers ---- */

/* Elements of Y (and of res for add_rmsnorm) whose bits differ from
 * WANT_Y (and D's want_res); the first few are logged. */
static int64_t off_ref(const char *who, const data_t *d, const void *want_y)
{
	int64_t bad = kt_diff(who, d->y, want_y, d->dt, d->R * d->H);

	if (d->kind == ADD)
		bad += kt_diff(who, d->res, d->want_res, d->dt, d->R * d->H);
	return bad;
}

/* Absolute slack for a result that is subnormal in the dtype: half the
 * f16 subnormal spacing (2^-25), rounded up; f32 and bf16 results here
 * are never below 2^-126. */
static double abs_slack(ks_dtype_t dt)
{
	return dt == KS_DTYPE_F16 ? 0x1p-24 : 0x1p-126;
}

/*
 * Outputs Y (and RES for add_rmsnorm) of D's inputs that are off the
 * double precision result by more than the bound of the f32 arithmetic,
 * with u = 2^-24, n = ceil(H / 32) lane steps + 5 tree levels, U the unit
 * roundoff of the dtype, all bounds times 1.01 for second-order terms:
 *
 *   rmsnorm: the sum of squares (nonnegative terms) is within n u; mean,
 *     + eps, sqrt (halves it) and 1 / add 3 u; two multiplies 2 u:
 *     |y - exact| <= |exact| ((n / 2 + 6) u + U) + slack.
 *   add_rmsnorm: res within (u + U) of x + res (an f32 add, then the
 *     store), and y as rmsnorm of the stored res (its definition).
 *   softmax: x_j - m is off by at most D u relative to exp's argument, D
 *     = max |x_j - m| of the row, which exp turns into a relative D u;
 *     exp itself EXP_ULPS = 1.01 ulp (2 u each); the sum adds n u, 1 / s and
 *     e * inv 2 u; e_j and s both carry the first two:
 *     |y - exact| <= |exact| ((2 D + 4 EXP_ULPS + n + 2) u + U) + slack.
 */
static int64_t off_f64(const char *who, const data_t *d, const void *y,
    const void *res, double exp_ulps)
{
	int64_t R = d->R, H = d->H, n = (H + 31) / 32 + 5, r, j, bad = 0;
	double U = kt_unit(d->dt), *exact, rel, dmax, got, b;
	int dt = (int)d->dt;

	exact = malloc(sizeof(double) * (size_t)(R * H));
	cr_assert_not_null(exact);
	if (d->kind == ADD) {
		for (j = 0; j < R * H; j++) {
			double h = (double)ref_load(d->x, dt, j) +
			    ref_load(d->res0, dt, j);

			got = ref_load(res, dt, j);
			b = fabs(h) * (0x1p-24 + U) * 1.01 + abs_slack(d->dt);
			if (!(fabs(got - h) <= b) && bad++ < 3)
				cr_log_info("%s: res[%lld] = %.9g, exact %.9g",
				    who, (long long)j, got, h);
		}
	}
	if (d->kind == SMAX)
		ref_softmax_f64(d->x, exact, dt, R, H);
	else
		ref_rmsnorm_f64(d->kind == ADD ? res : d->x, d->w, exact, dt,
		    R, H, d->eps);
	for (r = 0; r < R; r++) {
		if (d->kind == SMAX) {
			double m = -INFINITY;

			for (j = 0; j < H; j++)
				m = fmax(m, ref_load(d->x, dt, r * H + j));
			dmax = 0;
			for (j = 0; j < H; j++)
				dmax = fmax(dmax, m - ref_load(d->x, dt,
				    r * H + j));
			rel = (2 * dmax + 4 * exp_ulps + (double)n + 2) *
			    0x1p-24;
		} else {
			rel = ((double)n / 2 + 6) * 0x1p-24;
		}
		for (j = 0; j < H; j++) {
			double want = exact[r * H + j];

			got = ref_load(y, dt, r * H + j);
			b = fabs(want) * (rel * 1.01 + U) + abs_slack(d->dt);
			if (!(fabs(got - want) <= b) && bad++ < 3)
				cr_log_info("%s: y[%lld][%lld] = %.9g, exact "
				    "%.9g, bound %.3g", who, (long long)r,
				    (long long)j, got, want, b);
		}
	}
	free(exact);
	return bad;
}


/* Runs P on D and checks it: bit for bit against the reference (exp is
 * kspec's own on every backend, docs/ir.md), within off_f64's bound. */
static void check_run(kprog_t *p, data_t *d)
{
	char who[160];
	int64_t bad;

	snprintf(who, sizeof who, "%s %s.%s %s R=%lld H=%lld",
	    p->env ? "opencl" : "cpu", kind_names[d->kind], p->k->variant,
	    ks_dtype_name(d->dt), (long long)d->R, (long long)d->H);
	kprog_run(p, d);
	bad = off_ref(who, d, d->want_y);
	cr_assert_eq(bad, 0, "%s: %lld elements off the canonical reference",
	    who, (long long)bad);
	bad = off_f64(who, d, d->y, d->res, 1.01);
	cr_assert_eq(bad, 0, "%s: %lld elements off the double precision "
	    "bound", who, (long long)bad);
}

/* Saved outputs of a run, to compare another run with. */
typedef struct {
	void *y, *res;
} saved_t;

static void save(saved_t *s, const data_t *d)
{
	s->y = malloc(d->bytes);
	s->res = malloc(d->bytes);
	cr_assert(s->y && s->res);
	memcpy(s->y, d->y, d->bytes);
	memcpy(s->res, d->res, d->bytes);
}

/* Asserts D's last outputs are the bits of S; frees S. */
static void same_as(saved_t *s, const data_t *d, const char *what)
{
	char who[160];

	snprintf(who, sizeof who, "%s %s %s R=%lld H=%lld", what,
	    kind_names[d->kind], ks_dtype_name(d->dt), (long long)d->R,
	    (long long)d->H);
	kt_assert_bitwise(who, d->y, s->y, d->dt, d->R * d->H);
	kt_assert_bitwise(who, d->res, s->res, d->dt, d->R * d->H);
	free(s->y);
	free(s->res);
}

/* ---- the shapes ---- */

/* Row lengths for general (dims dynamic): 1, below, at and above one
 * chunk, a tail, the row_local guard's edge, just past it, a tail past
 * it. */
static const int64_t lengths[] = { 1, 31, 32, 33, 100, 4096, 4097, 4100 };

/* Row lengths compiled for row_local on the cpu (one program each). */
static const int64_t local_lengths[] = { 1, 33, 4096 };

static int64_t rows_for(int64_t H)
{
	return H <= 100 ? 3 : 2;
}

static const ks_dtype_t dtypes[] = {
	KS_DTYPE_F32, KS_DTYPE_F16, KS_DTYPE_BF16,
};

/* ---- cpu ---- */

/*
 * KIND x DT on the cpu: general with R, H dynamic at every length;
 * row_local (R dynamic) at local_lengths, also bitwise general there; the
 * library's choice with R, H constant at 4096 (row_local) and 4097
 * (general), bitwise the dynamic general.
 */
static void cpu_suite(int kind, ks_dtype_t dt)
{
	static const int64_t edge[] = { 4096, 4097 };
	kprog_t gen, p;
	data_t d;
	saved_t s;
	size_t i;

	kprog_open(&gen, NULL, kind, "general", dt, 0, 0);
	for (i = 0; i < sizeof lengths / sizeof *lengths; i++) {
		data_open(&d, kind, dt, rows_for(lengths[i]), lengths[i]);
		check_run(&gen, &d);
		data_close(&d);
	}
	for (i = 0; i < sizeof local_lengths / sizeof *local_lengths; i++) {
		kprog_open(&p, NULL, kind, "row_local", dt, 0,
		    local_lengths[i]);
		data_open(&d, kind, dt, rows_for(local_lengths[i]),
		    local_lengths[i]);
		kprog_run(&gen, &d);
		save(&s, &d);
		check_run(&p, &d);
		same_as(&s, &d, "cpu row_local vs general");
		data_close(&d);
		kt_prog_close(&p);
	}
	for (i = 0; i < sizeof edge / sizeof *edge; i++) {
		kprog_open(&p, NULL, kind, NULL, dt, 2, edge[i]);
		/* rmsnorm and add_rmsnorm keep f32 rows in general (the
		 * local copy was measured slower there). */
		cr_assert_str_eq(p.k->variant, edge[i] <= 4096 &&
		    (kind == SMAX || dt != KS_DTYPE_F32) ? "row_local" :
		    "general");
		data_open(&d, kind, dt, 2, edge[i]);
		kprog_run(&gen, &d);
		save(&s, &d);
		check_run(&p, &d);
		same_as(&s, &d, "cpu selected (constant dims) vs general");
		data_close(&d);
		kt_prog_close(&p);
	}
	kt_prog_close(&gen);
}

#define CPU_TESTS(kind, name) \
	Test(norm, name##_f32_cpu_every_variant_is_bitwise_canonical) \
	{ cpu_suite(kind, KS_DTYPE_F32); } \
	Test(norm, name##_f16_cpu_every_variant_is_bitwise_canonical) \
	{ cpu_suite(kind, KS_DTYPE_F16); } \
	Test(norm, name##_bf16_cpu_every_variant_is_bitwise_canonical) \
	{ cpu_suite(kind, KS_DTYPE_BF16); }

CPU_TESTS(RMS, rmsnorm)
CPU_TESTS(ADD, add_rmsnorm)
CPU_TESTS(SMAX, softmax)

/*
 * add_rmsnorm(x, res) is, bit for bit, two kernels: res := round(x + res)
 * (here in C, one f32 add and one store rounding) and then the rmsnorm
 * kernel on the stored res; both general, on the cpu.
 */
Test(norm, add_rmsnorm_is_residual_add_then_rmsnorm_bitwise)
{
	static const int64_t hs[] = { 33, 4100 };
	kprog_t add, rms;
	data_t d, r;
	size_t i, h;
	int64_t j;

	for (i = 0; i < sizeof dtypes / sizeof *dtypes; i++) {
		kprog_open(&add, NULL, ADD, "general", dtypes[i], 0, 0);
		kprog_open(&rms, NULL, RMS, "general", dtypes[i], 0, 0);
		for (h = 0; h < sizeof hs / sizeof *hs; h++) {
			data_open(&d, ADD, dtypes[i], 3, hs[h]);
			data_open(&r, RMS, dtypes[i], 3, hs[h]);
			memcpy(r.w, d.w, d.es * (size_t)hs[h]);
			for (j = 0; j < d.R * d.H; j++)
				ref_store(r.x, (int)d.dt, j,
				    ref_load(d.x, (int)d.dt, j) +
				    ref_load(d.res0, (int)d.dt, j));
			kprog_run(&add, &d);
			kprog_run(&rms, &r);
			kt_assert_bitwise("add_rmsnorm res vs x + res", d.res,
			    r.x, d.dt, d.R * d.H);
			kt_assert_bitwise("add_rmsnorm y vs rmsnorm(res)", d.y,
			    r.y, d.dt, d.R * d.H);
			data_close(&d);
			data_close(&r);
		}
		kt_prog_close(&add);
		kt_prog_close(&rms);
	}
}

/* ---- OpenCL ---- */

/* The row_local length compiled on OpenCL for each dtype (one program
 * each: PoCL takes seconds per program). */
static int64_t cl_local_length(ks_dtype_t dt)
{
	return dt == KS_DTYPE_F32 ? 4096 : dt == KS_DTYPE_F16 ? 100 : 1;
}

/*
 * KIND x DT on OpenCL: general with R, H dynamic at every length, checked
 * bitwise against the reference and against the cpu backend on the same
 * inputs; row_local (R dynamic) at cl_local_length, bitwise OpenCL's
 * general there.
 */
static void cl_suite(int kind, ks_dtype_t dt)
{
	clenv_t e;
	kprog_t gen, cpu, loc;
	data_t d;
	saved_t s;
	size_t i;
	int64_t H = cl_local_length(dt);

	env_open(&e);
	kprog_open(&gen, &e, kind, "general", dt, 0, 0);
	kprog_open(&cpu, NULL, kind, "general", dt, 0, 0);
	for (i = 0; i < sizeof lengths / sizeof *lengths; i++) {
		data_open(&d, kind, dt, rows_for(lengths[i]), lengths[i]);
		kprog_run(&cpu, &d);
		save(&s, &d);
		check_run(&gen, &d);
		same_as(&s, &d, "opencl vs cpu");
		data_close(&d);
	}
	kprog_open(&loc, &e, kind, "row_local", dt, 0, H);
	data_open(&d, kind, dt, rows_for(H), H);
	kprog_run(&gen, &d);
	save(&s, &d);
	check_run(&loc, &d);
	same_as(&s, &d, "opencl row_local vs general");
	data_close(&d);
	kt_prog_close(&loc);
	kt_prog_close(&cpu);
	kt_prog_close(&gen);
	env_close(&e);
}

#define CL_TESTS(kind, name) \
	Test(norm, name##_f32_opencl_every_variant) \
	{ cl_suite(kind, KS_DTYPE_F32); } \
	Test(norm, name##_f16_opencl_every_variant) \
	{ cl_suite(kind, KS_DTYPE_F16); } \
	Test(norm, name##_bf16_opencl_every_variant) \
	{ cl_suite(kind, KS_DTYPE_BF16); }

CL_TESTS(RMS, rmsnorm)
CL_TESTS(ADD, add_rmsnorm)
CL_TESTS(SMAX, softmax)

/* ---- the checkers catch planted bugs ---- */

enum { BUG_MUL_ORDER, BUG_SEQUENTIAL, BUG_MEAN_H1, BUG_DIV, BUG_NO_TAIL };

/*
 * rmsnorm with one planted bug: BUG_MUL_ORDER y = x * (inv * w);
 * BUG_SEQUENTIAL the lane partials summed left to right instead of the
 * tree; BUG_MEAN_H1 mean = ss / (H - 1).
 */
static void planted_rmsnorm(const data_t *d, void *y, int bug)
{
	int dt = (int)d->dt;
	int64_t r, j, H = d->H;
	float part[32], ss, inv, xv, wv;
	int l;

	for (r = 0; r < d->R; r++) {
		for (l = 0; l < 32; l++)
			part[l] = 0.0f;
		for (j = 0; j < H; j++) {
			xv = ref_load(d->x, dt, r * H + j);
			part[j % 32] = fmaf(xv, xv, part[j % 32]);
		}
		if (bug == BUG_SEQUENTIAL) {
			ss = part[0];
			for (l = 1; l < 32; l++)
				ss = ss + part[l];
		} else {
			ss = ref_tree_sum(part);
		}
		ss = ss / (float)(bug == BUG_MEAN_H1 ? H - 1 : H);
		inv = 1.0f / sqrtf(ss + d->eps);
		for (j = 0; j < H; j++) {
			xv = ref_load(d->x, dt, r * H + j);
			wv = ref_load(d->w, dt, j);
			ref_store(y, dt, r * H + j, bug == BUG_MUL_ORDER ?
			    xv * (inv * wv) : (xv * inv) * wv);
		}
	}
}

/* softmax with one planted bug: BUG_DIV y = e / s; BUG_SEQUENTIAL the
 * lane partials of the sum left to right; BUG_NO_TAIL the sum misses the
 * last partial chunk. */
static void planted_softmax(const data_t *d, void *y, int bug)
{
	int dt = (int)d->dt;
	int64_t r, j, L = d->H, end = bug == BUG_NO_TAIL ? L - L % 32 : L;
	float part[32], m, s;
	int l;

	for (r = 0; r < d->R; r++) {
		for (l = 0; l < 32; l++)
			part[l] = -INFINITY;
		for (j = 0; j < L; j++)
			part[j % 32] = ref_max(part[j % 32],
			    ref_load(d->x, dt, r * L + j));
		m = ref_tree_max(part);
		for (l = 0; l < 32; l++)
			part[l] = 0.0f;
		for (j = 0; j < end; j++)
			part[j % 32] = part[j % 32] +
			    ref_expf(ref_load(d->x, dt, r * L + j) - m);
		if (bug == BUG_SEQUENTIAL) {
			s = part[0];
			for (l = 1; l < 32; l++)
				s = s + part[l];
		} else {
			s = ref_tree_sum(part);
		}
		for (j = 0; j < L; j++) {
			float e = ref_expf(ref_load(d->x, dt, r * L + j) - m);

			ref_store(y, dt, r * L + j, bug == BUG_DIV ? e / s :
			    e * (1.0f / s));
		}
	}
}

/*
 * The bitwise checker tells a wrong multiply order, a wrong reduction
 * order and a division for the reciprocal apart from the kernel's bits in
 * f32 (each changes thousands of the 16 x 4100 outputs here).  In f16 and
 * bf16 such one-f32-ulp slips survive the store rounding only in a
 * handful of elements, or none (measured: 0 to 2 of 65600), so there the
 * checker is shown to report a single output one ulp of the dtype off.
 */
Test(norm, bitwise_checker_catches_a_wrong_order)
{
	kprog_t rms, smax;
	data_t d;
	void *bad;
	size_t i;

	kprog_open(&rms, NULL, RMS, "general", KS_DTYPE_F32, 0, 0);
	data_open(&d, RMS, KS_DTYPE_F32, 16, 4100);
	kprog_run(&rms, &d);
	cr_assert_eq(off_ref("rmsnorm", &d, d.want_y), 0);
	bad = malloc(d.bytes);
	planted_rmsnorm(&d, bad, BUG_MUL_ORDER);
	cr_assert_gt(off_ref("planted x * (inv * w)", &d, bad), 1000,
	    "wrong multiply order not told apart");
	planted_rmsnorm(&d, bad, BUG_SEQUENTIAL);
	cr_assert_gt(off_ref("planted sequential sum", &d, bad), 1000,
	    "sequential lane sum not told apart");
	free(bad);
	data_close(&d);
	kt_prog_close(&rms);

	kprog_open(&smax, NULL, SMAX, "general", KS_DTYPE_F32, 0, 0);
	data_open(&d, SMAX, KS_DTYPE_F32, 16, 4100);
	kprog_run(&smax, &d);
	cr_assert_eq(off_ref("softmax", &d, d.want_y), 0);
	bad = malloc(d.bytes);
	planted_softmax(&d, bad, BUG_DIV);
	cr_assert_gt(off_ref("planted e / s", &d, bad), 1000,
	    "e / s not told apart");
	planted_softmax(&d, bad, BUG_SEQUENTIAL);
	cr_assert_gt(off_ref("planted sequential sum", &d, bad), 1000,
	    "sequential lane sum not told apart");
	free(bad);
	data_close(&d);
	kt_prog_close(&smax);

	for (i = 1; i < sizeof dtypes / sizeof *dtypes; i++) {
		kprog_open(&rms, NULL, ADD, "general", dtypes[i], 0, 0);
		data_open(&d, ADD, dtypes[i], 3, 100);
		kprog_run(&rms, &d);
		cr_assert_eq(off_ref("add_rmsnorm", &d, d.want_y), 0);
		((uint16_t *)d.want_y)[150] ^= 1;
		cr_assert_eq(off_ref("one ulp in y", &d, d.want_y), 1);
		((uint16_t *)d.want_y)[150] ^= 1;
		((uint16_t *)d.want_res)[299] ^= 1;
		cr_assert_eq(off_ref("one ulp in res", &d, d.want_y), 1);
		data_close(&d);
		kt_prog_close(&rms);
	}
}

/* The double precision bound is not vacuous: mean over H - 1 (3% at H =
 * 33) and a sum missing its tail chunk (4 of 100 terms) are reported in
 * every dtype, while the canonical reference passes. */
Test(norm, f64_checker_catches_a_planted_bug)
{
	data_t d;
	void *bad;
	size_t i;

	for (i = 0; i < sizeof dtypes / sizeof *dtypes; i++) {
		data_open(&d, RMS, dtypes[i], 3, 33);
		cr_assert_eq(off_f64("reference", &d, d.want_y, NULL, 1), 0);
		bad = malloc(d.bytes);
		planted_rmsnorm(&d, bad, BUG_MEAN_H1);
		cr_assert_gt(off_f64("planted ss / (H - 1)", &d, bad, NULL, 1),
		    0, "%s: mean over H - 1 passes",
		    ks_dtype_name(dtypes[i]));
		free(bad);
		data_close(&d);

		data_open(&d, SMAX, dtypes[i], 3, 100);
		cr_assert_eq(off_f64("reference", &d, d.want_y, NULL, 1), 0);
		bad = malloc(d.bytes);
		planted_softmax(&d, bad, BUG_NO_TAIL);
		cr_assert_gt(off_f64("planted sum without tail", &d, bad, NULL,
		    1), 0, "%s: sum without its tail passes",
		    ks_dtype_name(dtypes[i]));
		free(bad);
		data_close(&d);
	}
}

/* ---- selection, ABI, shape errors ---- */

static ks_spec_t spec_of(int kind, ks_mode_t mode, int64_t R, int64_t H)
{
	const ks_kernel_def_t *def = def_of(kind);
	ks_dim_t dims[2] = {
		{ def->dims[0], R != 0, R }, { def->dims[1], H != 0, H },
	};
	ks_spec_t spec;
	char err[256];

	cr_assert_eq(ks_kernel_validate(def, KS_DTYPE_BF16, mode, dims, 2,
	    &spec, err, sizeof err), KS_OK, "%s", err);
	return spec;
}

static const char *selected(int kind, ks_mode_t mode, int64_t R, int64_t H)
{
	ks_spec_t spec = spec_of(kind, mode, R, H);

	return def_of(kind)->select(&spec);
}

/* row_local exactly when the row length is a constant <= 4096, whatever
 * R is; fast selects what exact selects; every variant is selected by
 * one of the kernel's fingerprint probes. */
Test(norm, selection_picks_row_local_for_constant_lengths_up_to_4096)
{
	static const int64_t local[] = { 1, 31, 32, 33, 100, 4096 };
	static const int64_t general[] = { 0, 4097, 4100, 8192 };
	int kind, m, seen[2];
	size_t i;

	for (kind = RMS; kind <= SMAX; kind++) {
		const ks_kernel_def_t *def = def_of(kind);

		cr_assert_eq(ks_kernel_find(def->name), def);
		cr_assert_eq(def->nvariants, 2);
		cr_assert_str_eq(def->variants[0], "general");
		cr_assert_str_eq(def->variants[1], "row_local");
		for (m = KS_MODE_EXACT; m <= KS_MODE_FAST; m++) {
			for (i = 0; i < sizeof local / sizeof *local; i++) {
				cr_assert_str_eq(selected(kind, m, 0, local[i]),
				    "row_local", "%s H=%lld", def->name,
				    (long long)local[i]);
				cr_assert_str_eq(selected(kind, m, 7, local[i]),
				    "row_local");
			}
			for (i = 0; i < sizeof general / sizeof *general; i++) {
				cr_assert_str_eq(selected(kind, m, 0,
				    general[i]), "general", "%s H=%lld",
				    def->name, (long long)general[i]);
				cr_assert_str_eq(selected(kind, m, 1,
				    general[i]), "general");
			}
		}
		seen[0] = seen[1] = 0;
		cr_assert_gt(def->nprobes, 0);
		for (i = 0; i < (size_t)def->nprobes; i++) {
			const char *v = selected(kind, KS_MODE_EXACT,
			    def->probes[i][0], def->probes[i][1]);

			seen[strcmp(v, "row_local") == 0] = 1;
		}
		cr_assert(seen[0] && seen[1], "%s: a variant no probe selects",
		    def->name);
	}
}

/* Parameters in ABI order: buffers as listed, dims, then f32 scalars;
 * add_rmsnorm's res is read and written. */
Test(norm, parameters_are_in_abi_order)
{
	static const char *const want[3][7] = {
		{ "x", "w", "y", "R", "H", "eps", NULL },
		{ "x", "res", "w", "y", "R", "H", "eps" },
		{ "x", "y", "R", "L", NULL, NULL, NULL },
	};
	static const int64_t dyn[2] = { 0, 0 };
	int kind, i;

	for (kind = RMS; kind <= SMAX; kind++) {
		ks_ir_kernel_t *k = gpu_kernel_ir(def_of(kind), NULL,
		    KS_DTYPE_F16, KS_MODE_EXACT, dyn);

		for (i = 0; i < 7 && want[kind][i] != NULL; i++) {
			const ks_ir_param_t *p = &k->params[i];

			cr_assert_str_eq(p->name, want[kind][i]);
			if (p->kind == KS_PARAM_BUFFER) {
				int acc = strcmp(p->name, "res") == 0 ?
				    KS_ACCESS_READ | KS_ACCESS_WRITE :
				    strcmp(p->name, "y") == 0 ?
				    KS_ACCESS_WRITE : KS_ACCESS_READ;

				cr_assert_eq(p->dtype, KS_DTYPE_F16);
				cr_assert_eq(p->access, acc, "%s", p->name);
			} else {
				cr_assert_eq(p->type, strcmp(p->name, "eps") ==
				    0 ? KS_TY_F32 : KS_TY_I64);
			}
		}
		cr_assert_eq(k->nparams, i);
		cr_assert_str_eq(k->variant, "general");
		cr_assert_eq(k->nlanes, 32);
		ks_ir_free(k);
	}
}

/* Counts loads of buffer parameter `param` and exp nodes. */
typedef struct {
	int param, loads, exps;
} count_t;

static ks_expr_t *count_expr(void *ctx, ks_ir_kernel_t *k, ks_expr_t *e,
    int in_lanes)
{
	count_t *c = ctx;

	(void)k;
	(void)in_lanes;
	c->loads += e->kind == KS_X_LOAD && e->param == c->param;
	c->exps += e->kind == KS_X_UN && e->un == KS_UN_EXP;
	return e;
}

static count_t count(ks_ir_kernel_t *k, const char *buffer)
{
	count_t c = { -1, 0, 0 };
	ks_ir_visitor_t v = { &c, count_expr, NULL };
	int i;

	for (i = 0; i < k->nparams; i++)
		if (strcmp(k->params[i].name, buffer) == 0)
			c.param = i;
	ks_ir_walk(k, &v);
	return c;
}

/* The point of row_local: at H = 4096 (no tail) general reads x (for
 * add_rmsnorm res) in both passes and softmax computes exp twice;
 * row_local reads it once and computes exp once, from a local array of
 * the row's length. */
Test(norm, row_local_reads_the_row_once)
{
	static const int64_t shape[2] = { 0, 4096 };
	static const char *const buf[3] = { "x", "res", "x" };
	ks_ir_kernel_t *g, *l;
	count_t cg, cl;
	int kind;

	for (kind = RMS; kind <= SMAX; kind++) {
		g = gpu_kernel_ir(def_of(kind), "general", KS_DTYPE_F32,
		    KS_MODE_EXACT, shape);
		l = gpu_kernel_ir(def_of(kind), "row_local", KS_DTYPE_F32,
		    KS_MODE_EXACT, shape);
		cg = count(g, buf[kind]);
		cl = count(l, buf[kind]);
		cr_assert_eq(l->nlocals, 1);
		cr_assert_eq(l->locals[0].nelems, 4096);
		cr_assert_eq(g->nlocals, 0);
		/* add_rmsnorm: the add's load and the load back of res. */
		cr_assert_eq(cl.loads, kind == ADD ? 2 : 1, "%s",
		    kind_names[kind]);
		cr_assert_eq(cg.loads, kind == ADD ? 3 : kind == SMAX ? 3 : 2,
		    "%s", kind_names[kind]);
		cr_assert_eq(cl.exps, kind == SMAX ? 1 : 0);
		cr_assert_eq(cg.exps, kind == SMAX ? 2 : 0);
		ks_ir_free(g);
		ks_ir_free(l);
	}
}

/* Bad constant shapes are refused by validation with the reason; a
 * forced row_local outside its guard builds nothing. */
Test(norm, bad_shapes_are_rejected_with_a_clear_error)
{
	int kind;

	for (kind = RMS; kind <= SMAX; kind++) {
		const ks_kernel_def_t *def = def_of(kind);
		const char *h = def->dims[1];
		ks_dim_t dims[2];
		ks_spec_t spec;
		ks_ir_kernel_t *k = NULL;
		char err[256], want[64];

		dims[0] = (ks_dim_t){ "R", 1, 0 };
		dims[1] = (ks_dim_t){ h, 1, 64 };
		cr_assert_eq(ks_kernel_validate(def, KS_DTYPE_F32,
		    KS_MODE_EXACT, dims, 2, &spec, err, sizeof err),
		    KS_E_BAD_SHAPE);
		cr_assert_str_eq(err, "R must be >= 1 (got 0)");
		dims[0] = (ks_dim_t){ "R", 1, 4 };
		dims[1] = (ks_dim_t){ h, 1, -3 };
		cr_assert_eq(ks_kernel_validate(def, KS_DTYPE_F32,
		    KS_MODE_EXACT, dims, 2, &spec, err, sizeof err),
		    KS_E_BAD_SHAPE);
		snprintf(want, sizeof want, "%s must be >= 1 (got -3)", h);
		cr_assert_str_eq(err, want);
		dims[0] = (ks_dim_t){ "R", 1, KS_MAX_DIM };
		dims[1] = (ks_dim_t){ h, 1, KS_MAX_DIM };
		cr_assert_eq(ks_kernel_validate(def, KS_DTYPE_F32,
		    KS_MODE_EXACT, dims, 2, &spec, err, sizeof err),
		    KS_E_TOO_LARGE);
		snprintf(want, sizeof want, "buffer x of R*%s = ", h);
		cr_assert(strncmp(err, want, strlen(want)) == 0, "%s", err);
		dims[1] = (ks_dim_t){ h, 1, 4097 };
		dims[0] = (ks_dim_t){ "R", 1, KS_MAX_ELEMS / 4097 + 1 };
		cr_assert_eq(ks_kernel_validate(def, KS_DTYPE_F32,
		    KS_MODE_EXACT, dims, 2, &spec, err, sizeof err),
		    KS_E_TOO_LARGE, "%s", err);
		dims[0].value = KS_MAX_ELEMS / 4097;
		cr_assert_eq(ks_kernel_validate(def, KS_DTYPE_F32,
		    KS_MODE_EXACT, dims, 2, &spec, err, sizeof err), KS_OK);
		cr_assert_eq(def->check(&spec, err, sizeof err), KS_OK);
		cr_assert_null(def->build(&spec, "row_local"));
		cr_assert_null(def->build(&spec, "nonesuch"));
		dims[1] = (ks_dim_t){ h, 0, 0 };
		cr_assert_eq(ks_kernel_validate(def, KS_DTYPE_F32,
		    KS_MODE_EXACT, dims, 2, &spec, err, sizeof err), KS_OK);
		cr_assert_null(def->build(&spec, "row_local"));
		k = def->build(&spec, "general");
		cr_assert_not_null(k);
		ks_ir_free(k);
	}
}

/* ---- cuda ---- */

/* Every variant x dtype compiles with NVRTC to PTX for sm_90 (no GPU
 * here to run it; bench/gpu runs kernels where one is lent). */
Test(norm, every_variant_compiles_for_cuda)
{
	static const int64_t shapes[2][2] = { { 0, 0 }, { 0, 4096 } };
	static const char *const variants[2] = { "general", "row_local" };
	ks_jit_artifact_t a;
	char err[8192];
	int kind, v;
	size_t i;

	if (ks_backend_cuda.available(err, sizeof err) != KS_OK)
		cr_skip_test("NVRTC not available: %s", err);
	for (kind = RMS; kind <= SMAX; kind++)
		for (v = 0; v < 2; v++)
			for (i = 0; i < sizeof dtypes / sizeof *dtypes; i++) {
				ks_ir_kernel_t *k = gpu_kernel_ir(def_of(kind),
				    variants[v], dtypes[i], KS_MODE_EXACT,
				    shapes[v]);

				cr_assert_eq(ks_backend_cuda.compile(k, "sm_90",
				    "ptx", &a, err, sizeof err), KS_OK,
				    "%s.%s %s: %s", kind_names[kind],
				    variants[v], ks_dtype_name(dtypes[i]), err);
				cr_assert_gt(a.len, 0);
				ks_jit_artifact_close(&a);
				ks_ir_free(k);
			}
}
