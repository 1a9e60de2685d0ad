"""run_hosts_test.py COORDINATOR PYTHON: troika.is_homogeneous() on jobs whose ranks claim
different hosts (TROIKA_HOST), started as bare processes against a coordinator of their own (an
agent always starts as many ranks per node, so troikarun cannot make an uneven job). Each rank
checks the value against the expected one and that a collective still works after init."""

import os
import subprocess
import sys
import tempfile
import time

RANK = r"""
import os, sys
import troika
troika.init()
want = os.environ["EXPECT_HOMOGENEOUS"] == "1"
got = troika.is_homogeneous()
print("rank %d of %d: host %s, local_size %d, is_homogeneous %s" % (
    troika.rank(), troika.size(), os.environ["TROIKA_HOST"], troika.local_size(), got))
troika.shutdown()
sys.exit(0 if got == want else 1)
"""

CASES = [(["hA", "hA", "hB"], False), (["hA", "hB"], True), (["hA", "hA", "hB", "hB"], True),
         (["hA", "hB", "hB", "hB"], False)]


def main():
    coordinator, python = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        port_file = os.path.join(tmp, "port")
        coord = subprocess.Popen([coordinator, "--listen=127.0.0.1:0", "--port_file=" + port_file,
                                  "--plaintext=true", "--log_level=warning"])
        try:
            deadline = time.time() + 30
            while not (os.path.exists(port_file) and open(port_file).read().strip()):
                if time.time() > deadline or coord.poll() is not None:
                    print("FAIL: the coordinator did not start")
                    return 1
                time.sleep(0.05)
            port = open(port_file).read().strip()
            failed = False
            for n, (hosts, want) in enumerate(CASES):
                procs = []
                for r, host in enumerate(hosts):
                    env = dict(os.environ, TROIKA_COORDINATOR="127.0.0.1:" + port,
                               TROIKA_PLAINTEXT="1", TROIKA_JOB="hosts-%d" % n,
                               TROIKA_JOB_TOKEN="hosts-test", TROIKA_RANK=str(r),
                               TROIKA_SIZE=str(len(hosts)), TROIKA_HOST=host,
                               TROIKA_DATA_HOST="127.0.0.1",
                               EXPECT_HOMOGENEOUS="1" if want else "0")
                    procs.append(subprocess.Popen([python, "-c", RANK], env=env))
                codes = []
                for p in procs:
                    try:
                        codes.append(p.wait(timeout=60))
                    except subprocess.TimeoutExpired:
                        p.kill()
                        codes.append("timeout")
                ok = all(c == 0 for c in codes)
                print("%s: hosts %s, expected is_homogeneous %s: exit codes %s" % (
                    "ok" if ok else "FAIL", hosts, want, codes), flush=True)
                failed |= not ok
            return 1 if failed else 0
        finally:
            coord.terminate()
            coord.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
