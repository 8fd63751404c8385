/*
 * Shared by the benchmarks: timing, medians and spread, a table printer.
 * Every benchmark measures side by side with a reference in the same run,
 * after a warm-up, and reports medians with min..max over trials.
 */
#ifndef KS_BENCH_H
#define KS_BENCH_H

#include <stdint.h>
#include <stdlib.h>
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

#endif
