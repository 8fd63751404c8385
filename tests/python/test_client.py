"""Tests of the Python client (client/python/kspec) against a real kspecd.

Run from the repository root:

    KSPEC_BUILD=$PWD/build /usr/bin/python3 -m unittest discover \
        -s tests/python -v

Each daemon test class starts build/kspecd on a temporary socket and store
in setUpClass and stops it with SIGTERM in tearDownClass.  Reference shapes
stay small: the canonical reference is pure Python.
"""

import array
import ctypes
import ctypes.util
import hashlib
import json
import math
import os
import random
import socket
import struct
import tempfile
import threading
import unittest
from fractions import Fraction
from unittest import mock

import daemon_harness               # puts client/python on sys.path
import kspec
from kspec import numeric as nm
from kspec import KspecError

try:
    import _ctypes
except ImportError:                 # pragma: no cover
    _ctypes = None

try:
    import numpy
except ImportError:
    numpy = None


def fbits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def gemm_inputs(dtype, M, N, K, seed):
    """x (M*K) and W (N*K) as bit patterns and bytearrays, y zeroed."""
    x = nm.fill(dtype, M * K, seed)
    w = nm.fill(dtype, N * K, seed + 1)
    esz = nm.ELEM_SIZE[dtype]
    return (x, w, bytearray(nm.pack(dtype, x)), bytearray(nm.pack(dtype, w)),
            bytearray(M * N * esz))


# ---------------------------------------------------------------------------
# Numerics: conversions, fma, the canonical reference (no daemon).
# ---------------------------------------------------------------------------

def error_table_of_c():
    """base/base.h's KS_ERRNO_MAP: {"E_NAME": value}."""
    import re
    with open(os.path.join(daemon_harness.ROOT, "base", "base.h")) as f:
        text = f.read()
    return {"E_" + m.group(1): int(m.group(2)) for m in
            re.finditer(r"X\((\w+),\s*(-\d+),", text)}


def error_table_of_doc():
    """docs/protocol.md's table of error codes: {"E_NAME": value}."""
    import re
    with open(os.path.join(daemon_harness.ROOT, "docs", "protocol.md")) as f:
        text = f.read()
    return {m.group(1): int(m.group(2)) for m in
            re.finditer(r"^\| `(E_\w+)` \| (-\d+) \|", text, re.M)}


class ErrorTableTest(unittest.TestCase):
    """The error codes have one home, base/base.h's KS_ERRNO_MAP (the C
    library checks include/kspec.h against it when it compiles): the
    Python client's table and docs/protocol.md's list exactly its codes
    and values."""

    def test_python_table_is_base_h(self):
        c = error_table_of_c()
        self.assertGreaterEqual(len(c), 35)
        self.assertEqual(kspec.ERROR_CODES, c)

    def test_protocol_doc_lists_base_h(self):
        self.assertEqual(error_table_of_doc(), error_table_of_c())

    def test_the_check_sees_a_planted_difference(self):
        c = error_table_of_c()
        planted = dict(kspec.ERROR_CODES, E_CANARY=-36)
        self.assertNotEqual(planted, c)
        missing = dict(kspec.ERROR_CODES)
        del missing["E_DENIED"]
        self.assertNotEqual(missing, c)


class NumericTest(unittest.TestCase):

    def assertSameFloat(self, got, want, msg=None):
        self.assertEqual(struct.pack("<d", got), struct.pack("<d", want),
                         msg or "%r != %r" % (got, want))

    def test_f32_rounding_known_values(self):
        F = Fraction
        cases = [
            (F(1) + F(1, 2**24), 1.0),                  # tie -> even
            (F(1) + F(3, 2**24), 1 + 2**-22),           # tie -> even (up)
            (F(1) + F(1, 2**24) + F(1, 2**60), 1 + 2**-23),  # past the tie
            (F(1) + F(1, 2**24) - F(1, 2**90), 1.0),
            (F(1, 2**150), 0.0),                        # tie with 0 -> 0
            (-F(1, 2**150), -0.0),
            (F(3, 2**150), 2**-148),                    # subnormal tie
            (F(1, 2**150) + F(1, 2**200), 2**-149),
            (F(1, 2**149), 2**-149),                    # smallest subnormal
            (F(1, 2**126) - F(1, 2**150), 2**-126),     # up to normal
            (F(2**128 - 2**104), 2.0**128 - 2.0**104),  # largest float32
            (F(2**128 - 2**103 - 1), 2.0**128 - 2.0**104),
            (F(2**128 - 2**103), math.inf),             # tie at the top
            (F(-2**129), -math.inf),
            (F(1, 3), 0.3333333432674408),
            (F(-7, 10), -0.699999988079071),
        ]
        for q, want in cases:
            with self.subTest(q=q):
                got = nm.round_ratio(q.numerator, q.denominator, nm.F32)
                self.assertSameFloat(got, want)
                x = float(q) if abs(q) < 2**1000 else None
                if x is not None and Fraction(x) == q:
                    self.assertSameFloat(nm.f32_round(x), want)
        self.assertTrue(math.isnan(nm.f32_round(math.nan)))

    def test_round_ratio_matches_struct_on_doubles(self):
        rng = random.Random(5)
        for i in range(20000):
            e = rng.randint(-160, 130)
            x = math.ldexp(rng.random() + rng.choice((0, 1)), e)
            if i % 3 == 0:              # near a float32 tie
                x = float(nm.f32_round(x)) + math.ldexp(1, e - 24) * \
                    rng.choice((1, -1, 1 + 2**-30, 1 - 2**-30))
            x = -x if rng.random() < 0.5 else x
            if math.isinf(x):
                continue
            n, d = x.as_integer_ratio()
            self.assertSameFloat(nm.round_ratio(n, d, nm.F32),
                                 nm.f32_round(x), "x=%r" % x)

    def test_round_ratio_is_nearest_on_rationals(self):
        """Against first principles: the result is the float32 nearest to
        the exact rational, ties to the even bit pattern."""
        rng = random.Random(7)
        for _ in range(3000):
            n = rng.randint(1, 1 << rng.randint(1, 200))
            d = rng.randint(1, 1 << rng.randint(1, 200))
            q = Fraction(n, d)
            if q >= Fraction(2**128 - 2**103):
                continue
            r = nm.round_ratio(n, d, nm.F32)
            u = fbits(r)
            cands = [u - 1, u, u + 1] if u else [0, 1]
            best = min(cands, key=lambda c: (abs(q - Fraction(
                nm.f32_from_bits(c))), c & 1))
            self.assertEqual(u, best, "n=%d d=%d" % (n, d))

    def test_bf16_known_values(self):
        cases = [(0x3f808000, 0x3f80), (0x3f818000, 0x3f82),
                 (0x3f808001, 0x3f81), (0x3f807fff, 0x3f80),
                 (0x7f7fffff, 0x7f80), (0x00008000, 0x0000),
                 (0x00018000, 0x0002), (0x80008000, 0x8000),
                 (0x7fc00001, 0x7fc0), (0xff800001, 0xffc0),
                 (0x7f800000, 0x7f80)]
        for u, want in cases:
            with self.subTest(u=hex(u)):
                self.assertEqual(nm.bf16_bits(nm.f32_from_bits(u)), want)
        self.assertEqual(nm.bf16_from_bits(0x3f80), 1.0)
        self.assertEqual(nm.bf16_from_bits(0xc040), -3.0)

    def test_f16_known_values(self):
        cases = [(65504.0, 0x7bff), (65519.9921875, 0x7bff),
                 (65520.0, 0x7c00), (-65520.0, 0xfc00),
                 (2**-24, 0x0001), (2**-25, 0x0000), (3 * 2**-25, 0x0002),
                 (2**-25 + 2**-40, 0x0001), (2**-14, 0x0400),
                 (2**-14 - 2**-25, 0x0400), (1 + 2**-11, 0x3c00),
                 (1 + 3 * 2**-11, 0x3c02), (-0.0, 0x8000),
                 (math.inf, 0x7c00), (-2.0, 0xc000)]
        for x, want in cases:
            with self.subTest(x=x):
                self.assertEqual(nm.f16_bits(x), want)
        self.assertEqual(nm.f16_bits(nm.f32_from_bits(0x7fc00000)), 0x7e00)
        self.assertEqual(nm.f16_from_bits(0x3c00), 1.0)
        self.assertEqual(nm.f16_from_bits(0x0001), 2**-24)

    def test_16bit_conversions_match_exact_rounding(self):
        rng = random.Random(11)
        for _ in range(20000):
            x = nm.f32_round(math.ldexp(rng.uniform(-2, 2),
                                        rng.randint(-30, 18)))
            n, d = x.as_integer_ratio()
            self.assertEqual(nm.f16_bits(x),
                             _bits16(nm.round_ratio(n, d, nm.F16), "e"),
                             "x=%r" % x)
            self.assertEqual(nm.bf16_bits(x),
                             fbits(nm.round_ratio(n, d, nm.BF16)) >> 16,
                             "x=%r" % x)

    def test_fma_known_values(self):
        e = nm.fma_f32(1 + 2**-23, 1 - 2**-23, -1.0)
        self.assertSameFloat(e, -2**-46)     # unfused: 0.0
        self.assertSameFloat(nm.f32_round(nm.f32_round(
            (1 + 2**-23) * (1 - 2**-23)) - 1.0), 0.0)
        # The double sum rounds to a float32 tie that the exact sum is not
        # on: rounding through a double gives 1 + 2^-22, fma 1 + 2^-23.
        a, b, c = 2**-24 * (1 + 2**-20), 1 - 2**-20, 1 + 2**-23
        self.assertSameFloat(nm.f32_round(a * b + c), 1 + 2**-22)
        self.assertSameFloat(nm.fma_f32(a, b, c), 1 + 2**-23)
        # Signed zeros and specials as fmaf.
        self.assertSameFloat(nm.fma_f32(-0.0, 1.0, -0.0), -0.0)
        self.assertSameFloat(nm.fma_f32(-0.0, 1.0, 0.0), 0.0)
        self.assertSameFloat(nm.fma_f32(2.0, 3.0, -6.0), 0.0)
        self.assertSameFloat(nm.fma_f32(2**-100, 2**-100, 0.0), 0.0)
        self.assertSameFloat(nm.fma_f32(2**-75, 2**-75, 0.0), 2**-150 * 0)
        self.assertSameFloat(nm.fma_f32(2**-75, 2**-74, -0.0), 2**-149)
        self.assertSameFloat(nm.fma_f32(2**100, 2**100, 0.0), math.inf)
        self.assertTrue(math.isnan(nm.fma_f32(math.inf, 0.0, 1.0)))
        self.assertTrue(math.isnan(nm.fma_f32(math.inf, 1.0, -math.inf)))

    def test_fma_matches_libm_fmaf(self):
        path = ctypes.util.find_library("m")
        if not path:
            self.skipTest("no libm to compare with")
        fmaf = ctypes.CDLL(path).fmaf
        fmaf.argtypes = [ctypes.c_float] * 3
        fmaf.restype = ctypes.c_float
        rng = random.Random(13)

        def f32(lo, hi):
            return nm.f32_round(math.ldexp(rng.uniform(-1, 1),
                                           rng.randint(lo, hi)))
        for i in range(20000):
            a, b = f32(-80, 60), f32(-80, 60)
            if i % 2:
                # Near-cancellation: c close to -a*b.
                c = nm.f32_round(-a * b * (1 + rng.uniform(-1, 1) * 2**-20))
            else:
                c = f32(-150, 120)
            got = nm.fma_f32(a, b, c)
            self.assertSameFloat(got, fmaf(a, b, c), "fma(%r, %r, %r)"
                                 % (a, b, c))

    def test_fill_is_ref_h_sequence(self):
        # ref/ref.h ref_fill(buf, 0 /* f32 */, 4, 1), as the C code gives.
        self.assertEqual(nm.fill("f32", 4, 1),
                         [994206789, 3212042711, 1056963665, 3189147822])
        self.assertEqual(nm.fill("bf16", 4, 1),
                         [nm.bf16_bits(nm.f32_from_bits(u))
                          for u in nm.fill("f32", 4, 1)])

    def test_reference_catches_a_planted_order_bug(self):
        """A sequential-order reference gives other bits on this data, so a
        kernel with the wrong order cannot pass the bitwise check; both are
        within rounding of a double-precision sum."""
        M, N, K = 1, 8, 100
        x = nm.fill("f32", M * K, 21)
        w = nm.fill("f32", N * K, 22)
        good = nm.gemm_ref(x, w, M, N, K, "f32")
        bad = nm.gemm_ref(x, w, M, N, K, "f32", dot=nm.dot_sequential)
        self.assertNotEqual(good, bad)
        exact = nm.gemm_ref_f64(x, w, M, N, K, "f32")
        for g, b, e in zip(good, bad, exact):
            self.assertLess(abs(nm.f32_from_bits(g) - e), 1e-5)
            self.assertLess(abs(nm.f32_from_bits(b) - e), 1e-5)

    def test_eval_expr(self):
        ev = kspec.eval_expr
        self.assertEqual(ev("M*((N+3)/4)", {"M": 3, "N": 5}), 6)
        self.assertEqual(ev("M*2", {"M": 7}), 14)
        self.assertEqual(ev(1024, {}), 1024)
        self.assertEqual(ev(" ( 7 ) ", {}), 7)
        self.assertEqual(ev("-7/2", {}), -3)          # C truncation
        self.assertEqual(ev("-7%2", {}), -1)
        self.assertEqual(ev("7%-2", {}), 1)
        self.assertEqual(ev("2+3*4-10/3", {}), 11)
        self.assertEqual(ev("-(-3)", {}), 3)
        for bad in ("M*", "(1", "1)", "", "M N", "__import__('os')",
                    "1/0", "5%(2-2)", "9223372036854775807+1",
                    "3.5", "a.b", "M**2", "(" * 100 + "1" + ")" * 100):
            with self.subTest(expr=bad):
                self.assertRaises(ValueError, ev, bad, {"M": 2})
        self.assertRaises(ValueError, ev, "Q+1", {"M": 2})


def _bits16(x, code):
    return struct.unpack("<H", struct.pack("<" + code, x))[0]


# ---------------------------------------------------------------------------
# A real daemon.
# ---------------------------------------------------------------------------

class DaemonTestCase(unittest.TestCase):
    daemon = None

    @classmethod
    def setUpClass(cls):
        cls.daemon = daemon_harness.Daemon().start()
        cls.sock = cls.daemon.socket

    @classmethod
    def tearDownClass(cls):
        rc = cls.daemon.stop()
        cls.daemon.cleanup()
        if rc != 0:
            raise AssertionError("kspecd exited with %r on SIGTERM" % rc)

    def client(self, **kw):
        c = kspec.Client(self.sock, timeout=60, **kw)
        self.addCleanup(c.close)
        return c


class BasicOpsTest(DaemonTestCase):

    def test_ping_hello_stats(self):
        c = self.client()
        self.assertIs(c.ping()["pong"], True)
        h = c.hello()
        self.assertEqual(h["protocol"], kspec.PROTOCOL_VERSION)
        self.assertTrue(h["server"].startswith("kspecd "))
        self.assertIn("gemm", h["kernels"])
        cpu = [b for b in h["backends"] if b["name"] == "cpu"]
        self.assertEqual(len(cpu), 1)
        self.assertIs(cpu[0]["available"], True)
        s0 = c.stats()
        c.get("gemm", dtype="f32", shape={"M": 1, "N": 4, "K": 8},
              meta_only=True)
        s1 = c.stats()
        self.assertEqual(s1["gets"], s0["gets"] + 1)
        self.assertGreaterEqual(s1["requests"], s0["requests"] + 2)
        for k in ("hits_memory", "compiles", "hot", "store", "inflight"):
            self.assertIn(k, s1)

    def test_default_socket_path(self):
        d = kspec.default_socket_path
        self.assertEqual(d({"KSPEC_SOCKET": "/a/b.sock",
                            "XDG_RUNTIME_DIR": "/run"}), "/a/b.sock")
        self.assertEqual(d({"KSPEC_SOCKET": "", "XDG_RUNTIME_DIR": "/run/u"}),
                         "/run/u/kspec/kspecd.sock")
        self.assertEqual(d({"XDG_RUNTIME_DIR": ""}),
                         "/tmp/kspec-%d/kspecd.sock" % os.getuid())
        self.assertEqual(d({}), "/tmp/kspec-%d/kspecd.sock" % os.getuid())

    def test_default_socket_path_is_libkspecs(self):
        # One order of fallbacks in both languages: libkspec's
        # kspec_default_socket (proto/proto.c) under the same environment.
        lib = ctypes.CDLL(os.path.join(daemon_harness.build_dir(),
                                       "libkspec.so"))
        buf = ctypes.create_string_buffer(256)
        d = tempfile.mkdtemp(prefix="kspec-py-xdg-")
        self.addCleanup(os.rmdir, d)
        for env in ({"KSPEC_SOCKET": "/a/b.sock", "XDG_RUNTIME_DIR": d},
                    {"KSPEC_SOCKET": "", "XDG_RUNTIME_DIR": d},
                    {"XDG_RUNTIME_DIR": ""}, {"INVOCATION_ID": "x"}, {}):
            with mock.patch.dict(os.environ, env, clear=True):
                self.assertEqual(lib.kspec_default_socket(buf, 256), 0)
                self.assertEqual(buf.value.decode(),
                                 kspec.default_socket_path(), env)

    def test_client_default_comes_from_KSPEC_SOCKET(self):
        with mock.patch.dict(os.environ, {"KSPEC_SOCKET": self.sock}):
            with kspec.Client() as c:
                self.assertEqual(c.path, self.sock)
                self.assertTrue(c.ping()["ok"])
            self.assertTrue(c.closed)

    def test_connect_failure_is_E_CONNECT(self):
        d = tempfile.mkdtemp(prefix="kspec-py-none-")
        self.addCleanup(os.rmdir, d)
        path = os.path.join(d, "nobody.sock")
        with self.assertRaises(KspecError) as cm:
            kspec.Client(path)
        e = cm.exception
        self.assertEqual(e.code, "E_CONNECT")
        self.assertEqual(e.errno, -22)
        self.assertIn("cannot connect to %s: " % path, e.message)
        self.assertIn("is kspecd running?", e.message)
        self.assertIn("No such file", e.message)

    def test_closed_client_says_E_CONNECT(self):
        c = self.client()
        c.close()
        with self.assertRaises(KspecError) as cm:
            c.ping()
        self.assertEqual(cm.exception.code, "E_CONNECT")
        c.reconnect()
        self.assertTrue(c.ping()["ok"])


class GemmTest(DaemonTestCase):
    """Artifacts run through the ctypes loader, bitwise against the Python
    canonical reference."""

    def run_gemv(self, c, dtype, N, K, seed):
        art = c.get("gemm", backend="cpu", dtype=dtype,
                    shape={"M": 1, "N": N, "K": K})
        x, w, xb, wb, yb = gemm_inputs(dtype, 1, N, K, seed)
        with kspec.load_cpu(art) as kern:
            kern(xb, wb, yb)
        return art, nm.unpack(dtype, yb), nm.gemm_ref(x, w, 1, N, K, dtype)

    def test_gemv_m1_bitwise_per_dtype(self):
        c = self.client()
        for dtype in ("f32", "bf16", "f16"):
            for N, K in ((7, 100), (4, 32), (3, 5)):
                with self.subTest(dtype=dtype, N=N, K=K):
                    art, got, want = self.run_gemv(c, dtype, N, K, N * K)
                    self.assertEqual(art.variant, "gemv_m1")
                    self.assertEqual(art.entry, "ks_gemm_gemv_m1")
                    self.assertEqual(art.format, "so")
                    self.assertEqual(art.guard, {"M": 1, "N": N, "K": K})
                    self.assertEqual(art.launch["groups"], (N + 7) // 8)
                    self.assertEqual(len(art), art.size)
                    self.assertEqual(hashlib.blake2b(
                        art.bytes, digest_size=32).hexdigest(),
                        art.artifact_hash)
                    self.assertEqual(got, want)

    def test_buffer_kinds(self):
        """bytearray, memoryview, array.array, ctypes arrays and (read-only)
        bytes all pass the same pointers."""
        c = self.client()
        N, K = 6, 40
        art = c.get("gemm", dtype="f32", shape={"M": 1, "N": N, "K": K})
        x, w, xb, wb, _ = gemm_inputs("f32", 1, N, K, 3)
        want = nm.gemm_ref(x, w, 1, N, K, "f32")
        kern = kspec.load_cpu(art)
        self.addCleanup(kern.close)
        xs = [nm.f32_from_bits(u) for u in x]
        ws = [nm.f32_from_bits(u) for u in w]
        kinds = {
            "bytearray": (xb, wb, lambda: bytearray(4 * N)),
            "bytes": (bytes(xb), bytes(wb), lambda: bytearray(4 * N)),
            "memoryview": (memoryview(xb), memoryview(wb),
                           lambda: memoryview(bytearray(4 * N))),
            "array": (array.array("f", xs), array.array("I", w),
                      lambda: array.array("f", [0.0] * N)),
            "ctypes": ((ctypes.c_float * K)(*xs), (ctypes.c_float * (N * K))(
                *ws), lambda: (ctypes.c_float * N)()),
        }
        for kind, (xa, wa, mk) in kinds.items():
            with self.subTest(kind=kind):
                y = mk()
                kern(xa, wa, y)
                self.assertEqual(nm.unpack("f32", bytes(y)), want)

    @unittest.skipIf(numpy is None, "numpy is not installed")
    def test_numpy_arrays(self):
        c = self.client()
        N, K = 6, 40
        kinds = {"f32": numpy.float32, "f16": numpy.float16,
                 "bf16": numpy.uint16}
        for dtype, npt in kinds.items():
            with self.subTest(dtype=dtype):
                art = c.get("gemm", dtype=dtype,
                            shape={"M": 1, "N": N, "K": K})
                x, w, xb, wb, _ = gemm_inputs(dtype, 1, N, K, 5)
                xa = numpy.frombuffer(bytes(xb), dtype=npt)   # read-only
                wa = numpy.frombuffer(wb, dtype=npt).reshape(N, K)
                y = numpy.zeros(N, dtype=npt)
                with kspec.load_cpu(art) as kern:
                    kern(xa, wa, y)
                    self.assertEqual(nm.unpack(dtype, y.tobytes()),
                                     nm.gemm_ref(x, w, 1, N, K, dtype))
                    with self.assertRaisesRegex(ValueError, "contiguous"):
                        kern(xa, wa.T, y)
                    with self.assertRaisesRegex(ValueError, "read-only"):
                        kern(xa, wa, numpy.frombuffer(bytes(2 * N * 4),
                                                      dtype=npt))
                    with self.assertRaisesRegex(TypeError, "8-byte items"):
                        kern(xa.astype(numpy.float64), wa, y)

    def test_constant_m_above_one(self):
        """Constant M of 3 (small_m) and 9 (blocked, 16 lanes): bitwise
        equal to the reference."""
        c = self.client()
        for dtype, M in (("f32", 3), ("f16", 3), ("f32", 9), ("bf16", 9)):
            with self.subTest(dtype=dtype, M=M):
                N, K = 6, 33
                art = c.get("gemm", dtype=dtype,
                            shape={"M": M, "N": N, "K": K})
                self.assertEqual(art.variant,
                                 "small_m" if M == 3 else "blocked")
                self.assertEqual(art.guard, {"M": M, "N": N, "K": K})
                x, w, xb, wb, yb = gemm_inputs(dtype, M, N, K, 17)
                with kspec.load_cpu(art) as kern:
                    kern(xb, wb, yb)
                self.assertEqual(nm.unpack(dtype, yb),
                                 nm.gemm_ref(x, w, M, N, K, dtype))

    def test_dynamic_m_general(self):
        c = self.client()
        N, K, M = 5, 40, 3
        art = c.get("gemm", dtype="f32", shape={"N": N, "K": K},
                    dynamic=["M"])
        self.assertEqual(art.variant, "general")
        self.assertEqual(art.dynamic, ["M"])
        self.assertEqual([p["name"] for p in art.params], ["x", "W", "y", "M"])
        self.assertIsInstance(art.launch["groups"], str)
        kern = kspec.load_cpu(art)
        self.addCleanup(kern.close)
        self.assertEqual(kern.num_groups({"M": M}),
                         ((M + 3) // 4) * ((N + 3) // 4))
        x, w, xb, wb, yb = gemm_inputs("f32", M, N, K, 8)
        want = nm.gemm_ref(x, w, M, N, K, "f32")
        kern(xb, wb, yb, M)
        self.assertEqual(nm.unpack("f32", yb), want)
        # The same launch split in two group ranges, as two host threads
        # would run it.
        y2 = bytearray(len(yb))
        total = kern.num_groups(kern.dims(xb, wb, y2, M))
        t = threading.Thread(target=kern, args=(xb, wb, y2, M),
                             kwargs={"groups": total // 2})
        t.start()
        kern(xb, wb, y2, M, group_begin=total // 2)
        t.join()
        self.assertEqual(bytes(y2), bytes(yb))
        # A smaller M with the same buffers runs only its rows.
        y3 = bytearray(len(yb))
        kern(xb, wb, y3, 1)
        self.assertEqual(nm.unpack("f32", y3)[:N], want[:N])
        self.assertEqual(bytes(y3[4 * N:]), bytes(4 * N * (M - 1)))

    def test_all_dims_dynamic(self):
        c = self.client()
        for dtype in ("f32", "bf16"):
            with self.subTest(dtype=dtype):
                art = c.get("gemm", dtype=dtype, dynamic="M,N,K")
                self.assertEqual(art.variant, "general")
                self.assertEqual(art.guard, {})
                self.assertEqual(art.launch["groups"],
                                 "(M+3)/4*((N+3)/4)")
                M, N, K = 2, 6, 35
                x, w, xb, wb, yb = gemm_inputs(dtype, M, N, K, 12)
                with kspec.load_cpu(art) as kern:
                    kern(xb, wb, yb, M, N, K)
                self.assertEqual(nm.unpack(dtype, yb),
                                 nm.gemm_ref(x, w, M, N, K, dtype))

    def test_general_gives_the_bits_of_gemv_m1(self):
        """The numerical contract (docs/backends.md): a specialized variant returns the same bits
        as the general one at its shape."""
        c = self.client()
        N, K = 9, 70
        spec = c.get("gemm", dtype="bf16", shape={"M": 1, "N": N, "K": K})
        gen = c.get("gemm", dtype="bf16", shape={"N": N, "K": K},
                    dynamic=["M"])
        self.assertNotEqual(spec.variant, gen.variant)
        _, _, xb, wb, y1 = gemm_inputs("bf16", 1, N, K, 30)
        y2 = bytearray(len(y1))
        with kspec.load_cpu(spec) as k1, kspec.load_cpu(gen) as k2:
            k1(xb, wb, y1)
            k2(xb, wb, y2, 1)
        self.assertEqual(bytes(y1), bytes(y2))

    def test_packed_prefill_is_gemm_bit_for_bit(self):
        """gemm_pack_x / gemm_pack_w, then gemm_packed, from Python: y is
        the canonical reference's (f32, and f32 with bf16 weights), on 2
        threads too; the panel buffers' padded dims are checked before the
        call."""
        c = self.client()
        M, N, K = 13, 37, 100
        for dtype, wdtype in (("f32", "f32"), ("f32", "bf16")):
            with self.subTest(wdtype=wdtype):
                px = c.get("gemm_pack_x", dtype=dtype,
                           shape={"R": M, "K": K})
                pw = c.get("gemm_pack_w", dtype=wdtype,
                           shape={"R": N, "K": K})
                gp = c.get("gemm_packed", dtype=dtype, wdtype=wdtype,
                           shape={"M": M, "N": N, "K": K})
                self.assertEqual([(q["name"], q["dtype"]) for q in
                                  gp.params if q["kind"] == "buffer"],
                                 [("xp", dtype), ("Wp", wdtype),
                                  ("y", dtype)])
                x = nm.fill(dtype, M * K, 41)
                w = nm.fill(wdtype, N * K, 42)
                xb = bytearray(nm.pack(dtype, x))
                wb = bytearray(nm.pack(wdtype, w))
                # Panels: ceil(R / T) * T * 32 * ceil(K / 32) elements.
                xp = bytearray(16 * 32 * 4 * nm.ELEM_SIZE[dtype])
                wp = bytearray(64 * 32 * 4 * nm.ELEM_SIZE[wdtype])
                y = bytearray(M * N * nm.ELEM_SIZE[dtype])
                y2 = bytearray(len(y))
                with kspec.load_cpu(px) as kx, kspec.load_cpu(pw) as kw, \
                        kspec.load_cpu(gp) as kg:
                    kx(xb, xp)
                    kw(wb, wp)
                    kg(xp, wp, y)
                    kg(xp, wp, y2, threads=2)
                    with self.assertRaisesRegex(ValueError,
                                                "buffer Wp has"):
                        kg(xp, wp[:-1], y)
                xv = [nm.from_bits(dtype, u) for u in x]
                wv = [nm.from_bits(wdtype, u) for u in w]
                want = [nm.to_bits(dtype, nm.dot_canonical(
                    xv[m * K:(m + 1) * K], wv[n * K:(n + 1) * K]))
                    for m in range(M) for n in range(N)]
                self.assertEqual(nm.unpack(dtype, y), want)
                self.assertEqual(bytes(y2), bytes(y))

    def test_quantized_weights_through_the_daemon(self):
        """gemm with q8_0 and q4_0 weights served by the daemon and called
        through the loader: W is the GGUF block bytes (dims in bytes, the
        size checked), y bitwise the canonical f32 gemm of the weights
        decoded by the documented codec."""
        c = self.client()
        M, N, K = 1, 9, 64
        rng = random.Random(7)
        for fmt, bb in (("q8_0", 34), ("q4_0", 18)):
            with self.subTest(wdtype=fmt):
                art = c.get("gemm", dtype="f32", wdtype=fmt,
                            shape={"M": M, "N": N, "K": K})
                w = [q for q in art.params if q["name"] == "W"][0]
                self.assertEqual((w["dtype"], w["dims"]),
                                 (fmt, ["N", "K/32*%d" % bb]))
                wb = bytearray(rng.getrandbits(8) for _ in
                               range(N * K // 32 * bb))
                wv = []
                for blk in range(N * K // 32):
                    o = blk * bb
                    h = 0x3000 | rng.getrandbits(10)    # a normal f16
                    wb[o], wb[o + 1] = h & 255, h >> 8
                    d = nm.from_bits("f16", h)
                    for j in range(32):
                        if fmt == "q8_0":
                            q = wb[o + 2 + j] - (wb[o + 2 + j] & 128) * 2
                        else:
                            b = wb[o + 2 + j % 16]
                            q = (b & 15 if j < 16 else b >> 4) - 8
                        wv.append(nm.from_bits("f32", nm.to_bits(
                            "f32", d * q)))
                x = nm.fill("f32", M * K, 43)
                xv = [nm.from_bits("f32", u) for u in x]
                y = bytearray(4 * M * N)
                with kspec.load_cpu(art) as kern:
                    kern(bytearray(nm.pack("f32", x)), wb, y)
                    with self.assertRaisesRegex(ValueError,
                                                "buffer W has"):
                        kern(bytearray(nm.pack("f32", x)), wb[:-1], y)
                want = [nm.to_bits("f32", nm.dot_canonical(
                    xv[m * K:(m + 1) * K], wv[n * K:(n + 1) * K]))
                    for m in range(M) for n in range(N)]
                self.assertEqual(nm.unpack("f32", y), want)

    def test_fast_mode_through_the_daemon(self):
        """gemm in mode fast with q4_0 weights: the variant fast, whose x
        is q8_0 bytes (kspec.quantize's); y bitwise the documented fast
        contract computed here (16 lanes, integer sums of 4 products,
        fma of dx*dw into the lane, the tree of 16); an f32 x refused."""
        c = self.client()
        M, N, K = 1, 9, 96             # 3 blocks: a pair and one alone
        rng = random.Random(8)
        art = c.get("gemm", dtype="f32", wdtype="q4_0", mode="fast",
                    shape={"M": M, "N": N, "K": K})
        self.assertEqual(art.variant, "fast")
        xp = [q for q in art.params if q["name"] == "x"][0]
        self.assertEqual((xp["dtype"], xp["dims"]), ("q8_0", ["M", "K/32*34"]))
        wb = bytearray(rng.getrandbits(8) for _ in range(N * K // 32 * 18))
        for blk in range(N * K // 32):
            h = 0x3000 | rng.getrandbits(10)
            wb[blk * 18], wb[blk * 18 + 1] = h & 255, h >> 8
        x = [nm.from_bits("f32", u) for u in nm.fill("f32", M * K, 44)]
        os.environ.setdefault("KSPEC_LIBKSPEC", os.path.join(
            daemon_harness.build_dir(), "libkspec.so"))
        xq = bytearray(kspec.quantize("q8_0", array.array("f", x), K))
        y = bytearray(4 * M * N)
        with kspec.load_cpu(art) as kern:
            kern(xq, wb, y)
            with self.assertRaisesRegex(TypeError, "x"):
                kern(array.array("f", x), wb, y)

        def s8(b):
            return b - (b & 128) * 2

        want = []
        for n in range(N):
            acc = [0.0] * 16
            for b in range(K // 32):
                xo, wo, h = b * 34, (n * K // 32 + b) * 18, b % 2
                dx = nm.from_bits("f16", xq[xo] | xq[xo + 1] << 8)
                dw = nm.from_bits("f16", wb[wo] | wb[wo + 1] << 8)
                c32 = nm.f32_round(dx * dw)
                for g in range(8):
                    p = 0
                    for j in range(4 * g, 4 * g + 4):
                        cb = wb[wo + 2 + j % 16]
                        q = (cb & 15 if j < 16 else cb >> 4) - 8
                        p += q * s8(xq[xo + 2 + j])
                    acc[8 * h + g] = nm.fma_f32(c32, float(p),
                                                acc[8 * h + g])
            for st in (8, 4, 2, 1):
                for lane in range(st):
                    acc[lane] = nm.add_f32(acc[lane], acc[lane + st])
            want.append(nm.to_bits("f32", acc[0]))
        self.assertEqual(nm.unpack("f32", y), want)

    def test_loader_checks_arguments(self):
        c = self.client()
        N, K = 5, 40
        art = c.get("gemm", dtype="f32", shape={"N": N, "K": K},
                    dynamic=["M"])
        kern = kspec.load_cpu(art)
        self.addCleanup(kern.close)
        _, _, xb, wb, yb = gemm_inputs("f32", 2, N, K, 1)
        with self.assertRaisesRegex(ValueError, "buffer y has 20 bytes; "
                                    "ks_gemm_general needs 40 "):
            kern(xb, wb, bytearray(4 * N), 2)         # y too small for M=2
        with self.assertRaisesRegex(ValueError, "buffer x has 320 bytes"):
            kern(xb, wb, bytearray(4 * N * 3), 3)     # x too small for M=3
        with self.assertRaisesRegex(ValueError, "read-only"):
            kern(xb, wb, bytes(len(yb)), 2)
        with self.assertRaisesRegex(TypeError, "takes 4 arguments"):
            kern(xb, wb, yb)
        with self.assertRaisesRegex(TypeError, "8-byte items"):
            kern(array.array("d", [0.0] * (2 * K)), wb, yb, 2)
        with self.assertRaisesRegex(TypeError, "bytes-like"):
            kern(xb, wb, 17, 2)
        with self.assertRaisesRegex(TypeError, "integer"):
            kern(xb, wb, yb, 2.0)
        with self.assertRaisesRegex(ValueError, ">= 0"):
            kern(xb, wb, yb, -1)
        with self.assertRaisesRegex(ValueError, "past the launch grid"):
            kern(xb, wb, yb, 2, groups=5)
        with self.assertRaisesRegex(ValueError, "contiguous"):
            kern(memoryview(xb)[::2], wb, yb, 1)
        self.assertEqual(bytes(yb), bytes(len(yb)))   # nothing ran
        kern(xb, wb, yb, 2, group_begin=2, groups=2)   # empty range
        self.assertEqual(bytes(yb), bytes(len(yb)))
        meta = c.get("gemm", dtype="f32", shape={"N": N, "K": K},
                     dynamic=["M"], meta_only=True)
        self.assertIsNone(meta.bytes)
        self.assertEqual(meta.key, art.key)
        self.assertEqual(meta.artifact_hash, art.artifact_hash)
        self.assertRaises(ValueError, kspec.load_cpu, meta)
        kern.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            kern(xb, wb, yb, 2)

    @unittest.skipIf(_ctypes is None, "needs _ctypes")
    def test_loader_survives_a_stale_proc_fd_name(self):
        """Another loader dlopened /proc/self/fd/N and closed N with the
        library still loaded; our next memfd gets N again.  glibc would hand
        back the old library for the same name: the loader must pick a name
        nobody uses and run the new code."""
        c = self.client()
        old = c.get("gemm", dtype="f32", shape={"M": 1, "N": 5, "K": 8})
        new = c.get("gemm", dtype="f32", shape={"M": 1, "N": 9, "K": 8})
        self.assertEqual(old.entry, new.entry)
        fd = os.memfd_create("foreign", os.MFD_CLOEXEC)
        os.write(fd, old.bytes)
        stale = _ctypes.dlopen("/proc/self/fd/%d" % fd,
                               os.RTLD_NOW | os.RTLD_LOCAL)
        self.addCleanup(_ctypes.dlclose, stale)
        os.close(fd)
        kern = kspec.load_cpu(new)
        self.addCleanup(kern.close)
        x, w, xb, wb, yb = gemm_inputs("f32", 1, 9, 8, 4)
        kern(xb, wb, yb)
        self.assertEqual(nm.unpack("f32", yb),
                         nm.gemm_ref(x, w, 1, 9, 8, "f32"))
        if kern._fd != fd:
            self.skipTest("the new memfd did not reuse fd %d; nothing "
                          "collided" % fd)

    def test_save(self):
        c = self.client()
        art = c.get("gemm", dtype="f16", shape={"M": 1, "N": 4, "K": 8})
        d = tempfile.mkdtemp(prefix="kspec-py-save-")
        path = os.path.join(d, "a.so")
        art.save(path)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), art.bytes)
        os.unlink(path)
        os.rmdir(d)


# A kernel at a shape, for the checked, threaded calls: (kernel, shape,
# dynamic); every buffer in f32 but the i32 positions and lengths.
LAUNCH_CASES = [
    ("gemm", {"M": 3, "N": 37, "K": 64}, ["M"]),
    ("rmsnorm", {"R": 5, "H": 300}, []),
    ("add_rmsnorm", {"R": 5, "H": 300}, ["R"]),
    ("softmax", {"R": 6, "L": 200}, []),
    ("rope", {"T": 3, "Hn": 4, "D": 64, "P": 16}, []),
    ("silu_mul", {"T": 2, "F": 600}, ["T"]),
    ("attention_decode", {"B": 2, "Hq": 8, "Hkv": 2, "D": 64, "S": 40}, []),
]


def launch_args(art, dims, seed):
    """Arguments for ART at DIMS: each buffer as big as its dims, floats in
    [-1, 1), positions (37 t + 11) % P, lengths S, dims as integers."""
    rng = random.Random(seed)
    args = []
    for p in art.params:
        if p["kind"] == "scalar":
            args.append(dims[p["name"]] if p["dtype"] == "i64" else
                        (1e-5 if p["name"] == "eps" else 0.125))
            continue
        n = 1
        for d in p["dims"]:
            n *= kspec.eval_expr(d, dims)
        if p["name"] == "pos":
            args.append(array.array("i", [(37 * t + 11) % dims["P"]
                                          for t in range(n)]))
        elif p["name"] == "lens":
            args.append(array.array("i", [dims["S"]] * n))
        else:
            args.append(array.array("f", [rng.uniform(-1, 1)
                                          for _ in range(n)]))
    return args


class LaunchTest(DaemonTestCase):
    """The loader's size checks for every buffer, and threads=N."""

    def get(self, c, kernel, shape, dynamic):
        return c.get(kernel, backend="cpu", dtype="f32",
                     shape={k: v for k, v in shape.items()
                            if k not in dynamic}, dynamic=dynamic)

    def test_short_kv_cache_is_refused_before_the_call(self):
        c = self.client()
        dims = {"B": 1, "Hq": 8, "Hkv": 2, "D": 64, "S": 48}
        art = self.get(c, "attention_decode", dims, [])
        self.assertEqual([p.get("dims") for p in art.params[:5]],
                         [["B", "Hq", "D"], ["B", "S", "Hkv", "D"],
                          ["B", "S", "Hkv", "D"], ["B"], ["B", "Hq", "D"]])
        q, k, v, lens, o, scale = launch_args(art, dims, 1)
        short = array.array("f", k[:-1])
        before = bytes(o)
        with kspec.load_cpu(art) as kern:
            with self.assertRaisesRegex(
                    ValueError, r"^buffer k has 24572 bytes; "
                    r"ks_attention_decode_gqa needs 24576 \(1x48x2x64 of "
                    r"f32\)$"):
                kern(q, short, v, lens, o, scale, threads=2)
            self.assertEqual(bytes(o), before)          # nothing ran
            kern(q, k, v, lens, o, scale, threads=2)
            self.assertNotEqual(bytes(o), before)

    def test_every_buffer_alone_short_is_refused(self):
        c = self.client()
        for kernel, shape, dynamic in LAUNCH_CASES:
            art = self.get(c, kernel, shape, dynamic)
            args = launch_args(art, shape, 2)
            before = [bytes(a) for a in args if isinstance(a, array.array)]
            with kspec.load_cpu(art) as kern:
                for i, p in enumerate(art.params):
                    if p["kind"] != "buffer":
                        continue
                    with self.subTest(kernel=kernel, buffer=p["name"]):
                        bad = list(args)
                        bad[i] = array.array(args[i].typecode, args[i][:-1])
                        with self.assertRaisesRegex(
                                ValueError, "^buffer %s has %d bytes; "
                                % (p["name"], 4 * len(bad[i]))):
                            kern(*bad, threads=2)
                        if args[i].typecode == "f":
                            bad[i] = array.array("i", [0] * len(args[i]))
                            self.assertRaises(TypeError, kern, *bad)
            self.assertEqual([bytes(a) for a in args
                              if isinstance(a, array.array)], before)

    def test_threads_give_the_bits_of_one_thread(self):
        c = self.client()
        for kernel, shape, dynamic in LAUNCH_CASES:
            art = self.get(c, kernel, shape, dynamic)
            with kspec.load_cpu(art) as kern:
                one = launch_args(art, shape, 3)
                start = [bytes(a) for a in one if hasattr(a, "typecode")]
                kern(*one)
                self.assertNotEqual(
                    [bytes(a) for a in one if hasattr(a, "typecode")],
                    start, kernel)
                for threads in (2, 3, 0):
                    with self.subTest(kernel=kernel, threads=threads):
                        many = launch_args(art, shape, 3)
                        kern(*many, threads=threads)
                        self.assertEqual([bytes(a) for a in many
                                          if hasattr(a, "typecode")],
                                         [bytes(a) for a in one
                                          if hasattr(a, "typecode")])
        self.assertGreaterEqual(kspec.loader.default_threads(), 1)

    @unittest.skipUnless(hasattr(os, "fork"), "needs fork")
    def test_a_forked_child_runs_threads(self):
        c = self.client()
        kernel, shape, dynamic = LAUNCH_CASES[0]
        art = self.get(c, kernel, shape, dynamic)
        with kspec.load_cpu(art) as kern:
            want = launch_args(art, shape, 4)
            kern(*want, threads=3)                  # the pool is started
            pid = os.fork()
            if pid == 0:                            # pragma: no cover
                ok = False
                try:
                    got = launch_args(art, shape, 4)
                    kern(*got, threads=3)
                    ok = bytes(got[2]) == bytes(want[2])
                finally:
                    os._exit(0 if ok else 1)
            _, status = os.waitpid(pid, 0)
            self.assertEqual(status, 0)


class PipelineTest(DaemonTestCase):

    def test_get_many_results_in_spec_order_replies_out_of_order(self):
        c = self.client()
        cached = [{"kernel": "gemm", "dtype": dt,
                   "shape": {"M": 1, "N": n, "K": 16}}
                  for dt, n in (("f32", 4), ("bf16", 8), ("f16", 12))]
        c.get_many(cached)                      # now in the hot tier
        specs = [
            # A cold compile first: every dim dynamic (the slowest build).
            {"kernel": "gemm", "dtype": "f16", "dynamic": ["M", "N", "K"]},
            cached[0], cached[1],
            {"kernel": "gemm", "dtype": "f32", "shape": {"M": 0, "N": 4,
                                                        "K": 16}},
            cached[2],
            dict(cached[0], meta_only=True),
            {"kernel": "gemm", "dtype": "bf16", "shape": {"M": 1, "N": 20,
                                                         "K": 24}},
            cached[1],
            {"kernel": "gemm", "dtype": "f32", "shape": {"N": 3, "K": 9},
             "dynamic": ["M"]},
            cached[2],
        ]
        seen = []
        res = c.get_many(specs, return_exceptions=True,
                         on_reply=lambda i, h: seen.append((i, h["id"])))
        self.assertEqual(len(res), 10)
        for i, (spec, r) in enumerate(zip(specs, res)):
            with self.subTest(i=i):
                if i == 3:
                    self.assertIsInstance(r, KspecError)
                    self.assertEqual(r.code, "E_BAD_SHAPE")
                    self.assertIn("M", r.message)
                    continue
                self.assertIsInstance(r, kspec.Artifact)
                self.assertEqual(r.dtype, spec["dtype"])
                want = {k: v for k, v in spec.get("shape", {}).items()}
                self.assertEqual(r.guard, want)
                self.assertEqual(r.dynamic, spec.get("dynamic", []))
                if spec.get("meta_only"):
                    self.assertIsNone(r.bytes)
                else:
                    self.assertEqual(len(r), r.size)
        self.assertEqual(res[0].source, "compiled")
        self.assertEqual(res[1].source, "memory")
        self.assertEqual(res[1].key, res[5].key)
        # Every reply matched one spec, by a distinct id.
        order = c.last_completion_order
        self.assertEqual(sorted(order), list(range(10)))
        self.assertEqual([i for i, _ in seen], order)
        self.assertEqual(len({rid for _, rid in seen}), 10)
        # The cold compile was sent first and answered after cached hits.
        self.assertNotEqual(order, list(range(10)))
        self.assertGreater(order.index(0), order.index(1))
        self.assertGreater(order.index(0), order.index(3))

    def test_raw_replies_come_in_completion_order(self):
        c = self.client()
        hit = {"op": "get", "kernel": "gemm", "backend": "cpu",
               "dtype": "f32", "shape": {"M": 1, "N": 4, "K": 4},
               "return": "meta"}
        c.request(hit)
        cold = dict(hit, dtype="bf16", shape={"N": 7, "K": 13},
                    dynamic=["M"])
        ids = [c.send(cold), c.send(hit), c.send({"op": "ping"})]
        self.assertEqual(len(set(ids)), 3)
        replies = [c.recv() for _ in ids]
        got = [r.header["id"] for r in replies]
        self.assertEqual(sorted(got), sorted(ids))
        self.assertNotEqual(got[0], ids[0])
        self.assertEqual(got[-1], ids[0])
        self.assertEqual(replies[-1].header["source"], "compiled")

    def test_request_keeps_replies_to_other_ids(self):
        c = self.client()
        slow = c.send({"op": "get", "kernel": "gemm", "backend": "cpu",
                       "dtype": "f16", "shape": {"N": 11, "K": 5},
                       "dynamic": ["M"], "return": "meta"})
        self.assertTrue(c.ping()["pong"])       # does not steal slow's reply
        r = c.recv()
        self.assertEqual(r.header["id"], slow)
        self.assertTrue(r.header["ok"])

    def test_a_get_of_a_ready_deployment_that_compiles_is_late(self):
        c = self.client()
        spec = {"kernel": "gemm", "dtype": "f32",
                "shape": {"M": 1, "N": 4, "K": 40}}
        c.request({"op": "deploy", "name": "pyd",
                   "items": [kspec.get_request(spec, with_return=False)]})
        c.warm([spec])
        self.assertTrue(c.request({"op": "ready",
                                   "deployment": "pyd"})["ready"])
        before = c.stats()["late_compiles"]
        c.get("gemm", dtype="f32", shape={"M": 1, "N": 4, "K": 40},
              deployment="pyd")                 # a hit: not late
        c.get("gemm", dtype="f32", shape={"M": 1, "N": 8, "K": 40},
              deployment="pyd")                 # a miss: late
        c.get_many([{"kernel": "gemm", "dtype": "f32", "deployment": "pyd",
                     "shape": {"M": 1, "N": 12, "K": 40}}])
        self.assertEqual(c.stats()["late_compiles"], before + 2)
        with self.assertRaises(KspecError) as cm:
            c.get("gemm", dtype="f32", shape={"M": 1, "N": 4, "K": 40},
                  deployment="no such")
        self.assertEqual(cm.exception.code, "E_BAD_REQUEST")
        c.request({"op": "undeploy", "name": "pyd"})

    def test_get_many_raises_the_first_error_in_spec_order(self):
        c = self.client()
        specs = [{"kernel": "gemm", "dtype": "f32",
                  "shape": {"M": 1, "N": 4, "K": 4}},
                 {"kernel": "gemm", "dtype": "f32",
                  "shape": {"M": 0, "N": 4, "K": 4}},
                 {"kernel": "nope", "dtype": "f32",
                  "shape": {"M": 1}}]
        with self.assertRaises(KspecError) as cm:
            c.get_many(specs)
        self.assertEqual(cm.exception.code, "E_BAD_SHAPE")
        self.assertTrue(c.ping()["ok"])          # still in step
        res = c.get_many(specs, return_exceptions=True)
        self.assertEqual([getattr(r, "code", "ok") for r in res],
                         ["ok", "E_BAD_SHAPE", "E_UNKNOWN_KERNEL"])

    def test_get_many_more_than_the_window(self):
        c = self.client()
        specs = [{"kernel": "gemm", "dtype": ("f32", "f16")[i % 2],
                  "shape": {"M": 1, "N": 4 + i % 5, "K": 8},
                  "meta_only": True} for i in range(150)]
        for window in (1, 7, 128):
            with self.subTest(window=window):
                res = c.get_many(specs, window=window)
                for s, r in zip(specs, res):
                    self.assertEqual(r.guard, s["shape"])
                    self.assertEqual(r.dtype, s["dtype"])
        self.assertEqual(c.get_many([]), [])


class ErrorTest(DaemonTestCase):
    """Bad input through the client gives the daemon's code and message."""

    def raw_error(self, msg):
        """The daemon's error for MSG on a raw connection of our own."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(self.sock)
            h = json.dumps(msg).encode()
            s.sendall(struct.pack(">II", len(h), 0) + h)
            hl, pl = struct.unpack(">II", daemon_harness.recv_exact(s, 8))
            return json.loads(daemon_harness.recv_exact(s, hl))["error"]

    def check(self, code, call, raw, contains):
        with self.assertRaises(KspecError) as cm:
            call()
        e = cm.exception
        self.assertEqual(e.code, code)
        self.assertIn(contains, e.message)
        self.assertEqual({"code": e.code, "message": e.message},
                         self.raw_error(raw))
        self.assertEqual(e.reply["ok"], False)

    def test_unknown_kernel(self):
        c = self.client()
        self.check("E_UNKNOWN_KERNEL",
                   lambda: c.get("gemmm", dtype="f32", shape={"M": 1}),
                   {"op": "get", "kernel": "gemmm", "backend": "cpu",
                    "dtype": "f32", "shape": {"M": 1}}, "gemmm")
        self.assertTrue(c.ping()["ok"])

    def test_bad_shape(self):
        c = self.client()
        self.check("E_BAD_SHAPE",
                   lambda: c.get("gemm", dtype="f32",
                                 shape={"M": 0, "N": 4, "K": 4}),
                   {"op": "get", "kernel": "gemm", "backend": "cpu",
                    "dtype": "f32", "shape": {"M": 0, "N": 4, "K": 4}},
                   "M must be >= 1 (got 0)")
        with self.assertRaises(KspecError) as cm:
            c.get("gemm", dtype="f32", shape={"M": 1, "N": 4})
        self.assertEqual(cm.exception.code, "E_BAD_SHAPE")
        self.assertIn("K", cm.exception.message)
        self.assertTrue(c.ping()["ok"])

    def test_bad_dtype(self):
        c = self.client()
        self.check("E_BAD_DTYPE",
                   lambda: c.get("gemm", dtype="f64",
                                 shape={"M": 1, "N": 4, "K": 4}),
                   {"op": "get", "kernel": "gemm", "backend": "cpu",
                    "dtype": "f64", "shape": {"M": 1, "N": 4, "K": 4}},
                   "f64")

    def test_bad_backend_and_mode(self):
        c = self.client()
        with self.assertRaises(KspecError) as cm:
            c.get("gemm", backend="tpu", dtype="f32",
                  shape={"M": 1, "N": 4, "K": 4})
        self.assertEqual(cm.exception.code, "E_BAD_BACKEND")
        with self.assertRaises(KspecError) as cm:
            c.get("gemm", dtype="f32", mode="turbo",
                  shape={"M": 1, "N": 4, "K": 4})
        self.assertEqual(cm.exception.code, "E_BAD_MODE")

    def test_unknown_field_through_a_raw_request(self):
        c = self.client()
        raw = {"op": "get", "kernel": "gemm", "backend": "cpu",
               "dtype": "f32", "shape": {"M": 1, "N": 4, "K": 4},
               "shpae": {"M": 2}}
        self.check("E_UNKNOWN_FIELD", lambda: c.request(raw), raw, "shpae")
        # A typo in a get_many spec reaches the daemon the same way.
        res = c.get_many([{"kernel": "gemm", "dtype": "f32",
                           "shape": {"M": 1, "N": 4, "K": 4},
                           "Kernel": "gemm"}], return_exceptions=True)
        self.assertEqual(res[0].code, "E_UNKNOWN_FIELD")
        self.assertIn("Kernel", res[0].message)
        self.check("E_UNKNOWN_OP", lambda: c.request({"op": "frobnicate"}),
                   {"op": "frobnicate"}, "frobnicate")
        self.assertTrue(c.ping()["ok"])

    def test_missing_dtype_is_the_daemons_E_BAD_REQUEST(self):
        c = self.client()
        with self.assertRaises(KspecError) as cm:
            c.get("gemm", shape={"M": 1, "N": 4, "K": 4})
        self.assertEqual(cm.exception.code, "E_BAD_REQUEST")
        self.assertIn("dtype", cm.exception.message)

    def test_oversized_request_is_refused_before_sending(self):
        c = self.client()
        with self.assertRaises(KspecError) as cm:
            c.request({"op": "ping", "pad": "x" * 70000})
        self.assertEqual(cm.exception.code, "E_TOO_LARGE")
        self.assertTrue(c.ping()["ok"])

    def test_unparseable_frame_closes_the_connection(self):
        c = self.client()
        c.send_frame(b"{not json")
        r = c.recv()
        self.assertEqual(r.header["error"]["code"], "E_BAD_JSON")
        self.assertNotIn("id", r.header)
        with self.assertRaises(KspecError) as cm:
            c.recv()
        self.assertEqual(cm.exception.code, "E_CONNECT")
        self.assertIn("lost connection", cm.exception.message)
        self.assertTrue(c.closed)

    def test_local_spec_errors(self):
        c = self.client()
        self.assertRaises(TypeError, c.get_many, [["gemm"]])
        self.assertRaises(ValueError, c.get_many, [{"op": "get"}])
        # A shape given as a tuple is named, with the form it takes.
        with self.assertRaises(TypeError) as cm:
            c.get("gemm", dtype="f32", shape=(1, 8, 8))
        self.assertIn("shape is a mapping of dim names to values",
                      str(cm.exception))
        self.assertIn("not tuple (1, 8, 8)", str(cm.exception))
        self.assertTrue(c.ping()["ok"])


class NewOpsTest(DaemonTestCase):
    """kernels, list, evict, explain, warm, misses (docs/protocol.md)."""

    def need(self, c, op):
        if not c.supports(op):
            self.skipTest("daemon has no '%s' op yet" % op)

    SPEC = {"kernel": "gemm", "backend": "cpu", "dtype": "f32",
            "shape": {"M": 1, "N": 12, "K": 20}}

    def spec(self, N):
        return dict(self.SPEC, shape={"M": 1, "N": N, "K": 20})

    def test_supports(self):
        c = self.client()
        self.assertTrue(c.supports("get"))
        self.assertTrue(c.supports("ping"))
        self.assertFalse(c.supports("frobnicate"))
        self.assertTrue(c.ping()["ok"])

    def test_kernels(self):
        c = self.client()
        self.need(c, "kernels")
        r = c.kernels()
        gemm = [k for k in r["kernels"] if k["name"] == "gemm"]
        self.assertEqual(len(gemm), 1)
        self.assertEqual(gemm[0]["dims"], ["M", "N", "K"])
        self.assertTrue({"f32", "f16", "bf16"} <= set(gemm[0]["dtypes"]))
        names = [v["name"] for v in gemm[0]["variants"]]
        self.assertIn("general", names)
        self.assertIn("gemv_m1", names)

    def test_list(self):
        c = self.client()
        self.need(c, "list")
        arts = c.get_many([self.spec(n) for n in (40, 44, 48)])
        keys = {a.key for a in arts}
        r = c.list()
        self.assertTrue(keys <= {e["key"] for e in r["entries"]})
        self.assertGreaterEqual(r["total"], 3)
        r = c.list(kernel="gemm", backend="cpu", limit=1)
        self.assertEqual(len(r["entries"]), 1)
        self.assertEqual(r["limit"], 1)
        r = c.list(backend="opencl")
        self.assertFalse(keys & {e["key"] for e in r["entries"]})
        walked = list(c.entries(kernel="gemm", page=1))
        self.assertTrue(keys <= {e["key"] for e in walked})
        self.assertEqual(len(walked), len({e["key"] for e in walked}))

    def test_evict(self):
        c = self.client()
        self.need(c, "evict")
        spec = self.spec(16)
        art = c.get(**spec)
        self.assertEqual(c.evict(key=art.key)["evicted"], 1)
        self.assertEqual(c.evict(key=art.key)["evicted"], 0)
        again = c.get(**spec)
        self.assertEqual(again.key, art.key)
        self.assertEqual(again.source, "compiled")
        with self.assertRaises(KspecError) as cm:
            c.evict()                           # says nothing to evict
        self.assertEqual(cm.exception.code, "E_BAD_REQUEST")
        # What this daemon just compiled is current, never stale.
        r = c.evict(stale=True, dry_run=True)
        self.assertIs(r["dry_run"], True)
        self.assertNotIn(art.key, {e["key"] for e in r["entries"]})
        self.assertEqual(r["evicted"], len(r["entries"]) + r["unlisted"])

    def test_explain(self):
        c = self.client()
        self.need(c, "explain")
        c.get(**self.spec(24))
        r = c.explain(self.spec(28))
        self.assertEqual(r["variant"], "gemv_m1")
        self.assertEqual(r["guard"], {"M": 1, "N": 28, "K": 20})
        self.assertIs(r["cached"], False)
        self.assertEqual(r["components"]["shape"]["N"], 28)
        self.assertEqual(r["nearest"]["differs"], ["N"])
        art = c.get(**self.spec(28))
        r = c.explain(**self.spec(28))
        self.assertEqual(r["key"], art.key)
        self.assertEqual(r["cached"], "memory")
        self.assertIsNone(r["nearest"])
        # The same spec with other weights: the weight dtype is named.
        r = c.explain(dict(self.spec(28), wdtype="bf16"))
        self.assertEqual(r["nearest"]["differs"], ["wdtype"])

    def test_warm(self):
        c = self.client()
        self.need(c, "warm")
        specs = [self.spec(32), self.spec(36),
                 dict(self.SPEC, shape={"M": 0, "N": 4, "K": 4})]
        r = c.warm(specs)
        self.assertEqual([it["index"] for it in r["items"]], [0, 1, 2])
        self.assertEqual([it["ok"] for it in r["items"]], [True, True, False])
        self.assertEqual(r["items"][2]["error"]["code"], "E_BAD_SHAPE")
        self.assertEqual(r["summary"]["failed"], 1)
        self.assertEqual(r["summary"]["total"], 3)
        # Again, one spec per request: everything cached, indexes merged.
        r = c.warm(specs[:2], batch=1)
        self.assertEqual([it["index"] for it in r["items"]], [0, 1])
        self.assertEqual(r["summary"]["cached"], 2)
        self.assertEqual(r["summary"]["total"], 2)
        res = c.get_many(specs[:2])
        self.assertTrue(all(a.source in ("memory", "disk") for a in res))

    def test_misses(self):
        c = self.client()
        self.need(c, "misses")
        spec = dict(self.SPEC, dtype="bf16", shape={"M": 1, "N": 52, "K": 8})
        c.get(**spec)
        c.get(**spec)
        found = [m for m in c.misses()["misses"]
                 if m["spec"]["shape"] == spec["shape"] and
                 m["spec"]["dtype"] == "bf16"]
        self.assertEqual(len(found), 1)
        self.assertEqual(found[0]["count"], 1)


if __name__ == "__main__":
    unittest.main()
