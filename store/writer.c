/*
 * The writer thread (store.h): a FIFO of operations under one mutex,
 * taken by posters only to link an operation in and by the thread only to
 * unlink one, never while sqlite works.
 *
 * States of the writer:
 *   RUNNING   the thread takes the operations one at a time, in the order
 *             posted, and sleeps while the FIFO is empty; a post appends;
 *   STOPPING  ks_writer_stop has posted the stop: the thread runs what was
 *             posted before it, takes the stop last (nothing may be posted
 *             after it: it would never run) and ends; the caller joins it
 *             and frees the writer.
 * At most one flush is queued: flush_queued is set from the post of a
 * flush until that flush starts to run.  Each transition asserts the
 * FIFO's shape (queue_ok) under the lock.
 */
#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store.h"

enum { OP_PUT, OP_ADD, OP_FLUSH, OP_MISS, OP_QUARANTINE, OP_REMOVE,
    OP_BARRIER, OP_REOPEN, OP_SYNC, OP_DEPLOY, OP_AUDIT, OP_CANARY, OP_PROBE,
    OP_STOP };

typedef struct op {
	int type;
	struct op *next;
	ks_artifact_t *art;              /* PUT, ADD */
	int *result;                     /* ADD */
	ks_hash_t key;                   /* QUARANTINE */
	char *spec;                      /* MISS */
	uint64_t count;                  /* MISS */
	ks_hash_t *keys;                 /* REMOVE */
	size_t nkeys;
	int (*match)(void *ctx, const char *meta);
	void *mctx;
	ks_writer_removed_fn done;
	void (*reached)(void *ctx);      /* BARRIER */
	void (*reopened)(void *ctx, int rc, const char *err);  /* REOPEN */
	char err[512];
	void *ctx;
	int *synced;                     /* SYNC */
	char *name;                      /* DEPLOY: NULL specs removes it;
	                                    MISS: the deployment, or NULL */
	void (*deployed)(void *ctx, int rc);   /* and AUDIT's done */
	ks_store_audit_event_t audit;    /* AUDIT: its strings are name
	                                    (auditor) and spec (differs) */
	ks_store_canary_t canary;        /* CANARY: strings in spec */
	ks_store_probe_t probe;          /* PROBE */
} op_t;

struct ks_store_writer {
	ks_store_t *store;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;             /* an operation was posted */
	pthread_cond_t ran;              /* a SYNC operation ran */
	op_t *head, *tail;
	int stopping;                    /* the stop is posted (STOPPING) */
	int flush_queued;
	uint64_t backlog;
	uint64_t failed_puts;
#ifdef KS_TEST_PLANT
	unsigned slow_ms;                /* KSPEC_TEST_PLANT_SLOW_WRITER: each
	                                    put and add waits this long */
#endif
};

/* Whether the FIFO has its shape: empty at both ends or at neither, and
 * nothing after its tail.  Under w->lock. */
static int queue_ok(const ks_store_writer_t *w)
{
	return !w->head == !w->tail && (!w->tail || !w->tail->next);
}

static void run(ks_store_writer_t *w, op_t *op)
{
	ks_hash_t *removed = NULL;
	size_t n = 0;
	int rc, added;

#ifdef KS_TEST_PLANT
	if (w->slow_ms && (op->type == OP_PUT || op->type == OP_ADD))
		usleep(w->slow_ms * 1000u);
#endif
	switch (op->type) {
	case OP_PUT:
		if (ks_store_put(w->store, op->art) != KS_OK) {
			ks_log(KS_LOG_WARN, "store: could not persist an "
			    "artifact; it is served from memory only");
			__atomic_add_fetch(&w->failed_puts, 1, __ATOMIC_RELAXED);
		}
		ks_artifact_unref(op->art);
		break;
	case OP_ADD:
		rc = ks_store_add(w->store, op->art, &added);
		*op->result = rc == KS_OK ? added : rc;
		ks_artifact_unref(op->art);
		break;
	case OP_FLUSH:
		pthread_mutex_lock(&w->lock);
		assert(w->flush_queued);
		w->flush_queued = 0;
		pthread_mutex_unlock(&w->lock);
		ks_store_flush(w->store);
		break;
	case OP_MISS:
		if (ks_store_record_miss(w->store, op->name, op->spec,
		    op->count) != KS_OK)
			ks_log(KS_LOG_WARN, "store: could not record a miss");
		free(op->name);
		free(op->spec);
		break;
	case OP_QUARANTINE:
		ks_store_quarantine(w->store, &op->key);
		break;
	case OP_REMOVE:
		rc = ks_store_remove_if(w->store, op->keys, op->nkeys,
		    op->match, op->mctx, &removed, &n);
		op->done(op->ctx, rc, removed, n);
		free(removed);
		free(op->keys);
		break;
	case OP_BARRIER:
		op->reached(op->ctx);
		break;
	case OP_DEPLOY:
		rc = op->spec ? ks_store_deploy_set(w->store, op->name, op->spec,
		    op->keys, op->nkeys) : ks_store_deploy_remove(w->store,
		    op->name);
		op->deployed(op->ctx, rc);
		free(op->name);
		free(op->spec);
		free(op->keys);
		break;
	case OP_AUDIT:
		op->audit.auditor = op->name;
		op->audit.differs = op->spec;
		rc = ks_store_audit_record(w->store, &op->audit);
		if (op->deployed)
			op->deployed(op->ctx, rc);
		free(op->name);
		free(op->spec);
		break;
	case OP_CANARY:
		if (ks_store_canary_put(w->store, &op->canary) != KS_OK)
			ks_log(KS_LOG_WARN, "store: could not record the "
			    "canary of %s on %s", op->canary.kernel,
			    op->canary.backend);
		free(op->spec);
		break;
	case OP_PROBE:
		/* One that cannot be saved must not leave an older one: it
		 * is removed, and the next start waits for its own probe. */
		if (ks_store_probe_put(w->store, op->probe.probe ? &op->probe :
		    NULL) != KS_OK && (!op->probe.probe ||
		    ks_store_probe_put(w->store, NULL) != KS_OK))
			ks_log(KS_LOG_WARN, "store: could not save or remove "
			    "the saved probe of the compilers");
		ks_store_probe_free(&op->probe);
		break;
	case OP_REOPEN:
		op->reopened(op->ctx, ks_store_reopen(w->store, op->err,
		    sizeof op->err), op->err);
		break;
	case OP_SYNC:
		pthread_mutex_lock(&w->lock);
		*op->synced = 1;
		pthread_cond_broadcast(&w->ran);
		pthread_mutex_unlock(&w->lock);
		break;
	}
}

static void *writer_main(void *p)
{
	ks_store_writer_t *w = p;
	op_t *op;
	int stop = 0;

	while (!stop) {
		pthread_mutex_lock(&w->lock);
		while (!w->head)
			pthread_cond_wait(&w->wake, &w->lock);
		op = w->head;
		w->head = op->next;
		if (!w->head)
			w->tail = NULL;
		/* The stop is the last operation of all. */
		assert(queue_ok(w) && (op->type != OP_STOP || (w->stopping &&
		    !w->head)));
		pthread_mutex_unlock(&w->lock);
		stop = op->type == OP_STOP;
		if (!stop)
			run(w, op);
		free(op);
		__atomic_sub_fetch(&w->backlog, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void post(ks_store_writer_t *w, op_t *op)
{
	op->next = NULL;
	__atomic_add_fetch(&w->backlog, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&w->lock);
	/* Nothing is posted once STOPPING: it would never run. */
	assert(queue_ok(w) && !w->stopping);
	w->stopping = op->type == OP_STOP;
	if (w->tail)
		w->tail->next = op;
	else
		w->head = op;
	w->tail = op;
	pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->lock);
}

static op_t *op_new(int type)
{
	op_t *op = calloc(1, sizeof *op);

	if (op)
		op->type = type;
	return op;
}

ks_store_writer_t *ks_writer_start(ks_store_t *s)
{
	ks_store_writer_t *w = calloc(1, sizeof *w);

	if (!w)
		return NULL;
	w->store = s;
#ifdef KS_TEST_PLANT
	/* The test build's slow store (tests/kspecd-plant only). */
	if (getenv("KSPEC_TEST_PLANT_SLOW_WRITER"))
		w->slow_ms = (unsigned)atoi(
		    getenv("KSPEC_TEST_PLANT_SLOW_WRITER"));
#endif
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->wake, NULL);
	pthread_cond_init(&w->ran, NULL);
	if (pthread_create(&w->thread, NULL, writer_main, w) != 0) {
		pthread_mutex_destroy(&w->lock);
		pthread_cond_destroy(&w->wake);
		pthread_cond_destroy(&w->ran);
		free(w);
		return NULL;
	}
	return w;
}

void ks_writer_stop(ks_store_writer_t *w)
{
	op_t *op;

	if (!w)
		return;
	/* The stop operation cannot be allocated: wait for the queue to
	 * drain and retry (at shutdown, nothing else is posted). */
	while (!(op = op_new(OP_STOP)))
		ks_writer_sync(w);
	post(w, op);
	pthread_join(w->thread, NULL);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->wake);
	pthread_cond_destroy(&w->ran);
	free(w);
}

void ks_writer_sync(ks_store_writer_t *w)
{
	op_t *op = op_new(OP_SYNC);
	int synced = 0;

	if (!op)
		return;
	op->synced = &synced;
	post(w, op);
	pthread_mutex_lock(&w->lock);
	while (!synced)
		pthread_cond_wait(&w->ran, &w->lock);
	pthread_mutex_unlock(&w->lock);
}

/* A put or an add of A, which it references until written. */
static int post_artifact(ks_store_writer_t *w, int type, ks_artifact_t *a,
    int *result)
{
	op_t *op = op_new(type);

	if (!op)
		return KS_E_NOMEM;
	ks_artifact_ref(a);
	op->art = a;
	op->result = result;
	post(w, op);
	return KS_OK;
}

int ks_writer_put(ks_store_writer_t *w, ks_artifact_t *a)
{
	return post_artifact(w, OP_PUT, a, NULL);
}

int ks_writer_add(ks_store_writer_t *w, ks_artifact_t *a, int *result)
{
	return post_artifact(w, OP_ADD, a, result);
}

int ks_writer_flush(ks_store_writer_t *w)
{
	op_t *op;
	int queued;

	pthread_mutex_lock(&w->lock);
	queued = w->flush_queued;
	w->flush_queued = 1;
	pthread_mutex_unlock(&w->lock);
	if (queued)
		return KS_OK;
	op = op_new(OP_FLUSH);
	if (!op) {
		pthread_mutex_lock(&w->lock);
		w->flush_queued = 0;
		pthread_mutex_unlock(&w->lock);
		return KS_E_NOMEM;
	}
	post(w, op);
	return KS_OK;
}

int ks_writer_record_miss(ks_store_writer_t *w, const char *deployment,
    const char *spec, uint64_t count)
{
	op_t *op = op_new(OP_MISS);

	if (!op || !(op->spec = strdup(spec)) ||
	    (deployment && !(op->name = strdup(deployment)))) {
		if (op)
			free(op->spec);
		free(op);
		return KS_E_NOMEM;
	}
	op->count = count;
	post(w, op);
	return KS_OK;
}

int ks_writer_canary(ks_store_writer_t *w, const ks_store_canary_t *c)
{
	const char *f[5] = { c->backend, c->identity, c->kernel, c->result,
	    c->detail };
	op_t *op = op_new(OP_CANARY);
	size_t len = 0, at = 0, n;
	const char **dst[5];
	int i;

	if (!op)
		return KS_E_NOMEM;
	dst[0] = &op->canary.backend;
	dst[1] = &op->canary.identity;
	dst[2] = &op->canary.kernel;
	dst[3] = &op->canary.result;
	dst[4] = &op->canary.detail;
	for (i = 0; i < 5; i++)
		len += strlen(f[i]) + 1;
	if (!(op->spec = malloc(len))) {
		free(op);
		return KS_E_NOMEM;
	}
	for (i = 0; i < 5; i++) {
		n = strlen(f[i]) + 1;
		memcpy(op->spec + at, f[i], n);
		*dst[i] = op->spec + at;
		at += n;
	}
	op->canary.at = c->at;
	op->canary.ms = c->ms;
	post(w, op);
	return KS_OK;
}

int ks_writer_probe(ks_store_writer_t *w, const ks_store_probe_t *p)
{
	op_t *op = op_new(OP_PROBE);

	if (!op)
		return KS_E_NOMEM;
	if (!p) {
		post(w, op);
		return KS_OK;
	}
	op->probe.probe = strdup(p->probe);
	op->probe.witness = strdup(p->witness);
	op->probe.fingerprints = strdup(p->fingerprints);
	if (!op->probe.probe || !op->probe.witness ||
	    !op->probe.fingerprints) {
		ks_store_probe_free(&op->probe);
		free(op);
		return KS_E_NOMEM;
	}
	post(w, op);
	return KS_OK;
}

int ks_writer_quarantine(ks_store_writer_t *w, const ks_hash_t *key)
{
	op_t *op = op_new(OP_QUARANTINE);

	if (!op)
		return KS_E_NOMEM;
	op->key = *key;
	post(w, op);
	return KS_OK;
}

int ks_writer_remove(ks_store_writer_t *w, const ks_hash_t *keys,
    size_t nkeys, int (*match)(void *ctx, const char *meta), void *mctx,
    ks_writer_removed_fn done, void *ctx)
{
	op_t *op = op_new(OP_REMOVE);

	if (!op)
		return KS_E_NOMEM;
	if (nkeys) {
		op->keys = malloc(nkeys * sizeof *keys);
		if (!op->keys) {
			free(op);
			return KS_E_NOMEM;
		}
		memcpy(op->keys, keys, nkeys * sizeof *keys);
	}
	op->nkeys = nkeys;
	op->match = match;
	op->mctx = mctx;
	op->done = done;
	op->ctx = ctx;
	post(w, op);
	return KS_OK;
}

int ks_writer_deploy(ks_store_writer_t *w, const char *name,
    const char *specs, const ks_hash_t *keys, size_t nkeys,
    void (*done)(void *ctx, int rc), void *ctx)
{
	op_t *op = op_new(OP_DEPLOY);

	if (!op)
		return KS_E_NOMEM;
	op->name = strdup(name);
	op->spec = specs ? strdup(specs) : NULL;
	op->keys = nkeys ? malloc(nkeys * sizeof *keys) : NULL;
	if (!op->name || (specs && !op->spec) || (nkeys && !op->keys)) {
		free(op->name);
		free(op->spec);
		free(op->keys);
		free(op);
		return KS_E_NOMEM;
	}
	if (nkeys)
		memcpy(op->keys, keys, nkeys * sizeof *keys);
	op->nkeys = nkeys;
	op->deployed = done;
	op->ctx = ctx;
	post(w, op);
	return KS_OK;
}

int ks_writer_audit(ks_store_writer_t *w, const ks_store_audit_event_t *ev,
    void (*done)(void *ctx, int rc), void *ctx)
{
	op_t *op = op_new(OP_AUDIT);

	if (!op)
		return KS_E_NOMEM;
	op->audit = *ev;
	op->name = strdup(ev->auditor ? ev->auditor : "");
	op->spec = ev->differs ? strdup(ev->differs) : NULL;
	if (!op->name || (ev->differs && !op->spec)) {
		free(op->name);
		free(op->spec);
		free(op);
		return KS_E_NOMEM;
	}
	op->deployed = done;
	op->ctx = ctx;
	post(w, op);
	return KS_OK;
}

int ks_writer_barrier(ks_store_writer_t *w, void (*reached)(void *ctx),
    void *ctx)
{
	op_t *op = op_new(OP_BARRIER);

	if (!op)
		return KS_E_NOMEM;
	op->reached = reached;
	op->ctx = ctx;
	post(w, op);
	return KS_OK;
}

int ks_writer_reopen(ks_store_writer_t *w, void (*done)(void *ctx, int rc,
    const char *err), void *ctx)
{
	op_t *op = op_new(OP_REOPEN);

	if (!op)
		return KS_E_NOMEM;
	op->reopened = done;
	op->ctx = ctx;
	post(w, op);
	return KS_OK;
}

uint64_t ks_writer_backlog(ks_store_writer_t *w)
{
	return __atomic_load_n(&w->backlog, __ATOMIC_RELAXED);
}

uint64_t ks_writer_failed_puts(ks_store_writer_t *w)
{
	return __atomic_load_n(&w->failed_puts, __ATOMIC_RELAXED);
}
