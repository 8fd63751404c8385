/*
 * proto: frames and request headers of the v1 wire format
 * (docs/protocol.md).
 *
 * Request parsing, in this order, so that every error after step 3 can echo
 * the request's id:
 *   1. length limits and raw NUL bytes (cJSON would stop at a NUL and
 *      accept whatever came before it);
 *   2. cJSON on a NUL-terminated copy of exactly the header bytes, with
 *      require_null_terminated, so trailing bytes are an error;
 *   3. the top level must be an object; its "id" is read first;
 *   4. the whole tree: nesting depth, duplicate keys at every level, and
 *      no "\u0000" escape anywhere (cJSON decodes it into a NUL that would
 *      silently cut a string or key short);
 *   5. "op", then every member in document order against the op's fields;
 *      the first offending member is the one reported.
 * Lookups are by exact, case-sensitive name: members are matched with
 * strcmp while walking the object, never with cJSON_GetObjectItem.
 */
#define _POSIX_C_SOURCE 200809L
#include "proto.h"

#include <inttypes.h>
#include <stdarg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

/* ---- frames ---- */

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

void ks_frame_prefix(uint8_t out[KS_FRAME_PREFIX], uint32_t header_len,
    uint32_t payload_len)
{
	put_be32(out, header_len);
	put_be32(out + 4, payload_len);
}

int ks_frame_peek(const uint8_t *buf, size_t len, uint32_t max_header,
    uint32_t max_payload, uint32_t *header_len, uint32_t *payload_len)
{
	uint32_t h, p;

	if (len < KS_FRAME_PREFIX)
		return 1;
	h = get_be32(buf);
	p = get_be32(buf + 4);
	if (h == 0)
		return KS_E_BAD_FRAME;
	if (h > max_header)
		return KS_E_TOO_LARGE;
	/* With no payload allowed (requests), any payload is a malformed
	 * frame, not a large one. */
	if (p > max_payload)
		return max_payload == 0 ? KS_E_BAD_FRAME : KS_E_TOO_LARGE;
	*header_len = h;
	*payload_len = p;
	return KS_OK;
}

/* ---- ops ---- */

static const char *const op_names[KS_OP_COUNT_] = {
	[KS_OP_PING] = "ping",
	[KS_OP_HELLO] = "hello",
	[KS_OP_GET] = "get",
	[KS_OP_STATS] = "stats",
	[KS_OP_KERNELS] = "kernels",
	[KS_OP_LIST] = "list",
	[KS_OP_EVICT] = "evict",
	[KS_OP_EXPLAIN] = "explain",
	[KS_OP_WARM] = "warm",
	[KS_OP_MISSES] = "misses",
	[KS_OP_CANCEL] = "cancel",
	[KS_OP_IMPORT] = "import",
	[KS_OP_READY] = "ready",
	[KS_OP_DEPLOY] = "deploy",
	[KS_OP_UNDEPLOY] = "undeploy",
	[KS_OP_DEPLOYMENTS] = "deployments",
	[KS_OP_AUDIT] = "audit",
	[KS_OP_CANARY] = "canary",
};

const char *ks_op_name(ks_op_t op)
{
	return (unsigned)op < KS_OP_COUNT_ ? op_names[op] : "?";
}

/* ---- default socket path ---- */

int ks_proto_default_socket(ks_socket_role_t role, char *out, size_t outlen)
{
	const char *env = getenv("KSPEC_SOCKET");
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	const char *unit = getenv("INVOCATION_ID");
	int n;

	struct stat st;

	if (env && *env)
		n = snprintf(out, outlen, "%s", env);
	else if (xdg && *xdg)
		n = snprintf(out, outlen, "%s/kspec/kspecd.sock", xdg);
	else if (role == KS_SOCKET_DAEMON && unit && *unit)
		n = snprintf(out, outlen, "%s", KS_PROTO_SYSTEM_SOCKET);
	else
		n = snprintf(out, outlen, "/tmp/kspec-%lu/kspecd.sock",
		    (unsigned long)getuid());
	if (n < 0 || (size_t)n >= outlen)
		return KS_E_TOO_LARGE;
	if (role == KS_SOCKET_CLIENT && !(env && *env) &&
	    lstat(out, &st) != 0 && errno == ENOENT &&
	    stat(KS_PROTO_SYSTEM_SOCKET, &st) == 0 && S_ISSOCK(st.st_mode) &&
	    strlen(KS_PROTO_SYSTEM_SOCKET) < outlen)
		strcpy(out, KS_PROTO_SYSTEM_SOCKET);
	return KS_OK;
}

/* ---- request parsing ---- */

/* Ids go up to 2^53: every integer up to there is exact in the double
 * cJSON reads, so an id echoes as it was sent. */
#define ID_MAX 9007199254740992.0               /* 2^53 */
#define INT64_LIMIT 9223372036854775808.0       /* 2^63 */
/* How much of a client-supplied name an error message echoes. */
#define ECHO_MAX 64

/* Formats a one-line error into err; returns code. */
__attribute__((format(printf, 4, 5)))
static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return code;
}

/*
 * Copies client text S into DST for an error message: at most ECHO_MAX
 * bytes, anything outside printable ASCII replaced by '?' (so a message
 * stays one line of valid UTF-8), "..." when cut.
 */
static const char *echo(char dst[ECHO_MAX + 4], const char *s)
{
	size_t i;

	for (i = 0; s[i] && i < ECHO_MAX; i++)
		dst[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	if (s[i])
		memcpy(dst + i, "...", 3), i += 3;
	dst[i] = '\0';
	return dst;
}

static int is_name(const char *s)
{
	const char *p = s;

	if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
	    *p == '_'))
		return 0;
	for (p++; *p; p++) {
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
		    (*p >= '0' && *p <= '9') || *p == '_'))
			return 0;
	}
	return 1;
}

/* Printable ASCII without space: every kernel, backend, target, format,
 * dtype and mode name the library knows fits, and a message echoing one
 * is always valid UTF-8. */
static int is_token(const char *s)
{
	for (; *s; s++) {
		if (*s <= 0x20 || *s >= 0x7f)
			return 0;
	}
	return 1;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * Finds a key that occurs twice among the members of OBJ, or NULL.  Small
 * objects are compared pairwise; large ones (only hostile input has them)
 * are sorted, so a 64 KiB header of keys costs n log n, not n^2.
 */
static const char *duplicate_key(const cJSON *obj, int *nomem)
{
	const cJSON *a, *b;
	const char **keys, *dup = NULL;
	size_t n = 0, i;

	for (a = obj->child; a; a = a->next)
		n++;
	if (n <= 16) {
		for (a = obj->child; a; a = a->next) {
			for (b = a->next; b; b = b->next) {
				if (strcmp(a->string, b->string) == 0)
					return a->string;
			}
		}
		return NULL;
	}
	keys = malloc(n * sizeof *keys);
	if (!keys) {
		*nomem = 1;
		return NULL;
	}
	for (i = 0, a = obj->child; a; a = a->next)
		keys[i++] = a->string;
	qsort(keys, n, sizeof *keys, cmp_str);
	for (i = 1; i < n && !dup; i++) {
		if (strcmp(keys[i - 1], keys[i]) == 0)
			dup = keys[i];
	}
	free(keys);
	return dup;
}

/*
 * Checks NODE (a container at nesting level DEPTH, the top object being 1)
 * and everything below it: depth and duplicate keys.  WHERE names the
 * member holding NODE for messages ("" at the top).  Recursion is bounded
 * by KS_MAX_JSON_DEPTH.
 */
static int check_tree(const cJSON *node, int depth, const char *where,
    char *err, size_t errlen)
{
	char e1[ECHO_MAX + 4], e2[ECHO_MAX + 4];
	const cJSON *c;
	const char *dup;
	int nomem = 0, rc;

	if (!cJSON_IsObject(node) && !cJSON_IsArray(node))
		return KS_OK;
	if (depth > KS_MAX_JSON_DEPTH)
		return fail(err, errlen, KS_E_TOO_LARGE,
		    "JSON nesting deeper than %d levels at '%s'",
		    KS_MAX_JSON_DEPTH, echo(e1, where));
	if (cJSON_IsObject(node)) {
		dup = duplicate_key(node, &nomem);
		if (nomem)
			return fail(err, errlen, KS_E_NOMEM, "out of memory");
		if (dup && !*where)
			return fail(err, errlen, KS_E_DUPLICATE_KEY,
			    "duplicate key '%s'", echo(e1, dup));
		if (dup)
			return fail(err, errlen, KS_E_DUPLICATE_KEY,
			    "duplicate key '%s' in '%s'", echo(e1, dup),
			    echo(e2, where));
	}
	for (c = node->child; c; c = c->next) {
		rc = check_tree(c, depth + 1, c->string ? c->string : where,
		    err, errlen);
		if (rc)
			return rc;
	}
	return KS_OK;
}

/*
 * Finds a "\u0000" escape inside a string of the (already valid) JSON text
 * S.  Not a parser: it only tracks whether it is inside a string literal,
 * which cJSON has already shown to be well formed.
 */
static int has_nul_escape(const char *s, size_t len)
{
	size_t i;
	int in_str = 0;

	/* The common case, no such text at all, without a byte loop. */
	if (!memmem(s, len, "\\u0000", 6))
		return 0;

	for (i = 0; i < len; i++) {
		if (!in_str) {
			in_str = s[i] == '"';
			continue;
		}
		if (s[i] == '"') {
			in_str = 0;
		} else if (s[i] == '\\' && i + 1 < len) {
			if (s[i + 1] == 'u' && i + 5 < len &&
			    memcmp(s + i + 2, "0000", 4) == 0)
				return 1;
			i++;
		}
	}
	return 0;
}

/* A string member: type, length and charset; copies into DST. */
static int get_string(const cJSON *m, char dst[KS_MAX_NAME + 1], char *err,
    size_t errlen)
{
	size_t n;

	if (!cJSON_IsString(m))
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "field '%s' must be a string", m->string);
	n = strlen(m->valuestring);
	if (n > KS_MAX_NAME)
		return fail(err, errlen, KS_E_TOO_LARGE,
		    "field '%s' is longer than %d bytes", m->string,
		    KS_MAX_NAME);
	if (!is_token(m->valuestring))
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "field '%s' must be printable ASCII without spaces",
		    m->string);
	memcpy(dst, m->valuestring, n + 1);
	return KS_OK;
}

static int parse_shape(const cJSON *m, ks_get_req_t *g, char *err,
    size_t errlen)
{
	char e[ECHO_MAX + 4];
	const cJSON *c;
	double v;

	if (!cJSON_IsObject(m))
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "field 'shape' must be an object of name to integer");
	for (c = m->child; c; c = c->next) {
		if (g->nshape == KS_MAX_DIMS)
			return fail(err, errlen, KS_E_TOO_LARGE,
			    "shape has more than %d entries", KS_MAX_DIMS);
		if (strlen(c->string) > KS_MAX_NAME)
			return fail(err, errlen, KS_E_TOO_LARGE,
			    "shape entry '%s' is longer than %d bytes",
			    echo(e, c->string), KS_MAX_NAME);
		if (!is_name(c->string))
			return fail(err, errlen, KS_E_BAD_SHAPE,
			    "shape entry '%s' is not a parameter name",
			    echo(e, c->string));
		/*
		 * cJSON holds numbers as doubles.  The value must be integral
		 * and inside int64 (the cast is otherwise undefined).  Above
		 * 2^53 the double may already be a rounding of the text; the
		 * daemon's KS_MAX_DIM is far below that, so such values are
		 * rejected there whatever they round to.
		 */
		v = c->valuedouble;
		if (!cJSON_IsNumber(c) || !(v >= -INT64_LIMIT &&
		    v < INT64_LIMIT) || v != (double)(int64_t)v)
			return fail(err, errlen, KS_E_BAD_SHAPE,
			    "shape entry '%s' must be an integer", c->string);
		memcpy(g->shape[g->nshape].name, c->string,
		    strlen(c->string) + 1);
		g->shape[g->nshape].value = (int64_t)v;
		g->nshape++;
	}
	return KS_OK;
}

static int parse_dynamic(const cJSON *m, ks_get_req_t *g, char *err,
    size_t errlen)
{
	char e[ECHO_MAX + 4];
	const cJSON *c;
	int i, k = 0;

	if (!cJSON_IsArray(m))
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "field 'dynamic' must be an array of parameter names");
	for (c = m->child; c; c = c->next, k++) {
		if (g->ndynamic == KS_MAX_DIMS)
			return fail(err, errlen, KS_E_TOO_LARGE,
			    "dynamic has more than %d entries", KS_MAX_DIMS);
		if (!cJSON_IsString(c))
			return fail(err, errlen, KS_E_BAD_SHAPE,
			    "dynamic entry %d must be a string", k);
		if (strlen(c->valuestring) > KS_MAX_NAME)
			return fail(err, errlen, KS_E_TOO_LARGE,
			    "dynamic entry '%s' is longer than %d bytes",
			    echo(e, c->valuestring), KS_MAX_NAME);
		if (!is_name(c->valuestring))
			return fail(err, errlen, KS_E_BAD_SHAPE,
			    "dynamic entry '%s' is not a parameter name",
			    echo(e, c->valuestring));
		for (i = 0; i < g->ndynamic; i++) {
			if (strcmp(g->dynamic[i], c->valuestring) == 0)
				return fail(err, errlen, KS_E_BAD_SHAPE,
				    "'%s' is named twice in 'dynamic'",
				    c->valuestring);
		}
		memcpy(g->dynamic[g->ndynamic], c->valuestring,
		    strlen(c->valuestring) + 1);
		g->ndynamic++;
	}
	return KS_OK;
}

static int get_name(const cJSON *m, const char *field, char *out,
    char *err, size_t errlen);

/* Bits of the get fields seen, for the required-field check. */
enum {
	SEEN_KERNEL = 1, SEEN_BACKEND = 2, SEEN_DTYPE = 4, SEEN_SHAPE = 8,
};

static int parse_get_member(const cJSON *m, ks_get_req_t *g, unsigned *seen,
    char *err, size_t errlen)
{
	const char *k = m->string;
	int rc;

	if (strcmp(k, "kernel") == 0) {
		*seen |= SEEN_KERNEL;
		return get_string(m, g->kernel, err, errlen);
	}
	if (strcmp(k, "backend") == 0) {
		*seen |= SEEN_BACKEND;
		return get_string(m, g->backend, err, errlen);
	}
	if (strcmp(k, "dtype") == 0) {
		*seen |= SEEN_DTYPE;
		return get_string(m, g->dtype, err, errlen);
	}
	if (strcmp(k, "wdtype") == 0)
		return get_string(m, g->wdtype, err, errlen);
	if (strcmp(k, "target") == 0)
		return get_string(m, g->target, err, errlen);
	if (strcmp(k, "format") == 0) {
		/* "" is allowed: it asks for the backend's default format. */
		if (cJSON_IsString(m) && !*m->valuestring) {
			g->format[0] = '\0';
			return KS_OK;
		}
		return get_string(m, g->format, err, errlen);
	}
	if (strcmp(k, "mode") == 0) {
		rc = get_string(m, g->mode, err, errlen);
		if (rc)
			return rc;
		if (strcmp(g->mode, "exact") && strcmp(g->mode, "fast"))
			return fail(err, errlen, KS_E_BAD_MODE,
			    "field 'mode' must be \"exact\" or \"fast\", not "
			    "'%s'", g->mode);
		return KS_OK;
	}
	if (strcmp(k, "return") == 0) {
		if (cJSON_IsString(m) &&
		    strcmp(m->valuestring, "artifact") == 0) {
			g->meta_only = 0;
			return KS_OK;
		}
		if (cJSON_IsString(m) && strcmp(m->valuestring, "meta") == 0) {
			g->meta_only = 1;
			return KS_OK;
		}
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "field 'return' must be \"artifact\" or \"meta\"");
	}
	if (strcmp(k, "shape") == 0) {
		*seen |= SEEN_SHAPE;
		return parse_shape(m, g, err, errlen);
	}
	if (strcmp(k, "dynamic") == 0)
		return parse_dynamic(m, g, err, errlen);
	return 1;       /* not a get field */
}

static int parse_get(const cJSON *root, const char *opname, ks_get_req_t *g,
    char *err, size_t errlen)
{
	static const struct {
		unsigned bit;
		const char *name;
	} required[] = {
		{ SEEN_KERNEL, "kernel" }, { SEEN_BACKEND, "backend" },
		{ SEEN_DTYPE, "dtype" }, { SEEN_SHAPE, "shape" },
	};
	char e[ECHO_MAX + 4];
	const cJSON *m;
	unsigned seen = 0;
	size_t i;
	int j, rc;

	memcpy(g->target, "auto", sizeof "auto");
	memcpy(g->mode, "exact", sizeof "exact");
	for (m = root->child; m; m = m->next) {
		if (strcmp(m->string, "op") == 0 ||
		    strcmp(m->string, "id") == 0)
			continue;
		/* A get's own: not a get-spec's (warm, ready, deploy items). */
		if (strcmp(m->string, "deployment") == 0 &&
		    strcmp(opname, "op 'get'") == 0) {
			rc = get_name(m, "deployment", g->deployment, err,
			    errlen);
			if (rc)
				return rc;
			continue;
		}
		rc = parse_get_member(m, g, &seen, err, errlen);
		if (rc == 1)
			return fail(err, errlen, KS_E_UNKNOWN_FIELD,
			    "unknown field '%s' for %s", echo(e, m->string),
			    opname);
		if (rc)
			return rc;
	}
	for (i = 0; i < sizeof required / sizeof required[0]; i++) {
		if (!(seen & required[i].bit))
			return fail(err, errlen, KS_E_BAD_REQUEST,
			    "missing field '%s'", required[i].name);
	}
	for (i = 0; i < (size_t)g->ndynamic; i++) {
		for (j = 0; j < g->nshape; j++) {
			if (strcmp(g->dynamic[i], g->shape[j].name) == 0)
				return fail(err, errlen, KS_E_BAD_SHAPE,
				    "'%s' is both in 'shape' and 'dynamic'",
				    g->dynamic[i]);
		}
	}
	return KS_OK;
}

/* A non-negative integer member (exact in a double). */
static int get_count(const cJSON *m, uint64_t *out, char *err, size_t errlen)
{
	double v = cJSON_IsNumber(m) ? m->valuedouble : -1;

	if (!(v >= 0 && v <= ID_MAX && v == (double)(uint64_t)v))
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "field '%s' must be a non-negative integer", m->string);
	*out = (uint64_t)v;
	return KS_OK;
}

/* list: kernel, backend, target, offset, limit.  evict: kernel, backend,
 * target, key, all, stale, dry_run; exactly one of key, a filter, all or
 * stale, and dry_run only with stale.  audit: exactly one of kernel, all
 * or report.  canary: kernel, backend, status. */
static int parse_filter(const cJSON *root, ks_op_t op, ks_filter_req_t *f,
    char *err, size_t errlen)
{
	char e[ECHO_MAX + 4];
	const cJSON *m;
	int rc, filters = 0;

	f->limit = KS_LIST_DEFAULT_LIMIT;
	for (m = root->child; m; m = m->next) {
		const char *k = m->string;

		if (strcmp(k, "op") == 0 || strcmp(k, "id") == 0)
			continue;
		if (strcmp(k, "kernel") == 0)
			rc = get_string(m, f->kernel, err, errlen), filters++;
		else if (op == KS_OP_AUDIT && (strcmp(k, "all") == 0 ||
		    strcmp(k, "report") == 0)) {
			if (!cJSON_IsTrue(m))
				return fail(err, errlen, KS_E_BAD_REQUEST,
				    "field '%s' must be true when given", k);
			if (k[0] == 'a')
				f->all = 1;
			else
				f->report = 1;
			rc = KS_OK;
		} else if (op == KS_OP_AUDIT)
			return fail(err, errlen, KS_E_UNKNOWN_FIELD,
			    "unknown field '%s' for op '%s'", echo(e, k),
			    op_names[op]);
		else if (strcmp(k, "backend") == 0)
			rc = get_string(m, f->backend, err, errlen), filters++;
		else if (op != KS_OP_CANARY && strcmp(k, "target") == 0)
			rc = get_string(m, f->target, err, errlen), filters++;
		else if (op == KS_OP_CANARY && strcmp(k, "status") == 0) {
			if (!cJSON_IsBool(m))
				return fail(err, errlen, KS_E_BAD_REQUEST,
				    "field 'status' must be true or false");
			f->status = cJSON_IsTrue(m);
			rc = KS_OK;
		}
		else if (op == KS_OP_LIST && strcmp(k, "offset") == 0)
			rc = get_count(m, &f->offset, err, errlen);
		else if (op == KS_OP_LIST && strcmp(k, "limit") == 0)
			rc = get_count(m, &f->limit, err, errlen);
		else if (op == KS_OP_EVICT && strcmp(k, "key") == 0) {
			size_t n = cJSON_IsString(m) ?
			    strlen(m->valuestring) : 0;

			/* A whole key, or a prefix of one (ls prints 12). */
			if (n < KS_MIN_KEY_PREFIX || n > 2 * KS_HASH_BYTES ||
			    strspn(m->valuestring, "0123456789abcdef") != n)
				return fail(err, errlen, KS_E_BAD_REQUEST,
				    "field 'key' must be %d to 64 lower-case "
				    "hex digits (a key or a prefix of one)",
				    KS_MIN_KEY_PREFIX);
			memcpy(f->key, m->valuestring, n + 1);
			rc = KS_OK;
		} else if (op == KS_OP_EVICT && (strcmp(k, "all") == 0 ||
		    strcmp(k, "stale") == 0)) {
			if (!cJSON_IsTrue(m))
				return fail(err, errlen, KS_E_BAD_REQUEST,
				    "field '%s' must be true when given", k);
			if (k[0] == 'a')
				f->all = 1;
			else
				f->stale = 1;
			rc = KS_OK;
		} else if (op == KS_OP_EVICT && strcmp(k, "dry_run") == 0) {
			if (!cJSON_IsBool(m))
				return fail(err, errlen, KS_E_BAD_REQUEST,
				    "field 'dry_run' must be true or false");
			f->dry_run = cJSON_IsTrue(m);
			rc = KS_OK;
		} else
			return fail(err, errlen, KS_E_UNKNOWN_FIELD,
			    "unknown field '%s' for op '%s'", echo(e, k),
			    op_names[op]);
		if (rc)
			return rc;
	}
	if (op == KS_OP_LIST && (f->limit == 0 || f->limit >
	    KS_LIST_MAX_LIMIT))
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "field 'limit' must be 1..%d", KS_LIST_MAX_LIMIT);
	if (op == KS_OP_AUDIT && (!!filters + f->all + f->report) != 1)
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "audit needs exactly one of 'kernel', \"all\":true or "
		    "\"report\":true");
	if (op == KS_OP_EVICT && (!!f->key[0] + !!filters + f->all +
	    f->stale) != 1)
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "evict needs exactly one of 'key', a filter (kernel, "
		    "backend, target), \"all\":true or \"stale\":true");
	/* A dry run lists what the stale check finds; the other evicts
	 * name what they remove already. */
	if (f->dry_run && !f->stale)
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "field 'dry_run' goes with \"stale\":true");
	return KS_OK;
}

/*
 * The members of ROOT, a request of op OP, besides "op" and "id": each must
 * be one of NAMES (NULL-terminated), else E_UNKNOWN_FIELD; FOUND[i] gets
 * the member named NAMES[i], or NULL.
 */
static int op_members(const cJSON *root, const char *op,
    const char *const *names, const cJSON **found, char *err, size_t errlen)
{
	char e[ECHO_MAX + 4];
	const cJSON *m;
	int i;

	for (i = 0; names[i]; i++)
		found[i] = NULL;
	for (m = root->child; m; m = m->next) {
		if (strcmp(m->string, "op") == 0 ||
		    strcmp(m->string, "id") == 0)
			continue;
		for (i = 0; names[i] && strcmp(m->string, names[i]); i++)
			;
		if (!names[i])
			return fail(err, errlen, KS_E_UNKNOWN_FIELD,
			    "unknown field '%s' for op '%s'",
			    echo(e, m->string), op);
		found[i] = m;
	}
	return KS_OK;
}

/* Records that warm item I did not parse: its own error, so that one bad
 * spec does not cost the others theirs (docs/protocol.md, warm). */
static int item_failed(ks_request_t *out, int i, int code, const char *msg)
{
	ks_item_err_t *e;

	if (!out->item_errs) {
		out->item_errs = calloc((size_t)KS_MAX_WARM_ITEMS,
		    sizeof *out->item_errs);
		if (!out->item_errs)
			return KS_E_NOMEM;
	}
	e = &out->item_errs[i];
	e->code = code;
	snprintf(e->msg, sizeof e->msg, "%s", msg);
	return KS_OK;
}

/* A deployment's name: 1 to KS_MAX_NAME of [A-Za-z0-9._-]. */
static int get_name(const cJSON *m, const char *field, char *out,
    char *err, size_t errlen)
{
	const char *s = cJSON_IsString(m) ? m->valuestring : NULL;
	size_t n = s ? strlen(s) : 0;

	if (!s || n == 0 || n > KS_MAX_NAME || strspn(s, "abcdefghijklmnopqr"
	    "stuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != n)
		return fail(err, errlen, KS_E_BAD_REQUEST, "field '%s' must be "
		    "a name of 1 to %d letters, digits, '.', '_' or '-'", field,
		    KS_MAX_NAME);
	memcpy(out, s, n + 1);
	return KS_OK;
}

static int parse_items(const cJSON *items, const char *op,
    ks_request_t *out, char *err, size_t errlen);

/* warm: "items", an array of get-specs (objects with get's fields), and
 * "progress"; ready: "items", or "deployment" (a name); deploy: "name"
 * and "items"; undeploy: "name"; deployments: "name", optional. */
static int parse_warm(const cJSON *root, const char *op, ks_request_t *out,
    char *err, size_t errlen)
{
	static const char *const warm_names[] = { "items", "progress", NULL };
	static const char *const ready_names[] = { "items", "deployment",
	    NULL };
	const cJSON *found[2] = { NULL, NULL };
	int rc;

	rc = op_members(root, op, strcmp(op, "warm") == 0 ? warm_names :
	    ready_names, found, err, errlen);
	if (rc)
		return rc;
	if (out->op == KS_OP_WARM) {
		if (found[1] && !cJSON_IsBool(found[1]))
			return fail(err, errlen, KS_E_BAD_REQUEST,
			    "field 'progress' must be true or false");
		out->progress = cJSON_IsTrue(found[1]);
	} else if (found[1]) {
		if (found[0])
			return fail(err, errlen, KS_E_BAD_REQUEST, "give "
			    "'items' or 'deployment', not both");
		return get_name(found[1], "deployment", out->name, err,
		    errlen);
	}
	return parse_items(found[0], op, out, err, errlen);
}

static int parse_deploy(const cJSON *root, const char *op,
    ks_request_t *out, char *err, size_t errlen)
{
	static const char *const deploy_names[] = { "name", "items", NULL };
	static const char *const name_only[] = { "name", NULL };
	const cJSON *found[2] = { NULL, NULL };
	int rc;

	rc = op_members(root, op, out->op == KS_OP_DEPLOY ? deploy_names :
	    name_only, found, err, errlen);
	if (rc)
		return rc;
	if (found[0] || out->op != KS_OP_DEPLOYMENTS) {
		if (!found[0])
			return fail(err, errlen, KS_E_BAD_REQUEST,
			    "missing field 'name'");
		rc = get_name(found[0], "name", out->name, err, errlen);
		if (rc)
			return rc;
	}
	if (out->op != KS_OP_DEPLOY)
		return KS_OK;
	if (cJSON_IsArray(found[1]) && cJSON_GetArraySize(found[1]) == 0)
		return fail(err, errlen, KS_E_BAD_REQUEST, "a deployment needs "
		    "at least one spec in 'items'");
	return parse_items(found[1], op, out, err, errlen);
}

/* misses: "deployment" (a name), optional: that deployment's late
 * compiles instead of the misses. */
static int parse_misses(const cJSON *root, ks_request_t *out, char *err,
    size_t errlen)
{
	static const char *const names[] = { "deployment", NULL };
	const cJSON *found[1] = { NULL };
	int rc;

	rc = op_members(root, "misses", names, found, err, errlen);
	if (rc || !found[0])
		return rc;
	return get_name(found[0], "deployment", out->name, err, errlen);
}

static int parse_items(const cJSON *items, const char *op,
    ks_request_t *out, char *err, size_t errlen)
{
	char msg[256];
	const cJSON *it;
	int n, rc;

	if (!items)
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "missing field 'items'");
	if (!cJSON_IsArray(items))
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "field 'items' must be an array of get-specs");
	n = cJSON_GetArraySize(items);
	if (n > KS_MAX_WARM_ITEMS)
		return fail(err, errlen, KS_E_TOO_LARGE,
		    "%s takes at most %d items per request", op,
		    KS_MAX_WARM_ITEMS);
	out->items = calloc(n ? (size_t)n : 1, sizeof *out->items);
	if (!out->items)
		return fail(err, errlen, KS_E_NOMEM, "out of memory");
	/* The item's index is in its reply: the message need not say it. */
	for (it = items->child; it; it = it->next, out->nitems++) {
		msg[0] = '\0';
		rc = cJSON_IsObject(it) ? parse_get(it, "a warm item",
		    &out->items[out->nitems], msg, sizeof msg) :
		    fail(msg, sizeof msg, KS_E_BAD_REQUEST, "the item is not "
		    "an object (a get-spec)");
		if (rc && item_failed(out, out->nitems, rc, msg))
			return fail(err, errlen, KS_E_NOMEM, "out of memory");
	}
	return KS_OK;
}

/* cancel: "request", the id of a warm on the same connection. */
static int parse_cancel(const cJSON *root, ks_request_t *out, char *err,
    size_t errlen)
{
	static const char *const names[] = { "request", NULL };
	const cJSON *req;
	int rc;

	rc = op_members(root, "cancel", names, &req, err, errlen);
	if (rc)
		return rc;
	if (!req)
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "missing field 'request'");
	return get_count(req, &out->request, err, errlen);
}

/* import: "path", the absolute path of a bundle the daemon reads. */
static int parse_import(const cJSON *root, ks_request_t *out, char *err,
    size_t errlen)
{
	static const char *const names[] = { "path", NULL };
	const cJSON *p;
	int rc;

	rc = op_members(root, "import", names, &p, err, errlen);
	if (rc)
		return rc;
	if (!p)
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "missing field 'path'");
	if (!cJSON_IsString(p) || p->valuestring[0] != '/' ||
	    strlen(p->valuestring) > KS_MAX_PATH)
		return fail(err, errlen, KS_E_BAD_REQUEST, "field 'path' must "
		    "be an absolute path of at most %d bytes", KS_MAX_PATH);
	out->path = strdup(p->valuestring);
	if (!out->path)
		return fail(err, errlen, KS_E_NOMEM, "out of memory");
	return KS_OK;
}

void ks_request_close(ks_request_t *r)
{
	free(r->items);
	free(r->item_errs);
	free(r->path);
	r->path = NULL;
	r->items = NULL;
	r->item_errs = NULL;
	r->nitems = 0;
}

/* Reads "id" when it occurs exactly once; see ks_request_parse. */
static int read_id(const cJSON *root, ks_request_t *out, char *err,
    size_t errlen)
{
	const cJSON *m, *id = NULL;
	double v;

	for (m = root->child; m; m = m->next) {
		if (strcmp(m->string, "id") == 0) {
			if (id)
				return KS_OK;   /* duplicate: reported later */
			id = m;
		}
	}
	if (!id)
		return KS_OK;
	v = cJSON_IsNumber(id) ? id->valuedouble : -1;
	if (!(v >= 0 && v <= ID_MAX && v == (double)(uint64_t)v))
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "field 'id' must be an integer from 0 to 2^53");
	out->has_id = 1;
	out->id = (uint64_t)v;
	return KS_OK;
}

static int parse_root(const cJSON *root, const char *text, size_t len,
    ks_request_t *out, char *err, size_t errlen)
{
	static const char *const no_members[] = { NULL };
	char e[ECHO_MAX + 4];
	const cJSON *m, *op = NULL;
	int rc, i;

	if (!cJSON_IsObject(root))
		return fail(err, errlen, KS_E_BAD_JSON,
		    "header is not a JSON object");
	rc = read_id(root, out, err, errlen);
	if (rc)
		return rc;
	rc = check_tree(root, 1, "", err, errlen);
	if (rc)
		return rc;
	if (has_nul_escape(text, len))
		return fail(err, errlen, KS_E_BAD_JSON,
		    "header contains a \\u0000 escape");
	for (m = root->child; m; m = m->next) {
		if (strcmp(m->string, "op") == 0)
			op = m;
	}
	if (!op)
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "missing field 'op'");
	if (!cJSON_IsString(op))
		return fail(err, errlen, KS_E_BAD_REQUEST,
		    "field 'op' must be a string");
	for (i = 0; i < KS_OP_COUNT_; i++) {
		if (strcmp(op->valuestring, op_names[i]) == 0)
			break;
	}
	if (i == KS_OP_COUNT_)
		return fail(err, errlen, KS_E_UNKNOWN_OP, "unknown op '%s'",
		    echo(e, op->valuestring));
	out->op = (ks_op_t)i;
	if (out->op == KS_OP_GET)
		return parse_get(root, "op 'get'", &out->get, err, errlen);
	if (out->op == KS_OP_EXPLAIN)
		return parse_get(root, "op 'explain'", &out->get, err, errlen);
	if (out->op == KS_OP_LIST || out->op == KS_OP_EVICT ||
	    out->op == KS_OP_AUDIT || out->op == KS_OP_CANARY)
		return parse_filter(root, out->op, &out->filter, err, errlen);
	if (out->op == KS_OP_WARM || out->op == KS_OP_READY)
		return parse_warm(root, op_names[i], out, err, errlen);
	if (out->op == KS_OP_DEPLOY || out->op == KS_OP_UNDEPLOY ||
	    out->op == KS_OP_DEPLOYMENTS)
		return parse_deploy(root, op_names[i], out, err, errlen);
	if (out->op == KS_OP_CANCEL)
		return parse_cancel(root, out, err, errlen);
	if (out->op == KS_OP_IMPORT)
		return parse_import(root, out, err, errlen);
	if (out->op == KS_OP_MISSES)
		return parse_misses(root, out, err, errlen);
	return op_members(root, op_names[i], no_members, NULL, err, errlen);
}

int ks_request_parse(const char *header, size_t len, ks_request_t *out,
    char *err, size_t errlen)
{
	const char *end = NULL;
	char small[1024], *copy;
	cJSON *root;
	int rc;

	memset(out, 0, sizeof *out);
	out->op = KS_OP_COUNT_;         /* until the op is known */
	if (err && errlen)
		err[0] = '\0';
	if (len == 0)
		return fail(err, errlen, KS_E_BAD_FRAME, "empty header");
	if (len > KS_MAX_HEADER)
		return fail(err, errlen, KS_E_TOO_LARGE,
		    "header is longer than %u bytes", KS_MAX_HEADER);
	if (memchr(header, '\0', len))
		return fail(err, errlen, KS_E_BAD_JSON,
		    "header contains a NUL byte");
	/* Most headers are small: copy them to the stack, not the heap. */
	copy = len < sizeof small ? small : malloc(len + 1);
	if (!copy)
		return fail(err, errlen, KS_E_NOMEM, "out of memory");
	memcpy(copy, header, len);
	copy[len] = '\0';
	/* The length given includes the NUL: require_null_terminated then
	 * demands that nothing but whitespace follows the value. */
	root = cJSON_ParseWithLengthOpts(copy, len + 1, &end, 1);
	if (!root) {
		rc = fail(err, errlen, KS_E_BAD_JSON,
		    "header is not valid JSON (at byte %zu)",
		    end && end >= copy && end <= copy + len ?
		    (size_t)(end - copy) : len);
	} else {
		rc = parse_root(root, copy, len, out, err, errlen);
		cJSON_Delete(root);
	}
	if (copy != small)
		free(copy);
	if (rc) {
		/* Only the id and the op (KS_OP_COUNT_ when it was not
		 * known) survive a failure; the rest is unspecified. */
		int has_id = out->has_id;
		uint64_t id = out->id;
		ks_op_t op = out->op;

		ks_request_close(out);
		memset(out, 0, sizeof *out);
		out->has_id = has_id;
		out->id = id;
		out->op = op;
	}
	return rc;
}

int ks_reply_error(ks_buf_t *out, int has_id, uint64_t id, int code,
    const char *message)
{
	int rc;

	rc = ks_buf_puts(out, "{");
	if (!rc && has_id)
		rc = ks_buf_printf(out, "\"id\":%" PRIu64 ",", id);
	if (!rc)
		rc = ks_buf_printf(out,
		    "\"ok\":false,\"error\":{\"code\":\"%s\",\"message\":",
		    ks_err_name(code));
	if (!rc)
		rc = ks_buf_json_str(out, message && *message ? message :
		    ks_strerror(code));
	if (!rc)
		rc = ks_buf_puts(out, "}}");
	return rc;
}
