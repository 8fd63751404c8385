/*
 * The client side shared by the benchmarks that put kspecd beside
 * redis-server (bench/hit, bench/instr): one buffered reader used for both
 * servers' replies, frame builders, and a redis-server started on a Unix
 * socket in a given folder.  Both servers are read the same way, so the
 * client costs the same per request whichever it talks to.
 */
#ifndef KS_BENCH_WIRE_H
#define KS_BENCH_WIRE_H

#include "../tests/e2e.h"

typedef struct {
	int fd;
	size_t len, off;
	char buf[1 << 16];
} rd_t;

static inline int rd_fill(rd_t *r)
{
	ssize_t n;

	if (r->off == r->len)
		r->off = r->len = 0;
	if (r->off > 0 && r->len == sizeof r->buf) {
		memmove(r->buf, r->buf + r->off, r->len - r->off);
		r->len -= r->off;
		r->off = 0;
	}
	do
		n = read(r->fd, r->buf + r->len, sizeof r->buf - r->len);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return -1;
	r->len += (size_t)n;
	return 0;
}

/* Consumes N bytes (copying them out when DST is not NULL). */
static inline int rd_take(rd_t *r, void *dst, size_t n)
{
	while (n) {
		size_t k;

		if (r->off == r->len && rd_fill(r))
			return -1;
		k = r->len - r->off < n ? r->len - r->off : n;
		if (dst) {
			memcpy(dst, r->buf + r->off, k);
			dst = (char *)dst + k;
		}
		r->off += k;
		n -= k;
	}
	return 0;
}

enum { WIRE_KSPEC, WIRE_REDIS };

/* Reads one whole reply of protocol PROTO; for kspecd, *OK (when not
 * NULL) says whether the header has "ok":true. */
static inline int wire_read_reply(rd_t *r, int proto, int *ok)
{
	if (proto == WIRE_KSPEC) {
		unsigned char p[8];
		char head[24];
		uint32_t hl, pl;
		size_t k;

		if (rd_take(r, p, 8))
			return -1;
		hl = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
		    (uint32_t)p[2] << 8 | p[3];
		pl = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 |
		    (uint32_t)p[6] << 8 | p[7];
		if (!ok)
			return rd_take(r, NULL, (size_t)hl + pl);
		/* The daemon writes "ok" right after the id. */
		k = hl < sizeof head - 1 ? hl : sizeof head - 1;
		if (rd_take(r, head, k))
			return -1;
		head[k] = '\0';
		*ok = strstr(head, "\"ok\":true") != NULL;
		if (!*ok && hl < 4096) {
			/* A failure says why: the whole header. */
			char rest[4096];

			if (rd_take(r, rest, (size_t)hl - k))
				return -1;
			fprintf(stderr, "reply: %s%.*s\n", head, (int)(hl - k),
			    rest);
			return rd_take(r, NULL, pl);
		}
		return rd_take(r, NULL, (size_t)hl - k + pl);
	} else {
		char line[32];
		size_t i = 0;
		long n;

		for (;;) {      /* "$<n>\r\n" */
			if (rd_take(r, &line[i], 1) || i >= sizeof line - 2)
				return -1;
			if (line[i] == '\n')
				break;
			i++;
		}
		line[i] = '\0';
		if (ok)
			*ok = line[0] == '$' && line[1] != '-';
		if (line[0] != '$')
			return -1;
		n = strtol(line + 1, NULL, 10);
		return n < 0 ? -1 : rd_take(r, NULL, (size_t)n + 2);
	}
}

/* The kspecd frame of header JSON into OUT (CAP bytes); its length. */
static inline size_t wire_frame(char *out, size_t cap, const char *json)
{
	size_t n = strlen(json);

	if (n + 8 > cap)
		return 0;
	out[0] = (char)(n >> 24);
	out[1] = (char)(n >> 16);
	out[2] = (char)(n >> 8);
	out[3] = (char)n;
	memset(out + 4, 0, 4);
	memcpy(out + 8, json, n);
	return n + 8;
}

/* The redis GET of key "k". */
#define WIRE_REDIS_GET "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"

/* Runs ARGV (NULL-terminated, found on PATH) with its output to
 * /dev/null; its pid, or -1. */
static inline pid_t wire_spawn(const char *const *argv)
{
	pid_t pid = fork();

	if (pid == 0) {
		int nul = open("/dev/null", O_WRONLY);

		dup2(nul, 1);
		dup2(nul, 2);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

/*
 * Starts redis-server on DIR/redis.sock (path in SOCK), persistence off,
 * its argv after the NULL-terminated PREFIX (a wrapper such as valgrind;
 * NULL for none).  Waits up to WAIT_S seconds for the socket; returns the
 * pid, or -1.
 */
static inline pid_t wire_start_redis(const char *dir, char *sock,
    size_t socklen, const char *const *prefix, int wait_s)
{
	const char *argv[48];
	pid_t pid;
	int i, n = 0;

	snprintf(sock, socklen, "%s/redis.sock", dir);
	for (i = 0; prefix && prefix[i] && n < 32; i++)
		argv[n++] = prefix[i];
	argv[n++] = "redis-server";
	argv[n++] = "--port";
	argv[n++] = "0";
	argv[n++] = "--unixsocket";
	argv[n++] = sock;
	argv[n++] = "--unixsocketperm";
	argv[n++] = "700";
	argv[n++] = "--save";
	argv[n++] = "";
	argv[n++] = "--appendonly";
	argv[n++] = "no";
	argv[n++] = "--dir";
	argv[n++] = dir;
	argv[n] = NULL;
	pid = wire_spawn(argv);
	for (i = 0; pid > 0 && i < wait_s * 100; i++) {
		int fd = e2e_connect(sock);

		if (fd >= 0) {
			close(fd);
			return pid;
		}
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return -1;
		usleep(10000);
	}
	if (pid > 0)
		kill(pid, SIGKILL);
	return -1;
}

/* SET k <value> on the redis-server at SOCK. */
static inline int wire_redis_set(const char *sock, const void *val,
    size_t n)
{
	char hdr[64];
	rd_t *r = calloc(1, sizeof *r);
	int rc;

	if (!r)
		return -1;
	r->fd = e2e_connect(sock);
	snprintf(hdr, sizeof hdr, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%zu\r\n", n);
	rc = r->fd < 0 || e2e_write_all(r->fd, hdr, strlen(hdr)) ||
	    e2e_write_all(r->fd, val, n) || e2e_write_all(r->fd, "\r\n", 2) ||
	    rd_take(r, hdr, 5) || memcmp(hdr, "+OK\r\n", 5) != 0;
	if (r->fd >= 0)
		close(r->fd);
	free(r);
	return rc ? -1 : 0;
}

#endif
