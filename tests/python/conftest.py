"""Shared set-up of the Python tests: every rank of the job runs the same pytest session
(tests/python/run_pytest.sh under troikarun), so every test must submit the same collectives in
the same order on every rank. The job is joined once per session."""

import pytest
import torch

import troika.torch as hvd

# The dtypes of the runtime, with how results are compared.
DTYPES = [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


@pytest.fixture(scope="session", autouse=True)
def job():
    hvd.init()
    assert hvd.is_initialized()
    yield
    hvd.shutdown()
    assert not hvd.is_initialized()


def rank_input(dtype, shape, r, product=False):
    """The input rank `r` contributes: small positive integers (exact in every dtype, sums
    and products of up to 4 ranks stay in int8's range)."""
    n = 1
    for d in shape:
        n *= d
    i = torch.arange(n, dtype=torch.int64)
    v = 1 + (i + r) % 2 if product else 1 + (i + 3 * r) % 7
    return v.reshape(shape).to(dtype)


def expected_reduce(op, dtype, shape, ranks, pre=1.0, post=1.0):
    """The reduction of the ranks' inputs, by the runtime's rules (troika/types.h): integer
    averages divide exactly, rounding toward zero."""
    xs = [rank_input(dtype, shape, r, product=op == hvd.Product) for r in ranks]
    if dtype.is_floating_point:
        xs = [x.to(torch.float64) * pre for x in xs]
    else:
        xs = [x.to(torch.int64) for x in xs]
    acc = xs[0].clone()
    for x in xs[1:]:
        if op in (hvd.Sum, hvd.Average):
            acc = acc + x
        elif op == hvd.Min:
            acc = torch.minimum(acc, x)
        elif op == hvd.Max:
            acc = torch.maximum(acc, x)
        else:
            acc = acc * x
    if op == hvd.Average:
        acc = acc / len(ranks) if dtype.is_floating_point else torch.div(
            acc, len(ranks), rounding_mode="trunc")
    if dtype.is_floating_point:
        acc = acc * post
    return acc.to(dtype)


def assert_equal(actual, expected):
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if expected.dtype.is_floating_point:
        torch.testing.assert_close(actual, expected)
    else:
        # Compared as int64: torch >= 2.3's uint16 has casts but few other ops.
        assert torch.equal(actual.to(torch.int64), expected.to(torch.int64)), (actual, expected)


def pytest_sessionfinish(session, exitstatus):
    # Every rank must have run tests: a session that collected none is a failure (pytest's 5)
    # rather than a silent pass of the job.
    if session.testscollected == 0 and exitstatus == 0:
        session.exitstatus = 5
