/*
 * Socket activation and readiness notification (systemd.h), as the man
 * pages sd_listen_fds(3) and sd_notify(3) specify them: passed sockets
 * start at fd 3, their count in LISTEN_FDS, meant for the process in
 * LISTEN_PID; state strings are datagrams to the AF_UNIX socket named by
 * NOTIFY_SOCKET (a path, or an abstract name written with a leading '@').
 * libsystemd would do the same in more lines than these; this keeps the
 * daemon free of it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "../base/base.h"
#include "systemd.h"

#define LISTEN_FDS_START 3

static struct sockaddr_un notify_addr;
static socklen_t notify_len;            /* 0: no service manager */
static uint64_t watchdog_ms;

/* The number in environment variable NAME, or -1 if unset or not one. */
static long long env_number(const char *name)
{
	const char *v = getenv(name);
	char *end;
	long long n;

	if (!v || !*v)
		return -1;
	errno = 0;
	n = strtoll(v, &end, 10);
	return errno || *end || n < 0 ? -1 : n;
}

int ks_sd_listen_fd(int *fd, char *path, size_t cap, char *err,
    size_t errlen)
{
	long long pid = env_number("LISTEN_PID"), n = env_number("LISTEN_FDS");
	struct sockaddr_un a;
	socklen_t alen = sizeof a;
	int type = 0, listening = 0;
	socklen_t ilen = sizeof type;
	size_t plen;

	*fd = -1;
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (pid != (long long)getpid() || n <= 0)
		return KS_OK;
	if (n > 1) {
		ks_set_err(err, errlen, "the service manager passed %lld "
		    "sockets; kspecd listens on one", n);
		return KS_E_INVAL;
	}
	memset(&a, 0, sizeof a);
	if (getsockname(LISTEN_FDS_START, (struct sockaddr *)&a, &alen) != 0 ||
	    a.sun_family != AF_UNIX ||
	    getsockopt(LISTEN_FDS_START, SOL_SOCKET, SO_TYPE, &type,
	    &ilen) != 0 || type != SOCK_STREAM ||
	    (ilen = sizeof listening, getsockopt(LISTEN_FDS_START, SOL_SOCKET,
	    SO_ACCEPTCONN, &listening, &ilen)) != 0 || !listening) {
		ks_set_err(err, errlen, "the socket the service manager "
		    "passed (fd %d) is not a listening Unix stream socket",
		    LISTEN_FDS_START);
		return KS_E_INVAL;
	}
	plen = alen > offsetof(struct sockaddr_un, sun_path) ?
	    strnlen(a.sun_path, alen - offsetof(struct sockaddr_un,
	    sun_path)) : 0;
	if (plen == 0 || a.sun_path[0] != '/' || plen >= cap) {
		ks_set_err(err, errlen, "the socket the service manager "
		    "passed (fd %d) has no absolute file name", LISTEN_FDS_START);
		return KS_E_INVAL;
	}
	memcpy(path, a.sun_path, plen);
	path[plen] = '\0';
	fcntl(LISTEN_FDS_START, F_SETFD, FD_CLOEXEC);
	*fd = LISTEN_FDS_START;
	return KS_OK;
}

void ks_sd_notify_init(void)
{
	const char *p = getenv("NOTIFY_SOCKET");
	long long usec = env_number("WATCHDOG_USEC");
	long long wpid = env_number("WATCHDOG_PID");
	size_t n = p ? strlen(p) : 0;

	if (n > 0 && n < sizeof notify_addr.sun_path &&
	    (p[0] == '/' || p[0] == '@')) {
		memset(&notify_addr, 0, sizeof notify_addr);
		notify_addr.sun_family = AF_UNIX;
		memcpy(notify_addr.sun_path, p, n);
		if (p[0] == '@')
			notify_addr.sun_path[0] = '\0';     /* abstract */
		notify_len = (socklen_t)(offsetof(struct sockaddr_un,
		    sun_path) + n);
	} else if (n > 0) {
		ks_log(KS_LOG_WARN, "NOTIFY_SOCKET=%s is not a socket name; "
		    "readiness is not reported", p);
	}
	if (usec > 0 && (wpid < 0 || wpid == (long long)getpid()))
		watchdog_ms = (uint64_t)usec / 2000 ? (uint64_t)usec / 2000 : 1;
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
}

void ks_sd_notify(const char *state)
{
	int fd;

	if (!notify_len)
		return;
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return;
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL,
	    (struct sockaddr *)&notify_addr, notify_len) < 0)
		ks_log(KS_LOG_WARN, "cannot notify the service manager: %s",
		    strerror(errno));
	close(fd);
}

uint64_t ks_sd_watchdog_ms(void)
{
	return watchdog_ms;
}
