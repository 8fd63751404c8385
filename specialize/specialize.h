/*
 * specialize: the kernel IR, its passes, and the kernel library.
 *
 * Execution model.  A launch runs a grid of work-groups numbered
 * [0, grid).  Each work-group has nlanes lanes (32 for every kernel so far,
 * which is one CUDA warp).  The body of a kernel runs once per work-group:
 *
 *   - code outside a LANES statement is *uniform*: it computes the same
 *     values for the whole work-group.  On a CPU it runs once; on a GPU every
 *     thread of the block runs it redundantly.
 *   - a LANES statement runs its body once per lane, with KS_X_LANE giving
 *     the lane index.  On a CPU it is a loop `for (lane = 0; lane < nlanes;
 *     lane++)`; on a GPU it is the thread's own body (lane = threadIdx.x).
 *     LANES statements do not nest.
 *
 * Variables.  A KS_VAR_UNIFORM variable has one value per work-group; it may be
 * read anywhere but assigned only outside LANES.  A KS_VAR_LANE variable has
 * one value per lane (a local array on CPUs, a register on GPUs); it is read
 * and assigned only inside LANES, and leaves the lanes only through
 * KS_X_REDUCE, which is uniform.  A DECL of a lane variable may stand outside
 * LANES with a uniform initializer, which every lane receives.  A KS_X_REDUCE
 * combines the lane values in the canonical order (docs/backends.md,
 * "Numerics"): t[l] = v[l], then for s in 16, 8, 4, 2, 1:
 * t[l] = t[l] + t[l + s] for l < s; the result is t[0].
 *
 * Memory.  Buffers hold elements of their storage dtype.  KS_X_LOAD reads
 * element `index` (i64, in elements) and converts it exactly to f32.  An
 * i32 buffer (ks_ir_buffer_i32) holds int32 elements: loads give i32 and
 * stores take i32, unconverted.
 * KS_S_STORE converts an f32 value to the storage dtype once,
 * round-to-nearest-even (NaN stays NaN, overflow gives Inf).  A store outside
 * LANES is done once per work-group (on GPUs by lane 0).
 *
 * Arithmetic is exactly what the IR says: no contraction of mul+add into
 * fma (backends compile with contraction off), fma only as KS_X_FMA, f32
 * division IEEE correctly rounded.  Integer division and remainder truncate
 * toward zero; kernels use them on non-negative values only.
 *
 * Ownership.  All nodes of a kernel live in the kernel's arena and are freed
 * at once by ks_ir_free.  Names passed to builders are copied into the arena.
 */
#ifndef KS_SPECIALIZE_H
#define KS_SPECIALIZE_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

/* ---- types ---- */

typedef enum {
	KS_TY_BOOL,
	KS_TY_I64,
	KS_TY_F32,
	KS_TY_I32,      /* loads of i32 and byte buffers, variables, select,
	                   comparisons, casts to and from i64 and f32, and
	                   the integer operators + - * & | ^ << >> (no / %,
	                   min, max or reduce); index arithmetic is i64 */
} ks_ty_t;

const char *ks_ty_name(ks_ty_t t); /* "bool" "i64" "f32" "i32" */

/* ---- arena ---- */

typedef struct ks_arena ks_arena_t;

ks_arena_t *ks_arena_new(void);
void ks_arena_free(ks_arena_t *a);
/* Zeroed, 16-byte aligned; never returns NULL: a failed allocation
 * unwinds to the thread's innermost ks_ir_guarded, or aborts outside one. */
void *ks_arena_alloc(ks_arena_t *a, size_t n);
/*
 * Runs FN(CTX) and returns what it returns, or KS_E_NOMEM when an arena
 * allocation failed under it: then FN was left at that allocation and
 * every arena made under the guard that was still alive is freed (so FN
 * may hold nothing but arenas across an allocation of one).  Guards do not
 * nest.
 */
int ks_ir_guarded(int (*fn)(void *ctx), void *ctx);
char *ks_arena_strdup(ks_arena_t *a, const char *s);

/* ---- parameters ---- */

typedef enum {
	KS_PARAM_BUFFER,
	KS_PARAM_SCALAR,
} ks_param_kind_t;

enum { KS_ACCESS_READ = 1, KS_ACCESS_WRITE = 2 };

typedef struct {
	const char *name;       /* "x", "W", "y", "M" */
	ks_param_kind_t kind;
	ks_ty_t type;           /* scalar: its type (KS_TY_I64 or KS_TY_F32);
	                           buffer: the loaded and stored value type,
	                           KS_TY_F32, or KS_TY_I32 for an int32
	                           buffer (positions, lengths) */
	ks_dtype_t dtype;       /* f32 buffer: storage dtype; i32 buffer:
	                           KS_DTYPE_F32, unused (the wire's dtypes
	                           stay f32/f16/bf16) */
	int access;             /* buffer: KS_ACCESS_* bits */
	int bound;              /* scalar bound to a constant by ks_pass_bind */
	int64_t value;          /* the constant when bound (i64 scalars) */
	/* buffer: its extent (ks_ir_buffer_dims), row-major, as
	 * comma-separated expressions of the kernel's dims ("M,K": M*K
	 * elements); NULL where the kernel does not declare it */
	const char *dims;
	/* buffer of bytes (ks_ir_buffer_bytes): type KS_TY_I32, an element
	 * is one byte, a load gives it as 0..255, the index and the extent
	 * count bytes; read-only.  dtype is the block format the bytes hold
	 * (KS_DTYPE_Q8_0 ..: the reply's dtype of the buffer), or
	 * KS_DTYPE_F32 for plain bytes (printed "u8"). */
	int bytes;
} ks_ir_param_t;

/* ---- variables ---- */

typedef enum {
	KS_VAR_UNIFORM,
	KS_VAR_LANE,
} ks_var_scope_t;

typedef struct {
	const char *name;       /* hint for printing; unique per kernel */
	ks_ty_t type;
	ks_var_scope_t scope;
} ks_ir_var_t;

/* ---- expressions ---- */

typedef enum {
	KS_X_CONST,   /* type I64: i; F32: f; BOOL: i (0/1) */
	KS_X_PARAM,   /* scalar parameter `param` (index into params) */
	KS_X_VAR,     /* variable `var` (index into vars) */
	KS_X_GROUP,   /* work-group index, i64 */
	KS_X_LANE,    /* lane index, i64; only inside LANES */
	KS_X_BIN,     /* op(a, b) */
	KS_X_FMA,     /* a * b + c, one rounding; f32 */
	KS_X_CAST,    /* a converted to `type` (i64 <-> f32, RNE for i64->f32;
	                 i32 -> i64 exact, i64 -> i32 wraps mod 2^32,
	                 i32 -> f32 RNE, f32 -> i32 toward zero, in range) */
	KS_X_LOAD,    /* buffer `param`, element index a (i64) -> f32 (i32
	                 for an i32 buffer) */
	KS_X_SELECT,  /* a (bool) ? b : c */
	KS_X_REDUCE,  /* canonical tree reduction of lane variable `var` */
	KS_X_UN,      /* un(a): unary math, see ks_unop_t */
	KS_X_LLOAD,   /* local array `param` (index into locals), element
	                 a (i64) -> f32 */
	KS_X_QDOT,    /* a block dot product (below); f32, lane */
} ks_expr_kind_t;

/*
 * KS_X_QDOT, the fast mode's block dot product, in a LANES of 16 lanes:
 * lane l's accumulator updated with its part of the products of weight
 * buffer `param` (a byte buffer in the block format q8_0, q4_0 or q4_k)
 * and activation buffer `param2` (q8_0 bytes) over a pair of blocks of
 * 32 (q4_k: a pair of sub-blocks): lanes 0..7 take the first block,
 * 8..15 the second, lane l its elements 4 (l % 8) .. 4 (l % 8) + 3.  b is
 * the pair's first byte in W (q4_k: its super-block's), c in x; i is the
 * number of blocks (1: the second is absent) or, for q4_k, the pair
 * (0..3) in the super-block.  a is the value as plain IR (k_quant.h,
 * docs/ir.md), an fma whose innermost addend is the accumulator: what
 * every backend computes; one with a native form of the whole
 * (jit/cpu_qdot.c) computes the same bits.
 */
/*
 * Unary operators (KS_X_UN).  NEG and ABS are exact (sign-bit operations
 * on f32, two's complement on i64; ABS of INT64_MIN is undefined, kernels
 * do not use it).  SQRT is f32 only and IEEE correctly rounded on every
 * backend, so it is bitwise equal across backends.  EXP is f32 only and
 * defined by kspec (docs/ir.md): one fixed sequence of f32 operations that
 * every backend emits, within 1.01 ulp of e^x and bitwise equal across
 * backends.  F16 takes an i32 whose low 16 bits are an f16 bit pattern
 * (two bytes of a byte buffer, low | high << 8) and gives that f16's value
 * as f32, exactly, for every pattern (NaN payloads kept).
 */
typedef enum {
	KS_UN_NEG, KS_UN_ABS, KS_UN_SQRT, KS_UN_EXP, KS_UN_F16,
	KS_UN_COUNT
} ks_unop_t;

typedef enum {
	KS_OP_ADD, KS_OP_SUB, KS_OP_MUL, KS_OP_DIV, KS_OP_REM,
	KS_OP_MIN, KS_OP_MAX,
	KS_OP_LT, KS_OP_LE, KS_OP_EQ, KS_OP_NE,  /* -> bool */
	KS_OP_AND, KS_OP_OR,                     /* bool x bool -> bool */
	/* Integer bit operators, on i64 x i64 or i32 x i32, of that type.
	 * Shifts take a count in [0, bits); >> is arithmetic (sign-filling),
	 * << must not overflow, as + - * must not (kernels use them on
	 * values whose range they know). */
	KS_OP_BAND, KS_OP_BOR, KS_OP_BXOR, KS_OP_SHL, KS_OP_SHR,
	KS_OP_COUNT
} ks_binop_t;

typedef enum { KS_RED_SUM, KS_RED_MAX } ks_redop_t;

typedef struct ks_expr ks_expr_t;
struct ks_expr {
	ks_expr_kind_t kind;
	ks_ty_t type;           /* result type */
	ks_binop_t op;          /* KS_X_BIN */
	ks_redop_t red;         /* KS_X_REDUCE */
	ks_unop_t un;           /* KS_X_UN */
	int param;              /* KS_X_PARAM, KS_X_LOAD, KS_X_QDOT (W) */
	int param2;             /* KS_X_QDOT: x */
	int var;                /* KS_X_VAR, KS_X_REDUCE */
	int64_t i;              /* KS_X_CONST of I64/BOOL */
	float f;                /* KS_X_CONST of F32 */
	ks_expr_t *a, *b, *c;   /* operands */
};

/* ---- statements ---- */

typedef enum {
	KS_S_BLOCK,   /* items[0..nitems) in order */
	KS_S_DECL,    /* declare `var`, initialized to a (a may be NULL) */
	KS_S_ASSIGN,  /* var = a */
	KS_S_STORE,   /* buffer `param`[a] = b (b is f32; i32 for an i32
	                 buffer) */
	KS_S_FOR,     /* for (var = a; var < b; var += step) body; var is a
	                 uniform (outside LANES) or lane (inside) i64 variable
	                 declared by the loop; step is a positive constant */
	KS_S_IF,      /* if (a) body else orelse (orelse may be NULL) */
	KS_S_LANES,   /* body once per lane */
	KS_S_LSTORE,  /* local array `param`[a] = b (f32); inside LANES only */
	KS_S_BARRIER, /* all lanes meet and see each other's local stores;
	                 outside LANES and IF only, between LANES phases */
	KS_S_PREFETCH, /* a hint that buffer `param`'s element a (i64, in
	                 bounds) is read soon: no effect on any value; a
	                 prefetch into the cache of level `level` (1 or 2)
	                 on CPUs, nothing on GPUs; outside LANES only */
} ks_stmt_kind_t;

/*
 * Local arrays: per work-group f32 scratch of a constant size (CUDA
 * __shared__, OpenCL __local, a stack array per group on the CPU).  Lanes
 * write them inside LANES (KS_S_LSTORE) and a later LANES phase reads what
 * other lanes wrote after a KS_S_BARRIER between the phases.  Contents are
 * undefined at the start of each work-group.
 */
typedef struct {
	const char *name;
	int64_t nelems;         /* 1 .. KS_IR_LOCAL_MAX */
} ks_ir_local_t;

enum { KS_IR_LOCAL_MAX = 4096 };        /* f32 elements per array (16 KB) */
enum { KS_IR_UNROLL_MAX = 64 };         /* the largest FOR unroll hint */

typedef struct ks_stmt ks_stmt_t;
struct ks_stmt {
	ks_stmt_kind_t kind;
	int var;                /* DECL, ASSIGN, FOR */
	int param;              /* STORE, LSTORE, PREFETCH */
	int level;              /* PREFETCH: the cache level, 1 or 2 */
	int64_t step;           /* FOR */
	int unroll;             /* FOR: a schedule hint, 0 or 2..KS_IR_UNROLL_MAX:
	                           backends whose compiler takes one unroll the
	                           loop this many times (CUDA: #pragma unroll).
	                           It reorders no arithmetic; 0 leaves the
	                           choice to the backend's compiler */
	ks_expr_t *a, *b;
	ks_stmt_t *body;        /* FOR, IF, LANES: always a BLOCK */
	ks_stmt_t *orelse;      /* IF: a BLOCK or NULL */
	ks_stmt_t **items;      /* BLOCK */
	int nitems;
	int cap;                /* BLOCK: allocated slots of items */
};

/* ---- kernel ---- */

typedef struct {
	ks_arena_t *arena;
	const char *name;       /* kernel name, "gemm" */
	const char *variant;    /* "general", "gemv_m1" */
	const char *entry;      /* exported symbol, e.g. "ks_gemm_gemv_m1" */
	ks_ir_param_t *params;
	int nparams;
	int params_cap;
	ks_ir_var_t *vars;
	int nvars;
	int vars_cap;
	ks_ir_local_t *locals;
	int nlocals;
	int locals_cap;
	int nlanes;             /* lanes per work-group (32) */
	ks_expr_t *grid;        /* number of work-groups (i64 expression over
	                           scalar params and constants) */
	ks_stmt_t *body;        /* a BLOCK */
} ks_ir_kernel_t;

/* Builders.  ks_ir_new returns a kernel with an empty body; caller frees
 * with ks_ir_free.  Builders never fail (arena allocation aborts on OOM). */
ks_ir_kernel_t *ks_ir_new(const char *name, const char *variant, int nlanes);
void ks_ir_free(ks_ir_kernel_t *k);
int ks_ir_buffer(ks_ir_kernel_t *k, const char *name, ks_dtype_t dtype,
    int access);                               /* returns param index */
/* A buffer of int32 elements (loads give i32). */
int ks_ir_buffer_i32(ks_ir_kernel_t *k, const char *name, int access);
/* A read-only buffer of bytes: loads give i32 0..255 (ks_ir_param_t.bytes);
 * quantized weights are read through one. */
int ks_ir_buffer_bytes(ks_ir_kernel_t *k, const char *name);
int ks_ir_scalar(ks_ir_kernel_t *k, const char *name, ks_ty_t type);
/* Declares buffer P's extent: DIMS, comma-separated expressions of the
 * kernel's dim names and integers with + - * / ( ) (C's integer
 * arithmetic; the grammar of a launch's groups), outermost first, whose
 * product is the buffer's element count ("B,S,Hkv,D").  Replies carry it
 * (params[].dims) and the loaders check a buffer's size against it
 * before a call.  Copied. */
void ks_ir_buffer_dims(ks_ir_kernel_t *k, int p, const char *dims);
int ks_ir_var(ks_ir_kernel_t *k, const char *name, ks_ty_t type,
    ks_var_scope_t scope);                     /* returns var index */

ks_expr_t *ks_x_i64(ks_ir_kernel_t *k, int64_t v);
ks_expr_t *ks_x_f32(ks_ir_kernel_t *k, float v);
ks_expr_t *ks_x_bool(ks_ir_kernel_t *k, int v);
ks_expr_t *ks_x_param(ks_ir_kernel_t *k, int param);
ks_expr_t *ks_x_var(ks_ir_kernel_t *k, int var);
ks_expr_t *ks_x_group(ks_ir_kernel_t *k);
ks_expr_t *ks_x_lane(ks_ir_kernel_t *k);
ks_expr_t *ks_x_bin(ks_ir_kernel_t *k, ks_binop_t op, ks_expr_t *a,
    ks_expr_t *b);
ks_expr_t *ks_x_fma(ks_ir_kernel_t *k, ks_expr_t *a, ks_expr_t *b,
    ks_expr_t *c);
ks_expr_t *ks_x_cast(ks_ir_kernel_t *k, ks_ty_t to, ks_expr_t *a);
ks_expr_t *ks_x_load(ks_ir_kernel_t *k, int param, ks_expr_t *index);
ks_expr_t *ks_x_select(ks_ir_kernel_t *k, ks_expr_t *cond, ks_expr_t *a,
    ks_expr_t *b);
ks_expr_t *ks_x_reduce(ks_ir_kernel_t *k, ks_redop_t op, int lane_var);
ks_expr_t *ks_x_un(ks_ir_kernel_t *k, ks_unop_t op, ks_expr_t *a);
/* KS_X_QDOT of W and X (byte buffers), I blocks or q4_k's pair, the
 * pair's offsets WOFF and XOFF (uniform i64) and its plain-IR term
 * TERM (f32).  Made by ks_quant_qdot (k_quant.h). */
ks_expr_t *ks_x_qdot(ks_ir_kernel_t *k, int w, int x, int64_t i,
    ks_expr_t *term, ks_expr_t *woff, ks_expr_t *xoff);
int ks_ir_local(ks_ir_kernel_t *k, const char *name, int64_t nelems);
ks_expr_t *ks_x_lload(ks_ir_kernel_t *k, int local, ks_expr_t *index);
/* "neg" "abs" "sqrt" "exp" "f16bits" */
const char *ks_unop_name(ks_unop_t op);

ks_stmt_t *ks_s_block(ks_ir_kernel_t *k);
void ks_s_append(ks_ir_kernel_t *k, ks_stmt_t *block, ks_stmt_t *s);
ks_stmt_t *ks_s_decl(ks_ir_kernel_t *k, int var, ks_expr_t *init);
ks_stmt_t *ks_s_assign(ks_ir_kernel_t *k, int var, ks_expr_t *v);
ks_stmt_t *ks_s_store(ks_ir_kernel_t *k, int param, ks_expr_t *index,
    ks_expr_t *v);
/* Returns the FOR; append its body statements to ->body. */
ks_stmt_t *ks_s_for(ks_ir_kernel_t *k, int var, ks_expr_t *begin,
    ks_expr_t *end, int64_t step);
ks_stmt_t *ks_s_if(ks_ir_kernel_t *k, ks_expr_t *cond);  /* ->body, ->orelse */
ks_stmt_t *ks_s_lanes(ks_ir_kernel_t *k);                /* ->body */
ks_stmt_t *ks_s_lstore(ks_ir_kernel_t *k, int local, ks_expr_t *index,
    ks_expr_t *v);
ks_stmt_t *ks_s_barrier(ks_ir_kernel_t *k);
ks_stmt_t *ks_s_prefetch(ks_ir_kernel_t *k, int param, ks_expr_t *index);
/* The same into the second-level cache (a far prefetch, which the first
 * level could not hold until its read). */
ks_stmt_t *ks_s_prefetch_l2(ks_ir_kernel_t *k, int param, ks_expr_t *index);

/* ---- the one structural walker ---- */

/*
 * ks_ir_walk visits every statement and expression of the kernel, nested
 * blocks included, and the grid expression.  Expressions are rewritten
 * post-order: `expr` gets each node after its operands were rewritten and
 * returns the node to keep (itself or a replacement).  Statements are
 * rewritten post-order too: `stmt` gets each statement after its children
 * and returns its replacement: itself, another statement, or NULL to delete
 * it from its block.  in_lanes tells whether the node is inside LANES.
 * Either callback may be NULL.
 */
typedef struct {
	void *ctx;
	ks_expr_t *(*expr)(void *ctx, ks_ir_kernel_t *k, ks_expr_t *e,
	    int in_lanes);
	ks_stmt_t *(*stmt)(void *ctx, ks_ir_kernel_t *k, ks_stmt_t *s,
	    int in_lanes);
} ks_ir_visitor_t;

void ks_ir_walk(ks_ir_kernel_t *k, const ks_ir_visitor_t *v);

/*
 * ks_ir_walk with one more hook, for analyses that need scopes (the
 * verifier): `enter` gets each statement after its own expressions were
 * walked and before its child blocks (body, then orelse); its ctx is
 * v->ctx.  The grid is walked first, then the body.  ks_ir_walk is this
 * with enter NULL: one traversal serves both.
 */
typedef void (*ks_ir_enter_fn)(void *ctx, ks_ir_kernel_t *k, ks_stmt_t *s,
    int in_lanes);
void ks_ir_walk_enter(ks_ir_kernel_t *k, const ks_ir_visitor_t *v,
    ks_ir_enter_fn enter);

/*
 * Replaces each item of BLOCK that is itself a BLOCK by that block's items,
 * in place (one level: a post-order walk has spliced the inner ones).  For
 * a `stmt` callback on a BLOCK after a child statement was replaced by its
 * body.  A variable is visible to the end of its block and names are unique
 * per kernel, so splicing only widens visibility and never changes meaning.
 */
void ks_ir_splice(ks_ir_kernel_t *k, ks_stmt_t *block);

/* ---- text form, verifier, passes ---- */

/* Deterministic canonical text of the kernel (params, vars, grid, body);
 * used for dumps, golden tests and fingerprints. */
int ks_ir_print(const ks_ir_kernel_t *k, ks_buf_t *out);
/* The canonical text of an f32 constant, as ks_ir_print writes it ("0.0",
 * "0x1.8p-3", "-inf", "nan"), NUL-terminated. */
enum { KS_IR_F32_TEXT = 32 };
void ks_ir_f32_text(float f, char out[KS_IR_F32_TEXT]);
/* Writes an expression over scalar params in C syntax ("M*((N+3)/4)");
 * used for the reply's launch when dimensions are dynamic. */
int ks_ir_print_c_expr(const ks_ir_kernel_t *k, const ks_expr_t *e,
    ks_buf_t *out);
/* Evaluates a launch expression (the grid: i64 constants, i64 scalar
 * params, + - * / %); VALS[p] is the value of unbound scalar param p.
 * KS_E_UNSUPPORTED outside that subset, KS_E_INVAL on a division by 0. */
int ks_ir_eval_launch(const ks_ir_kernel_t *k, const ks_expr_t *e,
    const int64_t *vals, int64_t *out);
/* Checks types, scopes (lane vars only in LANES, no nested LANES, uniform
 * vars not assigned in LANES), declarations before use, grid is i64.
 * Returns KS_OK or KS_E_INTERNAL with a message in err. */
int ks_ir_verify(const ks_ir_kernel_t *k, char *err, size_t errlen);

/* Where ks_ir_verify_at found the first problem: the node or declaration
 * it was checking (at most one of them set; none for a rule of the whole
 * kernel, such as reduce's lane count). */
typedef struct {
	const ks_stmt_t *stmt;  /* a statement, or NULL */
	const ks_expr_t *expr;  /* an expression (the grid's too), or NULL */
	int param, var, local;  /* a declaration's index, or -1 */
} ks_ir_site_t;

/* ks_ir_verify that also says where (SITE may be NULL).  For the parser,
 * which turns a site back into a line and column. */
int ks_ir_verify_at(const ks_ir_kernel_t *k, ks_ir_site_t *site, char *err,
    size_t errlen);

/* Whether the N bytes at NAME are kept from kernels' names: NULL when the
 * name may be used, else a phrase saying why ("a word of the text form
 * or a keyword ...").  The verifier and the parser share it (names.c,
 * docs/ir.md "Names"). */
const char *ks_ir_name_reserved(const char *name, size_t n);

/* ---- reading the text form ---- */

enum { KS_IR_PARSE_MSG = 256 };

/* Why ks_ir_parse refused a text. */
typedef struct {
	int line;               /* 1-based; 0 when no place applies (out of
	                           memory) */
	int column;             /* 1-based, in bytes */
	/* "line 12, column 7: expected ')' after the index, found ','":
	 * one line of printable ASCII */
	char message[KS_IR_PARSE_MSG];
} ks_ir_parse_error_t;

/*
 * Reads the canonical text form (docs/ir.md, "Text form"; what
 * ks_ir_print writes) of LEN bytes at TEXT, which need not end in NUL.
 * Strict: only the printer's exact text is accepted, so for every kernel
 * K, ks_ir_parse(print(K)) gives a kernel that prints the same bytes, and
 * a text it accepts prints back to itself.  The kernel is verified
 * (ks_ir_verify) before it is returned; the entry symbol is not read from
 * the text but made as the library makes it, and a text naming another
 * is refused.  Limits: KS_IR_MAX_* (base/limits.h), each checked before
 * what it counts is allocated.
 *
 * On success *OUT is a new kernel (caller frees with ks_ir_free).
 * Errors: KS_E_BAD_KERNEL with ERR's line, column and message;
 * KS_E_NOMEM; KS_E_INVAL for a NULL argument.  ERR may be NULL.  Runs
 * under ks_ir_guarded, so it must not be called under another guard.
 */
int ks_ir_parse(const char *text, size_t len, ks_ir_kernel_t **out,
    ks_ir_parse_error_t *err);

/* Binds scalar parameter `param` to a constant: uses become constants and
 * the parameter leaves the ABI (bound = 1). */
void ks_pass_bind(ks_ir_kernel_t *k, int param, int64_t value);
void ks_pass_fold(ks_ir_kernel_t *k);          /* constant folding */
void ks_pass_trip1(ks_ir_kernel_t *k);         /* trip 0 / 1 loops vanish */
/* FOR loops of constant bounds and 2..8 trips become copies of the body. */
void ks_pass_unroll(ks_ir_kernel_t *k);
/* Removes DECLs/ASSIGNs of variables never read and statements without
 * effect (empty loops, ifs, lanes); stores stay. */
void ks_pass_dce(ks_ir_kernel_t *k);
/* The standard pipeline: fold, trip1, unroll, fold, dce; KSPEC_DUMP=<pass>
 * prints the IR after a pass; the verifier runs after each pass in debug
 * builds. */
int ks_pass_run(ks_ir_kernel_t *k, char *err, size_t errlen);

/* ---- kernel library ---- */

typedef enum { KS_MODE_EXACT, KS_MODE_FAST } ks_mode_t;

/* A shape parameter given by the client: a constant or dynamic. */
typedef struct {
	const char *name;
	int is_const;
	int64_t value;
} ks_dim_t;

/* A normalized request for one kernel, validated by ks_kernel_validate.
 * dims are in the kernel's declared order. */
typedef struct {
	const struct ks_kernel_def *def;
	ks_dtype_t dtype;
	/* The dtype of the kernel's weight buffer (def->weights): dtype
	 * unless the request named another one its wmix allows. */
	ks_dtype_t wdtype;
	ks_mode_t mode;
	ks_dim_t dims[KS_MAX_DIMS];
	int ndims;
} ks_spec_t;

/*
 * Which weight dtype a kernel takes beside its dtype (the request's
 * wdtype; docs/kernels.md, "Mixed precision").  NONE: every buffer has
 * the dtype.  NARROW: dtype f32 with weights in f16 or bf16 (gemm's W,
 * the norms' w), loaded narrow and converted exactly to f32.  F32: weights
 * in f32 with a dtype of f16 or bf16 (rope's table).
 */
typedef enum { KS_WMIX_NONE, KS_WMIX_NARROW, KS_WMIX_F32 } ks_wmix_t;

typedef struct ks_kernel_def {
	const char *name;
	const char *summary;
	int version;                      /* bumped on any definition change */
	const char *const *dims;          /* shape parameters, declared order */
	int ndims;
	const char *const *variants;      /* every variant, "general" first */
	int nvariants;
	/* Picks the variant for a validated spec (no IR built). */
	const char *(*select)(const ks_spec_t *spec);
	/* Guard of a variant in words, for `kernels` and docs. */
	const char *const *guards;
	/* Checks kernel-specific constraints on constant dims, buffer sizes
	 * included, with overflow-checked arithmetic. */
	int (*check)(const ks_spec_t *spec, char *err, size_t errlen);
	/* Builds the IR of `variant` for the spec (dims all still scalar
	 * params; ks_specialize binds the constants afterwards). */
	ks_ir_kernel_t *(*build)(const ks_spec_t *spec, const char *variant);
	/* Extra probe shapes for the fingerprint, dims in declared order
	 * (0: dynamic), so that every variant is selected by some probe;
	 * NULL when the common probes (every dim at one value) suffice. */
	const int64_t (*probes)[KS_MAX_DIMS];
	int nprobes;
	/* The buffer whose dtype is the spec's wdtype ("W"), and the pairs
	 * it allows; NULL and KS_WMIX_NONE for a kernel without one. */
	const char *weights;
	ks_wmix_t wmix;
	/* The weights may also come in a block format (KS_DTYPE_Q8_0 ..,
	 * dtype f32): the kernel's check refuses shapes the blocks do not
	 * tile. */
	int wblocks;
} ks_kernel_def_t;

/* The kernels of the library, one file each (k_<name>.c). */
extern const ks_kernel_def_t ks_kernel_gemm;
extern const ks_kernel_def_t ks_kernel_rmsnorm;
extern const ks_kernel_def_t ks_kernel_add_rmsnorm;
extern const ks_kernel_def_t ks_kernel_softmax;
extern const ks_kernel_def_t ks_kernel_rope;
extern const ks_kernel_def_t ks_kernel_silu_mul;
extern const ks_kernel_def_t ks_kernel_attention_decode;
extern const ks_kernel_def_t ks_kernel_embedding;
extern const ks_kernel_def_t ks_kernel_argmax;
extern const ks_kernel_def_t ks_kernel_kv_append_rope;
extern const ks_kernel_def_t ks_kernel_attention_prefill;
extern const ks_kernel_def_t ks_kernel_attention_paged;
extern const ks_kernel_def_t ks_kernel_gemm_packed;
extern const ks_kernel_def_t ks_kernel_gemm_pack_x;
extern const ks_kernel_def_t ks_kernel_gemm_pack_w;

/* The library, in a fixed order. */
const ks_kernel_def_t *const *ks_kernels(int *count);
const ks_kernel_def_t *ks_kernel_find(const char *name);

/*
 * Fills SPEC from (name, const/dynamic) pairs given in any order and checks
 * them: every parameter of the kernel is exactly once either a constant or
 * dynamic, no unknown names, constants in [1, KS_MAX_DIM], buffer sizes
 * within KS_MAX_ELEMS, plus the kernel's own check.  Errors: KS_E_BAD_SHAPE,
 * KS_E_TOO_LARGE with a message naming the parameter.
 */
int ks_kernel_validate(const ks_kernel_def_t *def, ks_dtype_t dtype,
    ks_mode_t mode, const ks_dim_t *dims, int ndims, ks_spec_t *out,
    char *err, size_t errlen);

/*
 * ks_kernel_validate with the weight dtype: WDTYPE equal to DTYPE is the
 * plain request; another one must be a pair DEF's wmix allows, else
 * KS_E_BAD_DTYPE with a message naming wdtype.  ks_kernel_validate is
 * this with WDTYPE = DTYPE.
 */
int ks_kernel_validate_mixed(const ks_kernel_def_t *def, ks_dtype_t dtype,
    ks_dtype_t wdtype, ks_mode_t mode, const ks_dim_t *dims, int ndims,
    ks_spec_t *out, char *err, size_t errlen);
/* Whether DEF takes weights of WDTYPE beside DTYPE (equal ones always). */
int ks_kernel_wdtype_ok(const ks_kernel_def_t *def, ks_dtype_t dtype,
    ks_dtype_t wdtype);

/* Fingerprint of a kernel definition: its name, version, variant policy and
 * the printed IR of every variant at fixed probe shapes, for each dtype.
 * Computed once; stable across runs and machines. */
const ks_hash_t *ks_kernel_fingerprint(const ks_kernel_def_t *def);
/* The probe shapes the fingerprint samples, dims in declared order (0:
 * dynamic): every dim dynamic, every dim at 1, 2, 17, 4096, 4100, then the
 * kernel's own probes.  Writes at most MAX; returns the count. */
int ks_kernel_probes(const ks_kernel_def_t *def,
    int64_t (*out)[KS_MAX_DIMS], int max);
/* The same hash computed now, uncached, for any definition (one outside the
 * library included, e.g. in tests).  Returns KS_OK, KS_E_INVAL for NULL, or
 * KS_E_NOMEM (then OUT is no fingerprint). */
int ks_kernel_fingerprint_compute(const ks_kernel_def_t *def,
    ks_hash_t *out);

/*
 * Builds the IR for SPEC, binds its constants, runs the pass pipeline.
 * On success *out is the specialized kernel (caller frees with ks_ir_free).
 */
int ks_specialize(const ks_spec_t *spec, ks_ir_kernel_t **out, char *err,
    size_t errlen);
/* ks_specialize with the variant chosen by the caller (NULL: the
 * library's selection), for tests and benchmarks that compare a
 * specialization with `general` at the same shape.  A variant whose guard
 * does not hold is KS_E_UNSUPPORTED. */
int ks_specialize_variant(const ks_spec_t *spec, const char *variant,
    ks_ir_kernel_t **out, char *err, size_t errlen);

#endif
