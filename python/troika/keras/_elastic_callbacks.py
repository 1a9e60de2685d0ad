"""The logic of Horovod's elastic Keras callbacks, shared by Keras 3's and Keras 2's
troika.keras.elastic (each adds its Keras' ``Callback`` base). They keep an elastic state
(``KerasState``: ``state.epoch``, ``state.batch``) current in ``model.fit`` so that ``run``
goes on from the last commit after a reset, and commit it."""


class CommitStateLogic:
    """Commits `state` every `batches_per_commit` batches and at the end of each epoch. The
    count restarts at each ``fit`` (a reset starts one), the same on every rank."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateLogic:
    """Keeps ``state.batch`` the batch just finished (0 again at an epoch's end). When ``fit``
    was given a number of steps per epoch, the first epoch after a reset runs only the steps
    left of it (``steps - state.batch``)."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.steps_per_epoch = None

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.params.get("steps"):
            if self.steps_per_epoch is None:
                self.steps_per_epoch = self.params.get("steps")
            self.params["steps"] = self.steps_per_epoch - self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = batch

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateLogic:
    """Keeps ``state.epoch`` the job's epoch across resets: ``fit``'s epochs count from 0 at
    each ``fit``, so the epoch the state had when training began is added, plus one at an
    epoch's end (the next epoch is the one to run after a reset there)."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = self.state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self.initial_epoch + epoch + 1
