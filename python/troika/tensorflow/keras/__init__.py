"""``horovod.tensorflow.keras`` on Troika: ``import troika.tensorflow.keras as hvd``. The same
names as troika.keras, which implements them for the Keras ``tf.keras`` is: Keras 3, or Keras 2
(tf_keras) with ``TF_USE_LEGACY_KERAS=1``."""

from troika.keras import *  # noqa: F401,F403
from troika.keras import __all__  # noqa: F401
from troika.tensorflow.keras import callbacks, elastic  # noqa: F401
