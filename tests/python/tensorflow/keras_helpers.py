"""Helpers of the Keras tests (test_keras.py, test_keras_fit.py, test_keras2.py,
test_keras_elastic.py): every rank's data and its shard, models made from a seed, and the
comparisons across ranks. Only the helpers named "gathered" and "assert_same_on_every_rank" run
collectives. `keras` is tf.keras, the Keras troika.keras serves: Keras 3, or Keras 2 (tf_keras)
when the test runs with TF_USE_LEGACY_KERAS=1; with KERAS_BACKEND=torch, Keras 3 on torch (no
TensorFlow imported; the comparisons' collectives are troika.torch's)."""

import os

import numpy as np

import troika.keras as hvd

if os.environ.get("KERAS_BACKEND") == "torch":
    import keras
    import troika.torch as hvd_tf  # only allgather_object, the same as troika.tensorflow's
else:
    import tensorflow as tf
    import troika.tensorflow as hvd_tf

    keras = tf.keras

# Training compared with one process's: float32 sums of the ranks' gradients in another order
# than one batch's mean, over a few steps.
RTOL, ATOL = 1e-5, 1e-6
FEATURES, BATCH, STEPS = 6, 4, 3  # each rank's batch; steps per epoch


def data(seed=0, steps=STEPS):
    """The concatenated batches of every rank: steps * size * BATCH rows."""
    rng = np.random.default_rng(seed)
    n = steps * hvd.size() * BATCH
    return (rng.normal(size=(n, FEATURES)).astype(np.float32),
            rng.normal(size=(n, 1)).astype(np.float32))


def shard(array, r=None):
    """Rank r's rows: its BATCH rows of each global batch of size * BATCH rows."""
    r = hvd.rank() if r is None else r
    per_batch = array.reshape((-1, hvd.size(), BATCH) + array.shape[1:])
    return per_batch[:, r].reshape((-1,) + array.shape[1:])


def make_model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(5, activation="tanh"),
                             keras.layers.Dense(1)])


def value(variable):
    if hasattr(keras, "ops"):  # Keras 3
        return keras.ops.convert_to_numpy(variable)
    return variable.numpy()


def weights_of(model):
    return [np.array(w) for w in model.get_weights()]


def gathered(arrays):
    """Every rank's arrays (a list per rank)."""
    return hvd_tf.allgather_object([np.asarray(a) for a in arrays])


def assert_same_on_every_rank(arrays):
    everyone = gathered(arrays)
    for other in everyone[1:]:
        for a, b in zip(everyone[0], other):
            np.testing.assert_array_equal(a, b)


def root_initial_weights(seed=100):
    """The model every rank starts from after the broadcast: rank 0's."""
    return weights_of(make_model(seed))


def reference_fit(optimizer, epochs, x, y, seed=100):
    """Plain Keras in one process on the concatenated batches, from rank 0's start."""
    model = make_model(seed + 0)
    model.set_weights(root_initial_weights(seed))
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(x, y, batch_size=BATCH * hvd.size(), epochs=epochs, shuffle=False, verbose=0)
    return model


class Recorder(keras.callbacks.Callback):
    """Records the learning rate at each batch's start and the logs it is given."""

    def __init__(self):
        super().__init__()
        self.rates, self.epoch_logs, self.weights = [], [], []

    def on_train_batch_begin(self, batch, logs=None):
        self.rates.append(float(self.model.optimizer.learning_rate.numpy()))

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_logs.append(dict(logs))
        self.weights.append(weights_of(self.model))
