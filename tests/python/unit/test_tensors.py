"""troika.torch.tensors and troika.torch.compression without a job: dtype numbers, devices,
result targets, the Pending chosen for a device, compression round trips (run_unit_tests.sh,
one process)."""

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
    assert finish() is target


def test_in_place_results_are_written_into_the_output_through_a_copy_if_not_contiguous():
    out = torch.zeros(2, 3)
    target, finish = tensors.result_target(out, out)
    assert target is out and finish() is out
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
