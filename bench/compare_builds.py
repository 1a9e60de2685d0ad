#!/usr/bin/env python3
"""Two builds of Troika side by side, alternating, on the benchmarks that cover every layer.

For a change that must not change performance (a reshape), or to measure one that should:

  bench/compare_builds.py --base BASE_BUILD --new NEW_BUILD [--rounds 3]

BASE_BUILD and NEW_BUILD are build directories (e.g. a `git worktree` of the commit before,
built with `cmake --build B --target troika-bench troika-control-bench troika-coordinator
troika-example-train troikarun troika-agent`). Each round runs every benchmark once per build,
the order alternating between rounds, so slow drift on a shared machine hits both alike:

  - troika-bench --np 4 --schedules=true [--transport T]: allreduce busbw at 4 B .. 64 MiB,
    4-byte latency, many small tensors (the data plane, the client library and an in-process
    coordinator);
  - troika-control-bench --np 8 --nodes 2: messages and bytes per step up, direct and through
    agents (the control plane and the agent);
  - troika-load-bench (NEW_BUILD's, against each build's troika-coordinator): steps/s and p50
    latency of 256 simulated ranks, aggregated with the cache and direct without (the
    coordinator under load).

Prints each figure's median per build and new/base. Exit status 0 unless a benchmark failed.
"""

import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
import tempfile

BENCH_OPS = "allreduce,latency,many_small"
# troika-bench's flags for both builds: schedules on, the product's default, named because
# builds from before 2026-11-27 defaulted to off; --transport adds the data plane when given
# (else each build's own default: Gloo before d483b7d, shared memory on one host after).
BENCH_FLAGS = ["--schedules=true"]


def run(cmd, cwd):
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=1200)
    if result.returncode != 0:
        sys.stderr.write(f"compare_builds: {' '.join(cmd)} failed ({result.returncode}):\n"
                         f"{result.stdout[-2000:]}{result.stderr[-2000:]}\n")
        raise SystemExit(1)
    return result.stdout


def troika_bench(build, figures):
    with tempfile.NamedTemporaryFile(suffix=".csv") as out:
        run([os.path.join(build, "bench/troika-bench"), "--np", "4", "--ops", BENCH_OPS,
             "--step_factor", "64", "--csv", out.name] + BENCH_FLAGS, build)
        for row in csv.DictReader(open(out.name)):
            op, size = row["op"], int(row["bytes"])
            if op == "allreduce":
                figures.setdefault(f"allreduce {size} B busbw GB/s (troika)", []).append(
                    float(row["troika_busbw_gbps"]))
                figures.setdefault(f"allreduce {size} B troika/raw", []).append(
                    float(row["troika_over_raw"]))
            elif op == "latency":
                figures.setdefault("allreduce 4 B latency us (troika)", []).append(
                    float(row["troika_time_us"]))
                figures.setdefault("allreduce 4 B latency raw/troika", []).append(
                    float(row["troika_over_raw"]))
            elif op == "many_small":
                figures.setdefault("256 x 16 KiB steps/s (troika)", []).append(
                    1e6 / float(row["troika_time_us"]))


def control_bench(build, figures):
    out = run([os.path.join(build, "bench/troika-control-bench"), "--np", "8", "--nodes", "2"],
              build)
    for line in out.splitlines():
        m = re.match(r"(direct|through agents) \(1/(?:rank|node)\), cache (on|off)\s+"
                     r"([\d.]+)\s+([\d.]+)\s+([\d.]+)", line)
        if m:
            mode = f"{m.group(1)}, cache {m.group(2)}"
            figures.setdefault(f"control: up msgs/step, {mode}", []).append(float(m.group(3)))
            figures.setdefault(f"control: up bytes/step, {mode}", []).append(float(m.group(4)))


def load_bench(build, new_build, figures):
    # 256 simulated ranks attach at once; on a loaded 2-core machine an attach can miss its
    # deadline: such a run is repeated (at most twice more) rather than counted.
    for attempt in range(3):
        out = run([os.path.join(new_build, "bench/troika-load-bench"), "--ranks", "256",
                   "--modes", "agg+cache,direct", "--seconds", "5", "--coordinator",
                   os.path.join(build, "coordinator/troika-coordinator")], new_build)
        rows = [line.split() for line in out.splitlines() if line.split()[:1] == ["256"]]
        failed = [" ".join(row) for row in rows if "failed:" in row]
        if not failed:
            break
        sys.stderr.write(f"compare_builds: load bench against {build}: {failed[0]}; "
                         f"{'again' if attempt < 2 else 'giving up'}\n")
    else:
        raise SystemExit(1)
    for fields in rows:
        if len(fields) == 9:
            figures.setdefault(f"load 256 ranks {fields[1]}: steps/s", []).append(float(fields[3]))
            figures.setdefault(f"load 256 ranks {fields[1]}: p50 us", []).append(float(fields[5]))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the build to compare against")
    parser.add_argument("--new", required=True, help="the build under test")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--transport", default=None,
                        help="troika-bench --transport for both builds (gloo, shm, auto); "
                             "default: each build's own default")
    args = parser.parse_args()
    if args.transport:
        BENCH_FLAGS.extend(["--transport", args.transport])
    builds = {"base": os.path.abspath(args.base), "new": os.path.abspath(args.new)}
    figures = {"base": {}, "new": {}}
    for round_ in range(args.rounds):
        order = ["base", "new"] if round_ % 2 == 0 else ["new", "base"]
        for bench in (troika_bench, control_bench, load_bench):
            for which in order:
                print(f"round {round_ + 1}/{args.rounds}: {bench.__name__} ({which})",
                      file=sys.stderr, flush=True)
                if bench is load_bench:
                    bench(builds[which], builds["new"], figures[which])
                else:
                    bench(builds[which], figures[which])
    print(f"{'figure':<48} {'base':>12} {'new':>12} {'new/base':>9}   (medians of {args.rounds})")
    for name in figures["base"]:
        base = statistics.median(figures["base"][name])
        new = statistics.median(figures["new"].get(name, [float("nan")]))
        ratio = new / base if base else float("nan")
        print(f"{name:<48} {base:>12.4g} {new:>12.4g} {ratio:>9.3f}")


if __name__ == "__main__":
    main()
