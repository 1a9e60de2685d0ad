#!/usr/bin/env python3
"""examples/pytorch/pytorch_synthetic_benchmark.py's benchmark (same models, batch, loop and
report) on torch.nn.parallel.DistributedDataParallel over the gloo backend (NCCL on a GPU,
the local rank's, as the example picks it): one rank of a torch.distributed job, from the
environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK) as torchrun sets it. bench/torch_bench.py starts it as separate processes beside the Troika run.
Takes the example's arguments.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "pytorch"))
import pytorch_synthetic_benchmark as synthetic  # noqa: E402


def main():
    args = synthetic.parse_args()
    if args.fp16_allreduce:
        raise SystemExit("--fp16-allreduce: not in the DDP version")
    # torchrun's LOCAL_WORLD_SIZE; bench/torch_bench.py starts every rank on this machine.
    cuda = synthetic.use_cuda(args, int(os.environ.get("LOCAL_WORLD_SIZE",
                                                       os.environ.get("WORLD_SIZE", "1"))))
    device, device_ids = "cpu", None
    if cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device, device_ids = "cuda", [local_rank]
    dist.init_process_group("nccl" if cuda else "gloo")
    size, rank = dist.get_world_size(), dist.get_rank()
    torch.set_num_threads(args.threads)

    model = torch.nn.parallel.DistributedDataParallel(  # broadcasts rank 0's weights
        synthetic.make_model(args.model, args.image_size).to(device), device_ids=device_ids)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * size)
    data, target = synthetic.synthetic_batch(args, device)

    def benchmark_step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    def gather_means(mean):
        out = [torch.zeros(1, dtype=torch.float64, device=device) for _ in range(size)]
        dist.all_gather(out, torch.tensor([mean], dtype=torch.float64, device=device))
        return [o.item() for o in out]

    synthetic.run(args, benchmark_step, size, rank, gather_means, cuda)
    dist.barrier()
    # Not dist.destroy_process_group(): with torch 1.13 (Debian's) rank 0 was seen spinning a
    # core in gloo's shutdown after the others had exited, for minutes. The figures are out.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
