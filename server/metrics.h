/*
 * Private to server/: latency histograms and the Prometheus text format
 * (metrics.c).  A histogram is cumulative only when it is written out:
 * observing one value adds to one bucket, a few compares on the hit path.
 */
#ifndef KS_SERVER_METRICS_H
#define KS_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

#define KS_HIST_MAX_BOUNDS 16

/* Upper bounds of the buckets in nanoseconds, ascending; the last bucket
 * (+Inf) is implicit. */
typedef struct {
	const uint64_t *le_ns;
	int n;
} ks_hist_bounds_t;

typedef struct {
	uint64_t count[KS_HIST_MAX_BOUNDS + 1];  /* per bucket, not cumulative */
	uint64_t sum_ns;
} ks_hist_t;

/* Hits: 5 us to 100 ms.  Compiles: 10 ms to 300 s (the longest limit). */
extern const ks_hist_bounds_t ks_hist_hit_bounds;
extern const ks_hist_bounds_t ks_hist_compile_bounds;

static inline void ks_hist_observe(ks_hist_t *h, const ks_hist_bounds_t *b,
    uint64_t ns)
{
	int i = 0;

	while (i < b->n && ns > b->le_ns[i])
		i++;
	h->count[i]++;
	h->sum_ns += ns;
}

static inline uint64_t ks_hist_total(const ks_hist_t *h,
    const ks_hist_bounds_t *b)
{
	uint64_t n = 0;
	int i;

	for (i = 0; i <= b->n; i++)
		n += h->count[i];
	return n;
}

/* The series of histogram NAME with LABELS ("" or `backend="cpu"`),
 * without HELP and TYPE: NAME_bucket{...,le="..."} cumulative, NAME_sum
 * in seconds, NAME_count. */
void ks_prom_hist(ks_buf_t *b, const char *name, const char *labels,
    const ks_hist_t *h, const ks_hist_bounds_t *bounds);
/* "# HELP NAME HELP\n# TYPE NAME TYPE\n". */
void ks_prom_head(ks_buf_t *b, const char *name, const char *type,
    const char *help);
/* One sample: NAME{LABELS} V, LABELS "" for none. */
void ks_prom_u64(ks_buf_t *b, const char *name, const char *labels,
    uint64_t v);
void ks_prom_f64(ks_buf_t *b, const char *name, const char *labels,
    double v);
/* The same histogram as JSON: {"le_us":[...],"counts":[...],"sum_us":S},
 * counts per bucket (not cumulative), the last one above every bound. */
void ks_hist_json(ks_buf_t *b, const ks_hist_t *h,
    const ks_hist_bounds_t *bounds);

#endif
