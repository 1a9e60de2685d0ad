"""troika._ops without a job: reduce ops, Horovod's op/average rule, process set ids, broadcast
roots and reducescatter rows (run_unit_tests.sh, one process)."""

import warnings

import pytest

from troika import ProcessSet, _troika, global_process_set
from troika import _ops


def test_reduce_ops_are_the_cores_numbers_and_adasum_is_refused():
    assert (_ops.Sum, _ops.Average, _ops.Min, _ops.Max, _ops.Product) == (
        _troika.SUM, _troika.AVERAGE, _troika.MIN, _troika.MAX, _troika.PRODUCT)
    for op in (_ops.Sum, _ops.Average, _ops.Min, _ops.Max, _ops.Product):
        assert _ops.check_op(op) == op
    with pytest.raises(NotImplementedError, match="op=Average or op=Sum") as e:
        _ops.check_op(_ops.Adasum)
    assert isinstance(e.value, RuntimeError)  # as Horovod's refusal


def test_op_wins_average_is_deprecated_and_average_is_the_default():
    assert _ops.reduce_op(None, None) == _ops.Average
    assert _ops.reduce_op(_ops.Max, None) == _ops.Max
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _ops.reduce_op(None, True) == _ops.Average
        assert _ops.reduce_op(None, False) == _ops.Sum
    assert [w.category for w in caught] == [DeprecationWarning] * 2
    with pytest.raises(ValueError, match="supersedes average"):
        _ops.reduce_op(_ops.Sum, True)
    with pytest.raises(NotImplementedError):
        _ops.reduce_op(_ops.Adasum, None)


def test_process_set_ids_need_an_added_process_set():
    assert _ops.process_set_id(global_process_set) == 0
    added = ProcessSet([0, 2])
    added.process_set_id = 3  # as add_process_set leaves it
    assert _ops.process_set_id(added) == 3
    with pytest.raises(ValueError, match="has not been added"):
        _ops.process_set_id(ProcessSet([1]))
    with pytest.raises(TypeError, match="must be a ProcessSet"):
        _ops.process_set_id([0, 1])


def test_a_broadcast_root_is_a_rank_of_the_job_and_the_core_takes_its_position():
    assert _ops.root_position(5, global_process_set) == 5
    odd = ProcessSet([5, 1, 3])
    odd.process_set_id = 2
    assert _ops.root_position(3, odd) == 1
    with pytest.raises(ValueError, match="root_rank 2 is not in"):
        _ops.root_position(2, odd)


@pytest.mark.parametrize("dim0,size,want", [(10, 3, [4, 3, 3]), (2, 4, [1, 1, 0, 0]),
                                           (8, 4, [2, 2, 2, 2]), (0, 2, [0, 0])])
def test_reducescatter_gives_the_first_ranks_one_row_more(dim0, size, want):
    assert [_ops.reducescatter_rows(dim0, size, p) for p in range(size)] == want
    assert _ops.reducescatter_rows(dim0, 0, 0) == 0  # an empty set
