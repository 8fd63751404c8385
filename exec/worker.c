/*
 * The compile worker (exec.h): one process, one job at a time, on a
 * socketpair to the daemon.
 *
 * Hygiene, set up before anything else runs here:
 * - PR_SET_PDEATHSIG(SIGKILL): the worker dies with the daemon's thread
 *   that spawned it (the loop thread, which lives as long as the daemon),
 *   so a kill -9 of the daemon leaves no orphan; a daemon that died before
 *   the prctl is caught by comparing getppid() with the pid it passed.
 * - The daemon spawned it in a session of its own with the default signal
 *   dispositions and an empty mask, so a terminal's Ctrl-C does not reach
 *   it; the daemon stops it by closing the channel (or SIGKILL).
 * - SIGPIPE is ignored: a parent gone mid-reply is an EPIPE, then exit.
 * - MEMORY_BYTES becomes RLIMIT_DATA (private writable and anonymous
 *   memory: the heap, GCC's garbage-collected pages, LLVM's allocations),
 *   which leaves the address space the shared libraries and PoCL's
 *   mappings reserve alone; a compile that runs out dies or fails here,
 *   not in the daemon.
 *
 * Test faults, in the test build only (-DKS_TEST_PLANT: the workers of
 * tests/kspecd-plant; the installed kspecd has no such code and reads no
 * KSPEC_TEST_* variable).  KSPEC_TEST_FAULTS (tests set it on the test
 * daemon, whose workers inherit it) is a comma-separated list of
 * ACTION:DIM=VALUE[@ONCE], applied to a compile job whose spec has the
 * constant DIM=VALUE, before compiling:
 *   delay  sleep 1 s, or MS milliseconds for delay/MS, then compile (a
 *          slow compile)
 *   stall  sleep until killed (a hung compiler)
 *   hold   for hold/PATH: wait until the file PATH exists (at most 60 s),
 *          then compile (a slow compile that the test ends when it has
 *          seen what it waits for, not after a guessed time)
 *   crash  raise SIGSEGV (a compiler crash)
 *   exit   exit with status 3
 *   error  fail the job as a compile error would (E_COMPILE, "a compile
 *          error planted by KSPEC_TEST_FAULTS"): the same on every node
 *   oom    allocate and touch memory until an allocation fails, then
 *          abort (a runaway compile at the memory limit)
 * With @ONCE (a file path), the fault fires only in the worker that
 * creates that file first, so a retry of the job succeeds.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../proto/proto.h"
#include "exec.h"

/* ---- test faults (the test build only) ---- */

#ifdef KS_TEST_PLANT

#define MAX_FAULTS 8

typedef struct {
	char action[8];
	long ms;                         /* delay */
	char path[256];                  /* hold */
	char dim[KS_MAX_NAME + 1];
	int64_t value;
	char once[256];
} fault_t;

static fault_t faults[MAX_FAULTS];
static int nfaults;

static void faults_parse(const char *spec)
{
	char buf[2048], *save = NULL, *tok;

	if (!spec || !*spec)
		return;
	snprintf(buf, sizeof buf, "%s", spec);
	for (tok = strtok_r(buf, ",", &save); tok && nfaults < MAX_FAULTS;
	    tok = strtok_r(NULL, ",", &save)) {
		fault_t *f = &faults[nfaults];
		char *colon = strchr(tok, ':'), *eq, *at;

		if (!colon || !(eq = strchr(colon, '=')))
			continue;
		*colon = *eq = '\0';
		if ((at = strchr(eq + 1, '@'))) {
			*at = '\0';
			snprintf(f->once, sizeof f->once, "%s", at + 1);
		}
		f->ms = 1000;
		if (strncmp(tok, "hold/", 5) == 0) {
			snprintf(f->path, sizeof f->path, "%s", tok + 5);
			tok[4] = '\0';
		} else if (strchr(tok, '/')) {
			f->ms = strtol(strchr(tok, '/') + 1, NULL, 10);
			*strchr(tok, '/') = '\0';
		}
		snprintf(f->action, sizeof f->action, "%s", tok);
		snprintf(f->dim, sizeof f->dim, "%s", colon + 1);
		f->value = strtoll(eq + 1, NULL, 10);
		nfaults++;
	}
}

static int fault_applies(const fault_t *f, const ks_job_t *job)
{
	int i, fd;

	for (i = 0; i < job->spec.ndims; i++) {
		const ks_dim_t *d = &job->spec.dims[i];

		if (d->is_const && d->value == f->value &&
		    strcmp(d->name, f->dim) == 0)
			break;
	}
	if (i == job->spec.ndims)
		return 0;
	if (!f->once[0])
		return 1;
	fd = open(f->once, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return 0;
	close(fd);
	return 1;
}

/* Applies the faults of JOB; KS_E_COMPILE with ERR when one is "error",
 * else KS_OK (after the delay, or never: the others end the process). */
static int faults_apply(const ks_job_t *job, char *err, size_t errlen)
{
	struct rlimit none = { 0, 0 };
	int i;

	for (i = 0; i < nfaults; i++) {
		const fault_t *f = &faults[i];

		if (!fault_applies(f, job))
			continue;
		ks_log(KS_LOG_WARN, "test fault: %s", f->action);
		if (strcmp(f->action, "delay") == 0) {
			struct timespec ts = { f->ms / 1000,
			    (f->ms % 1000) * 1000000 };

			while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
				;
		} else if (strcmp(f->action, "hold") == 0) {
			struct timespec ts = { 0, 10 * 1000000 };
			int tick;

			for (tick = 0; tick < 6000 &&
			    access(f->path, F_OK) != 0; tick++)
				nanosleep(&ts, NULL);
		} else if (strcmp(f->action, "stall") == 0) {
			for (;;)
				pause();
		} else if (strcmp(f->action, "crash") == 0) {
			/* Libraries loaded by a probe (LLVM's, NVRTC's) may
			 * have taken SIGSEGV; a crash ends the process. */
			setrlimit(RLIMIT_CORE, &none);
			signal(SIGSEGV, SIG_DFL);
			raise(SIGSEGV);
		} else if (strcmp(f->action, "exit") == 0) {
			_exit(3);
		} else if (strcmp(f->action, "error") == 0) {
			snprintf(err, errlen, "a compile error planted by "
			    "KSPEC_TEST_FAULTS");
			return KS_E_COMPILE;
		} else if (strcmp(f->action, "oom") == 0) {
			void *p;

			setrlimit(RLIMIT_CORE, &none);
			while ((p = malloc(16u << 20)))
				memset(p, 1, 16u << 20);
			signal(SIGABRT, SIG_DFL);
			abort();
		}
	}
	return KS_OK;
}

#endif

/* ---- the channel ---- */

static int read_full(int fd, void *p, size_t n)
{
	char *c = p;

	while (n) {
		ssize_t r = read(fd, c, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		c += r;
		n -= (size_t)r;
	}
	return 0;
}

static int write_full(int fd, const void *a, size_t alen, const void *b,
    size_t blen)
{
	struct iovec iov[2] = { { (void *)a, alen }, { (void *)b, blen } };
	int n = blen ? 2 : 1, i = 0;

	while (i < n) {
		ssize_t w = writev(fd, iov + i, n - i);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		while (i < n && (size_t)w >= iov[i].iov_len) {
			w -= (ssize_t)iov[i].iov_len;
			i++;
		}
		if (i < n) {
			iov[i].iov_base = (char *)iov[i].iov_base + w;
			iov[i].iov_len -= (size_t)w;
		}
	}
	return 0;
}

static uint64_t rss_bytes(void)
{
	unsigned long size = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "re");

	if (!f)
		return 0;
	if (fscanf(f, "%lu %lu", &size, &resident) != 2)
		resident = 0;
	fclose(f);
	return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

static int send_ready(int fd)
{
	const ks_kernel_def_t *const *all;
	char hex[KS_HASH_HEX];
	ks_buf_t b;
	size_t at;
	int i, n, rc;

	ks_buf_init(&b);
	ks_buf_append(&b, "\0\0\0\0\0\0\0\0", KS_FRAME_PREFIX);
	at = b.len;
	ks_buf_printf(&b, "{\"op\":\"ready\",\"pid\":%ld,\"channel\":%d,"
	    "\"codegen\":%d,\"fingerprints\":[", (long)getpid(),
	    KS_WORKER_CHANNEL, KS_CODEGEN_VERSION);
	all = ks_kernels(&n);
	for (i = 0; i < n; i++) {
		const ks_hash_t *h = ks_kernel_fingerprint(all[i]);

		if (!h) {
			ks_buf_close(&b);
			return -1;
		}
		ks_hash_hex(h, hex);
		ks_buf_printf(&b, "%s\"%s\"", i ? "," : "", hex);
	}
	ks_buf_puts(&b, "]}");
	if (!b.data) {
		ks_buf_close(&b);
		return -1;
	}
	ks_frame_prefix((uint8_t *)b.data, (uint32_t)(b.len - at), 0);
	rc = write_full(fd, b.data, b.len, NULL, 0);
	ks_buf_close(&b);
	return rc;
}

/* Answers request SEQ: {"seq":S,"ok":true} with the probe in it when
 * PROBE, else nothing more (a ping's answer). */
static int reply_ok(int fd, uint64_t seq, int probe)
{
	ks_buf_t b;
	int rc;

	ks_buf_init(&b);
	ks_buf_append(&b, "\0\0\0\0\0\0\0\0", KS_FRAME_PREFIX);
	ks_buf_printf(&b, "{\"seq\":%" PRIu64 ",\"ok\":true", seq);
	if (probe) {
#ifdef KS_TEST_PLANT
		/* A slow probe, for the tests of what a restarted daemon
		 * answers while its probe runs. */
		const char *delay = getenv("KSPEC_TEST_PLANT_PROBE_DELAY_MS");

		if (delay && *delay) {
			long ms = strtol(delay, NULL, 10);
			struct timespec ts = { ms / 1000,
			    (ms % 1000) * 1000000 };

			while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
				;
		}
#endif
		ks_buf_puts(&b, ",\"probe\":");
		ks_exec_probe(&b);
		/* After the probe: the libraries it loaded are mapped now. */
		ks_buf_puts(&b, ",\"witness\":");
		if (ks_exec_witness(&b) != KS_OK)
			ks_buf_puts(&b, "null");
	}
	ks_buf_puts(&b, "}");
	if (!b.data)
		return -1;
	ks_frame_prefix((uint8_t *)b.data, (uint32_t)(b.len -
	    KS_FRAME_PREFIX), 0);
	rc = write_full(fd, b.data, b.len, NULL, 0);
	ks_buf_close(&b);
	return rc;
}

/* A canary's outcome in the form of a job's (exec.h): the summary as
 * the payload. */
static int canary_out(const ks_job_t *job, ks_job_out_t *out, char *err,
    size_t errlen)
{
	char summary[512];
	double ms = 0;
	int rc;

	rc = ks_canary_run(job, summary, sizeof summary, &ms, err, errlen);
	if (rc != KS_OK)
		return rc;
	out->len = strlen(summary);
	out->bytes = (uint8_t *)strdup(summary);
	out->params = strdup("[]");
	out->launch = strdup("{}");
	if (!out->bytes || !out->params || !out->launch) {
		ks_job_out_close(out);
		return KS_E_NOMEM;
	}
	strcpy(out->variant, "canary");
	strcpy(out->format, "txt");
	out->compile_ms = ms;
	return KS_OK;
}

static int reply_compile(int fd, const char *hdr, size_t len)
{
	char err[1024];
	ks_job_out_t out;
	ks_job_t job;
	uint64_t seq = 0;
	ks_buf_t b;
	int rc, wrc;

	err[0] = '\0';
	memset(&out, 0, sizeof out);
	rc = ks_wire_job_decode(hdr, len, &job, &seq, err, sizeof err);
	if (rc == KS_OK && job.canary) {
		rc = canary_out(&job, &out, err, sizeof err);
	} else if (rc == KS_OK) {
#ifdef KS_TEST_PLANT
		rc = faults_apply(&job, err, sizeof err);
#endif
		if (rc == KS_OK)
			rc = ks_job_run(&job, &out, err, sizeof err);
		/* Out of memory inside a compile is the memory limit. */
		if (rc == KS_E_NOMEM) {
			rc = KS_E_COMPILE_OOM;
			snprintf(err, sizeof err, "the compile ran out of "
			    "memory");
		}
	}
	ks_buf_init(&b);
	if (ks_wire_out_encode(seq, rc, err, &out, rss_bytes(), &b) != KS_OK)
		return -1;
	wrc = write_full(fd, b.data, b.len, out.bytes, rc == KS_OK ?
	    out.len : 0);
	ks_buf_close(&b);
	ks_job_out_close(&out);
	return wrc;
}

/*
 * What a compile leaves behind in this process (libgccjit's allocators and
 * tables, PoCL's and NVRTC's state) changes the next compile's register
 * choices: one key compiled after another history gave other bytes.  So
 * every request that compiles runs in a fork of this worker, taken in the
 * state of its start (the one-time setup done), whose reply it writes;
 * the worker waits for it and ends as it ended (the same signal or exit
 * status), so that a crash, a memory limit or a planted fault reads to
 * the daemon as before.  A fork dies with the worker (a deadline kills
 * the worker).
 */
static int in_fork(int fd, const char *hdr, size_t len,
    int (*fn)(int fd, const char *hdr, size_t len))
{
	struct rlimit none = { 0, 0 };
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return fn(fd, hdr, len);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		_exit(fn(fd, hdr, len) != 0 ? 1 : 0);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFSIGNALED(st)) {
		setrlimit(RLIMIT_CORE, &none);
		signal(WTERMSIG(st), SIG_DFL);
		raise(WTERMSIG(st));
		_exit(128 + WTERMSIG(st));
	}
	if (WEXITSTATUS(st) != 0)
		_exit(WEXITSTATUS(st));
	return 0;
}

static const char *op_of(const char *hdr, size_t len, uint64_t *seq);

static int probe_reply(int fd, const char *hdr, size_t len)
{
	uint64_t seq;

	op_of(hdr, len, &seq);
	return reply_ok(fd, seq, 1);
}

/* The setup every fork starts from: the compilers' build names, read by
 * an empty compile once (cpu_identity), so no fork does it. */
static void warm_identities(void)
{
	const ks_backend_t *be = ks_backend_find("cpu");
	ks_buf_t id;

	ks_buf_init(&id);
	if (be && be->identity)
		be->identity("x86-64", &id);
	ks_buf_close(&id);
}

static const char *op_of(const char *hdr, size_t len, uint64_t *seq)
{
	static char op[16];
	cJSON *j = ks_wire_header_parse(hdr, len);
	const cJSON *v;

	op[0] = '\0';
	*seq = 0;
	v = cJSON_GetObjectItemCaseSensitive(j, "op");
	if (cJSON_IsString(v))
		snprintf(op, sizeof op, "%s", v->valuestring);
	v = cJSON_GetObjectItemCaseSensitive(j, "seq");
	if (cJSON_IsNumber(v) && v->valuedouble >= 0)
		*seq = (uint64_t)v->valuedouble;
	cJSON_Delete(j);
	return op;
}

int ks_worker_main(int fd, uint64_t memory_bytes, long parent)
{
	uint8_t pre[KS_FRAME_PREFIX];
	uint32_t hl, pl;
	char *hdr = NULL;
	uint64_t seq;
	const char *op;
	int rc;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (parent > 0 && getppid() != (pid_t)parent)
		return 1;
	ks_log_set_name("kspecd-worker");
	signal(SIGPIPE, SIG_IGN);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	/* A sanitizer's shadow memory needs far more address space and data
	 * than any limit meant for a compile. */
	memory_bytes = 0;
#endif
	if (memory_bytes) {
		struct rlimit rl = { memory_bytes, memory_bytes };

		if (setrlimit(RLIMIT_DATA, &rl) != 0)
			ks_log(KS_LOG_WARN, "cannot limit memory to %" PRIu64
			    " bytes: %s", memory_bytes, strerror(errno));
	}
#ifdef KS_TEST_PLANT
	faults_parse(getenv("KSPEC_TEST_FAULTS"));
#endif
	if (ks_base_init() != KS_OK)
		return 1;
	warm_identities();
	if (send_ready(fd) != 0)
		return 1;
	hdr = malloc(KS_WIRE_MAX_HEADER);
	if (!hdr)
		return 1;
	for (;;) {
		if (read_full(fd, pre, sizeof pre) != 0) {
			rc = 0;         /* the parent closed the channel */
			break;
		}
		if (ks_frame_peek(pre, sizeof pre, KS_WIRE_MAX_HEADER, 0, &hl,
		    &pl) != KS_OK || read_full(fd, hdr, hl) != 0) {
			ks_log(KS_LOG_ERROR, "bad frame from the daemon");
			rc = 1;
			break;
		}
		op = op_of(hdr, hl, &seq);
		if (strcmp(op, "compile") == 0 || strcmp(op, "canary") == 0)
			rc = in_fork(fd, hdr, hl, reply_compile);
		else if (strcmp(op, "probe") == 0)
			rc = in_fork(fd, hdr, hl, probe_reply);
		else if (strcmp(op, "ping") == 0)
			rc = reply_ok(fd, seq, 0);
		else
			rc = -1;
		if (rc != 0) {
			rc = 1;
			break;
		}
	}
	free(hdr);
	close(fd);
	return rc;
}
