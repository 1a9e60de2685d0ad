"""Horovod's build and feature queries, is_homogeneous() and the timeline calls on Troika
(python/troika/_basics.py), with Horovod's return types. TROIKA_TEST_GPU_PLANE_BUILT (set
by ctest from the build's TROIKA_HAVE_CUDA) is what nccl_built()/cuda_built() must say, and
TROIKA_TEST_NCCL_VERSION the NCCL version code the build's nccl.h has (0 without)."""

import os

import pytest
import torch

import troika
import troika.torch as hvd


def test_data_planes():
    assert hvd.gloo_built() is True and hvd.gloo_enabled() is True
    for fn in (hvd.mpi_built, hvd.mpi_enabled, hvd.rocm_built, hvd.ddl_built, hvd.ccl_built):
        assert fn() is False, fn.__name__
    # Horovod's answer where MPI is not enabled.
    with pytest.raises(ValueError, match="MPI is not enabled"):
        hvd.mpi_threads_supported()


def test_gpu_plane_as_built():
    want = os.environ["TROIKA_TEST_GPU_PLANE_BUILT"].upper() in ("ON", "TRUE", "1")
    assert hvd.cuda_built() is want
    # As Horovod's: the NCCL version code (an int, e.g. 22809), 0 without NCCL. Horovod's own
    # code reads `nccl_built() < 2700` as "NCCL older than 2.7".
    version = hvd.nccl_built()
    assert type(version) is int
    assert version == int(os.environ["TROIKA_TEST_NCCL_VERSION"])
    assert (version > 0) is want
    if want:
        assert version >= 2700


def test_init_takes_horovods_arguments():
    # init(comm=None, process_sets=None) as Horovod's; the job is joined already (conftest), so
    # these return at once. An MPI communicator or rank list is refused: Troika has no MPI.
    hvd.init()
    hvd.init(comm=[])
    hvd.init(process_sets="dynamic")
    with pytest.raises(ValueError, match="no MPI"):
        hvd.init([0])
    with pytest.raises(ValueError, match="dynamic"):
        hvd.init(process_sets="static")
    assert hvd.is_initialized()


def test_version():
    assert troika.__version__ == os.environ["TROIKA_TEST_VERSION"]


def test_is_homogeneous_on_one_host():
    # troikarun runs every rank here: one host, so homogeneous (uneven hosts:
    # run_hosts_test.py).
    assert hvd.local_size() == hvd.size()
    assert hvd.is_homogeneous() is True
    assert troika.is_homogeneous() is True


@pytest.mark.parametrize("call", [lambda: hvd.start_timeline("/tmp/timeline.json"),
                                  lambda: hvd.start_timeline("/tmp/t.json", mark_cycles=True),
                                  hvd.stop_timeline], ids=["start", "start_mark_cycles", "stop"])
def test_timeline_from_a_rank_says_to_use_troikactl(call):
    with pytest.raises(hvd.HorovodInternalError) as e:
        call()
    err = e.value
    assert isinstance(err, troika.TroikaError) and isinstance(err, NotImplementedError)
    assert isinstance(err, hvd.TimelineNotAvailable)
    assert err.code == "UNIMPLEMENTED"
    assert str(err) == "UNIMPLEMENTED: " + err.message
    job = os.environ["TROIKA_JOB"]
    assert "troikactl timeline start %s FILE" % job in err.message
    assert "troikactl timeline stop %s" % job in err.message
    # Nothing was submitted: the job goes on.
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum),
                       torch.full([2], float(hvd.size())))
