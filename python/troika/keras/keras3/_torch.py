"""What troika.keras needs from Keras' backend, for the torch backend (``KERAS_BACKEND=torch``):
gradients and variables as troika.torch's collectives take them. The same names as
_tensorflow.py's (keras3/_backend.py picks one).

Keras 3 variables on torch wrap a ``torch.nn.Parameter`` (``variable.value``), which
troika.torch's collectives are given. Keras' torch train step runs eagerly (``jit_compile``'s
default there): it calls ``loss.backward()``, then the optimizer's ``apply`` with every
gradient, under ``torch.no_grad()``. The gradients' allreduces are therefore submitted at
``apply``, all of them before the first is waited for (so they run concurrently), not during
the backward pass as troika.torch.DistributedOptimizer's hooks submit them.
"""

import contextlib

import keras
import numpy as np
import torch

from troika import global_process_set
from troika._grouping import plan
from troika._handles import synchronize
from troika._ops import Average
from troika.torch import collectives, grouped
from troika.torch.compression import Compression
from troika.torch.elastic import ObjectState, run as elastic_run

__all__ = ["Compression", "native_variable", "variable_key", "make_gradient_allreducer",
           "broadcast_variables", "check_not_xla", "is_sparse", "to_dense", "divide", "read",
           "init_scope", "allreduce_value", "allgather_value", "broadcast_value",
           "reducescatter_value", "KerasStateBase", "elastic_run"]

# Unsigned dtypes the core does not take, moved as the signed ones of their size (broadcasts
# copy bits). Keras' SeedGenerator keeps its state as uint32.
_SAME_BITS = {getattr(torch, u): getattr(torch, s)
              for u, s in (("uint32", "int32"), ("uint64", "int64")) if hasattr(torch, u)}


def native_variable(variable):
    """The torch tensor (a Parameter) of a Keras variable (a tensor itself unchanged)."""
    if isinstance(variable, keras.Variable):
        return variable.value
    return variable


def variable_key(variable):
    """A key that names one variable, the same for a Keras variable and its Parameter."""
    return id(native_variable(variable))


def _submit(grad, i, compression, op, prescale, postscale, process_set):
    """Starts the allreduce of one gradient; returns a function giving its result."""
    if grad.is_sparse:  # Horovod's sparse allreduce (an allgather of indices and values)
        wait = collectives.sparse_allreduce_async(
            grad, "troika.keras.sparse_grad_%d" % i, op, process_set=process_set)
        return lambda: [wait()]
    wire, ctx = compression.compress(grad.contiguous())
    handle = collectives.allreduce_async(wire, op=op, prescale_factor=prescale,
                                         postscale_factor=postscale, process_set=process_set)
    return lambda: [compression.decompress(synchronize(handle), ctx)]


def _submit_group(grads, compression, op, prescale, postscale, process_set):
    """Starts one grouped allreduce of dense gradients; returns a function giving the results."""
    if any(g.is_sparse for g in grads):
        raise ValueError("DistributedOptimizer(groups=...): a sparse gradient cannot be in a "
                         "grouped allreduce; pass sparse_as_dense=True")
    compressed = [compression.compress(g.contiguous()) for g in grads]
    handle = grouped.grouped_allreduce_async([w for w, _ in compressed], op=op,
                                             prescale_factor=prescale,
                                             postscale_factor=postscale,
                                             process_set=process_set)
    return lambda: [compression.decompress(r, ctx)
                    for r, (_, ctx) in zip(synchronize(handle), compressed)]


def make_gradient_allreducer(device_dense, device_sparse, compression, sparse_as_dense, op,
                             gradient_predivide_factor, groups, process_set):
    """(grads, variables) -> the grads allreduced (None stays None), with Horovod's options as
    _tensorflow.make_gradient_allreducer takes them: one allreduce per gradient, or `groups` (a
    number, or lists of variables) as grouped allreduces. Every allreduce is submitted before
    the first is waited for. On a rank outside `process_set` the gradients come back as they
    are (Horovod's rule). device_dense and device_sparse: Horovod's, unused (the tensors'
    device decides)."""
    if op == Average:
        # The average split around the sum: 1/f before, f/size after (the core divides by size).
        prescale, postscale = 1.0 / gradient_predivide_factor, gradient_predivide_factor
    else:
        prescale = postscale = 1.0
    group_keys = (tuple(tuple(variable_key(v) for v in group) for group in groups)
                  if isinstance(groups, list) else None)

    def allreduce_gradients(grads, variables):
        grads = list(grads)
        if sparse_as_dense:
            grads = [to_dense(g) if g is not None else None for g in grads]
        if not process_set.included():
            return grads
        indices, split = plan(grads, variables, groups, group_keys, variable_key)
        if split is None:
            split = [(i,) for i in indices]
            waits = [_submit(grads[i], i, compression, op, prescale, postscale, process_set)
                     for i in indices]
        else:
            waits = [_submit_group([grads[i] for i in members], compression, op, prescale,
                                   postscale, process_set) for members in split]
        for members, wait in zip(split, waits):
            for i, reduced in zip(members, wait()):
                grads[i] = reduced
        return grads

    return allreduce_gradients


def broadcast_variables(variables, root_rank, process_set):
    """Assigns root_rank's values to `variables` (Keras variables or tensors) on every rank,
    all broadcasts submitted before the first is waited for."""
    handles = []
    with torch.no_grad():
        for v in variables:
            t = native_variable(v).data
            t = t.view(_SAME_BITS[t.dtype]) if t.dtype in _SAME_BITS else t
            handles.append(collectives.broadcast_async_(t, root_rank, process_set=process_set))
    for h in handles:
        synchronize(h)


def check_not_xla(what):
    """Nothing to refuse on this backend: with model.compile(jit_compile=True) Keras runs the
    train step under torch.compile, whose tracing stops at Troika's collectives (a graph break:
    torch warns that it cannot trace troika._troika's functions), so they run eagerly between
    the compiled parts (test_keras_torch.py checks that training equals one process's)."""


def read(variable):
    """The variable's value now, as a tensor of its own."""
    return native_variable(variable).detach().clone()


def is_sparse(grad):
    return isinstance(grad, torch.Tensor) and grad.is_sparse


def to_dense(grad):
    return grad.to_dense() if is_sparse(grad) else grad


def divide(grad, divisor):
    return grad / divisor


def init_scope():
    """Where variables made during a train step are created: here (the step runs eagerly)."""
    return contextlib.nullcontext()


# Horovod's horovod.tensorflow.keras functions on values: the value as a tensor (`name` names
# the operation, as troika.torch's collectives take it), the result a torch tensor.

def _tensor(value):
    if isinstance(value, keras.Variable):
        return value.value.detach()
    if isinstance(value, torch.Tensor):
        return value
    return torch.as_tensor(np.asarray(value) if isinstance(value, (list, tuple)) else value)


def allreduce_value(value, name, average, op, prescale_factor, postscale_factor, compression):
    return collectives.allreduce(_tensor(value), average=average, name=name,
                                 compression=compression, op=op,
                                 prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor)


def allgather_value(value, name):
    return collectives.allgather(_tensor(value), name=name)


def broadcast_value(value, root_rank, name):
    return collectives.broadcast(_tensor(value), root_rank, name=name)


def reducescatter_value(value, name, op):
    return collectives.reducescatter(_tensor(value), name=name, op=op)


class KerasStateBase(ObjectState):
    """troika.keras.elastic.KerasState's base on the torch backend: a Keras model, its optimizer
    (default: the model's, built) and plain attributes. Saves copies of the model's and the
    optimizer's variables, assigns them back in restore(), and syncs them from rank 0 by
    broadcasts (the plain attributes as troika.torch.elastic.ObjectState's)."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if not getattr(model, "built", True):
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer",
                                                                         None)
        self.backend = backend
        self._save_model()
        super().__init__(**kwargs)

    def _variables(self):
        opt = [] if self.optimizer is None else list(self.optimizer.variables)
        return list(self.model.variables) + opt

    def _save_model(self):
        self._saved = [(v, native_variable(v).detach().clone()) for v in self._variables()]

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        for variable, value in self._saved:
            variable.assign(value)
        super().restore()

    def sync(self):
        broadcast_variables(self._variables(), 0, global_process_set)
        self._save_model()
        super().sync()
