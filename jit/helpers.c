/*
 * helpers: the programs of helpers.h.  Each is written with a small
 * builder; an operation's type is its first operand's, so the programs
 * read like the C they stand for.  Exactness arguments are beside each.
 */
#include "helpers.h"

#include <assert.h>
#include <string.h>

static int ins(ksh_prog_t *p, ksh_op_t op, ksh_ty_t ty, int a, int b,
    int c, int64_t imm)
{
	ksh_ins_t *i;

	/* The programs are fixed; overflowing KSH_MAX_INS is a bug here. */
	assert(p->nins < KSH_MAX_INS);
	i = &p->ins[p->nins];
	i->op = (uint8_t)op;
	i->ty = (uint8_t)ty;
	i->a = (int16_t)a;
	i->b = (int16_t)b;
	i->c = (int16_t)c;
	i->imm = imm;
	return p->nins++;
}

static ksh_ty_t ty(const ksh_prog_t *p, int x)
{
	return (ksh_ty_t)p->ins[x].ty;
}

static int arg(ksh_prog_t *p, int n)
{
	return ins(p, KSH_ARG, p->arg, -1, -1, -1, n);
}

static int konst(ksh_prog_t *p, ksh_ty_t t, int64_t v)
{
	return ins(p, KSH_CONST, t, -1, -1, -1, v);
}

static int u32c(ksh_prog_t *p, uint32_t v)
{
	return konst(p, KSH_U32, v);
}

static int i32c(ksh_prog_t *p, int32_t v)
{
	return konst(p, KSH_I32, v);
}

static int f32c(ksh_prog_t *p, float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof u);
	return konst(p, KSH_F32, u);
}

static int cvt(ksh_prog_t *p, ksh_ty_t t, int a)
{
	return ins(p, KSH_CVT, t, a, -1, -1, 0);
}

static int bits(ksh_prog_t *p, ksh_ty_t t, int a)
{
	return ins(p, KSH_BITS, t, a, -1, -1, 0);
}

static int bin(ksh_prog_t *p, ksh_op_t op, int a, int b)
{
	return ins(p, op, op >= KSH_EQ && op <= KSH_GE ? KSH_BOOL : ty(p, a),
	    a, b, -1, 0);
}

#define ADD(a, b) bin(p, KSH_ADD, a, b)
#define SUB(a, b) bin(p, KSH_SUB, a, b)
#define MUL(a, b) bin(p, KSH_MUL, a, b)
#define AND(a, b) bin(p, KSH_AND, a, b)
#define OR(a, b) bin(p, KSH_OR, a, b)
#define XOR(a, b) bin(p, KSH_XOR, a, b)
#define SHL(a, b) bin(p, KSH_SHL, a, b)
#define SHR(a, b) bin(p, KSH_SHR, a, b)
#define U(v) u32c(p, v)

static int fma3(ksh_prog_t *p, int a, int b, int c)
{
	return ins(p, KSH_FMA, KSH_F32, a, b, c, 0);
}

static int sel(ksh_prog_t *p, int c, int a, int b)
{
	return ins(p, KSH_SEL, ty(p, a), c, a, b, 0);
}

static int call(ksh_prog_t *p, ksh_id_t h, ksh_ty_t t, int a, int b)
{
	return ins(p, KSH_CALL, t, a, b, -1, h);
}

static void ret(ksh_prog_t *p, int a)
{
	assert(ty(p, a) == p->ret);
	ins(p, KSH_RET, p->ret, a, -1, -1, 0);
}

static void begin(ksh_prog_t *p, const char *name, const char *doc,
    ksh_ty_t r, ksh_ty_t a, int nargs)
{
	p->name = name;
	p->doc = doc;
	p->ret = r;
	p->arg = a;
	p->nargs = nargs;
	p->nins = 0;
}

/*
 * f16 -> f32, exact for every pattern: the exponent is rebiased by adding
 * (127-15)<<23; Inf/NaN get the rest of the exponent range (payload kept,
 * a signaling NaN stays signaling); zero and subnormals are renormalized by
 * one exact f32 subtraction of 2^-14 (its operands and result are normal,
 * so flush-to-zero modes cannot affect it).
 */
static void f16_to_f32(ksh_prog_t *p)
{
	int h, o, e, inf, sub, r;

	begin(p, "ksh_f16_to_f32", "f16 -> f32, exact for every pattern",
	    KSH_F32, KSH_U16, 1);
	h = cvt(p, KSH_U32, arg(p, 0));
	o = SHL(AND(h, U(0x7fff)), U(13));
	e = AND(o, U(0x0f800000));
	o = ADD(o, U(0x38000000));
	inf = ADD(o, U(0x38000000));
	sub = bits(p, KSH_U32, SUB(bits(p, KSH_F32, ADD(o, U(0x00800000))),
	    bits(p, KSH_F32, U(0x38800000))));
	r = sel(p, bin(p, KSH_EQ, e, U(0)), sub, o);
	r = sel(p, bin(p, KSH_EQ, e, U(0x0f800000)), inf, r);
	r = OR(r, SHL(AND(h, U(0x8000)), U(16)));
	ret(p, bits(p, KSH_F32, r));
}

/* bf16 -> f32: the upper half of the f32 pattern. */
static void bf16_to_f32(ksh_prog_t *p)
{
	begin(p, "ksh_bf16_to_f32", "bf16 -> f32: the upper half of the f32 "
	    "pattern", KSH_F32, KSH_U16, 1);
	ret(p, bits(p, KSH_F32, SHL(cvt(p, KSH_U32, arg(p, 0)), U(16))));
}

/*
 * f32 -> f16, round-to-nearest-even, three cases on |x| computed and then
 * selected:
 *   |x| >= 2^16 (Inf, NaN, and finite values whose rounding overflows
 *   anyway): Inf, or a quiet NaN keeping sign and top payload bits;
 *   |x| < 2^-14 (f16 subnormal or zero): add 0.5f, whose ulp 2^-24 is the
 *   f16 subnormal step, so the FP add itself rounds to nearest even; the
 *   low bits of the sum are the f16 pattern (0x400 when it rounds up to the
 *   smallest normal, which is again correct).  An f32 subnormal input that
 *   a DAZ mode reads as zero rounds to zero either way;
 *   otherwise: rebias the exponent and add 0xfff plus the lowest kept bit
 *   (RNE), then shift; a carry gives the next binade, or Inf above 65504.
 */
static void f32_to_f16(ksh_prog_t *p)
{
	int x, sign, m, big, small, nanv, sub, norm, r;

	begin(p, "ksh_f32_to_f16", "f32 -> f16, round to nearest even; NaN "
	    "stays a quiet NaN", KSH_U16, KSH_F32, 1);
	x = bits(p, KSH_U32, arg(p, 0));
	sign = AND(x, U(0x80000000u));
	m = XOR(x, sign);
	big = bin(p, KSH_GE, m, U(0x47800000));
	small = bin(p, KSH_LT, m, U(0x38800000));
	nanv = sel(p, bin(p, KSH_GT, m, U(0x7f800000)),
	    OR(U(0x7e00), AND(SHR(m, U(13)), U(0x3ff))), U(0x7c00));
	sub = SUB(bits(p, KSH_U32, ADD(bits(p, KSH_F32, m), f32c(p, 0.5f))),
	    U(0x3f000000));
	norm = SHR(ADD(m, ADD(U(0xc8000fffu), AND(SHR(m, U(13)), U(1)))),
	    U(13));
	r = sel(p, small, sub, norm);
	r = sel(p, big, nanv, r);
	r = OR(r, SHR(sign, U(16)));
	ret(p, cvt(p, KSH_U16, r));
}

/*
 * f32 -> bf16, round-to-nearest-even by adding 0x7fff plus the lowest kept
 * bit; a carry into the exponent gives the next binade or Inf, which is the
 * correct rounding.  NaN: the upper half with the quiet bit set (sign and
 * top payload kept), so a NaN never becomes Inf.
 */
static void f32_to_bf16(ksh_prog_t *p)
{
	int x, nan, r, q;

	begin(p, "ksh_f32_to_bf16", "f32 -> bf16, round to nearest even; NaN "
	    "stays a quiet NaN", KSH_U16, KSH_F32, 1);
	x = bits(p, KSH_U32, arg(p, 0));
	nan = bin(p, KSH_GT, AND(x, U(0x7fffffff)), U(0x7f800000));
	r = SHR(ADD(x, ADD(U(0x7fff), AND(SHR(x, U(16)), U(1)))), U(16));
	q = OR(SHR(x, U(16)), U(0x40));
	ret(p, cvt(p, KSH_U16, sel(p, nan, q, r)));
}

/*
 * The order key of the f32 bit pattern X: the pattern as a signed integer,
 * with the magnitude bits of negative values flipped, so that integer
 * order is the float order on non-NaN values with -0 below +0, and equal
 * keys are equal patterns.  Integer comparisons never trap, so selects on
 * them if-convert inside lane loops (float comparisons may raise invalid,
 * and GCC keeps them as branches under the default -ftrapping-math).
 */
static int f32_key(ksh_prog_t *p, int x)
{
	int s = cvt(p, KSH_I32, x);

	return XOR(s, AND(SHR(s, i32c(p, 31)), i32c(p, 0x7fffffff)));
}

/* The order key of the constant F. */
static int key_of(ksh_prog_t *p, float f)
{
	uint32_t u;
	int32_t k;

	memcpy(&u, &f, sizeof u);
	k = (int32_t)u;
	k ^= (k >> 31) & 0x7fffffff;
	return i32c(p, k);
}

/* Whether the f32 bit pattern X is a NaN (an integer comparison). */
static int f32_isnan(ksh_prog_t *p, int x)
{
	return bin(p, KSH_GT, AND(x, U(0x7fffffff)), U(0x7f800000));
}

/*
 * f32 min and max.  Semantics: those of C fminf/fmaxf (IEEE 754-2008
 * minNum/maxNum): a NaN operand is ignored, the result is NaN only when
 * both are NaN (then b).  Where C leaves the choice open, it is fixed here
 * so every backend agrees: -0 is below +0 (min(-0, +0) = -0, max(-0, +0) =
 * +0).  Computed on the bit patterns with integer comparisons (f32_key);
 * no libm call.
 */
static void fminmax(ksh_prog_t *p, int is_max)
{
	int ai, bi, ka, kb, take_b;

	begin(p, is_max ? "ksh_fmaxf" : "ksh_fminf", is_max ?
	    "fmaxf: a NaN operand is ignored; max(-0, +0) = +0" :
	    "fminf: a NaN operand is ignored; min(-0, +0) = -0",
	    KSH_F32, KSH_F32, 2);
	ai = bits(p, KSH_U32, arg(p, 0));
	bi = bits(p, KSH_U32, arg(p, 1));
	ka = f32_key(p, ai);
	kb = f32_key(p, bi);
	/* b when a is NaN, or b is not NaN and beyond a. */
	take_b = OR(cvt(p, KSH_U32, f32_isnan(p, ai)),
	    AND(cvt(p, KSH_U32, bin(p, KSH_EQ,
	    cvt(p, KSH_U32, f32_isnan(p, bi)), U(0))),
	    cvt(p, KSH_U32, bin(p, is_max ? KSH_GT : KSH_LT, kb, ka))));
	ret(p, bits(p, KSH_F32, sel(p, bin(p, KSH_NE, take_b, U(0)), bi,
	    ai)));
}

static void iminmax(ksh_prog_t *p, int is_max)
{
	int a, b;

	begin(p, is_max ? "ksh_imax" : "ksh_imin", is_max ? "i64 max" :
	    "i64 min", KSH_I64, KSH_I64, 2);
	a = arg(p, 0);
	b = arg(p, 1);
	ret(p, sel(p, bin(p, is_max ? KSH_GT : KSH_LT, a, b), a, b));
}

static void iabs(ksh_prog_t *p)
{
	int a, z;

	begin(p, "ksh_iabs", "i64 abs", KSH_I64, KSH_I64, 1);
	a = arg(p, 0);
	z = konst(p, KSH_I64, 0);
	ret(p, sel(p, bin(p, KSH_LT, a, z), SUB(z, a), a));
}

/*
 * kspec's exp (docs/ir.md; ref/ref.h ref_expf is the same sequence in
 * plain C): clamp, k = rint(x log2 e) by the 1.5 * 2^23 trick, r = x - k
 * ln2 in two fma steps, a degree-7 polynomial in Horner form with fma,
 * the scale 2^k as two exact powers of two, and the special cases (NaN,
 * overflow, underflow) selected on the order keys, NaN last, so its key
 * does not matter before.
 */
static void expf_(ksh_prog_t *p)
{
	static const float poly[] = { 1.3981999507e-3f, 8.3334519073e-3f,
		4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f };
	int x, xc, kf, r, q, k, k1, y, xb, kx, res;
	size_t j;

	begin(p, "ksh_expf", "kspec's exp (docs/ir.md)", KSH_F32, KSH_F32, 1);
	x = arg(p, 0);
	xc = call(p, KSH_FMAX, KSH_F32, x, f32c(p, -104.0f));
	xc = call(p, KSH_FMIN, KSH_F32, xc, f32c(p, 89.0f));
	kf = MUL(xc, f32c(p, 1.44269502f));
	kf = ADD(kf, f32c(p, 12582912.0f));
	kf = SUB(kf, f32c(p, 12582912.0f));
	r = fma3(p, kf, f32c(p, -0.693145752f), xc);
	r = fma3(p, kf, f32c(p, -1.42860677e-6f), r);
	q = fma3(p, f32c(p, 1.9875691500e-4f), r, f32c(p, poly[0]));
	for (j = 1; j < sizeof poly / sizeof poly[0]; j++)
		q = fma3(p, q, r, f32c(p, poly[j]));
	q = fma3(p, q, MUL(r, r), r);
	q = ADD(q, f32c(p, 1.0f));
	k = cvt(p, KSH_I32, kf);
	k1 = bin(p, KSH_DIV, k, i32c(p, 2));
	y = MUL(q, bits(p, KSH_F32, SHL(cvt(p, KSH_U32, ADD(k1, i32c(p, 127))),
	    U(23))));
	y = MUL(y, bits(p, KSH_F32, SHL(cvt(p, KSH_U32,
	    ADD(SUB(k, k1), i32c(p, 127))), U(23))));
	xb = bits(p, KSH_U32, x);
	kx = f32_key(p, xb);
	res = sel(p, bin(p, KSH_LT, kx, key_of(p, -103.972084f)), U(0),
	    bits(p, KSH_U32, y));
	res = sel(p, bin(p, KSH_GT, kx, key_of(p, 88.7228394f)),
	    U(0x7f800000), res);
	res = sel(p, f32_isnan(p, xb), bits(p, KSH_U32, ADD(x, x)), res);
	ret(p, bits(p, KSH_F32, res));
}

void ksh_build(ksh_id_t h, ksh_prog_t *p)
{
	switch (h) {
	case KSH_F16_TO_F32: f16_to_f32(p); return;
	case KSH_BF16_TO_F32: bf16_to_f32(p); return;
	case KSH_F32_TO_F16: f32_to_f16(p); return;
	case KSH_F32_TO_BF16: f32_to_bf16(p); return;
	case KSH_FMIN: fminmax(p, 0); return;
	case KSH_FMAX: fminmax(p, 1); return;
	case KSH_IMIN: iminmax(p, 0); return;
	case KSH_IMAX: iminmax(p, 1); return;
	case KSH_IABS: iabs(p); return;
	case KSH_EXP: expf_(p); return;
	case KSH_COUNT: break;
	}
	assert(!"no such helper");
}

unsigned ksh_calls(ksh_id_t h)
{
	ksh_prog_t p;
	unsigned m = 0;
	int i;

	ksh_build(h, &p);
	for (i = 0; i < p.nins; i++)
		if (p.ins[i].op == KSH_CALL)
			m |= 1u << p.ins[i].imm;
	return m;
}
