"""What the DistributedOptimizer tests (test_optimizer.py, test_grouped.py) train: a small
model on seeded global batches, on one process over the whole batch (the reference) or on
every rank over its shard, and the comparison of the two."""

import torch

import troika.torch as hvd

ROWS_PER_RANK = 8
STEPS = 6


def make_model():
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8),
                                torch.nn.Tanh(), torch.nn.Linear(8, 3))
    # A parameter the forward pass never uses: its gradient hook never runs.
    model.unused = torch.nn.Parameter(torch.ones(2))
    return model


def global_batch(step, n):
    g = torch.Generator().manual_seed(100 + step)
    return (torch.randn(ROWS_PER_RANK * n, 6, generator=g),
            torch.randn(ROWS_PER_RANK * n, 3, generator=g))


def make_sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def train_reference(n):
    """One process, the whole global batch per step."""
    model = make_model()
    opt = make_sgd(model)
    for step in range(STEPS):
        x, y = global_batch(step, n)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return model


def train_distributed(passes=1, named=True, groups=None, **kwargs):
    """Every rank on its shard, through DistributedOptimizer(**kwargs); `groups` may be a
    function of the model. Returns the model and the optimizer."""
    n, r = hvd.size(), hvd.rank()
    model = make_model()
    if callable(groups):
        groups = groups(model)
    opt = hvd.DistributedOptimizer(
        make_sgd(model), named_parameters=model.named_parameters() if named else None,
        backward_passes_per_step=passes, groups=groups, **kwargs)
    assert isinstance(opt, torch.optim.SGD)
    for step in range(STEPS):
        x, y = global_batch(step, n)
        xs = x[r * ROWS_PER_RANK:(r + 1) * ROWS_PER_RANK].chunk(passes)
        ys = y[r * ROWS_PER_RANK:(r + 1) * ROWS_PER_RANK].chunk(passes)
        opt.zero_grad()
        for xm, ym in zip(xs, ys):
            (torch.nn.functional.mse_loss(model(xm), ym) / passes).backward()
        opt.step()
    return model, opt


def assert_same_model(model, reference, rtol=1e-4, atol=1e-5):
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        torch.testing.assert_close(p.detach(), q.detach(), rtol=rtol, atol=atol, msg=name)
