/*
 * base: errors, buffers, hashing, dtypes, logging, clocks.
 */
#define _POSIX_C_SOURCE 200809L
#include "base.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- errors ---- */

const char *ks_err_name(int err)
{
	switch (err) {
	case KS_OK: return "OK";
#define KS_ERR_NAME(name, val, msg) case KS_E_##name: return "E_" #name;
	KS_ERRNO_MAP(KS_ERR_NAME)
#undef KS_ERR_NAME
	}
	return "E_UNKNOWN";
}

const char *ks_strerror(int err)
{
	switch (err) {
	case KS_OK: return "success";
#define KS_ERR_MSG(name, val, msg) case KS_E_##name: return msg;
	KS_ERRNO_MAP(KS_ERR_MSG)
#undef KS_ERR_MSG
	}
	return "unknown error";
}

int ks_err_from_name(const char *name)
{
#define KS_ERR_CMP(n, val, msg) if (strcmp(name, "E_" #n) == 0) return val;
	KS_ERRNO_MAP(KS_ERR_CMP)
#undef KS_ERR_CMP
	return KS_E_INTERNAL;
}

int ks_err_from_errno(int e)
{
	switch (e) {
	case 0: return KS_OK;
	case ENOMEM: return KS_E_NOMEM;
	case EINVAL: return KS_E_INVAL;
	case ECONNREFUSED: return KS_E_CONNECT;
	case ETIMEDOUT: return KS_E_TIMEOUT;
	case E2BIG: case EMSGSIZE: return KS_E_TOO_LARGE;
	default: return KS_E_IO;
	}
}

void ks_set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* ---- buffers ---- */

void ks_buf_init(ks_buf_t *b)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

void ks_buf_close(ks_buf_t *b)
{
	free(b->data);
	ks_buf_init(b);
}

void ks_buf_reset(ks_buf_t *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

int ks_buf_reserve(ks_buf_t *b, size_t extra)
{
	size_t need, cap;
	char *p;

	/* +1 keeps room for the terminating NUL. */
	if (extra > SIZE_MAX - b->len - 1)
		return KS_E_NOMEM;
	need = b->len + extra + 1;
	if (need <= b->cap)
		return KS_OK;
	cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	p = realloc(b->data, cap);
	if (!p)
		return KS_E_NOMEM;
	b->data = p;
	b->cap = cap;
	return KS_OK;
}

int ks_buf_append(ks_buf_t *b, const void *p, size_t n)
{
	int rc = ks_buf_reserve(b, n);

	if (rc)
		return rc;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return KS_OK;
}

int ks_buf_puts(ks_buf_t *b, const char *s)
{
	return ks_buf_append(b, s, strlen(s));
}

int ks_buf_vprintf(ks_buf_t *b, const char *fmt, va_list ap)
{
	va_list cp;
	int n, rc;

	va_copy(cp, ap);
	n = vsnprintf(NULL, 0, fmt, cp);
	va_end(cp);
	if (n < 0)
		return KS_E_INVAL;
	rc = ks_buf_reserve(b, (size_t)n);
	if (rc)
		return rc;
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
	return KS_OK;
}

int ks_buf_printf(ks_buf_t *b, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = ks_buf_vprintf(b, fmt, ap);
	va_end(ap);
	return rc;
}

int ks_buf_json_str(ks_buf_t *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p;
	int rc = ks_buf_append(b, "\"", 1);

	for (p = (const unsigned char *)s; !rc && *p; p++) {
		char esc[6] = { '\\', 'u', '0', '0', 0, 0 };

		switch (*p) {
		case '"': rc = ks_buf_append(b, "\\\"", 2); break;
		case '\\': rc = ks_buf_append(b, "\\\\", 2); break;
		case '\n': rc = ks_buf_append(b, "\\n", 2); break;
		case '\t': rc = ks_buf_append(b, "\\t", 2); break;
		case '\r': rc = ks_buf_append(b, "\\r", 2); break;
		default:
			if (*p < 0x20) {
				esc[4] = hex[*p >> 4];
				esc[5] = hex[*p & 15];
				rc = ks_buf_append(b, esc, 6);
			} else {
				rc = ks_buf_append(b, p, 1);
			}
		}
	}
	return rc ? rc : ks_buf_append(b, "\"", 1);
}

char *ks_buf_steal(ks_buf_t *b, size_t *len)
{
	char *p = b->data;

	if (len)
		*len = b->len;
	ks_buf_init(b);
	return p;
}

/* ---- dtypes ---- */

static const char *const dtype_names[KS_DTYPE_ALL] = { "f32", "f16", "bf16",
	"q8_0", "q4_0", "q4_k" };
static const size_t dtype_sizes[KS_DTYPE_ALL] = { 4, 2, 2, 0, 0, 0 };
static const struct { int elems, bytes; } dtype_blocks[KS_DTYPE_ALL] = {
	[KS_DTYPE_Q8_0] = { 32, 34 },
	[KS_DTYPE_Q4_0] = { 32, 18 },
	[KS_DTYPE_Q4_K] = { 256, 144 },
};

const char *ks_dtype_name(ks_dtype_t d)
{
	return (unsigned)d < KS_DTYPE_ALL ? dtype_names[d] : "?";
}

int ks_dtype_parse(const char *s, ks_dtype_t *out)
{
	int i;

	for (i = 0; i < KS_DTYPE_ALL; i++) {
		if (strcmp(s, dtype_names[i]) == 0) {
			*out = (ks_dtype_t)i;
			return KS_OK;
		}
	}
	return KS_E_BAD_DTYPE;
}

size_t ks_dtype_size(ks_dtype_t d)
{
	return (unsigned)d < KS_DTYPE_ALL ? dtype_sizes[d] : 0;
}

int ks_dtype_block(ks_dtype_t d, int *elems, int *bytes)
{
	if ((unsigned)d >= KS_DTYPE_ALL || dtype_blocks[d].elems == 0)
		return 0;
	if (elems)
		*elems = dtype_blocks[d].elems;
	if (bytes)
		*bytes = dtype_blocks[d].bytes;
	return 1;
}

/* ---- logging and clocks ---- */

static int log_level = KS_LOG_INFO;
static int log_format = KS_LOG_TEXT;
static const char *const level_names[] = { "error", "warn", "info",
    "debug" };

void ks_log_set_level(int level)
{
	log_level = level;
}

void ks_log_set_format(int format)
{
	log_format = format;
}

int ks_log_enabled(int level)
{
	return level <= log_level;
}

int ks_log_level_parse(const char *s)
{
	int i;

	for (i = 0; i < 4; i++)
		if (strcmp(s, level_names[i]) == 0)
			return i;
	return -1;
}

static const char *log_name = "kspec";

void ks_log_set_name(const char *name)
{
	log_name = name;
}

void ks_log(int level, const char *fmt, ...)
{
	const char *name = level_names[level < 0 ? 0 : level > 3 ? 3 : level];
	struct timespec ts;
	struct tm tm;
	char when[32], msg[4096];
	ks_buf_t b;
	va_list ap;

	if (level > log_level)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (log_format != KS_LOG_JSON) {
		fprintf(stderr, "%s.%03ldZ %s[%ld] %s: %s\n", when,
		    ts.tv_nsec / 1000000, log_name, (long)getpid(), name, msg);
		return;
	}
	/* One object per line, written whole (one fputs). */
	ks_buf_init(&b);
	if (ks_buf_printf(&b, "{\"time\":\"%s.%03ldZ\",\"level\":\"%s\","
	    "\"prog\":", when, ts.tv_nsec / 1000000, name) == KS_OK &&
	    ks_buf_json_str(&b, log_name) == KS_OK &&
	    ks_buf_printf(&b, ",\"pid\":%ld,\"msg\":", (long)getpid()) ==
	    KS_OK && ks_buf_json_str(&b, msg) == KS_OK &&
	    ks_buf_append(&b, "}\n", 2) == KS_OK)
		fputs(b.data, stderr);
	ks_buf_close(&b);
}

int64_t ks_wall_s(void)
{
	return (int64_t)time(NULL);
}

int64_t ks_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
