"""The small helpers of horovod.tensorflow.util that Horovod's users and tests import."""

import tensorflow as tf


def _executing_eagerly():
    """True when TensorFlow runs eagerly (not while a graph or tf.function is built)."""
    return tf.executing_eagerly()


def _make_subgraph(f):
    """`f` as one tf.function."""
    return tf.function(f)


def vars_to_refs(variables):
    """Variables as hashable references (nested lists kept)."""
    if isinstance(variables, list):
        return tuple(vars_to_refs(v) for v in variables)
    return variables.ref()


def refs_to_vars(refs):
    """The inverse of vars_to_refs."""
    if isinstance(refs, tuple):
        return [refs_to_vars(r) for r in refs]
    return refs.deref()
