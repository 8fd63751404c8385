/*
 * kspecd under a service manager: socket activation (a real
 * systemd-socket-activate passes the socket), readiness and watchdog
 * datagrams on NOTIFY_SOCKET, and `kspec ping --wait` for scripts.
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/time.h>

#include "../include/kspec.h"
#include "e2e.h"

static char dir[256];
static pid_t pid;

static void setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/kspec-e2e-XXXXXX");
	cr_assert(mkdtemp(dir));
	pid = 0;
}

static void down(void)
{
	char cmd[400];

	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

TestSuite(service, .init = setup, .fini = down, .timeout = 120);

static int have(const char *prog)
{
	char cmd[256];

	snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", prog);
	return system(cmd) == 0;
}

/* Runs ARGV with stderr to DIR/NAME; its pid. */
static pid_t spawn(const char *const *argv, const char *name)
{
	char log[400];
	pid_t p;

	snprintf(log, sizeof log, "%s/%s", dir, name);
	p = fork();
	cr_assert_geq(p, 0);
	if (p == 0) {
		int nul = open("/dev/null", O_WRONLY);
		int err = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		dup2(nul, 1);
		dup2(err >= 0 ? err : nul, 2);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	return p;
}

/* The exit status of P within S seconds, else -1 (P is then killed). */
static int wait_exit(pid_t p, int s)
{
	int st, i;

	for (i = 0; i < s * 100; i++) {
		if (waitpid(p, &st, WNOHANG) == p)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 +
			    WTERMSIG(st);
		usleep(10000);
	}
	kill(p, SIGKILL);
	waitpid(p, NULL, 0);
	return -1;
}

static int ping(const char *sock)
{
	e2e_reply_t r;
	int ok;

	if (e2e_call(sock, "{\"op\":\"ping\",\"id\":1}", &r) != 0)
		return 0;
	ok = e2e_ok(&r);
	e2e_reply_free(&r);
	return ok;
}

static int file_has(const char *name, const char *what)
{
	char path[400], buf[8192];
	size_t n;
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	f = fopen(path, "r");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	return strstr(buf, what) != NULL;
}

/* 1 once a socket bound to PATH listens (/proc/net/unix: the flag
 * __SO_ACCEPTCON, 0x10000), which a connect would not tell without
 * starting the activated daemon. */
static int listening(const char *path)
{
	char line[512];
	unsigned long flags;
	size_t n = strlen(path), len;
	FILE *f = fopen("/proc/net/unix", "r");
	int yes = 0;

	if (!f)
		return 0;
	while (!yes && fgets(line, sizeof line, f)) {
		len = strcspn(line, "\n");
		line[len] = '\0';
		if (len > n && line[len - n - 1] == ' ' &&
		    strcmp(line + len - n, path) == 0 &&
		    sscanf(line, "%*s %*s %*s %lx", &flags) == 1)
			yes = (flags & 0x10000) != 0;
	}
	fclose(f);
	return yes;
}

/* Starts systemd-socket-activate on DIR/kspecd.sock running kspecd with
 * EXTRA arguments; waits until the socket listens (the file alone comes
 * at bind, a moment before).  Fills SOCK. */
static void start_activated(char *sock, size_t cap, const char *const *extra)
{
	char bin[512], store[300];
	const char *argv[16];
	int n = 0, i;
	struct stat st;

	if (!have("systemd-socket-activate"))
		cr_skip_test("systemd-socket-activate is not installed "
		    "(deploy/deps.sh installs systemd)");
	snprintf(bin, sizeof bin, "%s/kspecd", e2e_build_dir());
	snprintf(sock, cap, "%s/kspecd.sock", dir);
	snprintf(store, sizeof store, "%s/kspec.db", dir);
	argv[n++] = "systemd-socket-activate";
	argv[n++] = "-l";
	argv[n++] = sock;
	argv[n++] = bin;
	argv[n++] = "--store";
	argv[n++] = store;
	for (i = 0; extra && extra[i] && n < 15; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	/* It execs kspecd in place at the first connection: PID is the
	 * daemon's from then on. */
	pid = spawn(argv, "activate.log");
	for (i = 0; i < 3000 && !listening(sock); i++)
		usleep(10000);
	cr_assert_eq(stat(sock, &st), 0, "the activator made no socket");
	cr_assert(listening(sock), "the activator's socket does not listen");
}

Test(service, a_socket_passed_by_systemd_socket_activate_is_served)
{
	char sock[300];
	struct stat st;
	int fd;

	start_activated(sock, sizeof sock, NULL);
	/* The first client waits in the backlog while the daemon starts. */
	cr_assert(ping(sock), "no pong through the passed socket");
	cr_assert(ping(sock));
	cr_assert(file_has("activate.log", "passed by the service manager"),
	    "the daemon did not say it took the passed socket");
	kill(pid, SIGTERM);
	cr_assert_eq(wait_exit(pid, 30), 0);
	pid = 0;
	/* The socket is the service manager's: left in place. */
	cr_assert_eq(stat(sock, &st), 0, "the passed socket was removed");
	fd = e2e_connect(sock);
	cr_assert_lt(fd, 0, "something still listens");
}

Test(service, a_passed_socket_and_another_socket_option_refuse_to_start)
{
	char sock[300], other[300];
	const char *extra[] = { "--socket", other, NULL };
	int fd;

	snprintf(other, sizeof other, "%s/other.sock", dir);
	start_activated(sock, sizeof sock, extra);
	fd = e2e_connect(sock);         /* makes the activator exec */
	cr_assert_geq(fd, 0);
	cr_assert_neq(wait_exit(pid, 30), 0, "kspecd started anyway");
	pid = 0;
	close(fd);
	cr_assert(file_has("activate.log", "give one of them"),
	    "no clear message about the two sockets");
}

/* Starts kspecd on DIR/kspecd.sock (path in SOCK) with the
 * NULL-terminated EXTRA arguments (may be NULL), without waiting. */
static void spawn_kspecd(char *sock, size_t cap, const char *const *extra)
{
	char bin[512], store[300];
	const char *argv[16];
	int n = 0, i;

	snprintf(bin, sizeof bin, "%s/kspecd", e2e_build_dir());
	snprintf(sock, cap, "%s/kspecd.sock", dir);
	snprintf(store, sizeof store, "%s/kspec.db", dir);
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = sock;
	argv[n++] = "--store";
	argv[n++] = store;
	for (i = 0; extra && extra[i] && n < 15; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	pid = spawn(argv, "kspecd.log");
}

/* Opens a datagram socket at DIR/notify for NOTIFY_SOCKET. */
static int notify_socket(char *path, size_t cap)
{
	struct sockaddr_un a;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	snprintf(path, cap, "%s/notify", dir);
	memset(&a, 0, sizeof a);
	a.sun_family = AF_UNIX;
	memcpy(a.sun_path, path, strlen(path) + 1);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	return fd;
}

/* The next datagram on FD within MS milliseconds, as a string ("" on
 * timeout). */
static void next_state(int fd, int ms, char *out, size_t cap)
{
	struct pollfd p = { fd, POLLIN, 0 };
	ssize_t n = 0;

	if (poll(&p, 1, ms) == 1)
		n = recv(fd, out, cap - 1, 0);
	out[n > 0 ? n : 0] = '\0';
}

Test(service, readiness_is_sent_once_the_daemon_serves)
{
	char sock[300], npath[300], state[512], env[128], path[128];
	e2e_reply_t r;
	cJSON *w;
	int nfd, n, i, got_dog = 0;
	FILE *f;

	nfd = notify_socket(npath, sizeof npath);
	setenv("NOTIFY_SOCKET", npath, 1);
	setenv("WATCHDOG_USEC", "200000", 1);
	spawn_kspecd(sock, sizeof sock, NULL);
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	/* Watchdog pings may come first: the loop runs before it serves. */
	for (i = 0; i < 400; i++) {
		next_state(nfd, 30000, state, sizeof state);
		if (strcmp(state, "WATCHDOG=1") != 0)
			break;
	}
	cr_assert(strstr(state, "READY=1"), "got '%s' instead of READY=1",
	    state);
	/* Ready means serving: the first try is answered. */
	cr_assert(ping(sock), "READY=1 came before the daemon could serve");
	/* The watchdog pings every 100 ms (half of WATCHDOG_USEC). */
	for (i = 0; i < 20 && !got_dog; i++) {
		next_state(nfd, 1000, state, sizeof state);
		got_dog = strcmp(state, "WATCHDOG=1") == 0;
	}
	cr_assert(got_dog, "no WATCHDOG=1");
	/* The compile workers are not the service: they do not see it. */
	cr_assert_eq(e2e_call(sock, "{\"op\":\"stats\"}", &r), 0);
	w = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r.h,
	    "workers"), 0);
	cr_assert(w, "no worker in stats");
	snprintf(path, sizeof path, "/proc/%d/environ",
	    (int)e2e_num(w, "pid"));
	e2e_reply_free(&r);
	f = fopen(path, "r");
	cr_assert(f, "cannot read %s", path);
	n = (int)fread(state, 1, sizeof state - 1, f);
	fclose(f);
	for (i = 0; i < n; i++)
		if (state[i] == '\0')
			state[i] = '\n';
	state[n > 0 ? n : 0] = '\0';
	snprintf(env, sizeof env, "NOTIFY_SOCKET=");
	cr_assert_null(strstr(state, env), "a worker inherited NOTIFY_SOCKET");
	kill(pid, SIGTERM);
	for (i = 0; i < 50; i++) {
		next_state(nfd, 1000, state, sizeof state);
		if (strstr(state, "STOPPING=1"))
			break;
	}
	cr_assert(strstr(state, "STOPPING=1"), "no STOPPING=1");
	cr_assert_eq(wait_exit(pid, 30), 0);
	pid = 0;
	close(nfd);
}

static int run_cli(const char *const *args)
{
	char bin[512];
	const char *argv[16];
	int n = 0, i;
	pid_t p;

	snprintf(bin, sizeof bin, "%s/kspec", e2e_build_dir());
	argv[n++] = bin;
	for (i = 0; args[i] && n < 15; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	p = spawn(argv, "kspec.log");
	return wait_exit(p, 60);
}

Test(service, ping_wait_returns_once_a_daemon_starting_later_answers)
{
	char sock[300];
	const char *ping_wait[] = { "--socket", NULL, "ping", "--wait", "30",
	    NULL };
	const char *ping_short[] = { "--socket", NULL, "ping", "--wait",
	    "0.3", NULL };
	int st;
	pid_t waiter;

	snprintf(sock, sizeof sock, "%s/kspecd.sock", dir);
	ping_wait[1] = ping_short[1] = sock;
	/* Nobody there: exit 3 once the time is up. */
	cr_assert_eq(run_cli(ping_short), 3);
	/* A waiter started first, the daemon half a second later. */
	waiter = fork();
	cr_assert_geq(waiter, 0);
	if (waiter == 0)
		_exit(run_cli(ping_wait));
	usleep(500000);
	spawn_kspecd(sock, sizeof sock, NULL);
	cr_assert_eq(waitpid(waiter, &st, 0), waiter);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	    "kspec ping --wait did not see the daemon come up");
	kill(pid, SIGTERM);
	cr_assert_eq(wait_exit(pid, 30), 0);
	pid = 0;
}

/* The units as make install writes them (kspecd from this build): both
 * pass systemd-analyze verify, the service rates 2.5 or better (OK or
 * SAFE) in its offline security assessment, and the sysusers file makes
 * the user and group in a scratch root. */
Test(service, the_units_verify_and_the_service_rates_ok_or_better)
{
	char cmd[2048], line[512], sock_unit[300], svc[300];
	double exposure = -1;
	FILE *p;

	if (!have("systemd-analyze") || !have("systemd-sysusers"))
		cr_skip_test("systemd-analyze or systemd-sysusers is not "
		    "installed (deploy/deps.sh installs systemd)");
	snprintf(svc, sizeof svc, "%s/kspecd.service", dir);
	snprintf(sock_unit, sizeof sock_unit, "%s/kspecd.socket", dir);
	snprintf(cmd, sizeof cmd, "sed 's|@BINDIR@|%s|g' "
	    "deploy/kspecd.service.in >'%s' && cp deploy/kspecd.socket '%s'",
	    e2e_build_dir(), svc, sock_unit);
	cr_assert_eq(system(cmd), 0);
	/* verify prints what it finds wrong; nothing is the pass. */
	snprintf(cmd, sizeof cmd, "systemd-analyze verify '%s' '%s' 2>&1",
	    sock_unit, svc);
	p = popen(cmd, "r");
	cr_assert(p);
	while (fgets(line, sizeof line, p))
		cr_log_error("systemd-analyze verify: %s", line);
	cr_assert_eq(pclose(p), 0, "systemd-analyze verify failed");
	snprintf(cmd, sizeof cmd, "systemd-analyze security --offline=true "
	    "'%s' 2>&1", svc);
	p = popen(cmd, "r");
	cr_assert(p);
	while (fgets(line, sizeof line, p)) {
		const char *at = strstr(line, "Overall exposure level for "
		    "kspecd.service: ");

		if (at)
			exposure = strtod(at + strlen("Overall exposure level "
			    "for kspecd.service: "), NULL);
	}
	pclose(p);
	cr_log_info("exposure %.1f", exposure);
	cr_assert(exposure >= 0, "no exposure level in the output");
	cr_assert_leq(exposure, 2.5, "exposure %.1f", exposure);
	snprintf(cmd, sizeof cmd, "mkdir -p '%s/root/etc' && "
	    "systemd-sysusers --root='%s/root' \"$PWD/deploy/kspec.sysusers\" "
	    ">/dev/null 2>&1 && grep -q '^kspec:' '%s/root/etc/passwd' && "
	    "grep -q '^kspec:' '%s/root/etc/group'", dir, dir, dir, dir);
	cr_assert_eq(system(cmd), 0, "systemd-sysusers made no kspec user "
	    "and group");
}

/* Waits up to 30 s for SOCK to answer a ping. */
static void wait_serving(const char *sock)
{
	int i;

	for (i = 0; i < 3000 && !ping(sock); i++)
		usleep(10000);
	cr_assert(ping(sock), "kspecd did not start");
}

/* --log-level debug writes one line per request: op, key prefix,
 * source or error code, microseconds; --log-format json makes every line
 * one JSON object. */
Test(service, debug_logs_one_line_per_request)
{
	static const char *const extra[] = { "--log-level", "debug",
	    "--log-format", "json", NULL };
	static const char get[] = "{\"op\":\"get\",\"kernel\":\"gemm\","
	    "\"backend\":\"cpu\",\"dtype\":\"f32\",\"shape\":{\"M\":1,"
	    "\"N\":64,\"K\":64},\"return\":\"meta\"}";
	char sock[300], path[400], line[4096];
	int lines = 0, compiled = 0, memory = 0, bad = 0, pings = 0;
	e2e_reply_t r;
	FILE *f;

	spawn_kspecd(sock, sizeof sock, extra);
	wait_serving(sock);
	cr_assert_eq(e2e_call(sock, get, &r), 0);
	e2e_reply_free(&r);
	cr_assert_eq(e2e_call(sock, get, &r), 0);
	e2e_reply_free(&r);
	cr_assert_eq(e2e_call(sock, "{\"op\":\"get\",\"colour\":1}", &r),
	    0);
	e2e_reply_free(&r);
	kill(pid, SIGTERM);
	cr_assert_eq(wait_exit(pid, 30), 0);
	pid = 0;
	snprintf(path, sizeof path, "%s/kspecd.log", dir);
	f = fopen(path, "r");
	cr_assert(f);
	while (fgets(line, sizeof line, f)) {
		cJSON *j = cJSON_Parse(line);
		const char *msg;

		cr_assert(j, "not a JSON line: %s", line);
		msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j,
		    "msg"));
		cr_assert(msg && cJSON_GetObjectItemCaseSensitive(j, "time") &&
		    cJSON_GetObjectItemCaseSensitive(j, "level") &&
		    cJSON_GetObjectItemCaseSensitive(j, "pid"), "%s", line);
		lines++;
		if (strncmp(msg, "request op=get key=", 19) == 0 &&
		    strlen(msg) > 31 && msg[31] == ' ') {
			compiled += strstr(msg, " source=compiled us=") != NULL;
			memory += strstr(msg, " source=memory us=") != NULL;
		}
		bad += strstr(msg, "request op=get key=- "
		    "error=E_UNKNOWN_FIELD us=") != NULL;
		pings += strstr(msg, "request op=ping key=- source=- us=") !=
		    NULL;
		cJSON_Delete(j);
	}
	fclose(f);
	cr_assert_gt(lines, 0);
	cr_assert_eq(compiled, 1, "no line for the compiled get");
	cr_assert_eq(memory, 1, "no line for the memory hit");
	cr_assert_eq(bad, 1, "no line for the refused get");
	cr_assert_geq(pings, 1, "no line for a ping");
}

/* Under make asan the installed library is instrumented: a program that
 * links it must be too. */
#if defined(__SANITIZE_ADDRESS__)
#define PROG_CFLAGS "-fsanitize=address,undefined"
#else
#define PROG_CFLAGS ""
#endif

/* make install into a staging root: libkspec has its SONAME and links,
 * a program built with `pkg-config --cflags --libs kspec` needs
 * libkspec.so.0 and runs against the installed library; make uninstall
 * then leaves no file behind. */
Test(service, make_install_gives_a_library_to_link_and_uninstall_removes_it)
{
	char cmd[4096], build[512];
	const char *b = e2e_build_dir();

	if (!have("pkg-config") || !have("make") || !have("cc"))
		cr_skip_test("needs make, cc and pkg-config (deploy/deps.sh)");
	if (b[0] == '/')
		snprintf(build, sizeof build, "%s", b);
	else
		cr_assert(realpath(b, build), "no build directory %s", b);
	snprintf(cmd, sizeof cmd, "make -s --no-print-directory install "
	    "BUILD='%s' DESTDIR='%s/stage' >'%s/install.log' 2>&1", build, dir,
	    dir);
	cr_assert_eq(system(cmd), 0, "make install failed (%s/install.log)",
	    dir);
	snprintf(cmd, sizeof cmd, "readelf -d '%s/stage/usr/local/lib/"
	    "libkspec.so.0' | grep -q 'SONAME.*\\[libkspec.so.0\\]'", dir);
	cr_assert_eq(system(cmd), 0, "libkspec.so.0 lacks its SONAME");
	snprintf(cmd, sizeof cmd, "cd '%s' && printf '%%s\\n' "
	    "'#include <kspec.h>' '#include <stdio.h>' "
	    "'int main(void) { kspec_client_t *c = NULL;' "
	    "'  int rc = kspec_connect(\"/nonexistent/kspecd.sock\", &c);' "
	    "'  kspec_close(c);' "
	    "'  printf(\"%%s %%d\\n\", KSPEC_VERSION, rc != 0);' "
	    "'  return 0; }' >prog.c && "
	    "PKG_CONFIG_PATH='%s/stage/usr/local/lib/pkgconfig' "
	    "PKG_CONFIG_SYSROOT_DIR='%s/stage' "
	    "cc " PROG_CFLAGS " -o prog prog.c "
	    "$(PKG_CONFIG_PATH='%s/stage/usr/local/lib/pkgconfig' "
	    "PKG_CONFIG_SYSROOT_DIR='%s/stage' pkg-config --cflags "
	    "--libs kspec) >cc.log 2>&1 && readelf -d prog | grep -q "
	    "'NEEDED.*\\[libkspec.so.0\\]' && "
	    "LD_LIBRARY_PATH='%s/stage/usr/local/lib' ./prog >prog.out && "
	    "grep -qx '" KSPEC_VERSION " 1' prog.out", dir, dir, dir, dir,
	    dir, dir);
	cr_assert_eq(system(cmd), 0, "a program built with pkg-config did not "
	    "build or run (%s/cc.log)", dir);
	snprintf(cmd, sizeof cmd, "make -s --no-print-directory uninstall "
	    "BUILD='%s' DESTDIR='%s/stage' >/dev/null 2>&1 && "
	    "test -z \"$(find '%s/stage' -type f -o -type l)\"", build, dir,
	    dir);
	cr_assert_eq(system(cmd), 0, "make uninstall left files behind");
}

/* pip install ./client/python in a fresh venv, with no index to fetch
 * anything from; then, outside the repository, the client fetches a
 * kernel from a real daemon, loads it and runs it. */
Test(service, pip_installs_the_python_client_into_a_fresh_venv_offline)
{
	static const char script[] =
	    "import array, sys, kspec\n"
	    "assert 'site-packages' in kspec.__file__, kspec.__file__\n"
	    "with kspec.Client(sys.argv[1]) as c:\n"
	    "    arts = c.get_many([{'kernel': 'gemm', 'dtype': 'f32',\n"
	    "                        'shape': {'M': 1, 'N': 8, 'K': 8}}])\n"
	    "    gemv = kspec.load_cpu(arts[0])\n"
	    "    x = array.array('f', [1.0] * 8)\n"
	    "    W = array.array('f', [float(i) for i in range(64)])\n"
	    "    y = array.array('f', [0.0] * 8)\n"
	    "    gemv(x, W, y)\n"
	    "    print(list(y))\n";
	char cmd[4096], sock[300], path[400], repo[512];
	FILE *f;

	if (system("/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null"))
		cr_skip_test("python3-venv is not installed (deploy/deps.sh "
		    "installs it)");
	cr_assert(getcwd(repo, sizeof repo));
	snprintf(cmd, sizeof cmd, "cd '%s' && /usr/bin/python3 -m venv venv && "
	    "venv/bin/pip install --no-index --no-cache-dir "
	    "'%s/client/python' >pip.log 2>&1", dir, repo);
	cr_assert_eq(system(cmd), 0, "pip install failed (%s/pip.log)", dir);
	snprintf(path, sizeof path, "%s/example.py", dir);
	f = fopen(path, "w");
	cr_assert(f);
	fputs(script, f);
	fclose(f);
	spawn_kspecd(sock, sizeof sock, NULL);
	wait_serving(sock);
	/* Row n of W is 8n..8n+7; x is all ones: y[n] = 64n + 28. */
	snprintf(cmd, sizeof cmd, "cd '%s' && env -u PYTHONPATH venv/bin/python "
	    "example.py '%s' >example.out 2>&1 && grep -qx '\\[28.0, 92.0, "
	    "156.0, 220.0, 284.0, 348.0, 412.0, 476.0\\]' example.out", dir,
	    sock);
	cr_assert_eq(system(cmd), 0, "the example did not run (%s/example.out)",
	    dir);
	kill(pid, SIGTERM);
	cr_assert_eq(wait_exit(pid, 30), 0);
	pid = 0;
}

/* Every option `kspecd --help` names, and every command and option of
 * `kspec --help`, is in the man page and in the bash completion; the man
 * pages render without a groff warning; completion completes. */
/* Whether the file NAME of the build folder holds the bytes WORD. */
static int build_file_has(const char *name, const char *word)
{
	char path[512];
	FILE *f;
	char *buf;
	long n;
	int found;

	snprintf(path, sizeof path, "%s/%s", e2e_build_dir(), name);
	f = fopen(path, "rb");
	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = malloc((size_t)n);
	cr_assert_not_null(buf);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	found = memmem(buf, (size_t)n, word, strlen(word)) != NULL;
	free(buf);
	return found;
}

/*
 * The programs and library that install read no test switch: no
 * KSPEC_TEST_* name is in them (the switches and the planted bugs behind
 * them are compiled into tests/kspecd-plant only, -DKS_TEST_PLANT).  The
 * test build is scanned too, and must hold them: the scan finds what it
 * looks for.
 */
Test(service, the_installed_binaries_read_no_test_switch)
{
	static const char *const shipped[] = { "kspecd", "kspec",
		"libkspec.so", "libkspec.a" };
	static const char *const planted[] = { "KSPEC_TEST_FAULTS",
		"KSPEC_TEST_REMOTE_BUG", "KSPEC_TEST_FAST_PATH_BUG",
		"KSPEC_TEST_PLANT_CODEGEN", "KSPEC_TEST_PLANT_IMPORT_SLOW_STORE",
		"KSPEC_TEST_PLANT_SLOW_WRITER" };
	size_t i;

	for (i = 0; i < sizeof shipped / sizeof shipped[0]; i++)
		cr_assert(!build_file_has(shipped[i], "KSPEC_TEST_"),
		    "%s names a KSPEC_TEST_ variable", shipped[i]);
	for (i = 0; i < sizeof planted / sizeof planted[0]; i++)
		cr_assert(build_file_has("tests/kspecd-plant", planted[i]),
		    "the test build lacks %s", planted[i]);
}

Test(service, man_pages_and_completion_know_every_option)
{
	static const char *const check =
	    "set -e; cd \"$REPO\"; B=\"$BUILD\"\n"
	    "unesc() { sed 's/\\\\-/-/g' \"$1\"; }\n"
	    "\"$B/kspecd\" -h | grep -q -- --store ||"
	    " { echo 'kspecd -h does not print the usage'; exit 1; }\n"
	    "for o in $(\"$B/kspecd\" -h | grep -o -- '--[a-z][a-z-]*' |"
	    " sort -u); do\n"
	    "  unesc deploy/man/kspecd.8 | grep -q -- \"$o\" ||"
	    " { echo \"kspecd.8 lacks $o\"; exit 1; }\n"
	    "  grep -q -- \"$o\" deploy/kspec.bash-completion ||"
	    " { echo \"completion lacks $o\"; exit 1; }\n"
	    "done\n"
	    "for c in $(\"$B/kspec\" --help | sed -n '/^commands:/,/^$/p' |"
	    " awk 'NR > 1 && $1 != \"\" {print $1}'); do\n"
	    "  unesc deploy/man/kspec.1 | grep -q -- \"^\\\\\\\\fB$c\" ||"
	    " unesc deploy/man/kspec.1 | grep -q -- \"fB$c\" ||"
	    " { echo \"kspec.1 lacks $c\"; exit 1; }\n"
	    "  grep -qw -- \"$c\" deploy/kspec.bash-completion ||"
	    " { echo \"completion lacks $c\"; exit 1; }\n"
	    "done\n"
	    "for o in $(\"$B/kspec\" --help | grep -o -- '--[a-z][a-z-]*' |"
	    " sort -u); do\n"
	    "  unesc deploy/man/kspec.1 | grep -q -- \"$o\" ||"
	    " { echo \"kspec.1 lacks $o\"; exit 1; }\n"
	    "done\n"
	    "for m in deploy/man/kspec.1 deploy/man/kspecd.8; do\n"
	    "  w=$(groff -man -Tutf8 -ww -z \"$m\" 2>&1)\n"
	    "  [ -z \"$w\" ] || { echo \"$m: $w\"; exit 1; }\n"
	    "done\n"
	    ". deploy/kspec.bash-completion\n"
	    "comp() { COMP_WORDS=(\"$@\"); COMP_CWORD=$(($# - 1));"
	    " COMPREPLY=(); \"_${1}\"; echo \"${COMPREPLY[*]}\"; }\n"
	    "[ \"$(comp kspec ge)\" = get ] || { echo 'kspec ge'; exit 1; }\n"
	    "[ \"$(comp kspec get --dt)\" = --dtype ] ||"
	    " { echo 'kspec get --dt'; exit 1; }\n"
	    "[ \"$(comp kspec get --dtype b)\" = bf16 ] ||"
	    " { echo 'kspec get --dtype b'; exit 1; }\n"
	    "[ \"$(comp kspec --socket /x pi)\" = ping ] ||"
	    " { echo 'kspec --socket /x pi'; exit 1; }\n"
	    "[ \"$(comp kspecd --log-l)\" = --log-level ] ||"
	    " { echo 'kspecd --log-l'; exit 1; }\n";
	char path[400], cmd[2048], repo[512], build[512], line[512];
	const char *b = e2e_build_dir();
	FILE *f, *p;

	if (!have("bash") || !have("groff"))
		cr_skip_test("needs bash and groff");
	cr_assert(getcwd(repo, sizeof repo));
	if (b[0] == '/')
		snprintf(build, sizeof build, "%s", b);
	else
		cr_assert(realpath(b, build));
	snprintf(path, sizeof path, "%s/check.sh", dir);
	f = fopen(path, "w");
	cr_assert(f);
	fputs(check, f);
	fclose(f);
	snprintf(cmd, sizeof cmd, "REPO='%s' BUILD='%s' bash '%s' 2>&1", repo,
	    build, path);
	p = popen(cmd, "r");
	cr_assert(p);
	while (fgets(line, sizeof line, p))
		cr_log_error("%s", line);
	cr_assert_eq(pclose(p), 0, "the man pages or completion are behind");
}
