/*
 * Every size a client controls has a named limit here, checked before any
 * allocation with overflow-checked arithmetic (see ks_mul_overflow).
 */
#ifndef KS_LIMITS_H
#define KS_LIMITS_H

/* Wire protocol. */
#define KS_MAX_HEADER          65536u      /* request header bytes */
#define KS_MAX_REPLY_PAYLOAD   (1u << 30)  /* artifact bytes in a reply */
#define KS_MAX_JSON_DEPTH      4           /* request nesting */
#define KS_MAX_CONNECTIONS     1024
#define KS_MAX_INFLIGHT_PER_CONN 256       /* pipelined requests */
#define KS_MAX_WRITE_QUEUE     (64u << 20) /* unsent reply bytes per conn */

/* Fairness between clients and users on the daemon's loop. */
#define KS_MAX_CONNS_PER_USER  256         /* default --max-conns-per-user:
                                              a quarter of all, so one uid
                                              never takes every slot */
#define KS_MAX_INFLIGHT_PER_USER 2048      /* one uid's requests waiting on
                                              compiles, all connections */
#define KS_MAX_REQUESTS_PER_TURN 16        /* frames handled on one
                                              connection before the others
                                              get a turn */
#define KS_MAX_BATCH_BYTES     (128u << 10) /* reply bytes a turn gathers
                                              before it writes them: past
                                              this, replies from disk reach
                                              the client while the next
                                              are read */
#define KS_MAX_READ_BACKLOG    (1u << 20)  /* received, unhandled bytes per
                                              connection; reading pauses */
#define KS_MAX_WRITE_QUEUE_TOTAL (128u << 20) /* unsent reply bytes of all
                                              connections; reading pauses on
                                              those holding most */
#define KS_IDLE_TIMEOUT_S      300         /* default --idle-timeout */
#define KS_READ_TIMEOUT_S      10          /* default --read-timeout: a
                                              started frame must be complete
                                              by then */

/* Requests. */
#define KS_MAX_NAME            64          /* kernel, backend, target names */
#define KS_MAX_DIMS            16          /* shape parameters of a kernel */
#define KS_MAX_DIM             (1LL << 31) /* one dimension */
#define KS_MAX_ELEMS           (1LL << 40) /* elements of one buffer */

/* Compiles. */
#define KS_MAX_FLIGHTS         4096        /* distinct compiles queued */
#define KS_MAX_FLIGHTS_PER_USER (KS_MAX_FLIGHTS / 2) /* of them, started by
                                              one uid */
#define KS_FD_RESERVE          64          /* fds kept for the store,
                                              the workers' channels */

/* Kernels read from text (the IR's text form, specialize/parse.c,
 * docs/ir.md "Limits").  Each is checked before what it counts is
 * allocated; the library's largest kernel is far within all of them. */
#define KS_IR_MAX_TEXT         (1u << 20)  /* bytes of a kernel's text */
#define KS_IR_MAX_DEPTH        128         /* blocks and expressions open
                                              at once (the recursion of
                                              every walk of the IR) */
#define KS_IR_MAX_STMTS        65536       /* statements, blocks included */
#define KS_IR_MAX_EXPRS        (1 << 18)   /* expression nodes */
#define KS_IR_MAX_PARAMS       32          /* parameters (a loader's) */
#define KS_IR_MAX_VARS         4096        /* variables */
#define KS_IR_MAX_LOCALS       16          /* local arrays */
#define KS_IR_MAX_LOCAL_ELEMS  12288       /* f32 elements of all local
                                              arrays together: 48 KiB, a
                                              CUDA block's static shared
                                              memory */
#define KS_IR_MAX_NAME         64          /* bytes of a name: kernel,
                                              variant, parameter,
                                              variable, local array */
#define KS_IR_MAX_DIMS_TEXT    256         /* bytes of a buffer's dims */
#define KS_IR_MAX_BUF_DIMS     8           /* dims of a buffer (a
                                              loader's) */
#define KS_IR_MAX_DIMS_DEPTH   16          /* parentheses open at once in
                                              a buffer's dims */

/* Bundle imports: an import holds at most two batches, one being read
 * and one being stored, whatever the size of the bundle. */
#define KS_IMPORT_BATCH_ENTRIES 64         /* entries of a batch */
#define KS_IMPORT_BATCH_BYTES  (1u << 20)  /* entry bytes of a batch, unless
                                              one entry alone is larger */
#define KS_IMPORT_LISTED       1000        /* refusals a reply lists */

#endif
