"""Autograd for troika.torch's collectives, with Horovod's gradients.

The out-of-place forms (``allreduce``, ``grouped_allreduce``, ``allgather``, ``broadcast``,
``alltoall``, ``reducescatter`` and their ``_async`` forms, whose result ``synchronize()``
returns) give a result that is differentiable with respect to their input when that input
requires grad and grad mode was on at submission. The in-place ``_`` forms are not differentiable.

Gradients follow Horovod's conventions exactly (each rank backpropagates its own loss; they
are Horovod's choices, not every one the derivative of a single global loss):

- allreduce: an allreduce of the gradient with the same op and scales (Average averages,
  Sum sums). For Min, Max and Product too: the same op applied to the gradients.
- grouped_allreduce: a grouped allreduce of the gradients, as above tensor by tensor.
- allgather (and each tensor of grouped_allgather): this rank's rows of the gradient averaged
  across the ranks.
- broadcast: the gradient averaged across the ranks, on the root; zeros elsewhere.
- alltoall: the reverse alltoall of the gradient (each rank sends back the rows it received).
- reducescatter (and each tensor of grouped_reducescatter): the gradients allgathered, times
  the set's size for Sum (not for Average), times the prescale and the postscale.

Each collective's gradient is a function beside it (collectives.py, grouped.py). The backward
passes submit collectives (unnamed: generated names), so every rank of the set must run
backward through the same operations in the same order, as with Horovod.

How it works: the forward collective is submitted by the ``_async`` form as usual; when its
result is fetched, ``attach`` records a Function node (``CollectiveBackward`` in the graph)
whose forward hands out that result and whose backward runs the gradient's collective.
"""

import torch


class _Box:
    """Carries a tensor through Function.apply without autograd seeing it as an input."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def attach(finish, tensor, gradient, *args):
    """`finish` (a handle's result getter) made differentiable with respect to `tensor` if
    `tensor` requires grad and grad mode is on now (at submission); otherwise `finish`
    unchanged. The gradient of `tensor` is ``gradient(grad, *args)``, `grad` that of the result.
    For alltoall the result is (output, received_splits): only the output is differentiable, and
    its gradient is ``gradient(grad, *args, received_splits)``."""
    if not (isinstance(tensor, torch.Tensor) and tensor.requires_grad
            and torch.is_grad_enabled()):
        return finish

    def differentiable_finish():
        result = finish()
        with torch.enable_grad():
            if isinstance(result, tuple):  # alltoall
                output, received = result
                return Collective.apply(tensor, _Box(output), gradient, args + (received,)), \
                    received
            return Collective.apply(tensor, _Box(result), gradient, args)

    return differentiable_finish


class Collective(torch.autograd.Function):
    """A collective's result, differentiable with respect to its input by `gradient`."""

    @staticmethod
    def forward(ctx, tensor, box, gradient, args):
        ctx.gradient = gradient
        ctx.args = args
        return box.value

    @staticmethod
    def backward(ctx, grad):
        return ctx.gradient(grad, *ctx.args), None, None, None


def attach_group(finish, tensors, gradient, *args):
    """`finish` of a grouped operation (its list of results) made differentiable with respect
    to the group's `tensors` if any requires grad and grad mode is on now (at submission). The
    gradients of `tensors` are ``gradient(grads, *args)``, `grads` the list of the results'."""
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
        return finish

    def differentiable_finish():
        results = finish()
        with torch.enable_grad():
            return list(GroupedCollective.apply(_Box(results), gradient, args, *tensors))

    return differentiable_finish


class GroupedCollective(torch.autograd.Function):
    """A grouped collective's results, differentiable with respect to its inputs by
    `gradient`."""

    @staticmethod
    def forward(ctx, box, gradient, args, *tensors):
        ctx.gradient = gradient
        ctx.args = args
        return tuple(box.value)

    @staticmethod
    def backward(ctx, *grads):
        return (None, None, None) + tuple(ctx.gradient(list(grads), *ctx.args))
