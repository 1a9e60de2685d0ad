"""torch tensors as the compiled core takes them: dtype numbers, addresses, shapes, the device
and the stream a tensor is ready on; the results the core writes, into the caller's tensors or
copied out of a handle; and waiting for a GPU result on the caller's stream.

Supported dtypes: uint8, int8, int16, uint16 (where torch has it), int32, int64, float16,
bfloat16, float32, float64 and bool (others raise TypeError). CPU and CUDA tensors.
"""

import torch

from troika import _troika
from troika._handles import Pending

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

# Host results of at least this many bytes are allocated with huge pages advised, and those
# the core writes during the collective mapped before it starts (_fresh). glibc, torch's
# allocator underneath, serves an allocation this large (its largest mmap threshold) with a
# mapping of its own, unmapped when freed: every such result is fresh memory, which the kernel
# maps one 4 KiB page fault at a time as it is written; a receive that faults holds up the
# transfer on every rank after it. At 64 MiB, 4 ranks on 2 cores, that cost more than the
# collective (docs/PERFORMANCE.md, issue 36). Smaller allocations come from glibc's heap, warm
# once used.
HUGE_PAGE_RESULT_BYTES = 32 << 20
# The fewest elements a tensor of that many bytes can have (8-byte elements): below it, one
# cheap test skips the rest (an allreduce of one float pays for every call here).
_HUGE_PAGE_MIN_ELEMENTS = HUGE_PAGE_RESULT_BYTES // 8

# CUDA's cudaStreamLegacy: the legacy default stream, named explicitly. torch's default stream
# has the address 0, which the core reads as "no stream" (the inputs ready at submission).
_CUDA_STREAM_LEGACY = 1


def dtype_of(tensor):
    """The core's dtype number of a tensor; TypeError for a dtype Troika does not support."""
    try:
        return _DTYPES[tensor.dtype]
    except KeyError:
        raise TypeError(
            "troika.torch: tensors of dtype %s are not supported by Troika (supported: %s)"
            % (tensor.dtype, ", ".join(str(d).replace("torch.", "") for d in _DTYPES))
        ) from None


def stream_address(stream):
    """The address of a torch.cuda.Stream for the core, the default stream's included."""
    return stream.cuda_stream or _CUDA_STREAM_LEGACY


def device_of(tensor):
    """(device ordinal, ready stream address) of a tensor: (-1, 0) on the CPU."""
    if tensor.is_cpu:  # a flag: cheaper than building tensor.device
        return -1, 0
    dev = tensor.device
    if dev.type == "cuda":
        # The producer is the current stream; the core orders its work after it.
        return dev.index, _stream_address_of(dev)
    raise TypeError("troika.torch: tensors on %s are not supported (CPU or CUDA)" % dev)


def _stream_address_of(device):
    return stream_address(torch.cuda.current_stream(device))


def shape(tensor):
    return list(tensor.shape)


def nbytes(tensor):
    return tensor.numel() * tensor.element_size()


def _fresh(out, populate):
    """`out`, just allocated and not yet written: if it is a large host tensor
    (HUGE_PAGE_RESULT_BYTES), with huge pages advised, and with `populate` (the core writes it
    during the collective) mapped now. torch's memory all the same (resizable, freed by
    torch)."""
    if out.is_cpu:
        size = out.numel() * out.element_size()
        if size >= HUGE_PAGE_RESULT_BYTES:
            _troika.advise_fresh_buffer(out.data_ptr(), size, populate)
    return out


def new_result(shape, dtype, device, written_by_core=False):
    """A new contiguous tensor (torch.empty's) for a result written whole: by the core during
    the collective (`written_by_core`), or by a copy once it finished."""
    return _fresh(torch.empty(shape, dtype=dtype, device=device), written_by_core)


def result_target(source, output):
    """(target, finish) of an operation that writes a result the shape of `source` (contiguous):
    `target` receives the core's output and `finish()` gives the result, or finish is None when
    the result is `target` itself. Out of place (`output` None): a new contiguous tensor. In
    place: `output` itself, or, if it is not contiguous, `source` (its contiguous copy), copied
    back into `output` by finish()."""
    if output is None:
        target = torch.empty_like(source)  # contiguous as `source` is (cheaper than asking)
        if source.numel() >= _HUGE_PAGE_MIN_ELEMENTS:
            _fresh(target, True)
        return target, None
    if output is source or output.is_contiguous():  # source is output.contiguous(), or a copy
        return output, None
    return source, lambda: output.copy_(source)


class DevicePending(Pending):
    """A Pending whose result the core writes on a GPU: synchronize() makes the current CUDA
    stream of `device` wait for it, and the CPU waits only until the operation is issued (a
    failure after issue surfaces in later operations)."""

    __slots__ = ("device",)

    def __init__(self, native, keep, finish, device, key=None, result=None):
        super().__init__(native, keep, finish, key, result)
        self.device = device

    def wait(self):
        self.native.wait_on_stream(_stream_address_of(self.device))


def pending(native, keep, finish, device=-1, key=None, result=None):
    """The Pending of a submitted operation: waited for on the CPU, or with `device` >= 0 on
    that device's current stream at synchronize()."""
    if device >= 0:
        return DevicePending(native, keep, finish, device, key, result)
    return Pending(native, keep, finish, key, result)


class _DeviceBytes:
    """Device memory of `nbytes` at `address`, as torch.as_tensor reads it (zero copy)."""

    def __init__(self, address, nbytes):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (address, False), "version": 2}


def result_from(native, dtype, device):
    """A new tensor holding a handle-owned result (allgather, alltoall), after a CPU wait.
    On a GPU the result is copied on the current stream, which is then synchronised: the
    handle's buffer is reused once the handle is gone."""
    out = new_result(native.output_shape, dtype, device)
    if device.type != "cuda":
        native.copy_output(out.data_ptr(), nbytes(out))
    elif out.numel() > 0:
        result = torch.as_tensor(_DeviceBytes(native.output_address, native.output_bytes),
                                 device=device)
        out.view(-1).view(torch.uint8).copy_(result)
        torch.cuda.current_stream(device).synchronize()
    return out
