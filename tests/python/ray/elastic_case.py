"""troika.ray's elastic execution on the test's Ray cluster (run_ray_test.py runs it last: it
takes the second node away). RayExecutor(min_workers=2, max_workers=4, reset_limit=2) starts
4 ranks, 2 on each node, training ray_training.elastic_train (a commit per step, and commits
without steps after the last until the test opens its gate, so that nothing here depends on
timing); then:

1. the second node is lost (its raylet and every process under it killed): the job goes on
   with the head's 2 ranks, renumbered, from its last commit;
2. a new node joins the cluster (a third raylet, with the resources of the lost one): the
   executor starts 2 ranks there, which the job admits at a commit: it goes on with 4;
3. every rank that ends the job (2 survivors, 2 admitted) has the weights of one process trained
   on the same batches, and the executor returns their results in rank order;
4. run()'s callbacks got the dicts every rank process (the 4, then the 2 joiners) passed to
   troika.ray.ray_logger.log.
"""

import os
import tempfile
import threading
import time

import ray_cluster
import ray_training
from ray_cluster import check, close
from troika.ray import RayExecutor

STEPS = 60
STEP_SLEEP = 0.05


def _wait(what, condition, runner, outcome, timeout=ray_cluster.NOT_HUNG_S):
    deadline = time.time() + timeout
    while not condition():
        check(runner.is_alive(), "the elastic job ended while waiting until %s: %s"
              % (what, outcome))
        check(time.time() < deadline, "not within %d s: %s" % (timeout, what))
        time.sleep(0.05)


def elastic_shrinks_and_grows(cluster):
    pid_dir = tempfile.mkdtemp(prefix="tkray-elastic-")
    progress = os.path.join(pid_dir, "progress")
    gate = os.path.join(pid_dir, "gate")
    # reset_limit=2: the lost node (2 ranks) and the new node (2 ranks) count one reset each.
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60), min_workers=2,
                           max_workers=4, cpus_per_worker=1, elastic_timeout=60, reset_limit=2)
    executor.start()
    outcome = {}
    logs = []

    def run():
        try:
            outcome["results"] = executor.run(ray_training.logged_elastic_train,
                                              args=(pid_dir, STEPS, STEP_SLEEP, gate),
                                              callbacks=[logs.append])
        except Exception as e:  # noqa: BLE001 - the test looks at it
            outcome["error"] = e

    runner = threading.Thread(target=run)
    runner.start()
    try:
        _wait("the job trains with 4 ranks", lambda: ray_training.progress(progress)[0] >= 10
              and ray_training.progress(progress)[1] == 4, runner, outcome)
        lost_at = time.time()
        lost = cluster.kill_second_node()
        _wait("the job goes on with the head's 2 ranks",
              lambda: ray_training.progress(progress)[1] == 2, runner, outcome)
        shrunk_at = ray_training.progress(progress)[0]
        print("elastic: the second node lost; the job went on with 2 ranks in %.1f s, at step %d"
              % (time.time() - lost_at, shrunk_at), flush=True)
        cluster.wait_gone(lost)  # so that the new node is told from it
        joined_at = time.time()
        cluster.add_node()
        _wait("the job grows to 4 ranks again",
              lambda: ray_training.progress(progress)[1] == 4, runner, outcome)
        grown_at = ray_training.progress(progress)[0]
        print("elastic: a new node joined; the job went on with 4 ranks in %.1f s, at step %d"
              % (time.time() - joined_at, grown_at), flush=True)
        open(gate, "w").close()
        runner.join(timeout=ray_cluster.NOT_HUNG_S)
        check(not runner.is_alive(), "the elastic job did not finish")
    finally:
        executor.shutdown()
    check("error" not in outcome, "the elastic job failed: %s" % outcome.get("error"))
    results = outcome["results"]
    check([(r[0], r[1]) for r in results] == [(r, 4) for r in range(4)],
          "the ranks that ended the job: %s" % [(r[0], r[1]) for r in results])
    reference = ray_training.reference(STEPS)
    check(all(close(r[2], reference) for r in results),
          "the ranks' weights are not the 1-process reference's")
    # Every rank process that started (4, then 2 joiners) logged twice through its actor.
    pids = {d["pid"] for d in logs}
    check(len(pids) >= 6 and all(sorted(d["n"] for d in logs if d["pid"] == p) == [0, 1]
                                 for p in pids),
          "run()'s callbacks got each rank's 2 ray_logger dicts: %s" % logs)
    print("ok: elastic: lost a node at step %d (4 -> 2 ranks), a new node's ranks admitted at "
          "step %d (2 -> 4), %d steps with the 1-process weights on every rank"
          % (shrunk_at, grown_at, STEPS), flush=True)
