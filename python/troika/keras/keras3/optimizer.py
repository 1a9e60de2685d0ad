"""``DistributedOptimizer`` and ``PartialDistributedOptimizer`` for Keras 3: any
``keras.optimizers.Optimizer`` whose ``apply`` (and so ``apply_gradients``, which ``model.fit``'s
train step and custom loops call) allreduces the gradients across the ranks before the wrapped
optimizer applies them.

As Horovod does, the result is an instance of a class made for it (troika.keras._distributed,
shared with Keras 2): ``isinstance``, ``learning_rate``, ``get_config``/``from_config`` and
saving behave as the wrapped optimizer's, and a saved model loads with plain Keras (as the
wrapped optimizer) or with ``troika.keras.load_model`` (distributed again). On the TensorFlow
backend the gradient allreduces are Troika's ops (troika.tensorflow), so they run eagerly and
inside the ``tf.function`` of the train step, each submitted as soon as the backward pass
produced its gradient; not inside XLA (jit_compile=True raises, naming jit_compile=False). On
the torch backend they are troika.torch's, all submitted when ``apply`` is called
(keras3/_torch.py).
"""

import keras

from troika.keras import _distributed
from troika.keras._distributed import CallableList, KeySet
from troika.keras.keras3 import _backend as backend
from troika.keras.keras3._backend import Compression


class LocalGradientAggregation:
    """Gradients summed on this rank over `backward_passes_per_step` steps; at the last one the
    sum (divided by the steps if `average_aggregated_gradients`) is allreduced and applied, and
    the sums restart from zero. Every step counts in the optimizer's iterations (Horovod's
    semantics). Its variables are not the optimizer's: they are neither saved nor broadcast
    (they are zero after each application, the same on every rank)."""

    def __init__(self, backward_passes_per_step, average_aggregated_gradients):
        self.backward_passes_per_step = backward_passes_per_step
        self.average_aggregated_gradients = average_aggregated_gradients
        self.counter = None  # the steps summed since the last application
        self._sums = {}  # variable key -> the sum of its gradients

    def sums(self, grads, variables):
        """The variables holding the sums of `variables`' gradients (None where a grad is
        None), created at the first step."""
        with backend.init_scope():
            if self.counter is None:
                self.counter = keras.Variable(0, dtype="int64", trainable=False,
                                              name="troika_aggregated_steps")
            for g, v in zip(grads, variables):
                key = backend.variable_key(v)
                if g is not None and key not in self._sums:
                    self._sums[key] = keras.Variable(
                        initializer="zeros", shape=tuple(v.shape), dtype=v.dtype,
                        trainable=False, name="troika_aggregated_gradient")
        return [None if g is None else self._sums[backend.variable_key(v)]
                for g, v in zip(grads, variables)]

    def reset(self):
        for s in self._sums.values():
            s.assign(keras.ops.zeros_like(s))
        self.counter.assign(0)


class _DistributedOptimizer:
    """The methods a DistributedOptimizer's class adds to the wrapped optimizer's class (its
    first base; the class attribute _troika_settings holds the arguments)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._troika_configure()

    def _troika_configure(self):
        s = type(self)._troika_settings
        self.process_set = s.process_set
        self.scale_local_gradients = s.scale_local_gradients
        self._troika_allreduce_grads = backend.make_gradient_allreducer(
            s.device_dense, s.device_sparse, s.compression, s.sparse_as_dense, s.op,
            s.gradient_predivide_factor, s.groups, s.process_set)
        self._troika_local_keys = KeySet()
        self._agg_helper = None
        if s.backward_passes_per_step > 1:
            self._agg_helper = LocalGradientAggregation(s.backward_passes_per_step,
                                                        s.average_aggregated_gradients)

    @property
    def variables(self):
        return CallableList(super().variables)

    def register_local_var(self, var):
        """`var`'s gradient stays this rank's: not allreduced, and divided by the process set's
        size if scale_local_gradients."""
        self._troika_local_keys.add(backend.variable_key(var))

    def apply(self, grads, trainable_variables=None):
        backend.check_not_xla("troika.keras.DistributedOptimizer")
        if trainable_variables is None:
            if not self.built:
                return super().apply(grads)  # Keras' own error
            trainable_variables = self._trainable_variables
        grads, variables = list(grads), list(trainable_variables)
        if self._agg_helper is None:
            return super().apply(self._troika_allreduce(grads, variables), variables)
        return self._troika_aggregate_and_apply(grads, variables, super().apply)

    def _troika_allreduce(self, grads, variables):
        """The gradients allreduced but those of local variables, which are scaled."""
        local = self._troika_local_keys
        keys = [backend.variable_key(v) for v in variables]
        shared = [i for i, k in enumerate(keys) if k not in local]
        reduced = self._troika_allreduce_grads([grads[i] for i in shared],
                                               [variables[i] for i in shared])
        out = list(grads)
        for i, g in zip(shared, reduced):
            out[i] = g
        if self.scale_local_gradients and len(shared) < len(out):
            n = self.process_set.size()
            for i, k in enumerate(keys):
                if k in local and out[i] is not None:
                    out[i] = backend.divide(out[i], n)
        return out

    def _troika_aggregate_and_apply(self, grads, variables, apply):
        agg = self._agg_helper
        if not self.built:  # as Keras' apply builds it, before the cond below
            with keras.name_scope(self.name, caller=self):
                self.build(variables)
        grads = [self._troika_dense(g) for g in grads]
        sums = agg.sums(grads, variables)
        for s, g in zip(sums, grads):
            if s is not None:
                s.assign_add(g)
        agg.counter.assign_add(1)

        def aggregation_step():
            totals = [None if s is None else backend.read(s) for s in sums]
            reduced = self._troika_allreduce(totals, variables)
            if agg.average_aggregated_gradients:
                reduced = [None if g is None else g / agg.backward_passes_per_step
                           for g in reduced]
            apply(reduced, variables)
            agg.reset()

        def local_step():
            self._iterations.assign_add(1)

        keras.ops.cond(keras.ops.equal(backend.read(agg.counter), agg.backward_passes_per_step),
                       aggregation_step, local_step)

    def _troika_dense(self, grad):
        if grad is None or not backend.is_sparse(grad):
            return grad
        if type(self)._troika_settings.sparse_as_dense:
            return backend.to_dense(grad)
        raise ValueError("DistributedOptimizer: a sparse gradient (tf.IndexedSlices) cannot be "
                         "summed over backward_passes_per_step > 1 steps; pass "
                         "sparse_as_dense=True")


def _check_optimizer(optimizer):
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(
            "troika.keras.DistributedOptimizer wraps a keras.optimizers.Optimizer (Keras 3, "
            "tf.keras here); got %s.%s. For Keras 2 (tf_keras) optimizers, set "
            "TF_USE_LEGACY_KERAS=1 before importing TensorFlow: tf.keras and troika.keras are "
            "then Keras 2's" % (type(optimizer).__module__, type(optimizer).__name__))


DistributedOptimizer, PartialDistributedOptimizer, distribute_in_place = (
    _distributed.entry_points(__name__, _DistributedOptimizer, _check_optimizer,
                              keras.layers.Layer, Compression.none))
