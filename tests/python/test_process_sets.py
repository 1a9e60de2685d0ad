"""Collectives in process sets: the even and the odd ranks of the job, each set running its
own operations concurrently (run on 3 ranks: sets of 2 and 1)."""

import pytest
import torch

import troika
import troika.torch as hvd
from conftest import DTYPES, assert_equal, rank_input


@pytest.fixture(scope="module")
def sets():
    n = hvd.size()
    evens = hvd.add_process_set([r for r in range(n) if r % 2 == 0])
    odds = hvd.add_process_set(hvd.ProcessSet([r for r in range(n) if r % 2 == 1]))
    assert evens.process_set_id not in (None, 0)
    assert odds.process_set_id not in (None, 0, evens.process_set_id)
    mine = evens if hvd.rank() % 2 == 0 else odds
    other = odds if mine is evens else evens
    yield mine, other
    assert hvd.remove_process_set(evens)
    assert hvd.remove_process_set(odds)
    assert evens.process_set_id is None
    assert not hvd.remove_process_set(evens)  # already removed


def test_membership(sets):
    mine, other = sets
    assert mine.included() and not other.included()
    assert mine.ranks[mine.rank()] == hvd.rank()
    assert other.rank() == -1
    assert mine.size() + other.size() == hvd.size()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("inplace", [False, True], ids=["out_of_place", "in_place"])
def test_allreduce(sets, dtype, inplace):
    mine, _ = sets
    x = rank_input(dtype, [7], hvd.rank())
    out = (hvd.allreduce_ if inplace else hvd.allreduce)(x, op=hvd.Sum, process_set=mine)
    want = sum(rank_input(torch.int64, [7], r) for r in mine.ranks).to(dtype)
    assert_equal(out, want)
    assert (out is x) == inplace


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_allgather_broadcast_alltoall_reducescatter(sets, dtype):
    mine, _ = sets
    me = hvd.rank()
    n = mine.size()
    gathered = hvd.allgather(rank_input(dtype, [me + 1, 2], me), process_set=mine)
    assert_equal(gathered, torch.cat([rank_input(dtype, [r + 1, 2], r) for r in mine.ranks]))

    root = mine.ranks[-1]  # a rank of the job, as in Horovod
    out = hvd.broadcast(rank_input(dtype, [4], me), root, process_set=mine)
    assert_equal(out, rank_input(dtype, [4], root))

    x = torch.cat([torch.full([1, 2], 10 * me + j, dtype=torch.int64) for j in range(n)])
    out, received = hvd.alltoall(x.to(dtype), splits=[1] * n, process_set=mine)
    want = torch.cat([torch.full([1, 2], 10 * r + mine.rank(), dtype=torch.int64)
                      for r in mine.ranks]).to(dtype)
    assert_equal(out, want)
    assert received.tolist() == [1] * n

    y = rank_input(dtype, [n, 3], me)
    rs = hvd.reducescatter(y, op=hvd.Sum, process_set=mine)
    full = sum(rank_input(torch.int64, [n, 3], r) for r in mine.ranks).to(dtype)
    assert_equal(rs, full[mine.rank():mine.rank() + 1])

    hvd.barrier(process_set=mine)


def test_op_in_a_set_this_rank_is_not_in_fails(sets):
    _, other = sets
    with pytest.raises(hvd.HorovodInternalError) as e:
        hvd.allreduce(torch.ones(3), name="not.a.member", process_set=other)
    assert e.value.code  # a status code name
    # The job goes on.
    assert_equal(hvd.allreduce(torch.ones(3), name="after.not.a.member", op=hvd.Sum),
                 torch.full([3], float(hvd.size())))


def test_removed_set_is_refused():
    ps = hvd.add_process_set([0])
    assert hvd.remove_process_set(ps)
    with pytest.raises(ValueError, match="has not been added"):
        hvd.allreduce(torch.ones(1), process_set=ps)


def test_an_empty_set_can_be_added_and_removed():
    # As Horovod (its tests add the odd ranks of a 1-rank job): a set with no member; an
    # operation on it fails on every rank, which is none of its members, and the job goes on.
    empty = hvd.add_process_set([])
    try:
        assert empty.size() == 0 and not empty.included() and empty.rank() == -1
        with pytest.raises(troika.TroikaError):
            hvd.allreduce(torch.ones(1), process_set=empty)
    finally:
        assert hvd.remove_process_set(empty)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()
