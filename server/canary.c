/*
 * Known-answer canaries on the daemon's side (canary.h): when they run,
 * what waits for them, what a verdict does.
 *
 * An upgrade is a backend whose store entries name compiler identities of
 * which none is among the backend's identities now (every target's, from
 * the probe); a store without entries of the backend has nothing to
 * compare and is no upgrade.  The canary runs at the backend's "auto"
 * target, and its verdict holds for every target of the backend: they
 * are one compiler, with other -march or device options.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srv.h"

/* A get or warm item waiting for a canary. */
struct ks_canary_wait {
	ks_get_t g;
	int prio;
	ks_waiter_t *w;
	ks_canary_wait_t *next;
};

/* A canary request (ks_canary_request) waiting for its verdicts. */
struct ks_canary_op {
	uint32_t want[KS_KEYS_MAX_BACKENDS];   /* kernel bits not ended */
	int left;
	void (*done)(void *ctx);
	void *ctx;
	ks_canary_op_t *next;
};

static const char *const state_names[] = { "none", "pending", "running",
    "passed", "failed" };
static const char *const be_state_names[] = { "current", "upgrade",
    "skipped" };

static int backend_index(const ks_canaries_t *cs, const ks_backend_t *be)
{
	int i;

	for (i = 0; i < cs->nb; i++)
		if (cs->b[i].backend == be)
			return i;
	return -1;
}

/* ---- the start ---- */

typedef struct {
	const ks_keys_t *keys;
	const ks_backend_t *be;
	int found;               /* some store identity is a current one */
	int any;                 /* the store has entries of the backend */
} ident_scan_t;

static int on_identity(void *ctx, const char *identity)
{
	ident_scan_t *s = ctx;
	const ks_ident_t *id;

	s->any = 1;
	for (id = s->keys->idents; id; id = id->next)
		if (id->backend == s->be && strcmp(id->identity, identity) == 0)
			s->found = 1;
	return 0;
}

static int on_record(void *ctx, const ks_store_canary_t *r)
{
	ks_canary_backend_t *b = ctx;
	const ks_kernel_def_t *const *all;
	int i, n;

	all = ks_kernels(&n);
	for (i = 0; i < n && i < KS_KEYS_MAX_KERNELS; i++) {
		ks_canary_t *c = &b->kernels[i];

		if (strcmp(all[i]->name, r->kernel) != 0)
			continue;
		c->state = strcmp(r->result, "passed") == 0 ?
		    KS_CANARY_PASSED : KS_CANARY_FAILED;
		c->disabled = c->state == KS_CANARY_FAILED;
		c->ms = r->ms;
		c->at = r->at;
		snprintf(c->detail, sizeof c->detail, "%s", r->detail);
	}
	return 0;
}

static void set_pending(ks_canaries_t *cs, ks_canary_t *c)
{
	if (c->state == KS_CANARY_PENDING || c->state == KS_CANARY_RUNNING)
		return;
	c->state = KS_CANARY_PENDING;
	cs->npending++;
}

void ks_canary_start(ks_srv_t *srv)
{
	ks_canaries_t *cs = &srv->canaries;
	const ks_backend_t *const *all;
	int i, k, n;

	all = ks_backends(&n);
	ks_kernels(&cs->nk);
	cs->nb = n < KS_KEYS_MAX_BACKENDS ? n : KS_KEYS_MAX_BACKENDS;
	for (i = 0; i < cs->nb; i++) {
		ks_canary_backend_t *b = &cs->b[i];
		const ks_binfo_t *bi = ks_keys_backend(&srv->keys, all[i]);
		ident_scan_t scan = { &srv->keys, all[i], 0, 0 };

		b->backend = all[i];
		for (k = 0; k < cs->nk; k++) {
			b->kernels[k].srv = srv;
			b->kernels[k].bi = i;
			b->kernels[k].ki = k;
		}
		b->state = KS_CANARY_BE_SKIPPED;
		if (!bi || !bi->available) {
			snprintf(b->reason, sizeof b->reason, "not available "
			    "here: %s", bi && bi->reason ? bi->reason : "?");
			continue;
		}
		if (!all[i]->run || !bi->auto_id) {
			snprintf(b->reason, sizeof b->reason, "%s; its "
			    "artifacts are served without a canary",
			    all[i]->run ? "no device for auto to run canaries "
			    "on" : "this backend cannot run its artifacts in a "
			    "worker (no runner)");
			continue;
		}
		b->identity = bi->auto_id->identity;
		b->target = bi->auto_id->target;
		ks_store_identities(srv->store, all[i]->name, on_identity,
		    &scan);
		ks_store_canaries(srv->store, all[i]->name, b->identity,
		    on_record, b);
		for (k = 0; k < cs->nk; k++)
			cs->ndisabled += b->kernels[k].disabled;
		b->state = scan.any && !scan.found ? KS_CANARY_BE_UPGRADE :
		    KS_CANARY_BE_CURRENT;
		if (b->state != KS_CANARY_BE_UPGRADE)
			continue;
		b->start_ns = ks_now_ns();
		for (k = 0; k < cs->nk; k++)
			if (b->kernels[k].state == KS_CANARY_NONE) {
				set_pending(cs, &b->kernels[k]);
				b->start_left++;
			}
		ks_log(KS_LOG_INFO, "backend %s: the store's entries were "
		    "built by another compiler than '%s'; running %d "
		    "canaries before serving its kernels", all[i]->name,
		    b->identity, b->start_left);
	}
	ks_canary_dispatch(srv);
}

void ks_canary_forget(ks_srv_t *srv)
{
	memset(&srv->canaries, 0, sizeof srv->canaries);
}

/* ---- running ---- */

static void answer_waiter(ks_srv_t *srv, ks_canary_wait_t *cw, int rc,
    const char *msg)
{
	char err[512];

	err[0] = '\0';
	/* Its canary has passed: straight to its flight (a stopping daemon
	 * ends deferred waiters in ks_canary_stop). */
	if (rc == KS_OK && srv->stopping) {
		rc = KS_E_SHUTTING_DOWN;
		snprintf(err, sizeof err, "daemon is shutting down");
	} else if (rc == KS_OK) {
		rc = ks_flight_join(&srv->flights, &cw->g, cw->prio, cw->w,
		    err, sizeof err);
	} else
		snprintf(err, sizeof err, "%s", msg);
	if (rc != KS_OK) {
		ks_flight_t f;

		memset(&f, 0, sizeof f);
		f.err = rc;
		snprintf(f.errmsg, sizeof f.errmsg, "%s", err);
		cw->w->flight = NULL;
		cw->w->done(cw->w, &f);
	}
	free(cw);
}

/* The E_CANARY message of a disabled (backend, kernel). */
static void disabled_msg(const ks_canary_backend_t *b, const ks_canary_t *c,
    const char *kernel, char *err, size_t errlen)
{
	ks_set_err(err, errlen, "kernel %s is disabled on backend %s: its "
	    "canary failed under compiler '%s' (`kspec canary --kernel %s "
	    "--backend %s` tests it again): %s", kernel, b->backend->name,
	    b->identity ? b->identity : "?", kernel, b->backend->name,
	    c->detail);
}

static void verdict(ks_srv_t *srv, ks_canary_t *c, int rc, const char *msg)
{
	ks_canaries_t *cs = &srv->canaries;
	ks_canary_backend_t *b = &cs->b[c->bi];
	const ks_kernel_def_t *def = ks_kernels(NULL)[c->ki];
	ks_canary_wait_t *cw, *next;
	ks_canary_op_t **pp, *op;
	ks_store_canary_t rec;
	char err[512];
	int shutdown = rc == KS_E_SHUTTING_DOWN;

	cs->npending--;
	c->at = 0;
	if (shutdown) {
		c->state = KS_CANARY_NONE;
	} else {
		c->state = rc == KS_OK ? KS_CANARY_PASSED : KS_CANARY_FAILED;
		if (rc != KS_OK && rc != KS_E_CANARY)
			snprintf(c->detail, sizeof c->detail, "%s: %.400s",
			    ks_err_name(rc), msg);
		else
			snprintf(c->detail, sizeof c->detail, "%s", msg);
		cs->ndisabled += (rc != KS_OK) - c->disabled;
		c->disabled = rc != KS_OK;
		if (rc == KS_OK)
			b->passed++;
		else
			b->failed++;
		rec = (ks_store_canary_t){ b->backend->name, b->identity,
		    def->name, rc == KS_OK ? "passed" : "failed", 0, c->ms,
		    c->detail };
		ks_writer_canary(srv->writer, &rec);
		ks_log(rc == KS_OK ? KS_LOG_INFO : KS_LOG_ERROR, "canary of %s "
		    "on %s %s in %.0f ms: %s%s", def->name, b->backend->name,
		    rc == KS_OK ? "passed" : "FAILED", c->ms, c->detail,
		    rc == KS_OK ? "" : "; the kernel is disabled on it");
	}
	if (b->start_left > 0 && --b->start_left == 0) {
		b->start_ms = (double)(ks_now_ns() - b->start_ns) / 1e6;
		ks_log(KS_LOG_INFO, "backend %s: the canaries of the start "
		    "took %.0f ms", b->backend->name, b->start_ms);
	}
	if (c->disabled)
		disabled_msg(b, c, def->name, err, sizeof err);
	else
		snprintf(err, sizeof err, "%s", msg);
	for (cw = c->waiting, c->waiting = NULL; cw; cw = next) {
		next = cw->next;
		answer_waiter(srv, cw, shutdown ? rc : c->disabled ?
		    KS_E_CANARY : KS_OK, err);
	}
	for (pp = &cs->ops; (op = *pp);) {
		if (op->want[c->bi] & (1u << c->ki)) {
			op->want[c->bi] &= ~(1u << c->ki);
			op->left--;
		}
		if (op->left > 0) {
			pp = &op->next;
			continue;
		}
		*pp = op->next;
		op->done(op->ctx);
		free(op);
	}
}

static void job_done(ks_pool_job_t *pj)
{
	ks_canary_t *c = (ks_canary_t *)((char *)pj - offsetof(ks_canary_t,
	    pj));
	ks_srv_t *srv = c->srv;
	char msg[512];

	if (pj->err == KS_OK)
		snprintf(msg, sizeof msg, "%.*s", (int)pj->out.len,
		    (const char *)pj->out.bytes);
	else
		snprintf(msg, sizeof msg, "%s", pj->errmsg);
	c->ms = pj->err == KS_OK ? pj->out.compile_ms :
	    (double)(ks_now_ns() - pj->started_ns) / 1e6;
	ks_job_out_close(&pj->out);
	verdict(srv, c, srv->stopping ? KS_E_SHUTTING_DOWN : pj->err, msg);
	ks_flights_dispatch(&srv->flights);
}

/* The job of C: the kernel at every dim dynamic (the worker picks its
 * cases), what a get's job promises, and a deadline for all its runs. */
static int job_fill(ks_srv_t *srv, ks_canary_t *c)
{
	const ks_canary_backend_t *b = &srv->canaries.b[c->bi];
	const ks_kernel_def_t *def = ks_kernels(NULL)[c->ki];
	const ks_hash_t *fp = ks_keys_fingerprint(&srv->keys, def);
	ks_dim_t dims[KS_MAX_DIMS];
	ks_job_t *j = &c->pj.job;
	int i;

	memset(&c->pj, 0, sizeof c->pj);
	for (i = 0; i < def->ndims; i++)
		dims[i] = (ks_dim_t){ def->dims[i], 0, 0 };
	if (!fp || strlen(b->identity) >= sizeof j->identity ||
	    ks_kernel_validate(def, KS_DTYPE_F32, KS_MODE_EXACT, dims,
	    def->ndims, &j->spec, NULL, 0) != KS_OK)
		return KS_E_INTERNAL;
	j->backend = b->backend;
	snprintf(j->target, sizeof j->target, "%s", b->target);
	snprintf(j->format, sizeof j->format, "%s",
	    b->backend->default_format);
	strcpy(j->identity, b->identity);
	j->fingerprint = *fp;
	j->codegen = KS_CODEGEN_VERSION;
	j->canary = 1;
	c->pj.timeout_ms = srv->pool.opts.timeout_ms *
	    (uint64_t)(ks_canary_runs(def) > 0 ? ks_canary_runs(def) : 1);
	c->pj.done = job_done;
	return KS_OK;
}

void ks_canary_dispatch(ks_srv_t *srv)
{
	ks_canaries_t *cs = &srv->canaries;
	int i, k, rc;

	/* Under the saved probe's keys nothing runs: its identities are
	 * confirmed (or replaced) by this start's probe first. */
	if (srv->probe_state != KS_PROBE_DONE)
		return;
	for (i = 0; i < cs->nb && cs->npending > 0; i++)
		for (k = 0; k < cs->nk; k++) {
			ks_canary_t *c = &cs->b[i].kernels[k];

			if (c->state != KS_CANARY_PENDING)
				continue;
			if (srv->stopping || ks_pool_idle(&srv->pool) <= 0)
				return;
			rc = job_fill(srv, c);
			if (rc == KS_OK)
				rc = ks_pool_submit(&srv->pool, &c->pj);
			if (rc == KS_OK) {
				c->state = KS_CANARY_RUNNING;
				continue;
			}
			verdict(srv, c, rc, "the canary could not be started");
		}
}

void ks_canary_stop(ks_srv_t *srv)
{
	ks_canaries_t *cs = &srv->canaries;
	int i, k;

	for (i = 0; i < cs->nb; i++)
		for (k = 0; k < cs->nk; k++)
			if (cs->b[i].kernels[k].state == KS_CANARY_PENDING)
				verdict(srv, &cs->b[i].kernels[k],
				    KS_E_SHUTTING_DOWN, "daemon stopped before "
				    "the canary ran");
}

/* ---- the request path ---- */

int ks_canary_check(ks_srv_t *srv, const ks_get_t *g, char *err,
    size_t errlen)
{
	ks_canaries_t *cs = &srv->canaries;
	int bi = backend_index(cs, g->backend);
	const ks_canary_t *c;

	if (bi < 0 || g->kernel_index >= cs->nk)
		return KS_OK;
	c = &cs->b[bi].kernels[g->kernel_index];
	if (!c->disabled)
		return KS_OK;
	disabled_msg(&cs->b[bi], c, g->spec.def->name, err, errlen);
	return KS_E_CANARY;
}

int ks_canary_admits(ks_srv_t *srv, const char *backend, const char *kernel,
    char *err, size_t errlen)
{
	ks_canaries_t *cs = &srv->canaries;
	const ks_kernel_def_t *const *all;
	const ks_canary_t *c;
	int bi, ki, n;

	bi = backend_index(cs, ks_backend_find(backend));
	all = ks_kernels(&n);
	for (ki = 0; ki < n && ki < cs->nk; ki++)
		if (strcmp(all[ki]->name, kernel) == 0)
			break;
	if (bi < 0 || ki >= n || ki >= cs->nk)
		return KS_OK;
	c = &cs->b[bi].kernels[ki];
	if (c->disabled) {
		disabled_msg(&cs->b[bi], c, kernel, err, errlen);
		return KS_E_CANARY;
	}
	if (c->state == KS_CANARY_PENDING || c->state == KS_CANARY_RUNNING) {
		ks_set_err(err, errlen, "kernel %s has not passed its canary "
		    "on backend %s under compiler '%s' yet; import it again "
		    "once it has (`kspec canary --status`)", kernel, backend,
		    cs->b[bi].identity ? cs->b[bi].identity : "?");
		return KS_E_CANARY;
	}
	return KS_OK;
}

int ks_canary_defer(ks_srv_t *srv, const ks_get_t *g, int prio,
    ks_waiter_t *w)
{
	ks_canaries_t *cs = &srv->canaries;
	ks_canary_wait_t *cw;
	ks_canary_t *c;
	int bi;

	if (cs->npending == 0 || (bi = backend_index(cs, g->backend)) < 0 ||
	    g->kernel_index >= cs->nk)
		return 0;
	c = &cs->b[bi].kernels[g->kernel_index];
	if (c->state != KS_CANARY_PENDING && c->state != KS_CANARY_RUNNING)
		return 0;
	cw = calloc(1, sizeof *cw);
	if (!cw)
		return 0;        /* compiled without waiting: no worse */
	cw->g = *g;
	cw->prio = prio;
	cw->w = w;
	cw->next = c->waiting;
	c->waiting = cw;
	return 1;
}

int ks_canary_leave(ks_srv_t *srv, ks_waiter_t *w)
{
	ks_canaries_t *cs = &srv->canaries;
	ks_canary_wait_t **pp, *cw;
	int i, k;

	for (i = 0; cs->npending > 0 && i < cs->nb; i++)
		for (k = 0; k < cs->nk; k++)
			for (pp = &cs->b[i].kernels[k].waiting; (cw = *pp);
			    pp = &cw->next)
				if (cw->w == w) {
					*pp = cw->next;
					free(cw);
					return KS_OK;
				}
	return KS_E_NOT_FOUND;
}

/* ---- requests and reports ---- */

int ks_canary_request(ks_srv_t *srv, const char *backend,
    const char *kernel, void (*done)(void *ctx), void *ctx)
{
	ks_canaries_t *cs = &srv->canaries;
	const ks_kernel_def_t *const *defs = ks_kernels(NULL);
	ks_canary_op_t *op = calloc(1, sizeof *op);
	int i, k;

	if (!op)
		return 0;
	for (i = 0; i < cs->nb; i++) {
		ks_canary_backend_t *b = &cs->b[i];

		if (b->state == KS_CANARY_BE_SKIPPED || (backend[0] &&
		    strcmp(backend, b->backend->name) != 0))
			continue;
		for (k = 0; k < cs->nk; k++) {
			if (kernel[0] && strcmp(kernel, defs[k]->name) != 0)
				continue;
			set_pending(cs, &b->kernels[k]);
			op->want[i] |= 1u << k;
			op->left++;
		}
	}
	if (op->left == 0) {
		free(op);
		return 0;
	}
	op->done = done;
	op->ctx = ctx;
	op->next = cs->ops;
	cs->ops = op;
	k = op->left;
	ks_canary_dispatch(srv);
	return k;
}

void ks_canary_json(ks_srv_t *srv, ks_buf_t *out, const char *backend,
    const char *kernel)
{
	ks_canaries_t *cs = &srv->canaries;
	const ks_kernel_def_t *const *defs = ks_kernels(NULL);
	uint64_t passed = 0, failed = 0;
	int i, k, first = 1;

	for (i = 0; i < cs->nb; i++) {
		passed += cs->b[i].passed;
		failed += cs->b[i].failed;
	}
	ks_buf_printf(out, "{\"disabled\":%d,\"pending\":%d,\"passed\":%"
	    PRIu64 ",\"failed\":%" PRIu64 ",\"backends\":[", cs->ndisabled,
	    cs->npending, passed, failed);
	for (i = 0; i < cs->nb; i++) {
		const ks_canary_backend_t *b = &cs->b[i];
		int kfirst = 1;

		if (backend[0] && strcmp(backend, b->backend->name) != 0)
			continue;
		ks_buf_printf(out, "%s{\"backend\":\"%s\",\"state\":\"%s\"",
		    first ? "" : ",", b->backend->name,
		    be_state_names[b->state]);
		first = 0;
		if (b->state == KS_CANARY_BE_SKIPPED) {
			ks_buf_puts(out, ",\"reason\":");
			ks_buf_json_str(out, b->reason);
			ks_buf_puts(out, "}");
			continue;
		}
		ks_buf_puts(out, ",\"identity\":");
		ks_buf_json_str(out, b->identity);
		if (b->start_ns)
			ks_buf_printf(out, ",\"start_ms\":%.3f", b->start_ms);
		ks_buf_puts(out, ",\"kernels\":[");
		for (k = 0; k < cs->nk; k++) {
			const ks_canary_t *c = &b->kernels[k];

			if (c->state == KS_CANARY_NONE || (kernel[0] &&
			    strcmp(kernel, defs[k]->name) != 0))
				continue;
			ks_buf_printf(out, "%s{\"kernel\":\"%s\",\"state\":"
			    "\"%s\",\"disabled\":%s,\"ms\":%.3f,\"detail\":",
			    kfirst ? "" : ",", defs[k]->name,
			    state_names[c->state], c->disabled ? "true" :
			    "false", c->ms);
			ks_buf_json_str(out, c->detail);
			ks_buf_puts(out, "}");
			kfirst = 0;
		}
		ks_buf_puts(out, "]}");
	}
	ks_buf_puts(out, "]}");
}

void ks_canary_metrics(ks_srv_t *srv, ks_buf_t *out)
{
	ks_canaries_t *cs = &srv->canaries;
	char labels[96];
	int i;

	ks_prom_head(out, "kspec_canaries_total", "counter",
	    "Known-answer canaries that ended, by backend and result.");
	for (i = 0; i < cs->nb; i++) {
		if (cs->b[i].state == KS_CANARY_BE_SKIPPED)
			continue;
		snprintf(labels, sizeof labels, "backend=\"%s\",result="
		    "\"passed\"", cs->b[i].backend->name);
		ks_prom_u64(out, "kspec_canaries_total", labels,
		    cs->b[i].passed);
		snprintf(labels, sizeof labels, "backend=\"%s\",result="
		    "\"failed\"", cs->b[i].backend->name);
		ks_prom_u64(out, "kspec_canaries_total", labels,
		    cs->b[i].failed);
	}
	ks_prom_head(out, "kspec_kernels_disabled", "gauge",
	    "Kernels disabled on a backend by a failed canary.");
	ks_prom_u64(out, "kspec_kernels_disabled", "",
	    (uint64_t)cs->ndisabled);
	ks_prom_head(out, "kspec_canaries_pending", "gauge",
	    "Canaries waiting for a worker or running.");
	ks_prom_u64(out, "kspec_canaries_pending", "",
	    (uint64_t)cs->npending);
}
