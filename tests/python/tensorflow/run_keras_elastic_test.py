#!/usr/bin/env python3
"""troika.keras.elastic as users run it: `troikarun -np 3 --min-np 2 -- python3
keras_elastic_job.py` (model.fit with KerasState and the elastic callbacks), and SIGKILL of
rank 2 mid-training, with Keras 3 and with Keras 2 (TF_USE_LEGACY_KERAS=1): ranks 0 and 1
reset within 10 s of the kill, go back at most the commit interval, finish every epoch as 2
ranks with identical weights, and troikarun exits 0.

    run_keras_elastic_test.py TROIKARUN PYTHON KERAS_ELASTIC_JOB

Exit 77 (skipped) if PYTHON cannot import tensorflow or the build (PYTHONPATH's first entry) has
no op library. With KERAS_BACKEND=torch in the environment, the job runs once, on Keras 3's
torch backend (troika.keras over troika.torch); skipped if PYTHON cannot import torch and keras.
"""

import os
import re
import sys
import time

from runner_common import run_killed_elastic_job, skip_reason

EPOCHS = 3
COMMIT_EVERY = 5
RESET_WITHIN_MS = 10000  # TensorFlow's processes share 2 cores here; the core's own is 5 s


def run_job(troikarun, python, script):
    """The job of 3 ranks with rank 2 SIGKILLed once it trains; (exit code, stdout, stderr,
    kill time in unix ms)."""
    return run_killed_elastic_job(
        troikarun, python, script, ["--epochs", str(EPOCHS), "--commit-every",
                                    str(COMMIT_EVERY)], "troika-keras-elastic-")


def check(code, out, err, killed_at):
    failures = []
    if code != 0:
        failures.append("troikarun exited %s" % code)
    if "the job goes on with 2 ranks as generation 2" not in err:
        failures.append("troikarun's log does not say that the job went on with 2 ranks")
    resets = []
    for m in re.finditer(r"\[(\d)\] reset: rank \d+ of (\d+) at (\d+) \(restored to epoch "
                         r"(\d+) batch (\d+); it had trained (\d+) batches\)", out):
        member, size, at, epoch, batch, trained = (int(m.group(i)) for i in range(1, 7))
        resets.append(member)
        if size != 2:
            failures.append("rank %d reset to %d ranks, expected 2" % (member, size))
        if at - killed_at > RESET_WITHIN_MS:
            failures.append("rank %d reset %d ms after the kill" % (member, at - killed_at))
        # 20 batches per epoch (the job's default); state.batch: the last batch trained, 0
        # after an epoch's end: the commit's position is within one batch of epoch * 20 + batch.
        lost = trained - (epoch * 20 + batch)
        if not 0 <= lost <= COMMIT_EVERY + 1:
            failures.append("rank %d restored to epoch %d batch %d, having trained %d batches "
                            "(commits every %d)" % (member, epoch, batch, trained,
                                                    COMMIT_EVERY))
    if sorted(resets) != [0, 1]:
        failures.append("ranks that reset: %s, expected 0 and 1 once each" % sorted(resets))
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
    torch_backend = os.environ.get("KERAS_BACKEND") == "torch"
    skip = skip_reason(python, "Keras elastic test", torch_backend)
    if skip:
        print(skip)
        return 77
    failures = []
    variants = ((("Keras 3 (torch backend)", None),) if torch_backend else
                (("Keras 3", None), ("Keras 2", "1")))
    for keras, legacy in variants:
        os.environ.pop("TF_USE_LEGACY_KERAS", None)
        if legacy:
            os.environ["TF_USE_LEGACY_KERAS"] = legacy
        t0 = time.time()
        code, out, err, killed_at = run_job(troikarun, python, script)
        f = check(code, out, err, killed_at)
        print("%s: %.1f s, %s" % (keras, time.time() - t0, "ok" if not f else "FAILED"))
        for line in re.findall(r"^\[\d\] (?:reset:|done epochs).*$", out, re.M):
            print("  " + line)
        if f:
            print(out, err)
        failures += ["%s: %s" % (keras, x) for x in f]
    for failure in failures:
        print("FAIL: " + failure)
    if not failures:
        print("PASS: in an elastic model.fit job with %s, the survivors of a SIGKILLed rank "
              "went back to their last commit and finished identical as 2 ranks"
              % " and with ".join(k for k, _ in variants))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
