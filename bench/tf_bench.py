#!/usr/bin/env python3
"""troika.tensorflow against tf.distribute.MultiWorkerMirroredStrategy, side by side
(docs/PERFORMANCE.md, "TensorFlow: Troika vs MultiWorkerMirroredStrategy").

The TensorFlow 2 synthetic benchmark on --np ranks as separate processes, two ways:
- Troika: troikarun -np N -- PYTHON examples/tensorflow2/tensorflow2_synthetic_benchmark.py
  (DistributedGradientTape in a tf.function step; troikarun's and the example's defaults).
- MWMS: bench/mwms_synthetic_benchmark.py started as N worker processes on localhost, each
  with its TF_CONFIG (one CPU replica per worker, the --implementation collectives): the same
  model, per-worker batch, tf.function step, loop and report.
Within each repetition each runs once, one after the other; which goes first rotates. Figure:
Horovod's "Total img/sec" (rank 0's mean x N); printed per run with the machine's load at its
start (load average, others' compilers - cc1plus - and ctest runs), then the medians and the
ratio Troika / MWMS. Target: >= 1.

--interleaved adds, per repetition, one troikarun -np N job of bench/tf_interleaved_steps.py:
the same step without communication, with Troika (per gradient, and groups=1) and with MWMS, in
alternating blocks of a few steps in the same processes, so that every variant sees the same
moments of a shared machine: ms per step (wall and CPU) and context switches per step, each
block after --settle untimed steps (a switch of variant changes Troika's step, which a job then
negotiates until its new steady-state schedule is published; their time is printed as well).

    python3 bench/tf_bench.py --np 2 --repeat 3        # from the repository root, after the build
    python3 bench/tf_bench.py --np 4 --repeat 5 --model cnn

Uses PYTHONPATH if set (else BUILD/python) for the ranks' `import troika.tensorflow`.
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "tensorflow2", "tensorflow2_synthetic_benchmark.py")
MWMS = os.path.join(ROOT, "bench", "mwms_synthetic_benchmark.py")
TOTAL = r"Total img/sec on \d+ [CG]PU\(s\): ([0-9.]+)"


def parse_args():
    p = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--troikarun", default=None, help="default: BUILD/agent/troikarun")
    p.add_argument("--python", default=None,
                   help="the ranks' interpreter, with TensorFlow (default: BUILD/venv/bin/python)")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--model", default="resnet", choices=("cnn", "resnet", "mlp"))
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--num-iters", type=int, default=10)
    p.add_argument("--num-batches-per-iter", type=int, default=10)
    p.add_argument("--num-warmup-batches", type=int, default=5)
    p.add_argument("--implementation", default="ring", choices=("ring", "auto"),
                   help="MWMS's collective implementation (CPU TensorFlow: both are its ring)")
    p.add_argument("--troika-groups", default="0",
                   help="Troika's variants, comma-separated: DistributedGradientTape(groups=N) "
                        "for each N (0: the default, one allreduce per gradient as produced); "
                        "e.g. 0,1 runs both beside MWMS")
    p.add_argument("--interleaved", action="store_true",
                   help="also bench/tf_interleaved_steps.py, one job per repetition")
    p.add_argument("--settle", type=int, default=10,
                   help="--interleaved: untimed steps at the start of every block, each variant "
                        "(bench/tf_interleaved_steps.py)")
    p.add_argument("--skip-jobs", action="store_true",
                   help="not the side-by-side jobs (with --interleaved: that part only)")
    p.add_argument("--timeout", type=int, default=900, help="seconds for one run")
    return p.parse_args()


def load():
    """The machine's load: load average and the count of compilers and ctest runs (others'
    work on a shared machine)."""
    def count(name):
        try:
            out = subprocess.run(["pgrep", "-c", "-x", name], capture_output=True, text=True)
        except OSError:  # no pgrep
            return -1
        return int(out.stdout.strip() or 0)
    return "load %.2f %.2f %.2f, cc1plus: %d, ctest: %d" % (
        os.getloadavg() + (count("cc1plus"), count("ctest")))


def total(text):
    m = re.search(TOTAL, text)
    if not m:
        sys.stderr.write(text)
        raise SystemExit("no total img/sec in the output")
    return float(m.group(1))


def troika(args, env, bench_args, groups):
    cmd = [args.troikarun, "-np", str(args.np), "--", args.python, EXAMPLE] + bench_args
    if groups:
        cmd += ["--groups", str(groups)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        raise SystemExit("troika failed (%d): %s" % (out.returncode, " ".join(cmd)))
    return total(out.stdout + out.stderr)


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("localhost", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def mwms(args, env, bench_args, _):
    workers = ["localhost:%d" % p for p in free_ports(args.np)]
    procs = []
    for i in range(args.np):
        config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
        procs.append(subprocess.Popen(
            [args.python, MWMS, "--implementation", args.implementation] + bench_args,
            env=dict(env, TF_CONFIG=json.dumps(config)), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    try:
        outs = [p.communicate(timeout=args.timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(p.returncode != 0 for p in procs):
        sys.stderr.write("\n".join(outs))
        raise SystemExit("an MWMS worker failed")
    return total(outs[0])


def side_by_side(args, env, bench_args):
    variants = [("troika" + (" groups=%d" % g if g else ""), troika, g)
                for g in (int(x) for x in args.troika_groups.split(","))]
    variants.append(("mwms", mwms, None))
    figures = {name: [] for name, _, _ in variants}
    for i in range(args.repeat):
        # Which goes first rotates from one repetition to the next.
        shift = i % len(variants)
        for name, fn, groups in variants[shift:] + variants[:shift]:
            state = load()
            figures[name].append(fn(args, env, bench_args, groups))
            print("run %d %-16s total %8.1f img/sec   (at start: %s)"
                  % (i + 1, name, figures[name][-1], state), flush=True)
    m = statistics.median(figures["mwms"])
    for name, _, _ in variants[:-1]:
        t = statistics.median(figures[name])
        ahead = sum(a > b for a, b in zip(figures[name], figures["mwms"]))
        print("median total img/sec: %s %.1f (%s), mwms %.1f (%s); %s/mwms %.2f "
              "(target >= 1.0: %s); ahead in %d of %d repetitions"
              % (name, t, ", ".join("%.1f" % x for x in figures[name]), m,
                 ", ".join("%.1f" % x for x in figures["mwms"]), name, t / m,
                 "met" if t >= m else "NOT met", ahead, args.repeat), flush=True)


INTERLEAVED = os.path.join(ROOT, "bench", "tf_interleaved_steps.py")
STEP_LINE = r"^\[0\] (plain|troika|troika g1|mwms)\s*: ([0-9.]+) ms/step .*cpu ([0-9.]+) ms/step"


def interleaved(args, env, bench_args):
    print("# the step in the same processes, alternating blocks (bench/tf_interleaved_steps.py)",
          flush=True)
    wall, cpu = {}, {}
    for i in range(args.repeat):
        state = load()
        ports = ",".join(str(p) for p in free_ports(args.np))
        cmd = ([args.troikarun, "-np", str(args.np), "--", args.python, INTERLEAVED,
                "--mwms-ports", ports, "--settle", str(args.settle)] + bench_args)
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
        text = out.stdout + out.stderr
        found = re.findall(STEP_LINE, text, re.M)
        if out.returncode != 0 or len(found) != 4:
            sys.stderr.write(text)
            raise SystemExit("interleaved failed (%d): %s" % (out.returncode, " ".join(cmd)))
        print("run %d (at start: %s)" % (i + 1, state), flush=True)
        for line in text.splitlines():
            if re.match(r"\[0\] (model |plain|troika|mwms)", line):
                print("  " + line[4:], flush=True)
        for name, w, c in found:
            wall.setdefault(name, []).append(float(w))
            cpu.setdefault(name, []).append(float(c))
    # Each run's own ratios first (its variants saw the same moments), then their medians.
    for name in ("plain", "troika", "troika g1", "mwms"):
        over = [w - p for w, p in zip(wall[name], wall["plain"])]
        speed = [m / w for w, m in zip(wall[name], wall["mwms"])]
        cpu_over = [c - p for c, p in zip(cpu[name], cpu["plain"])]
        print("median %-9s %.2f ms/step, %+.2f over plain; cpu %.2f ms/step, %+.2f over plain; "
              "speed / mwms's %.2f (runs: %s)"
              % (name, statistics.median(wall[name]), statistics.median(over),
                 statistics.median(cpu[name]), statistics.median(cpu_over),
                 statistics.median(speed), ", ".join("%.2f" % x for x in speed)), flush=True)

def main():
    args = parse_args()
    args.troikarun = args.troikarun or os.path.join(args.build, "agent", "troikarun")
    args.python = args.python or os.path.join(args.build, "venv", "bin", "python")
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", os.path.join(args.build, "python"))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    bench_args = ["--model", args.model, "--batch-size", str(args.batch_size),
                  "--num-iters", str(args.num_iters),
                  "--num-batches-per-iter", str(args.num_batches_per_iter),
                  "--num-warmup-batches", str(args.num_warmup_batches)]
    print("# TensorFlow synthetic benchmark, %d ranks: %s; MWMS %s collectives"
          % (args.np, " ".join(bench_args), args.implementation), flush=True)
    if not args.skip_jobs:
        side_by_side(args, env, bench_args)
    if args.interleaved:
        interleaved(args, env, bench_args)
    print("done; %s" % load(), flush=True)


if __name__ == "__main__":
    main()
