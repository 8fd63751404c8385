"""Tests of the Python client's OpenCL and CUDA loaders
(client/python/kspec/loader_opencl.py, loader_cuda.py).

OpenCL runs on PoCL's CPU device (deploy/deps.sh installs it and Debian's
python3-pyopencl): each kernel's OpenCL artifact, run through the client,
must be bitwise equal to its cpu artifact on the same inputs.  CUDA has no
device here: its tests hold the error paths (no libcuda.so.1; the CUDA
toolkit's stub driver, whose cuInit fails), and the run on a device is
skipped, saying why, where there is none.
"""

import array
import ctypes
import glob
import os
import random
import sys
import types
import unittest
from unittest import mock

import daemon_harness               # puts client/python on sys.path
import kspec
from kspec import KspecError
from kspec import loader_cuda

try:
    import pyopencl
except ImportError:
    pyopencl = None

NEEDS_PYOPENCL = "pyopencl is not installed (deploy/deps.sh installs " \
    "python3-pyopencl)"


def call_args(art, dims, seed):
    """Arguments for ART in its params order: every f32 buffer filled with
    values from SEED, sized by its dims under DIMS; the i64 scalars from
    DIMS; f32 scalars 1e-5."""
    rnd = random.Random(seed)
    args = []
    for p in art.params:
        if p["kind"] == "scalar":
            args.append(dims[p["name"]] if p["dtype"] == "i64" else 1e-5)
            continue
        assert p["dtype"] == "f32", p
        n = 1
        for d in p["dims"]:
            n *= kspec.eval_expr(d, dims)
        args.append(array.array("f", [rnd.uniform(-2, 2) for _ in range(n)]))
    return args


def written(art, args):
    """The bytes of every buffer ART writes, in params order."""
    return [a.tobytes() for p, a in zip(art.params, args)
            if p["kind"] == "buffer" and p["access"] in ("write",
                                                         "readwrite")]


class OpenCLLoaderTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.daemon = daemon_harness.Daemon().start()
        cls.client = kspec.Client(cls.daemon.socket, timeout=300)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.daemon.cleanup()

    def pair(self, kernel, shape, dynamic=()):
        """The cpu and the OpenCL artifact of one spec."""
        return [self.client.get(kernel, backend=b, dtype="f32", shape=shape,
                                dynamic=list(dynamic))
                for b in ("cpu", "opencl")]

    def same_as_cpu(self, kernel, shape, dims, dynamic=(), seed=1):
        cpu, cl = self.pair(kernel, shape, dynamic)
        self.assertEqual((cl.backend, cl.format), ("opencl", "clbin"))
        on_cpu = call_args(cpu, dims, seed)
        on_cl = call_args(cl, dims, seed)
        kspec.load_cpu(cpu)(*on_cpu)
        k = cl.load()                          # kspec.load_opencl(cl)
        self.assertIsInstance(k, kspec.OpenCLKernel)
        k(*on_cl)
        self.assertTrue(written(cl, on_cl))
        self.assertEqual(written(cpu, on_cpu), written(cl, on_cl))
        return cl

    @unittest.skipIf(pyopencl is None, NEEDS_PYOPENCL)
    def test_gemv_on_opencl_is_bitwise_its_cpu_artifact(self):
        shape = {"M": 1, "N": 64, "K": 64}
        self.same_as_cpu("gemm", shape, shape)

    @unittest.skipIf(pyopencl is None, NEEDS_PYOPENCL)
    def test_gemm_with_a_dynamic_dim_is_bitwise_its_cpu_artifact(self):
        # M is a scalar argument and launch.groups an expression of it.
        cl = self.same_as_cpu("gemm", {"N": 32, "K": 64},
                              {"M": 5, "N": 32, "K": 64}, dynamic=["M"])
        self.assertIsInstance(cl.launch["groups"], str)

    @unittest.skipIf(pyopencl is None, NEEDS_PYOPENCL)
    def test_rmsnorm_on_opencl_is_bitwise_its_cpu_artifact(self):
        shape = {"R": 3, "H": 96}
        self.same_as_cpu("rmsnorm", shape, shape, seed=7)

    @unittest.skipIf(pyopencl is None, NEEDS_PYOPENCL)
    def test_a_swapped_argument_order_is_caught(self):
        # The planted bug: the loader passes x and W in each other's place
        # (same sizes, M == N), so the check above must see a difference.
        shape = {"M": 4, "N": 4, "K": 64}
        cpu, cl = self.pair("gemm", shape)
        on_cpu, on_cl = call_args(cpu, shape, 3), call_args(cl, shape, 3)
        kspec.load_cpu(cpu)(*on_cpu)
        k = kspec.load_opencl(cl)
        real = kspec.OpenCLKernel._launch

        def swapped(self, values, groups, held):
            values[0], values[1] = values[1], values[0]
            return real(self, values, groups, held)

        with mock.patch.object(kspec.OpenCLKernel, "_launch", swapped):
            k(*on_cl)
        self.assertNotEqual(written(cpu, on_cpu), written(cl, on_cl))
        k(*on_cl)                              # and unplanted, equal again
        self.assertEqual(written(cpu, on_cpu), written(cl, on_cl))

    @unittest.skipIf(pyopencl is None, NEEDS_PYOPENCL)
    def test_a_short_buffer_is_refused_before_the_launch(self):
        shape = {"M": 1, "N": 64, "K": 64}
        _, cl = self.pair("gemm", shape)
        k = kspec.load_opencl(cl)
        x, W, y = call_args(cl, shape, 1)
        short = array.array("f", [7.0] * 63)
        with mock.patch.object(kspec.OpenCLKernel, "_launch") as launch:
            with self.assertRaises(ValueError) as e:
                k(x, W, short)
            with self.assertRaises(ValueError):
                k(x, W[:-1], y)                # the weights one float short
        launch.assert_not_called()
        self.assertEqual(str(e.exception), "buffer y has 252 bytes; "
                         "ks_gemm_gemv_m1 needs 256 (1x64 of f32)")
        self.assertEqual(short.tolist(), [7.0] * 63)
        with self.assertRaises(TypeError):
            k(x, W)                            # one argument missing

    @unittest.skipIf(pyopencl is None, NEEDS_PYOPENCL)
    def test_device_buffers_are_checked_and_passed_as_they_are(self):
        shape = {"M": 1, "N": 64, "K": 64}
        cpu, cl = self.pair("gemm", shape)
        k = kspec.load_opencl(cl)
        x, W, y = call_args(cl, shape, 5)
        mf = pyopencl.mem_flags
        dx = pyopencl.Buffer(k.context, mf.READ_ONLY | mf.COPY_HOST_PTR,
                             hostbuf=x)
        dW = pyopencl.Buffer(k.context, mf.READ_ONLY | mf.COPY_HOST_PTR,
                             hostbuf=W)
        dy = pyopencl.Buffer(k.context, mf.WRITE_ONLY, 256)
        with self.assertRaises(ValueError) as e:
            k(dx, dW, pyopencl.Buffer(k.context, mf.WRITE_ONLY, 252))
        self.assertIn("buffer y has 252 bytes", str(e.exception))
        k(dx, dW, dy, wait=False)
        pyopencl.enqueue_copy(k.queue, y, dy)
        k.queue.finish()
        ref = call_args(cpu, shape, 5)
        kspec.load_cpu(cpu)(*ref)
        self.assertEqual(y.tobytes(), ref[2].tobytes())

    def test_a_cpu_artifact_is_refused(self):
        cpu, _ = self.pair("gemm", {"M": 1, "N": 64, "K": 64})
        with self.assertRaises(ValueError) as e:
            kspec.load_opencl(cpu)
        self.assertIn("needs an OpenCL binary, not cpu/so",
                      str(e.exception))

    def test_without_pyopencl_the_error_names_the_package(self):
        _, cl = self.pair("gemm", {"M": 1, "N": 64, "K": 64})
        with mock.patch.dict(sys.modules, {"pyopencl": None}):
            with self.assertRaises(KspecError) as e:
                kspec.load_opencl(cl)
        self.assertEqual(e.exception.code, "E_BACKEND_UNAVAILABLE")
        self.assertIn("python3-pyopencl", e.exception.message)


def fake_cuda_artifact(fmt="ptx"):
    """The meta of a 1 x 64 x 64 gemv's CUDA reply, with bytes that only a
    driver would read; enough for the paths that fail before it does."""
    return types.SimpleNamespace(
        bytes=b".version 8.0\n", backend="cuda", format=fmt,
        entry="ks_gemm_gemv_m1", kernel="gemm", guard={"M": 1, "N": 64,
                                                       "K": 64},
        dynamic=[], launch={"groups": 8, "lanes": 32},
        params=[{"name": "x", "kind": "buffer", "dtype": "f32",
                 "access": "read", "dims": ["M", "K"]},
                {"name": "W", "kind": "buffer", "dtype": "f32",
                 "access": "read", "dims": ["N", "K"]},
                {"name": "y", "kind": "buffer", "dtype": "f32",
                 "access": "write", "dims": ["M", "N"]}])


def stub_driver():
    for pattern in ("/usr/local/cuda*/lib64/stubs/libcuda.so",
                    "/usr/lib/x86_64-linux-gnu/stubs/libcuda.so"):
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def cuda_device_reason():
    """None where libcuda.so.1 loads and sees a device, else why not."""
    try:
        lib = ctypes.CDLL(loader_cuda.LIBCUDA)
    except OSError as e:
        return "no CUDA driver: %s" % e
    r = lib.cuInit(0)
    if r != 0:
        return "cuInit failed: CUresult %d" % r
    n = ctypes.c_int()
    if lib.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value < 1:
        return "no CUDA device"
    return None


def cuda_target():
    """KSPEC_CUDA_TARGET, else device 0's sm_XY (its compute capability:
    attributes 75 and 76 of the driver API)."""
    if os.environ.get("KSPEC_CUDA_TARGET"):
        return os.environ["KSPEC_CUDA_TARGET"]
    lib = ctypes.CDLL(loader_cuda.LIBCUDA)
    dev, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    if (lib.cuDeviceGet(ctypes.byref(dev), 0) != 0 or
            lib.cuDeviceGetAttribute(ctypes.byref(major), 75, dev) != 0 or
            lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev) != 0):
        return "sm_80"
    return "sm_%d%d" % (major.value, minor.value)


class CudaLoaderTest(unittest.TestCase):

    def setUp(self):
        env = mock.patch.dict(os.environ)
        env.start()
        self.addCleanup(env.stop)
        os.environ.pop("KSPEC_LIBCUDA", None)

    def test_a_missing_driver_library_is_a_clear_error(self):
        os.environ["KSPEC_LIBCUDA"] = "/nonexistent/libcuda.so.1"
        with self.assertRaises(KspecError) as e:
            kspec.load_cuda(fake_cuda_artifact())
        self.assertEqual(e.exception.code, "E_BACKEND_UNAVAILABLE")
        self.assertIn("needs NVIDIA's driver library "
                      "/nonexistent/libcuda.so.1, which does not load",
                      e.exception.message)

    def test_the_stub_driver_fails_cuinit_with_its_reason(self):
        stub = stub_driver()
        if stub is None:
            self.skipTest("no CUDA stub driver (lib64/stubs/libcuda.so)")
        os.environ["KSPEC_LIBCUDA"] = stub
        with self.assertRaises(KspecError) as e:
            kspec.load_cuda(fake_cuda_artifact("cubin"))
        self.assertEqual(e.exception.code, "E_BACKEND_UNAVAILABLE")
        self.assertEqual(e.exception.message, "cuInit failed in %s: "
                         "CUDA_ERROR_STUB_LIBRARY (34)" % stub)

    def test_an_artifact_of_another_backend_is_refused_first(self):
        art = fake_cuda_artifact()
        art.backend, art.format = "opencl", "clbin"
        with self.assertRaises(ValueError) as e:
            kspec.load_cuda(art)
        self.assertIn("needs a CUDA cubin or PTX, not opencl/clbin",
                      str(e.exception))

    def test_gemv_on_a_cuda_device_is_bitwise_its_cpu_artifact(self):
        reason = cuda_device_reason()
        if reason is not None:
            self.skipTest(reason)
        # KSPEC_GPU_DAEMON: the socket of a running kspecd to ask (as
        # bench/gpu/run.sh does), else one started here.
        sock = os.environ.get("KSPEC_GPU_DAEMON")
        daemon = None if sock else daemon_harness.Daemon().start()
        try:
            with kspec.Client(sock or daemon.socket, timeout=300) as c:
                shape = {"M": 1, "N": 64, "K": 64}
                cpu = c.get("gemm", dtype="f32", shape=shape)
                cu = c.get("gemm", backend="cuda", dtype="f32", shape=shape,
                           format="ptx", target=cuda_target())
                on_cpu, on_cu = call_args(cpu, shape, 1), \
                    call_args(cu, shape, 1)
                kspec.load_cpu(cpu)(*on_cpu)
                k = kspec.load_cuda(cu)
                with self.assertRaises(ValueError):
                    k(on_cu[0], on_cu[1], array.array("f", [0.0] * 63))
                k(*on_cu)
                self.assertEqual(written(cpu, on_cpu), written(cu, on_cu))
        finally:
            if daemon:
                daemon.cleanup()


if __name__ == "__main__":
    unittest.main()
