"""Where Horovod's behaviour is a convention rather than the only reasonable choice, troika.torch
follows Horovod's: these tests pin each one down, written from Horovod's documented and observed
semantics (docs/horovod-compat.md lists them with the rest of the surface).

Every rank runs every test (tests/python/run_pytest.sh); expected values are computed here on
each rank from what every rank contributes."""

import warnings

import pytest
import torch

import troika
import troika.torch as hvd

from conftest import assert_equal


# ----------------------------------------------------------------------------- duplicate names


# kind -> submit(name): each op Horovod refuses a second in-flight submission of.
SUBMITTERS = {
    "allreduce": lambda name: hvd.allreduce_async(torch.ones(3), name=name),
    "allreduce_": lambda name: hvd.allreduce_async_(torch.ones(3), name=name),
    "allgather": lambda name: hvd.allgather_async(torch.ones(2, 3), name=name),
    "broadcast": lambda name: hvd.broadcast_async(torch.ones(3), 0, name=name),
    "broadcast_": lambda name: hvd.broadcast_async_(torch.ones(3), 0, name=name),
    "reducescatter": lambda name: hvd.reducescatter_async(torch.ones(2 * hvd.size()), name=name),
    "alltoall": lambda name: hvd.alltoall_async(torch.ones(hvd.size()), name=name),
    "grouped_allreduce":
        lambda name: hvd.grouped_allreduce_async([torch.ones(2), torch.ones(3)], name=name),
}


@pytest.mark.parametrize("kind", list(SUBMITTERS))
def test_a_name_in_flight_is_refused_at_submission_with_a_value_error(kind):
    # Rank 0 submits first: its op is surely in flight (the others have not submitted it) when
    # it submits the name again. Every rank passes a barrier meanwhile, as in Horovod's test.
    submit, name = SUBMITTERS[kind], "dup." + kind
    if hvd.rank() == 0:
        first = submit(name)
        with pytest.raises(ValueError) as e:
            submit(name)
        err = e.value
        assert isinstance(err, hvd.DuplicateNameError) and isinstance(err, troika.TroikaError)
        assert err.code == "ALREADY_EXISTS" and "already in flight" in err.message
    hvd.barrier()
    if hvd.rank() > 0:
        first = submit(name)
    hvd.synchronize(first)  # the first submission is unaffected
    hvd.synchronize(submit(name))  # and the name is free again once it completed


def test_a_name_stays_taken_until_its_handle_is_synchronized():
    # However soon the operation completes, its name is in use until synchronize(): the
    # second submission is refused deterministically (Horovod's tests count on it).
    h = hvd.allreduce_async(torch.ones(2), name="held", op=hvd.Sum)
    while not hvd.poll(h):
        pass
    with pytest.raises(hvd.DuplicateNameError, match="allreduce.held"):
        hvd.allreduce_async(torch.ones(2), name="held")
    with pytest.raises(ValueError):  # the blocking form too
        hvd.allreduce(torch.ones(2), name="held")
    assert_equal(hvd.synchronize(h), torch.full([2], float(hvd.size())))
    assert_equal(hvd.allreduce(torch.ones(2), name="held", op=hvd.Sum),
                 torch.full([2], float(hvd.size())))


def test_a_pending_op_does_not_hold_up_a_barrier_and_duplicates_are_per_rank():
    # Horovod's own order: rank 0 submits, every rank passes a barrier while that op waits
    # for the others, then the others submit it; each rank's second submission is refused.
    t = torch.ones(4)
    handle = None
    if hvd.rank() == 0:
        handle = hvd.allreduce_async(t, name="dup.order", op=hvd.Sum)
        with pytest.raises(ValueError):
            hvd.allreduce_async(t, name="dup.order")
    hvd.barrier()
    if hvd.rank() > 0:
        handle = hvd.allreduce_async(t, name="dup.order", op=hvd.Sum)
        with pytest.raises(ValueError):
            hvd.allreduce_async(t, name="dup.order")
    assert_equal(hvd.synchronize(handle), torch.full([4], float(hvd.size())))


def test_ops_of_different_kinds_may_share_a_name():
    # Horovod names an op "<kind>.<name>": an allreduce and a broadcast named alike coexist.
    a = hvd.allreduce_async(torch.ones(2), name="shared", op=hvd.Sum)
    b = hvd.broadcast_async(torch.full([2], float(hvd.rank())), 0, name="shared")
    assert_equal(hvd.synchronize(a), torch.full([2], float(hvd.size())))
    assert_equal(hvd.synchronize(b), torch.zeros(2))


# ----------------------------------------------------------------------------- handles


def test_poll_of_an_unknown_handle_raises_and_synchronize_returns_none():
    handle = hvd.allreduce_async(torch.ones(1))
    hvd.synchronize(handle)
    with pytest.raises(ValueError, match="not created or has been cleared"):
        hvd.poll(handle)
    with pytest.raises(ValueError):
        hvd.poll(10 ** 9)
    assert hvd.synchronize(handle) is None


# ----------------------------------------------------------------------------- scaling


def _rank_values(dtype, r, shape=(3, 5)):
    """Rank r's input: integers in [-100, 100), different on each rank; for float types the
    same on every rank, with fractions (as in Horovod's test), so that the sum of the scaled
    values is exact whatever order the data plane adds them in."""
    i = torch.arange(15, dtype=torch.float64).reshape(shape)
    if dtype.is_floating_point:
        return ((i * 37) % 200 - 100 + 0.37).to(dtype)
    return ((i * 37 + r * 11) % 200 - 100).to(dtype)


def _scaled(x, factor):
    """Horovod's scaling of a CPU tensor: integers in float64, truncated back; float16 in
    float32; float32 and float64 in their own type (the factor rounded to it first)."""
    if not x.dtype.is_floating_point:
        return (x.to(torch.float64) * factor).to(x.dtype)  # .to truncates toward zero
    compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    return (x.to(compute) * torch.tensor(factor, dtype=torch.float64).to(compute)).to(x.dtype)


SCALE_DTYPES = [torch.int32, torch.int64, torch.float16, torch.float32, torch.float64]


def _sum_ranks(dtype, factor, ranks):
    """The exact sum of every rank's prescaled input, as the data plane adds (in order): in
    `dtype`, but float16 and bfloat16 in float32 (docs/python.md), the caller rounding the
    result once, after its post-scale; as Horovod's tests compute their reference."""
    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    acc = None
    for r in ranks:
        x = _scaled(_rank_values(dtype, r), factor).to(wide)
        acc = x if acc is None else acc + x
    return acc


@pytest.mark.parametrize("dtype", SCALE_DTYPES, ids=str)
def test_allreduce_prescale_is_exactly_horovods(dtype):
    factor = 0.1915194503788923  # numpy's first uniform() after seed 1234, as Horovod's test
    got = hvd.allreduce(_rank_values(dtype, hvd.rank()), op=hvd.Sum, prescale_factor=factor)
    want = _sum_ranks(dtype, factor, range(hvd.size())).to(dtype)
    assert got.dtype == dtype and torch.equal(got, want), (got, want)


@pytest.mark.parametrize("dtype", SCALE_DTYPES, ids=str)
def test_allreduce_postscale_is_exactly_horovods(dtype):
    factor = 0.1915194503788923
    got = hvd.allreduce(_rank_values(dtype, hvd.rank()), op=hvd.Sum, postscale_factor=factor)
    want = _scaled(_sum_ranks(dtype, 1.0, range(hvd.size())), factor).to(dtype)
    assert got.dtype == dtype and torch.equal(got, want), (got, want)


@pytest.mark.parametrize("grouped", [False, True], ids=["single", "grouped"])
@pytest.mark.parametrize("dtype", SCALE_DTYPES, ids=str)
def test_reducescatter_scales_are_exactly_horovods(dtype, grouped):
    n, r = hvd.size(), hvd.rank()
    pre, post = 0.1915194503788923, 0.622108771039
    x = torch.cat([_rank_values(dtype, hvd.rank())] * n)  # n * 3 rows: 3 per rank
    if grouped:
        (got,) = hvd.grouped_reducescatter([x], op=hvd.Sum, prescale_factor=pre,
                                           postscale_factor=post)
    else:
        got = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=pre, postscale_factor=post)
    want = _scaled(_sum_ranks(dtype, pre, range(n)), post).to(dtype)
    assert torch.equal(got, want), (r, got, want)


# ----------------------------------------------------------------------------- Adasum


def test_adasum_is_refused_clearly_and_the_job_goes_on():
    x = torch.ones(2 * hvd.size())
    for call in (lambda: hvd.allreduce(x, op=hvd.Adasum),
                 lambda: hvd.allreduce_async_(x.clone(), op=hvd.Adasum),
                 lambda: hvd.grouped_allreduce([x], op=hvd.Adasum),
                 lambda: hvd.reducescatter(x, op=hvd.Adasum),
                 lambda: hvd.grouped_reducescatter([x], op=hvd.Adasum)):
        with pytest.raises(RuntimeError, match="Adasum is not supported"):
            call()
    assert_equal(hvd.allreduce(x, op=hvd.Sum), torch.full_like(x, hvd.size()))


# ----------------------------------------------------------------------------- join


@pytest.mark.parametrize("kind", ["allgather", "broadcast_from_a_training_rank"])
def test_while_a_rank_has_joined_allgather_and_broadcast_fail(kind):
    # Horovod runs only allreduces (and barriers) while a rank has joined; even a broadcast
    # whose root is still training fails.
    n, me = hvd.size(), hvd.rank()
    for first in range(n):
        if me == first:
            last = hvd.join()
        else:
            with pytest.raises(RuntimeError, match="joined"):
                if kind == "allgather":
                    hvd.allgather(torch.ones(2, 2), name="join.gather")
                else:  # rooted at a rank that has not joined
                    hvd.broadcast(torch.ones(3), (first + 1) % n, name="join.bcast")
            last = hvd.join()
        assert last != first  # the last to join is never the first
        assert hvd.allgather_object(last) == [last] * n


def test_join_average_divides_by_every_rank_for_integers_too():
    # The first rank joins; the others' integer averages divide the sum by the full size,
    # rounding toward zero (Horovod's test: tensor * (size - 1) // size).
    n, me = hvd.size(), hvd.rank()
    x = torch.tensor([7, -7, 100, 1], dtype=torch.int32)
    if me == 0:
        hvd.join()
    else:
        got = hvd.allreduce(x, name="join.int", op=hvd.Average)
        assert_equal(got, torch.div(x * (n - 1), n, rounding_mode="trunc"))
        hvd.join()


# ----------------------------------------------------------------------------- sparse


def _sparse(r, rows=9, cols=4, seed=0):
    g = torch.Generator().manual_seed(seed * 101 + r)
    dense = torch.rand(rows, cols, generator=g, dtype=torch.float64)
    dense[dense < 0.7] = 0
    return dense.to_sparse()


@pytest.mark.parametrize("op", ["Average", "Sum"])
def test_sparse_allreduce_async_equals_the_dense_allreduce(op):
    op = getattr(hvd, op)
    ts = [_sparse(hvd.rank(), seed=i) for i in range(3)]
    handles = [hvd.sparse_allreduce_async(t, name="sparse.%d" % i, op=op)
               for i, t in enumerate(ts)]
    for i, (t, h) in enumerate(zip(ts, handles)):
        got = h()
        assert got.is_sparse and got.shape == t.shape
        want = sum(_sparse(r, seed=i).to_dense() for r in range(hvd.size()))
        if op == hvd.Average:
            want = want / hvd.size()
        torch.testing.assert_close(got.to_dense(), want, rtol=0, atol=1e-12)


def test_sparse_allreduce_async_on_a_process_set():
    n = hvd.size()
    evens = hvd.add_process_set([r for r in range(n) if r % 2 == 0])
    odds = hvd.add_process_set([r for r in range(n) if r % 2 == 1])
    try:
        mine = evens if evens.included() else odds
        got = hvd.sparse_allreduce_async(_sparse(hvd.rank()), "sparse.ps", hvd.Average,
                                         process_set=mine)()
        want = sum(_sparse(r).to_dense() for r in mine.ranks) / mine.size()
        torch.testing.assert_close(got.to_dense(), want, rtol=0, atol=1e-12)
    finally:
        hvd.remove_process_set(odds)
        hvd.remove_process_set(evens)


# ----------------------------------------------------------------------------- optimizer


def test_optimizer_without_named_parameters_names_them_as_horovod():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 2))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(
        [{"params": model[0].parameters()}, {"params": model[1].parameters()}], lr=0.1))
    names = opt._parameter_names
    assert sorted(names.values()) == ["allreduce.noname.%d.%d" % (i, j)
                                      for i in range(2) for j in range(2)]
    assert hvd.allgather_object(sorted(names.values())) == [sorted(names.values())] * hvd.size()
    named = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     named_parameters=model.named_parameters())
    assert set(named._parameter_names.values()) == {n for n, _ in model.named_parameters()}


def test_optimizer_name_errors_are_value_errors():
    a, b = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(list(a.parameters()) + list(b.parameters()), lr=0.1)
    with pytest.raises(ValueError, match="must be unique"):
        hvd.DistributedOptimizer(opt, named_parameters=list(a.named_parameters())
                                 + list(b.named_parameters()))
    with pytest.raises(ValueError, match="were not named"):
        hvd.DistributedOptimizer(opt, named_parameters=list(a.named_parameters()))


def test_step_after_synchronize_warns_with_horovods_words():
    model = torch.nn.Linear(1, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    model(torch.ones(1, 1)).sum().backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        opt.step()
    assert len(ws) == 1
    assert "optimizer.step() called without optimizer.skip_synchronize()" in str(ws[0].message)
    opt.zero_grad()
    model(torch.ones(1, 1)).sum().backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        with opt.skip_synchronize():
            opt.step()
    assert not ws


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_embedding_gradients_with_sparse_adam(sparse_as_dense):
    # Every rank looks up other rows: the averaged gradient is what one process would get
    # from every rank's lookups, divided by the size.
    torch.manual_seed(5)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    hvd.broadcast_parameters(emb.state_dict(), root_rank=0)
    ids = [torch.tensor([[1, 2, 4], [4, 3 + r % 5, 9]]) for r in range(hvd.size())]
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1),
                                   sparse_as_dense=sparse_as_dense)
    opt.zero_grad()
    emb(ids[hvd.rank()]).sum().backward()
    opt.synchronize()
    grad = emb.weight.grad
    assert grad.is_sparse  # SparseAdam takes only sparse gradients
    ref = torch.nn.Embedding(10, 3)
    ref.load_state_dict(emb.state_dict())
    sum(ref(i).sum() for i in ids).backward()
    torch.testing.assert_close(grad.to_dense(), ref.weight.grad / hvd.size())
    with opt.skip_synchronize():
        opt.step()


def test_broadcast_optimizer_state_makes_state_and_gradients_first():
    # As Horovod's: an optimizer without state gets it from a step on zero gradients, so every
    # parameter that needs a gradient has one afterwards; one that does not keeps None.
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Parameter(torch.tensor([1, 3], dtype=torch.int32),
                                        requires_grad=False)
            self.b = torch.nn.Parameter(torch.arange(4.0) + hvd.rank())

    model = Model()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.001, weight_decay=1e-6, momentum=0.9,
                        nesterov=True), named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert model.a.grad is None
    assert torch.equal(model.b.grad, torch.zeros(4))
    # Unlike Horovod's, the state's first step left the parameters root_rank's (weight decay
    # would have moved them).
    assert torch.equal(model.b.detach(), torch.arange(4.0))
    buf = opt.state_dict()["state"][1]["momentum_buffer"]
    assert hvd.allgather_object(buf.tolist()) == [buf.tolist()] * hvd.size()
    with pytest.raises(ValueError, match="LBFGS"):
        hvd.broadcast_optimizer_state(torch.optim.LBFGS([model.b]), root_rank=0)


def test_optimizer_on_a_process_set_averages_over_its_members_only():
    # As Horovod's: the members average their gradients; a rank outside the set applies its
    # own (nothing is submitted for it).
    n, me = hvd.size(), hvd.rank()
    evens = hvd.add_process_set([r for r in range(n) if r % 2 == 0])
    odds = hvd.add_process_set([r for r in range(n) if r % 2 == 1])
    try:
        w = torch.nn.Parameter(torch.zeros(3))
        opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0),
                                       named_parameters=[("w", w)], process_set=evens)
        (w * (me + 1.0)).sum().backward()
        opt.step()
        if evens.included():
            want = -sum(r + 1.0 for r in evens.ranks) / evens.size()
        else:
            want = -(me + 1.0)
        assert_equal(w.detach(), torch.full([3], want))
    finally:
        hvd.remove_process_set(odds)
        hvd.remove_process_set(evens)
