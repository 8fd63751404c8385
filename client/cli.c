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
 */
#define _POSIX_C_SOURCE 200809L
#include "../include/kspec.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

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
"  hello            the daemon's version and backends, as JSON\n"
"  help [COMMAND]   this text, or a command's\n"
"\n"
"options:\n"
"  --socket PATH    daemon socket (default: $KSPEC_SOCKET, else\n"
"                   $XDG_RUNTIME_DIR/kspec/kspecd.sock, else\n"
"                   /tmp/kspec-$UID/kspecd.sock)\n"
"  -h, --help       this text\n"
"\n"
"exit status: 0 ok, 1 daemon or request error, 2 usage error,\n"
"3 connection error\n";

static const char usage_ping[] =
"usage: kspec [--socket PATH] ping\n"
"\n"
"Sends a ping and prints the round-trip time.\n";

static const char usage_get[] =
"usage: kspec [--socket PATH] get KERNEL --backend cpu|cuda|opencl\n"
"           [--target T] [--format F] [--mode exact|fast]\n"
"           --dtype f32|f16|bf16 --shape M=1,N=4096,K=4096\n"
"           [--dynamic M,...] -o FILE [--meta FILE.json]\n"
"\n"
"Fetches the artifact of KERNEL specialized for the shape, compiling it\n"
"if no cache holds it.  Writes the artifact to FILE (through FILE.tmp and\n"
"a rename) and the reply's metadata, as JSON, to --meta.  Without -o only\n"
"the metadata is fetched.  Prints one summary line.\n"
"\n"
"  --backend B      cpu, cuda or opencl\n"
"  --target T       backend target (default: auto)\n"
"  --format F       artifact format (default: the backend's)\n"
"  --mode M         exact (default) or fast\n"
"  --dtype D        f32, f16 or bf16\n"
"  --shape LIST     NAME=INTEGER,... constants of the kernel (repeatable)\n"
"  --dynamic LIST   NAME,... parameters left dynamic (repeatable)\n"
"  -o, --output F   where to write the artifact\n"
"  --meta F         where to write the reply metadata (JSON)\n";

static const char usage_stats[] =
"usage: kspec [--socket PATH] stats [--json]\n"
"\n"
"Prints the daemon's counters as a table, or with --json the daemon's\n"
"reply verbatim.\n";

static const char usage_hello[] =
"usage: kspec [--socket PATH] hello\n"
"\n"
"Prints the daemon's hello reply (protocol and server versions, backends)\n"
"as JSON.\n";

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
static int write_file(const char *path, const void *data, size_t len,
    int newline)
{
	size_t n = strlen(path);
	char *tmp = malloc(n + sizeof ".tmp");
	int fd, err = 0;

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

static int cmd_get(const char *socket_path, int argc, char **argv)
{
	enum { O_BACKEND = 256, O_TARGET, O_FORMAT, O_MODE, O_DTYPE, O_SHAPE,
	    O_DYNAMIC, O_META };
	static const struct option opts[] = {
		{ "backend", required_argument, NULL, O_BACKEND },
		{ "target", required_argument, NULL, O_TARGET },
		{ "format", required_argument, NULL, O_FORMAT },
		{ "mode", required_argument, NULL, O_MODE },
		{ "dtype", required_argument, NULL, O_DTYPE },
		{ "shape", required_argument, NULL, O_SHAPE },
		{ "dynamic", required_argument, NULL, O_DYNAMIC },
		{ "output", required_argument, NULL, 'o' },
		{ "meta", required_argument, NULL, O_META },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	kspec_get_spec_t spec = { 0 };
	kspec_artifact_t *a = NULL;
	kspec_client_t *c = NULL;
	const char *out = NULL, *meta = NULL;
	dims_t d = { .nshape = 0 };
	int ch, rc;

	optind = 1;
	opterr = 0;
	/* "-" returns operands in order (as option 1), whatever
	 * POSIXLY_CORRECT says; ":" reports a missing argument as ':'. */
	while ((ch = getopt_long(argc, argv, "-:ho:", opts, NULL)) != -1) {
		rc = 0;
		switch (ch) {
		case 1:
			if (spec.kernel)
				return usage_error("get", "unexpected "
				    "argument '%s'", optarg);
			spec.kernel = optarg;
			break;
		case 'h':
			fputs(usage_get, stdout);
			return EXIT_OK;
		case 'o': out = optarg; break;
		case O_META: meta = optarg; break;
		case O_BACKEND: spec.backend = optarg; break;
		case O_TARGET: spec.target = optarg; break;
		case O_FORMAT: spec.format = optarg; break;
		case O_MODE: spec.mode = optarg; break;
		case O_DTYPE: spec.dtype = optarg; break;
		case O_SHAPE: rc = parse_shape(optarg, &d); break;
		case O_DYNAMIC: rc = parse_dynamic(optarg, &d); break;
		case ':':
			return usage_error("get", "%s needs a value",
			    argv[optind - 1]);
		default:
			return bad_option("get", optopt, argv[optind - 1]);
		}
		if (rc)
			return rc;
	}
	if (!spec.kernel)
		return usage_error("get", "missing KERNEL");
	if (!spec.backend)
		return usage_error("get", "missing --backend");
	if (!spec.dtype)
		return usage_error("get", "missing --dtype");
	if (!out && !meta)
		return usage_error("get", "missing -o FILE (or --meta FILE)");
	spec.shape = d.shape;
	spec.nshape = d.nshape;
	spec.dynamic = d.dynamic;
	spec.ndynamic = d.ndynamic;
	spec.meta_only = !out;

	rc = open_client(socket_path, &c);
	if (rc)
		return rc;
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
	if (!rc)
		printf("%s: variant %s, source %s, %" PRIu64 " bytes%s, "
		    "key %.12s -> %s\n", a->kernel[0] ? a->kernel : spec.kernel,
		    a->variant, a->source, out ? (uint64_t)a->len : a->size,
		    out ? "" : " (metadata only)", a->key, out ? out : meta);
	kspec_artifact_free(a);
	return rc;
}

/* ---- stats ---- */

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

/* Prints V as "dotted.name value" lines; arrays as name[i]. */
static void print_flat(const char *prefix, const cJSON *v)
{
	char name[256];
	const cJSON *c;
	int i = 0;

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
			if (!is_stats)
				return usage_error(cmd, "unknown option '%s'",
				    argv[optind - 1]);
			as_json = 1;
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

static int cmd_ping(const char *socket_path, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct timespec t0, t1;
	kspec_client_t *c = NULL;
	int ch, rc;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "-:h", opts, NULL)) != -1) {
		if (ch == 'h') {
			fputs(usage_ping, stdout);
			return EXIT_OK;
		}
		if (ch == 1)
			return usage_error("ping", "unexpected argument '%s'",
			    optarg);
		return bad_option("ping", optopt, argv[optind - 1]);
	}
	rc = open_client(socket_path, &c);
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
	printf("pong from %s in %.3f ms\n", kspec_socket_path(c),
	    (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
	    (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
	kspec_close(c);
	return EXIT_OK;
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
	return usage_error(NULL, "unknown command '%s'", cmd);
}
