#!/usr/bin/env python3
"""Issue 36's shared-memory comparison: in one run, 4 ranks as processes each time,

  gloo:  troikarun -np N -- troika-bench --job_rank --transport gloo   (TROIKA_TRANSPORT=gloo)
         raw Gloo (the communicator Troika runs on, called directly) and Troika over Gloo,
  shm:   the same with --transport shm (TROIKA_TRANSPORT=shm): raw shm and Troika over shm,
  default: the same with neither set: Troika over the product's default data plane (what a
         user gets; its name from troika-bench's first line),
  mpi:   mpirun --allow-run-as-root --oversubscribe -np N --mca btl self,vader
         troika-mpi-bench (Open MPI's shared memory; skipped where it is not built),
  torch: bench/torch_flat_bucket.py as N torch.distributed (gloo) processes: the 256 x 16 KiB
         tensors as one flattened bucket (skipped without torch),

alternating (the first of them rotates from one repetition to the next), with the product's
defaults for Troika (troikarun's: schedules on, 1 ms cycle, 64 MiB fusion), on the workloads
of issue 36's table: 64 MiB allreduce busbw (float32 sum), 4-byte allreduce latency, 256 x
16 KiB allreduces per step, 64 MiB allgather and broadcast busbw. Prints every run, the medians
of --repeat runs, the same-run ratios the issue's targets name (their medians) and the
machine's load at each run's start.

    python3 bench/shm_compare.py                 # from the repository root, after the build:
    # cmake --build build --target troika-bench troikarun troika-agent troika-mpi-bench
"""

import argparse
import os
import re
import socket
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS = "allreduce,latency,many_small,allgather,broadcast"
# workload -> (heading in troika-bench's and troika-mpi-bench's output, unit)
TABLES = {"allreduce": "allreduce (float32 sum)", "allgather": "allgather (bytes",
          "broadcast": "broadcast (bytes"}


def parse_args():
    p = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--bytes", default="64MiB", help="the large collectives' size")
    p.add_argument("--bench-repeat", type=int, default=1,
                   help="troika-bench's and troika-mpi-bench's own --repeat per run")
    p.add_argument("--time-per-size-ms", type=int, default=300,
                   help="each timed loop's length (troika-bench's --time_per_size, "
                        "troika-mpi-bench's --time_per_size_ms); a steady-state schedule forms "
                        "during the first of it")
    p.add_argument("--configs", default="gloo,shm,default,mpi,torch",
                   help="which of gloo, shm, default, mpi, torch to run")
    p.add_argument("--python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3")
                   else sys.executable, help="torch's interpreter")
    p.add_argument("--mpirun", default="mpirun")
    p.add_argument("--troikarun-args", default="",
                   help="more troikarun options for both Troika jobs (e.g. '--schedules off')")
    return p.parse_args()


def load():
    def count(name):
        try:
            out = subprocess.run(["pgrep", "-c", "-x", name], capture_output=True, text=True)
        except OSError:
            return -1
        return int(out.stdout.strip() or 0)
    return "load %.2f %.2f %.2f, cc1plus: %d, ctest: %d" % (
        os.getloadavg() + (count("cc1plus"), count("ctest")))


def run(cmd, env=None, timeout=600):
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    text = out.stdout + out.stderr
    if out.returncode != 0:
        sys.stderr.write(text)
        raise SystemExit("failed (%d): %s" % (out.returncode, " ".join(cmd)))
    return text


def table_row(text, heading, column):
    """busbw of the table under `heading`: column 0 the first (raw/mpi), 1 Troika's."""
    start = text.find("# " + heading)
    if start < 0:
        raise SystemExit("no '%s' table in:\n%s" % (heading, text))
    row = text[start:].splitlines()[2].split()
    return float(row[3 if column == 0 else 6])


def number(pattern, text):
    m = re.search(pattern, text)
    if not m:
        raise SystemExit("no /%s/ in:\n%s" % (pattern, text))
    return float(m.group(1))


def troika_bench(args, transport):
    """{'raw'|'troika': {workload: figure}} of one troikarun job over `transport` (None: the
    product's default for both sides)."""
    env = dict(os.environ)
    env.pop("TROIKA_TRANSPORT", None)
    if transport is not None:
        env["TROIKA_TRANSPORT"] = transport
    cmd = [os.path.join(args.build, "agent", "troikarun"), "-np", str(args.np)]
    cmd += args.troikarun_args.split()
    cmd += ["--", os.path.join(args.build, "bench", "troika-bench"), "--job_rank"]
    if transport is not None:
        cmd += ["--transport", transport]
    cmd += ["--ops", OPS, "--min_bytes", args.bytes, "--max_bytes", args.bytes, "--repeat",
            str(args.bench_repeat), "--time_per_size", "%dms" % args.time_per_size_ms]
    text = run(cmd, env)
    if transport is None:
        print("  the default data plane: %s" % re.search(r"data plane (\S+),", text).group(1))
    out = {"raw": {}, "troika": {}}
    for side, column in (("raw", 0), ("troika", 1)):
        for name, heading in TABLES.items():
            out[side][name] = table_row(text, heading, column)
    out["raw"]["many_small"] = number(r"raw \w+ \(\d+ sequential allreduces\):\s+([0-9.]+)", text)
    out["troika"]["many_small"] = number(r"troika \(\d+ submitted, then waited\):\s+([0-9.]+)",
                                         text)
    out["raw"]["latency"] = number(r"raw \w+ ([0-9.]+) us, troika", text)
    out["troika"]["latency"] = number(r"troika ([0-9.]+) us \(troika/raw", text)
    return out


def mpi_bench(args):
    cmd = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(args.np),
           "--mca", "btl", "self,vader", os.path.join(args.build, "bench", "troika-mpi-bench"),
           "--ops", OPS, "--bytes", args.bytes, "--repeat", str(args.bench_repeat),
           "--time_per_size_ms", str(args.time_per_size_ms)]
    text = run(cmd)
    out = {name: table_row(text, heading, 0) for name, heading in TABLES.items()}
    out["many_small"] = number(r"raw mpi \(\d+ sequential allreduces\):\s+([0-9.]+)", text)
    out["latency"] = number(r"raw mpi ([0-9.]+) us", text)
    return {"mpi": out}


def torch_flat(args):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(args.np):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   WORLD_SIZE=str(args.np))
        procs.append(subprocess.Popen(
            [args.python, os.path.join(ROOT, "bench", "torch_flat_bucket.py")], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode != 0 for p in procs):
        sys.stderr.write("\n".join(outs))
        raise SystemExit("a torch rank failed")
    return {"torch": {"many_small": number(r"torch flat bucket: ([0-9.]+) steps/s", outs[0])}}


COLUMNS = [("gloo", "raw"), ("shm", "raw"), ("shm", "troika"), ("gloo", "troika"),
           ("default", "troika"), ("mpi", "mpi"), ("torch", "torch")]
LABEL = {("gloo", "raw"): "raw Gloo", ("shm", "raw"): "raw shm",
         ("shm", "troika"): "Troika/shm", ("gloo", "troika"): "Troika/Gloo",
         ("default", "troika"): "Troika default",
         ("mpi", "mpi"): "Open MPI", ("torch", "torch"): "torch flat"}
ROWS = [("allreduce", "64 MiB allreduce busbw GB/s"), ("latency", "4 B allreduce us"),
        ("many_small", "256 x 16 KiB steps/s"), ("allgather", "64 MiB allgather busbw GB/s"),
        ("broadcast", "64 MiB broadcast busbw GB/s")]
# Issue 36's targets: (name, numerator, denominator, threshold); a ratio of figures where
# higher is better, except latency, read as time ratio (raw Gloo / Troika >= 5).
TARGETS = [
    ("64 MiB allreduce busbw, Troika/shm / raw Gloo", ("shm", "troika", "allreduce"),
     ("gloo", "raw", "allreduce"), 3.0),
    ("64 MiB allreduce busbw, Troika/shm / Open MPI", ("shm", "troika", "allreduce"),
     ("mpi", "mpi", "allreduce"), 1.5),
    ("4 B allreduce, raw Gloo time / Troika/shm time", ("gloo", "raw", "latency"),
     ("shm", "troika", "latency"), 5.0),
    ("256 x 16 KiB steps/s, Troika/shm / torch flat bucket", ("shm", "troika", "many_small"),
     ("torch", "torch", "many_small"), 1.2),
]


def fmt(x):
    """3 significant digits, without an exponent."""
    return "%.0f" % x if x >= 100 else "%.3g" % x


def get(result, key):
    config, side, workload = key
    return result.get(config, {}).get(side, {}).get(workload)


def main():
    args = parse_args()
    configs = args.configs.split(",")
    if "mpi" in configs and not os.path.exists(os.path.join(args.build, "bench",
                                                            "troika-mpi-bench")):
        print("no troika-mpi-bench (MPI not found at configure time): Open MPI skipped")
        configs.remove("mpi")
    if "torch" in configs and subprocess.run([args.python, "-c", "import torch"],
                                             capture_output=True).returncode != 0:
        print("no torch for %s: the flat bucket skipped" % args.python)
        configs.remove("torch")
    runners = {"gloo": lambda: {"gloo": troika_bench(args, "gloo")},
               "shm": lambda: {"shm": troika_bench(args, "shm")},
               "default": lambda: {"default": troika_bench(args, None)},
               "mpi": lambda: {"mpi": mpi_bench(args)},
               "torch": lambda: {"torch": torch_flat(args)}}
    results = []
    for rep in range(args.repeat):
        order = configs[rep % len(configs):] + configs[:rep % len(configs)]
        result = {}
        for config in order:
            print("run %d, %s (%s)" % (rep + 1, config, load()), flush=True)
            result.update(runners[config]())
        results.append(result)
        for workload, what in ROWS:
            figures = ["%s %s" % (LABEL[c], fmt(get(result, c + (workload,))))
                       for c in COLUMNS if get(result, c + (workload,)) is not None]
            print("  %s: %s" % (what, ", ".join(figures)), flush=True)

    print("\nmedians of %d runs, %d ranks as processes:" % (len(results), args.np))
    print("| workload | " + " | ".join(LABEL[c] for c in COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for workload, what in ROWS:
        cells = []
        for c in COLUMNS:
            values = [get(r, c + (workload,)) for r in results]
            values = [v for v in values if v is not None]
            cells.append(fmt(statistics.median(values)) if values else "-")
        print("| %s | %s |" % (what, " | ".join(cells)))
    print("\ntargets (same-run ratios, each run's, then their median):")
    for name, num, den, threshold in TARGETS:
        ratios = [get(r, num) / get(r, den) for r in results
                  if get(r, num) is not None and get(r, den)]
        if not ratios:
            print("  %s: not measured" % name)
            continue
        m = statistics.median(ratios)
        print("  %s: %s -> %.2f (target >= %.1f: %s)"
              % (name, ", ".join("%.2f" % x for x in ratios), m, threshold,
                 "met" if m >= threshold else "NOT met"))


if __name__ == "__main__":
    main()
