"""troika.tensorflow's ops inside graphs: tf.function runs them at every call (never folded
away as constants), in any order (not chained in program order, so gradients can be submitted
as produced), tf.compat.v1 graphs and sessions, and the clear refusal of XLA compilation.

A collective that one rank never submits leaves the others waiting; tests that would hang on
a regression run their steps on a thread and fail after a generous bound instead."""

import threading

import numpy as np
import pytest
import tensorflow as tf

import troika.tensorflow as hvd


def finishes(fn, seconds=60):
    """Runs fn on a thread; its result, or a failure if it did not finish in `seconds` (the
    job is then stuck: the test fails and pytest's -x ends the session)."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # re-raised below
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail("still running after %d s: the ranks' collectives did not match" % seconds)
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_function_of_constants_runs_its_collective_at_every_call():
    # Rank 0's input is a constant, which grappler would fold a stateless op of; rank 1's is a
    # variable that changes. If rank 0's op ran once (at optimization), rank 1's later calls
    # would have no partner.
    r = hvd.rank()
    const = tf.constant([1.0, 2.0])
    var = tf.Variable([1.0, 2.0])

    @tf.function
    def on_constant():
        return hvd.allreduce(const, op=hvd.Sum, name="folding_probe")

    @tf.function
    def on_variable():
        return hvd.allreduce(var.read_value(), op=hvd.Sum, name="folding_probe")

    def three_calls():
        results = []
        for i in range(3):
            results.append((on_constant() if r == 0 else on_variable()).numpy())
            var.assign_add([1.0, 1.0])
        return results

    results = finishes(three_calls)
    n = hvd.size()
    for i, got in enumerate(results):
        # rank 0 adds [1, 2]; every other rank its variable's value at call i
        np.testing.assert_allclose(got, [1.0 + (n - 1) * (1.0 + i), 2.0 + (n - 1) * (2.0 + i)])


def test_collectives_in_one_function_run_in_any_order():
    # The ranks build the same two allreduces in opposite program orders. Chained in program
    # order (tf.function's rule for stateful ops), each rank would wait for the other's second.
    x = tf.constant([float(hvd.rank())])

    @tf.function
    def step():
        if hvd.rank() % 2 == 0:
            a = hvd.allreduce(x, op=hvd.Sum, name="first")
            b = hvd.allreduce(x + 1, op=hvd.Sum, name="second")
        else:
            b = hvd.allreduce(x + 1, op=hvd.Sum, name="second")
            a = hvd.allreduce(x, op=hvd.Sum, name="first")
        return a, b

    for _ in range(2):
        a, b = finishes(step)
        total = sum(range(hvd.size()))
        np.testing.assert_array_equal(a.numpy(), [total])
        np.testing.assert_array_equal(b.numpy(), [total + hvd.size()])


def test_unnamed_ops_in_a_function_match_across_ranks():
    @tf.function
    def step(x):
        y = hvd.allreduce(x * 2.0, op=hvd.Sum)
        return hvd.allgather(y), hvd.broadcast(x, 0), hvd.reducescatter(tf.stack([x] * hvd.size()))

    for i in range(3):
        x = tf.constant([float(hvd.rank() + i)])
        g, b, rs = finishes(lambda: step(x))
        total = 2.0 * sum(q + i for q in range(hvd.size()))
        np.testing.assert_array_equal(g.numpy(), [total] * hvd.size())
        np.testing.assert_array_equal(b.numpy(), [float(i)])
        assert rs.shape == [1, 1]


def test_gradients_in_a_function():
    w = tf.Variable([1.0, -1.0])

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(hvd.allreduce(w * float(hvd.rank() + 1), op=hvd.Sum))
        tape = hvd.DistributedGradientTape(tape)
        return tape.gradient(y, [w])[0]

    g = finishes(step)
    n = hvd.size()
    # d/dw of sum_r (r+1) w, on every rank, averaged by the tape
    np.testing.assert_allclose(g.numpy(), [n * (n + 1) / 2.0] * 2)


def test_v1_graph_and_session():
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2])
        s = hvd.allreduce(x, op=hvd.Sum)
        n_op = hvd.size_op()
        with tf.compat.v1.Session() as sess:
            for i in range(2):
                got, n = finishes(lambda: sess.run([s, n_op], {x: [float(hvd.rank()), float(i)]}))
                np.testing.assert_array_equal(got, [sum(range(hvd.size())), i * hvd.size()])
                assert n == hvd.size()


def test_object_helpers_in_a_v1_session():
    with tf.Graph().as_default(), tf.compat.v1.Session():
        got = finishes(lambda: hvd.broadcast_object({"from": hvd.rank()}, root_rank=0,
                                                    name="v1_object"))
        assert got == {"from": 0}
        assert finishes(lambda: hvd.allgather_object(hvd.rank(), name="v1_objects")) == list(
            range(hvd.size()))
    with tf.Graph().as_default():
        with pytest.raises(ValueError, match="session"):
            hvd.allgather_object(1, name="no_session")


def test_jit_compile_is_refused_naming_the_alternative():
    @tf.function(jit_compile=True)
    def compiled(x):
        return hvd.allreduce(x)

    with pytest.raises(Exception, match="jit_compile=False"):
        compiled(tf.constant([1.0]))
    # The same collective outside XLA still runs.
    np.testing.assert_array_equal(hvd.allreduce(tf.constant([1.0]), op=hvd.Sum).numpy(),
                                  [float(hvd.size())])


def test_ops_before_init_fail_clearly():
    # The op library is bound to the context from init(); shutting down and initializing
    # again binds it to the new one.
    hvd.shutdown()
    with pytest.raises(tf.errors.FailedPreconditionError):
        hvd.allreduce(tf.constant([1.0]), name="after_shutdown")
    hvd.init()
    np.testing.assert_array_equal(hvd.allreduce(tf.constant([1.0]), op=hvd.Sum).numpy(),
                                  [float(hvd.size())])


def test_allreduces_chained_in_a_function_keep_running_under_steady_state_schedules():
    # Each allreduce takes the one before's result, so the function submits it only after the
    # kernel's completion callback: a steady-state schedule must keep them in collectives of
    # their own. Until 2026-11-28 a completion delivered to a callback registered before it
    # went unseen, the schedule fused the three into one collective once the ranks' reports
    # came in (large tensors: the callback is registered first), and the step hung.
    n = hvd.size()
    x = tf.Variable(tf.ones([1 << 22]))  # 16 MiB

    @tf.function
    def step():
        a = hvd.allreduce(x, op=hvd.Sum, name="chain.a")
        b = hvd.allreduce(a * 2.0, op=hvd.Sum, name="chain.b")
        return hvd.allreduce(b * 0.5, op=hvd.Sum, name="chain.c")

    def steps():
        for _ in range(150):  # a schedule, its reports, and a bucketed one: well within
            c = step()
        return c.numpy()

    c = finishes(steps, seconds=120)
    assert np.all(c == float(n ** 3))
