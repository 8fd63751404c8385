/*
 * kspec, the command-line client (docs/cli.md): what its files share.
 * The program uses only the public library (include/kspec.h), cJSON to
 * read replies, and proto/entry.h for fleet keys and bundles; none of it
 * is in libkspec.
 *
 * A command is a row of commands[] (main.c) and a function of the file
 * of its group; main() finds the row by name and calls the function
 * with argv[0] the command's name.  The function reads its command line
 * with cli_parse() and an option table of its own, then does its work.
 *
 * Contract for scripts: every failure prints exactly one line on stderr,
 * "kspec: ...", and exits with
 *   0  success
 *   1  the daemon refused the request, or a local file could not be written
 *   2  usage error (nothing was sent)
 *   3  no connection to the daemon, or it was lost
 *   130  warm interrupted by Ctrl-C (after its summary)
 */
#ifndef KS_CLI_H
#define KS_CLI_H

#include <stddef.h>
#include <stdint.h>

#include <cJSON.h>

#include "../../include/kspec.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_CONNECT = 3 };

/* Shape entries and dynamic names the CLI accepts; the daemon's own limit
 * is lower and reported by the daemon. */
#define CLI_MAX_DIMS 64

/* ---- the command table (main.c) ---- */

typedef struct cli_cmd cli_cmd_t;

/* Runs CMD on its command line (ARGV[0] is its name); SOCKET is the
 * --socket path, NULL for the default, and always NULL for a command
 * without CLI_DAEMON.  Returns the exit status. */
typedef int cli_run_t(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv);

/* The command talks to kspecd. */
#define CLI_DAEMON 1u

struct cli_cmd {
	const char *name;
	cli_run_t *run;
	const char *usage;      /* kspec help NAME, kspec NAME --help */
	const char *synopsis;   /* its line in kspec --help: the left column */
	const char *summary;    /* and what it does */
	unsigned flags;         /* CLI_DAEMON */
};

/* ---- the option parser (parse.c) ---- */

/* What a row of an option table is: an option that takes no value or
 * one, an operand, or the end of the table. */
typedef enum { CLI_END, CLI_FLAG, CLI_VALUE, CLI_OPERAND } cli_kind_t;

typedef struct cli_opt cli_opt_t;

/* Takes option O (VALUE: its value, in ARGV and free to change in place;
 * NULL for a flag) into the command's ARGS.  Returns 0, or the exit
 * status after printing why (usage_error). */
typedef int cli_take_t(const cli_cmd_t *cmd, void *args, const cli_opt_t *o,
    char *value);

/*
 * A row of a command's option table: --NAME and -LETTER (either may be
 * absent), whether it takes a value, and where it goes: the field at AT
 * of the command's arguments (a flag counts its uses in an int, a value
 * sets a const char *, the last one given wins), or TAKE, called in the
 * order of the command line.  An operand row takes the next operand into
 * the const char * at AT; one more operand than the table has rows for
 * is a usage error.
 */
struct cli_opt {
	cli_kind_t kind;
	const char *name;
	char letter;
	size_t at;
	cli_take_t *take;
};

/* offsetof FIELD of TYPE, which must be of type CTYPE. */
#define CLI_AT(type, field, ctype) \
	_Generic(((type *)0)->field, ctype: offsetof(type, field))

#define CLI_OPT_FLAG(n, l, type, field) { .kind = CLI_FLAG, .name = (n), \
	.letter = (l), .at = CLI_AT(type, field, int) }
#define CLI_OPT_STRING(n, l, type, field) { .kind = CLI_VALUE, .name = (n), \
	.letter = (l), .at = CLI_AT(type, field, const char *) }
#define CLI_OPT_CALL(k, n, l, fn) { .kind = (k), .name = (n), .letter = (l), \
	.take = (fn) }
#define CLI_OPT_OPERAND(type, field) { .kind = CLI_OPERAND, \
	.at = CLI_AT(type, field, const char *) }
#define CLI_OPT_END { .kind = CLI_END }

/* The parse goes on: no help was asked for and no error found. */
#define CLI_GO_ON (-1)

/*
 * Reads ARGV[1..ARGC) by OPTS into ARGS, in order, as getopt_long does
 * (options and operands mixed, --NAME=VALUE, unambiguous prefixes of
 * --NAME, "--" ends the options and what follows it is not read); -h and
 * --help print CMD's usage.  Returns CLI_GO_ON, or the exit status:
 * EXIT_OK after the usage, EXIT_USAGE after a usage error's line.
 */
int cli_parse(const cli_cmd_t *cmd, int argc, char **argv,
    const cli_opt_t *opts, void *args);

/* Prints one usage-error line about command CMD (NULL: kspec itself) and
 * returns EXIT_USAGE. */
__attribute__((format(printf, 2, 3)))
int usage_error(const char *cmd, const char *fmt, ...);

/* ---- calls to the daemon (call.c) ---- */

/* Reports a failed library call on C and returns the exit status. */
int fail(kspec_client_t *c, int rc);
/* The same, the line naming WHAT after "kspec: " ("kspec: specs[2]:
 * E_...: ..."). */
int fail_in(kspec_client_t *c, int rc, const char *what);

/* Connects to SOCKET into *C; reports a failure (and sets *C to NULL)
 * and returns EXIT_CONNECT, or returns EXIT_OK. */
int open_client(const char *socket, kspec_client_t **c);

/* After a call that returned RC and TEXT on C: closes C, then prints the
 * reply verbatim (AS_JSON) or hands it, parsed, to PRINT.  Takes TEXT.
 * Returns an exit status. */
int show_reply(kspec_client_t *c, int rc, char *text, int as_json,
    int (*print)(const cJSON *reply));

/* Runs OP with FIELDS on a connection of its own and shows the reply
 * (show_reply). */
int run_op(const char *socket, const char *op, const char *fields,
    int as_json, int (*print)(const cJSON *reply));

/* One call of OP with FIELDS on a connection of its own: the reply
 * parsed into *REPLY (cJSON_Delete it), or an exit status with the error
 * reported. */
int call_parsed(const char *socket, const char *op, const char *fields,
    cJSON **reply);

/* Appends ,"NAME":VALUE-as-JSON-string to the fields in B (size CAP). */
int add_field(char *b, size_t cap, const char *name, const char *v);

/* Member NAME of O: its number (0 when it is not one), its string (""). */
double jnum(const cJSON *o, const char *name);
const char *jstr(const cJSON *o, const char *name);

/* Seconds on the monotonic clock. */
double mono_s(void);

/* ---- files (files.c) ---- */

/*
 * Writes DATA (and a newline when NEWLINE) to PATH through PATH.tmp and a
 * rename, so PATH is either the old file or the whole new one; straight
 * into PATH when it is a device or a pipe.  Prints the failure and
 * returns -1.
 */
int write_file(const char *path, const void *data, size_t len,
    int newline);

/* Reads FILE whole (at most 64 MiB) into a string the caller frees; NULL
 * on failure, with errno set where the system set it. */
char *slurp(const char *path);

/* ---- manifests (manifest.c) ---- */

/*
 * Expands manifest M into a flat array of get-specs (cJSON objects) in
 * OUT: each spec without a "target" is repeated for every target the
 * manifest lists for its backend.  ORIGIN gets one number per spec of
 * OUT: the index in "specs" it came from.  -1 with WHY on a bad manifest.
 */
int expand_manifest(const cJSON *m, cJSON *out, cJSON *origin, char *why,
    size_t whylen);

/* A warm or ready request carries at most WARM_BATCH specs (the daemon's
 * limit) and about WARM_BATCH_BYTES of header (its limit is 64 KiB). */
#define WARM_BATCH 256
#define WARM_BATCH_BYTES 60000

/* The "items" member of the specs SPEC[IDX[0..N)] that fit one request
 * (at most WARM_BATCH, about WARM_BATCH_BYTES; one at least): malloc'd,
 * *TAKEN of them.  NULL when out of memory. */
char *items_batch(const cJSON *const *spec, const int *idx, int n,
    int *taken);

/* A get-spec object of a manifest as a kspec_get_spec_t; the strings and
 * arrays borrow from O, DIMS and DYN.  0, or -1 when O is not one. */
int spec_of_json(const cJSON *o, kspec_get_spec_t *s, kspec_dim_t *dims,
    const char **dyn);

/* ---- the commands, by group ---- */

/* status.c */
cli_run_t cmd_ping, cmd_stats, cmd_hello, cmd_kernels;
extern const char usage_ping[], usage_stats[], usage_hello[],
    usage_kernels[];
/* get.c */
cli_run_t cmd_get, cmd_explain;
extern const char usage_get[], usage_explain[];
/* warm.c */
cli_run_t cmd_warm;
extern const char usage_warm[];
/* manifest.c */
cli_run_t cmd_manifest;
extern const char usage_manifest[];
/* deploy.c */
cli_run_t cmd_ready, cmd_deploy;
extern const char usage_ready[], usage_deploy[];
/* store.c */
cli_run_t cmd_ls, cmd_evict;
extern const char usage_ls[], usage_evict[];
/* check.c */
cli_run_t cmd_audit, cmd_canary;
extern const char usage_audit[], usage_canary[];
/* fleet.c */
cli_run_t cmd_fleet_key, cmd_bundle;
extern const char usage_fleet_key[], usage_bundle[];
/* quantize.c */
cli_run_t cmd_quantize;
extern const char usage_quantize[];

#endif
