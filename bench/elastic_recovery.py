#!/usr/bin/env python3
"""Elastic recovery time (docs/elastic.md): how long an elastic job takes from losing a rank
(SIGKILL of the rank, or of its node's whole troika-agent with --what agent) to the first
completed step of its next generation, on this machine; and (--what join) from starting a
troika-agent for a running job to the first completed step that includes its ranks.

Each run: `troikarun -np 4 --nproc-per-node 2 --min-np 2 -- troika-example-elastic` (a linear
model of 1024 weights, a 10 ms step, a commit every 10 steps); once the ranks have trained for
a second, rank 2 (or the agent of ranks 2-3) gets SIGKILL; the survivors print the unix time at
which they finished the first step of generation 2, and the recovery time is the latest of
them minus the time of the kill. --what join: `troikarun -np 2 --min-np 2 --max-np 4` of the
same program; after a second of training, the troika-agent command troikarun prints for adding
2 ranks is started; the figure is the later of the new ranks' first finished step minus the
agent's start (its registration, the wait for the next commit, the new generation's attach,
the new ranks' start and sync, one step). Prints each run and the median.

    python3 bench/elastic_recovery.py --repeat 5 [--what rank|agent|join] [--build build]
"""

import argparse
import os
import re
import signal
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from process_helpers import agent_command, parent_of, read, start, stop, wait_for  # noqa: E402


def join_run(args, run_dir):
    out_path, err_path = os.path.join(run_dir, "stdout"), os.path.join(run_dir, "stderr")
    example = [os.path.join(args.build, "examples", "troika-example-elastic"),
               "--pid_dir=" + run_dir, "--steps=1000000", "--step_ms=10", "--commit_every=10"]
    job = start([os.path.join(args.build, "agent", "troikarun"), "-np", "2", "--min-np", "2",
                 "--max-np", "4", "--"] + example, out_path, err_path)
    agent = None
    try:
        wait_for(lambda: read(os.path.join(run_dir, "pid.1")).strip(), 60, "rank 1's pid",
                 interval=0.01)
        command = agent_command(read(err_path))
        if command is None:
            raise RuntimeError("troikarun printed no command to add ranks:\n" + read(err_path))
        time.sleep(1.0)  # training
        agent_out = os.path.join(run_dir, "agent.out")
        started_at = time.time() * 1000
        agent = start(command, agent_out, os.path.join(run_dir, "agent.err"), shell=True)
        pattern = re.compile(r"\[[23]\] generation 2 first step at (\d+)")
        times = wait_for(lambda: (lambda found: found if len(found) == 2 else None)(
            pattern.findall(read(agent_out))), 60, "the new ranks' first step", interval=0.01)
        return max(int(t) for t in times) - started_at
    finally:
        for p in (job, agent):
            if p is not None:
                stop(p)


def one_run(args, run_dir):
    out_path = os.path.join(run_dir, "stdout")
    job = start([os.path.join(args.build, "agent", "troikarun"), "-np", "4", "--nproc-per-node",
                 "2", "--min-np", "2", "--",
                 os.path.join(args.build, "examples", "troika-example-elastic"),
                 "--pid_dir=" + run_dir, "--steps=1000000", "--step_ms=10", "--commit_every=10"],
                out_path, os.path.join(run_dir, "stderr"))
    try:
        pid = int(wait_for(lambda: read(os.path.join(run_dir, "pid.3")).strip(), 60,
                           "rank 3's pid", interval=0.01))
        survivors = 3
        victim = int(read(os.path.join(run_dir, "pid.2")).strip())
        if args.what == "agent":
            victim, survivors = parent_of(pid), 2
        time.sleep(1.0)  # training
        killed_at = time.time() * 1000
        os.kill(victim, signal.SIGKILL)
        pattern = re.compile(r"\[\d\] generation 2 first step at (\d+)")
        times = wait_for(lambda: (lambda found: found if len(found) == survivors else None)(
            pattern.findall(read(out_path))), 60, "the survivors' first step of generation 2",
            interval=0.01)
        return max(int(t) for t in times) - killed_at
    finally:
        stop(job)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--what", choices=["rank", "agent", "join"], default="rank",
                   help="what gets SIGKILL: rank 2, or the agent of ranks 2-3; or an agent "
                   "of 2 ranks joins a job of 2")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = p.parse_args()
    if args.what == "join":
        print("# elastic growth: an agent of 2 ranks started for a running job of 2 (min 2, "
              "max 4) to its ranks' first step; load average %.1f" % os.getloadavg()[0],
              flush=True)
    else:
        print("# elastic recovery: SIGKILL of %s to the first step of generation 2, 4 ranks on "
              "2 agents, min 2; load average %.1f" % (
                  "rank 2" if args.what == "rank" else "the agent of ranks 2-3",
                  os.getloadavg()[0]), flush=True)
    runs = []
    with tempfile.TemporaryDirectory(prefix="troika-elastic-") as tmp:
        for i in range(args.repeat):
            run_dir = os.path.join(tmp, str(i))
            os.mkdir(run_dir)
            ms = (join_run if args.what == "join" else one_run)(args, run_dir)
            runs.append(ms)
            print("run %d: %.0f ms" % (i + 1, ms), flush=True)
    print("median: %.0f ms (target < 2000 ms)" % statistics.median(runs))


if __name__ == "__main__":
    main()
