"""The framework-neutral part of ``hvd.elastic`` (docs/elastic.md): the run loop, ``State`` and
``ObjectState`` with their commit, restore and sync protocol, and ``HostsUpdatedInterrupt``.
troika.torch.elastic and troika.tensorflow.elastic add their frameworks' states and the object
broadcast, and tell the loop how their errors carry a membership change.

The protocol: ``commit()`` saves the state (a membership change loses at most the work since)
and reaches the job's commit point, where joining nodes are admitted; ``restore()`` goes back
to the last save; ``sync()`` makes every rank's state rank 0's. ``run_fn(func, ...)`` calls
``func(state, ...)``; when ranks are lost it restores the last commit, joins the job's next
generation (ranks renumbered), calls the reset callbacks, syncs and calls ``func`` again; when
nodes joined or left at a commit it goes on from that commit in the next generation. A rank
whose own node left at a commit (troikarun's host discovery dropped its host) shuts down and
ends its process with 0 (SystemExit): its work is in the state the others go on with.
"""

import copy
import functools
import sys

import troika
from troika import TroikaError


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's interrupt for hosts joining at a commit: ``commit()`` raises it on every rank
    alike when the job admitted nodes there. ``skip_sync``: the state needs no sync from rank 0
    afterwards (never, for Troika: the new ranks need it). ``membership_change``: the job's next
    generation (as ``TroikaError.membership_change``)."""

    def __init__(self, skip_sync=False, membership_change=None):
        super().__init__("the job's hosts were updated")
        self.skip_sync = skip_sync
        self.membership_change = membership_change


def troika_membership_change(error):
    """The membership change a TroikaError carries (None for any other error)."""
    if isinstance(error, TroikaError):
        return getattr(error, "membership_change", None)
    return None


def _leave_job():
    """This rank's node left the job at the commit just made (troikarun's host discovery no
    longer lists its host): its work is in the state the others go on from, and the process
    ends with 0 (SystemExit), as Horovod's driver ends the workers of a removed host."""
    try:
        troika.shutdown()
    except TroikaError:  # the generation ended: nothing to finish
        pass
    print("troika: rank left the job at a commit: its host was removed from the job",
          file=sys.stderr, flush=True)
    raise SystemExit(0)


def run_fn(func, membership_change=troika_membership_change):
    """``func(state, *args, **kwargs)`` run as an elastic job (module docstring).
    ``membership_change(error)``: the change an error raised by ``func`` or ``state.sync()``
    carries, or None for an error that propagates."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not troika.is_initialized():
            troika.init()
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()  # a loss during the sync is handled as one during training
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as e:
                # Nodes joined or left at the commit just made: nothing to go back to.
                if e.membership_change is not None:
                    if not troika.enter_next_generation(e.membership_change):
                        _leave_job()
                    troika.init()
                skip_sync = e.skip_sync
            except Exception as e:  # noqa: BLE001 - membership_change decides; others re-raised
                change = membership_change(e)
                if change is None or not troika.enter_next_generation(change):
                    raise
                state.restore()
                troika.init()  # the next generation, renumbered
                skip_sync = False
            state.on_reset()

    return wrapper


class State:
    """What a rank keeps across membership changes: ``commit()`` keeps the live state as the
    one to go back to, ``restore()`` goes back to it, ``sync()`` makes every rank's state rank
    0's. Subclasses implement ``save``, ``restore`` and ``sync``."""

    def __init__(self):
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called (without arguments) after every reset, in order: e.g. to scale the
        learning rate with the new ``hvd.size()``."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state (a membership change loses at most the work since), then checks
        for host updates."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """The job's commit point (every rank's): raises HostsUpdatedInterrupt when nodes
        joined or left the job here."""
        if not troika.is_initialized():
            return
        try:
            troika.context().elastic_commit().wait()
        except TroikaError as e:
            change = getattr(e, "membership_change", None)
            if change is not None and change.get("at_commit"):
                raise HostsUpdatedInterrupt(False, change) from e
            raise

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError


class ObjectState(State):
    """State of plain attributes (``ObjectState(bcast_object, epoch=0, batch=0)``:
    ``state.epoch``), saved by deep copy and synced from rank 0 by ``bcast_object(obj, 0,
    name=...)``, a front end's broadcast_object."""

    def __init__(self, bcast_object, get_rank=None, **kwargs):
        super().__init__()
        self._bcast_object = bcast_object
        self._get_rank = get_rank or troika.rank
        self._saved_state = kwargs
        self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))

    def save(self):
        self._saved_state = {name: copy.deepcopy(getattr(self, name))
                             for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state, 0,
                                                   name="troika.elastic.object_state")
            self._set_attrs()
