"""The logic of Horovod's learning rate callbacks (``LearningRateScheduleCallback``,
``LearningRateWarmupCallback``), shared by Keras 3's and Keras 2's callbacks: each Keras' module
adds its ``Callback`` base and says how a learning rate and a variable are read and set
(``_learning_rate``, ``_set_learning_rate``, ``_get``, ``_set``, ``_scale``).

Momentum correction ("Accurate, Large Minibatch SGD"): when the learning rate changes from
old_lr to new_lr, the next step's momentum term is scaled by new_lr / old_lr. Horovod sets the
optimizer's ``momentum`` to ``momentum * new_lr / old_lr`` for one batch; that is done where the
momentum is a variable the train step reads (Keras 2's legacy optimizers). Keras 3's optimizers
and Keras 2's (non-legacy) ones compile a float ``momentum`` into the train step as a constant,
so setting it would change nothing: their velocities (SGD's ``momentums``, RMSprop's
``_momentums``) are scaled by new_lr / old_lr instead, which gives the same step (for Nesterov
momentum, its velocity term). An optimizer with momentum but neither gets a warning and none.
"""

import warnings

from troika import rank, size


class LearningRateScheduleLogic:
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

    # How the Keras at hand reads and sets values (its callbacks module defines them).
    def _learning_rate(self, optimizer):
        """The optimizer's learning rate, a float."""
        raise NotImplementedError

    def _set_learning_rate(self, optimizer, value):
        raise NotImplementedError

    def _get(self, variable):
        """A variable's value (numpy)."""
        raise NotImplementedError

    def _set(self, variable, value):
        raise NotImplementedError

    def _scale(self, variable, ratio):
        """variable *= ratio."""
        raise NotImplementedError

    def _autodetect_steps_per_epoch(self):
        if self.params.get("steps"):
            return self.params["steps"]
        if self.params.get("samples") and self.params.get("batch_size"):
            return self.params["samples"] // self.params["batch_size"]
        raise ValueError("%s: fit() does not say how many steps an epoch has (a dataset of "
                         "unknown length?); pass steps_per_epoch" % type(self).__name__)

    def _adjust_learning_rate(self, epoch):
        optimizer = self.model.optimizer
        old_lr = self._learning_rate(optimizer)
        new_lr = self.initial_lr * self.multiplier(epoch)
        self._set_learning_rate(optimizer, new_lr)
        if self.momentum_correction and old_lr != 0:
            self._correct_momentum(optimizer, new_lr / old_lr)

    def _correct_momentum(self, optimizer, ratio):
        target = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer's
        momentum = getattr(target, "momentum", None)
        if momentum is None or ratio == 1.0:
            return
        if hasattr(momentum, "assign"):  # a variable: Horovod's correction, for one batch
            self.restore_momentum = (target, float(self._get(momentum)))
            self._set(momentum, self.restore_momentum[1] * ratio)
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
            self._scale(buffer, ratio)

    def _restore_momentum_if_needed(self):
        if self.restore_momentum:
            target, momentum = self.restore_momentum
            self._set(target.momentum, momentum)
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
            logs["lr"] = self._learning_rate(self.model.optimizer)


class LearningRateWarmupLogic(LearningRateScheduleLogic):
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
                  % (epoch + 1, self._learning_rate(self.model.optimizer)))
