"""Shared set-up of the TensorFlow and Keras tests: every rank of the job runs the same pytest
session (run_tf_pytest.sh under troikarun), so every test must submit the same collectives in
the same order on every rank. TensorFlow is imported before troika, as user scripts do (the
core must not bind to TensorFlow's gRPC: troika/__init__.py). The job is joined once per
session."""

import os

import numpy as np
import pytest

if os.environ.get("KERAS_BACKEND") == "torch":
    # troika.keras on Keras' torch backend (test_keras_fit.py, test_keras_torch.py): no
    # TensorFlow in that Python (build/venv-torch2); the job is troika's, joined the same way.
    import troika.keras as hvd
else:
    import tensorflow as tf

    import troika.tensorflow as hvd

    # The dtypes of the ops, as Troika takes them.
    DTYPES = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16,
              tf.bfloat16, tf.float32, tf.float64]
    FLOAT_DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64]


@pytest.fixture(scope="session", autouse=True)
def job():
    hvd.init()
    assert hvd.is_initialized()
    yield
    hvd.shutdown()


def rank_input(dtype, shape, r):
    """Rank `r`'s input: small positive integers, exact in every dtype (sums of 4 ranks fit in
    int8)."""
    n = int(np.prod(shape)) if shape else 1
    v = 1 + (np.arange(n) + 3 * r) % 7
    return tf.cast(tf.reshape(tf.constant(v, dtype=tf.int64), shape), dtype)


def as_float64(t):
    return tf.cast(t, tf.float64).numpy()
