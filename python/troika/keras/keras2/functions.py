"""horovod.keras's and horovod.tensorflow.keras's functions for Keras 2: ``allreduce``,
``allgather``, ``broadcast`` and ``reducescatter`` on tensor-compatible values,
``broadcast_global_variables`` and ``load_model``. Eagerly they return tensors; in a
tf.compat.v1 graph they run in Keras' session and return its values, as Horovod's."""

import tensorflow as tf
import tf_keras

from troika._ops import Average
from troika.keras.keras2.optimizer import distribute_in_place
from troika.tensorflow import collectives
from troika.tensorflow.compression import Compression
from troika.tensorflow.sessions import (
    broadcast_global_variables as _broadcast_global_variables_op)


def _eval(result):
    """`result` eagerly; in a tf.compat.v1 graph, what Keras' session computes of it."""
    if tf.executing_eagerly():
        return result
    return tf.compat.v1.keras.backend.get_session().run(result)


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none):
    """The reduction of `value` (the same shape on every rank) over the ranks; Average unless
    `op` (or the deprecated `average`) says otherwise. `name` names the constant made of
    `value`."""
    return _eval(collectives.allreduce(tf.constant(value, name=name), average=average, op=op,
                                       prescale_factor=prescale_factor,
                                       postscale_factor=postscale_factor,
                                       compression=compression))


def allgather(value, name=None):
    """Every rank's `value` concatenated along the first dimension (which may differ)."""
    return _eval(collectives.allgather(tf.constant(value, name=name)))


def broadcast(value, root_rank, name=None):
    """`root_rank`'s `value` on every rank."""
    return _eval(collectives.broadcast(tf.constant(value, name=name), root_rank))


def reducescatter(value, name=None, op=Average):
    """`value` reduced over the ranks (Average or Sum), each rank given its rows of the first
    dimension."""
    return _eval(collectives.reducescatter(tf.constant(value, name=name), op=op))


def broadcast_global_variables(root_rank):
    """Assigns root_rank's values to every global variable of Keras' tf.compat.v1 graph, in
    Keras' session. Eagerly there are no global variables: RuntimeError, as Horovod's (use
    BroadcastGlobalVariablesCallback, or troika.tensorflow.broadcast_variables)."""
    return _eval(_broadcast_global_variables_op(root_rank))


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, legacy_opts=False):
    """tf_keras.models.load_model(filepath) with the model's optimizer made a
    DistributedOptimizer (with `compression`), keeping the state it was saved with (its step
    count, slots...). Any Keras 2 optimizer loads so, built-in or not.

    custom_optimizers: optimizer classes of the saved model that Keras cannot find by itself
    (given to Keras by their names); custom_objects: other custom classes and functions, as
    load_model takes them. legacy_opts: Horovod's switch between the
    tf.keras.optimizers.legacy classes and the others; Keras restores the class the model was
    saved with either way, so it changes nothing here."""
    del legacy_opts  # the saved class is restored as it was
    objects = {cls.__name__: cls for cls in custom_optimizers or []}
    objects.update(custom_objects or {})
    model = tf_keras.models.load_model(filepath, custom_objects=objects)
    if getattr(model, "optimizer", None) is not None:
        distribute_in_place(model.optimizer, compression=compression)
    return model
