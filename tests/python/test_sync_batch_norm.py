"""hvd.SyncBatchNorm on N ranks, each on its shard of a global batch, equals one
torch.nn.BatchNorm*d over the whole batch: outputs, input gradients, the weight and bias
gradients summed over the ranks, running statistics after several steps, and eval-mode
outputs. Tolerances: float64 rtol 1e-10, atol 1e-12; float32 rtol 1e-4, atol 1e-5."""

import pytest
import torch

import troika.torch as hvd

C = 4
TOL = {torch.float64: dict(rtol=1e-10, atol=1e-12), torch.float32: dict(rtol=1e-4, atol=1e-5)}
REFERENCE = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d,
             5: torch.nn.BatchNorm3d}
SPATIAL = {2: [], 3: [5], 4: [3, 2], 5: [2, 2, 3]}


def rows_per_rank(uneven):
    return [3 + r if uneven else 4 for r in range(hvd.size())]


def global_batch(step, rows, dim, dtype):
    g = torch.Generator().manual_seed(50 + step)
    shape = [sum(rows), C] + SPATIAL[dim]
    x = (torch.randn(shape, generator=g, dtype=torch.float64) * 3 + 1.5).to(dtype)
    w = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return x, w


def make_pair(dim, dtype, momentum=0.1, affine=True):
    sync = hvd.SyncBatchNorm(C, momentum=momentum, affine=affine).to(dtype)
    ref = REFERENCE[dim](C, momentum=momentum, affine=affine).to(dtype)
    if affine:
        g = torch.Generator().manual_seed(9)
        with torch.no_grad():
            for m in (sync, ref):
                g.manual_seed(9)
                m.weight.copy_(torch.rand(C, generator=g, dtype=torch.float64) + 0.5)
                m.bias.copy_(torch.randn(C, generator=g, dtype=torch.float64))
    return sync, ref


def close(a, b, dtype, msg):
    torch.testing.assert_close(a, b, msg=msg, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("dim", [2, 3, 4, 5])
@pytest.mark.parametrize("uneven", [False, True], ids=["even", "uneven"])
def test_equals_batch_norm_on_the_whole_batch(dtype, dim, uneven):
    r = hvd.rank()
    rows = rows_per_rank(uneven)
    lo, hi = sum(rows[:r]), sum(rows[:r + 1])
    sync, ref = make_pair(dim, dtype)
    for step in range(3):
        x, w = global_batch(step, rows, dim, dtype)
        for m in (sync, ref):
            m.zero_grad()
        xr = x[lo:hi].clone().requires_grad_()
        y = sync(xr)
        (w[lo:hi] * y).sum().backward()
        xa = x.clone().requires_grad_()
        yref = ref(xa)
        (w * yref).sum().backward()
        close(y, yref[lo:hi], dtype, "output, step %d" % step)
        close(xr.grad, xa.grad[lo:hi], dtype, "input gradient, step %d" % step)
        close(hvd.allreduce(sync.weight.grad, op=hvd.Sum), ref.weight.grad, dtype, "weight")
        close(hvd.allreduce(sync.bias.grad, op=hvd.Sum), ref.bias.grad, dtype, "bias")
        close(sync.running_mean, ref.running_mean, dtype, "running_mean, step %d" % step)
        close(sync.running_var, ref.running_var, dtype, "running_var, step %d" % step)
        assert int(sync.num_batches_tracked) == int(ref.num_batches_tracked) == step + 1
    sync.eval()
    ref.eval()
    x, _ = global_batch(7, rows, dim, dtype)
    close(sync(x[lo:hi]), ref(x)[lo:hi], dtype, "eval output")


def test_cumulative_average_without_affine():
    # momentum=None: running statistics are the cumulative average; affine=False: no weight.
    dtype, dim, r = torch.float64, 4, hvd.rank()
    rows = rows_per_rank(True)
    lo, hi = sum(rows[:r]), sum(rows[:r + 1])
    sync, ref = make_pair(dim, dtype, momentum=None, affine=False)
    for step in range(3):
        x, w = global_batch(step, rows, dim, dtype)
        xr = x[lo:hi].clone().requires_grad_()
        (w[lo:hi] * sync(xr)).sum().backward()
        xa = x.clone().requires_grad_()
        yref = ref(xa)
        (w * yref).sum().backward()
        close(xr.grad, xa.grad[lo:hi], dtype, "input gradient")
    close(sync.running_mean, ref.running_mean, dtype, "running_mean")
    close(sync.running_var, ref.running_var, dtype, "running_var")


def test_in_a_model_with_distributed_optimizer():
    # Conv -> SyncBatchNorm -> ReLU -> Linear, trained on N ranks with DistributedOptimizer
    # (Sum, so the parameter gradients are the whole batch's), equals one model trained on the
    # whole batch with BatchNorm2d.
    n, r = hvd.size(), hvd.rank()

    def model(bn):
        torch.manual_seed(3)
        return torch.nn.Sequential(torch.nn.Conv2d(2, C, 3, padding=1), bn(C), torch.nn.ReLU(),
                                   torch.nn.Flatten(), torch.nn.Linear(C * 16, 2)).double()

    dist, ref = model(hvd.SyncBatchNorm), model(torch.nn.BatchNorm2d)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.01),
                                   named_parameters=dist.named_parameters(), op=hvd.Sum)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.01)
    for step in range(3):
        g = torch.Generator().manual_seed(step)
        x = torch.randn(3 * n, 2, 4, 4, generator=g, dtype=torch.float64)
        t = torch.randn(3 * n, 2, generator=g, dtype=torch.float64)
        opt.zero_grad()
        ((dist(x[3 * r:3 * r + 3]) - t[3 * r:3 * r + 3]) ** 2).sum().backward()
        opt.step()
        ref_opt.zero_grad()
        ((ref(x) - t) ** 2).sum().backward()
        ref_opt.step()
    for (name, p), q in zip(dist.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-11, msg=name)
