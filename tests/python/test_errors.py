"""Errors: a mismatch between ranks raises the same TroikaError on every rank and the job goes
on; dtypes and devices the runtime lacks are refused before anything is submitted."""

import pytest
import torch

import troika
import troika.torch as hvd
from conftest import assert_equal


def test_error_class():
    assert issubclass(troika.TroikaError, RuntimeError)
    assert hvd.HorovodInternalError is troika.TroikaError
    assert hvd.TroikaError is troika.TroikaError


def same_on_every_rank(text):
    texts = hvd.allgather_object(text)
    assert texts == [texts[0]] * hvd.size(), texts


def expect_error_everywhere(fn):
    with pytest.raises(troika.TroikaError) as e:
        fn()
    err = e.value
    assert str(err) == "%s: %s" % (err.code, err.message)
    assert err.message
    same_on_every_rank(str(err))
    # The job goes on.
    assert_equal(hvd.allreduce(torch.ones(3), op=hvd.Sum), torch.full([3], float(hvd.size())))
    return err


def test_mismatched_allreduce_shape():
    err = expect_error_everywhere(
        lambda: hvd.allreduce(torch.ones(hvd.rank() + 2), name="mismatch.shape"))
    assert "mismatch.shape" in err.message


def test_mismatched_allreduce_dtype():
    dtype = torch.float32 if hvd.rank() == 0 else torch.float64
    expect_error_everywhere(
        lambda: hvd.allreduce(torch.ones(4, dtype=dtype), name="mismatch.dtype"))


def test_mismatched_allgather_trailing_dims():
    expect_error_everywhere(
        lambda: hvd.allgather(torch.ones(2, hvd.rank() + 1), name="mismatch.allgather"))


def test_mismatched_broadcast_shape():
    expect_error_everywhere(
        lambda: hvd.broadcast(torch.ones(hvd.rank() + 1), 0, name="mismatch.broadcast"))


def test_mismatched_unnamed_shape_then_unnamed_ops_go_on():
    # Generated names stay in step across ranks after a failure.
    expect_error_everywhere(lambda: hvd.allreduce(torch.ones(hvd.rank() + 3)))
    assert_equal(hvd.allgather(torch.ones(1)), torch.ones(hvd.size()))


# int16, uint16 and bool are supported now (test_collectives.py); complex numbers are not.
UNSUPPORTED = [torch.complex64, torch.complex128]


@pytest.mark.parametrize("dtype", UNSUPPORTED, ids=str)
def test_unsupported_dtype_is_a_type_error(dtype):
    t = torch.zeros(3, dtype=dtype)
    for call in (lambda: hvd.allreduce(t), lambda: hvd.allgather(t),
                 lambda: hvd.broadcast(t, 0), lambda: hvd.alltoall(t),
                 lambda: hvd.reducescatter(t), lambda: hvd.allreduce_async_(t)):
        with pytest.raises(TypeError, match=str(dtype)):
            call()
    # Nothing was submitted: the job goes on.
    assert_equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full([2], float(hvd.size())))


def test_broadcast_root_outside_the_set_is_a_value_error():
    ps = hvd.add_process_set([0])
    try:
        if hvd.rank() == 0:
            with pytest.raises(ValueError, match="root_rank"):
                hvd.broadcast(torch.ones(1), hvd.size() - 1, process_set=ps)
    finally:
        hvd.remove_process_set(ps)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device in this torch")
def test_cuda_tensor_without_gpu_plane_fails_clearly():
    t = torch.ones(4, device="cuda")
    try:
        out = hvd.allreduce(t, name="cuda.probe", op=hvd.Sum)
    except troika.TroikaError as e:
        assert e.code == "FAILED_PRECONDITION", e
    else:
        assert_equal(out.cpu(), torch.full([4], float(hvd.size())))
