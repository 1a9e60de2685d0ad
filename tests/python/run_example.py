#!/usr/bin/env python3
"""Runs an example script as a troikarun job and checks its summary, for every front end.

    run_example.py TROIKARUN PYTHON EXAMPLE --np N --needs mod[,mod] --summary TEXT
                   [--loss-falls] [--same-weights] [-- EXAMPLE ARGS...]

Exit 77 (skipped) if PYTHON cannot import every module of --needs. Fails unless the job exits 0
and prints a line containing TEXT (rank 0's summary); with --loss-falls, that line's
"A -> B" loss must fall (B < A); with --same-weights it must say "same weights on every rank:
yes".
"""

import argparse
import re
import subprocess
import sys


def main():
    p = argparse.ArgumentParser()
    p.add_argument("troikarun")
    p.add_argument("python")
    p.add_argument("example")
    p.add_argument("--np", type=int, required=True)
    p.add_argument("--needs", required=True)
    p.add_argument("--summary", required=True)
    p.add_argument("--loss-falls", action="store_true")
    p.add_argument("--same-weights", action="store_true")
    p.add_argument("--timeout", type=float, default=240)
    argv = sys.argv[1:]
    rest = argv.index("--") if "--" in argv else len(argv)
    a = p.parse_args(argv[:rest])
    a.args = argv[rest + 1:]
    imports = "import " + ", ".join(a.needs.split(","))
    if subprocess.run([a.python, "-c", imports], capture_output=True).returncode != 0:
        print("skipped: %s cannot %s" % (a.python, imports))
        return 77
    job = subprocess.run([a.troikarun, "-np", str(a.np), "--", a.python, a.example] + a.args,
                         capture_output=True, text=True, timeout=a.timeout)
    out = job.stdout + job.stderr
    print(out)
    if job.returncode != 0:
        print("FAIL: the example exited with %d" % job.returncode)
        return 1
    lines = [line for line in out.splitlines() if a.summary in line]
    if not lines:
        print("FAIL: no summary line containing %r" % a.summary)
        return 1
    line = lines[-1]
    if a.same_weights and "same weights on every rank: yes" not in line:
        print("FAIL: the ranks' weights differ")
        return 1
    if a.loss_falls:
        m = re.search(r"([-+0-9.eE]+) -> ([-+0-9.eE]+)", line)
        if not m:
            print("FAIL: no 'A -> B' loss in the summary")
            return 1
        first, last = float(m.group(1)), float(m.group(2))
        if not last < first:
            print("FAIL: the loss did not fall: %g -> %g" % (first, last))
            return 1
        print("OK: loss %g -> %g" % (first, last))
    print("OK: %s" % line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
