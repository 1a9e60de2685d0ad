"""``DistributedOptimizer`` and ``PartialDistributedOptimizer`` for Keras 3: any
``keras.optimizers.Optimizer`` whose ``apply`` (and so ``apply_gradients``, which ``model.fit``'s
train step and custom loops call) allreduces the gradients across the ranks before the wrapped
optimizer applies them.

As Horovod does, the result is an instance of a class made for it: a subclass of the wrapped
optimizer's class, with the same name, module and config, built from the wrapped optimizer's
config. So ``isinstance``, ``learning_rate``, ``get_config``/``from_config`` and saving behave as
the wrapped optimizer's, and a saved model loads with plain Keras (as the wrapped optimizer) or
with ``troika.keras.load_model`` (distributed again). On the TensorFlow backend the gradient
allreduces are Troika's ops (troika.tensorflow), so they run eagerly and inside the
``tf.function`` of the train step, each submitted as soon as the backward pass produced its
gradient; not inside XLA (jit_compile=True raises, naming jit_compile=False). On the torch
backend they are troika.torch's, all submitted when ``apply`` is called (keras3/_torch.py).
"""

import warnings

import keras

from troika import global_process_set
from troika._ops import Average, Sum
from troika.keras.keras3 import _backend as backend
from troika.keras.keras3._backend import Compression


class CallableList(list):
    """``optimizer.variables``: a list, as Keras 3 has it, that a Keras 2 script may also call
    (``optimizer.variables()``)."""

    def __call__(self):
        return self


class _Settings:
    """The arguments of one DistributedOptimizer call: every instance of its class (those
    from_config makes included) is distributed with them."""

    def __init__(self, **arguments):
        self.__dict__.update(arguments)


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
        self._troika_local_keys = _KeySet()
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


class _KeySet:
    """A set of variable keys kept out of Keras' and TensorFlow's attribute tracking."""

    def __init__(self):
        self._keys = set()

    def add(self, key):
        self._keys.add(key)

    def __contains__(self, key):
        return key in self._keys

    def __len__(self):
        return len(self._keys)


def _distributed_class(optimizer_class, settings):
    """The class of a DistributedOptimizer wrapping an `optimizer_class`: a subclass with the
    same name, module and qualified name, so that Keras serializes it as the wrapped one."""
    base = getattr(optimizer_class, "_troika_wrapped_class", optimizer_class)
    return type(base.__name__, (_DistributedOptimizer, base), {
        "__module__": base.__module__, "__qualname__": base.__qualname__,
        "__doc__": base.__doc__, "_troika_settings": settings, "_troika_wrapped_class": base})


def _check_arguments(op, gradient_predivide_factor, backward_passes_per_step, groups):
    if op != Average and op != Sum:
        raise ValueError("DistributedOptimizer reduces gradients with op=Average or op=Sum")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor applies to op=Average only")
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be 1 or more, got %r"
                         % (backward_passes_per_step,))
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError("groups: a positive number of groups, or a list of lists of "
                         "variables; got %r" % (groups,))


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """An optimizer that allreduces the gradients (Average by default) before `optimizer`, any
    keras.optimizers.Optimizer, applies them. Returns a new instance of a subclass of
    `optimizer`'s class made from its config (module docstring).

    Arguments as Horovod's horovod.tensorflow.keras.DistributedOptimizer:
      name: accepted for Horovod's signature; the optimizer keeps its own name and config.
      compression: Compression.none or Compression.fp16 for the allreduces.
      sparse_as_dense: allreduce sparse gradients (tf.IndexedSlices) as dense tensors; they are
        allgathered otherwise.
      gradient_predivide_factor: with op=Average, scale by 1/f before the sum and f/size after.
      op: Average or Sum.
      backward_passes_per_step, average_aggregated_gradients: sum the gradients of that many
        steps locally and allreduce and apply them once (divided by the steps if
        average_aggregated_gradients); every step counts in `optimizer.iterations`.
      num_groups (deprecated), groups: a number of groups of consecutive gradients, or lists
        of variables, each allreduced as one grouped operation.
      process_set: the ranks the gradients are reduced over.
      scale_local_gradients: divide the gradients of variables registered with
        register_local_var by the process set's size.
    """
    if num_groups != 0:
        warnings.warn("DistributedOptimizer: num_groups is deprecated, pass groups",
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    _check_arguments(op, gradient_predivide_factor, backward_passes_per_step, groups)
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(
            "troika.keras.DistributedOptimizer wraps a keras.optimizers.Optimizer (Keras 3, "
            "tf.keras here); got %s.%s. For Keras 2 (tf_keras) optimizers, set "
            "TF_USE_LEGACY_KERAS=1 before importing TensorFlow: tf.keras and troika.keras are "
            "then Keras 2's" % (type(optimizer).__module__, type(optimizer).__name__))
    settings = _Settings(
        name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, groups=groups,
        process_set=process_set, scale_local_gradients=scale_local_gradients)
    cls = _distributed_class(type(optimizer), settings)
    return cls.from_config(optimizer.get_config())


def distribute_in_place(optimizer, compression=Compression.none):
    """Makes `optimizer` itself (built, with its state: what load_model loaded) a
    DistributedOptimizer with Horovod's default arguments and `compression`."""
    settings = _Settings(
        name=None, device_dense="", device_sparse="", compression=compression,
        sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average,
        backward_passes_per_step=1, average_aggregated_gradients=False, groups=None,
        process_set=global_process_set, scale_local_gradients=True)
    optimizer.__class__ = _distributed_class(type(optimizer), settings)
    optimizer._troika_configure()
    return optimizer


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average, groups=None,
                                process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """A DistributedOptimizer whose `local_layers`' (Keras layers) gradients are not allreduced
    but stay this rank's (divided by the set's size if scale_local_gradients)."""
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, keras.layers.Layer):
        local_layers = [local_layers]
    elif not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise ValueError("PartialDistributedOptimizer: local_layers must be Keras layers")
    opt = DistributedOptimizer(optimizer, name=name, device_dense=device_dense,
                               device_sparse=device_sparse, compression=compression,
                               sparse_as_dense=sparse_as_dense,
                               gradient_predivide_factor=gradient_predivide_factor, op=op,
                               groups=groups, process_set=process_set,
                               scale_local_gradients=scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            opt.register_local_var(var)
    return opt
