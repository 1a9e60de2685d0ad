"""A troika-coordinator for the jobs of one launcher that runs inside a Python driver
(troika.ray's RayExecutor, troika.spark's run): started on the driver's machine, plaintext,
its Prometheus metrics on a port of their own, and ended with the driver.

    coordinator = JobCoordinator.start(ip, timeout_s=30, owner="troika.spark")
    coordinator.address            # "IP:PORT", what ranks and agents give as TROIKA_COORDINATOR
    coordinator.metrics_address    # "IP:PORT" of its /metrics (docs/metrics.md)
    coordinator.stop()

The jobs' ranks reach it in plaintext (TROIKA_PLAINTEXT=1) and carry their job's token; the
process gets SIGTERM when the driver's process goes (PR_SET_PDEATHSIG), so a driver that is
killed leaves no coordinator behind."""

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from troika._programs import find_program


def _die_with_parent():
    """In the coordinator's child process: SIGTERM when the driver goes (PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)


def _read(path):
    """The file's text, stripped; "" while it does not exist."""
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


class JobCoordinator:
    """A running troika-coordinator process (not thread-safe: one owner starts and stops it)."""

    def __init__(self, process, address, metrics_address, directory):
        self.process = process
        self.address = address
        self.metrics_address = metrics_address
        self._directory = directory

    @classmethod
    def start(cls, ip, timeout_s, owner="troika"):
        """Starts a coordinator listening on `ip` (a port of its choice) and waits until it
        listens. RuntimeError if it exits first, TimeoutError if it does not listen within
        `timeout_s`; both start with `owner` ("troika.ray: ...")."""
        binary = find_program("troika-coordinator")
        directory = tempfile.mkdtemp(prefix="troika-coordinator-")
        port_file = os.path.join(directory, "port")
        with socket.socket() as probe:  # a free port for the metrics
            probe.bind((ip, 0))
            metrics_address = "%s:%d" % (ip, probe.getsockname()[1])
        process = subprocess.Popen(
            [binary, "--listen=%s:0" % ip, "--port_file=" + port_file, "--plaintext",
             "--metrics_listen=" + metrics_address, "--log_level=warning"],
            preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout_s
        while not _read(port_file):
            if process.poll() is not None:
                shutil.rmtree(directory, ignore_errors=True)
                raise RuntimeError("%s: the coordinator %s exited with code %s"
                                   % (owner, binary, process.returncode))
            if time.monotonic() > deadline:
                process.kill()
                process.wait()
                shutil.rmtree(directory, ignore_errors=True)
                raise TimeoutError("%s: the coordinator did not listen within %ss"
                                   % (owner, timeout_s))
            time.sleep(0.02)
        address = "%s:%s" % (ip, _read(port_file))
        return cls(process, address, metrics_address, directory)

    def stop(self, grace_s=10):
        """SIGTERM, then SIGKILL after `grace_s`; waits for the process. Idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self._directory, ignore_errors=True)
