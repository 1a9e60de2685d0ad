"""Ready sets of DistributedOptimizer (issue 49): which gradients become ready together, so
that each such set is submitted in one call into the module, as DDP's buckets are.

The first WATCHED_STEPS steps' backward passes are watched (Watcher): each gradient's hook is
timed from its pass's first hook, and its earliest time over those steps is kept, so that a
rank descheduled between two hooks in one step does not part them. Gradients whose earliest
times lie within READY_GAP_S of one another, and within READY_SPAN_S of the first of them, form
a ready set (ReadySet). Framework-neutral: a gradient is any object with an `index` (its place
in the optimizer's order).
"""

import operator
import time

# Hooks at most this far apart, and at most this far from the set's first, were ready
# together. The gap is far below a layer's backward computation on a CPU and above the hooks'
# own cost (~1-20 us each, under load): a set is what no computation parts, so holding its
# first gradient back until its last costs no overlap with computation. The span bounds that
# wait in a long run of hooks with nothing between them (many small parameters).
READY_GAP_S = 100e-6
READY_SPAN_S = 10e-3
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
        self._earliest = {}  # gradient -> its earliest time from its step's first hook
        self._watched = 0

    def hook(self, grad):
        self.recording.append((time.perf_counter(), grad))

    def cut_short(self):
        """Forgets the step in progress (it failed or the context ended): the next is watched."""
        self.recording = []

    def end_step(self, alone):
        """Folds the step that ends into the earliest times; after WATCHED_STEPS steps, returns
        the ready sets ([ReadySet]; gradients for which `alone(gradient)` holds are in none),
        else None."""
        if self.recording:
            first = self.recording[0][0]
            earliest = self._earliest
            for t, g in self.recording:
                t -= first
                if t < earliest.get(g, t + 1.0):
                    earliest[g] = t
            self.recording = []
            self._watched += 1
        if self._watched < WATCHED_STEPS:
            return None
        return form(sorted((t, g.index, g) for g, t in self._earliest.items()), alone)


def form(hooks, alone):
    """The ready sets of `hooks` [(time, _, gradient)] in time order: runs of gradients whose
    hooks ran within READY_GAP_S of the one before and within READY_SPAN_S of the run's first,
    two or more, none for which `alone(gradient)` holds (they part runs too)."""
    runs, run, first, last = [], [], 0.0, 0.0
    for t, _, g in hooks:
        if alone(g):
            runs.append(run)
            run = []
            continue
        if run and (t - last > READY_GAP_S or t - first > READY_SPAN_S):
            runs.append(run)
            run = []
        if not run:
            first = t
        run.append(g)
        last = t
    runs.append(run)
    return [ReadySet(run) for run in runs if len(run) > 1]
