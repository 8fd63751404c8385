#!/usr/bin/env python3
"""Triton's side of bench/gpu/run.sh's first-kernel timing: the time from
a fresh Python process's first statement to a finished Triton kernel, the
same decode GEMV as bench/gpu/first (N=14336, K=4096, bf16, one fixed
tile: no autotuning), with Triton's cache warm when run.sh runs this a
second time with the same TRITON_CACHE_DIR.

Prints one line, every figure in ms from the first statement:

  triton-first import MS cuda MS done MS

import: torch and triton imported; cuda: a first tensor on the device
(PyTorch's CUDA context); done: the kernel launched (on a warm cache its
compiled form is read from the cache) and finished
(torch.cuda.synchronize()).  Exit status 2 without torch, Triton or a
GPU.
"""
import time

T0 = time.perf_counter()


def ms():
    return (time.perf_counter() - T0) * 1e3


def main():
    try:
        import torch
        import triton
        import triton.language as tl
    except ImportError as e:
        print("triton-first: not installed (%s)" % e)
        return 2
    t_import = ms()
    if not torch.cuda.is_available():
        print("triton-first: no CUDA device")
        return 2

    @triton.jit
    def gemv(x, w, y, N, K, BN: tl.constexpr, BK: tl.constexpr):
        rn = tl.program_id(0) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        wp = w + rn[:, None].to(tl.int64) * K + rk[None, :]
        acc = tl.zeros((BN, BK), dtype=tl.float32)
        for k0 in range(0, K, BK):
            xv = tl.load(x + k0 + rk).to(tl.float32)
            acc += tl.load(wp + k0).to(tl.float32) * xv[None, :]
        tl.store(y + rn, tl.sum(acc, axis=1).to(y.dtype.element_ty))

    n, k = 14336, 4096
    x = torch.zeros(k, device="cuda", dtype=torch.bfloat16)
    t_cuda = ms()
    w = torch.zeros(n, k, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(n, device="cuda", dtype=torch.bfloat16)
    gemv[(n // 16,)](x, w, y, n, k, BN=16, BK=256, num_warps=4)
    torch.cuda.synchronize()
    print("triton-first import %.1f cuda %.1f done %.1f" % (
        t_import, t_cuda, ms()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
