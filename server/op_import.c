/*
 * import: a bundle (proto/entry.h) into the store, for an admin.  The
 * daemon reads the file at the path the request names, with its own
 * rights, in batches, so that what it holds does not grow with the
 * bundle.  A batch goes through these steps:
 *
 *   read    pool thread: at most KS_IMPORT_BATCH_ENTRIES entries, and no
 *           more than KS_IMPORT_BATCH_BYTES of them unless one entry alone
 *           is larger, each read into one window and checked there: its
 *           signature against --fleet-key, its metadata's key and content
 *           hash against its key and bytes.  The first read opens the
 *           file and walks its structure (every entry's length, none of
 *           its bytes), so that a file that is not a bundle fails the
 *           request before anything is stored.
 *   sort    loop: an entry that this daemon would ask for today
 *           (ks_keys_check_entry: same kernel definition, compiler
 *           identity and target), and that its kernel's canary lets in,
 *           goes to the store writer as an add (ks_writer_add); the others
 *           are refused and dropped.  Then a barrier.
 *   stored  loop, at the barrier: each add's result counts its entry
 *           imported or present, and the batch is dropped.  The store
 *           decides in the transaction that would write the row, so of
 *           two imports of one entry exactly one stores it.
 *
 * An entry's states (imp_item_t.status):
 *
 *   (read)   --checked-->                 IMP_CHECKED, its artifact held
 *   (read)   --signature, metadata-->     IMP_REFUSED
 *   CHECKED  --sort: fits, add posted-->  IMP_ADDING
 *   CHECKED  --sort: not for us-->        IMP_REFUSED, artifact dropped
 *   ADDING   --stored: added, or not-->   IMP_STORED or IMP_PRESENT
 *   ADDING   --stored: store error-->     IMP_REFUSED
 *
 * and a batch is dropped, its artifacts with it, only in one of the last
 * three (or when the file fails as a whole).
 *
 * Backpressure: a batch is read only while at most one other is held (at
 * the writer), so an import holds at most two batches, and the window of
 * the largest entry read, whatever the size of the bundle; srv->imports
 * counts the batches' entries and bytes of all imports, for stats.
 * The reply comes after the last batch is stored, so a get that follows
 * finds its entries.  An import whose client has gone reads no further;
 * one that finds the daemon stopping fails with E_SHUTTING_DOWN (what it
 * stored stays).  docs/fleet.md.
 */
#include <assert.h>
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

/* No daemon makes an artifact larger than a compile worker can return:
 * an entry that could hold a larger one is refused unread. */
#define MAX_ENTRY ((uint64_t)KS_ENTRY_HEAD + KS_ENTRY_MAX_META + \
	KS_WIRE_MAX_PAYLOAD + KS_FLEET_SIG_BYTES)

/* What became of an entry: the first three are counted in the reply. */
enum { IMP_STORED, IMP_PRESENT, IMP_REFUSED, IMP_CHECKED, IMP_ADDING };

typedef struct {
	int status;              /* IMP_* */
	int code;                /* of a refusal */
	int added;               /* the writer's result, while IMP_ADDING */
	char msg[240];
	ks_artifact_t *a;        /* held: checked, not yet stored */
} imp_item_t;

typedef struct import import_t;

/* Entries FIRST .. FIRST + N - 1 of the file. */
typedef struct {
	ks_mail_t mail;          /* first: the writer's barrier */
	import_t *im;
	int busy;                /* being read, or at the writer */
	int parked;              /* test build: stored, results not taken */
	uint32_t first, n;
	imp_item_t items[KS_IMPORT_BATCH_ENTRIES];
} imp_batch_t;

struct import {
	ks_later_t l;            /* the request: its connection and id */
	uv_work_t work;          /* the read in progress */
	char *path;
	int fd;                  /* -1 until the first read opens it */
	ks_bundle_file_t file;
	uint8_t *window;         /* the entry being read */
	size_t window_len;
	int rc;                  /* of the file as a whole */
	char err[512];
	imp_batch_t *reading;    /* the batch a read fills, or NULL */
	int storing;             /* batches at the writer */
	imp_batch_t batch[2];
	uint64_t n[3];           /* entries stored, present, refused */
	ks_buf_t refusals;       /* the first KS_IMPORT_LISTED, as listed */
};

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

/* ---- what imports hold ---- */

static void raise_peak(uint64_t *peak, uint64_t now)
{
	uint64_t was = __atomic_load_n(peak, __ATOMIC_RELAXED);

	while (now > was && !__atomic_compare_exchange_n(peak, &was, now, 1,
	    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* Any thread: IT's artifact is held from now on. */
static void hold(ks_srv_t *srv, const imp_item_t *it)
{
	raise_peak(&srv->imports.peak_entries, __atomic_add_fetch(
	    &srv->imports.entries, 1, __ATOMIC_RELAXED));
	raise_peak(&srv->imports.peak_bytes, __atomic_add_fetch(
	    &srv->imports.bytes, it->a->meta_len + it->a->len,
	    __ATOMIC_RELAXED));
}

/* Loop: IT's artifact, if any, is held no more. */
static void drop(ks_srv_t *srv, imp_item_t *it)
{
	if (!it->a)
		return;
	__atomic_sub_fetch(&srv->imports.entries, 1, __ATOMIC_RELAXED);
	__atomic_sub_fetch(&srv->imports.bytes, it->a->meta_len + it->a->len,
	    __ATOMIC_RELAXED);
	ks_artifact_unref(it->a);
	it->a = NULL;
}

/* ---- read: pool thread ---- */

/* One entry (LEN bytes at P) checked and made an artifact, or refused. */
static void check_entry(import_t *im, imp_item_t *it, const void *p,
    size_t len)
{
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
		return;
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
		return;
	it->a = ks_artifact_new_with_sum(&e.key, &h, e.meta, e.meta_len,
	    e.bytes, e.len);
	if (!it->a) {
		item_refuse(it, KS_E_NOMEM, "out of memory");
		return;
	}
	it->status = IMP_CHECKED;
	hold(im->l.srv, it);
}

static int open_bundle(import_t *im)
{
	struct stat st;

	/* Non-blocking: a FIFO must not hold a pool thread (a regular
	 * file's reads are the same either way). */
	im->fd = open(im->path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (im->fd < 0 || fstat(im->fd, &st) != 0) {
		snprintf(im->err, sizeof im->err, "cannot read %s: %s",
		    im->path, strerror(errno));
		return ks_err_from_errno(errno);
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(im->err, sizeof im->err, "%s is not a bundle file "
		    "(a regular file)", im->path);
		return KS_E_BAD_REQUEST;
	}
	return ks_bundle_file_open(&im->file, im->fd, (uint64_t)st.st_size,
	    im->err, sizeof im->err);
}

/* Takes the next entry, LEN bytes, into B: read and checked, or passed
 * over and refused. */
static int take_entry(import_t *im, imp_batch_t *b, uint64_t len)
{
	imp_item_t *it = &b->items[b->n];
	uint8_t *w;
	int rc;

	memset(it, 0, sizeof *it);
	if (len > MAX_ENTRY) {
		item_refuse(it, KS_E_TOO_LARGE, "an entry of %" PRIu64 " bytes "
		    "(no artifact a daemon makes is over %u MiB)", len,
		    KS_WIRE_MAX_PAYLOAD >> 20);
	} else if (len > im->window_len) {
		w = realloc(im->window, (size_t)len);
		if (w) {
			im->window = w;
			im->window_len = (size_t)len;
		} else {
			item_refuse(it, KS_E_NOMEM, "out of memory");
		}
	}
	rc = ks_bundle_file_take(&im->file, it->status == IMP_REFUSED ? NULL :
	    im->window, len, im->err, sizeof im->err);
	if (rc)
		return rc;
	b->n++;
	if (it->status != IMP_REFUSED)
		check_entry(im, it, im->window, (size_t)len);
	return KS_OK;
}

/* Reads the next batch into im->reading; the first read opens the file. */
static void import_read(uv_work_t *w)
{
	import_t *im = w->data;
	imp_batch_t *b = im->reading;
	uint64_t len, bytes = 0;

	if (im->fd < 0)
		im->rc = open_bundle(im);
	b->first = im->file.next;
	b->n = 0;
	while (im->rc == KS_OK && b->n < KS_IMPORT_BATCH_ENTRIES &&
	    im->file.next < im->file.count) {
		im->rc = ks_bundle_file_peek(&im->file, &len, im->err,
		    sizeof im->err);
		/* A batch ends before an entry that would take it past its
		 * bytes, unless that entry is its first. */
		if (im->rc || (b->n && bytes + len > KS_IMPORT_BATCH_BYTES))
			break;
		im->rc = take_entry(im, b, len);
		bytes += len;
	}
	if (im->rc == KS_E_PROTO)
		im->rc = KS_E_BAD_REQUEST;
}

/* ---- sort and stored: the loop ---- */

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

/* Lists IT, entry INDEX, among the refusals while the list has room. */
static void list_refusal(import_t *im, uint32_t index, const imp_item_t *it)
{
	ks_buf_t *o = &im->refusals;
	size_t was = o->len;

	if (im->n[IMP_REFUSED] > KS_IMPORT_LISTED)
		return;
	if (ks_buf_printf(o, "%s{\"index\":%" PRIu32 ",\"code\":\"%s\","
	    "\"message\":", was ? "," : "", index, ks_err_name(it->code)) ||
	    ks_buf_json_str(o, it->msg) || ks_buf_puts(o, "}")) {
		o->len = was;    /* out of memory: not listed */
		if (o->data)
			o->data[was] = '\0';
	}
}

/* The writer is past B's adds: each entry is counted, refusals listed,
 * and what B held is dropped. */
static void batch_done(import_t *im, imp_batch_t *b)
{
	uint32_t i;

	for (i = 0; i < b->n; i++) {
		imp_item_t *it = &b->items[i];

		if (it->status == IMP_ADDING && it->added >= 0)
			it->status = it->added ? IMP_STORED : IMP_PRESENT;
		else if (it->status == IMP_ADDING)
			item_refuse(it, it->added, "the store could not "
			    "write it");
		assert(it->status <= IMP_REFUSED);
		im->n[it->status]++;
		if (it->status == IMP_REFUSED)
			list_refusal(im, b->first + i, it);
		drop(im->l.srv, it);
	}
	b->busy = 0;
	b->parked = 0;
	im->storing--;
}

static void advance(import_t *im);

/* Loop: the writer's barrier after B's adds. */
static void on_stored(ks_mail_t *m)
{
	imp_batch_t *b = (imp_batch_t *)m;
	import_t *im = b->im;

#ifdef KS_TEST_PLANT
	/* A store slower than any read: the writer's results are taken
	 * only once the import can read no further (advance). */
	if (im->l.srv->import_slow_store && im->reading) {
		b->parked = 1;
		return;
	}
#endif
	batch_done(im, b);
	advance(im);
}

/* Takes the results on_stored parked (test build); how many batches. */
static int unpark(import_t *im)
{
	int n = 0;
#ifdef KS_TEST_PLANT
	int i;

	for (i = 0; i < 2; i++)
		if (im->batch[i].parked) {
			batch_done(im, &im->batch[i]);
			n++;
		}
#else
	(void)im;
#endif
	return n;
}

/* Writer thread. */
static void batch_reached(void *ctx)
{
	imp_batch_t *b = ctx;

	ks_mailbox_post(&b->im->l.srv->mailbox, &b->mail);
}

/* B's checked entries that fit this daemon go to the writer. */
static void sort(import_t *im, imp_batch_t *b)
{
	ks_srv_t *srv = im->l.srv;
	uint32_t i;

	for (i = 0; i < b->n; i++) {
		imp_item_t *it = &b->items[i];
		compat_t cc = { srv, "", KS_KEYS_STALE, KS_OK, "" };

		if (it->status != IMP_CHECKED)
			continue;
		if (ks_store_entry_of(&it->a->key, it->a->meta,
		    it->a->meta_len, it->a->len, compat_of, &cc) != KS_OK)
			item_refuse(it, KS_E_NOMEM, "out of memory");
		else if (cc.state != KS_KEYS_CURRENT)
			item_refuse(it, KS_E_BAD_REQUEST, "not for this daemon "
			    "(%s): no request here can get its key",
			    cc.why && *cc.why ? cc.why : "key");
		else if (cc.canary)
			item_refuse(it, cc.canary, "%s", cc.msg);
		else if (ks_writer_add(srv->writer, it->a, &it->added) != KS_OK)
			item_refuse(it, KS_E_NOMEM, "out of memory");
		else
			it->status = IMP_ADDING;
		if (it->status == IMP_REFUSED)
			drop(srv, it);
	}
	im->storing++;
	b->mail.fn = on_stored;
	if (ks_writer_barrier(srv->writer, batch_reached, b) != KS_OK) {
		/* No memory for the barrier: the writer is waited for here,
		 * rather than B freed while adds may still write to it. */
		ks_writer_sync(srv->writer);
		batch_done(im, b);
	}
}

/* Loop: a read is over. */
static void import_read_done(uv_work_t *w, int status)
{
	import_t *im = w->data;
	imp_batch_t *b = im->reading;
	uint32_t i;

	im->reading = NULL;
	if (status != 0 && im->rc == KS_OK) {
		im->rc = KS_E_INTERNAL;
		snprintf(im->err, sizeof im->err, "the import was cancelled");
	}
	if (im->rc == KS_OK) {
		sort(im, b);
	} else {
		for (i = 0; i < b->n; i++)
			drop(im->l.srv, &b->items[i]);
		b->busy = 0;
	}
	advance(im);
}

static void import_free(import_t *im)
{
	assert(!im->reading && im->storing == 0);
	if (im->fd >= 0)
		close(im->fd);
	free(im->window);
	ks_buf_close(&im->refusals);
	free(im->path);
	free(im);
}

static void import_reply(import_t *im)
{
	ks_conn_t *c = im->l.conn;
	ks_srv_t *srv = im->l.srv;

	if (ks_conn_live(c) && im->rc) {
		ks_later_error(&im->l, im->rc, im->err);
	} else if (ks_conn_live(c)) {
		ks_reply_begin(c, im->l.has_id, im->l.id);
		ks_buf_printf(&c->out, ",\"entries\":%" PRIu32 ",\"imported\":%"
		    PRIu64 ",\"present\":%" PRIu64 ",\"refused\":%" PRIu64
		    ",\"refusals\":[", im->file.count, im->n[IMP_STORED],
		    im->n[IMP_PRESENT], im->n[IMP_REFUSED]);
		ks_buf_append(&c->out, im->refusals.data, im->refusals.len);
		ks_buf_puts(&c->out, "]");
		ks_reply_finish(c);
	}
	srv->imports.running--;
	ks_conn_done(c);
	import_free(im);
}

/*
 * Loop: reads the next batch when the bound allows it, or answers once
 * nothing is left to read or store.  The one place an import ends: no
 * caller touches IM after it.
 */
static void advance(import_t *im)
{
	ks_srv_t *srv = im->l.srv;
	imp_batch_t *b;
	int more;

	if (im->reading)
		return;
	more = im->fd < 0 || im->file.next < im->file.count;
	if (more && im->rc == KS_OK && srv->stopping) {
		im->rc = KS_E_SHUTTING_DOWN;
		snprintf(im->err, sizeof im->err, "the daemon is stopping: the "
		    "import ended before entry %" PRIu32 " of %" PRIu32,
		    im->file.next, im->file.count);
	}
	more = more && im->rc == KS_OK && ks_conn_live(im->l.conn);
	/* Two batches held: the next read waits for the writer. */
	if (more && im->storing > 1 && !unpark(im))
		return;
	if (more) {
		b = &im->batch[im->batch[0].busy];
		assert(!b->busy);
		b->busy = 1;
		im->reading = b;
		if (uv_queue_work(srv->loop, &im->work, import_read,
		    import_read_done) == 0)
			return;
		b->busy = 0;
		im->reading = NULL;
		im->rc = KS_E_INTERNAL;
		snprintf(im->err, sizeof im->err, "cannot start a read of "
		    "the bundle");
	}
	unpark(im);
	if (im->storing == 0)
		import_reply(im);
}

void ks_op_import(ks_conn_t *c, const ks_request_t *req)
{
	ks_srv_t *srv = ks_srv_of(c);
	import_t *im;

	if (!ks_srv_admin_only(c, req, "import"))
		return;
	if (srv->nfleet == 0) {
		ks_srv_reject(c, req, KS_E_DENIED, "this "
		    "daemon has no --fleet-key: it trusts no signed entry");
		return;
	}
	im = calloc(1, sizeof *im);
	if (im)
		im->path = strdup(req->path);
	if (!im || !im->path) {
		free(im);
		ks_srv_reject(c, req, KS_E_NOMEM,
		    "out of memory");
		return;
	}
	ks_later_init(&im->l, c, req, NULL);
	im->fd = -1;
	im->work.data = im;
	im->batch[0].im = im->batch[1].im = im;
	ks_buf_init(&im->refusals);
	srv->imports.running++;
	ks_conn_wait(c);
	advance(im);
}
