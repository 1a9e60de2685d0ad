"""troika.ray's elastic execution: ``RayExecutor(settings, min_workers=M, max_workers=X, ...)``
(horovod.ray's elastic arguments; docs/ray.md, "Elastic execution").

The job is a Troika elastic job (docs/elastic.md). Each rank is a Ray actor on a node of its
own choosing (one slot: ``cpus_per_worker`` CPUs and, with ``use_gpu``, ``gpus_per_worker``
GPUs) that runs the function as one rank under a real ``troika-agent`` (troika._agent_rank),
with ``--min_np M --max_np X``. The driver:

- waits (up to ``elastic_timeout``) until the alive Ray nodes have slots for M ranks, and starts
  the job with as many as they have, up to X, numbered node by node (a node's ranks are its
  local ranks, its host the Ray node);
- watches: a rank that fails or whose actor dies (killed, its node lost) is lost to the job,
  which goes on with the survivors from its last commit while at least M remain (the
  coordinator's decision), and its node is blacklisted (for good, or for a cooldown drawn from
  ``cooldown_range`` that doubles with each failure, as horovodrun's);
- grows: once the job has formed, free slots on alive nodes that are not blacklisted (a node
  that joined the cluster, a node back from its cooldown) get new ranks up to X, which the job
  admits at its next commit;
- counts resets as horovodrun does, one per change of the job's hosts: a node's ranks lost
  count once (until ranks are admitted again), and the ranks started in one look at the free
  slots count once; past ``reset_limit`` the job is stopped;
- returns, once every rank has ended, the results of the ranks that finished, in the order of
  the ranks they ended as; if none finished, raises the first failure;
- with ``run()``'s ``callbacks``, calls them (from its loop) with what the ranks pass to
  troika.ray.ray_logger.log, which their actors forward to a queue (ray_logger.py).
"""

import os
import random
import secrets
import shutil
import sys
import tempfile
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from troika._agent_rank import AgentRank, RankOptions, RankOutcome
from troika.ray import ray_logger

__all__ = ["ElasticJob"]


class _ElasticWorker:
    """One rank of an elastic job: a Ray actor whose rank process runs under its own agent.
    Threaded (max_concurrency), so that initialized() and stop() answer while run() waits."""

    def __init__(self):
        self._rank = None

    def run(self, fn, args, kwargs, options, queue=None):
        """The rank's outcome. `queue`: where the dicts the rank passes to
        troika.ray.ray_logger.log go (through a file the rank appends them to)."""
        forwarder = None
        if queue is not None:
            directory = tempfile.mkdtemp(prefix="troika-ray-log-")
            path = os.path.join(directory, "log")
            options.env = dict(options.env, **{ray_logger.ENV: path})
            forwarder = ray_logger.Forwarder(path, queue)
        try:
            self._rank = AgentRank(fn, args, kwargs, options)
            self._rank.start()
            return self._rank.wait()
        finally:
            if forwarder is not None:
                forwarder.stop()
                shutil.rmtree(directory, ignore_errors=True)

    def initialized(self):
        return self._rank is not None and self._rank.initialized()

    def stop(self):
        if self._rank is not None:
            self._rank.stop()


class _Blacklist:
    """Nodes whose rank failed: for good, or (``cooldown_range`` (lo, hi) seconds) for a
    cooldown of lo * 2^(failures - 1) seconds at most hi, plus up to a second of jitter
    (horovodrun's formula, agent/launcher/host_discovery)."""

    def __init__(self, cooldown_range):
        self._range = cooldown_range
        self._failures = {}
        self._until = {}

    def add(self, node_id, now):
        n = self._failures[node_id] = self._failures.get(node_id, 0) + 1
        if self._range is None:
            self._until[node_id] = float("inf")
        else:
            lo, hi = self._range
            self._until[node_id] = now + min(lo * 2 ** (n - 1), hi) + random.random()

    def blocks(self, node_id, now):
        return self._until.get(node_id, 0) > now


class _Rank:
    """The driver's record of one rank's actor."""

    def __init__(self, actor, ref, node_id, host):
        self.actor, self.ref, self.node_id, self.host = actor, ref, node_id, host
        self.initialized = False  # its hvd.init() returned
        self.outcome = None


class ElasticJob:
    """The elastic job of a RayExecutor (see the module's docstring)."""

    POLL_S = 0.5

    def __init__(self, settings, min_workers, max_workers, cpus_per_worker, use_gpu,
                 gpus_per_worker, reset_limit, cooldown_range, elastic_timeout):
        if max_workers is not None and max_workers < min_workers:
            raise ValueError("max_workers (%d) is below min_workers (%d)"
                             % (max_workers, min_workers))
        if cooldown_range is not None and not (0 < cooldown_range[0] <= cooldown_range[1]):
            raise ValueError("cooldown_range is (lower, upper) seconds, 0 < lower <= upper; "
                             "not %r" % (cooldown_range,))
        self.settings = settings
        self.min_workers = min_workers
        self.max_workers = max_workers
        self.cpus_per_worker = cpus_per_worker
        self.use_gpu = use_gpu
        self.gpus_per_worker = gpus_per_worker
        self.reset_limit = reset_limit
        self.cooldown_range = cooldown_range
        self.elastic_timeout = elastic_timeout
        self._ranks = []

    def start(self, coordinator, tls_environment, extra_env_vars):
        self._coordinator = coordinator
        self._tls_environment = tls_environment
        self._env = {k: str(v) for k, v in (extra_env_vars or {}).items()}

    # --- the cluster's slots ----------------------------------------------------------------

    def _slots(self):
        """{node id: (slots, address, host name)} of the alive nodes: the ranks of one slot each
        that their resources hold."""
        slots = {}
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            resources = node.get("Resources", {})
            n = int(resources.get("CPU", 0) // self.cpus_per_worker)
            if self.use_gpu:
                n = min(n, int(resources.get("GPU", 0) // self.gpus_per_worker))
            if n > 0:
                slots[node["NodeID"]] = (n, node["NodeManagerAddress"],
                                         node.get("NodeManagerHostname") or node["NodeManagerAddress"])
        return slots

    def _free(self, blacklist, now):
        """[(node id, address, host name)] with one entry per free slot, node by node."""
        running = {}
        for r in self._ranks:
            if r.outcome is None:
                running[r.node_id] = running.get(r.node_id, 0) + 1
        free = []
        for node_id, (n, address, hostname) in self._slots().items():
            if not blacklist.blocks(node_id, now):
                free += [(node_id, address, hostname)] * max(0, n - running.get(node_id, 0))
        return free

    # --- running ----------------------------------------------------------------------------

    def _spawn(self, fn, args, kwargs, slot, node_rank, queue=None):
        """Starts a rank on `slot` (_free's) without waiting for its actor (a node may die as
        it starts: its run() then fails as any rank's)."""
        node_id, address, hostname = slot
        worker = ray.remote(_ElasticWorker).options(
            num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker, max_concurrency=4,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()
        host = "%s-%s" % (hostname, node_id[:8])  # as RayExecutor's: the Ray node
        options = RankOptions(
            coordinator=self._coordinator, job=self.job, token=self._token, nnodes=self._size,
            host=host, node_rank=node_rank, data_host=address, min_np=self.min_workers,
            max_np=self.max_workers or self._size, attach_timeout_s=self.settings.timeout_s,
            env=self._env, tls_environment=self._tls_environment)
        ref = worker.run.remote(fn, args, kwargs, options, queue)
        self._ranks.append(_Rank(worker, ref, node_id, host))

    def _ended(self, rank):
        """The outcome of a rank whose ref is ready."""
        try:
            return ray.get(rank.ref)
        except ray.exceptions.RayActorError as e:
            return RankOutcome(ok=False, error="its actor on %s died: %s"
                               % (rank.host, str(e).splitlines()[0]))

    def run(self, fn, args, kwargs, callbacks=None):
        """The results of the ranks that finished; `callbacks` get what the ranks log
        (troika.ray.ray_logger), called from this thread while the job runs."""
        feed = ray_logger.Callbacks(callbacks) if callbacks else None
        try:
            return self._run(fn, args, kwargs, feed)
        finally:
            if feed is not None:
                feed.close()

    def _run(self, fn, args, kwargs, feed):
        queue = feed.queue if feed is not None else None
        now = time.monotonic()
        blacklist = _Blacklist(self.cooldown_range)
        deadline = now + self.elastic_timeout
        while True:
            free = self._free(blacklist, time.monotonic())
            if len(free) >= self.min_workers:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    "troika.ray: the cluster's alive nodes have %d slots of %s CPU%s, fewer "
                    "than min_workers=%d, after elastic_timeout=%ss"
                    % (len(free), self.cpus_per_worker,
                       " and %s GPU" % self.gpus_per_worker if self.use_gpu else "",
                       self.min_workers, self.elastic_timeout))
            time.sleep(1)
        initial = free[:self.max_workers] if self.max_workers else free
        self._ranks = []  # none of an earlier run()
        self._size = len(initial)
        self.job = "ray-elastic-%s" % secrets.token_hex(4)
        self._token = os.environ.get("TROIKA_JOB_TOKEN") or secrets.token_hex(16)
        for node_rank, slot in enumerate(initial):
            self._spawn(fn, args, kwargs, slot, node_rank, queue)
        resets = 0
        lost_nodes = set()  # the nodes whose loss counted since the last admission
        formed = finished = False
        failures = []
        try:
            while any(r.outcome is None for r in self._ranks):
                running = [r for r in self._ranks if r.outcome is None]
                ready, _ = ray.wait([r.ref for r in running], num_returns=len(running),
                                    timeout=self.POLL_S)
                if feed is not None:
                    feed.drain()
                now = time.monotonic()
                for r in running:
                    if r.ref not in ready:
                        continue
                    r.outcome = self._ended(r)
                    if r.outcome.ok:
                        finished = True
                    elif r.initialized or not finished:
                        # (A joiner still waiting when the job finished is told so: no loss.)
                        failures.append(r)
                        blacklist.add(r.node_id, now)
                        if r.node_id not in lost_nodes:
                            lost_nodes.add(r.node_id)
                            resets += 1
                        sys.stderr.write("troika.ray: a rank on %s ended: %s\n"
                                         % (r.host, r.outcome.error.strip().splitlines()[-1]
                                            if r.outcome.error.strip() else "failed"))
                if not formed:
                    formed = any(ray.get([r.actor.initialized.remote() for r in running
                                          if r.outcome is None] or [ray.put(False)]))
                for r in self._ranks:
                    if r.outcome is None and not r.initialized and formed:
                        r.initialized = ray.get(r.actor.initialized.remote())
                if self.reset_limit is not None and resets > self.reset_limit:
                    raise RuntimeError("troika.ray: job %s changed membership %d times, more "
                                       "than reset_limit=%d" % (self.job, resets,
                                                                self.reset_limit))
                alive = sum(1 for r in self._ranks if r.outcome is None)
                if formed and not finished:
                    room = (self.max_workers or self._size) - alive
                    slots = self._free(blacklist, now)[:max(0, room)]
                    for slot in slots:
                        self._spawn(fn, args, kwargs, slot, None, queue)  # joins at a commit
                    if slots:
                        resets += 1
                        lost_nodes.clear()
        finally:
            self.stop()
        done = sorted((r for r in self._ranks if r.outcome.ok),
                      key=lambda r: (r.outcome.rank is None, r.outcome.rank))
        if done:
            return [r.outcome.value for r in done]
        first = failures[0] if failures else self._ranks[0]
        error = RuntimeError("troika.ray: elastic job %s failed: the first rank lost, on %s: %s"
                             % (self.job, first.host, first.outcome.error.strip()))
        raise error from first.outcome.exception

    def stop(self):
        """Ends every rank's agent and actor."""
        for r in self._ranks:
            if r.outcome is None:
                try:
                    ray.get(r.actor.stop.remote(), timeout=5)
                except Exception:  # noqa: BLE001 - the actor is gone already
                    pass
        for r in self._ranks:
            ray.kill(r.actor)
