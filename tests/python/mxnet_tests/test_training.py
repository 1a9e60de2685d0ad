"""troika.mxnet's training wrappers on a Gluon model: DistributedTrainer (every variant Horovod
has: num_groups, compression, gradient_predivide_factor, prefix, process sets) and
DistributedOptimizer give every rank the same weights, equal to one process training on the
concatenated batch."""

import mxnet as mx
import numpy as np
import pytest

import troika.mxnet as hvd

LOCAL_BATCH = 4
STEPS = 5


def make_net(seed):
    mx.random.seed(seed)
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(16, activation="relu"), mx.gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier())
    net(mx.nd.ones((1, 8)))  # shapes known
    return net


def global_batch(step):
    rng = np.random.RandomState(100 + step)
    x = rng.randn(LOCAL_BATCH * hvd.size(), 8).astype(np.float32)
    y = rng.randint(0, 3, size=(LOCAL_BATCH * hvd.size(),)).astype(np.float32)
    return x, y


def train(net, trainer, batch_of, steps=STEPS):
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    for step in range(steps):
        x, y = batch_of(step)
        with mx.autograd.record():
            loss = loss_fn(net(mx.nd.array(x)), mx.nd.array(y))
        loss.backward()
        trainer.step(x.shape[0])
    return {name: p.data().asnumpy() for name, p in net.collect_params().items()}


def local_batch(step):
    x, y = global_batch(step)
    lo = hvd.rank() * LOCAL_BATCH
    return x[lo:lo + LOCAL_BATCH], y[lo:lo + LOCAL_BATCH]


def reference(seed):
    """One process, the whole batch, a plain Trainer."""
    net = make_net(seed)
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5},
                               kvstore=None)
    return [w for _, w in sorted(train(net, trainer, global_batch).items())]


def same_on_every_rank(weights, name):
    for i, w in enumerate(weights):
        gathered = hvd.allgather(mx.nd.array(w[None]), name="%s.%d" % (name, i)).asnumpy()
        for other in gathered:
            np.testing.assert_array_equal(other, w)


@pytest.mark.parametrize("variant", [
    dict(),
    dict(num_groups=2),
    dict(gradient_predivide_factor=2.0),
    dict(compression=hvd.Compression.fp16),
])
def test_distributed_trainer_equals_one_process_on_the_whole_batch(variant):
    net = make_net(seed=hvd.rank())  # every rank starts elsewhere
    hvd.broadcast_parameters(net.collect_params(), root_rank=0, prefix="trainer.%s." % variant)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.5},
                                     prefix="v%d." % len(str(variant)), **variant)
    got = [w for _, w in sorted(train(net, trainer, local_batch).items())]
    want = reference(seed=0)
    tol = 2e-2 if "compression" in variant else 1e-5
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    same_on_every_rank(got, "trainer.check.%d" % len(str(variant)))


def test_distributed_optimizer_in_a_trainer_equals_one_process():
    net = make_net(seed=hvd.rank() + 10)
    hvd.broadcast_parameters(net.collect_params(), root_rank=0, prefix="opt.")
    opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.5))
    trainer = mx.gluon.Trainer(net.collect_params(), opt, kvstore=None)
    got = [w for _, w in sorted(train(net, trainer, local_batch).items())]
    want = reference(seed=10)  # rank 0's start
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    same_on_every_rank(got, "opt.check")


def test_two_trainers_with_prefixes():
    net1, net2 = mx.gluon.nn.Dense(5, in_units=4), mx.gluon.nn.Dense(6, in_units=4)
    net1.initialize()
    net2.initialize()
    hvd.broadcast_parameters(net1.collect_params(), prefix="net1")
    hvd.broadcast_parameters(net2.collect_params(), prefix="net2")
    t1 = hvd.DistributedTrainer(net1.collect_params(), "sgd", {"learning_rate": 0.1},
                                prefix="net1")
    t2 = hvd.DistributedTrainer(net2.collect_params(), "sgd", {"learning_rate": 0.1},
                                prefix="net2")
    for _ in range(3):
        x = mx.nd.ones((2, 4)) * (hvd.rank() + 1)
        with mx.autograd.record():
            a, b = net1(x).sum(), net2(x).sum()
        mx.autograd.backward([a, b])
        t1.step(1)
        t2.step(1)
    same_on_every_rank([p.data().asnumpy() for p in net1.collect_params().values()], "two.1")
    same_on_every_rank([p.data().asnumpy() for p in net2.collect_params().values()], "two.2")


def test_a_trainer_unwraps_a_distributed_optimizer():
    net = mx.gluon.nn.Dense(2, in_units=2)
    net.initialize()
    with pytest.warns(UserWarning, match="unwrapped"):
        hvd.DistributedTrainer(net.collect_params(),
                               hvd.DistributedOptimizer(mx.optimizer.SGD()), prefix="unwrap")


def test_distributed_optimizer_in_a_process_set_averages_only_there():
    members = [r for r in range(hvd.size()) if r % 2 == 0]
    even = hvd.add_process_set(members)
    try:
        # Test's update: w += rescale_grad * g.
        opt = hvd.DistributedOptimizer(mx.optimizer.Test(rescale_grad=10.0), process_set=even)
        w = mx.nd.zeros((3, 4))
        g = mx.nd.ones((3, 4)) * (hvd.rank() + 1)
        opt.update(0, w, g, opt.create_state(0, w))
        if hvd.rank() in members:
            mean = np.mean([r + 1 for r in members])
            np.testing.assert_allclose(w.asnumpy(), 10.0 * mean, rtol=1e-6)
        else:
            np.testing.assert_allclose(w.asnumpy(), 10.0 * (hvd.rank() + 1), rtol=1e-6)
    finally:
        hvd.remove_process_set(even)
