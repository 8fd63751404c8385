/*
 * ir: the arena and the IR builders.
 *
 * Every node of a kernel lives in the kernel's own arena, so ks_ir_free
 * releases a whole kernel at once and a pass may drop nodes without
 * freeing them.  The growable arrays (params, vars, block items) are
 * reallocated inside the arena: growth leaves the old copy behind until
 * ks_ir_free, which is cheap for kernels of a few hundred nodes.  Because
 * of that growth, a pointer into k->params or k->vars is valid only until
 * the next ks_ir_buffer / ks_ir_scalar / ks_ir_var; hold indices instead.
 *
 * Builders never fail.  Misuse that no client input can cause (an index out
 * of range, a NULL operand) is an internal invariant and asserted.
 *
 * Allocation failures: the builders are called in long straight runs (the
 * kernel files, the passes), so a failed allocation of the arena does not
 * return.  Under ks_ir_guarded (which ks_specialize uses) it unwinds to the
 * guard with longjmp, and the guard frees every arena made under it that
 * is still alive, so nothing of the failed build remains and the call
 * answers KS_E_NOMEM.  Code that runs under a guard therefore holds no
 * memory but its arenas' across an arena allocation (the verifier's
 * scratch arrays are taken and freed between allocations).  Outside a
 * guard a failed allocation aborts with a message.
 */
#include "specialize.h"

#include <assert.h>
#include <setjmp.h>
#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- types ---- */

const char *ks_ty_name(ks_ty_t t)
{
	switch (t) {
	case KS_TY_BOOL: return "bool";
	case KS_TY_I64: return "i64";
	case KS_TY_F32: return "f32";
	case KS_TY_I32: return "i32";
	}
	return "?";
}

/* ---- arena ---- */

/*
 * A chunked bump allocator.  Every allocation is zeroed as it is handed
 * out (a chunk from calloc would zero all of it: most arenas, a kernel
 * built for one probe, use a few KB of their first 64 KB chunk).  A request larger than a quarter of the default
 * chunk gets a chunk of its own, so big arrays do not waste the tail of the
 * current chunk.
 */
#define ARENA_ALIGN 16
#define ARENA_CHUNK ((size_t)64 * 1024)

struct chunk {
	struct chunk *next;
	size_t size;                    /* usable bytes in data */
	size_t used;
	alignas(ARENA_ALIGN) unsigned char data[];
};

struct ks_arena {
	struct chunk *head;             /* the chunk being filled */
	struct chunk *big;              /* dedicated chunks of large requests */
	int guarded;                    /* in the list of a guard */
	struct ks_arena *guard_next;    /* that list */
};

/* The innermost guard of this thread (NULL: none), and the arenas made
 * under it that are still alive. */
static _Thread_local jmp_buf *unwind;
static _Thread_local struct ks_arena *guarded;

static void oom(size_t n)
{
	if (unwind != NULL)
		longjmp(*unwind, 1);
	fprintf(stderr, "kspec: out of memory allocating %zu bytes in the IR "
	    "arena\n", n);
	abort();
}

static void arena_release(ks_arena_t *a);

int ks_ir_guarded(int (*fn)(void *ctx), void *ctx)
{
	jmp_buf env;
	ks_arena_t *a;
	int rc;

	assert(unwind == NULL && guarded == NULL);
	if (setjmp(env) != 0) {
		while ((a = guarded) != NULL) {
			guarded = a->guard_next;
			arena_release(a);
		}
		unwind = NULL;
		return KS_E_NOMEM;
	}
	unwind = &env;
	rc = fn(ctx);
	unwind = NULL;
	/* The arenas that outlive FN (the kernel it made) are nobody's. */
	while ((a = guarded) != NULL) {
		guarded = a->guard_next;
		a->guarded = 0;
		a->guard_next = NULL;
	}
	return rc;
}

static struct chunk *chunk_new(size_t size)
{
	struct chunk *c;

	if (size > SIZE_MAX - sizeof(*c))
		oom(size);
	c = malloc(sizeof(*c) + size);
	if (c == NULL)
		oom(size);
	c->next = NULL;
	c->size = size;
	c->used = 0;
	return c;
}

ks_arena_t *ks_arena_new(void)
{
	ks_arena_t *a = calloc(1, sizeof(*a));

	if (a == NULL)
		oom(sizeof(*a));
	if (unwind != NULL) {
		a->guarded = 1;
		a->guard_next = guarded;
		guarded = a;
	}
	return a;
}

static void chunks_free(struct chunk *c)
{
	while (c != NULL) {
		struct chunk *next = c->next;

		free(c);
		c = next;
	}
}

static void arena_release(ks_arena_t *a)
{
	chunks_free(a->head);
	chunks_free(a->big);
	free(a);
}

void ks_arena_free(ks_arena_t *a)
{
	ks_arena_t **p;

	if (a == NULL)
		return;
	if (a->guarded) {
		for (p = &guarded; *p != NULL && *p != a; p = &(*p)->guard_next)
			;
		assert(*p == a);
		*p = a->guard_next;
	}
	arena_release(a);
}

void *ks_arena_alloc(ks_arena_t *a, size_t n)
{
	struct chunk *c;
	size_t need;

	if (n == 0)
		n = 1;
	if (n > SIZE_MAX - ARENA_ALIGN)
		oom(n);
	need = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
	if (need > ARENA_CHUNK / 4) {
		c = chunk_new(need);
		c->next = a->big;
		a->big = c;
		c->used = need;
		return memset(c->data, 0, need);
	}
	c = a->head;
	if (c == NULL || c->size - c->used < need) {
		c = chunk_new(ARENA_CHUNK);
		c->next = a->head;
		a->head = c;
	}
	c->used += need;
	return memset(c->data + c->used - need, 0, need);
}

char *ks_arena_strdup(ks_arena_t *a, const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = ks_arena_alloc(a, n);

	memcpy(p, s, n);
	return p;
}

/* Grows an arena array of elements of size ELEM from *cap to hold at least
 * one more than LEN; returns the (possibly new) array. */
static void *grow(ks_arena_t *a, void *arr, int len, int *cap, size_t elem)
{
	void *p;
	int ncap;

	if (len < *cap)
		return arr;
	ncap = *cap ? *cap * 2 : 8;
	if (ncap <= *cap)
		oom((size_t)-1);
	p = ks_arena_alloc(a, (size_t)ncap * elem);
	if (len > 0)
		memcpy(p, arr, (size_t)len * elem);
	*cap = ncap;
	return p;
}

/* ---- kernel ---- */

ks_ir_kernel_t *ks_ir_new(const char *name, const char *variant, int nlanes)
{
	ks_arena_t *a = ks_arena_new();
	ks_ir_kernel_t *k = ks_arena_alloc(a, sizeof(*k));
	size_t n;
	char *entry;

	assert(nlanes > 0);
	k->arena = a;
	k->name = ks_arena_strdup(a, name);
	k->variant = ks_arena_strdup(a, variant);
	n = strlen("ks_") + strlen(name) + 1 + strlen(variant) + 1;
	entry = ks_arena_alloc(a, n);
	snprintf(entry, n, "ks_%s_%s", name, variant);
	k->entry = entry;
	k->nlanes = nlanes;
	/* A kernel that never sets its grid runs one work-group; a default
	 * keeps walkers and printers free of NULL checks. */
	k->grid = ks_x_i64(k, 1);
	k->body = ks_s_block(k);
	return k;
}

void ks_ir_free(ks_ir_kernel_t *k)
{
	if (k != NULL)
		ks_arena_free(k->arena);   /* k itself lives in the arena */
}

static int add_param(ks_ir_kernel_t *k, const char *name)
{
	ks_ir_param_t *p;

	k->params = grow(k->arena, k->params, k->nparams, &k->params_cap,
	    sizeof(*k->params));
	p = &k->params[k->nparams];
	memset(p, 0, sizeof(*p));
	p->name = ks_arena_strdup(k->arena, name);
	return k->nparams++;
}

int ks_ir_buffer(ks_ir_kernel_t *k, const char *name, ks_dtype_t dtype,
    int access)
{
	int i = add_param(k, name);

	k->params[i].kind = KS_PARAM_BUFFER;
	k->params[i].type = KS_TY_F32;
	k->params[i].dtype = dtype;
	k->params[i].access = access;
	return i;
}

void ks_ir_buffer_dims(ks_ir_kernel_t *k, int p, const char *dims)
{
	assert(p >= 0 && p < k->nparams &&
	    k->params[p].kind == KS_PARAM_BUFFER);
	k->params[p].dims = ks_arena_strdup(k->arena, dims);
}

int ks_ir_buffer_i32(ks_ir_kernel_t *k, const char *name, int access)
{
	int i = ks_ir_buffer(k, name, KS_DTYPE_F32, access);

	k->params[i].type = KS_TY_I32;
	return i;
}

int ks_ir_buffer_bytes(ks_ir_kernel_t *k, const char *name)
{
	int i = ks_ir_buffer_i32(k, name, KS_ACCESS_READ);

	k->params[i].bytes = 1;
	return i;
}

int ks_ir_scalar(ks_ir_kernel_t *k, const char *name, ks_ty_t type)
{
	int i = add_param(k, name);

	assert(type == KS_TY_I64 || type == KS_TY_F32);
	k->params[i].kind = KS_PARAM_SCALAR;
	k->params[i].type = type;
	return i;
}

int ks_ir_var(ks_ir_kernel_t *k, const char *name, ks_ty_t type,
    ks_var_scope_t scope)
{
	ks_ir_var_t *v;

	k->vars = grow(k->arena, k->vars, k->nvars, &k->vars_cap,
	    sizeof(*k->vars));
	v = &k->vars[k->nvars];
	v->name = ks_arena_strdup(k->arena, name);
	v->type = type;
	v->scope = scope;
	return k->nvars++;
}

/* ---- expressions ---- */

static ks_expr_t *expr(ks_ir_kernel_t *k, ks_expr_kind_t kind, ks_ty_t type)
{
	ks_expr_t *e = ks_arena_alloc(k->arena, sizeof(*e));

	e->kind = kind;
	e->type = type;
	e->param = -1;
	e->param2 = -1;
	e->var = -1;
	return e;
}

ks_expr_t *ks_x_i64(ks_ir_kernel_t *k, int64_t v)
{
	ks_expr_t *e = expr(k, KS_X_CONST, KS_TY_I64);

	e->i = v;
	return e;
}

ks_expr_t *ks_x_f32(ks_ir_kernel_t *k, float v)
{
	ks_expr_t *e = expr(k, KS_X_CONST, KS_TY_F32);

	e->f = v;
	return e;
}

ks_expr_t *ks_x_bool(ks_ir_kernel_t *k, int v)
{
	ks_expr_t *e = expr(k, KS_X_CONST, KS_TY_BOOL);

	e->i = v != 0;
	return e;
}

ks_expr_t *ks_x_param(ks_ir_kernel_t *k, int param)
{
	ks_expr_t *e;

	assert(param >= 0 && param < k->nparams);
	assert(k->params[param].kind == KS_PARAM_SCALAR);
	e = expr(k, KS_X_PARAM, k->params[param].type);
	e->param = param;
	return e;
}

ks_expr_t *ks_x_var(ks_ir_kernel_t *k, int var)
{
	ks_expr_t *e;

	assert(var >= 0 && var < k->nvars);
	e = expr(k, KS_X_VAR, k->vars[var].type);
	e->var = var;
	return e;
}

ks_expr_t *ks_x_group(ks_ir_kernel_t *k)
{
	return expr(k, KS_X_GROUP, KS_TY_I64);
}

ks_expr_t *ks_x_lane(ks_ir_kernel_t *k)
{
	return expr(k, KS_X_LANE, KS_TY_I64);
}

ks_expr_t *ks_x_bin(ks_ir_kernel_t *k, ks_binop_t op, ks_expr_t *a,
    ks_expr_t *b)
{
	ks_ty_t t;
	ks_expr_t *e;

	assert(a != NULL && b != NULL && op >= 0 && op < KS_OP_COUNT);
	switch (op) {
	case KS_OP_LT: case KS_OP_LE: case KS_OP_EQ: case KS_OP_NE:
	case KS_OP_AND: case KS_OP_OR:
		t = KS_TY_BOOL;
		break;
	default:
		t = a->type;
		break;
	}
	e = expr(k, KS_X_BIN, t);
	e->op = op;
	e->a = a;
	e->b = b;
	return e;
}

ks_expr_t *ks_x_fma(ks_ir_kernel_t *k, ks_expr_t *a, ks_expr_t *b,
    ks_expr_t *c)
{
	ks_expr_t *e = expr(k, KS_X_FMA, KS_TY_F32);

	assert(a != NULL && b != NULL && c != NULL);
	e->a = a;
	e->b = b;
	e->c = c;
	return e;
}

ks_expr_t *ks_x_cast(ks_ir_kernel_t *k, ks_ty_t to, ks_expr_t *a)
{
	ks_expr_t *e = expr(k, KS_X_CAST, to);

	assert(a != NULL);
	e->a = a;
	return e;
}

ks_expr_t *ks_x_load(ks_ir_kernel_t *k, int param, ks_expr_t *index)
{
	ks_expr_t *e;

	assert(param >= 0 && param < k->nparams);
	assert(k->params[param].kind == KS_PARAM_BUFFER);
	assert(index != NULL);
	e = expr(k, KS_X_LOAD, k->params[param].type);
	e->param = param;
	e->a = index;
	return e;
}

ks_expr_t *ks_x_select(ks_ir_kernel_t *k, ks_expr_t *cond, ks_expr_t *a,
    ks_expr_t *b)
{
	ks_expr_t *e;

	assert(cond != NULL && a != NULL && b != NULL);
	e = expr(k, KS_X_SELECT, a->type);
	e->a = cond;
	e->b = a;
	e->c = b;
	return e;
}

ks_expr_t *ks_x_reduce(ks_ir_kernel_t *k, ks_redop_t op, int lane_var)
{
	ks_expr_t *e;

	assert(lane_var >= 0 && lane_var < k->nvars);
	assert(k->vars[lane_var].scope == KS_VAR_LANE);
	e = expr(k, KS_X_REDUCE, k->vars[lane_var].type);
	e->red = op;
	e->var = lane_var;
	return e;
}

/* The result type is the operand's: NEG/ABS on f32 or i64, SQRT/EXP on
 * f32; F16 gives f32 from i32 (the verifier checks). */
ks_expr_t *ks_x_un(ks_ir_kernel_t *k, ks_unop_t op, ks_expr_t *a)
{
	ks_expr_t *e;

	assert(a != NULL);
	e = expr(k, KS_X_UN, op == KS_UN_F16 ? KS_TY_F32 : a->type);
	e->un = op;
	e->a = a;
	return e;
}

ks_expr_t *ks_x_qdot(ks_ir_kernel_t *k, int w, int x, int64_t i,
    ks_expr_t *term, ks_expr_t *woff, ks_expr_t *xoff)
{
	ks_expr_t *e;

	assert(term != NULL && woff != NULL && xoff != NULL);
	e = expr(k, KS_X_QDOT, KS_TY_F32);
	e->param = w;
	e->param2 = x;
	e->i = i;
	e->a = term;
	e->b = woff;
	e->c = xoff;
	return e;
}

const char *ks_unop_name(ks_unop_t op)
{
	switch (op) {
	case KS_UN_NEG: return "neg";
	case KS_UN_ABS: return "abs";
	case KS_UN_SQRT: return "sqrt";
	case KS_UN_EXP: return "exp";
	case KS_UN_F16: return "f16bits";
	case KS_UN_COUNT: break;
	}
	return "?";
}

/* ---- statements ---- */

static ks_stmt_t *stmt(ks_ir_kernel_t *k, ks_stmt_kind_t kind)
{
	ks_stmt_t *s = ks_arena_alloc(k->arena, sizeof(*s));

	s->kind = kind;
	s->var = -1;
	s->param = -1;
	return s;
}

ks_stmt_t *ks_s_block(ks_ir_kernel_t *k)
{
	return stmt(k, KS_S_BLOCK);
}

void ks_s_append(ks_ir_kernel_t *k, ks_stmt_t *block, ks_stmt_t *s)
{
	assert(block != NULL && block->kind == KS_S_BLOCK && s != NULL);
	block->items = grow(k->arena, block->items, block->nitems,
	    &block->cap, sizeof(*block->items));
	block->items[block->nitems++] = s;
}

ks_stmt_t *ks_s_decl(ks_ir_kernel_t *k, int var, ks_expr_t *init)
{
	ks_stmt_t *s = stmt(k, KS_S_DECL);

	assert(var >= 0 && var < k->nvars);
	s->var = var;
	s->a = init;
	return s;
}

ks_stmt_t *ks_s_assign(ks_ir_kernel_t *k, int var, ks_expr_t *v)
{
	ks_stmt_t *s = stmt(k, KS_S_ASSIGN);

	assert(var >= 0 && var < k->nvars && v != NULL);
	s->var = var;
	s->a = v;
	return s;
}

ks_stmt_t *ks_s_store(ks_ir_kernel_t *k, int param, ks_expr_t *index,
    ks_expr_t *v)
{
	ks_stmt_t *s = stmt(k, KS_S_STORE);

	assert(param >= 0 && param < k->nparams);
	assert(k->params[param].kind == KS_PARAM_BUFFER);
	assert(index != NULL && v != NULL);
	s->param = param;
	s->a = index;
	s->b = v;
	return s;
}

ks_stmt_t *ks_s_for(ks_ir_kernel_t *k, int var, ks_expr_t *begin,
    ks_expr_t *end, int64_t step)
{
	ks_stmt_t *s = stmt(k, KS_S_FOR);

	assert(var >= 0 && var < k->nvars);
	assert(begin != NULL && end != NULL && step > 0);
	s->var = var;
	s->a = begin;
	s->b = end;
	s->step = step;
	s->body = ks_s_block(k);
	return s;
}

ks_stmt_t *ks_s_if(ks_ir_kernel_t *k, ks_expr_t *cond)
{
	ks_stmt_t *s = stmt(k, KS_S_IF);

	assert(cond != NULL);
	s->a = cond;
	s->body = ks_s_block(k);
	return s;
}

ks_stmt_t *ks_s_lanes(ks_ir_kernel_t *k)
{
	ks_stmt_t *s = stmt(k, KS_S_LANES);

	s->body = ks_s_block(k);
	return s;
}

/* ---- local arrays ---- */

int ks_ir_local(ks_ir_kernel_t *k, const char *name, int64_t nelems)
{
	ks_ir_local_t *l;

	k->locals = grow(k->arena, k->locals, k->nlocals, &k->locals_cap,
	    sizeof(*k->locals));
	l = &k->locals[k->nlocals];
	l->name = ks_arena_strdup(k->arena, name);
	l->nelems = nelems;
	return k->nlocals++;
}

ks_expr_t *ks_x_lload(ks_ir_kernel_t *k, int local, ks_expr_t *index)
{
	ks_expr_t *e = expr(k, KS_X_LLOAD, KS_TY_F32);

	assert(local >= 0 && local < k->nlocals);
	assert(index != NULL);
	e->param = local;
	e->a = index;
	return e;
}

ks_stmt_t *ks_s_lstore(ks_ir_kernel_t *k, int local, ks_expr_t *index,
    ks_expr_t *v)
{
	ks_stmt_t *s = stmt(k, KS_S_LSTORE);

	assert(local >= 0 && local < k->nlocals);
	assert(index != NULL && v != NULL);
	s->param = local;
	s->a = index;
	s->b = v;
	return s;
}

ks_stmt_t *ks_s_barrier(ks_ir_kernel_t *k)
{
	return stmt(k, KS_S_BARRIER);
}

ks_stmt_t *ks_s_prefetch(ks_ir_kernel_t *k, int param, ks_expr_t *index)
{
	ks_stmt_t *s = stmt(k, KS_S_PREFETCH);

	assert(param >= 0 && param < k->nparams);
	assert(index != NULL);
	s->param = param;
	s->a = index;
	s->level = 1;
	return s;
}

ks_stmt_t *ks_s_prefetch_l2(ks_ir_kernel_t *k, int param, ks_expr_t *index)
{
	ks_stmt_t *s = ks_s_prefetch(k, param, index);

	s->level = 2;
	return s;
}
