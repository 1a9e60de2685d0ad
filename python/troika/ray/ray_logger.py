"""troika.ray.ray_logger: horovod.ray.ray_logger's ``log(info_dict)`` (docs/ray.md). A rank
sends a dict to the driver, where ``RayExecutor.run(fn, callbacks=[...])`` (and ``execute``)
calls each callback with it, as horovod.ray's elastic executor does:

    def train():
        from troika.ray import ray_logger         # horovod.ray's: from horovod.ray import ...
        ...
        ray_logger.log({"epoch": epoch, "loss": loss})

    executor.run(train, callbacks=[print])

Outside a call with callbacks, ``log`` warns once and drops the dict (as horovod.ray's).

How the dicts travel (troika.ray's internals): the driver makes a ``ray.util.queue.Queue`` for
the call and hands it to the ranks' actors. A rank of a RayExecutor runs in its actor, so
``configure(queue)`` there lets ``log`` put on it. A rank of an elastic executor is a process
its actor starts under a troika-agent: ``log`` appends the dict to the file named by
$TROIKA_RAY_LOG (length-prefixed, cloudpickled), and the actor puts what it reads there on the
queue (``Forwarder``). The queue's actor runs on the head node. The driver calls the callbacks
from the thread that called ``run``, while it waits for the ranks, and once more with what is
left after they ended.
"""

import os
import struct
import threading
import warnings

from troika._agent_rank import _cloudpickle

__all__ = ["log"]

ENV = "TROIKA_RAY_LOG"

_queue = None
_warned = False
_lock = threading.Lock()


def configure(queue):
    """In a rank's actor: where ``log`` puts its dicts (None: nowhere)."""
    global _queue
    _queue = queue


def log(info_dict):
    """Sends ``info_dict`` (anything cloudpickle takes) to the driver's callbacks."""
    global _warned
    if _queue is not None:
        _queue.put(info_dict)
        return
    path = os.environ.get(ENV)
    if path:
        data = _cloudpickle().dumps(info_dict)
        with _lock, open(path, "ab") as f:
            f.write(struct.pack("<I", len(data)) + data)
        return
    if not _warned:
        warnings.warn("`ray_logger.log` called but logging is not configured: only the "
                      "functions of a RayExecutor.run (or execute) given callbacks send them "
                      "their dicts")
        _warned = True


class Forwarder:
    """In an elastic rank's actor: puts on `queue` every dict the rank process appends to
    `path` ($TROIKA_RAY_LOG), from a thread of its own, until ``stop()`` (which forwards what
    is left)."""

    POLL_S = 0.1

    def __init__(self, path, queue):
        self._path, self._queue = path, queue
        self._offset = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _forward(self):
        try:
            with open(self._path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        at = 0
        while at + 4 <= len(data):
            (size,) = struct.unpack_from("<I", data, at)
            if at + 4 + size > len(data):
                break  # the rest of it is being written
            try:
                self._queue.put(_cloudpickle().loads(data[at + 4:at + 4 + size]))
            except Exception:  # noqa: BLE001 - a queue gone (its driver ended) loses the dict
                pass
            at += 4 + size
        self._offset += at

    def _run(self):
        while not self._stopping.wait(self.POLL_S):
            self._forward()

    def stop(self):
        self._stopping.set()
        self._thread.join()
        self._forward()


class Callbacks:
    """The driver's side of one call: the queue, and the callbacks it feeds."""

    def __init__(self, callbacks):
        from ray.util.queue import Queue
        self.callbacks = list(callbacks)
        self.lost = False
        # On the head node, as Ray Train's state actor (the node the cluster cannot lose; the
        # nodes an elastic job loses must not take the queue with them, and the driver's own
        # raylet may be any of a machine's), outside any placement group the caller runs in.
        self.queue = Queue(actor_options={"num_cpus": 0,
                                          "resources": {"node:__internal_head__": 0.001},
                                          "scheduling_strategy": "DEFAULT"})

    def drain(self):
        """Calls every callback with each dict that arrived, in order. A queue lost (its
        actor died) is said once and costs its dicts, not the job."""
        import ray
        while not self.lost:
            try:
                size = self.queue.qsize()
                items = self.queue.get_nowait_batch(size) if size else []
            except ray.exceptions.RayActorError as e:
                self.lost = True
                warnings.warn("troika.ray: the queue of ray_logger's dicts is lost (%s); the "
                              "callbacks get no more of them" % str(e).splitlines()[0])
                return
            if not items:
                return
            for item in items:
                for callback in self.callbacks:
                    callback(item)

    def close(self):
        """Calls the callbacks with what is left, then ends the queue."""
        try:
            self.drain()
        finally:
            try:
                self.queue.shutdown()
            except Exception:  # noqa: BLE001 - gone already
                pass
