#!/usr/bin/env python3
"""Startup time to the first collective on 2 hosts: troikarun against horovodrun (issue 51).

Two hosts, h1 and h2, are network namespaces joined through a bridge namespace (as
tests/integration/netns_hosts.h makes them), each running Debian's sshd with a host key and a
client key this script generates; a third namespace, c, runs the launcher. An ssh_config names
the hosts (Host h1 / HostName 10.234.0.2, ...) with the key, a known_hosts file of its own and
BatchMode. Every namespace also gets an /etc/hosts of its own (/etc/netns/NS/hosts, which `ip
netns exec` mounts over /etc/hosts) that names h1 and h2, and names this machine's host name
(which the namespaces share) with the namespace's own address, as each host of a cluster
resolves its own name: Horovod 0.28.1 needs that. Its Gloo context for the global process set,
made in hvd.init(), ignores HOROVOD_GLOO_IFACE (InitializeForProcessSet reads the process set's
own, empty, gloo_iface_) and so takes the address of gethostname(), which this machine's
/etc/hosts maps to 127.0.0.1: the ranks on h2 then connect to 127.0.0.1 for h1's and fail.

Then, alternating (which goes first rotates), --repeat times each:

  troika            troikarun -np 4 -H h1:2,h2:2 -- PYTHON first.py troika
                    (TROIKA_SSH_COMMAND="ssh -F ssh_config", PYTHONPATH=BUILD/python,
                    LD_LIBRARY_PATH=BUILD/libclient)
  horovod           horovodrun --gloo -np 4 -H h1:2,h2:2 HVD_PYTHON first.py horovod
                    (horovodrun's defaults: it caches its ssh check and the hosts' common
                    interfaces for 60 minutes in ~/.horovod, so from the second run on it skips
                    both; the warm-up run below fills the cache)
  horovod-nocache   the same with --disable-cache: the checks every run, as a first run (or
                    one after an hour, or on other hosts) makes them, and as troikarun always
                    makes them

first.py (written into the run's temporary directory) imports torch and the framework module
(troika.torch as hvd / horovod.torch as hvd), calls hvd.init(), allreduces one float32 (4
bytes), checks the result, and every rank prints the wall-clock times (time.time(); the
namespaces share this machine's clock) of its first line, the imports' end, init's end and the
allreduce's end. Each figure is seconds from just before the launcher starts (the time this
script takes before Popen): the first rank's first line, the last rank's first line, the
imports and hvd.init() done on every rank (the last rank's), rank 0's first allreduce done
(the headline: the startup time to the first collective), and the launcher's exit (its whole
run, the ranks' exit and the teardown included). Horovod's ssh command
has no config flag (horovod/runner/util/remote.py runs `ssh -o PasswordAuthentication=no -o
StrictHostKeyChecking=no HOST ...` from PATH, and ssh reads ~/.ssh/config from the passwd
entry's home, not $HOME), so its runs get a directory first in PATH holding an `ssh` that
execs `/usr/bin/ssh -F ssh_config "$@"`: the same config, Horovod unedited. Every run gets
HOME=a directory of this run (Horovod's cache lives there, not in root's home). HOROVOD_* and
TROIKA_* variables of the caller's environment are removed: both launchers run with their
defaults.

Before the timed runs, one warm-up run of each (not in the medians, printed): it fills the
page cache with both frameworks' files and Horovod's host cache. After each run, any process
but sshd still in a namespace 2 s after the launcher exited is reported and killed.

Needs root (network namespaces), the `ip` tool, openssh-server and openssh-client; skips,
saying why, without them. Columns whose launcher is missing are skipped, saying why: troika
without BUILD/agent/troikarun or when PYTHON cannot import troika.torch with BUILD/python;
horovod without HVD_VENV/bin/horovodrun (Horovod 0.28.1 with PyTorch: see
docs/PERFORMANCE.md's section on this benchmark for its build).

    sudo python3 bench/hosts_startup.py                          # from the repository root
    sudo python3 bench/hosts_startup.py --repeat 9 --variants troika,horovod
"""

import argparse
import datetime
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SSHD = "/usr/sbin/sshd"
SUBNET = "10.234.0"
VARIANTS = ("troika", "horovod", "horovod-nocache")
STAGES = (("first", "a rank's first line"), ("last", "the last rank's first line"),
          ("import", "imports done"), ("init", "hvd.init() done"),
          ("allreduce", "first allreduce done"), ("exit", "launcher exits"))

FIRST_PY = r'''import time
t_start = time.time()
import sys
import torch
if sys.argv[1] == "troika":
    import troika.torch as hvd
else:
    import horovod.torch as hvd
t_import = time.time()
hvd.init()
t_init = time.time()
out = hvd.allreduce(torch.ones(1), name="first")  # 4 bytes, averaged
t_allreduce = time.time()
if out.item() != 1.0:
    sys.exit("rank %d: allreduce gave %r" % (hvd.rank(), out.item()))
print("FIRST rank %d size %d start %.6f import %.6f init %.6f allreduce %.6f"
      % (hvd.rank(), hvd.size(), t_start, t_import, t_init, t_allreduce), flush=True)
'''
FIRST_LINE = re.compile(r"FIRST rank (\d+) size (\d+) start ([0-9.]+) import ([0-9.]+) "
                        r"init ([0-9.]+) allreduce ([0-9.]+)")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"),
                   help="troika's build tree: its agent/troikarun and troika-agent, python/ and "
                        "libclient/libtroika.so (a copy of those four will do)")
    p.add_argument("--python", default="/usr/bin/python3",
                   help="troika's ranks' interpreter (Debian's, with its torch)")
    p.add_argument("--horovod-venv", default=None,
                   help="Horovod 0.28.1 with PyTorch (default: BUILD/venv-torch-horovod); its "
                        "horovodrun and python run the horovod columns")
    p.add_argument("--repeat", type=int, default=5, help="timed runs of each variant")
    p.add_argument("--variants", default=",".join(VARIANTS),
                   help="which of " + ", ".join(VARIANTS))
    p.add_argument("--timeout", type=float, default=180, help="seconds per run")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    return p.parse_args()


def sh(command, check=True):
    r = subprocess.run(command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if check and r.returncode != 0:
        raise RuntimeError("`%s` failed (%d): %s" % (command, r.returncode, r.stdout.strip()))
    return r


def unavailable():
    """Empty where this machine can run the benchmark; else why not."""
    if os.geteuid() != 0:
        return "needs root (it makes network namespaces): run it with sudo"
    if shutil.which("ip") is None:
        return "needs the `ip` tool (Debian: iproute2)"
    if not os.access(SSHD, os.X_OK):
        return "needs sshd (Debian: openssh-server)"
    for tool in ("ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return "needs %s (Debian: openssh-client)" % tool
    probe = "thsprobe%d" % os.getpid()
    r = sh("ip netns add " + probe, check=False)
    if r.returncode != 0:
        return "cannot create network namespaces here: " + r.stdout.strip()
    r = sh("ip netns exec %s true" % probe, check=False)
    sh("ip netns del " + probe, check=False)
    if r.returncode != 0:
        return "network namespaces cannot be entered here: " + r.stdout.strip()
    return ""


class Hosts:
    """c (the launcher), h1 and h2 as network namespaces; sshd on h1 and h2."""

    def __init__(self, directory):
        self.dir = directory
        self.prefix = "ths%d" % (os.getpid() % 100000)
        self.names = ["c", "h1", "h2"]
        self.namespaces = []
        self.etc_dirs = []
        self.made_etc_netns = False
        self.sshd = []
        self.config = os.path.join(directory, "ssh_config")

    def ns(self, host):
        return "%s-%s" % (self.prefix, host)

    def address(self, host):
        return "%s.%d" % (SUBNET, self.names.index(host) + 1)

    def create(self):
        br = self.ns("br")
        sh("ip netns add " + br)
        self.namespaces.append(br)
        sh("ip -n %s link add br0 type bridge && ip -n %s link set br0 up" % (br, br))
        if not os.path.isdir("/etc/netns"):
            os.makedirs("/etc/netns")
            self.made_etc_netns = True
        # This machine's /etc/hosts without its host name (here it names 127.0.0.1), which
        # each namespace's file gives that namespace's own address, plus h1 and h2.
        me = socket.gethostname()
        with open("/etc/hosts") as f:
            lines = []
            for line in f.read().splitlines():
                words = line.split("#")[0].split()
                if me in words[1:]:
                    words.remove(me)
                    if len(words) < 2:
                        continue
                    line = " ".join(words)
                lines.append(line)
        etc_hosts = "\n".join(lines) + "\n" + "".join(
            "%s %s\n" % (self.address(h), h) for h in ("h1", "h2"))
        for i, host in enumerate(self.names, 1):
            ns = self.ns(host)
            sh("ip netns add " + ns)
            self.namespaces.append(ns)
            port = "%sp%d" % (self.prefix, i)
            sh("ip link add eth0 netns {ns} type veth peer name {port} netns {br} && "
               "ip -n {br} link set {port} master br0 up && "
               "ip -n {ns} addr add {addr}/24 dev eth0 && ip -n {ns} link set eth0 up && "
               "ip -n {ns} link set lo up".format(ns=ns, port=port, br=br,
                                                 addr=self.address(host)))
            etc = os.path.join("/etc/netns", ns)
            os.makedirs(etc)
            self.etc_dirs.append(etc)
            with open(os.path.join(etc, "hosts"), "w") as f:
                f.write(etc_hosts + "%s %s\n" % (self.address(host), me))
        d = self.dir
        sh("mkdir -p /run/sshd && ssh-keygen -q -t ed25519 -N '' -f {d}/hostkey && "
           "ssh-keygen -q -t ed25519 -N '' -f {d}/id && cp {d}/id.pub {d}/authorized_keys"
           .format(d=d))
        with open(self.config, "w") as f:
            for host in ("h1", "h2"):
                f.write("Host %s\n  HostName %s\n" % (host, self.address(host)))
            f.write("Host *\n  IdentityFile {d}/id\n  UserKnownHostsFile {d}/known_hosts\n"
                    "  StrictHostKeyChecking accept-new\n  BatchMode yes\n  LogLevel ERROR\n"
                    .format(d=d))
        for host in ("h1", "h2"):
            self.start_sshd(host)

    def start_sshd(self, host):
        config = os.path.join(self.dir, "sshd_" + host)
        with open(config, "w") as f:
            f.write("ListenAddress {a}\nHostKey {d}/hostkey\nAuthorizedKeysFile "
                    "{d}/authorized_keys\nPermitRootLogin prohibit-password\n"
                    "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
                    "StrictModes no\nPidFile none\n".format(a=self.address(host), d=self.dir))
        log = open(os.path.join(self.dir, "sshd-%s.log" % host), "w")
        self.sshd.append(subprocess.Popen(
            ["ip", "netns", "exec", self.ns(host), SSHD, "-D", "-e", "-f", config],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.time() + 20
        while sh("ip netns exec %s ssh -F %s %s true" % (self.ns("c"), self.config, host),
                 check=False).returncode != 0:
            if time.time() > deadline:
                raise RuntimeError("sshd on %s does not answer: %s" % (host, open(
                    os.path.join(self.dir, "sshd-%s.log" % host)).read()))
            time.sleep(0.1)

    def leftovers(self, kill):
        """Processes in the namespaces but sshd, as 'HOST PID COMM'; killed with kill=True."""
        found = []
        for host in self.names:
            for pid in sh("ip netns pids " + self.ns(host), check=False).stdout.split():
                try:
                    with open("/proc/%s/comm" % pid) as f:
                        comm = f.read().strip()
                except OSError:
                    continue
                if comm == "sshd":
                    continue
                found.append("%s %s %s" % (host, pid, comm))
                if kill:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass
        return found

    def destroy(self):
        for p in self.sshd:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()
        if self.namespaces:
            self.leftovers(kill=True)
        for ns in self.namespaces:
            sh("ip netns del " + ns, check=False)
        for etc in self.etc_dirs:
            shutil.rmtree(etc, ignore_errors=True)
        if self.made_etc_netns:
            try:
                os.rmdir("/etc/netns")
            except OSError:
                pass


def clean_environment():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "TROIKA_")) and k != "PYTHONPATH"}
    env["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return env


def commands(args, hosts, work):
    """variant -> (argv run in c, environment)."""
    first = os.path.join(work, "first.py")
    home = os.path.join(work, "home")
    out = {}
    env = clean_environment()
    env["HOME"] = home
    # LD_LIBRARY_PATH: the module's libtroika.so from BUILD (its RUNPATH names the build tree
    # it was built in; this lets a copy of a build tree, --build, run its own).
    troika = dict(env, TROIKA_SSH_COMMAND="ssh -F " + hosts.config,
                  PYTHONPATH=os.path.join(args.build, "python"),
                  LD_LIBRARY_PATH=os.path.join(args.build, "libclient"))
    out["troika"] = ([os.path.join(args.build, "agent", "troikarun"), "-np", "4", "-H",
                      "h1:2,h2:2", "--", args.python, first, "troika"], troika)
    wrapper = os.path.join(work, "sshwrap")
    horovod = dict(env, PATH=wrapper + ":" + env["PATH"])
    hvd = [os.path.join(args.horovod_venv, "bin", "horovodrun"), "--gloo", "-np", "4", "-H",
           "h1:2,h2:2"]
    ranks = [os.path.join(args.horovod_venv, "bin", "python"), first, "horovod"]
    out["horovod"] = (hvd + ranks, horovod)
    out["horovod-nocache"] = (hvd + ["--disable-cache"] + ranks, horovod)
    return out


def run_once(argv, env, hosts, work, label, timeout):
    """One launch in c: {stage: seconds from the launch} or raises with the output."""
    log_path = os.path.join(work, "logs", label)
    with open(log_path, "w") as log:
        t0 = time.time()
        p = subprocess.Popen(["ip", "netns", "exec", hosts.ns("c")] + argv, env=env, cwd=work,
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = "timeout (%.0f s)" % timeout
        t_exit = time.time()
    # What the launcher leaves behind: anything but sshd still in a namespace 2 s after it
    # exited is reported and killed.
    deadline = time.time() + 2
    while hosts.leftovers(kill=False) and time.time() < deadline:
        time.sleep(0.1)
    left = hosts.leftovers(kill=True)
    with open(log_path) as f:
        output = f.read()
    ranks = {int(m.group(1)): [float(m.group(i)) - t0 for i in range(3, 7)]
             for m in FIRST_LINE.finditer(output) if m.group(2) == "4"}
    if rc != 0 or sorted(ranks) != [0, 1, 2, 3]:
        raise RuntimeError("%s: exit %s, not the 4 ranks' FIRST lines of size 4; output:\n%s"
                           % (label, rc, output[-4000:]))
    if left:
        print("  %s: still running 2 s after the launcher exited (killed): %s"
              % (label, ", ".join(left)), flush=True)
    return {"first": min(r[0] for r in ranks.values()),
            "last": max(r[0] for r in ranks.values()),
            "import": max(r[1] for r in ranks.values()),
            "init": max(r[2] for r in ranks.values()),
            "allreduce": ranks[0][3], "exit": t_exit - t0}


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def fmt_run(r):
    return "  ".join("%s %.2f" % (name, r[name]) for name, _ in STAGES)


def main():
    args = parse_args()
    args.build = os.path.abspath(args.build)
    args.horovod_venv = os.path.abspath(
        args.horovod_venv or os.path.join(args.build, "venv-torch-horovod"))
    why = unavailable()
    if why:
        print("hosts_startup: skipped: " + why, flush=True)
        return 0
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS:
            sys.exit("unknown variant %r (known: %s)" % (v, ", ".join(VARIANTS)))

    skipped = {}
    troikarun = os.path.join(args.build, "agent", "troikarun")
    if not os.access(troikarun, os.X_OK):
        skipped["troika"] = "no " + troikarun
    elif subprocess.run([args.python, "-c", "import troika.torch"],
                        env=dict(clean_environment(),
                                 PYTHONPATH=os.path.join(args.build, "python"),
                                 LD_LIBRARY_PATH=os.path.join(args.build, "libclient")),
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
        skipped["troika"] = "%s cannot import troika.torch from %s/python" % (args.python,
                                                                              args.build)
    if not os.access(os.path.join(args.horovod_venv, "bin", "horovodrun"), os.X_OK):
        for v in ("horovod", "horovod-nocache"):
            skipped[v] = "no %s/bin/horovodrun" % args.horovod_venv
    for v in variants:
        if v in skipped:
            print("%s: skipped: %s" % (v, skipped[v]), flush=True)
    variants = [v for v in variants if v not in skipped]
    if not variants:
        return 0

    # Others may rebuild BUILD meanwhile: its binaries' times, to compare at the end.
    built = {}
    for path in ("agent/troikarun", "agent/troika-agent", "libclient/libtroika.so"):
        try:
            built[path] = os.stat(os.path.join(args.build, path)).st_mtime
        except OSError:
            pass
    if "troika" in variants:
        print("troika's build: %s" % ", ".join(
            "%s %s" % (path, datetime.datetime.utcfromtimestamp(t).strftime("%H:%M:%S"))
            for path, t in built.items()), flush=True)

    work = tempfile.mkdtemp(prefix="troika-hosts-startup-")
    os.chmod(work, 0o755)
    for d in ("logs", "home", "sshwrap"):
        os.makedirs(os.path.join(work, d))
    with open(os.path.join(work, "first.py"), "w") as f:
        f.write(FIRST_PY)
    hosts = Hosts(work)
    wrapper = os.path.join(work, "sshwrap", "ssh")
    with open(wrapper, "w") as f:
        f.write('#!/bin/sh\nexec /usr/bin/ssh -F %s "$@"\n' % hosts.config)
    os.chmod(wrapper, 0o755)

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    results = {v: [] for v in variants}
    try:
        hosts.create()
        cmds = commands(args, hosts, work)
        print("hosts_startup: %s, %d CPUs, load %s, 2 hosts (network namespaces with sshd) x 2 "
              "ranks, the launcher in a third; %d timed runs of each; directory %s"
              % (datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M:%S UTC"), os.cpu_count(),
                 loadavg(), args.repeat, work), flush=True)
        for v in variants:
            argv, env = cmds[v]
            extra = {k: env[k] for k in ("TROIKA_SSH_COMMAND", "PYTHONPATH", "LD_LIBRARY_PATH")
                     if k in env}
            if v != "troika":
                extra["PATH"] = os.path.join(work, "sshwrap") + ":..."
            print("  %-16s %s %s" % (v, " ".join("%s=%r" % kv for kv in extra.items()),
                                     " ".join(argv)), flush=True)
        print("times: seconds from just before the launcher starts (%s)"
              % ", ".join(label + " = " + name for name, label in
                          [(n, l) for n, l in STAGES]), flush=True)
        for v in variants:
            argv, env = cmds[v]
            r = run_once(argv, env, hosts, work, "warmup-" + v, args.timeout)
            print("warm-up %-16s %s   (load %s)" % (v, fmt_run(r), loadavg()), flush=True)
        for i in range(args.repeat):
            order = variants[i % len(variants):] + variants[:i % len(variants)]
            for v in order:
                argv, env = cmds[v]
                r = run_once(argv, env, hosts, work, "%d-%s" % (i, v), args.timeout)
                results[v].append(r)
                print("run %d   %-16s %s   (load %s)" % (i + 1, v, fmt_run(r), loadavg()),
                      flush=True)
    finally:
        hosts.destroy()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    print("\nmedians of %d runs, seconds from just before the launcher starts:" % args.repeat)
    medians = {v: {name: statistics.median(r[name] for r in results[v]) for name, _ in STAGES}
               for v in variants}
    ratios = [v for v in variants if v != "troika" and "troika" in variants]
    header = "%-28s" % "" + "".join("%18s" % v for v in variants) + "".join(
        "%24s" % ("troika/" + v) for v in ratios)
    print(header)
    for name, label in STAGES:
        row = "%-28s" % label + "".join("%18.2f" % medians[v][name] for v in variants)
        row += "".join("%24.2f" % (medians["troika"][name] / medians[v][name]) for v in ratios)
        print(row)
    print("load at the end: %s" % loadavg())
    for path, t in built.items():
        try:
            changed = os.stat(os.path.join(args.build, path)).st_mtime != t
        except OSError:
            changed = True
        if changed and "troika" in variants:
            print("WARNING: %s/%s changed during the runs (rebuilt by someone): the troika "
                  "column may mix builds" % (args.build, path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
