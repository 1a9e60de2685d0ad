"""troika._handles without a job: handles, poll and synchronize over fake native handles, and
the names held until synchronize (run_unit_tests.sh, one process)."""

import pytest

import troika
from troika import _handles
from troika._handles import NativeGroup, Pending


class FakeNative:
    """A native handle finished by hand: wait() raises `error` if set."""

    def __init__(self, done=False, error=None):
        self.done = done
        self.error = error
        self.waited = 0

    def poll(self):
        return self.done

    def wait(self):
        self.waited += 1
        if self.error is not None:
            raise self.error
        self.done = True


@pytest.fixture(autouse=True)
def empty_registry():
    _handles.shutdown()  # no job here: clears the registry and the generated names' counters
    yield
    _handles.shutdown()


def test_handles_are_new_numbers_and_synchronize_returns_the_result_once():
    a = _handles.register(Pending(FakeNative(), (), lambda: "a"))
    b = _handles.register(Pending(FakeNative(), (), lambda: "b"))
    assert a != b
    assert _handles.synchronize(b) == "b"
    assert _handles.synchronize(a) == "a"
    assert _handles.synchronize(a) is None  # already synchronized: None, as Horovod's


def test_poll_says_whether_finished_and_refuses_unknown_handles():
    native = FakeNative()
    h = _handles.register(Pending(native, (), lambda: None))
    assert _handles.poll(h) is False
    native.done = True
    assert _handles.poll(h) is True
    _handles.synchronize(h)
    with pytest.raises(ValueError, match="not created or has been cleared"):
        _handles.poll(h)
    with pytest.raises(ValueError):
        _handles.poll(12345678)


def test_a_name_is_taken_until_its_handle_is_synchronized():
    full, key = _handles.operation_name("allreduce", "grad", 0)
    assert (full, key) == ("allreduce.grad", (0, "allreduce.grad"))
    h = _handles.register(Pending(FakeNative(done=True), (), lambda: None, key))
    with pytest.raises(troika.DuplicateNameError) as e:
        _handles.operation_name("allreduce", "grad", 0)
    assert isinstance(e.value, ValueError) and isinstance(e.value, troika.TroikaError)
    assert e.value.code == "ALREADY_EXISTS"
    assert "'allreduce.grad' is already in flight" in e.value.message
    assert str(e.value) == "ALREADY_EXISTS: " + e.value.message
    # Another kind or another process set may use the name meanwhile.
    assert _handles.operation_name("allgather", "grad", 0)[0] == "allgather.grad"
    assert _handles.operation_name("allreduce", "grad", 1)[1] == (1, "allreduce.grad")
    _handles.synchronize(h)
    assert _handles.operation_name("allreduce", "grad", 0)[0] == "allreduce.grad"


def test_a_failed_operation_frees_its_handle_and_name():
    key = _handles.operation_name("broadcast", "x", 0)[1]
    finished = []
    h = _handles.register(Pending(FakeNative(error=troika.TroikaError("ABORTED: gone")), (),
                                  lambda: finished.append(1), key))
    with pytest.raises(troika.TroikaError, match="gone"):
        _handles.synchronize(h)
    assert finished == []  # no result is made after a failure
    assert _handles.synchronize(h) is None
    _handles.operation_name("broadcast", "x", 0)  # free again


def test_unnamed_operations_get_names_counted_per_process_set():
    assert _handles.operation_name("allgather", None, 0) == ("allgather.noname.1", None)
    assert _handles.operation_name("allreduce", None, 0) == ("allreduce.noname.2", None)
    assert _handles.operation_name("allreduce", None, 5) == ("allreduce.noname.1", None)


def test_shutdown_forgets_every_handle_and_name():
    key = _handles.operation_name("allreduce", "w", 0)[1]
    h = _handles.register(Pending(FakeNative(), (), lambda: None, key))
    _handles.shutdown()
    with pytest.raises(ValueError):
        _handles.poll(h)
    _handles.operation_name("allreduce", "w", 0)


class FakeContext:
    """The process's context in an elastic job, as enter_next_generation sees it: its shutdown
    records how many handles were still registered then, and raises the failure that ended
    the generation."""

    def __init__(self, rank):
        self.rank = rank
        self.registered_at_shutdown = None

    def shutdown(self):
        self.registered_at_shutdown = len(_handles._pending)
        raise troika.TroikaError("ABORTED: membership of job 'j' changed")


def test_a_generation_end_forgets_its_handles_and_names_once_the_core_shut_down():
    # Issue 46: a loss while the survivors synced (broadcast_parameters: the first handle raised,
    # the others were never synchronized) left the names taken, and the next generation's sync
    # raised DuplicateNameError on every rank, which no elastic loop recovers from.
    handles = []
    for name in ("bias", "weight"):
        key = _handles.operation_name("broadcast", "broadcast_parameters." + name, 0)[1]
        handles.append(_handles.register(Pending(FakeNative(), (), lambda: None, key)))
    ctx = troika._context = FakeContext(rank=2)
    try:
        assert troika.enter_next_generation({"next_rank": [0, -1, 1], "size": 2, "epoch": 2})
    finally:
        troika._context, troika._generation = None, None
    # Kept while the core shut down (it may still have used their buffers), forgotten after.
    assert ctx.registered_at_shutdown == 2
    for h in handles:
        with pytest.raises(ValueError, match="not created or has been cleared"):
            _handles.poll(h)
        assert _handles.synchronize(h) is None
    # The next generation submits them again.
    for name in ("bias", "weight"):
        _handles.operation_name("broadcast", "broadcast_parameters." + name, 0)


def test_a_handle_of_an_ended_generation_never_frees_a_name_of_the_next():
    # Waited for while the generation ends, and the next submits the same name meanwhile.
    name = ("broadcast", "w", 0)
    taken = []

    class EndsMeanwhile(FakeNative):
        def wait(self):
            troika.shutdown()  # the generation ends (no job here: only the hooks run)
            key = _handles.operation_name(*name)[1]
            taken.append(_handles.register(Pending(FakeNative(), (), lambda: None, key)))
            raise troika.TroikaError("ABORTED: membership of job 'j' changed")

    old = _handles.register(Pending(EndsMeanwhile(), (), lambda: None,
                                    _handles.operation_name(*name)[1]))
    with pytest.raises(troika.TroikaError, match="membership"):
        _handles.synchronize(old)
    with pytest.raises(troika.DuplicateNameError):  # still the next generation's
        _handles.operation_name(*name)
    _handles.synchronize(taken[0])
    _handles.operation_name(*name)


def test_pending_waits_before_making_its_result():
    native = FakeNative()
    assert Pending(native, (), lambda: native.waited).complete() == 1


def test_a_group_finishes_when_all_have_and_waits_for_all_before_raising_the_first_error():
    first, second = troika.TroikaError("first"), troika.TroikaError("second")
    natives = [FakeNative(error=first), FakeNative(done=True), FakeNative(error=second)]
    group = NativeGroup(natives)
    assert group.poll() is False
    with pytest.raises(troika.TroikaError) as e:
        group.wait()
    assert e.value is first
    assert [n.waited for n in natives] == [1, 1, 1]
    assert NativeGroup([FakeNative(done=True), FakeNative(done=True)]).poll() is True
    NativeGroup([]).wait()
