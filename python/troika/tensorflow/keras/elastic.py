"""``horovod.tensorflow.keras.elastic``: troika.keras.elastic's names (``run``, ``KerasState``,
``CommitStateCallback``, ``UpdateBatchStateCallback``, ``UpdateEpochStateCallback``)."""

from troika.keras.elastic import *  # noqa: F401,F403
from troika.keras.elastic import __all__  # noqa: F401
