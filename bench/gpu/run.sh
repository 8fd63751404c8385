#!/bin/sh
# The GPU check of the cuda backend (docs/backends.md, docs/benchmarks.md).
#
# check: builds bench/gpu/check from the sources of base/, specialize/ and
# the cuda backend (jit/emit_c.c, jit/helpers.c, jit/cuda.c) with only a C
# compiler and the CUDA headers, nothing fetched, then runs it: every kernel of the
# library x variant x dtype, compiled by kspec's NVRTC backend for this
# GPU, checked bit for bit against the plain-C references of ref/ (exp
# included); the decode GEMV (f32 and bf16, N=14336 K=4096 and N=57344
# K=8192, W never in L2) beside a device-to-device copy, cuBLAS and a
# Triton GEMV (bench/gpu/gemv_ref.py), with trials of unrolling its k
# loop; the decode set of an 8B-class model beside PyTorch
# (bench/gpu/torch_ref.py).  PyTorch and Triton run first, in the same
# run, when installed (nothing is installed or fetched).
#
# engine: where this checkout is built (make, with deploy/deps.sh's
# packages), a kspecd of this build and examples/llama --backend cuda:
# its small config's tokens and every step's logits bit for bit the cpu
# backend's, the 8b2l config's prefill (512 tokens) and decode timed
# beside PyTorch on the same GPU (bench/llama/torch_ref.py ... cuda), and
# one --profile run (each kernel kind's time per pass); the Python
# client's CUDA loader (kspec.load_cuda) on a gemv of this daemon, bit for
# bit its cpu artifact.
#
# first: the first kernel of a fresh process on a warm cache, kspec's
# (build/bench/gpu-first, request to finished kernel) beside Triton's
# (bench/gpu/first_triton.py, import to finished kernel, Triton's cache
# warm), 5 fresh processes each.  engine and first are skipped, saying
# so, without the build.
#
# Usage: bench/gpu/run.sh [check] [engine] [first]   (all three by
# default; from anywhere; builds into build/gpu/).  Exit 0 when every
# check passes, 1 on any mismatch or error, 2 when there is no CUDA
# device (skipped).  bench/gpu/run.sh build only builds build/gpu/check
# (no device needed; make test does, where the CUDA headers are).
# Env: CUDA_HOME (default /usr/local/cuda), CC (default cc);
# KSPEC_GPU_CHECK, a bench/gpu/check built elsewhere from this checkout,
# for a machine without a C compiler; KSPEC_CPU_DUMP, the small config's
# `build/examples/llama --dump FILE` made by the cpu backend elsewhere
# (the same build), for a machine whose libgccjit cannot compile;
# KSPEC_GPU_LIBS, a folder of the shared libraries `ldd` lists for the
# build's programs, for a machine without deploy/deps.sh's packages (on
# the loader's path of kspec's programs only, never of Python's).
set -eu
cd "$(dirname "$0")/../.."
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CC=${CC:-cc}
out=build/gpu
mkdir -p "$out"
parts=${*:-check engine first}
rc=0

# NVRTC is found as the daemon finds it; the CUDA install is a fallback.
if [ -z "${KSPEC_NVRTC:-}" ] && [ -e "$CUDA_HOME/lib64/libnvrtc.so" ]; then
	KSPEC_NVRTC="$CUDA_HOME/lib64/libnvrtc.so"
	export KSPEC_NVRTC
fi
# The loader's path of the build's programs: KSPEC_GPU_LIBS first.
ks_libs=${KSPEC_GPU_LIBS:+$KSPEC_GPU_LIBS:}${LD_LIBRARY_PATH:-}
# kx PROGRAM ARGS...: a program of the build, on that path.
kx() {
	LD_LIBRARY_PATH=$ks_libs "$@"
}
# py SECONDS SCRIPT ARGS...: python3 (the one with torch), limited.
py() {
	t=$1
	shift
	command -v python3 >/dev/null 2>&1 && timeout "$t" python3 "$@" ||
	    echo "($1: no result)"
}
# wall CMD...: CMD, then the whole process's wall time.
wall() {
	s=$(date +%s%N)
	"$@"
	echo "  process wall $((($(date +%s%N) - s) / 1000000)) ms"
}

# build_check: build/gpu/check from this checkout's sources.  The check
# hashes nothing (no request keys, no fingerprints), so it is built
# without base/hash.c and specialize/fingerprint.c: no libsodium.
build_check() {
	srcs=$(ls specialize/*.c | grep -v fingerprint.c)
	# shellcheck disable=SC2086
	$CC -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra \
	    -Wno-unused-parameter -I"$CUDA_HOME/include" \
	    -o "$out/check" bench/gpu/check.c base/base.c $srcs \
	    jit/emit_c.c jit/helpers.c jit/cuda.c -ldl -lpthread -lm
}

if [ "$parts" = build ]; then
	if [ ! -f "$CUDA_HOME/include/cuda.h" ]; then
		echo "no CUDA headers at $CUDA_HOME/include" >&2
		exit 2
	fi
	build_check
	exit 0
fi

case " $parts " in *" check "*)
	if [ -n "${KSPEC_GPU_CHECK:-}" ]; then
		check=$KSPEC_GPU_CHECK
	elif [ ! -f "$CUDA_HOME/include/cuda.h" ]; then
		echo "no CUDA device: no CUDA headers at $CUDA_HOME/include" >&2
		exit 2
	else
		build_check
		check=$out/check
	fi
	# The references first, each on the GPU alone; the check prints
	# their figures beside its own.
	{ py 100 bench/gpu/torch_ref.py; py 200 bench/gpu/gemv_ref.py; } \
	    >"$out/torch.txt" 2>&1
	cat "$out/torch.txt"
	KSPEC_TORCH_REF="$out/torch.txt"
	export KSPEC_TORCH_REF
	set +e
	timeout 300 "$check"
	rc=$?
	set -e
	case $rc in
	0) ;;
	2) exit 2 ;;
	124) echo "check: stopped at its limit of 300 s"; rc=1 ;;
	*) rc=1 ;;
	esac
	;;
esac

case " $parts " in *" engine "*|*" first "*) ;; *) exit "$rc" ;; esac
if [ ! -x build/kspecd ] || [ ! -x build/examples/llama ] ||
    [ ! -x build/bench/gpu-first ]; then
	echo "engine: skipped (no build/kspecd, build/examples/llama and" \
	    "build/bench/gpu-first: run deploy/deps.sh and make first)"
	exit "$rc"
fi
d=$(mktemp -d)
# Starts kspecd and waits until it answers (at most 60 s).
daemon() {
	# Not through kx: $! must be kspecd's own pid, not a subshell's.
	LD_LIBRARY_PATH=$ks_libs build/kspecd --socket "$d/s" --store "$d/db" \
	    --log-level warn >>"$d/kspecd.log" 2>&1 &
	pid=$!
	for i in $(seq 600); do
		kx build/kspec --socket "$d/s" ping >/dev/null 2>&1 && return
		sleep 0.1
	done
	echo "engine: kspecd did not answer within 60 s"
	rc=1
}
stop() {
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
daemon
trap 'stop; cat "$d/kspecd.log"; rm -rf "$d"' EXIT
llama() {
	kx timeout 150 build/examples/llama --socket "$d/s" --quiet "$@"
}
first() {
	kx timeout 60 build/bench/gpu-first "$d/s" ||
	    { echo "(gpu-first failed)"; rc=1; }
}

case " $parts " in *" engine "*)
	if [ -n "${KSPEC_CPU_DUMP:-}" ]; then
		cpu=$KSPEC_CPU_DUMP
		echo "engine: the cpu dump is $cpu, made elsewhere"
	else
		cpu=$d/cpu.bin
		llama --dump "$cpu" || echo "engine: the cpu run failed"
	fi
	if llama --backend cuda --dump "$d/cuda.bin" &&
	    cmp "$cpu" "$d/cuda.bin"; then
		echo "engine: small config, cuda tokens and logits == cpu," \
		    "bit for bit"
	else
		echo "engine: small config, cuda != cpu (or a run failed)"
		rc=1
	fi
	for how in "" --unpacked; do
		t=$(llama --backend cuda --config 8b2l --prompt 512 \
		    --steps 9 --trials 3 $how | grep '^timing') ||
		    { rc=1; t="failed"; }
		echo "engine: 8b2l cuda ${how:-packed}: $t"
	done
	py 120 bench/llama/torch_ref.py 512 9 3 1 cuda
	# The Python client's CUDA loader on this GPU: a gemv's PTX from this
	# daemon run by kspec.load_cuda, bit for bit its cpu artifact, and a
	# short buffer refused (tests/python/test_gpu_loaders.py).
	if KSPEC_GPU_DAEMON=$d/s timeout 300 python3 \
	    tests/python/test_gpu_loaders.py -v \
	    CudaLoaderTest.test_gemv_on_a_cuda_device_is_bitwise_its_cpu_artifact \
	    2>&1 |
	    tee "$d/pyloader" | grep -qx OK; then
		echo "engine: python load_cuda == cpu, bit for bit"
	else
		cat "$d/pyloader"
		echo "engine: python load_cuda failed"
		rc=1
	fi
	# Where the decode's time goes: a run with a wait after each call.
	llama --backend cuda --config 8b2l --prompt 512 --steps 9 \
	    --unpacked --profile >"$d/profile" 2>&1 || rc=1
	grep -v '^timing' "$d/profile" || true
	;;
esac

case " $parts " in *" first "*)
	# The first kernel of a fresh process: one get compiles it, then
	# five fresh processes on the warm daemon, and one after a restart
	# (the store on disk).  Triton: a first run fills its cache, five
	# more read it.
	echo "first kernel, kspec: compiled, then 5 fresh processes, warm"
	for i in compiled 1 2 3 4 5; do printf '%s: ' "$i"; wall first; done
	stop
	daemon
	printf 'restarted daemon: '
	wall first
	echo "first kernel, Triton: a cold cache, then 5 fresh processes"
	TRITON_CACHE_DIR=$d/triton
	export TRITON_CACHE_DIR
	for i in cold 1 2 3 4 5; do
		printf '%s: ' "$i"
		wall py 60 bench/gpu/first_triton.py
	done
	;;
esac
exit "$rc"
