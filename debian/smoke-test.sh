#!/bin/sh
# The build-time check of the packages (dh_auto_test), not the test suite:
# the built kspecd on a scratch socket and store answers a ping, compiles
# a CPU kernel, and once restarted serves it from the store.
# Usage: debian/smoke-test.sh BUILD_DIR
set -eu

build=$(cd "$1" && pwd)
dir=$(mktemp -d "${TMPDIR:-/tmp}/kspec-smoke.XXXXXX")
pid=""
stop() {
	[ -z "$pid" ] && return 0
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=""
}
trap 'stop; rm -rf "$dir"' EXIT

start() {
	"$build/kspecd" --socket "$dir/sock" --store "$dir/kspec.db" \
	    --workers 1 >>"$dir/kspecd.log" 2>&1 &
	pid=$!
	"$build/kspec" --socket "$dir/sock" ping --wait 60 >/dev/null || {
		cat "$dir/kspecd.log" >&2
		exit 1
	}
}

get() {
	"$build/kspec" --socket "$dir/sock" get gemm --backend cpu --dtype f32 \
	    --shape M=1,N=64,K=64 -o "$dir/gemv.so" --meta "$dir/meta.json"
	grep -q "\"source\":\"$1\"" "$dir/meta.json" || {
		echo "smoke-test: expected source $1:" >&2
		cat "$dir/meta.json" "$dir/kspecd.log" >&2
		exit 1
	}
}

start
get compiled
stop
start
get disk
echo "smoke-test: kspecd answered, compiled, and served from its store"
