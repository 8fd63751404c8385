/*
 * The listening socket (docs/architecture.md, "The socket and the store
 * lock").
 *
 * - The socket's directory is created with mode 0700 when missing, and the
 *   socket is bound under umask 0177, so it is 0600 from its first moment:
 *   no window between bind() and chmod().  With a socket group
 *   (--socket-group), the directory is given that group and mode 0750
 *   (missing ancestors 0711), and the socket, once bound, the group and
 *   then mode 0660: members of the group may connect, others cannot even
 *   reach the socket.
 * - A lock file beside the socket (PATH.lock, flock) is held for the
 *   daemon's lifetime: a second instance fails on the lock and never
 *   touches the socket file.
 * - An existing socket file is removed only after connect() to it fails
 *   with ECONNREFUSED, which proves nobody listens; a live socket is never
 *   removed, and a path that is not a socket is never removed.
 * - No SO_REUSEADDR (it means nothing for Unix sockets and hides mistakes).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "sock.h"

static int mkdirs(char *path, mode_t mode)
{
	char *p;

	for (p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, mode) != 0 && errno != EEXIST) {
			*p = '/';
			return -1;
		}
		*p = '/';
	}
	if (mkdir(path, mode) != 0 && errno != EEXIST)
		return -1;
	return 0;
}

/*
 * The socket's directory must be ours and writable by nobody else, or
 * another user could replace the socket with their own and serve its
 * clients forged kernels.  (A relative path's directory is the working
 * directory, checked the same way.)
 */
static int check_dir(const char *dir, int has_dir, char *err, size_t errlen)
{
	struct stat st;
	const char *d = has_dir ? dir : ".";

	if (lstat(d, &st) != 0) {
		snprintf(err, errlen, "cannot inspect %s: %s", d,
		    strerror(errno));
		return KS_E_IO;
	}
	if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() ||
	    (st.st_mode & 022)) {
		snprintf(err, errlen, "refusing to put the socket in %s: it "
		    "must be a directory owned by uid %ld and writable by "
		    "nobody else (mode 0700 is what kspecd creates)", d,
		    (long)getuid());
		return KS_E_BAD_REQUEST;
	}
	return KS_OK;
}

int ks_make_parent(const char *path, char *err, size_t errlen)
{
	char dir[4096];
	char *slash;

	snprintf(dir, sizeof dir, "%s", path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return KS_OK;
	*slash = '\0';
	if (mkdirs(dir, 0700) != 0) {
		snprintf(err, errlen, "cannot create %s: %s", dir,
		    strerror(errno));
		return ks_err_from_errno(errno);
	}
	return KS_OK;
}

int ks_lock_beside(const char *path, int *fd_out, char *err, size_t errlen)
{
	char lock[4200];
	int fd;

	snprintf(lock, sizeof lock, "%s.lock", path);
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		snprintf(err, errlen, "cannot open %s: %s", lock,
		    strerror(errno));
		return ks_err_from_errno(errno);
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		snprintf(err, errlen, "another kspecd holds %s", lock);
		close(fd);
		return KS_E_BUSY;
	}
	*fd_out = fd;
	return KS_OK;
}

static int fill_addr(const char *path, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof *sa);
	sa->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sa->sun_path)
		return KS_E_TOO_LARGE;
	memcpy(sa->sun_path, path, strlen(path));
	return KS_OK;
}

/* 1 if something accepts connections at PATH, 0 if provably nobody
 * listens (ECONNREFUSED), -1 if unknown. */
static int probe_live(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int rc, e;

	if (fd < 0)
		return -1;
	rc = connect(fd, (const struct sockaddr *)sa, sizeof *sa);
	e = errno;
	close(fd);
	if (rc == 0)
		return 1;
	return e == ECONNREFUSED ? 0 : -1;
}

/* Gives the socket's directory DIR (ours, checked) to group GID, 0750. */
static int share_dir(const char *dir, long gid, char *err, size_t errlen)
{
	if (chown(dir, (uid_t)-1, (gid_t)gid) != 0 || chmod(dir, 0750) != 0) {
		snprintf(err, errlen, "cannot give %s to group %ld: %s", dir,
		    gid, strerror(errno));
		return KS_E_IO;
	}
	return KS_OK;
}

int ks_sock_prepare(const char *path, long gid, int *lock_fd_out,
    char *err, size_t errlen)
{
	struct sockaddr_un sa;
	char dir[4096];
	char *slash;
	int lfd = -1;

	if (fill_addr(path, &sa)) {
		snprintf(err, errlen, "socket path too long (max %zu bytes): "
		    "%s", sizeof sa.sun_path - 1, path);
		return KS_E_TOO_LARGE;
	}
	snprintf(dir, sizeof dir, "%s", path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (mkdirs(dir, gid >= 0 ? 0711 : 0700) != 0) {
			snprintf(err, errlen, "cannot create %s: %s", dir,
			    strerror(errno));
			return ks_err_from_errno(errno);
		}
	}

	if (check_dir(dir, slash && slash != dir, err, errlen) != KS_OK)
		return KS_E_BAD_REQUEST;
	if (gid >= 0 && share_dir(slash && slash != dir ? dir : ".", gid, err,
	    errlen) != KS_OK)
		return KS_E_IO;
	if (ks_lock_beside(path, &lfd, err, errlen) != KS_OK)
		return KS_E_BUSY;
	*lock_fd_out = lfd;
	return KS_OK;
}

int ks_sock_listen(const char *path, long gid, int *fd_out, char *err,
    size_t errlen)
{
	struct sockaddr_un sa;
	struct stat st;
	mode_t old;
	int fd = -1, live;

	if (fill_addr(path, &sa)) {
		snprintf(err, errlen, "socket path too long: %s", path);
		return KS_E_TOO_LARGE;
	}
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "%s exists and is not a socket; "
			    "not touching it", path);
			return KS_E_BUSY;
		}
		live = probe_live(&sa);
		if (live != 0) {
			snprintf(err, errlen, "%s: %s", path, live > 0 ?
			    "another daemon is listening there" :
			    "cannot tell whether a daemon listens there");
			return KS_E_BUSY;
		}
		/* Provably stale: nobody listens and we hold the lock. */
		if (unlink(path) != 0 && errno != ENOENT) {
			snprintf(err, errlen, "cannot remove stale socket %s: "
			    "%s", path, strerror(errno));
			return KS_E_BUSY;
		}
		ks_log(KS_LOG_INFO, "removed stale socket %s", path);
	}

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return KS_E_IO;
	}
	old = umask(0177);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		umask(old);
		snprintf(err, errlen, "cannot bind %s: %s", path,
		    strerror(errno));
		close(fd);
		return KS_E_BUSY;
	}
	umask(old);
	if (gid >= 0 && (chown(path, (uid_t)-1, (gid_t)gid) != 0 ||
	    chmod(path, 0660) != 0)) {
		snprintf(err, errlen, "cannot give %s to group %ld: %s", path,
		    gid, strerror(errno));
		unlink(path);
		close(fd);
		return KS_E_IO;
	}
	if (listen(fd, 511) != 0) {
		snprintf(err, errlen, "listen %s: %s", path, strerror(errno));
		unlink(path);
		close(fd);
		return KS_E_IO;
	}
	*fd_out = fd;
	return KS_OK;
}

/* The lock file stays: removing it would let a starting instance lock an
 * unlinked inode while a third creates and locks a new one. */
void ks_sock_unlink(const char *path)
{
	unlink(path);
}
