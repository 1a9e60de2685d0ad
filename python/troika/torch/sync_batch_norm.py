"""SyncBatchNorm: batch normalization whose batch statistics span every rank's batch (as
horovod.torch.SyncBatchNorm), a drop-in for torch.nn.BatchNorm1d/2d/3d.

In training mode each rank computes its batch's per-channel count, mean and sum of squared
deviations; one allgather combines them (Chan et al.'s pairwise formula, stable in float32),
so the output equals one BatchNorm over the ranks' concatenated batches, and the running
statistics are updated with the global mean and unbiased variance. Ranks may have different
batch sizes. Backward makes one allreduce of the per-channel sums of the gradient and of the
gradient times the normalized input, so the input gradient is the one of the concatenated
batch; the weight and bias gradients are this rank's part of the sum (DistributedOptimizer
then combines them across ranks, as with Horovod). In eval mode, or on one rank, it is plain
BatchNorm (eval mode: with the running statistics, or this rank's batch statistics when
track_running_stats is False, as torch.nn.SyncBatchNorm). In training mode every rank of the
job must call forward (and backward) together.
"""

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from troika import size
from troika._ops import Sum
from troika.torch.collectives import allgather, allreduce


class SyncBatchNorm(_BatchNorm):
    """Applies batch normalization over every rank's batch: inputs (N, C), (N, C, L),
    (N, C, H, W) or (N, C, D, H, W). Arguments as torch.nn.BatchNorm2d."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got %dD input)" % input.dim())

    def forward(self, input):
        self._check_input_dim(input)
        if self.momentum is None:
            factor = 0.0
        else:
            factor = self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        if not self.training or size() == 1:  # as torch.nn.BatchNorm*d
            use_batch_stats = self.training or (self.running_mean is None
                                                and self.running_var is None)
            keep = not self.training or self.track_running_stats
            return torch.nn.functional.batch_norm(
                input, self.running_mean if keep else None, self.running_var if keep else None,
                self.weight, self.bias, use_batch_stats, factor, self.eps)
        return _SyncBatchNormFunction.apply(
            input, self.weight, self.bias,
            self.running_mean if self.track_running_stats else None,
            self.running_var if self.track_running_stats else None, self.eps, factor)


def _per_channel(t):
    """(C, M): channel-major view of an (N, C, *) tensor."""
    return t.transpose(0, 1).reshape(t.shape[1], -1)


def _broadcastable(v, dim):
    return v.reshape([1, -1] + [1] * (dim - 2))


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum):
        compute = torch.float64 if input.dtype == torch.float64 else torch.float32
        x = input.detach().to(compute)
        flat = _per_channel(x)
        count = flat.shape[1]
        if count > 0:
            mean = flat.mean(1)
            m2 = ((flat - mean[:, None]) ** 2).sum(1)
        else:
            mean = torch.zeros(flat.shape[0], dtype=compute, device=x.device)
            m2 = torch.zeros_like(mean)
        counts = torch.full_like(mean, float(count))
        stats = allgather(torch.stack([counts, mean, m2])[None])  # (ranks, 3, C)
        counts, means, m2s = stats[:, 0], stats[:, 1], stats[:, 2]
        total = counts.sum(0)
        if bool((total <= 0).any()):
            raise ValueError("SyncBatchNorm: every rank's batch is empty")
        g_mean = (counts * means).sum(0) / total
        g_m2 = (m2s + counts * (means - g_mean) ** 2).sum(0)
        var = g_m2 / total
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(g_mean.to(running_mean.dtype) * momentum)
                unbiased = g_m2 / (total - 1).clamp(min=1)
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype) * momentum)
        xhat = (x - _broadcastable(g_mean, x.dim())) * _broadcastable(invstd, x.dim())
        out = xhat
        if weight is not None:
            out = out * _broadcastable(weight.detach().to(compute), x.dim())
        if bias is not None:
            out = out + _broadcastable(bias.detach().to(compute), x.dim())
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.total = total
        ctx.has_bias = bias is not None
        ctx.bias_dtype = bias.dtype if bias is not None else None
        ctx.input_dtype = input.dtype
        return out.to(input.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output):
        xhat, invstd, weight = ctx.saved_tensors
        dim = xhat.dim()
        dy = grad_output.to(xhat.dtype)
        sum_dy = _per_channel(dy).sum(1)
        sum_dy_xhat = _per_channel(dy * xhat).sum(1)
        # Every rank takes part in the allreduce (the same sequence on every rank).
        sums = allreduce(torch.stack([sum_dy, sum_dy_xhat]), op=Sum)
        mean_dy = sums[0] / ctx.total
        mean_dy_xhat = sums[1] / ctx.total
        scale = invstd if weight is None else invstd * weight.detach().to(xhat.dtype)
        grad_input = None
        if ctx.needs_input_grad[0]:
            grad_input = (_broadcastable(scale, dim)
                          * (dy - _broadcastable(mean_dy, dim)
                             - xhat * _broadcastable(mean_dy_xhat, dim))).to(ctx.input_dtype)
        grad_weight = grad_bias = None
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = sum_dy_xhat.to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = sum_dy.to(ctx.bias_dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None
