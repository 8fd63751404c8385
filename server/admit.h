/*
 * Private to server/: admission of a connection when conn.c accepts it
 * (admit.c): the peer's credentials against the socket's groups, the
 * global and the per-uid connection limits, and the per-uid counts.
 */
#ifndef KS_SERVER_ADMIT_H
#define KS_SERVER_ADMIT_H

#include "conn.h"

/* ks_admit's answer for a peer whose credentials cannot be read: closed
 * without a reply. */
#define KS_ADMIT_CLOSE (-1000)

/*
 * Decides whether the accepted connection C may talk to the daemon: sets
 * C's uid and admin bit and, admitted (KS_OK), C's user with its count
 * taken.  Refused: KS_E_DENIED (not the daemon's uid, root or the socket
 * group's), KS_E_SHUTTING_DOWN, KS_E_BUSY (the global or the uid's
 * limit), KS_E_NOMEM, each with the message for the peer in MSG and its
 * counter (refused_peer, refused_full, refused_user) raised; or
 * KS_ADMIT_CLOSE.
 */
int ks_admit(ks_conns_t *set, ks_conn_t *c, char *msg, size_t msglen);
/* Frees U's entry once it has no connection and no waiting request. */
void ks_admit_release(ks_conns_t *set, ks_conn_user_t *u);

#endif
