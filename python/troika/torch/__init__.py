"""``horovod.torch`` on Troika: a Horovod PyTorch script runs by changing its import line to
``import troika.torch as hvd``.

Pure Python over the compiled core (which never links torch): tensors are passed by
``data_ptr()``, dtype and shape. Supported dtypes: uint8, int8, int16, uint16 (where torch has
it), int32, int64, float16, bfloat16, float32, float64 and bool (others raise TypeError). On bool,
Sum and Max are a logical or, Product and Min a logical and; Average and scale factors other
than 1 raise TroikaError (INVALID_ARGUMENT). CPU tensors; CUDA tensors need a Troika built with
its GPU data plane (without it the operation fails with TroikaError FAILED_PRECONDITION).
Non-contiguous tensors are copied to contiguous ones (in-place operations copy the result
back).

Errors: an operation refused at submission raises at the call, as Horovod's do (a name already
in flight on this rank: DuplicateNameError; invalid arguments: InvalidArgumentError; both are
TroikaErrors and ValueErrors); one that fails later raises from synchronize() (or the blocking
call) as HorovodInternalError, i.e. TroikaError. Operations are negotiated under Horovod's
names, "<kind>.<name>" (docs/horovod-compat.md).
"""

import pickle
import threading
import warnings

import torch

import troika as _troika_pkg
from troika import (TroikaError, DuplicateNameError, InvalidArgumentError,  # noqa: F401
                    ProcessSet, global_process_set, add_process_set, remove_process_set, init,
                    is_initialized, size, rank, local_size, local_rank, cross_size, cross_rank)
from troika import _troika
from troika.torch import autograd as _autograd

# Horovod's exception name: `except hvd.HorovodInternalError` keeps working.
HorovodInternalError = TroikaError

# Reduce operations (the core's numbers).
Sum = _troika.SUM
Average = _troika.AVERAGE
Min = _troika.MIN
Max = _troika.MAX
Product = _troika.PRODUCT
# Horovod's Adasum: a name only. Troika has no Adasum reduction; an operation given it raises
# NotImplementedError (a RuntimeError, as Horovod's own refusal is) naming the alternatives.
Adasum = "Adasum"


def _check_op(op):
    """`op` for the core, or NotImplementedError for Adasum."""
    if op is Adasum:
        raise NotImplementedError(
            "troika.torch: op=Adasum is not supported (Troika implements no Adasum reduction; "
            "Horovod itself runs it only with MPI or NCCL builds): use op=Average or op=Sum")
    return op

_DTYPES = {
    torch.uint8: _troika.DTYPES["uint8"],
    torch.int8: _troika.DTYPES["int8"],
    torch.int32: _troika.DTYPES["int32"],
    torch.int64: _troika.DTYPES["int64"],
    torch.float16: _troika.DTYPES["float16"],
    torch.bfloat16: _troika.DTYPES["bfloat16"],
    torch.float32: _troika.DTYPES["float32"],
    torch.float64: _troika.DTYPES["float64"],
    torch.int16: _troika.DTYPES["int16"],
    torch.bool: _troika.DTYPES["bool"],
}
if getattr(torch, "uint16", None) is not None:  # torch >= 2.3
    _DTYPES[torch.uint16] = _troika.DTYPES["uint16"]


def shutdown():
    """Leaves the job; pending operations fail."""
    with _handles_lock:
        _handles.clear()
        _named.clear()
    _troika_pkg.shutdown()


class Compression:
    """Gradient compression for allreduce (as horovod.torch.Compression): ``none``, ``fp16``
    (floating tensors travel as float16) and ``bf16`` (as bfloat16)."""

    class none:
        @staticmethod
        def compress(tensor):
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor

    class _Cast:
        wire = None

        @classmethod
        def compress(cls, tensor):
            if tensor.dtype.is_floating_point and tensor.dtype != cls.wire:
                return tensor.to(cls.wire), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor if ctx is None else tensor.to(ctx)

    class fp16(_Cast):
        wire = torch.float16

    class bf16(_Cast):
        wire = torch.bfloat16


# Operations in flight: handle number -> _Pending. Keeps the tensors the core reads and writes
# alive until synchronize().
_handles = {}
# The (process set id, name) of every named operation with a handle not yet synchronized: a
# second submission of one raises at once, however soon the first completed (Horovod's window,
# its cycle, is wide enough that its users and tests count on this; the core alone frees a name
# when the operation completes).
_named = set()
_handles_lock = threading.Lock()
_next_handle = 0


class _Pending:
    __slots__ = ("native", "keep", "finish", "stream_device", "key")

    def __init__(self, native, keep, finish, stream_device, key=None):
        self.native = native
        self.keep = keep  # the tensors the operation reads and writes, alive until synchronize
        self.finish = finish  # () -> the operation's result, after a successful wait
        # The CUDA device whose current stream synchronize() orders after the operation, for
        # results written into the caller's (or our) device tensors; -1: wait on the CPU.
        self.stream_device = stream_device
        self.key = key  # (process set id, name) of a named operation, held until synchronize


def _add(pending):
    """A handle (for poll and synchronize) to the _Pending operation."""
    global _next_handle
    with _handles_lock:
        _next_handle += 1
        h = _next_handle
        _handles[h] = pending
        if pending.key is not None:
            _named.add(pending.key)
    return h


def _register(native, keep, finish, stream_device=-1, key=None):
    return _add(_Pending(native, keep, finish, stream_device, key))


def _dtype(tensor):
    try:
        return _DTYPES[tensor.dtype]
    except KeyError:
        raise TypeError(
            "troika.torch: tensors of dtype %s are not supported by Troika (supported: %s)"
            % (tensor.dtype, ", ".join(str(d).replace("torch.", "") for d in _DTYPES))
        ) from None


# CUDA's cudaStreamLegacy: the legacy default stream, named explicitly. torch's default stream
# has the address 0, which the core reads as "no stream" (the inputs ready at submission).
_CUDA_STREAM_LEGACY = 1


def _stream_address(stream):
    """The address of a torch.cuda.Stream for the core, the default stream's included."""
    return stream.cuda_stream or _CUDA_STREAM_LEGACY


def _device(tensor):
    """(device ordinal, ready stream address) of a tensor: (-1, 0) on the CPU."""
    if tensor.is_cpu:  # a flag: cheaper than building tensor.device
        return -1, 0
    dev = tensor.device
    if dev.type == "cuda":
        # The producer is the current stream; the core orders its work after it.
        return dev.index, _stream_address(torch.cuda.current_stream(dev))
    raise TypeError("troika.torch: tensors on %s are not supported (CPU or CUDA)" % dev)


def _ps_id(process_set):
    if not isinstance(process_set, ProcessSet):
        raise TypeError("process_set must be a ProcessSet (hvd.add_process_set), not %r"
                        % (process_set,))
    return process_set._id()


def _name(kind, name, ps_id):
    """(negotiated name, key): the name an operation is negotiated under, as Horovod's,
    "<kind>.<name>", or a generated "<kind>.noname.<N>" for an unnamed one; the key, for a named
    one, holds the name until synchronize() (_Pending.key). DuplicateNameError if an operation
    of that name is still unsynchronized here."""
    if name is None:
        return _troika_pkg._generated_name(kind, ps_id), None
    full = kind + "." + name
    key = (ps_id, full)
    if key in _named:
        message = ("'%s' is already in flight on this rank (its handle is not synchronized); "
                   "synchronize it first" % full)
        err = DuplicateNameError("ALREADY_EXISTS: " + message)
        err.code, err.message, err.membership_change = "ALREADY_EXISTS", message, None
        raise err
    return full, key


def _shape(tensor):
    return list(tensor.shape)


def _nbytes(tensor):
    return tensor.numel() * tensor.element_size()


def _op(op, average):
    """Horovod's rule: `op` wins, the deprecated `average` maps to Average/Sum, and the default
    is Average."""
    if average is None:
        return Average if op is None else _check_op(op)
    if op is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                  DeprecationWarning)
    return Average if average else Sum


class _DeviceBytes:
    """Device memory of `nbytes` at `address`, as torch.as_tensor reads it (zero copy)."""

    def __init__(self, address, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (address, False), "version": 2}


def _result_from(native, dtype, device):
    """A new tensor holding a handle-owned result (allgather, alltoall), after a CPU wait.
    On a GPU the result is copied on the current stream, which is then synchronised: the
    handle's buffer is reused once the handle is gone."""
    out = torch.empty(native.output_shape, dtype=dtype, device=device)
    if device.type != "cuda":
        native.copy_output(out.data_ptr(), _nbytes(out))
    elif out.numel() > 0:
        result = torch.as_tensor(_DeviceBytes(native.output_address, native.output_bytes),
                                 device=device)
        out.view(-1).view(torch.uint8).copy_(result)
        torch.cuda.current_stream(device).synchronize()
    return out


def poll(handle):
    """True once the operation of `handle` finished; synchronize() then returns at once.
    ValueError for a handle never returned or already synchronized, as Horovod's."""
    with _handles_lock:
        pending = _handles.get(handle)
    if pending is None:
        raise ValueError("poll: handle %r was not created or has been cleared" % (handle,))
    return pending.native.poll()


def _complete(pending):
    """Waits for a _Pending operation and returns its result."""
    if pending.stream_device >= 0:
        # GPU: the CPU waits only until the operation is issued; the current stream waits
        # for its completion on the device (a failure after issue surfaces in later ops).
        stream = torch.cuda.current_stream(pending.stream_device)
        pending.native.wait_on_stream(_stream_address(stream))
    else:
        pending.native.wait()
    return pending.finish()


def synchronize(handle):
    """Waits for the operation of `handle` and returns its result (a tensor; for alltoall a
    tuple (output, received_splits)). Raises HorovodInternalError (TroikaError) if it failed."""
    with _handles_lock:
        pending = _handles.get(handle)
    if pending is None:
        return None
    try:
        return _complete(pending)
    finally:
        with _handles_lock:
            _handles.pop(handle, None)
            _named.discard(pending.key)


# ----------------------------------------------------------------------------- allreduce


def _allreduce(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    """Submits an allreduce; returns its _Pending (no handle: allreduce_async adds one)."""
    ps_id = _ps_id(process_set)
    dt = _dtype(tensor)
    device, stream = _device(tensor)
    source = tensor.contiguous()
    if output is None:  # out of place
        target = torch.empty_like(source, memory_format=torch.contiguous_format)
        finish = lambda: target  # noqa: E731
    elif output.is_contiguous():  # in place
        target = output
        finish = lambda: output  # noqa: E731
    else:  # in place on a non-contiguous tensor: through a contiguous copy
        target = source
        finish = lambda: output.copy_(target)  # noqa: E731
    full, key = _name("allreduce", name, ps_id)
    # Positional: pybind11 matches keywords by name on every call.
    native = _troika_pkg.context().allreduce(
        full, source.data_ptr(), target.data_ptr(), dt,
        source.shape, op, prescale_factor, postscale_factor, ps_id, device, stream)
    if output is None:  # out of place: differentiable (autograd.py)
        finish = _autograd.attach(finish, tensor, _autograd.Allreduce, op, prescale_factor,
                                  postscale_factor, process_set)
    return _Pending(native, (tensor, source, target, output), finish, device, key)


def _allreduce_now(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    """allreduce/allreduce_ of a CPU tensor: finished on this thread before it returns (a
    scheduled allreduce runs right here), with no handle. Returns the result: `output`, or a
    new (differentiable) tensor if `output` is None.
    Kept lean: on a machine whose cores the ranks share, each call here is paid many times
    over in the collective's latency (docs/PERFORMANCE.md, the Python layer's cost)."""
    ps_id = 0 if process_set is global_process_set else _ps_id(process_set)
    dt = _dtype(tensor)  # before a generated name counts this operation
    source = tensor.contiguous()
    if output is None:
        target = torch.empty_like(source)  # contiguous, as source
    else:  # in place, through a contiguous copy if `output` is not contiguous
        target = output if output.is_contiguous() else source
    _troika_pkg.context().allreduce_wait(
        _name("allreduce", name, ps_id)[0],
        source.data_ptr(), target.data_ptr(), dt, source.shape, op,
        prescale_factor, postscale_factor, ps_id)
    if output is None:
        if tensor.requires_grad and torch.is_grad_enabled():  # as _autograd.attach checks
            return _autograd.attach(lambda: target, tensor, _autograd.Allreduce, op,
                                    prescale_factor, postscale_factor, process_set)()
        return target
    return output if target is output else output.copy_(target)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` across the ranks into a new tensor; returns a handle for poll() and
    synchronize(). `op`: Average (default), Sum, Min, Max, Product."""
    return _add(_allreduce(tensor, None, name, _op(op, average), prescale_factor,
                           postscale_factor, process_set))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """allreduce_async in place: `tensor` receives the result."""
    return _add(_allreduce(tensor, tensor, name, _op(op, average), prescale_factor,
                           postscale_factor, process_set))


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Returns `tensor` reduced across the ranks (Average by default); `tensor` is unchanged."""
    op = _op(op, average)
    plain = compression is Compression.none  # no compress/decompress calls
    compressed, ctx = (tensor, None) if plain else compression.compress(tensor)
    if compressed.is_cpu:
        reduced = _allreduce_now(compressed, None, name, op, prescale_factor, postscale_factor,
                                 process_set)
    else:
        reduced = _complete(_allreduce(compressed, None, name, op, prescale_factor,
                                       postscale_factor, process_set))
    return reduced if plain else compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` across the ranks in place and returns it."""
    op = _op(op, average)
    if tensor.is_cpu:
        return _allreduce_now(tensor, tensor, name, op, prescale_factor, postscale_factor,
                              process_set)
    return _complete(_allreduce(tensor, tensor, name, op, prescale_factor, postscale_factor,
                                process_set))


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
    handle."""
    ps_id = _ps_id(process_set)
    dt = _dtype(tensor)
    device, stream = _device(tensor)
    source = tensor.contiguous()
    full, key = _name("allgather", name, ps_id)
    native = _troika_pkg.context().allgather(
        full, source.data_ptr(), dt, _shape(source),
        process_set=ps_id, device=device, ready_stream=stream)
    return _register(native, (tensor, source), _autograd.attach(
        lambda: _result_from(native, tensor.dtype, tensor.device), tensor, _autograd.Allgather,
        process_set), key=key)


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's `tensor` concatenated along dim 0, in rank order."""
    return synchronize(allgather_async(tensor, name, process_set))


# ----------------------------------------------------------------------------- broadcast


def _root_position(root_rank, process_set):
    """Horovod's root_rank is a rank of the job; the core wants its position in the set."""
    if process_set.process_set_id == 0:
        return int(root_rank)
    try:
        return process_set.ranks.index(int(root_rank))
    except ValueError:
        raise ValueError("root_rank %d is not in %r" % (root_rank, process_set)) from None


def _broadcast_async(tensor, output, root_rank, name, process_set):
    ps_id = _ps_id(process_set)
    root = _root_position(root_rank, process_set)
    dt = _dtype(tensor)
    device, stream = _device(tensor)
    source = tensor.contiguous()
    if output is None:
        target = torch.empty_like(source, memory_format=torch.contiguous_format)
        finish = lambda: target  # noqa: E731
    elif output.is_contiguous():
        target = output
        finish = lambda: output  # noqa: E731
    else:
        target = source
        finish = lambda: output.copy_(target)  # noqa: E731
    full, key = _name("broadcast", name, ps_id)
    native = _troika_pkg.context().broadcast(
        full, source.data_ptr(), target.data_ptr(), dt,
        _shape(source), root, process_set=ps_id, device=device, ready_stream=stream)
    if output is None:  # out of place: differentiable (autograd.py)
        finish = _autograd.attach(finish, tensor, _autograd.Broadcast, root_rank, process_set)
    return _register(native, (tensor, source, target, output), finish, device, key)


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
    ps_id = _ps_id(process_set)
    dt = _dtype(tensor)
    device, stream = _device(tensor)
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
    full, key = _name("alltoall", name, ps_id)
    native = _troika_pkg.context().alltoall(
        full, source.data_ptr(), dt, _shape(source), split_list,
        process_set=ps_id, device=device, ready_stream=stream)

    def finish():
        out = _result_from(native, tensor.dtype, tensor.device)
        return out, torch.tensor(native.received_splits, dtype=torch.int32)

    return _register(native, (tensor, source),
                     _autograd.attach(finish, tensor, _autograd.Alltoall, process_set), key=key)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """The rows every rank sent this one, in rank order. With `splits`: (output,
    received_splits), the rows received from each rank."""
    output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return output if splits is None else (output, received)


# ----------------------------------------------------------------------------- reducescatter


def _reducescatter_output(tensor, process_set):
    """The tensor that receives this rank's block of a reducescatter of `tensor`: dim 0
    divided among the set's ranks, the first dim0 % n ranks one row more."""
    shape = _shape(tensor)
    if not shape:
        raise ValueError("reducescatter needs a tensor of at least one dimension")
    n = process_set.size()
    pos = process_set.rank()
    rows = shape[0] // n + (1 if 0 <= pos < shape[0] % n else 0) if n > 0 else 0
    return torch.empty([rows] + shape[1:], dtype=tensor.dtype, device=tensor.device)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` across the set (Average or Sum) and scatters dim 0: the set's i-th
    rank receives its block of rows (the first dim0 % n ranks one row more). Returns a handle."""
    ps_id = _ps_id(process_set)
    _check_op(op)
    dt = _dtype(tensor)
    device, stream = _device(tensor)
    source = tensor.contiguous()
    shape = _shape(source)
    out = _reducescatter_output(tensor, process_set)
    full, key = _name("reducescatter", name, ps_id)
    native = _troika_pkg.context().reducescatter_into(
        full, source.data_ptr(), out.data_ptr(), _nbytes(out),
        dt, shape, op=op, prescale=prescale_factor, postscale=postscale_factor,
        process_set=ps_id, device=device, ready_stream=stream)
    return _register(native, (tensor, source, out), _autograd.attach(
        lambda: out, tensor, _autograd.Reducescatter, op, prescale_factor, postscale_factor,
        process_set), device, key)


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
    _troika_pkg.context().barrier(process_set=_ps_id(process_set)).wait()


def join(device=-1):
    """This rank is out of data: until every rank joined, the others' allreduces go on without
    it (it contributes zeros). Blocks until all joined; returns the last rank to join."""
    native = _troika_pkg.context().join()
    native.wait()
    return native.joined_last_rank


# ----------------------------------------------------------------------------- helpers


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites every rank's parameters with root_rank's: `params` is a model's
    state_dict() or named_parameters() (or a list of tensors)."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        items = list(params)
    handles = []
    for name, p in items:
        if not isinstance(p, torch.Tensor):
            raise ValueError("broadcast_parameters: %s is not a tensor" % (name,))
        with torch.no_grad():
            handles.append(broadcast_async_(p.data if p.requires_grad else p, root_rank,
                                            name=None if name is None else
                                            "broadcast_parameters." + name,
                                            process_set=process_set))
    for h in handles:
        synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's `obj` (pickled), on every rank. Negotiated as "<name>.size" and
    "<name>.data" (default name "broadcast_object": unlike Horovod's default, the type name of
    `obj`, it is the same on every rank whatever the others pass, e.g. None)."""
    base = name if name is not None else "broadcast_object"
    if rank() == root_rank:
        payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        payload = None
        length = torch.zeros(1, dtype=torch.int64)
    broadcast_(length, root_rank, name=base + ".size", process_set=process_set)
    if payload is None:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name=base + ".data", process_set=process_set)
    return obj if rank() == root_rank else pickle.loads(payload.numpy().tobytes())


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Makes every rank's optimizer state (hyperparameters and per-parameter state) root_rank's.

    As Horovod's: an optimizer with no state yet has it made first (a zero gradient for every
    parameter that needs one — sparse for SparseAdam, and for SGD on the sparse embeddings of
    `model` — then one step of the wrapped optimizer, without allreduce), so every parameter
    needing a gradient has one afterwards. Unlike Horovod's, that step leaves the parameters as
    they were (weight decay would move them off root_rank's). LBFGS raises ValueError."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state_dict()["state"]:
        _initialize_optimizer_state(optimizer, model)
    state = broadcast_object(optimizer.state_dict() if rank() == root_rank else None,
                             root_rank, process_set=process_set)
    if rank() != root_rank:
        optimizer.load_state_dict(state)


def _initialize_optimizer_state(optimizer, model):
    sparse = set()
    if model is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding) and m.sparse:
                sparse.update(id(p) for p in m.parameters())
    params = [p for group in optimizer.param_groups for p in group["params"]
              if p.requires_grad]
    for p in params:
        p.grad = torch.zeros_like(p)
        if isinstance(optimizer, torch.optim.SparseAdam) or (
                isinstance(optimizer, torch.optim.SGD) and id(p) in sparse):
            p.grad = p.grad.to_sparse()
    saved = [p.detach().clone() for p in params]
    # The wrapped optimizer's own step: DistributedOptimizer.step would allreduce, which every
    # rank would have to do at once.
    if isinstance(optimizer, _optimizer._DistributedMixin):
        super(_optimizer._DistributedMixin, optimizer).step()
    else:
        optimizer.step()
    with torch.no_grad():
        for p, before in zip(params, saved):
            p.copy_(before)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's `obj` (pickled), as a list in rank order. Negotiated as "<name>.sizes" and
    "<name>.data" (default name "allgather_object": named, as Horovod's are, so that it matches
    across ranks whatever unnamed operations one rank ran alone before; Horovod's default is
    the type name of `obj`, which must then be the same on every rank)."""
    base = name if name is not None else "allgather_object"
    data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    sizes = allgather(torch.tensor([data.numel()], dtype=torch.int64), name=base + ".sizes",
                      process_set=process_set)
    gathered = allgather(data, name=base + ".data", process_set=process_set)
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(gathered[offset:offset + n].numpy().tobytes()))
        offset += n
    return out


# Build and feature queries, timeline calls (basics.py).
from troika.torch.basics import (  # noqa: E402,F401
    gloo_built, gloo_enabled, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
    cuda_built, rocm_built, ddl_built, ccl_built, start_timeline, stop_timeline,
    TimelineNotAvailable)
from troika import is_homogeneous  # noqa: E402,F401


from troika.torch import optimizer as _optimizer  # noqa: E402
from troika.torch.optimizer import DistributedOptimizer  # noqa: E402,F401
from troika.torch.sync_batch_norm import SyncBatchNorm  # noqa: E402,F401
from troika.torch.grouped import (grouped_allreduce, grouped_allreduce_async,  # noqa: E402,F401
                                  grouped_allreduce_, grouped_allreduce_async_,
                                  grouped_allgather, grouped_allgather_async,
                                  grouped_reducescatter, grouped_reducescatter_async)


# hvd.elastic: horovod.torch.elastic (imported last: it uses this module).
from troika.torch import elastic  # noqa: E402,F401
