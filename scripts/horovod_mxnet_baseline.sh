#!/usr/bin/env bash
# Horovod 0.28.1 built against MXNet 1.9.1 (Gloo, no MPI), the baseline of troika.mxnet's
# comparisons (bench/mxnet_bench.py's horovod column), in its own virtual environment:
#
#   scripts/horovod_mxnet_baseline.sh            # from the repository root
#   scripts/horovod_mxnet_baseline.sh --force    # rebuild Horovod even if it imports
#
# Idempotent: does nothing when VENV/bin/horovodrun exists and `import horovod.mxnet` works.
# Otherwise: makes VENV with /usr/bin/python3 -m venv (if absent), installs MXNet 1.9.1 and
# Horovod's runtime dependencies from PyPI, downloads Horovod's sdist (pip download --no-binary,
# kept in BUILD/horovod-sdist), compiles it with HOROVOD_WITH_MXNET=1, Gloo only, CPU
# operations on Gloo (the MXNet extension and Gloo: about 2.5 minutes at -j2 on the 2-core
# development machine), then checks it with a 2-rank allreduce under horovodrun --gloo.
# Needs a C++ compiler and CMake >= 3.13 (CMake from PyPI is installed into VENV when there is
# none on PATH) and PyPI; never part of the test command.
#
# Environment: BUILD (default build), VENV (default BUILD/venv-mxnet-horovod), PYTHON
# (default /usr/bin/python3), JOBS (make's -j, default 2).
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
VENV=${VENV:-$BUILD/venv-mxnet-horovod}
PYTHON=${PYTHON:-/usr/bin/python3}
JOBS=${JOBS:-2}
HOROVOD_VERSION=0.28.1
SDIST_DIR=$BUILD/horovod-sdist
SDIST=$SDIST_DIR/horovod-$HOROVOD_VERSION.tar.gz
FORCE=0
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "$0: unknown argument $arg" >&2; exit 2 ;;
  esac
done

log() { echo "horovod_mxnet_baseline: $*"; }

if [[ $FORCE == 0 && -x $VENV/bin/horovodrun ]] &&
   "$VENV/bin/python" -c "import horovod.mxnet" 2>/dev/null; then
  log "$VENV has Horovod $("$VENV/bin/python" -c 'import horovod; print(horovod.__version__)') with MXNet; nothing to do (--force rebuilds)"
  exit 0
fi

if [[ ! -x $VENV/bin/python ]]; then
  log "creating $VENV with $PYTHON"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
log "installing MXNet 1.9.1 and Horovod's dependencies into $VENV"
"${PIP[@]}" install -q mxnet==1.9.1 "numpy<1.24" cloudpickle packaging psutil pyyaml wheel
if ! command -v cmake >/dev/null; then
  log "no cmake on PATH: installing CMake from PyPI into $VENV"
  "${PIP[@]}" install -q "cmake<4"
fi

mkdir -p "$SDIST_DIR"
if [[ ! -f $SDIST ]]; then
  log "downloading Horovod $HOROVOD_VERSION's sdist into $SDIST_DIR"
  "${PIP[@]}" download -q --no-deps --no-binary :all: -d "$SDIST_DIR" "horovod==$HOROVOD_VERSION"
fi

log "building Horovod $HOROVOD_VERSION (MXNet, Gloo, no MPI) with -j$JOBS"
start=$(date +%s)
# The venv's bin first: its cmake if installed above, and the python that Horovod's CMake
# asks for MXNet's include path and library.
PATH="$(cd "$VENV/bin" && pwd):$PATH" \
  HOROVOD_WITH_MXNET=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 \
  HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_CPU_OPERATIONS=gloo MAKEFLAGS=-j$JOBS \
  "${PIP[@]}" install --no-build-isolation --no-deps --force-reinstall "$SDIST"
log "built and installed in $(( $(date +%s) - start )) s"

"$VENV/bin/horovodrun" --check-build
log "checking: horovodrun --gloo -np 2, an allreduce of [rank, rank, rank] (average 0.5)"
out=$("$VENV/bin/horovodrun" --gloo -np 2 -H localhost:2 "$VENV/bin/python" -c \
  "import horovod.mxnet as hvd, mxnet as mx; hvd.init(); print('rank', hvd.rank(), hvd.allreduce(mx.nd.ones((3,))*hvd.rank()).asnumpy())")
echo "$out"
if [[ $(grep -c "\[0.5 0.5 0.5\]" <<<"$out") != 2 ]]; then
  log "FAILED: expected [0.5 0.5 0.5] on both ranks"
  exit 1
fi
log "ok: $VENV/bin/horovodrun"
