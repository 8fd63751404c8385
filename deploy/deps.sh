#!/bin/sh
# Installs the Debian packages that kspec's build and tests need (curl,
# prometheus for promtool and chromium for the metrics and dashboard
# tests, python3-pyopencl for the Python client's OpenCL loader, which
# tests/python runs with /usr/bin/python3 on PoCL, among them); with
# --bench, also those that only benchmarks need (valgrind for the
# instruction counts of bench/instr; Debian's PyTorch and numpy for
# bench/llama's reference, run by /usr/bin/python3; and llama.cpp's ggml,
# below); with --fuzz, also
# clang and its libFuzzer runtime for make fuzz (make test replays the
# fuzz corpora with the usual compiler); with --deb, also what make deb
# and make test-deb need (debhelper, dh-python and lintian to build and
# check the Debian packages, debootstrap for the test's throwaway root).
# Idempotent: checks each package with dpkg first and installs only what
# is missing.  Run as root (apt-get); otherwise prints the exact command
# to run.
set -eu

PKGS="build-essential pkg-config libgccjit-12-dev libuv1-dev libcjson-dev
libsqlite3-dev libsodium-dev libcriterion-dev redis-server libhiredis-dev
ocl-icd-opencl-dev opencl-headers pocl-opencl-icd libopenblas-dev
python3 python3-venv python3-pyopencl uthash-dev libxxhash-dev systemd groff-base
curl prometheus chromium"
BENCH_PKGS="valgrind python3-numpy python3-torch"
FUZZ_PKGS="clang-14 libclang-rt-14-dev"
DEB_PKGS="debhelper dh-python lintian debootstrap"

# llama.cpp's ggml, prebuilt by the npm package below, for bench/ggml and
# the golden vectors of the quantized formats (tests/ggml.h loads it from
# GGML_DIR; docs/benchmarks.md): the version pinned, and its
# libggml-base.so checked against the hash of the build the golden
# vectors came from.  Linux x86-64 only; npm from Debian where the
# machine has none.
GGML_NPM="@node-llama-cpp/linux-x64@3.22.1"
GGML_DIR=/opt/kspec-bench/ggml
GGML_LIB=$GGML_DIR/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so
GGML_SHA256=6c342c8aeb20cb31a18099d6f79de4de6703814d1cfd5c4d754a8643087e486e

bench=0
case "${1:-}" in
--bench) PKGS="$PKGS $BENCH_PKGS"; bench=1
	command -v npm >/dev/null 2>&1 || PKGS="$PKGS npm" ;;
--fuzz) PKGS="$PKGS $FUZZ_PKGS" ;;
--deb) PKGS="$PKGS $DEB_PKGS" ;;
"") ;;
*) echo "usage: deploy/deps.sh [--bench | --fuzz | --deb]" >&2; exit 2 ;;
esac

ggml_ok() {
	[ -f "$GGML_LIB" ] &&
	    [ "$(sha256sum "$GGML_LIB" | cut -d' ' -f1)" = "$GGML_SHA256" ]
}

install_ggml() {
	[ "$(uname -sm)" = "Linux x86_64" ] || {
		echo "deps.sh: $GGML_NPM is for Linux x86-64 only: bench/ggml" \
		    "and the golden vectors' re-derivation are skipped" >&2
		return 0
	}
	ggml_ok && return 0
	if [ "$(id -u)" -ne 0 ]; then
		echo "deps.sh: $GGML_NPM is not in $GGML_DIR" >&2
		echo "deps.sh: run as root: npm install --prefix $GGML_DIR" \
		    "--no-save --no-audit --no-fund $GGML_NPM" >&2
		exit 1
	fi
	echo "deps.sh: installing $GGML_NPM into $GGML_DIR" >&2
	mkdir -p "$GGML_DIR"
	npm install --prefix "$GGML_DIR" --no-save --no-audit --no-fund \
	    --no-progress "$GGML_NPM" >&2
	ggml_ok || {
		echo "deps.sh: $GGML_LIB is not the pinned build" \
		    "(sha256 $GGML_SHA256)" >&2
		exit 1
	}
}

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
	    grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done

if [ -n "$missing" ]; then
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
fi

[ "$bench" = 0 ] || install_ggml
