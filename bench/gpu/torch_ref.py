#!/usr/bin/env python3
"""The PyTorch side of the GPU decode benchmark (bench/gpu/run.sh).

Times what an inference server would otherwise call for the decode set of
an 8B-class model (hidden 4096, FFN 14336, 32 query heads, 8 KV heads, head
dim 128, bf16), on the same GPU in the same run as bench/gpu/check:

  gemv       torch.nn.functional.linear, M=1 (cuBLAS GEMV), N=K=4096
  gemv_down  the same, N=4096, K=14336
  rmsnorm    x * rsqrt(mean(x^2) + eps) * w in f32, one row of 4096
  rope       the half-split rotation of 32 heads x 128, one token
  silu_mul   silu(gate) * up, 14336 columns, one token
  attention  scaled_dot_product_attention, one query, KV length 2048, 8192

Each is timed with CUDA events: 10 warm-up calls, then 50 calls each
between its own pair of events; the median and the 10th..90th percentiles
in microseconds, one line per case as `torch NAME MEDIAN P10 P90`.
Nothing is fetched: without torch or without a GPU it prints why and exits
2, and run.sh reports the kspec figures alone.
"""
import sys


def timed(tool, name, fn, warmup=10, runs=50):
    """Calls FN(i) WARMUP times, then RUNS times each between its own pair
    of CUDA events (i counts from 0 across both); prints `TOOL NAME MEDIAN
    P10 P90` in microseconds.  bench/gpu/gemv_ref.py times with it too."""
    import torch
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize()
    times = []
    for i in range(warmup, warmup + runs):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn(i)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    times.sort()
    print("%s %-22s %10.2f %10.2f %10.2f" % (
        tool, name, times[runs // 2], times[runs // 10],
        times[runs - 1 - runs // 10]), flush=True)


def need_cuda(tool):
    """(torch, torch.nn.functional) when torch imports and sees a GPU;
    else None, said on a `TOOL: ...` line."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        print("%s: torch is not installed (%s)" % (tool, e))
        return None
    if not torch.cuda.is_available():
        print("%s: no CUDA device" % tool)
        return None
    return torch, F


def main():
    got = need_cuda("torch")
    if got is None:
        return 2
    torch, F = got
    dev = torch.device("cuda")
    bf = torch.bfloat16
    torch.manual_seed(0)

    def torch_timed(name, fn):
        timed("torch", name, lambda i: fn())

    x = torch.randn(1, 4096, device=dev, dtype=bf)
    w = torch.randn(4096, 4096, device=dev, dtype=bf)
    torch_timed("gemv", lambda: F.linear(x, w))
    xd = torch.randn(1, 14336, device=dev, dtype=bf)
    wd = torch.randn(4096, 14336, device=dev, dtype=bf)
    torch_timed("gemv_down", lambda: F.linear(xd, wd))

    g = torch.randn(4096, device=dev, dtype=bf)

    def rmsnorm():
        h = x.float()
        r = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
        return (h * r * g.float()).to(bf)
    torch_timed("rmsnorm", rmsnorm)

    q = torch.randn(1, 32, 128, device=dev, dtype=bf)
    cos = torch.randn(1, 1, 64, device=dev, dtype=torch.float32)
    sin = torch.randn(1, 1, 64, device=dev, dtype=torch.float32)

    def rope():
        h = q.float()
        a, b = h[..., :64], h[..., 64:]
        return torch.cat((a * cos - b * sin, b * cos + a * sin), -1).to(bf)
    torch_timed("rope", rope)

    gu = torch.randn(1, 2 * 14336, device=dev, dtype=bf)
    torch_timed("silu_mul", lambda: F.silu(gu[:, :14336]) * gu[:, 14336:])

    for s in (2048, 8192):
        qa = torch.randn(1, 32, 1, 128, device=dev, dtype=bf)
        k = torch.randn(1, 8, s, 128, device=dev, dtype=bf)
        v = torch.randn(1, 8, s, 128, device=dev, dtype=bf)
        try:
            F.scaled_dot_product_attention(qa, k, v, enable_gqa=True)

            def attn(qa=qa, k=k, v=v):
                return F.scaled_dot_product_attention(qa, k, v,
                                                      enable_gqa=True)
        except TypeError:       # torch before 2.5: no enable_gqa
            ke = k.repeat_interleave(4, dim=1)
            ve = v.repeat_interleave(4, dim=1)

            def attn(qa=qa, k=ke, v=ve):
                return F.scaled_dot_product_attention(qa, k, v)
        torch_timed("attention_%d" % s, attn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
