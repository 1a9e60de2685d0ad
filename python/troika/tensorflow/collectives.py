"""Horovod's TensorFlow collectives on Troika's ops: ``allreduce``, ``grouped_allreduce``,
``allgather``, ``grouped_allgather``, ``broadcast``, ``broadcast_``, ``alltoall``,
``reducescatter``, ``grouped_reducescatter``, ``join``, ``barrier``, the ``*_op`` queries, and
each op's gradient with Horovod's conventions.

Every function builds one of the op library's ops (library.py), eagerly or inside a
``tf.function``. Run eagerly, an op tells the core that this thread waits for it (its
``blocking`` attribute): ranks that diverged then fail as a deadlock instead of hanging. Inside
a graph it does not, since the rank may be computing other ops meanwhile.

Operations are negotiated under Horovod's names: ``<kind>.<name>`` for a named
one; an unnamed one is ``<kind>.noname.<N>`` when run eagerly (N counts the process set's
unnamed operations, the same on every rank) and, in a graph, named after its input tensor as
Horovod names it (``<kind>.HorovodAllreduce_<tensor>``, with a suffix ``_1``, ``_2``, ... where
the graph has that name already, as TensorFlow makes op names unique), fixed when the graph is
built.
"""

import re
import weakref

import tensorflow as tf
from tensorflow.python.framework import ops as tf_ops

import troika
from troika import InvalidArgumentError, global_process_set
from troika import _ops
from troika._ops import Sum, Average, Adasum
from troika.tensorflow.compression import Compression
from troika.tensorflow.library import ops as _lib, check_not_xla

_KIND = {"allreduce": "HorovodAllreduce", "allgather": "HorovodAllgather",
         "broadcast": "HorovodBroadcast", "alltoall": "HorovodAlltoall",
         "reducescatter": "HorovodReducescatter"}


def _executing_eagerly():
    return tf.executing_eagerly()


def _normalize_name(name):
    """A name as TensorFlow allows it in op names (Horovod's rule)."""
    return re.sub("[^a-zA-Z0-9_]", "_", name)


def _op_name(kind, name, tensors, process_set_id):
    """The negotiated name of one operation (module docstring)."""
    check_not_xla("hvd." + kind)
    if name is not None:
        return "%s.%s" % (kind, name)
    if _executing_eagerly():
        return troika._generated_name(kind, process_set_id)
    if len(tensors) == 1:
        base = "%s_%s" % (_KIND[kind], _normalize_name(tensors[0].name))
    else:
        base = _normalize_name("HorovodGrouped%s_%s_%s" % (
            _KIND[kind][len("Horovod"):], tensors[0].name, tensors[-1].name))
    return "%s.%s" % (kind, _unique_in_graph(base))


# Graph -> the names given to its operations so far.
_graph_names = weakref.WeakKeyDictionary()


def _unique_in_graph(base):
    """`base`, or `base`_1, `base`_2, ... if taken in the graph being built, as TensorFlow makes
    op names unique (and Horovod negotiates under op names): two tensors of one name (unnamed
    tf.Variables) make two operations."""
    names = _graph_names.setdefault(tf.compat.v1.get_default_graph(), set())
    candidate, n = base, 0
    while candidate in names:
        n += 1
        candidate = "%s_%d" % (base, n)
    names.add(candidate)
    return candidate


def _set_id(process_set):
    """The core's id of `process_set`, as Horovod checks it: ValueError for a set that was not
    added (or an id set by hand), tf.errors.InvalidArgumentError for a set this rank is not
    in (raised when the op is built)."""
    ps_id = _ops.process_set_id(process_set)
    if ps_id != 0:
        if troika._process_sets.get(ps_id) is not process_set:
            raise ValueError("%r was not added with hvd.add_process_set" % (process_set,))
        if not process_set.included():
            raise tf.errors.InvalidArgumentError(
                None, None, "rank %d is not in %r: only its members run its collectives"
                % (troika.rank(), process_set))
    return ps_id


def _attrs(process_set_id):
    """The attributes every collective op takes: its set, and whether the calling thread
    waits for it (run eagerly: see the module's docstring)."""
    return dict(process_set_id=process_set_id, blocking=tf.executing_eagerly())


def _process_set(process_set_id):
    """The ProcessSet of an id (a gradient is built from the op's attributes)."""
    ps = troika._process_sets.get(process_set_id)
    if ps is None:
        raise ValueError("process set %d is not registered (removed?)" % process_set_id)
    return ps


def _invalid(message):
    err = InvalidArgumentError("INVALID_ARGUMENT: " + message)
    err.code, err.message, err.membership_change = "INVALID_ARGUMENT", message, None
    return err


# --- allreduce -------------------------------------------------------------------------------

def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
               ignore_name_scope=False, process_set=global_process_set):
    """The raw allreduce op (Horovod's horovod.tensorflow.mpi_ops._allreduce)."""
    ps_id = _set_id(process_set)
    return _lib.troika_allreduce(
        tensor, tensor_name=_op_name("allreduce", name, [tensor], ps_id),
        reduce_op=int(_ops.check_op(op)), prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor), **_attrs(ps_id))


@tf_ops.RegisterGradient("TroikaAllreduce")
def _allreduce_grad(op, grad):
    """The gradient of an allreduce is the same allreduce of the gradient (Horovod's)."""
    return _allreduce(grad, op=op.get_attr("reduce_op"),
                      prescale_factor=op.get_attr("prescale_factor"),
                      postscale_factor=op.get_attr("postscale_factor"),
                      process_set=_process_set(op.get_attr("process_set_id")))


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set, ignore_name_scope=False):
    """Reduces a tf.Tensor (or tf.Variable) across the ranks of `process_set`; Average by
    default. A tf.IndexedSlices is allgathered instead (values and indices; Sum or Average),
    as Horovod does. `device_dense`/`device_sparse` place the framework's part of the work."""
    op = _ops.reduce_op(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        if op not in (Sum, Average):
            raise NotImplementedError("Only Sum and Average ops are supported with "
                                      "tf.IndexedSlices")
        if prescale_factor != 1.0 or postscale_factor != 1.0:
            raise NotImplementedError("Pre/postscale_factor are not supported with "
                                      "tf.IndexedSlices")
        with tf.device(device_sparse):
            values = allgather(tensor.values, process_set=process_set)
            indices = allgather(tensor.indices, process_set=process_set)
            if op == Average:
                values = values / tf.cast(process_set.size(), values.dtype)
        return tf.IndexedSlices(values, indices, dense_shape=tensor.dense_shape)
    with tf.device(device_dense):
        compressed, ctx = compression.compress(tensor)
        reduced = _allreduce(compressed, name=name, op=op, prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor, process_set=process_set)
        return compression.decompress(reduced, ctx)


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       ignore_name_scope=False, process_set=global_process_set):
    ps_id = _set_id(process_set)
    group = _op_name("allreduce", name, tensors, ps_id)
    return _lib.troika_grouped_allreduce(
        list(tensors), group_name=group,
        tensor_names=["%s.%d" % (group, i) for i in range(len(tensors))],
        reduce_op=int(_ops.check_op(op)), prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor), **_attrs(ps_id))


@tf_ops.RegisterGradient("TroikaGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    return _grouped_allreduce(list(grads), op=op.get_attr("reduce_op"),
                              prescale_factor=op.get_attr("prescale_factor"),
                              postscale_factor=op.get_attr("postscale_factor"),
                              process_set=_process_set(op.get_attr("process_set_id")))


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Allreduces `tensors` as one group (none runs until every rank submitted all of them);
    tf.IndexedSlices among them are allgathered as by allreduce."""
    if not tensors:
        return tensors
    op = _ops.reduce_op(op, average)
    results = [None] * len(tensors)
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            results[i] = allreduce(t, op=op, device_sparse=device_sparse,
                                   prescale_factor=prescale_factor,
                                   postscale_factor=postscale_factor, process_set=process_set)
    if dense:
        with tf.device(device_dense):
            compressed, ctxs = zip(*[compression.compress(tensors[i]) for i in dense])
            reduced = _grouped_allreduce(compressed, name=name, op=op,
                                         prescale_factor=prescale_factor,
                                         postscale_factor=postscale_factor,
                                         process_set=process_set)
            for i, r, ctx in zip(dense, reduced, ctxs):
                results[i] = compression.decompress(r, ctx)
    return results


# --- allgather -------------------------------------------------------------------------------

def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates every rank's `tensor` along dim 0 (which may differ between ranks)."""
    ps_id = _set_id(process_set)
    return _lib.troika_allgather(tensor, tensor_name=_op_name("allgather", name, [tensor], ps_id),
                                 **_attrs(ps_id))


def _gathered_slice(grad, x, process_set):
    """This rank's rows of the gathered `grad`, whose dim 0 concatenates every rank's `x`."""
    d = tf.reshape(tf.shape(x)[0], [1])
    sizes = tf.reshape(allgather(d, process_set=process_set), [process_set.size()])
    return tf.split(grad, num_or_size_splits=sizes, axis=0)[process_set.rank()]


@tf_ops.RegisterGradient("TroikaAllgather")
def _allgather_grad(op, grad):
    """The average of the gradients, this rank's rows of it (Horovod's convention)."""
    ps = _process_set(op.get_attr("process_set_id"))
    grad = _allreduce(grad, op=Average, process_set=ps)
    return _gathered_slice(grad, op.inputs[0], ps)


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """Allgathers `tensors` as one group."""
    if not tensors:
        return tensors
    ps_id = _set_id(process_set)
    group = _op_name("allgather", name, tensors, ps_id)
    return _lib.troika_grouped_allgather(
        list(tensors), group_name=group,
        tensor_names=["%s.%d" % (group, i) for i in range(len(tensors))], **_attrs(ps_id))


@tf_ops.RegisterGradient("TroikaGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    ps = _process_set(op.get_attr("process_set_id"))
    # One allreduce each: TensorFlow may hand float32 zeros for a float64 output's gradient.
    grads = [_allreduce(g, op=Average, process_set=ps) for g in grads]
    return [_gathered_slice(g, x, ps) for g, x in zip(grads, op.inputs)]


# --- broadcast -------------------------------------------------------------------------------

def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """`root_rank`'s `tensor` on every rank of `process_set` (root_rank: a rank of the job)."""
    ps_id = _set_id(process_set)
    return _lib.troika_broadcast(
        tensor, tensor_name=_op_name("broadcast", name, [tensor], ps_id),
        root_rank=_ops.root_position(root_rank, process_set), **_attrs(ps_id))


@tf_ops.RegisterGradient("TroikaBroadcast")
def _broadcast_grad(op, grad):
    """The average of the gradients on the root, zero elsewhere (Horovod's convention)."""
    ps = _process_set(op.get_attr("process_set_id"))
    reduced = _allreduce(grad, op=Average, process_set=ps)
    if ps.rank() != op.get_attr("root_rank"):
        return reduced * 0
    return reduced


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Broadcasts `variables` from `root_rank` in place (assigns the result); returns their new
    values."""
    variables = list(variables)
    values = [broadcast(v, root_rank, name=None if name is None else "%s.%d" % (name, i),
                        process_set=process_set)
              for i, v in enumerate(variables)]
    return [v.assign(x) for v, x in zip(variables, values)]


# --- alltoall --------------------------------------------------------------------------------

def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Sends splits[j] rows of `tensor` to rank j of the set (an even split of dim 0 without
    `splits`); returns the received rows, and with `splits` also the rows received from each
    rank."""
    ps_id = _set_id(process_set)
    splits_ = (tf.cast(tf.convert_to_tensor(splits), tf.int32) if splits is not None
               else tf.constant([], dtype=tf.int32))
    output, received = _lib.troika_alltoall(
        tensor, splits_, tensor_name=_op_name("alltoall", name, [tensor], ps_id),
        **_attrs(ps_id))
    return (output, received) if splits is not None else output


@tf_ops.RegisterGradient("TroikaAlltoall")
def _alltoall_grad(op, grad_wrt_output, grad_wrt_received_splits):
    """Sends each gradient row back where its row came from."""
    ps = _process_set(op.get_attr("process_set_id"))
    grad, _ = alltoall(grad_wrt_output, splits=op.outputs[1], process_set=ps)
    return [grad, None]


# --- reducescatter ---------------------------------------------------------------------------

def _reducescatter(tensor, name=None, op=Sum, ignore_name_scope=False,
                   process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    ps_id = _set_id(process_set)
    return _lib.troika_reducescatter(
        tensor, tensor_name=_op_name("reducescatter", name, [tensor], ps_id),
        reduce_op=int(_reducescatter_op(op)), prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor), **_attrs(ps_id))


def _reducescatter_op(op):
    op = _ops.check_op(op)
    if op not in (Sum, Average):
        raise _invalid("reducescatter supports op=Sum and op=Average only")
    return op


def _reducescatter_grad_of(grad, op, ps):
    """Horovod's convention: the allgathered gradient, times the set's size for Sum, times the
    scale factors."""
    if op.get_attr("reduce_op") == Sum:
        grad = grad * tf.cast(ps.size(), grad.dtype)
    for factor in ("prescale_factor", "postscale_factor"):
        if op.get_attr(factor) != 1.0:
            grad = grad * tf.cast(op.get_attr(factor), grad.dtype)
    return allgather(grad, process_set=ps)


@tf_ops.RegisterGradient("TroikaReducescatter")
def _reducescatter_grad(op, grad):
    return _reducescatter_grad_of(grad, op, _process_set(op.get_attr("process_set_id")))


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces `tensor` across the set and gives each rank its rows of dim 0 (the first
    dim0 % size ranks one row more). Average by default; Sum or Average."""
    with tf.device(device_dense):
        compressed, ctx = compression.compress(tensor)
        reduced = _reducescatter(compressed, name=name, op=op, process_set=process_set,
                                 prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor)
        return compression.decompress(reduced, ctx)


def _grouped_reducescatter(tensors, name=None, op=Sum, ignore_name_scope=False,
                           process_set=global_process_set, prescale_factor=1.0,
                           postscale_factor=1.0):
    ps_id = _set_id(process_set)
    group = _op_name("reducescatter", name, tensors, ps_id)
    return _lib.troika_grouped_reducescatter(
        list(tensors), group_name=group,
        tensor_names=["%s.%d" % (group, i) for i in range(len(tensors))],
        reduce_op=int(_reducescatter_op(op)), prescale_factor=float(prescale_factor),
        postscale_factor=float(postscale_factor), **_attrs(ps_id))


@tf_ops.RegisterGradient("TroikaGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    ps = _process_set(op.get_attr("process_set_id"))
    return [_reducescatter_grad_of(g, op, ps) for g in grads]


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=global_process_set, ignore_name_scope=False, name=None,
                          prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatters `tensors` as one group."""
    if not tensors:
        return tensors
    with tf.device(device_dense):
        compressed, ctxs = zip(*[compression.compress(t) for t in tensors])
        reduced = _grouped_reducescatter(compressed, name=name, op=op, process_set=process_set,
                                         prescale_factor=prescale_factor,
                                         postscale_factor=postscale_factor)
        return [compression.decompress(r, c) for r, c in zip(reduced, ctxs)]


# --- join, barrier, queries ------------------------------------------------------------------

def join():
    """This rank is out of data: returns (once every rank joined) the last rank to join."""
    check_not_xla("hvd.join")
    return _lib.troika_join(blocking=tf.executing_eagerly())


def barrier(process_set=global_process_set):
    """Completes once every rank of `process_set` reached it."""
    check_not_xla("hvd.barrier")
    return _lib.troika_barrier(**_attrs(_set_id(process_set)))


def _query(what, process_set_id=0, name=None):
    return _lib.troika_query(what=what, process_set_id=process_set_id, name=name)


def size_op(process_set_id=0, name=None):
    """The size of the set (the job by default), read when the graph runs."""
    return _query("size", process_set_id, name)


def local_size_op(name=None):
    return _query("local_size", name=name)


def rank_op(name=None):
    return _query("rank", name=name)


def local_rank_op(name=None):
    return _query("local_rank", name=name)


def cross_size_op(name=None):
    return _query("cross_size", name=name)


def cross_rank_op(name=None):
    return _query("cross_rank", name=name)


def process_set_included_op(process_set_id=0, name=None):
    """1 if this rank is in the set, 0 if not; -1 before init(), -3 for an unknown set
    (Horovod's codes)."""
    return _query("process_set_included", process_set_id, name)


for _op_type in ("TroikaQuery", "TroikaJoin", "TroikaBarrier"):
    tf_ops.NotDifferentiable(_op_type)
