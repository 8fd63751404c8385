#!/bin/bash
# Runs each Criterion test binary, then the Python client's tests (not
# with KSPEC_TEST_TIER=check, make check's quick tier), and prints one
# closing line with the totals ("N passed, N failed, N skipped").  Exit
# status is non-zero if anything failed or crashed.
#
# KSPEC_TEST_JOBS binaries run at once (default: the CPUs), each with
# Criterion's --jobs at the same number; a binary's output is printed
# whole when it ends, with its wall and CPU seconds; every 60 s a line
# names the binaries still running and for how long.  The longest binaries
# of the last run in this build folder start first ($KSPEC_BUILD/tests/
# seconds, rewritten by every run); without that record, in the order
# given.  A binary that changes the machine beside the tests runs alone,
# after the others: test_users adds and removes throwaway users, which
# rewrites /etc, and a daemon starting meanwhile would find what its
# compilers' witness covers (/etc among it) changed, and not save or not
# use its probe (test_start checks that it does).
# Usage: tests/run.sh BIN...
set -u
jobs=${KSPEC_TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
dir=$(mktemp -d)
tick=
trap '[ -z "$tick" ] || kill "$tick" 2>/dev/null; rm -rf "$dir"' EXIT
record=${KSPEC_BUILD:-build}/tests/seconds

# The given binaries, the ones the record names longest first.
order() {
	local t s
	for t in "$@"; do
		s=$(awk -v n="$(basename "$t")" '$1 == n { print $2 }' \
		    "$record" 2>/dev/null)
		echo "${s:-0} $t"
	done | sort -s -k1,1nr | cut -d' ' -f2-
}

# JOB NAME CMD...: runs CMD with its output, exit status, CPU seconds
# (the children's user + system time, as bash's times reports it) and
# wall seconds in $dir/NAME.*; $dir/NAME.done marks the end.
job() {
	local name=$1 start
	shift
	start=$(date +%s)
	echo "$start" > "$dir/$name.start"
	"$@" > "$dir/$name.log" 2>&1
	echo $? > "$dir/$name.rc"
	# times, not in a pipeline: a forked times sees no children.
	times > "$dir/$name.times"
	awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/)
	    printf "%.0f\n", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' \
	    "$dir/$name.times" > "$dir/$name.cpu"
	echo $(($(date +%s) - start)) > "$dir/$name.wall"
	rm -f "$dir/$name.start"
	touch "$dir/$name.done"
}

# Every 60 s, the binaries still running and their seconds so far: a
# binary's output comes whole at its end, and some run for minutes.
ticker() {
	local f now list
	while sleep 60; do
		now=$(date +%s)
		list=
		for f in "$dir"/*.start; do
			[ -e "$f" ] || continue
			list="$list $(basename "$f" .start) $((now - $(cat "$f" \
			    2>/dev/null || echo "$now"))) s,"
		done
		[ -z "$list" ] || echo "   ... running:${list%,}"
	done
}

failed=0
skips=0
py="0 0 0"
running=0
: > "$dir/all"
: > "$dir/seconds"

# Prints what ended since the last call, and counts it.
report() {
	local d name
	for d in "$dir"/*.done; do
		[ -e "$d" ] || continue
		name=$(basename "$d" .done)
		rm -f "$d"
		running=$((running - 1))
		echo "== $name"
		cat "$dir/$name.log"
		echo "   $name: $(cat "$dir/$name.wall") s" \
		    "(cpu $(cat "$dir/$name.cpu") s)"
		echo "$name $(cat "$dir/$name.wall")" >> "$dir/seconds"
		[ "$(cat "$dir/$name.rc")" = 0 ] || failed=1
		if [ "$name" = python ]; then
			py=$(sed -n 's/^python: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1 \2 \3/p' "$dir/$name.log")
			[ -n "$py" ] || { echo "FAILED: python tests ended" \
			    "without a result"; failed=1; py="0 1 0"; }
			continue
		fi
		cat "$dir/$name.log" >> "$dir/all"
		# Criterion leaves skipped tests out of its synthesis; its TAP
		# report names them, with the reason.
		if [ -f "$dir/$name.tap" ]; then
			grep '# SKIP' "$dir/$name.tap" |
			    sed 's/^ok - /SKIPPED: /'
			skips=$((skips + $(grep -c '# SKIP' "$dir/$name.tap")))
		fi
		# A binary that dies before its synthesis line counts as
		# failed.
		if ! tail -n 1 "$dir/$name.log" | grep -q 'Synthesis:'; then
			echo "FAILED: $name ended without a result"
			failed=1
		fi
	done
}

# Starts CMD as job NAME once a slot is free.
start() {
	while [ "$running" -ge "$jobs" ]; do
		wait -n || [ $? != 127 ] || break
		report
	done
	job "$@" &
	running=$((running + 1))
}

# Disowned: no wait below waits for it.
ticker &
tick=$!
disown "$tick"
alone="test_users"
later=
for t in $(order "$@"); do
	n=$(basename "$t")
	case " $alone " in
	*" $n "*) later="$later $t"; continue ;;
	esac
	start "$n" "$t" --jobs="$jobs" --tap="$dir/$n.tap"
done

# The Python client (standard library only) against a real daemon; not in
# make check's quick tier (KSPEC_TEST_TIER=check), which says so.
if [ "${KSPEC_TEST_TIER:-}" = check ]; then
	echo "== python client: in make test, not in make check"
elif [ -n "${KSPEC_TEST_NO_PYTHON:-}" ]; then
	echo "== python client: skipped ($KSPEC_TEST_NO_PYTHON)"
else
	start python /usr/bin/python3 "$(dirname "$0")/python/run.py" -q
fi
while [ "$running" -gt 0 ]; do
	wait -n || [ $? != 127 ] || break
	report
done
wait
report
for t in $later; do
	n=$(basename "$t")
	# In a child of its own, as start's jobs are: times then counts its
	# CPU seconds alone.
	job "$n" "$t" --jobs="$jobs" --tap="$dir/$n.tap" &
	running=$((running + 1))
	wait $!
	report
done

# Criterion does not fail a test whose process a sanitizer reported on at
# exit (a leak, say): any such report fails the run (make asan).
if grep -q -e 'ERROR: AddressSanitizer' -e 'ERROR: LeakSanitizer' \
    -e 'runtime error:' "$dir/all"; then
	echo "FAILED: a sanitizer reported an error (see above)"
	failed=1
fi

# The record of this run, for the next one's order.
if [ -d "$(dirname "$record")" ]; then
	cat "$record" 2>/dev/null | awk 'NR == FNR { seen[$1] = 1; print;
	    next } !($1 in seen)' "$dir/seconds" - > "$dir/record"
	cp "$dir/record" "$record" 2>/dev/null
fi

sed -n 's/.*Synthesis: Tested: \([0-9]*\) | Passing: \([0-9]*\) | Failing: \([0-9]*\) | Crashing: \([0-9]*\).*/\1 \2 \3 \4/p' \
    "$dir/all" | awk -v f="$failed" -v py="$py" -v sk="$skips" '
	{ tested += $1; pass += $2; fail += $3 + $4 }
	END {
		skipped = sk
		split(py, p, " ")
		pass += p[1]; fail += p[2]; skipped += p[3]
		printf "%d passed, %d failed, %d skipped\n", pass, fail, skipped
		exit (fail > 0 || f != 0)
	}'
