"""troika.spark's driver side: one Troika job run as one Spark job (docs/spark.md).

The driver starts the job's coordinator (troika._job_coordinator) and a channel for its tasks
(troika.spark._channel), then runs one Spark stage of tasks (troika.spark._task.run_task) in a
thread of its own and waits for the first of: every rank's outcome, a rank's failure, Spark's
failure, the start timeout, or (run_elastic's reset_limit) a reset past the limit. Thread
contract: one thread calls SparkJob.run; the channel's threads call _on_message; with a
reset_limit, a watcher thread reads the coordinator's metrics and sets _resets_over (under
_changed)."""

import datetime
import secrets
import socket
import sys
import threading
import time
import urllib.request

from troika._job_coordinator import JobCoordinator
from troika.spark._channel import DriverChannel, decode
from troika.spark._task import TaskSettings, run_task

_job_ids = iter(range(1, 1 << 62))

# After the first failure that says another rank's loss caused it, how long to wait for that
# rank's own report (its traceback), which is the better error.
_ROOT_CAUSE_WAIT_S = 2.0
# After every first-attempt task of an elastic job reported, how long joiners still running
# may take before they are stopped.
_JOINER_GRACE_S = 5.0
# How often an elastic job with a reset_limit reads its coordinator's generations.
_RESETS_POLL_S = 0.25


def _resets(metrics_address):
    """The generations the coordinator's elastic jobs began after their first (its
    troika_membership_changes_total, all reasons; docs/metrics.md): the resets of the job, which
    has the coordinator to itself. None when the metrics cannot be read."""
    try:
        text = urllib.request.urlopen("http://%s/metrics" % metrics_address,
                                      timeout=5).read().decode()
    except OSError:
        return None
    return int(sum(float(line.rsplit(None, 1)[1]) for line in text.splitlines()
                   if line.startswith("troika_membership_changes_total")))


class SparkJob:
    """One run() or run_elastic() call."""

    def __init__(self, spark_context, fn, args, kwargs, num_proc, start_timeout, env, stdout,
                 stderr, verbose, prefix_output_with_timestamp, executable, elastic=False,
                 min_np=None, max_np=None, attach_timeout_s=None, reset_limit=None):
        self._sc = spark_context
        self._fn, self._args, self._kwargs = fn, tuple(args or ()), dict(kwargs or {})
        self._num_proc = num_proc
        self._tasks = max_np if elastic else num_proc
        self._start_timeout = start_timeout
        self._env = dict(env or {})
        self._stdout, self._stderr = stdout, stderr
        self._verbose = verbose
        self._timestamps = prefix_output_with_timestamp
        self._executable = executable
        self._elastic, self._min_np, self._max_np = elastic, min_np, max_np
        self._attach_timeout_s = attach_timeout_s or start_timeout
        self._reset_limit = reset_limit
        self._changed = threading.Condition()
        # Guarded by _changed:
        self._connected = set()       # (index, attempt) of the tasks that reached the driver
        self._outcomes = {}           # (index, attempt) -> outcome message
        self._spark_error = None
        self._spark_done = False
        self._resets_over = None      # the resets counted once past reset_limit
        self._output_lock = threading.Lock()

    # --- the tasks' messages ------------------------------------------------------------------

    def _on_message(self, index, attempt, message):
        kind = message.get("kind")
        if kind == "line":
            self._write(message)
            return
        with self._changed:
            if kind == "running":
                self._connected.add((index, attempt))
            elif kind == "outcome":
                self._connected.add((index, attempt))
                self._outcomes[(index, attempt)] = message
            self._changed.notify_all()

    def _write(self, message):
        out = self._stdout if message["stream"] == "stdout" else self._stderr
        out = out or (sys.stdout if message["stream"] == "stdout" else sys.stderr)
        rank = message.get("rank")
        prefix = "[%s]<%s>:" % ("" if rank is None else rank, message["stream"])
        if self._timestamps:
            prefix = datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y") + prefix
        with self._output_lock:
            out.write(prefix + message["text"] + "\n")
            if hasattr(out, "flush"):
                out.flush()

    # --- running --------------------------------------------------------------------------

    def run(self):
        ip = socket.gethostbyname(self._sc.getConf().get("spark.driver.host")
                                  or socket.gethostname())
        coordinator = JobCoordinator.start(ip, self._start_timeout, owner="troika.spark")
        key = secrets.token_hex(16)
        channel = DriverChannel(ip, key, self._on_message)
        self.job = "spark-%s" % secrets.token_hex(4)
        self.metrics_address = coordinator.metrics_address
        group = "troika.spark.run.%d" % next(_job_ids)
        settings = TaskSettings(
            driver=channel.address, key=key, coordinator=coordinator.address, job=self.job,
            token=secrets.token_hex(16), num_proc=self._num_proc, fn=self._fn,
            args=self._args, kwargs=self._kwargs, env=self._env, executable=self._executable,
            attach_timeout_s=self._attach_timeout_s, elastic=self._elastic,
            min_np=self._min_np, max_np=self._max_np)
        spark = threading.Thread(target=self._run_spark, args=(settings, group), daemon=True)
        done = threading.Event()
        try:
            if self._verbose >= 1:
                (self._stderr or sys.stderr).write("troika.spark: job %s of %d ranks (%s); coordinator %s, "
                                 "metrics http://%s/metrics\n"
                                 % (self.job + "-a0", self._num_proc,
                                    "elastic %d to %d" % (self._min_np, self._max_np)
                                    if self._elastic else "a barrier stage",
                                    coordinator.address, coordinator.metrics_address))
            spark.start()
            if self._elastic and self._reset_limit is not None:
                threading.Thread(target=self._watch_resets, daemon=True,
                                 args=(coordinator.metrics_address, done)).start()
            return self._wait(channel)
        except BaseException:
            self._sc.cancelJobGroup(group)
            raise
        finally:
            done.set()
            spark.join(timeout=30)
            channel.close()
            coordinator.stop()

    def _run_spark(self, settings, group):
        try:
            self._sc.setJobGroup(group, "troika.spark job %s" % settings.job,
                                 interruptOnCancel=True)
            rdd = self._sc.parallelize(range(self._tasks), self._tasks)
            if not self._elastic:
                rdd = rdd.barrier()
            rdd.mapPartitions(lambda _: [run_task(settings)]).collect()
        except Exception as e:  # noqa: BLE001 - the waiting thread raises it
            with self._changed:
                self._spark_error = e
        finally:
            with self._changed:
                self._spark_done = True
                self._changed.notify_all()

    def _watch_resets(self, metrics_address, done):
        """reset_limit, as horovodrun's --reset-limit (troikarun's: the job fails once it has
        begun more generations after its first than the limit)."""
        while not done.wait(_RESETS_POLL_S):
            resets = _resets(metrics_address)
            if resets is not None and resets > self._reset_limit:
                with self._changed:
                    self._resets_over = resets
                    self._changed.notify_all()
                return

    def _wait(self, channel):
        started = time.monotonic()
        failed_at = None
        first_done = None
        with self._changed:
            while True:
                # In the order they arrived: the rank that failed first is the likely cause.
                failures = [(k, m) for k, m in self._outcomes.items() if not m["ok"]]
                if self._resets_over is not None:
                    for index, attempt in self._connected - set(self._outcomes):
                        channel.stop_task(index, attempt)
                    raise RuntimeError(
                        "troika.spark: elastic job %s-a0 reset %d times, more than "
                        "reset_limit=%d: stopped" % (self.job, self._resets_over,
                                                     self._reset_limit))
                if self._elastic:
                    result = self._elastic_progress(channel, first_done)
                    if result is not None:
                        return result
                    if first_done is None and self._first_attempts_done():
                        first_done = time.monotonic()
                elif failures:
                    failed_at = failed_at or time.monotonic()
                    own = [m for _, m in failures if not _caused_by_another(m)]
                    if own or time.monotonic() - failed_at > _ROOT_CAUSE_WAIT_S or \
                            len(self._outcomes) == self._num_proc:
                        raise RuntimeError(_failure_text((own or [m for _, m in failures])[0]))
                elif len(self._outcomes) == self._num_proc:
                    return self._in_rank_order(self._outcomes.values())
                if self._spark_done and not (self._elastic and self._outcomes):
                    if self._spark_error is not None:
                        raise RuntimeError("troika.spark: the Spark job failed: %s"
                                           % _first_line(self._spark_error)) \
                            from self._spark_error
                    if len(self._outcomes) < self._num_proc:
                        raise RuntimeError("troika.spark: the Spark job ended with %d of %d "
                                           "ranks' outcomes"
                                           % (len(self._outcomes), self._num_proc))
                if len(self._connected) < self._num_proc and \
                        time.monotonic() - started > self._start_timeout:
                    raise TimeoutError(
                        "Timed out waiting for Spark tasks to start. %d of %d tasks started "
                        "within %ss: each rank runs in a Spark task, and a barrier stage needs "
                        "a slot for every task at once; check that the cluster has the cores, "
                        "or give a larger start_timeout (HOROVOD_SPARK_START_TIMEOUT)"
                        % (len(self._connected), self._num_proc, self._start_timeout))
                self._changed.wait(timeout=0.1)

    def _first_attempts_done(self):
        return all((i, 0) in self._outcomes for i in range(self._num_proc))

    def _elastic_progress(self, channel, first_done):
        """An elastic job is over when every task that started reported, or when the first
        tasks did and the joiners still running had their grace; then the ranks that finished
        give their results, in the order of their last ranks. Below the minimum: an error."""
        running = self._connected - set(self._outcomes)
        over = self._spark_done or (self._first_attempts_done() and not running)
        if not over and first_done is not None and \
                time.monotonic() - first_done > _JOINER_GRACE_S:
            for index, attempt in running:
                channel.stop_task(index, attempt)
            over = not running
        if not over:
            return None
        finished = [m for m in self._outcomes.values() if m["ok"]]
        if not finished:
            failures = [m for m in self._outcomes.values() if not m["ok"]]
            if failures:
                own = [m for m in failures if not _caused_by_another(m)]
                raise RuntimeError(_failure_text((own or failures)[0]))
            if self._spark_error is not None:
                raise RuntimeError("troika.spark: the Spark job failed: %s"
                                   % _first_line(self._spark_error)) from self._spark_error
            raise RuntimeError("troika.spark: no rank finished")
        return self._in_rank_order(finished)

    @staticmethod
    def _in_rank_order(outcomes):
        ordered = sorted(outcomes, key=lambda m: (m["rank"] is None, m["rank"] or 0))
        return [decode(m["value"]) for m in ordered]


def _caused_by_another(message):
    """True for a rank stopped because the job was aborted (its agent's reason)."""
    return message.get("error", "").startswith("troika-agent: job aborted")


def _failure_text(message):
    rank = message.get("rank")
    error = message.get("error") or "exit code %s" % message.get("exit_code")
    if _caused_by_another(message):
        return "troika.spark: the job failed: %s" % error[len("troika-agent: "):]
    who = "rank %s" % rank if rank is not None else "a rank"
    return "troika.spark: %s failed (exit code %s): %s" % (who, message.get("exit_code"),
                                                            error.rstrip())


def _first_line(error):
    """What a Spark error says: Py4J's first line names only the Java call, so the first line
    that carries an exception's message (the task's Python error) is added."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    cause = [line for line in lines[1:] if line.startswith(("org.apache.spark.SparkException",
                                                            "Caused by"))
             or line.split(":", 1)[0].endswith(("Error", "Exception"))]
    return lines[0] + (" " + cause[-1] if cause else "")
