#!/bin/sh
# check_pip_install.sh SOURCE_DIR WORK_DIR WHEELHOUSE [FRONT_END]: `pip install SOURCE_DIR` into a
# fresh virtual environment, as a user of FRONT_END would, offline: the build requirements
# (scikit-build-core, pybind11) come from WHEELHOUSE (scripts/setup.sh --test-tools downloads
# them). Then, from outside the source tree and without PYTHONPATH, troikarun from the
# environment's bin/ runs a 2-rank job that imports the front end from the environment.
#   torch (the default): WORK_DIR/venv, with the system's site packages for Debian's torch; the
#     job imports troika.torch and allreduces.
#   tensorflow: WORK_DIR/venv-tensorflow, without them. First `TROIKA_WITH_TENSORFLOW=1 pip
#     install` must fail, saying that TensorFlow is missing; then tensorflow-cpu goes in from
#     WHEELHOUSE (setup.sh downloads it there) as a TensorFlow user installs it, the same
#     install succeeds, and examples/tensorflow2/tensorflow2_mnist_like.py trains on 2 ranks
#     with the environment's troikarun and python (checked by run_example.py).
#   mxnet: WORK_DIR/venv-mxnet, without them: `pip install SOURCE_DIR[mxnet]` (pyproject.toml's
#     extra: MXNet 1.9.1 and numpy < 1.24, from WHEELHOUSE) as an MXNet user installs it, then
#     examples/mxnet/mxnet_gluon_mnist_like.py trains on 2 ranks the same way.
# All keep the CMake build in $TROIKA_PIP_BUILD_DIR (default WORK_DIR/pip-build; a second run
# rebuilds only what changed; the tests hold a RESOURCE_LOCK on it), of build type
# $TROIKA_PIP_BUILD_TYPE (default pyproject.toml's, Release). ctest sets them to a directory
# beside the build's and the build's type, so that ccache (CMakeLists.txt) hands this build the
# build's objects instead of compiling everything again.
# Exit 77 (skipped) without the wheelhouse, without torch for the system's python3 (torch),
# without the tensorflow-cpu wheel (tensorflow) or without the mxnet wheel (mxnet).
set -eu
src=$1 work=$2 wheelhouse=$3 front_end=${4:-torch}
python=/usr/bin/python3
if ! ls "$wheelhouse"/scikit_build_core-*.whl >/dev/null 2>&1; then
  echo "pip install test skipped: no scikit-build-core wheel in $wheelhouse (scripts/setup.sh --test-tools)"
  exit 77
fi
case $front_end in
  torch)
    if ! "$python" -c 'import torch' 2>/dev/null; then
      echo "pip install test skipped: $python cannot import torch (Debian: python3-torch)"
      exit 77
    fi
    venv_name=venv ;;
  tensorflow)
    if ! ls "$wheelhouse"/tensorflow_cpu-*.whl >/dev/null 2>&1; then
      echo "pip install test skipped: no tensorflow-cpu wheel in $wheelhouse (scripts/setup.sh --test-tools)"
      exit 77
    fi
    venv_name="venv-tensorflow" ;;
  mxnet)
    if ! ls "$wheelhouse"/mxnet-1.9.1-*.whl >/dev/null 2>&1; then
      echo "pip install test skipped: no mxnet wheel in $wheelhouse (scripts/setup.sh --test-tools)"
      exit 77
    fi
    venv_name="venv-mxnet" ;;
  *) echo "check_pip_install.sh: FRONT_END is torch, tensorflow or mxnet, not $front_end"; exit 2 ;;
esac
unset PYTHONPATH
mkdir -p "$work"
work=$(cd "$work" && pwd)
venv=$work/$venv_name
rm -rf "$venv"
started=$(date +%s)
elapsed() { echo "$1: $(($(date +%s) - started)) s after the start"; }
build_dir=${TROIKA_PIP_BUILD_DIR:-$work/pip-build}
build_type=${TROIKA_PIP_BUILD_TYPE:+--config-settings=cmake.build-type=$TROIKA_PIP_BUILD_TYPE}
# pip_install ARGS...: pip install into the environment, offline, building in $build_dir.
pip_install() {
  # shellcheck disable=SC2086  # $build_type: one argument or none
  CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} "$venv/bin/pip" install \
    --disable-pip-version-check --no-index --find-links "$wheelhouse" \
    --config-settings=build-dir="$build_dir" $build_type "$@"
}

if [ "$front_end" = torch ]; then
  "$python" -m venv --system-site-packages "$venv"
  pip_install "$src"
elif [ "$front_end" = mxnet ]; then
  "$python" -m venv "$venv"
  pip_install "$src[mxnet]"
  elapsed "troika and mxnet installed"
else
  "$python" -m venv "$venv"
  # Asked for TensorFlow's op library where there is no TensorFlow: the install fails, saying so.
  if out=$(TROIKA_WITH_TENSORFLOW=1 pip_install "$src" 2>&1); then
    echo "$out"; echo "FAIL: TROIKA_WITH_TENSORFLOW=1 installed without TensorFlow"; exit 1
  fi
  if ! echo "$out" | tr -s ' \n' '  ' | grep -q 'TROIKA_WITH_TENSORFLOW=1 but no TensorFlow'; then
    echo "$out"; echo "FAIL: the install failed without saying that TensorFlow is missing"; exit 1
  fi
  echo "ok: without TensorFlow, TROIKA_WITH_TENSORFLOW=1 pip install fails:"
  echo "$out" | grep -A3 'CMake Error'
  elapsed "the refused install"
  pip_install "tensorflow-cpu==2.21.*"
  elapsed "tensorflow-cpu installed"
  TROIKA_WITH_TENSORFLOW=1 pip_install "$src"
  elapsed "troika installed"
fi

cd "$work"
PATH="$venv/bin:$PATH"
for program in troikarun troika-agent troika-coordinator troikactl; do
  [ "$(command -v "$program")" = "$venv/bin/$program" ] || { echo "FAIL: $program is not in the environment's bin/"; exit 1; }
done

if [ "$front_end" = mxnet ]; then
  # run_example.py's exit 77 (cannot import) is a failure here: MXNet was just installed.
  # One engine worker and one OpenMP thread per rank on a 2-core machine (as mxnet_tests).
  export MXNET_CPU_WORKER_NTHREADS=1 OMP_NUM_THREADS=1
  "$python" "$src/tests/python/run_example.py" "$venv/bin/troikarun" "$venv/bin/python" \
    "$src/examples/mxnet/mxnet_gluon_mnist_like.py" --np 2 --needs mxnet \
    --summary "done: mxnet_gluon_mnist_like, 2 ranks" --loss-falls --same-weights \
    || { echo "FAIL: the example failed"; exit 1; }
  elapsed "the example ran"
  echo "ok: pip install .[mxnet] works: troikarun and troika.mxnet from $venv"
  exit 0
fi

if [ "$front_end" = tensorflow ]; then
  # run_example.py's exit 77 (cannot import) is a failure here: TensorFlow was just installed.
  "$python" "$src/tests/python/run_example.py" "$venv/bin/troikarun" "$venv/bin/python" \
    "$src/examples/tensorflow2/tensorflow2_mnist_like.py" --np 2 --needs tensorflow,keras \
    --summary "tensorflow2_mnist_like done: 2 ranks, 3 epochs" --loss-falls --same-weights -- \
    --epochs 3 --num-samples 1024 || { echo "FAIL: the example failed"; exit 1; }
  elapsed "the example ran"
  echo "ok: TROIKA_WITH_TENSORFLOW=1 pip install . works: troikarun and troika.tensorflow from $venv"
  exit 0
fi

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
out=$(troikarun -np 2 -- python smoke.py 2>&1) || { echo "$out"; echo "FAIL: the job failed"; exit 1; }
echo "$out"
[ "$(echo "$out" | grep -c 'smoke: rank . of 2: sum 3.0')" = 2 ] || { echo "FAIL: not every rank reported"; exit 1; }
echo "ok: pip install . works: troikarun and troika.torch from $venv"
