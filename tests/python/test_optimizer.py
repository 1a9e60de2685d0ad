"""DistributedOptimizer: training on N ranks, each on its shard of every global batch, equals
training one model on the whole batch (float32: rtol 1e-4, atol 1e-5; fp16 compression: rtol
1e-2, atol 1e-3), with gradients accumulated over backward_passes_per_step passes too."""

import warnings

import pytest
import torch

import troika.torch as hvd

from training import (assert_same_model, global_batch, make_model, make_sgd, train_distributed,
                      train_reference)


@pytest.mark.parametrize("passes", [1, 2])
def test_equals_one_rank_on_the_whole_batch(passes):
    model, _ = train_distributed(passes=passes)
    assert_same_model(model, train_reference(hvd.size()), rtol=1e-4, atol=1e-5)
    assert torch.equal(model.unused.detach(), torch.ones(2))
    # Every rank ends with the same weights.
    for p in model.parameters():
        torch.testing.assert_close(hvd.broadcast(p.detach(), 0), p.detach(), rtol=0, atol=0)


def test_unnamed_parameters():
    assert_same_model(train_distributed(named=False)[0], train_reference(hvd.size()),
                      rtol=1e-4, atol=1e-5)


def test_fp16_compression():
    model, _ = train_distributed(compression=hvd.Compression.fp16)
    assert_same_model(model, train_reference(hvd.size()), rtol=1e-2, atol=1e-3)


def test_synchronize_then_clip_then_step_in_skip_synchronize():
    model = make_model()
    opt = hvd.DistributedOptimizer(make_sgd(model), named_parameters=model.named_parameters())
    x, y = global_batch(0, hvd.size())
    torch.nn.functional.mse_loss(model(x), y).backward()  # the same batch on every rank
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with opt.skip_synchronize():
            opt.step()
    ref = make_model()
    ref_opt = make_sgd(ref)
    torch.nn.functional.mse_loss(ref(x), y).backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
    ref_opt.step()
    assert_same_model(model, ref, rtol=1e-5, atol=1e-6)


def test_zero_grad_with_allreduces_in_flight_is_refused():
    model = make_model()
    opt = hvd.DistributedOptimizer(make_sgd(model), named_parameters=model.named_parameters())
    x, y = global_batch(0, hvd.size())
    torch.nn.functional.mse_loss(model(x), y).backward()
    used = [p for name, p in model.named_parameters() if name != "unused"]
    for step in range(3):  # the first step's hooks submit alone; then by ready sets
        # The hooks submitted every used parameter's allreduce during backward, before step().
        assert set(g.param for _, members, _ in opt._in_flight for g, _ in members) == set(used)
        with pytest.raises(AssertionError, match="zero_grad"):
            opt.zero_grad()
        opt.step()  # what was in flight completes; the job goes on
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def test_a_failed_gradient_raises_once_the_others_are_done_and_training_goes_on():
    # b's shape differs between the ranks: its allreduce fails on every rank, a's and c's
    # (submitted before and after it) complete, then step() raises the failure.
    a = torch.nn.Parameter(torch.zeros(4))
    b = torch.nn.Parameter(torch.zeros(2 + hvd.rank()))
    c = torch.nn.Parameter(torch.zeros(5))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([a, b, c], lr=0.1),
                                   named_parameters=[("a", a), ("b", b), ("c", c)])
    rank_factor = hvd.rank() + 1.0
    mean_factor = (hvd.size() + 1) / 2.0  # the ranks' mean of rank_factor
    ((a.sum() + b.sum() + c.sum()) * rank_factor).backward()
    with pytest.raises(hvd.HorovodInternalError) as err:
        opt.step()
    assert "'allreduce.b'" in str(err.value)  # the name Horovod gives it
    assert torch.equal(a.grad, torch.full((4,), mean_factor))
    assert torch.equal(c.grad, torch.full((5,), mean_factor))
    assert not opt._in_flight
    opt.zero_grad()  # nothing in flight
    # The job goes on.
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()


def test_more_backward_passes_than_declared_is_refused():
    model = make_model()
    opt = hvd.DistributedOptimizer(make_sgd(model), named_parameters=model.named_parameters())
    x, y = global_batch(0, hvd.size())
    torch.nn.functional.mse_loss(model(x), y).backward()
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
