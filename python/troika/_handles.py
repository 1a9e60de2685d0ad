"""Operations in flight, for every front end: the handle (a number, as Horovod's) of each
submission, poll() and synchronize() on it, and the names of named operations, held until their
handle is synchronized.

Framework-neutral: a Pending holds the core's handle (a troika._troika.Handle, or a NativeGroup
of them), what must stay alive while the core reads and writes it, and `finish`, which makes the
result once the operation finished (or the result itself, where there is nothing to make). A
front end whose results need another wait subclasses Pending (troika.torch's CUDA results: the
caller's stream waits, not the CPU). Thread-safe: any thread may submit, poll and synchronize
(each step is one operation on a dict or a set, which the interpreter makes atomic).

A context's handles and names end with it: every troika.shutdown() (hvd.shutdown(), and an
elastic job's generation ending, troika.enter_next_generation) forgets them once the core has
shut down, so that nothing of a generation that ended holds a name in the next one (issue 46).

Kept lean: with many small tensors per step, every call and object here is paid hundreds of
times a step (docs/PERFORMANCE.md, issue 36).
"""

import itertools

import troika
from troika import DuplicateNameError


class Pending:
    """One submitted operation, until it is waited for."""

    __slots__ = ("native", "keep", "finish", "key", "result")

    def __init__(self, native, keep, finish, key=None, result=None):
        self.native = native  # the core's handle: poll(), wait()
        self.keep = keep  # the buffers the operation reads and writes, alive until it finished
        # () -> the operation's result, after a successful wait; None: the result is `result`
        # (written by the core, nothing to make)
        self.finish = finish
        self.key = key  # (process set id, name) of a named operation, held until synchronize
        self.result = result

    def wait(self):
        """Blocks until the operation finished; raises its error (a TroikaError) if it failed."""
        self.native.wait()

    def complete(self):
        """Waits for the operation and returns its result."""
        self.wait()
        finish = self.finish
        return self.result if finish is None else finish()


class NativeGroup:
    """The core's handles of a grouped operation, polled and waited for as one. A failure of
    one is raised only after every handle was waited for (they all use the group's buffers)."""

    __slots__ = ("natives",)

    def __init__(self, natives):
        self.natives = natives

    def poll(self):
        return all(n.poll() for n in self.natives)

    def wait(self):
        self._each(lambda n: n.wait())

    def wait_on_stream(self, stream):
        self._each(lambda n: n.wait_on_stream(stream))

    def _each(self, wait):
        first = None
        for n in self.natives:
            try:
                wait(n)
            except Exception as e:  # wait for the rest; they use our buffers
                if first is None:
                    first = e
        if first is not None:
            raise first


# Operations in flight: handle number -> Pending. Keeps the buffers the core reads and writes
# alive until synchronize(), or until the context shuts down (_forget_all).
_pending = {}
# The (process set id, name) of every named operation with a handle not yet synchronized: a
# second submission of one raises at once, however soon the first completed (Horovod's window,
# its cycle, is wide enough that its users and tests count on this; the core alone frees a name
# when the operation completes). Only a handle still registered frees its name: one of a
# context that ended (_forget_all) never frees the next context's. The same set for good
# (cleared, never rebound): troika.torch's synchronous fast path reads it (empty: no name to
# check).
_names = set()
# Handle numbers: 1, 2, ... (next() on it is atomic).
_handle_numbers = itertools.count(1)


def operation_name(kind, name, process_set_id):
    """(negotiated name, key): the name an operation is negotiated under, as Horovod's,
    "<kind>.<name>", or a generated "<kind>.noname.<N>" for an unnamed one; the key, for a named
    one, holds the name until synchronize() (Pending.key). DuplicateNameError if an operation
    of that name is still unsynchronized here."""
    if name is None:
        return troika._generated_name(kind, process_set_id), None
    full = kind + "." + name
    key = (process_set_id, full)
    if key in _names:
        message = ("'%s' is already in flight on this rank (its handle is not synchronized); "
                   "synchronize it first" % full)
        err = DuplicateNameError("ALREADY_EXISTS: " + message)
        err.code, err.message, err.membership_change = "ALREADY_EXISTS", message, None
        raise err
    return full, key


def register(pending):
    """A handle (for poll and synchronize) to the Pending operation; its name, if it has one,
    is taken until then."""
    handle = next(_handle_numbers)
    if pending.key is not None:
        _names.add(pending.key)
    _pending[handle] = pending
    return handle


def poll(handle):
    """True once the operation of `handle` finished; synchronize() then returns at once.
    ValueError for a handle never returned or already synchronized, as Horovod's."""
    pending = _pending.get(handle)
    if pending is None:
        raise ValueError("poll: handle %r was not created or has been cleared" % (handle,))
    return pending.native.poll()


def synchronize(handle):
    """Waits for the operation of `handle` and returns its result (a tensor; for alltoall a
    tuple (output, received_splits)). Raises HorovodInternalError (TroikaError) if it failed."""
    pending = _pending.get(handle)
    if pending is None:
        return None
    try:
        pending.wait()  # Pending.complete, inline (one call fewer per operation)
        finish = pending.finish
        return pending.result if finish is None else finish()
    finally:
        if _pending.pop(handle, None) is not None:  # else forgotten with its context
            _names.discard(pending.key)


def _forget_all():
    """Forgets every handle and name (troika.shutdown calls it once the context has shut down:
    the core no longer uses the buffers the Pendings keep). A handle of the context that ended
    is then unknown: synchronize() returns None, poll() raises ValueError."""
    _pending.clear()
    _names.clear()


troika._shutdown_hooks.append(_forget_all)


def shutdown():
    """Leaves the job; pending operations fail, and every handle and name is forgotten."""
    troika.shutdown()
