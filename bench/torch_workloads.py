#!/usr/bin/env python3
"""troika.torch against the C++ API on issue 36's workloads, in the same ranks of one troikarun
job: each workload runs through

  c++ api:  troika-bench's own workload (bench/workloads.h: its buffers, names and calls, as its
            "troika" column), in a C++ loop on this process's own context
            (bench/workload_loop.cc in BUILD/bench/libtroika_bench_loop.so, called with ctypes)
  and through troika.torch, the calls a Horovod script makes for it (torch_modes below),
  and, for the allreduces, through the compiled module alone ("module": troika._troika called
  straight from a Python loop, in place, none of troika.torch's code: the least any Python
  front end does; for the 4-byte allreduce also "module, tensor read": the same with the
  tensor's device, layout, address, dtype and shape read off it each call, as any torch front
  end must),

with the same tensor names (troika.torch negotiates name="bench/N" as "allreduce.bench/N",
the C++ workload's name), in alternating blocks of the same length (the first mode rotates
from one round of blocks to the next), so that the same job, context, data plane and moment of
a shared machine serve all, and the ratios are what the front end adds. Each block's iteration count is set once per
workload from the C++ API's warm-up time (the slowest rank's), the same on every rank.

Rank 0 prints one line per workload and mode, the slowest rank's mean time per iteration:
"<workload> <mode>: <us> us per iteration (...)". Launched by bench/torch_bench.py
(--skip-synthetic --skip-latency for this part alone):

    troikarun -np 4 -- python3 bench/torch_workloads.py
"""

import argparse
import ctypes
import os
import time

import torch

import troika
import troika.torch as hvd
from troika import _troika

import workload_loop

MiB = 1 << 20
_F32 = troika.DTYPES["float32"]

# name -> (troika-bench kind, bytes (many_small: one tensor's), tensors, warm-up iterations).
# Sizes as troika-bench counts them: the allreduce and broadcast buffer, the allgather output.
WORKLOADS = {
    "allreduce_64M": ("allreduce", 64 * MiB, 1, 1),
    "allreduce_1M": ("allreduce", MiB, 1, 10),
    "latency": ("latency", 4, 1, 100),
    "many_small": ("many_small", 16 * 1024, 256, 3),
    "allgather_64M": ("allgather", 64 * MiB, 1, 1),
    "broadcast_64M": ("broadcast", 64 * MiB, 1, 1),
}


def torch_modes(kind, nbytes, tensors, size):
    """[(mode, fn(iters))]: the workload through troika.torch, as a Horovod script calls it.
    Buffers start zeroed, as troika-bench's: sums of zeros stay zeros. The names negotiate as
    the C++ workload's (bench/workloads.cc), so a steady-state schedule holds across the modes'
    blocks; until 2026-11-28 they differed, and the first mode after each change of names paid
    the negotiations that form the schedule again."""
    if kind in ("allreduce", "latency"):
        t = torch.zeros(nbytes // 4, dtype=torch.float32)
        name = "bench/latency" if kind == "latency" else "bench/%d" % nbytes

        def out_of_place(n):
            for _ in range(n):
                hvd.allreduce(t, op=hvd.Sum, name=name)

        def in_place(n):
            for _ in range(n):
                hvd.allreduce_(t, op=hvd.Sum, name=name)

        ctx, ptr, full, f32 = troika.context(), t.data_ptr(), "allreduce." + name, _F32

        # The module's function that troika.torch's synchronous allreduce calls (METH_FASTCALL;
        # until 2026-12-07 this mode called the Context method, through pybind11's dispatch).
        wait = _troika.allreduce_wait

        def module(n):
            for _ in range(n):
                wait(ctx, full, ptr, ptr, f32, t.shape, _troika.SUM, 1.0, 1.0, 0)

        dtypes = {torch.float32: f32}

        def module_reading(n):  # the module, with what any front end reads off the tensor
            for _ in range(n):
                if t.is_cpu and t.is_contiguous():
                    p = t.data_ptr()
                    wait(ctx, full, p, p, dtypes[t.dtype], t.shape, _troika.SUM, 1.0, 1.0, 0)

        return [("hvd.allreduce", out_of_place), ("hvd.allreduce_", in_place),
                ("module", module), ("module, tensor read", module_reading)]
    if kind == "many_small":
        ts = [torch.zeros(nbytes // 4, dtype=torch.float32) for _ in range(tensors)]
        names = ["bench/small/%d" % i for i in range(tensors)]
        pairs = list(zip(ts, names))

        def async_in_place(n):  # DistributedOptimizer's call, Horovod's too
            for _ in range(n):
                handles = [hvd.allreduce_async_(t, op=hvd.Sum, name=nm) for t, nm in pairs]
                for h in handles:
                    hvd.synchronize(h)

        def async_out_of_place(n):
            for _ in range(n):
                handles = [hvd.allreduce_async(t, op=hvd.Sum, name=nm) for t, nm in pairs]
                for h in handles:
                    hvd.synchronize(h)

        ctx = troika.context()
        submissions = [(t.data_ptr(), "allreduce." + nm, t.shape) for t, nm in pairs]

        def module(n):
            for _ in range(n):
                handles = [_troika.submit_allreduce(ctx, nm, ptr, ptr, _F32, shape, _troika.SUM,
                                                    1.0, 1.0, 0, -1, 0)
                           for ptr, nm, shape in submissions]
                for h in handles:
                    h.wait()

        entries = [("allreduce." + nm, t.data_ptr(), t.data_ptr(), _F32, t.shape)
                   for t, nm in pairs]

        def module_batch(n):  # the same through one call to submit and one to wait
            for _ in range(n):
                _troika.submit_allreduces(ctx, entries, _troika.SUM, 1.0, 1.0, 0, -1, 0).wait()

        # A step through DistributedOptimizer: a backward pass that hands the 256 gradients to
        # its hooks (the parameters are the graph's roots: the pass runs only their
        # AccumulateGrad nodes, the least a backward pass does), then synchronize(), the
        # allreduces of step() without the update. "backward alone" is the same pass on
        # parameters no optimizer hooks: what any torch step pays, with or without Troika.
        params = [torch.zeros(nbytes // 4, requires_grad=True) for _ in range(tensors)]
        plain = [torch.zeros(nbytes // 4, requires_grad=True) for _ in range(tensors)]
        grads = [torch.zeros(nbytes // 4) for _ in range(tensors)]
        opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.0),
                                       named_parameters=list(zip(names, params)), op=hvd.Sum)

        def optimizer(n):
            for _ in range(n):
                torch.autograd.backward(params, grads)
                opt.synchronize()

        def backward_alone(n):
            for _ in range(n):
                torch.autograd.backward(plain, grads)

        # The same pass with an empty Python hook on each gradient accumulator, as
        # DistributedOptimizer registers them: what any front end that learns of each gradient
        # from Python pays before it submits anything.
        hooked = [torch.zeros(nbytes // 4, requires_grad=True) for _ in range(tensors)]
        accumulators = [p.expand_as(p).grad_fn.next_functions[0][0] for p in hooked]
        for acc in accumulators:
            acc.register_hook(lambda *unused: None)

        def backward_hooks(n, accumulators=accumulators):
            for _ in range(n):
                torch.autograd.backward(hooked, grads)

        batch = [("module batch", module_batch)] if hasattr(_troika, "submit_allreduces") else []
        return ([("hvd.allreduce_async_", async_in_place),
                 ("hvd.allreduce_async", async_out_of_place), ("module", module)] + batch
                + [("DistributedOptimizer", optimizer), ("backward alone", backward_alone),
                   ("backward, empty hooks", backward_hooks)])
    if kind == "allgather":
        t = torch.zeros(nbytes // size, dtype=torch.uint8)
        name = "bench/%d" % (t.numel() * size)  # the output's bytes, as the C++ name rounds them

        def allgather(n):
            for _ in range(n):
                hvd.allgather(t, name=name)

        return [("hvd.allgather", allgather)]
    if kind == "broadcast":
        t = torch.zeros(nbytes, dtype=torch.uint8)
        name = "bench/%d" % nbytes

        def in_place(n):  # broadcast_parameters' call
            for _ in range(n):
                hvd.broadcast_(t, 0, name=name)

        def out_of_place(n):
            for _ in range(n):
                hvd.broadcast(t, 0, name=name)

        return [("hvd.broadcast_", in_place), ("hvd.broadcast", out_of_place)]
    raise ValueError(kind)


def slowest(seconds):
    """The largest of every rank's `seconds` (a list of floats), elementwise."""
    return hvd.allreduce(torch.tensor(seconds, dtype=torch.float64), op=hvd.Max,
                         name="torch_workloads.slowest").tolist()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help="comma-separated, of: " + ", ".join(WORKLOADS))
    p.add_argument("--blocks", type=int, default=6, help="alternating blocks per mode")
    p.add_argument("--block-seconds", type=float, default=0.4,
                   help="each block's length, from the C++ API's warm-up time (at least one "
                        "iteration)")
    p.add_argument("--loop-lib", default=workload_loop.DEFAULT,
                   help="the C++ loops (default: the repository's build)")
    args = p.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    lib = workload_loop.load(args.loop_lib)
    address = troika.context().address
    seconds = ctypes.c_double()

    for workload in args.workloads.split(","):
        kind, nbytes, tensors, warmup = WORKLOADS[workload]
        native = lib.troika_bench_workload_new(kind.encode(), nbytes, tensors, hvd.size())
        if not native:
            raise RuntimeError("troika_bench_workload_new(%s) failed" % kind)

        def cpp(n, native=native):
            if lib.troika_bench_workload_run(native, address, n, ctypes.byref(seconds)) != 0:
                raise RuntimeError("the C++ loop failed (its error is on stderr)")

        modes = [("c++ api", cpp)] + torch_modes(kind, nbytes, tensors, hvd.size())
        backward = dict(modes).get("backward alone")
        if backward is not None:  # the C++ API's training step: the same backward pass first
            def cpp_step(n, backward=backward, cpp=cpp):
                for _ in range(n):
                    backward(1)
                    cpp(1)

            modes.append(("backward + c++ api", cpp_step))
        for _, fn in modes:
            fn(warmup)
        start = time.perf_counter()
        cpp(warmup)
        per_iter = slowest([(time.perf_counter() - start) / warmup])[0]
        iters = max(1, round(args.block_seconds / per_iter))
        total = {name: 0.0 for name, _ in modes}
        cpu = {name: 0.0 for name, _ in modes}  # this (the calling) thread's CPU time
        for b in range(args.blocks):
            shift = b % len(modes)
            for name, fn in modes[shift:] + modes[:shift]:
                start, start_cpu = time.perf_counter(), time.thread_time()
                fn(iters)
                total[name] += time.perf_counter() - start
                cpu[name] += time.thread_time() - start_cpu
        worst = slowest([total[name] for name, _ in modes] + [cpu[name] for name, _ in modes])
        lib.troika_bench_workload_free(native)
        if hvd.rank() == 0:
            n = iters * args.blocks
            for i, (name, _) in enumerate(modes):
                print("%s %s: %.1f us per iteration (%d ranks, %d x %d iterations; calling "
                      "thread's CPU %.1f us, the most of any rank)"
                      % (workload, name, 1e6 * worst[i] / n, hvd.size(), args.blocks, iters,
                         1e6 * worst[len(modes) + i] / n), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
