/*
 * The store's file: its parent directories, who may write it (the trust
 * checks of store.h), its replacement noticed, and a broken one set aside.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store_int.h"

/* Creates the missing parent directories of PATH with mode 0700; existing
 * ones are left as they are. */
int kss_make_parents(const char *path, char *err, size_t errlen)
{
	char *dir = strdup(path), *p;
	struct stat st;
	int rc = KS_OK;

	if (dir == NULL)
		return KS_E_NOMEM;
	for (p = strchr(dir + 1, '/'); p != NULL; p = strchr(p + 1, '/')) {
		*p = '\0';
		if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
			int e = errno;

			/* Not ks_err_from_errno: its ENOENT means "cannot
			 * connect", and this is a file system failure. */
			rc = e == ENOMEM ? KS_E_NOMEM : KS_E_IO;
			ks_set_err(err, errlen, "store %s: cannot create "
			    "directory %s: %s", path, dir, strerror(e));
			break;
		}
		if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
			rc = KS_E_IO;
			ks_set_err(err, errlen, "store %s: %s is not a directory",
			    path, dir);
			break;
		}
		*p = '/';
	}
	free(dir);
	return rc;
}

/* ---- who may write the store ---- */

/* "uid 1000, mode 0666" of ST, for messages. */
static void describe(const struct stat *st, char *out, size_t len)
{
	snprintf(out, len, "owned by uid %ld, mode %04o", (long)st->st_uid,
	    (unsigned)(st->st_mode & 07777));
}

/* A file of the store: absent, or a regular file (never a symbolic link)
 * owned by us or root and writable by nobody else. */
static int check_file(const char *path, const char *store, char *err,
    size_t errlen)
{
	struct stat st;
	char how[64];

	if (lstat(path, &st) != 0)
		return errno == ENOENT ? KS_OK : KS_E_IO;
	describe(&st, how, sizeof how);
	if (S_ISLNK(st.st_mode)) {
		ks_set_err(err, errlen, "store %s: refusing it: %s is a symbolic "
		    "link; kspecd opens its store only as a plain file (remove "
		    "the link, or give the real path)", store, path);
		return KS_E_DENIED;
	}
	if (!S_ISREG(st.st_mode)) {
		ks_set_err(err, errlen, "store %s: cannot open: %s is not a "
		    "regular file", store, path);
		return KS_E_STORE;
	}
	if ((st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & 022)) {
		ks_set_err(err, errlen, "store %s: refusing it: %s is %s; "
		    "whoever can write the store can change what kspecd serves, "
		    "so it must be a file owned by uid %ld (or root) that nobody "
		    "else may write (chmod 0600, or remove it and let kspecd "
		    "create it)", store, path, how, (long)geteuid());
		return KS_E_DENIED;
	}
	return KS_OK;
}

/*
 * The store's directory and every directory above it: owned by us or
 * root, and writable by nobody else, except an ancestor that is sticky and
 * root's (like /tmp), where others cannot replace what is ours.
 */
static int check_dirs(const char *store, char *err, size_t errlen)
{
	char *dir = realpath(store, NULL), *slash;
	char how[64];
	struct stat st;
	int first = 1, rc = KS_OK;

	if (!dir) {
		/* The store does not exist yet: its directory does. */
		char *copy = strdup(store);

		if (!copy)
			return KS_E_NOMEM;
		slash = strrchr(copy, '/');
		if (slash && slash != copy)
			*slash = '\0';
		else if (slash)
			slash[1] = '\0';
		else
			strcpy(copy, ".");
		dir = realpath(copy, NULL);
		free(copy);
		if (!dir)
			return KS_E_IO;
	} else if ((slash = strrchr(dir, '/')) == dir) {
		dir[1] = '\0';         /* the store is in / */
	} else if (slash) {
		*slash = '\0';
	}
	for (;;) {
		if (stat(dir, &st) != 0) {
			rc = KS_E_IO;
			break;
		}
		describe(&st, how, sizeof how);
		if ((st.st_uid != geteuid() && st.st_uid != 0) ||
		    ((st.st_mode & 022) && (first || !(st.st_mode & S_ISVTX) ||
		    st.st_uid != 0))) {
			ks_set_err(err, errlen, "store %s: refusing it: directory "
			    "%s is %s; whoever can write there can replace the "
			    "store and change what kspecd serves, so the store's "
			    "directory and those above it must be owned by uid %ld "
			    "(or root) and writable by nobody else (above the "
			    "store's own directory, a root-owned sticky one such "
			    "as /tmp is fine)", store, dir, how, (long)geteuid());
			rc = KS_E_DENIED;
			break;
		}
		first = 0;
		if (strcmp(dir, "/") == 0)
			break;
		slash = strrchr(dir, '/');
		if (slash == dir)
			slash[1] = '\0';
		else
			*slash = '\0';
	}
	free(dir);
	return rc;
}

int kss_check_trust(const char *path, char *err, size_t errlen)
{
	static const char *const ext[] = { "", "-wal", "-shm" };
	char file[4200];
	size_t i;
	int rc = check_file(path, path, err, errlen);

	if (rc == KS_OK)
		rc = check_dirs(path, err, errlen);
	for (i = 1; rc == KS_OK && i < sizeof ext / sizeof ext[0]; i++) {
		snprintf(file, sizeof file, "%s%s", path, ext[i]);
		rc = check_file(file, path, err, errlen);
	}
	return rc;
}

int ks_store_changed(ks_store_t *s)
{
	struct stat st;

	if (lstat(s->path, &st) != 0)
		return errno == ENOENT;
	return st.st_dev != s->dev || st.st_ino != s->ino;
}

static const char *const store_ext[] = { "", "-wal", "-shm" };

/* Removes the set-aside copy NAME (a file of DIR) with its -wal and -shm,
 * each only when it is a regular file of this uid. */
static void remove_aside(const char *dir, const char *name)
{
	char file[4400];
	struct stat st;
	size_t i;

	for (i = 0; i < sizeof store_ext / sizeof store_ext[0]; i++) {
		snprintf(file, sizeof file, "%s/%s%s", dir, name, store_ext[i]);
		if (lstat(file, &st) == 0 && S_ISREG(st.st_mode) &&
		    st.st_uid == geteuid() && unlink(file) == 0)
			ks_log(KS_LOG_INFO, "store: removed %s, an older "
			    "set-aside copy (the newest %d are kept)", file,
			    KS_STORE_ASIDE_KEEP);
	}
}

/* A set-aside copy: its name, and the seconds and -n of its suffix. */
typedef struct {
	char *name;
	long long sec, n;
} aside_t;

/* Newest first. */
static int newer_first(const void *a, const void *b)
{
	const aside_t *x = a, *y = b;

	if (x->sec != y->sec)
		return x->sec < y->sec ? 1 : -1;
	return (x->n < y->n) - (x->n > y->n);
}

enum { ASIDE_MAX = 256 };

/*
 * The set-aside copies beside PATH (PATH.corrupt-SECONDS[-N], not their
 * -wal or -shm) into NAMES, newest first; their directory into WHERE.
 * Returns how many (the caller frees each name).
 */
static size_t aside_list(const char *path, aside_t *names, char *where,
    size_t wherelen)
{
	const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 :
	    path;
	char prefix[512], *end;
	struct dirent *e;
	size_t n = 0;
	DIR *d;

	if (!slash)
		snprintf(where, wherelen, ".");
	else if (slash == path)
		snprintf(where, wherelen, "/");
	else
		snprintf(where, wherelen, "%.*s", (int)(slash - path), path);
	snprintf(prefix, sizeof prefix, "%s.corrupt-", base);
	d = opendir(where);
	while (d && (e = readdir(d)) != NULL && n < ASIDE_MAX) {
		const char *t = e->d_name + strlen(prefix);

		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 ||
		    *t < '0' || *t > '9')
			continue;
		names[n].sec = strtoll(t, &end, 10);
		names[n].n = 1;
		if (*end == '-' && end[1] >= '0' && end[1] <= '9')
			names[n].n = strtoll(end + 1, &end, 10);
		if (*end != '\0' || !(names[n].name = strdup(e->d_name)))
			continue;       /* a copy's -wal or -shm */
		n++;
	}
	if (d)
		closedir(d);
	qsort(names, n, sizeof names[0], newer_first);
	return n;
}

int ks_store_move_aside(const char *path, char *moved, size_t movedlen,
    char *err, size_t errlen)
{
	char from[4200], to[4300], where[4200];
	aside_t names[ASIDE_MAX];
	long long now = (long long)ks_wall_s(), next = 1;
	size_t i, n;
	int rc = kss_check_trust(path, err, errlen);

	if (rc != KS_OK)
		return rc;
	/* A name after every copy of this second: PATH.corrupt-SECONDS,
	 * then -2, -3, ... */
	n = aside_list(path, names, where, sizeof where);
	for (i = 0; i < n; i++)
		if (names[i].sec == now && names[i].n >= next)
			next = names[i].n + 1;
	if (next == 1)
		snprintf(moved, movedlen, "%s.corrupt-%lld", path, now);
	else
		snprintf(moved, movedlen, "%s.corrupt-%lld-%lld", path, now,
		    next);
	for (i = 0; rc == KS_OK && i < sizeof store_ext / sizeof store_ext[0];
	    i++) {
		snprintf(from, sizeof from, "%s%s", path, store_ext[i]);
		snprintf(to, sizeof to, "%s%s", moved, store_ext[i]);
		if (rename(from, to) != 0 && errno != ENOENT) {
			ks_set_err(err, errlen, "store %s: cannot move %s aside: "
			    "%s", path, from, strerror(errno));
			rc = KS_E_IO;
		}
	}
	/* The newest KS_STORE_ASIDE_KEEP, this one among them: a store
	 * broken at every start cannot fill the disk. */
	for (i = 0; i < n; i++) {
		if (rc == KS_OK && i + 1 >= KS_STORE_ASIDE_KEEP)
			remove_aside(where, names[i].name);
		free(names[i].name);
	}
	return rc;
}
