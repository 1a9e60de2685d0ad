"""``horovod.torch.mpi_ops`` on Troika: the same functions as :mod:`troika.torch`, under the
module name some Horovod scripts import them from (``from horovod.torch.mpi_ops import
allreduce_async, synchronize``).

The one list of troika.torch's operations: troika.torch takes them from here, and adds
Troika's errors and its training names."""

from troika._frontend import *  # noqa: F401,F403
from troika._handles import poll, synchronize, shutdown
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
