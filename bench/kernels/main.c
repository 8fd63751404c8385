/*
 * bench/kernels: the kernel library on one CPU thread at the shapes of an
 * 8B-class model (hidden 4096, FFN 14336, 32 query heads, 8 KV heads, head
 * dim 128; decode with KV length 2048 and 8192; prefill with 512 tokens).
 *
 * Each kernel is specialized and compiled by the cpu backend exactly as
 * kspecd serves it (ks_specialize + the cpu backend, constants baked), then
 * timed beside its references in the same run, alternating, after a
 * warm-up:
 *   - memory-bound kernels: GB/s of the bytes they must move (every buffer
 *     read once, every written buffer written once) against a plain read
 *     loop over the same number of bytes (goal >= 80%);
 *   - decode GEMV and prefill GEMM: against OpenBLAS sgemv / sgemm on one
 *     thread (f32; goal >= 1.0x for the GEMV);
 *   - every specialized variant against `general` forced at the same
 *     constant shape, and the selected variant against the same kernel with
 *     every dim dynamic (what binding the constants is worth).
 * Each figure is the median of TRIALS trials with min..max; a trial repeats
 * the call until it lasts about 20 ms.  Usage: kernels [FILTER [LABEL]]
 * runs only the cases whose kernel name contains FILTER (and whose label
 * contains LABEL: `kernels gemm prefill`).
 */
#include <cblas.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../../jit/jit.h"
#include "../../ref/ref.h"
#include "../bench.h"
#include "../../ref/layout.h"

#define TRIALS 9
#define TRIAL_NS 20000000.0

static volatile uint64_t sink;

/* ---- cases ---- */

typedef struct {
	const char *kernel;
	const char *label;
	ks_dtype_t dtype;
	int64_t dims[KS_MAX_DIMS];      /* declared order, all constant */
	int blas;                       /* 1 sgemv, 2 sgemm reference */
} case_t;

#define F32 KS_DTYPE_F32
#define BF16 KS_DTYPE_BF16

static const case_t cases[] = {
	{ "gemm", "decode q/o proj", F32, { 1, 4096, 4096 }, 1 },
	{ "gemm", "decode q/o proj", BF16, { 1, 4096, 4096 }, 0 },
	{ "gemm", "decode down proj", F32, { 1, 4096, 14336 }, 1 },
	{ "gemm", "decode down proj", BF16, { 1, 4096, 14336 }, 0 },
	{ "gemm", "verify 2 tokens", BF16, { 2, 4096, 4096 }, 0 },
	{ "gemm", "verify 4 tokens", BF16, { 4, 4096, 4096 }, 0 },
	{ "gemm", "verify 8 tokens", BF16, { 8, 4096, 4096 }, 0 },
	{ "gemm", "verify 16 tokens", BF16, { 16, 4096, 4096 }, 0 },
	{ "gemm", "prefill 512", F32, { 512, 4096, 4096 }, 2 },
	{ "gemm", "prefill 512 up", F32, { 512, 14336, 4096 }, 2 },
	{ "gemm", "prefill 512 down", F32, { 512, 4096, 14336 }, 2 },
	{ "gemm_packed", "prefill 512", F32, { 512, 4096, 4096 }, 2 },
	{ "gemm_packed", "prefill 512 up", F32, { 512, 14336, 4096 }, 2 },
	{ "gemm_packed", "prefill 512 down", F32, { 512, 4096, 14336 }, 2 },
	{ "gemm_pack_x", "prefill 512", F32, { 512, 4096 }, 0 },
	{ "gemm_pack_x", "prefill 512 of F", F32, { 512, 14336 }, 0 },
	{ "gemm_pack_w", "a weight", F32, { 4096, 4096 }, 0 },
	{ "gemm_pack_w", "a weight", BF16, { 4096, 4096 }, 0 },
	{ "rmsnorm", "decode", BF16, { 1, 4096 }, 0 },
	{ "rmsnorm", "prefill 512", BF16, { 512, 4096 }, 0 },
	{ "rmsnorm", "prefill 512", F32, { 512, 4096 }, 0 },
	{ "add_rmsnorm", "prefill 512", BF16, { 512, 4096 }, 0 },
	{ "add_rmsnorm", "prefill 512", F32, { 512, 4096 }, 0 },
	{ "softmax", "32 heads x 2048", BF16, { 32, 2048 }, 0 },
	{ "softmax", "32 heads x 8192", F32, { 32, 8192 }, 0 },
	{ "rope", "decode q", BF16, { 1, 32, 128, 8192 }, 0 },
	{ "rope", "prefill 512 q", BF16, { 512, 32, 128, 8192 }, 0 },
	{ "silu_mul", "decode", BF16, { 1, 14336 }, 0 },
	{ "silu_mul", "prefill 512", BF16, { 512, 14336 }, 0 },
	{ "attention_prefill", "prefill 512", F32,
	    { 1, 512, 32, 8, 128, 640, 640 }, 0 },
	{ "attention_decode", "B=1 S=2048", BF16, { 1, 32, 8, 128, 2048 },
	    0 },
	{ "attention_decode", "B=1 S=8192", BF16, { 1, 32, 8, 128, 8192 },
	    0 },
	{ "attention_decode", "B=8 S=2048", BF16, { 8, 32, 8, 128, 2048 },
	    0 },
};

/* ---- compiling a variant ---- */

typedef struct {
	ks_ir_kernel_t *k;
	ks_jit_cpu_lib_t *lib;
	ks_jit_cpu_entry_t fn;
	void *params[16];
	void *ptrs[16];
	int64_t i64[16];
	float f32[16];
	uint64_t groups;
} prog_t;

/*
 * Compiles DEF at dims V (VARIANT NULL: the library's choice; DYNAMIC:
 * every dim a launch argument) and binds the buffers B.  Returns 0, or -1
 * when the variant does not apply.
 */
static int prog_open(prog_t *p, const ks_kernel_def_t *def, ks_dtype_t dt,
    const int64_t *v, const char *variant, int dynamic, buf_t *b, int nb)
{
	ks_dim_t dims[KS_MAX_DIMS];
	ks_spec_t spec;
	ks_jit_artifact_t a;
	char target[KS_MAX_NAME], err[4096];
	int64_t groups;
	int i, j, np = 0;

	memset(p, 0, sizeof *p);
	for (i = 0; i < def->ndims; i++)
		dims[i] = (ks_dim_t){ def->dims[i], !dynamic, v[i] };
	if (ks_kernel_validate(def, dt, KS_MODE_EXACT, dims, def->ndims, &spec,
	    err, sizeof err) != KS_OK || ks_specialize_variant(&spec, variant,
	    &p->k, err, sizeof err) != KS_OK)
		return -1;
	if (ks_backend_cpu.resolve_target("auto", target, sizeof target, err,
	    sizeof err) != KS_OK || ks_backend_cpu.compile(p->k, target, "so",
	    &a, err, sizeof err) != KS_OK || ks_jit_cpu_load(a.bytes, a.len,
	    p->k->entry, &p->lib, &p->fn, err, sizeof err) != KS_OK) {
		fprintf(stderr, "kernels: %s: %s\n", def->name, err);
		exit(1);
	}
	ks_jit_artifact_close(&a);
	for (i = 0; i < p->k->nparams; i++) {
		const ks_ir_param_t *pa = &p->k->params[i];

		if (pa->kind == KS_PARAM_BUFFER) {
			for (j = 0; j < nb; j++)
				if (strcmp(b[j].name, pa->name) == 0)
					p->ptrs[i] = b[j].data;
			if (p->ptrs[i] == NULL) {
				fprintf(stderr, "kernels: no buffer %s\n",
				    pa->name);
				exit(1);
			}
			p->params[np++] = &p->ptrs[i];
		} else if (pa->bound) {
			continue;
		} else if (pa->type == KS_TY_F32) {
			p->f32[i] = strcmp(pa->name, "scale") == 0 ?
			    1.0f / sqrtf((float)dim(spec.def, v, "D")) : 1e-5f;
			p->params[np++] = &p->f32[i];
		} else {
			p->i64[i] = dim(spec.def, v, pa->name);
			p->params[np++] = &p->i64[i];
		}
	}
	if (ks_ir_eval_launch(p->k, p->k->grid, p->i64, &groups) != KS_OK) {
		fprintf(stderr, "kernels: %s: grid not evaluable\n", def->name);
		exit(1);
	}
	p->groups = (uint64_t)groups;
	return 0;
}

static void prog_close(prog_t *p)
{
	ks_jit_cpu_unload(p->lib);
	ks_ir_free(p->k);
}

/* ---- timing ---- */

enum { MAXRUN = 8 };

typedef struct {
	char name[64];
	int kind;               /* 0 kernel, 1 read loop, 2 sgemv, 3 sgemm */
	prog_t *prog;
	int reps;
	double g[TRIALS];
	double med;
} run_t;

typedef struct {
	const ks_kernel_def_t *def;
	const int64_t *dims;
	const buf_t *b;         /* the kernel's own buffers */
	int nb;
	size_t es;
	int64_t M, N, K;
	const float *x, *w;
	float *y;
} refs_t;

static void run_once(const run_t *r, const refs_t *f)
{
	int i;

	switch (r->kind) {
	case 0:
		r->prog->fn(r->prog->params, 0, r->prog->groups);
		break;
	case 1:
		for (i = 0; i < f->nb; i++)
			sink += read_loop(f->b[i].data, (size_t)lay_read_elems(
			    f->def, f->dims, &f->b[i]) * (f->b[i].i32 ? 4 :
			    f->es) / 8);
		break;
	case 2:
		cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)f->N, (int)f->K,
		    1.0f, f->w, (int)f->K, f->x, 1, 0.0f, f->y, 1);
		break;
	default:
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
		    (int)f->M, (int)f->N, (int)f->K, 1.0f, f->x, (int)f->K,
		    f->w, (int)f->K, 0.0f, f->y, (int)f->N);
		break;
	}
}

/* Measures RUNS alternately; figures in units of WORK per ns. */
static void measure(run_t *runs, int n, const refs_t *f, double work)
{
	int t, i, k;

	for (i = 0; i < n; i++) {       /* warm-up and repetition count */
		uint64_t t0 = bench_ns();

		run_once(&runs[i], f);
		run_once(&runs[i], f);
		runs[i].reps = (int)(TRIAL_NS / ((double)(bench_ns() - t0) /
		    2 + 1));
		if (runs[i].reps < 1)
			runs[i].reps = 1;
		if (runs[i].reps > 100000)
			runs[i].reps = 100000;
	}
	for (t = 0; t < TRIALS; t++)
		for (i = 0; i < n; i++) {
			uint64_t t0 = bench_ns();

			for (k = 0; k < runs[i].reps; k++)
				run_once(&runs[i], f);
			runs[i].g[t] = work * runs[i].reps /
			    (double)(bench_ns() - t0);
		}
	for (i = 0; i < n; i++)
		runs[i].med = bench_median(runs[i].g, TRIALS);
}

static void print_dims(char *s, size_t n, const ks_kernel_def_t *def,
    const int64_t *v)
{
	size_t o = 0;
	int i;

	s[0] = '\0';
	for (i = 0; i < def->ndims && o < n; i++)
		o += (size_t)snprintf(s + o, n - o, "%s%s=%lld", i ? "," : "",
		    def->dims[i], (long long)v[i]);
}

static void bench_case(const case_t *c)
{
	const ks_kernel_def_t *def = ks_kernel_find(c->kernel);
	size_t es = ks_dtype_size(c->dtype);
	buf_t b[LAY_MAXB];
	prog_t progs[MAXRUN];
	run_t runs[MAXRUN];
	refs_t f = { 0 };
	char dims[128];
	double bytes, work, ref;
	int nb, i, n = 0, np = 0, flops = c->blas == 2;

	if (def == NULL) {
		printf("%-17s %-17s not in this build's library\n", c->kernel,
		    c->label);
		return;
	}
	nb = layout(def, c->dims, b);
	lay_fill(def, c->dims, b, nb, c->dtype, 1);
	/* rope rotates x in place on every call: at position 0 (cos 1, sin
	 * 0) x keeps its values, where the dtype's rounding of other angles
	 * would shrink it into subnormals over a million calls.  The work is
	 * the same at every position. */
	for (i = 0; i < nb && strcmp(def->name, "rope") == 0; i++)
		if (strcmp(b[i].name, "pos") == 0)
			memset(b[i].data, 0, lay_bytes(&b[i], es));
	bytes = moved(def, c->dims, b, nb, es);
	work = flops ? 2.0 * (double)c->dims[0] * (double)c->dims[1] *
	    (double)c->dims[2] : bytes;

	/* The selected variant, every other variant that applies forced at
	 * the same constant shape (general always does), and every dim
	 * dynamic. */
	if (prog_open(&progs[np], def, c->dtype, c->dims, NULL, 0, b,
	    nb) == 0) {
		runs[n] = (run_t){ .kind = 0, .prog = &progs[np++] };
		snprintf(runs[n++].name, sizeof runs[0].name, "kspec %s",
		    progs[0].k->variant);
	}
	for (i = 0; i < def->nvariants && np == n; i++) {
		if (np > 0 && strcmp(progs[0].k->variant,
		    def->variants[i]) == 0)
			continue;
		if (prog_open(&progs[np], def, c->dtype, c->dims,
		    def->variants[i], 0, b, nb) != 0)
			continue;
		runs[n] = (run_t){ .kind = 0, .prog = &progs[np++] };
		snprintf(runs[n++].name, sizeof runs[0].name,
		    "kspec %s, forced", def->variants[i]);
	}
	if (prog_open(&progs[np], def, c->dtype, c->dims, NULL, 1, b,
	    nb) == 0) {
		runs[n] = (run_t){ .kind = 0, .prog = &progs[np++] };
		snprintf(runs[n++].name, sizeof runs[0].name,
		    "kspec all dynamic");
	}
	f.def = def;
	f.dims = c->dims;
	f.b = b;
	f.nb = nb;
	f.es = es;
	if (!flops) {
		runs[n] = (run_t){ .kind = 1 };
		snprintf(runs[n++].name, sizeof runs[0].name,
		    "plain read loop");
	}
	if (c->blas) {
		f.M = c->dims[0];
		f.N = c->dims[1];
		f.K = c->dims[2];
		f.x = b[0].data;
		f.w = b[1].data;
		f.y = b[2].data;
		runs[n] = (run_t){ .kind = c->blas == 1 ? 2 : 3 };
		snprintf(runs[n++].name, sizeof runs[0].name, "OpenBLAS %s",
		    c->blas == 1 ? "sgemv" : "sgemm");
	}
	measure(runs, n, &f, work);
	print_dims(dims, sizeof dims, def, c->dims);
	printf("%s %s (%s, %s), %.2f MB moved\n", c->kernel, c->label,
	    ks_dtype_name(c->dtype), dims, bytes / 1e6);
	ref = flops ? runs[n - 1].med : runs[np].med;
	for (i = 0; i < n; i++) {
		printf("  %-24s %9.2f %s  (%.2f..%.2f)", runs[i].name,
		    runs[i].med, flops ? "GFLOP/s" : "GB/s   ", runs[i].g[0],
		    runs[i].g[TRIALS - 1]);
		if (runs[i].kind == 0)
			printf("  %5.0f%% of %s", 100 * runs[i].med / ref,
			    flops ? "OpenBLAS" : "read loop");
		if (runs[i].kind == 2)
			printf("  kspec/OpenBLAS %.2fx",
			    runs[0].med / runs[i].med);
		printf("\n");
	}
	for (i = 0; i < np - 1; i++)
		if (strcmp(progs[i].k->variant, "general") == 0)
			break;
	if (np > 1 && i < np - 1)
		printf("  specialization: %s is %.2fx general at this shape, "
		    "%.2fx all dynamic\n", progs[0].k->variant,
		    runs[0].med / runs[i].med, runs[0].med / runs[np - 1].med);
	for (i = 0; i < np; i++)
		prog_close(&progs[i]);
	for (i = 0; i < nb; i++)
		free(b[i].data);
}

int main(int argc, char **argv)
{
	size_t i;

	openblas_set_num_threads(1);
	if (ks_base_init() != KS_OK)
		return 1;
	printf("kernels: one thread, %d trials of ~%.0f ms each, median "
	    "(min..max); bytes = every buffer read once, outputs written "
	    "once\n\n", TRIALS, TRIAL_NS / 1e6);
	for (i = 0; i < sizeof cases / sizeof *cases; i++) {
		if (argc > 1 && strstr(cases[i].kernel, argv[1]) == NULL)
			continue;
		if (argc > 2 && strstr(cases[i].label, argv[2]) == NULL)
			continue;
		bench_case(&cases[i]);
		fflush(stdout);
	}
	printf("\ngoals: memory-bound kernels >= 80%% of the read loop; "
	    "decode GEMV >= 1.0x OpenBLAS sgemv\n");
	return 0;
}
