#!/usr/bin/env python3
"""hvd.elastic from Python as users run it (docs/elastic.md): `troikarun -np 4 --nproc-per-node
2 --min-np 2 -- python3 examples/pytorch/elastic_train.py`, and SIGKILL mid-training of

  - rank 2: ranks 0, 1, 3 reset within 5 s of the kill (HorovodInternalError caught by
    hvd.elastic.run), lose at most the commit interval, finish as 3 ranks with identical
    weights, and troikarun exits 0;
  - the agent of ranks 2-3: ranks 0-1 go on alone the same way;
  - rank 1 of a job of 2 with --min-np 2: the job aborts saying the minimum was not met;

and, in a job of 2 ranks with --max-np 4, runs the troika-agent command troikarun prints for
adding ranks once the job trains: at the next commit both ranks raise HostsUpdatedInterrupt
(nothing lost), the job goes on with 4 ranks, and all four finish with identical weights.

    run_elastic_test.py TROIKARUN PYTHON EXAMPLE_SCRIPT

Exit 77 (skipped) if PYTHON cannot import torch.
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time

COMMIT_EVERY = 5


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def parent_of(pid):
    stat = read("/proc/%d/stat" % pid)
    return int(stat[stat.rfind(")") + 1:].split()[1])


def run_job(troikarun, python, script, np, kill, epochs=3):
    """Runs the job, SIGKILLs what `kill(dir)` returns once rank 3 (or the last rank) has
    trained a few batches; returns (exit code, stdout, stderr, kill time in unix ms)."""
    with tempfile.TemporaryDirectory(prefix="troika-elastic-py-") as d:
        out_path, err_path = os.path.join(d, "stdout"), os.path.join(d, "stderr")
        with open(out_path, "w") as out, open(err_path, "w") as err:
            job = subprocess.Popen(
                [troikarun, "-np", str(np), "--nproc-per-node", "2", "--min-np", "2", "--",
                 python, script, "--pid-dir", d, "--epochs", str(epochs),
                 "--commit-every", str(COMMIT_EVERY)],
                stdout=out, stderr=err, start_new_session=True)
        deadline = time.time() + 120
        while not read(os.path.join(d, "pid.%d" % (np - 1))).strip():
            if time.time() > deadline or job.poll() is not None:
                job.kill()
                raise AssertionError("the ranks did not start training:\n" + read(err_path))
            time.sleep(0.02)
        time.sleep(0.5)  # mid-training
        killed_at = time.time() * 1000
        os.kill(kill(d), signal.SIGKILL)
        try:
            code = job.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
            code = None
        return code, read(out_path), read(err_path), killed_at


def grow_job(troikarun, python, script, epochs=4):
    """troikarun -np 2 --max-np 4, then the agent command it prints, run once rank 1 trains;
    returns (troikarun's exit code, the agent's, all ranks' stdout, troikarun's stderr)."""
    with tempfile.TemporaryDirectory(prefix="troika-elastic-py-") as d:
        out_path, err_path = os.path.join(d, "stdout"), os.path.join(d, "stderr")
        with open(out_path, "w") as out, open(err_path, "w") as err:
            job = subprocess.Popen(
                [troikarun, "-np", "2", "--min-np", "2", "--max-np", "4", "--",
                 python, script, "--pid-dir", d, "--epochs", str(epochs),
                 "--commit-every", str(COMMIT_EVERY)],
                stdout=out, stderr=err, start_new_session=True)
        deadline = time.time() + 120
        while not read(os.path.join(d, "pid.1")).strip():
            if time.time() > deadline or job.poll() is not None:
                job.kill()
                raise AssertionError("the ranks did not start training:\n" + read(err_path))
            time.sleep(0.02)
        lines = read(err_path).splitlines()
        hint = [i for i, line in enumerate(lines) if "to add 2 more on this machine" in line]
        if not hint:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
            return None, None, "", read(err_path)
        with open(os.path.join(d, "agent.out"), "w") as out, \
                open(os.path.join(d, "agent.err"), "w") as err:
            agent = subprocess.Popen(lines[hint[0] + 1].strip(), shell=True, stdout=out,
                                     stderr=err, start_new_session=True)
        codes = []
        for p in (job, agent):
            try:
                codes.append(p.wait(timeout=180))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                codes.append(None)
        return (codes[0], codes[1], read(out_path) + read(os.path.join(d, "agent.out")),
                read(err_path) + read(os.path.join(d, "agent.err")))


def check_grown(out):
    failures = []
    resets = re.findall(r"\[(\d)\] reset: rank (\d+) of (\d+) at \d+ \(restored to epoch "
                        r"\d+ batch \d+, (\d+) batches in all; it had trained (\d+)\)", out)
    if sorted(int(r) for r, _, _, _, _ in resets) != [0, 1]:
        failures.append("ranks that reset: %s, expected 0 and 1 (once each)" % resets)
    for member, rank, size, to, frm in resets:
        if (member, size) != (rank, "4") or to != frm:
            failures.append("rank %s reset as rank %s of %s, from batch %s to %s: expected "
                            "the same rank of 4 and nothing lost" % (member, rank, size, frm, to))
    done = re.findall(r"\[(\d)\] done epochs \d+ size (\d+) weights ([0-9a-f]+)", out)
    if sorted(int(r) for r, _, _ in done) != [0, 1, 2, 3]:
        failures.append("ranks that finished: %s, expected 0-3" % [r for r, _, _ in done])
    if any(s != "4" for _, s, _ in done):
        failures.append("a rank finished with a size other than 4")
    if len({w for _, _, w in done}) != 1:
        failures.append("the weights differ: %s" % done)
    return failures


def check_survivors(out, killed_at, survivors, size):
    failures = []
    resets = {}
    for m in re.finditer(r"\[(\d)\] reset: rank \d+ of (\d+) at (\d+) \(restored to epoch "
                         r"\d+ batch \d+, (\d+) batches in all; it had trained (\d+)\)", out):
        rank, new_size, at, to, frm = (int(m.group(i)) for i in (1, 2, 3, 4, 5))
        resets[rank] = at
        if new_size != size:
            failures.append("rank %d reset to %d ranks, expected %d" % (rank, new_size, size))
        if at - killed_at > 5000:
            failures.append("rank %d reset %d ms after the kill (limit 5000)" % (rank,
                                                                              at - killed_at))
        if not 0 <= frm - to <= COMMIT_EVERY:
            failures.append("rank %d lost %d batches (commit interval %d)" % (rank, frm - to,
                                                                             COMMIT_EVERY))
    if set(resets) != set(survivors):
        failures.append("ranks %s reset, expected %s" % (sorted(resets), sorted(survivors)))
    done = re.findall(r"\[(\d)\] done epochs (\d+) size (\d+) weights ([0-9a-f]+)", out)
    if sorted(int(r) for r, _, _, _ in done) != sorted(survivors):
        failures.append("ranks that finished: %s, expected %s" % (
            sorted(int(r) for r, _, _, _ in done), sorted(survivors)))
    if any(int(s) != size for _, _, s, _ in done):
        failures.append("a rank finished with a size other than %d" % size)
    if len({w for _, _, _, w in done}) != 1:
        failures.append("the survivors' weights differ: %s" % done)
    return failures


def main():
    troikarun, python, script = sys.argv[1:4]
    if subprocess.call([python, "-c", "import torch"], stderr=subprocess.DEVNULL) != 0:
        print("Python elastic test skipped: %s cannot import torch (Debian: python3-torch)"
              % python)
        return 77
    failures = []

    code, out, err, t0 = run_job(troikarun, python, script, 4,
                                 lambda d: int(read(os.path.join(d, "pid.2"))))
    f = check_survivors(out, t0, [0, 1, 3], 3)
    if code != 0:
        f.append("troikarun exited %s" % code)
    if "rank 2 on" not in err or "the job goes on with 3 ranks as generation 2" not in err:
        f.append("troikarun's log does not name rank 2 and the change")
    failures += ["rank killed: " + x for x in f]
    if f:
        print(out, err)

    code, out, err, t0 = run_job(troikarun, python, script, 4,
                                 lambda d: parent_of(int(read(os.path.join(d, "pid.3")))))
    f = check_survivors(out, t0, [0, 1], 2)
    if code != 0:
        f.append("troikarun exited %s" % code)
    failures += ["agent killed: " + x for x in f]
    if f:
        print(out, err)

    code, out, err, _ = run_job(troikarun, python, script, 2,
                                lambda d: int(read(os.path.join(d, "pid.1"))), epochs=1000)
    f = []
    if code in (0, None):
        f.append("troikarun exited %s" % code)
    if "1 rank remains, below the job's minimum of 2" not in err:
        f.append("no 'below the job's minimum' in troikarun's log")
    if "HorovodInternalError" not in err and "TroikaError: ABORTED: job '" not in err:
        f.append("rank 0 did not raise the abort")
    failures += ["below the minimum: " + x for x in f]
    if f:
        print(out, err)

    code, agent_code, out, err = grow_job(troikarun, python, script)
    f = check_grown(out)
    if code != 0 or agent_code != 0:
        f.append("troikarun exited %s, the added agent %s" % (code, agent_code))
    if "2 ranks on" not in err or "joined at a commit; the job goes on with 4 ranks" not in err:
        f.append("the log does not say that 2 ranks joined at a commit")
    failures += ["grown: " + x for x in f]
    if f:
        print(out, err)

    for failure in failures:
        print("FAIL: " + failure)
    if not failures:
        print("PASS: a killed rank's and a killed agent's survivors went on and ended identical; "
              "a loss below the minimum aborted; an added agent's ranks joined at a commit")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
