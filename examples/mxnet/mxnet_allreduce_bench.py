#!/usr/bin/env python3
"""A large in-place allreduce through the horovod.mxnet API, timed: hvd.allreduce_ of one
float32 NDArray (default 64 MiB, op=hvd.Sum), --warmup iterations, then --iters timed ones,
each waited for (wait_to_read: MXNet's engine runs the op asynchronously).

    PYTHONPATH=build/python build/agent/troikarun -np 2 -- \\
        build/venv-mxnet/bin/python examples/mxnet/mxnet_allreduce_bench.py

TROIKA_BENCH_IMPL=horovod imports horovod.mxnet instead of troika.mxnet (launch with
horovodrun); nothing else differs.

Rank 0 prints one line: "allreduce_ 64 MiB float32, N ranks: X ms per iteration (median Y
ms), algbw A GB/s, busbw B GB/s", where the time per iteration is the slowest rank's mean
over the timed loop, algbw = bytes / time and busbw = algbw * 2 (N - 1) / N (nccl-tests'
convention, as troika-bench's). Afterwards every rank checks the result (ones summed over
--warmup + --iters rounds: every element N ** rounds).
"""

import argparse
import os
import time

import mxnet as mx
import numpy as np

IMPL = os.environ.get("TROIKA_BENCH_IMPL", "troika")
if IMPL == "horovod":
    import horovod.mxnet as hvd
elif IMPL == "troika":
    import troika.mxnet as hvd
else:
    raise SystemExit("TROIKA_BENCH_IMPL=%s: expected troika or horovod" % IMPL)


def parse_args():
    p = argparse.ArgumentParser(description="hvd.allreduce_ of a large float32 NDArray",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--mib", type=float, default=64, help="the tensor's size in MiB")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=10)
    return p.parse_args()


def main():
    args = parse_args()
    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    count = int(args.mib * (1 << 20)) // 4
    nbytes = count * 4
    tensor = mx.nd.ones((count,), dtype="float32")
    tensor.wait_to_read()

    def once():
        hvd.allreduce_(tensor, op=hvd.Sum, name="allreduce_bench")
        tensor.wait_to_read()

    for _ in range(args.warmup):
        once()
    # Every rank leaves the warm-up before any starts its clock.
    hvd.allreduce(mx.nd.zeros((1,)), name="allreduce_bench_sync").wait_to_read()
    times = []
    start = time.perf_counter()
    for _ in range(args.iters):
        t0 = time.perf_counter()
        once()
        times.append(time.perf_counter() - t0)
    mean = (time.perf_counter() - start) / args.iters
    # The slowest rank's mean and median.
    gathered = hvd.allgather(mx.nd.array([[mean, float(np.median(times))]], dtype="float64"),
                             name="allreduce_bench_times").asnumpy()
    mean, med = gathered[:, 0].max(), gathered[:, 1].max()

    expected = float(size) ** (args.warmup + args.iters)
    result = tensor.asnumpy()
    ok = bool(np.all(result == expected))
    got = result[:4]
    algbw = nbytes / mean / 1e9
    busbw = algbw * 2 * (size - 1) / size
    if rank == 0:
        print("allreduce_ %g MiB float32, %d ranks (%s): %.2f ms per iteration (median %.2f ms),"
              " algbw %.3f GB/s, busbw %.3f GB/s" % (nbytes / (1 << 20), size, IMPL, mean * 1e3,
                                                    med * 1e3, algbw, busbw), flush=True)
    if not ok:
        raise SystemExit("rank %d: wrong result %s (expected %g)" % (rank, got, expected))


if __name__ == "__main__":
    main()
