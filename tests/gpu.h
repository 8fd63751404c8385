/*
 * Shared by tests/test_cuda.c and tests/test_opencl.c: golden files of the
 * emitted source, gemm IR with a chosen variant, small hand-built kernels,
 * and running a kernel on the cpu backend (the reference backend the GPU
 * dialects must match bit for bit).
 *
 * Golden files: tests/golden/gemm_<variant>_<dtype>.cu and .cl, compared
 * byte for byte; KSPEC_GOLDEN_UPDATE=1 (`make golden`) rewrites them.  They
 * are found next to this file (from __FILE__, so run from the repository
 * root as `make test` does) or in $KSPEC_GOLDEN_DIR.
 */
#ifndef KS_TEST_GPU_H
#define KS_TEST_GPU_H

#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../jit/jit.h"

/* ---- golden files ---- */

/* The shapes of the golden sources, one per gemm variant (0 = dynamic). */
static const struct {
	const char *variant;
	int64_t M, N, K;
} golden_shapes[] = {
	{ "general", 0, 0, 0 },
	{ "gemv_m1", 1, 4096, 4096 },
	{ "small_m", 3, 4096, 4096 },
};

static inline void gpu_golden_path(char *out, size_t n, const char *name)
{
	const char *dir = getenv("KSPEC_GOLDEN_DIR");
	const char *slash = strrchr(__FILE__, '/');

	if (dir != NULL && *dir != '\0')
		snprintf(out, n, "%s/%s", dir, name);
	else if (slash != NULL)
		snprintf(out, n, "%.*s/golden/%s", (int)(slash - __FILE__),
		    __FILE__, name);
	else
		snprintf(out, n, "golden/%s", name);
}

/* The file's text (caller frees), or NULL. */
static inline char *gpu_read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *p;
	long n;

	if (f == NULL)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	p = malloc((size_t)n + 1);
	cr_assert_not_null(p);
	cr_assert_eq(fread(p, 1, (size_t)n, f), (size_t)n);
	p[n] = '\0';
	fclose(f);
	return p;
}

/* 0 when GOT equals golden file NAME, else the 1-based line of the first
 * difference (-1 when the file is missing). */
static inline long gpu_golden_diff(const char *got, const char *name)
{
	char path[512], *want;
	long line = 1;
	size_t i;

	gpu_golden_path(path, sizeof path, name);
	want = gpu_read_file(path);
	if (want == NULL)
		return -1;
	for (i = 0; got[i] && got[i] == want[i]; i++)
		if (got[i] == '\n')
			line++;
	if (got[i] == want[i])
		line = 0;
	free(want);
	return line;
}

/* Asserts GOT equals golden file NAME, or rewrites the file under
 * KSPEC_GOLDEN_UPDATE=1. */
static inline void gpu_check_golden(const char *got, const char *name)
{
	const char *update = getenv("KSPEC_GOLDEN_UPDATE");
	char path[512];
	long line;

	gpu_golden_path(path, sizeof path, name);
	if (update != NULL && strcmp(update, "1") == 0) {
		FILE *f = fopen(path, "wb");

		cr_assert_not_null(f, "cannot write %s", path);
		cr_assert_eq(fwrite(got, 1, strlen(got), f), strlen(got));
		cr_assert_eq(fclose(f), 0);
		return;
	}
	line = gpu_golden_diff(got, name);
	cr_assert_neq(line, -1, "missing golden file %s (make golden)", path);
	cr_assert_eq(line, 0, "%s differs from the emitted source at line "
	    "%ld:\n--- emitted:\n%s", path, line, got);
}

/* ---- a kernel's IR with a chosen variant ---- */

/*
 * The specialized IR of DEF's VARIANT (NULL: the library's own choice) for
 * dtype DT and MODE, dim i a constant VALS[i] or dynamic (0), in declared
 * order.  Forcing a variant lets a test run `general` at the shape of a
 * specialization, and a specialization whatever the selection policy says.
 */
static inline ks_ir_kernel_t *gpu_kernel_ir(const ks_kernel_def_t *def,
    const char *variant, ks_dtype_t dt, ks_mode_t mode, const int64_t *vals)
{
	ks_dim_t dims[KS_MAX_DIMS];
	ks_spec_t spec;
	ks_ir_kernel_t *k = NULL;
	char err[512];
	int i;

	for (i = 0; i < def->ndims; i++) {
		dims[i].name = def->dims[i];
		dims[i].is_const = vals[i] != 0;
		dims[i].value = vals[i];
	}
	cr_assert_eq(ks_kernel_validate(def, dt, mode, dims, def->ndims, &spec,
	    err, sizeof err), KS_OK, "validate %s: %s", def->name, err);
	cr_assert_eq(ks_specialize_variant(&spec, variant, &k, err,
	    sizeof err), KS_OK, "specialize %s.%s: %s", def->name, variant ?
	    variant : "(selected)", err);
	if (variant != NULL)
		cr_assert_str_eq(k->variant, variant);
	return k;
}

/* gemm's IR at (M, N, K), 0 for a dynamic dim. */
static inline ks_ir_kernel_t *gpu_gemm_ir(const char *variant, ks_dtype_t dt,
    int64_t M, int64_t N, int64_t K)
{
	const int64_t vals[3] = { M, N, K };

	return gpu_kernel_ir(&ks_kernel_gemm, variant, dt, KS_MODE_EXACT,
	    vals);
}

/* The emitted source of K by backend B; caller frees. */
static inline char *gpu_source(const ks_backend_t *b, const ks_ir_kernel_t *k)
{
	ks_buf_t s;
	char err[512];

	ks_buf_init(&s);
	cr_assert_eq(b->source(k, &s, err, sizeof err), KS_OK, "%s source: %s",
	    b->name, err);
	return ks_buf_steal(&s, NULL);
}

/* Clears the unroll hint of every FOR under S (a schedule the emitters
 * may use; the tests compare what a kernel becomes without it). */
static inline void ks_test_clear_hints(ks_stmt_t *s)
{
	int i;

	if (s == NULL)
		return;
	if (s->kind == KS_S_FOR)
		s->unroll = 0;
	ks_test_clear_hints(s->body);
	ks_test_clear_hints(s->orelse);
	for (i = 0; i < s->nitems; i++)
		ks_test_clear_hints(s->items[i]);
}

/* ---- hand-built kernels ---- */

#define GI(v) ks_x_i64(k, (v))
#define GV(v) ks_x_var(k, (v))
#define GP(p) ks_x_param(k, (p))
#define GBIN(op, a, b) ks_x_bin(k, KS_OP_##op, (a), (b))

/* i = group * nlanes + lane */
static inline ks_expr_t *gpu_gidx(ks_ir_kernel_t *k)
{
	return GBIN(ADD, GBIN(MUL, ks_x_group(k), GI(k->nlanes)),
	    ks_x_lane(k));
}

/* dst[i] = src[i] through f32, grid n / 32. */
static inline ks_ir_kernel_t *gpu_copy_kernel(ks_dtype_t from, ks_dtype_t to)
{
	ks_ir_kernel_t *k = ks_ir_new("copy", "t", 32);
	int src = ks_ir_buffer(k, "src", from, KS_ACCESS_READ);
	int dst = ks_ir_buffer(k, "dst", to, KS_ACCESS_WRITE);
	int n = ks_ir_scalar(k, "n", KS_TY_I64);
	ks_stmt_t *lanes = ks_s_lanes(k);

	k->grid = GBIN(DIV, GP(n), GI(32));
	ks_s_append(k, lanes->body, ks_s_store(k, dst, gpu_gidx(k),
	    ks_x_load(k, src, gpu_gidx(k))));
	ks_s_append(k, k->body, lanes);
	return k;
}

/* y[g] = reduce(op, v), v[lane] = x[g * nlanes + lane], of type T (an i64
 * reduction loads f32 values and casts them), grid `groups`. */
static inline ks_ir_kernel_t *gpu_reduce_kernel(int nlanes, ks_redop_t op,
    ks_ty_t t)
{
	ks_ir_kernel_t *k = ks_ir_new("red", "t", nlanes);
	int x = ks_ir_buffer(k, "x", KS_DTYPE_F32, KS_ACCESS_READ);
	int y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int g = ks_ir_scalar(k, "groups", KS_TY_I64);
	int v = ks_ir_var(k, "v", t, KS_VAR_LANE);
	ks_stmt_t *lanes = ks_s_lanes(k);
	ks_expr_t *ld;

	k->grid = GP(g);
	ld = ks_x_load(k, x, gpu_gidx(k));
	if (t != KS_TY_F32)
		ld = ks_x_cast(k, t, ld);
	ks_s_append(k, lanes->body, ks_s_assign(k, v, ld));
	ks_s_append(k, k->body, ks_s_decl(k, v, NULL));
	ks_s_append(k, k->body, lanes);
	ld = ks_x_reduce(k, op, v);
	if (t != KS_TY_F32)
		ld = ks_x_cast(k, KS_TY_F32, ld);
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_group(k), ld));
	return k;
}

/*
 * Element-wise f32 arithmetic, one output buffer per operation, grid n /
 * 32: mn = min(a, b), mx = max(a, b), fm = fma(a, b, c), ma = a * b + c,
 * dv = a / b, ci = f32(i64(a)) (toward zero, then RNE), cl = f32(i64 a*2^20
 * cast), sl = select(a < b, a + c, b - c).
 */
enum { GPU_EW_IN = 3, GPU_EW_OUT = 8 };

static inline ks_ir_kernel_t *gpu_elementwise_kernel(void)
{
	static const char *const outs[GPU_EW_OUT] = {
		"mn", "mx", "fm", "ma", "dv", "ci", "cl", "sl" };
	ks_ir_kernel_t *k = ks_ir_new("ew", "t", 32);
	int a = ks_ir_buffer(k, "a", KS_DTYPE_F32, KS_ACCESS_READ);
	int b = ks_ir_buffer(k, "b", KS_DTYPE_F32, KS_ACCESS_READ);
	int c = ks_ir_buffer(k, "c", KS_DTYPE_F32, KS_ACCESS_READ);
	int o[GPU_EW_OUT], n, i, va, vb, vc;
	ks_stmt_t *lanes = ks_s_lanes(k), *blk = lanes->body;

	for (i = 0; i < GPU_EW_OUT; i++)
		o[i] = ks_ir_buffer(k, outs[i], KS_DTYPE_F32, KS_ACCESS_WRITE);
	n = ks_ir_scalar(k, "n", KS_TY_I64);
	k->grid = GBIN(DIV, GP(n), GI(32));
	va = ks_ir_var(k, "va", KS_TY_F32, KS_VAR_LANE);
	vb = ks_ir_var(k, "vb", KS_TY_F32, KS_VAR_LANE);
	vc = ks_ir_var(k, "vc", KS_TY_F32, KS_VAR_LANE);
	ks_s_append(k, blk, ks_s_decl(k, va, ks_x_load(k, a, gpu_gidx(k))));
	ks_s_append(k, blk, ks_s_decl(k, vb, ks_x_load(k, b, gpu_gidx(k))));
	ks_s_append(k, blk, ks_s_decl(k, vc, ks_x_load(k, c, gpu_gidx(k))));
	ks_s_append(k, blk, ks_s_store(k, o[0], gpu_gidx(k),
	    GBIN(MIN, GV(va), GV(vb))));
	ks_s_append(k, blk, ks_s_store(k, o[1], gpu_gidx(k),
	    GBIN(MAX, GV(va), GV(vb))));
	ks_s_append(k, blk, ks_s_store(k, o[2], gpu_gidx(k),
	    ks_x_fma(k, GV(va), GV(vb), GV(vc))));
	ks_s_append(k, blk, ks_s_store(k, o[3], gpu_gidx(k),
	    GBIN(ADD, GBIN(MUL, GV(va), GV(vb)), GV(vc))));
	ks_s_append(k, blk, ks_s_store(k, o[4], gpu_gidx(k),
	    GBIN(DIV, GV(va), GV(vb))));
	ks_s_append(k, blk, ks_s_store(k, o[5], gpu_gidx(k),
	    ks_x_cast(k, KS_TY_F32, ks_x_cast(k, KS_TY_I64,
	    GBIN(MUL, GV(va), ks_x_f32(k, 1048576.0f))))));
	ks_s_append(k, blk, ks_s_store(k, o[6], gpu_gidx(k),
	    ks_x_cast(k, KS_TY_F32, GBIN(MUL, ks_x_cast(k, KS_TY_I64,
	    GBIN(MUL, GV(va), ks_x_f32(k, 1048576.0f))), GI(1 << 20)))));
	ks_s_append(k, blk, ks_s_store(k, o[7], gpu_gidx(k),
	    ks_x_select(k, GBIN(LT, GV(va), GV(vb)), GBIN(ADD, GV(va), GV(vc)),
	    GBIN(SUB, GV(vb), GV(vc)))));
	ks_s_append(k, k->body, lanes);
	return k;
}

/*
 * Uniform integer code, bools and constants, one group: y[0..11] as in
 * test_jit's integer test, plus exact f32 constants of every kind.
 */
enum { GPU_INT_OUT = 22 };

static inline ks_ir_kernel_t *gpu_int_kernel(void)
{
	static const uint32_t pats[] = {
		0x80000000, 0x7f800000, 0xff800000, 0x7fc12345, 0xffa00001,
		0x00000001, 0x807fffff, 0x7f7fffff, 0x3f800001, 0x4b800000,
	};
	ks_ir_kernel_t *k = ks_ir_new("ints", "t", 32);
	int y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int a = ks_ir_scalar(k, "a", KS_TY_I64);
	int b = ks_ir_scalar(k, "b", KS_TY_I64);
	int f = ks_ir_scalar(k, "f", KS_TY_F32);
	int big = ks_ir_scalar(k, "big", KS_TY_I64);
	ks_stmt_t *blk = k->body;
	int i = 0;
	size_t j;

	k->grid = GI(1);
#define GOUT(e) ks_s_append(k, blk, ks_s_store(k, y, GI(i++), (e)))
	GOUT(ks_x_cast(k, KS_TY_F32, GBIN(DIV, GP(a), GP(b))));
	GOUT(ks_x_cast(k, KS_TY_F32, GBIN(REM, GP(a), GP(b))));
	GOUT(ks_x_cast(k, KS_TY_F32, GBIN(MIN, GP(a), GP(b))));
	GOUT(ks_x_cast(k, KS_TY_F32, GBIN(MAX, GP(a), GP(b))));
	GOUT(ks_x_cast(k, KS_TY_F32, ks_x_cast(k, KS_TY_I64, GP(f))));
	GOUT(ks_x_cast(k, KS_TY_F32, GP(big)));
	GOUT(ks_x_cast(k, KS_TY_F32, GBIN(ADD, GP(big), GI(2))));
	GOUT(ks_x_select(k, GBIN(LT, GP(a), GP(b)), ks_x_f32(k, 10.0f),
	    ks_x_f32(k, 20.0f)));
	GOUT(ks_x_select(k, GBIN(AND, GBIN(LT, GP(b), GP(a)),
	    ks_x_bool(k, 1)), ks_x_f32(k, 10.0f), ks_x_f32(k, 20.0f)));
	GOUT(ks_x_cast(k, KS_TY_F32, ks_x_cast(k, KS_TY_BOOL, GP(a))));
	GOUT(ks_x_cast(k, KS_TY_F32, GBIN(OR, GBIN(EQ, GP(a), GI(0)),
	    GBIN(LE, GP(b), GI(2)))));
	GOUT(ks_x_cast(k, KS_TY_F32, GBIN(NE, GP(a), GP(a))));
	for (j = 0; j < sizeof pats / sizeof pats[0]; j++) {
		float v;

		memcpy(&v, &pats[j], 4);
		GOUT(ks_x_f32(k, v));
	}
#undef GOUT
	cr_assert_eq(i, GPU_INT_OUT);
	return k;
}

/* ---- arguments and the cpu reference run ---- */

/* One per declared parameter of a kernel (bound ones are skipped): for a
 * buffer its host memory and size, for a scalar a pointer to its value. */
typedef ks_jit_arg_t gpu_arg_t;

/* The work-groups of K's grid with ARGS. */
static inline int64_t gpu_groups(const ks_ir_kernel_t *k,
    const gpu_arg_t *args)
{
	int64_t v = 0;

	cr_assert_eq(ks_jit_groups(k, args, &v), KS_OK,
	    "launch expression of %s.%s not evaluable", k->name, k->variant);
	return v;
}

/* Runs the whole grid of K, compiled and loaded as FN, on ARGS (one per
 * declared parameter; bound scalars are skipped), buffers in place. */
static inline void gpu_cpu_launch(const ks_ir_kernel_t *k,
    ks_jit_cpu_entry_t fn, gpu_arg_t *args)
{
	cr_assert_eq(ks_jit_cpu_call(k, fn, args), KS_OK, "grid of %s.%s",
	    k->name, k->variant);
}

/* K compiled on the cpu backend ("auto") and loaded, to run as often as
 * a test needs; gpu_cpu_build_close unloads it. */
typedef struct {
	ks_jit_artifact_t a;
	ks_jit_cpu_lib_t *lib;
	ks_jit_cpu_entry_t fn;
} gpu_cpu_build_t;

static inline void gpu_cpu_build_at(const ks_ir_kernel_t *k,
    const char *target, gpu_cpu_build_t *b)
{
	char err[2048];

	cr_assert_eq(ks_backend_cpu.compile(k, target, "so", &b->a, err,
	    sizeof err), KS_OK, "cpu %s: %s", target, err);
	cr_assert_eq(ks_jit_cpu_load(b->a.bytes, b->a.len, k->entry, &b->lib,
	    &b->fn, err, sizeof err), KS_OK, "%s", err);
}

static inline void gpu_cpu_build(const ks_ir_kernel_t *k, gpu_cpu_build_t *b)
{
	char target[KS_MAX_NAME], err[2048];

	cr_assert_eq(ks_backend_cpu.resolve_target("auto", target,
	    sizeof target, err, sizeof err), KS_OK, "%s", err);
	gpu_cpu_build_at(k, target, b);
}

/* Whether the cpu backend's assembly of K for TARGET contains S ("#APP":
 * inline asm, which only jit/cpu_vec.c's vector lanes emit). */
static inline int gpu_cpu_asm_has(const ks_ir_kernel_t *k,
    const char *target, const char *s)
{
	ks_buf_t b;
	char err[512];
	int has;

	ks_buf_init(&b);
	cr_assert_eq(ks_jit_cpu_assembly(k, target, &b, err, sizeof err),
	    KS_OK, "%s", err);
	has = memmem(b.data, b.len, s, strlen(s)) != NULL;
	ks_buf_close(&b);
	return has;
}

static inline void gpu_cpu_build_close(gpu_cpu_build_t *b)
{
	ks_jit_cpu_unload(b->lib);
	ks_jit_artifact_close(&b->a);
}

/* Compiles K on the cpu backend and runs the whole grid on ARGS (buffers
 * updated in place). */
static inline void gpu_run_cpu(const ks_ir_kernel_t *k, gpu_arg_t *args)
{
	gpu_cpu_build_t b;

	gpu_cpu_build(k, &b);
	gpu_cpu_launch(k, b.fn, args);
	gpu_cpu_build_close(&b);
}


/* ---- data ---- */

static inline uint64_t gpu_rng(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1Dull;
}

/* Values over 60 binades with random signs: every summation order rounds
 * differently somewhere. */
static inline void gpu_adversarial(float *x, size_t n, uint64_t seed)
{
	size_t i;

	for (i = 0; i < n; i++) {
		uint64_t r = gpu_rng(&seed);

		x[i] = ldexpf(1.0f + (float)(r & 0xffffff) / 16777216.0f,
		    (int)((r >> 24) % 60) - 30) * ((r >> 40) & 1 ? -1 : 1);
	}
}

static inline uint32_t gpu_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

/* ---- unary math ---- */

/* y[i] = op(x[i]) for i < n (n a multiple of 32), f32. */
static inline ks_ir_kernel_t *gpu_un_kernel(ks_unop_t op)
{
	ks_ir_kernel_t *k = ks_ir_new("un", ks_unop_name(op), 32);
	int x = ks_ir_buffer(k, "x", KS_DTYPE_F32, KS_ACCESS_READ);
	int y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int n = ks_ir_scalar(k, "n", KS_TY_I64);
	ks_stmt_t *lanes = ks_s_lanes(k);

	k->grid = GBIN(DIV, GP(n), GI(32));
	ks_s_append(k, lanes->body, ks_s_store(k, y, gpu_gidx(k),
	    ks_x_un(k, op, ks_x_load(k, x, gpu_gidx(k)))));
	ks_s_append(k, k->body, lanes);
	return k;
}

/*
 * N (a multiple of 32, >= 64) inputs for unary math: zeros, the smallest
 * and largest subnormals and normals, 1, Inf and NaN of both signs, then
 * random patterns over every exponent, subnormals and negatives included.
 */
static inline void gpu_un_inputs(float *x, size_t n, uint64_t seed)
{
	static const uint32_t fixed[] = { 0x00000000, 0x80000000, 0x00000001,
		0x80000001, 0x007fffff, 0x807fffff, 0x00800000, 0x7f7fffff,
		0xff7fffff, 0x3f800000, 0xbf800000, 0x7f800000, 0xff800000,
		0x7fc00000, 0xffc00000, 0x7fa00001, 0x40000000, 0x40800000,
		0x42b17218, 0x42b17217, 0xc2ce8ed0, 0xc2cff1b5, 0x3effffff };
	size_t i;

	for (i = 0; i < n; i++) {
		uint32_t u = i < sizeof(fixed) / sizeof(fixed[0]) ? fixed[i] :
		    (uint32_t)(gpu_rng(&seed) >> 32);

		if (i >= sizeof(fixed) / sizeof(fixed[0]) && i % 4 == 0)
			u &= 0x807fffffu;       /* a subnormal */
		memcpy(&x[i], &u, 4);
	}
}

/* Error of f32 GOT against the exact value WANT, in units of the f32 ulp
 * at WANT (subnormal spacing below the normals); 0 when both are the same
 * Inf or both NaN, huge when one is NaN or Inf and the other is not. */
static inline double gpu_ulps(float got, double want)
{
	double ulp;
	int e;

	if (isnan(got) || isnan(want))
		return isnan(got) && isnan(want) ? 0.0 : 1e30;
	if (isinf(want) || isinf(got)) {
		if (isinf(got) && (float)want == got)
			return 0.0;
		if (isinf(got))       /* ulp of the largest binade */
			return fabs(3.4028234663852886e38 - want) /
			    ldexp(1.0, 104);
		return 1e30;
	}
	frexp(want, &e);
	ulp = ldexp(1.0, (e - 1 < -126 ? -126 : e - 1) - 23);
	return fabs((double)got - want) / ulp;
}

/* ---- i32 ---- */

/*
 * An i32 buffer P and an f32 buffer X in, for i < n (a multiple of 32):
 *   yf[i] = f32(P[i])                    i32 -> f32, round to nearest even
 *   yi[i] = i32(i64(P[i]) * 3 + 1)       i32 -> i64, i64 -> i32 wraps
 *   zi[i] = i32(X[i])                    f32 -> i32 toward zero
 *   ye[i] = select(P[i] == v, 1.0, 0.0)  v = P[i] through an i32 lane var
 */
static inline ks_ir_kernel_t *gpu_i32_kernel(void)
{
	ks_ir_kernel_t *k = ks_ir_new("i32", "t", 32);
	int P = ks_ir_buffer_i32(k, "P", KS_ACCESS_READ);
	int X = ks_ir_buffer(k, "X", KS_DTYPE_F32, KS_ACCESS_READ);
	int yf = ks_ir_buffer(k, "yf", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int yi = ks_ir_buffer_i32(k, "yi", KS_ACCESS_WRITE);
	int zi = ks_ir_buffer_i32(k, "zi", KS_ACCESS_WRITE);
	int ye = ks_ir_buffer(k, "ye", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int n = ks_ir_scalar(k, "n", KS_TY_I64);
	int v = ks_ir_var(k, "v", KS_TY_I32, KS_VAR_LANE);
	ks_stmt_t *lanes = ks_s_lanes(k), *b = lanes->body;

	k->grid = GBIN(DIV, GP(n), GI(32));
	ks_s_append(k, b, ks_s_store(k, yf, gpu_gidx(k), ks_x_cast(k,
	    KS_TY_F32, ks_x_load(k, P, gpu_gidx(k)))));
	ks_s_append(k, b, ks_s_store(k, yi, gpu_gidx(k), ks_x_cast(k,
	    KS_TY_I32, GBIN(ADD, GBIN(MUL, ks_x_cast(k, KS_TY_I64,
	    ks_x_load(k, P, gpu_gidx(k))), GI(3)), GI(1)))));
	ks_s_append(k, b, ks_s_store(k, zi, gpu_gidx(k), ks_x_cast(k,
	    KS_TY_I32, ks_x_load(k, X, gpu_gidx(k)))));
	ks_s_append(k, b, ks_s_decl(k, v, ks_x_load(k, P, gpu_gidx(k))));
	ks_s_append(k, b, ks_s_store(k, ye, gpu_gidx(k), ks_x_select(k,
	    GBIN(EQ, ks_x_var(k, v), ks_x_load(k, P, gpu_gidx(k))),
	    ks_x_f32(k, 1.0f), ks_x_f32(k, 0.0f))));
	ks_s_append(k, k->body, lanes);
	return k;
}

/*
 * Byte buffers and the integer bit operators, over N bytes of B (N a
 * multiple of 32, at least 256), one lane per byte i:
 *   yb[i] = B[i]                                  a load gives 0..255
 *   yh[i] = f16bits(B[i] | B[i >> 8] << 8)        every f16 pattern when
 *                                                 N = 65536 (gpu_bytes_in)
 *   yn[i] = ((B[i] >> 4 & 15) - 8) * ((B[i] & 15) + 1)   nibbles, i32 - *
 *   yk[i] = (B[i] & 63 | (B[j] >> 6) << 4) ^ (B[j] << 3), j = (i + 1) % N
 *                                                 a 6-bit field, xor
 *   ys[i] = (B[i] - 128) >> 3                     i32 >> fills the sign
 *   yl[i] = i32((i64(B[i]) << 40 >> 37 | i64(B[i]) & 7) ^ 1)   i64 bits
 */
static inline ks_ir_kernel_t *gpu_bytes_kernel(void)
{
	ks_ir_kernel_t *k = ks_ir_new("bytes", "t", 32);
	int B = ks_ir_buffer_bytes(k, "B");
	int yb = ks_ir_buffer_i32(k, "yb", KS_ACCESS_WRITE);
	int yh = ks_ir_buffer(k, "yh", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int yn = ks_ir_buffer_i32(k, "yn", KS_ACCESS_WRITE);
	int yk = ks_ir_buffer_i32(k, "yk", KS_ACCESS_WRITE);
	int ys = ks_ir_buffer_i32(k, "ys", KS_ACCESS_WRITE);
	int yl = ks_ir_buffer_i32(k, "yl", KS_ACCESS_WRITE);
	int n = ks_ir_scalar(k, "n", KS_TY_I64);
	int b = ks_ir_var(k, "b", KS_TY_I32, KS_VAR_LANE);
	int c = ks_ir_var(k, "c", KS_TY_I32, KS_VAR_LANE);
	int w = ks_ir_var(k, "w", KS_TY_I64, KS_VAR_LANE);
	ks_stmt_t *lanes = ks_s_lanes(k), *L = lanes->body;
#define I32(v) ks_x_cast(k, KS_TY_I32, GI(v))
#define VB ks_x_var(k, b)
#define VC ks_x_var(k, c)

	k->grid = GBIN(DIV, GP(n), GI(32));
	ks_s_append(k, L, ks_s_decl(k, b, ks_x_load(k, B, gpu_gidx(k))));
	ks_s_append(k, L, ks_s_decl(k, c, ks_x_load(k, B, GBIN(REM,
	    GBIN(ADD, gpu_gidx(k), GI(1)), GP(n)))));
	ks_s_append(k, L, ks_s_store(k, yb, gpu_gidx(k), VB));
	ks_s_append(k, L, ks_s_store(k, yh, gpu_gidx(k), ks_x_un(k,
	    KS_UN_F16, GBIN(BOR, VB, GBIN(SHL, ks_x_load(k, B,
	    GBIN(SHR, gpu_gidx(k), GI(8))), I32(8))))));
	ks_s_append(k, L, ks_s_store(k, yn, gpu_gidx(k), GBIN(MUL,
	    GBIN(SUB, GBIN(BAND, GBIN(SHR, VB, I32(4)), I32(15)), I32(8)),
	    GBIN(ADD, GBIN(BAND, VB, I32(15)), I32(1)))));
	ks_s_append(k, L, ks_s_store(k, yk, gpu_gidx(k), GBIN(BXOR,
	    GBIN(BOR, GBIN(BAND, VB, I32(63)), GBIN(SHL, GBIN(SHR, VC,
	    I32(6)), I32(4))), GBIN(SHL, VC, I32(3)))));
	ks_s_append(k, L, ks_s_store(k, ys, gpu_gidx(k), GBIN(SHR,
	    GBIN(SUB, VB, I32(128)), I32(3))));
	ks_s_append(k, L, ks_s_decl(k, w, ks_x_cast(k, KS_TY_I64, VB)));
	ks_s_append(k, L, ks_s_store(k, yl, gpu_gidx(k), ks_x_cast(k,
	    KS_TY_I32, GBIN(BXOR, GBIN(BOR, GBIN(SHR, GBIN(SHL,
	    ks_x_var(k, w), GI(40)), GI(37)), GBIN(BAND, ks_x_var(k, w),
	    GI(7))), GI(1)))));
	ks_s_append(k, k->body, lanes);
#undef I32
#undef VB
#undef VC
	return k;
}

/* N bytes for gpu_bytes_kernel: B[i] = (i + 37 (i >> 8)) mod 256, so that
 * B[i] runs over every byte in each 256 and (B[i], B[i >> 8]) over every
 * pair for N = 65536. */
static inline void gpu_bytes_in(uint8_t *B, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		B[i] = (uint8_t)(i + 37 * (i >> 8));
}

/* The f32 value of f16 pattern H, by its definition (sign, exponent,
 * fraction; subnormals scaled by 2^-24), independent of the backends'
 * bit algorithm. */
static inline uint32_t gpu_f16_bits(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31;
	uint32_t m = h & 0x3ff;
	float v;

	if (e == 31)
		return sign | 0x7f800000u | m << 13;
	v = e ? ldexpf((float)(m | 0x400), (int)e - 25) :
	    ldexpf((float)m, -24);
	return sign | gpu_bits(v);
}

/* Counts gpu_bytes_kernel's outputs that differ from plain C, logging
 * the first; WHO names the backend (NULL: no log, for planted bugs). */
static inline size_t gpu_bytes_bad(const char *who, const uint8_t *B,
    const int32_t *yb, const float *yh, const int32_t *yn,
    const int32_t *yk, const int32_t *ys, const int32_t *yl, size_t n)
{
	size_t i, bad = 0;

	for (i = 0; i < n; i++) {
		int32_t b = B[i], c = B[(i + 1) % n];
		int64_t w = b;
		uint16_t h = (uint16_t)(b | B[i >> 8] << 8);
		int32_t want[5] = { b, ((b >> 4 & 15) - 8) * ((b & 15) + 1),
			((b & 63) | (c >> 6) << 4) ^ (c << 3), (b - 128) >> 3,
			(int32_t)((w << 40 >> 37 | (w & 7)) ^ 1) };
		int32_t got[5] = { yb[i], yn[i], yk[i], ys[i], yl[i] };
		int j;

		for (j = 0; j < 5; j++)
			if (got[j] != want[j] && bad++ < 5 && who)
				cr_log_error("%s: byte %zu (0x%02x), output %d: "
				    "%d, want %d", who, i, b, j, got[j],
				    want[j]);
		if (gpu_bits(yh[i]) != gpu_f16_bits(h) && bad++ < 5 && who)
			cr_log_error("%s: f16bits(0x%04x) = 0x%08x, want "
			    "0x%08x", who, h, gpu_bits(yh[i]),
			    gpu_f16_bits(h));
	}
	return bad;
}

/* Inputs of gpu_i32_kernel: P over the whole int32 range (extremes, 2^24
 * neighbours, ties of the f32 rounding), X in (-2^31, 2^31). */
static inline void gpu_i32_inputs(int32_t *P, float *X, size_t n,
    uint64_t seed)
{
	static const int32_t fixed[] = { 0, 1, -1, INT32_MAX, INT32_MIN,
		16777216, 16777217, 16777219, -16777217, 33554435,
		715827882, 715827883, -715827883, 2147483583, 2147483584 };
	size_t i;

	for (i = 0; i < n; i++) {
		uint64_t r = gpu_rng(&seed);

		P[i] = i < sizeof(fixed) / sizeof(fixed[0]) ? fixed[i] :
		    (int32_t)(uint32_t)(r >> 32);
		X[i] = (float)((double)(int32_t)(uint32_t)r * 0.999) *
		    (i % 3 ? 1.0f : 1e-6f);
	}
	X[0] = -0.0f;
	X[1] = -2.5f;
	X[2] = 2147483520.0f;          /* largest f32 below 2^31 */
	X[3] = -2147483648.0f;
}

/* Checks the outputs of gpu_i32_kernel against plain C, WHO naming the
 * backend in messages. */
static inline void gpu_i32_check(const char *who, const int32_t *P,
    const float *X, const float *yf, const int32_t *yi, const int32_t *zi,
    const float *ye, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		volatile int64_t p = P[i];
		float wf = (float)p;    /* RNE in the default rounding mode */
		int32_t wi = (int32_t)(uint32_t)((uint64_t)p * 3u + 1u);

		cr_assert_eq(gpu_bits(yf[i]), gpu_bits(wf), "%s: f32(%d) = %a,"
		    " want %a", who, P[i], (double)yf[i], (double)wf);
		cr_assert_eq(yi[i], wi, "%s: i32(%d * 3 + 1) = %d, want %d",
		    who, P[i], yi[i], wi);
		cr_assert_eq(zi[i], (int32_t)X[i], "%s: i32(%a) = %d", who,
		    (double)X[i], zi[i]);
		cr_assert_eq(ye[i], 1.0f, "%s: i32 lane variable", who);
	}
}

/* ---- unroll ---- */

/*
 * acc (lane) = 0; for c in 0..4 { lanes { for j in 0..3 { acc = acc +
 * x[((group * 4 + c) * 3 + j) * 32 + lane] * w[j * 32 + lane] } } };
 * a dead variable; y[group] = reduce_sum(acc).  After ks_pass_run: four
 * LANES phases, each with three copies of the lane loop, no dead decl.
 * Params x, w, y, G; x has G * 384 elements, w 96.
 */
static inline ks_ir_kernel_t *gpu_unroll_kernel(void)
{
	ks_ir_kernel_t *k = ks_ir_new("unr", "t", 32);
	int x = ks_ir_buffer(k, "x", KS_DTYPE_F32, KS_ACCESS_READ);
	int w = ks_ir_buffer(k, "w", KS_DTYPE_F32, KS_ACCESS_READ);
	int y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int g = ks_ir_scalar(k, "G", KS_TY_I64);
	int acc = ks_ir_var(k, "acc", KS_TY_F32, KS_VAR_LANE);
	int c = ks_ir_var(k, "c", KS_TY_I64, KS_VAR_UNIFORM);
	int j = ks_ir_var(k, "j", KS_TY_I64, KS_VAR_LANE);
	int dead = ks_ir_var(k, "dead", KS_TY_F32, KS_VAR_UNIFORM);
	ks_stmt_t *fc, *lanes, *fj;

	k->grid = GP(g);
	ks_s_append(k, k->body, ks_s_decl(k, acc, ks_x_f32(k, 0.0f)));
	fc = ks_s_for(k, c, GI(0), GI(4), 1);
	ks_s_append(k, k->body, fc);
	lanes = ks_s_lanes(k);
	ks_s_append(k, fc->body, lanes);
	fj = ks_s_for(k, j, GI(0), GI(3), 1);
	ks_s_append(k, lanes->body, fj);
	ks_s_append(k, fj->body, ks_s_assign(k, acc, GBIN(ADD,
	    ks_x_var(k, acc), GBIN(MUL, ks_x_load(k, x, GBIN(ADD,
	    GBIN(MUL, GBIN(ADD, GBIN(MUL, GBIN(ADD, GBIN(MUL,
	    ks_x_group(k), GI(4)), ks_x_var(k, c)), GI(3)), ks_x_var(k, j)),
	    GI(32)), ks_x_lane(k))), ks_x_load(k, w, GBIN(ADD,
	    GBIN(MUL, ks_x_var(k, j), GI(32)), ks_x_lane(k)))))));
	ks_s_append(k, k->body, ks_s_decl(k, dead, ks_x_load(k, x, GI(0))));
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_group(k),
	    ks_x_reduce(k, KS_RED_SUM, acc)));
	return k;
}

/* ---- local arrays and barriers ---- */

/*
 * Per group of 32: y[g * 32 + l] = x[g * 32 + 31 - l] * 2 + s[0], through
 * a local array: lanes { s[lane] = x[..] }; barrier; lanes { t[lane] =
 * s[31 - lane] * 2.0 + s[0] }; barrier; lanes { y[..] = t[lane] }.  Every
 * read is of another lane's store, so a missing barrier shows on a GPU.
 */
static inline ks_ir_kernel_t *gpu_local_kernel(void)
{
	ks_ir_kernel_t *k = ks_ir_new("loc", "t", 32);
	int x = ks_ir_buffer(k, "x", KS_DTYPE_F32, KS_ACCESS_READ);
	int y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int n = ks_ir_scalar(k, "n", KS_TY_I64);
	int sa = ks_ir_local(k, "s", 32);
	int ta = ks_ir_local(k, "t", 32);
	ks_stmt_t *l1 = ks_s_lanes(k), *l2 = ks_s_lanes(k), *l3 = ks_s_lanes(k);

	k->grid = GBIN(DIV, GP(n), GI(32));
	ks_s_append(k, l1->body, ks_s_lstore(k, sa, ks_x_lane(k),
	    ks_x_load(k, x, gpu_gidx(k))));
	ks_s_append(k, l2->body, ks_s_lstore(k, ta, ks_x_lane(k), GBIN(ADD,
	    GBIN(MUL, ks_x_lload(k, sa, GBIN(SUB, GI(31), ks_x_lane(k))),
	    ks_x_f32(k, 2.0f)), ks_x_lload(k, sa, GI(0)))));
	ks_s_append(k, l3->body, ks_s_store(k, y, gpu_gidx(k),
	    ks_x_lload(k, ta, ks_x_lane(k))));
	ks_s_append(k, k->body, l1);
	ks_s_append(k, k->body, ks_s_barrier(k));
	ks_s_append(k, k->body, l2);
	ks_s_append(k, k->body, ks_s_barrier(k));
	ks_s_append(k, k->body, l3);
	return k;
}

static inline void gpu_local_check(const char *who, const float *x,
    const float *y, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		size_t g = i / 32, l = i % 32;
		volatile float p = x[g * 32 + 31 - l] * 2.0f;
		float want = p + x[g * 32];

		cr_assert_eq(gpu_bits(y[i]), gpu_bits(want), "%s: y[%zu] = %a,"
		    " want %a", who, i, (double)y[i], (double)want);
	}
}

#endif
