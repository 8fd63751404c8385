/*
 * Tests of specialize/: the walker, the text form, the verifier, the
 * passes, validation, variant selection and fingerprints (the gemm IR
 * run by an interpreter against the canonical order is test_ir_order.c).
 *
 * Golden files: tests/golden/gemm_<variant>_<dtype>.ir, compared byte for
 * byte; KSPEC_GOLDEN_UPDATE=1 (`make golden`) rewrites them instead.  They
 * are found next to this file (from __FILE__, so run from the repository
 * root as `make test` does) or in $KSPEC_GOLDEN_DIR.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../specialize/specialize.h"
#include "../ref/ref.h"
#include "gpu.h"
#include "spec.h"

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(specialize, .init = setup);

/* ---- helpers ---- */

/* Printed text of K; caller frees. */
static char *text(const ks_ir_kernel_t *k)
{
	ks_buf_t b;

	ks_buf_init(&b);
	cr_assert_eq(ks_ir_print(k, &b), KS_OK);
	return ks_buf_steal(&b, NULL);
}

static char *c_text(const ks_ir_kernel_t *k, const ks_expr_t *e)
{
	ks_buf_t b;

	ks_buf_init(&b);
	cr_assert_eq(ks_ir_print_c_expr(k, e, &b), KS_OK);
	return ks_buf_steal(&b, NULL);
}

static int count(const char *hay, const char *needle)
{
	int n = 0;

	for (; (hay = strstr(hay, needle)) != NULL; hay++)
		n++;
	return n;
}

static ks_expr_t *c64(ks_ir_kernel_t *k, int64_t v)
{
	return ks_x_i64(k, v);
}

/* ---- golden files ---- */

static void golden_path(char *out, size_t n, const char *name)
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

static char *read_file(const char *path)
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

static void check_golden(const ks_ir_kernel_t *k, const char *name)
{
	const char *update = getenv("KSPEC_GOLDEN_UPDATE");
	char path[512];
	char *got = text(k), *want;
	size_t i, line = 1;

	golden_path(path, sizeof path, name);
	if (update != NULL && strcmp(update, "1") == 0) {
		FILE *f = fopen(path, "wb");

		cr_assert_not_null(f, "cannot write %s", path);
		cr_assert_eq(fwrite(got, 1, strlen(got), f), strlen(got));
		cr_assert_eq(fclose(f), 0);
		free(got);
		return;
	}
	want = read_file(path);
	cr_assert_not_null(want, "missing golden file %s (make golden)", path);
	for (i = 0; got[i] && got[i] == want[i]; i++)
		if (got[i] == '\n')
			line++;
	cr_assert(got[i] == want[i], "%s differs from the printed IR at "
	    "line %zu:\n--- printed:\n%s", path, line, got);
	free(got);
	free(want);
}

Test(specialize, golden_gemv_m1_decode_shape_matches_file)
{
	ks_dtype_t d;

	for (d = 0; d < KS_DTYPE_COUNT; d++) {
		ks_ir_kernel_t *k = gemm(d, 1, 4096, 4096);
		char name[64];

		snprintf(name, sizeof name, "gemm_gemv_m1_%s.ir",
		    ks_dtype_name(d));
		check_golden(k, name);
		ks_ir_free(k);
	}
}

Test(specialize, golden_small_m_verify_width_matches_file)
{
	ks_dtype_t d;

	for (d = 0; d < KS_DTYPE_COUNT; d++) {
		ks_ir_kernel_t *k = gemm(d, 3, 4096, 4096);
		char name[64];

		cr_assert_str_eq(k->variant, "small_m");
		snprintf(name, sizeof name, "gemm_small_m_%s.ir",
		    ks_dtype_name(d));
		check_golden(k, name);
		ks_ir_free(k);
	}
}

Test(specialize, golden_general_all_dynamic_matches_file)
{
	ks_dtype_t d;

	for (d = 0; d < KS_DTYPE_COUNT; d++) {
		ks_ir_kernel_t *k = gemm(d, DYN, DYN, DYN);
		char name[64];

		snprintf(name, sizeof name, "gemm_general_%s.ir",
		    ks_dtype_name(d));
		check_golden(k, name);
		ks_ir_free(k);
	}
}

Test(specialize, specialization_is_deterministic)
{
	static const int64_t shapes[][3] = {
		{ 1, 4096, 4096 }, { DYN, DYN, DYN }, { 17, 100, 4100 },
		{ 2, DYN, 64 },
	};
	size_t i;

	for (i = 0; i < sizeof shapes / sizeof *shapes; i++) {
		ks_ir_kernel_t *a = gemm(KS_DTYPE_BF16, shapes[i][0],
		    shapes[i][1], shapes[i][2]);
		ks_ir_kernel_t *b = gemm(KS_DTYPE_BF16, shapes[i][0],
		    shapes[i][1], shapes[i][2]);
		char *ta = text(a), *tb = text(b);

		cr_assert_str_eq(ta, tb);
		free(ta);
		free(tb);
		ks_ir_free(a);
		ks_ir_free(b);
	}
}

Test(specialize, printed_params_show_kind_dtype_access_and_binding)
{
	ks_ir_kernel_t *k = gemm(KS_DTYPE_F16, 1, 4096, DYN);
	char *t = text(k);

	cr_assert(strstr(t, "kernel gemm variant gemv_m1 entry "
	    "ks_gemm_gemv_m1 nlanes 32\n") == t, "%s", t);
	cr_assert(strstr(t, "param 0 x buffer f16 read dims M,K\n"), "%s", t);
	cr_assert(strstr(t, "param 2 y buffer f16 write dims M,N\n"), "%s", t);
	cr_assert(strstr(t, "param 3 M scalar i64 bound 1\n"), "%s", t);
	cr_assert(strstr(t, "param 5 K scalar i64\n"), "%s", t);
	cr_assert(strstr(t, "var 0 n0 uniform i64\n"), "%s", t);
	cr_assert(strstr(t, " acc0 lane f32\n"), "%s", t);
	free(t);
	ks_ir_free(k);
}

/* ---- C launch expressions ---- */

Test(specialize, launch_expression_of_dynamic_general_is_c)
{
	ks_ir_kernel_t *k = gemm(KS_DTYPE_F32, DYN, DYN, DYN);
	char *t = c_text(k, k->grid);

	cr_assert_str_eq(t, "(M+3)/4*((N+3)/4)");
	free(t);
	ks_ir_free(k);
	k = gemm(KS_DTYPE_F32, DYN, 4096, DYN);
	t = c_text(k, k->grid);
	cr_assert_str_eq(t, "(M+3)/4*1024");
	free(t);
	ks_ir_free(k);
}

Test(specialize, launch_expression_parenthesises_by_c_precedence)
{
	ks_ir_kernel_t *k = ks_ir_new("t", "v", 32);
	int a = ks_ir_scalar(k, "A", KS_TY_I64);
	int b = ks_ir_scalar(k, "B", KS_TY_I64);
	ks_expr_t *e;
	ks_buf_t buf;
	char *t;

	/* A-(B-3) keeps its parentheses, (A-B)-3 needs none. */
	e = ks_x_bin(k, KS_OP_SUB, ks_x_param(k, a), ks_x_bin(k, KS_OP_SUB,
	    ks_x_param(k, b), c64(k, 3)));
	t = c_text(k, e);
	cr_assert_str_eq(t, "A-(B-3)");
	free(t);
	e = ks_x_bin(k, KS_OP_SUB, ks_x_bin(k, KS_OP_SUB, ks_x_param(k, a),
	    ks_x_param(k, b)), c64(k, 3));
	t = c_text(k, e);
	cr_assert_str_eq(t, "A-B-3");
	free(t);
	e = ks_x_bin(k, KS_OP_ADD, ks_x_bin(k, KS_OP_MUL, ks_x_param(k, a),
	    c64(k, -2)), ks_x_bin(k, KS_OP_REM, ks_x_param(k, b),
	    c64(k, 5)));
	t = c_text(k, e);
	cr_assert_str_eq(t, "A*(-2)+B%5");
	free(t);
	/* Only launch arithmetic prints; anything else is refused. */
	ks_buf_init(&buf);
	cr_assert_eq(ks_ir_print_c_expr(k, ks_x_group(k), &buf),
	    KS_E_UNSUPPORTED);
	ks_buf_close(&buf);
	ks_ir_free(k);
}

/* ---- the walker ---- */

typedef struct {
	int lane_inside, lane_outside;
	int reduce_inside, reduce_outside;
	int lanes_stmts_outside;
	int m_uses;
} census_t;

static ks_expr_t *census_expr(void *ctx, ks_ir_kernel_t *k, ks_expr_t *e,
    int in_lanes)
{
	census_t *c = ctx;

	if (e->kind == KS_X_LANE)
		(*(in_lanes ? &c->lane_inside : &c->lane_outside))++;
	if (e->kind == KS_X_REDUCE)
		(*(in_lanes ? &c->reduce_inside :
		    &c->reduce_outside))++;
	if (e->kind == KS_X_PARAM && strcmp(k->params[e->param].name,
	    "M") == 0)
		c->m_uses++;
	return e;
}

static ks_stmt_t *census_stmt(void *ctx, ks_ir_kernel_t *k, ks_stmt_t *s,
    int in_lanes)
{
	census_t *c = ctx;

	(void)k;
	if (s->kind == KS_S_LANES && !in_lanes)
		c->lanes_stmts_outside++;
	return s;
}

Test(specialize, walker_reaches_nested_blocks_grid_and_tracks_lanes)
{
	ks_ir_kernel_t *k = gemm(KS_DTYPE_F32, DYN, DYN, DYN);
	census_t c = { 0 };
	ks_ir_visitor_t v = { &c, census_expr, census_stmt };

	ks_ir_walk(k, &v);
	/* lane appears in the main loop and in the tail (inside an IF). */
	cr_assert_eq(c.lane_inside, 2);
	cr_assert_eq(c.lane_outside, 0);
	cr_assert_eq(c.reduce_outside, 16);     /* one per tile output */
	cr_assert_eq(c.reduce_inside, 0);
	cr_assert_eq(c.lanes_stmts_outside, 2);
	/* M: the grid, the 4 clamped row offsets, the 16 store guards. */
	cr_assert_eq(c.m_uses, 1 + 4 + 16);
	ks_ir_free(k);
}

static ks_stmt_t *drop_stores(void *ctx, ks_ir_kernel_t *k, ks_stmt_t *s,
    int in_lanes)
{
	(void)ctx;
	(void)k;
	(void)in_lanes;
	return s->kind == KS_S_STORE ? NULL : s;
}

static ks_stmt_t *drop_blocks(void *ctx, ks_ir_kernel_t *k, ks_stmt_t *s,
    int in_lanes)
{
	(void)ctx;
	(void)k;
	(void)in_lanes;
	return s->kind == KS_S_BLOCK ? NULL : s;
}

Test(specialize, walker_deletes_statements_and_keeps_bodies_blocks)
{
	ks_ir_kernel_t *k = gemm(KS_DTYPE_F32, DYN, DYN, DYN);
	ks_ir_visitor_t v = { NULL, NULL, drop_stores };
	char *t;

	ks_ir_walk(k, &v);
	t = text(k);
	cr_assert_eq(count(t, "y["), 0, "%s", t);
	/* The 16 store guards of the 4 x 4 tile, now empty. */
	cr_assert_eq(count(t, "< M)) {"), 16, "%s", t);
	cr_assert_eq(ks_ir_verify(k, NULL, 0), KS_OK);
	free(t);
	/* Deleting every block leaves every body slot an empty block. */
	v.stmt = drop_blocks;
	ks_ir_walk(k, &v);
	cr_assert_eq(k->body->kind, KS_S_BLOCK);
	cr_assert_eq(k->body->nitems, 0);
	ks_ir_free(k);
}

/* ---- the verifier ---- */

/* A kernel with y (write), x (read), N, and grid N; body empty. */
static ks_ir_kernel_t *tiny(int *y, int *x, int *n)
{
	ks_ir_kernel_t *k = ks_ir_new("tiny", "v", 32);

	*y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	*x = ks_ir_buffer(k, "x", KS_DTYPE_F32, KS_ACCESS_READ);
	*n = ks_ir_scalar(k, "N", KS_TY_I64);
	k->grid = ks_x_param(k, *n);
	return k;
}

static void expect_invalid(ks_ir_kernel_t *k, const char *words)
{
	char err[256];

	cr_assert_eq(ks_ir_verify(k, err, sizeof err), KS_E_INTERNAL,
	    "planted error (%s) not caught", words);
	cr_assert(strstr(err, words) != NULL, "message \"%s\" lacks \"%s\"",
	    err, words);
	ks_ir_free(k);
}

Test(specialize, verifier_accepts_every_gemm_specialization)
{
	static const int64_t shapes[][3] = {
		{ 1, 4096, 4096 }, { DYN, DYN, DYN }, { 17, 5, 4100 },
		{ 1, 1, 1 }, { 2, 3, 32 }, { 1, DYN, 33 },
	};
	size_t i;
	ks_dtype_t d;
	char err[256];

	for (d = 0; d < KS_DTYPE_COUNT; d++)
		for (i = 0; i < sizeof shapes / sizeof *shapes; i++) {
			ks_ir_kernel_t *k = gemm(d, shapes[i][0],
			    shapes[i][1], shapes[i][2]);

			cr_assert_eq(ks_ir_verify(k, err, sizeof err), KS_OK,
			    "%s", err);
			ks_ir_free(k);
		}
}

Test(specialize, verifier_accepts_a_well_formed_tiny_kernel)
{
	int y, x, n, acc, u;
	ks_ir_kernel_t *k = tiny(&y, &x, &n);
	ks_stmt_t *lanes = ks_s_lanes(k);
	char err[256];

	acc = ks_ir_var(k, "acc", KS_TY_F32, KS_VAR_LANE);
	u = ks_ir_var(k, "u", KS_TY_I64, KS_VAR_UNIFORM);
	ks_s_append(k, k->body, ks_s_decl(k, u, ks_x_group(k)));
	ks_s_append(k, k->body, ks_s_decl(k, acc, ks_x_f32(k, 0.0f)));
	ks_s_append(k, k->body, lanes);
	ks_s_append(k, lanes->body, ks_s_assign(k, acc, ks_x_load(k, x,
	    ks_x_bin(k, KS_OP_ADD, ks_x_var(k, u), ks_x_lane(k)))));
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_var(k, u),
	    ks_x_reduce(k, KS_RED_SUM, acc)));
	cr_assert_eq(ks_ir_verify(k, err, sizeof err), KS_OK, "%s", err);
	ks_ir_free(k);
}

Test(specialize, verifier_rejects_lane_var_read_outside_lanes)
{
	int y, x, n, acc;
	ks_ir_kernel_t *k = tiny(&y, &x, &n);

	acc = ks_ir_var(k, "acc", KS_TY_F32, KS_VAR_LANE);
	ks_s_append(k, k->body, ks_s_decl(k, acc, ks_x_f32(k, 0.0f)));
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 0),
	    ks_x_var(k, acc)));
	expect_invalid(k, "lane variable acc read outside LANES");
}

Test(specialize, verifier_rejects_uniform_assign_inside_lanes)
{
	int y, x, n, u;
	ks_ir_kernel_t *k = tiny(&y, &x, &n);
	ks_stmt_t *lanes = ks_s_lanes(k);

	u = ks_ir_var(k, "u", KS_TY_I64, KS_VAR_UNIFORM);
	ks_s_append(k, k->body, ks_s_decl(k, u, c64(k, 0)));
	ks_s_append(k, k->body, lanes);
	ks_s_append(k, lanes->body, ks_s_assign(k, u, ks_x_lane(k)));
	expect_invalid(k, "uniform variable u assigned inside LANES");
}

/* A reduction's tree halves the lanes down to one: 16 lanes pass (gemm's
 * blocked has them), 24 do not. */
Test(specialize, verifier_allows_reduce_at_power_of_two_lanes_only)
{
	static const int lanes_of[] = { 16, 24 };
	char err[256];
	size_t i;

	for (i = 0; i < 2; i++) {
		ks_ir_kernel_t *k = ks_ir_new("tiny", "v", lanes_of[i]);
		int y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
		int acc = ks_ir_var(k, "acc", KS_TY_F32, KS_VAR_LANE);

		k->grid = c64(k, 1);
		ks_s_append(k, k->body, ks_s_decl(k, acc, ks_x_f32(k, 1.0f)));
		ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 0),
		    ks_x_reduce(k, KS_RED_SUM, acc)));
		if (lanes_of[i] == 24) {
			expect_invalid(k, "reduce needs a power of two lanes");
			continue;
		}
		cr_assert_eq(ks_ir_verify(k, err, sizeof err), KS_OK, "%s",
		    err);
		ks_ir_free(k);
	}
}

Test(specialize, verifier_rejects_type_mismatches)
{
	int y, x, n, u;
	ks_ir_kernel_t *k = tiny(&y, &x, &n);

	u = ks_ir_var(k, "u", KS_TY_I64, KS_VAR_UNIFORM);
	ks_s_append(k, k->body, ks_s_decl(k, u, ks_x_f32(k, 1.0f)));
	expect_invalid(k, "initializer is f32, variable is i64");

	k = tiny(&y, &x, &n);
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 0),
	    ks_x_bin(k, KS_OP_ADD, ks_x_f32(k, 1.0f), c64(k, 2))));
	expect_invalid(k, "operand types f32 and i64 differ");

	k = tiny(&y, &x, &n);
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_f32(k, 0.0f),
	    ks_x_f32(k, 1.0f)));
	expect_invalid(k, "store index: type f32, expected i64");
}

Test(specialize, verifier_rejects_scope_and_nesting_errors)
{
	int y, x, n, u, acc;
	ks_ir_kernel_t *k;
	ks_stmt_t *lanes, *inner, *cond;

	/* Nested LANES. */
	k = tiny(&y, &x, &n);
	lanes = ks_s_lanes(k);
	inner = ks_s_lanes(k);
	ks_s_append(k, k->body, lanes);
	ks_s_append(k, lanes->body, inner);
	expect_invalid(k, "nested LANES");

	/* The lane index outside LANES. */
	k = tiny(&y, &x, &n);
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_lane(k),
	    ks_x_f32(k, 0.0f)));
	expect_invalid(k, "lane index used outside LANES");

	/* REDUCE inside LANES. */
	k = tiny(&y, &x, &n);
	acc = ks_ir_var(k, "acc", KS_TY_F32, KS_VAR_LANE);
	lanes = ks_s_lanes(k);
	ks_s_append(k, k->body, ks_s_decl(k, acc, ks_x_f32(k, 0.0f)));
	ks_s_append(k, k->body, lanes);
	ks_s_append(k, lanes->body, ks_s_store(k, y, ks_x_lane(k),
	    ks_x_reduce(k, KS_RED_SUM, acc)));
	expect_invalid(k, "reduce of acc inside LANES");

	/* Use before declaration. */
	k = tiny(&y, &x, &n);
	u = ks_ir_var(k, "u", KS_TY_I64, KS_VAR_UNIFORM);
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_var(k, u),
	    ks_x_f32(k, 0.0f)));
	ks_s_append(k, k->body, ks_s_decl(k, u, c64(k, 0)));
	expect_invalid(k, "before its declaration");

	/* Use after the declaring block ended. */
	k = tiny(&y, &x, &n);
	u = ks_ir_var(k, "u", KS_TY_I64, KS_VAR_UNIFORM);
	cond = ks_s_if(k, ks_x_bool(k, 1));
	ks_s_append(k, k->body, cond);
	ks_s_append(k, cond->body, ks_s_decl(k, u, c64(k, 0)));
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_var(k, u),
	    ks_x_f32(k, 0.0f)));
	expect_invalid(k, "outside the block that declares it");

	/* Declared twice. */
	k = tiny(&y, &x, &n);
	u = ks_ir_var(k, "u", KS_TY_I64, KS_VAR_UNIFORM);
	ks_s_append(k, k->body, ks_s_decl(k, u, c64(k, 0)));
	ks_s_append(k, k->body, ks_s_decl(k, u, c64(k, 1)));
	expect_invalid(k, "declared twice");
}

/* A FOR of TINY with unroll hint U: for i = 0 to N step 1, y[i] = 0. */
static ks_ir_kernel_t *hinted_loop(int u)
{
	int y, x, n, i;
	ks_ir_kernel_t *k = tiny(&y, &x, &n);
	ks_stmt_t *loop;

	i = ks_ir_var(k, "i", KS_TY_I64, KS_VAR_UNIFORM);
	loop = ks_s_for(k, i, c64(k, 0), ks_x_param(k, n), 1);
	loop->unroll = u;
	ks_s_append(k, k->body, loop);
	ks_s_append(k, loop->body, ks_s_store(k, y, ks_x_var(k, i),
	    ks_x_f32(k, 0.0f)));
	return k;
}

/* The unroll hint is 0 or 2..KS_IR_UNROLL_MAX, and printed only when set
 * (so the text of every unhinted kernel is what it was). */
Test(specialize, unroll_hints_are_verified_and_printed)
{
	static const int ok[] = { 0, 2, 4, KS_IR_UNROLL_MAX };
	static const int bad[] = { 1, -4, KS_IR_UNROLL_MAX + 1 };
	ks_ir_kernel_t *k;
	char err[256], *t;
	size_t i;

	for (i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		k = hinted_loop(ok[i]);
		cr_assert_eq(ks_ir_verify(k, err, sizeof err), KS_OK,
		    "unroll %d: %s", ok[i], err);
		t = text(k);
		cr_assert_eq(strstr(t, " unroll ") != NULL, ok[i] != 0,
		    "%s", t);
		free(t);
		ks_ir_free(k);
	}
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
		expect_invalid(hinted_loop(bad[i]), "unroll hint");
	k = hinted_loop(8);
	t = text(k);
	cr_assert(strstr(t, "for i = 0 to N step 1 unroll 8 {\n") != NULL,
	    "%s", t);
	free(t);
	ks_ir_free(k);
}

Test(specialize, verifier_rejects_bad_buffers_and_grid)
{
	int y, x, n;
	ks_ir_kernel_t *k;

	k = tiny(&y, &x, &n);
	ks_s_append(k, k->body, ks_s_store(k, x, c64(k, 0),
	    ks_x_f32(k, 0.0f)));
	expect_invalid(k, "store to x, which is not a writable buffer");

	k = tiny(&y, &x, &n);
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 0),
	    ks_x_load(k, y, c64(k, 0))));
	expect_invalid(k, "load from y, which is not a readable buffer");

	k = tiny(&y, &x, &n);
	k->grid = ks_x_bin(k, KS_OP_ADD, ks_x_param(k, n), ks_x_group(k));
	expect_invalid(k, "grid");

	k = tiny(&y, &x, &n);
	k->grid = ks_x_bin(k, KS_OP_LT, ks_x_param(k, n), c64(k, 3));
	expect_invalid(k, "grid");

	/* A use of a parameter that was marked bound but not replaced. */
	k = tiny(&y, &x, &n);
	k->params[n].bound = 1;
	expect_invalid(k, "use of bound parameter N left");
}

/* ---- fold ---- */

Test(specialize, fold_folds_integers_and_applies_identities)
{
	int y, x, n;
	ks_ir_kernel_t *k = tiny(&y, &x, &n);
	char *t;

	/* grid = (N * 1 + 0) * (2 + 3) -> (N * 5) */
	k->grid = ks_x_bin(k, KS_OP_MUL, ks_x_bin(k, KS_OP_ADD,
	    ks_x_bin(k, KS_OP_MUL, ks_x_param(k, n), c64(k, 1)), c64(k, 0)),
	    ks_x_bin(k, KS_OP_ADD, c64(k, 2), c64(k, 3)));
	/* y[(N / 1) * 0 + (7 % 1)] -> y[0] */
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_bin(k, KS_OP_ADD,
	    ks_x_bin(k, KS_OP_MUL, ks_x_bin(k, KS_OP_DIV, ks_x_param(k, n),
	    c64(k, 1)), c64(k, 0)), ks_x_bin(k, KS_OP_REM, c64(k, 7),
	    c64(k, 1))), ks_x_f32(k, 1.0f)));
	/* y[select((N < 3) && true, 5, 6)] -> y[select((N < 3), 5, 6)] */
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_select(k,
	    ks_x_bin(k, KS_OP_AND, ks_x_bin(k, KS_OP_LT, ks_x_param(k, n),
	    c64(k, 3)), ks_x_bool(k, 1)), c64(k, 5), c64(k, 6)),
	    ks_x_f32(k, 2.0f)));
	/* y[select(4 <= 3, 5, 6)] -> y[6] */
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_select(k,
	    ks_x_bin(k, KS_OP_LE, c64(k, 4), c64(k, 3)), c64(k, 5),
	    c64(k, 6)), ks_x_f32(k, 3.0f)));
	ks_pass_fold(k);
	cr_assert_eq(ks_ir_verify(k, NULL, 0), KS_OK);
	t = text(k);
	cr_assert(strstr(t, "grid (N * 5)\n"), "%s", t);
	cr_assert(strstr(t, "  y[0] = 1.0\n"), "%s", t);
	cr_assert(strstr(t, "  y[select((N < 3), 5, 6)] = 2.0\n"), "%s", t);
	cr_assert(strstr(t, "  y[6] = 3.0\n"), "%s", t);
	free(t);
	ks_ir_free(k);
}

Test(specialize, fold_never_folds_overflow_division_by_zero_or_f32)
{
	int y, x, n;
	ks_ir_kernel_t *k = tiny(&y, &x, &n);
	char *t;

	k->grid = ks_x_bin(k, KS_OP_ADD, c64(k, INT64_MAX), c64(k, 1));
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_bin(k, KS_OP_DIV,
	    c64(k, 7), c64(k, 0)), ks_x_bin(k, KS_OP_ADD, ks_x_f32(k, 1.0f),
	    ks_x_f32(k, 2.0f))));
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_bin(k, KS_OP_DIV,
	    c64(k, INT64_MIN), c64(k, -1)), ks_x_bin(k, KS_OP_MUL,
	    ks_x_load(k, x, c64(k, 0)), ks_x_f32(k, 1.0f))));
	ks_pass_fold(k);
	t = text(k);
	cr_assert(strstr(t, "grid (9223372036854775807 + 1)\n"), "%s", t);
	cr_assert(strstr(t, "y[(7 / 0)] = (1.0 + 2.0)\n"), "%s", t);
	cr_assert(strstr(t, "y[(-9223372036854775808 / -1)] = "
	    "(x[0] * 1.0)\n"), "%s", t);
	free(t);
	ks_ir_free(k);
}

Test(specialize, verifier_rejects_unary_math_on_wrong_types)
{
	int y, x, n;
	ks_ir_kernel_t *k = tiny(&y, &x, &n);
	ks_expr_t *e;

	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_un(k, KS_UN_ABS,
	    c64(k, -3)), ks_x_un(k, KS_UN_SQRT, ks_x_un(k, KS_UN_NEG,
	    ks_x_load(k, x, c64(k, 0))))));
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 1),
	    ks_x_un(k, KS_UN_EXP, ks_x_f32(k, 1.0f))));
	cr_assert_eq(ks_ir_verify(k, NULL, 0), KS_OK);
	ks_ir_free(k);

	k = tiny(&y, &x, &n);
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_un(k, KS_UN_SQRT,
	    c64(k, 4)), ks_x_f32(k, 1.0f)));
	expect_invalid(k, "sqrt of i64");

	k = tiny(&y, &x, &n);
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 0),
	    ks_x_un(k, KS_UN_EXP, ks_x_cast(k, KS_TY_I64,
	    ks_x_f32(k, 1.0f)))));
	expect_invalid(k, "exp of i64");

	k = tiny(&y, &x, &n);
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 0),
	    ks_x_un(k, KS_UN_NEG, ks_x_f32(k, 1.0f))));
	e = k->body->items[0]->b;
	e->type = KS_TY_I64;            /* result type != operand type */
	expect_invalid(k, "neg: type i64, expected f32");

	k = tiny(&y, &x, &n);
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 0),
	    ks_x_un(k, KS_UN_ABS, ks_x_bool(k, 1))));
	k->body->items[0]->b->type = KS_TY_F32;
	expect_invalid(k, "abs of bool");
}

Test(specialize, fold_folds_neg_abs_of_constants_never_sqrt_exp)
{
	int y, x, n;
	ks_ir_kernel_t *k = tiny(&y, &x, &n);
	char *t;

	/* y[abs(-3) + neg(2)] = abs(neg(1.5)) -> y[1] = 1.5 (0x1.8p+0) */
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_bin(k, KS_OP_ADD,
	    ks_x_un(k, KS_UN_ABS, c64(k, -3)), ks_x_un(k, KS_UN_NEG,
	    c64(k, 2))), ks_x_un(k, KS_UN_ABS, ks_x_un(k, KS_UN_NEG,
	    ks_x_f32(k, 1.5f)))));
	/* neg(0.0) is -0.0: a sign-bit flip, not 0 - x */
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 2),
	    ks_x_un(k, KS_UN_NEG, ks_x_f32(k, 0.0f))));
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 3),
	    ks_x_un(k, KS_UN_SQRT, ks_x_f32(k, 4.0f))));
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_un(k, KS_UN_NEG,
	    c64(k, INT64_MIN)), ks_x_un(k, KS_UN_EXP, ks_x_f32(k, 0.0f))));
	ks_pass_fold(k);
	cr_assert_eq(ks_ir_verify(k, NULL, 0), KS_OK);
	t = text(k);
	cr_assert(strstr(t, "  y[1] = 0x1.8p+0\n"), "%s", t);
	cr_assert(strstr(t, "  y[2] = -0.0\n"), "%s", t);
	cr_assert(strstr(t, "  y[3] = sqrt(4.0)\n"), "%s", t);
	cr_assert(strstr(t, "  y[neg(-9223372036854775808)] = exp(0.0)\n"),
	    "%s", t);
	free(t);
	ks_ir_free(k);
}

Test(specialize, i32_computes_integer_operators_only)
{
	int y, x, n, P, v;
	ks_ir_kernel_t *k = tiny(&y, &x, &n);
	ks_dtype_t dt;
	char *t;

	P = ks_ir_buffer_i32(k, "P", KS_ACCESS_READ);
	v = ks_ir_var(k, "pv", KS_TY_I32, KS_VAR_UNIFORM);
	ks_s_append(k, k->body, ks_s_decl(k, v, ks_x_load(k, P, c64(k, 0))));
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_cast(k, KS_TY_I64,
	    ks_x_var(k, v)), ks_x_cast(k, KS_TY_F32, ks_x_var(k, v))));
	cr_assert_eq(ks_ir_verify(k, NULL, 0), KS_OK);
	t = text(k);
	cr_assert(strstr(t, "param 3 P buffer i32 read\n"), "%s", t);
	cr_assert(strstr(t, "var 0 pv uniform i32\n"), "%s", t);
	cr_assert(strstr(t, "  y[i64(pv)] = f32(pv)\n"), "%s", t);
	free(t);
	ks_ir_free(k);

	k = tiny(&y, &x, &n);
	P = ks_ir_buffer_i32(k, "P", KS_ACCESS_READ);
	ks_s_append(k, k->body, ks_s_store(k, y, ks_x_cast(k, KS_TY_I64,
	    ks_x_bin(k, KS_OP_DIV, ks_x_load(k, P, c64(k, 0)),
	    ks_x_load(k, P, c64(k, 1)))), ks_x_f32(k, 0.0f)));
	expect_invalid(k, "arithmetic on i32");

	k = tiny(&y, &x, &n);
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 0), ks_x_bin(k,
	    KS_OP_BAND, ks_x_load(k, x, c64(k, 0)), ks_x_f32(k, 1.0f))));
	expect_invalid(k, "bit operator on f32");

	k = tiny(&y, &x, &n);
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 0), ks_x_un(k,
	    KS_UN_F16, ks_x_load(k, x, c64(k, 0)))));
	expect_invalid(k, "f16bits of f32");

	k = tiny(&y, &x, &n);
	P = ks_ir_buffer_i32(k, "P", KS_ACCESS_READ);
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 0),
	    ks_x_load(k, P, c64(k, 0))));
	expect_invalid(k, "stored value: type i32, expected f32");

	k = tiny(&y, &x, &n);
	P = ks_ir_buffer_i32(k, "P", KS_ACCESS_WRITE);
	ks_s_append(k, k->body, ks_s_store(k, P, c64(k, 0),
	    ks_x_f32(k, 1.0f)));
	expect_invalid(k, "stored value: type f32, expected i32");

	k = tiny(&y, &x, &n);
	P = ks_ir_buffer_i32(k, "P", KS_ACCESS_READ);
	k->params[P].dtype = KS_DTYPE_BF16;
	expect_invalid(k, "buffer P: bad type, dtype");

	/* A byte buffer: loads give i32, the bit operators and f16bits
	 * print as C's, and it is read-only. */
	k = tiny(&y, &x, &n);
	P = ks_ir_buffer_bytes(k, "Q");
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 0), ks_x_un(k,
	    KS_UN_F16, ks_x_bin(k, KS_OP_BOR, ks_x_load(k, P, c64(k, 0)),
	    ks_x_bin(k, KS_OP_SHL, ks_x_load(k, P, c64(k, 1)),
	    ks_x_cast(k, KS_TY_I32, c64(k, 8)))))));
	cr_assert_eq(ks_ir_verify(k, NULL, 0), KS_OK);
	t = text(k);
	cr_assert(strstr(t, "param 3 Q buffer u8 read\n"), "%s", t);
	cr_assert(strstr(t, "  y[0] = f16bits((Q[0] | (Q[1] << i32(8))))\n"),
	    "%s", t);
	free(t);
	ks_ir_free(k);
	k = tiny(&y, &x, &n);
	P = ks_ir_buffer_bytes(k, "Q");
	k->params[P].access |= KS_ACCESS_WRITE;
	expect_invalid(k, "buffer Q: bad type, dtype");

	/* The wire's dtypes stay f32, f16, bf16. */
	cr_assert_eq(ks_dtype_parse("i32", &dt), KS_E_BAD_DTYPE);
	cr_assert_eq(KS_DTYPE_COUNT, 3);
}

/* for i = 0 to 3 { decl t = x[i]; for j = 0 to 2 { y[i * 2 + j] = t } }
 * -> six stores with constant indices and fresh t per copy. */
Test(specialize, unroll_copies_short_loops_with_fresh_variables)
{
	int y, x, n, i, j, t;
	ks_ir_kernel_t *k = tiny(&y, &x, &n);
	ks_stmt_t *fi, *fj;
	char err[256], *txt;

	i = ks_ir_var(k, "i", KS_TY_I64, KS_VAR_UNIFORM);
	j = ks_ir_var(k, "j", KS_TY_I64, KS_VAR_UNIFORM);
	t = ks_ir_var(k, "t", KS_TY_F32, KS_VAR_UNIFORM);
	fi = ks_s_for(k, i, c64(k, 0), c64(k, 3), 1);
	ks_s_append(k, fi->body, ks_s_decl(k, t, ks_x_load(k, x,
	    ks_x_var(k, i))));
	fj = ks_s_for(k, j, c64(k, 0), c64(k, 4), 2);
	ks_s_append(k, fj->body, ks_s_store(k, y, ks_x_bin(k, KS_OP_ADD,
	    ks_x_bin(k, KS_OP_MUL, ks_x_var(k, i), c64(k, 2)),
	    ks_x_bin(k, KS_OP_DIV, ks_x_var(k, j), c64(k, 2))),
	    ks_x_var(k, t)));
	ks_s_append(k, fi->body, fj);
	ks_s_append(k, k->body, fi);
	cr_assert_eq(ks_pass_run(k, err, sizeof err), KS_OK, "%s", err);
	txt = text(k);
	cr_assert(strstr(txt, "for ") == NULL, "%s", txt);
	cr_assert(strstr(txt, "  decl t_u0 = x[0]\n  y[0] = t_u0\n"
	    "  y[1] = t_u0\n  decl t_u1 = x[1]\n  y[2] = t_u1\n"
	    "  y[3] = t_u1\n  decl t_u2 = x[2]\n  y[4] = t_u2\n"
	    "  y[5] = t_u2\n"), "%s", txt);
	free(txt);
	ks_ir_free(k);

	/* Nine trips stay a loop; a dynamic bound too. */
	k = tiny(&y, &x, &n);
	i = ks_ir_var(k, "i", KS_TY_I64, KS_VAR_UNIFORM);
	fi = ks_s_for(k, i, c64(k, 0), c64(k, 9), 1);
	ks_s_append(k, fi->body, ks_s_store(k, y, ks_x_var(k, i),
	    ks_x_f32(k, 1.0f)));
	ks_s_append(k, k->body, fi);
	j = ks_ir_var(k, "j", KS_TY_I64, KS_VAR_UNIFORM);
	fj = ks_s_for(k, j, c64(k, 0), ks_x_param(k, n), 1);
	ks_s_append(k, fj->body, ks_s_store(k, y, ks_x_var(k, j),
	    ks_x_f32(k, 1.0f)));
	ks_s_append(k, k->body, fj);
	cr_assert_eq(ks_pass_run(k, err, sizeof err), KS_OK, "%s", err);
	txt = text(k);
	cr_assert(strstr(txt, "for i = 0 to 9 step 1 {") != NULL, "%s", txt);
	cr_assert(strstr(txt, "for j = 0 to N step 1 {") != NULL, "%s", txt);
	free(txt);
	ks_ir_free(k);
}

/* Unused decls and assigns (and what only they read), empty loops, ifs
 * and lanes go; stores and what they read stay. */
Test(specialize, dce_removes_unread_variables_and_empty_statements)
{
	int y, x, n, a, b, u, i;
	ks_ir_kernel_t *k = tiny(&y, &x, &n);
	ks_stmt_t *f, *c;
	char err[256], *txt;

	a = ks_ir_var(k, "a", KS_TY_F32, KS_VAR_UNIFORM);
	b = ks_ir_var(k, "b", KS_TY_F32, KS_VAR_UNIFORM);
	u = ks_ir_var(k, "u", KS_TY_F32, KS_VAR_UNIFORM);
	i = ks_ir_var(k, "i", KS_TY_I64, KS_VAR_UNIFORM);
	ks_s_append(k, k->body, ks_s_decl(k, a, ks_x_load(k, x, c64(k, 0))));
	ks_s_append(k, k->body, ks_s_decl(k, b, ks_x_var(k, a)));
	ks_s_append(k, k->body, ks_s_assign(k, b, ks_x_bin(k, KS_OP_ADD,
	    ks_x_var(k, b), ks_x_var(k, a))));
	ks_s_append(k, k->body, ks_s_decl(k, u, ks_x_load(k, x, c64(k, 1))));
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 0), ks_x_var(k, u)));
	f = ks_s_for(k, i, c64(k, 0), ks_x_param(k, n), 1);
	ks_s_append(k, k->body, f);
	c = ks_s_if(k, ks_x_bin(k, KS_OP_LT, ks_x_param(k, n), c64(k, 3)));
	c->orelse = ks_s_block(k);
	ks_s_append(k, k->body, c);
	ks_s_append(k, k->body, ks_s_lanes(k));
	cr_assert_eq(ks_pass_run(k, err, sizeof err), KS_OK, "%s", err);
	txt = text(k);
	cr_assert(strstr(txt, "body {\n  decl u = x[1]\n  y[0] = u\n}\n"),
	    "%s", txt);
	free(txt);
	ks_ir_free(k);
}

Test(specialize, verifier_checks_local_arrays_and_barriers)
{
	int y, x, n, s;
	ks_ir_kernel_t *k = tiny(&y, &x, &n);
	ks_stmt_t *l, *c;
	char *t;

	s = ks_ir_local(k, "s", 32);
	l = ks_s_lanes(k);
	ks_s_append(k, l->body, ks_s_lstore(k, s, ks_x_lane(k),
	    ks_x_f32(k, 1.0f)));
	ks_s_append(k, k->body, l);
	ks_s_append(k, k->body, ks_s_barrier(k));
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 0),
	    ks_x_lload(k, s, c64(k, 31))));
	cr_assert_eq(ks_ir_verify(k, NULL, 0), KS_OK);
	t = text(k);
	cr_assert(strstr(t, "local 0 s f32 32\n"), "%s", t);
	cr_assert(strstr(t, "  lanes {\n    s[lane] = 1.0\n  }\n  barrier\n"
	    "  y[0] = s[31]\n"), "%s", t);
	free(t);
	ks_ir_free(k);

	k = tiny(&y, &x, &n);
	s = ks_ir_local(k, "s", 32);
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 0),
	    ks_x_lload(k, s, c64(k, 32))));
	expect_invalid(k, "s[32] out of bounds (32 elements)");

	k = tiny(&y, &x, &n);
	s = ks_ir_local(k, "s", 8);
	l = ks_s_lanes(k);
	ks_s_append(k, l->body, ks_s_lstore(k, s, c64(k, -1),
	    ks_x_f32(k, 1.0f)));
	ks_s_append(k, k->body, l);
	expect_invalid(k, "s[-1] out of bounds");

	k = tiny(&y, &x, &n);
	s = ks_ir_local(k, "s", 8);
	ks_s_append(k, k->body, ks_s_lstore(k, s, c64(k, 0),
	    ks_x_f32(k, 1.0f)));
	expect_invalid(k, "local store outside LANES");

	k = tiny(&y, &x, &n);
	l = ks_s_lanes(k);
	ks_s_append(k, l->body, ks_s_barrier(k));
	ks_s_append(k, k->body, l);
	expect_invalid(k, "barrier inside LANES");

	k = tiny(&y, &x, &n);
	c = ks_s_if(k, ks_x_bin(k, KS_OP_LT, ks_x_param(k, n), c64(k, 2)));
	ks_s_append(k, c->body, ks_s_barrier(k));
	ks_s_append(k, k->body, c);
	expect_invalid(k, "barrier inside IF");

	k = tiny(&y, &x, &n);
	ks_ir_local(k, "s", KS_IR_LOCAL_MAX + 1);
	expect_invalid(k, "local array s: 4097 elements");

	k = tiny(&y, &x, &n);
	ks_ir_local(k, "x", 4);
	expect_invalid(k, "name x used twice");
}

/* A prefetch is a read hint: printed, allowed in uniform code on a
 * readable buffer with an i64 index, refused anywhere else. */
Test(specialize, prefetch_is_printed_and_checked)
{
	int y, x, n;
	ks_ir_kernel_t *k = tiny(&y, &x, &n);
	ks_stmt_t *l;
	char *t;

	ks_s_append(k, k->body, ks_s_prefetch(k, x, c64(k, 64)));
	ks_s_append(k, k->body, ks_s_prefetch_l2(k, x, c64(k, 512)));
	ks_s_append(k, k->body, ks_s_store(k, y, c64(k, 0),
	    ks_x_load(k, x, c64(k, 0))));
	cr_assert_eq(ks_ir_verify(k, NULL, 0), KS_OK);
	t = text(k);
	cr_assert(strstr(t, "  prefetch x[64]\n  prefetch.l2 x[512]\n"
	    "  y[0] = x[0]\n"), "%s", t);
	free(t);
	ks_ir_free(k);

	k = tiny(&y, &x, &n);
	l = ks_s_prefetch_l2(k, x, c64(k, 0));
	l->level = 3;
	ks_s_append(k, k->body, l);
	expect_invalid(k, "prefetch of x: cache level 3 (1 or 2)");

	k = tiny(&y, &x, &n);
	l = ks_s_lanes(k);
	ks_s_append(k, l->body, ks_s_prefetch(k, x, ks_x_lane(k)));
	ks_s_append(k, k->body, l);
	expect_invalid(k, "prefetch inside LANES");

	k = tiny(&y, &x, &n);
	ks_s_append(k, k->body, ks_s_prefetch(k, y, c64(k, 0)));
	expect_invalid(k, "prefetch of y, which is not a readable buffer");

	k = tiny(&y, &x, &n);
	ks_s_append(k, k->body, ks_s_prefetch(k, x, ks_x_f32(k, 1.0f)));
	expect_invalid(k, "prefetch index");
}

Test(specialize, fold_resolves_if_on_a_constant_condition)
{
	int y, x, n;
	ks_ir_kernel_t *k = tiny(&y, &x, &n);
	ks_stmt_t *taken, *skipped, *other;
	char *t;

	taken = ks_s_if(k, ks_x_bin(k, KS_OP_LT, c64(k, 1), c64(k, 2)));
	taken->orelse = ks_s_block(k);
	ks_s_append(k, taken->body, ks_s_store(k, y, c64(k, 1),
	    ks_x_f32(k, 1.0f)));
	ks_s_append(k, taken->orelse, ks_s_store(k, y, c64(k, 2),
	    ks_x_f32(k, 2.0f)));
	skipped = ks_s_if(k, ks_x_bin(k, KS_OP_EQ, c64(k, 1), c64(k, 2)));
	ks_s_append(k, skipped->body, ks_s_store(k, y, c64(k, 3),
	    ks_x_f32(k, 3.0f)));
	other = ks_s_if(k, ks_x_bool(k, 0));
	other->orelse = ks_s_block(k);
	ks_s_append(k, other->orelse, ks_s_store(k, y, c64(k, 4),
	    ks_x_f32(k, 4.0f)));
	ks_s_append(k, k->body, taken);
	ks_s_append(k, k->body, skipped);
	ks_s_append(k, k->body, other);
	ks_pass_fold(k);
	cr_assert_eq(ks_ir_verify(k, NULL, 0), KS_OK);
	t = text(k);
	cr_assert_str_eq(strstr(t, "body "), "body {\n  y[1] = 1.0\n"
	    "  y[4] = 4.0\n}\n");
	free(t);
	ks_ir_free(k);
}

/* ---- trip1 and specialization effects ---- */

Test(specialize, trip1_removes_a_loop_that_runs_once)
{
	/* K = 32: the main loop runs once, the tail folds away. */
	ks_ir_kernel_t *k = gemm(KS_DTYPE_F32, 1, 64, 32);
	char *t = text(k);

	cr_assert_eq(count(t, "for "), 0, "%s", t);
	cr_assert(strstr(t, "decl k = lane\n"), "%s", t);
	cr_assert_eq(count(t, "k0"), 1, "%s", t);  /* only its var line */
	free(t);
	ks_ir_free(k);
}

Test(specialize, trip1_removes_a_loop_that_runs_zero_times)
{
	/* K = 5: no full chunk, only the guarded tail. */
	ks_ir_kernel_t *k = gemm(KS_DTYPE_F32, 1, 64, 5);
	char *t = text(k);

	cr_assert_eq(count(t, "for "), 0, "%s", t);
	cr_assert(strstr(t, "decl kt = lane\n"), "%s", t);
	cr_assert(strstr(t, "if (kt < 5) {\n"), "%s", t);
	free(t);
	ks_ir_free(k);
}

Test(specialize, constant_k_multiple_of_32_leaves_no_tail)
{
	ks_ir_kernel_t *k = gemm(KS_DTYPE_BF16, 1, 4096, 4096);
	char *t = text(k);

	cr_assert_eq(count(t, "lanes {"), 1, "%s", t);
	cr_assert_eq(count(t, "kt"), 1, "%s", t);   /* only its var line */
	cr_assert(strstr(t, "for k0 = 0 to 4096 step 32 unroll 4 {\n"), "%s", t);
	free(t);
	ks_ir_free(k);
}

Test(specialize, constant_k_not_multiple_of_32_keeps_the_tail)
{
	ks_ir_kernel_t *k = gemm(KS_DTYPE_BF16, 1, 4096, 4100);
	char *t = text(k);

	cr_assert_eq(count(t, "lanes {"), 2, "%s", t);
	cr_assert(strstr(t, "for k0 = 0 to 4096 step 32 unroll 4 {\n"), "%s", t);
	cr_assert(strstr(t, "decl kt = (4096 + lane)\n"), "%s", t);
	cr_assert(strstr(t, "if (kt < 4100) {\n"), "%s", t);
	cr_assert_eq(count(t, "% 32"), 0, "%s", t);
	free(t);
	ks_ir_free(k);
}

Test(specialize, bound_m1_makes_the_general_grid_a_constant)
{
	ks_spec_t spec;
	ks_ir_kernel_t *k;
	char err[256], *t;
	int i;

	cr_assert_eq(gemm_spec(KS_DTYPE_F32, KS_MODE_EXACT, 1, 4096, 4096,
	    &spec, err, sizeof err), KS_OK);
	k = ks_kernel_gemm.build(&spec, "general");
	for (i = 0; i < k->nparams; i++)
		if (k->params[i].kind == KS_PARAM_SCALAR)
			ks_pass_bind(k, i, spec.dims[i - 3].value);
	cr_assert_eq(ks_pass_run(k, err, sizeof err), KS_OK, "%s", err);
	t = text(k);
	cr_assert(strstr(t, "\ngrid 1024\n"), "%s", t);
	free(t);
	t = c_text(k, k->grid);
	cr_assert_str_eq(t, "1024");
	free(t);
	ks_ir_free(k);
}

/* ---- validation ---- */

static int validate(const ks_dim_t *dims, int n, char *err, size_t errlen)
{
	ks_spec_t spec;

	return ks_kernel_validate(&ks_kernel_gemm, KS_DTYPE_F32,
	    KS_MODE_EXACT, dims, n, &spec, err, errlen);
}

#define EXPECT_SHAPE_ERROR(code, words, ...) do {                           \
	ks_dim_t d_[] = { __VA_ARGS__ };                                    \
	char e_[256];                                                       \
	int rc_ = validate(d_, (int)(sizeof d_ / sizeof *d_), e_,           \
	    sizeof e_);                                                     \
	cr_assert_eq(rc_, (code), "rc %d (%s), expected %d", rc_, e_,       \
	    (code));                                                        \
	cr_assert(strstr(e_, (words)) != NULL, "\"%s\" lacks \"%s\"", e_,   \
	    (words));                                                       \
} while (0)

Test(specialize, validate_accepts_any_order_and_normalizes_it)
{
	ks_dim_t dims[] = { { "K", 1, 4096 }, { "M", 0, 0 },
	    { "N", 1, 11008 } };
	ks_spec_t spec;
	char err[256];

	cr_assert_eq(ks_kernel_validate(&ks_kernel_gemm, KS_DTYPE_BF16,
	    KS_MODE_FAST, dims, 3, &spec, err, sizeof err), KS_OK, "%s", err);
	cr_assert_eq(spec.ndims, 3);
	cr_assert_str_eq(spec.dims[0].name, "M");
	cr_assert_eq(spec.dims[0].is_const, 0);
	cr_assert_str_eq(spec.dims[1].name, "N");
	cr_assert_eq(spec.dims[1].value, 11008);
	cr_assert_str_eq(spec.dims[2].name, "K");
	cr_assert_eq(spec.dims[2].value, 4096);
	cr_assert_eq(spec.def, &ks_kernel_gemm);
}

Test(specialize, validate_rejects_missing_duplicate_and_unknown_dims)
{
	EXPECT_SHAPE_ERROR(KS_E_BAD_SHAPE, "missing shape parameter N",
	    { "M", 1, 1 }, { "K", 1, 64 });
	EXPECT_SHAPE_ERROR(KS_E_BAD_SHAPE, "K is given twice",
	    { "M", 1, 1 }, { "N", 1, 64 }, { "K", 1, 64 }, { "K", 1, 64 });
	EXPECT_SHAPE_ERROR(KS_E_BAD_SHAPE, "unknown shape parameter Q",
	    { "M", 1, 1 }, { "N", 1, 64 }, { "K", 1, 64 }, { "Q", 1, 2 });
	EXPECT_SHAPE_ERROR(KS_E_BAD_SHAPE, "unknown shape parameter m",
	    { "m", 1, 1 }, { "N", 1, 64 }, { "K", 1, 64 });
	EXPECT_SHAPE_ERROR(KS_E_BAD_SHAPE,
	    "N is given both as a constant and as dynamic",
	    { "M", 1, 1 }, { "N", 1, 64 }, { "K", 1, 64 }, { "N", 0, 0 });
}

Test(specialize, validate_rejects_out_of_range_and_too_large_sizes)
{
	EXPECT_SHAPE_ERROR(KS_E_BAD_SHAPE, "M must be >= 1",
	    { "M", 1, 0 }, { "N", 1, 64 }, { "K", 1, 64 });
	EXPECT_SHAPE_ERROR(KS_E_BAD_SHAPE, "K must be >= 1",
	    { "M", 1, 1 }, { "N", 1, 64 }, { "K", 1, -5 });
	EXPECT_SHAPE_ERROR(KS_E_TOO_LARGE, "N must be <=",
	    { "M", 1, 1 }, { "N", 1, INT64_MAX }, { "K", 1, 64 });
	/* Each dim within KS_MAX_DIM, W = N*K = 2^62 elements is not. */
	EXPECT_SHAPE_ERROR(KS_E_TOO_LARGE, "buffer W of N*K",
	    { "M", 1, 1 }, { "N", 1, KS_MAX_DIM }, { "K", 1, KS_MAX_DIM });
	EXPECT_SHAPE_ERROR(KS_E_TOO_LARGE, "buffer y of M*N",
	    { "M", 1, 1 << 21 }, { "N", 1, 1 << 21 }, { "K", 0, 0 });
	/* A dynamic partner leaves the size to the launch. */
	EXPECT_SHAPE_ERROR(KS_OK, "", { "M", 1, 1 },
	    { "N", 1, KS_MAX_DIM }, { "K", 0, 0 });
}

Test(specialize, validate_rejects_bad_dtype_and_mode)
{
	ks_dim_t dims[] = { { "M", 1, 1 }, { "N", 1, 64 }, { "K", 1, 64 } };
	ks_spec_t spec;

	cr_assert_eq(ks_kernel_validate(&ks_kernel_gemm, KS_DTYPE_COUNT,
	    KS_MODE_EXACT, dims, 3, &spec, NULL, 0), KS_E_BAD_DTYPE);
	cr_assert_eq(ks_kernel_validate(&ks_kernel_gemm, KS_DTYPE_F32,
	    (ks_mode_t)7, dims, 3, &spec, NULL, 0), KS_E_BAD_MODE);
}

/* ---- library and selection ---- */

Test(specialize, library_lists_and_finds_gemm)
{
	int n = 0;
	const ks_kernel_def_t *const *lib = ks_kernels(&n);

	cr_assert_geq(n, 1);
	cr_assert_eq(lib[0], &ks_kernel_gemm);
	cr_assert_eq(ks_kernel_find("gemm"), &ks_kernel_gemm);
	cr_assert_null(ks_kernel_find("gemmx"));
	cr_assert_null(ks_kernel_find(NULL));
	cr_assert_str_eq(ks_kernel_gemm.variants[0], "general");
}

static const char *selected(ks_mode_t mode, int64_t m)
{
	ks_spec_t spec;
	char err[256];

	cr_assert_eq(gemm_spec(KS_DTYPE_F16, mode, m, 4096, 4096, &spec, err,
	    sizeof err), KS_OK, "%s", err);
	return ks_kernel_gemm.select(&spec);
}

Test(specialize, select_picks_gemv_m1_small_m_blocked_and_general_by_m)
{
	ks_ir_kernel_t *k;
	int64_t m;

	cr_assert_str_eq(selected(KS_MODE_EXACT, 1), "gemv_m1");
	for (m = 2; m <= 3; m++)
		cr_assert_str_eq(selected(KS_MODE_EXACT, m), "small_m",
		    "M=%lld", (long long)m);
	cr_assert_str_eq(selected(KS_MODE_EXACT, 4), "general");
	cr_assert_str_eq(selected(KS_MODE_EXACT, 7), "general");
	cr_assert_str_eq(selected(KS_MODE_EXACT, 8), "blocked");
	cr_assert_str_eq(selected(KS_MODE_EXACT, 17), "blocked");
	cr_assert_str_eq(selected(KS_MODE_EXACT, 4096), "blocked");
	cr_assert_str_eq(selected(KS_MODE_EXACT, DYN), "general");
	/* gemm has no fast variant: fast selects what exact selects. */
	cr_assert_str_eq(selected(KS_MODE_FAST, 1), "gemv_m1");
	cr_assert_str_eq(selected(KS_MODE_FAST, 2), "small_m");
	cr_assert_str_eq(selected(KS_MODE_FAST, 5), "general");
	cr_assert_str_eq(selected(KS_MODE_FAST, 17), "blocked");
	k = gemm(KS_DTYPE_F32, 1, 8, 8);
	cr_assert_str_eq(k->variant, "gemv_m1");
	cr_assert_str_eq(k->entry, "ks_gemm_gemv_m1");
	ks_ir_free(k);
	k = gemm(KS_DTYPE_F32, 2, 8, 8);
	cr_assert_str_eq(k->entry, "ks_gemm_small_m");
	ks_ir_free(k);
	k = gemm(KS_DTYPE_F32, 5, 8, 8);
	cr_assert_str_eq(k->entry, "ks_gemm_general");
	ks_ir_free(k);
	k = gemm(KS_DTYPE_F32, 17, 8, 8);
	cr_assert_str_eq(k->entry, "ks_gemm_blocked");
	cr_assert_eq(k->nlanes, 16);
	ks_ir_free(k);
	cr_assert_str_eq(ks_kernel_gemm.variants[2], "small_m");
	cr_assert_str_eq(ks_kernel_gemm.guards[2], "M is a constant in 2..3");
	cr_assert_str_eq(ks_kernel_gemm.variants[3], "blocked");
	cr_assert_str_eq(ks_kernel_gemm.guards[3],
	    "M is a constant of 8 or more");
}

/* small_m is built only where its guard holds: a dynamic M or one past 3
 * has no small_m IR. */
Test(specialize, small_m_is_built_only_inside_its_guard)
{
	ks_spec_t spec;
	ks_ir_kernel_t *k;
	char err[256];

	cr_assert_eq(gemm_spec(KS_DTYPE_F32, KS_MODE_EXACT, DYN, 8, 8, &spec,
	    err, sizeof err), KS_OK);
	cr_assert_null(ks_kernel_gemm.build(&spec, "small_m"));
	cr_assert_eq(gemm_spec(KS_DTYPE_F32, KS_MODE_EXACT, 4, 8, 8, &spec,
	    err, sizeof err), KS_OK);
	cr_assert_null(ks_kernel_gemm.build(&spec, "small_m"));
	/* Forcing a variant outside its guard is refused with a reason;
	 * general applies everywhere. */
	cr_assert_eq(ks_specialize_variant(&spec, "small_m", &k, err,
	    sizeof err), KS_E_UNSUPPORTED);
	cr_assert(strstr(err, "does not apply") != NULL, "%s", err);
	cr_assert_eq(ks_specialize_variant(&spec, "general", &k, err,
	    sizeof err), KS_OK, "%s", err);
	cr_assert_str_eq(k->variant, "general");
	ks_ir_free(k);
	cr_assert_eq(gemm_spec(KS_DTYPE_F32, KS_MODE_EXACT, 3, 8, 8, &spec,
	    err, sizeof err), KS_OK);
	k = ks_kernel_gemm.build(&spec, "small_m");
	cr_assert_not_null(k);
	ks_ir_free(k);
}

/* ---- fingerprints ---- */

static ks_ir_kernel_t *build_f32_only(const ks_spec_t *spec,
    const char *variant)
{
	ks_spec_t s = *spec;

	s.dtype = KS_DTYPE_F32;
	return ks_kernel_gemm.build(&s, variant);
}

static ks_ir_kernel_t *build_unhinted(const ks_spec_t *spec,
    const char *variant)
{
	ks_ir_kernel_t *k = ks_kernel_gemm.build(spec, variant);

	if (k != NULL)
		ks_test_clear_hints(k->body);
	return k;
}

Test(specialize, fingerprint_is_stable_and_follows_the_definition)
{
	const ks_hash_t *a = ks_kernel_fingerprint(&ks_kernel_gemm);
	const ks_hash_t *b = ks_kernel_fingerprint(&ks_kernel_gemm);
	ks_kernel_def_t other = ks_kernel_gemm;
	ks_hash_t fresh, changed;

	cr_assert_not_null(a);
	cr_assert(ks_hash_eq(a, b));
	cr_assert_eq(ks_kernel_fingerprint_compute(&ks_kernel_gemm, &fresh),
	    KS_OK);
	cr_assert(ks_hash_eq(a, &fresh));
	/* Not in the library: no cached fingerprint. */
	cr_assert_null(ks_kernel_fingerprint(&other));
	/* Another kernel name, another version, or a builder whose IR no
	 * longer follows the dtype: each changes the fingerprint. */
	other.name = "gemm2";
	ks_kernel_fingerprint_compute(&other, &changed);
	cr_assert_not(ks_hash_eq(a, &changed));
	other = ks_kernel_gemm;
	other.version++;
	ks_kernel_fingerprint_compute(&other, &changed);
	cr_assert_not(ks_hash_eq(a, &changed));
	other = ks_kernel_gemm;
	other.build = build_f32_only;
	ks_kernel_fingerprint_compute(&other, &changed);
	cr_assert_not(ks_hash_eq(a, &changed));
	/* gemv_m1's unroll hint (a schedule, not arithmetic, but part of
	 * what NVRTC is given): the probes reach its k loop. */
	other = ks_kernel_gemm;
	other.build = build_unhinted;
	ks_kernel_fingerprint_compute(&other, &changed);
	cr_assert_not(ks_hash_eq(a, &changed), "the hint is not hashed");
}

/*
 * Every kernel of the library is a consistent definition, and every one of
 * its variants is selected by some fingerprint probe in some dtype, so the
 * fingerprint covers its IR (and not only its name and guard).  Each
 * probe's IR passes the verifier.
 */
Test(specialize, every_library_variant_is_selected_by_a_fingerprint_probe)
{
	int64_t probes[64][KS_MAX_DIMS];
	const ks_kernel_def_t *const *lib;
	int n, i, p, np, v, d, seen[16];
	ks_dtype_t dt, wdt;
	ks_mode_t mode;

	lib = ks_kernels(&n);
	cr_assert_gt(n, 0);
	for (i = 0; i < n; i++) {
		const ks_kernel_def_t *def = lib[i];

		cr_assert_leq(def->nvariants, 16);
		cr_assert_str_eq(def->variants[0], "general", "%s", def->name);
		cr_assert_eq(ks_kernel_find(def->name), def);
		memset(seen, 0, sizeof seen);
		np = ks_kernel_probes(def, probes, 64);
		cr_assert_geq(np, 6);
		/* The plain dtypes in mode exact, then each block-format
		 * weight in mode fast (probe_combo), as the fingerprint
		 * probes them. */
		for (p = 0; p < np; p++)
			for (d = 0; probe_combo(def, d, &dt, &wdt, &mode) >= 0;
			    d++) {
				ks_dim_t dims[KS_MAX_DIMS];
				ks_ir_kernel_t *k;
				ks_spec_t spec;
				char err[512];
				int j;

				if (!probe_combo(def, d, &dt, &wdt, &mode))
					continue;
				for (j = 0; j < def->ndims; j++) {
					dims[j].name = def->dims[j];
					dims[j].is_const = probes[p][j] != 0;
					dims[j].value = probes[p][j];
				}
				if (ks_kernel_validate_mixed(def, dt, wdt, mode,
				    dims, def->ndims, &spec, err,
				    sizeof err) != KS_OK)
					continue;
				cr_assert_eq(ks_specialize(&spec, &k, err,
				    sizeof err), KS_OK, "%s probe %d: %s",
				    def->name, p, err);
				for (v = 0; v < def->nvariants; v++)
					if (strcmp(k->variant,
					    def->variants[v]) == 0)
						seen[v] = 1;
				cr_assert_eq(ks_ir_verify(k, err, sizeof err),
				    KS_OK, "%s.%s: %s", def->name, k->variant,
				    err);
				ks_ir_free(k);
			}
		for (v = 0; v < def->nvariants; v++)
			cr_assert(seen[v], "%s: no probe selects variant %s "
			    "(add one to the definition's probes)", def->name,
			    def->variants[v]);
	}
}
