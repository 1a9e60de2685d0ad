"""troika.tensorflow.DistributedOptimizer on tf.compat.v1.train.Optimizers, in v1 graphs and
sessions and eagerly: training equals one process on the concatenated batch; compute_gradients
returns the allreduced gradients with Horovod's options (op, predivision, groups, sparse
gradients, local variables, process sets); local aggregation over backward_passes_per_step;
what it refuses; broadcast_global_variables and BroadcastGlobalVariablesHook."""

import contextlib

import numpy as np
import pytest
import tensorflow as tf

import troika.tensorflow as hvd

TOLERANCE = 1e-5  # float32 sums in another order
STEPS = 4


def initial(seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=[4, 3]).astype(np.float32), rng.normal(size=[3]).astype(np.float32)


def batch(r, step):
    """Rank r's batch of step `step`: 8 rows."""
    rng = np.random.default_rng(1000 * step + r)
    return (rng.normal(size=[8, 4]).astype(np.float32),
            rng.normal(size=[8, 3]).astype(np.float32))


def loss_of(w, b, x, y):
    return tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))


def reference(steps, lr=0.1):
    """One process, every rank's batch concatenated: (w, b) after `steps` SGD steps."""
    w, b = (tf.Variable(v) for v in initial(0))
    for step in range(steps):
        xs, ys = zip(*[batch(r, step) for r in range(hvd.size())])
        with tf.GradientTape() as tape:
            loss = loss_of(w, b, np.concatenate(xs), np.concatenate(ys))
        for v, g in zip((w, b), tape.gradient(loss, [w, b])):
            v.assign_sub(lr * g)
    return w.numpy(), b.numpy()


def assert_close(got, want, tolerance=TOLERANCE):
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=tolerance, atol=tolerance)


def train_in_a_v1_graph(steps, **options):
    """minimize() in a v1 graph and session; every rank starts from its own weights, made
    rank 0's by broadcast_global_variables."""
    with tf.Graph().as_default():
        w0, b0 = initial(hvd.rank())
        w = tf.compat.v1.get_variable("w", initializer=w0)
        b = tf.compat.v1.get_variable("b", initializer=b0)
        x = tf.compat.v1.placeholder(tf.float32, [None, 4])
        y = tf.compat.v1.placeholder(tf.float32, [None, 3])
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                       **options)
        train_op = opt.minimize(loss_of(w, b, x, y))
        sync = hvd.broadcast_global_variables(0)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(sync)
            for step in range(steps):
                xb, yb = batch(hvd.rank(), step)
                sess.run(train_op, feed_dict={x: xb, y: yb})
            return sess.run([w, b])


def train_eagerly(steps, **options):
    w0, b0 = initial(hvd.rank())
    w, b = tf.Variable(w0, name="w"), tf.Variable(b0, name="b")
    hvd.broadcast_variables([w, b], root_rank=0)
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), **options)
    for step in range(steps):
        xb, yb = batch(hvd.rank(), step)
        opt.minimize(lambda: loss_of(w, b, xb, yb), var_list=[w, b])
    return w.numpy(), b.numpy()


def same_on_every_rank(values):
    for v in values:
        for other in hvd.allgather_object(v):
            np.testing.assert_array_equal(other, v)


@pytest.mark.parametrize("train", [train_in_a_v1_graph, train_eagerly])
def test_minimize_equals_one_process_on_the_concatenated_batch(train):
    got = train(STEPS)
    same_on_every_rank(got)
    assert_close(got, reference(STEPS))


@pytest.mark.parametrize("options", [dict(groups=1), dict(num_groups=2),
                                     dict(gradient_predivide_factor=2.0),
                                     dict(compression=hvd.Compression.fp16),
                                     dict(sparse_as_dense=True)])
def test_options_give_the_same_training(options):
    with (pytest.warns(DeprecationWarning) if "num_groups" in options
          else contextlib.nullcontext()):
        got = train_in_a_v1_graph(2, **options)
    assert_close(got, reference(2), 2e-3 if "compression" in options else TOLERANCE)


def rank_gradient_optimizer(variable, sparse=False):
    """A v1 optimizer whose gradient of `variable` is [rank + 1] (as Horovod's tests' own)."""

    class RankGradient(tf.compat.v1.train.Optimizer):
        def compute_gradients(self, *args, **kwargs):
            g = tf.constant([hvd.rank() + 1.0])
            if sparse:
                g = tf.IndexedSlices(g, tf.constant([0]), tf.constant([1]))
            return [(g, variable)]

        def _apply_dense(self, grad, var):
            return var.assign_add(grad)

        def _resource_apply_dense(self, grad, handle):
            return tf.raw_ops.AssignAddVariableOp(resource=getattr(handle, "handle", handle),
                                                  value=grad)

    return RankGradient(use_locking=False, name="rank_gradient")


def average_of_ranks():
    return sum(r + 1.0 for r in range(hvd.size())) / hvd.size()


def test_compute_gradients_returns_them_allreduced_with_the_op_asked():
    v = tf.Variable([0.0])
    for options, want in [({}, average_of_ranks()),
                          (dict(op=hvd.Sum), average_of_ranks() * hvd.size()),
                          (dict(op=hvd.Max), float(hvd.size())),
                          (dict(gradient_predivide_factor=4.0), average_of_ranks())]:
        opt = hvd.DistributedOptimizer(rank_gradient_optimizer(v), **options)
        ((g, var),) = opt.compute_gradients()
        assert var is v
        np.testing.assert_allclose(g.numpy(), [want], rtol=TOLERANCE)


def test_sparse_gradients_are_allgathered_or_made_dense():
    v = tf.Variable([0.0])
    (g, _), = hvd.DistributedOptimizer(rank_gradient_optimizer(v, sparse=True)).compute_gradients()
    assert isinstance(g, tf.IndexedSlices)
    np.testing.assert_array_equal(g.indices.numpy(), [0] * hvd.size())
    np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(), [average_of_ranks()])
    opt = hvd.DistributedOptimizer(rank_gradient_optimizer(v, sparse=True), sparse_as_dense=True)
    (g, _), = opt.compute_gradients()
    assert not isinstance(g, tf.IndexedSlices)
    np.testing.assert_allclose(g.numpy(), [average_of_ranks()])


def test_a_local_variables_gradient_stays_local_and_is_scaled():
    shared, local = tf.Variable(1.0), tf.Variable(1.0)
    factor = hvd.rank() + 1.0
    for scale in (True, False):
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                       scale_local_gradients=scale)
        opt.register_local_var(local)
        (g_shared, _), (g_local, _) = opt.compute_gradients(
            lambda: factor * shared + factor * local, var_list=[shared, local])
        np.testing.assert_allclose(g_shared.numpy(), average_of_ranks())
        np.testing.assert_allclose(g_local.numpy(), factor / hvd.size() if scale else factor)


def test_groups_of_variables_give_the_same_gradients():
    w, b = (tf.Variable(v) for v in initial(0))
    x, y = batch(hvd.rank(), 0)
    results = []
    for groups in (None, [[w, b]], [[b]], 2):
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                       groups=groups)
        results.append([g.numpy() for g, _ in
                        opt.compute_gradients(lambda: loss_of(w, b, x, y), var_list=[w, b])])
    for other in results[1:]:
        assert_close(other, results[0])


def test_a_process_set_reduces_over_its_ranks_only():
    first = hvd.add_process_set([0])
    try:
        v = tf.Variable([0.0])
        opt = hvd.DistributedOptimizer(rank_gradient_optimizer(v), process_set=first)
        ((g, _),) = opt.compute_gradients()
        # Rank 0 alone in the set: every rank keeps its own gradient (outside the set as is).
        np.testing.assert_allclose(g.numpy(), [hvd.rank() + 1.0])
    finally:
        hvd.remove_process_set(first)


def expected_after_aggregation(step, passes):
    """The variable after step `step` (0-based) of rank_gradient_optimizer with
    backward_passes_per_step=passes and average_aggregated_gradients: each completed
    aggregation adds the average over ranks of the (averaged) sum of `passes` gradients."""
    return ((step + 1) // passes) * average_of_ranks()


def test_local_aggregation_in_a_v1_graph_applies_every_n_steps_and_counts_each():
    passes = 3
    with tf.Graph().as_default():
        v = tf.compat.v1.get_variable("v", initializer=[0.0])
        step_var = tf.compat.v1.get_variable("step", initializer=tf.constant(0, tf.int64),
                                             trainable=False)
        opt = hvd.DistributedOptimizer(rank_gradient_optimizer(v),
                                       backward_passes_per_step=passes,
                                       average_aggregated_gradients=True)
        grads_and_vars = opt.compute_gradients()
        update = opt.apply_gradients(grads_and_vars, global_step=step_var)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(tf.compat.v1.local_variables_initializer())
            for step in range(7):
                sess.run(update)
                np.testing.assert_allclose(sess.run(v), [expected_after_aggregation(step,
                                                                                   passes)])
                assert sess.run(step_var) == step + 1


def test_local_aggregation_eagerly_and_its_sparse_rule():
    passes = 2
    v = tf.Variable([0.0])
    opt = hvd.DistributedOptimizer(rank_gradient_optimizer(v), backward_passes_per_step=passes,
                                   average_aggregated_gradients=True)
    for step in range(5):
        opt.apply_gradients(opt.compute_gradients())
        np.testing.assert_allclose(v.numpy(), [expected_after_aggregation(step, passes)])
    sparse = hvd.DistributedOptimizer(rank_gradient_optimizer(v, sparse=True),
                                      backward_passes_per_step=passes)
    with pytest.raises(ValueError, match="sparse_as_dense"):
        sparse.compute_gradients()
    dense = hvd.DistributedOptimizer(rank_gradient_optimizer(v, sparse=True),
                                     backward_passes_per_step=passes, sparse_as_dense=True)
    v.assign([0.0])
    for step in range(4):
        dense.apply_gradients(dense.compute_gradients())
    # Not averaged over the passes: each aggregation adds the sum of 2 averaged gradients.
    np.testing.assert_allclose(v.numpy(), [2 * passes * average_of_ranks()])


def test_it_wraps_only_v1_optimizers_and_refuses_what_horovod_refuses():
    with pytest.raises(TypeError, match="troika.tensorflow.keras.DistributedOptimizer"):
        hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.1))
    sgd = tf.compat.v1.train.GradientDescentOptimizer(0.1)
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        hvd.DistributedOptimizer(sgd, op=hvd.Sum, gradient_predivide_factor=2.0)
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.DistributedOptimizer(sgd, op=hvd.Adasum)
    with pytest.raises(ValueError, match="groups"):
        hvd.DistributedOptimizer(sgd, groups=-1)
    opt = hvd.DistributedOptimizer(sgd)
    assert opt.get_name() == "DistributedGradientDescentOptimizer"
    assert opt._optimizer is sgd


def test_broadcast_global_variables_is_for_graphs():
    with pytest.raises(RuntimeError, match="broadcast_variables"):
        hvd.broadcast_global_variables(0)


def test_the_hook_gives_every_rank_the_roots_variables_when_the_session_starts():
    root = hvd.size() - 1
    with tf.Graph().as_default():
        v = tf.compat.v1.get_variable("v", initializer=[float(hvd.rank())] * 3)
        hook = hvd.BroadcastGlobalVariablesHook(root)
        with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as sess:
            np.testing.assert_array_equal(sess.run(v), [float(root)] * 3)
