"""``SyncBatchNormalization``: a Keras ``BatchNormalization`` whose batch statistics span every
rank's batch in training (horovod.tensorflow's), for Keras 3 on the TensorFlow backend and for
Keras 2 (``tf_keras``, ``TF_USE_LEGACY_KERAS=1``): it subclasses ``tf.keras``'s layer,
whichever Keras that is.

In training each rank computes its batch's per-channel count, mean and sum of squared
deviations; one allgather combines them (Chan et al.'s pairwise formula, stable in float32,
where Horovod's E[x^2] - E[x]^2 loses digits), so the output, the moving statistics and the
gradients equal those of one BatchNormalization over the ranks' concatenated batches. Ranks may
have different batch sizes. The backward pass makes one allreduce of the gradients of the
statistics. In inference it is the plain layer. Every rank of the job must call it in training
together (it is a collective).
"""

import tensorflow as tf

from troika._ops import Sum
from troika.tensorflow.collectives import allgather, allreduce

_BatchNormalization = tf.keras.layers.BatchNormalization
# Keras 3's layer computes the moments with `_moments(inputs, mask)` over its own reduction
# axes; Keras 2's with `_moments(inputs, reduction_axes, keep_dims, mask=None)`.
_KERAS_2 = "reduction_axes" in _BatchNormalization._moments.__code__.co_varnames


def _compute_dtype(dtype):
    return tf.float64 if dtype == tf.float64 else tf.float32


def _sync_moments(inputs, axes, mask_weights=None):
    """(mean, variance) over `axes` of every rank's `inputs` together (variance without
    Bessel's correction, as Keras'), shaped as the dimensions not in `axes`; `mask_weights`
    (broadcastable to `inputs`) weighs each element."""
    dtype = _compute_dtype(inputs.dtype)
    axes = sorted(a % inputs.shape.rank for a in axes)
    kept = [d for d in range(inputs.shape.rank) if d not in axes]
    kept_shape = tf.gather(tf.shape(inputs), kept) if kept else tf.constant([], tf.int32)
    static_kept = [inputs.shape[d] for d in kept]
    weights = (None if mask_weights is None else
               tf.broadcast_to(tf.cast(mask_weights, dtype), tf.shape(inputs)))

    @tf.custom_gradient
    def moments(x):
        x = tf.cast(x, dtype)
        if weights is None:
            count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), dtype)
            local_n = tf.fill(kept_shape, count)
            local_mean = tf.reduce_mean(x, axes) if axes else x
            local_m2 = tf.reduce_sum(tf.square(x - tf.reduce_mean(x, axes, keepdims=True)), axes)
        else:
            local_n = tf.reduce_sum(weights, axes)
            local_mean = tf.math.divide_no_nan(tf.reduce_sum(weights * x, axes), local_n)
            centered = x - _expand(local_mean, kept, x.shape.rank)
            local_m2 = tf.reduce_sum(weights * tf.square(centered), axes)
        stats = tf.stack([tf.reshape(local_n, [-1]), tf.reshape(local_mean, [-1]),
                          tf.reshape(local_m2, [-1])])
        gathered = allgather(stats[tf.newaxis])  # [ranks, 3, channels]
        n, means, m2s = gathered[:, 0], gathered[:, 1], gathered[:, 2]
        total = tf.reduce_sum(n, 0)
        mean = tf.math.divide_no_nan(tf.reduce_sum(n * means, 0), total)
        m2 = tf.reduce_sum(m2s, 0) + tf.reduce_sum(n * tf.square(means - mean), 0)
        variance = tf.math.divide_no_nan(m2, total)

        def grad(grad_mean, grad_variance):
            # Every rank's loss depends on the statistics of every rank's inputs: the sums of
            # the ranks' gradients of the statistics give this rank's inputs theirs.
            gm = tf.zeros_like(mean) if grad_mean is None else tf.reshape(
                tf.cast(grad_mean, dtype), [-1])
            gv = tf.zeros_like(mean) if grad_variance is None else tf.reshape(
                tf.cast(grad_variance, dtype), [-1])
            summed = allreduce(tf.stack([gm, gv]), op=Sum)
            scale_mean = tf.math.divide_no_nan(summed[0], total)
            scale_var = tf.math.divide_no_nan(2.0 * summed[1], total)
            centered = x - _expand(tf.reshape(mean, kept_shape), kept, x.shape.rank)
            dx = (_expand(tf.reshape(scale_mean, kept_shape), kept, x.shape.rank) +
                  _expand(tf.reshape(scale_var, kept_shape), kept, x.shape.rank) * centered)
            if weights is not None:
                dx = dx * weights
            return tf.cast(dx, inputs.dtype)

        out_mean = tf.ensure_shape(tf.reshape(mean, kept_shape), static_kept)
        out_variance = tf.ensure_shape(tf.reshape(variance, kept_shape), static_kept)
        return (tf.cast(out_mean, inputs.dtype), tf.cast(out_variance, inputs.dtype)), grad

    return moments(inputs)


def _expand(t, kept, rank):
    """`t` (shaped as the dimensions `kept` of a rank-`rank` tensor) broadcastable to it."""
    shape = tf.shape(t)
    full = [1] * rank
    for i, d in enumerate(kept):
        full[d] = shape[i]
    return tf.reshape(t, tf.stack(full)) if kept else t


@tf.keras.utils.register_keras_serializable(package="troika")
class SyncBatchNormalization(_BatchNormalization):
    """BatchNormalization over every rank's batch in training (module docstring). Arguments
    as tf.keras.layers.BatchNormalization's; `fused` must be False (Horovod's rule; the fused
    kernel cannot share its statistics). Unlike Horovod's it is not named
    "sync_batch_normalization" every time: Keras names it (sync_batch_normalization,
    sync_batch_normalization_1, ...), since Keras 3 refuses two layers of one name in a
    model."""

    def __init__(self, fused=False, **kwargs):
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        if _KERAS_2:
            kwargs["fused"] = False
        super().__init__(**kwargs)

    if _KERAS_2:
        def _moments(self, inputs, reduction_axes, keep_dims, mask=None):
            mean, variance = _sync_moments(inputs, reduction_axes, mask_weights=(
                None if mask is None else tf.expand_dims(mask, -1)))
            if keep_dims:
                kept = [d for d in range(inputs.shape.rank)
                        if d not in [a % inputs.shape.rank for a in reduction_axes]]
                mean = _expand(mean, kept, inputs.shape.rank)
                variance = _expand(variance, kept, inputs.shape.rank)
            return mean, variance
    else:
        def _moments(self, inputs, mask):
            return _sync_moments(inputs, self._reduction_axes, mask_weights=(
                None if mask is None else tf.expand_dims(mask, -1)))
