/*
 * server: kspecd, the daemon.  The libuv loop accepts connections, frames
 * and dispatches requests, answers hits from the hot tier and the store,
 * and runs compiles in worker threads behind the single-flight table.
 * uv.h appears only in this folder.
 */
#ifndef KS_SERVER_H
#define KS_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

#define KS_SERVER_VERSION "0.1.0"

typedef struct {
	char socket_path[4096];
	char store_path[4096];
	uint64_t max_bytes;      /* store byte budget, 0: unlimited */
	uint64_t hot_bytes;      /* memory tier budget */
	int workers;             /* compile threads */
} ks_server_config_t;

/* Fills the defaults of DESIGN.md section 3 (env KSPEC_SOCKET and
 * KSPEC_STORE override them). */
int ks_server_defaults(ks_server_config_t *cfg);

/* Runs the daemon until SIGINT/SIGTERM; returns 0 on a clean stop, or a
 * negative ks error with a message already logged. */
int ks_server_run(const ks_server_config_t *cfg);

#endif
