"""DistributedOptimizer: wraps a torch optimizer so that gradients are averaged across the ranks
(horovod.torch.DistributedOptimizer's names and semantics).

Each parameter's gradient is submitted for allreduce from a hook on its gradient accumulator
as soon as autograd has produced it (after `backward_passes_per_step` backward passes), so
negotiation and transfer overlap the rest of the backward pass; step() (or synchronize())
waits only for what is still in flight, then runs the wrapped optimizer's update.
"""

import contextlib
import warnings

import torch


class _DistributedMixin:
    """Mixed in before the wrapped optimizer's class (see DistributedOptimizer)."""

    def _troika_setup(self, named_parameters, compression, backward_passes_per_step, op,
                      gradient_predivide_factor, process_set):
        from troika import torch as hvd
        self._hvd = hvd
        self._compression = compression
        self._op = op
        self._process_set = process_set
        self._passes = int(backward_passes_per_step)
        if self._passes < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        if op != hvd.Average and gradient_predivide_factor != 1.0:
            raise ValueError("gradient_predivide_factor needs op=Average")
        # Average = Sum / n: split as (x / f) summed, then * f / n.
        self._prescale = 1.0 / gradient_predivide_factor
        self._postscale = gradient_predivide_factor

        params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            if any(not isinstance(n, tuple) for n in named):
                raise ValueError("named_parameters should be a sequence of (name, parameter) "
                                 "tuples, as model.named_parameters() gives")
            names = [n for n, _ in named]
            if len(set(names)) != len(names):
                raise ValueError("named_parameters has duplicate names")
            self._names = {p: n for n, p in named}
            unnamed = [p for p in params if p not in self._names]
            if unnamed:
                raise ValueError("named_parameters lacks %d of the optimizer's parameters"
                                 % len(unnamed))
        else:
            self._names = {p: "param.%d" % i for i, p in enumerate(params)}
        self._requires_update = [p for p in params if p.requires_grad]
        self._pending = {}  # parameter -> (handle, compression ctx, wire tensor or None)
        self._remaining = {p: self._passes for p in self._requires_update}
        self._synchronized = False
        self._skip_synchronize = False
        self._grad_accumulators = []
        self._register_hooks()

    def _register_hooks(self):
        for p in self._requires_update:
            # The AccumulateGrad node of p: its hooks run once p.grad holds the new gradient.
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._make_hook(p))
            self._grad_accumulators.append(acc)  # keep the nodes (and hooks) alive

    def _make_hook(self, p):
        def hook(*unused):
            if p in self._pending:
                raise AssertionError(
                    "the gradient of %s was computed more than backward_passes_per_step=%d "
                    "times before step() or synchronize(); raise backward_passes_per_step"
                    % (self._names[p], self._passes))
            self._remaining[p] -= 1
            if self._remaining[p] == 0:
                self._submit(p)
        return hook

    def _submit(self, p):
        hvd = self._hvd
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        name = "DistributedOptimizer.grad." + self._names[p]
        wire, ctx = self._compression.compress(p.grad)
        if wire is p.grad:
            handle = hvd.allreduce_async_(p.grad, name=name, op=self._op,
                                          prescale_factor=self._prescale,
                                          postscale_factor=self._postscale,
                                          process_set=self._process_set)
            self._pending[p] = (handle, ctx, None)
        else:
            handle = hvd.allreduce_async_(wire, name=name, op=self._op,
                                          prescale_factor=self._prescale,
                                          postscale_factor=self._postscale,
                                          process_set=self._process_set)
            self._pending[p] = (handle, ctx, wire)

    def synchronize(self):
        """Waits for every gradient's allreduce (submitting those whose hooks did not run,
        e.g. of parameters unused this step) and writes the averaged gradients to .grad."""
        for p in self._requires_update:
            if p not in self._pending:
                self._submit(p)
        hvd = self._hvd
        try:
            for p, (handle, ctx, wire) in list(self._pending.items()):
                out = hvd.synchronize(handle)
                if wire is not None:
                    with torch.no_grad():
                        p.grad.copy_(self._compression.decompress(out, ctx))
        finally:
            self._pending.clear()
            for p in self._requires_update:
                self._remaining[p] = self._passes
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For a step() right after an explicit synchronize() (e.g. to clip gradients)."""
        self._skip_synchronize = True
        try:
            yield
        finally:
            self._skip_synchronize = False

    def step(self, closure=None):
        if self._skip_synchronize:
            if not self._synchronized:
                warnings.warn("optimizer.step() in skip_synchronize() without a prior "
                              "optimizer.synchronize(): gradients are this rank's own")
        else:
            if self._synchronized and not self._pending:
                warnings.warn("optimizer.step() after optimizer.synchronize() without "
                              "skip_synchronize(): gradients are averaged again")
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._pending:
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(): the gradients' allreduces are "
                "still in flight")
        return super().zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=None,
                         backward_passes_per_step=1, op=None, gradient_predivide_factor=1.0,
                         process_set=None):
    """Returns `optimizer` made distributed: an instance of a subclass of its class (so
    isinstance checks keep working) sharing its parameters, groups and state.

    named_parameters: model.named_parameters(), naming each gradient's allreduce (default:
    "param.<index>" in the optimizer's order, the same on every rank). compression:
    Compression.none (default), .fp16 or .bf16. backward_passes_per_step: backward passes
    accumulated locally before the allreduce. op: Average (default), Sum, ...
    gradient_predivide_factor: with Average, gradients are divided by it before the sum and
    multiplied by it after. process_set: the ranks to average over (default: all).
    """
    from troika import torch as hvd
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedMixin, base), {"__module__": base.__module__})
    dist = cls.__new__(cls)
    dist.__dict__.update(optimizer.__dict__)  # the same param_groups, state and defaults
    dist._troika_setup(named_parameters,
                       hvd.Compression.none if compression is None else compression,
                       backward_passes_per_step, hvd.Average if op is None else op,
                       gradient_predivide_factor,
                       hvd.global_process_set if process_set is None else process_set)
    return dist
