#!/usr/bin/env python3
"""troika.mxnet against the C++ API, and its engine route against a blocking one, in the same
ranks of one troikarun job (docs/mxnet.md, docs/PERFORMANCE.md).

1. Workloads (bench/torch_workloads.py's method): a 64 MiB and a 1 MiB float32 allreduce, and a
   4-byte one, through
     c++ api:   troika-bench's own workload in a C++ loop on this process's context
                (BUILD/bench/libtroika_bench_loop.so, with ctypes);
     hvd.allreduce_: troika.mxnet in place, as DistributedTrainer calls it: pushed onto MXNet's
                engine, then the result read (wait_to_read) each iteration;
     blocking:  the route troika.mxnet did not take: wait for the array, then the compiled
                module's allreduce on its data (troika._troika, GIL released), on Python's thread;
   in alternating blocks of the same length. Figure: C++ API time / troika.mxnet time; target
   >= 0.9 for 64 MiB.
2. Training steps: a Gluon MLP (--layers dense layers of --width, batch --batch-size per rank),
   forward, backward and step, with DistributedTrainer (the engine route: each gradient's
   allreduce runs as soon as backward wrote it, beside the rest of backward) against a trainer
   whose step waits for each gradient and allreduces it from Python (the blocking route), in
   alternating blocks. Figure: steps/s of each; the engine route's ratio.

Rank 0 prints one line per workload and mode, the slowest rank's mean time per iteration.

    troikarun -np 4 -- build/venv-mxnet/bin/python bench/mxnet_workloads.py   # PYTHONPATH=build/python

MXNET_CPU_WORKER_NTHREADS=1 and OMP_NUM_THREADS=1 unless set: the ranks share the cores.
"""

import os

os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import ctypes  # noqa: E402
import time  # noqa: E402

import mxnet as mx  # noqa: E402
import numpy as np  # noqa: E402

import troika  # noqa: E402
import troika.mxnet as hvd  # noqa: E402
from troika import _troika  # noqa: E402
from troika.mxnet.mpi_ops import _address  # noqa: E402

import workload_loop  # noqa: E402

MiB = 1 << 20
_F32 = troika.DTYPES["float32"]
# name -> (troika-bench kind, bytes, warm-up iterations)
WORKLOADS = {
    "allreduce_64M": ("allreduce", 64 * MiB, 1),
    "allreduce_1M": ("allreduce", MiB, 10),
    "latency": ("latency", 4, 100),
}


def blocking_allreduce(t, full):
    """The blocking route: the array's pending writes waited for on Python's thread, then the
    compiled module's allreduce on its data, in place."""
    t.wait_to_read()
    ptr = _address(t)
    troika.context().allreduce_wait(full, ptr, ptr, _F32, t.shape, _troika.SUM, 1.0, 1.0, 0)


def mx_modes(kind, nbytes):
    t = mx.nd.zeros((nbytes // 4,), dtype="float32")
    name = "bench/latency" if kind == "latency" else "bench/%d" % nbytes

    def engine(n):
        for _ in range(n):
            hvd.allreduce_(t, op=hvd.Sum, name=name)
            t.wait_to_read()

    def blocking(n):
        for _ in range(n):
            blocking_allreduce(t, "allreduce." + name)

    return [("hvd.allreduce_", engine), ("blocking", blocking)]


class BlockingTrainer(mx.gluon.Trainer):
    """DistributedTrainer's averaging, by the blocking route (for comparison only)."""

    def _allreduce_grads(self):
        for i, param in enumerate(self._params):
            if param.grad_req != "null":
                blocking_allreduce(param.list_grad()[0], "allreduce.blocking.%d" % i)

    def step(self, batch_size, ignore_stale_grad=False):
        super().step(batch_size * hvd.size(), ignore_stale_grad)  # Sum, then / global batch


def training_modes(args):
    def make(trainer_class, **kw):
        mx.random.seed(0)
        net = mx.gluon.nn.HybridSequential()
        for _ in range(args.layers):
            net.add(mx.gluon.nn.Dense(args.width, activation="relu"))
        net.add(mx.gluon.nn.Dense(10))
        net.initialize(mx.init.Xavier())
        net.hybridize()
        x = mx.nd.random.normal(shape=(args.batch_size, args.width))
        y = mx.nd.array(np.random.RandomState(hvd.rank()).randint(0, 10, args.batch_size))
        net(x)
        trainer = trainer_class(net.collect_params(), "sgd", {"learning_rate": 0.01}, **kw)
        loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()

        def run(n):
            for _ in range(n):
                with mx.autograd.record():
                    loss = loss_fn(net(x), y)
                loss.backward()
                trainer.step(args.batch_size)
            mx.nd.waitall()

        return run

    return [("DistributedTrainer (engine)", make(hvd.DistributedTrainer, prefix="engine.")),
            ("blocking trainer", make(BlockingTrainer, kvstore=None))]


def slowest(values):
    return hvd.allreduce(mx.nd.array(values, dtype="float64"), op=hvd.Max,
                         name="mxnet_workloads.slowest").asnumpy().tolist()


def alternate(label, modes, warmup, reference, args):
    """Runs every mode in alternating blocks; rank 0 prints the slowest rank's time per
    iteration of each."""
    for _, fn in modes:
        fn(warmup)
    start = time.perf_counter()
    reference(warmup)
    per_iter = slowest([(time.perf_counter() - start) / warmup])[0]
    iters = max(1, round(args.block_seconds / per_iter))
    total = {name: 0.0 for name, _ in modes}
    for b in range(args.blocks):
        shift = b % len(modes)
        for name, fn in modes[shift:] + modes[:shift]:
            start = time.perf_counter()
            fn(iters)
            total[name] += time.perf_counter() - start
    worst = slowest([total[name] for name, _ in modes])
    if hvd.rank() == 0:
        n = iters * args.blocks
        for i, (name, _) in enumerate(modes):
            print("%s %s: %.1f us per iteration (%d ranks, %d x %d iterations)"
                  % (label, name, 1e6 * worst[i] / n, hvd.size(), args.blocks, iters),
                  flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--blocks", type=int, default=6)
    p.add_argument("--block-seconds", type=float, default=0.4)
    p.add_argument("--skip-training", action="store_true")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--loop-lib", default=workload_loop.DEFAULT)
    args = p.parse_args()
    hvd.init()
    lib = workload_loop.load(args.loop_lib)
    address = troika.context().address
    seconds = ctypes.c_double()
    for workload in filter(None, args.workloads.split(",")):
        kind, nbytes, warmup = WORKLOADS[workload]
        native = lib.troika_bench_workload_new(kind.encode(), nbytes, 1, hvd.size())

        def cpp(n, native=native):
            if lib.troika_bench_workload_run(native, address, n, ctypes.byref(seconds)) != 0:
                raise RuntimeError("the C++ loop failed (its error is on stderr)")

        alternate(workload, [("c++ api", cpp)] + mx_modes(kind, nbytes), warmup, cpp, args)
        lib.troika_bench_workload_free(native)
    if not args.skip_training:
        modes = training_modes(args)
        alternate("training_step", modes, 3, modes[0][1], args)
    hvd.shutdown()


if __name__ == "__main__":
    main()
