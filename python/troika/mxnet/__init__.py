"""``horovod.mxnet`` on Troika: a Horovod MXNet script runs by changing its import line to
``import troika.mxnet as hvd``.

Needs MXNet 1.x (1.9.1 is the last release; PyPI's wheel wants ``numpy<1.24``); without it,
importing this module raises ImportError saying so. Nothing of Troika is compiled against MXNet:
allreduce, broadcast and reducescatter are pushed onto MXNet's dependency engine through its C
API, found at run time in the libmxnet.so the process loaded (docs/mxnet.md). CPU arrays.

Gathered here (same names, arguments and defaults as horovod.mxnet 0.28.1): the job and its
process sets (troika), the collectives (mpi_ops), Compression, DistributedOptimizer and
DistributedTrainer (training), broadcast_parameters, broadcast_object and allgather_object
(functions), and the reduce ops and build queries.
"""

try:
    import mxnet  # noqa: F401
except ImportError as e:
    raise ImportError(
        "troika.mxnet needs MXNet, which this Python cannot import (%s): install it in a "
        "virtual environment of its own, e.g. `python3 -m venv env && env/bin/pip install "
        "mxnet==1.9.1 'numpy<1.24'` (docs/mxnet.md)" % e) from e

from troika import TroikaError
from troika.mxnet.mpi_ops import (  # noqa: F401
    init, shutdown, is_initialized, size, local_size, cross_size, rank, local_rank, cross_rank,
    ProcessSet, global_process_set, add_process_set, remove_process_set,
    Average, Sum, Adasum, Min, Max, Product,
    allreduce, allreduce_, grouped_allreduce, grouped_allreduce_, allgather, grouped_allgather,
    barrier, join,
    broadcast, broadcast_, alltoall, reducescatter, grouped_reducescatter,
    start_timeline, stop_timeline, mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled,
    gloo_built, nccl_built, ddl_built, ccl_built, cuda_built, rocm_built)
from troika.mxnet.compression import Compression  # noqa: F401
from troika.mxnet.functions import (broadcast_parameters, broadcast_object,  # noqa: F401
                                    allgather_object)
from troika.mxnet.training import DistributedOptimizer, DistributedTrainer  # noqa: F401

# Horovod's exception name.
HorovodInternalError = TroikaError
