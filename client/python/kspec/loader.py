"""Runs cpu artifacts in this process, with ctypes.

A cpu artifact is a shared object exporting (docs/backends.md)::

    void ENTRY(void **params, uint64_t group_begin, uint64_t group_end);

``params[i]`` points to the i-th argument's value, in the order of the
reply's ``params``: for a buffer, to its data pointer; for a scalar, to the
scalar.  The entry runs the work-groups ``[group_begin, group_end)`` of the
launch grid, whose size is the reply's ``launch.groups`` (an integer, or a C
expression of the dynamic dims such as ``"M*((N+3)/4)"``).

``load_cpu`` writes the bytes to a memfd and dlopens ``/proc/self/fd/N``: no
temporary file.  The memfd stays open as long as the library is loaded.

Every call checks each buffer against the reply's ``params[].dims`` (the
buffer's extent as expressions of the dims) before anything runs, and may
split the groups over threads (``threads=N``): a persistent pool of Python
threads, each running one contiguous range of groups in one foreign call
(ctypes releases the GIL), bitwise equal to one thread because every
library kernel's groups write disjoint outputs in a fixed order.
"""

import concurrent.futures
import ctypes
import operator
import os
import re
import threading

try:
    import _ctypes
except ImportError:                     # pragma: no cover - CPython has it
    _ctypes = None

__all__ = ["load_cpu", "CpuKernel", "KernelSignature", "eval_expr",
           "ELEM_SIZE",
           "default_threads", "MAX_THREADS"]

# Bytes per element of a buffer dtype.
# Block formats of weights (q8_0, q4_0, q4_k): their dims count bytes.
ELEM_SIZE = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8,
             "i8": 1, "u8": 1, "i16": 2, "u16": 2,
             "i32": 4, "u32": 4, "i64": 8, "u64": 8,
             "q8_0": 1, "q4_0": 1, "q4_k": 1}

# Scalar dtypes and the C type the entry reads through params[i].
_SCALAR_CTYPES = {"i64": ctypes.c_int64, "u64": ctypes.c_uint64,
                  "i32": ctypes.c_int32, "u32": ctypes.c_uint32,
                  "f32": ctypes.c_float, "f64": ctypes.c_double}
_INT_LIMITS = {"i64": (-(1 << 63), (1 << 63) - 1), "u64": (0, (1 << 64) - 1),
               "i32": (-(1 << 31), (1 << 31) - 1), "u32": (0, (1 << 32) - 1)}

# Buffer formats (PEP 3118) that name a dtype: a buffer of one of them
# must be of that dtype.  Unsigned and raw formats carry any bits.
_FORMAT_DTYPE = {"e": "f16", "f": "f32", "d": "f64", "h": "i16",
                 "i": "i32", "q": "i64", "l": "i%d" % (8 * ctypes.sizeof(
                     ctypes.c_long))}

# The most threads a call may use (libkspec's KSPEC_MAX_THREADS).
MAX_THREADS = 64

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1

# ---- launch expressions ----

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(\S))")
_MAX_EXPR = 1024
_MAX_DEPTH = 64


def _tokens(text):
    toks = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        num, name, op = m.groups()
        if num is not None:
            toks.append(("int", int(num)))
        elif name is not None:
            toks.append(("name", name))
        elif op in "+-*/%()":
            toks.append(("op", op))
        else:
            raise ValueError("launch expression %r: unexpected %r"
                             % (text, op))
        pos = m.end()
    return toks


def _c_div(a, b):
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _checked(v, text):
    if not _I64_MIN <= v <= _I64_MAX:
        raise ValueError("launch expression %r overflows int64" % text)
    return v


def eval_expr(text, names):
    """Evaluates the C integer expression TEXT (integers, names bound in
    NAMES, ``+ - * / %``, unary minus and plus, parentheses) with C's int64
    semantics: ``/`` truncates toward zero, ``%`` takes the dividend's sign,
    overflow and division by zero are errors (ValueError).  An integer TEXT
    is returned as is.  Never uses eval()."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    if not isinstance(text, str):
        raise ValueError("launch expression must be a string or an integer, "
                         "not %s" % type(text).__name__)
    if len(text) > _MAX_EXPR:
        raise ValueError("launch expression longer than %d characters"
                         % _MAX_EXPR)
    toks = _tokens(text)
    pos = 0

    def peek():
        return toks[pos] if pos < len(toks) else ("end", None)

    def take():
        nonlocal pos
        t = peek()
        pos += 1
        return t

    def expr(depth):
        v = term(depth)
        while peek() in (("op", "+"), ("op", "-")):
            op = take()[1]
            v = _checked(v + term(depth) if op == "+" else v - term(depth),
                         text)
        return v

    def term(depth):
        v = unary(depth)
        while peek() in (("op", "*"), ("op", "/"), ("op", "%")):
            op = take()[1]
            r = unary(depth)
            if op == "*":
                v = _checked(v * r, text)
            else:
                if r == 0:
                    raise ValueError("launch expression %r divides by zero"
                                     % text)
                q = _c_div(v, r)
                v = _checked(q if op == "/" else v - r * q, text)
        return v

    def unary(depth):
        if depth > _MAX_DEPTH:
            raise ValueError("launch expression %r nests too deep" % text)
        t = peek()
        if t == ("op", "-"):
            take()
            return _checked(-unary(depth + 1), text)
        if t == ("op", "+"):
            take()
            return unary(depth + 1)
        return primary(depth)

    def primary(depth):
        kind, val = take()
        if kind == "int":
            return _checked(val, text)
        if kind == "name":
            if val not in names:
                raise ValueError("launch expression %r: %s is not bound"
                                 % (text, val))
            return _checked(operator.index(names[val]), text)
        if (kind, val) == ("op", "("):
            v = expr(depth + 1)
            if take() != ("op", ")"):
                raise ValueError("launch expression %r: missing )" % text)
            return v
        raise ValueError("launch expression %r: unexpected %s"
                         % (text, "end" if kind == "end" else repr(val)))

    if not toks:
        raise ValueError("empty launch expression")
    v = expr(0)
    if pos != len(toks):
        raise ValueError("launch expression %r: unexpected %r"
                         % (text, toks[pos][1]))
    return v


# ---- buffers ----

class _PyBuffer(ctypes.Structure):
    # Py_buffer (Include/pybuffer.h), part of the stable ABI since 3.11.
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p),
                ("len", ctypes.c_ssize_t), ("itemsize", ctypes.c_ssize_t),
                ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p),
                ("internal", ctypes.c_void_p)]


_PyBUF_WRITABLE = 0x0001
_PyBUF_FORMAT = 0x0004
_PyBUF_C_CONTIGUOUS = 0x0020 | 0x0010 | 0x0008

_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer),
                        ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


def _acquire(obj, name, writable):
    """A held buffer export of OBJ: its data pointer stays valid (and a
    bytearray cannot be resized) until released."""
    view = _PyBuffer()
    flags = _PyBUF_C_CONTIGUOUS | _PyBUF_FORMAT
    try:
        _get_buffer(obj, ctypes.byref(view),
                    flags | (_PyBUF_WRITABLE if writable else 0))
        return view
    except (BufferError, TypeError, ValueError) as first:
        try:
            _get_buffer(obj, ctypes.byref(view), flags)
        except (BufferError, TypeError, ValueError):
            pass
        else:
            _release_buffer(ctypes.byref(view))
            raise ValueError("buffer %s is read-only, and the kernel writes "
                             "it" % name) from None
        if isinstance(first, TypeError) and not _has_buffer(obj):
            raise TypeError("buffer %s: expected a bytes-like object "
                            "(bytearray, memoryview, array.array, ctypes "
                            "array, numpy array), got %s"
                            % (name, type(obj).__name__)) from None
        raise ValueError("buffer %s must be C-contiguous: %s"
                         % (name, first)) from None


def _has_buffer(obj):
    try:
        memoryview(obj)
        return True
    except TypeError:
        return False


# ---- threads ----

def default_threads():
    """The size ``threads=0`` means, as libkspec's kspec_cpu_threads(): env
    KSPEC_THREADS when it is an integer in [1, MAX_THREADS], else the CPUs
    this process may run on, at most MAX_THREADS."""
    env = os.environ.get("KSPEC_THREADS", "")
    if env.isdigit() and 1 <= int(env) <= MAX_THREADS:
        return int(env)
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_THREADS))


# One pool for the process, grown to the largest threads= asked for; a
# forked child starts with none (its parent's threads do not exist there).
_pool_lock = threading.Lock()
_pool = None
_pool_size = 0


def _reset_pool():
    global _pool, _pool_size, _pool_lock
    _pool, _pool_size = None, 0
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pool)


def _workers(n):
    """A pool with at least N worker threads."""
    global _pool, _pool_size
    with _pool_lock:
        if _pool_size < n:
            old = _pool
            _pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=n, thread_name_prefix="kspec-cpu")
            _pool_size = n
            if old is not None:
                old.shutdown(wait=False)
        return _pool


def _chunks(begin, end, n):
    """[begin, end) in N contiguous ranges, the first r one group longer
    (libkspec's split)."""
    q, r = divmod(end - begin, n)
    out = []
    for c in range(n):
        lo = begin + c * q + min(c, r)
        out.append((lo, lo + q + (1 if c < r else 0)))
    return out


# ---- loading ----

_RTLD_NOLOAD = getattr(os, "RTLD_NOLOAD", 4)


def _free_name(fd):
    """A path to FD under which no library is loaded yet.  glibc's dlopen
    returns an already loaded object whose name matches, before looking at
    the file; "/proc/self/fd/N" may name a library loaded from an earlier
    file with descriptor N that was closed while the library stayed (this
    loader keeps its fd open while loaded, but another loader may not)."""
    for i in range(64):
        path = "/proc/self/fd/" + "./" * i + str(fd)
        try:
            h = _ctypes.dlopen(path, os.RTLD_NOW | _RTLD_NOLOAD)
        except OSError:
            return path
        _ctypes.dlclose(h)
    raise OSError("no free name to load /proc/self/fd/%d" % fd)


class KernelSignature:
    """What every loader checks before a launch, read from a get reply:
    the entry, ``params`` (order, kinds, dtypes, each buffer's ``dims``),
    ``launch``, ``guard`` and ``dynamic``.  Subclasses load the bytes."""

    def __init__(self, artifact):
        if artifact.bytes is None:
            raise ValueError("artifact was fetched with meta_only: no bytes "
                             "to load")
        if not artifact.entry:
            raise ValueError("artifact names no entry symbol")
        self.artifact = artifact
        self.entry = artifact.entry
        self.params = list(artifact.params or [])
        self.launch = dict(artifact.launch or {})
        self.guard = dict(artifact.guard or {})
        self.dynamic = list(artifact.dynamic or [])
        self.kernel = artifact.kernel
    def dims(self, *args):
        """The shape of a call with ARGS: the guard's constants and the
        dynamic dims bound from the scalar arguments."""
        dims = dict(self.guard)
        for p, a in zip(self.params, args):
            if p.get("kind") == "scalar" and p.get("dtype") in _INT_LIMITS:
                dims[p.get("name")] = operator.index(a)
        return dims

    def num_groups(self, dims=None):
        """The launch grid's size for DIMS (a dict name -> int; default: the
        guard's constants), or None when launch.groups is absent."""
        groups = self.launch.get("groups")
        if groups is None:
            return None
        return eval_expr(groups, self.guard if dims is None else dims)

    def _scalar(self, p, a):
        name = p.get("name")
        dtype = p.get("dtype")
        ctype = _SCALAR_CTYPES.get(dtype)
        if ctype is None:
            raise TypeError("scalar %s has dtype %r, which this loader does "
                            "not know" % (name, dtype))
        if dtype in _INT_LIMITS:
            try:
                v = operator.index(a)
            except TypeError:
                raise TypeError("scalar %s: expected an integer, got %s"
                                % (name, type(a).__name__)) from None
            lo, hi = _INT_LIMITS[dtype]
            if not lo <= v <= hi:
                raise ValueError("scalar %s = %d is out of range for %s"
                                 % (name, v, dtype))
            if name in self.dynamic and v < 0:
                raise ValueError("dim %s must be >= 0 (got %d)" % (name, v))
            return ctype(v)
        return ctype(float(a))

    def _bind(self, args):
        """Checks the count of ARGS and each scalar; returns the scalars as
        ctypes values (None for buffers) and the call's dims (the guard's
        constants and the dynamic dims bound from the scalars)."""
        if len(args) != len(self.params):
            raise TypeError("%s takes %d arguments (%s), got %d" % (
                self.entry, len(self.params),
                ", ".join(p.get("name", "?") for p in self.params),
                len(args)))
        values = [None] * len(self.params)
        dims = dict(self.guard)
        for i, (p, a) in enumerate(zip(self.params, args)):
            if p.get("kind") == "scalar":
                values[i] = self._scalar(p, a)
                if p.get("dtype") in _INT_LIMITS:
                    dims[p.get("name")] = values[i].value
            elif p.get("kind") != "buffer":
                raise TypeError("param %s has kind %r, which this loader "
                                "does not know" % (p.get("name"),
                                                   p.get("kind")))
        return values, dims

    def _buffer_bytes(self, p, name, dims):
        """The bytes buffer param P needs under DIMS, and its extents."""
        esize = ELEM_SIZE.get(p.get("dtype"))
        if esize is None:
            raise TypeError("buffer %s has dtype %r, whose size this loader "
                            "does not know" % (name, p.get("dtype")))
        shape = p.get("dims")
        if shape is None:
            raise ValueError("buffer %s: the reply of %s gives no dims, so "
                             "its size cannot be checked" % (name, self.entry))
        extents = []
        for d in shape:
            try:
                v = eval_expr(d, dims)
            except ValueError as e:
                raise ValueError("buffer %s: %s" % (name, e)) from None
            if v < 0:
                raise ValueError("buffer %s: dim %s = %d is negative"
                                 % (name, d, v))
            extents.append(v)
        elems = 1
        for v in extents:
            elems *= v
        return elems * esize, extents

    def _hold(self, i, p, a, dims, held):
        """Acquires A, the buffer argument of param P (the I-th), appends
        (I, its view) to HELD for the caller's _release, and checks its
        size for DIMS; returns (view, bytes needed)."""
        name = p.get("name", "#%d" % i)
        view = _acquire(a, name, p.get("access") in ("write", "readwrite"))
        held.append((i, view))
        return view, self._check_size(p, name, view, dims)

    @staticmethod
    def _release(held):
        """Releases the views _hold acquired."""
        for _, view in held:
            _release_buffer(ctypes.byref(view))

    def _check_size(self, p, name, view, dims):
        """Checks the held buffer VIEW against param P (item size, a format
        that names a dtype, bytes for DIMS); returns the bytes needed."""
        esize = ELEM_SIZE.get(p.get("dtype"))
        if esize is None:
            raise TypeError("buffer %s has dtype %r, whose size this loader "
                            "does not know" % (name, p.get("dtype")))
        fmt = view.format.decode("ascii", "replace") if view.format else "B"
        if view.itemsize not in (1, esize) and fmt not in ("B", "b", "c"):
            raise TypeError("buffer %s has %d-byte items (format %r); the "
                            "kernel's %s needs %d-byte elements or raw bytes"
                            % (name, view.itemsize, fmt, p.get("dtype"),
                               esize))
        named = _FORMAT_DTYPE.get(fmt.lstrip("@=<>!"))
        if named is not None and named != p.get("dtype"):
            raise TypeError("buffer %s holds %s (format %r); %s takes %s"
                            % (name, named, fmt, self.entry, p.get("dtype")))
        need, extents = self._buffer_bytes(p, name, dims)
        if view.len < need:
            raise ValueError("buffer %s has %d bytes; %s needs %d (%s of %s)"
                             % (name, view.len, self.entry, need,
                                "x".join(str(v) for v in extents),
                                p.get("dtype")))
        return need


class CpuKernel(KernelSignature):
    """A cpu artifact loaded in this process, callable with the ABI.

    ``kernel(*args, groups=None, group_begin=0, threads=1)`` passes ARGS
    in the order of ``params``: buffers as bytes-like objects (bytearray,
    memoryview, array.array, ctypes arrays, numpy arrays, bytes for
    read-only ones), scalars as Python integers (dynamic dims) or floats.
    Each buffer is checked before the call: at least the bytes of its
    ``dims`` (ValueError naming it, with the bytes needed and given), items
    of its dtype's size or raw bytes, a float format only for its own dtype
    (TypeError).  Runs the work-groups ``[group_begin, groups)``; GROUPS
    defaults to the whole launch grid.  THREADS > 1 splits them over this
    thread and THREADS - 1 threads of a persistent pool (0: the default,
    ``default_threads()``); the GIL is released while the kernel runs.
    """

    def __init__(self, artifact):
        if artifact.backend not in (None, "cpu") or \
                artifact.format not in (None, "so"):
            raise ValueError("load_cpu needs a cpu shared object, not %s/%s"
                             % (artifact.backend, artifact.format))
        KernelSignature.__init__(self, artifact)
        self._fd = -1
        self._handle = None
        self._fn = None
        self._load(artifact.bytes)

    def _load(self, data):
        fd = os.memfd_create("kspec-" + self.entry[:200], os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            path = _free_name(fd)
            handle = _ctypes.dlopen(path, os.RTLD_NOW | os.RTLD_LOCAL)
        except BaseException:
            os.close(fd)
            raise
        try:
            lib = ctypes.CDLL(path, handle=handle)
            fn = getattr(lib, self.entry)
        except AttributeError:
            _ctypes.dlclose(handle)
            os.close(fd)
            raise ValueError("artifact does not export %r" % self.entry) \
                from None
        fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint64,
                       ctypes.c_uint64]
        fn.restype = None
        self._fd, self._handle, self._lib, self._fn = fd, handle, lib, fn

    @property
    def closed(self):
        return self._fn is None

    def close(self):
        """dlcloses the library and closes its memfd.  Calling the kernel
        afterwards raises ValueError; function pointers taken from it must
        no longer be used."""
        if self._fn is None:
            return
        self._fn = None
        self._lib = None
        try:
            _ctypes.dlclose(self._handle)
        finally:
            os.close(self._fd)
            self._fd = -1
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<kspec.CpuKernel %s(%s) groups=%r%s>" % (
            self.entry, ", ".join(p.get("name", "?") for p in self.params),
            self.launch.get("groups"), " closed" if self.closed else "")

    def __call__(self, *args, groups=None, group_begin=0, threads=1):
        fn = self._fn
        if fn is None:
            raise ValueError("kernel %s is closed" % self.entry)
        n = len(self.params)
        values, dims = self._bind(args)
        total = self.num_groups(dims)
        if groups is None:
            if total is None:
                raise ValueError("the reply gives no launch.groups: pass "
                                 "groups=")
            groups = total
        groups = operator.index(groups)
        group_begin = operator.index(group_begin)
        if not 0 <= group_begin <= groups:
            raise ValueError("groups [%d, %d) is not a range"
                             % (group_begin, groups))
        if total is not None and groups > total:
            raise ValueError("groups end %d is past the launch grid of %d"
                             % (groups, total))
        threads = operator.index(threads)
        if not 0 <= threads <= MAX_THREADS:
            raise ValueError("threads must be in [0, %d], not %d"
                             % (MAX_THREADS, threads))
        threads = min(threads or default_threads(),
                      max(groups - group_begin, 1))
        held = []
        try:
            for i, (p, a) in enumerate(zip(self.params, args)):
                if p.get("kind") != "buffer":
                    continue
                view, _ = self._hold(i, p, a, dims, held)
                values[i] = ctypes.c_void_p(view.buf)
            argv = (ctypes.c_void_p * max(n, 1))(
                *[ctypes.addressof(v) for v in values])
            if group_begin < groups and threads <= 1:
                fn(argv, group_begin, groups)
            elif group_begin < groups:
                ranges = _chunks(group_begin, groups, threads)
                pool = _workers(threads - 1)
                futures = [pool.submit(fn, argv, lo, hi)
                           for lo, hi in ranges[1:]]
                try:
                    fn(argv, *ranges[0])
                finally:
                    # The buffers stay held until every range has run.
                    concurrent.futures.wait(futures)
                for f in futures:
                    f.result()
        finally:
            self._release(held)



def load_cpu(artifact):
    """Loads a cpu ``Artifact`` (format ``so``) from memory and returns a
    callable ``CpuKernel``."""
    if _ctypes is None:                 # pragma: no cover
        raise OSError("load_cpu needs CPython's _ctypes")
    return CpuKernel(artifact)
