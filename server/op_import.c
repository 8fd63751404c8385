/*
 * import: a bundle (proto/entry.h) into the store, for an admin.  The
 * daemon reads the file at the path the request names, on a thread of
 * libuv's pool (a bundle may be large), and checks each entry there: its
 * signature against --fleet-key, its metadata's key and content hash
 * against its key and bytes.  Back on the loop, an entry is stored when
 * this daemon would ask for its key today (ks_keys_check_entry: same
 * kernel definition, compiler identity and target) and the store does not
 * have it; the reply comes once the writer has stored them, so a get
 * that follows finds them.  docs/fleet.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "ops.h"

/* A bundle larger than this is refused before it is read. */
#define KS_IMPORT_MAX_BYTES (4ull << 30)

enum { IMP_STORED, IMP_PRESENT, IMP_REFUSED };

typedef struct {
	int status;              /* IMP_* */
	int code;                /* of a refusal */
	char msg[240];
	ks_artifact_t *a;        /* verified, not yet stored */
} imp_item_t;

typedef struct {
	ks_later_t l;            /* first: the writer's barrier, back on the
	                            loop */
	uv_work_t work;
	char *path;
	int rc;                  /* of the file as a whole */
	char err[512];
	uint32_t count;
	imp_item_t *items;
} import_t;

static void item_refuse(imp_item_t *it, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void item_refuse(imp_item_t *it, int code, const char *fmt, ...)
{
	va_list ap;

	it->status = IMP_REFUSED;
	it->code = code;
	va_start(ap, fmt);
	vsnprintf(it->msg, sizeof it->msg, fmt, ap);
	va_end(ap);
}

/* Pool thread: one entry checked and made an artifact. */
static int check_entry(void *ctx, uint32_t index, const void *p, size_t len)
{
	import_t *im = ctx;
	imp_item_t *it = &im->items[index];
	const cJSON *key, *sum;
	char hex[KS_HASH_HEX], err[256];
	ks_entry_t e;
	ks_hash_t h;
	cJSON *meta;
	int rc;

	rc = ks_entry_open(im->l.srv->fleet, im->l.srv->nfleet, p, len, &e, err,
	    sizeof err);
	if (rc) {
		item_refuse(it, rc, "%s", err);
		return 0;
	}
	/* The signer vouches for the metadata; it must still describe
	 * these bytes under this key. */
	meta = ks_meta_parse(e.meta, e.meta_len);
	key = cJSON_GetObjectItemCaseSensitive(meta, "key");
	sum = cJSON_GetObjectItemCaseSensitive(meta, "artifact");
	ks_hash_hex(&e.key, hex);
	ks_hash(e.bytes, e.len, &h);
	if (!meta || !cJSON_IsString(key) || strcmp(key->valuestring, hex) ||
	    !cJSON_IsString(sum)) {
		item_refuse(it, KS_E_PROTO, "its metadata does not name its "
		    "key %.12s", hex);
	} else {
		ks_hash_hex(&h, hex);
		if (strcmp(sum->valuestring, hex) != 0)
			item_refuse(it, KS_E_CORRUPT, "its bytes are not the "
			    "artifact its metadata names");
	}
	cJSON_Delete(meta);
	if (it->status == IMP_REFUSED)
		return 0;
	it->a = ks_artifact_new_with_sum(&e.key, &h, e.meta, e.meta_len,
	    e.bytes, e.len);
	if (!it->a)
		item_refuse(it, KS_E_NOMEM, "out of memory");
	return 0;
}

/* The first walk only checks the file's structure. */
static int bundle_shape(void *ctx, uint32_t index, const void *p,
    size_t len)
{
	(void)ctx;
	(void)index;
	(void)p;
	(void)len;
	return 0;
}

/* Pool thread: reads the file and checks every entry. */
static void import_work(uv_work_t *w)
{
	import_t *im = w->data;
	struct stat st;
	uint8_t *buf = NULL;
	size_t got = 0;
	ssize_t n;
	int fd;

	/* Non-blocking: a FIFO must not hold a pool thread. */
	fd = open(im->path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0 || fstat(fd, &st) != 0) {
		im->rc = ks_err_from_errno(errno);
		snprintf(im->err, sizeof im->err, "cannot read %s: %s",
		    im->path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size >
	    KS_IMPORT_MAX_BYTES) {
		im->rc = KS_E_BAD_REQUEST;
		snprintf(im->err, sizeof im->err, "%s is not a bundle file "
		    "(a regular file of at most 4 GiB)", im->path);
		goto out;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		im->rc = KS_E_NOMEM;
		snprintf(im->err, sizeof im->err, "out of memory");
		goto out;
	}
	while (got < (size_t)st.st_size &&
	    (n = read(fd, buf + got, (size_t)st.st_size - got)) > 0)
		got += (size_t)n;
	/* First the structure, then each entry: an index is always one
	 * of the file's. */
	im->rc = ks_bundle_each(buf, got, bundle_shape, im, &im->count,
	    im->err, sizeof im->err);
	/* The count is now one the file's size bears out. */
	if (im->rc == KS_OK && !(im->items = calloc(im->count ? im->count : 1,
	    sizeof *im->items))) {
		im->rc = KS_E_NOMEM;
		snprintf(im->err, sizeof im->err, "out of memory");
	}
	if (im->rc == KS_OK)
		im->rc = ks_bundle_each(buf, got, check_entry, im, &im->count,
		    im->err, sizeof im->err);
	if (im->rc == KS_E_PROTO)
		im->rc = KS_E_BAD_REQUEST;
out:
	if (fd >= 0)
		close(fd);
	free(buf);
}

static void import_free(import_t *im)
{
	uint32_t i;

	for (i = 0; im->items && i < im->count; i++)
		if (im->items[i].a)
			ks_artifact_unref(im->items[i].a);
	free(im->items);
	free(im->path);
	free(im);
}

static void import_reply(import_t *im)
{
	ks_conn_t *c = im->l.conn;
	ks_srv_t *srv = im->l.srv;
	uint64_t n[3] = { 0, 0, 0 };
	int op = ks_srv_answer_as(srv, KS_OP_IMPORT), first = 1;
	uint32_t i;

	if (ks_conn_live(c)) {
		if (im->rc) {
			ks_reply_err(c, im->l.has_id, im->l.id, im->rc, im->err);
		} else {
			for (i = 0; i < im->count; i++)
				n[im->items[i].status]++;
			ks_reply_begin(c, im->l.has_id, im->l.id);
			ks_buf_printf(&c->out, ",\"entries\":%" PRIu32
			    ",\"imported\":%" PRIu64 ",\"present\":%" PRIu64
			    ",\"refused\":%" PRIu64 ",\"refusals\":[",
			    im->count, n[IMP_STORED], n[IMP_PRESENT],
			    n[IMP_REFUSED]);
			for (i = 0; i < im->count; i++) {
				const imp_item_t *it = &im->items[i];

				if (it->status != IMP_REFUSED)
					continue;
				ks_buf_printf(&c->out, "%s{\"index\":%" PRIu32
				    ",\"code\":\"%s\",\"message\":",
				    first ? "" : ",", i, ks_err_name(it->code));
				ks_buf_json_str(&c->out, it->msg);
				ks_buf_puts(&c->out, "}");
				first = 0;
			}
			ks_buf_puts(&c->out, "]");
			ks_reply_finish(c);
		}
	}
	srv->cur_op = op;
	ks_conn_done(c);
	import_free(im);
}

static void on_stored(ks_mail_t *m)
{
	import_reply((import_t *)m);
}

typedef struct {
	ks_srv_t *srv;
	const char *why;
	int state;
	int canary;              /* KS_OK, or the canary's refusal */
	char msg[512];
} compat_t;

/* Whether this daemon would ask for E's key now, and, when it would,
 * whether its kernel's canary lets it in. */
static int compat_of(void *ctx, const ks_store_entry_t *e)
{
	compat_t *c = ctx;

	c->state = ks_keys_check_entry(&c->srv->keys, e, &c->why);
	if (c->state == KS_KEYS_CURRENT)
		c->canary = ks_canary_admits(c->srv, e->backend, e->kernel,
		    c->msg, sizeof c->msg);
	return 0;
}

/* Loop: what fits this daemon goes to the writer. */
static void import_done(uv_work_t *w, int status)
{
	import_t *im = w->data;
	ks_srv_t *srv = im->l.srv;
	ks_hash_t have;
	char hex[KS_HASH_HEX];
	uint32_t i;

	if (status != 0 && im->rc == KS_OK) {
		im->rc = KS_E_INTERNAL;
		snprintf(im->err, sizeof im->err, "the import was cancelled");
	}
	for (i = 0; im->rc == KS_OK && i < im->count; i++) {
		imp_item_t *it = &im->items[i];
		compat_t cc = { srv, "", KS_KEYS_STALE, KS_OK, "" };

		if (!it->a)
			continue;
		if (ks_store_entry_of(&it->a->key, it->a->meta,
		    it->a->meta_len, it->a->len, compat_of, &cc) != KS_OK) {
			item_refuse(it, KS_E_NOMEM, "out of memory");
		} else if (cc.state != KS_KEYS_CURRENT) {
			item_refuse(it, KS_E_BAD_REQUEST, "not for this daemon "
			    "(%s): no request here can get its key",
			    cc.why && *cc.why ? cc.why : "key");
		} else if (cc.canary) {
			item_refuse(it, cc.canary, "%s", cc.msg);
		} else {
			ks_hash_hex(&it->a->key, hex);
			if (ks_hot_has(srv->hot, &it->a->key) ||
			    ks_store_keys_with_prefix(srv->store, hex,
			    &have, 1) == 1) {
				/* A local copy is kept as it is. */
				it->status = IMP_PRESENT;
			} else if (ks_writer_put(srv->writer, it->a) != KS_OK) {
				item_refuse(it, KS_E_NOMEM, "out of memory");
			} else {
				it->status = IMP_STORED;
			}
		}
	}
	if (ks_writer_barrier(srv->writer, ks_later_post, im) != KS_OK)
		import_reply(im);
}

void ks_op_import(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = ks_srv_of(c);
	import_t *im;

	if (!ks_srv_admin_only(c, req, "import"))
		return;
	if (srv->nfleet == 0) {
		ks_srv_reject(c, req->has_id, req->id, KS_E_DENIED, "this "
		    "daemon has no --fleet-key: it trusts no signed entry");
		return;
	}
	im = calloc(1, sizeof *im);
	if (im)
		im->path = strdup(req->path);
	if (!im || !im->path) {
		free(im);
		ks_srv_reject(c, req->has_id, req->id, KS_E_NOMEM,
		    "out of memory");
		return;
	}
	ks_later_init(&im->l, c, req, on_stored);
	im->work.data = im;
	if (uv_queue_work(srv->loop, &im->work, import_work,
	    import_done) != 0) {
		free(im->path);
		free(im);
		ks_srv_reject(c, req->has_id, req->id, KS_E_INTERNAL,
		    "cannot start the import");
		return;
	}
	ks_conn_wait(c);
}
