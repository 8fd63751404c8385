/*
 * Files the commands write and read: an artifact, its metadata, a
 * manifest or a bundle is written whole or not at all; a manifest is
 * read whole.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static int write_all(int fd, const void *p, size_t n)
{
	const char *q = p;
	ssize_t k;

	while (n) {
		k = write(fd, q, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -1;
		q += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Writes straight into an existing non-regular file (a terminal, a pipe,
 * /dev/null): a rename would replace the device itself. */
static int write_special(const char *path, const void *data, size_t len,
    int newline)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC), err = 0;

	if (fd < 0 || write_all(fd, data, len) ||
	    (newline && write_all(fd, "\n", 1)))
		err = errno ? errno : EIO;
	if (fd >= 0 && close(fd) && !err)
		err = errno;
	if (err)
		fprintf(stderr, "kspec: cannot write %s: %s\n", path,
		    strerror(err));
	return err ? -1 : 0;
}

int write_file(const char *path, const void *data, size_t len,
    int newline)
{
	size_t n = strlen(path);
	struct stat st;
	char *tmp;
	int fd, err = 0;

	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
		return write_special(path, data, len, newline);
	tmp = malloc(n + sizeof ".tmp");

	if (!tmp) {
		fprintf(stderr, "kspec: cannot write %s: %s\n", path,
		    strerror(ENOMEM));
		return -1;
	}
	memcpy(tmp, path, n);
	memcpy(tmp + n, ".tmp", sizeof ".tmp");
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "kspec: cannot write %s: %s\n", tmp,
		    strerror(errno));
		free(tmp);
		return -1;
	}
	if (write_all(fd, data, len) || (newline && write_all(fd, "\n", 1)) ||
	    fsync(fd))
		err = errno;
	if (close(fd) && !err)
		err = errno;
	if (!err && rename(tmp, path))
		err = errno;
	if (err) {
		unlink(tmp);
		fprintf(stderr, "kspec: cannot write %s: %s\n", path,
		    strerror(err));
	}
	free(tmp);
	return err ? -1 : 0;
}

char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    n < (64L << 20) && fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)n + 1);
		if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
			free(buf);
			buf = NULL;
		} else if (buf) {
			buf[n] = '\0';
		}
	}
	fclose(f);
	return buf;
}
