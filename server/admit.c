/*
 * Admission (admit.h): who may use this daemon and how many connections
 * each may hold, decided once per connection when it is accepted, from
 * the socket's credentials (never from the user database).  The daemon's
 * uid, root and members of the socket group may talk to it; every other
 * uid is refused, and logged at most once a minute per uid.  Then the
 * global and the per-uid limits of connections (--max-conns-per-user):
 * the per-uid counts live here, one entry per uid with a connection or a
 * waiting request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "admit.h"

static ks_conn_user_t *user_of(ks_conns_t *set, uint32_t uid)
{
	ks_conn_user_t *u;

	HASH_FIND(hh, set->users, &uid, sizeof uid, u);
	if (u)
		return u;
	u = calloc(1, sizeof *u);
	if (!u)
		return NULL;
	u->uid = uid;
	HASH_ADD(hh, set->users, uid, sizeof u->uid, u);
	return u;
}

void ks_admit_release(ks_conns_t *set, ks_conn_user_t *u)
{
	if (u && u->conns == 0 && u->waiting == 0) {
		HASH_DEL(set->users, u);
		free(u);
	}
}

/* Most supplementary groups of a peer looked at. */
#define MAX_PEER_GROUPS 256

/*
 * Who the peer is, from the socket (never from the user database): its
 * uid, and whether its groups, primary or supplementary at the time it
 * connected (SO_PEERGROUPS, Linux 4.13), include the socket and admin
 * groups.  -1 if the credentials cannot be read.
 */
static int peer_check(ks_conn_t *c, int *member, int *admin)
{
	const ks_conn_limits_t *lim = &c->set->lim;
	gid_t groups[MAX_PEER_GROUPS];
	struct ucred cred;
	socklen_t len = sizeof cred, glen = sizeof groups;
	uv_os_fd_t fd;
	size_t i, n = 0;

	*member = *admin = 0;
	if (uv_fileno((uv_handle_t *)&c->pipe, &fd) != 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
		return -1;
	c->uid = (uint32_t)cred.uid;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) == 0)
		n = glen / sizeof groups[0];
	*member = lim->socket_gid >= 0 && (gid_t)lim->socket_gid == cred.gid;
	*admin = lim->admin_gid >= 0 && (gid_t)lim->admin_gid == cred.gid;
	for (i = 0; i < n; i++) {
		*member |= lim->socket_gid >= 0 &&
		    groups[i] == (gid_t)lim->socket_gid;
		*admin |= lim->admin_gid >= 0 &&
		    groups[i] == (gid_t)lim->admin_gid;
	}
	return 0;
}

/* 1 when a refusal of UID was not logged in the last minute. */
static int log_denied(ks_conns_t *set, uint32_t uid)
{
	uint64_t now = ks_now_ns();
	int i, oldest = 0;

	for (i = 0; i < KS_CONN_DENIED_SLOTS; i++) {
		if (set->denied_log[i].at_ns && set->denied_log[i].uid == uid) {
			if (now - set->denied_log[i].at_ns < 60000000000ull)
				return 0;
			set->denied_log[i].at_ns = now;
			return 1;
		}
		if (set->denied_log[i].at_ns < set->denied_log[oldest].at_ns)
			oldest = i;
	}
	set->denied_log[oldest].uid = uid;
	set->denied_log[oldest].at_ns = now;
	return 1;
}

int ks_admit(ks_conns_t *set, ks_conn_t *c, char *msg, size_t msglen)
{
	int member, admin, mine;
	ks_conn_user_t *u;

	if (peer_check(c, &member, &admin) != 0) {
		set->refused_peer++;
		return KS_ADMIT_CLOSE;
	}
	mine = c->uid == set->lim.self_uid || c->uid == 0;
	c->admin = mine || admin;
	if (!mine && !member) {
		set->refused_peer++;
		if (set->lim.socket_gid >= 0)
			snprintf(msg, msglen, "uid %u may not use this "
			    "kspecd: it serves uid %u, root and the members of "
			    "group %s (add the user to it, then log in again)",
			    c->uid, set->lim.self_uid, set->lim.socket_group);
		else
			snprintf(msg, msglen, "uid %u may not use this "
			    "kspecd: it serves uid %u and root only (start it "
			    "with --socket-group GROUP to admit a group)",
			    c->uid, set->lim.self_uid);
		if (log_denied(set, c->uid))
			ks_log(KS_LOG_WARN, "refused uid %u (logged once a "
			    "minute per uid)", c->uid);
		return KS_E_DENIED;
	}
	if (set->stopping) {
		snprintf(msg, msglen, "daemon is shutting down");
		return KS_E_SHUTTING_DOWN;
	}
	if (set->n > set->lim.max) {
		set->refused_full++;
		snprintf(msg, msglen, "too many connections (%d)",
		    set->lim.max);
		return KS_E_BUSY;
	}
	u = user_of(set, c->uid);
	if (!u) {
		snprintf(msg, msglen, "out of memory");
		return KS_E_NOMEM;
	}
	if (u->conns >= set->lim.max_per_user) {
		set->refused_user++;
		snprintf(msg, msglen, "too many connections of uid %u (%d, "
		    "--max-conns-per-user)", c->uid, set->lim.max_per_user);
		return KS_E_BUSY;
	}
	c->user = u;
	u->conns++;
	return KS_OK;
}
