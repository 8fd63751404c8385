/*
 * passes: the standard pipeline, fold -> trip1 -> unroll -> fold -> dce.
 *
 * The second fold folds what trip1 and unroll exposed (loop variables
 * replaced by constants); dce then drops what folding left unread.
 * Passes run in straight-line order; in debug builds (no NDEBUG) the
 * verifier runs on the input and after every pass, so a bad pass is named
 * in the error.  KSPEC_DUMP (or KS_DUMP) is a comma-separated list of pass
 * names ("input", "fold", "trip1", "unroll", "dce", or "all"); the IR is
 * printed to stderr after each named pass.  "input" is the kernel as given,
 * which from ks_specialize is the kernel after ks_pass_bind, so "bind" is
 * accepted for it too.
 */
#include "specialize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	const char *name;
	void (*run)(ks_ir_kernel_t *k);
} pass_t;

static const pass_t pipeline[] = {
	{ "fold", ks_pass_fold },
	{ "trip1", ks_pass_trip1 },
	{ "unroll", ks_pass_unroll },
	{ "fold", ks_pass_fold },
	{ "dce", ks_pass_dce },
};

static int dump_wanted(const char *pass)
{
	const char *list = getenv("KSPEC_DUMP");
	size_t n = strlen(pass);
	const char *p;

	if (list == NULL || *list == '\0')
		list = getenv("KS_DUMP");
	if (list == NULL)
		return 0;
	for (p = list; *p; ) {
		size_t len = strcspn(p, ",");

		if ((len == n && strncmp(p, pass, n) == 0) ||
		    (len == 3 && strncmp(p, "all", 3) == 0) ||
		    (len == 4 && strncmp(p, "bind", 4) == 0 &&
		    strcmp(pass, "input") == 0))
			return 1;
		p += len;
		if (*p == ',')
			p++;
	}
	return 0;
}

static void dump(const ks_ir_kernel_t *k, const char *pass, int step)
{
	ks_buf_t b;

	if (!dump_wanted(pass))
		return;
	ks_buf_init(&b);
	if (ks_buf_printf(&b, "; %s.%s after %s (step %d)\n", k->name,
	    k->variant, pass, step) == 0 && ks_ir_print(k, &b) == 0)
		fputs(b.data, stderr);
	ks_buf_close(&b);
}

static int check(const ks_ir_kernel_t *k, const char *pass, char *err,
    size_t errlen)
{
#ifdef NDEBUG
	(void)k;
	(void)pass;
	(void)err;
	(void)errlen;
	return KS_OK;
#else
	char msg[256];
	int rc = ks_ir_verify(k, msg, sizeof msg);

	if (rc != KS_OK && err != NULL && errlen > 0)
		snprintf(err, errlen, "IR of %s.%s invalid after %s: %s",
		    k->name, k->variant, pass, msg);
	return rc;
#endif
}

int ks_pass_run(ks_ir_kernel_t *k, char *err, size_t errlen)
{
	size_t i;
	int rc;

	dump(k, "input", 0);
	rc = check(k, "input", err, errlen);
	for (i = 0; rc == KS_OK && i < sizeof pipeline / sizeof *pipeline;
	    i++) {
		pipeline[i].run(k);
		dump(k, pipeline[i].name, (int)i + 1);
		rc = check(k, pipeline[i].name, err, errlen);
	}
	return rc;
}
