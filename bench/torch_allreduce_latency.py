#!/usr/bin/env python3
"""The Python layer's own cost: one rank of a troikarun job timing 4-byte (one float32)
allreduces, each waited before the next, through

  c++ api: Context::Allreduce(..., wait).Wait() in a C++ loop (bench/latency_loop.cc, built as
           BUILD/bench/libtroika_bench_loop.so, called once per block with ctypes) on this
           process's own context
  module:  troika._troika's Context.allreduce_wait(...) on t.data_ptr(), the
           arguments by position as troika.torch passes them (the compiled module alone)
  module+alloc: the least an out-of-place front end does: t's attributes read (data_ptr,
           dtype, shape) and a result tensor allocated (torch.empty_like), then the module's
           call (the module and torch, none of troika.torch's own code)
  torch:   hvd.allreduce(t, op=hvd.Sum)    (troika.torch, out of place: the usual call)
  torch_:  hvd.allreduce_(t, op=hvd.Sum)   (troika.torch, in place)

in alternating blocks (c++ api, module, module+alloc, torch, torch_, then module, ...,
c++ api, ...: the first rotates): the same job, process and context for all, so that drift of
a shared machine hits all alike and the ratios are what the Python layer adds. All submit the same request (one name: "allreduce.latency", which
troika.torch negotiates for name="latency"), and nothing else runs between the blocks, so a
steady-state schedule (troikarun's default) holds across them; a name of its own per mode, or a
barrier between blocks, would end the schedule at every block, and the first mode after a
change would pay the negotiations that form it again (until 2026-11-28 the C++ and module
modes used "latency": the C++ API and hvd.allreduce, each right after such a change, read
about 2x slower than they are). Rank 0
prints one line per mode: "<mode>: <us> us per allreduce". Launched by bench/torch_bench.py.

    troikarun -np 4 -- python3 bench/torch_allreduce_latency.py --iters 2000
"""

import argparse
import ctypes
import os
import time

import torch

import troika
import troika.torch as hvd


NAME = "allreduce.latency"  # what every mode negotiates (latency_loop.cc's too)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=2000, help="timed allreduces per mode")
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--blocks", type=int, default=8, help="alternating blocks per mode")
    p.add_argument("--loop-lib", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "bench",
        "libtroika_bench_loop.so"), help="the C++ loop (default: the repository's build)")
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    t = torch.ones(1, dtype=torch.float32)
    ctx = troika.context()
    ptr = t.data_ptr()
    f32 = troika.DTYPES["float32"]
    loop = ctypes.CDLL(args.loop_lib).troika_bench_allreduce_loop  # releases the GIL
    loop.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
    seconds = ctypes.c_double()

    def cpp(n):
        if loop(ctx.address, n, ctypes.byref(seconds)) != 0:
            raise RuntimeError("the C++ loop failed (its error is on stderr)")

    def module(n):
        for _ in range(n):
            ctx.allreduce_wait(NAME, ptr, ptr, f32, [1], hvd.Sum, 1.0, 1.0, 0)

    dtypes = {torch.float32: f32}

    def module_alloc(n):
        for _ in range(n):
            out = torch.empty_like(t)
            ctx.allreduce_wait(NAME, t.data_ptr(), out.data_ptr(), dtypes[t.dtype],
                               t.shape, hvd.Sum, 1.0, 1.0, 0)

    def torch_out(n):
        for _ in range(n):
            hvd.allreduce(t, op=hvd.Sum, name="latency")

    def torch_in(n):
        for _ in range(n):
            hvd.allreduce_(t, op=hvd.Sum, name="latency")

    modes = [("c++ api", cpp), ("module", module), ("module+alloc", module_alloc),
             ("torch", torch_out), ("torch_", torch_in)]
    for _, fn in modes:
        fn(args.warmup)
    per_block = max(1, args.iters // args.blocks)
    total = {name: 0.0 for name, _ in modes}
    # Each allreduce is waited on every rank, so the ranks start each block together.
    # Which mode goes first rotates from one round of blocks to the next.
    for b in range(args.blocks):
        for name, fn in modes[b % len(modes):] + modes[:b % len(modes)]:
            start = time.perf_counter()
            fn(per_block)
            total[name] += time.perf_counter() - start
    if hvd.rank() == 0:
        for name, _ in modes:
            print("%s: %.1f us per allreduce (%d ranks, %d iters)"
                  % (name, 1e6 * total[name] / (per_block * args.blocks), hvd.size(),
                     per_block * args.blocks), flush=True)


if __name__ == "__main__":
    main()
