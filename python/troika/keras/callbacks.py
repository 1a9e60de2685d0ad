"""``horovod.keras.callbacks`` and ``horovod.tensorflow.keras.callbacks``: Horovod's callbacks
for the Keras troika.keras serves (troika.keras._selection): Keras 3's
(troika.keras.keras3.callbacks) or, with ``TF_USE_LEGACY_KERAS=1``, Keras 2's
(troika.keras.keras2.callbacks). The same names either way."""

from troika.keras._selection import KERAS2

if KERAS2:
    from troika.keras.keras2.callbacks import *  # noqa: F401,F403
    from troika.keras.keras2.callbacks import __all__  # noqa: F401
else:
    from troika.keras.keras3.callbacks import *  # noqa: F401,F403
    from troika.keras.keras3.callbacks import __all__  # noqa: F401
