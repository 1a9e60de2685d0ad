#!/usr/bin/env python3
"""troika.torch against torch DDP and the C++ API, side by side (docs/PERFORMANCE.md).

1. The synthetic benchmark (examples/pytorch/pytorch_synthetic_benchmark.py) on --np ranks
   as separate processes: Troika (troikarun -np N -- python3 the example) vs
   torch.nn.parallel.DistributedDataParallel (bench/ddp_synthetic_benchmark.py started as N
   processes: the same model, batch, loop and report) — on the CPU over gloo, or on the GPUs
   over NCCL where torch sees them (one per rank; scripts/gpu_bundle.sh runs it on 1 rank). The two alternate within each
   repetition (which goes first alternates too). Figure: total img/sec; target Troika >= DDP.
2. The Python layer's cost: a 4-byte allreduce through troika.torch (hvd.allreduce) vs the C++
   API, in alternating blocks in the same ranks of one troikarun -np N job
   (bench/torch_allreduce_latency.py; the C++ loop is BUILD/bench/libtroika_bench_loop.so).
   Target: <= 1.2x. Beside them the compiled module alone and "module+alloc" (the module plus
   the torch calls any out-of-place front end makes: the share of troika.torch's own code).
3. Issue 36's workloads (64 MiB and 1 MiB allreduce, 4-byte allreduce, 256 x 16 KiB
   allreduces per step, 64 MiB allgather, 64 MiB broadcast) through troika.torch vs the C++
   API, in alternating blocks in the same ranks of one troikarun -np N job
   (bench/torch_workloads.py: the C++ side is troika-bench's own workloads, in
   libtroika_bench_loop.so). Figure: C++ API time / troika.torch time per workload and call;
   target >= 0.9. Beside them, troika-bench itself (troikarun -np N -- troika-bench
   --job_rank: ranks as processes of a troikarun job, as troika.torch's, with the product's
   defaults), one run per repetition, for the figures of issue 36's table. --before PYTHONPATH runs another troika
   package's troika.torch (another checkout's build/python) alternately in the same repetitions:
   before and after, side by side. Run with --workloads all (or a list); not by default.

Prints every run, the medians of --repeat runs and the ratios, and the machine's load
(load average, compilers - cc1plus - and ctest runs of others) at each run's start.

    python3 bench/torch_bench.py                    # from the repository root, after the build
    python3 bench/torch_bench.py --repeat 3 --np 4 --model resnet --batch-size 32
    python3 bench/torch_bench.py --skip-synthetic --skip-latency --workloads all   # part 3 only

Uses PYTHONPATH if set (else BUILD/python) for the ranks' `import troika.torch`.
"""

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args():
    p = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--troikarun", default=None, help="default: BUILD/agent/troikarun")
    p.add_argument("--python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3")
                   else sys.executable, help="the ranks' interpreter (with torch)")
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--model", default="resnet")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--num-iters", type=int, default=10)
    p.add_argument("--num-batches-per-iter", type=int, default=10)
    p.add_argument("--num-warmup-batches", type=int, default=5)
    p.add_argument("--troika-groups", default="0",
                   help="Troika's variants, comma-separated: DistributedOptimizer(groups=N) for "
                        "each N (0: none, the default optimizer); e.g. 0,1 runs both beside DDP")
    p.add_argument("--troika-cycle-times", default="",
                   help="more Troika variants, comma-separated: the default optimizer with "
                        "troikarun --cycle-time-ms MS for each MS (e.g. 20,50)")
    p.add_argument("--troika-negotiated", action="store_true",
                   help="one more Troika variant: the default optimizer with troikarun "
                        "--schedules off (every collective negotiated)")
    p.add_argument("--troika-schedules", action="store_true",
                   help="one more Troika variant: troikarun --schedules on (the default since "
                        "2026-11-26; for figures of builds before)")
    p.add_argument("--latency-iters", type=int, default=2000)
    p.add_argument("--skip-synthetic", action="store_true")
    p.add_argument("--skip-latency", action="store_true")
    p.add_argument("--workloads", default="",
                   help="part 3, issue 36's workloads: 'all', or a comma-separated list of "
                        "bench/torch_workloads.py's; default none")
    p.add_argument("--workload-blocks", type=int, default=6,
                   help="alternating blocks per mode and workload")
    p.add_argument("--skip-troika-bench", action="store_true",
                   help="workloads: no troika-bench run beside the troika.torch job")
    p.add_argument("--before", default=None,
                   help="workloads: the PYTHONPATH of another troika package (e.g. an older "
                        "build/python), run alternately with this one (label 'before')")
    p.add_argument("--no-cuda", action="store_true",
                   help="the synthetic benchmark on the CPU even where torch sees GPUs")
    args = p.parse_args()
    unknown = [w for w in args.workloads.split(",") if w and w != "all" and w not in WORKLOADS]
    if unknown:
        p.error("--workloads: unknown %s (known: all, %s)"
                % (", ".join(unknown), ", ".join(WORKLOADS)))
    return args


def load():
    """The machine's load: load average and the count of compilers and ctest runs (others'
    work on a shared machine)."""
    def count(name):
        try:
            out = subprocess.run(["pgrep", "-c", "-x", name], capture_output=True, text=True)
        except OSError:  # no pgrep (a GPU machine's image)
            return -1
        return int(out.stdout.strip() or 0)
    return "load %.2f %.2f %.2f, cc1plus: %d, ctest: %d" % (
        os.getloadavg() + (count("cc1plus"), count("ctest")))


def run(cmd, env, timeout=900):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    text = out.stdout + out.stderr
    if out.returncode != 0:
        sys.stderr.write(text)
        raise SystemExit("failed (%d): %s" % (out.returncode, " ".join(cmd)))
    return text


def find(pattern, text, what):
    m = re.search(pattern, text)
    if not m:
        sys.stderr.write(text)
        raise SystemExit("no %s in the output" % what)
    return float(m.group(1))


TOTAL = r"Total img/sec on \d+ [CG]PU\(s\): ([0-9.]+)"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def troika_synthetic(args, env, bench_args, variant):
    groups, cycle_ms, schedules = variant
    cmd = [args.troikarun, "-np", str(args.np)]
    if cycle_ms is not None:
        cmd += ["--cycle-time-ms", cycle_ms]
    if schedules is not None:
        cmd += ["--schedules", "on" if schedules else "off"]
    cmd += ["--", args.python,
            os.path.join(ROOT, "examples", "pytorch", "pytorch_synthetic_benchmark.py")]
    if groups:
        bench_args = bench_args + ["--groups", str(groups)]
    return find(TOTAL, run(cmd + bench_args, env), "total img/sec")


def ddp_synthetic(args, env, bench_args, _):
    port = free_port()
    procs = []
    for r in range(args.np):
        e = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                 LOCAL_RANK=str(r), WORLD_SIZE=str(args.np))
        procs.append(subprocess.Popen(
            [args.python, os.path.join(ROOT, "bench", "ddp_synthetic_benchmark.py")] + bench_args,
            env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=900)[0] for p in procs]
    if any(p.returncode != 0 for p in procs):
        sys.stderr.write("\n".join(outs))
        raise SystemExit("a DDP rank failed")
    return find(TOTAL, outs[0], "total img/sec")


def median(xs):
    return statistics.median(xs)


# Issue 36's workloads (bench/torch_workloads.py): name -> (figure, bytes, bus factor on n
# ranks); figure "busbw" (GB/s, nccl-tests' busbw as troika-bench's), "us" or "steps/s".
WORKLOADS = {
    "allreduce_64M": ("busbw", 64 << 20, lambda n: 2 * (n - 1) / n),
    "allreduce_1M": ("busbw", 1 << 20, lambda n: 2 * (n - 1) / n),
    "latency": ("us", 4, None),
    "many_small": ("steps/s", 256 * 16384, None),
    "allgather_64M": ("busbw", 64 << 20, lambda n: (n - 1) / n),
    "broadcast_64M": ("busbw", 64 << 20, lambda n: 1.0),
}
# troika-bench's CSV rows for them: (op, bytes).
TROIKA_BENCH_ROWS = {
    "allreduce_64M": ("allreduce", 64 << 20), "allreduce_1M": ("allreduce", 1 << 20),
    "latency": ("latency", 4), "many_small": ("many_small", None),
    "allgather_64M": ("allgather", 64 << 20), "broadcast_64M": ("broadcast", 64 << 20),
}


def figure(workload, seconds, ranks):
    """A workload's figure from its seconds per iteration."""
    kind, nbytes, factor = WORKLOADS[workload]
    if kind == "us":
        return seconds * 1e6
    if kind == "steps/s":
        return 1 / seconds
    return nbytes / seconds / 1e9 * factor(ranks)


def torch_workloads_run(args, env, pythonpath):
    """One troikarun job of bench/torch_workloads.py: {(workload, mode): seconds/iteration}."""
    cmd = [args.troikarun, "-np", str(args.np), "--", args.python,
           os.path.join(ROOT, "bench", "torch_workloads.py"), "--blocks",
           str(args.workload_blocks), "--loop-lib",
           os.path.join(args.build, "bench", "libtroika_bench_loop.so")]
    if args.workloads != "all":
        cmd += ["--workloads", args.workloads]
    text = run(cmd, dict(env, PYTHONPATH=pythonpath))
    out = {}
    for m in re.finditer(r"\] (\S+) (.+?): ([0-9.]+) us per iteration.*CPU ([0-9.]+) us", text):
        out[(m.group(1), m.group(2))] = float(m.group(3)) / 1e6
        out[(m.group(1), m.group(2), "cpu")] = float(m.group(4)) / 1e6
    if not out:
        sys.stderr.write(text)
        raise SystemExit("no figures from bench/torch_workloads.py")
    return out


def troika_bench_run(args, env):
    """One troika-bench run of the same workloads (ranks as the processes of a troikarun job,
    the product's defaults): {workload: seconds/iteration} of its troika column."""
    csv = os.path.join(args.build, "bench", "torch_bench_workloads.csv")
    run([args.troikarun, "-np", str(args.np), "--",
         os.path.join(args.build, "bench", "troika-bench"), "--job_rank",
         "--ops", "allreduce,allgather,broadcast,many_small,latency",
         "--min_bytes", "1MiB", "--max_bytes", "64MiB", "--step_factor", "64", "--csv", csv],
        env)
    rows = {}
    with open(csv) as f:
        header = f.readline().strip().split(",")
        for line in f:
            r = dict(zip(header, line.strip().split(",")))
            rows[(r["op"], int(r["bytes"]))] = float(r["troika_time_us"]) / 1e6
            rows[(r["op"], None)] = rows[(r["op"], int(r["bytes"]))]
    return {w: rows[key] for w, key in TROIKA_BENCH_ROWS.items() if key in rows}


def step_ratio(r, workload):
    """A training step's ratio: the backward pass then the C++ API's allreduces, in each
    iteration, against the backward pass through DistributedOptimizer's hooks then its
    synchronize()."""
    return r[(workload, "backward + c++ api")] / r[(workload, "DistributedOptimizer")]


def share_ratio(r, workload):
    """What DistributedOptimizer adds to the backward pass, against the C++ API's allreduces."""
    return r[(workload, "c++ api")] / (r[(workload, "DistributedOptimizer")]
                                       - r[(workload, "backward alone")])


def hooks_floor(r, workload):
    """step_ratio's best for a front end that learns of each gradient from a Python hook."""
    cpp = r[(workload, "c++ api")]
    return (r[(workload, "backward alone")] + cpp) / (r[(workload, "backward, empty hooks")] + cpp)


def workloads(args, env):
    """Issue 36's workloads: troika.torch vs the C++ API in the same ranks, and troika-bench."""
    print("\n# issue 36's workloads, %d ranks: troika.torch vs the C++ API (troika-bench's "
          "workloads) in the same ranks of one job, %d alternating blocks per mode"
          % (args.np, args.workload_blocks), flush=True)
    packages = [("after" if args.before else "troika", env["PYTHONPATH"])]
    if args.before:
        packages.insert(0, ("before", args.before))
    runs = {label: [] for label, _ in packages}
    bench_runs = []
    steps = [(label, path) for label, path in packages]
    if not args.skip_troika_bench:
        steps.append(("troika-bench", None))
    for i in range(args.repeat):
        shift = i % len(steps)
        for label, path in steps[shift:] + steps[:shift]:
            state = load()
            if path is None:
                bench_runs.append(troika_bench_run(args, env))
                print("run %d troika-bench (processes): %s   (at start: %s)" % (
                    i + 1, ", ".join("%s %.1f us" % (w, 1e6 * t)
                                     for w, t in bench_runs[-1].items()), state), flush=True)
                continue
            r = torch_workloads_run(args, env, path)
            runs[label].append(r)
            cpp = {k[0]: t for k, t in r.items() if k[1] == "c++ api" and len(k) == 2}
            print("run %d %s: %s   (at start: %s)" % (i + 1, label, "; ".join(
                "%s %s %.2f" % (k[0], k[1], cpp[k[0]] / t) for k, t in r.items()
                if k[1] != "c++ api" and len(k) == 2), state), flush=True)
    print("\nmedians of %d; (ratio) = C++ API time / troika.torch time in the same run "
          "(target >= 0.9); cpu = the calling thread's CPU per iteration (the most of any rank)"
          % args.repeat, flush=True)
    first = runs[packages[-1][0]][0]
    for workload in [w for w in WORKLOADS if (w, "c++ api") in first]:
        unit = WORKLOADS[workload][0]
        modes = [k[1] for k in first if k[0] == workload and len(k) == 2]
        for label, _ in packages:
            rs = runs[label]
            line = "%-14s %-6s" % (workload, label)
            for mode in [m for m in modes if (workload, m) in rs[0]]:  # a package may lack one
                t = median([r[(workload, mode)] for r in rs])
                c = median([r[(workload, mode, "cpu")] for r in rs])
                line += " | %s %.3f %s" % (mode, figure(workload, t, args.np), unit)
                if mode != "c++ api":
                    line += " (%.2f)" % median([r[(workload, "c++ api")] / r[(workload, mode)]
                                                for r in rs])
                line += " cpu %.0f us" % (1e6 * c)
            print(line, flush=True)
        for label, _ in packages:  # the step through DistributedOptimizer (issue 49)
            rs = [r for r in runs[label] if (workload, "DistributedOptimizer") in r]
            if rs:
                print("%-14s %-6s DistributedOptimizer step: (backward + C++ API) / "
                      "DistributedOptimizer %.2f; C++ API / (DistributedOptimizer - backward "
                      "alone) %.2f" % (workload, label, median([step_ratio(r, workload)
                                                              for r in rs]),
                                       median([share_ratio(r, workload) for r in rs])),
                      flush=True)
            rs = [r for r in rs if (workload, "backward, empty hooks") in r]
            if rs:
                print("%-14s %-6s the floor of a front end hooked on each gradient: (backward "
                      "alone + C++ API) / (backward, empty hooks + C++ API) %.2f"
                      % (workload, label, median([hooks_floor(r, workload) for r in rs])),
                      flush=True)
        if bench_runs:
            t = median([b[workload] for b in bench_runs if workload in b])
            print("%-14s troika-bench (processes) %9.3f %s" % (workload,
                                                             figure(workload, t, args.np), unit),
                  flush=True)


def main():
    args = parse_args()
    args.troikarun = args.troikarun or os.path.join(args.build, "agent", "troikarun")
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", os.path.join(args.build, "python"))
    print("torch_bench: %d ranks (separate processes), repeat %d; %s"
          % (args.np, args.repeat, load()), flush=True)

    if not args.skip_synthetic:
        bench_args = ["--model", args.model, "--batch-size", str(args.batch_size),
                      "--num-iters", str(args.num_iters),
                      "--num-batches-per-iter", str(args.num_batches_per_iter),
                      "--num-warmup-batches", str(args.num_warmup_batches)]
        if args.no_cuda:
            bench_args.append("--no-cuda")
        print("\n# synthetic benchmark: %s" % " ".join(bench_args), flush=True)
        variants = [("troika" + (" groups=%d" % g if g else ""), troika_synthetic,
                     (g, None, None)) for g in (int(x) for x in args.troika_groups.split(","))]
        variants += [("troika cycle=%sms" % c, troika_synthetic, (0, c, None))
                     for c in args.troika_cycle_times.split(",") if c]
        if args.troika_schedules:
            variants.append(("troika schedules", troika_synthetic, (0, None, True)))
        if args.troika_negotiated:
            variants.append(("troika negotiated", troika_synthetic, (0, None, False)))
        variants.append(("ddp", ddp_synthetic, None))
        figures = {name: [] for name, _, _ in variants}
        for i in range(args.repeat):
            # Which goes first rotates from one repetition to the next.
            shift = i % len(variants)
            for name, fn, groups in variants[shift:] + variants[:shift]:
                state = load()
                figures[name].append(fn(args, env, bench_args, groups))
                print("run %d %-18s total %8.1f img/sec   (at start: %s)"
                      % (i + 1, name, figures[name][-1], state), flush=True)
        d = median(figures["ddp"])
        for name, _, _ in variants[:-1]:
            t = median(figures[name])
            print("median total img/sec: %s %.1f, ddp %.1f; %s/ddp %.2f "
                  "(target >= 1.0: %s)" % (name, t, d, name, t / d,
                                           "met" if t >= d else "NOT met"), flush=True)

    if not args.skip_latency:
        print("\n# 4-byte allreduce latency, %d ranks, %d iterations per run"
              % (args.np, args.latency_iters), flush=True)
        py = {"c++ api": [], "module": [], "module+alloc": [], "torch": [], "torch_": []}
        for i in range(args.repeat):
            state = load()
            text = run([args.troikarun, "-np", str(args.np), "--", args.python,
                        os.path.join(ROOT, "bench", "torch_allreduce_latency.py"),
                        "--iters", str(args.latency_iters), "--loop-lib",
                        os.path.join(args.build, "bench", "libtroika_bench_loop.so")], env)
            for mode in py:
                py[mode].append(find(r"\] %s: ([0-9.]+) us" % re.escape(mode), text, mode))
            print("run %d: c++ api %.1f us, module %.1f us, module+alloc %.1f us, "
                  "hvd.allreduce %.1f us, hvd.allreduce_ %.1f us   (at start: %s)"
                  % (i + 1, py["c++ api"][-1], py["module"][-1], py["module+alloc"][-1],
                     py["torch"][-1], py["torch_"][-1], state), flush=True)
        m = {k: median(v) for k, v in py.items()}
        c = m["c++ api"]
        r = m["torch"] / c
        print("median: c++ api %.1f us, troika._troika module %.1f us (%.2fx), module+alloc "
              "%.1f us (%.2fx), hvd.allreduce %.1f us (%.2fx), hvd.allreduce_ %.1f us (%.2fx); "
              "hvd.allreduce / c++ api %.2fx (target <= 1.2x: %s); troika.torch's own code: "
              "hvd.allreduce / module+alloc %.2fx, hvd.allreduce_ / module %.2fx"
              % (c, m["module"], m["module"] / c, m["module+alloc"], m["module+alloc"] / c,
                 m["torch"], m["torch"] / c, m["torch_"], m["torch_"] / c, r,
                 "met" if r <= 1.2 else "NOT met", m["torch"] / m["module+alloc"],
                 m["torch_"] / m["module"]), flush=True)
    if args.workloads:
        workloads(args, env)
    print("\ndone; %s" % load(), flush=True)


if __name__ == "__main__":
    main()
