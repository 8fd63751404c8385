/*
 * The cpu backend's vector lanes (jit/cpu_vec.c): on AVX-512 targets the
 * LANES of a kernel that reads a byte buffer are lowered as explicit
 * 16-wide vectors, elsewhere as the lane loop; both must give the bits of
 * plain C, and the assembly shows which lowering ran.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../jit/jit.h"
#include "gpu.h"
#include "jitkit.h"
#include "../ref/ref.h"

/* ---- the cpu backend's vector lanes (jit/cpu_vec.c) ---- */

enum { VG = 64, VPAD = 16, VBLK = 34 };

/*
 * Every construct jit/cpu_vec.c lowers, in a kernel that reads a byte
 * buffer (so its LANES are vectors on AVX-512 targets).  Work-group g has
 * the 34-byte block at o = 16 + 34 g of B (an f16 scale d, 32 code
 * bytes; B has 16 bytes more on each side); lane l, k = 32 g + l:
 *   s  = (B[o+2+l] ^ 128) - 128                     a signed byte
 *   lo = B[o+2+(l & 15)] & 15, hi = B[o+2+(l & 15)] >> 4
 *   q  = l < 16 ? lo : hi                           (IF on the lane)
 *   qs = B[o+2+l] & 15 ^ ((B[o+2+l] & 15 ^ B[o+2+l-16] >> 4) & -(l >> 4))
 *                                                   (q by bit select)
 *   sh = (g & 1) * 4, nb = B[o+2+l] >> sh & 15      (a uniform shift)
 *   y[k] = d * f32(q - 8) + fma(f32(nb), d, -x[g]) / d
 *   yi[k] = s * 3 ^ q << 8 ^ qs << 12
 *   acc = fma(x[k], d * f32(s), acc); acc = fma(x[k], f32(qs), acc)
 *   ysum[g] = the canonical sum of acc
 * and a second LANES, which is not vectors (a select on the lane), reads
 * the i64 lane variable kk = k the first one set: z[kk] = l < 3 ? x[kk]
 * : 0.5.
 */
static ks_ir_kernel_t *vec_kernel(void)
{
	ks_ir_kernel_t *k = ks_ir_new("veclanes", "t", 32);
	int B = ks_ir_buffer_bytes(k, "B");
	int x = ks_ir_buffer(k, "x", KS_DTYPE_F32, KS_ACCESS_READ);
	int y = ks_ir_buffer(k, "y", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int yi = ks_ir_buffer_i32(k, "yi", KS_ACCESS_WRITE);
	int ysum = ks_ir_buffer(k, "ysum", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int z = ks_ir_buffer(k, "z", KS_DTYPE_F32, KS_ACCESS_WRITE);
	int n = ks_ir_scalar(k, "n", KS_TY_I64);
	int o = ks_ir_var(k, "o", KS_TY_I64, KS_VAR_UNIFORM);
	int d = ks_ir_var(k, "d", KS_TY_F32, KS_VAR_UNIFORM);
	int sh = ks_ir_var(k, "sh", KS_TY_I32, KS_VAR_UNIFORM);
	int acc = ks_ir_var(k, "acc", KS_TY_F32, KS_VAR_LANE);
	int kk = ks_ir_var(k, "kk", KS_TY_I64, KS_VAR_LANE);
	int s = ks_ir_var(k, "s", KS_TY_I32, KS_VAR_LANE);
	int q = ks_ir_var(k, "q", KS_TY_I32, KS_VAR_LANE);
	int qs = ks_ir_var(k, "qs", KS_TY_I32, KS_VAR_LANE);
	int nb = ks_ir_var(k, "nb", KS_TY_I32, KS_VAR_LANE);
	ks_stmt_t *lanes = ks_s_lanes(k), *L = lanes->body, *half, *l2;
	ks_expr_t *e;
#define I32(v) ks_x_cast(k, KS_TY_I32, GI(v))
#define BYTE(off) ks_x_load(k, B, GBIN(ADD, GV(o), (off)))
#define F32(v) ks_x_cast(k, KS_TY_F32, (v))
#define XK ks_x_load(k, x, GV(kk))

	k->grid = GP(n);
	ks_s_append(k, k->body, ks_s_decl(k, o, GBIN(ADD, GI(VPAD),
	    GBIN(MUL, ks_x_group(k), GI(VBLK)))));
	ks_s_append(k, k->body, ks_s_decl(k, d, ks_x_un(k, KS_UN_F16,
	    GBIN(BOR, BYTE(GI(0)), GBIN(SHL, BYTE(GI(1)), I32(8))))));
	ks_s_append(k, k->body, ks_s_decl(k, sh, ks_x_cast(k, KS_TY_I32,
	    GBIN(MUL, GBIN(REM, ks_x_group(k), GI(2)), GI(4)))));
	ks_s_append(k, k->body, ks_s_decl(k, acc, ks_x_f32(k, 0.0f)));
	ks_s_append(k, k->body, ks_s_decl(k, kk, NULL));
	ks_s_append(k, L, ks_s_assign(k, kk, gpu_gidx(k)));
	ks_s_append(k, L, ks_s_decl(k, s, GBIN(SUB, GBIN(BXOR,
	    BYTE(GBIN(ADD, GI(2), ks_x_lane(k))), I32(128)), I32(128))));
	ks_s_append(k, L, ks_s_decl(k, q, NULL));
	half = ks_s_if(k, GBIN(LT, ks_x_lane(k), GI(16)));
	ks_s_append(k, L, half);
	ks_s_append(k, half->body, ks_s_assign(k, q, GBIN(BAND, BYTE(GBIN(ADD,
	    GI(2), GBIN(BAND, ks_x_lane(k), GI(15)))), I32(15))));
	half->orelse = ks_s_block(k);
	ks_s_append(k, half->orelse, ks_s_assign(k, q, GBIN(SHR, BYTE(GBIN(ADD,
	    GI(2), GBIN(BAND, ks_x_lane(k), GI(15)))), I32(4))));
	e = GBIN(BAND, GBIN(BXOR, GBIN(BAND, BYTE(GBIN(ADD, GI(2),
	    ks_x_lane(k))), I32(15)), GBIN(SHR, BYTE(GBIN(ADD, GI(2 - 16),
	    ks_x_lane(k))), I32(4))), GBIN(SUB, I32(0), ks_x_cast(k,
	    KS_TY_I32, GBIN(SHR, ks_x_lane(k), GI(4)))));
	ks_s_append(k, L, ks_s_decl(k, qs, GBIN(BXOR, GBIN(BAND, BYTE(GBIN(ADD,
	    GI(2), ks_x_lane(k))), I32(15)), e)));
	ks_s_append(k, L, ks_s_decl(k, nb, GBIN(BAND, GBIN(SHR, BYTE(GBIN(ADD,
	    GI(2), ks_x_lane(k))), GV(sh)), I32(15))));
	ks_s_append(k, L, ks_s_store(k, y, GV(kk), GBIN(ADD, GBIN(MUL, GV(d),
	    F32(GBIN(SUB, GV(q), I32(8)))), GBIN(DIV, ks_x_fma(k, F32(GV(nb)),
	    GV(d), ks_x_un(k, KS_UN_NEG, ks_x_load(k, x, ks_x_group(k)))),
	    GV(d)))));
	ks_s_append(k, L, ks_s_store(k, yi, GV(kk), GBIN(BXOR, GBIN(BXOR,
	    GBIN(MUL, GV(s), I32(3)), GBIN(SHL, GV(q), I32(8))), GBIN(SHL,
	    GV(qs), I32(12)))));
	ks_s_append(k, L, ks_s_assign(k, acc, ks_x_fma(k, XK, GBIN(MUL, GV(d),
	    F32(GV(s))), GV(acc))));
	ks_s_append(k, L, ks_s_assign(k, acc, ks_x_fma(k, XK, F32(GV(qs)),
	    GV(acc))));
	ks_s_append(k, k->body, lanes);
	ks_s_append(k, k->body, ks_s_store(k, ysum, ks_x_group(k),
	    ks_x_reduce(k, KS_RED_SUM, acc)));
	l2 = ks_s_lanes(k);
	ks_s_append(k, l2->body, ks_s_store(k, z, GV(kk), ks_x_select(k,
	    GBIN(LT, ks_x_lane(k), GI(3)), XK, ks_x_f32(k, 0.5f))));
	ks_s_append(k, k->body, l2);
#undef I32
#undef BYTE
#undef F32
#undef XK
	return k;
}

typedef struct {
	float y[VG * 32], ysum[VG], z[VG * 32];
	int32_t yi[VG * 32];
} vec_out_t;

static float ref_f16(const uint8_t *p)
{
	return ref_bits_f32(gpu_f16_bits((uint16_t)(p[0] | p[1] << 8)));
}

/* vec_kernel's outputs in plain C; PLANT swaps q's nibbles in the upper
 * half of the lanes (a lowering that took the wrong branch there). */
static void vec_ref(const uint8_t *B, const float *x, vec_out_t *r,
    int plant)
{
	int g, l;

	for (g = 0; g < VG; g++) {
		const uint8_t *b = B + VPAD + VBLK * g;
		float d = ref_f16(b), acc[32], t[32];

		for (l = 0; l < 32; l++) {
			int k = 32 * g + l, s = (int8_t)b[2 + l];
			int lo = b[2 + (l & 15)] & 15, hi = b[2 + (l & 15)] >> 4;
			int q = (l < 16) != (plant && l >= 16) ? lo : hi;
			int qs = l < 16 ? (b[2 + l] & 15) : (b[2 + l - 16] >> 4);
			int nb = b[2 + l] >> (g % 2 * 4) & 15;

			r->y[k] = d * (float)(q - 8) + fmaf((float)nb, d,
			    -x[g]) / d;
			r->yi[k] = (s * 3) ^ (q << 8) ^ (qs << 12);
			acc[l] = fmaf(x[k], d * (float)s, 0.0f);
			acc[l] = fmaf(x[k], (float)qs, acc[l]);
			r->z[k] = l < 3 ? x[k] : 0.5f;
		}
		for (l = 0; l < 16; l++)
			t[l] = acc[l] + acc[l + 16];
		for (l = 8; l >= 1; l /= 2) {
			int i;

			for (i = 0; i < l; i++)
				t[i] = t[i] + t[i + l];
		}
		r->ysum[g] = t[0];
	}
}

static size_t vec_bad(const char *who, const vec_out_t *a,
    const vec_out_t *b)
{
	size_t i, bad = 0;

	for (i = 0; i < VG * 32; i++) {
		bad += ref_f32_bits(a->y[i]) != ref_f32_bits(b->y[i]);
		bad += a->yi[i] != b->yi[i];
		bad += ref_f32_bits(a->z[i]) != ref_f32_bits(b->z[i]);
		if (i < VG)
			bad += ref_f32_bits(a->ysum[i]) != ref_f32_bits(b->ysum[i]);
		if (bad && who) {
			cr_log_error("%s: element %zu: y %a / %a, yi %d / %d",
			    who, i, (double)a->y[i], (double)b->y[i], a->yi[i],
			    b->yi[i]);
			return bad;
		}
	}
	return bad;
}

Test(jit, vector_lanes_equal_the_lane_loop_and_plain_c)
{
	static const char *const targets[] = { "x86-64-v4", "x86-64-v3" };
	uint8_t *B = malloc(2 * VPAD + VBLK * VG);
	float *x = malloc(VG * 32 * 4);
	vec_out_t *out = malloc(sizeof *out), *want = malloc(sizeof *want);
	int64_t n = VG;
	uint64_t seed = 11;
	size_t t, i;
	int native_v4 = strcmp(native_target(), "x86-64-v4") == 0;

	for (i = 0; i < 2 * VPAD + VBLK * VG; i++)
		B[i] = (uint8_t)gpu_rng(&seed);
	for (i = 0; i < VG; i++) {      /* finite scales, NaN at group 5 */
		uint8_t *b = B + VPAD + VBLK * i;

		b[1] = (uint8_t)((b[1] & 0x83) | (i == 5 ? 0x7c : 0x3c));
	}
	gpu_adversarial(x, VG * 32, 3);
	vec_ref(B, x, want, 0);
	for (t = 0; t < 2; t++) {
		ks_ir_kernel_t *k = vec_kernel();
		void *params[7] = { &B, &x, &out->y, &out->yi, &out->ysum,
			&out->z, &n };
		float *py = out->y, *ps = out->ysum, *pz = out->z;
		int32_t *pi = out->yi;
		char err[512];
		loaded_t l;

		params[2] = &py;
		params[3] = &pi;
		params[4] = &ps;
		params[5] = &pz;
		cr_assert_eq(ks_ir_verify(k, err, sizeof err), KS_OK, "%s", err);
		/* The vector lowering is inline asm; the lane loop has none. */
		cr_assert_eq(gpu_cpu_asm_has(k, targets[t], "vpmovzxbd"), t == 0,
		    "%s: vector lanes %s", targets[t], t ? "used" :
		    "not used");
		cr_assert_eq(gpu_cpu_asm_has(k, targets[t], "#APP"), t == 0);
		if (t == 0) {   /* the sign extension, the nibble tables */
			cr_assert(gpu_cpu_asm_has(k, targets[t], "vpmovsxbd"));
			cr_assert(gpu_cpu_asm_has(k, targets[t], "vpermps"));
			cr_assert(gpu_cpu_asm_has(k, targets[t], "vpermd"));
			cr_assert(gpu_cpu_asm_has(k, targets[t], "vcvtdq2ps"));
			cr_assert(gpu_cpu_asm_has(k, targets[t], "vfmadd231ps"));
		}
		if (t == 0 && !native_v4) {
			cr_log_warn("no AVX-512 on this machine: the vector "
			    "lanes are compiled and their assembly checked, "
			    "not run");
			ks_ir_free(k);
			continue;
		}
		memset(out, 0xa5, sizeof *out);
		compile_load_at(k, targets[t], &l);
		l.fn(params, 0, VG);
		cr_assert_eq(vec_bad(targets[t], out, want), 0);
		ks_jit_cpu_unload(l.lib);
		ks_ir_free(k);
	}
	/* The comparison is not blind: a wrong nibble in half of the lanes. */
	vec_ref(B, x, out, 1);
	cr_assert_gt(vec_bad(NULL, out, want), VG * 8);
	free(B);
	free(x);
	free(out);
	free(want);
}
