"""horovod.keras.elastic and horovod.tensorflow.keras.elastic for Keras 2 (tf_keras): ``run``,
``KerasState`` and the callbacks that keep the state current in ``model.fit``, over
troika.tensorflow.elastic (docs/elastic.md)."""

import tf_keras

from troika.keras._elastic_callbacks import (CommitStateLogic, UpdateBatchStateLogic,
                                             UpdateEpochStateLogic)
from troika.keras.keras2.optimizer import build_optimizer
from troika.tensorflow.elastic import TensorFlowKerasState, run

__all__ = ["KerasState", "CommitStateCallback", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback", "run"]


class KerasState(TensorFlowKerasState):
    """A Keras model (built), its optimizer (default: the model's) and plain attributes:
    ``KerasState(model, epoch=0, batch=0)``. Commit, restore and sync as TensorFlowKerasState;
    the optimizer's variables are made here if its first step has not made them yet, so that
    every rank, a joining one too, syncs the same variables."""

    def __init__(self, model, optimizer=None, **kwargs):
        target = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        if target is not None and getattr(model, "built", True):
            build_optimizer(target, model.trainable_variables)
        super().__init__(model, optimizer=optimizer, backend=tf_keras.backend, **kwargs)


class CommitStateCallback(CommitStateLogic, tf_keras.callbacks.Callback):
    __doc__ = CommitStateLogic.__doc__


class UpdateBatchStateCallback(UpdateBatchStateLogic, tf_keras.callbacks.Callback):
    __doc__ = UpdateBatchStateLogic.__doc__


class UpdateEpochStateCallback(UpdateEpochStateLogic, tf_keras.callbacks.Callback):
    __doc__ = UpdateEpochStateLogic.__doc__
