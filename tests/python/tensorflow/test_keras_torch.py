"""troika.keras on Keras 3's torch backend (KERAS_BACKEND=torch, build/venv-torch2: no
TensorFlow): the backend's own paths, each against one process training on the concatenated
batch (computed here, in the same process). A custom loop that calls ``loss.backward()`` and
``optimizer.apply``; model.fit with jit_compile=True (torch.compile); DistributedOptimizer's
options (op=Sum with fp16 compression, groups, backward_passes_per_step,
PartialDistributedOptimizer) in model.fit; the callbacks' other paths (the learning rate schedule with momentum correction, a local variable left out of the
broadcast); broadcast_variables and the value functions; load_model; elastic's KerasState.
model.fit with all the callbacks at 4 ranks: test_keras_fit.py, which runs on this backend too.

Every rank runs every test, with the same collectives in the same order (conftest.py). The
reference computations use no collective."""

import os
import sys
import tempfile

import keras
import numpy as np
import pytest
import torch

import troika.keras as hvd
from keras_helpers import (ATOL, BATCH, RTOL, STEPS, assert_same_on_every_rank, data,
                           gathered, make_model, reference_fit, root_initial_weights, shard,
                           weights_of)

pytestmark = pytest.mark.filterwarnings(
    "ignore:__array__ implementation doesn't accept a copy keyword:DeprecationWarning")


def test_the_backend_is_torch_and_tensorflow_is_not_imported():
    assert keras.backend.backend() == "torch"
    assert "tensorflow" not in sys.modules
    assert hvd.Compression.fp16.wire == torch.float16  # troika.torch's compression


def loss_of(model, x, y):
    return keras.ops.mean(keras.ops.square(model(x) - y))


def torch_step(model, opt, x, y):
    """One step as a Keras torch-backend custom loop writes it: backward, then apply."""
    model.zero_grad()
    loss_of(model, torch.as_tensor(x), torch.as_tensor(y)).backward()
    grads = [v.value.grad for v in model.trainable_weights]
    with torch.no_grad():
        opt.apply(grads, model.trainable_weights)


def test_custom_loop_apply_equals_one_process():
    x, y = data(seed=2)
    xs, ys = shard(x), shard(y)
    model = make_model(seed=100 + hvd.rank())
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))
    hvd.broadcast_variables(model.variables, root_rank=0)
    for i in range(STEPS):
        rows = slice(i * BATCH, (i + 1) * BATCH)
        torch_step(model, opt, xs[rows], ys[rows])
    assert_same_on_every_rank(weights_of(model))
    expected = reference_fit(keras.optimizers.SGD(0.1, momentum=0.9), 1, x, y)
    for got, want in zip(weights_of(model), weights_of(expected)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("average", [False, True])
def test_backward_passes_per_step_sums_locally_and_applies_every_nth_step(average):
    x, y = data(seed=4, steps=4)
    xs, ys = shard(x), shard(y)
    model = make_model(seed=100)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=2,
                                   average_aggregated_gradients=average)
    for i in range(4):
        rows = slice(i * BATCH, (i + 1) * BATCH)
        torch_step(model, opt, xs[rows], ys[rows])
    assert int(opt.iterations.numpy()) == 4
    # One process: the mean gradient over the concatenated batches of steps 2k and 2k+1, summed
    # (or averaged) over those two steps, applied once per pair.
    expected = make_model(seed=100)
    sgd = keras.optimizers.SGD(0.1)
    for pair in range(2):
        expected.zero_grad()
        total = None
        for i in (2 * pair, 2 * pair + 1):
            rows = slice(i * BATCH * hvd.size(), (i + 1) * BATCH * hvd.size())
            expected.zero_grad()
            loss_of(expected, torch.as_tensor(x[rows]), torch.as_tensor(y[rows])).backward()
            grads = [v.value.grad.clone() for v in expected.trainable_weights]
            total = grads if total is None else [a + b for a, b in zip(total, grads)]
        if average:
            total = [g / 2 for g in total]
        with torch.no_grad():
            sgd.apply(total, expected.trainable_weights)
    assert_same_on_every_rank(weights_of(model))
    for got, want in zip(weights_of(model), weights_of(expected)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_fit_with_op_sum_fp16_compression_and_groups():
    x, y = data(seed=1)
    model = make_model(seed=100)
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), op=hvd.Sum,
                                   compression=hvd.Compression.fp16, groups=2)
    model.compile(optimizer=opt, loss="mse")
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    assert_same_on_every_rank(weights_of(model))
    expected = make_model(seed=100)
    expected.compile(optimizer=keras.optimizers.Adam(0.01),
                     loss=lambda t, p: keras.ops.mean(keras.ops.square(t - p)) * hvd.size())
    expected.fit(x, y, batch_size=BATCH * hvd.size(), epochs=1, shuffle=False, verbose=0)
    for got, want in zip(weights_of(model), weights_of(expected)):
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-3)  # fp16 gradients


def test_groups_of_variables_and_gradient_predivide_factor_train_as_one_process():
    x, y = data(seed=6)
    model = make_model(seed=100)
    w = model.trainable_variables
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), groups=[[w[0], w[2]]],
                                   gradient_predivide_factor=2.0)
    model.compile(optimizer=opt, loss="mse")
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    assert_same_on_every_rank(weights_of(model))
    expected = reference_fit(keras.optimizers.SGD(0.1), 1, x, y)
    for got, want in zip(weights_of(model), weights_of(expected)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_jit_compiled_train_step_trains_as_one_process():
    """jit_compile=True: torch.compile's graph breaks at the collectives, which run eagerly."""
    x, y = data(seed=11)
    model = make_model(seed=100)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse",
                  jit_compile=True)
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    assert_same_on_every_rank(weights_of(model))
    expected = reference_fit(keras.optimizers.SGD(0.1), 1, x, y)
    for got, want in zip(weights_of(model), weights_of(expected)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_partial_distributed_optimizer_keeps_local_layers_gradients_local():
    x, y = data(seed=7)
    model = make_model(seed=100)
    local = model.layers[-1]
    opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=[local])
    model.compile(optimizer=opt, loss="mse")
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    everyone = gathered(weights_of(model))
    # The shared layer's weights are the same on every rank; the local layer's differ.
    for other in everyone[1:]:
        np.testing.assert_array_equal(other[0], everyone[0][0])
    if hvd.size() > 1:
        assert not np.array_equal(everyone[0][2], everyone[1][2])


def test_broadcast_callback_starts_every_rank_from_the_roots_weights_but_local_ones():
    model = make_model(seed=100 + hvd.rank())
    mine = weights_of(model)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.0)), loss="mse")
    kernel = model.layers[-1].kernel
    callback = hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[kernel])
    x, y = data(seed=8)
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=[callback])
    got, root = weights_of(model), root_initial_weights()
    for i in (0, 1, 3):
        np.testing.assert_array_equal(got[i], root[i])
    np.testing.assert_array_equal(got[2], mine[2])  # the local kernel, this rank's own
    if hvd.rank() != 0:
        assert not np.array_equal(got[2], root[2])


def test_schedule_with_momentum_correction_scales_the_velocities():
    x, y = data(seed=9)
    model = make_model(seed=100)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))
    model.compile(optimizer=opt, loss="mse")
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    before = [np.array(v) for v in opt.momentums]
    seen = []
    probe = keras.callbacks.LambdaCallback(on_train_batch_begin=lambda batch, logs: seen.append(
        [np.array(v) for v in opt.momentums]))
    # Epoch 1: 0.1 * 0.5 ** 1, set at its first batch, the velocities scaled by 0.5 with it.
    schedule = hvd.callbacks.LearningRateScheduleCallback(0.1, multiplier=0.5)
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=2, initial_epoch=1, shuffle=False,
              verbose=0, callbacks=[schedule, probe])
    for got, want in zip(seen[0], before):
        np.testing.assert_allclose(got, want * 0.5, rtol=1e-6)
    assert float(opt.learning_rate.numpy()) == pytest.approx(0.05)
    assert_same_on_every_rank(weights_of(model))


def test_value_functions_give_torch_tensors():
    assert hvd.allreduce(np.float32(hvd.rank())).item() == pytest.approx((hvd.size() - 1) / 2)
    assert hvd.allreduce(np.float32(hvd.rank()), op=hvd.Sum).item() == pytest.approx(
        sum(range(hvd.size())))
    gathered_ranks = hvd.allgather([hvd.rank()])
    assert isinstance(gathered_ranks, torch.Tensor)
    assert gathered_ranks.tolist() == list(range(hvd.size()))
    assert hvd.broadcast(np.float32(hvd.rank() + 5), root_rank=0).item() == 5
    rows = np.arange(2 * hvd.size(), dtype=np.float32) + hvd.rank()
    mine = hvd.reducescatter(rows, op=hvd.Sum)
    total = sum(np.arange(2 * hvd.size(), dtype=np.float32) + r for r in range(hvd.size()))
    np.testing.assert_array_equal(mine.numpy(), total[2 * hvd.rank():2 * hvd.rank() + 2])
    with pytest.raises(RuntimeError, match="BroadcastGlobalVariablesCallback"):
        hvd.broadcast_global_variables(0)


def test_broadcast_variables_covers_the_optimizer_and_unsigned_seed_state():
    model = make_model(seed=100 + hvd.rank())
    opt = keras.optimizers.Adam(0.01)
    opt.build(model.trainable_variables)
    opt.iterations.assign(hvd.rank() + 3)
    seed = keras.random.SeedGenerator(hvd.rank())  # its state is uint32
    hvd.broadcast_variables(model.variables + list(opt.variables) + [seed.state], root_rank=0)
    assert int(opt.iterations.numpy()) == 3
    assert_same_on_every_rank(weights_of(model) + [np.array(seed.state)])
    for got, want in zip(weights_of(model), root_initial_weights()):
        np.testing.assert_array_equal(got, want)


def test_load_model_restores_a_distributed_optimizer_with_its_state():
    x, y = data(seed=10)
    model = make_model(seed=100)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)),
                  loss="mse")
    model.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.keras")
        model.save(path)
        loaded = hvd.load_model(path)
        plain = keras.models.load_model(path)  # the plain optimizer, the same state
    assert type(loaded.optimizer).__name__ == "SGD"
    assert hasattr(loaded.optimizer, "_troika_allreduce_grads")
    assert not hasattr(plain.optimizer, "_troika_allreduce_grads")
    assert int(loaded.optimizer.iterations.numpy()) == STEPS
    # Training on goes on distributed: the same weights on every rank.
    loaded.fit(shard(x), shard(y), batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    assert_same_on_every_rank(weights_of(loaded))


def test_elastic_keras_state_commits_restores_and_syncs():
    model = make_model(seed=100 + hvd.rank())
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)),
                  loss="mse")
    state = hvd.elastic.KerasState(model, epoch=hvd.rank())
    assert model.optimizer.built
    state.sync()
    assert state.epoch == 0
    for got, want in zip(weights_of(model), root_initial_weights()):
        np.testing.assert_array_equal(got, want)
    state.commit()
    model.set_weights([w + 1 for w in weights_of(model)])
    state.epoch = 5
    state.restore()
    assert state.epoch == 0
    for got, want in zip(weights_of(model), root_initial_weights()):
        np.testing.assert_array_equal(got, want)
