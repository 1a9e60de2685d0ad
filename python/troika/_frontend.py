"""The framework-neutral names every front end re-exports, written once: Horovod's names of the
job, its process sets, the reduce ops and the build and feature queries, and Troika's errors.

``troika.torch.mpi_ops`` and ``troika.tensorflow`` take ``HOROVOD`` with
``from troika._frontend import *``; ``troika.torch`` takes them through ``mpi_ops``. Each front
end adds its own ``shutdown`` (troika.torch's forgets its handles; troika.tensorflow's is the
job's) and imports ``TROIKA_ERRORS``, Troika's additions to Horovod's names, by name, since
``horovod.torch.mpi_ops`` has none of them.
"""

from troika import (TroikaError, DuplicateNameError, InvalidArgumentError, ProcessSet,
                    global_process_set, add_process_set, remove_process_set, init, is_initialized,
                    is_homogeneous, size, rank, local_size, local_rank, cross_size, cross_rank)
from troika._ops import Sum, Average, Min, Max, Product, Adasum
from troika._basics import (gloo_built, gloo_enabled, mpi_built, mpi_enabled,
                            mpi_threads_supported, nccl_built, cuda_built, rocm_built,
                            ddl_built, ccl_built, start_timeline, stop_timeline,
                            TimelineNotAvailable)

# Horovod's exception name: `except hvd.HorovodInternalError` keeps working.
HorovodInternalError = TroikaError

# Horovod's names, as every front end exports them (with its own shutdown besides).
HOROVOD = [
    # The job and its process sets (troika).
    "init", "is_initialized", "size", "rank", "local_size", "local_rank", "cross_size",
    "cross_rank", "is_homogeneous", "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set",
    # Errors and reduce ops.
    "HorovodInternalError", "Sum", "Average", "Min", "Max", "Product", "Adasum",
    # Build and feature queries, timelines.
    "gloo_built", "gloo_enabled", "mpi_built", "mpi_enabled", "mpi_threads_supported",
    "nccl_built", "cuda_built", "rocm_built", "ddl_built", "ccl_built", "start_timeline",
    "stop_timeline",
]
# Troika's errors, which troika.torch and troika.tensorflow export besides Horovod's names.
TROIKA_ERRORS = ["TroikaError", "DuplicateNameError", "InvalidArgumentError",
                 "TimelineNotAvailable"]

__all__ = HOROVOD


class NoCompression:
    """Every front end's ``Compression.none`` (Horovod's default): the tensor travels as it is.
    Framework-neutral; each front end's ``fp16`` (and troika.torch's ``bf16``) casts with its
    own framework."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor
