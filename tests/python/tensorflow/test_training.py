"""Training with troika.tensorflow: DistributedGradientTape, eagerly and in tf.function, gives
every rank the weights one process gets from the concatenated batch; its options (groups,
sparse gradients, predivision, local sources); broadcast_variables."""

import numpy as np
import pytest
import tensorflow as tf

import troika.tensorflow as hvd

TOLERANCE = 1e-5  # float32 sums in another order


def make_weights(seed):
    rng = np.random.default_rng(seed)
    return [tf.Variable(rng.normal(size=[4, 3]).astype(np.float32), name="w"),
            tf.Variable(rng.normal(size=[3]).astype(np.float32), name="b")]


def batch(r, step):
    """Rank r's batch of step `step`: 8 rows."""
    rng = np.random.default_rng(1000 * step + r)
    return (rng.normal(size=[8, 4]).astype(np.float32),
            rng.normal(size=[8, 3]).astype(np.float32))


def loss_fn(weights, x, y):
    w, b = weights
    return tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))


def sgd(weights, grads, lr=0.1):
    for v, g in zip(weights, grads):
        v.assign_sub(lr * g)


def reference(steps):
    """One process, every rank's batch concatenated: the weights after `steps` steps."""
    weights = make_weights(seed=0)
    for step in range(steps):
        xs, ys = zip(*[batch(r, step) for r in range(hvd.size())])
        x, y = np.concatenate(xs), np.concatenate(ys)
        with tf.GradientTape() as tape:
            loss = loss_fn(weights, x, y)
        sgd(weights, tape.gradient(loss, weights))
    return [v.numpy() for v in weights]


def assert_same_on_every_rank(weights):
    for v in weights:
        gathered = hvd.allgather_object(v.numpy())
        for other in gathered:
            np.testing.assert_array_equal(other, gathered[0])


def train(steps, compiled, **tape_options):
    # Every rank starts elsewhere; broadcast_variables makes it rank 0's start.
    weights = make_weights(seed=hvd.rank())
    hvd.broadcast_variables(weights, root_rank=0)

    def step_fn(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(weights, x, y)
        tape = hvd.DistributedGradientTape(tape, **tape_options)
        sgd(weights, tape.gradient(loss, weights))

    step_fn = tf.function(step_fn) if compiled else step_fn
    for step in range(steps):
        step_fn(*batch(hvd.rank(), step))
    return weights


@pytest.mark.parametrize("compiled", [False, True])
def test_tape_equals_one_process_on_the_concatenated_batch(compiled):
    weights = train(5, compiled)
    assert_same_on_every_rank(weights)
    for got, want in zip(weights, reference(5)):
        np.testing.assert_allclose(got.numpy(), want, rtol=TOLERANCE, atol=TOLERANCE)


@pytest.mark.parametrize("options", [dict(groups=1), dict(num_groups=2),
                                     dict(gradient_predivide_factor=2.0),
                                     dict(compression=hvd.Compression.fp16)])
def test_tape_options_give_the_same_training(options):
    weights = train(3, compiled=True, **options)
    tolerance = 2e-3 if "compression" in options else TOLERANCE
    for got, want in zip(weights, reference(3)):
        np.testing.assert_allclose(got.numpy(), want, rtol=tolerance, atol=tolerance)


def test_tape_groups_of_variables():
    w = make_weights(seed=0)
    with tf.GradientTape() as tape:
        loss = loss_fn(w, *batch(hvd.rank(), 0))
    tape = hvd.DistributedGradientTape(tape, groups=[[w[0], w[1]]])
    grouped = tape.gradient(loss, w)
    with tf.GradientTape() as tape:
        loss = loss_fn(w, *batch(hvd.rank(), 0))
    plain = hvd.DistributedGradientTape(tape).gradient(loss, w)
    for a, b in zip(grouped, plain):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=TOLERANCE)


def test_sparse_gradients_allgathered_or_dense():
    table = tf.Variable(np.arange(12, dtype=np.float32).reshape(6, 2))
    ids = tf.constant([hvd.rank() % 6, (hvd.rank() + 1) % 6])
    results = []
    for sparse_as_dense in (False, True):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.nn.embedding_lookup(table, ids)) * float(hvd.rank() + 1)
        tape = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense)
        (g,) = tape.gradient(loss, [table])
        assert isinstance(g, tf.IndexedSlices) != sparse_as_dense
        results.append(tf.convert_to_tensor(g).numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=TOLERANCE)
    expected = np.zeros([6, 2], np.float32)
    for r in range(hvd.size()):
        for i in (r % 6, (r + 1) % 6):
            expected[i] += (r + 1.0) / hvd.size()
    np.testing.assert_allclose(results[1], expected, rtol=TOLERANCE)


def test_partial_tape_keeps_local_gradients_local():
    shared = tf.keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
    local = tf.keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")
    x = tf.ones([1, 1]) * float(hvd.rank() + 1)
    shared(x), local(x)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(shared(x) + local(x))
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=[local])
    g_shared, g_local = tape.gradient(loss, [shared.kernel, local.kernel])
    n = hvd.size()
    np.testing.assert_allclose(g_shared.numpy(), [[sum(r + 1.0 for r in range(n)) / n]])
    # a local gradient is this rank's own, divided by the size (scale_local_gradients)
    np.testing.assert_allclose(g_local.numpy(), [[(hvd.rank() + 1.0) / n]])


def test_broadcast_variables_in_a_v1_graph():
    with tf.Graph().as_default():
        v = tf.compat.v1.Variable([float(hvd.rank())] * 2, use_resource=True)
        sync = hvd.broadcast_variables([v], root_rank=hvd.size() - 1)
        with tf.compat.v1.Session() as sess:
            sess.run(v.initializer)
            sess.run(sync)
            np.testing.assert_array_equal(sess.run(v), [hvd.size() - 1.0] * 2)


def test_broadcast_variables_of_a_keras_model_and_of_unnamed_variables():
    tf.keras.utils.set_random_seed(hvd.rank())  # different weights on every rank
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2),
                                 tf.keras.layers.Dense(2)])
    # Keras 3 variables (a tf.function takes them as tensors: their tf.Variables are
    # assigned) and two tf.Variables of one default name ("Variable"), which must not share
    # one negotiated name.
    unnamed = [tf.Variable([float(hvd.rank())]), tf.Variable([10.0 + hvd.rank()])]
    hvd.broadcast_variables(model.variables + unnamed, root_rank=0)
    for v in model.variables:
        for other in hvd.allgather_object(v.numpy()):
            np.testing.assert_array_equal(other, v.numpy())
    np.testing.assert_array_equal([u.numpy() for u in unnamed], [[0.0], [10.0]])
