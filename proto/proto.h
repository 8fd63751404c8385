/*
 * proto: the v1 wire format (docs/protocol.md), shared by the daemon and
 * the clients.  Depends only on base.
 *
 * Frame: u32 header_len (big-endian), u32 payload_len (big-endian), header
 * (UTF-8 JSON object), payload (raw bytes).  Requests have 1 <= header_len
 * <= KS_MAX_HEADER and payload_len == 0.
 */
#ifndef KS_PROTO_H
#define KS_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

#define KS_PROTO_VERSION 1
#define KS_FRAME_PREFIX 8

/* Largest reply header a client accepts (stats and hello replies are the
 * big ones); the daemon must stay under it. */
#define KS_MAX_REPLY_HEADER (16u << 20)

/* The socket of a kspecd run as a system service (its unit passes it). */
#define KS_PROTO_SYSTEM_SOCKET "/run/kspec/kspecd.sock"

/* Who asks for the default socket: a client, or the daemon itself. */
typedef enum { KS_SOCKET_CLIENT, KS_SOCKET_DAEMON } ks_socket_role_t;

/*
 * The socket path used when none is given, the one place that decides it
 * (docs/cli.md, "Socket"; the Python client's default_socket_path follows
 * the same order, and a test holds the two together):
 *   1. env KSPEC_SOCKET when set and non-empty;
 *   2. else $XDG_RUNTIME_DIR/kspec/kspecd.sock when that is set and
 *      non-empty;
 *   3. else, for the daemon only, KS_PROTO_SYSTEM_SOCKET when it runs as a
 *      system service (INVOCATION_ID set: systemd names every unit it
 *      starts, and gives user services an XDG_RUNTIME_DIR);
 *   4. else /tmp/kspec-$UID/kspecd.sock;
 *   5. for a client, when the path of 2 or 4 does not exist and
 *      KS_PROTO_SYSTEM_SOCKET is a socket, that one (the machine's daemon,
 *      where the user runs none of their own).
 * Writes it NUL-terminated into OUT; KS_E_TOO_LARGE when it does not fit.
 */
int ks_proto_default_socket(ks_socket_role_t role, char *out, size_t outlen);

/* Writes the 8-byte frame prefix. */
void ks_frame_prefix(uint8_t out[KS_FRAME_PREFIX], uint32_t header_len,
    uint32_t payload_len);

/*
 * Decodes the prefix of a frame from BUF[0..len).  Returns KS_OK and the two
 * lengths when at least 8 bytes are there, 1 when more bytes are needed,
 * KS_E_BAD_FRAME / KS_E_TOO_LARGE when the lengths break the limits given
 * (max_header; max_payload, 0 for requests).
 */
int ks_frame_peek(const uint8_t *buf, size_t len, uint32_t max_header,
    uint32_t max_payload, uint32_t *header_len, uint32_t *payload_len);

typedef enum {
	KS_OP_PING,
	KS_OP_HELLO,
	KS_OP_GET,
	KS_OP_STATS,
	KS_OP_KERNELS,
	KS_OP_LIST,
	KS_OP_EVICT,
	KS_OP_EXPLAIN,
	KS_OP_WARM,
	KS_OP_MISSES,
	KS_OP_CANCEL,
	KS_OP_IMPORT,
	KS_OP_READY,
	KS_OP_DEPLOY,
	KS_OP_UNDEPLOY,
	KS_OP_DEPLOYMENTS,
	KS_OP_AUDIT,
	KS_OP_CANARY,
	KS_OP_COUNT_
} ks_op_t;

const char *ks_op_name(ks_op_t op);

/* A shape entry of a get request, as given. */
typedef struct {
	char name[KS_MAX_NAME + 1];
	int64_t value;
} ks_wire_dim_t;

/* A get request, syntactically valid; semantic checks (kernel exists,
 * shape complete, dims in range) are the daemon's. */
typedef struct {
	char kernel[KS_MAX_NAME + 1];
	char backend[KS_MAX_NAME + 1];
	char target[KS_MAX_NAME + 1];   /* "auto" when absent */
	char format[KS_MAX_NAME + 1];   /* "" when absent: backend default */
	char dtype[KS_MAX_NAME + 1];
	char wdtype[KS_MAX_NAME + 1];   /* the weights' dtype; "" when
	                                   absent: the same as dtype */
	char mode[KS_MAX_NAME + 1];     /* "exact" when absent */
	ks_wire_dim_t shape[KS_MAX_DIMS];
	int nshape;
	char dynamic[KS_MAX_DIMS][KS_MAX_NAME + 1];
	int ndynamic;
	int meta_only;                  /* "return":"meta" */
	/* get only: the deployment the client declared (a name), or "";
	 * not part of the key: it marks a compile late (docs/operations.md) */
	char deployment[KS_MAX_NAME + 1];
} ks_get_req_t;

/* Which entries a list, evict or audit addresses.  Empty strings match
 * all. */
typedef struct {
	char kernel[KS_MAX_NAME + 1];
	char backend[KS_MAX_NAME + 1];
	char target[KS_MAX_NAME + 1];
	char key[2 * KS_HASH_BYTES + 1]; /* evict: a key or a prefix of
	                                    one (hex), or "" */
	int all;                        /* evict, audit: "all":true */
	int stale;                      /* evict: "stale":true */
	int dry_run;                    /* evict with stale: list only */
	int report;                     /* audit: "report":true */
	int status;                     /* canary: "status":true, report
	                                   without running */
	uint64_t offset;                /* list: paging */
	uint64_t limit;                 /* list: default 100 */
} ks_filter_req_t;

#define KS_MAX_WARM_ITEMS 256
/* The shortest key prefix evict takes (hex digits). */
#define KS_MIN_KEY_PREFIX 8
#define KS_LIST_DEFAULT_LIMIT 100
#define KS_LIST_MAX_LIMIT 1000

/* A warm item the parser refused: that item's error, not the request's. */
typedef struct {
	int code;                       /* KS_OK when the item parsed */
	char msg[256];
} ks_item_err_t;

typedef struct {
	ks_op_t op;
	int has_id;
	uint64_t id;
	ks_get_req_t get;               /* KS_OP_GET, KS_OP_EXPLAIN */
	ks_filter_req_t filter;         /* KS_OP_LIST, _EVICT, _AUDIT,
	                                   _CANARY (kernel, backend) */
	ks_get_req_t *items;            /* KS_OP_WARM, KS_OP_READY: malloc'd */
	int nitems;
	ks_item_err_t *item_errs;       /* KS_OP_WARM: per item, malloc'd;
	                                   NULL when every item parsed */
	int progress;                   /* KS_OP_WARM: "progress":true */
	uint64_t request;               /* KS_OP_CANCEL: the warm's id */
	char *path;                     /* KS_OP_IMPORT: absolute, malloc'd */
	char name[KS_MAX_NAME + 1];     /* a deployment: KS_OP_DEPLOY,
	                                   _UNDEPLOY, _DEPLOYMENTS (or ""),
	                                   KS_OP_READY (or "": items),
	                                   KS_OP_MISSES (or "": all misses) */
} ks_request_t;

/* The longest path an import names. */
#define KS_MAX_PATH 4095

/* Frees what ks_request_parse allocated (warm items); safe on a request
 * that failed to parse or was zeroed. */
void ks_request_close(ks_request_t *r);

/*
 * Parses one request header (exactly LEN bytes, not NUL-terminated).
 * Parses a NUL-terminated copy with cJSON, rejects: non-objects, nesting
 * deeper than KS_MAX_JSON_DEPTH, duplicate keys (KS_E_DUPLICATE_KEY),
 * unknown fields (KS_E_UNKNOWN_FIELD), unknown ops (KS_E_UNKNOWN_OP), wrong
 * types, strings longer than KS_MAX_NAME, non-integral or out-of-range
 * shape values (KS_E_BAD_SHAPE), more than KS_MAX_DIMS shape entries
 * (KS_E_TOO_LARGE).  On failure err holds a one-line message and, when the
 * id could be read, out->has_id/out->id are set so the error reply can echo
 * it, and out->op is the op when it was read (else KS_OP_COUNT_).
 * Required get fields: kernel, backend, dtype, shape.
 */
int ks_request_parse(const char *header, size_t len, ks_request_t *out,
    char *err, size_t errlen);

/* Appends an error reply header: {"id":N,"ok":false,"error":{"code":
 * "E_...","message":"..."}} (id omitted when has_id is 0). */
int ks_reply_error(ks_buf_t *out, int has_id, uint64_t id, int code,
    const char *message);

#endif
