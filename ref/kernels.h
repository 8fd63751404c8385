/*
 * The plain-C reference of each library kernel (ref/ref*.h), called by
 * name on the buffers of ref/layout.h: inputs read, outputs (and
 * in-place buffers) overwritten with the reference result.  eps is 1e-5
 * and scale 1/sqrt(D), as the GPU check launches them.
 */
#ifndef KS_REF_KERNELS_H
#define KS_REF_KERNELS_H

#include <math.h>

#include "layout.h"
#include "ref_norm.h"
#include "ref_rope.h"
#include "ref_attn.h"
#include "ref_glue.h"

static inline void *ref_buf(buf_t *b, int nb, const char *name)
{
	int i;

	for (i = 0; i < nb; i++)
		if (strcmp(b[i].name, name) == 0)
			return b[i].data;
	fprintf(stderr, "refs: no buffer %s\n", name);
	exit(1);
}

/* The reference of DEF in dtype DT with its weight buffer in WDT. */
static inline void ref_kernel_mixed(const ks_kernel_def_t *def,
    ks_dtype_t dt, ks_dtype_t wdt, const int64_t *v, buf_t *b, int nb)
{
	int d = (int)dt, w = (int)wdt;

#define V_(n) dim(def, v, n)
#define B_(n) ref_buf(b, nb, n)
	float *row;

	if (strcmp(def->name, "gemm") == 0) {
		ref_gemm_mixed(B_("x"), B_("W"), B_("y"), d, w, V_("M"),
		    V_("N"), V_("K"));
		return;
	}
	if (strcmp(def->name, "gemm_packed") == 0) {
		ref_gemm_packed(B_("xp"), B_("Wp"), B_("y"), d, w, V_("M"),
		    V_("N"), V_("K"));
		return;
	}
	if (strcmp(def->name, "gemm_pack_x") == 0 ||
	    strcmp(def->name, "gemm_pack_w") == 0) {
		ref_pack_panels(B_("in"), B_("out"), d, V_("R"), V_("K"),
		    def->name[10] == 'x' ? 8 : 32);
		return;
	}
	if (strcmp(def->name, "rmsnorm") == 0 ||
	    strcmp(def->name, "add_rmsnorm") == 0) {
		row = malloc(sizeof(float) * (size_t)V_("H"));
		if (def->name[0] == 'r')
			ref_rmsnorm_mixed(B_("x"), B_("w"), B_("y"), d, w,
			    V_("R"), V_("H"), 1e-5f, row);
		else
			ref_add_rmsnorm_mixed(B_("x"), B_("res"), B_("w"),
			    B_("y"), d, w, V_("R"), V_("H"), 1e-5f, row);
		free(row);
		return;
	}
	if (strcmp(def->name, "softmax") == 0) {
		row = malloc(sizeof(float) * (size_t)V_("L"));
		ref_softmax(B_("x"), B_("y"), d, V_("R"), V_("L"), row);
		free(row);
		return;
	}
	if (strcmp(def->name, "rope") == 0) {
		ref_rope_mixed(B_("x"), B_("pos"), B_("cs"), d, w, V_("T"),
		    V_("Hn"), V_("D"), V_("P"));
		return;
	}
	if (strcmp(def->name, "attention_decode") == 0) {
		ref_attn_decode(B_("q"), B_("k"), B_("v"), B_("lens"), B_("o"),
		    d, V_("B"), V_("Hq"), V_("Hkv"), V_("D"), V_("S"),
		    1.0f / sqrtf((float)V_("D")));
		return;
	}
	if (strcmp(def->name, "embedding") == 0) {
		ref_embedding_mixed(B_("ids"), B_("table"), B_("y"), d, w,
		    V_("T"), V_("V"), V_("H"));
		return;
	}
	if (strcmp(def->name, "argmax") == 0) {
		ref_argmax(B_("x"), B_("idx"), d, V_("R"), V_("N"));
		return;
	}
	if (strcmp(def->name, "kv_append_rope") == 0) {
		ref_kv_append_rope_mixed(B_("k"), B_("v"), B_("pos"),
		    B_("cs"), B_("k_cache"), B_("v_cache"), d, w, V_("B"),
		    V_("T"), V_("Hkv"), V_("D"), V_("S"), V_("P"));
		return;
	}
	if (strcmp(def->name, "attention_prefill") == 0 ||
	    strcmp(def->name, "attention_paged") == 0) {
		int paged = strcmp(def->name, "attention_paged") == 0;
		ref_attn_shape_t sh = {
			V_("B"), V_("T"), V_("Hq"), V_("Hkv"), V_("D"),
			paged ? V_("MB") * V_("BS") : V_("S"),
			paged ? 0 : V_("Sc"),
			paged ? B_("block_table") : NULL,
			paged ? V_("BS") : 0, paged ? V_("MB") : 0,
			paged ? V_("NB") : 0,
		};

		ref_attn_rows(B_("q"), B_("k"), B_("v"), B_("lens"), B_("o"),
		    d, &sh, 1.0f / sqrtf((float)V_("D")));
		return;
	}
	if (strcmp(def->name, "silu_mul") == 0) {
		ref_silu_mul(B_("gu"), B_("y"), d, V_("T"), V_("F"));
		return;
	}
#undef V_
#undef B_
	fprintf(stderr, "refs: no reference for %s\n", def->name);
	exit(1);
}

static inline void ref_kernel(const ks_kernel_def_t *def, ks_dtype_t dt,
    const int64_t *v, buf_t *b, int nb)
{
	ref_kernel_mixed(def, dt, dt, v, b, nb);
}

#endif
