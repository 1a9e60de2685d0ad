"""Troika's Python front end: the job, its process sets and the names of operations.

Framework-neutral: the compiled core (``troika._troika``) takes raw addresses, dtype numbers and
shapes, and this package keeps the one context of the process. ``troika.torch`` is the
``horovod.torch``-compatible layer for PyTorch; scripts use that::

    import troika.torch as hvd
    hvd.init()

Launch with ``troikarun -np 4 -- python3 train.py`` (troikarun sets the TROIKA_* environment
every rank joins its job from).
"""

import array as _array
import atexit as _atexit
import os as _os
import sys as _sys
import threading as _threading


# TensorFlow's Python package loads its libraries into the process's global scope, and they
# export their own gRPC and protobuf: if it was imported first, libtroika's calls into gRPC
# would bind to TensorFlow's copy (and crash in init()). The core is then loaded with
# RTLD_DEEPBIND, so that it and the libraries it brings look up symbols among their own
# first. Otherwise with the usual flags: deep binding also bypasses a preloaded allocator
# (jemalloc, tcmalloc) for those libraries, which nothing else needs.
_dlopen_flags = _sys.getdlopenflags()
if "tensorflow" in _sys.modules:
    _sys.setdlopenflags(_os.RTLD_NOW | _os.RTLD_DEEPBIND)
try:
    from troika import _troika
finally:
    _sys.setdlopenflags(_dlopen_flags)
from troika._troika import (TroikaError, DuplicateNameError, InvalidArgumentError,  # noqa: F401
                            Handle, DTYPES)

try:  # written by the build (python/CMakeLists.txt)
    from troika._build_info import VERSION as __version__
except ImportError:  # pragma: no cover - a tree without the generated file
    __version__ = "unknown"

__all__ = [
    "TroikaError", "DuplicateNameError", "InvalidArgumentError", "init", "shutdown",
    "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size", "cross_rank",
    "ProcessSet", "global_process_set",
    "add_process_set", "remove_process_set", "context", "is_homogeneous",
    "enter_next_generation", "generation",
]

_lock = _threading.RLock()
_context = None
# An elastic job's next generation (enter_next_generation): (rank, size, epoch) for init(),
# instead of TROIKA_RANK and TROIKA_SIZE.
_generation = None
_homogeneous = None
# Generated names: per process set, the number of unnamed operations submitted so far. Every
# member of a set submits the same sequence of operations, so the numbers agree across ranks.
_noname_counters = {}
# Called with each new Context init() creates, and with None at shutdown(): front ends whose
# native code submits to the context without Python (troika.tensorflow's op library) rebind
# to it there.
_context_hooks = []
# Called (without arguments) at the end of every shutdown(), once the context has shut down:
# its operations have failed and the core no longer touches their buffers. A generation's end
# is such a shutdown (enter_next_generation). The layers above drop there what they hold of
# the context that ended (troika._handles: the handles and names in flight), so that nothing
# of it outlives it or collides with the next one.
_shutdown_hooks = []
# Every context handed to native code (_bind_native) stays alive while the process runs.
_bound_contexts = []


class ProcessSet:
    """A subset of the job's ranks with its own negotiation and communicator (as Horovod's).

    ``ProcessSet([0, 2])`` names the ranks; ``add_process_set`` registers it on every rank.
    ``process_set_id`` is None until then (0 for the global set).
    """

    def __init__(self, ranks):
        self.ranks = sorted(int(r) for r in ranks)
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError("ProcessSet: ranks must be distinct: %s" % (list(ranks),))
        self.process_set_id = None

    def size(self):
        """The number of ranks in the set."""
        return len(self.ranks)

    def rank(self):
        """This process's position in the set; -1 if it is not a member."""
        r = rank()
        return self.ranks.index(r) if r in self.ranks else -1

    def included(self):
        """True if this process is a member."""
        return rank() in self.ranks

    def _id(self):
        if self.process_set_id is None:
            raise ValueError("process set %s has not been added (add_process_set) or was "
                             "removed" % (self.ranks,))
        return self.process_set_id

    def __repr__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0
_process_sets = {0: global_process_set}


def init(comm=None, process_sets=None):
    """Joins the job named by the TROIKA_* environment (set by troikarun or troika-agent).

    Blocks until every rank attached. Idempotent. ``process_sets``: ProcessSet objects or rank
    lists to add at once, as every rank must (see add_process_set), or "dynamic" (Horovod's
    word; every Troika job adds and removes sets at any time). ``comm``, Horovod's MPI
    communicator or rank list, must be None: Troika has no MPI (ValueError otherwise).
    """
    if comm is not None and not (isinstance(comm, (list, tuple)) and not comm):  # [] is all
        raise ValueError("init(comm=...) selects ranks of an MPI communicator, and Troika has no "
                         "MPI: every rank of the job launched by troikarun or troika-agent joins; "
                         "use process sets (hvd.add_process_set) for subsets")
    if isinstance(process_sets, str):
        if process_sets.lower() != "dynamic":
            raise ValueError("process_sets must be ProcessSets, rank lists or \"dynamic\", not %r"
                             % (process_sets,))
        process_sets = None
    global _context, _homogeneous
    with _lock:
        if _context is None:
            rank_, size_, epoch = _generation or (-1, -1, 0)
            _context = _troika.Context.init(rank_, size_, epoch)
            global_process_set.ranks = list(range(_context.size))
            for hook in _context_hooks:
                hook(_context)
            _homogeneous = _every_host_has_as_many_ranks(_context)
    for ps in process_sets or []:
        add_process_set(ps)


def shutdown():
    """Leaves the job; later operations fail until init() (pending ones fail now, and every
    handle and name of the context that ended is forgotten: _shutdown_hooks)."""
    global _context
    with _lock:
        ctx, _context = _context, None
        for ps_id, ps in list(_process_sets.items()):
            if ps_id != 0:
                ps.process_set_id = None
                del _process_sets[ps_id]
        _noname_counters.clear()
        if ctx is not None:
            for hook in _context_hooks:
                hook(None)
    try:
        if ctx is not None:
            ctx.shutdown()
    finally:  # also when the shutdown raises the failure that ended the context
        for hook in _shutdown_hooks:
            hook()


def enter_next_generation(change):
    """An elastic job went on without some ranks (``change``: a TroikaError's
    ``membership_change``, docs/elastic.md): leaves the generation that ended; the next init()
    joins the next one, with the rank the change gives this process. False if it gives this
    process none (then nothing changes). Everything in flight of the generation that ended is
    forgotten (shutdown()): its handles and the names they held, its process sets, the counts
    behind generated names."""
    global _generation
    with _lock:
        ctx = _context
        if ctx is None or change is None:
            return False
        old = ctx.rank
        next_ranks = change["next_rank"]
        if old >= len(next_ranks) or next_ranks[old] < 0:
            return False
        _generation = (next_ranks[old], change["size"], change["epoch"])
    try:
        shutdown()
    except TroikaError:  # the generation's failure, which the caller is handling
        pass
    return True


def _bind_native(bind):
    """Hands native code that submits without Python (troika.tensorflow's op library,
    troika.mxnet's engine operations) the process's context: `bind` (taking a troika::Context
    address, 0 for none) is called with it now if initialized, at every init(), and with 0 at
    shutdown(). Every context handed over stays alive: an operation that read the previous
    one just before shutdown() or a re-init still submits to a valid (shut down) context and
    fails cleanly; after shutdown() operations fail saying to call init()."""
    def hook(context):
        if context is None:
            bind(0)
            return
        _bound_contexts.append(context)
        bind(context.address)

    _context_hooks.append(hook)
    if _context is not None:
        hook(_context)


def _every_host_has_as_many_ranks(ctx):
    """True if every host runs the same number of ranks. A one-host job needs no exchange
    (every rank sees local_size == size); otherwise the ranks allgather their local sizes
    (one small named collective during init, on every rank)."""
    if ctx.local_size == ctx.size:
        return True
    mine = _array.array("q", [ctx.local_size])
    handle = ctx.allgather("troika.init.local_sizes", mine.buffer_info()[0], DTYPES["int64"],
                           [1])
    handle.wait()
    sizes = _array.array("q", [0] * ctx.size)
    handle.copy_output(sizes.buffer_info()[0], ctx.size * sizes.itemsize)
    return len(set(sizes)) == 1


def is_homogeneous():
    """True if every host of the job runs the same number of ranks (found at init)."""
    context()
    return _homogeneous


def is_initialized():
    return _context is not None


def context():
    """The process's Context; ValueError if init() was not called."""
    ctx = _context
    if ctx is None:
        raise ValueError("Troika has not been initialized; use hvd.init().")
    return ctx


def size():
    return context().size


def rank():
    return context().rank


def local_size():
    return context().local_size


def local_rank():
    return context().local_rank


def cross_size():
    return context().cross_size


def cross_rank():
    return context().cross_rank


def generation():
    """The job's membership generation: 1, and one more with each change of an elastic job's
    ranks (docs/elastic.md)."""
    return context().generation


def add_process_set(process_set):
    """Registers a process set (a ProcessSet or a list of ranks) and returns the ProcessSet.

    Every rank of the job calls it, members or not, with the same ranks and in the same order
    relative to the other add/remove calls; it blocks until all did.
    """
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError("%r was already added" % (ps,))
    ps_id = context().add_process_set(ps.ranks)
    with _lock:
        ps.process_set_id = ps_id
        _process_sets[ps_id] = ps
    return ps


def remove_process_set(process_set):
    """Removes a set added by add_process_set (every rank calls it). False if it was not added
    (or is the global set)."""
    ps_id = process_set.process_set_id
    if not ps_id or ps_id not in _process_sets:
        return False
    context().remove_process_set(ps_id)
    with _lock:
        _process_sets.pop(ps_id, None)
        process_set.process_set_id = None
    return True


def _generated_name(kind, process_set_id):
    """A deterministic name for an unnamed operation: "<kind>.noname.<N>", N counting the
    unnamed operations of the process set in submission order."""
    with _lock:
        n = _noname_counters.get(process_set_id, 0) + 1
        _noname_counters[process_set_id] = n
    return "%s.noname.%d" % (kind, n)


@_atexit.register
def _shutdown_at_exit():
    try:
        shutdown()
    except Exception:  # the job's failure was reported where it happened
        pass
