#!/usr/bin/env python3
"""torch.distributed's best case for issue 36's "256 x 16 KiB allreduces per step": the 256
float32 tensors flattened into one bucket (torch._utils._flatten_dense_tensors, as DDP's
bucketing and Horovod-style fusion do), one dist.all_reduce of it (gloo), and the results
copied back into the 256 tensors. One rank of N processes started with torchrun's environment
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); bench/shm_compare.py starts them.

Rank 0 prints "torch flat bucket: <steps/s> steps/s (<us> us/step, N ranks, K steps)", the
slowest rank's, the median of --blocks timed blocks of about --block-seconds each.
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tensors", type=int, default=256)
    p.add_argument("--tensor-bytes", type=int, default=16 * 1024)
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--block-seconds", type=float, default=0.3)
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ts = [torch.zeros(args.tensor_bytes // 4) for _ in range(args.tensors)]

    def step():
        flat = _flatten_dense_tensors(ts)
        dist.all_reduce(flat)
        for t, r in zip(ts, _unflatten_dense_tensors(flat, ts)):
            t.copy_(r)

    def slowest(x):
        v = torch.tensor([x], dtype=torch.float64)
        dist.all_reduce(v, op=dist.ReduceOp.MAX)
        return v.item()

    step()
    start = time.perf_counter()
    for _ in range(3):
        step()
    per_step = slowest((time.perf_counter() - start) / 3)
    steps = max(1, round(args.block_seconds / per_step))
    means = []
    for _ in range(args.blocks):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        means.append(slowest((time.perf_counter() - start) / steps))
    s = statistics.median(means)
    if dist.get_rank() == 0:
        print("torch flat bucket: %.2f steps/s (%.1f us/step, %d ranks, %d x %d steps)"
              % (1 / s, s * 1e6, dist.get_world_size(), args.blocks, steps), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
