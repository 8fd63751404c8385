"""An inference server's startup: fetch the model's 64 kernels with one
pipelined get_many and load each into the process.  Prints the wall time
in milliseconds of get_many + load (interpreter start excluded) and how
many replies came from memory, disk or a compile."""

import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "client", "python"))
sys.path.insert(0, here)

import kspec  # noqa: E402
import model  # noqa: E402


def main():
    specs = model.specs()
    t0 = time.perf_counter()
    with kspec.Client(sys.argv[1]) as c:
        arts = c.get_many(specs)
        kernels = [kspec.load_cpu(a) for a in arts]
    ms = (time.perf_counter() - t0) * 1e3
    sources = {}
    for a in arts:
        sources[a.source] = sources.get(a.source, 0) + 1
    print("%.3f %s" % (ms, ",".join("%s=%d" % kv
                                     for kv in sorted(sources.items()))))
    del kernels


if __name__ == "__main__":
    main()
