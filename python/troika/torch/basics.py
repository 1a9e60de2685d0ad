"""Horovod's build and feature queries and its timeline calls, answered for Troika.

Troika has one CPU data plane, gloo (TCP), always built and used; no MPI, DDL, oneCCL or ROCm.
Its GPU data plane (CUDA + NCCL) is built when the build found them (docs/gpu.md):
``nccl_built()`` and ``cuda_built()`` say whether this build has it.

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
except ImportError:  # pragma: no cover - a tree without the generated file
    _GPU_PLANE_BUILT = None


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


def _gpu_plane_built():
    if _GPU_PLANE_BUILT is None:
        raise TroikaError("troika/_build_info.py is missing: this troika package was not made "
                          "by Troika's build, so whether its GPU data plane is built is unknown")
    return bool(_GPU_PLANE_BUILT)


def gloo_built():
    """True: gloo (TCP) is Troika's CPU data plane."""
    return True


def gloo_enabled():
    """True: every job uses gloo for host tensors."""
    return True


def mpi_built():
    return False


def mpi_enabled():
    return False


def mpi_threads_supported():
    return False


def nccl_built():
    """True if this build has the GPU data plane (CUDA + NCCL)."""
    return _gpu_plane_built()


def cuda_built():
    """True if this build has the GPU data plane (CUDA + NCCL)."""
    return _gpu_plane_built()


def rocm_built():
    return False


def ddl_built():
    return False


def ccl_built():
    return False
