/*
 * kspec_cpu_load, kspec_cpu_call: runs cpu artifacts in the client's
 * process, from memory, with every buffer checked against the reply.
 *
 * A loaded kernel keeps, from its artifact's reply, each param's name,
 * kind, dtype and dims (params[].dims, docs/protocol.md), launch.groups and
 * the guard's constants, parsed once at load; a call only evaluates the
 * expressions with its dims bound, on the stack.  Expressions have the
 * grammar of launch.groups: C int64 arithmetic (+ - * / %, unary - and +,
 * parentheses) over integers and dim names, with overflow and division
 * by zero refused.
 */
#include "../include/kspec.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "../base/base.h"
#include "../proto/reply.h"

/* Params per entry and dims per buffer a loaded kernel may have; the
 * library's kernels have at most 12 and 4. */
enum { MAX_PARAMS = 32, MAX_BUF_DIMS = 8, MAX_EXPR_DEPTH = 64 };

typedef struct {
	char *name;
	char *dtype;
	int buffer;             /* 1: a buffer, 0: a scalar */
	int ndims;              /* -1: the reply gives no dims */
	char *dims[MAX_BUF_DIMS];
} cpu_param_t;

struct kspec_cpu_kernel {
	ks_so_t *so;
	kspec_cpu_entry_t fn;
	char *entry;
	int has_meta;           /* the reply had params */
	int nparams;
	cpu_param_t params[MAX_PARAMS];
	char *groups;           /* launch.groups; NULL when absent */
	int nguard;
	char *guard_names[KS_MAX_DIMS];
	int64_t guard_values[KS_MAX_DIMS];
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* Bytes per element of a dtype; 0 for one this library does not know. */
static size_t elem_size(const char *dtype)
{
	static const struct {
		const char *name;
		size_t size;
	} sizes[] = {
		{ "f32", 4 }, { "f16", 2 }, { "bf16", 2 }, { "f64", 8 },
		{ "i8", 1 }, { "u8", 1 }, { "i16", 2 }, { "u16", 2 },
		{ "i32", 4 }, { "u32", 4 }, { "i64", 8 }, { "u64", 8 },
		/* Block formats of weights: their dims count bytes. */
		{ "q8_0", 1 }, { "q4_0", 1 }, { "q4_k", 1 },
	};
	size_t i;

	for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
		if (strcmp(dtype, sizes[i].name) == 0)
			return sizes[i].size;
	return 0;
}

/* ---- expressions ---- */

typedef struct {
	const char *const *names;
	const int64_t *values;
	int nnames;
	const char *text;
	const char *p;
	int depth;
	char *err;
	size_t errlen;
} eval_t;

static int eval_fail(eval_t *e, const char *what)
{
	set_err(e->err, e->errlen, "expression '%s': %s", e->text, what);
	return KSPEC_E_INVAL;
}

static void skip(eval_t *e)
{
	while (*e->p == ' ' || *e->p == '\t')
		e->p++;
}

static int sum(eval_t *e, int64_t *v);

static int is_name_start(char c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int primary(eval_t *e, int64_t *v)
{
	const char *s;
	int rc, i;

	skip(e);
	if (++e->depth > MAX_EXPR_DEPTH)
		return eval_fail(e, "nests too deep");
	s = e->p;
	if (*s >= '0' && *s <= '9') {
		*v = 0;
		for (; *e->p >= '0' && *e->p <= '9'; e->p++)
			if (__builtin_mul_overflow(*v, 10, v) ||
			    __builtin_add_overflow(*v, *e->p - '0', v))
				return eval_fail(e, "overflows int64");
	} else if (is_name_start(*s)) {
		while (is_name_start(*e->p) || (*e->p >= '0' && *e->p <= '9'))
			e->p++;
		for (i = 0; i < e->nnames; i++)
			if (strlen(e->names[i]) == (size_t)(e->p - s) &&
			    memcmp(e->names[i], s, (size_t)(e->p - s)) == 0)
				break;
		if (i == e->nnames) {
			set_err(e->err, e->errlen, "expression '%s': %.*s is "
			    "not bound", e->text, (int)(e->p - s), s);
			return KSPEC_E_INVAL;
		}
		*v = e->values[i];
	} else if (*s == '(') {
		e->p++;
		if ((rc = sum(e, v)) != KSPEC_OK)
			return rc;
		skip(e);
		if (*e->p != ')')
			return eval_fail(e, "missing )");
		e->p++;
	} else if (*s == '-' || *s == '+') {
		e->p++;
		if ((rc = primary(e, v)) != KSPEC_OK)
			return rc;
		if (*s == '-' && __builtin_sub_overflow(0, *v, v))
			return eval_fail(e, "overflows int64");
	} else {
		return eval_fail(e, *s ? "unexpected character" :
		    "unexpected end");
	}
	e->depth--;
	return KSPEC_OK;
}

static int product(eval_t *e, int64_t *v)
{
	int64_t r;
	char op;
	int rc;

	if ((rc = primary(e, v)) != KSPEC_OK)
		return rc;
	for (;;) {
		skip(e);
		op = *e->p;
		if (op != '*' && op != '/' && op != '%')
			return KSPEC_OK;
		e->p++;
		if ((rc = primary(e, &r)) != KSPEC_OK)
			return rc;
		if (op == '*') {
			if (__builtin_mul_overflow(*v, r, v))
				return eval_fail(e, "overflows int64");
			continue;
		}
		if (r == 0)
			return eval_fail(e, "divides by zero");
		if (r == -1 && *v == INT64_MIN)
			return eval_fail(e, "overflows int64");
		*v = op == '/' ? *v / r : *v % r;
	}
}

static int sum(eval_t *e, int64_t *v)
{
	int64_t r;
	char op;
	int rc;

	if ((rc = product(e, v)) != KSPEC_OK)
		return rc;
	for (;;) {
		skip(e);
		op = *e->p;
		if (op != '+' && op != '-')
			return KSPEC_OK;
		e->p++;
		if ((rc = product(e, &r)) != KSPEC_OK)
			return rc;
		if (op == '+' ? __builtin_add_overflow(*v, r, v) :
		    __builtin_sub_overflow(*v, r, v))
			return eval_fail(e, "overflows int64");
	}
}

/* Evaluates TEXT with the NNAMES bindings NAMES = VALUES into *V. */
static int eval(const char *text, const char *const *names,
    const int64_t *values, int nnames, int64_t *v, char *err, size_t errlen)
{
	eval_t e = { names, values, nnames, text, text, 0, err, errlen };
	int rc;

	if ((rc = sum(&e, v)) != KSPEC_OK)
		return rc;
	skip(&e);
	if (*e.p)
		return eval_fail(&e, "trailing characters");
	return KSPEC_OK;
}

/* ---- the reply's metadata ---- */

static void free_meta(kspec_cpu_kernel_t *k)
{
	int i, j;

	for (i = 0; i < k->nparams; i++) {
		free(k->params[i].name);
		free(k->params[i].dtype);
		for (j = 0; j < k->params[i].ndims; j++)
			free(k->params[i].dims[j]);
	}
	for (i = 0; i < k->nguard; i++)
		free(k->guard_names[i]);
	free(k->groups);
	free(k->entry);
}

/* A copy of J: a string's text, or an integral number's digits. */
static char *expr_text(const cJSON *j)
{
	char num[32];

	if (cJSON_IsString(j))
		return strdup(j->valuestring);
	if (cJSON_IsNumber(j) && j->valuedouble >= 0 &&
	    j->valuedouble <= 9007199254740992.0 &&
	    j->valuedouble == (double)(int64_t)j->valuedouble) {
		snprintf(num, sizeof num, "%lld",
		    (long long)j->valuedouble);
		return strdup(num);
	}
	return NULL;
}

static int parse_param(cpu_param_t *p, const cJSON *j, char *err,
    size_t errlen)
{
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
	const cJSON *kind = cJSON_GetObjectItemCaseSensitive(j, "kind");
	const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(j, "dtype");
	const cJSON *dims = cJSON_GetObjectItemCaseSensitive(j, "dims");
	const cJSON *d;

	p->ndims = -1;
	if (!cJSON_IsString(name) || !cJSON_IsString(kind) ||
	    !cJSON_IsString(dtype) || (strcmp(kind->valuestring, "buffer") &&
	    strcmp(kind->valuestring, "scalar"))) {
		set_err(err, errlen, "reply params: an entry without a name, "
		    "a kind (buffer or scalar) or a dtype");
		return KSPEC_E_PROTO;
	}
	p->name = strdup(name->valuestring);
	p->dtype = strdup(dtype->valuestring);
	p->buffer = strcmp(kind->valuestring, "buffer") == 0;
	if (!p->name || !p->dtype)
		return KSPEC_E_NOMEM;
	if (!p->buffer || !dims)
		return KSPEC_OK;
	if (!cJSON_IsArray(dims) || cJSON_GetArraySize(dims) > MAX_BUF_DIMS) {
		set_err(err, errlen, "reply params: dims of %s is not an "
		    "array of at most %d expressions", p->name, MAX_BUF_DIMS);
		return KSPEC_E_PROTO;
	}
	p->ndims = 0;
	cJSON_ArrayForEach(d, dims) {
		p->dims[p->ndims] = expr_text(d);
		if (!p->dims[p->ndims]) {
			set_err(err, errlen, "reply params: dims of %s holds "
			    "something that is no expression", p->name);
			return KSPEC_E_PROTO;
		}
		p->ndims++;
	}
	return KSPEC_OK;
}

/* Keeps params, launch.groups and the guard of A's reply in K.  A reply
 * without params (an artifact made by hand) leaves has_meta 0. */
static int parse_meta(kspec_cpu_kernel_t *k, const kspec_artifact_t *a,
    char *err, size_t errlen)
{
	cJSON *m, *params, *launch, *guard, *j;
	int rc = KSPEC_OK;

	if (!a->meta || !a->meta_len)
		return KSPEC_OK;
	m = cJSON_ParseWithLength(a->meta, a->meta_len);
	if (!m)
		return KSPEC_OK;
	params = cJSON_GetObjectItemCaseSensitive(m,
	    ks_get_field_name[KS_GF_params]);
	launch = cJSON_GetObjectItemCaseSensitive(m,
	    ks_get_field_name[KS_GF_launch]);
	guard = cJSON_GetObjectItemCaseSensitive(m,
	    ks_get_field_name[KS_GF_guard]);
	if (!params)
		goto done;
	if (!cJSON_IsArray(params) ||
	    cJSON_GetArraySize(params) > MAX_PARAMS) {
		set_err(err, errlen, "reply params: not an array of at most "
		    "%d entries", MAX_PARAMS);
		rc = KSPEC_E_PROTO;
		goto done;
	}
	cJSON_ArrayForEach(j, params) {
		rc = parse_param(&k->params[k->nparams++], j, err, errlen);
		if (rc != KSPEC_OK)
			goto done;
	}
	j = cJSON_GetObjectItemCaseSensitive(launch, "groups");
	if (j && !(k->groups = expr_text(j))) {
		set_err(err, errlen, "reply launch.groups is no expression");
		rc = KSPEC_E_PROTO;
		goto done;
	}
	cJSON_ArrayForEach(j, guard) {
		if (k->nguard == KS_MAX_DIMS || !cJSON_IsNumber(j) ||
		    j->valuedouble != (double)(int64_t)j->valuedouble) {
			set_err(err, errlen, "reply guard: more than %d dims, "
			    "or one that is no integer", KS_MAX_DIMS);
			rc = KSPEC_E_PROTO;
			goto done;
		}
		k->guard_names[k->nguard] = strdup(j->string);
		k->guard_values[k->nguard++] = (int64_t)j->valuedouble;
		if (!k->guard_names[k->nguard - 1]) {
			rc = KSPEC_E_NOMEM;
			goto done;
		}
	}
	k->has_meta = 1;
done:
	cJSON_Delete(m);
	return rc;
}

int kspec_cpu_load(const kspec_artifact_t *a, kspec_cpu_kernel_t **out,
    kspec_cpu_entry_t *fn, char *err, size_t errlen)
{
	kspec_cpu_kernel_t *k;
	void *sym;
	int rc;

	*out = NULL;
	if (fn)
		*fn = NULL;
	if (!a || !a->bytes || !a->len || !a->entry || !a->entry[0]) {
		set_err(err, errlen, "not a cpu artifact with bytes and an "
		    "entry (fetched with meta_only?)");
		return KSPEC_E_INVAL;
	}
	if (a->format && a->format[0] && strcmp(a->format, "so") != 0) {
		set_err(err, errlen, "artifact format is '%s', not 'so'",
		    a->format);
		return KSPEC_E_INVAL;
	}
	k = calloc(1, sizeof *k);
	if (!k || !(k->entry = strdup(a->entry))) {
		free(k);
		return KSPEC_E_NOMEM;
	}
	rc = parse_meta(k, a, err, errlen);
	if (rc == KSPEC_OK)
		rc = ks_so_load(a->bytes, a->len, a->entry, &k->so, &sym, err,
		    errlen);
	if (rc != KSPEC_OK) {
		free_meta(k);
		free(k);
		return rc;
	}
	memcpy(&k->fn, &sym, sizeof k->fn);
	if (fn)
		*fn = k->fn;
	*out = k;
	return KSPEC_OK;
}

void kspec_cpu_unload(kspec_cpu_kernel_t *k)
{
	if (!k)
		return;
	ks_so_unload(k->so);
	free_meta(k);
	free(k);
}

/* ---- the checked call ---- */

/* The bytes buffer P needs with the dims bound in NAMES = VALUES; its
 * dims' values into V (for the message). */
static int needed_bytes(const kspec_cpu_kernel_t *k, const cpu_param_t *p,
    const char *const *names, const int64_t *values, int nnames,
    int64_t *v, uint64_t *bytes, char *err, size_t errlen)
{
	char why[192];
	uint64_t n = elem_size(p->dtype);
	int i, rc;

	if (n == 0) {
		set_err(err, errlen, "buffer %s has dtype %s, whose size "
		    "this library does not know", p->name, p->dtype);
		return KSPEC_E_INVAL;
	}
	if (p->ndims < 0) {
		set_err(err, errlen, "buffer %s: the reply of %s gives no "
		    "dims, so its size cannot be checked", p->name, k->entry);
		return KSPEC_E_INVAL;
	}
	for (i = 0; i < p->ndims; i++) {
		rc = eval(p->dims[i], names, values, nnames, &v[i], why,
		    sizeof why);
		if (rc == KSPEC_OK && v[i] < 0)
			snprintf(why, sizeof why, "dim %s = %lld is negative",
			    p->dims[i], (long long)v[i]);
		if (rc != KSPEC_OK || v[i] < 0 ||
		    __builtin_mul_overflow(n, (uint64_t)v[i], &n)) {
			set_err(err, errlen, "buffer %s: %s", p->name,
			    rc != KSPEC_OK || v[i] < 0 ? why :
			    "its size overflows");
			return KSPEC_E_INVAL;
		}
	}
	*bytes = n;
	return KSPEC_OK;
}

static int check_buffer(const kspec_cpu_kernel_t *k, const cpu_param_t *p,
    const kspec_arg_t *a, const char *const *names, const int64_t *values,
    int nnames, char *err, size_t errlen)
{
	int64_t v[MAX_BUF_DIMS];
	char shape[160];
	uint64_t need;
	size_t used = 0;
	int i, rc;

	if (a->dtype && strcmp(a->dtype, p->dtype) != 0) {
		set_err(err, errlen, "buffer %s holds %s; %s takes %s",
		    p->name, a->dtype, k->entry, p->dtype);
		return KSPEC_E_INVAL;
	}
	rc = needed_bytes(k, p, names, values, nnames, v, &need, err,
	    errlen);
	if (rc != KSPEC_OK)
		return rc;
	if (a->bytes >= need && (a->data || need == 0))
		return KSPEC_OK;
	shape[0] = 0;
	for (i = 0; i < p->ndims && used < sizeof shape; i++)
		used += (size_t)snprintf(shape + used, sizeof shape - used,
		    "%s%lld", i ? "x" : "", (long long)v[i]);
	set_err(err, errlen, "buffer %s %s %zu bytes; %s needs %llu (%s of "
	    "%s)", p->name, a->data ? "has" : "is NULL, with", a->bytes,
	    k->entry, (unsigned long long)need, shape, p->dtype);
	return KSPEC_E_INVAL;
}

int kspec_cpu_call(const kspec_cpu_kernel_t *k, const kspec_arg_t *args,
    size_t nargs, int nthreads, char *err, size_t errlen)
{
	const char *names[KS_MAX_DIMS + MAX_PARAMS];
	int64_t values[KS_MAX_DIMS + MAX_PARAMS];
	void *ptrs[MAX_PARAMS], *argv[MAX_PARAMS];
	int64_t ints[MAX_PARAMS];
	float floats[MAX_PARAMS];
	int64_t groups;
	int i, n, rc;

	if (!k || (nargs && !args) || nthreads < 0 ||
	    nthreads > KSPEC_MAX_THREADS) {
		set_err(err, errlen, "no kernel, no arguments, or threads "
		    "outside [0, %d]", KSPEC_MAX_THREADS);
		return KSPEC_E_INVAL;
	}
	if (!k->has_meta) {
		set_err(err, errlen, "%s was loaded from an artifact whose "
		    "reply gives no params: nothing to check a call against",
		    k->entry);
		return KSPEC_E_INVAL;
	}
	if (nargs != (size_t)k->nparams) {
		set_err(err, errlen, "%s takes %d arguments, got %zu",
		    k->entry, k->nparams, nargs);
		return KSPEC_E_INVAL;
	}
	for (n = 0; n < k->nguard; n++) {
		names[n] = k->guard_names[n];
		values[n] = k->guard_values[n];
	}
	for (i = 0; i < k->nparams; i++) {
		const cpu_param_t *p = &k->params[i];

		if (p->buffer) {
			ptrs[i] = args[i].data;
			argv[i] = &ptrs[i];
		} else if (strcmp(p->dtype, "i64") == 0) {
			if (args[i].i64 < 0) {
				set_err(err, errlen, "dim %s must be >= 0 "
				    "(got %lld)", p->name,
				    (long long)args[i].i64);
				return KSPEC_E_INVAL;
			}
			ints[i] = args[i].i64;
			argv[i] = &ints[i];
			names[n] = p->name;
			values[n++] = ints[i];
		} else if (strcmp(p->dtype, "f32") == 0) {
			floats[i] = args[i].f32;
			argv[i] = &floats[i];
		} else {
			set_err(err, errlen, "scalar %s has dtype %s, which "
			    "this library cannot pass", p->name, p->dtype);
			return KSPEC_E_INVAL;
		}
	}
	for (i = 0; i < k->nparams; i++)
		if (k->params[i].buffer) {
			rc = check_buffer(k, &k->params[i], &args[i], names,
			    values, n, err, errlen);
			if (rc != KSPEC_OK)
				return rc;
		}
	if (!k->groups) {
		set_err(err, errlen, "the reply of %s gives no launch.groups",
		    k->entry);
		return KSPEC_E_INVAL;
	}
	{
		char why[160];

		rc = eval(k->groups, names, values, n, &groups, why,
		    sizeof why);
		if (rc != KSPEC_OK || groups < 0) {
			set_err(err, errlen, "launch.groups of %s: %s",
			    k->entry, rc != KSPEC_OK ? why : "negative");
			return KSPEC_E_INVAL;
		}
	}
	return kspec_cpu_launch(k->fn, argv, (uint64_t)groups, nthreads);
}
