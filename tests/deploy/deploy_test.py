"""Checks of deploy/: the manifests, the container image's setup, and the metrics that the
dashboard and the alerts use, against the real binaries. Run by ctest (tests/deploy):

  manifests   (deploy_manifests) kustomize renders, with only what kubectl 1.20's kustomize
              knows, the same objects with every kubectl here (extra_kubectls); yamllint;
              Kubernetes schemas (built-in kinds, offline, kubernetes-validate); the Prometheus
              Operator objects (no schema there) select what exists; alert rules pass
              promtool; directories written are volumes; the dashboard parses, every panel has
              queries, and it and the alerts use only documented metrics
  dockerfile  (deploy_dockerfile_in_step) Dockerfile, README and scripts/setup.sh stay in
              step; every shared library of the installed binaries comes from
              RUNTIME_PACKAGES (or debian:12-slim), and every runtime package is needed
  flags       (deploy_flags_match_cli) the manifests' coordinator and agent command lines,
              exactly (see check_flags for the rewrites), run the example jobs to
              completion; in a private network namespace where it can (root)
  live        (metrics_live) coordinator + 2 agents training: promtool check metrics on their
              scrapes, a real Prometheus scraping them answers a step-time quantile, and every
              metric of the dashboard and alerts exists

Needs build/ (binaries), promtool, prometheus, yamllint, kubectl and PyYAML
(scripts/setup.sh --test-tools).
"""

import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("TROIKA_BUILD_DIR", os.path.join(ROOT, "build"))
BINARIES = {
    "troika-coordinator": os.path.join(BUILD, "coordinator", "troika-coordinator"),
    "troikactl": os.path.join(BUILD, "coordinator", "troikactl"),
    "troika-agent": os.path.join(BUILD, "agent", "troika-agent"),
    "troikarun": os.path.join(BUILD, "agent", "troikarun"),
    "troika-example-train": os.path.join(BUILD, "examples", "troika-example-train"),
    "troika-example-elastic": os.path.join(BUILD, "examples", "troika-example-elastic"),
}
KUBERNETES_VERSION = "1.30.0"


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def run(args, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, **kwargs)


# What kustomize v2 (kubectl 1.20, Debian's kubernetes-client) understands and the base needs:
# no `patches:`, no `labels:` (kustomize v4).
KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources", "namespace", "commonLabels", "images"}
# Where this project's development machines keep a kubectl 1.20 beside a newer `kubectl`
# (a fresh Debian 12 has Debian's kubectl 1.20 as `kubectl` itself).
KUBECTL_120 = "/opt/kube120/usr/bin/kubectl"


def extra_kubectls():
    """$TROIKA_EXTRA_KUBECTLS (':'-separated), else KUBECTL_120 where it exists."""
    if "TROIKA_EXTRA_KUBECTLS" in os.environ:
        return list(filter(None, os.environ["TROIKA_EXTRA_KUBECTLS"].split(":")))
    return [KUBECTL_120] if os.path.exists(KUBECTL_120) else []


def rendered(kubectl="kubectl"):
    r = run([kubectl, "kustomize", os.path.join(ROOT, "deploy", "k8s")])
    if r.returncode != 0:
        fail(f"{kubectl} kustomize deploy/k8s: " + r.stderr)
    return r.stdout, [d for d in yaml.safe_load_all(r.stdout) if d]


def check_kustomization(docs):
    """Old kubectls render the base too: only the keys they know, and the same objects from
    every other kubectl there is (extra_kubectls: a kubectl 1.20 next to a newer one)."""
    with open(os.path.join(ROOT, "deploy", "k8s", "kustomization.yaml")) as f:
        keys = set(yaml.safe_load(f))
    if keys - KUSTOMIZATION_KEYS:
        fail("deploy/k8s/kustomization.yaml uses what kubectl 1.20's kustomize cannot render: "
             + ", ".join(sorted(keys - KUSTOMIZATION_KEYS)))

    def canonical(objects):
        return sorted(json.dumps(d, sort_keys=True) for d in objects)
    kubectls = extra_kubectls()
    for kubectl in kubectls:
        if canonical(rendered(kubectl)[1]) != canonical(docs):
            fail(f"{kubectl} kustomize renders other objects than kubectl")
    return ["kubectl"] + kubectls


def find(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    if not found:
        fail(f"no {kind} {name or ''} in the rendered manifests")
    return found[0]


def container(docs, kind, name):
    return find(docs, kind, name)["spec"]["template"]["spec"]["containers"][0]


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


# ---- manifests -----------------------------------------------------------------------------

def check_manifests():
    text, docs = rendered()
    kubectls = check_kustomization(docs)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rendered.yaml")
        with open(out, "w") as f:
            f.write(text)
        lint = run(["yamllint", "-s", "-c", os.path.join(ROOT, "deploy", ".yamllint"),
                    os.path.join(ROOT, "deploy"), out])
        if lint.returncode != 0:
            fail("yamllint:\n" + lint.stdout + lint.stderr)
        # kubernetes-validate knows the built-in kinds' schemas of each Kubernetes version
        # (offline, in the package); for other kinds (the Prometheus Operator's CRDs) it warns
        # "Couldn't find schema" and exits 0: those must be exactly the operator's objects.
        validate = run([os.path.join(os.path.dirname(sys.executable), "kubernetes-validate"),
                        "--strict", "-k", KUBERNETES_VERSION, out])
        output = validate.stdout + validate.stderr
        passed = re.findall(r"passed for resource (\S+)", output)
        unknown = sorted(re.findall(r"Couldn't find schema for kind (\S+)", output))
        builtin = [d for d in docs if not d["apiVersion"].startswith("monitoring.coreos.com/")]
        operator = sorted(d["kind"] for d in docs if d not in builtin)
        if validate.returncode != 0 or len(passed) != len(builtin) or unknown != operator:
            fail(f"kubernetes-validate ({len(passed)} of {len(builtin)} passed; no schema for "
                 f"{unknown}, expected {operator}):\n" + output)
        check_operator_objects(docs, tmp)
    check_writable_dirs(docs)
    check_dashboard(docs)
    print(f"manifests ok: {len(docs)} objects rendered by {', '.join(kubectls)}; "
          f"{len(passed)} schema-validated (Kubernetes {KUBERNETES_VERSION}), "
          f"{len(operator)} operator objects checked by hand")


def check_operator_objects(docs, tmp):
    """The Prometheus Operator's CRDs have no schema in kubernetes-validate: check that they
    select what exists, and the alert rules with promtool."""
    service = find(docs, "Service", "troika-coordinator")
    monitor = find(docs, "ServiceMonitor", "troika-coordinator")
    if not selects(monitor["spec"]["selector"], service["metadata"]["labels"]):
        fail("the ServiceMonitor does not select the coordinator's Service")
    ports = {p["name"] for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        if endpoint["port"] not in ports:
            fail(f"ServiceMonitor port {endpoint['port']} is not a port of the Service")
    job = find(docs, "Job", "troika-example")
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    pod_monitor = find(docs, "PodMonitor")
    if not selects(pod_monitor["spec"]["selector"], pod_labels):
        fail("the PodMonitor does not select the example job's pods")
    container_ports = {p["name"] for p in container(docs, "Job", "troika-example")["ports"]}
    for endpoint in pod_monitor["spec"]["podMetricsEndpoints"]:
        if endpoint["port"] not in container_ports:
            fail(f"PodMonitor port {endpoint['port']} is not a port of the agent container")
    policy = find(docs, "NetworkPolicy", "troika-coordinator")
    if not selects(policy["spec"]["podSelector"], service["spec"]["selector"]):
        fail("the coordinator's NetworkPolicy does not select the coordinator")
    if not any(selects(peer["podSelector"], pod_labels)
               for rule in policy["spec"]["ingress"] for peer in rule["from"] if "podSelector" in peer):
        fail("the coordinator's NetworkPolicy does not admit the job's pods")
    rules = os.path.join(tmp, "rules.yaml")
    with open(rules, "w") as f:
        yaml.safe_dump({"groups": find(docs, "PrometheusRule")["spec"]["groups"]}, f)
    check = run(["promtool", "check", "rules", rules])
    if check.returncode != 0:
        fail("promtool check rules:\n" + check.stdout + check.stderr)


def check_writable_dirs(docs):
    """The containers' root file systems are read-only: every directory the processes write
    (the coordinator's timeline and autotune dirs, the agent's Unix socket dir, /tmp unless
    --socket_dir says otherwise) must be a mounted volume."""
    for kind, name, defaults in (("Deployment", "troika-coordinator", {}),
                                 ("Job", "troika-example", {"socket_dir": "/tmp"}),
                                 ("Job", "troika-example-elastic", {"socket_dir": "/tmp"})):
        c = container(docs, kind, name)
        if not c.get("securityContext", {}).get("readOnlyRootFilesystem"):
            fail(f"the {name} container's root file system is not read-only")
        dirs = dict(defaults)
        for arg in c["args"]:
            m = re.match(r"--(\w+_dir)=(.+)", arg)
            if m:
                dirs[m.group(1)] = m.group(2)
        mounts = [m["mountPath"].rstrip("/") for m in c.get("volumeMounts", [])]
        for flag, path in dirs.items():
            if not any(path == m or path.startswith(m + "/") for m in mounts):
                fail(f"{name} writes --{flag}={path}, which is on its read-only root file system")
        if kind == "Job":
            check_shared_memory(find(docs, kind, name)["spec"]["template"]["spec"], c, name)


def check_shared_memory(pod, c, name):
    """A training pod's DataLoader workers hand batches over through /dev/shm: it must be a
    memory-backed volume, not the container's 64 MiB."""
    volume = next((m["name"] for m in c.get("volumeMounts", [])
                   if m["mountPath"].rstrip("/") == "/dev/shm"), None)
    if volume is None:
        fail(f"{name} mounts no volume at /dev/shm (the container's own is 64 MiB)")
    spec = next(v for v in pod["volumes"] if v["name"] == volume)
    if spec.get("emptyDir", {}).get("medium") != "Memory":
        fail(f"{name}'s /dev/shm volume '{volume}' is not an emptyDir with medium: Memory")


def documented_metrics():
    """Metric names in docs/metrics.md (histograms and counters by their family names)."""
    with open(os.path.join(ROOT, "docs", "metrics.md")) as f:
        return set(re.findall(r"`((?:troika|process)_[a-z0-9_]+)", f.read()))


def check_dashboard(docs):
    with open(os.path.join(ROOT, "deploy", "grafana", "troika.json")) as f:
        dashboard = json.load(f)
    for panel in dashboard["panels"]:
        if not panel.get("targets") or not all(t.get("expr") for t in panel["targets"]):
            fail(f"dashboard panel '{panel['title']}' has no query")
    undocumented = sorted(used_metrics(docs) - documented_metrics())
    if undocumented:
        fail("the dashboard or the alerts use metrics docs/metrics.md does not name: "
             + ", ".join(undocumented))


# ---- dockerfile ----------------------------------------------------------------------------

def shell_array(script, name):
    r = run(["bash", "-c", f'eval "$(sed -n "/^{name}=(/,/)/p" "$0")"; echo "${{{name}[@]}}"', script])
    return r.stdout.split()


# Packages of debian:12-slim itself.
BASE_PACKAGES = {"libc6", "libstdc++6", "libgcc-s1", "zlib1g"}


def packages_of(paths):
    """{path: the Debian package that holds it}, with one dpkg -S call (merged /usr aware)."""
    variants = {}
    for path in paths:
        for candidate in (path, path.removeprefix("/usr"), "/usr" + path,
                          os.path.realpath(path)):
            variants.setdefault(candidate, set()).add(path)
    found = {}
    for line in run(["dpkg", "-S"] + sorted(variants)).stdout.splitlines():
        m = re.match(r"([^:\s,]+)(?::\S+)?(?:, \S+)*: (\S+)$", line)
        if m and m.group(2) in variants:
            for path in variants[m.group(2)]:
                found.setdefault(path, m.group(1))
    return found


def check_dockerfile():
    with open(os.path.join(ROOT, "deploy", "docker", "Dockerfile")) as f:
        dockerfile = f.read()
    dockerfile = dockerfile.replace("\\\n", " ")  # continuation lines
    stages = re.split(r"^FROM ", dockerfile, flags=re.M)[1:]
    if len(stages) != 2:
        fail("the Dockerfile should have a build and a runtime stage")
    if not re.search(r"^RUN .*\./scripts/setup\.sh\s*(&&|$)", stages[0], flags=re.M):
        fail("the build stage does not run ./scripts/setup.sh (the README's script)")
    if not re.search(r"setup\.sh --runtime", stages[1]):
        fail("the runtime stage does not run scripts/setup.sh --runtime")
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    for command in ("./scripts/setup.sh && ./build/agent/troikarun", "./scripts/test.sh"):
        if command not in readme:
            fail(f"the README's commands no longer contain '{command}'")
    with open(os.path.join(ROOT, "scripts", "test.sh")) as f:
        if "scripts/setup.sh" not in f.read():
            fail("scripts/test.sh no longer calls scripts/setup.sh")
    runtime = set(shell_array(os.path.join(ROOT, "scripts", "setup.sh"), "RUNTIME_PACKAGES"))
    if not runtime:
        fail("scripts/setup.sh has no RUNTIME_PACKAGES")
    with tempfile.TemporaryDirectory() as prefix:
        install = run(["cmake", "--install", BUILD, "--prefix", prefix])
        if install.returncode != 0:
            fail("cmake --install: " + install.stderr)
        files = [os.path.join(prefix, "bin", b) for b in os.listdir(os.path.join(prefix, "bin"))]
        files += [os.path.join(prefix, "lib", "libtroika.so")]
        needed = {}
        for path in files:
            for line in run(["ldd", path]).stdout.splitlines():
                m = re.match(r"\s*(\S+) => (\S+)", line)
                if not m:
                    continue
                if m.group(2) == "not":
                    fail(f"{path} needs {m.group(1)}, which is not found: the install is broken")
                # The image builds on plain Debian, which has no CUDA toolkit: its libtroika
                # has no GPU data plane and needs neither library. A local CUDA build does.
                if re.search(r"/lib(cudart|nccl)\.so", m.group(2)):
                    continue
                if not m.group(2).startswith(prefix):
                    needed[m.group(2)] = path
    owners = packages_of(needed)
    missing = []
    for lib, user in sorted(needed.items()):
        package = owners.get(lib)
        if package not in runtime | BASE_PACKAGES:
            missing.append(f"{lib} ({package}, needed by {os.path.basename(user)})")
    if missing:
        fail("RUNTIME_PACKAGES in scripts/setup.sh lacks:\n  " + "\n  ".join(missing))
    # The other way round: a package no binary needs any more leaves the list too.
    unused = sorted(runtime - set(owners.values()))
    if unused:
        fail("RUNTIME_PACKAGES in scripts/setup.sh holds packages no installed binary needs: "
             + " ".join(unused))
    print(f"dockerfile ok: {len(needed)} shared libraries, all from RUNTIME_PACKAGES or the base")


# ---- processes -----------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(port, path, timeout=2):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def wait_for(predicate, timeout, what):
    """`what`: a text, or a function that makes it (logs read when the wait failed)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    fail(f"timed out after {timeout}s waiting for " + (what() if callable(what) else what))


def die_with_parent():
    """In a child before exec: SIGKILL when this test process dies, even by SIGKILL (ctest's
    timeout), so that no coordinator or agent outlives the test."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Processes:
    """Started processes, stopped (SIGTERM, then SIGKILL) when the block ends, whatever happens
    (a SIGTERM to the test unwinds the block too)."""

    def __init__(self, scratch):
        self.scratch = scratch
        self.procs = []
        signal.signal(signal.SIGTERM, lambda *_: sys.exit("FAIL: terminated"))

    def start(self, name, args, env=None):
        log = open(os.path.join(self.scratch, name + ".log"), "w")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, preexec_fn=die_with_parent)
        proc.name = name
        self.procs.append(proc)
        return proc

    def log(self, name):
        with open(os.path.join(self.scratch, name + ".log")) as f:
            return f.read()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def binary(name):
    path = BINARIES.get(os.path.basename(name))
    if path is None:
        fail(f"the manifests run '{name}', which this build does not make")
    return path


def expand(args, env):
    """$(VAR) references, as Kubernetes expands them in command and args."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in args]


# ---- flags ---------------------------------------------------------------------------------

def private_network():
    """Re-runs this check in a network namespace of its own (root: unshare), so that the
    manifests' fixed ports (7070, 9090) are free whatever runs on this host — another test run,
    or a Prometheus server that its Debian package started on 9090. Where namespaces cannot be
    made, the check runs here and needs those ports free."""
    if os.environ.get("TROIKA_DEPLOY_NETNS"):
        if run(["ip", "link", "set", "lo", "up"]).returncode != 0:
            fail("cannot bring up the loopback interface of the private network namespace")
        return
    if run(["unshare", "--net", "true"]).returncode != 0:
        print("note: no private network namespace here (needs root); using the host's ports")
        return
    sys.stdout.flush()
    os.execvpe("unshare", ["unshare", "--net", "--", sys.executable, os.path.abspath(__file__)]
               + sys.argv[1:], dict(os.environ, TROIKA_DEPLOY_NETNS="1"))


# The example Jobs: (name, its job-token Secret's directory from make-secrets.sh, its number of
# pods at the start, what its first agent prints once training is done).
EXAMPLE_JOBS = [("troika-example", "example-job", "completions", "step 50 loss"),
                ("troika-example-elastic", "example-elastic-job", "parallelism", "done steps")]


def check_flags():
    private_network()
    _, docs = rendered()
    coordinator = container(docs, "Deployment", "troika-coordinator")
    for name, _, _, _ in EXAMPLE_JOBS:
        if any(a.startswith("--plaintext") for a in
               coordinator["args"] + container(docs, "Job", name)["args"]):
            fail("the manifests ask for plaintext gRPC: the cluster's control plane must use TLS")
    for flag in ("--tls_cert=", "--tls_key=", "--tls_client_ca="):
        if not any(a.startswith(flag) for a in coordinator["args"]):
            fail(f"the coordinator's args lack {flag}: mutual TLS is the cluster default")
    with tempfile.TemporaryDirectory() as scratch, Processes(scratch) as procs:
        # The Secrets' files, made by the script deploy/README.md tells users to run; each
        # pod's /etc/troika/... mount becomes the matching directory here.
        secrets = os.path.join(scratch, "secrets")
        made = run([os.path.join(ROOT, "deploy", "make-secrets.sh"), secrets])
        if made.returncode != 0:
            fail("deploy/make-secrets.sh: " + made.stdout + made.stderr)

        def mounted(args, tls, job_token="example-job"):
            """The pod's Secret mounts, as the files make-secrets.sh wrote."""
            mounts = {"/etc/troika/tls/": tls, "/etc/troika/admin/": "admin",
                      "/etc/troika/job/": job_token}
            for path, directory in mounts.items():
                args = [a.replace(path, os.path.join(secrets, directory) + "/") for a in args]
            # The state volume: a scratch directory, not this machine's /var/lib.
            return [a.replace("=/var/lib/troika", "=" + os.path.join(scratch, "state"))
                    for a in args]
        # The Deployment's own flags, exactly (but the Secret's path).
        args = [binary(coordinator["command"][0])] + mounted(coordinator["args"], "coordinator")
        procs.start("coordinator", args)
        metrics = int(next(a for a in args if a.startswith("--metrics_listen=")).rsplit(":", 1)[1])
        wait_for(lambda: http_get(metrics, "/readyz")[0] == 200, 30,
                 lambda: "the coordinator's /readyz\n" + procs.log("coordinator"))
        ran = []
        for name, token, count, done in EXAMPLE_JOBS:
            agent = container(docs, "Job", name)
            nodes = find(docs, "Job", name)["spec"][count]
            agents = []
            for index in range(nodes):
                env = {"JOB_COMPLETION_INDEX": str(index), "POD_IP": "127.0.0.1"}
                undefined = {v for a in agent["args"]
                             for v in re.findall(r"\$\((\w+)\)", a)} - set(env)
                if undefined:
                    fail(f"the Job's args use $({', '.join(sorted(undefined))}), which this "
                         "test does not set as Kubernetes would")
                if not {e["name"] for e in agent["env"]} <= set(env):
                    fail(f"{name}'s container env is not within JOB_COMPLETION_INDEX and POD_IP")
                args = mounted(expand(agent["command"] + agent["args"], env), "client", token)
                # Exactly the Job's flags (and the Secret's path) but these: the coordinator's
                # Service name becomes its local address, and — since every "pod" shares this
                # host — the metrics port of every agent but the first moves to a free one,
                # and an agent without --node_rank gets the host name its pod would have.
                args = [re.sub(r"^--coordinator=.*", "--coordinator=127.0.0.1:7070", a)
                        for a in args]
                if index > 0:
                    args = [re.sub(r"^--metrics_listen=(.*):\d+$",
                                   rf"--metrics_listen=\1:{free_port()}", a) for a in args]
                split = args.index("--")
                if not any(a.startswith("--node_rank") for a in args[:split]):
                    args.insert(split, f"--host={name}-pod-{index}")
                    split += 1
                args = ([binary(args[0])] + args[1:split + 1] + [binary(args[split + 1])]
                        + args[split + 2:])
                agents.append(procs.start(f"{name}-{index}", args))
            for index, proc in enumerate(agents):
                try:
                    code = proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    fail(f"{name}: agent {index} did not finish\n" + procs.log(f"{name}-{index}"))
                if code != 0:
                    fail(f"{name}: agent {index} exited {code}\n" + procs.log(f"{name}-{index}"))
            if done not in procs.log(f"{name}-0"):
                fail(f"{name} did not train to the end:\n" + procs.log(f"{name}-0"))
            ran.append(f"{name} ({nodes} agents)")
    print(f"flags ok: the coordinator and {', '.join(ran)} ran with the manifests' command lines")


# ---- live ----------------------------------------------------------------------------------

def metric_names(expr):
    """Metric names a PromQL expression reads (histogram series by their family name)."""
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\b(by|without)\s*\([^)]*\)", "", expr)  # grouping labels
    names = set(re.findall(r"\b((?:troika|process)_[a-z0-9_]+)", expr))
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}


def exposed_names(text):
    names = set()
    for line in text.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            names.add(m.group(1))
    return names


def promtool_metrics(text, what):
    r = run(["promtool", "check", "metrics"], input=text)
    if r.returncode != 0 or r.stdout.strip() or r.stderr.strip():
        fail(f"promtool check metrics on the {what}'s scrape (exit {r.returncode}):\n"
             + r.stdout + r.stderr)


def query(port, promql):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.load(r)["data"]["result"]
    except OSError:
        return []


def used_metrics(docs):
    """Metric names that the dashboard's queries and the alert rules read."""
    with open(os.path.join(ROOT, "deploy", "grafana", "troika.json")) as f:
        dashboard = json.load(f)
    used = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            used |= metric_names(target.get("expr", ""))
    for group in find(docs, "PrometheusRule")["spec"]["groups"]:
        for rule in group["rules"]:
            used |= metric_names(rule["expr"])
    return used


def check_live():
    _, docs = rendered()
    used = used_metrics(docs)

    with tempfile.TemporaryDirectory() as scratch, Processes(scratch) as procs:
        grpc, metrics = free_port(), free_port()
        agent_ports = [free_port(), free_port()]
        token_file = os.path.join(scratch, "job-token")
        with open(token_file, "w") as f:
            f.write("metrics-live-token\n")
        procs.start("coordinator", [BINARIES["troika-coordinator"], f"--listen=127.0.0.1:{grpc}",
                                    "--plaintext",
                                    f"--metrics_listen=127.0.0.1:{metrics}", "--autotune"])
        wait_for(lambda: http_get(metrics, "/readyz")[0] == 200, 30, "the coordinator")
        agents = []

        def training():
            """The job must train throughout: an agent that ended ends the test."""
            for node, proc in enumerate(agents):
                if proc.poll() is not None:
                    fail(f"agent {node} exited {proc.returncode} during the test:\n"
                         + procs.log(f"agent-{node}")[-3000:])
            return True
        for node in range(2):
            agents.append(procs.start(f"agent-{node}", [
                BINARIES["troika-agent"], f"--coordinator=127.0.0.1:{grpc}", "--job=live",
                "--plaintext=true", "--job_token_file=" + token_file,
                "--nnodes=2", "--nproc-per-node=2", f"--node_rank={node}", f"--host=node-{node}",
                "--data_host=127.0.0.1", f"--socket_dir={scratch}",
                f"--metrics_listen=127.0.0.1:{agent_ports[node]}", "--",
                BINARIES["troika-example-train"], "--steps=1000000"]))
        # Step samples reach the coordinator about once a second.
        wait_for(lambda: training() and
                 "troika_step_duration_seconds_count{" in http_get(metrics, "/metrics")[1],
                 60, lambda: "step samples\n" + procs.log("agent-0"))
        wait_for(lambda: http_get(agent_ports[0], "/readyz")[0] == 200, 30, "agent 0 ready")

        prometheus_port = free_port()
        config = os.path.join(scratch, "prometheus.yml")
        with open(config, "w") as f:
            yaml.safe_dump({
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {"job_name": "troika-coordinator",
                     "static_configs": [{"targets": [f"127.0.0.1:{metrics}"]}]},
                    {"job_name": "troika-agents",
                     "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in agent_ports]}]}]}, f)
        procs.start("prometheus", ["prometheus", f"--config.file={config}",
                                   f"--storage.tsdb.path={scratch}/tsdb",
                                   f"--web.listen-address=127.0.0.1:{prometheus_port}"])
        quantile = ("histogram_quantile(0.9, sum by (le) "
                    "(rate(troika_step_duration_seconds_bucket[30s])))")
        result = []

        def answered():
            training()
            result[:] = [r for r in query(prometheus_port, quantile)
                         if r["value"][1] not in ("NaN", "+Inf")]
            return bool(result)
        wait_for(answered, 60, lambda: "Prometheus to answer " + quantile + "\n"
                 + procs.log("prometheus")[-3000:] + "\nagent-0:\n" + procs.log("agent-0")[-2000:])
        up = query(prometheus_port, "up")
        if sorted(r["value"][1] for r in up) != ["1", "1", "1"]:
            fail(f"Prometheus does not scrape all three targets: {up}")

        scrapes = {"coordinator": http_get(metrics, "/metrics")[1],
                   "agent": http_get(agent_ports[0], "/metrics")[1]}
        for what, text in scrapes.items():
            promtool_metrics(text, what)
        exposed = exposed_names(scrapes["coordinator"]) | exposed_names(scrapes["agent"])
        absent = sorted(used - exposed)
        if absent:
            fail("the dashboard or the alerts use metrics no live scrape has: " + ", ".join(absent))
    print(f"live ok: p90 step time {float(result[0]['value'][1]) * 1e3:.1f} ms from Prometheus; "
          f"{len(used)} dashboard and alert metrics all exposed; promtool clean")


if __name__ == "__main__":
    checks = {"manifests": check_manifests, "dockerfile": check_dockerfile, "flags": check_flags,
              "live": check_live}
    if len(sys.argv) != 2 or sys.argv[1] not in checks:
        fail("usage: deploy_test.py " + "|".join(checks))
    checks[sys.argv[1]]()
