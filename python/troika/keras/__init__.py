"""``horovod.keras`` and ``horovod.tensorflow.keras`` on Troika: a Horovod Keras script runs by
changing its import line to ``import troika.keras as hvd`` (or ``troika.tensorflow.keras``, the
same module's names).

It serves the Keras that ``tf.keras`` is (troika.keras._selection): Keras 3 with the TensorFlow
backend (troika.keras.keras3, over troika.tensorflow's ops) or with the torch backend
(``KERAS_BACKEND=torch``: the same modules over troika.torch; keras3._backend says which
backend's functions are used, other backends raise ImportError), or, when TensorFlow routes
``tf.keras`` to Keras 2 (``TF_USE_LEGACY_KERAS=1``, the ``tf_keras`` package), Keras 2
(troika.keras.keras2), with Horovod's Keras 2 behaviour. The names are Horovod's (the union of
horovod.keras's and horovod.tensorflow.keras's) and Troika's errors, the same for both. This
module only gathers them; each lives in its Keras' modules: optimizer (DistributedOptimizer,
PartialDistributedOptimizer), callbacks, functions (the value collectives, load_model),
elastic.
"""

from troika import (TroikaError, DuplicateNameError, InvalidArgumentError, ProcessSet,
                    global_process_set, add_process_set, remove_process_set, init, is_initialized,
                    is_homogeneous, size, rank, local_size, local_rank, cross_size, cross_rank,
                    shutdown)
from troika._ops import Sum, Average, Adasum
from troika._basics import (gloo_built, gloo_enabled, mpi_built, mpi_enabled,
                            mpi_threads_supported, nccl_built, cuda_built, rocm_built, ddl_built,
                            ccl_built, start_timeline, stop_timeline, TimelineNotAvailable)
from troika.keras._selection import KERAS2

if KERAS2:
    from troika.tensorflow.compression import Compression
    from troika.keras.keras2.optimizer import DistributedOptimizer, PartialDistributedOptimizer
    from troika.keras.keras2.functions import (allreduce, allgather, broadcast, reducescatter,
                                               broadcast_global_variables, load_model)
    from troika.tensorflow.functions import broadcast_variables
else:
    from troika.keras.keras3._backend import Compression
    from troika.keras.keras3.optimizer import DistributedOptimizer, PartialDistributedOptimizer
    from troika.keras.keras3.functions import (allreduce, allgather, broadcast, reducescatter,
                                               broadcast_global_variables, broadcast_variables,
                                               load_model)
from troika.keras import callbacks, elastic  # noqa: E402

__all__ = [
    # The job and its process sets (troika).
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "is_homogeneous", "ProcessSet", "global_process_set",
    "add_process_set", "remove_process_set",
    # Errors.
    "TroikaError", "DuplicateNameError", "InvalidArgumentError", "TimelineNotAvailable",
    # Operations' arguments.
    "Sum", "Average", "Adasum", "Compression",
    # Keras.
    "DistributedOptimizer", "PartialDistributedOptimizer", "callbacks", "elastic", "load_model",
    "allreduce", "allgather", "broadcast", "reducescatter", "broadcast_global_variables",
    "broadcast_variables",
    # The build.
    "gloo_built", "gloo_enabled", "mpi_built", "mpi_enabled", "mpi_threads_supported",
    "nccl_built", "cuda_built", "rocm_built", "ddl_built", "ccl_built", "start_timeline",
    "stop_timeline",
]
