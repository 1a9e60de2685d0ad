"""The compiled core troika._troika alone (no torch): raw addresses, dtype numbers, shapes;
handle-owned results and the *_into forms writing into a caller's buffer."""

import ctypes

import pytest

import troika
from troika import _troika

F32 = _troika.DTYPES["float32"]
I64 = _troika.DTYPES["int64"]


@pytest.fixture(scope="module")
def ctx():
    c = troika.context()
    assert (c.rank, c.size) == (troika.rank(), troika.size())
    return c


def addr(buf):
    return ctypes.addressof(buf)


def floats(values):
    return (ctypes.c_float * len(values))(*values)


def test_enums():
    assert sorted(_troika.DTYPES) == sorted(
        ["uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64",
         "int16", "uint16", "bool"])
    assert [_troika.DTYPES[n] for n in ("int16", "uint16", "bool")] == [8, 9, 10]
    assert len({_troika.SUM, _troika.AVERAGE, _troika.MIN, _troika.MAX, _troika.PRODUCT}) == 5


def test_allreduce_in_place(ctx):
    buf = floats([ctx.rank + 1.0] * 8)
    h = ctx.allreduce("m.allreduce", addr(buf), addr(buf), F32, [8], op=_troika.SUM)
    assert h.wait() is True
    assert h.poll()
    assert list(buf) == [float(sum(range(1, ctx.size + 1)))] * 8


def test_allreduce_wait_returns_finished_and_raises_on_failure(ctx):
    buf = floats([ctx.rank + 1.0] * 4)
    assert ctx.allreduce_wait("m.allreduce_wait", addr(buf), addr(buf), F32, [4],
                              _troika.MAX) is None
    assert list(buf) == [float(ctx.size)] * 4
    # A null buffer with elements: this rank's call raises at once (nothing is sent).
    with pytest.raises(troika.TroikaError) as e:
        ctx.allreduce_wait("m.allreduce_wait.null", 0, 0, F32, [4])
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(ValueError, match="dtype"):
        ctx.allreduce_wait("m.allreduce_wait.bad", 0, 0, 99, [1])


def test_wait_with_timeout(ctx):
    buf = floats([1.0])
    if ctx.rank == 0:
        # Rank 0 submits first and waits briefly: the others have not submitted yet.
        h = ctx.allreduce("m.timeout", addr(buf), addr(buf), F32, [1], op=_troika.SUM)
        assert h.wait(timeout=0.05) is False
        ctx.barrier().wait()
    else:
        ctx.barrier().wait()
        h = ctx.allreduce("m.timeout", addr(buf), addr(buf), F32, [1], op=_troika.SUM)
    assert h.wait(timeout=60) is True
    assert buf[0] == float(ctx.size)


def test_allgather_handle_owned_and_copy_out(ctx):
    n = ctx.rank + 1
    src = (ctypes.c_int64 * n)(*([ctx.rank] * n))
    h = ctx.allgather("m.allgather", addr(src), I64, [n])
    h.wait()
    total = sum(r + 1 for r in range(ctx.size))
    assert h.output_shape == [total]
    assert h.output_bytes == total * 8
    dst = (ctypes.c_int64 * total)()
    assert h.copy_output(addr(dst), ctypes.sizeof(dst)) == total * 8
    assert list(dst) == [r for r in range(ctx.size) for _ in range(r + 1)]
    small = (ctypes.c_int64 * 1)()
    with pytest.raises(ValueError, match="bytes"):
        h.copy_output(addr(small), ctypes.sizeof(small))


def test_allgather_into(ctx):
    src = (ctypes.c_int64 * 2)(ctx.rank, ctx.rank)
    dst = (ctypes.c_int64 * (2 * ctx.size + 3))()  # larger than needed: fine
    h = ctx.allgather_into("m.allgather_into", addr(src), addr(dst), ctypes.sizeof(dst), I64, [2])
    h.wait()
    assert h.output_shape == [2 * ctx.size]
    assert h.output_bytes == 2 * ctx.size * 8
    assert h.output_address == addr(dst)
    assert list(dst)[:2 * ctx.size] == [r for r in range(ctx.size) for _ in range(2)]


def test_into_too_small_fails_only_that_rank(ctx):
    # Rank 0 gives a buffer one row short: its handle fails with OUT_OF_RANGE, the others get
    # their result, and the job goes on.
    src = (ctypes.c_int64 * 1)(ctx.rank)
    rows = ctx.size - 1 if ctx.rank == 0 else ctx.size
    dst = (ctypes.c_int64 * max(rows, 1))()
    h = ctx.allgather_into("m.too_small", addr(src), addr(dst), rows * 8, I64, [1])
    if ctx.rank == 0:
        with pytest.raises(troika.TroikaError) as e:
            h.wait()
        assert e.value.code == "OUT_OF_RANGE"
        assert h.output_shape == [ctx.size]
    else:
        h.wait()
        assert list(dst) == list(range(ctx.size))
    ctx.barrier().wait()


def test_allgather_into_handle_owned_if_too_small(ctx):
    # The same, with the fallback: rank 0's result is handle-owned (its buffer untouched) and
    # the operation succeeds there too.
    src = (ctypes.c_int64 * 1)(ctx.rank)
    rows = ctx.size - 1 if ctx.rank == 0 else ctx.size
    dst = (ctypes.c_int64 * max(rows, 1))(*([-1] * max(rows, 1)))
    h = ctx.allgather_into("m.or_owned", addr(src), addr(dst), rows * 8, I64, [1],
                           handle_owned_if_too_small=True)
    assert h.wait() is True
    assert h.output_shape == [ctx.size] and h.output_bytes == ctx.size * 8
    out = (ctypes.c_int64 * ctx.size)()
    assert h.copy_output(addr(out), ctypes.sizeof(out)) == ctx.size * 8
    assert list(out) == list(range(ctx.size))
    assert (h.output_address == addr(dst)) == (ctx.rank != 0)
    if ctx.rank == 0:
        assert list(dst) == [-1] * max(rows, 1)


def test_submit_allreduce_fast_path(ctx):
    # _troika.submit_allreduce: Context.allreduce's submission, positional, without pybind11's
    # dispatch; shapes as a list, a tuple (torch.Size is one) or another sequence of ints.
    for i, dims in enumerate(([2, 3], (2, 3), range(2, 4))):
        buf = floats([ctx.rank + 1.0] * 6)
        h = _troika.submit_allreduce(ctx, "m.fast.%d" % i, addr(buf), addr(buf), F32, dims,
                                     _troika.SUM, 1.0, 2, 0, -1, 0)
        assert isinstance(h, _troika.Handle) and h.wait() is True
        assert list(buf) == [2.0 * sum(range(1, ctx.size + 1))] * 6
    buf = floats([1.0])
    with pytest.raises(TypeError, match="12 positional"):
        _troika.submit_allreduce(ctx, "m.fast.bad", addr(buf), addr(buf), F32, [1])
    with pytest.raises(TypeError):
        _troika.submit_allreduce(ctx, "m.fast.bad", addr(buf), addr(buf), F32, [1.5],
                                 _troika.SUM, 1.0, 1.0, 0, -1, 0)
    with pytest.raises(TypeError):
        _troika.submit_allreduce(None, "m.fast.bad", addr(buf), addr(buf), F32, [1],
                                 _troika.SUM, 1.0, 1.0, 0, -1, 0)
    with pytest.raises(ValueError, match="dtype"):
        _troika.submit_allreduce(ctx, "m.fast.bad", addr(buf), addr(buf), 99, [1],
                                 _troika.SUM, 1.0, 1.0, 0, -1, 0)
    with pytest.raises(troika.InvalidArgumentError):  # refused at submission: raises here
        _troika.submit_allreduce(ctx, "m.fast.null", 0, 0, F32, [4], _troika.SUM, 1.0, 1.0, 0,
                                 -1, 0)


def test_allreduce_wait_fast_path(ctx):
    # _troika.allreduce_wait: Context.allreduce_wait, positional, without pybind11's dispatch.
    buf = floats([ctx.rank + 1.0] * 6)
    assert _troika.allreduce_wait(ctx, "m.fast_wait", addr(buf), addr(buf), F32, (2, 3),
                                  _troika.SUM, 1.0, 2, 0) is None
    assert list(buf) == [2.0 * sum(range(1, ctx.size + 1))] * 6
    with pytest.raises(TypeError, match="10 positional"):
        _troika.allreduce_wait(ctx, "m.fast_wait.bad", addr(buf), addr(buf), F32, [1])
    with pytest.raises(TypeError):
        _troika.allreduce_wait(None, "m.fast_wait.bad", addr(buf), addr(buf), F32, [1],
                               _troika.SUM, 1.0, 1.0, 0)
    with pytest.raises(ValueError, match="dtype"):
        _troika.allreduce_wait(ctx, "m.fast_wait.bad", addr(buf), addr(buf), 99, [1],
                               _troika.SUM, 1.0, 1.0, 0)
    with pytest.raises(troika.InvalidArgumentError):  # refused at submission
        _troika.allreduce_wait(ctx, "m.fast_wait.null", 0, 0, F32, [4], _troika.SUM, 1.0, 1.0,
                               0)


def test_submit_allreduces_one_call_many_allreduces(ctx):
    # _troika.submit_allreduces: one Context.allreduce per entry (each its own name, dtype and
    # shape, in place or not), one call; the batch waits for all of them.
    n = ctx.size
    a = floats([ctx.rank + 1.0] * 6)
    b = (ctypes.c_int64 * 3)(*[ctx.rank] * 3)
    c_in, c_out = floats([2.0 * ctx.rank]), floats([-1.0])
    batch = _troika.submit_allreduces(ctx, [("m.batch.a", addr(a), addr(a), F32, (2, 3)),
                                            ("m.batch.b", addr(b), addr(b), I64, [3]),
                                            ("m.batch.c", addr(c_in), addr(c_out), F32, [1])],
                                      _troika.SUM, 1.0, 1.0, 0, -1, 0)
    assert isinstance(batch, _troika.AllreduceBatch) and len(batch) == 3
    assert batch.device == -1
    assert batch.wait() is None and batch.poll()
    assert list(a) == [float(sum(range(1, n + 1)))] * 6
    assert list(b) == [sum(range(n))] * 3
    assert list(c_out) == [2.0 * sum(range(n))] and list(c_in) == [2.0 * ctx.rank]
    empty = _troika.submit_allreduces(ctx, [], _troika.SUM, 1.0, 1.0, 0, -1, 0)
    assert len(empty) == 0 and empty.poll() and empty.wait() is None


def test_submit_allreduces_checks_every_entry_before_submitting_any(ctx):
    buf = floats([1.0])
    good = ("m.batch.checked", addr(buf), addr(buf), F32, [1])
    for bad in [("m.batch.bad", addr(buf), addr(buf), 99, [1]),  # dtype
                ("m.batch.bad", addr(buf), addr(buf), F32, [1.5]),  # shape
                ("m.batch.bad", addr(buf), addr(buf), F32),  # not 5 items
                ["m.batch.bad", addr(buf), addr(buf), F32, [1]],  # not a tuple
                (b"m.batch.bad", addr(buf), addr(buf), F32, [1]),  # name not a str
                ("m.batch.bad", "0", addr(buf), F32, [1])]:  # address not an int
        with pytest.raises((TypeError, ValueError)):
            _troika.submit_allreduces(ctx, [good, bad], _troika.SUM, 1.0, 1.0, 0, -1, 0)
    with pytest.raises(TypeError, match="8 positional"):
        _troika.submit_allreduces(ctx, [good])
    with pytest.raises(TypeError):
        _troika.submit_allreduces(None, [good], _troika.SUM, 1.0, 1.0, 0, -1, 0)
    with pytest.raises(ValueError):  # op
        _troika.submit_allreduces(ctx, [good], 99, 1.0, 1.0, 0, -1, 0)
    # Nothing of those was submitted: the name is free, and the allreduce runs once.
    _troika.submit_allreduces(ctx, [good], _troika.SUM, 1.0, 1.0, 0, -1, 0).wait()
    assert list(buf) == [float(ctx.size)]


def test_submit_allreduces_raises_a_refused_entry_at_wait_after_the_others(ctx):
    a, c = floats([1.0] * 2), floats([2.0])
    batch = _troika.submit_allreduces(ctx, [("m.batch.r.a", addr(a), addr(a), F32, [2]),
                                            ("m.batch.r.null", 0, 0, F32, [4]),
                                            ("m.batch.r.c", addr(c), addr(c), F32, [1])],
                                      _troika.SUM, 1.0, 1.0, 0, -1, 0)
    with pytest.raises(troika.InvalidArgumentError, match="m.batch.r.null"):
        batch.wait()
    assert batch.poll()  # the others ran, on every rank
    assert list(a) == [float(ctx.size)] * 2 and list(c) == [2.0 * ctx.size]


def test_alltoall_and_alltoall_into(ctx):
    n = ctx.size
    # Rank r sends one row [10r + j] to rank j.
    src = (ctypes.c_int64 * n)(*[10 * ctx.rank + j for j in range(n)])
    h = ctx.alltoall("m.alltoall", addr(src), I64, [n], [1] * n)
    h.wait()
    assert h.received_splits == [1] * n
    out = (ctypes.c_int64 * n)()
    h.copy_output(addr(out), ctypes.sizeof(out))
    assert list(out) == [10 * i + ctx.rank for i in range(n)]
    out2 = (ctypes.c_int64 * n)()
    h2 = ctx.alltoall_into("m.alltoall_into", addr(src), addr(out2), ctypes.sizeof(out2), I64,
                           [n])
    h2.wait()
    assert h2.received_splits == [1] * n
    assert list(out2) == list(out)


def test_reducescatter_and_into(ctx):
    n = ctx.size
    src = floats([float(ctx.rank + i) for i in range(n)])
    h = ctx.reducescatter("m.reducescatter", addr(src), F32, [n], op=_troika.SUM)
    h.wait()
    assert h.output_shape == [1]
    out = floats([0.0])
    h.copy_output(addr(out), 4)
    want = float(sum(r + ctx.rank for r in range(n)))
    assert out[0] == want
    out2 = floats([0.0])
    ctx.reducescatter_into("m.reducescatter_into", addr(src), addr(out2), 4, F32, [n],
                           op=_troika.SUM).wait()
    assert out2[0] == want


def test_broadcast_and_join(ctx):
    buf = floats([float(ctx.rank)] * 3)
    ctx.broadcast("m.broadcast", addr(buf), addr(buf), F32, [3], ctx.size - 1).wait()
    assert list(buf) == [float(ctx.size - 1)] * 3
    h = ctx.join()
    h.wait()
    assert 0 <= h.joined_last_rank < ctx.size


def test_bad_arguments(ctx):
    with pytest.raises(ValueError, match="dtype"):
        ctx.allreduce("m.bad", 0, 0, 99, [1])
    with pytest.raises(ValueError, match="op"):
        ctx.allreduce("m.bad", 0, 0, F32, [1], op=42)
    # A null buffer with elements is refused at submission (nothing is sent), as Horovod raises
    # at the call: an InvalidArgumentError, both a TroikaError and a ValueError.
    with pytest.raises(troika.InvalidArgumentError) as e:
        ctx.allreduce("m.null", 0, 0, F32, [4])
    assert e.value.code == "INVALID_ARGUMENT"
    assert isinstance(e.value, troika.TroikaError) and isinstance(e.value, ValueError)
    with pytest.raises(troika.InvalidArgumentError):  # the blocking form alike
        ctx.allreduce_wait("m.null", 0, 0, F32, [4])
    # A name in flight on this rank: DuplicateNameError, a TroikaError and a ValueError.
    buf = floats([1.0])
    if ctx.rank == 0:  # surely in flight: the others submit it only after the barrier
        h = ctx.allreduce("m.dup", addr(buf), addr(buf), F32, [1], op=_troika.SUM)
        with pytest.raises(troika.DuplicateNameError) as e:
            ctx.allreduce("m.dup", addr(buf), addr(buf), F32, [1])
        assert e.value.code == "ALREADY_EXISTS"
        assert isinstance(e.value, troika.TroikaError) and isinstance(e.value, ValueError)
    ctx.barrier().wait()
    if ctx.rank != 0:
        h = ctx.allreduce("m.dup", addr(buf), addr(buf), F32, [1], op=_troika.SUM)
    h.wait()
    assert list(buf) == [float(ctx.size)]


def test_wait_from_other_threads(ctx):
    # Handle.wait releases the GIL: several threads wait on handles while this one submits.
    import threading
    bufs = [floats([float(ctx.rank + i)] * 16) for i in range(8)]
    handles = [ctx.allreduce("m.thread.%d" % i, addr(b), addr(b), F32, [16], op=_troika.SUM)
               for i, b in enumerate(bufs)]
    errors = []

    def waiter(h):
        try:
            h.wait()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=waiter, args=(h,)) for h in handles]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads)
    for i, b in enumerate(bufs):
        assert list(b) == [float(sum(r + i for r in range(ctx.size)))] * 16
