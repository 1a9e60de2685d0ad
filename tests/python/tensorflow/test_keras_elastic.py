"""troika.keras.elastic (horovod.keras.elastic's names) in a job of 2 ranks, with Keras 3 and,
run with TF_USE_LEGACY_KERAS=1, Keras 2 (keras is tf.keras): KerasState's sync, restore and
commit of a model, its optimizer (built here when its first step has not built it) and plain
attributes; the callbacks that keep the state current in model.fit. A job that loses a rank
and goes on: run_keras_elastic_test.py (tensorflow_keras_elastic_kill).

Every rank runs every test, with the same collectives in the same order (conftest.py)."""

import numpy as np
import pytest

import troika.keras as hvd
import troika.tensorflow.keras as hvd_tf_keras
from keras_helpers import (BATCH, STEPS, assert_same_on_every_rank, data, keras, make_model,
                           shard, value, weights_of)

# Keras 3's own convert_to_numpy under numpy 2 (not ours).
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")


def optimizer_values(optimizer):
    variables = optimizer.variables
    return [value(v) for v in (variables() if callable(variables) else variables)]


def assert_equal(arrays, expected):
    assert len(arrays) == len(expected)
    for a, b in zip(arrays, expected):
        np.testing.assert_array_equal(a, b)


def test_the_modules_have_horovods_elastic_names():
    names = {"KerasState", "CommitStateCallback", "UpdateBatchStateCallback",
             "UpdateEpochStateCallback", "run"}
    assert set(hvd.elastic.__all__) == names
    for name in names:
        assert getattr(hvd_tf_keras.elastic, name) is getattr(hvd.elastic, name)
    assert issubclass(hvd.elastic.CommitStateCallback, keras.callbacks.Callback)


def test_keras_state_syncs_restores_and_commits_model_optimizer_and_attributes():
    model = make_model(seed=100 + hvd.rank())
    other = [w + 1 for w in weights_of(model)]
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))
    model.compile(optimizer=opt, loss="mse")
    state = hvd.elastic.KerasState(model, batch=20 + hvd.rank(), epoch=10 + hvd.rank())
    assert optimizer_values(opt)  # built here, before any step: every rank syncs them
    state.sync()
    assert (state.batch, state.epoch) == (20, 10)
    synced, synced_opt = weights_of(model), optimizer_values(opt)
    assert_same_on_every_rank(synced + synced_opt)
    x, y = data()
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    assert int(opt.iterations.numpy()) == STEPS
    state.batch, state.epoch = 21, 11
    state.restore()  # back to the sync: the model, the optimizer, the attributes
    assert (state.batch, state.epoch) == (20, 10)
    assert_equal(weights_of(model), synced)
    assert_equal(optimizer_values(opt), synced_opt)
    model.set_weights(other)
    state.batch = 22
    state.commit()
    model.set_weights(synced)
    state.batch = 23
    state.restore()  # back to the commit
    assert state.batch == 22
    assert_equal(weights_of(model), other)


class CountingState:
    """A stand-in for KerasState that counts commits (no collectives)."""

    def __init__(self, epoch=0, batch=0):
        self.epoch, self.batch, self.commits = epoch, batch, []

    def commit(self):
        self.commits.append((self.epoch, self.batch))


def test_the_callbacks_keep_epoch_and_batch_and_commit_in_fit():
    x, y = data(steps=STEPS)
    model = make_model(seed=100)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss="mse")
    state = CountingState(epoch=3)
    seen = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda b, logs: seen.append((state.epoch, state.batch)))
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=2, shuffle=False, verbose=0,
              callbacks=[hvd.elastic.UpdateBatchStateCallback(state),
                         hvd.elastic.UpdateEpochStateCallback(state), record,
                         hvd.elastic.CommitStateCallback(state, batches_per_commit=2)])
    # The batch just trained; epochs counted from the state's (3) on.
    assert seen == [(3, b) for b in range(STEPS)] + [(4, b) for b in range(STEPS)]
    assert (state.epoch, state.batch) == (5, 0)
    # Every 2 batches (the count restarts with each fit, not each epoch) and at epochs' ends.
    assert len(state.commits) == (2 * STEPS) // 2 + 2


def test_update_batch_state_shortens_the_first_epoch_after_a_reset():
    state = CountingState(batch=2)
    callback = hvd.elastic.UpdateBatchStateCallback(state)
    callback.set_params({"steps": 5, "epochs": 2})
    callback.on_train_begin()
    callback.on_epoch_begin(0)
    assert callback.params["steps"] == 3  # the steps left of the epoch
    callback.on_epoch_end(0)
    callback.on_epoch_begin(1)
    assert callback.params["steps"] == 5
