"""What horovod.tensorflow gives tf.compat.v1 graphs and sessions: broadcast_global_variables,
BroadcastGlobalVariablesHook, and broadcast_object_fn (an object broadcast whose ops are built
once and run by a session)."""

import pickle

import numpy as np
import tensorflow as tf

from troika import global_process_set, rank
from troika.tensorflow.collectives import broadcast
from troika.tensorflow.functions import broadcast_object, broadcast_variables
from troika.tensorflow.util import _executing_eagerly


def broadcast_global_variables(root_rank):
    """An op that assigns root_rank's values to every global variable of the tf.compat.v1
    graph being built (tf.compat.v1.global_variables()). RuntimeError eagerly, as Horovod's:
    broadcast the model's and optimizer's variables with broadcast_variables there."""
    if _executing_eagerly():
        raise RuntimeError(
            "hvd.broadcast_global_variables() does not support eager execution. "
            "Please use `hvd.broadcast_variables(<model/optimizer variables>)` instead.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """A SessionRunHook (tf.compat.v1.train.MonitoredTrainingSession's hooks) that assigns
    root_rank's values to every global variable once the session is created: every rank starts
    from the same weights, initialized or restored from a checkpoint."""

    def __init__(self, root_rank, device=""):
        super().__init__()
        self.root_rank = root_rank
        self.bcast_op = None
        self.device = device

    def begin(self):
        if self.bcast_op is None or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            with tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function obj -> root_rank's obj (pickled), for tf.compat.v1 graphs: its two
    broadcasts ("<name>.size", "<name>.data"; default name "broadcast_object_fn") are built
    once, here, and each call runs them with `session` (default: the default session when
    called). Eagerly it is broadcast_object."""
    base = name or "broadcast_object_fn"
    if _executing_eagerly():
        return lambda obj: broadcast_object(obj, root_rank, name=base, process_set=process_set)
    length_in = tf.compat.v1.placeholder(tf.int64, [1], name="bcast_object_size")
    length_out = broadcast(length_in, root_rank, name=base + ".size", process_set=process_set)
    data_in = tf.compat.v1.placeholder(tf.uint8, [None], name="bcast_object_data")
    data_out = broadcast(data_in, root_rank, name=base + ".data", process_set=process_set)

    def broadcast_fn(obj):
        sess = session or tf.compat.v1.get_default_session()
        if rank() == root_rank:
            payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
            sess.run(length_out, feed_dict={length_in: [payload.size]})
        else:
            length = sess.run(length_out, feed_dict={length_in: [0]})
            payload = np.zeros(int(length[0]), dtype=np.uint8)
        data = sess.run(data_out, feed_dict={data_in: payload})
        return obj if rank() == root_rank else pickle.loads(data.tobytes())

    return broadcast_fn
