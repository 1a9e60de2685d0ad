"""troika.mxnet has every public name of horovod.mxnet 0.28.1, with its parameters and defaults
(inspect.signature, compared name by name; docs/horovod-compat.md). Horovod's signatures are
written here as data, read off its source (horovod/mxnet/__init__.py, mpi_ops.py,
functions.py at tag v0.28.1)."""

import inspect

import mxnet as mx

import troika.mxnet as hvd

GPS = "process_set=global_process_set"
HOROVOD = {
    "allreduce": "tensor, average=None, name=None, priority=0, prescale_factor=1.0, "
                 "postscale_factor=1.0, %s, op=None" % GPS,
    "allreduce_": "tensor, average=None, name=None, priority=0, prescale_factor=1.0, "
                  "postscale_factor=1.0, %s, op=None" % GPS,
    "grouped_allreduce": "tensors, average=None, name=None, priority=0, prescale_factor=1.0, "
                         "postscale_factor=1.0, %s, op=None" % GPS,
    "grouped_allreduce_": "tensors, average=None, name=None, priority=0, prescale_factor=1.0, "
                          "postscale_factor=1.0, %s, op=None" % GPS,
    "allgather": "tensor, name=None, priority=0, %s" % GPS,
    "grouped_allgather": "tensors, name=None, priority=0, %s" % GPS,
    "broadcast": "tensor, root_rank, name=None, priority=0, %s" % GPS,
    "broadcast_": "tensor, root_rank, name=None, priority=0, %s" % GPS,
    "alltoall": "tensor, splits=None, name=None, priority=0, %s" % GPS,
    "reducescatter": "tensor, op=Average, name=None, priority=0, %s, prescale_factor=1.0, "
                     "postscale_factor=1.0" % GPS,
    "grouped_reducescatter": "tensors, op=Average, name=None, priority=0, %s, "
                             "prescale_factor=1.0, postscale_factor=1.0" % GPS,
    "broadcast_object": "obj, root_rank=0, name=None",
    "allgather_object": "obj, name=None",
    "broadcast_parameters": "params, root_rank=0, prefix=None",
    "DistributedOptimizer": "optimizer, gradient_predivide_factor=1.0, num_groups=0, %s" % GPS,
    "DistributedTrainer": "params, optimizer, optimizer_params=None, "
                          "compression=Compression.none, gradient_predivide_factor=1.0, "
                          "prefix=None, num_groups=0, %s" % GPS,
    # horovod.common.basics, re-exported by horovod.mxnet.mpi_ops.
    "shutdown": "", "is_initialized": "", "size": "", "local_size": "", "cross_size": "",
    "rank": "", "local_rank": "", "cross_rank": "", "mpi_threads_supported": "",
    "mpi_enabled": "", "mpi_built": "", "gloo_enabled": "", "gloo_built": "",
    "nccl_built": "", "ddl_built": "", "ccl_built": "", "cuda_built": "", "rocm_built": "",
    "start_timeline": "file_path, mark_cycles=False", "stop_timeline": "",
}
# Names that are values, not functions.
CONSTANTS = ["Average", "Sum", "Adasum", "Min", "Max", "Product", "ProcessSet",
             "global_process_set", "add_process_set", "remove_process_set", "Compression", "init"]


def rendered(obj):
    """The parameter list as Horovod's source writes it."""
    sig = inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)
    parts = []
    for p in sig.parameters.values():
        if p.name == "self":
            continue
        if p.default is inspect.Parameter.empty:
            parts.append(p.name)
        elif p.default is hvd.global_process_set:
            parts.append("%s=global_process_set" % p.name)
        elif p.default is hvd.Compression.none:
            parts.append("%s=Compression.none" % p.name)
        elif p.name == "op" and p.default is hvd.Average:
            parts.append("op=Average")
        else:
            parts.append("%s=%r" % (p.name, p.default))
    return ", ".join(parts)


def test_every_horovod_name_has_horovods_parameters_and_defaults():
    differing = {name: (rendered(getattr(hvd, name)), want) for name, want in HOROVOD.items()
                 if rendered(getattr(hvd, name)) != want}
    assert not differing, differing
    for name in CONSTANTS:
        assert hasattr(hvd, name), name


def test_the_wrappers_are_mxnets_own_types():
    assert issubclass(hvd.DistributedOptimizer, mx.optimizer.Optimizer)
    assert issubclass(hvd.DistributedTrainer, mx.gluon.Trainer)
    assert hvd.HorovodInternalError is hvd.TroikaError
    assert issubclass(hvd.HorovodInternalError, RuntimeError)


def test_init_takes_horovods_arguments():
    # init(comm=None, process_sets=None): horovod.common.basics'; horovod.mxnet passes *args on.
    assert list(inspect.signature(hvd.init).parameters) == ["comm", "process_sets"]
