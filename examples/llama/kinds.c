/*
 * examples/llama's kernels (kinds.h): each kind's request and dims, and
 * the evaluation of a reply's launch.groups.
 */
#include <stdlib.h>
#include <string.h>

#include "kinds.h"

const kind_t kinds[NKINDS] = {
	[K_EMBED] = { "embedding", "embedding", 1, 3, { "T", "V", "H" } },
	[K_RMSNORM] = { "rmsnorm", "rmsnorm", 1, 2, { "R", "H" } },
	[K_ADD_RMSNORM] = { "add_rmsnorm", "add_rmsnorm", 1, 2, { "R", "H" } },
	[K_GEMM_Q] = { "gemm q", "gemm", 1, 3, { "M", "N", "K" } },
	[K_GEMM_KV] = { "gemm k, v", "gemm", 1, 3, { "M", "N", "K" } },
	[K_GEMM_O] = { "gemm o", "gemm", 1, 3, { "M", "N", "K" } },
	[K_GEMM_GU] = { "gemm gate-up", "gemm", 1, 3, { "M", "N", "K" } },
	[K_GEMM_DOWN] = { "gemm down", "gemm", 1, 3, { "M", "N", "K" } },
	[K_LOGITS] = { "gemm logits", "gemm", 1, 3, { "M", "N", "K" } },
	[K_KV_ROPE] = { "kv_append_rope", "kv_append_rope", 0, 6,
	    { "B", "T", "Hkv", "D", "S", "P" } },
	[K_ROPE] = { "rope q", "rope", 0, 4, { "T", "Hn", "D", "P" } },
	[K_ATTN] = { "attention_prefill", "attention_prefill", 0, 7,
	    { "B", "T", "Hq", "Hkv", "D", "S", "Sc" } },
	[K_SILU] = { "silu_mul", "silu_mul", 0, 2, { "T", "F" } },
	[K_ARGMAX] = { "argmax", "argmax", 0, 2, { "R", "N" } },
	[K_PACK_XH] = { "gemm_pack_x of H", "gemm_pack_x", 0, 2,
	    { "R", "K" }, 1 },
	[K_PACK_XQ] = { "gemm_pack_x of Dq", "gemm_pack_x", 0, 2,
	    { "R", "K" }, 1 },
	[K_PACK_XF] = { "gemm_pack_x of F", "gemm_pack_x", 0, 2,
	    { "R", "K" }, 1 },
	[K_PACK_WQ] = { "gemm_pack_w q", "gemm_pack_w", 0, 2, { "R", "K" }, 2 },
	[K_PACK_WKV] = { "gemm_pack_w k, v", "gemm_pack_w", 0, 2,
	    { "R", "K" }, 2 },
	[K_PACK_WO] = { "gemm_pack_w o", "gemm_pack_w", 0, 2, { "R", "K" }, 2 },
	[K_PACK_WGU] = { "gemm_pack_w gate-up", "gemm_pack_w", 0, 2,
	    { "R", "K" }, 2 },
	[K_PACK_WD] = { "gemm_pack_w down", "gemm_pack_w", 0, 2,
	    { "R", "K" }, 2 },
	[K_GP_Q] = { "gemm_packed q", "gemm_packed", 1, 3,
	    { "M", "N", "K" }, 1 },
	[K_GP_KV] = { "gemm_packed k, v", "gemm_packed", 1, 3,
	    { "M", "N", "K" }, 1 },
	[K_GP_O] = { "gemm_packed o", "gemm_packed", 1, 3,
	    { "M", "N", "K" }, 1 },
	[K_GP_GU] = { "gemm_packed gate-up", "gemm_packed", 1, 3,
	    { "M", "N", "K" }, 1 },
	[K_GP_DOWN] = { "gemm_packed down", "gemm_packed", 1, 3,
	    { "M", "N", "K" }, 1 },
	[K_QUANT_X] = { "quantize x to q8_0", NULL, 0, 0, { NULL } },
};

void dims_of(const config_t *c, int kind, int64_t T, int64_t *v)
{
	const int64_t H = c->hidden, Dq = (int64_t)c->hq * c->hd,
	    Dkv = (int64_t)c->hkv * c->hd;

	switch (kind) {
	case K_EMBED: v[0] = T; v[1] = c->vocab; v[2] = H; break;
	case K_RMSNORM:
	case K_ADD_RMSNORM: v[0] = T; v[1] = H; break;
	case K_GEMM_Q: v[0] = T; v[1] = Dq; v[2] = H; break;
	case K_GEMM_KV: v[0] = T; v[1] = Dkv; v[2] = H; break;
	case K_GEMM_O: v[0] = T; v[1] = H; v[2] = Dq; break;
	case K_GEMM_GU: v[0] = T; v[1] = 2 * (int64_t)c->ffn; v[2] = H; break;
	case K_GEMM_DOWN: v[0] = T; v[1] = H; v[2] = c->ffn; break;
	case K_LOGITS: v[0] = T; v[1] = c->vocab; v[2] = H; break;
	case K_KV_ROPE:
		v[0] = 1; v[1] = T; v[2] = c->hkv; v[3] = c->hd;
		v[4] = c->max_seq; v[5] = c->max_seq;
		break;
	case K_ROPE: v[0] = T; v[1] = c->hq; v[2] = c->hd; v[3] = c->max_seq;
		break;
	case K_ATTN:
		v[0] = 1; v[1] = T; v[2] = c->hq; v[3] = c->hkv; v[4] = c->hd;
		v[5] = c->max_seq; v[6] = c->max_seq;
		break;
	case K_SILU: v[0] = T; v[1] = c->ffn; break;
	case K_ARGMAX: v[0] = T; v[1] = c->vocab; break;
	case K_PACK_XH: v[0] = T; v[1] = H; break;
	case K_PACK_XQ: v[0] = T; v[1] = Dq; break;
	case K_PACK_XF: v[0] = T; v[1] = c->ffn; break;
	case K_PACK_WQ: v[0] = Dq; v[1] = H; break;
	case K_PACK_WKV: v[0] = Dkv; v[1] = H; break;
	case K_PACK_WO: v[0] = H; v[1] = Dq; break;
	case K_PACK_WGU: v[0] = 2 * (int64_t)c->ffn; v[1] = H; break;
	case K_PACK_WD: v[0] = H; v[1] = c->ffn; break;
	case K_GP_Q: case K_GP_KV: case K_GP_O: case K_GP_GU: case K_GP_DOWN:
		dims_of(c, kind - K_GP_Q + K_GEMM_Q, T, v);   /* gemm's */
		break;
	}
}

/* launch.groups, parsed by recursive descent: sum := product (+|-
 * product)*, product := atom (*|/|% atom)*, atom := ( sum ) | integer |
 * dim name. */
typedef struct {
	const char *s;
	const char *const *names;
	const int64_t *values;
	int n;
	int bad;
} expr_t;

static int64_t expr_sum(expr_t *x);

static int64_t expr_atom(expr_t *x)
{
	int64_t v = 0;
	int i;

	while (*x->s == ' ')
		x->s++;
	if (*x->s == '(') {
		x->s++;
		v = expr_sum(x);
		while (*x->s == ' ')
			x->s++;
		if (*x->s++ != ')')
			x->bad = 1;
		return v;
	}
	if (*x->s >= '0' && *x->s <= '9')
		return strtoll(x->s, (char **)&x->s, 10);
	for (i = 0; i < x->n; i++) {
		size_t len = strlen(x->names[i]);
		char after = x->s[len];

		if (strncmp(x->s, x->names[i], len) == 0 && after != '_' &&
		    !(after >= 'A' && after <= 'Z') &&
		    !(after >= 'a' && after <= 'z') &&
		    !(after >= '0' && after <= '9')) {
			x->s += len;
			return x->values[i];
		}
	}
	x->bad = 1;
	return 0;
}

static int64_t expr_product(expr_t *x)
{
	int64_t v = expr_atom(x), r;
	char op;

	for (;;) {
		while (*x->s == ' ')
			x->s++;
		op = *x->s;
		if (op != '*' && op != '/' && op != '%')
			return v;
		x->s++;
		r = expr_atom(x);
		if (op != '*' && r == 0) {
			x->bad = 1;
			return 0;
		}
		v = op == '*' ? v * r : op == '/' ? v / r : v % r;
	}
}

static int64_t expr_sum(expr_t *x)
{
	int64_t v = expr_product(x);
	char op;

	for (;;) {
		while (*x->s == ' ')
			x->s++;
		op = *x->s;
		if (op != '+' && op != '-')
			return v;
		x->s++;
		v = op == '+' ? v + expr_product(x) : v - expr_product(x);
	}
}

int64_t launch_groups(const char *groups, int kind, const int64_t *dimv)
{
	expr_t x = { groups, kinds[kind].dims, dimv, kinds[kind].ndims, 0 };
	int64_t v = expr_sum(&x);

	if (x.bad || *x.s != '\0' || v < 0)
		die("cannot evaluate launch.groups \"%s\"", groups);
	return v;
}
