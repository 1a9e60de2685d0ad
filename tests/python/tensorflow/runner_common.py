"""What the TensorFlow/Keras job runners (run_*_test.py) share: when to skip, and an elastic
job of 3 ranks whose rank 2 is SIGKILLed mid-training."""

import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from process_helpers import (WaitFailed, can_import, kill, read, start,  # noqa: E402
                             wait_for, wait_or_kill)


def skip_reason(python, test, torch_backend=False):
    """Why `test` cannot run with `python` (exit 77), or None: Keras' torch backend needs torch
    and keras; otherwise TensorFlow and the build's op library (PYTHONPATH's first entry)."""
    if torch_backend:
        if not can_import(python, "torch, keras"):
            return ("%s skipped: %s cannot import torch and keras (scripts/setup.sh --test-tools "
                    "installs them into build/venv-torch2)" % (test, python))
        return None
    if not can_import(python, "tensorflow"):
        return "%s skipped: %s cannot import tensorflow" % (test, python)
    package = os.environ.get("PYTHONPATH", "").split(os.pathsep)[0]
    if not os.path.exists(os.path.join(package, "troika", "tensorflow", "_troika_tf_ops.so")):
        return "%s skipped: the build has no troika.tensorflow op library" % test
    return None


def run_killed_elastic_job(troikarun, python, script, job_args, prefix):
    """`troikarun -np 3 --min-np 2 -- python script --pid-dir D job_args...`, rank 2 SIGKILLed
    0.5 s after it wrote D/pid.2; (exit code, stdout, stderr, kill time in unix ms), the code
    None if rank 2 never started."""
    with tempfile.TemporaryDirectory(prefix=prefix) as d:
        out_path, err_path = os.path.join(d, "stdout"), os.path.join(d, "stderr")
        job = start([troikarun, "-np", "3", "--min-np", "2", "--", python, script, "--pid-dir", d]
                    + job_args, out_path, err_path)
        try:
            wait_for(lambda: read(os.path.join(d, "pid.2")).strip(), 180, "rank 2's pid file",
                     job)
        except WaitFailed:
            kill(job)
            return None, read(out_path), read(err_path), 0
        time.sleep(0.5)  # mid-training
        killed_at = time.time() * 1000
        os.kill(int(read(os.path.join(d, "pid.2"))), signal.SIGKILL)
        code = wait_or_kill(job, 240)
        return code, read(out_path), read(err_path), killed_at
