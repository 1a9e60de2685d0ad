"""broadcast_parameters, broadcast_optimizer_state, broadcast_object, allgather_object: after
them every rank holds root's values."""

import torch

import troika.torch as hvd
from conftest import assert_equal


def model_for(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.BatchNorm1d(4),
                               torch.nn.Linear(4, 2))


def test_broadcast_parameters_state_dict_and_named_parameters():
    model = model_for(100 + hvd.rank())  # different on every rank
    root = model_for(100)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for (k, v), (k0, v0) in zip(sorted(model.state_dict().items()),
                                sorted(root.state_dict().items())):
        assert k == k0
        assert_equal(v, v0)
    model = model_for(200 + hvd.rank())
    root = model_for(200 + hvd.size() - 1)
    hvd.broadcast_parameters(list(model.named_parameters()), root_rank=hvd.size() - 1)
    for p, p0 in zip(model.parameters(), root.parameters()):
        assert_equal(p.detach(), p0.detach())
        assert p.requires_grad


def test_broadcast_optimizer_state():
    model = model_for(300)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (hvd.rank() + 1), momentum=0.9)
    # Some momentum state, different per rank.
    model(torch.randn(8, 5) + hvd.rank()).sum().backward()
    opt.step()
    want = opt.state_dict() if hvd.rank() == 0 else None
    want = hvd.broadcast_object(want, root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    got = opt.state_dict()
    assert got["param_groups"] == want["param_groups"]
    assert opt.param_groups[0]["lr"] == 0.1
    for k, s in want["state"].items():
        assert_equal(got["state"][k]["momentum_buffer"], s["momentum_buffer"])


def test_broadcast_object_and_allgather_object():
    obj = {"rank": hvd.rank(), "data": list(range(hvd.rank() * 10))}
    assert hvd.broadcast_object(obj, root_rank=0) == {"rank": 0, "data": []}
    last = hvd.size() - 1
    assert hvd.broadcast_object(obj, root_rank=last, name="obj") == {
        "rank": last, "data": list(range(last * 10))}
    assert hvd.allgather_object(obj) == [
        {"rank": r, "data": list(range(r * 10))} for r in range(hvd.size())]
