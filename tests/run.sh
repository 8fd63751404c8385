#!/bin/sh
# Runs each Criterion test binary, then the Python client's tests (not
# with KSPEC_TEST_TIER=check, make check's quick tier), and
# prints one closing line with the totals ("N passed, N failed, N
# skipped").  Exit status is non-zero if anything failed or crashed.
# Usage: tests/run.sh BIN...
set -u
failed=0
tmp=$(mktemp)
skips=0
trap 'rm -f "$tmp" "$tmp.rc" "$tmp.py" "$tmp.tap"' EXIT
for t in "$@"; do
	echo "== $(basename "$t")"
	start=$(date +%s)
	rm -f "$tmp.tap"
	{ "$t" --jobs=2 --tap="$tmp.tap" 2>&1; echo $? > "$tmp.rc"; } |
	    tee -a "$tmp"
	[ "$(cat "$tmp.rc")" = 0 ] || failed=1
	echo "   $(basename "$t"): $(($(date +%s) - start)) s"
	# Criterion leaves skipped tests out of its synthesis; its TAP report
	# names them, with the reason.
	if [ -f "$tmp.tap" ]; then
		grep '# SKIP' "$tmp.tap" | sed 's/^ok - /SKIPPED: /'
		skips=$((skips + $(grep -c '# SKIP' "$tmp.tap")))
	fi
	# A binary that dies before its synthesis line counts as failed.
	if ! tail -n 1 "$tmp" | grep -q 'Synthesis:'; then
		echo "FAILED: $t ended without a result"
		failed=1
	fi
done

# Criterion does not fail a test whose process a sanitizer reported on at
# exit (a leak, say): any such report fails the run (make asan).
if grep -q -e 'ERROR: AddressSanitizer' -e 'ERROR: LeakSanitizer' \
    -e 'runtime error:' "$tmp"; then
	echo "FAILED: a sanitizer reported an error (see above)"
	failed=1
fi

# The Python client (standard library only) against a real daemon; not in
# make check's quick tier (KSPEC_TEST_TIER=check), which says so.
if [ "${KSPEC_TEST_TIER:-}" = check ]; then
	echo "== python client: in make test, not in make check"
	py="0 0 0"
else
	echo "== python client"
	{ /usr/bin/python3 "$(dirname "$0")/python/run.py" -q 2>&1; \
	    echo $? > "$tmp.rc"; } | tee "$tmp.py"
	[ "$(cat "$tmp.rc")" = 0 ] || failed=1
	py=$(sed -n 's/^python: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1 \2 \3/p' "$tmp.py")
	[ -n "$py" ] || { echo "FAILED: python tests ended without a result"; \
	    failed=1; py="0 1 0"; }
fi

sed -n 's/.*Synthesis: Tested: \([0-9]*\) | Passing: \([0-9]*\) | Failing: \([0-9]*\) | Crashing: \([0-9]*\).*/\1 \2 \3 \4/p' \
    "$tmp" | awk -v f="$failed" -v py="$py" -v sk="$skips" '
	{ tested += $1; pass += $2; fail += $3 + $4 }
	END {
		skipped = sk
		split(py, p, " ")
		pass += p[1]; fail += p[2]; skipped += p[3]
		printf "%d passed, %d failed, %d skipped\n", pass, fail, skipped
		exit (fail > 0 || f != 0)
	}'
