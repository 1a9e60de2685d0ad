"""horovod.mxnet's collectives on NDArrays: allreduce(_), grouped_allreduce(_), broadcast(_),
allgather, grouped_allgather, alltoall, reducescatter and grouped_reducescatter, with Horovod's
names, arguments and defaults (0.28.1), and the job's queries.

allreduce, broadcast and reducescatter are pushed onto MXNet's engine (engine.py): they return
at once with their output, which the engine lets nothing read before the operation completed,
and a failure (another rank's shape, a rank that died) is raised by that read as MXNetError,
as Horovod's are; reducescatter returns its result finished, as Horovod's does (a failure:
MXNetError). allgather and alltoall, whose output's shape only the ranks together know, wait for
their input, run, and return the finished result, as Horovod's wait for theirs; their failures
raise TroikaError (HorovodInternalError, a RuntimeError). Where troika.mxnet itself waits, the
rank counts as waiting for the operation (deadlock detection, docs/mxnet.md).

Errors raised at the call, on every rank alike: an input that is no NDArray (TypeError), an
array not on the CPU (NotImplementedError), a process set not added or a broadcast root outside
it (ValueError), op=Adasum (NotImplementedError). Operations are negotiated under Horovod's names, "<kind>.<name>", or a
generated "<kind>.noname.<N>" (the same on every rank).
"""

import ctypes

import mxnet as mx
import numpy as np

import troika
from troika import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                    remove_process_set, init, shutdown, is_initialized, size, local_size,
                    cross_size, rank, local_rank, cross_rank)
from troika._basics import (gloo_built, gloo_enabled, mpi_built, mpi_enabled,  # noqa: F401
                            mpi_threads_supported, nccl_built, cuda_built, rocm_built,
                            ddl_built, ccl_built, start_timeline, stop_timeline)
from troika._ops import (Average, Sum, Adasum, Min, Max, Product,  # noqa: F401
                         process_set_id, reduce_op, reducescatter_rows, root_position)
from troika.mxnet import engine

# MXNet's NDArray dtypes (every one Troika reduces): numpy's, and MXNet's bfloat16, a
# structured dtype of one uint16 field.
BFLOAT16 = np.dtype([("bfloat16", np.uint16)])
_DTYPES = {np.dtype(name): number for name, number in troika.DTYPES.items()
           if name != "bfloat16"}
_DTYPES[BFLOAT16] = troika.DTYPES["bfloat16"]


def _dtype(tensor):
    number = _DTYPES.get(np.dtype(tensor.dtype))
    if number is None:
        raise TypeError("troika.mxnet: arrays of dtype %s are not supported (supported: %s)"
                        % (np.dtype(tensor.dtype),
                           ", ".join(sorted(str(d) for d in _DTYPES))))
    return number


def _device(tensor):
    """(device type, id) of a CPU array; NotImplementedError for a GPU one."""
    ctx = tensor.context
    if ctx.device_typeid == 2:
        raise NotImplementedError(
            "troika.mxnet: an array is on %s; troika.mxnet runs on CPU arrays (its GPU path "
            "is not built: docs/mxnet.md, GPU)" % (ctx,))
    return ctx.device_typeid, ctx.device_id


def _check(tensors):
    """Every array's Troika dtype and one device for all: (dtypes, device)."""
    if not all(isinstance(t, mx.nd.NDArray) for t in tensors):
        raise TypeError("troika.mxnet: operations take mxnet.nd.NDArray, not %s"
                        % ", ".join(sorted({type(t).__name__ for t in tensors})))
    dtypes = [_dtype(t) for t in tensors]
    devices = {_device(t) for t in tensors}
    if len(devices) > 1:
        raise RuntimeError("troika.mxnet: a grouped operation's arrays must be on one device, "
                           "not %s" % sorted(devices))
    return dtypes, devices.pop() if devices else (1, 0)


def _name(kind, name, ps_id):
    if name is None:
        return troika._generated_name(kind, ps_id)
    return "%s.%s" % (kind, name)


def _nbytes(tensor):
    return int(tensor.size) * np.dtype(tensor.dtype).itemsize


def _address(tensor):
    """The address of a (ready) array's data."""
    ptr = ctypes.c_void_p()
    mx.base.check_call(mx.base._LIB.MXNDArrayGetData(tensor.handle, ctypes.byref(ptr)))
    return ptr.value or 0


# ----------------------------------------------------------------------------- allreduce


def _like(tensor):
    return mx.nd.empty(tensor.shape, ctx=tensor.context, dtype=tensor.dtype)


def _allreduce(kind, tensors, in_place, name, op, prescale_factor, postscale_factor,
               process_set, priority):
    """Pushes one allreduce of `tensors` (a group if `kind` is "grouped_allreduce"), into
    themselves or new arrays; returns the outputs."""
    ps_id = process_set_id(process_set)
    dtypes, device = _check(tensors)
    outputs = tensors if in_place else [_like(t) for t in tensors]
    full = _name(kind, name, ps_id)
    if kind == "allreduce":
        entries = [(full, tensors[0], outputs[0], dtypes[0], tensors[0].shape, 0)]
        group = ""
    else:
        entries = [("%s.%d" % (full, i), t, o, d, t.shape, 0)
                   for i, (t, o, d) in enumerate(zip(tensors, outputs, dtypes))]
        group = full
    if entries:
        engine.push(engine.ALLREDUCE, group, entries, op, prescale_factor, postscale_factor,
                    ps_id, 0, priority, device)
    return outputs


def allreduce(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set, op=None):
    """Reduces `tensor` across the ranks (Average by default) into a new array, returned at
    once; the engine holds its readers until the operation completed. `tensor` is unchanged.
    op: Average, Sum, Min, Max, Product; `average` is deprecated (op wins)."""
    return _allreduce("allreduce", [tensor], False, name, reduce_op(op, average),
                      prescale_factor, postscale_factor, process_set, priority)[0]


def allreduce_(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set, op=None):
    """allreduce in place: `tensor` receives the result; returns it."""
    return _allreduce("allreduce", [tensor], True, name, reduce_op(op, average),
                      prescale_factor, postscale_factor, process_set, priority)[0]


def grouped_allreduce(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set, op=None):
    """allreduce of a list of arrays as one group (negotiated and fused together); returns the
    new arrays in order."""
    return _allreduce("grouped_allreduce", list(tensors), False, name, reduce_op(op, average),
                      prescale_factor, postscale_factor, process_set, priority)


def grouped_allreduce_(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set, op=None):
    """grouped_allreduce in place; returns the arrays."""
    return _allreduce("grouped_allreduce", list(tensors), True, name, reduce_op(op, average),
                      prescale_factor, postscale_factor, process_set, priority)


# ----------------------------------------------------------------------------- broadcast


def _broadcast(tensor, in_place, root_rank, name, priority, process_set):
    ps_id = process_set_id(process_set)
    (dtype,), device = _check([tensor])
    root = root_position(root_rank, process_set)
    if not 0 <= root < (process_set.size() if ps_id else size()):
        raise ValueError("broadcast: root_rank %d is not a rank of %r" % (root_rank, process_set))
    output = tensor if in_place else _like(tensor)
    full = _name("broadcast", name, ps_id)
    engine.push(engine.BROADCAST, "", [(full, tensor, output, dtype, tensor.shape, 0)],
                process_set=ps_id, root=root, priority=priority, device=device)
    return output


def broadcast(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """`root_rank`'s `tensor` on every rank, in a new array (returned at once, as allreduce's);
    `tensor` is unchanged."""
    return _broadcast(tensor, False, root_rank, name, priority, process_set)


def broadcast_(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """broadcast in place: every rank's `tensor` receives `root_rank`'s; returns it."""
    return _broadcast(tensor, True, root_rank, name, priority, process_set)


# ----------------------------------------------------------------------------- reducescatter


def _reducescatter(kind, tensors, op, name, priority, process_set, prescale_factor,
                   postscale_factor):
    if op not in (Average, Sum):
        raise NotImplementedError("troika.mxnet: reducescatter reduces with Average or Sum, "
                                  "not %r" % (op,))
    tensors = list(tensors)
    if any(t.shape == () for t in tensors):
        raise ValueError("reducescatter does not support scalar inputs")
    ps_id = process_set_id(process_set)
    dtypes, device = _check(tensors)
    full = _name(kind, name, ps_id)
    members = process_set.ranks if ps_id else list(range(size()))
    position = members.index(rank()) if rank() in members else -1
    outputs, entries = [], []
    for i, (t, d) in enumerate(zip(tensors, dtypes)):
        rows = reducescatter_rows(t.shape[0], len(members), position)
        out = mx.nd.empty((rows,) + tuple(t.shape[1:]), ctx=t.context, dtype=t.dtype)
        outputs.append(out)
        entries.append((full if kind == "reducescatter" else "%s.%d" % (full, i), t, out, d,
                        t.shape, _nbytes(out)))
    if entries:
        engine.push(engine.REDUCESCATTER, "" if kind == "reducescatter" else full, entries, op,
                    prescale_factor, postscale_factor, ps_id, 0, priority, device,
                    caller_waits=True)
    for out in outputs:  # as Horovod's: the result is finished when returned
        out.wait_to_read()
    return outputs


def reducescatter(tensor, op=Average, name=None, priority=0, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` across the ranks (Average or Sum) and returns this rank's share of dim
    0 (the first dim0 % size ranks one row more), finished."""
    return _reducescatter("reducescatter", [tensor], op, name, priority, process_set,
                          prescale_factor, postscale_factor)[0]


def grouped_reducescatter(tensors, op=Average, name=None, priority=0,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """reducescatter of a list of arrays as one group; returns the shares in order."""
    return _reducescatter("grouped_reducescatter", tensors, op, name, priority, process_set,
                          prescale_factor, postscale_factor)


# ----------------------------------------------------------------------------- allgather, alltoall


def _result(handle, like):
    """A new array holding a finished handle's (handle-owned) result."""
    out = mx.nd.empty(tuple(handle.output_shape), ctx=like.context, dtype=like.dtype)
    if out.size:
        handle.copy_output(_address(out), _nbytes(out))
    return out


def _gathered(kind, tensors, name, process_set):
    """Allgathers of `tensors` (a group if `kind` is "grouped_allgather"), once they are
    written; returns the results."""
    tensors = list(tensors)
    ps_id = process_set_id(process_set)
    dtypes, _ = _check(tensors)
    full = _name(kind, name, ps_id)
    for t in tensors:
        t.wait_to_read()
    ctx = troika.context()
    if kind == "allgather":
        handles = [ctx.allgather(full, _address(tensors[0]), dtypes[0], tensors[0].shape,
                                 process_set=ps_id)]
    elif tensors:
        handles = ctx.grouped_allgather(
            full, [("%s.%d" % (full, i), _address(t), 0, 0, d, t.shape)
                   for i, (t, d) in enumerate(zip(tensors, dtypes))], process_set=ps_id)
    else:
        return []
    first = None
    for h in handles:  # every one, before any error: they read our arrays
        try:
            h.wait()
        except troika.TroikaError as e:
            first = first or e
    if first is not None:
        raise first
    return [_result(h, t) for h, t in zip(handles, tensors)]


def allgather(tensor, name=None, priority=0, process_set=global_process_set):
    """Concatenates every rank's `tensor` along dim 0 (which may differ per rank); returns the
    finished result. `priority` is accepted, as Horovod's, and has no effect here."""
    return _gathered("allgather", [tensor], name, process_set)[0]


def grouped_allgather(tensors, name=None, priority=0, process_set=global_process_set):
    """allgather of a list of arrays as one group; returns the results in order."""
    return _gathered("grouped_allgather", tensors, name, process_set)


def alltoall(tensor, splits=None, name=None, priority=0, process_set=global_process_set):
    """Sends splits[j] rows of `tensor` to the set's j-th rank (no splits: dim 0 split evenly)
    and returns what this rank received, finished; with `splits`, also the rows received from
    each rank (an int32 array), as Horovod's."""
    ps_id = process_set_id(process_set)
    (dtype,), _ = _check([tensor])
    with_splits = splits is not None
    if splits is None:
        split_list = []
    else:
        if isinstance(splits, mx.nd.NDArray):
            if np.dtype(splits.dtype) != np.int32:
                raise ValueError("alltoall: splits must be int32, not %s"
                                 % np.dtype(splits.dtype).name)
            splits = splits.asnumpy()
        split_list = [int(s) for s in np.asarray(splits).reshape(-1)]
    full = _name("alltoall", name, ps_id)
    tensor.wait_to_read()
    handle = troika.context().alltoall(full, _address(tensor), dtype, tensor.shape,
                                       split_list, process_set=ps_id)
    handle.wait()
    output = _result(handle, tensor)
    if with_splits:
        return output, mx.nd.array(list(handle.received_splits), dtype="int32")
    return output


# ----------------------------------------------------------------------------- barrier, join


def barrier(process_set=global_process_set):
    """Returns once every rank of `process_set` called it."""
    troika.context().barrier(process_set_id(process_set)).wait()


def join():
    """This rank is out of data: once the engine ran what was pushed, it takes part in the
    other ranks' allreduces with zeros until every rank joined; returns the last rank to join."""
    mx.nd.waitall()
    handle = troika.context().join()
    handle.wait()
    return handle.joined_last_rank
