"""Horovod's build and feature queries and its timeline calls, answered for Troika.

Troika's CPU data planes, always built: shared memory within a host, gloo (TCP) between hosts
(docs/shm.md; TROIKA_TRANSPORT); no MPI, DDL, oneCCL or ROCm. Horovod's gloo_* queries answer
True: Troika is what Horovod's Gloo mode is, a launcher without MPI.
Its GPU data plane (CUDA + NCCL) is built when the build found them (docs/gpu.md):
``cuda_built()`` says whether this build has it and ``nccl_built()`` gives, as Horovod's, the
NCCL version code it was built with (e.g. 22809 for 2.28.9), or 0. The return types are
Horovod's: bool but for nccl_built's int; ``mpi_threads_supported()`` raises ValueError, as
Horovod's does where MPI is not enabled.

Timelines: Troika's coordinator writes one timeline per job, merging every rank onto its clock
(docs/timeline.md). It is asked at launch (``troikarun --timeline FILE``, or
``HOROVOD_TIMELINE=FILE`` in troikarun's environment, as with horovodrun) or by an administrator
on a running job (``troikactl timeline start JOB FILE`` / ``troikactl timeline stop JOB``), not
by a rank; ``start_timeline``/``stop_timeline`` say so with a TimelineNotAvailable error (both a
TroikaError, i.e. HorovodInternalError, and a NotImplementedError).
"""

import os

from troika import TroikaError

try:  # written by the build (python/CMakeLists.txt)
    from troika._build_info import GPU_PLANE_BUILT as _GPU_PLANE_BUILT
    from troika._build_info import NCCL_VERSION as _NCCL_VERSION
except ImportError:  # pragma: no cover - a tree without the generated file
    _GPU_PLANE_BUILT = _NCCL_VERSION = None


class TimelineNotAvailable(TroikaError, NotImplementedError):
    """start_timeline/stop_timeline from a rank: Troika's timelines are started and stopped on
    the coordinator with troikactl."""

    def __init__(self, message):
        super().__init__("UNIMPLEMENTED: " + message)
        self.code = "UNIMPLEMENTED"
        self.message = message


def _timeline_error(call):
    job = os.environ.get("TROIKA_JOB") or "JOB"
    return TimelineNotAvailable(
        "%s: a rank cannot start or stop a timeline in Troika; the coordinator writes the "
        "job's timeline (every rank on one clock): ask for it at launch with `troikarun "
        "--timeline FILE` (or HOROVOD_TIMELINE=FILE, as with horovodrun), or on a running job "
        "with `troikactl timeline start %s FILE` and `troikactl timeline stop %s` "
        "(docs/timeline.md)" % (call, job, job))


def start_timeline(file_path, mark_cycles=False):
    """Not available from a rank: raises TimelineNotAvailable naming the troikactl command."""
    raise _timeline_error("start_timeline(%r)" % (file_path,))


def stop_timeline():
    """Not available from a rank: raises TimelineNotAvailable naming the troikactl command."""
    raise _timeline_error("stop_timeline()")


def _built(value):
    if value is None:
        raise TroikaError("troika/_build_info.py is missing: this troika package was not made "
                          "by Troika's build, so whether its GPU data plane is built is unknown")
    return value


def gloo_built():
    """True: gloo (TCP) is built, Troika's CPU data plane between hosts."""
    return True


def gloo_enabled():
    """True: jobs run without MPI, as Horovod's Gloo mode (host tensors move through shared
    memory within a host and gloo between hosts: docs/shm.md)."""
    return True


def mpi_built():
    return False


def mpi_enabled():
    return False


def mpi_threads_supported():
    """Raises ValueError, as Horovod's does where MPI is not enabled (Troika has no MPI)."""
    raise ValueError("Horovod MPI is not enabled; Troika has no MPI data plane (its CPU data "
                     "plane is gloo: gloo_enabled())")


def nccl_built():
    """The NCCL version code this build's GPU data plane was built with (e.g. 22809 for
    2.28.9), as Horovod's; 0 without the GPU data plane."""
    return int(_built(_NCCL_VERSION))


def cuda_built():
    """True if this build has the GPU data plane (CUDA + NCCL)."""
    return bool(_built(_GPU_PLANE_BUILT))


def rocm_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False
