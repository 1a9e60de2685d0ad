"""horovod.tensorflow.keras's functions: ``allreduce``, ``allgather``, ``broadcast`` and
``reducescatter`` on tensor-compatible values (run eagerly; the result is a tensor of the
backend: a tf.Tensor, or a torch.Tensor on the torch backend), ``broadcast_global_variables``
and ``load_model``; and ``broadcast_variables`` (Troika's, as horovod.tensorflow's)."""

import keras

from troika import global_process_set
from troika._ops import Average
from troika.keras.keras3 import _backend as backend
from troika.keras.keras3._backend import Compression
from troika.keras.keras3.optimizer import distribute_in_place


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none):
    """The reduction of `value` (the same shape on every rank) over the ranks; Average unless
    `op` says otherwise. `name` names the constant made of `value`."""
    return backend.allreduce_value(value, name, average, op, prescale_factor, postscale_factor,
                                   compression)


def allgather(value, name=None):
    """Every rank's `value` concatenated along the first dimension (which may differ)."""
    return backend.allgather_value(value, name)


def broadcast(value, root_rank, name=None):
    """`root_rank`'s `value` on every rank."""
    return backend.broadcast_value(value, root_rank, name)


def reducescatter(value, name=None, op=Average):
    """`value` reduced over the ranks (Average or Sum), each rank given its rows of the first
    dimension."""
    return backend.reducescatter_value(value, name, op)


def broadcast_variables(variables, root_rank, process_set=global_process_set):
    """Assigns `root_rank`'s values to `variables` (Keras variables: a model's, an optimizer's)
    on every rank of `process_set`; for custom loops (model.fit has
    BroadcastGlobalVariablesCallback). Not in horovod.keras; horovod.tensorflow's, on Keras'
    variables and on either backend."""
    backend.broadcast_variables(list(variables), root_rank, process_set)


def broadcast_global_variables(root_rank):
    """Horovod's TF1-style global-variable broadcast, which Keras 3 (eager, or TensorFlow 2's
    graphs) has no use for: raises, naming what to use instead (as Horovod does when executing
    eagerly)."""
    raise RuntimeError(
        "hvd.broadcast_global_variables(): Keras 3 keeps no global variables to broadcast. "
        "Broadcast the model's and optimizer's own variables: "
        "hvd.callbacks.BroadcastGlobalVariablesCallback(%d) in model.fit, or "
        "hvd.broadcast_variables(model.variables + optimizer.variables, root_rank=%d)"
        % (root_rank, root_rank))


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, legacy_opts=False):
    """keras.models.load_model(filepath) with the model's optimizer made a DistributedOptimizer
    (with `compression`), keeping the state it was saved with (its step count, momentums...).

    custom_optimizers: the optimizer classes (keras.optimizers.Optimizer subclasses) of the
    saved model that Keras cannot find by itself (not registered with
    keras.saving.register_keras_serializable); custom_objects: other custom classes and
    functions, as keras.models.load_model takes them. legacy_opts: Keras 2's legacy optimizers,
    which Keras 3 does not have (raises)."""
    if legacy_opts:
        raise ValueError("legacy_opts=True loads Keras 2's tf.keras.optimizers.legacy "
                         "optimizers; Keras 3 has none (use tf_keras with "
                         "TF_USE_LEGACY_KERAS=1 for such a model)")
    objects = {}
    for cls in custom_optimizers or []:
        objects[cls.__name__] = cls
        objects[keras.saving.get_registered_name(cls)] = cls
    objects.update(custom_objects or {})
    model = keras.models.load_model(filepath, custom_objects=objects)
    if getattr(model, "optimizer", None) is not None:
        distribute_in_place(model.optimizer, compression=compression)
    return model
