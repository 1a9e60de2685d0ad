#!/usr/bin/env python3
"""troika.mxnet against Horovod 0.28.1 and MXNet's own KVStore, side by side, on MXNet 1.9.1.

1. The Gluon synthetic benchmark (examples/mxnet/mxnet_synthetic_benchmark.py: a model-zoo
   network, hybridized, a fixed random batch, Horovod's "Total img/sec" report) on each --np
   (default 2 and 4) CPU ranks as separate processes, three ways:
   - troika:  troikarun -np N -- PYTHON the example            (TROIKA_BENCH_IMPL=troika,
              PYTHONPATH=BUILD/python; troikarun's defaults);
   - horovod: horovodrun --gloo -np N -H localhost:N HVD_PYTHON the example
              (TROIKA_BENCH_IMPL=horovod; Horovod's defaults), from BUILD/venv-mxnet-horovod,
              built by scripts/horovod_mxnet_baseline.sh;
   - kvstore: MXNet's parameter server: gluon.Trainer(kvstore=dist_sync), N workers, --kv-servers
              servers and a scheduler on this machine (TROIKA_BENCH_IMPL=kvstore). Started here
              with the DMLC_* variables that dmlc_tracker's local launcher sets (the wheel's
              mxnet/tools/launch.py: its tracker calls Thread.isAlive, gone since Python 3.9, so
              it fails on this Python 3.11), all on 127.0.0.1. The servers do the SGD update
              (update_on_kvstore) and compete for the same cores.
   Within each repetition each runs once per --np, one after the other; which goes first
   rotates. Figure: total img/sec (rank 0's mean x N); ratio troika/horovod (target >= 1).
2. A 64 MiB float32 hvd.allreduce_ loop (examples/mxnet/mxnet_allreduce_bench.py: 2 warm-up
   and 10 timed iterations, each waited for; the slowest rank's mean), troika and horovod:
   busbw GB/s (algbw x 2 (N-1)/N) and the ratio troika/horovod.

Fairness: every rank (and KVStore server and scheduler) runs with OMP_NUM_THREADS=1 (MXNet's
and oneDNN's OpenMP operator threads) and MXNET_CPU_WORKER_NTHREADS=1 (MXNet's engine
threads for CPU operators; 1 is MXNet's default, set so that none differs), unless set already
(--omp-threads, --engine-threads change them): on a machine with fewer cores than ranks, more
threads per rank only oversubscribe the cores. The collective libraries keep their own
background threads and defaults (Horovod: 1 ms cycle, 128 MiB fusion buffer; Troika:
troikarun's). The machine's load (load average, others' compilers, ctest runs and troikarun or horovodrun
jobs) is printed at each run's start.

    python3 bench/mxnet_bench.py                        # from the repository root
    python3 bench/mxnet_bench.py --np 2 --repeat 5 --impls troika,horovod --skip-allreduce
    scripts/horovod_mxnet_baseline.sh                   # first, for the horovod column

Columns that cannot run are reported as such and skipped: troika when `import troika.mxnet`
fails with --python and PYTHONPATH (default BUILD/python), horovod without
BUILD/venv-mxnet-horovod/bin/horovodrun.
"""

import argparse
import datetime
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYNTHETIC = os.path.join(ROOT, "examples", "mxnet", "mxnet_synthetic_benchmark.py")
ALLREDUCE = os.path.join(ROOT, "examples", "mxnet", "mxnet_allreduce_bench.py")
TOTAL = r"Total img/sec on \d+ CPU\(s\): ([0-9.]+)"
BUSBW = r"busbw ([0-9.]+) GB/s"
IMPLS = ("troika", "horovod", "kvstore")


def parse_args():
    p = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--troikarun", default=None, help="default: BUILD/agent/troikarun")
    p.add_argument("--python", default=None,
                   help="Troika's ranks' interpreter, with MXNet 1.9 (default: "
                        "BUILD/venv-mxnet/bin/python)")
    p.add_argument("--horovod-venv", default=None,
                   help="Horovod's virtual environment (default: BUILD/venv-mxnet-horovod); "
                        "its python also runs the kvstore column")
    p.add_argument("--np", default="2,4", help="rank counts, comma-separated")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--impls", default=",".join(IMPLS),
                   help="synthetic benchmark: which of troika, horovod, kvstore")
    p.add_argument("--model", default="resnet18_v1")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--num-iters", type=int, default=10)
    p.add_argument("--num-batches-per-iter", type=int, default=5)
    p.add_argument("--num-warmup-batches", type=int, default=3)
    p.add_argument("--kv-servers", type=int, default=1, help="KVStore servers")
    p.add_argument("--allreduce-mib", type=float, default=64)
    p.add_argument("--allreduce-iters", type=int, default=10)
    p.add_argument("--allreduce-warmup", type=int, default=2)
    p.add_argument("--skip-synthetic", action="store_true")
    p.add_argument("--skip-allreduce", action="store_true")
    p.add_argument("--omp-threads", default=None, help="OMP_NUM_THREADS (default: 1)")
    p.add_argument("--engine-threads", default=None,
                   help="MXNET_CPU_WORKER_NTHREADS (default: 1)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per run")
    args = p.parse_args()
    args.np = [int(x) for x in args.np.split(",") if x]
    args.impls = [x for x in args.impls.split(",") if x]
    unknown = [x for x in args.impls if x not in IMPLS]
    if unknown:
        p.error("--impls: unknown %s (known: %s)" % (", ".join(unknown), ", ".join(IMPLS)))
    args.troikarun = args.troikarun or os.path.join(args.build, "agent", "troikarun")
    args.python = args.python or os.path.join(args.build, "venv-mxnet", "bin", "python")
    args.horovod_venv = args.horovod_venv or os.path.join(args.build, "venv-mxnet-horovod")
    args.hvd_python = os.path.join(args.horovod_venv, "bin", "python")
    args.horovodrun = os.path.join(args.horovod_venv, "bin", "horovodrun")
    return args


def load():
    """The machine's load: load average and the count of compilers, ctest runs and jobs of
    troikarun and horovodrun (at a run's start: others' work on a shared machine)."""
    def count(name):
        try:
            out = subprocess.run(["pgrep", "-c", "-x", name], capture_output=True, text=True)
        except OSError:
            return -1
        return int(out.stdout.strip() or 0)
    return "load %.2f %.2f %.2f, cc1plus: %d, ctest: %d, troikarun: %d, horovodrun: %d" % (
        os.getloadavg() + (count("cc1plus"), count("ctest"), count("troikarun"),
                           count("horovodrun")))


def machine():
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "%s UTC, %s, %d CPUs (%s), Python %s" % (
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        platform.node(), os.cpu_count(), cpu, platform.python_version())


def stop(proc):
    """Ends a run's whole process group (launcher, agents, ranks): SIGTERM, then SIGKILL."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def run(cmd, env, timeout):
    """The output of cmd, run in a session of its own that is ended on a timeout, an error or an
    interruption (no rank outlives its run)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        text = proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        stop(proc)
        raise RunError("timed out after %d s: %s" % (timeout, " ".join(cmd)))
    finally:
        stop(proc)
    if proc.returncode != 0:
        raise RunError("failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd), text[-4000:]))
    return text


class RunError(Exception):
    pass


def find(pattern, text, what):
    m = re.search(pattern, text)
    if not m:
        raise RunError("no %s in the output:\n%s" % (what, text[-4000:]))
    return float(m.group(1))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(args):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = args.omp_threads or env.get("OMP_NUM_THREADS") or "1"
    env["MXNET_CPU_WORKER_NTHREADS"] = (args.engine_threads
                                        or env.get("MXNET_CPU_WORKER_NTHREADS") or "1")
    env.setdefault("PYTHONPATH", os.path.join(args.build, "python"))
    return env


def troika_cmd(args, n, script, script_args):
    return [args.troikarun, "-np", str(n), "--", args.python, script] + script_args


def horovod_cmd(args, n, script, script_args):
    return [args.horovodrun, "--gloo", "-np", str(n), "-H", "localhost:%d" % n,
            args.hvd_python, script] + script_args


def kvstore_run(args, env, n, script_args):
    """N workers, --kv-servers servers and a scheduler of MXNet's dist_sync KVStore, as
    dmlc_tracker's local launcher starts them; worker 0's output."""
    env = dict(env, TROIKA_BENCH_IMPL="kvstore", DMLC_PS_ROOT_URI="127.0.0.1",
               DMLC_PS_ROOT_PORT=str(free_port()), DMLC_NUM_WORKER=str(n),
               DMLC_NUM_SERVER=str(args.kv_servers), DMLC_NODE_HOST="127.0.0.1",
               DMLC_INTERFACE="lo")
    # Importing mxnet as a scheduler or server runs that role's loop and exits there.
    roles = [("scheduler", [args.hvd_python, "-c", "import mxnet"])]
    roles += [("server", [args.hvd_python, "-c", "import mxnet"])] * args.kv_servers
    roles += [("worker", [args.hvd_python, SYNTHETIC] + script_args)] * n
    procs = []
    try:
        for role, cmd in roles:
            procs.append(subprocess.Popen(cmd, env=dict(env, DMLC_ROLE=role),
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True, start_new_session=True))
        deadline = time.monotonic() + args.timeout
        outs = []
        for p in procs:
            outs.append(p.communicate(timeout=max(1, deadline - time.monotonic()))[0])
    except subprocess.TimeoutExpired:
        raise RunError("kvstore: timed out after %d s" % args.timeout)
    finally:
        for p in procs:
            stop(p)
    bad = [(role, p.returncode) for (role, _), p in zip(roles, procs) if p.returncode != 0]
    if bad:
        raise RunError("kvstore: %s exited with %s\n%s" % (
            ", ".join(r for r, _ in bad), [c for _, c in bad], "\n".join(outs)[-4000:]))
    worker0 = [o for (role, _), o in zip(roles, outs) if role == "worker"
               and "Total img/sec" in o]
    return worker0[0] if worker0 else "\n".join(outs)


def available(args, env):
    """{impl: None if it can run, else why not}."""
    why = {}
    check = subprocess.run([args.python, "-c", "import troika.mxnet"], env=env,
                           capture_output=True, text=True)
    if not os.path.exists(args.troikarun):
        why["troika"] = "no %s" % args.troikarun
    elif check.returncode != 0:
        last = (check.stderr.strip().splitlines() or ["?"])[-1]
        why["troika"] = "import troika.mxnet fails with %s (PYTHONPATH=%s): %s" % (
            args.python, env.get("PYTHONPATH"), last)
    else:
        why["troika"] = None
    why["horovod"] = (None if os.path.exists(args.horovodrun) else
                      "no %s (scripts/horovod_mxnet_baseline.sh builds it)" % args.horovodrun)
    why["kvstore"] = (None if os.path.exists(args.hvd_python) else "no %s" % args.hvd_python)
    return why


def fmt(x):
    return "-" if x is None else ("%.0f" % x if x >= 100 else "%.3g" % x)


def ratio(a, b):
    return "-" if a is None or not b else "%.2f" % (a / b)


def median_or_none(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def rounds(args, name, impls, one):
    """--repeat rounds of one(impl, n) for every n and impl (the first impl rotates):
    {(impl, n): [figure or None per run]}."""
    figures = {(impl, n): [] for impl in impls for n in args.np}
    for rep in range(args.repeat):
        for n in args.np:
            shift = rep % len(impls)
            for impl in impls[shift:] + impls[:shift]:
                state = load()
                try:
                    value = one(impl, n)
                    note = ""
                except RunError as e:
                    value = None
                    note = "  FAILED: %s" % str(e).splitlines()[0]
                    sys.stderr.write(str(e) + "\n")
                figures[(impl, n)].append(value)
                print("run %d %-8s %d ranks: %s %s   (at start: %s)%s"
                      % (rep + 1, impl, n, fmt(value), name, state, note), flush=True)
    return figures


def table(args, title, unit, impls, figures):
    print("\n%s, medians of %d runs:" % (title, args.repeat))
    cols = impls[:]
    header = "| ranks | " + " | ".join("%s %s" % (i, unit) for i in cols)
    if "troika" in cols and "horovod" in cols:
        header += " | troika/horovod"
    if "troika" in cols and "kvstore" in cols:
        header += " | troika/kvstore"
    print(header + " |")
    print("|---" * (header.count("|")) + "|")
    for n in args.np:
        m = {i: median_or_none(figures[(i, n)]) for i in cols}
        row = "| %d | " % n + " | ".join(fmt(m[i]) for i in cols)
        if "troika" in cols and "horovod" in cols:
            row += " | " + ratio(m["troika"], m["horovod"])
        if "troika" in cols and "kvstore" in cols:
            row += " | " + ratio(m["troika"], m["kvstore"])
        print(row + " |", flush=True)


def main():
    args = parse_args()
    env = base_env(args)
    print("mxnet_bench: %s" % machine())
    print("ranks %s as processes, repeat %d; OMP_NUM_THREADS=%s MXNET_CPU_WORKER_NTHREADS=%s; %s"
          % (",".join(map(str, args.np)), args.repeat, env["OMP_NUM_THREADS"],
             env["MXNET_CPU_WORKER_NTHREADS"], load()), flush=True)
    why = available(args, env)
    for impl, reason in why.items():
        if reason:
            print("%s: skipped: %s" % (impl, reason), flush=True)

    if not args.skip_synthetic:
        impls = [i for i in args.impls if not why[i]]
        script_args = ["--model", args.model, "--batch-size", str(args.batch_size),
                       "--image-size", str(args.image_size), "--num-iters", str(args.num_iters),
                       "--num-batches-per-iter", str(args.num_batches_per_iter),
                       "--num-warmup-batches", str(args.num_warmup_batches)]
        print("\n# synthetic benchmark: %s" % " ".join(script_args), flush=True)

        def one(impl, n):
            if impl == "kvstore":
                return find(TOTAL, kvstore_run(args, env, n, script_args), "total img/sec")
            cmd = (troika_cmd if impl == "troika" else horovod_cmd)(args, n, SYNTHETIC,
                                                                     script_args)
            text = run(cmd, dict(env, TROIKA_BENCH_IMPL=impl), args.timeout)
            return find(TOTAL, text, "total img/sec")

        if impls:
            figures = rounds(args, "img/sec", impls, one)
            table(args, "synthetic benchmark (%s, batch %d per rank, %dx%d), total img/sec"
                  % (args.model, args.batch_size, args.image_size, args.image_size),
                  "img/sec", impls, figures)

    if not args.skip_allreduce:
        impls = [i for i in ("troika", "horovod") if not why[i]]
        script_args = ["--mib", "%g" % args.allreduce_mib, "--iters", str(args.allreduce_iters),
                       "--warmup", str(args.allreduce_warmup)]
        print("\n# allreduce_: %s" % " ".join(script_args), flush=True)

        def one(impl, n):
            cmd = (troika_cmd if impl == "troika" else horovod_cmd)(args, n, ALLREDUCE,
                                                                     script_args)
            text = run(cmd, dict(env, TROIKA_BENCH_IMPL=impl), args.timeout)
            return find(BUSBW, text, "busbw")

        if impls:
            figures = rounds(args, "GB/s busbw", impls, one)
            table(args, "%g MiB float32 hvd.allreduce_, busbw" % args.allreduce_mib, "GB/s",
                  impls, figures)
    print("\ndone; %s" % load(), flush=True)


if __name__ == "__main__":
    main()
