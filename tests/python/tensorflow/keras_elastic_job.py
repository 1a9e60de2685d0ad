#!/usr/bin/env python3
"""An elastic Keras job written against horovod.keras.elastic (model.fit, KerasState and the
elastic callbacks), for run_keras_elastic_test.py:

    troikarun -np 3 --min-np 2 -- python3 keras_elastic_job.py --pid-dir DIR

Keras 3, or Keras 2 (tf_keras) with TF_USE_LEGACY_KERAS=1: the script is the same (tf.keras).
With KERAS_BACKEND=torch, Keras 3 on the torch backend (``import keras``; no TensorFlow).
The state commits every --commit-every batches and at each epoch's end; when a rank is lost,
hvd.elastic.run restores the last commit, the survivors go on as the job's next generation
(the learning rate scaled to its size, as Horovod's examples do) and model.fit runs the epochs
left.

Prints, per rank: "reset: rank R of N at MS (restored to epoch E batch B; it had trained T
batches)" after each membership change (MS: unix time in ms), and at the end "done epochs E
size N weights H" (H: a hash of the weights' bits). Writes its pid to DIR/pid.<TROIKA_RANK> once
it has trained a few batches.
"""

import argparse
import hashlib
import os
import time

import numpy as np

if os.environ.get("KERAS_BACKEND") == "torch":
    import keras
else:
    import tensorflow as tf

    keras = tf.keras

import troika.keras as hvd  # noqa: E402 - after Keras, as user scripts import it


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batches", type=int, default=20, help="batches per epoch")
    p.add_argument("--commit-every", type=int, default=5)
    p.add_argument("--batch-sleep-ms", type=float, default=40)
    p.add_argument("--pid-dir", default="")
    return p.parse_args()


class Progress(keras.callbacks.Callback):
    """What this process did: the batches it trained, its pid file, its reset report."""

    def __init__(self, args, state):
        super().__init__()
        self.args, self.state = args, state
        self.member = int(os.environ.get("TROIKA_RANK", "0"))  # the rank it started as
        self.trained = 0

    def on_reset(self):
        print("reset: rank %d of %d at %d (restored to epoch %d batch %d; it had trained %d "
              "batches)" % (hvd.rank(), hvd.size(), int(time.time() * 1000), self.state.epoch,
                            self.state.batch, self.trained), flush=True)

    def on_train_batch_end(self, batch, logs=None):
        self.trained += 1
        time.sleep(self.args.batch_sleep_ms / 1000)
        if self.args.pid_dir and self.trained == 3:
            path = os.path.join(self.args.pid_dir, "pid.%d" % self.member)
            with open(path + ".tmp", "w") as f:
                f.write("%d\n" % os.getpid())
            os.rename(path + ".tmp", path)


def main():
    args = parse_args()
    hvd.init()
    keras.utils.set_random_seed(hvd.rank())  # every rank starts elsewhere: sync makes it 0's
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"),
                              keras.layers.Dense(1)])
    lr = 0.01
    model.compile(optimizer=hvd.DistributedOptimizer(
        keras.optimizers.SGD(lr * hvd.size(), momentum=0.9)), loss="mse")
    rng = np.random.default_rng(hvd.rank())
    x = rng.normal(size=(args.batches * 16, 8)).astype(np.float32)
    y = x @ np.arange(8, dtype=np.float32).reshape(8, 1) / 8.0

    state = hvd.elastic.KerasState(model, epoch=0, batch=0)
    progress = Progress(args, state)

    def on_reset():
        model.optimizer.learning_rate.assign(lr * hvd.size())
        progress.on_reset()

    state.register_reset_callbacks([on_reset])
    callbacks = [hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state), progress,
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=args.commit_every)]

    @hvd.elastic.run
    def train(state):
        model.fit(x, y, batch_size=16, epochs=args.epochs - state.epoch, shuffle=False,
                  callbacks=callbacks, verbose=0)

    train(state)
    h = hashlib.sha256()
    for w in model.get_weights():
        h.update(np.ascontiguousarray(w).tobytes())
    print("done epochs %d size %d weights %s" % (state.epoch, hvd.size(), h.hexdigest()[:16]),
          flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
