/*
 * The Prometheus text exposition format (version 0.0.4), as much of it as
 * kspecd's /metrics needs: HELP and TYPE lines, samples with labels, and
 * histograms with cumulative buckets.  Label values are names of the
 * daemon's own (ops, kernels, backends, error codes), never a client's
 * bytes, so they need no escaping.
 */
#include <inttypes.h>
#include <stdio.h>

#include "metrics.h"

#define US 1000ull
#define MS 1000000ull
#define S  1000000000ull

static const uint64_t hit_le[] = {
	5 * US, 10 * US, 25 * US, 50 * US, 100 * US, 250 * US, 500 * US,
	1 * MS, 2500 * US, 5 * MS, 10 * MS, 25 * MS, 100 * MS,
};
static const uint64_t compile_le[] = {
	10 * MS, 25 * MS, 50 * MS, 100 * MS, 250 * MS, 500 * MS, 1 * S,
	2500 * MS, 5 * S, 10 * S, 30 * S, 60 * S, 120 * S, 300 * S,
};

const ks_hist_bounds_t ks_hist_hit_bounds = {
	hit_le, (int)(sizeof hit_le / sizeof hit_le[0])
};
const ks_hist_bounds_t ks_hist_compile_bounds = {
	compile_le, (int)(sizeof compile_le / sizeof compile_le[0])
};

_Static_assert(sizeof hit_le / sizeof hit_le[0] <= KS_HIST_MAX_BOUNDS,
    "hit buckets fit ks_hist_t");
_Static_assert(sizeof compile_le / sizeof compile_le[0] <= KS_HIST_MAX_BOUNDS,
    "compile buckets fit ks_hist_t");

void ks_prom_head(ks_buf_t *b, const char *name, const char *type,
    const char *help)
{
	ks_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name,
	    type);
}

void ks_prom_u64(ks_buf_t *b, const char *name, const char *labels,
    uint64_t v)
{
	if (labels[0])
		ks_buf_printf(b, "%s{%s} %" PRIu64 "\n", name, labels, v);
	else
		ks_buf_printf(b, "%s %" PRIu64 "\n", name, v);
}

void ks_prom_f64(ks_buf_t *b, const char *name, const char *labels,
    double v)
{
	if (labels[0])
		ks_buf_printf(b, "%s{%s} %.9g\n", name, labels, v);
	else
		ks_buf_printf(b, "%s %.9g\n", name, v);
}

void ks_prom_hist(ks_buf_t *b, const char *name, const char *labels,
    const ks_hist_t *h, const ks_hist_bounds_t *bounds)
{
	const char *sep = labels[0] ? "," : "";
	uint64_t cum = 0;
	int i;

	for (i = 0; i < bounds->n; i++) {
		cum += h->count[i];
		ks_buf_printf(b, "%s_bucket{%s%sle=\"%.9g\"} %" PRIu64 "\n",
		    name, labels, sep, (double)bounds->le_ns[i] / 1e9, cum);
	}
	cum += h->count[bounds->n];
	ks_buf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name,
	    labels, sep, cum);
	ks_buf_printf(b, "%s_sum%s%s%s %.9g\n", name, labels[0] ? "{" : "",
	    labels, labels[0] ? "}" : "", (double)h->sum_ns / 1e9);
	ks_buf_printf(b, "%s_count%s%s%s %" PRIu64 "\n", name,
	    labels[0] ? "{" : "", labels, labels[0] ? "}" : "", cum);
}

void ks_hist_json(ks_buf_t *b, const ks_hist_t *h,
    const ks_hist_bounds_t *bounds)
{
	int i;

	ks_buf_puts(b, "{\"le_us\":[");
	for (i = 0; i < bounds->n; i++)
		ks_buf_printf(b, "%s%.3f", i ? "," : "",
		    (double)bounds->le_ns[i] / 1e3);
	ks_buf_puts(b, "],\"counts\":[");
	for (i = 0; i <= bounds->n; i++)
		ks_buf_printf(b, "%s%" PRIu64, i ? "," : "", h->count[i]);
	ks_buf_printf(b, "],\"sum_us\":%.3f}", (double)h->sum_ns / 1e3);
}
