"""troika.torch.tensors and troika.torch.compression without a job: dtype numbers, devices,
result targets, the Pending chosen for a device, compression round trips (run_unit_tests.sh,
one process)."""

import os

import pytest
import torch

from troika import _troika
from troika._handles import Pending
from troika.torch import tensors
from troika.torch.compression import Compression

SUPPORTED = ["uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
             "float64", "bool"] + (["uint16"] if getattr(torch, "uint16", None) else [])


@pytest.mark.parametrize("name", SUPPORTED)
def test_every_supported_dtype_has_the_cores_number(name):
    assert tensors.dtype_of(torch.zeros(1, dtype=getattr(torch, name))) == _troika.DTYPES[name]


def test_an_unsupported_dtype_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="complex64 are not supported.*float32"):
        tensors.dtype_of(torch.zeros(1, dtype=torch.complex64))


def test_cpu_tensors_have_no_device_and_other_devices_are_refused():
    assert tensors.device_of(torch.zeros(2)) == (-1, 0)
    with pytest.raises(TypeError, match="meta"):
        tensors.device_of(torch.zeros(2, device="meta"))


def test_shape_and_bytes():
    t = torch.zeros(3, 5, dtype=torch.float16)
    assert tensors.shape(t) == [3, 5]
    assert tensors.nbytes(t) == 30
    assert tensors.shape(torch.tensor(1.0)) == []


def test_out_of_place_results_are_new_contiguous_tensors():
    source = torch.arange(6.0).reshape(2, 3)
    target, finish = tensors.result_target(source, None)
    assert target is not source and target.is_contiguous()
    assert (target.shape, target.dtype) == (source.shape, source.dtype)
    assert finish is None  # the result is the target itself


def mapping(address):
    """The /proc/self/smaps fields of the mapping of this process that holds `address`:
    {"VmFlags": [...], "Rss": kB, ...}."""
    fields, inside = {}, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                if inside:
                    break
                begin, end = (int(x, 16) for x in head.split("-"))
                inside = begin <= address < end
            elif inside:
                values = line.split()[1:]
                fields[head[:-1]] = values if head == "VmFlags:" else int(values[0])
    assert fields, "no mapping holds %#x" % address
    return fields


def populates():
    """MADV_POPULATE_WRITE: Linux 5.14 and later."""
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    return (major, minor) >= (5, 14)


@pytest.mark.skipif(not os.path.exists("/sys/kernel/mm/transparent_hugepage/enabled"),
                    reason="no transparent huge pages in this kernel")
def test_large_host_results_are_torch_tensors_with_huge_pages_advised():
    big = torch.zeros(tensors.HUGE_PAGE_RESULT_BYTES // 4)
    assert "hg" not in mapping(big.data_ptr())["VmFlags"]
    # Out of place, written by the core during the collective: advised and mapped at once.
    target, finish = tensors.result_target(big, None)
    assert finish is None and target.is_contiguous() and target.shape == big.shape
    size_kb = tensors.nbytes(target) // 1024
    fields = mapping(target.data_ptr() + tensors.nbytes(target) // 2)
    assert "hg" in fields["VmFlags"]
    if populates():
        assert fields["Rss"] >= size_kb - 4
    target.resize_(target.numel() + 1)  # torch's own memory: resizable as any tensor
    # Copied into once the collective finished: advised, mapped by the copy.
    gathered = tensors.new_result([3, 2 << 20], torch.float64, torch.device("cpu"))
    assert (gathered.shape, gathered.dtype) == (torch.Size([3, 2 << 20]), torch.float64)
    fields = mapping(gathered.data_ptr() + tensors.nbytes(gathered) // 2)
    assert "hg" in fields["VmFlags"] and fields["Rss"] < size_kb // 2
    small, _ = tensors.result_target(torch.zeros(1 << 20), None)  # from glibc's heap: left be
    assert "hg" not in mapping(small.data_ptr())["VmFlags"]
    assert _troika.advise_fresh_buffer(0, 1 << 30) is False  # no buffer, no advice
    assert _troika.advise_fresh_buffer(big.data_ptr() + 1, 100, True) is False  # no whole page


def test_in_place_results_are_written_into_the_output_through_a_copy_if_not_contiguous():
    out = torch.zeros(2, 3)
    target, finish = tensors.result_target(out, out)
    assert target is out and finish is None
    strided = torch.zeros(3, 2).t()
    source = strided.contiguous()
    target, finish = tensors.result_target(source, strided)
    assert target is source
    source.copy_(torch.arange(6.0).reshape(2, 3))  # what the core writes
    assert finish() is strided
    assert torch.equal(strided, torch.arange(6.0).reshape(2, 3))


def test_only_device_results_wait_on_a_stream():
    cpu = tensors.pending("native", (), lambda: None)
    assert type(cpu) is Pending
    gpu = tensors.pending("native", (), lambda: None, device=0, key=(0, "x"))
    assert isinstance(gpu, tensors.DevicePending)
    assert (gpu.device, gpu.key) == (0, (0, "x"))


@pytest.mark.parametrize("compression,wire", [(Compression.fp16, torch.float16),
                                              (Compression.bf16, torch.bfloat16)])
def test_compression_casts_floating_tensors_and_back(compression, wire):
    x = torch.tensor([1.5, -2.0], dtype=torch.float64)
    sent, ctx = compression.compress(x)
    assert sent.dtype == wire
    back = compression.decompress(sent, ctx)
    assert back.dtype == torch.float64 and torch.equal(back, x)
    ints = torch.tensor([1, 2])
    sent, ctx = compression.compress(ints)
    assert sent is ints and compression.decompress(sent, ctx) is ints
    already = torch.zeros(2, dtype=wire)
    assert compression.compress(already)[0] is already


def test_no_compression_passes_tensors_through():
    x = torch.ones(3)
    sent, ctx = Compression.none.compress(x)
    assert sent is x and Compression.none.decompress(sent, ctx) is x
