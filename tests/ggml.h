/*
 * llama.cpp's reference codec, loaded at run time (dlopen) from the ggml
 * library that the npm package @node-llama-cpp/linux-x64, version 3.22.1,
 * ships prebuilt: libggml-base.so, ggml 0.25.1 (commit 0ad4a86).
 * `deploy/deps.sh --bench` installs the package under KS_GGML_DIR
 * (docs/benchmarks.md); env KSPEC_GGML_BASE names another copy of the
 * library.  Nothing of kspec links it: bench/ggml/golden.c writes the
 * golden vectors of tests/golden/quant from it, and tests/test_quant.c
 * compares with it when it is there and says so when it is not.
 *
 * The package ships no header: the functions are declared here as ggml's
 * own quants header declares them (block pointers as void *), and the
 * version is checked against the pinned one at load.
 */
#ifndef KS_TESTS_GGML_H
#define KS_TESTS_GGML_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KS_GGML_PACKAGE "@node-llama-cpp/linux-x64"
#define KS_GGML_PACKAGE_VERSION "3.22.1"
#define KS_GGML_VERSION "0.25.1"
#define KS_GGML_COMMIT "0ad4a86"
#define KS_GGML_DIR "/opt/kspec-bench/ggml"
#define KS_GGML_BASE KS_GGML_DIR "/node_modules/" KS_GGML_PACKAGE \
	"/bins/linux-x64/libggml-base.so"

/* The formats in kspec's names, in the order of ks_ggml_t's tables. */
enum { KS_GGML_Q8_0, KS_GGML_Q4_0, KS_GGML_Q4_K, KS_GGML_NFORMATS };
static const char *const ks_ggml_formats[KS_GGML_NFORMATS] = {
	"q8_0", "q4_0", "q4_k"
};

typedef void (*ks_ggml_quantize_fn)(const float *x, void *y, int64_t k);
typedef void (*ks_ggml_dequantize_fn)(const void *x, float *y, int64_t k);

typedef struct {
	void *handle;
	const char *path;
	ks_ggml_quantize_fn quantize[KS_GGML_NFORMATS];
	ks_ggml_dequantize_fn dequantize[KS_GGML_NFORMATS];
} ks_ggml_t;

/* The library's path: env KSPEC_GGML_BASE, else the pinned install's. */
static inline const char *ks_ggml_path(void)
{
	const char *p = getenv("KSPEC_GGML_BASE");

	return p && *p ? p : KS_GGML_BASE;
}

/* Loads the library and its six functions, and checks its version.
 * 0, or -1 with the reason in ERR (a missing file says so first, so that
 * a caller can tell "not installed" from "broken"). */
static inline int ks_ggml_open(ks_ggml_t *g, char *err, size_t errlen)
{
	static const char *const qnames[KS_GGML_NFORMATS] = {
		"quantize_row_q8_0_ref", "quantize_row_q4_0_ref",
		"quantize_row_q4_K_ref"
	};
	static const char *const dnames[KS_GGML_NFORMATS] = {
		"dequantize_row_q8_0", "dequantize_row_q4_0",
		"dequantize_row_q4_K"
	};
	const char *(*version)(void), *(*commit)(void);
	int i;

	memset(g, 0, sizeof *g);
	g->path = ks_ggml_path();
	g->handle = dlopen(g->path, RTLD_NOW | RTLD_LOCAL);
	if (!g->handle) {
		snprintf(err, errlen, "cannot load %s: %s", g->path,
		    dlerror());
		return -1;
	}
	*(void **)&version = dlsym(g->handle, "ggml_version");
	*(void **)&commit = dlsym(g->handle, "ggml_commit");
	if (!version || !commit || strcmp(version(), KS_GGML_VERSION) ||
	    strncmp(commit(), KS_GGML_COMMIT, strlen(KS_GGML_COMMIT))) {
		snprintf(err, errlen, "%s is ggml %s (%s), not the pinned %s "
		    "(%s) of %s %s", g->path, version ? version() : "?",
		    commit ? commit() : "?", KS_GGML_VERSION, KS_GGML_COMMIT,
		    KS_GGML_PACKAGE, KS_GGML_PACKAGE_VERSION);
		dlclose(g->handle);
		g->handle = NULL;
		return -1;
	}
	for (i = 0; i < KS_GGML_NFORMATS; i++) {
		*(void **)&g->quantize[i] = dlsym(g->handle, qnames[i]);
		*(void **)&g->dequantize[i] = dlsym(g->handle, dnames[i]);
		if (!g->quantize[i] || !g->dequantize[i]) {
			snprintf(err, errlen, "%s lacks %s or %s", g->path,
			    qnames[i], dnames[i]);
			dlclose(g->handle);
			g->handle = NULL;
			return -1;
		}
	}
	return 0;
}

static inline void ks_ggml_close(ks_ggml_t *g)
{
	if (g->handle)
		dlclose(g->handle);
	g->handle = NULL;
}

#endif
