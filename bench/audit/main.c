/*
 * bench/audit: the key audit over honest recompiles, per backend: every
 * kernel of the library in every dtype at 8 shapes is compiled (a warm),
 * then `audit --all` compiles each stored entry again and compares.  It
 * reports the entries, how many matched (every one must: a mismatch here
 * is a key that lacks an input), the warm's wall time beside the audit's
 * (the reference: the same compiles, once each), and the audit's compile
 * time per entry, from which the overhead at the default rate follows.
 * One fresh daemon per backend, two workers.
 */
#include "../../tests/e2e.h"
#include "../bench.h"

#define PER 8

static e2e_daemon_t d;

static void die(const char *what)
{
	fprintf(stderr, "audit: %s\n", what);
	e2e_cleanup(&d);
	exit(1);
}

/* Whether the daemon's hello lists BACKEND as available. */
static int available(const char *backend)
{
	int yes = e2e_backend_available(d.sock, backend);

	if (yes < 0)
		die("hello failed");
	return yes;
}

/* One backend: returns its mismatches (0 when honest), or 0 when the
 * backend is not available here (said). */
static int one(const char *backend, const char *target, int *total,
    int *bad)
{
	static const char *const extra[] = { "--workers", "2",
	    "--audit-interval", "0", NULL };
	double warm_s, audit_s, ms;
	char msg[512];
	e2e_reply_t r, st;
	uint64_t t0;
	int n, audited, matched, mismatched;

	if (e2e_start(&d, extra))
		die("cannot start kspecd");
	if (!available(backend)) {
		printf("%-8s not available here: not measured\n", backend);
		e2e_cleanup(&d);
		return 0;
	}
	t0 = bench_ns();
	n = e2e_warm_library(d.sock, backend, target, PER, msg, sizeof msg);
	warm_s = (double)(bench_ns() - t0) / 1e9;
	if (n < 0)
		die(msg);
	t0 = bench_ns();
	if (e2e_call(d.sock, "{\"op\":\"audit\",\"all\":true}", &r) ||
	    !e2e_ok(&r))
		die("audit failed");
	audit_s = (double)(bench_ns() - t0) / 1e9;
	audited = (int)e2e_num(r.h, "audited");
	matched = (int)e2e_num(r.h, "matched");
	mismatched = (int)e2e_num(r.h, "mismatched");
	e2e_reply_free(&r);
	if (e2e_call(d.sock, "{\"op\":\"stats\"}", &st))
		die("stats failed");
	ms = e2e_num(cJSON_GetObjectItemCaseSensitive(st.h, "audit"),
	    "compile_ms_total");
	e2e_reply_free(&st);
	printf("%-8s %7d %7d %7d %10d %9.1f %9.1f %11.1f %11.1f\n", backend,
	    n, audited, matched, mismatched, warm_s, audit_s,
	    audited ? ms / audited : 0, audited ? 60 * ms / audited / 1e3 :
	    0);
	if (e2e_stop(&d))
		die("kspecd did not stop cleanly");
	e2e_cleanup(&d);
	memset(&d, 0, sizeof d);
	*total += audited;
	*bad += mismatched + (audited - matched - mismatched);
	return mismatched;
}

int main(void)
{
	int total = 0, bad = 0;

	printf("honest recompiles: every kernel x dtype at %d shapes, warmed, "
	    "then audit --all\n", PER);
	printf("%-8s %7s %7s %7s %10s %9s %9s %11s %11s\n", "backend",
	    "entries", "audited", "matched", "mismatched", "warm_s", "audit_s",
	    "ms/entry", "s/hour@60s");
	one("cpu", "auto", &total, &bad);
	one("opencl", "auto", &total, &bad);
	one("cuda", "sm_80", &total, &bad);
	printf("%d honest recompiles, %d not matched (mismatched or "
	    "failed)\n", total, bad);
	return bad ? 1 : 0;
}
