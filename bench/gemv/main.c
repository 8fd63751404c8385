/*
 * bench/gemv: the served gemv_m1 (M=1) on one thread, f32 and bf16, in
 * GB/s of bytes read (W, x) and written (y), against a plain memory-read
 * loop over the same number of bytes and OpenBLAS sgemv (one thread, f32),
 * measured alternately in the same run after a warm-up.  Two sizes: the
 * decode shape N=K=4096 (64 MiB of f32 weights, which a large last-level
 * cache may hold) and N=K=16384 (1 GiB, from DRAM on any machine).
 */
#include <cblas.h>

#include "../../tests/e2e.h"
#include "../bench.h"

#define TRIALS 15

static volatile uint64_t sink;

int main(void)
{
	static const char *const dts[] = { "f32", "bf16" };
	static const int sizes[] = { 4096, 16384 };
	e2e_daemon_t d;
	int di, si;

	openblas_set_num_threads(1);
	memset(&d, 0, sizeof d);
	if (e2e_start(&d, NULL)) {
		fprintf(stderr, "gemv: kspecd did not start\n");
		return 1;
	}
	printf("gemv: served gemv_m1, M=1, one thread, %d trials, GB/s "
	    "(median, min..max)\n\n", TRIALS);
	printf("%-12s %-6s %-22s %9s %21s %9s\n", "N=K", "dtype", "kernel",
	    "GB/s", "(min..max)", "of read");
	for (si = 0; si < 2; si++)
	for (di = 0; di < 2; di++) {
		const int N = sizes[si], K = sizes[si];
		size_t es = di == 0 ? 4 : 2;
		size_t bytes = ((size_t)N * K + K + N) * es;
		char req[512];
		e2e_reply_t r;
		e2e_entry_t fn;
		void *x, *w, *y, *params[3];
		ks_so_t *h;
		double g[3][TRIALS], med[3];
		int t, s, nref = di == 0 ? 3 : 2;
		const cJSON *l;

		snprintf(req, sizeof req, "{\"op\":\"get\",\"kernel\":\"gemm\","
		    "\"backend\":\"cpu\",\"dtype\":\"%s\",\"shape\":{\"M\":1,"
		    "\"N\":%d,\"K\":%d}}", dts[di], N, K);
		if (e2e_call(d.sock, req, &r) || !e2e_ok(&r)) {
			fprintf(stderr, "gemv: get failed\n");
			return 1;
		}
		h = e2e_load(r.payload, r.len, e2e_str(&r, "entry"), &fn);
		l = cJSON_GetObjectItemCaseSensitive(r.h, "launch");
		if (!h || e2e_num(l, "groups") <= 0) {
			fprintf(stderr, "gemv: artifact does not load\n");
			return 1;
		}
		x = aligned_alloc(64, (size_t)K * es);
		/* Padded so the read loop reads exactly `bytes` from it. */
		w = aligned_alloc(64, (bytes + 63) / 64 * 64);
		y = aligned_alloc(64, (size_t)N * 4);
		memset(x, 0x3c, (size_t)K * es);
		memset(w, 0x3c, (bytes + 63) / 64 * 64);
		params[0] = &x;
		params[1] = &w;
		params[2] = &y;
		for (t = -3; t < TRIALS; t++) {    /* 3 warm-up rounds */
			for (s = 0; s < nref; s++) {
				uint64_t t0 = bench_ns(), t1;

				if (s == 0)
					fn(params, 0, (uint64_t)e2e_num(l,
					    "groups"));
				else if (s == 1)
					sink = read_loop(w, bytes / 8);
				else
					cblas_sgemv(CblasRowMajor,
					    CblasNoTrans, N, K, 1.0f, w, K,
					    x, 1, 0.0f, y, 1);
				t1 = bench_ns();
				if (t >= 0)
					g[s][t] = (double)bytes /
					    (double)(t1 - t0);
			}
		}
		for (s = 0; s < nref; s++)
			med[s] = bench_median(g[s], TRIALS);
		for (s = 0; s < nref; s++) {
			static const char *const names[] = {
				"kspec gemv_m1", "plain read loop",
				"OpenBLAS sgemv (1 thr)" };

			printf("%-12d %-6s %-22s %9.2f %10.2f..%-10.2f "
			    "%8.0f%%\n", N, dts[di], names[s], med[s], g[s][0],
			    g[s][TRIALS - 1], 100 * med[s] / med[1]);
		}
		printf("\n");
		ks_so_unload(h);
		free(x);
		free(w);
		free(y);
		e2e_reply_free(&r);
	}
	printf("goal: kspec gemv_m1 >= 80%% of the plain read loop\n");
	e2e_cleanup(&d);
	return 0;
}
