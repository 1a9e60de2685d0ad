"""Every collective of troika.torch x the runtime's dtypes x in-place / out-of-place x sync /
async, on the whole job; each rank computes the expected result from every rank's input
(conftest.rank_input)."""

import os
import time

import pytest
import torch

import troika.torch as hvd
from troika.torch import collectives
from conftest import DTYPES, FLOAT_DTYPES, assert_equal, expected_reduce, rank_input

# With the dtypes added for Horovod's (troika/types.h): int16, bool, and uint16 where torch has it
# (>= 2.3). On bool, Sum and Max are a logical or, Product and Min a logical and, and Average
# is an INVALID_ARGUMENT TroikaError on the submitting rank.
DTYPES = DTYPES + [torch.int16, torch.bool] + ([torch.uint16] if hasattr(torch, "uint16") else [])


def expect_bool_average_refused(fn):
    with pytest.raises(hvd.HorovodInternalError) as e:
        fn()
    assert e.value.code == "INVALID_ARGUMENT"
    assert "reduce op average is not defined for bool tensors" in e.value.message

OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max,
       "product": hvd.Product}


def test_membership():
    assert hvd.size() == int(os.environ["TROIKA_SIZE"])
    assert hvd.rank() == int(os.environ["TROIKA_RANK"])
    assert 0 <= hvd.local_rank() < hvd.local_size() <= hvd.size()
    assert 0 <= hvd.cross_rank() < hvd.cross_size()
    # troikarun runs every rank on this host: one node.
    assert hvd.local_size() == hvd.size() and hvd.cross_size() == 1
    assert hvd.local_rank() == hvd.rank()
    assert hvd.global_process_set.ranks == list(range(hvd.size()))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("opname", list(OPS))
@pytest.mark.parametrize("variant", ["allreduce", "allreduce_async", "allreduce_",
                                     "allreduce_async_"])
def test_allreduce(dtype, opname, variant):
    op = OPS[opname]
    shape = [17, 3]
    x = rank_input(dtype, shape, hvd.rank(), product=op == hvd.Product)
    before = x.clone()
    fn = getattr(hvd, variant)
    if dtype == torch.bool and op == hvd.Average:
        expect_bool_average_refused(lambda: hvd.synchronize(fn(x, op=op)) if "async" in variant
                                    else fn(x, op=op))
        assert_equal(x, before)
        return
    if variant.endswith("async") or variant.endswith("async_"):
        h = fn(x, op=op)
        out = hvd.synchronize(h)
        with pytest.raises(ValueError):  # a synchronized handle is cleared (as Horovod's)
            hvd.poll(h)
    else:
        out = fn(x, op=op)
    want = expected_reduce(op, dtype, shape, range(hvd.size()))
    assert_equal(out, want)
    if variant.endswith("_"):
        assert out is x  # in place
    else:
        assert_equal(x, before)  # out of place: input unchanged
        assert out.data_ptr() != x.data_ptr()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("opname", ["sum", "average"])
def test_allreduce_prescale_postscale(dtype, opname):
    op = OPS[opname]
    x = rank_input(dtype, [9], hvd.rank())
    out = hvd.allreduce(x, op=op, prescale_factor=0.5, postscale_factor=3.0)
    assert_equal(out, expected_reduce(op, dtype, [9], range(hvd.size()), pre=0.5, post=3.0))


def test_allreduce_default_op_is_average_and_deprecated_average():
    x = rank_input(torch.float32, [5], hvd.rank())
    avg = expected_reduce(hvd.Average, torch.float32, [5], range(hvd.size()))
    total = expected_reduce(hvd.Sum, torch.float32, [5], range(hvd.size()))
    assert_equal(hvd.allreduce(x), avg)
    with pytest.warns(DeprecationWarning):
        assert_equal(hvd.allreduce(x, average=True), avg)
    with pytest.warns(DeprecationWarning):
        assert_equal(hvd.allreduce(x, average=False), total)
    with pytest.raises(ValueError, match="supersedes average"):
        hvd.allreduce(x, average=True, op=hvd.Sum)  # refused before anything is submitted


def test_allreduce_named_and_scalar_and_empty():
    s = torch.tensor(float(hvd.rank() + 1), dtype=torch.float64)
    out = hvd.allreduce(s, name="scalar", op=hvd.Sum)
    assert out.shape == torch.Size([])
    assert out.item() == sum(r + 1 for r in range(hvd.size()))
    e = torch.empty(0, 4, dtype=torch.float32)
    assert hvd.allreduce(e, name="empty", op=hvd.Sum).shape == (0, 4)


def test_allreduce_non_contiguous_in_place():
    base = rank_input(torch.float32, [4, 6], hvd.rank())
    t = base.t()  # a transposed view: not contiguous
    assert not t.is_contiguous()
    want = expected_reduce(hvd.Sum, torch.float32, [4, 6], range(hvd.size())).t()
    out = hvd.allreduce_(t, op=hvd.Sum)
    assert out is t
    assert_equal(t, want)
    assert_equal(base, want.t())  # written through the view
    u = rank_input(torch.float32, [4, 6], hvd.rank()).t()
    assert_equal(hvd.allreduce(u, op=hvd.Sum), want)


# The synchronous fast path (collectives._allreduce_here): a named allreduce in the global set
# of a contiguous host tensor runs without the general path, with the same results and errors;
# every other call takes the general path.


def general_path_calls(monkeypatch, fail=False):
    """Counts collectives._allreduce's calls (the general path) into the returned list; with
    `fail`, each raises instead."""
    calls, general = [], collectives._allreduce

    def counted(*args, **kwargs):
        calls.append(args[2])  # the name
        if fail:
            raise AssertionError("the general path ran for %r" % (args[2],))
        return general(*args, **kwargs)

    monkeypatch.setattr(collectives, "_allreduce", counted)
    return calls


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("variant", ["allreduce", "allreduce_"])
def test_a_named_allreduce_of_a_host_tensor_needs_no_general_path(dtype, variant, monkeypatch):
    general_path_calls(monkeypatch, fail=True)
    fn, shape = getattr(hvd, variant), [5, 3]
    for opname, op in list(OPS.items()) + [("default", None)]:
        x = rank_input(dtype, shape, hvd.rank(), product=op == hvd.Product)
        before = x.clone()
        name = "fast.%s.%s" % (variant, opname)
        if dtype == torch.bool and op in (hvd.Average, None):
            expect_bool_average_refused(lambda: fn(x, name=name, op=op))
            assert_equal(x, before)
            continue
        out = fn(x, name=name, op=op)
        assert_equal(out, expected_reduce(hvd.Average if op is None else op, dtype, shape,
                                          range(hvd.size())))
        if variant == "allreduce_":
            assert out is x
        else:
            assert_equal(x, before)
            assert out.data_ptr() != x.data_ptr() and out.is_contiguous()
    if dtype.is_floating_point:  # the scales, on a 0-d tensor (out of place: a new 0-d one)
        x = torch.tensor(float(hvd.rank() + 1), dtype=dtype)
        out = fn(x, name="fast.%s.scaled" % variant, op=hvd.Sum, prescale_factor=0.5,
                 postscale_factor=4.0)
        assert out.shape == torch.Size([])
        assert out.item() == 2.0 * sum(r + 1 for r in range(hvd.size()))


def test_a_named_allreduce_the_fast_path_declines_takes_the_general_path(monkeypatch):
    calls = general_path_calls(monkeypatch)
    n = hvd.size()
    total = float(sum(range(1, n + 1)))
    own = torch.full([3], float(hvd.rank() + 1))
    # Not contiguous (in place: written back through the view).
    base = own.repeat(2)
    view = base[::2]
    assert hvd.allreduce_(view, name="slow.strided", op=hvd.Sum) is view
    assert_equal(base[::2], torch.full([3], total))
    # Out of place, of a tensor that needs a gradient: the result is differentiable.
    leaf = own.clone().requires_grad_()
    out = hvd.allreduce(leaf, name="slow.grad", op=hvd.Sum)
    assert out.requires_grad
    out.sum().backward()
    assert_equal(leaf.grad, torch.full([3], float(n)))
    # The deprecated `average`, a compression, a process set of every rank (added, not the
    # global one).
    with pytest.warns(DeprecationWarning):
        assert_equal(hvd.allreduce(own, name="slow.average", average=False),
                     torch.full([3], total))
    assert_equal(hvd.allreduce(own, name="slow.fp16", op=hvd.Sum,
                               compression=hvd.Compression.fp16), torch.full([3], total))
    everyone = hvd.add_process_set(list(range(n)))
    try:
        assert_equal(hvd.allreduce(own, name="slow.set", op=hvd.Sum, process_set=everyone),
                     torch.full([3], total))
    finally:
        hvd.remove_process_set(everyone)
    # Unnamed.
    assert_equal(hvd.allreduce(own, op=hvd.Sum), torch.full([3], total))
    # A named operation of this rank finished but unsynchronized: its name is still held
    # (DuplicateNameError for the same name, which only troika.torch checks once the core has
    # freed it), and others run.
    handle = hvd.allreduce_async(own, name="slow.held", op=hvd.Sum)
    while not hvd.poll(handle):
        time.sleep(0.001)
    with pytest.raises(hvd.DuplicateNameError):
        hvd.allreduce(own, name="slow.held")
    assert_equal(hvd.allreduce(own, name="slow.beside", op=hvd.Sum), torch.full([3], total))
    assert_equal(hvd.synchronize(handle), torch.full([3], total))
    # Adasum's refusal, and an unsupported dtype's.
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.allreduce_(own.clone(), name="slow.adasum", op=hvd.Adasum)
    with pytest.raises(TypeError, match="not supported"):
        hvd.allreduce(own.to(torch.complex64), name="slow.complex")
    # (None after "slow.grad": its gradient's allreduce, unnamed. Adasum is refused before the
    # general path's call, by reduce_op.)
    assert calls == ["slow.strided", "slow.grad", None, "slow.average", "slow.fp16", "slow.set",
                     None, "slow.held", "slow.held", "slow.beside", "slow.complex"]


def test_allreduce_fp16_compression():
    x = rank_input(torch.float32, [33], hvd.rank())
    out = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert out.dtype == torch.float32
    assert_equal(out, expected_reduce(hvd.Sum, torch.float32, [33], range(hvd.size())))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("variant", ["allgather", "allgather_async"])
def test_allgather(dtype, variant):
    # Rank r contributes r+1 rows (rank 0 none in a second round): dim 0 differs per rank.
    for rows_of in (lambda r: r + 1, lambda r: r):
        x = rank_input(dtype, [rows_of(hvd.rank()), 3], hvd.rank())
        if variant == "allgather":
            out = hvd.allgather(x)
        else:
            out = hvd.synchronize(hvd.allgather_async(x))
        want = torch.cat([rank_input(dtype, [rows_of(r), 3], r) for r in range(hvd.size())])
        assert_equal(out, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_allgather_of_equal_dim0_is_received_into_the_result(dtype, monkeypatch):
    # Every rank's dim 0 alike (the usual case): the core receives straight into the tensor
    # returned (Context::AllgatherInto), nothing is copied out of a handle-owned buffer
    # (result_from is not called), and the result is an ordinary tensor of its own (resizable).
    # 8 MiB of float32 per rank: past tensors.HUGE_PAGE_RESULT_BYTES at 4 ranks.
    copies = []
    real = collectives.result_from
    monkeypatch.setattr(collectives, "result_from",
                        lambda *args: copies.append(args) or real(*args))
    for rows, cols in ((2, 3), (0, 3), ((2 << 20) // 3, 3)):
        x = rank_input(dtype, [rows, cols], hvd.rank())
        out = hvd.synchronize(hvd.allgather_async(x, name="equal.%d" % rows))
        want = torch.cat([rank_input(dtype, [rows, cols], r) for r in range(hvd.size())])
        assert_equal(out, want)
        assert out.is_contiguous() and out.storage_offset() == 0
        out.resize_(out.shape[0] + 1, cols)  # torch.empty's storage: grows
    assert copies == []
    # Unequal rows: the result is copied into a tensor of its shape (test_allgather checks more).
    x = rank_input(dtype, [hvd.rank() + 1, 2], hvd.rank())
    assert_equal(hvd.allgather(x), torch.cat([rank_input(dtype, [r + 1, 2], r)
                                              for r in range(hvd.size())]))
    n = hvd.size()  # copied unless this rank's guess, n times its rows, is the total
    assert len(copies) == (0 if (hvd.rank() + 1) * n == n * (n + 1) // 2 else 1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("variant", ["broadcast", "broadcast_async", "broadcast_",
                                     "broadcast_async_"])
def test_broadcast(dtype, variant):
    for root in range(hvd.size()):
        x = rank_input(dtype, [5, 2], hvd.rank())
        before = x.clone()
        fn = getattr(hvd, variant)
        out = fn(x, root)
        if "async" in variant:
            out = hvd.synchronize(out)
        assert_equal(out, rank_input(dtype, [5, 2], root))
        if variant.endswith("_"):
            assert out is x
        else:
            assert_equal(x, before)


def test_broadcast_non_contiguous_in_place():
    base = rank_input(torch.float64, [3, 4], hvd.rank())
    t = base.t()
    hvd.broadcast_(t, 0)
    assert_equal(base, rank_input(torch.float64, [3, 4], 0))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("variant", ["alltoall", "alltoall_async"])
def test_alltoall_with_splits(dtype, variant):
    # Rank r sends j+1 rows to rank j, each row holding 10*r + j.
    n, me = hvd.size(), hvd.rank()
    splits = [j + 1 for j in range(n)]
    x = torch.cat([torch.full([j + 1, 2], 10 * me + j, dtype=torch.int64) for j in range(n)])
    x = x.to(dtype)
    if variant == "alltoall":
        out, received = hvd.alltoall(x, splits=torch.tensor(splits, dtype=torch.int32))
    else:
        out, received = hvd.synchronize(hvd.alltoall_async(x, splits=splits))
    want = torch.cat([torch.full([me + 1, 2], 10 * i + me, dtype=torch.int64)
                      for i in range(n)]).to(dtype)
    assert_equal(out, want)
    assert received.dtype == torch.int32
    assert received.tolist() == [me + 1] * n


def test_alltoall_received_splits_take_the_splits_tensors_dtype():
    """As Horovod's splits.new(): int64 splits give int64 received_splits (lists: int32)."""
    n = hvd.size()
    x = torch.arange(2 * n, dtype=torch.float32)
    _, received = hvd.alltoall(x, splits=torch.full([n], 2, dtype=torch.int64))
    assert received.dtype == torch.int64 and received.tolist() == [2] * n


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_alltoall_even_split(dtype):
    n, me = hvd.size(), hvd.rank()
    x = torch.cat([torch.full([2, 3], 10 * me + j, dtype=torch.int64)
                   for j in range(n)]).to(dtype)
    out = hvd.alltoall(x)  # no splits: the output alone, as Horovod
    assert isinstance(out, torch.Tensor)
    want = torch.cat([torch.full([2, 3], 10 * i + me, dtype=torch.int64)
                      for i in range(n)]).to(dtype)
    assert_equal(out, want)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("opname", ["sum", "average"])
@pytest.mark.parametrize("variant", ["reducescatter", "reducescatter_async"])
def test_reducescatter(dtype, opname, variant):
    op = OPS[opname]
    n, me = hvd.size(), hvd.rank()
    shape = [2 * n + 1, 3]  # uneven: the first rank gets one row more
    x = rank_input(dtype, shape, me)
    if dtype == torch.bool and op == hvd.Average:
        expect_bool_average_refused(lambda: hvd.reducescatter(x, op=op) if variant == "reducescatter"
                                    else hvd.synchronize(hvd.reducescatter_async(x, op=op)))
        return
    if variant == "reducescatter":
        out = hvd.reducescatter(x, op=op)
    else:
        out = hvd.synchronize(hvd.reducescatter_async(x, op=op))
    full = expected_reduce(op, dtype, shape, range(n))
    rows = [shape[0] // n + (1 if r < shape[0] % n else 0) for r in range(n)]
    start = sum(rows[:me])
    assert_equal(out, full[start:start + rows[me]])


def test_bool_reductions_are_logical():
    # Mixed values (rank_input's bools are all true): element i is true on rank r when
    # (i + r) % 3 != 0 for the "mostly true" pattern, == 0 for the "mostly false" one.
    n, me = hvd.size(), hvd.rank()

    def flags(r, mostly_true):
        i = torch.arange(24)
        return ((i + r) % 3 != 0) == mostly_true

    for mostly_true in (True, False):
        xs = [flags(r, mostly_true) for r in range(n)]
        any_ = torch.stack(xs).any(0)
        all_ = torch.stack(xs).all(0)
        for op, want in ((hvd.Sum, any_), (hvd.Max, any_), (hvd.Product, all_), (hvd.Min, all_)):
            x = xs[me].clone()
            assert_equal(hvd.allreduce(x, op=op), want)
            assert_equal(hvd.allreduce_(x, op=op), want)
        assert_equal(hvd.reducescatter(xs[me].reshape(n, -1).clone(), op=hvd.Sum),
                     any_.reshape(n, -1)[me:me + 1])
    # Horovod's default op is Average: refused on bool, with the way out in the message.
    x = flags(me, True)
    expect_bool_average_refused(lambda: hvd.allreduce(x))
    with pytest.raises(hvd.HorovodInternalError, match="bool tensors cannot be scaled"):
        hvd.allreduce(x, op=hvd.Sum, postscale_factor=2.0)
    # The job goes on.
    assert_equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full([2], float(n)))


def test_reducescatter_default_op_is_average():
    n = hvd.size()
    x = rank_input(torch.float32, [n, 2], hvd.rank())
    full = expected_reduce(hvd.Average, torch.float32, [n, 2], range(n))
    assert_equal(hvd.reducescatter(x), full[hvd.rank():hvd.rank() + 1])


def test_many_in_flight_then_poll_and_synchronize():
    xs = [rank_input(torch.float32, [100 + i], hvd.rank()) for i in range(20)]
    handles = [hvd.allreduce_async(x, op=hvd.Sum) for x in xs]
    deadline = time.monotonic() + 60
    while not all(hvd.poll(h) for h in handles):
        assert time.monotonic() < deadline
        time.sleep(0.001)
    for i, h in enumerate(handles):
        assert_equal(hvd.synchronize(h),
                     expected_reduce(hvd.Sum, torch.float32, [100 + i], range(hvd.size())))
    assert hvd.synchronize(handles[0]) is None  # a handle is synchronized once


def test_barrier():
    # Rank 0 arrives 0.3 s late: nobody leaves the barrier before it arrived. Every rank runs
    # on this host (test_membership), so their monotonic clocks are one: each rank's leaving is
    # compared with rank 0's arrival, not with when it left the barrier before (a rank the
    # machine let run late would have less of rank 0's delay left to see).
    hvd.barrier()
    if hvd.rank() == 0:
        time.sleep(0.3)
    arrived = time.monotonic()
    hvd.barrier()
    left = time.monotonic()
    rank0_arrived = hvd.broadcast(torch.tensor(arrived, dtype=torch.float64), root_rank=0,
                                  name="barrier.rank0_arrived").item()
    assert left >= rank0_arrived


def test_join_right_after_an_async_allreduce():
    # The ranks submit an allreduce and join without waiting for it: the join reaches the
    # coordinator after the allreduce (an agent sends a rank's waiting requests before its
    # join), else the coordinator would count the rank as joined for it and its request,
    # arriving after, would stay pending.
    # Average divides by every rank, the joined one included (as Horovod's); the name comes
    # again in the next round.
    n, me = hvd.size(), hvd.rank()
    for _ in range(3):
        if me == n - 1:
            hvd.join()
        else:
            handle = hvd.allreduce_async(torch.ones(3) * 2, name="join.async", op=hvd.Average)
            hvd.join()
            assert_equal(hvd.synchronize(handle), torch.full([3], 2.0 * (n - 1) / n))


def test_join():
    # The last rank runs out of data first; the others' allreduces go on without it (it adds
    # zeros, and Average divides by every rank, as Horovod's does); then they join too.
    n, me = hvd.size(), hvd.rank()
    if me == n - 1:
        last = hvd.join()
    else:
        ones = torch.ones(4)
        assert_equal(hvd.allreduce(ones, name="join.sum", op=hvd.Sum), torch.full([4], n - 1.0))
        assert_equal(hvd.allreduce(ones, name="join.avg", op=hvd.Average),
                     torch.full([4], (n - 1.0) / n))
        last = hvd.join()
    assert 0 <= last < n
    lasts = hvd.allgather(torch.tensor([last], dtype=torch.int32), name="join.lasts")
    assert lasts.tolist() == [last] * n  # every rank names the same last rank
    # The job goes on.
    assert_equal(hvd.allreduce(torch.ones(2), name="after.join", op=hvd.Sum),
                 torch.full([2], float(n)))
