"""troika.torch on CUDA tensors (the GPU data plane: NCCL, docs/gpu.md). Skipped without a CUDA
device, without a build with the GPU plane, or with more local ranks than devices (NCCL needs a
device per rank). Run by ctest like the others (skipped on machines without a GPU) and by the
GPU bundle (scripts/gpu_bundle.sh) on one GPU with 1 rank.

What it checks beyond the values: inputs produced by kernels still queued on the current
stream are read after them (the ready stream), and results are consumed by kernels queued
right after synchronize() without a CPU synchronisation in between (WaitOnStream)."""

import copy
import time

import pytest
import torch

import troika.torch as hvd
from conftest import assert_equal, expected_reduce, rank_input

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device in this torch"),
    pytest.mark.skipif(not hvd.cuda_built(), reason="this Troika has no GPU data plane"),
]


@pytest.fixture(scope="module")
def dev():
    if hvd.local_size() > torch.cuda.device_count():
        pytest.skip("%d local ranks, %d CUDA devices" % (hvd.local_size(),
                                                         torch.cuda.device_count()))
    d = torch.device("cuda", hvd.local_rank())
    torch.cuda.set_device(d)
    return d


def queued(cpu_tensor, dev):
    """`cpu_tensor` on `dev`, produced by kernels that are still queued on the current stream
    when this returns (a long matmul first, so they are not finished yet)."""
    busy = torch.randn(2048, 2048, device=dev)
    for _ in range(4):
        busy = busy @ busy / 2048
    zero = (busy[0, 0] * 0).to(cpu_tensor.dtype)  # keeps the dtype (a float would promote)
    return cpu_tensor.to(dev, non_blocking=True) + zero


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("opname", ["sum", "average"])
def test_allreduce(dev, dtype, opname):
    op = {"sum": hvd.Sum, "average": hvd.Average}[opname]
    shape, ranks = [33, 5], list(range(hvd.size()))
    x = queued(rank_input(dtype, shape, hvd.rank()), dev)
    y = hvd.allreduce(x, op=op)
    assert y.device == dev
    z = y + 0  # queued right after: must see the result
    assert_equal(z.cpu(), expected_reduce(op, dtype, shape, ranks))
    hvd.allreduce_(x, op=op)
    assert_equal(x.cpu(), expected_reduce(op, dtype, shape, ranks))


def test_allreduce_async_handles_and_fp16_compression(dev):
    shape, ranks = [1000], list(range(hvd.size()))
    xs = [queued(rank_input(torch.float32, shape, hvd.rank()), dev) for _ in range(3)]
    handles = [hvd.allreduce_async(x, op=hvd.Sum, name="cuda.async.%d" % i)
               for i, x in enumerate(xs)]
    want = expected_reduce(hvd.Sum, torch.float32, shape, ranks)
    for h in handles:
        assert_equal(hvd.synchronize(h).cpu(), want)
    y = hvd.allreduce(xs[0], op=hvd.Sum, compression=hvd.Compression.fp16)
    assert y.dtype == torch.float32 and y.device == dev
    assert_equal(y.cpu(), want)


def test_broadcast(dev):
    for root in range(hvd.size()):
        x = queued(rank_input(torch.float32, [7, 3], hvd.rank()), dev)
        assert_equal(hvd.broadcast(x, root).cpu(), rank_input(torch.float32, [7, 3], root))
        hvd.broadcast_(x, root)
        assert_equal(x.cpu(), rank_input(torch.float32, [7, 3], root))


def test_allgather_device_result(dev):
    rows = hvd.rank() + 1
    x = queued(rank_input(torch.float32, [rows, 4], hvd.rank()), dev)
    y = hvd.allgather(x)
    assert y.device == dev
    want = torch.cat([rank_input(torch.float32, [r + 1, 4], r) for r in range(hvd.size())])
    assert_equal(y.cpu(), want)


def test_alltoall_device_result(dev):
    n = hvd.size()
    splits = [(hvd.rank() + j) % 3 for j in range(n)]
    x = queued(torch.arange(sum(splits) * 2, dtype=torch.float32).reshape(-1, 2)
               + 100 * hvd.rank(), dev)
    out, received = hvd.alltoall(x, splits=splits)
    assert out.device == dev
    assert received.device.type == "cpu" and received.dtype == torch.int32
    assert received.tolist() == [(r + hvd.rank()) % 3 for r in range(n)]
    # Splits given as a tensor on the GPU: received_splits is one too (Horovod's
    # splits.new()), whichever device the data is on.
    for data in (x, x.cpu()):
        _, on_gpu = hvd.alltoall(data, splits=torch.tensor(splits, dtype=torch.int32, device=dev))
        assert on_gpu.device == dev and on_gpu.dtype == torch.int32
        assert on_gpu.tolist() == received.tolist()
    parts = []
    for r in range(n):
        s = [(r + j) % 3 for j in range(n)]
        start = sum(s[:hvd.rank()])
        src = torch.arange(sum(s) * 2, dtype=torch.float32).reshape(-1, 2) + 100 * r
        parts.append(src[start:start + s[hvd.rank()]])
    assert_equal(out.cpu(), torch.cat(parts))


def test_reducescatter(dev):
    n, shape = hvd.size(), [2 * hvd.size() + 1, 3]
    x = queued(rank_input(torch.float32, shape, hvd.rank()), dev)
    y = hvd.reducescatter(x, op=hvd.Sum)
    full = expected_reduce(hvd.Sum, torch.float32, shape, list(range(n)))
    rows = [shape[0] // n + (1 if r < shape[0] % n else 0) for r in range(n)]
    start = sum(rows[:hvd.rank()])
    assert_equal(y.cpu(), full[start:start + rows[hvd.rank()]])


@pytest.mark.parametrize("where", ["prescale_factor", "postscale_factor"])
def test_float16_is_scaled_by_the_factor_rounded_to_float16(dev, where):
    """As Horovod's GPU does (a float16 multiply; on the CPU the factor stays float32): the
    result equals torch's float16 product with the factor as a float16 tensor, exactly."""
    factor = 0.1915194503788923  # not a float16: rounding it changes some products
    x = torch.arange(-100, 100, dtype=torch.float16, device=dev)
    want = x * torch.tensor(factor, dtype=torch.float16, device=dev) * hvd.size()
    y = hvd.allreduce(x, op=hvd.Sum, **{where: factor})
    assert torch.equal(y, want)
    in_float32 = (x.float() * factor).half() * hvd.size()
    assert not torch.equal(in_float32, want)  # the case tells the two apart


def test_grouped_allreduce(dev):
    shapes, ranks = [[3], [4, 4], [1]], list(range(hvd.size()))
    xs = [queued(rank_input(torch.float32, s, hvd.rank()), dev) for s in shapes]
    ys = hvd.grouped_allreduce(xs, op=hvd.Sum)
    for y, s in zip(ys, shapes):
        assert_equal((y + 0).cpu(), expected_reduce(hvd.Sum, torch.float32, s, ranks))


def test_a_group_on_two_devices_is_refused(dev):
    with pytest.raises(RuntimeError, match="one device"):  # Horovod's type
        hvd.grouped_allreduce([torch.ones(2, device=dev), torch.ones(2)])


def test_distributed_optimizer_step_equals_the_averaged_gradient(dev):
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 2).to(dev)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    before = [p.detach().cpu().clone() for p in model.parameters()]
    inputs = [torch.arange(12, dtype=torch.float32).reshape(2, 6) / (r + 1)
              for r in range(hvd.size())]
    # The gradient each rank computes, averaged over the ranks, on the CPU.
    grads = []
    for r, x in enumerate(inputs):
        cpu = torch.nn.Linear(6, 2)
        with torch.no_grad():
            for p, b in zip(cpu.parameters(), before):
                p.copy_(b)
        cpu(x).square().sum().backward()
        grads.append([p.grad.clone() for p in cpu.parameters()])
    opt.zero_grad()
    model(inputs[hvd.rank()].to(dev)).square().sum().backward()
    opt.step()
    for i, p in enumerate(model.parameters()):
        avg = sum(g[i] for g in grads) / hvd.size()
        torch.testing.assert_close(p.detach().cpu(), before[i] - 0.5 * avg)


def test_repeated_training_steps_equal_training_without_troika(dev):
    """Identical steps for a few seconds (with troikarun's default schedules they soon run
    scheduled: the host votes, the device reduces) leave the weights of the same steps taken
    without Troika, after every step. Every rank trains on the same batches, so the average
    over ranks is each rank's own gradient."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4)).to(dev)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    reference = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters())
    reference_opt = torch.optim.SGD(reference.parameters(), lr=0.05)
    start, step = time.monotonic(), 0
    # Long enough for schedules to form and then be bucketed (progress reports, ~1 s apart).
    while step < 50 or time.monotonic() - start < 6:
        x = torch.randn(32, 8, generator=torch.Generator().manual_seed(step)).to(dev)
        for m, o in ((model, opt), (reference, reference_opt)):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
        for p, q in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(p, q, msg=lambda m: "step %d: %s" % (step, m))
        step += 1
