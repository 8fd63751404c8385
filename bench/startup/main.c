/*
 * bench/startup: an inference server's startup, the 64 kernels of an
 * 8B-class model (bench/startup/model.py), measured in one run:
 *   (a) without kspec: each kernel specialized and compiled in-process with
 *       the cpu backend directly, then loaded;
 *   (b) a cold daemon: a Python process fetches them with one pipelined
 *       get_many and loads them (client/python), with one compile worker
 *       and with as many as CPUs (the default);
 *   (c) the same daemon again, warm (memory tier);
 *   (d) the daemon restarted on the warm store (memory tier empty).
 * Times are the client's own (get_many + load, or compile + load), not
 * process start.  TRIALS rounds, each with a fresh store; medians.
 */
#include "../../tests/e2e.h"
#include "../../jit/jit.h"
#include "../../specialize/specialize.h"
#include "../bench.h"

#define TRIALS 3
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

/* Runs the Python client against SOCK; returns its ms, checks sources. */
static double python_client(const char *sock, const char *want)
{
	char cmd[512], line[256];
	double ms = -1;
	FILE *p;

	snprintf(cmd, sizeof cmd, "/usr/bin/python3 bench/startup/client.py "
	    "%s", sock);
	p = popen(cmd, "r");
	if (p && fgets(line, sizeof line, p)) {
		ms = atof(line);
		if (!strstr(line, want)) {
			fprintf(stderr, "startup: expected %s, got %s", want,
			    line);
			exit(1);
		}
	}
	if (!p || pclose(p) != 0 || ms < 0) {
		fprintf(stderr, "startup: the Python client failed\n");
		exit(1);
	}
	return ms;
}

int main(void)
{
	static const char *const one[] = { "--workers", "1", NULL };
	double t[5][TRIALS];
	static const char *const names[5] = {
		"(a) no kspec: compile in-process",
		"(b) cold daemon, --workers 1",
		"(b) cold daemon, a worker per CPU",
		"(c) warm daemon (memory)",
		"(d) restarted daemon (disk)",
	};
	int r, s;

	if (ks_base_init() || read_model()) {
		fprintf(stderr, "startup: cannot read bench/startup/model.py\n");
		return 1;
	}
	for (r = 0; r < TRIALS; r++) {
		e2e_daemon_t d;

		memset(&d, 0, sizeof d);
		t[0][r] = in_process();
		if (e2e_start(&d, one)) {
			fprintf(stderr, "startup: kspecd did not start\n");
			return 1;
		}
		t[1][r] = python_client(d.sock, "compiled=64");
		e2e_cleanup(&d);
		memset(&d, 0, sizeof d);
		if (e2e_start(&d, NULL)) {
			fprintf(stderr, "startup: kspecd did not start\n");
			return 1;
		}
		t[2][r] = python_client(d.sock, "compiled=64");
		t[3][r] = python_client(d.sock, "memory=64");
		if (e2e_stop(&d) != 0 || e2e_start(&d, NULL)) {
			fprintf(stderr, "startup: restart failed\n");
			return 1;
		}
		t[4][r] = python_client(d.sock, "disk=64");
		e2e_cleanup(&d);
	}
	printf("startup: %d gemm kernels of an 8B-class model (decode, verify "
	    "widths, prefill; bf16/f16/f32), %d trials\n\n", NK, TRIALS);
	printf("%-36s %12s %21s\n", "case", "median ms", "(min..max)");
	for (s = 0; s < 5; s++) {
		double med = bench_median(t[s], TRIALS);

		printf("%-36s %12.1f %10.1f..%-10.1f\n", names[s], med,
		    t[s][0], t[s][TRIALS - 1]);
	}
	printf("\ngoal: (d) under 10 ms for the %d kernels\n", NK);
	return 0;
}
