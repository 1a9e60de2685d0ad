"""``DistributedGradientTape`` and ``PartialDistributedGradientTape``: a tf.GradientTape whose
``gradient()`` returns the gradients allreduced across the ranks (Average by default).

Run eagerly, the gradients' allreduces are built into one ``tf.function`` (traced once per
structure of gradients), so that they are submitted together and run concurrently rather than
one eager op after the other; inside a ``tf.function`` they are ops of that graph, each
submitted as soon as the backward pass produced its gradient.
"""

import tensorflow as tf

from troika import global_process_set
from troika._ops import Average
from troika.tensorflow.collectives import allreduce, grouped_allreduce
from troika.tensorflow.compression import Compression


def _key(variable):
    """A hashable key of a variable: tf.Variable's ref(); Keras 3's Variable has none (the
    cause of horovod#4290), so its identity (the caller keeps the variable alive)."""
    ref = getattr(variable, "ref", None)
    return ref() if ref is not None else ("id", id(variable))


def _split(items, n):
    """`items` in `n` consecutive groups of near-equal size (the first ones one longer)."""
    q, r = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + q + (1 if i < r else 0)
        if end > start:
            out.append(items[start:end])
        start = end
    return out


def make_allreduce_grads_fn(device_dense, device_sparse, compression, sparse_as_dense, op,
                            gradient_predivide_factor, groups, process_set):
    """(grads, vars, use_generic_names) -> the allreduced grads (None stays None), with
    Horovod's options: `groups` an int (that many groups of consecutive gradients) or lists of
    variables (each list one group, every other gradient a group of its own)."""
    if op == Average:
        # The average split around the sum: 1/f before, f/size after (the core divides by size).
        prescale, postscale = 1.0 / gradient_predivide_factor, gradient_predivide_factor
    else:
        prescale = postscale = 1.0
    kwargs = dict(device_dense=device_dense, device_sparse=device_sparse,
                  compression=compression, op=op, prescale_factor=prescale,
                  postscale_factor=postscale, process_set=process_set)
    group_refs = ([[_key(v) for v in group] for group in groups]
                  if isinstance(groups, list) else None)

    def allreduce_grads(grads, vars=None, use_generic_names=False):
        grads = list(grads)
        if sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                     for g in grads]
        present = [i for i, g in enumerate(grads) if g is not None]
        out = list(grads)
        if groups is None:
            for i in present:
                out[i] = allreduce(grads[i], name="grad_%d" % i if use_generic_names else None,
                                   **kwargs)
            return out
        if group_refs is not None:
            where = {_key(vars[i]): i for i in present}
            split = []
            for refs in group_refs:
                members = [where.pop(r) for r in refs if r in where]
                if members:
                    split.append(members)
            split += [[i] for i in present if _key(vars[i]) in where]
        else:
            split = _split(present, groups)
        for n, members in enumerate(split):
            reduced = grouped_allreduce([grads[i] for i in members],
                                        name="grad_group_%d" % n if use_generic_names else None,
                                        **kwargs)
            for i, r in zip(members, reduced):
                out[i] = r
        return out

    compiled = tf.function(allreduce_grads)

    def run(grads, vars=None, use_generic_names=False):
        if tf.executing_eagerly():
            return compiled(list(grads), vars, use_generic_names)
        return allreduce_grads(grads, vars, use_generic_names)

    return run


class _DistributedGradientTape(tf.GradientTape):
    """The methods a DistributedGradientTape adds to the tape's own class."""

    def __init__(self, tape, device_dense, device_sparse, compression, sparse_as_dense, op,
                 gradient_predivide_factor, groups, persistent=False,
                 watch_accessed_variables=True, process_set=global_process_set,
                 scale_local_gradients=True):
        super(self.__class__, self).__init__(persistent, watch_accessed_variables)
        self._tape = tape
        self._allreduce_grads = make_allreduce_grads_fn(
            device_dense, device_sparse, compression, sparse_as_dense, op,
            gradient_predivide_factor, groups, process_set)
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._local_sources = set()
        self._local_variables = []  # keeps the keys' variables alive

    def register_local_source(self, source):
        """`source`'s gradient is not allreduced (a rank-local variable); it is divided by the
        set's size if scale_local_gradients."""
        self._local_sources.add(_key(source))
        self._local_variables.append(source)

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False):
        flat = tf.nest.flatten(sources)
        gradients = tf.nest.flatten(super(self.__class__, self).gradient(
            target, flat, output_gradients))
        shared = [i for i, s in enumerate(flat) if _key(s) not in self._local_sources]
        reduced = self._allreduce_grads([gradients[i] for i in shared],
                                        [flat[i] for i in shared], use_generic_names)
        for i, g in zip(shared, reduced):
            gradients[i] = g
        if self.scale_local_gradients and self._local_sources:
            n = self.process_set.size()
            for i, s in enumerate(flat):
                g = gradients[i]
                if _key(s) in self._local_sources and g is not None:
                    if isinstance(g, tf.IndexedSlices):
                        gradients[i] = tf.IndexedSlices(g.values / n, g.indices, g.dense_shape)
                    else:
                        gradients[i] = g / n
        return tf.nest.pack_sequence_as(sources, gradients)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        """([(local source, gradient)], [(shared source, allreduced gradient)])."""
        gradients = self.gradient(target, sources, output_gradients, use_generic_names)
        local, shared = [], []
        for s, g in zip(sources, gradients):
            (local if _key(s) in self._local_sources else shared).append((s, g))
        return local, shared


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=global_process_set, scale_local_gradients=True):
    """Wraps `gradtape` (a tf.GradientTape, before or after recording): its gradient()
    allreduces. Arguments as Horovod's."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0 and groups is None:
        groups = num_groups
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError("groups should be a non-negative integer or a list of list of "
                         "tf.Variable.")
    if groups == 0:
        groups = None
    cls = type(gradtape.__class__.__name__, (gradtape.__class__,),
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
