#!/usr/bin/env python3
"""examples/tensorflow2/tensorflow2_synthetic_benchmark.py's benchmark (same models, batch,
step, loop and report) on tf.distribute.MultiWorkerMirroredStrategy: one worker of a
multi-worker job described by TF_CONFIG, one replica per worker. bench/tf_bench.py starts N of
them on localhost beside the Troika run.

Takes the example's arguments, and --implementation (the collective implementation: ring, auto
or nccl; TensorFlow's CPU collectives are ring). The step is the example's: forward, backward,
gradients all-reduced (by the Keras optimizer under the strategy: one batched SUM all-reduce of
every gradient, with the loss divided by the global batch, so the update is the average's) and
applied, in one tf.function called through strategy.run. The strategy makes rank 0's initial
values every worker's when the variables are created.
"""

import argparse
import json
import os
import sys

import tensorflow as tf
import keras

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                                "tensorflow2"))
import tensorflow2_synthetic_benchmark as synthetic  # noqa: E402


def main():
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--implementation", default="ring", choices=("ring", "auto", "nccl"))
    ours, rest = p.parse_known_args()
    args = synthetic.parse_args(rest)
    if args.fp16_allreduce or args.groups:
        raise SystemExit("--fp16-allreduce, --groups: not in the MultiWorkerMirroredStrategy "
                         "version")
    device = synthetic.configure(args)
    config = json.loads(os.environ["TF_CONFIG"])
    size = len(config["cluster"]["worker"])
    rank = config["task"]["index"]
    # bench/tf_bench.py starts every worker on this machine: local rank = rank.
    device = synthetic.pin_gpu(device, rank, size)
    implementation = getattr(tf.distribute.experimental.CommunicationImplementation,
                             ours.implementation.upper())
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=implementation))
    assert strategy.num_replicas_in_sync == size, strategy.num_replicas_in_sync

    with strategy.scope():
        model = synthetic.make_model(args.model, args.image_size)
        opt = keras.optimizers.SGD(0.01 * size)
        opt.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    global_batch = args.batch_size * size
    data, target = synthetic.synthetic_batch(args)

    def replica_step():
        with tf.GradientTape() as tape:
            per_example = loss_fn(target, model(data, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        # Under the strategy, the optimizer sums the gradients over the replicas first.
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step():
        # This worker's loss (as the example's step returns its rank's): no collective more.
        return strategy.experimental_local_results(strategy.run(replica_step))[0]

    def gather_means(mean):
        @tf.function
        def gather():
            ctx = tf.distribute.get_replica_context()
            return ctx.all_gather(tf.constant([mean], tf.float64), axis=0)
        return strategy.experimental_local_results(strategy.run(gather))[0].numpy().tolist()

    synthetic.run(args, train_step, size, rank, gather_means, device)


if __name__ == "__main__":
    main()
