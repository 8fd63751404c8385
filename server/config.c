/*
 * Default paths and limits of kspecd (docs/cli.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../exec/exec.h"
#include "../proto/proto.h"
#include "remote.h"
#include "server.h"

int ks_server_defaults(ks_server_config_t *cfg)
{
	const char *env, *home;
	long ncpu;
	int n;

	memset(cfg, 0, sizeof *cfg);
	if (ks_proto_default_socket(KS_SOCKET_DAEMON, cfg->socket_path,
	    sizeof cfg->socket_path) != KS_OK)
		return -1;

	home = getenv("HOME");
	if ((env = getenv("KSPEC_STORE")) && *env)
		n = snprintf(cfg->store_path, sizeof cfg->store_path, "%s",
		    env);
	else if ((env = getenv("XDG_CACHE_HOME")) && *env)
		n = snprintf(cfg->store_path, sizeof cfg->store_path,
		    "%s/kspec/kspec.db", env);
	else if (home && *home)
		n = snprintf(cfg->store_path, sizeof cfg->store_path,
		    "%s/.cache/kspec/kspec.db", home);
	else
		return -1;
	if (n < 0 || (size_t)n >= sizeof cfg->store_path)
		return -1;

	cfg->max_bytes = 0;
	cfg->hot_bytes = 256ull << 20;
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	cfg->workers = ncpu < 1 ? 1 : ncpu > KS_DEFAULT_MAX_WORKERS ?
	    KS_DEFAULT_MAX_WORKERS : (int)ncpu;
	cfg->compile_timeout_s = KS_DEFAULT_COMPILE_TIMEOUT_S;
	cfg->worker_memory = KS_DEFAULT_WORKER_MEMORY;
	cfg->worker_jobs = KS_DEFAULT_WORKER_JOBS;
	cfg->worker_rss = KS_DEFAULT_WORKER_RSS;
	cfg->max_conns_per_user = KS_MAX_CONNS_PER_USER;
	cfg->socket_gid = -1;
	cfg->admin_gid = -1;
	cfg->idle_timeout_s = KS_IDLE_TIMEOUT_S;
	cfg->read_timeout_s = KS_READ_TIMEOUT_S;
	cfg->remote_timeout_ms = KS_REMOTE_DEFAULT_TIMEOUT_MS;
	cfg->remote_lease_wait_s = KS_LEASE_DEFAULT_WAIT_S;
	cfg->audit_interval_s = KS_DEFAULT_AUDIT_INTERVAL_S;
	cfg->audit_budget_s = KS_DEFAULT_AUDIT_BUDGET_S;
	return 0;
}

/* kspecd --worker FD --worker-memory BYTES --worker-parent PID, as the
 * pool spawns it (pool.c); not for people. */
int ks_server_worker(int argc, char **argv)
{
	uint64_t memory = 0;
	long parent = 0;
	int i, fd = -1;

	for (i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--worker") == 0)
			fd = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--worker-memory") == 0)
			memory = strtoull(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--worker-parent") == 0)
			parent = strtol(argv[i + 1], NULL, 10);
		else
			return 2;
	}
	if (fd < 0 || i != argc)
		return 2;
	return ks_worker_main(fd, memory, parent);
}
