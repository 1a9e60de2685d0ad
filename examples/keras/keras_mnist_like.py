#!/usr/bin/env python3
"""Data-parallel model.fit of a small MNIST-sized CNN with Keras 3, written against the
horovod.tensorflow.keras API: DistributedOptimizer and Horovod's callbacks (the start broadcast
from rank 0, metrics averaged over the ranks, learning rate warmup).

The data is synthetic and generated here from --seed (no download): 28x28 single-channel
images of 10 classes, each class a fixed random stroke pattern plus noise and a random shift,
so the network has something real to learn. Every rank generates the same data set and trains
on its own shard (every size()-th sample, starting at its rank); the validation set is sharded
the same way, and MetricAverageCallback averages its metrics over the ranks.

    PYTHONPATH=build/python build/agent/troikarun -np 2 -- \\
        build/venv/bin/python examples/keras/keras_mnist_like.py --epochs 3

On Keras' torch backend (troika.keras over troika.torch, no TensorFlow needed), the same script:

    KERAS_BACKEND=torch PYTHONPATH=build/python build/agent/troikarun -np 2 -- \\
        build/venv-torch2/bin/python examples/keras/keras_mnist_like.py --epochs 3

With Horovod (TensorFlow backend only), change the import line to `import horovod.keras as hvd`
(or `horovod.tensorflow.keras`) and launch with `horovodrun -np 2 python3 ...`; nothing else
differs.
"""

import argparse
import os
import time

import numpy as np

if os.environ.get("KERAS_BACKEND") == "torch":
    import torch
else:
    import tensorflow as tf
import keras

import troika.keras as hvd  # troika.tensorflow.keras: the same names, TensorFlow only


def parse_args():
    p = argparse.ArgumentParser(description="MNIST-like CNN on synthetic data, model.fit "
                                "(hvd Keras API)",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="per-rank batch size")
    p.add_argument("--lr", type=float, default=0.02, help="learning rate for one rank")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--warmup-epochs", type=int, default=1,
                   help="epochs over which the rate rises from lr to lr * size()")
    p.add_argument("--num-samples", type=int, default=2048, help="size of the training set")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--fp16-allreduce", action="store_true",
                   help="fp16 compression of the gradients' allreduce")
    p.add_argument("--checkpoint-dir", default=None,
                   help="rank 0 saves the model there after every epoch")
    p.add_argument("--verbose", type=int, default=2, help="rank 0's fit() verbosity")
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
    if keras.backend.backend() == "torch":
        torch.set_num_threads(1)
    else:
        tf.config.threading.set_intra_op_parallelism_threads(1)
    hvd.init()

    # The training set, then a quarter as many validation samples of the same classes.
    images, labels = synthetic_mnist(args.num_samples + args.num_samples // 4, args.seed)
    val_images, val_labels = images[args.num_samples:], labels[args.num_samples:]
    images, labels = images[:args.num_samples], labels[:args.num_samples]
    # This rank's shards.
    images, labels = images[hvd.rank()::hvd.size()], labels[hvd.rank()::hvd.size()]
    val_images = val_images[hvd.rank()::hvd.size()]
    val_labels = val_labels[hvd.rank()::hvd.size()]

    # Every rank starts elsewhere: BroadcastGlobalVariablesCallback gives them rank 0's start.
    keras.utils.set_random_seed(args.seed + hvd.rank())
    model = make_model()
    # Scale the learning rate by the number of ranks (the effective batch grows with it).
    scaled_lr = args.lr * hvd.size()
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(scaled_lr, momentum=args.momentum),
                                   compression=compression)
    # XLA cannot call Troika's collectives: keep the train step uncompiled (Keras' default,
    # jit_compile="auto", compiles it with XLA when a GPU is present on TensorFlow; on the torch
    # backend it is off).
    model.compile(optimizer=opt,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], jit_compile=False)

    callbacks = [
        # Rank 0's initial weights and optimizer state on every rank.
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Every epoch's metrics averaged over the ranks (before other metric callbacks).
        hvd.callbacks.MetricAverageCallback(),
        # lr / size() rising to lr over the first epochs ("Accurate, Large Minibatch SGD").
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr,
                                                 warmup_epochs=args.warmup_epochs,
                                                 verbose=1),
    ]
    if hvd.rank() == 0 and args.checkpoint_dir:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        callbacks.append(keras.callbacks.ModelCheckpoint(
            os.path.join(args.checkpoint_dir, "checkpoint-{epoch}.keras")))

    if hvd.rank() == 0:
        print("keras_mnist_like: %d ranks, %d samples (%d per rank), batch %d per rank, "
              "%d epochs" % (hvd.size(), args.num_samples, len(labels), args.batch_size,
                             args.epochs), flush=True)
    start = time.perf_counter()
    history = model.fit(images, labels, batch_size=args.batch_size, epochs=args.epochs,
                        validation_data=(val_images, val_labels), callbacks=callbacks,
                        verbose=args.verbose if hvd.rank() == 0 else 0)
    elapsed = time.perf_counter() - start

    if hvd.rank() == 0:
        losses = history.history["loss"]
        print("keras_mnist_like done: %d ranks, %d epochs in %.1f s, loss %.4f -> %.4f, "
              "val_accuracy %.3f" % (hvd.size(), args.epochs, elapsed, losses[0], losses[-1],
                                     history.history["val_accuracy"][-1]), flush=True)


if __name__ == "__main__":
    main()
