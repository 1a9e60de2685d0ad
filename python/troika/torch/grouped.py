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

import troika
from troika import global_process_set
from troika._handles import NativeGroup, operation_name, register, synchronize
from troika._ops import Average, check_op, process_set_id, reduce_op
from troika.torch import autograd
from troika.torch.collectives import (_allgather_gradient, _reducescatter_gradient,
                                      _reducescatter_output)
from troika.torch.compression import Compression
from troika.torch.tensors import (device_of, dtype_of, nbytes, pending, result_from,
                                  result_target, shape)


def _start_group(kind, tensors, name, process_set):
    """Validates a group before any of it is submitted (every tensor's dtype, one device) and
    names it: (the tensors as a list, process set id, group name, its key for the handle,
    device, ready stream)."""
    ps_id = process_set_id(process_set)
    tensors = _check_group(tensors)
    group, key = operation_name(kind, name, ps_id)
    device, stream = device_of(tensors[0]) if tensors else (-1, 0)
    return tensors, ps_id, group, key, device, stream


def _empty_group():
    return register(pending(NativeGroup([]), (), lambda: []))


def _check_group(tensors):
    tensors = list(tensors)
    device = None
    for t in tensors:
        dtype_of(t)
        device_of(t)
        if device is None:
            device = t.device
        elif t.device != device:
            # RuntimeError, as Horovod raises it (from its C++ core).
            raise RuntimeError("a grouped operation's tensors must be on one device: %s and %s"
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
        target, finish = result_target(source, tensor if in_place else None)
        finishers.append(finish or (lambda target=target: target))
        entries.append(("%s.%d" % (group, i), source.data_ptr(), target.data_ptr(), 0,
                        dtype_of(source), shape(source)))
        keep.append((tensor, source, target))
    natives = troika.context().grouped_allreduce(
        group, entries, op=op, prescale=prescale_factor, postscale=postscale_factor,
        process_set=ps_id, device=device, ready_stream=stream)
    finish = lambda: [f() for f in finishers]  # noqa: E731
    if not in_place:  # out of place: differentiable (autograd.py)
        finish = autograd.attach_group(finish, tensors, _grouped_allreduce_gradient, op,
                                       prescale_factor, postscale_factor, process_set)
    return register(pending(NativeGroup(natives), keep, finish, device, key))


def _grouped_allreduce_gradient(grads, op, prescale_factor, postscale_factor, process_set):
    """A grouped allreduce of the gradients with the same op and scales (Horovod's)."""
    return grouped_allreduce([g.contiguous() for g in grads], op=op,
                             prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor, process_set=process_set)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Reduces each tensor of the list across the ranks into new tensors, as one group;
    returns one handle whose synchronize() gives the list of results."""
    return _grouped_allreduce_async(tensors, False, name, reduce_op(op, average),
                                    prescale_factor, postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """grouped_allreduce_async in place: each tensor receives its result."""
    return _grouped_allreduce_async(tensors, True, name, reduce_op(op, average),
                                    prescale_factor, postscale_factor, process_set)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """The list of `tensors` each reduced across the ranks (Average by default), as one
    group; the inputs are unchanged."""
    compressed = [compression.compress(t) for t in tensors]
    reduced = synchronize(grouped_allreduce_async(
        [c for c, _ in compressed], average, name, op, prescale_factor, postscale_factor,
        process_set))
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Reduces each tensor of the list in place, as one group; returns the list."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


# ----------------------------------------------------------------------------- allgather


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Allgathers each tensor of the list (dim 0 may differ per rank) as one group; one handle
    whose synchronize() gives the list of gathered tensors."""
    tensors, ps_id, group, key, device, stream = _start_group(
        "grouped_allgather", tensors, name, process_set)
    if not tensors:
        return _empty_group()
    sources = [t.contiguous() for t in tensors]
    natives = troika.context().grouped_allgather(
        group, [("%s.%d" % (group, i), s.data_ptr(), 0, 0, dtype_of(s), shape(s))
                for i, s in enumerate(sources)],
        process_set=ps_id, device=device, ready_stream=stream)
    # Each result differentiable as allgather's (autograd.py), decided now (at submission).
    finishers = [autograd.attach(
        lambda n=n, t=t: result_from(n, t.dtype, t.device), t, _allgather_gradient, t.shape,
        process_set) for n, t in zip(natives, tensors)]
    return register(pending(NativeGroup(natives), (tensors, sources),
                            lambda: [f() for f in finishers], key=key))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """The list of every rank's tensors concatenated along dim 0, tensor by tensor."""
    return synchronize(grouped_allgather_async(tensors, name, process_set))


# ----------------------------------------------------------------------------- reducescatter


def grouped_reducescatter_async(tensors, name=None, op=Average,
                                process_set=global_process_set, prescale_factor=1.0,
                                postscale_factor=1.0):
    """Reducescatters each tensor of the list (Average or Sum) as one group; one handle whose
    synchronize() gives the list of this rank's blocks."""
    check_op(op)
    tensors, ps_id, group, key, device, stream = _start_group(
        "grouped_reducescatter", tensors, name, process_set)
    outs = [_reducescatter_output(t, process_set) for t in tensors]
    if not tensors:
        return _empty_group()
    sources = [t.contiguous() for t in tensors]
    natives = troika.context().grouped_reducescatter(
        group, [("%s.%d" % (group, i), s.data_ptr(), o.data_ptr(), nbytes(o),
                 dtype_of(s), shape(s)) for i, (s, o) in enumerate(zip(sources, outs))],
        op=op, prescale=prescale_factor, postscale=postscale_factor, process_set=ps_id,
        device=device, ready_stream=stream)
    finishers = [autograd.attach(lambda o=o: o, t, _reducescatter_gradient, op,
                                 prescale_factor, postscale_factor, process_set)
                 for t, o in zip(tensors, outs)]
    return register(pending(NativeGroup(natives), (tensors, sources, outs),
                            lambda: [f() for f in finishers], device, key))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """The list of this rank's blocks of each tensor reduced across the set."""
    compressed = [compression.compress(t) for t in tensors]
    out = synchronize(grouped_reducescatter_async(
        [c for c, _ in compressed], name, op, process_set, prescale_factor, postscale_factor))
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(out, compressed)]
