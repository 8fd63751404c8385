/*
 * parse: the canonical text form (docs/ir.md, "Text form") back into a
 * kernel, the exact inverse of print.c.
 *
 * Strict by construction: every token is matched against what the printer
 * would write at that place, spaces, indentation and newlines included,
 * and every number against the printer's own text of its value (an f32
 * through ks_ir_f32_text, an integer through PRId64), so "1.0" is taken
 * where "0x1p+0" is refused.  A text is read once, front to back, with
 * one recursion for blocks and one for expressions, both bounded by
 * KS_IR_MAX_DEPTH; every other count a text controls has its limit in
 * base/limits.h, checked before the thing it counts is made.
 *
 * Nodes are made by the builders of ir.c, so a parsed kernel is what a
 * builder would have made.  The builders assert what only a library bug
 * could break (a buffer used as a value, a reduce of a uniform variable, a
 * step of 0); the parser refuses those itself, with the verifier's words,
 * or builds with a neutral value and sets the field after (a step, an
 * unroll hint, nlanes) for the verifier to judge.  Scopes, types and the
 * lane rules are the verifier's: the parser resolves names against the
 * declaration lists only, runs ks_ir_verify_at on what it built, and turns
 * the node the verifier names back into the line and column it came from
 * (a table of node -> offset kept while parsing).
 *
 * Memory: the kernel's arena and one scratch arena (the name table, the
 * offsets), both made under ks_ir_guarded, so a failed allocation
 * anywhere answers KS_E_NOMEM and leaves nothing behind.
 */
#include "specialize.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KS_STR_(x) #x
#define KS_STR(x) KS_STR_(x)

/* Slots of the name table: a power of two above twice the most names. */
enum { NAME_SLOTS = 16384 };
_Static_assert(2 * (KS_IR_MAX_PARAMS + KS_IR_MAX_VARS + KS_IR_MAX_LOCALS) <=
    NAME_SLOTS, "the name table holds every name a kernel may have");

enum { N_NONE, N_PARAM, N_VAR, N_LOCAL };

typedef struct {
	int kind;               /* N_* */
	int index;
} name_slot_t;

/* Where a node's text starts. */
typedef struct {
	const void *node;
	size_t off;
} site_t;

typedef struct {
	const char *text;
	size_t len;
	size_t pos;
	ks_ir_kernel_t *k;
	ks_arena_t *scratch;
	name_slot_t *names;     /* NAME_SLOTS, open addressing */
	site_t *sites;
	int nsites, sites_cap;
	size_t param_off[KS_IR_MAX_PARAMS];
	size_t var_off[KS_IR_MAX_VARS];
	size_t local_off[KS_IR_MAX_LOCALS];
	size_t dims_off[KS_IR_MAX_PARAMS];      /* a buffer's dims text */
	size_t nlanes_off;
	int64_t local_elems;
	int depth;
	int nstmts, nexprs;
	int failed;
	size_t err_off;
	char msg[KS_IR_PARSE_MSG - 48];  /* room for "line L, column C: " */
} parser_t;

/* ---- errors ---- */

static int fail_at(parser_t *P, size_t off, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Records the first error (at byte OFF) and returns -1. */
static int fail_at(parser_t *P, size_t off, const char *fmt, ...)
{
	va_list ap;

	if (P->failed++)
		return -1;
	P->err_off = off;
	va_start(ap, fmt);
	vsnprintf(P->msg, sizeof P->msg, fmt, ap);
	va_end(ap);
	return -1;
}

static int is_word_char(int c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9');
}

static int is_name_start(int c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* What stands at OFF, for "found ...": printable ASCII only, so that a
 * message can go on the wire as it is. */
static const char *found_at(const parser_t *P, size_t off, char *buf,
    size_t n)
{
	size_t i;
	int c;

	if (off >= P->len)
		return "end of text";
	c = (unsigned char)P->text[off];
	if (c == '\n')
		return "a newline";
	if (c == ' ')
		return "a space";
	if (is_word_char(c) || c == '-' || c == '.') {
		for (i = off; i < P->len && i - off < 24 &&
		    (is_word_char((unsigned char)P->text[i]) ||
		    P->text[i] == '.' || (i == off && P->text[i] == '-'));
		    i++)
			;
		snprintf(buf, n, "'%.*s%s'", (int)(i - off), P->text + off,
		    i < P->len && is_word_char((unsigned char)P->text[i]) ?
		    "..." : "");
		return buf;
	}
	if (c > 0x20 && c < 0x7f)
		snprintf(buf, n, "'%c'", c);
	else
		snprintf(buf, n, "byte 0x%02x", c);
	return buf;
}

static const char *shown(const char *lit, char *buf, size_t n)
{
	if (strcmp(lit, " ") == 0)
		return "a space";
	if (strcmp(lit, "\n") == 0)
		return "a newline";
	snprintf(buf, n, "'%s'", lit);
	return buf;
}

/* ---- tokens ---- */

static int peek(const parser_t *P)
{
	return P->pos < P->len ? (unsigned char)P->text[P->pos] : -1;
}

static int at(const parser_t *P, const char *lit)
{
	size_t n = strlen(lit);

	return P->len - P->pos >= n && memcmp(P->text + P->pos, lit, n) == 0;
}

/* Consumes LIT, or fails: "expected LIT WHERE, found ...". */
static int expect(parser_t *P, const char *lit, const char *where)
{
	char a[32], b[48];

	if (at(P, lit)) {
		P->pos += strlen(lit);
		return 0;
	}
	return fail_at(P, P->pos, "expected %s%s%s, found %s",
	    shown(lit, a, sizeof a), *where ? " " : "", where,
	    found_at(P, P->pos, b, sizeof b));
}

/* The word at the cursor ([A-Za-z0-9_]*), not consumed; its length. */
static size_t word_len(const parser_t *P)
{
	size_t i = P->pos;

	while (i < P->len && is_word_char((unsigned char)P->text[i]))
		i++;
	return i - P->pos;
}

static int word_is(const parser_t *P, const char *w)
{
	size_t n = strlen(w);

	return word_len(P) == n && memcmp(P->text + P->pos, w, n) == 0;
}

/* Reads a name (WHAT, for the message) into OUT (KS_IR_MAX_NAME + 1
 * bytes), checking its form and length; not its meaning. */
static int read_name(parser_t *P, const char *what, char *out)
{
	size_t n = word_len(P);
	char b[48];

	if (n == 0 || !is_name_start(peek(P)))
		return fail_at(P, P->pos, "expected %s, found %s", what,
		    found_at(P, P->pos, b, sizeof b));
	if (n > KS_IR_MAX_NAME)
		return fail_at(P, P->pos, "%s longer than %d bytes", what,
		    KS_IR_MAX_NAME);
	memcpy(out, P->text + P->pos, n);
	out[n] = '\0';
	P->pos += n;
	return 0;
}

/* Reads one of WORDS (NULL-terminated); its index.  WHAT names the
 * choice for the message. */
static int read_choice(parser_t *P, const char *const *words,
    const char *what)
{
	char b[48];
	int i;

	for (i = 0; words[i] != NULL; i++)
		if (word_is(P, words[i])) {
			P->pos += strlen(words[i]);
			return i;
		}
	return fail_at(P, P->pos, "expected %s, found %s", what,
	    found_at(P, P->pos, b, sizeof b));
}

/* Reads a canonical decimal int64 (WHAT for the message): an optional
 * '-', digits, exactly as PRId64 prints the value. */
static int read_int(parser_t *P, const char *what, int64_t *v)
{
	size_t start = P->pos, n;
	char tok[32], canon[32], b[48];
	long long x;
	char *end;

	if (peek(P) == '-')
		P->pos++;
	while (P->pos < P->len && P->text[P->pos] >= '0' &&
	    P->text[P->pos] <= '9')
		P->pos++;
	n = P->pos - start;
	if (n == 0 || (n == 1 && P->text[start] == '-'))
		return fail_at(P, start, "expected %s, found %s", what,
		    found_at(P, start, b, sizeof b));
	if (n >= sizeof tok)
		return fail_at(P, start, "%s out of range (int64)", what);
	memcpy(tok, P->text + start, n);
	tok[n] = '\0';
	errno = 0;
	x = strtoll(tok, &end, 10);
	if (errno == ERANGE)
		return fail_at(P, start, "%s %s out of range (int64)", what,
		    tok);
	snprintf(canon, sizeof canon, "%lld", x);
	if (strcmp(canon, tok) != 0)
		return fail_at(P, start, "expected %s as %s, found '%s'", what,
		    canon, tok);
	*v = x;
	return 0;
}

/* An int that must fit an int (IDX, nlanes, unroll). */
static int read_small(parser_t *P, const char *what, int *v)
{
	size_t start = P->pos;
	int64_t x;

	if (read_int(P, what, &x) != 0)
		return -1;
	if (x < INT_MIN || x > INT_MAX)
		return fail_at(P, start, "%s %" PRId64 " out of range", what,
		    x);
	*v = (int)x;
	return 0;
}

/* "IDX " where IDX must be WANT (declarations are listed in order). */
static int read_index(parser_t *P, const char *what, int want)
{
	size_t start = P->pos;
	int i = 0;

	if (read_small(P, what, &i) != 0)
		return -1;
	if (i != want)
		return fail_at(P, start, "expected %s %d (in order), found %d",
		    what, want, i);
	return expect(P, " ", "after the index");
}

/* ---- names ---- */

static uint32_t name_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h;
}

static const char *slot_name(const parser_t *P, const name_slot_t *e)
{
	switch (e->kind) {
	case N_PARAM: return P->k->params[e->index].name;
	case N_VAR: return P->k->vars[e->index].name;
	default: return P->k->locals[e->index].name;
	}
}

/* The slot of NAME: its entry, or the empty slot where it would go. */
static name_slot_t *slot_of(parser_t *P, const char *s, size_t n)
{
	uint32_t i = name_hash(s, n) & (NAME_SLOTS - 1);
	name_slot_t *e;
	const char *have;

	for (;; i = (i + 1) & (NAME_SLOTS - 1)) {
		e = &P->names[i];
		if (e->kind == N_NONE)
			return e;
		have = slot_name(P, e);
		if (strlen(have) == n && memcmp(have, s, n) == 0)
			return e;
	}
}

static const char *kind_word(int kind)
{
	return kind == N_PARAM ? "param" : kind == N_VAR ? "var" : "local";
}

static size_t decl_off(const parser_t *P, const name_slot_t *e)
{
	return e->kind == N_PARAM ? P->param_off[e->index] :
	    e->kind == N_VAR ? P->var_off[e->index] : P->local_off[e->index];
}

static int line_of(const parser_t *P, size_t off)
{
	int line = 1;
	size_t i;

	for (i = 0; i < off && i < P->len; i++)
		line += P->text[i] == '\n';
	return line;
}

/* Checks NAME (declared at OFF) may be declared: not reserved, not taken.
 * Returns its empty slot. */
static name_slot_t *declare(parser_t *P, const char *name, size_t off)
{
	name_slot_t *e;
	const char *why = ks_ir_name_reserved(name, strlen(name));

	if (why != NULL) {
		fail_at(P, off, "name '%s' is reserved: %s", name, why);
		return NULL;
	}
	e = slot_of(P, name, strlen(name));
	if (e->kind != N_NONE) {
		fail_at(P, off, "duplicate name '%s': already %s %d (line %d)",
		    name, kind_word(e->kind), e->index, line_of(P, decl_off(P,
		    e)));
		return NULL;
	}
	return e;
}

/* Reads a name and looks it up; NULL (and an error) when unknown. */
static const name_slot_t *use(parser_t *P, size_t *off)
{
	char name[KS_IR_MAX_NAME + 1];
	name_slot_t *e;

	*off = P->pos;
	if (read_name(P, "a name", name) != 0)
		return NULL;
	e = slot_of(P, name, strlen(name));
	if (e->kind == N_NONE) {
		fail_at(P, *off, "unknown name '%s' (not a param, var or "
		    "local)", name);
		return NULL;
	}
	return e;
}

/* ---- node offsets ---- */

static void mark(parser_t *P, const void *node, size_t off)
{
	site_t *p;

	if (P->nsites == P->sites_cap) {
		P->sites_cap = P->sites_cap ? 2 * P->sites_cap : 1024;
		p = ks_arena_alloc(P->scratch, (size_t)P->sites_cap *
		    sizeof *p);
		if (P->nsites > 0)
			memcpy(p, P->sites, (size_t)P->nsites * sizeof *p);
		P->sites = p;
	}
	P->sites[P->nsites++] = (site_t){ node, off };
}

static size_t offset_of(const parser_t *P, const void *node)
{
	int i;

	for (i = 0; i < P->nsites; i++)
		if (P->sites[i].node == node)
			return P->sites[i].off;
	return 0;
}

/* ---- expressions ---- */

static ks_expr_t *expr(parser_t *P);

/* Counts a node and a level of nesting before either is made. */
static int enter(parser_t *P, size_t off, int stmt)
{
	if (++P->depth > KS_IR_MAX_DEPTH)
		return fail_at(P, off, "nested deeper than %d blocks and "
		    "expressions", KS_IR_MAX_DEPTH);
	if (stmt && ++P->nstmts > KS_IR_MAX_STMTS)
		return fail_at(P, off, "more than %d statements",
		    KS_IR_MAX_STMTS);
	if (!stmt && ++P->nexprs > KS_IR_MAX_EXPRS)
		return fail_at(P, off, "more than %d expression nodes",
		    KS_IR_MAX_EXPRS);
	return 0;
}

/* "(" expr ", " expr ... ")" after a function word: N operands. */
static int args(parser_t *P, ks_expr_t **out, int n, const char *fn)
{
	char where[48];
	int i;

	snprintf(where, sizeof where, "after %s", fn);
	if (expect(P, "(", where) != 0)
		return -1;
	for (i = 0; i < n; i++) {
		snprintf(where, sizeof where, "between %s's operands", fn);
		if (i > 0 && expect(P, ", ", where) != 0)
			return -1;
		if ((out[i] = expr(P)) == NULL)
			return -1;
	}
	snprintf(where, sizeof where, "closing %s", fn);
	return expect(P, ")", where);
}

static const struct {
	const char *text;
	ks_binop_t op;
} binops[] = {  /* two-character operators first */
	{ "<=", KS_OP_LE }, { "<<", KS_OP_SHL }, { "==", KS_OP_EQ },
	{ "!=", KS_OP_NE }, { "&&", KS_OP_AND }, { "||", KS_OP_OR },
	{ ">>", KS_OP_SHR }, { "+", KS_OP_ADD }, { "-", KS_OP_SUB },
	{ "*", KS_OP_MUL }, { "/", KS_OP_DIV }, { "%", KS_OP_REM },
	{ "<", KS_OP_LT }, { "&", KS_OP_BAND }, { "|", KS_OP_BOR },
	{ "^", KS_OP_BXOR },
};

/* "(" a " " OP " " b ")" */
static ks_expr_t *binary(parser_t *P)
{
	ks_expr_t *a, *b;
	size_t i, n = sizeof binops / sizeof *binops;
	char f[48];

	P->pos++;       /* '(' */
	if ((a = expr(P)) == NULL || expect(P, " ",
	    "before the operator") != 0)
		return NULL;
	for (i = 0; i < n && !at(P, binops[i].text); i++)
		;
	if (i == n) {
		fail_at(P, P->pos, "expected a binary operator, found %s",
		    found_at(P, P->pos, f, sizeof f));
		return NULL;
	}
	P->pos += strlen(binops[i].text);
	if (expect(P, " ", "after the operator") != 0 ||
	    (b = expr(P)) == NULL ||
	    expect(P, ")", "closing the binary expression") != 0)
		return NULL;
	return ks_x_bin(P->k, binops[i].op, a, b);
}

/* Whether C may stand at I of a number's text that began at START: a
 * digit, a letter (of a hex float or, refused later, of a typo), a point,
 * or a sign after a hex float's 'p'. */
static int number_char(const parser_t *P, size_t start, size_t i)
{
	int c = (unsigned char)P->text[i];

	if (is_word_char(c) || c == '.')
		return 1;
	return (c == '-' || c == '+') && i > start &&
	    (P->text[i - 1] == 'p' || P->text[i - 1] == 'P');
}

/* An i64 or f32 constant at the cursor ('-' or a digit). */
static ks_expr_t *number(parser_t *P)
{
	size_t start = P->pos, i = P->pos, n;
	char tok[64], canon[KS_IR_F32_TEXT], b[48];
	int64_t iv;
	double d;
	float f;
	char *end;

	if (at(P, "-inf")) {
		P->pos += 4;
		return ks_x_f32(P->k, -__builtin_inff());
	}
	if (peek(P) == '-')
		i++;
	if (i >= P->len || P->text[i] < '0' || P->text[i] > '9') {
		fail_at(P, i, "expected a digit, found %s",
		    found_at(P, i, b, sizeof b));
		return NULL;
	}
	while (i < P->len && i - start < sizeof tok && number_char(P, start, i))
		i++;
	n = i - start;
	if (n >= sizeof tok) {
		fail_at(P, start, "number longer than %d bytes",
		    (int)sizeof tok - 1);
		return NULL;
	}
	memcpy(tok, P->text + start, n);
	tok[n] = '\0';
	if (strpbrk(tok, ".pPxX") == NULL) {
		if (read_int(P, "an integer", &iv) != 0)
			return NULL;
		return ks_x_i64(P->k, iv);
	}
	errno = 0;
	d = strtod(tok, &end);
	if (*end != '\0') {
		fail_at(P, start, "'%s' is not a number", tok);
		return NULL;
	}
	f = (float)d;
	if (errno == ERANGE || (double)f != d) {
		fail_at(P, start, "f32 constant %s out of range or not exactly "
		    "an f32", tok);
		return NULL;
	}
	ks_ir_f32_text(f, canon);
	if (strcmp(canon, tok) != 0) {
		fail_at(P, start, "expected the f32 constant as %s, found "
		    "'%s'", canon, tok);
		return NULL;
	}
	P->pos += n;
	return ks_x_f32(P->k, f);
}

/* qdot(W, X, I, WOFF, XOFF) = TERM */
static ks_expr_t *qdot(parser_t *P)
{
	const name_slot_t *w, *x;
	ks_expr_t *off[2], *term;
	size_t woff, xoff;
	int64_t i;

	if (expect(P, "(", "after qdot") != 0 || (w = use(P, &woff)) == NULL ||
	    expect(P, ", ", "after qdot's weights") != 0 ||
	    (x = use(P, &xoff)) == NULL ||
	    expect(P, ", ", "after qdot's activations") != 0 ||
	    read_int(P, "qdot's block count or pair", &i) != 0 ||
	    expect(P, ", ", "after qdot's count") != 0 ||
	    (off[0] = expr(P)) == NULL ||
	    expect(P, ", ", "between qdot's offsets") != 0 ||
	    (off[1] = expr(P)) == NULL ||
	    expect(P, ") = ", "before qdot's term") != 0 ||
	    (term = expr(P)) == NULL)
		return NULL;
	if (w->kind != N_PARAM || x->kind != N_PARAM) {
		fail_at(P, w->kind != N_PARAM ? woff : xoff, "qdot of a %s, "
		    "expected a buffer", kind_word(w->kind != N_PARAM ?
		    w->kind : x->kind));
		return NULL;
	}
	return ks_x_qdot(P->k, w->index, x->index, i, term, off[0], off[1]);
}

/* NAME, NAME[index]: a variable, a scalar, a load. */
static ks_expr_t *named(parser_t *P)
{
	const name_slot_t *e;
	const ks_ir_param_t *p;
	ks_expr_t *index;
	size_t off;

	if ((e = use(P, &off)) == NULL)
		return NULL;
	p = e->kind == N_PARAM ? &P->k->params[e->index] : NULL;
	if (e->kind == N_VAR || (p && p->kind == KS_PARAM_SCALAR)) {
		if (peek(P) == '[') {
			fail_at(P, P->pos, "'%s' is a %s, not a buffer or "
			    "local array: no '[' after it", slot_name(P, e),
			    p ? "scalar" : "variable");
			return NULL;
		}
		return p ? ks_x_param(P->k, e->index) :
		    ks_x_var(P->k, e->index);
	}
	if (expect(P, "[", e->kind == N_LOCAL ? "after a local array" :
	    "after a buffer") != 0 || (index = expr(P)) == NULL ||
	    expect(P, "]", "after the index") != 0)
		return NULL;
	return e->kind == N_LOCAL ? ks_x_lload(P->k, e->index, index) :
	    ks_x_load(P->k, e->index, index);
}

static const char *const unops[] = { "neg", "abs", "sqrt", "exp",
    "f16bits", NULL };
static const ks_unop_t unop_of[] = { KS_UN_NEG, KS_UN_ABS, KS_UN_SQRT,
    KS_UN_EXP, KS_UN_F16 };
static const char *const types[] = { "i64", "f32", "bool", "i32", NULL };
static const ks_ty_t type_of[] = { KS_TY_I64, KS_TY_F32, KS_TY_BOOL,
    KS_TY_I32 };

static int index_in(const char *const *words, const parser_t *P)
{
	int i;

	for (i = 0; words[i] != NULL; i++)
		if (word_is(P, words[i]))
			return i;
	return -1;
}

/* An expression that starts with a word. */
static ks_expr_t *worded(parser_t *P)
{
	ks_ir_kernel_t *k = P->k;
	ks_expr_t *o[3];
	const name_slot_t *e;
	size_t off;
	int i;

	if (word_is(P, "true") || word_is(P, "false")) {
		i = word_is(P, "true");
		P->pos += i ? 4 : 5;
		return ks_x_bool(k, i);
	}
	if (word_is(P, "group") || word_is(P, "lane")) {
		i = word_is(P, "lane");
		P->pos += i ? 4 : 5;
		return i ? ks_x_lane(k) : ks_x_group(k);
	}
	if (word_is(P, "inf") || word_is(P, "nan")) {
		i = word_is(P, "inf");
		P->pos += 3;
		return ks_x_f32(k, i ? __builtin_inff() : __builtin_nanf(""));
	}
	if (word_is(P, "min") || word_is(P, "max")) {
		i = word_is(P, "max");
		P->pos += 3;
		if (args(P, o, 2, i ? "max" : "min") != 0)
			return NULL;
		return ks_x_bin(k, i ? KS_OP_MAX : KS_OP_MIN, o[0], o[1]);
	}
	if (word_is(P, "fma") || word_is(P, "select")) {
		i = word_is(P, "fma");
		P->pos += i ? 3 : 6;
		if (args(P, o, 3, i ? "fma" : "select") != 0)
			return NULL;
		return i ? ks_x_fma(k, o[0], o[1], o[2]) :
		    ks_x_select(k, o[0], o[1], o[2]);
	}
	if (word_is(P, "reduce_sum") || word_is(P, "reduce_max")) {
		i = word_is(P, "reduce_max");
		P->pos += 10;
		if (expect(P, "(", "after reduce") != 0 ||
		    (e = use(P, &off)) == NULL ||
		    expect(P, ")", "closing reduce") != 0)
			return NULL;
		if (e->kind != N_VAR ||
		    k->vars[e->index].scope != KS_VAR_LANE) {
			fail_at(P, off, "reduce of %s %s, expected a lane "
			    "variable", e->kind == N_VAR ? "uniform variable" :
			    kind_word(e->kind), slot_name(P, e));
			return NULL;
		}
		return ks_x_reduce(k, i ? KS_RED_MAX : KS_RED_SUM, e->index);
	}
	if (word_is(P, "qdot")) {
		P->pos += 4;
		return qdot(P);
	}
	if ((i = index_in(unops, P)) >= 0) {
		P->pos += strlen(unops[i]);
		if (args(P, o, 1, unops[i]) != 0)
			return NULL;
		return ks_x_un(k, unop_of[i], o[0]);
	}
	if ((i = index_in(types, P)) >= 0) {
		P->pos += strlen(types[i]);
		if (args(P, o, 1, "the cast") != 0)
			return NULL;
		return ks_x_cast(k, type_of[i], o[0]);
	}
	return named(P);
}

static ks_expr_t *expr(parser_t *P)
{
	size_t off = P->pos;
	ks_expr_t *e;
	char b[48];
	int c = peek(P);

	if (enter(P, off, 0) != 0)
		return NULL;
	if (c == '(')
		e = binary(P);
	else if (c == '-' || (c >= '0' && c <= '9'))
		e = number(P);
	else if (is_name_start(c))
		e = worded(P);
	else
		e = (fail_at(P, off, "expected an expression, found %s",
		    found_at(P, off, b, sizeof b)), NULL);
	P->depth--;
	if (e != NULL)
		mark(P, e, off);
	return e;
}

/* ---- statements ---- */

static ks_stmt_t *block(parser_t *P, int indent);

/* A name that must be a variable (WHAT: for the message). */
static int var_use(parser_t *P, const char *what)
{
	const name_slot_t *e;
	size_t off;

	if ((e = use(P, &off)) == NULL)
		return -1;
	if (e->kind != N_VAR)
		return fail_at(P, off, "%s of %s %s, expected a variable",
		    what, kind_word(e->kind), slot_name(P, e));
	return e->index;
}

/* for V = A to B step S [unroll U] BLOCK */
static ks_stmt_t *for_stmt(parser_t *P, int indent)
{
	ks_expr_t *a, *b;
	ks_stmt_t *s, *body;
	int64_t step;
	size_t off;
	int v, unroll = 0;

	P->pos += 3;
	if (expect(P, " ", "after for") != 0 ||
	    (v = var_use(P, "for")) < 0 ||
	    expect(P, " = ", "after the loop variable") != 0 ||
	    (a = expr(P)) == NULL ||
	    expect(P, " to ", "after the loop's start") != 0 ||
	    (b = expr(P)) == NULL ||
	    expect(P, " step ", "after the loop's end") != 0 ||
	    read_int(P, "the step", &step) != 0 ||
	    expect(P, " ", "after the step") != 0)
		return NULL;
	if (word_is(P, "unroll")) {
		P->pos += 6;
		off = P->pos + 1;
		if (expect(P, " ", "after unroll") != 0 ||
		    read_small(P, "the unroll hint", &unroll) != 0)
			return NULL;
		/* the printer writes no clause for the hint 0 */
		if (unroll == 0)
			return (fail_at(P, off, "an unroll hint of 0 is written "
			    "as no unroll clause"), NULL);
		if (expect(P, " ", "after the unroll hint") != 0)
			return NULL;
	}
	if ((body = block(P, indent)) == NULL)
		return NULL;
	/* The builder wants a positive step; the verifier judges it. */
	s = ks_s_for(P->k, v, a, b, 1);
	s->step = step;
	s->unroll = unroll;
	s->body = body;
	return s;
}

/* if C BLOCK [else BLOCK] */
static ks_stmt_t *if_stmt(parser_t *P, int indent)
{
	ks_expr_t *c;
	ks_stmt_t *s, *body, *orelse = NULL;

	P->pos += 2;
	if (expect(P, " ", "after if") != 0 || (c = expr(P)) == NULL ||
	    expect(P, " ", "after the condition") != 0 ||
	    (body = block(P, indent)) == NULL)
		return NULL;
	if (at(P, " else ")) {
		P->pos += 6;
		if ((orelse = block(P, indent)) == NULL)
			return NULL;
	}
	s = ks_s_if(P->k, c);
	s->body = body;
	s->orelse = orelse;
	return s;
}

/* prefetch[.l2] NAME[INDEX] */
static ks_stmt_t *prefetch_stmt(parser_t *P)
{
	const name_slot_t *e;
	ks_expr_t *index;
	size_t off;
	int l2;

	P->pos += 8;
	l2 = at(P, ".l2");
	P->pos += l2 ? 3 : 0;
	if (expect(P, " ", "after prefetch") != 0 ||
	    (e = use(P, &off)) == NULL)
		return NULL;
	if (e->kind != N_PARAM) {
		fail_at(P, off, "prefetch of %s %s, expected a buffer",
		    kind_word(e->kind), slot_name(P, e));
		return NULL;
	}
	if (expect(P, "[", "after the buffer") != 0 ||
	    (index = expr(P)) == NULL ||
	    expect(P, "]", "after the index") != 0)
		return NULL;
	return l2 ? ks_s_prefetch_l2(P->k, e->index, index) :
	    ks_s_prefetch(P->k, e->index, index);
}

/* NAME = V, or NAME[I] = V (a buffer's or a local array's) */
static ks_stmt_t *assign_stmt(parser_t *P)
{
	const name_slot_t *e;
	ks_expr_t *index, *v;
	size_t off;
	char b[48];

	if ((e = use(P, &off)) == NULL)
		return NULL;
	if (e->kind == N_VAR) {
		if (expect(P, " = ", "after the variable") != 0 ||
		    (v = expr(P)) == NULL)
			return NULL;
		return ks_s_assign(P->k, e->index, v);
	}
	if (e->kind == N_PARAM &&
	    P->k->params[e->index].kind != KS_PARAM_BUFFER) {
		fail_at(P, off, "assignment to scalar %s, which is not a "
		    "variable", slot_name(P, e));
		return NULL;
	}
	if (peek(P) != '[') {
		fail_at(P, P->pos, "expected '[' after %s %s, found %s",
		    kind_word(e->kind), slot_name(P, e),
		    found_at(P, P->pos, b, sizeof b));
		return NULL;
	}
	P->pos++;
	if ((index = expr(P)) == NULL ||
	    expect(P, "] = ", "after the index") != 0 ||
	    (v = expr(P)) == NULL)
		return NULL;
	return e->kind == N_LOCAL ? ks_s_lstore(P->k, e->index, index, v) :
	    ks_s_store(P->k, e->index, index, v);
}

/* One statement at INDENT, its indentation read; not its newline. */
static ks_stmt_t *stmt(parser_t *P, int indent)
{
	size_t off = P->pos;
	ks_stmt_t *s = NULL;
	ks_expr_t *init = NULL;
	char b[48];
	int v;

	if (enter(P, off, 1) != 0)
		return NULL;
	if (peek(P) == '{') {
		s = block(P, indent);
	} else if (word_is(P, "decl")) {
		P->pos += 4;
		if (expect(P, " ", "after decl") == 0 &&
		    (v = var_use(P, "decl")) >= 0) {
			if (at(P, " = ")) {
				P->pos += 3;
				init = expr(P);
			}
			if (init != NULL || !P->failed)
				s = ks_s_decl(P->k, v, init);
		}
	} else if (word_is(P, "for")) {
		s = for_stmt(P, indent);
	} else if (word_is(P, "if")) {
		s = if_stmt(P, indent);
	} else if (word_is(P, "lanes")) {
		P->pos += 5;
		if (expect(P, " ", "after lanes") == 0 &&
		    (s = block(P, indent)) != NULL) {
			ks_stmt_t *body = s;

			s = ks_s_lanes(P->k);
			s->body = body;
		}
	} else if (word_is(P, "barrier")) {
		P->pos += 7;
		s = ks_s_barrier(P->k);
	} else if (word_is(P, "prefetch")) {
		s = prefetch_stmt(P);
	} else if (is_name_start(peek(P))) {
		s = assign_stmt(P);
	} else {
		fail_at(P, off, "expected a statement, found %s",
		    found_at(P, off, b, sizeof b));
	}
	P->depth--;
	if (s != NULL)
		mark(P, s, off);
	return s;
}

/* "{\n", statements at INDENT + 1 (two spaces a level), INDENT spaces and
 * "}": the printer's block, the cursor at its '{'. */
static ks_stmt_t *block(parser_t *P, int indent)
{
	size_t open = P->pos, line_start, n;
	ks_stmt_t *b, *s;
	char f[48];

	if (expect(P, "{", "opening a block") != 0 ||
	    expect(P, "\n", "after '{'") != 0 ||
	    enter(P, open, 1) != 0)
		return NULL;
	b = ks_s_block(P->k);
	for (;;) {
		line_start = P->pos;
		for (n = 0; P->pos + n < P->len && P->text[P->pos + n] == ' ';
		    n++)
			;
		if (n == (size_t)indent * 2 && P->pos + n < P->len &&
		    P->text[P->pos + n] == '}') {
			P->pos += n + 1;
			break;
		}
		if (P->pos + n >= P->len || (n < (size_t)indent * 2 + 2 &&
		    P->text[P->pos + n] == '\n')) {
			fail_at(P, P->pos + n, "expected '}' closing the "
			    "block of line %d, found %s", line_of(P, open),
			    found_at(P, P->pos + n, f, sizeof f));
			return NULL;
		}
		if (n != (size_t)indent * 2 + 2) {
			fail_at(P, line_start, "expected %d spaces of "
			    "indentation, found %zu", indent * 2 + 2, n);
			return NULL;
		}
		P->pos += n;
		if ((s = stmt(P, indent + 1)) == NULL ||
		    expect(P, "\n", "after the statement") != 0)
			return NULL;
		ks_s_append(P->k, b, s);
	}
	P->depth--;
	mark(P, b, open);
	return b;
}

/* ---- declarations ---- */

static const char *const buffer_types[] = { "f32", "f16", "bf16", "q8_0",
    "q4_0", "q4_k", "i32", "u8", NULL };
static const char *const accesses[] = { "read", "write", "readwrite",
    NULL };

/* The rest of a buffer's line after its name: " buffer " is read. */
static int buffer_param(parser_t *P, const char *name, int i)
{
	static const int access_bits[] = { KS_ACCESS_READ, KS_ACCESS_WRITE,
	    KS_ACCESS_READ | KS_ACCESS_WRITE };
	char dims[KS_IR_MAX_DIMS_TEXT + 1], f[48];
	int t, a, p;
	size_t n;

	if ((t = read_choice(P, buffer_types, "a buffer type (f32, f16, "
	    "bf16, q8_0, q4_0, q4_k, i32 or u8)")) < 0 ||
	    expect(P, " ", "after the buffer's type") != 0 ||
	    (a = read_choice(P, accesses, "read, write or readwrite")) < 0 ||
	    expect(P, " dims ", "after the access (every buffer declares "
	    "its dims)") != 0)
		return -1;
	P->dims_off[i] = P->pos;
	for (n = 0; P->pos + n < P->len && P->text[P->pos + n] != '\n'; n++) {
		if (n == KS_IR_MAX_DIMS_TEXT)
			return fail_at(P, P->pos, "dims longer than %d bytes",
			    KS_IR_MAX_DIMS_TEXT);
		if (!is_word_char((unsigned char)P->text[P->pos + n]) &&
		    (P->text[P->pos + n] == '\0' ||
		    strchr("+-*/%(),", P->text[P->pos + n]) == NULL))
			return fail_at(P, P->pos + n, "dims of %s: %s is not "
			    "allowed in dims", name, found_at(P, P->pos + n, f,
			    sizeof f));
	}
	memcpy(dims, P->text + P->pos, n);
	dims[n] = '\0';
	P->pos += n;
	if (t < 3)
		p = ks_ir_buffer(P->k, name, (ks_dtype_t)t, access_bits[a]);
	else if (t == 6)
		p = ks_ir_buffer_i32(P->k, name, access_bits[a]);
	else
		p = ks_ir_buffer_bytes(P->k, name);
	/* A byte buffer's access and block format as written; the verifier
	 * refuses one that is not read. */
	P->k->params[p].access = access_bits[a];
	if (t >= 3 && t <= 5)
		P->k->params[p].dtype = (ks_dtype_t)(KS_DTYPE_Q8_0 + (t - 3));
	ks_ir_buffer_dims(P->k, p, dims);
	return 0;
}

/*
 * The head of a declaration line, "WORD IDX NAME", its keyword at the
 * cursor: the count below MAX, IDX the next index I, NAME usable.
 * Returns NAME's empty slot (fill it once the declaration is made), its
 * offset in *OFF.
 */
static name_slot_t *decl_head(parser_t *P, const char *word, int i, int max,
    char *name, size_t *off)
{
	char what[32];

	if (i == max) {
		fail_at(P, P->pos, "more than %d %ss", max, word);
		return NULL;
	}
	P->pos += strlen(word) + 1;
	snprintf(what, sizeof what, "the %s's name", word);
	if (read_index(P, word, i) != 0)
		return NULL;
	*off = P->pos;
	if (read_name(P, what, name) != 0)
		return NULL;
	return declare(P, name, *off);
}

static int param(parser_t *P)
{
	static const char *const kinds[] = { "buffer", "scalar", NULL };
	static const char *const scalar_types[] = { "i64", "f32", NULL };
	char name[KS_IR_MAX_NAME + 1];
	name_slot_t *slot;
	int i = P->k->nparams, t;
	int64_t value;

	if ((slot = decl_head(P, "param", i, KS_IR_MAX_PARAMS, name,
	    &P->param_off[i < KS_IR_MAX_PARAMS ? i : 0])) == NULL ||
	    expect(P, " ", "after the param's name") != 0 ||
	    (t = read_choice(P, kinds, "buffer or scalar")) < 0 ||
	    expect(P, " ", "after the param's kind") != 0)
		return -1;
	if (t == 0) {
		if (buffer_param(P, name, i) != 0)
			return -1;
	} else {
		if ((t = read_choice(P, scalar_types, "i64 or f32")) < 0)
			return -1;
		ks_ir_scalar(P->k, name, t ? KS_TY_F32 : KS_TY_I64);
		if (at(P, " bound ")) {
			P->pos += 7;
			if (read_int(P, "the bound value", &value) != 0)
				return -1;
			P->k->params[i].bound = 1;
			P->k->params[i].value = value;
		}
	}
	*slot = (name_slot_t){ N_PARAM, i };
	return expect(P, "\n", "after the param");
}

static int local(parser_t *P)
{
	char name[KS_IR_MAX_NAME + 1];
	name_slot_t *slot;
	int i = P->k->nlocals;
	int64_t n;
	size_t off;

	if ((slot = decl_head(P, "local", i, KS_IR_MAX_LOCALS, name,
	    &P->local_off[i < KS_IR_MAX_LOCALS ? i : 0])) == NULL ||
	    expect(P, " f32 ", "after the local's name") != 0)
		return -1;
	off = P->pos;
	if (read_int(P, "the element count", &n) != 0)
		return -1;
	if (n > 0 && (n > KS_IR_MAX_LOCAL_ELEMS ||
	    (P->local_elems += n) > KS_IR_MAX_LOCAL_ELEMS))
		return fail_at(P, off, "local arrays of more than %d f32 "
		    "elements together", KS_IR_MAX_LOCAL_ELEMS);
	ks_ir_local(P->k, name, n);
	*slot = (name_slot_t){ N_LOCAL, i };
	return expect(P, "\n", "after the local");
}

static int var(parser_t *P)
{
	static const char *const scopes[] = { "uniform", "lane", NULL };
	char name[KS_IR_MAX_NAME + 1];
	name_slot_t *slot;
	int i = P->k->nvars, sc, t;

	if ((slot = decl_head(P, "var", i, KS_IR_MAX_VARS, name,
	    &P->var_off[i < KS_IR_MAX_VARS ? i : 0])) == NULL ||
	    expect(P, " ", "after the var's name") != 0 ||
	    (sc = read_choice(P, scopes, "uniform or lane")) < 0 ||
	    expect(P, " ", "after the var's scope") != 0 ||
	    (t = read_choice(P, types, "a type (i64, f32, bool or i32)")) < 0)
		return -1;
	ks_ir_var(P->k, name, type_of[t], sc ? KS_VAR_LANE : KS_VAR_UNIFORM);
	*slot = (name_slot_t){ N_VAR, i };
	return expect(P, "\n", "after the var");
}

/* ---- buffer dims ---- */

typedef struct {
	parser_t *P;
	const char *s;          /* the dims text */
	size_t i;               /* cursor in it */
	size_t base;            /* its offset in the kernel's text */
	const char *buffer;
	int depth;
} dims_t;

static int dims_sum(dims_t *d);

static int dims_fail(dims_t *d, const char *what)
{
	return fail_at(d->P, d->base + d->i, "dims of %s: %s", d->buffer,
	    what);
}

/* An unsigned integer, an i64 scalar's name, or a sum in parentheses. */
static int dims_factor(dims_t *d)
{
	const ks_ir_kernel_t *k = d->P->k;
	size_t start = d->i, n;
	char msg[128];
	int p;

	if (d->s[d->i] >= '0' && d->s[d->i] <= '9') {
		while (d->s[d->i] >= '0' && d->s[d->i] <= '9')
			d->i++;
		if (d->i - start > 18 || (d->s[start] == '0' &&
		    d->i - start > 1)) {
			d->i = start;
			return dims_fail(d, "expected a decimal of at most 18 "
			    "digits without leading zeros");
		}
		return 0;
	}
	if (is_name_start((unsigned char)d->s[d->i])) {
		while (is_word_char((unsigned char)d->s[d->i]))
			d->i++;
		n = d->i - start;
		for (p = 0; p < k->nparams; p++)
			if (k->params[p].kind == KS_PARAM_SCALAR &&
			    k->params[p].type == KS_TY_I64 &&
			    strlen(k->params[p].name) == n &&
			    memcmp(k->params[p].name, d->s + start, n) == 0)
				return 0;
		d->i = start;
		snprintf(msg, sizeof msg, "'%.*s' is not an i64 scalar param",
		    (int)(n > 64 ? 64 : n), d->s + start);
		return dims_fail(d, msg);
	}
	if (d->s[d->i] == '(') {
		if (++d->depth > KS_IR_MAX_DIMS_DEPTH)
			return dims_fail(d, "parentheses nested too deep");
		d->i++;
		if (dims_sum(d) != 0)
			return -1;
		if (d->s[d->i] != ')')
			return dims_fail(d, "expected ')'");
		d->i++;
		d->depth--;
		return 0;
	}
	return dims_fail(d, "expected a number, an i64 scalar param or '('");
}

static int dims_term(dims_t *d)
{
	if (dims_factor(d) != 0)
		return -1;
	while (d->s[d->i] == '*' || d->s[d->i] == '/' || d->s[d->i] == '%') {
		d->i++;
		if (dims_factor(d) != 0)
			return -1;
	}
	return 0;
}

static int dims_sum(dims_t *d)
{
	if (dims_term(d) != 0)
		return -1;
	while (d->s[d->i] == '+' || d->s[d->i] == '-') {
		d->i++;
		if (dims_term(d) != 0)
			return -1;
	}
	return 0;
}

/* Every buffer's dims: comma-separated integer expressions of the i64
 * scalar params (which may be declared after the buffer), a loader's
 * grammar without spaces or signs. */
static int check_dims(parser_t *P)
{
	const ks_ir_kernel_t *k = P->k;
	int p, n;

	for (p = 0; p < k->nparams; p++) {
		dims_t d = { P, k->params[p].dims, 0, P->dims_off[p],
		    k->params[p].name, 0 };

		if (k->params[p].kind != KS_PARAM_BUFFER)
			continue;
		for (n = 1;; n++) {
			if (n > KS_IR_MAX_BUF_DIMS)
				return dims_fail(&d, "more than "
				    KS_STR(KS_IR_MAX_BUF_DIMS) " dims");
			if (dims_sum(&d) != 0)
				return -1;
			if (d.s[d.i] == '\0')
				break;
			if (d.s[d.i] != ',')
				return dims_fail(&d, "expected an operator, "
				    "',' or the end of the line");
			d.i++;
		}
	}
	return 0;
}

/* ---- the kernel ---- */

/* kernel NAME variant NAME entry SYMBOL nlanes INT */
static int header(parser_t *P)
{
	char kernel[KS_IR_MAX_NAME + 1], variant[KS_IR_MAX_NAME + 1];
	char entry[2 * KS_IR_MAX_NAME + 8], want[2 * KS_IR_MAX_NAME + 8];
	size_t entry_off, n;
	int nlanes = 0;

	if (expect(P, "kernel ", "at the start of the text") != 0 ||
	    read_name(P, "the kernel's name", kernel) != 0 ||
	    expect(P, " variant ", "after the kernel's name") != 0 ||
	    read_name(P, "the variant's name", variant) != 0 ||
	    expect(P, " entry ", "after the variant's name") != 0)
		return -1;
	entry_off = P->pos;
	n = word_len(P);
	snprintf(want, sizeof want, "ks_%s_%s", kernel, variant);
	if (n >= sizeof entry || n != strlen(want) ||
	    memcmp(P->text + P->pos, want, n) != 0) {
		snprintf(entry, sizeof entry, "%.*s", (int)(n < 64 ? n : 64),
		    P->text + P->pos);
		return fail_at(P, entry_off, "expected entry %s "
		    "(ks_<kernel>_<variant>), found '%s'", want, entry);
	}
	P->pos += n;
	if (expect(P, " nlanes ", "after the entry") != 0)
		return -1;
	P->nlanes_off = P->pos;
	if (read_small(P, "nlanes", &nlanes) != 0 ||
	    expect(P, "\n", "after nlanes") != 0)
		return -1;
	/* ks_ir_new wants a positive count; the verifier judges it. */
	P->k = ks_ir_new(kernel, variant, 1);
	P->k->nlanes = nlanes;
	return 0;
}

static int kernel(parser_t *P)
{
	ks_expr_t *grid;
	ks_stmt_t *body;
	char b[48];

	if (header(P) != 0)
		return -1;
	while (at(P, "param "))
		if (param(P) != 0)
			return -1;
	while (at(P, "local "))
		if (local(P) != 0)
			return -1;
	while (at(P, "var "))
		if (var(P) != 0)
			return -1;
	if (check_dims(P) != 0 ||
	    expect(P, "grid ", "(or a param, local or var before it)") != 0 ||
	    (grid = expr(P)) == NULL ||
	    expect(P, "\n", "after the grid") != 0 ||
	    expect(P, "body ", "after the grid") != 0 ||
	    (body = block(P, 0)) == NULL ||
	    expect(P, "\n", "after the body") != 0)
		return -1;
	if (P->pos != P->len)
		return fail_at(P, P->pos, "expected the end of the text after "
		    "the body, found %s", found_at(P, P->pos, b, sizeof b));
	P->k->grid = grid;
	P->k->body = body;
	return 0;
}

/* The verifier's first problem, at the text of the node it names. */
static int verify(parser_t *P)
{
	char msg[sizeof P->msg];
	ks_ir_site_t site;
	size_t off;
	int rc;

	rc = ks_ir_verify_at(P->k, &site, msg, sizeof msg);
	if (rc == KS_OK || rc == KS_E_NOMEM)
		return rc;
	if (site.expr != NULL)
		off = offset_of(P, site.expr);
	else if (site.stmt != NULL)
		off = offset_of(P, site.stmt);
	else if (site.param >= 0)
		off = P->param_off[site.param];
	else if (site.var >= 0)
		off = P->var_off[site.var];
	else if (site.local >= 0)
		off = P->local_off[site.local];
	else
		off = P->nlanes_off;
	fail_at(P, off, "%s", msg);
	return KS_E_BAD_KERNEL;
}

typedef struct {
	parser_t *P;
	ks_ir_kernel_t *out;
} job_t;

static int run(void *ctx)
{
	job_t *j = ctx;
	parser_t *P = j->P;
	int rc;

	P->scratch = ks_arena_new();
	P->names = ks_arena_alloc(P->scratch, NAME_SLOTS * sizeof *P->names);
	rc = kernel(P) == 0 ? verify(P) : KS_E_BAD_KERNEL;
	ks_arena_free(P->scratch);
	if (rc != KS_OK) {
		ks_ir_free(P->k);
		return rc;
	}
	j->out = P->k;
	return KS_OK;
}

int ks_ir_parse(const char *text, size_t len, ks_ir_kernel_t **out,
    ks_ir_parse_error_t *err)
{
	parser_t *P;
	job_t j;
	size_t i, line_start = 0;
	int rc, line = 1;

	if (err != NULL)
		*err = (ks_ir_parse_error_t){ 0 };
	if (out == NULL || (text == NULL && len > 0))
		return KS_E_INVAL;
	*out = NULL;
	P = calloc(1, sizeof *P);
	if (P == NULL)
		return KS_E_NOMEM;
	P->text = text != NULL ? text : "";
	P->len = len;
	if (len > KS_IR_MAX_TEXT) {
		fail_at(P, 0, "text of %zu bytes, more than %u", len,
		    KS_IR_MAX_TEXT);
		rc = KS_E_BAD_KERNEL;
	} else {
		j = (job_t){ P, NULL };
		rc = ks_ir_guarded(run, &j);
		if (rc == KS_OK)
			*out = j.out;
	}
	if (rc == KS_E_BAD_KERNEL && err != NULL) {
		for (i = 0; i < P->err_off && i < len; i++)
			if (text[i] == '\n') {
				line++;
				line_start = i + 1;
			}
		err->line = line;
		err->column = (int)(P->err_off - line_start) + 1;
		snprintf(err->message, sizeof err->message,
		    "line %d, column %d: %s", err->line, err->column, P->msg);
	} else if (rc == KS_E_NOMEM && err != NULL) {
		snprintf(err->message, sizeof err->message, "out of memory "
		    "reading a kernel's text");
	}
	free(P);
	return rc;
}
