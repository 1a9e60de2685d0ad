"""troika.torch.autograd's mechanism without a job: a result getter made differentiable with
a gradient function given, only when its input requires grad at submission (run_unit_tests.sh,
one process). The collectives' own gradients run in test_autograd.py, as jobs."""

import torch

from troika.torch import autograd


def scaled(grad, factor):
    return grad * factor


def test_a_result_is_differentiable_by_the_gradient_given():
    x = torch.ones(3, requires_grad=True)
    finish = autograd.attach(lambda: torch.full([3], 7.0), x, scaled, 3.0)
    y = finish()
    assert torch.equal(y.detach(), torch.full([3], 7.0))
    assert type(y.grad_fn).__name__ == "CollectiveBackward"
    (y * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert torch.equal(x.grad, torch.tensor([3.0, 6.0, 9.0]))


def test_nothing_is_attached_without_grad_at_submission():
    def finish():
        return torch.zeros(1)

    assert autograd.attach(finish, torch.ones(1), scaled, 2.0) is finish
    x = torch.ones(1, requires_grad=True)
    with torch.no_grad():
        assert autograd.attach(finish, x, scaled, 2.0) is finish
    assert autograd.attach(finish, None, scaled, 2.0) is finish


def test_an_alltoall_result_is_differentiable_in_its_output_given_the_received_splits():
    x = torch.ones(4, requires_grad=True)
    seen = []

    def gradient(grad, factor, received_splits):
        seen.append(received_splits)
        return grad * factor

    received = torch.tensor([1, 3], dtype=torch.int32)
    out, splits = autograd.attach(lambda: (torch.zeros(4), received), x, gradient, 2.0)()
    assert splits is received
    out.sum().backward()
    assert seen == [received]
    assert torch.equal(x.grad, torch.full([4], 2.0))


def test_a_group_is_differentiable_in_every_input_by_one_gradient_call():
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(3, requires_grad=True)
    calls = []

    def gradient(grads, factor):
        calls.append(len(grads))
        return [g * factor for g in grads]

    ys = autograd.attach_group(lambda: [torch.zeros(2), torch.zeros(3)], [a, b], gradient, 5.0)()
    assert isinstance(ys, list) and len(ys) == 2
    (ys[0].sum() + 2 * ys[1].sum()).backward()
    assert calls == [2]
    assert torch.equal(a.grad, torch.full([2], 5.0))
    assert torch.equal(b.grad, torch.full([3], 10.0))

    def plain():
        return []

    assert autograd.attach_group(plain, [torch.ones(1)], gradient, 1.0) is plain
