"""troika.tensorflow's collectives eagerly, on every dtype and a few shapes, with Horovod's
argument rules and errors; each gradient with Horovod's conventions. Every rank checks its
results against values it computes itself (conftest.rank_input)."""

import numpy as np
import pytest
import tensorflow as tf

import troika.tensorflow as hvd
from conftest import DTYPES, FLOAT_DTYPES, rank_input, as_float64

SHAPES = [[], [0], [1], [5], [3, 4], [1025]]


def ranks():
    return range(hvd.size())


def expected_sum(dtype, shape):
    return sum(as_float64(rank_input(dtype, shape, r)) for r in ranks())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_allreduce_sum_and_average(dtype, shape):
    x = rank_input(dtype, shape, hvd.rank())
    total = expected_sum(dtype, shape)
    s = hvd.allreduce(x, op=hvd.Sum)
    assert s.dtype == dtype and s.shape == x.shape
    np.testing.assert_allclose(as_float64(s), total)
    a = hvd.allreduce(x)  # Average by default
    expected = total / hvd.size() if dtype.is_floating else np.trunc(total / hvd.size())
    np.testing.assert_allclose(as_float64(a), expected, rtol=1e-2 if dtype in (tf.float16, tf.bfloat16) else 1e-6)


@pytest.mark.parametrize("op,fold", [(hvd.Min, np.minimum), (hvd.Max, np.maximum),
                                     (hvd.Product, np.multiply)])
def test_allreduce_min_max_product(op, fold):
    x = rank_input(tf.int32, [6], hvd.rank())
    expected = as_float64(rank_input(tf.int32, [6], 0))
    for r in list(ranks())[1:]:
        expected = fold(expected, as_float64(rank_input(tf.int32, [6], r)))
    np.testing.assert_array_equal(as_float64(hvd.allreduce(x, op=op)), expected)


def test_allreduce_scale_factors_and_fp16_compression():
    x = rank_input(tf.float32, [8], hvd.rank())
    total = expected_sum(tf.float32, [8])
    y = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    np.testing.assert_allclose(y.numpy(), total * 1.5, rtol=1e-6)
    z = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert z.dtype == tf.float32
    np.testing.assert_allclose(z.numpy(), total, rtol=1e-3)


def test_average_flag_and_op_together_raise():
    with pytest.warns(DeprecationWarning):
        hvd.allreduce(tf.constant([1.0]), average=False)
    with pytest.raises(ValueError):
        hvd.allreduce(tf.constant([1.0]), average=True, op=hvd.Sum)


def test_adasum_is_refused_with_the_alternative():
    with pytest.raises(NotImplementedError, match="op=Average"):
        hvd.allreduce(tf.constant([1.0]), op=hvd.Adasum)


def test_indexed_slices_allreduce_gathers_values_and_indices():
    r = hvd.rank()
    s = tf.IndexedSlices(tf.constant([[float(r + 1)]]), tf.constant([r]), tf.constant([4, 1]))
    out = hvd.allreduce(s, op=hvd.Average)
    assert isinstance(out, tf.IndexedSlices)
    np.testing.assert_array_equal(out.indices.numpy(), list(ranks()))
    np.testing.assert_allclose(out.values.numpy()[:, 0], [(q + 1) / hvd.size() for q in ranks()])


@pytest.mark.parametrize("dtype", [tf.int32, tf.float32, tf.bfloat16])
def test_grouped_allreduce_mixed_shapes(dtype):
    xs = [rank_input(dtype, [3], hvd.rank()), rank_input(dtype, [2, 2], hvd.rank())]
    out = hvd.grouped_allreduce(xs, op=hvd.Sum)
    for x, o in zip(xs, out):
        np.testing.assert_allclose(as_float64(o), expected_sum(dtype, x.shape.as_list()))
    assert hvd.grouped_allreduce([]) == []


@pytest.mark.parametrize("dtype", DTYPES + [tf.bool])
def test_allgather_variable_dim0(dtype):
    r = hvd.rank()
    x = tf.cast(tf.fill([r + 1, 2], r + 1), dtype)
    g = hvd.allgather(x)
    assert g.shape == [sum(q + 1 for q in ranks()), 2] and g.dtype == dtype
    rows = np.concatenate([np.full([q + 1, 2], q + 1) for q in ranks()])
    np.testing.assert_array_equal(as_float64(g), rows.astype(bool) if dtype == tf.bool else rows)


def test_grouped_allgather():
    r = hvd.rank()
    a, b = hvd.grouped_allgather([tf.fill([r + 1], r), tf.fill([1, 3], float(r))])
    np.testing.assert_array_equal(a.numpy(), np.concatenate([[q] * (q + 1) for q in ranks()]))
    np.testing.assert_array_equal(b.numpy(), [[q] * 3 for q in ranks()])


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_from_every_root(dtype):
    for root in ranks():
        x = rank_input(dtype, [2, 3], hvd.rank())
        np.testing.assert_array_equal(as_float64(hvd.broadcast(x, root)),
                                      as_float64(rank_input(dtype, [2, 3], root)))


def test_broadcast_inplace_assigns_variables():
    v = tf.Variable([float(hvd.rank())] * 3)
    w = tf.Variable([hvd.rank() + 10])
    values = hvd.broadcast_([v, w], root_rank=hvd.size() - 1)
    np.testing.assert_array_equal(v.numpy(), [hvd.size() - 1.0] * 3)
    np.testing.assert_array_equal(w.numpy(), [hvd.size() + 9])
    np.testing.assert_array_equal(values[0].numpy(), v.numpy())


def test_alltoall_with_and_without_splits():
    n, r = hvd.size(), hvd.rank()
    # rank r sends (j + 1) rows of value r to rank j
    x = tf.concat([tf.fill([j + 1, 2], r) for j in range(n)], axis=0)
    out, received = hvd.alltoall(x, splits=[j + 1 for j in range(n)])
    np.testing.assert_array_equal(received.numpy(), [r + 1] * n)
    np.testing.assert_array_equal(out.numpy(), np.repeat(np.arange(n), r + 1)[:, None].repeat(2, 1))
    even = hvd.alltoall(tf.fill([n], r))
    np.testing.assert_array_equal(even.numpy(), np.arange(n))


@pytest.mark.parametrize("dim0", [1, 4, 7])
def test_reducescatter_rows_per_rank(dim0):
    n, r = hvd.size(), hvd.rank()
    x = rank_input(tf.float32, [dim0, 2], r)
    total = expected_sum(tf.float32, [dim0, 2])
    rows = [dim0 // n + (1 if q < dim0 % n else 0) for q in range(n)]
    start = sum(rows[:r])
    s = hvd.reducescatter(x, op=hvd.Sum)
    assert s.shape == [rows[r], 2]
    np.testing.assert_allclose(s.numpy(), total[start:start + rows[r]])
    a = hvd.reducescatter(x)  # Average by default
    np.testing.assert_allclose(a.numpy(), total[start:start + rows[r]] / n, rtol=1e-6)
    with pytest.raises(ValueError):
        hvd.reducescatter(x, op=hvd.Max)


def test_grouped_reducescatter():
    n, r = hvd.size(), hvd.rank()
    xs = [rank_input(tf.float32, [n, 2], r), rank_input(tf.int64, [2 * n], r)]
    out = hvd.grouped_reducescatter(xs, op=hvd.Sum)
    np.testing.assert_allclose(out[0].numpy(), expected_sum(tf.float32, [n, 2])[r:r + 1])
    np.testing.assert_allclose(out[1].numpy(), expected_sum(tf.int64, [2 * n])[2 * r:2 * r + 2])


def test_mismatched_shapes_fail_on_every_rank():
    x = tf.zeros([hvd.rank() + 1])
    with pytest.raises(tf.errors.FailedPreconditionError):
        hvd.allreduce(x, name="mismatched_shape")


def test_mismatched_types_fail_on_every_rank():
    x = tf.zeros([2], dtype=tf.float32 if hvd.rank() == 0 else tf.int32)
    with pytest.raises(tf.errors.FailedPreconditionError):
        hvd.allreduce(x, name="mismatched_type")


def test_queries_as_ops():
    assert int(hvd.size_op()) == hvd.size()
    assert int(hvd.rank_op()) == hvd.rank()
    assert int(hvd.local_size_op()) == hvd.local_size()
    assert int(hvd.local_rank_op()) == hvd.local_rank()
    assert int(hvd.cross_size_op()) == hvd.cross_size()
    assert int(hvd.cross_rank_op()) == hvd.cross_rank()
    assert int(hvd.process_set_included_op(0)) == 1
    assert int(hvd.process_set_included_op(12345)) == -3


def test_process_set_collectives_and_queries():
    n, r = hvd.size(), hvd.rank()
    evens = hvd.add_process_set(list(range(0, n, 2)))
    try:
        assert int(hvd.process_set_included_op(evens.process_set_id)) == (1 if r % 2 == 0 else 0)
        if r % 2 == 0:
            x = tf.constant([float(r)])
            s = hvd.allreduce(x, op=hvd.Sum, process_set=evens)
            np.testing.assert_array_equal(s.numpy(), [float(sum(range(0, n, 2)))])
            g = hvd.allgather(x, process_set=evens)
            np.testing.assert_array_equal(g.numpy(), list(range(0, n, 2)))
            b = hvd.broadcast(x, root_rank=evens.ranks[-1], process_set=evens)
            np.testing.assert_array_equal(b.numpy(), [float(evens.ranks[-1])])
            assert int(hvd.size_op(evens.process_set_id)) == evens.size()
            hvd.barrier(process_set=evens)
        else:
            # Horovod's errors: not a member, and a set never added.
            with pytest.raises(tf.errors.InvalidArgumentError):
                hvd.allreduce(tf.constant([1.0]), process_set=evens)
        assert int(hvd.size_op(evens.process_set_id)) == evens.size()  # members or not
        fake = hvd.ProcessSet([0])
        fake.process_set_id = evens.process_set_id
        with pytest.raises(ValueError):
            hvd.allreduce(tf.constant([1.0]), process_set=fake)
    finally:
        hvd.remove_process_set(evens)


def test_join_returns_the_last_rank_and_others_reduce_with_zeros():
    n, r = hvd.size(), hvd.rank()
    if r == 0:
        last = hvd.join()
    else:
        x = tf.constant([float(r)])
        s = hvd.allreduce(x, op=hvd.Sum, name="while_rank0_joined")
        np.testing.assert_array_equal(s.numpy(), [float(sum(range(1, n)))])
        last = hvd.join()
    assert 0 <= int(last) < n
    hvd.barrier()


def test_objects():
    r = hvd.rank()
    assert hvd.broadcast_object({"from": r, "list": [r] * 3}, root_rank=0) == {
        "from": 0, "list": [0, 0, 0]}
    assert hvd.allgather_object(("rank", r)) == [("rank", q) for q in ranks()]


# --- gradients, with Horovod's conventions ----------------------------------------------------

def grad_of(fn, x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    return tape.gradient(y, x, output_gradients=tf.ones_like(y) * float(hvd.rank() + 1))


def mean_upstream():
    return sum(q + 1.0 for q in ranks()) / hvd.size()


def test_allreduce_gradient_is_the_allreduce_of_gradients():
    x = tf.constant([1.0, 2.0])
    g = grad_of(lambda t: hvd.allreduce(t, op=hvd.Sum), x)
    np.testing.assert_allclose(g.numpy(), [sum(q + 1.0 for q in ranks())] * 2)
    g = grad_of(lambda t: hvd.allreduce(t, op=hvd.Average), x)
    np.testing.assert_allclose(g.numpy(), [mean_upstream()] * 2)


def test_grouped_allreduce_gradient():
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        a, b = hvd.grouped_allreduce([x, 2 * x], op=hvd.Sum)
        y = tf.reduce_sum(a + b) * float(hvd.rank() + 1)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [3 * sum(q + 1.0 for q in ranks())] * 2)


def test_allgather_gradient_is_this_ranks_rows_of_the_average():
    r = hvd.rank()
    x = tf.ones([r + 1, 2])
    g = grad_of(hvd.allgather, x)
    assert g.shape == x.shape
    np.testing.assert_allclose(g.numpy(), np.full([r + 1, 2], mean_upstream()))


def test_broadcast_gradient_is_the_average_on_the_root_zero_elsewhere():
    x = tf.constant([1.0, 2.0])
    g = grad_of(lambda t: hvd.broadcast(t, root_rank=0), x)
    np.testing.assert_allclose(g.numpy(), [mean_upstream() if hvd.rank() == 0 else 0.0] * 2)


@pytest.mark.parametrize("op,factor", [(hvd.Sum, "size"), (hvd.Average, 1)])
def test_reducescatter_gradient(op, factor):
    n = hvd.size()
    x = tf.ones([2 * n, 3])
    g = grad_of(lambda t: hvd.reducescatter(t, op=op), x)
    scale = n if factor == "size" else 1
    rows = np.concatenate([np.full([2, 3], (q + 1.0) * scale) for q in ranks()])
    np.testing.assert_allclose(g.numpy(), rows)


def test_alltoall_gradient_sends_rows_back():
    n, r = hvd.size(), hvd.rank()
    x = tf.ones([n, 2]) * float(r)
    g = grad_of(hvd.alltoall, x)
    # Each row went to one rank, whose upstream gradient is its rank + 1.
    np.testing.assert_allclose(g.numpy(), np.arange(1.0, n + 1)[:, None].repeat(2, 1))
