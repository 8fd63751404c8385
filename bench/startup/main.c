/*
 * bench/startup: an inference server's startup, the 64 kernels of an
 * 8B-class model (bench/startup/model.py), measured in one run:
 *   (a) without kspec: each kernel specialized and compiled in-process with
 *       the cpu backend directly, then loaded;
 *   (b) a cold daemon: a Python process fetches them with one pipelined
 *       get_many and loads them (client/python), with one compile worker
 *       and with as many as CPUs (the default);
 *   (d) the daemon restarted on the warm store (memory tier empty);
 *   (c) then the same gets again, warm (memory tier);
 *   and (c), (d) again with the C client (include/kspec.h: kspec_get_many,
 *   kspec_cpu_load), what a server written in C or C++ pays.
 * Times are the client's own (get_many + load, or compile + load), not
 * process start, with the fetch (get_many) and the loads also apart for
 * (b)-(d).  TRIALS rounds, each with a fresh store; medians.
 *
 * --warm-only: (c) and (d) alone, WARM_TRIALS rounds on one store filled
 * once (the cold cases take minutes; these take seconds), then (e): the
 * store alone, with the daemon stopped, WARM_TRIALS fresh processes (this
 * program again, --lookups) that each open it and look every artifact up
 * into a memory tier, as a restarted daemon's disk hits do, and report
 * their CPU time and page faults.
 */
#include "../../tests/e2e.h"
#include "../../jit/jit.h"
#include "../../specialize/specialize.h"
#include "../bench.h"
#include "../../include/kspec.h"
#include "../../store/store.h"

#include <sys/resource.h>

#define TRIALS 5
#define WARM_TRIALS 15
#define MAX_TRIALS WARM_TRIALS
#define NK 64

typedef struct {
	char dtype[8];
	int64_t m, n, k;
} kspec_t;

static kspec_t model[NK];

static int read_model(void)
{
	FILE *p = popen("/usr/bin/python3 bench/startup/model.py", "r");
	int i;

	if (!p)
		return -1;
	for (i = 0; i < NK; i++)
		if (fscanf(p, "%7s %ld %ld %ld", model[i].dtype, &model[i].m,
		    &model[i].n, &model[i].k) != 4)
			break;
	pclose(p);
	return i == NK ? 0 : -1;
}

/* (a): specialize + compile + load every kernel in this process. */
static double in_process(void)
{
	char target[64], err[512];
	uint64_t t0 = bench_ns();
	int i;

	ks_backend_cpu.resolve_target("auto", target, sizeof target, err,
	    sizeof err);
	for (i = 0; i < NK; i++) {
		const ks_kernel_def_t *def = ks_kernel_find("gemm");
		ks_dim_t dims[3] = {
			{ "M", model[i].m != 0, model[i].m },
			{ "N", 1, model[i].n }, { "K", 1, model[i].k } };
		ks_jit_artifact_t a;
		ks_ir_kernel_t *k;
		ks_dtype_t dt;
		ks_spec_t spec;
		ks_so_t *lib;
		void *sym;

		ks_dtype_parse(model[i].dtype, &dt);
		if (ks_kernel_validate(def, dt, KS_MODE_EXACT, dims, 3, &spec,
		    err, sizeof err) || ks_specialize(&spec, &k, err,
		    sizeof err) || ks_backend_cpu.compile(k, target, "so", &a,
		    err, sizeof err) || ks_so_load(a.bytes, a.len, k->entry,
		    &lib, &sym, err, sizeof err)) {
			fprintf(stderr, "startup: in-process compile: %s\n",
			    err);
			exit(1);
		}
		ks_so_unload(lib);
		ks_jit_artifact_close(&a);
		ks_ir_free(k);
	}
	return (double)(bench_ns() - t0) / 1e6;
}

/* Runs the Python client against SOCK; returns its total ms (fetch and
 * load apart in *FETCH and *LOAD) and checks the reply sources. */
static double python_client(const char *sock, const char *want,
    double *fetch, double *load)
{
	char cmd[512], line[256];
	double f = -1, l = -1;
	FILE *p;

	snprintf(cmd, sizeof cmd, "/usr/bin/python3 bench/startup/client.py "
	    "%s", sock);
	p = popen(cmd, "r");
	if (p && fgets(line, sizeof line, p)) {
		if (sscanf(line, "%lf %lf", &f, &l) != 2)
			f = -1;
		if (!strstr(line, want)) {
			fprintf(stderr, "startup: expected %s, got %s", want,
			    line);
			exit(1);
		}
	}
	if (!p || pclose(p) != 0 || f < 0 || l < 0) {
		fprintf(stderr, "startup: the Python client failed\n");
		exit(1);
	}
	*fetch = f;
	*load = l;
	return f + l;
}

/* The C client: kspec_get_many of the 64 kernels, then kspec_cpu_load of
 * each; returns the total ms (fetch and load apart), checks that every
 * reply came from SOURCE. */
static double c_client(const char *sock, const char *source, double *fetch,
    double *load)
{
	static const char *const dyn_m[] = { "M" };
	kspec_dim_t dims[NK][3];
	kspec_get_spec_t specs[NK];
	kspec_artifact_t *arts[NK];
	kspec_cpu_kernel_t *ks[NK];
	kspec_client_t *c;
	kspec_cpu_entry_t fn;
	uint64_t t0, t1, t2;
	char err[256];
	int i;

	memset(specs, 0, sizeof specs);
	for (i = 0; i < NK; i++) {
		int nd = 0;

		if (model[i].m)
			dims[i][nd++] = (kspec_dim_t){ "M", model[i].m };
		dims[i][nd++] = (kspec_dim_t){ "N", model[i].n };
		dims[i][nd++] = (kspec_dim_t){ "K", model[i].k };
		specs[i].kernel = "gemm";
		specs[i].backend = "cpu";
		specs[i].dtype = model[i].dtype;
		specs[i].shape = dims[i];
		specs[i].nshape = (size_t)nd;
		specs[i].dynamic = model[i].m ? NULL : dyn_m;
		specs[i].ndynamic = model[i].m ? 0 : 1;
	}
	t0 = bench_ns();
	if (kspec_connect(sock, &c) != 0 ||
	    kspec_get_many(c, specs, NK, arts, NULL) != 0) {
		fprintf(stderr, "startup: C client: %s\n",
		    kspec_last_error(c, NULL));
		exit(1);
	}
	t1 = bench_ns();
	for (i = 0; i < NK; i++)
		if (kspec_cpu_load(arts[i], &ks[i], &fn, err, sizeof err)) {
			fprintf(stderr, "startup: C client: %s\n", err);
			exit(1);
		}
	t2 = bench_ns();
	kspec_close(c);
	for (i = 0; i < NK; i++) {
		if (strcmp(arts[i]->source, source) != 0) {
			fprintf(stderr, "startup: C client: expected %s, got "
			    "%s\n", source, arts[i]->source);
			exit(1);
		}
		kspec_cpu_unload(ks[i]);
		kspec_artifact_free(arts[i]);
	}
	*fetch = (double)(t1 - t0) / 1e6;
	*load = (double)(t2 - t1) / 1e6;
	return (double)(t2 - t0) / 1e6;
}

/* ---- (e): the store alone ---- */

#define MAX_KEYS 256

typedef struct {
	ks_hash_t keys[MAX_KEYS];
	int n;
} keys_t;

static int collect_key(void *ctx, const ks_hash_t *key, const char *meta,
    uint64_t size, int64_t last_used)
{
	keys_t *k = ctx;

	if (k->n < MAX_KEYS)
		k->keys[k->n++] = *key;
	return 0;
}

static double cpu_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* --lookups STORE KEY...: opens STORE, looks each KEY (hex) up into a
 * memory tier and prints "CPU-ms page-faults bytes". */
static int lookups(int argc, char **argv)
{
	struct rusage r0, r1;
	ks_store_t *store;
	ks_hot_t *hot;
	uint64_t bytes = 0;
	char err[256];
	double t0, t1;
	ks_hash_t key;
	int i;

	if (ks_base_init() || ks_store_open(argv[2], 0, &store, err,
	    sizeof err)) {
		fprintf(stderr, "startup --lookups: %s\n", err);
		return 1;
	}
	hot = ks_hot_new((size_t)256 << 20);
	getrusage(RUSAGE_SELF, &r0);
	t0 = cpu_ms();
	for (i = 3; i < argc; i++) {
		ks_artifact_t *a;

		if (ks_hash_from_hex(argv[i], &key) ||
		    ks_store_lookup(store, &key, &a) != KS_OK) {
			fprintf(stderr, "startup --lookups: %s not read\n",
			    argv[i]);
			return 1;
		}
		bytes += a->len;
		ks_hot_put(hot, a);     /* keeps its own reference */
		ks_artifact_unref(a);
	}
	t1 = cpu_ms();
	getrusage(RUSAGE_SELF, &r1);
	printf("%.3f %ld %llu\n", t1 - t0, r1.ru_minflt - r0.ru_minflt,
	    (unsigned long long)bytes);
	return 0;
}

/* (e) on the store at PATH (no daemon on it): TRIALS fresh processes;
 * the line to print after the table goes to OUT. */
static void store_rounds(const char *path, int trials, char *out,
    size_t outlen)
{
	static keys_t k;
	double ms[MAX_TRIALS], faults[MAX_TRIALS], ms_med, f_med;
	char cmd[MAX_KEYS * (KS_HASH_HEX + 1) + 1024], line[256];
	unsigned long long bytes = 0;
	ks_store_t *store;
	size_t off;
	int r, i;

	if (ks_store_open(path, 0, &store, line, sizeof line)) {
		fprintf(stderr, "startup: %s\n", line);
		exit(1);
	}
	ks_store_list(store, collect_key, &k);
	ks_store_close(store);
	off = (size_t)snprintf(cmd, sizeof cmd, "/proc/%d/exe --lookups %s",
	    (int)getpid(), path);
	for (i = 0; i < k.n; i++) {
		cmd[off++] = ' ';
		ks_hash_hex(&k.keys[i], cmd + off);
		off += KS_HASH_HEX - 1;
	}
	cmd[off] = '\0';
	for (r = 0; r < trials; r++) {
		FILE *p = popen(cmd, "r");
		long f = -1;

		if (!p || !fgets(line, sizeof line, p) || sscanf(line,
		    "%lf %ld %llu", &ms[r], &f, &bytes) != 3 || pclose(p)) {
			fprintf(stderr, "startup: --lookups failed\n");
			exit(1);
		}
		faults[r] = (double)f;
	}
	ms_med = bench_median(ms, trials);      /* sorts */
	f_med = bench_median(faults, trials);
	snprintf(out, outlen, "(e) the store alone: %d lookups of %llu bytes "
	    "into a memory tier in a fresh process (%d runs):\n    CPU %.2f "
	    "ms (%.2f..%.2f), page faults %.0f (%.0f..%.0f)\n", k.n, bytes,
	    trials, ms_med, ms[0], ms[trials - 1], f_med, faults[0],
	    faults[trials - 1]);
}

/* Restarts D (its memory tier empty) or fails the run. */
static void restart(e2e_daemon_t *d)
{
	if (e2e_stop(d) != 0 || e2e_start(d, NULL)) {
		fprintf(stderr, "startup: restart failed\n");
		exit(1);
	}
}

/* Round R of (c) and (d) on D, whose store holds the kernels. */
static void warm_round(e2e_daemon_t *d, int r, double t[][MAX_TRIALS],
    double fe[][MAX_TRIALS], double lo[][MAX_TRIALS])
{
	restart(d);
	t[4][r] = python_client(d->sock, "disk=64", &fe[4][r], &lo[4][r]);
	t[3][r] = python_client(d->sock, "memory=64", &fe[3][r], &lo[3][r]);
	restart(d);
	t[6][r] = c_client(d->sock, "disk", &fe[6][r], &lo[6][r]);
	t[5][r] = c_client(d->sock, "memory", &fe[5][r], &lo[5][r]);
}

int main(int argc, char **argv)
{
	static const char *const one[] = { "--workers", "1", NULL };
	double t[7][MAX_TRIALS], fe[7][MAX_TRIALS], lo[7][MAX_TRIALS];
	int warm_only = argc > 1 && strcmp(argv[1], "--warm-only") == 0;
	char store_line[512] = "";
	int trials = warm_only ? WARM_TRIALS : TRIALS, first = 0;
	static const char *const names[7] = {
		"(a) no kspec: compile in-process",
		"(b) cold daemon, --workers 1",
		"(b) cold daemon, a worker per CPU",
		"(c) warm daemon (memory)",
		"(d) restarted daemon (disk)",
		"(c) warm daemon, C client",
		"(d) restarted daemon, C client",
	};
	int r, s;

	if (argc > 3 && strcmp(argv[1], "--lookups") == 0)
		return lookups(argc, argv);
	if (argc > 1 && !warm_only) {
		fprintf(stderr, "usage: startup [--warm-only]\n");
		return 2;
	}
	if (ks_base_init() || read_model()) {
		fprintf(stderr, "startup: cannot read bench/startup/model.py\n");
		return 1;
	}
	if (warm_only) {
		e2e_daemon_t d;

		memset(&d, 0, sizeof d);
		if (e2e_start(&d, NULL)) {
			fprintf(stderr, "startup: kspecd did not start\n");
			return 1;
		}
		c_client(d.sock, "compiled", &fe[0][0], &lo[0][0]);
		for (r = 0; r < trials; r++)
			warm_round(&d, r, t, fe, lo);
		if (e2e_stop(&d) != 0) {
			fprintf(stderr, "startup: kspecd did not stop\n");
			return 1;
		}
		store_rounds(d.store, trials, store_line, sizeof store_line);
		e2e_cleanup(&d);
		first = 3;
	}
	for (r = 0; r < trials && !warm_only; r++) {
		e2e_daemon_t d;

		memset(&d, 0, sizeof d);
		t[0][r] = in_process();
		if (e2e_start(&d, one)) {
			fprintf(stderr, "startup: kspecd did not start\n");
			return 1;
		}
		t[1][r] = python_client(d.sock, "compiled=64", &fe[1][r],
		    &lo[1][r]);
		e2e_cleanup(&d);
		memset(&d, 0, sizeof d);
		if (e2e_start(&d, NULL)) {
			fprintf(stderr, "startup: kspecd did not start\n");
			return 1;
		}
		t[2][r] = python_client(d.sock, "compiled=64", &fe[2][r],
		    &lo[2][r]);
		warm_round(&d, r, t, fe, lo);
		e2e_cleanup(&d);
	}
	printf("startup: %d gemm kernels of an 8B-class model (decode, verify "
	    "widths, prefill; bf16/f16/f32), %d trials%s\n\n", NK, trials,
	    warm_only ? " of (c) and (d) on one store" : "");
	printf("%-36s %10s %21s %9s %9s\n", "case", "median ms",
	    "(min..max)", "fetch ms", "load ms");
	for (s = first; s < 7; s++) {
		double med = bench_median(t[s], trials);

		printf("%-36s %10.1f %10.1f..%-10.1f", names[s], med,
		    t[s][0], t[s][trials - 1]);
		if (s > 0)
			printf(" %9.2f %9.2f", bench_median(fe[s], trials),
			    bench_median(lo[s], trials));
		printf("\n");
	}
	printf("%s", store_line);
	printf("\nfetch: get_many of the %d kernels, connect included; load: "
	    "each .so into a memfd and dlopen.\ngoal: (d) fetch under 5 ms\n", NK);
	return 0;
}
