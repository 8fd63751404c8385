/*
 * make oom over specialize/: building, specializing, printing and
 * verifying every kernel of the library at a constant and at a dynamic
 * shape, and a kernel's fingerprint, each with every allocation failing in
 * turn (tests/oom.h).  The IR's arena allocates for every node; a failure
 * under ks_specialize unwinds to it, which frees the kernel's arena and
 * answers KS_E_NOMEM (specialize/ir.c, "Allocation failures").
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <stdlib.h>
#include <string.h>

#include "../specialize/specialize.h"
#include "oom.h"

static void setup(void)
{
	cr_assert_eq(ks_base_init(), KS_OK);
}

TestSuite(oom_ir, .init = setup, .timeout = 600);

typedef struct {
	ks_spec_t spec;
	ks_ir_kernel_t *k;
	ks_buf_t text;
	char *want;                     /* the text of a try without failure */
	char err[512];
} ir_case_t;

static int ir_op(void *ctx)
{
	ir_case_t *p = ctx;
	int rc = ks_specialize(&p->spec, &p->k, p->err, sizeof p->err);

	if (rc != KS_OK)
		return rc;
	rc = ks_ir_verify(p->k, p->err, sizeof p->err);
	if (rc != KS_OK)
		return rc;
	return ks_ir_print(p->k, &p->text);
}

static int ir_check(void *ctx)
{
	ir_case_t *p = ctx;

	return p->want == NULL || (p->text.len == strlen(p->want) &&
	    memcmp(p->text.data, p->want, p->text.len) == 0);
}

static void ir_teardown(void *ctx)
{
	ir_case_t *p = ctx;

	ks_ir_free(p->k);
	p->k = NULL;
	ks_buf_reset(&p->text);
}

/* The spec of DEF at every dim DIM (0: every dim dynamic), f32. */
static int spec_at(const ks_kernel_def_t *def, int64_t dim, ks_spec_t *spec,
    char *err, size_t errlen)
{
	ks_dim_t dims[KS_MAX_DIMS];
	int i;

	for (i = 0; i < def->ndims; i++) {
		dims[i].name = def->dims[i];
		dims[i].is_const = dim != 0;
		dims[i].value = dim;
	}
	return ks_kernel_validate(def, KS_DTYPE_F32, KS_MODE_EXACT, dims,
	    def->ndims, spec, err, errlen);
}

static void run_kernel(const ks_kernel_def_t *def, int64_t dim)
{
	ir_case_t p;
	ks_oom_case_t c = { .ctx = &p, .op = ir_op, .check = ir_check,
	    .teardown = ir_teardown };
	char what[128];

	memset(&p, 0, sizeof p);
	ks_buf_init(&p.text);
	if (spec_at(def, dim, &p.spec, p.err, sizeof p.err) != KS_OK)
		return;         /* a shape the kernel refuses: nothing to build */
	snprintf(what, sizeof what, "%s at %s", def->name,
	    dim ? "constant dims" : "dynamic dims");
	c.what = what;
	cr_assert_eq(ir_op(&p), KS_OK, "%s: %s", what, p.err);
	p.want = ks_buf_steal(&p.text, NULL);
	ir_teardown(&p);
	ks_oom_run(&c);
	free(p.want);
	ks_buf_close(&p.text);
}

Test(oom_ir, every_kernel_specializes_or_fails_cleanly)
{
	const ks_kernel_def_t *const *defs;
	int n, i;

	defs = ks_kernels(&n);
	for (i = 0; i < n; i++) {
		run_kernel(defs[i], 0);
		run_kernel(defs[i], 64);
	}
}

typedef struct {
	const ks_kernel_def_t *def;
	ks_hash_t got, want;
} fp_case_t;

static int fp_op(void *ctx)
{
	fp_case_t *p = ctx;

	return ks_kernel_fingerprint_compute(p->def, &p->got);
}

static int fp_check(void *ctx)
{
	fp_case_t *p = ctx;

	return ks_hash_eq(&p->got, &p->want);
}

Test(oom_ir, a_fingerprint_is_computed_or_fails_cleanly)
{
	fp_case_t p = { .def = &ks_kernel_argmax };
	ks_oom_case_t c = { .what = "argmax's fingerprint", .ctx = &p,
	    .op = fp_op, .check = fp_check };

	cr_assert_eq(ks_kernel_fingerprint_compute(p.def, &p.want), KS_OK);
	ks_oom_run(&c);
}
