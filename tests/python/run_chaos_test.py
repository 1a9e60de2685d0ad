#!/usr/bin/env python3
"""Chaos, as users launch a job (issue 46): for each seed, tests/python/chaos_job.py on 4 ranks
under

    troikarun -np 4 --nproc-per-node 2 --min-np 2 --max-np 6 --max-restarts K

where ranks SIGKILL themselves at the seed's points of a step (before the gradient, with the
allreduce in flight, in the optimizer, inside a commit, in the reset callback while the others
recover), their agents start them again, and the troika-agent command troikarun prints for
adding ranks runs once the job reaches the seed's step (an agent of 2 more ranks joins mid-run).

A seed passes when troikarun and the extra agent exit 0 within the time limit (no hang), every
rank that finished ran every step, the ranks that finished are the job's last generation, and
every one's weights equal, bit for bit, each other's and, within float64 rounding, those of one
process trained on the same global batches (chaos_job.py --reference): no committed step was
lost or applied twice. It prints one line per seed (the kills that fired, the generations, the
time) and "summary: P passed, F failed".

    run_chaos_test.py TROIKARUN PYTHON CHAOS_JOB [--seeds 1,2,3] [--max-restarts K]
                      [--timeout S] [--keep DIR]

Exit 77 (skipped) if PYTHON cannot import torch. bench/chaos_soak.py runs it over many seeds.
"""

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time

from process_helpers import agent_command, can_import, kill, read, start, wait_or_kill

TOLERANCE = 1e-9  # relative: float64 sums in another order, over tens of steps


def parse_weights(text):
    return [float.fromhex(v) for v in text.split()]


def reference(python, script, seed, steps):
    out = subprocess.run([python, script, "--reference", "--seed", str(seed), "--steps",
                          str(steps)], capture_output=True, text=True, check=True).stdout
    return parse_weights(out.split("reference weights", 1)[1])


def run_seed(troikarun, python, script, seed, max_restarts=2, steps=60, timeout=300,
             keep=None):
    """Runs one seed; returns (failures, a line describing the run)."""
    rng = random.Random(seed * 7919)  # the join's step: not the kills' draws
    join_at = rng.randrange(5, steps // 2)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="troika-chaos-") as d:
        out_path, err_path = os.path.join(d, "stdout"), os.path.join(d, "stderr")
        agent_out, agent_err = os.path.join(d, "agent.out"), os.path.join(d, "agent.err")
        job = start([troikarun, "-np", "4", "--nproc-per-node", "2", "--min-np", "2", "--max-np",
                     "6", "--max-restarts", str(max_restarts), "--", python, script, "--seed",
                     str(seed), "--steps", str(steps), "--plan-dir", d], out_path, err_path)
        agent = None
        deadline = started + timeout
        while job.poll() is None and time.time() < deadline:
            if agent is None:
                reached = [int(s) for s in re.findall(r"\] step (\d+) ", read(out_path))]
                command = agent_command(read(err_path), 2)
                if reached and max(reached) >= join_at and command:
                    agent = start(command, agent_out, agent_err, shell=True)
            time.sleep(0.05)
        code = wait_or_kill(job, max(1, deadline - time.time()))
        agent_code = wait_or_kill(agent, 30) if agent is not None else 0
        out = read(out_path) + read(agent_out)
        err = read(err_path) + read(agent_err)
        if keep:
            os.makedirs(keep, exist_ok=True)
            for name, text in (("stdout", out), ("stderr", err)):
                with open(os.path.join(keep, "seed%d.%s" % (seed, name)), "w") as f:
                    f.write(text)
    fired = re.findall(r"kill \d+: rank \d+ of \d+ at step \d+, (\w+)", out)
    generations = [int(g) for g in re.findall(r"\] step \d+ size \d+ generation (\d+)", out)]
    line = "seed %d: %d kills (%s), joined at step %d, %d generations, %.1f s" % (
        seed, len(fired), ", ".join(fired) or "none", join_at, max(generations, default=0),
        time.time() - started)

    failures = []
    if code is None:
        failures.append("troikarun did not exit within %d s (a hang)" % timeout)
    elif code != 0:
        failures.append("troikarun exited %d" % code)
    if agent is None:
        failures.append("the job never reached step %d with the agent command printed" % join_at)
    elif agent_code != 0:
        failures.append("the extra agent exited %s" % agent_code)
    done = re.findall(r"\[\d+\] done steps (\d+) size (\d+) weights ([0-9a-fx.p+\- ]+)", out)
    if not done:
        failures.append("no rank finished")
    sizes = {int(size) for _, size, _ in done}
    if len(sizes) > 1 or (sizes and len(done) != sizes.pop()):
        failures.append("%d ranks finished, as sizes %s" % (len(done), sorted(
            {int(size) for _, size, _ in done})))
    if any(int(s) != steps for s, _, _ in done):
        failures.append("a rank finished after other than %d steps" % steps)
    if len({w.strip() for _, _, w in done}) > 1:
        failures.append("the ranks' weights differ")
    if done and not failures:
        expected = reference(python, script, seed, steps)
        got = parse_weights(done[0][2])
        worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, expected))
        if len(got) != len(expected) or worst > TOLERANCE:
            failures.append("the weights are not the 1-process reference's (worst relative "
                            "difference %.3g): a committed step was lost or applied twice" % worst)
    if failures:
        tail = "\n".join(err.splitlines()[-40:])
        failures = ["seed %d: %s" % (seed, f) for f in failures]
        failures.append("seed %d: troikarun's last lines:\n%s" % (seed, tail))
    return failures, line


def main():
    p = argparse.ArgumentParser()
    p.add_argument("troikarun")
    p.add_argument("python")
    p.add_argument("script")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--max-restarts", type=int, default=2)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--timeout", type=int, default=300, help="per seed: longer is a hang")
    p.add_argument("--keep", help="write each seed's output here")
    args = p.parse_args()
    if not can_import(args.python, "torch"):
        print("skipped: %s cannot import torch" % args.python)
        return 77
    passed = failed = 0
    for seed in [int(s) for s in args.seeds.split(",")]:
        failures, line = run_seed(args.troikarun, args.python, args.script, seed,
                                  args.max_restarts, args.steps, args.timeout, args.keep)
        print(("FAILED " if failures else "ok ") + line, flush=True)
        for f in failures:
            print("  " + f, flush=True)
        failed += bool(failures)
        passed += not failures
    print("summary: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
