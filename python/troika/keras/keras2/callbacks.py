"""Horovod's Keras callbacks for Keras 2 (tf_keras): ``BroadcastGlobalVariablesCallback``,
``MetricAverageCallback``, ``LearningRateScheduleCallback``, ``LearningRateWarmupCallback`` and
``BestModelCheckpoint``, with Horovod's arguments and Keras 2 semantics: the learning rate is
``optimizer.lr``, read and set with Keras' ``get_value``/``set_value``; eagerly and, where Horovod
ran them in Keras' session, in a tf.compat.v1 graph.

Where they differ from Horovod's:
- ``BroadcastGlobalVariablesCallback`` broadcasts at the start of training, building the
  optimizer first as its first step would, so that the first step already starts from the
  root's weights (Horovod broadcasts after the first batch, which is still done for a model not
  built by then).
- Momentum correction (troika.keras._schedule) works for Keras 2's current optimizers too, whose
  ``momentum`` is a float compiled into the train step: their velocities are scaled instead
  (Horovod's fails there). The legacy optimizers' ``momentum`` is a variable and gets Horovod's
  correction.
- ``MetricAverageCallback`` averages in float64 (Horovod: float32) and gives Python floats.
"""

import numpy as np
import tensorflow as tf
import tf_keras

from troika import global_process_set
from troika.keras._schedule import LearningRateScheduleLogic, LearningRateWarmupLogic
from troika.keras.keras2.optimizer import build_optimizer
from troika.tensorflow.allreduce_grads import var_key
from troika.tensorflow.collectives import allreduce
from troika.tensorflow.functions import broadcast_variables
from troika.tensorflow.sessions import broadcast_global_variables

__all__ = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback",
           "LearningRateScheduleCallback", "LearningRateWarmupCallback", "BestModelCheckpoint"]

K = tf_keras.backend


def _session():
    return tf.compat.v1.keras.backend.get_session()


class BroadcastGlobalVariablesCallback(tf_keras.callbacks.Callback):
    """Broadcasts the model's and the optimizer's variables from `root_rank` at the start of
    training, so that every rank starts from the same state (random initial weights, or a
    checkpoint restored on the root). `local_variables` (tf.Variables): left as they are. In a
    tf.compat.v1 graph, every global variable is broadcast, in Keras' session."""

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.broadcast_done = False
        self._local_keys = set()
        if local_variables is None:
            local_variables = []
        elif isinstance(local_variables, tf.Variable):
            local_variables = [local_variables]
        elif not all(isinstance(v, tf.Variable) for v in local_variables):
            raise ValueError("BroadcastGlobalVariablesCallback: local_variables must be "
                             "tf.Variables")
        for var in local_variables:
            self.register_local_var(var)

    def register_local_var(self, var):
        """`var` is not broadcast."""
        self._local_keys.add(var_key(var))

    def _broadcast(self):
        with tf.device(self.device):
            if tf.executing_eagerly():
                variables = [v for v in self.model.variables
                             if var_key(v) not in self._local_keys]
                optimizer = getattr(self.model, "optimizer", None)
                if optimizer is not None:
                    opt_vars = optimizer.variables
                    variables += list(opt_vars() if callable(opt_vars) else opt_vars)
                if variables:
                    broadcast_variables(variables, root_rank=self.root_rank,
                                        process_set=global_process_set)
            else:
                _session().run(broadcast_global_variables(self.root_rank))
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        if not tf.executing_eagerly() or not self.model.built:
            return  # after the first batch, when every variable exists
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None:
            build_optimizer(optimizer, self.model.trainable_variables)
        self._broadcast()

    def on_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()


class MetricAverageCallback(tf_keras.callbacks.Callback):
    """Replaces each metric of an epoch's logs with its average over the ranks, for the
    callbacks after it (ReduceLROnPlateau, TensorBoard, History: put it before them)."""

    def __init__(self, device=""):
        super().__init__()
        self.device = device
        self._graph_ops = {}  # a tf.compat.v1 graph's: metric -> (placeholder, allreduce)

    def _average(self, metric, value):
        if tf.executing_eagerly():
            return allreduce(tf.constant(value, dtype=tf.float64)).numpy()
        if metric not in self._graph_ops:
            with tf.name_scope("MetricAverageCallback"):
                fed = tf.compat.v1.placeholder(tf.float64, value.shape)
                self._graph_ops[metric] = (fed, allreduce(fed, device_dense=self.device))
        fed, reduced = self._graph_ops[metric]
        return _session().run(reduced, feed_dict={fed: value})

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        with tf.device(self.device):
            # Sorted by name: every rank reduces the same metrics in the same order.
            for metric in sorted(logs):
                reduced = np.asarray(self._average(metric, np.asarray(logs[metric],
                                                                      dtype=np.float64)))
                logs[metric] = float(reduced) if reduced.ndim == 0 else reduced


class _KerasValues:
    """How the learning rate callbacks read and set values in Keras 2 (troika.keras._schedule):
    Keras' get_value and set_value, which run in Keras' session in a tf.compat.v1 graph."""

    def _learning_rate(self, optimizer):
        return float(K.get_value(optimizer.lr))

    def _set_learning_rate(self, optimizer, value):
        K.set_value(optimizer.lr, value)

    def _get(self, variable):
        return K.get_value(variable)

    def _set(self, variable, value):
        K.set_value(variable, value)

    def _scale(self, variable, ratio):
        K.set_value(variable, K.get_value(variable) * ratio)


class LearningRateScheduleCallback(_KerasValues, LearningRateScheduleLogic,
                                   tf_keras.callbacks.Callback):
    __doc__ = LearningRateScheduleLogic.__doc__


class LearningRateWarmupCallback(_KerasValues, LearningRateWarmupLogic,
                                 tf_keras.callbacks.Callback):
    __doc__ = LearningRateWarmupLogic.__doc__


class BestModelCheckpoint(tf_keras.callbacks.ModelCheckpoint):
    """tf.keras.callbacks.ModelCheckpoint that keeps only the best model (save_best_only=True).
    As Horovod's, it is made without a file path: set `filepath` before training, or give it
    here (a Troika addition)."""

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto",
                 save_freq="epoch", filepath=None):
        super().__init__(filepath=filepath, monitor=monitor, verbose=verbose,
                         save_best_only=True, save_weights_only=save_weights_only, mode=mode,
                         save_freq=save_freq)

    def on_train_begin(self, logs=None):
        if self.filepath is None:
            raise ValueError("BestModelCheckpoint: set its `filepath` (where the best model "
                             "is saved) before training")
        super().on_train_begin(logs)
