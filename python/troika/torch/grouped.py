"""Grouped collectives of ``horovod.torch``: ``grouped_allreduce*``, ``grouped_allgather*`` and
``grouped_reducescatter*`` (same names, arguments and defaults as Horovod's).

A grouped operation takes a list of tensors and returns ONE handle; ``synchronize(handle)``
returns the list of results in the same order (``poll(handle)`` is True once all finished).
If any tensor of the group fails, ``synchronize`` waits for the others, then raises the first
error.

- ``grouped_allreduce*`` runs on the core's ``Context::GroupedAllreduce``: the coordinator
  schedules no tensor of the group until every rank submitted all of them, then runs them
  together, fused as far as the fusion threshold allows (docs/protocol.md, Groups). A tensor
  invalid on this rank fails the whole group here, before anything is sent.
- ``grouped_allgather*`` and ``grouped_reducescatter*`` run on ``Context::GroupedAllgather``
  and ``Context::GroupedReducescatter``, with the same rules: none runs until every rank
  submitted all of them, and each is checked here first. They are not fused with one
  another (each is its own collective, back to back).

Names: the group is negotiated as ``grouped_<op>.<name>`` (as Horovod's; without a name, a
generated ``grouped_<op>.noname.<N>``, deterministic across ranks); its i-th tensor as
``<that>.<i>``.
"""

import torch

import troika as _troika_pkg
from troika import global_process_set
import troika.torch as _hvd
from troika.torch import autograd as _autograd


class _GroupNative:
    """The core's handles of one group, waited as one."""

    __slots__ = ("natives",)

    def __init__(self, natives):
        self.natives = natives

    def poll(self):
        return all(n.poll() for n in self.natives)

    def wait(self):
        self._each(lambda n: n.wait())

    def wait_on_stream(self, stream):
        self._each(lambda n: n.wait_on_stream(stream))

    def _each(self, wait):
        first = None
        for n in self.natives:
            try:
                wait(n)
            except Exception as e:  # wait for the rest; they use our buffers
                if first is None:
                    first = e
        if first is not None:
            raise first


def _start_group(kind, tensors, name, process_set):
    """Validates a group before any of it is submitted (every tensor's dtype, one device) and
    names it: (the tensors as a list, process set id, group name, its key for the handle,
    device, ready stream)."""
    ps_id = _hvd._ps_id(process_set)
    tensors = _check_group(tensors)
    group, key = _hvd._name(kind, name, ps_id)
    device, stream = _hvd._device(tensors[0]) if tensors else (-1, 0)
    return tensors, ps_id, group, key, device, stream


def _empty_group():
    return _hvd._register(_GroupNative([]), (), lambda: [])


def _check_group(tensors):
    tensors = list(tensors)
    device = None
    for t in tensors:
        _hvd._dtype(t)
        _hvd._device(t)
        if device is None:
            device = t.device
        elif t.device != device:
            raise ValueError("a grouped operation's tensors must be on one device: %s and %s"
                             % (device, t.device))
    return tensors


# ----------------------------------------------------------------------------- allreduce


def _grouped_allreduce_async(tensors, in_place, name, op, prescale_factor, postscale_factor,
                             process_set):
    tensors, ps_id, group, key, device, stream = _start_group(
        "grouped_allreduce", tensors, name, process_set)
    if not tensors:
        return _empty_group()
    entries, keep, finishers = [], [], []
    for i, tensor in enumerate(tensors):
        source = tensor.contiguous()
        if not in_place:
            target = torch.empty_like(source, memory_format=torch.contiguous_format)
            finishers.append(lambda target=target: target)
        elif tensor.is_contiguous():
            target = tensor
            finishers.append(lambda tensor=tensor: tensor)
        else:  # in place on a non-contiguous tensor: through a contiguous copy
            target = source
            finishers.append(lambda tensor=tensor, target=target: tensor.copy_(target))
        entries.append(("%s.%d" % (group, i), source.data_ptr(), target.data_ptr(), 0,
                        _hvd._dtype(source), _hvd._shape(source)))
        keep.append((tensor, source, target))
    natives = _troika_pkg.context().grouped_allreduce(
        group, entries, op=op, prescale=prescale_factor, postscale=postscale_factor,
        process_set=ps_id, device=device, ready_stream=stream)
    finish = lambda: [f() for f in finishers]  # noqa: E731
    if not in_place:  # out of place: differentiable (autograd.py)
        finish = _autograd.attach_group(finish, tensors, op, prescale_factor, postscale_factor,
                                        process_set)
    return _hvd._register(_GroupNative(natives), keep, finish, device, key)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Reduces each tensor of the list across the ranks into new tensors, as one group;
    returns one handle whose synchronize() gives the list of results."""
    return _grouped_allreduce_async(tensors, False, name, _hvd._op(op, average),
                                    prescale_factor, postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """grouped_allreduce_async in place: each tensor receives its result."""
    return _grouped_allreduce_async(tensors, True, name, _hvd._op(op, average),
                                    prescale_factor, postscale_factor, process_set)


def grouped_allreduce(tensors, average=None, name=None, compression=_hvd.Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """The list of `tensors` each reduced across the ranks (Average by default), as one
    group; the inputs are unchanged."""
    compressed = [compression.compress(t) for t in tensors]
    reduced = _hvd.synchronize(grouped_allreduce_async(
        [c for c, _ in compressed], average, name, op, prescale_factor, postscale_factor,
        process_set))
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Reduces each tensor of the list in place, as one group; returns the list."""
    return _hvd.synchronize(grouped_allreduce_async_(tensors, average, name, op,
                                                     prescale_factor, postscale_factor,
                                                     process_set))


# ----------------------------------------------------------------------------- allgather


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Allgathers each tensor of the list (dim 0 may differ per rank) as one group; one handle
    whose synchronize() gives the list of gathered tensors."""
    tensors, ps_id, group, key, device, stream = _start_group(
        "grouped_allgather", tensors, name, process_set)
    if not tensors:
        return _empty_group()
    sources = [t.contiguous() for t in tensors]
    natives = _troika_pkg.context().grouped_allgather(
        group, [("%s.%d" % (group, i), s.data_ptr(), 0, 0, _hvd._dtype(s), _hvd._shape(s))
                for i, s in enumerate(sources)],
        process_set=ps_id, device=device, ready_stream=stream)
    # Each result differentiable as allgather's (autograd.py), decided now (at submission).
    finishers = [_autograd.attach(
        lambda n=n, t=t: _hvd._result_from(n, t.dtype, t.device), t, _autograd.Allgather,
        process_set) for n, t in zip(natives, tensors)]
    return _hvd._register(_GroupNative(natives), (tensors, sources),
                          lambda: [f() for f in finishers], key=key)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """The list of every rank's tensors concatenated along dim 0, tensor by tensor."""
    return _hvd.synchronize(grouped_allgather_async(tensors, name, process_set))


# ----------------------------------------------------------------------------- reducescatter


def grouped_reducescatter_async(tensors, name=None, op=_hvd.Average,
                                process_set=global_process_set, prescale_factor=1.0,
                                postscale_factor=1.0):
    """Reducescatters each tensor of the list (Average or Sum) as one group; one handle whose
    synchronize() gives the list of this rank's blocks."""
    _hvd._check_op(op)
    tensors, ps_id, group, key, device, stream = _start_group(
        "grouped_reducescatter", tensors, name, process_set)
    outs = [_hvd._reducescatter_output(t, process_set) for t in tensors]
    if not tensors:
        return _empty_group()
    sources = [t.contiguous() for t in tensors]
    natives = _troika_pkg.context().grouped_reducescatter(
        group, [("%s.%d" % (group, i), s.data_ptr(), o.data_ptr(), _hvd._nbytes(o),
                 _hvd._dtype(s), _hvd._shape(s)) for i, (s, o) in enumerate(zip(sources, outs))],
        op=op, prescale=prescale_factor, postscale=postscale_factor, process_set=ps_id,
        device=device, ready_stream=stream)
    finishers = [_autograd.attach(lambda o=o: o, t, _autograd.Reducescatter, op,
                                  prescale_factor, postscale_factor, process_set)
                 for t, o in zip(tensors, outs)]
    return _hvd._register(_GroupNative(natives), (tensors, sources, outs),
                          lambda: [f() for f in finishers], device, key)


def grouped_reducescatter(tensors, name=None, compression=_hvd.Compression.none,
                          op=_hvd.Average, process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """The list of this rank's blocks of each tensor reduced across the set."""
    compressed = [compression.compress(t) for t in tensors]
    out = _hvd.synchronize(grouped_reducescatter_async(
        [c for c, _ in compressed], name, op, process_set, prescale_factor, postscale_factor))
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(out, compressed)]
