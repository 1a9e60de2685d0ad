"""init → shutdown → init in the same processes, as with Horovod's Gloo controller (Horovod's
own tests shut down in tearDown and init again in the next test): the job forms anew with
the same ranks and size, a fresh data plane, only the global process set, and nothing left
from before (docs/agent.md, "Shutting down and attaching again"). Every test leaves the job
initialized, as conftest's session fixture expects."""

import os
import time

import pytest
import torch

import troika.torch as hvd
from conftest import assert_equal, rank_input


def reinit():
    hvd.shutdown()
    assert not hvd.is_initialized()
    with pytest.raises(ValueError, match="not been initialized"):
        hvd.rank()
    hvd.init()
    assert hvd.is_initialized()


def test_reinit_keeps_rank_and_size():
    rank, size = hvd.rank(), hvd.size()
    local = hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size()
    reinit()
    assert (hvd.rank(), hvd.size()) == (rank, size)
    assert (hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size()) == local
    # What troikarun set, as horovodrun --gloo does.
    assert int(os.environ["HOROVOD_RANK"]) == hvd.rank()
    assert int(os.environ["HOROVOD_SIZE"]) == hvd.size()


def test_collectives_after_reinit_give_the_right_results():
    n, me = hvd.size(), hvd.rank()
    for cycle in range(3):
        reinit()
        # The same names every cycle: nothing of the last incarnation is pending or cached.
        out = hvd.allreduce(rank_input(torch.float32, [5], me), name="reinit.sum", op=hvd.Sum)
        assert_equal(out, sum(rank_input(torch.float32, [5], r) for r in range(n)))
        gathered = hvd.allgather(rank_input(torch.int64, [me + 1, 2], me), name="reinit.gather")
        assert_equal(gathered, torch.cat([rank_input(torch.int64, [r + 1, 2], r)
                                          for r in range(n)]))
        root = cycle % n
        b = hvd.broadcast(torch.full([3], float(me)), root, name="reinit.bcast")
        assert_equal(b, torch.full([3], float(root)))
        # Unnamed operations: generated names start over in every incarnation.
        assert_equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full([2], float(n)))
        hvd.barrier()


def test_process_sets_do_not_survive_a_reinit():
    ps = hvd.add_process_set(list(range(hvd.size())))
    first_id = ps.process_set_id
    assert first_id not in (None, 0)
    reinit()
    assert ps.process_set_id is None
    with pytest.raises(ValueError, match="has not been added"):
        hvd.allreduce(torch.ones(1), process_set=ps)
    # The new incarnation has only the global set: ids start over.
    again = hvd.add_process_set(list(range(hvd.size())))
    assert again.process_set_id == first_id
    out = hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=again)
    assert_equal(out, torch.full([2], float(hvd.size())))
    assert hvd.remove_process_set(again)


def test_a_pending_operation_fails_at_shutdown_and_is_gone_after_init():
    # A tensor only this rank submits: pending until the shutdown, which fails it (if another
    # rank left first, its submission fails with that instead).
    try:
        hvd.allreduce_async(torch.ones(4), name="reinit.pending.%d" % hvd.rank(), op=hvd.Sum)
    except hvd.HorovodInternalError:
        pass
    hvd.shutdown()
    hvd.init()
    # The next incarnation knows nothing of it: the name is free, on every rank.
    for r in range(hvd.size()):
        out = hvd.allreduce(torch.ones(4), name="reinit.pending.%d" % r, op=hvd.Sum)
        assert_equal(out, torch.full([4], float(hvd.size())))


def test_many_cycles_are_quick():
    cycles = 20
    times = []
    for i in range(cycles):
        start = time.perf_counter()
        reinit()
        times.append(time.perf_counter() - start)
        out = hvd.allreduce(torch.full([1], float(i)), name="reinit.cycle", op=hvd.Sum)
        assert out.item() == i * hvd.size()
    times.sort()
    median = times[len(times) // 2]
    print("rank %d: %d init+shutdown cycles, median %.1f ms, max %.1f ms"
          % (hvd.rank(), cycles, 1000 * median, 1000 * times[-1]))
    assert median < 2.0, times  # milliseconds normally; seconds would mean a wait or a timeout
