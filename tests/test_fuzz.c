/*
 * The fuzz targets of fuzz/ (docs/operations.md, "Fuzzing") replay their
 * seed corpus and every input a fuzzer found a bug with,
 * fuzz/corpus/TARGET/ and fuzz/regressions/TARGET/, as plain functions: a
 * target's check that fails aborts, and so fails its test.  `make fuzz`
 * runs the same targets under libFuzzer.
 *
 * The replay checks itself: with the fast path's planted bug (templates
 * end at the id, fastpath.h; this binary links fastpath.c built with
 * -DKS_TEST_PLANT) the fastpath target must abort on its corpus.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fuzz/fuzz.h"

typedef int target_fn(const uint8_t *data, size_t size);

/* Reads PATH whole into *DATA (caller frees); its size, or -1. */
static long slurp(const char *path, uint8_t **data)
{
	FILE *f = fopen(path, "rb");
	long n = -1;

	*data = NULL;
	if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0 && (*data = malloc(n ? n : 1)) &&
	    fread(*data, 1, n, f) != (size_t)n)
		n = -1;
	if (f)
		fclose(f);
	return n;
}

/* Runs FN on every file of fuzz/SUB/TARGET/ (beside this file's folder,
 * from __FILE__: run from the repository root, as make test does); how
 * many, 0 when there is no such folder. */
static int replay_dir(target_fn *fn, const char *sub, const char *target)
{
	const char *slash = strrchr(__FILE__, '/');
	char dir[4096], path[4400];
	struct dirent *d;
	uint8_t *data;
	int count = 0;
	long n;
	DIR *dp;

	snprintf(dir, sizeof dir, "%.*s/../fuzz/%s/%s",
	    slash ? (int)(slash - __FILE__) : 1, slash ? __FILE__ : ".", sub,
	    target);
	dp = opendir(dir);
	if (!dp)
		return 0;
	while ((d = readdir(dp)) != NULL) {
		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "%s/%s", dir, d->d_name);
		n = slurp(path, &data);
		cr_assert_geq(n, 0, "cannot read %s", path);
		fn(data, (size_t)n);
		free(data);
		count++;
	}
	closedir(dp);
	return count;
}

static void replay(target_fn *fn, const char *target)
{
	cr_assert_gt(replay_dir(fn, "corpus", target), 0,
	    "fuzz/corpus/%s has no input", target);
	replay_dir(fn, "regressions", target);
}

TestSuite(fuzz, .timeout = 60);

Test(fuzz, request_decoder_passes_its_corpus_and_regressions)
{
	replay(ks_fuzz_request, "request");
}

Test(fuzz, fast_path_passes_its_corpus_and_regressions)
{
	replay(ks_fuzz_fastpath, "fastpath");
}

Test(fuzz, http_head_parser_passes_its_corpus_and_regressions)
{
	replay(ks_fuzz_http, "http");
}

Test(fuzz, gguf_reader_passes_its_corpus_and_regressions)
{
	replay(ks_fuzz_gguf, "gguf");
}

Test(fuzz, entry_and_bundle_parsers_pass_their_corpus_and_regressions)
{
	replay(ks_fuzz_entry, "entry");
}

Test(fuzz, redis_value_readers_pass_their_corpus_and_regressions)
{
	replay(ks_fuzz_redis, "redis");
}

Test(fuzz, ir_text_parser_passes_its_corpus_and_regressions)
{
	replay(ks_fuzz_irtext, "irtext");
}

Test(fuzz, the_replay_fails_on_a_planted_fast_path_bug,
    .signal = SIGABRT)
{
	ks_fuzz_fastpath_plant = 1;
	replay(ks_fuzz_fastpath, "fastpath");
}
