"""DistributedOptimizer: wraps a torch optimizer so that gradients are averaged across the ranks
(horovod.torch.DistributedOptimizer's names and semantics).

Each parameter's gradient is submitted for allreduce from a hook on its gradient accumulator
once autograd has produced it (after `backward_passes_per_step` backward passes), so
negotiation and transfer overlap the rest of the backward pass; step() (or synchronize())
waits only for what is still in flight, then runs the wrapped optimizer's update.

Gradients that become ready together are submitted together, as DDP's buckets are: the first
steps' backward passes are watched, and the gradients whose hooks ran close together form a
ready set (_ready_sets.py). From then on, a ready set is submitted in one call into the module
(_troika.submit_allreduces: one allreduce per gradient, each negotiated under its own name as
before, one release of the GIL) as soon as its last gradient is ready, and waited for in one
call; a set left incomplete is submitted when a gradient of another set becomes ready, at the
end of the backward pass, or at synchronize(). So a gradient waits for no computation beyond
its own readiness (only for the rest of its set's hooks), and a step makes a few calls into the
module instead of two per gradient (docs/PERFORMANCE.md, issue 49). The watched steps submit
each gradient alone, as soon as it is ready.
"""

import contextlib
import functools
import warnings
import weakref

import torch

import troika
from troika import _troika, global_process_set
from troika._handles import synchronize
from troika._ops import Average, process_set_id
from troika.torch.collectives import _allreduce, sparse_allreduce_async
from troika.torch import _ready_sets
from troika.torch.compression import Compression
from troika.torch.grouped import grouped_allreduce_async_
from troika.torch.tensors import _DTYPES, _stream_address_of, device_of, dtype_of

# Runs a function at the end of the backward pass in progress (RuntimeError outside one).
_queue_callback = torch.autograd.Variable._execution_engine.queue_callback


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
        self._grads = [_Grad(i, p, self._parameter_names[p], self._passes)
                       for i, p in enumerate(self._requires_update)]
        self._grad_of = {g.param: g for g in self._grads}
        # Explicit groups (groups=/num_groups=): parameter -> its group (a tuple of parameters,
        # allreduced together once all of them have their gradient); empty without groups.
        self._groups_of = _make_groups(groups, self._requires_update, self._parameter_names)
        for p, group in self._groups_of.items():
            self._grad_of[p].group = group
        self._group_ready = {g: 0 for g in set(self._groups_of.values())}
        # What was submitted since the last synchronize, in order: (wait, [(_Grad, finish)],
        # what the core reads and writes); wait() gives the result each finish(result) writes
        # to .grad (finish None: the core wrote it there).
        self._in_flight = []
        self._watcher = _ready_sets.Watcher()  # None once the ready sets are formed
        self._ready_sets = []
        self._open = None  # the ReadySet gradients of which are ready, unsubmitted
        self._callback_queued = False  # _end_of_backward queued in this backward pass
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
        def hook(*unused):  # kept lean: it runs for every gradient of every backward pass
            if g.pending is not None or g.remaining <= 0:
                raise AssertionError(
                    "the gradient of %s was computed more than backward_passes_per_step=%d "
                    "times before step() or synchronize(); raise backward_passes_per_step"
                    % (g.name, self._passes))
            g.remaining -= 1
            if g.remaining == 0:
                s = g.ready_set
                if s is None:
                    self._ready_alone(g)
                    return
                if self._open is not s:
                    self._open_set(s)
                ready = s.ready
                ready.append(g)
                if len(ready) == s.size:
                    self._flush(s)
        return hook

    def _ready_alone(self, g):
        """g's gradient is ready and g is in no ready set."""
        if g.group is not None:
            self._group_ready[g.group] += 1
            if self._group_ready[g.group] == len(g.group):
                self._submit_group(g.group)
        else:
            if self._watcher is not None:
                self._watcher.hook(g)
            self._submit(g)

    def _open_set(self, s):
        """Gradients of `s` become ready: the set open before it, if any, is submitted as far
        as it is ready (the gradients come in another order than in the watched steps), and its
        rest is submitted at the end of this backward pass if it is not complete by then."""
        if self._open is not None:
            self._flush(self._open)
        self._open = s
        if not self._callback_queued:
            try:
                _queue_callback(self._end_of_backward)
                self._callback_queued = True
            except RuntimeError:  # not in a backward pass: synchronize() submits the rest
                pass

    def _end_of_backward(self):
        self._callback_queued = False
        if self._open is not None:
            self._flush(self._open)

    def _flush(self, s):
        """Submits the ready gradients of `s` (one call into the module), in the optimizer's
        order of its parameters: the same every step and on every rank, whatever order the
        hooks ran in (autograd runs gradient accumulators that are ready at once in no set
        order), so that negotiation and steady-state schedules see one order."""
        ready, s.ready = s.ready, []
        if self._open is s:
            self._open = None
        self._submit_batch(s.members if len(ready) == s.size else _ready_sets.in_order(ready))

    def _submit_batch(self, grads):
        """The dense gradients of `grads` allreduced in place, each under its own name, in one
        _troika.submit_allreduces call per device (sparse ones each as _submit_sparse).
        Kept lean: it runs for every gradient of every step."""
        host = ([], [], [])  # entries, members [(g, finish)], what the core reads and writes
        others = {}  # GPU gradients: (device, ready stream) -> their three lists
        for g in grads:
            grad = g.param.grad
            # The common case: the host gradient of the step before, at the same address (its
            # entry is reused: no torch call but one).
            if grad is g.entry_grad and grad.data_ptr() == g.entry[1]:
                host[0].append(g.entry)
                host[1].append(g.member)
                host[2].append(grad)
            else:
                self._add_entry(g, host, others)
            g.pending = True
        batches = [((-1, 0), host)] + list(others.items())
        ps_id = process_set_id(self._process_set)
        context = troika.context()
        for (ordinal, stream), (entries, members, keep) in batches:
            if not entries:
                continue
            try:
                native = _troika.submit_allreduces(context, entries, self._op, self._prescale,
                                                   self._postscale, ps_id, ordinal, stream)
            except BaseException:
                for g, _ in members:
                    g.pending = None
                raise
            if ordinal < 0:
                wait = native.wait
            else:  # the current stream waits, as DevicePending's
                wait = functools.partial(_wait_on_device, native, ordinal)
            self._in_flight.append((wait, members, keep))

    def _add_entry(self, g, host, others):
        """Adds g's gradient to the batch of its device, `host` or others[(device, ready
        stream)], each (entries, members, what the core reads and writes); or submits it alone
        if it is sparse."""
        p = g.param
        grad = p.grad
        if grad is None or grad.is_sparse:
            grad = self._dense_grad(p)
            if grad.is_sparse:
                self._submit_sparse(g)
                return
        plain = self._compression is Compression.none
        wire, ctx = (grad, None) if plain else self._compression.compress(grad)
        dt = _DTYPES.get(wire.dtype)
        if dt is None:
            dt = dtype_of(wire)  # raises TypeError
        source = wire.contiguous()
        batch = host if source.is_cpu else others.setdefault(device_of(source), ([], [], []))
        address = source.data_ptr()
        entry = (g.wire_name, address, address, dt, source.shape)
        if source is grad:  # the core writes the result into grad
            member = g.member
            if batch is host:  # the next step's, if it is the same tensor (_submit_batch)
                g.entry, g.entry_grad = entry, grad
        else:  # into its contiguous or compressed copy `source`
            member = (g, self._decompress_into(p, ctx, source))
        batch[0].append(entry)
        batch[1].append(member)
        batch[2].append(source)

    def _dense_grad(self, p):
        """p.grad, made dense if it is sparse and sparse_as_dense is set."""
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        elif p.grad.is_sparse and self._sparse_as_dense:
            p.grad = p.grad.to_dense()
            self._densified.add(p)
        return p.grad

    def _submitted(self, g, wait, finish):
        """g's gradient is in flight alone: wait() gives its result, finish(result) writes it
        to .grad."""
        g.pending = True
        self._in_flight.append((wait, [(g, finish)], None))

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
        members = [(self._grad_of[p], self._group_finish(p, i, g, wire, ctx))
                   for i, (p, g, (wire, ctx)) in enumerate(zip(group, grads, compressed))]
        for g, _ in members:
            g.pending = True
        self._in_flight.append((wait, members, None))

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
        self._submitted(g, wait, None if wire is grad else self._decompress_into(g.param, ctx))

    def _decompress_into(self, p, ctx, out=None):
        """finish(result): p.grad takes the result decompressed (`out`, if given, holds it)."""
        def finish(result):
            with torch.no_grad():
                p.grad.copy_(self._compression.decompress(result if out is None else out, ctx))
        return finish

    def synchronize(self):
        """Waits for every gradient's allreduce (submitting those whose hooks did not run,
        e.g. of parameters unused this step) and writes the averaged gradients to .grad.
        If one fails, the others are still waited for (they use the gradients' memory), then
        the first error is raised."""
        if not self._member:
            self._synchronized = True
            return
        if self._open is not None:
            self._flush(self._open)
        loose = []  # in no group: one batch
        for g in self._grads:
            if g.pending is None:
                if g.group is None:
                    loose.append(g)
                else:  # submits the whole group: none of it is pending yet
                    self._submit_group(g.group)
        if loose:
            self._submit_batch(loose)
        if self._watcher is not None:
            self._form_ready_sets()
        error = None
        try:
            for wait, members, _ in self._in_flight:
                try:
                    result = wait()
                    if error is None:
                        for _, finish in members:
                            if finish is not None:
                                finish(result)
                except Exception as e:  # noqa: BLE001 (re-raised below)
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
        for wait, _, _ in self._in_flight:  # the core may still use their buffers: wait
            try:
                wait()
            except Exception:  # noqa: BLE001 (they failed with the generation)
                pass
        for g in self._grads:
            g.pending = None
            g.remaining = self._passes
        for s in self._ready_sets:
            s.ready = []
        self._open = None
        self._callback_queued = False  # (a backward pass that failed never ran it)
        self._in_flight.clear()
        for group in self._group_ready:
            self._group_ready[group] = 0
        if self._watcher is not None:
            self._watcher.cut_short()
        self._synchronized = False

    def _form_ready_sets(self):
        """Ends a watched step: after the last, the ready sets (sparse gradients in none)."""
        sets = self._watcher.end_step(lambda g: g.param.grad is not None
                                      and g.param.grad.is_sparse)
        if sets is not None:
            self._watcher = None
            self._ready_sets = sets
            for s in sets:
                for g in s.members:
                    g.ready_set = s

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
        if self._in_flight or self._open is not None:
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

    __slots__ = ("index", "param", "name", "wire_name", "remaining", "group", "ready_set",
                 "pending", "member", "entry", "entry_grad")

    def __init__(self, index, param, name, passes):
        self.index = index  # in the optimizer's order of its parameters (_grads)
        self.param = param
        self.name = name
        self.wire_name = "allreduce." + name  # its allreduce's name, as Horovod's
        self.remaining = passes  # backward passes until it is submitted
        self.group = None  # its group (a tuple of parameters), if groups were given
        self.ready_set = None  # its _ready_sets.ReadySet, once formed, if it is in one
        self.pending = None  # True while in flight
        self.member = (self, None)  # in a batch whose result the core writes into .grad
        # Its submit_allreduces entry of the step before, and the host gradient it was made
        # of: reused while .grad is that tensor at that address.
        self.entry, self.entry_grad = (None, 0), _NO_GRAD


_NO_GRAD = object()  # never a gradient (_Grad.entry_grad before the first entry)


def _wait_on_device(native, device):
    native.wait_on_stream(_stream_address_of(device))


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
