"""troika.ray: Troika jobs on a Ray cluster, with horovod.ray's ``RayExecutor`` surface
(docs/ray.md).

    from troika.ray import RayExecutor
    settings = RayExecutor.create_settings(timeout_s=30)
    executor = RayExecutor(settings, num_workers=4, cpus_per_worker=1)
    executor.start()
    results = executor.run(train, kwargs={"epochs": 3})   # one result per rank, in rank order
    executor.shutdown()

Each rank is a Ray actor (one process) that runs the function; inside it, ``troika.torch``,
``troika.tensorflow`` or ``troika.keras`` join the job with ``hvd.init()`` as under troikarun.
The job's coordinator is a ``troika-coordinator`` the driver starts on its own node (it ends
with the driver), or one the user runs (``RayExecutor(..., coordinator="host:port")``). Ranks
are numbered node by node (Ray's node of each actor), so that the ranks of a node are
consecutive and ``local_rank``, ``local_size``, ``cross_rank`` and the shared-memory plane
follow the Ray nodes, even for several raylets on one machine. A rank, an actor or a node that
dies fails the job on every rank within seconds (the coordinator aborts it), and ``run`` raises
the first rank's error instead of waiting.
"""

import collections
import os
import secrets
import socket

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from troika._job_coordinator import JobCoordinator
from troika.ray import ray_logger
from troika.ray.elastic import ElasticJob

__all__ = ["RayExecutor"]


class _Settings:
    """What ``RayExecutor.create_settings`` returns (horovod.ray's MiniSettings)."""

    def __init__(self, timeout_s, placement_group_timeout_s, nics, ssh_identity_file):
        self.timeout_s = timeout_s
        self.placement_group_timeout_s = placement_group_timeout_s
        self.nics = nics
        self.ssh_identity_file = ssh_identity_file


class _Worker:
    """One rank: a Ray actor that holds the job's environment and runs functions."""

    executable = None

    def where(self):
        ctx = ray.get_runtime_context()
        return ctx.get_node_id(), ray.util.get_node_ip_address(), socket.gethostname(), os.getpid()

    def gpu_ids(self):
        return [str(i) for i in ray.get_gpu_ids()]

    def update_env_vars(self, env_vars):
        os.environ.update({k: str(v) for k, v in env_vars.items()})

    def env_vars(self):
        return dict(os.environ)

    def start_executable(self, executable_cls=None, executable_args=None, executable_kwargs=None):
        if executable_cls is not None:
            self.executable = executable_cls(*(executable_args or []),
                                             **(executable_kwargs or {}))

    def execute(self, fn):
        return fn(self.executable)

    def set_queue(self, queue):
        """Where troika.ray.ray_logger.log puts the dicts of the functions run here."""
        ray_logger.configure(queue)


class _CoordinatorHost:
    """Under Ray Client, an actor that runs the job's coordinator on the cluster (the client's
    machine may be out of the nodes' reach, as horovod.ray runs its driver side there too); the
    coordinator ends with the actor."""

    def start(self, timeout_s):
        self.coordinator = JobCoordinator.start(ray.util.get_node_ip_address(), timeout_s,
                                                owner="troika.ray")
        return self.coordinator.address, self.coordinator.metrics_address

    def stop(self):
        self.coordinator.stop()


def _horovod_env(hosts):
    """Each rank's HOROVOD_* variables from the hosts of the ranks (a host's ranks consecutive),
    as troikarun's agents and horovod.ray set them: local ranks within a host, cross ranks
    among the ranks of one local rank (the coordinator numbers them the same way)."""
    local_size = collections.Counter(hosts)
    seen, cross_size = collections.Counter(), collections.Counter()
    local, cross = [], []
    for host in hosts:
        local.append(seen[host])
        seen[host] += 1
        cross.append(cross_size[local[-1]])
        cross_size[local[-1]] += 1
    return [{"HOROVOD_RANK": rank, "HOROVOD_SIZE": len(hosts),
             "HOROVOD_LOCAL_RANK": local[rank], "HOROVOD_LOCAL_SIZE": local_size[host],
             "HOROVOD_CROSS_RANK": cross[rank], "HOROVOD_CROSS_SIZE": cross_size[local[rank]],
             "HOROVOD_HOSTNAME": host} for rank, host in enumerate(hosts)]


class RayExecutor:
    """A Troika job whose ranks are Ray actors (horovod.ray.RayExecutor's arguments).

    ``num_workers`` ranks placed by a PACK placement group (each ``cpus_per_worker`` CPUs and,
    with ``use_gpu``, ``gpus_per_worker`` GPUs), or ``num_hosts`` x ``num_workers_per_host``
    ranks with each host's ranks on one node (STRICT_SPREAD). ``use_current_placement_group``
    places them in the placement group the caller runs in, if any. ``coordinator``: the address
    of a coordinator of one's own (its TLS as TROIKA_TLS_* in the driver's environment say; a
    plaintext one needs TROIKA_PLAINTEXT=1); default: one started by the driver.
    ``min_workers`` (and ``max_workers``, ``reset_limit``, ``cooldown_range``,
    ``elastic_timeout``) instead of ``num_workers``: an elastic job (troika.ray.elastic), which
    runs functions with ``run``."""

    @classmethod
    def create_settings(cls, timeout_s=30, ssh_identity_file=None, ssh_str=None,
                        placement_group_timeout_s=100, nics=None):
        """timeout_s: how long the ranks have to attach (and the workers to start);
        placement_group_timeout_s: how long the placement group may take; nics: accepted, not
        used yet (each rank's data plane uses its Ray node's address); ssh_identity_file and
        ssh_str: kept for horovod.ray's signature (Troika does not ssh between Ray nodes)."""
        if ssh_str and ssh_identity_file and not os.path.exists(ssh_identity_file):
            with open(os.open(ssh_identity_file, os.O_CREAT | os.O_WRONLY, 0o600), "w") as f:
                f.write(ssh_str)
        return _Settings(timeout_s, placement_group_timeout_s, nics, ssh_identity_file)

    def __init__(self, settings=None, num_workers=None, num_hosts=None, num_workers_per_host=1,
                 cpus_per_worker=1, use_gpu=False, gpus_per_worker=None,
                 use_current_placement_group=True, min_workers=None, max_workers=None,
                 reset_limit=None, cooldown_range=None, elastic_timeout=600,
                 override_discovery=True, coordinator=None):
        if max_workers and (not min_workers or min_workers <= 0):
            raise ValueError("`max_workers` provided without any positive `min_workers`: "
                             "elastic workloads require a positive `min_workers`")
        if min_workers and num_workers:
            raise ValueError("Both `min_workers` and `num_workers` provided: a job is elastic "
                             "or not")
        self._elastic = None
        if min_workers is not None:
            if num_hosts is not None:
                raise ValueError("an elastic job (min_workers) places its ranks by the nodes' "
                                 "free slots: give cpus_per_worker (gpus_per_worker), not "
                                 "num_hosts")
            self._elastic = ElasticJob(
                settings or RayExecutor.create_settings(), min_workers, max_workers,
                cpus_per_worker, use_gpu, (gpus_per_worker or 1) if use_gpu else 0,
                reset_limit, cooldown_range, elastic_timeout)
            num_workers = min_workers
        if num_workers is None and num_hosts is None:
            raise ValueError("give num_workers, or num_hosts and num_workers_per_host")
        if num_workers is not None and num_hosts is not None:
            raise ValueError("give num_workers or num_hosts, not both")
        self.settings = settings or RayExecutor.create_settings()
        self.num_workers = num_workers or num_hosts * num_workers_per_host
        self.num_hosts = num_hosts
        self.num_workers_per_host = num_workers_per_host
        self.cpus_per_worker = cpus_per_worker
        self.use_gpu = use_gpu
        self.gpus_per_worker = (gpus_per_worker or 1) if use_gpu else 0
        self.use_current_placement_group = use_current_placement_group
        self.coordinator = coordinator
        # The driver's coordinator's metrics (HOST:PORT of /metrics), once started.
        self.metrics_address = None
        self.workers = []
        self._coordinator_process = None
        self._coordinator_host = None
        self._placement_group = None
        self._owns_placement_group = False
        self._started_elastic = False
        self.job = self._job = None

    # --- starting -------------------------------------------------------------------------

    def _start_coordinator(self):
        """A troika-coordinator on the driver's node (under Ray Client, on the cluster), for
        this job only."""
        if ray.util.client.ray.is_connected():
            self._coordinator_host = ray.remote(num_cpus=0)(_CoordinatorHost).remote()
            address, self.metrics_address = ray.get(
                self._coordinator_host.start.remote(self.settings.timeout_s))
            return address
        self._coordinator_process = JobCoordinator.start(
            ray.util.get_node_ip_address(), self.settings.timeout_s, owner="troika.ray")
        # Its Prometheus metrics (docs/metrics.md): executor.metrics_address.
        self.metrics_address = self._coordinator_process.metrics_address
        return self._coordinator_process.address

    def _create_placement_group(self):
        current = ray.util.get_current_placement_group()
        if self.use_current_placement_group and current is not None:
            return current, False
        per_worker = {"CPU": self.cpus_per_worker}
        if self.use_gpu:
            per_worker["GPU"] = self.gpus_per_worker
        if self.num_hosts is not None:
            bundles = [{k: v * self.num_workers_per_host for k, v in per_worker.items()}
                       for _ in range(self.num_hosts)]
            strategy = "STRICT_SPREAD"
        else:
            bundles = [dict(per_worker) for _ in range(self.num_workers)]
            strategy = "PACK"
        pg = placement_group(bundles, strategy=strategy)
        ready, _ = ray.wait([pg.ready()], timeout=self.settings.placement_group_timeout_s)
        if not ready:
            remove_placement_group(pg)
            raise TimeoutError(
                "troika.ray: the placement group of %d bundles %s (%s) was not placed within "
                "%ss: the cluster has not the resources" % (len(bundles), bundles[0], strategy,
                                                           self.settings.placement_group_timeout_s))
        return pg, True

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None,
              extra_env_vars=None):
        """Starts the ranks (actors), numbers them node by node, gives each its job's
        environment (Troika's, the HOROVOD_* variables of troikarun's ranks, with ``use_gpu``
        CUDA_VISIBLE_DEVICES: its node's GPUs, and ``extra_env_vars``), then makes
        ``executable_cls(*executable_args, **executable_kwargs)`` in each (the object
        ``execute`` functions get)."""
        if self.workers or self._started_elastic:
            raise RuntimeError("troika.ray: the executor has started already")
        if self._elastic is not None:
            if executable_cls is not None:
                raise NotImplementedError("troika.ray: an elastic job runs functions (run); "
                                          "it has no executable_cls")
            address = self.coordinator or self._start_coordinator()
            tls = None
            if self.coordinator is not None and not os.environ.get("TROIKA_PLAINTEXT"):
                tls = {k: v for k, v in os.environ.items() if k.startswith("TROIKA_TLS_")}
            self._elastic.start(address, tls, extra_env_vars)
            self._started_elastic = True
            return
        address = self.coordinator or self._start_coordinator()
        self._placement_group, self._owns_placement_group = self._create_placement_group()
        worker_cls = ray.remote(_Worker)
        actors = []
        for i in range(self.num_workers):
            bundle = i // self.num_workers_per_host if self.num_hosts is not None else i
            if not self._owns_placement_group:
                bundle = -1  # anywhere in the caller's placement group
            actors.append(worker_cls.options(
                num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    self._placement_group, placement_group_bundle_index=bundle)).remote())
        where = ray.get([a.where.remote() for a in actors], timeout=self.settings.timeout_s)
        # Ranks node by node, the nodes in the order their first actor came.
        nodes = []
        for node_id, _, _, _ in where:
            if node_id not in nodes:
                nodes.append(node_id)
        order = sorted(range(len(actors)), key=lambda i: (nodes.index(where[i][0]), i))
        self.workers = [actors[i] for i in order]
        self._where = [where[i] for i in order]
        # The job's name on the coordinator (its metrics' troika_job label).
        self.job = self._job = "ray-%s" % secrets.token_hex(4)
        token = os.environ.get("TROIKA_JOB_TOKEN") or secrets.token_hex(16)
        common = {
            "TROIKA_COORDINATOR": address,
            "TROIKA_JOB": self._job,
            "TROIKA_JOB_TOKEN": token,
            "TROIKA_SIZE": len(self.workers),
            "TROIKA_ATTACH_TIMEOUT": self.settings.timeout_s,
        }
        if self.coordinator is None:
            common["TROIKA_PLAINTEXT"] = 1
        for name in ("TROIKA_PLAINTEXT", "TROIKA_TLS_CA", "TROIKA_TLS_CERT", "TROIKA_TLS_KEY"):
            if self.coordinator is not None and name in os.environ:
                common[name] = os.environ[name]
        common.update(extra_env_vars or {})
        # The Ray node is the host: raylets sharing a machine are nodes of their own.
        hosts = ["%s-%s" % (hostname, node_id[:8]) for node_id, _, hostname, _ in self._where]
        # With GPUs, each rank sees its node's ranks' GPUs in local rank order, as horovod.ray's
        # do (so that device local_rank is the rank's own, and CUDA IPC reaches the others).
        node_gpus = collections.defaultdict(list)
        if self.use_gpu:
            for host, ids in zip(hosts, ray.get([w.gpu_ids.remote() for w in self.workers])):
                node_gpus[host].extend(ids)
        updates = []
        for rank, horovod in enumerate(_horovod_env(hosts)):
            env = dict(common)
            env.update(horovod)
            env.update({"TROIKA_RANK": rank, "TROIKA_HOST": hosts[rank],
                        "TROIKA_DATA_HOST": self._where[rank][1]})
            if self.use_gpu:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(node_gpus[hosts[rank]])
            updates.append(self.workers[rank].update_env_vars.remote(env))
        ray.get(updates)
        ray.get([w.start_executable.remote(executable_cls, executable_args, executable_kwargs)
                 for w in self.workers])

    # --- running --------------------------------------------------------------------------

    def _with_callbacks(self, callbacks, refs_of):
        """The results of the refs `refs_of()` makes, with troika.ray.ray_logger's dicts fed to
        `callbacks` while they run (no queue without callbacks)."""
        if not callbacks:
            return self._get(refs_of())
        feed = ray_logger.Callbacks(callbacks)
        try:
            ray.get([w.set_queue.remote(feed.queue) for w in self.workers])
            try:
                return self._get(refs_of(), between=feed.drain)
            finally:
                ray.get([w.set_queue.remote(None) for w in self.workers])
        finally:
            feed.close()

    def _get(self, refs, between=None):
        """Every rank's result, in rank order, raising the first failure as soon as it happens:
        a rank's error as it raised it, or, for a rank whose actor died (killed, or its node
        lost), an error naming the rank and its host (the coordinator has aborted the job on
        the others by then, or does within seconds)."""
        rank_of = {ref: rank for rank, ref in enumerate(refs)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1,
                                     timeout=None if between is None else 0.1)
            if between is not None:
                between()
            try:
                ray.get(done)
            except ray.exceptions.RayActorError as e:
                rank = rank_of[done[0]]
                node_id, ip, hostname, pid = self._where[rank]
                raise RuntimeError(
                    "troika.ray: rank %d's actor (pid %d on %s, %s, Ray node %s) died: %s"
                    % (rank, pid, hostname, ip, node_id[:8], str(e).splitlines()[0])) from e
        return ray.get(list(refs))

    def _refuse_elastic(self, what):
        if self._elastic is not None:
            raise NotImplementedError("troika.ray: an elastic job's ranks come and go: it runs "
                                      "functions with run(), not %s" % what)

    def run_remote(self, fn, args=None, kwargs=None):
        """``fn(*args, **kwargs)`` on every rank; one ObjectRef per rank, in rank order."""
        self._refuse_elastic("run_remote()")
        args, kwargs = args or [], kwargs or {}
        return [w.execute.remote(lambda _: fn(*args, **kwargs)) for w in self.workers]

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """``fn(*args, **kwargs)`` on every rank; the results in rank order. ``callbacks``:
        callables, each called on the driver with every dict a rank passes to
        ``troika.ray.ray_logger.log`` during the call (horovod.ray's elastic executor's)."""
        if self._elastic is not None:
            if not self._started_elastic:
                raise RuntimeError("troika.ray: start() the executor first")
            try:
                return self._elastic.run(fn, args or [], kwargs or {}, callbacks)
            finally:
                self.job = self._job = self._elastic.job
        return self._with_callbacks(callbacks, lambda: self.run_remote(fn, args, kwargs))

    def execute(self, fn, callbacks=None):
        """``fn(executable)`` on every rank; the results in rank order. ``callbacks``: as
        run()'s."""
        self._refuse_elastic("execute()")
        return self._with_callbacks(callbacks,
                                    lambda: [w.execute.remote(fn) for w in self.workers])

    def execute_single(self, fn):
        """``fn(executable)`` on rank 0."""
        self._refuse_elastic("execute_single()")
        return ray.get(self.workers[0].execute.remote(fn))

    def shutdown(self):
        """Ends the ranks (actors), the placement group made for them and the coordinator."""
        if self._elastic is not None:
            self._elastic.stop()
            self._started_elastic = False
        for w in self.workers:
            ray.kill(w)
        self.workers = []
        if self._placement_group is not None and self._owns_placement_group:
            remove_placement_group(self._placement_group)
        self._placement_group = None
        if self._coordinator_process is not None:
            self._coordinator_process.stop()
            self._coordinator_process = None
        if self._coordinator_host is not None:
            try:
                ray.get(self._coordinator_host.stop.remote())
            except ray.exceptions.RayActorError:
                pass  # the actor died, and its coordinator with it: nothing left to stop
            ray.kill(self._coordinator_host)
            self._coordinator_host = None
