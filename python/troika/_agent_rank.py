"""One rank of a Python function, run under a real troika-agent: for launchers whose engine
gives them one process slot per rank (a Spark task; a Ray actor of an elastic job), so that the
rank is a fresh process the agent starts, supervises, relays and stops, exactly as under
troikarun (elastic membership, joining nodes and the fail-fast included).

    rank = AgentRank(fn, args, kwargs, RankOptions(coordinator="10.0.0.1:7070", job="j",
                                                   token="...", nnodes=4, node_rank=2,
                                                   host="node-a", data_host="10.0.0.5"),
                     on_line=lambda stream, rank, text: print(stream, rank, text))
    rank.start()
    outcome = rank.wait()      # RankOutcome: ok, value, rank, exit_code, error
    ...
    rank.stop()                # from another thread: SIGTERM to the agent (and so to the rank)
    rank.initialized()         # from another thread: whether fn's hvd.init() has returned

What happens: `fn`, `args` and `kwargs` are pickled with cloudpickle (the package, or the copy
pyspark or Ray ships) into a file in a private directory; the agent is started as

    troika-agent --coordinator C --plaintext true --job J --nnodes N --nproc-per-node 1
                 [--node_rank K] --host H [--data_host A] [--min_np M --max_np X]
                 --stop_with_parent true -- <python> -m troika._agent_rank PAYLOAD RESULT

with the job's token in its environment (TROIKA_JOB_TOKEN), so the rank's process ends when the
caller's process dies (a killed Spark task or actor leaves nothing behind). The rank process
applies `RankOptions.rank_env` over the agent's environment, runs ``fn(*args, **kwargs)`` and
writes ("ok", value) or ("error", exception, traceback) with the rank it ended as (its last
hvd.init()'s, for an elastic job that renumbered it) to RESULT; a function that raises exits 1,
so the agent reports the rank as failed and the coordinator aborts the job (or, elastic, goes on
without it). Every line the rank writes reaches `on_line(stream, rank, text)` ("stdout" or
"stderr", the global rank the agent prefixed it with, or None for the agent's own lines such
as "troika-agent: job aborted: REASON"), as the line arrives; without `on_line` the lines go to
the caller's stdout and stderr as the agent wrote them.

Thread contract: start() and wait() from one thread; stop() from any thread."""

import dataclasses
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from typing import Callable, Dict, Optional

import troika
from troika._programs import find_program

_PREFIX = re.compile(r"^\[(\d+)\] ?(.*)$", re.S)


def _cloudpickle():
    """cloudpickle, or the copy pyspark or Ray ships (functions defined in __main__ or in a
    notebook must travel by value)."""
    for name in ("cloudpickle", "pyspark.cloudpickle", "ray.cloudpickle"):
        try:
            return __import__(name, fromlist=["dumps"])
        except ImportError:
            continue
    raise ImportError("troika: running a function as a rank needs cloudpickle "
                      "(pip install cloudpickle; pyspark and Ray ship a copy)")


@dataclasses.dataclass
class RankOptions:
    """How the rank's agent joins its job (troika-agent's flags; `troika-agent --help`)."""
    coordinator: str                 # HOST:PORT of a plaintext coordinator (TLS: tls_environment)
    job: str                         # the job's name, the same for every rank
    token: str                       # the job's token
    nnodes: int                      # agents (= ranks: one rank each) the job starts with
    host: str                        # the rank's host, which groups ranks into local ranks
    node_rank: Optional[int] = None  # its rank; required where agents share a host; None: the
                                     # lowest free one (an elastic joiner: admitted at a commit)
    data_host: Optional[str] = None  # the address its data-plane peers reach it at
    min_np: Optional[int] = None     # elastic: go on with at least this many ranks
    max_np: Optional[int] = None     # elastic: admit joiners up to this many ranks
    attach_timeout_s: float = 60     # the agent's --attach_timeout
    env: Dict[str, str] = dataclasses.field(default_factory=dict)       # over os.environ
    rank_env: Dict[str, str] = dataclasses.field(default_factory=dict)  # over the agent's
    tls_environment: Optional[Dict[str, str]] = None  # TROIKA_TLS_*: then not plaintext
    executable: str = sys.executable  # the rank's Python
    log_level: str = "warning"


@dataclasses.dataclass
class RankOutcome:
    """How the rank ended. ok: fn returned `value`; otherwise `error` says why (the rank's
    traceback, or the agent's reason, "job aborted: rank 2 on h exited with code 1"), and
    `exception` is what fn raised when it could travel. `rank`: the rank fn ended as, if it
    called hvd.init() (None otherwise). `exit_code`: the agent's (troika-agent --help)."""
    ok: bool
    value: object = None
    rank: Optional[int] = None
    exit_code: Optional[int] = None
    error: str = ""
    exception: Optional[BaseException] = None


class AgentRank:
    """One rank under its own troika-agent (see the module's docstring)."""

    def __init__(self, fn, args, kwargs, options: RankOptions,
                 on_line: Optional[Callable[[str, Optional[int], str], None]] = None):
        self._payload = (fn, tuple(args or ()), dict(kwargs or {}), dict(options.rank_env))
        self._options = options
        self._on_line = on_line
        self._process = None
        self._directory = None
        self._readers = []
        self._agent_lines = []  # the agent's own lines, for the error
        self._lock = threading.Lock()
        self._initialized = False

    def command(self, payload, result):
        """The agent's command line."""
        o = self._options
        command = [find_program("troika-agent"), "--coordinator=" + o.coordinator,
                   "--job=" + o.job, "--nnodes=%d" % o.nnodes, "--nproc-per-node=1",
                   "--host=" + o.host, "--stop_with_parent=true",
                   "--attach_timeout=%gs" % o.attach_timeout_s, "--log_level=" + o.log_level]
        command.append("--plaintext=%s" % ("false" if o.tls_environment else "true"))
        if o.node_rank is not None:
            command.append("--node_rank=%d" % o.node_rank)
        if o.data_host:
            command.append("--data_host=" + o.data_host)
        if o.min_np is not None:
            command.append("--min_np=%d" % o.min_np)
        if o.max_np is not None:
            command.append("--max_np=%d" % o.max_np)
        return command + ["--", o.executable, "-m", "troika._agent_rank", payload, result]

    def start(self):
        """Writes the payload and starts the agent (FileNotFoundError without troika-agent)."""
        self._directory = tempfile.mkdtemp(prefix="troika-rank-")
        payload = os.path.join(self._directory, "payload")
        self._result = os.path.join(self._directory, "result")
        with open(payload, "wb") as f:
            f.write(_cloudpickle().dumps(self._payload))
        env = dict(os.environ)
        env.update({k: str(v) for k, v in self._options.env.items()})
        env.update(self._options.tls_environment or {})
        env["TROIKA_JOB_TOKEN"] = self._options.token
        env["PYTHONUNBUFFERED"] = "1"  # lines as the rank writes them
        # The rank must import this package where the caller did.
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
        self._process = subprocess.Popen(self.command(payload, self._result), env=env,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE)
        for name, pipe in (("stdout", self._process.stdout), ("stderr", self._process.stderr)):
            reader = threading.Thread(target=self._forward, args=(name, pipe), daemon=True)
            reader.start()
            self._readers.append(reader)

    def _forward(self, stream, pipe):
        for raw in iter(pipe.readline, b""):
            text = raw.decode("utf-8", "replace").rstrip("\n")
            match = _PREFIX.match(text)
            rank = int(match.group(1)) if match else None
            if match:
                text = match.group(2)
            else:
                with self._lock:
                    self._agent_lines.append(text)
            if self._on_line is not None:
                self._on_line(stream, rank, text)
            else:
                out = sys.stdout if stream == "stdout" else sys.stderr
                out.write(raw.decode("utf-8", "replace"))
                out.flush()
        pipe.close()

    def wait(self, timeout=None):
        """Blocks until the agent exits (subprocess.TimeoutExpired after `timeout` seconds);
        returns the RankOutcome and removes the private directory."""
        code = self._process.wait(timeout=timeout)
        for reader in self._readers:
            reader.join()
        outcome = RankOutcome(ok=False, exit_code=code)
        try:
            with open(self._result, "rb") as f:
                kind, value, rank, text = pickle.load(f)
            outcome.rank = rank
            if kind == "ok":
                outcome.ok, outcome.value = code == 0, value
            else:
                outcome.exception, outcome.error = value, text
        except FileNotFoundError:
            pass  # the rank never finished fn: the agent says why
        except Exception as e:  # noqa: BLE001 - a result that cannot be read is an error
            outcome.error = "the rank's result could not be read: %s" % e
        if not outcome.ok and not outcome.error:
            with self._lock:
                lines = list(self._agent_lines)
            # Its own rank's end ("troika-agent: rank 2 was killed by signal 9") before the
            # job's ("troika-agent: job aborted: REASON"), before any other line of the agent.
            own = [line for line in lines if re.match(r"troika-agent: rank \d+ ", line)]
            aborted = [line for line in lines if line.startswith("troika-agent: job aborted")]
            other = [line for line in lines if line.startswith("troika-agent:")]
            reasons = own or aborted or other
            outcome.error = (reasons[0] if own else reasons[-1] if reasons else
                             "troika-agent exited with code %s" % code)
        self.initialized()
        shutil.rmtree(self._directory, ignore_errors=True)
        return outcome

    def initialized(self):
        """Whether the rank's hvd.init() has returned once: its job has formed (every rank of
        its first generation attached), or it was admitted to the running job."""
        if not self._initialized and self._directory is not None:
            self._initialized = os.path.exists(os.path.join(self._directory, "initialized"))
        return self._initialized

    def stop(self):
        """SIGTERM to the agent, which stops the rank (SIGKILL after its grace period)."""
        process = self._process
        if process is not None and process.poll() is None:
            try:
                process.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass


def _main(payload_path, result_path):
    """In the rank's process: runs the function, writes its result."""
    last_rank = []

    def remember(context):  # the rank of every init(): an elastic job renumbers
        if context is not None:
            if not last_rank:  # AgentRank.initialized()
                open(os.path.join(os.path.dirname(result_path), "initialized"), "w").close()
            last_rank[:] = [context.rank]

    troika._context_hooks.append(remember)
    with open(payload_path, "rb") as f:
        fn, args, kwargs, rank_env = pickle.load(f)
    os.environ.update({k: str(v) for k, v in rank_env.items()})
    try:
        value = fn(*args, **kwargs)
        result, code = ("ok", value, last_rank[0] if last_rank else None, ""), 0
    except BaseException as e:  # noqa: BLE001 - the caller gets it
        text = traceback.format_exc()
        sys.stderr.write(text)
        result, code = ("error", e, last_rank[0] if last_rank else None, text), 1
    data = None
    try:
        data = _cloudpickle().dumps(result)
    except Exception as e:  # noqa: BLE001 - a value or an exception that cannot travel
        if result[0] == "ok":
            text = "the function's result cannot be pickled: %s" % e
            result, code = ("error", None, result[2], text), 1
        else:
            result = ("error", None, result[2], result[3])
        data = _cloudpickle().dumps(result)
    temporary = result_path + ".tmp"
    with open(temporary, "wb") as f:
        f.write(data)
    os.replace(temporary, result_path)
    sys.stdout.flush()
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1], sys.argv[2]))
