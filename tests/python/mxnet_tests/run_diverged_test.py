#!/usr/bin/env python3
"""run_diverged_test.py TROIKARUN PYTHON: diverged_job.py on 2 ranks; every rank must raise a
deadlock error (within the timeout: no hang), and troikarun must exit non-zero. Exit 77 if
PYTHON cannot import mxnet."""

import os
import subprocess
import sys

troikarun, python = sys.argv[1:3]
if subprocess.run([python, "-c", "import mxnet"], capture_output=True).returncode != 0:
    print("skipped: %s cannot import mxnet" % python)
    sys.exit(77)
job = subprocess.run([troikarun, "-np", "2", "--", python,
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), "diverged_job.py")],
                     capture_output=True, text=True, timeout=120)
out = job.stdout + job.stderr
print(out)
failed = []
for r in range(2):
    lines = [l for l in out.splitlines() if "rank %d raised:" % r in l]
    if not lines or "deadlock" not in lines[0]:
        failed.append("rank %d did not raise a deadlock error" % r)
if job.returncode == 0:
    failed.append("troikarun exited 0 although the job deadlocked")
print("\n".join(failed) or "PASS: every rank raised the deadlock; troikarun exited %d"
      % job.returncode)
sys.exit(1 if failed else 0)
