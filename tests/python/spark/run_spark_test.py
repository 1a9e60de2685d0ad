"""run_spark_test.py TROIKARUN: troika.spark on a real Spark cluster, `local-cluster[2,2,1024]`
(a master, 2 workers and 2 executors of 2 cores each, started by pip's pyspark in this
process's JVM), as a Spark user runs it (docs/spark.md); one Spark session for every case:

1. run(): a PyTorch job of 4 ranks (tests/python/ray/ray_training.py, the training the Ray test
   runs) whose weights are bit for bit the same on every rank and equal (float64, 1e-9) to one
   process trained on the same batches and to the same job under troikarun; local ranks by
   executor host; the ranks' lines reach the driver's stdout/stderr prefixed "[RANK]<stdout>:".
2. troika.tensorflow (DistributedGradientTape) and troika.keras (model.fit, Keras 3 on
   TensorFlow 2.21, the version of the build's op library) in 4 ranks: every rank's weights
   equal one process's (tests/python/ray/tf_training.py; a rank killed in model.fit is
   run_ray_test.py's, the engine's fail-fast is case 3's).
3. The job's coordinator's metrics show it while it trains; a rank killed (SIGKILL) while it
   trains fails run() within 5 s, naming the rank; the next run() works.
4. run_elastic(): 4 ranks (min 2) under hvd.elastic.run, one killed mid-training: the job goes
   on with the other 3 from its last commit and finishes with the 1-process weights (within
   its reset_limit=1). With reset_limit=0, a rank killed stops the job: run_elastic() raises
   within 5 s.
5. More tasks than the cluster's slots: run() fails with "Timed out waiting for Spark tasks to
   start." after start_timeout.

Run with the Python of the environment that has pyspark (build/venv-spark); PYTHONPATH must hold
the troika package and tests/python/ray (the executors get it too). Exit 77 without pyspark or
Java."""

import io
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import urllib.request

try:
    import pyspark  # noqa: F401
    from pyspark.sql import SparkSession
except ImportError:
    print("troika.spark test skipped: this Python has no pyspark (scripts/setup.sh "
          "--test-tools makes build/venv-spark)")
    sys.exit(77)
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    print("troika.spark test skipped: no Java (Debian's openjdk-17-jre-headless)")
    sys.exit(77)

import ray_training  # noqa: E402  (tests/python/ray, on PYTHONPATH)
import tf_training  # noqa: E402  (tests/python/ray)
import troika.spark  # noqa: E402

close = ray_training.close


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def spark_session(directory):
    # The executors' Python workers run this Python (with torch) and import troika and
    # ray_training from the same PYTHONPATH, as a user sets them for a cluster.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    home = os.path.dirname(pyspark.__file__)
    return (SparkSession.builder.master("local-cluster[2,2,1024]").appName("troika-spark-test")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.test.home", home)
            .config("spark.local.dir", os.path.join(directory, "local"))
            .config("spark.sql.warehouse.dir", os.path.join(directory, "warehouse"))
            .config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
            .getOrCreate())


# --- the functions the ranks run (defined here: they travel by value) ---------------------------

def train_and_say(steps, **kwargs):
    import os
    print("rank %s says hello with %s" % (os.environ["TROIKA_RANK"],
                                          os.environ.get("TROIKA_SPARK_TEST_VARIABLE")))
    print("rank %s to stderr" % os.environ["TROIKA_RANK"], file=sys.stderr)
    return ray_training.train(steps, **kwargs)


def train_writing_pid(pid_dir, steps, **kwargs):
    import os
    with open(os.path.join(pid_dir, "rank-%s" % os.environ["TROIKA_RANK"]), "w") as f:
        f.write(str(os.getpid()))
    return ray_training.train(steps, **kwargs)


# --- the cases ----------------------------------------------------------------------------------

def training_matches(troikarun):
    out, err = io.StringIO(), io.StringIO()
    results = troika.spark.run(train_and_say, args=(30,), num_proc=4, start_timeout=120,
                               stdout=out, stderr=err,
                               env={"TROIKA_SPARK_TEST_VARIABLE": "from-env"})
    check([r[:6] for r in results] == [(r, 4, r, 4, 0, 1) for r in range(4)],
          "rank, size, local rank and size, cross rank and size (4 tasks on one host): %s"
          % [r[:6] for r in results])
    weights = {r[6] for r in results}
    check(len(weights) == 1, "the ranks' weights differ")
    got = weights.pop()
    check(close(got, ray_training.reference(30)), "the weights are not the 1-process reference's")
    under_troikarun = ray_training.weights_under_troikarun(troikarun, 30)
    check(close(got, under_troikarun), "the weights differ from the job under troikarun's")
    for rank in range(4):
        check("[%d]<stdout>:rank %d says hello with from-env\n" % (rank, rank)
              in out.getvalue(),
              "rank %d's line on the driver's stdout: %r" % (rank, out.getvalue()))
        check("[%d]<stderr>:rank %d to stderr\n" % (rank, rank) in err.getvalue(),
              "rank %d's line on the driver's stderr: %r" % (rank, err.getvalue()))
    print("ok: 4 ranks in 4 Spark tasks on 2 executors, the weights of 1 process and of "
          "troikarun, the ranks' output on the driver, env reaches the ranks")


def tensorflow_and_keras(troikarun):
    """troika.tensorflow and troika.keras in the ranks (tests/python/ray/tf_training.py)."""
    started = time.time()
    out = io.StringIO()
    try:
        results = troika.spark.run(tf_training.train, args=(6,), num_proc=4, start_timeout=120,
                                   stdout=out, stderr=out, verbose=0,
                                   env={"TF_CPP_MIN_LOG_LEVEL": "3"})
    except Exception:
        print(out.getvalue()[-5000:])
        raise
    facts = tf_training.check_results(results, 4, os.path.dirname(os.path.dirname(
        os.path.abspath(troikarun))), check)
    print("ok: troika.tensorflow and troika.keras (Keras %s on TensorFlow %s, the op library of "
          "the build) in 4 Spark tasks: the weights of 1 process (%.1f s)"
          % (facts["keras"], facts["tensorflow"], time.time() - started))


def wait_for(path, runner, outcome, what):
    deadline = time.time() + ray_training.NOT_HUNG_S
    while not os.path.exists(path):
        check(time.time() < deadline and runner.is_alive(), "%s: %s" % (what, outcome))
        time.sleep(0.05)


def kill_at_step(pid_dir, runner, outcome, step, rank):
    """Once the elastic job in `runner` has trained `step` steps, SIGKILLs the process of
    `rank` (ray_training.elastic_train's files in pid_dir); returns the time of the kill."""
    progress = os.path.join(pid_dir, "progress")
    wait_for(progress, runner, outcome, "the elastic job did not train")
    while ray_training.progress(progress)[0] < step:
        check(runner.is_alive(), "the elastic job ended early: %s" % outcome)
        time.sleep(0.05)
    killed = time.time()
    os.kill(int(open(os.path.join(pid_dir, "rank-%d" % rank)).read()), signal.SIGKILL)
    return killed


def metrics_and_a_killed_rank():
    pid_dir = tempfile.mkdtemp(prefix="tkspark-")
    progress = os.path.join(pid_dir, "progress")
    err = io.StringIO()
    outcome = {}

    def run():
        try:
            troika.spark.run(train_writing_pid, args=(pid_dir, 100000), num_proc=4,
                             kwargs={"step_sleep": 0.01, "progress": progress},
                             start_timeout=120, stderr=err)
            outcome["error"] = None
        except Exception as e:  # noqa: BLE001 - the test looks at it
            outcome["error"] = e
        outcome["at"] = time.time()

    runner = threading.Thread(target=run)
    runner.start()
    wait_for(progress, runner, outcome, "the job did not train")
    # The job and its metrics, as troika.spark says them on the driver's stderr.
    first = err.getvalue().splitlines()[0]
    job = first.split("troika.spark: job ", 1)[1].split()[0]
    metrics = first.split("metrics http://", 1)[1].split("/metrics")[0]
    text = urllib.request.urlopen("http://%s/metrics" % metrics, timeout=10).read().decode()
    line = 'troika_job_ranks{troika_job="%s"} 4' % job
    check(line in text, "the coordinator's metrics do not show the job (%s)" % line)
    pid = int(open(os.path.join(pid_dir, "rank-2")).read())
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    runner.join(timeout=60)
    check(not runner.is_alive(), "run() still waits 60 s after a rank was killed")
    check(outcome["error"] is not None, "run() returned after a rank was killed")
    took = outcome["at"] - killed
    check(took < 5, "run() raised %.1f s after the kill" % took)
    message = str(outcome["error"])
    check("rank 2 " in message and "signal 9" in message,
          "run()'s error names the rank and the signal: %s" % message)
    print("ok: metrics show the job; a killed rank failed run() in %.2f s: %s"
          % (took, message.splitlines()[0][:200]))
    shutil.rmtree(pid_dir, ignore_errors=True)
    # num_proc: spark.default.parallelism (4 cores) by default.
    check(troika.spark.run(lambda: 7, start_timeout=120) == [7] * 4, "run() after a failed one")


def elastic_goes_on():
    pid_dir = tempfile.mkdtemp(prefix="tkspark-")
    steps = 60
    outcome = {}

    def run():
        try:
            outcome["results"] = troika.spark.run_elastic(
                ray_training.elastic_train, args=(pid_dir, steps, 0.05), num_proc=4,
                min_num_proc=2, reset_limit=1,  # the one loss below is within the limit
                start_timeout=120, elastic_timeout=60, verbose=0)
        except Exception as e:  # noqa: BLE001 - the test looks at it
            outcome["error"] = e

    runner = threading.Thread(target=run)
    runner.start()
    kill_at_step(pid_dir, runner, outcome, 10, 3)
    runner.join(timeout=300)
    check(not runner.is_alive(), "run_elastic() still runs 300 s after the kill")
    check("error" not in outcome, "run_elastic() failed: %s" % outcome.get("error"))
    results = outcome["results"]
    check([r[:2] for r in results] == [(0, 3), (1, 3), (2, 3)],
          "the 3 survivors' ranks and size, in rank order: %s" % [r[:2] for r in results])
    weights = {r[2] for r in results}
    check(len(weights) == 1, "the survivors' weights differ")
    check(close(weights.pop(), ray_training.reference(steps)),
          "the survivors' weights are not the 1-process reference's")
    print("ok: run_elastic went on with 3 ranks after one was killed and finished with the "
          "1-process weights")
    shutil.rmtree(pid_dir, ignore_errors=True)


def elastic_reset_limit():
    """reset_limit=0: the job's first change of ranks (a rank killed) stops it."""
    pid_dir = tempfile.mkdtemp(prefix="tkspark-")
    outcome = {}
    quiet = io.StringIO()

    def run():
        try:
            outcome["results"] = troika.spark.run_elastic(
                ray_training.elastic_train, args=(pid_dir, 100000, 0.02), num_proc=2,
                min_num_proc=1, reset_limit=0, start_timeout=120, elastic_timeout=60,
                verbose=0, stdout=quiet, stderr=quiet)
        except Exception as e:  # noqa: BLE001 - the test looks at it
            outcome["error"] = e
        outcome["at"] = time.time()

    started = time.time()
    runner = threading.Thread(target=run)
    runner.start()
    killed = kill_at_step(pid_dir, runner, outcome, 3, 1)
    runner.join(timeout=60)
    check(not runner.is_alive(), "run_elastic() still runs 60 s after the kill")
    message = str(outcome.get("error"))
    check("reset 1 times, more than reset_limit=0" in message,
          "run_elastic() must fail past reset_limit=0: %s" % outcome)
    took = outcome["at"] - killed
    check(took < 5, "run_elastic() raised %.1f s after the kill" % took)
    print("ok: run_elastic(reset_limit=0) stopped at its first loss, %.2f s after the kill "
          "(%.1f s in all): %s" % (took, time.time() - started, message))
    shutil.rmtree(pid_dir, ignore_errors=True)


def start_timeout():
    started = time.time()
    try:
        troika.spark.run(lambda: 0, num_proc=8, start_timeout=5, verbose=0)
    except TimeoutError as e:
        check(str(e).startswith("Timed out waiting for Spark tasks to start."), str(e))
        took = time.time() - started
        check(took < 60, "the timeout took %.1f s" % took)
        print("ok: 8 tasks on 4 slots: run() timed out in %.1f s" % took)
        return
    raise AssertionError("run() of 8 tasks on 4 slots did not time out")


def main():
    troikarun = sys.argv[1]
    directory = tempfile.mkdtemp(prefix="tkspark-session-")
    started = time.time()
    spark = spark_session(directory)
    spark.sparkContext.setLogLevel("ERROR")
    print("the Spark session started in %.1f s" % (time.time() - started))
    try:
        training_matches(troikarun)
        tensorflow_and_keras(troikarun)
        metrics_and_a_killed_rank()
        elastic_goes_on()
        elastic_reset_limit()
        start_timeout()
    finally:
        spark.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
