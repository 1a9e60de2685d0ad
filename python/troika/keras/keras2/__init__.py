"""troika.keras for Keras 2 (the ``tf_keras`` package, which ``tf.keras`` is when
``TF_USE_LEGACY_KERAS=1`` is set): the implementation troika.keras gathers its names from then
(troika.keras._selection), with Horovod's Keras 2 behaviour. Its modules: optimizer,
callbacks, functions, elastic. Eagerly (TensorFlow 2) and in tf.compat.v1 graphs, where
Horovod's Keras 2 code ran its collectives in Keras' session."""

try:
    import tf_keras  # noqa: F401
except ImportError as _e:  # pragma: no cover - depends on the environment
    raise ImportError("TF_USE_LEGACY_KERAS is set, so troika.keras serves Keras 2, which needs "
                      "the tf_keras package (pip install tf_keras): %s" % _e) from _e
