"""Horovod's ``groups`` for gradient allreduces, apart from any framework: which gradients are
allreduced, and as which grouped allreduces. Shared by troika.tensorflow's gradient allreduce
(tensorflow/allreduce_grads.py, which troika.keras uses on the TensorFlow backend) and
troika.keras on the torch backend (keras/keras3/_torch.py)."""


def split(items, n):
    """`items` in `n` consecutive groups of near-equal size (the first ones one longer)."""
    q, r = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + q + (1 if i < r else 0)
        if end > start:
            out.append(items[start:end])
        start = end
    return out


def plan(grads, variables, groups, group_keys, key):
    """The positions of the gradients to allreduce (not None), and how to group them: None
    (each alone), or a tuple of tuples of positions, each one grouped allreduce. `groups`: None,
    or a number of groups of consecutive gradients; `group_keys`: None, or tuples of the keys
    (`key(variable)`) of each group's variables, every other gradient then a group of its
    own."""
    present = tuple(i for i, g in enumerate(grads) if g is not None)
    if groups is None:
        return present, None
    if group_keys is None:
        return present, tuple(tuple(s) for s in split(list(present), groups))
    where = {key(variables[i]): i for i in present}
    out = []
    for keys in group_keys:
        members = [where.pop(k) for k in keys if k in where]
        if members:
            out.append(tuple(members))
    out += [(i,) for i in present if key(variables[i]) in where]
    return present, tuple(out)
