"""The Python layer's shape (docs/python.md), checked without a job: troika.torch's names are
Horovod's public names and Troika's additions only (no stdlib modules, no helpers), and the
modules of python/troika import one another at module level only, in one direction
(run_unit_tests.sh, one process)."""

import ast
import os
import types

import troika
import troika.torch as hvd

# Every name horovod/torch/__init__.py (v0.28.1, master the same) exports.
HOROVOD = """Adasum Average Compression DistributedOptimizer HorovodInternalError Max Min
ProcessSet Product Sum SyncBatchNorm add_process_set allgather allgather_async allgather_object
allreduce allreduce_ allreduce_async allreduce_async_ alltoall alltoall_async barrier broadcast
broadcast_ broadcast_async broadcast_async_ broadcast_object broadcast_optimizer_state
broadcast_parameters ccl_built cross_rank cross_size cuda_built ddl_built elastic
global_process_set gloo_built gloo_enabled grouped_allgather grouped_allgather_async
grouped_allreduce grouped_allreduce_ grouped_allreduce_async grouped_allreduce_async_
grouped_reducescatter grouped_reducescatter_async init is_initialized join local_rank
local_size mpi_built mpi_enabled mpi_threads_supported nccl_built poll rank reducescatter
reducescatter_async remove_process_set rocm_built shutdown size sparse_allreduce_async
start_timeline stop_timeline synchronize""".split()
# Troika's additions (docs/horovod-compat.md).
ADDITIONS = ["TroikaError", "DuplicateNameError", "InvalidArgumentError", "TimelineNotAvailable",
             "is_homogeneous"]


def public_names(module):
    return {n for n in dir(module) if not n.startswith("_")}


def test_troika_torch_exports_horovods_names_and_troikas_additions_only():
    assert sorted(hvd.__all__) == sorted(HOROVOD + ADDITIONS)
    for name in hvd.__all__:
        assert hasattr(hvd, name), name
    # Besides __all__, only troika.torch's own modules (as horovod.torch shows mpi_ops,
    # compression, ...): no stdlib module, no torch, no helper.
    for name in public_names(hvd) - set(hvd.__all__):
        value = getattr(hvd, name)
        assert isinstance(value, types.ModuleType), name
        assert value.__name__ == "troika.torch." + name, name


def test_the_elastic_module_exports_horovods_names():
    assert set(hvd.elastic.__all__) == {"run", "State", "ObjectState", "TorchState",
                                        "ElasticSampler", "HostsUpdatedInterrupt"}


def troika_modules():
    """{module name: source path} of the package troika as imported (the build's copy of
    python/troika)."""
    root = os.path.dirname(troika.__file__)
    out = {}
    for folder, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                parts = os.path.relpath(path, os.path.dirname(root))[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts.pop()
                out[".".join(parts)] = path
    return out


def imported(node, module, is_package, modules):
    """The troika modules an import statement in `module` depends on: for `from P import N`,
    P.N if that is a module, else P (whose __init__ defines N)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module if is_package else module.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = package + ("." + base if base else "")
        names = [base + "." + a.name if base + "." + a.name in modules else base
                 for a in node.names]
    return {n for n in names if n == "troika" or n.startswith("troika.")}


def test_no_module_imports_troika_inside_a_function():
    lazy = []
    for module, path in troika_modules().items():
        tree = ast.parse(open(path).read(), path)
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                for node in ast.walk(fn):
                    if isinstance(node, (ast.Import, ast.ImportFrom)) and imported(
                            node, module, path.endswith("__init__.py"), ()):
                        lazy.append("%s:%d" % (module, node.lineno))
    assert lazy == []


def test_the_modules_depend_on_one_another_in_one_direction():
    modules = troika_modules()
    edges = {}
    for module, path in modules.items():
        tree = ast.parse(open(path).read(), path)
        deps = set()
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for name in imported(node, module, path.endswith("__init__.py"), modules):
                    while name not in modules and "." in name:  # troika._troika: compiled
                        name = name.rpartition(".")[0]
                    if name != module:
                        deps.add(name)
        edges[module] = deps
    # Importing a module imports its parent packages first, by Python's rules: only the
    # imports written count, and they must form no cycle.
    state = {}

    def visit(m, path):
        if state.get(m) == "done":
            return
        assert state.get(m) != "open", "import cycle: " + " -> ".join(path + [m])
        state[m] = "open"
        for d in sorted(edges[m]):
            visit(d, path + [m])
        state[m] = "done"

    for m in sorted(edges):
        visit(m, [])
    # The framework-neutral modules know no front end, and the front ends not each other.
    for m in ("troika", "troika._handles", "troika._ops", "troika._basics", "troika._elastic",
              "troika._frontend"):
        assert not any(d.startswith(("troika.torch", "troika.tensorflow", "troika.keras"))
                       for d in edges[m]), (m, edges[m])
    for m in edges:
        if m.startswith("troika.tensorflow"):
            assert not any(d.startswith("troika.torch") for d in edges[m]), (m, edges[m])
        if m.startswith("troika.torch"):
            assert not any(d.startswith(("troika.tensorflow", "troika.keras"))
                           for d in edges[m]), (m, edges[m])


# Every public name horovod/torch/mpi_ops.py (v0.28.1) defines or imports, but the helper
# handle_average_backwards_compatibility.
HOROVOD_MPI_OPS = """Adasum Average Compression HorovodInternalError Max Min ProcessSet Product
Sum add_process_set allgather allgather_async allreduce allreduce_ allreduce_async
allreduce_async_ alltoall alltoall_async barrier broadcast broadcast_ broadcast_async
broadcast_async_ ccl_built cross_rank cross_size cuda_built ddl_built global_process_set
gloo_built gloo_enabled grouped_allgather grouped_allgather_async grouped_allreduce
grouped_allreduce_ grouped_allreduce_async grouped_allreduce_async_ grouped_reducescatter
grouped_reducescatter_async init is_homogeneous is_initialized join local_rank local_size
mpi_built mpi_enabled mpi_threads_supported nccl_built poll rank reducescatter
reducescatter_async remove_process_set rocm_built shutdown size sparse_allreduce_async
start_timeline stop_timeline synchronize""".split()


def test_mpi_ops_is_horovods_module_of_the_same_functions():
    import troika.torch.mpi_ops as mpi_ops
    assert sorted(mpi_ops.__all__) == sorted(HOROVOD_MPI_OPS)
    for name in HOROVOD_MPI_OPS:
        assert getattr(mpi_ops, name) is getattr(hvd, name), name
