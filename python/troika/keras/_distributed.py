"""What troika.keras's ``DistributedOptimizer`` is for either Keras: the entry points with
Horovod's signatures (``DistributedOptimizer``, ``PartialDistributedOptimizer``) and
``distribute_in_place`` (load_model's), the arguments' checks, and the class made for each call.

As Horovod's, a DistributedOptimizer is an instance of a class made for it: a subclass of the
wrapped optimizer's class with the same name, module and qualified name (so ``isinstance``,
``get_config``/``from_config`` and saving behave as the wrapped optimizer's), built from the
wrapped optimizer's config, whose first base is the Keras' own mixin (keras2/optimizer.py,
keras3/optimizer.py: where the gradients are allreduced, and how). Every instance of that class,
those ``from_config`` makes included, is distributed with the call's arguments (Settings,
the class attribute ``_troika_settings``)."""

import warnings

from troika import global_process_set
from troika._ops import Average, Sum


class CallableList(list):
    """``optimizer.variables``: a list that a script may also call (``optimizer.variables()``),
    as Keras 2's optimizers have it."""

    def __call__(self):
        return self


class Settings:
    """The arguments of one DistributedOptimizer call."""

    def __init__(self, **arguments):
        self.__dict__.update(arguments)


class KeySet:
    """A set of variable keys kept out of Keras' and TensorFlow's attribute tracking (which
    would wrap a set attribute of the optimizer)."""

    def __init__(self):
        self._keys = set()

    def add(self, key):
        self._keys.add(key)

    def __contains__(self, key):
        return key in self._keys

    def __bool__(self):
        return bool(self._keys)

    def __len__(self):
        return len(self._keys)


def distributed_class(mixin, optimizer_class, settings):
    """The class of a DistributedOptimizer wrapping an `optimizer_class` (or another
    DistributedOptimizer's: the class it wraps)."""
    base = getattr(optimizer_class, "_troika_wrapped_class", optimizer_class)
    return type(base.__name__, (mixin, base), {
        "__module__": base.__module__, "__qualname__": base.__qualname__,
        "__doc__": base.__doc__, "_troika_settings": settings, "_troika_wrapped_class": base})


def check_arguments(op, gradient_predivide_factor, backward_passes_per_step, groups):
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


def entry_points(module, mixin, check_optimizer, layer_type, no_compression):
    """(DistributedOptimizer, PartialDistributedOptimizer, distribute_in_place) of one Keras:
    `mixin` the first base of every class made, `check_optimizer(optimizer)` raising TypeError
    for an optimizer of another Keras, `layer_type` the Keras' layer class, `no_compression`
    its Compression.none. `module`: the name they are documented under."""

    def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                             compression=no_compression, sparse_as_dense=False,
                             gradient_predivide_factor=1.0, op=Average,
                             backward_passes_per_step=1, average_aggregated_gradients=False,
                             num_groups=0, groups=None, process_set=global_process_set,
                             scale_local_gradients=True):
        """An optimizer that allreduces the gradients (Average by default) before `optimizer`,
        an optimizer of the Keras that tf.keras is, applies them. Returns a new instance of a
        subclass of `optimizer`'s class made from its config (the module's docstring says
        where the gradients are allreduced).

        Arguments as Horovod's horovod.tensorflow.keras.DistributedOptimizer:
          name: accepted for Horovod's signature; the optimizer keeps its own name and config.
          compression: Compression.none or Compression.fp16 for the allreduces.
          sparse_as_dense: allreduce sparse gradients (tf.IndexedSlices) as dense tensors;
            they are allgathered otherwise.
          gradient_predivide_factor: with op=Average, scale by 1/f before the sum and f/size
            after.
          op: Average or Sum.
          backward_passes_per_step, average_aggregated_gradients: sum the gradients of that
            many steps locally and allreduce and apply them once (divided by the steps if
            average_aggregated_gradients); every step counts in `optimizer.iterations`.
          num_groups (deprecated), groups: a number of groups of consecutive gradients, or
            lists of variables, each allreduced as one grouped operation.
          process_set: the ranks the gradients are reduced over.
          scale_local_gradients: divide the gradients of variables registered with
            register_local_var by the process set's size.
        """
        if num_groups != 0:
            warnings.warn("DistributedOptimizer: num_groups is deprecated, pass groups",
                          DeprecationWarning)
            if groups is None:
                groups = num_groups
        check_arguments(op, gradient_predivide_factor, backward_passes_per_step, groups)
        check_optimizer(optimizer)
        settings = Settings(
            name=name, device_dense=device_dense, device_sparse=device_sparse,
            compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, groups=groups,
            process_set=process_set, scale_local_gradients=scale_local_gradients)
        cls = distributed_class(mixin, type(optimizer), settings)
        return cls.from_config(optimizer.get_config())

    def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                    compression=no_compression, sparse_as_dense=False,
                                    gradient_predivide_factor=1.0, op=Average, groups=None,
                                    process_set=global_process_set, local_layers=None,
                                    scale_local_gradients=True):
        """A DistributedOptimizer whose `local_layers`' (Keras layers) gradients are not
        allreduced but stay this rank's (divided by the set's size if
        scale_local_gradients)."""
        if local_layers is None:
            local_layers = []
        elif isinstance(local_layers, layer_type):
            local_layers = [local_layers]
        elif not all(isinstance(layer, layer_type) for layer in local_layers):
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

    def distribute_in_place(optimizer, compression=no_compression):
        """Makes `optimizer` itself (with its state: what load_model loaded) a
        DistributedOptimizer with Horovod's default arguments and `compression`."""
        settings = Settings(
            name=None, device_dense="", device_sparse="", compression=compression,
            sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average,
            backward_passes_per_step=1, average_aggregated_gradients=False, groups=None,
            process_set=global_process_set, scale_local_gradients=True)
        optimizer.__class__ = distributed_class(mixin, type(optimizer), settings)
        optimizer._troika_configure()
        return optimizer

    functions = (DistributedOptimizer, PartialDistributedOptimizer, distribute_in_place)
    for f in functions:
        f.__module__ = module
        f.__qualname__ = f.__name__
    return functions
