"""Which Keras troika.keras serves: ``tf.keras``'s. That is Keras 3 (the ``keras`` package),
unless TensorFlow routes ``tf.keras`` to Keras 2 (the ``tf_keras`` package) because
``TF_USE_LEGACY_KERAS`` is set, with TensorFlow's own rule ("1", "true" or "True"). Read once,
when troika.keras is first imported; set it before importing TensorFlow, as TensorFlow needs.
"""

import os

# True: Keras 2 (troika.keras.keras2, over tf_keras); False: Keras 3 (troika.keras.keras3).
KERAS2 = os.environ.get("TF_USE_LEGACY_KERAS") in ("1", "true", "True")
