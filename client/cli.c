/*
 * kspec: the command-line client (docs/cli.md).  Uses only the public
 * library (include/kspec.h), plus cJSON to print stats as a table.
 *
 * Contract for scripts: every failure prints exactly one line on stderr,
 * "kspec: ...", and exits with
 *   0  success
 *   1  the daemon refused the request, or a local file could not be written
 *   2  usage error (nothing was sent)
 *   3  no connection to the daemon, or it was lost
 *   130  warm interrupted by Ctrl-C (after its summary)
 */
#define _POSIX_C_SOURCE 200809L
#include "../include/kspec.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>
#include <limits.h>
#include <sodium.h>

#include "../proto/entry.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_CONNECT = 3 };

/* Shape entries and dynamic names the CLI accepts; the daemon's own limit
 * is lower and reported by the daemon. */
#define CLI_MAX_DIMS 64

static const char usage_main[] =
"usage: kspec [--socket PATH] <command> [options]\n"
"\n"
"commands:\n"
"  ping             check that kspecd answers\n"
"  get KERNEL ...   fetch a compiled kernel artifact (see kspec get --help)\n"
"  stats [--json]   the daemon's counters\n"
"  kernels [--json] the kernel library: parameters, variants, guards\n"
"  explain KERNEL . which variant and key a get would use, cached or not\n"
"  warm MANIFEST    compile every spec of a manifest (docs/cli.md)\n"
"  ready MANIFEST|DEPLOYMENT  whether every spec is cached (--wait)\n"
"  deploy add|ls|rm deployments: named manifests whose kernels are pinned\n"
"  ls [--json]      the stored artifacts (filters, paging)\n"
"  evict ...        remove stored artifacts by key, filter, all or stale\n"
"  audit ...        recompile stored artifacts and compare their bytes\n"
"  manifest --from-misses  the daemon's recorded misses as a warm manifest\n"
"  canary ...       run the known-answer canaries now, or show their state\n"
"  hello            the daemon's version and backends, as JSON\n"
"  bundle ...       export cached artifacts as a signed file, or import one\n"
"  fleet-key generate PREFIX  a key pair to sign bundles with\n"
"  quantize FORMAT  f32 weights to q8_0, q4_0 or q4_k blocks (no daemon)\n"
"  help [COMMAND]   this text, or a command's\n"
"\n"
"options:\n"
"  --socket PATH    daemon socket (default: $KSPEC_SOCKET, else\n"
"                   $XDG_RUNTIME_DIR/kspec/kspecd.sock, else\n"
"                   /tmp/kspec-$UID/kspecd.sock)\n"
"  -h, --help       this text\n"
"  --version        kspec's version\n"
"\n"
"exit status: 0 ok, 1 daemon or request error, 2 usage error,\n"
"3 connection error, 130 warm interrupted\n";

static const char usage_ping[] =
"usage: kspec [--socket PATH] ping [--wait SECONDS] [--json]\n"
"\n"
"Sends a ping and prints the round-trip time.  With --wait, a daemon\n"
"that is not there yet (no socket, or nobody listening) is tried again\n"
"every 50 ms until it answers or SECONDS have passed (exit 3 then):\n"
"for scripts that start kspecd and go on once it serves.\n";

static const char usage_get[] =
"usage: kspec [--socket PATH] get KERNEL --backend cpu|cuda|opencl\n"
"           [--target T] [--format F] [--mode exact|fast]\n"
"           --dtype f32|f16|bf16 [--wdtype f32|f16|bf16|q8_0|q4_0|q4_k]\n"
"           --shape M=1,N=4096,K=4096\n"
"           [--dynamic M,...] [--deployment NAME] -o FILE\n"
"           [--meta FILE.json] [--json]\n"
"\n"
"Fetches the artifact of KERNEL specialized for the shape, compiling it\n"
"if no cache holds it.  Writes the artifact to FILE (through FILE.tmp and\n"
"a rename) and the reply's metadata, as JSON, to --meta; one of the two\n"
"is needed, and with --meta alone only the metadata is fetched.  Prints\n"
"one summary line (with --json: the\n"
"reply's metadata as one line of JSON).\n"
"\n"
"  --backend B      cpu, cuda or opencl\n"
"  --target T       backend target (default: auto)\n"
"  --format F       artifact format (default: the backend's)\n"
"  --mode M         exact (default) or fast\n"
"  --dtype D        f32, f16 or bf16\n"
"  --wdtype D       the weights' dtype where the kernel takes one (gemm's\n"
"                   W, the norms' w: f16 or bf16 with --dtype f32; rope's\n"
"                   table: f32; gemm's W, embedding's table, gemm_pack_w's\n"
"                   in also q8_0, q4_0, q4_k with --dtype f32); default:\n"
"                   the dtype\n"
"  --shape LIST     NAME=INTEGER,... constants of the kernel (repeatable)\n"
"  --dynamic LIST   NAME,... parameters left dynamic (repeatable)\n"
"  --deployment N   the deployment this get is for (kspec deploy): a\n"
"                   compile after it was ready counts as late\n"
"  -o, --output F   where to write the artifact\n"
"  --meta F         where to write the reply metadata (JSON)\n";

static const char usage_stats[] =
"usage: kspec [--socket PATH] stats [--json]\n"
"\n"
"Prints the daemon's counters as a table, or with --json the daemon's\n"
"reply verbatim.\n";

static const char usage_hello[] =
"usage: kspec [--socket PATH] hello [--json]\n"
"\n"
"Prints the daemon's hello reply (protocol and server versions, backends)\n"
"as JSON (--json is accepted, and changes nothing).\n";

/* Prints one usage-error line and returns EXIT_USAGE. */
__attribute__((format(printf, 2, 3)))
static int usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fputs("kspec: ", stderr);
	if (cmd)
		fprintf(stderr, "%s: ", cmd);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see kspec %s%s--help)\n", cmd ? cmd : "",
	    cmd ? " " : "");
	return EXIT_USAGE;
}

/* An option getopt_long did not know: a short one is in OPT, a long one
 * is the argument just passed (ARG). */
static int bad_option(const char *cmd, int opt, const char *arg)
{
	if (opt)
		return usage_error(cmd, "unknown option '-%c'", opt);
	return usage_error(cmd, "unknown option '%s'", arg);
}

/* Prints S on stderr with line breaks and other controls as spaces, so a
 * message is always one line. */
static void put_line(const char *s)
{
	for (; *s; s++)
		fputc((unsigned char)*s < 0x20 ? ' ' : *s, stderr);
}

/* Reports a failed library call on C and returns the exit status. */
static int fail(kspec_client_t *c, int rc)
{
	const char *code = "", *msg = kspec_last_error(c, &code);

	fputs("kspec: ", stderr);
	if (rc == KSPEC_E_CONNECT) {
		put_line(msg);
		fputs("\n", stderr);
		return EXIT_CONNECT;
	}
	put_line(*code ? code : kspec_err_name(rc));
	fputs(": ", stderr);
	put_line(*msg ? msg : kspec_strerror(rc));
	fputs("\n", stderr);
	return EXIT_FAIL;
}

static int open_client(const char *socket_path, kspec_client_t **c)
{
	int rc = kspec_connect(socket_path, c);
	const char *code = "", *msg;

	if (!rc)
		return EXIT_OK;
	msg = kspec_last_error(*c, &code);
	fputs("kspec: ", stderr);
	if (rc == KSPEC_E_CONNECT) {
		put_line(msg);
		fputs(" \xe2\x80\x94 is kspecd running?\n", stderr);
	} else if (rc == KSPEC_E_DENIED) {
		fputs("E_DENIED: ", stderr);
		put_line(msg);
		fputs("\n", stderr);
	} else {
		fprintf(stderr, "%s: ", kspec_err_name(rc));
		put_line(msg);
		fputs("\n", stderr);
	}
	kspec_close(*c);
	*c = NULL;
	return EXIT_CONNECT;
}

/* ---- files ---- */

static int write_all(int fd, const void *p, size_t n)
{
	const char *q = p;
	ssize_t k;

	while (n) {
		k = write(fd, q, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -1;
		q += k;
		n -= (size_t)k;
	}
	return 0;
}

/*
 * Writes DATA to PATH.tmp, syncs it and renames it over PATH, so PATH is
 * either the old file or the whole new one, never a torn artifact.
 * Prints the failure and returns -1.
 */
/* Writes straight into an existing non-regular file (a terminal, a pipe,
 * /dev/null): a rename would replace the device itself. */
static int write_special(const char *path, const void *data, size_t len,
    int newline)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), err = 0;

	if (fd < 0 || write_all(fd, data, len) ||
	    (newline && write_all(fd, "\n", 1)))
		err = errno ? errno : EIO;
	if (fd >= 0 && close(fd) && !err)
		err = errno;
	if (err)
		fprintf(stderr, "kspec: cannot write %s: %s\n", path,
		    strerror(err));
	return err ? -1 : 0;
}

static int write_file(const char *path, const void *data, size_t len,
    int newline)
{
	size_t n = strlen(path);
	struct stat st;
	char *tmp;
	int fd, err = 0;

	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
		return write_special(path, data, len, newline);
	tmp = malloc(n + sizeof ".tmp");

	if (!tmp) {
		fprintf(stderr, "kspec: cannot write %s: %s\n", path,
		    strerror(ENOMEM));
		return -1;
	}
	memcpy(tmp, path, n);
	memcpy(tmp + n, ".tmp", sizeof ".tmp");
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "kspec: cannot write %s: %s\n", tmp,
		    strerror(errno));
		free(tmp);
		return -1;
	}
	if (write_all(fd, data, len) || (newline && write_all(fd, "\n", 1)) ||
	    fsync(fd))
		err = errno;
	if (close(fd) && !err)
		err = errno;
	if (!err && rename(tmp, path))
		err = errno;
	if (err) {
		unlink(tmp);
		fprintf(stderr, "kspec: cannot write %s: %s\n", path,
		    strerror(err));
	}
	free(tmp);
	return err ? -1 : 0;
}

/* ---- get ---- */

static const char usage_kernels[] =
"usage: kspec [--socket PATH] kernels [--json]\n"
"\n"
"Lists the kernel library: each kernel's shape parameters, dtypes and\n"
"variants with their guards.\n";

static const char usage_explain[] =
"usage: kspec [--socket PATH] explain KERNEL --backend B --dtype D\n"
"           [--wdtype D] --shape M=1,N=4096,K=4096 [--dynamic M,...]\n"
"           [--target T]\n"
"           [--format F] [--mode exact|fast] [--json]\n"
"\n"
"Shows, without compiling, the variant and guard a get would use, every\n"
"component of its key, whether it is cached, and for a miss the nearest\n"
"stored entry and the components that differ.\n";

static const char usage_warm[] =
"usage: kspec [--socket PATH] warm MANIFEST [--json]\n"
"\n"
"Compiles every spec of MANIFEST that is not cached yet, at lower priority\n"
"than live gets, reporting each spec as it completes: a progress bar on a\n"
"terminal, one line per spec otherwise; a bad spec is named by its index\n"
"in \"specs\" (specs[N], from 0) and the rest go on.  A summary always\n"
"comes last.  Ctrl-C cancels the specs still queued in the daemon (a\n"
"running compile finishes).  Exit status 0, 1 if any spec failed, 3 if\n"
"the connection was lost, 130 after Ctrl-C.\n"
"Manifest (JSON, docs/cli.md):\n"
"  {\"version\":1, \"targets\":{\"cpu\":[\"x86-64-v3\",\"x86-64-v4\"]},\n"
"   \"specs\":[{\"kernel\":\"gemm\",\"backend\":\"cpu\",\"dtype\":\"bf16\",\n"
"              \"shape\":{\"M\":1,\"N\":4096,\"K\":4096}}]}\n";

static const char usage_ls[] =
"usage: kspec [--socket PATH] ls [--kernel K] [--backend B] [--target T]\n"
"           [--offset N] [--limit N] [--json]\n"
"\n"
"Lists stored artifacts, ordered by key, one page at a time: key prefix,\n"
"kernel, backend, target, dtype, shape, variant, size, age (since it was\n"
"stored) and whether it is in memory too.\n";

static const char usage_evict[] =
"usage: kspec [--socket PATH] evict (--key KEY | --all | --stale [--dry-run] |\n"
"           [--kernel K] [--backend B] [--target T]) [--json]\n"
"\n"
"Removes stored artifacts from the store and the memory tier.  KEY is a\n"
"whole key or a prefix of one, 8 hex digits or more, that only one\n"
"artifact has (the 12 digits ls prints).  --stale removes the artifacts\n"
"no request can reach any more: of a kernel gone from the library, of an\n"
"older kernel definition, or of another compiler than the daemon's; those\n"
"of a backend unavailable now are kept.  --dry-run lists them, removing\n"
"nothing.\n";

static const char usage_audit[] =
"usage: kspec [--socket PATH] audit (--all | --kernel K | --report) [--json]\n"
"\n"
"The key audit (docs/operations.md): recompiles every stored artifact (of\n"
"kernel K) on the daemon's idle workers and compares the bytes and the\n"
"reply fields with the stored ones; answers when they are done.  A\n"
"mismatch means a compile depends on something its key does not name:\n"
"the entry is quarantined (no longer served; compiled again when asked\n"
"for) and the event is kept.  --report lists the events kept.  Exit\n"
"status 0, 1 if any entry differed.  For the daemon's uid, root and\n"
"--admin-group.\n";

static const char usage_manifest[] =
"usage: kspec [--socket PATH] manifest --from-misses [--deployment NAME]\n"
"           [-o FILE] [--json]\n"
"\n"
"Writes every distinct get that missed (compiled or joined a compile) on\n"
"this daemon as a warm manifest (docs/cli.md), oldest first, to FILE or\n"
"stdout, so what production asked for can be warmed on another machine\n"
"with `kspec warm FILE` (--json is accepted, and changes nothing).  With\n"
"--deployment, the late compiles of that deployment instead: the gets\n"
"that declared it and missed after it was ready, the specs its manifest\n"
"lacks.\n";

typedef struct {
	kspec_dim_t shape[CLI_MAX_DIMS];
	size_t nshape;
	const char *dynamic[CLI_MAX_DIMS];
	size_t ndynamic;
} dims_t;

/* Splits "M=1,N=4096" in place into DIMS.  Returns 0 or EXIT_USAGE. */
static int parse_shape(char *list, dims_t *d)
{
	char *item, *save = NULL, *eq, *end;
	long long v;

	if (!*list)
		return usage_error("get", "empty --shape");
	for (item = strtok_r(list, ",", &save); item;
	    item = strtok_r(NULL, ",", &save)) {
		eq = strchr(item, '=');
		if (!eq || eq == item)
			return usage_error("get", "--shape entry '%s' is not "
			    "NAME=INTEGER", item);
		*eq = '\0';
		errno = 0;
		v = strtoll(eq + 1, &end, 10);
		if (!eq[1] || *end || errno == ERANGE)
			return usage_error("get", "--shape value of '%s' is "
			    "not an integer: '%s'", item, eq + 1);
		if (d->nshape == CLI_MAX_DIMS)
			return usage_error("get", "more than %d --shape "
			    "entries", CLI_MAX_DIMS);
		d->shape[d->nshape].name = item;
		d->shape[d->nshape].value = (int64_t)v;
		d->nshape++;
	}
	return 0;
}

static int parse_dynamic(char *list, dims_t *d)
{
	char *item, *save = NULL;
	size_t n = strlen(list);

	if (!n || list[0] == ',' || list[n - 1] == ',' || strstr(list, ",,"))
		return usage_error("get", "--dynamic needs NAME,... with no "
		    "empty names");
	for (item = strtok_r(list, ",", &save); item;
	    item = strtok_r(NULL, ",", &save)) {
		if (d->ndynamic == CLI_MAX_DIMS)
			return usage_error("get", "more than %d --dynamic "
			    "names", CLI_MAX_DIMS);
		d->dynamic[d->ndynamic++] = item;
	}
	return 0;
}

/* What get and explain read from their command line. */
typedef struct {
	kspec_get_spec_t spec;
	dims_t d;
	const char *out;        /* get: -o FILE */
	const char *meta;       /* get: --meta FILE */
	const char *deployment; /* get: --deployment NAME */
	int json;               /* explain: --json */
} spec_args_t;

/*
 * Parses KERNEL and the get-spec options shared by get and explain, plus
 * -o/--meta (get) or --json (explain).  Returns -1 to go on, or the exit
 * status (help printed, usage error).
 */
static int parse_spec_args(const char *cmd, int argc, char **argv,
    spec_args_t *a)
{
	enum { O_BACKEND = 256, O_TARGET, O_FORMAT, O_MODE, O_DTYPE, O_SHAPE,
	    O_DYNAMIC, O_META, O_JSON, O_DEPLOYMENT, O_WDTYPE };
	static const struct option opts[] = {
		{ "backend", required_argument, NULL, O_BACKEND },
		{ "target", required_argument, NULL, O_TARGET },
		{ "format", required_argument, NULL, O_FORMAT },
		{ "mode", required_argument, NULL, O_MODE },
		{ "dtype", required_argument, NULL, O_DTYPE },
		{ "wdtype", required_argument, NULL, O_WDTYPE },
		{ "shape", required_argument, NULL, O_SHAPE },
		{ "dynamic", required_argument, NULL, O_DYNAMIC },
		{ "output", required_argument, NULL, 'o' },
		{ "meta", required_argument, NULL, O_META },
		{ "deployment", required_argument, NULL, O_DEPLOYMENT },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int is_get = strcmp(cmd, "get") == 0;
	int ch, rc;

	optind = 1;
	opterr = 0;
	/* "-" returns operands in order (as option 1), whatever
	 * POSIXLY_CORRECT says; ":" reports a missing argument as ':'. */
	while ((ch = getopt_long(argc, argv, "-:ho:", opts, NULL)) != -1) {
		rc = 0;
		if ((ch == 'o' || ch == O_META || ch == O_DEPLOYMENT) &&
		    !is_get)
			return bad_option(cmd, optopt, argv[optind - 1]);
		switch (ch) {
		case 1:
			if (a->spec.kernel)
				return usage_error(cmd, "unexpected "
				    "argument '%s'", optarg);
			a->spec.kernel = optarg;
			break;
		case 'h':
			fputs(is_get ? usage_get : usage_explain, stdout);
			return EXIT_OK;
		case 'o': a->out = optarg; break;
		case O_META: a->meta = optarg; break;
		case O_DEPLOYMENT: a->deployment = optarg; break;
		case O_JSON: a->json = 1; break;
		case O_BACKEND: a->spec.backend = optarg; break;
		case O_TARGET: a->spec.target = optarg; break;
		case O_FORMAT: a->spec.format = optarg; break;
		case O_MODE: a->spec.mode = optarg; break;
		case O_DTYPE: a->spec.dtype = optarg; break;
		case O_WDTYPE: a->spec.wdtype = optarg; break;
		case O_SHAPE: rc = parse_shape(optarg, &a->d); break;
		case O_DYNAMIC: rc = parse_dynamic(optarg, &a->d); break;
		case ':':
			return usage_error(cmd, "%s needs a value",
			    argv[optind - 1]);
		default:
			return bad_option(cmd, optopt, argv[optind - 1]);
		}
		if (rc)
			return rc;
	}
	if (!a->spec.kernel)
		return usage_error(cmd, "missing KERNEL");
	if (!a->spec.backend)
		return usage_error(cmd, "missing --backend");
	if (!a->spec.dtype)
		return usage_error(cmd, "missing --dtype");
	if (is_get && !a->out && !a->meta)
		return usage_error(cmd, "missing -o FILE (or --meta FILE)");
	a->spec.shape = a->d.shape;
	a->spec.nshape = a->d.nshape;
	a->spec.dynamic = a->d.dynamic;
	a->spec.ndynamic = a->d.ndynamic;
	a->spec.meta_only = !a->out;
	return -1;
}

static int cmd_get(const char *socket_path, int argc, char **argv)
{
	static spec_args_t args;
	kspec_get_spec_t spec;
	kspec_artifact_t *a = NULL;
	kspec_client_t *c = NULL;
	const char *out, *meta;
	int rc;

	rc = parse_spec_args("get", argc, argv, &args);
	if (rc >= 0)
		return rc;
	spec = args.spec;
	out = args.out;
	meta = args.meta;

	rc = open_client(socket_path, &c);
	if (rc)
		return rc;
	rc = args.deployment ? kspec_set_deployment(c, args.deployment) : 0;
	if (rc) {
		fprintf(stderr, "kspec get: --deployment: %s\n",
		    kspec_last_error(c, NULL));
		kspec_close(c);
		return EXIT_USAGE;
	}
	rc = kspec_get(c, &spec, &a);
	if (rc) {
		rc = fail(c, rc);
		kspec_close(c);
		return rc;
	}
	kspec_close(c);
	rc = EXIT_OK;
	if ((out && write_file(out, a->bytes, a->len, 0)) ||
	    (meta && write_file(meta, a->meta, a->meta_len, 1)))
		rc = EXIT_FAIL;
	if (!rc && args.json)
		printf("%.*s\n", (int)a->meta_len, a->meta);
	else if (!rc)
		printf("%s: variant %s, source %s, %" PRIu64 " bytes%s, "
		    "key %.12s -> %s\n", a->kernel[0] ? a->kernel : spec.kernel,
		    a->variant, a->source, out ? (uint64_t)a->len : a->size,
		    out ? "" : " (metadata only)", a->key, out ? out : meta);
	kspec_artifact_free(a);
	return rc;
}

/* ---- stats ---- */

static double jnum(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static void print_scalar(const char *name, const cJSON *v)
{
	double d;

	printf("%-40s ", name);
	if (cJSON_IsString(v)) {
		printf("%s\n", v->valuestring);
	} else if (cJSON_IsNumber(v)) {
		d = v->valuedouble;
		if (d == (double)(int64_t)d && d > -1e15 && d < 1e15)
			printf("%" PRId64 "\n", (int64_t)d);
		else
			printf("%.6g\n", d);
	} else if (cJSON_IsBool(v)) {
		printf("%s\n", cJSON_IsTrue(v) ? "true" : "false");
	} else {
		/* null, or an empty object or array */
		printf("-\n");
	}
}

/* 1 when O is an object of scalars only (a row of a list). */
static int is_row(const cJSON *o)
{
	const cJSON *c;

	if (!cJSON_IsObject(o) || !o->child)
		return 0;
	for (c = o->child; c; c = c->next)
		if (cJSON_IsObject(c) || cJSON_IsArray(c))
			return 0;
	return 1;
}

/* One line: "name key=value key=value ...". */
static void print_row(const char *name, const cJSON *o)
{
	const cJSON *c;

	printf("%-40s", name);
	for (c = o->child; c; c = c->next) {
		printf(" %s=", c->string);
		if (cJSON_IsString(c))
			printf("%s", c->valuestring);
		else if (cJSON_IsNumber(c) && c->valuedouble ==
		    (double)(int64_t)c->valuedouble)
			printf("%" PRId64, (int64_t)c->valuedouble);
		else if (cJSON_IsNumber(c))
			printf("%.6g", c->valuedouble);
		else if (cJSON_IsBool(c))
			printf("%s", cJSON_IsTrue(c) ? "true" : "false");
		else
			printf("-");
	}
	printf("\n");
}

/* 1 when O is a latency histogram of stats: le_us, counts, sum_us. */
static int is_hist(const cJSON *o)
{
	return cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(o, "le_us")) &&
	    cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(o, "counts"));
}

static void us_text(double us, char *out, size_t outlen)
{
	if (us < 1000)
		snprintf(out, outlen, "%gus", us);
	else if (us < 1e6)
		snprintf(out, outlen, "%gms", us / 1e3);
	else
		snprintf(out, outlen, "%gs", us / 1e6);
}

/* The bound of the bucket that holds quantile Q of H, in "<=25us" form,
 * as the dashboard shows it. */
static void hist_quantile(const cJSON *h, double q, double total, char *out,
    size_t outlen)
{
	const cJSON *le = cJSON_GetObjectItemCaseSensitive(h, "le_us");
	const cJSON *c;
	double seen = 0;
	int i = 0;

	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(h, "counts")) {
		seen += c->valuedouble;
		if (seen >= q * total) {
			const cJSON *b = cJSON_GetArrayItem(le, i);
			char t[48];

			if (!b)
				b = cJSON_GetArrayItem(le, i - 1);
			us_text(b ? b->valuedouble : 0, t, sizeof t);
			snprintf(out, outlen, "%s%s", cJSON_GetArrayItem(le, i) ?
			    "<=" : ">", t);
			return;
		}
		i++;
	}
	snprintf(out, outlen, "-");
}

/* One line for a histogram: how many, p50, p99 (bucket bounds). */
static void print_hist(const char *name, const cJSON *h)
{
	const cJSON *c;
	double total = 0;
	char p50[64], p99[64];

	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(h, "counts"))
		total += c->valuedouble;
	if (total == 0) {
		printf("%-40s n=0\n", name);
		return;
	}
	hist_quantile(h, 0.5, total, p50, sizeof p50);
	hist_quantile(h, 0.99, total, p99, sizeof p99);
	printf("%-40s n=%.0f p50%s p99%s\n", name, total, p50, p99);
}

/* Prints V as "dotted.name value" lines; arrays as name[i], an array
 * element that is a flat object (a worker, a compile in flight) as one
 * line, an object of such objects (requests by op) one line each, and a
 * histogram as its count and quantiles. */
static void print_flat(const char *prefix, const cJSON *v)
{
	char name[256];
	const cJSON *c;
	int i = 0;

	if (is_hist(v)) {
		print_hist(prefix, v);
		return;
	}
	if (cJSON_IsObject(v) && v->child && is_row(v->child)) {
		for (c = v->child; c; c = c->next) {
			snprintf(name, sizeof name, "%s.%s", prefix, c->string);
			if (is_row(c))
				print_row(name, c);
			else
				print_flat(name, c);
		}
		return;
	}
	if (cJSON_IsArray(v) && v->child && is_row(v->child)) {
		for (c = v->child; c; c = c->next, i++) {
			snprintf(name, sizeof name, "%s[%d]", prefix, i);
			if (is_row(c))
				print_row(name, c);
			else
				print_flat(name, c);
		}
		return;
	}
	if ((!cJSON_IsObject(v) && !cJSON_IsArray(v)) || !v->child) {
		print_scalar(prefix, v);
		return;
	}
	for (c = v->child; c; c = c->next, i++) {
		if (cJSON_IsArray(v))
			snprintf(name, sizeof name, "%s[%d]", prefix, i);
		else
			snprintf(name, sizeof name, "%s%s%s", prefix,
			    *prefix ? "." : "", c->string);
		print_flat(name, c);
	}
}

static int print_stats_table(const char *text)
{
	cJSON *json = cJSON_Parse(text);
	const cJSON *c;

	if (!cJSON_IsObject(json)) {
		cJSON_Delete(json);
		fputs("kspec: E_PROTO: stats reply is not a JSON object\n",
		    stderr);
		return EXIT_FAIL;
	}
	for (c = json->child; c; c = c->next) {
		if (strcmp(c->string, "id") && strcmp(c->string, "ok"))
			print_flat(c->string, c);
		/* After the hit counters: their share of the gets. */
		if (strcmp(c->string, "hits_disk") == 0) {
			double gets = jnum(json, "gets");
			double hits = jnum(json, "hits_memory") +
			    jnum(json, "hits_disk");

			printf("%-40s ", "hit_ratio");
			if (gets > 0)
				printf("%.4f (hits in memory and on disk, of "
				    "the gets)\n", hits / gets);
			else
				printf("- (no gets yet)\n");
		}
	}
	cJSON_Delete(json);
	return EXIT_OK;
}

/* Runs stats or hello: JSON verbatim, or (stats only) a table. */
static int cmd_json(const char *socket_path, int argc, char **argv,
    int is_stats)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *cmd = is_stats ? "stats" : "hello";
	kspec_client_t *c = NULL;
	char *text = NULL;
	int ch, rc, as_json = !is_stats;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "-:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			fputs(is_stats ? usage_stats : usage_hello, stdout);
			return EXIT_OK;
		case 'j':
			as_json = 1;    /* hello is JSON either way */
			break;
		case 1:
			return usage_error(cmd, "unexpected argument '%s'",
			    optarg);
		default:
			return bad_option(cmd, optopt, argv[optind - 1]);
		}
	}
	rc = open_client(socket_path, &c);
	if (rc)
		return rc;
	rc = is_stats ? kspec_stats(c, &text) : kspec_hello(c, &text);
	if (rc) {
		rc = fail(c, rc);
		kspec_close(c);
		return rc;
	}
	kspec_close(c);
	if (as_json) {
		fputs(text, stdout);
		fputc('\n', stdout);
	} else {
		rc = print_stats_table(text);
	}
	kspec_free(text);
	return rc;
}

/* ---- ping ---- */

static double mono_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void on_wait_alarm(int sig)
{
	static const char msg[] = "kspec: no answer from kspecd within the "
	    "--wait time\n";

	(void)sig;
	if (write(2, msg, sizeof msg - 1) < 0)
		_exit(EXIT_CONNECT);
	_exit(EXIT_CONNECT);
}

/* Connects, trying again every 50 ms while nobody listens on the socket
 * yet, until WAIT seconds have passed; the last failure is reported as
 * open_client reports it.  A socket a service manager holds for a daemon
 * still starting accepts at once, and the ping then waits in its backlog:
 * an alarm bounds that wait too. */
static int open_client_waiting(const char *socket_path, double wait,
    kspec_client_t **c)
{
	double end = mono_s() + wait;

	signal(SIGALRM, on_wait_alarm);
	alarm((unsigned)wait + 1);
	for (;;) {
		int rc = kspec_connect(socket_path, c);

		if (rc == 0)
			return EXIT_OK;
		if (rc != KSPEC_E_CONNECT || mono_s() + 0.05 > end) {
			kspec_close(*c);
			*c = NULL;
			return open_client(socket_path, c);
		}
		kspec_close(*c);
		*c = NULL;
		usleep(50000);
	}
}

static int cmd_ping(const char *socket_path, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "wait", required_argument, NULL, 'w' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct timespec t0, t1;
	kspec_client_t *c = NULL;
	int ch, rc, as_json = 0;
	double ms, wait = -1;
	char *end;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "-:h", opts, NULL)) != -1) {
		if (ch == 'h') {
			fputs(usage_ping, stdout);
			return EXIT_OK;
		}
		if (ch == 'j') {
			as_json = 1;
			continue;
		}
		if (ch == 'w') {
			errno = 0;
			wait = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(wait >= 0) ||
			    wait > 86400)
				return usage_error("ping", "--wait takes seconds, "
				    "0..86400 (got '%s')", optarg);
			continue;
		}
		if (ch == 1)
			return usage_error("ping", "unexpected argument '%s'",
			    optarg);
		return bad_option("ping", optopt, argv[optind - 1]);
	}
	rc = wait >= 0 ? open_client_waiting(socket_path, wait, &c) :
	    open_client(socket_path, &c);
	if (rc)
		return rc;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = kspec_ping(c);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rc) {
		rc = fail(c, rc);
		kspec_close(c);
		return rc;
	}
	alarm(0);
	ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
	    (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	if (as_json)
		printf("{\"ok\":true,\"ms\":%.3f}\n", ms);
	else
		printf("pong from %s in %.3f ms\n", kspec_socket_path(c), ms);
	kspec_close(c);
	return EXIT_OK;
}

/* ---- generic ops ---- */

/* After a call that returned RC and TEXT on C: closes C, then prints the
 * reply verbatim (--json) or hands it, parsed, to PRINT.  Returns an exit
 * status. */
static int show_reply(kspec_client_t *c, int rc, char *text, int as_json,
    int (*print)(const cJSON *reply))
{
	cJSON *json;

	if (rc) {
		rc = fail(c, rc);
		kspec_close(c);
		return rc;
	}
	kspec_close(c);
	if (as_json) {
		printf("%s\n", text);
		kspec_free(text);
		return EXIT_OK;
	}
	json = cJSON_Parse(text);
	kspec_free(text);
	rc = print(json);
	cJSON_Delete(json);
	return rc;
}

/* Runs OP with FIELDS and shows the reply (show_reply). */
static int run_op(const char *socket_path, const char *op, const char *fields,
    int as_json, int (*print)(const cJSON *reply))
{
	kspec_client_t *c = NULL;
	char *text = NULL;
	int rc;

	rc = open_client(socket_path, &c);
	if (rc)
		return rc;
	rc = kspec_call(c, op, fields, &text);
	return show_reply(c, rc, text, as_json, print);
}

static const char *jstr(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(v) ? v->valuestring : "";
}

static int print_kernels(const cJSON *r)
{
	const cJSON *k, *v;

	cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(r, "kernels")) {
		printf("%s (v%d): %s\n  shape:", jstr(k, "name"),
		    (int)jnum(k, "version"), jstr(k, "summary"));
		cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(k,
		    "dims"))
			printf(" %s", cJSON_IsString(v) ? v->valuestring : "?");
		printf("\n  arguments:");
		cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(k,
		    "params")) {
			const char *acc = jstr(v, "access");

			if (strcmp(jstr(v, "kind"), "buffer") == 0)
				printf(" %s[%s,%s]", jstr(v, "name"),
				    strcmp(jstr(v, "dtype"), "i32") == 0 ?
				    "i32" : "dtype", strcmp(acc, "read") == 0 ?
				    "r" : strcmp(acc, "write") == 0 ? "w" : "rw");
			else
				printf(" %s:%s", jstr(v, "name"),
				    jstr(v, "dtype"));
		}
		printf("\n  dtypes:");
		cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(k,
		    "dtypes"))
			printf(" %s", cJSON_IsString(v) ? v->valuestring : "?");
		printf("\n");
		/* The weight dtypes beside each dtype (wdtype). */
		cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(k,
		    "wdtypes")) {
			const cJSON *w;

			if (cJSON_GetArraySize(v) == 0)
				continue;
			printf("  wdtype with %s:", v->string);
			cJSON_ArrayForEach(w, v)
				printf(" %s", cJSON_IsString(w) ?
				    w->valuestring : "?");
			printf("\n");
		}
		cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(k,
		    "variants"))
			printf("  %-12s %s\n", jstr(v, "name"),
			    jstr(v, "guard"));
	}
	return EXIT_OK;
}

/* BYTES as ls prints a size: 812, 14.7K, 3.2M, 1.1G. */
static void human_size(double bytes, char *out, size_t n)
{
	static const char units[] = "KMG";
	int u = -1;

	while (bytes >= 1024 && u < 2) {
		bytes /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(out, n, "%.0f", bytes);
	else
		snprintf(out, n, "%.1f%c", bytes, units[u]);
}

/* The time since Unix milliseconds MS, in its largest unit: 42s, 17m,
 * 5h, 3d. */
static void human_age(double ms, char *out, size_t n)
{
	struct timespec now;
	double s;

	clock_gettime(CLOCK_REALTIME, &now);
	s = ((double)now.tv_sec * 1e3 + (double)now.tv_nsec / 1e6 - ms) / 1e3;
	if (s < 0)
		s = 0;      /* a clock stepped back */
	if (s < 60)
		snprintf(out, n, "%.0fs", s);
	else if (s < 3600)
		snprintf(out, n, "%.0fm", s / 60);
	else if (s < 86400)
		snprintf(out, n, "%.0fh", s / 3600);
	else
		snprintf(out, n, "%.0fd", s / 86400);
}

/* The columns of the entry tables of ls and evict --stale; LAST is the
 * table's own last column (in memory, or why it is stale). */
enum { T_KEY, T_KERNEL, T_BACKEND, T_TARGET, T_DTYPE, T_SHAPE, T_VARIANT,
	T_SIZE, T_AGE, T_LAST, T_N };

static const char *cell(const cJSON *e, int col, const char *last,
    char *buf, size_t n)
{
	static const char *const fields[] = { "key", "kernel", "backend",
	    "target", "dtype", "shape", "variant" };

	if (col == T_KEY) {
		snprintf(buf, n, "%.12s", jstr(e, "key"));
		return buf;
	}
	if (col < T_SIZE)
		return *jstr(e, fields[col]) ? jstr(e, fields[col]) : "-";
	if (col == T_SIZE) {
		human_size(jnum(e, "bytes"), buf, n);
		return buf;
	}
	if (col == T_AGE) {
		human_age(jnum(e, "created_ms"), buf, n);
		return buf;
	}
	if (strcmp(last, "in_memory") == 0)
		return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e,
		    last)) ? "yes" : "no";
	return jstr(e, last);
}

/* ENTRIES as a table, every column as wide as its widest cell; LAST
 * names the field of the last column and HEAD its header. */
static void print_entries(const cJSON *entries, const char *last,
    const char *head)
{
	const char *const heads[T_N] = { "key", "kernel", "backend", "target",
	    "dtype", "shape", "variant", "size", "age", head };
	size_t w[T_N];
	const cJSON *e;
	char buf[64];
	int i;

	for (i = 0; i < T_N; i++)
		w[i] = strlen(heads[i]);
	cJSON_ArrayForEach(e, entries)
		for (i = 0; i < T_N; i++) {
			size_t n = strlen(cell(e, i, last, buf, sizeof buf));

			if (n > w[i])
				w[i] = n;
		}
	/* Sizes and ages right-aligned, so that their digits line up. */
	for (i = 0; i < T_N; i++)
		printf(i == T_SIZE || i == T_AGE ? "%*s%s" : "%-*s%s",
		    i == T_LAST ? 0 : (int)w[i], heads[i], i == T_LAST ?
		    "\n" : "  ");
	cJSON_ArrayForEach(e, entries)
		for (i = 0; i < T_N; i++)
			printf(i == T_SIZE || i == T_AGE ? "%*s%s" : "%-*s%s",
			    i == T_LAST ? 0 : (int)w[i], cell(e, i, last, buf,
			    sizeof buf), i == T_LAST ? "\n" : "  ");
}

static int print_ls(const cJSON *r)
{
	const cJSON *entries = cJSON_GetObjectItemCaseSensitive(r, "entries");

	print_entries(entries, "in_memory", "mem");
	printf("%.0f of %.0f entries (offset %.0f)\n",
	    (double)cJSON_GetArraySize(entries), jnum(r, "total"),
	    jnum(r, "offset"));
	return EXIT_OK;
}

static int print_evict(const cJSON *r)
{
	const cJSON *entries = cJSON_GetObjectItemCaseSensitive(r, "entries");
	int dry = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "dry_run"));
	char size[32];

	/* Only a stale evict says what it found. */
	if (!cJSON_IsArray(entries)) {
		printf("evicted %.0f entries\n", jnum(r, "evicted"));
		return EXIT_OK;
	}
	if (cJSON_GetArraySize(entries) > 0)
		print_entries(entries, "reason", "reason");
	if (jnum(r, "unlisted") > 0)
		printf("(%.0f more not listed)\n", jnum(r, "unlisted"));
	human_size(jnum(r, "bytes"), size, sizeof size);
	printf("%s %.0f stale entries (%s)%s", dry ? "would evict" :
	    "evicted", jnum(r, "evicted"), size, dry ? "; a dry run, nothing "
	    "removed" : "");
	if (jnum(r, "unchecked") > 0)
		printf("; kept %.0f whose backend or target is not available "
		    "now", jnum(r, "unchecked"));
	printf("\n");
	return EXIT_OK;
}

/* Appends ,"NAME":VALUE-as-JSON-string to B (size CAP). */
static int add_field(char *b, size_t cap, const char *name, const char *v)
{
	cJSON *s = cJSON_CreateString(v);
	char *t = s ? cJSON_PrintUnformatted(s) : NULL;
	size_t n = strlen(b);
	int w;

	cJSON_Delete(s);
	if (!t)
		return -1;
	w = snprintf(b + n, cap - n, "%s\"%s\":%s", n ? "," : "", name, t);
	free(t);
	return w < 0 || (size_t)w >= cap - n ? -1 : 0;
}

/* kernels, ls and evict: options that become request fields. */
static int cmd_simple(const char *socket_path, const char *cmd, int argc,
    char **argv)
{
	enum { O_KERNEL = 256, O_BACKEND, O_TARGET, O_OFFSET, O_LIMIT, O_KEY,
	    O_ALL, O_STALE, O_DRY_RUN, O_JSON };
	static const struct option opts[] = {
		{ "kernel", required_argument, NULL, O_KERNEL },
		{ "backend", required_argument, NULL, O_BACKEND },
		{ "target", required_argument, NULL, O_TARGET },
		{ "offset", required_argument, NULL, O_OFFSET },
		{ "limit", required_argument, NULL, O_LIMIT },
		{ "key", required_argument, NULL, O_KEY },
		{ "all", no_argument, NULL, O_ALL },
		{ "stale", no_argument, NULL, O_STALE },
		{ "dry-run", no_argument, NULL, O_DRY_RUN },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int is_ls = strcmp(cmd, "ls") == 0, is_evict = strcmp(cmd, "evict") ==
	    0;
	char fields[1024] = "";
	int ch, as_json = 0, rc = 0, dry_run = 0, stale = 0;
	char *end;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "-:h", opts, NULL)) != -1) {
		const char *name = NULL;

		switch (ch) {
		case 'h':
			fputs(is_ls ? usage_ls : is_evict ? usage_evict :
			    usage_kernels, stdout);
			return EXIT_OK;
		case O_JSON:
			as_json = 1;
			continue;
		case O_KERNEL: name = "kernel"; break;
		case O_BACKEND: name = "backend"; break;
		case O_TARGET: name = "target"; break;
		case O_KEY: name = is_evict ? "key" : NULL; break;
		case O_OFFSET:
		case O_LIMIT:
			if (!is_ls)
				return bad_option(cmd, optopt,
				    argv[optind - 1]);
			errno = 0;
			(void)strtoull(optarg, &end, 10);
			if (errno || *end || !*optarg)
				return usage_error(cmd, "--%s needs a number",
				    ch == O_OFFSET ? "offset" : "limit");
			snprintf(fields + strlen(fields), sizeof fields -
			    strlen(fields), "%s\"%s\":%s", fields[0] ? "," : "",
			    ch == O_OFFSET ? "offset" : "limit", optarg);
			continue;
		case O_ALL:
		case O_STALE:
		case O_DRY_RUN:
			if (!is_evict)
				return bad_option(cmd, optopt,
				    argv[optind - 1]);
			dry_run |= ch == O_DRY_RUN;
			stale |= ch == O_STALE;
			snprintf(fields + strlen(fields), sizeof fields -
			    strlen(fields), "%s\"%s\":true", fields[0] ? "," :
			    "", ch == O_ALL ? "all" : ch == O_STALE ? "stale" :
			    "dry_run");
			continue;
		case 1:
			return usage_error(cmd, "unexpected argument '%s'",
			    optarg);
		case ':':
			return usage_error(cmd, "%s needs a value",
			    argv[optind - 1]);
		default:
			return bad_option(cmd, optopt, argv[optind - 1]);
		}
		if (!name || strcmp(cmd, "kernels") == 0)
			return bad_option(cmd, optopt, argv[optind - 1]);
		rc = add_field(fields, sizeof fields, name, optarg);
		if (rc)
			return usage_error(cmd, "option values too long");
	}
	if (is_evict && (!fields[0] || (dry_run && !stale)))
		return usage_error(cmd, dry_run ? "--dry-run goes with --stale" :
		    "give --key KEY, a filter, --all or --stale");
	return run_op(socket_path, is_ls ? "list" : cmd, fields, as_json,
	    is_ls ? print_ls : is_evict ? print_evict : print_kernels);
}

/* ---- audit ---- */

static int print_audit(const cJSON *r)
{
	const cJSON *events = cJSON_GetObjectItemCaseSensitive(r, "events");
	const cJSON *skipped = cJSON_GetObjectItemCaseSensitive(r, "skipped");
	const cJSON *e;

	if (cJSON_IsArray(events)) {
		cJSON_ArrayForEach(e, events)
			printf("%.12s %s %s %s %s %s %s: differs in %s; stored "
			    "%.12s, recompiled %.12s by %s\n", jstr(e, "key"),
			    jstr(e, "kernel"), jstr(e, "backend"),
			    jstr(e, "target"), jstr(e, "dtype"),
			    jstr(e, "shape"), jstr(e, "variant"),
			    jstr(e, "differs"), jstr(e, "stored"),
			    jstr(e, "recompiled"), jstr(e, "auditor"));
		printf("%d audit events\n", cJSON_GetArraySize(events));
		return EXIT_OK;
	}
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(r,
	    "mismatches"))
		printf("MISMATCH %.12s %s %s %s %s: differs in %s; "
		    "quarantined\n", jstr(e, "key"), jstr(e, "kernel"),
		    jstr(e, "backend"), jstr(e, "target"), jstr(e, "dtype"),
		    jstr(e, "differs"));
	printf("audited %.0f: %.0f matched, %.0f mismatched, %.0f failed; "
	    "skipped %.0f stale, %.0f unchecked, %.0f with a recent event, "
	    "%.0f gone\n", jnum(r, "audited"), jnum(r, "matched"),
	    jnum(r, "mismatched"), jnum(r, "failed"), jnum(skipped, "stale"),
	    jnum(skipped, "unchecked"), jnum(skipped, "quiet"),
	    jnum(skipped, "gone"));
	return jnum(r, "mismatched") > 0 ? EXIT_FAIL : EXIT_OK;
}

static int cmd_audit(const char *socket_path, int argc, char **argv)
{
	enum { O_KERNEL = 256, O_ALL, O_REPORT, O_JSON };
	static const struct option opts[] = {
		{ "kernel", required_argument, NULL, O_KERNEL },
		{ "all", no_argument, NULL, O_ALL },
		{ "report", no_argument, NULL, O_REPORT },
		{ "json", no_argument, NULL, O_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char fields[256] = "";
	int ch, as_json = 0, given = 0;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "-:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			fputs(usage_audit, stdout);
			return EXIT_OK;
		case O_JSON:
			as_json = 1;
			break;
		case O_KERNEL:
			given++;
			if (add_field(fields, sizeof fields, "kernel", optarg))
				return usage_error("audit", "option values too "
				    "long");
			break;
		case O_ALL:
		case O_REPORT:
			given++;
			snprintf(fields, sizeof fields, "\"%s\":true",
			    ch == O_ALL ? "all" : "report");
			break;
		case 1:
			return usage_error("audit", "unexpected argument '%s'",
			    optarg);
		case ':':
			return usage_error("audit", "%s needs a value",
			    argv[optind - 1]);
		default:
			return bad_option("audit", optopt, argv[optind - 1]);
		}
	}
	if (given != 1)
		return usage_error("audit", "give one of --all, --kernel K or "
		    "--report");
	return run_op(socket_path, "audit", fields, as_json, print_audit);
}

/* ---- explain ---- */

static int print_explain(const cJSON *json)
{
	const cJSON *v, *near;

	printf("kernel     %s\nvariant    %s\nkey        %s\ncached     %s\n",
	    jstr(json, "kernel"), jstr(json, "variant"), jstr(json, "key"),
	    cJSON_IsString(cJSON_GetObjectItemCaseSensitive(json, "cached")) ?
	    jstr(json, "cached") : "no");
	printf("components:\n");
	cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(json,
	    "components")) {
		char *t = cJSON_IsString(v) ? NULL : cJSON_PrintUnformatted(v);

		printf("  %-12s %s\n", v->string, t ? t : v->valuestring);
		free(t);
	}
	near = cJSON_GetObjectItemCaseSensitive(json, "nearest");
	if (cJSON_IsObject(near)) {
		char *t = cJSON_PrintUnformatted(
		    cJSON_GetObjectItemCaseSensitive(near, "differs"));

		printf("nearest    %.12s, differs in %s\n", jstr(near, "key"),
		    t ? t : "?");
		free(t);
	} else if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(json,
	    "cached"))) {
		printf("nearest    none stored for this kernel\n");
	}
	return EXIT_OK;
}

static int cmd_explain(const char *socket_path, int argc, char **argv)
{
	static spec_args_t args;
	kspec_client_t *c = NULL;
	char *text = NULL;
	int rc;

	rc = parse_spec_args("explain", argc, argv, &args);
	if (rc >= 0)
		return rc;
	rc = open_client(socket_path, &c);
	if (rc)
		return rc;
	rc = kspec_explain(c, &args.spec, &text);
	return show_reply(c, rc, text, args.json, print_explain);
}

/* ---- warm ---- */

/*
 * Specs go in warm requests of at most WARM_BATCH items (the daemon's
 * limit) and WARM_BATCH_BYTES of header (its limit is 64 KiB), with
 * "progress":true so that each item is reported as it completes.  Two
 * requests are in flight at once: the second keeps the workers busy while
 * the first's last compiles finish, and two stay far below the flights
 * one uid may have queued.
 */
#define WARM_BATCH 256
#define WARM_BATCH_BYTES 60000
#define WARM_WINDOW 2

/* What became of a spec; the summary counts them. */
enum { W_PENDING, W_CACHED, W_COMPILED, W_JOINED, W_FAILED, W_CANCELLED,
    W_RUNNING, W_STATES };

/* A request in flight: a warm of specs [start, start + n), or a cancel
 * of one. */
typedef struct {
	uint64_t id;
	int start, n;
	int is_cancel;
} warm_req_t;

typedef struct {
	const char *path;
	cJSON *specs;            /* the manifest expanded (expand_manifest) */
	const cJSON **spec;      /* its items, for access by index */
	int *origin;             /* per spec: its index in "specs" */
	int *state;              /* per spec: W_* */
	cJSON **result;          /* --json: per spec, its item or NULL */
	int n;
	int count[W_STATES];
	int next;                /* the first spec not sent */
	int *retry;              /* specs to send again one at a time */
	int nretry;
	warm_req_t req[2 * WARM_WINDOW];
	int nreq;
	int batches;             /* of req, the warms */
	int cancelling;          /* cancels sent */
	int tty, as_json;
} warm_run_t;

static volatile sig_atomic_t warm_interrupted;

static void on_warm_sigint(int sig)
{
	(void)sig;
	warm_interrupted = 1;   /* SA_RESETHAND: a second Ctrl-C kills */
}

/* Reads FILE whole; NULL with a message on failure. */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    n < (64L << 20) && fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)n + 1);
		if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		} else if (buf) {
			buf[n] = '\0';
		}
	}
	fclose(f);
	return buf;
}

/*
 * Expands the manifest into a flat array of get-specs (cJSON objects):
 * each spec without a "target" is repeated for every target the manifest
 * lists for its backend (or sent once, with the daemon's default, when it
 * lists none).  ORIGIN (one number per spec of OUT) gets the index in
 * "specs" each came from.
 */
static int expand_manifest(const cJSON *m, cJSON *out, cJSON *origin,
    char *why, size_t whylen)
{
	const cJSON *specs, *targets, *s, *t, *list;
	const cJSON *ver = cJSON_GetObjectItemCaseSensitive(m, "version");
	int k = 0;

	if (!cJSON_IsObject(m)) {
		snprintf(why, whylen, "the manifest is not a JSON object");
		return -1;
	}
	if (!cJSON_IsNumber(ver) || ver->valuedouble != 1) {
		snprintf(why, whylen, "unsupported manifest \"version\" "
		    "(this kspec reads version 1)");
		return -1;
	}
	specs = cJSON_GetObjectItemCaseSensitive(m, "specs");
	targets = cJSON_GetObjectItemCaseSensitive(m, "targets");
	if (!cJSON_IsArray(specs)) {
		snprintf(why, whylen, "\"specs\" must be an array");
		return -1;
	}
	if (targets && !cJSON_IsObject(targets)) {
		snprintf(why, whylen, "\"targets\" must map backends to "
		    "arrays of targets");
		return -1;
	}
	cJSON_ArrayForEach(s, specs) {
		const char *be = jstr(s, "backend");

		if (!cJSON_IsObject(s)) {
			snprintf(why, whylen, "specs[%d] is not an object", k);
			return -1;
		}
		list = cJSON_GetObjectItemCaseSensitive(targets, be);
		if (cJSON_GetObjectItemCaseSensitive(s, "target") ||
		    !cJSON_IsArray(list) || !list->child) {
			cJSON_AddItemToArray(out, cJSON_Duplicate(s, 1));
			cJSON_AddItemToArray(origin, cJSON_CreateNumber(k++));
			continue;
		}
		cJSON_ArrayForEach(t, list) {
			cJSON *dup = cJSON_Duplicate(s, 1);

			if (!cJSON_IsString(t)) {
				cJSON_Delete(dup);
				snprintf(why, whylen, "targets must be "
				    "strings");
				return -1;
			}
			cJSON_AddStringToObject(dup, "target", t->valuestring);
			cJSON_AddItemToArray(out, dup);
			cJSON_AddItemToArray(origin, cJSON_CreateNumber(k));
		}
		k++;
	}
	return 0;
}

static void describe_spec(const cJSON *s, char *buf, size_t len)
{
	const cJSON *d;
	size_t n;

	n = (size_t)snprintf(buf, len, "%s %s %s", jstr(s, "kernel"),
	    jstr(s, "backend"), jstr(s, "dtype"));
	cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(s, "shape")) {
		if (n >= len)
			break;
		n += (size_t)snprintf(buf + n, len - n, " %s=%.0f", d->string,
		    d->valuedouble);
	}
	if (n < len && cJSON_GetObjectItemCaseSensitive(s, "target"))
		snprintf(buf + n, len - n, " @%s", jstr(s, "target"));
}

static void progress(const warm_run_t *r)
{
	int i, w = 30, done = r->n - r->count[W_PENDING];
	int fill = r->n ? done * w / r->n : w;

	fprintf(stderr, "\r[");
	for (i = 0; i < w; i++)
		fputc(i < fill ? '#' : ' ', stderr);
	fprintf(stderr, "] %d/%d", done, r->n);
	if (r->count[W_FAILED])
		fprintf(stderr, " (%d failed)", r->count[W_FAILED]);
	fflush(stderr);
}

/* Spec I ended as ITEM reports ({index, ok, key, variant, source} or
 * {index, ok:false, error}): counted, shown unless QUIET, kept for
 * --json. */
static void warm_record(warm_run_t *r, int i, const cJSON *item, int quiet)
{
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(item, "error");
	const char *src = jstr(item, "source");
	int ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(item, "ok"));
	int st;
	char desc[256];

	if (i < 0 || i >= r->n || r->state[i] != W_PENDING)
		return;         /* reported already (the final reply) */
	st = !ok ? (strcmp(jstr(e, "code"), "E_CANCELLED") == 0 ?
	    W_CANCELLED : W_FAILED) : strcmp(src, "compiled") == 0 ?
	    W_COMPILED : strcmp(src, "joined") == 0 ? W_JOINED : W_CACHED;
	r->state[i] = st;
	r->count[W_PENDING]--;
	r->count[st]++;
	if (r->as_json) {
		cJSON *x = cJSON_Duplicate(item, 1);

		cJSON_ReplaceItemInObject(x, "index", cJSON_CreateNumber(i));
		cJSON_AddNumberToObject(x, "spec", r->origin[i]);
		r->result[i] = x;
		return;
	}
	if (quiet)
		return;
	describe_spec(r->spec[i], desc, sizeof desc);
	if (st == W_FAILED)
		fprintf(r->tty ? stderr : stdout, "%sFAIL  specs[%d] %s: %s: "
		    "%s\n", r->tty ? "\r\033[K" : "", r->origin[i], desc,
		    jstr(e, "code"), jstr(e, "message"));
	else if (st != W_CANCELLED && !r->tty)
		printf("ok    specs[%d] %s: %s %s, key %.12s\n", r->origin[i],
		    desc, jstr(item, "variant"), src, jstr(item, "key"));
	if (!r->tty)
		fflush(stdout);
	else
		progress(r);
}

/* Spec I ends with error CODE and MSG. */
static void warm_fail(warm_run_t *r, int i, const char *code,
    const char *msg, int quiet)
{
	cJSON *item = cJSON_CreateObject(), *e;

	cJSON_AddNumberToObject(item, "index", i);
	cJSON_AddFalseToObject(item, "ok");
	e = cJSON_AddObjectToObject(item, "error");
	cJSON_AddStringToObject(e, "code", code);
	cJSON_AddStringToObject(e, "message", msg);
	warm_record(r, i, item, quiet);
	cJSON_Delete(item);
}

/* After Ctrl-C, the specs of the warms still in flight: compiling, since
 * the daemon took back every queued one.  It finishes and stores them. */
static void warm_running(warm_run_t *r)
{
	cJSON *x;
	int i, j;

	for (i = 0; i < r->nreq; i++) {
		for (j = r->req[i].start; !r->req[i].is_cancel &&
		    j < r->req[i].start + r->req[i].n; j++) {
			if (r->state[j] != W_PENDING)
				continue;
			r->state[j] = W_RUNNING;
			r->count[W_PENDING]--;
			r->count[W_RUNNING]++;
			if (!r->as_json)
				continue;
			x = cJSON_CreateObject();
			cJSON_AddNumberToObject(x, "index", j);
			cJSON_AddNumberToObject(x, "spec", r->origin[j]);
			cJSON_AddFalseToObject(x, "ok");
			cJSON_AddTrueToObject(x, "running");
			r->result[j] = x;
		}
	}
}

/* At the end, the specs still pending: each ends with CODE and MSG,
 * without a line each (the summary and the error line say why). */
static void warm_end_all(warm_run_t *r, const char *code, const char *msg)
{
	int i;

	for (i = 0; i < r->n; i++)
		if (r->state[i] == W_PENDING)
			warm_fail(r, i, code, msg, 1);
}

/* The "items" member of the specs SPEC[IDX[0..N)] that fit one request
 * (at most WARM_BATCH, about WARM_BATCH_BYTES; one at least): malloc'd,
 * *TAKEN of them.  NULL when out of memory. */
static char *items_batch(const cJSON *const *spec, const int *idx, int n,
    int *taken)
{
	cJSON *batch = cJSON_CreateArray();
	size_t bytes = 16;
	char *text, *fields;
	int k;

	for (k = 0; k < n && k < WARM_BATCH; k++) {
		const cJSON *s = spec[idx[k]];
		char *one = cJSON_PrintUnformatted(s);

		bytes += one ? strlen(one) + 1 : 0;
		free(one);
		if (k && bytes > WARM_BATCH_BYTES)
			break;
		cJSON_AddItemToArray(batch, cJSON_Duplicate(s, 1));
	}
	*taken = k;
	text = cJSON_PrintUnformatted(batch);
	cJSON_Delete(batch);
	fields = text ? malloc(strlen(text) + 16) : NULL;
	if (fields)
		sprintf(fields, "\"items\":%s", text);
	free(text);
	return fields;
}

/* Sends the next warm request: one spec to retry, or the next batch. */
static int warm_send(warm_run_t *r, kspec_client_t *c)
{
	int idx[WARM_BATCH];
	char *items, *fields;
	int start, n, k, rc;

	/* One spec to retry alone, or the next batch. */
	start = r->nretry ? r->retry[--r->nretry] : r->next;
	k = start == r->next ? r->n - start : 1;
	for (n = 0; n < k && n < WARM_BATCH; n++)
		idx[n] = start + n;
	items = items_batch(r->spec, idx, n, &n);
	fields = items ? malloc(strlen(items) + 32) : NULL;
	if (!fields) {
		free(items);
		fputs("kspec: E_NOMEM: out of memory\n", stderr);
		return EXIT_FAIL;
	}
	if (start == r->next)
		r->next += n;
	sprintf(fields, "\"progress\":true,%s", items);
	free(items);
	rc = kspec_send(c, "warm", fields, &r->req[r->nreq].id);
	free(fields);
	if (rc)
		return fail(c, rc);
	r->req[r->nreq].start = start;
	r->req[r->nreq].n = n;
	r->req[r->nreq].is_cancel = 0;
	r->nreq++;
	r->batches++;
	return EXIT_OK;
}

/* Keeps WARM_WINDOW warm requests in flight while specs are left. */
static int warm_fill(warm_run_t *r, kspec_client_t *c)
{
	int rc = EXIT_OK;

	while (!rc && !warm_interrupted && r->batches < WARM_WINDOW &&
	    (r->nretry || r->next < r->n))
		rc = warm_send(r, c);
	return rc;
}

/* Ctrl-C: asks the daemon to take back what is queued of every warm in
 * flight. */
static int warm_cancel(warm_run_t *r, kspec_client_t *c)
{
	int i, nreq = r->nreq, rc;
	char fields[64];

	r->cancelling = 1;
	for (i = 0; i < nreq; i++) {
		snprintf(fields, sizeof fields, "\"request\":%" PRIu64,
		    r->req[i].id);
		rc = kspec_send(c, "cancel", fields, &r->req[r->nreq].id);
		if (rc)
			return fail(c, rc);
		r->req[r->nreq].is_cancel = 1;
		r->nreq++;
	}
	return EXIT_OK;
}

/* The frame (RC, TEXT) of request K: a progress frame, or its reply,
 * which takes it out of the list. */
static int warm_reply(warm_run_t *r, kspec_client_t *c, int k, int rc,
    char *text)
{
	warm_req_t q = r->req[k];
	const cJSON *it;
	const char *code, *msg;
	cJSON *json = NULL;
	int i;

	if (!rc && !q.is_cancel) {
		json = cJSON_Parse(text);
		it = cJSON_GetObjectItemCaseSensitive(json, "progress");
		if (it) {
			warm_record(r, q.start + (int)jnum(it, "index"), it, 0);
			cJSON_Delete(json);
			kspec_free(text);
			return EXIT_OK; /* more to come */
		}
	}
	kspec_free(text);
	r->req[k] = r->req[--r->nreq];
	if (q.is_cancel)
		return EXIT_OK;         /* E_NOT_FOUND: the warm had ended */
	r->batches--;
	if (!rc) {
		/* The reply repeats every item: any not reported yet. */
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(json,
		    "items"))
			warm_record(r, q.start + (int)jnum(it, "index"), it,
			    0);
		cJSON_Delete(json);
		return EXIT_OK;
	}
	/* The request as a whole was refused (a duplicate key in a spec,
	 * say): each of its specs alone finds the one at fault. */
	if (q.n > 1 && !warm_interrupted) {
		for (i = q.start + q.n - 1; i >= q.start; i--)
			r->retry[r->nretry++] = i;
		return EXIT_OK;
	}
	msg = kspec_last_error(c, &code);
	for (i = q.start; i < q.start + q.n; i++)
		warm_fail(r, i, *code ? code : kspec_err_name(rc), msg, 0);
	return EXIT_OK;
}

/* Sends and reads until every spec is done, or, after Ctrl-C, until the
 * daemon has answered the cancels.  Returns an exit status. */
static int warm_loop(warm_run_t *r, kspec_client_t *c)
{
	int rc = warm_fill(r, c), k;
	uint64_t id;
	char *text;

	while (!rc && r->nreq) {
		if (warm_interrupted && !r->cancelling) {
			rc = warm_cancel(r, c);
			continue;
		}
		if (r->cancelling && r->nreq == r->batches)
			break;          /* what is left is compiling */
		rc = kspec_recv(c, 250, &id, &text);
		if (rc == KSPEC_E_TIMEOUT) {
			rc = EXIT_OK;
			continue;
		}
		for (k = 0; k < r->nreq && r->req[k].id != id; k++)
			;
		if (k == r->nreq || rc == KSPEC_E_CONNECT)
			return fail(c, rc ? rc : KSPEC_E_PROTO);
		rc = warm_reply(r, c, k, rc, text);
		if (!rc)
			rc = warm_fill(r, c);
	}
	return rc;
}

static void warm_summary(warm_run_t *r, double secs)
{
	const int *n = r->count;
	cJSON *o, *items;
	char *t;
	int i;

	if (!r->as_json) {
		printf("warm %s: %d specs: %d cached, %d compiled, %d joined, "
		    "%d failed, %d cancelled", r->path, r->n, n[W_CACHED],
		    n[W_COMPILED], n[W_JOINED], n[W_FAILED], n[W_CANCELLED]);
		if (n[W_RUNNING])
			printf(", %d still compiling (stored when done)",
			    n[W_RUNNING]);
		printf(" in %.2f s%s\n", secs, warm_interrupted ?
		    " (interrupted)" : "");
		return;
	}
	o = cJSON_CreateObject();
	items = cJSON_AddArrayToObject(o, "items");
	for (i = 0; i < r->n; i++) {
		cJSON_AddItemToArray(items, r->result[i] ? r->result[i] :
		    cJSON_CreateNull());
		r->result[i] = NULL;
	}
	cJSON_AddNumberToObject(o, "total", r->n);
	cJSON_AddNumberToObject(o, "cached", n[W_CACHED]);
	cJSON_AddNumberToObject(o, "compiled", n[W_COMPILED]);
	cJSON_AddNumberToObject(o, "joined", n[W_JOINED]);
	cJSON_AddNumberToObject(o, "failed", n[W_FAILED]);
	cJSON_AddNumberToObject(o, "cancelled", n[W_CANCELLED]);
	cJSON_AddNumberToObject(o, "running", n[W_RUNNING]);
	cJSON_AddBoolToObject(o, "interrupted", warm_interrupted);
	cJSON_AddNumberToObject(o, "seconds", (double)(int64_t)(secs * 1000 +
	    0.5) / 1000);
	t = cJSON_PrintUnformatted(o);
	printf("%s\n", t);
	free(t);
	cJSON_Delete(o);
}

/* Reads and expands the manifest at PATH into R; an exit status. */
static int warm_open(warm_run_t *r, const char *path)
{
	cJSON *manifest, *origin, *x;
	char why[256], *text;
	int i;

	text = slurp(path);
	if (!text) {
		fprintf(stderr, "kspec: cannot read %s: %s\n", path,
		    strerror(errno ? errno : EIO));
		return EXIT_FAIL;
	}
	manifest = cJSON_Parse(text);
	free(text);
	r->specs = cJSON_CreateArray();
	origin = cJSON_CreateArray();
	if (!manifest || expand_manifest(manifest, r->specs, origin, why,
	    sizeof why)) {
		fprintf(stderr, "kspec: %s: %s\n", path, manifest ? why :
		    "not valid JSON");
		cJSON_Delete(manifest);
		cJSON_Delete(origin);
		return EXIT_FAIL;
	}
	cJSON_Delete(manifest);
	r->path = path;
	r->n = cJSON_GetArraySize(r->specs);
	r->spec = calloc((size_t)r->n + 1, sizeof *r->spec);
	r->origin = calloc((size_t)r->n + 1, sizeof *r->origin);
	r->state = calloc((size_t)r->n + 1, sizeof *r->state);
	r->retry = calloc((size_t)r->n + 1, sizeof *r->retry);
	r->result = calloc((size_t)r->n + 1, sizeof *r->result);
	if (!r->spec || !r->origin || !r->state || !r->retry || !r->result) {
		cJSON_Delete(origin);
		fputs("kspec: E_NOMEM: out of memory\n", stderr);
		return EXIT_FAIL;
	}
	i = 0;
	cJSON_ArrayForEach(x, r->specs)
		r->spec[i++] = x;
	i = 0;
	cJSON_ArrayForEach(x, origin)
		r->origin[i++] = (int)x->valuedouble;
	cJSON_Delete(origin);
	r->count[W_PENDING] = r->n;
	return EXIT_OK;
}

static void warm_close(warm_run_t *r)
{
	int i;

	for (i = 0; r->result && i < r->n; i++)
		cJSON_Delete(r->result[i]);
	cJSON_Delete(r->specs);
	free(r->spec);
	free(r->result);
	free(r->origin);
	free(r->state);
	free(r->retry);
}

static int cmd_warm(const char *socket_path, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct sigaction sa, old;
	const char *path = NULL;
	kspec_client_t *c = NULL;
	warm_run_t r;
	double t0 = mono_s();
	int ch, rc;

	memset(&r, 0, sizeof r);
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "-:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			fputs(usage_warm, stdout);
			return EXIT_OK;
		case 'j':
			r.as_json = 1;
			break;
		case 1:
			if (path)
				return usage_error("warm", "unexpected "
				    "argument '%s'", optarg);
			path = optarg;
			break;
		default:
			return bad_option("warm", optopt, argv[optind - 1]);
		}
	}
	if (!path)
		return usage_error("warm", "missing MANIFEST");
	rc = warm_open(&r, path);
	if (rc == EXIT_OK)
		rc = open_client(socket_path, &c);
	if (rc) {
		warm_close(&r);
		return rc;
	}
	r.tty = !r.as_json && isatty(2);
	/* Not SA_RESTART: a wait for a reply returns, and the loop sends
	 * the cancels. */
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_warm_sigint;
	sa.sa_flags = SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old);
	if (r.tty)
		progress(&r);
	rc = warm_loop(&r, c);
	sigaction(SIGINT, &old, NULL);
	kspec_close(c);
	/* What is pending now was compiling when the cancels were answered
	 * (the daemon finishes and stores it), or never sent; or the run
	 * stopped at an error, reported already. */
	if (rc)
		warm_end_all(&r, rc == EXIT_CONNECT ? "E_CONNECT" : "E_PROTO",
		    "not warmed: kspec warm stopped at an error");
	else if (warm_interrupted)
		warm_running(&r);
	warm_end_all(&r, "E_CANCELLED", "not sent: kspec warm was "
	    "interrupted");
	if (r.tty)
		fputs("\n", stderr);
	warm_summary(&r, mono_s() - t0);
	warm_close(&r);
	if (rc)
		return rc;
	if (warm_interrupted)
		return 128 + SIGINT;
	return r.count[W_FAILED] ? EXIT_FAIL : EXIT_OK;
}

/* One call of OP with FIELDS on a connection of its own: the reply
 * parsed into *REPLY (cJSON_Delete it), or an exit status with the error
 * reported. */
static int call_parsed(const char *socket_path, const char *op,
    const char *fields, cJSON **reply)
{
	kspec_client_t *c = NULL;
	char *text = NULL;
	int rc = open_client(socket_path, &c);

	*reply = NULL;
	if (rc)
		return rc;
	rc = kspec_call(c, op, fields, &text);
	if (rc) {
		rc = fail(c, rc);
		kspec_close(c);
		return rc;
	}
	kspec_close(c);
	*reply = cJSON_Parse(text);
	kspec_free(text);
	return *reply ? EXIT_OK : EXIT_FAIL;
}

static const char usage_canary[] =
"usage: kspec [--socket PATH] canary [--kernel K] [--backend B] [--status]\n"
"           [--json]\n"
"\n"
"Runs the known-answer canaries now (every kernel, or K, on every backend\n"
"that can run them, or B) and prints each verdict: the kernel at small\n"
"shapes, every variant and dtype, against its plain-C reference.  A kernel\n"
"disabled by a failed canary is enabled again when it passes.  For the\n"
"daemon's uid, root and --admin-group.  --status prints the state without\n"
"running anything (anyone).  Exit status 0 when none failed, 1 otherwise.\n";

/* ---- canary ---- */

static int cmd_canary(const char *socket_path, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "kernel", required_argument, NULL, 'k' },
		{ "backend", required_argument, NULL, 'b' },
		{ "status", no_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *kernel = NULL, *backend = NULL;
	int ch, rc, json = 0, status = 0, failed = 0;
	const cJSON *cs, *b, *k;
	cJSON *reply;
	char *text;
	ks_buf_t f;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "-:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			fputs(usage_canary, stdout);
			return EXIT_OK;
		case 'k':
			kernel = optarg;
			break;
		case 'b':
			backend = optarg;
			break;
		case 's':
			status = 1;
			break;
		case 'j':
			json = 1;
			break;
		default:
			if (ch == 1)
				return usage_error("canary", "unexpected "
				    "argument '%s'", optarg);
			if (ch == ':')
				return usage_error("canary", "%s needs a value",
				    argv[optind - 1]);
			return bad_option("canary", optopt, argv[optind - 1]);
		}
	}
	ks_buf_init(&f);
	ks_buf_printf(&f, "\"status\":%s", status ? "true" : "false");
	if (kernel) {
		ks_buf_puts(&f, ",\"kernel\":");
		ks_buf_json_str(&f, kernel);
	}
	if (backend) {
		ks_buf_puts(&f, ",\"backend\":");
		ks_buf_json_str(&f, backend);
	}
	rc = call_parsed(socket_path, "canary", f.data, &reply);
	ks_buf_close(&f);
	if (rc)
		return rc;
	cs = cJSON_GetObjectItemCaseSensitive(reply, "canaries");
	if (json) {
		text = cJSON_Print(cs);
		printf("%s\n", text);
		free(text);
	}
	cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(cs,
	    "backends")) {
		const char *be = cJSON_GetStringValue(
		    cJSON_GetObjectItemCaseSensitive(b, "backend"));
		const char *st = cJSON_GetStringValue(
		    cJSON_GetObjectItemCaseSensitive(b, "state"));

		if (!json && st && strcmp(st, "skipped") == 0)
			printf("%-7s skipped: %s\n", be, cJSON_GetStringValue(
			    cJSON_GetObjectItemCaseSensitive(b, "reason")));
		cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(b,
		    "kernels")) {
			const cJSON *ms = cJSON_GetObjectItemCaseSensitive(k,
			    "ms");
			const char *ks = cJSON_GetStringValue(
			    cJSON_GetObjectItemCaseSensitive(k, "state"));

			failed += ks && strcmp(ks, "failed") == 0;
			if (json)
				continue;
			printf("%-7s %-17s %-7s %6.0f ms  %s\n", be,
			    cJSON_GetStringValue(
			    cJSON_GetObjectItemCaseSensitive(k, "kernel")), ks,
			    cJSON_IsNumber(ms) ? ms->valuedouble : 0,
			    cJSON_GetStringValue(
			    cJSON_GetObjectItemCaseSensitive(k, "detail")));
		}
	}
	cJSON_Delete(reply);
	return failed ? EXIT_FAIL : EXIT_OK;
}

/* ---- manifest ---- */

static int cmd_manifest(const char *socket_path, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "from-misses", no_argument, NULL, 'm' },
		{ "deployment", required_argument, NULL, 'd' },
		{ "output", required_argument, NULL, 'o' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *outpath = NULL, *deployment = NULL;
	cJSON *reply, *man, *specs;
	ks_buf_t f;
	const cJSON *m;
	char *text = NULL;
	int ch, rc, from_misses = 0;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "-:ho:", opts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			fputs(usage_manifest, stdout);
			return EXIT_OK;
		case 'm':
			from_misses = 1;
			break;
		case 'd':
			deployment = optarg;
			break;
		case 'o':
			outpath = optarg;
			break;
		case 'j':
			break;          /* a manifest is JSON either way */
		case 1:
			return usage_error("manifest", "unexpected argument "
			    "'%s'", optarg);
		case ':':
			return usage_error("manifest", "%s needs a value",
			    argv[optind - 1]);
		default:
			return bad_option("manifest", optopt,
			    argv[optind - 1]);
		}
	}
	if (!from_misses)
		return usage_error("manifest", "give --from-misses");
	ks_buf_init(&f);
	if (deployment) {
		ks_buf_puts(&f, "\"deployment\":");
		ks_buf_json_str(&f, deployment);
	}
	rc = call_parsed(socket_path, "misses", deployment ? f.data : NULL,
	    &reply);
	ks_buf_close(&f);
	if (rc)
		return rc;
	man = cJSON_CreateObject();
	cJSON_AddNumberToObject(man, "version", 1);
	specs = cJSON_AddArrayToObject(man, "specs");
	cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(reply, "misses"))
		cJSON_AddItemToArray(specs, cJSON_Duplicate(
		    cJSON_GetObjectItemCaseSensitive(m, "spec"), 1));
	text = cJSON_Print(man);
	rc = EXIT_OK;
	if (outpath)
		rc = write_file(outpath, text, strlen(text), 1) ? EXIT_FAIL :
		    EXIT_OK;
	else
		printf("%s\n", text);
	if (outpath && !rc)
		printf("%d specs -> %s\n", cJSON_GetArraySize(specs), outpath);
	free(text);
	cJSON_Delete(man);
	cJSON_Delete(reply);
	return rc;
}

/* ---- ready ---- */

static const char usage_ready[] =
"usage: kspec [--socket PATH] ready MANIFEST|DEPLOYMENT [--wait SECONDS]\n"
"           [--json]\n"
"\n"
"Says whether every spec of MANIFEST (as kspec warm reads it), or of the\n"
"deployment of that name (kspec deploy; when no such file exists), is cached\n"
"for this daemon's compilers now: how many of how many, and which are\n"
"missing.  Nothing is compiled, unless --wait: then the missing specs are\n"
"warmed (at warm priority) and kspec waits until they are all cached or\n"
"SECONDS have passed (then what is still queued is cancelled).  Exit\n"
"status 0 ready, 1 not ready (or a spec that can never be: named with\n"
"its error), 2 usage, 3 no daemon.  For a startup script to gate on.\n";

/* The specs of deployment NAME into SPECS (ORIGIN: their indexes). */
static int deployment_specs(const char *socket_path, const char *name,
    cJSON *specs, cJSON *origin)
{
	const cJSON *d, *it;
	cJSON *reply;
	ks_buf_t f;
	int rc, i = 0;

	if (strlen(name) > 64)
		return usage_error("ready", "no file '%s', nor a deployment "
		    "name", name);
	ks_buf_init(&f);
	ks_buf_puts(&f, "\"name\":");
	ks_buf_json_str(&f, name);
	rc = call_parsed(socket_path, "deployments", f.data, &reply);
	ks_buf_close(&f);
	if (rc)
		return rc;
	d = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(reply,
	    "deployments"), 0);
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(d, "items")) {
		cJSON_AddItemToArray(specs, cJSON_Duplicate(it, 1));
		cJSON_AddItemToArray(origin, cJSON_CreateNumber(i++));
	}
	cJSON_Delete(reply);
	return EXIT_OK;
}

/* The ready op over SPECS in batches, or over DEPLOYMENT's (its SPECS)
 * by name in one, which tells the daemon when it is ready: *CACHED, and
 * MISSING gets {index, spec, key | code, message} per spec not cached. */
static int ready_check(kspec_client_t *c, const char *deployment,
    const cJSON *const *sp, int n, const int *origin, cJSON *missing,
    int *cached)
{
	int at, i, rc, taken;
	int *idx = malloc(((size_t)n + 1) * sizeof *idx);

	*cached = 0;
	if (!idx)
		return KSPEC_E_NOMEM;
	for (i = 0; i < n; i++)
		idx[i] = i;
	for (at = 0, rc = 0; at < n && rc == 0; at += taken) {
		cJSON *reply;
		const cJSON *m;
		char *fields, *text = NULL;

		if (deployment) {
			ks_buf_t f;

			ks_buf_init(&f);
			ks_buf_puts(&f, "\"deployment\":");
			ks_buf_json_str(&f, deployment);
			fields = f.data;
			taken = n;
		} else {
			fields = items_batch(sp, idx + at, n - at, &taken);
		}
		if (!fields) {
			rc = KSPEC_E_NOMEM;
			break;
		}
		rc = kspec_call(c, "ready", fields, &text);
		free(fields);
		if (rc)
			break;
		reply = cJSON_Parse(text);
		kspec_free(text);
		*cached += (int)jnum(reply, "cached");
		cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(reply,
		    "missing")) {
			cJSON *x = cJSON_Duplicate(m, 1);
			int k = at + (int)jnum(m, "index");

			cJSON_ReplaceItemInObject(x, "index",
			    cJSON_CreateNumber(k));
			cJSON_AddNumberToObject(x, "spec", origin[k]);
			cJSON_AddItemToArray(missing, x);
		}
		cJSON_Delete(reply);
	}
	free(idx);
	return rc;
}

/* Warms the specs of MISSING that can be (no error), waiting at most
 * UNTIL (ks_now_ns); what is still queued then is cancelled. */
static int ready_warm(kspec_client_t *c, const cJSON *const *sp,
    const cJSON *missing, uint64_t until)
{
	uint64_t ids[64], id;
	int nids = 0, i, rc = 0, n = 0, at, taken;
	int *idx = malloc(((size_t)cJSON_GetArraySize(missing) + 1) *
	    sizeof *idx);
	const cJSON *m;

	if (!idx)
		return KSPEC_E_NOMEM;
	cJSON_ArrayForEach(m, missing)
		if (!cJSON_GetObjectItemCaseSensitive(m, "code"))
			idx[n++] = (int)jnum(m, "index");   /* can be cached */
	for (at = 0; at < n && nids < 64 && rc == 0; at += taken) {
		char *fields = items_batch(sp, idx + at, n - at, &taken);

		if (!fields) {
			rc = KSPEC_E_NOMEM;
			break;
		}
		rc = kspec_send(c, "warm", fields, &ids[nids]);
		nids += rc == 0;
		free(fields);
	}
	free(idx);
	for (i = 0; i < nids && rc == 0; ) {
		uint64_t now = ks_now_ns();
		char *text = NULL;

		if (now >= until) {
			rc = KSPEC_E_TIMEOUT;
			break;
		}
		rc = kspec_recv(c, (int)((until - now) / 1000000) + 1, &id,
		    &text);
		kspec_free(text);
		if (rc == KSPEC_E_TIMEOUT && ks_now_ns() < until)
			rc = 0;         /* a signal: wait on */
		else if (rc == 0)
			i++;
		else if (rc != KSPEC_E_TIMEOUT)
			i++, rc = 0;    /* a warm's own error: counted next */
	}
	if (rc == KSPEC_E_TIMEOUT) {
		/* Take back what is still queued, and read what comes. */
		char f[64], *text = NULL;
		int j;

		for (j = 0; j < nids; j++) {
			snprintf(f, sizeof f, "\"request\":%" PRIu64, ids[j]);
			kspec_send(c, "cancel", f, &id);
		}
		while (kspec_recv(c, 2000, &id, &text) != KSPEC_E_TIMEOUT) {
			kspec_free(text);
			text = NULL;
		}
		return KSPEC_E_TIMEOUT;
	}
	return rc;
}

static int cmd_ready(const char *socket_path, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "wait", required_argument, NULL, 'w' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = NULL, *deployment = NULL;
	kspec_client_t *c = NULL;
	cJSON *man = NULL, *specs, *origin_j, *missing, *out;
	double wait = 0;
	char why[256], *text, *end;
	int ch, as_json = 0, cached = 0, n, i, rc, *origin = NULL, timed_out = 0;
	const cJSON **sp = NULL, *x;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "-:h", opts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			fputs(usage_ready, stdout);
			return EXIT_OK;
		case 'w':
			wait = strtod(optarg, &end);
			if (*end || end == optarg || wait < 0 || wait > 86400)
				return usage_error("ready", "--wait takes 0 to "
				    "86400 seconds");
			break;
		case 'j':
			as_json = 1;
			break;
		case 1:
			if (path)
				return usage_error("ready", "unexpected "
				    "argument '%s'", optarg);
			path = optarg;
			break;
		case ':':
			return usage_error("ready", "%s needs a value",
			    argv[optind - 1]);
		default:
			return bad_option("ready", optopt, argv[optind - 1]);
		}
	}
	if (!path)
		return usage_error("ready", "missing MANIFEST or DEPLOYMENT");
	specs = cJSON_CreateArray();
	origin_j = cJSON_CreateArray();
	missing = cJSON_CreateArray();
	if (access(path, F_OK) != 0 && strchr(path, '/') == NULL) {
		/* A deployment: its specs, as the daemon keeps them. */
		rc = deployment_specs(socket_path, path, specs, origin_j);
		if (rc)
			goto out;
		man = cJSON_CreateObject();
		deployment = path;
	} else {
		text = slurp(path);
		man = text ? cJSON_Parse(text) : NULL;
		free(text);
	}
	if (!man || (!cJSON_GetArraySize(specs) &&
	    expand_manifest(man, specs, origin_j, why, sizeof why))) {
		fprintf(stderr, "kspec: %s: %s\n", path, !man ? "cannot read "
		    "it as JSON" : why);
		rc = EXIT_FAIL;
		goto out;
	}
	n = cJSON_GetArraySize(specs);
	origin = calloc((size_t)n + 1, sizeof *origin);
	sp = calloc((size_t)n + 1, sizeof *sp);
	if (!origin || !sp) {
		fputs("kspec: E_NOMEM: out of memory\n", stderr);
		rc = EXIT_FAIL;
		goto out;
	}
	i = 0;
	cJSON_ArrayForEach(x, specs)
		sp[i++] = x;
	i = 0;
	cJSON_ArrayForEach(x, origin_j)
		origin[i++] = x->valueint;
	rc = open_client(socket_path, &c);
	if (rc)
		goto out;
	rc = ready_check(c, deployment, sp, n, origin, missing,
		    &cached);
	if (rc == 0 && cached < n && wait > 0) {
		rc = ready_warm(c, sp, missing, ks_now_ns() +
		    (uint64_t)(wait * 1e9));
		timed_out = rc == KSPEC_E_TIMEOUT;
		cJSON_Delete(missing);
		missing = cJSON_CreateArray();
		rc = ready_check(c, deployment, sp, n, origin, missing,
		    &cached);
	}
	if (rc) {
		rc = fail(c, rc);
		goto out;
	}
	if (as_json) {
		out = cJSON_CreateObject();
		cJSON_AddBoolToObject(out, "ready", cached == n);
		cJSON_AddNumberToObject(out, "specs", n);
		cJSON_AddNumberToObject(out, "cached", cached);
		cJSON_AddBoolToObject(out, "timed_out", timed_out);
		cJSON_AddItemToObject(out, "missing", missing);
		missing = NULL;
		text = cJSON_PrintUnformatted(out);
		puts(text ? text : "{}");
		free(text);
		cJSON_Delete(out);
	} else {
		const cJSON *m;

		printf("%s: %d of %d specs cached%s\n", cached == n ? "ready" :
		    "not ready", cached, n, timed_out ? " (--wait ran out)" :
		    "");
		cJSON_ArrayForEach(m, missing) {
			const cJSON *s = cJSON_GetArrayItem(specs,
			    (int)jnum(m, "index"));

			if (cJSON_GetObjectItemCaseSensitive(m, "code"))
				printf("  specs[%d] %s: %s: %s\n",
				    (int)jnum(m, "spec"), jstr(s, "kernel"),
				    jstr(m, "code"), jstr(m, "message"));
			else
				printf("  specs[%d] %s: not cached (key %.12s)\n",
				    (int)jnum(m, "spec"), jstr(s, "kernel"),
				    jstr(m, "key"));
		}
	}
	rc = cached == n ? EXIT_OK : EXIT_FAIL;
out:
	if (c)
		kspec_close(c);
	free(origin);
	free(sp);
	cJSON_Delete(man);
	cJSON_Delete(specs);
	cJSON_Delete(origin_j);
	cJSON_Delete(missing);
	return rc;
}

/* ---- deploy ---- */

static const char usage_deploy[] =
"usage: kspec [--socket PATH] deploy add NAME MANIFEST [--json]\n"
"       kspec [--socket PATH] deploy ls [NAME] [--json]\n"
"       kspec [--socket PATH] deploy rm NAME [--json]\n"
"\n"
"Registers the specs of MANIFEST (at most 256, as kspec warm reads it)\n"
"with the daemon as deployment NAME: their kernels are never evicted to\n"
"keep the store in its budget, and kspec ready NAME says whether all are\n"
"cached.  ls lists deployments with how many of their specs are cached;\n"
"rm removes one (its kernels stay, unpinned).  add and rm are for the\n"
"daemon's uid, root and --admin-group.  NAME: letters, digits, . _ -\n";

static int cmd_deploy(const char *socket_path, int argc, char **argv)
{
	kspec_client_t *c = NULL;
	cJSON *man = NULL, *specs = NULL, *origin = NULL, *reply;
	const cJSON *d;
	char why[256], *text = NULL, *items = NULL;
	ks_buf_t f;
	int i, rc, as_json = 0, nargs = 0;
	const char *args[4] = { NULL, NULL, NULL, NULL };

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			as_json = 1;
		else if (strcmp(argv[i], "--help") == 0 ||
		    strcmp(argv[i], "-h") == 0) {
			fputs(usage_deploy, stdout);
			return EXIT_OK;
		} else if (argv[i][0] == '-')
			return bad_option("deploy", 0, argv[i]);
		else if (nargs < 4)
			args[nargs++] = argv[i];
		else
			return usage_error("deploy", "unexpected argument "
			    "'%s'", argv[i]);
	}
	ks_buf_init(&f);
	if (nargs == 3 && strcmp(args[0], "add") == 0) {
		text = slurp(args[2]);
		man = text ? cJSON_Parse(text) : NULL;
		free(text);
		specs = cJSON_CreateArray();
		origin = cJSON_CreateArray();
		if (!man || expand_manifest(man, specs, origin, why,
		    sizeof why)) {
			fprintf(stderr, "kspec: %s: %s\n", args[2], !man ?
			    "cannot read it as JSON" : why);
			rc = EXIT_FAIL;
			goto out;
		}
		items = cJSON_PrintUnformatted(specs);
		ks_buf_puts(&f, "\"name\":");
		ks_buf_json_str(&f, args[1]);
		ks_buf_printf(&f, ",\"items\":%s", items ? items : "[]");
	} else if ((nargs == 2 && strcmp(args[0], "rm") == 0) ||
	    (nargs <= 2 && nargs >= 1 && strcmp(args[0], "ls") == 0)) {
		if (nargs == 2) {
			ks_buf_puts(&f, "\"name\":");
			ks_buf_json_str(&f, args[1]);
		}
	} else {
		ks_buf_close(&f);
		return usage_error("deploy", "give: add NAME MANIFEST, ls [NAME] "
		    "or rm NAME");
	}
	rc = open_client(socket_path, &c);
	if (rc)
		goto out;
	rc = kspec_call(c, strcmp(args[0], "add") == 0 ? "deploy" :
	    strcmp(args[0], "rm") == 0 ? "undeploy" : "deployments",
	    f.len ? f.data : NULL, &text);
	if (rc) {
		rc = fail(c, rc);
		goto out;
	}
	if (as_json) {
		puts(text);
	} else if (strcmp(args[0], "ls") == 0) {
		reply = cJSON_Parse(text);
		printf("%-24s %7s %7s %7s %5s %5s\n", "name", "specs",
		    "cached", "pinned", "ready", "late");
		cJSON_ArrayForEach(d, cJSON_GetObjectItemCaseSensitive(reply,
		    "deployments"))
			printf("%-24s %7d %7d %7d %5s %5d\n", jstr(d, "name"),
			    (int)jnum(d, "specs"), (int)jnum(d, "cached"),
			    (int)jnum(d, "pinned"), cJSON_IsTrue(
			    cJSON_GetObjectItemCaseSensitive(d, "ready")) ?
			    "yes" : "no", (int)jnum(d, "late_compiles"));
		cJSON_Delete(reply);
	} else if (strcmp(args[0], "add") == 0) {
		printf("deployment %s: %d specs registered; their kernels are "
		    "pinned\n", args[1], cJSON_GetArraySize(specs));
	} else {
		printf("deployment %s removed\n", args[1]);
	}
	kspec_free(text);
	rc = EXIT_OK;
out:
	if (c)
		kspec_close(c);
	free(items);
	ks_buf_close(&f);
	cJSON_Delete(man);
	cJSON_Delete(specs);
	cJSON_Delete(origin);
	return rc;
}

/* ---- fleet keys and bundles ---- */

static const char usage_fleet_key[] =
"usage: kspec fleet-key generate PREFIX [--json]\n"
"\n"
"Makes a fleet signing key pair: PREFIX.secret (mode 0600; it signs\n"
"bundles, keep it with the publisher) and PREFIX.public (what daemons\n"
"verify with: kspecd --fleet-key PREFIX.public).  Never replaces a file.\n"
"Prints the key id (docs/fleet.md); --json: {\"id\",\"secret\",\"public\"}.\n";

static const char usage_bundle[] =
"usage: kspec [--socket PATH] bundle export MANIFEST -o FILE\n"
"           --sign-key PREFIX.secret [--json]\n"
"       kspec [--socket PATH] bundle import FILE [--json]\n"
"\n"
"export writes the cached artifacts of MANIFEST's specs (as kspec warm\n"
"reads it) with their metadata, each signed with the fleet secret key,\n"
"as one bundle FILE (through FILE.tmp and a rename); specs not cached are\n"
"reported and left out (warm them first).  Nothing is compiled.\n"
"import has the daemon read FILE and store each entry that its\n"
"--fleet-key verifies and that this daemon would ask for (same kernel\n"
"definition, compiler and target); others are reported with the reason.\n"
"Both are for the daemon's uid, root and --admin-group (import) and\n"
"exit 1 when anything was refused or missing.\n";

static int cmd_fleet_key(int argc, char **argv)
{
	char id[17], err[512];
	int rc, as_json = argc == 4 && strcmp(argv[3], "--json") == 0;

	if (argc == 2 && (strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0)) {
		fputs(usage_fleet_key, stdout);
		return EXIT_OK;
	}
	if ((argc != 3 && !as_json) || strcmp(argv[1], "generate") != 0 ||
	    argv[2][0] == '-')
		return usage_error("fleet-key", "give: generate PREFIX");
	rc = ks_fleet_keygen(argv[2], id, err, sizeof err);
	if (rc) {
		fprintf(stderr, "kspec: %s: %s\n", kspec_err_name(rc), err);
		return EXIT_FAIL;
	}
	if (as_json) {
		cJSON *o = cJSON_CreateObject();
		char *text, path[4200];

		cJSON_AddStringToObject(o, "id", id);
		snprintf(path, sizeof path, "%s.secret", argv[2]);
		cJSON_AddStringToObject(o, "secret", path);
		snprintf(path, sizeof path, "%s.public", argv[2]);
		cJSON_AddStringToObject(o, "public", path);
		text = cJSON_PrintUnformatted(o);
		puts(text ? text : "{}");
		free(text);
		cJSON_Delete(o);
	} else {
		printf("fleet key %s: %s.secret (keep it secret), %s.public\n",
		    id, argv[2], argv[2]);
	}
	return EXIT_OK;
}

/* ---- quantize ---- */

static const char usage_quantize[] =
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

static int cmd_quantize(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *format = NULL, *input = NULL, *outpath = NULL;
	unsigned long long k = 0;
	size_t len, rows, need;
	uint8_t *in = NULL, *out = NULL;
	char err[512], *end;
	int ch, rc, as_json = 0;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "-:hk:o:", opts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			fputs(usage_quantize, stdout);
			return EXIT_OK;
		case 'k':
			errno = 0;
			k = strtoull(optarg, &end, 10);
			if (errno || end == optarg || *end || k == 0 ||
			    optarg[0] == '-')
				return usage_error("quantize", "-k needs a "
				    "positive integer (got '%s')", optarg);
			break;
		case 'o':
			outpath = optarg;
			break;
		case 'j':
			as_json = 1;
			break;
		case 1:
			if (!format)
				format = optarg;
			else if (!input)
				input = optarg;
			else
				return usage_error("quantize", "unexpected "
				    "argument '%s'", optarg);
			break;
		case ':':
			return usage_error("quantize", "%s needs a value",
			    argv[optind - 1]);
		default:
			return bad_option("quantize", optopt,
			    argv[optind - 1]);
		}
	}
	if (!format || !input)
		return usage_error("quantize", "give FORMAT and INPUT");
	if (!k || !outpath)
		return usage_error("quantize", "give -k K and -o OUT");
	rc = kspec_quant_size(format, 1, (size_t)k, &need, err, sizeof err);
	if (rc == KSPEC_E_BAD_DTYPE || rc == KSPEC_E_BAD_SHAPE)
		return usage_error("quantize", "%s", err);
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
	if (as_json) {
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

/* A get-spec object of a manifest as a kspec_get_spec_t; the strings and
 * arrays borrow from O, DIMS and DYN.  0, or -1 when O is not one. */
static int spec_of_json(const cJSON *o, kspec_get_spec_t *s,
    kspec_dim_t *dims, const char **dyn)
{
	const cJSON *v, *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "dynamic");

	memset(s, 0, sizeof *s);
#define STR(field, name) do { \
	v = cJSON_GetObjectItemCaseSensitive(o, name); \
	s->field = cJSON_IsString(v) ? v->valuestring : NULL; \
} while (0)
	STR(kernel, "kernel");
	STR(backend, "backend");
	STR(target, "target");
	STR(format, "format");
	STR(dtype, "dtype");
	STR(mode, "mode");
#undef STR
	cJSON_ArrayForEach(v, shape) {
		if (!cJSON_IsNumber(v) || s->nshape == CLI_MAX_DIMS)
			return -1;
		dims[s->nshape].name = v->string;
		dims[s->nshape++].value = (int64_t)v->valuedouble;
	}
	cJSON_ArrayForEach(v, d) {
		if (!cJSON_IsString(v) || s->ndynamic == CLI_MAX_DIMS)
			return -1;
		dyn[s->ndynamic++] = v->valuestring;
	}
	s->shape = dims;
	s->dynamic = dyn;
	return s->kernel ? 0 : -1;
}

/* The artifact's stored fields in a get reply's header: what follows
 * its "source" member, without the closing brace (docs/fleet.md). */
static int stored_meta(const kspec_artifact_t *a, const char **meta,
    size_t *len)
{
	const char *p = strstr(a->meta, ",\"source\":\"");

	if (!p || !(p = strchr(p + 11, '"')) || p[1] != ',' ||
	    a->meta_len < 2 || a->meta[a->meta_len - 1] != '}')
		return -1;
	*meta = p + 2;
	*len = (size_t)(a->meta + a->meta_len - 1 - *meta);
	return 0;
}

static int bundle_export(const char *socket_path, const char *manifest,
    const char *out, const char *sign_key, int as_json)
{
	kspec_dim_t dims[CLI_MAX_DIMS];
	const char *dyn[CLI_MAX_DIMS];
	kspec_client_t *c = NULL;
	kspec_artifact_t *a;
	ks_fleet_sec_t sk;
	ks_buf_t bundle, entries, one;
	cJSON *specs, *origin, *man, *report, *missing, *x;
	char err[512], why[256], *text;
	int i, n, rc, exported = 0, status = EXIT_OK;

	if (ks_fleet_load_secret(sign_key, &sk, err, sizeof err) != KS_OK) {
		fprintf(stderr, "kspec: --sign-key %s\n", err);
		return EXIT_FAIL;
	}
	text = slurp(manifest);
	man = text ? cJSON_Parse(text) : NULL;
	free(text);
	specs = cJSON_CreateArray();
	origin = cJSON_CreateArray();
	if (!man || expand_manifest(man, specs, origin, why, sizeof why)) {
		fprintf(stderr, "kspec: %s: %s\n", manifest, !man ? "cannot "
		    "read it as JSON" : why);
		rc = EXIT_FAIL;
		goto done_json;
	}
	rc = open_client(socket_path, &c);
	if (rc)
		goto done_json;
	ks_buf_init(&entries);
	report = cJSON_CreateObject();
	missing = cJSON_AddArrayToObject(report, "not_cached");
	n = cJSON_GetArraySize(specs);
	for (i = 0; i < n; i++) {
		const cJSON *s = cJSON_GetArrayItem(specs, i);
		int spec_index = cJSON_GetArrayItem(origin, i)->valueint;
		kspec_get_spec_t gs;
		const char *meta;
		size_t meta_len;
		ks_hash_t key;
		cJSON *ex;

		if (spec_of_json(s, &gs, dims, dyn) != 0) {
			fprintf(stderr, "kspec: specs[%d]: not a get-spec\n",
			    spec_index);
			status = EXIT_FAIL;
			continue;
		}
		/* Only what is cached: a bundle never costs a compile. */
		rc = kspec_explain(c, &gs, &text);
		ex = rc ? NULL : cJSON_Parse(text);
		kspec_free(text);
		if (rc || !ex) {
			fprintf(stderr, "kspec: specs[%d]: ", spec_index);
			status = fail(c, rc ? rc : KSPEC_E_PROTO);
			cJSON_Delete(ex);
			continue;
		}
		x = cJSON_GetObjectItemCaseSensitive(ex, "cached");
		if (!cJSON_IsString(x)) {
			cJSON_AddItemToArray(missing, cJSON_CreateNumber(
			    spec_index));
			if (!as_json)
				fprintf(stderr, "kspec: specs[%d]: %s is not "
				    "cached; left out (warm it first)\n",
				    spec_index, gs.kernel);
			status = EXIT_FAIL;
			cJSON_Delete(ex);
			continue;
		}
		cJSON_Delete(ex);
		rc = kspec_get(c, &gs, &a);
		if (rc) {
			fprintf(stderr, "kspec: specs[%d]: ", spec_index);
			status = fail(c, rc);
			continue;
		}
		ks_buf_init(&one);
		if (stored_meta(a, &meta, &meta_len) != 0 ||
		    ks_hash_from_hex(a->key, &key) != KS_OK ||
		    ks_entry_seal(&sk, &key, meta, meta_len, a->bytes, a->len,
		    &one) != KS_OK || ks_bundle_add(&entries, &one) != KS_OK) {
			fprintf(stderr, "kspec: specs[%d]: cannot make its "
			    "entry\n", spec_index);
			status = EXIT_FAIL;
		} else {
			exported++;
		}
		ks_buf_close(&one);
		kspec_artifact_free(a);
	}
	kspec_close(c);
	ks_buf_init(&bundle);
	ks_bundle_begin(&bundle, (uint32_t)exported);
	ks_buf_append(&bundle, entries.data, entries.len);
	ks_buf_close(&entries);
	if (write_file(out, bundle.data, bundle.len, 0) != 0) {
		status = EXIT_FAIL;    /* it said why */
	} else if (as_json) {
		cJSON_AddNumberToObject(report, "exported", exported);
		cJSON_AddNumberToObject(report, "bytes", (double)bundle.len);
		cJSON_AddStringToObject(report, "file", out);
		text = cJSON_PrintUnformatted(report);
		puts(text ? text : "{}");
		free(text);
	} else {
		printf("exported %d of %d specs (%zu bytes) to %s\n", exported,
		    n, bundle.len, out);
	}
	ks_buf_close(&bundle);
	cJSON_Delete(report);
	rc = status;
done_json:
	sodium_memzero(&sk, sizeof sk);
	cJSON_Delete(man);
	cJSON_Delete(specs);
	cJSON_Delete(origin);
	return rc;
}

static int bundle_import(const char *socket_path, const char *file,
    int as_json)
{
	kspec_client_t *c = NULL;
	char path[PATH_MAX], *fields, *text = NULL;
	const cJSON *r;
	cJSON *reply;
	ks_buf_t f;
	int rc;

	/* The daemon reads the file: it needs the whole path. */
	if (!realpath(file, path)) {
		fprintf(stderr, "kspec: %s: %s\n", file, strerror(errno));
		return EXIT_FAIL;
	}
	ks_buf_init(&f);
	ks_buf_puts(&f, "\"path\":");
	ks_buf_json_str(&f, path);
	fields = f.data;
	rc = open_client(socket_path, &c);
	if (rc) {
		ks_buf_close(&f);
		return rc;
	}
	rc = kspec_call(c, "import", fields, &text);
	ks_buf_close(&f);
	if (rc) {
		rc = fail(c, rc);
		kspec_close(c);
		return rc;
	}
	kspec_close(c);
	reply = cJSON_Parse(text);
	if (as_json) {
		puts(text);
	} else if (reply) {
		double listed = 0;

		cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(reply,
		    "refusals")) {
			fprintf(stderr, "kspec: entry %.0f refused: %s: %s\n",
			    jnum(r, "index"), jstr(r, "code"),
			    jstr(r, "message"));
			listed++;
		}
		if (jnum(reply, "refused") > listed)
			fprintf(stderr, "kspec: %.0f more entries refused (the "
			    "daemon lists the first %.0f)\n",
			    jnum(reply, "refused") - listed, listed);
		printf("imported %.0f of %.0f entries (%.0f already stored, "
		    "%.0f refused)\n", jnum(reply, "imported"),
		    jnum(reply, "entries"), jnum(reply, "present"),
		    jnum(reply, "refused"));
	}
	rc = reply && jnum(reply, "refused") == 0 ? EXIT_OK : EXIT_FAIL;
	cJSON_Delete(reply);
	kspec_free(text);
	return rc;
}

static int cmd_bundle(const char *socket_path, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "sign-key", required_argument, NULL, 'k' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *out = NULL, *key = NULL, *args[3];
	int ch, nargs = 0, as_json = 0;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "-:ho:", opts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			fputs(usage_bundle, stdout);
			return EXIT_OK;
		case 'o':
			out = optarg;
			break;
		case 'k':
			key = optarg;
			break;
		case 'j':
			as_json = 1;
			break;
		case 1:
			if (nargs == 2)
				return usage_error("bundle", "unexpected "
				    "argument '%s'", optarg);
			args[nargs++] = optarg;
			break;
		case ':':
			return usage_error("bundle", "%s needs a value",
			    argv[optind - 1]);
		default:
			return bad_option("bundle", optopt, argv[optind - 1]);
		}
	}
	if (nargs == 2 && strcmp(args[0], "export") == 0) {
		if (!out || !key)
			return usage_error("bundle", "export needs -o FILE and "
			    "--sign-key PREFIX.secret");
		return bundle_export(socket_path, args[1], out, key, as_json);
	}
	if (nargs == 2 && strcmp(args[0], "import") == 0) {
		if (out || key)
			return usage_error("bundle", "import takes FILE only");
		return bundle_import(socket_path, args[1], as_json);
	}
	return usage_error("bundle", "give: export MANIFEST -o FILE "
	    "--sign-key KEY, or import FILE");
}

/* ---- main ---- */

static const struct {
	const char *name;
	const char *usage;
} commands[] = {
	{ "ping", usage_ping },
	{ "get", usage_get },
	{ "stats", usage_stats },
	{ "hello", usage_hello },
	{ "kernels", usage_kernels },
	{ "explain", usage_explain },
	{ "warm", usage_warm },
	{ "ls", usage_ls },
	{ "evict", usage_evict },
	{ "audit", usage_audit },
	{ "manifest", usage_manifest },
	{ "canary", usage_canary },
	{ "ready", usage_ready },
	{ "deploy", usage_deploy },
	{ "fleet-key", usage_fleet_key },
	{ "bundle", usage_bundle },
	{ "quantize", usage_quantize },
};

static const char *usage_of(const char *cmd)
{
	size_t i;

	for (i = 0; i < sizeof commands / sizeof commands[0]; i++) {
		if (strcmp(cmd, commands[i].name) == 0)
			return commands[i].usage;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	const char *socket_path = NULL, *cmd, *u;
	int i;

	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "--socket") == 0) {
			if (i + 1 == argc || !argv[i + 1][0])
				return usage_error(NULL, "--socket needs a "
				    "path");
			socket_path = argv[++i];
		} else if (strncmp(argv[i], "--socket=", 9) == 0) {
			if (!argv[i][9])
				return usage_error(NULL, "--socket needs a "
				    "path");
			socket_path = argv[i] + 9;
		} else if (strcmp(argv[i], "--help") == 0 ||
		    strcmp(argv[i], "-h") == 0) {
			fputs(usage_main, stdout);
			return EXIT_OK;
		} else if (strcmp(argv[i], "--version") == 0) {
			printf("kspec %s\n", KSPEC_VERSION);
			return EXIT_OK;
		} else {
			return usage_error(NULL, "unknown option '%s'",
			    argv[i]);
		}
	}
	if (i == argc)
		return usage_error(NULL, "missing command");
	cmd = argv[i];
	argc -= i;
	argv += i;
	if (strcmp(cmd, "help") == 0) {
		if (argc < 2) {
			fputs(usage_main, stdout);
			return EXIT_OK;
		}
		u = usage_of(argv[1]);
		if (!u)
			return usage_error(NULL, "unknown command '%s'",
			    argv[1]);
		fputs(u, stdout);
		return EXIT_OK;
	}
	if (strcmp(cmd, "ping") == 0)
		return cmd_ping(socket_path, argc, argv);
	if (strcmp(cmd, "get") == 0)
		return cmd_get(socket_path, argc, argv);
	if (strcmp(cmd, "stats") == 0)
		return cmd_json(socket_path, argc, argv, 1);
	if (strcmp(cmd, "hello") == 0)
		return cmd_json(socket_path, argc, argv, 0);
	if (strcmp(cmd, "kernels") == 0 || strcmp(cmd, "ls") == 0 ||
	    strcmp(cmd, "evict") == 0)
		return cmd_simple(socket_path, cmd, argc, argv);
	if (strcmp(cmd, "audit") == 0)
		return cmd_audit(socket_path, argc, argv);
	if (strcmp(cmd, "explain") == 0)
		return cmd_explain(socket_path, argc, argv);
	if (strcmp(cmd, "warm") == 0)
		return cmd_warm(socket_path, argc, argv);
	if (strcmp(cmd, "manifest") == 0)
		return cmd_manifest(socket_path, argc, argv);
	if (strcmp(cmd, "canary") == 0)
		return cmd_canary(socket_path, argc, argv);
	if (strcmp(cmd, "ready") == 0)
		return cmd_ready(socket_path, argc, argv);
	if (strcmp(cmd, "deploy") == 0)
		return cmd_deploy(socket_path, argc, argv);
	if (strcmp(cmd, "fleet-key") == 0)
		return cmd_fleet_key(argc, argv);
	if (strcmp(cmd, "bundle") == 0)
		return cmd_bundle(socket_path, argc, argv);
	if (strcmp(cmd, "quantize") == 0)
		return cmd_quantize(argc, argv);
	return usage_error(NULL, "unknown command '%s'", cmd);
}
