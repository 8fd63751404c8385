/*
 * kspecd: command line and defaults.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http.h"
#include "remote.h"
#include "server.h"

static const char usage[] =
"usage: kspecd [--socket PATH] [--store PATH] [--max-bytes N]\n"
"              [--hot-bytes N] [--workers N] [--compile-timeout S]\n"
"              [--worker-memory N] [--worker-jobs N] [--worker-rss N]\n"
"              [--max-conns-per-user N] [--idle-timeout S]\n"
"              [--read-timeout S] [--socket-group G] [--admin-group G]\n"
"              [--refuse-corrupt-store] [--no-fast-path]\n"
"              [--log-level L] [--log-format text|json]\n"
"              [--metrics-listen ADDR] [--metrics-any-host]\n"
"              [--fleet-key FILE]... [--remote URL]\n"
"              [--remote-password-file FILE] [--remote-timeout MS]\n"
"              [--remote-lease-wait S] [--fleet-sign-key FILE]\n"
"              [--audit-interval S] [--audit-budget S]\n"
"\n"
"  --socket PATH    Unix socket (default $KSPEC_SOCKET, else\n"
"                   $XDG_RUNTIME_DIR/kspec/kspecd.sock, else\n"
"                   /tmp/kspec-$UID/kspecd.sock); a socket passed by a\n"
"                   service manager (LISTEN_FDS) is served instead\n"
"  --store PATH     sqlite store (default $KSPEC_STORE, else\n"
"                   $XDG_CACHE_HOME/kspec/kspec.db, else\n"
"                   ~/.cache/kspec/kspec.db)\n"
"  --max-bytes N    byte budget of the store, LRU eviction (0: none;\n"
"                   suffixes K, M, G)\n"
"  --hot-bytes N    byte budget of the memory tier (default 256M)\n"
"  --workers N      compile worker processes, 1..64 (default: the number\n"
"                   of CPUs, at most 16), and one reserve worker beside\n"
"                   them for a lone client's get\n"
"  --compile-timeout S  seconds a compile may run before its worker is\n"
"                   killed (default 120; 0: no limit)\n"
"  --worker-memory N  memory limit of each worker, RLIMIT_DATA (default\n"
"                   1G; 0: none)\n"
"  --worker-jobs N  compiles after which a worker is replaced (default\n"
"                   500; 0: never)\n"
"  --worker-rss N   resident size above which a worker is replaced after\n"
"                   its compile (default 768M; 0: never)\n"
"  --max-conns-per-user N  connections one uid may hold (default 256)\n"
"  --idle-timeout S seconds after which a connection with nothing pending\n"
"                   is closed (default 300; 0: never)\n"
"  --read-timeout S seconds within which a request that has begun must\n"
"                   arrive whole (default 10; 0: no limit)\n"
"  --socket-group G the socket is open to group G (name or gid): mode\n"
"                   0660, and its members are admitted (default: only\n"
"                   the daemon's uid and root)\n"
"  --admin-group G  members of G may evict as well (the daemon's uid and\n"
"                   root always may)\n"
"  --refuse-corrupt-store  do not start on a store that cannot be\n"
"                   opened or migrated (not a database, damaged, another\n"
"                   schema; default: move it aside, start empty)\n"
"  --no-fast-path   parse every get in full (to compare; the fast path\n"
"                   gives the same answers)\n"
"  --log-level L    error, warn, info (default) or debug: one line per\n"
"                   request (op, key, source, microseconds, error code)\n"
"  --log-format F   text (default) or json, one object per line\n"
"  --verbose        the same as --log-level debug\n"
"  --metrics-listen ADDR  serve /metrics (Prometheus), /api/stats and a\n"
"                   dashboard page at / over HTTP on ADDR: a Unix socket\n"
"                   path (with a '/'; the socket's group and mode) or\n"
"                   HOST:PORT on loopback (127.0.0.1:9464, [::1]:9464)\n"
"  --metrics-any-host  let --metrics-listen take a HOST that is not\n"
"                   loopback, and answer any Host header (the\n"
"                   listener has no authentication)\n"
"  --fleet-key FILE a fleet public key (kspec fleet-key generate): signed\n"
"                   entries it verifies are accepted (kspec bundle\n"
"                   import, the remote tier); up to 8, for rotation\n"
"  --remote URL     the fleet's remote tier, a Redis: redis://HOST:PORT[/DB]\n"
"                   or unix:/PATH[?db=N]; looked up after a local miss,\n"
"                   before a compile (needs --fleet-key)\n"
"  --remote-password-file FILE  Redis's password (AUTH), one line in a\n"
"                   file only its user can read (mode 0600 or 0400)\n"
"  --remote-timeout MS  deadline of every Redis command (default 100)\n"
"  --remote-lease-wait S  how long to wait for another node's compile of\n"
"                   a key it holds the lease of, 0..3600 (default 60)\n"
"  --fleet-sign-key FILE  the fleet secret key: what this node compiles\n"
"                   is published to --remote, signed (without it the\n"
"                   node only reads)\n"
"  --audit-interval S  the key audit: while workers are idle, recompile\n"
"                   one stored entry every S seconds and compare its\n"
"                   bytes (default 60; 0: off; kspec audit runs it on\n"
"                   demand)\n"
"  --audit-budget S compile seconds the background audit may spend per\n"
"                   hour (default 60; 0: no limit)\n"
"  --version        kspecd's version\n"
"  -h, --help       this text\n";

static int parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
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

/* A group by name, or a number. */
static int group_id(const char *name, long *gid)
{
	struct group gr, *res = NULL;
	char buf[16384], *end;
	long v;

	if (getgrnam_r(name, &gr, buf, sizeof buf, &res) == 0 && res) {
		*gid = (long)res->gr_gid;
		return 0;
	}
	errno = 0;
	v = strtol(name, &end, 10);
	if (errno || *end || end == name || v < 0)
		return -1;
	*gid = v;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, 0, 's' },
		{ "store", required_argument, 0, 'd' },
		{ "max-bytes", required_argument, 0, 'm' },
		{ "hot-bytes", required_argument, 0, 'b' },
		{ "workers", required_argument, 0, 'w' },
		{ "compile-timeout", required_argument, 0, 't' },
		{ "worker-memory", required_argument, 0, 'M' },
		{ "worker-jobs", required_argument, 0, 'j' },
		{ "worker-rss", required_argument, 0, 'r' },
		{ "max-conns-per-user", required_argument, 0, 'u' },
		{ "idle-timeout", required_argument, 0, 'i' },
		{ "read-timeout", required_argument, 0, 'R' },
		{ "socket-group", required_argument, 0, 'g' },
		{ "admin-group", required_argument, 0, 'a' },
		{ "refuse-corrupt-store", no_argument, 0, 'C' },
		{ "no-fast-path", no_argument, 0, 'F' },
		{ "log-level", required_argument, 0, 'L' },
		{ "log-format", required_argument, 0, 'O' },
		{ "verbose", no_argument, 0, 'v' },
		{ "metrics-listen", required_argument, 0, 'P' },
		{ "metrics-any-host", no_argument, 0, 'A' },
		{ "fleet-key", required_argument, 0, 'K' },
		{ "remote", required_argument, 0, 'X' },
		{ "remote-password-file", required_argument, 0, 'Y' },
		{ "remote-timeout", required_argument, 0, 'T' },
		{ "remote-lease-wait", required_argument, 0, 'W' },
		{ "fleet-sign-key", required_argument, 0, 'S' },
		{ "audit-interval", required_argument, 0, 'I' },
		{ "audit-budget", required_argument, 0, 'B' },
		{ "help", no_argument, 0, 'H' },
		{ "version", no_argument, 0, 'V' },
		{ 0, 0, 0, 0 },
	};
	ks_server_config_t cfg;
	uint64_t v;
	char *end;
	int c;

	/* The daemon re-executes itself as a compile worker (pool.c). */
	if (argc > 1 && strcmp(argv[1], "--worker") == 0)
		return ks_server_worker(argc, argv);

	if (ks_server_defaults(&cfg) != 0) {
		fprintf(stderr, "kspecd: cannot determine default paths "
		    "(set KSPEC_SOCKET and KSPEC_STORE)\n");
		return 2;
	}
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			snprintf(cfg.socket_path, sizeof cfg.socket_path, "%s",
			    optarg);
			cfg.socket_given = 1;
			break;
		case 'd':
			snprintf(cfg.store_path, sizeof cfg.store_path, "%s",
			    optarg);
			break;
		case 'm':
		case 'b':
		case 'M':
		case 'r':
			if (parse_bytes(optarg, &v) != 0) {
				fprintf(stderr, "kspecd: bad byte count '%s'\n",
				    optarg);
				return 2;
			}
			if (c == 'm')
				cfg.max_bytes = v;
			else if (c == 'b')
				cfg.hot_bytes = v;
			else if (c == 'M')
				cfg.worker_memory = v;
			else
				cfg.worker_rss = v;
			break;
		case 'w':
			errno = 0;
			v = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg || v < 1 ||
			    v > KS_MAX_WORKERS) {
				fprintf(stderr, "kspecd: --workers must be "
				    "1..%d\n", KS_MAX_WORKERS);
				return 2;
			}
			cfg.workers = (int)v;
			break;
		case 'C':
			cfg.refuse_corrupt_store = 1;
			break;
		case 'F':
			cfg.no_fast_path = 1;
			break;
		case 'g':
		case 'a':
			if (group_id(optarg, c == 'g' ? &cfg.socket_gid :
			    &cfg.admin_gid) != 0) {
				fprintf(stderr, "kspecd: no group '%s'\n", optarg);
				return 2;
			}
			snprintf(c == 'g' ? cfg.socket_group : cfg.admin_group,
			    sizeof cfg.socket_group, "%s", optarg);
			break;
		case 'u':
			errno = 0;
			v = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg || v < 1 ||
			    v > KS_MAX_CONNECTIONS) {
				fprintf(stderr, "kspecd: --max-conns-per-user must "
				    "be 1..%d\n", KS_MAX_CONNECTIONS);
				return 2;
			}
			cfg.max_conns_per_user = (int)v;
			break;
		case 't':
		case 'j':
		case 'i':
		case 'R':
		case 'I':
		case 'B':
			errno = 0;
			v = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg || *optarg == '-' ||
			    v > 1000000000ull) {
				fprintf(stderr, "kspecd: --%s must be a whole "
				    "number\n", c == 't' ? "compile-timeout" :
				    c == 'j' ? "worker-jobs" : c == 'i' ?
				    "idle-timeout" : c == 'I' ? "audit-interval" :
				    c == 'B' ? "audit-budget" : "read-timeout");
				return 2;
			}
			if (c == 't')
				cfg.compile_timeout_s = v;
			else if (c == 'j')
				cfg.worker_jobs = v;
			else if (c == 'i')
				cfg.idle_timeout_s = v;
			else if (c == 'I')
				cfg.audit_interval_s = v;
			else if (c == 'B')
				cfg.audit_budget_s = v;
			else
				cfg.read_timeout_s = v;
			break;
		case 'v':
			ks_log_set_level(KS_LOG_DEBUG);
			break;
		case 'P':
			if (!*optarg || strlen(optarg) >=
			    sizeof cfg.metrics_listen) {
				fprintf(stderr, "kspecd: --metrics-listen needs an "
				    "address shorter than %zu bytes\n",
				    sizeof cfg.metrics_listen);
				return 2;
			}
			snprintf(cfg.metrics_listen, sizeof cfg.metrics_listen,
			    "%s", optarg);
			break;
		case 'A':
			cfg.metrics_any_host = 1;
			break;
		case 'K':
			if (cfg.nfleet_keys == 8 || strlen(optarg) >=
			    sizeof cfg.fleet_keys[0]) {
				fprintf(stderr, "kspecd: --fleet-key: at most 8, "
				    "each a path of less than %zu bytes\n",
				    sizeof cfg.fleet_keys[0]);
				return 2;
			}
			snprintf(cfg.fleet_keys[cfg.nfleet_keys++],
			    sizeof cfg.fleet_keys[0], "%s", optarg);
			break;
		case 'X':
		case 'Y':
		case 'S': {
			char *to = c == 'X' ? cfg.remote_url : c == 'Y' ?
			    cfg.remote_password_file : cfg.fleet_sign_key;

			if (!*optarg || strlen(optarg) >= sizeof cfg.remote_url) {
				fprintf(stderr, "kspecd: --%s needs a value of "
				    "less than %zu bytes\n", c == 'X' ? "remote" :
				    c == 'Y' ? "remote-password-file" :
				    "fleet-sign-key", sizeof cfg.remote_url);
				return 2;
			}
			snprintf(to, sizeof cfg.remote_url, "%s", optarg);
			break;
		}
		case 'T':
			errno = 0;
			v = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg || *optarg == '-' ||
			    v < 1 || v > 60000) {
				fprintf(stderr, "kspecd: --remote-timeout is "
				    "milliseconds, 1..60000\n");
				return 2;
			}
			cfg.remote_timeout_ms = v;
			break;
		case 'W':
			errno = 0;
			v = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg || *optarg == '-' ||
			    v > 3600) {
				fprintf(stderr, "kspecd: --remote-lease-wait is "
				    "seconds, 0..3600\n");
				return 2;
			}
			cfg.remote_lease_wait_s = v;
			break;
		case 'L':
			if (ks_log_level_parse(optarg) < 0) {
				fprintf(stderr, "kspecd: --log-level is error, "
				    "warn, info or debug (got '%s')\n", optarg);
				return 2;
			}
			ks_log_set_level(ks_log_level_parse(optarg));
			break;
		case 'O':
			if (strcmp(optarg, "text") != 0 &&
			    strcmp(optarg, "json") != 0) {
				fprintf(stderr, "kspecd: --log-format is text or "
				    "json (got '%s')\n", optarg);
				return 2;
			}
			ks_log_set_format(strcmp(optarg, "json") == 0 ?
			    KS_LOG_JSON : KS_LOG_TEXT);
			break;
		case 'h':
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
	if (cfg.metrics_listen[0]) {
		char err[512];

		if (ks_http_check_addr(cfg.metrics_listen, cfg.metrics_any_host,
		    err, sizeof err) != 0) {
			fprintf(stderr, "kspecd: %s\n", err);
			return 2;
		}
	}
	if (cfg.remote_url[0]) {
		ks_remote_addr_t ra;
		char err[1200];

		if (ks_remote_parse(cfg.remote_url, &ra, err, sizeof err)) {
			fprintf(stderr, "kspecd: %s\n", err);
			return 2;
		}
	} else if (cfg.remote_password_file[0]) {
		fprintf(stderr, "kspecd: --remote-password-file goes with "
		    "--remote\n");
		return 2;
	}
	return ks_server_run(&cfg) == 0 ? 0 : 1;
}
