"""troika.tensorflow's op library (python/tf_ops/, ``_troika_tf_ops.so``): loading it, handing it
the process's context at every init(), and what TensorFlow must be told about its ops.

The ops are asynchronous kernels on TensorFlow's C API that submit to libtroika without Python
(docs/design/tensorflow.md). They are stateful, so that grappler never folds or merges them,
and listed here as order-insensitive, so that ``tf.function`` does not chain them in program
order either: a gradient is submitted as soon as the backward pass produced it.
"""

import ctypes
import os

import tensorflow as tf
from tensorflow.python.framework import auto_control_deps
from tensorflow.python.ops import control_flow_util

import troika

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_troika_tf_ops.so")
if not os.path.exists(_PATH):
    raise ImportError(
        "troika.tensorflow: this Troika was built without its TensorFlow op library (%s is "
        "missing): build it with TensorFlow importable by the Python the build looks at "
        "(pip: install tensorflow into the environment first, then "
        "`TROIKA_WITH_TENSORFLOW=1 pip install .`; CMake: "
        "-DTROIKA_TENSORFLOW_PYTHON=/path/to/python)" % _PATH)

ops = tf.load_op_library(_PATH)
_native = ctypes.CDLL(_PATH)  # the same loaded library: its C entry point
_native.troika_tf_bind_context.argtypes = [ctypes.c_size_t]
_native.troika_tf_bind_context.restype = None

# The collectives: any order within a tf.function (each names its tensors; the coordinator
# orders them across ranks). Join, barrier and the queries keep program order.
ORDER_INSENSITIVE = frozenset((
    "TroikaAllreduce", "TroikaGroupedAllreduce", "TroikaAllgather", "TroikaGroupedAllgather",
    "TroikaBroadcast", "TroikaAlltoall", "TroikaReducescatter", "TroikaGroupedReducescatter"))
# A private module global, read when a tf.function is traced (op_is_stateful); the same in
# TensorFlow 2.16 to 2.21. tests/python/tensorflow checks that the ops still overlap.
auto_control_deps.SKIPPED_ORDER_INSENSITIVE_STATEFUL_OPS = frozenset(
    auto_control_deps.SKIPPED_ORDER_INSENSITIVE_STATEFUL_OPS | ORDER_INSENSITIVE)

troika._bind_native(_native.troika_tf_bind_context)


def check_not_xla(what):
    """Raises if the op is being built for XLA (``tf.function(jit_compile=True)``): XLA cannot
    run Troika's ops, and TensorFlow's own error would not say what to do instead."""
    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        raise troika.InvalidArgumentError(
            "INVALID_ARGUMENT: %s cannot run inside an XLA-compiled function "
            "(tf.function(jit_compile=True), or Keras' jit_compile): XLA cannot call Troika's "
            "collectives. Compile the model's computation with jit_compile=True and allreduce "
            "outside it (e.g. hvd.DistributedGradientTape around a compiled forward and "
            "backward), or use jit_compile=False for the training step" % what)
