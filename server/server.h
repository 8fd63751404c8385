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
#include "../include/kspec.h"           /* KSPEC_VERSION */

#define KS_SERVER_VERSION KSPEC_VERSION

typedef struct {
	char socket_path[4096];
	int socket_given;        /* --socket on the command line */
	char store_path[4096];
	uint64_t max_bytes;      /* store byte budget, 0: unlimited */
	uint64_t hot_bytes;      /* memory tier budget */
	int workers;             /* compile worker processes */
	uint64_t compile_timeout_s;  /* per compile, 0: none */
	uint64_t worker_memory;  /* bytes of RLIMIT_DATA per worker, 0: none */
	uint64_t worker_jobs;    /* jobs before a worker is replaced, 0: never */
	uint64_t worker_rss;     /* RSS above which it is replaced, 0: never */
	int max_conns_per_user;
	long socket_gid;         /* --socket-group, -1: none */
	long admin_gid;          /* --admin-group, -1: none */
	char socket_group[64];   /* as given, for messages */
	int refuse_corrupt_store;  /* do not move a corrupt store aside */
	int no_fast_path;        /* every get takes the full parse */
	char admin_group[64];
	uint64_t idle_timeout_s; /* 0: never */
	uint64_t read_timeout_s; /* 0: never */
	char metrics_listen[4096];  /* --metrics-listen, "" for none */
	int metrics_any_host;    /* it may be other than loopback */
	/* --fleet-key: public keys whose signed entries this daemon
	 * accepts (bundles; docs/fleet.md), loaded at start. */
	char fleet_keys[8][1024];
	int nfleet_keys;
	/* The remote tier (docs/fleet.md, "Remote tier"): Redis's URL or
	 * "", a file with its password or "", the secret key that signs
	 * what this node publishes or "" (it only reads), the deadline of
	 * every Redis command. */
	char remote_url[1024];
	char remote_password_file[1024];
	char fleet_sign_key[1024];
	uint64_t remote_timeout_ms;
	/* How long a node waits for another's compile of a key whose lease
	 * that one holds (docs/fleet.md), in seconds; 0 never waits. */
	uint64_t remote_lease_wait_s;
	/* The key audit (docs/operations.md): one stored entry recompiled
	 * every audit_interval_s seconds while workers are idle (0: off),
	 * within audit_budget_s compile seconds an hour (0: no limit). */
	uint64_t audit_interval_s;
	uint64_t audit_budget_s;
} ks_server_config_t;

/* Defaults of the compile workers (docs/architecture.md gives the
 * measurements behind them). */
#define KS_MAX_WORKERS          64
#define KS_DEFAULT_MAX_WORKERS  16
#define KS_DEFAULT_COMPILE_TIMEOUT_S 120
#define KS_DEFAULT_WORKER_MEMORY (1ull << 30)
#define KS_DEFAULT_WORKER_JOBS  500
#define KS_DEFAULT_WORKER_RSS   (768ull << 20)
#define KS_DEFAULT_AUDIT_INTERVAL_S 60
#define KS_DEFAULT_AUDIT_BUDGET_S   60

/* Fills the defaults of docs/cli.md (env KSPEC_SOCKET and
 * KSPEC_STORE override them). */
int ks_server_defaults(ks_server_config_t *cfg);

/* Runs the daemon until SIGINT/SIGTERM; returns 0 on a clean stop, or a
 * negative ks error with a message already logged. */
int ks_server_run(const ks_server_config_t *cfg);

/* Runs a compile worker (kspecd re-executed by the daemon with --worker);
 * returns its exit status. */
int ks_server_worker(int argc, char **argv);

#endif
