/*
 * Shared by the benchmarks: timing, medians and spread, a table printer.
 * Every benchmark measures side by side with a reference in the same run,
 * after a warm-up, and reports medians with min..max over trials.
 */
#ifndef KS_BENCH_H
#define KS_BENCH_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline uint64_t bench_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline int bench_cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static inline int bench_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * The cpu target the benchmarks ask gemm's fast mode for: cascadelake
 * (the oldest CPU family with AVX-512 VNNI) where this CPU has AVX-512
 * VNNI, so that the kernel multiplies with vpdpbusd as llama.cpp's CPU
 * backend for such a CPU does; else auto.
 */
static inline const char *bench_fast_target(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512cd") &&
	    __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("avx512vnni") ? "cascadelake" : "auto";
}

/* Sorts V in place; returns the median. */
static inline double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, bench_cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Percentile P (0..100) of sorted V. */
static inline uint64_t bench_pct(const uint64_t *v, size_t n, double p)
{
	size_t i = (size_t)(p / 100.0 * (double)(n - 1) + 0.5);

	return v[i < n ? i : n - 1];
}

/*
 * The memory reference of the kernel benchmarks: sums N 64-bit words with
 * four independent vector accumulators (the benchmarks are built with
 * -march=native, so at the machine's full vector width), bound by memory
 * like a GEMV.  noinline keeps it honest.
 */
typedef uint64_t bench_v4_t __attribute__((vector_size(32)));

__attribute__((noinline, unused)) static uint64_t read_loop(const uint64_t *p,
    size_t n)
{
	bench_v4_t s0 = { 0 }, s1 = { 0 }, s2 = { 0 }, s3 = { 0 }, v;
	size_t i;

	for (i = 0; i + 16 <= n; i += 16) {
		memcpy(&v, p + i, 32);
		s0 += v;
		memcpy(&v, p + i + 4, 32);
		s1 += v;
		memcpy(&v, p + i + 8, 32);
		s2 += v;
		memcpy(&v, p + i + 12, 32);
		s3 += v;
	}
	s0 += s1 + s2 + s3;
	return s0[0] + s0[1] + s0[2] + s0[3];
}

#endif
