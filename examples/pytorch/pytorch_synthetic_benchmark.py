#!/usr/bin/env python3
"""Synthetic training benchmark in the style of Horovod's pytorch_synthetic_benchmark.py,
written against the horovod.torch API: every rank trains the same model on a fixed random
batch and reports images per second.

    troikarun -np 4 -- python3 examples/pytorch/pytorch_synthetic_benchmark.py --model resnet

Runs on the GPU of each rank's local rank when torch sees one per local rank (--no-cuda: on
the CPU; on the CPU too, with a note, when the node has fewer GPUs than ranks). The
models are defined here (torchvision may be absent) and sized for CPUs: inputs are
3 x --image-size x --image-size (default 32), 10 classes.
- cnn:    two conv layers and two fully connected (~0.55 M parameters at 32x32)
- resnet: a ResNet-20-like net (3 stages of 3 basic blocks, 16/32/64 channels, ~0.27 M)
- mlp:    three fully connected layers on the flattened image (~1.7 M parameters at 32x32)

Output as Horovod's: "Iter #i: X img/sec per GPU" (or CPU; rank 0's), "Img/sec per GPU:
mean +-ci" and "Total img/sec on N GPU(s): size * mean +-ci" (ci = 1.96 standard deviations of
the iterations), plus every rank's own mean. On a GPU each timed iteration ends with
torch.cuda.synchronize(): the figures are of work done, not work queued.
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="PyTorch synthetic benchmark (hvd API)",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", type=str, default="resnet", choices=sorted(MODELS),
                   help="model to benchmark")
    p.add_argument("--batch-size", type=int, default=32, help="input batch size per rank")
    p.add_argument("--image-size", type=int, default=32, help="input images are 3 x S x S")
    p.add_argument("--num-warmup-batches", type=int, default=5,
                   help="number of warm-up batches that don't count towards benchmark")
    p.add_argument("--num-batches-per-iter", type=int, default=10,
                   help="number of batches per benchmark iteration")
    p.add_argument("--num-iters", type=int, default=10, help="number of benchmark iterations")
    p.add_argument("--fp16-allreduce", action="store_true",
                   help="fp16 compression of the gradients' allreduce")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads per rank (torch.set_num_threads)")
    p.add_argument("--no-cuda", action="store_true", help="train on the CPU even with a GPU")
    p.add_argument("--groups", type=int, default=0,
                   help="DistributedOptimizer(groups=N): N grouped allreduces per step "
                        "(0: one allreduce per gradient)")
    return p.parse_args(argv)


class SmallCNN(nn.Module):
    def __init__(self, image_size, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * (image_size // 4) ** 2, 128)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNetTiny(nn.Module):
    """ResNet-20-like: a 16-channel stem, stages of 16, 32 and 64 channels (3 blocks each)."""

    def __init__(self, image_size, classes=10, blocks=3):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(16), nn.ReLU())
        layers, cin = [], 16
        for cout, stride in ((16, 1), (32, 2), (64, 2)):
            for b in range(blocks):
                layers.append(BasicBlock(cin, cout, stride if b == 0 else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class MLP(nn.Module):
    def __init__(self, image_size, classes=10):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * image_size ** 2, 512), nn.ReLU(),
                                 nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, classes))

    def forward(self, x):
        return self.net(x)


MODELS = {"cnn": SmallCNN, "resnet": ResNetTiny, "mlp": MLP}


def make_model(name, image_size):
    torch.manual_seed(0)
    return MODELS[name](image_size)


def use_cuda(args, local_size):
    """Whether each of `local_size` ranks on this node can have a GPU of its own."""
    if args.no_cuda or not torch.cuda.is_available():
        return False
    if torch.cuda.device_count() < local_size:
        print("%d ranks on this node, %d GPUs: training on the CPU"
              % (local_size, torch.cuda.device_count()), flush=True)
        return False
    return True


def synthetic_batch(args, device="cpu"):
    torch.manual_seed(1)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, 10, (args.batch_size,))
    return data.to(device), target.to(device)


def run(args, benchmark_step, size, rank, gather_means, cuda):
    """Warm-up, timed iterations and Horovod's report. gather_means(mean) -> every rank's."""
    device = "GPU" if cuda else "CPU"

    def log(s):
        if rank == 0:
            print(s, flush=True)

    def timed(steps):
        start = time.perf_counter()
        for _ in range(steps):
            benchmark_step()
        if device == "GPU":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    log("Model: %s" % args.model)
    log("Batch size: %d" % args.batch_size)
    log("Number of %ss: %d" % (device, size))
    log("Running warmup...")
    timed(args.num_warmup_batches)
    log("Running benchmark...")
    img_secs = []
    for x in range(args.num_iters):
        t = timed(args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / t
        log("Iter #%d: %.1f img/sec per %s" % (x, img_sec, device))
        img_secs.append(img_sec)
    secs = torch.tensor(img_secs, dtype=torch.float64)
    mean = secs.mean().item()
    conf = 1.96 * (secs.std().item() if len(img_secs) > 1 else 0.0)
    per_rank = gather_means(mean)
    log("Img/sec per %s: %.1f +-%.1f" % (device, mean, conf))
    log("Total img/sec on %d %s(s): %.1f +-%.1f" % (size, device, size * mean, size * conf))
    log("Img/sec of each rank: %s (sum %.1f)"
        % (", ".join("%.1f" % m for m in per_rank), sum(per_rank)))


def main():
    import troika.torch as hvd

    args = parse_args()
    hvd.init()
    torch.set_num_threads(args.threads)
    cuda = use_cuda(args, hvd.local_size())
    device = "cpu"
    if cuda:
        torch.cuda.set_device(hvd.local_rank())
        device = "cuda"

    model = make_model(args.model, args.image_size).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         groups=args.groups if args.groups > 0 else None)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    data, target = synthetic_batch(args, device)

    def benchmark_step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()

    def gather_means(mean):
        return hvd.allgather(torch.tensor([mean], dtype=torch.float64)).tolist()  # on the CPU

    run(args, benchmark_step, hvd.size(), hvd.rank(), gather_means, cuda)


if __name__ == "__main__":
    main()
