/*
 * The backend conformance suite: what every backend that emits source for
 * a device (cuda, opencl) must show, written once and run per backend by
 * its test file (tests/test_cuda.c, tests/test_opencl.c), which describes
 * the backend in a conform_t and calls each case from a Test of its own
 * suite, beside the cases that only its backend has.
 *
 * Without a device: the emitted source matches the golden files
 * (tests/golden/gemm_<variant>_<dtype>.<ext>) and is deterministic, and so
 * is the compiler identity, which names the numerical options; formats and
 * targets are refused before a compiler runs; a compiler that cannot be
 * loaded makes the backend unavailable with a reason, and leaves the
 * source and the cpu backend working; invalid IR is refused before the
 * compiler; concurrent compiles all succeed.  On a device (OpenCL: PoCL
 * here; CUDA: a GPU and its driver, libcuda.so.1): the hand-built kernels
 * of gpu.h give the bits of the cpu backend and of the C reference, for
 * loads and stores of every f16 and bf16 case, unary math, i32 buffers
 * and casts, an unrolled kernel, local arrays and barriers, the reduction
 * trees, element-wise arithmetic and uniform integer code.  A case that
 * needs a compiler or a device that is not here skips visibly
 * (cr_skip_test, with the reason).
 */
#ifndef KS_TEST_CONFORM_H
#define KS_TEST_CONFORM_H

#include <pthread.h>

#include "gpu.h"
#include "../ref/ref.h"

typedef struct {
	const ks_backend_t *be;
	const char *golden_ext;        /* "cu", "cl" */
	const char *other_format;      /* another backend's, refused */
	const char *identity_has[8];   /* what the identity names, NULL-ended */
	int max_lanes;                 /* the widest group the dialect takes */
	/* A target to compile for, into OUT; skips the test visibly where
	 * the compiler cannot be loaded. */
	void (*target)(char *out, size_t n);
	/* Hides the compiler from this process (Criterion runs each test in
	 * a process of its own, so nothing has loaded it yet); the backend's
	 * reason then names HIDDEN_SAYS, and NAMED_TARGET, a target that
	 * resolves where the compiler is, is unavailable. */
	void (*hide)(void);
	const char *hidden_says;
	const char *named_target;
	int same_bytes;                /* two compiles give the same bytes */
	/* The device: OPEN skips visibly where there is none; RUN launches
	 * K's whole grid on ARGS (gpu.h's, one per declared parameter),
	 * reading the written buffers back into them. */
	void *(*open)(void);
	void (*run)(void *dev, const ks_ir_kernel_t *k, gpu_arg_t *args);
	void (*close)(void *dev);
	const char *local_decl;        /* a local array of 32 f32 named s */
	const char *barrier;           /* a barrier, as emitted */
} conform_t;

/* ---- without a device ---- */

static inline void conform_golden(const conform_t *c)
{
	size_t i;
	ks_dtype_t d;

	for (i = 0; i < sizeof golden_shapes / sizeof *golden_shapes; i++)
		for (d = 0; d < KS_DTYPE_COUNT; d++) {
			const char *v = golden_shapes[i].variant;
			ks_ir_kernel_t *k = gpu_gemm_ir(v, d,
			    golden_shapes[i].M, golden_shapes[i].N,
			    golden_shapes[i].K);
			char name[64], *src = gpu_source(c->be, k);

			snprintf(name, sizeof name, "gemm_%s_%s.%s", v,
			    ks_dtype_name(d), c->golden_ext);
			gpu_check_golden(src, name);
			free(src);
			ks_ir_free(k);
		}
}

/* The same IR twice gives the same source; the identity of TARGET (from
 * c->target, which skips without a compiler) is stable and names the
 * emitter and the numerical options.  The identity is left in ID. */
static inline void conform_deterministic(const conform_t *c, char *target,
    size_t tlen, ks_buf_t *id)
{
	ks_ir_kernel_t *a = gpu_gemm_ir("small_m", KS_DTYPE_F16, 3, 0, 4100);
	ks_ir_kernel_t *b = gpu_gemm_ir("small_m", KS_DTYPE_F16, 3, 0, 4100);
	char *sa = gpu_source(c->be, a), *sb = gpu_source(c->be, b);
	ks_buf_t again;
	int i;

	cr_assert_str_eq(sa, sb);
	free(sa);
	free(sb);
	ks_ir_free(a);
	ks_ir_free(b);
	c->target(target, tlen);
	ks_buf_init(id);
	ks_buf_init(&again);
	cr_assert_eq(c->be->identity(target, id), KS_OK);
	cr_assert_eq(c->be->identity(target, &again), KS_OK);
	cr_assert_str_eq(id->data, again.data);
	cr_assert(strstr(id->data, "emit-c ") != NULL, "%s", id->data);
	for (i = 0; c->identity_has[i]; i++)
		cr_assert(strstr(id->data, c->identity_has[i]) != NULL,
		    "the identity lacks %s: %s", c->identity_has[i], id->data);
	cr_log_info("%s %s identity: %s", c->be->name, target, id->data);
	ks_buf_close(&again);
}

/* The backend is found by name; its formats are checked without a
 * compiler, and a compile for another format or for the unresolved
 * "auto" is refused before one runs. */
static inline void conform_formats(const conform_t *c)
{
	ks_ir_kernel_t *k = gpu_copy_kernel(KS_DTYPE_F32, KS_DTYPE_F32);
	char target[KS_MAX_NAME], err[1024];
	ks_jit_artifact_t a;

	cr_assert_eq(ks_backend_find(c->be->name), c->be);
	cr_assert_eq(c->be->check_format(c->be->default_format), KS_OK);
	cr_assert_eq(c->be->check_format(c->other_format), KS_E_BAD_FORMAT);
	cr_assert_eq(c->be->check_format(NULL), KS_E_BAD_FORMAT);
	c->target(target, sizeof target);
	cr_assert_eq(c->be->compile(k, target, c->other_format, &a, err,
	    sizeof err), KS_E_BAD_FORMAT);
	cr_assert_eq(c->be->compile(k, "auto", c->be->default_format, &a, err,
	    sizeof err), KS_E_BAD_TARGET);
	ks_ir_free(k);
}

/* With the compiler hidden: unavailable, saying why, for every call that
 * needs it; the source needs none, and the cpu backend is untouched. */
static inline void conform_unavailable(const conform_t *c)
{
	ks_ir_kernel_t *k = gpu_copy_kernel(KS_DTYPE_F32, KS_DTYPE_BF16);
	char err[1024] = "", t[KS_MAX_NAME], *src;
	ks_jit_artifact_t a;
	ks_buf_t id;

	c->hide();
	cr_assert_eq(c->be->available(err, sizeof err),
	    KS_E_BACKEND_UNAVAILABLE);
	cr_assert(strstr(err, c->hidden_says) != NULL, "%s", err);
	cr_assert_eq(c->be->resolve_target(c->named_target, t, sizeof t, err,
	    sizeof err), KS_E_BACKEND_UNAVAILABLE);
	cr_assert_eq(c->be->compile(k, c->named_target, c->be->default_format,
	    &a, err, sizeof err), KS_E_BACKEND_UNAVAILABLE);
	ks_buf_init(&id);
	cr_assert_neq(c->be->identity(c->named_target, &id), KS_OK);
	ks_buf_close(&id);
	src = gpu_source(c->be, k);
	cr_assert_gt(strlen(src), 0);
	free(src);
	cr_assert_eq(ks_backend_cpu.available(err, sizeof err), KS_OK);
	ks_ir_free(k);
}

/* Invalid IR is a compile error naming what is wrong, found before any
 * compiler (a lane variable read outside the lanes, a uniform written
 * inside them); a group the dialect cannot hold is unsupported. */
static inline void conform_invalid_ir(const conform_t *c)
{
	const int lanes[2] = { 24, 2 * c->max_lanes };
	ks_ir_kernel_t *k = ks_ir_new("bad", "t", 32);
	int y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int v = ks_ir_var(k, "v", KS_TY_F32, KS_VAR_LANE);
	int u = ks_ir_var(k, "u", KS_TY_I64, KS_VAR_UNIFORM);
	ks_stmt_t *l = ks_s_lanes(k);
	char err[512];
	ks_buf_t s;
	int i;

	k->grid = ks_x_i64(k, 1);
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_i64(k, 0),
	    ks_x_var(k, v)));
	ks_buf_init(&s);
	cr_assert_eq(c->be->source(k, &s, err, sizeof err), KS_E_COMPILE);
	cr_assert(strstr(err, "'v'") != NULL, "%s", err);
	ks_buf_close(&s);
	ks_ir_free(k);

	k = ks_ir_new("bad", "t", 32);
	y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	u = ks_ir_var(k, "u", KS_TY_I64, KS_VAR_UNIFORM);
	l = ks_s_lanes(k);
	k->grid = ks_x_i64(k, 1);
	ks_s_append(k, k->body, ks_s_decl(k, u, ks_x_i64(k, 0)));
	ks_s_append(k, k->body, l);
	ks_s_append(k, l->body, ks_s_assign(k, u, ks_x_lane(k)));
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_var(k, u),
	    ks_x_f32(k, 1.0f)));
	ks_buf_init(&s);
	cr_assert_eq(c->be->source(k, &s, err, sizeof err), KS_E_COMPILE);
	cr_assert(strstr(err, "'u'") != NULL, "%s", err);
	ks_buf_close(&s);
	ks_ir_free(k);

	for (i = 0; i < 2; i++) {
		k = ks_ir_new("wide", "t", lanes[i]);
		ks_buf_init(&s);
		cr_assert_eq(c->be->source(k, &s, err, sizeof err),
		    KS_E_UNSUPPORTED, "%d lanes", lanes[i]);
		ks_buf_close(&s);
		ks_ir_free(k);
	}
}

typedef struct {
	const conform_t *c;
	const ks_ir_kernel_t *k;
	const char *target;
	ks_jit_artifact_t a;
	int rc;
} conform_job_t;

static inline void *conform_compile_job(void *p)
{
	conform_job_t *j = p;
	char err[512];

	j->rc = j->c->be->compile(j->k, j->target, j->c->be->default_format,
	    &j->a, err, sizeof err);
	return NULL;
}

/* N threads compile K for TARGET at once (where nothing loaded the
 * compiler before, the first calls race on loading it): every compile
 * succeeds, with the same bytes where the backend's compiles are
 * deterministic; skipped where the compiler cannot be loaded.  The
 * artifacts are left in A (the caller closes them). */
enum { CONFORM_THREADS = 4 };

static inline void conform_concurrent(const conform_t *c,
    const ks_ir_kernel_t *k, const char *target,
    ks_jit_artifact_t a[CONFORM_THREADS])
{
	pthread_t t[CONFORM_THREADS];
	conform_job_t j[CONFORM_THREADS];
	int i;

	for (i = 0; i < CONFORM_THREADS; i++) {
		j[i] = (conform_job_t){ .c = c, .k = k, .target = target };
		cr_assert_eq(pthread_create(&t[i], NULL, conform_compile_job,
		    &j[i]), 0);
	}
	for (i = 0; i < CONFORM_THREADS; i++)
		pthread_join(t[i], NULL);
	for (i = 0; i < CONFORM_THREADS; i++) {
		if (j[i].rc == KS_E_BACKEND_UNAVAILABLE)
			cr_skip_test("%s is not available here", c->be->name);
		cr_assert_eq(j[i].rc, KS_OK, "compile %d", i);
		cr_assert_gt(j[i].a.len, 0);
		if (c->same_bytes) {
			cr_assert_eq(j[i].a.len, j[0].a.len);
			cr_assert_eq(memcmp(j[i].a.bytes, j[0].a.bytes,
			    j[0].a.len), 0, "compile %d differs", i);
		}
		a[i] = j[i].a;
	}
}

/* ---- on a device ---- */

/* Runs K on the device, into the write buffers of ARGS, and on the cpu
 * backend, into fresh copies of them: CPU gets ARGS with those copies
 * (free them with conform_free_copies). */
static inline void conform_run_both(const conform_t *c, void *dev,
    const ks_ir_kernel_t *k, gpu_arg_t *args, int nargs, gpu_arg_t *cpu)
{
	int i;

	for (i = 0; i < nargs; i++) {
		cpu[i] = args[i];
		if (k->params[i].kind == KS_PARAM_BUFFER &&
		    (k->params[i].access & KS_ACCESS_WRITE)) {
			cpu[i].data = malloc(args[i].bytes);
			cr_assert_not_null(cpu[i].data);
			memcpy(cpu[i].data, args[i].data, args[i].bytes);
		}
	}
	c->run(dev, k, args);
	gpu_run_cpu(k, cpu);
}

static inline void conform_free_copies(gpu_arg_t *args, gpu_arg_t *cpu,
    int nargs)
{
	int i;

	for (i = 0; i < nargs; i++)
		if (cpu[i].data != args[i].data)
			free(cpu[i].data);
}

/* Every f16 and bf16 pattern loads (through f32) as the cpu backend and
 * ref.h load it (NaNs: the same NaN but for the quiet bit). */
static inline void conform_loads(const conform_t *c)
{
	ks_dtype_t dts[2] = { KS_DTYPE_F16, KS_DTYPE_BF16 };
	uint16_t *src = malloc(65536 * 2);
	int64_t n = 65536;
	void *dev = c->open();
	int d, i;

	for (i = 0; i < 65536; i++)
		src[i] = (uint16_t)i;
	for (d = 0; d < 2; d++) {
		ks_ir_kernel_t *k = gpu_copy_kernel(dts[d], KS_DTYPE_F32);
		float *dst = calloc(65536, 4), *cpu;
		gpu_arg_t args[3] = { { src, 65536 * 2 }, { dst, 65536 * 4 },
			{ &n, 8 } }, cp[3];

		conform_run_both(c, dev, k, args, 3, cp);
		cpu = cp[1].data;
		cr_assert_eq(memcmp(dst, cpu, 65536 * 4), 0, "%s loads differ "
		    "from cpu", ks_dtype_name(dts[d]));
		for (i = 0; i < 65536; i++) {
			float want = ref_load(src, (int)dts[d], i);

			cr_assert(gpu_bits(dst[i]) == gpu_bits(want) ||
			    (want != want && dst[i] != dst[i] &&
			    (gpu_bits(dst[i]) & 0xffbfffff) ==
			    (gpu_bits(want) & 0xffbfffff)),
			    "%s %s 0x%04x: 0x%08x want 0x%08x", c->be->name,
			    ks_dtype_name(dts[d]), i, gpu_bits(dst[i]),
			    gpu_bits(want));
		}
		conform_free_copies(args, cp, 3);
		free(dst);
		ks_ir_free(k);
	}
	free(src);
	c->close(dev);
}

/*
 * Unary math.  sqrt (correctly rounded on every backend), neg and abs are
 * bitwise equal to the cpu backend and to the C reference over zeros,
 * subnormals, negatives, Inf and NaN; so is exp, which is kspec's own
 * (docs/ir.md, ref/ref.h ref_expf), not the device library's.
 */
static inline void conform_unary(const conform_t *c)
{
	static const ks_unop_t ops[] = { KS_UN_SQRT, KS_UN_NEG, KS_UN_ABS,
		KS_UN_EXP };
	enum { N = 1 << 16 };
	float *x = malloc(N * 4), *y = malloc(N * 4), *cpu;
	int64_t n = N;
	void *dev = c->open();
	size_t o;
	int i;

	gpu_un_inputs(x, N, 21);
	for (o = 0; o < sizeof ops / sizeof ops[0]; o++) {
		ks_ir_kernel_t *k = gpu_un_kernel(ops[o]);
		gpu_arg_t args[3] = { { x, N * 4 }, { y, N * 4 }, { &n, 8 } };
		gpu_arg_t cp[3];

		memset(y, 0, N * 4);
		conform_run_both(c, dev, k, args, 3, cp);
		cpu = cp[1].data;
		for (i = 0; i < N; i++) {
			volatile float xi = x[i];
			float want;
			int nan_ok;

			want = ops[o] == KS_UN_SQRT ? sqrtf(xi) :
			    ops[o] == KS_UN_NEG ? -xi : ops[o] == KS_UN_ABS ?
			    fabsf(xi) : ref_expf(xi);
			/* sqrt of a negative: any NaN (the default NaN's
			 * sign is the device's); exp(NaN): x + x. */
			nan_ok = (ops[o] == KS_UN_SQRT || ops[o] == KS_UN_EXP) &&
			    isnan(want) && isnan(y[i]) && isnan(cpu[i]);
			cr_assert(nan_ok || (gpu_bits(y[i]) == gpu_bits(want) &&
			    gpu_bits(cpu[i]) == gpu_bits(want)),
			    "%s(0x%08x): %s 0x%08x cpu 0x%08x want 0x%08x",
			    ks_unop_name(ops[o]), gpu_bits(x[i]), c->be->name,
			    gpu_bits(y[i]), gpu_bits(cpu[i]), gpu_bits(want));
		}
		conform_free_copies(args, cp, 3);
		ks_ir_free(k);
	}
	free(x);
	free(y);
	c->close(dev);
}

/* i32 buffers and casts: bitwise the cpu backend and the C reference. */
static inline void conform_i32(const conform_t *c)
{
	enum { N = 4096 };
	int32_t *P = malloc(N * 4), *yi = calloc(N, 4), *zi = calloc(N, 4);
	float *X = malloc(N * 4), *yf = calloc(N, 4), *ye = calloc(N, 4);
	int64_t n = N;
	ks_ir_kernel_t *k = gpu_i32_kernel();
	gpu_arg_t args[7] = { { P, N * 4 }, { X, N * 4 }, { yf, N * 4 },
		{ yi, N * 4 }, { zi, N * 4 }, { ye, N * 4 }, { &n, 8 } }, cp[7];
	void *dev = c->open();

	gpu_i32_inputs(P, X, N, 4);
	conform_run_both(c, dev, k, args, 7, cp);
	gpu_i32_check(c->be->name, P, X, yf, yi, zi, ye, N);
	gpu_i32_check("cpu", P, X, cp[2].data, cp[3].data, cp[4].data,
	    cp[5].data, N);
	conform_free_copies(args, cp, 7);
	ks_ir_free(k);
	c->close(dev);
	free(P);
	free(yi);
	free(zi);
	free(X);
	free(yf);
	free(ye);
}

/* An unrolled kernel (LANES phases from a uniform loop, copies of a lane
 * loop, fresh lane variables, a reduce) runs bitwise as the cpu backend
 * and as the loop form on the device. */
static inline void conform_unrolled(const conform_t *c)
{
	enum { G = 16, NX = G * 384 };
	float *x = malloc(NX * 4), w[96], y0[G], y1[G], *cpu;
	int64_t g = G;
	ks_ir_kernel_t *k0 = gpu_unroll_kernel(), *k1 = gpu_unroll_kernel();
	gpu_arg_t a0[4] = { { x, NX * 4 }, { w, sizeof w }, { y0, sizeof y0 },
		{ &g, 8 } };
	gpu_arg_t a1[4] = { { x, NX * 4 }, { w, sizeof w }, { y1, sizeof y1 },
		{ &g, 8 } }, cp[4];
	char err[512];
	void *dev;

	gpu_adversarial(x, NX, 9);
	gpu_adversarial(w, 96, 10);
	cr_assert_eq(ks_pass_run(k1, err, sizeof err), KS_OK, "%s", err);
	dev = c->open();
	c->run(dev, k0, a0);
	conform_run_both(c, dev, k1, a1, 4, cp);
	cpu = cp[2].data;
	cr_assert_eq(memcmp(y0, y1, sizeof y0), 0, "unrolled differs on %s",
	    c->be->name);
	cr_assert_eq(memcmp(y1, cpu, sizeof y1), 0, "%s differs from cpu",
	    c->be->name);
	conform_free_copies(a1, cp, 4);
	ks_ir_free(k0);
	ks_ir_free(k1);
	c->close(dev);
	free(x);
}

/* Local arrays and barriers: values pass between the lanes of a group;
 * bitwise the cpu backend and the C reference. */
static inline void conform_local(const conform_t *c)
{
	enum { N = 2048 };
	float *x = malloc(N * 4), *y = calloc(N, 4);
	int64_t n = N;
	ks_ir_kernel_t *k = gpu_local_kernel();
	gpu_arg_t args[3] = { { x, N * 4 }, { y, N * 4 }, { &n, 8 } }, cp[3];
	char *src;
	void *dev;

	cr_assert_eq(ks_pass_run(k, NULL, 0), KS_OK);
	src = gpu_source(c->be, k);
	cr_assert(strstr(src, c->local_decl) != NULL, "%s", src);
	cr_assert(strstr(src, c->barrier) != NULL, "%s", src);
	free(src);
	gpu_adversarial(x, N, 14);
	dev = c->open();
	conform_run_both(c, dev, k, args, 3, cp);
	gpu_local_check(c->be->name, x, y, N);
	gpu_local_check("cpu", x, cp[1].data, N);
	conform_free_copies(args, cp, 3);
	ks_ir_free(k);
	c->close(dev);
	free(x);
	free(y);
}

/* f32 patterns for the store conversions: every upper half with low halves
 * around the bf16 ties, the f16 midpoints and their neighbours, random. */
static inline uint32_t *conform_store_patterns(int64_t *count)
{
	static const uint32_t lows[] = { 0x0000, 0x0001, 0x7fff, 0x8000,
		0x8001, 0xffff, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000 };
	int64_t cap = 65536 * 11 + 65536 * 4 + 65536, n = 0;
	uint32_t *p = malloc((size_t)cap * 4), h, l;
	uint64_t s = 42;

	for (h = 0; h < 65536; h++)
		for (l = 0; l < sizeof lows / sizeof lows[0]; l++)
			p[n++] = h << 16 | lows[l];
	for (h = 0; h < 65536; h++) {   /* f16 halfway cases and neighbours */
		uint32_t f = ref_f32_bits(ref_f16_to_f32((uint16_t)h));

		p[n++] = f + 0x1000;
		p[n++] = f + 0x0fff;
		p[n++] = f + 0x1001;
		p[n++] = f - 1;
	}
	while (n < cap)
		p[n++] = (uint32_t)gpu_rng(&s);
	*count = n;
	return p;
}

/* Stores to f16 and bf16 round to nearest even, as the cpu backend and
 * ref.h do. */
static inline void conform_stores(const conform_t *c)
{
	ks_dtype_t dts[2] = { KS_DTYPE_F16, KS_DTYPE_BF16 };
	int64_t n, i;
	uint32_t *src = conform_store_patterns(&n);
	void *dev = c->open();
	int d;

	cr_assert_eq(n % 32, 0);
	for (d = 0; d < 2; d++) {
		ks_ir_kernel_t *k = gpu_copy_kernel(KS_DTYPE_F32, dts[d]);
		uint16_t *dst = calloc((size_t)n, 2), *cpu;
		gpu_arg_t args[3] = { { src, (size_t)n * 4 },
			{ dst, (size_t)n * 2 }, { &n, 8 } }, cp[3];
		int64_t bad = 0;

		conform_run_both(c, dev, k, args, 3, cp);
		cpu = cp[1].data;
		cr_assert_eq(memcmp(dst, cpu, (size_t)n * 2), 0, "%s stores "
		    "differ from cpu", ks_dtype_name(dts[d]));
		for (i = 0; i < n; i++) {
			float f = ref_bits_f32(src[i]);
			uint16_t want = dts[d] == KS_DTYPE_F16 ?
			    ref_f32_to_f16(f) : ref_f32_to_bf16(f);

			if (dst[i] != want && bad++ < 3)
				cr_log_error("%s %s 0x%08x: 0x%04x want "
				    "0x%04x", c->be->name,
				    ks_dtype_name(dts[d]), src[i], dst[i],
				    want);
		}
		cr_assert_eq(bad, 0, "%lld of %lld stores off ref.h",
		    (long long)bad, (long long)n);
		conform_free_copies(args, cp, 3);
		free(dst);
		ks_ir_free(k);
	}
	free(src);
	c->close(dev);
}

/* One reduction kernel over G groups of adversarial data (f32 sums: every
 * order rounds differently; max: NaN, signed zeros and -Inf mixed in; i64:
 * integers): the device equals cpu bit for bit. */
static inline void conform_reduce_one(const conform_t *c, void *dev,
    int nlanes, ks_redop_t op, ks_ty_t t)
{
	static const float special[] = { -0.0f, 0.0f, NAN, -INFINITY };
	enum { G = 512 };
	int64_t groups = G, n = (int64_t)G * nlanes, i;
	float *x = malloc(sizeof(float) * (size_t)n), y[G], *cpu;
	ks_ir_kernel_t *k = gpu_reduce_kernel(nlanes, op, t);
	gpu_arg_t args[3] = { { x, sizeof(float) * (size_t)n },
		{ y, sizeof y }, { &groups, 8 } }, cp[3];
	uint64_t s = 3;

	gpu_adversarial(x, (size_t)n, 7 + (uint64_t)nlanes);
	for (i = 0; i < n; i++) {
		if (t == KS_TY_I64)
			x[i] = truncf(x[i] * 1e3f);
		else if (op == KS_RED_MAX && gpu_rng(&s) % 4 == 0)
			x[i] = special[(s >> 8) % 4];
	}
	memset(y, 0, sizeof y);
	conform_run_both(c, dev, k, args, 3, cp);
	cpu = cp[1].data;
	for (i = 0; i < G; i++)
		cr_assert(gpu_bits(y[i]) == gpu_bits(cpu[i]) ||
		    (y[i] != y[i] && cpu[i] != cpu[i]), "%s %s %s %d lanes "
		    "group %lld: %a, cpu %a", c->be->name, op == KS_RED_MAX ?
		    "max" : "sum", ks_ty_name(t), nlanes, (long long)i, y[i],
		    cpu[i]);
	conform_free_copies(args, cp, 3);
	ks_ir_free(k);
	free(x);
}

/* The canonical tree (f32 sum), the max tree with NaN and signed zeros,
 * and i64 sum and max, for 32 and fewer lanes. */
static inline void conform_reductions(const conform_t *c)
{
	static const int lanes[3] = { 32, 8, 1 };
	void *dev = c->open();
	int o, t, l;

	for (o = 0; o < 2; o++)
		for (t = 0; t < 2; t++)
			for (l = 0; l < 3; l++)
				conform_reduce_one(c, dev, lanes[l], o ?
				    KS_RED_MAX : KS_RED_SUM, t ? KS_TY_I64 :
				    KS_TY_F32);
	c->close(dev);
}

/*
 * min/max (NaN ignored, -0 < +0), fma (one rounding), mul+add (two: no
 * contraction), IEEE division, casts and select, element-wise on special
 * and random values: the device equals cpu bit for bit (NaN results
 * compare as NaN: payloads of arithmetic NaNs are the hardware's).
 */
static inline void conform_elementwise(const conform_t *c)
{
	static const float vals[] = { NAN, -NAN, 0.0f, -0.0f, 1.0f, -1.0f,
		INFINITY, -INFINITY, 0x1p-149f, 3.5f, 0x1p-126f,
		-0x1.fffffep127f };
	enum { NV = sizeof vals / sizeof vals[0], N = 4096 };
	ks_ir_kernel_t *k = gpu_elementwise_kernel();
	float *in[GPU_EW_IN], *out[GPU_EW_OUT], *cpu;
	gpu_arg_t args[GPU_EW_IN + GPU_EW_OUT + 1];
	gpu_arg_t cp[GPU_EW_IN + GPU_EW_OUT + 1];
	int64_t n = N;
	uint64_t s = 5;
	void *dev = c->open();
	int i, j, fused = 0;

	for (j = 0; j < GPU_EW_IN; j++)
		in[j] = malloc(sizeof(float) * N);
	for (i = 0; i < N; i++) {
		float a = (float)((double)(gpu_rng(&s) >> 11) * 0x1p-53);
		float b = (float)((double)(gpu_rng(&s) >> 11) * 0x1p-53);

		in[0][i] = a * 1000.0f - 500.0f;
		in[1][i] = b * 3.0f - 1.0f;
		in[2][i] = -in[0][i] * in[1][i];    /* exposes a*b's rounding */
		if (i < NV * NV) {              /* every pair of specials */
			in[0][i] = vals[i % NV];
			in[1][i] = vals[i / NV];
		}
	}
	for (j = 0; j < GPU_EW_IN; j++)
		args[j] = (gpu_arg_t){ in[j], sizeof(float) * N };
	for (j = 0; j < GPU_EW_OUT; j++) {
		out[j] = calloc(N, sizeof(float));
		args[GPU_EW_IN + j] = (gpu_arg_t){ out[j], sizeof(float) * N };
	}
	args[GPU_EW_IN + GPU_EW_OUT] = (gpu_arg_t){ &n, 8 };
	conform_run_both(c, dev, k, args, GPU_EW_IN + GPU_EW_OUT + 1, cp);
	for (j = 0; j < GPU_EW_OUT; j++) {
		cpu = cp[GPU_EW_IN + j].data;
		for (i = 0; i < N; i++) {
			/* f32 -> i64 of NaN, Inf or out of range is undefined
			 * (the IR's kernels never do it). */
			if ((j == 5 || j == 6) && !(fabsf(in[0][i]) < 1024.0f))
				continue;
			cr_assert(gpu_bits(out[j][i]) == gpu_bits(cpu[i]) ||
			    (out[j][i] != out[j][i] && cpu[i] != cpu[i]),
			    "output %d, element %d (a=%a b=%a c=%a): %s %a, "
			    "cpu %a", j, i, in[0][i], in[1][i], in[2][i],
			    c->be->name, out[j][i], cpu[i]);
		}
	}
	conform_free_copies(args, cp, GPU_EW_IN + GPU_EW_OUT + 1);
	/* The data tell fma from mul+add, so "no contraction" is tested. */
	for (i = NV * NV; i < N; i++)
		fused += gpu_bits(out[2][i]) != gpu_bits(out[3][i]);
	cr_assert_gt(fused, N / 4, "fma and mul+add agree on %d of %d", N -
	    fused, N);
	/* min/max of the specials: exactly ref semantics. */
	for (i = 0; i < NV * NV; i++) {
		float a = in[0][i], b = in[1][i];

		if (a != a && b != b)
			continue;
		if (a == b) {
			cr_assert_eq(gpu_bits(out[0][i]),
			    gpu_bits(a) | gpu_bits(b));
			cr_assert_eq(gpu_bits(out[1][i]),
			    gpu_bits(a) & gpu_bits(b));
		} else {
			cr_assert_eq(gpu_bits(out[0][i]), gpu_bits(a != a ? b :
			    b != b ? a : a < b ? a : b), "min(%a, %a)", a, b);
			cr_assert_eq(gpu_bits(out[1][i]), gpu_bits(a != a ? b :
			    b != b ? a : a > b ? a : b), "max(%a, %a)", a, b);
		}
	}
	for (j = 0; j < GPU_EW_IN; j++)
		free(in[j]);
	for (j = 0; j < GPU_EW_OUT; j++)
		free(out[j]);
	ks_ir_free(k);
	c->close(dev);
}

/* Uniform integer code, bools and constants (gpu.h's gpu_int_kernel):
 * the cpu backend's bits and the values C gives. */
static inline void conform_uniform_integers(const conform_t *c)
{
	static const float want[12] = { -3, -1, -7, 2, -2, 16777216.0f,
		16777220.0f, 10, 20, 1, 1, 0 };
	ks_ir_kernel_t *k = gpu_int_kernel();
	float y[GPU_INT_OUT], *cpu;
	int64_t a = -7, b = 2, big = (1 << 24) + 1;
	float f = -2.5f;
	gpu_arg_t args[5] = { { y, sizeof y }, { &a, 8 }, { &b, 8 },
		{ &f, 4 }, { &big, 8 } }, cp[5];
	void *dev = c->open();
	int i;

	memset(y, 0, sizeof y);
	conform_run_both(c, dev, k, args, 5, cp);
	cpu = cp[0].data;
	cr_assert_eq(memcmp(y, cpu, sizeof y), 0);
	for (i = 0; i < 12; i++)
		cr_assert_eq(y[i], want[i], "case %d: %g", i, y[i]);
	cr_assert_eq(gpu_bits(y[15]), 0x7fc12345u, "NaN payload of a "
	    "constant");
	conform_free_copies(args, cp, 5);
	ks_ir_free(k);
	c->close(dev);
}

/* Byte buffers, f16bits and the bit operators: bitwise the cpu backend
 * and plain C, over every byte and every f16 pattern. */
static inline void conform_bytes(const conform_t *c)
{
	enum { N = 65536 };
	uint8_t *B = malloc(N);
	int32_t *o[5];
	float *yh = calloc(N, 4);
	int64_t n = N;
	ks_ir_kernel_t *k = gpu_bytes_kernel();
	gpu_arg_t args[8], cp[8];
	void *dev = c->open();
	int i;

	for (i = 0; i < 5; i++)
		o[i] = calloc(N, 4);
	args[0] = (gpu_arg_t){ B, N };
	args[1] = (gpu_arg_t){ o[0], N * 4 };
	args[2] = (gpu_arg_t){ yh, N * 4 };
	for (i = 1; i < 5; i++)
		args[2 + i] = (gpu_arg_t){ o[i], N * 4 };
	args[7] = (gpu_arg_t){ &n, 8 };
	gpu_bytes_in(B, N);
	conform_run_both(c, dev, k, args, 8, cp);
	cr_assert_eq(gpu_bytes_bad(c->be->name, B, o[0], yh, o[1], o[2],
	    o[3], o[4], N), 0);
	cr_assert_eq(gpu_bytes_bad("cpu", B, cp[1].data, cp[2].data,
	    cp[3].data, cp[4].data, cp[5].data, cp[6].data, N), 0);
	conform_free_copies(args, cp, 8);
	ks_ir_free(k);
	c->close(dev);
	for (i = 0; i < 5; i++)
		free(o[i]);
	free(B);
	free(yh);
}

/*
 * CONFORM_DEVICE_TESTS(SUITE, C): the suite's Test of each case above that
 * runs on a device, for the backend C describes (the cases without a
 * device are called from the tests of SUITE that also check what only
 * that backend has).
 */
#define CONFORM_DEVICE_TESTS(suite, c)                                   \
	Test(suite, loads_of_every_f16_and_bf16_pattern_equal_cpu_and_ref) \
	{ conform_loads(&(c)); }                                         \
	Test(suite, sqrt_neg_abs_exp_bitwise_equal_cpu_and_ref)          \
	{ conform_unary(&(c)); }                                         \
	Test(suite, i32_buffers_and_casts_equal_cpu_and_ref)             \
	{ conform_i32(&(c)); }                                           \
	Test(suite, byte_buffers_and_bit_operators_equal_cpu_and_ref)    \
	{ conform_bytes(&(c)); }                                         \
	Test(suite, unrolled_kernel_equals_cpu_and_the_loop_form)        \
	{ conform_unrolled(&(c)); }                                      \
	Test(suite, local_arrays_and_barriers_equal_cpu_and_ref)         \
	{ conform_local(&(c)); }                                         \
	Test(suite, stores_round_to_nearest_even_like_cpu_and_ref)       \
	{ conform_stores(&(c)); }                                        \
	Test(suite, reductions_follow_the_canonical_tree_like_cpu)       \
	{ conform_reductions(&(c)); }                                    \
	Test(suite, elementwise_arithmetic_equals_cpu)                   \
	{ conform_elementwise(&(c)); }                                   \
	Test(suite, uniform_integer_code_and_constants_equal_cpu)        \
	{ conform_uniform_integers(&(c)); }

#endif
