#!/usr/bin/env python3
"""Data-parallel training of a small MNIST-sized CNN, written against the horovod.torch API.

The data is synthetic and generated here from --seed (no download): 28x28 single-channel
images of 10 classes, each class a fixed random stroke pattern plus noise and a random shift,
so the network has something real to learn. Every rank generates the same data set and trains
on its own shard (every size()-th sample, starting at its rank).

    troikarun -np 2 -- python3 examples/pytorch/train_mnist_like.py --epochs 3

With Horovod, change the import line to `import horovod.torch as hvd` and launch with
`horovodrun -np 2 python3 ...`; nothing else differs.
"""

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import troika.torch as hvd


def parse_args():
    p = argparse.ArgumentParser(description="MNIST-like CNN on synthetic data (hvd API)",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--lr", type=float, default=0.05, help="learning rate for one rank")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--num-samples", type=int, default=2048, help="size of the whole data set")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--fp16-allreduce", action="store_true",
                   help="fp16 compression of the gradients' allreduce")
    p.add_argument("--log-interval", type=int, default=10, help="batches between loss lines")
    return p.parse_args()


class Net(nn.Module):
    """The classic small MNIST CNN: two conv layers, two fully connected."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


def synthetic_mnist(num_samples, seed):
    """(images [N,1,28,28] float32 in [0,1], labels [N] int64), the same for a given seed."""
    g = torch.Generator().manual_seed(seed)
    templates = (torch.rand(10, 1, 20, 20, generator=g) > 0.75).float()
    labels = torch.randint(0, 10, (num_samples,), generator=g)
    images = torch.zeros(num_samples, 1, 28, 28)
    shifts = torch.randint(0, 9, (num_samples, 2), generator=g)
    for i in range(num_samples):
        dy, dx = shifts[i].tolist()
        images[i, :, dy:dy + 20, dx:dx + 20] = templates[labels[i]]
    images = (images + 0.3 * torch.randn(images.shape, generator=g)).clamp(0, 1)
    return images, labels


def metric_average(value, name):
    """The mean of a scalar over the ranks."""
    return hvd.allreduce(torch.tensor(value), name=name).item()


def main():
    args = parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    # Horovod's advice for CPU training: one intra-op thread per rank.
    torch.set_num_threads(1)

    images, labels = synthetic_mnist(args.num_samples, args.seed)
    # This rank's shard.
    images, labels = images[hvd.rank()::hvd.size()], labels[hvd.rank()::hvd.size()]

    model = Net()
    # Scale the learning rate by the number of ranks (the effective batch grows with it).
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(),
                                momentum=args.momentum)
    # Start every rank from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)

    if hvd.rank() == 0:
        print("train_mnist_like: %d ranks, %d samples (%d per rank), batch %d per rank, "
              "%d epochs" % (hvd.size(), args.num_samples, len(labels), args.batch_size,
                             args.epochs), flush=True)
    epoch_losses = []
    steps = 0
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        model.train()
        # The same shuffle on every rank of this rank's shard order (seeded per epoch).
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(epoch))
        total, batches = 0.0, 0
        for b, i in enumerate(range(0, len(order), args.batch_size)):
            idx = order[i:i + args.batch_size]
            optimizer.zero_grad()
            loss = F.nll_loss(model(images[idx]), labels[idx])
            loss.backward()
            optimizer.step()
            total += loss.item()
            batches += 1
            steps += 1
            if hvd.rank() == 0 and b % args.log_interval == 0:
                print("epoch %d [%d/%d]\tloss: %.6f" % (epoch, i, len(order), loss.item()),
                      flush=True)
        # The epoch's mean loss over every rank's batches.
        epoch_loss = metric_average(total / max(batches, 1), "avg_loss")
        epoch_losses.append(epoch_loss)
        if hvd.rank() == 0:
            print("epoch %d: mean loss %.4f" % (epoch, epoch_loss), flush=True)
    elapsed = time.perf_counter() - start

    model.eval()
    with torch.no_grad():
        correct = (model(images).argmax(1) == labels).float().mean().item()
    accuracy = metric_average(correct, "avg_accuracy")
    if hvd.rank() == 0:
        print("train_mnist_like done: %d ranks, %d epochs, %d steps, %.2f s, loss %.4f -> %.4f, "
              "train accuracy %.3f" % (hvd.size(), args.epochs, steps, elapsed, epoch_losses[0],
                                       epoch_losses[-1], accuracy), flush=True)


if __name__ == "__main__":
    main()
