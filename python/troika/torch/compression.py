"""Gradient compression for allreduce, as horovod.torch.Compression: ``none``, ``fp16``
(floating tensors travel as float16) and ``bf16`` (as bfloat16, Troika's addition)."""

import torch

from troika._frontend import NoCompression


class Compression:
    """Gradient compression for allreduce (as horovod.torch.Compression): ``none``, ``fp16``
    (floating tensors travel as float16) and ``bf16`` (as bfloat16)."""

    none = NoCompression

    class _Cast:
        wire = None

        @classmethod
        def compress(cls, tensor):
            if tensor.dtype.is_floating_point and tensor.dtype != cls.wire:
                return tensor.to(cls.wire), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor if ctx is None else tensor.to(ctx)

    class fp16(_Cast):
        wire = torch.float16

    class bf16(_Cast):
        wire = torch.bfloat16
