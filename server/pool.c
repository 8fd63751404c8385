/*
 * The worker pool (pool.h).
 *
 * Spawning.  posix_spawn (glibc's clone(CLONE_VFORK) then exec, safe in a
 * threaded process; never a bare fork) re-executes the daemon's own binary
 * (a descriptor of /proc/self/exe opened at start, which still names the
 * running image after an upgrade replaced the file) in worker mode, so parent and worker agree on code
 * generation by construction; the ready message's fingerprints are
 * checked anyway.  The child gets: the socketpair's end as fd 3, stdin
 * from /dev/null, the daemon's stdout and stderr, every other descriptor
 * closed by close-on-exec, an empty signal mask, default dispositions, and
 * a session of its own (no terminal's Ctrl-C reaches it).  Its exit is
 * watched through a pidfd, so no SIGCHLD handler is involved (through
 * SIGCHLD where pidfd_open is missing), and it is reaped with wait4 for
 * its status and peak RSS.
 *
 * Only the loop thread touches the pool.  Workers are spawned from it:
 * PR_SET_PDEATHSIG fires when the spawning thread ends, and the loop
 * thread lives as long as the daemon.
 *
 * Liveness.  Work (a job, the probe) goes without a ping only to the
 * worker whose message the loop is handling at that moment (p->heard:
 * the result of its last job, its ready message, its pong), which
 * nothing can have stopped since.  Any other job waits in the pool's
 * queue while every idle worker is pinged (CHECKING), and the first to
 * answer takes it.  A backlog pays nothing: it is dispatched as each
 * result arrives, to the worker that sent it; a job that finds the pool
 * idle pays one round trip.  A worker that misses its ping's deadline is
 * killed and replaced, and the job goes to another.  One that stops
 * after its answer (a window of one round trip) or during its job is
 * caught by the compile deadline.
 *
 * The slots.  Jobs on workers and in the queue count against their slot:
 * at most opts.workers ordinary jobs and KS_POOL_RESERVE reserve jobs
 * (pool.h).  A job keeps its slot when it is retried, so a retry never
 * needs a check: the pool accepted it once.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../proto/proto.h"
#include "pool.h"

extern char **environ;

/* A worker that is not ready by then is killed. */
#define START_DEADLINE_MS 60000
/* A pinged worker that has not answered by then is killed (and replaced)
 * as unresponsive.  An idle worker blocked in read() answers at once: 600
 * pings on a 2-CPU machine at a load of 7 took 110 us at the median, 7.9
 * ms at the 99th percentile and 11 ms at most.  The margin covers worse
 * scheduling delays; a false alarm costs a respawn, never a job. */
#define PING_DEADLINE_MS 500
/* The pause before a respawn after N start failures in a row:
 * 100 ms * 2^(N-1), at most 10 s. */
#define RESPAWN_BASE_MS 100
#define RESPAWN_MAX_MS 10000
/* A worker that died with a peak RSS at least this fraction (in 1/100)
 * of its memory limit died of the limit. */
#define OOM_PERCENT 90

static void spawn_missing(ks_pool_t *p);
static void kick(ks_pool_t *p);
static void ping_missed(ks_worker_t *w);

const char *ks_worker_state_name(int state)
{
	static const char *const names[] = { "starting", "idle", "checking",
	    "compiling", "retiring", "dead" };

	return state >= 0 && state <= WORKER_DEAD ? names[state] : "?";
}

/* ---- the states' invariants ---- */

/*
 * Whether W keeps the invariants of its state (pool.h): a job exactly
 * while BUSY; the probe never out to a worker that is starting, pinged or
 * compiling; the channel closed once RETIRING or DEAD.
 */
static int worker_state_ok(const ks_worker_t *w)
{
	if ((w->job != NULL) != (w->state == WORKER_BUSY))
		return 0;
	switch (w->state) {
	case WORKER_STARTING:
	case WORKER_CHECKING:
	case WORKER_BUSY:
		return !w->probing;
	case WORKER_IDLE:
		return 1;
	case WORKER_RETIRING:
	case WORKER_DEAD:
		return !w->chan_open;
	default:
		return 0;
	}
}

/* Whether P keeps them, asserted where an event of the pool ends and a
 * job comes in: every worker does, none is DEAD (a dead one is unlinked),
 * and nlive counts the ones not RETIRING. */
static int pool_state_ok(const ks_pool_t *p)
{
	const ks_worker_t *w;
	int live = 0;

	for (w = p->workers; w; w = w->next) {
		if (!worker_state_ok(w) || w->state == WORKER_DEAD)
			return 0;
		live += w->state != WORKER_RETIRING;
	}
	return live == p->nlive;
}

/* ---- lifetime of a worker struct ---- */

static void worker_free(ks_worker_t *w)
{
	ks_buf_close(&w->in);
	free(w);
}

static void on_handle_closed(uv_handle_t *h)
{
	ks_worker_t *w = h->data;

	if (--w->open_handles == 0)
		worker_free(w);
}

static void unlink_worker(ks_pool_t *p, ks_worker_t *w)
{
	ks_worker_t **pp;

	for (pp = &p->workers; *pp; pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			return;
		}
	}
}

static void close_chan(ks_worker_t *w)
{
	if (!w->chan_open)
		return;
	w->chan_open = 0;
	uv_close((uv_handle_t *)&w->chan, on_handle_closed);
}

/* Sends SIGKILL unless the process is already reaped. */
static void kill_worker(ks_worker_t *w, const char *why)
{
	if (w->state == WORKER_DEAD)
		return;
	if (!w->why)
		w->why = why;
	kill(w->pid, SIGKILL);
}

/* ---- sending ---- */

typedef struct {
	uv_write_t req;
	char data[];
} wbuf_t;

static void on_sent(uv_write_t *req, int status)
{
	free(req);
}

static int send_frame(ks_worker_t *w, const ks_buf_t *frame)
{
	wbuf_t *b;
	uv_buf_t buf;

	if (!w->chan_open || !frame->data)
		return KS_E_IO;
	b = malloc(sizeof *b + frame->len);
	if (!b)
		return KS_E_NOMEM;
	memcpy(b->data, frame->data, frame->len);
	buf = uv_buf_init(b->data, (unsigned)frame->len);
	if (uv_write(&b->req, (uv_stream_t *)&w->chan, &buf, 1, on_sent)) {
		free(b);
		return KS_E_IO;
	}
	return KS_OK;
}

static void on_deadline(uv_timer_t *t)
{
	ks_worker_t *w = t->data;

	if (w->state == WORKER_BUSY) {
		ks_log(KS_LOG_WARN, "compile of %s ran past %" PRIu64 " s; "
		    "killing its worker (pid %ld)",
		    w->job->job.spec.def->name, w->pool->opts.timeout_ms /
		    1000, (long)w->pid);
		w->timed_out = 1;
		kill_worker(w, "compile timeout");
	} else if (w->state == WORKER_STARTING) {
		ks_log(KS_LOG_ERROR, "compile worker (pid %ld) not ready after "
		    "%d s; killing it", (long)w->pid, START_DEADLINE_MS / 1000);
		kill_worker(w, "start timeout");
	} else if (w->state == WORKER_CHECKING) {
		ping_missed(w);
	} else if (w->state == WORKER_RETIRING) {
		kill_worker(w, "it did not exit when its channel closed");
	}
}

static int send_job(ks_worker_t *w, ks_pool_job_t *pj)
{
	ks_pool_t *p = w->pool;
	ks_buf_t frame;
	int rc;

	assert(w->state == WORKER_IDLE && !w->probing);
	ks_buf_init(&frame);
	w->seq = ++p->next_seq;
	pj->pid = w->pid;
	rc = ks_wire_job_encode(&pj->job, w->seq, &frame);
	if (rc == KS_OK)
		rc = send_frame(w, &frame);
	ks_buf_close(&frame);
	if (rc != KS_OK)
		return rc;
	w->state = WORKER_BUSY;
	w->job = pj;
	assert(worker_state_ok(w));
	w->timed_out = 0;
	w->job_ns = ks_now_ns();
	p->reserve_jobs += pj->reserve != 0;
	pj->started_ns = w->job_ns;
	if (p->opts.timeout_ms)
		uv_timer_start(&w->deadline, on_deadline, pj->timeout_ms ?
		    pj->timeout_ms : p->opts.timeout_ms, 0);
	return KS_OK;
}

/* Sends {"op":OP,"seq":S} (the probe or a ping) under a new seq. */
static int send_op(ks_worker_t *w, const char *op)
{
	ks_buf_t frame;
	size_t at;
	int rc = KS_E_NOMEM;

	ks_buf_init(&frame);
	ks_buf_append(&frame, "\0\0\0\0\0\0\0\0", KS_FRAME_PREFIX);
	at = frame.len;
	w->seq = ++w->pool->next_seq;
	ks_buf_printf(&frame, "{\"op\":\"%s\",\"seq\":%" PRIu64 "}", op,
	    w->seq);
	if (frame.data) {
		ks_frame_prefix((uint8_t *)frame.data, (uint32_t)(frame.len -
		    at), 0);
		rc = send_frame(w, &frame);
	}
	ks_buf_close(&frame);
	return rc;
}

static void send_probe(ks_worker_t *w)
{
	if (send_op(w, "probe") == KS_OK) {
		w->probing = 1;
		w->pool->probe_wanted = 0;
	}
}

/* IDLE -> CHECKING: the ping, under its deadline. */
static void send_ping(ks_worker_t *w)
{
	assert(w->state == WORKER_IDLE && !w->probing);
	if (send_op(w, "ping") != KS_OK) {
		kill_worker(w, "its channel failed");
		return;
	}
	w->state = WORKER_CHECKING;
	assert(worker_state_ok(w));
	uv_timer_start(&w->deadline, on_deadline, PING_DEADLINE_MS, 0);
}

/* ---- ending jobs ---- */

static void job_end(ks_pool_job_t *pj, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void job_end(ks_pool_job_t *pj, int err, const char *fmt, ...)
{
	va_list ap;

	pj->err = err;
	if (fmt) {
		va_start(ap, fmt);
		vsnprintf(pj->errmsg, sizeof pj->errmsg, fmt, ap);
		va_end(ap);
	}
	pj->done(pj);
}

static void queue_push(ks_pool_t *p, ks_pool_job_t *pj)
{
	pj->next = NULL;
	if (p->queue_tail)
		p->queue_tail->next = pj;
	else
		p->queue_head = pj;
	p->queue_tail = pj;
}

static ks_pool_job_t *queue_pop(ks_pool_t *p)
{
	ks_pool_job_t *pj = p->queue_head;

	if (pj) {
		p->queue_head = pj->next;
		if (!p->queue_head)
			p->queue_tail = NULL;
	}
	return pj;
}

/* "killed by signal 9 (Killed)" or "exited with status 3". */
static void describe_status(int status, char *out, size_t len)
{
	if (WIFSIGNALED(status))
		snprintf(out, len, "was killed by signal %d (%s)",
		    WTERMSIG(status), strsignal(WTERMSIG(status)));
	else if (WIFEXITED(status))
		snprintf(out, len, "exited with status %d",
		    WEXITSTATUS(status));
	else
		snprintf(out, len, "ended (status %#x)", status);
}

/* The job of W, whose process died running it. */
static void job_lost(ks_worker_t *w, int status, const struct rusage *ru)
{
	ks_pool_t *p = w->pool;
	ks_pool_job_t *pj = w->job;
	uint64_t peak = (uint64_t)ru->ru_maxrss * 1024;
	char how[128];

	w->job = NULL;
	describe_status(status, how, sizeof how);
	pj->compile_ms = (double)(ks_now_ns() - w->job_ns) / 1e6;
	if (w->timed_out) {
		p->timeouts++;
		job_end(pj, KS_E_COMPILE_TIMEOUT, "the compile ran longer than "
		    "the limit of %" PRIu64 " s (--compile-timeout); its worker "
		    "(pid %ld) was killed", p->opts.timeout_ms / 1000,
		    (long)w->pid);
		return;
	}
	if (p->opts.memory_bytes && peak * 100 >= p->opts.memory_bytes *
	    OOM_PERCENT) {
		p->ooms++;
		job_end(pj, KS_E_COMPILE_OOM, "the compile reached the worker "
		    "memory limit of %" PRIu64 " MiB (--worker-memory; peak "
		    "RSS %" PRIu64 " MiB); its worker (pid %ld) %s",
		    p->opts.memory_bytes >> 20, peak >> 20, (long)w->pid, how);
		return;
	}
	p->crashes++;
	if (pj->attempts++ == 0 && !p->stopping) {
		ks_log(KS_LOG_WARN, "compile worker (pid %ld) %s while "
		    "compiling %s; retrying once on another worker",
		    (long)w->pid, how, pj->job.spec.def->name);
		p->retries++;
		queue_push(p, pj);
		return;
	}
	job_end(pj, KS_E_COMPILE_CRASHED, "the compile worker (pid %ld) %s "
	    "while compiling%s (peak RSS %" PRIu64 " MiB, memory limit %"
	    PRIu64 " MiB)", (long)w->pid, how, pj->attempts > 1 ?
	    ", for the second time" : "", peak >> 20,
	    p->opts.memory_bytes >> 20);
}

/* ---- the process ended ---- */

/* Reaps W if its process has ended; 1 when it had. */
static int reap(ks_worker_t *w)
{
	ks_pool_t *p = w->pool;
	struct rusage ru;
	int st = 0, was = w->state;
	pid_t r;
	char how[128];

	memset(&ru, 0, sizeof ru);
	r = wait4(w->pid, &st, WNOHANG, &ru);
	if (r == 0 || (r < 0 && errno == EINTR))
		return 0;               /* not yet */
	if (w->pidfd >= 0) {
		uv_poll_stop(&w->exitw);
		uv_close((uv_handle_t *)&w->exitw, on_handle_closed);
		close(w->pidfd);
		w->pidfd = -1;
	}
	uv_timer_stop(&w->deadline);
	uv_close((uv_handle_t *)&w->deadline, on_handle_closed);
	close_chan(w);
	w->state = WORKER_DEAD;
	unlink_worker(p, w);
	describe_status(st, how, sizeof how);

	switch (was) {
	case WORKER_STARTING:
		p->start_failures++;
		p->failing++;
		ks_log(KS_LOG_ERROR, "compile worker (pid %ld) %s before it was "
		    "ready%s%s", (long)w->pid, how, w->why ? ": " : "",
		    w->why ? w->why : "");
		break;
	case WORKER_BUSY:
		p->nlive--;
		job_lost(w, st, &ru);
		break;
	case WORKER_IDLE:
	case WORKER_CHECKING:
		p->nlive--;
		p->crashes++;
		ks_log(KS_LOG_WARN, "idle compile worker (pid %ld) %s%s%s",
		    (long)w->pid, how, w->why ? ": " : "",
		    w->why ? w->why : "");
		break;
	default:                        /* RETIRING: expected */
		break;
	}
	if (was == WORKER_STARTING)
		p->nlive--;
	assert(worker_state_ok(w));
	if (w->probing && p->on_probe)
		p->probe_wanted = 1;    /* ask the next ready worker */
	spawn_missing(p);
	kick(p);
	return 1;
}

static void on_exit_readable(uv_poll_t *h, int status, int events)
{
	reap(h->data);
}

/* Where pidfd_open is missing (kernels before 5.3, valgrind): SIGCHLD,
 * then a look at every worker. */
static void on_sigchld(uv_signal_t *h, int sig)
{
	ks_pool_t *p = h->data;
	ks_worker_t *w, *next;

	for (w = p->workers; w; w = next) {
		next = w->next;
		reap(w);
	}
}

/* ---- messages from a worker ---- */

static void retire(ks_worker_t *w)
{
	ks_pool_t *p = w->pool;

	/* From a result (its job already taken off) or a missed ping. */
	assert((w->state == WORKER_BUSY && !w->job) ||
	    w->state == WORKER_CHECKING);
	w->state = WORKER_RETIRING;
	p->nlive--;
	close_chan(w);
	assert(worker_state_ok(w));
	/* A worker that does not leave when its channel closes is killed
	 * by the deadline. */
	uv_timer_start(&w->deadline, on_deadline, START_DEADLINE_MS, 0);
	spawn_missing(p);
}

/* CHECKING W missed its ping's deadline: it is killed and replaced; the
 * work it was pinged for is in the queue still, for another worker. */
static void ping_missed(ks_worker_t *w)
{
	ks_pool_t *p = w->pool;

	ks_log(KS_LOG_WARN, "idle compile worker (pid %ld) did not answer a "
	    "ping within %d ms; killing it", (long)w->pid, PING_DEADLINE_MS);
	p->unresponsive++;
	retire(w);
	kill_worker(w, "it did not answer a ping");
	kick(p);
}

static int on_ready_msg(ks_worker_t *w, const cJSON *j)
{
	const ks_kernel_def_t *const *all;
	const cJSON *fps = cJSON_GetObjectItemCaseSensitive(j, "fingerprints");
	const cJSON *cg = cJSON_GetObjectItemCaseSensitive(j, "codegen");
	const cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "channel");
	char hex[KS_HASH_HEX];
	int i, n;

	all = ks_kernels(&n);
	if (!cJSON_IsNumber(ch) || ch->valueint != KS_WORKER_CHANNEL) {
		kill_worker(w, "it speaks another version of the channel");
		return -1;
	}
	if (!cJSON_IsNumber(cg) || cg->valueint != KS_CODEGEN_VERSION ||
	    cJSON_GetArraySize(fps) != n) {
		kill_worker(w, "it runs another code generation");
		return -1;
	}
	for (i = 0; i < n; i++) {
		const cJSON *f = cJSON_GetArrayItem(fps, i);

		ks_hash_hex(ks_kernel_fingerprint(all[i]), hex);
		if (!cJSON_IsString(f) || strcmp(f->valuestring, hex)) {
			kill_worker(w, "its kernel definitions differ from the "
			    "daemon's");
			return -1;
		}
	}
	assert(w->state == WORKER_STARTING);
	uv_timer_stop(&w->deadline);
	w->state = WORKER_IDLE;
	w->pool->failing = 0;
	assert(worker_state_ok(w));
	return 0;
}

static void on_result(ks_worker_t *w, const char *hdr, size_t hl,
    const uint8_t *payload, size_t pl)
{
	ks_pool_t *p = w->pool;
	ks_pool_job_t *pj = w->job;
	uint64_t seq = 0, rss = 0;
	int rc = KS_OK;

	assert(w->state == WORKER_BUSY && worker_state_ok(w));
	if (ks_wire_out_decode(hdr, hl, payload, pl, &seq, &rc, pj->errmsg,
	    sizeof pj->errmsg, &pj->out, &rss) != KS_OK || seq != w->seq) {
		ks_job_out_close(&pj->out);
		pj->errmsg[0] = '\0';
		kill_worker(w, "it sent a malformed reply");
		return;
	}
	uv_timer_stop(&w->deadline);
	pj->compile_ms = rc == KS_OK ? pj->out.compile_ms :
	    (double)(ks_now_ns() - w->job_ns) / 1e6;
	w->job = NULL;
	w->jobs++;
	w->rss = rss;
	if (p->stopping || (p->opts.recycle_jobs &&
	    w->jobs >= p->opts.recycle_jobs) || (p->opts.recycle_rss &&
	    rss >= p->opts.recycle_rss)) {
		if (!p->stopping)
			p->recycled++;
		retire(w);
	} else {
		w->state = WORKER_IDLE;
	}
	assert(worker_state_ok(w));
	pj->err = rc;
	pj->done(pj);
}

static void on_probe_reply(ks_worker_t *w, const cJSON *j)
{
	ks_pool_t *p = w->pool;
	const cJSON *probe = cJSON_GetObjectItemCaseSensitive(j, "probe");
	const cJSON *wit = cJSON_GetObjectItemCaseSensitive(j, "witness");
	char *json = NULL, *witness = NULL;

	w->probing = 0;
	if (cJSON_IsObject(probe))
		json = cJSON_PrintUnformatted(probe);
	if (cJSON_IsObject(wit))
		witness = cJSON_PrintUnformatted(wit);
	if (p->on_probe)
		p->on_probe(p, json ? KS_OK : KS_E_PROTO, json, witness);
	free(witness);
	free(json);
}

/* CHECKING -> IDLE: W answered its ping (J); 0, or -1 when J is not the
 * answer. */
static int on_pong(ks_worker_t *w, const cJSON *j)
{
	const cJSON *seq = cJSON_GetObjectItemCaseSensitive(j, "seq");

	assert(w->state == WORKER_CHECKING);
	if (!cJSON_IsNumber(seq) || seq->valuedouble != (double)w->seq ||
	    !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "ok")))
		return -1;
	uv_timer_stop(&w->deadline);
	w->state = WORKER_IDLE;
	assert(worker_state_ok(w));
	return 0;
}

/* One complete frame from W; W is heard while it is handled. */
static void on_frame(ks_worker_t *w, const char *hdr, size_t hl,
    const uint8_t *payload, size_t pl)
{
	ks_pool_t *p = w->pool;
	const char *bad = NULL;
	cJSON *j = NULL;

	p->heard = w;
	if (w->state == WORKER_BUSY) {
		on_result(w, hdr, hl, payload, pl);
		kick(p);
		p->heard = NULL;
		return;
	}
	j = ks_wire_header_parse(hdr, hl);
	if (w->state == WORKER_STARTING) {
		if (!cJSON_IsObject(j) || on_ready_msg(w, j) != 0)
			bad = "its ready message was malformed";
	} else if (w->state == WORKER_CHECKING) {
		if (on_pong(w, j) != 0)
			bad = "it answered a ping with something else";
	} else if (w->probing) {
		on_probe_reply(w, j);
	} else {
		bad = "it sent a message nobody asked for";
	}
	cJSON_Delete(j);
	if (bad)
		kill_worker(w, bad);
	else
		kick(p);
	p->heard = NULL;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	ks_worker_t *w = h->data;

	if (ks_buf_reserve(&w->in, 65536) != KS_OK) {
		buf->base = NULL;
		buf->len = 0;
		return;
	}
	buf->base = w->in.data + w->in.len;
	buf->len = w->in.cap - w->in.len - 1;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	ks_worker_t *w = s->data;
	uint32_t hl, pl;
	size_t off = 0;
	int rc;

	if (n < 0) {
		/* The worker closed its end: it is exiting or broken. */
		close_chan(w);
		kill_worker(w, "it closed its channel");
		return;
	}
	w->in.len += (size_t)n;
	while (w->chan_open && w->state != WORKER_DEAD) {
		rc = ks_frame_peek((const uint8_t *)w->in.data + off,
		    w->in.len - off, KS_WIRE_MAX_HEADER, KS_WIRE_MAX_PAYLOAD,
		    &hl, &pl);
		if (rc == 1 || (rc == KS_OK && w->in.len - off <
		    KS_FRAME_PREFIX + (size_t)hl + pl))
			break;
		if (rc < 0) {
			kill_worker(w, "it sent a malformed frame");
			break;
		}
		on_frame(w, w->in.data + off + KS_FRAME_PREFIX, hl,
		    (const uint8_t *)w->in.data + off + KS_FRAME_PREFIX + hl,
		    pl);
		off += KS_FRAME_PREFIX + (size_t)hl + pl;
	}
	if (off) {
		memmove(w->in.data, w->in.data + off, w->in.len - off);
		w->in.len -= off;
	}
}

/* ---- spawning ---- */

static int spawn_one(ks_pool_t *p)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	char fdnum[16], mem[32], parent[32];
	char *argv[9];
	sigset_t none, all;
	ks_worker_t *w;
	int sv[2], child, rc;

	w = calloc(1, sizeof *w);
	if (!w)
		return KS_E_NOMEM;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
		rc = ks_err_from_errno(errno);
		free(w);
		return rc;
	}
	/* Keep the child's end off fd 3 itself: a dup2 onto the same
	 * number would leave it close-on-exec. */
	child = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
	close(sv[1]);
	if (child < 0) {
		close(sv[0]);
		free(w);
		return KS_E_IO;
	}
	snprintf(fdnum, sizeof fdnum, "3");
	snprintf(mem, sizeof mem, "%" PRIu64, p->opts.memory_bytes);
	snprintf(parent, sizeof parent, "%ld", (long)getpid());
	argv[0] = "kspecd-worker";
	argv[1] = "--worker";
	argv[2] = fdnum;
	argv[3] = "--worker-memory";
	argv[4] = mem;
	argv[5] = "--worker-parent";
	argv[6] = parent;
	argv[7] = NULL;
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, child, 3);
	/* Descriptors the daemon inherited without close-on-exec too. */
	posix_spawn_file_actions_addclosefrom_np(&fa, 4);
	posix_spawnattr_init(&at);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK |
	    POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSID);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &all);
	rc = posix_spawn(&w->pid, p->opts.exe, &fa, &at, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(child);
	if (rc != 0) {
		ks_log(KS_LOG_ERROR, "cannot start a compile worker (%s): %s",
		    p->opts.exe, strerror(rc));
		close(sv[0]);
		free(w);
		return KS_E_IO;
	}
	w->pidfd = (int)syscall(SYS_pidfd_open, w->pid, 0);
	if (w->pidfd < 0 && !uv_is_active((uv_handle_t *)&p->sigchld)) {
		ks_log(KS_LOG_INFO, "pidfd_open: %s; watching workers through "
		    "SIGCHLD", strerror(errno));
		uv_signal_start(&p->sigchld, on_sigchld, SIGCHLD);
	}
	w->pool = p;
	w->state = WORKER_STARTING;
	w->started_ns = ks_now_ns();
	ks_buf_init(&w->in);
	w->open_handles = 2;
	if (w->pidfd >= 0) {
		uv_poll_init(p->loop, &w->exitw, w->pidfd);
		w->exitw.data = w;
		uv_poll_start(&w->exitw, UV_READABLE, on_exit_readable);
		w->open_handles++;
	}
	uv_pipe_init(p->loop, &w->chan, 0);
	w->chan.data = w;
	uv_pipe_open(&w->chan, sv[0]);
	w->chan_open = 1;
	uv_read_start((uv_stream_t *)&w->chan, on_alloc, on_read);
	uv_timer_init(p->loop, &w->deadline);
	w->deadline.data = w;
	uv_timer_start(&w->deadline, on_deadline, START_DEADLINE_MS, 0);
	w->next = p->workers;
	p->workers = w;
	p->nlive++;
	p->started++;
	return KS_OK;
}

static void spawn_missing(ks_pool_t *p);

static void on_respawn(uv_timer_t *t)
{
	ks_pool_t *p = t->data;

	spawn_missing(p);
}

/* Brings the pool back to OPTS.workers live workers and the reserve's;
 * after start failures in a row, only once a pause has passed. */
static void spawn_missing(ks_pool_t *p)
{
	uint64_t pause;

	if (p->stopping || uv_is_active((uv_handle_t *)&p->respawn))
		return;
	if (p->failing > 0 && !p->paused) {
		pause = (uint64_t)RESPAWN_BASE_MS << (p->failing > 8 ? 7 :
		    p->failing - 1);
		if (pause > RESPAWN_MAX_MS)
			pause = RESPAWN_MAX_MS;
		p->paused = 1;
		uv_timer_start(&p->respawn, on_respawn, pause, 0);
		return;
	}
	p->paused = 0;
	while (p->nlive < p->opts.workers + KS_POOL_RESERVE)
		if (spawn_one(p) != KS_OK) {
			p->start_failures++;
			p->failing++;
			spawn_missing(p);
			return;
		}
}

/* 1 while the pool holds work for an idle worker: the probe, or a job in
 * its queue. */
static int work_waiting(const ks_pool_t *p)
{
	return p->probe_wanted || (p->queue_head && !p->stopping);
}

/* Pings every idle worker while work waits for one. */
static void ping_idle(ks_pool_t *p)
{
	ks_worker_t *w;

	for (w = p->workers; w && work_waiting(p); w = w->next)
		if (w->state == WORKER_IDLE && !w->probing)
			send_ping(w);
}

/* Gives waiting work (the probe first, else the oldest queued job) to the
 * worker being heard, pings the idle others while work still waits, then
 * tells the flight layer if the pool can take more. */
static void kick(ks_pool_t *p)
{
	ks_worker_t *w = p->heard;
	ks_pool_job_t *pj;

	if (w && w->state == WORKER_IDLE && !w->probing && work_waiting(p)) {
		if (p->probe_wanted) {
			send_probe(w);
		} else {
			pj = queue_pop(p);
			if (send_job(w, pj) != KS_OK)
				job_end(pj, KS_E_INTERNAL, "cannot send the "
				    "compile to a worker");
		}
	}
	ping_idle(p);
	assert(pool_state_ok(p));
	if (p->on_idle && (ks_pool_idle(p) > 0 || ks_pool_reserve_idle(p)))
		p->on_idle(p);
}

/* ---- the interface ---- */

int ks_pool_init(ks_pool_t *p, uv_loop_t *loop, const ks_pool_opts_t *opts,
    void *owner)
{
	memset(p, 0, sizeof *p);
	p->loop = loop;
	p->opts = *opts;
	p->owner = owner;
	p->exe_fd = -1;
	if (!p->opts.exe) {
		/*
		 * The running binary, pinned: a descriptor of /proc/self/exe,
		 * executed through /proc/PID/fd/N, still names this image when
		 * an upgrade has replaced the file (and, unlike exec of
		 * /proc/self/exe itself, names the program rather than the
		 * tool when the daemon runs under valgrind).
		 */
		p->exe_fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
		if (p->exe_fd >= 0)
			snprintf(p->exe, sizeof p->exe, "/proc/%ld/fd/%d",
			    (long)getpid(), p->exe_fd);
		else
			snprintf(p->exe, sizeof p->exe, "/proc/self/exe");
		p->opts.exe = p->exe;
	}
	uv_timer_init(loop, &p->respawn);
	p->respawn.data = p;
	uv_unref((uv_handle_t *)&p->respawn);
	uv_signal_init(loop, &p->sigchld);
	p->sigchld.data = p;
	uv_unref((uv_handle_t *)&p->sigchld);
	spawn_missing(p);
	return p->nlive > 0 ? KS_OK : KS_E_IO;
}

void ks_pool_probe(ks_pool_t *p)
{
	p->probe_wanted = 1;
	kick(p);
}

/* Workers free for a job (idle or being pinged, no probe), less the jobs
 * queued; and the jobs taken in each slot (on workers or queued). */
static int census(const ks_pool_t *p, int *ordinary, int *reserve)
{
	const ks_pool_job_t *pj;
	const ks_worker_t *w;
	int avail = 0;

	*ordinary = *reserve = 0;
	for (w = p->workers; w; w = w->next) {
		if ((w->state == WORKER_IDLE || w->state == WORKER_CHECKING) &&
		    !w->probing)
			avail++;
		else if (w->state == WORKER_BUSY)
			++*(w->job->reserve ? reserve : ordinary);
	}
	for (pj = p->queue_head; pj; pj = pj->next) {
		avail--;
		++*(pj->reserve ? reserve : ordinary);
	}
	return avail;
}

int ks_pool_idle(const ks_pool_t *p)
{
	int ordinary, reserve, avail = census(p, &ordinary, &reserve);

	if (p->stopping || avail <= 0 || ordinary >= p->opts.workers)
		return 0;
	return avail < p->opts.workers - ordinary ? avail :
	    p->opts.workers - ordinary;
}

int ks_pool_reserve_idle(const ks_pool_t *p)
{
	int ordinary, reserve, avail = census(p, &ordinary, &reserve);

	return !p->stopping && avail > 0 && reserve < KS_POOL_RESERVE;
}

int ks_pool_submit(ks_pool_t *p, ks_pool_job_t *pj)
{
	ks_worker_t *w;

	assert(pool_state_ok(p));
	if (p->stopping)
		return KS_E_SHUTTING_DOWN;
	if (pj->reserve ? !ks_pool_reserve_idle(p) : ks_pool_idle(p) <= 0)
		return KS_E_BUSY;
	pj->attempts = 0;
	pj->err = KS_OK;
	pj->errmsg[0] = '\0';
	memset(&pj->out, 0, sizeof pj->out);
	/* Until a worker takes it (a job ended unsent counts from here). */
	pj->compile_ms = 0;
	pj->started_ns = ks_now_ns();
	pj->pid = 0;
	w = p->heard;
	if (w && w->state == WORKER_IDLE && !w->probing)
		return send_job(w, pj);
	/* Held until an idle worker answers its ping (kick). */
	queue_push(p, pj);
	ping_idle(p);
	return KS_OK;
}

void ks_pool_stop(ks_pool_t *p)
{
	ks_worker_t *w, *next;
	ks_pool_job_t *pj;

	if (p->stopping)
		return;
	p->stopping = 1;
	uv_timer_stop(&p->respawn);
	uv_close((uv_handle_t *)&p->respawn, NULL);
	/* SIGCHLD is still wanted until the last worker is reaped; the
	 * handle does not keep the loop alive, the workers' channels do. */
	while ((pj = queue_pop(p)))
		job_end(pj, KS_E_SHUTTING_DOWN, "daemon stopped before this "
		    "compile started");
	for (w = p->workers; w; w = next) {
		next = w->next;
		if (w->state == WORKER_IDLE || w->state == WORKER_CHECKING ||
		    w->state == WORKER_STARTING) {
			p->nlive--;
			w->state = WORKER_RETIRING;
			close_chan(w);
			kill_worker(w, "the daemon is stopping");
		}
	}
	/* No job waits once the pool is stopping (a lost one is not
	 * retried, job_lost). */
	assert(!p->queue_head && pool_state_ok(p));
}

void ks_pool_close(ks_pool_t *p)
{
	if (!uv_is_closing((uv_handle_t *)&p->sigchld))
		uv_close((uv_handle_t *)&p->sigchld, NULL);
	if (p->exe_fd >= 0)
		close(p->exe_fd);
	p->exe_fd = -1;
}

void ks_pool_each(ks_pool_t *p, void (*fn)(void *ctx, const ks_worker_t *w),
    void *ctx)
{
	const ks_worker_t *w;

	for (w = p->workers; w; w = w->next)
		fn(ctx, w);
}
