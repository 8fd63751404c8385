/*
 * The allocation-failure injector of make oom (tests/oom.h).
 *
 * The oom test binaries are linked with -Wl,--wrap for malloc, calloc,
 * realloc, strdup and strndup, so every call to them from kspec's objects
 * and the test's own comes here first; the shared libraries (SQLite,
 * cJSON) call their own allocators, which the tests route here through
 * the libraries' hooks (ks_oom_hook_cjson, and sqlite3_config in
 * oom_store.c).  While armed, the injector counts allocations and makes
 * the Nth fail (returns NULL), or with KS_OOM_PERSIST every one from the
 * Nth on, as SQLite's test_malloc.c does.  The counter is atomic because
 * a library may allocate on a thread of its own; Criterion runs each test
 * in a process of its own, so the counter is per test.
 */
#include "oom.h"

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <string.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

static atomic_long left;        /* allocations until the failing one; 0 off */
static atomic_int persist;      /* every allocation after the Nth fails */
static atomic_long counted;     /* allocations since ks_oom_arm */
static atomic_long failed;      /* allocations failed since ks_oom_arm */

void ks_oom_arm(long n, int mode)
{
	atomic_store(&counted, 0);
	atomic_store(&failed, 0);
	atomic_store(&persist, mode == KS_OOM_PERSIST);
	atomic_store(&left, n);
}

long ks_oom_disarm(void)
{
	atomic_store(&left, 0);
	atomic_store(&persist, 0);
	return atomic_load(&failed);
}

long ks_oom_counted(void)
{
	return atomic_load(&counted);
}

int ks_oom_should_fail(void)
{
	long n = atomic_load(&left);

	if (n <= 0)
		return 0;
	atomic_fetch_add(&counted, 1);
	if (n == 1 && atomic_load(&persist)) {
		atomic_fetch_add(&failed, 1);
		return 1;
	}
	if (atomic_fetch_sub(&left, 1) == 1) {
		atomic_fetch_add(&failed, 1);
		return 1;
	}
	return 0;
}

void *__wrap_malloc(size_t n)
{
	return ks_oom_should_fail() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
	return ks_oom_should_fail() ? NULL : __real_calloc(n, size);
}

/* A failed realloc leaves the block as it was, as the real one does. */
void *__wrap_realloc(void *p, size_t n)
{
	return ks_oom_should_fail() ? NULL : __real_realloc(p, n);
}

char *__wrap_strdup(const char *s)
{
	return ks_oom_should_fail() ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
	return ks_oom_should_fail() ? NULL : __real_strndup(s, n);
}

/* Zeroes the stack below the caller, where the frames of the operation
 * just run left copies of pointers: LeakSanitizer scans the stack
 * conservatively, and would count a block as reachable through a stale
 * copy that its own frames do not overwrite. */
static __attribute__((noinline)) void wipe_stack(void)
{
	char pad[64 * 1024];

	explicit_bzero(pad, sizeof pad);
	__asm__ volatile("" : : "r"(pad) : "memory");
}

int ks_oom_leaked(void)
{
	if (__lsan_do_recoverable_leak_check == NULL)
		return 0;
	wipe_stack();
	return __lsan_do_recoverable_leak_check() != 0;
}

void ks_oom_hook_cjson(void)
{
	cJSON_Hooks hooks = { __wrap_malloc, free };

	cJSON_InitHooks(&hooks);
}
