"""One rank SIGKILLs itself mid-training with troika.mxnet; the others must raise soon after.

Run on every rank by run_kill_test.sh (TROIKA_KILL_TEST_IMPORT=mxnet) under troikarun, with
TROIKA_KILL_TEST_DIR set: kill_rank_job.py's protocol, on a Gluon model with
DistributedTrainer. At step KILL_STEP the victim writes the time to DIR/killed-at and SIGKILLs
itself before its backward pass, so the others' allreduces, pushed onto MXNet's engine, wait for
a rank that never submits. Each survivor catches the failure, raised where it reads the loss
(MXNetError from the engine, or HorovodInternalError from the next submission), and writes
DIR/rank<R>: "raised-after <seconds since the kill> <message>".
"""

import os
import signal
import sys
import time

import mxnet as mx
from mxnet.base import MXNetError

import troika.mxnet as hvd

VICTIM = 1
KILL_STEP = 3
STEPS = 200


def main():
    out = os.environ["TROIKA_KILL_TEST_DIR"]
    signal.signal(signal.SIGTERM, lambda *_: None)
    hvd.init()
    r = hvd.rank()
    mx.random.seed(r)
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(64, activation="relu"), mx.gluon.nn.Dense(4))
    net.initialize()
    hvd.broadcast_parameters(net.collect_params(), root_rank=0)
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.01})
    try:
        for step in range(STEPS):
            x = mx.nd.random.normal(shape=(16, 32))
            with mx.autograd.record():
                loss = (net(x) ** 2).mean()
            if r == VICTIM and step == KILL_STEP:
                with open(os.path.join(out, "killed-at.tmp"), "w") as f:
                    f.write("%.6f\n" % time.time())
                os.rename(os.path.join(out, "killed-at.tmp"), os.path.join(out, "killed-at"))
                os.kill(os.getpid(), signal.SIGKILL)
            loss.backward()
            trainer.step(16)
            # Reading a weight waits for the update, which waits for its allreduce.
            net[0].weight.data().wait_to_read()
    except (MXNetError, hvd.HorovodInternalError) as e:
        raised = time.time()
        with open(os.path.join(out, "killed-at")) as f:
            killed = float(f.read())
        message = " ".join(str(e).split())
        with open(os.path.join(out, "rank%d" % r), "w") as f:
            f.write("raised-after %.3f %s\n" % (raised - killed, message))
        print("rank %d: raised %.3f s after the kill: %s" % (r, raised - killed, message[:300]),
              flush=True)
        os._exit(0)  # the engine still holds the failed operations
    with open(os.path.join(out, "rank%d" % r), "w") as f:
        f.write("no-error\n")


if __name__ == "__main__":
    main()
    sys.exit(0)
