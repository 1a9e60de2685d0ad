"""troika.mxnet's engine operations (python/mxnet_engine/, ``_engine``): loading them, pointing
them at MXNet's C API in the libmxnet.so that ``import mxnet`` loaded, and handing them the
process's context at every init().

allreduce, broadcast and reducescatter are pushed onto MXNet's dependency engine, as Horovod's
are: the engine runs each once its input arrays are written, and holds every reader of its
outputs until it completed; a failure is raised by the next read of the outputs (MXNetError).
The Python thread never waits for them (docs/mxnet.md).
"""

import mxnet as mx

import troika

try:
    from troika.mxnet import _engine
except ImportError as e:  # pragma: no cover - a build without it
    raise ImportError("troika.mxnet: this Troika was built without its MXNet engine module "
                      "(troika/mxnet/_engine*.so): %s" % e) from e

ALLREDUCE = _engine.ALLREDUCE
BROADCAST = _engine.BROADCAST
REDUCESCATTER = _engine.REDUCESCATTER

_engine.bind_mxnet(mx.base._LIB._name)

troika._bind_native(_engine.bind_context)


def push(kind, group, tensors, op=0, prescale=1.0, postscale=1.0, process_set=0, root=0,
         priority=0, device=(1, 0), caller_waits=False):
    """Pushes one operation onto the engine: tensors are (name, input NDArray, output NDArray,
    Troika dtype, shape, output bytes); a non-empty group makes them one grouped operation.
    caller_waits: the caller will wait for the result, and counts as waiting for it (deadlock
    detection) from when the engine runs it. Raises MXNetError if the engine refused it."""
    try:
        _engine.push(kind, group,
                     [(n, i.handle.value, o.handle.value, d, s, b) for n, i, o, d, s, b in tensors],
                     op, prescale, postscale, process_set, root, priority, device[0], device[1],
                     caller_waits)
    except RuntimeError as e:
        raise mx.base.MXNetError(str(e)) from None
