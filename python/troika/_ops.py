"""The arguments of Horovod's operations as the core takes them, for every front end: the
reduce ops, Horovod's rule for ``op`` and the deprecated ``average``, process set ids, a
broadcast root's position in its set and a reducescatter's rows per rank.

Framework-neutral: nothing here knows a tensor type (troika.torch builds on it).
"""

import warnings

from troika import ProcessSet, _troika, global_process_set

# Reduce operations (the core's numbers).
Sum = _troika.SUM
Average = _troika.AVERAGE
Min = _troika.MIN
Max = _troika.MAX
Product = _troika.PRODUCT
# Horovod's Adasum: a name only. Troika has no Adasum reduction; an operation given it raises
# NotImplementedError (a RuntimeError, as Horovod's own refusal is) naming the alternatives.
Adasum = "Adasum"


def check_op(op):
    """`op` for the core, or NotImplementedError for Adasum."""
    if op is Adasum:
        raise NotImplementedError(
            "troika.torch: op=Adasum is not supported (Troika implements no Adasum reduction; "
            "Horovod itself runs it only with MPI or NCCL builds): use op=Average or op=Sum")
    return op


def reduce_op(op, average):
    """Horovod's rule: `op` wins, the deprecated `average` maps to Average/Sum, and the default
    is Average."""
    if average is None:
        if op is None:
            return Average
        return op if op is not Adasum else check_op(op)  # check_op raises for Adasum
    if op is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                  DeprecationWarning)
    return Average if average else Sum


def process_set_id(process_set):
    """The core's number of an added ProcessSet; TypeError for anything else, ValueError for a
    set not added (or removed)."""
    if process_set is global_process_set:  # the common case, first: id 0 for good
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError("process_set must be a ProcessSet (hvd.add_process_set), not %r"
                        % (process_set,))
    return process_set._id()


def root_position(root_rank, process_set):
    """Horovod's root_rank is a rank of the job; the core wants its position in the set."""
    if process_set.process_set_id == 0:
        return int(root_rank)
    try:
        return process_set.ranks.index(int(root_rank))
    except ValueError:
        raise ValueError("root_rank %d is not in %r" % (root_rank, process_set)) from None


def reducescatter_rows(dim0, set_size, position):
    """The rows of a reducescatter's dim 0 (`dim0` rows) the set's `position`-th rank receives:
    dim 0 divided among the set's `set_size` ranks, the first dim0 % set_size one row more
    (none for a position outside the set, or an empty set)."""
    if set_size <= 0:
        return 0
    return dim0 // set_size + (1 if 0 <= position < dim0 % set_size else 0)
