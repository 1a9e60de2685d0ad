"""troika.keras for Keras 3 (the ``keras`` package, ``tf.keras`` since TensorFlow 2.16): the
implementation troika.keras gathers its names from unless ``TF_USE_LEGACY_KERAS`` routes
``tf.keras`` to Keras 2 (troika.keras._selection). Its modules: _backend (which Keras
backend's functions: TensorFlow's in _tensorflow, torch's in _torch), optimizer, callbacks,
functions, elastic."""
