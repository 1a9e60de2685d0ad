"""What horovod.ray's RayExecutor does that Horovod's test/single/test_ray.py checks, on
troika.ray (docs/horovod-compat.md, "Ray"), on run_ray_test.py's cluster of two Ray nodes with
2 CPUs and 2 (declared) GPUs each:

1. Ranks on unequal nodes (3 ranks, packed: 2 and 1): each rank's HOROVOD_* variables are its
   rank, local and cross rank and size by Ray node, equal to what troika.torch says; with
   use_gpu, every rank of a node sees the node's GPUs in local rank order (its own at
   local_rank) in CUDA_VISIBLE_DEVICES.
2. Started from inside a placement group, the ranks use it (use_current_placement_group); the
   executable class gets its keyword arguments and sees extra_env_vars; its constructor can
   join the job.
3. A placement the cluster cannot make fails start() with TimeoutError, and shutdown() then
   ends the coordinator.
4. Through Ray Client (ray_client_driver.py, a driver process of its own), a job runs, with its
   coordinator on the cluster, not in the client's process.
"""

import glob
import json
import os
import subprocess
import sys

import ray
from ray.util.placement_group import placement_group, remove_placement_group

import ray_client_driver
from ray_client_driver import rank_view
from ray_cluster import check
from troika.ray import RayExecutor


def horovod_environment_and_gpus():
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=3,
                           use_gpu=True)
    executor.start()
    try:
        views = executor.run(rank_view)
    finally:
        executor.shutdown()
    numbers = [v[2] for v in views]
    # Packed: ranks 0 and 1 on one node, rank 2 on the other. Horovod's numbers: local rank 0
    # is on both nodes (cross size 2), local rank 1 on one (cross size 1).
    check(numbers == [(0, 3, 0, 2, 0, 2), (1, 3, 1, 2, 0, 1), (2, 3, 0, 1, 1, 2)],
          "rank, size, local rank and size, cross rank and size: %s" % numbers)
    check([v[3] for v in views] == [3.0] * 3, "the job's allreduce")
    names = ["RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE"]
    for env, own_gpus, ranks, _ in views:
        got = tuple(int(env.get("HOROVOD_" + n, -1)) for n in names)
        check(got == ranks, "rank %d's HOROVOD_* variables %s, troika.torch's %s"
              % (ranks[0], got, ranks))
        check(len(own_gpus) == 1, "rank %d has Ray's GPUs %s" % (ranks[0], own_gpus))
    hosts = [env.get("HOROVOD_HOSTNAME") for env, _, _, _ in views]
    check(hosts[0] == hosts[1] != hosts[2] and None not in hosts, "HOROVOD_HOSTNAME: %s" % hosts)
    node = [views[0][1][0], views[1][1][0]]
    visible = [env["CUDA_VISIBLE_DEVICES"] for env, _, _, _ in views]
    check(visible == [",".join(node), ",".join(node), views[2][1][0]],
          "CUDA_VISIBLE_DEVICES %s, Ray's GPUs of the ranks %s" % (visible,
                                                                  [v[1] for v in views]))
    print("ok: HOROVOD_* by Ray node on nodes of 2 and 1 ranks; each node's GPUs visible")


def infeasible_placement():
    settings = RayExecutor.create_settings(timeout_s=60, placement_group_timeout_s=1)
    # 5 ranks of 1 CPU on 4 CPUs; 3 hosts on 2 nodes.
    for kwargs in ({"num_workers": 5}, {"num_hosts": 3, "num_workers_per_host": 1}):
        executor = RayExecutor(settings, **kwargs)
        try:
            executor.start()
            raise AssertionError("start() placed %s on 2 nodes of 2 CPUs" % kwargs)
        except TimeoutError:
            pass
        check(ray_client_driver.coordinators_started_here(), "start() started no coordinator")
        executor.shutdown()
        check(not ray_client_driver.coordinators_started_here(),
              "shutdown() after a failed start() left the coordinator running")
    print("ok: a placement the cluster cannot make fails start() with TimeoutError")


class _Scaled:
    """An executable class: joins the job in its constructor."""

    def __init__(self, scale):
        import troika.torch as hvd
        hvd.init()
        self.value = hvd.rank() * scale


@ray.remote(num_cpus=0)
class _Launcher:
    """A driver inside a placement group (its tasks and actors captured into it)."""

    def run(self):
        settings = RayExecutor.create_settings(timeout_s=60, placement_group_timeout_s=20)
        executor = RayExecutor(settings, num_workers=3)
        executor.start(executable_cls=_Scaled, executable_kwargs={"scale": 3},
                       extra_env_vars={"TKRAY_EXTRA": "given"})
        try:
            return executor.execute(lambda e: (
                e.value, os.environ.get("TKRAY_EXTRA"),
                ray.util.get_current_placement_group().id.hex()))
        finally:
            executor.shutdown()


def inside_a_placement_group():
    pg = placement_group([{"CPU": 1}] * 3, strategy="PACK")
    ray.get(pg.ready(), timeout=60)
    try:
        launcher = _Launcher.options(placement_group=pg,
                                     placement_group_capture_child_tasks=True).remote()
        results = ray.get(launcher.run.remote(), timeout=300)
    finally:
        remove_placement_group(pg)
    expected = [(3 * rank, "given", pg.id.hex()) for rank in range(3)]
    check(results == expected, "ranks inside a placement group: %s, not %s"
          % (results, expected))
    print("ok: ranks in the caller's placement group; executable kwargs; extra_env_vars")


def _client_server_logs(cluster_dir):
    """The tails of Ray Client's server logs in the cluster's directory (which stop() removes)."""
    tails = []
    for path in sorted(glob.glob(os.path.join(cluster_dir, "session_latest", "logs",
                                              "ray_client_server*"))):
        with open(path, errors="replace") as f:
            tails.append("--- %s:\n%s" % (os.path.basename(path), f.read()[-2000:]))
    return "\n".join(tails)


def through_ray_client(cluster):
    out = subprocess.run([sys.executable, ray_client_driver.__file__, cluster.client_address],
                         capture_output=True, text=True, timeout=300)
    check(out.returncode == 0, "the Ray Client driver failed:\n%s\nRay Client's server logs:\n%s"
          % (out.stderr[-3000:], _client_server_logs(cluster.dir)))
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    check([n[:2] for n in seen["numbers"]] == [[0, 2], [1, 2]],
          "ranks through Ray Client: %s" % seen["numbers"])
    check(seen["metrics"] == ["troika_jobs_started_total 1"],
          "the job coordinator's metrics: %s" % seen["metrics"])
    check(seen["here"] == [], "the coordinator runs in the Ray Client's process (%s), not on "
          "the cluster" % seen["here"])
    check(all(0 <= t < 10 for t in seen["lost_after"]),
          "the ranks failed %s s after their coordinator's actor was killed" % seen["lost_after"])
    check(all("coordinator" in e for e in seen["lost_errors"]),
          "the ranks' errors do not name the coordinator: %s" % seen["lost_errors"])
    print("ok: a job through Ray Client, its coordinator on the cluster; its coordinator's actor "
          "killed: both ranks failed %s s after, naming it (%s); shutdown() after it"
          % (seen["lost_after"], seen["lost_errors"][0][:160]))
