/*
 * kspecd: command line and defaults.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server.h"

static const char usage[] =
"usage: kspecd [--socket PATH] [--store PATH] [--max-bytes N]\n"
"              [--hot-bytes N] [--workers N] [--verbose]\n"
"\n"
"  --socket PATH    Unix socket (default $KSPEC_SOCKET, else\n"
"                   $XDG_RUNTIME_DIR/kspec/kspecd.sock, else\n"
"                   /tmp/kspec-$UID/kspecd.sock)\n"
"  --store PATH     sqlite store (default $KSPEC_STORE, else\n"
"                   $XDG_CACHE_HOME/kspec/kspec.db, else\n"
"                   ~/.cache/kspec/kspec.db)\n"
"  --max-bytes N    byte budget of the store, LRU eviction (0: none;\n"
"                   suffixes K, M, G)\n"
"  --hot-bytes N    byte budget of the memory tier (default 256M)\n"
"  --workers N      compile threads (default: number of CPUs, max 8)\n"
"  --verbose        log every request at debug level\n";

static int parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	switch (*end) {
	case 'K': case 'k': mul = 1ull << 10; end++; break;
	case 'M': case 'm': mul = 1ull << 20; end++; break;
	case 'G': case 'g': mul = 1ull << 30; end++; break;
	}
	if (*end || (v && mul > UINT64_MAX / v))
		return -1;
	*out = v * mul;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, 0, 's' },
		{ "store", required_argument, 0, 'd' },
		{ "max-bytes", required_argument, 0, 'm' },
		{ "hot-bytes", required_argument, 0, 'h' },
		{ "workers", required_argument, 0, 'w' },
		{ "verbose", no_argument, 0, 'v' },
		{ "help", no_argument, 0, 'H' },
		{ "version", no_argument, 0, 'V' },
		{ 0, 0, 0, 0 },
	};
	ks_server_config_t cfg;
	uint64_t v;
	int c;

	if (ks_server_defaults(&cfg) != 0) {
		fprintf(stderr, "kspecd: cannot determine default paths "
		    "(set KSPEC_SOCKET and KSPEC_STORE)\n");
		return 2;
	}
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s",
			    optarg);
			break;
		case 'd':
			snprintf(cfg.store_path, sizeof cfg.store_path, "%s",
			    optarg);
			break;
		case 'm':
		case 'h':
			if (parse_bytes(optarg, &v) != 0) {
				fprintf(stderr, "kspecd: bad byte count '%s'\n",
				    optarg);
				return 2;
			}
			if (c == 'm')
				cfg.max_bytes = v;
			else
				cfg.hot_bytes = v;
			break;
		case 'w':
			cfg.workers = atoi(optarg);
			if (cfg.workers < 1 || cfg.workers > 64) {
				fprintf(stderr, "kspecd: --workers must be "
				    "1..64\n");
				return 2;
			}
			break;
		case 'v':
			ks_log_set_level(KS_LOG_DEBUG);
			break;
		case 'H':
			fputs(usage, stdout);
			return 0;
		case 'V':
			printf("kspecd %s\n", KS_SERVER_VERSION);
			return 0;
		default:
			fputs(usage, stderr);
			return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "kspecd: unexpected argument '%s'\n%s",
		    argv[optind], usage);
		return 2;
	}
	return ks_server_run(&cfg) == 0 ? 0 : 1;
}
