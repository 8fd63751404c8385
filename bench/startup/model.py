"""The 64 kernels an inference server of an 8B-class model asks for at
startup: the four projections of a layer (qkv, o, gate_up, down), for
one-token decode (M=1), speculative verify widths (M=2..16) and prefill (M
dynamic), in bf16 and f16, plus f32 decode/prefill.  Shared by
bench/startup/client.py and bench/startup/main.c (which reads it through
`python3 model.py --c`)."""

import json
import sys

PROJ = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]


def specs():
    out = []
    for dtype in ("bf16", "f16"):
        for n, k in PROJ:
            for m in (1, 2, 3, 4, 8, 16, None):
                shape = {"N": n, "K": k}
                spec = {"kernel": "gemm", "backend": "cpu", "dtype": dtype,
                        "shape": shape}
                if m is None:
                    spec["dynamic"] = ["M"]
                else:
                    shape["M"] = m
                out.append(spec)
    for n, k in PROJ:
        for m in (1, None):
            shape = {"N": n, "K": k}
            spec = {"kernel": "gemm", "backend": "cpu", "dtype": "f32",
                    "shape": shape}
            if m is None:
                spec["dynamic"] = ["M"]
            else:
                shape["M"] = m
            out.append(spec)
    assert len(out) == 64
    return out


if __name__ == "__main__":
    # One spec per line: "dtype M N K" with M = 0 for dynamic.
    for s in specs():
        sh = s["shape"]
        print(s["dtype"], sh.get("M", 0), sh["N"], sh["K"])
