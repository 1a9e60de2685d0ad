"""What troika.keras needs from Keras' backend, for the TensorFlow backend: gradients and
variables as troika.tensorflow's ops take them, and the refusal of XLA.

Keras 3 variables on TensorFlow wrap a tf.Variable (``variable.value``) and have no ``ref()``;
troika.tensorflow's functions are given the tf.Variables. Everything here works eagerly and
inside the ``tf.function`` of Keras' train step.
"""

import contextlib

import keras
import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from troika import InvalidArgumentError
from troika.tensorflow import collectives
from troika.tensorflow.compression import Compression
from troika.tensorflow.elastic import TensorFlowKerasState as KerasStateBase
from troika.tensorflow.elastic import run as elastic_run
from troika.tensorflow.functions import broadcast_variables as _broadcast_variables
from troika.tensorflow.allreduce_grads import make_allreduce_grads_fn

__all__ = ["Compression", "native_variable", "variable_key", "make_gradient_allreducer",
           "broadcast_variables", "check_not_xla", "is_sparse", "to_dense", "divide", "read",
           "init_scope", "allreduce_value", "allgather_value", "broadcast_value",
           "reducescatter_value", "KerasStateBase", "elastic_run"]


def native_variable(variable):
    """The tf.Variable of a Keras variable (a tf.Variable itself unchanged)."""
    if isinstance(variable, keras.Variable):
        inner = variable.value
        if isinstance(inner, tf.Variable):
            return inner
    return variable


def variable_key(variable):
    """A key that names one variable, the same for a Keras variable and its tf.Variable."""
    return id(native_variable(variable))


def make_gradient_allreducer(device_dense, device_sparse, compression, sparse_as_dense, op,
                             gradient_predivide_factor, groups, process_set):
    """(grads, variables) -> the grads allreduced (None stays None), as
    hvd.DistributedGradientTape reduces them: one op per gradient, or `groups` (a number, or
    lists of variables) as grouped allreduces. Run eagerly, the ops are one tf.function."""
    if isinstance(groups, list):
        groups = [[native_variable(v) for v in group] for group in groups]
    reduce = make_allreduce_grads_fn(device_dense, device_sparse, compression, sparse_as_dense,
                                     op, gradient_predivide_factor, groups, process_set)

    def allreduce_gradients(grads, variables):
        return reduce(list(grads), [native_variable(v) for v in variables])

    return allreduce_gradients


def broadcast_variables(variables, root_rank, process_set):
    """Assigns root_rank's values to `variables` (Keras or tf.Variables) on every rank."""
    variables = [native_variable(v) for v in variables]
    if variables:
        _broadcast_variables(variables, root_rank, process_set=process_set)


def check_not_xla(what):
    """Raises if Keras' train step is being compiled by XLA, naming jit_compile=False."""
    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        raise InvalidArgumentError(
            "INVALID_ARGUMENT: %s cannot run inside an XLA-compiled train step: XLA cannot "
            "call Troika's collectives. Compile the model with "
            "model.compile(..., jit_compile=False) (Keras' default, jit_compile='auto', "
            "compiles with XLA when a GPU is present). For a custom loop, leave the "
            "optimizer's apply_gradients outside tf.function(jit_compile=True)." % what)


def read(variable):
    """The variable's value as a tensor of its own (a graph tensor with a name of its own)."""
    return tf.convert_to_tensor(native_variable(variable))


def is_sparse(grad):
    return isinstance(grad, tf.IndexedSlices)


def to_dense(grad):
    return tf.convert_to_tensor(grad) if isinstance(grad, tf.IndexedSlices) else grad


def divide(grad, divisor):
    """grad / divisor, an IndexedSlices staying one."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / tf.cast(divisor, grad.values.dtype), grad.indices,
                                grad.dense_shape)
    return grad / tf.cast(divisor, grad.dtype)


def init_scope():
    """Where variables made during a traced train step are created: outside the trace."""
    return tf.init_scope() if not tf.executing_eagerly() else contextlib.nullcontext()


# Horovod's horovod.tensorflow.keras functions on values: the value as a constant tensor
# (`name` names the constant, as Horovod's), the result an eager tensor.

def allreduce_value(value, name, average, op, prescale_factor, postscale_factor, compression):
    return collectives.allreduce(tf.constant(value, name=name), average=average, op=op,
                                 prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor, compression=compression)


def allgather_value(value, name):
    return collectives.allgather(tf.constant(value, name=name))


def broadcast_value(value, root_rank, name):
    return collectives.broadcast(tf.constant(value, name=name), root_rank)


def reducescatter_value(value, name, op):
    return collectives.reducescatter(tf.constant(value, name=name), op=op)
