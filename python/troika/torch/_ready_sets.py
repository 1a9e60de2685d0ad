"""Ready sets of DistributedOptimizer (issue 49): which gradients become ready together, so
that each such set is submitted in one call into the module, as DDP's buckets are.

The first WATCHED_STEPS steps' backward passes are watched (Watcher): two gradients whose hooks
ran one right after the other, within READY_GAP_S, in any watched step, had no computation
between them; the ready sets are the groups that such pairs link (two or more gradients each).
A rank descheduled between two hooks in one step parts them in that step only, so watching
several steps keeps a loaded machine's pauses out of the sets, while a layer's computation
parts the same two hooks in every step. Framework-neutral: a gradient is any hashable object
with an `index` (its place in the optimizer's order).
"""

import operator
import time

# Hooks at most this far apart were ready together: far below a layer's backward computation
# on a CPU and above the hooks' own cost (~1-20 us each, under load), so holding a set's first
# gradient back until its last costs no overlap with computation.
READY_GAP_S = 100e-6
# Steps watched before the ready sets are formed.
WATCHED_STEPS = 3

_index = operator.attrgetter("index")


def in_order(grads):
    """`grads` in the optimizer's order."""
    return sorted(grads, key=_index)


class ReadySet:
    """Gradients that became ready together in the watched steps."""

    __slots__ = ("members", "size", "ready")

    def __init__(self, members):
        self.members = in_order(members)  # in the optimizer's order
        self.size = len(members)
        self.ready = []  # those ready and not yet submitted, in the order they came


class Watcher:
    """Times the hooks of the watched steps. Not thread-safe: the hooks of one optimizer run
    on one thread at a time (autograd's), and end_step() after them."""

    def __init__(self):
        self.recording = []  # this step's hooks: (time, gradient), in the order they ran
        self._steps = []  # the recordings of the watched steps that ended

    def hook(self, grad):
        self.recording.append((time.perf_counter(), grad))

    def cut_short(self):
        """Forgets the step in progress (it failed or the context ended): the next is watched."""
        self.recording = []

    def end_step(self, alone):
        """Ends a watched step; after WATCHED_STEPS of them, returns the ready sets
        ([ReadySet]; gradients for which `alone(gradient)` holds are in none), else None."""
        if self.recording:
            self._steps.append(self.recording)
            self.recording = []
        if len(self._steps) < WATCHED_STEPS:
            return None
        return form(self._steps, alone)


def form(steps, alone):
    """The ready sets of the watched `steps`, each a list of (time, gradient) in the order the
    hooks ran: the groups linked by consecutive hooks within READY_GAP_S in any step, of two or
    more gradients, none for which `alone(gradient)` holds."""
    parent = {}

    def root(g):
        while parent[g] is not g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    for hooks in steps:
        for _, g in hooks:
            parent.setdefault(g, g)
        for (t0, a), (t1, b) in zip(hooks, hooks[1:]):
            if t1 - t0 <= READY_GAP_S and not alone(a) and not alone(b):
                parent[root(a)] = root(b)
    groups = {}
    for g in parent:
        groups.setdefault(root(g), []).append(g)
    return [ReadySet(m) for m in sorted(groups.values(), key=lambda m: min(m, key=_index).index)
            if len(m) > 1]
