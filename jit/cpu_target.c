/*
 * cpu_target.c: the cpu backend's targets, the options of its compiles
 * and its identity (what of the compiler goes into every key), and the
 * step that turns a built gccjit context into bytes.  The lowering is
 * cpu.c's (and cpu_vec.c's).
 */
#include "cpu_lower.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libgccjit.h>

/*
 * Targets accepted by name.  The four x86-64 ISA levels are what "auto"
 * resolves to; the CPU names are common -march values a fleet may pin.
 * libgccjit rejects -march=native, so "auto" is resolved here to a level.
 * Every name must be known to the linked gcc (12.2 has no znver4); the
 * tests compile each one.
 */
static const char *const cpu_targets[] = {
	"x86-64-v4", "x86-64-v3", "x86-64-v2", "x86-64",
	"haswell", "broadwell", "skylake", "skylake-avx512", "cascadelake",
	"icelake-server", "sapphirerapids", "znver2", "znver3",
};

/*
 * Options of every compile, after -march; all of them are in the identity
 * (and so in the request key).  -O3 vectorizes the lane loops;
 * -ffp-contract=off forbids implicit fma (docs/backends.md, "Numerics").  The
 * defaults already forbid reassociation and keep signed zeros and NaNs,
 * and the output is byte-reproducible as is (two compiles of one IR give
 * identical .so files: no temporary path reaches the object, the assembly
 * names its source "fake.c", and there is no debug info; checked across
 * processes and TMPDIRs).
 *
 * -fno-trapping-math is NOT used although it would let GCC if-convert
 * float comparisons: it also enables folds that change values (GCC 12
 * turns f32(i64(x)) into trunc(x), which keeps the sign of -0; test_opencl
 * caught it).  The helpers compare bit patterns as integers instead, which
 * never trap, so their lane loops vectorize under the strict defaults.
 * -fno-math-errno is left out: it was measured to change nothing.
 */
static const char *const cpu_opts[] = {
	"-O3",
	"-ffp-contract=off",
	/*
	 * libgccjit 12 gives GCC_JIT_FUNCTION_ALWAYS_INLINE functions the
	 * always_inline attribute but, unlike the C front end, not
	 * DECL_DISREGARD_INLINE_LIMITS, so inlining the ksh_ helpers stays
	 * heuristic: a call that branch-probability guessing marks cold
	 * ("call is unlikely and code size would grow", e.g. the f16 store of
	 * rope's tail with D = 96 bound) is refused, and the refused
	 * always_inline call is then a compile error.  This limit makes every
	 * helper (the f16 store grows a caller by about 20) inline
	 * regardless; the helpers are the only inlinable functions of an
	 * artifact, and they were inlined everywhere else already.
	 */
	"--param=max-inline-insns-size=100",
};

/*
 * Driver (link) options.  fmaf is a libm call on targets without FMA
 * (x86-64, x86-64-v2): record the dependency so dlopen resolves it in any
 * process, not only in one that happens to have libm loaded.  The rest
 * makes the artifact small (about 6 KB instead of 15 KB for a gemv, which
 * the hit path sends and every client loads): one page-aligned segment
 * layout instead of separate code pages, no static symbol table (the
 * entry is in .dynsym) and no build-id note (the store has its own content
 * hash).  RELRO is kept.
 */
static const char *const cpu_driver_opts[] = {
	"-lm",
	"-Wl,-z,noseparate-code",
	"-s",
	"-Wl,--build-id=none",
};

/*
 * GCC's garbage collector, which libgccjit runs inside the compiling
 * process, collects only when its heap has grown by ggc-min-expand percent
 * past ggc-min-heapsize KB, and the defaults size those from the machine's
 * RAM: a compile worker's resident set climbed from 236 MB after 50 gemm
 * compiles to 410 MB after 150.  With these two the set stayed at 155 MB
 * over 300 compiles, for the same CPU time (median of three runs of 150
 * compiles: 20.6 s against 20.4 s) and byte-identical artifacts.  They
 * change no output, so they are not in the identity.
 */
static const char *const cpu_gc_opts[] = {
	"--param=ggc-min-expand=30",
	"--param=ggc-min-heapsize=8192",
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* -march=TARGET and every option above, on a fresh context. */
void ks_cpu_options(gcc_jit_context *ctx, const char *target)
{
	char march[KS_MAX_NAME + 16];
	size_t i;

	snprintf(march, sizeof(march), "-march=%s", target);
	gcc_jit_context_add_command_line_option(ctx, march);
	for (i = 0; i < NELEM(cpu_opts); i++)
		gcc_jit_context_add_command_line_option(ctx, cpu_opts[i]);
	for (i = 0; i < NELEM(cpu_driver_opts); i++)
		gcc_jit_context_add_driver_option(ctx, cpu_driver_opts[i]);
	for (i = 0; i < NELEM(cpu_gc_opts); i++)
		gcc_jit_context_add_command_line_option(ctx, cpu_gc_opts[i]);
}

int ks_cpu_target_known(const char *t)
{
	size_t i;

	for (i = 0; i < NELEM(cpu_targets); i++)
		if (strcmp(t, cpu_targets[i]) == 0)
			return 1;
	return 0;
}

/*
 * The exact x86-64 ISA level of this CPU: the highest level whose every
 * feature (psABI list) is present.  libgcc's __builtin_cpu_supports
 * reports AVX and AVX-512 only when the OS enables their register state
 * (xgetbv), so a level found here is one this machine can run.  The
 * builtin takes string literals only, hence the spelled-out lists.
 */
static const char *cpu_level(void)
{
	__builtin_cpu_init();
	if (!(__builtin_cpu_supports("cmpxchg16b") &&
	    __builtin_cpu_supports("lahf_lm") &&
	    __builtin_cpu_supports("popcnt") &&
	    __builtin_cpu_supports("sse3") &&
	    __builtin_cpu_supports("ssse3") &&
	    __builtin_cpu_supports("sse4.1") &&
	    __builtin_cpu_supports("sse4.2")))
		return "x86-64";
	if (!(__builtin_cpu_supports("avx") &&
	    __builtin_cpu_supports("avx2") &&
	    __builtin_cpu_supports("bmi") &&
	    __builtin_cpu_supports("bmi2") &&
	    __builtin_cpu_supports("f16c") &&
	    __builtin_cpu_supports("fma") &&
	    __builtin_cpu_supports("lzcnt") &&
	    __builtin_cpu_supports("movbe") &&
	    __builtin_cpu_supports("xsave")))
		return "x86-64-v2";
	if (!(__builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512cd") &&
	    __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512vl")))
		return "x86-64-v3";
	return "x86-64-v4";
}

int ks_cpu_available(char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	return KS_OK;           /* libgccjit is linked into the daemon */
}

int ks_cpu_resolve_target(const char *requested, char *out,
    size_t outlen, char *err, size_t errlen)
{
	const char *t = requested;
	size_t i;
	ks_buf_t list;

	if (t == NULL || strcmp(t, "auto") == 0)
		t = cpu_level();
	if (ks_cpu_target_known(t)) {
		if (strlen(t) >= outlen) {
			ks_set_err(err, errlen, "target name too long");
			return KS_E_INVAL;
		}
		memcpy(out, t, strlen(t) + 1);
		return KS_OK;
	}
	ks_buf_init(&list);
	for (i = 0; i < NELEM(cpu_targets); i++)
		ks_buf_printf(&list, "%s%s", i ? ", " : "", cpu_targets[i]);
	ks_set_err(err, errlen, "cpu target '%.*s' is not accepted; use auto or "
	    "one of: %s", KS_MAX_NAME, requested,
	    list.data ? list.data : "");
	ks_buf_close(&list);
	return KS_E_BAD_TARGET;
}

int ks_cpu_check_format(const char *format)
{
	return format != NULL && strcmp(format, "so") == 0 ? KS_OK :
	    KS_E_BAD_FORMAT;
}

/*
 * The distribution's build of gcc ("Debian 12.2.0-14+deb12u1"), from the
 * .ident of an empty compile, once per process.  gcc_jit_version_* gives
 * only 12.2.0, and a distribution patch release can change code generation
 * (the toolchain's version is in the key: docs/architecture.md, "Keys").
 * Empty if unknown.
 */
static pthread_once_t build_once = PTHREAD_ONCE_INIT;
static char build_name[128];

static void build_name_init(void)
{
	gcc_jit_context *ctx = gcc_jit_context_acquire();
	uint8_t *asm_text = NULL;
	size_t len = 0, n;
	char err[256];
	const char *p, *q, *end;

	if (ctx == NULL)
		return;
	gcc_jit_context_set_bool_print_errors_to_stderr(ctx, 0);
	if (ks_cpu_emit(ctx, GCC_JIT_OUTPUT_KIND_ASSEMBLER, &asm_text, &len, err,
	    sizeof(err)) == KS_OK) {
		/* .ident "GCC: (Debian 12.2.0-14+deb12u1) 12.2.0" */
		end = (const char *)asm_text + len;
		p = memmem(asm_text, len, "GCC: (", 6);
		q = p ? memchr(p + 6, ')', (size_t)(end - p - 6)) : NULL;
		if (q != NULL) {
			n = (size_t)(q - (p + 6));
			if (n < sizeof(build_name)) {
				memcpy(build_name, p + 6, n);
				build_name[n] = '\0';
			}
		}
	}
	free(asm_text);
	gcc_jit_context_release(ctx);
}

int ks_cpu_identity(const char *target, ks_buf_t *out)
{
	size_t i;
	int rc;

	pthread_once(&build_once, build_name_init);
	rc = ks_buf_printf(out, "libgccjit %d.%d.%d", gcc_jit_version_major(),
	    gcc_jit_version_minor(), gcc_jit_version_patchlevel());
	if (rc == KS_OK && build_name[0] != '\0')
		rc = ks_buf_printf(out, " (%s)", build_name);
	if (rc == KS_OK)
		rc = ks_buf_printf(out, "; -march=%s", target);
	for (i = 0; rc == KS_OK && i < NELEM(cpu_opts); i++)
		rc = ks_buf_printf(out, " %s", cpu_opts[i]);
	if (rc == KS_OK)
		rc = ks_buf_puts(out, "; link");
	for (i = 0; rc == KS_OK && i < NELEM(cpu_driver_opts); i++)
		rc = ks_buf_printf(out, " %s", cpu_driver_opts[i]);
	return rc;
}

int ks_cpu_list_targets(char (*names)[KS_MAX_NAME + 1], int max)
{
	int i;

	for (i = 0; i < (int)NELEM(cpu_targets) && i < max; i++)
		snprintf(names[i], KS_MAX_NAME + 1, "%s", cpu_targets[i]);
	return i;
}

/* Reads the whole of PATH into a malloc'd buffer. */
static int read_file(const char *path, uint8_t **bytes, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	uint8_t *p;
	size_t off = 0;
	int e;

	if (fd < 0)
		return ks_err_from_errno(errno);
	if (fstat(fd, &st) != 0 || st.st_size <= 0) {
		e = errno ? errno : EIO;
		close(fd);
		return ks_err_from_errno(e);
	}
	p = malloc((size_t)st.st_size);
	if (p == NULL) {
		close(fd);
		return KS_E_NOMEM;
	}
	while (off < (size_t)st.st_size) {
		ssize_t n = read(fd, p + off, (size_t)st.st_size - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			e = n < 0 ? errno : EIO;
			free(p);
			close(fd);
			return ks_err_from_errno(e);
		}
		off += (size_t)n;
	}
	close(fd);
	*bytes = p;
	*len = off;
	return KS_OK;
}

/*
 * Builds the gccjit context for K and TARGET: types, helpers on demand, the
 * entry, options.  The caller compiles and releases it.
 */

/*
 * Compiles CTX to OUT_PATH's kind in a private directory under $TMPDIR (or
 * /tmp) and returns its bytes; the directory and file are removed on every
 * path.
 */
int ks_cpu_emit(gcc_jit_context *ctx, enum gcc_jit_output_kind kind,
    uint8_t **bytes, size_t *len, char *err, size_t errlen)
{
	const char *tmp = getenv("TMPDIR");
	char dir[4096], path[4200];
	const char *gerr;
	int rc;

	if (tmp == NULL || tmp[0] == '\0' || strlen(tmp) > 3000)
		tmp = "/tmp";
	snprintf(dir, sizeof(dir), "%s/kspec-jit-XXXXXX", tmp);
	if (mkdtemp(dir) == NULL) {
		rc = ks_err_from_errno(errno);
		ks_set_err(err, errlen, "mkdtemp %s: %s", dir, strerror(errno));
		return rc;
	}
	snprintf(path, sizeof(path), "%s/artifact", dir);
	gcc_jit_context_compile_to_file(ctx, kind, path);
	gerr = gcc_jit_context_get_first_error(ctx);
	if (gerr != NULL) {
		ks_set_err(err, errlen, "libgccjit: %s", gerr);
		rc = KS_E_COMPILE;
	} else {
		rc = read_file(path, bytes, len);
		if (rc != KS_OK)
			ks_set_err(err, errlen, "reading the compiled artifact: %s",
			    ks_strerror(rc));
	}
	unlink(path);
	rmdir(dir);
	return rc;
}
