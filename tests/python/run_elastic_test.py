#!/usr/bin/env python3
"""hvd.elastic from Python as users run it (docs/elastic.md): `troikarun -np 4 --nproc-per-node
2 --min-np 2 -- python3 examples/pytorch/elastic_train.py`, and SIGKILL mid-training of

  - rank 2: ranks 0, 1, 3 reset within 5 s of the kill (HorovodInternalError caught by
    hvd.elastic.run), lose at most the commit interval, finish as 3 ranks with identical
    weights, and troikarun exits 0;
  - the agent of ranks 2-3: ranks 0-1 go on alone the same way;
  - rank 1 of a job of 2 with --min-np 2: the job aborts saying the minimum was not met;

  - rank 2, and rank 3 as it restores its commit (--fail-at-restore 3), while ranks 0-1
    attach generation 2: they follow the second change and finish as 2 ranks;
  - rank 2, and rank 3 in its reset callback (--fail-at-reset 3), while ranks 0-1 sync rank
    0's state in generation 2: their broadcasts fail with the change, and they go on as
    generation 3 (nothing of generation 2 holds a name there: issue 46) and finish as 2 ranks;

and, in a job of 2 ranks with --max-np 4, runs the troika-agent command troikarun prints for
adding ranks once the job trains: at the next commit both ranks raise HostsUpdatedInterrupt
(nothing lost), the job goes on with 4 ranks, and all four finish with identical weights;
the same with an agent whose rank command does not exist (troikarun --attach_timeout 3s):
it never attaches, the grown generation ends without it at the timeout, and ranks 0-1
finish as 2;
with --max-restarts 1, rank 2 killed comes back (rank 3 of 4) and all four finish identical;
then, in a job of 2 ranks on 2 agents, five rounds of an agent of 1 rank joining (the printed
command) and its rank killed: ten changes, after which the 2 ranks finish identical, and
troikarun (its coordinator), rank 0 and its agent hold no more threads (gRPC's own pools
aside) or descriptors than after the first round.

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

from process_helpers import (WaitFailed, agent_command, kill, parent_of, read, start, wait_for,
                             wait_or_kill)

COMMIT_EVERY = 5


def wait_until_training(job, d, ranks, err_path):
    """Waits until each of `ranks` wrote its pid file in `d` (it trains); AssertionError with
    troikarun's log (the job killed) if the job exits first or 120 s pass."""
    try:
        wait_for(lambda: all(read(os.path.join(d, "pid.%d" % r)).strip() for r in ranks), 120,
                 "the ranks' pid files", job)
    except WaitFailed:
        kill(job)
        raise AssertionError("the ranks did not start training:\n" + read(err_path)) from None


def run_job(troikarun, python, script, np, victim, epochs=3, extra=(), script_args=()):
    """Runs the job (`extra`: troikarun's options, `script_args`: the script's), SIGKILLs what
    `victim(dir)` returns once rank 3 (or the last rank) has trained a few batches; returns
    (exit code, stdout, stderr, kill time in unix ms)."""
    with tempfile.TemporaryDirectory(prefix="troika-elastic-py-") as d:
        out_path, err_path = os.path.join(d, "stdout"), os.path.join(d, "stderr")
        job = start([troikarun, "-np", str(np), "--nproc-per-node", "2", "--min-np", "2", *extra,
                     "--", python, script, "--pid-dir", d, "--epochs", str(epochs),
                     "--commit-every", str(COMMIT_EVERY), *script_args], out_path, err_path)
        wait_until_training(job, d, [np - 1], err_path)
        time.sleep(0.5)  # mid-training
        killed_at = time.time() * 1000
        os.kill(victim(d), signal.SIGKILL)
        code = wait_or_kill(job, 180)
        return code, read(out_path), read(err_path), killed_at


def grow_job(troikarun, python, script, epochs=4, extra=(), broken_agent=False):
    """troikarun -np 2 --max-np 4 (and `extra`), then the agent command it prints, run once
    rank 1 trains (`broken_agent`: with a rank command that does not exist); returns
    (troikarun's exit code, the agent's, all ranks' stdout, troikarun's stderr)."""
    with tempfile.TemporaryDirectory(prefix="troika-elastic-py-") as d:
        out_path, err_path = os.path.join(d, "stdout"), os.path.join(d, "stderr")
        job = start([troikarun, "-np", "2", "--min-np", "2", "--max-np", "4", *extra, "--",
                     python, script, "--pid-dir", d, "--epochs", str(epochs),
                     "--commit-every", str(COMMIT_EVERY)], out_path, err_path)
        wait_until_training(job, d, [1], err_path)
        command = agent_command(read(err_path), 2)
        if command is None:
            kill(job)
            return None, None, "", read(err_path)
        if broken_agent:
            command = command.split(" -- ", 1)[0] + " -- " + os.path.join(d, "no-such-command")
        agent = start(command, os.path.join(d, "agent.out"), os.path.join(d, "agent.err"),
                      shell=True)
        codes = [wait_or_kill(p, 180) for p in (job, agent)]
        return (codes[0], codes[1], read(out_path) + read(os.path.join(d, "agent.out")),
                read(err_path) + read(os.path.join(d, "agent.err")))


def check_finished(out, ranks, size):
    """Failures unless exactly `ranks` (by their [prefix]) finished, as `size` ranks, with the
    same weights."""
    done = re.findall(r"\[(\d)\] done epochs \d+ size (\d+) weights ([0-9a-f]+)", out)
    failures = []
    if sorted(int(r) for r, _, _ in done) != sorted(ranks):
        failures.append("ranks that finished: %s, expected %s" % (
            sorted(int(r) for r, _, _ in done), sorted(ranks)))
    if any(int(s) != size for _, s, _ in done):
        failures.append("a rank finished with a size other than %d" % size)
    if len({w for _, _, w in done}) != 1:
        failures.append("the weights differ: %s" % (done,))
    return failures


# gRPC's own pools (names as /proc shows them, 15 characters), which grow and shrink with load
# on their own: a thread more there after the rounds is no leak of ours. A leaked channel or
# server still shows in the descriptors.
GRPC_POOLS = {"default-executo", "event_engine", "grpc_global_tim", "resolver-execut",
              "timer_manager", "nexting_thread"}


def holdings(pid):
    """(threads other than gRPC's pools, open descriptors, resident KiB) of a process."""
    rss = re.search(r"VmRSS:\s+(\d+)", read("/proc/%d/status" % pid))
    try:
        names = [read("/proc/%d/task/%s/comm" % (pid, t)).strip()
                 for t in os.listdir("/proc/%d/task" % pid)]
        descriptors = len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return None  # gone
    if not rss:
        return None  # gone (a zombie has no memory)
    threads = sum(1 for name in names if name and name not in GRPC_POOLS)
    return threads, descriptors, int(rss.group(1))


def within(predicate, timeout, job):
    """True once `predicate` is; False if `timeout` seconds pass or the job exits first."""
    try:
        wait_for(predicate, timeout, "", job)
        return True
    except WaitFailed:
        return False


def joins_and_losses(troikarun, python, script, rounds=5):
    """troikarun -np 2 --nproc-per-node 1 --min-np 1 --max-np 3; `rounds` times: the printed
    agent command (1 rank joins), then SIGKILL of that rank. Returns failures."""
    failures = []
    with tempfile.TemporaryDirectory(prefix="troika-elastic-py-") as d:
        out_path, err_path = os.path.join(d, "stdout"), os.path.join(d, "stderr")
        job = start([troikarun, "-np", "2", "--nproc-per-node", "1", "--min-np", "1",
                     "--max-np", "3", "--", python, script, "--pid-dir", d, "--epochs", "1",
                     "--num-samples", "2048", "--commit-every", "2",
                     "--min-generation", str(2 * rounds + 1)], out_path, err_path)
        try:
            if not within(lambda: read(os.path.join(d, "pid.1")).strip() and
                          read(os.path.join(d, "pid.0")).strip(), 120, job):
                return ["the ranks did not start training:\n" + read(err_path)]
            rank0 = int(read(os.path.join(d, "pid.0")))
            watched = {"troikarun": job.pid, "agent of rank 0": parent_of(rank0), "rank 0": rank0}
            command = agent_command(read(err_path), 1)
            if command is None:
                return ["troikarun printed no command to add ranks:\n" + read(err_path)]
            first = last = None
            generation = 1
            for r in range(1, rounds + 1):
                pid_file = os.path.join(d, "pid.2")
                if os.path.exists(pid_file):
                    os.unlink(pid_file)
                agent = start(command, os.path.join(d, "agent-%d.out" % r),
                              os.path.join(d, "agent-%d.err" % r), shell=True)
                generation += 1
                if not within(lambda: read(pid_file).strip(), 120, job):  # the new rank trains
                    return ["round %d: the joining rank did not train:\n%s%s" % (
                        r, read(err_path), read(os.path.join(d, "agent-%d.err" % r)))]
                # What the job holds with 3 ranks, each round (the last round's generation ends
                # the training).
                now = {who: holdings(pid) for who, pid in watched.items()}
                gone = [who for who, held in now.items() if held is None]
                if gone:
                    return ["round %d: %s exited:\n%s%s" % (r, ", ".join(gone), read(out_path),
                                                            read(err_path))]
                first = first or now
                last = now
                os.kill(int(read(pid_file)), signal.SIGKILL)
                generation += 1
                if wait_or_kill(agent, 60) is None:
                    return ["round %d: the agent of the killed rank did not exit" % r]
                marker = "the job goes on with 2 ranks as generation %d" % generation
                if not within(lambda: marker in read(err_path), 60, job):
                    return ["round %d: no generation %d:\n%s" % (r, generation,
                                                                 read(err_path))]
            code = job.wait(timeout=180)
        finally:
            if job.poll() is None:
                kill(job)
        out = read(out_path)
        if code != 0:
            failures.append("troikarun exited %s:\n%s" % (code, read(err_path)))
        failures += check_finished(out, [0, 1], 2)
        resets = re.findall(r"\[0\] reset: rank 0 of (\d+)", out)
        if len(resets) != 2 * rounds:
            failures.append("rank 0 reset %d times, expected %d" % (len(resets), 2 * rounds))
        for who in watched:
            (t0, f0, m0), (t1, f1, m1) = first[who], last[who]
            print("%s: %d -> %d threads, %d -> %d descriptors, %d -> %d KiB" % (
                who, t0, t1, f0, f1, m0, m1))
            if t1 > t0 + 2 or f1 > f0 + 2:
                failures.append("%s grew from %d to %d threads, %d to %d descriptors" % (
                    who, t0, t1, f0, f1))
    return failures


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
    return failures + check_finished(out, [0, 1, 2, 3], 4)


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
    return failures + check_finished(out, survivors, size)


def named(scenario, failures, out, err):
    """`failures` of `scenario`, each prefixed with its name; prints the scenario's output if
    there are any."""
    if failures:
        print(out, err)
    return ["%s: %s" % (scenario, failure) for failure in failures]


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
    failures += named("rank killed", f, out, err)

    code, out, err, t0 = run_job(troikarun, python, script, 4,
                                 lambda d: parent_of(int(read(os.path.join(d, "pid.3")))))
    f = check_survivors(out, t0, [0, 1], 2)
    if code != 0:
        f.append("troikarun exited %s" % code)
    failures += named("agent killed", f, out, err)

    code, out, err, _ = run_job(troikarun, python, script, 2,
                                lambda d: int(read(os.path.join(d, "pid.1"))), epochs=1000)
    f = []
    if code in (0, None):
        f.append("troikarun exited %s" % code)
    if "1 rank remains, below the job's minimum of 2" not in err:
        f.append("no 'below the job's minimum' in troikarun's log")
    if "HorovodInternalError" not in err and "TroikaError: ABORTED: job '" not in err:
        f.append("rank 0 did not raise the abort")
    failures += named("below the minimum", f, out, err)

    code, agent_code, out, err = grow_job(troikarun, python, script)
    f = check_grown(out)
    if code != 0 or agent_code != 0:
        f.append("troikarun exited %s, the added agent %s" % (code, agent_code))
    if "2 ranks on" not in err or "joined at a commit; the job goes on with 4 ranks" not in err:
        f.append("the log does not say that 2 ranks joined at a commit")
    failures += named("grown", f, out, err)

    # An added agent whose command cannot start: admitted at a commit, it exits 127 without
    # attaching; at the attach timeout the grown generation ends without its ranks, and ranks
    # 0-1, attaching it from hvd.elastic.run's next hvd.init(), follow the change to generation
    # 3 and finish as 2 ranks.
    code, agent_code, out, err = grow_job(troikarun, python, script,
                                          extra=("--attach_timeout", "3s"), broken_agent=True)
    f = check_finished(out, [0, 1], 2)
    if code != 0 or agent_code != 127:
        f.append("troikarun exited %s, the added agent %s" % (code, agent_code))
    if "ranks 2-3 did not attach within 3s; the job goes on with 2 ranks as generation 3" \
            not in err:
        f.append("the log does not say that the grown generation ended without ranks 2-3")
    failures += named("added agent never attached", f, out, err)

    # Rank 2 is lost, and rank 3 as the others attach generation 2 (it exits as it restores its
    # commit): ranks 0 and 1, still attaching, follow the second change to generation 3.
    code, out, err, _ = run_job(troikarun, python, script, 4,
                                lambda d: int(read(os.path.join(d, "pid.2"))),
                                script_args=("--fail-at-restore", "3"))
    f = []
    if code != 0:
        f.append("troikarun exited %s" % code)
    f += check_finished(out, [0, 1], 2)
    if "[3] failing at restore" not in out:
        f.append("rank 3 did not fail as it restored")
    if "exited with code 1; the job goes on with 2 ranks as generation 3" not in err:
        f.append("the log does not say that rank 3's loss made generation 3")
    failures += named("second loss while attaching", f, out, err)

    # Rank 2 is lost, and rank 3 in its reset callback in generation 2, while ranks 0 and 1
    # sync rank 0's state (broadcast_parameters: its first handle raises the change, the rest
    # are never synchronized). They go on as generation 3, whose sync submits the same names,
    # and finish the epochs as 2 identical ranks (issue 46: every rank raised
    # DuplicateNameError there, which ended the job).
    code, out, err, _ = run_job(troikarun, python, script, 4,
                                lambda d: int(read(os.path.join(d, "pid.2"))),
                                script_args=("--fail-at-reset", "3"))
    f = []
    if code != 0:
        f.append("troikarun exited %s" % code)
    f += check_finished(out, [0, 1], 2)
    if re.findall(r"\[[01]\] done epochs (\d+)", out) != ["3", "3"]:
        f.append("ranks 0 and 1 did not both finish the 3 epochs")
    if "[3] killed at reset" not in out:
        f.append("rank 3 was not killed in its reset callback")
    for r in (0, 1):
        if not re.search(r"\[%d\] reset: rank %d of 2 " % (r, r), out):
            f.append("rank %d did not reset to generation 3 (rank %d of 2)" % (r, r))
    if "the job goes on with 2 ranks as generation 3" not in err:
        f.append("the log does not say that rank 3's loss made generation 3")
    if "DuplicateNameError" in out + err or "already in flight" in out + err:
        f.append("a name of generation 2 was still in flight in generation 3")
    failures += named("second loss while syncing", f, out, err)

    # --max-restarts: rank 2 is lost, then started again and admitted at a commit as rank 3.
    code, out, err, _ = run_job(troikarun, python, script, 4,
                                lambda d: int(read(os.path.join(d, "pid.2"))),
                                extra=("--max-restarts", "1"))
    f = []
    if code != 0:
        f.append("troikarun exited %s" % code)
    f += check_finished(out, [0, 1, 2, 3], 4)
    if "rank 2 of this node starts again as rank 3 of 4" not in err:
        f.append("the agent did not start rank 2 again")
    failures += named("restarted", f, out, err)

    f = joins_and_losses(troikarun, python, script)
    failures += ["joins and losses: " + x for x in f]

    for failure in failures:
        print("FAIL: " + failure)
    if not failures:
        print("PASS: a killed rank's and a killed agent's survivors went on and ended identical; "
              "a loss below the minimum aborted; a second loss while attaching or while "
              "syncing was followed; an added agent's ranks joined at a commit (and one "
              "that never attached was left out); a "
              "restarted rank rejoined; ten joins and losses in turn leaked nothing")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
