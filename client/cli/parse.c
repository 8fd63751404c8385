/*
 * The option parser of every command: a command's table of options
 * (cli.h) becomes getopt_long's, so that every command reads its line
 * the same way, and each option found goes where its row says.
 *
 * getopt_long runs with "-:" before the short options: "-" returns the
 * operands in order, as option 1, whatever POSIXLY_CORRECT says, so an
 * operand is checked where it stands; ":" reports an option without its
 * value as ':' instead of printing a message of its own.
 */
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* Options in one table, -h and --help aside. */
#define CLI_MAX_OPTS 32

/* The long options' values: an option's row is its value less this,
 * above every short option's letter. */
#define LONG_BASE 256

int usage_error(const char *cmd, const char *fmt, ...)
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

/* The row of OPTS that getopt_long's value CH stands for. */
static const cli_opt_t *row_of(const cli_opt_t *opts, int ch)
{
	const cli_opt_t *o;

	if (ch >= LONG_BASE)
		return &opts[ch - LONG_BASE];
	for (o = opts; o->kind != CLI_END; o++)
		if (o->letter == ch)
			return o;
	return NULL;
}

/* Fills LONGS and SHORTS (getopt_long's) from OPTS. */
static void getopt_tables(const cli_opt_t *opts, struct option *longs,
    char *shorts)
{
	size_t i, n = 0, k = 3;

	memcpy(shorts, "-:h", k);
	for (i = 0; opts[i].kind != CLI_END; i++) {
		int has_arg = opts[i].kind == CLI_VALUE ? required_argument :
		    no_argument;

		if (opts[i].kind == CLI_OPERAND)
			continue;
		if (opts[i].name)
			longs[n++] = (struct option){ opts[i].name, has_arg,
			    NULL, LONG_BASE + (int)i };
		if (opts[i].letter) {
			shorts[k++] = opts[i].letter;
			if (has_arg == required_argument)
				shorts[k++] = ':';
		}
	}
	longs[n++] = (struct option){ "help", no_argument, NULL, 'h' };
	longs[n] = (struct option){ NULL, 0, NULL, 0 };
	shorts[k] = '\0';
}

/* Takes option or operand row O, with VALUE, into ARGS. */
static int take(const cli_cmd_t *cmd, const cli_opt_t *o, void *args,
    char *value)
{
	char *at = (char *)args + o->at;

	if (o->take)
		return o->take(cmd, args, o, value);
	if (o->kind == CLI_FLAG)
		++*(int *)(void *)at;
	else
		*(const char **)(void *)at = value;
	return 0;
}

int cli_parse(const cli_cmd_t *cmd, int argc, char **argv,
    const cli_opt_t *opts, void *args)
{
	struct option longs[CLI_MAX_OPTS + 2];
	char shorts[2 * CLI_MAX_OPTS + 4];
	const cli_opt_t *o, *operand = opts;
	int ch, rc;

	for (o = opts; o->kind != CLI_END; o++)
		;
	assert(o - opts <= CLI_MAX_OPTS);
	getopt_tables(opts, longs, shorts);
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
		switch (ch) {
		case 'h':
			fputs(cmd->usage, stdout);
			return EXIT_OK;
		case ':':
			return usage_error(cmd->name, "%s needs a value",
			    argv[optind - 1]);
		case '?':
			/* An unknown letter is in optopt; anything else (an
			 * unknown or ambiguous --NAME, a value given to a
			 * flag) is the argument just read. */
			if (optopt > 0 && optopt < LONG_BASE &&
			    optopt != 'h')
				return usage_error(cmd->name, "unknown option "
				    "'-%c'", optopt);
			return usage_error(cmd->name, "unknown option '%s'",
			    argv[optind - 1]);
		case 1:
			while (operand->kind != CLI_END &&
			    operand->kind != CLI_OPERAND)
				operand++;
			if (operand->kind == CLI_END)
				return usage_error(cmd->name, "unexpected "
				    "argument '%s'", optarg);
			o = operand++;
			break;
		default:
			o = row_of(opts, ch);
			assert(o);      /* getopt_long returns only our letters */
			break;
		}
		rc = take(cmd, o, args, o->kind == CLI_VALUE ||
		    o->kind == CLI_OPERAND ? optarg : NULL);
		if (rc)
			return rc;
	}
	return CLI_GO_ON;
}
