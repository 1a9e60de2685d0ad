"""horovod.mxnet's training wrappers: DistributedOptimizer, an mx.optimizer.Optimizer that
averages each gradient across the ranks before its update, and DistributedTrainer, a
gluon.Trainer whose step averages the gradients across the ranks instead of a KVStore.

Both push every allreduce onto MXNet's engine (mpi_ops.py) and return at once: the update that
reads a gradient runs once its allreduce wrote it, and the allreduces of a backward pass overlap
what the engine still computes. Averaging is Horovod's: each gradient is multiplied by 1 /
gradient_predivide_factor before the sum and by gradient_predivide_factor / size after it (the
data plane averages; the optimizer's rescale_grad is left as given).
"""

import collections
import warnings

import mxnet as mx

from troika import global_process_set
from troika._grouping import split
from troika.mxnet.compression import Compression
from troika.mxnet.mpi_ops import Average, allreduce_, grouped_allreduce_


def _scales(gradient_predivide_factor):
    return dict(op=Average, prescale_factor=1.0 / gradient_predivide_factor,
                postscale_factor=gradient_predivide_factor)


class DistributedOptimizer(mx.optimizer.Optimizer):
    """Wraps `optimizer`: update() first averages the gradient across `process_set`'s ranks
    (named by the parameter's index); with `num_groups` > 0 and a list of indices (MXNet 2's
    multi-tensor update), in that many grouped allreduces. Attributes read and set (other than
    its own, which start with "_") are the wrapped optimizer's, so that a gluon.Trainer given
    it sets the wrapped optimizer's rescale_grad."""

    def __init__(self, optimizer, gradient_predivide_factor=1.0, num_groups=0,
                 process_set=global_process_set):
        # Not Optimizer.__init__: every other attribute is the wrapped optimizer's.
        self._optimizer = optimizer
        self._gradient_predivide_factor = gradient_predivide_factor
        self._num_groups = num_groups
        self._process_set = process_set

    def __getattr__(self, item):
        return getattr(self._optimizer, item)

    def __setattr__(self, name, value):
        # The wrapped optimizer's settings are its own: a gluon.Trainer sets rescale_grad (and
        # param_dict) on the optimizer it was given, this one, before every step.
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._optimizer, name, value)

    def create_state(self, index, weight):
        return self._optimizer.create_state(index, weight)

    def create_state_multi_precision(self, index, weight):
        return self._optimizer.create_state_multi_precision(index, weight)

    def _do_allreduce(self, index, grad):
        if self._process_set.size() == 1:
            return
        scales = _scales(self._gradient_predivide_factor)
        if not isinstance(index, (tuple, list)):
            allreduce_(grad, name=str(index), process_set=self._process_set, **scales)
            return
        if self._num_groups > 0:
            for i, (grads, indices) in enumerate(zip(split(list(grad), self._num_groups),
                                                     split(list(index), self._num_groups))):
                grouped_allreduce_(grads, name="%s:%s" % (indices[0], indices[-1]),
                                   priority=-i, process_set=self._process_set, **scales)
            return
        for i, (g, idx) in enumerate(zip(grad, index)):
            allreduce_(g, name=str(idx), priority=-i, process_set=self._process_set, **scales)

    def update(self, index, weight, grad, state):
        if self._process_set.included():
            self._do_allreduce(index, grad)
        self._optimizer.update(index, weight, grad, state)

    def update_multi_precision(self, index, weight, grad, state):
        if self._process_set.included():
            self._do_allreduce(index, grad)
        self._optimizer.update_multi_precision(index, weight, grad, state)

    def set_learning_rate(self, lr):
        self._optimizer.set_learning_rate(lr)

    def set_lr_mult(self, args_lr_mult):
        self._optimizer.set_lr_mult(args_lr_mult)

    def set_wd_mult(self, args_wd_mult):
        self._optimizer.set_wd_mult(args_wd_mult)


class DistributedTrainer(mx.gluon.Trainer):
    """A gluon.Trainer (without a KVStore) whose step() averages every gradient across
    `process_set`'s ranks before the update.

    compression: Compression.none or .fp16. gradient_predivide_factor: see the module. prefix:
    tells apart the allreduces of several trainers in one program (each parameter's is named
    prefix + its position). num_groups > 0: the gradients go in that many grouped allreduces
    (one per dtype within each), instead of one each.
    """

    def __init__(self, params, optimizer, optimizer_params=None, compression=Compression.none,
                 gradient_predivide_factor=1.0, prefix=None, num_groups=0,
                 process_set=global_process_set):
        if isinstance(optimizer, DistributedOptimizer):
            optimizer = optimizer._optimizer
            warnings.warn("DistributedTrainer does not take DistributedOptimizer as its "
                          "optimizer. We have unwrapped it for you.")
        if prefix is not None and not isinstance(prefix, str):
            raise ValueError("DistributedTrainer: prefix must be a str, not %r" % (prefix,))
        # One parameter order on every rank.
        if isinstance(params, dict):
            params = collections.OrderedDict(params)
        elif isinstance(params, (list, tuple)):
            params = sorted(params)
        super().__init__(params, optimizer, optimizer_params=optimizer_params, kvstore=None)
        self._compression = compression
        self._gradient_predivide_factor = gradient_predivide_factor
        self._prefix = prefix or ""
        self._num_groups = num_groups
        self._process_set = process_set

    def _allreduce_grads(self):
        if self._process_set.size() == 1 or not self._process_set.included():
            return
        scales = _scales(self._gradient_predivide_factor)
        grads, names, contexts = [], [], []
        for i, param in enumerate(self._params):
            if param.grad_req != "null":
                compressed, ctx = self._compression.compress(param.list_grad()[0])
                grads.append(compressed)
                contexts.append(ctx)
                names.append(self._prefix + str(i))
        if self._num_groups > 0:
            for i, (group, group_names) in enumerate(zip(split(grads, self._num_groups),
                                                         split(names, self._num_groups))):
                by_dtype = collections.defaultdict(list)
                for g, n in zip(group, group_names):
                    by_dtype[g.dtype].append((g, n))
                for entries in by_dtype.values():
                    gs, ns = zip(*entries)
                    grouped_allreduce_(list(gs), name="%s:%s" % (ns[0], ns[-1]), priority=-i,
                                       process_set=self._process_set, **scales)
        else:
            for i, (g, n) in enumerate(zip(grads, names)):
                allreduce_(g, name=n, priority=-i, process_set=self._process_set, **scales)
        if self._compression is not Compression.none:
            grad_params = [p for p in self._params if p.grad_req != "null"]
            for param, g, ctx in zip(grad_params, grads, contexts):
                param.list_grad()[0][:] = self._compression.decompress(g, ctx)
