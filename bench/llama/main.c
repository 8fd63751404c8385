/*
 * bench/llama: examples/llama's 8b2l config (Llama-3-8B's layer shapes,
 * two layers, vocab 32000) through kspecd's kernels, f32, bf16, q8_0,
 * q4_0 and q4_k weights (--wdtype), on one thread and on all threads:
 * prefill of a 512-token
 * prompt in tokens/s and greedy decode after it in ms/token.  Beside it,
 * in the same run: a plain C reference of the same math (loops, one
 * thread) and, when /usr/bin/python3 can import torch, PyTorch CPU
 * (bench/llama/torch_ref.py: F.linear for prefill; decode through
 * torch.mv and, a second row, through F.linear; f32) with OpenBLAS's
 * thread count pinned through OPENBLAS_NUM_THREADS.
 * Medians with min..max over TRIALS runs after a warm-up.  Then, with
 * PyTorch, ROUNDS interleaved rounds of the one-thread f32 pair (a kspec
 * run, a PyTorch run) and the median of the per-round ratios: the
 * figure to compare the two by.  `bench/llama --interleaved` runs only
 * the rounds.  Where there is more than one thread, ROUNDS interleaved
 * rounds of decode on one thread and on all (f32, a short prompt) beside
 * a plain read loop over 1 GiB on one thread and on all: decode streams
 * its weights from memory, so the read loop's ratio is the ceiling of
 * decode's ratio on this machine (`--threads-only` runs only these).
 * Last, ROUNDS interleaved rounds of one-thread decode with f32 and with
 * bf16 weights (a short prompt, the order alternating), the median of
 * the per-round bf16 / f32 ratios (`--bf16-only` runs only these):
 * separate rows of the table can be minutes apart, and this machine's
 * memory bandwidth moves by tens of percent in that time.
 * Then, beside llama.cpp (the pinned npm package's libllama, tests/
 * llama_cpp.h): per weight format (f32, q8_0, q4_0, q4_k) examples/llama
 * writes the model once as a GGUF file, and both engines run that file
 * in LL_ROUNDS interleaved rounds on one thread and on all, for the
 * block formats with examples/llama --mode fast as a third engine of
 * each round: prefill tokens/s, decode ms/token, their per-round ratios
 * and the engines' first greedy tokens, mode fast's and llama.cpp's with
 * its attention in f32 among them (`--beside-only` runs only these;
 * `bench/llama --llama-cpp FILE THREADS` is the llama.cpp side of one
 * round).
 */
#include <pthread.h>
#include <sys/wait.h>

#include "../../include/kspec.h"
#include "../../tests/e2e.h"
#include "../../ref/ref.h"
#include "../bench.h"
#include "../../tests/llama_cpp.h"

#define PROMPT 512
#define STEPS 9                 /* 8 timed decode steps per trial */
#define TOKS 64                 /* greedy tokens compared with llama.cpp */
#define TRIALS 3
#define ROUNDS 5                /* interleaved kspec / PyTorch rounds */
#define LL_ROUNDS 3             /* interleaved kspec / llama.cpp rounds */

enum { H = 4096, L = 2, HQ = 32, HKV = 8, D = 128, FF = 14336, V = 32000,
    SMAX = PROMPT + STEPS };

typedef struct {
	double pre[3], dec[3];  /* median, min, max: ms */
	double dec_lin[3];      /* PyTorch's F.linear decode, when printed */
	int32_t tok[TOKS];      /* the greedy tokens, when printed */
	int ok, has_lin, ntok;
} figures_t;

/* The CPU backend llama.cpp's runs said ggml chose. */
static char llama_cpp_backend[512];

/* Runs CMD (a shell line), reads "<TAG> prefill_ms a b c decode_ms a b c"
 * or torch's two lines from its stdout. */
static int run_and_read(const char *cmd, figures_t *f)
{
	FILE *p = popen(cmd, "r");
	char line[512];

	memset(f, 0, sizeof *f);
	if (p == NULL)
		return -1;
	while (fgets(line, sizeof line, p)) {
		double a, b, c, x, y, z;
		char *q = line, *end;

		if (strncmp(line, "backend ", 8) == 0) {
			snprintf(llama_cpp_backend, sizeof llama_cpp_backend,
			    "%s", line + 8);
		} else if (*line >= '0' && *line <= '9') {  /* greedy tokens */
			for (f->ntok = 0; f->ntok < TOKS; f->ntok++) {
				long t = strtol(q, &end, 10);

				if (end == q)
					break;
				f->tok[f->ntok] = (int32_t)t;
				q = end;
			}
		} else if (sscanf(line, "timing prefill_ms %lf %lf %lf decode_ms %lf "
		    "%lf %lf", &a, &b, &c, &x, &y, &z) == 6) {
			f->pre[0] = a, f->pre[1] = b, f->pre[2] = c;
			f->dec[0] = x, f->dec[1] = y, f->dec[2] = z;
			f->ok = 1;
		} else if (sscanf(line, "torch prefill_ms %lf %lf %lf", &a, &b,
		    &c) == 3) {
			f->pre[0] = a, f->pre[1] = b, f->pre[2] = c;
		} else if (sscanf(line, "torch decode_ms %lf %lf %lf", &x, &y,
		    &z) == 3) {
			f->dec[0] = x, f->dec[1] = y, f->dec[2] = z;
			f->ok = 1;
		} else if (sscanf(line, "torch decode_linear_ms %lf %lf %lf",
		    &x, &y, &z) == 3) {
			f->dec_lin[0] = x, f->dec_lin[1] = y;
			f->dec_lin[2] = z;
			f->has_lin = 1;
		}
	}
	return pclose(p) == 0 && (f->ok || f->ntok > 0) ? 0 : -1;
}

static void row(const char *what, const char *w, int threads,
    const figures_t *f)
{
	/* tokens/s from ms: the median's, and the spread's ends swapped. */
	printf("%-22s %-5s %7d %9.1f %9.1f..%-9.1f %9.2f %9.2f..%-9.2f\n",
	    what, w, threads, PROMPT * 1e3 / f->pre[0], PROMPT * 1e3 /
	    f->pre[2], PROMPT * 1e3 / f->pre[1], f->dec[0], f->dec[1],
	    f->dec[2]);
}

/* ---- the plain C reference: the same model in loops, one thread ---- */

typedef struct {
	const void *w;          /* N x K, f32 or bf16 */
	int bf16;
} wt_t;

/*
 * y[m][n] = sum_k x[m][k] * W[n][k]: 16 accumulators per row (so that the
 * compiler vectorizes without reassociating) and 4 rows of x per pass
 * over W (so that prefill reads W a quarter as often).  K % 16 == 0.
 */
static void linear(const float *x, int M, const wt_t *W, int N, int K,
    float *y)
{
	int m0, n, k, r, j;

	for (m0 = 0; m0 < M; m0 += 4)
	for (n = 0; n < N; n++) {
		const int R = M - m0 < 4 ? M - m0 : 4;
		float acc[4][16] = { { 0 } }, wv[16];

		for (k = 0; k < K; k += 16) {
			if (W->bf16)
				for (j = 0; j < 16; j++)
					wv[j] = ref_bf16_to_f32(((const uint16_t *)
					    W->w)[(size_t)n * K + k + j]);
			else
				memcpy(wv, (const float *)W->w + (size_t)n * K +
				    k, sizeof wv);
			for (r = 0; r < R; r++)
				for (j = 0; j < 16; j++)
					acc[r][j] += x[(size_t)(m0 + r) * K + k +
					    j] * wv[j];
		}
		for (r = 0; r < R; r++) {
			float s = 0;

			for (j = 0; j < 16; j++)
				s += acc[r][j];
			y[(size_t)(m0 + r) * N + n] = s;
		}
	}
}

static void norm(const float *x, const float *w, float *y, int T)
{
	int t, j;

	for (t = 0; t < T; t++) {
		float ss = 0, inv;

		for (j = 0; j < H; j++)
			ss += x[(size_t)t * H + j] * x[(size_t)t * H + j];
		inv = 1.0f / sqrtf(ss / H + 1e-5f);
		for (j = 0; j < H; j++)
			y[(size_t)t * H + j] = x[(size_t)t * H + j] * inv * w[j];
	}
}

static void rotate(float *x, int heads, int p, const float *cs)
{
	int h, i;

	for (h = 0; h < heads; h++)
		for (i = 0; i < D / 2; i++) {
			float *r = x + h * D, c = cs[p * D + i],
			    s = cs[p * D + D / 2 + i], x0 = r[i], x1 = r[D / 2 + i];

			r[i] = x0 * c - x1 * s;
			r[D / 2 + i] = x1 * c + x0 * s;
		}
}

typedef struct {
	wt_t wq[L], wk[L], wv[L], wo[L], wgu[L], wd[L], wout;
	float *emb, *normw, *cs, *kc[L], *vc[L];
	float *x, *h, *q, *k, *v, *att, *tmp, *gu, *act, *sc, *logits;
} plain_t;

/* T tokens at START; returns the greedy pick after the last. */
static int plain_forward(plain_t *p, const int32_t *ids, int T, int start)
{
	const int G = HQ / HKV;
	int l, t, j, h, s;

	for (t = 0; t < T; t++)
		memcpy(p->x + (size_t)t * H, p->emb + (size_t)ids[t] * H,
		    H * sizeof(float));
	for (l = 0; l < L; l++) {
		norm(p->x, p->normw, p->h, T);
		linear(p->h, T, &p->wq[l], HQ * D, H, p->q);
		linear(p->h, T, &p->wk[l], HKV * D, H, p->k);
		linear(p->h, T, &p->wv[l], HKV * D, H, p->v);
		for (t = 0; t < T; t++) {
			rotate(p->q + (size_t)t * HQ * D, HQ, start + t, p->cs);
			rotate(p->k + (size_t)t * HKV * D, HKV, start + t, p->cs);
			memcpy(p->kc[l] + (size_t)(start + t) * HKV * D, p->k +
			    (size_t)t * HKV * D, HKV * D * sizeof(float));
			memcpy(p->vc[l] + (size_t)(start + t) * HKV * D, p->v +
			    (size_t)t * HKV * D, HKV * D * sizeof(float));
		}
		for (t = 0; t < T; t++)
		for (h = 0; h < HQ; h++) {
			const float *q = p->q + ((size_t)t * HQ + h) * D;
			float *o = p->att + ((size_t)t * HQ + h) * D, mx = -INFINITY,
			    sum = 0;
			const int n = start + t + 1;

			for (s = 0; s < n; s++) {
				const float *k = p->kc[l] + ((size_t)s * HKV +
				    h / G) * D;
				float d = 0;

				for (j = 0; j < D; j++)
					d += q[j] * k[j];
				p->sc[s] = d / sqrtf((float)D);
				mx = fmaxf(mx, p->sc[s]);
			}
			memset(o, 0, D * sizeof(float));
			for (s = 0; s < n; s++) {
				const float *v = p->vc[l] + ((size_t)s * HKV +
				    h / G) * D;
				float e = expf(p->sc[s] - mx);

				sum += e;
				for (j = 0; j < D; j++)
					o[j] += e * v[j];
			}
			for (j = 0; j < D; j++)
				o[j] /= sum;
		}
		linear(p->att, T, &p->wo[l], H, HQ * D, p->tmp);
		for (j = 0; j < T * H; j++)
			p->x[j] += p->tmp[j];
		norm(p->x, p->normw, p->h, T);
		linear(p->h, T, &p->wgu[l], 2 * FF, H, p->gu);
		for (t = 0; t < T; t++)
			for (j = 0; j < FF; j++) {
				float g = p->gu[(size_t)t * 2 * FF + j];

				p->act[(size_t)t * FF + j] = g / (1.0f + expf(-g)) *
				    p->gu[(size_t)t * 2 * FF + FF + j];
			}
		linear(p->act, T, &p->wd[l], H, FF, p->tmp);
		for (j = 0; j < T * H; j++)
			p->x[j] += p->tmp[j];
	}
	norm(p->x + (size_t)(T - 1) * H, p->normw, p->h, 1);
	linear(p->h, 1, &p->wout, V, H, p->logits);
	for (j = 1, s = 0; j < V; j++)
		if (p->logits[j] > p->logits[s])
			s = j;
	return s;
}

static void *filled(size_t n, int bf16, float scale, uint64_t seed)
{
	void *w = malloc(n * (bf16 ? 2 : 4));
	uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
	size_t i;

	for (i = 0; i < n; i++) {
		float v = (float)((double)(ref_rand(&st) >> 11) /
		    (double)(1ull << 53) * 2.0 - 1.0) * scale;

		if (bf16)
			((uint16_t *)w)[i] = ref_f32_to_bf16(v);
		else
			((float *)w)[i] = v;
	}
	return w;
}

static void plain_open(plain_t *p, int bf16)
{
	int l, i, j;

	memset(p, 0, sizeof *p);
	for (l = 0; l < L; l++) {
		p->wq[l] = (wt_t){ filled((size_t)HQ * D * H, bf16,
		    sqrtf(3.0f / H), 10 + l), bf16 };
		p->wk[l] = (wt_t){ filled((size_t)HKV * D * H, bf16,
		    sqrtf(3.0f / H), 20 + l), bf16 };
		p->wv[l] = (wt_t){ filled((size_t)HKV * D * H, bf16,
		    sqrtf(3.0f / H), 30 + l), bf16 };
		p->wo[l] = (wt_t){ filled((size_t)H * HQ * D, bf16,
		    sqrtf(3.0f / H), 40 + l), bf16 };
		p->wgu[l] = (wt_t){ filled((size_t)2 * FF * H, bf16,
		    sqrtf(3.0f / H), 50 + l), bf16 };
		p->wd[l] = (wt_t){ filled((size_t)H * FF, bf16,
		    sqrtf(3.0f / FF), 60 + l), bf16 };
		p->kc[l] = calloc((size_t)SMAX * HKV * D, sizeof(float));
		p->vc[l] = calloc((size_t)SMAX * HKV * D, sizeof(float));
	}
	p->wout = (wt_t){ filled((size_t)V * H, bf16, sqrtf(3.0f / H), 70),
	    bf16 };
	p->emb = filled((size_t)V * H, 0, 1.0f, 80);
	p->normw = malloc(H * sizeof(float));
	for (j = 0; j < H; j++)
		p->normw[j] = 1.0f;
	p->cs = malloc((size_t)SMAX * D * sizeof(float));
	for (i = 0; i < SMAX; i++)
		for (j = 0; j < D / 2; j++) {
			double a = i * pow(10000.0, -2.0 * j / D);

			p->cs[i * D + j] = (float)cos(a);
			p->cs[i * D + D / 2 + j] = (float)sin(a);
		}
	p->x = malloc((size_t)PROMPT * H * sizeof(float));
	p->h = malloc((size_t)PROMPT * H * sizeof(float));
	p->q = malloc((size_t)PROMPT * HQ * D * sizeof(float));
	p->k = malloc((size_t)PROMPT * HKV * D * sizeof(float));
	p->v = malloc((size_t)PROMPT * HKV * D * sizeof(float));
	p->att = malloc((size_t)PROMPT * HQ * D * sizeof(float));
	p->tmp = malloc((size_t)PROMPT * H * sizeof(float));
	p->gu = malloc((size_t)PROMPT * 2 * FF * sizeof(float));
	p->act = malloc((size_t)PROMPT * FF * sizeof(float));
	p->sc = malloc((size_t)SMAX * sizeof(float));
	p->logits = malloc((size_t)V * sizeof(float));
}

static void plain_close(plain_t *p)
{
	void *all[] = { (void *)p->wout.w, p->emb, p->normw, p->cs, p->x, p->h, p->q,
	    p->k, p->v, p->att, p->tmp, p->gu, p->act, p->sc, p->logits };
	size_t i;
	int l;

	for (l = 0; l < L; l++) {
		free((void *)p->wq[l].w);
		free((void *)p->wk[l].w);
		free((void *)p->wv[l].w);
		free((void *)p->wo[l].w);
		free((void *)p->wgu[l].w);
		free((void *)p->wd[l].w);
		free(p->kc[l]);
		free(p->vc[l]);
	}
	for (i = 0; i < sizeof all / sizeof all[0]; i++)
		free(all[i]);
}

/* TRIALS prefills of the prompt, each followed by the decode steps. */
static void plain_time(int bf16, figures_t *f)
{
	int32_t ids[PROMPT], tok;
	double pre[TRIALS], dec[TRIALS];
	uint64_t st = 5;
	plain_t p;
	int t, s;

	plain_open(&p, bf16);
	for (s = 0; s < PROMPT; s++)
		ids[s] = (int32_t)(ref_rand(&st) % V);
	for (t = 0; t < TRIALS; t++) {
		uint64_t t0 = bench_ns(), t1;

		tok = plain_forward(&p, ids, PROMPT, 0);
		t1 = bench_ns();
		pre[t] = (double)(t1 - t0) / 1e6;
		for (s = 1; s < STEPS; s++)
			tok = plain_forward(&p, &tok, 1, PROMPT + s - 1);
		dec[t] = (double)(bench_ns() - t1) / 1e6 / (STEPS - 1);
	}
	f->pre[0] = bench_median(pre, TRIALS);
	f->pre[1] = pre[0];
	f->pre[2] = pre[TRIALS - 1];
	f->dec[0] = bench_median(dec, TRIALS);
	f->dec[1] = dec[0];
	f->dec[2] = dec[TRIALS - 1];
	f->ok = 1;
	plain_close(&p);
}

/* ratios' median and ends: "M (A..B)" into OUT */
static void ratio_text(double *v, int n, char *out, size_t len)
{
	double med = bench_median(v, n);      /* sorts v */

	snprintf(out, len, "%.2fx (%.2f..%.2f)", med, v[0], v[n - 1]);
}

/*
 * One thread, f32: ROUNDS rounds of a kspec run then a PyTorch run (each
 * the median of TRIALS trials after its warm-up, as the table), so that
 * a drift of the machine's speed within the bench (10-20% over an hour
 * here) falls on both; prints each round and the median and ends of the
 * per-round ratios.
 */
static void interleaved(const e2e_daemon_t *d)
{
	double pre[ROUNDS], mv[ROUNDS], lin[ROUNDS];
	char cmd[2][1024], a[64], b[64], c[64];
	figures_t fk, ft;
	int r;

	snprintf(cmd[0], sizeof cmd[0], "%s/examples/llama --config 8b2l "
	    "--quiet --socket %s --prompt %d --steps %d --trials %d --threads 1",
	    e2e_build_dir(), d->sock, PROMPT, STEPS, TRIALS);
	snprintf(cmd[1], sizeof cmd[1], "OPENBLAS_NUM_THREADS=1 "
	    "OMP_NUM_THREADS=1 /usr/bin/python3 bench/llama/torch_ref.py %d %d "
	    "%d 1", PROMPT, STEPS, TRIALS);
	printf("\ninterleaved, f32, one thread: %d rounds of a kspec run then "
	    "a PyTorch run (each the median of %d trials after a warm-up)\n",
	    ROUNDS, TRIALS);
	for (r = 0; r < ROUNDS; r++) {
		if (run_and_read(cmd[0], &fk) != 0 ||
		    run_and_read(cmd[1], &ft) != 0 || !ft.has_lin) {
			printf("  round %d failed\n", r + 1);
			return;
		}
		pre[r] = ft.pre[0] / fk.pre[0];         /* tokens/s ratio */
		mv[r] = fk.dec[0] / ft.dec[0];
		lin[r] = fk.dec[0] / ft.dec_lin[0];
		printf("  round %d: prefill kspec %.1f, PyTorch %.1f tok/s; "
		    "decode kspec %.2f, torch.mv %.2f, F.linear %.2f ms/tok\n",
		    r + 1, PROMPT * 1e3 / fk.pre[0], PROMPT * 1e3 / ft.pre[0],
		    fk.dec[0], ft.dec[0], ft.dec_lin[0]);
		fflush(stdout);
	}
	ratio_text(pre, ROUNDS, a, sizeof a);
	ratio_text(mv, ROUNDS, b, sizeof b);
	ratio_text(lin, ROUNDS, c, sizeof c);
	printf("  kspec / PyTorch, median (min..max) of the rounds: prefill "
	    "tokens/s %s; decode ms/token vs torch.mv %s, vs F.linear %s\n",
	    a, b, c);
}

/* ---- thread scaling beside a memory-read ceiling ---- */

#define READ_BYTES (1ull << 30)

typedef struct {
	const uint64_t *p;
	size_t n;               /* words */
	uint64_t sum;
} reader_t;

/* bench.h's read_loop over one thread's part. */
static void *read_part(void *arg)
{
	reader_t *r = arg;

	r->sum = read_loop(r->p, r->n);
	return NULL;
}

/* GB/s of reading BUF (READ_BYTES, split in NT parts) on NT threads, the
 * best of 3 passes. */
static double read_gbs(const uint64_t *buf, int nt)
{
	pthread_t th[KSPEC_MAX_THREADS];
	reader_t r[KSPEC_MAX_THREADS];
	static volatile uint64_t sink;
	const size_t words = READ_BYTES / 8, part = words / (size_t)nt;
	double best = 0;
	int pass, i;

	for (pass = 0; pass < 3; pass++) {
		uint64_t t0 = bench_ns(), t;

		for (i = 0; i < nt; i++) {
			r[i] = (reader_t){ buf + part * (size_t)i, part, 0 };
			if (pthread_create(&th[i], NULL, read_part, &r[i]))
				return 0;
		}
		for (i = 0; i < nt; i++) {
			pthread_join(th[i], NULL);
			sink += r[i].sum;
		}
		t = bench_ns() - t0;
		if (READ_BYTES / (double)t > best)
			best = READ_BYTES / (double)t;
	}
	return best;
}

/*
 * ROUNDS rounds of: the read loop on one thread and on NT, then kspec's
 * f32 decode on one thread and on NT (each the median of TRIALS trials
 * after a prompt of 16 tokens: the attention over a 512-token cache is
 * well under 1% of decode's bytes).  Prints each round and the medians
 * and ends of the per-round ratios.
 */
static void thread_rounds(const e2e_daemon_t *d, int nt)
{
	double rd[ROUNDS], dec[ROUNDS];
	char cmd[2][1024], a[64], b[64];
	uint64_t *buf;
	figures_t f1, fn;
	int r, i;

	buf = malloc(READ_BYTES);
	if (buf == NULL) {
		printf("\nthread scaling: no memory for the read loop\n");
		return;
	}
	for (i = 0; i < (int)(READ_BYTES / 8); i++)
		buf[i] = (uint64_t)i;
	for (i = 0; i < 2; i++)
		snprintf(cmd[i], sizeof cmd[i], "%s/examples/llama --config "
		    "8b2l --quiet --socket %s --prompt 16 --steps %d "
		    "--trials %d --threads %d", e2e_build_dir(), d->sock,
		    STEPS, TRIALS, i ? nt : 1);
	printf("\nthread scaling, f32 decode: %d rounds of a read loop over "
	    "1 GiB (best of 3 passes) and decode (median of %d trials), each "
	    "on 1 and on %d threads\n", ROUNDS, TRIALS, nt);
	for (r = 0; r < ROUNDS; r++) {
		double g1 = read_gbs(buf, 1), gn = read_gbs(buf, nt);

		if (run_and_read(cmd[0], &f1) != 0 ||
		    run_and_read(cmd[1], &fn) != 0 || g1 <= 0 || gn <= 0) {
			printf("  round %d failed\n", r + 1);
			free(buf);
			return;
		}
		rd[r] = gn / g1;
		dec[r] = f1.dec[0] / fn.dec[0];
		printf("  round %d: read %.1f, %.1f GB/s; decode %.2f, %.2f "
		    "ms/tok\n", r + 1, g1, gn, f1.dec[0], fn.dec[0]);
		fflush(stdout);
	}
	free(buf);
	ratio_text(rd, ROUNDS, a, sizeof a);
	ratio_text(dec, ROUNDS, b, sizeof b);
	printf("  %d threads / 1, median (min..max) of the rounds: read loop "
	    "%s, decode %s\n", nt, a, b);
}

/*
 * ROUNDS rounds of one-thread decode with f32 weights and with bf16
 * (each the median of TRIALS trials after a 16-token prompt, the order
 * alternating between rounds); prints each round and the median and ends
 * of the per-round bf16 / f32 ratios of ms/token.
 */
static void bf16_rounds(const e2e_daemon_t *d)
{
	double ratio[ROUNDS];
	char cmd[2][1024], a[64];
	figures_t f[2];
	int r, i;

	for (i = 0; i < 2; i++)
		snprintf(cmd[i], sizeof cmd[i], "%s/examples/llama --config "
		    "8b2l --quiet --socket %s --prompt 16 --steps %d "
		    "--trials %d --threads 1%s", e2e_build_dir(), d->sock,
		    STEPS, TRIALS, i ? " --bf16" : "");
	printf("\nbf16 weights against f32, one thread: %d rounds of decode "
	    "with each (median of %d trials, the order alternating)\n",
	    ROUNDS, TRIALS);
	for (r = 0; r < ROUNDS; r++) {
		int first = r & 1;

		if (run_and_read(cmd[first], &f[first]) != 0 ||
		    run_and_read(cmd[!first], &f[!first]) != 0) {
			printf("  round %d failed\n", r + 1);
			return;
		}
		ratio[r] = f[1].dec[0] / f[0].dec[0];
		printf("  round %d: decode f32 %.2f, bf16 %.2f ms/tok\n", r + 1,
		    f[0].dec[0], f[1].dec[0]);
		fflush(stdout);
	}
	ratio_text(ratio, ROUNDS, a, sizeof a);
	printf("  bf16 / f32 decode ms/token, median (min..max) of the rounds: "
	    "%s (goal: 0.65 or less)\n", a);
}

/* ---- llama.cpp on the same GGUF file ---- */

static int32_t argmax(const float *v, int n)
{
	int32_t best = 0;
	int j;

	for (j = 1; j < n; j++)
		if (v[j] > v[best])
			best = j;
	return best;
}

static double ms_since(uint64_t t0)
{
	return (double)(bench_ns() - t0) / 1e6;
}

/*
 * `bench/llama --llama-cpp FILE THREADS [STEPS TRIALS [f32]]`: llama.cpp's
 * libllama runs the GGUF file FILE as examples/llama runs it: the same
 * PROMPT-token prompt (seed 1, as examples/llama draws it) in one batch,
 * then greedy decode to STEPS tokens (default and at least the bench's
 * STEPS, at most TOKS), on THREADS threads; 1 + TRIALS runs (default and
 * at most the bench's), each in a fresh context, the first the warm-up.
 * Its context is llama.h's defaults (KV cache f16, flash attention as
 * llama.cpp chooses) or, with "f32" (F32_ATTENTION), its attention in
 * f32 as examples/llama's (tests/llama_cpp.h, ks_llama_f32_attention).
 * Prints the CPU backend ggml chose, the first run's greedy tokens and,
 * after trials, a "timing" line as examples/llama does.  Exit 0; 3 when
 * llama.cpp is not installed (why, on stderr).
 */
static int llama_cpp_main(const char *file, int threads, int steps,
    int trials, int f32_attention)
{
	uint64_t s = 1 * 0xD1B54A32D192ED03ull + 7, t0;
	double pre[TRIALS], dec[TRIALS];
	int32_t prompt[PROMPT], tok[TOKS];
	char err[1400];
	ks_llama_t L;
	void *model;
	int rc, t, i;

	for (i = 0; i < PROMPT; i++)
		prompt[i] = (int32_t)(ref_rand(&s) % V);
	if ((rc = ks_llama_open(&L, err, sizeof err)) != 0) {
		fprintf(stderr, "llama: %s\n", err);
		return rc > 0 ? 3 : 1;
	}
	if ((model = L.load(file, L.defaults())) == NULL) {
		fprintf(stderr, "llama: libllama did not load %s\n", file);
		return 1;
	}
	printf("backend %s\n", ks_llama_cpu_backend);
	for (t = 0; t <= trials; t++) {
		void *ctx = ks_llama_context(&L, model, PROMPT + steps, PROMPT,
		    threads, f32_attention);

		if (ctx == NULL) {
			fprintf(stderr, "llama: llama.cpp made no context\n");
			return 1;
		}
		t0 = bench_ns();
		rc = L.decode(ctx, L.batch_one(prompt, PROMPT));
		tok[0] = rc ? 0 : argmax(L.logits(ctx, -1), V);
		if (t > 0)
			pre[t - 1] = ms_since(t0);
		t0 = bench_ns();
		for (i = 1; i < steps && rc == 0; i++) {
			rc = L.decode(ctx, L.batch_one(&tok[i - 1], 1));
			tok[i] = rc ? 0 : argmax(L.logits(ctx, -1), V);
		}
		if (t > 0)
			dec[t - 1] = ms_since(t0) / (steps - 1);
		L.free_ctx(ctx);
		if (rc != 0) {
			fprintf(stderr, "llama: llama_decode returned %d\n", rc);
			return 1;
		}
		for (i = 0; i < steps && t == 0; i++)
			printf("%d%c", tok[i], i + 1 < steps ? ' ' : '\n');
	}
	L.mfree(model);
	L.fini();
	if (trials == 0)
		return 0;
	qsort(pre, (size_t)trials, sizeof pre[0], bench_cmp_d);
	qsort(dec, (size_t)trials, sizeof dec[0], bench_cmp_d);
	printf("timing prefill_ms %.3f %.3f %.3f decode_ms %.4f %.4f %.4f\n",
	    pre[trials / 2], pre[0], pre[trials - 1], dec[trials / 2], dec[0],
	    dec[trials - 1]);
	return 0;
}

/* Where two runs' greedy tokens part: "the same N tokens" or "part at
 * token I (of N)". */
static void parting(const figures_t *a, const figures_t *b, char *out,
    size_t len)
{
	int n = a->ntok < b->ntok ? a->ntok : b->ntok, i;

	for (i = 0; i < n && a->tok[i] == b->tok[i]; i++)
		;
	if (i == n)
		snprintf(out, len, "the same %d tokens", n);
	else
		snprintf(out, len, "part at token %d of %d", i + 1, n);
}

static void tokens_row(const char *who, const figures_t *f)
{
	int i;

	printf("  %s:", who);
	for (i = 0; i < f->ntok; i++)
		printf("%s%5d", i % 16 ? " " : "\n    ", f->tok[i]);
	printf("\n");
}

/*
 * The runs whose first TOKS greedy tokens are shown: examples/llama with
 * OPTS, or (OPTS NULL) llama.cpp, with its attention in f32 where F32;
 * BLOCK: only for a file of a block format (mode fast).  kspec's mode
 * fast computes llama.cpp's products on x in q8_0 (Q8_K for q4_k); with
 * --unpacked its prompt too, and llama.cpp's attention in f32 leaves no
 * other difference than rounding orders (tests/test_llama.c).
 */
static const struct {
	const char *who, *opts;
	int f32, block;
} token_runs[] = {
	{ "kspec", "", 0, 0 },
	{ "kspec --mode fast", " --mode fast", 0, 1 },
	{ "kspec --mode fast --unpacked", " --mode fast --unpacked", 0, 1 },
	{ "llama.cpp", NULL, 0, 0 },
	{ "llama.cpp, attention in f32", NULL, 1, 1 },
};

/* The pairs of token_runs whose parting is printed. */
static const int token_pairs[][2] = { { 0, 3 }, { 1, 3 }, { 2, 3 },
	{ 2, 4 } };

enum { NTOKEN_RUNS = sizeof token_runs / sizeof token_runs[0] };

/* The first TOKS greedy tokens of the runs of token_runs on FILE (THREADS
 * threads; BLOCK: a block format's), side by side, and where they part. */
static void tokens_side_by_side(const e2e_daemon_t *d, const char *file,
    int threads, int block)
{
	char cmd[1024], why[64];
	figures_t f[NTOKEN_RUNS];
	int ran[NTOKEN_RUNS] = { 0 };
	size_t i;

	for (i = 0; i < NTOKEN_RUNS; i++) {
		if (token_runs[i].block && !block)
			continue;
		if (token_runs[i].opts != NULL)
			snprintf(cmd, sizeof cmd, "%s/examples/llama --config "
			    "8b2l --socket %s --load-gguf %s --prompt %d "
			    "--steps %d --threads %d%s 2>/dev/null",
			    e2e_build_dir(), d->sock, file, PROMPT, TOKS,
			    threads, token_runs[i].opts);
		else
			snprintf(cmd, sizeof cmd, "%s/bench/llama --llama-cpp "
			    "%s %d %d 0%s", e2e_build_dir(), file, threads,
			    TOKS, token_runs[i].f32 ? " f32" : "");
		if (run_and_read(cmd, &f[i]) != 0) {
			printf("  greedy tokens: %s failed\n", cmd);
			return;
		}
		ran[i] = 1;
	}
	printf("  the first %d greedy tokens after the prompt:\n", TOKS);
	for (i = 0; i < sizeof token_pairs / sizeof token_pairs[0]; i++) {
		const int a = token_pairs[i][0], b = token_pairs[i][1];

		if (!ran[a] || !ran[b])
			continue;
		parting(&f[a], &f[b], why, sizeof why);
		printf("    %s / %s: %s\n", token_runs[a].who,
		    token_runs[b].who, why);
	}
	for (i = 0; i < NTOKEN_RUNS; i++)
		if (ran[i])
			tokens_row(token_runs[i].who, &f[i]);
}

/*
 * The same GGUF file run by examples/llama (--load-gguf) and by
 * llama.cpp, for each weight format: the file written once by
 * examples/llama, then per thread count LL_ROUNDS interleaved rounds (a
 * run of each engine, the order rotating; each run the median of TRIALS
 * after its warm-up; for a block format a third engine, examples/llama
 * --mode fast, whose prefill is the exact one and whose decode runs
 * gemm's fast variant), a row per engine with the median and ends of its
 * rounds, the median and ends of the per-round ratios, and the engines'
 * greedy tokens.
 */
static void beside_llama_cpp(const e2e_daemon_t *d, int all)
{
	static const char *const ws[] = { "f32", "q8_0", "q4_0", "q4_k" };
	enum { KSPEC, LLAMA_CPP, FAST };
	char file[512], cmd[3][1024], a[64], b[64], c[64];
	const int threads[2] = { 1, all };
	char fast_opts[64];
	size_t wi;
	int ti, r, e;

	snprintf(fast_opts, sizeof fast_opts, " --mode fast --target %s",
	    bench_fast_target());

	printf("\nbeside llama.cpp (%s %s, libllama): the same GGUF file, "
	    "written by examples/llama; %d rounds per row, a run of each "
	    "engine per round (the order rotating), each run the median "
	    "of %d trials after a warm-up; a row gives the median "
	    "(min..max) of the rounds; kspec --mode fast (block formats) "
	    "decodes through gemm's fast variant, its prefill the exact "
	    "one; its cpu target: %s\n", KS_GGML_PACKAGE,
	    KS_GGML_PACKAGE_VERSION, LL_ROUNDS, TRIALS, bench_fast_target());
	for (wi = 0; wi < sizeof ws / sizeof ws[0]; wi++) {
		const int block = strcmp(ws[wi], "f32") != 0, n = 2 + block;

		snprintf(file, sizeof file, "%s/8b2l.%s.gguf", d->dir, ws[wi]);
		snprintf(cmd[0], sizeof cmd[0], "%s/examples/llama --config "
		    "8b2l --quiet --socket %s --wdtype %s --prompt 1 --steps 1 "
		    "--save-gguf %s", e2e_build_dir(), d->sock, ws[wi], file);
		if (system(cmd[0]) != 0) {
			printf("  %s: examples/llama did not write the file\n",
			    ws[wi]);
			continue;
		}
		for (ti = 0; ti < (all > 1 ? 2 : 1); ti++) {
			double pre[3][LL_ROUNDS], dec[3][LL_ROUNDS];
			double rp[LL_ROUNDS], rd[LL_ROUNDS], rf[LL_ROUNDS];
			figures_t f[3];

			for (e = 0; e < 3; e++)
				if (e != LLAMA_CPP)
					snprintf(cmd[e], sizeof cmd[e], "%s/"
					    "examples/llama --config 8b2l "
					    "--socket %s --load-gguf %s "
					    "--prompt %d --steps %d --trials "
					    "%d --threads %d%s 2>/dev/null",
					    e2e_build_dir(), d->sock, file,
					    PROMPT, STEPS, TRIALS, threads[ti],
					    e == FAST ? fast_opts : "");
			snprintf(cmd[LLAMA_CPP], sizeof cmd[LLAMA_CPP], "%s/"
			    "bench/llama --llama-cpp %s %d", e2e_build_dir(),
			    file, threads[ti]);
			for (r = 0; r < LL_ROUNDS; r++) {
				for (e = 0; e < n; e++) {
					int k = (r + e) % n;

					if (run_and_read(cmd[k], &f[k]) != 0) {
						printf("  %s, %d threads: %s "
						    "failed\n", ws[wi],
						    threads[ti], cmd[k]);
						goto next;
					}
					pre[k][r] = f[k].pre[0];
					dec[k][r] = f[k].dec[0];
				}
				rp[r] = f[LLAMA_CPP].pre[0] / f[KSPEC].pre[0];
				rd[r] = f[KSPEC].dec[0] / f[LLAMA_CPP].dec[0];
				if (block)
					rf[r] = f[FAST].dec[0] /
					    f[LLAMA_CPP].dec[0];
			}
			for (e = 0; e < n; e++) {
				f[e].pre[0] = bench_median(pre[e], LL_ROUNDS);
				f[e].pre[1] = pre[e][0];
				f[e].pre[2] = pre[e][LL_ROUNDS - 1];
				f[e].dec[0] = bench_median(dec[e], LL_ROUNDS);
				f[e].dec[1] = dec[e][0];
				f[e].dec[2] = dec[e][LL_ROUNDS - 1];
			}
			row("kspec (examples/llama)", ws[wi], threads[ti],
			    &f[KSPEC]);
			if (block)
				row("kspec --mode fast", ws[wi], threads[ti],
				    &f[FAST]);
			row("llama.cpp", ws[wi], threads[ti], &f[LLAMA_CPP]);
			ratio_text(rp, LL_ROUNDS, a, sizeof a);
			ratio_text(rd, LL_ROUNDS, b, sizeof b);
			printf("  kspec / llama.cpp, median (min..max) of the "
			    "rounds: prefill tok/s %s, decode ms/tok %s", a, b);
			if (block) {
				ratio_text(rf, LL_ROUNDS, c, sizeof c);
				printf("; mode fast decode ms/tok %s", c);
			}
			printf("\n");
			if (wi == 0 && ti == 0)
				printf("  llama.cpp's CPU backend: %s",
				    llama_cpp_backend);
			fflush(stdout);
		}
		tokens_side_by_side(d, file, all, block);
next:
		unlink(file);
	}
}

int main(int argc, char **argv)
{
	static const char *const ws[] = { "f32", "bf16", "q8_0", "q4_0",
		"q4_k" };
	char wopt[32];
	const int all = kspec_cpu_threads();
	const int threads[2] = { 1, all };
	e2e_daemon_t d;
	char cmd[1024];
	figures_t f;
	int wi, ti;

	if ((argc == 4 || argc == 6 || argc == 7) &&
	    strcmp(argv[1], "--llama-cpp") == 0) {
		int steps = argc >= 6 ? atoi(argv[4]) : STEPS;
		int trials = argc >= 6 ? atoi(argv[5]) : TRIALS;

		if (steps < STEPS || steps > TOKS || trials < 0 ||
		    trials > TRIALS || (argc == 7 && strcmp(argv[6], "f32"))) {
			fprintf(stderr, "llama: --llama-cpp FILE THREADS "
			    "[STEPS %d..%d TRIALS 0..%d [f32]]\n", STEPS, TOKS,
			    TRIALS);
			return 2;
		}
		return llama_cpp_main(argv[2], atoi(argv[3]), steps, trials,
		    argc == 7);
	}
	memset(&d, 0, sizeof d);
	if (e2e_start(&d, NULL)) {
		fprintf(stderr, "llama: kspecd did not start\n");
		return 1;
	}
	if (argc > 1 && strcmp(argv[1], "--interleaved") == 0) {
		interleaved(&d);        /* only the rounds */
		e2e_cleanup(&d);
		return 0;
	}
	if (argc > 1 && strcmp(argv[1], "--beside-only") == 0) {
		beside_llama_cpp(&d, all);
		e2e_cleanup(&d);
		return 0;
	}
	if (argc > 1 && strcmp(argv[1], "--bf16-only") == 0) {
		bf16_rounds(&d);
		e2e_cleanup(&d);
		return 0;
	}
	if (argc > 1 && strcmp(argv[1], "--threads-only") == 0) {
		if (all > 1)
			thread_rounds(&d, all);
		e2e_cleanup(&d);
		return 0;
	}
	printf("llama: examples/llama --config 8b2l (hidden %d, FFN %d, %d/%d "
	    "heads of %d, %d layers, vocab %d), prompt %d, %d decode steps; "
	    "%d trials after a warm-up, median (min..max)\n\n", H, FF, HQ,
	    HKV, D, L, V, PROMPT, STEPS - 1, TRIALS);
	printf("%-22s %-5s %7s %9s %20s %9s %20s\n", "engine", "W", "threads",
	    "prefill", "tok/s (min..max)", "decode", "ms/tok (min..max)");
	for (wi = 0; wi < 5; wi++)
	for (ti = 0; ti < (all > 1 ? 2 : 1); ti++) {
		snprintf(wopt, sizeof wopt, " --wdtype %s", ws[wi]);
		snprintf(cmd, sizeof cmd, "%s/examples/llama --config 8b2l "
		    "--quiet --socket %s --prompt %d --steps %d --trials %d "
		    "--threads %d%s", e2e_build_dir(), d.sock, PROMPT, STEPS,
		    TRIALS, threads[ti], wopt);
		if (run_and_read(cmd, &f) != 0) {
			fprintf(stderr, "llama: %s failed\n", cmd);
			e2e_cleanup(&d);
			return 1;
		}
		row("kspec (examples/llama)", ws[wi], threads[ti], &f);
		fflush(stdout);
	}
	for (wi = 0; wi < 2; wi++) {
		plain_time(wi, &f);
		row("plain C loops", ws[wi], 1, &f);
		fflush(stdout);
	}
	if (system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0) {
		printf("%-22s skipped: /usr/bin/python3 cannot import torch "
		    "(Debian: python3-torch)\n", "PyTorch CPU");
	} else {
		for (ti = 0; ti < (all > 1 ? 2 : 1); ti++) {
			snprintf(cmd, sizeof cmd, "OPENBLAS_NUM_THREADS=%d "
			    "OMP_NUM_THREADS=%d /usr/bin/python3 "
			    "bench/llama/torch_ref.py %d %d %d %d", threads[ti],
			    threads[ti], PROMPT, STEPS, TRIALS, threads[ti]);
			if (run_and_read(cmd, &f) != 0) {
				printf("%-22s failed: %s\n", "PyTorch CPU", cmd);
			} else {
				row("PyTorch torch.mv", "f32", threads[ti], &f);
				if (f.has_lin) {
					memcpy(f.dec, f.dec_lin, sizeof f.dec);
					row("PyTorch F.linear", "f32",
					    threads[ti], &f);
				}
			}
			fflush(stdout);
		}
		interleaved(&d);
	}
	if (all > 1)
		thread_rounds(&d, all);
	bf16_rounds(&d);
	beside_llama_cpp(&d, all);
	e2e_cleanup(&d);
	return 0;
}
