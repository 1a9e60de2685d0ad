"""``DistributedOptimizer`` and ``PartialDistributedOptimizer`` for Keras 2 (tf_keras, which
``tf.keras`` is with ``TF_USE_LEGACY_KERAS=1``), with Horovod's Keras 2 behaviour: the gradients
are allreduced where Keras 2 computes them (``compute_gradients``, ``_compute_gradients``,
which ``minimize`` and so ``model.fit``'s train step call, and ``get_gradients``, which a
``tf.compat.v1`` graph's ``model.fit`` calls), then the wrapped optimizer applies them.
``apply_gradients`` given gradients from elsewhere (a custom loop's tape) applies them as they
are, as Horovod's does: such loops allreduce with ``hvd.DistributedGradientTape``.

Both of Keras 2's optimizer class trees are wrapped: ``tf.keras.optimizers.*`` (tf_keras'
``optimizer.Optimizer``) and ``tf.keras.optimizers.legacy.*`` (``OptimizerV2``), and their loss
scale optimizers. As Horovod's, the result is an instance of a class made for it
(troika.keras._distributed, shared with Keras 3): ``isinstance``, ``optimizer.lr``,
``get_config``/``from_config`` and saving behave as the wrapped optimizer's.

With ``backward_passes_per_step`` N, gradients are summed in variables of the optimizer's own
(``_agg_helper``: its ``counter`` counts the steps summed) and allreduced every N-th
``compute_gradients``; ``apply_gradients`` applies on those steps only and counts the others in
``iterations``, as Horovod's.
"""

import contextlib

import tensorflow as tf
import tf_keras

from troika.keras import _distributed
from troika.keras._distributed import CallableList, KeySet
from troika.tensorflow.allreduce_grads import (make_allreduce_grads_fn, reduce_gradients,
                                               var_key)
from troika.tensorflow.compression import Compression
from troika.tensorflow.library import check_not_xla

# The optimizer bases of Keras 2 (tf_keras): the current and the legacy (OptimizerV2) tree.
_OPTIMIZER_BASES = (tf_keras.optimizers.Optimizer, tf_keras.optimizers.legacy.Optimizer)


class LocalGradientAggregation:
    """Gradients summed on this rank over `backward_passes_per_step` calls of
    compute_gradients: each call adds its gradients to the sums and returns them; the N-th
    returns them allreduced (divided by N if `average_aggregated_gradients`) and zeroes the
    sums and `counter`. Sparse gradients are summed dense if `sparse_as_dense`, refused
    otherwise. The sums and the counter are not the optimizer's variables: neither saved nor
    broadcast."""

    def __init__(self, backward_passes_per_step, average_aggregated_gradients,
                 sparse_as_dense):
        self.backward_passes_per_step = backward_passes_per_step
        self.average_aggregated_gradients = average_aggregated_gradients
        self.sparse_as_dense = sparse_as_dense
        with tf.init_scope():
            self.counter = tf.Variable(0, dtype=tf.int32, trainable=False,
                                       name="troika_aggregated_steps")
        self._sums = {}  # var_key -> the variable holding that variable's gradient sum

    def _dense(self, grad):
        if grad is None or not isinstance(grad, tf.IndexedSlices):
            return grad
        if self.sparse_as_dense:
            return tf.convert_to_tensor(grad)
        raise ValueError("DistributedOptimizer: a sparse gradient (tf.IndexedSlices) cannot be "
                         "summed over backward_passes_per_step > 1 steps; pass "
                         "sparse_as_dense=True")

    def _sum_of(self, grad, variable):
        key = var_key(variable)
        if key not in self._sums:
            with tf.init_scope():  # made once, outside any tf.function being traced
                self._sums[key] = tf.Variable(tf.zeros(variable.shape, grad.dtype),
                                              trainable=False,
                                              name="troika_aggregated_gradient")
        return self._sums[key]

    def compute_gradients(self, grads, variables, allreduce):
        """`grads` added to the sums; the sums, allreduced by `allreduce(grads, variables)` at
        every N-th call."""
        grads = [self._dense(g) for g in grads]
        present = [i for i, g in enumerate(grads) if g is not None]
        sums = [self._sum_of(grads[i], variables[i]) for i in present]
        totals = []
        for s, i in zip(sums, present):
            s.assign_add(grads[i])
            totals.append(s.read_value())
        self.counter.assign_add(1)

        def reduce_and_clear():
            full = [None] * len(grads)
            for i, t in zip(present, totals):
                full[i] = t
            reduced = allreduce(full, variables)
            if self.average_aggregated_gradients:
                reduced = [None if g is None else g / self.backward_passes_per_step
                           for g in reduced]
            with tf.control_dependencies([g for g in reduced if g is not None]):
                self.counter.assign(0)
                for s in sums:
                    s.assign(tf.zeros_like(s))
            # A flag besides the gradients: the branches have an output when there are none.
            return [tf.identity(reduced[i]) for i in present] + [tf.constant(True)]

        out = tf.cond(tf.equal(self.counter, self.backward_passes_per_step),
                      reduce_and_clear, lambda: list(totals) + [tf.constant(False)])[:-1]
        result = [None] * len(grads)
        for i, g in zip(present, out):
            result[i] = g
        return result

    def apply_gradients(self, apply, optimizer):
        """Runs `apply()` on the steps that allreduced (the counter back at 0); on the others
        counts the step in the optimizer's iterations."""

        def applied():
            apply()
            return tf.constant(True)

        def skipped():
            optimizer.iterations.assign_add(1)
            return tf.constant(False)

        return tf.cond(tf.equal(self.counter, 0), applied, skipped)


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
        self._troika_allreduce_grads = make_allreduce_grads_fn(
            s.device_dense, s.device_sparse, s.compression, s.sparse_as_dense, s.op,
            s.gradient_predivide_factor, s.groups, s.process_set)
        self._troika_local = KeySet()
        self._agg_helper = None
        if s.backward_passes_per_step > 1:
            self._agg_helper = LocalGradientAggregation(
                s.backward_passes_per_step, s.average_aggregated_gradients, s.sparse_as_dense)

    @property
    def variables(self):
        inner = super().variables
        return CallableList(inner() if callable(inner) else inner)

    def register_local_var(self, var):
        """`var`'s gradient stays this rank's: not allreduced, and divided by the process set's
        size if scale_local_gradients."""
        self._troika_local.add(var_key(var))

    def compute_gradients(self, loss, var_list, tape=None):
        return self._compute_gradients(loss, var_list, None, tape)

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        """The wrapped optimizer's (loss, var_list) -> [(gradient, variable)], the gradients
        allreduced."""
        tape = tf.GradientTape() if tape is None else tape
        base = super()
        if hasattr(base, "_compute_gradients"):  # OptimizerV2
            grads_and_vars = base._compute_gradients(loss, var_list, grad_loss, tape=tape)
        else:
            grads_and_vars = base.compute_gradients(loss, var_list, tape=tape)
        grads, variables = zip(*grads_and_vars) if grads_and_vars else ((), ())
        return list(zip(self._allreduce(grads, variables), variables))

    def get_gradients(self, loss, params):
        """OptimizerV2's gradients of a graph's loss (tf.compat.v1 Keras), allreduced."""
        return self._allreduce(super().get_gradients(loss, params), params)

    def _allreduce(self, grads, variables):
        check_not_xla("troika.keras.DistributedOptimizer")
        grads, variables = list(grads), list(variables)
        if self._agg_helper is not None:
            return self._agg_helper.compute_gradients(grads, variables, self._troika_reduce)
        return self._troika_reduce(grads, variables)

    def _troika_reduce(self, grads, variables):
        """Every gradient allreduced but those of local variables, which are scaled."""
        return reduce_gradients(self._troika_allreduce_grads, grads, variables,
                                self._troika_local, self.scale_local_gradients,
                                self.process_set)

    def apply_gradients(self, *args, **kwargs):
        if self._agg_helper is None:
            return super().apply_gradients(*args, **kwargs)
        args = list(args)
        if args:  # a zip is read by one branch only; both need it
            args[0] = list(args[0])
        elif "grads_and_vars" in kwargs:
            kwargs["grads_and_vars"] = list(kwargs["grads_and_vars"])
        base = super()
        return self._agg_helper.apply_gradients(
            lambda: base.apply_gradients(*args, **kwargs), self)


def _check_optimizer(optimizer):
    if isinstance(optimizer, _OPTIMIZER_BASES):
        return
    raise TypeError(
        "troika.keras.DistributedOptimizer wraps a Keras 2 optimizer here (tf.keras is tf_keras: "
        "TF_USE_LEGACY_KERAS is set), tf.keras.optimizers.* or tf.keras.optimizers.legacy.*; "
        "got %s.%s. Keras 3 optimizers (the keras package) are wrapped when "
        "TF_USE_LEGACY_KERAS is not set" % (type(optimizer).__module__,
                                           type(optimizer).__name__))


DistributedOptimizer, PartialDistributedOptimizer, distribute_in_place = (
    _distributed.entry_points(__name__, _DistributedOptimizer, _check_optimizer,
                              tf_keras.layers.Layer, Compression.none))


def build_optimizer(optimizer, variables):
    """Creates `optimizer`'s variables for `variables` now, as its first apply_gradients
    would: so that a broadcast or an elastic state covers them before the first step."""
    variables = list(variables)
    if isinstance(optimizer, tf_keras.optimizers.legacy.Optimizer):
        optimizer._create_all_weights(variables)  # a loss scale optimizer's: its inner one's
    elif isinstance(optimizer, tf_keras.optimizers.Optimizer):
        name = getattr(optimizer, "name", None)  # a loss scale optimizer has none
        with tf.name_scope(name) if name else contextlib.nullcontext():
            optimizer.build(variables)
