"""``horovod.tensorflow.keras`` on Troika: ``import troika.tensorflow.keras as hvd``. The same
names as troika.keras, which implements them (Keras 3 on the TensorFlow backend)."""

from troika.keras import *  # noqa: F401,F403
from troika.keras import __all__  # noqa: F401
from troika.tensorflow.keras import callbacks  # noqa: F401
