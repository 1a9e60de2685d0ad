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

The backward passes submit collectives (unnamed: generated names), so every rank of the set
must run backward through the same operations in the same order, as with Horovod.

How it works: the forward collective is submitted by the ``_async`` form as usual; when its
result is fetched, ``attach`` records a Function node whose forward hands out that result and
whose backward runs the gradient's collective.
"""

import torch


class _Box:
    """Carries a tensor through Function.apply without autograd seeing it as an input."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _hvd():
    import troika.torch as hvd  # at call time: troika.torch imports this module
    return hvd


def attach(finish, tensor, function, *args):
    """`finish` (a handle's result getter) made differentiable with respect to `tensor` by
    `function` (a Function below; `args` go to its forward) if `tensor` requires grad and grad
    mode is on now (at submission); otherwise `finish` unchanged. For alltoall the result is
    (output, received_splits) and only the output is differentiable."""
    if not (isinstance(tensor, torch.Tensor) and tensor.requires_grad
            and torch.is_grad_enabled()):
        return finish

    def differentiable_finish():
        result = finish()
        with torch.enable_grad():
            if isinstance(result, tuple):  # alltoall
                output, received = result
                return function.apply(tensor, _Box(output), received, *args), received
            return function.apply(tensor, _Box(result), *args)

    return differentiable_finish


class Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, box, op, prescale_factor, postscale_factor, process_set):
        ctx.op = op
        ctx.scales = (prescale_factor, postscale_factor)
        ctx.process_set = process_set
        return box.value

    @staticmethod
    def backward(ctx, grad):
        hvd = _hvd()
        g = hvd.allreduce(grad.contiguous(), op=ctx.op, prescale_factor=ctx.scales[0],
                          postscale_factor=ctx.scales[1], process_set=ctx.process_set)
        return g, None, None, None, None, None


def attach_group(finish, tensors, op, prescale_factor, postscale_factor, process_set):
    """`finish` of a grouped allreduce (its list of results) made differentiable with respect
    to the group's `tensors` if any requires grad and grad mode is on now (at submission)."""
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
        return finish

    def differentiable_finish():
        results = finish()
        with torch.enable_grad():
            return list(GroupedAllreduce.apply(_Box(results), op, prescale_factor,
                                               postscale_factor, process_set, *tensors))

    return differentiable_finish


class GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, box, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.op = op
        ctx.scales = (prescale_factor, postscale_factor)
        ctx.process_set = process_set
        return tuple(box.value)

    @staticmethod
    def backward(ctx, *grads):
        hvd = _hvd()
        gs = hvd.grouped_allreduce([g.contiguous() for g in grads], op=ctx.op,
                                   prescale_factor=ctx.scales[0],
                                   postscale_factor=ctx.scales[1], process_set=ctx.process_set)
        return (None, None, None, None, None) + tuple(gs)


class Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, box, process_set):
        ctx.rows = tensor.shape[0] if tensor.dim() > 0 else 1
        ctx.process_set = process_set
        return box.value

    @staticmethod
    def backward(ctx, grad):
        hvd = _hvd()
        ps = ctx.process_set
        averaged = hvd.allreduce(grad.contiguous(), op=hvd.Average, process_set=ps)
        rows = hvd.allgather(torch.tensor([ctx.rows], dtype=torch.int64), process_set=ps)
        offset = int(rows[:ps.rank()].sum().item())
        return averaged.narrow(0, offset, ctx.rows), None, None


class Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, box, root_rank, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return box.value

    @staticmethod
    def backward(ctx, grad):
        hvd = _hvd()
        averaged = hvd.allreduce(grad.contiguous(), op=hvd.Average, process_set=ctx.process_set)
        if hvd.rank() != ctx.root_rank:
            averaged = torch.zeros_like(averaged)
        return averaged, None, None, None


class Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, box, received_splits, process_set):
        ctx.received_splits = received_splits
        ctx.process_set = process_set
        return box.value

    @staticmethod
    def backward(ctx, grad):
        hvd = _hvd()
        g, _ = hvd.alltoall(grad.contiguous(), splits=ctx.received_splits,
                            process_set=ctx.process_set)
        return g, None, None, None


class Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, box, op, prescale_factor, postscale_factor, process_set):
        ctx.scales = (process_set.size() if op == _hvd().Sum else 1, prescale_factor,
                      postscale_factor)
        ctx.process_set = process_set
        return box.value

    @staticmethod
    def backward(ctx, grad):
        for s in ctx.scales:  # one at a time, in Horovod's order (so rounding is the same)
            if s != 1:
                grad = grad * s
        g = _hvd().allgather(grad.contiguous(), process_set=ctx.process_set)
        return g, None, None, None, None, None
