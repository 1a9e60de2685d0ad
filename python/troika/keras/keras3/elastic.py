"""horovod.keras.elastic and horovod.tensorflow.keras.elastic for Keras 3: ``run``,
``KerasState`` and the callbacks that keep the state current in ``model.fit``, over
troika.tensorflow.elastic on the TensorFlow backend and troika.torch.elastic on the torch
backend (keras3._backend; docs/elastic.md)."""

import keras

from troika.keras._elastic_callbacks import (CommitStateLogic, UpdateBatchStateLogic,
                                             UpdateEpochStateLogic)
from troika.keras.keras3._backend import KerasStateBase, elastic_run as run

__all__ = ["KerasState", "CommitStateCallback", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback", "run"]


class KerasState(KerasStateBase):
    """A Keras model (built), its optimizer (default: the model's) and plain attributes:
    ``KerasState(model, epoch=0, batch=0)``. Commit, restore and sync as the backend's
    KerasStateBase (troika.tensorflow's TensorFlowKerasState, or keras3._torch's); an
    optimizer not built yet (Keras 3 builds it at its first step) is built here, as that step
    would, so that every rank, a joining one too, syncs the same variables."""

    def __init__(self, model, optimizer=None, **kwargs):
        target = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        if target is not None and not target.built and getattr(model, "built", True):
            with keras.name_scope(target.name, caller=target):
                target.build(model.trainable_variables)
        super().__init__(model, optimizer=optimizer, backend=keras.backend, **kwargs)


class CommitStateCallback(CommitStateLogic, keras.callbacks.Callback):
    __doc__ = CommitStateLogic.__doc__


class UpdateBatchStateCallback(UpdateBatchStateLogic, keras.callbacks.Callback):
    __doc__ = UpdateBatchStateLogic.__doc__


class UpdateEpochStateCallback(UpdateEpochStateLogic, keras.callbacks.Callback):
    __doc__ = UpdateEpochStateLogic.__doc__
