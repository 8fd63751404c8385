/*
 * Allocation-failure injection for make oom (tests/oom.c holds the
 * injector; the tests that use it are tests/oom_*.c, built only by
 * make oom, under AddressSanitizer and LeakSanitizer).
 *
 * ks_oom_run runs one operation again and again, with its 1st, 2nd, 3rd
 * ... allocation failing, until a try in which no allocation failed.  At
 * each try the operation must either answer an error (a negative code of
 * base.h's table) or, when it absorbed the failure, succeed with a whole
 * result (the case's check); it must not crash, and after the case's
 * teardown nothing it allocated may be left unreachable (LeakSanitizer's
 * check, run after every try, with the stack below wiped first: it scans
 * conservatively, and a stale copy of a lost pointer in a register or a
 * stack slot it cannot wipe hides the leak, at that try or longer).  Each failure mode runs twice: the Nth
 * allocation alone failing (KS_OOM_ONCE), and every allocation from the
 * Nth on (KS_OOM_PERSIST, so that an error path that allocates fails too).
 */
#ifndef KS_TESTS_OOM_H
#define KS_TESTS_OOM_H

#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "../base/base.h"

enum { KS_OOM_ONCE, KS_OOM_PERSIST };

/* Makes the Nth allocation from now fail (N >= 1), and with
 * KS_OOM_PERSIST every one after it too. */
void ks_oom_arm(long n, int mode);
/* Stops failing; returns how many allocations failed since the arm. */
long ks_oom_disarm(void);
/* Allocations counted since the last arm. */
long ks_oom_counted(void);
/* Whether the allocation being made now fails (counts it); for the
 * allocator hooks of libraries (SQLite's, in oom_store.c). */
int ks_oom_should_fail(void);
/* Whether LeakSanitizer finds blocks that nothing reaches (its report on
 * stderr); 0 in a build without it. */
int ks_oom_leaked(void);
/* Routes cJSON's allocations through the injector. */
void ks_oom_hook_cjson(void);

/* LeakSanitizer's check on demand; absent (NULL) without it. */
extern int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

typedef struct {
	const char *what;
	void *ctx;
	void (*setup)(void *ctx);       /* before each try, not counted */
	int (*op)(void *ctx);           /* the operation: KS_OK or KS_E_* */
	/* After a try that returned KS_OK: whether the result is whole and
	 * right (NULL: any KS_OK is).  Not counted. */
	int (*check)(void *ctx);
	void (*teardown)(void *ctx);    /* frees what op made, not counted */
	/* At most this many tries per failure mode (0: no limit): an
	 * operation of more allocations fails every stride-th of them
	 * (N = 1, 1 + stride, ...), for the operations of thousands (a new
	 * store's schema, SQLite parsing it). */
	long max_tries;
} ks_oom_case_t;

/* What a run found: the first try that broke a rule, if any. */
typedef struct {
	long tries;                     /* tries with a failure injected */
	long errors;                    /* of them: answered an error */
	long absorbed;                  /* of them: succeeded anyway */
	long first_bad;                 /* the N that broke a rule, or 0 */
	long allocations;               /* of a try without a failure */
	long stride;                    /* 1: every allocation failed once */
	char why[256];
} ks_oom_result_t;

#define KS_OOM_MAX_TRIES 200000L

static inline int ks_oom_is_error(int rc)
{
	return rc < 0 && strcmp(ks_err_name(rc), "E_UNKNOWN") != 0;
}

/* One failure mode of ks_oom_run; stops at the first broken rule. */
static inline void ks_oom_run_mode(const ks_oom_case_t *c, int mode,
    ks_oom_result_t *r)
{
	long n, failed;
	int rc, whole;

	for (n = 1; n <= KS_OOM_MAX_TRIES; n += r->stride) {
		if (c->setup != NULL)
			c->setup(c->ctx);
		ks_oom_arm(n, mode);
		rc = c->op(c->ctx);
		failed = ks_oom_disarm();
		whole = rc == KS_OK && (c->check == NULL || c->check(c->ctx));
		if (c->teardown != NULL)
			c->teardown(c->ctx);
		if (failed == 0 && !whole) {
			snprintf(r->why, sizeof r->why, "%s: fails (%s) with "
			    "no allocation failing", c->what, ks_err_name(rc));
		} else if (failed > 0 && rc == KS_OK && !whole) {
			snprintf(r->why, sizeof r->why, "%s: allocation %ld "
			    "failed (%s), the operation answered KS_OK with "
			    "a broken result", c->what, n, mode ==
			    KS_OOM_PERSIST ? "and every one after" : "alone");
		} else if (failed > 0 && rc != KS_OK && !ks_oom_is_error(rc)) {
			snprintf(r->why, sizeof r->why, "%s: allocation %ld "
			    "failed, the operation answered %d, not an error "
			    "code", c->what, n, rc);
		} else if (ks_oom_leaked()) {
			snprintf(r->why, sizeof r->why, "%s: leak after "
			    "allocation %ld failed (%s; LeakSanitizer's report "
			    "above)", c->what, n, mode == KS_OOM_PERSIST ?
			    "and every one after" : "alone");
		} else {
			if (failed == 0)
				return;
			r->tries++;
			if (rc == KS_OK)
				r->absorbed++;
			else
				r->errors++;
			continue;
		}
		r->first_bad = n;
		return;
	}
	snprintf(r->why, sizeof r->why, "%s: still failing after %ld tries",
	    c->what, KS_OOM_MAX_TRIES);
	r->first_bad = n;
}

/* Runs C in both failure modes; fills R (the first broken rule).  A first
 * try without a failure counts the allocations. */
static inline void ks_oom_try(const ks_oom_case_t *c, ks_oom_result_t *r)
{
	memset(r, 0, sizeof *r);
	if (c->setup != NULL)
		c->setup(c->ctx);
	ks_oom_arm(LONG_MAX, KS_OOM_ONCE);
	(void)c->op(c->ctx);
	ks_oom_disarm();
	r->allocations = ks_oom_counted();
	if (c->teardown != NULL)
		c->teardown(c->ctx);
	r->stride = 1;
	if (c->max_tries > 0 && r->allocations > c->max_tries)
		r->stride = (r->allocations + c->max_tries - 1) / c->max_tries;
	ks_oom_run_mode(c, KS_OOM_ONCE, r);
	if (r->first_bad == 0)
		ks_oom_run_mode(c, KS_OOM_PERSIST, r);
}

/* Runs C and fails the test on a broken rule, or when the operation
 * allocates nothing (then the case tests nothing). */
static inline void ks_oom_run(const ks_oom_case_t *c)
{
	ks_oom_result_t r;

	ks_oom_try(c, &r);
	cr_assert_eq(r.first_bad, 0, "%s", r.why);
	cr_assert_gt(r.tries, 0, "%s: allocates nothing", c->what);
	cr_log_info("%s: %ld allocations, stride %ld: %ld tries, %ld answered "
	    "an error, %ld absorbed", c->what, r.allocations, r.stride,
	    r.tries, r.errors, r.absorbed);
}

#endif
