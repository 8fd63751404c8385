"""kspec: the Python client of kspecd (standard library only).

    import kspec
    with kspec.Client() as c:                       # default socket
        art = c.get("gemm", backend="cpu", dtype="f32",
                    shape={"M": 1, "N": 4096, "K": 4096})
        gemv = kspec.load_cpu(art)                  # memfd + dlopen
        gemv(x, W, y)                               # buffers, in params order
    # OpenCL (pyopencl) and CUDA (ctypes over libcuda.so.1) artifacts:
    # kspec.load_opencl(art), kspec.load_cuda(art), called the same way.
    blocks = kspec.quantize("q4_k", W, k=4096)      # GGUF's blocks (libkspec)

See docs/python.md.
"""

from .errors import KspecError, ERROR_CODES
from .client import (Client, Artifact, Reply, default_socket_path,
                     get_request, PROTOCOL_VERSION)
from .loader import load_cpu, CpuKernel, eval_expr, default_threads
from .loader_opencl import load_opencl, OpenCLKernel
from .loader_cuda import load_cuda, CudaKernel
from .quant import (quantize, dequantize, quant_block, quant_size,
                    QUANT_FORMATS)

__version__ = "0.1.0"

__all__ = ["Client", "Artifact", "Reply", "KspecError", "ERROR_CODES",
           "default_socket_path", "get_request", "load_cpu", "CpuKernel",
           "load_opencl", "OpenCLKernel", "load_cuda", "CudaKernel",
           "eval_expr", "default_threads", "PROTOCOL_VERSION", "numeric",
           "quantize", "dequantize", "quant_block", "quant_size",
           "QUANT_FORMATS"]

from . import numeric  # noqa: E402  (helpers; imported for kspec.numeric)
