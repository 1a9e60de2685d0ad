"""horovod.mxnet's helpers: broadcast_parameters (including parameters whose initialization is
deferred), broadcast_object and allgather_object."""

import io
import pickle
import types

import mxnet as mx

from troika.mxnet.mpi_ops import allgather, broadcast_, rank, size

try:  # Horovod pickles with cloudpickle (lambdas, local classes); plain pickle otherwise
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - depends on the environment
    _pickler = pickle


def _broadcast_after_init(param, root_rank, name):
    """`param`'s _init_impl, followed by a broadcast of its data: a parameter whose shape is
    inferred at its first forward pass is broadcast then, on every rank alike."""
    init_impl = param._init_impl

    def wrapped(self, *args, **kwargs):
        init_impl(*args, **kwargs)
        broadcast_(self.data(), root_rank=root_rank, name=name)

    return types.MethodType(wrapped, param)


def broadcast_parameters(params, root_rank=0, prefix=None):
    """Sets every rank's parameters to `root_rank`'s: `params` is a dict of NDArrays or
    Parameters, or a gluon ParameterDict (``net.collect_params()``), broadcast in the order of
    their sorted names. A parameter whose initialization is deferred is broadcast right after
    it is initialized. `prefix` (a str) tells apart the broadcasts of several calls."""
    if size() == 1:
        return
    if prefix is not None and not isinstance(prefix, str):
        raise ValueError("broadcast_parameters: prefix must be a str, not %r" % (prefix,))
    prefix = prefix or ""
    valid = (dict, mx.gluon.parameter.ParameterDict)
    if not isinstance(params, valid):
        raise ValueError("invalid params of type: %s" % type(params))
    tensors = []
    for name, p in sorted(params.items()):
        if not isinstance(p, mx.gluon.parameter.Parameter):
            tensors.append((p, prefix + str(name)))
            continue
        try:
            tensors.append((p.data(), prefix + str(name)))
        except mx.gluon.parameter.DeferredInitializationError:
            p._init_impl = _broadcast_after_init(p, root_rank, prefix + str(name))
    for tensor, name in tensors:
        broadcast_(tensor, root_rank, name=name)


def broadcast_object(obj, root_rank=0, name=None):
    """`root_rank`'s `obj` (anything picklable) on every rank; returns it."""
    name = name or type(obj).__name__
    if rank() == root_rank:
        data = io.BytesIO()
        _pickler.dump(obj, data)
        payload = mx.nd.array(bytearray(data.getvalue()), dtype="uint8")
        length = mx.nd.array([payload.size], dtype="int32")
        broadcast_(length, root_rank, name=name + ".sz")
    else:
        length = mx.nd.empty((1,), dtype="int32")
        broadcast_(length, root_rank, name=name + ".sz")
        payload = mx.nd.empty((int(length.asscalar()),), dtype="uint8")
    broadcast_(payload, root_rank, name=name + ".t")
    if rank() == root_rank:
        return obj
    return _pickler.loads(payload.asnumpy().tobytes())


def allgather_object(obj, name=None):
    """Every rank's `obj` (anything picklable), in rank order."""
    name = name or type(obj).__name__
    data = io.BytesIO()
    _pickler.dump(obj, data)
    payload = mx.nd.array(bytearray(data.getvalue()), dtype="uint8")
    lengths = allgather(mx.nd.array([payload.size], dtype="int32"), name=name + ".sz")
    gathered = allgather(payload, name=name + ".t").asnumpy()
    out, start = [], 0
    for n in lengths.asnumpy().tolist():
        out.append(_pickler.loads(gathered[start:start + n].tobytes()))
        start += n
    return out
