/*
 * The get fast path (fastpath.h).
 *
 * The scan walks the header once with a small lexer (strings with their
 * escapes, nesting depth) to find a top-level member whose key is spelled
 * "id" followed by ':'.  Its value is taken out when it is written the
 * canonical way: decimal digits, no leading zero, at most 2^53 (the ids
 * the protocol allows), followed by ',' or '}' (white space around it is
 * kept in the template, like every other byte).  An id written any other
 * way, or a header that does not start as an object, makes the header
 * unusable for the fast path: the full parse answers it, exactly as it
 * always would.  The scan stops at the id: the bytes after it are
 * compared with a learned template whole, and a template is learned only
 * from a header that the full parse accepted.
 */
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>            /* the widest vector unit there is */
#endif

#include "fastpath.h"

#define ID_MAX 9007199254740992ull      /* 2^53, as the parser allows */

void ks_fast_init(ks_fast_t *f, int enabled)
{
	memset(f, 0, sizeof *f);
	f->enabled = enabled;
}

void ks_fast_close(ks_fast_t *f)
{
	size_t i;

	for (i = 0; i < KS_FAST_SLOTS; i++)
		free(f->slots[i].tmpl);
	memset(f->slots, 0, sizeof f->slots);
}

static int is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Reads the canonical id whose digits start at H[i]; they end at *end.
 * -1 if it is not canonical. */
static int read_id(const char *h, size_t len, size_t i, size_t *end,
    uint64_t *id)
{
	uint64_t v = 0;
	size_t j = i, k;

	if (j >= len || h[j] < '0' || h[j] > '9')
		return -1;
	if (h[j] == '0' && j + 1 < len && h[j + 1] >= '0' && h[j + 1] <= '9')
		return -1;              /* a leading zero */
	for (; j < len && h[j] >= '0' && h[j] <= '9'; j++) {
		if (j - i >= 16)
			return -1;
		v = v * 10 + (uint64_t)(h[j] - '0');
	}
	for (k = j; k < len && is_ws(h[k]); k++)
		;
	if (v > ID_MAX || k >= len || (h[k] != ',' && h[k] != '}'))
		return -1;
	*end = j;
	*id = v;
	return 0;
}

void ks_fast_scan(const ks_fast_t *f, const char *h, size_t len,
    ks_fast_scan_t *s)
{
	size_t i, j, str, id_at = 0, id_end = 0;
	int depth = 0, ids = 0;

	s->usable = 0;
	s->has_id = 0;
	if (!f->enabled || len == 0 || len > KS_FAST_MAX_TEMPLATE ||
	    h[0] != '{')
		return;
	for (i = 0; i < len; i++) {
		char ch = h[i];

		if (ch == '{' || ch == '[') {
			depth++;
			continue;
		}
		if (ch == '}' || ch == ']') {
			depth--;
			continue;
		}
		if (ch != '"')
			continue;
		/* A string: up to its first quote not escaped. */
		str = i;
		for (i++; i < len && h[i] != '"'; i++)
			if (h[i] == '\\')
				i++;
		if (i >= len)
			return;                 /* unterminated */
		if (depth != 1 || i - str != 3 || h[str + 1] != 'i' ||
		    h[str + 2] != 'd')
			continue;
		for (j = i + 1; j < len && is_ws(h[j]); j++)
			;
		if (j >= len || h[j] != ':')
			continue;               /* a value "id", not a key */
		/* The top-level key "id". */
		for (j++; j < len && is_ws(h[j]); j++)
			;
		if (read_id(h, len, j, &id_end, &s->id) != 0)
			return;
		/* The rest need not be scanned: a template matches only one
		 * learned from a header that parsed whole, so a second "id"
		 * (a duplicate key) or anything else wrong after this one
		 * would have kept it from being learned. */
		ids = 1;
		id_at = j;
		break;
	}
	if (!ids && depth != 0)
		return;
	if (ids && f->planted_prefix) {
		s->has_id = 1;
		memcpy(s->tmpl, h, id_at);
		s->len = id_at;
	} else if (ids) {
		s->has_id = 1;
		memcpy(s->tmpl, h, id_at);
		memcpy(s->tmpl + id_at, h + id_end, len - id_end);
		s->len = len - (id_end - id_at);
	} else {
		memcpy(s->tmpl, h, len);
		s->len = len;
	}
	s->hash = XXH3_64bits(s->tmpl, s->len);
	s->usable = 1;
}

/* The set of S's template: KS_FAST_WAYS slots side by side. */
static ks_fast_entry_t *set_of(ks_fast_t *f, uint64_t hash)
{
	return &f->slots[(hash & (KS_FAST_SLOTS / KS_FAST_WAYS - 1)) *
	    KS_FAST_WAYS];
}

const ks_fast_entry_t *ks_fast_find(ks_fast_t *f, const ks_fast_scan_t *s)
{
	ks_fast_entry_t *e;
	int w;

	if (!s->usable)
		return NULL;
	e = set_of(f, s->hash);
	for (w = 0; w < KS_FAST_WAYS; w++, e++)
		if (e->tmpl && e->hash == s->hash && e->len == s->len &&
		    e->has_id == s->has_id &&
		    memcmp(e->tmpl, s->tmpl, s->len) == 0) {
			e->used = ++f->clock;
			f->hits++;
			return e;
		}
	return NULL;
}

void ks_fast_learn(ks_fast_t *f, const ks_fast_scan_t *s, int has_id,
    uint64_t id, int meta_only, const ks_get_t *g)
{
	ks_fast_entry_t *set, *e;
	char *copy;
	int w;

	if (!s->usable || has_id != s->has_id || (has_id && id != s->id))
		return;
	copy = malloc(s->len);
	if (!copy)
		return;
	memcpy(copy, s->tmpl, s->len);
	/* An empty way, else the one used least recently. */
	set = set_of(f, s->hash);
	e = set;
	for (w = 0; w < KS_FAST_WAYS && set[w].tmpl; w++)
		if (set[w].used < e->used)
			e = &set[w];
	if (w < KS_FAST_WAYS)
		e = &set[w];
	if (e->tmpl) {
		free(e->tmpl);
		f->replaced++;
	}
	e->tmpl = copy;
	e->hash = s->hash;
	e->len = s->len;
	e->has_id = s->has_id;
	e->meta_only = meta_only;
	e->g = *g;
	e->used = ++f->clock;
	f->learned++;
}

_Static_assert((KS_FAST_SLOTS & (KS_FAST_SLOTS - 1)) == 0 &&
    KS_FAST_SLOTS % KS_FAST_WAYS == 0,
    "KS_FAST_SLOTS must be a power of two, in sets of KS_FAST_WAYS");
