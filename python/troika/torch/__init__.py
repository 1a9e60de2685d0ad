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
functions, sync_batch_norm, elastic and basics. The operations are listed once, in mpi_ops
(Horovod's module of the same functions), and the framework-neutral names in troika._frontend.
"""

from troika import _frontend
from troika._frontend import (TroikaError, DuplicateNameError, InvalidArgumentError,
                              TimelineNotAvailable)
from troika.torch import mpi_ops
from troika.torch.mpi_ops import *  # noqa: F401,F403
from troika.torch.optimizer import DistributedOptimizer
from troika.torch.functions import (broadcast_parameters, broadcast_optimizer_state,
                                    broadcast_object, allgather_object)
from troika.torch.sync_batch_norm import SyncBatchNorm
from troika.torch import elastic

__all__ = mpi_ops.__all__ + _frontend.TROIKA_ERRORS + [
    # Training.
    "DistributedOptimizer", "broadcast_parameters", "broadcast_optimizer_state",
    "broadcast_object", "allgather_object", "SyncBatchNorm", "elastic",
]
