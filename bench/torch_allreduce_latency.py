#!/usr/bin/env python3
"""The Python layer's own cost: one rank of a troikarun job timing 4-byte (one float32)
allreduces, each waited before the next, through

  torch:  hvd.allreduce(t, op=hvd.Sum)    (troika.torch, out of place: the usual call)
  torch_: hvd.allreduce_(t, op=hvd.Sum)   (troika.torch, in place)
  module: troika._troika's Context.allreduce(..., wait=True).wait() on t.data_ptr()
          (the compiled module alone: no troika.torch)

in alternating blocks (module, torch, torch_, module, torch, torch_, ...) so that drift of a
shared machine hits all alike. All three submit the same request (one name, as the C++ API's
loop in troika-rank-latency), and nothing else runs between the blocks, so a steady-state
schedule (troikarun's default) holds across the blocks as it does in the C++ job; a tensor of
its own per mode, or a barrier between blocks, would end the schedule at every block. Rank 0 prints one line per mode:
"<mode>: <us> us per allreduce". Launched by bench/torch_bench.py next to the C++ API's
figure (troika-rank-latency) from a job of the same shape.

    troikarun -np 4 -- python3 bench/torch_allreduce_latency.py --iters 2000
"""

import argparse
import time

import torch

import troika
import troika.torch as hvd


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=2000, help="timed allreduces per mode")
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--blocks", type=int, default=4, help="alternating blocks per mode")
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    t = torch.ones(1, dtype=torch.float32)
    ctx = troika.context()
    ptr = t.data_ptr()
    f32 = troika.DTYPES["float32"]

    def module(n):
        for _ in range(n):
            ctx.allreduce("latency", ptr, ptr, f32, [1], op=hvd.Sum, wait=True).wait()

    def torch_out(n):
        for _ in range(n):
            hvd.allreduce(t, op=hvd.Sum, name="latency")

    def torch_in(n):
        for _ in range(n):
            hvd.allreduce_(t, op=hvd.Sum, name="latency")

    modes = [("module", module), ("torch", torch_out), ("torch_", torch_in)]
    for _, fn in modes:
        fn(args.warmup)
    per_block = max(1, args.iters // args.blocks)
    total = {name: 0.0 for name, _ in modes}
    # Each allreduce is waited on every rank, so the ranks start each block together.
    for _ in range(args.blocks):
        for name, fn in modes:
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
