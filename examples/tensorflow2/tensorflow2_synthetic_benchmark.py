#!/usr/bin/env python3
"""Synthetic training benchmark in the style of Horovod's tensorflow2_synthetic_benchmark.py,
written against the horovod.tensorflow API: every rank trains the same Keras 3 model on a fixed
random batch in a tf.function step (DistributedGradientTape; rank 0's weights broadcast after
the first step) and reports images per second.

    PYTHONPATH=build/python build/agent/troikarun -np 4 -- \\
        build/venv/bin/python examples/tensorflow2/tensorflow2_synthetic_benchmark.py

With Horovod, change the import line in main() to `import horovod.tensorflow as hvd` and launch
with `horovodrun`; nothing else differs. The models are defined here and sized for CPUs, as in
examples/pytorch/pytorch_synthetic_benchmark.py: inputs are --image-size x --image-size x 3
(default 32, channels last), 10 classes.
- cnn:    two conv layers and two fully connected (~0.55 M parameters at 32x32)
- resnet: a ResNet-20-like net (3 stages of 3 basic blocks, 16/32/64 channels, ~0.27 M)
- mlp:    three fully connected layers on the flattened image (~1.7 M parameters at 32x32)

Output as Horovod's: "Iter #i: X img/sec per CPU" (or GPU; rank 0's), "Img/sec per CPU:
mean +-ci" and "Total img/sec on N CPU(s): size * mean +-ci" (ci = 1.96 standard deviations of
the iterations), plus every rank's own mean. Each timed iteration ends by reading its last
step's loss, so the figures are of work done, not work queued.

bench/mwms_synthetic_benchmark.py runs the same models, batch, step and report on
tf.distribute.MultiWorkerMirroredStrategy (bench/tf_bench.py runs both).
"""

import argparse
import time

import numpy as np
import tensorflow as tf
import keras


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="TensorFlow 2 synthetic benchmark (hvd API)",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", type=str, default="resnet", choices=sorted(MODELS),
                   help="model to benchmark")
    p.add_argument("--batch-size", type=int, default=32, help="input batch size per rank")
    p.add_argument("--image-size", type=int, default=32, help="input images are S x S x 3")
    p.add_argument("--num-warmup-batches", type=int, default=5,
                   help="number of warm-up batches that don't count towards benchmark")
    p.add_argument("--num-batches-per-iter", type=int, default=10,
                   help="number of batches per benchmark iteration")
    p.add_argument("--num-iters", type=int, default=10, help="number of benchmark iterations")
    p.add_argument("--fp16-allreduce", action="store_true",
                   help="fp16 compression of the gradients' allreduce")
    p.add_argument("--threads", type=int, default=1,
                   help="TensorFlow intra-op threads per rank (0: TensorFlow's default)")
    p.add_argument("--no-gpu", action="store_true", help="train on the CPU even with a GPU")
    p.add_argument("--groups", type=int, default=0,
                   help="DistributedGradientTape(groups=N): N grouped allreduces per step, each "
                        "submitted once all its gradients exist (0: one allreduce per gradient, "
                        "each submitted as the backward pass produces it)")
    return p.parse_args(argv)


def small_cnn(image_size, classes=10):
    return keras.Sequential([
        keras.Input((image_size, image_size, 3)),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(classes),
    ], name="cnn")


def _basic_block(x, channels, stride):
    """Two 3x3 convolutions with batch normalization, and the shortcut (a 1x1 convolution where
    the shape changes)."""
    out = keras.layers.Conv2D(channels, 3, strides=stride, padding="same", use_bias=False)(x)
    out = keras.layers.ReLU()(keras.layers.BatchNormalization()(out))
    out = keras.layers.Conv2D(channels, 3, padding="same", use_bias=False)(out)
    out = keras.layers.BatchNormalization()(out)
    if stride != 1 or x.shape[-1] != channels:
        x = keras.layers.Conv2D(channels, 1, strides=stride, use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
    return keras.layers.ReLU()(keras.layers.Add()([out, x]))


def resnet_tiny(image_size, classes=10, blocks=3):
    """ResNet-20-like: a 16-channel stem, stages of 16, 32 and 64 channels (3 blocks each)."""
    inputs = keras.Input((image_size, image_size, 3))
    x = keras.layers.Conv2D(16, 3, padding="same", use_bias=False)(inputs)
    x = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
    for channels, stride in ((16, 1), (32, 2), (64, 2)):
        for b in range(blocks):
            x = _basic_block(x, channels, stride if b == 0 else 1)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(classes)(x), name="resnet")


def mlp(image_size, classes=10):
    return keras.Sequential([
        keras.Input((image_size, image_size, 3)),
        keras.layers.Flatten(),
        keras.layers.Dense(512, activation="relu"),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(classes),
    ], name="mlp")


MODELS = {"cnn": small_cnn, "resnet": resnet_tiny, "mlp": mlp}


def configure(args):
    """Threads, and the GPU a rank uses: `local_rank`'s when TensorFlow sees one per local rank
    (call before TensorFlow runs anything). Returns "GPU" or "CPU"."""
    if args.threads > 0:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    return "CPU" if args.no_gpu or not tf.config.list_physical_devices("GPU") else "GPU"


def pin_gpu(device, local_rank, local_size):
    """Makes only this rank's GPU visible; "CPU" where there are fewer GPUs than ranks."""
    if device != "GPU":
        tf.config.set_visible_devices([], "GPU")
        return "CPU"
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) < local_size:
        print("%d ranks on this node, %d GPUs: training on the CPU" % (local_size, len(gpus)),
              flush=True)
        tf.config.set_visible_devices([], "GPU")
        return "CPU"
    tf.config.set_visible_devices(gpus[local_rank], "GPU")
    tf.config.experimental.set_memory_growth(gpus[local_rank], True)
    return "GPU"


def make_model(name, image_size):
    return MODELS[name](image_size)


def synthetic_batch(args):
    """The fixed batch: random images and labels, the same on every rank."""
    rng = np.random.default_rng(1)
    data = rng.standard_normal((args.batch_size, args.image_size, args.image_size, 3))
    target = rng.integers(0, 10, args.batch_size)
    return tf.constant(data, tf.float32), tf.constant(target, tf.int64)


def run(args, benchmark_step, size, rank, gather_means, device):
    """Warm-up, timed iterations and Horovod's report. benchmark_step() runs one step and
    returns its loss (a tensor); gather_means(mean) -> every rank's mean."""
    def log(s):
        if rank == 0:
            print(s, flush=True)

    def timed(steps):
        start = time.perf_counter()
        loss = None
        for _ in range(steps):
            loss = benchmark_step()
        float(loss)  # the last step's work is done
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
    mean = float(np.mean(img_secs))
    conf = 1.96 * (float(np.std(img_secs, ddof=1)) if len(img_secs) > 1 else 0.0)
    per_rank = gather_means(mean)
    log("Img/sec per %s: %.1f +-%.1f" % (device, mean, conf))
    log("Total img/sec on %d %s(s): %.1f +-%.1f" % (size, device, size * mean, size * conf))
    log("Img/sec of each rank: %s (sum %.1f)"
        % (", ".join("%.1f" % m for m in per_rank), sum(per_rank)))


def main():
    args = parse_args()
    device = configure(args)
    # After TensorFlow (troika.tensorflow needs it imported first).
    import troika.tensorflow as hvd

    hvd.init()
    device = pin_gpu(device, hvd.local_rank(), hvd.local_size())

    # Each rank initializes its own weights; the broadcast after the first step makes them
    # rank 0's.
    model = make_model(args.model, args.image_size)
    opt = keras.optimizers.SGD(0.01 * hvd.size())
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    data, target = synthetic_batch(args)

    @tf.function
    def train_step(first_batch):
        with tf.GradientTape() as tape:
            loss = loss_fn(target, model(data, training=True))
        # Each gradient's allreduce (Average) starts as the backward pass produces it.
        tape = hvd.DistributedGradientTape(tape, compression=compression,
                                           groups=args.groups if args.groups > 0 else None)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        # Once the variables exist (the optimizer's are made by its first apply): rank 0's
        # model and optimizer state on every rank. Keras 3: opt.variables is a list.
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)
        return loss

    first = [True]

    def benchmark_step():
        loss = train_step(first[0])
        first[0] = False
        return loss

    def gather_means(mean):
        return hvd.allgather(tf.constant([mean], tf.float64)).numpy().tolist()

    run(args, benchmark_step, hvd.size(), hvd.rank(), gather_means, device)


if __name__ == "__main__":
    main()
