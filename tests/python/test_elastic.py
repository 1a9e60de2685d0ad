"""hvd.elastic's pieces in a job that keeps its ranks (run_elastic_test.py kills ranks): the
states' commit, restore and sync, ElasticSampler's sharding, and run()'s reset loop."""

import pytest
import torch

import troika
import troika.torch as hvd
from conftest import assert_equal


def setup_module():
    hvd.init()


def test_object_state_commits_restores_and_syncs_rank_0s_values():
    state = hvd.elastic.ObjectState(epoch=0, seen=[])
    state.epoch = 3 + hvd.rank()
    state.seen.append(hvd.rank())
    state.commit()
    state.epoch = 99
    state.seen.append(-1)
    state.restore()
    assert state.epoch == 3 + hvd.rank()
    assert state.seen == [hvd.rank()]
    state.sync()
    assert state.epoch == 3
    assert state.seen == [0]


def test_torch_state_restores_the_model_and_optimizer_and_syncs_them_from_rank_0():
    torch.manual_seed(10 + hvd.rank())  # different on every rank
    model = torch.nn.Linear(4, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, opt, batch=0)
    committed = {k: v.clone() for k, v in model.state_dict().items()}
    model(torch.ones(3, 4)).sum().backward()
    opt.step()
    state.batch = 7
    state.restore()
    for k, v in model.state_dict().items():
        assert_equal(v, committed[k])
    assert state.batch == 0
    assert opt.state_dict()["state"] == {}, "the momentum of the step after the commit is gone"
    state.sync()
    torch.manual_seed(10)
    root = torch.nn.Linear(4, 2)
    for v, v0 in zip(model.state_dict().values(), root.state_dict().values()):
        assert_equal(v, v0)


def test_elastic_sampler_shards_each_epoch_and_reshards_what_is_left():
    data = list(range(50))
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=1)
    sampler.set_epoch(2)
    shards = hvd.allgather_object(list(sampler))
    everything = sorted(i for shard in shards for i in shard)
    assert set(everything) == set(data)  # padded to equal shards: a few repeat
    assert len(everything) == hvd.size() * len(sampler)
    # Two batches of 4 on every rank, then a reset (as after a membership change): the rest of
    # the epoch, and none of what was processed, is sharded again.
    processed = [i for shard in shards for i in shard[:8]]
    sampler.record_batch(0, 4)
    sampler.record_batch(1, 4)
    assert sampler.state_dict() == {"epoch": 2, "processed_num": 8 * hvd.size()}
    sampler.load_state_dict(sampler.state_dict())
    rest = [i for shard in hvd.allgather_object(list(sampler)) for i in shard]
    assert not set(rest) & set(processed)
    assert set(rest) | set(processed) == set(data)


def test_run_resets_on_hosts_updated_and_propagates_other_errors():
    state = hvd.elastic.ObjectState(calls=0)
    resets = []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd.elastic.run
    def train(state, value):
        state.calls += 1
        if state.calls == 1:
            raise hvd.elastic.HostsUpdatedInterrupt(skip_sync=True)
        return value + hvd.rank()

    assert train(state, 10) == 10 + hvd.rank()
    assert state.calls == 2
    assert resets == [hvd.size()]
    assert hvd.is_initialized()

    @hvd.elastic.run
    def mismatch(state):
        hvd.allreduce(torch.ones(1 + hvd.rank()), name="elastic.mismatch")

    with pytest.raises(hvd.HorovodInternalError, match="Mismatched") as raised:
        mismatch(state)
    assert raised.value.membership_change is None
    hvd.allreduce(torch.ones(1), name="elastic.after")  # the job goes on


def test_what_was_in_flight_ends_with_the_context_that_ended():
    # Issue 46: an elastic generation ends with troika.shutdown() (enter_next_generation); a
    # named operation still unsynchronized then (a loss during the survivors' sync left
    # broadcast_parameters' later handles so) kept its name, and the next generation's same
    # operation raised DuplicateNameError on every rank. The optimizer's gradients in flight
    # must not outlive it either (zero_grad() would raise, whatever state object is used).
    torch.manual_seed(3)
    model = torch.nn.Linear(4, 1)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    if hvd.rank() == 0:  # submitted here alone: in flight until the shutdown fails them
        model(torch.ones(2, 4)).sum().backward()
        left = hvd.broadcast_async_(torch.zeros(3), 0, name="elastic.left_in_flight")
    hvd.barrier()  # rank 0 submitted before any rank shuts down
    troika.shutdown()  # as at a generation's end
    troika.init()
    if hvd.rank() == 0:
        with pytest.raises(ValueError, match="has been cleared"):
            hvd.poll(left)
        assert hvd.synchronize(left) is None
    # Every name is free in the next context, on every rank, and the optimizer steps.
    out = hvd.broadcast_(torch.full([3], float(hvd.rank())), 0, name="elastic.left_in_flight")
    assert_equal(out, torch.zeros(3))
    opt.zero_grad()
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    for k, v in model.state_dict().items():  # every rank's gradient is 2: 0.1 * 2 off
        assert_equal(v, start[k] - 0.2)
