"""``DistributedGradientTape`` and ``PartialDistributedGradientTape``: a tf.GradientTape whose
``gradient()`` returns the gradients allreduced across the ranks (Average by default).

The allreduces are allreduce_grads.py's, shared with the optimizers: run eagerly, one
``tf.function`` submits them together, so they run concurrently rather than one eager op after
the other; inside a ``tf.function`` they are ops of that graph, each submitted as soon as the
backward pass produced its gradient.
"""

import tensorflow as tf

from troika import global_process_set
from troika._ops import Average
from troika.tensorflow.allreduce_grads import LocalGradients, check_options
from troika.tensorflow.compression import Compression


class _DistributedGradientTape(tf.GradientTape, LocalGradients):
    """The methods a DistributedGradientTape adds to the tape's own class."""

    def __init__(self, tape, device_dense, device_sparse, compression, sparse_as_dense, op,
                 gradient_predivide_factor, groups, persistent=False,
                 watch_accessed_variables=True, process_set=global_process_set,
                 scale_local_gradients=True):
        super(self.__class__, self).__init__(persistent, watch_accessed_variables)
        self._tape = tape
        self._init_local_gradients(device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, groups, process_set,
                                   scale_local_gradients)

    def register_local_source(self, source):
        """`source`'s gradient is not allreduced (a rank-local variable); it is divided by the
        set's size if scale_local_gradients."""
        self._register_local(source)

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False):
        flat = tf.nest.flatten(sources)
        gradients = tf.nest.flatten(super(self.__class__, self).gradient(
            target, flat, output_gradients))
        gradients = self._reduce(gradients, flat, use_generic_names)
        return tf.nest.pack_sequence_as(sources, gradients)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        """([(local source, gradient)], [(shared source, allreduced gradient)])."""
        gradients = self.gradient(target, sources, output_gradients, use_generic_names)
        local, shared = [], []
        for s, g in zip(sources, gradients):
            (local if self._is_local(s) else shared).append((s, g))
        return local, shared


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=global_process_set, scale_local_gradients=True):
    """Wraps `gradtape` (a tf.GradientTape, before or after recording): its gradient()
    allreduces. Arguments as Horovod's."""
    groups = check_options(op, gradient_predivide_factor, num_groups, groups)
    cls = type(gradtape.__class__.__name__, (gradtape.__class__, LocalGradients),
               dict(_DistributedGradientTape.__dict__))
    return cls(gradtape._tape, device_dense, device_sparse, compression, sparse_as_dense, op,
               gradient_predivide_factor, groups, gradtape._persistent,
               gradtape._watch_accessed_variables, process_set=process_set,
               scale_local_gradients=scale_local_gradients)


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """DistributedGradientTape whose `local_layers`' (Keras layers) gradients stay local."""
    if local_layers is None:
        local_layers = []
    elif not isinstance(local_layers, (list, tuple)):
        local_layers = [local_layers]
    for layer in local_layers:
        if not hasattr(layer, "trainable_weights"):
            raise ValueError("All local layers must be Keras layers (with trainable_weights).")
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape
