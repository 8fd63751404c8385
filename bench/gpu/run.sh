#!/bin/sh
# The GPU check of the cuda backend (docs/backends.md): builds
# bench/gpu/check from the sources of base/, specialize/ and the cuda
# backend (jit/emit_c.c, jit/cuda.c) with only a C compiler and the CUDA
# headers, nothing fetched, then runs it: every kernel of the library x
# variant x dtype, compiled by kspec's NVRTC backend for this GPU, checked
# against the plain-C references of tests/ (bit for bit; kernels with exp
# within a stated ulp bound), the decode GEMV timed beside a
# device-to-device copy, and the decode set of an 8B-class model timed
# beside PyTorch (bench/gpu/torch_ref.py: cuBLAS GEMV, scaled dot-product
# attention) when torch is installed.  Then, where this checkout is built
# (make, with deploy/deps.sh's packages), the reference engine on CUDA:
# examples/llama --backend cuda against a kspecd of this build, its small
# config's tokens and every step's logits bit for bit the cpu backend's,
# and the 8b2l config's prefill (512 tokens) and decode timed beside
# PyTorch on the same GPU (bench/llama/torch_ref.py ... cuda); skipped,
# saying so, without the build.  Exit 0 when all checks pass, 1 on any
# mismatch or error, 2 when there is no CUDA device (skipped).  The check
# takes under 5 minutes; the engine adds its compiles and runs (each run
# limited to 150 s).
#
# Usage: bench/gpu/run.sh    (from anywhere; builds into build/gpu/)
# Env: CUDA_HOME (default /usr/local/cuda), CC (default cc).
set -eu
cd "$(dirname "$0")/../.."
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CC=${CC:-cc}
out=build/gpu
mkdir -p "$out"

if [ ! -f "$CUDA_HOME/include/cuda.h" ]; then
	echo "no CUDA device: no CUDA headers at $CUDA_HOME/include" >&2
	exit 2
fi
# The check hashes nothing (no request keys, no fingerprints), so it is
# built without base/hash.c and specialize/fingerprint.c: no libsodium.
srcs=$(ls specialize/*.c | grep -v fingerprint.c)
# shellcheck disable=SC2086
$CC -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Wno-unused-parameter \
    -I"$CUDA_HOME/include" -o "$out/check" \
    bench/gpu/check.c base/base.c $srcs jit/emit_c.c jit/cuda.c \
    -ldl -lpthread -lm
# NVRTC is found as the daemon finds it; the CUDA install is a fallback.
if [ -z "${KSPEC_NVRTC:-}" ] && [ -e "$CUDA_HOME/lib64/libnvrtc.so" ]; then
	KSPEC_NVRTC="$CUDA_HOME/lib64/libnvrtc.so"
	export KSPEC_NVRTC
fi
# PyTorch's decode figures, in the same run, when torch and a GPU are
# there (nothing is installed or fetched); the check prints them beside
# its own.
if command -v python3 >/dev/null 2>&1; then
	timeout 100 python3 bench/gpu/torch_ref.py >"$out/torch.txt" 2>&1 ||
	    true
	cat "$out/torch.txt"
	KSPEC_TORCH_REF="$out/torch.txt"
	export KSPEC_TORCH_REF
fi
set +e
timeout 180 "$out/check"
rc=$?
[ "$rc" -eq 2 ] && exit 2

if [ ! -x build/kspecd ] || [ ! -x build/examples/llama ]; then
	echo "engine: skipped (no build/kspecd and build/examples/llama:" \
	    "run deploy/deps.sh and make first)"
	exit "$rc"
fi
d=$(mktemp -d)
build/kspecd --socket "$d/s" --store "$d/db" --log-level warn \
    >"$d/kspecd.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$d"' EXIT
llama() {
	timeout 150 build/examples/llama --socket "$d/s" --quiet "$@"
}
if llama --dump "$d/cpu.bin" && llama --backend cuda --dump "$d/cuda.bin" &&
    cmp -s "$d/cpu.bin" "$d/cuda.bin"; then
	echo "engine: small config, cuda tokens and logits == cpu, bit for bit"
else
	echo "engine: small config, cuda != cpu (or a run failed)"
	rc=1
fi
for how in "" --unpacked; do
	t=$(llama --backend cuda --config 8b2l --prompt 512 --steps 9 \
	    --trials 3 $how | grep '^timing') || { rc=1; t="failed"; }
	echo "engine: 8b2l cuda ${how:-packed}: $t"
done
if command -v python3 >/dev/null 2>&1; then
	timeout 120 python3 bench/llama/torch_ref.py 512 9 3 1 cuda ||
	    echo "engine: PyTorch on cuda did not run"
fi
exit "$rc"
