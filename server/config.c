/*
 * Default paths (DESIGN.md section 3).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server.h"

int ks_server_defaults(ks_server_config_t *cfg)
{
	const char *env, *home;
	long ncpu;
	int n;

	memset(cfg, 0, sizeof *cfg);
	if ((env = getenv("KSPEC_SOCKET")) && *env)
		n = snprintf(cfg->socket_path, sizeof cfg->socket_path, "%s",
		    env);
	else if ((env = getenv("XDG_RUNTIME_DIR")) && *env)
		n = snprintf(cfg->socket_path, sizeof cfg->socket_path,
		    "%s/kspec/kspecd.sock", env);
	else
		n = snprintf(cfg->socket_path, sizeof cfg->socket_path,
		    "/tmp/kspec-%ld/kspecd.sock", (long)getuid());
	if (n < 0 || (size_t)n >= sizeof cfg->socket_path)
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
	cfg->workers = ncpu < 1 ? 1 : ncpu > 8 ? 8 : (int)ncpu;
	return 0;
}
