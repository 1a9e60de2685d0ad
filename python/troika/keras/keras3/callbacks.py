"""Horovod's Keras callbacks for Keras 3: ``BroadcastGlobalVariablesCallback``,
``MetricAverageCallback``, ``LearningRateScheduleCallback``, ``LearningRateWarmupCallback`` and
``BestModelCheckpoint``, with Horovod's arguments and semantics.

Keras 3 differences, each kept as close to Horovod's behaviour as Keras 3 allows:
- Keras 3 has no ``optimizer.lr``: the learning rate is read and set as
  ``optimizer.learning_rate`` (and still logged as ``lr`` at the end of an epoch).
- Keras 3 compiles an optimizer's ``momentum`` into the train step as a constant, so Horovod's
  momentum correction (the momentum set to ``momentum * new_lr / old_lr`` for one batch) would
  change nothing. The same correction is applied to the velocities instead: when the learning
  rate changes, the optimizer's momentum buffers (SGD's and RMSprop's) are scaled by
  ``new_lr / old_lr``, which gives the step Horovod's gives (for SGD with Nesterov momentum,
  the velocity's share of it). An optimizer whose ``momentum`` is a variable gets Horovod's
  own correction. (The learning rate callbacks' logic is troika.keras._schedule's, shared with
  Keras 2's callbacks.)
- ``BroadcastGlobalVariablesCallback`` broadcasts at the start of training (building the
  optimizer, as Keras' first train step would), so that the first step starts from the root's
  weights; a model not built by then (no input shape) is broadcast after the first batch, as
  Horovod does.
"""

import keras
import numpy as np

from troika import global_process_set
from troika.keras._schedule import LearningRateScheduleLogic, LearningRateWarmupLogic
from troika.keras.keras3 import _backend as backend

__all__ = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback",
           "LearningRateScheduleCallback", "LearningRateWarmupCallback", "BestModelCheckpoint"]


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcasts the model's and the optimizer's variables from `root_rank` at the start of
    training, so that every rank starts from the same state (random initial weights, or a
    checkpoint restored on the root). `local_variables`: variables left as they are."""

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.broadcast_done = False
        self._local_keys = set()
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple)):
            local_variables = [local_variables]
        for var in local_variables:
            self.register_local_var(var)

    def register_local_var(self, var):
        """`var` is not broadcast."""
        self._local_keys.add(backend.variable_key(var))

    def _broadcast(self):
        optimizer = getattr(self.model, "optimizer", None)
        variables = [v for v in self.model.variables
                     if backend.variable_key(v) not in self._local_keys]
        if optimizer is not None:
            variables += list(optimizer.variables)
        backend.broadcast_variables(variables, self.root_rank, global_process_set)
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        if not self.model.built:  # no variables yet: after the first batch
            return
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and not optimizer.built:
            # Keras 3 on TensorFlow builds it when the train step is traced; build it as that
            # would, so that its variables are broadcast before the first step too.
            with keras.name_scope(optimizer.name, caller=optimizer):
                optimizer.build(self.model.trainable_variables)
        self._broadcast()

    def on_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()


class MetricAverageCallback(keras.callbacks.Callback):
    """Replaces each metric of an epoch's logs with its average over the ranks, for the
    callbacks after it (ReduceLROnPlateau, TensorBoard, History: put it before them)."""

    def __init__(self, device=""):
        super().__init__()
        self.device = device

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        # Sorted by name: every rank reduces the same metrics in the same order.
        for metric in sorted(logs):
            value = np.asarray(logs[metric], dtype=np.float64)
            reduced = backend.allreduce_value(value, name=None, average=None, op=None,
                                              prescale_factor=1.0, postscale_factor=1.0,
                                              compression=backend.Compression.none)
            reduced = keras.ops.convert_to_numpy(reduced)
            logs[metric] = float(reduced) if reduced.ndim == 0 else reduced


class _KerasValues:
    """How the learning rate callbacks read and set values in Keras 3 (troika.keras._schedule)."""

    def _learning_rate(self, optimizer):
        return float(keras.ops.convert_to_numpy(optimizer.learning_rate))

    def _set_learning_rate(self, optimizer, value):
        optimizer.learning_rate = value

    def _get(self, variable):
        return keras.ops.convert_to_numpy(variable)

    def _set(self, variable, value):
        variable.assign(value)

    def _scale(self, variable, ratio):
        variable.assign(variable * ratio)


class LearningRateScheduleCallback(_KerasValues, LearningRateScheduleLogic,
                                   keras.callbacks.Callback):
    __doc__ = LearningRateScheduleLogic.__doc__


class LearningRateWarmupCallback(_KerasValues, LearningRateWarmupLogic,
                                 keras.callbacks.Callback):
    __doc__ = LearningRateWarmupLogic.__doc__


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """keras.callbacks.ModelCheckpoint that keeps only the best model (save_best_only=True).
    As Horovod's, it is made without a file path: set `filepath` (a ``.keras`` path, or
    ``.weights.h5`` with save_weights_only) before training, or give it here (a Troika
    addition)."""

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto",
                 save_freq="epoch", filepath=None):
        # Keras 3 checks the path's suffix when the callback is made: check a stand-in.
        placeholder = "best.weights.h5" if save_weights_only else "best.keras"
        super().__init__(filepath=filepath if filepath is not None else placeholder,
                         monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq)
        self.filepath = filepath

    def on_train_begin(self, logs=None):
        if self.filepath is None:
            raise ValueError("BestModelCheckpoint: set its `filepath` (where the best model "
                             "is saved) before training")
        super().on_train_begin(logs)
