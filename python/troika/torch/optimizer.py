"""DistributedOptimizer: wraps a torch optimizer so that gradients are averaged across the ranks
(horovod.torch.DistributedOptimizer's names and semantics).

Each parameter's gradient is submitted for allreduce from a hook on its gradient accumulator
as soon as autograd has produced it (after `backward_passes_per_step` backward passes), so
negotiation and transfer overlap the rest of the backward pass; step() (or synchronize())
waits only for what is still in flight, then runs the wrapped optimizer's update.
"""

import contextlib
import functools
import warnings
import weakref

import torch

import troika
from troika import global_process_set
from troika._handles import synchronize
from troika._ops import Average
from troika.torch.collectives import _allreduce, sparse_allreduce_async
from troika.torch.compression import Compression
from troika.torch.grouped import grouped_allreduce_async_


class _DistributedMixin:
    """Mixed in before the wrapped optimizer's class (see DistributedOptimizer)."""

    def _troika_setup(self, named_parameters, compression, backward_passes_per_step, op,
                      gradient_predivide_factor, process_set, groups=None,
                      sparse_as_dense=False):
        self._compression = compression
        self._op = op
        self._process_set = process_set
        self._passes = int(backward_passes_per_step)
        if self._passes < 1:
            raise ValueError("backward_passes_per_step must be >= 1")
        if op != Average and gradient_predivide_factor != 1.0:
            raise ValueError("gradient_predivide_factor needs op=Average")
        # Average = Sum / n: split as (x / f) summed, then * f / n.
        self._prescale = 1.0 / gradient_predivide_factor
        self._postscale = gradient_predivide_factor

        params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
        else:  # Horovod's names, the same on every rank
            named = [("allreduce.noname.%d.%d" % (i, j), p)
                     for i, group in enumerate(self.param_groups)
                     for j, p in enumerate(group["params"])]
        if any(not isinstance(n, tuple) for n in named):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                             "usually produced by model.named_parameters()")
        names = [n for n, _ in named]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError("Parameter names in named_parameters must be unique. Found "
                             "duplicates: %s" % ", ".join(duplicates))
        # Parameter -> its name (Horovod's attribute, which scripts and tests read).
        self._parameter_names = {p: n for n, p in named}
        unnamed = [p for p in params if p not in self._parameter_names]
        if unnamed:
            raise ValueError("named_parameters was specified, but %d of the optimizer's "
                             "parameters were not named" % len(unnamed))
        self._requires_update = [p for p in params if p.requires_grad]
        self._sparse_as_dense = bool(sparse_as_dense)
        # Per parameter needing a gradient: its state (_Grad), in the optimizer's order. The
        # hooks and step() use these, never the parameters as dict keys (a tensor's __hash__ is
        # a Python call).
        self._grads = [_Grad(p, self._parameter_names[p], self._passes)
                       for p in self._requires_update]
        self._grad_of = {g.param: g for g in self._grads}
        # Explicit groups (groups=/num_groups=): parameter -> its group (a tuple of parameters,
        # allreduced together once all of them have their gradient); empty without groups.
        self._groups_of = _make_groups(groups, self._requires_update, self._parameter_names)
        for p, group in self._groups_of.items():
            self._grad_of[p].group = group
        self._group_ready = {g: 0 for g in set(self._groups_of.values())}
        self._in_flight = []  # the _Grads submitted since the last synchronize, in order
        # Parameters whose sparse gradient was made dense (sparse_as_dense): made sparse again
        # once averaged, for optimizers that take only sparse ones (SparseAdam), as Horovod does.
        self._densified = set()
        self._synchronized = False
        self._skip_synchronize = False
        self._grad_accumulators = []
        # A rank outside the process set averages nothing: step() applies its own gradients
        # (as Horovod's).
        self._member = process_set.included()
        if self._member:
            self._register_hooks()
        _optimizers.add(self)

    def _register_hooks(self):
        for g in self._grads:
            # The AccumulateGrad node of p: its hooks run once p.grad holds the new gradient.
            acc = g.param.expand_as(g.param).grad_fn.next_functions[0][0]
            acc.register_hook(self._make_hook(g))
            self._grad_accumulators.append(acc)  # keep the nodes (and hooks) alive

    def _make_hook(self, g):
        def hook(*unused):
            if g.pending is not None or g.remaining <= 0:
                raise AssertionError(
                    "the gradient of %s was computed more than backward_passes_per_step=%d "
                    "times before step() or synchronize(); raise backward_passes_per_step"
                    % (g.name, self._passes))
            g.remaining -= 1
            if g.remaining == 0:
                if g.group is None:
                    self._submit(g)
                else:
                    self._group_ready[g.group] += 1
                    if self._group_ready[g.group] == len(g.group):
                        self._submit_group(g.group)
        return hook

    def _dense_grad(self, p):
        """p.grad, made dense if it is sparse and sparse_as_dense is set."""
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        elif p.grad.is_sparse and self._sparse_as_dense:
            p.grad = p.grad.to_dense()
            self._densified.add(p)
        return p.grad

    def _submitted(self, g, wait, finish):
        """g's gradient is in flight: wait() gives its result (shared by a group's members),
        finish(result) writes it to .grad."""
        g.pending = (wait, finish)
        self._in_flight.append(g)

    def _submit_group(self, group):
        """One grouped allreduce for the gradients of `group` (hvd.grouped_allreduce_async_)."""
        grads = [self._dense_grad(p) for p in group]
        for p, g in zip(group, grads):
            if g.is_sparse:
                raise ValueError(
                    "the gradient of %s is sparse: a group of DistributedOptimizer(groups=...) "
                    "allreduces dense gradients; pass sparse_as_dense=True"
                    % self._parameter_names[p])
        compressed = [self._compression.compress(g) for g in grads]
        handle = grouped_allreduce_async_(
            [w for w, _ in compressed], name=self._parameter_names[group[0]],
            op=self._op, prescale_factor=self._prescale, postscale_factor=self._postscale,
            process_set=self._process_set)
        wait = functools.partial(synchronize, handle)
        for i, (p, g, (wire, ctx)) in enumerate(zip(group, grads, compressed)):
            self._submitted(self._grad_of[p], wait, self._group_finish(p, i, g, wire, ctx))

    def _group_finish(self, p, i, grad, wire, ctx):
        def finish(results):
            if wire is not grad:
                with torch.no_grad():
                    p.grad.copy_(self._compression.decompress(results[i], ctx))
        return finish

    def _submit_sparse(self, g):
        """A sparse gradient (sparse_as_dense=False): hvd.sparse_allreduce_async, every rank's
        indices and values allgathered, as Horovod does."""
        p = g.param
        wait = sparse_allreduce_async(p.grad, g.name, self._op, self._process_set)

        def finish(result):
            p.grad = result
        self._submitted(g, wait, finish)

    def _submit(self, g):
        if self._dense_grad(g.param).is_sparse:
            self._submit_sparse(g)
            return
        grad = g.param.grad
        wire, ctx = self._compression.compress(grad)
        # Straight to the submission, without hvd.allreduce_async_'s handle registry.
        pending = _allreduce(wire, wire, g.name, self._op, self._prescale, self._postscale,
                             self._process_set)
        wait = pending.complete
        self._submitted(g, wait, _nothing if wire is grad else self._decompress_into(g.param, ctx))

    def _decompress_into(self, p, ctx):
        def finish(out):
            with torch.no_grad():
                p.grad.copy_(self._compression.decompress(out, ctx))
        return finish

    def synchronize(self):
        """Waits for every gradient's allreduce (submitting those whose hooks did not run,
        e.g. of parameters unused this step) and writes the averaged gradients to .grad.
        If one fails, the others are still waited for (they use the gradients' memory), then
        the first error is raised."""
        if not self._member:
            self._synchronized = True
            return
        for g in self._grads:
            if g.pending is None:
                if g.group is None:
                    self._submit(g)
                else:  # submits the whole group: none of it is pending yet
                    self._submit_group(g.group)
        error = None
        results = {}  # wait -> its result (a group's members share theirs)
        try:
            for g in self._in_flight:
                wait, finish = g.pending
                try:
                    if wait not in results:
                        results[wait] = wait()
                    if error is None:
                        finish(results[wait])
                except Exception as e:  # noqa: BLE001 (re-raised below)
                    results[wait] = None
                    error = error or e
        finally:
            self._in_flight.clear()  # all waited for
            self._troika_reset()
        if error is not None:
            raise error
        for p in self._densified:
            p.grad = p.grad.to_sparse()
        self._densified.clear()
        self._synchronized = True

    def _troika_reset(self):
        """Forgets the gradients in flight (an elastic job's generation ended under them:
        elastic.TorchState.restore; and after every troika.shutdown(), _forget_in_flight)."""
        for g in self._in_flight:  # the core may still use their buffers: wait for it
            try:
                g.pending[0]()
            except Exception:  # noqa: BLE001 (they failed with the generation)
                pass
        for g in self._grads:
            g.pending = None
            g.remaining = self._passes
        self._in_flight.clear()
        for group in self._group_ready:
            self._group_ready[group] = 0
        self._synchronized = False

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
            if self._synchronized:  # Horovod's warning, word for word (scripts grep for it)
                warnings.warn("optimizer.step() called without "
                              "optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._in_flight:
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(): the gradients' allreduces are "
                "still in flight")
        return super().zero_grad(*args, **kwargs)


# Every DistributedOptimizer (weakly): what each has in flight ends with the context.
_optimizers = weakref.WeakSet()


def _forget_in_flight():
    """After every troika.shutdown() (an elastic generation's end is one): each optimizer
    forgets the gradients it had in flight, which failed with the context, so that the next
    context's zero_grad() and backward pass do not find them pending (whatever state object
    the script uses)."""
    for optimizer in list(_optimizers):
        optimizer._troika_reset()


troika._shutdown_hooks.append(_forget_in_flight)


class _Grad:
    """One parameter's gradient in DistributedOptimizer."""

    __slots__ = ("param", "name", "remaining", "group", "pending")

    def __init__(self, param, name, passes):
        self.param = param
        self.name = name  # its allreduce is negotiated as "allreduce.<name>", as Horovod's
        self.remaining = passes  # backward passes until it is submitted
        self.group = None  # its group (a tuple of parameters), if groups were given
        self.pending = None  # (wait, finish) while in flight


def _nothing(result):
    pass


def _split_list(items, n):
    """`items` in n consecutive chunks whose lengths differ by at most one."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]


def _make_groups(groups, params, names):
    """Horovod's explicit grouping: parameter -> its group (a tuple), or {} if groups is None.

    An integer n: the parameters that need gradients, sorted by name (so every rank forms the
    same groups), in n consecutive groups of near-equal counts. A list of lists of parameters:
    each inner list is a group (parameters not needing gradients dropped); every other
    parameter is a group of its own."""
    if groups is None:
        return {}
    by_name = sorted(params, key=lambda p: names[p])
    if isinstance(groups, list):
        seen = set()
        for group in groups:
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise ValueError("groups must consist of torch.Tensor (parameters)")
                if id(p) in seen:
                    raise ValueError("a parameter can only appear once in groups")
                seen.add(id(p))
        wanted = {id(p) for p in params}
        formed = [[p for p in group if id(p) in wanted] for group in groups]
        formed += [[p] for p in by_name if id(p) not in seen]
    elif isinstance(groups, int) and not isinstance(groups, bool) and groups > 0:
        formed = _split_list(by_name, groups)
    else:
        raise ValueError("groups should be a positive integer or a list of lists of "
                         "torch.Tensor, not %r" % (groups,))
    out = {}
    for group in formed:
        group = tuple(sorted(group, key=lambda p: names[p]))
        for p in group:
            out[p] = group
    return out


def DistributedOptimizer(optimizer, named_parameters=None, compression=None,
                         backward_passes_per_step=1, op=None, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None):
    """Returns `optimizer` made distributed: an instance of a subclass of its class (so
    isinstance checks keep working) sharing its parameters, groups and state.

    named_parameters: model.named_parameters(), naming each gradient's allreduce (default:
    Horovod's "allreduce.noname.<group>.<index>", the same on every rank); the names are in
    the returned optimizer's ``_parameter_names`` (parameter -> name), as Horovod's. compression:
    Compression.none (default), .fp16 or .bf16. backward_passes_per_step: backward passes
    accumulated locally before the allreduce. op: Average (default), Sum, ...
    gradient_predivide_factor: with Average, gradients are divided by it before the sum and
    multiplied by it after. groups: explicit groups of gradient allreduces, each run as one
    grouped_allreduce once all of its gradients are ready — a positive integer n (the
    parameters sorted by name, split into n consecutive groups) or a list of lists of
    parameters (each a group; every other parameter a group of its own); default None: each
    gradient on its own (fused by the runtime anyway). num_groups: deprecated, groups=n.
    sparse_as_dense: sparse gradients (e.g. nn.Embedding(sparse=True)) are made dense and
    allreduced; otherwise their indices and values are allgathered (Average or Sum only;
    in a group they must be dense). process_set: the ranks to average over (default: all).
    """
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups`",
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    base = optimizer.__class__
    cls = type(base.__name__, (_DistributedMixin, base), {"__module__": base.__module__})
    dist = cls.__new__(cls)
    dist.__dict__.update(optimizer.__dict__)  # the same param_groups, state and defaults
    dist._troika_setup(named_parameters,
                       Compression.none if compression is None else compression,
                       backward_passes_per_step, Average if op is None else op,
                       gradient_predivide_factor,
                       global_process_set if process_set is None else process_set,
                       groups=groups, sparse_as_dense=sparse_as_dense)
    return dist
