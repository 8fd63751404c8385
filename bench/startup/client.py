"""An inference server's startup: fetch the model's 64 kernels with one
pipelined get_many and load each into the process.  Prints the wall times
in milliseconds of get_many (connect included) and of the loads
(interpreter start excluded), and how many replies came from memory, disk
or a compile."""

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
        t1 = time.perf_counter()
        kernels = [kspec.load_cpu(a) for a in arts]
    t2 = time.perf_counter()
    sources = {}
    for a in arts:
        sources[a.source] = sources.get(a.source, 0) + 1
    print("%.3f %.3f %s" % ((t1 - t0) * 1e3, (t2 - t1) * 1e3,
                            ",".join("%s=%d" % kv
                                     for kv in sorted(sources.items()))))
    del kernels


if __name__ == "__main__":
    main()
