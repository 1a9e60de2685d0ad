"""horovod.torch's functions over the collectives: broadcast_parameters,
broadcast_optimizer_state, broadcast_object and allgather_object (objects travel pickled)."""

import pickle

import torch

from troika import global_process_set, rank
from troika._handles import synchronize
from troika.torch.collectives import allgather, broadcast_, broadcast_async_
from troika.torch.optimizer import _DistributedMixin


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites every rank's parameters with root_rank's: `params` is a model's
    state_dict() or named_parameters() (or a list of tensors)."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list):
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    else:
        items = list(params)
    handles = []
    for name, p in items:
        if not isinstance(p, torch.Tensor):
            raise ValueError("broadcast_parameters: %s is not a tensor" % (name,))
        with torch.no_grad():
            handles.append(broadcast_async_(p.data if p.requires_grad else p, root_rank,
                                            name=None if name is None else
                                            "broadcast_parameters." + name,
                                            process_set=process_set))
    for h in handles:
        synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's `obj` (pickled), on every rank. Negotiated as "<name>.size" and
    "<name>.data" (default name "broadcast_object": unlike Horovod's default, the type name of
    `obj`, it is the same on every rank whatever the others pass, e.g. None)."""
    base = name if name is not None else "broadcast_object"
    if rank() == root_rank:
        payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        payload = None
        length = torch.zeros(1, dtype=torch.int64)
    broadcast_(length, root_rank, name=base + ".size", process_set=process_set)
    if payload is None:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name=base + ".data", process_set=process_set)
    return obj if rank() == root_rank else pickle.loads(payload.numpy().tobytes())


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Makes every rank's optimizer state (hyperparameters and per-parameter state) root_rank's.

    As Horovod's: an optimizer with no state yet has it made first (a zero gradient for every
    parameter that needs one — sparse for SparseAdam, and for SGD on the sparse embeddings of
    `model` — then one step of the wrapped optimizer, without allreduce), so every parameter
    needing a gradient has one afterwards. Unlike Horovod's, that step leaves the parameters as
    they were (weight decay would move them off root_rank's). LBFGS raises ValueError."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state_dict()["state"]:
        _initialize_optimizer_state(optimizer, model)
    state = broadcast_object(optimizer.state_dict() if rank() == root_rank else None,
                             root_rank, process_set=process_set)
    if rank() != root_rank:
        optimizer.load_state_dict(state)


def _initialize_optimizer_state(optimizer, model):
    sparse = set()
    if model is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding) and m.sparse:
                sparse.update(id(p) for p in m.parameters())
    params = [p for group in optimizer.param_groups for p in group["params"]
              if p.requires_grad]
    for p in params:
        p.grad = torch.zeros_like(p)
        if isinstance(optimizer, torch.optim.SparseAdam) or (
                isinstance(optimizer, torch.optim.SGD) and id(p) in sparse):
            p.grad = p.grad.to_sparse()
    saved = [p.detach().clone() for p in params]
    # The wrapped optimizer's own step: DistributedOptimizer.step would allreduce, which every
    # rank would have to do at once.
    if isinstance(optimizer, _DistributedMixin):
        super(_DistributedMixin, optimizer).step()
    else:
        optimizer.step()
    with torch.no_grad():
        for p, before in zip(params, saved):
            p.copy_(before)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's `obj` (pickled), as a list in rank order. Negotiated as "<name>.sizes" and
    "<name>.data" (default name "allgather_object": named, as Horovod's are, so that it matches
    across ranks whatever unnamed operations one rank ran alone before; Horovod's default is
    the type name of `obj`, which must then be the same on every rank)."""
    base = name if name is not None else "allgather_object"
    data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
    sizes = allgather(torch.tensor([data.numel()], dtype=torch.int64), name=base + ".sizes",
                      process_set=process_set)
    gathered = allgather(data, name=base + ".data", process_set=process_set)
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(gathered[offset:offset + n].numpy().tobytes()))
        offset += n
    return out
