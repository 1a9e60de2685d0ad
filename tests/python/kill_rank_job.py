"""One rank SIGKILLs itself mid-training; the others must raise HorovodInternalError soon after.

Run on every rank by run_kill_test.sh under troikarun, with TROIKA_KILL_TEST_DIR set. Ranks
train a small model with DistributedOptimizer. At step KILL_STEP the victim (rank VICTIM) writes
the time to DIR/killed-at and SIGKILLs itself between its forward and backward pass, so the
others are waiting in allreduces it never submits. Each survivor catches the TroikaError and
writes DIR/rank<R>: "raised-after <seconds since the kill> <message>". A survivor that finishes
its steps without an error writes "no-error"; one that hangs writes nothing (troikarun's agent
ends it). The agent tells the survivors to stop (SIGTERM) 1 s after the victim's exit; they
note that and go on waiting, so the measured time is the runtime's, not the signal's (the agent
still SIGKILLs them 5 s later).
"""

import os
import signal
import sys
import time

import torch

import troika.torch as hvd

VICTIM = 1
KILL_STEP = 3
STEPS = 200


def main():
    out = os.environ["TROIKA_KILL_TEST_DIR"]
    signal.signal(signal.SIGTERM, lambda *_: None)
    hvd.init()
    r = hvd.rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    g = torch.Generator().manual_seed(r)
    try:
        for step in range(STEPS):
            x = torch.randn(16, 32, generator=g)
            loss = model(x).pow(2).mean()
            if r == VICTIM and step == KILL_STEP:
                with open(os.path.join(out, "killed-at.tmp"), "w") as f:
                    f.write("%.6f\n" % time.time())
                os.rename(os.path.join(out, "killed-at.tmp"), os.path.join(out, "killed-at"))
                os.kill(os.getpid(), signal.SIGKILL)
            opt.zero_grad()
            loss.backward()
            opt.step()
    except hvd.HorovodInternalError as e:
        raised = time.time()
        with open(os.path.join(out, "killed-at")) as f:
            killed = float(f.read())
        message = " ".join(str(e).split())
        with open(os.path.join(out, "rank%d" % r), "w") as f:
            f.write("raised-after %.3f %s\n" % (raised - killed, message))
        print("rank %d: raised %.3f s after the kill: %s" % (r, raised - killed, message),
              flush=True)
        sys.exit(0)
    with open(os.path.join(out, "rank%d" % r), "w") as f:
        f.write("no-error\n")


if __name__ == "__main__":
    main()
