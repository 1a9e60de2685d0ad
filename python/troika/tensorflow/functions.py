"""horovod.tensorflow's functions over the collectives: broadcast_variables, broadcast_object
and allgather_object (objects travel pickled)."""

import pickle

import numpy as np
import tensorflow as tf

from troika import global_process_set, rank
from troika.tensorflow.collectives import allgather, broadcast


def _native(variable):
    """The tf.Variable behind a Keras 3 variable (which a tf.function would take as a
    tensor); a tf.Variable itself."""
    value = getattr(variable, "value", None)
    return value if isinstance(value, tf.Variable) else variable


def _assign_broadcast(variables, root_rank, process_set):
    for v in variables:
        v.assign(broadcast(v, root_rank, process_set=process_set))


_assign_broadcast_fn = tf.function(_assign_broadcast)


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Makes every rank's `variables` (tf.Variables or Keras 3 variables) root_rank's. Run
    eagerly, the broadcasts are one tf.function, so they run concurrently."""
    variables = [_native(v) for v in variables]
    if tf.executing_eagerly():
        _assign_broadcast_fn(variables, root_rank, process_set)
    else:
        return tf.group(*[v.assign(broadcast(v, root_rank, process_set=process_set))
                          for v in variables])


def _value(tensor, session):
    """`tensor`'s value: eagerly its own; in a v1 graph, run by `session` (else the default
    session), as Horovod's object helpers do."""
    if tf.executing_eagerly():
        return tensor.numpy()
    session = session or tf.compat.v1.get_default_session()
    if session is None:
        raise ValueError("broadcast_object/allgather_object in a graph need a session: pass "
                         "session=, or call them inside `with tf.compat.v1.Session() as s:`")
    return session.run(tensor)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """root_rank's `obj` (pickled) on every rank; in a v1 graph run by `session` (or the
    default one). Negotiated as "<name>.size" and "<name>.data" (default name
    "broadcast_object", the same on every rank)."""
    base = name if name is not None else "broadcast_object"
    if rank() == root_rank:
        payload = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
        length = np.array([payload.size], dtype=np.int64)
    else:
        payload = None
        length = np.zeros(1, dtype=np.int64)
    length = _value(broadcast(tf.constant(length), root_rank, name=base + ".size",
                              process_set=process_set), session)
    if payload is None:
        payload = np.zeros(int(length[0]), dtype=np.uint8)
    data = _value(broadcast(tf.constant(payload), root_rank, name=base + ".data",
                            process_set=process_set), session)
    return obj if rank() == root_rank else pickle.loads(data.tobytes())


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Every rank's `obj` (pickled), as a list in rank order; in a v1 graph run by `session`
    (or the default one). Negotiated as "<name>.sizes" and "<name>.data" (default name
    "allgather_object")."""
    base = name if name is not None else "allgather_object"
    data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    sizes = _value(allgather(tf.constant([data.size], dtype=tf.int64), name=base + ".sizes",
                             process_set=process_set), session)
    gathered = _value(allgather(tf.constant(data), name=base + ".data",
                                process_set=process_set), session)
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(gathered[offset:offset + n].tobytes()))
        offset += n
    return out
