"""Gradients of the differentiable collectives (python/troika/torch/autograd.py): rank r's loss
is sum(W_r * output) with weights W_r every rank can compute for every rank (weights()), and
the gradient each rank gets for its input is checked against the one it computes itself from
all ranks' weights, by Horovod's conventions (written out here from its documented and observed
behaviour): allgather and broadcast average the ranks' gradients, reducescatter allgathers them
times the set's size for Sum and as they are for Average. float64 throughout, so results are
exact up to the last bit (rtol 0, atol 1e-12)."""

import pytest
import torch

import troika.torch as hvd

EXACT = dict(rtol=0, atol=1e-12)


def weights(r, shape, dtype=torch.float64):
    n = 1
    for d in shape:
        n *= d
    return ((torch.arange(n) * 3 + 5 * r) % 7 + 1 + r).reshape(shape).to(dtype)


def leaf(shape, r, dtype=torch.float64):
    return (weights(r + 11, shape, dtype) / 4).requires_grad_()


def backward_weighted(out):
    (weights(hvd.rank(), list(out.shape), out.dtype) * out).sum().backward()


OPS = {"sum": hvd.Sum, "average": hvd.Average}


@pytest.mark.parametrize("opname", list(OPS))
@pytest.mark.parametrize("form", ["sync", "async"])
@pytest.mark.parametrize("scales", [(1.0, 1.0), (0.5, 3.0)])
def test_allreduce_gradient(opname, form, scales):
    op, n, shape = OPS[opname], hvd.size(), [5, 3]
    x = leaf(shape, hvd.rank())
    if form == "sync":
        y = hvd.allreduce(x, op=op, prescale_factor=scales[0], postscale_factor=scales[1])
    else:
        y = hvd.synchronize(hvd.allreduce_async(x, op=op, prescale_factor=scales[0],
                                                postscale_factor=scales[1]))
    assert y.requires_grad
    backward_weighted(y)
    want = sum(weights(s, shape) for s in range(n)) * scales[0] * scales[1]
    if op == hvd.Average:
        want = want / n
    torch.testing.assert_close(x.grad, want, **EXACT)


@pytest.mark.parametrize("opname", list(OPS))
@pytest.mark.parametrize("form", ["sync", "async"])
def test_grouped_allreduce_gradient(opname, form):
    op, n, shapes, scales = OPS[opname], hvd.size(), [[5, 3], [2], [4, 1, 2]], (0.5, 3.0)
    xs = [leaf(shape, hvd.rank() + i) for i, shape in enumerate(shapes)]
    frozen = leaf([3], hvd.rank()).detach()  # a member that needs no gradient
    group = xs[:2] + [frozen] + xs[2:]
    if form == "sync":
        ys = hvd.grouped_allreduce(group, op=op, prescale_factor=scales[0],
                                   postscale_factor=scales[1])
    else:
        ys = hvd.synchronize(hvd.grouped_allreduce_async(
            group, op=op, prescale_factor=scales[0], postscale_factor=scales[1]))
    assert len(ys) == 4 and all(y.requires_grad for y in ys)
    loss = sum((weights(hvd.rank() + 2 * i, list(y.shape)) * y).sum() for i, y in enumerate(ys))
    loss.backward()
    for i, (x, shape) in zip([0, 1, 3], zip(xs, shapes)):
        want = sum(weights(s + 2 * i, shape) for s in range(n)) * scales[0] * scales[1]
        if op == hvd.Average:
            want = want / n
        torch.testing.assert_close(x.grad, want, **EXACT)
    assert frozen.grad is None
    assert not any(y.requires_grad for y in hvd.grouped_allreduce_([x.detach() for x in xs]))


def test_grouped_allgather_and_reducescatter_gradients():
    n = hvd.size()
    rows = [r + 1 for r in range(n)]
    x = leaf([rows[hvd.rank()], 2], hvd.rank())
    (y,) = hvd.grouped_allgather([x])
    backward_weighted(y)
    start = sum(rows[:hvd.rank()])
    want = sum(weights(s, [sum(rows), 2]) for s in range(n))[start:start + rows[hvd.rank()]] / n
    torch.testing.assert_close(x.grad, want, **EXACT)

    x = leaf([2 * n, 3], hvd.rank())
    (y,) = hvd.grouped_reducescatter([x], op=hvd.Sum)
    backward_weighted(y)
    want = torch.cat([weights(s, [2, 3]) for s in range(n)]) * n
    torch.testing.assert_close(x.grad, want, **EXACT)


@pytest.mark.parametrize("opname", ["min", "max"])
def test_allreduce_min_max_gradient_is_the_same_op_on_the_gradients(opname):
    # Horovod's convention (not the reduction's derivative): the gradient's allreduce uses the
    # forward op.
    op, shape = {"min": hvd.Min, "max": hvd.Max}[opname], [4]
    x = leaf(shape, hvd.rank())
    backward_weighted(hvd.allreduce(x, op=op))
    ws = torch.stack([weights(s, shape) for s in range(hvd.size())])
    want = ws.min(0).values if op == hvd.Min else ws.max(0).values
    torch.testing.assert_close(x.grad, want, **EXACT)


def test_allreduce_non_contiguous_input_and_chain():
    n = hvd.size()
    base = leaf([3, 4], hvd.rank())
    x = base.t()  # non-contiguous view
    y = hvd.allreduce(x * 2, op=hvd.Sum)
    backward_weighted(y)
    want = (2 * sum(weights(s, [4, 3]) for s in range(n))).t()
    torch.testing.assert_close(base.grad, want, **EXACT)


def test_allreduce_fp16_compression_gradient():
    n, shape = hvd.size(), [6]
    x = leaf(shape, hvd.rank(), torch.float32)
    y = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert y.dtype == torch.float32 and y.requires_grad
    backward_weighted(y)
    assert x.grad.dtype == torch.float32
    want = sum(weights(s, shape, torch.float32) for s in range(n))
    torch.testing.assert_close(x.grad, want, rtol=1e-3, atol=1e-3)


def test_not_differentiable_without_grad():
    x = leaf([3], hvd.rank())
    with torch.no_grad():
        y = hvd.allreduce(x)
    assert not y.requires_grad
    assert not hvd.allreduce(x.detach()).requires_grad
    # Grad mode at submission decides, not at synchronize().
    h = hvd.allreduce_async(x)
    with torch.no_grad():
        y = hvd.synchronize(h)
    assert y.requires_grad
    # In-place forms are not differentiable: the tensor gets the result, no graph.
    t = torch.ones(3, dtype=torch.float64)
    assert hvd.allreduce_(t, op=hvd.Sum) is t and not t.requires_grad


@pytest.mark.parametrize("form", ["sync", "async"])
def test_allgather_gradient(form):
    n, r = hvd.size(), hvd.rank()
    rows = [s + 1 for s in range(n)]  # different dim 0 per rank
    total = sum(rows)
    x = leaf([rows[r], 2], r)
    y = hvd.allgather(x) if form == "sync" else hvd.synchronize(hvd.allgather_async(x))
    assert list(y.shape) == [total, 2]
    backward_weighted(y)
    offset = sum(rows[:r])
    want = sum(weights(s, [total, 2]) for s in range(n))[offset:offset + rows[r]] / n
    torch.testing.assert_close(x.grad, want, **EXACT)


@pytest.mark.parametrize("form", ["sync", "async"])
def test_broadcast_gradient(form):
    n, r = hvd.size(), hvd.rank()
    root, shape = n - 1, [2, 3]
    x = leaf(shape, r)
    y = (hvd.broadcast(x, root) if form == "sync"
         else hvd.synchronize(hvd.broadcast_async(x, root)))
    backward_weighted(y)
    want = (sum(weights(s, shape) for s in range(n)) / n if r == root
            else torch.zeros(shape, dtype=torch.float64))
    torch.testing.assert_close(x.grad, want, **EXACT)


def splits_of(s, n):
    """Rows rank s sends to each rank."""
    return [(s + j) % 3 + 1 for j in range(n)]


@pytest.mark.parametrize("form", ["sync", "async"])
def test_alltoall_gradient(form):
    n, r = hvd.size(), hvd.rank()
    mine = splits_of(r, n)
    x = leaf([sum(mine), 2], r)
    if form == "sync":
        y, received = hvd.alltoall(x, splits=mine)
    else:
        y, received = hvd.synchronize(hvd.alltoall_async(x, splits=mine))
    assert received.tolist() == [splits_of(s, n)[r] for s in range(n)]
    backward_weighted(y)
    # Rows sent to rank j sit in j's output after those of the ranks before this one.
    parts = []
    for j in range(n):
        into_j = [splits_of(s, n)[j] for s in range(n)]
        w = weights(j, [sum(into_j), 2])
        start = sum(into_j[:r])
        parts.append(w[start:start + mine[j]])
    torch.testing.assert_close(x.grad, torch.cat(parts), **EXACT)


def test_alltoall_even_split_gradient():
    n, r = hvd.size(), hvd.rank()
    x = leaf([2 * n, 3], r)
    y = hvd.alltoall(x)
    backward_weighted(y)
    want = torch.cat([weights(j, [2 * n, 3])[2 * r:2 * r + 2] for j in range(n)])
    torch.testing.assert_close(x.grad, want, **EXACT)


@pytest.mark.parametrize("opname", list(OPS))
@pytest.mark.parametrize("form", ["sync", "async"])
def test_reducescatter_gradient(opname, form):
    op, n, r = OPS[opname], hvd.size(), hvd.rank()
    dim0 = 2 * n + 1  # uneven: the first rank gets one row more
    pre, post = 0.5, 4.0
    x = leaf([dim0, 2], r)
    if form == "sync":
        y = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post)
    else:
        y = hvd.synchronize(hvd.reducescatter_async(x, op=op, prescale_factor=pre,
                                                    postscale_factor=post))
    rows = [dim0 // n + (1 if s < dim0 % n else 0) for s in range(n)]
    assert list(y.shape) == [rows[r], 2]
    backward_weighted(y)
    want = torch.cat([weights(s, [rows[s], 2]) for s in range(n)])
    if op == hvd.Sum:
        want = want * n
    want = want * pre * post
    torch.testing.assert_close(x.grad, want, **EXACT)


def test_process_set_gradients():
    members = [0, hvd.size() - 1]
    ps = hvd.add_process_set(members)
    try:
        if ps.included():
            r = hvd.rank()
            x = leaf([3], r)
            y = hvd.allreduce(x, op=hvd.Sum, process_set=ps)
            z = hvd.allgather(x, process_set=ps)
            w = hvd.broadcast(x, members[-1], process_set=ps)
            ((weights(r, [3]) * y).sum() + (weights(r, [6]) * z).sum()
             + (weights(r + 1, [3]) * w).sum()).backward()
            pos, m = members.index(r), len(members)
            want = sum(weights(s, [3]) for s in members)
            want = want + sum(weights(s, [6]) for s in members)[3 * pos:3 * pos + 3] / m
            if r == members[-1]:
                want = want + sum(weights(s + 1, [3]) for s in members) / m
            torch.testing.assert_close(x.grad, want, **EXACT)
    finally:
        hvd.remove_process_set(ps)


def test_gradient_through_two_collectives_and_a_model():
    # A layer applied after an allgather and before an allreduce: gradients of the layer's
    # weight equal the single-process computation on the gathered batch.
    n, r = hvd.size(), hvd.rank()
    torch.manual_seed(7)
    lin = torch.nn.Linear(3, 2).double()
    g = torch.Generator().manual_seed(3)
    batch = torch.randn(2 * n, 3, generator=g, dtype=torch.float64)
    out = hvd.allreduce(lin(hvd.allgather(batch[2 * r:2 * r + 2])), op=hvd.Average)
    out.sum().backward()
    ref = torch.nn.Linear(3, 2).double()
    ref.load_state_dict(lin.state_dict())
    ref(batch).sum().backward()
    torch.testing.assert_close(lin.weight.grad, ref.weight.grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lin.bias.grad, ref.bias.grad, rtol=1e-12, atol=1e-12)
