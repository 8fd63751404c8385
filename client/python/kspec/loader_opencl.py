"""Runs OpenCL artifacts (format ``clbin``) through pyopencl.

An OpenCL artifact is the program binary of one device (docs/backends.md):
it is loaded with ``clCreateProgramWithBinary`` and built on that device,
its kernel is the reply's ``entry``, its arguments are set in the order of
the reply's ``params``, and it is launched 1-D with a global size of
``launch.groups * launch.lanes`` and a local size of ``launch.lanes``.

pyopencl (Debian's ``python3-pyopencl``) is imported on first use only; the
rest of the client never needs it.  Without it, or without the device the
artifact was built for, loading raises ``KspecError`` with code
``E_BACKEND_UNAVAILABLE`` and the reason.

Buffers are checked before anything is enqueued, exactly as the cpu
loader checks them (kspec.loader.KernelSignature): a host buffer is copied
to the device, and after the kernel, the buffers it writes are copied back;
a ``pyopencl.Buffer`` already on the device is passed as is, its size
checked the same way.
"""

import ctypes

from .errors import KspecError
from .loader import KernelSignature

__all__ = ["load_opencl", "OpenCLKernel", "opencl_device"]

PACKAGE = "python3-pyopencl"

# CL_PLATFORM_ICD_SUFFIX_KHR (cl_khr_icd): pyopencl does not know it, so it
# is read through the ICD loader itself.
_CL_PLATFORM_ICD_SUFFIX_KHR = 0x0920


def _cl():
    try:
        import pyopencl
    except ImportError as e:
        raise KspecError("E_BACKEND_UNAVAILABLE",
                         "running OpenCL artifacts needs pyopencl: install "
                         "Debian's %s (apt-get install %s) for /usr/bin/"
                         "python3 (%s)" % (PACKAGE, PACKAGE, e)) from None
    return pyopencl


def _icd_suffix(platform):
    """The platform's ICD suffix in lower case, or None."""
    try:
        lib = ctypes.CDLL("libOpenCL.so.1")
        fn = lib.clGetPlatformInfo
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_size_t,
                       ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        fn.restype = ctypes.c_int
        buf = ctypes.create_string_buffer(256)
        size = ctypes.c_size_t()
        if fn(platform.int_ptr, _CL_PLATFORM_ICD_SUFFIX_KHR, len(buf), buf,
              ctypes.byref(size)) != 0 or not buf.value:
            return None
        return buf.value.decode("ascii", "replace").lower()
    except (OSError, AttributeError):
        return None


def _type_name(cl, device):
    t = device.type
    if t & cl.device_type.GPU:
        return "gpu"
    if t & cl.device_type.CPU:
        return "cpu"
    if t & cl.device_type.ACCELERATOR:
        return "acc"
    return "dev"


def opencl_device(target):
    """The pyopencl Device that TARGET names, as the daemon names devices
    (docs/backends.md): ``<platform>:<type>-<n>`` (``pocl:cpu-0``), where
    ``<platform>`` is the ICD suffix in lower case or ``p<i>``; or
    ``<platform index>:<device index>``.  KspecError E_BACKEND_UNAVAILABLE
    when no device has that name."""
    cl = _cl()
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:
        raise KspecError("E_BACKEND_UNAVAILABLE",
                         "no OpenCL platform: %s" % e) from None
    plat, _, dev = (target or "").partition(":")
    seen = set()
    for i, p in enumerate(platforms):
        suffix = _icd_suffix(p)
        name = suffix if suffix and suffix not in seen else "p%d" % i
        seen.add(name)
        try:
            devices = p.get_devices()
        except cl.Error:
            devices = []
        if plat == str(i) and dev.isdigit() and int(dev) < len(devices):
            return devices[int(dev)]
        if plat != name:
            continue
        counts = {}
        for d in devices:
            t = _type_name(cl, d)
            if "%s-%d" % (t, counts.get(t, 0)) == dev:
                return d
            counts[t] = counts.get(t, 0) + 1
    raise KspecError("E_BACKEND_UNAVAILABLE",
                     "no OpenCL device %r here (the artifact's target); "
                     "pass queue= for another device of the same kind"
                     % target)


class OpenCLKernel(KernelSignature):
    """An OpenCL artifact built on its device, callable with ``params``.

    ``kernel(*args, wait=True)`` passes ARGS in the order of ``params``:
    buffers as bytes-like host objects (copied in, and back when the kernel
    writes them) or ``pyopencl.Buffer`` objects on the kernel's context;
    scalars as Python integers (dynamic dims) or floats.  Every buffer is
    checked first (ValueError ``buffer y has 252 bytes; ks_gemm_gemv_m1
    needs 256 (1x64 of f32)``); nothing is enqueued when one fails.  Runs
    the whole launch grid.  With host buffers the call returns when the
    results are in them; ``wait=False`` (device buffers only) returns once
    the launch is enqueued.
    """

    def __init__(self, artifact, queue=None):
        if artifact.backend not in (None, "opencl") or \
                artifact.format not in (None, "clbin"):
            raise ValueError("load_opencl needs an OpenCL binary, not %s/%s"
                             % (artifact.backend, artifact.format))
        KernelSignature.__init__(self, artifact)
        cl = self._cl = _cl()
        if queue is None:
            device = opencl_device(artifact.target)
            queue = cl.CommandQueue(cl.Context([device]), device)
        self.queue = queue
        self.context = queue.context
        self.device = queue.device
        try:
            self.program = cl.Program(self.context, [self.device],
                                      [bytes(artifact.bytes)]).build()
            self._kernel = getattr(self.program, self.entry)
        except (cl.Error, AttributeError) as e:
            raise ValueError("OpenCL binary of %s does not load on %s: %s"
                             % (self.entry, self.device.name, e)) from None
        lanes = self.launch.get("lanes")
        if not isinstance(lanes, int) or lanes < 1:
            raise ValueError("the reply gives no launch.lanes for %s"
                             % self.entry)
        self.lanes = lanes

    def __repr__(self):
        return "<kspec.OpenCLKernel %s(%s) groups=%r on %s>" % (
            self.entry, ", ".join(p.get("name", "?") for p in self.params),
            self.launch.get("groups"), self.device.name)

    def __call__(self, *args, wait=True):
        cl = self._cl
        values, dims = self._bind(args)
        groups = self.num_groups(dims)
        if groups is None:
            raise ValueError("the reply gives no launch.groups for %s"
                             % self.entry)
        held = []           # (param index, Py_buffer) of host buffers
        try:
            for i, (p, a) in enumerate(zip(self.params, args)):
                if p.get("kind") != "buffer":
                    continue
                name = p.get("name", "#%d" % i)
                if isinstance(a, cl.MemoryObjectHolder):
                    need, extents = self._buffer_bytes(p, name, dims)
                    if a.size < need:
                        raise ValueError(
                            "buffer %s has %d bytes; %s needs %d (%s of %s)"
                            % (name, a.size, self.entry, need,
                               "x".join(str(v) for v in extents),
                               p.get("dtype")))
                    values[i] = a
                    continue
                values[i] = self._hold(i, p, a, dims, held)
            if held and not wait:
                raise ValueError("wait=False needs device buffers: host "
                                 "buffers are read back after the kernel")
            self._launch(values, groups, held)
        finally:
            self._release(held)

    def _launch(self, values, groups, held):
        cl = self._cl
        mf = cl.mem_flags
        hosts = {}
        for i, _ in held:
            view, need = values[i]
            host = (ctypes.c_char * max(view.len, 1)).from_address(view.buf)
            mem = cl.Buffer(self.context, mf.READ_WRITE, max(need, 1))
            if need:
                cl.enqueue_copy(self.queue, mem,
                                memoryview(host).cast("B")[:need])
            hosts[i] = (host, need)
            values[i] = mem
        for i, (p, v) in enumerate(zip(self.params, values)):
            self._kernel.set_arg(i, v)
        if groups > 0:
            cl.enqueue_nd_range_kernel(self.queue, self._kernel,
                                       (groups * self.lanes,),
                                       (self.lanes,))
        for i, (host, need) in hosts.items():
            if self.params[i].get("access") in ("write", "readwrite") and \
                    need:
                cl.enqueue_copy(self.queue,
                                memoryview(host).cast("B")[:need],
                                values[i])
        self.queue.finish()
        for i in hosts:
            values[i].release()


def load_opencl(artifact, queue=None):
    """Builds an OpenCL ``Artifact`` (format ``clbin``) and returns a
    callable ``OpenCLKernel``.  QUEUE (a ``pyopencl.CommandQueue``) picks
    the device; by default, the device the reply's ``target`` names, on a
    context and queue of its own."""
    return OpenCLKernel(artifact, queue)
