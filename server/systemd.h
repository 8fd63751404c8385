/*
 * Private to server/: the two systemd protocols kspecd speaks, written out
 * (each is a few lines over a Unix socket; systemd.c says where they are
 * specified): socket activation (LISTEN_PID, LISTEN_FDS) and readiness
 * (NOTIFY_SOCKET, WATCHDOG_USEC).  Without those variables in the
 * environment, nothing here does anything.
 */
#ifndef KS_SERVER_SYSTEMD_H
#define KS_SERVER_SYSTEMD_H

#include <stddef.h>
#include <stdint.h>

/*
 * The listening socket a service manager passed (fd 3), when LISTEN_PID
 * is this process and LISTEN_FDS is 1: *FD gets it (close-on-exec from
 * now on) and PATH its file name; *FD = -1 when none was passed.  A
 * passed socket that is not a listening Unix stream socket with a path,
 * or more than one, is an error (KS_E_INVAL, with ERR).  The variables
 * are removed from the environment either way, so that the compile
 * workers do not see them.
 */
int ks_sd_listen_fd(int *fd, char *path, size_t cap, char *err,
    size_t errlen);

/* Reads NOTIFY_SOCKET and WATCHDOG_USEC, then removes them from the
 * environment (the workers are not the service).  Call once, first. */
void ks_sd_notify_init(void);
/* Sends STATE ("READY=1", "STOPPING=1", ...) to the service manager; a
 * no-op without NOTIFY_SOCKET.  Never blocks, never fails the caller. */
void ks_sd_notify(const char *state);
/* Milliseconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), or 0
 * when the service manager asked for none. */
uint64_t ks_sd_watchdog_ms(void);

#endif
