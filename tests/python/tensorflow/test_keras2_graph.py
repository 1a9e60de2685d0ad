"""troika.keras with Keras 2 in a tf.compat.v1 graph (eager execution disabled, as Horovod's
TensorFlow 1 Keras scripts ran; TF_USE_LEGACY_KERAS=1, set by ctest's
tensorflow_keras2_graph_np2): model.fit with DistributedOptimizer (a legacy optimizer, the
ones Keras 2 runs in a graph) allreduces through get_gradients and equals one process on the
concatenated batches; the callbacks and the value functions run their collectives in Keras'
session, as Horovod's did.

Every rank runs every test, with the same collectives in the same order (conftest.py)."""

import os

import numpy as np
import pytest
import tensorflow as tf

if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
    raise RuntimeError("test_keras2_graph.py tests Keras 2: run it with TF_USE_LEGACY_KERAS=1")
tf.compat.v1.disable_eager_execution()

import troika.keras as hvd  # noqa: E402
from keras_helpers import (ATOL, BATCH, RTOL, STEPS, data, keras, make_model,  # noqa: E402
                           shard, weights_of)

K = keras.backend


def session_values(values):
    """Every rank's `values` (numpy arrays), through allgather in Keras' session."""
    return [hvd.allgather(np.asarray(v)[np.newaxis]) for v in values]


def test_fit_in_a_graph_equals_one_process_and_averages_the_metrics():
    assert not tf.executing_eagerly()
    x, y = data(seed=6)
    model = make_model(seed=100)  # the same start on every rank: broadcast after batch 0
    opt = hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(0.1, momentum=0.9))
    model.compile(optimizer=opt, loss="mse")
    history = model.fit(
        shard(x), shard(y), batch_size=BATCH, epochs=2, shuffle=False, verbose=0,
        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                   hvd.callbacks.MetricAverageCallback(),
                   hvd.callbacks.LearningRateWarmupCallback(0.1, warmup_epochs=1,
                                                            momentum_correction=False)])
    got = weights_of(model)
    for gathered_weight in session_values(got):  # the same on every rank
        for other in gathered_weight[1:]:
            np.testing.assert_array_equal(other, gathered_weight[0])
    for losses in session_values([history.history["loss"]]):
        for other in losses[1:]:
            np.testing.assert_array_equal(other, losses[0])
    np.testing.assert_allclose(history.history["lr"], [0.1, 0.1], rtol=1e-6)

    expected = make_model(seed=100)
    plain = keras.optimizers.legacy.SGD(0.1, momentum=0.9)
    expected.compile(optimizer=plain, loss="mse")
    rates = iter([0.1 / hvd.size() * ((b + 1) / STEPS * (hvd.size() - 1) + 1)
                  for b in range(STEPS)] + [0.1] * STEPS)
    expected.fit(x, y, batch_size=BATCH * hvd.size(), epochs=2, shuffle=False, verbose=0,
                 callbacks=[keras.callbacks.LambdaCallback(
                     on_train_batch_begin=lambda b, logs: K.set_value(plain.lr, next(rates)))])
    for a, b in zip(got, weights_of(expected)):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


def test_value_functions_and_broadcast_global_variables_run_in_keras_session():
    assert hvd.allreduce(np.float32(hvd.rank())) == pytest.approx((hvd.size() - 1) / 2)
    assert list(hvd.allgather([hvd.rank()])) == list(range(hvd.size()))
    assert hvd.broadcast(np.float32(hvd.rank() + 5), root_rank=0) == 5
    variable = tf.compat.v1.Variable(float(hvd.rank() + 1), name="rank_dependent")
    tf.compat.v1.keras.backend.get_session().run(variable.initializer)
    hvd.broadcast_global_variables(0)
    assert K.get_value(variable) == 1.0


def test_momentum_correction_in_a_graph_sets_momentum_for_one_batch():
    model = make_model(seed=100)
    opt = hvd.DistributedOptimizer(keras.optimizers.legacy.SGD(0.1, momentum=0.9))
    model.compile(optimizer=opt, loss="mse")
    callback = hvd.callbacks.LearningRateScheduleCallback(0.05, 1.0)
    callback.set_model(model)
    callback.on_train_begin()
    callback.on_epoch_begin(0)
    callback.on_batch_begin(0)  # 0.1 -> 0.05
    assert float(K.get_value(opt.lr)) == pytest.approx(0.05)
    assert float(K.get_value(opt.momentum)) == pytest.approx(0.45)
    callback.on_batch_end(0)
    assert float(K.get_value(opt.momentum)) == pytest.approx(0.9)
