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
# attention) when torch is installed.  One table; exit 0 when all checks
# pass, 1 on any mismatch or error, 2 when there is no CUDA device
# (skipped).  Under 5 minutes.
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
exec timeout 180 "$out/check"
