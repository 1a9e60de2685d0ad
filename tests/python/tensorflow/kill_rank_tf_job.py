#!/usr/bin/env python3
"""One rank SIGKILLs itself mid-training in a plain (not elastic) TensorFlow job; every other
rank must raise Troika's error naming it soon after. The TensorFlow counterpart of
tests/python/kill_rank_job.py, run by run_tf_kill_test.py:

    TROIKA_KILL_TEST_DIR=DIR troikarun -np N -- python3 kill_rank_tf_job.py --mode MODE

--mode fit: Keras (``import troika.keras as hvd``) model.fit with hvd.DistributedOptimizer and
the callbacks (BroadcastGlobalVariablesCallback, MetricAverageCallback); Keras 3, or Keras 2
(tf_keras) with TF_USE_LEGACY_KERAS=1, or Keras 3 on the torch backend with KERAS_BACKEND=torch
(no TensorFlow imported: troika.keras over troika.torch). The victim kills itself in a callback
before its batch KILL_STEP, so the others are inside that batch's train step, waiting in
allreduces it never submits.
--mode tape: ``import troika.tensorflow as hvd``, a custom loop whose step is a tf.function with
hvd.DistributedGradientTape; the victim kills itself before its step KILL_STEP.
--mode tape-eager: the same loop without tf.function; the victim kills itself between its
forward and backward pass, as kill_rank_job.py does.

The victim (rank VICTIM) writes the time to DIR/killed-at first. Each survivor catches the
error, which must be the one that users see (what model.fit or the step raises), and writes
DIR/rank<R>: "raised-after <seconds since the kill> <type> <message>". One that finishes its
steps without an error writes "no-error"; one that hangs writes nothing (troikarun's agent ends
it). The survivors ignore the SIGTERM that troikarun's agent sends them after the victim's exit,
so that what is measured is the runtime's own detection (the agent still SIGKILLs them later).
"""

import argparse
import os
import signal
import sys
import time

import numpy as np

if os.environ.get("KERAS_BACKEND") != "torch":
    import tensorflow as tf

VICTIM = 1
KILL_STEP = 3
STEPS = 200


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["fit", "tape", "tape-eager"], required=True)
    return p.parse_args()


def kill_self(out):
    """Writes the time to OUT/killed-at, then SIGKILLs this process."""
    with open(os.path.join(out, "killed-at.tmp"), "w") as f:
        f.write("%.6f\n" % time.time())
    os.rename(os.path.join(out, "killed-at.tmp"), os.path.join(out, "killed-at"))
    os.kill(os.getpid(), signal.SIGKILL)


def report(out, rank, error):
    raised = time.time()
    with open(os.path.join(out, "killed-at")) as f:
        killed = float(f.read())
    message = " ".join(str(error).split())
    kind = type(error).__module__ + "." + type(error).__name__
    with open(os.path.join(out, "rank%d" % rank), "w") as f:
        f.write("raised-after %.3f %s %s\n" % (raised - killed, kind, message))
    print("rank %d: %s raised %.3f s after the kill: %s" % (rank, kind, raised - killed,
                                                            message[:300]), flush=True)


def data(rank, rows):
    rng = np.random.default_rng(rank)
    x = rng.normal(size=(rows, 32)).astype(np.float32)
    return x, x[:, :4] * 0.5


def train_fit(out):
    import troika.keras as hvd
    if os.environ.get("KERAS_BACKEND") == "torch":
        import keras
    else:
        keras = tf.keras

    class KillAt(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if hvd.rank() == VICTIM and batch == KILL_STEP:
                kill_self(out)

    hvd.init()
    keras.utils.set_random_seed(hvd.rank())
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(4)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
    x, y = data(hvd.rank(), STEPS * 16)
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback(), KillAt()]
    try:
        model.fit(x, y, batch_size=16, epochs=1, shuffle=False, callbacks=callbacks, verbose=0)
    except Exception as e:  # whatever model.fit raises is what users see: checked outside
        report(out, hvd.rank(), e)
        sys.exit(0)
    return hvd.rank()


def train_tape(out, eager):
    import troika.tensorflow as hvd
    hvd.init()
    r = hvd.rank()
    tf.random.set_seed(r)
    model = tf.keras.Sequential([tf.keras.Input((32,)),
                                 tf.keras.layers.Dense(64, activation="relu"),
                                 tf.keras.layers.Dense(4)])
    opt = tf.keras.optimizers.SGD(0.01)
    x, y = data(r, STEPS * 16)

    def step(i, xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
        if eager and r == VICTIM and i == KILL_STEP:
            kill_self(out)
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    if not eager:
        step = tf.function(step)
    try:
        for i in range(STEPS):
            if i == 1:  # after the first step, as Horovod's examples do
                hvd.broadcast_variables(model.variables, root_rank=0)
                hvd.broadcast_variables(opt.variables, root_rank=0)
            if not eager and r == VICTIM and i == KILL_STEP:
                kill_self(out)
            step(tf.constant(i), x[16 * i:16 * (i + 1)], y[16 * i:16 * (i + 1)])
    except Exception as e:  # checked outside: the type and message users see
        report(out, r, e)
        sys.exit(0)
    return r


def main():
    args = parse_args()
    out = os.environ["TROIKA_KILL_TEST_DIR"]
    signal.signal(signal.SIGTERM, lambda *_: None)
    if args.mode == "fit":
        rank = train_fit(out)
    else:
        rank = train_tape(out, args.mode == "tape-eager")
    with open(os.path.join(out, "rank%d" % rank), "w") as f:
        f.write("no-error\n")


if __name__ == "__main__":
    main()
