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
- ``grouped_allgather*`` and ``grouped_reducescatter*``: the core has no grouped allgather or
  reducescatter. Every tensor of the group is checked first (dtype, device: an invalid one
  raises before any is submitted, as in Horovod), then all are submitted back to back, so they
  are negotiated in the same batch; but the coordinator does not hold the ready ones until the
  whole group is ready, and they are not fused with one another (each runs as its own
  collective).

Names: the group's ``name`` (default: a generated ``grouped_<op>.noname.<N>``, deterministic
across ranks); its i-th tensor is negotiated as ``<name>.<i>``.
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


class _Composite:
    """Several troika.torch handles (one per tensor), waited as one; keeps their results."""

    __slots__ = ("handles", "results")

    def __init__(self, handles):
        self.handles = handles
        self.results = None

    def poll(self):
        return all(_hvd.poll(h) for h in self.handles)

    def wait(self):
        first = None
        results = []
        for h in self.handles:
            try:
                results.append(_hvd.synchronize(h))
            except Exception as e:
                if first is None:
                    first = e
        if first is not None:
            raise first
        self.results = results


def _group_name(kind, name, ps_id):
    return name if name is not None else _troika_pkg._generated_name(kind, ps_id)


def _check_group(tensors):
    """Validates every tensor before any is submitted: dtype, and one device for the group."""
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
    ps_id = _hvd._ps_id(process_set)
    tensors = _check_group(tensors)
    group = _group_name("grouped_allreduce", name, ps_id)
    if not tensors:
        return _hvd._register(_GroupNative([]), (), lambda: [])
    device, stream = _hvd._device(tensors[0])
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
        entries.append(("%s.%d" % (group, i), source.data_ptr(), target.data_ptr(),
                        _hvd._dtype(source), _hvd._shape(source)))
        keep.append((tensor, source, target))
    natives = _troika_pkg.context().grouped_allreduce(
        group, entries, op=op, prescale=prescale_factor, postscale=postscale_factor,
        process_set=ps_id, device=device, ready_stream=stream)
    finish = lambda: [f() for f in finishers]  # noqa: E731
    if not in_place:  # out of place: differentiable (autograd.py)
        finish = _autograd.attach_group(finish, tensors, op, prescale_factor, postscale_factor,
                                        process_set)
    return _hvd._register(_GroupNative(natives), keep, finish, device)


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
    """Allgathers each tensor of the list (dim 0 may differ per rank); one handle whose
    synchronize() gives the list of gathered tensors. Submitted together, not fused (see the
    module's doc)."""
    ps_id = _hvd._ps_id(process_set)
    tensors = _check_group(tensors)
    group = _group_name("grouped_allgather", name, ps_id)
    handles = [_hvd.allgather_async(t, name="%s.%d" % (group, i), process_set=process_set)
               for i, t in enumerate(tensors)]
    composite = _Composite(handles)
    return _hvd._register(composite, (), lambda: composite.results)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """The list of every rank's tensors concatenated along dim 0, tensor by tensor."""
    return _hvd.synchronize(grouped_allgather_async(tensors, name, process_set))


# ----------------------------------------------------------------------------- reducescatter


def grouped_reducescatter_async(tensors, name=None, op=_hvd.Average,
                                process_set=global_process_set, prescale_factor=1.0,
                                postscale_factor=1.0):
    """Reducescatters each tensor of the list (Average or Sum); one handle whose
    synchronize() gives the list of this rank's blocks. Submitted together, not fused (see
    the module's doc)."""
    ps_id = _hvd._ps_id(process_set)
    tensors = _check_group(tensors)
    for t in tensors:
        if t.dim() == 0:
            raise ValueError("reducescatter needs a tensor of at least one dimension")
    group = _group_name("grouped_reducescatter", name, ps_id)
    handles = [_hvd.reducescatter_async(t, name="%s.%d" % (group, i), op=op,
                                        process_set=process_set,
                                        prescale_factor=prescale_factor,
                                        postscale_factor=postscale_factor)
               for i, t in enumerate(tensors)]
    composite = _Composite(handles)
    return _hvd._register(composite, (), lambda: composite.results)


def grouped_reducescatter(tensors, name=None, compression=_hvd.Compression.none,
                          op=_hvd.Average, process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """The list of this rank's blocks of each tensor reduced across the set."""
    compressed = [compression.compress(t) for t in tensors]
    out = _hvd.synchronize(grouped_reducescatter_async(
        [c for c, _ in compressed], name, op, process_set, prescale_factor, postscale_factor))
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(out, compressed)]
