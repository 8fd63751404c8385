/*
 * The IR's text form read back (specialize.h, ks_ir_parse) on any bytes.
 *
 * Checks, besides the sanitizers': the answer is a kernel or
 * KS_E_BAD_KERNEL, nothing else; a refusal names a place inside the text
 * (a line that exists, a column within it or just past its end) in a
 * message of one line of printable ASCII that starts with that place; an
 * accepted text is exactly what the printer writes for the kernel it gave
 * (so the parse is strict: no two texts give one kernel), the kernel
 * passes the verifier and its entry is the one the library would make.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../specialize/specialize.h"
#include "fuzz.h"

/* The refusal's place is in the text and its message says it. */
static void check_refusal(const uint8_t *data, size_t size,
    const ks_ir_parse_error_t *err)
{
	char place[64];
	size_t i, line_start = 0;
	int line = 1;

	KS_FUZZ_CHECK(err->line >= 1 && err->column >= 1);
	if (size <= KS_IR_MAX_TEXT) {
		for (i = 0; i < size && line < err->line; i++)
			if (data[i] == '\n') {
				line++;
				line_start = i + 1;
			}
		KS_FUZZ_CHECK(line == err->line);
		KS_FUZZ_CHECK(line_start + (size_t)err->column - 1 <= size);
		for (i = line_start; i < line_start + (size_t)err->column - 1;
		    i++)
			KS_FUZZ_CHECK(data[i] != '\n');
	}
	snprintf(place, sizeof place, "line %d, column %d: ", err->line,
	    err->column);
	KS_FUZZ_CHECK(strncmp(err->message, place, strlen(place)) == 0);
	KS_FUZZ_CHECK(strlen(err->message) > strlen(place));
	for (i = 0; err->message[i]; i++)
		KS_FUZZ_CHECK(err->message[i] >= 0x20 &&
		    err->message[i] < 0x7f);
}

static void check_kernel(const uint8_t *data, size_t size,
    const ks_ir_kernel_t *k)
{
	char entry[2 * KS_IR_MAX_NAME + 8], err[256];
	ks_buf_t b;

	ks_buf_init(&b);
	KS_FUZZ_CHECK(ks_ir_print(k, &b) == KS_OK);
	KS_FUZZ_CHECK(b.len == size && memcmp(b.data, data, size) == 0);
	ks_buf_close(&b);
	KS_FUZZ_CHECK(ks_ir_verify(k, err, sizeof err) == KS_OK);
	snprintf(entry, sizeof entry, "ks_%s_%s", k->name, k->variant);
	KS_FUZZ_CHECK(strcmp(k->entry, entry) == 0);
}

KS_FUZZ_TARGET(irtext)
{
	ks_ir_parse_error_t err;
	ks_ir_kernel_t *k = NULL;
	int rc;

	rc = ks_ir_parse((const char *)data, size, &k, &err);
	KS_FUZZ_CHECK(rc == KS_OK || rc == KS_E_BAD_KERNEL);
	KS_FUZZ_CHECK((rc == KS_OK) == (k != NULL));
	if (rc == KS_OK)
		check_kernel(data, size, k);
	else
		check_refusal(data, size, &err);
	ks_ir_free(k);
	return 0;
}
