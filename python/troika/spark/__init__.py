"""troika.spark: Troika jobs on a Spark cluster, with horovod.spark's ``run`` and
``run_elastic`` (docs/spark.md).

    from pyspark.sql import SparkSession
    import troika.spark

    def train(epochs):
        import troika.torch as hvd
        hvd.init()
        ...
        return hvd.rank(), loss

    spark = SparkSession.builder.getOrCreate()
    results = troika.spark.run(train, args=(3,), num_proc=4)   # one per rank, in rank order

Each rank is one Spark task, which starts the rank as a fresh Python process under a real
troika-agent (troika._agent_rank), attached to a troika-coordinator the driver starts for the
job. ``run`` is a barrier stage: its tasks start together, gather their executors' hosts and
number the ranks host by host. A rank that fails (raises, exits non-zero, is killed) fails
``run`` with its error within seconds. ``run_elastic`` is an elastic Troika job
(docs/elastic.md) on an ordinary stage: lost ranks shrink it and it goes on with the others.
"""

import os
import warnings

from troika.spark._driver import SparkJob

__all__ = ["run", "run_elastic"]


def _spark_context():
    import pyspark
    sc = pyspark.SparkContext._active_spark_context
    if sc is None:
        raise Exception("Could not find an active SparkContext, are you running in a PySpark "
                        "session?")
    return sc


def _start_timeout(start_timeout):
    if start_timeout is None:
        return int(os.getenv("HOROVOD_SPARK_START_TIMEOUT", "600"))
    return start_timeout


def _check_env(env):
    if env is not None and not isinstance(env, dict):
        raise ValueError("env argument must be a dict, not %s: give the variables the ranks "
                         "need over the executors' environment" % type(env))


def run(fn, args=(), kwargs={}, num_proc=None, start_timeout=None, use_mpi=None,
        use_gloo=None, extra_mpi_args=None, env=None, stdout=None, stderr=None, verbose=1,
        nics=None, prefix_output_with_timestamp=False, executable=None):
    """Runs ``fn(*args, **kwargs)`` on ``num_proc`` ranks, each in a Spark task; returns the
    results in rank order.

    num_proc: ranks (Spark tasks), default ``spark.default.parallelism``; they run as one
    barrier stage, so the cluster needs that many task slots at once. start_timeout: seconds
    for every task to start (default $HOROVOD_SPARK_START_TIMEOUT, else 600); also the ranks'
    attach timeout. env: variables over the executors' environment for the ranks. stdout,
    stderr: where the ranks' lines go on the driver (default sys.stdout, sys.stderr), each
    prefixed "[RANK]<stdout>:" or "[RANK]<stderr>:" (with prefix_output_with_timestamp, the
    time first). verbose: 0 says nothing of its own, 1 (default) a line per job. executable:
    the ranks' Python (default: the executor's). use_gloo: accepted (Troika's data plane
    between hosts is Gloo, as Horovod's Gloo mode). use_mpi=True and extra_mpi_args are
    refused: Troika has no MPI. nics: accepted, not used yet (each rank's data plane uses its
    executor's address).

    Raises RuntimeError naming the rank whose failure ended the job (a rank that raised: its
    traceback), TimeoutError ("Timed out waiting for Spark tasks to start. ...") when the
    tasks did not all start in time."""
    if use_mpi:
        raise ValueError("troika.spark: use_mpi=True: Troika runs no MPI; its ranks are "
                         "started by troika-agent and its data plane between hosts is Gloo "
                         "(leave use_mpi unset, or use_gloo=True)")
    if extra_mpi_args:
        raise ValueError("troika.spark: extra_mpi_args=%r: Troika runs no mpirun to pass them "
                         "to" % (extra_mpi_args,))
    _check_env(env)
    sc = _spark_context()
    start_timeout = _start_timeout(start_timeout)
    if num_proc is None:
        num_proc = sc.defaultParallelism
    if num_proc < 1:
        raise ValueError("num_proc must be at least 1, not %d" % num_proc)
    job = SparkJob(sc, fn, args, kwargs, num_proc, start_timeout, env, stdout, stderr,
                   verbose, prefix_output_with_timestamp, executable)
    return job.run()


def run_elastic(fn, args=(), kwargs={}, num_proc=None, min_num_proc=None, max_num_proc=None,
                start_timeout=None, elastic_timeout=None, reset_limit=None, env=None,
                stdout=None, stderr=None, verbose=1, nics=None,
                prefix_output_with_timestamp=False, min_np=None, max_np=None):
    """Runs ``fn(*args, **kwargs)`` as an elastic Troika job (docs/elastic.md) of ``num_proc``
    ranks, each in a Spark task of an ordinary (not barrier) stage; returns the results of the
    ranks that finished, in the order of their last ranks.

    The function trains under ``hvd.elastic.run`` and commits its state (``state.commit()``)
    as under troikarun. A rank lost (it fails, is killed, its task or executor is lost) ends
    the job's generation: the others go on from the last commit as long as at least
    ``min_num_proc`` remain (default num_proc). A task Spark starts again (after its executor
    was lost) starts a rank that joins the job at its next commit, up to ``max_num_proc``
    (default num_proc); the stage has ``max_num_proc`` tasks, and those beyond num_proc join
    the same way. elastic_timeout: how long a generation's ranks have to attach (default
    $HOROVOD_ELASTIC_TIMEOUT, else 600). reset_limit: how many times the job may change its
    ranks (a loss, or joiners admitted at a commit: each new generation is one reset), as
    horovodrun's --reset-limit; at the next change the job is stopped and the call raises
    RuntimeError ("... reset N times, more than reset_limit=L"); 0: no change at all; default
    no limit. min_np, max_np: the old names."""
    if min_np is not None:
        warnings.warn("min_np is deprecated, use min_num_proc instead", DeprecationWarning)
        min_num_proc = min_np
    if max_np is not None:
        warnings.warn("max_np is deprecated, use max_num_proc instead", DeprecationWarning)
        max_num_proc = max_np
    if reset_limit is not None and reset_limit < 0:
        raise ValueError("reset_limit must be at least 0, not %d" % reset_limit)
    _check_env(env)
    sc = _spark_context()
    start_timeout = _start_timeout(start_timeout)
    if num_proc is None:
        num_proc = sc.defaultParallelism
    min_num_proc = num_proc if min_num_proc is None else min_num_proc
    max_num_proc = num_proc if max_num_proc is None else max_num_proc
    if not 1 <= min_num_proc <= num_proc <= max_num_proc:
        raise ValueError("run_elastic needs 1 <= min_num_proc <= num_proc <= max_num_proc, "
                         "not %s, %s, %s" % (min_num_proc, num_proc, max_num_proc))
    if elastic_timeout is None:
        elastic_timeout = int(os.getenv("HOROVOD_ELASTIC_TIMEOUT", "600"))
    job = SparkJob(sc, fn, args, kwargs, num_proc, start_timeout, env, stdout, stderr,
                   verbose, prefix_output_with_timestamp, None, elastic=True,
                   min_np=min_num_proc, max_np=max_num_proc, attach_timeout_s=elastic_timeout,
                   reset_limit=reset_limit)
    return job.run()
