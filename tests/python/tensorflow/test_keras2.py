"""troika.keras with Keras 2 (tf_keras, TF_USE_LEGACY_KERAS=1, which ctest's
tensorflow_keras2_np2 sets): Horovod's Keras 2 behaviour for both of Keras 2's optimizer trees
(tf.keras.optimizers.* and .legacy.*): where gradients are allreduced (compute_gradients and
minimize, hence model.fit; not apply_gradients), each against one process training on the
concatenated batch (computed here); backward_passes_per_step; local variables; sparse
gradients; the callbacks (optimizer.lr, momentum correction of both trees); load_model in
Keras 2's formats; the value functions; XLA refused; the modules. model.fit with the callbacks
against one process: test_keras_fit.py (tensorflow_keras_fit_tf_keras_np2); Horovod's own Keras
2 tests: scripts/horovod_compat.py --framework keras.

Every rank runs every test, with the same collectives in the same order (conftest.py)."""

import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf

if os.environ.get("TF_USE_LEGACY_KERAS") != "1":
    raise RuntimeError("test_keras2.py tests Keras 2: run it with TF_USE_LEGACY_KERAS=1")

import tf_keras  # noqa: E402

import troika.keras as hvd  # noqa: E402
import troika.tensorflow as hvd_tf  # noqa: E402
import troika.tensorflow.keras as hvd_tf_keras  # noqa: E402
from keras_helpers import (ATOL, BATCH, FEATURES, RTOL, STEPS, Recorder,  # noqa: E402
                           assert_same_on_every_rank, data, gathered, keras, make_model,
                           root_initial_weights, shard, weights_of)

K = keras.backend
NEW, LEGACY = keras.optimizers, keras.optimizers.legacy


def test_tf_keras_is_keras_2_and_troika_keras_serves_it():
    assert keras.Sequential is tf_keras.Sequential
    assert issubclass(hvd.callbacks.MetricAverageCallback, tf_keras.callbacks.Callback)
    assert issubclass(hvd.elastic.CommitStateCallback, tf_keras.callbacks.Callback)
    for name in hvd.__all__:
        assert getattr(hvd_tf_keras, name) is getattr(hvd, name) or name in (
            "callbacks", "elastic"), name
    for module in ("callbacks", "elastic"):
        ours, theirs = getattr(hvd, module), getattr(hvd_tf_keras, module)
        for name in ours.__all__:
            assert getattr(theirs, name) is getattr(ours, name), name


def test_a_keras_3_optimizer_is_refused_naming_the_setting():
    import keras as keras3  # the keras package is Keras 3 whatever tf.keras is
    with pytest.raises(TypeError, match="TF_USE_LEGACY_KERAS"):
        hvd.DistributedOptimizer(keras3.optimizers.SGD(0.1))
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(NEW.SGD(), op=hvd.Adasum)


@pytest.mark.parametrize("make", [lambda: NEW.Adam(0.003, beta_1=0.8),
                                  lambda: LEGACY.Adam(0.003, beta_1=0.8),
                                  lambda: LEGACY.SGD(0.1, momentum=0.5)],
                         ids=["adam", "legacy_adam", "legacy_sgd"])
def test_the_optimizer_keeps_its_class_config_and_lr(make):
    wrapped = make()
    opt = hvd.DistributedOptimizer(wrapped)
    assert isinstance(opt, type(wrapped)) and type(opt).__name__ == type(wrapped).__name__
    assert type(opt).__module__ == type(wrapped).__module__
    assert opt.get_config() == wrapped.get_config()
    K.set_value(opt.lr, 0.01)  # Keras 2's name for it
    assert float(K.get_value(opt.lr)) == pytest.approx(0.01)
    copy = opt.from_config(opt.get_config())
    assert type(copy) is type(opt) and copy.get_config() == opt.get_config()
    assert hasattr(copy, "register_local_var")
    assert opt.variables() == opt.variables
    again = hvd.DistributedOptimizer(opt, op=hvd.Sum)
    assert type(again).__mro__[2] is type(wrapped)  # wrapped once, not twice


# --- model.fit and custom loops --------------------------------------------------------------

OPTIMIZERS = {"sgd": lambda: NEW.SGD(0.1, momentum=0.9),
              "legacy_sgd": lambda: LEGACY.SGD(0.1, momentum=0.9),
              "legacy_adam": lambda: LEGACY.Adam(0.01),
              # The unscaled gradients are allreduced (the loss scale optimizer's
              # compute_gradients unscales them).
              "loss_scale_sgd": lambda: keras.mixed_precision.LossScaleOptimizer(
                  NEW.SGD(0.1, momentum=0.9)),
              "legacy_loss_scale_sgd": lambda: keras.mixed_precision.LossScaleOptimizer(
                  LEGACY.SGD(0.1, momentum=0.9))}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_fit_equals_one_process_on_the_concatenated_batches(name):
    x, y = data(seed=4)
    model = make_model(seed=100 + hvd.rank())  # the broadcast makes it rank 0's
    model.compile(optimizer=hvd.DistributedOptimizer(OPTIMIZERS[name]()), loss="mse")
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=2, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    expected = make_model(seed=100)
    expected.set_weights(root_initial_weights())
    expected.compile(optimizer=OPTIMIZERS[name](), loss="mse")
    expected.fit(x, y, batch_size=BATCH * hvd.size(), epochs=2, shuffle=False, verbose=0)
    assert_same_on_every_rank(weights_of(model))
    for got, want in zip(weights_of(model), weights_of(expected)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def loop_data(step, r):
    rng = np.random.default_rng(10 * step + r)
    return (rng.normal(size=(BATCH, FEATURES)).astype(np.float32),
            rng.normal(size=(BATCH, 1)).astype(np.float32))


def concatenated(step):
    xs, ys = zip(*[loop_data(step, r) for r in range(hvd.size())])
    return np.concatenate(xs), np.concatenate(ys)


def loss_of(model, x, y):
    return lambda: tf.reduce_mean(tf.square(model(x) - y))


def gradients(model, x, y):
    with tf.GradientTape() as tape:
        loss = loss_of(model, x, y)()
    return tape.gradient(loss, model.trainable_variables)


@pytest.mark.parametrize("legacy,compiled", [(False, True), (True, False)])
def test_minimize_in_a_custom_loop_equals_one_process(legacy, compiled):
    make = LEGACY.SGD if legacy else NEW.SGD
    model = make_model(seed=100)
    opt = hvd.DistributedOptimizer(make(0.1, momentum=0.5))

    def step(x, y):
        opt.minimize(loss_of(model, x, y), model.trainable_variables)

    step = tf.function(step) if compiled else step
    expected = make_model(seed=100)
    plain = make(0.1, momentum=0.5)
    for s in range(STEPS):
        step(*loop_data(s, hvd.rank()))
        plain.minimize(loss_of(expected, *concatenated(s)), expected.trainable_variables)
    assert_same_on_every_rank(weights_of(model))
    for a, b in zip(weights_of(model), weights_of(expected)):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


def test_apply_gradients_applies_gradients_as_given_as_horovods_does():
    # A custom loop's tape reduces (DistributedGradientTape, Average); the optimizer, asked to
    # Sum, must not reduce again in apply_gradients (it would multiply by the size).
    model = make_model(seed=100)
    opt = hvd.DistributedOptimizer(NEW.SGD(0.1), op=hvd.Sum)
    expected = make_model(seed=100)
    plain = NEW.SGD(0.1)
    for s in range(2):
        x, y = loop_data(s, hvd.rank())
        with tf.GradientTape() as tape:
            loss = loss_of(model, x, y)()
        tape = hvd_tf.DistributedGradientTape(tape)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                model.trainable_variables))
        plain.apply_gradients(zip(gradients(expected, *concatenated(s)),
                                  expected.trainable_variables))
    for a, b in zip(weights_of(model), weights_of(expected)):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("legacy,average,compiled", [(False, False, True), (True, True, False),
                                                     (True, False, True)])
def test_backward_passes_per_step_sums_locally_and_applies_every_nth_step(legacy, average,
                                                                          compiled):
    passes = 2
    model = make_model(seed=100)
    opt = hvd.DistributedOptimizer((LEGACY if legacy else NEW).SGD(0.1),
                                   backward_passes_per_step=passes,
                                   average_aggregated_gradients=average)

    def step(x, y):
        opt.minimize(loss_of(model, x, y), model.trainable_variables)

    step = tf.function(step) if compiled else step
    for s in range(2 * passes + 1):
        step(*loop_data(s, hvd.rank()))
        assert int(opt.iterations.numpy()) == s + 1
    # One process: the rank-averaged gradients of each group of `passes` steps, all taken at
    # the group's start, summed (or averaged) and applied once.
    expected = make_model(seed=100)
    for first in range(0, 2 * passes, passes):
        total = [tf.zeros_like(v) for v in expected.trainable_variables]
        for s in range(first, first + passes):
            total = [t + g for t, g in zip(total, gradients(expected, *concatenated(s)))]
        for v, g in zip(expected.trainable_variables, total):
            v.assign_sub(0.1 * g / (passes if average else 1))
    assert_same_on_every_rank(weights_of(model))
    for a, b in zip(weights_of(model), weights_of(expected)):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
    assert int(opt._agg_helper.counter.numpy()) == 1  # the odd step is summed, not applied


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_gradients_of_an_embedding(sparse_as_dense):
    def make():
        keras.utils.set_random_seed(7)
        return keras.Sequential([keras.Input((3,), dtype="int32"),
                                 keras.layers.Embedding(10, 4), keras.layers.Flatten(),
                                 keras.layers.Dense(1)])

    rng = np.random.default_rng(3)
    x = rng.integers(0, 10, size=(STEPS * hvd.size() * BATCH, 3)).astype(np.int32)
    y = rng.normal(size=(x.shape[0], 1)).astype(np.float32)
    model = make()
    model.compile(optimizer=hvd.DistributedOptimizer(LEGACY.SGD(0.1),
                                                     sparse_as_dense=sparse_as_dense),
                  loss="mse")
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    expected = make()
    expected.compile(optimizer=LEGACY.SGD(0.1), loss="mse")
    expected.fit(x, y, batch_size=BATCH * hvd.size(), epochs=1, shuffle=False, verbose=0)
    assert_same_on_every_rank(weights_of(model))
    for a, b in zip(weights_of(model), weights_of(expected)):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


def test_partial_distributed_optimizer_keeps_local_layers_gradients_local():
    model = make_model(seed=100)
    opt = hvd.PartialDistributedOptimizer(NEW.SGD(0.1), local_layers=model.layers[1])
    x, y = loop_data(0, hvd.rank())
    own = [np.array(g) for g in gradients(model, x, y)]
    got = [np.array(g) for g, _ in opt.compute_gradients(loss_of(model, x, y),
                                                         model.trainable_variables)]
    # The shared layer's: the ranks' average; the local one's: its own / size.
    average = [np.mean(g, axis=0) for g in zip(*gathered(own))]
    for i in range(4):
        want = average[i] if i < 2 else own[i] / hvd.size()
        np.testing.assert_allclose(got[i], want, rtol=RTOL, atol=ATOL)


def test_jit_compiled_train_step_raises_naming_jit_compile_false():
    model = make_model(seed=100)
    model.compile(optimizer=hvd.DistributedOptimizer(NEW.SGD(0.1)), loss="mse",
                  jit_compile=True)
    x, y = data()
    # Keras 2 traces its train step with autograph, which gives an error raised while tracing
    # as its StagingError when it cannot remake its type: the message is ours.
    with pytest.raises(Exception, match=r"InvalidArgumentError[\s\S]*DistributedOptimizer"
                                        r"[\s\S]*jit_compile=False"):
        model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, verbose=0)


# --- callbacks -------------------------------------------------------------------------------

class FirstStepWeights(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if batch == 0 and not hasattr(self, "weights_"):
            self.weights_ = weights_of(self.model)


def test_broadcast_callback_starts_every_rank_from_the_roots_weights_but_local_ones():
    model = make_model(seed=100 + hvd.rank())
    local = model.layers[1].kernel  # weights index 2
    local_before = K.get_value(local)
    model.compile(optimizer=hvd.DistributedOptimizer(LEGACY.SGD(0.1, momentum=0.9)),
                  loss="mse")
    x, y = data()
    callback = hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[local])
    first = FirstStepWeights()
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, verbose=0,
              callbacks=[callback, first])
    assert callback.broadcast_done
    want = root_initial_weights()
    for i in (0, 1, 3):  # before the first step: rank 0's (Horovod's: after it)
        np.testing.assert_array_equal(first.weights_[i], want[i])
    np.testing.assert_array_equal(first.weights_[2], local_before)
    everyone = gathered([local_before])
    assert not np.array_equal(everyone[0][0], everyone[-1][0])  # the ranks' differ
    with pytest.raises(ValueError, match="tf.Variable"):
        hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[np.zeros(2)])


def test_metric_average_gives_the_mean_of_the_ranks_metrics():
    x, y = data(seed=2)
    model = make_model(seed=100)
    model.compile(optimizer=hvd.DistributedOptimizer(NEW.SGD(0.05)), loss="mse",
                  metrics=["mae"])
    raw = Recorder()  # before MetricAverageCallback: this rank's own metrics
    history = model.fit(shard(x), shard(y), batch_size=BATCH, epochs=2, shuffle=False,
                        verbose=0, validation_data=(shard(x), shard(y)),
                        callbacks=[raw, hvd.callbacks.MetricAverageCallback()])
    everyone = hvd_tf.allgather_object(raw.epoch_logs)
    assert set(history.history) == {"loss", "mae", "val_loss", "val_mae"}
    for metric, values in history.history.items():
        for epoch, averaged in enumerate(values):
            ranks = [logs[epoch][metric] for logs in everyone]
            assert len(set(ranks)) == hvd.size()  # the ranks' data differ
            assert averaged == pytest.approx(np.mean(ranks), rel=1e-6)


class LrRecorder(keras.callbacks.Callback):
    """optimizer.lr at each batch's start (Keras 2's name)."""

    def __init__(self):
        super().__init__()
        self.rates = []

    def on_train_batch_begin(self, batch, logs=None):
        self.rates.append(float(K.get_value(self.model.optimizer.lr)))


def test_schedule_and_warmup_set_optimizer_lr():
    x, y = data()
    model = make_model(seed=100)
    model.compile(optimizer=hvd.DistributedOptimizer(LEGACY.SGD(0.1)), loss="mse")
    recorder = LrRecorder()
    history = model.fit(
        shard(x), shard(y), batch_size=BATCH, epochs=4, shuffle=False, verbose=0,
        callbacks=[hvd.callbacks.LearningRateWarmupCallback(0.2, warmup_epochs=2),
                   hvd.callbacks.LearningRateScheduleCallback(0.2, 0.5, start_epoch=3),
                   recorder])
    warmup = [0.2 / hvd.size() * ((e + (b + 1) / STEPS) * (hvd.size() - 1) / 2 + 1)
              for e in range(2) for b in range(STEPS)]
    expected = warmup + [warmup[-1]] * STEPS + [0.2] * STEPS  # epoch 3: 0.2 * 0.5 ** 0
    np.testing.assert_allclose(recorder.rates, expected, rtol=1e-6)
    np.testing.assert_allclose(history.history["lr"], [warmup[STEPS - 1], 0.2, 0.2, 0.2],
                               rtol=1e-6)


def test_momentum_correction_of_a_legacy_optimizer_sets_momentum_for_one_batch():
    model = make_model(seed=100)
    opt = hvd.DistributedOptimizer(LEGACY.SGD(0.1, momentum=0.9))
    model.compile(optimizer=opt, loss="mse")
    callback = hvd.callbacks.LearningRateScheduleCallback(0.025, 1.0)
    callback.set_model(model)
    callback.on_train_begin()
    callback.on_epoch_begin(0)
    callback.on_batch_begin(0)  # 0.1 -> 0.025: Horovod's correction, momentum * 0.25
    assert float(K.get_value(opt.lr)) == pytest.approx(0.025)
    assert float(K.get_value(opt.momentum)) == pytest.approx(0.9 * 0.25)
    callback.on_batch_end(0)
    assert float(K.get_value(opt.momentum)) == pytest.approx(0.9)


def test_momentum_correction_of_a_keras_2_optimizer_scales_its_velocities():
    x, y = data()
    model = make_model(seed=100)
    opt = hvd.DistributedOptimizer(NEW.SGD(0.1, momentum=0.9))
    model.compile(optimizer=opt, loss="mse")
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    before = [K.get_value(m) for m in opt.momentums]
    assert all(np.any(m != 0) for m in before)
    callback = hvd.callbacks.LearningRateScheduleCallback(0.025, 1.0)
    callback.set_model(model)
    callback.on_train_begin()
    callback.on_epoch_begin(0)
    callback.on_batch_begin(0)  # 0.1 -> 0.025: its momentum is a float the step compiled
    for m, was in zip(opt.momentums, before):
        np.testing.assert_allclose(K.get_value(m), was * 0.25, rtol=1e-6)
    assert opt.momentum == 0.9


def test_best_model_checkpoint_needs_a_path_and_saves_only_improvements():
    path = os.path.join(tempfile.mkdtemp(prefix="troika_keras2_"), "best.h5")
    callback = hvd.callbacks.BestModelCheckpoint(monitor="loss")
    assert callback.save_best_only and callback.filepath is None
    callback.filepath = path
    model = make_model(seed=100)
    model.compile(optimizer=hvd.DistributedOptimizer(NEW.SGD(0.05)), loss="mse")
    x, y = data()
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=2, verbose=0, callbacks=[callback])
    assert os.path.exists(path)
    with pytest.raises(ValueError, match="filepath"):
        hvd.callbacks.BestModelCheckpoint().on_train_begin()


# --- load_model ------------------------------------------------------------------------------

class UnregisteredSGD(LEGACY.SGD):
    """A custom optimizer Keras cannot find by name: load_model's custom_optimizers."""


@pytest.mark.parametrize("make,suffix", [(lambda: NEW.Adam(0.01), ".keras"),
                                         (lambda: LEGACY.Adam(0.01), ".h5"),
                                         (lambda: UnregisteredSGD(0.1, momentum=0.9), ".h5")],
                         ids=["adam_keras", "legacy_adam_h5", "custom_legacy_sgd_h5"])
def test_load_model_restores_a_distributed_optimizer_with_its_state(make, suffix):
    x, y = data()
    model = make_model(seed=100)
    model.compile(optimizer=hvd.DistributedOptimizer(make()), loss="mse")
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    path = os.path.join(tempfile.mkdtemp(prefix="troika_keras2_"), "model" + suffix)
    model.save(path)

    cls = type(model.optimizer).__mro__[2]  # the wrapped class
    loaded = hvd.load_model(path, custom_optimizers=[UnregisteredSGD])
    opt = loaded.optimizer
    assert type(opt).__name__ == cls.__name__ and isinstance(opt, cls)
    assert hasattr(opt, "register_local_var")  # distributed
    assert int(opt.iterations.numpy()) == STEPS
    saved = sorted(K.get_value(v).sum() for v in model.optimizer.variables())
    np.testing.assert_allclose(sorted(K.get_value(v).sum() for v in opt.variables()), saved)
    # Training on continues as the saved model's would, the same on every rank.
    for m in (model, loaded):
        m.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    assert_same_on_every_rank(weights_of(loaded))
    for a, b in zip(weights_of(loaded), weights_of(model)):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


# --- the value functions ---------------------------------------------------------------------

def test_value_functions_and_broadcast_global_variables():
    assert hvd.allreduce(np.float32(hvd.rank())).numpy() == pytest.approx(
        (hvd.size() - 1) / 2)
    assert hvd.allreduce(np.float32(hvd.rank()), op=hvd.Sum).numpy() == pytest.approx(
        hvd.size() * (hvd.size() - 1) / 2)
    assert list(hvd.allgather([hvd.rank()]).numpy()) == list(range(hvd.size()))
    assert hvd.broadcast(np.float32(hvd.rank() + 5), root_rank=0).numpy() == 5
    rows = hvd.reducescatter(np.ones((hvd.size(), 2), np.float32) * hvd.rank(), op=hvd.Sum)
    np.testing.assert_array_equal(rows.numpy(), np.full((1, 2), hvd.size() * (hvd.size() - 1)
                                                        / 2))
    # Eagerly there are no global variables (Horovod's error).
    with pytest.raises(RuntimeError, match="eager"):
        hvd.broadcast_global_variables(0)
