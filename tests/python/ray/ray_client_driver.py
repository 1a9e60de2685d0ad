"""A Ray Client driver (run_ray_test.py runs it as a process of its own, with the cluster's
token in its environment): `ray_client_driver.py HOST:PORT` runs a job of 2 ranks through Ray
Client at HOST:PORT and prints, as JSON, each rank's numbers, whether the job's coordinator's
metrics count (the jobs it started), and the coordinators this process started (none: it runs
on the cluster); then a second job whose coordinator's actor is killed while the ranks train:
how long the ranks took to fail, and their error (shutdown() must not raise after it)."""

import json
import os
import sys
import urllib.request

import ray

from ray_training import NOT_HUNG_S  # this directory, on PYTHONPATH
from troika.ray import RayExecutor


def rank_view():
    """On a rank: its variables, its own GPUs from Ray, and troika.torch's numbers."""
    import torch
    import troika.torch as hvd
    hvd.init()
    env = {k: v for k, v in os.environ.items()
           if k.startswith("HOROVOD_") or k == "CUDA_VISIBLE_DEVICES"}
    total = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item()
    numbers = (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(),
               hvd.cross_size())
    hvd.shutdown()
    return env, [str(i) for i in ray.get_gpu_ids()], numbers, total


def train_until_failure(ready_dir, seconds):
    """On a rank: allreduces until one fails, having written ready_dir/<rank> after the first;
    returns the time of the failure and its error, or raises after `seconds` without one."""
    import time
    import torch
    import troika.torch as hvd
    hvd.init()
    hvd.allreduce(torch.tensor([1.0]))
    open(os.path.join(ready_dir, str(hvd.rank())), "w").close()
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            hvd.allreduce(torch.tensor([1.0]))
        except Exception as e:  # noqa: BLE001 - what the test reports
            return time.time(), "%s: %s" % (type(e).__name__, e)
        time.sleep(0.01)
    raise AssertionError("no allreduce failed within %d s of the coordinator's loss" % seconds)


def a_lost_coordinator():
    """A job whose coordinator's actor is killed while its ranks allreduce: (seconds from the
    kill to the ranks' failures, their errors)."""
    import tempfile
    import time
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2)
    executor.start()
    ready_dir = tempfile.mkdtemp(prefix="tkray-client-")  # the ranks run on this machine
    try:
        refs = executor.run_remote(train_until_failure, args=[ready_dir, NOT_HUNG_S])
        deadline = time.time() + NOT_HUNG_S
        while len(os.listdir(ready_dir)) < 2:  # until both ranks train
            if time.time() > deadline:
                raise AssertionError("the ranks did not train within %d s" % NOT_HUNG_S)
            time.sleep(0.05)
        killed = time.time()
        ray.kill(executor._coordinator_host)  # the actor, and its coordinator with it
        failures = ray.get(refs, timeout=NOT_HUNG_S)
    finally:
        executor.shutdown()  # must not raise: the coordinator's actor is gone
    return [round(at - killed, 2) for at, _ in failures], [error for _, error in failures]


def coordinators_started_here():
    """The troika-coordinator processes whose parent is this process."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                program = f.read().split(b"\0")[0]
        except (OSError, ValueError):
            continue
        if int(fields[1].split()[1]) == os.getpid() and program.endswith(b"troika-coordinator"):
            found.append(int(entry))
    return found


def main(address):
    """A Ray Client driver (a process of its own): a job of 2 ranks; prints what it saw."""
    ray.init("ray://" + address)
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=2)
    executor.start()
    try:
        views = executor.run(rank_view)
        metrics = urllib.request.urlopen("http://%s/metrics" % executor.metrics_address,
                                         timeout=10).read().decode()
        started = [line for line in metrics.splitlines()
                   if line.startswith("troika_jobs_started_total")]
    finally:
        executor.shutdown()
    after, errors = a_lost_coordinator()
    print(json.dumps({"numbers": [v[2] for v in views], "metrics": started,
                      "here": coordinators_started_here(), "lost_after": after,
                      "lost_errors": errors}))


if __name__ == "__main__":
    main(sys.argv[1])
