"""The Keras backend troika.keras runs on: its functions for gradients, variables and values
(the same names in every backend's module). Keras 3 with the TensorFlow backend
(troika.keras.keras3._tensorflow, over troika.tensorflow); other backends raise ImportError
here.
"""

import keras

if keras.backend.backend() != "tensorflow":
    raise ImportError(
        "troika.keras supports Keras' TensorFlow backend (KERAS_BACKEND=tensorflow); this "
        "Keras runs on %r" % keras.backend.backend())

from troika.keras.keras3._tensorflow import *  # noqa: F401,F403,E402
