"""Tests of kspec.quantize and kspec.dequantize (client/python/kspec/quant.py)
against llama.cpp's golden vectors (tests/golden/quant, docs/kernels.md)
and against the C quantizer's bytes as `kspec quantize` writes them.

They load libkspec from the build ($KSPEC_BUILD/libkspec.so through
KSPEC_LIBKSPEC); no daemon.
"""

import array
import os
import random
import struct
import subprocess
import tempfile
import unittest

import daemon_harness               # puts client/python on sys.path
import kspec
from kspec import KspecError
from kspec import quant as kquant

try:
    import numpy
except ImportError:
    numpy = None

GOLDEN = os.path.join(daemon_harness.ROOT, "tests", "golden", "quant")
BLOCKS = {"q8_0": (32, 34), "q4_0": (32, 18), "q4_k": (256, 144)}


def setUpModule():
    os.environ["KSPEC_LIBKSPEC"] = os.path.join(daemon_harness.build_dir(),
                                                "libkspec.so")
    kquant._lib = None


def golden_files():
    """(name, format, rows, k, input bytes or None, blocks, decoded bytes)
    of every file INDEX lists (the format of bench/ggml/golden.c)."""
    with open(os.path.join(GOLDEN, "INDEX")) as f:
        names = [l.strip() for l in f if l.strip() and l[0] != "#"]
    out = []
    for name in names:
        with open(os.path.join(GOLDEN, name), "rb") as f:
            data = f.read()
        assert data[:8] == b"KSQGOLD1", name
        fmt = data[8:16].rstrip(b"\0").decode()
        rows, k, has_input, _ = struct.unpack_from("<4I", data, 16)
        n = rows * k * 4
        qlen = rows * k // BLOCKS[fmt][0] * BLOCKS[fmt][1]
        pos = 32
        x = data[pos:pos + n] if has_input else None
        pos += n if has_input else 0
        q = data[pos:pos + qlen]
        y = data[pos + qlen:pos + qlen + n]
        assert pos + qlen + n == len(data), name
        out.append((name, fmt, rows, k, x, q, y))
    return out


class GoldenVectors(unittest.TestCase):
    def test_quantize_gives_ggmls_bytes_on_every_golden_input(self):
        checked = 0
        for name, fmt, rows, k, x, q, _ in golden_files():
            if x is None:
                continue
            with self.subTest(name):
                self.assertEqual(kspec.quantize(fmt, x, k), q)
                self.assertEqual(kspec.quantize(fmt, array.array("f", x),
                                                k), q)
            checked += 1
        self.assertGreaterEqual(checked, 30)

    def test_dequantize_gives_ggmls_floats_bitwise(self):
        for name, fmt, rows, k, _, q, y in golden_files():
            with self.subTest(name):
                got = kspec.dequantize(fmt, q, k)
                self.assertEqual(len(got), rows * k)
                self.assertEqual(got.tobytes(), y)


class AgainstTheCQuantizer(unittest.TestCase):
    """The same rows through `kspec quantize` (the C library behind the
    CLI, one process) and kspec.quantize (ctypes)."""

    def test_random_matrices_give_the_clis_bytes(self):
        cli = os.path.join(daemon_harness.build_dir(), "kspec")
        if not os.access(cli, os.X_OK):
            self.fail("%s not found: build it (make)" % cli)
        rng = random.Random(30)
        with tempfile.TemporaryDirectory(prefix="kspec-quant-") as d:
            for fmt in kspec.QUANT_FORMATS:
                k = 512
                vals = [rng.gauss(0, 1) * (10 ** rng.randint(-4, 3))
                        for _ in range(7 * k)]
                w = array.array("f", vals)
                src, dst = os.path.join(d, "w.f32"), os.path.join(d, "w.q")
                with open(src, "wb") as f:
                    w.tofile(f)
                subprocess.run([cli, "quantize", fmt, "-k", str(k), "-o",
                                dst, src], check=True,
                               stdout=subprocess.DEVNULL)
                with open(dst, "rb") as f:
                    want = f.read()
                with self.subTest(fmt):
                    self.assertEqual(kspec.quantize(fmt, w, k), want)
                    self.assertEqual(len(want),
                                     kspec.quant_size(fmt, 7, k))


class Interface(unittest.TestCase):
    def test_sizes_of_each_format(self):
        for fmt, (elems, nbytes) in BLOCKS.items():
            self.assertEqual(kspec.quant_block(fmt), (elems, nbytes))
            self.assertEqual(kspec.quant_size(fmt, 3, 4096),
                             3 * 4096 // elems * nbytes)

    def test_buffers_of_every_kind_give_the_same_bytes(self):
        vals = [((i * 37) % 101 - 50) / 7.0 for i in range(2 * 256)]
        a = array.array("f", vals)
        want = kspec.quantize("q4_k", a, 256)
        self.assertEqual(len(want), 2 * 144)
        for w in (vals, a.tobytes(), bytearray(a.tobytes()),
                  memoryview(a), memoryview(a.tobytes())):
            self.assertEqual(kspec.quantize("q4_k", w, 256), want)
        if numpy is not None:
            self.assertEqual(kspec.quantize(
                "q4_k", numpy.array(vals, dtype=numpy.float32), 256), want)
        self.assertEqual(kspec.quantize("q4_k", array.array("f"), 256), b"")
        self.assertEqual(len(kspec.dequantize("q4_k", b"", 256)), 0)

    def test_a_matrix_on_the_pool_gives_each_rows_bytes(self):
        k, rows = 4096, 80              # 2^18 weights and more: threads
        rng = random.Random(5)
        a = array.array("f", (rng.uniform(-1, 1) for _ in range(rows * k)))
        whole = kspec.quantize("q4_0", a, k)
        rb = kspec.quant_size("q4_0", 1, k)
        for r in (0, 1, 39, 79):
            self.assertEqual(kspec.quantize("q4_0", a[r * k:(r + 1) * k], k),
                             whole[r * rb:(r + 1) * rb])

    def test_errors_carry_libkspecs_codes_and_messages(self):
        row = [0.25] * 256
        cases = [
            (("q6_k", row, 256), "E_BAD_DTYPE", "q6_k"),
            (("Q4_K", row, 256), "E_BAD_DTYPE", "lower case"),
            (("q4_k", row, 128), "E_BAD_SHAPE", "256"),
            (("q8_0", row[:48], 48), "E_BAD_SHAPE", "32"),
            (("q4_0", row[:100] + [float("nan")] + row[101:], 256),
             "E_INVAL", "row 0, element 100 is NaN"),
            (("q8_0", [1e7] + row[1:], 256), "E_INVAL", "f16"),
        ]
        for args, code, text in cases:
            with self.subTest(args[0], code=code):
                with self.assertRaises(KspecError) as cm:
                    kspec.quantize(*args)
                self.assertEqual(cm.exception.code, code)
                self.assertIn(text, cm.exception.message)
        with self.assertRaises(KspecError) as cm:
            kspec.dequantize("q4_1", b"\0" * 20, 32)
        self.assertEqual(cm.exception.code, "E_BAD_DTYPE")

    def test_bad_arguments_are_python_errors(self):
        with self.assertRaises(ValueError):
            kspec.quantize("q8_0", [0.0] * 48, 32)      # 1.5 rows
        with self.assertRaises(ValueError):
            kspec.quantize("q8_0", [0.0] * 32, 0)
        with self.assertRaises(TypeError):
            kspec.quantize("q8_0", array.array("d", [0.0] * 32), 32)
        with self.assertRaises(TypeError):
            kspec.quantize(8, [0.0] * 32, 32)
        with self.assertRaises(ValueError):
            kspec.dequantize("q8_0", b"\0" * 35, 32)    # not whole blocks
        with self.assertRaises(ValueError):
            kspec.quantize("q8_0", memoryview(bytes(256)).cast("f")[::2], 32)

    def test_a_missing_library_is_e_unsupported(self):
        saved = os.environ["KSPEC_LIBKSPEC"]
        os.environ["KSPEC_LIBKSPEC"] = "/nonexistent/libkspec.so"
        kquant._lib = None
        try:
            with self.assertRaises(KspecError) as cm:
                kspec.quantize("q8_0", [0.0] * 32, 32)
            self.assertEqual(cm.exception.code, "E_UNSUPPORTED")
            self.assertIn("KSPEC_LIBKSPEC", cm.exception.message)
        finally:
            os.environ["KSPEC_LIBKSPEC"] = saved
            kquant._lib = None


if __name__ == "__main__":
    unittest.main()
