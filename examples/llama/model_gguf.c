/*
 * examples/llama's model as a GGUF file (gguf.h): llama.cpp's tensor names
 * for the llama architecture and its hyperparameter keys, each weight in
 * the format the engine runs it in.
 *
 *   token_embd.weight           [H, vocab]     the embedding table
 *   blk.N.attn_norm.weight      [H]            f32 (in every mode)
 *   blk.N.attn_q.weight         [H, Dq]        and attn_k, attn_v [H, Dkv]
 *   blk.N.attn_output.weight    [Dq, H]
 *   blk.N.ffn_norm.weight       [H]
 *   blk.N.ffn_gate.weight       [H, F]         the first F rows of the
 *   blk.N.ffn_up.weight         [H, F]         engine's gate-up weight, the
 *                                              next F rows
 *   blk.N.ffn_down.weight       [F, H]
 *   output_norm.weight          [H]
 *   output.weight               [H, vocab]
 *
 * (GGUF lists a tensor's innermost size first: a weight of N rows of K is
 * [K, N].)  The rope table is not stored: it follows from the config.
 *
 * The engine's rope rotates the pairs (i, i + hd/2) of a head; llama.cpp's
 * llama architecture rotates (2i, 2i + 1), at the same angles.  So within
 * each head the rows of attn_q and attn_k are stored interleaved (file
 * row 2i is the engine's row i, 2i + 1 its row i + hd/2, the permutation
 * llama.cpp's converter undoes for Hugging Face weights), and permuted
 * back on reading: q and k move alike, so their dot products, and the
 * model, are unchanged.  The tokenizer is a stand-in that makes the file
 * loadable (llama.cpp's "llama" vocabulary: <unk>, <s>, </s>, the 256
 * byte tokens, then "t<id>"); the engine takes token ids, not text.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "../../include/kspec.h"
#include "../../ref/ref.h"
#include "gguf.h"
#include "model.h"

/* A tensor of the file: its name, the model's tensor (TROWS rows of K),
 * and the rows of it this file tensor holds (ROWS from ROW0). */
typedef struct {
	char name[64];
	tensor_t *t;
	int64_t row0, rows, trows, k;
} entry_t;

/* The file's tensors of M, in the order written. */
static int entries(model_t *m, entry_t *e)
{
	const config_t *c = &m->c;
	const int64_t H = c->hidden, Dq = (int64_t)c->hq * c->hd,
	    Dkv = (int64_t)c->hkv * c->hd, F = c->ffn, V = c->vocab;
	int n = 0, l;

#define E_(nm, tp, r0, nr, tr, kk) (snprintf(e[n].name, sizeof e[n].name, \
	"%s", nm), e[n].t = (tp), e[n].row0 = (r0), e[n].rows = (nr), \
	e[n].trows = (tr), e[n].k = (kk), n++)
	E_("token_embd.weight", &m->embed, 0, V, V, H);
	for (l = 0; l < c->layers; l++) {
		layer_t *y = &m->layer[l];
		char b[32];

		snprintf(b, sizeof b, "blk.%d.", l);
#define L_(suffix, tp, r0, nr, tr, kk) do { char nm_[64]; \
	snprintf(nm_, sizeof nm_, "%s%s", b, suffix); \
	E_(nm_, tp, r0, nr, tr, kk); } while (0)
		L_("attn_norm.weight", &y->attn_norm, 0, 1, 1, H);
		L_("attn_q.weight", &y->wq, 0, Dq, Dq, H);
		L_("attn_k.weight", &y->wk, 0, Dkv, Dkv, H);
		L_("attn_v.weight", &y->wv, 0, Dkv, Dkv, H);
		L_("attn_output.weight", &y->wo, 0, H, H, Dq);
		L_("ffn_norm.weight", &y->ffn_norm, 0, 1, 1, H);
		L_("ffn_gate.weight", &y->wgu, 0, F, 2 * F, H);
		L_("ffn_up.weight", &y->wgu, F, F, 2 * F, H);
		L_("ffn_down.weight", &y->wd, 0, H, H, F);
#undef L_
	}
	E_("output_norm.weight", &m->final_norm, 0, 1, 1, H);
	E_("output.weight", &m->wout, 0, V, V, H);
#undef E_
	return n;
}

static int is_norm(const entry_t *e)
{
	return strstr(e->name, "norm") != NULL;
}

/* Whether E's rows are a query's or key's heads (stored interleaved). */
static int is_qk(const entry_t *e)
{
	return strstr(e->name, "attn_q.") || strstr(e->name, "attn_k.");
}

/* The engine's row of file row R of a q or k weight with heads of HD. */
static int64_t engine_row(int64_t r, int hd)
{
	int64_t h = r / hd, j = r % hd;

	return h * hd + (j % 2 ? j / 2 + hd / 2 : j / 2);
}

/* ROWS rows of RB bytes from SRC into DST in the file's order (ENGINE 0)
 * or back into the engine's (1). */
static void permute_rows(uint8_t *dst, const uint8_t *src, int64_t rows,
    size_t rb, int hd, int engine)
{
	int64_t r;

	for (r = 0; r < rows; r++) {
		int64_t e = engine_row(r, hd);

		if (engine)
			memcpy(dst + (size_t)e * rb, src + (size_t)r * rb, rb);
		else
			memcpy(dst + (size_t)r * rb, src + (size_t)e * rb, rb);
	}
}

/* The stand-in vocabulary of V tokens (V > 259). */
static int add_vocab(gf_writer_t *w, int V)
{
	char **tok = xcalloc((size_t)V, sizeof *tok);
	float *score = xcalloc((size_t)V, sizeof *score);
	int32_t *type = xcalloc((size_t)V, sizeof *type);
	uint32_t u;
	int i, rc;

	for (i = 0; i < V; i++) {
		tok[i] = xcalloc(16, 1);
		if (i < 3)
			snprintf(tok[i], 16, "%s", i == 0 ? "<unk>" : i == 1 ?
			    "<s>" : "</s>");
		else if (i < 259)
			snprintf(tok[i], 16, "<0x%02X>", i - 3);
		else
			snprintf(tok[i], 16, "t%d", i);
		/* unknown 2, control 3, byte 6, normal 1 */
		type[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
		score[i] = i < 259 ? 0.0f : -(float)i;
	}
	rc = gf_add_kv_str(w, "tokenizer.ggml.model", "llama") ||
	    gf_add_kv_arr(w, "tokenizer.ggml.tokens", GF_STR, tok,
	    (uint64_t)V) ||
	    gf_add_kv_arr(w, "tokenizer.ggml.scores", GF_F32, score,
	    (uint64_t)V) ||
	    gf_add_kv_arr(w, "tokenizer.ggml.token_type", GF_I32, type,
	    (uint64_t)V) ||
	    (u = 1, gf_add_kv(w, "tokenizer.ggml.bos_token_id", GF_U32, &u)) ||
	    (u = 2, gf_add_kv(w, "tokenizer.ggml.eos_token_id", GF_U32, &u)) ||
	    (u = 0, gf_add_kv(w, "tokenizer.ggml.unknown_token_id", GF_U32,
	    &u));
	for (i = 0; i < V; i++)
		free(tok[i]);
	free(tok);
	free(score);
	free(type);
	return rc;
}

/* The ggml type of M's weights of entry E. */
/* The block formats by kspec's name and ggml's type. */
static const struct {
	const char *name;
	uint32_t type;
} qfmts[] = {
	{ "q8_0", GF_T_Q8_0 }, { "q4_0", GF_T_Q4_0 }, { "q4_k", GF_T_Q4_K },
};

static uint32_t fmt_type(const char *fmt)
{
	size_t i;

	for (i = 0; i < sizeof qfmts / sizeof qfmts[0]; i++)
		if (strcmp(qfmts[i].name, fmt) == 0)
			return qfmts[i].type;
	die("no ggml type for %s", fmt);
}

/* The block format of ggml type T, or NULL. */
static const char *type_fmt(uint32_t t)
{
	size_t i;

	for (i = 0; i < sizeof qfmts / sizeof qfmts[0]; i++)
		if (qfmts[i].type == t)
			return qfmts[i].name;
	return NULL;
}

/* The GGUF type of M's 16-bit weights, or F32. */
static uint32_t half_type(const model_t *m)
{
	return !m->half ? GF_T_F32 : strcmp(m->half, "bf16") == 0 ?
	    GF_T_BF16 : GF_T_F16;
}

static uint32_t type_of(const model_t *m, const entry_t *e)
{
	if (e->t->fmt)
		return fmt_type(e->t->fmt);
	return half_type(m);
}

/* ---- writing ---- */

void model_save_gguf(const model_t *cm, const char *path)
{
	model_t *m = (model_t *)cm;     /* entries() points into it */
	entry_t *e = xcalloc(16 + 9 * (size_t)m->c.layers, sizeof *e);
	gf_writer_t *w = gf_writer_new(GF_ALIGN);
	const config_t *c = &m->c;
	void **keep = xcalloc(16 + 9 * (size_t)m->c.layers, sizeof *keep);
	uint32_t u;
	float eps = cm->c.rms_eps, base = (float)cm->c.rope_theta;
	char err[256];
	int n = entries(m, e), i;
	FILE *f;

	if (!w)
		die("out of memory");
#define U32_(key, v) (u = (uint32_t)(v), gf_add_kv(w, key, GF_U32, &u))
	if (gf_add_kv_str(w, "general.architecture", "llama") ||
	    gf_add_kv_str(w, "general.name", "kspec examples/llama") ||
	    U32_("llama.context_length", c->max_seq) ||
	    U32_("llama.embedding_length", c->hidden) ||
	    U32_("llama.block_count", c->layers) ||
	    U32_("llama.feed_forward_length", c->ffn) ||
	    U32_("llama.attention.head_count", c->hq) ||
	    U32_("llama.attention.head_count_kv", c->hkv) ||
	    U32_("llama.rope.dimension_count", c->hd) ||
	    U32_("llama.vocab_size", c->vocab) ||
	    gf_add_kv(w, "llama.attention.layer_norm_rms_epsilon", GF_F32,
	    &eps) || gf_add_kv(w, "llama.rope.freq_base", GF_F32, &base))
		die("out of memory");
	if (c->vocab <= 259)
		die("a GGUF file needs a vocab over 259 (its byte tokens)");
	if (add_vocab(w, c->vocab))
		die("out of memory");
#undef U32_
	for (i = 0; i < n; i++) {
		const tensor_t *t = e[i].t;
		int64_t rows = e[i].rows;
		uint64_t dims[2] = { (uint64_t)e[i].k, (uint64_t)rows };
		/* Norms in F32 in every mode, as llama.cpp's converter
		 * writes them (its CPU backend multiplies by no other):
		 * a 16-bit norm's value is exact in f32. */
		uint32_t type = is_norm(&e[i]) ? GF_T_F32 :
		    type_of(m, &e[i]);
		size_t rb, bytes;
		const uint8_t *src;
		int be, bb;

		gf_type_block(type, &be, &bb);
		rb = (size_t)(e[i].k / be * bb);
		bytes = rb * (size_t)rows;
		if (t->fmt) {
			src = (const uint8_t *)t->q + rb * (size_t)e[i].row0;
		} else if (type != GF_T_F32) {      /* BF16, F16 */
			uint16_t *h = xcalloc((size_t)(rows * e[i].k), 2);
			int64_t j;

			for (j = 0; j < rows * e[i].k; j++)
				h[j] = model_f32_to_half(m->half,
				    t->f[e[i].row0 * e[i].k + j]);
			keep[i] = h;
			src = (const uint8_t *)h;
		} else {
			src = (const uint8_t *)(t->f + e[i].row0 * e[i].k);
		}
		if (is_qk(&e[i])) {     /* f32 rows: converted above or not */
			uint8_t *perm = xcalloc(1, bytes);

			permute_rows(perm, src, rows, rb, c->hd, 0);
			free(keep[i]);
			keep[i] = perm;
			src = perm;
		}
		if (gf_add_tensor(w, e[i].name, type, rows == 1 ? 1 : 2, dims,
		    src, bytes) != 0)
			die("%s: cannot add it to the file", e[i].name);
	}
	f = fopen(path, "wb");
	if (!f)
		die("%s: %s", path, strerror(errno));
	if (gf_write(w, f, err, sizeof err) != 0 || fclose(f) != 0)
		die("%s: %s", path, err[0] ? err : strerror(errno));
	gf_writer_free(w);
	for (i = 0; i < n; i++)
		free(keep[i]);
	free(keep);
	free(e);
}

/* ---- reading ---- */

static void want_u32(const gf_file_t *g, const char *path, const char *key,
    int64_t want)
{
	int64_t v;

	if (gf_kv_int(g, key, &v) != 0)
		die("%s: no integer %s", path, key);
	if (v != want)
		die("%s: %s is %lld, the config's is %lld", path, key,
		    (long long)v, (long long)want);
}

/* KEY's integer, which must be in 1..MAX. */
static int key_int(const gf_file_t *g, const char *path, const char *key,
    int64_t max)
{
	int64_t v;

	if (gf_kv_int(g, key, &v) != 0)
		die("%s: no integer %s", path, key);
	if (v < 1 || v > max)
		die("%s: %s is %lld, not 1..%lld", path, key, (long long)v,
		    (long long)max);
	return (int)v;
}

/* The config the file's llama keys give. */
static void file_config(const gf_file_t *g, const char *path, config_t *c)
{
	int64_t ctx;

	memset(c, 0, sizeof *c);
	c->name = "file";
	c->hidden = key_int(g, path, "llama.embedding_length", 1 << 16);
	c->layers = key_int(g, path, "llama.block_count", 64);
	c->ffn = key_int(g, path, "llama.feed_forward_length", 1 << 18);
	c->hq = key_int(g, path, "llama.attention.head_count", 1024);
	c->hkv = key_int(g, path, "llama.attention.head_count_kv", c->hq);
	c->hd = key_int(g, path, "llama.rope.dimension_count", 1024);
	c->vocab = key_int(g, path, "llama.vocab_size", 1 << 20);
	c->max_seq = gf_kv_int(g, "llama.context_length", &ctx) == 0 &&
	    ctx > 0 && ctx < 2048 ? (int)ctx : 2048;
	c->prompt = 8;
	c->steps = 16;
	if (c->hq % c->hkv != 0 || c->hd % 2 != 0)
		die("%s: %d heads over %d kv heads of %d: not a llama the "
		    "engine runs", path, c->hq, c->hkv, c->hd);
}

/* The file's norm epsilon and rope base into C (1e-5 and 10000, llama's
 * defaults, where it gives none). */
static void file_numerics(const gf_file_t *g, const char *path, config_t *c)
{
	double v;

	c->rms_eps = 1e-5f;
	c->rope_theta = 10000.0;
	if (gf_kv_float(g, "llama.attention.layer_norm_rms_epsilon", &v) == 0)
		c->rms_eps = (float)v;
	if (gf_kv_float(g, "llama.rope.freq_base", &v) == 0)
		c->rope_theta = (float)v;
	if (!(c->rms_eps > 0 && c->rms_eps < 1) || !(c->rope_theta >= 1 &&
	    c->rope_theta < 1e12))
		die("%s: norm epsilon %g or rope base %g out of range", path,
		    (double)c->rms_eps, c->rope_theta);
}

/* An F32 norm of a file of 16-bit weights: the engine runs the norms in
 * the weights' dtype, so each value must be exact in it. */
static void want_exact_half(const char *half, const char *path,
    const char *name, const float *v, int64_t n)
{
	int64_t j;

	for (j = 0; j < n; j++)
		if (model_half_to_f32(half, model_f32_to_half(half, v[j])) !=
		    v[j])
			die("%s: %s[%lld] = %g is not exact in %s, the dtype the "
			    "engine runs this file's norms in", path, name,
			    (long long)j, (double)v[j], half);
}

void model_load_gguf(model_t *m, const config_t *c, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	const gf_tensor_t *q0;
	struct stat st;
	char err[512];
	gf_file_t g;
	gf_str_t arch;
	entry_t *e;
	uint8_t *p;
	uint64_t k;
	int n, i;

	if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0)
		die("%s: %s", path, fd < 0 ? strerror(errno) : "empty");
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		die("%s: mmap: %s", path, strerror(errno));
	if (gf_read(p, (size_t)st.st_size, &g, err, sizeof err) != 0)
		die("%s: %s", path, err);
	if (gf_kv_str(&g, "general.architecture", &arch) != 0 ||
	    arch.n != 5 || memcmp(arch.s, "llama", 5) != 0)
		die("%s: general.architecture is not llama", path);
	memset(m, 0, sizeof *m);
	if (c == NULL) {
		file_config(&g, path, &m->c);
		c = &m->c;
	} else {
		want_u32(&g, path, "llama.embedding_length", c->hidden);
		want_u32(&g, path, "llama.block_count", c->layers);
		want_u32(&g, path, "llama.feed_forward_length", c->ffn);
		want_u32(&g, path, "llama.attention.head_count", c->hq);
		want_u32(&g, path, "llama.attention.head_count_kv", c->hkv);
		want_u32(&g, path, "llama.rope.dimension_count", c->hd);
		want_u32(&g, path, "llama.vocab_size", c->vocab);
		m->c = *c;
	}
	file_numerics(&g, path, &m->c);
	c = &m->c;
	/* The weights' mode, from the first attention weight. */
	q0 = gf_find_tensor(&g, "blk.0.attn_q.weight");
	if (!q0)
		die("%s: no tensor blk.0.attn_q.weight", path);
	m->half = q0->type == GF_T_BF16 ? "bf16" : q0->type == GF_T_F16 ?
	    "f16" : NULL;
	m->wq = type_fmt(q0->type);
	if (!m->half && !m->wq && q0->type != GF_T_F32)
		die("%s: blk.0.attn_q.weight is %s", path,
		    gf_type_name(q0->type));
	m->layer = xcalloc((size_t)c->layers, sizeof *m->layer);
	e = xcalloc(16 + 9 * (size_t)c->layers, sizeof *e);
	n = entries(m, e);
	for (k = 0; k < g.ntensors; k++) {
		const gf_str_t *name = &g.tensors[k].name;

		for (i = 0; i < n && !(strlen(e[i].name) == name->n &&
		    memcmp(e[i].name, name->s, name->n) == 0); i++)
			;
		if (i == n)
			die("%s: tensor '%.*s' is not one the engine reads",
			    path, (int)name->n, name->s);
	}
	for (i = 0; i < n; i++) {
		const gf_tensor_t *t = gf_find_tensor(&g, e[i].name);
		tensor_t *w = e[i].t;
		int64_t rows = e[i].rows, total = e[i].trows * e[i].k;
		const uint8_t *src;
		uint8_t *perm = NULL;
		uint32_t want;
		int be, bb;

		if (!t)
			die("%s: no tensor %s", path, e[i].name);
		/* The format --wdtype would give this weight. */
		want = is_norm(&e[i]) ? GF_T_F32 : m->half ? half_type(m) :
		    !m->wq ? GF_T_F32 : fmt_type(model_fmt_for(m->wq, e[i].k));
		if (t->type != want && !(is_norm(&e[i]) && t->type ==
		    half_type(m)))
			die("%s: %s is %s, the engine runs it as %s", path,
			    e[i].name, gf_type_name(t->type),
			    gf_type_name(want));
		if (t->dims[0] != (uint64_t)e[i].k || t->dims[1] !=
		    (uint64_t)rows || t->dims[2] != 1 || t->dims[3] != 1)
			die("%s: %s has sizes [%llu, %llu, %llu, %llu], the "
			    "config's are [%lld, %lld]", path, e[i].name,
			    (unsigned long long)t->dims[0],
			    (unsigned long long)t->dims[1],
			    (unsigned long long)t->dims[2],
			    (unsigned long long)t->dims[3], (long long)e[i].k,
			    (long long)rows);
		/* The model tensor, allocated at its first file tensor (for
		 * gate-up, ffn_gate), this one's rows from row0. */
		if (!w->f) {
			w->n = total;
			w->f = xcalloc((size_t)total, sizeof(float));
			w->k = e[i].k;
		}
		gf_type_block(t->type, &be, &bb);
		src = t->data;
		if (is_qk(&e[i])) {
			perm = xcalloc(1, t->bytes);
			permute_rows(perm, t->data, rows, (size_t)(e[i].k /
			    be * bb), c->hd, 1);
			src = perm;
		}
		if (t->type == GF_T_F32) {
			memcpy(w->f + e[i].row0 * e[i].k, src, t->bytes);
			if (m->half)
				want_exact_half(m->half, path, e[i].name,
				    w->f + e[i].row0 * e[i].k, rows * e[i].k);
		} else if (t->type == GF_T_BF16 || t->type == GF_T_F16) {
			const uint8_t *h = src;
			int64_t j;

			for (j = 0; j < rows * e[i].k; j++)
				w->f[e[i].row0 * e[i].k + j] =
				    model_half_to_f32(m->half, (uint16_t)(h[2 *
				    j] | h[2 * j + 1] << 8));
		} else {
			size_t rb = (size_t)(e[i].k / be * bb);

			if (!w->q) {
				w->fmt = type_fmt(t->type);
				w->qbytes = rb * (size_t)(total / e[i].k);
				w->q = xcalloc(1, w->qbytes);
			}
			memcpy((uint8_t *)w->q + rb * (size_t)e[i].row0,
			    src, t->bytes);
			if (kspec_dequantize(w->fmt, src, t->bytes,
			    (size_t)rows, (size_t)e[i].k, w->f + e[i].row0 *
			    e[i].k, err, sizeof err) != 0)
				die("%s: %s: %s", path, e[i].name, err);
		}
		free(perm);
	}
	model_rope_table(m);
	gf_free(&g);
	munmap(p, (size_t)st.st_size);
	free(e);
}
