"""Grouped collectives (grouped_allreduce*, grouped_allgather*, grouped_reducescatter*) and
DistributedOptimizer's groups / num_groups / sparse_as_dense. Each rank computes the expected
results from every rank's input itself (conftest.rank_input)."""

import warnings

import pytest
import torch

import troika.torch as hvd
from conftest import DTYPES, assert_equal, expected_reduce, rank_input
from training import (ROWS_PER_RANK, STEPS, assert_same_model, global_batch, make_model, make_sgd,
                      train_distributed, train_reference)

OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max,
       "product": hvd.Product}
SHAPES = [(5,), (3, 4), (2, 3, 2), ()]


def ranks():
    return list(range(hvd.size()))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("opname", list(OPS))
@pytest.mark.parametrize("variant", ["grouped_allreduce", "grouped_allreduce_async",
                                     "grouped_allreduce_", "grouped_allreduce_async_"])
def test_grouped_allreduce(dtype, opname, variant):
    op = OPS[opname]
    xs = [rank_input(dtype, s, hvd.rank(), product=op == hvd.Product) for s in SHAPES]
    inputs = [x.clone() for x in xs]
    fn = getattr(hvd, variant)
    out = fn(xs, op=op)
    if variant.endswith("_async") or variant.endswith("_async_"):
        assert isinstance(out, int)
        out = hvd.synchronize(out)
    assert isinstance(out, list) and len(out) == len(SHAPES)
    for x, inp, o, s in zip(xs, inputs, out, SHAPES):
        assert_equal(o, expected_reduce(op, dtype, s, ranks()))
        if variant.endswith("_"):
            assert o is x  # in place: the caller's tensors hold the results
        else:
            assert_equal(x, inp)  # out of place: inputs unchanged


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_grouped_allreduce_prescale_postscale_and_mixed_dtypes(dtype):
    shapes = [(4,), (2, 2)]
    xs = [rank_input(dtype, s, hvd.rank()) for s in shapes]
    out = hvd.grouped_allreduce(xs, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    for o, s in zip(out, shapes):
        assert_equal(o, expected_reduce(hvd.Sum, dtype, s, ranks(), pre=0.5, post=3.0))
    # A group may mix dtypes.
    mixed = [rank_input(dtype, (4,), hvd.rank()), rank_input(torch.int32, (3,), hvd.rank()),
             rank_input(torch.uint8, (2, 2), hvd.rank())]
    for o, x in zip(hvd.grouped_allreduce(mixed, op=hvd.Max), mixed):
        assert_equal(o, expected_reduce(hvd.Max, x.dtype, tuple(x.shape), ranks()))


def test_grouped_allreduce_default_op_is_average_and_deprecated_average():
    xs = [rank_input(torch.float32, (4,), hvd.rank()), rank_input(torch.float32, (2,), hvd.rank())]
    for o, x in zip(hvd.grouped_allreduce(xs), xs):
        assert_equal(o, expected_reduce(hvd.Average, torch.float32, tuple(x.shape), ranks()))
    with pytest.warns(DeprecationWarning):
        out = hvd.grouped_allreduce(xs, average=False)
    for o, x in zip(out, xs):
        assert_equal(o, expected_reduce(hvd.Sum, torch.float32, tuple(x.shape), ranks()))
    with pytest.raises(ValueError):
        hvd.grouped_allreduce(xs, average=True, op=hvd.Sum)


def test_grouped_allreduce_named_reused_non_contiguous_and_empty():
    for _ in range(3):  # a group's name is reused once it completed (every training step)
        xs = [rank_input(torch.float32, (6,), hvd.rank()),
              rank_input(torch.float32, (4, 3), hvd.rank()).t()]  # non-contiguous
        out = hvd.grouped_allreduce_(xs, name="grads", op=hvd.Sum)
        assert out[1] is xs[1]
        assert_equal(xs[0], expected_reduce(hvd.Sum, torch.float32, (6,), ranks()))
        assert_equal(xs[1], expected_reduce(hvd.Sum, torch.float32, (4, 3), ranks()).t())
    assert hvd.grouped_allreduce([]) == []


def test_grouped_allreduce_fp16_compression():
    xs = [rank_input(torch.float32, (8,), hvd.rank()), rank_input(torch.float64, (3,), hvd.rank())]
    out = hvd.grouped_allreduce(xs, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert [o.dtype for o in out] == [torch.float32, torch.float64]
    for o, x in zip(out, xs):
        assert_equal(o, expected_reduce(hvd.Sum, x.dtype, tuple(x.shape), ranks()))


def test_grouped_allreduce_poll_then_synchronize():
    xs = [rank_input(torch.float32, (1000,), hvd.rank()) for _ in range(10)]
    h = hvd.grouped_allreduce_async(xs, op=hvd.Max)
    while not hvd.poll(h):
        pass
    out = hvd.synchronize(h)
    for o in out:
        assert_equal(o, expected_reduce(hvd.Max, torch.float32, (1000,), ranks()))


def test_grouped_allreduce_unsupported_dtype_fails_the_whole_group_before_sending():
    xs = [torch.ones(3), torch.ones(3, dtype=torch.complex64)]
    with pytest.raises(TypeError):
        hvd.grouped_allreduce(xs)
    # Nothing was sent: the next group works on every rank.
    out = hvd.grouped_allreduce([torch.ones(3)], op=hvd.Sum)
    assert_equal(out[0], torch.full((3,), float(hvd.size())))


def test_grouped_allreduce_mismatched_shape_fails_on_every_rank_then_job_goes_on():
    x = torch.ones(2 + hvd.rank())  # a different shape on every rank
    with pytest.raises(hvd.HorovodInternalError):
        hvd.grouped_allreduce([torch.ones(2), x], name="mismatch")
    out = hvd.grouped_allreduce([torch.ones(2)], op=hvd.Sum)
    assert_equal(out[0], torch.full((2,), float(hvd.size())))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("variant", ["grouped_allgather", "grouped_allgather_async"])
def test_grouped_allgather(dtype, variant):
    r = hvd.rank()
    # dim 0 differs per rank; the second tensor's too, differently.
    xs = [rank_input(dtype, (r + 1, 3), r), rank_input(dtype, (2 * r + 1,), r + 1)]
    if variant == "grouped_allgather":
        out = hvd.grouped_allgather(xs)
    else:
        out = hvd.synchronize(hvd.grouped_allgather_async(xs))
    assert len(out) == 2
    assert_equal(out[0], torch.cat([rank_input(dtype, (q + 1, 3), q) for q in ranks()]))
    assert_equal(out[1], torch.cat([rank_input(dtype, (2 * q + 1,), q + 1) for q in ranks()]))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float16, torch.bfloat16,
                                   torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("opname", ["sum", "average"])
@pytest.mark.parametrize("variant", ["grouped_reducescatter", "grouped_reducescatter_async"])
def test_grouped_reducescatter(dtype, opname, variant):
    op = OPS[opname]
    n, r = hvd.size(), hvd.rank()
    shapes = [(n * 2, 3), (n + 1,)]  # the second: the first rank gets one row more
    xs = [rank_input(dtype, s, r) for s in shapes]
    if variant == "grouped_reducescatter":
        out = hvd.grouped_reducescatter(xs, op=op)
    else:
        out = hvd.synchronize(hvd.grouped_reducescatter_async(xs, op=op))
    assert len(out) == 2
    for o, s in zip(out, shapes):
        full = expected_reduce(op, dtype, s, ranks())
        rows = [s[0] // n + (1 if q < s[0] % n else 0) for q in range(n)]
        start = sum(rows[:r])
        assert_equal(o, full[start:start + rows[r]])


def test_grouped_reducescatter_default_op_is_average_and_process_set():
    n = hvd.size()
    xs = [rank_input(torch.float32, (n, 2), hvd.rank())]
    out = hvd.grouped_reducescatter(xs)
    full = expected_reduce(hvd.Average, torch.float32, (n, 2), ranks())
    assert_equal(out[0], full[hvd.rank():hvd.rank() + 1])
    # On a process set of ranks 0 and 1 (every rank registers it; members run the ops).
    ps = hvd.add_process_set([0, 1])
    try:
        if ps.included():
            x = [rank_input(torch.float32, (4,), hvd.rank()),
                 rank_input(torch.float32, (2, 2), hvd.rank())]
            out = hvd.grouped_allreduce(x, op=hvd.Sum, process_set=ps)
            for o, xi in zip(out, x):
                assert_equal(o, expected_reduce(hvd.Sum, torch.float32, tuple(xi.shape), [0, 1]))
            g = hvd.grouped_allgather([x[0]], process_set=ps)
            assert_equal(g[0], torch.cat([rank_input(torch.float32, (4,), q) for q in [0, 1]]))
            rs = hvd.grouped_reducescatter([x[0]], op=hvd.Sum, process_set=ps)
            full = expected_reduce(hvd.Sum, torch.float32, (4,), [0, 1])
            assert_equal(rs[0], full[2 * ps.rank():2 * ps.rank() + 2])
    finally:
        hvd.remove_process_set(ps)


# ----------------------------------------------------------------------------- optimizer

@pytest.mark.parametrize("groups", [1, 2, 3, 100])
@pytest.mark.parametrize("passes", [1, 2])
def test_optimizer_groups_count_equals_plain_training(groups, passes):
    model, opt = train_distributed(passes=passes, groups=groups)
    assert_same_model(model, train_reference(hvd.size()))
    assert torch.equal(model.unused.detach(), torch.ones(2))
    n_params = len([p for p in model.parameters()])
    assert len(opt._groups_of) == n_params  # every parameter has its group
    assert len(set(opt._groups_of.values())) == min(groups, n_params)


def test_optimizer_num_groups_is_deprecated_groups():
    with pytest.warns(DeprecationWarning):
        model, opt = train_distributed(num_groups=2)
    assert_same_model(model, train_reference(hvd.size()))
    assert len(set(opt._groups_of.values())) == 2


def test_optimizer_groups_as_lists():
    def lists(model):
        return [[model[0].weight, model[4].bias], [model[2].weight, model[2].bias, model.unused]]
    model, opt = train_distributed(groups=lists)
    assert_same_model(model, train_reference(hvd.size()))
    # The listed ones as given; every other parameter a group of its own.
    assert len(set(opt._groups_of.values())) == 2 + 2


def test_optimizer_groups_with_fp16_compression():
    model, _ = train_distributed(groups=2, compression=hvd.Compression.fp16)
    assert_same_model(model, train_reference(hvd.size()), rtol=1e-2, atol=1e-3)


def test_optimizer_groups_submit_a_group_once_all_its_gradients_are_ready():
    model = make_model()
    opt = hvd.DistributedOptimizer(make_sgd(model), named_parameters=model.named_parameters(),
                                   groups=[[model[0].weight, model.unused]])
    x, y = global_batch(0, hvd.size())
    torch.nn.functional.mse_loss(model(x), y).backward()
    # model.unused never gets a gradient: its group (with model[0].weight) waits for step().
    def in_flight(p):
        return opt._grad_of[p].pending is not None

    assert not in_flight(model[0].weight) and not in_flight(model.unused)
    assert in_flight(model[0].bias)
    opt.step()
    assert not any(in_flight(p) for p in model.parameters())


def test_optimizer_groups_invalid():
    model = make_model()
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(make_sgd(model), groups=-1)
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(make_sgd(model), groups=[[model[0].weight, model[0].weight]])
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(make_sgd(model), groups=[["not a tensor"]])


def make_embedding_model(sparse):
    torch.manual_seed(99)
    return torch.nn.ModuleDict({"emb": torch.nn.Embedding(20, 4, sparse=sparse),
                                "out": torch.nn.Linear(4, 1)})


def embedding_batch(step, n):
    g = torch.Generator().manual_seed(300 + step)
    return (torch.randint(0, 20, (ROWS_PER_RANK * n,), generator=g),
            torch.randn(ROWS_PER_RANK * n, 1, generator=g))


def train_embedding(distributed, sparse_as_dense=False, groups=None):
    n, r = hvd.size(), hvd.rank()
    model = make_embedding_model(sparse=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # SGD takes sparse gradients
    if distributed:
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                       sparse_as_dense=sparse_as_dense, groups=groups)
    for step in range(STEPS):
        idx, y = embedding_batch(step, n)
        if distributed:
            idx, y = (idx[r * ROWS_PER_RANK:(r + 1) * ROWS_PER_RANK],
                      y[r * ROWS_PER_RANK:(r + 1) * ROWS_PER_RANK])
        opt.zero_grad()
        torch.nn.functional.mse_loss(model["out"](model["emb"](idx)), y).backward()
        if distributed and not sparse_as_dense:
            assert model["emb"].weight.grad.is_sparse
        opt.step()
    return model


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_optimizer_sparse_gradients(sparse_as_dense):
    model = train_embedding(True, sparse_as_dense=sparse_as_dense)
    assert_same_model(model, train_embedding(False))


def test_optimizer_sparse_as_dense_with_groups():
    model = train_embedding(True, sparse_as_dense=True, groups=1)
    assert_same_model(model, train_embedding(False))


def test_optimizer_sparse_gradient_in_a_group_needs_sparse_as_dense():
    model = make_embedding_model(sparse=True)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), groups=1)
    idx, y = embedding_batch(0, hvd.size())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="sparse_as_dense"):
            torch.nn.functional.mse_loss(model["out"](model["emb"](idx)), y).backward()
            opt.step()
