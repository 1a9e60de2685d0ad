"""Shared set-up of troika.mxnet's tests: every rank of the job runs the same pytest session
(run_mx_pytest.sh under troikarun), so every test submits the same collectives in the same order
on every rank. The job is joined once per session."""

import mxnet as mx
import numpy as np
import pytest

import troika.mxnet as hvd

# The dtypes troika.mxnet reduces, as MXNet names them.
DTYPES = ["uint8", "int8", "int32", "int64", "float16", "float32", "float64"]
FLOAT_DTYPES = ["float16", "float32", "float64"]


@pytest.fixture(scope="session", autouse=True)
def job():
    hvd.init()
    assert hvd.is_initialized()
    yield
    hvd.shutdown()
    assert not hvd.is_initialized()


def rank_input(dtype, shape, r, product=False):
    """What rank `r` contributes: small positive integers, exact in every dtype (sums and
    products of up to 4 ranks stay in int8's range)."""
    n = int(np.prod(shape)) if shape else 1
    i = np.arange(n, dtype=np.int64)
    v = 1 + (i + r) % 2 if product else 1 + (i + 3 * r) % 7
    return v.reshape(shape).astype(dtype)


def nd(array):
    return mx.nd.array(array, dtype=array.dtype)
