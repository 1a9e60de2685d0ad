"""``horovod.torch.mpi_ops`` on Troika: the same functions as :mod:`troika.torch`, under the
module name some Horovod scripts import them from (``from horovod.torch.mpi_ops import
allreduce_async, synchronize``)."""

from troika import (TroikaError as HorovodInternalError, ProcessSet, global_process_set,
                    add_process_set, remove_process_set, init, is_initialized, is_homogeneous,
                    size, rank, local_size, local_rank, cross_size, cross_rank)
from troika._handles import poll, synchronize, shutdown
from troika._ops import Sum, Average, Min, Max, Product, Adasum
from troika._basics import (gloo_built, gloo_enabled, mpi_built, mpi_enabled,
                            mpi_threads_supported, nccl_built, cuda_built, rocm_built,
                            ddl_built, ccl_built, start_timeline, stop_timeline)
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

__all__ = [name for name in dir() if not name.startswith("_")]
