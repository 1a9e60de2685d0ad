"""Gradient compression for allreduce, as horovod.mxnet.Compression: ``none`` and ``fp16``
(floating arrays travel as float16)."""

from troika._frontend import NoCompression


class Compression:
    """Gradient compression for allreduce (as horovod.mxnet.Compression)."""

    none = NoCompression

    class fp16:
        """Floating arrays travel as float16 and come back in their own dtype."""

        @staticmethod
        def compress(tensor):
            if "float" in str(tensor.dtype):
                return tensor.astype("float16", copy=False), tensor.dtype
            return tensor, tensor.dtype

        @staticmethod
        def decompress(tensor, ctx):
            if ctx is not None and "float" in str(ctx):
                return tensor.astype(ctx, copy=False)
            return tensor
