#!/usr/bin/env python3
"""Runs Horovod's own test files against a Troika front end and prints the per-test table.

Horovod's tests are the specification of its front ends' behaviour; this runs them unchanged,
with `import horovod.torch` (or `horovod.tensorflow`, ...) resolved to troika.torch (or
troika.tensorflow, ...) by a small alias package made in a temporary folder, on NP ranks
started by troikarun, CPU only unless the machine has GPUs. --framework picks the files:
torch (test/parallel/test_torch.py), tensorflow (test_tensorflow.py and
test_tensorflow_process_sets.py; --python must have TensorFlow, e.g. build/venv/bin/python),
keras (test_tensorflow2_keras.py, horovod.tensorflow.keras and horovod.keras with Keras 2:
--env TF_USE_LEGACY_KERAS=1, and a --python with tf_keras), mxnet (test_mxnet1.py; --python
with MXNet 1.9.1, e.g. build/venv-mxnet/bin/python). --horovodrun HOROVODRUN runs the same
tests against Horovod itself, installed in --python's environment, as the baseline.
Horovod's code is not part of Troika: give a checkout of horovod/horovod (tag v0.28.1 or master;
the file is the same) with --horovod; nothing of it is copied into this repository. Its test
helpers (test/utils/common.py) need cloudpickle and mock (Debian: python3-cloudpickle
python3-mock) and three pure-Python files of Horovod's launcher (RUNNER_HELPERS), taken from
the checkout too.

  scripts/horovod_compat.py --horovod ~/horovod --np 2 [--np 3] [--mode each|file|both]
      [--framework torch|tensorflow|keras|mxnet] [--python /usr/bin/python3] [--build build]
      [--horovodrun PATH]
      [--tests test_a,test_b] [--markdown OUT.md]

--mode each runs every test as its own job (one failure cannot spill into the next); --mode
file runs the whole file as one job, as Horovod's CI does. Each rank writes a JUnit report; a
test passed when it passed on every rank, was skipped when every rank skipped it, and failed
otherwise (or when its job ended without a report, e.g. aborted by the coordinator). Prints one
line per test and configuration, then `summary: P passed, F failed, S skipped` per
configuration; with --markdown, writes the table (docs/horovod-compat.md holds the latest).
"""

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

# The alias package: `import horovod.<F>` (and its submodules) gives troika.<F>'s, for each
# front end F the test files import.
ALIAS = """import importlib, sys  # noqa: E401
_FRONTS = %(fronts)r
for _f in _FRONTS:
    importlib.import_module("troika." + _f)
for _name, _module in list(sys.modules.items()):
    if any(_name == "troika." + _f or _name.startswith("troika." + _f + ".") for _f in _FRONTS):
        sys.modules["horovod" + _name[len("troika"):]] = _module
"""
# horovod.common.util's version check, which horovod.tensorflow.keras and its test file import
# (Horovod's users do not: it stays in the alias tree). Written here, not copied.
COMMON_UTIL = """from packaging import version


def is_version_greater_equal_than(ver, target):
    \"\"\"Whether version string `ver` is at least `target` (major.minor.patch).\"\"\"
    if not isinstance(ver, str) or not isinstance(target, str):
        raise ValueError("is_version_greater_equal_than takes two strings, got %r and %r"
                         % (ver, target))
    if len(target.split(".")) != 3:
        raise ValueError("the target version must read major.minor.patch, got %r" % target)
    return version.parse(ver) >= version.parse(target)
"""
RUNNER_HELPERS = ("horovod/runner/util/threads.py", "horovod/runner/common/util/env.py",
                  "horovod/runner/common/util/secret.py")
# Per front end: the test files run, the files they import, the troika modules the alias
# package loads (default: the front end's own), files of our own written into the alias tree,
# whether collecting the tests needs a job (the test class calls hvd.init() when made), and how
# to print the framework's version.
FRONT_ENDS = {
    "torch": dict(tests=["test/parallel/test_torch.py"], helpers=[],
                  version="import torch; print('torch', torch.__version__)"),
    "tensorflow": dict(tests=["test/parallel/test_tensorflow.py",
                              "test/parallel/test_tensorflow_process_sets.py"],
                       helpers=["test/parallel/base_test_tensorflow.py"],
                       version="import tensorflow as tf; print('tensorflow', tf.__version__)"),
    # horovod.tensorflow.keras and horovod.keras (Keras 2 with TF_USE_LEGACY_KERAS=1, as the
    # file is written for: --env TF_USE_LEGACY_KERAS=1).
    "keras": dict(tests=["test/parallel/test_tensorflow2_keras.py"], helpers=[],
                  imports=["tensorflow", "tensorflow.keras", "keras"], collect_in_job=True,
                  alias_files={"horovod/common/__init__.py": "",
                               "horovod/common/util.py": COMMON_UTIL},
                  version="import importlib, tensorflow as tf; "
                          "k = importlib.import_module(tf.keras.__name__.split('.')[0]); "
                          "print('tensorflow', tf.__version__, 'with', k.__name__, k.__version__)"),
    # horovod.mxnet on MXNet 1.x (--python: an environment with mxnet 1.9.1, numpy<1.24,
    # pytest, packaging, cloudpickle and mock, e.g. build/venv-mxnet).
    "mxnet": dict(tests=["test/parallel/test_mxnet1.py"],
                  helpers=["test/parallel/base_test_mxnet.py"],
                  version="import mxnet as mx; print('mxnet', mx.__version__)"),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--horovod", required=True, help="a checkout of horovod/horovod")
    p.add_argument("--framework", choices=sorted(FRONT_ENDS), default="torch")
    p.add_argument("--np", type=int, action="append", help="ranks (repeatable; default 2)")
    p.add_argument("--mode", choices=("each", "file", "both"), default="both")
    p.add_argument("--python", default="/usr/bin/python3", help="the ranks' interpreter")
    p.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "build"),
                   help="Troika's build folder (troikarun in agent/, the package in python/)")
    p.add_argument("--troikarun", help="troikarun to launch with (default BUILD/agent/troikarun)")
    p.add_argument("--horovodrun",
                   help="the baseline: run the tests against Horovod itself (installed in "
                        "--python's environment), launched by this horovodrun (--gloo), "
                        "without the alias package")
    p.add_argument("--package", help="the folder holding the troika package (default "
                                     "BUILD/python)")
    p.add_argument("--tests", default="", help="comma-separated test names (default: all)")
    p.add_argument("--deselect", default="",
                   help="comma-separated test names left out of the whole-file job, as np=N:name "
                        "(only at N ranks) or name; reported as deselected")
    p.add_argument("--timeout", type=float, default=600, help="seconds per job")
    p.add_argument("--env", action="append", default=[],
                   help="KEY=VALUE set for the ranks (repeatable), e.g. TF_USE_LEGACY_KERAS=1")
    p.add_argument("--markdown", help="write the per-test table here")
    return p.parse_args()


def make_tree(horovod, framework):
    """A temporary folder with the test files, test/utils/ and the alias package."""
    root = tempfile.mkdtemp(prefix="troika-horovod-compat-")
    for sub in ("test/parallel", "test/utils"):
        os.makedirs(os.path.join(root, sub))
    front = FRONT_ENDS[framework]
    for path in front["tests"] + front["helpers"]:
        shutil.copy(os.path.join(horovod, path), os.path.join(root, path))
    utils = os.path.join(horovod, "test/utils")
    for name in os.listdir(utils):
        if name.endswith(".py"):
            shutil.copy(os.path.join(utils, name), os.path.join(root, "test/utils", name))
    os.makedirs(os.path.join(root, "alias/horovod"))
    with open(os.path.join(root, "alias/horovod/__init__.py"), "w") as f:
        f.write(ALIAS % {"fronts": front.get("imports", [framework])})
    for path, text in front.get("alias_files", {}).items():
        os.makedirs(os.path.dirname(os.path.join(root, "alias", path)), exist_ok=True)
        with open(os.path.join(root, "alias", path), "w") as f:
            f.write(text)
    # The test helpers import pure-Python parts of Horovod's launcher (no Horovod build):
    # test/utils/common.py horovod.runner.util.threads, test_tensorflow_process_sets.py
    # horovod.runner.common.util.env (and the secret module it imports).
    for path in RUNNER_HELPERS:
        folder = os.path.join(root, "alias", os.path.dirname(path))
        os.makedirs(folder, exist_ok=True)
        shutil.copy(os.path.join(horovod, path), folder)
        package = os.path.dirname(path)
        while package != "horovod":
            init = os.path.join(root, "alias", package, "__init__.py")
            if not os.path.exists(init):
                open(init, "w").close()
            package = os.path.dirname(package)
    return root


def environment(args, root):
    env = dict(os.environ)
    ours = [] if args.horovodrun else [
        os.path.join(root, "alias"),
        os.path.abspath(args.package or os.path.join(args.build, "python"))]
    env["PYTHONPATH"] = os.pathsep.join(
        ours + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    for item in args.env:
        key, _, value = item.partition("=")
        env[key] = value
    return env


def collect(args, root, env):
    """{test name: its pytest node id} of every test of the front end's files. A file whose
    test class joins the job when made (collect_in_job) is collected in a job of 1 rank."""
    front = FRONT_ENDS[args.framework]
    cmd = [args.python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    if front.get("collect_in_job"):
        cmd = [troikarun_path(args), "-np", "1", "--"] + cmd
    out = subprocess.run(cmd + front["tests"], cwd=root, env=env, capture_output=True,
                         text=True)
    ids = collections.OrderedDict()
    for line in out.stdout.splitlines():
        if front.get("collect_in_job"):
            line = re.sub(r"^\[\d+\] ", "", line)  # troikarun's rank prefix
        if "::" in line:
            name = line.split("::")[-1]
            if name in ids:  # the same name in two files: qualify it with its file
                name = os.path.basename(line.split("::")[0])[:-3] + "::" + name
            ids[name] = line.strip()
    if not ids:
        sys.exit("horovod_compat: collected no tests:\n" + out.stdout + out.stderr)
    return ids


def deselected(args, np):
    """The test names --deselect leaves out of the whole-file job at `np` ranks."""
    out = []
    for item in filter(None, args.deselect.split(",")):
        where, _, name = item.rpartition(":")
        if not where or where == "np=%d" % np:
            out.append(name)
    return out


def troikarun_path(args):
    return os.path.abspath(args.troikarun or os.path.join(args.build, "agent", "troikarun"))


def run_job(args, root, env, np, selectors, reports, deselect=()):
    """One troikarun job of pytest over `selectors` (node ids or files) leaving out the node
    ids `deselect`; each rank writes reports/r<RANK>.xml."""
    os.makedirs(reports, exist_ok=True)
    rank_var = "HOROVOD_RANK" if args.horovodrun else "TROIKA_RANK"
    rank_cmd = ('exec "$0" -m pytest -q -p no:cacheprovider --junitxml="$1/r$%s.xml" "$@"'
                % rank_var)
    if args.horovodrun:
        launch = [args.horovodrun, "--gloo", "-np", str(np), "-H", "localhost:%d" % np]
    else:
        launch = [troikarun_path(args), "-np", str(np), "--"]
    cmd = (launch + ["sh", "-c", rank_cmd, args.python, reports]
           + list(selectors) + ["--deselect=%s" % d for d in deselect])
    start = time.monotonic()
    try:
        job = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True,
                             timeout=args.timeout)
        log, status = job.stdout + job.stderr, job.returncode
    except subprocess.TimeoutExpired as e:  # its output comes as bytes, whatever text= says
        log = b"".join(x for x in (e.stdout, e.stderr) if x).decode(errors="replace")
        log, status = log + "\n(timed out)", "timeout"
    with open(os.path.join(reports, "job.log"), "w") as f:
        f.write(log)
    return status, time.monotonic() - start


def outcomes(reports, np):
    """test name -> (outcome, reason) over every rank's report."""
    per_test = collections.defaultdict(list)
    for r in range(np):
        path = os.path.join(reports, "r%d.xml" % r)
        if not os.path.exists(path):
            continue
        for case in ET.parse(path).getroot().iter("testcase"):
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            skipped = case.find("skipped")
            if failure is not None:
                outcome = ("failed", failure.get("message", ""))
            elif skipped is not None:
                outcome = ("skipped", skipped.get("message", ""))
            else:
                outcome = ("passed", "")
            name = case.get("name")
            per_test[name].append(outcome)
            # A name in two files is also found qualified by its file (collect): "file::name".
            module = (case.get("classname") or "").split(".")
            if len(module) >= 2:
                per_test[module[-2] + "::" + name].append(outcome)
    result = {}
    for name, ranks in per_test.items():
        kinds = [k for k, _ in ranks]
        if len(ranks) < np or "failed" in kinds:
            reasons = [m for k, m in ranks if k == "failed"]
            result[name] = ("failed", (reasons[0] if reasons else "no report from every rank"))
        elif all(k == "skipped" for k in kinds):
            result[name] = ("skipped", ranks[0][1])
        elif all(k == "passed" for k in kinds):
            result[name] = ("passed", "")
        else:
            result[name] = ("failed", "ranks disagree: %s" % kinds)
    return result


def one_line(text, width=110):
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def main():
    args = parse_args()
    if os.sep in args.python:  # the jobs run in a temporary folder
        args.python = os.path.abspath(args.python)
    if args.horovodrun and os.sep in args.horovodrun:
        args.horovodrun = os.path.abspath(args.horovodrun)
    nps = args.np or [2]
    root = make_tree(os.path.expanduser(args.horovod), args.framework)
    env = environment(args, root)
    version = subprocess.run([args.python, "-c", FRONT_ENDS[args.framework]["version"]],
                             env=env, capture_output=True, text=True).stdout.strip()
    ids = collect(args, root, env)
    names = list(ids)
    if args.tests:
        wanted = args.tests.split(",")
        names = [n for n in names if n in wanted]
    modes = ["each", "file"] if args.mode == "both" else [args.mode]
    columns, table = [], collections.OrderedDict((n, {}) for n in names)
    for np in nps:
        for mode in modes:
            column = "np=%d %s" % (np, "per test" if mode == "each" else "whole file")
            columns.append(column)
            reports = os.path.join(root, "reports", "np%d-%s" % (np, mode))
            if mode == "each":
                for name in names:
                    where = os.path.join(reports, name)
                    status, secs = run_job(args, root, env, np, [ids[name]], where)
                    got = outcomes(where, np).get(name, ("failed", "job ended with %s, no "
                                                         "report" % status))
                    table[name][column] = got
                    print("%-52s %-20s %-7s %5.1fs %s" % (name, column, got[0], secs,
                                                          one_line(got[1], 60)), flush=True)
            else:
                left_out = deselected(args, np)
                status, secs = run_job(args, root, env, np, FRONT_ENDS[args.framework]["tests"],
                                       reports, [ids[n] for n in left_out if n in ids])
                got = outcomes(reports, np)
                for name in names:
                    if name in left_out:
                        table[name][column] = ("deselected", "left out of this job (--deselect)")
                        continue
                    table[name][column] = got.get(name, ("failed", "not run: the job ended "
                                                         "(%s) before it" % status))
                print("whole file, np=%d: job exit %s in %.0f s" % (np, status, secs), flush=True)
            counts = collections.Counter(table[n][column][0] for n in names)
            print("%s (%s) summary: %d passed, %d failed, %d skipped%s"
                  % (column, version, counts["passed"], counts["failed"],
                     counts["skipped"], ", %d deselected" % counts["deselected"]
                     if counts["deselected"] else ""), flush=True)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("%s, %s\n\n" % (version, time.strftime("%Y-%m-%d")))
            f.write("| test | " + " | ".join(columns) + " |\n")
            f.write("|---|" + "---|" * len(columns) + "\n")
            for name in names:
                cells = []
                for c in columns:
                    kind, reason = table[name][c]
                    cells.append(kind if kind == "passed" else
                                 "%s: %s" % (kind, one_line(reason, 80).replace("|", "\\|")))
                f.write("| %s | %s |\n" % (name, " | ".join(cells)))
            for c in columns:
                counts = collections.Counter(table[n][c][0] for n in names)
                f.write("\n%s: %d passed, %d failed, %d skipped%s  " % (
                    c, counts["passed"], counts["failed"], counts["skipped"],
                    ", %d deselected" % counts["deselected"] if counts["deselected"] else ""))
            f.write("\n")
    print("reports and job logs: %s" % os.path.join(root, "reports"))


if __name__ == "__main__":
    main()
