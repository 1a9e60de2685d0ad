#!/usr/bin/env python3
"""Troika on Ray against troikarun and Ray Train's TorchTrainer (issue 48).

One job, four ways, alternating (which goes first rotates), --repeat times each:

  troikarun     troikarun -np NP -- PYTHON ray_compare.py --rank ...
  ray-executor  troika.ray.RayExecutor(create_settings(), num_workers=NP): start(), run(job)
  troika-train  Ray Train's DataParallelTrainer with troika.ray.train's TroikaConfig()
                (TroikaTrainer), NP workers
  torch-train   Ray Train's TorchTrainer (TorchConfig(): gloo on CPU), NP workers, the model
                wrapped by ray.train.torch.prepare_model (DistributedDataParallel)

The Ray variants run on a Ray cluster of one node that this script starts (`ray start --head
--num-cpus NP`, in a temporary directory of its own, its own authentication token), up for the
whole run (troikarun's runs too, so every variant has the same idle Ray processes beside it).

The job, on every rank (torch.set_num_threads(1): NP ranks on NP cores): imports torch and the
framework, joins the job (hvd.init(); under TorchTrainer Ray Train has made the process group),
builds an MLP of --layers Linear(--width, --width) layers with ReLUs (float32), broadcasts it
(Troika: broadcast_parameters; DDP: its constructor) and trains it with SGD on --batch-size
random samples per rank: Troika through hvd.DistributedOptimizer, DDP through its gradient
hooks. The first step's end is the startup mark; then --warmup steps and --steps timed steps
(the median step). Then the allreduce of each --sizes float32 tensor (Troika: hvd.allreduce,
an average; DDP's side: torch.distributed.all_reduce and a division), --warmup untimed and
--iters timed (the median). Rank 0 writes its figures to a file the driver reads.

Figures per variant: the medians over the repeats of
  startup   seconds from the launch (just before Popen / RayExecutor(...) / trainer.fit()) to
            rank 0's first step done (imports, the coordinator or process group, the workers'
            start, the first step's collectives), wall clock on this one machine
  step      the median training step (ms)
  ar N      the median allreduce of N floats (ms)
and each figure's ratio to troikarun's; then the same with each variant's best repeat (the
least disturbed by whatever else runs on the machine). The load average is printed before,
after each run and after.

Defaults are the products' defaults (troikarun's, RayExecutor.create_settings()'s,
TroikaConfig()'s, TorchConfig()'s); --troika-env KEY=VALUE (repeatable) gives every Troika
variant more environment (e.g. TROIKA_TRANSPORT=gloo), --variants picks the columns.

    build/venv-ray/bin/python bench/ray_compare.py                 # from the repository root
    build/venv-ray/bin/python bench/ray_compare.py --repeat 5 --variants troikarun,ray-executor
"""

import argparse
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = ["troikarun", "ray-executor", "troika-train", "torch-train"]


# --- the job, on every rank ------------------------------------------------------------------

def job(cfg, launched, out, backend="troika"):
    """One rank's job (module docstring). `backend`: "troika" (troika.torch) or "ddp" (the
    process group Ray Train made). Rank 0 writes its figures to `out` (JSON)."""
    import torch
    torch.set_num_threads(1)
    if backend == "troika":
        import troika.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
    else:
        import torch.distributed as dist
        import ray.train.torch
        rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    layers = []
    for _ in range(cfg["layers"]):
        layers += [torch.nn.Linear(cfg["width"], cfg["width"]), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers)
    sgd = torch.optim.SGD(model.parameters(), lr=0.001)
    if backend == "troika":
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(sgd, named_parameters=model.named_parameters())
    else:
        model = ray.train.torch.prepare_model(model)  # DistributedDataParallel (gloo on CPU)
        opt = sgd
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(cfg["batch_size"], cfg["width"], generator=g)
    y = torch.randn(cfg["batch_size"], cfg["width"], generator=g)

    def step():
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    step()
    first = time.time()
    for _ in range(cfg["warmup"]):
        step()
    steps = []
    for _ in range(cfg["steps"]):
        t = time.perf_counter()
        step()
        steps.append(time.perf_counter() - t)
    allreduce = {}
    for n in cfg["sizes"]:
        tensor = torch.ones(n)
        times = []
        for i in range(cfg["warmup"] + cfg["iters"]):
            t = time.perf_counter()
            if backend == "troika":
                hvd.allreduce(tensor, name="bench.%d" % n)
            else:
                dist.all_reduce(tensor)
                tensor.div_(size)
            if i >= cfg["warmup"]:
                times.append(time.perf_counter() - t)
        allreduce[str(n)] = statistics.median(times)
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"startup": first - launched, "step": statistics.median(steps),
                       "allreduce": allreduce, "size": size}, f)
    if backend == "troika":
        hvd.shutdown()


def train_loop(config):
    """Ray Train's train_loop_per_worker for both trainers."""
    job(config["cfg"], config["launched"], config["out"], config["backend"])


# --- the variants ----------------------------------------------------------------------------

def run_troikarun(args, cfg, out):
    env = dict(os.environ, **args.troika_env)
    launched = time.time()
    subprocess.run([args.troikarun, "-np", str(args.np), "--", sys.executable,
                    os.path.abspath(__file__), "--rank", json.dumps(cfg), str(launched), out],
                   env=env, check=True, timeout=600)


def run_ray_executor(args, cfg, out):
    from troika.ray import RayExecutor
    launched = time.time()
    executor = RayExecutor(RayExecutor.create_settings(), num_workers=args.np)
    executor.start(extra_env_vars=args.troika_env)
    try:
        executor.run(job, args=[cfg, launched, out])
    finally:
        executor.shutdown()


def run_trainer(args, cfg, out, troika):
    import ray.train
    scaling = ray.train.ScalingConfig(num_workers=args.np)
    run_config = ray.train.RunConfig(storage_path=args.storage,
                                     name="ray-compare-%s" % secrets.token_hex(4))
    launched = time.time()
    config = {"cfg": cfg, "launched": launched, "out": out,
              "backend": "troika" if troika else "ddp"}
    if troika:
        from troika.ray.train import TroikaConfig, TroikaTrainer
        trainer = TroikaTrainer(train_loop, train_loop_config=config,
                                troika_config=TroikaConfig(env=dict(args.troika_env)),
                                scaling_config=scaling, run_config=run_config)
    else:
        from ray.train.torch import TorchTrainer
        trainer = TorchTrainer(train_loop, train_loop_config=config, scaling_config=scaling,
                               run_config=run_config)
    trainer.fit()


RUNNERS = {
    "troikarun": run_troikarun,
    "ray-executor": run_ray_executor,
    "troika-train": lambda args, cfg, out: run_trainer(args, cfg, out, troika=True),
    "torch-train": lambda args, cfg, out: run_trainer(args, cfg, out, troika=False),
}


# --- the Ray cluster -------------------------------------------------------------------------

class Cluster:
    """A one-node Ray cluster in a temporary directory of its own; stop() ends its processes
    alone (_processes)."""

    def __init__(self, cpus):
        self.dir = tempfile.mkdtemp(prefix="tkbench-", dir="/tmp")
        self.cpus = cpus
        self.address = "127.0.0.1:%d" % (7390 + os.getpid() % 500)

    def start(self):
        import ray
        ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
        subprocess.run([ray_bin, "start", "--head", "--port", self.address.split(":")[1],
                        "--temp-dir", self.dir, "--num-cpus", str(self.cpus),
                        "--include-dashboard=false", "--disable-usage-stats"],
                       check=True, capture_output=True, timeout=120)
        ray.init(address=self.address, log_to_driver=False)

    def _processes(self):
        """Those with the directory in their command line, or the GCS port in their --address
        (Ray Client's server, which outlives the head's `ray start` and names no directory),
        and their descendants."""
        parents, own = {}, set()
        address_suffix = (":" + self.address.split(":")[1]).encode()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    arguments = f.read().split(b"\0")
                if any(self.dir.encode() in a or (a.startswith(b"--address=")
                                                  and a.endswith(address_suffix))
                       for a in arguments):
                    own.add(int(entry))
                with open("/proc/%s/stat" % entry) as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
        while True:
            more = {p for p, parent in parents.items() if parent in own} - own
            if not more:
                return own
            own |= more

    def stop(self):
        import ray
        try:
            ray.shutdown()
        finally:
            for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 10)):
                for pid in self._processes():
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:
                        pass
                deadline = time.time() + wait
                while self._processes() and time.time() < deadline:
                    time.sleep(0.1)
            shutil.rmtree(self.dir, ignore_errors=True)


# --- the driver ------------------------------------------------------------------------------

def parse_args():
    p = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--troikarun", default=None, help="default: BUILD/agent/troikarun")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--sizes", default="1024,1048576", help="allreduce sizes (float32 elements)")
    p.add_argument("--troika-env", action="append", default=[], metavar="KEY=VALUE",
                   help="more environment for the Troika variants")
    args = p.parse_args()
    args.troikarun = args.troikarun or os.path.join(args.build, "agent", "troikarun")
    args.troika_env = dict(kv.split("=", 1) for kv in args.troika_env)
    args.variants = args.variants.split(",")
    for v in args.variants:
        if v not in RUNNERS:
            p.error("unknown variant %s (of %s)" % (v, ", ".join(VARIANTS)))
    return args


def table(results, variants, sizes, title, reduce):
    """One row per figure, one column per variant: `reduce` (median, min) over the repeats."""
    rows = [("startup (s)", lambda r: r["startup"], "%.2f"),
            ("step (ms)", lambda r: r["step"] * 1e3, "%.2f")]
    rows += [("ar %d (ms)" % n, lambda r, n=n: r["allreduce"][str(n)] * 1e3, "%.3f")
             for n in sizes]
    print("%-16s" % title + "".join("%22s" % v for v in variants))
    for name, get, fmt in rows:
        figures = {v: reduce([get(r) for r in results[v]]) for v in variants if results[v]}
        base = figures.get("troikarun")
        cells = []
        for v in variants:
            if v not in figures:
                cells.append("%22s" % "-")
                continue
            cell = fmt % figures[v]
            if base and v != "troikarun":
                cell += " (%.2fx)" % (figures[v] / base)
            cells.append("%22s" % cell)
        print("%-16s" % name + "".join(cells))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":  # a rank under troikarun
        job(json.loads(sys.argv[2]), float(sys.argv[3]), sys.argv[4])
        return 0
    args = parse_args()
    # The build's troika package, here and (the raylet passes it on) in Ray's workers.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(args.build, "python")] + os.environ.get("PYTHONPATH", "").split(os.pathsep))
    sys.path.insert(0, os.path.join(args.build, "python"))
    # A token of its own (before Ray's import, which reads the mode), whatever
    # ~/.ray/auth_token holds; Ray's helpers find the cluster by RAY_ADDRESS.
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    for k in [k for k in os.environ if k.startswith(("TROIKA_", "HOROVOD_"))]:
        del os.environ[k]
    cfg = {"layers": args.layers, "width": args.width, "batch_size": args.batch_size,
           "warmup": args.warmup, "steps": args.steps, "iters": args.iters,
           "sizes": [int(n) for n in args.sizes.split(",")]}
    cluster = Cluster(args.np)
    os.environ["RAY_ADDRESS"] = cluster.address
    work = tempfile.mkdtemp(prefix="tkbench-run-")
    args.storage = os.path.join(work, "ray_results")
    results = {v: [] for v in args.variants}
    print("ray_compare: np %d, %s, %d repeats; load average before: %s; %s"
          % (args.np, cfg, args.repeat, "%.2f %.2f %.2f" % os.getloadavg(),
             time.strftime("%Y-%m-%d %H:%M:%S")), flush=True)
    cluster.start()
    try:
        for r in range(args.repeat):
            order = args.variants[r % len(args.variants):] + args.variants[:r % len(args.variants)]
            for v in order:
                out = os.path.join(work, "%s-%d.json" % (v, r))
                RUNNERS[v](args, cfg, out)
                with open(out) as f:
                    figures = json.load(f)
                results[v].append(figures)
                print("  repeat %d %-13s startup %.2f s, step %.2f ms, allreduce %s ms; load %.2f"
                      % (r, v, figures["startup"], figures["step"] * 1e3,
                         ", ".join("%s: %.3f" % (n, t * 1e3)
                                   for n, t in figures["allreduce"].items()),
                         os.getloadavg()[0]), flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("load average after: %.2f %.2f %.2f" % os.getloadavg())
    table(results, args.variants, cfg["sizes"], "median", statistics.median)
    # On a shared machine a repeat is slowed by whatever else runs then; the best repeat is
    # each variant's figure with the least of it.
    table(results, args.variants, cfg["sizes"], "best", min)
    return 0


if __name__ == "__main__":
    sys.exit(main())
