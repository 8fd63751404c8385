/*
 * quantize: f32 weights to GGUF's block formats with libkspec's
 * quantizer, on this machine (no daemon).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

const char usage_quantize[] =
"usage: kspec quantize FORMAT -k K -o OUT [--json] INPUT\n"
"\n"
"Quantizes the f32 weights of INPUT, raw little-endian floats in rows of K\n"
"(a row-major matrix, as numpy's tofile() writes one), to FORMAT: q8_0,\n"
"q4_0 or q4_k, GGUF's block formats, byte for byte llama.cpp's reference\n"
"quantizer's (docs/kernels.md).  Writes the blocks to OUT (through OUT.tmp\n"
"and a rename) and prints the matrix and its size; --json:\n"
"{\"format\",\"rows\",\"k\",\"bytes\",\"output\"}.  Needs no daemon.  K must\n"
"be a multiple of the block (32, or 256 for q4_k); a row with a NaN or\n"
"infinite weight, or a block whose scale f16 cannot hold, is refused by\n"
"its row and block (exit 1) and OUT is left alone.\n";

/* Reads PATH whole into *DATA (caller frees); -1 with a message. */
static int read_whole(const char *path, uint8_t **data, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), err = 0;
	size_t cap = 1 << 16, n = 0;
	struct stat st;
	uint8_t *buf = NULL, *bigger;
	ssize_t k;

	if (fd < 0 || fstat(fd, &st)) {
		err = errno;
		goto done;
	}
	if (S_ISREG(st.st_mode) && st.st_size >= 0)
		cap = (size_t)st.st_size + 1;
	for (;;) {
		if (!buf || n == cap) {
			if (buf)
				cap *= 2;
			bigger = realloc(buf, cap);
			if (!bigger) {
				err = ENOMEM;
				goto done;
			}
			buf = bigger;
		}
		k = read(fd, buf + n, cap - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			err = errno;
			goto done;
		}
		if (k == 0)
			break;
		n += (size_t)k;
	}
done:
	if (fd >= 0)
		close(fd);
	if (err) {
		fprintf(stderr, "kspec: cannot read %s: %s\n", path,
		    strerror(err));
		free(buf);
		return -1;
	}
	*data = buf;
	*len = n;
	return 0;
}

/* What quantize reads from its command line. */
typedef struct {
	const char *format, *input, *out;
	unsigned long long k;
	int json;
} quantize_args_t;

static int take_k(const cli_cmd_t *cmd, void *args, const cli_opt_t *o,
    char *value)
{
	quantize_args_t *a = args;
	char *end;

	errno = 0;
	a->k = strtoull(value, &end, 10);
	if (errno || end == value || *end || a->k == 0 || value[0] == '-')
		return usage_error(cmd->name, "-k needs a positive integer "
		    "(got '%s')", value);
	return 0;
}

static const cli_opt_t quantize_opts[] = {
	CLI_OPT_OPERAND(quantize_args_t, format),
	CLI_OPT_OPERAND(quantize_args_t, input),
	CLI_OPT_CALL(CLI_VALUE, NULL, 'k', take_k),
	CLI_OPT_STRING("output", 'o', quantize_args_t, out),
	CLI_OPT_FLAG("json", 0, quantize_args_t, json),
	CLI_OPT_END
};

int cmd_quantize(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv)
{
	quantize_args_t a = { 0 };
	const char *format, *input, *outpath;
	unsigned long long k;
	size_t len, rows, need;
	uint8_t *in = NULL, *out = NULL;
	char err[512];
	int rc;

	rc = cli_parse(cmd, argc, argv, quantize_opts, &a);
	if (rc != CLI_GO_ON)
		return rc;
	format = a.format;
	input = a.input;
	outpath = a.out;
	k = a.k;
	if (!format || !input)
		return usage_error(cmd->name, "give FORMAT and INPUT");
	if (!k || !outpath)
		return usage_error(cmd->name, "give -k K and -o OUT");
	rc = kspec_quant_size(format, 1, (size_t)k, &need, err, sizeof err);
	if (rc == KSPEC_E_BAD_DTYPE || rc == KSPEC_E_BAD_SHAPE)
		return usage_error(cmd->name, "%s", err);
	if (read_whole(input, &in, &len))
		return EXIT_FAIL;
	if (len % (4 * k) != 0) {
		fprintf(stderr, "kspec: %s has %zu bytes: not whole rows of "
		    "K = %llu f32 weights (%llu bytes each)\n", input, len, k,
		    4 * k);
		free(in);
		return EXIT_FAIL;
	}
	rows = len / (4 * k);
	rc = kspec_quant_size(format, rows, (size_t)k, &need, err,
	    sizeof err);
	if (!rc && !(out = malloc(need ? need : 1)))
		rc = KSPEC_E_NOMEM;
	if (!rc)
		rc = kspec_quantize(format, (const float *)(void *)in, rows,
		    (size_t)k, out, need, err, sizeof err);
	free(in);
	if (rc) {
		fprintf(stderr, "kspec: %s: %s\n", kspec_err_name(rc),
		    rc == KSPEC_E_NOMEM ? kspec_strerror(rc) : err);
		free(out);
		return EXIT_FAIL;
	}
	rc = write_file(outpath, out, need, 0) ? EXIT_FAIL : EXIT_OK;
	free(out);
	if (rc)
		return rc;
	if (a.json) {
		cJSON *o = cJSON_CreateObject();
		char *text;

		cJSON_AddStringToObject(o, "format", format);
		cJSON_AddNumberToObject(o, "rows", (double)rows);
		cJSON_AddNumberToObject(o, "k", (double)k);
		cJSON_AddNumberToObject(o, "bytes", (double)need);
		cJSON_AddStringToObject(o, "output", outpath);
		text = cJSON_PrintUnformatted(o);
		puts(text ? text : "{}");
		free(text);
		cJSON_Delete(o);
	} else {
		printf("%zu x %llu f32 -> %s: %zu bytes -> %s\n", rows, k,
		    format, need, outpath);
	}
	return EXIT_OK;
}
