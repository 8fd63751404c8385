/*
 * The glue kernels (embedding, argmax, kv_append_rope) on the cpu backend
 * and on OpenCL (PoCL here; skipped visibly without a device), against the
 * plain-C references of ref/ref_glue.h, every variant x dtype:
 *
 *   - embedding: bitwise the reference (a copy: the value itself) with the
 *     dims dynamic and with H bound (a multiple of 256: no guard left);
 *     ids -1, V, INT32_MIN, INT32_MAX give rows of +0.0 and read nothing
 *     outside the table (NaN after it); nothing written after y.
 *   - argmax: bitwise the reference; ties (the lowest index wins, across
 *     lanes and chunks), -0 and +0 tie, NaN ignored, an all-NaN row -1, a
 *     row of -inf 0, N = 1, 31, 32, 33, 100, 1000.
 *   - kv_append_rope: bitwise the reference and bitwise rope (the kernel)
 *     on the step's k followed by a copy; within rope's f64 bound; tokens
 *     at positions -1, S, P write nothing; slots other than the step's keep
 *     their contents; an odd dynamic D copies the last column; T bound to
 *     1 and D bound to 128 bitwise equal to the dynamic build.
 *   - cpu and OpenCL bitwise equal on every case.
 *
 * Every checker is shown to catch a planted bug once.
 */
#include "cl.h"
#include "kern.h"
#include "../ref/ref_glue.h"
#include "../ref/ref_rope.h"

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(k_glue, .init = setup, .timeout = 300);

static const ks_dtype_t dtypes[] = {
	KS_DTYPE_F32, KS_DTYPE_F16, KS_DTYPE_BF16,
};
#define NDTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

enum { CANARY = 64 };

static ks_ir_kernel_t *ir(const char *name, ks_dtype_t dt,
    const int64_t *vals)
{
	const ks_kernel_def_t *def = ks_kernel_find(name);

	cr_assert_not_null(def, "%s is not in the library", name);
	return gpu_kernel_ir(def, "general", dt, KS_MODE_EXACT, vals);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	cr_assert_not_null(p);
	return p;
}

/* ---- embedding ---- */

/* Runs embedding on P; returns y of T*H + CANARY elements (caller
 * frees), the canary as FILL left it. */
static void *emb_run(kt_prog_t *p, ks_dtype_t dt, const int32_t *ids,
    const void *table, int64_t T, int64_t V, int64_t H)
{
	size_t es = ks_dtype_size(dt);
	void *y = xmalloc(es * (size_t)(T * H + CANARY));
	kt_buf_t bufs[] = {
		{ "ids", (void *)ids, sizeof(int32_t) * (size_t)T },
		{ "table", (void *)table, es * (size_t)(V * H + CANARY) },
		{ "y", y, es * (size_t)(T * H + CANARY) },
	};
	kt_val_t vals[] = { { "T", T, 0 }, { "V", V, 0 }, { "H", H, 0 } };
	kt_args_t a;

	ref_fill(y, (int)dt, T * H + CANARY, 99);
	kt_bind(&a, p->k, bufs, 3, vals, 3);
	kt_prog_run(p, a.args);
	return y;
}

/* One embedding case on P: ids cycling through valid rows and -1, V,
 * INT32_MIN, INT32_MAX; NaN after the table; y and its canary bitwise. */
static void *emb_case(kt_prog_t *p, ks_dtype_t dt, int64_t T, int64_t V,
    int64_t H, uint64_t seed)
{
	size_t es = ks_dtype_size(dt);
	int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)T);
	void *table = xmalloc(es * (size_t)(V * H + CANARY));
	void *want = xmalloc(es * (size_t)(T * H + CANARY)), *y;
	char who[128];
	int64_t t, i;

	for (t = 0; t < T; t++) {
		static const int32_t bad[] = { -1, 0, INT32_MIN, INT32_MAX };

		ids[t] = t % 5 == 4 ? (t / 5 % 5 == 1 ? (int32_t)V :
		    bad[t / 5 % 4]) : (int32_t)((seed + (uint64_t)t * 7) %
		    (uint64_t)V);
	}
	ref_fill(table, (int)dt, V * H, seed);
	for (i = V * H; i < V * H + CANARY; i++)
		ref_store(table, (int)dt, i, NAN);
	ref_fill(want, (int)dt, T * H + CANARY, 99);
	ref_embedding(ids, table, want, (int)dt, T, V, H);
	y = emb_run(p, dt, ids, table, T, V, H);
	snprintf(who, sizeof who, "embedding %s %s T=%lld V=%lld H=%lld",
	    p->env ? "opencl" : "cpu", ks_dtype_name(dt), (long long)T,
	    (long long)V, (long long)H);
	kt_assert_bitwise(who, y, want, dt, T * H + CANARY);
	for (t = 0; t < T; t++)
		if (ids[t] < 0 || ids[t] >= V)
			for (i = 0; i < H; i++)
				cr_assert_eq(kt_bits(y, dt, t * H + i), 0,
				    "%s: id %d row not +0", who, ids[t]);
	free(ids);
	free(table);
	free(want);
	return y;
}

static const int64_t emb_shapes[][3] = {
	{ 10, 7, 300 }, { 5, 3, 256 }, { 9, 20, 33 }, { 5, 2, 1 },
	{ 6, 4, 512 }, { 10, 5, 1000 },
};

static void emb_suite(clenv_t *env)
{
	int d;
	size_t s;

	for (d = 0; d < NDTYPES; d++) {
		const int64_t dyn[3] = { 0, 0, 0 }, h512[3] = { 0, 0, 512 };
		kt_prog_t cpu, cl, bound;

		kt_prog_open(&cpu, ir("embedding", dtypes[d], dyn), NULL);
		kt_prog_open(&bound, ir("embedding", dtypes[d], h512), NULL);
		if (env)
			kt_prog_open(&cl, ir("embedding", dtypes[d], dyn), env);
		for (s = 0; s < sizeof emb_shapes / sizeof emb_shapes[0];
		    s++) {
			const int64_t *v = emb_shapes[s];
			void *a = emb_case(&cpu, dtypes[d], v[0], v[1], v[2],
			    s + 1), *b;

			if (v[2] == 512) {
				b = emb_case(&bound, dtypes[d], v[0], v[1],
				    v[2], s + 1);
				kt_assert_bitwise("embedding H bound vs dynamic",
				    b, a, dtypes[d], v[0] * v[2]);
				free(b);
			}
			if (env) {
				b = emb_case(&cl, dtypes[d], v[0], v[1], v[2],
				    s + 1);
				kt_assert_bitwise("embedding cpu vs opencl", b,
				    a, dtypes[d], v[0] * v[2]);
				free(b);
			}
			free(a);
		}
		kt_prog_close(&cpu);
		kt_prog_close(&bound);
		if (env)
			kt_prog_close(&cl);
	}
}

Test(k_glue, embedding_cpu_every_dtype_is_bitwise_the_reference_and_zeroes_bad_ids)
{
	emb_suite(NULL);
}

Test(k_glue, embedding_opencl_every_dtype_is_bitwise_the_reference_and_cpu)
{
	clenv_t env;

	env_open(&env);
	emb_suite(&env);
	env_close(&env);
}

/* Binding H to a multiple of 256 leaves no guard; the buffers declare
 * their extents. */
Test(k_glue, embedding_bound_h_multiple_of_256_has_no_guard)
{
	const int64_t vals[3] = { 0, 0, 4096 };
	ks_ir_kernel_t *k = ir("embedding", KS_DTYPE_BF16, vals);
	ks_buf_t b;

	ks_buf_init(&b);
	cr_assert_eq(ks_ir_print(k, &b), KS_OK);
	cr_assert_null(strstr(b.data, " if "), "%s", b.data);
	cr_assert_str_eq(k->params[0].dims, "T");
	cr_assert_str_eq(k->params[1].dims, "V,H");
	cr_assert_str_eq(k->params[2].dims, "T,H");
	ks_buf_close(&b);
	ks_ir_free(k);
}

/* ---- argmax ---- */

static int32_t *argmax_run(kt_prog_t *p, ks_dtype_t dt, const void *x,
    int64_t R, int64_t N)
{
	int32_t *idx = xmalloc(sizeof(int32_t) * (size_t)(R + CANARY));
	kt_buf_t bufs[] = {
		{ "x", (void *)x, ks_dtype_size(dt) * (size_t)(R * N) },
		{ "idx", idx, sizeof(int32_t) * (size_t)(R + CANARY) },
	};
	kt_val_t vals[] = { { "R", R, 0 }, { "N", N, 0 } };
	kt_args_t a;
	int64_t i;

	for (i = 0; i < R + CANARY; i++)
		idx[i] = -7;
	kt_bind(&a, p->k, bufs, 2, vals, 2);
	kt_prog_run(p, a.args);
	return idx;
}

/*
 * Rows of N built to probe the rules: row 0 random; 1 the maximum twice
 * (lanes apart); 2 in two chunks; 3 -0 before +0 as the maximum with
 * negatives elsewhere; 4 NaN everywhere but one element; 5 all NaN; 6 all
 * -inf; 7 the max in the tail, repeated in an earlier lane; 8 all equal;
 * 9 NaN first then the max; then random rows with few distinct values.
 */
static void argmax_rows(void *x, ks_dtype_t dt, int64_t R, int64_t N,
    uint64_t seed)
{
	int64_t r, j;
	int d = (int)dt;

	ref_fill(x, d, R * N, seed);
	for (r = 0; r < R; r++) {
		int64_t o = r * N, a = (r * 7 + 3) % N, b = (r * 13 + 40) % N;

		switch (r) {
		case 0:
			break;
		case 1: case 2: case 7:
			if (r == 2)
				b = N - 1;
			if (r == 7)
				a = N - 1 - (N - 1) % 32 + 1 < N ? N - 1 : a;
			ref_store(x, d, o + a, 2.0f);
			ref_store(x, d, o + b, 2.0f);
			break;
		case 3:
			for (j = 0; j < N; j++)
				ref_store(x, d, o + j, -1.0f - (float)(j % 3));
			ref_store(x, d, o + b, 0.0f);
			ref_store(x, d, o + a, -0.0f);
			break;
		case 4: case 5: case 9:
			for (j = 0; j < N; j++)
				ref_store(x, d, o + j, NAN);
			if (r == 4)
				ref_store(x, d, o + a, -3.0f);
			if (r == 9) {
				ref_store(x, d, o + b, 1.0f);
				ref_store(x, d, o + a, 0.5f);
			}
			break;
		case 6: case 8:
			for (j = 0; j < N; j++)
				ref_store(x, d, o + j, r == 6 ? -INFINITY :
				    0.25f);
			break;
		default:
			for (j = 0; j < N; j++)
				ref_store(x, d, o + j, (float)((seed + (uint64_t)
				    (j * 31 + r)) % 5));
			break;
		}
	}
}

static const int64_t argmax_shapes[][2] = {
	{ 12, 100 }, { 10, 1 }, { 10, 31 }, { 10, 32 }, { 12, 33 },
	{ 12, 1000 }, { 10, 64 },
};

static int32_t *argmax_case(kt_prog_t *p, ks_dtype_t dt, int64_t R,
    int64_t N, uint64_t seed)
{
	void *x = xmalloc(ks_dtype_size(dt) * (size_t)(R * N));
	int32_t *want = xmalloc(sizeof(int32_t) * (size_t)(R + CANARY));
	int32_t *got;
	char who[128];
	int64_t i;

	argmax_rows(x, dt, R, N, seed);
	for (i = 0; i < R + CANARY; i++)
		want[i] = -7;
	ref_argmax(x, want, (int)dt, R, N);
	got = argmax_run(p, dt, x, R, N);
	snprintf(who, sizeof who, "argmax %s %s R=%lld N=%lld",
	    p->env ? "opencl" : "cpu", ks_dtype_name(dt), (long long)R,
	    (long long)N);
	kt_assert_bitwise(who, got, want, KS_DTYPE_F32, R + CANARY);
	/* The rules, independently of the reference. */
	cr_assert_eq(got[5], N == 1 ? -1 : -1, "%s: all-NaN row", who);
	cr_assert_eq(got[6], 0, "%s: all -inf row", who);
	cr_assert_eq(got[8], 0, "%s: all-equal row", who);
	free(x);
	free(want);
	return got;
}

static void argmax_suite(clenv_t *env)
{
	int d;
	size_t s;

	for (d = 0; d < NDTYPES; d++) {
		const int64_t dyn[2] = { 0, 0 }, n1000[2] = { 0, 1000 };
		kt_prog_t cpu, cl, bound;

		kt_prog_open(&cpu, ir("argmax", dtypes[d], dyn), NULL);
		kt_prog_open(&bound, ir("argmax", dtypes[d], n1000), NULL);
		if (env)
			kt_prog_open(&cl, ir("argmax", dtypes[d], dyn), env);
		for (s = 0; s < sizeof argmax_shapes /
		    sizeof argmax_shapes[0]; s++) {
			const int64_t *v = argmax_shapes[s];
			int32_t *a = argmax_case(&cpu, dtypes[d], v[0], v[1],
			    s + 3), *b;

			if (v[1] == 1000) {
				b = argmax_case(&bound, dtypes[d], v[0], v[1],
				    s + 3);
				kt_assert_bitwise("argmax N bound vs dynamic",
				    b, a, KS_DTYPE_F32, v[0]);
				free(b);
			}
			if (env) {
				b = argmax_case(&cl, dtypes[d], v[0], v[1],
				    s + 3);
				kt_assert_bitwise("argmax cpu vs opencl", b, a,
				    KS_DTYPE_F32, v[0]);
				free(b);
			}
			free(a);
		}
		kt_prog_close(&cpu);
		kt_prog_close(&bound);
		if (env)
			kt_prog_close(&cl);
	}
}

Test(k_glue, argmax_cpu_every_dtype_is_the_reference_lowest_index_nan_ignored)
{
	argmax_suite(NULL);
}

Test(k_glue, argmax_opencl_every_dtype_is_the_reference_and_cpu)
{
	clenv_t env;

	env_open(&env);
	argmax_suite(&env);
	env_close(&env);
}

/* The tie rule by hand: maxima at 70 and 5 (lanes 6 and 5), -0 at 9
 * before +0 at 40 (they tie), NaN ignored. */
Test(k_glue, argmax_ties_go_to_the_lowest_index)
{
	const int64_t dyn[2] = { 0, 0 };
	float x[3][100];
	int32_t *got;
	kt_prog_t p;
	int j;

	for (j = 0; j < 100; j++) {
		x[0][j] = (float)(j % 7) * 0.1f;
		x[1][j] = -1.0f;
		x[2][j] = j % 2 ? NAN : -5.0f;
	}
	x[0][70] = 9.0f;
	x[0][5] = 9.0f;
	x[1][40] = 0.0f;
	x[1][9] = -0.0f;
	x[2][77] = -4.0f;
	x[2][78] = -4.0f;
	kt_prog_open(&p, ir("argmax", KS_DTYPE_F32, dyn), NULL);
	got = argmax_run(&p, KS_DTYPE_F32, x, 3, 100);
	cr_assert_eq(got[0], 5);
	cr_assert_eq(got[1], 9);
	cr_assert_eq(got[2], 77);
	cr_assert_eq(got[3], -7, "wrote past idx");
	free(got);
	kt_prog_close(&p);
}

/* ---- kv_append_rope ---- */

typedef struct {
	int64_t B, T, Hkv, D, S, P;
} kvshape_t;

typedef struct {
	kvshape_t s;
	ks_dtype_t dt;
	int64_t nstep, ncache, ncs;     /* elements, canaries included */
	void *k, *v, *cs, *kc0, *vc0, *kc, *vc;
	int32_t *pos;
} kvcase_t;

static void kv_init(kvcase_t *c, ks_dtype_t dt, kvshape_t s, uint64_t seed)
{
	size_t es = ks_dtype_size(dt);
	int64_t b, p, i, half = s.D / 2;

	memset(c, 0, sizeof *c);
	c->s = s;
	c->dt = dt;
	c->nstep = s.B * s.T * s.Hkv * s.D;
	c->ncache = s.B * s.S * s.Hkv * s.D + CANARY;
	c->ncs = s.P * s.D + CANARY;
	c->k = xmalloc(es * (size_t)c->nstep);
	c->v = xmalloc(es * (size_t)c->nstep);
	c->cs = xmalloc(es * (size_t)c->ncs);
	c->kc0 = xmalloc(es * (size_t)c->ncache);
	c->vc0 = xmalloc(es * (size_t)c->ncache);
	c->kc = xmalloc(es * (size_t)c->ncache);
	c->vc = xmalloc(es * (size_t)c->ncache);
	c->pos = xmalloc(sizeof(int32_t) * (size_t)s.B);
	ref_fill(c->k, (int)dt, c->nstep, seed);
	ref_fill(c->v, (int)dt, c->nstep, seed + 1);
	ref_fill(c->kc0, (int)dt, c->ncache, seed + 2);
	ref_fill(c->vc0, (int)dt, c->ncache, seed + 3);
	for (p = 0; p < s.P; p++)
		for (i = 0; i < half; i++) {
			double th = (double)p * pow(10000.0, -2.0 * (double)i /
			    (double)s.D);

			ref_store(c->cs, (int)dt, p * s.D + i, (float)cos(th));
			ref_store(c->cs, (int)dt, p * s.D + half + i,
			    (float)sin(th));
		}
	for (i = s.P * s.D; i < c->ncs; i++)
		ref_store(c->cs, (int)dt, i, NAN);
	if (s.D % 2)
		for (p = 0; p < s.P; p++)
			ref_store(c->cs, (int)dt, p * s.D + s.D - 1, 0.5f);
	/* positions: 0, the last slot, -1, S, P, random, INT32 extremes */
	for (b = 0; b < s.B; b++) {
		int64_t lim = (s.S < s.P ? s.S : s.P) - s.T + 1, v;

		switch (b % 8) {
		case 0: v = 0; break;
		case 1: v = lim - 1; break;
		case 2: v = -1; break;
		case 3: v = s.S - 1; break;     /* T > 1: tokens past S */
		case 4: v = s.P; break;
		case 6: v = INT32_MIN; break;
		case 7: v = INT32_MAX; break;
		default: v = lim > 0 ? (int64_t)(seed % (uint64_t)lim) : 0;
		}
		c->pos[b] = (int32_t)v;
	}
	memcpy(c->kc, c->kc0, es * (size_t)c->ncache);
	memcpy(c->vc, c->vc0, es * (size_t)c->ncache);
	ref_kv_append_rope(c->k, c->v, c->pos, c->cs, c->kc, c->vc, (int)dt,
	    s.B, s.T, s.Hkv, s.D, s.S, s.P);
}

static void kv_close(kvcase_t *c)
{
	free(c->k);
	free(c->v);
	free(c->cs);
	free(c->kc0);
	free(c->vc0);
	free(c->kc);
	free(c->vc);
	free(c->pos);
}

/* Runs P on C; *KC, *VC get the caches (caller frees). */
static void kv_run(kt_prog_t *p, const kvcase_t *c, void **kc, void **vc)
{
	size_t es = ks_dtype_size(c->dt), nc = es * (size_t)c->ncache;
	kt_buf_t bufs[6];
	kt_val_t vals[] = {
		{ "B", c->s.B, 0 }, { "T", c->s.T, 0 }, { "Hkv", c->s.Hkv, 0 },
		{ "D", c->s.D, 0 }, { "S", c->s.S, 0 }, { "P", c->s.P, 0 },
	};
	kt_args_t a;

	*kc = xmalloc(nc);
	*vc = xmalloc(nc);
	memcpy(*kc, c->kc0, nc);
	memcpy(*vc, c->vc0, nc);
	bufs[0] = (kt_buf_t){ "k", c->k, es * (size_t)c->nstep };
	bufs[1] = (kt_buf_t){ "v", c->v, es * (size_t)c->nstep };
	bufs[2] = (kt_buf_t){ "pos", c->pos, 4 * (size_t)c->s.B };
	bufs[3] = (kt_buf_t){ "cs", c->cs, es * (size_t)c->ncs };
	bufs[4] = (kt_buf_t){ "k_cache", *kc, nc };
	bufs[5] = (kt_buf_t){ "v_cache", *vc, nc };
	kt_bind(&a, p->k, bufs, 6, vals, 6);
	kt_prog_run(p, a.args);
}

/*
 * rope (the library kernel, on the same backend) on a copy of the step's
 * k, viewed as B*T tokens of Hkv heads at positions pos[b] + t, then
 * copied into a copy of the cache where the position is a slot: what
 * kv_append_rope must equal bit for bit.
 */
static void *kv_via_rope(const kvcase_t *c, clenv_t *env)
{
	const kvshape_t *s = &c->s;
	size_t es = ks_dtype_size(c->dt);
	int64_t n = s->B * s->T, b, t, row = s->Hkv * s->D;
	const int64_t dyn[4] = { 0, 0, 0, 0 };
	void *x = xmalloc(es * (size_t)c->nstep);
	void *kc = xmalloc(es * (size_t)c->ncache);
	int32_t *pos = xmalloc(sizeof(int32_t) * (size_t)n);
	kt_prog_t p;
	kt_args_t a;
	kt_buf_t bufs[3];
	kt_val_t vals[] = { { "T", n, 0 }, { "Hn", s->Hkv, 0 },
	    { "D", s->D, 0 }, { "P", s->P, 0 } };

	memcpy(x, c->k, es * (size_t)c->nstep);
	memcpy(kc, c->kc0, es * (size_t)c->ncache);
	for (b = 0; b < s->B; b++)
		for (t = 0; t < s->T; t++) {
			int64_t q = (int64_t)c->pos[b] + t;

			pos[b * s->T + t] = q >= 0 && q < s->P ? (int32_t)q : -1;
		}
	bufs[0] = (kt_buf_t){ "x", x, es * (size_t)c->nstep };
	bufs[1] = (kt_buf_t){ "pos", pos, 4 * (size_t)n };
	bufs[2] = (kt_buf_t){ "cs", c->cs, es * (size_t)c->ncs };
	kt_prog_open(&p, gpu_kernel_ir(ks_kernel_find("rope"), "general",
	    c->dt, KS_MODE_EXACT, dyn), env);
	kt_bind(&a, p.k, bufs, 3, vals, 4);
	kt_prog_run(&p, a.args);
	kt_prog_close(&p);
	for (b = 0; b < s->B; b++)
		for (t = 0; t < s->T; t++) {
			int64_t q = (int64_t)c->pos[b] + t;

			if (q < 0 || q >= s->S || q >= s->P)
				continue;
			memcpy((char *)kc + es * (size_t)((b * s->S + q) * row),
			    (char *)x + es * (size_t)((b * s->T + t) * row),
			    es * (size_t)row);
		}
	free(x);
	free(pos);
	return kc;
}

static const kvshape_t kv_shapes[] = {
	{ 8, 1, 2, 128, 20, 24 }, { 8, 3, 2, 64, 9, 12 },
	{ 8, 2, 3, 96, 10, 8 }, { 5, 1, 1, 80, 6, 6 },
	{ 8, 1, 2, 67, 7, 9 }, { 3, 4, 2, 2, 8, 8 },
};

static void kv_suite(clenv_t *env)
{
	int d;
	size_t s;

	for (d = 0; d < NDTYPES; d++) {
		const int64_t dyn[6] = { 0 };
		kt_prog_t p;

		kt_prog_open(&p, ir("kv_append_rope", dtypes[d], dyn), env);
		for (s = 0; s < sizeof kv_shapes / sizeof kv_shapes[0]; s++) {
			kvcase_t c;
			void *kc, *vc, *viarope;
			char who[160];

			kv_init(&c, dtypes[d], kv_shapes[s], s + 5);
			kv_run(&p, &c, &kc, &vc);
			snprintf(who, sizeof who, "kv_append_rope %s %s D=%lld "
			    "T=%lld", env ? "opencl" : "cpu",
			    ks_dtype_name(dtypes[d]), (long long)c.s.D,
			    (long long)c.s.T);
			kt_assert_bitwise(who, kc, c.kc, dtypes[d], c.ncache);
			kt_assert_bitwise(who, vc, c.vc, dtypes[d], c.ncache);
			viarope = kv_via_rope(&c, env);
			kt_assert_bitwise("kv_append_rope vs rope then copy",
			    kc, viarope, dtypes[d], c.ncache);
			free(viarope);
			free(kc);
			free(vc);
			kv_close(&c);
		}
		kt_prog_close(&p);
	}
}

Test(k_glue, kv_append_rope_cpu_is_bitwise_the_reference_and_rope_then_copy)
{
	kv_suite(NULL);
}

Test(k_glue, kv_append_rope_opencl_is_bitwise_the_reference_and_rope_then_copy)
{
	clenv_t env;

	env_open(&env);
	kv_suite(&env);
	env_close(&env);
}

/* Decode bound (T = 1, D = 128, every dim constant) equals the dynamic
 * build; with D bound to 128 no guard is left but the position test. */
Test(k_glue, kv_append_rope_bound_decode_equals_dynamic)
{
	const kvshape_t s = { 8, 1, 2, 128, 20, 24 };
	const int64_t all[6] = { 8, 1, 2, 128, 20, 24 }, dyn[6] = { 0 };
	const int64_t d128[6] = { 0, 0, 0, 128, 0, 0 };
	kt_prog_t a, b;
	kvcase_t c;
	void *kc1, *vc1, *kc2, *vc2;
	ks_ir_kernel_t *k;
	ks_buf_t pr;
	const char *q;
	int ifs = 0;

	kt_prog_open(&a, ir("kv_append_rope", KS_DTYPE_BF16, all), NULL);
	kt_prog_open(&b, ir("kv_append_rope", KS_DTYPE_BF16, dyn), NULL);
	kv_init(&c, KS_DTYPE_BF16, s, 3);
	kv_run(&a, &c, &kc1, &vc1);
	kv_run(&b, &c, &kc2, &vc2);
	kt_assert_bitwise("kv bound vs dynamic k", kc1, kc2, KS_DTYPE_BF16,
	    c.ncache);
	kt_assert_bitwise("kv bound vs dynamic v", vc1, vc2, KS_DTYPE_BF16,
	    c.ncache);
	kt_assert_bitwise("kv bound vs reference", kc1, c.kc, KS_DTYPE_BF16,
	    c.ncache);
	free(kc1);
	free(vc1);
	free(kc2);
	free(vc2);
	kv_close(&c);
	kt_prog_close(&a);
	kt_prog_close(&b);
	k = ir("kv_append_rope", KS_DTYPE_BF16, d128);
	ks_buf_init(&pr);
	cr_assert_eq(ks_ir_print(k, &pr), KS_OK);
	for (q = pr.data; (q = strstr(q, " if ")) != NULL; q++)
		ifs++;
	cr_assert_eq(ifs, 1, "%s", pr.data);
	cr_assert_str_eq(k->params[4].dims, "B,S,Hkv,D");
	ks_buf_close(&pr);
	ks_ir_free(k);
}

Test(k_glue, kv_append_rope_rejects_an_odd_constant_d)
{
	ks_dim_t dims[6] = { { "B", 0, 0 }, { "T", 0, 0 }, { "Hkv", 0, 0 },
	    { "D", 1, 127 }, { "S", 0, 0 }, { "P", 0, 0 } };
	ks_spec_t spec;
	char err[256];

	cr_assert_eq(ks_kernel_validate(&ks_kernel_kv_append_rope,
	    KS_DTYPE_F16, KS_MODE_EXACT, dims, 6, &spec, err, sizeof err),
	    KS_E_BAD_SHAPE);
	cr_assert_not_null(strstr(err, "D must be even"), "%s", err);
}

/* ---- the checkers catch planted bugs ---- */

Test(k_glue, checkers_catch_planted_bugs)
{
	const int64_t dyn[6] = { 0 };
	kt_prog_t p;
	kvcase_t c;
	void *kc, *vc;
	int32_t ids[3] = { 1, 7, 2 }, *got, want[3 + CANARY];
	float table[4 * 40], *y, yw[3 * 40 + CANARY], x[2 * 50];
	int64_t i;

	/* embedding: clamping a bad id instead of zeroing is told apart */
	ref_fill(table, 0, 4 * 40, 1);
	kt_prog_open(&p, ir("embedding", KS_DTYPE_F32, dyn), NULL);
	y = emb_run(&p, KS_DTYPE_F32, ids, table, 3, 4, 40);
	ref_fill(yw, 0, 3 * 40 + CANARY, 99);
	ids[1] = 3;                                     /* clamped */
	ref_embedding(ids, table, yw, 0, 3, 4, 40);
	cr_assert_gt(kt_diff("planted clamp", y, yw, KS_DTYPE_F32, 120), 0);
	free(y);
	kt_prog_close(&p);

	/* argmax: a "highest index wins" reference is told apart */
	for (i = 0; i < 100; i++)
		x[i] = (float)(i % 10);
	kt_prog_open(&p, ir("argmax", KS_DTYPE_F32, dyn), NULL);
	got = argmax_run(&p, KS_DTYPE_F32, x, 2, 50);
	ref_argmax(x, want, 0, 2, 50);
	cr_assert_eq(kt_diff("argmax", got, want, KS_DTYPE_F32, 2), 0);
	want[0] = 49;                                   /* last 9 of row 0 */
	cr_assert_gt(kt_diff("planted tie", got, want, KS_DTYPE_F32, 2), 0);
	free(got);
	kt_prog_close(&p);

	/* kv_append_rope: one ulp in a cache element, and a reference that
	 * rotates with fma, are told apart */
	kt_prog_open(&p, ir("kv_append_rope", KS_DTYPE_F32, dyn), NULL);
	kv_init(&c, KS_DTYPE_F32, kv_shapes[0], 5);
	kv_run(&p, &c, &kc, &vc);
	kt_assert_bitwise("kv", kc, c.kc, KS_DTYPE_F32, c.ncache);
	((uint32_t *)c.vc)[c.s.S * c.s.Hkv * c.s.D + 3] ^= 1;
	cr_assert_gt(kt_diff("planted ulp", vc, c.vc, KS_DTYPE_F32,
	    c.ncache), 0);
	for (i = 0; i < c.s.Hkv * c.s.D / 2; i++) {     /* row b=0, p=0 */
		int64_t h = i / (c.s.D / 2), j = i % (c.s.D / 2);
		int64_t o = h * c.s.D, half = c.s.D / 2;
		float x0 = ((float *)c.k)[o + j], x1 = ((float *)c.k)[o + half + j];
		float cv = ((float *)c.cs)[j], sv = ((float *)c.cs)[half + j];

		((float *)c.kc)[o + j] = fmaf(x0, cv, -(x1 * sv));
	}
	/* p = 0 is the identity rotation (c = 1, s = 0): take b = 1's row */
	for (i = 0; i < c.s.Hkv * c.s.D / 2; i++) {
		int64_t h = i / (c.s.D / 2), j = i % (c.s.D / 2);
		int64_t half = c.s.D / 2, p1 = c.pos[1];
		int64_t so = (1 * c.s.Hkv + h) * c.s.D;
		int64_t co = ((1 * c.s.S + p1) * c.s.Hkv + h) * c.s.D;
		float x0 = ((float *)c.k)[so + j];
		float x1 = ((float *)c.k)[so + half + j];
		float cv = ((float *)c.cs)[p1 * c.s.D + j];
		float sv = ((float *)c.cs)[p1 * c.s.D + half + j];

		((float *)c.kc)[co + j] = fmaf(x0, cv, -(x1 * sv));
	}
	cr_assert_gt(kt_diff("planted fma", kc, c.kc, KS_DTYPE_F32,
	    c.ncache), 0);
	free(kc);
	free(vc);
	kv_close(&c);
	kt_prog_close(&p);
}
