"""Storage conversions and canonical references, in pure Python.

The same definitions as tests/ref.h and docs/kernels.md, for checking
artifacts bitwise from Python:

- f32 / f16 / bf16 conversions, round-to-nearest-even, with subnormals,
  overflow to infinity and quiet NaNs;
- ``fma_f32``: fused multiply-add of float32 values with one rounding
  (``math.fma`` exists only from Python 3.13), exact through integers;
- ``gemm_ref``: gemm in the canonical reduction order (32 lanes, lane l
  accumulates k = l mod 32 in increasing k with fma, the tree 16, 8, 4, 2, 1,
  one rounding to the storage dtype).

Storage values are bit patterns: ``u32`` for f32, ``u16`` for f16 and bf16.
Pure Python is slow (a few microseconds per fma): keep shapes small.
"""

import math
import struct
import sys

__all__ = [
    "F32", "F16", "BF16", "round_ratio", "f32_round", "f32_bits",
    "f32_from_bits", "fma_f32", "add_f32", "bf16_bits", "bf16_from_bits",
    "f16_bits", "f16_from_bits", "to_bits", "from_bits", "pack", "unpack",
    "fill", "dot_canonical", "dot_sequential", "gemm_ref", "gemm_ref_f64",
    "ELEM_SIZE",
]

ELEM_SIZE = {"f32": 4, "f16": 2, "bf16": 2}


class _Format:
    """A binary floating-point format: P significand bits (with the hidden
    one), exponents of normal numbers EMIN .. EMAX."""

    def __init__(self, name, p, emin, emax):
        self.name, self.p, self.emin, self.emax = name, p, emin, emax

    def __repr__(self):
        return "<format %s>" % self.name


F32 = _Format("f32", 24, -126, 127)
F16 = _Format("f16", 11, -14, 15)
BF16 = _Format("bf16", 8, -126, 127)


def round_ratio(num, den, fmt=F32):
    """NUM/DEN (integers, DEN != 0) rounded to the nearest value of FMT,
    ties to even, returned as a Python float (exact: every value of these
    formats is a double).  Below the smallest normal the grid is the
    subnormal one; at or past the overflow threshold the result is an
    infinity.  A zero result is +0.0 for a positive ratio or zero NUM and
    -0.0 for a negative one."""
    if den == 0:
        raise ZeroDivisionError("round_ratio: zero denominator")
    if den < 0:
        num, den = -num, -den
    neg = num < 0
    a = -num if neg else num
    if a == 0:
        return 0.0
    # e = floor(log2(a / den)).
    e = a.bit_length() - den.bit_length()
    if (a << -e if e < 0 else a) < (den << e if e > 0 else den):
        e -= 1
    q = max(e, fmt.emin) - (fmt.p - 1)          # exponent of one ulp
    n, d = (a, den << q) if q >= 0 else (a << -q, den)
    m, r = divmod(n, d)
    if 2 * r > d or (2 * r == d and m & 1):
        m += 1
    if m and m.bit_length() + q > fmt.emax + 1:  # m * 2^q >= 2^(emax+1)
        v = math.inf
    else:
        v = math.ldexp(m, q)
    return -v if neg else v


_f32 = struct.Struct("<f")
_u32 = struct.Struct("<I")


def f32_round(x):
    """The float32 nearest to the double X (ties to even; overflow gives an
    infinity, NaN stays NaN)."""
    try:
        return _f32.unpack(_f32.pack(x))[0]
    except OverflowError:                # struct refuses to give inf
        return math.copysign(math.inf, x)


def f32_bits(x):
    """The u32 bit pattern of X rounded to float32."""
    try:
        return _u32.unpack(_f32.pack(x))[0]
    except OverflowError:
        return 0xff800000 if x < 0 else 0x7f800000


def f32_from_bits(u):
    return _f32.unpack(_u32.pack(u & 0xffffffff))[0]


def add_f32(a, b):
    """a + b of two float32 values, rounded once to float32.  Rounding the
    double sum again is exact: 53 >= 2*24 + 2 makes double rounding
    innocuous for + (Figueroa, 1995)."""
    return f32_round(a + b)


def fma_f32(a, b, c):
    """fma(a, b, c) of float32 values: a*b + c with one rounding to float32,
    as fmaf() does.  The product of two float32 values is exact in a double
    (48 significant bits, no overflow or underflow); when the double sum is
    exact too (checked with TwoSum) one rounding of it is the answer, else
    the exact sum is rounded from integers."""
    p = a * b
    s = p + c
    if not math.isfinite(s):
        if math.isfinite(p) and math.isfinite(c):
            # A finite exact sum past the double range cannot happen for
            # float32 inputs; keep the exact path for safety.
            return _fma_exact(p, c)
        return f32_round(s)             # inf and NaN propagate as in fmaf
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    if err == 0.0:
        return f32_round(s)
    return _fma_exact(p, c)


def _fma_exact(p, c):
    pn, pd = p.as_integer_ratio()
    cn, cd = c.as_integer_ratio()
    # Both denominators are powers of two.
    if pd >= cd:
        num, den = pn + cn * (pd // cd), pd
    else:
        num, den = pn * (cd // pd) + cn, cd
    if num == 0:
        return 0.0                      # exact cancellation: +0 in RNE
    return round_ratio(num, den, F32)


def bf16_bits(x):
    """The bf16 bit pattern of X (a float32 value): round-to-nearest-even on
    the u32 bits, as tests/ref.h; NaN stays a quiet NaN with its sign."""
    u = f32_bits(x)
    if (u & 0x7fffffff) > 0x7f800000:
        return ((u >> 16) | 0x0040) & 0xffff
    u += 0x7fff + ((u >> 16) & 1)
    return (u >> 16) & 0xffff


def bf16_from_bits(h):
    return f32_from_bits((h & 0xffff) << 16)


_f16 = struct.Struct("<e")
_u16 = struct.Struct("<H")


def f16_bits(x):
    """The f16 bit pattern of X (a float32 value), round-to-nearest-even
    through struct's 'e' format (a correctly rounded conversion from the
    double, which holds X exactly); overflow gives an infinity, NaN a quiet
    NaN with its sign and top payload bits, as tests/ref.h."""
    if x != x:
        u = f32_bits(x)
        return ((u >> 16) & 0x8000) | 0x7e00 | ((u >> 13) & 0x3ff)
    try:
        return _u16.unpack(_f16.pack(x))[0]
    except OverflowError:               # |x| >= 65520 rounds to inf
        return 0xfc00 if math.copysign(1.0, x) < 0 else 0x7c00


def f16_from_bits(h):
    return _f16.unpack(_u16.pack(h & 0xffff))[0]


def to_bits(dtype, x):
    """X (a float; for f32 rounded first) stored in DTYPE, as bits."""
    if dtype == "f32":
        return f32_bits(x)
    x = f32_round(x)
    if dtype == "bf16":
        return bf16_bits(x)
    if dtype == "f16":
        return f16_bits(x)
    raise ValueError("unknown dtype %r" % (dtype,))


def from_bits(dtype, bits):
    """The value (exact, as a float) of DTYPE bits."""
    if dtype == "f32":
        return f32_from_bits(bits)
    if dtype == "bf16":
        return bf16_from_bits(bits)
    if dtype == "f16":
        return f16_from_bits(bits)
    raise ValueError("unknown dtype %r" % (dtype,))


def pack(dtype, bits):
    """The storage bytes (native byte order, what a kernel buffer holds on
    this machine) of a sequence of DTYPE bit patterns."""
    code = "I" if dtype == "f32" else "H"
    return struct.pack("=%d%s" % (len(bits), code), *bits)


def unpack(dtype, data):
    """The DTYPE bit patterns held in storage bytes DATA."""
    code = "I" if dtype == "f32" else "H"
    data = bytes(data)
    return list(struct.unpack("=%d%s" % (len(data) // ELEM_SIZE[dtype],
                                         code), data))


def _xorshift(s):
    s ^= s >> 12
    s ^= (s << 25) & 0xffffffffffffffff
    s ^= s >> 27
    return s, (s * 0x2545F4914F6CDD1D) & 0xffffffffffffffff


def fill(dtype, n, seed):
    """N deterministic values in [-1, 1) stored in DTYPE, as bit patterns:
    the same sequence as tests/ref.h ref_fill (xorshift64*)."""
    s = (seed * 0x9E3779B97F4A7C15 + 1) & 0xffffffffffffffff
    out = []
    for _ in range(n):
        s, r = _xorshift(s)
        v = f32_round((r >> 11) / 9007199254740992.0 * 2.0 - 1.0)
        out.append(to_bits(dtype, v))
    return out


def dot_canonical(a, b):
    """The canonical dot product of two sequences of float32 values: 32
    lanes, lane l accumulates a[j]*b[j] for j = l (mod 32) in increasing j
    with fma, starting at 0.0; then v[l] += v[l+s] for l < s, s = 16, 8, 4,
    2, 1.  Returns the float32 sum (not yet stored to a dtype)."""
    v = [0.0] * 32
    for j in range(len(a)):
        v[j & 31] = fma_f32(a[j], b[j], v[j & 31])
    s = 16
    while s:
        for lane in range(s):
            v[lane] = add_f32(v[lane], v[lane + s])
        s >>= 1
    return v[0]


def dot_sequential(a, b):
    """A deliberately different order: one accumulator, fma in increasing
    j.  Not the kernel's definition; used to show the checker catches an
    order bug."""
    acc = 0.0
    for j in range(len(a)):
        acc = fma_f32(a[j], b[j], acc)
    return acc


def gemm_ref(x, w, M, N, K, dtype, dot=dot_canonical):
    """y[m][n] = sum_k x[m][k] * W[n][k] in the canonical order, stored once
    to DTYPE round-to-nearest-even.  X (M*K) and W (N*K) are DTYPE bit
    patterns, row-major; returns the M*N bit patterns of y.  DOT picks the
    reduction (for planted-bug checks)."""
    xv = [from_bits(dtype, u) for u in x]
    wv = [from_bits(dtype, u) for u in w]
    y = []
    for m in range(M):
        row = xv[m * K:(m + 1) * K]
        for n in range(N):
            y.append(to_bits(dtype, dot(row, wv[n * K:(n + 1) * K])))
    return y


def gemm_ref_f64(x, w, M, N, K, dtype):
    """The same gemm summed in double precision, unrounded: a sanity
    reference (close to, not equal to, the canonical one)."""
    xv = [from_bits(dtype, u) for u in x]
    wv = [from_bits(dtype, u) for u in w]
    return [math.fsum(xv[m * K + k] * wv[n * K + k] for k in range(K))
            for m in range(M) for n in range(N)]


assert sys.float_info.mant_dig == 53    # doubles are IEEE binary64
