#!/usr/bin/env python3
"""hvd.elastic for TensorFlow as users run it: `troikarun -np 3 --min-np 2 -- python3
elastic_job.py --mode M`, and SIGKILL of rank 2 mid-training, for M = keras (a Keras model in a
tf.function, TensorFlowKerasState) and M = v1 (a tf.compat.v1 session, DistributedOptimizer,
TensorFlowState): ranks 0 and 1 reset within 10 s of the kill (the TensorFlow ops' error
recognized by hvd.elastic.run), go back at most the commit interval, finish every epoch as 2
ranks with identical weights, and troikarun exits 0.

    run_elastic_tf_test.py TROIKARUN PYTHON ELASTIC_JOB

Exit 77 (skipped) if PYTHON cannot import tensorflow or the build (PYTHONPATH's first entry) has
no op library.
"""

import os
import re
import sys
import time

from runner_common import run_killed_elastic_job, skip_reason

COMMIT_EVERY = 5
EPOCHS = 3
RESET_WITHIN_MS = 10000  # TensorFlow's processes share 2 cores here; the core's own is 5 s


def run_job(troikarun, python, script, mode):
    """The job of 3 ranks with rank 2 SIGKILLed once it trains; (exit code, stdout, stderr,
    kill time in unix ms)."""
    return run_killed_elastic_job(
        troikarun, python, script, ["--mode", mode, "--epochs", str(EPOCHS), "--commit-every",
                                    str(COMMIT_EVERY)], "troika-elastic-tf-")


def check(code, out, err, killed_at):
    failures = []
    if code != 0:
        failures.append("troikarun exited %s" % code)
    if "the job goes on with 2 ranks as generation 2" not in err:
        failures.append("troikarun's log does not say that the job went on with 2 ranks")
    resets = {}
    for m in re.finditer(r"\[(\d)\] reset: rank \d+ of (\d+) at (\d+) \(restored to epoch "
                         r"\d+ batch \d+, (\d+) batches in all; it had trained (\d+)\)", out):
        member, size, at, to, frm = (int(m.group(i)) for i in range(1, 6))
        resets[member] = at
        if size != 2:
            failures.append("rank %d reset to %d ranks, expected 2" % (member, size))
        if at - killed_at > RESET_WITHIN_MS:
            failures.append("rank %d reset %d ms after the kill" % (member, at - killed_at))
        if not 0 <= frm - to <= COMMIT_EVERY:
            failures.append("rank %d went back %d batches (commit interval %d)" % (
                member, frm - to, COMMIT_EVERY))
    if sorted(resets) != [0, 1]:
        failures.append("ranks that reset: %s, expected 0 and 1" % sorted(resets))
    done = re.findall(r"\[(\d)\] done epochs (\d+) size (\d+) weights ([0-9a-f]+)", out)
    if sorted(int(r) for r, _, _, _ in done) != [0, 1]:
        failures.append("ranks that finished: %s, expected 0 and 1" % [r for r, _, _, _ in done])
    if any((int(e), int(s)) != (EPOCHS, 2) for _, e, s, _ in done):
        failures.append("a rank finished other than %d epochs as 2 ranks: %s" % (EPOCHS, done))
    if len({w for _, _, _, w in done}) != 1:
        failures.append("the weights differ: %s" % (done,))
    return failures


def main():
    troikarun, python, script = sys.argv[1:4]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the ranks' TensorFlow, less chatty
    skip = skip_reason(python, "TensorFlow elastic test")
    if skip:
        print(skip)
        return 77
    failures = []
    for mode in ("keras", "v1"):
        t0 = time.time()
        code, out, err, killed_at = run_job(troikarun, python, script, mode)
        f = check(code, out, err, killed_at)
        print("%s: %.1f s, %s" % (mode, time.time() - t0, "ok" if not f else "FAILED"))
        if f:
            print(out, err)
        failures += ["%s: %s" % (mode, x) for x in f]
    for failure in failures:
        print("FAIL: " + failure)
    if not failures:
        print("PASS: in a Keras job and in a v1 session job, the survivors of a SIGKILLed rank "
              "went back to their last commit and finished identical as 2 ranks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
