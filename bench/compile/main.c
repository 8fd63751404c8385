/*
 * bench/compile: the miss path with the compile workers, in one run.
 *
 *   (1) throughput: N distinct cold cpu gemm kernels pipelined on one
 *       connection to a fresh daemon with --workers 1, 2 and the number
 *       of CPUs (each worker warmed up by one compile first), beside the
 *       reference: the same kernels specialized and compiled one after the
 *       other in this process, with the backend directly;
 *   (2) the daemon's own memory: its RSS after the first compile and
 *       after 300 distinct cold cpu compiles plus 20 OpenCL compiles (the
 *       workers' RSS beside it).
 * Trials alternate the configurations; medians with min..max.  PoCL's own
 * kernel cache is off (POCL_KERNEL_CACHE=0), so OpenCL compiles are real.
 * One client's cold get beside another's backlog is bench/fairness.
 */
#include "../../jit/jit.h"
#include "../../specialize/specialize.h"
#include "../bench.h"
#include "../cold.h"

#define TRIALS 5

/* One compile per worker, so none pays its first compile in a trial. */
static void warm(e2e_daemon_t *d, int workers, const char *backend)
{
	int fd = e2e_connect(d->sock);

	cold_send(fd, backend, workers, 64);
	cold_recv(fd, workers, NULL);
	close(fd);
}

/* (1): ms for COUNT cold compiles on a fresh daemon of WORKERS. */
static double throughput(int workers, int count)
{
	e2e_daemon_t d;
	uint64_t t0;
	double ms;
	int fd;

	cold_start(&d, workers);
	warm(&d, workers, "cpu");
	fd = e2e_connect(d.sock);
	t0 = bench_ns();
	cold_send(fd, "cpu", count, 512);
	cold_recv(fd, count, NULL);
	ms = (double)(bench_ns() - t0) / 1e6;
	close(fd);
	e2e_cleanup(&d);
	return ms;
}

/* The reference of (1): the same work in this process, one thread. */
static double in_process(int count)
{
	char target[64], err[512];
	uint64_t t0 = bench_ns();
	int i;

	ks_backend_cpu.resolve_target("auto", target, sizeof target, err,
	    sizeof err);
	for (i = 0; i < count; i++) {
		ks_dim_t dims[3] = { { "M", 1, 1 }, { "N", 1, cold_next_n++ },
		    { "K", 1, 512 } };
		ks_jit_artifact_t a;
		ks_ir_kernel_t *k;
		ks_spec_t sp;

		if (ks_kernel_validate(&ks_kernel_gemm, KS_DTYPE_F32,
		    KS_MODE_EXACT, dims, 3, &sp, err, sizeof err) ||
		    ks_specialize(&sp, &k, err, sizeof err) ||
		    ks_backend_cpu.compile(k, target, "so", &a, err,
		    sizeof err)) {
			fprintf(stderr, "compile: in-process: %s\n", err);
			exit(1);
		}
		ks_jit_artifact_close(&a);
		ks_ir_free(k);
	}
	return (double)(bench_ns() - t0) / 1e6;
}

/* The RSS of every worker, from stats, in MiB. */
static void worker_rss(e2e_daemon_t *d, char *out, size_t len)
{
	e2e_reply_t r;
	const cJSON *w;
	size_t n = 0;

	out[0] = '\0';
	if (e2e_call(d->sock, "{\"op\":\"stats\"}", &r))
		return;
	cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(r.h,
	    "workers"))
		n += (size_t)snprintf(out + n, len - n, "%s%.0f", n ? ", " : "",
		    e2e_num(w, "rss") / 1048576.0);
	e2e_reply_free(&r);
}

static void row(const char *name, double *v, int n)
{
	double med = bench_median(v, n);

	printf("%-52s %10.1f %10.1f..%-10.1f\n", name, med, v[0], v[n - 1]);
}

int main(void)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int counts[2] = { 32, 16 }, ws[3] = { 1, 2, (int)ncpu }, nw = 3;
	double t[2][4][TRIALS], ratio[TRIALS], med;
	char name[128], wr[256];
	e2e_daemon_t d;
	long before, after;
	int c, i, r, fd;

	setenv("POCL_KERNEL_CACHE", "0", 1);
	if (ks_base_init())
		return 1;
	if (ws[2] <= 2)
		nw = 2;                 /* nproc is one of 1, 2 */

	/* (1) */
	in_process(2);                  /* warm this process's libgccjit */
	for (r = 0; r < TRIALS; r++)
		for (c = 0; c < 2; c++) {
			t[c][0][r] = in_process(counts[c]);
			for (i = 0; i < nw; i++)
				t[c][i + 1][r] = throughput(ws[i], counts[c]);
		}
	/* The pairs ran side by side: their ratio per trial (before the
	 * rows sort the columns). */
	for (r = 0; r < TRIALS; r++)
		ratio[r] = t[1][2][r] / t[1][1][r];
	printf("compile: distinct cold cpu gemm kernels (M=1, K=512, f32), "
	    "pipelined on one connection, %d trials, %ld CPUs\n\n", TRIALS,
	    ncpu);
	printf("%-52s %10s %21s\n", "case", "median ms", "(min..max)");
	for (c = 0; c < 2; c++) {
		snprintf(name, sizeof name, "%d kernels: in-process, one thread "
		    "(reference)", counts[c]);
		row(name, t[c][0], TRIALS);
		for (i = 0; i < nw; i++) {
			snprintf(name, sizeof name, "%d kernels: kspecd "
			    "--workers %d", counts[c], ws[i]);
			row(name, t[c][i + 1], TRIALS);
		}
	}
	med = bench_median(ratio, TRIALS);
	printf("\n16 kernels, --workers 2 / --workers 1, per trial: median "
	    "%.2fx (%.2f..%.2f); goal <= 0.65x\n", med, ratio[0],
	    ratio[TRIALS - 1]);

	/* (2) */
	cold_start(&d, (int)ncpu);
	warm(&d, 1, "cpu");
	before = e2e_rss_kb(d.pid);
	fd = e2e_connect(d.sock);
	for (i = 0; i < 300; i += 50) {
		cold_send(fd, "cpu", 50, 256);
		cold_recv(fd, 50, NULL);
	}
	cold_send(fd, "opencl", 20, 256);
	cold_recv(fd, 20, NULL);
	close(fd);
	after = e2e_rss_kb(d.pid);
	worker_rss(&d, wr, sizeof wr);
	e2e_cleanup(&d);
	printf("\nmemory: kspecd's own RSS (the parent), --workers %ld\n\n",
	    ncpu);
	printf("after the first compile                              %8.1f "
	    "MiB\n", before / 1024.0);
	printf("after 300 cold cpu + 20 cold OpenCL compiles         %8.1f "
	    "MiB\n", after / 1024.0);
	printf("growth                                               %8.1f "
	    "MiB (goal <= 32)\n", (after - before) / 1024.0);
	printf("the workers' RSS at the end                          %s MiB\n",
	    wr);
	return 0;
}
