"""The training both launchers run in tests/python/ray/run_ray_test.py: a float64 MLP trained
by momentum SGD through troika.torch's DistributedOptimizer on global batches of GLOBAL samples,
each rank taking its share, so the averaged gradient is the global batch's and the weights after
`steps` steps are those of one process trained on the same batches (`reference`), whatever the
number of ranks or the launcher. Run as a script (under troikarun) it prints "weights W" (hex)."""

import sys
import time

import torch

GLOBAL = 60  # samples per step, divisible by 1 to 6 ranks
# How long a wait that proves nothing hung may take (the Ray and Spark tests): far beyond what
# a step, a node's start or a restart takes on a quiet 2-core machine (seconds), since under a
# CPU hog and other tests beside it the first step of a job of 4 Ray actors took over 2
# minutes (2026-12-06).
NOT_HUNG_S = 600


def _data(steps):
    g = torch.Generator().manual_seed(5)
    inputs = torch.randn(steps, GLOBAL, 8, generator=g, dtype=torch.float64)
    targets = torch.randn(steps, GLOBAL, 1, generator=g, dtype=torch.float64)
    return inputs, targets


def _model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 1)).double()


def weights(model):
    return " ".join(float(v).hex() for p in model.parameters() for v in p.detach().flatten())


def train(steps, step_sleep=0.0, progress=None, start=0, state=None, after_step=None):
    """On every rank of a job: returns (rank, size, local_rank, local_size, cross_rank,
    cross_size, weights). `progress`: a file rank 0 touches after each step. From a checkpoint:
    `start`, the first step, and `state`, (model, optimizer) state dicts as `after_step(step,
    model, optimizer)`, called after each step, may have saved them."""
    import troika.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    inputs, targets = _data(steps)
    model = _model()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if state is not None:
        model.load_state_dict(state[0])
        sgd.load_state_dict(state[1])
    opt = hvd.DistributedOptimizer(sgd, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    n, r = hvd.size(), hvd.rank()
    for s in range(start, steps):
        share = slice(r * GLOBAL // n, (r + 1) * GLOBAL // n)
        opt.zero_grad()
        # The mean over the rank's share, scaled to the global mean once averaged over ranks.
        loss = torch.nn.functional.mse_loss(model(inputs[s][share]), targets[s][share],
                                            reduction="sum") * n / GLOBAL
        loss.backward()
        opt.step()
        if progress and r == 0:
            with open(progress, "w") as f:
                f.write(str(s))
        if after_step:
            after_step(s, model, sgd)
        if step_sleep:
            time.sleep(step_sleep)
    out = (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(),
           hvd.cross_size(), weights(model))
    hvd.shutdown()
    return out


def elastic_train(pid_dir, steps, step_sleep, gate=None):
    """An elastic job's training (hvd.elastic.run, a commit per step), run by troika.spark's
    run_elastic and troika.ray's elastic RayExecutor: every rank takes the whole global batch,
    so the averaged gradient is the batch's whatever the number of ranks, and the weights are
    `reference(steps)`'s after any loss or admission, if the job goes on from its commits.
    Each rank writes its pid to PID_DIR/rank-R (R: TROIKA_RANK, as it started); rank 0 writes
    "STEP SIZE" to PID_DIR/progress after each step (`progress()` reads it). With `gate` (a
    path), the ranks that have made every step go on committing (so that the job can still
    lose and admit ranks) until rank 0 sees that file; they leave together (a rank that left
    on its own look would fail the others' next commit: "can never complete: rank R has shut
    down"). Returns (rank, size, weights) as it ended."""
    import os
    import troika.torch as hvd
    torch.set_num_threads(1)
    with open(os.path.join(pid_dir, "rank-%s" % os.environ["TROIKA_RANK"]), "w") as f:
        f.write(str(os.getpid()))
    hvd.init()
    inputs, targets = _data(steps)
    model = _model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, opt, step=0)

    def report():
        if hvd.rank() == 0:
            with open(os.path.join(pid_dir, "progress.tmp"), "w") as f:
                f.write("%d %d" % (state.step, hvd.size()))
            os.replace(os.path.join(pid_dir, "progress.tmp"), os.path.join(pid_dir, "progress"))

    @hvd.elastic.run
    def loop(state):
        while state.step < steps:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(inputs[state.step]), targets[state.step],
                                         reduction="sum").div(GLOBAL).backward()
            opt.step()
            state.step += 1
            state.commit()
            report()
            time.sleep(step_sleep)
        while gate and not hvd.broadcast_object(os.path.exists(gate), name="gate"):
            state.commit()
            report()
            time.sleep(step_sleep)

    loop(state)
    return hvd.rank(), hvd.size(), weights(model)


def logged(value, step_sleep=0.0):
    """Sends the driver two dicts through troika.ray.ray_logger (horovod.ray.ray_logger's
    log), {"rank": R, "pid": P, "n": 0 and 1}; returns `value`. For a RayExecutor's run()
    with callbacks (run_ray_test.py, elastic_case.py)."""
    import os
    from troika.ray import ray_logger
    for n in range(2):
        ray_logger.log({"rank": int(os.environ.get("TROIKA_RANK", "-1")), "pid": os.getpid(),
                        "n": n})
        time.sleep(step_sleep)
    return value


def logged_elastic_train(pid_dir, steps, step_sleep, gate=None):
    """elastic_train, after logging as `logged` does (an elastic job's ranks are processes
    under troika-agents: their dicts travel through their actors)."""
    logged(None)
    return elastic_train(pid_dir, steps, step_sleep, gate)


def progress(path):
    """(step, size) from elastic_train's progress file; (0, 0) before its first step."""
    try:
        with open(path) as f:
            fields = f.read().split()
    except FileNotFoundError:
        return 0, 0
    return (int(fields[0]), int(fields[1])) if len(fields) == 2 else (0, 0)


TOLERANCE = 1e-9  # relative: float64 sums in another order, over tens of steps


def close(a, b):
    """Whether weights `a` and `b` (`weights`' hex) are equal within TOLERANCE."""
    x = [float.fromhex(v) for v in a.split()]
    y = [float.fromhex(v) for v in b.split()]
    return len(x) == len(y) and all(abs(p - q) <= TOLERANCE * max(abs(q), 1e-12)
                                    for p, q in zip(x, y))


def weights_under_troikarun(troikarun, steps):
    """The weights of this job of 4 ranks under troikarun."""
    import os
    import subprocess
    out = subprocess.run([troikarun, "-np", "4", "--", sys.executable,
                          os.path.abspath(__file__), str(steps)],
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise AssertionError("the job under troikarun failed:\n" + out.stderr[-3000:])
    return out.stdout.split("weights", 1)[1].split("\n", 1)[0]


def reference(steps):
    """One process, no Troika: the weights every rank must end with."""
    torch.set_num_threads(1)
    inputs, targets = _data(steps)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for s in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(inputs[s]), targets[s], reduction="sum").div(
            GLOBAL).backward()
        opt.step()
    return weights(model)


if __name__ == "__main__":
    print("weights", train(int(sys.argv[1]))[-1], flush=True)
