"""Quantized weights: GGUF's block formats q8_0, q4_0 and q4_k.

    import array, kspec
    w = array.array("f", ...)                    # rows x K f32, row-major
    blocks = kspec.quantize("q4_k", w, k=4096)   # bytes, GGUF's layout
    back = kspec.dequantize("q4_k", blocks, k=4096)  # array('f')

The codec is libkspec's (``kspec_quantize``, ``kspec_dequantize``;
docs/kernels.md defines every byte), called with ctypes: the bytes equal
llama.cpp's reference quantizer's, and decoding is exact.  The library is
found as ``$KSPEC_LIBKSPEC`` (a path) when set, else as ``libkspec.so.0``
through the dynamic loader (``make install`` puts it in ``PREFIX/lib``).
Errors are ``KspecError`` with libkspec's code and message:
``E_BAD_DTYPE`` (a format other than the three), ``E_BAD_SHAPE`` (K not a
multiple of the block), ``E_INVAL`` (a refused row, named with its block:
a NaN or infinite weight, a scale beyond f16), ``E_UNSUPPORTED`` (no
libkspec).
"""

import array
import ctypes
import ctypes.util
import os
import threading

from .errors import KspecError, ERROR_CODES
from .loader import _acquire, _release_buffer

__all__ = ["quantize", "dequantize", "quant_block", "quant_size",
           "QUANT_FORMATS"]

# The formats libkspec quantizes, in the names requests use.
QUANT_FORMATS = ("q8_0", "q4_0", "q4_k")

_CODE_NAMES = {v: k for k, v in ERROR_CODES.items()}
_ERRLEN = 512
_lib = None
_lib_lock = threading.Lock()


def _library():
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        path = os.environ.get("KSPEC_LIBKSPEC")
        candidates = [path] if path else [
            "libkspec.so.0", ctypes.util.find_library("kspec")]
        errors = []
        for name in candidates:
            if not name:
                continue
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError as e:
                errors.append(str(e))
        else:
            raise KspecError("E_UNSUPPORTED",
                             "libkspec not found (%s): make install puts "
                             "it in PREFIX/lib; or set KSPEC_LIBKSPEC to "
                             "its path" % "; ".join(errors or ["no path"]))
        sz, p, c = ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p
        lib.kspec_quant_block.argtypes = [c, ctypes.POINTER(sz),
                                          ctypes.POINTER(sz)]
        lib.kspec_quant_size.argtypes = [c, sz, sz, ctypes.POINTER(sz), p,
                                         sz]
        lib.kspec_quantize.argtypes = [c, p, sz, sz, p, sz, p, sz]
        lib.kspec_dequantize.argtypes = [c, p, sz, sz, sz, p, p, sz]
        for fn in (lib.kspec_quant_block, lib.kspec_quant_size,
                   lib.kspec_quantize, lib.kspec_dequantize):
            fn.restype = ctypes.c_int
        _lib = lib
        return lib


def _check(rc, err):
    if rc:
        msg = err.value.decode("utf-8", "replace") if err is not None \
            else ""
        raise KspecError(_CODE_NAMES.get(rc, "E_INTERNAL"), msg)


def _format(fmt):
    if not isinstance(fmt, str):
        raise TypeError("format must be a str such as 'q4_k', not %s"
                        % type(fmt).__name__)
    return fmt.encode("utf-8", "replace")


def quant_block(format):
    """(weights per block, bytes per block) of FORMAT: (32, 34) for q8_0,
    (32, 18) for q4_0, (256, 144) for q4_k."""
    lib = _library()
    e, b = ctypes.c_size_t(), ctypes.c_size_t()
    rc = lib.kspec_quant_block(_format(format), ctypes.byref(e),
                               ctypes.byref(b))
    if rc:
        quant_size(format, 1, 1)        # raises with libkspec's message
    return e.value, b.value


def quant_size(format, rows, k):
    """Bytes of ROWS rows of K weights in FORMAT."""
    lib = _library()
    n = ctypes.c_size_t()
    err = ctypes.create_string_buffer(_ERRLEN)
    _check(lib.kspec_quant_size(_format(format), rows, k, ctypes.byref(n),
                                err, _ERRLEN), err)
    return n.value


def _rows(nbytes, k, what):
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError("k must be a positive int, not %r" % (k,))
    if nbytes % (4 * k):
        raise ValueError("%s has %d bytes: not whole rows of k = %d f32 "
                         "weights" % (what, nbytes, k))
    return nbytes // (4 * k)


def quantize(format, weights, k):
    """The bytes of the f32 matrix WEIGHTS, rows of K weights one after the
    other, in FORMAT ("q8_0", "q4_0" or "q4_k"): GGUF's blocks, as
    llama.cpp's reference quantizer writes them.  WEIGHTS is a C-contiguous
    buffer of float32 (array('f'), a numpy float32 array, or raw bytes of
    native floats) or a sequence of numbers (converted to float32).
    A matrix of 2^18 weights or more runs on libkspec's thread pool
    (``KSPEC_THREADS``); the bytes do not depend on it."""
    lib = _library()
    fmt = _format(format)
    _rows(0, k, "weights")              # k, then the format and k's block
    quant_size(format, 0, k)
    try:
        memoryview(weights)
    except TypeError:
        weights = array.array("f", weights)
    view = _acquire(weights, "weights", False)
    try:
        fmtcode = (view.format or b"B").decode("ascii", "replace")
        if fmtcode.lstrip("@=<") not in ("f", "B", "b", "c"):
            raise TypeError("weights must be float32 (or raw bytes), not "
                            "format %r" % fmtcode)
        rows = _rows(view.len, k, "weights")
        out = bytearray(quant_size(format, rows, k))
        dst = (ctypes.c_char * len(out)).from_buffer(out) if out else None
        err = ctypes.create_string_buffer(_ERRLEN)
        _check(lib.kspec_quantize(fmt, view.buf, rows, k, dst, len(out),
                                  err, _ERRLEN), err)
        return bytes(out)
    finally:
        _release_buffer(ctypes.byref(view))


def dequantize(format, data, k):
    """The f32 weights (an array('f'), rows x K) of DATA, FORMAT's blocks
    of rows of K weights: each weight exactly its documented value, bitwise
    llama.cpp's decoding."""
    lib = _library()
    fmt = _format(format)
    _rows(0, k, "data")
    view = _acquire(data, "data", False)
    try:
        per_row = quant_size(format, 1, k)
        if view.len % per_row:
            raise ValueError("data has %d bytes: not whole rows of k = %d "
                             "in %s (%d bytes each)"
                             % (view.len, k, format, per_row))
        rows = view.len // per_row
        out = array.array("f", bytes(4 * rows * k))
        addr = out.buffer_info()[0] if rows else None
        err = ctypes.create_string_buffer(_ERRLEN)
        _check(lib.kspec_dequantize(fmt, view.buf, view.len, rows, k, addr,
                                    err, _ERRLEN), err)
        return out
    finally:
        _release_buffer(ctypes.byref(view))
