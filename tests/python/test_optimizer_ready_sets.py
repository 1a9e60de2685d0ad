"""DistributedOptimizer's ready sets (issue 49, _ready_sets.py): gradients that became ready
together in the watched steps are submitted together from then on, one
_troika.submit_allreduces call per set, each under its own name, as soon as the set is complete
(so still during the backward pass); a set left incomplete goes at the end of the backward pass;
the results are those of one allreduce per gradient, with every dtype, compression, layout and
process set."""

import time

import pytest
import torch

import troika
import troika.torch as hvd
from troika import _troika
from troika.torch import _ready_sets

from training import assert_same_model, train_distributed, train_reference


class Calls:
    """Counts the optimizer's calls into the module (wrapping _troika's functions)."""

    def __init__(self, monkeypatch):
        self.singles, self.batches = [], []
        single, batch = _troika.submit_allreduce, _troika.submit_allreduces

        def count_single(*args):
            self.singles.append(args[1])
            return single(*args)

        def count_batch(*args):
            self.batches.append([e[0] for e in args[1]])
            return batch(*args)

        monkeypatch.setattr(_troika, "submit_allreduce", count_single)
        monkeypatch.setattr(_troika, "submit_allreduces", count_batch)

    def clear(self):
        self.singles.clear()
        self.batches.clear()


@pytest.fixture
def one_set(monkeypatch):
    """Every gradient of a backward pass ready together (no gap parts a set)."""
    monkeypatch.setattr(_ready_sets, "READY_GAP_S", 1e9)


def leaves(n, dtype=torch.float32):
    return [torch.nn.Parameter(torch.zeros(3 + i, dtype=dtype)) for i in range(n)]


def test_one_call_per_ready_set_after_the_watched_steps(monkeypatch, one_set):
    params = leaves(16)
    names = ["rs.one.%d" % i for i in range(16)]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.0),
                                   named_parameters=list(zip(names, params)), op=hvd.Sum)
    calls = Calls(monkeypatch)
    factor = hvd.rank() + 1.0
    watched = _ready_sets.WATCHED_STEPS
    for step in range(watched + 2):
        opt.zero_grad()
        sum(p.sum() for p in params).mul(factor).backward()
        if step < watched:  # each gradient alone, as soon as it is ready
            assert sorted(calls.singles) == sorted("allreduce." + n for n in names)
            assert calls.batches == []
        else:  # one set: one call, every gradient under its own name, during backward
            assert calls.singles == []
            # in the optimizer's order, whatever order autograd ran the hooks in
            assert calls.batches == [["allreduce." + n for n in names]]
        opt.step()
        total = sum(range(1, hvd.size() + 1))
        for p in params:
            assert torch.equal(p.grad, torch.full_like(p, total))
        calls.clear()


class Grad:
    """What _ready_sets needs of a gradient: its place in the optimizer's order."""

    def __init__(self, index):
        self.index = index


def test_ready_sets_are_runs_of_hooks_close_in_time(monkeypatch):
    monkeypatch.setattr(_ready_sets, "READY_GAP_S", 1.0)
    g = [Grad(i) for i in range(10)]
    # Hooks at these times (s), in this order: 0-0.9 one run; 3.0 alone (more than 1 s from
    # both neighbours); 6.0-9.2 a run of gaps under 1 s; g[9] (at 1.4) is sparse: in no set,
    # and it links nothing.
    times = [0.0, 0.5, 0.9, 3.0, 6.0, 6.8, 7.6, 8.4, 9.2, 1.4]
    hooks = sorted(zip(times, g), key=lambda h: h[0])
    sets = _ready_sets.form([hooks], alone=lambda x: x is g[9])
    assert [s.members for s in sets] == [g[0:3], g[4:9]]
    assert [s.size for s in sets] == [3, 5] and all(s.ready == [] for s in sets)


def test_a_pause_in_one_watched_step_does_not_part_a_set(monkeypatch):
    # Hooks consecutive and close in any watched step link their gradients: a rank descheduled
    # between two hooks in one step (here between g1 and g2) still sees them ready together.
    monkeypatch.setattr(_ready_sets, "READY_GAP_S", 1.0)
    monkeypatch.setattr(_ready_sets, "WATCHED_STEPS", 2)
    g = [Grad(i) for i in range(4)]
    watcher = _ready_sets.Watcher()
    for t, x in [(100.0, g[0]), (100.5, g[1]), (105.0, g[2]), (105.5, g[3])]:
        watcher.recording.append((t, x))
    assert watcher.end_step(alone=lambda x: False) is None and watcher.recording == []
    watcher.recording = [(200.0, g[1]), (200.4, g[0]), (200.9, g[3]), (201.5, g[2])]
    sets = watcher.end_step(alone=lambda x: False)
    assert [s.members for s in sets] == [g]  # in the optimizer's order


def test_the_sets_are_formed_after_the_watched_steps_from_real_hooks(monkeypatch, one_set):
    params = leaves(5)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.0))
    for step in range(_ready_sets.WATCHED_STEPS):
        assert opt._watcher is not None and not opt._ready_sets
        sum(p.sum() for p in params).backward()
        opt.step()
        opt.zero_grad()
    assert opt._watcher is None and len(opt._ready_sets) == 1
    assert opt._ready_sets[0].members == opt._grads


def test_a_complete_set_is_in_flight_before_the_backward_pass_goes_on(monkeypatch):
    monkeypatch.setattr(_ready_sets, "READY_GAP_S", 0.01)
    # a and b (the last layer) are ready before c; in the watched steps a pause (the sleep in
    # the hook on x, between them) parts them, so from then on {a, b} is a set, submitted as
    # soon as both are ready: in flight by the time x's gradient is computed.
    a = torch.nn.Parameter(torch.ones(4))
    b = torch.nn.Parameter(torch.ones(3))
    c = torch.nn.Parameter(torch.ones(4))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([a, b, c], lr=0.0),
                                   named_parameters=[("rs.a", a), ("rs.b", b), ("rs.c", c)])
    seen = []

    watched = _ready_sets.WATCHED_STEPS

    def on_x_grad(grad, pause=[0.1] * watched):
        time.sleep(pause.pop() if pause else 0)
        seen.append((opt._grad_of[a].pending, opt._grad_of[b].pending, opt._grad_of[c].pending))

    for step in range(watched + 2):
        opt.zero_grad()
        x = c * 2
        x.register_hook(on_x_grad)
        ((x * a).sum() + b.sum()).backward()
        opt.step()
    assert opt._grad_of[a].ready_set is opt._grad_of[b].ready_set is not None
    assert opt._grad_of[c].ready_set is None
    assert seen == [(True, True, None)] * (watched + 2)


def test_an_incomplete_set_goes_at_the_end_of_the_backward_pass(one_set):
    a, b, c = leaves(3)
    opt = hvd.DistributedOptimizer(torch.optim.SGD([a, b, c], lr=0.0),
                                   named_parameters=[("rs.i.a", a), ("rs.i.b", b),
                                                     ("rs.i.c", c)])
    for _ in range(_ready_sets.WATCHED_STEPS):
        (a.sum() + b.sum() + c.sum()).backward()
        opt.step()
        opt.zero_grad()
    assert opt._grad_of[a].ready_set is opt._grad_of[c].ready_set is not None
    (a.sum() + c.sum()).backward()  # b unused this step: its set is never complete
    assert opt._grad_of[a].pending and opt._grad_of[c].pending
    assert opt._grad_of[b].pending is None and opt._open is None
    with pytest.raises(AssertionError, match="zero_grad"):
        opt.zero_grad()
    opt.step()  # b's allreduce (of zeros) at synchronize, as Horovod's
    assert torch.equal(b.grad, torch.zeros(4))
    assert torch.equal(a.grad, torch.ones(3))


@pytest.mark.parametrize("passes", [1, 2])
def test_training_with_one_set_equals_one_rank_on_the_whole_batch(one_set, passes):
    model, opt = train_distributed(passes=passes)
    assert_same_model(model, train_reference(hvd.size()), rtol=1e-4, atol=1e-5)
    assert sum(g.ready_set is not None for g in opt._grads) >= 6  # the used ones, one set


def test_mixed_dtypes_layouts_compression_and_a_process_set(one_set):
    everyone = hvd.add_process_set(list(range(hvd.size())))
    try:
        for compression in (hvd.Compression.none, hvd.Compression.fp16):
            f32 = torch.nn.Parameter(torch.zeros(5))
            f64 = torch.nn.Parameter(torch.zeros(2, 3, dtype=torch.float64))
            bf16 = torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))
            strided = torch.nn.Parameter(torch.zeros(4, 3).t())  # its gradient too
            assert not strided.is_contiguous()
            params = [f32, f64, bf16, strided]
            opt = hvd.DistributedOptimizer(
                torch.optim.SGD(params, lr=0.0), compression=compression,
                named_parameters=[("rs.m.%d" % i, p) for i, p in enumerate(params)],
                process_set=everyone)
            r = hvd.rank()
            mean = (hvd.size() - 1) / 2.0  # the ranks' mean of r
            for step in range(_ready_sets.WATCHED_STEPS + 2):
                opt.zero_grad()
                loss = sum((p.float() * (r + torch.arange(p.numel()).view(p.shape)
                                         .float())).sum() for p in params)
                loss.backward()
                opt.step()
                for p in params:
                    want = (mean + torch.arange(p.numel()).view(p.shape).float()).to(p.dtype)
                    torch.testing.assert_close(p.grad, want, rtol=1e-2, atol=1e-2)
                assert not strided.grad.is_contiguous()
            assert opt._grad_of[f32].ready_set is not None
    finally:
        hvd.remove_process_set(everyone)


def test_a_failed_gradient_in_a_set_raises_once_the_others_are_done(one_set):
    a = torch.nn.Parameter(torch.zeros(4))
    b = torch.nn.Parameter(torch.zeros(2 + hvd.rank()))  # its shape differs between the ranks
    c = torch.nn.Parameter(torch.zeros(5))
    opt = hvd.DistributedOptimizer(torch.optim.SGD([a, b, c], lr=0.0),
                                   named_parameters=[("rs.f.a", a), ("rs.f.b", b),
                                                     ("rs.f.c", c)])
    for step in range(_ready_sets.WATCHED_STEPS + 1):
        opt.zero_grad()
        (a.sum() + b.sum() + c.sum()).backward()
        with pytest.raises(hvd.HorovodInternalError) as err:
            opt.step()
        assert "'allreduce.rs.f.b'" in str(err.value)
        assert torch.equal(a.grad, torch.ones(4)) and torch.equal(c.grad, torch.ones(5))
        assert not opt._in_flight
    assert opt._grad_of[a].ready_set is not None
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()
    assert troika.size() == hvd.size()
