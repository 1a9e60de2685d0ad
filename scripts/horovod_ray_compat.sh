#!/bin/bash
# scripts/horovod_ray_compat.sh HOROVOD [FILE...]: Horovod's Ray tests (test/single/test_ray.py
# of a Horovod checkout, or the FILEs named there) against troika.ray, each test as its own
# pytest run, then each file as one (docs/horovod-compat.md, "Ray").
#
# The files run unchanged but for two things, both made here, in a temporary folder:
# - an alias package first on PYTHONPATH: horovod.torch is troika.torch, horovod.ray and
#   horovod.ray.runner's RayExecutor is troika.ray's, horovod.common.util's gloo_built is
#   troika.torch's; the private names the files import (horovod.ray.runner's Coordinator and
#   MiniSettings, horovod.ray.strategy's create_placement_group, horovod.ray.worker's
#   BaseHorovodWorker, horovod.ray.elastic*, horovod.runner.elastic.discovery's HostDiscovery)
#   are stand-ins that raise NotImplementedError when used, so the files import;
# - a copy of each file whose one ray.init(..., _redis_max_memory=...) (an argument Ray 2.60 no
#   longer has) lacks that argument; the script shows the diff.
# test_ray.py imports Ray Client's test helpers, which need grpcio (ray[client]); setup.sh
# installs it in build/venv-ray. PYTHON: the interpreter (default build/venv-ray/bin/python);
# the troika package is taken from build/python.
set -euo pipefail
horovod=${1:?usage: $0 HOROVOD_CHECKOUT [FILE...]}
shift
files=("${@:-test_ray.py}")
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$root/build/venv-ray/bin/python}
work=$(mktemp -d /tmp/hvd-ray-XXXXXX)
echo "work folder: $work"

alias_module() {  # alias_module MODULE BODY: writes the alias package's module MODULE
  local path=$work/alias/${1//.//}
  mkdir -p "$path"
  printf '%s\n' "$2" > "$path/__init__.py"
}
alias_module horovod ""
alias_module horovod.torch "import sys, troika.torch
sys.modules[__name__] = troika.torch"
alias_module horovod.common ""
alias_module horovod.common.util "from troika.torch import gloo_built"
alias_module horovod._private "def stand_in(name):
    message = '%s is a private part of Horovod: troika.ray has no counterpart' % name

    class StandIn:
        def __init__(self, *args, **kwargs):
            raise NotImplementedError(message)

    StandIn.__name__ = name.rsplit('.', 1)[1]
    return StandIn"
alias_module horovod.ray "from troika.ray import RayExecutor"
alias_module horovod.ray.runner "from troika.ray import RayExecutor
from horovod._private import stand_in
Coordinator = stand_in('horovod.ray.runner.Coordinator')
MiniSettings = stand_in('horovod.ray.runner.MiniSettings')"
alias_module horovod.ray.strategy "from horovod._private import stand_in
create_placement_group = stand_in('horovod.ray.strategy.create_placement_group')"
alias_module horovod.ray.worker "from horovod._private import stand_in
BaseHorovodWorker = stand_in('horovod.ray.worker.BaseHorovodWorker')"
alias_module horovod.ray.elastic "from horovod._private import stand_in
ElasticRayExecutor = stand_in('horovod.ray.elastic.ElasticRayExecutor')
RayHostDiscovery = stand_in('horovod.ray.elastic.RayHostDiscovery')"
alias_module horovod.ray.elastic_v2 "from horovod._private import stand_in
RayHostDiscovery = stand_in('horovod.ray.elastic_v2.RayHostDiscovery')"
alias_module horovod.runner ""
alias_module horovod.runner.elastic ""
alias_module horovod.runner.elastic.discovery "from horovod._private import stand_in
HostDiscovery = stand_in('horovod.runner.elastic.discovery.HostDiscovery')"

for file in "${files[@]}"; do
  sed 's/, _redis_max_memory=1024 \* 1024 \* 1024)/)/' "$horovod/test/single/$file" > "$work/$file"
  diff "$horovod/test/single/$file" "$work/$file" || true
done

export PYTHONPATH=$work/alias:$root/build/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1
cd "$work"
pytest=("$python" -m pytest -p no:cacheprovider -q)
set -f  # test ids hold [...]: no globbing
for file in "${files[@]}"; do
  for test in $("${pytest[@]}" --collect-only "$file" | grep '::'); do
    log=$work/$(echo "$test" | tr -c 'A-Za-z0-9_.-' _).log
    "${pytest[@]}" -rA "$test" > "$log" 2>&1 || true
    echo "each: $test: $(tail -n 1 "$log" | tr -d '=')"
  done
  "${pytest[@]}" -rA "$file" > "$work/$file.log" 2>&1 || true
  grep -E '^(PASSED|FAILED|SKIPPED|ERROR) ' "$work/$file.log" | sed "s/^/file: /"
  echo "file: $file: $(tail -n 1 "$work/$file.log" | tr -d '=')"
done
