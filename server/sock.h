/*
 * Private to server/: the listening socket and the lock files (socket.c).
 */
#ifndef KS_SERVER_SOCK_H
#define KS_SERVER_SOCK_H

#include <stddef.h>

#include "../base/base.h"

/* Creates the parent directories of PATH (mode 0700) when missing. */
int ks_make_parent(const char *path, char *err, size_t errlen);
/* Holds an exclusive flock on PATH.lock (created 0600, no symlinks). */
int ks_lock_beside(const char *path, int *fd_out, char *err, size_t errlen);
/* Makes and checks the socket's directory (given to group GID >= 0) and
 * takes the lock beside PATH: a second daemon fails here, before it
 * touches anything else. */
int ks_sock_prepare(const char *path, long gid, int *lock_fd_out,
    char *err, size_t errlen);
/* Binds and listens on PATH, replacing a provably stale socket (see
 * socket.c); GID >= 0 opens it to that group (mode 0660), -1 keeps it
 * the daemon's own (0600).  After ks_sock_prepare. */
int ks_sock_listen(const char *path, long gid, int *fd_out, char *err,
    size_t errlen);
void ks_sock_unlink(const char *path);

#endif
