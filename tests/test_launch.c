/*
 * libkspec's checked call and thread pool (kspec_cpu_call,
 * kspec_cpu_launch) against a real kspecd: every buffer of every library
 * kernel is size-checked before anything runs, N threads give the bits of
 * one, and a forked child launches on a pool of its own.
 */
#include <criterion/criterion.h>

#include <sys/wait.h>

#include "../include/kspec.h"
#include "e2e.h"
#include "../ref/layout.h"

static e2e_daemon_t D;
static kspec_client_t *C;

static void up(void)
{
	memset(&D, 0, sizeof D);
	cr_assert_eq(e2e_start(&D, NULL), 0, "kspecd did not start");
	cr_assert_eq(kspec_connect(D.sock, &C), 0);
}

static void down(void)
{
	kspec_close(C);
	e2e_cleanup(&D);
}

TestSuite(launch, .init = up, .fini = down, .timeout = 120);

/* A kernel at a shape: dims in the definition's order, at most one of
 * them dynamic. */
typedef struct {
	const char *kernel;
	const char *dtype;
	int64_t v[KS_MAX_DIMS];
	const char *dynamic;
} case_t;

static const case_t cases[] = {
	{ "gemm", "f32", { 3, 37, 64 }, "M" },
	{ "gemm", "bf16", { 1, 37, 64 }, NULL },
	{ "rmsnorm", "f32", { 5, 300 }, NULL },
	{ "add_rmsnorm", "bf16", { 5, 300 }, "R" },
	{ "softmax", "f32", { 6, 200 }, "R" },
	{ "rope", "f32", { 3, 4, 64, 16 }, NULL },
	{ "silu_mul", "f32", { 2, 600 }, "T" },
	{ "attention_decode", "f32", { 2, 8, 2, 64, 40 }, NULL },
	{ "attention_decode", "f16", { 1, 4, 4, 32, 70 }, "S" },
};

enum { MAX_ARGS = 16 };

/* A loaded kernel with its buffers (ref/layout.h) and arguments. */
typedef struct {
	const case_t *c;
	const ks_kernel_def_t *def;
	ks_dtype_t dt;
	kspec_cpu_kernel_t *k;
	kspec_cpu_entry_t fn;
	buf_t b[LAY_MAXB];
	void *init[LAY_MAXB];   /* the buffers as filled */
	size_t size[LAY_MAXB];
	int nb;
	kspec_arg_t args[MAX_ARGS];
	int argbuf[MAX_ARGS];   /* the buffer of args[i], or -1 */
	size_t nargs;
} run_t;

static void prepare(const case_t *c, run_t *r)
{
	kspec_dim_t shape[KS_MAX_DIMS];
	kspec_get_spec_t s = { 0 };
	kspec_artifact_t *a;
	cJSON *m, *p;
	char err[256];
	int i, n = 0;

	memset(r, 0, sizeof *r);
	r->c = c;
	r->def = ks_kernel_find(c->kernel);
	cr_assert_not_null(r->def);
	cr_assert_eq(ks_dtype_parse(c->dtype, &r->dt), 0);
	for (i = 0; i < r->def->ndims; i++)
		if (!c->dynamic || strcmp(c->dynamic, r->def->dims[i]))
			shape[n++] = (kspec_dim_t){ r->def->dims[i], c->v[i] };
	s.kernel = c->kernel;
	s.backend = "cpu";
	s.dtype = c->dtype;
	s.shape = shape;
	s.nshape = (size_t)n;
	s.dynamic = &c->dynamic;
	s.ndynamic = c->dynamic ? 1 : 0;
	cr_assert_eq(kspec_get(C, &s, &a), 0, "%s: %s", c->kernel,
	    kspec_last_error(C, NULL));
	cr_assert_eq(kspec_cpu_load(a, &r->k, &r->fn, err, sizeof err), 0,
	    "%s", err);
	r->nb = layout(r->def, c->v, r->b);
	lay_fill(r->def, c->v, r->b, r->nb, r->dt, 7);
	for (i = 0; i < r->nb; i++) {
		r->size[i] = lay_bytes(&r->b[i], ks_dtype_size(r->dt));
		r->init[i] = malloc(r->size[i]);
		memcpy(r->init[i], r->b[i].data, r->size[i]);
	}
	m = cJSON_ParseWithLength(a->meta, a->meta_len);
	cJSON_ArrayForEach(p, cJSON_GetObjectItem(m, "params")) {
		const char *name = cJSON_GetObjectItem(p, "name")->valuestring;
		const char *kind = cJSON_GetObjectItem(p, "kind")->valuestring;
		const char *pdt = cJSON_GetObjectItem(p, "dtype")->valuestring;
		kspec_arg_t *arg = &r->args[r->nargs];

		r->argbuf[r->nargs] = -1;
		if (strcmp(kind, "buffer") == 0) {
			for (i = 0; i < r->nb; i++)
				if (strcmp(r->b[i].name, name) == 0)
					break;
			cr_assert_lt(i, r->nb, "%s: no buffer %s", c->kernel,
			    name);
			*arg = kspec_arg_typed(r->b[i].data, r->size[i],
			    strcmp(pdt, "i32") ? c->dtype : "i32");
			r->argbuf[r->nargs] = i;
		} else if (strcmp(pdt, "i64") == 0) {
			*arg = kspec_arg_i64(dim(r->def, c->v, name));
		} else {
			*arg = kspec_arg_f32(strcmp(name, "eps") == 0 ?
			    1e-5f : 0.125f);
		}
		r->nargs++;
	}
	cJSON_Delete(m);
	kspec_artifact_free(a);
}

static void reset(run_t *r)
{
	int i;

	for (i = 0; i < r->nb; i++)
		memcpy(r->b[i].data, r->init[i], r->size[i]);
}

static int unchanged(const run_t *r)
{
	int i;

	for (i = 0; i < r->nb; i++)
		if (memcmp(r->b[i].data, r->init[i], r->size[i]))
			return 0;
	return 1;
}

static void finish(run_t *r)
{
	int i;

	for (i = 0; i < r->nb; i++) {
		free(r->b[i].data);
		free(r->init[i]);
	}
	kspec_cpu_unload(r->k);
}

/* The outputs of a call on NTHREADS threads, from the filled inputs. */
static void **outputs(run_t *r, int nthreads)
{
	void **out = calloc((size_t)r->nb, sizeof *out);
	char err[256];
	int i;

	reset(r);
	cr_assert_eq(kspec_cpu_call(r->k, r->args, r->nargs, nthreads, err,
	    sizeof err), 0, "%s: %s", r->c->kernel, err);
	for (i = 0; i < r->nb; i++) {
		out[i] = malloc(r->size[i]);
		memcpy(out[i], r->b[i].data, r->size[i]);
	}
	return out;
}

static void free_outputs(const run_t *r, void **out)
{
	int i;

	for (i = 0; i < r->nb; i++)
		free(out[i]);
	free(out);
}

/*
 * The done-when of the safe loaders: attention_decode's k cache one
 * element short is refused with a message naming it and both sizes, and
 * the kernel never ran (o keeps its bytes).
 */
Test(launch, a_short_kv_cache_is_refused_before_the_call)
{
	const case_t c = { "attention_decode", "f32", { 1, 8, 2, 64, 48 },
	    NULL };
	size_t need = 1 * 48 * 2 * 64 * 4;
	char err[256], want[256];
	run_t r;

	prepare(&c, &r);
	cr_assert_eq(r.args[1].bytes, need);
	r.args[1].bytes = need - 4;
	cr_assert_eq(kspec_cpu_call(r.k, r.args, r.nargs, 2, err,
	    sizeof err), KSPEC_E_INVAL);
	snprintf(want, sizeof want, "buffer k has %zu bytes; "
	    "ks_attention_decode_gqa needs %zu (1x48x2x64 of f32)", need - 4,
	    need);
	cr_assert_str_eq(err, want);
	cr_assert(unchanged(&r), "the kernel ran");
	r.args[1].bytes = need;
	cr_assert_eq(kspec_cpu_call(r.k, r.args, r.nargs, 2, err,
	    sizeof err), 0, "%s", err);
	cr_assert_not(unchanged(&r), "the kernel did not run");
	finish(&r);
}

/*
 * Each buffer of each kernel alone one element short (and NULL, and of
 * another dtype) is refused and nothing runs: a check missing for any one
 * buffer fails here.  Wrong counts and negative dims too.
 */
Test(launch, every_buffer_alone_short_is_refused)
{
	size_t ci, i;
	char err[256], name[80];
	run_t r;

	for (ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
		prepare(&cases[ci], &r);
		for (i = 0; i < r.nargs; i++) {
			kspec_arg_t keep = r.args[i];
			int b = r.argbuf[i];
			size_t es;

			if (b < 0) {
				if (r.args[i].dtype == NULL &&
				    r.args[i].i64 > 0) {
					r.args[i].i64 = -1;
					cr_assert_eq(kspec_cpu_call(r.k,
					    r.args, r.nargs, 1, err,
					    sizeof err), KSPEC_E_INVAL);
					cr_assert(strstr(err, ">= 0"), "%s",
					    err);
					r.args[i] = keep;
				}
				continue;
			}
			es = r.b[b].i32 ? 4 : ks_dtype_size(r.dt);
			r.args[i].bytes = keep.bytes - es;
			cr_assert_eq(kspec_cpu_call(r.k, r.args, r.nargs, 2,
			    err, sizeof err), KSPEC_E_INVAL,
			    "%s: %s one element short was accepted",
			    cases[ci].kernel, r.b[b].name);
			snprintf(name, sizeof name, "buffer %s has %zu bytes;",
			    r.b[b].name, r.args[i].bytes);
			cr_assert(strstr(err, name) == err, "%s", err);
			r.args[i] = keep;
			r.args[i].data = NULL;
			cr_assert_eq(kspec_cpu_call(r.k, r.args, r.nargs, 1,
			    err, sizeof err), KSPEC_E_INVAL);
			cr_assert(strstr(err, "is NULL"), "%s", err);
			r.args[i] = keep;
			r.args[i].dtype = r.b[b].i32 ? "f32" : "i32";
			cr_assert_eq(kspec_cpu_call(r.k, r.args, r.nargs, 1,
			    err, sizeof err), KSPEC_E_INVAL);
			cr_assert(strstr(err, "holds"), "%s", err);
			r.args[i] = keep;
			cr_assert(unchanged(&r), "%s ran", cases[ci].kernel);
		}
		cr_assert_eq(kspec_cpu_call(r.k, r.args, r.nargs - 1, 1, err,
		    sizeof err), KSPEC_E_INVAL);
		cr_assert(strstr(err, "arguments"), "%s", err);
		cr_assert(unchanged(&r), "%s ran", cases[ci].kernel);
		finish(&r);
	}
}

/* N threads (an even split, an uneven one, more threads than CPUs) give
 * every output bitwise as one thread does, for every kernel. */
Test(launch, threads_give_the_bits_of_one_thread)
{
	static const int threads[] = { 2, 3, 7, 0 };
	size_t ci, t;
	int i;
	run_t r;

	for (ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
		void **one;

		prepare(&cases[ci], &r);
		one = outputs(&r, 1);
		cr_assert_not(unchanged(&r), "%s wrote nothing",
		    cases[ci].kernel);
		for (t = 0; t < sizeof threads / sizeof threads[0]; t++) {
			void **many = outputs(&r, threads[t]);

			for (i = 0; i < r.nb; i++)
				cr_assert_eq(memcmp(one[i], many[i],
				    r.size[i]), 0, "%s: %s differs on %d "
				    "threads", cases[ci].kernel,
				    r.b[i].name, threads[t]);
			free_outputs(&r, many);
		}
		free_outputs(&r, one);
		finish(&r);
	}
}

static _Atomic uint64_t ran;

static void count_groups(void **params, uint64_t begin, uint64_t end)
{
	uint64_t *seen = params[0];
	uint64_t g;

	for (g = begin; g < end; g++)
		seen[g]++;
	ran += end - begin;
}

/* Every group runs exactly once, at any thread count and group count. */
Test(launch, each_group_runs_once)
{
	static const uint64_t counts[] = { 0, 1, 2, 5, 64, 1001 };
	uint64_t seen[1001];
	void *params[1] = { seen };
	size_t i, g;
	int t;

	for (i = 0; i < sizeof counts / sizeof counts[0]; i++)
		for (t = 0; t <= 9; t++) {
			memset(seen, 0, sizeof seen);
			ran = 0;
			cr_assert_eq(kspec_cpu_launch(count_groups, params,
			    counts[i], t), 0);
			cr_assert_eq(ran, counts[i]);
			for (g = 0; g < counts[i]; g++)
				cr_assert_eq(seen[g], 1);
		}
	cr_assert_eq(kspec_cpu_launch(count_groups, params, 1, -1),
	    KSPEC_E_INVAL);
	cr_assert_eq(kspec_cpu_launch(count_groups, params, 1,
	    KSPEC_MAX_THREADS + 1), KSPEC_E_INVAL);
	cr_assert_geq(kspec_cpu_threads(), 1);
}

/* After fork (with the parent's pool started), the child launches on 4
 * threads and gets the parent's bits; the parent's pool still works. */
Test(launch, a_forked_child_launches_on_a_new_pool)
{
	run_t r;
	void **one;
	pid_t pid;
	int status, i;

	prepare(&cases[7], &r);
	one = outputs(&r, 4);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		char err[256];
		int same = 1;

		alarm(30);
		reset(&r);
		if (kspec_cpu_call(r.k, r.args, r.nargs, 4, err, sizeof err))
			_exit(2);
		for (i = 0; i < r.nb; i++)
			same &= memcmp(one[i], r.b[i].data, r.size[i]) == 0;
		_exit(same ? 0 : 1);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	    "child status %d", status);
	free_outputs(&r, outputs(&r, 4));
	free_outputs(&r, one);
	finish(&r);
}
