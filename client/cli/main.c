/*
 * kspec's main(): the options that come before the command, and the
 * command table.  A new command is a row of commands[] (in the order
 * kspec --help lists them) and a function in the file of its group
 * (docs/architecture.md).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "cli.h"

static cli_run_t cmd_help;

static const cli_cmd_t commands[] = {
	{ "ping", cmd_ping, usage_ping, "ping", "check that kspecd answers",
	    CLI_DAEMON },
	{ "get", cmd_get, usage_get, "get KERNEL ...",
	    "fetch a compiled kernel artifact (see kspec get --help)",
	    CLI_DAEMON },
	{ "stats", cmd_stats, usage_stats, "stats [--all | --json]",
	    "the daemon's counters", CLI_DAEMON },
	{ "kernels", cmd_kernels, usage_kernels, "kernels [--json]",
	    "the kernel library: parameters, variants, guards", CLI_DAEMON },
	{ "explain", cmd_explain, usage_explain, "explain KERNEL ...",
	    "which variant and key a get would use, cached or not",
	    CLI_DAEMON },
	{ "warm", cmd_warm, usage_warm, "warm MANIFEST",
	    "compile every spec of a manifest (docs/cli.md)", CLI_DAEMON },
	{ "ready", cmd_ready, usage_ready, "ready MANIFEST|DEPLOYMENT",
	    "whether every spec is cached (--wait)", CLI_DAEMON },
	{ "deploy", cmd_deploy, usage_deploy, "deploy add|ls|rm",
	    "deployments: named manifests whose kernels are pinned",
	    CLI_DAEMON },
	{ "ls", cmd_ls, usage_ls, "ls [--json]",
	    "the stored artifacts (filters, paging)", CLI_DAEMON },
	{ "evict", cmd_evict, usage_evict, "evict ...",
	    "remove stored artifacts by key, filter, all or stale",
	    CLI_DAEMON },
	{ "audit", cmd_audit, usage_audit, "audit ...",
	    "recompile stored artifacts and compare their bytes",
	    CLI_DAEMON },
	{ "manifest", cmd_manifest, usage_manifest, "manifest --from-misses",
	    "the daemon's recorded misses as a warm manifest", CLI_DAEMON },
	{ "canary", cmd_canary, usage_canary, "canary ...",
	    "run the known-answer canaries now, or show their state",
	    CLI_DAEMON },
	{ "hello", cmd_hello, usage_hello, "hello",
	    "the daemon's version and backends, as JSON", CLI_DAEMON },
	{ "bundle", cmd_bundle, usage_bundle, "bundle ...",
	    "export cached artifacts as a signed file, or import one",
	    CLI_DAEMON },
	{ "fleet-key", cmd_fleet_key, usage_fleet_key,
	    "fleet-key generate PREFIX", "a key pair to sign bundles with",
	    0 },
	{ "quantize", cmd_quantize, usage_quantize, "quantize FORMAT",
	    "f32 weights to q8_0, q4_0 or q4_k blocks (no daemon)", 0 },
	/* kspec --help is help's usage: kspec help help names no command. */
	{ "help", cmd_help, NULL, "help [COMMAND]",
	    "this text, or a command's", 0 },
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

/* kspec --help: a command's synopsis wider than its column is followed
 * by two spaces. */
static void print_usage(void)
{
	size_t i;

	fputs("usage: kspec [--socket PATH] <command> [options]\n"
	    "\n"
	    "commands:\n", stdout);
	for (i = 0; i < NCOMMANDS; i++)
		printf("  %-16s%s%s\n", commands[i].synopsis,
		    strlen(commands[i].synopsis) > 16 ? "  " : " ",
		    commands[i].summary);
	fputs("\n"
	    "options:\n"
	    "  --socket PATH    daemon socket (default: $KSPEC_SOCKET, else\n"
	    "                   $XDG_RUNTIME_DIR/kspec/kspecd.sock, else\n"
	    "                   /tmp/kspec-$UID/kspecd.sock)\n"
	    "  -h, --help       this text\n"
	    "  --version        kspec's version\n"
	    "\n"
	    "exit status: 0 ok, 1 daemon or request error, 2 usage error,\n"
	    "3 connection error, 130 warm interrupted\n", stdout);
}

static const cli_cmd_t *command_of(const char *name)
{
	size_t i;

	for (i = 0; i < NCOMMANDS; i++)
		if (strcmp(name, commands[i].name) == 0)
			return &commands[i];
	return NULL;
}

/* help [COMMAND]: its word is a command's name, never an option. */
static int cmd_help(const cli_cmd_t *cmd, const char *socket, int argc,
    char **argv)
{
	const cli_cmd_t *c;

	/* help, help --help and help -h: the command list. */
	if (argc < 2 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0) {
		print_usage();
		return EXIT_OK;
	}
	c = command_of(argv[1]);
	if (!c || !c->usage)
		return usage_error(NULL, "unknown command '%s'", argv[1]);
	fputs(c->usage, stdout);
	return EXIT_OK;
}

int main(int argc, char **argv)
{
	const char *socket = NULL;
	const cli_cmd_t *c;
	int i;

	/* The options before the command are matched whole, never
	 * abbreviated: a command's own options are cli_parse's. */
	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "--socket") == 0) {
			if (i + 1 == argc || !argv[i + 1][0])
				return usage_error(NULL, "--socket needs a "
				    "path");
			socket = argv[++i];
		} else if (strncmp(argv[i], "--socket=", 9) == 0) {
			if (!argv[i][9])
				return usage_error(NULL, "--socket needs a "
				    "path");
			socket = argv[i] + 9;
		} else if (strcmp(argv[i], "--help") == 0 ||
		    strcmp(argv[i], "-h") == 0) {
			print_usage();
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
	c = command_of(argv[i]);
	if (!c)
		return usage_error(NULL, "unknown command '%s'", argv[i]);
	return c->run(c, c->flags & CLI_DAEMON ? socket : NULL, argc - i,
	    argv + i);
}
