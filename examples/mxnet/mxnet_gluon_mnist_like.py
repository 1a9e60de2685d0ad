#!/usr/bin/env python3
"""Data-parallel training of a small Gluon MLP on MNIST-sized synthetic data, written against
the horovod.mxnet API (MXNet 1.9): hvd.init(), hvd.broadcast_parameters() of the net's
parameters before they exist, and hvd.DistributedTrainer in place of gluon.Trainer.

The data is synthetic and generated here from --seed (no download): 28x28 images of 10
classes, each class a fixed random stroke pattern plus noise and a random shift, flattened to
784 features. Every rank generates the same data set and trains on its own shard (every
size()-th sample, starting at its rank).

The layers are declared without in_units, so their weights are initialised only at the first
forward pass (Gluon's deferred initialisation). Every rank seeds its initialiser differently;
broadcast_parameters() is called while the parameters are still deferred, so the broadcast of
rank 0's values happens when they come into existence, in the first forward pass. At the end
rank 0 checks that every rank holds the same weights (a gathered checksum).

    PYTHONPATH=build/python build/agent/troikarun -np 2 -- \\
        build/venv-mxnet/bin/python examples/mxnet/mxnet_gluon_mnist_like.py --epochs 5

With Horovod, change the import line to `import horovod.mxnet as hvd` and launch with
`horovodrun -np 2 python ...`; nothing else differs.
"""

import argparse
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import troika.mxnet as hvd


def parse_args():
    p = argparse.ArgumentParser(description="Gluon MLP on synthetic MNIST-like data (hvd API)",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--lr", type=float, default=0.05,
                   help="learning rate for one rank (multiplied by size())")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--num-samples", type=int, default=2048, help="size of the whole data set")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--log-interval", type=int, default=0,
                   help="batches between loss lines of rank 0 (0: only per epoch)")
    return p.parse_args()


def synthetic_mnist(num_samples, seed):
    """(features [N,784] float32 in [0,1], labels [N] float32), the same for a given seed."""
    rng = np.random.default_rng(seed)
    patterns = (rng.random((10, 18, 18)) > 0.7).astype(np.float32)
    labels = rng.integers(0, 10, num_samples)
    images = np.zeros((num_samples, 28, 28), dtype=np.float32)
    offsets = rng.integers(0, 11, (num_samples, 2))
    for i, (y, x) in enumerate(offsets):
        images[i, y:y + 18, x:x + 18] = patterns[labels[i]]
    images = np.clip(images + 0.25 * rng.standard_normal(images.shape), 0.0, 1.0)
    return images.reshape(num_samples, 784).astype(np.float32), labels.astype(np.float32)


def make_net():
    """784 -> 128 -> 64 -> 10; no in_units anywhere: every weight's shape is inferred at the
    first forward pass."""
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(128, activation="relu"),
            gluon.nn.Dense(64, activation="relu"),
            gluon.nn.Dense(10))
    return net


def main():
    args = parse_args()
    hvd.init()
    ctx = mx.cpu()

    features, labels = synthetic_mnist(args.num_samples, args.seed)
    # Shards of equal size, so that every rank makes as many steps (each step's allreduces
    # need every rank).
    n = len(labels) // hvd.size() * hvd.size()
    features = features[hvd.rank():n:hvd.size()]
    labels = labels[hvd.rank():n:hvd.size()]

    # A different initialisation on every rank: only the broadcast makes them agree.
    mx.random.seed(args.seed + 1000 * hvd.rank())
    net = make_net()
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize()
    params = net.collect_params()
    # The parameters are deferred here (their shapes are not known yet): the broadcast is
    # attached to their initialisation and runs in the first forward pass.
    hvd.broadcast_parameters(params, root_rank=0)

    # Scale the learning rate by the number of ranks (the effective batch grows with it).
    trainer = hvd.DistributedTrainer(params, "sgd", {"learning_rate": args.lr * hvd.size(),
                                                     "momentum": args.momentum})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    if hvd.rank() == 0:
        print("mxnet_gluon_mnist_like: %d ranks, %d samples (%d per rank), batch %d per rank, "
              "%d epochs, lr %g" % (hvd.size(), args.num_samples, len(labels),
                                    args.batch_size, args.epochs, args.lr * hvd.size()),
              flush=True)
    epoch_losses = []
    steps = 0
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = np.random.default_rng(args.seed * 1000 + epoch).permutation(len(labels))
        total, batches = 0.0, 0
        for b, i in enumerate(range(0, len(order), args.batch_size)):
            idx = order[i:i + args.batch_size]
            x = mx.nd.array(features[idx], ctx=ctx)
            y = mx.nd.array(labels[idx], ctx=ctx)
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            # Averages the gradients over the ranks, then applies SGD with 1/len(idx).
            trainer.step(len(idx))
            batch_loss = float(loss.mean().asscalar())
            total += batch_loss
            batches += 1
            steps += 1
            if hvd.rank() == 0 and args.log_interval and b % args.log_interval == 0:
                print("epoch %d [%d/%d]\tloss: %.6f" % (epoch, i, len(order), batch_loss),
                      flush=True)
        # The epoch's mean loss over every rank's batches (hvd.allreduce averages).
        epoch_loss = float(hvd.allreduce(mx.nd.array([total / max(batches, 1)]),
                                         name="epoch_loss").asscalar())
        epoch_losses.append(epoch_loss)
        if hvd.rank() == 0:
            print("epoch %d: mean loss %.4f" % (epoch, epoch_loss), flush=True)
    elapsed = time.perf_counter() - start

    predictions = net(mx.nd.array(features, ctx=ctx)).argmax(axis=1).asnumpy()
    correct = float(np.mean(predictions == labels))
    accuracy = float(hvd.allreduce(mx.nd.array([correct]), name="accuracy").asscalar())
    # Rank 0's initial weights and the same averaged gradients everywhere: the same weights
    # on every rank (a checksum of each rank's, gathered).
    checksum = sum(float(p.data().astype("float64").abs().sum().asscalar())
                   for _, p in sorted(params.items()))
    checksums = hvd.allgather(mx.nd.array([checksum], dtype="float64"),
                              name="checksum").asnumpy()
    same = bool(np.all(checksums == checksums[0]))
    if hvd.rank() == 0:
        print("done: mxnet_gluon_mnist_like, %d ranks, %d epochs, %d steps, %.2f s, "
              "loss %.4f -> %.4f, train accuracy %.3f, same weights on every rank: %s"
              % (hvd.size(), args.epochs, steps, elapsed, epoch_losses[0], epoch_losses[-1],
                 accuracy, "yes" if same else "NO (%s)" % checksums.tolist()), flush=True)
    if not same:
        raise SystemExit("the ranks' weights differ")


if __name__ == "__main__":
    main()
