"""run_ray_test.py TROIKARUN PART: troika.ray's RayExecutor on a real Ray cluster of two nodes that
this test starts on this machine (`ray start --head`, then a second raylet joining it, each with
2 CPUs and a resource of its own), as a Ray user runs it (docs/ray.md):

1. 4 ranks as 2 hosts x 2 workers: each node's ranks are consecutive, local and cross ranks
   follow the Ray nodes, the data plane is hierarchical; a PyTorch job (ray_training.py)
   ends with every rank's weights bit for bit the same, equal (float64, 1e-9) to one process
   trained on the same batches and to the same job under troikarun; execute, execute_single
   and run_remote work on the executable_cls objects; run()'s and execute()'s callbacks get
   what the ranks pass to troika.ray.ray_logger.log.
2. The driver's coordinator's metrics show the job while it trains.
3. A rank's actor killed (SIGKILL) while it trains fails run() within 5 s, naming the loss.
4. troika.tensorflow (DistributedGradientTape) and troika.keras (model.fit, Keras 3 on
   TensorFlow 2.21, the version of the build's op library) in 4 ranks on 2 nodes: every
   rank's weights equal one process's (tf_training.py); a rank killed while the ranks are in
   model.fit fails run() and every other rank's fit raises the abort within 5 s.
5. num_workers=4 (PACK placement) runs too.
6. What Horovod's test_ray.py checks of RayExecutor (executor_surface.py): HOROVOD_* variables
   and GPUs by node on unequal nodes, the caller's placement group, the executable class,
   extra_env_vars, an infeasible placement, Ray Client.
7. Ray Train with troika.ray.train's TroikaConfig: a rank killed after a checkpoint restarts
   the group as a fresh Troika job that resumes from it and ends with troikarun's weights;
   under max_failures=0 fit() fails in seconds (train_case.py).
8. Last, as it takes the second node away: an elastic job (min_workers=2, max_workers=4) loses
   the second node and goes on with 2 ranks, grows back to 4 when a new node joins, and ends
   with the 1-process weights on every rank (elastic_case.py).

PART: "training" (1 to 4), "surface" (5 and 6) or "train_elastic" (7 and 8), each on a cluster
of its own (ctest's python_ray_training, python_ray_surface, python_ray_train_elastic).
Run with the Python of the environment that has Ray (build/venv-ray); PYTHONPATH must hold the
troika package and this directory (the raylets pass it to their workers). Exit 77 without Ray."""

import os
import signal
import sys
import tempfile
import threading
import time
import urllib.request

try:
    import ray_cluster  # first: it sets Ray's authentication up
    import ray
except ImportError:
    print("troika.ray test skipped: this Python has no Ray (scripts/setup.sh --test-tools "
          "makes build/venv-ray)")
    sys.exit(77)

import elastic_case  # noqa: E402  (this directory, on PYTHONPATH)
import executor_surface  # noqa: E402
import ray_training  # noqa: E402
import tf_training  # noqa: E402
import train_case  # noqa: E402
from ray_cluster import Cluster, check, close, weights_under_troikarun  # noqa: E402
from troika.ray import RayExecutor  # noqa: E402

class Executable:
    def __init__(self, value):
        self.value = value


def membership_and_training(reference):
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_hosts=2,
                           num_workers_per_host=2)
    executor.start(executable_cls=Executable, executable_args=[7])
    try:
        where = ray.get([w.where.remote() for w in executor.workers])
        nodes = [node for node, _, _, _ in where]
        check(nodes[0] == nodes[1] and nodes[2] == nodes[3] and nodes[0] != nodes[2],
              "ranks 0-1 and 2-3 must share a node each: %s" % nodes)
        results = executor.run(ray_training.train, args=[train_case.STEPS])
        check([r[:6] for r in results] == [(0, 4, 0, 2, 0, 2), (1, 4, 1, 2, 0, 2),
                                           (2, 4, 0, 2, 1, 2), (3, 4, 1, 2, 1, 2)],
              "rank, size, local rank and size, cross rank and size: %s"
              % [r[:6] for r in results])
        weights = {r[6] for r in results}
        check(len(weights) == 1, "the ranks' weights differ")
        got = weights.pop()
        check(close(got, ray_training.reference(train_case.STEPS)),
              "the weights are not the 1-process reference's")
        check(close(got, reference),
              "the weights differ from the job under troikarun's")
        check(executor.execute(lambda e: e.value * 2) == [14] * 4, "execute")
        check(executor.execute_single(lambda e: e.value + 1) == 8, "execute_single")
        refs = executor.run_remote(lambda x: x + int(os.environ["TROIKA_RANK"]), args=[10])
        check(ray.get(refs) == [10, 11, 12, 13], "run_remote")
        # callbacks: called on the driver with what the ranks pass to ray_logger.log.
        seen, other = [], []
        check(executor.run(ray_training.logged, args=[5], callbacks=[seen.append, other.append])
              == [5] * 4, "run() with callbacks")
        check(sorted(d["rank"] for d in seen) == [0, 0, 1, 1, 2, 2, 3, 3] and other == seen,
              "the callbacks got every rank's 2 dicts: %s, %s" % (seen, other))
        seen = []
        check(executor.execute(lambda e: ray_training.logged(e.value), callbacks=[seen.append])
              == [7] * 4 and len(seen) == 8, "execute() with callbacks: %s" % seen)
    finally:
        executor.shutdown()
    print("ok: 4 ranks on 2 Ray nodes, the weights of 1 process and of troikarun; run() and "
          "execute() call their callbacks with the ranks' ray_logger dicts")


def executor_host(executor, rank):
    """The Troika host of `rank` (its TROIKA_HOST: host name and Ray node)."""
    _, _, hostname, _ = executor._where[rank]
    return "%s-%s" % (hostname, executor._where[rank][0][:8])


def metrics_and_a_killed_rank():
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_hosts=2,
                           num_workers_per_host=2)
    executor.start()
    progress = os.path.join(tempfile.mkdtemp(prefix="tkray-job-"), "progress")
    outcome = {}

    def run():
        try:
            executor.run(ray_training.train, args=[100000],
                         kwargs={"step_sleep": 0.01, "progress": progress})
            outcome["error"] = None
        except Exception as e:  # noqa: BLE001 - the test looks at it
            outcome["error"] = e
        outcome["at"] = time.time()

    runner = threading.Thread(target=run)
    runner.start()
    try:
        deadline = time.time() + ray_cluster.NOT_HUNG_S
        while not os.path.exists(progress):
            check(time.time() < deadline and runner.is_alive(), "the job did not train: %s"
                  % outcome.get("error"))
            time.sleep(0.05)
        text = urllib.request.urlopen("http://%s/metrics" % executor.metrics_address,
                                      timeout=10).read().decode()
        line = 'troika_job_ranks{troika_job="%s"} 4' % executor.job
        check(line in text, "the coordinator's metrics do not show the job (%s)" % line)
        pid = executor._where[2][3]  # its actor is busy: asked at start()
        killed = time.time()
        os.kill(pid, signal.SIGKILL)
        runner.join(timeout=60)
        check(not runner.is_alive(), "run() still waits 60 s after a rank was killed")
        check(outcome["error"] is not None, "run() returned after a rank was killed")
        took = outcome["at"] - killed
        check(took < 5, "run() raised %.1f s after the kill" % took)
        # Whichever learns it first: Ray (the actor died: "rank 2's actor (pid ...) died") or
        # the coordinator, through another rank ("rank 2 on HOST lost the connection").
        message = str(outcome["error"])
        check("rank 2's actor (pid %d" % pid in message or
              "rank 2 on %s" % executor_host(executor, 2) in message,
              "run()'s error names the rank: %s" % message)
        print("ok: metrics show the job; a killed rank failed run() in %.2f s: %s"
              % (took, str(outcome["error"]).splitlines()[0][:200]))
    finally:
        executor.shutdown()


def tensorflow_and_keras(troikarun):
    """troika.tensorflow and troika.keras in the ranks (tf_training.py), then a rank killed
    while the ranks are in Keras' model.fit: every other rank's fit raises the abort."""
    started = time.time()
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_hosts=2,
                           num_workers_per_host=2)
    executor.start(extra_env_vars={"TF_CPP_MIN_LOG_LEVEL": "3"})
    try:
        results = executor.run(tf_training.train, args=[6])
        facts = tf_training.check_results(results, 4, os.path.dirname(os.path.dirname(
            os.path.abspath(troikarun))), check)
        trained = time.time() - started
        progress = os.path.join(tempfile.mkdtemp(prefix="tkray-tf-"), "progress")
        refs = executor.run_remote(tf_training.fit_until_killed, args=[progress])
        deadline = time.time() + ray_cluster.NOT_HUNG_S
        while not os.path.exists(progress):
            check(time.time() < deadline, "the Keras job did not train")
            time.sleep(0.05)
        pid = executor._where[2][3]
        killed = time.time()
        os.kill(pid, signal.SIGKILL)
        try:
            executor._get(refs)  # run()'s wait
            raise AssertionError("run() returned after a rank was killed")
        except RuntimeError as e:
            check("rank 2" in str(e), "run()'s error names the rank: %s" % e)
        failed = time.time() - killed
        for rank in (0, 1, 3):
            kind, message = ray.get(refs[rank], timeout=30)
            check(kind is not None and "rank 2 on %s" % executor_host(executor, 2) in message,
                  "rank %d's model.fit: %s: %s" % (rank, kind, message[:300]))
        aborted = time.time() - killed
        check(aborted < 5, "the other ranks' model.fit raised %.1f s after the kill" % aborted)
    finally:
        executor.shutdown()
    print("ok: troika.tensorflow and troika.keras (Keras %s on TensorFlow %s, the op library "
          "of the build) in 4 ranks on 2 Ray nodes: the weights of 1 process (%.1f s); a rank "
          "killed in model.fit: run() failed in %.2f s, the others' fit raised %s in %.2f s"
          % (facts["keras"], facts["tensorflow"], trained, failed, kind, aborted))


def packed_workers():
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), num_workers=4)
    executor.start()
    try:
        def total():
            import torch
            import troika.torch as hvd
            hvd.init()
            x = hvd.allreduce(torch.tensor([float(hvd.rank())]), op=hvd.Sum).item()
            hvd.shutdown()
            return x
        check(executor.run(total) == [6.0] * 4, "a packed job's allreduce")
    finally:
        executor.shutdown()
    print("ok: num_workers=4, packed")


def arguments():
    for kwargs, error in [({"max_workers": 4}, ValueError),
                          ({"min_workers": 3, "max_workers": 2}, ValueError),
                          ({"min_workers": 2, "num_hosts": 2}, ValueError),
                          ({"num_workers": 2, "min_workers": 2}, ValueError),
                          ({}, ValueError), ({"num_workers": 2, "num_hosts": 2}, ValueError)]:
        try:
            RayExecutor(RayExecutor.create_settings(), **kwargs)
        except error:
            continue
        raise AssertionError("RayExecutor(%s) must raise %s" % (kwargs, error.__name__))
    elastic = RayExecutor(RayExecutor.create_settings(), min_workers=2)
    for method, arguments in [("execute", (len,)), ("execute_single", (len,)),
                              ("run_remote", (len,))]:
        try:
            getattr(elastic, method)(*arguments)
        except NotImplementedError:
            continue
        raise AssertionError("an elastic RayExecutor's %s must raise NotImplementedError"
                             % method)
    print("ok: the arguments horovod.ray refuses are refused, and an elastic executor refuses "
          "execute, execute_single and run_remote")


def timed(case, *args):
    """Runs one case and prints its seconds (the test's log says where its time goes)."""
    start = time.monotonic()
    case(*args)
    print("time: %s %.1f s" % (case.__name__, time.monotonic() - start), flush=True)


# The cases in three parts, each a ctest test of its own on a cluster of its own, with a timeout
# of its own (each part lasts minutes under load; one test of all ran past 20 minutes beside
# stress-ng). Each case: (function, what it takes: "reference" troikarun's weights, "troikarun"
# its path, "cluster" the cluster).
PARTS = {
    "training": [(membership_and_training, "reference"), (metrics_and_a_killed_rank, None),
                 (tensorflow_and_keras, "troikarun")],
    "surface": [(packed_workers, None), (executor_surface.horovod_environment_and_gpus, None),
                (executor_surface.inside_a_placement_group, None),
                (executor_surface.infeasible_placement, None),
                (executor_surface.through_ray_client, "cluster")],
    # The elastic case last: it takes the second node away.
    "train_elastic": [(train_case.ray_train_cases, "reference"),
                      (elastic_case.elastic_shrinks_and_grows, "cluster")],
}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in PARTS:
        print("usage: run_ray_test.py TROIKARUN {%s}" % "|".join(PARTS), file=sys.stderr)
        return 2
    troikarun, part = sys.argv[1], sys.argv[2]
    start = time.monotonic()
    if part == "training":
        arguments()
    needs = {need for _, need in PARTS[part]}
    # The same job's steps under troikarun.
    reference = (weights_under_troikarun(troikarun, train_case.STEPS) if "reference" in needs
                 else None)
    cluster = Cluster()
    cluster.start()
    print("time: the cluster's start (and troikarun's reference) %.1f s"
          % (time.monotonic() - start), flush=True)
    try:
        for case, need in PARTS[part]:
            args = {"reference": (reference,), "troikarun": (troikarun,),
                    "cluster": (cluster,), None: ()}[need]
            timed(case, *args)
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
