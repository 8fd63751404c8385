/*
 * emit_c: the IR as C source for GPU dialects (CUDA C, OpenCL C).
 * Private to jit/: cuda.c and opencl.c each fill one dialect and call
 * ks_jit_emit_c; nothing here switches on a backend's name.
 *
 * Execution model on a GPU (specialize.h, docs/backends.md):
 *   - a work-group is one block / work-group of nlanes threads, launched
 *     1-D: grid = the kernel's group count, block = nlanes;
 *   - lane = the thread's index in its block, group = the block's index;
 *   - uniform code runs redundantly in every thread (all threads compute
 *     the same values, so uniform control flow never diverges);
 *   - a LANES body is simply the thread's own code;
 *   - a lane variable is a per-thread register; a uniform one too;
 *   - a store outside LANES is done by lane 0 only, after every thread has
 *     evaluated the index and the value (a value may contain a REDUCE,
 *     which all threads must reach);
 *   - KS_X_REDUCE is a helper that every thread calls, following the
 *     canonical tree t[l] = t[l] op t[l + s], s = nlanes/2 .. 1, with the
 *     same operand order as cpu.c, and returns t[0] to every thread;
 *   - a REDUCE under a uniform IF is evaluated just before the IF when the
 *     IF does not assign its lane variable, so shuffles and barriers stand
 *     in straight-line code (see hoist_reduces in emit_c.c);
 *   - after a phase that stores to a buffer the kernel also reads (a
 *     LANES statement, or a uniform store), all threads synchronize, so
 *     the next phase sees the stores as the CPU's sequential order would.
 *
 * Numerics: every helper (f16/bf16 conversions, min/max, exp) is the
 * program of helpers.c that cpu.c lowers too, written out in C, so results
 * agree bit for bit with the cpu backend; contraction is off (the dialect's pragma and the
 * backend's compile options); f32 constants keep their exact bits.
 *
 * Output is a pure function of the IR and the dialect: byte-deterministic.
 */
#ifndef KS_JIT_EMIT_C_H
#define KS_JIT_EMIT_C_H

#include "jit.h"

typedef struct ks_c_dialect ks_c_dialect_t;

/* Which reduction helper: operation and element type. */
typedef struct {
	const char *name;       /* "ksh_reduce_sum_f32" */
	const char *type;       /* C type of the element: "float", "ks_i64" */
	const char *scratch;    /* name of a work-group scratch array for
	                           dialects that need one: "ks_red_f32" */
	/* Appends "a + b" or "ksh_fmaxf(a, b)" for operands A and B (the
	 * canonical operand order: A is t[l], B is t[l + s]). */
	void (*combine)(ks_buf_t *out, const char *a, const char *b);
} ks_c_reduce_t;

struct ks_c_dialect {
	const char *name;       /* "CUDA C", "OpenCL C": for the banner */
	const char *prelude;    /* pragmas and the typedefs ks_i64, ks_u32,
	                           ks_u16 */
	const char *fn;         /* storage and qualifiers of helpers, with
	                           a trailing space, or "" */
	/* Appends everything before the entry's name in its definition,
	 * given the block size. */
	void (*entry_head)(ks_buf_t *out, int nlanes);
	const char *global;     /* address space of buffer pointers, or "" */
	const char *restrict_kw;/* qualifier of read-only buffer pointers */
	const char *lane;       /* i64 expression of the lane index */
	const char *group;      /* i64 expression of the group index */
	const char *i64_suffix; /* suffix of i64 literals: "LL", "L" */
	const char *f32_bits;   /* f32 -> u32 bit pattern function */
	const char *bits_f32;   /* u32 bit pattern -> f32 function */
	const char *fma;        /* f32 fused multiply-add, one rounding */
	const char *sqrt;       /* f32 square root, correctly rounded */
	const char *fabs;       /* f32 absolute value */
	const char *i64_to_f32; /* round to nearest even */
	const char *f32_to_i64; /* toward zero */
	int max_lanes;          /* largest block the dialect's reduce serves */
	/* Appends the definition of reduction helper R for NLANES lanes. */
	void (*reduce_helper)(ks_buf_t *out, const ks_c_dialect_t *d,
	    const ks_c_reduce_t *r, int nlanes);
	/* Appends the extra arguments of a call of R after the value
	 * (", ks_lane, ks_red_f32"); NULL when there are none. */
	void (*reduce_args)(ks_buf_t *out, const ks_c_reduce_t *r);
	/* Appends, first in the entry, the declarations R needs (its scratch
	 * array); NULL when it needs none. */
	void (*reduce_locals)(ks_buf_t *out, const ks_c_reduce_t *r,
	    int nlanes);
	const char *phase_sync; /* statement: all threads of the block meet
	                           and see each other's global stores */
	const char *local_kw;   /* qualifier of a local array: "__shared__ " */
	const char *barrier;    /* statement: meet, local stores visible */
	const char *unroll;     /* printf format of a FOR's unroll hint, on
	                           its own line before the loop ("#pragma
	                           unroll %d"); NULL: hints are not emitted */
};

/* Indices of the reductions, for dialects that define them per kind. */
enum { KS_C_RED_SUM_F32, KS_C_RED_MAX_F32, KS_C_RED_SUM_I64,
	KS_C_RED_MAX_I64, KS_C_RED_COUNT };
extern const ks_c_reduce_t ks_c_reduces[KS_C_RED_COUNT];

/* Version of the emitter's output; part of each GPU backend's identity (and
 * so of every key), bumped whenever the emitted text changes for the same
 * IR. */
#define KS_EMIT_C_VERSION 2

/*
 * Appends the source of K in dialect D to OUT.  Errors: KS_E_UNSUPPORTED
 * (nlanes not a power of two up to d->max_lanes), KS_E_COMPILE (IR the
 * model does not allow, e.g. a lane variable in uniform code), with a
 * message in ERR; KS_E_NOMEM.  OUT may hold a partial text on error.
 */
int ks_jit_emit_c(const ks_ir_kernel_t *k, const ks_c_dialect_t *d,
    ks_buf_t *out, char *err, size_t errlen);

#endif
