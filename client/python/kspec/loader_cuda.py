"""Runs CUDA artifacts (format ``cubin`` or ``ptx``) through the driver API.

The driver (``libcuda.so.1``, installed with NVIDIA's driver; no Python
package) is loaded with ctypes on first use: ``$KSPEC_LIBCUDA`` (a path)
when set, else ``libcuda.so.1`` through the dynamic loader.  Without it, or
when ``cuInit`` fails (a stub driver, no GPU, a driver older than the
artifact), loading raises ``KspecError`` with code
``E_BACKEND_UNAVAILABLE`` and the driver's reason.

The module is loaded with ``cuModuleLoadData`` (PTX text gets the NUL the
driver needs appended) into the device's primary context, its function is
the reply's ``entry``, and it is launched on ``launch.groups`` blocks of
``launch.lanes`` threads (docs/backends.md).  Buffers are checked as the
cpu loader checks them (kspec.loader.KernelSignature) before anything is
allocated; each is copied to the device, and those the kernel writes are
copied back once it has run.
"""

import ctypes
import os
import threading

from .errors import KspecError
from .loader import KernelSignature

__all__ = ["load_cuda", "CudaKernel", "CudaError", "LIBCUDA"]

LIBCUDA = "libcuda.so.1"

# CUresult names the driver may not give itself: a stub's cuGetErrorName
# fails with the stub's own code.
_RESULT_NAMES = {
    1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
    3: "CUDA_ERROR_NOT_INITIALIZED", 4: "CUDA_ERROR_DEINITIALIZED",
    34: "CUDA_ERROR_STUB_LIBRARY", 35: "CUDA_ERROR_INSUFFICIENT_DRIVER",
    100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
    200: "CUDA_ERROR_INVALID_IMAGE", 209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
    218: "CUDA_ERROR_INVALID_PTX", 222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
    500: "CUDA_ERROR_NOT_FOUND", 701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
    719: "CUDA_ERROR_LAUNCH_FAILED", 999: "CUDA_ERROR_UNKNOWN",
}

# The most blocks of a 1-D grid (CUDA's gridDim.x).
MAX_GRID = 0x7fffffff


class CudaError(RuntimeError):
    """A driver call that failed after the driver was up (an allocation,
    a copy, a launch).  ``result`` is the CUresult, ``name`` its name."""

    def __init__(self, call, result, name, text):
        super().__init__("%s: %s (%d)%s" % (call, name, result,
                                            ": " + text if text else ""))
        self.call, self.result, self.name = call, result, name


class _Driver:
    """libcuda, initialized, with device 0's primary context retained."""

    def __init__(self, path, ordinal):
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise KspecError("E_BACKEND_UNAVAILABLE",
                             "running CUDA artifacts needs NVIDIA's driver "
                             "library %s, which does not load: %s"
                             % (path, e)) from None
        self.lib = lib
        self.path = path
        for name, alt in (("cuMemAlloc", "cuMemAlloc_v2"),
                          ("cuMemFree", "cuMemFree_v2"),
                          ("cuMemcpyHtoD", "cuMemcpyHtoD_v2"),
                          ("cuMemcpyDtoH", "cuMemcpyDtoH_v2")):
            setattr(self, name, getattr(lib, alt, None) or
                    getattr(lib, name))
        self.cuMemAlloc.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                                    ctypes.c_size_t]
        self.cuMemFree.argtypes = [ctypes.c_uint64]
        self.cuMemcpyHtoD.argtypes = [ctypes.c_uint64, ctypes.c_void_p,
                                      ctypes.c_size_t]
        self.cuMemcpyDtoH.argtypes = [ctypes.c_void_p, ctypes.c_uint64,
                                      ctypes.c_size_t]
        u, vp = ctypes.c_uint, ctypes.c_void_p
        lib.cuLaunchKernel.argtypes = [vp, u, u, u, u, u, u, u, vp, vp, vp]
        lib.cuModuleLoadData.argtypes = [ctypes.POINTER(vp), ctypes.c_char_p]
        lib.cuModuleGetFunction.argtypes = [ctypes.POINTER(vp), vp,
                                            ctypes.c_char_p]
        self.unavailable("cuInit", lib.cuInit(0))
        count = ctypes.c_int()
        self.unavailable("cuDeviceGetCount",
                         lib.cuDeviceGetCount(ctypes.byref(count)))
        if not 0 <= ordinal < count.value:
            raise KspecError("E_BACKEND_UNAVAILABLE",
                             "no CUDA device %d (the driver %s sees %d)"
                             % (ordinal, path, count.value))
        dev = ctypes.c_int()
        self.unavailable("cuDeviceGet",
                         lib.cuDeviceGet(ctypes.byref(dev), ordinal))
        ctx = ctypes.c_void_p()
        self.unavailable("cuDevicePrimaryCtxRetain",
                         lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx),
                                                      dev))
        self.device, self.ctx = dev, ctx

    def describe(self, result):
        name = _RESULT_NAMES.get(result, "CUresult %d" % result)
        text = ""
        s = ctypes.c_char_p()
        try:
            if self.lib.cuGetErrorName(result, ctypes.byref(s)) == 0 and \
                    s.value:
                name = s.value.decode("ascii", "replace")
            if self.lib.cuGetErrorString(result, ctypes.byref(s)) == 0 and \
                    s.value:
                text = s.value.decode("ascii", "replace")
        except AttributeError:
            pass
        return name, text

    def unavailable(self, call, result):
        """Raises E_BACKEND_UNAVAILABLE for a failed setup call."""
        if result != 0:
            name, text = self.describe(result)
            raise KspecError("E_BACKEND_UNAVAILABLE",
                             "%s failed in %s: %s (%d)%s" % (
                                 call, self.path, name, result,
                                 ": " + text if text else ""))

    def check(self, call, result):
        if result != 0:
            name, text = self.describe(result)
            raise CudaError(call, result, name, text)

    def enter(self):
        """Makes the primary context current on this thread."""
        self.check("cuCtxSetCurrent", self.lib.cuCtxSetCurrent(self.ctx))


_drivers = {}
_drivers_lock = threading.Lock()


def _driver(ordinal):
    path = os.environ.get("KSPEC_LIBCUDA") or LIBCUDA
    with _drivers_lock:
        d = _drivers.get((path, ordinal))
        if d is None:
            d = _drivers[(path, ordinal)] = _Driver(path, ordinal)
        return d


class CudaKernel(KernelSignature):
    """A CUDA artifact loaded into a device's primary context, callable
    with ``params``.

    ``kernel(*args)`` passes ARGS in the order of ``params``: buffers as
    bytes-like host objects, scalars as Python integers (dynamic dims) or
    floats.  Every buffer is checked first (ValueError naming it, with the
    bytes needed and given) and nothing is allocated when one fails; then
    each is copied to the device, the whole grid runs, and the buffers the
    kernel writes are copied back before the call returns.
    """

    def __init__(self, artifact, device=0):
        if artifact.backend not in (None, "cuda") or \
                artifact.format not in (None, "cubin", "ptx"):
            raise ValueError("load_cuda needs a CUDA cubin or PTX, not %s/%s"
                             % (artifact.backend, artifact.format))
        KernelSignature.__init__(self, artifact)
        lanes = self.launch.get("lanes")
        if not isinstance(lanes, int) or lanes < 1:
            raise ValueError("the reply gives no launch.lanes for %s"
                             % self.entry)
        self.lanes = lanes
        self._drv = _driver(device)
        image = bytes(artifact.bytes)
        if artifact.format == "ptx" and not image.endswith(b"\0"):
            image += b"\0"
        drv = self._drv
        drv.enter()
        mod = ctypes.c_void_p()
        r = drv.lib.cuModuleLoadData(ctypes.byref(mod), image)
        if r != 0:
            name, text = drv.describe(r)
            raise ValueError("CUDA %s of %s does not load on device %d: %s%s"
                             % (artifact.format, self.entry, device, name,
                                ": " + text if text else ""))
        fn = ctypes.c_void_p()
        r = drv.lib.cuModuleGetFunction(ctypes.byref(fn), mod,
                                        self.entry.encode())
        if r != 0:
            drv.lib.cuModuleUnload(mod)
            raise ValueError("CUDA module does not export %r" % self.entry)
        self._module, self._fn = mod, fn

    @property
    def closed(self):
        return self._fn is None

    def close(self):
        """Unloads the module; calling the kernel afterwards raises."""
        if self._fn is None:
            return
        self._fn = None
        self._drv.enter()
        self._drv.lib.cuModuleUnload(self._module)
        self._module = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __call__(self, *args):
        if self._fn is None:
            raise ValueError("kernel %s is closed" % self.entry)
        values, dims = self._bind(args)
        groups = self.num_groups(dims)
        if groups is None:
            raise ValueError("the reply gives no launch.groups for %s"
                             % self.entry)
        if groups > MAX_GRID:
            raise ValueError("%s: %d blocks, past CUDA's 1-D grid of %d"
                             % (self.entry, groups, MAX_GRID))
        held = []
        try:
            for i, (p, a) in enumerate(zip(self.params, args)):
                if p.get("kind") == "buffer":
                    values[i] = self._hold(i, p, a, dims, held)
            self._launch(values, groups, held)
        finally:
            self._release(held)

    def _launch(self, values, groups, held):
        drv = self._drv
        drv.enter()
        device = {}
        try:
            for i, _ in held:
                view, need = values[i]
                ptr = ctypes.c_uint64()
                drv.check("cuMemAlloc",
                          drv.cuMemAlloc(ctypes.byref(ptr), max(need, 1)))
                device[i] = (ptr, view, need)
                if need:
                    drv.check("cuMemcpyHtoD",
                              drv.cuMemcpyHtoD(ptr, view.buf, need))
                values[i] = ptr
            argv = (ctypes.c_void_p * max(len(values), 1))(
                *[ctypes.addressof(v) for v in values])
            if groups > 0:
                drv.check("cuLaunchKernel", drv.lib.cuLaunchKernel(
                    self._fn, groups, 1, 1, self.lanes, 1, 1, 0, None, argv,
                    None))
                drv.check("cuCtxSynchronize", drv.lib.cuCtxSynchronize())
            for i, (ptr, view, need) in device.items():
                if self.params[i].get("access") in ("write", "readwrite") \
                        and need:
                    drv.check("cuMemcpyDtoH",
                              drv.cuMemcpyDtoH(view.buf, ptr, need))
        finally:
            for ptr, _, _ in device.values():
                drv.cuMemFree(ptr)


def load_cuda(artifact, device=0):
    """Loads a CUDA ``Artifact`` (format ``cubin`` or ``ptx``) into the
    primary context of DEVICE (an ordinal) and returns a callable
    ``CudaKernel``."""
    return CudaKernel(artifact, device)
