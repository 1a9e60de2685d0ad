"""``horovod.torch.elastic`` on Troika: training that goes on when ranks are lost.

Launch with ``troikarun -np 4 --min-np 2 -- python3 train.py`` (docs/elastic.md)::

    import troika.torch as hvd
    hvd.init()
    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch in range(state.batch, batches):
                step(...)
                if state.batch % 10 == 0:
                    state.commit()
            state.batch = 0

    train(state)

When a rank (or a node's agent) is lost and at least ``--min-np`` ranks remain, every other
rank's current operation raises ``HorovodInternalError`` (``troika.TroikaError``) naming the
lost rank; ``run`` then restores the state's last commit, joins the job's next generation
(ranks renumbered, ``hvd.rank()`` and ``hvd.size()`` change), calls the reset callbacks, syncs
rank 0's state to every rank and calls the function again. A node that joins the running job
(a ``troika-agent`` started for it, up to ``--max-np``) is admitted at a ``commit()``: on every
rank alike it raises ``HostsUpdatedInterrupt``, and ``run`` goes on from that commit as the
next generation, the new ranks included (they start from rank 0's state).
"""

import copy
import math
import random

import torch

import troika
from troika._elastic import HostsUpdatedInterrupt, State, run_fn
from troika._elastic import ObjectState as _ObjectState
from troika.torch.functions import (broadcast_object, broadcast_optimizer_state,
                                    broadcast_parameters)

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler",
           "HostsUpdatedInterrupt"]


def run(func):
    """Decorates ``func(state, *args, **kwargs)`` to run as an elastic job: when ranks are lost
    it restores ``state``'s last commit and runs it again in the job's next generation; when
    nodes joined at a commit (HostsUpdatedInterrupt) it goes on from that commit in the next
    generation; any other error propagates (troika._elastic.run_fn)."""
    return run_fn(func)


class ObjectState(_ObjectState):
    """State of plain attributes (``ObjectState(epoch=0, batch=0)``: ``state.epoch``), saved
    by deep copy and synced by ``broadcast_object`` from rank 0."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__(bcast_object or broadcast_object, get_rank, **kwargs)


class TorchState(ObjectState):
    """A model, an optimizer, ElasticSamplers and plain attributes: ``TorchState(model,
    optimizer, sampler=sampler, epoch=0)``. Saves copies of the model's and optimizer's
    ``state_dict()`` (a sampler's too) and restores them with ``load_state_dict``; syncs with
    ``broadcast_parameters``, ``broadcast_optimizer_state`` and ``broadcast_object`` from
    rank 0."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        self._samplers = {k: v for k, v in kwargs.items() if isinstance(v, ElasticSampler)}
        for name, sampler in self._samplers.items():
            setattr(self, name, sampler)
        self._saved = {}
        super().__init__(**{k: v for k, v in kwargs.items() if k not in self._samplers})
        self._save_torch()

    def _save_torch(self):
        if self.model is not None:
            self._saved["model"] = copy.deepcopy(self.model.state_dict())
        if self.optimizer is not None:
            self._saved["optimizer"] = copy.deepcopy(self.optimizer.state_dict())
        for name, sampler in self._samplers.items():
            self._saved["sampler." + name] = sampler.state_dict()

    def save(self):
        self._save_torch()
        super().save()

    def restore(self):
        if self.model is not None:
            self.model.load_state_dict(self._saved["model"])
        if self.optimizer is not None:
            # Gradients of the interrupted step may still be in flight: dropped.
            reset = getattr(self.optimizer, "_troika_reset", None)
            if reset is not None:
                reset()
            self.optimizer.load_state_dict(self._saved["optimizer"])
        for name, sampler in self._samplers.items():
            sampler.load_state_dict(self._saved["sampler." + name])
        super().restore()

    def sync(self):
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=0)
        if self._samplers:
            states = broadcast_object(
                {name: sampler.state_dict() for name, sampler in self._samplers.items()}, 0,
                name="troika.elastic.samplers")
            for name, sampler in self._samplers.items():
                sampler.load_state_dict(states[name])  # re-shards over the ranks now in the job
        super().sync()
        self._save_torch()


class ElasticSampler(torch.utils.data.Sampler):
    """Shards a dataset over the ranks of the generation in force, as Horovod's: each epoch is a
    permutation of the indices (``seed`` + epoch; in order without ``shuffle``) that the ranks
    take turns at, and ``record_batch`` counts what every rank has processed (ranks step
    together), so that after a reset the rest of the epoch is sharded anew over the ranks now
    in the job, none processed twice. Put it in the state (``TorchState(..., sampler=s)``) so
    that its progress is committed, restored and synced with the model's; call ``set_epoch``
    at an epoch's start (not after a reset in the middle of one).
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0  # of the epoch's permutation, by every rank together
        self.reset()

    def set_epoch(self, epoch):
        """A new epoch: nothing of it processed yet."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Every rank processed one more batch of ``batch_size`` (its ``batch_idx``-th)."""
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices):
        """Every rank processed as many indices as ``indices`` (this rank's)."""
        self.processed_num += len(indices) * self.num_replicas

    def get_indices(self, batch_idx, batch_size):
        return self.indices[batch_idx * batch_size:(batch_idx + 1) * batch_size]

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def reset(self):
        """Shards what is left of the epoch over the ranks now in the job."""
        self.num_replicas = troika.size() if troika.is_initialized() else 1
        self.rank = troika.rank() if troika.is_initialized() else 0
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        remaining = order[min(self.processed_num, len(order)):]
        self.num_samples = int(math.ceil(len(remaining) / self.num_replicas))
        total = self.num_samples * self.num_replicas
        remaining += remaining[:total - len(remaining)]  # every rank gets as many
        self.indices = remaining[self.rank:total:self.num_replicas]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
