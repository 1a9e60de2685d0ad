"""What the Ray tests share (run_ray_test.py and its cases): a Ray cluster of two nodes
on this machine, and the checks on the weights of ray_training.py's job."""

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# The clusters of this process authenticate with a token of their own, whatever
# ~/.ray/auth_token (which any Ray on this machine may write) holds; before Ray's import, which
# reads the mode (so the tests import this module before ray).
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
# The raylets start their workers, and so the ranks, at the priority of the rest of the
# suite, not at Ray's default nice 15: beside other tests (or stress-ng) at nice 0, ranks at
# nice 15 get a few percent of a core (python_ray_train_elastic: 460-784 s beside
# stress-ng --cpu 2, 87 s quiet, about 110 s beside it at nice 0; docs/ray.md).
os.environ["RAY_worker_niceness"] = "0"

import ray  # noqa: E402

from ray_training import NOT_HUNG_S, close, weights_under_troikarun  # noqa: E402,F401  (re-exported)


def check(condition, message):
    if not condition:
        raise AssertionError(message)


class Cluster:
    """A head node and a second raylet on this machine, in a temporary directory of their own.
    stop() ends this cluster's processes alone (not `ray stop`, which ends every Ray cluster
    of the machine's user, other tests' included)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="tkray-", dir="/tmp")  # short: raylet socket paths
        self.ray = os.path.join(os.path.dirname(sys.executable), "ray")
        self.port = 6390 + os.getpid() % 500
        self.address = "127.0.0.1:%d" % self.port
        # Ray Client's server on the head (ray[client]); a port of this cluster's own.
        self.client_address = "127.0.0.1:%d" % (self.port + 1000)

    def start(self):
        # Ray's own helpers (Ray Train's placement-group cleaner) look for the cluster there.
        os.environ["RAY_ADDRESS"] = self.address
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self):
        # 2 GPUs per node, declared (none need exist): Ray gives each actor that asks for one
        # its own id, which troika.ray's use_gpu shows the node's ranks (executor_surface.py).
        common = ["--num-cpus", "2", "--num-gpus", "2", "--disable-usage-stats"]
        # The second raylet takes the head's temporary directory (its sockets, logs) from it.
        subprocess.run([self.ray, "start", "--head", "--port", str(self.port), "--temp-dir",
                        self.dir, "--include-dashboard=false", "--resources",
                        '{"node_a": 2}', "--ray-client-server-port",
                        self.client_address.split(":")[1]] + common,
                       check=True, capture_output=True, timeout=NOT_HUNG_S)
        subprocess.run([self.ray, "start", "--address", self.address, "--resources",
                        '{"node_b": 2}'] + common, check=True, capture_output=True, timeout=NOT_HUNG_S)
        ray.init(address=self.address)
        deadline = time.time() + NOT_HUNG_S
        while len([n for n in ray.nodes() if n["Alive"]]) < 2:
            check(time.time() < deadline, "the second raylet did not join")
            time.sleep(0.2)

    def kill_second_node(self):
        """The second node lost: its raylet and every process under it (its workers, its
        agents) killed at once. Returns its node id (wait_gone waits for Ray to see it go)."""
        node = [n for n in ray.nodes() if n["Alive"] and "node_b" in n["Resources"]][0]
        flag = "--node_id=" + node["NodeID"]
        raylet = None
        for pid in self._processes():
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as f:
                    arguments = f.read().split(b"\0")
            except OSError:
                continue
            if flag.encode() in arguments:
                raylet = pid
        check(raylet is not None, "no raylet with %s" % flag)
        doomed = self._descendants({raylet})
        for pid in doomed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return node["NodeID"]

    @staticmethod
    def wait_gone(node_id):
        """Until Ray has marked the node dead (its health checks: about 10 s)."""
        deadline = time.time() + NOT_HUNG_S
        while any(n["Alive"] for n in ray.nodes() if n["NodeID"] == node_id):
            check(time.time() < deadline, "Ray did not see node %s go" % node_id)
            time.sleep(0.2)

    def add_node(self):
        """A new node (a third raylet here) with what the second had: 2 CPUs, 2 GPUs."""
        alive = len([n for n in ray.nodes() if n["Alive"]])
        subprocess.run([self.ray, "start", "--address", self.address, "--num-cpus", "2",
                        "--num-gpus", "2", "--disable-usage-stats", "--resources",
                        '{"node_c": 2}'], check=True, capture_output=True, timeout=NOT_HUNG_S)
        deadline = time.time() + NOT_HUNG_S
        while len([n for n in ray.nodes() if n["Alive"]]) <= alive:
            check(time.time() < deadline, "the new node did not join")
            time.sleep(0.2)

    @staticmethod
    def _descendants(pids):
        """`pids` and every process under them."""
        parents = {}
        for entry in os.listdir("/proc"):
            try:
                with open("/proc/%s/stat" % entry) as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
        own, grew = set(pids), True
        while grew:
            more = {pid for pid, parent in parents.items() if parent in own} - own
            own |= more
            grew = bool(more)
        return own

    def _processes(self):
        """This cluster's processes: those started with its directory in their command line
        (GCS, raylets, agents) or its GCS port in their --address (Ray Client's proxy and
        its servers, which outlive the head's `ray start` and name no directory), and their
        descendants (the workers rename themselves)."""
        own = set()
        address_suffix = (":%d" % self.port).encode()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    arguments = f.read().split(b"\0")
            except OSError:
                continue
            if any(self.dir.encode() in a or (a.startswith(b"--address=")
                                              and a.endswith(address_suffix))
                   for a in arguments):
                own.add(int(entry))
        return self._descendants(own)

    def stop(self):
        try:
            ray.shutdown()
        finally:
            for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 10)):
                for pid in self._processes():
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
                deadline = time.time() + wait
                while self._processes() and time.time() < deadline:
                    time.sleep(0.1)
            shutil.rmtree(self.dir, ignore_errors=True)
