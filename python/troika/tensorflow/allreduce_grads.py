"""Allreducing a list of gradients with Horovod's options, shared by
``DistributedGradientTape`` (gradient_tape.py), the ``tf.compat.v1`` ``DistributedOptimizer``
(optimizer.py) and the Keras optimizers (troika.keras). The tape and the v1 optimizer also
share Horovod's checks of their arguments (``check_options``) and their rank-local variables
(``LocalGradients``).

``make_allreduce_grads_fn`` returns one function per set of options, cached as Horovod caches
it: a tape or an optimizer made at every step reuses the same ``tf.function`` instead of
tracing a new one. Run eagerly, the gradients' allreduces are that one ``tf.function`` (traced
once per structure of gradients), so they are submitted together and run concurrently; inside
a ``tf.function`` or a ``tf.compat.v1`` graph they are ops of that graph, each submitted as soon
as its gradient is produced.
"""

import warnings

import tensorflow as tf

from troika._grouping import plan
from troika._ops import Average
from troika.tensorflow.collectives import allreduce, grouped_allreduce, size_op


def var_key(variable):
    """A hashable key of a variable: tf.Variable's ref(); Keras 3's Variable has none (the
    cause of horovod#4290), so its identity (the caller keeps the variable alive)."""
    ref = getattr(variable, "ref", None)
    return ref() if ref is not None else ("id", id(variable))


# (options) -> the function make_allreduce_grads_fn returns, and what its key refers to.
_cache = {}


def make_allreduce_grads_fn(device_dense, device_sparse, compression, sparse_as_dense, op,
                            gradient_predivide_factor, groups, process_set):
    """(grads, vars=None, use_generic_names=False) -> the allreduced grads (None stays None),
    with Horovod's options: `groups` None, an int (that many groups of consecutive gradients)
    or lists of variables (each list one group, every other gradient a group of its own;
    `vars` then names each gradient's variable). On a rank outside `process_set` the gradients
    come back as they are (Horovod's rule)."""
    group_keys = (tuple(tuple(var_key(v) for v in group) for group in groups)
                  if isinstance(groups, list) else None)
    key = (device_dense, device_sparse, compression, sparse_as_dense, op,
           float(gradient_predivide_factor), groups if group_keys is None else group_keys,
           id(process_set))
    cached = _cache.get(key)
    if cached is None:
        fn = _build(device_dense, device_sparse, compression, sparse_as_dense, op,
                    gradient_predivide_factor, groups, group_keys, process_set)
        cached = _cache[key] = (fn, process_set, groups)  # keeps what the key refers to alive
    return cached[0]


def _build(device_dense, device_sparse, compression, sparse_as_dense, op,
           gradient_predivide_factor, groups, group_keys, process_set):
    if op == Average:
        # The average split around the sum: 1/f before, f/size after (the core divides by size).
        prescale, postscale = 1.0 / gradient_predivide_factor, gradient_predivide_factor
    else:
        prescale = postscale = 1.0
    kwargs = dict(device_dense=device_dense, device_sparse=device_sparse,
                  compression=compression, op=op, prescale_factor=prescale,
                  postscale_factor=postscale, process_set=process_set)

    def reduce_present(grads, indices, split, use_generic_names):
        """`grads` (none None; `indices`: their positions in the caller's list, for names)."""
        if split is None:
            return [allreduce(g, name="grad_%d" % i if use_generic_names else None, **kwargs)
                    for g, i in zip(grads, indices)]
        position = {i: n for n, i in enumerate(indices)}
        out = [None] * len(grads)
        for n, members in enumerate(split):
            reduced = grouped_allreduce([grads[position[i]] for i in members],
                                        name="grad_group_%d" % n if use_generic_names else None,
                                        **kwargs)
            for i, r in zip(members, reduced):
                out[position[i]] = r
        return out

    compiled = tf.function(reduce_present)

    def run(grads, vars=None, use_generic_names=False):
        grads = list(grads)
        if sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                     for g in grads]
        if not process_set.included():
            return grads
        indices, split = plan(grads, vars, groups, group_keys, var_key)
        if not indices:
            return grads
        present = [grads[i] for i in indices]
        if tf.executing_eagerly():
            reduced = compiled(present, indices, split, use_generic_names)
        else:
            reduced = reduce_present(present, indices, split, use_generic_names)
        for i, r in zip(indices, reduced):
            grads[i] = r
        return grads

    return run


def set_size(process_set, dtype):
    """The set's size, to divide a gradient by: a number eagerly; in a graph, read when the
    graph runs (an elastic job's size changes between runs)."""
    if tf.executing_eagerly():
        return tf.cast(process_set.size(), dtype)
    return tf.cast(size_op(process_set.process_set_id), dtype)


def divide(grad, divisor):
    """`grad` (a tensor or tf.IndexedSlices) divided by `divisor`."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / tf.cast(divisor, grad.values.dtype), grad.indices,
                                grad.dense_shape)
    return grad / tf.cast(divisor, grad.dtype)


def reduce_gradients(allreduce_grads, grads, variables, local_keys, scale_local_gradients,
                     process_set, use_generic_names=False):
    """`grads` (of `variables`) with every gradient allreduced by `allreduce_grads` but those of
    the variables whose var_key is in `local_keys` (rank-local variables), which are divided
    by the set's size if `scale_local_gradients` (Horovod's convention, horovod#3695)."""
    grads = list(grads)
    shared = [i for i, v in enumerate(variables) if var_key(v) not in local_keys]
    reduced = allreduce_grads([grads[i] for i in shared], [variables[i] for i in shared],
                              use_generic_names)
    for i, g in zip(shared, reduced):
        grads[i] = g
    if scale_local_gradients and local_keys:
        for i, v in enumerate(variables):
            g = grads[i]
            if g is not None and var_key(v) in local_keys:
                values = g.values if isinstance(g, tf.IndexedSlices) else g
                grads[i] = divide(g, set_size(process_set, values.dtype))
    return grads


def check_options(op, gradient_predivide_factor, num_groups, groups, warn_num_groups=False):
    """Horovod's checks of a tape's or a v1 optimizer's arguments: `gradient_predivide_factor`
    only with Average; `groups` None, a positive int or lists of variables, the deprecated
    `num_groups` standing for it where it is None (with a DeprecationWarning if
    `warn_num_groups`, as the v1 optimizer's). Returns `groups` as make_allreduce_grads_fn
    takes it (0 is None)."""
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        if warn_num_groups:
            warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be "
                          "removed", DeprecationWarning, stacklevel=2)
        if groups is None:
            groups = num_groups
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError("groups should be a non-negative integer or a list of list of "
                         "tf.Variable.")
    if groups == 0:
        groups = None
    return groups


class LocalGradients:
    """What DistributedGradientTape and the v1 DistributedOptimizer add to their class to
    allreduce its gradients: Horovod's `process_set` and `scale_local_gradients` attributes,
    and the rank-local variables, whose gradients are not allreduced but divided by the set's
    size if scale_local_gradients (reduce_gradients)."""

    def _init_local_gradients(self, device_dense, device_sparse, compression, sparse_as_dense,
                              op, gradient_predivide_factor, groups, process_set,
                              scale_local_gradients):
        self._allreduce_grads = make_allreduce_grads_fn(
            device_dense, device_sparse, compression, sparse_as_dense, op,
            gradient_predivide_factor, groups, process_set)
        self.process_set = process_set
        self.scale_local_gradients = scale_local_gradients
        self._local_keys = set()
        self._local_variables = []  # keeps the keys' variables alive

    def _register_local(self, variable):
        self._local_keys.add(var_key(variable))
        self._local_variables.append(variable)

    def _is_local(self, variable):
        return var_key(variable) in self._local_keys

    def _reduce(self, grads, variables, use_generic_names=False):
        return reduce_gradients(self._allreduce_grads, grads, variables, self._local_keys,
                                self.scale_local_gradients, self.process_set, use_generic_names)
