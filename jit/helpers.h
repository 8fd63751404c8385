/*
 * helpers: the numeric helpers every backend's code calls (the f16 and
 * bf16 conversions, f32 min and max, kspec's exp), each defined once as a
 * short straight-line program that every backend lowers instruction by
 * instruction: cpu.c into a libgccjit function, emit_c.c into a C function
 * of the CUDA or OpenCL dialect.  One definition is what makes the
 * backends agree bit for bit: each program uses only IEEE f32 operations
 * (each rounded once), integer operations and bit casts, and its selects
 * choose between values that were all computed, so a branch-free lowering
 * (cpu.c's masks, which vectorize) and a C ?: give the same value.
 *
 * Private to jit/.  A program is a pure function of its helper: building
 * it twice gives the same instructions, so the code built from it is
 * deterministic.
 */
#ifndef KS_JIT_HELPERS_H
#define KS_JIT_HELPERS_H

#include <stdint.h>

/* The helpers, in the order the C dialects define them: a helper calls
 * only helpers before it. */
typedef enum {
	KSH_F16_TO_F32, KSH_BF16_TO_F32, KSH_F32_TO_F16, KSH_F32_TO_BF16,
	KSH_FMIN, KSH_FMAX, KSH_IMIN, KSH_IMAX, KSH_IABS, KSH_EXP,
	KSH_COUNT
} ksh_id_t;

/* Value types of a program.  BOOL is a comparison's result, used only by
 * SEL. */
typedef enum {
	KSH_U16, KSH_U32, KSH_I32, KSH_I64, KSH_F32, KSH_BOOL
} ksh_ty_t;

typedef enum {
	KSH_ARG,        /* parameter number imm */
	KSH_CONST,      /* imm: the value; an F32 constant's bit pattern */
	KSH_CVT,        /* a converted to ty by value: integer widening or
	                   narrowing (modulo), f32 -> integer toward zero */
	KSH_BITS,       /* a reinterpreted as ty: U32 <-> F32 */
	KSH_ADD, KSH_SUB, KSH_MUL, KSH_DIV,     /* ty's arithmetic; DIV is
	                                           integer, toward zero */
	KSH_AND, KSH_OR, KSH_XOR,
	KSH_SHL, KSH_SHR,                       /* SHR: arithmetic on I32 */
	KSH_FMA,        /* a * b + c, rounded once (F32) */
	KSH_EQ, KSH_NE, KSH_LT, KSH_GT, KSH_GE, /* on a's type, -> BOOL;
	                                           integer operands only */
	KSH_SEL,        /* a ? b : c, of integer type ty */
	KSH_CALL,       /* helper imm on a (and b when it takes two) */
	KSH_RET         /* returns a; the last instruction */
} ksh_op_t;

/* One instruction; a, b, c are indices of earlier instructions (-1: no
 * operand).  ty is the type of its value. */
typedef struct {
	uint8_t op;             /* ksh_op_t */
	uint8_t ty;             /* ksh_ty_t */
	int16_t a, b, c;
	int64_t imm;
} ksh_ins_t;

#define KSH_MAX_INS 96

typedef struct {
	const char *name;       /* C name: "ksh_f16_to_f32" */
	const char *doc;        /* one line, what it computes */
	ksh_ty_t ret, arg;      /* result type; type of each parameter */
	int nargs;              /* 1 or 2 */
	int nins;
	ksh_ins_t ins[KSH_MAX_INS];
} ksh_prog_t;

/* Fills P with helper H's program.  Pure; no allocation. */
void ksh_build(ksh_id_t h, ksh_prog_t *p);

/* The helpers H calls (1 << KSH_*), which come before it. */
unsigned ksh_calls(ksh_id_t h);

#endif
