"""train_case.py: Ray Train's DataParallelTrainer with troika.ray.train's TroikaConfig, as a Ray
Train user runs it (docs/ray.md, "Ray Train"), with Ray's default Train (V2 in Ray 2.60), on
run_ray_test.py's cluster of two Ray nodes (one cluster start for both):

1. 4 ranks train ray_training.py's PyTorch job under FailureConfig(max_failures=1); rank 0
   reports a checkpoint after step CHECKPOINT_AT; once Ray Train has registered it, the test
   kills (SIGKILL) rank VICTIM. Ray Train restarts the group: a fresh Troika job (another job
   name) resumes from the checkpoint. Troika's rank is Ray Train's world rank, local and cross
   ranks follow the Ray nodes; every rank ends with the same weights, equal (float64, 1e-9)
   to the same job under troikarun; fit()'s checkpoint is the one reported.
2. The same kill under max_failures=0: fit() raises within seconds, naming the failure.

(One fit() for the training, the checkpoint and the restart: each fit() costs about 20 s on a
2-core machine.)"""

import os
import shutil
import signal
import tempfile
import threading
import time

import ray
import ray.train

import ray_cluster  # this directory, on PYTHONPATH
import ray_training
from ray_cluster import check, close
from troika.ray.train import TroikaConfig, TroikaTrainer

STEPS = 30
CHECKPOINT_AT = 10  # the step after which rank 0 reports a checkpoint
VICTIM = 2  # the rank the test kills (on the second node)


def train_loop(config):
    """Ray Train's train_loop_per_worker: ray_training.train from the latest checkpoint, if
    any; rank 0 reports a checkpoint after step CHECKPOINT_AT; every rank writes what it ended
    with to config["dir"]. In the first attempt, the ranks wait after the checkpoint's step
    until the test has killed rank VICTIM (config["dir"]/killed), then go on training: the
    kill lands mid-training however slowly Ray Train registers the checkpoint."""
    import torch
    checkpoint = ray.train.get_checkpoint()
    start, state = 0, None
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            saved = torch.load(os.path.join(d, "state.pt"))
        start, state = saved["step"], (saved["model"], saved["optimizer"])
    rank = ray.train.get_context().get_world_rank()
    directory = config["dir"]
    with open(os.path.join(directory, "pid-%d" % rank), "w") as f:
        f.write("%d %s" % (os.getpid(), os.environ["TROIKA_JOB"]))

    def after_step(step, model, optimizer):
        if step + 1 == CHECKPOINT_AT:
            with tempfile.TemporaryDirectory() as d:
                checkpoint = None
                if rank == 0:
                    torch.save({"step": step + 1, "model": model.state_dict(),
                                "optimizer": optimizer.state_dict()}, os.path.join(d, "state.pt"))
                    checkpoint = ray.train.Checkpoint.from_directory(d)
                ray.train.report({"step": step + 1}, checkpoint=checkpoint)
        if start == 0 and step + 1 == CHECKPOINT_AT:
            deadline = time.time() + ray_cluster.NOT_HUNG_S
            while not os.path.exists(os.path.join(directory, "killed")):
                if time.time() > deadline:  # the test failed before its kill: end, not hang
                    raise RuntimeError("rank %d was not killed within %d s of the checkpoint"
                                       % (VICTIM, ray_cluster.NOT_HUNG_S))
                time.sleep(0.05)

    result = ray_training.train(STEPS, start=start, state=state, after_step=after_step)
    with open(os.path.join(directory, "result-%d" % rank), "w") as f:
        f.write(repr((result[:6], result[6], os.environ["TROIKA_JOB"], start)))
    ray.train.report({"step": STEPS})


class CheckpointSeen(ray.train.UserCallback):
    """In Ray Train's controller: a file once a reported checkpoint is registered."""

    def __init__(self, marker):
        self.marker = marker

    def after_report(self, run_context, metrics, checkpoint):
        if checkpoint is not None:
            open(self.marker, "w").close()


def results(directory):
    out = []
    for rank in range(4):
        with open(os.path.join(directory, "result-%d" % rank)) as f:
            out.append(eval(f.read()))  # noqa: S307 - our own repr
    return out


def trainer(directory, storage, name, max_failures, callbacks=()):
    return TroikaTrainer(
        train_loop, train_loop_config={"dir": directory},
        troika_config=TroikaConfig(timeout_s=60),
        scaling_config=ray.train.ScalingConfig(num_workers=4),
        run_config=ray.train.RunConfig(
            name=name, storage_path=storage, callbacks=list(callbacks),
            failure_config=ray.train.FailureConfig(max_failures=max_failures)))


def fit_with_a_kill(storage, name, max_failures):
    """fit() with rank VICTIM killed once the checkpoint is registered: (its outcome, when
    fit() ended after the kill, the directory of the ranks' results, the first job's name)."""
    directory = tempfile.mkdtemp(prefix="tkrt-")
    marker = os.path.join(directory, "checkpoint-seen")
    job = trainer(directory, storage, name, max_failures, callbacks=[CheckpointSeen(marker)])
    outcome = {}

    def fit():
        try:
            outcome["result"] = job.fit()
        except Exception as e:  # noqa: BLE001 - the test looks at it
            outcome["error"] = e
        outcome["at"] = time.time()

    runner = threading.Thread(target=fit)
    runner.start()
    deadline = time.time() + ray_cluster.NOT_HUNG_S
    while not os.path.exists(marker):
        check(time.time() < deadline and runner.is_alive(),
              "no checkpoint registered: %s" % outcome.get("error"))
        time.sleep(0.05)
    with open(os.path.join(directory, "pid-%d" % VICTIM)) as f:
        pid, first_job = f.read().split()
        pid = int(pid)
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    open(os.path.join(directory, "killed"), "w").close()
    runner.join(timeout=ray_cluster.NOT_HUNG_S)
    check(not runner.is_alive(), "fit() still runs %d s after a rank was killed"
          % ray_cluster.NOT_HUNG_S)
    return outcome, outcome["at"] - killed, directory, first_job


def a_killed_rank_restarts(storage, reference):
    outcome, took, directory, first_job = fit_with_a_kill(storage, "restart", 1)
    check("error" not in outcome, "fit() failed after one failure under max_failures=1: %s"
          % outcome.get("error"))
    ranks = results(directory)
    check([r[0] for r in ranks] == [(0, 4, 0, 2, 0, 2), (1, 4, 1, 2, 0, 2), (2, 4, 0, 2, 1, 2),
                                    (3, 4, 1, 2, 1, 2)],
          "rank, size, local rank and size, cross rank and size: %s" % [r[0] for r in ranks])
    check(len({r[1] for r in ranks}) == 1, "the ranks' weights differ")
    check(close(ranks[0][1], reference), "the weights differ from the job under troikarun's")
    jobs = {r[2] for r in ranks}
    check(len(jobs) == 1 and first_job not in jobs,
          "the restarted group is not a fresh Troika job: %s then %s" % (first_job, jobs))
    check({r[3] for r in ranks} == {CHECKPOINT_AT},
          "the restarted group did not resume from the checkpoint: %s" % [r[3] for r in ranks])
    checkpoint = outcome["result"].checkpoint
    check(checkpoint is not None, "fit() returned no checkpoint")
    with checkpoint.as_directory() as d:
        import torch
        check(torch.load(os.path.join(d, "state.pt"))["step"] == CHECKPOINT_AT,
              "fit()'s checkpoint is not the one reported at step %d" % CHECKPOINT_AT)
    shutil.rmtree(directory, ignore_errors=True)
    print("ok: 4 ranks on 2 Ray nodes; rank %d killed under max_failures=1 after the checkpoint "
          "of step %d: Troika job %s, then job %s resumed from it and finished with the weights "
          "of troikarun (%.1f s after the kill)"
          % (VICTIM, CHECKPOINT_AT, first_job, jobs.pop(), took))


def a_killed_rank_fails(storage):
    outcome, took, directory, _ = fit_with_a_kill(storage, "fail", 0)
    error = outcome.get("error")
    check(error is not None, "fit() returned after a rank was killed under max_failures=0")
    check(took < 15, "fit() raised %.1f s after the kill" % took)
    message = str(error)
    # Ray Train's error names the dead worker, or the others' Troika error names the lost rank.
    check("ActorDiedError" in message or "rank %d on" % VICTIM in message,
          "fit()'s error does not name the failure: %s" % message[:2000])
    shutil.rmtree(directory, ignore_errors=True)
    print("ok: rank %d killed under max_failures=0: fit() raised %.1f s after the kill: %s"
          % (VICTIM, took, " ".join(message.split())[:300]))


def ray_train_cases(reference):
    """Both cases; `reference`: the weights of the job of STEPS steps under troikarun."""
    storage = tempfile.mkdtemp(prefix="tkrt-storage-")
    try:
        a_killed_rank_restarts(storage, reference)
        a_killed_rank_fails(storage)
    finally:
        shutil.rmtree(storage, ignore_errors=True)
