#!/bin/sh
# Runs each fuzz target of fuzz/ (built by make fuzz into BUILD/fuzz/)
# under libFuzzer for SECONDS, FUZZ_JOBS of them at once (default 1), and
# prints a line per target: seconds, executions, corpus, findings.
#
# The seed corpus fuzz/corpus/TARGET/ and the regressions
# fuzz/regressions/TARGET/ are only read: new inputs go to a scratch
# corpus, FUZZ_WORK/corpus/TARGET/ (default /tmp/kspec-fuzz, kept between
# runs so that a run goes on from the last), a finding's input to
# FUZZ_WORK/crashes/TARGET/, each target's output to FUZZ_WORK/TARGET.log.
# A finding, once fixed, goes into fuzz/regressions/TARGET/
# (docs/operations.md, "Fuzzing").  Exit status 1 when any target found
# something.
#
# Usage: fuzz/run.sh BUILD SECONDS TARGET...
set -u
build=$1
secs=$2
shift 2
work=${FUZZ_WORK:-/tmp/kspec-fuzz}
jobs=${FUZZ_JOBS:-1}
here=$(cd "$(dirname "$0")" && pwd)

run_one() {
	t=$1
	mkdir -p "$work/corpus/$t" "$work/crashes/$t"
	set -- "$work/corpus/$t" "$here/corpus/$t"
	[ -d "$here/regressions/$t" ] && set -- "$@" "$here/regressions/$t"
	dict=""
	[ -f "$here/$t.dict" ] && dict="-dict=$here/$t.dict"
	# A finding stops the target; -timeout makes a hang one.
	# shellcheck disable=SC2086
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    "$build/fuzz/$t" -max_total_time="$secs" -timeout=25 \
	    -print_final_stats=1 -artifact_prefix="$work/crashes/$t/" \
	    $dict "$@" >"$work/$t.log" 2>&1
	echo $? >"$work/$t.rc"
}

# What a target's log says: its final stats and corpus.
report() {
	t=$1
	log="$work/$t.log"
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	took=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log")
	corp=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -n 1)
	# A slow unit is not a finding (libFuzzer keeps those over 10 s).
	found=$(ls "$work/crashes/$t" | grep -vc '^slow-unit-')
	if [ "$(cat "$work/$t.rc")" = 0 ] && [ "$found" = 0 ]; then
		verdict="no finding"
	else
		verdict="FINDING: see $work/$t.log and $work/crashes/$t/"
		failed=1
	fi
	echo "$t: ${took:-?} s, ${runs:-?} runs, ${corp:-corp: ?}" \
	    "(inputs/bytes), $verdict"
}

mkdir -p "$work"
echo "fuzz: $# targets, $secs s each, $jobs at once; scratch corpus and" \
    "findings in $work"
set -- "$@"
all="$*"
while [ $# -gt 0 ]; do
	i=0
	while [ $# -gt 0 ] && [ $i -lt "$jobs" ]; do
		run_one "$1" &
		shift
		i=$((i + 1))
	done
	wait
done
failed=0
for t in $all; do
	report "$t"
done
exit $failed
