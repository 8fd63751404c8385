#!/bin/sh
# Installs the Debian packages that kspec's build and tests need (curl,
# prometheus for promtool and chromium for the metrics and dashboard
# tests among them); with
# --bench, also those that only benchmarks need (valgrind for the
# instruction counts of bench/instr; Debian's PyTorch and numpy for
# bench/llama's reference, run by /usr/bin/python3); with --fuzz, also
# clang and its libFuzzer runtime for make fuzz (make test replays the
# fuzz corpora with the usual compiler).  Idempotent: checks each package with
# dpkg first and installs only what is missing.  Run as root (apt-get);
# otherwise prints the exact command to run.
set -eu

PKGS="build-essential pkg-config libgccjit-12-dev libuv1-dev libcjson-dev
libsqlite3-dev libsodium-dev libcriterion-dev redis-server libhiredis-dev
ocl-icd-opencl-dev opencl-headers pocl-opencl-icd libopenblas-dev
python3 python3-venv uthash-dev libxxhash-dev systemd groff-base
curl prometheus chromium"
BENCH_PKGS="valgrind python3-numpy python3-torch"
FUZZ_PKGS="clang-14 libclang-rt-14-dev"

case "${1:-}" in
--bench) PKGS="$PKGS $BENCH_PKGS" ;;
--fuzz) PKGS="$PKGS $FUZZ_PKGS" ;;
"") ;;
*) echo "usage: deploy/deps.sh [--bench | --fuzz]" >&2; exit 2 ;;
esac

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
	    grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done

[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "deps.sh: missing packages:$missing" >&2
	echo "deps.sh: run as root: apt-get install -y$missing" >&2
	exit 1
fi

echo "deps.sh: installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2 || true
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $missing >&2
