/*
 * The get fast path (fastpath.h).
 *
 * The scan is cheap: it looks for the first occurrence of the four bytes
 * "id" (quotes included) in the header and, when a ':' follows it (white
 * space around kept in the template, like every other byte), takes out
 * the value after it if that is a canonical id: decimal digits, no leading
 * zero, at most 2^53 (the ids the protocol allows), followed by ',' or '}'.
 * A header without those four bytes is its own template.  Anything else
 * (an "id" that is a value, an id written another way, a header that does
 * not start as an object) makes the header unusable for the fast path:
 * the full parse answers it, exactly as it always would.
 *
 * The scan does not know whether that "id" is the header's top-level key.
 * Learning does: a template is learned only from a header that the full
 * parse accepted with the same id, and only when a JSON lexer (strings
 * with their escapes, nesting depth) finds the first top-level key "id"
 * exactly where the scan took the id out (or, for a template without an
 * id, finds none and balanced nesting).  A later header equal to the
 * template has the same bytes up to that place, so the lexer would stop at
 * the same key there, and the same bytes after the id: it is the same get
 * but for the id, which the scan read.
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

/* Past the white space and the ':' after the key whose closing quote is
 * H[i - 1], and the white space after it: where the value starts, or 0
 * when no ':' follows (the string is a value, not a key). */
static size_t value_at(const char *h, size_t len, size_t i)
{
	for (; i < len && is_ws(h[i]); i++)
		;
	if (i >= len || h[i] != ':')
		return 0;
	for (i++; i < len && is_ws(h[i]); i++)
		;
	return i;
}

/*
 * The lexer of learning: where the value of the first top-level key "id"
 * of header H starts (*at), 1; 0 when there is none and the nesting is
 * balanced; -1 for an unterminated string or unbalanced nesting.
 */
static int top_level_id(const char *h, size_t len, size_t *at)
{
	size_t i, str;
	int depth = 0;

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
			return -1;
		if (depth == 1 && i - str == 3 && h[str + 1] == 'i' &&
		    h[str + 2] == 'd' && (*at = value_at(h, len, i + 1)) != 0)
			return 1;
	}
	return depth == 0 ? 0 : -1;
}

/* The first occurrence of the four bytes "id" in H, or NULL. */
static const char *find_id(const char *h, size_t len)
{
	size_t i;

	for (i = 0; i + 4 <= len; i++)
		if (h[i] == '"' && h[i + 1] == 'i' && h[i + 2] == 'd' &&
		    h[i + 3] == '"')
			return h + i;
	return NULL;
}

void ks_fast_scan(const ks_fast_t *f, const char *h, size_t len,
    ks_fast_scan_t *s)
{
	const char *q;
	size_t at, end;

	s->usable = 0;
	s->has_id = 0;
	if (!f->enabled || len == 0 || len > KS_FAST_MAX_TEMPLATE ||
	    h[0] != '{')
		return;
	s->hdr = h;
	s->hdr_len = len;
	q = find_id(h, len);
	if (q == NULL) {
		memcpy(s->tmpl, h, len);
		s->len = len;
		s->id_at = len;
	} else {
		at = value_at(h, len, (size_t)(q - h) + 4);
		if (at == 0 || read_id(h, len, at, &end, &s->id) != 0)
			return;
		s->has_id = 1;
		s->id_at = at;
		memcpy(s->tmpl, h, at);
		memcpy(s->tmpl + at, h + end, len - end);
		s->len = len - (end - at);
#ifdef KS_TEST_PLANT
		if (f->planted_prefix)
			s->len = at;    /* the test build's planted bug */
#endif
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
	size_t at;
	int w;

	if (!s->usable || has_id != s->has_id || (has_id && id != s->id))
		return;
	/* The scan's "id" is the top-level key (see the top of the file). */
	if (top_level_id(s->hdr, s->hdr_len, &at) != s->has_id ||
	    (s->has_id && at != s->id_at))
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
