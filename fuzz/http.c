/*
 * The metrics listener's request head parser (server/http.h,
 * ks_http_parse_head) on the bytes of one connection.
 *
 * The input is what a client sends; the listener keeps at most
 * KS_HTTP_MAX_HEAD - 1 bytes of it.  Checks: a head is answered once it
 * holds a blank line or fills the buffer, never before; the answer is a
 * request (GET or HEAD of a path that starts with '/' and has no query
 * or space) or one of the error statuses; it is the same whether the
 * bytes after the blank line came or not (nothing past the head is read);
 * the Host check refuses (403) only what it should, and a head it lets
 * through answers as without the check.
 */
#include <string.h>

#include "../server/http.h"
#include "fuzz.h"

typedef struct {
	int done;
	ks_http_req_t r;
	char path[KS_HTTP_MAX_HEAD];
	char head[KS_HTTP_MAX_HEAD];
} outcome_t;

static outcome_t whole, cut, nohost;

/* Parses the first LEN bytes of DATA as the listener would have them. */
static void parse(outcome_t *o, const uint8_t *data, size_t len,
    int check_host)
{
	memcpy(o->head, data, len);
	o->head[len] = '\0';
	o->done = ks_http_parse_head(o->head, len, check_host, &o->r);
	o->path[0] = '\0';
	if (o->done && o->r.status == 0) {
		KS_FUZZ_CHECK(o->r.path >= o->head &&
		    o->r.path < o->head + len);
		memcpy(o->path, o->r.path, strlen(o->r.path) + 1);
	}
}

static int same(const outcome_t *a, const outcome_t *b)
{
	return a->done == b->done && a->r.status == b->r.status &&
	    a->r.head_only == b->r.head_only &&
	    strcmp(a->path, b->path) == 0;
}

KS_FUZZ_TARGET(http)
{
	size_t len = size < KS_HTTP_MAX_HEAD - 1 ? size : KS_HTTP_MAX_HEAD - 1;
	const char *end;
	int st;

	parse(&whole, data, len, 1);
	/* The parse cut whole.head into pieces: the blank line is looked
	 * for in a fresh copy. */
	memcpy(cut.head, data, len);
	cut.head[len] = '\0';
	end = strstr(cut.head, "\r\n\r\n");
	KS_FUZZ_CHECK(whole.done == (end != NULL || len ==
	    KS_HTTP_MAX_HEAD - 1));
	if (!whole.done)
		return 0;
	st = whole.r.status;
	KS_FUZZ_CHECK(st == 0 || st == 400 || st == 403 || st == 405 ||
	    st == 431 || st == 505);
	KS_FUZZ_CHECK((st == 0) == (whole.r.path != NULL));
	KS_FUZZ_CHECK(st == 0 || whole.r.why != NULL);
	KS_FUZZ_CHECK((st == 431) == (end == NULL));
	if (st == 0) {
		KS_FUZZ_CHECK(whole.path[0] == '/');
		KS_FUZZ_CHECK(strpbrk(whole.path, "? ") == NULL);
		KS_FUZZ_CHECK(memcmp(data, whole.r.head_only ? "HEAD /" :
		    "GET /", whole.r.head_only ? 6 : 5) == 0);
	}
	if (end) {
		/* The listener answers as soon as the blank line is in:
		 * what follows it must not matter. */
		parse(&cut, data, (size_t)(end - cut.head) + 4, 1);
		KS_FUZZ_CHECK(same(&cut, &whole));
	}
	parse(&nohost, data, len, 0);
	KS_FUZZ_CHECK(nohost.r.status != 403);
	if (st != 403)
		KS_FUZZ_CHECK(same(&nohost, &whole));
	else
		KS_FUZZ_CHECK(nohost.r.status == 0);
	return 0;
}
