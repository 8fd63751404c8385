/*
 * cpu_lower.h: the cpu backend's lowering state, shared by cpu.c (the
 * lowering of every construct, lane loops for GCC to vectorize) and
 * cpu_vec.c (LANES lowered as explicit 16-wide vectors), and what
 * cpu_target.c (targets, options, identity) gives them.  Private to jit/.
 */
#ifndef KS_JIT_CPU_LOWER_H
#define KS_JIT_CPU_LOWER_H

#include "jit.h"
#include "helpers.h"

#include <libgccjit.h>

typedef struct {
	gcc_jit_context *ctx;
	const ks_ir_kernel_t *k;
	gcc_jit_function *fn;           /* function being built */
	gcc_jit_block *blk;             /* current block */
	gcc_jit_type *t_void, *t_bool, *t_i64, *t_u64, *t_i32, *t_u32;
	gcc_jit_type *t_u16, *t_u8, *t_f32, *t_voidp, *t_cvoidp, *t_int;
	gcc_jit_lvalue **var;           /* per IR var: local or lane array */
	gcc_jit_lvalue **param;         /* per unbound param: unpacked value */
	gcc_jit_lvalue **local;         /* per local array: a stack array */
	gcc_jit_lvalue *group;          /* i64 work-group index */
	gcc_jit_lvalue *lane;           /* lane counter; NULL outside LANES */
	gcc_jit_function *helper[KSH_COUNT];
	gcc_jit_function *fmaf;
	gcc_jit_function *sqrtf, *fabsf; /* gcc builtins */
	gcc_jit_function *prefetch;
	int vec;                        /* LANES as vectors (cpu_vec.c) */
	int vnni;                       /* the target has AVX-512 VNNI */
	int serial;                     /* for unique local and block names */
	int rc;
	char *err;
	size_t errlen;
} lower_t;

/* cpu_target.c: the backend table's target, format and identity calls;
 * whether TARGET is one of the names accepted; -march=TARGET and the
 * compile's options on CTX; CTX compiled to KIND (a shared object, or
 * assembly) in a private temporary directory, its bytes returned. */
int ks_cpu_available(char *err, size_t errlen);
int ks_cpu_resolve_target(const char *requested, char *out, size_t outlen,
    char *err, size_t errlen);
int ks_cpu_check_format(const char *format);
int ks_cpu_identity(const char *target, ks_buf_t *out);
int ks_cpu_list_targets(char (*names)[KS_MAX_NAME + 1], int max);
int ks_cpu_target_known(const char *t);
void ks_cpu_options(gcc_jit_context *ctx, const char *target);
int ks_cpu_emit(gcc_jit_context *ctx, enum gcc_jit_output_kind kind,
    uint8_t **bytes, size_t *len, char *err, size_t errlen);

/* cpu.c: a fresh local of type T; the lowering of E, which must be
 * uniform here (cpu_vec.c calls it for its uniform subexpressions). */
gcc_jit_lvalue *ks_cpu_local(lower_t *L, gcc_jit_type *t, const char *pfx);
gcc_jit_rvalue *ks_cpu_lx(lower_t *L, const ks_expr_t *e);

/* cpu_vec.c: whether TARGET has 512-bit vectors with the instructions
 * cpu_vec.c emits (AVX-512 F and BW), and whether K's LANES are lowered
 * as vectors there. */
int ks_cpu_vec_target(const char *target);
/* Whether TARGET has AVX-512 VNNI (vpdpbusd), which cpu_qdot.c uses. */
int ks_cpu_vnni_target(const char *target);
int ks_cpu_vec_kernel(const ks_ir_kernel_t *k);

/* cpu_qdot.c: a KS_X_QDOT's 16 lanes as one f32 vector, natively
 * (AVX-512 F and BW), from W's bytes at WP and x's at XP (u8 pointers at
 * the pair's offsets) and the accumulator's vector ACC, VI and VF the caller's vector types of 16 i32 and
 * f32 (libgccjit's types are compared by identity).  MEMO holds what one LANES statement computed of
 * x's side of each pair and of q4_k's scales per row, for reuse; zero it
 * before each statement. */
enum { KS_QDOT_MEMO = 24 };
typedef struct {
	int n;
	struct {
		int kind, sub;
		const ks_expr_t *at;
		gcc_jit_rvalue *v[3];
	} e[KS_QDOT_MEMO];
} ks_qdot_memo_t;
gcc_jit_rvalue *ks_cpu_qdot(lower_t *L, ks_qdot_memo_t *memo,
    const ks_expr_t *e, gcc_jit_rvalue *wp, gcc_jit_rvalue *xp,
    gcc_jit_rvalue *acc, gcc_jit_type *vi, gcc_jit_type *vf);

/*
 * cpu_vec.c: lowers the LANES statement BODY as explicit vectors when
 * every statement and expression in it is of the subset cpu_vec.c
 * handles, and returns 1; returns 0, having emitted nothing, when not
 * (the caller then runs the lane loop).
 */
int ks_cpu_vec_lanes(lower_t *L, const ks_stmt_t *body);

/* cpu_vec.c: sets every lane of lane variable VAR (f32 or i32) to the
 * uniform INIT as whole vectors and returns 1 where LANES are vectors;
 * 0, having emitted nothing, elsewhere.  (An element-wise loop would
 * keep GCC from holding the variable in registers.) */
int ks_cpu_vec_fill(lower_t *L, int var, gcc_jit_rvalue *init);

#endif
