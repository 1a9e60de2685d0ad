"""Helpers for scripts that run Troika jobs as processes and watch them from outside: the
elastic tests (run_elastic_test.py) and the elastic recovery benchmark
(bench/elastic_recovery.py, which puts this folder on sys.path).

Jobs are started in a session of their own (start), so that stopping or killing one reaches
every process it started (stop, kill, wait_or_kill).
"""

import os
import signal
import subprocess
import time


def read(path):
    """The text of a file; "" if it does not exist (yet)."""
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def can_import(python, modules):
    """Whether the interpreter `python` (a path that may not exist: a test venv not made) imports
    `modules` (a comma-separated list, as an import statement takes them)."""
    try:
        return subprocess.call([python, "-c", "import " + modules], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL) == 0
    except OSError:
        return False


def parent_of(pid):
    """The parent pid of a running process (from /proc)."""
    stat = read("/proc/%d/stat" % pid)
    return int(stat[stat.rfind(")") + 1:].split()[1])


class WaitFailed(RuntimeError):
    """wait_for gave up: the time ran out, or the process watched exited first."""


def wait_for(predicate, timeout, what, process=None, interval=0.02):
    """Calls `predicate` every `interval` seconds until it returns a true value, and returns
    that. WaitFailed ("timed out waiting for <what>", or "... exited ...") if `timeout`
    seconds pass, or if `process` (a Popen) exits first."""
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if process is not None and process.poll() is not None:
            raise WaitFailed("the process exited (code %s) while waiting for %s"
                             % (process.returncode, what))
        if time.time() > deadline:
            raise WaitFailed("timed out waiting for " + what)
        time.sleep(interval)


def start(command, out_path, err_path, shell=False):
    """Starts `command` (a list, or a string with `shell`) in a session of its own, its
    stdout and stderr written to the two files."""
    with open(out_path, "w") as out, open(err_path, "w") as err:
        return subprocess.Popen(command, shell=shell, stdout=out, stderr=err,
                                start_new_session=True)


def kill(process):
    """SIGKILL to the process's session (see start), then waits for the process."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def stop(process, grace=30):
    """SIGTERM to the process's session, SIGKILL after `grace` seconds."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        kill(process)


def wait_or_kill(process, timeout):
    """The process's exit code; None if it did not exit within `timeout` seconds (it is then
    killed, with its session)."""
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(process)
        return None


def agent_command(troikarun_stderr, ranks=None):
    """The troika-agent command that troikarun prints for adding ranks to an elastic job
    (the line after "... to add N more on this machine:"; `ranks`: only for N == ranks), or
    None if it printed none."""
    marker = "more on this machine" if ranks is None else "to add %d more on this machine" % ranks
    lines = troikarun_stderr.splitlines()
    for i, line in enumerate(lines[:-1]):
        if marker in line:
            return lines[i + 1].strip()
    return None
