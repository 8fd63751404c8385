/*
 * examples/llama's command line: the named configs, the options and their
 * checks (llama.c's header comment says what each does).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../include/kspec.h"
#include "options.h"

/*
 * small: the gate's config (head dim 64 so that attention selects gqa and
 * gemm gemv_m1 when specialized).  8b2l: Llama-3-8B's layer shapes, two
 * layers, a 32000 vocab (Llama 2's), the bench's config.
 */
static const config_t configs[] = {
	{ "small", 256, 2, 4, 2, 64, 640, 512, 64, 8, 24, 1e-5f, 10000.0 },
	{ "8b2l", 4096, 2, 32, 8, 128, 14336, 32000, 640, 512, 16, 1e-5f,
	    10000.0 },
};

static void usage(void)
{
	fprintf(stderr,
	    "usage: llama [--config small|8b2l] [--bf16 | --wdtype "
	    "f32|bf16|f16|q8_0|q4_0|q4_k]\n"
	    "             [--mode exact|fast] [--general] [--unpacked]\n"
	    "             [--threads N]"
	    "\n"
	    "             [--backend cpu|opencl|cuda] [--target T] [--prompt N]"
	    " [--steps N] [--seed N]\n"
	    "             [--verify W] [--draft-layers N] [--socket PATH]\n"
	    "             [--dump FILE] [--trials N] [--profile] [--quiet]\n"
	    "             [--save-gguf FILE] [--load-gguf FILE]\n"
	    "       llama --reference [--follow DUMP] ... (float64, no "
	    "daemon)\n"
	    "--mode fast (q8_0, q4_0, q4_k weights): decode, verify and the "
	    "logits on x\n"
	    "  quantized to q8_0 (integer products, llama.cpp's "
	    "arithmetic); the prefill\n"
	    "  stays exact unless --unpacked or --general\n");
	exit(2);
}

/* The options: flags set an int to 1, the others take a value. */
enum { O_FLAG, O_INT, O_STR };

static const struct {
	const char *name;
	int kind;
	size_t off;
} options[] = {
	{ "--bf16", O_FLAG, offsetof(opts_t, bf16) },
	{ "--general", O_FLAG, offsetof(opts_t, general) },
	{ "--unpacked", O_FLAG, offsetof(opts_t, unpacked) },
	{ "--reference", O_FLAG, offsetof(opts_t, reference) },
	{ "--quiet", O_FLAG, offsetof(opts_t, quiet) },
	{ "--profile", O_FLAG, offsetof(opts_t, profile) },
	{ "--threads", O_INT, offsetof(opts_t, threads) },
	{ "--prompt", O_INT, offsetof(opts_t, prompt) },
	{ "--steps", O_INT, offsetof(opts_t, steps) },
	{ "--verify", O_INT, offsetof(opts_t, verify) },
	{ "--draft-layers", O_INT, offsetof(opts_t, draft_layers) },
	{ "--trials", O_INT, offsetof(opts_t, trials) },
	{ "--seed", O_INT, offsetof(opts_t, seed) },
	{ "--socket", O_STR, offsetof(opts_t, socket) },
	{ "--dump", O_STR, offsetof(opts_t, dump) },
	{ "--follow", O_STR, offsetof(opts_t, follow) },
	{ "--config", O_STR, offsetof(opts_t, config) },
	{ "--backend", O_STR, offsetof(opts_t, backend) },
	{ "--target", O_STR, offsetof(opts_t, target) },
	{ "--wdtype", O_STR, offsetof(opts_t, wdtype) },
	{ "--mode", O_STR, offsetof(opts_t, mode) },
	{ "--save-gguf", O_STR, offsetof(opts_t, save) },
	{ "--load-gguf", O_STR, offsetof(opts_t, load) },
};

const char opts_fast_needs[] = "--mode fast needs weights in a block "
    "format (--wdtype q8_0, q4_0 or q4_k, or a --load-gguf file of one): "
    "it quantizes each gemm's x to q8_0 for integer dot products with "
    "the weights' codes";

void opts_parse(opts_t *o, int argc, char **argv)
{
	size_t c;
	int i;

	memset(o, 0, sizeof *o);
	o->backend = "cpu";
	o->prompt = -1;
	o->steps = -1;
	o->seed = 1;
	for (i = 1; i < argc; i++) {
		char *field, *end;

		for (c = 0; c < sizeof options / sizeof options[0]; c++)
			if (strcmp(argv[i], options[c].name) == 0)
				break;
		if (c == sizeof options / sizeof options[0] ||
		    (options[c].kind != O_FLAG && i + 1 == argc))
			usage();
		field = (char *)o + options[c].off;
		if (options[c].kind == O_FLAG) {
			*(int *)field = 1;
		} else if (options[c].kind == O_STR) {
			*(const char **)field = argv[++i];
		} else {
			long v = strtol(argv[++i], &end, 10);

			if (*end != '\0' || v < 0 || v > INT32_MAX)
				die("%s takes a number (got %s)", argv[i - 1],
				    argv[i]);
			*(int *)field = (int)v;
		}
	}
	/* No --config: small, or with --load-gguf the file's own. */
	if (o->config == NULL && o->load == NULL)
		o->config = "small";
	for (c = 0; o->config && c < sizeof configs / sizeof configs[0]; c++)
		if (strcmp(configs[c].name, o->config) == 0)
			o->cfg = &configs[c];
	if (o->config && o->cfg == NULL)
		die("unknown config %s", o->config);
	if (o->bf16)
		o->half = "bf16";
	if (o->wdtype && (strcmp(o->wdtype, "bf16") == 0 ||
	    strcmp(o->wdtype, "f16") == 0)) {
		if (o->bf16 && strcmp(o->wdtype, "bf16") != 0)
			die("--bf16 and --wdtype %s", o->wdtype);
		o->half = strcmp(o->wdtype, "bf16") == 0 ? "bf16" : "f16";
	} else if (o->wdtype && (strcmp(o->wdtype, "q8_0") == 0 ||
	    strcmp(o->wdtype, "q4_0") == 0 || strcmp(o->wdtype, "q4_k") == 0)) {
		if (o->bf16)
			die("--bf16 and --wdtype %s", o->wdtype);
		o->wq = o->wdtype;
	} else if (o->wdtype && strcmp(o->wdtype, "f32") != 0) {
		die("unknown --wdtype %s (f32, bf16, f16, q8_0, q4_0 or q4_k)",
		    o->wdtype);
	}
	if (o->mode == NULL || strcmp(o->mode, "exact") == 0)
		o->mode = "exact";
	else if (strcmp(o->mode, "fast") == 0)
		o->fast = 1;
	else
		die("unknown --mode %s (exact or fast)", o->mode);
	if (o->fast && o->reference)
		die("--mode fast and --reference: the float64 reference "
		    "models the exact mode only");
	if (strcmp(o->backend, "opencl") == 0)
		o->opencl = 1;
	else if (strcmp(o->backend, "cuda") == 0)
		o->cuda = 1;
	else if (strcmp(o->backend, "cpu") != 0)
		die("unknown backend %s", o->backend);
	if (o->cuda && o->target)
		die("--target with cuda: the device's own sm is the target");
	if (o->verify != 0 && (o->verify < 2 || o->verify > 8))
		die("--verify takes a width of 2 to 8");
	if (o->load && (o->wdtype || o->bf16))
		die("--load-gguf takes the weights' format from the file");
	if (o->fast && !o->load && !o->wq)
		die("%s", opts_fast_needs);
}
