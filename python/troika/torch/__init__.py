"""``horovod.torch`` on Troika: a Horovod PyTorch script runs by changing its import line to
``import troika.torch as hvd``.

Pure Python over the compiled core (which never links torch): tensors are passed by
``data_ptr()``, dtype and shape. Supported dtypes: uint8, int8, int16, uint16 (where torch has
it), int32, int64, float16, bfloat16, float32, float64 and bool (others raise TypeError). On bool,
Sum and Max are a logical or, Product and Min a logical and; Average and scale factors other
than 1 raise TroikaError (INVALID_ARGUMENT). CPU tensors; CUDA tensors need a Troika built with
its GPU data plane (without it the operation fails with TroikaError FAILED_PRECONDITION).
Non-contiguous tensors are copied to contiguous ones (in-place operations copy the result
back).

Errors: an operation refused at submission raises at the call, as Horovod's do (a name already
in flight on this rank: DuplicateNameError; invalid arguments: InvalidArgumentError; both are
TroikaErrors and ValueErrors); one that fails later raises from synchronize() (or the blocking
call) as HorovodInternalError, i.e. TroikaError. Operations are negotiated under Horovod's
names, "<kind>.<name>" (docs/horovod-compat.md).

This module only gathers the names; each lives in its own module (docs/python.md):
troika (the job, process sets), troika._ops (reduce ops), troika._handles (handles, poll,
synchronize), and here tensors, compression, autograd, collectives, grouped, optimizer,
functions, sync_batch_norm, elastic and basics.
"""

from troika import (TroikaError, DuplicateNameError, InvalidArgumentError, ProcessSet,
                    global_process_set, add_process_set, remove_process_set, init, is_initialized,
                    is_homogeneous, size, rank, local_size, local_rank, cross_size, cross_rank)
from troika._handles import poll, synchronize, shutdown
from troika._ops import Sum, Average, Min, Max, Product, Adasum
from troika._basics import (gloo_built, gloo_enabled, mpi_built, mpi_enabled,
                            mpi_threads_supported, nccl_built, cuda_built, rocm_built,
                            ddl_built, ccl_built, start_timeline, stop_timeline,
                            TimelineNotAvailable)
from troika.torch.compression import Compression
from troika.torch.collectives import (allreduce, allreduce_async, allreduce_, allreduce_async_,
                                      sparse_allreduce_async, allgather, allgather_async,
                                      broadcast, broadcast_async, broadcast_, broadcast_async_,
                                      alltoall, alltoall_async, reducescatter,
                                      reducescatter_async, barrier, join)
from troika.torch.grouped import (grouped_allreduce, grouped_allreduce_async, grouped_allreduce_,
                                  grouped_allreduce_async_, grouped_allgather,
                                  grouped_allgather_async, grouped_reducescatter,
                                  grouped_reducescatter_async)
from troika.torch.optimizer import DistributedOptimizer
from troika.torch.functions import (broadcast_parameters, broadcast_optimizer_state,
                                    broadcast_object, allgather_object)
from troika.torch.sync_batch_norm import SyncBatchNorm
from troika.torch import elastic

# Horovod's exception name: `except hvd.HorovodInternalError` keeps working.
HorovodInternalError = TroikaError

__all__ = [
    # The job and its process sets (troika).
    "init", "shutdown", "is_initialized", "size", "rank", "local_size", "local_rank",
    "cross_size", "cross_rank", "is_homogeneous", "ProcessSet", "global_process_set",
    "add_process_set", "remove_process_set",
    # Errors.
    "HorovodInternalError", "TroikaError", "DuplicateNameError", "InvalidArgumentError",
    "TimelineNotAvailable",
    # Reduce ops, handles, compression.
    "Sum", "Average", "Min", "Max", "Product", "Adasum", "poll", "synchronize", "Compression",
    # Collectives.
    "allreduce", "allreduce_async", "allreduce_", "allreduce_async_", "sparse_allreduce_async",
    "allgather", "allgather_async", "broadcast", "broadcast_async", "broadcast_",
    "broadcast_async_", "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "barrier", "join", "grouped_allreduce", "grouped_allreduce_async", "grouped_allreduce_",
    "grouped_allreduce_async_", "grouped_allgather", "grouped_allgather_async",
    "grouped_reducescatter", "grouped_reducescatter_async",
    # Training.
    "DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state",
    "broadcast_object", "allgather_object", "SyncBatchNorm", "elastic",
    # Build and feature queries, timelines.
    "gloo_built", "gloo_enabled", "mpi_built", "mpi_enabled", "mpi_threads_supported",
    "nccl_built", "cuda_built", "rocm_built", "ddl_built", "ccl_built", "start_timeline",
    "stop_timeline",
]
