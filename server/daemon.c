/*
 * kspecd's lifecycle: start-up, signals and shutdown.
 *
 * Threads.  The loop thread (libuv) owns connections, flights, the hot
 * tier, counters and the store's reader connection.  The store writer
 * thread owns the writer connection (store.h); the loop posts to it and
 * never waits for it.  Compiles run in the executor (pool.c).  One more
 * thread waits for signals.
 *
 * Signals.  SIGINT and SIGTERM are blocked in every thread (the mask is set
 * before any thread starts and inherited) and taken by one thread in
 * sigwait(), which wakes the loop through a uv_async_t.  Handlers would not
 * do: libgccjit runs GCC's driver inside the process, and the driver
 * installs its own SIGINT/SIGTERM handlers that kill the process, replacing
 * any handler of ours, the moment the first compile links.
 *
 * Start.  The socket is bound and accepting before the compile workers
 * have probed the compilers (exec.h), which takes seconds; the keys need
 * the probe.  The store keeps the last probe with its witness (what the
 * probe's answer depends on that can be looked at in milliseconds: the
 * files the probing worker had mapped, the loader's cache, the OpenCL
 * vendor files, the environment the compilers read, the CPU, the GPU
 * driver).  When the witness is unchanged, the keys are the saved
 * probe's until this start's probe is in, and gets that hit the memory
 * tier or the store are answered at once; a changed witness leaves the
 * keys empty.  Every request that needs this start's probe (a miss, a
 * warm, a deploy, ...) is parked and dispatched again when it is in; one
 * that differs from the saved probe replaces its keys before anything
 * else is answered.
 *
 * Shutdown (SIGINT/SIGTERM): the listener closes and the socket file is
 * removed, connections stop reading, queued compiles are cancelled and
 * their waiters told E_SHUTTING_DOWN, running compiles finish and are
 * answered; then every connection drains (its queued replies are written,
 * within a deadline) and closes, the loop ends, the writer finishes what
 * was posted to it, and the store is flushed and closed.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <sodium.h>

#include "../exec/exec.h"
#include "dispatch.h"
#include "lookup.h"
#include "observe.h"
#include "ops.h"
#include "sock.h"
#include "systemd.h"

#define FLUSH_INTERVAL_MS 1000
#define DRAIN_DEADLINE_MS 5000
/* The first compile worker must have reported its compilers by then. */
#define START_DEADLINE_MS 60000
/* How often the store's path is compared with the file open. */
#define STORE_CHECK_MS 2000

static void on_flush(uv_timer_t *t)
{
	ks_srv_t *srv = t->data;

	ks_lookup_record_uses(srv);
	ks_writer_flush(srv->writer);
	ks_observe_sample(srv);
}

static void on_drain_deadline(uv_timer_t *t)
{
	ks_srv_t *srv = t->data;

	ks_conns_close_all(&srv->conns);
}

/* Once no compile is left at shutdown: every connection drains (its
 * queued replies go out) within a deadline, then the loop ends. */
static void maybe_finish(ks_srv_t *srv)
{
	if (!srv->stopping || ks_flights_count(&srv->flights))
		return;
	ks_pool_stop(&srv->pool);
	ks_conns_drain_all(&srv->conns);
	if (!uv_is_closing((uv_handle_t *)&srv->start_timer))
		uv_close((uv_handle_t *)&srv->start_timer, NULL);
	if (!uv_is_closing((uv_handle_t *)&srv->flush_timer))
		uv_close((uv_handle_t *)&srv->flush_timer, NULL);
	if (!uv_is_closing((uv_handle_t *)&srv->store_timer))
		uv_close((uv_handle_t *)&srv->store_timer, NULL);
	if (!uv_is_closing((uv_handle_t *)&srv->watchdog_timer))
		uv_close((uv_handle_t *)&srv->watchdog_timer, NULL);
	if (!uv_is_closing((uv_handle_t *)&srv->stop_async))
		uv_close((uv_handle_t *)&srv->stop_async, NULL);
	/* Publishes still on their way are dropped: fire and forget. */
	if (srv->remote)
		ks_remote_close(srv->remote);
	if (srv->conns.head &&
	    !uv_is_active((uv_handle_t *)&srv->drain_timer)) {
		uv_timer_start(&srv->drain_timer, on_drain_deadline,
		    DRAIN_DEADLINE_MS, 0);
		uv_unref((uv_handle_t *)&srv->drain_timer);
	}
}

static void on_flights_idle(ks_flights_t *set)
{
	maybe_finish(set->owner);
}

static void on_flights_first(ks_flights_t *set)
{
	ks_canary_dispatch(set->owner);
}

static void on_pool_idle(ks_pool_t *p)
{
	ks_srv_t *srv = p->owner;

	ks_flights_dispatch(&srv->flights);
	ks_audit_dispatch(srv);
}

/* ---- the probe ---- */

/* The witness of PATHS (a JSON array of strings) as the store keeps it:
 * {"paths":PATHS,"digest":"<hex>"}, malloc'd; NULL when PATHS is not
 * such an array. */
static char *witness_of(const char *paths)
{
	const char *list[1024];
	char hex[KS_HASH_HEX];
	cJSON *a = cJSON_Parse(paths), *p;
	ks_buf_t out;
	ks_hash_t d;
	int n = 0;

	if (!cJSON_IsArray(a)) {
		cJSON_Delete(a);
		return NULL;
	}
	cJSON_ArrayForEach(p, a) {
		if (!cJSON_IsString(p) || n == (int)(sizeof list /
		    sizeof list[0])) {
			cJSON_Delete(a);
			return NULL;
		}
		list[n++] = p->valuestring;
	}
	if (ks_exec_witness_digest(list, n, &d) != KS_OK) {
		cJSON_Delete(a);
		return NULL;
	}
	cJSON_Delete(a);
	ks_hash_hex(&d, hex);
	ks_buf_init(&out);
	ks_buf_printf(&out, "{\"paths\":%s,\"digest\":\"%s\"}", paths, hex);
	return ks_buf_steal(&out, NULL);
}

/* The fingerprints of a saved probe (a JSON array of hex) into OUT: KS_OK
 * when there is one for each kernel of this library. */
static int parse_fingerprints(const char *json, ks_hash_t *out, int n)
{
	cJSON *a = cJSON_Parse(json), *f;
	int i = 0, rc = KS_OK;

	if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
		rc = KS_E_PROTO;
	cJSON_ArrayForEach(f, a)
		if (rc == KS_OK && (!cJSON_IsString(f) ||
		    ks_hash_from_hex(f->valuestring, &out[i++]) != KS_OK))
			rc = KS_E_PROTO;
	cJSON_Delete(a);
	return rc;
}

/*
 * The store's saved probe, when its witness is what it was: the keys are
 * loaded from it (its compilers and its kernels' fingerprints), so hits
 * are answered before this start's probe is in.  Anything witnessed that
 * changed (a compiler's file or the daemon's own, the environment the
 * compilers read, the CPU, the GPU driver) leaves the keys empty, and
 * every request that needs them waits for the probe.
 */
static void load_saved_probe(ks_srv_t *srv)
{
	ks_hash_t fps[KS_KEYS_MAX_KERNELS];
	char *now = NULL, *paths = NULL, err[512];
	ks_store_probe_t *sp = &srv->saved;
	cJSON *w;

	srv->saved_probe_use = "absent";
	if (ks_store_probe_get(srv->store, sp) != KS_OK)
		return;
	w = cJSON_Parse(sp->witness);
	if (cJSON_IsObject(w) && cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(
	    w, "paths")))
		paths = cJSON_PrintUnformatted(
		    cJSON_GetObjectItemCaseSensitive(w, "paths"));
	cJSON_Delete(w);
	if (paths)
		now = witness_of(paths);
	free(paths);
	srv->saved_probe_use = "stale";
	err[0] = '\0';
	if (!now || strcmp(now, sp->witness) != 0)
		ks_log(KS_LOG_INFO, "the compilers changed since the saved "
		    "probe (its witness differs): requests wait for this "
		    "start's probe");
	else if (parse_fingerprints(sp->fingerprints, fps,
	    srv->keys.nkernels) != KS_OK ||
	    ks_keys_load_probe(&srv->keys, sp->probe, err,
	    sizeof err) != KS_OK) {
		ks_keys_forget_probe(&srv->keys);
		ks_log(KS_LOG_INFO, "the saved probe is not usable (%s): "
		    "requests wait for this start's probe", err[0] ? err :
		    "its fingerprints");
	} else {
		ks_keys_set_fingerprints(&srv->keys, fps);
		srv->probe_state = KS_PROBE_SAVED;
		srv->saved_probe_use = "used";
		ks_canary_start(srv);
	}
	free(now);
}

static void notify_ready(ks_srv_t *srv, const char *how)
{
	if (srv->notified_ready)
		return;
	srv->notified_ready = 1;
	ks_log(KS_LOG_INFO, "serving: %s", how);
	ks_sd_notify("READY=1\nSTATUS=serving");
}

static void start_failed(ks_srv_t *srv, const char *err)
{
	ks_log(KS_LOG_ERROR, "cannot start: %s", err);
	srv->exit_status = KS_E_INTERNAL;
	__atomic_store_n(&srv->stop_signal, 0, __ATOMIC_RELEASE);
	uv_async_send(&srv->stop_async);
}

/* The paths and the digest of a witness as the worker sent it (a JSON
 * object): *PATHS malloc'd (an array), HEX the digest; KS_OK or
 * KS_E_PROTO. */
static int witness_parts(const char *witness, char **paths,
    char hex[KS_HASH_HEX])
{
	cJSON *w = cJSON_Parse(witness);
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(w, "paths");
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(w, "digest");
	int rc = KS_E_PROTO;

	*paths = NULL;
	if (cJSON_IsArray(p) && cJSON_IsString(d) &&
	    strlen(d->valuestring) == KS_HASH_HEX - 1 &&
	    (*paths = cJSON_PrintUnformatted(p))) {
		memcpy(hex, d->valuestring, KS_HASH_HEX);
		rc = KS_OK;
	}
	cJSON_Delete(w);
	return rc;
}

/* What the store keeps for the next start, when it differs from what it
 * has.  The witness is the one the worker took right after its probe; it
 * is kept only if what it looks at is still what it was now (else a file
 * changed since the probe loaded it, and the saved probe is dropped: the
 * next start waits for its own). */
static void save_probe(ks_srv_t *srv)
{
	char hex[KS_HASH_HEX], tail[KS_HASH_HEX + 16], *paths = NULL;
	ks_store_probe_t p = { srv->probe_json, NULL, NULL };
	char *now = NULL;
	ks_buf_t fps;
	size_t n;
	int i;

	if (srv->probe_witness &&
	    witness_parts(srv->probe_witness, &paths, hex) == KS_OK &&
	    (now = witness_of(paths)) != NULL) {
		/* witness_of ends with the digest it took now. */
		snprintf(tail, sizeof tail, "\"digest\":\"%s\"}", hex);
		n = strlen(now);
		if (n >= strlen(tail) && strcmp(now + n - strlen(tail),
		    tail) == 0)
			p.witness = now;
	}
	free(paths);
	if (!p.witness) {
		free(now);
		if (srv->saved.probe) {
			ks_log(KS_LOG_INFO, "the compilers' probe is not saved "
			    "(its witness is not sound); the next start waits "
			    "for its own");
			ks_writer_probe(srv->writer, NULL);
		}
		return;
	}
	ks_buf_init(&fps);
	ks_buf_puts(&fps, "[");
	for (i = 0; i < srv->keys.nkernels; i++) {
		ks_hash_hex(&srv->keys.fingerprints[i], hex);
		ks_buf_printf(&fps, "%s\"%s\"", i ? "," : "", hex);
	}
	ks_buf_puts(&fps, "]");
	p.fingerprints = fps.data;
	if (p.fingerprints && (!srv->saved.probe ||
	    strcmp(srv->saved.probe, p.probe) != 0 ||
	    strcmp(srv->saved.witness, p.witness) != 0 ||
	    strcmp(srv->saved.fingerprints, p.fingerprints) != 0))
		ks_writer_probe(srv->writer, &p);
	free(p.witness);
	ks_buf_close(&fps);
}

/* This start's probe and fingerprints are both in: the keys are theirs
 * from now on, and what waited for them is dispatched. */
static void probe_done(ks_srv_t *srv)
{
	char err[512];
	int rc = KS_OK;

	if (srv->probe_state == KS_PROBE_DONE || srv->stopping ||
	    !srv->probe_json || !srv->fp_ready)
		return;
	if (srv->fp_rc != KS_OK) {
		start_failed(srv, "the kernels' fingerprints could not be "
		    "computed");
		return;
	}
	err[0] = '\0';
	if (srv->probe_state == KS_PROBE_SAVED &&
	    strcmp(srv->saved.probe, srv->probe_json) == 0 &&
	    memcmp(srv->keys.fingerprints, srv->fp_computed,
	    (size_t)srv->keys.nkernels * sizeof (ks_hash_t)) == 0) {
		/* The usual restart: the keys stay. */
	} else {
		if (srv->probe_state == KS_PROBE_SAVED) {
			/* Only hits were answered under the saved keys;
			 * nothing ran or waits on them. */
			ks_log(KS_LOG_WARN, "this start's probe differs from "
			    "the saved one although nothing it witnesses "
			    "changed; its keys replace the saved probe's");
			srv->saved_probe_use = "replaced";
			ks_keys_forget_probe(&srv->keys);
			ks_canary_forget(srv);
			ks_buf_close(&srv->hello_body);
			ks_buf_init(&srv->hello_body);
		}
		ks_keys_set_fingerprints(&srv->keys, srv->fp_computed);
		rc = ks_keys_load_probe(&srv->keys, srv->probe_json, err,
		    sizeof err);
		if (rc != KS_OK) {
			/* Nothing is keyed while the daemon stops. */
			ks_keys_forget_probe(&srv->keys);
			srv->probe_state = KS_PROBE_NONE;
			start_failed(srv, err);
			return;
		}
		ks_canary_start(srv);
	}
	srv->probe_state = KS_PROBE_DONE;
	srv->probe_ms = (double)(ks_now_ns() - srv->started_ns) / 1e6;
	save_probe(srv);
	ks_store_probe_free(&srv->saved);
	ks_log(KS_LOG_INFO, "compilers probed in %.0f ms%s", srv->probe_ms,
	    srv->parked ? "; answering what waited for them" : "");
	ks_canary_dispatch(srv);
	/* Deployments pin the keys of today's compilers. */
	ks_deploy_repin(srv);
	ks_audit_start(srv);
	notify_ready(srv, "compilers probed");
	ks_dispatch_unpark(srv, 0);
}

/* This start's probe, from the first worker. */
static void on_probe(ks_pool_t *p, int rc, const char *json,
    const char *witness)
{
	ks_srv_t *srv = p->owner;

	if (srv->probe_state == KS_PROBE_DONE || srv->probe_json ||
	    srv->stopping)
		return;
	if (rc != KS_OK) {
		start_failed(srv, "the compile workers did not report their "
		    "compilers");
		return;
	}
	srv->probe_json = strdup(json);
	srv->probe_witness = witness ? strdup(witness) : NULL;
	if (!srv->probe_json) {
		start_failed(srv, "out of memory");
		return;
	}
	probe_done(srv);
}

static void fp_compute(uv_work_t *req)
{
	ks_srv_t *srv = req->data;

	srv->fp_rc = ks_keys_fingerprints_compute(srv->fp_computed,
	    KS_KEYS_MAX_KERNELS);
}

static void fp_computed(uv_work_t *req, int status)
{
	ks_srv_t *srv = req->data;

	srv->fp_ready = 1;
	if (status != 0)
		srv->fp_rc = KS_E_INTERNAL;
	probe_done(srv);
}

/* Accepting at once, before the probe: the metrics listener first (if it
 * cannot start, the daemon never bound its socket and leaves nothing
 * behind), then the socket. */
static int listen_now(ks_srv_t *srv)
{
	char err[512];
	int rc = KS_OK, fd;

	err[0] = '\0';
	if (srv->cfg.metrics_listen[0]) {
		rc = ks_http_start(srv->loop, srv->cfg.metrics_listen,
		    srv->cfg.metrics_any_host, srv->cfg.socket_gid,
		    ks_observe_handle, srv, &srv->http, err, sizeof err);
		if (rc == KS_OK)
			ks_log(KS_LOG_INFO, "metrics and dashboard on %s",
			    ks_http_where(srv->http));
	}
	if (rc == KS_OK && srv->passed_fd >= 0)
		fd = srv->passed_fd;    /* the service manager's (activation) */
	else if (rc == KS_OK)
		rc = ks_sock_listen(srv->cfg.socket_path, srv->cfg.socket_gid,
		    &fd, err, sizeof err);
	if (rc == KS_OK) {
		uv_pipe_open(&srv->listener, fd);
		rc = uv_listen((uv_stream_t *)&srv->listener, 511,
		    ks_conns_on_connection);
		if (rc) {
			snprintf(err, sizeof err, "listen: %s",
			    uv_strerror(rc));
			rc = KS_E_INTERNAL;
		}
	}
	if (rc) {
		ks_log(KS_LOG_ERROR, "cannot start: %s", err);
		return rc;
	}
	srv->listening = 1;
	ks_log(KS_LOG_INFO, "kspecd %s listening on %s%s, store %s, %d "
	    "compile workers", KS_SERVER_VERSION, srv->cfg.socket_path,
	    srv->passed_fd >= 0 ? " (passed by the service manager)" : "",
	    srv->cfg.store_path, srv->cfg.workers);
	return KS_OK;
}

static void on_watchdog(uv_timer_t *t)
{
	(void)t;
	ks_sd_notify("WATCHDOG=1");
}

/* Workers that never get ready (they cannot be spawned, or die at start)
 * stop the daemon rather than leave clients waiting. */
static void on_start_deadline(uv_timer_t *t)
{
	ks_srv_t *srv = t->data;

	if (srv->probe_state != KS_PROBE_DONE && !srv->probe_json)
		on_probe(&srv->pool, KS_E_TIMEOUT, NULL, NULL);
}

static void on_stop(uv_async_t *a)
{
	ks_srv_t *srv = a->data;

	if (srv->stopping)
		return;
	if (__atomic_load_n(&srv->stop_signal, __ATOMIC_ACQUIRE))
		ks_log(KS_LOG_INFO, "signal %d: stopping (%u compiles in "
		    "flight)", __atomic_load_n(&srv->stop_signal,
		    __ATOMIC_ACQUIRE), ks_flights_count(&srv->flights));
	srv->stopping = 1;
	ks_sd_notify("STOPPING=1");
	uv_close((uv_handle_t *)&srv->listener, NULL);
	ks_http_close(srv->http);
	srv->http = NULL;
	/* A passed socket is the service manager's: it stays. */
	if (srv->listening && srv->passed_fd < 0)
		ks_sock_unlink(srv->cfg.socket_path);
	ks_conns_pause_all(&srv->conns);
	/* Compiles not yet started fail with E_SHUTTING_DOWN; running ones
	 * finish and are answered. */
	ks_flights_stop(&srv->flights, KS_E_SHUTTING_DOWN, "daemon stopped "
	    "before this compile started");
	ks_audit_stop(srv);
	ks_canary_stop(srv);
	ks_dispatch_unpark(srv, KS_E_SHUTTING_DOWN);
	maybe_finish(srv);
}

/*
 * Takes SIGINT, SIGTERM and SIGHUP.  The first SIGINT/SIGTERM wakes the
 * loop to stop; a second one while the daemon finishes its work (a
 * compile can take long) exits at once (the store survives a killed
 * writer, and the workers die with the daemon).  SIGHUP never stops the
 * daemon: it wakes the loop to re-check what can be re-checked.
 */
static void *signal_main(void *p)
{
	ks_srv_t *srv = p;
	sigset_t set;
	int sig = 0, stops = 0;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	for (;;) {
		if (sigwait(&set, &sig) != 0)
			continue;
		if (sig == SIGHUP) {
			uv_async_send(&srv->hup_async);
			continue;
		}
		if (stops++ == 0) {
			__atomic_store_n(&srv->stop_signal, sig,
			    __ATOMIC_RELEASE);
			uv_async_send(&srv->stop_async);
			continue;
		}
		ks_log(KS_LOG_WARN, "signal %d again: exiting without "
		    "finishing", sig);
		_exit(1);
	}
	return NULL;
}

/* ---- the store file under the daemon ---- */

typedef struct {
	ks_mail_t mail;          /* first */
	ks_srv_t *srv;
	int rc;
	char err[512];
} reopened_t;

static void put_again(void *ctx, ks_artifact_t *a)
{
	ks_srv_t *srv = ctx;

	ks_writer_put(srv->writer, a);
}

/* Loop thread: the writer has reopened the store. */
static void on_reopened_mail(ks_mail_t *m)
{
	reopened_t *r = (reopened_t *)m;
	ks_srv_t *srv = r->srv;

	srv->store_reopening = 0;
	if (r->rc) {
		ks_log(KS_LOG_ERROR, "store %s: cannot reopen it: %s; serving "
		    "from memory and retrying", srv->cfg.store_path, r->err);
	} else {
		/* What the memory tier holds goes into the new file. */
		ks_log(KS_LOG_ERROR, "store %s: reopened; writing the %zu "
		    "artifacts held in memory to it", srv->cfg.store_path,
		    ks_hot_count(srv->hot));
		ks_hot_each(srv->hot, put_again, srv);
	}
	free(r);
}

static void on_reopened(void *ctx, int rc, const char *err)
{
	reopened_t *r = ctx;

	r->rc = rc;
	snprintf(r->err, sizeof r->err, "%s", err ? err : "");
	ks_mailbox_post(&r->srv->mailbox, &r->mail);
}

/* Notices a store file deleted or replaced under the daemon (which would
 * otherwise write on into an unlinked inode, lost at the next start) and
 * has the writer open the file now at the path. */
static void check_store(ks_srv_t *srv)
{
	reopened_t *r;

	if (srv->store_reopening || srv->stopping ||
	    !ks_store_changed(srv->store))
		return;
	srv->store_replaced++;
	ks_log(KS_LOG_ERROR, "store %s: the file was deleted or replaced "
	    "while kspecd ran; reopening it", srv->cfg.store_path);
	r = calloc(1, sizeof *r);
	if (!r)
		return;
	r->mail.fn = on_reopened_mail;
	r->srv = srv;
	srv->store_reopening = 1;
	if (ks_writer_reopen(srv->writer, on_reopened, r) != KS_OK) {
		srv->store_reopening = 0;
		free(r);
	}
}

static void on_store_check(uv_timer_t *t)
{
	check_store(t->data);
}

static void on_hup(uv_async_t *a)
{
	ks_srv_t *srv = a->data;

	ks_log(KS_LOG_INFO, "SIGHUP: checked the store file (logs go to "
	    "stderr: nothing to reopen)");
	check_store(srv);
}

/* Raises the soft RLIMIT_NOFILE to the hard one and sizes the connection
 * limit below it, leaving room for the store, the lock files and each
 * worker's channel and pidfd: a descriptor the daemon cannot get stalls
 * what needed it. */
static int fd_limit(int workers)
{
	struct rlimit rl;
	long room;
	int max = KS_MAX_CONNECTIONS;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return max;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	room = rl.rlim_cur == RLIM_INFINITY ? KS_MAX_CONNECTIONS :
	    (long)rl.rlim_cur - KS_FD_RESERVE - 2L * workers;
	if (room < max)
		max = room < 1 ? 1 : (int)room;
	return max;
}

/* Opens the store beside its lock; logs and returns the error. */
static int open_store(ks_srv_t *srv)
{
	const ks_server_config_t *cfg = &srv->cfg;
	char err[1024];
	int rc;

	err[0] = '\0';
	rc = ks_make_parent(cfg->store_path, err, sizeof err);
	if (rc == KS_OK)
		rc = ks_lock_beside(cfg->store_path, &srv->store_lock_fd, err,
		    sizeof err);
	if (rc == KS_OK)
		rc = ks_store_open(cfg->store_path, cfg->max_bytes, &srv->store,
		    err, sizeof err);
	/* A file that is not a database, or is damaged, is a cache lost,
	 * not an outage: it is kept aside for whoever wants to look. */
	if (rc == KS_E_CORRUPT && !cfg->refuse_corrupt_store) {
		ks_log(KS_LOG_ERROR, "%s", err);
		rc = ks_store_move_aside(cfg->store_path, srv->store_moved,
		    sizeof srv->store_moved, err, sizeof err);
		if (rc == KS_OK) {
			ks_log(KS_LOG_ERROR, "store %s: MOVED ASIDE to %s; "
			    "starting with an empty store "
			    "(--refuse-corrupt-store to refuse instead)",
			    cfg->store_path, srv->store_moved);
			rc = ks_store_open(cfg->store_path, cfg->max_bytes,
			    &srv->store, err, sizeof err);
		}
	}
	if (rc)
		ks_log(KS_LOG_ERROR, "%s", err);
	return rc;
}

/* What --remote needs before the loop starts, all or nothing: a fleet
 * key (values from Redis are taken only signed: without one the node
 * would have to trust whatever Redis holds, so it refuses to start), the
 * password and the sign key from files only their user can read. */
static int remote_setup(ks_srv_t *srv)
{
	const ks_server_config_t *cfg = &srv->cfg;
	char err[1200], id[17];
	int rc = KS_OK;

	if (srv->nfleet == 0) {
		ks_log(KS_LOG_ERROR, "cannot start: --remote needs at least "
		    "one --fleet-key (values from Redis are accepted only "
		    "signed by a fleet key)");
		return KS_E_INVAL;
	}
	if (cfg->remote_password_file[0])
		rc = ks_remote_read_password(cfg->remote_password_file,
		    srv->remote_pw, sizeof srv->remote_pw, err, sizeof err);
	if (rc == KS_OK && cfg->fleet_sign_key[0]) {
		rc = ks_fleet_load_secret(cfg->fleet_sign_key, &srv->sign, err,
		    sizeof err);
		srv->can_sign = rc == KS_OK;
	}
	if (rc == KS_OK && !(srv->remote = calloc(1, sizeof *srv->remote))) {
		snprintf(err, sizeof err, "out of memory");
		rc = KS_E_NOMEM;
	}
	if (rc) {
		ks_log(KS_LOG_ERROR, "cannot start: --remote: %s", err);
		sodium_memzero(srv->remote_pw, sizeof srv->remote_pw);
		return rc;
	}
	if (srv->can_sign) {
		ks_fleet_id_hex(srv->sign.id, id);
		ks_log(KS_LOG_INFO, "remote %s: publishing what this node "
		    "compiles, signed by key %s", cfg->remote_url, id);
	} else {
		ks_log(KS_LOG_INFO, "remote %s: reading only (no "
		    "--fleet-sign-key)", cfg->remote_url);
	}
	return KS_OK;
}

static void close_fds(ks_srv_t *srv)
{
	if (srv->lock_fd >= 0)
		close(srv->lock_fd);
	if (srv->store_lock_fd >= 0)
		close(srv->store_lock_fd);
}

static void on_conn_error(ks_conn_t *c, int code, const char *msg)
{
	ks_srv_t *srv = ks_srv_of(c);

	ks_srv_error(srv, KS_OP_COUNT_, code, msg);
}

/* Starts the loop's handles and threads; logs what failed. */
static int start(ks_srv_t *srv)
{
	ks_conn_limits_t lim;
	ks_pool_opts_t opts;
	int rc;

	srv->loop = uv_default_loop();
	if (ks_mailbox_init(&srv->mailbox, srv->loop) != 0)
		return KS_E_INTERNAL;
	srv->writer = ks_writer_start(srv->store);
	if (!srv->writer) {
		ks_log(KS_LOG_ERROR, "cannot start the store writer");
		return KS_E_INTERNAL;
	}
	opts.workers = srv->cfg.workers;
	opts.timeout_ms = srv->cfg.compile_timeout_s * 1000;
	opts.memory_bytes = srv->cfg.worker_memory;
	opts.recycle_jobs = srv->cfg.worker_jobs;
	opts.recycle_rss = srv->cfg.worker_rss;
	opts.exe = NULL;
	rc = ks_pool_init(&srv->pool, srv->loop, &opts, srv);
	if (rc) {
		ks_log(KS_LOG_ERROR, "cannot start the compile workers");
		return rc;
	}
	srv->pool.on_idle = on_pool_idle;
	srv->pool.on_probe = on_probe;
	ks_pool_probe(&srv->pool);
	srv->parked_tail = &srv->parked;
	ks_flights_init(&srv->flights, &srv->pool, &srv->keys, srv);
	srv->flights.finish = ks_lookup_finish;
	srv->flights.idle = on_flights_idle;
	srv->flights.first = on_flights_first;
	if (srv->remote) {
		ks_remote_addr_t ra;
		char err[1200];

		/* Parsed on the command line already. */
		if (ks_remote_parse(srv->cfg.remote_url, &ra, err,
		    sizeof err) != KS_OK)
			return KS_E_INVAL;
		ks_remote_start(srv->remote, srv->loop, &ra, srv->remote_pw,
		    srv->cfg.remote_timeout_ms);
		sodium_memzero(srv->remote_pw, sizeof srv->remote_pw);
		srv->flights.remote = ks_lookup_remote;
	}
	lim.max = fd_limit(srv->cfg.workers);
	lim.max_per_user = srv->cfg.max_conns_per_user;
	lim.idle_ms = srv->cfg.idle_timeout_s * 1000;
	lim.read_ms = srv->cfg.read_timeout_s * 1000;
	lim.self_uid = (uint32_t)getuid();
	lim.socket_gid = srv->cfg.socket_gid;
	lim.admin_gid = srv->cfg.admin_gid;
	snprintf(lim.socket_group, sizeof lim.socket_group, "%s",
	    srv->cfg.socket_group);
	ks_conns_init(&srv->conns, srv->loop, &lim, ks_dispatch_request, srv);
	srv->conns.on_error = on_conn_error;

	uv_pipe_init(srv->loop, &srv->listener, 0);
	srv->listener.data = &srv->conns;
	uv_timer_init(srv->loop, &srv->start_timer);
	srv->start_timer.data = srv;
	uv_timer_start(&srv->start_timer, on_start_deadline, START_DEADLINE_MS,
	    0);
	uv_unref((uv_handle_t *)&srv->start_timer);
	uv_async_init(srv->loop, &srv->stop_async, on_stop);
	srv->stop_async.data = srv;
	/* Never closed: the signal thread may send to it until the process
	 * ends.  It does not keep the loop alive. */
	uv_async_init(srv->loop, &srv->hup_async, on_hup);
	srv->hup_async.data = srv;
	uv_unref((uv_handle_t *)&srv->hup_async);
	uv_timer_init(srv->loop, &srv->store_timer);
	srv->store_timer.data = srv;
	uv_timer_start(&srv->store_timer, on_store_check, STORE_CHECK_MS,
	    STORE_CHECK_MS);
	uv_unref((uv_handle_t *)&srv->store_timer);
	if (pthread_create(&srv->signal_thread, NULL, signal_main, srv) != 0) {
		ks_log(KS_LOG_ERROR, "cannot start the signal thread");
		return KS_E_INTERNAL;
	}
	pthread_detach(srv->signal_thread);
	uv_timer_init(srv->loop, &srv->flush_timer);
	srv->flush_timer.data = srv;
	uv_timer_init(srv->loop, &srv->drain_timer);
	srv->drain_timer.data = srv;
	uv_timer_start(&srv->flush_timer, on_flush, FLUSH_INTERVAL_MS,
	    FLUSH_INTERVAL_MS);
	uv_unref((uv_handle_t *)&srv->flush_timer);
	/* Pinged from the loop thread: a loop that hangs stops pinging. */
	uv_timer_init(srv->loop, &srv->watchdog_timer);
	if (ks_sd_watchdog_ms()) {
		uv_timer_start(&srv->watchdog_timer, on_watchdog,
		    ks_sd_watchdog_ms(), ks_sd_watchdog_ms());
		uv_unref((uv_handle_t *)&srv->watchdog_timer);
	}
	/* Serving from here on: hits under the saved probe's keys, when its
	 * witness holds; the rest once the probe is in (probe_done). */
	load_saved_probe(srv);
	rc = listen_now(srv);
	if (rc)
		return rc;
	/* Queued only now: a start that failed above returns with nothing
	 * of its own on libuv's pool. */
	srv->fp_work.data = srv;
	rc = uv_queue_work(srv->loop, &srv->fp_work, fp_compute, fp_computed);
	if (rc) {
		ks_log(KS_LOG_ERROR, "cannot start: %s", uv_strerror(rc));
		return KS_E_INTERNAL;
	}
	if (srv->probe_state == KS_PROBE_SAVED)
		notify_ready(srv, "hits under the saved probe's keys while "
		    "the compilers are probed");
	return KS_OK;
}

int ks_server_run(const ks_server_config_t *cfg)
{
	ks_srv_t srv;
	char err[1024], path[4096];
	sigset_t sigs;
	int rc, i;

	memset(&srv, 0, sizeof srv);
	srv.cfg = *cfg;
	srv.passed_fd = -1;
	/* Before any thread exists, so that every thread inherits it. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	/* Every file the daemon creates is its own: the store, its -wal and
	 * -shm, lock files (the socket's mode is set apart). */
	umask(077);
	srv.lock_fd = -1;
	srv.store_lock_fd = -1;
	srv.started_ns = ks_now_ns();
	signal(SIGPIPE, SIG_IGN);

	ks_log_set_name("kspecd");
	ks_dispatch_init();
	rc = ks_base_init();
	if (rc == KS_OK)
		rc = ks_keys_init_unprinted(&srv.keys);
	if (rc) {
		ks_log(KS_LOG_ERROR, "cannot initialize: %s", ks_strerror(rc));
		return rc;
	}
	/* A service manager's socket (socket activation) names the path;
	 * --socket, if given too, must agree with it. */
	ks_sd_notify_init();
	rc = ks_sd_listen_fd(&srv.passed_fd, path, sizeof path, err,
	    sizeof err);
	if (rc == KS_OK && srv.passed_fd >= 0) {
		if (cfg->socket_given && strcmp(cfg->socket_path, path) != 0) {
			snprintf(err, sizeof err, "the service manager passed "
			    "the socket %.400s, and --socket says %.400s; give "
			    "one of them", path, cfg->socket_path);
			rc = KS_E_INVAL;
		}
		snprintf(srv.cfg.socket_path, sizeof srv.cfg.socket_path,
		    "%s", path);
	}
	if (rc) {
		ks_log(KS_LOG_ERROR, "cannot start: %s", err);
		return rc;
	}
	/* The socket lock first: a second instance must fail before it
	 * touches the store.  The store's own lock then keeps a daemon on
	 * another socket off the same store (one writer).  A passed socket
	 * exists already, with the modes its unit gave it: only the lock. */
	if (srv.passed_fd >= 0)
		rc = ks_lock_beside(srv.cfg.socket_path, &srv.lock_fd, err,
		    sizeof err);
	else
		rc = ks_sock_prepare(cfg->socket_path, cfg->socket_gid,
		    &srv.lock_fd, err, sizeof err);
	if (rc) {
		ks_log(KS_LOG_ERROR, "%s", err);
		return rc;
	}
	rc = open_store(&srv);
	if (rc == KS_OK && !(srv.hot = ks_hot_new(cfg->hot_bytes)))
		rc = KS_E_NOMEM;
	if (rc) {
		if (srv.store)
			ks_store_close(srv.store);
		close_fds(&srv);
		return rc;
	}
	for (i = 0; rc == KS_OK && i < cfg->nfleet_keys; i++) {
		rc = ks_fleet_load_public(cfg->fleet_keys[i], &srv.fleet[i], err,
		    sizeof err);
		if (rc == KS_OK) {
			char id[17];

			ks_fleet_id_hex(srv.fleet[i].id, id);
			ks_log(KS_LOG_INFO, "fleet key %s from %s", id,
			    cfg->fleet_keys[i]);
			srv.nfleet++;
		} else {
			ks_log(KS_LOG_ERROR, "cannot start: --fleet-key %s",
			    err);
		}
	}
	if (rc) {
		ks_store_close(srv.store);
		ks_hot_free(srv.hot);
		close_fds(&srv);
		return rc;
	}
	if (rc == KS_OK && cfg->remote_url[0])
		rc = remote_setup(&srv);
	if (rc) {
		ks_store_close(srv.store);
		ks_hot_free(srv.hot);
		close_fds(&srv);
		return rc;
	}
	srv.fast = malloc(sizeof *srv.fast);
	if (!srv.fast)
		return KS_E_NOMEM;
	ks_fast_init(srv.fast, !cfg->no_fast_path);
#ifdef KS_TEST_PLANT
	/* The test build's switches (tests/kspecd-plant, never installed). */
	if (getenv("KSPEC_TEST_FAULTS"))
		ks_log(KS_LOG_WARN, "KSPEC_TEST_FAULTS is set: compile workers "
		    "will fail on purpose (%s)", getenv("KSPEC_TEST_FAULTS"));
	if (getenv("KSPEC_TEST_REMOTE_BUG")) {
		srv.remote_planted = 1;
		ks_log(KS_LOG_WARN, "KSPEC_TEST_REMOTE_BUG is set: values from "
		    "the remote tier are taken for any key on purpose");
	}
	if (getenv("KSPEC_TEST_FAST_PATH_BUG")) {
		srv.fast->planted_prefix = 1;
		ks_log(KS_LOG_WARN, "KSPEC_TEST_FAST_PATH_BUG is set: the get "
		    "fast path is wrong on purpose");
	}
	if (getenv("KSPEC_TEST_PLANT_IMPORT_SLOW_STORE")) {
		srv.import_slow_store = 1;
		ks_log(KS_LOG_WARN, "KSPEC_TEST_PLANT_IMPORT_SLOW_STORE is "
		    "set: imports see a store slower than any read");
	}
	if (getenv("KSPEC_TEST_PLANT_SLOW_WRITER"))
		ks_log(KS_LOG_WARN, "KSPEC_TEST_PLANT_SLOW_WRITER is set: each "
		    "store write waits %s ms",
		    getenv("KSPEC_TEST_PLANT_SLOW_WRITER"));
#endif
	rc = start(&srv);
	if (rc)
		return rc;

	uv_run(srv.loop, UV_RUN_DEFAULT);
	uv_close((uv_handle_t *)&srv.drain_timer, NULL);
	ks_conns_close(&srv.conns);
	uv_run(srv.loop, UV_RUN_DEFAULT);

	/* The writer finishes what was posted; completions it sends now
	 * find their connections closed and are dropped.  The last uses go
	 * with the store's close. */
	ks_lookup_record_uses(&srv);
	ks_writer_stop(srv.writer);
	ks_mailbox_run(&srv.mailbox);
	ks_mailbox_close(&srv.mailbox);
	ks_pool_close(&srv.pool);
	uv_run(srv.loop, UV_RUN_DEFAULT);

	ks_store_close(srv.store);
	ks_hot_free(srv.hot);
	free(srv.remote);
	sodium_memzero(&srv.sign, sizeof srv.sign);
	ks_fast_close(srv.fast);
	free(srv.fast);
	ks_observe_close(&srv);
	ks_store_probe_free(&srv.saved);
	free(srv.probe_json);
	free(srv.probe_witness);
	ks_buf_close(&srv.hello_body);
	ks_buf_close(&srv.kernels_body);
	ks_keys_close(&srv.keys);
	ks_flights_close(&srv.flights);
	ks_deploy_states_free(&srv);
	uv_loop_close(srv.loop);
	close_fds(&srv);
	ks_log(KS_LOG_INFO, "kspecd stopped");
	return srv.exit_status;
}
