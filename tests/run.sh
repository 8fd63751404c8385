#!/bin/sh
# Runs each Criterion test binary and sums up.  Exit status is non-zero if
# any binary failed.  Usage: tests/run.sh BIN...
set -u
failed=0
for t in "$@"; do
	echo "== $(basename "$t")"
	if ! "$t" --jobs=2; then
		failed=1
		echo "FAILED: $t"
	fi
done
exit $failed
