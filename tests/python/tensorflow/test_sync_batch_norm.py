"""hvd.SyncBatchNormalization equals one BatchNormalization over the ranks' concatenated
batches in training: outputs, moving statistics and gradients (of the inputs, and summed over
the ranks, of gamma and beta), with ranks of different batch sizes, several layouts, eagerly
and in tf.function; in inference it is the plain layer. Run with Keras 3 and, with
TF_USE_LEGACY_KERAS=1, with Keras 2 (tf_keras)."""

import os

import numpy as np
import pytest
import tensorflow as tf

import troika.tensorflow as hvd

KERAS_2 = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
TOLERANCE = 1e-5


def rank_rows(r, shape):
    """Rank r's batch: 2 + r rows (ranks differ), of values whose mean and spread differ per
    channel and per rank."""
    rng = np.random.default_rng(r)
    x = rng.normal(size=[2 + r] + shape).astype(np.float32)
    return x * (1.0 + r) + 3.0 * r


def plain_layer(**kwargs):
    if KERAS_2:
        kwargs["fused"] = False
    return tf.keras.layers.BatchNormalization(**kwargs)


def weighted_loss(y):
    """A loss whose every element's weight differs, summed: the loss of the concatenated batch
    is the sum of the ranks' losses."""
    weights = tf.reshape(tf.cast(tf.range(tf.size(y[0])), y.dtype), y.shape[1:]) / 7.0 + 0.5
    return tf.reduce_sum(tf.sin(y) * weights)


def run(layer, x, compiled):
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            loss = weighted_loss(y)
        dx, dgamma, dbeta = tape.gradient(loss, [x, layer.gamma, layer.beta])
        return y, dx, dgamma, dbeta

    return (tf.function(step) if compiled else step)(tf.constant(x))


CASES = [dict(shape=[5], axis=-1), dict(shape=[3, 4, 2], axis=1),
         dict(shape=[3, 2, 4], axis=-1)]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("case", CASES, ids=["dense", "channels_first", "channels_last"])
def test_training_equals_one_layer_over_the_concatenated_batch(case, compiled):
    xs = [rank_rows(r, case["shape"]) for r in range(hvd.size())]
    plain = plain_layer(axis=case["axis"], momentum=0.5)
    y_all, dx_all, dgamma_all, dbeta_all = run(plain, np.concatenate(xs), compiled)

    sync = hvd.SyncBatchNormalization(axis=case["axis"], momentum=0.5)
    y, dx, dgamma, dbeta = run(sync, xs[hvd.rank()], compiled)

    start = sum(len(xs[r]) for r in range(hvd.size()) if r < hvd.rank())
    rows = slice(start, start + len(xs[hvd.rank()]))
    np.testing.assert_allclose(y.numpy(), y_all.numpy()[rows], rtol=TOLERANCE, atol=TOLERANCE)
    np.testing.assert_allclose(dx.numpy(), dx_all.numpy()[rows], rtol=1e-4, atol=1e-4)
    for local, full in ((dgamma, dgamma_all), (dbeta, dbeta_all)):
        summed = hvd.allreduce(local, op=hvd.Sum)
        np.testing.assert_allclose(summed.numpy(), full.numpy(), rtol=1e-4, atol=1e-4)
    for name in ("moving_mean", "moving_variance"):
        np.testing.assert_allclose(getattr(sync, name).numpy(), getattr(plain, name).numpy(),
                                   rtol=TOLERANCE, atol=TOLERANCE)


def test_inference_uses_the_moving_statistics_as_the_plain_layer():
    x = rank_rows(hvd.rank(), [4])
    sync = hvd.SyncBatchNormalization()
    plain = plain_layer()
    sync(x, training=False), plain(x, training=False)
    sync.set_weights([w + 0.25 for w in plain.get_weights()])
    plain.set_weights(sync.get_weights())
    np.testing.assert_allclose(sync(x, training=False).numpy(), plain(x, training=False).numpy(),
                               rtol=TOLERANCE)


def test_a_keras_model_with_it_trains_to_the_same_weights_on_every_rank():
    inputs = tf.keras.Input((4,))  # the same start on every rank
    outputs = tf.keras.layers.Dense(1, kernel_initializer="ones")(hvd.SyncBatchNormalization()(
        tf.keras.layers.Dense(3, kernel_initializer="ones")(inputs)))
    model = tf.keras.Model(inputs, outputs)
    opt = tf.keras.optimizers.SGD(0.05)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        tape = hvd.DistributedGradientTape(tape)
        variables = model.trainable_variables
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

    for _ in range(3):
        x = rank_rows(hvd.rank(), [4])
        step(x, x[:, :1])
    for v in model.variables:
        for other in hvd.allgather_object(v.numpy()):
            np.testing.assert_allclose(other, v.numpy(), rtol=1e-6)


def test_fused_is_refused_as_horovod_does():
    for fused in (True, None):
        with pytest.raises(ValueError, match="fused"):
            hvd.SyncBatchNormalization(fused=fused)


def test_it_is_a_layer_of_the_keras_in_use():
    layer = hvd.SyncBatchNormalization()
    assert isinstance(layer, tf.keras.layers.BatchNormalization)
    assert type(layer).__mro__[1].__module__.startswith("tf_keras" if KERAS_2 else "keras")


def test_it_round_trips_through_keras_serialization():
    config = tf.keras.layers.serialize(hvd.SyncBatchNormalization(axis=1, momentum=0.5))
    layer = tf.keras.layers.deserialize(config)
    assert type(layer) is hvd.SyncBatchNormalization
    assert (layer.axis in (1, [1]), layer.momentum) == (True, 0.5)
