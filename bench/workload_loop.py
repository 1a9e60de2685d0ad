"""troika-bench's workloads in a C++ loop on a Python rank's own context: the ctypes binding of
BUILD/bench/libtroika_bench_loop.so (bench/workload_loop.cc), which bench/torch_workloads.py,
bench/mxnet_workloads.py and bench/call_cost.py call."""

import ctypes
import os

# The repository's build.
DEFAULT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build",
                       "bench", "libtroika_bench_loop.so")


def load(path=DEFAULT):
    """The library at `path`, its functions typed: troika_bench_workload_new(kind, bytes,
    tensors, ranks) -> workload or None, troika_bench_workload_run(workload, context address,
    iterations, byref(c_double seconds)) -> 0 or -1, troika_bench_workload_free(workload)."""
    lib = ctypes.CDLL(path)
    lib.troika_bench_workload_new.restype = ctypes.c_void_p
    lib.troika_bench_workload_new.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                              ctypes.c_int]
    lib.troika_bench_workload_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                              ctypes.POINTER(ctypes.c_double)]
    lib.troika_bench_workload_free.argtypes = [ctypes.c_void_p]
    return lib
