/*
 * examples/llama's command line (options.c).
 */
#ifndef KS_LLAMA_OPTIONS_H
#define KS_LLAMA_OPTIONS_H

#include "model.h"

typedef struct {
	const config_t *cfg;
	const char *wdtype;     /* --wdtype; wq its block format or NULL */
	const char *wq;
	const char *mode;       /* --mode: "exact" or "fast"; fast is 1 */
	int fast;
	int bf16, general, threads, opencl, cuda, verify, draft_layers;
	const char *half;       /* "bf16" (--bf16) or "f16", else NULL */
	int reference;
	int unpacked;
	int quiet, profile;
	int prompt, steps, trials, seed;
	const char *socket, *dump, *follow, *config, *backend;
	const char *target;     /* --target: cpu or opencl's, else auto */
	const char *save, *load;        /* --save-gguf, --load-gguf */
} opts_t;

/* Why --mode fast was refused: its x is quantized for integer dot
 * products with the codes of a block-format weight. */
extern const char opts_fast_needs[];

/* Parses and checks ARGV into O: the config named (NULL with
 * --load-gguf and no --config: the file's), the weights, mode, backend
 * and target; prints the usage or dies with the reason on a bad one.
 * The checks that need the config (a file's) are the caller's. */
void opts_parse(opts_t *o, int argc, char **argv);

#endif
