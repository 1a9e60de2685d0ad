#!/usr/bin/env python3
"""An elastic TensorFlow job written against horovod.tensorflow.elastic, for
run_elastic_tf_test.py:

    troikarun -np 3 --min-np 2 -- python3 elastic_job.py --mode keras --pid-dir DIR

--mode keras: a Keras model trained eagerly in a tf.function with hvd.DistributedGradientTape,
its state a TensorFlowKerasState. --mode v1: a tf.compat.v1 graph and session trained with
hvd.DistributedOptimizer, its state a TensorFlowState. Both commit every --commit-every
batches; when a rank is lost, hvd.elastic.run restores the last commit and the survivors go on
as the job's next generation.

Prints, per rank: "reset: rank R of N at MS (restored to epoch E batch B, T batches in all; it
had trained U)" after each membership change (MS: unix time in ms; U - T batches were lost),
and at the end "done epochs E size N weights H" (H: a hash of the weights' bits). Writes its
pid to DIR/pid.<TROIKA_RANK> once it has trained a few batches.
"""

import argparse
import hashlib
import os
import time

import numpy as np
import tensorflow as tf

import troika.tensorflow as hvd


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["keras", "v1"], default="keras")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batches", type=int, default=40, help="batches per epoch")
    p.add_argument("--commit-every", type=int, default=5)
    p.add_argument("--batch-sleep-ms", type=float, default=20)
    p.add_argument("--pid-dir", default="")
    return p.parse_args()


def data(total, rank):
    """Batch number `total` of a rank: 16 rows of a linear target."""
    rng = np.random.default_rng(100000 * rank + total)
    x = rng.normal(size=[16, 8]).astype(np.float32)
    return x, (x @ np.arange(8, dtype=np.float32).reshape(8, 1)) / 8.0


class Progress:
    """What this process did, for its report: batches it trained in all, and its pid file."""

    def __init__(self, args, state):
        self.args, self.state = args, state
        self.member = int(os.environ.get("TROIKA_RANK", "0"))  # the rank it started as
        self.total = 0
        self.wrote_pid = False

    def on_reset(self):
        s = self.state
        print("reset: rank %d of %d at %d (restored to epoch %d batch %d, %d batches in all; it "
              "had trained %d)" % (hvd.rank(), hvd.size(), int(time.time() * 1000), s.epoch,
                                   s.batch, s.total, self.total), flush=True)

    def trained(self):
        s, args = self.state, self.args
        s.batch += 1
        s.total += 1
        self.total = s.total
        time.sleep(args.batch_sleep_ms / 1000)
        if s.total % args.commit_every == 0:
            s.commit()
        if args.pid_dir and not self.wrote_pid and s.total >= 3:
            path = os.path.join(args.pid_dir, "pid.%d" % self.member)
            with open(path + ".tmp", "w") as f:
                f.write("%d\n" % os.getpid())
            os.rename(path + ".tmp", path)
            self.wrote_pid = True


def loop(state, progress, step):
    args = progress.args
    while state.epoch < args.epochs:
        while state.batch < args.batches:
            step(*data(state.total, hvd.rank()))
            progress.trained()
        state.batch = 0
        state.epoch += 1


def digest(arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def keras_job(args):
    tf.keras.utils.set_random_seed(hvd.rank())  # every rank starts elsewhere: sync makes it 0's
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, "tanh"),
                                 tf.keras.layers.Dense(1)])
    opt = tf.keras.optimizers.SGD(0.01, momentum=0.9)
    state = hvd.elastic.TensorFlowKerasState(model, opt, epoch=0, batch=0, total=0)
    progress = Progress(args, state)
    state.register_reset_callbacks([progress.on_reset])

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        tape = hvd.DistributedGradientTape(tape)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))

    hvd.elastic.run(lambda state: loop(state, progress, step))(state)
    return state, [v.numpy() for v in model.variables]


def v1_job(args):
    with tf.Graph().as_default():
        rng = np.random.default_rng(hvd.rank())
        w = tf.compat.v1.get_variable("w", initializer=rng.normal(size=[8, 1]).astype(np.float32))
        b = tf.compat.v1.get_variable("b", initializer=np.zeros([1], np.float32))
        x = tf.compat.v1.placeholder(tf.float32, [None, 8])
        y = tf.compat.v1.placeholder(tf.float32, [None, 1])
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(0.01, 0.9))
        train_op = opt.minimize(loss)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            state = hvd.elastic.TensorFlowState(session=sess, epoch=0, batch=0, total=0)
            progress = Progress(args, state)
            state.register_reset_callbacks([progress.on_reset])

            def step(xb, yb):
                sess.run(train_op, feed_dict={x: xb, y: yb})

            hvd.elastic.run(lambda state: loop(state, progress, step))(state)
            return state, sess.run(tf.compat.v1.global_variables())


def main():
    args = parse_args()
    hvd.init()
    state, weights = (keras_job if args.mode == "keras" else v1_job)(args)
    print("done epochs %d size %d weights %s" % (state.epoch, hvd.size(), digest(weights)),
          flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
