#!/usr/bin/env python3
"""Runs an example script as a troikarun job and checks its summary, for every front end.

    run_example.py TROIKARUN PYTHON EXAMPLE --np N --needs mod[,mod] --summary TEXT
                   [--needs-tf-ops] [--loss-falls] [--same-weights] [--benchmark ITERS]
                   [-- EXAMPLE ARGS...]

Exit 77 (skipped) if PYTHON cannot import every module of --needs, or with --needs-tf-ops if
the build has no troika.tensorflow op library (no TensorFlow at configure time; as
run_tf_pytest.sh). Fails unless the job exits 0 and prints a line containing TEXT (rank 0's
summary); with --loss-falls, that line's "A -> B" loss must fall (B < A); with --same-weights it
must say "same weights on every rank: yes"; with --benchmark, rank 0 must print Horovod's
synthetic benchmark report: ITERS "Iter #i: X img/sec per CPU" lines, a positive "Total img/sec
on N CPU(s)" and one positive "Img/sec of each rank" per rank. TensorFlow's C++ logging is
quieted (TF_CPP_MIN_LOG_LEVEL=2) unless the environment sets it.
"""

import argparse
import os
import re
import subprocess
import sys


def tf_ops_built():
    """Whether the build's package (the first PYTHONPATH entry) has troika.tensorflow's op
    library."""
    package = os.environ.get("PYTHONPATH", "").split(":")[0]
    return os.path.isfile(os.path.join(package, "troika", "tensorflow", "_troika_tf_ops.so"))


def check_benchmark(out, np, iters):
    """Horovod's synthetic benchmark report from rank 0 in `out`: None if it is complete, else
    what is wrong."""
    number = r"(\d+(?:\.\d+)?)"
    found = len(re.findall(r"^\[0\] Iter #\d+: [0-9.]+ img/sec per CPU$", out, re.M))
    if found != iters:
        return "%d Iter lines from rank 0, expected %d" % (found, iters)
    totals = re.findall(r"^\[0\] Total img/sec on %d CPU\(s\): %s " % (np, number), out, re.M)
    if not totals or not float(totals[-1]) > 0:
        return "no positive total img/sec from rank 0"
    each = re.findall(r"^\[0\] Img/sec of each rank: (.*) \(sum", out, re.M)
    figures = each[-1].split(", ") if each else []
    if len(figures) != np or not all(re.fullmatch(number, f) and float(f) > 0 for f in figures):
        return "not %d positive per-rank means: %s" % (np, ", ".join(figures))
    print("OK: total %s img/sec, per rank %s" % (totals[-1], ", ".join(figures)))
    return None


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
    p.add_argument("--needs-tf-ops", action="store_true")
    p.add_argument("--benchmark", type=int, metavar="ITERS")
    p.add_argument("--timeout", type=float, default=240)
    argv = sys.argv[1:]
    rest = argv.index("--") if "--" in argv else len(argv)
    a = p.parse_args(argv[:rest])
    a.args = argv[rest + 1:]
    imports = "import " + ", ".join(a.needs.split(","))
    if subprocess.run([a.python, "-c", imports], capture_output=True).returncode != 0:
        print("skipped: %s cannot %s" % (a.python, imports))
        return 77
    if a.needs_tf_ops and not tf_ops_built():
        print("skipped: the build has no troika.tensorflow op library (no TensorFlow at "
              "configure time)")
        return 77
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    job = subprocess.run([a.troikarun, "-np", str(a.np), "--", a.python, a.example] + a.args,
                         capture_output=True, text=True, timeout=a.timeout, env=env)
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
    if a.benchmark is not None:
        problem = check_benchmark(out, a.np, a.benchmark)
        if problem:
            print("FAIL: " + problem)
            return 1
    print("OK: %s" % line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
