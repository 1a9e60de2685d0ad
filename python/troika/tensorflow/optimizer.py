"""``DistributedOptimizer`` for ``tf.compat.v1.train.Optimizer``s (horovod.tensorflow's): its
``compute_gradients`` returns the gradients allreduced across the ranks (Average by default),
and ``apply_gradients`` applies them with the wrapped optimizer.

It runs wherever TensorFlow 2 runs a v1 optimizer: in ``tf.compat.v1`` graphs and sessions, and
eagerly (``minimize(loss_fn)``, ``compute_gradients(loss_fn)`` with a callable loss, as
TensorFlow requires there). With ``backward_passes_per_step`` > 1 the gradients are summed
locally and allreduced once every that many steps (graph mode and eagerly alike; Horovod only
in graph mode), and the wrapped optimizer applies them on those steps only.

Keras optimizers have their own ``DistributedOptimizer`` in troika.tensorflow.keras (and
troika.keras); given one, this says so.
"""

import tensorflow as tf

from troika import global_process_set
from troika._ops import Average, check_op
from troika.tensorflow.allreduce_grads import LocalGradients, check_options
from troika.tensorflow.compression import Compression

_LegacyOptimizer = tf.compat.v1.train.Optimizer


class _LocalAggregation:
    """Sums the gradients of `steps` backward passes in variables of this rank and allreduces
    the sums on the last (Horovod's LocalGradientAggregationHelper, in graphs and eagerly).

    Its variables (a counter and one sum per gradient) are made at the first
    compute_gradients, as local variables (tf.compat.v1.local_variables_initializer() sets
    them in a session, as with Horovod)."""

    def __init__(self, steps, average, sparse_as_dense, reduce, name):
        if steps <= 0:
            raise ValueError("backward_passes_per_step must be > 0")
        self._steps = steps
        self._average = average
        self._sparse_as_dense = sparse_as_dense
        self._reduce = reduce  # (grads, vars) -> the grads allreduced
        self._name = name
        self._counter = None
        self._sums = None
        self._present = None  # the positions of the gradients that are not None

    def _dense(self, grad):
        if isinstance(grad, tf.IndexedSlices):
            if not self._sparse_as_dense:
                raise ValueError("IndexedSlices are not supported when "
                                 "`backward_passes_per_step` > 1 and `sparse_as_dense` is False.")
            return tf.convert_to_tensor(grad)
        return grad

    @staticmethod
    def _variable(initial, name):
        return tf.compat.v1.Variable(initial, trainable=False, name=name,
                                     collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])

    def _make_variables(self, grads):
        with tf.init_scope(), tf.compat.v1.variable_scope(None, default_name=self._name +
                                                         "_aggregation"):
            self._counter = self._variable(tf.zeros([], tf.int32), "counter")
            self._sums = [self._variable(tf.zeros(g.shape, g.dtype), "sum_%d" % i)
                          for i, g in enumerate(grads)]

    def compute_gradients(self, grads, variables):
        """Adds `grads` to the sums; on every `steps`-th call returns the sums allreduced (and
        divided by `steps` if averaged) and starts them anew, else `grads` as they are."""
        grads = [None if g is None else self._dense(g) for g in grads]
        present = [i for i, g in enumerate(grads) if g is not None]
        if self._sums is None:
            self._present = present
            self._make_variables([grads[i] for i in present])
        elif present != self._present:
            raise ValueError("the variables with a gradient changed between steps (%s, then %s)"
                             " with backward_passes_per_step > 1" % (self._present, present))
        clear = tf.cond(tf.equal(self._counter, 0),
                        lambda: tf.group(*[s.assign(tf.zeros_like(s)) for s in self._sums]),
                        tf.no_op)
        with tf.control_dependencies([clear]):
            added = [s.assign_add(grads[i]) for s, i in zip(self._sums, present)]
        with tf.control_dependencies(added):
            count = self._counter.assign_add(1)
        with tf.control_dependencies([count]):
            out = tf.cond(tf.equal(count, self._steps),
                          lambda: self._communicate([variables[i] for i in present]),
                          lambda: [tf.identity(grads[i]) for i in present])
        if not isinstance(out, (list, tuple)):
            out = [out]
        result = [None] * len(grads)
        for i, g in zip(present, out):
            result[i] = g
        return result

    def _communicate(self, variables):
        # Named after their variables: the allreduces are negotiated under their inputs' names
        # in a graph, which must differ between optimizers.
        sums = [tf.identity(s.read_value(), name=s.name.split(":")[0].replace("/", "_"))
                for s in self._sums]
        reduced = self._reduce(sums, variables)
        with tf.control_dependencies([g for g in reduced if g is not None]):
            reset = self._counter.assign(0)
        with tf.control_dependencies([reset]):
            divisor = self._steps if self._average else 1
            return [g / tf.cast(divisor, g.dtype) for g in reduced]

    def apply_gradients(self, apply, grads_and_vars, global_step=None):
        """Runs `apply` (the wrapped optimizer's apply_gradients) on the steps that allreduced;
        on the others only counts `global_step`, as `apply` would have."""
        grads = [g for g, _ in grads_and_vars if g is not None]
        with tf.control_dependencies(grads):
            applied = tf.cond(tf.equal(self._counter, 0), apply, tf.no_op)

        def count_step():
            if global_step is None:
                return tf.no_op()
            return global_step.assign_add(tf.constant(1, global_step.dtype.base_dtype),
                                          read_value=False)

        with tf.control_dependencies([applied] if applied is not None else []):
            return tf.cond(tf.equal(self._counter, 0), tf.no_op, count_step)


class _DistributedOptimizer(_LegacyOptimizer, LocalGradients):
    """A tf.compat.v1.train.Optimizer that wraps another and allreduces the gradients between
    computing and applying them."""

    def __init__(self, optimizer, name=None, use_locking=False, device_dense="",
                 device_sparse="", compression=Compression.none, sparse_as_dense=False,
                 op=Average, gradient_predivide_factor=1.0, backward_passes_per_step=1,
                 average_aggregated_gradients=False, groups=None,
                 process_set=global_process_set, scale_local_gradients=True):
        if name is None:
            name = "Distributed{}".format(type(optimizer).__name__)
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._init_local_gradients(device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, groups, process_set,
                                   scale_local_gradients)
        self._agg_helper = None
        if backward_passes_per_step > 1:
            self._agg_helper = _LocalAggregation(backward_passes_per_step,
                                                 average_aggregated_gradients, sparse_as_dense,
                                                 self._reduce, name)

    def register_local_var(self, var):
        """`var`'s gradient is not allreduced (a rank-local variable); it is divided by the
        set's size if scale_local_gradients."""
        self._register_local(var)

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's compute_gradients (same arguments), each gradient allreduced
        (with backward_passes_per_step > 1: on every that many calls; between them, this
        step's own gradients, which apply_gradients does not apply)."""
        gradients = self._optimizer.compute_gradients(*args, **kwargs)
        if not gradients:
            return gradients
        grads, variables = zip(*gradients)
        if self._agg_helper is not None:
            reduced = self._agg_helper.compute_gradients(grads, variables)
        else:
            reduced = self._reduce(grads, variables)
        return list(zip(reduced, variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """The wrapped optimizer's apply_gradients (with backward_passes_per_step > 1: on the
        steps that allreduced; `global_step` counts every step)."""
        grads_and_vars = list(grads_and_vars)
        if self._agg_helper is not None:
            return self._agg_helper.apply_gradients(
                lambda: self._optimizer.apply_gradients(grads_and_vars,
                                                        global_step=global_step, name=name),
                grads_and_vars, global_step)
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                               name=name)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Wraps `optimizer`, a tf.compat.v1.train.Optimizer: gradients are allreduced (`op`,
    Average by default) between compute_gradients and apply_gradients. Arguments as
    Horovod's: `groups` (or the deprecated `num_groups`) an int or lists of variables;
    `gradient_predivide_factor` splits the average around the sum; `backward_passes_per_step`
    sums that many steps' gradients locally before one allreduce (`average_aggregated_gradients`:
    divides the sum by it); `process_set` reduces over its ranks only."""
    if not isinstance(optimizer, _LegacyOptimizer):
        raise TypeError(
            "troika.tensorflow.DistributedOptimizer wraps a tf.compat.v1.train.Optimizer, not "
            "%s. For a Keras optimizer (keras.optimizers.* or tf.keras.optimizers.*) use "
            "troika.tensorflow.keras.DistributedOptimizer (import troika.tensorflow.keras as "
            "hvd; or troika.keras.DistributedOptimizer), as horovod.tensorflow.keras's; or "
            "allreduce the gradients of a custom loop with hvd.DistributedGradientTape"
            % type(optimizer).__name__)
    check_op(op)  # Adasum is refused here, naming the alternatives
    groups = check_options(op, gradient_predivide_factor, num_groups, groups,
                           warn_num_groups=True)
    return _DistributedOptimizer(optimizer, name, use_locking, device_dense, device_sparse,
                                 compression, sparse_as_dense, op, gradient_predivide_factor,
                                 backward_passes_per_step, average_aggregated_gradients, groups,
                                 process_set, scale_local_gradients)
