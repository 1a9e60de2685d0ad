#!/usr/bin/env python3
"""A rank SIGKILLed mid-training in a plain (not elastic) TensorFlow job, launched as users do:

    run_tf_kill_test.py TROIKARUN NP PYTHON KILL_RANK_TF_JOB MODE [TROIKARUN_OPTION...]

runs `troikarun -np NP [OPTIONS] -- PYTHON kill_rank_tf_job.py --mode MODE` (MODE: fit,
model.fit with troika.keras; tape or tape-eager, troika.tensorflow's DistributedGradientTape;
the job's docstring says where rank 1 kills itself). Passes when:
  - every surviving rank raised, out of model.fit or its training step, TensorFlow's
    AbortedError (docs/tensorflow.md, "Errors") whose message names rank 1, less than 5 s after
    the kill (each survivor writes "raised-after SECONDS TYPE MESSAGE");
  - the job ended (troikarun exited, non-zero since a rank was killed) within a generous
    not-hung bound.
TF_USE_LEGACY_KERAS=1 in the environment runs MODE fit on Keras 2 (tf_keras); KERAS_BACKEND=torch
runs it on Keras 3's torch backend, over troika.torch, whose error is troika.TroikaError
(hvd.HorovodInternalError) instead of AbortedError.

Exit 77 (skipped) if PYTHON cannot import tensorflow or the build (PYTHONPATH's first entry) has
no op library; with KERAS_BACKEND=torch, if PYTHON cannot import torch and keras. The
TensorFlow counterpart of run_kill_test.sh (troika.torch).
"""

import os
import re
import sys
import tempfile
import time

from runner_common import skip_reason

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from process_helpers import read, start, wait_or_kill  # noqa: E402

VICTIM = 1
RAISE_WITHIN_S = 5.0
NOT_HUNG_S = 240  # from the start: TensorFlow's start-up on 2 shared cores, then the kill
TORCH_BACKEND = os.environ.get("KERAS_BACKEND") == "torch"
ERROR_TYPE = ("troika.TroikaError" if TORCH_BACKEND else
              "tensorflow.python.framework.errors_impl.AbortedError")


def check_rank(rank, line):
    """The failures of survivor `rank`'s result line ("" if it wrote none)."""
    if not line:
        return ["rank %d wrote no result: it did not raise before troikarun's agent ended it"
                % rank]
    m = re.match(r"raised-after (\S+) (\S+) (.*)$", line)
    if not m:
        return ["rank %d: expected \"raised-after SECONDS TYPE MESSAGE\", got %r" % (rank, line)]
    seconds, kind, message = float(m.group(1)), m.group(2), m.group(3)
    failures = []
    if seconds >= RAISE_WITHIN_S:
        failures.append("rank %d raised %.3f s after the kill (limit %.0f s)"
                        % (rank, seconds, RAISE_WITHIN_S))
    if kind != ERROR_TYPE:
        failures.append("rank %d raised %s, expected %s" % (rank, kind, ERROR_TYPE))
    if not re.search(r"\brank %d\b" % VICTIM, message):
        failures.append("rank %d's error does not name rank %d: %s"
                        % (rank, VICTIM, message[-400:]))
    return failures


def main():
    troikarun, np_, python, script, mode = sys.argv[1:6]
    options = sys.argv[6:]
    np_ = int(np_)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # the ranks' TensorFlow, less chatty
    skip = skip_reason(python, "Keras torch-backend kill test" if TORCH_BACKEND else
                       "TensorFlow kill test", TORCH_BACKEND)
    if skip:
        print(skip)
        return 77
    failures = []
    with tempfile.TemporaryDirectory(prefix="troika-tf-kill-") as d:
        os.environ["TROIKA_KILL_TEST_DIR"] = d
        out_path, err_path = os.path.join(d, "stdout"), os.path.join(d, "stderr")
        t0 = time.time()
        job = start([troikarun, "-np", str(np_)] + options + ["--", python, script, "--mode",
                                                             mode], out_path, err_path)
        code = wait_or_kill(job, NOT_HUNG_S)
        print("troikarun %s, mode %s%s: exited %s after %.1f s" % (
            " ".join(["-np", str(np_)] + options), mode,
            "".join(" (%s=%s)" % (k, os.environ[k]) for k in
                    ("TF_USE_LEGACY_KERAS", "KERAS_BACKEND") if k in os.environ),
            code, time.time() - t0))
        if code is None:
            failures.append("the job did not end within %d s (killed)" % NOT_HUNG_S)
        elif code == 0:
            failures.append("troikarun exited 0 although rank %d was killed" % VICTIM)
        if not os.path.exists(os.path.join(d, "killed-at")):
            failures.append("rank %d never reached its kill (no killed-at)" % VICTIM)
        else:
            for r in range(np_):
                if r != VICTIM:
                    line = read(os.path.join(d, "rank%d" % r)).strip()
                    print("rank %d: %s" % (r, line[:200]))
                    failures += check_rank(r, line)
        if failures:
            print("--- stdout\n%s--- stderr\n%s" % (read(out_path), read(err_path)))
    for failure in failures:
        print("FAIL: " + failure)
    if not failures:
        print("PASS: every surviving rank raised %s naming rank %d within %.0f s of its kill, "
              "and the job ended" % (ERROR_TYPE.rsplit(".", 1)[1], VICTIM, RAISE_WITHIN_S))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
