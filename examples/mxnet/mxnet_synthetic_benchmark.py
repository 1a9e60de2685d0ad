#!/usr/bin/env python3
"""Synthetic training benchmark for Gluon (MXNet 1.9), in the manner of Horovod's synthetic
benchmarks and written against the horovod.mxnet API: every rank trains the same model-zoo
network on a fixed random batch and reports images per second.

    PYTHONPATH=build/python build/agent/troikarun -np 2 -- \\
        build/venv-mxnet/bin/python examples/mxnet/mxnet_synthetic_benchmark.py

The implementation is chosen by the environment variable TROIKA_BENCH_IMPL:
- troika (default): `import troika.mxnet as hvd`, hvd.DistributedTrainer;
- horovod: `import horovod.mxnet as hvd`, the same code (launch with horovodrun);
- kvstore: no hvd at all: gluon.Trainer(..., kvstore=mx.kv.create('dist_sync')), MXNet's own
  parameter-server data parallelism; rank and size come from the KVStore. Launch it with
  dmlc_tracker (the wheel's mxnet/tools/launch.py --launcher local -n N -s S ...), which
  starts the scheduler, S servers and N workers on this machine.

The model is one of mxnet.gluon.model_zoo.vision (untrained, --num-classes outputs), hybridized
(static_alloc, static_shape); inputs are 3 x --image-size x --image-size (default 64, small
enough for CPUs), float32. On the CPU every timed iteration ends with mx.nd.waitall(): MXNet's
engine is asynchronous, so the figures are of work done, not work queued.

Output as Horovod's synthetic benchmarks: "Iter #i: X img/sec per CPU" (rank 0's), "Img/sec
per CPU: mean +-ci" and "Total img/sec on N CPU(s): size * mean +-ci" (ci = 1.96 standard
deviations of the iterations), plus every rank's own mean with hvd.
"""

import argparse
import os
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon.model_zoo import vision

IMPL = os.environ.get("TROIKA_BENCH_IMPL", "troika")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Gluon synthetic benchmark (hvd API)",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", type=str, default="resnet18_v1",
                   help="a model of mxnet.gluon.model_zoo.vision (e.g. resnet18_v1, "
                        "resnet50_v1, mobilenet1.0, mobilenetv2_0.5, squeezenet1.1)")
    p.add_argument("--batch-size", type=int, default=16, help="input batch size per rank")
    p.add_argument("--image-size", type=int, default=64, help="input images are 3 x S x S")
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--num-warmup-batches", type=int, default=3,
                   help="batches before the timing starts (the first builds the graph)")
    p.add_argument("--num-batches-per-iter", type=int, default=5,
                   help="batches per timed iteration")
    p.add_argument("--num-iters", type=int, default=10, help="timed iterations")
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate for one rank")
    p.add_argument("--num-groups", type=int, default=0,
                   help="hvd.DistributedTrainer(num_groups=N): N grouped allreduces per step "
                        "(0: one allreduce per gradient)")
    return p.parse_args(argv)


def main():
    args = parse_args()
    ctx = mx.cpu()

    if IMPL == "kvstore":
        hvd = None
        kv = mx.kv.create("dist_sync")
        rank, size = kv.rank, kv.num_workers
    elif IMPL in ("troika", "horovod"):
        if IMPL == "horovod":
            import horovod.mxnet as hvd
        else:
            import troika.mxnet as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
    else:
        raise SystemExit("TROIKA_BENCH_IMPL=%s: expected troika, horovod or kvstore" % IMPL)

    def log(s):
        if rank == 0:
            print(s, flush=True)

    # The same initial weights on every rank even before the broadcast.
    mx.random.seed(0)
    net = vision.get_model(args.model, classes=args.num_classes)
    net.initialize(mx.init.Xavier(magnitude=2), ctx=ctx)
    rng = np.random.default_rng(1)
    data = mx.nd.array(rng.standard_normal(
        (args.batch_size, 3, args.image_size, args.image_size)).astype(np.float32), ctx=ctx)
    label = mx.nd.array(rng.integers(0, args.num_classes, args.batch_size).astype(np.float32),
                        ctx=ctx)
    # One forward pass gives every parameter its shape before the broadcast and the trainer.
    # In training mode: an inference-mode pass on the CPU leaves the convolutions' weights in
    # oneDNN's (MKL-DNN's) layout, which MXNet 1.9.1's dist KVStore cannot push (its init of
    # such a key fails, and the server aborts at the first pull: "init K first").
    with autograd.record():
        net(data)
    net.hybridize(static_alloc=True, static_shape=True)
    params = net.collect_params()
    opt_params = {"learning_rate": args.lr * size, "momentum": 0.9, "wd": 1e-4}
    if hvd is not None:
        hvd.broadcast_parameters(params, root_rank=0)
        extra = {"num_groups": args.num_groups} if args.num_groups > 0 else {}
        trainer = hvd.DistributedTrainer(params, "sgd", opt_params, **extra)
    else:
        # The first step's kvstore.init takes the workers' values (rank 0's at the server) and
        # every worker pulls them.
        trainer = gluon.Trainer(params, "sgd", opt_params, kvstore=kv)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def benchmark_step():
        with autograd.record():
            loss = loss_fn(net(data), label)
        loss.backward()
        trainer.step(args.batch_size)

    def timed(steps):
        start = time.perf_counter()
        for _ in range(steps):
            benchmark_step()
        mx.nd.waitall()
        return time.perf_counter() - start

    log("Model: %s" % args.model)
    log("Implementation: %s" % IMPL)
    log("Batch size: %d" % args.batch_size)
    log("Image size: %d" % args.image_size)
    log("Number of CPUs: %d" % size)
    log("Running warmup...")
    timed(args.num_warmup_batches)
    log("Running benchmark...")
    img_secs = []
    for x in range(args.num_iters):
        t = timed(args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / t
        log("Iter #%d: %.1f img/sec per CPU" % (x, img_sec))
        img_secs.append(img_sec)
    mean = float(np.mean(img_secs))
    conf = 1.96 * (float(np.std(img_secs, ddof=1)) if len(img_secs) > 1 else 0.0)
    log("Img/sec per CPU: %.1f +-%.1f" % (mean, conf))
    log("Total img/sec on %d CPU(s): %.1f +-%.1f" % (size, size * mean, size * conf))
    if hvd is not None:
        per_rank = hvd.allgather(mx.nd.array([mean], dtype="float64"),
                                 name="img_sec_means").asnumpy().tolist()
        log("Img/sec of each rank: %s (sum %.1f)"
            % (", ".join("%.1f" % m for m in per_rank), sum(per_rank)))


if __name__ == "__main__":
    main()
