/*
 * One daemon for several users: real client processes (build/kspec, the
 * Python client, a holder of idle connections) run as throwaway users and
 * groups made for each test and removed after it, even when it fails
 * (stale ones of an earlier crashed run are removed first).  Needs root
 * (useradd, setuid); without it every test skips and says so.
 */
#include <criterion/criterion.h>
#include <grp.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "e2e.h"

#define PREFIX "kspect"

static e2e_daemon_t D;
static pid_t holder_pid;        /* a child holding connections, killed by
                                   down() even when its test fails */
static char member[32], outsider[32], admin[32], group[32], admins[32];

static void run_quiet(const char *cmd)
{
	char full[700];

	snprintf(full, sizeof full, "%s >/dev/null 2>&1", cmd);
	if (system(full) != 0)
		fprintf(stderr, "test_users: '%s' failed\n", cmd);
}

/*
 * Removes the throwaway users and groups (PREFIX, a letter, the pid of
 * the test process that made them) of this process (MINE), or of test
 * processes that are gone (a crashed run): tests of this suite run in
 * parallel, each with its own.
 */
static void remove_throwaways(int mine)
{
	static const char *const files[2] = { "/etc/passwd", "/etc/group" };
	char line[512], cmd[600], path[64];
	long pid;
	FILE *f;
	int i;

	for (i = 0; i < 2; i++) {
		f = fopen(files[i], "r");
		while (f && fgets(line, sizeof line, f)) {
			if (strncmp(line, PREFIX, strlen(PREFIX)) != 0 ||
			    !strchr(line, ':'))
				continue;
			*strchr(line, ':') = '\0';
			pid = atol(line + strlen(PREFIX) + 1);
			snprintf(path, sizeof path, "/proc/%ld", pid);
			if (mine ? pid != (long)getpid() : access(path, F_OK)
			    == 0)
				continue;
			snprintf(cmd, sizeof cmd, "%s %s", i ? "groupdel" :
			    "userdel -f", line);
			run_quiet(cmd);
		}
		if (f)
			fclose(f);
	}
}

static void up(void)
{
	char cmd[256];

	if (geteuid() != 0 || access("/usr/sbin/useradd", X_OK) != 0)
		return;
	remove_throwaways(0);
	snprintf(group, sizeof group, PREFIX "g%ld", (long)getpid());
	snprintf(admins, sizeof admins, PREFIX "a%ld", (long)getpid());
	snprintf(member, sizeof member, PREFIX "m%ld", (long)getpid());
	snprintf(outsider, sizeof outsider, PREFIX "o%ld", (long)getpid());
	snprintf(admin, sizeof admin, PREFIX "d%ld", (long)getpid());
	snprintf(cmd, sizeof cmd, "groupadd %s", group);
	run_quiet(cmd);
	snprintf(cmd, sizeof cmd, "groupadd %s", admins);
	run_quiet(cmd);
	snprintf(cmd, sizeof cmd, "useradd -M -N -s /bin/sh -G %s %s", group,
	    member);
	run_quiet(cmd);
	snprintf(cmd, sizeof cmd, "useradd -M -N -s /bin/sh %s", outsider);
	run_quiet(cmd);
	snprintf(cmd, sizeof cmd, "useradd -M -N -s /bin/sh -G %s,%s %s",
	    group, admins, admin);
	run_quiet(cmd);
}

static void down(void)
{
	if (holder_pid > 0) {
		kill(holder_pid, SIGKILL);
		waitpid(holder_pid, NULL, 0);
	}
	e2e_cleanup(&D);
	if (geteuid() == 0)
		remove_throwaways(1);
}

TestSuite(users, .init = up, .fini = down, .timeout = 120);

static void need_root(void)
{
	if (geteuid() != 0)
		cr_skip_test("needs root: it creates users and runs clients "
		    "as them");
	if (!getpwnam(member) || !getgrnam(group))
		cr_skip_test("useradd and groupadd are not usable here");
}

/* Starts kspecd with EXTRA in a directory other users may pass. */
static void start(const char *const *extra)
{
	memset(&D, 0, sizeof D);
	snprintf(D.dir, sizeof D.dir, "/tmp/kspec-e2e-XXXXXX");
	cr_assert(mkdtemp(D.dir));
	cr_assert_eq(chmod(D.dir, 0711), 0);
	cr_assert_eq(e2e_start(&D, extra), 0, "kspecd did not start");
}

/* Drops to USER: their groups, their uid.  In a child only. */
static void become(const char *user)
{
	struct passwd *pw = getpwnam(user);

	if (!pw || initgroups(user, pw->pw_gid) != 0 ||
	    setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0)
		_exit(126);
}

/* Runs ARGV as USER; returns the exit status, OUT its stdout and stderr,
 * *ms the wall time. */
static int run_as(const char *user, char *const argv[], char *out,
    size_t outlen, double *ms)
{
	struct timespec t0, t1;
	int p[2], st;
	size_t n = 0;
	ssize_t k;
	pid_t pid;

	cr_assert_eq(pipe(p), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		close(p[0]);
		become(user);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	while (n + 1 < outlen && (k = read(p[0], out + n, outlen - n - 1)) > 0)
		n += (size_t)k;
	out[n] = '\0';
	close(p[0]);
	waitpid(pid, &st, 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (ms)
		*ms = (t1.tv_sec - t0.tv_sec) * 1e3 +
		    (t1.tv_nsec - t0.tv_nsec) / 1e6;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int kspec_as(const char *user, const char *cmd, char *out,
    size_t outlen, double *ms)
{
	char bin[512], words[256], *w, *save = NULL;
	char *argv[8];
	int n = 0;

	snprintf(bin, sizeof bin, "%s/kspec", e2e_build_dir());
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = D.sock;
	/* CMD and its options, split at spaces. */
	snprintf(words, sizeof words, "%s", cmd);
	for (w = strtok_r(words, " ", &save); w && n < 7; w = strtok_r(NULL,
	    " ", &save))
		argv[n++] = w;
	if (strcmp(cmd, "evict") == 0)
		argv[n++] = "--all";
	argv[n] = NULL;
	return run_as(user, argv, out, outlen, ms);
}

Test(users, a_member_is_served_and_an_outsider_is_told_the_group)
{
	const char *extra[] = { "--socket-group", group, NULL };
	char out[4096], py[1024];
	char *argv[4];
	struct stat st;
	int rc;

	need_root();
	start(extra);
	cr_assert_eq(stat(D.sock, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0660);
	cr_assert_eq(st.st_gid, getgrnam(group)->gr_gid);

	rc = kspec_as(member, "ping", out, sizeof out, NULL);
	cr_assert_eq(rc, 0, "member: %s", out);
	cr_assert(strstr(out, "pong"), "%s", out);
	/* The Python client too, fetching a kernel. */
	snprintf(py, sizeof py, "import sys; sys.path.insert(0, '%s/../client/"
	    "python'); import kspec; c = kspec.Client('%s'); a = c.get_many(["
	    "{'kernel':'gemm','backend':'cpu','dtype':'f32','shape':{'M':1,"
	    "'N':64,'K':64}}])[0]; print(a.source, len(a.bytes))",
	    e2e_build_dir(), D.sock);
	argv[0] = "/usr/bin/python3";
	argv[1] = "-c";
	argv[2] = py;
	argv[3] = NULL;
	rc = run_as(member, argv, out, sizeof out, NULL);
	cr_assert_eq(rc, 0, "python as member: %s", out);
	cr_assert(strstr(out, "compiled"), "%s", out);

	/* The socket's directory stops the outsider: the client names the
	 * group. */
	rc = kspec_as(outsider, "ping", out, sizeof out, NULL);
	cr_assert_neq(rc, 0);
	cr_assert(strstr(out, "E_DENIED") && strstr(out, group), "outsider: %s",
	    out);
	cr_assert_eq(e2e_stat(D.sock, "connections_refused_peer"), 0);
}

Test(users, a_wider_socket_still_refuses_outsiders_from_the_daemon)
{
	const char *extra[] = { "--socket-group", group, NULL };
	char out[4096];
	char dir[400];
	int rc;

	need_root();
	start(extra);
	/* Opened wide on purpose (or by a service manager): the daemon's own
	 * check answers. */
	snprintf(dir, sizeof dir, "%s/run", D.dir);
	cr_assert_eq(chmod(dir, 0755), 0);
	cr_assert_eq(chmod(D.sock, 0666), 0);
	rc = kspec_as(outsider, "ping", out, sizeof out, NULL);
	cr_assert_neq(rc, 0);
	cr_assert(strstr(out, "E_DENIED") && strstr(out, group) &&
	    strstr(out, "log in again"), "outsider: %s", out);
	rc = kspec_as(outsider, "ping", out, sizeof out, NULL);
	cr_assert_neq(rc, 0);
	cr_assert_eq(e2e_stat(D.sock, "connections_refused_peer"), 2);
	rc = kspec_as(member, "ping", out, sizeof out, NULL);
	cr_assert_eq(rc, 0, "member: %s", out);
}

static double refused(void)
{
	return e2e_stat(D.sock, "connections_refused_user") +
	    e2e_stat(D.sock, "connections_refused_full");
}

Test(users, one_user_holding_1100_connections_shuts_out_no_one_else)
{
	const char *extra[] = { "--socket-group", group, NULL };
	struct rlimit rl = { 4096, 4096 };
	int ready[2], st, i, held = 0;
	char out[4096], c;
	double ms;
	pid_t holder;

	need_root();
	start(extra);
	cr_assert_eq(pipe(ready), 0);
	holder = fork();
	cr_assert_geq(holder, 0);
	if (holder == 0) {
		close(ready[0]);
		setrlimit(RLIMIT_NOFILE, &rl);
		become(admin);
		for (i = 0; i < 1100; i++)
			if (e2e_connect(D.sock) >= 0)
				held++;
		c = held == 1100 ? 'y' : 'n';
		if (write(ready[1], &c, 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(ready[1]);
	cr_assert_eq(read(ready[0], &c, 1), 1);
	cr_assert_eq(c, 'y', "the holder could not open its connections");
	/* Beyond its 256, the holder's connections are refused (a burst may
	 * also meet the global limit while refused ones drain). */
	for (i = 0; i < 250 && refused() < 1100 - 256; i++)
		usleep(20000);
	/* Another admitted user is answered at once. */
	cr_assert_eq(kspec_as(member, "ping", out, sizeof out, &ms), 0, "%s",
	    out);
	cr_log_info("ping as another user beside 1100 held: %.0f ms", ms);
	cr_assert_lt(ms, 3000);
	cr_assert_geq(refused(), 1100 - 256, "%.0f refused, %.0f open",
	    refused(), e2e_stat(D.sock, "connections"));
	cr_assert_geq(e2e_stat(D.sock, "connections_refused_user"), 1);
	kill(holder, SIGKILL);
	waitpid(holder, &st, 0);
	close(ready[0]);
}

/* A child that becomes USER, opens N connections to the metrics
 * listener at ADDR (a Unix socket path, or 127.0.0.1:PORT), says 'y' on
 * READY once it holds them and sleeps until killed. */
static pid_t hold_as(const char *user, const char *addr, int n, int ready)
{
	pid_t parent = getpid(), pid = fork();
	int i, held = 0;
	char c;

	cr_assert_geq(pid, 0);
	if (pid != 0)
		return pid;
	become(user);
	/* Gone with the test process, however that ends. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
		_exit(1);
	for (i = 0; i < n; i++) {
		int fd;

		if (addr[0] == '/') {
			fd = e2e_connect(addr);
		} else {
			struct sockaddr_in sa = { .sin_family = AF_INET };

			sa.sin_port = htons((uint16_t)atoi(strchr(addr, ':') +
			    1));
			sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
			fd = socket(AF_INET, SOCK_STREAM, 0);
			if (fd >= 0 && connect(fd, (struct sockaddr *)&sa,
			    sizeof sa) != 0) {
				close(fd);
				fd = -1;
			}
		}
		held += fd >= 0;
	}
	c = held == n ? 'y' : 'n';
	if (write(ready, &c, 1) != 1)
		_exit(1);
	pause();
	_exit(0);
}

/* A scrape of ADDR's /metrics as USER: curl's exit status (0: a 200). */
static int scrape_as(const char *user, const char *addr)
{
	char url[700], out[4096];
	char *argv[10];
	int n = 0;

	argv[n++] = "/usr/bin/curl";
	argv[n++] = "-sSf";
	argv[n++] = "--max-time";
	argv[n++] = "5";
	if (addr[0] == '/') {
		argv[n++] = "--unix-socket";
		argv[n++] = (char *)addr;
		snprintf(url, sizeof url, "http://localhost/metrics");
	} else {
		snprintf(url, sizeof url, "http://%s/metrics", addr);
	}
	argv[n++] = url;
	argv[n] = NULL;
	return run_as(user, argv, out, sizeof out, NULL);
}

/*
 * The metrics listener: one user holding 32 idle connections (the whole
 * listener's worth) leaves another user's scrape answered, on the Unix
 * socket (peers told apart by uid) and on TCP loopback (by the uid that
 * owns the client's socket).
 */
Test(users, one_user_holding_the_metrics_listener_shuts_out_no_one_else)
{
	static const char *const where[2] = { "unix", "tcp" };
	char addr[600];
	int w;

	need_root();
	if (access("/usr/bin/curl", X_OK) != 0)
		cr_skip_test("curl is not installed (deploy/deps.sh)");
	for (w = 0; w < 2; w++) {
		const char *extra[] = { "--socket-group", group,
			"--metrics-listen", addr, NULL };
		int ready[2], st, tries;
		pid_t holder;
		char c;

		memset(&D, 0, sizeof D);
		snprintf(D.dir, sizeof D.dir, "/tmp/kspec-e2e-XXXXXX");
		cr_assert(mkdtemp(D.dir));
		cr_assert_eq(chmod(D.dir, 0711), 0);
		if (w) {
			int port = e2e_free_port();

			cr_assert_gt(port, 0, "no free loopback port");
			snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
		} else
			snprintf(addr, sizeof addr, "%s/metrics.sock", D.dir);
		cr_assert_eq(e2e_start(&D, extra), 0, "kspecd did not start");
		cr_assert_eq(pipe(ready), 0);
		holder = holder_pid = hold_as(admin, addr, 32, ready[1]);
		close(ready[1]);
		cr_assert_eq(read(ready[0], &c, 1), 1);
		cr_assert_eq(c, 'y', "%s: the holder could not connect",
		    where[w]);
		/* Answered while the holder holds on: tried again for a few
		 * seconds, as the daemon may still be accepting (and cutting)
		 * the holder's connections on a loaded machine.  Without the
		 * per-peer limit every try is shut out. */
		for (tries = 0; scrape_as(member, addr) != 0 && tries < 10;
		    tries++)
			usleep(300000);
		cr_assert_lt(tries, 10, "%s: another user's scrape was shut "
		    "out", where[w]);
		kill(holder, SIGKILL);
		waitpid(holder, &st, 0);
		holder_pid = 0;
		close(ready[0]);
		e2e_cleanup(&D);
	}
}

Test(users, evict_is_for_the_admin_group)
{
	const char *extra[] = { "--socket-group", group, "--admin-group",
	    admins, NULL };
	char out[4096];
	int rc;

	need_root();
	start(extra);
	rc = kspec_as(member, "evict", out, sizeof out, NULL);
	cr_assert_neq(rc, 0);
	cr_assert(strstr(out, "E_DENIED") && strstr(out, "--admin-group"),
	    "member: %s", out);
	/* The stale check too, even one that removes nothing. */
	rc = kspec_as(member, "evict --stale --dry-run", out, sizeof out,
	    NULL);
	cr_assert_neq(rc, 0);
	cr_assert(strstr(out, "E_DENIED"), "member: %s", out);
	/* Import writes the store too (before any look at the file). */
	rc = kspec_as(member, "bundle import /etc/hostname", out, sizeof out,
	    NULL);
	cr_assert_neq(rc, 0);
	cr_assert(strstr(out, "E_DENIED") && strstr(out, "import is for"),
	    "member: %s", out);
	rc = kspec_as(admin, "evict", out, sizeof out, NULL);
	cr_assert_eq(rc, 0, "admin: %s", out);
	rc = kspec_as(admin, "evict --stale", out, sizeof out, NULL);
	cr_assert_eq(rc, 0, "admin: %s", out);
	cr_assert(strstr(out, "evicted 0 stale entries"), "admin: %s", out);
}
