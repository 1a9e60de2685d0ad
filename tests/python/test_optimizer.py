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
    # The hooks submitted every used parameter's allreduce during backward, before step().
    used = [p for name, p in model.named_parameters() if name != "unused"]
    assert set(opt._pending) == set(used)
    with pytest.raises(AssertionError, match="zero_grad"):
        opt.zero_grad()
    opt.step()  # what was in flight completes; the job goes on
    opt.zero_grad()


def test_more_backward_passes_than_declared_is_refused():
    model = make_model()
    opt = hvd.DistributedOptimizer(make_sgd(model), named_parameters=model.named_parameters())
    x, y = global_batch(0, hvd.size())
    torch.nn.functional.mse_loss(model(x), y).backward()
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
