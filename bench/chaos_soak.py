#!/usr/bin/env python3
"""The chaos soak (issue 46): tests/python/run_chaos_test.py's job over many seeds, one after
another, and a summary for docs/chaos.md: seeds passed and failed, hangs, the kills that fired
by point, and the time per seed (median and worst).

    PYTHONPATH=build/python python3 bench/chaos_soak.py [--seeds 1-50] [--max-restarts 2]
        [--troikarun build/agent/troikarun] [--python python3] [--keep DIR]

ctest runs three seeds (python_elastic_chaos); a failing seed reproduces with
`tests/python/run_chaos_test.py TROIKARUN PYTHON tests/python/chaos_job.py --seeds N --keep DIR`.
"""

import argparse
import collections
import os
import re
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from run_chaos_test import run_seed  # noqa: E402


def seeds_of(text):
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="1-50", help="FIRST-LAST")
    p.add_argument("--max-restarts", type=int, default=2)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--timeout", type=int, default=300, help="per seed: longer is a hang")
    p.add_argument("--troikarun", default=os.path.join(ROOT, "build", "agent", "troikarun"))
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--keep", help="write each seed's output here (seedN.stdout, seedN.stderr)")
    args = p.parse_args()
    script = os.path.join(ROOT, "tests", "python", "chaos_job.py")
    started = time.time()
    failed, hangs, times, points = [], 0, [], collections.Counter()
    for seed in seeds_of(args.seeds):
        t = time.time()
        failures, line = run_seed(args.troikarun, args.python, script, seed, args.max_restarts,
                                  args.steps, args.timeout, args.keep)
        times.append(time.time() - t)
        points.update(p.strip() for p in re.search(r"kills \((.*?)\)", line).group(1).split(",")
                      if p.strip() != "none")
        print(("FAILED " if failures else "ok ") + line, flush=True)
        for f in failures:
            print("  " + f, flush=True)
        if failures:
            failed.append(seed)
            hangs += any("a hang" in f for f in failures)
    n = len(times)
    print("chaos soak: %d seeds (%s), --max-restarts %d, %d steps: %d passed, %d failed %s, "
          "%d hangs; kills fired: %d (%s); per seed: median %.1f s, worst %.1f s; %.0f s in all"
          % (n, args.seeds, args.max_restarts, args.steps, n - len(failed), len(failed),
             failed or "", hangs, sum(points.values()),
             ", ".join("%s %d" % kv for kv in sorted(points.items())),
             statistics.median(times), max(times), time.time() - started))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
