/*
 * The plumbing of the cpu backend's tests (test_jit.c, test_cpu_vec.c):
 * compile a kernel built with the IR builders and load it from memory,
 * this CPU's target, bitwise comparison (ref.h's ref_f32_bits), a PRNG, and the builders' shorthands
 * (which expect the kernel in K and the current block in BLK).
 */
#ifndef KS_TESTS_JITKIT_H
#define KS_TESTS_JITKIT_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "../jit/jit.h"
#include "../ref/ref.h"

typedef struct {
	ks_jit_cpu_lib_t *lib;
	ks_jit_cpu_entry_t fn;
} loaded_t;

static inline const char *native_target(void)
{
	static char t[KS_MAX_NAME];
	char err[512];

	cr_assert_eq(ks_backend_cpu.resolve_target("auto", t, sizeof(t), err,
	    sizeof(err)), KS_OK, "%s", err);
	return t;
}

static inline void compile_load_at(ks_ir_kernel_t *k, const char *target,
    loaded_t *out)
{
	ks_jit_artifact_t a;
	char err[2048];
	int rc;

	rc = ks_backend_cpu.compile(k, target, "so", &a, err, sizeof(err));
	cr_assert_eq(rc, KS_OK, "compile %s: %s", target, err);
	cr_assert_str_eq(a.format, "so");
	cr_assert_gt(a.len, 0);
	rc = ks_jit_cpu_load(a.bytes, a.len, k->entry, &out->lib, &out->fn,
	    err, sizeof(err));
	cr_assert_eq(rc, KS_OK, "load: %s", err);
	ks_jit_artifact_close(&a);
}

static inline void compile_load(ks_ir_kernel_t *k, loaded_t *out)
{
	compile_load_at(k, native_target(), out);
}

/* Number of positions where A and B differ bitwise. */
static inline size_t mismatches(const float *a, const float *b, size_t n)
{
	size_t i, bad = 0;

	for (i = 0; i < n; i++)
		bad += ref_f32_bits(a[i]) != ref_f32_bits(b[i]);
	return bad;
}

static inline uint64_t rng(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1Dull;
}

/* Shorthands for building. */
#define I(v) ks_x_i64(k, (v))
#define F(v) ks_x_f32(k, (v))
#define V(v) ks_x_var(k, (v))
#define P(p) ks_x_param(k, (p))
#define BIN(op, a, b) ks_x_bin(k, KS_OP_##op, (a), (b))
#define ADD(s) ks_s_append(k, blk, (s))

/* i = group * nlanes + lane */
static inline ks_expr_t *gidx(ks_ir_kernel_t *k)
{
	return BIN(ADD, BIN(MUL, ks_x_group(k), I(k->nlanes)), ks_x_lane(k));
}

#endif
