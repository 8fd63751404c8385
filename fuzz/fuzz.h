/*
 * The fuzz targets (docs/operations.md, "Fuzzing"): one for each parser
 * that reads bytes from outside the daemon, each a function of one input
 * that checks what it can of the result and aborts when a check fails.
 *
 *   request   proto/proto.c's request decoder, with the canonical get-spec
 *             of what it parsed read back to the same key
 *   fastpath  server/fastpath.c's scan, find and learn against the full
 *             parse: a header the fast path answers gets what the full
 *             parse would give it
 *   http      server/http.c's request head parser, read at once and cut
 *             short at its blank line
 *   entry     proto/entry.c's signed-entry and bundle parsers, each input
 *             also sealed and opened again
 *   redis     server/fleetval.c's reading of the values of the remote
 *             tier: artifacts, failure markers and leases
 *   gguf      examples/llama's GGUF reader, a file it reads written again
 *             by its writer and read back
 *   irtext    specialize/parse.c's reader of the IR's text form: what it
 *             accepts prints back to the same bytes, what it refuses is
 *             refused at a place in the text
 *
 * Each file builds two ways: with clang's libFuzzer (-DKS_FUZZ_LIBFUZZER,
 * `make fuzz`), where it is its own program's LLVMFuzzerTestOneInput; and
 * into the test suite (tests/test_fuzz.c), where it is ks_fuzz_NAME and
 * replays fuzz/corpus/NAME/ and fuzz/regressions/NAME/.
 */
#ifndef KS_FUZZ_H
#define KS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

#include "../proto/entry.h"
#include "../server/keys.h"

#define KS_FUZZ_TARGETS(X) X(request) X(fastpath) X(http) X(entry) X(redis) \
	X(gguf) X(irtext)

/* Makes what the targets share (below) now rather than in a target's
 * first run. */
void ks_fuzz_init(void);

#ifdef KS_FUZZ_LIBFUZZER
#define KS_FUZZ_TARGET(name) \
	int LLVMFuzzerInitialize(int *argc, char ***argv) \
	{ \
		ks_fuzz_init(); \
		return 0; \
	} \
	int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
#else
#define KS_FUZZ_TARGET(name) \
	int ks_fuzz_##name(const uint8_t *data, size_t size)
#define KS_FUZZ_DECLARE(name) \
	int ks_fuzz_##name(const uint8_t *data, size_t size);
KS_FUZZ_TARGETS(KS_FUZZ_DECLARE)
/* The replay's self-check sets it: the fast path's planted bug
 * (fastpath.h; fastpath.c built with -DKS_TEST_PLANT) in the fastpath
 * target. */
extern int ks_fuzz_fastpath_plant;
#endif

/* A target's check: when COND is false, names it and where, and aborts
 * (libFuzzer then keeps the input as a crash). */
#define KS_FUZZ_CHECK(cond) \
	((cond) ? (void)0 : ks_fuzz_fail(#cond, __FILE__, __LINE__))
_Noreturn void ks_fuzz_fail(const char *what, const char *file, int line);

/* Keys as a daemon has them, its probe fixed: cpu (auto and two listed
 * targets, one more refused), opencl (auto), cuda unavailable.  Made once;
 * never freed. */
ks_keys_t *ks_fuzz_keys(void);

/* The fleet key pair of the targets and of fuzz/seeds.c, from a fixed
 * seed, so that the corpus's signed values verify. */
const ks_fleet_pub_t *ks_fuzz_fleet_public(void);
const ks_fleet_sec_t *ks_fuzz_fleet_secret(void);
/* The request key the corpus's fleet values are made for. */
void ks_fuzz_value_key(ks_hash_t *key);
/* The wall clock, ms, at which the targets read fleet values, and at
 * which fuzz/seeds.c made them. */
#define KS_FUZZ_NOW_MS 1.8e12

#endif
