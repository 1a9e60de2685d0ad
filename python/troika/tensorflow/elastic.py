"""``horovod.tensorflow.elastic`` on Troika: TensorFlow training that goes on when ranks are
lost (docs/elastic.md). Launch with ``troikarun -np 4 --min-np 2 -- python3 train.py``::

    import troika.tensorflow as hvd
    hvd.init()
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch in range(state.batch, batches):
                train_step(...)                   # hvd.DistributedGradientTape inside
                if state.batch % 10 == 0:
                    state.commit()
            state.batch = 0

    train(state)

When a rank is lost and at least ``--min-np`` ranks remain, every other rank's current
collective fails (``tf.errors.AbortedError`` "membership of job 'j' changed: ..."); ``run``
then restores the state's last commit, joins the job's next generation (``hvd.rank()`` and
``hvd.size()`` change), calls the reset callbacks, syncs rank 0's state to every rank and
calls the function again. Nodes that join are admitted at a ``commit()``
(``HostsUpdatedInterrupt``), as with troika.torch.elastic; the loop itself is
troika._elastic's, shared with it.
"""

import numpy as np
import tensorflow as tf

import troika
from troika import TroikaError
from troika._elastic import (HostsUpdatedInterrupt, ObjectState as _ObjectState, State,
                             run_fn, troika_membership_change)
from troika.tensorflow.collectives import broadcast
from troika.tensorflow.functions import broadcast_object, broadcast_variables
from troika.tensorflow.sessions import broadcast_object_fn
from troika.tensorflow.util import _executing_eagerly

__all__ = ["run", "State", "ObjectState", "TensorFlowState", "TensorFlowKerasState",
           "HostsUpdatedInterrupt"]

# What a collective's error says when the job's generation ended (docs/elastic.md).
_CHANGED = "membership of job '"


def _membership_change(error):
    """The membership change an error of TensorFlow's ops or of the core carries, or None.

    A TensorFlow op's error keeps the core's code and message but not the change itself: after
    one that says the membership changed, every operation of the ended generation fails at
    once with the same status, so one more (the commit point, which never waits then) reads
    the change from the core."""
    change = troika_membership_change(error)
    if change is not None or not isinstance(error, tf.errors.OpError):
        return change
    if _CHANGED not in (error.message or "") or not troika.is_initialized():
        return None
    try:
        troika.context().elastic_commit().wait()
    except TroikaError as e:
        return troika_membership_change(e)
    return None


def run(func):
    """Decorates ``func(state, *args, **kwargs)`` to run as an elastic job: when ranks are lost
    it restores ``state``'s last commit and runs it again in the job's next generation; when
    nodes joined at a commit (HostsUpdatedInterrupt) it goes on from that commit; any other
    error propagates."""
    return run_fn(func, _membership_change)


class ObjectState(_ObjectState):
    """State of plain attributes (``ObjectState(epoch=0, batch=0)``: ``state.epoch``), saved
    by deep copy and synced by ``broadcast_object`` from rank 0."""

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__(bcast_object or broadcast_object, get_rank, **kwargs)


def _tf_variable(variable):
    """`variable`, or the tf.Variable behind a Keras 3 variable (TensorFlow backend)."""
    if isinstance(variable, tf.Variable):
        return variable
    inner = getattr(variable, "value", None)
    return inner if isinstance(inner, tf.Variable) else variable


def _assign_from_rank_0(variables, name):
    for i, v in enumerate(variables):
        v.assign(broadcast(v, 0, name="%s.%d" % (name, i)))


_assign_from_rank_0_fn = tf.function(_assign_from_rank_0)


def _sync_variables(variables, name):
    """Assigns rank 0's values to `variables` (eagerly), as one tf.function of broadcasts
    named "<name>.<i>": by position, so that variables of one name (unnamed tf.Variables)
    never share one."""
    variables = [_tf_variable(v) for v in variables]
    if variables:
        _assign_from_rank_0_fn(variables, name)


def _values(variables):
    """Copies of the variables' values (numpy)."""
    return [np.array(v.numpy(), copy=True) for v in variables]


def _optimizer_variables(optimizer):
    """A Keras optimizer's variables: a list in Keras 3, a method in some Keras 2 optimizers."""
    if optimizer is None:
        return []
    variables = optimizer.variables
    return list(variables() if callable(variables) else variables)


class TensorFlowKerasState(ObjectState):
    """A Keras model, its optimizer and plain attributes, run eagerly (TensorFlow 2):
    ``TensorFlowKerasState(model, optimizer, epoch=0)``. Saves copies of the model's and the
    optimizer's variables, assigns them back in restore(), and syncs them from rank 0 by
    broadcasts. `optimizer` defaults to the model's (compiled) optimizer; an
    optimizer not built yet (Keras 3 builds it at its first step) is built here for the
    model's trainable variables, so that every rank, a joining one too, has the same
    variables to sync. `backend`: Horovod's argument for TensorFlow 1's Keras session,
    unused."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if hasattr(model, "build") and not getattr(model, "built", True):
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer",
                                                                         None)
        self.backend = backend
        build = getattr(self.optimizer, "build", None)
        if build is not None and getattr(self.optimizer, "built", True) is False:
            build(model.trainable_variables)
        self._save_model()
        super().__init__(**kwargs)

    def _variables(self):
        return list(self.model.variables), _optimizer_variables(self.optimizer)

    def _save_model(self):
        model_vars, opt_vars = self._variables()
        self._saved_model = list(zip(model_vars, _values(model_vars)))
        self._saved_optimizer = list(zip(opt_vars, _values(opt_vars)))

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        for variable, value in self._saved_model + self._saved_optimizer:
            variable.assign(value)
        super().restore()

    def sync(self):
        model_vars, opt_vars = self._variables()
        _sync_variables(model_vars + opt_vars, "troika.elastic.keras_state")
        self._save_model()
        super().sync()


class TensorFlowState(ObjectState):
    """A list of tf.Variables and plain attributes: ``TensorFlowState(variables, epoch=0)``.

    Eagerly (TensorFlow 2) `variables` must be given. In a tf.compat.v1 graph they default to
    the graph's global variables, and `session` (default: the default session) runs the
    broadcasts and assignments, which are built once here."""

    def __init__(self, variables=None, session=None, **kwargs):
        eager = _executing_eagerly()
        self.variables = list(variables) if variables is not None else (
            tf.compat.v1.global_variables())
        if eager and not self.variables:
            raise ValueError("TensorFlowState needs the variables to keep when run eagerly "
                             "(TensorFlowState(model.variables, ...)): eager TensorFlow has no "
                             "global variables")
        self.session = None if eager else (session or tf.compat.v1.get_default_session())
        if not eager and self.session is None:
            raise ValueError("TensorFlowState in a tf.compat.v1 graph needs the session that "
                             "runs it: TensorFlowState(variables, session=sess), or make it "
                             "inside `with sess.as_default():`")
        if eager:
            bcast_object = broadcast_object
        else:
            self._bcast_op = broadcast_variables(self.variables, root_rank=0)
            self._placeholders = [tf.compat.v1.placeholder(v.dtype.base_dtype, v.shape)
                                  for v in self.variables]
            self._assign_op = tf.group(*[v.assign(p) for v, p in
                                         zip(self.variables, self._placeholders)])
            fn = broadcast_object_fn(session=self.session)
            bcast_object = lambda obj, root_rank=0, name=None: fn(obj)  # noqa: E731
        self._save_model()
        super().__init__(bcast_object=bcast_object, **kwargs)

    def _save_model(self):
        if self.session is None:
            self._values = _values(self.variables)
        else:
            self._values = self.session.run(self.variables)

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        if self.session is None:
            for variable, value in zip(self.variables, self._values):
                variable.assign(value)
        else:
            self.session.run(self._assign_op, feed_dict=dict(zip(self._placeholders,
                                                                 self._values)))
        super().restore()

    def sync(self):
        if self.session is None:
            _sync_variables(self.variables, "troika.elastic.tensorflow_state")
        else:
            self.session.run(self._bcast_op)
        self._save_model()
        super().sync()
