"""PyTorch CPU beside examples/llama in bench/llama: the 8b2l model's math
(the same config and shapes, random f32 weights), prefill through
F.linear on the whole prompt; decode through torch.mv per token, and again
from the same prefill through F.linear (a 1-row GEMM per weight, what a
model written with nn.Linear runs).

Usage: torch_ref.py PROMPT STEPS TRIALS THREADS [DEVICE].  DEVICE is
"cpu" (the default) or "cuda" (bench/gpu/run.sh: the model on the GPU,
each timer read after torch.cuda.synchronize()).  bench/llama sets
OPENBLAS_NUM_THREADS and OMP_NUM_THREADS to THREADS before it starts this
(Debian's torch runs its BLAS on OpenBLAS, whose own pool
torch.set_num_threads does not size); this also calls
torch.set_num_threads(THREADS).  Prints one line per path:
"torch PATH MED MIN MAX", prefill_ms, decode_ms (torch.mv) or
decode_linear_ms (F.linear).
"""
import math
import sys
import time

import torch
import torch.nn.functional as F

H, L, HQ, HKV, D, FF, V = 4096, 2, 32, 8, 128, 14336, 32000
EPS = 1e-5


def weights():
    g = torch.Generator().manual_seed(1)

    def u(*shape, k):
        return (torch.rand(*shape, generator=g) * 2 - 1) * math.sqrt(3 / k)

    layers = []
    for _ in range(L):
        layers.append(dict(
            an=torch.ones(H), wq=u(HQ * D, H, k=H), wk=u(HKV * D, H, k=H),
            wv=u(HKV * D, H, k=H), wo=u(H, HQ * D, k=HQ * D),
            fn=torch.ones(H), wgu=u(2 * FF, H, k=H), wd=u(H, FF, k=FF)))
    return dict(emb=torch.rand(V, H, generator=g) * 2 - 1, layers=layers,
                norm=torch.ones(H), wout=u(V, H, k=H))


def rmsnorm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def rope_table(n):
    inv = 10000.0 ** (-torch.arange(0, D // 2, dtype=torch.float64) * 2 / D)
    a = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(a).float(), torch.sin(a).float()


def rope(x, c, s):            # x: T x heads x D, half-split pairs
    x0, x1 = x[..., :D // 2], x[..., D // 2:]
    c, s = c[:, None, :], s[:, None, :]
    return torch.cat([x0 * c - x1 * s, x1 * c + x0 * s], -1)


def attend(q, kc, vc, start):  # q: T x HQ x D; kc, vc: S x HKV x D
    T, n = q.shape[0], start + q.shape[0]
    k = kc[:n].repeat_interleave(HQ // HKV, 1).transpose(0, 1)
    v = vc[:n].repeat_interleave(HQ // HKV, 1).transpose(0, 1)
    sc = torch.matmul(q.transpose(0, 1), k.transpose(1, 2)) / math.sqrt(D)
    r = torch.arange(n, device=q.device)
    mask = r[None, :] > (start + r[:T])[:, None]
    sc = sc.masked_fill(mask, float("-inf"))
    return torch.matmul(torch.softmax(sc, -1), v).transpose(0, 1)


def forward(m, ids, start, caches, cos, sin, lin):
    T = ids.shape[0]
    x = m["emb"][ids]
    c, s = cos[start:start + T], sin[start:start + T]
    for y, (kc, vc) in zip(m["layers"], caches):
        h = rmsnorm(x, y["an"])
        q = rope(lin(h, y["wq"]).view(T, HQ, D), c, s)
        kc[start:start + T] = rope(lin(h, y["wk"]).view(T, HKV, D), c, s)
        vc[start:start + T] = lin(h, y["wv"]).view(T, HKV, D)
        x = x + lin(attend(q, kc, vc, start).reshape(T, HQ * D), y["wo"])
        gu = lin(rmsnorm(x, y["fn"]), y["wgu"])
        x = x + lin(F.silu(gu[:, :FF]) * gu[:, FF:], y["wd"])
    return lin(rmsnorm(x[-1:], m["norm"]), m["wout"]).argmax(-1)


def linear(x, w):             # prefill: one GEMM per weight
    return F.linear(x, w)


def mv(x, w):                 # decode: one GEMV per weight
    return torch.mv(w, x[0])[None, :]


def to(x, dev):
    if isinstance(x, dict):
        return {k: to(v, dev) for k, v in x.items()}
    if isinstance(x, list):
        return [to(v, dev) for v in x]
    return x.to(dev)


def main():
    prompt, steps, trials, threads = map(int, sys.argv[1:5])
    dev = sys.argv[5] if len(sys.argv) > 5 else "cpu"
    torch.set_num_threads(threads)
    m = to(weights(), dev)
    cos, sin = to(list(rope_table(prompt + steps)), dev)
    ids = torch.randint(0, V, (prompt,), generator=torch.Generator()
                        .manual_seed(2)).to(dev)
    caches = [(torch.zeros(prompt + steps, HKV, D, device=dev),
               torch.zeros(prompt + steps, HKV, D, device=dev))
              for _ in range(L)]

    def now():
        if torch.device(dev).type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    pre, dec, dec_lin = [], [], []
    with torch.no_grad():
        for t in range(trials + 1):        # the first is the warm-up
            t0 = now()
            first = forward(m, ids, 0, caches, cos, sin, linear)
            t1 = now()
            tok = first
            for s in range(1, steps):
                tok = forward(m, tok, prompt + s - 1, caches, cos, sin, mv)
            t2 = now()
            tok = first
            for s in range(1, steps):
                tok = forward(m, tok, prompt + s - 1, caches, cos, sin,
                              linear)
            t3 = now()
            if t > 0:
                pre.append((t1 - t0) * 1e3)
                dec.append((t2 - t1) * 1e3 / max(steps - 1, 1))
                dec_lin.append((t3 - t2) * 1e3 / max(steps - 1, 1))
    for name, v in (("prefill_ms", pre), ("decode_ms", dec),
                    ("decode_linear_ms", dec_lin)):
        v.sort()
        print("torch %s %.4f %.4f %.4f" % (name, v[len(v) // 2], v[0],
                                           v[-1]))


if __name__ == "__main__":
    main()
