#!/usr/bin/env python3
"""The references of the decode GEMV in bench/gpu/run.sh: cuBLAS (through
PyTorch's F.linear, M=1) and a Triton GEMV written for the comparison, on
the shapes bench/gpu/check times kspec's gemm gemv_m1 on:

  f32 and bf16 (x, W and y in the dtype; f32 accumulation),
  N=14336 K=4096 (an 8B model's gate/up rows) and N=57344 K=8192.

As in check.c, each call reads the next of several copies of W (together at
least 1 GiB, at least two), so no launch finds W in the L2, and each
is timed between its own pair of CUDA events: 5 warm-up calls, then 50;
one line per case, `cublas|triton NAME MEDIAN P10 P90` in microseconds,
NAME as `gemv_f32_14336x4096`.  The Triton kernel picks its tile by
triton.autotune (a few configs, tuned on the first call of each shape)
and its result is checked against cuBLAS's: the largest difference over
the largest output, printed on a `check` line, must stay within
TOLERANCE (f32: different summation orders; bf16: the output's rounding
too), else no figure is printed for it and the script exits 1.

The Triton GEMV: a program computes BN consecutive outputs; per step it
loads BK elements of x and a BN x BK tile of W, accumulates their
products in an f32 BN x BK tile, and sums each row at the end.

Nothing is fetched: without torch, Triton or a GPU it says so and exits 2.
"""
import math
import sys

from torch_ref import need_cuda, timed

SHAPES = [("f32", 14336, 4096), ("bf16", 14336, 4096),
          ("f32", 57344, 8192), ("bf16", 57344, 8192)]
TOLERANCE = {"f32": 1e-5, "bf16": 1e-2}


def main():
    got = need_cuda("cublas")
    if got is None:
        return 2
    torch, F = got
    try:
        import triton
        import triton.language as tl
    except ImportError as e:
        triton = None
        print("triton: not installed (%s)" % e)

    dev = torch.device("cuda")
    torch.manual_seed(0)

    if triton is not None:
        configs = [triton.Config({"BN": bn, "BK": bk}, num_warps=w,
                                 num_stages=s)
                   for bn, bk, w, s in [(4, 512, 4, 1), (8, 256, 4, 1),
                                        (16, 256, 4, 1), (16, 512, 8, 1),
                                        (32, 128, 4, 1), (32, 256, 8, 1),
                                        (8, 512, 4, 3), (16, 256, 4, 3)]]

        @triton.autotune(configs=configs, key=["N", "K", "DT"])
        @triton.jit
        def gemv(x, w, y, N, K, DT: tl.constexpr, BN: tl.constexpr,
                 BK: tl.constexpr):
            rn = tl.program_id(0) * BN + tl.arange(0, BN)
            rk = tl.arange(0, BK)
            live = rn < N
            wp = w + rn[:, None].to(tl.int64) * K + rk[None, :]
            acc = tl.zeros((BN, BK), dtype=tl.float32)
            for k0 in range(0, K, BK):
                xv = tl.load(x + k0 + rk).to(tl.float32)
                wv = tl.load(wp + k0, mask=live[:, None], other=0.0)
                acc += wv.to(tl.float32) * xv[None, :]
            tl.store(y + rn, tl.sum(acc, axis=1).to(y.dtype.element_ty),
                     mask=live)

    wrong = 0
    for dt, n, k in SHAPES:
        dtype = torch.float32 if dt == "f32" else torch.bfloat16
        es = 4 if dt == "f32" else 2
        nw = max(2, math.ceil((1 << 30) / (es * n * k)))
        name = "gemv_%s_%dx%d" % (dt, n, k)
        x = torch.randn(1, k, device=dev, dtype=dtype)
        w0 = torch.randn(n, k, device=dev, dtype=dtype)
        ws = [w0] + [w0.clone() for _ in range(nw - 1)]
        want = F.linear(x, w0)
        timed("cublas", name, lambda i: F.linear(x, ws[i % nw]), warmup=5)
        if triton is None:
            continue
        y = torch.empty(n, device=dev, dtype=dtype)

        def run(i):
            gemv[lambda m: (triton.cdiv(n, m["BN"]),)](
                x, ws[i], y, n, k, DT=es)

        run(0)          # tunes, then checks the tuned kernel
        torch.cuda.synchronize()
        err = ((y.float() - want.float()[0]).abs().max() /
               want.float().abs().max()).item()
        print("check triton %s: max |triton - cublas| / max |cublas| = "
              "%.2e (%s), config %s" % (
                  name, err, "ok" if err <= TOLERANCE[dt] else "WRONG",
                  gemv.best_config), flush=True)
        if err <= TOLERANCE[dt]:
            timed("triton", name, lambda i: run(i % nw), warmup=5)
        else:
            wrong = 1
        del ws, w0
        torch.cuda.empty_cache()
    return wrong


if __name__ == "__main__":
    sys.exit(main())
