"""The TensorFlow rank function the engines' tests run (run_ray_test.py through RayExecutor,
tests/python/spark/run_spark_test.py through troika.spark.run): troika.tensorflow and
troika.keras (Keras 3 on TensorFlow, the Keras TensorFlow 2.21 brings) in one job, so that each
rank imports TensorFlow once.

`train(steps)`, on every rank of a job:
1. troika.tensorflow: a float64 MLP (tf.Variables, momentum SGD written out) trained through
   hvd.DistributedGradientTape on global batches of GLOBAL samples, each rank taking its share,
   after hvd.broadcast_variables from rank 0 (every rank starts elsewhere);
2. troika.keras: a float64 Keras model fit with hvd.DistributedOptimizer and
   BroadcastGlobalVariablesCallback on the rank's share of the same batches.
Each is also trained here in plain TensorFlow / Keras on the whole batches, without Troika
(one process's weights): the ranks' weights must be equal to them (float64, TOLERANCE) and the
same on every rank. Returns (rank, size, local_rank, tf weights, tf reference, keras weights,
keras reference, facts): weights as hex floats; facts: the TensorFlow version, the
libtensorflow_framework files mapped in the process, and the op library's path.

`fit_until_killed(progress)`: a Keras fit that runs until the job is aborted; rank 0 touches
`progress` after each step. Returns what the rank's fit raised (its type and message).

Run as a script (under troikarun) each rank prints whether its weights are one process's
(a check by hand)."""

import os

GLOBAL = 60  # samples per step, divisible by 1 to 6 ranks
FEATURES, HIDDEN = 8, 16
TOLERANCE = 1e-9  # relative: float64 sums in another order


def _data(steps):
    import numpy as np
    rng = np.random.RandomState(5)
    return (rng.normal(size=(steps, GLOBAL, FEATURES)),
            rng.normal(size=(steps, GLOBAL, 1)))


def _initial(seed):
    import numpy as np
    rng = np.random.RandomState(seed)
    return [rng.normal(scale=0.3, size=(FEATURES, HIDDEN)), np.zeros(HIDDEN),
            rng.normal(scale=0.3, size=(HIDDEN, 1)), np.zeros(1)]


def _hex(arrays):
    return " ".join(float(v).hex() for a in arrays for v in a.reshape(-1))


def close(a, b):
    x = [float.fromhex(v) for v in a.split()]
    y = [float.fromhex(v) for v in b.split()]
    return len(x) == len(y) and all(abs(p - q) <= TOLERANCE * max(abs(q), 1e-12)
                                    for p, q in zip(x, y))


def _tape_training(tf, hvd, inputs, targets, seed, share):
    """Momentum SGD on the MLP; with hvd, the tape's gradients averaged over the ranks."""
    variables = [tf.Variable(w, dtype=tf.float64) for w in _initial(seed)]
    if hvd is not None:
        hvd.broadcast_variables(variables, root_rank=0)
    velocity = [tf.Variable(tf.zeros_like(v)) for v in variables]
    n = hvd.size() if hvd is not None else 1
    for s in range(inputs.shape[0]):
        x, y = tf.constant(inputs[s][share]), tf.constant(targets[s][share])
        with tf.GradientTape() as tape:
            hidden = tf.tanh(tf.matmul(x, variables[0]) + variables[1])
            out = tf.matmul(hidden, variables[2]) + variables[3]
            # The share's sum scaled so that the ranks' average is the global batch's mean.
            loss = tf.reduce_sum(tf.square(out - y)) * n / GLOBAL
        if hvd is not None:
            tape = hvd.DistributedGradientTape(tape)
        for v, m, g in zip(variables, velocity, tape.gradient(loss, variables)):
            m.assign(0.9 * m + g)
            v.assign_sub(0.1 * m)
    return _hex([v.numpy() for v in variables])


def _keras_model(keras, seed):
    model = keras.Sequential([keras.Input((FEATURES,)),
                              keras.layers.Dense(HIDDEN, activation="tanh"),
                              keras.layers.Dense(1)])
    model.set_weights(_initial(seed))
    return model


def train(steps):
    import numpy as np
    import tensorflow as tf
    import troika.tensorflow as hvd
    import troika.keras as hvd_keras
    keras = tf.keras
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras.config.set_floatx("float64")
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    share = slice(r * GLOBAL // n, (r + 1) * GLOBAL // n)
    inputs, targets = _data(steps)
    # 1. troika.tensorflow, every rank from its own start (seed 3 + rank); rank 0's is seed 3.
    tf_weights = _tape_training(tf, hvd, inputs, targets, 3 + r, share)
    tf_reference = _tape_training(tf, None, inputs, targets, 3, slice(None))
    # 2. troika.keras: the rank's share of each global batch, one batch a step.
    model = _keras_model(keras, 7 + r)
    model.compile(optimizer=hvd_keras.DistributedOptimizer(
        keras.optimizers.SGD(0.1, momentum=0.9)), loss="mse")
    model.fit(inputs[:, share].reshape(-1, FEATURES), targets[:, share].reshape(-1, 1),
              batch_size=GLOBAL // n, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0)])
    reference = _keras_model(keras, 7)
    reference.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse")
    reference.fit(inputs.reshape(-1, FEATURES), targets.reshape(-1, 1), batch_size=GLOBAL,
                  epochs=1, shuffle=False, verbose=0)
    with open("/proc/self/maps") as f:
        frameworks = sorted({line.split()[-1] for line in f
                             if "libtensorflow_framework" in line})
    from troika.tensorflow import library
    facts = {"tensorflow": tf.__version__, "frameworks": frameworks, "ops": library._PATH,
             "keras": keras.__version__}
    out = (r, n, hvd.local_rank(), tf_weights, tf_reference,
           _hex([np.asarray(w) for w in model.get_weights()]),
           _hex([np.asarray(w) for w in reference.get_weights()]), facts)
    hvd.shutdown()
    return out


def check_results(results, size, build_dir, check):
    """The engines' checks of `train`'s results (one per rank, in rank order): each rank's
    weights are one process's, the same on every rank, and TensorFlow in the ranks is the
    version build/venv's (the op library's build) has, mapped once, with the op library of
    the build. Returns the facts of rank 0."""
    import glob
    import importlib.metadata
    check([r[:2] for r in results] == [(r, size) for r in range(size)],
          "rank and size: %s" % [r[:2] for r in results])
    for r in results:
        check(close(r[3], r[4]), "rank %d: troika.tensorflow's weights are not one process's"
              % r[0])
        check(close(r[5], r[6]), "rank %d: troika.keras's weights are not one process's" % r[0])
    check(len({r[3] for r in results}) == 1, "the ranks' troika.tensorflow weights differ")
    check(len({r[5] for r in results}) == 1, "the ranks' troika.keras weights differ")
    built = [d.version for d in importlib.metadata.distributions(
        path=glob.glob(os.path.join(build_dir, "venv", "lib", "python3*", "site-packages")))
        if d.metadata["Name"].lower() in ("tensorflow", "tensorflow-cpu")]
    for r in results:
        facts = r[7]
        check(facts["tensorflow"] in built, "rank %d runs TensorFlow %s, the op library is built "
              "against build/venv's %s" % (r[0], facts["tensorflow"], built))
        check(len(facts["frameworks"]) == 1, "rank %d maps libtensorflow_framework from %s"
              % (r[0], facts["frameworks"]))
        check(os.path.realpath(facts["ops"]).startswith(os.path.realpath(build_dir)),
              "rank %d loaded the op library %s, not the build's" % (r[0], facts["ops"]))
    return results[0][7]


def fit_until_killed(progress):
    """model.fit on every rank until the job is aborted; returns what it raised."""
    import time
    import numpy as np
    import tensorflow as tf
    import troika.keras as hvd
    keras = tf.keras
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    hvd.init()
    model = _keras_model(keras, 7)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")

    def step_done(batch, logs):
        if hvd.rank() == 0:
            with open(progress, "w") as f:
                f.write(str(batch))
        time.sleep(0.01)

    x = np.zeros((100000, FEATURES), dtype="float32")
    try:
        model.fit(x, x[:, :1], batch_size=4, epochs=1, shuffle=False, verbose=0,
                  callbacks=[keras.callbacks.LambdaCallback(on_train_batch_end=step_done)])
    except Exception as e:  # noqa: BLE001 - the test looks at it
        return type(e).__name__, str(e)
    return None, "model.fit returned"


if __name__ == "__main__":
    got = train(int(os.environ.get("STEPS", "6")))
    print("result rank %d of %d: troika.tensorflow %s, troika.keras %s; %s"
          % (got[0], got[1], close(got[3], got[4]), close(got[5], got[6]), got[7]), flush=True)
