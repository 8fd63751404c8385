/*
 * base: errors, byte buffers, hashing (libsodium), logging and dtypes.
 * Depends on nothing of ours.  Every other module may include this header.
 */
#ifndef KS_BASE_H
#define KS_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "limits.h"

/*
 * Errors are negative ints from this one table.  The wire code of an error
 * is its name without the KS_ prefix (KS_E_TOO_LARGE -> "E_TOO_LARGE").
 */
#define KS_ERRNO_MAP(X)                                                      \
	X(NOMEM,         -1, "out of memory")                                \
	X(INVAL,         -2, "invalid argument")                             \
	X(BAD_FRAME,     -3, "malformed frame")                              \
	X(TOO_LARGE,     -4, "size limit exceeded")                          \
	X(BAD_JSON,      -5, "header is not a valid JSON object")            \
	X(BAD_REQUEST,   -6, "invalid request")                              \
	X(UNKNOWN_OP,    -7, "unknown op")                                   \
	X(UNKNOWN_FIELD, -8, "unknown field")                                \
	X(DUPLICATE_KEY, -9, "duplicate key in JSON object")                 \
	X(UNKNOWN_KERNEL, -10, "unknown kernel")                             \
	X(BAD_SHAPE,     -11, "invalid shape")                               \
	X(BAD_DTYPE,     -12, "unsupported dtype")                           \
	X(BAD_BACKEND,   -13, "unknown backend")                             \
	X(BAD_TARGET,    -14, "invalid target")                              \
	X(BAD_FORMAT,    -15, "unsupported artifact format")                 \
	X(BAD_MODE,      -16, "unsupported mode")                            \
	X(BACKEND_UNAVAILABLE, -17, "backend unavailable on this daemon")    \
	X(COMPILE,       -18, "compile failed")                              \
	X(STORE,         -19, "store error")                                 \
	X(CORRUPT,       -20, "stored artifact failed its checksum")         \
	X(IO,            -21, "i/o error")                                   \
	X(CONNECT,       -22, "cannot connect to kspecd")                    \
	X(PROTO,         -23, "protocol violation")                          \
	X(SHUTTING_DOWN, -24, "daemon is shutting down")                     \
	X(BUSY,          -25, "too many requests in flight")                 \
	X(NOT_FOUND,     -26, "not found")                                   \
	X(TIMEOUT,       -27, "timed out")                                   \
	X(INTERNAL,      -28, "internal error")                              \
	X(UNSUPPORTED,   -29, "unsupported")                                 \
	X(COMPILE_CRASHED, -30, "the compiler crashed")                      \
	X(COMPILE_TIMEOUT, -31, "the compile exceeded its time limit")       \
	X(COMPILE_OOM,   -32, "the compile exceeded its memory limit")         \
	X(DENIED,        -33, "not allowed")                                 \
	X(CANCELLED,     -34, "cancelled by the client")                      \
	X(CANARY,        -35, "the kernel failed its known-answer canary")   \
	X(BAD_KERNEL,    -36, "invalid kernel text")

enum {
	KS_OK = 0,
#define KS_ERR_ENUM(name, val, msg) KS_E_##name = (val),
	KS_ERRNO_MAP(KS_ERR_ENUM)
#undef KS_ERR_ENUM
};

/* "E_TOO_LARGE" for KS_E_TOO_LARGE; "E_UNKNOWN" for a value not in the map. */
const char *ks_err_name(int err);
/* Human message for an error code; never NULL. */
const char *ks_strerror(int err);
/* The error code whose wire name is NAME, or KS_E_INTERNAL. */
int ks_err_from_name(const char *name);
/* Converts an errno value to the nearest ks error (ENOMEM -> KS_E_NOMEM...). */
int ks_err_from_errno(int e);

/* Formats a message into ERR (size ERRLEN); a NULL or empty ERR is left
 * alone, so callers need not check. */
void ks_set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Overflow-checked int64 product/sum; return 1 on overflow, else 0. */
static inline int ks_mul_overflow(int64_t a, int64_t b, int64_t *out)
{
	return __builtin_mul_overflow(a, b, out);
}
static inline int ks_add_overflow(int64_t a, int64_t b, int64_t *out)
{
	return __builtin_add_overflow(a, b, out);
}

/*
 * Growable byte buffer.  Embedded: ks_buf_init/ks_buf_close.  data is
 * always NUL-terminated after a successful append (len excludes the NUL),
 * so a buffer of text can be passed as a C string.
 */
typedef struct {
	char *data;
	size_t len;
	size_t cap;
} ks_buf_t;

void ks_buf_init(ks_buf_t *b);
void ks_buf_close(ks_buf_t *b);
void ks_buf_reset(ks_buf_t *b);           /* len = 0, keeps memory */
int ks_buf_reserve(ks_buf_t *b, size_t extra);
int ks_buf_append(ks_buf_t *b, const void *p, size_t n);
int ks_buf_puts(ks_buf_t *b, const char *s);
int ks_buf_printf(ks_buf_t *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int ks_buf_vprintf(ks_buf_t *b, const char *fmt, va_list ap);
/* Appends S as a JSON string literal, with quotes and escapes. */
int ks_buf_json_str(ks_buf_t *b, const char *s);
/* Takes the bytes out of B: caller frees the result with free(). */
char *ks_buf_steal(ks_buf_t *b, size_t *len);

/*
 * Hashing: BLAKE2b-256 from libsodium (crypto_generichash), unkeyed, so a
 * hash is stable across runs and machines.  ks_base_init must run once
 * before any hashing (it calls sodium_init).
 */
#define KS_HASH_BYTES 32
#define KS_HASH_HEX   (2 * KS_HASH_BYTES + 1)

typedef struct {
	uint8_t b[KS_HASH_BYTES];
} ks_hash_t;

typedef struct {
	_Alignas(64) unsigned char opaque[384]; /* crypto_generichash_state */
} ks_hasher_t;

int ks_base_init(void);
void ks_hash(const void *p, size_t n, ks_hash_t *out);
void ks_hasher_init(ks_hasher_t *h);
void ks_hasher_update(ks_hasher_t *h, const void *p, size_t n);
/* Length-prefixed field, so ("ab","c") and ("a","bc") hash differently. */
void ks_hasher_field(ks_hasher_t *h, const char *name, const char *value);
void ks_hasher_final(ks_hasher_t *h, ks_hash_t *out);
void ks_hash_hex(const ks_hash_t *h, char out[KS_HASH_HEX]);
/* Parses 64 hex digits; returns KS_E_INVAL if S is not exactly that. */
int ks_hash_from_hex(const char *s, ks_hash_t *out);
int ks_hash_eq(const ks_hash_t *a, const ks_hash_t *b);

/*
 * Storage dtypes of kernel tensors.  Arithmetic is f32; conversion to the
 * storage dtype happens once, at the store, round-to-nearest-even.  The
 * element dtypes come first (any buffer, the request's dtype); after them
 * GGUF's block formats, which only weights take (a request's wdtype): a
 * row of K weights is K / elems blocks of `bytes` bytes each
 * (ks_dtype_block; docs/kernels.md defines each layout).
 */
typedef enum {
	KS_DTYPE_F32 = 0,
	KS_DTYPE_F16 = 1,
	KS_DTYPE_BF16 = 2,
	KS_DTYPE_COUNT,                 /* the element dtypes end here */
	KS_DTYPE_Q8_0 = KS_DTYPE_COUNT, /* 32 per block: f16 d, 32 int8 */
	KS_DTYPE_Q4_0,                  /* 32 per block: f16 d, 16 nibble bytes */
	KS_DTYPE_Q4_K,                  /* 256 per block: f16 d, dmin, 12 bytes
	                                   of 6-bit scales, 128 nibble bytes */
	KS_DTYPE_ALL
} ks_dtype_t;

/* "f32" "f16" "bf16" "q8_0" "q4_0" "q4_k" */
const char *ks_dtype_name(ks_dtype_t d);
/* Any of ks_dtype_name's names; KS_E_BAD_DTYPE for others. */
int ks_dtype_parse(const char *s, ks_dtype_t *out);
/* Bytes of one element; 0 for a block format. */
size_t ks_dtype_size(ks_dtype_t d);
/* Whether D is a block format; then *ELEMS and *BYTES (either may be NULL)
 * are a block's weights and its size. */
int ks_dtype_block(ks_dtype_t d, int *elems, int *bytes);

/* Logging to stderr, one line per message: as text,
 * "2026-11-29T13:00:00.123Z kspecd[pid] level: msg", or as one JSON
 * object, {"time":"...","level":"info","prog":"kspecd","pid":N,"msg":"..."}. */
enum { KS_LOG_ERROR, KS_LOG_WARN, KS_LOG_INFO, KS_LOG_DEBUG };
enum { KS_LOG_TEXT, KS_LOG_JSON };
void ks_log_set_level(int level);
void ks_log_set_format(int format);
/* Whether a message of LEVEL would be written (a test before building
 * one on the hit path). */
int ks_log_enabled(int level);
/* "error", "warn", "info", "debug" to KS_LOG_*, or -1. */
int ks_log_level_parse(const char *s);
/* The program name in log lines ("kspec" unless set); NAME must live as
 * long as the process logs. */
void ks_log_set_name(const char *name);
void ks_log(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * Loads a shared object from memory (memfd + dlopen, no temporary file)
 * and finds ENTRY.  On success *lib (unload with ks_so_unload) and *sym
 * are set.  The memfd stays open while the object is loaded, so no other
 * live object gets the same /proc/self/fd/N name (glibc would return the
 * old one).  Errors: KS_E_IO (dlopen), KS_E_NOT_FOUND (no ENTRY), errno's.
 */
typedef struct ks_so ks_so_t;
int ks_so_load(const void *bytes, size_t len, const char *entry,
    ks_so_t **lib, void **sym, char *err, size_t errlen);
void ks_so_unload(ks_so_t *lib);

/* Monotonic clock in nanoseconds (inline: the hit path reads it twice
 * for its latency) and wall clock in Unix seconds and milliseconds. */
static inline uint64_t ks_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
int64_t ks_wall_s(void);
int64_t ks_wall_ms(void);

#endif
