"""``horovod.tensorflow.keras.callbacks``: troika.keras.callbacks's callbacks."""

from troika.keras.callbacks import *  # noqa: F401,F403
from troika.keras.callbacks import __all__  # noqa: F401
