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
  own correction.
- ``BroadcastGlobalVariablesCallback`` broadcasts at the start of training (building the
  optimizer, as Keras' first train step would), so that the first step starts from the root's
  weights; a model not built by then (no input shape) is broadcast after the first batch, as
  Horovod does.
"""

import warnings

import keras
import numpy as np

from troika import global_process_set, rank, size
from troika.keras import _backend as backend

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


def _learning_rate(optimizer):
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the learning rate to `initial_lr * multiplier(epoch)` for the epochs from
    `start_epoch` to `end_epoch` (exclusive; None: no end). `multiplier` is a function of the
    epoch or a constant c (then c ** (epoch - start_epoch)). With `staircase`, the rate is set at
    each epoch's first batch, with an integer epoch; without, at every batch, with the epoch
    `epoch + batch / steps_per_epoch` (steps_per_epoch found from fit's parameters if not
    given). `momentum_correction`: see the module docstring."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        if initial_lr is None:
            raise ValueError("%s needs initial_lr, the learning rate the schedule "
                             "multiplies" % type(self).__name__)
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        self.restore_momentum = None
        if callable(multiplier):
            self.multiplier = multiplier
        else:
            self.multiplier = lambda epoch: multiplier ** (epoch - start_epoch)

    def _autodetect_steps_per_epoch(self):
        if self.params.get("steps"):
            return self.params["steps"]
        if self.params.get("samples") and self.params.get("batch_size"):
            return self.params["samples"] // self.params["batch_size"]
        raise ValueError("%s: fit() does not say how many steps an epoch has (a dataset of "
                         "unknown length?); pass steps_per_epoch" % type(self).__name__)

    def _adjust_learning_rate(self, epoch):
        optimizer = self.model.optimizer
        old_lr = _learning_rate(optimizer)
        new_lr = self.initial_lr * self.multiplier(epoch)
        optimizer.learning_rate = new_lr
        if self.momentum_correction and old_lr != 0:
            self._correct_momentum(optimizer, new_lr / old_lr)

    def _correct_momentum(self, optimizer, ratio):
        target = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer's
        momentum = getattr(target, "momentum", None)
        if momentum is None or ratio == 1.0:
            return
        if hasattr(momentum, "assign"):  # a variable: Horovod's correction, for one batch
            self.restore_momentum = (target, float(keras.ops.convert_to_numpy(momentum)))
            momentum.assign(self.restore_momentum[1] * ratio)
            return
        if not momentum:
            return
        buffers = getattr(target, "momentums", None) or getattr(target, "_momentums", None)
        if not buffers:
            warnings.warn("%s: %s has no momentum buffers this callback knows; momentum "
                          "correction is not applied" % (type(self).__name__,
                                                         type(target).__name__))
            self.momentum_correction = False
            return
        for buffer in buffers:
            buffer.assign(buffer * ratio)

    def _restore_momentum_if_needed(self):
        if self.restore_momentum:
            target, momentum = self.restore_momentum
            target.momentum.assign(momentum)
            self.restore_momentum = None

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if (self.current_epoch < self.start_epoch
                or (self.end_epoch is not None and self.current_epoch >= self.end_epoch)):
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_batch_end(self, batch, logs=None):
        self._restore_momentum_if_needed()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = _learning_rate(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Gradual warmup ("Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour"): the
    learning rate goes from `initial_lr / size()` to `initial_lr` over `warmup_epochs`, set at
    every batch: lr(epoch) = initial_lr / size * (epoch * (size - 1) / warmup_epochs + 1),
    with the epoch advanced by one batch (epoch + (batch + 1) / steps_per_epoch), so that each
    epoch ends on a round value."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            epoch += 1.0 / self.steps_per_epoch
            return 1.0 / size() * (epoch * (size() - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and rank() == 0:
            print("\nEpoch %d: learning rate warmup done, learning rate %g"
                  % (epoch + 1, _learning_rate(self.model.optimizer)))


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
