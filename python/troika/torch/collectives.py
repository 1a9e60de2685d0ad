"""horovod.torch's collectives on torch tensors: allreduce, allgather, broadcast, alltoall,
reducescatter (each blocking, ``_async`` with a handle, and in place ``_`` where Horovod has
it), sparse_allreduce_async, barrier and join; and the gradient of each differentiable one
(autograd.py says which, and attaches them).

Tensors are passed to the core by address, dtype and shape (tensors.py); non-contiguous ones
are copied to contiguous ones (in-place operations copy the result back). Errors: an operation
refused at submission raises at the call (a name in flight on this rank: DuplicateNameError;
invalid arguments: InvalidArgumentError; both TroikaErrors and ValueErrors); one that fails
later raises from synchronize() (or the blocking call) as HorovodInternalError (TroikaError).
"""

import torch

import troika
from troika import _troika, global_process_set, rank
from troika._handles import Pending, _names, operation_name, register, synchronize
from troika._ops import (Adasum, Average, Sum, check_op, process_set_id, reduce_op,
                         reducescatter_rows, root_position)
from troika.torch import autograd
from troika.torch.compression import Compression
from troika.torch.tensors import (_DTYPES, device_of, dtype_of, nbytes, new_result, pending,
                                  result_from, result_target, shape)

# ----------------------------------------------------------------------------- allreduce


def _allreduce(tensor, output, name, op, prescale_factor, postscale_factor, process_set,
               wait=False):
    """An allreduce of `tensor` into `output` (None: into a new tensor, differentiable).
    Returns its Pending (allreduce_async registers a handle for it); with `wait`, its result
    once finished: a CPU tensor's is finished on this thread with no Pending (a scheduled
    allreduce runs right here).
    Kept lean: on a machine whose cores the ranks share, each call here is paid many times
    over in the collective's latency (docs/PERFORMANCE.md, the Python layer's cost)."""
    # The common case (the global set, a supported dtype, a CPU tensor, contiguous in place)
    # inline: each call saved is paid 256 times a step in issue 36's many-tensors workload.
    ps_id = 0 if process_set is global_process_set else process_set_id(process_set)
    dt = _DTYPES.get(tensor.dtype)  # before a generated name counts this operation
    if dt is None:
        dt = dtype_of(tensor)  # raises TypeError
    device, stream = (-1, 0) if tensor.is_cpu else device_of(tensor)
    source = tensor.contiguous()
    if output is source:  # in place, contiguous
        target, finish = source, None
    else:
        target, finish = result_target(source, output)  # finish None: the result is target
    full, key = operation_name("allreduce", name, ps_id)
    if output is None and tensor.requires_grad:  # out of place: differentiable (autograd.py)
        finish = autograd.attach(finish or (lambda: target), tensor, _allreduce_gradient, op,
                                 prescale_factor, postscale_factor, process_set)
    # Positional: pybind11 matches keywords by name on every call.
    if wait and device < 0:
        _troika.allreduce_wait(troika.context(), full, source.data_ptr(), target.data_ptr(), dt,
                               source.shape, op, prescale_factor, postscale_factor, ps_id)
        return target if finish is None else finish()
    native = _troika.submit_allreduce(
        troika.context(), full, source.data_ptr(), target.data_ptr(), dt,
        source.shape, op, prescale_factor, postscale_factor, ps_id, device, stream)
    # What the core reads and writes, alive until it finished (`output` is None or `tensor`).
    keep = tensor if source is tensor and target is tensor else (tensor, source, target)
    if device < 0:
        submitted = Pending(native, keep, finish, key, target)
    else:
        submitted = pending(native, keep, finish, device, key, target)
    return submitted.complete() if wait else submitted


def _allreduce_here(tensor, in_place, name, op, prescale_factor, postscale_factor):
    """Horovod's commonest synchronous allreduce, a named one in the global set (a metric, a
    loss, a flag shared each step), run with none of _allreduce's calls (issue 49: each is
    paid several times over in a 4-byte allreduce's latency when ranks share cores): of a
    contiguous host tensor of a supported dtype, with no named operation of this rank
    unsynchronized (the general path checks the name against them), out of place only of a
    tensor that needs no gradient. Returns the result; None, having done nothing, for any
    other call, which the general path then takes. The callers check the name (not None),
    `average` (None) and the process set (the global one)."""
    if _names or op is Adasum or not tensor.is_cpu or not tensor.is_contiguous():
        return None
    dt = _DTYPES.get(tensor.dtype)
    if dt is None:
        return None
    source = tensor.data_ptr()
    if in_place:
        result, target = tensor, source
    elif tensor.requires_grad:
        return None
    else:
        result = result_target(tensor, None)[0]
        target = result.data_ptr()
    _troika.allreduce_wait(troika.context(), "allreduce." + name, source, target, dt,
                           tensor.shape, Average if op is None else op, prescale_factor,
                           postscale_factor, 0)
    return result


def _allreduce_gradient(grad, op, prescale_factor, postscale_factor, process_set):
    """The gradients allreduced with the same op and scales (Horovod's)."""
    return allreduce(grad.contiguous(), op=op, prescale_factor=prescale_factor,
                     postscale_factor=postscale_factor, process_set=process_set)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` across the ranks into a new tensor; returns a handle for poll() and
    synchronize(). `op`: Average (default), Sum, Min, Max, Product."""
    return register(_allreduce(tensor, None, name, reduce_op(op, average), prescale_factor,
                               postscale_factor, process_set))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """allreduce_async in place: `tensor` receives the result."""
    return register(_allreduce(tensor, tensor, name, reduce_op(op, average), prescale_factor,
                               postscale_factor, process_set))


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Returns `tensor` reduced across the ranks (Average by default); `tensor` is unchanged."""
    if (name is not None and average is None and process_set is global_process_set
            and compression is Compression.none):
        result = _allreduce_here(tensor, False, name, op, prescale_factor, postscale_factor)
        if result is not None:
            return result
    op = reduce_op(op, average)
    plain = compression is Compression.none  # no compress/decompress calls
    compressed, ctx = (tensor, None) if plain else compression.compress(tensor)
    reduced = _allreduce(compressed, None, name, op, prescale_factor, postscale_factor,
                         process_set, wait=True)
    return reduced if plain else compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` across the ranks in place and returns it."""
    if (name is not None and average is None and process_set is global_process_set
            and _allreduce_here(tensor, True, name, op, prescale_factor, postscale_factor)
            is not None):
        return tensor
    return _allreduce(tensor, tensor, name, reduce_op(op, average), prescale_factor,
                      postscale_factor, process_set, wait=True)


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduces a sparse COO `tensor` (Average or Sum) as Horovod does: every rank's indices and
    values are allgathered (as "<name>.indices" and "<name>.values"); returns a function that
    waits and gives the sparse result (values divided by the set's size for Average;
    duplicate indices are left uncoalesced, summing wherever the tensor is read)."""
    if op not in (Average, Sum):
        raise NotImplementedError("sparse_allreduce_async reduces with Average or Sum only, "
                                  "not %r" % (op,))
    t = tensor.coalesce()  # itself if already coalesced
    indices = allgather_async(t._indices().t().contiguous(), name="%s.indices" % name,
                              process_set=process_set)
    values = allgather_async(t._values(), name="%s.values" % name, process_set=process_set)

    def result():
        v = synchronize(values)
        i = synchronize(indices)
        if op == Average:
            v = v / process_set.size()
        return torch.sparse_coo_tensor(i.t(), v, t.size())

    return result


# ----------------------------------------------------------------------------- allgather


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's `tensor` along dim 0 (which may differ per rank); returns a
    handle.

    A CPU tensor's result is received straight into a new tensor sized for the usual case,
    every rank's dim 0 equal to this one's (the other ranks' are known only once the operation
    is negotiated): the core writes there when the result fits it exactly or is smaller, and
    otherwise into a buffer of its own (Context::AllgatherInto with
    OpOptions::handle_owned_if_too_small). Only a result of another size is copied into a
    tensor of its size; the user gets torch.empty's memory either way."""
    ps_id = process_set_id(process_set)
    dt = dtype_of(tensor)
    device, stream = device_of(tensor)
    source = tensor.contiguous()
    full, key = operation_name("allgather", name, ps_id)
    dims = shape(source)
    if device < 0 and dims:
        guess = [dims[0] * (troika.size() if ps_id == 0 else process_set.size())] + dims[1:]
        out = new_result(guess, tensor.dtype, tensor.device, written_by_core=True)
        native = troika.context().allgather_into(
            full, source.data_ptr(), out.data_ptr(), nbytes(out), dt, dims, ps_id, device,
            stream, True)
        keep = (tensor, source, out)
        finish = lambda: _gathered(native, out, guess, tensor.dtype, tensor.device)  # noqa: E731
    else:  # GPU, or a 0-d tensor: the result is handle-owned, copied out at synchronize
        native = troika.context().allgather(
            full, source.data_ptr(), dt, dims, process_set=ps_id, device=device,
            ready_stream=stream)
        keep = (tensor, source)
        finish = lambda: result_from(native, tensor.dtype, tensor.device)  # noqa: E731
    return register(pending(native, keep, autograd.attach(
        finish, tensor, _allgather_gradient, tensor.shape, process_set), key=key))


def _gathered(native, out, guess, dtype, device):
    """The result of an allgather received with `out` (shaped `guess`) offered: `out` itself
    when the result is that shape, else a tensor of the result's shape copied from where the
    core wrote it (the front of `out`, or its own buffer)."""
    if native.output_shape == guess:
        return out
    return result_from(native, dtype, device)


def _allgather_gradient(grad, input_shape, process_set):
    """This rank's rows of the gradients averaged across the ranks (Horovod's)."""
    rows = input_shape[0] if len(input_shape) > 0 else 1
    averaged = allreduce(grad.contiguous(), op=Average, process_set=process_set)
    counts = allgather(torch.tensor([rows], dtype=torch.int64), process_set=process_set)
    offset = int(counts[:process_set.rank()].sum().item())
    return averaged.narrow(0, offset, rows)


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's `tensor` concatenated along dim 0, in rank order."""
    return synchronize(allgather_async(tensor, name, process_set))


# ----------------------------------------------------------------------------- broadcast


def _broadcast_async(tensor, output, root_rank, name, process_set):
    ps_id = process_set_id(process_set)
    root = root_position(root_rank, process_set)
    dt = dtype_of(tensor)
    device, stream = device_of(tensor)
    source = tensor.contiguous()
    target, finish = result_target(source, output)
    full, key = operation_name("broadcast", name, ps_id)
    native = troika.context().broadcast(
        full, source.data_ptr(), target.data_ptr(), dt,
        shape(source), root, process_set=ps_id, device=device, ready_stream=stream)
    if output is None and tensor.requires_grad:  # out of place: differentiable (autograd.py)
        finish = autograd.attach(finish or (lambda: target), tensor, _broadcast_gradient,
                                 root_rank, process_set)
    return register(pending(native, (tensor, source, target), finish, device, key, target))


def _broadcast_gradient(grad, root_rank, process_set):
    """The gradients averaged across the ranks on the root, zeros elsewhere (Horovod's)."""
    averaged = allreduce(grad.contiguous(), op=Average, process_set=process_set)
    return averaged if rank() == root_rank else torch.zeros_like(averaged)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Copies root_rank's `tensor` to a new tensor on every rank; returns a handle."""
    return _broadcast_async(tensor, None, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """broadcast_async in place: `tensor` receives root_rank's values."""
    return _broadcast_async(tensor, tensor, root_rank, name, process_set)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's `tensor`, on every rank (a new tensor; `tensor` is unchanged)."""
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites `tensor` with root_rank's and returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ----------------------------------------------------------------------------- alltoall


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends splits[j] rows of `tensor` to the set's j-th rank (even split of dim 0 if None);
    returns a handle whose synchronize() gives (output, received_splits)."""
    ps_id = process_set_id(process_set)
    dt = dtype_of(tensor)
    device, stream = device_of(tensor)
    source = tensor.contiguous()
    if splits is None:
        split_list = []
    elif isinstance(splits, torch.Tensor):
        if splits.dtype not in (torch.int32, torch.int64):
            raise ValueError("alltoall: splits must hold integers (torch.int32, as Horovod's), "
                             "not %s" % splits.dtype)
        split_list = [int(s) for s in splits.tolist()]
    else:
        split_list = [int(s) for s in splits]
    full, key = operation_name("alltoall", name, ps_id)
    native = troika.context().alltoall(
        full, source.data_ptr(), dt, shape(source), split_list,
        process_set=ps_id, device=device, ready_stream=stream)

    # received_splits: like `splits` when that is a tensor (its dtype and device, as Horovod's
    # splits.new()), else int32 on the CPU.
    if isinstance(splits, torch.Tensor):
        splits_dtype, splits_device = splits.dtype, splits.device
    else:
        splits_dtype, splits_device = torch.int32, torch.device("cpu")

    def finish():
        out = result_from(native, tensor.dtype, tensor.device)
        return out, torch.tensor(native.received_splits, dtype=splits_dtype,
                                 device=splits_device)

    return register(pending(native, (tensor, source),
                            autograd.attach(finish, tensor, _alltoall_gradient, process_set),
                            key=key))


def _alltoall_gradient(grad, process_set, received_splits):
    """The reverse alltoall of the gradients: each rank sends back the rows it received."""
    g, _ = alltoall(grad.contiguous(), splits=received_splits, process_set=process_set)
    return g


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """The rows every rank sent this one, in rank order. With `splits`: (output,
    received_splits), the rows received from each rank."""
    output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)


# ----------------------------------------------------------------------------- reducescatter


def _reducescatter_output(tensor, process_set):
    """The tensor that receives this rank's block of a reducescatter of `tensor`."""
    dims = shape(tensor)
    if not dims:
        raise ValueError("reducescatter needs a tensor of at least one dimension")
    rows = reducescatter_rows(dims[0], process_set.size(), process_set.rank())
    return new_result([rows] + dims[1:], tensor.dtype, tensor.device, written_by_core=True)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` across the set (Average or Sum) and scatters dim 0: the set's i-th
    rank receives its block of rows (the first dim0 % n ranks one row more). Returns a handle."""
    ps_id = process_set_id(process_set)
    check_op(op)
    dt = dtype_of(tensor)
    device, stream = device_of(tensor)
    source = tensor.contiguous()
    out = _reducescatter_output(tensor, process_set)
    full, key = operation_name("reducescatter", name, ps_id)
    native = troika.context().reducescatter_into(
        full, source.data_ptr(), out.data_ptr(), nbytes(out),
        dt, shape(source), op=op, prescale=prescale_factor, postscale=postscale_factor,
        process_set=ps_id, device=device, ready_stream=stream)
    return register(pending(native, (tensor, source, out), autograd.attach(
        lambda: out, tensor, _reducescatter_gradient, op, prescale_factor, postscale_factor,
        process_set), device, key))


def _reducescatter_gradient(grad, op, prescale_factor, postscale_factor, process_set):
    """The gradients allgathered, times the set's size for Sum, the prescale and the postscale
    (Horovod's)."""
    for s in (process_set.size() if op == Sum else 1, prescale_factor, postscale_factor):
        if s != 1:  # one at a time, in Horovod's order (so rounding is the same)
            grad = grad * s
    return allgather(grad.contiguous(), process_set=process_set)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """This rank's block of rows of `tensor` reduced across the set (Average or Sum)."""
    compressed, ctx = compression.compress(tensor)
    out = synchronize(reducescatter_async(compressed, name, op, process_set, prescale_factor,
                                          postscale_factor))
    return compression.decompress(out, ctx)


# ----------------------------------------------------------------------------- barrier, join


def barrier(process_set=global_process_set):
    """Returns once every rank of the set reached it."""
    troika.context().barrier(process_set=process_set_id(process_set)).wait()


def join(device=-1):
    """This rank is out of data: until every rank joined, the others' allreduces go on without
    it (it contributes zeros). Blocks until all joined; returns the last rank to join."""
    native = troika.context().join()
    native.wait()
    return native.joined_last_rank
