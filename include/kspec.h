/*
 * kspec.h: the public client library of kspecd (libkspec.so, libkspec.a).
 *
 * A client holds one connection to the daemon's Unix socket and sends one
 * request at a time over the v1 wire protocol (docs/protocol.md), with
 * blocking I/O.  Usable from C and C++.  kspecd closes a connection that
 * stays idle (its --idle-timeout); the next call notices and connects
 * again before it sends.
 *
 * Threads: a kspec_client_t is used by one thread at a time (calls on one
 * client must not overlap; hand it between threads with your own lock or
 * queue).  Different clients are independent and may be used from
 * different threads at once: the library has no global state of its own.
 * Signals: writes use MSG_NOSIGNAL, so a daemon that goes away gives
 * KSPEC_E_CONNECT, never SIGPIPE; interrupted system calls are restarted.
 *
 * Errors: every function that can fail returns KSPEC_OK (0) or a negative
 * KSPEC_E_* code.  When the daemon refused the request, the code is the
 * daemon's (its wire name is kspec_err_name(code), e.g. "E_BAD_SHAPE") and
 * kspec_last_error() gives the daemon's code string and message.  Failures
 * of the connection itself are KSPEC_E_CONNECT (the daemon never sends that
 * code); a reply that breaks the protocol is KSPEC_E_PROTO.  After
 * KSPEC_E_CONNECT, or a KSPEC_E_PROTO that leaves the stream out of step (a
 * malformed or oversized frame, a reply to another id), the connection is
 * closed and later calls fail with KSPEC_E_CONNECT; after other errors it
 * stays usable.
 *
 * Memory: strings and artifacts the library returns are owned by the
 * caller, who frees them with the function named beside each one.
 */
#ifndef KSPEC_H
#define KSPEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KSPEC_PROTOCOL_VERSION 1
/* The version of kspec (the daemon, this library, the kspec command). */
#define KSPEC_VERSION "0.1.0"

/*
 * Error codes: the same values and names as the daemon's (base/base.h
 * KS_ERRNO_MAP; the library checks at compile time that they agree).  The
 * wire name of KSPEC_E_X is "E_X".
 */
enum {
	KSPEC_OK = 0,
	KSPEC_E_NOMEM = -1,
	KSPEC_E_INVAL = -2,
	KSPEC_E_BAD_FRAME = -3,
	KSPEC_E_TOO_LARGE = -4,
	KSPEC_E_BAD_JSON = -5,
	KSPEC_E_BAD_REQUEST = -6,
	KSPEC_E_UNKNOWN_OP = -7,
	KSPEC_E_UNKNOWN_FIELD = -8,
	KSPEC_E_DUPLICATE_KEY = -9,
	KSPEC_E_UNKNOWN_KERNEL = -10,
	KSPEC_E_BAD_SHAPE = -11,
	KSPEC_E_BAD_DTYPE = -12,
	KSPEC_E_BAD_BACKEND = -13,
	KSPEC_E_BAD_TARGET = -14,
	KSPEC_E_BAD_FORMAT = -15,
	KSPEC_E_BAD_MODE = -16,
	KSPEC_E_BACKEND_UNAVAILABLE = -17,
	KSPEC_E_COMPILE = -18,
	KSPEC_E_STORE = -19,
	KSPEC_E_CORRUPT = -20,
	KSPEC_E_IO = -21,
	KSPEC_E_CONNECT = -22,
	KSPEC_E_PROTO = -23,
	KSPEC_E_SHUTTING_DOWN = -24,
	KSPEC_E_BUSY = -25,
	KSPEC_E_NOT_FOUND = -26,
	KSPEC_E_TIMEOUT = -27,
	KSPEC_E_INTERNAL = -28,
	KSPEC_E_UNSUPPORTED = -29,
	KSPEC_E_COMPILE_CRASHED = -30,
	KSPEC_E_COMPILE_TIMEOUT = -31,
	KSPEC_E_COMPILE_OOM = -32,
	KSPEC_E_DENIED = -33,
	KSPEC_E_CANCELLED = -34,
	KSPEC_E_CANARY = -35,
	KSPEC_E_BAD_KERNEL = -36
};

/* "E_BAD_SHAPE" for KSPEC_E_BAD_SHAPE, "OK" for 0, "E_UNKNOWN" else. */
const char *kspec_err_name(int err);
/* A fixed human message for an error code; never NULL. */
const char *kspec_strerror(int err);

typedef struct kspec_client kspec_client_t;

/*
 * Writes the default socket path into BUF (docs/cli.md): env
 * KSPEC_SOCKET when set and non-empty, else
 * $XDG_RUNTIME_DIR/kspec/kspecd.sock, else /tmp/kspec-$UID/kspecd.sock.
 * Returns KSPEC_E_TOO_LARGE when it does not fit in LEN bytes.
 */
int kspec_default_socket(char *buf, size_t len);

/*
 * Connects to the daemon at SOCKET_PATH (NULL: kspec_default_socket()).
 * *OUT is set even when the connection fails (it is NULL only on
 * KSPEC_E_NOMEM), so that kspec_last_error() can say why; the caller
 * releases it with kspec_close() in every case.
 */
int kspec_connect(const char *socket_path, kspec_client_t **out);

/* Closes the connection and frees the client.  NULL is allowed. */
void kspec_close(kspec_client_t *client);

/* The socket path the client was connected to (valid until kspec_close). */
const char *kspec_socket_path(const kspec_client_t *client);

/*
 * The last failure on CLIENT: returns its one-line message and, when CODE
 * is not NULL, sets *CODE to its wire name ("E_BAD_SHAPE"), the daemon's
 * own string when the daemon sent it.  Both are "" after a successful
 * call.  The strings live until the next call on CLIENT.
 */
const char *kspec_last_error(const kspec_client_t *client, const char **code);

/*
 * Declares that CLIENT's gets are for deployment NAME (kspec deploy):
 * every get from now on carries it ("deployment", not part of the key),
 * so that a compile after the deployment was found ready counts as a
 * late compile (docs/operations.md).  NULL or "" declares none.
 * KSPEC_E_INVAL for a NAME that is not 1 to 64 letters, digits, '.', '_'
 * or '-'.
 */
int kspec_set_deployment(kspec_client_t *client, const char *name);

/* Round trip to the daemon: {"op":"ping"}. */
int kspec_ping(kspec_client_t *client);

/*
 * The daemon's hello reply (protocol version, server version, backends)
 * as the JSON text of the reply header.  Caller frees *JSON_OUT with
 * kspec_free().
 */
int kspec_hello(kspec_client_t *client, char **json_out);

/*
 * The daemon's stats reply as the JSON text of the reply header,
 * verbatim.  Caller frees *JSON_OUT with kspec_free().
 */
int kspec_stats(kspec_client_t *client, char **json_out);

/* One shape constant of a get request. */
typedef struct {
	const char *name;
	int64_t value;
} kspec_dim_t;

/*
 * A get request (docs/protocol.md).  Every parameter of the kernel is
 * either a constant in SHAPE or named in DYNAMIC.  Optional strings are
 * NULL for the daemon's default.  The library only borrows the strings.
 *
 * ABI: wdtype was added at the end (SOVERSION 0), which grew the struct.
 * A program built against the older header passes a shorter struct; it
 * must be rebuilt before linking this library, since kspec_get_many steps
 * through its array of specs by this size.  Zero-initialize
 * specs (`= { 0 }` or designated initializers) so that wdtype is NULL.
 */
typedef struct {
	const char *kernel;             /* required: "gemm" */
	const char *backend;            /* required: "cpu", "cuda", "opencl" */
	const char *target;             /* NULL: "auto" */
	const char *format;             /* NULL: the backend's default */
	const char *dtype;              /* required: "f32", "f16", "bf16" */
	const char *mode;               /* NULL: "exact"; or "fast" */
	const kspec_dim_t *shape;
	size_t nshape;
	const char *const *dynamic;
	size_t ndynamic;
	int meta_only;                  /* 1: metadata only, no bytes */
	const char *wdtype;             /* NULL: dtype; the weights' dtype
	                                   where the kernel takes one
	                                   ("bf16" beside dtype "f32") */
} kspec_get_spec_t;

/*
 * A get reply.  Strings are never NULL ("" when the reply lacks the
 * field).  Everything lives until kspec_artifact_free().
 */
typedef struct {
	const uint8_t *bytes;           /* the artifact; NULL if meta_only */
	size_t len;                     /* bytes received (0 if meta_only) */
	const char *meta;               /* reply header, JSON text */
	size_t meta_len;
	const char *key;                /* request key, hex */
	const char *artifact;           /* content hash of the bytes, hex */
	const char *source;             /* memory, disk, compiled, joined */
	const char *kernel;
	const char *variant;
	const char *format;             /* so, ptx, cubin, clbin */
	const char *entry;              /* symbol to launch */
	uint64_t size;                  /* the reply's "bytes" (0: absent) */
} kspec_artifact_t;

/*
 * Asks for the artifact of SPEC.  On success *OUT holds the reply; the
 * caller frees it with kspec_artifact_free().  On failure *OUT is NULL.
 */
int kspec_get(kspec_client_t *client, const kspec_get_spec_t *spec,
    kspec_artifact_t **out);

/* Frees an artifact returned by kspec_get.  NULL is allowed. */
void kspec_artifact_free(kspec_artifact_t *artifact);

/*
 * Pipelined gets: sends all N requests on the connection, then reads the
 * replies in the daemon's completion order, matched by id.  out[i] gets the
 * artifact of specs[i] (free each with kspec_artifact_free) or NULL;
 * errors (may be NULL) gets each item's code.  Returns 0 when every item
 * succeeded, else the first item error in completion order (the message of
 * the last error is in kspec_last_error); a lost connection returns
 * KSPEC_E_CONNECT with the items not yet read left NULL.
 */
int kspec_get_many(kspec_client_t *client, const kspec_get_spec_t *specs,
    size_t n, kspec_artifact_t **out, int *errors);

/*
 * Sends op OP with the extra members FIELDS (JSON object members without
 * braces, e.g. "\"kernel\":\"gemm\"", or NULL) and returns the reply
 * header's JSON text in *json_out (free with kspec_free).  For the ops
 * without a dedicated call: kernels, list, evict, warm (docs/protocol.md).
 */
int kspec_call(kspec_client_t *client, const char *op, const char *fields,
    char **json_out);

/*
 * Pipelined calls, for a warm that reports each item as it completes
 * ("progress":true, docs/protocol.md) and a cancel sent while it runs.
 * kspec_send sends op OP with FIELDS (as kspec_call) without waiting;
 * *id is its request id.  kspec_recv reads the next reply frame of any
 * request sent so, in the daemon's order: *id is its id (UINT64_MAX when
 * the reply had none) and *json_out its header's JSON text (free with
 * kspec_free).  It returns 0 for an "ok":true frame, the daemon's error
 * for ok:false (kspec_last_error has it; *json_out is NULL), or
 * KSPEC_E_TIMEOUT when no frame began within TIMEOUT_MS (-1: no limit)
 * or a signal interrupted the wait: nothing was read then, and the
 * connection stays usable.  Other calls must wait until every reply sent
 * for has been read.
 */
int kspec_send(kspec_client_t *client, const char *op, const char *fields,
    uint64_t *id);
int kspec_recv(kspec_client_t *client, int timeout_ms, uint64_t *id,
    char **json_out);

/* explain for a get spec (meta_only is ignored): the reply header's JSON
 * text in *json_out (free with kspec_free).  Compiles nothing. */
int kspec_explain(kspec_client_t *client, const kspec_get_spec_t *spec,
    char **json_out);

/*
 * Running cpu artifacts.  The entry has the CPU ABI of docs/backends.md:
 * params[i] points to the i-th argument of the reply's "params" (for a
 * buffer, to its data pointer); it runs work-groups [group_begin,
 * group_end) of launch.groups, so a host may split them across threads.
 * kspec_cpu_load loads A's bytes from memory (memfd + dlopen, no
 * temporary file) and keeps what kspec_cpu_call needs of A's reply
 * (params, launch.groups, guard); the kernel stays loaded until
 * kspec_cpu_unload, and A may be freed before that.  FN, when not NULL,
 * gets the entry itself: calling it checks nothing, kspec_cpu_call checks
 * every buffer first.  Errors: KSPEC_E_INVAL (not a cpu artifact with
 * bytes), KSPEC_E_IO (dlopen failed), KSPEC_E_NOT_FOUND (no entry),
 * KSPEC_E_PROTO (the reply's params, launch or guard are malformed); a
 * message in err.  Thread-safe.
 */
typedef struct kspec_cpu_kernel kspec_cpu_kernel_t;
typedef void (*kspec_cpu_entry_t)(void **params, uint64_t group_begin,
    uint64_t group_end);
int kspec_cpu_load(const kspec_artifact_t *a, kspec_cpu_kernel_t **out,
    kspec_cpu_entry_t *fn, char *err, size_t errlen);
void kspec_cpu_unload(kspec_cpu_kernel_t *k);

/*
 * Runs groups [0, GROUPS) of FN with PARAMS on NTHREADS threads: the
 * calling thread and NTHREADS - 1 workers of the library's pool (0: the
 * default size, kspec_cpu_threads(); at most KSPEC_MAX_THREADS, and never
 * more threads than groups).  The groups are split into NTHREADS
 * contiguous ranges, one entry call each; since every library kernel's
 * groups write disjoint outputs, each in a fixed order, the result is
 * bitwise that of FN(PARAMS, 0, GROUPS) on one thread.  Returns when every
 * group has run; KSPEC_E_INVAL for a NULL FN or NTHREADS out of range.
 *
 * The pool is persistent: its workers start on the first launch that needs
 * them and wait for the next.  Launches from several threads at once share
 * it; each caller also runs its own launch's ranges, so a launch never
 * waits for workers busy elsewhere.  Safe across fork: in the child the
 * pool is empty and the child's first launch starts new workers.
 */
#define KSPEC_MAX_THREADS 64
int kspec_cpu_launch(kspec_cpu_entry_t fn, void **params, uint64_t groups,
    int nthreads);

/* The pool's default size: env KSPEC_THREADS (read once, when it is an
 * integer in [1, KSPEC_MAX_THREADS]), else the number of CPUs this process
 * may run on (sched_getaffinity), at most KSPEC_MAX_THREADS. */
int kspec_cpu_threads(void);

/*
 * One argument of kspec_cpu_call, in the order of the reply's params.  A
 * buffer gives its data and its size in bytes, and optionally the dtype
 * it holds ("f32", "bf16", "i32"; NULL: not checked); an i64 scalar (a
 * dynamic dim) gives i64; an f32 scalar (eps, scale) gives f32.  Build
 * them with kspec_arg_buf, kspec_arg_typed, kspec_arg_i64, kspec_arg_f32.
 */
typedef struct {
	void *data;
	size_t bytes;
	const char *dtype;
	int64_t i64;
	float f32;
} kspec_arg_t;

static inline kspec_arg_t kspec_arg_buf(void *data, size_t bytes)
{
	kspec_arg_t a = { data, bytes, NULL, 0, 0.0f };
	return a;
}

static inline kspec_arg_t kspec_arg_typed(void *data, size_t bytes,
    const char *dtype)
{
	kspec_arg_t a = { data, bytes, dtype, 0, 0.0f };
	return a;
}

static inline kspec_arg_t kspec_arg_i64(int64_t v)
{
	kspec_arg_t a = { NULL, 0, NULL, v, 0.0f };
	return a;
}

static inline kspec_arg_t kspec_arg_f32(float v)
{
	kspec_arg_t a = { NULL, 0, NULL, 0, v };
	return a;
}

/*
 * The checked call of a kernel loaded by kspec_cpu_load: NARGS arguments
 * ARGS, one per entry of the reply's params.  Before anything runs it
 * binds the dims (the guard's constants, and each i64 scalar argument to
 * its param's name: a dynamic dim must be >= 0), evaluates every buffer's
 * params[].dims and launch.groups with them, and checks each buffer: its
 * bytes at least the product of its dims times its dtype's size, its data
 * not NULL, its dtype (when given) the param's.  Then it runs groups
 * [0, groups) with kspec_cpu_launch on NTHREADS threads (0: the default).
 * KSPEC_E_INVAL, with a message in ERR naming the argument (for a buffer:
 * its needed and given bytes), when a check fails: nothing ran then.  A
 * buffer without dims in the reply is refused, never passed unchecked.
 * Several threads may call it on one kernel at once.
 */
int kspec_cpu_call(const kspec_cpu_kernel_t *k, const kspec_arg_t *args,
    size_t nargs, int nthreads, char *err, size_t errlen);

/* Frees a string returned by kspec_hello, kspec_stats, kspec_call,
 * kspec_recv or kspec_explain. */
void kspec_free(void *p);

/*
 * Quantized weights: GGUF's block formats "q8_0", "q4_0" and "q4_k", byte
 * for byte (docs/kernels.md, "Quantized weight formats", defines every
 * byte and the value of every code).  A matrix of ROWS rows of K weights
 * is quantized along K: each row is K / block blocks, and rows follow each
 * other unpadded, as in a GGUF tensor.  These work without a daemon, need
 * no connection, and are safe from any thread.
 *
 * Errors (a message in ERR, when ERR is not NULL, for those that take
 * one): KSPEC_E_BAD_DTYPE for a FORMAT that is not one of the three (other
 * GGUF types are refused by name); KSPEC_E_BAD_SHAPE when K is not a
 * multiple of the format's block (the message names the block: 32 for
 * q8_0 and q4_0, 256 for q4_k); KSPEC_E_TOO_LARGE when a size overflows;
 * KSPEC_E_INVAL for a buffer too small, a NULL buffer, and the rows
 * kspec_quantize refuses (below).
 */

/* Elements per block along K (32, 32, 256) and bytes per block (34, 18,
 * 144) of FORMAT; either pointer may be NULL. */
int kspec_quant_block(const char *format, size_t *block_elems,
    size_t *block_bytes);

/* *BYTES = the size of ROWS rows of K weights in FORMAT:
 * ROWS * (K / block) * block bytes (0 on error). */
int kspec_quant_size(const char *format, size_t rows, size_t k,
    size_t *bytes, char *err, size_t errlen);

/*
 * Quantizes ROWS x K f32 weights SRC (row-major) into DST, which has
 * DSTLEN bytes, at least kspec_quant_size's.  The bytes are those of
 * llama.cpp's reference quantizer (quantize_row_q8_0_ref,
 * quantize_row_q4_0_ref, quantize_row_q4_K_ref) on every row it accepts.
 * It refuses with KSPEC_E_INVAL, naming the row and block, a row that has
 * a NaN or an infinite weight, or a block whose scale's f16 would be
 * infinite (q8_0: a weight of magnitude 8.3e6 or more), whose scale is too
 * small to invert (every weight below 4e-37 in magnitude, not all 0), or
 * (q4_k) whose fit overflows f32: where the reference's output is
 * undefined or not finite.  On an error the rows before the refused one
 * are written and the rest of DST is unspecified.  A matrix of 2^18
 * weights or more is split by rows over the pool of kspec_cpu_launch
 * (kspec_cpu_threads() threads): the bytes and the error do not depend on
 * the split.
 */
int kspec_quantize(const char *format, const float *src, size_t rows,
    size_t k, void *dst, size_t dstlen, char *err, size_t errlen);

/*
 * Decodes ROWS x K weights in FORMAT from SRC (SRCLEN bytes, at least
 * kspec_quant_size's) into the f32 array DST (ROWS * K elements): each
 * weight exactly its documented value, bitwise llama.cpp's
 * dequantize_row_* on the same bytes.  Any bytes decode (a non-finite f16
 * scale gives IEEE infinities and NaNs).
 */
int kspec_dequantize(const char *format, const void *src, size_t srclen,
    size_t rows, size_t k, float *dst, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
