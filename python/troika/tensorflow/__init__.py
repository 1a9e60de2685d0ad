"""``horovod.tensorflow`` on Troika: a Horovod TensorFlow script runs by changing its import
line to ``import troika.tensorflow as hvd``.

The collectives are TensorFlow ops of Troika's own op library, written against TensorFlow's
stable C API (docs/tensorflow.md): they run eagerly and inside ``tf.function``, submit to the
core without Python or the GIL, and one build runs on TensorFlow 2.16 to 2.21. Host tensors;
a GPU tensor is copied to the host by TensorFlow's placement. Inside an XLA-compiled function
(``jit_compile=True``) they raise, naming what to do instead.

Importing it needs TensorFlow (an ImportError otherwise). This module only gathers the names;
each lives in its own module (docs/python.md), the framework-neutral ones in troika._frontend.
"""

try:
    import tensorflow as _tf  # noqa: F401
except ImportError as _e:  # pragma: no cover - depends on the environment
    raise ImportError("troika.tensorflow needs TensorFlow (pip install tensorflow or "
                      "tensorflow-cpu): %s" % _e) from _e

from troika import shutdown, _frontend
from troika._frontend import *  # noqa: F401,F403
from troika._frontend import (TroikaError, DuplicateNameError, InvalidArgumentError,
                              TimelineNotAvailable)
from troika.tensorflow.compression import Compression
from troika.tensorflow.util import _executing_eagerly
from troika.tensorflow.collectives import (allreduce, grouped_allreduce, allgather,
                                           grouped_allgather, broadcast, broadcast_, alltoall,
                                           reducescatter, grouped_reducescatter, join, barrier,
                                           size_op, local_size_op, rank_op, local_rank_op,
                                           cross_size_op, cross_rank_op, process_set_included_op)
from troika.tensorflow.functions import (broadcast_variables, broadcast_object,
                                         allgather_object)
from troika.tensorflow.sessions import (broadcast_global_variables,
                                        BroadcastGlobalVariablesHook, broadcast_object_fn)
from troika.tensorflow.gradient_tape import (DistributedGradientTape,
                                             PartialDistributedGradientTape)
from troika.tensorflow.optimizer import DistributedOptimizer
from troika.tensorflow.sync_batch_norm import SyncBatchNormalization
from troika.tensorflow import elastic
from troika.tensorflow import util

__all__ = _frontend.HOROVOD + _frontend.TROIKA_ERRORS + [
    "shutdown", "Compression",
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast",
    "broadcast_", "alltoall", "reducescatter", "grouped_reducescatter", "join", "barrier",
    "size_op", "local_size_op", "rank_op", "local_rank_op", "cross_size_op", "cross_rank_op",
    "process_set_included_op",
    "broadcast_variables", "broadcast_object", "broadcast_object_fn", "allgather_object",
    "broadcast_global_variables", "BroadcastGlobalVariablesHook",
    "DistributedGradientTape", "PartialDistributedGradientTape", "DistributedOptimizer",
    "SyncBatchNormalization", "elastic",
]
