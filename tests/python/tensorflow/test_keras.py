"""troika.keras (Keras 3, TensorFlow backend): what each callback does; load_model; custom
training loops and the options of DistributedOptimizer, each against one process training on
the concatenated batch (computed here, in the same process); XLA refused with a clear error;
the modules' names. model.fit with all the callbacks: test_keras_fit.py.

Every rank runs every test, with the same collectives in the same order (conftest.py). The
reference computations use no collective."""

import os
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import troika.keras as hvd
import troika.tensorflow as hvd_tf
import troika.tensorflow.keras as hvd_tf_keras
from keras_helpers import (ATOL, BATCH, FEATURES, RTOL, STEPS, Recorder,
                           assert_same_on_every_rank, data, gathered, make_model,
                           root_initial_weights, shard, value, weights_of)

# Keras' own convert_to_numpy under numpy 2 (not ours).
pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")


# --- model.fit -------------------------------------------------------------------------------

def test_fit_with_adam_and_op_sum_and_fp16_compression():
    x, y = data(seed=1)
    model = make_model(seed=100)
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), op=hvd.Sum,
                                   compression=hvd.Compression.fp16)
    model.compile(optimizer=opt, loss="mse")
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    assert_same_on_every_rank(weights_of(model))
    # Sum of the ranks' mean gradients: the concatenated batch's summed loss over BATCH rows.
    expected = make_model(seed=100)
    expected.compile(optimizer=keras.optimizers.Adam(0.01),
                     loss=lambda t, p: keras.ops.mean(keras.ops.square(t - p)) * hvd.size())
    expected.fit(x, y, batch_size=BATCH * hvd.size(), epochs=1, shuffle=False, verbose=0)
    for got, want in zip(weights_of(model), weights_of(expected)):
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-3)  # fp16 gradients


def test_a_wrapped_loss_scale_optimizer_trains_as_one_process():
    x, y = data(seed=3)
    model = make_model(seed=100)
    opt = hvd.DistributedOptimizer(
        keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)))
    assert isinstance(opt, keras.optimizers.LossScaleOptimizer)
    model.compile(optimizer=opt, loss="mse")
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    # The scaled gradients are allreduced, then unscaled: plain SGD's steps.
    expected = make_model(seed=100)
    expected.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    expected.fit(x, y, batch_size=BATCH * hvd.size(), epochs=1, shuffle=False, verbose=0)
    assert_same_on_every_rank(weights_of(model))
    for got, want in zip(weights_of(model), weights_of(expected)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_jit_compiled_train_step_raises_naming_jit_compile_false():
    model = make_model(seed=100)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse",
                  jit_compile=True)
    x, y = data()
    # The optimizer's own message, before any op's: it names what to change in the script.
    message = r"DistributedOptimizer[\s\S]*model\.compile\(\.\.\., jit_compile=False\)"
    with pytest.raises(hvd.InvalidArgumentError, match=message):
        model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, verbose=0)


# --- callbacks -------------------------------------------------------------------------------

def test_broadcast_callback_starts_every_rank_from_the_roots_weights_but_local_ones():
    model = make_model(seed=100 + hvd.rank())
    local = model.layers[1].kernel  # weights index 2
    local_before = value(local)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.0)), loss="mse")
    x, y = data()
    callback = hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[local])
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, verbose=0, callbacks=[callback])
    assert callback.broadcast_done
    # A learning rate of 0: the weights are what the broadcast left.
    got, want = model.get_weights(), root_initial_weights()
    for i in (0, 1, 3):
        np.testing.assert_array_equal(got[i], want[i])
    np.testing.assert_array_equal(value(local), local_before)
    everyone = gathered([local_before])
    assert not np.array_equal(everyone[0][0], everyone[-1][0])  # the ranks' differ


def test_metric_average_gives_the_mean_of_the_ranks_metrics():
    x, y = data(seed=2)
    model = make_model(seed=100)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss="mse",
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


def warmup_rate(initial_lr, warmup_epochs, epoch, batch, steps):
    """The documented warmup rate at a batch's start."""
    e = epoch + (batch + 1) / steps
    return initial_lr / hvd.size() * (e * (hvd.size() - 1) / warmup_epochs + 1)


def test_warmup_raises_the_rate_from_lr_over_size_to_lr_at_every_batch():
    x, y = data()
    model = make_model(seed=100)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    recorder = Recorder()
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=3, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.LearningRateWarmupCallback(0.1, warmup_epochs=2),
                         recorder])
    expected = [warmup_rate(0.1, 2, e, b, STEPS) for e in range(2) for b in range(STEPS)]
    expected += [expected[-1]] * STEPS  # after the warmup: left as it ended, at 0.1
    np.testing.assert_allclose(recorder.rates, expected, rtol=1e-6)
    assert expected[-1] == pytest.approx(0.1)
    assert [logs["lr"] for logs in recorder.epoch_logs] == pytest.approx(
        [expected[STEPS - 1], expected[2 * STEPS - 1], 0.1], rel=1e-6)


def test_schedule_sets_the_rate_per_epoch_and_the_train_step_uses_it():
    x, y = data()
    model = make_model(seed=100)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    recorder = Recorder()
    schedule = hvd.callbacks.LearningRateScheduleCallback(0.2, 0.5, start_epoch=1, end_epoch=3)
    frozen = hvd.callbacks.LearningRateScheduleCallback(0.2, lambda epoch: 0.0, start_epoch=4)
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=5, shuffle=False, verbose=0,
              callbacks=[schedule, frozen, recorder])
    per_epoch = recorder.rates[::STEPS]
    # Epoch 0 before the schedule; 1 and 2: 0.2 * 0.5 ** (epoch - 1); 3: left; 4: 0.
    np.testing.assert_allclose(per_epoch, [0.1, 0.2, 0.1, 0.1, 0.0], rtol=1e-6)
    for e in range(5):
        assert len(set(recorder.rates[e * STEPS:(e + 1) * STEPS])) == 1
    # A rate of 0 in epoch 4: the compiled step read it, nothing moved.
    for a, b in zip(recorder.weights[3], recorder.weights[4]):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(recorder.weights[2][0], recorder.weights[3][0])


def test_momentum_correction_scales_the_velocities_by_the_rate_change():
    x, y = data()
    model = make_model(seed=100)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))
    model.compile(optimizer=opt, loss="mse")
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    before = [value(m) for m in opt.momentums]
    assert all(np.any(m != 0) for m in before)
    for correction, factor in ((False, 1.0), (True, 0.25)):
        callback = hvd.callbacks.LearningRateScheduleCallback(
            0.025, 1.0, momentum_correction=correction)
        callback.set_model(model)
        opt.learning_rate = 0.1
        current = [value(m) for m in opt.momentums]
        callback.on_train_begin()
        callback.on_epoch_begin(0)
        callback.on_batch_begin(0)  # 0.1 -> 0.025
        assert float(opt.learning_rate.numpy()) == pytest.approx(0.025)
        for m, was in zip(opt.momentums, current):
            np.testing.assert_allclose(value(m), was * factor, rtol=1e-6)
        callback.on_batch_end(0)


def test_best_model_checkpoint_saves_only_improvements():
    directory = tempfile.mkdtemp(prefix="troika_keras_")
    path = os.path.join(directory, "best.keras")
    callback = hvd.callbacks.BestModelCheckpoint(monitor="loss")
    assert callback.save_best_only and callback.filepath is None
    callback.filepath = path
    model = make_model(seed=100)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss="mse")
    x, y = data()
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=2, verbose=0, callbacks=[callback])
    assert os.path.exists(path)
    with pytest.raises(ValueError, match="filepath"):
        hvd.callbacks.BestModelCheckpoint().on_train_begin()


# --- load_model ------------------------------------------------------------------------------

class UnregisteredSGD(keras.optimizers.SGD):
    """A custom optimizer Keras cannot find by name: load_model's custom_optimizers."""


@pytest.mark.parametrize("optimizer_class", [keras.optimizers.SGD, UnregisteredSGD])
def test_load_model_restores_a_distributed_optimizer_with_its_state(optimizer_class):
    x, y = data()
    model = make_model(seed=100)
    model.compile(optimizer=hvd.DistributedOptimizer(optimizer_class(0.1, momentum=0.9)),
                  loss="mse")
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    path = os.path.join(tempfile.mkdtemp(prefix="troika_keras_"), "model.keras")
    model.save(path)

    loaded = hvd.load_model(path, custom_optimizers=[optimizer_class])
    opt = loaded.optimizer
    assert type(opt).__name__ == optimizer_class.__name__ and isinstance(opt, optimizer_class)
    assert hasattr(opt, "register_local_var")  # distributed
    assert opt.get_config() == model.optimizer.get_config()
    for a, b in zip(opt.variables, model.optimizer.variables):
        np.testing.assert_array_equal(value(a), value(b))
    # Training on continues as the saved model's would, the same on every rank.
    for m in (model, loaded):
        m.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    assert_same_on_every_rank(weights_of(loaded))
    for a, b in zip(weights_of(loaded), weights_of(model)):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
    # Plain Keras loads it too, with the plain optimizer (a built-in one by itself).
    custom = {} if optimizer_class is keras.optimizers.SGD else {"UnregisteredSGD":
                                                                 optimizer_class}
    plain = keras.models.load_model(path, custom_objects=custom)
    assert type(plain.optimizer) is optimizer_class


# --- custom loops and the optimizer's options -------------------------------------------------

def loop_data(step, r):
    rng = np.random.default_rng(10 * step + r)
    return (rng.normal(size=(BATCH, FEATURES)).astype(np.float32),
            rng.normal(size=(BATCH, 1)).astype(np.float32))


def concatenated(step):
    xs, ys = zip(*[loop_data(step, r) for r in range(hvd.size())])
    return np.concatenate(xs), np.concatenate(ys)


def gradients(model, x, y):
    with tf.GradientTape() as tape:
        loss = keras.ops.mean(keras.ops.square(model(x) - y))
    return tape.gradient(loss, model.trainable_variables)


@pytest.mark.parametrize("compiled", [False, True])
def test_custom_loop_apply_gradients_equals_one_process(compiled):
    model = make_model(seed=100)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.5))

    def step(x, y):
        opt.apply_gradients(zip(gradients(model, x, y), model.trainable_variables))

    step = tf.function(step) if compiled else step
    expected = make_model(seed=100)
    plain = keras.optimizers.SGD(0.1, momentum=0.5)
    for s in range(STEPS):
        step(*loop_data(s, hvd.rank()))
        plain.apply_gradients(zip(gradients(expected, *concatenated(s)),
                                  expected.trainable_variables))
    assert_same_on_every_rank(weights_of(model))
    for a, b in zip(weights_of(model), weights_of(expected)):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("average,compiled", [(False, True), (True, False)])
def test_backward_passes_per_step_sums_locally_and_applies_every_nth_step(average, compiled):
    passes = 2
    model = make_model(seed=100)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=passes,
                                   average_aggregated_gradients=average)

    def step(x, y):
        opt.apply_gradients(zip(gradients(model, x, y), model.trainable_variables))

    step = tf.function(step) if compiled else step

    expected = make_model(seed=100)
    for s in range(2 * passes + 1):
        step(*loop_data(s, hvd.rank()))
        assert int(opt.iterations.numpy()) == s + 1
    # One process: the rank-averaged gradients of each group of `passes` steps, all taken at
    # the group's start, summed (or averaged) and applied once.
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
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                                     sparse_as_dense=sparse_as_dense),
                  loss="mse")
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    expected = make()
    expected.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    expected.fit(x, y, batch_size=BATCH * hvd.size(), epochs=1, shuffle=False, verbose=0)
    assert_same_on_every_rank(weights_of(model))
    for a, b in zip(weights_of(model), weights_of(expected)):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


def test_partial_distributed_optimizer_keeps_local_layers_gradients_local():
    model = make_model(seed=100)
    local_layer = model.layers[1]
    opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=local_layer)
    x, y = loop_data(0, hvd.rank())
    grads = gradients(model, x, y)
    before = weights_of(model)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    after = weights_of(model)
    # The shared layer moved by the ranks' average; the local one by its own gradient / size.
    average = [np.mean(g, axis=0) for g in zip(*gathered([np.array(g) for g in grads]))]
    for i in range(4):
        step = (average[i] if i < 2 else np.array(grads[i]) / hvd.size())
        np.testing.assert_allclose(after[i], before[i] - 0.1 * step, rtol=RTOL, atol=ATOL)
    assert_same_on_every_rank(after[:2])


def test_the_optimizer_keeps_its_class_config_and_learning_rate():
    wrapped = keras.optimizers.Adam(0.003, beta_1=0.8)
    opt = hvd.DistributedOptimizer(wrapped)
    assert isinstance(opt, keras.optimizers.Adam) and type(opt).__name__ == "Adam"
    assert opt.get_config() == wrapped.get_config()
    opt.learning_rate = 0.01
    assert float(opt.learning_rate.numpy()) == pytest.approx(0.01)
    copy = type(opt).from_config(opt.get_config())
    assert type(copy) is type(opt) and copy.get_config() == opt.get_config()
    assert hasattr(copy, "register_local_var")
    assert opt.variables() == opt.variables  # Keras 2 scripts call it
    again = hvd.DistributedOptimizer(opt, op=hvd.Sum)
    assert type(again).__mro__[2] is keras.optimizers.Adam  # wrapped once, not twice
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(keras.optimizers.SGD(), op=hvd.Adasum)
    with pytest.raises(TypeError):
        hvd.DistributedOptimizer(object())


# --- the modules -----------------------------------------------------------------------------

# horovod.keras's and horovod.tensorflow.keras's public names (v0.28.1).
HOROVOD_KERAS = """Adasum Average Compression DistributedOptimizer PartialDistributedOptimizer
ProcessSet Sum add_process_set allgather allreduce broadcast broadcast_global_variables
callbacks ccl_built cross_rank cross_size cuda_built ddl_built elastic global_process_set gloo_built
gloo_enabled init is_initialized load_model local_rank local_size mpi_built mpi_enabled
mpi_threads_supported nccl_built rank reducescatter remove_process_set rocm_built shutdown size
start_timeline stop_timeline""".split()


def test_both_modules_have_horovods_names_and_the_same_objects():
    for name in HOROVOD_KERAS:
        assert name in hvd.__all__, name
        assert getattr(hvd_tf_keras, name) is getattr(hvd, name) or name in (
            "callbacks", "elastic"), name
    for module in ("callbacks", "elastic"):
        for name in getattr(hvd, module).__all__:
            assert getattr(getattr(hvd_tf_keras, module), name) is getattr(
                getattr(hvd, module), name), name
    assert hvd.allreduce(np.float32(hvd.rank())).numpy() == pytest.approx(
        (hvd.size() - 1) / 2)
    assert list(hvd.allgather([hvd.rank()]).numpy()) == list(range(hvd.size()))
    assert hvd.broadcast(np.float32(hvd.rank() + 5), root_rank=0).numpy() == 5
    with pytest.raises(RuntimeError, match="BroadcastGlobalVariablesCallback"):
        hvd.broadcast_global_variables(0)
