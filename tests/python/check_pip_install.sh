#!/bin/sh
# check_pip_install.sh SOURCE_DIR WORK_DIR WHEELHOUSE: `pip install SOURCE_DIR` into a fresh
# virtual environment (WORK_DIR/venv, with the system's site packages for Debian's torch),
# as a user would, offline: the build requirements (scikit-build-core, pybind11) come from
# WHEELHOUSE (scripts/setup.sh --test-tools downloads them). Then, from outside the source
# tree and without PYTHONPATH, troikarun from the environment's bin/ runs a 2-rank job that
# imports troika.torch from the environment and allreduces. The CMake build is kept in
# WORK_DIR/pip-build (a second run rebuilds only what changed).
# Exit 77 (skipped) without the wheelhouse or without torch for the system's python3.
set -eu
src=$1 work=$2 wheelhouse=$3
python=/usr/bin/python3
if ! ls "$wheelhouse"/scikit_build_core-*.whl >/dev/null 2>&1; then
  echo "pip install test skipped: no scikit-build-core wheel in $wheelhouse (scripts/setup.sh --test-tools)"
  exit 77
fi
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "pip install test skipped: $python cannot import torch (Debian: python3-torch)"
  exit 77
fi
unset PYTHONPATH
mkdir -p "$work"
work=$(cd "$work" && pwd)
rm -rf "$work/venv"
"$python" -m venv --system-site-packages "$work/venv"
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} "$work/venv/bin/pip" install \
  --disable-pip-version-check --no-index --find-links "$wheelhouse" \
  --config-settings=build-dir="$work/pip-build" "$src"

cd "$work"
cat > smoke.py <<'PY'
import sys
import torch
import troika.torch as hvd

hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
assert total == 3.0, total
assert hvd.__file__.startswith(sys.prefix), (hvd.__file__, sys.prefix)
print("smoke: rank %d of %d: sum %s, troika.torch from %s" % (hvd.rank(), hvd.size(), total, hvd.__file__))
hvd.shutdown()
PY
PATH="$work/venv/bin:$PATH"
for program in troikarun troika-agent troika-coordinator troikactl; do
  [ "$(command -v "$program")" = "$work/venv/bin/$program" ] || { echo "FAIL: $program is not in the environment's bin/"; exit 1; }
done
out=$(troikarun -np 2 -- python smoke.py 2>&1) || { echo "$out"; echo "FAIL: the job failed"; exit 1; }
echo "$out"
[ "$(echo "$out" | grep -c 'smoke: rank . of 2: sum 3.0')" = 2 ] || { echo "FAIL: not every rank reported"; exit 1; }
echo "ok: pip install . works: troikarun and troika.torch from $work/venv"
