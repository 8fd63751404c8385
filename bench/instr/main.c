/*
 * bench/instr: instructions per request, counted by callgrind, kspecd
 * beside redis-server in one run.  These machines are noisy; instruction
 * counts are not, so this is where a change to the hit path shows.
 *
 * The metric: the server's whole-process instructions (every thread)
 * while the client sends N requests on one connection, one in flight,
 * divided by N.  Collection is switched on only for those requests
 * (callgrind_control), after a warm-up.  Cases:
 *
 *   warm hit        the 96-byte get of a 5,648-byte artifact from the
 *                   memory tier, against redis GET of a value of the
 *                   artifact's size;
 *   --no-fast-path  the same warm hit, every get parsed in full;
 *   disk hit        the same get from the store on every request
 *                   (--hot-bytes 0, the daemon restarted on a warm store);
 *   start-up after listening
 *                   a daemon restarted on a warm store, from its socket's
 *                   first answer until stats says its probe is done: the
 *                   library's kernel fingerprints (computed on libuv's
 *                   pool at every start) and the probe's bookkeeping,
 *                   once, not per request;
 *   first get after a restart
 *                   64 distinct kernels, each fetched once by that
 *                   daemon, after its start-up: a full parse, the key, a
 *                   store read each, and the writer's flush of the uses;
 *   new header each time
 *                   gets of the cached artifact that all differ in white
 *                   space, so the fast path learns every one and serves
 *                   none: what a stream built to defeat it costs, beside
 *                   the same stream with --no-fast-path.
 *
 * The daemon's last_used bookkeeping runs on its writer thread once a
 * second and is counted where it falls inside a window; its cost per
 * distinct key is the difference between a window of 64 distinct hits and
 * one of 64 hits of one kernel, each with the flush that follows.
 *
 * With KSPEC_BENCH_KEEP set in the environment the callgrind dumps are
 * kept (their folder is printed) for callgrind_annotate: where a case's
 * instructions go.
 */
#include "../bench.h"
#include "../wire.h"

#define N_HITS 20000
#define N_OTHER 4000
#define N_KERNELS 64

static char dir[256];

/* A server under callgrind: its pid and the file of its counts. */
typedef struct {
	pid_t pid;
	char out[400];
	int dumps;
} cg_t;

static const char *const valgrind[] = {
	"valgrind", "--tool=callgrind", "--instr-atstart=no",
	"--trace-children=no", NULL, NULL,
};

static int have(const char *prog)
{
	char cmd[256];

	snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", prog);
	return system(cmd) == 0;
}

static void cg_prefix(cg_t *c, const char *tag, const char **argv, int *n)
{
	static char opt[512];
	int i;

	snprintf(c->out, sizeof c->out, "%s/cg.%s", dir, tag);
	snprintf(opt, sizeof opt, "--callgrind-out-file=%s", c->out);
	for (i = 0; valgrind[i]; i++)
		argv[(*n)++] = valgrind[i];
	argv[(*n)++] = opt;
}

static int ctl(const cg_t *c, const char *what)
{
	char cmd[128];

	snprintf(cmd, sizeof cmd, "callgrind_control %s %d >/dev/null 2>&1",
	    what, (int)c->pid);
	return system(cmd);
}

/* Zero the counts and switch collection on. */
static void cg_begin(const cg_t *c)
{
	ctl(c, "-z");
	ctl(c, "-i on");
}

/* Switch collection off, dump, and return the instructions counted. */
static uint64_t cg_end(cg_t *c)
{
	char path[450], line[256];
	uint64_t total = 0;
	FILE *f;
	int i;

	ctl(c, "-i off");
	ctl(c, "-d");
	c->dumps++;
	snprintf(path, sizeof path, "%s.%d", c->out, c->dumps);
	for (i = 0; i < 500; i++) {     /* the dump is written async */
		f = fopen(path, "r");
		if (f) {
			while (fgets(line, sizeof line, f))
				if (sscanf(line, "totals: %lu", &total) == 1)
					break;
			fclose(f);
			if (total)
				return total;
		}
		usleep(20000);
	}
	fprintf(stderr, "instr: no counts in %s\n", path);
	exit(1);
}

/* Starts kspecd on the bench's store, under callgrind when C is not NULL,
 * with the NULL-terminated EXTRA arguments. */
static pid_t start_kspecd(cg_t *c, const char *tag, const char *sock,
    const char *const *extra)
{
	const char *argv[48];
	char bin[512], store[300];
	int n = 0, i;
	pid_t pid;

	snprintf(bin, sizeof bin, "%s/kspecd", e2e_build_dir());
	snprintf(store, sizeof store, "%s/store/kspec.db", dir);
	if (c)
		cg_prefix(c, tag, argv, &n);
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = sock;
	argv[n++] = "--store";
	argv[n++] = store;
	argv[n++] = "--workers";
	argv[n++] = "1";
	for (i = 0; extra && extra[i]; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	pid = wire_spawn(argv);
	for (i = 0; pid > 0 && i < 12000; i++) {       /* 120 s */
		int fd = e2e_connect(sock);

		if (fd >= 0) {
			close(fd);
			if (c)
				c->pid = pid;
			return pid;
		}
		if (waitpid(pid, NULL, WNOHANG) == pid)
			break;
		usleep(10000);
	}
	fprintf(stderr, "instr: kspecd did not start\n");
	exit(1);
}

static void stop(pid_t pid)
{
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
}

/* Sends the N frames of REQS (one after another, each LENS[i] bytes; or
 * the one frame REQS[0] N times when ONE) on one connection, one in
 * flight; fails unless every reply is ok. */
static void send_all(const char *sock, int proto, char **reqs,
    const size_t *lens, int n, int one)
{
	rd_t *r = calloc(1, sizeof *r);
	int i, ok;

	if (!r || (r->fd = e2e_connect(sock)) < 0) {
		fprintf(stderr, "instr: cannot connect to %s\n", sock);
		exit(1);
	}
	for (i = 0; i < n; i++) {
		int k = one ? 0 : i;

		if (e2e_write_all(r->fd, reqs[k], lens[k]) ||
		    wire_read_reply(r, proto, &ok) || !ok) {
			fprintf(stderr, "instr: request %d of %d to %s %s: "
			    "%.*s\n", i, n, sock, ok ? "got no reply" :
			    "failed", (int)lens[k] - 8, reqs[k] + 8);
			exit(1);
		}
	}
	close(r->fd);
	free(r);
}

/* Waits (at most 10 minutes) until the daemon at SOCK says its start's
 * probe is done. */
static void wait_probe_done(const char *sock)
{
	e2e_reply_t r;
	int i, done = 0;

	for (i = 0; i < 12000 && !done; i++) {
		if (e2e_call(sock, "{\"op\":\"stats\"}", &r) == 0) {
			const cJSON *st = cJSON_GetObjectItemCaseSensitive(
			    cJSON_GetObjectItemCaseSensitive(r.h, "probe"),
			    "state");

			done = cJSON_IsString(st) &&
			    strcmp(st->valuestring, "done") == 0;
			e2e_reply_free(&r);
		}
		if (!done)
			usleep(50000);
	}
	if (!done) {
		fprintf(stderr, "instr: the probe did not end\n");
		exit(1);
	}
}

/* Instructions per request of SEND_ALL's requests, counted alone. */
static uint64_t counted(cg_t *c, const char *sock, int proto, char **reqs,
    const size_t *lens, int n, int one)
{
	cg_begin(c);
	send_all(sock, proto, reqs, lens, n, one);
	return cg_end(c) / (uint64_t)n;
}

/* The instructions of the N_KERNELS gets of REQS (one kernel N_KERNELS
 * times when ONE) and of the 2.5 s after them, in which the 1 s flush
 * timer writes what they touched. */
static uint64_t flush_window(cg_t *c, const char *sock, char **reqs,
    const size_t *lens, int one)
{
	cg_begin(c);
	send_all(sock, WIRE_KSPEC, reqs, lens, N_KERNELS, one);
	usleep(2500000);
	return cg_end(c);
}

/* The get of kernel I of the bench (a gemv of N = 64 + I), framed. */
static size_t kernel_get(char *out, size_t cap, int i, const char *pad)
{
	char json[512];

	snprintf(json, sizeof json, "{\"op\":\"get\",\"id\":%d,\"kernel\":"
	    "\"gemm\",%s\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":"
	    "{\"M\":1,\"N\":%d,\"K\":64}}", i + 1, pad, 64 + i);
	return wire_frame(out, cap, json);
}

static void row(const char *what, double k, double redis)
{
	if (redis > 0)
		printf("%-44s %10.0f %10.0f %7.2fx\n", what, k, redis,
		    k / redis);
	else
		printf("%-44s %10.0f\n", what, k);
}

int main(void)
{
	static char *frames[N_KERNELS], *distinct[N_OTHER];
	static size_t flen[N_KERNELS], dlen[N_OTHER];
	static char fbuf[N_KERNELS][512], dbuf[N_OTHER][600];
	const char *hot0[] = { "--hot-bytes", "0", NULL };
	const char *nofast[] = { "--no-fast-path", NULL };
	char sock[300], rsock[300], cmd[400], pad[192];
	uint64_t warm, first, disk, redis_get, nf_warm, nf_new, fp_new;
	uint64_t flush, idle, busy, startup;
	e2e_reply_t rep;
	pid_t plain, redis;
	cg_t c;
	int i;

	if (!have("valgrind") || !have("callgrind_control")) {
		fprintf(stderr, "instr: needs valgrind (deploy/deps.sh "
		    "--bench installs it)\n");
		return 1;
	}
	snprintf(dir, sizeof dir, "/tmp/kspec-e2e-XXXXXX");
	if (!mkdtemp(dir))
		return 1;
	snprintf(sock, sizeof sock, "%s/kspecd.sock", dir);
	for (i = 0; i < N_KERNELS; i++) {
		flen[i] = kernel_get(fbuf[i], sizeof fbuf[i], i, "");
		frames[i] = fbuf[i];
	}
	/* White space of every width at two places: all distinct. */
	for (i = 0; i < N_OTHER; i++) {
		int a = i % 64, b = i / 64;

		snprintf(pad, sizeof pad, "%*s\"mode\":%*s\"exact\",", a, "",
		    b, "");
		dlen[i] = kernel_get(dbuf[i], sizeof dbuf[i], 0, pad);
		distinct[i] = dbuf[i];
	}

	/* The warm store: the 64 kernels compiled by a plain daemon. */
	plain = start_kspecd(NULL, NULL, sock, NULL);
	send_all(sock, WIRE_KSPEC, frames, flen, N_KERNELS, 0);
	if (e2e_call(sock, "{\"op\":\"get\",\"id\":1,\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"N\":64,\"K\":64}}", &rep) || !e2e_ok(&rep)) {
		fprintf(stderr, "instr: get failed\n");
		return 1;
	}
	stop(plain);

	/* Restarted: the first get of each kernel, then warm hits, the
	 * flush, then a new header each time. */
	memset(&c, 0, sizeof c);
	start_kspecd(&c, "kspecd", sock, NULL);
	/* The start's own work after it listens (the library's kernel
	 * fingerprints on libuv's pool, the compilers' probe), counted
	 * until stats says the probe is done, apart from the first gets. */
	cg_begin(&c);
	wait_probe_done(sock);
	startup = cg_end(&c);
	/* With the flush of their uses, which a 1 s tick would otherwise
	 * put inside or outside the window by chance. */
	first = flush_window(&c, sock, frames, flen, 0) / N_KERNELS;
	send_all(sock, WIRE_KSPEC, frames, flen, 1000, 1);      /* warm-up */
	warm = counted(&c, sock, WIRE_KSPEC, frames, flen, N_HITS, 1);
	/* The writer's flush of last_used, per distinct key: a window in
	 * which the 64 kernels are each fetched once, less one in which one
	 * kernel is fetched 64 times, each window long enough for the 1 s
	 * flush timer to write what it touched. */
	usleep(1500000);                /* earlier uses flushed */
	idle = flush_window(&c, sock, frames, flen, 1);
	busy = flush_window(&c, sock, frames, flen, 0);
	flush = busy > idle ? (busy - idle) / (N_KERNELS - 1) : 0;
	/* Last: these headers take the fast path's slots. */
	fp_new = counted(&c, sock, WIRE_KSPEC, distinct, dlen, N_OTHER, 0);
	stop(c.pid);

	memset(&c, 0, sizeof c);
	start_kspecd(&c, "nofast", sock, nofast);
	send_all(sock, WIRE_KSPEC, frames, flen, 1000, 1);
	nf_warm = counted(&c, sock, WIRE_KSPEC, frames, flen, N_OTHER, 1);
	nf_new = counted(&c, sock, WIRE_KSPEC, distinct, dlen, N_OTHER, 0);
	stop(c.pid);

	memset(&c, 0, sizeof c);
	start_kspecd(&c, "disk", sock, hot0);
	send_all(sock, WIRE_KSPEC, frames, flen, 200, 1);
	disk = counted(&c, sock, WIRE_KSPEC, frames, flen, N_OTHER, 1);
	stop(c.pid);

	/* redis-server, a value of the artifact's size. */
	{
		const char *prefix[16];
		static char opt[512];
		char *g = (char *)WIRE_REDIS_GET;
		size_t glen = strlen(WIRE_REDIS_GET);
		int n = 0;

		memset(&c, 0, sizeof c);
		snprintf(c.out, sizeof c.out, "%s/cg.redis", dir);
		snprintf(opt, sizeof opt, "--callgrind-out-file=%s", c.out);
		for (i = 0; valgrind[i]; i++)
			prefix[n++] = valgrind[i];
		prefix[n++] = opt;
		prefix[n] = NULL;
		redis = wire_start_redis(dir, rsock, sizeof rsock, prefix, 60);
		if (redis < 0 || wire_redis_set(rsock, rep.payload, rep.len)) {
			fprintf(stderr, "instr: redis-server did not start "
			    "(deploy/deps.sh)\n");
			return 1;
		}
		c.pid = redis;
		send_all(rsock, WIRE_REDIS, &g, &glen, 1000, 1);
		redis_get = counted(&c, rsock, WIRE_REDIS, &g, &glen, N_HITS,
		    1);
		stop(redis);
	}

	printf("instructions per request (callgrind, the server's whole "
	    "process), one connection, one request in flight\n");
	printf("artifact and redis value: %zu bytes; request: a %zu-byte get\n\n",
	    rep.len, flen[0] - 8);
	printf("%-44s %10s %10s %8s\n", "", "kspecd", "redis GET", "ratio");
	row("warm hit (memory tier)", (double)warm, (double)redis_get);
	row("warm hit, --no-fast-path", (double)nf_warm, (double)redis_get);
	row("disk hit (--hot-bytes 0)", (double)disk, (double)redis_get);
	row("start-up after listening (fingerprints, probe)",
	    (double)startup, 0);
	row("first get after a restart, its use written", (double)first,
	    0);
	row("new header each time (fast path learns)", (double)fp_new, 0);
	row("new header each time, --no-fast-path", (double)nf_new, 0);
	row("last_used flush, per distinct key", (double)flush, 0);
	e2e_reply_free(&rep);
	if (getenv("KSPEC_BENCH_KEEP")) {
		printf("\ncallgrind dumps kept in %s (cg.TAG.N: the Nth "
		    "window of TAG; callgrind_annotate reads them)\n", dir);
		return 0;
	}
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "instr: could not remove %s\n", dir);
	return 0;
}
