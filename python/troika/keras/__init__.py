"""``horovod.keras`` and ``horovod.tensorflow.keras`` on Troika, for Keras 3: a Horovod Keras
script runs by changing its import line to ``import troika.keras as hvd`` (or
``troika.tensorflow.keras``, the same module's names).

Keras 3 with the TensorFlow backend, over troika.tensorflow's ops (troika.keras._backend says
which backend's functions are used; other backends raise ImportError). The names are Horovod's
(the union of horovod.keras's and horovod.tensorflow.keras's) and Troika's errors. This module
only gathers them; each lives in its own module: optimizer (DistributedOptimizer,
PartialDistributedOptimizer), callbacks, functions (the value collectives, load_model).
"""

from troika import (TroikaError, DuplicateNameError, InvalidArgumentError, ProcessSet,
                    global_process_set, add_process_set, remove_process_set, init, is_initialized,
                    is_homogeneous, size, rank, local_size, local_rank, cross_size, cross_rank,
                    shutdown)
from troika._ops import Sum, Average, Adasum
from troika._basics import (gloo_built, gloo_enabled, mpi_built, mpi_enabled,
                            mpi_threads_supported, nccl_built, cuda_built, rocm_built, ddl_built,
                            ccl_built, start_timeline, stop_timeline, TimelineNotAvailable)
from troika.keras._backend import Compression
from troika.keras.optimizer import DistributedOptimizer, PartialDistributedOptimizer
from troika.keras.functions import (allreduce, allgather, broadcast, reducescatter,
                                    broadcast_global_variables, load_model)
from troika.keras import callbacks

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
    "DistributedOptimizer", "PartialDistributedOptimizer", "callbacks", "load_model",
    "allreduce", "allgather", "broadcast", "reducescatter", "broadcast_global_variables",
    # The build.
    "gloo_built", "gloo_enabled", "mpi_built", "mpi_enabled", "mpi_threads_supported",
    "nccl_built", "cuda_built", "rocm_built", "ddl_built", "ccl_built", "start_timeline",
    "stop_timeline",
]
