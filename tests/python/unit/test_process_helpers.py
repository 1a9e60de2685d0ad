"""tests/python/process_helpers.py, which the elastic tests and bench/elastic_recovery.py run
jobs with (run_unit_tests.sh, one process; tests/python on PYTHONPATH)."""

import os
import subprocess
import sys
import time

import pytest

from process_helpers import (WaitFailed, agent_command, parent_of, read, start, stop, wait_for,
                             wait_or_kill)


def session_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_read_gives_the_text_or_nothing_for_a_missing_file(tmp_path):
    assert read(str(tmp_path / "missing")) == ""
    (tmp_path / "f").write_text("12\n")
    assert read(str(tmp_path / "f")) == "12\n"


def test_parent_of_reads_proc():
    assert parent_of(os.getpid()) == os.getppid()


def test_wait_for_returns_the_first_true_value():
    values = iter([None, "", "pid"])
    assert wait_for(lambda: next(values), 5, "a pid", interval=0) == "pid"


def test_wait_for_gives_up_after_the_timeout_naming_what_it_waited_for():
    began = time.time()
    with pytest.raises(WaitFailed, match="timed out waiting for the ranks"):
        wait_for(lambda: False, 0.1, "the ranks", interval=0.01)
    assert time.time() - began < 5


def test_wait_for_gives_up_when_the_process_watched_exits():
    p = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    p.wait()
    with pytest.raises(WaitFailed, match=r"exited \(code 3\) while waiting for the ranks"):
        wait_for(lambda: False, 60, "the ranks", p)


def test_start_writes_the_output_to_files_in_a_session_of_its_own(tmp_path):
    out, err = str(tmp_path / "out"), str(tmp_path / "err")
    p = start([sys.executable, "-c", "import os, sys; print(os.getsid(0) == os.getpid()); "
               "print('e', file=sys.stderr)"], out, err)
    assert p.wait(timeout=60) == 0
    assert (read(out), read(err)) == ("True\n", "e\n")
    p = start("echo $((1 + 2))", out, err, shell=True)
    assert p.wait(timeout=60) == 0 and read(out) == "3\n"


def test_stop_ends_the_whole_session(tmp_path):
    # A shell that ignores SIGTERM, with a child: SIGKILL after the grace period reaches both.
    up = tmp_path / "up"  # written once the shell ignores SIGTERM and its child runs
    p = start("trap '' TERM; sleep 60 & : > %s; sleep 60; wait" % up, str(tmp_path / "o"),
              str(tmp_path / "e"), shell=True)
    wait_for(up.exists, 60, "the shell to start its child", p)
    stop(p, grace=0.5)
    assert p.returncode is not None
    wait_for(lambda: not session_alive(p.pid), 10, "the session to end")


def test_wait_or_kill_gives_the_exit_code_or_none_after_killing(tmp_path):
    p = start([sys.executable, "-c", "raise SystemExit(4)"], str(tmp_path / "o"),
              str(tmp_path / "e"))
    assert wait_or_kill(p, 60) == 4
    p = start(["sleep", "60"], str(tmp_path / "o"), str(tmp_path / "e"))
    assert wait_or_kill(p, 0.1) is None
    assert p.returncode is not None


STDERR = """troikarun: job 'troikarun-7' takes up to 4 ranks; to add 2 more on this machine:
  TROIKA_JOB_TOKEN=t /b/troika-agent --job=troikarun-7 -- python3 train.py
W1127 job.cc:1] something else
"""


def test_agent_command_is_the_line_after_troikaruns_hint():
    command = "TROIKA_JOB_TOKEN=t /b/troika-agent --job=troikarun-7 -- python3 train.py"
    assert agent_command(STDERR) == command
    assert agent_command(STDERR, 2) == command
    assert agent_command(STDERR, 1) is None
    assert agent_command("troikarun: started\n") is None
