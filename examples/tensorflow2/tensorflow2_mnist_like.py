#!/usr/bin/env python3
"""Data-parallel training of a small MNIST-sized CNN in a custom TensorFlow 2 loop, written
against the horovod.tensorflow API: a tf.function train step with DistributedGradientTape,
rank 0's weights broadcast after the first step, the epoch's loss averaged over the ranks.

The data is synthetic and generated here from --seed (no download): 28x28 single-channel
images of 10 classes, each class a fixed random stroke pattern plus noise and a random shift,
so the network has something real to learn. Every rank generates the same data set and trains
on its own shard (every size()-th sample, starting at its rank).

    PYTHONPATH=build/python build/agent/troikarun -np 2 -- \\
        build/venv/bin/python examples/tensorflow2/tensorflow2_mnist_like.py --epochs 3

With Horovod, change the import line to `import horovod.tensorflow as hvd` and launch with
`horovodrun -np 2 python3 ...`; nothing else differs.
"""

import argparse
import time

import numpy as np
import tensorflow as tf
import keras

import troika.tensorflow as hvd


def parse_args():
    p = argparse.ArgumentParser(description="MNIST-like CNN on synthetic data, custom TF2 loop "
                                "(hvd API)",
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


def synthetic_mnist(num_samples, seed):
    """(images [N,28,28,1] float32 in [0,1], labels [N] int64), the same for a given seed."""
    rng = np.random.default_rng(seed)
    templates = (rng.random((10, 20, 20)) > 0.75).astype(np.float32)
    labels = rng.integers(0, 10, num_samples)
    images = np.zeros((num_samples, 28, 28), dtype=np.float32)
    shifts = rng.integers(0, 9, (num_samples, 2))
    for i, (dy, dx) in enumerate(shifts):
        images[i, dy:dy + 20, dx:dx + 20] = templates[labels[i]]
    images = np.clip(images + 0.3 * rng.standard_normal(images.shape), 0, 1)
    return images[..., None].astype(np.float32), labels


def make_model():
    """The classic small MNIST CNN: two conv layers, two fully connected."""
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(10, 5, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(20, 5, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(50, activation="relu"),
        keras.layers.Dense(10),
    ])


def main():
    args = parse_args()
    # Horovod's advice for CPU training: one intra-op thread per rank.
    tf.config.threading.set_intra_op_parallelism_threads(1)
    hvd.init()

    images, labels = synthetic_mnist(args.num_samples, args.seed)
    # This rank's shard; shards of equal size, so that every rank makes as many steps (each
    # step's allreduces need every rank).
    n = len(labels) // hvd.size() * hvd.size()
    images, labels = images[hvd.rank():n:hvd.size()], labels[hvd.rank():n:hvd.size()]

    # Every rank starts elsewhere: the broadcast after the first step gives them rank 0's
    # weights and optimizer state.
    keras.utils.set_random_seed(args.seed + hvd.rank())
    model = make_model()
    # Scale the learning rate by the number of ranks (the effective batch grows with it).
    opt = keras.optimizers.SGD(args.lr * hvd.size(), momentum=args.momentum)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

    # The batch dimension left open: a short last batch does not trace the step again.
    @tf.function(reduce_retracing=True)
    def train_step(x, y, first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        # Each gradient is averaged over the ranks as the backward pass produces it.
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        # After the first step, once the optimizer's variables exist (Keras 3:
        # opt.variables is a list): rank 0's state on every rank.
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)
        return loss

    if hvd.rank() == 0:
        print("tensorflow2_mnist_like: %d ranks, %d samples (%d per rank), batch %d per rank, "
              "%d epochs" % (hvd.size(), args.num_samples, len(labels), args.batch_size,
                             args.epochs), flush=True)
    epoch_losses = []
    steps = 0
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        # This rank's shard in a new order every epoch.
        order = np.random.default_rng(args.seed * 1000 + epoch).permutation(len(labels))
        total, batches = 0.0, 0
        for b, i in enumerate(range(0, len(order), args.batch_size)):
            idx = order[i:i + args.batch_size]
            loss = float(train_step(tf.constant(images[idx]), tf.constant(labels[idx]),
                                    steps == 0))
            total += loss
            batches += 1
            steps += 1
            if hvd.rank() == 0 and b % args.log_interval == 0:
                print("epoch %d [%d/%d]\tloss: %.6f" % (epoch, i, len(order), loss), flush=True)
        # The epoch's mean loss over every rank's batches.
        epoch_loss = float(hvd.allreduce(tf.constant(total / max(batches, 1)),
                                         name="avg_loss"))
        epoch_losses.append(epoch_loss)
        if hvd.rank() == 0:
            print("epoch %d: mean loss %.4f" % (epoch, epoch_loss), flush=True)
    elapsed = time.perf_counter() - start

    logits = model(images, training=False)
    correct = float(tf.reduce_mean(tf.cast(tf.argmax(logits, 1) == labels, tf.float32)))
    accuracy = float(hvd.allreduce(tf.constant(correct), name="avg_accuracy"))
    # The ranks started from rank 0's weights and applied the same averaged gradients: their
    # weights are the same (a checksum of each rank's, gathered).
    checksum = tf.add_n([tf.reduce_sum(tf.abs(tf.cast(v, tf.float64)))
                         for v in model.trainable_variables])
    checksums = hvd.allgather(tf.reshape(checksum, [1]), name="weights_checksum").numpy()
    same = bool(np.all(checksums == checksums[0]))
    if hvd.rank() == 0:
        print("tensorflow2_mnist_like done: %d ranks, %d epochs, %d steps, %.2f s, "
              "loss %.4f -> %.4f, train accuracy %.3f, same weights on every rank: %s"
              % (hvd.size(), args.epochs, steps, elapsed, epoch_losses[0], epoch_losses[-1],
                 accuracy, "yes" if same else "NO (%s)" % checksums.tolist()), flush=True)


if __name__ == "__main__":
    main()
