"""Gradient compression for allreduce, as horovod.tensorflow.Compression: ``none`` and
``fp16`` (floating tensors travel as float16)."""

import tensorflow as tf

from troika._frontend import NoCompression


class Compression:
    """``none``, or ``fp16``: floating tensors are cast to float16 for the allreduce and back
    after it (as horovod.tensorflow.Compression)."""

    none = NoCompression

    class fp16:
        @staticmethod
        def compress(tensor):
            if tensor.dtype.is_floating and tensor.dtype != tf.float16:
                return tf.cast(tensor, tf.float16), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor if ctx is None else tf.cast(tensor, ctx)
