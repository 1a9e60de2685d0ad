"""troika.keras's headline behaviour, at 2 and 4 ranks: model.fit with DistributedOptimizer and
the callbacks (broadcast, metric averaging, learning rate warmup) gives every rank the same
weights, equal to plain Keras in one process (computed here) training on the concatenated
batches within RTOL/ATOL (keras_helpers.py: float32 sums in another order). With Keras 3, and
with Keras 2 (tf_keras) when run with TF_USE_LEGACY_KERAS=1 (keras is tf.keras)."""

import numpy as np
import pytest

import troika.keras as hvd
from keras_helpers import (ATOL, BATCH, RTOL, STEPS, Recorder, assert_same_on_every_rank,
                           data, gathered, keras, make_model, root_initial_weights, shard,
                           weights_of)

# Keras' own convert_to_numpy under numpy 2 (not ours).
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")

EPOCHS, WARMUP = 3, 2


def warmup_rate(step):
    """The documented warmup rate of global step `step`, then 0.1."""
    epoch, batch = divmod(step, STEPS)
    if epoch >= WARMUP:
        return 0.1
    e = epoch + (batch + 1) / STEPS
    return 0.1 / hvd.size() * (e * (hvd.size() - 1) / WARMUP + 1)


def reference(x, y):
    """Plain Keras: rank 0's start, the concatenated batches, the warmup rates set by hand."""
    model = make_model(seed=100)
    model.set_weights(root_initial_weights())
    opt = keras.optimizers.SGD(0.1, momentum=0.9)
    model.compile(optimizer=opt, loss="mse")
    steps = iter(range(EPOCHS * STEPS))

    def set_rate(batch, logs):
        opt.learning_rate = warmup_rate(next(steps))

    model.fit(x, y, batch_size=BATCH * hvd.size(), epochs=EPOCHS, shuffle=False, verbose=0,
              callbacks=[keras.callbacks.LambdaCallback(on_train_batch_begin=set_rate)])
    return model


def test_fit_with_the_callbacks_equals_one_process_on_the_concatenated_batches():
    x, y = data(seed=5)
    model = make_model(seed=100 + hvd.rank())  # every rank starts elsewhere
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))
    model.compile(optimizer=opt, loss="mse")
    recorder = Recorder()
    history = model.fit(
        shard(x), shard(y), batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                   hvd.callbacks.MetricAverageCallback(),
                   hvd.callbacks.LearningRateWarmupCallback(0.1, warmup_epochs=WARMUP,
                                                            momentum_correction=False),
                   recorder])
    assert recorder.rates == [np.float32(warmup_rate(s)) for s in range(EPOCHS * STEPS)]
    assert int(opt.iterations.numpy()) == EPOCHS * STEPS
    assert_same_on_every_rank(weights_of(model))
    for got, want in zip(weights_of(model), weights_of(reference(x, y))):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    # The logged loss is the ranks' average: the same number on every rank.
    everyone = gathered([history.history["loss"]])
    assert all(np.array_equal(other[0], everyone[0][0]) for other in everyone)
