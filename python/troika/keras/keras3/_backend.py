"""The Keras backend troika.keras runs on: its functions for gradients, variables and values
(the same names in every backend's module), picked by ``keras.backend.backend()``: Keras 3 with
the TensorFlow backend (troika.keras.keras3._tensorflow, over troika.tensorflow) or the torch
backend (troika.keras.keras3._torch, over troika.torch); other backends raise ImportError here.
"""

import keras

_BACKEND = keras.backend.backend()
if _BACKEND == "tensorflow":
    from troika.keras.keras3._tensorflow import *  # noqa: F401,F403
elif _BACKEND == "torch":
    from troika.keras.keras3._torch import *  # noqa: F401,F403
else:
    raise ImportError(
        "troika.keras supports Keras' TensorFlow and torch backends (KERAS_BACKEND=tensorflow "
        "or torch); this Keras runs on %r" % _BACKEND)
