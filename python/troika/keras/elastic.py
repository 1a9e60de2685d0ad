"""``horovod.keras.elastic`` and ``horovod.tensorflow.keras.elastic``: ``run``, ``KerasState``
and the callbacks that keep an elastic job's state in ``model.fit`` (``CommitStateCallback``,
``UpdateBatchStateCallback``, ``UpdateEpochStateCallback``), for the Keras troika.keras serves
(troika.keras._selection): Keras 3's (troika.keras.keras3.elastic) or, with
``TF_USE_LEGACY_KERAS=1``, Keras 2's (troika.keras.keras2.elastic). The same names either way.
"""

from troika.keras._selection import KERAS2

if KERAS2:
    from troika.keras.keras2.elastic import *  # noqa: F401,F403
    from troika.keras.keras2.elastic import __all__  # noqa: F401
else:
    from troika.keras.keras3.elastic import *  # noqa: F401,F403
    from troika.keras.keras3.elastic import __all__  # noqa: F401
