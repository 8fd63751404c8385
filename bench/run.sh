#!/bin/sh
# Runs each benchmark binary in turn.  Benchmarks print tables of figures;
# they do not pass or fail on speed.  Usage: bench/run.sh BIN...
set -u
rc=0
for b in "$@"; do
	echo "== $(basename "$b")"
	"$b" || { echo "benchmark $b failed"; rc=1; }
	echo
done
exit $rc
