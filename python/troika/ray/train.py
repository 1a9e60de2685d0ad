"""troika.ray.train: Troika's collectives under Ray Train (docs/ray.md, "Ray Train").

    from ray.train import ScalingConfig, RunConfig, FailureConfig
    from troika.ray.train import TroikaConfig, TroikaTrainer

    def train_loop_per_worker(config):
        import troika.torch as hvd
        hvd.init()
        ...                                   # as under troikarun
        ray.train.report(metrics, checkpoint=...)

    trainer = TroikaTrainer(train_loop_per_worker, troika_config=TroikaConfig(),
                            scaling_config=ScalingConfig(num_workers=4))
    result = trainer.fit()

``TroikaConfig`` is a Ray Train ``BackendConfig`` (as ``TorchConfig`` and ``HorovodConfig``
are): any ``DataParallelTrainer(..., backend_config=TroikaConfig())`` gets it. Each time Ray
Train starts a worker group (at first, and again after a failure under ``FailureConfig``), the
backend starts a Troika job for it: a ``troika-coordinator`` of its own in Ray Train's
controller (or a job on the user's coordinator, ``TroikaConfig(coordinator="host:port")``), a
new job name and token, and every worker's environment (TROIKA_*), its Troika rank being its
Ray Train world rank and its host its Ray node. When the group shuts down (training ended,
failed, or before a restart) the job's coordinator ends, so a restarted group never meets the
old job. Written for Ray Train V2, Ray 2.60's default; V1 (``RAY_TRAIN_V2_ENABLED=0``) calls
the backend the same way.
"""

import dataclasses
import logging
import os
import secrets
import socket
from typing import Dict, Optional

import ray
from ray.train.backend import Backend, BackendConfig

from troika._job_coordinator import JobCoordinator
from troika.ray import _horovod_env

__all__ = ["TroikaConfig", "TroikaTrainer"]

logger = logging.getLogger(__name__)

_TLS_VARIABLES = ("TROIKA_PLAINTEXT", "TROIKA_TLS_CA", "TROIKA_TLS_CERT", "TROIKA_TLS_KEY")


def _driver_tls_environment() -> Dict[str, str]:
    return {name: os.environ[name] for name in _TLS_VARIABLES if name in os.environ}


@dataclasses.dataclass
class TroikaConfig(BackendConfig):
    """Troika as Ray Train's backend.

    timeout_s: how long the coordinator has to start and the ranks to attach to it
        (TROIKA_ATTACH_TIMEOUT).
    coordinator: HOST:PORT of a coordinator of one's own; default: one started for each
        worker group, in plaintext with the job's random token, on the node of Ray Train's
        controller (the driver's node).
    tls_environment: for a coordinator of one's own, TROIKA_PLAINTEXT and TROIKA_TLS_* as the
        driver's environment had them when the config was made (the controller and the workers
        may not share the driver's environment).
    env: more environment for every worker (e.g. TROIKA_TRANSPORT).
    """

    timeout_s: int = 60
    coordinator: Optional[str] = None
    tls_environment: Dict[str, str] = dataclasses.field(default_factory=_driver_tls_environment)
    env: Dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def backend_cls(self):
        return _TroikaBackend

    def to_dict(self):
        return {"timeout_s": self.timeout_s, "coordinator": self.coordinator}


def _where():
    """On a worker: its Ray node, the node's address, host name and pid."""
    return (ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address(),
            socket.gethostname(), os.getpid())


def _set_environment(env):
    os.environ.update({name: str(value) for name, value in env.items()})


class _TroikaBackend(Backend):
    """Starts and ends a Troika job per worker group. Ray makes one instance per process (a
    Singleton) and calls it from the controller's one event-loop thread: the job it holds is
    the current worker group's."""

    # Every rank of a node sees the node's GPUs, so that hvd.local_rank() picks its device, as
    # under Horovod (HorovodConfig's backend does the same).
    share_cuda_visible_devices = True

    def __init__(self):
        self._coordinator = None  # the current group's JobCoordinator, when it has its own

    def on_start(self, worker_group, backend_config: TroikaConfig):
        self._end_coordinator()
        if backend_config.coordinator is None:
            self._coordinator = JobCoordinator.start(
                ray.util.get_node_ip_address(), backend_config.timeout_s,
                owner="troika.ray.train")
            address = self._coordinator.address
            security = {"TROIKA_PLAINTEXT": 1}
            metrics = "; its metrics at http://%s/metrics" % self._coordinator.metrics_address
        else:
            address = backend_config.coordinator
            security = dict(backend_config.tls_environment)
            metrics = ""
        job = "raytrain-%s" % secrets.token_hex(4)
        common = {
            "TROIKA_COORDINATOR": address,
            "TROIKA_JOB": job,
            "TROIKA_JOB_TOKEN": secrets.token_hex(16),
            "TROIKA_SIZE": len(worker_group),
            "TROIKA_ATTACH_TIMEOUT": backend_config.timeout_s,
        }
        common.update(security)
        common.update(backend_config.env)
        # Ray Train's world ranks (list order) go node by node (it sorts its workers by node):
        # each rank's Troika host is its Ray node, as RayExecutor's, so local ranks and the
        # shared-memory plane follow the nodes, even for several raylets on one machine; and
        # each rank has the HOROVOD_* variables of troikarun's ranks, as RayExecutor's do.
        where = worker_group.execute(_where)
        hosts = ["%s-%s" % (hostname, node_id[:8]) for node_id, _, hostname, _ in where]
        updates = []
        for rank, ((_, ip, _, _), horovod) in enumerate(zip(where, _horovod_env(hosts))):
            env = dict(common, TROIKA_RANK=rank, TROIKA_HOST=hosts[rank], TROIKA_DATA_HOST=ip)
            env.update(horovod)
            updates.append(worker_group.execute_single_async(rank, _set_environment, env))
        ray.get(updates)
        logger.info("troika.ray.train: Troika job %s of %d ranks on the coordinator at %s%s",
                    job, len(where), address, metrics)

    def on_shutdown(self, worker_group, backend_config: TroikaConfig):
        self._end_coordinator()

    def _end_coordinator(self):
        if self._coordinator is not None:
            self._coordinator.stop()
            self._coordinator = None


def _data_parallel_trainer():
    from ray.train.v2._internal.constants import is_v2_enabled
    if is_v2_enabled():
        from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    else:
        from ray.train.data_parallel_trainer import DataParallelTrainer
    return DataParallelTrainer


class TroikaTrainer(_data_parallel_trainer()):
    """``DataParallelTrainer`` with Troika as its backend (``TroikaConfig()`` by default):
    ``TroikaTrainer(train_loop_per_worker, train_loop_config=..., troika_config=...,
    scaling_config=..., run_config=..., datasets=..., dataset_config=...)``."""

    def __init__(self, train_loop_per_worker, *, train_loop_config=None,
                 troika_config: Optional[TroikaConfig] = None, scaling_config=None,
                 run_config=None, datasets=None, dataset_config=None, **kwargs):
        super().__init__(train_loop_per_worker, train_loop_config=train_loop_config,
                         backend_config=troika_config or TroikaConfig(),
                         scaling_config=scaling_config, run_config=run_config,
                         datasets=datasets, dataset_config=dataset_config, **kwargs)
