#!/usr/bin/env python3
"""What one synchronous 4-byte allreduce costs the calling thread, through the C++ API: the
latency workload of troika-bench (bench/workloads.h, the same call as its "troika" column),
looped in C++ (BUILD/bench/libtroika_bench_loop.so, called with ctypes) on this process's own
context, in blocks after a warm-up. With one rank no peer is waited for, so the time is
Troika's own: the schedule's match and bookkeeping, the executor's turn, the data plane's
call. The warm-up matters: absl's clock reads the kernel's clock (about 35 ns on the 2-core
VM) for a process's first seconds and its calibrated cycle clock (13-16 ns) after.

    PYTHONPATH=build/python build/agent/troikarun -np 1 -- python3 bench/call_cost.py

Rank 0 prints the median of the blocks' ns per call and every block's. More ranks run too (the
time then includes the waits for the peers).
"""

import argparse
import ctypes
import os
import statistics
import time

import troika
import workload_loop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    p = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--iters", type=int, default=200000, help="calls per block")
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--warmup-s", type=float, default=4.0,
                   help="seconds between the first calls and the timed ones (absl's clock "
                        "calibrates)")
    args = p.parse_args()

    troika.init()
    lib = workload_loop.load(os.path.join(args.build, "bench", "libtroika_bench_loop.so"))
    workload = lib.troika_bench_workload_new(b"latency", 4, 1, troika.size())
    if not workload:
        raise RuntimeError("troika_bench_workload_new failed")
    address = troika.context().address
    seconds = ctypes.c_double()

    def run(n):
        if lib.troika_bench_workload_run(workload, address, n, ctypes.byref(seconds)) != 0:
            raise RuntimeError("troika_bench_workload_run failed (see stderr)")
        return seconds.value

    try:
        # Every rank makes the same calls (a count, not a time), so none waits in a collective
        # the others never make.
        run(20000)
        time.sleep(args.warmup_s)
        run(20000)
        blocks = [run(args.iters) / args.iters * 1e9 for _ in range(args.blocks)]
    finally:
        lib.troika_bench_workload_free(workload)
    if troika.rank() == 0:
        print("call_cost: %d rank(s), 4-byte allreduce through the C++ API: %.0f ns a call "
              "(median of %d blocks of %d: %s)" % (troika.size(), statistics.median(blocks),
                                                    args.blocks, args.iters,
                                                    " ".join("%.0f" % b for b in blocks)))
    troika.shutdown()


if __name__ == "__main__":
    main()
